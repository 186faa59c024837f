//! The `wgmma` probe (`quorum::cuda::ops::matmul::wgmma`): Hopper's warpgroup MMA on operands in
//! the 128-byte swizzle, not yet a path of any op. Judged here against an f64 product of the same
//! f16 values, each output within `2⁻¹⁰ · Σ|a·b|` (tensor cores sum f32 products with truncation:
//! far inside this; a wrong layout puts whole terms in the wrong place, far outside it), the output
//! poisoned with NaN before the run; the variant whose descriptors drop the swizzle must fail the
//! same check. The benchmark beside `mma.sync`'s f16 GEMM is `bench_wgmma` (ignored).
use quorum::{DType, Tensor};

use crate::bench::time_ms_pub as time_ms;
use crate::elementwise::as_dtype;
use crate::f16_cores::cuda;
use crate::harness::rand_f32;

/// The probe's output for f16 `a` (m×k) and `bt` (n×k), and the worst excess over the bound.
fn probe(m: usize, n: usize, k: usize, unswizzled: bool) -> (usize, f64) {
    let a = as_dtype(&rand_f32(31, &[m, k]), DType::F16);
    let bt = as_dtype(&rand_f32(32, &[n, k]), DType::F16);
    let device = quorum::cuda::Device::get().unwrap();
    let counters = quorum::cuda::Counters::default();
    let run = quorum::cuda::Run::new(&device, &counters, Some(0xFF)).unwrap();
    run.begin_node("wgmma");
    let (da, db) = (run.upload(&a).unwrap(), run.upload(&bt).unwrap());
    let poison = Tensor::from_f32(&[m, n], vec![f32::NAN; m * n]).unwrap();
    let dc = run.upload(&poison).unwrap();
    quorum::cuda::ops::matmul::wgmma::wgmma_tn(&run, &da, &db, &dc, m, n, k, unswizzled).unwrap();
    let c = run.download(&dc).unwrap().to_f64_vec().unwrap();
    let (av, bv) = (a.to_f64_vec().unwrap(), bt.to_f64_vec().unwrap());
    let mut bad = 0;
    let mut worst = 0.0f64;
    for i in 0..m {
        for j in 0..n {
            let (mut s, mut mag) = (0.0f64, 0.0f64);
            for p in 0..k {
                let t = av[i * k + p] * bv[j * k + p];
                s += t;
                mag += t.abs();
            }
            let err = (c[i * n + j] - s).abs();
            let bound = mag * 2f64.powi(-10) + 1e-6;
            if err.is_nan() || err > bound {
                bad += 1;
                worst = worst.max(if err.is_nan() {
                    f64::INFINITY
                } else {
                    err / bound
                });
            }
        }
    }
    (bad, worst)
}

#[test]
fn wgmma_probe_agrees_and_its_unswizzled_variant_is_caught() {
    if !cuda()
        || quorum::cuda::Device::get()
            .unwrap()
            .ctx
            .info
            .compute_capability
            != (9, 0)
    {
        println!("no compute capability 9.0 device: the wgmma probe is not run");
        return;
    }
    for (m, n, k) in [(128, 128, 64), (256, 384, 512), (384, 256, 1024)] {
        let (bad, worst) = probe(m, n, k, false);
        println!("wgmma probe {m}x{n}x{k}: {bad} outside the bound (worst {worst:.3e} of it)");
        assert_eq!(bad, 0, "{m}x{n}x{k}: worst {worst:.3e} of the bound");
    }
    let (bad, _) = probe(256, 384, 512, true);
    println!(
        "unswizzled variant: {bad} of {} outside the bound",
        256 * 384
    );
    assert!(
        bad > 0,
        "descriptors without the swizzle must give wrong products"
    );
}

#[test]
#[ignore = "benchmark: run with --ignored on a GPU machine"]
fn bench_wgmma() {
    if !cuda() {
        return;
    }
    let device = quorum::cuda::Device::get().unwrap();
    let counters = quorum::cuda::Counters::default();
    let run = quorum::cuda::Run::new(&device, &counters, None).unwrap();
    for (m, n, k) in [
        (1024usize, 1024usize, 1024usize),
        (2048, 2048, 2048),
        (4096, 4096, 4096),
        (8192, 8192, 8192),
        (1024, 768, 768),
        (1024, 3072, 768),
        (1024, 768, 3072),
    ] {
        let a = run
            .upload(&as_dtype(&rand_f32(3, &[m, k]), DType::F16))
            .unwrap();
        let bt = run
            .upload(&as_dtype(&rand_f32(4, &[n, k]), DType::F16))
            .unwrap();
        let c = run
            .upload(&Tensor::from_f32(&[m, n], vec![0.0; m * n]).unwrap())
            .unwrap();
        let reps = if m * n * k >= 1 << 36 { 10 } else { 30 };
        let flop = 2.0 * (m * n * k) as f64;
        let ms = time_ms(&run, 3, reps, &mut || {
            quorum::cuda::ops::matmul::wgmma::wgmma_tn(&run, &a, &bt, &c, m, n, k, false).unwrap();
        });
        println!(
            "BENCH wgmma_probe_f16_{m}x{n}x{k} {:.2} TFLOP/s ({ms:.3} ms)",
            flop / (ms * 1e-3) / 1e12
        );
        // The mma.sync GEMM on the same operands (B transposed), in the same run.
        let ms = time_ms(&run, 3, reps, &mut || {
            let y = quorum::cuda::ops::matmul::sgemm(
                &run, &a, &bt, None, m, n, k, false, true, 1.0, 0.0, 1,
            )
            .unwrap();
            run.release(y, &[]);
        });
        println!(
            "BENCH mma_sync_f16_nt_{m}x{n}x{k} {:.2} TFLOP/s ({ms:.3} ms)",
            flop / (ms * 1e-3) / 1e12
        );
        for t in [a, bt, c] {
            run.release(t, &[]);
        }
    }
}

