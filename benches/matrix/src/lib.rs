//! Quorum's benchmark matrix and what is derived from it.
//!
//! - `cases`: what is measured (one-node models per op family at log-spaced sizes) and `light`:
//!   the real nodes of the corpus's light models.
//! - `measure`: timing one case on one provider, residency and graph mode, with its spread.
//! - `matrix`: the whole matrix with the machine, driver and commit (`matrix.json`).
//! - `extract`: per-adapter dispatch thresholds from a matrix (`reports/thresholds/<id>.json`),
//!   which `auto` placement reads (`quorum::session::thresholds`).
//! - `models`: graph-capture wins and losses per model and shape key; `auto` against the best
//!   single provider on light models and random-size chains.
//! - `outputs`: the folder one `quorum-matrix nightly` run writes, which `cargo xtask nightly`
//!   renders (on this machine, or from a folder the GPU machine produced).
//!
//! Everything runs from the release binary `quorum-matrix`, which the GPU bundle ships: the GPU
//! machine has no Rust toolchain.
#![forbid(unsafe_code)]
pub mod cases;
pub mod extract;
pub mod light;
pub mod machine;
pub mod matrix;
pub mod measure;
pub mod models;
pub mod outputs;
