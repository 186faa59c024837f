//! The device stream fuzzer (`cargo xtask fuzz-streams`, the GPU bundle's `run.sh fuzz`): random DAG
//! models run on CUDA with random stream counts, threads, graph capture and spin kernels injected on
//! random streams; every result must equal the one-stream run bit for bit and every run's command log
//! must pass the happens-before checker. With the `mutants` feature, each injected synchronisation
//! bug is hunted by both the checker and the comparison.
use std::time::{Duration, Instant};

use quorum::inputs::Rng;
use quorum::session::GraphCapture;
use quorum::{Provider, Session, SessionOptions, Value};
use quorum_fuzz::{dags, hb};

use crate::harness::on_cpu;

fn seconds() -> u64 {
    std::env::var("QUORUM_FUZZ_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30)
}

/// This runner's part of the fuzz seeds: `QUORUM_FUZZ_SHARD=I/N` (1 ≤ I ≤ N) takes every N-th
/// case from the I-th, so N runners fuzz disjoint seeds; unset, `1/1`. A malformed value is an error,
/// not a silent whole run.
fn shard() -> (u64, u64) {
    match std::env::var("QUORUM_FUZZ_SHARD") {
        Err(_) => (1, 1),
        Ok(v) => parse_shard(&v)
            .unwrap_or_else(|| panic!("QUORUM_FUZZ_SHARD '{v}': write I/N, 1 <= I <= N")),
    }
}

fn parse_shard(v: &str) -> Option<(u64, u64)> {
    let (i, n) = v.split_once('/')?;
    let (i, n) = (i.trim().parse().ok()?, n.trim().parse().ok()?);
    (1 <= i && i <= n).then_some((i, n))
}

/// The seed of this shard's `k`-th case.
fn seed_of(base: u64, k: u64, (i, n): (u64, u64)) -> u64 {
    base + k * n + (i - 1)
}

/// Shards cut the seeds into disjoint parts that together are every seed.
#[test]
fn fuzz_shards_are_disjoint_and_cover_the_seeds() {
    assert_eq!(parse_shard("2/3"), Some((2, 3)));
    for bad in ["0/3", "4/3", "x/2", "3"] {
        assert_eq!(parse_shard(bad), None, "{bad}");
    }
    let n = 3;
    let mut all: Vec<u64> = (1..=n)
        .flat_map(|i| (0..10).map(move |k| seed_of(100, k, (i, n))))
        .collect();
    all.sort();
    assert_eq!(all, (100..130).collect::<Vec<_>>());
}

/// Spin kernels before launches (read by each run as it starts).
fn delays(seed: Option<u64>) {
    // SAFETY: changing the environment is sound only while no other thread reads or writes it.
    // This test is ignored and its runners select it alone (`--ignored --exact fuzz_streams::…` in
    // gpu_run.sh and `cargo xtask fuzz-streams`), so no other test thread exists; it is called
    // between runs, when the sessions' worker threads are idle, and the runtime reads the variable
    // through `std::env`, which takes std's environment lock. What remains trusted is that no
    // foreign thread (the CUDA driver's own) calls libc's getenv at that moment. Running every
    // ignored test at once (`-- --ignored` without `--exact`) breaks the first premise.
    unsafe {
        match seed {
            Some(s) => std::env::set_var("QUORUM_FUZZ_DELAYS", s.to_string()),
            None => std::env::remove_var("QUORUM_FUZZ_DELAYS"),
        }
    }
}

fn bits(vs: &[(String, Value)]) -> Vec<Vec<u64>> {
    vs.iter()
        .map(|(_, v)| {
            v.as_tensor()
                .unwrap()
                .to_f64_vec()
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect()
        })
        .collect()
}

/// What one case found, by each judge separately: the comparison (a result that differs from the
/// one-stream run, or a one-stream run the oracles reject) and the happens-before checker.
#[derive(Default)]
struct Found {
    commands: usize,
    differs: Option<String>,
    races: Option<String>,
}

fn case(seed: u64) -> Found {
    let mut rng = Rng::new(seed);
    let mut pick = |n: usize| (rng.uniform().abs() * n as f64) as usize % n;
    let dag = dags::generate(seed, 8 + pick(40));
    let (streams, threads) = ([1, 2, 3, 4, 8][pick(5)], 1 + pick(3));
    let graph = if pick(3) == 0 {
        GraphCapture::On
    } else {
        GraphCapture::Off
    };
    delays(None);
    let one = Session::from_bytes(
        &dag.bytes,
        SessionOptions {
            providers: vec![Provider::Cuda, Provider::Cpu],
            // The reference itself is judged against the oracles, node by node.
            verify: quorum::VerifyMode::Strict,
            ..Default::default()
        },
    )
    .unwrap();
    let mut found = Found::default();
    // Four inputs of the same shapes (a replay must follow each), with their one-stream results.
    type Inputs = Vec<(String, Value)>;
    let variants: Vec<(Inputs, Vec<Vec<u64>>)> = (0..4u64)
        .map(|v| {
            let inputs: Inputs = dags::variant(&dag.inputs, v);
            let want = match one.run(inputs.clone()) {
                Ok(o) => bits(&o),
                Err(e) => {
                    found
                        .differs
                        .get_or_insert(format!("seed {seed}: one stream: {e}"));
                    Vec::new()
                }
            };
            (inputs, want)
        })
        .collect();
    delays(Some(seed));
    let s = Session::from_bytes(
        &dag.bytes,
        SessionOptions {
            providers: vec![Provider::Cuda, Provider::Cpu],
            streams,
            graph_capture: graph,
            // Captured runs and replays are logged too.
            command_log: true,
            ..Default::default()
        },
    )
    .unwrap();
    let what = format!("seed {seed}: {streams} streams, {threads} threads, graph {graph:?}");
    let mut differs = found.differs.take();
    std::thread::scope(|scope| {
        let (s, variants) = (&s, &variants);
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                // Threads at once run different inputs: runs sharing something they must not
                // (a graph's fixed buffers) then give wrong results, not equal ones.
                scope.spawn(move || {
                    (0..8)
                        .map(|r| {
                            let (inputs, want) = &variants[(r + t) % variants.len()];
                            s.run(inputs.clone()).is_ok_and(|o| bits(&o) == *want)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            for same in h.join().unwrap() {
                if !same && differs.is_none() {
                    differs = Some(format!("{what}: a result differs from one stream"));
                }
            }
        }
    });
    delays(None);
    found.differs = differs;
    for log in s.take_command_logs() {
        found.commands += log.len();
        let r = hb::check(&log, 1);
        if !r.is_clean() && found.races.is_none() {
            let first = r.first().unwrap_or_default();
            found.races = Some(format!("{what}: {first}"));
        }
    }
    // Every run of the session together, as the threads issued them (each run its own host,
    // ordered with the others through the pools and the weight cache).
    let all = s.take_session_log();
    let r = hb::check_session(&all, 1);
    if !r.is_clean() && found.races.is_none() {
        let first = r.first().unwrap_or_default();
        found.races = Some(format!("{what}, the runs together: {first}"));
    }
    found
}

#[test]
#[ignore = "the device stream fuzzer: run with --ignored on a GPU machine"]
fn fuzz_streams() {
    if on_cpu() {
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(seconds());
    let (mut cases, mut commands) = (0u64, 0usize);
    let start = Instant::now();
    let part = shard();
    while Instant::now() < deadline {
        let f = case(seed_of(0x5eed_0000, cases, part));
        commands += f.commands;
        cases += 1;
        assert!(f.differs.is_none(), "{}", f.differs.unwrap());
        assert!(f.races.is_none(), "{}", f.races.unwrap());
    }
    println!(
        "FUZZ streams (shard {}/{}): {cases} cases, {commands} commands checked, {:.0} s, 0 reports",
        part.0,
        part.1,
        start.elapsed().as_secs_f64()
    );
}

#[cfg(feature = "mutants")]
#[test]
#[ignore = "the mutant hunt on the device: run with --ignored on a GPU machine"]
fn fuzz_streams_mutants() {
    use quorum::mutants::{Mutant, inject};
    if on_cpu() {
        return;
    }
    let budget = Duration::from_secs(seconds());
    // First detection by each judge: (cases, seconds, what).
    let show = |judge: &str, first: &Option<(u64, f64, String)>, cases: u64, secs: f64| match first
    {
        Some((c, t, f)) => format!("{judge} caught after {c} case(s), {t:.1} s: {f}"),
        None => format!("{judge} not observed in {cases} case(s), {secs:.0} s"),
    };
    // Each mutant in a process of its own: corrupted data can make a kernel fault, which leaves the
    // CUDA context unusable (a sticky error), and every later mutant of the same process would be
    // "caught" by that error alone (seen on the H100, 2026-12-05: after StagingReuse, five mutants
    // failed their first case with CUDA_ERROR_INVALID_ADDRESS_SPACE and were never hunted).
    let Ok(only) = std::env::var("QUORUM_MUTANTS") else {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut missed = Vec::new();
        for m in Mutant::ALL {
            if let Some(why) = m.off_device() {
                println!("MUTANT {m:?}: not hunted on the device: {why}");
                continue;
            }
            let out = std::process::Command::new(&exe)
                .args(["--ignored", "--exact", "fuzz_streams::fuzz_streams_mutants"])
                .args(["--nocapture", "--test-threads=1"])
                .env("QUORUM_MUTANTS", format!("{m:?}"))
                .output()
                .expect("the mutant's process");
            let text = String::from_utf8_lossy(&out.stdout);
            for line in text.lines().filter(|l| l.contains("MUTANT ")) {
                println!("{}", &line[line.find("MUTANT ").unwrap_or(0)..]);
            }
            if !out.status.success() {
                missed.push(m);
            }
        }
        assert!(
            missed.is_empty(),
            "not caught within {} s each: {missed:?}",
            budget.as_secs()
        );
        return;
    };
    let mut missed = Vec::new();
    for m in Mutant::ALL {
        if !only.split(',').any(|n| n == format!("{m:?}")) {
            continue;
        }
        inject(Some(m));
        let start = Instant::now();
        let mut cases = 0u64;
        let (mut differs, mut races) = (None, None);
        while start.elapsed() < budget && (differs.is_none() || races.is_none()) {
            // A panic (a kernel reading garbage) counts as a caught difference.
            let f =
                std::panic::catch_unwind(|| case(0xbad_0000 + cases)).unwrap_or_else(|_| Found {
                    differs: Some("the run panicked".into()),
                    ..Found::default()
                });
            cases += 1;
            let t = start.elapsed().as_secs_f64();
            if differs.is_none() {
                differs = f.differs.map(|w| (cases, t, w));
            }
            if races.is_none() {
                races = f.races.map(|w| (cases, t, w));
            }
            // A device error may be sticky (the context is lost): later cases would prove
            // nothing. The fault is the catch, reported as the comparison's.
            if differs
                .as_ref()
                .is_some_and(|(_, _, w)| w.contains("device error"))
            {
                break;
            }
        }
        inject(None);
        let secs = start.elapsed().as_secs_f64();
        println!("MUTANT {m:?}: {}", show("checker", &races, cases, secs));
        println!(
            "MUTANT {m:?}: {}",
            show("comparison", &differs, cases, secs)
        );
        if races.is_none() && differs.is_none() {
            missed.push(m);
        }
    }
    // The hunt is a test: every injected bug must be caught by the checker or the comparison
    // within its budget.
    assert!(
        missed.is_empty(),
        "not caught within {} s each: {missed:?}",
        budget.as_secs()
    );
}
