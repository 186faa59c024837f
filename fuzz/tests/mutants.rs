//! Race-injection mutants: each injected synchronisation bug (`quorum::mutants`) must be caught by
//! the happens-before checker on command logs of the simulated device running random DAGs on
//! several streams, and the unmutated build must give no report over the same cases. One test, so
//! that the process-wide switch is never flipped under another test's feet. The stale-replay
//! mutant is the exception: the simulated device captures no graph, and the device fuzzer's
//! replay-against-eager comparison catches it (`device-tests/tests/gpu/fuzz_streams.rs`).
#![forbid(unsafe_code)]
use std::time::Instant;

use quorum::mutants::{Mutant, inject};
use quorum::{Provider, Session, SessionOptions};
use quorum_fuzz::{dags, hb};

/// Cases (DAG × stream count) tried per mutant before giving up.
const BUDGET: usize = 200;

/// Runs cases until the checker reports something; returns (cases run, commands checked, the
/// first report) — `None` when the budget ran out without one.
fn hunt() -> (usize, usize, Option<String>) {
    let mut commands = 0;
    for case in 0..BUDGET {
        let seed = case as u64 / 2;
        let streams = [2, 4][case % 2];
        let dag = dags::generate(seed, 10 + (seed as usize % 25));
        let options = SessionOptions {
            providers: vec![Provider::Sim, Provider::Cpu],
            streams,
            command_log: true,
            poison_device_buffers: Some(0xff),
            ..Default::default()
        };
        let s = Session::from_bytes(&dag.bytes, options).unwrap();
        for _ in 0..2 {
            s.run(dag.inputs.clone()).unwrap();
        }
        for log in s.take_command_logs() {
            commands += log.len();
            let r = hb::check(&log, 1);
            if !r.is_clean() {
                return (case + 1, commands, r.first());
            }
        }
    }
    (BUDGET, commands, None)
}

#[test]
fn every_injected_race_is_caught_and_the_clean_build_reports_nothing() {
    inject(None);
    let (cases, commands, found) = hunt();
    assert_eq!(
        found, None,
        "the unmutated build reported a race after {cases} cases"
    );
    eprintln!("unmutated: {cases} cases, {commands} commands, no report");
    let mut missed = Vec::new();
    for m in Mutant::ALL {
        if m == Mutant::StaleReplayInput {
            // Inside a graph replay, which the simulated device does not capture: the device
            // fuzzer's replay-against-eager comparison is what catches it.
            continue;
        }
        inject(Some(m));
        let t = Instant::now();
        let (cases, commands, found) = hunt();
        inject(None);
        match found {
            Some(report) => eprintln!(
                "MUTANT {m:?}: caught after {cases} case(s), {commands} commands, {:.2} s: {report}",
                t.elapsed().as_secs_f64()
            ),
            None => missed.push(m),
        }
    }
    assert!(
        missed.is_empty(),
        "not caught within {BUDGET} cases: {missed:?}"
    );
}
