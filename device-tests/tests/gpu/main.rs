//! The on-device suite: every accelerated op family run on the device and judged against both CPU
//! oracles. `cargo test -p quorum-device-tests` runs it on the accelerator present, or, where there
//! is none, runs the same cases on the CPU provider (which checks the cases and the harness);
//! `--features gpu-tests` (GPU runners, the GPU bundle) requires the device.
//!
//! Device buffers are poisoned and each case runs twice (NaN bytes, then finite bytes, so an
//! unwritten element shows whatever the right answer); integers beyond 2^53, which the oracles hold
//! as f64, are also compared with the CPU engine bit for bit; constant folding is off, so that every
//! case runs its kernel (`harness.rs`).

mod harness;
mod models;

mod attention;
mod audit;
mod bench;
mod bench_wgpu;
mod bench_wgpu_shapes;
mod cast;
mod conv;
mod einsum;
mod elementwise;
mod elementwise_half;
mod elementwise_int;
mod f16_cores;
mod fused;
mod fuzz_streams;
mod graphs;
mod index;
mod integer;
mod matmul;
mod movement;
mod norm;
mod pool;
mod properties;
mod quantize;
mod recurrent;
mod reduce;
mod resize;
mod softmax;
mod streams;
mod system;
mod tf32;
mod wgmma;
mod wgpu;
mod wgpu_more;
