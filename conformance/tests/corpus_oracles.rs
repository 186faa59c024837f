//! The oracle engines over the whole corpus (generated on first use), each judged against its own list
//! (`conformance/expected/oracle-reference.txt`, `oracle-independent.txt`), and the two oracles judged
//! against each other node by node: wherever both cover a node, given the same inputs they must agree
//! to within f64 rounding (`arbitrate::C_ORACLES`), or a human must settle which one is wrong.
#![forbid(unsafe_code)]
use std::panic::AssertUnwindSafe;

use quorum_conformance::cli::{Args, run};
use quorum_conformance::engine::EngineError;
use quorum_conformance::{case, corpus, oracle_engine};
use rayon::prelude::*;

fn engine_matches_its_list(engine: &str) {
    let args = Args {
        engines: vec![engine.into()],
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
            "unexpected conformance results (listed above); fix them or update conformance/expected/{engine}.txt with a reason"
        ),
        Err(e) => panic!("conformance run failed: {e:#}"),
    }
}

#[test]
fn oracle_reference_engine_matches_its_expectation_list() {
    engine_matches_its_list("oracle-reference");
}

#[test]
fn oracle_independent_engine_matches_its_expectation_list() {
    engine_matches_its_list("oracle-independent");
}

#[test]
fn oracles_agree_on_every_corpus_node_both_cover() {
    let dir = corpus::default_dir();
    corpus::ensure(&dir).expect("corpus");
    let cases = case::discover(&dir).expect("cases");
    let results: Vec<(String, Result<usize, String>)> = cases
        .par_iter()
        .map(|c| {
            let r = std::panic::catch_unwind(AssertUnwindSafe(|| -> Result<usize, String> {
                let model = quorum::loader::model_from_file(&c.model_path(), &Default::default())
                    .map_err(|e| e.to_string())?;
                let sets = case::data_sets(c, &model).map_err(|e| format!("{e:#}"))?;
                let mut compared = 0;
                for set in sets {
                    match oracle_engine::compare_oracles(&c.model_path(), set.inputs) {
                        Ok(found) if found.is_empty() => compared += 1,
                        Ok(found) => {
                            return Err(found
                                .iter()
                                .map(|d| format!("node '{}' ({}): {}", d.node, d.op, d.what))
                                .collect::<Vec<_>>()
                                .join("; "));
                        }
                        // Not covered by both, or rejected by both: nothing to compare.
                        Err(
                            EngineError::Unsupported(_)
                            | EngineError::Uncovered(_)
                            | EngineError::Failed(_),
                        ) => {}
                    }
                }
                Ok(compared)
            }));
            let r = r.unwrap_or_else(|p| {
                Err(format!(
                    "PANIC: {}",
                    p.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default()
                ))
            });
            (c.id.clone(), r)
        })
        .collect();
    let compared: usize = results.iter().filter_map(|(_, r)| r.as_ref().ok()).sum();
    let bad: Vec<String> = results
        .iter()
        .filter_map(|(id, r)| r.as_ref().err().map(|e| format!("{id}: {e}")))
        .collect();
    eprintln!("compared the oracles on {compared} data sets");
    assert!(
        bad.is_empty(),
        "the oracles disagree ({} cases):\n{}",
        bad.len(),
        bad.join("\n")
    );
    assert!(compared > 900, "only {compared} data sets compared");
}
