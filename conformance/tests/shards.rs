//! A sharded run joins into exactly the single run's verdicts: a slice of the corpus run whole and in
//! four shards (as CI splits it) on the CPU engine, the shards' partial reports written and read back and merged, gives
//! the same outcomes (id, status, detail, ops, coverage) in the same order and the same summary. The
//! merge refuses a missing shard, a shard given twice, shards of two different splits and a case in
//! two shards.
#![forbid(unsafe_code)]
use quorum_conformance::case;
use quorum_conformance::engine;
use quorum_conformance::report::EngineReport;
use quorum_conformance::runner::{self, Outcome};
use quorum_conformance::shard::{Shard, ShardReport, merge};

fn key(o: &Outcome) -> (String, &'static str, String, Vec<String>, String) {
    (
        o.id.clone(),
        o.status,
        o.detail.clone(),
        o.ops.clone(),
        format!("{:?}", o.coverage),
    )
}

#[test]
fn shards_join_into_the_single_runs_verdicts() {
    let dir = quorum_conformance::corpus::default_dir();
    quorum_conformance::corpus::ensure(&dir).unwrap();
    let pick = regex::Regex::new("^node/test_(add|relu|softmax|gather|cast_FLOAT_to)").unwrap();
    let cases: Vec<_> = case::discover(&dir)
        .unwrap()
        .into_iter()
        .filter(|c| pick.is_match(&c.id))
        .collect();
    assert!(cases.len() >= 20, "{} cases", cases.len());
    let cpu = engine::by_name("cpu").unwrap();
    let never = |_: &str| false;
    let run = |cs: &[case::Case]| runner::run_all(cpu.as_ref(), cs, &never, 2, &|_| {});
    let single = run(&cases);

    let tmp = std::env::temp_dir().join(format!("quorum-shards-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let n = 4;
    let mut parts = Vec::new();
    for index in 1..=n {
        let shard: Shard = format!("{index}/{n}").parse().unwrap();
        let part = ShardReport {
            engine: "cpu".into(),
            device: "here".into(),
            shard,
            corpus_cases: cases.len(),
            environment: None,
            outcomes: run(&shard.select(&cases)),
        };
        let path = part.write(&tmp).unwrap();
        parts.push(ShardReport::read(&path).unwrap());
    }
    let merged = merge(parts.clone()).unwrap();
    assert_eq!(merged.len(), 1);
    let joined = &merged[0].outcomes;
    let a: Vec<_> = single.iter().map(key).collect();
    let b: Vec<_> = joined.iter().map(key).collect();
    assert_eq!(a, b);
    let report = |o: &[Outcome]| {
        EngineReport {
            engine: "cpu",
            device: "here".into(),
            outcomes: o,
            environment: None,
        }
        .markdown()
    };
    assert_eq!(report(&single), report(joined));

    // The broken sets.
    let without = |i: usize| -> Vec<ShardReport> {
        parts
            .iter()
            .filter(|p| p.shard.index != i)
            .cloned()
            .collect()
    };
    let err = |ps: Vec<ShardReport>| merge(ps).unwrap_err().to_string();
    assert!(
        err(without(2)).contains("missing [2]"),
        "{}",
        err(without(2))
    );
    let mut twice = without(3);
    twice.push(parts[0].clone());
    assert!(err(twice).contains("missing [3]"));
    let mut other_split = parts.clone();
    other_split[1].shard = Shard {
        index: 2,
        count: n + 1,
    };
    assert!(err(other_split).contains("different runs"));
    let mut overlap = parts.clone();
    let stray = overlap[0].outcomes[0].clone();
    overlap[1].outcomes.push(stray);
    overlap[1].corpus_cases = cases.len();
    assert!(err(overlap).contains("in two shards"));
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn shard_specs_parse_and_cut_the_corpus_into_disjoint_parts() {
    for bad in ["0/3", "4/3", "1/0", "x/2", "2", "1/2/3"] {
        assert!(bad.parse::<Shard>().is_err(), "{bad}");
    }
    let s: Shard = "2/5".parse().unwrap();
    assert_eq!((s.index, s.count, s.to_string()), (2, 5, "2/5".to_string()));
}
