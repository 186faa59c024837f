//! f16 and bf16 products on the tensor cores (CUDA, sm_80 and later, at any precision): both are
//! TF32 values, so the TF32 `mma` multiplies them exactly, and the f16 and bf16 `mma`s do too; all
//! sum in f32 the tensor cores' way (a few exact products at a time added to the accumulator and
//! truncated), which the run declares (`Arithmetic::TENSOR_CORES`) and which stays within the
//! standard bound. Every tiled plan of f16 and bf16 operands agrees with both oracles under that
//! declaration; the truncation itself is measured on the device (long sums of positive terms,
//! f32 operands that TF32 leaves unchanged): the model that truncates as declared agrees, and the
//! same outputs claimed as round-to-nearest sums are caught by the spread judge; f16 and bf16 sessions of
//! MatMul, Gemm and Conv pass strict verification — the register-staged tiles (f16 widened into
//! the TF32 `mma`) and, where rows are 16-byte aligned, the asynchronous one (`ldmatrix`,
//! `mma.m16n8k16`). (The wrong kernel "an f16 path that accumulates in f16" is caught in `cargo
//! test` on the simulated device: `runtime/tests/cli_precision.rs`.)
use quorum::backend::{Arithmetic, Precision};
use quorum::cuda::ops::matmul::plan::{Dims, Plan, candidates};
use quorum::cuda::ops::matmul::tile::Variant;
use quorum::ir::Node;
use quorum::tensor::DType;
use quorum::verify::{Check, check_declared};
use quorum::{Provider, SessionOptions, Tensor, Value, VerifyMode};

use crate::harness::{Case, accelerators, rand_f32, rand_range};
use crate::matmul::f16;

pub(crate) fn cuda() -> bool {
    accelerators().contains(&Provider::Cuda)
}

pub(crate) fn matmul_node() -> Node {
    Node {
        name: "mm".into(),
        op_type: "MatMul".into(),
        domain: String::new(),
        opset: 13,
        inputs: vec!["a".into(), "b".into()],
        outputs: vec!["y".into()],
        attrs: Default::default(),
    }
}

/// Runs `plan` on `nb` products A `[m, k]` · B `[k, n]` of the given tensors (f16 or f32; TF32
/// allowed or not); returns the output and the run's declaration.
pub(crate) fn product(
    at: &Tensor,
    bt: &Tensor,
    shape: (usize, usize, usize, usize),
    plan: Option<Plan>,
    tf32: bool,
) -> (Tensor, Arithmetic) {
    let (m, n, k, nb) = shape;
    let device = quorum::cuda::Device::get().unwrap();
    let counters = quorum::cuda::Counters::default();
    let run = quorum::cuda::Run::new(&device, &counters, Some(0xFF)).unwrap();
    run.allow_tf32(tf32);
    run.begin_node("mm");
    let (a, b) = (run.upload(at).unwrap(), run.upload(bt).unwrap());
    let y = quorum::cuda::ops::matmul::sgemm_plan(
        &run, &a, &b, None, m, n, k, false, false, 1.0, 0.0, nb, plan,
    )
    .unwrap();
    (run.download(&y).unwrap(), run.arithmetic())
}

/// The first `[rows, cols]` matrix of a stack of them, in the stack's type.
pub(crate) fn first(t: &Tensor, rows: usize, cols: usize) -> Tensor {
    let v = t.to_f64_vec().unwrap()[..rows * cols].to_vec();
    Tensor::from_f64s(t.dtype(), &[rows, cols], v).unwrap()
}

pub(crate) fn judge(a: &Tensor, b: &Tensor, y: &Tensor, operands: Arithmetic) -> Check {
    let (a, b) = (Value::Tensor(a.clone()), Value::Tensor(b.clone()));
    check_declared(
        &matmul_node(),
        &[Some(&a), Some(&b)],
        &[Value::Tensor(y.clone())],
        operands,
    )
}

#[rstest::rstest]
fn every_half_plan_agrees_as_exact_products(#[values(DType::F16, DType::BF16)] half: DType) {
    if crate::harness::bf16_off(half) {
        return;
    }
    let h = |t: &Tensor| crate::elementwise::as_dtype(t, half);
    if !cuda() {
        println!("no CUDA device: the tensor-core GEMM is not run");
        return;
    }
    // Rows of a multiple of 4 elements (8-byte loads) and odd ones (scalar loads), partial
    // tiles, batches, and K long enough to split.
    for (s, shape) in [
        (130, 72, 300, 1),
        (65, 200, 513, 3),
        (257, 129, 1000, 1),
        (64, 64, 4096, 1),
        (33, 260, 300, 2),
        // Rows of a multiple of 8 halves: the asynchronous copies (a partial k-tile of 32 in
        // the second, partial row and column tiles in both).
        (128, 200, 520, 2),
        (100, 136, 72, 1),
    ]
    .into_iter()
    .enumerate()
    {
        let (m, n, k, nb) = shape;
        let at = h(&rand_f32(800 + s as u64, &[nb, m, k]));
        let bt = h(&rand_f32(850 + s as u64, &[nb, k, n]));
        let d = Dims {
            m,
            n,
            k,
            nb,
            es: 2,
            splittable: true,
            tc_async: false,
        };
        let mut plans: Vec<Option<Plan>> = candidates(&d).into_iter().map(Some).collect();
        plans.push(None);
        for p in plans {
            let (y, declared) = product(&at, &bt, shape, p, false);
            let what = format!("{p:?} on {shape:?}");
            assert_eq!(y.dtype(), half, "{what}");
            if m > 4 {
                assert_eq!(declared, Arithmetic::TENSOR_CORES, "{what}: not declared");
            }
            let (a0, b0, y0) = (first(&at, m, k), first(&bt, k, n), first(&y, m, n));
            assert_eq!(judge(&a0, &b0, &y0, declared), Check::Agree, "{what}");
        }
    }
}

