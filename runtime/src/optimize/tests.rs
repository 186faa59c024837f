//! Each rewrite on small graphs: applied where it should be, left alone where it must be, and the
//! rewritten session's outputs equal the unrewritten one's bit for bit on seeded random inputs. The
//! comparison is checked against a deliberately wrong rewrite it must catch.
use std::collections::HashMap;
use std::sync::Arc;

use super::*;
use crate::ir::{Dim, Model, ValueInfo, ValueType};
use crate::session::{Session, SessionOptions};
use crate::tensor::Tensor;

fn rand(seed: u64, n: usize) -> Vec<f32> {
    crate::ops::testing::seeded_f32(seed, n, -3.0, 3.0)
}

pub(super) fn tensor(shape: &[usize], seed: u64) -> Tensor {
    Tensor::from_f32(shape, rand(seed, shape.iter().product())).unwrap()
}

pub(super) fn info(name: &str, shape: &[usize]) -> ValueInfo {
    ValueInfo {
        name: name.into(),
        ty: ValueType::Tensor {
            dtype: Some(DType::F32),
            shape: Some(shape.iter().map(|&d| Dim::Fixed(d as i64)).collect()),
        },
    }
}

pub(super) fn node(name: &str, op: &str, inputs: &[&str], outputs: &[&str]) -> Node {
    Node {
        name: name.into(),
        op_type: op.into(),
        domain: String::new(),
        opset: 17,
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: outputs.iter().map(|s| s.to_string()).collect(),
        attrs: HashMap::new(),
    }
}

/// A model over input `x` [1, 3, 8, 8] with a 3×3 Conv of W [4, 3, 3, 3] (pads 1) and bias, named
/// `y`, followed by `tail`; `outputs` are [1, 4, 8, 8] each.
pub(super) fn model(tail: Vec<Node>, outputs: &[&str], extra: Vec<(&str, Tensor)>) -> Model {
    let mut conv = node("conv", "Conv", &["x", "w", "b"], &["y"]);
    conv.attrs
        .insert("pads".into(), Attr::Ints(vec![1, 1, 1, 1]));
    let mut nodes = vec![conv];
    nodes.extend(tail);
    let mut initializers: HashMap<String, Arc<Value>> = [
        (
            "w".to_string(),
            Arc::new(Value::Tensor(tensor(&[4, 3, 3, 3], 2))),
        ),
        ("b".to_string(), Arc::new(Value::Tensor(tensor(&[4], 3)))),
    ]
    .into();
    for (k, v) in extra {
        initializers.insert(k.into(), Arc::new(Value::Tensor(v)));
    }
    Model::for_test(
        nodes,
        vec![info("x", &[1, 3, 8, 8])],
        outputs.iter().map(|o| info(o, &[1, 4, 8, 8])).collect(),
        initializers,
    )
}

pub(super) fn session(m: &Model, optimize: bool) -> Session {
    let options = SessionOptions {
        optimize,
        ..Default::default()
    };
    Session::from_model(m.clone(), options).unwrap()
}

fn outputs(s: &Session, seed: u64) -> Vec<Vec<u64>> {
    s.run(vec![(
        "x".into(),
        Value::Tensor(tensor(&[1, 3, 8, 8], seed)),
    )])
    .unwrap()
    .into_iter()
    .map(|(_, v)| {
        let t = v.into_tensor().unwrap();
        // Any NaN as one value: a NaN result's sign and payload are unspecified.
        t.to_f64_vec()
            .unwrap()
            .iter()
            .map(|v| if v.is_nan() { u64::MAX } else { v.to_bits() })
            .collect()
    })
    .collect()
}

/// Where the two sessions' outputs first differ (output, element), over a few seeded inputs.
pub(super) fn first_difference(a: &Session, b: &Session) -> Option<(usize, usize)> {
    for seed in [11, 12, 13] {
        for (k, (p, q)) in outputs(a, seed).iter().zip(outputs(b, seed)).enumerate() {
            if p.len() != q.len() {
                return Some((k, 0));
            }
            if let Some(i) = p.iter().zip(&q).position(|(x, y)| x != y) {
                return Some((k, i));
            }
        }
    }
    None
}

