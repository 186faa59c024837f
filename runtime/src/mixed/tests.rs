//! The mixed-precision conversion on small graphs: what converts, what stays f32 and where the casts
//! go; the converted session runs (on the CPU) with the model's f32 interface and lands within a
//! half's resolution of the f32 model, while a deliberately wrong conversion is caught by the same
//! deviation measure.
use std::collections::HashMap;
use std::sync::Arc;

use super::*;
use crate::backend::Precision;
use crate::ir::{Dim, Model, ValueInfo};
use crate::session::{Session, SessionOptions};

fn info(name: &str, shape: &[usize]) -> ValueInfo {
    ValueInfo {
        name: name.into(),
        ty: ValueType::Tensor {
            dtype: Some(DType::F32),
            shape: Some(shape.iter().map(|&d| Dim::Fixed(d as i64)).collect()),
        },
    }
}

fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> Node {
    Node {
        name: format!("{op}_{}", outputs[0]),
        op_type: op.into(),
        domain: String::new(),
        opset: 17,
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: outputs.iter().map(|s| s.to_string()).collect(),
        attrs: HashMap::new(),
    }
}

fn tensor(shape: &[usize], seed: u64) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_f32(shape, crate::ops::testing::seeded_f32(seed, n, -1.0, 1.0)).unwrap()
}

/// x [4, 16] → MatMul W → Add B → Relu → h; h → LayerNormalization(g, b) → y; h → Pow(2) →
/// ReduceMean → z (Pow is kept in f32); Shape(x) → s (an integer output).
fn mlp() -> Model {
    let inits: HashMap<String, Arc<Value>> = [
        ("w", tensor(&[16, 32], 1)),
        ("bias", tensor(&[32], 2)),
        ("g", tensor(&[32], 3)),
        ("beta", tensor(&[32], 4)),
        ("two", Tensor::from_f32(&[], vec![2.0]).unwrap()),
    ]
    .into_iter()
    .map(|(k, t)| (k.to_string(), Arc::new(Value::Tensor(t))))
    .collect();
    let mut ln = node("LayerNormalization", &["h", "g", "beta"], &["y"]);
    ln.attrs.insert("axis".into(), Attr::Int(-1));
    Model::for_test(
        vec![
            node("MatMul", &["x", "w"], &["xw"]),
            node("Add", &["xw", "bias"], &["a"]),
            node("Relu", &["a"], &["h"]),
            ln,
            node("Pow", &["h", "two"], &["sq"]),
            node("ReduceMean", &["sq"], &["z"]),
            node("Shape", &["x"], &["s"]),
        ],
        vec![info("x", &[4, 16])],
        vec![info("y", &[4, 32]), info("z", &[1, 1]), {
            let mut s = info("s", &[2]);
            s.ty = ValueType::Tensor {
                dtype: Some(DType::I64),
                shape: None,
            };
            s
        }],
        inits,
    )
}

fn run(m: &Model, precision: Precision) -> (Session, Vec<(String, Value)>) {
    let s = Session::from_model(
        m.clone(),
        SessionOptions {
            precision,
            ..Default::default()
        },
    )
    .unwrap();
    let out = s
        .run(vec![("x".into(), Value::Tensor(tensor(&[4, 16], 9)))])
        .unwrap();
    (s, out)
}

fn dtype_of(out: &[(String, Value)], name: &str) -> DType {
    match &out.iter().find(|(n, _)| n == name).unwrap().1 {
        Value::Tensor(t) => t.dtype(),
        v => panic!("{name}: {v:?}"),
    }
}

#[test]
fn f32_values_become_halves_except_kept_ops_and_the_interface() {
    for half in [DType::F16, DType::BF16] {
        let (g, c) = convert(&mlp().graph, half, &[]).unwrap().unwrap();
        let find = |op: &str| g.nodes.iter().find(|n| n.op_type == op).unwrap();
        // The MatMul reads the input through one Cast and a converted copy of W.
        let mm = find("MatMul");
        let w = &g.initializers[&mm.inputs[1]];
        assert!(
            matches!(&**w, Value::Tensor(t) if t.dtype() == half),
            "{half}"
        );
        let cast_x = g
            .nodes
            .iter()
            .find(|n| n.outputs[0] == mm.inputs[0])
            .unwrap();
        assert_eq!(
            (cast_x.op_type.as_str(), cast_x.inputs[0].as_str()),
            ("Cast", "x")
        );
        // Pow stays f32: it reads h cast back, and its constant as it was.
        let pow = find("Pow");
        assert_ne!(pow.inputs[0], "h");
        assert_eq!(pow.inputs[1], "two");
        // The outputs keep their names and f32 through a final Cast; Shape is untouched.
        let y = g.nodes.iter().find(|n| n.outputs[0] == "y").unwrap();
        assert_eq!(y.op_type, "Cast");
        // MatMul, Add, Relu and LayerNorm; the ReduceMean after the kept Pow continues its
        // computation in f32; Shape reads the f32 input as it is.
        assert_eq!(c.converted, 4, "{c:?}");
        assert_eq!(
            c.kept,
            vec![("Pow".to_string(), 1), ("ReduceMean".to_string(), 1)]
        );
        let shape = find("Shape");
        assert_eq!(shape.inputs[0], "x");
        assert_eq!((c.initializers, c.clamped), (4, 0), "{c:?}");
        // Unused originals are gone, the constant Pow reads stays.
        assert!(!g.initializers.contains_key("w") && g.initializers.contains_key("two"));
    }
}

