//! Quorum: a pure-Rust ONNX inference runtime.
//!
//! Load a model with [`Session::from_file`] or [`Session::from_bytes`], then call [`Session::run`].

pub mod arena;
pub mod backend;
pub mod cmdlog;
pub mod counters;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod device;
pub mod error;
mod fold;
pub mod freelist;
pub mod heap;
pub mod inputs;
pub mod ir;
pub mod loader;
pub mod mutants;
pub mod npy;
pub mod ops;
pub mod opsets;
pub mod optimize;
pub mod output_files;
pub mod pb;
pub mod plan;
pub mod providers;
pub mod session;
pub mod sim;
pub mod tensor;
pub mod verify;
pub mod weights;
#[cfg(feature = "wgpu")]
pub mod wgpu;

/// The ONNX schema, generated at build time from `proto/onnx.proto`.
#[allow(clippy::all, missing_docs)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/onnx.rs"));
}

pub use backend::Provider;
pub use counters::CounterSnapshot;
pub use error::{Error, OpError, Result};
pub use providers::parse_providers;
pub use session::{NodePlacement, Session, SessionOptions};
pub use tensor::{DType, Tensor, Value};
pub use verify::VerifyMode;

/// Default for [`SessionOptions::max_tensor_bytes`]: 16 GiB, above any real model's single tensor here.
pub const DEFAULT_MAX_TENSOR_BYTES: u64 = 16 << 30;

/// Default for [`SessionOptions::max_loop_iterations`]: far above any real model's loop.
pub const DEFAULT_MAX_LOOP_ITERATIONS: u64 = 1 << 31;
