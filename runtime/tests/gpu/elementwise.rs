//! Elementwise ops on CUDA against both oracles, over a sweep of shapes.
use crate::harness::*;

const SHAPES: &[&[usize]] = &[&[1], &[7], &[3, 5], &[2, 3, 257], &[1000, 33], &[0, 4]];

const UNARY: &[&str] = &[
    "Abs",
    "Neg",
    "Ceil",
    "Floor",
    "Round",
    "Sign",
    "Reciprocal",
    "Exp",
    "Erf",
    "Sin",
    "Cos",
    "Tan",
    "Tanh",
    "Sigmoid",
    "Relu",
    "LeakyRelu",
    "Elu",
    "Selu",
    "Celu",
    "HardSigmoid",
    "HardSwish",
    "Softplus",
    "Softsign",
    "Gelu",
    "Mish",
    "ThresholdedRelu",
];

#[test]
fn unary_ops() {
    for (s, shape) in SHAPES.iter().enumerate() {
        for (o, op) in UNARY.iter().enumerate() {
            let x = rand_range((s * 100 + o) as u64, shape, -6.0, 6.0);
            Case::new(op)
                .opset(if *op == "Gelu" { 20 } else { 17 })
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
    ];
    let x = quorum::Tensor::from_f32(&[v.len()], v).unwrap();
    for op in [
        "Exp", "Tanh", "Sigmoid", "Relu", "Abs", "Erf", "Softplus", "Softsign", "Gelu",
    ] {
        Case::new(op).opset(20).input(x.clone()).check();
    }
    Case::new("IsNaN").input(x.clone()).check();
    Case::new("IsInf").input(x.clone()).check();
    Case::new("IsInf")
        .attr_i("detect_negative", 0)
        .input(x)
        .check();
}

#[test]
fn binary_ops_broadcast() {
    let pairs: &[(&[usize], &[usize])] = &[
        (&[5], &[5]),
        (&[2, 3, 4], &[4]),
        (&[2, 1, 4], &[3, 1]),
        (&[1], &[6, 7]),
        (&[3, 0, 2], &[2]),
        (&[64, 65], &[64, 65]),
    ];
    for (p, (a, b)) in pairs.iter().enumerate() {
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
