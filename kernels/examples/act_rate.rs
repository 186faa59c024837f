//! Activation rate on this machine: `cargo run --release -p quorum-kernels --example act_rate`.
//!
//! Times [`Activation::apply`] over a slice that stays in L1/L2 (the size a GEMM epilogue passes)
//! and prints nanoseconds and cycles-at-nominal per value. A measuring tool, not a test.
use std::time::Instant;

use quorum_kernels::{Activation, Isa};

fn main() {
    println!("{:?}", Isa::detected());
    let len: usize = std::env::args()
        .nth(1)
        .map_or(4096, |s| s.parse().expect("a length"));
    let src: Vec<f32> = (0..len)
        .map(|i| ((i * 7919) % 2000) as f32 * 8e-3 - 8.0)
        .collect();
    let mut v = src.clone();
    for (name, act) in [
        ("relu", Activation::Relu),
        ("sigmoid", Activation::Sigmoid),
        ("silu", Activation::Silu),
    ] {
        let reps = (50_000_000 / len).max(1);
        let mut best = f64::INFINITY;
        for _ in 0..5 {
            let t = Instant::now();
            for _ in 0..reps {
                v.copy_from_slice(&src);
                act.apply(&mut v, Some(0.125));
            }
            best = best.min(t.elapsed().as_secs_f64() / (reps * len) as f64);
        }
        println!("{name:8} {:.3} ns/value", best * 1e9);
    }
}
