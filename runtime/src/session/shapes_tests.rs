//! Shape arithmetic on the host (`placement::mark_shape_arithmetic`, `Exec::run_shapes`): Shape,
//! Size and small arithmetic on their results run on the CPU in a device session, Shape reads a
//! device value's shape without downloading it, and nothing that depends on a run input's values
//! is taken for shape arithmetic.
use std::collections::HashMap;
use std::sync::Arc;

use super::{Session, SessionOptions};
use crate::Provider;
use crate::ir::{Attr, Dim, Model, Node, ValueInfo, ValueType};
use crate::tensor::{DType, Tensor, Value};

fn info(name: &str, dtype: DType, dims: &[usize]) -> ValueInfo {
    ValueInfo {
        name: name.into(),
        ty: ValueType::Tensor {
            dtype: Some(dtype),
            shape: Some(dims.iter().map(|&d| Dim::Fixed(d as i64)).collect()),
        },
    }
}

fn node(name: &str, op: &str, i: &[&str], o: &str, attrs: &[(&str, Attr)]) -> Node {
    Node {
        name: name.into(),
        op_type: op.into(),
        domain: String::new(),
        opset: 17,
        inputs: i.iter().map(|s| s.to_string()).collect(),
        outputs: vec![o.into()],
        attrs: attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect::<HashMap<_, _>>(),
    }
}

fn i64s(dims: &[usize], v: Vec<i64>) -> Arc<Value> {
    Arc::new(Value::Tensor(Tensor::from_i64(dims, v).unwrap()))
}

/// x [2, 3, 8] → Relu → r; Shape(r)[2] gives the last dim d, unsqueezed and concatenated after 6
/// into the shape [6, d] that Reshape views r with; d cast to f32, square-rooted, scales the result.
/// `pick` (a run input) indexes the shape too: its Gather depends on a run value.
fn model() -> Model {
    let ints = |v: i64| Attr::Int(v);
    Model::for_test(
        vec![
            node("relu", "Relu", &["x"], "r", &[]),
            node("shape", "Shape", &["r"], "s", &[]),
            node("last", "Gather", &["s", "two"], "d", &[]),
            node("unsq", "Unsqueeze", &["d", "zero"], "du", &[]),
            node(
                "cat",
                "Concat",
                &["six", "du"],
                "target",
                &[("axis", ints(0))],
            ),
            node("view", "Reshape", &["r", "target"], "v", &[]),
            node("neg", "Neg", &["v"], "n", &[]),
            node("cast", "Cast", &["d"], "df", &[("to", ints(1))]),
            node("sqrt", "Sqrt", &["df"], "sq", &[]),
            node("scale", "Mul", &["n", "sq"], "y", &[]),
            node("picked", "Gather", &["s", "pick"], "p", &[]),
            node("size", "Size", &["x"], "count", &[]),
        ],
        vec![
            info("x", DType::F32, &[2, 3, 8]),
            info("pick", DType::I64, &[]),
        ],
        vec![
            info("y", DType::F32, &[6, 8]),
            info("p", DType::I64, &[]),
            info("count", DType::I64, &[]),
        ],
        [
            ("two".to_string(), i64s(&[], vec![2])),
            ("zero".to_string(), i64s(&[1], vec![0])),
            ("six".to_string(), i64s(&[1], vec![6])),
        ]
        .into(),
    )
}

fn feeds() -> Vec<(String, Value)> {
    // Seeded, both signs: Relu passes some and zeroes others.
    let x = crate::ops::testing::seeded_f32(21, 48, -2.0, 2.0);
    vec![
        (
            "x".into(),
            Value::Tensor(Tensor::from_f32(&[2, 3, 8], x).unwrap()),
        ),
        ("pick".into(), Value::Tensor(Tensor::scalar_i64(1))),
    ]
}

fn session(providers: Vec<Provider>) -> Session {
    let options = SessionOptions {
        providers,
        min_device_elements: 0,
        ..Default::default()
    };
    Session::from_model(model(), options).unwrap()
}

#[test]
fn shape_arithmetic_runs_on_the_host_and_results_match_the_cpu() {
    let s = session(vec![Provider::Sim, Provider::Cpu]);
    let on_host: Vec<&str> = s
        .placement()
        .iter()
        .filter(|p| p.provider == Provider::Cpu)
        .map(|p| p.node.as_str())
        .collect();
    assert_eq!(
        on_host,
        ["shape", "last", "unsq", "cat", "cast", "sqrt", "size"],
        "{:?}",
        s.placement()
    );
    let why = &s.placement()[1].declined;
    assert!(
        why.as_deref()
            .is_some_and(|w| w.contains("shape arithmetic")),
        "{why:?}"
    );
    // The Gather indexed by a run input is not shape arithmetic: it stays on the device.
    let picked = s.placement().iter().find(|p| p.node == "picked").unwrap();
    assert_eq!(picked.provider, Provider::Sim);

    let cpu = session(vec![Provider::Cpu]);
    let want = cpu.run(feeds()).unwrap();
    for _ in 0..2 {
        let got = s.run(feeds()).unwrap();
        assert_eq!(got.len(), want.len());
        for ((name, a), (_, b)) in got.iter().zip(&want) {
            let (a, b) = (a.as_tensor().unwrap(), b.as_tensor().unwrap());
            assert_eq!(a.shape(), b.shape(), "{name}");
            assert_eq!(a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap(), "{name}");
        }
    }
}

