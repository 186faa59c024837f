//! The elementwise families on float16 and bfloat16 operands: unary math, binary arithmetic,
//! variadic ops, Clip and Where against both oracles (comparisons, ties and special values are in
//! `elementwise.rs`). The kernels widen either half to f32, compute there and round the result once.
use quorum::{DType, Tensor};
use rstest::rstest;

use crate::elementwise::{PAIRS, as_dtype, unary};
use crate::harness::*;

// [4, 36] and [2, 3, 256] hold a multiple of 4 elements: the kernel that moves four a thread.
const SHAPES: &[&[usize]] = &[&[1], &[7], &[3, 5], &[2, 3, 257], &[4, 36], &[2, 3, 256]];

#[rstest]
fn unary_ops(#[values(DType::F16, DType::BF16)] dtype: DType) {
    if crate::harness::bf16_off(dtype) {
        return;
    }
    let h = |t: Tensor| as_dtype(&t, dtype);
    for (s, shape) in SHAPES.iter().enumerate() {
        for (o, op) in unary().enumerate() {
            let x = h(rand_range((s * 100 + o) as u64 + 5000, shape, -6.0, 6.0));
            Case::new(op)
                .opset(if op == "Gelu" { 20 } else { 17 })
                .input(x)
                .check();
        }
        for op in ["Sqrt", "Log"] {
            Case::new(op)
                .input(h(rand_range(s as u64 + 5007, shape, 1e-3, 50.0)))
                .check();
        }
        Case::new("Gelu")
            .opset(20)
            .attr_s("approximate", "tanh")
            .input(h(rand_range(s as u64 + 5009, shape, -6.0, 6.0)))
            .check();
    }
    let v = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        6e-8,
        11.0,
        -17.0,
    ];
    let x = Tensor::from_f64s(dtype, &[v.len()], v).unwrap();
    for op in [
        "Exp", "Tanh", "Sigmoid", "Relu", "Abs", "Neg", "Sign", "Softplus", "Gelu",
    ] {
        Case::new(op).opset(20).input(x.clone()).check();
    }
    Case::new("IsNaN").input(x.clone()).check();
    Case::new("IsInf").input(x).check();
}

#[rstest]
fn binary_ops_broadcast(#[values(DType::F16, DType::BF16)] dtype: DType) {
    if crate::harness::bf16_off(dtype) {
        return;
    }
    let h = |t: Tensor| as_dtype(&t, dtype);
    for (p, (a, b)) in PAIRS.iter().enumerate() {
        for (o, op) in ["Add", "Sub", "Mul", "Div", "Min", "Max", "PRelu"]
            .iter()
            .enumerate()
        {
            if *op == "PRelu"
                && quorum::ops::broadcast::broadcast_shapes(&[a, b])
                    .ok()
                    .as_deref()
                    != Some(*a)
            {
                continue;
            }
            let x = h(rand_f32((p * 50 + o) as u64 + 6000, a));
            let y = h(rand_f32((p * 50 + o) as u64 + 7000, b));
            Case::new(op).input(x).input(y).check();
        }
        let x = h(rand_range(p as u64 + 6100, a, 0.1, 4.0));
        let y = h(rand_range(p as u64 + 6101, b, -3.0, 3.0));
        Case::new("Pow").opset(15).input(x).input(y).check();
        let x = h(rand_range(p as u64 + 6102, a, -50.0, 50.0));
        let y = h(rand_range(p as u64 + 6103, b, 0.5, 7.0));
        for fmod in [1, 0] {
            Case::new("Mod")
                .attr_i("fmod", fmod)
                .input(x.clone())
                .input(y.clone())
                .check();
        }
    }
}

#[rstest]
fn variadic_clip_and_where(#[values(DType::F16, DType::BF16)] dtype: DType) {
    if crate::harness::bf16_off(dtype) {
        return;
    }
    let h = |t: Tensor| as_dtype(&t, dtype);
    // One, two and three operands, broadcast: every kernel sums halves in f32 and rounds once.
    let a = h(rand_f32(6201, &[4, 5]));
    let b = h(rand_f32(6202, &[4, 1]));
    let c = h(rand_f32(6203, &[5]));
    for op in ["Sum", "Mean", "Max", "Min"] {
        Case::new(op).input(a.clone()).input(b.clone()).check();
        Case::new(op).input(c.clone()).input(b.clone()).check();
        Case::new(op)
            .input(a.clone())
            .input(b.clone())
            .input(c.clone())
            .check();
        Case::new(op).input(a.clone()).check();
    }
    for op in ["Max", "Min"] {
        Case::new(op)
            .input(a.clone())
            .input(b.clone())
            .input(c.clone())
            .check();
    }
    let x = h(rand_range(6204, &[3, 7], -3.0, 3.0));
    let bound = |v: f64| Tensor::from_f64s(dtype, &[], vec![v]).unwrap();
    Case::new("Clip")
        .opset(13)
        .input(x.clone())
        .constant(bound(-0.5))
        .constant(bound(1.25))
        .check();
    Case::new("Clip")
        .opset(13)
        .input(x.clone())
        .absent()
        .constant(bound(0.0))
        .check();
    Case::new("Clip")
        .opset(6)
        .attr_f("min", -1.0)
        .attr_f("max", 0.5)
        .input(x.clone())
        .check();
    let cond: Vec<bool> = (0..21).map(|i| i % 3 == 0).collect();
    let cond =
        Tensor::Bool(ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[3, 7]), cond).unwrap());
    Case::new("Where")
        .input(cond)
        .input(x)
        .input(h(rand_f32(6205, &[7])))
        .check();
}

/// Four elements a thread (`ew4h`, `ew4b`, and `ew4` for f32): same-shape operands with operands of one
/// element (a scalar constant, as GELU's decomposition and attention's scale have), in either
/// position, for the four arithmetic ops; the general kernel's results are the oracles' too.
#[test]
fn four_a_thread_with_scalar_operands() {
    for dtype in [DType::F16, DType::BF16, DType::F32] {
        if bf16_off(dtype) {
            continue;
        }
        for (o, op) in ["Add", "Sub", "Mul", "Div"].iter().enumerate() {
            for (s, scalar) in [&[][..], &[1][..]].iter().enumerate() {
                let seed = (o * 10 + s) as u64 + 6500;
                let x = as_dtype(&rand_range(seed, &[8, 12], 0.5, 3.0), dtype);
                let c = as_dtype(&rand_range(seed + 1, scalar, 0.5, 2.0), dtype);
                Case::new(op).input(x.clone()).constant(c.clone()).check();
                Case::new(op).constant(c).input(x.clone()).check();
                let y = as_dtype(&rand_range(seed + 2, &[8, 12], 0.5, 3.0), dtype);
                Case::new(op).input(x).input(y).check();
            }
        }
    }
}
