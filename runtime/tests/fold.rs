//! Constant folding at session build: what folds, what must not, and that folding never changes a
//! result or moves an error.
mod common;

use common::*;
use quorum::proto;
use quorum::{Error, Session, SessionOptions, Tensor, Value};

fn seeded(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = quorum::inputs::Rng::new(seed);
    (0..n).map(|_| rng.uniform() as f32 * 4.0 - 2.0).collect()
}

fn open(m: &proto::ModelProto, fold: bool) -> Session {
    let options = SessionOptions {
        fold_constants: fold,
        ..Default::default()
    };
    Session::from_bytes(&bytes(m), options).unwrap()
}

fn run(s: &Session, feeds: &[(&str, Vec<f32>)]) -> quorum::Result<Vec<(String, Value)>> {
    s.run(
        feeds
            .iter()
            .map(|(n, v)| {
                let t = Tensor::from_f32(&[2, 3], v.clone()).unwrap();
                (n.to_string(), Value::Tensor(t))
            })
            .collect(),
    )
}

fn io() -> (Vec<proto::ValueInfoProto>, Vec<proto::ValueInfoProto>) {
    (
        vec![value_info("x", tensor_type(1, &[2, 3]))],
        vec![value_info("y", tensor_type(1, &[2, 3]))],
    )
}

/// y = x + relu(a · b): the Mul and Relu read only initializers and fold; the result is the same
/// bit for bit, and the plan keeps only the Add.
#[test]
fn constant_chains_fold_and_results_do_not_change() {
    let (ins, outs) = io();
    let m = model(
        vec![
            node("Mul", &["a", "b"], &["t"]),
            node("Relu", &["t"], &["c"]),
            node("Add", &["x", "c"], &["y"]),
        ],
        ins,
        outs,
        vec![
            f32_tensor("a", &[2, 3], &seeded(6, 1)),
            f32_tensor("b", &[2, 3], &seeded(6, 2)),
        ],
        17,
    );
    let (folded, plain) = (open(&m, true), open(&m, false));
    assert_eq!(
        folded.folded_nodes().len(),
        2,
        "{:?}",
        folded.folded_nodes()
    );
    assert_eq!(folded.placement().len(), 1);
    assert_eq!(plain.folded_nodes().len(), 0);
    assert_eq!(plain.placement().len(), 3);
    for seed in 10..13 {
        let feeds = [("x", seeded(6, seed))];
        assert_eq!(run(&folded, &feeds).unwrap(), run(&plain, &feeds).unwrap());
    }
}

/// An initializer that is also a graph input is a default the caller may replace: nodes reading it
/// stay in the plan, and a fed value is used.
#[test]
fn overridable_initializers_do_not_fold() {
    let (mut ins, outs) = io();
    ins.push(value_info("a", tensor_type(1, &[2, 3])));
    let m = model(
        vec![
            node("Relu", &["a"], &["c"]),
            node("Add", &["x", "c"], &["y"]),
        ],
        ins,
        outs,
        vec![f32_tensor("a", &[2, 3], &seeded(6, 3))],
        17,
    );
    let s = open(&m, true);
    assert!(s.folded_nodes().is_empty(), "{:?}", s.folded_nodes());
    let x = seeded(6, 4);
    let a = seeded(6, 5);
    let y = run(&s, &[("x", x.clone()), ("a", a.clone())]).unwrap();
    let want: Vec<f32> = x.iter().zip(&a).map(|(x, a)| x + a.max(0.0)).collect();
    assert_eq!(
        y[0].1,
        Value::Tensor(Tensor::from_f32(&[2, 3], want).unwrap())
    );
}

/// Random ops draw anew on every run; a Constant node (no inputs at all) folds.
#[test]
fn random_ops_stay_and_constant_nodes_fold() {
    let (ins, outs) = io();
    let mut rand = node("RandomUniform", &[], &["r"]);
    rand.attribute = vec![proto::AttributeProto {
        name: Some("shape".into()),
        r#type: Some(proto::attribute_proto::AttributeType::Ints as i32),
        ints: vec![2, 3],
        ..Default::default()
    }];
    let mut constant = node("Constant", &[], &["k"]);
    constant.attribute = vec![proto::AttributeProto {
        name: Some("value".into()),
        r#type: Some(proto::attribute_proto::AttributeType::Tensor as i32),
        t: Some(f32_tensor("k", &[2, 3], &seeded(6, 6))),
        ..Default::default()
    }];
    let m = model(
        vec![
            rand,
            constant,
            node("Add", &["r", "k"], &["t"]),
            node("Add", &["x", "t"], &["y"]),
        ],
        ins,
        outs,
        vec![],
        17,
    );
    let s = open(&m, true);
    let folded = s.folded_nodes().to_vec();
    assert_eq!(folded, vec!["Constant_node".to_string()], "{folded:?}");
    assert_eq!(s.placement().len(), 3);
    run(&s, &[("x", seeded(6, 7))]).unwrap();
}

/// A constant node whose kernel fails is left in the plan, so the run reports the failure naming
/// the node, as it would without folding.
#[test]
fn failing_constant_nodes_fail_at_run_time() {
    let (ins, outs) = io();
    let shape = proto::TensorProto {
        name: Some("shape".into()),
        dims: vec![1],
        data_type: Some(7),
        raw_data: Some(7i64.to_le_bytes().to_vec()),
        ..Default::default()
    };
    let m = model(
        vec![
            node("Reshape", &["a", "shape"], &["c"]),
            node("Add", &["x", "c"], &["y"]),
        ],
        ins,
        outs,
        vec![f32_tensor("a", &[2, 3], &seeded(6, 8)), shape],
        17,
    );
    let s = open(&m, true);
    assert!(s.folded_nodes().is_empty(), "{:?}", s.folded_nodes());
    let e = run(&s, &[("x", seeded(6, 9))]).unwrap_err();
    assert!(
        matches!(&e, Error::Node { op, .. } if op == "Reshape"),
        "{e}"
    );
}

/// Before IR version 4 every initializer had to be listed among the graph inputs, and all of them
/// are constants: they fold, and feeding one is an input error rather than a value silently ignored.
#[test]
fn old_ir_initializers_are_constants() {
    let (mut ins, outs) = io();
    ins.push(value_info("a", tensor_type(1, &[2, 3])));
    let mut m = model(
        vec![
            node("Relu", &["a"], &["c"]),
            node("Add", &["x", "c"], &["y"]),
        ],
        ins,
        outs,
        vec![f32_tensor("a", &[2, 3], &seeded(6, 10))],
        7,
    );
    m.ir_version = Some(3);
    let s = open(&m, true);
    assert_eq!(s.folded_nodes(), ["Relu_node".to_string()]);
    run(&s, &[("x", seeded(6, 11))]).unwrap();
    let e = run(&s, &[("x", seeded(6, 11)), ("a", seeded(6, 12))]).unwrap_err();
    assert!(
        matches!(&e, Error::Input { name, .. } if name == "a"),
        "{e}"
    );
}
