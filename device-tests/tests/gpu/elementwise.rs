//! Elementwise ops on CUDA against both oracles, over a sweep of shapes; comparisons on values with
//! ties, and binary ops over every pair of special values (NaN, ±∞, ±0), in f32 and f16.
use quorum::{DType, Tensor};

use crate::harness::*;

const SHAPES: &[&[usize]] = &[&[1], &[7], &[3, 5], &[2, 3, 257], &[1000, 33], &[0, 4]];

/// Operand shapes of the binary cases, broadcasting included.
pub const PAIRS: &[(&[usize], &[usize])] = &[
    (&[5], &[5]),
    (&[2, 3, 4], &[4]),
    (&[2, 1, 4], &[3, 1]),
    (&[1], &[6, 7]),
    (&[3, 0, 2], &[2]),
    (&[64, 65], &[64, 65]),
];

pub const COMPARISONS: [&str; 5] = ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"];

/// `t`'s values as `d` (rounded once).
pub fn as_dtype(t: &Tensor, d: DType) -> Tensor {
    Tensor::from_f64s(d, t.shape(), t.to_f64_vec().unwrap()).unwrap()
}

/// Unary rows of the op table with cases of their own (Sqrt and Log need positive inputs, Clip its
/// bounds, IsNaN and IsInf special values, Not bools); [`unary`] takes every other.
const OWN_CASES: &[&str] = &["Sqrt", "Log", "Clip", "Not", "IsNaN", "IsInf"];

/// Every unary row of the op table (`quorum_optable`) that takes any float input as it is, in table
/// order: a new unary row is in the sweep without an edit here.
pub fn unary() -> impl Iterator<Item = &'static str> {
    quorum_optable::rows_of(quorum_optable::Family::Unary)
        .map(|r| r.name)
        .filter(|op| !OWN_CASES.contains(op))
}

#[test]
fn unary_ops() {
    for (s, shape) in SHAPES.iter().enumerate() {
        for (o, op) in unary().enumerate() {
            let x = rand_range((s * 100 + o) as u64, shape, -6.0, 6.0);
            Case::new(op)
                .opset(if op == "Gelu" { 20 } else { 17 })
                .input(x)
                .check();
        }
        // Sqrt and Log on positive inputs, plus the tanh Gelu.
        for op in ["Sqrt", "Log"] {
            Case::new(op)
                .input(rand_range(s as u64 + 7, shape, 1e-3, 50.0))
                .check();
        }
        Case::new("Gelu")
            .opset(20)
            .attr_s("approximate", "tanh")
            .input(rand_range(s as u64 + 9, shape, -6.0, 6.0))
            .check();
        // Far negative Gelu: tiny results where 1 + erf and 1 + tanh cancel (erf's tail reached
        // 1e-5 relative error at x = -5.3 on the device before the continued fraction took over).
        for approx in ["none", "tanh"] {
            Case::new("Gelu")
                .opset(20)
                .attr_s("approximate", approx)
                .input(rand_range(s as u64 + 11, shape, -12.0, -2.0))
                .check();
        }
    }
}

/// Every unary row of the op table that takes floats, on special values (±0, ±1, ±∞, NaN, tiny and
/// large) with its default attributes: the oracles judge every element, and NaN matches only NaN,
/// so a kernel whose NaN rule differs from the definition's (the table's NaN column) fails here.
#[test]
fn unary_special_values() {
    let v = vec![
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1e-30,
        88.0,
        -104.0,
        0.5,
        2.5,
    ];
    let x = quorum::Tensor::from_f32(&[v.len()], v).unwrap();
    let rows = quorum_optable::rows_of(quorum_optable::Family::Unary)
        .filter(|r| r.dtypes.contains(quorum_optable::Ty::F32));
    // Every row is run and the failures listed together: a device call is scarce, and the first
    // failure alone hides the rows after it (Clip's NaN on NVIDIA's Vulkan hid every later row).
    let mut ops = 0;
    let mut failed = Vec::new();
    for row in rows {
        let case = Case::new(row.name).opset(20).input(x.clone());
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || case.check())).is_err() {
            failed.push(row.name);
        }
        ops += 1;
    }
    assert!(
        failed.is_empty(),
        "unary rows wrong on special values: {failed:?}"
    );
    assert!(ops >= 30, "{ops} unary rows");
    Case::new("IsInf")
        .attr_i("detect_negative", 0)
        .input(x)
        .check();
}

