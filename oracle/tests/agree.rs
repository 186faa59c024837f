//! The two oracles must agree wherever both claim an op: seeded random inputs (never all zeros) over a
//! table of op forms. A disagreement is a bug in one of them (or a shared question for a human); an
//! op only one oracle covers is reported, not passed.
#![forbid(unsafe_code)]
use std::collections::BTreeMap;

use quorum_oracle::independent::Independent;
use quorum_oracle::reference::Reference;
use quorum_oracle::{Attr, DType, NodeSpec, Oracle, Value};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
}

fn spec(op: &str, opset: i64, attrs: &[(&str, Attr)]) -> NodeSpec {
    NodeSpec {
        domain: String::new(),
        op_type: op.into(),
        opset,
        attrs: attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect::<BTreeMap<_, _>>(),
        num_outputs: 1,
    }
}

fn random(shape: &[usize], rng: &mut Rng, positive: bool) -> Value {
    let n: usize = shape.iter().product();
    let data = (0..n)
        .map(|_| {
            if positive {
                rng.next().abs() * 3.0 + 0.1
            } else {
                rng.next() * 3.0
            }
        })
        .collect();
    Value::new(DType::F32, shape.to_vec(), data).unwrap()
}

/// (node, input shapes, inputs must be positive)
fn cases() -> Vec<(NodeSpec, Vec<Vec<usize>>, bool)> {
    use Attr::*;
    vec![
        (spec("Add", 14, &[]), vec![vec![2, 3, 4], vec![3, 1]], false),
        (spec("Mul", 14, &[]), vec![vec![4, 1], vec![1, 5]], false),
        (spec("Sub", 14, &[]), vec![vec![3], vec![2, 3]], false),
        (spec("Div", 14, &[]), vec![vec![2, 3], vec![2, 3]], true),
        (spec("Pow", 15, &[]), vec![vec![2, 3], vec![3]], true),
        (spec("Relu", 14, &[]), vec![vec![5, 7]], false),
        (spec("Sigmoid", 13, &[]), vec![vec![5, 7]], false),
        (spec("Tanh", 13, &[]), vec![vec![5, 7]], false),
        (spec("Exp", 13, &[]), vec![vec![6]], false),
        (spec("Log", 13, &[]), vec![vec![6]], true),
        (spec("Sqrt", 13, &[]), vec![vec![6]], true),
        (spec("Erf", 13, &[]), vec![vec![9]], false),
        (
            spec("LeakyRelu", 16, &[("alpha", Float(0.2))]),
            vec![vec![3, 4]],
            false,
        ),
        (
            spec("Elu", 6, &[("alpha", Float(0.7))]),
            vec![vec![3, 4]],
            false,
        ),
        (spec("HardSigmoid", 6, &[]), vec![vec![3, 4]], false),
        (spec("Softplus", 1, &[]), vec![vec![3, 4]], false),
        (spec("Gelu", 20, &[]), vec![vec![3, 4]], false),
        (
            spec("MatMul", 13, &[]),
            vec![vec![2, 3, 5], vec![5, 4]],
            false,
        ),
        (spec("MatMul", 13, &[]), vec![vec![7], vec![2, 7, 3]], false),
        (
            spec(
                "Gemm",
                13,
                &[
                    ("transA", Int(1)),
                    ("alpha", Float(0.5)),
                    ("beta", Float(2.0)),
                ],
            ),
            vec![vec![5, 3], vec![5, 4], vec![4]],
            false,
        ),
        (
            spec("Softmax", 13, &[("axis", Int(1))]),
            vec![vec![2, 5, 3]],
            false,
        ),
        (
            spec("Softmax", 11, &[("axis", Int(1))]),
            vec![vec![2, 5, 3]],
            false,
        ),
        (
            spec("LogSoftmax", 13, &[("axis", Int(-1))]),
            vec![vec![4, 6]],
            false,
        ),
        (
            spec(
                "ReduceSum",
                11,
                &[("axes", Ints(vec![1])), ("keepdims", Int(0))],
            ),
            vec![vec![3, 4, 5]],
            false,
        ),
        (
            spec("ReduceMean", 11, &[("axes", Ints(vec![0, 2]))]),
            vec![vec![3, 4, 5]],
            false,
        ),
        (
            spec("ReduceMax", 11, &[("axes", Ints(vec![2]))]),
            vec![vec![3, 4, 5]],
            false,
        ),
        (spec("ReduceL2", 11, &[]), vec![vec![3, 4]], false),
        (
            spec("ReduceLogSumExp", 11, &[("axes", Ints(vec![1]))]),
            vec![vec![3, 4]],
            false,
        ),
        (
            spec("ArgMax", 13, &[("axis", Int(1))]),
            vec![vec![3, 4, 2]],
            false,
        ),
        (
            spec(
                "Conv",
                11,
                &[
                    ("pads", Ints(vec![0, 1, 2, 0])),
                    ("strides", Ints(vec![2, 1])),
                ],
            ),
            vec![vec![1, 2, 7, 6], vec![3, 2, 3, 3]],
            false,
        ),
        (
            spec(
                "Conv",
                11,
                &[("group", Int(2)), ("dilations", Ints(vec![2, 1]))],
            ),
            vec![vec![2, 4, 8, 5], vec![6, 2, 2, 3], vec![6]],
            false,
        ),
        (
            spec(
                "MaxPool",
                12,
                &[
                    ("kernel_shape", Ints(vec![3, 3])),
                    ("pads", Ints(vec![1, 1, 1, 1])),
                    ("strides", Ints(vec![2, 2])),
                ],
            ),
            vec![vec![1, 2, 7, 7]],
            false,
        ),
        (
            spec(
                "AveragePool",
                19,
                &[
                    ("kernel_shape", Ints(vec![2, 3])),
                    ("pads", Ints(vec![1, 0, 0, 1])),
                ],
            ),
            vec![vec![1, 2, 5, 6]],
            false,
        ),
        (
            spec("GlobalAveragePool", 1, &[]),
            vec![vec![2, 3, 4, 5]],
            false,
        ),
    ]
}

