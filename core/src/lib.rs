//! Quorum's core: everything a backend builds on and nothing that names one.
//!
//! The ONNX model ([`ir`], [`loader`], [`proto`]), tensors ([`tensor`]), the CPU kernels with the op
//! semantics every engine shares ([`ops`]), the execution plan ([`plan`]), the backend seam
//! ([`backend`]), the device layer CUDA and wgpu share ([`device`]), the command log and its checker
//! ([`cmdlog`]), and verification against the oracles ([`verify`]). The session, the graph optimiser
//! and the registry of backends live above the backends, in the `quorum` crate.

pub mod arena;
pub mod backend;
pub mod clock;
pub mod cmdlog;
pub mod counters;
pub mod device;
pub mod error;
pub mod freelist;
pub mod heap;
pub mod inputs;
pub mod ir;
pub mod loader;
pub mod mutants;
pub mod npy;
pub mod ops;
pub mod opsets;
pub mod output_files;
pub mod pb;
pub mod pinned;
pub mod plan;
pub mod tensor;
pub mod verify;
pub mod weights;

/// The ONNX schema, generated at build time from `proto/onnx.proto`.
#[allow(clippy::all, missing_docs)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/onnx.rs"));
}

pub use backend::Provider;
pub use counters::CounterSnapshot;
pub use error::{Error, OpError, Result};
pub use tensor::{DType, Tensor, Value};
pub use verify::VerifyMode;

/// Default for a session's `max_tensor_bytes`: 16 GiB, above any real model's single tensor here.
pub const DEFAULT_MAX_TENSOR_BYTES: u64 = 16 << 30;

/// Default for a session's `max_loop_iterations`: far above any real model's loop.
pub const DEFAULT_MAX_LOOP_ITERATIONS: u64 = 1 << 31;
