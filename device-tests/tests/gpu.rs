//! The on-device suite: every accelerated op family run on the device and judged against both CPU
//! oracles. `cargo test -p quorum-device-tests` runs it on the accelerator present, or, where there
//! is none, runs the same cases on the CPU provider (which checks the cases and the harness);
//! `--features gpu-tests` (GPU runners, the GPU bundle) requires the device.
//!
//! Device buffers are poisoned and each case runs twice (NaN bytes, then finite bytes, so an
//! unwritten element shows whatever the right answer); integers beyond 2^53, which the oracles hold
//! as f64, are also compared with the CPU engine bit for bit; constant folding is off, so that every
//! case runs its kernel (`gpu/harness.rs`).

#[path = "gpu/harness.rs"]
mod harness;
#[path = "gpu/models.rs"]
mod models;

#[path = "gpu/bench.rs"]
mod bench;
#[path = "gpu/bench_wgpu.rs"]
mod bench_wgpu;
#[path = "gpu/bench_wgpu_shapes.rs"]
mod bench_wgpu_shapes;
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
#[path = "gpu/fused.rs"]
mod fused;
#[path = "gpu/fuzz_streams.rs"]
mod fuzz_streams;
#[path = "gpu/graphs.rs"]
mod graphs;
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
#[path = "gpu/streams.rs"]
mod streams;
#[path = "gpu/system.rs"]
mod system;
#[path = "gpu/wgpu.rs"]
mod wgpu;
#[path = "gpu/wgpu_more.rs"]
mod wgpu_more;