/// Integers of `dtype` in lo..=hi, never all zeros.
fn ints(dtype: DType, shape: &[usize], rng: &mut Rng, lo: i64, hi: i64) -> Value {
    let n: usize = shape.iter().product();
    let mut data: Vec<f64> = (0..n)
        .map(|_| (lo as f64 + (rng.next() * 0.5 + 0.5) * (hi - lo + 1) as f64).floor())
        .map(|v| v.min(hi as f64))
        .collect();
    if data.iter().all(|&v| v == 0.0) {
        data[0] = hi as f64;
    }
    Value::new(dtype, shape.to_vec(), data).unwrap()
}

/// `v` with every element moved away from zero (a divisor).
fn nonzero(mut v: Value) -> Value {
    for x in v.data.iter_mut() {
        if *x == 0.0 {
            *x = 1.0;
        }
    }
    v
}

/// Op forms whose inputs are not plain f32 values (integers, several outputs, recurrent weights):
/// nodes with their inputs, drawn from `rng`.
fn typed_cases(rng: &mut Rng) -> Vec<(NodeSpec, Vec<Option<Value>>)> {
    use Attr::*;
    let f = |shape: &[usize], rng: &mut Rng| Some(random(shape, rng, false));
    let with_outputs = |mut n: NodeSpec, k: usize| {
        n.num_outputs = k;
        n
    };
    vec![
        // Mod, fmod 0 (the divisor's sign) on integers and fmod 1 (the dividend's) on floats and
        // integers; the divisors never 0.
        (
            spec("Mod", 13, &[]),
            vec![
                Some(ints(DType::I32, &[3, 4], rng, -20, 20)),
                Some(nonzero(ints(DType::I32, &[4], rng, -6, 6))),
            ],
        ),
        (
            spec("Mod", 13, &[("fmod", Int(1))]),
            vec![f(&[2, 5], rng), Some(nonzero(random(&[5], rng, true)))],
        ),
        (
            spec("Mod", 13, &[("fmod", Int(1))]),
            vec![
                Some(ints(DType::I64, &[6], rng, -50, 50)),
                Some(nonzero(ints(DType::I64, &[6], rng, -7, 7))),
            ],
        ),
        // BitShift both ways, amounts across the whole width of the type.
        (
            spec("BitShift", 11, &[("direction", String("LEFT".into()))]),
            vec![
                Some(ints(DType::U8, &[2, 6], rng, 0, 255)),
                Some(ints(DType::U8, &[6], rng, 0, 7)),
            ],
        ),
        (
            spec("BitShift", 11, &[("direction", String("RIGHT".into()))]),
            vec![
                Some(ints(DType::U32, &[8], rng, 0, u32::MAX as i64)),
                Some(ints(DType::U32, &[8], rng, 0, 31)),
            ],
        ),
        // ReduceProd of 60 int64 factors in [-9, 9]: far past 2^63, so the product wraps around.
        (
            spec("ReduceProd", 13, &[("axes", Ints(vec![1]))]),
            vec![Some(nonzero(ints(DType::I64, &[2, 60], rng, -9, 9)))],
        ),
        // Cast to float16 (to = 10), values rounded to the nearest half-precision number.
        (spec("Cast", 19, &[("to", Int(10))]), vec![f(&[4, 5], rng)]),
        // LSTM with bias, initial states and peepholes, both directions, all three outputs.
        (
            with_outputs(
                spec(
                    "LSTM",
                    14,
                    &[
                        ("hidden_size", Int(3)),
                        ("direction", String("bidirectional".into())),
                    ],
                ),
                3,
            ),
            vec![
                f(&[4, 2, 5], rng),
                f(&[2, 12, 5], rng),
                f(&[2, 12, 3], rng),
                f(&[2, 24], rng),
                None,
                f(&[2, 2, 3], rng),
                f(&[2, 2, 3], rng),
                f(&[2, 9], rng),
            ],
        ),
        // GRU, reversed, with linear_before_reset, batch-first layout and both outputs.
        (
            with_outputs(
                spec(
                    "GRU",
                    14,
                    &[
                        ("hidden_size", Int(4)),
                        ("direction", String("reverse".into())),
                        ("linear_before_reset", Int(1)),
                        ("layout", Int(1)),
                    ],
                ),
                2,
            ),
            vec![
                f(&[2, 3, 3], rng),
                f(&[1, 12, 3], rng),
                f(&[1, 12, 4], rng),
                f(&[1, 24], rng),
                None,
                f(&[2, 1, 4], rng),
            ],
        ),
    ]
}

