//! The `affine-fold` rewrite: which chains fold, which stay, and the folded session's outputs
//! within the Conv's bound of the unrewritten chain's, `64 · 2⁻²³ · Σ|terms| + ½ulp` per element,
//! the magnitudes `Σ|terms|` computed by a Conv of `|x|` by the folded `|W'|` and `|B'|`; the check is
//! shown to catch a fold that scales by the wrong channel.
use std::collections::HashMap;
use std::sync::Arc;

use crate::ir::{Attr, Model, Node};
use crate::optimize::tests::{model, node, session, tensor};
use crate::optimize::{constants, optimize};
use crate::session::Session;
use crate::tensor::{Tensor, Value};

/// Seeded values in [0.5, 2): variances and scales that keep the chain well away from 0.
fn positive(shape: &[usize], seed: u64) -> Tensor {
    let n = shape.iter().product();
    let v = crate::ops::testing::seeded_f32(seed, n, 0.5, 2.0);
    Tensor::from_f32(shape, v).unwrap()
}

/// BatchNormalization `input` → `output` with seeded parameters named after `name`.
fn batch_norm(name: &str, input: &str, output: &str) -> (Node, Vec<(String, Tensor)>) {
    let p = |k: &str| format!("{name}_{k}");
    let n = node(
        name,
        "BatchNormalization",
        &[input, &p("s"), &p("b"), &p("m"), &p("v")],
        &[output],
    );
    let params = vec![
        (p("s"), positive(&[4], 31)),
        (p("b"), tensor(&[4], 32)),
        (p("m"), tensor(&[4], 33)),
        (p("v"), positive(&[4], 34)),
    ];
    (n, params)
}

fn with_params(tail: Vec<Node>, outputs: &[&str], params: &[(String, Tensor)]) -> Model {
    let extra = params
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    model(tail, outputs, extra)
}

fn run(s: &Session, x: &Tensor) -> Vec<f64> {
    let out = s.run(vec![("x".into(), Value::Tensor(x.clone()))]).unwrap();
    out[0].1.as_tensor().unwrap().to_f64_vec().unwrap()
}

/// The worst element of `|got − want|` against the Conv's bound, over seeded inputs: below 1 is
/// within it. `folded` is the rewritten graph, whose Conv weight and bias give the magnitudes.
fn bound_ratio(want: &Session, got: &Session, folded: &Model) -> f64 {
    let g = &folded.graph;
    let conv = g
        .nodes
        .iter()
        .find(|n| n.op_type.ends_with("Conv"))
        .unwrap();
    let abs = |name: &str| {
        let t = g.initializers[name].as_tensor().unwrap();
        let v: Vec<f32> = t
            .to_f64_vec()
            .unwrap()
            .iter()
            .map(|v| v.abs() as f32)
            .collect();
        Tensor::from_f32(t.shape(), v).unwrap()
    };
    // Σ|terms|: the same Conv over |x| with |W'| and |B'|.
    let mut mag_conv = node("mag", "Conv", &["ax", "w", "b"], &["y"]);
    mag_conv.attrs = conv.attrs.clone();
    mag_conv.attrs.remove("activation");
    mag_conv.attrs.remove("activation_params");
    let mut m = model(vec![], &["y"], vec![]);
    m.graph.nodes = vec![node("abs", "Abs", &["x"], &["ax"]), mag_conv];
    let ins: HashMap<String, Arc<Value>> = [
        (
            "w".to_string(),
            Arc::new(Value::Tensor(abs(&conv.inputs[1]))),
        ),
        (
            "b".to_string(),
            Arc::new(Value::Tensor(abs(&conv.inputs[2]))),
        ),
    ]
    .into();
    m.graph.initializers = ins;
    let mag = session(&m, false);
    let mut worst = 0.0f64;
    for seed in [11, 12, 13] {
        let x = tensor(&[1, 3, 8, 8], seed);
        let (w, o, s) = (run(want, &x), run(got, &x), run(&mag, &x));
        for ((w, o), s) in w.iter().zip(&o).zip(&s) {
            let allowed =
                64.0 * 2f64.powi(-23) * s + 2f64.powi(-24) * w.abs().max(f64::MIN_POSITIVE);
            worst = worst.max((w - o).abs() / allowed);
        }
    }
    worst
}

pub(crate) fn folded_model(m: &Model) -> Model {
    let (g, _) = optimize(&m.graph, &constants(&m.graph, true)).unwrap();
    let mut f = m.clone();
    f.graph = g;
    f.opsets.insert(crate::ops::QUORUM_DOMAIN.into(), 1);
    f
}

fn passes(s: &Session) -> Vec<&'static str> {
    s.rewrites().iter().map(|r| r.pass).collect()
}

use crate::optimize::tests::session_ops as ops;

