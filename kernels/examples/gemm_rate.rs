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
    // (output channels, input channels, output side, kernel side): by default resnet18's 3x3
    // stride-1 convolutions; or `m,c,side,kernel;...` as the first argument.
    let shapes: Vec<(usize, usize, usize, usize)> = match std::env::args().nth(1) {
        Some(s) => s
            .split(';')
            .map(|t| {
                let v: Vec<usize> = t
                    .split(',')
                    .map(|x| x.parse().expect("m,c,side,kernel"))
                    .collect();
                (v[0], v[1], v[2], v[3])
            })
            .collect(),
        None => vec![
            (64, 64, 56, 3),
            (128, 128, 28, 3),
            (256, 256, 14, 3),
            (512, 512, 7, 3),
        ],
    };
    for (m, c, side, ks) in shapes {
        let pad = ks / 2;
        let (k, n) = (c * ks * ks, side * side);
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
            kernel: [1, ks, ks],
            strides: [1, 1, 1],
            dilations: [1, 1, 1],
            pads: [0, pad as i64, pad as i64],
            outs: [1, side, side],
        };
        let mut out = vec![0f32; m * n];
        let epi = Epilogue {
            bias: None,
            act: Activation::None,
            residual: None,
            col_bias: None,
        };
        let flops = 2.0 * (m * n * k) as f64;
        let pb = PackedB::new(isa, k, m, &a, 1, k);
        let sp = side + 2 * pad;
        let mut xp = vec![0f32; c * sp * sp];
        for ch in 0..c {
            for y in 0..side {
                let at = (ch * sp + y + pad) * sp + pad;
                xp[at..at + side].copy_from_slice(&x[(ch * side + y) * side..][..side]);
            }
        }
        let d = DirectConv {
            x: &xp,
            channels: c,
            rows: sp,
            cols: sp,
            kernel: [ks, ks],
            strides: [1, 1],
            dilations: [1, 1],
            outs: [side, side],
        };
        let mut dout = vec![std::mem::MaybeUninit::new(0f32); m * n];
        for threads in [Threads::Serial, Threads::Auto] {
            let best = with_workers_awake(|| {
                let mut best = f64::MAX;
                for _ in 0..20 {
                    let t = Instant::now();
                    conv_direct(&pb, &d, &mut dout, &epi, threads);
                    best = best.min(t.elapsed().as_secs_f64());
                }
                best
            });
            println!(
                "{m:>4}x{n:>5}x{k:>5}   direct {threads:?}: {:7.1} GFLOP/s",
                flops / best * 1e-9
            );
        }
        // B packed once, as a session packs a weight.
        let pbd = PackedB::new(isa, k, n, &dense, n, 1);
        let scale: Vec<f32> = (0..k).map(|p| 0.5 + (p % 7) as f32 * 0.1).collect();
        for (name, b) in [
            ("packed", BSource::Packed(&pbd)),
            (
                "dense",
                BSource::Dense {
                    data: &dense,
                    ld: n,
                },
            ),
            // Rows scaled as packed: a 1×1 convolution's input times a channel scale.
            (
                "scaled",
                BSource::ScaledDense {
                    data: &dense,
                    ld: n,
                    scale: &scale,
                },
            ),
            ("patches", BSource::Conv(g)),
        ] {
            for threads in [Threads::Serial, Threads::Auto] {
                let best = with_workers_awake(|| {
                    let mut best = f64::MAX;
                    for _ in 0..20 {
                        let t = Instant::now();
                        sgemm(&pa, &b, n, &mut out, n, &epi, threads);
                        best = best.min(t.elapsed().as_secs_f64());
                    }
                    best
                });
                println!(
                    "{m:>4}x{n:>5}x{k:>5} {name:>8} {threads:?}: {:7.1} GFLOP/s",
                    flops / best * 1e-9
                );
            }
        }
    }
}

/// `f`'s value, with rayon's other workers kept awake meanwhile (each runs any job it finds, and
/// otherwise spins), as a session's run keeps them (`runtime/src/session/spin.rs`). Without them a
/// split GEMM of a fraction of a millisecond could finish before a sleeping worker woke: the best
/// of 20 split runs then came out at one core's rate in some runs of this tool and at two cores' in
/// others (about 150 against 250–340 GFLOP/s, on the same shapes).
fn with_workers_awake<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    use std::sync::atomic::{AtomicBool, Ordering};
    let done = AtomicBool::new(false);
    rayon::scope(|s| {
        for _ in 1..rayon::current_num_threads() {
            s.spawn(|_| {
                while !done.load(Ordering::Acquire) {
                    if rayon::yield_now() != Some(rayon::Yield::Executed) {
                        std::hint::spin_loop();
                    }
                }
            });
        }
        let r = f();
        done.store(true, Ordering::Release);
        r
    })
}