/// A float tensor of `dtype` with random values (exactly representable in f16 and bf16: multiples of
/// 1/64 below 4 in magnitude), never all zeros.
fn floats_of(dtype: DType, shape: &[usize], rng: &mut Rng) -> Value {
    let mut v = random(shape, rng, false);
    for x in v.data.iter_mut() {
        *x = (*x * 64.0).round() / 64.0;
    }
    if v.data.iter().all(|&x| x == 0.0) && !v.data.is_empty() {
        v.data[0] = 0.5;
    }
    Value::new(dtype, v.shape, v.data).unwrap()
}

fn scalar(dtype: DType, v: f64) -> Option<Value> {
    Some(Value::new(dtype, vec![], vec![v]).unwrap())
}

fn i64s(v: &[i64]) -> Option<Value> {
    Some(
        Value::new(
            DType::I64,
            vec![v.len()],
            v.iter().map(|&x| x as f64).collect(),
        )
        .unwrap(),
    )
}

/// ConstantOfShape, Dropout where it is deterministic (every era of the op) and CastLike.
fn fill_cases(rng: &mut Rng) -> Vec<(NodeSpec, Vec<Option<Value>>)> {
    use Attr::*;
    let two = |mut n: NodeSpec| {
        n.num_outputs = 2;
        n
    };
    let fill = |dtype: DType, v: f64| Tensor(Value::new(dtype, vec![1], vec![v]).unwrap());
    let f = |d: DType, shape: &[usize], rng: &mut Rng| Some(floats_of(d, shape, rng));
    let mut out = vec![
        (spec("ConstantOfShape", 9, &[]), vec![i64s(&[2, 3, 4])]),
        (
            spec(
                "ConstantOfShape",
                9,
                &[("value", fill(DType::F32, rng.next() * 5.0))],
            ),
            vec![i64s(&[4, 1, 3])],
        ),
        (
            spec("ConstantOfShape", 20, &[("value", fill(DType::I64, -7.0))]),
            vec![i64s(&[])],
        ),
        (
            spec("ConstantOfShape", 21, &[("value", fill(DType::Bool, 1.0))]),
            vec![i64s(&[3, 0, 2])],
        ),
        (
            spec("ConstantOfShape", 23, &[("value", fill(DType::F16, 0.375))]),
            vec![i64s(&[5, 2])],
        ),
    ];
    let x = f(DType::F32, &[3, 4], rng);
    let dropouts = vec![
        (
            two(spec("Dropout", 1, &[("is_test", Int(1))])),
            vec![x.clone()],
        ),
        (
            two(spec("Dropout", 6, &[("ratio", Float(0.0))])),
            vec![x.clone()],
        ),
        (
            two(spec("Dropout", 7, &[("ratio", Float(0.3))])),
            vec![x.clone()],
        ),
        (
            spec("Dropout", 10, &[]),
            vec![f(DType::F64, &[2, 2, 3], rng)],
        ),
        (two(spec("Dropout", 10, &[])), vec![x.clone()]),
        (
            two(spec("Dropout", 12, &[("seed", Int(7))])),
            vec![x.clone(), scalar(DType::F32, 0.25)],
        ),
        (
            two(spec("Dropout", 13, &[])),
            vec![
                f(DType::BF16, &[6], rng),
                scalar(DType::F16, 0.5),
                scalar(DType::Bool, 0.0),
            ],
        ),
        (
            two(spec("Dropout", 22, &[])),
            vec![x.clone(), scalar(DType::F64, 0.0), scalar(DType::Bool, 1.0)],
        ),
        (
            two(spec("Dropout", 22, &[])),
            vec![f(DType::F16, &[2, 0], rng)],
        ),
    ];
    out.extend(dropouts);
    let like = |d: DType| Some(Value::new(d, vec![0], vec![]).unwrap());
    let casts = vec![
        (
            spec("CastLike", 15, &[]),
            vec![
                Some(ints(DType::I64, &[2, 5], rng, -300, 300)),
                like(DType::F16),
            ],
        ),
        (
            spec("CastLike", 19, &[("saturate", Int(1))]),
            vec![x.clone(), like(DType::I32)],
        ),
        (
            spec("CastLike", 21, &[]),
            vec![x.clone(), like(DType::Bool)],
        ),
        (
            spec("CastLike", 24, &[]),
            vec![Some(random(&[7], rng, false)), like(DType::BF16)],
        ),
        (
            spec("CastLike", 15, &[]),
            vec![Some(ints(DType::I32, &[4], rng, -50, 50)), like(DType::U8)],
        ),
    ];
    out.extend(casts);
    out
}