#[test]
fn shape_reads_a_device_value_without_downloading_it() {
    let s = session(vec![Provider::Sim, Provider::Cpu]);
    let before = s.counters().d2h_bytes;
    s.run(feeds()).unwrap();
    // Only the device outputs come back: y (6·8 f32) and p (one i64). Had Shape downloaded its
    // input r (2·3·8 f32), 192 more bytes would show.
    assert_eq!(s.counters().d2h_bytes - before, 6 * 8 * 4 + 8);
}

/// The check above can fail: the counter sees r come back when something does download it (here r
/// is made a graph output as well).
#[test]
fn the_download_check_sees_r_when_it_is_downloaded() {
    let mut m = model();
    m.graph.outputs.push(info("r", DType::F32, &[2, 3, 8]));
    let options = SessionOptions {
        providers: vec![Provider::Sim, Provider::Cpu],
        min_device_elements: 0,
        ..Default::default()
    };
    let s = Session::from_model(m, options).unwrap();
    s.run(feeds()).unwrap();
    assert_eq!(s.counters().d2h_bytes, 6 * 8 * 4 + 8 + 2 * 3 * 8 * 4);
}

#[test]
fn a_value_a_run_can_override_is_not_a_constant() {
    // `six` listed as a graph input too (IR 4 on): a run may replace it, so the Concat that reads
    // it depends on a run value and is not shape arithmetic.
    let mut m = model();
    m.graph.inputs.push(info("six", DType::I64, &[1]));
    let options = SessionOptions {
        providers: vec![Provider::Sim, Provider::Cpu],
        min_device_elements: 0,
        ..Default::default()
    };
    let s = Session::from_model(m, options).unwrap();
    let cat = s.placement().iter().find(|p| p.node == "cat").unwrap();
    assert_eq!(cat.provider, Provider::Sim, "{:?}", s.placement());
}

/// Shape values are kept per input-shape key but never served stale: NonZero's output shape
/// depends on x's values, so two runs with the same input shape and different zeros give different
/// Shapes, and the ConstantOfShape and Range computed from them (shape arithmetic since they read
/// only shape values and constants) must follow. Each run is compared with the CPU session; a cache
/// that trusted the input-shape key alone (the broken twin) would return the first run's answer for
/// the second.
#[test]
fn shape_values_of_data_dependent_shapes_are_recomputed() {
    let m = Model::for_test(
        vec![
            node("nz", "NonZero", &["x"], "idx", &[]),
            node("shape", "Shape", &["idx"], "s", &[]),
            node("count", "Gather", &["s", "one"], "n", &[]),
            node("fill", "ConstantOfShape", &["s"], "z", &[]),
            node("range", "Range", &["zero", "n", "step"], "r", &[]),
            node("plus", "Add", &["x", "x"], "y", &[]),
        ],
        vec![info("x", DType::F32, &[6])],
        vec![
            info("z", DType::F32, &[1, 6]),
            info("r", DType::I64, &[6]),
            info("y", DType::F32, &[6]),
        ],
        [
            ("one".to_string(), i64s(&[], vec![1])),
            ("zero".to_string(), i64s(&[], vec![0])),
            ("step".to_string(), i64s(&[], vec![1])),
        ]
        .into(),
    );
    let options = SessionOptions {
        providers: vec![Provider::Sim, Provider::Cpu],
        min_device_elements: 0,
        ..Default::default()
    };
    let s = Session::from_model(m.clone(), options).unwrap();
    for name in ["shape", "count", "fill", "range"] {
        let p = s.placement().iter().find(|p| p.node == name).unwrap();
        assert_eq!(p.provider, Provider::Cpu, "{name}: {:?}", s.placement());
    }
    let cpu = Session::from_model(
        m,
        SessionOptions {
            providers: vec![Provider::Cpu],
            ..Default::default()
        },
    )
    .unwrap();
    let x = |v: [f32; 6]| {
        vec![(
            "x".to_string(),
            Value::Tensor(Tensor::from_f32(&[6], v.to_vec()).unwrap()),
        )]
    };
    let mut lengths = Vec::new();
    for v in [
        [1.0, 0.0, 2.0, 0.0, 3.0, 4.0],
        [0.0, 0.0, 5.0, 0.0, 0.0, 6.0],
        [1.0, 0.0, 2.0, 0.0, 3.0, 4.0],
    ] {
        let got = s.run(x(v)).unwrap();
        let want = cpu.run(x(v)).unwrap();
        for ((name, a), (_, b)) in got.iter().zip(&want) {
            let (a, b) = (a.as_tensor().unwrap(), b.as_tensor().unwrap());
            assert_eq!(a.shape(), b.shape(), "{name}");
            assert_eq!(a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap(), "{name}");
        }
        lengths.push(got[1].1.as_tensor().unwrap().len());
    }
    assert_eq!(
        lengths,
        [4, 2, 4],
        "the runs must differ for the test to mean anything"
    );
}
