//! TF32 on the tensor cores (`Precision::Tf32`, CUDA): every tiled GEMM plan in its tensor-core
//! form gives the product within the bound of TF32 operands, as the run declares; the same numbers
//! declared as exact f32 are caught (the wrong kernel "a TF32 path that claims f32"); and sessions
//! of MatMul, Gemm and Conv nodes with `precision: Tf32` pass strict verification node by node,
//! each judged under what its kernel declared.
use quorum::Tensor;
use quorum::backend::{Arithmetic, Precision};
use quorum::cuda::ops::matmul::plan::{Dims, Plan, candidates};
use quorum::cuda::ops::matmul::tile::Variant;
use quorum::verify::{Check, Wrong};

use crate::f16_cores::{cuda, first, judge, product, strict};
use crate::harness::{Case, rand_f32};

/// Runs `plan` (a CUDA-core plan; the run turns it into its tensor-core form) on `nb` products
/// A `[m, k]` · B `[k, n]` of seeded random f32 operands with TF32 allowed; returns the inputs, the
/// output and the run's declaration.
fn tf32_product(
    shape: (usize, usize, usize, usize),
    plan: Option<Plan>,
    seed: u64,
) -> (Tensor, Tensor, Tensor, Arithmetic) {
    let (m, n, k, nb) = shape;
    let at = rand_f32(seed, &[nb, m, k]);
    let bt = rand_f32(seed + 1, &[nb, k, n]);
    let (y, declared) = product(&at, &bt, shape, plan, true);
    (at, bt, y, declared)
}

#[test]
fn every_tf32_plan_agrees_under_its_declaration() {
    if !cuda() {
        println!("no CUDA device: the tensor-core GEMM is not run");
        return;
    }
    for (s, shape) in [
        (130, 70, 300, 1),
        (65, 200, 513, 3),
        (257, 129, 1000, 1),
        (33, 260, 300, 2),
        (128, 128, 8, 1),
        (1, 1, 1, 1),
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
        let mut plans: Vec<Option<Plan>> = candidates(&d).into_iter().map(Some).collect();
        plans.push(None);
        for p in plans {
            let (a, b, y, declared) = tf32_product(shape, p, 700 + s as u64);
            let what = format!("{p:?} on {shape:?}");
            if m > 4 {
                // The tiled kernels ran (the skinny kernel keeps exact products).
                assert_eq!(declared, Arithmetic::TF32, "{what}: not declared");
            }
            // The oracles judge one product at a time: batch 0's.
            let (a0, b0, y0) = (first(&a, m, k), first(&b, k, n), first(&y, m, n));
            assert_eq!(judge(&a0, &b0, &y0, declared), Check::Agree, "{what}");
        }
    }
}

#[test]
fn the_tensor_core_product_claimed_as_f32_is_caught() {
    if !cuda() {
        println!("no CUDA device: the tensor-core GEMM is not run");
        return;
    }
    // Long sums of zero-mean terms: every element within an f32 product's worst-case bound, but
    // the rounding of 4,096 operands per sum shows in the errors as a whole.
    let plan = Plan::new(Variant::Big, 4096, 1);
    let (a, b, y, declared) = tf32_product((64, 64, 4096, 1), Some(plan), 900);
    let (a, b, y) = (first(&a, 64, 4096), first(&b, 4096, 64), first(&y, 64, 64));
    assert_eq!(declared, Arithmetic::TF32);
    assert_eq!(judge(&a, &b, &y, Arithmetic::TF32), Check::Agree);
    let claimed = judge(&a, &b, &y, Arithmetic::EXACT);
    assert!(
        matches!(
            claimed,
            Check::Mismatch {
                wrong: Wrong::Spread { .. },
                ..
            }
        ),
        "TF32 products judged as exact f32 were not caught: {claimed:?}"
    );
}

#[test]
fn tf32_sessions_pass_strict_verification() {
    if !cuda() {
        println!("no CUDA device: the tensor-core GEMM is not run");
        return;
    }
    for (a, b, seed) in [
        (vec![2, 129, 300], vec![300, 67], 1),
        (vec![3, 4, 70, 513], vec![3, 4, 513, 65], 2),
        (vec![256, 1024], vec![1024, 768], 3),
    ] {
        strict(
            Case::new("MatMul")
                .opset(13)
                .input(rand_f32(seed, &a))
                .input(rand_f32(seed + 1, &b)),
            Precision::Tf32,
        );
    }
    strict(
        Case::new("Gemm")
            .opset(13)
            .attr_i("transA", 1)
            .attr_i("transB", 1)
            .attr_f("alpha", 0.5)
            .attr_f("beta", 2.0)
            .input(rand_f32(10, &[300, 130]))
            .constant(rand_f32(11, &[90, 300]))
            .constant(rand_f32(12, &[90])),
        Precision::Tf32,
    );
    // Both operands transposed, rows 16-byte aligned: the asynchronous copies along k.
    strict(
        Case::new("Gemm")
            .opset(13)
            .attr_i("transA", 1)
            .attr_i("transB", 1)
            .input(rand_f32(13, &[520, 260]))
            .constant(rand_f32(14, &[132, 520]))
            .constant(rand_f32(15, &[132])),
        Precision::Tf32,
    );
    // A 3×3 convolution as an implicit GEMM (K = 64·9).
    strict(
        Case::new("Conv")
            .opset(11)
            .attr_ints("pads", &[1, 1, 1, 1])
            .input(rand_f32(20, &[2, 64, 28, 28]))
            .constant(rand_f32(21, &[96, 64, 3, 3]))
            .constant(rand_f32(22, &[96])),
        Precision::Tf32,
    );
}
