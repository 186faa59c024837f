//! The CPU engine over the whole corpus (generated on first use), judged against
//! `conformance/expected/cpu.txt`: an unlisted failure, or a listed case that now passes, fails this test.
#![forbid(unsafe_code)]
use quorum_conformance::cli::{Args, run};

#[test]
fn cpu_engine_matches_its_expectation_list() {
    let args = Args {
        engines: vec!["cpu".into()],
        filter: None,
        corpus: None,
        jobs: None,
        update_expected: false,
        shard: None,
        no_report: true,
        verbose: false,
    };
    match run(args) {
        Ok(true) => {}
        Ok(false) => panic!(
            "unexpected conformance results (listed above); fix them or update conformance/expected/cpu.txt with a reason"
        ),
        Err(e) => panic!("conformance run failed: {e:#}"),
    }
}