#[test]
fn binary_ops_broadcast() {
    for (p, (a, b)) in PAIRS.iter().enumerate() {
        for (o, op) in [
            "Add",
            "Sub",
            "Mul",
            "Div",
            "Min",
            "Max",
            "PRelu",
            "Equal",
            "Less",
            "Greater",
            "LessOrEqual",
            "GreaterOrEqual",
        ]
        .iter()
        .enumerate()
        {
            // PRelu's slope broadcasts one way only: onto X's shape.
            if *op == "PRelu"
                && quorum::ops::broadcast::broadcast_shapes(&[a, b])
                    .ok()
                    .as_deref()
                    != Some(*a)
            {
                continue;
            }
            let x = rand_f32((p * 50 + o) as u64, a);
            let y = rand_f32((p * 50 + o + 1000) as u64, b);
            Case::new(op).input(x).input(y).check();
        }
        let x = rand_range(p as u64, a, 0.1, 4.0);
        let y = rand_range(p as u64 + 1, b, -3.0, 3.0);
        Case::new("Pow").opset(15).input(x).input(y).check();
        let x = rand_range(p as u64 + 2, a, -50.0, 50.0);
        let y = rand_range(p as u64 + 3, b, 0.5, 7.0);
        Case::new("Mod")
            .attr_i("fmod", 1)
            .input(x.clone())
            .input(y.clone())
            .check();
        Case::new("Mod")
            .attr_i("fmod", 0)
            .input(x)
            .input(y)
            .allow_fallback()
            .check();
    }
}

#[test]
fn variadic_and_clip_and_where() {
    let a = rand_f32(1, &[4, 5]);
    let b = rand_f32(2, &[5]);
    let c = rand_f32(3, &[4, 1]);
    for op in ["Sum", "Mean", "Max", "Min"] {
        Case::new(op)
            .input(a.clone())
            .input(b.clone())
            .input(c.clone())
            .check();
        Case::new(op).input(a.clone()).check();
    }
    let x = rand_range(4, &[3, 7], -3.0, 3.0);
    Case::new("Clip")
        .opset(13)
        .input(x.clone())
        .constant(quorum::Tensor::from_f32(&[], vec![-0.5]).unwrap())
        .constant(quorum::Tensor::from_f32(&[], vec![1.25]).unwrap())
        .check();
    Case::new("Clip")
        .opset(13)
        .input(x.clone())
        .absent()
        .constant(quorum::Tensor::from_f32(&[], vec![0.0]).unwrap())
        .check();
    Case::new("Clip")
        .opset(6)
        .attr_f("min", -1.0)
        .attr_f("max", 0.5)
        .input(x.clone())
        .check();
    let cond: Vec<bool> = (0..21).map(|i| i % 3 == 0).collect();
    let cond = quorum::Tensor::Bool(
        ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[3, 7]), cond).unwrap(),
    );
    Case::new("Where")
        .input(cond.clone())
        .input(x.clone())
        .input(rand_f32(5, &[7]))
        .check();
    let bools: Vec<bool> = (0..21).map(|i| i % 2 == 0).collect();
    let b2 = quorum::Tensor::Bool(
        ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[3, 7]), bools).unwrap(),
    );
    for op in ["And", "Or", "Xor"] {
        Case::new(op).input(cond.clone()).input(b2.clone()).check();
    }
    Case::new("Not").input(cond).check();
}

/// Seeded multiples of 0.5 in [-2, 2] as `d`: nine values, so that equal elements are common and
/// Equal, Less, LessOrEqual, Greater and GreaterOrEqual are told apart.
pub fn half_steps(seed: u64, d: DType, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let mut rng = quorum::inputs::Rng::new(seed);
    let v = (0..n)
        .map(|_| (rng.next_u64() % 9) as f64 * 0.5 - 2.0)
        .collect();
    Tensor::from_f64s(d, shape, v).unwrap()
}

#[test]
fn comparisons_with_ties() {
    for d in [DType::F32, DType::F16] {
        for (p, (a, b)) in PAIRS.iter().enumerate() {
            for (o, op) in COMPARISONS.iter().enumerate() {
                let seed = (p * 10 + o) as u64;
                Case::new(op)
                    .input(half_steps(seed, d, a))
                    .input(half_steps(seed + 100, d, b))
                    .check();
            }
        }
    }
}

/// NaN, both infinities, both zeros and a few ordinary values: as `[n, 1]` and `[n]` operands they
/// broadcast to every pair.
pub fn special_pairs(d: DType) -> (Tensor, Tensor) {
    let v = vec![
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -2.5,
        3.0,
        -3.0,
        2.0,
    ];
    let n = v.len();
    (
        Tensor::from_f64s(d, &[n, 1], v.clone()).unwrap(),
        Tensor::from_f64s(d, &[n], v).unwrap(),
    )
}

#[test]
fn binary_special_values() {
    for d in [DType::F32, DType::F16] {
        let (x, y) = special_pairs(d);
        for op in [
            "Add",
            "Sub",
            "Mul",
            "Div",
            "Min",
            "Max",
            "Sum",
            "Mean",
            "Equal",
            "Less",
            "LessOrEqual",
            "Greater",
            "GreaterOrEqual",
        ] {
            Case::new(op).input(x.clone()).input(y.clone()).check();
        }
        Case::new("Pow")
            .opset(15)
            .input(x.clone())
            .input(y.clone())
            .check();
        for fmod in [1, 0] {
            Case::new("Mod")
                .attr_i("fmod", fmod)
                .input(x.clone())
                .input(y.clone())
                .check();
        }
    }
}
