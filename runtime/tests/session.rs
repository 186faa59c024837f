//! Running: input checking, symbolic dims, and one session shared by many threads.
mod common;

use common::*;
use quorum::{Error, Session, SessionOptions, Tensor, Value};

/// `y = relu(x) * x` over a [n, 3] input with symbolic batch `n`.
fn session() -> Session {
    let m = model(
        vec![
            node("Relu", &["x"], &["r"]),
            node("Mul", &["r", "x"], &["y"]),
        ],
        vec![value_info("x", symbolic_type(1, &["n", "c"]))],
        vec![value_info("y", symbolic_type(1, &["n", "c"]))],
        vec![],
        14,
    );
    Session::from_bytes(&bytes(&m), SessionOptions::default()).unwrap()
}

fn seeded(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = quorum::inputs::Rng::new(seed);
    (0..n).map(|_| rng.uniform() as f32 * 4.0).collect()
}

#[test]
fn run_computes_and_checks_inputs() {
    let s = session();
    let x = seeded(6, 1);
    let out = s
        .run(vec![(
            "x".into(),
            Value::Tensor(Tensor::from_f32(&[2, 3], x.clone()).unwrap()),
        )])
        .unwrap();
    let want: Vec<f32> = x.iter().map(|v| v.max(0.0) * v).collect();
    assert_eq!(
        out[0].1,
        Value::Tensor(Tensor::from_f32(&[2, 3], want).unwrap())
    );

    let missing = s.run(vec![]).unwrap_err();
    assert!(
        matches!(&missing, Error::Input { name, .. } if name == "x"),
        "{missing}"
    );
    let extra = s
        .run(vec![
            (
                "x".into(),
                Value::Tensor(Tensor::from_f32(&[1, 3], seeded(3, 2)).unwrap()),
            ),
            (
                "z".into(),
                Value::Tensor(Tensor::from_f32(&[1], vec![1.0]).unwrap()),
            ),
        ])
        .unwrap_err();
    assert!(
        matches!(&extra, Error::Input { name, .. } if name == "z"),
        "{extra}"
    );
    let dtype = s
        .run(vec![(
            "x".into(),
            Value::Tensor(Tensor::from_i64(&[1, 3], vec![1, 2, 3]).unwrap()),
        )])
        .unwrap_err();
    assert!(dtype.to_string().contains("float32"), "{dtype}");
    let rank = s
        .run(vec![(
            "x".into(),
            Value::Tensor(Tensor::from_f32(&[3], seeded(3, 3)).unwrap()),
        )])
        .unwrap_err();
    assert!(matches!(rank, Error::Input { .. }));
}

#[test]
fn nan_and_infinity_are_computed_not_rejected() {
    let s = session();
    let x = Tensor::from_f32(&[1, 3], vec![f32::NAN, f32::INFINITY, -2.0]).unwrap();
    let out = s.run(vec![("x".into(), Value::Tensor(x))]).unwrap();
    let Value::Tensor(Tensor::F32(y)) = &out[0].1 else {
        panic!("expected f32")
    };
    assert!(y[[0, 0]].is_nan());
    assert_eq!(y[[0, 1]], f32::INFINITY);
    assert_eq!(y[[0, 2]], -0.0);
}

#[test]
fn one_session_runs_from_many_threads_with_identical_results() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Session>();
    let s = session();
    let x = Tensor::from_f32(&[64, 3], seeded(192, 9)).unwrap();
    let reference = s.run(vec![("x".into(), Value::Tensor(x.clone()))]).unwrap();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let x = x.clone();
                let s = &s;
                scope.spawn(move || {
                    (0..20)
                        .map(|_| s.run(vec![("x".into(), Value::Tensor(x.clone()))]).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            for out in h.join().unwrap() {
                assert_eq!(out, reference);
            }
        }
    });
}

/// View ops whose data input dies at the step take its storage (no copy), and view ops whose input
/// lives on take the kernel's copy; both give the kernel's shape and values. `r` dies at the
/// Reshape, `a` at the Unsqueeze, `b` at the Squeeze; `x` is read again after the Flatten.
#[test]
fn view_ops_give_the_same_values_whether_their_input_dies_or_not() {
    let i64s = |name: &str, v: &[i64]| quorum::proto::TensorProto {
        name: Some(name.into()),
        dims: vec![v.len() as i64],
        data_type: Some(7),
        raw_data: Some(v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        ..Default::default()
    };
    let mut flatten = node("Flatten", &["x"], &["f"]);
    flatten.attribute.push(quorum::proto::AttributeProto {
        name: Some("axis".into()),
        i: Some(2),
        r#type: Some(quorum::proto::attribute_proto::AttributeType::Int as i32),
        ..Default::default()
    });
    let m = model(
        vec![
            node("Relu", &["x"], &["r"]),
            node("Reshape", &["r", "shape"], &["a"]),
            node("Unsqueeze", &["a", "zero"], &["b"]),
            node("Squeeze", &["b", "zero"], &["c"]),
            flatten,
            node("Mul", &["x", "x"], &["m"]),
        ],
        vec![value_info("x", tensor_type(1, &[2, 3, 4]))],
        vec![
            value_info("c", tensor_type(1, &[4, 6])),
            value_info("f", tensor_type(1, &[6, 4])),
            value_info("m", tensor_type(1, &[2, 3, 4])),
        ],
        vec![i64s("shape", &[4, -1]), i64s("zero", &[0])],
        14,
    );
    let s = Session::from_bytes(&bytes(&m), SessionOptions::default()).unwrap();
    let x: Vec<f32> = seeded(24, 9).iter().map(|v| v - 2.0).collect();
    assert!(x.iter().any(|v| *v < 0.0) && x.iter().any(|v| *v > 0.0));
    for _ in 0..2 {
        let out = s
            .run(vec![(
                "x".into(),
                Value::Tensor(Tensor::from_f32(&[2, 3, 4], x.clone()).unwrap()),
            )])
            .unwrap();
        let want =
            |shape: &[usize], v: Vec<f32>| Value::Tensor(Tensor::from_f32(shape, v).unwrap());
        assert_eq!(
            out[0].1,
            want(&[4, 6], x.iter().map(|v| v.max(0.0)).collect())
        );
        assert_eq!(out[1].1, want(&[6, 4], x.clone()));
        assert_eq!(
            out[2].1,
            want(&[2, 3, 4], x.iter().map(|v| v * v).collect())
        );
    }
}
