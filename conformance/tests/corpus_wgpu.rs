//! The wgpu engine over the whole corpus, judged against `conformance/expected/wgpu.txt`: every
//! node wgpu claims runs on the adapter wgpu picks (lavapipe in CI, where it is the only one), the
//! CPU runs the rest. Where no adapter is usable the test says so and passes: there is nothing to
//! run the engine on.
#![forbid(unsafe_code)]
use quorum_conformance::cli::{Args, run};

#[test]
fn wgpu_engine_matches_its_expectation_list() {
    if let Err(why) = quorum::Availability::available(quorum::Provider::Wgpu) {
        eprintln!("no wgpu adapter here, the wgpu engine is not run: {why}");
        return;
    }
    let args = Args {
        engines: vec!["wgpu".into()],
        filter: std::env::var("QUORUM_WGPU_CONFORMANCE_FILTER").ok(),
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
            "unexpected conformance results (listed above); fix them or update conformance/expected/wgpu.txt with a reason"
        ),
        Err(e) => panic!("conformance run failed: {e:#}"),
    }
}
