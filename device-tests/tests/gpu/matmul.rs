//! On-device tests of the `matmul` family: MatMul and Gemm through every GEMM path (64×64 and
//! 128×128 tiles, on CUDA and wgpu, skinny rows, 16-byte and scalar loads, transposed operands, split-K, batched and
//! broadcast). `QUORUM_CUDA_GEMM=naive` runs the same cases through the naive reference kernel.
use quorum::{DType, Tensor};

use crate::harness::{Case, rand_f32};

pub fn f16(t: &Tensor) -> Tensor {
    Tensor::from_f64s(DType::F16, t.shape(), t.to_f64_vec().unwrap()).unwrap()
}

fn matmul(a: &[usize], b: &[usize], seed: u64) {
    Case::new("MatMul")
        .opset(13)
        .input(rand_f32(seed, a))
        .input(rand_f32(seed + 1, b))
        .check();
}

#[test]
fn matmul_small_and_one_dimensional() {
    matmul(&[1, 1], &[1, 1], 1);
    matmul(&[5], &[5, 3], 2); // 1-D × 2-D
    matmul(&[4, 5], &[5], 3); // 2-D × 1-D
    matmul(&[7], &[7], 4); // 1-D × 1-D
    matmul(&[3], &[2, 3, 4], 5); // 1-D × 3-D
    matmul(&[2, 3, 4, 6], &[6], 6); // 4-D × 1-D
    matmul(&[3, 4], &[4, 5], 7);
}

#[test]
fn matmul_broadcast_batches() {
    matmul(&[2, 1, 5, 7], &[3, 7, 9], 10);
    matmul(&[3, 7, 9], &[2, 1, 9, 4], 11);
    matmul(&[2, 3, 5, 7], &[7, 9], 12); // folds into one tall product
    matmul(&[1, 6, 5, 70], &[70, 9], 16); // folds too: a batch dim of 1 moves no offset
    matmul(&[5, 7], &[4, 7, 9], 13); // A shared by every batch
    matmul(&[2, 1, 3, 5, 6], &[1, 4, 1, 6, 2], 14); // three broadcast batch dims
    matmul(&[2, 2, 2, 2, 3, 4], &[2, 1, 2, 1, 4, 5], 15); // more batch dims than the kernel takes
}

#[test]
fn matmul_edges_not_multiple_of_tiles() {
    matmul(&[129, 33], &[33, 67], 20);
    matmul(&[129, 67], &[67, 33], 21);
    matmul(&[1, 1000], &[1000, 1], 22);
    matmul(&[1000, 1], &[1, 1000], 23);
    matmul(&[257, 513], &[513, 255], 24);
    matmul(&[257, 255], &[255, 513], 25);
    matmul(&[64, 64], &[64, 64], 26);
    matmul(&[65, 17], &[17, 63], 27);
    matmul(&[31, 4], &[4, 36], 28); // 16-byte loads of both operands
}

#[test]
fn matmul_large_tiles() {
    // Enough 128×128 tiles for the large GEMM tile (wgpu), edges on every side, K not a multiple of
    // the step (a partial last step).
    matmul(&[22, 260, 37], &[22, 37, 390], 60);
    matmul(&[2049, 19], &[19, 2049], 61);
}

#[test]
fn matmul_empty() {
    matmul(&[0, 5], &[5, 3], 30);
    matmul(&[4, 0], &[0, 3], 31); // K = 0: zeros
    matmul(&[4, 5], &[5, 0], 32);
    matmul(&[2, 0, 4, 5], &[5, 3], 33);
}

#[test]
fn matmul_gemv_split_k() {
    // The regression case (a classifier head): M = 1, K = 25088, N = 512; split along K.
    matmul(&[1, 25088], &[25088, 512], 40);
    matmul(&[3, 4099], &[4099, 70], 41);
    matmul(&[2048], &[2048, 33], 42);
    matmul(&[5, 3000], &[3000], 43);
}

#[test]
fn matmul_batched_split_k() {
    // Few output tiles over a batch and a long K: split along K with the batch in one grid, the
    // workspace per batch, the reduction per batch (one, two and three batch dims, broadcast A).
    matmul(&[4, 64, 512], &[4, 512, 64], 90);
    matmul(&[2, 3, 70, 1000], &[2, 3, 1000, 33], 91);
    matmul(&[2, 2, 2, 65, 300], &[2, 2, 2, 300, 70], 92);
    matmul(&[100, 257], &[3, 257, 40], 93);
}

#[test]
fn matmul_skinny_rows() {
    // At most 4 rows: the skinny kernel, batched (no split) and alone (split along K).
    matmul(&[3, 2, 40], &[3, 40, 300], 44);
    matmul(&[4, 1, 3, 129], &[4, 129, 130], 45);
    matmul(&[4, 777], &[777, 131], 46);
    matmul(&[2, 4096], &[4096, 3], 47);
    matmul(&[3, 1030], &[1030], 48);
    matmul(&[8, 2048], &[2048, 300], 49);
    matmul(&[2, 6, 64], &[2, 64, 1000], 59);
}