/// The ops of a session's plan, qualified with their domains.
pub(super) fn session_ops(s: &Session) -> Vec<String> {
    s.plan()
        .graph
        .nodes
        .iter()
        .map(|n| n.qualified_op())
        .collect()
}

/// The optimised session's rewrites and ops, after checking it equals the plain one bit for bit.
pub(super) fn check(m: &Model) -> (Vec<Rewrite>, Vec<String>) {
    let (plain, opt) = (session(m, false), session(m, true));
    assert!(plain.rewrites().is_empty());
    assert_eq!(
        first_difference(&plain, &opt),
        None,
        "rewrites {:?}",
        opt.rewrites()
    );
    let ops = opt
        .plan()
        .graph
        .nodes
        .iter()
        .map(|n| n.qualified_op())
        .collect();
    (opt.rewrites().to_vec(), ops)
}

#[test]
fn conv_then_each_activation_fuses_bit_for_bit() {
    let mut leaky = node("act", "LeakyRelu", &["y"], &["z"]);
    leaky.attrs.insert("alpha".into(), Attr::Float(0.2));
    let mut clip6 = node("act", "Clip", &["y"], &["z"]);
    clip6.opset = 6;
    clip6.attrs.insert("min".into(), Attr::Float(-0.5));
    clip6.attrs.insert("max".into(), Attr::Float(1.5));
    let mut hswish = node("act", "HardSwish", &["y"], &["z"]);
    hswish.opset = 14;
    let bounds = vec![
        ("lo", Tensor::from_f32(&[], vec![0.0]).unwrap()),
        ("hi", Tensor::from_f32(&[], vec![6.0]).unwrap()),
    ];
    let cases = vec![
        (node("act", "Relu", &["y"], &["z"]), vec![]),
        (node("act", "Sigmoid", &["y"], &["z"]), vec![]),
        (leaky, vec![]),
        (clip6, vec![]),
        (hswish, vec![]),
        (
            node("act", "Clip", &["y", "lo", "hi"], &["z"]),
            bounds.clone(),
        ),
        (node("act", "Clip", &["y", "", "hi"], &["z"]), bounds),
    ];
    for (act, extra) in cases {
        let op = act.op_type.clone();
        let (rewrites, ops) = check(&model(vec![act], &["z"], extra));
        assert_eq!(ops, ["com.quorum::FusedConv"], "{op}");
        assert_eq!(rewrites.len(), 1);
        assert_eq!(rewrites[0].pass, "conv-activation");
    }
}

#[test]
fn silu_pair_fuses_in_either_mul_order() {
    for mul_inputs in [["y", "s"], ["s", "y"]] {
        let tail = vec![
            node("sig", "Sigmoid", &["y"], &["s"]),
            node("mul", "Mul", &mul_inputs, &["z"]),
        ];
        let (rewrites, ops) = check(&model(tail, &["z"], vec![]));
        assert_eq!(ops, ["com.quorum::FusedConv"]);
        assert!(rewrites[0].detail.contains("Silu"), "{rewrites:?}");
    }
}

