//! The `conv-input-scale` rewrite: a squeeze-and-excitation Mul folded into the 1×1 convolution that
//! reads it, in either operand order, over the shapes the kernel scales as it packs and the shapes
//! it multiplies first; left alone where the product has other readers or the convolution is not
//! 1×1 of one group; every rewritten session bit for bit the plain one's, a comparison checked
//! against a fold of the wrong scale.
use std::collections::HashMap;
use std::sync::Arc;

use super::*;
use crate::ir::Model;
use crate::optimize::tests::{fused_conv, info, node, session, tensor, wrongly_rewritten};
use crate::session::Session;
use crate::tensor::Tensor;

/// The channels in, out, and the plane side of the projection.
const C: usize = 24;
const M: usize = 8;
const HW: usize = 8;

/// Inputs `x` [n, C, HW, HW] and `s` (`scale`), `Mul(s, x)` (or `Mul(x, s)` with `x_first`)
/// into a 1×1 Conv of w [M, C, 1, 1] and b [M], then `tail` after its output `y`; outputs `outs`,
/// each [n, M, HW, HW].
fn se(n: usize, scale: &[usize], x_first: bool, tail: Vec<Node>, outs: &[&str]) -> Model {
    let mul = if x_first { ["x", "s"] } else { ["s", "x"] };
    let mut nodes = vec![
        node("mul", "Mul", &mul, &["p"]),
        node("proj", "Conv", &["p", "w", "b"], &["y"]),
    ];
    nodes.extend(tail);
    let initializers: HashMap<String, Arc<Value>> =
        [("w", tensor(&[M, C, 1, 1], 5)), ("b", tensor(&[M], 6))]
            .into_iter()
            .map(|(k, v)| (k.to_string(), Arc::new(Value::Tensor(v))))
            .collect();
    Model::for_test(
        nodes,
        vec![
            info("x", &[n, C, HW, HW]),
            info("s", scale),
            info("r", &[n, M, HW, HW]),
        ],
        outs.iter().map(|o| info(o, &[n, M, HW, HW])).collect(),
        initializers,
    )
}

/// The outputs' bits over seeded inputs of the model's declared shapes (any NaN as one value).
fn outputs(s: &Session, m: &Model, seed: u64) -> Vec<Vec<u32>> {
    let feeds = m
        .graph
        .inputs
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let crate::ir::ValueType::Tensor {
                shape: Some(shape), ..
            } = &v.ty
            else {
                unreachable!("the test's inputs have shapes")
            };
            let dims: Vec<usize> = shape
                .iter()
                .map(|d| match d {
                    crate::ir::Dim::Fixed(d) => *d as usize,
                    _ => unreachable!(),
                })
                .collect();
            (
                v.name.clone(),
                Value::Tensor(tensor(&dims, seed + i as u64)),
            )
        })
        .collect();
    s.run(feeds)
        .unwrap()
        .into_iter()
        .map(|(_, v)| {
            let t: Tensor = v.into_tensor().unwrap();
            let Tensor::F32(a) = t else { unreachable!() };
            a.iter()
                .map(|v| if v.is_nan() { u32::MAX } else { v.to_bits() })
                .collect()
        })
        .collect()
}

/// The rewrites of the optimised session, after checking its outputs equal the plain session's.
fn check(m: &Model) -> Vec<String> {
    let (plain, opt) = (session(m, false), session(m, true));
    for seed in [21, 22] {
        assert_eq!(
            outputs(&plain, m, seed),
            outputs(&opt, m, seed),
            "rewrites {:?}",
            opt.rewrites()
        );
    }
    opt.rewrites()
        .iter()
        .map(|r| r.pass.to_string())
        .filter(|p| p == "conv-input-scale")
        .collect()
}

#[test]
fn channel_scales_fold_into_the_projection_bit_for_bit() {
    // Scales the kernel applies as it packs: [1, C, 1, 1] and [C, 1, 1], for one or two images,
    // either operand first.
    for (n, scale) in [
        (1, vec![1, C, 1, 1]),
        (2, vec![1, C, 1, 1]),
        (1, vec![C, 1, 1]),
    ] {
        for x_first in [false, true] {
            let m = se(n, &scale, x_first, vec![], &["y"]);
            assert_eq!(check(&m).len(), 1, "{n} {scale:?} {x_first}");
        }
    }
    // Scales it multiplies first: one per image and channel, one per value.
    for (n, scale) in [(2, vec![2, C, 1, 1]), (1, vec![1, C, HW, HW])] {
        let m = se(n, &scale, false, vec![], &["y"]);
        assert_eq!(check(&m).len(), 1, "{n} {scale:?}");
    }
    // After the other fusions: the projection with a residual and an activation.
    let tail = vec![
        node("add", "Add", &["y", "r"], &["q"]),
        node("relu", "Relu", &["q"], &["z"]),
    ];
    let m = se(1, &[1, C, 1, 1], true, tail, &["z"]);
    assert_eq!(check(&m).len(), 1);
}

#[test]
fn the_fold_keeps_out_where_it_does_not_apply() {
    // The product read twice (a graph output too).
    let mut m = se(1, &[1, C, 1, 1], false, vec![], &["y", "p"]);
    m.graph.outputs[1] = info("p", &[1, C, HW, HW]);
    assert!(check(&m).is_empty());
    // A 3×3 convolution, or a 1×1 of two groups, reads the product.
    let mut m = se(1, &[1, C, 1, 1], false, vec![], &["y"]);
    m.graph.nodes[1]
        .attrs
        .insert("pads".into(), Attr::Ints(vec![1; 4]));
    let w3 = Arc::new(Value::Tensor(tensor(&[M, C, 3, 3], 8)));
    m.graph.initializers.insert("w".into(), w3);
    assert!(check(&m).is_empty());
    let mut m = se(1, &[1, C, 1, 1], false, vec![], &["y"]);
    m.graph.nodes[1].attrs.insert("group".into(), Attr::Int(2));
    let halves = Arc::new(Value::Tensor(tensor(&[M, C / 2, 1, 1], 9)));
    m.graph.initializers.insert("w".into(), halves);
    assert!(check(&m).is_empty());
}

/// The comparison catches a fold of the wrong scale (its reciprocal: the right shape, the wrong
/// values).
#[test]
fn the_comparison_catches_a_wrong_scale() {
    let m = se(1, &[1, C, 1, 1], false, vec![], &["y"]);
    let plain = session(&m, false);
    let wrong = wrongly_rewritten(&m, |g| {
        let fused = fused_conv(g);
        // Mul(s, x): the operands in the Mul's order.
        assert_eq!(
            (fused.inputs[0].as_str(), fused.inputs[4].as_str()),
            ("s", "x")
        );
        fused.inputs[0] = "t".into();
        g.nodes
            .insert(0, node("recip", "Reciprocal", &["s"], &["t"]));
    });
    assert_ne!(outputs(&plain, &m, 21), outputs(&wrong, &m, 21));
}
