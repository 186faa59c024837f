//! The `attention` rewrite: the exporters' forms of the chain become one FusedAttention, chains
//! that are not attention's (another axis, a value read twice) stay apart, and the rewritten graph
//! gives the unrewritten one's outputs bit for bit on the CPU, whose FusedAttention runs the
//! chain's own kernels — a comparison that catches a wrong rewrite (the scale multiplied instead
//! of divided).
use std::sync::Arc;

use super::*;
use crate::ir::Model;
use crate::optimize::tests::{info, node, tensor};
use crate::optimize::{constants, optimize_for_devices};
use crate::session::{Session, SessionOptions};

/// The shape of each graph input.
const SHAPES: [(&str, &[usize]); 4] = [
    ("q", &[2, 3, 5, 8]),
    ("k", &[2, 3, 7, 8]),
    ("v", &[2, 3, 7, 4]),
    ("m", &[5, 7]),
];

/// How a test model writes the chain.
#[derive(Clone, Copy)]
struct Chain {
    /// Mul by the reciprocal (constant first) instead of Div.
    mul: bool,
    /// Add(mask, x) instead of Add(x, mask).
    mask_first: bool,
    /// The Softmax's axis.
    axis: i64,
    /// The scores are also a graph output.
    scores_out: bool,
    /// Q and Kᵀ multiplied by √scale before the product (PyTorch's export), no scale after.
    prescaled: bool,
}

const PLAIN: Chain = Chain {
    mul: false,
    mask_first: false,
    axis: -1,
    scores_out: false,
    prescaled: false,
};

fn model(c: Chain) -> Model {
    let mut t = node("t", "Transpose", &["k"], &["kt"]);
    t.attrs.insert("perm".into(), Attr::Ints(vec![0, 1, 3, 2]));
    let scale = if c.mul {
        node("scale", "Mul", &["c", "s"], &["x"])
    } else {
        node("scale", "Div", &["s", "c"], &["x"])
    };
    let add = if c.mask_first {
        node("mask", "Add", &["m", "x"], &["y"])
    } else {
        node("mask", "Add", &["x", "m"], &["y"])
    };
    let mut sm = node("softmax", "Softmax", &["y"], &["p"]);
    sm.attrs.insert("axis".into(), Attr::Int(c.axis));
    let mut outputs = vec![info("o", &[2, 3, 5, 4])];
    if c.scores_out {
        outputs.push(info("s", &[2, 3, 5, 7]));
    }
    let scale_value = if c.mul { 0.25 } else { 4.0 };
    let cst = crate::tensor::Tensor::from_f32(&[], vec![scale_value]).unwrap();
    let mut nodes = vec![t];
    if c.prescaled {
        nodes.push(node("qs", "Mul", &["q", "c"], &["q2"]));
        nodes.push(node("ks", "Mul", &["c", "kt"], &["kt2"]));
        nodes.push(node("qk", "MatMul", &["q2", "kt2"], &["x"]));
    } else {
        nodes.push(node("qk", "MatMul", &["q", "kt"], &["s"]));
        nodes.push(scale);
    }
    nodes.extend([add, sm, node("pv", "MatMul", &["p", "v"], &["o"])]);
    Model::for_test(
        nodes,
        SHAPES.iter().map(|(n, s)| info(n, s)).collect(),
        outputs,
        [("c".to_string(), Arc::new(Value::Tensor(cst)))]
            .into_iter()
            .collect(),
    )
}

fn rewritten(m: &Model) -> Option<(Model, Vec<Rewrite>)> {
    let (g, done) = optimize_for_devices(&m.graph, &constants(&m.graph, true), &|_, _| true)?;
    let mut r = m.clone();
    r.graph = g;
    Some((r, done))
}

fn ops(m: &Model) -> Vec<String> {
    m.graph.nodes.iter().map(|n| n.qualified_op()).collect()
}