#[test]
fn converted_sessions_keep_the_interface_and_land_near_the_f32_model() {
    let m = mlp();
    let (_, want) = run(&m, Precision::F32);
    for (precision, resolution) in [
        (Precision::F16, 2f64.powi(-10)),
        (Precision::Bf16, 2f64.powi(-7)),
    ] {
        let (s, got) = run(&m, precision);
        let c = s.conversion().expect("converted");
        assert_eq!(c.dtype, precision.half());
        assert_eq!(dtype_of(&got, "y"), DType::F32);
        assert_eq!(dtype_of(&got, "s"), DType::I64);
        for (name, d) in deviation(&want, &got) {
            // A few roundings of a sum of 16 products and a normalisation: within 8 units of the
            // half's resolution.
            assert!(d < 8.0 * resolution, "{precision:?} {name}: {d:e}");
            assert!(
                d > 0.0 || name == "s",
                "{precision:?} {name}: no rounding at all?"
            );
        }
    }
}

#[test]
fn the_deviation_catches_a_wrong_conversion() {
    // A conversion that rounds W to a quarter of f16's resolution on top (a converter that drops
    // mantissa bits): the deviation sees it where the right conversion stays within bounds.
    let m = mlp();
    let (_, want) = run(&m, Precision::F32);
    let (mut g, _) = convert(&m.graph, DType::F16, &[]).unwrap().unwrap();
    let name = g
        .nodes
        .iter()
        .find(|n| n.op_type == "MatMul")
        .unwrap()
        .inputs[1]
        .clone();
    let Value::Tensor(w) = &*g.initializers[&name] else {
        unreachable!()
    };
    let coarse: Vec<f64> = w
        .to_f64_vec()
        .unwrap()
        .iter()
        .map(|x| (x * 64.0).round() / 64.0)
        .collect();
    let coarse = Tensor::from_f64s(DType::F16, w.shape(), coarse).unwrap();
    g.initializers.insert(name, Arc::new(Value::Tensor(coarse)));
    let broken = Model { graph: g, ..m };
    let (_, got) = run(&broken, Precision::F32);
    let d = deviation(&want, &got);
    let y = d.iter().find(|(n, _)| n == "y").unwrap().1;
    assert!(y > 8.0 * 2f64.powi(-10), "a coarse W was not seen: {y:e}");
}

#[test]
fn f16_clamps_what_it_cannot_hold_and_bf16_does_not() {
    let mut m = mlp();
    let mut w = tensor(&[16, 32], 1).to_f64_vec().unwrap();
    w[3] = 1e6;
    w[7] = -7e4;
    m.graph.initializers.insert(
        "w".into(),
        Arc::new(Value::Tensor(
            Tensor::from_f64s(DType::F32, &[16, 32], w).unwrap(),
        )),
    );
    let (_, c) = convert(&m.graph, DType::F16, &[]).unwrap().unwrap();
    assert_eq!(c.clamped, 2);
    let (_, c) = convert(&m.graph, DType::BF16, &[]).unwrap().unwrap();
    assert_eq!(c.clamped, 0);
}

