//! The session hands kernels its initializers as constants: a Conv's packed weights are cached
//! across runs, and a run input that overrides the initializer is not taken for it.
use std::sync::Arc;

use quorum_kernels::Isa;

use crate::ir::{Attr, Dim, Graph, Model, Node, ValueInfo, ValueType};
use crate::ops::Registry;
use crate::ops::conv::weights;
use crate::ops::testing::run_kernel;
use crate::session::{Session, SessionOptions};
use crate::tensor::{Tensor, Value};

/// Seeded values in [-1, 1).
fn t(shape: &[usize], seed: u64) -> (Tensor, Vec<f32>) {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let v: Vec<f32> = (0..shape.iter().product::<usize>())
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect();
    (Tensor::from_f32(shape, v.clone()).unwrap(), v)
}

fn ints(v: &[i64]) -> Attr {
    Attr::Ints(v.to_vec())
}

/// The CPU's Conv kernel called directly, padded by one on every side.
fn conv(x: Tensor, w: Tensor) -> Tensor {
    let k = Registry::cpu().get("", "Conv").unwrap();
    run_kernel(
        k,
        "Conv",
        22,
        vec![("pads", ints(&[1, 1, 1, 1]))],
        vec![Some(x), Some(w)],
        1,
    )
    .unwrap()
    .remove(0)
}

/// A Conv whose W is an initializer of a session: the session hands the kernel the initializer's
/// `Arc` as a constant, so the packed weights made by the first run are the cache's (a runner that
/// says "not a constant" — the executor before this was wired — leaves nothing cached and repacks
/// every run). A run input that overrides the initializer is not a constant: its result follows the
/// weights fed.
#[test]
fn session_runs_reuse_packed_initializer_weights() {
    let (x, _) = t(&[1, 3, 6, 6], 41);
    let (w, _) = t(&[5, 3, 3, 3], 42);
    let w_arc = Arc::new(Value::Tensor(w.clone()));
    let info = |name: &str, shape: &[i64]| ValueInfo {
        name: name.into(),
        ty: ValueType::Tensor {
            dtype: Some(crate::tensor::DType::F32),
            shape: Some(shape.iter().map(|&d| Dim::Fixed(d)).collect()),
        },
    };
    let graph = Graph {
        name: "g".into(),
        nodes: vec![Node {
            name: "conv0".into(),
            op_type: "Conv".into(),
            domain: String::new(),
            opset: 22,
            inputs: vec!["x".into(), "w".into()],
            outputs: vec!["y".into()],
            attrs: [("pads".to_string(), ints(&[1, 1, 1, 1]))].into(),
        }],
        inputs: vec![info("x", &[1, 3, 6, 6]), info("w", &[5, 3, 3, 3])],
        outputs: vec![info("y", &[1, 5, 6, 6])],
        initializers: [("w".to_string(), w_arc.clone())].into(),
        value_info: Default::default(),
    };
    let model = Model {
        ir_version: 8,
        opsets: [(String::new(), 22)].into(),
        producer: "test".into(),
        graph,
        metadata: vec![],
        warnings: vec![],
    };
    let session = Session::from_model(model, SessionOptions::default()).unwrap();
    let isa = Isa::detected();
    let shape = [5usize, 3, 3, 3];
    assert!(!weights::is_cached(&w_arc, isa, 1, &shape));
    let y = |outs: Vec<(String, Value)>| outs[0].1.as_tensor().unwrap().to_f64_vec().unwrap();
    let first = y(session
        .run(vec![("x".into(), Value::Tensor(x.clone()))])
        .unwrap());
    assert!(
        weights::is_cached(&w_arc, isa, 1, &shape),
        "the session's initializer was not packed into the cache"
    );
    let second = y(session
        .run(vec![("x".into(), Value::Tensor(x.clone()))])
        .unwrap());
    assert_eq!(first, second);
    let direct = conv(x.clone(), w.clone());
    assert_eq!(first, direct.to_f64_vec().unwrap());
    // W fed per run: the fed weights, not the cached initializer's.
    let (w2, _) = t(&[5, 3, 3, 3], 43);
    let fed = y(session
        .run(vec![
            ("x".into(), Value::Tensor(x.clone())),
            ("w".into(), Value::Tensor(w2.clone())),
        ])
        .unwrap());
    let want = conv(x.clone(), w2);
    assert_eq!(fed, want.to_f64_vec().unwrap());
    assert_ne!(fed, first);
}
