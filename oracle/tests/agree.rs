//! The two oracles must agree wherever both claim an op: seeded random inputs (never all zeros) over a
//! table of op forms. A disagreement is a bug in one of them (or a shared question for a human); an
//! op only one oracle covers is reported, not passed.
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

#[test]
fn oracles_agree_where_both_claim_an_op() {
    let (r, i) = (Reference, Independent);
    let mut rng = Rng(20261129);
    let mut compared = 0;
    let mut one_sided = Vec::new();
    let mut disagreements = Vec::new();
    let total = cases().len();
    for (node, shapes, positive) in cases() {
        let inputs: Vec<Option<Value>> = shapes
            .iter()
            .map(|s| Some(random(s, &mut rng, positive)))
            .collect();
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
        let a = r
            .evaluate(&node, &inputs)
            .unwrap_or_else(|e| panic!("reference failed on {}: {e}", node.op_type));
        let b = i
            .evaluate(&node, &inputs)
            .unwrap_or_else(|e| panic!("independent failed on {}: {e}", node.op_type));
        compared += 1;
        assert_eq!(a.len(), b.len(), "{}: output counts differ", node.op_type);
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
