//! GEMM rate on this machine: `cargo run --release -p quorum-kernels --example gemm_rate`.
//!
//! Times `sgemm` on the shapes of resnet18's convolutions (as dense GEMMs and as 3×3 patches),
//! on the calling thread and split across rayon's threads, and prints GFLOP/s (the best of a few
//! repetitions, after a warm-up). A measuring tool for micro-kernel work, not a test.
use std::time::Instant;

use quorum_kernels::{
    Activation, BSource, ConvPatches, DirectConv, Epilogue, Isa, PackedA, PackedB, Threads,
    conv_direct, sgemm,
};

fn main() {
    let isa = Isa::detected();
    println!("{isa:?}: tile {}x{}", isa.mr(), isa.nr());
    // (output channels, input channels, output side) of resnet18's 3x3 stride-1 convolutions.
    for (m, c, side) in std::env::args()
        .nth(1)
        .map(|s| {
            let v: Vec<usize> = s.split(',').map(|x| x.parse().unwrap()).collect();
            vec![(v[0], v[1], v[2])]
        })
        .unwrap_or(vec![
            (64, 64, 56),
            (128, 128, 28),
            (256, 256, 14),
            (512, 512, 7),
        ])
    {
        let (k, n) = (c * 9, side * side);
        let a: Vec<f32> = (0..m * k)
            .map(|i| ((i * 7919) % 1000) as f32 * 1e-3 - 0.5)
            .collect();
        let x: Vec<f32> = (0..c * n)
            .map(|i| ((i * 104729) % 1000) as f32 * 1e-3 - 0.5)
            .collect();
        let dense: Vec<f32> = (0..k * n)
            .map(|i| ((i * 7) % 1000) as f32 * 1e-3 - 0.5)
            .collect();
        let pa = PackedA::new(isa, m, k, &a, k);
        let g = ConvPatches {
            x: &x,
            channels: c,
            ins: [1, side, side],
            kernel: [1, 3, 3],
            strides: [1, 1, 1],
            dilations: [1, 1, 1],
            pads: [0, 1, 1],
            outs: [1, side, side],
        };
        let mut out = vec![0f32; m * n];
        let epi = Epilogue {
            bias: None,
            act: Activation::None,
            residual: None,
        };
        let flops = 2.0 * (m * n * k) as f64;
        let pb = PackedB::new(isa, k, m, &a, 1, k);
        let sp = side + 2;
        let mut xp = vec![0f32; c * sp * sp];
        for ch in 0..c {
            for y in 0..side {
                let at = (ch * sp + y + 1) * sp + 1;
                xp[at..at + side].copy_from_slice(&x[(ch * side + y) * side..][..side]);
            }
        }
        let d = DirectConv {
            x: &xp,
            channels: c,
            rows: sp,
            cols: sp,
            kernel: [3, 3],
            strides: [1, 1],
            dilations: [1, 1],
            outs: [side, side],
        };
        let mut dout = vec![std::mem::MaybeUninit::new(0f32); m * n];
        for threads in [Threads::Serial, Threads::Auto] {
            let mut best = f64::MAX;
            for _ in 0..20 {
                let t = Instant::now();
                conv_direct(&pb, &d, &mut dout, &epi, threads);
                best = best.min(t.elapsed().as_secs_f64());
            }
            println!(
                "{m:>4}x{n:>5}x{k:>5}   direct {threads:?}: {:7.1} GFLOP/s",
                flops / best * 1e-9
            );
        }
        for (name, b) in [
            (
                "dense",
                BSource::Dense {
                    data: &dense,
                    ld: n,
                },
            ),
            ("patches", BSource::Conv(g)),
        ] {
            for threads in [Threads::Serial, Threads::Auto] {
                let mut best = f64::MAX;
                for _ in 0..20 {
                    let t = Instant::now();
                    sgemm(&pa, &b, n, &mut out, n, &epi, threads);
                    best = best.min(t.elapsed().as_secs_f64());
                }
                println!(
                    "{m:>4}x{n:>5}x{k:>5} {name:>8} {threads:?}: {:7.1} GFLOP/s",
                    flops / best * 1e-9
                );
            }
        }
    }
}
