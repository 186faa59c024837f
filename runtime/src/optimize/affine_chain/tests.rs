//! The `affine-chain` rewrite: which chains become a ChannelAffine, which stay, and the rewritten
//! session's outputs within the bound of the unrewritten chain's, `64·2⁻²³·(|x·a| + |t|) + ½ulp`
//! per element (`a`, `t` the composed scale and shift); the check is shown to catch a chain given
//! the next channel's scale.
use std::sync::Arc;

use crate::ir::{Model, Node};
use crate::optimize::tests::{model, node, session, tensor};
use crate::session::Session;
use crate::tensor::{Tensor, Value};

/// Seeded values in [0.5, 2).
fn positive(shape: &[usize], seed: u64) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_f32(shape, crate::ops::testing::seeded_f32(seed, n, 0.5, 2.0)).unwrap()
}

/// Conv → Relu (a value no Conv fold can reach) → `chain`, with the chain's parameters.
fn chain_model(chain: Vec<Node>, outputs: &[&str], opset: i64) -> Model {
    let mut tail = vec![node("pre", "Relu", &["y"], &["a"])];
    tail.extend(chain.into_iter().map(|mut n| {
        if n.op_type == "BatchNormalization" {
            n.opset = opset;
        }
        n
    }));
    let extra = vec![
        ("s", positive(&[4], 61)),
        ("bb", tensor(&[4], 62)),
        ("mu", tensor(&[4], 63)),
        ("var", positive(&[4], 64)),
        ("sc", tensor(&[4, 1, 1], 65)),
        ("sh", tensor(&[1, 4, 1, 1], 66)),
        ("w2", tensor(&[4, 1], 67)),
    ];
    model(tail, outputs, extra)
}

fn bn(input: &str, output: &str) -> Node {
    node(
        "bn",
        "BatchNormalization",
        &[input, "s", "bb", "mu", "var"],
        &[output],
    )
}

fn densenet_chain() -> Vec<Node> {
    vec![
        bn("a", "t"),
        node("mul", "Mul", &["t", "sc"], &["p"]),
        node("add", "Add", &["p", "sh"], &["q"]),
        node("relu", "Relu", &["q"], &["z"]),
    ]
}

use crate::optimize::tests::session_ops as ops;

fn outputs(s: &Session, seed: u64) -> Vec<Vec<f64>> {
    let x = tensor(&[1, 3, 8, 8], seed);
    let out = s.run(vec![("x".into(), Value::Tensor(x))]).unwrap();
    out.iter()
        .map(|(_, v)| v.as_tensor().unwrap().to_f64_vec().unwrap())
        .collect()
}

/// The worst `|got − want|` over the bound, across seeded inputs (below 1 is within it); `a`,
/// `t` are read from the rewritten model's ChannelAffine, the chain's input `x` from the plain
/// session's second output.
fn bound_ratio(plain: &Session, got: &Session, rewritten: &Model) -> f64 {
    let g = &rewritten.graph;
    let n = g
        .nodes
        .iter()
        .find(|n| n.op_type == "ChannelAffine")
        .unwrap();
    let vals = |k: usize| {
        g.initializers[&n.inputs[k]]
            .as_tensor()
            .unwrap()
            .to_f64_vec()
            .unwrap()
    };
    let (a, t) = (vals(1), vals(2));
    let mut worst = 0f64;
    for seed in [21, 22, 23] {
        let (w, o) = (outputs(plain, seed), outputs(got, seed));
        let x = &w[1];
        for (i, (w, o)) in w[0].iter().zip(&o[0]).enumerate() {
            let c = (i / 64) % 4;
            let mag = (x[i] * a[c]).abs() + t[c].abs();
            let allowed =
                64.0 * 2f64.powi(-23) * mag + 2f64.powi(-24) * w.abs().max(f64::MIN_POSITIVE);
            worst = worst.max((w - o).abs() / allowed);
        }
    }
    worst
}

/// The model as the optimiser rewrites it (the affine fold's tests' helper).
fn rewritten(m: &Model) -> Model {
    crate::optimize::affine::tests::folded_model(m)
}