/// The first output's bits for two seeded sets of inputs, on a CPU session without rewrites.
fn bits(m: &Model) -> Vec<Vec<u64>> {
    let options = SessionOptions {
        optimize: false,
        ..Default::default()
    };
    let s = Session::from_model(m.clone(), options).unwrap();
    (10..12)
        .map(|seed| {
            let inputs = SHAPES
                .iter()
                .enumerate()
                .map(|(i, (n, sh))| {
                    (
                        n.to_string(),
                        Value::Tensor(tensor(sh, seed * 10 + i as u64)),
                    )
                })
                .collect();
            let out = s.run(inputs).unwrap();
            let t = out[0].1.as_tensor().unwrap().to_f64_vec().unwrap();
            t.iter().map(|v| v.to_bits()).collect()
        })
        .collect()
}

#[test]
fn every_form_of_the_chain_becomes_one_node_bit_for_bit_on_the_cpu() {
    for (mul, mask_first) in [(false, false), (true, false), (false, true), (true, true)] {
        let m = model(Chain {
            mul,
            mask_first,
            ..PLAIN
        });
        let (r, done) = rewritten(&m).expect("the chain is fused");
        let passes: Vec<&str> = done.iter().map(|d| d.pass).collect();
        assert_eq!(passes, ["attention"], "{done:?}");
        assert_eq!(ops(&r), ["com.quorum::FusedAttention"]);
        let n = &r.graph.nodes[0];
        assert_eq!(n.inputs, ["q", "k", "v", "m"]);
        assert_eq!(n.outputs, ["o"]);
        assert!(matches!(n.attrs.get("transpose_k"), Some(Attr::Int(1))));
        assert!(matches!(n.attrs.get("divide"), Some(&Attr::Int(d)) if d == !mul as i64));
        assert_eq!(bits(&r), bits(&m), "mul {mul}, mask first {mask_first}");
    }
}

/// PyTorch's export: Q and Kᵀ each multiplied by √scale, both Muls absorbed with the Transpose.
#[test]
fn prescaled_operands_are_absorbed_bit_for_bit() {
    let m = model(Chain {
        prescaled: true,
        mul: true,
        ..PLAIN
    });
    let (r, _) = rewritten(&m).expect("the chain is fused");
    assert_eq!(ops(&r), ["com.quorum::FusedAttention"]);
    let n = &r.graph.nodes[0];
    assert_eq!(n.inputs, ["q", "k", "v", "m"]);
    assert!(matches!(n.attrs.get("q_scale"), Some(Attr::Float(_))));
    assert!(matches!(n.attrs.get("k_scale"), Some(Attr::Float(_))));
    assert!(!n.attrs.contains_key("scale"));
    assert_eq!(bits(&r), bits(&m));
}

/// The comparison above has the power to see a wrong rewrite: the scale multiplied where the
/// chain divides changes the bits.
#[test]
fn a_wrong_rewrite_changes_the_bits() {
    let m = model(PLAIN);
    let (mut r, _) = rewritten(&m).unwrap();
    r.graph.nodes[0].attrs.insert("divide".into(), Attr::Int(0));
    assert_ne!(bits(&r), bits(&m));
}

#[test]
fn chains_that_are_not_attention_stay_apart() {
    // Softmax over another axis.
    let m = model(Chain { axis: 2, ..PLAIN });
    assert!(rewritten(&m).is_none());
    // The scores read by someone else (a graph output).
    let m = model(Chain {
        scores_out: true,
        ..PLAIN
    });
    assert!(rewritten(&m).is_none());
    // Not where the session's devices lack the op.
    let m = model(PLAIN);
    assert!(
        optimize_for_devices(&m.graph, &constants(&m.graph, true), &|_, op| op
            != "FusedAttention")
        .is_none()
    );
}

/// Kᵀ that something else reads too stays a Transpose; the fused node reads it as Kᵀ.
#[test]
fn a_shared_transpose_is_kept() {
    let mut m = model(PLAIN);
    m.graph.outputs.push(info("kt", &[2, 3, 8, 7]));
    let (r, _) = rewritten(&m).unwrap();
    assert_eq!(ops(&r), ["Transpose", "com.quorum::FusedAttention"]);
    let n = &r.graph.nodes[1];
    assert_eq!(n.inputs, ["q", "kt", "v", "m"]);
    assert!(matches!(n.attrs.get("transpose_k"), Some(Attr::Int(0))));
    assert_eq!(bits(&r), bits(&m));
}
