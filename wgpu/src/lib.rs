//! The wgpu backend: the adapter chosen at run time (`device`), WGSL that Quorum generates
//! (`wgsl`, one kernel file per op family in `ops`), pooled buffers and resident weights
//! (`memory`), the per-run context (`run`), its kernel timing (`timing`) and command log (`log`), and
//! the backend seam's implementation (`provider`).
//!
//! A session that lists wgpu among its providers asks [`ops::claim`] for each top-level node; a
//! claimed node runs its generated kernel on the run's queue, reading and writing [`WTensor`]s. A
//! kernel may still decline at run time (a dtype or shape it does not compute exactly, an adapter
//! without f64 shaders): the node then runs on the CPU.
#![forbid(unsafe_code)]
pub mod device;
pub mod log;
pub mod memory;
pub mod ops;
pub mod provider;
pub mod run;
pub mod timing;
pub mod wgsl;

pub use device::Device;
pub use memory::WTensor;
pub use run::{KResult, Run};
