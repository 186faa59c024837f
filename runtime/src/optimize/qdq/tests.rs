//! The `qdq-pair` rewrite: which QuantizeLinear → DequantizeLinear pairs become a
//! QuantizeDequantize (and then a FusedConv's activation), which stay, and the rewritten session's
//! outputs equal to the unrewritten one's bit for bit; the comparison is shown to catch a fused pair
//! given the wrong zero point.
use crate::ir::{Attr, Model, Node};
use crate::optimize::tests::{check, first_difference, model, node, session, wrongly_rewritten};
use crate::tensor::{DType, Tensor};

fn scalar(v: f32) -> Tensor {
    Tensor::from_f32(&[], vec![v]).unwrap()
}

/// Zero points of shape `shape`, all `z`, of type u8 or i8.
fn zero_points(d: DType, shape: &[usize], z: i32) -> Tensor {
    let shape = ndarray::IxDyn(shape);
    match d {
        DType::U8 => Tensor::U8(ndarray::ArrayD::from_elem(shape, z as u8)),
        _ => Tensor::I8(ndarray::ArrayD::from_elem(shape, z as i8)),
    }
}

/// `x` → QuantizeLinear(scale `s`, zero point `z` if given) → `q` → DequantizeLinear → `out`.
fn pair(tag: &str, x: &str, out: &str, zero: bool) -> [Node; 2] {
    let (s, z, q) = (format!("s{tag}"), format!("z{tag}"), format!("q{tag}"));
    let mut qi = vec![x, s.as_str()];
    let mut di = vec![q.as_str(), s.as_str()];
    if zero {
        qi.push(&z);
        di.push(&z);
    }
    [
        node(&format!("quant{tag}"), "QuantizeLinear", &qi, &[&q]),
        node(&format!("dequant{tag}"), "DequantizeLinear", &di, &[out]),
    ]
}

/// Conv → pair A (u8, zero point 128, scale 0.1: the Conv's outputs reach past both ends) →
/// Relu → pair B (i8, zero point −3) → `z`, or without zero points (u8 0) when `zero` is false.
fn quantized(zero: bool) -> Model {
    let mut tail = Vec::new();
    tail.extend(pair("a", "y", "ya", zero));
    tail.push(node("relu", "Relu", &["ya"], &["r"]));
    tail.extend(pair("b", "r", "z", zero));
    let extra = vec![
        ("sa", scalar(0.1)),
        ("za", zero_points(DType::U8, &[], 128)),
        ("sb", scalar(0.0731)),
        ("zb", zero_points(DType::I8, &[], -3)),
    ];
    model(tail, &["z"], extra)
}

fn passes(done: &[crate::optimize::Rewrite]) -> Vec<&str> {
    done.iter().map(|r| r.pass).collect()
}

#[test]
fn pairs_fuse_and_the_conv_takes_its_pair_bit_for_bit() {
    for zero in [true, false] {
        let (done, ops) = check(&quantized(zero));
        assert_eq!(
            passes(&done),
            ["qdq-pair", "qdq-pair", "conv-activation"],
            "zero points: {zero}"
        );
        assert_eq!(
            ops,
            [
                "com.quorum::FusedConv",
                "Relu",
                "com.quorum::QuantizeDequantize"
            ]
        );
    }
}

/// Left as they are: a quantized value with a second reader, one that is a graph output, a
/// per-channel scale, and a DequantizeLinear whose zero point's type differs (the pair's own
/// kernels refuse it at run time).
#[test]
fn pairs_stay_where_the_8_bit_value_is_needed_or_the_scale_is_not_one_value() {
    // Read twice: by the DequantizeLinear and by a Cast.
    let mut m = quantized(true);
    m.graph.nodes.push(node("cast", "Cast", &["qa"], &["qa_f"]));
    m.graph
        .nodes
        .last_mut()
        .unwrap()
        .attrs
        .insert("to".into(), Attr::Int(1));
    m.graph
        .outputs
        .push(crate::optimize::tests::info("qa_f", &[1, 4, 8, 8]));
    let (done, _) = check(&m);
    assert_eq!(passes(&done), ["qdq-pair"], "{done:?}");
    assert!(done[0].detail.contains("quantb"));

    // A graph output.
    let mut m = quantized(true);
    let mut out = crate::optimize::tests::info("qa", &[1, 4, 8, 8]);
    if let crate::ir::ValueType::Tensor { dtype, .. } = &mut out.ty {
        *dtype = Some(DType::U8);
    }
    m.graph.outputs.push(out);
    let (done, _) = check(&m);
    assert_eq!(passes(&done), ["qdq-pair"], "{done:?}");

    // Per-channel scales on both pairs (axis 1, four channels).
    let mut m = quantized(true);
    for (k, v) in [("sa", 0.1f32), ("sb", 0.0731)] {
        let t = Tensor::from_f32(&[4], vec![v, v * 2.0, v, v * 0.5]).unwrap();
        m.graph.initializers.insert(
            k.into(),
            std::sync::Arc::new(crate::tensor::Value::Tensor(t)),
        );
    }
    for (k, d) in [("za", DType::U8), ("zb", DType::I8)] {
        let t = zero_points(d, &[4], 3);
        m.graph.initializers.insert(
            k.into(),
            std::sync::Arc::new(crate::tensor::Value::Tensor(t)),
        );
    }
    let (done, _) = check(&m);
    assert!(done.iter().all(|r| r.pass != "qdq-pair"), "{done:?}");
}

/// The comparison catches a fused pair whose zero point is off by one level.
#[test]
fn the_comparison_catches_a_pair_fused_with_the_wrong_zero_point() {
    let m = quantized(true);
    let plain = session(&m, false);
    let wrong = wrongly_rewritten(&m, |g| {
        let n = g
            .nodes
            .iter_mut()
            .find(|n| n.op_type == "QuantizeDequantize")
            .expect("a fused pair");
        let Some(Attr::Floats(p)) = n.attrs.get_mut("params") else {
            panic!("no params")
        };
        p[1] += 1.0;
    });
    assert!(first_difference(&plain, &wrong).is_some());
    // And the same change in the FusedConv's activation.
    let wrong = wrongly_rewritten(&m, |g| {
        let n = crate::optimize::tests::fused_conv(g);
        let Some(Attr::Floats(p)) = n.attrs.get_mut("activation_params") else {
            panic!("no activation_params")
        };
        p[1] += 1.0;
    });
    assert!(first_difference(&plain, &wrong).is_some());
}
