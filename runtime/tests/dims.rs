//! Declared dimensions: a real symbol (`n`) names one size every input declaring it must share; `?`
//! (PaddlePaddle's "unknown"), an empty dim_param and a negative dim_value are anonymous, each its
//! own size.
mod common;

use common::*;
use quorum::inputs::Rng;
use quorum::ir::{Dim, ValueType};
use quorum::proto::{self, tensor_shape_proto::dimension::Value as D};
use quorum::{Error, Session, SessionOptions, Tensor, Value};

/// A [rows, 3] f32 type whose first dimension is `d`.
fn rows_type(d: Option<D>) -> proto::TypeProto {
    let mut t = tensor_type(1, &[1, 3]);
    if let Some(proto::type_proto::Value::TensorType(tt)) = &mut t.value {
        tt.shape.as_mut().unwrap().dim[0].value = d;
    }
    t
}

/// `y = Concat(a, b, axis 0)`, with `a` and `b` declared [d, 3].
fn concat_model(d: Option<D>) -> Session {
    let mut cat = node("Concat", &["a", "b"], &["y"]);
    cat.attribute.push(proto::AttributeProto {
        name: Some("axis".into()),
        r#type: Some(proto::attribute_proto::AttributeType::Int as i32),
        i: Some(0),
        ..Default::default()
    });
    let m = model(
        vec![cat],
        vec![
            value_info("a", rows_type(d.clone())),
            value_info("b", rows_type(d.clone())),
        ],
        vec![value_info("y", rows_type(d))],
        vec![],
        13,
    );
    Session::from_bytes(&bytes(&m), SessionOptions::default()).unwrap()
}

fn random(rows: usize, rng: &mut Rng) -> Tensor {
    Tensor::from_f32(
        &[rows, 3],
        (0..rows * 3).map(|_| rng.uniform() as f32 * 4.0).collect(),
    )
    .unwrap()
}

/// Runs `s` on a [2, 3] `a` and a [5, 3] `b` of seeded random values.
fn run_2_and_5(s: &Session) -> quorum::Result<(Tensor, Tensor, Tensor)> {
    let mut rng = Rng::new(15);
    let (a, b) = (random(2, &mut rng), random(5, &mut rng));
    let out = s.run(vec![
        ("a".into(), Value::Tensor(a.clone())),
        ("b".into(), Value::Tensor(b.clone())),
    ])?;
    let y = out.into_iter().next().unwrap().1.into_tensor().unwrap();
    Ok((a, b, y))
}

#[test]
fn anonymous_dims_on_two_inputs_take_different_sizes() {
    for (what, d) in [
        ("'?'", Some(D::DimParam("?".into()))),
        ("an empty dim_param", Some(D::DimParam(String::new()))),
        ("dim_value -1", Some(D::DimValue(-1))),
        ("no value", None),
    ] {
        let s = concat_model(d);
        assert_eq!(
            s.model().graph.inputs[0].ty,
            ValueType::Tensor {
                dtype: Some(quorum::DType::F32),
                shape: Some(vec![Dim::Unknown, Dim::Fixed(3)])
            },
            "{what}"
        );
        let (a, b, y) = run_2_and_5(&s).unwrap_or_else(|e| panic!("{what}: {e}"));
        let (a, b) = (a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
        assert_eq!(y.shape(), [7, 3], "{what}");
        assert_eq!(y.to_f64_vec().unwrap(), [a, b].concat(), "{what}");
    }
}

#[test]
fn a_real_symbol_must_still_agree_across_inputs() {
    let s = concat_model(Some(D::DimParam("n".into())));
    assert_eq!(
        s.model().graph.inputs[0].ty,
        ValueType::Tensor {
            dtype: Some(quorum::DType::F32),
            shape: Some(vec![Dim::Symbol("n".into()), Dim::Fixed(3)])
        }
    );
    let e = run_2_and_5(&s).unwrap_err();
    assert!(
        matches!(&e, Error::Input { msg, .. } if msg.contains("dim 'n' is 5 here but 2")),
        "{e}"
    );
    // The same symbol bound to one size runs.
    let mut rng = Rng::new(3);
    let (a, b) = (random(4, &mut rng), random(4, &mut rng));
    let out = s
        .run(vec![("a".into(), a.into()), ("b".into(), b.into())])
        .unwrap();
    assert_eq!(out[0].1.as_tensor().unwrap().shape(), [8, 3]);
}

#[test]
fn a_fixed_dim_is_still_checked() {
    let s = concat_model(Some(D::DimValue(2)));
    let e = run_2_and_5(&s).unwrap_err();
    assert!(
        matches!(&e, Error::Input { name, .. } if name == "b"),
        "{e}"
    );
}

/// The shape PaddlePaddle's exporter writes: one input with "?" on two axes, run at two different
/// sizes (it was refused with "dim '?' is 320 here but 1 in input 'x'").
#[test]
fn one_input_with_question_marks_on_two_axes_of_different_sizes_runs() {
    let mut t = tensor_type(1, &[1, 32, 1]);
    if let Some(proto::type_proto::Value::TensorType(tt)) = &mut t.value {
        let dims = &mut tt.shape.as_mut().unwrap().dim;
        dims[0].value = Some(D::DimParam("?".into()));
        dims[2].value = Some(D::DimParam("?".into()));
    }
    let m = model(
        vec![node("Relu", &["x"], &["y"])],
        vec![value_info("x", t.clone())],
        vec![value_info("y", t)],
        vec![],
        13,
    );
    let s = Session::from_bytes(&bytes(&m), SessionOptions::default()).unwrap();
    let mut rng = Rng::new(320);
    let v: Vec<f32> = (0..2 * 32 * 5).map(|_| rng.uniform() as f32).collect();
    let x = Tensor::from_f32(&[2, 32, 5], v.clone()).unwrap();
    let out = s.run(vec![("x".into(), x.into())]).unwrap();
    let y = out[0].1.as_tensor().unwrap();
    assert_eq!(y.shape(), [2, 32, 5]);
    let want: Vec<f64> = v.iter().map(|&a| a.max(0.0) as f64).collect();
    assert_eq!(y.to_f64_vec().unwrap(), want);
}
