//! `SessionOptions::profile`: every top-level node of every run is counted once under its op type,
//! with time; nothing is recorded when it is off.
use std::collections::HashMap;
use std::sync::Arc;

use super::{Session, SessionOptions};
use crate::ir::{Dim, Model, Node, ValueInfo, ValueType};
use crate::tensor::{DType, Tensor, Value};

pub(super) fn model() -> Model {
    let info = |name: &str| ValueInfo {
        name: name.into(),
        ty: ValueType::Tensor {
            dtype: Some(DType::F32),
            shape: Some(vec![Dim::Fixed(64)]),
        },
    };
    let node = |name: &str, op: &str, i: &[&str], o: &str| Node {
        name: name.into(),
        op_type: op.into(),
        domain: String::new(),
        opset: 17,
        inputs: i.iter().map(|s| s.to_string()).collect(),
        outputs: vec![o.into()],
        attrs: HashMap::new(),
    };
    let bias: Vec<f32> = (0..64).map(|i| i as f32 * 0.5 - 3.0).collect();
    Model::for_test(
        vec![
            node("a", "Add", &["x", "bias"], "t"),
            node("r", "Relu", &["t"], "u"),
            node("n", "Neg", &["u"], "v"),
            node("r2", "Relu", &["v"], "y"),
        ],
        vec![info("x")],
        vec![info("y")],
        [(
            "bias".to_string(),
            Arc::new(Value::Tensor(Tensor::from_f32(&[64], bias).unwrap())),
        )]
        .into(),
    )
}

fn run(s: &Session, times: usize) {
    let x: Vec<f32> = (0..64).map(|i| (i as f32 * 0.37).sin()).collect();
    for _ in 0..times {
        s.run(vec![(
            "x".into(),
            Value::Tensor(Tensor::from_f32(&[64], x.clone()).unwrap()),
        )])
        .unwrap();
    }
}

#[test]
fn profile_counts_every_node_of_every_run() {
    let on = SessionOptions {
        profile: true,
        ..Default::default()
    };
    let s = Session::from_model(model(), on).unwrap();
    run(&s, 3);
    let p = s.op_profile();
    let calls: HashMap<&str, u64> = p.iter().map(|(op, _, t)| (op.as_str(), t.calls)).collect();
    assert_eq!(calls, HashMap::from([("Add", 3), ("Relu", 6), ("Neg", 3)]));
    assert!(
        p.iter()
            .all(|(_, provider, t)| provider == "cpu" && t.nanos > 0)
    );
    // Sorted by time, most first.
    assert!(p.windows(2).all(|w| w[0].2.nanos >= w[1].2.nanos));
    // Per node: each of the four once per run, under its own name and op type; the two Relus apart.
    let n = s.node_profile();
    let nodes: HashMap<&str, (&str, u64)> = n
        .iter()
        .map(|(name, t)| (name.as_str(), (t.op.as_str(), t.time.calls)))
        .collect();
    assert_eq!(
        nodes,
        HashMap::from([
            ("a", ("Add", 3)),
            ("r", ("Relu", 3)),
            ("n", ("Neg", 3)),
            ("r2", ("Relu", 3))
        ])
    );
    assert!(n.windows(2).all(|w| w[0].1.time.nanos >= w[1].1.time.nanos));
    // The nodes' times add up to their op types' times.
    let sum = |op: &str| -> u64 {
        n.iter()
            .filter(|(_, t)| t.op == op)
            .map(|(_, t)| t.time.nanos)
            .sum()
    };
    for (op, _, t) in &p {
        assert_eq!(sum(op), t.nanos, "{op}");
    }

    let off = Session::from_model(model(), SessionOptions::default()).unwrap();
    run(&off, 2);
    assert!(off.op_profile().is_empty());
    assert!(off.node_profile().is_empty());
}