#[test]
fn matmul_big_tiles() {
    // Enough 128×128 tiles to take the big-tile kernel: batched with partial edge tiles and odd K.
    matmul(&[34, 130, 67], &[34, 67, 129], 50);
    // Folded tall product, 16-byte loads.
    matmul(&[2, 1100, 36], &[36, 1200], 51);
}

/// Both halves, on the tensor cores (sm_80 on) or the CUDA cores: widened exactly, summed in f32.
#[rstest::rstest]
fn matmul_half(#[values(DType::F16, DType::BF16)] dtype: DType) {
    if crate::harness::bf16_off(dtype) {
        return;
    }
    let h = |t: &Tensor| crate::elementwise::as_dtype(t, dtype);
    for (a, b) in [
        (vec![3usize, 17], vec![17usize, 5]),
        (vec![2, 4, 33], vec![2, 33, 8]),
        (vec![1, 2000], vec![2000, 24]),
    ] {
        let r = Case::new("MatMul")
            .opset(13)
            .input(h(&rand_f32(60, &a)))
            .input(h(&rand_f32(61, &b)))
            .check();
        assert_eq!(crate::harness::dtype(&r.outputs[0]), dtype);
    }
}

/// Gemm with A `[m, k]` (or `[k, m]`), B `[k, n]` (or `[n, k]`) and C of shape `c`.
#[allow(clippy::too_many_arguments)]
fn gemm(
    m: usize,
    n: usize,
    k: usize,
    ta: bool,
    tb: bool,
    alpha: Option<f32>,
    beta: Option<f32>,
    c: Option<&[usize]>,
    seed: u64,
) {
    let ash = if ta { [k, m] } else { [m, k] };
    let bsh = if tb { [n, k] } else { [k, n] };
    let mut case = Case::new("Gemm")
        .opset(13)
        .attr_i("transA", ta as i64)
        .attr_i("transB", tb as i64)
        .input(rand_f32(seed, &ash))
        .constant(rand_f32(seed + 1, &bsh));
    if let Some(a) = alpha {
        case = case.attr_f("alpha", a);
    }
    if let Some(b) = beta {
        case = case.attr_f("beta", b);
    }
    if let Some(c) = c {
        case = case.constant(rand_f32(seed + 2, c));
    }
    case.check();
}

#[test]
fn gemm_transposes_alpha_beta() {
    let mut seed = 100;
    for ta in [false, true] {
        for tb in [false, true] {
            for (alpha, beta) in [
                (None, None),
                (Some(0.5), Some(2.0)),
                (Some(-1.25), Some(0.0)),
            ] {
                gemm(13, 9, 21, ta, tb, alpha, beta, Some(&[13, 9]), seed);
                gemm(70, 130, 36, ta, tb, alpha, beta, Some(&[130]), seed + 3);
                seed += 10;
            }
        }
    }
}

#[test]
fn gemm_c_broadcasts() {
    let (m, n, k) = (6, 5, 7);
    let forms: [&[usize]; 7] = [&[], &[1], &[n], &[1, n], &[m, 1], &[1, 1], &[m, n]];
    for (i, c) in forms.iter().enumerate() {
        gemm(
            m,
            n,
            k,
            false,
            true,
            None,
            Some(1.5),
            Some(c),
            200 + i as u64,
        );
    }
    gemm(m, n, k, false, false, None, None, None, 210); // no C (opset 11+)
    gemm(1, n, k, false, false, None, None, Some(&[1, n]), 211);
}

#[test]
fn gemm_classifier_heads() {
    // Linear layers at batch 1 (transB = 1): split-K; and a wider batch: tiled.
    gemm(1, 1000, 4096, false, true, None, None, Some(&[1000]), 300);
    gemm(1, 512, 25088, false, true, None, None, Some(&[512]), 301);
    gemm(8, 100, 2048, false, true, None, None, Some(&[100]), 302);
    gemm(
        200,
        300,
        129,
        true,
        false,
        Some(0.75),
        Some(0.5),
        Some(&[200, 1]),
        303,
    );
    // Skinny with A transposed, both B layouts, split along K.
    gemm(3, 200, 700, true, true, Some(0.5), None, Some(&[200]), 306);
    gemm(
        4,
        300,
        600,
        true,
        false,
        None,
        Some(-1.0),
        Some(&[4, 300]),
        307,
    );
    gemm(2, 37, 1500, false, false, None, None, Some(&[2, 1]), 308);
    gemm(7, 1000, 4096, false, true, None, None, Some(&[1000]), 309);
    // Empty M and empty K.
    gemm(0, 4, 3, false, false, None, None, Some(&[4]), 304);
    gemm(3, 4, 0, false, false, None, None, Some(&[3, 4]), 305);
}

