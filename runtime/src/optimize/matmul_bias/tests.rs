//! The `matmul-bias` rewrite: applied to both operand orders of the Add, left alone where the pair
//! is not a Linear layer's, and the rewritten graph (on the CPU, where MatMulBias is MatMul then Add)
//! gives the unrewritten one's outputs bit for bit — a comparison checked against a wrong rewrite.
use std::sync::Arc;

use super::*;
use crate::ir::Model;
use crate::optimize::tests::{info, node, tensor};
use crate::optimize::{constants, optimize_for_devices};
use crate::session::{Session, SessionOptions};
use crate::tensor::Tensor;

/// x [2, 5, 8] → MatMul by w [8, 6] → Add of b [6] (`bias_first`: Add(b, p)) → Relu → y.
fn linear(bias_first: bool) -> Model {
    linear_of(bias_first, 5, 6)
}

/// [`linear`] with x [2, rows, 8], w [8, n] and b [n].
fn linear_of(bias_first: bool, rows: usize, n: usize) -> Model {
    let add = if bias_first { ["b", "p"] } else { ["p", "b"] };
    Model::for_test(
        vec![
            node("mm", "MatMul", &["x", "w"], &["p"]),
            node("add", "Add", &add, &["q"]),
            node("relu", "Relu", &["q"], &["y"]),
        ],
        vec![info("x", &[2, rows, 8])],
        vec![info("y", &[2, rows, n])],
        [("w", tensor(&[8, n], 1)), ("b", tensor(&[n], 2))]
            .into_iter()
            .map(|(k, v)| (k.to_string(), Arc::new(Value::Tensor(v))))
            .collect(),
    )
}

fn rewritten(m: &Model, runs: bool) -> Option<(Model, Vec<Rewrite>)> {
    let (g, done) = optimize_for_devices(&m.graph, &constants(&m.graph, true), &|_, _| runs)?;
    let mut r = m.clone();
    r.graph = g;
    Some((r, done))
}

fn ops(m: &Model) -> Vec<String> {
    m.graph.nodes.iter().map(|n| n.qualified_op()).collect()
}

/// The outputs' bits for three seeded inputs, on a CPU session without rewrites of its own.
fn bits(m: &Model) -> Vec<Vec<u64>> {
    bits_with(m, false)
}

/// [`bits`], the session's own rewrites on or off.
fn bits_with(m: &Model, optimize: bool) -> Vec<Vec<u64>> {
    let options = SessionOptions {
        optimize,
        ..Default::default()
    };
    let s = Session::from_model(m.clone(), options).unwrap();
    let shape = match &m.graph.inputs[0].ty {
        crate::ir::ValueType::Tensor {
            shape: Some(dims), ..
        } => dims
            .iter()
            .map(|d| match d {
                crate::ir::Dim::Fixed(v) => *v as usize,
                _ => 1,
            })
            .collect::<Vec<_>>(),
        _ => vec![2, 5, 8],
    };
    (10..13)
        .map(|seed| {
            let out = s
                .run(vec![("x".into(), Value::Tensor(tensor(&shape, seed)))])
                .unwrap();
            let t = out[0].1.as_tensor().unwrap().to_f64_vec().unwrap();
            t.iter().map(|v| v.to_bits()).collect()
        })
        .collect()
}

#[test]
fn both_operand_orders_become_one_matmul_bias() {
    for bias_first in [false, true] {
        let m = linear(bias_first);
        let (r, done) = rewritten(&m, true).expect("the pair is rewritten");
        assert_eq!(done.len(), 1, "{done:?}");
        assert_eq!(done[0].pass, "matmul-bias");
        assert_eq!(ops(&r), ["com.quorum::MatMulBias", "Relu"]);
        assert_eq!(r.graph.nodes[0].inputs, ["x", "w", "b"]);
        assert_eq!(r.graph.nodes[0].outputs, ["q"]);
        assert_eq!(bits(&r), bits(&m), "bias first: {bias_first}");
    }
}

/// CPU sessions apply the same rewrite as `linear-bias`, exact: bit for bit the unrewritten
/// graph, on a product the general path takes (6 columns) and on ones the packed GEMM takes, whose
/// epilogue adds the bias (40 and 75 columns, 9 and 16 rows a batch).
#[test]
fn cpu_sessions_fuse_linear_layers_bit_for_bit() {
    for (rows, n) in [(5, 6), (9, 40), (16, 75)] {
        for bias_first in [false, true] {
            let m = linear_of(bias_first, rows, n);
            let s = Session::from_model(m.clone(), SessionOptions::default()).unwrap();
            let passes: Vec<&str> = s.rewrites().iter().map(|r| r.pass).collect();
            assert_eq!(passes, ["linear-bias"]);
            assert!(s.rewrites()[0].exact());
            assert_eq!(bits_with(&m, true), bits(&m), "{rows}x{n}");
        }
    }
}

#[test]
fn only_where_every_device_runs_it() {
    assert!(rewritten(&linear(false), false).is_none());
}

#[test]
fn pairs_that_are_not_a_linear_layer_stay_apart() {
    let replace = |m: &mut Model, name: &str, t: Tensor| {
        m.graph
            .initializers
            .insert(name.into(), Arc::new(Value::Tensor(t)));
    };
    // A bias of [1, 6], of [5, 6], or of the wrong length.
    for shape in [vec![1usize, 6], vec![5, 6], vec![5]] {
        let mut m = linear(false);
        replace(&mut m, "b", tensor(&shape, 3));
        assert!(rewritten(&m, true).is_none(), "bias {shape:?}");
    }
    // A bias or weight fed by the run.
    for name in ["b", "w"] {
        let mut m = linear(false);
        m.graph.initializers.remove(name);
        m.graph.inputs.push(info(name, &[6]));
        assert!(rewritten(&m, true).is_none(), "{name} is a run input");
    }
    // A bias of another dtype than the weight's.
    let mut m = linear(false);
    let b64 = Tensor::from_f64s(DType::F64, &[6], vec![0.25; 6]).unwrap();
    replace(&mut m, "b", b64);
    assert!(rewritten(&m, true).is_none());
    // The product also read elsewhere: a graph output, or a second reader.
    let mut m = linear(false);
    m.graph.outputs.push(info("p", &[2, 5, 6]));
    assert!(rewritten(&m, true).is_none());
    let mut m = linear(false);
    m.graph.nodes.push(node("neg", "Neg", &["p"], &["z"]));
    m.graph.outputs.push(info("z", &[2, 5, 6]));
    assert!(rewritten(&m, true).is_none());
    // A Sub in the Add's place.
    let mut m = linear(false);
    m.graph.nodes[1].op_type = "Sub".into();
    assert!(rewritten(&m, true).is_none());
}

/// The bit-for-bit comparison catches a rewrite that adds the wrong bias.
#[test]
fn the_comparison_catches_a_wrong_bias() {
    let m = linear(false);
    let (mut r, _) = rewritten(&m, true).unwrap();
    r.graph
        .initializers
        .insert("b2".into(), Arc::new(Value::Tensor(tensor(&[6], 99))));
    r.graph.nodes[0].inputs[2] = "b2".into();
    assert_ne!(bits(&r), bits(&m));
}
