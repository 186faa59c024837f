//! wgpu runs in the command log (`quorum::wgpu::log`), judged by the happens-before checker on the
//! adapter present (lavapipe in CI): the random DAGs of the stream fuzzer, run twice each, must
//! log nothing the checker reports, and the one-queue bug wgpu can make
//! (`Mutant::WriteBufferIntoCollected`: a `write_buffer` into a buffer that a collected command
//! still reads, which lands ahead of that command) must be reported. One test, so that the
//! process-wide switch is never flipped under another test's feet. Where no adapter is usable the
//! test says so and passes: there is nothing to run wgpu on.
#![forbid(unsafe_code)]
use quorum::mutants::{Mutant, inject};
use quorum::{Provider, Session, SessionOptions};
use quorum_fuzz::{dags, hb};

/// Cases tried before giving up on the mutant.
const BUDGET: usize = 60;

/// Runs cases until the checker reports something: (cases, commands, first report).
fn hunt() -> (usize, usize, Option<String>) {
    let mut commands = 0;
    for case in 0..BUDGET {
        let seed = 1000 + case as u64;
        let dag = dags::generate(seed, 10 + (case % 20));
        let options = SessionOptions {
            providers: vec![Provider::Wgpu, Provider::Cpu],
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
fn wgpu_runs_log_cleanly_and_a_write_ahead_of_a_collected_read_is_caught() {
    if let Err(why) = quorum::Availability::available(Provider::Wgpu) {
        eprintln!("no wgpu adapter here, wgpu runs are not checked: {why}");
        return;
    }
    inject(None);
    let (cases, commands, found) = hunt();
    assert_eq!(found, None, "the unmutated wgpu build reported a race");
    assert!(commands > 0, "wgpu runs logged nothing");
    eprintln!("wgpu unmutated: {cases} cases, {commands} commands, no report");
    inject(Some(Mutant::WriteBufferIntoCollected));
    let (cases, commands, found) = hunt();
    inject(None);
    let report = found.unwrap_or_else(|| {
        panic!("WriteBufferIntoCollected not caught in {cases} cases ({commands} commands)")
    });
    eprintln!("MUTANT WriteBufferIntoCollected: caught after {cases} case(s): {report}");
}