/// Resize forms: Resize-10 both ways in both modes, tf_half_pixel_for_nn in every mode (with axes
/// resized by 1, which that mode still moves), and a few of the other modes beside them.
fn resize_cases(rng: &mut Rng) -> Vec<(NodeSpec, Vec<Option<Value>>)> {
    use Attr::*;
    let f = |shape: &[usize], rng: &mut Rng| Some(random(shape, rng, false));
    let scales = |v: &[f64]| {
        Some(
            Value::new(
                DType::F32,
                vec![v.len()],
                v.iter().map(|&x| x as f32 as f64).collect(),
            )
            .unwrap(),
        )
    };
    let s = |v: &str| String(v.into());
    let tf = ("coordinate_transformation_mode", s("tf_half_pixel_for_nn"));
    let empty = scales(&[]);
    vec![
        (
            spec("Resize", 10, &[]),
            vec![f(&[1, 2, 3, 4], rng), scales(&[1.0, 1.0, 2.5, 0.6])],
        ),
        (
            spec("Resize", 10, &[("mode", s("nearest"))]),
            vec![f(&[2, 5, 3], rng), scales(&[1.5, 0.75, 3.0])],
        ),
        (
            spec("Resize", 10, &[("mode", s("linear"))]),
            vec![f(&[1, 1, 4, 5], rng), scales(&[1.0, 1.0, 0.6, 1.8])],
        ),
        (
            spec("Resize", 10, &[("mode", s("linear"))]),
            vec![f(&[3, 7], rng), scales(&[2.0, 0.5])],
        ),
        (
            spec("Resize", 11, std::slice::from_ref(&tf)),
            vec![
                f(&[1, 2, 4, 4], rng),
                empty.clone(),
                scales(&[1.0, 1.0, 2.0, 0.75]),
            ],
        ),
        (
            spec("Resize", 11, &[tf.clone(), ("nearest_mode", s("ceil"))]),
            vec![f(&[2, 3, 5], rng), empty.clone(), scales(&[1.0, 1.5, 0.6])],
        ),
        (
            spec(
                "Resize",
                13,
                &[tf.clone(), ("nearest_mode", s("round_prefer_ceil"))],
            ),
            vec![f(&[4, 6], rng), None, None, i64s(&[3, 9])],
        ),
        (
            spec("Resize", 13, &[tf.clone(), ("mode", s("linear"))]),
            vec![f(&[1, 3, 4, 5], rng), None, scales(&[1.0, 1.0, 1.5, 0.8])],
        ),
        (
            spec(
                "Resize",
                18,
                &[
                    tf.clone(),
                    ("mode", s("cubic")),
                    ("exclude_outside", Int(1)),
                ],
            ),
            vec![f(&[2, 6, 5], rng), None, scales(&[1.0, 2.0, 0.6])],
        ),
        (
            spec(
                "Resize",
                18,
                &[
                    tf.clone(),
                    ("mode", s("linear")),
                    ("axes", Ints(vec![-1, 1])),
                ],
            ),
            vec![f(&[2, 4, 5], rng), None, scales(&[1.0, 1.0])],
        ),
        (
            spec(
                "Resize",
                18,
                &[
                    tf,
                    ("mode", s("linear")),
                    ("antialias", Int(1)),
                    ("keep_aspect_ratio_policy", s("not_larger")),
                    ("axes", Ints(vec![1, 2])),
                ],
            ),
            vec![f(&[2, 8, 6], rng), None, None, i64s(&[3, 4])],
        ),
        (
            spec(
                "Resize",
                19,
                &[
                    ("mode", s("cubic")),
                    ("antialias", Int(1)),
                    ("coordinate_transformation_mode", s("half_pixel_symmetric")),
                ],
            ),
            vec![f(&[1, 1, 7, 9], rng), None, scales(&[1.0, 1.0, 0.5, 0.7])],
        ),
        (
            spec(
                "Resize",
                13,
                &[
                    ("mode", s("linear")),
                    ("coordinate_transformation_mode", s("tf_crop_and_resize")),
                    ("extrapolation_value", Float(-1.5)),
                ],
            ),
            vec![
                f(&[2, 5, 5], rng),
                scales(&[0.0, -0.2, 0.3, 1.0, 0.9, 1.2]),
                None,
                i64s(&[2, 4, 6]),
            ],
        ),
    ]
}