#[test]
fn gemm_opset_9_requires_c() {
    Case::new("Gemm")
        .opset(9)
        .attr_i("transB", 1)
        .input(rand_f32(400, &[4, 6]))
        .constant(rand_f32(401, &[3, 6]))
        .constant(rand_f32(402, &[3]))
        .check();
}

/// `Σ_k A(m, k) · B(k, n)` per batch in f64, and the bound `Σ_k |A·B|` each output's rounding error
/// scales with (A `[nb, m, k]`, B `[nb, k, n]`).
fn gemm_reference(
    a: &[f64],
    b: &[f64],
    m: usize,
    n: usize,
    k: usize,
    nb: usize,
) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(nb * m * n);
    for z in 0..nb {
        for i in 0..m {
            for j in 0..n {
                let (mut s, mut mag) = (0f64, 0f64);
                for l in 0..k {
                    let p = a[z * m * k + i * k + l] * b[z * k * n + l * n + j];
                    s += p;
                    mag += p.abs();
                }
                out.push((s, mag));
            }
        }
    }
    out
}

/// Runs `plan` on CUDA (poisoned buffers) and returns the first output that misses the reference by
/// more than f32 accumulation allows (`4·k·ε·Σ|A·B|`), if any.
fn plan_miss(
    run: &quorum::cuda::Run,
    shape: (usize, usize, usize, usize),
    plan: quorum::cuda::ops::matmul::plan::Plan,
    seed: u64,
) -> Option<String> {
    let (m, n, k, nb) = shape;
    let at = rand_f32(seed, &[nb, m, k]);
    let bt = rand_f32(seed + 1, &[nb, k, n]);
    let (a, b) = (run.upload(&at).unwrap(), run.upload(&bt).unwrap());
    let y = quorum::cuda::ops::matmul::sgemm_plan(
        run,
        &a,
        &b,
        None,
        m,
        n,
        k,
        false,
        false,
        1.0,
        0.0,
        nb,
        Some(plan),
    )
    .unwrap();
    let got = run.download(&y).unwrap().to_f64_vec().unwrap();
    let (af, bf) = (at.to_f64_vec().unwrap(), bt.to_f64_vec().unwrap());
    let want = gemm_reference(&af, &bf, m, n, k, nb);
    let eps = 4.0 * k as f64 * f32::EPSILON as f64;
    got.iter()
        .zip(&want)
        .enumerate()
        .find_map(|(i, (&g, &(w, mag)))| {
            let ok = (g - w).abs() <= eps * mag + 1e-30;
            (!ok).then(|| format!("{plan:?} on {shape:?}: y[{i}] = {g}, expected {w}"))
        })
}

#[test]
fn every_gemm_plan_agrees_with_the_reference() {
    // The cost model picks one plan per shape; any plan must give the product. Run every tile and
    // a spread of split counts (partial edge tiles, a K that no chunk divides, batches) against an
    // f64 reference. CUDA only: the plans are its kernels'.
    use quorum::cuda::ops::matmul::plan::{Dims, Plan, candidates};
    if !crate::harness::accelerators().contains(&quorum::Provider::Cuda) {
        println!("no CUDA device: the GEMM plans are not run");
        return;
    }
    let device = quorum::cuda::Device::get().unwrap();
    let counters = quorum::cuda::Counters::default();
    let run = quorum::cuda::Run::new(&device, &counters, Some(0xFF)).unwrap();
    for (s, shape) in [
        (130, 70, 300, 1),
        (65, 200, 513, 3),
        (257, 129, 1000, 1),
        (33, 260, 300, 2),
    ]
    .into_iter()
    .enumerate()
    {
        let (m, n, k, nb) = shape;
        let d = Dims {
            m,
            n,
            k,
            nb,
            es: 4,
            splittable: true,
            tc_async: false,
        };
        let plans: Vec<Plan> = candidates(&d);
        assert!(plans.iter().any(|p| p.nsplit > 2), "{shape:?}: {plans:?}");
        for p in plans {
            if let Some(miss) = plan_miss(&run, shape, p, 300 + s as u64) {
                panic!("{miss}");
            }
        }
    }
    // The check itself: a plan whose chunks leave out part of K must be caught.
    let (m, n, k, nb) = (130, 70, 300, 1);
    let mut broken = Plan::new(quorum::cuda::ops::matmul::tile::Variant::Big, k, 3);
    broken.nsplit -= 1;
    assert!(
        plan_miss(&run, (m, n, k, nb), broken, 300).is_some(),
        "a plan that drops the last K chunk went unnoticed"
    );
}