#[test]
fn fusion_keeps_out_where_the_pair_is_not_alone() {
    // The Conv output is also a graph output.
    let (r, _) = check(&model(
        vec![node("act", "Relu", &["y"], &["z"])],
        &["z", "y"],
        vec![],
    ));
    assert!(r.is_empty());
    // The Conv output has a second reader.
    let tail = vec![
        node("act", "Relu", &["y"], &["z"]),
        node("neg", "Neg", &["y"], &["n"]),
    ];
    let (r, _) = check(&model(tail, &["z", "n"], vec![]));
    assert!(r.is_empty());
    // Sigmoid's output read by something besides the Mul: a Sigmoid fusion would drop it.
    let tail = vec![
        node("sig", "Sigmoid", &["y"], &["s"]),
        node("mul", "Mul", &["y", "s"], &["z"]),
        node("neg", "Neg", &["s"], &["n"]),
    ];
    let (r, _) = check(&model(tail, &["z", "n"], vec![]));
    assert!(r.is_empty());
    // A Clip bound fed per run (a graph input): not a constant.
    let mut m = model(
        vec![node("act", "Clip", &["y", "lo"], &["z"])],
        &["z"],
        vec![("lo", Tensor::from_f32(&[], vec![0.0]).unwrap())],
    );
    m.graph.inputs.push(info("lo", &[]));
    let (r, _) = check(&m);
    assert!(r.is_empty());
    // An op with no fused form.
    let (r, _) = check(&model(
        vec![node("act", "Tanh", &["y"], &["z"])],
        &["z"],
        vec![],
    ));
    assert!(r.is_empty());
}

#[test]
fn identities_are_removed_but_not_graph_outputs() {
    let tail = vec![
        node("id1", "Identity", &["y"], &["i1"]),
        node("id2", "Identity", &["i1"], &["i2"]),
        node("neg", "Neg", &["i2"], &["z"]),
        node("id3", "Identity", &["z"], &["out"]),
    ];
    let (r, ops) = check(&model(tail.clone(), &["out"], vec![]));
    assert_eq!(r.iter().filter(|r| r.pass == "identity").count(), 2);
    assert_eq!(ops, ["Conv", "Neg", "Identity"]);
    // The same chain listed out of order (a valid graph need not be sorted).
    let mut reversed = model(tail, &["out"], vec![]);
    reversed.graph.nodes.reverse();
    let (r, _) = check(&reversed);
    assert_eq!(r.iter().filter(|r| r.pass == "identity").count(), 2);
}

/// An inference Dropout goes as Identity does; one that may run in training mode, or whose mask is
/// read, stays.
#[test]
fn inference_dropouts_are_removed_and_the_rest_kept() {
    let dropout = |opset: i64, inputs: &[&str], outputs: &[&str]| {
        let mut d = node("drop", "Dropout", inputs, outputs);
        d.opset = opset;
        d
    };
    let tail = |d: Node| vec![d, node("neg", "Neg", &["d"], &["z"])];
    for (d, removed) in [
        (dropout(17, &["y"], &["d"]), true),
        (dropout(13, &["y", "", ""], &["d", ""]), true),
        (dropout(10, &["y"], &["d"]), true),
        // Before opset 7 without is_test: training mode.
        (dropout(6, &["y"], &["d"]), false),
        // The mask is an output in use.
        (dropout(17, &["y"], &["d", "mask"]), false),
        // A mask named but read by no one (as old exporters write it).
        (dropout(9, &["y"], &["d", "unread"]), true),
        // training_mode given per run.
        (dropout(17, &["y", "", "train"], &["d"]), false),
    ] {
        let mut outputs = vec!["z"];
        if d.outputs.get(1).is_some_and(|m| m == "mask") {
            outputs.push("mask");
        }
        let mut m = model(tail(d.clone()), &outputs, vec![]);
        if !removed {
            // Kept: compared by the rewrites alone (a Dropout in training mode draws its own mask
            // per session, so `check`'s comparison of outputs does not apply).
            if d.inputs.get(2).is_some_and(|t| !t.is_empty()) {
                m.graph.inputs.push(ValueInfo {
                    name: "train".into(),
                    ty: ValueType::Tensor {
                        dtype: Some(crate::tensor::DType::Bool),
                        shape: Some(vec![]),
                    },
                });
            }
            let opt = session(&m, true);
            assert!(opt.rewrites().is_empty(), "{d:?}");
            continue;
        }
        let (r, ops) = check(&m);
        let gone = r.iter().any(|r| r.pass == "identity");
        assert_eq!(gone, removed, "{d:?}: {r:?}");
        assert_eq!(ops.iter().any(|o| o == "Dropout"), !removed, "{d:?}");
    }
    let mut test_mode = dropout(6, &["y"], &["d"]);
    test_mode.attrs.insert("is_test".into(), Attr::Int(1));
    let (r, _) = check(&model(tail(test_mode), &["z"], vec![]));
    assert!(r.iter().any(|r| r.pass == "identity"));
}