#[test]
fn conv_batchnorm_relu_becomes_one_fused_conv_within_the_bound() {
    let (bn, params) = batch_norm("bn", "y", "t");
    let m = with_params(
        vec![bn, node("relu", "Relu", &["t"], &["z"])],
        &["z"],
        &params,
    );
    let (plain, opt) = (session(&m, false), session(&m, true));
    assert_eq!(passes(&opt), ["affine-fold", "conv-activation"]);
    assert_eq!(ops(&opt), ["com.quorum::FusedConv"]);
    assert!(opt.rewrites().iter().any(|r| !r.exact()));
    let r = bound_ratio(&plain, &opt, &folded_model(&m));
    assert!(r <= 1.0, "the fold moved an output {r} times the bound");
}

#[test]
fn per_channel_mul_add_sub_chains_fold_and_end_at_a_graph_output() {
    let c4 = |shape: &[usize], seed| tensor(shape, seed);
    let tail = vec![
        node("mul", "Mul", &["sc", "y"], &["p"]),
        node("add", "Add", &["p", "sh"], &["q"]),
        node("sub", "Sub", &["q", "k"], &["r"]),
        node("relu", "Relu", &["r"], &["z"]),
    ];
    let params = vec![
        ("sc".to_string(), c4(&[4, 1, 1], 41)),
        ("sh".to_string(), c4(&[1, 4, 1, 1], 42)),
        ("k".to_string(), Tensor::from_f32(&[], vec![0.375]).unwrap()),
    ];
    let m = with_params(tail, &["z"], &params);
    let (plain, opt) = (session(&m, false), session(&m, true));
    assert_eq!(passes(&opt), ["affine-fold", "conv-activation"]);
    assert!(
        opt.rewrites()[0].detail.contains("Sub"),
        "{:?}",
        opt.rewrites()
    );
    assert!(bound_ratio(&plain, &opt, &folded_model(&m)) <= 1.0);

    // The chain's last value is a graph output: the folded Conv writes it, nothing after folds.
    let (bn, params) = batch_norm("bn", "y", "t");
    let m = with_params(
        vec![bn, node("relu", "Relu", &["t"], &["z"])],
        &["t", "z"],
        &params,
    );
    let opt = session(&m, true);
    assert_eq!(passes(&opt), ["affine-fold"]);
    assert_eq!(ops(&opt), ["Conv", "Relu"]);
}

#[test]
fn what_is_not_a_per_channel_affine_map_stays() {
    let stays = |m: &Model| {
        let opt = session(m, true);
        assert!(
            !passes(&opt).contains(&"affine-fold"),
            "{:?}",
            opt.rewrites()
        );
    };
    // Training-mode BatchNormalization.
    let (mut bn, params) = batch_norm("bn", "y", "z");
    bn.attrs.insert("training_mode".into(), Attr::Int(1));
    stays(&with_params(vec![bn], &["z"], &params));
    // A constant that broadcasts along the width, not the channels.
    let params = vec![("c".to_string(), tensor(&[8], 51))];
    stays(&with_params(
        vec![node("mul", "Mul", &["y", "c"], &["z"])],
        &["z"],
        &params,
    ));
    // A factor fed per run.
    let mut m = with_params(vec![node("mul", "Mul", &["y", "c"], &["z"])], &["z"], &[]);
    m.graph
        .inputs
        .push(crate::optimize::tests::info("c", &[4, 1, 1]));
    stays(&m);
    // The Conv output has a second reader.
    let (bn, params) = batch_norm("bn", "y", "z");
    let tail = vec![bn, node("neg", "Neg", &["y"], &["n"])];
    stays(&with_params(tail, &["z", "n"], &params));
    // c − y negates the Conv: not what exporters write, left alone.
    let params = vec![("c".to_string(), tensor(&[4, 1, 1], 52))];
    stays(&with_params(
        vec![node("sub", "Sub", &["c", "y"], &["z"])],
        &["z"],
        &params,
    ));
}

/// The bound check catches a fold that gives each output channel the scale and shift of the next
/// one: the mistake of a fold along the wrong axis.
#[test]
fn the_bound_catches_a_fold_on_the_wrong_channel() {
    let (bn, params) = batch_norm("bn", "y", "z");
    let m = with_params(vec![bn], &["z"], &params);
    let plain = session(&m, false);
    let mut wrong = folded_model(&m);
    let conv = wrong.graph.nodes[0].clone();
    for k in [1, 2] {
        let name = &conv.inputs[k];
        let t = wrong.graph.initializers[name].as_tensor().unwrap().clone();
        let v = t.to_f64_vec().unwrap();
        let per = v.len() / 4;
        let rolled: Vec<f32> = (0..v.len())
            .map(|i| {
                let (c, r) = (i / per, i % per);
                // Channel c keeps its own values but takes the next channel's factor.
                let own = v[c * per + r];
                let ratio = |ch: usize| {
                    let orig = m.graph.initializers["bn_s"]
                        .as_tensor()
                        .unwrap()
                        .to_f64_vec()
                        .unwrap();
                    orig[ch]
                };
                (own * ratio((c + 1) % 4) / ratio(c)) as f32
            })
            .collect();
        wrong.graph.initializers.insert(
            name.clone(),
            Arc::new(Value::Tensor(Tensor::from_f32(t.shape(), rolled).unwrap())),
        );
    }
    let wrong_s = session(&wrong, false);
    assert!(bound_ratio(&plain, &wrong_s, &wrong) > 1.0);
}
