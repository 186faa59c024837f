//! The on-device suite: `cargo test -p quorum --features gpu-tests --test gpu` on a machine with an
//! NVIDIA GPU (or from `target/gpu-bundle/run.sh`). A plain `cargo test` builds none of it.
#![cfg(feature = "gpu-tests")]

#[path = "gpu/harness.rs"]
mod harness;

#[path = "gpu/bench.rs"]
mod bench;
#[path = "gpu/cast.rs"]
mod cast;
#[path = "gpu/conv.rs"]
mod conv;
#[path = "gpu/elementwise.rs"]
mod elementwise;
#[path = "gpu/elementwise_f16.rs"]
mod elementwise_f16;
#[path = "gpu/elementwise_int.rs"]
mod elementwise_int;
#[path = "gpu/index.rs"]
mod index;
#[path = "gpu/matmul.rs"]
mod matmul;
#[path = "gpu/movement.rs"]
mod movement;
#[path = "gpu/norm.rs"]
mod norm;
#[path = "gpu/pool.rs"]
mod pool;
#[path = "gpu/reduce.rs"]
mod reduce;
#[path = "gpu/resize.rs"]
mod resize;
#[path = "gpu/softmax.rs"]
mod softmax;
#[path = "gpu/system.rs"]
mod system;