/// The harness catches a Dropout removed where it runs in training mode: the same graph without
/// it gives other values.
#[test]
fn the_comparison_catches_a_training_dropout_removed() {
    let mut d = node("drop", "Dropout", &["y"], &["d"]);
    d.opset = 6;
    d.attrs.insert("seed".into(), Attr::Int(3));
    let m = model(vec![d, node("neg", "Neg", &["d"], &["z"])], &["z"], vec![]);
    let plain = session(&m, false);
    let mut wrong = m.clone();
    wrong.graph.nodes.remove(1);
    wrong.graph.nodes[1].inputs[0] = "y".into();
    assert!(first_difference(&plain, &session(&wrong, false)).is_some());
}

/// The harness catches a rewrite that changes the arithmetic: a session whose FusedConv has
/// another activation than the pair it replaced.
#[test]
fn the_comparison_catches_a_wrong_fusion() {
    let m = model(vec![node("act", "Relu", &["y"], &["z"])], &["z"], vec![]);
    let plain = session(&m, false);
    let (mut g, _) = optimize(&m.graph, &constants(&m.graph, true)).unwrap();
    g.nodes[0]
        .attrs
        .insert("activation".into(), Attr::String(b"Sigmoid".to_vec()));
    let mut wrong = m.clone();
    wrong.graph = g;
    wrong.opsets.insert(QUORUM_DOMAIN.into(), 1);
    let wrong = session(&wrong, false);
    assert!(first_difference(&plain, &wrong).is_some());
}

/// The exact GELU as exporters write it before opset 20, over input `x` [4, 64] into `out`: form A
/// `(x · (erf(x/√2) + 1)) · ½`, or form B `(x · ½) · (erf(x · 1/√2) + 1)` with the operands of
/// every binary node swapped.
fn gelu_model(form_b: bool, sqrt2: f32) -> Model {
    let scalar = |v: f32| Tensor::from_f32(&[], vec![v]).unwrap();
    let nodes = if form_b {
        vec![
            node("half", "Mul", &["c_half", "x"], &["h"]),
            node("scale", "Mul", &["c_inv", "x"], &["s"]),
            node("erf", "Erf", &["s"], &["e"]),
            node("plus1", "Add", &["c_one", "e"], &["p"]),
            node("mul", "Mul", &["p", "h"], &["out"]),
        ]
    } else {
        vec![
            node("div", "Div", &["x", "c_sqrt2"], &["s"]),
            node("erf", "Erf", &["s"], &["e"]),
            node("plus1", "Add", &["e", "c_one"], &["p"]),
            node("mulx", "Mul", &["x", "p"], &["m"]),
            node("half", "Mul", &["m", "c_half"], &["out"]),
        ]
    };
    let initializers: HashMap<String, Arc<Value>> = [
        ("c_sqrt2", scalar(sqrt2)),
        ("c_inv", scalar(1.0 / sqrt2)),
        ("c_one", scalar(1.0)),
        ("c_half", scalar(0.5)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), Arc::new(Value::Tensor(v))))
    .collect();
    Model::for_test(
        nodes,
        vec![info("x", &[4, 64])],
        vec![info("out", &[4, 64])],
        initializers,
    )
}

/// The device rewrite of `m`, as a model the CPU runs.
fn gelu_rewritten(m: &Model) -> Option<(Model, Vec<Rewrite>)> {
    let (g, done) = optimize_for_devices(&m.graph, &constants(&m.graph, true), &|_, _| true)?;
    let mut r = m.clone();
    r.graph = g;
    Some((r, done))
}

