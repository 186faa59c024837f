//! Race-injection mutants: each injected synchronisation bug (`quorum::mutants`) must be caught by
//! the happens-before checker on command logs of the simulated device running random DAGs on
//! several streams, and the unmutated build must give no report over the same cases. One test, so
//! that the process-wide switch is never flipped under another test's feet. The simulated device
//! runs the run protocol CUDA runs (`quorum::device::protocol`), so a bug injected there is the
//! same bug on both; it captures graphs as CUDA does, and the replay mutants
//! (`Mutant::needs_capture`) are hunted with capture on. What a run does after a failed
//! synchronisation is hunted with failures injected into the simulated device's
//! synchronisations.
#![forbid(unsafe_code)]
use std::time::Instant;

use quorum::mutants::{Mutant, fail_syncs_from, inject};
use quorum::session::GraphCapture;
use quorum::{Provider, Session, SessionOptions};
use quorum_fuzz::{dags, hb};

/// Cases (DAG × stream count) tried per mutant before giving up.
const BUDGET: usize = 200;

/// How a hunt runs each case's session.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Hunt {
    /// Two runs one after the other; each log checked, and both together (each run its own host).
    Sequential,
    /// The same, with every run's synchronisations failing from its first, second or third on
    /// (the runs end in an error).
    FailingSyncs,
    /// Three threads running two runs each at once; the session's log checked as issued.
    Concurrent,
    /// Graph capture on: warm-up runs, a capture, then replays on other inputs, one after the
    /// other; each log checked, and all together.
    Replays,
}

/// Runs cases until the checker reports something; returns (cases run, commands checked, the
/// first report) — `None` when the budget ran out without one.
fn hunt(how: Hunt) -> (usize, usize, Option<String>) {
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
            graph_capture: if how == Hunt::Replays {
                GraphCapture::On
            } else {
                GraphCapture::Off
            },
            ..Default::default()
        };
        let s = Session::from_bytes(&dag.bytes, options).unwrap();
        let failing = how == Hunt::FailingSyncs;
        fail_syncs_from(if failing { 1 + seed % 3 } else { 0 });
        if how == Hunt::Concurrent {
            std::thread::scope(|scope| {
                for _ in 0..3 {
                    scope.spawn(|| {
                        for _ in 0..2 {
                            s.run(dag.inputs.clone()).unwrap();
                        }
                    });
                }
            });
            let all = s.take_session_log();
            commands += all.len();
            let r = hb::check_session(&all, 1);
            if !r.is_clean() {
                return (case + 1, commands, r.first());
            }
            continue;
        }
        let runs = if how == Hunt::Replays { 6 } else { 2 };
        for r in 0..runs {
            let ran = s.run(dags::variant(&dag.inputs, r % 2));
            assert!(failing || ran.is_ok(), "{:?}", ran.err());
        }
        fail_syncs_from(0);
        let logs = s.take_command_logs();
        for log in &logs {
            commands += log.len();
            let r = hb::check(log, 1);
            if !r.is_clean() {
                return (case + 1, commands, r.first());
            }
        }
        let r = hb::check_runs(&logs, 1);
        if !r.is_clean() {
            return (case + 1, commands, r.first());
        }
    }
    (BUDGET, commands, None)
}

#[test]
fn every_injected_race_is_caught_and_the_clean_build_reports_nothing() {
    inject(None);
    for how in [
        Hunt::Sequential,
        Hunt::FailingSyncs,
        Hunt::Concurrent,
        Hunt::Replays,
    ] {
        let (cases, commands, found) = hunt(how);
        assert_eq!(
            found, None,
            "the unmutated build reported a race after {cases} cases ({how:?})"
        );
        eprintln!("unmutated ({how:?}): {cases} cases, {commands} commands, no report");
    }
    let mut missed = Vec::new();
    for m in Mutant::ALL {
        if m.wgpu_only() {
            // A wgpu bug: the wgpu hunt (`wgpu_log.rs`) catches it.
            continue;
        }
        let how = match m {
            _ if m.needs_capture() => Hunt::Replays,
            Mutant::StagingAfterFailedSync => Hunt::FailingSyncs,
            // Within a run the executor orders a weight's readers after its upload; another run
            // at the same time has only the weight cache to order it.
            Mutant::WeightUnsynced => Hunt::Concurrent,
            _ => Hunt::Sequential,
        };
        inject(Some(m));
        let t = Instant::now();
        let (cases, commands, found) = hunt(how);
        inject(None);
        match found {
            Some(report) => eprintln!(
                "MUTANT {m:?}: caught after {cases} case(s) ({how:?}), {commands} commands, \
                 {:.2} s: {report}",
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
