//! The conformance suite: the official ONNX backend test corpus (and Quorum's own regression cases) run
//! on every engine, each judged against its own expectation list.
//!
//! A suite is written once ([`case`]); each engine ([`engine`]) runs it; the tolerance policy lives in
//! [`tolerance`]; what may fail, and why, lives in `expected/<engine>.txt` ([`expect`]).
#![forbid(unsafe_code)]

pub mod arbitrate;
pub mod case;
pub mod cli;
pub mod corpus;
pub mod coverage;
pub mod engine;
pub mod expect;
pub mod integrity;
pub mod nondeterministic;
pub mod oracle_engine;
pub mod pyenv;
pub mod report;
pub mod runner;
pub mod shard;
pub mod tolerance;
pub mod undefined;

use std::path::PathBuf;

/// The repository root (the workspace that holds this crate).
pub fn workspace_root() -> PathBuf {
    // A bundle copied to another machine (the GPU runner) names its root; a build finds its own.
    if let Some(root) = std::env::var_os("QUORUM_ROOT") {
        return PathBuf::from(root);
    }
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default();
    if built.join("conformance").is_dir() {
        built
    } else {
        std::env::current_dir().unwrap_or(built)
    }
}