/// The largest error of `s` against the exact GELU (f64), in units of the f32 ulp at the result's
/// magnitude, over seeded inputs in [-12, 12] (both tails: −x/√2 past 8, where erfc is tiny).
fn gelu_ulps(s: &Session) -> f64 {
    let mut worst = 0.0f64;
    for seed in [21, 22, 23] {
        let v: Vec<f32> = crate::ops::testing::seeded_f32(seed, 256, -12.0, 12.0);
        let x = Tensor::from_f32(&[4, 64], v.clone()).unwrap();
        let out = s.run(vec![("x".into(), Value::Tensor(x))]).unwrap();
        let y = out[0].1.as_tensor().unwrap().to_f64_vec().unwrap();
        for (&xi, &yi) in v.iter().zip(&y) {
            let exact = crate::ops::elementwise::gelu_f64(xi as f64);
            let ulp = (exact.abs() as f32).max(f32::MIN_POSITIVE).to_bits();
            let ulp = (f32::from_bits(ulp + 1) - f32::from_bits(ulp)) as f64;
            worst = worst.max((yi - exact).abs() / ulp);
        }
    }
    worst
}

#[test]
fn gelu_chains_become_one_gelu() {
    for form_b in [false, true] {
        let m = gelu_model(form_b, std::f32::consts::SQRT_2);
        let (r, done) = gelu_rewritten(&m).expect("the chain is rewritten");
        assert_eq!(done.len(), 1, "{done:?}");
        assert_eq!(done[0].pass, "gelu");
        let ops: Vec<String> = r.graph.nodes.iter().map(|n| n.qualified_op()).collect();
        assert_eq!(ops, ["Gelu"], "form B: {form_b}");
        assert_eq!(r.graph.nodes[0].inputs, ["x"]);
        // CPU sessions rewrite it too, to the same one node.
        let cpu = session(&m, true);
        assert_eq!(
            cpu.rewrites().iter().map(|r| r.pass).collect::<Vec<_>>(),
            ["gelu"]
        );
        assert!(gelu_ulps(&cpu) <= 8.0);
        // One rounding instead of five: the Gelu is within the oracles' 8 ulps of the exact
        // function, and no further from it than the chain is.
        let (chain, fused) = (session(&m, false), session(&r, false));
        let (c, f) = (gelu_ulps(&chain), gelu_ulps(&fused));
        assert!(f <= 8.0, "fused Gelu {f} ulps from exact");
        assert!(f <= c.max(1.0), "fused {f} ulps, chain {c}");
    }
}

