//! The `wgmma` GEMM tile (`quorum::cuda::ops::matmul::wgmma`, `Variant::Wgmma`) against both
//! oracles, and its deliberately wrong variant (descriptors without the swizzle) caught by the same
//! judge. Rates beside the `mma.sync` tile: `bench_f16_gemm` with `QUORUM_CUDA_WGMMA` off and on.
use quorum::{DType, Tensor};

use crate::elementwise::as_dtype;
use crate::f16_cores::cuda;
use crate::harness::rand_f32;

/// Whether the tile can run here (a compute capability 9.0 device, `QUORUM_CUDA_WGMMA=on`).
fn wgmma_here() -> bool {
    let here = cuda()
        && quorum::cuda::Device::get()
            .unwrap()
            .ctx
            .info
            .compute_capability
            == (9, 0)
        && quorum::cuda::ops::matmul::wgmma::wgmma_enabled();
    if !here {
        println!(
            "the wgmma tile is off or the device is not sm_90 (QUORUM_CUDA_WGMMA=on): skipped"
        );
    }
    here
}

/// `t` (k×n, or n×k when `trans`) as a k×n matrix for the judge.
fn as_kn(t: &Tensor, k: usize, n: usize, trans: bool) -> Tensor {
    if !trans {
        return t.clone();
    }
    let v = t.to_f64_vec().unwrap();
    let kn: Vec<f64> = (0..k * n).map(|i| v[(i % n) * k + i / n]).collect();
    Tensor::from_f64s(t.dtype(), &[k, n], kn).unwrap()
}

/// The unswizzled variant, on operands the tile gets right (the test below), disagrees with the
/// oracles: a layout mistake of this kind cannot pass the judge.
#[test]
fn the_unswizzled_variant_is_caught() {
    if !wgmma_here() {
        return;
    }
    let (m, n, k) = (256, 384, 512);
    for trans_b in [false, true] {
        let at = as_dtype(&rand_f32(31, &[m, k]), DType::F16);
        let bshape = if trans_b { [n, k] } else { [k, n] };
        let bt = as_dtype(&rand_f32(32, &bshape), DType::F16);
        let device = quorum::cuda::Device::get().unwrap();
        let counters = quorum::cuda::Counters::default();
        let run = quorum::cuda::Run::new(&device, &counters, Some(0xFF)).unwrap();
        run.begin_node("mm");
        let (a, b) = (run.upload(&at).unwrap(), run.upload(&bt).unwrap());
        let y = run.alloc(DType::F16, &[m, n]).unwrap();
        quorum::cuda::ops::matmul::wgmma::run_unswizzled(&run, &a, &b, &y, (m, n, k), trans_b)
            .unwrap();
        let y = run.download(&y).unwrap();
        let verdict = crate::f16_cores::judge(
            &at,
            &as_kn(&bt, k, n, trans_b),
            &y,
            quorum::backend::Arithmetic::TENSOR_CORES,
        );
        println!("unswizzled variant, B along k {trans_b}: {verdict:?}");
        assert_ne!(
            verdict,
            quorum::verify::Check::Agree,
            "B along k: {trans_b}"
        );
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
                as_kn(&crate::f16_cores::first(&bt, n, k), k, n, true)
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
                    as_kn(&last(&bt, n, k), k, n, true)
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
