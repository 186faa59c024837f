//! TEMPORARY scratch target of the matmul/conv helper (removed before hand-off).
#![cfg(feature = "gpu-tests")]
#[path = "gpu/harness.rs"]
mod harness;
#[path = "gpu/matmul.rs"]
mod matmul;
#[path = "gpu/conv.rs"]
mod conv;

#[test]
#[ignore]
fn scratch_bench() {
    use crate::harness::rand_f32;
    use quorum::cuda::driver::Event;
    use quorum::cuda::ops::matmul::sgemm;
    use quorum::cuda::{Counters, Device, Run};
    let dev = Device::get().unwrap();
    let counters = Counters::default();
    let run = Run::new(&dev, &counters, false).unwrap();
    let shapes: &[(usize, usize, usize, bool, bool, usize)] = &[
        (4096, 4096, 4096, false, false, 20),
        (4096, 4096, 4096, false, false, 10),
        (4096, 4096, 4096, true, false, 5),
        (4096, 4096, 4096, false, true, 5),
        (4096, 4096, 4096, true, true, 5),
        (2048, 2048, 2048, false, false, 10),
        (1024, 1024, 1024, false, false, 20),
        (4095, 4097, 4093, false, false, 5),
        (1, 512, 25088, false, false, 20),
        (1, 4096, 25088, false, true, 20),
        (1, 1000, 4096, false, true, 20),
        (64, 3136, 576, false, false, 20),
        (1, 4096, 4096, false, true, 20),
        (8, 4096, 4096, false, true, 20),
        (256, 196, 2304, false, false, 20),
    ];
    for &(m, n, k, ta, tb, iters) in shapes {
        let av = rand_f32(1, &[m * k]);
        let bv = rand_f32(2, &[k * n]);
        let a = run.upload(&av).unwrap();
        let b = run.upload(&bv).unwrap();
        let y = sgemm(&run, &a, &b, None, m, n, k, ta, tb, 1.0, 0.0, 1).unwrap();
        let yh = run.download(&y).unwrap().to_f64_vec().unwrap();
        let (af, bf) = (av.to_f64_vec().unwrap(), bv.to_f64_vec().unwrap());
        let mut worst = 0f64;
        let mut s = 12345u64;
        for _ in 0..200 {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let (i, j) = ((s >> 33) as usize % m, (s >> 13) as usize % n);
            let mut want = 0f64;
            let mut mag = 0f64;
            for kk in 0..k {
                let x = if ta { af[kk * m + i] } else { af[i * k + kk] };
                let w = if tb { bf[j * k + kk] } else { bf[kk * n + j] };
                want += x * w;
                mag += (x * w).abs();
            }
            let err = (yh[i * n + j] - want).abs() / (mag * f32::EPSILON as f64);
            worst = worst.max(err);
        }
        run.release(y);
        let e0 = Event::new(&dev.ctx, true).unwrap();
        let e1 = Event::new(&dev.ctx, true).unwrap();
        e0.record(run.stream()).unwrap();
        for _ in 0..iters {
            let y = sgemm(&run, &a, &b, None, m, n, k, ta, tb, 1.0, 0.0, 1).unwrap();
            run.release(y);
        }
        e1.record(run.stream()).unwrap();
        e1.synchronize().unwrap();
        let ms = e1.elapsed_since(&e0).unwrap() as f64 / iters as f64;
        let tf = 2.0 * (m * n * k) as f64 / (ms * 1e-3) / 1e12;
        println!(
            "sgemm m={m} n={n} k={k} ta={ta} tb={tb}: {ms:.3} ms, {tf:.2} TFLOP/s, worst err {worst:.2} eps·Σ|t|"
        );
    }
}

#[test]
#[ignore]
fn scratch_dump() {
    use quorum::cuda::ops::matmul::tile::*;
    let dir = std::env::var("DUMP").unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    for variant in [Variant::Big, Variant::Small, Variant::Naive] {
        for (ta, va) in [(false, true), (true, false)] {
            for b in [BSrc::Strided { trans: false, vec: true }, BSrc::Strided { trans: true, vec: false }, BSrc::Im2col] {
                for (c, h, s) in [(true, false, false), (true, true, false), (false, false, true)] {
                    let cfg = TileCfg { variant, trans_a: ta, vec_a: va && !h, b, has_c: c, f16: h, split: s };
                    let t = quorum::cuda::ptx::module((9, 0), &[build(&cfg)]);
                    std::fs::write(format!("{dir}/{}.ptx", cfg.name()), t).unwrap();
                }
            }
        }
    }
}