/// The `wgmma` GEMM tile (`Variant::Wgmma`, forced by its plan) against both oracles as exact
/// products summed in f32 (the tensor cores' declaration), in f16 and bf16, B stored along n
/// (MatMul's weights: read transposed) and along k (Gemm's `transB`): partial tiles in m and n, a
/// K that is not a multiple of the 64-deep stage, batches, and one K of 4096. Skips unless
/// `QUORUM_CUDA_WGMMA=on` on a compute capability 9.0 device, and fails if the tile did not run.
#[rstest::rstest]
fn wgmma_gemm_agrees_as_exact_products(#[values(DType::F16, DType::BF16)] half: DType) {
    use quorum::cuda::ops::matmul::plan::Plan;
    use quorum::cuda::ops::matmul::tile::Variant;
    use quorum::cuda::ops::matmul::wgmma;
    if !cuda()
        || quorum::cuda::Device::get()
            .unwrap()
            .ctx
            .info
            .compute_capability
            != (9, 0)
        || !wgmma::wgmma_enabled()
    {
        println!(
            "the wgmma tile is off or the device is not sm_90 (QUORUM_CUDA_WGMMA=on): skipped"
        );
        return;
    }
    if crate::harness::bf16_off(half) {
        return;
    }
    let h = |t: &Tensor| as_dtype(t, half);
    for (s, (m, n, k, nb)) in [
        (128usize, 128usize, 64usize, 1usize),
        (200, 136, 520, 2),
        (100, 264, 72, 1),
        (257, 392, 1000, 1),
        (129, 8, 16, 1),
        (64, 128, 4096, 1),
    ]
    .into_iter()
    .enumerate()
    {
        for trans_b in [false, true] {
            let at = h(&rand_f32(900 + s as u64, &[nb, m, k]));
            let bshape = if trans_b { [nb, n, k] } else { [nb, k, n] };
            let bt = h(&rand_f32(950 + s as u64, &bshape));
            let device = quorum::cuda::Device::get().unwrap();
            let counters = quorum::cuda::Counters::default();
            let run = quorum::cuda::Run::new(&device, &counters, Some(0xFF)).unwrap();
            run.begin_node("mm");
            let (a, b) = (run.upload(&at).unwrap(), run.upload(&bt).unwrap());
            let before = wgmma::launches();
            let y = quorum::cuda::ops::matmul::sgemm_plan(
                &run,
                &a,
                &b,
                None,
                m,
                n,
                k,
                false,
                trans_b,
                1.0,
                0.0,
                nb,
                Some(Plan::new(Variant::Wgmma, k, 1)),
            )
            .unwrap();
            let what = format!("{half:?} {m}x{n}x{k} batch {nb}, B along k: {trans_b}");
            assert!(
                wgmma::launches() > before,
                "{what}: the wgmma tile did not run"
            );
            let y = run.download(&y).unwrap();
            let declared = run.arithmetic();
            // The first product, with B as a [k, n] matrix for the judge.
            let a0 = crate::f16_cores::first(&at, m, k);
            let b0 = if trans_b {
                let v = bt.to_f64_vec().unwrap();
                let t: Vec<f64> = (0..k * n).map(|i| v[(i % n) * k + i / n]).collect();
                Tensor::from_f64s(half, &[k, n], t).unwrap()
            } else {
                crate::f16_cores::first(&bt, k, n)
            };
            let y0 = crate::f16_cores::first(&y, m, n);
            assert_eq!(
                crate::f16_cores::judge(&a0, &b0, &y0, declared),
                quorum::verify::Check::Agree,
                "{what}"
            );
            // The last product of a batch, too (its operands' offsets).
            if nb > 1 {
                let last = |t: &Tensor, r: usize, c: usize| {
                    let v = t.to_f64_vec().unwrap();
                    let off = (nb - 1) * r * c;
                    Tensor::from_f64s(t.dtype(), &[r, c], v[off..off + r * c].to_vec()).unwrap()
                };
                let b1 = if trans_b {
                    let v = last(&bt, n, k).to_f64_vec().unwrap();
                    let t: Vec<f64> = (0..k * n).map(|i| v[(i % n) * k + i / n]).collect();
                    Tensor::from_f64s(half, &[k, n], t).unwrap()
                } else {
                    last(&bt, k, n)
                };
                assert_eq!(
                    crate::f16_cores::judge(&last(&at, m, k), &b1, &last(&y, m, n), declared),
                    quorum::verify::Check::Agree,
                    "{what}, last product"
                );
            }
        }
    }
}