/// An f16 or bf16 model's chain, its constants rounded to its type (√2 as 1.4140625), is rewritten
/// too; a constant off by more than that rounding is not.
#[test]
fn half_gelu_chains_become_one_gelu() {
    use crate::tensor::DType;
    for dtype in [DType::F16, DType::BF16] {
        for form_b in [false, true] {
            let mut m = gelu_model(form_b, std::f32::consts::SQRT_2);
            let half = |t: &Tensor| -> Tensor {
                let v = t.to_f64_vec().unwrap();
                match dtype {
                    DType::F16 => Tensor::F16(
                        ndarray::ArrayD::from_shape_vec(
                            ndarray::IxDyn(t.shape()),
                            v.iter().map(|&x| half::f16::from_f64(x)).collect(),
                        )
                        .unwrap(),
                    ),
                    _ => Tensor::BF16(
                        ndarray::ArrayD::from_shape_vec(
                            ndarray::IxDyn(t.shape()),
                            v.iter().map(|&x| half::bf16::from_f64(x)).collect(),
                        )
                        .unwrap(),
                    ),
                }
            };
            for v in m.graph.initializers.values_mut() {
                let t = half(v.as_tensor().unwrap());
                *v = Arc::new(Value::Tensor(t));
            }
            for i in m.graph.inputs.iter_mut().chain(m.graph.outputs.iter_mut()) {
                if let crate::ir::ValueType::Tensor { dtype: d, .. } = &mut i.ty {
                    *d = Some(dtype);
                }
            }
            let (r, done) = gelu_rewritten(&m).expect("the half chain is rewritten");
            assert_eq!(done[0].pass, "gelu", "{dtype}, form B: {form_b}");
            // The CPU runs the rewritten half model, within the chain's own error of it (five
            // roundings in the half type against one).
            let v = crate::ops::testing::seeded_f32(31, 256, -6.0, 6.0);
            let x = half(&Tensor::from_f32(&[4, 64], v).unwrap());
            let run = |m: &Model| {
                let out = session(m, false)
                    .run(vec![("x".into(), Value::Tensor(x.clone()))])
                    .unwrap();
                out[0].1.as_tensor().unwrap().to_f64_vec().unwrap()
            };
            let (chain, fused) = (run(&m), run(&r));
            let ulp = if dtype == DType::F16 {
                2f64.powi(-10)
            } else {
                2f64.powi(-7)
            };
            for ((c, f), xi) in chain.iter().zip(&fused).zip(x.to_f64_vec().unwrap()) {
                let exact = crate::ops::elementwise::gelu_f64(xi);
                let scale = exact.abs().max(1.0);
                assert!(
                    (f - exact).abs() <= ulp * scale,
                    "{dtype}: fused {f}, exact {exact}"
                );
                assert!(
                    (c - f).abs() <= 4.0 * ulp * scale,
                    "{dtype}: chain {c}, fused {f}"
                );
            }
            let ops: Vec<String> = r.graph.nodes.iter().map(|n| n.qualified_op()).collect();
            assert_eq!(ops, ["Gelu"], "{dtype}, form B: {form_b}");
            // √2 one f16 ulp away from its rounding is another constant.
            let off = match dtype {
                DType::F16 => {
                    half::f16::from_f64(std::f64::consts::SQRT_2).to_f64() + 2f64.powi(-10)
                }
                _ => half::bf16::from_f64(std::f64::consts::SQRT_2).to_f64() + 2f64.powi(-7),
            };
            let mut m2 = m.clone();
            let key = if form_b { "c_inv" } else { "c_sqrt2" };
            let want = if form_b { 1.0 / off } else { off };
            let t = half(&Tensor::from_f32(&[], vec![want as f32]).unwrap());
            m2.graph
                .initializers
                .insert(key.into(), Arc::new(Value::Tensor(t)));
            assert!(
                gelu_rewritten(&m2).is_none(),
                "{dtype}, form B {form_b}: {off}"
            );
        }
    }
}

#[test]
fn gelu_look_alikes_stay_apart() {
    // Another constant than √2.
    assert!(gelu_rewritten(&gelu_model(false, 2.0)).is_none());
    // An intermediate also read elsewhere (here: a graph output).
    let mut m = gelu_model(false, std::f32::consts::SQRT_2);
    m.graph.outputs.push(info("e", &[4, 64]));
    assert!(gelu_rewritten(&m).is_none());
    // The product is of another tensor than the Erf's.
    let mut m = gelu_model(false, std::f32::consts::SQRT_2);
    m.graph.nodes[3].inputs[0] = "c_half".into();
    assert!(gelu_rewritten(&m).is_none());
}

/// The accuracy check catches a rewrite to the wrong Gelu (the tanh approximation, off by up to
/// 1e-3 relative).
#[test]
fn the_gelu_check_catches_the_tanh_form() {
    let m = gelu_model(false, std::f32::consts::SQRT_2);
    let (mut r, _) = gelu_rewritten(&m).unwrap();
    r.graph.nodes[0]
        .attrs
        .insert("approximate".into(), Attr::String(b"tanh".to_vec()));
    assert!(gelu_ulps(&session(&r, false)) > 8.0);
}

/// A second Conv of `x` (the same weight and bias) writing `r`, a residual of the output's shape.
fn shortcut(out: &str) -> Node {
    let mut c = node("shortcut", "Conv", &["x", "w", "b"], &[out]);
    c.attrs.insert("pads".into(), Attr::Ints(vec![1, 1, 1, 1]));
    c
}

