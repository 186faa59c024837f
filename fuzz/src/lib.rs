//! Robustness checks for Quorum: real models from the conformance corpus, mutated with knowledge of
//! their structure (dims, dtypes, attributes, edges, nesting) or of their bytes, then loaded and run.
//! Any error is an acceptable answer; a panic or a hang is a bug. `tests/mutate_models.rs` drives this
//! with proptest; the cargo-fuzz target in `fuzz/cargo-fuzz/` does the same from raw bytes.
//!
//! The crate also holds the op properties: [`opgen`] generates random valid nodes of every op of the
//! accelerated set, and [`opcase::check`] judges the CPU kernel against both oracles
//! (`tests/op_properties.rs`).
#![forbid(unsafe_code)]
pub mod dags;
pub mod hb;
pub mod mutate;
pub mod opcase;
pub mod opgen;

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use quorum::{Session, SessionOptions};

/// One corpus model: its id (`part/case`) and its bytes.
#[derive(Debug, Clone)]
pub struct SeedModel {
    pub id: String,
    pub bytes: Vec<u8>,
}

/// A varied, fixed subset of the corpus: the first case (by name) of every op group in `node/` (the
/// word after `test_`), then every `simple/` model. Generates the corpus first if it is missing.
pub fn seed_models() -> Result<Vec<SeedModel>, String> {
    let dir = quorum_conformance::corpus::default_dir();
    quorum_conformance::corpus::ensure(&dir).map_err(|e| format!("corpus: {e:#}"))?;
    let mut groups: BTreeMap<String, String> = BTreeMap::new();
    for case in case_names(&dir.join("node"))? {
        let group = case
            .trim_start_matches("test_")
            .split('_')
            .next()
            .unwrap_or_default()
            .to_string();
        groups.entry(group).or_insert(case);
    }
    let mut ids: Vec<String> = groups.into_values().map(|c| format!("node/{c}")).collect();
    ids.extend(
        case_names(&dir.join("simple"))?
            .into_iter()
            .map(|c| format!("simple/{c}")),
    );
    ids.into_iter()
        .map(|id| {
            let path = dir.join(&id).join("model.onnx");
            let bytes =
                std::fs::read(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
            Ok(SeedModel { id, bytes })
        })
        .collect()
}

fn case_names(dir: &Path) -> Result<Vec<String>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("model.onnx").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    Ok(names)
}

/// What one load-and-run came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Loaded and ran.
    Ran,
    /// Refused with an error, at load, input generation or run (which is fine).
    Refused(String),
    /// Panicked: a bug.
    Panicked(String),
    /// Did not finish in time: a bug (or a model far too slow for the limits given).
    Hung,
}

/// Options small enough that mutated sizes stay cheap.
pub fn small_options() -> SessionOptions {
    SessionOptions {
        max_tensor_bytes: 64 << 20,
        max_loop_iterations: 1000,
        ..SessionOptions::default()
    }
}

/// Loads `bytes`, generates seeded inputs within the session's limits, and runs, on a thread of the
/// default stack size so that the runtime's stack needs are tested too.
pub fn load_and_run(bytes: Vec<u8>, options: SessionOptions, timeout: Duration) -> Outcome {
    let (tx, rx) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("load-and-run".into())
        .spawn(move || {
            let outcome = catch_unwind(AssertUnwindSafe(|| run_once(&bytes, options)));
            let _ = tx.send(match outcome {
                Ok(Ok(())) => Outcome::Ran,
                Ok(Err(e)) => Outcome::Refused(e.to_string()),
                Err(payload) => Outcome::Panicked(panic_message(&*payload)),
            });
        });
    if let Err(e) = spawned {
        return Outcome::Refused(format!("could not start a thread: {e}"));
    }
    rx.recv_timeout(timeout).unwrap_or(Outcome::Hung)
}

fn run_once(bytes: &[u8], options: SessionOptions) -> quorum::Result<()> {
    let limit = options.max_tensor_bytes;
    let session = Session::from_bytes(bytes, options)?;
    let graph = &session.model().graph;
    let inputs = quorum::inputs::generate_within(graph, &[], &session.options().dims, 7, limit)?;
    session.run(inputs)?;
    Ok(())
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".into()
    }
}