/// Evaluates `node` with both oracles and records what they disagree on (or panics when one fails).
fn compare(node: &NodeSpec, inputs: &[Option<Value>], disagreements: &mut Vec<String>) {
    let a = Reference
        .evaluate(node, inputs)
        .unwrap_or_else(|e| panic!("reference failed on {}: {e}", node.op_type));
    let b = Independent
        .evaluate(node, inputs)
        .unwrap_or_else(|e| panic!("independent failed on {}: {e}", node.op_type));
    assert_eq!(a.len(), b.len(), "{}: output counts differ", node.op_type);
    assert!(
        a.len() >= node.num_outputs,
        "{}: {} outputs asked for, {} given",
        node.op_type,
        node.num_outputs,
        a.len()
    );
    for (x, y) in a.iter().zip(&b) {
        if x.value.shape != y.value.shape || x.value.dtype != y.value.dtype {
            disagreements.push(format!(
                "{}: {:?}{:?} vs {:?}{:?}",
                node.op_type, x.value.dtype, x.value.shape, y.value.dtype, y.value.shape
            ));
            continue;
        }
        for (k, (p, q)) in x.value.data.iter().zip(&y.value.data).enumerate() {
            // Both compute in f64: they may differ only by f64 rounding of the terms they combined.
            let bound = 1e-12 * (x.magnitude.get(k).copied().unwrap_or(0.0).max(p.abs()) + 1.0);
            if (p - q).abs() > bound && !(p.is_nan() && q.is_nan()) {
                disagreements.push(format!(
                    "{} element {k}: reference {p} vs independent {q}",
                    node.op_type
                ));
                break;
            }
        }
    }
}

#[test]
fn oracles_agree_where_both_claim_an_op() {
    let (r, i) = (Reference, Independent);
    let mut rng = Rng(20261129);
    let mut compared = 0;
    let mut one_sided = Vec::new();
    let mut disagreements = Vec::new();
    let mut table: Vec<(NodeSpec, Vec<Option<Value>>)> = cases()
        .into_iter()
        .map(|(node, shapes, positive)| {
            let inputs = shapes
                .iter()
                .map(|s| Some(random(s, &mut rng, positive)))
                .collect();
            (node, inputs)
        })
        .collect();
    table.extend(typed_cases(&mut rng));
    table.extend(fill_cases(&mut rng));
    table.extend(resize_cases(&mut rng));
    let total = table.len();
    for (node, inputs) in table {
        match (r.supports(&node), i.supports(&node)) {
            (Ok(()), Ok(())) => {}
            (a, b) => {
                if a.is_ok() != b.is_ok() {
                    one_sided.push(format!(
                        "{} (reference: {a:?}, independent: {b:?})",
                        node.op_type
                    ));
                }
                continue;
            }
        }
        compare(&node, &inputs, &mut disagreements);
        compared += 1;
    }
    eprintln!("compared {compared} op forms; covered by one oracle only: {one_sided:?}");
    assert!(
        disagreements.is_empty(),
        "the oracles disagree: {disagreements:#?}"
    );
    assert_eq!(
        compared, total,
        "every op form in the table must be covered by both oracles"
    );
}