#[test]
fn batchnorm_mul_add_relu_becomes_one_channel_affine_within_the_bound() {
    let m = chain_model(densenet_chain(), &["z", "a"], 9);
    let (plain, opt) = (session(&m, false), session(&m, true));
    let passes: Vec<_> = opt.rewrites().iter().map(|r| r.pass).collect();
    assert!(passes.contains(&"affine-chain"), "{:?}", opt.rewrites());
    assert_eq!(
        ops(&opt),
        ["com.quorum::FusedConv", "com.quorum::ChannelAffine"]
    );
    assert!(
        opt.rewrites()
            .iter()
            .any(|r| r.pass == "affine-chain" && !r.exact())
    );
    let r = bound_ratio(&plain, &opt, &rewritten(&m));
    assert!(r <= 1.0, "the chain moved an output {r} times the bound");
}

/// The bound check catches a ChannelAffine that gives each channel the next one's scale.
#[test]
fn the_bound_catches_the_next_channels_scale() {
    let m = chain_model(densenet_chain(), &["z", "a"], 9);
    let plain = session(&m, false);
    let mut wrong = rewritten(&m);
    let n = wrong
        .graph
        .nodes
        .iter()
        .find(|n| n.op_type == "ChannelAffine")
        .unwrap()
        .clone();
    let t = wrong.graph.initializers[&n.inputs[1]]
        .as_tensor()
        .unwrap()
        .clone();
    let v = t.to_f64_vec().unwrap();
    let rolled: Vec<f32> = (0..4).map(|c| v[(c + 1) % 4] as f32).collect();
    wrong.graph.initializers.insert(
        n.inputs[1].clone(),
        Arc::new(Value::Tensor(Tensor::from_f32(&[4], rolled).unwrap())),
    );
    let wrong_s = session(&wrong, false);
    assert!(bound_ratio(&plain, &wrong_s, &wrong) > 1.0);
}

#[test]
fn what_is_not_a_chain_stays() {
    let stays = |m: &Model| {
        let opt = session(m, true);
        assert!(
            !opt.rewrites().iter().any(|r| r.pass == "affine-chain"),
            "{:?}",
            opt.rewrites()
        );
    };
    // One step and no activation: nothing to merge.
    stays(&chain_model(vec![bn("a", "z")], &["z"], 9));
    // From opset 15 a BatchNormalization's X may be of another float type than its parameters:
    // with only an activation after it, nothing says X is f32.
    stays(&chain_model(
        vec![bn("a", "t"), node("relu", "Relu", &["t"], &["z"])],
        &["z"],
        15,
    ));
    // A middle value is a graph output.
    stays(&chain_model(
        vec![bn("a", "t"), node("relu", "Relu", &["t"], &["z"])],
        &["z", "t"],
        9,
    ));
    // X's rank is not fixed by the graph (a Reshape's output): the constants' alignment is
    // unknown, so nothing is rewritten.
    let mut m = chain_model(
        vec![
            node("reshape", "Reshape", &["a", "shp"], &["r"]),
            bn("r", "t"),
            node("relu", "Relu", &["t"], &["z"]),
        ],
        &["z"],
        9,
    );
    m.graph.initializers.insert(
        "shp".into(),
        Arc::new(Value::Tensor(
            Tensor::from_i64(&[3], vec![1, 4, 64]).unwrap(),
        )),
    );
    stays(&m);
    // A chain cannot begin at a Mul: its X's axis 1 may broadcast (the CLI tests' X [n, 1]
    // times [4]).
    stays(&chain_model(
        vec![
            node("mul", "Mul", &["a", "sc"], &["p"]),
            node("relu", "Relu", &["p"], &["z"]),
        ],
        &["z"],
        9,
    ));
    // A constant [4, 1] is per-channel for an X of rank 3 only; this X has rank 4 (a Conv's), so
    // the chain stops before it, and what is left of it is the BatchNormalization alone.
    let m = chain_model(
        vec![bn("a", "t"), node("mul2", "Mul", &["t", "w2"], &["z"])],
        &["z"],
        9,
    );
    stays(&m);
}