#[test]
fn residual_adds_fuse_into_the_conv_bit_for_bit() {
    // Conv → Add(y, Neg(r)) → Relu: the Add and the Relu become the FusedConv's epilogue.
    let tail = vec![
        shortcut("s"),
        node("neg", "Neg", &["s"], &["r"]),
        node("add", "Add", &["y", "r"], &["q"]),
        node("relu", "Relu", &["q"], &["z"]),
    ];
    let (rewrites, ops) = check(&model(tail, &["z"], vec![]));
    assert!(
        rewrites.iter().any(|r| r.pass == "conv-residual"),
        "{rewrites:?}"
    );
    assert_eq!(
        ops.iter().filter(|o| *o == "com.quorum::FusedConv").count(),
        1
    );
    assert!(!ops.iter().any(|o| o == "Add" || o == "Relu"), "{ops:?}");
    // Sum with the Conv second, no activation after it.
    let tail = vec![
        shortcut("s"),
        node("neg", "Neg", &["s"], &["r"]),
        node("sum", "Sum", &["r", "y"], &["z"]),
    ];
    let (rewrites, ops) = check(&model(tail, &["z"], vec![]));
    assert!(rewrites.iter().any(|r| r.pass == "conv-residual"));
    assert!(!ops.iter().any(|o| o == "Sum"), "{ops:?}");
    // A residual computed per channel ([1, 4, 1, 1]) broadcasts, as the Add broadcast it. (A
    // constant one would be folded into the weights by affine-fold instead.)
    let mut mean = node("mean", "ReduceMean", &["s"], &["m"]);
    mean.attrs.insert("axes".into(), Attr::Ints(vec![2, 3]));
    let tail = vec![shortcut("s"), mean, node("add", "Add", &["y", "m"], &["z"])];
    let (rewrites, _) = check(&model(tail, &["z"], vec![]));
    assert!(
        rewrites.iter().any(|r| r.pass == "conv-residual"),
        "{rewrites:?}"
    );
    // Three summands, or a Conv output read twice: left alone.
    let tail = vec![shortcut("s"), node("sum", "Sum", &["y", "s", "s"], &["z"])];
    let (rewrites, _) = check(&model(tail, &["z"], vec![]));
    assert!(!rewrites.iter().any(|r| r.pass == "conv-residual"));
    let tail = vec![
        node("add", "Add", &["y", "c"], &["z"]),
        node("neg", "Neg", &["y"], &["n"]),
    ];
    let (rewrites, _) = check(&model(
        tail,
        &["z", "n"],
        vec![("c", tensor(&[4, 1, 1], 62))],
    ));
    assert!(!rewrites.iter().any(|r| r.pass == "conv-residual"));
}

/// The comparison catches a residual fusion that adds the wrong tensor.
#[test]
fn the_comparison_catches_a_residual_from_the_wrong_value() {
    let tail = vec![
        shortcut("s"),
        node("neg", "Neg", &["s"], &["r"]),
        node("add", "Add", &["y", "r"], &["z"]),
    ];
    let m = model(tail, &["z"], vec![]);
    let plain = session(&m, false);
    let wrong = wrongly_rewritten(&m, |g| {
        // The shortcut's output before the Neg: the right shape, the wrong values.
        fused_conv(g).inputs[3] = "s".into();
    });
    assert!(first_difference(&plain, &wrong).is_some());
}

/// An unoptimised session of `m`'s rewritten graph after `wrong` (a deliberately wrong change to
/// the rewrite) has changed it.
pub(super) fn wrongly_rewritten(m: &Model, wrong: impl FnOnce(&mut Graph)) -> Session {
    let (mut g, _) = optimize(&m.graph, &constants(&m.graph, true)).unwrap();
    wrong(&mut g);
    let mut m = m.clone();
    m.graph = g;
    m.opsets.insert(QUORUM_DOMAIN.into(), 1);
    session(&m, false)
}

/// The graph's (first) FusedConv.
pub(super) fn fused_conv(g: &mut Graph) -> &mut Node {
    g.nodes
        .iter_mut()
        .find(|n| n.op_type == "FusedConv")
        .expect("a FusedConv")
}
