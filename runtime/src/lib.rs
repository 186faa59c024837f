//! Quorum: a pure-Rust ONNX inference runtime.
//!
//! Load a model with [`Session::from_file`] or [`Session::from_bytes`], then call [`Session::run`].
//!
//! This crate is the top of the crate graph: the session (executor, schedule, placement, capture),
//! the graph optimiser, the registry of backends, and the `quorum` CLI. What a backend builds on is
//! `quorum-core`, re-exported here module by module so that one path (`quorum::ops`, `quorum::ir`)
//! names each item whichever crate defines it; the backends are `quorum-cuda`, `quorum-wgpu` and
//! `quorum-sim`, re-exported as [`cuda`], [`wgpu`] and [`sim`].
#![forbid(unsafe_code)]

pub use quorum_core::{
    arena, backend, clock, cmdlog, counters, device, error, freelist, heap, inputs, ir, loader,
    mutants, npy, ops, opsets, output_files, pb, plan, proto, tensor, verify, weights,
};
#[cfg(feature = "cuda")]
pub use quorum_cuda as cuda;
pub use quorum_sim as sim;
#[cfg(feature = "wgpu")]
pub use quorum_wgpu as wgpu;

pub mod compare;
mod fold;
pub mod generate;
pub mod mixed;
pub mod optimize;
pub mod providers;
pub mod session;

pub use backend::{Precision, Provider};
pub use counters::CounterSnapshot;
pub use error::{Error, OpError, Result};
pub use providers::{Availability, parse_providers};
pub use quorum_core::{DEFAULT_MAX_LOOP_ITERATIONS, DEFAULT_MAX_TENSOR_BYTES};
pub use session::{NodePlacement, Session, SessionOptions};
pub use tensor::{DType, Tensor, Value};
pub use verify::VerifyMode;