#[test]
fn the_caller_keeps_ops_and_unknown_ops_stay_as_they_are() {
    let mut m = mlp();
    // An op of another domain between Relu and LayerNorm: not inferred, so kept.
    let relu = m
        .graph
        .nodes
        .iter()
        .position(|n| n.op_type == "Relu")
        .unwrap();
    m.graph.nodes[relu].outputs[0] = "r".into();
    let mut custom = node("Identity", &["r"], &["h"]);
    custom.domain = "com.example".into();
    m.graph.nodes.insert(relu + 1, custom);
    let (g, c) = convert(&m.graph, DType::F16, &["Relu".to_string()])
        .unwrap()
        .unwrap();
    let find = |op: &str| g.nodes.iter().find(|n| n.op_type == op).unwrap();
    // The MatMul and Add convert; the kept Relu reads the Add's half output cast back to f32.
    assert_eq!(c.converted, 2, "{c:?}");
    assert_ne!(find("Relu").inputs[0], "a");
    // The custom op reads the kept Relu's f32 as it is; what it makes has no inferred type, so
    // the nodes after it stay as they are (the LayerNorm and Pow, which also read f32 constants,
    // are counted as kept).
    assert_eq!(find("Identity").inputs[0], "r");
    for op in ["Relu", "Identity", "LayerNormalization", "Pow"] {
        assert!(c.kept.contains(&(op.to_string(), 1)), "{op}: {c:?}");
    }
    assert_eq!(find("LayerNormalization").inputs[0], "h");
    // Nothing f32 to convert: no conversion.
    let ints = Model::for_test(
        vec![node("Shape", &["x"], &["s"])],
        vec![info("x", &[2])],
        vec![info("s", &[1])],
        HashMap::new(),
    );
    assert!(convert(&ints.graph, DType::F16, &[]).unwrap().is_none());
    assert!(convert(&mlp().graph, DType::F32, &[]).is_err());
}

/// A layer norm written out (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add) on
/// activations of a few hundred, as older exporters write it: the squares pass f16's range.
fn layer_norm_by_hand() -> Model {
    let inits: HashMap<String, Arc<Value>> = [
        ("two", Tensor::from_f32(&[], vec![2.0]).unwrap()),
        ("eps", Tensor::from_f32(&[], vec![1e-5]).unwrap()),
        ("gamma", tensor(&[64], 5)),
    ]
    .into_iter()
    .map(|(k, t)| (k.to_string(), Arc::new(Value::Tensor(t))))
    .collect();
    let mean = |x: &str, y: &str| {
        let mut n = node("ReduceMean", &[x], &[y]);
        n.attrs.insert("axes".into(), Attr::Ints(vec![-1]));
        n
    };
    Model::for_test(
        vec![
            mean("x", "mu"),
            node("Sub", &["x", "mu"], &["d"]),
            node("Pow", &["d", "two"], &["sq"]),
            mean("sq", "var"),
            node("Add", &["var", "eps"], &["ve"]),
            node("Sqrt", &["ve"], &["sd"]),
            node("Div", &["d", "sd"], &["nx"]),
            node("Mul", &["nx", "gamma"], &["y"]),
        ],
        vec![info("x", &[4, 64])],
        vec![info("y", &[4, 64])],
        inits,
    )
}

#[test]
fn a_kept_computation_continues_in_f32_until_it_meets_a_half() {
    let m = layer_norm_by_hand();
    let x = tensor(&[4, 64], 11).to_f64_vec().unwrap();
    let x = Tensor::from_f64s(DType::F32, &[4, 64], x.iter().map(|v| v * 900.0).collect()).unwrap();
    let run_graph = |g: Graph| {
        let model = Model {
            graph: g,
            ..m.clone()
        };
        Session::from_model(model, SessionOptions::default())
            .unwrap()
            .run(vec![("x".into(), Value::Tensor(x.clone()))])
            .unwrap()
    };
    let want = run_graph(m.graph.clone());
    let (g, c) = convert(&m.graph, DType::F16, &[]).unwrap().unwrap();
    // Pow, then the ReduceMean, Add and Sqrt that continue it; Div reads a half (d) and converts.
    assert_eq!(
        c.kept,
        vec![
            ("Add".to_string(), 1),
            ("Pow".to_string(), 1),
            ("ReduceMean".to_string(), 1),
            ("Sqrt".to_string(), 1)
        ]
    );
    let d = deviation(&want, &run_graph(g))[0].1;
    assert!(d < 1e-2, "{d:e}");
    // Without the rule the variance's ReduceMean sums the squares in f16: they overflow, and the
    // output is far off (the check the rule must pass is the one this broken variant fails).
    let (g, _) = convert_with(&m.graph, DType::F16, &[], false)
        .unwrap()
        .unwrap();
    let d = deviation(&want, &run_graph(g))[0].1;
    // (NaN counts as seen: the deviation says the outputs are not comparable.)
    assert!(
        d.is_nan() || d >= 0.1,
        "f16 sums of squares past 65504 were not seen: {d:e}"
    );
}
