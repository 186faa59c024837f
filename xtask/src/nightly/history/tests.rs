use super::*;

/// A seeded generator for noisy nights (xorshift).
struct Noise(u64);

impl Noise {
    /// Uniform in [-1, 1).
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }

    /// A night of a model whose true latency is `ms`: the median wanders ±4% night to night,
    /// each night's own spread is ±5% around it.
    fn night(&mut self, ms: f64) -> ModelLatency {
        let median = ms * (1.0 + 0.04 * self.next());
        ModelLatency {
            model: "m".into(),
            provider: "cpu".into(),
            median_ms: median,
            p10_ms: median * 0.95,
            p90_ms: median * 1.05,
        }
    }
}

fn rule() -> Rule {
    Rule::default()
}

#[test]
fn an_injected_regression_is_caught() {
    let mut noise = Noise(0x9e37_79b9_7f4a_7c15);
    for _ in 0..50 {
        let before: Vec<ModelLatency> = (0..7).map(|_| noise.night(10.0)).collect();
        let refs: Vec<&ModelLatency> = before.iter().collect();
        // 25% slower, with tonight's own noise.
        let now = noise.night(12.5);
        let why = latency_regression(&rule(), &refs, &now).expect("a 25% step is a regression");
        assert!(why.starts_with("m on cpu: median"), "{why}");
    }
}

#[test]
fn noise_alone_never_fires_though_naive_rules_do() {
    let mut noise = Noise(42);
    let (mut naive_pct, mut naive_spread) = (0, 0);
    for _ in 0..500 {
        let before: Vec<ModelLatency> = (0..7).map(|_| noise.night(10.0)).collect();
        let refs: Vec<&ModelLatency> = before.iter().collect();
        let now = noise.night(10.0);
        assert_eq!(
            latency_regression(&rule(), &refs, &now),
            None,
            "{now:?} against {before:?}"
        );
        // The broken variants: "worse than last night by more than 5%" and "above the last
        // nights' medians" both fire on the same noise.
        if now.median_ms > before[6].median_ms * 1.05 {
            naive_pct += 1;
        }
        if refs.iter().all(|b| now.median_ms > b.median_ms) {
            naive_spread += 1;
        }
    }
    assert!(
        naive_pct > 0 && naive_spread > 0,
        "{naive_pct} {naive_spread}"
    );
}

#[test]
fn too_little_history_judges_nothing_and_old_nights_fall_out_of_the_window() {
    let night = |median: f64| ModelLatency {
        model: "m".into(),
        provider: "cuda".into(),
        median_ms: median,
        p10_ms: median * 0.98,
        p90_ms: median * 1.02,
    };
    let two = [night(1.0), night(1.0)];
    let refs: Vec<&ModelLatency> = two.iter().collect();
    assert_eq!(latency_regression(&rule(), &refs, &night(5.0)), None);
    // Slow nights long ago, fast recent ones: judged against the recent ones.
    let mut long: Vec<ModelLatency> = (0..5).map(|_| night(3.0)).collect();
    long.extend((0..7).map(|_| night(1.0)));
    let refs: Vec<&ModelLatency> = long.iter().collect();
    assert!(latency_regression(&rule(), &refs, &night(2.0)).is_some());
}

fn record(date: &str, ms: f64, pass: u64) -> Record {
    Record {
        date: date.into(),
        commit: "c".into(),
        adapter_id: "cpu-test".into(),
        cpu: "test".into(),
        quick: true,
        models: vec![ModelLatency {
            model: "squeezenet".into(),
            provider: "cpu".into(),
            median_ms: ms,
            p10_ms: ms * 0.97,
            p90_ms: ms * 1.03,
        }],
        conformance: vec![EngineCounts {
            engine: "cpu".into(),
            pass,
            fail: 0,
            unsupported: 0,
            nondeterministic: 0,
            total: pass,
        }],
        graphs: vec![],
        crossovers: vec![],
        regressions: vec![],
    }
}

#[test]
fn records_compare_with_their_own_adapter_and_conformance_drops_are_named() {
    let history: Vec<Record> = (1..=5)
        .map(|d| record(&format!("2026-11-0{d}"), 10.0, 100))
        .collect();
    assert!(regressions(&rule(), &history, &record("2026-11-06", 10.1, 100)).is_empty());
    let found = regressions(&rule(), &history, &record("2026-11-06", 14.0, 99));
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].starts_with("squeezenet on cpu"));
    assert!(found[1].contains("99 cases pass, 100 the night before"));
    // Another adapter's history is not this one's.
    let mut other = record("2026-11-06", 14.0, 99);
    other.adapter_id = "cuda-other".into();
    assert!(regressions(&rule(), &history, &other).is_empty());
}

#[test]
fn a_night_run_twice_keeps_one_record() {
    let dir = std::env::temp_dir().join(format!("quorum-history-{}", std::process::id()));
    let path = dir.join("history.jsonl");
    let _ = std::fs::remove_file(&path);
    write_with(&path, read(&path).unwrap(), &record("2026-11-01", 1.0, 1)).unwrap();
    write_with(&path, read(&path).unwrap(), &record("2026-11-02", 1.0, 1)).unwrap();
    write_with(&path, read(&path).unwrap(), &record("2026-11-02", 2.0, 1)).unwrap();
    let all = read(&path).unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[1].models[0].median_ms, 2.0);
    let _ = std::fs::remove_dir_all(&dir);
}