/// `t` with every element rounded to f16 and held as f32: values TF32 leaves unchanged.
fn f16_valued(t: &Tensor) -> Tensor {
    let v: Vec<f32> = f16(t)
        .to_f64_vec()
        .unwrap()
        .into_iter()
        .map(|x| x as f32)
        .collect();
    Tensor::from_f32(t.shape(), v).unwrap()
}

#[test]
fn tensor_core_sums_are_truncated_as_declared() {
    if !cuda() {
        println!("no CUDA device: the tensor-core GEMM is not run");
        return;
    }
    // Long sums, zero-mean and all-positive, on the tensor cores with operands that TF32 rounding
    // leaves unchanged: judged under the tensor cores' declared sums (exact operands, truncated
    // sums), they agree; claimed as round-to-nearest sums, the positive ones' one-sided drift is
    // caught where one launch sums all of K (a split sums its parts to nearest, an eighth of the
    // drift each).
    use quorum::verify::Wrong;
    let shape = (64, 64, 4096, 1);
    for (positive, seed) in [(false, 900u64), (true, 910)] {
        let draw = |seed: u64, sh: &[usize]| {
            if positive {
                rand_range(seed, sh, 0.25, 1.0)
            } else {
                rand_f32(seed, sh)
            }
        };
        let at = f16_valued(&draw(seed, &[64, 4096]));
        let bt = f16_valued(&draw(seed + 1, &[4096, 64]));
        for plan in [
            Plan::new(Variant::Big, 4096, 1),
            Plan::new(Variant::Small, 4096, 1),
            Plan::new(Variant::Small, 4096, 8),
        ] {
            let (y, declared) = product(&at, &bt, shape, Some(plan), true);
            let what = format!("{plan:?}, positive {positive}");
            assert_eq!(
                declared,
                Arithmetic::TF32,
                "{what}: ran on the tensor cores"
            );
            let as_declared = judge(&at, &bt, &y, Arithmetic::TENSOR_CORES);
            assert_eq!(as_declared, Check::Agree, "{what}");
            let claimed = judge(&at, &bt, &y, Arithmetic::EXACT);
            println!("{what}: claimed round-to-nearest: {claimed:?}");
            if positive && plan.nsplit == 1 {
                assert!(
                    matches!(
                        claimed,
                        Check::Mismatch {
                            wrong: Wrong::Spread { .. },
                            ..
                        }
                    ),
                    "{what}: truncated sums claimed as round-to-nearest were not caught"
                );
            }
        }
    }
}

/// A node's case run at `precision` with strict verification (each node judged under its
/// kernel's declaration, the run failing on any mismatch).
pub(crate) fn strict(case: Case, precision: Precision) {
    let what = case.describe();
    let (session, feeds) = case.session(SessionOptions {
        providers: vec![Provider::Cuda, Provider::Cpu],
        precision,
        verify: VerifyMode::Strict,
        poison_device_buffers: Some(0xFF),
        fold_constants: false,
        ..Default::default()
    });
    session.run(feeds).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        session.counters().verify_checks > 0,
        "{what}: nothing was judged"
    );
}

#[rstest::rstest]
fn half_sessions_pass_strict_verification(#[values(DType::F16, DType::BF16)] half: DType) {
    if crate::harness::bf16_off(half) {
        return;
    }
    if !cuda() {
        println!("no CUDA device: the tensor-core GEMM is not run");
        return;
    }
    let f16 = |t: &Tensor| crate::elementwise::as_dtype(t, half);
    for (a, b, seed) in [
        (vec![2, 129, 300], vec![300, 68], 1),
        (vec![3, 4, 70, 513], vec![3, 4, 513, 65], 2),
        (vec![256, 1024], vec![1024, 768], 3),
    ] {
        strict(
            Case::new("MatMul")
                .opset(13)
                .input(f16(&rand_f32(seed, &a)))
                .input(f16(&rand_f32(seed + 1, &b))),
            Precision::F32,
        );
    }
    strict(
        Case::new("Gemm")
            .opset(13)
            .attr_i("transA", 1)
            .attr_i("transB", 1)
            .attr_f("alpha", 0.5)
            .attr_f("beta", 2.0)
            .input(f16(&rand_f32(10, &[300, 132])))
            .constant(f16(&rand_f32(11, &[92, 300])))
            .constant(f16(&rand_f32(12, &[92]))),
        Precision::F32,
    );
    // Both transposed, rows of a multiple of 8 halves: the asynchronous copies, A and B along
    // k (`ldmatrix` untransposed) and along m (transposed).
    strict(
        Case::new("Gemm")
            .opset(13)
            .attr_i("transA", 1)
            .attr_i("transB", 1)
            .input(f16(&rand_f32(13, &[520, 264])))
            .constant(f16(&rand_f32(14, &[136, 520])))
            .constant(f16(&rand_f32(15, &[136]))),
        Precision::F32,
    );
    // A 3×3 convolution as an implicit GEMM (K = 64·9).
    strict(
        Case::new("Conv")
            .opset(11)
            .attr_ints("pads", &[1, 1, 1, 1])
            .input(f16(&rand_f32(20, &[2, 64, 28, 28])))
            .constant(f16(&rand_f32(21, &[96, 64, 3, 3])))
            .constant(f16(&rand_f32(22, &[96]))),
        Precision::F32,
    );
}
