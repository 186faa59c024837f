//! Ops whose outputs are a constant fill, their input passed through, or their input's shape:
//! ConstantOfShape, Dropout where it is deterministic (inference, or training with ratio 0),
//! CastLike (this oracle's Cast, to the element type of input 1), Shape and Size.
use super::{elementwise, input, opt_input, output};
use crate::{DType, NodeSpec, OracleError, Output, Value};

const OPS: &[&str] = &["ConstantOfShape", "Dropout", "CastLike", "Shape", "Size"];

/// The most elements a ConstantOfShape output may have here (each is an f64 plus its magnitude, 16
/// bytes: 4 GiB at the limit). Light models build their weights this way: VGG-19's first classifier
/// weight is a ConstantOfShape of [4096, 25088], 102,760,448 elements, which the device computed and
/// verification must judge (2²⁶ left it unsettled on the H200). A shape beyond a tensor the device
/// could hold is refused rather than allocated; the allocation itself is asked for fallibly.
const MAX_FILL: usize = 1 << 28;

pub(super) fn covers(op: &str) -> bool {
    OPS.contains(&op)
}

pub(super) fn supports(node: &NodeSpec) -> Result<(), String> {
    let op = node.op_type.as_str();
    let first = match op {
        "ConstantOfShape" => 9,
        "CastLike" => 15,
        _ => 1,
    };
    if node.opset < first {
        return Err(format!("{op} exists from opset {first}"));
    }
    let most = if op == "Dropout" { 2 } else { 1 };
    if node.num_outputs > most {
        return Err(format!(
            "{op} has at most {most} output(s), {} requested",
            node.num_outputs
        ));
    }
    if op == "Dropout" && node.opset < 7 {
        // Dropout-1 and -6 train unless is_test is set; the ratio attribute says how much.
        let is_test = node.int("is_test", 0).map_err(|e| e.to_string())?;
        let ratio = node.float("ratio", 0.5).map_err(|e| e.to_string())?;
        if is_test == 0 && ratio != 0.0 {
            return Err(format!(
                "Dropout-{} with is_test = 0 and ratio {ratio} draws a random mask",
                node.opset
            ));
        }
    }
    Ok(())
}

pub(super) fn evaluate(
    node: &NodeSpec,
    inputs: &[Option<Value>],
) -> Result<Vec<Output>, OracleError> {
    match node.op_type.as_str() {
        "ConstantOfShape" => constant_of_shape(node, inputs),
        "Dropout" => dropout(node, inputs),
        "Shape" => shape_of(node, inputs),
        "Size" => {
            let n = input(node, inputs, 0)?.len() as f64;
            Ok(vec![output(DType::I64, vec![], vec![n], vec![0.0])?])
        }
        _ => Ok(vec![elementwise::cast_to(
            input(node, inputs, 0)?,
            input(node, inputs, 1)?.dtype,
        )?]),
    }
}

/// "Takes a tensor as input and outputs an 1D int64 tensor containing the shape of the input", from
/// opset 15 only the dims from `start` to `end` (negative: counted from the back; clamped to
/// [0, rank]; an empty slice when start ≥ end).
fn shape_of(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let rank = x.shape.len() as i64;
    let place = |v: i64| -> usize {
        let v = if v < 0 { v + rank } else { v };
        v.max(0).min(rank) as usize
    };
    let start = place(node.int("start", 0)?);
    let end = place(node.int("end", rank)?);
    let mut dims = Vec::new();
    let mut d = start;
    while d < end {
        dims.push(x.shape[d] as f64);
        d += 1;
    }
    let n = dims.len();
    Ok(vec![output(DType::I64, vec![n], dims, vec![0.0; n])?])
}

/// "Generate a tensor with given value and shape": the shape is a 1-D int64 tensor of non-negative
/// dims (empty: a scalar), the value a one-element tensor (float32 0 when absent).
fn constant_of_shape(
    node: &NodeSpec,
    inputs: &[Option<Value>],
) -> Result<Vec<Output>, OracleError> {
    let s = input(node, inputs, 0)?;
    if s.dtype != DType::I64 || s.shape.len() != 1 {
        return Err(OracleError::Invalid(format!(
            "ConstantOfShape takes a 1-D int64 shape, got {:?}{:?}",
            s.dtype, s.shape
        )));
    }
    let mut dims = Vec::with_capacity(s.len());
    let mut count: usize = 1;
    for &d in &s.data {
        if !(d >= 0.0 && d.fract() == 0.0 && d <= usize::MAX as f64) {
            return Err(OracleError::Invalid(format!(
                "ConstantOfShape dims must be non-negative integers, got {:?}",
                s.data
            )));
        }
        dims.push(d as usize);
        count = count.saturating_mul(d as usize);
    }
    // A zero dim empties the tensor whatever the others say.
    if dims.contains(&0) {
        count = 0;
    }
    if count > MAX_FILL {
        return Err(OracleError::Unsupported(format!(
            "ConstantOfShape of shape {dims:?}: more than {MAX_FILL} elements"
        )));
    }
    let (dtype, v) = match node.tensor("value")? {
        None => (DType::F32, 0.0),
        Some(t) if t.len() == 1 => (t.dtype, t.data[0]),
        Some(t) => {
            return Err(OracleError::Invalid(format!(
                "ConstantOfShape value must hold one element, got shape {:?}",
                t.shape
            )));
        }
    };
    let mut data: Vec<f64> = Vec::new();
    let mut mag: Vec<f64> = Vec::new();
    if data.try_reserve_exact(count).is_err() || mag.try_reserve_exact(count).is_err() {
        return Err(OracleError::Unsupported(format!(
            "ConstantOfShape of shape {dims:?}: no memory for {count} elements here"
        )));
    }
    data.resize(count, v);
    mag.resize(count, v.abs());
    Ok(vec![output(dtype, dims, data, mag)?])
}

/// The single element of Dropout's scalar input `i` (`ratio` or `training_mode`), if given.
fn scalar_input(
    inputs: &[Option<Value>],
    i: usize,
    name: &str,
) -> Result<Option<f64>, OracleError> {
    match opt_input(inputs, i) {
        None => Ok(None),
        Some(v) if v.len() == 1 => Ok(Some(v.data[0])),
        Some(v) => Err(OracleError::Invalid(format!(
            "Dropout {name} must be a scalar, got shape {:?}",
            v.shape
        ))),
    }
}

/// Dropout. Opsets 1 and 6: training unless `is_test` = 1, ratio an attribute. Opsets 7 to 11: no
/// mode, inference ("during testing nothing needs to be done"), ratio an attribute. From 12:
/// `ratio` (default 0.5) and `training_mode` (default false) are optional inputs. In training,
/// output = scale * data * mask with scale = 1 / (1 - ratio): with ratio 0 every element is kept
/// and scale is 1, so that case is the identity too. The mask ("true: kept") is in X's type before
/// opset 10, bool from 10.
fn dropout(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    if !x.dtype.is_float() {
        return Err(OracleError::Invalid(format!(
            "Dropout takes a floating-point input, got {:?}",
            x.dtype
        )));
    }
    let (ratio, training) = if node.opset >= 12 {
        let ratio = scalar_input(inputs, 1, "ratio")?.unwrap_or(0.5);
        let training = scalar_input(inputs, 2, "training_mode")?.unwrap_or(0.0) != 0.0;
        (ratio, training)
    } else if node.opset >= 7 {
        (node.float("ratio", 0.5)?, false)
    } else {
        (node.float("ratio", 0.5)?, node.int("is_test", 0)? == 0)
    };
    if training && ratio != 0.0 {
        return Err(OracleError::Unsupported(format!(
            "training-mode Dropout with ratio {ratio} draws a random mask"
        )));
    }
    let n = x.len();
    let mut y = Vec::with_capacity(n);
    let mut y_mag = Vec::with_capacity(n);
    for i in 0..n {
        y.push(x.data[i]);
        y_mag.push(x.data[i].abs());
    }
    let mut outs = vec![output(x.dtype, x.shape.clone(), y, y_mag)?];
    if node.num_outputs >= 2 {
        let mask_type = if node.opset >= 10 {
            DType::Bool
        } else {
            x.dtype
        };
        outs.push(output(
            mask_type,
            x.shape.clone(),
            vec![1.0; n],
            vec![1.0; n],
        )?);
    }
    Ok(outs)
}

#[cfg(test)]
mod tests {
    use super::super::Reference;
    use super::super::testutil::*;
    use crate::{Attr, DType, Oracle, OracleError, Value};

    fn v(dtype: DType, shape: Vec<usize>, data: Vec<f64>) -> Option<Value> {
        Some(Value::new(dtype, shape, data).unwrap())
    }

    #[test]
    fn shape_and_size_read_the_input_shape() {
        let mut rng = SplitMix64(11);
        let data: Vec<f64> = (0..24).map(|_| rng.unit() - 0.5).collect();
        let x = v(DType::F32, vec![2, 3, 4], data);
        let all = Reference
            .evaluate(&node("Shape", 13, &[]), std::slice::from_ref(&x))
            .unwrap();
        assert_eq!(all[0].value.dtype, DType::I64);
        assert_eq!(all[0].value.shape, vec![3]);
        assert_eq!(all[0].value.data, vec![2.0, 3.0, 4.0]);
        for (start, end, want) in [
            (1, None, vec![3.0, 4.0]),
            (-1, None, vec![4.0]),
            (0, Some(-1), vec![2.0, 3.0]),
            (-10, Some(10), vec![2.0, 3.0, 4.0]),
            (2, Some(1), vec![]),
        ] {
            let mut attrs = vec![("start", Attr::Int(start))];
            if let Some(e) = end {
                attrs.push(("end", Attr::Int(e)));
            }
            let out = Reference
                .evaluate(&node("Shape", 15, &attrs), std::slice::from_ref(&x))
                .unwrap();
            assert_eq!(out[0].value.data, want, "start {start} end {end:?}");
            assert_eq!(out[0].value.shape, vec![want.len()]);
        }
        let size = Reference.evaluate(&node("Size", 13, &[]), &[x]).unwrap();
        assert_eq!(size[0].value.shape, Vec::<usize>::new());
        assert_eq!(size[0].value.data, vec![24.0]);
    }

    #[test]
    fn constant_of_shape_fills_with_the_value() {
        let shape = v(DType::I64, vec![2], vec![2.0, 3.0]);
        let n = node("ConstantOfShape", 9, &[]);
        let out = Reference
            .evaluate(&n, std::slice::from_ref(&shape))
            .unwrap();
        assert_eq!(out[0].value.dtype, DType::F32);
        assert_eq!(out[0].value.shape, vec![2, 3]);
        assert_eq!(out[0].value.data, vec![0.0; 6]);
        let mut rng = SplitMix64(5);
        let fill = rng.unit() * 7.0;
        let value = Value::new(DType::F64, vec![1], vec![fill]).unwrap();
        let n = node("ConstantOfShape", 20, &[("value", Attr::Tensor(value))]);
        let out = Reference.evaluate(&n, &[shape]).unwrap();
        assert_eq!(out[0].value.dtype, DType::F64);
        assert_eq!(out[0].value.data, vec![fill; 6]);
        assert_eq!(out[0].magnitude, vec![fill.abs(); 6]);
        // An empty shape gives a scalar; a zero dim an empty tensor.
        let value = Value::new(DType::I32, vec![1], vec![-4.0]).unwrap();
        let n = node("ConstantOfShape", 9, &[("value", Attr::Tensor(value))]);
        let out = Reference
            .evaluate(&n, &[v(DType::I64, vec![0], vec![])])
            .unwrap();
        assert_eq!(
            (out[0].value.shape.clone(), out[0].value.data.clone()),
            (vec![], vec![-4.0])
        );
        let out = Reference
            .evaluate(&n, &[v(DType::I64, vec![3], vec![4.0, 0.0, 1e18])])
            .unwrap();
        assert_eq!(out[0].value.shape, vec![4, 0, 1_000_000_000_000_000_000]);
        assert!(out[0].value.data.is_empty());
    }

    #[test]
    fn constant_of_shape_rejects_malformed_input() {
        let n = node("ConstantOfShape", 9, &[]);
        for bad in [
            v(DType::I64, vec![2], vec![2.0, -1.0]),
            v(DType::I64, vec![1, 2], vec![2.0, 1.0]),
            v(DType::F32, vec![1], vec![2.0]),
            None,
        ] {
            assert!(matches!(
                Reference.evaluate(&n, &[bad]),
                Err(OracleError::Invalid(_))
            ));
        }
        let two = Value::new(DType::F32, vec![2], vec![1.0, 2.0]).unwrap();
        let n = node("ConstantOfShape", 9, &[("value", Attr::Tensor(two))]);
        let shape = v(DType::I64, vec![1], vec![3.0]);
        assert!(matches!(
            Reference.evaluate(&n, std::slice::from_ref(&shape)),
            Err(OracleError::Invalid(_))
        ));
        let n = node("ConstantOfShape", 9, &[("value", Attr::Float(1.0))]);
        assert!(matches!(
            Reference.evaluate(&n, &[shape]),
            Err(OracleError::Invalid(_))
        ));
        let huge = v(DType::I64, vec![2], vec![1e9, 1e9]);
        assert!(matches!(
            Reference.evaluate(&node("ConstantOfShape", 9, &[]), &[huge]),
            Err(OracleError::Unsupported(_))
        ));
    }

    #[test]
    fn dropout_inference_is_the_identity_with_a_full_mask() {
        let mut rng = SplitMix64(17);
        let xs = rng.vec(6);
        let x = v(DType::F32, vec![2, 3], xs.clone());
        let ratio = v(DType::F32, vec![], vec![0.3]);
        let yes = v(DType::Bool, vec![], vec![1.0]);
        let no = v(DType::Bool, vec![], vec![0.0]);
        let zero = v(DType::F64, vec![], vec![0.0]);
        // (opset, attributes, inputs after X, mask type)
        type Form<'a> = (i64, Vec<(&'a str, Attr)>, Vec<Option<Value>>, DType);
        let forms: Vec<Form> = vec![
            (6, vec![("is_test", Attr::Int(1))], vec![], DType::F32),
            (6, vec![("ratio", Attr::Float(0.0))], vec![], DType::F32),
            (7, vec![("ratio", Attr::Float(0.7))], vec![], DType::F32),
            (10, vec![], vec![], DType::Bool),
            (12, vec![], vec![ratio.clone()], DType::Bool),
            (13, vec![], vec![ratio.clone(), no], DType::Bool),
            (
                22,
                vec![("seed", Attr::Int(3))],
                vec![None, None],
                DType::Bool,
            ),
            (22, vec![], vec![zero, yes], DType::Bool),
        ];
        for (opset, attrs, rest, mask_type) in forms {
            let mut n = node("Dropout", opset, &attrs);
            n.num_outputs = 2;
            let mut ins = vec![x.clone()];
            ins.extend(rest);
            let out = Reference.evaluate(&n, &ins).unwrap();
            assert_eq!(out.len(), 2, "opset {opset}");
            assert_eq!(out[0].value.data, xs, "opset {opset}");
            assert_eq!(out[0].value.dtype, DType::F32);
            assert_eq!(out[1].value.dtype, mask_type, "opset {opset}");
            assert_eq!(out[1].value.shape, vec![2, 3]);
            assert_eq!(out[1].value.data, vec![1.0; 6]);
            n.num_outputs = 1;
            assert_eq!(Reference.evaluate(&n, &ins).unwrap().len(), 1);
        }
    }

    #[test]
    fn dropout_training_with_a_ratio_is_declined() {
        let x = v(DType::F32, vec![3], vec![1.0, -2.0, 3.0]);
        let n = node("Dropout", 6, &[]);
        assert!(Reference.supports(&n).is_err());
        assert!(matches!(
            Reference.evaluate(&n, std::slice::from_ref(&x)),
            Err(OracleError::Unsupported(_))
        ));
        let n = node("Dropout", 13, &[]);
        let yes = v(DType::Bool, vec![], vec![1.0]);
        assert!(Reference.supports(&n).is_ok());
        // training_mode true with the default ratio (0.5) and with an explicit one.
        for ratio in [None, v(DType::F32, vec![], vec![0.25])] {
            assert!(matches!(
                Reference.evaluate(&n, &[x.clone(), ratio, yes.clone()]),
                Err(OracleError::Unsupported(_))
            ));
        }
        let int_x = v(DType::I32, vec![1], vec![1.0]);
        assert!(matches!(
            Reference.evaluate(&n, &[int_x]),
            Err(OracleError::Invalid(_))
        ));
        let two = v(DType::F32, vec![2], vec![0.1, 0.2]);
        assert!(matches!(
            Reference.evaluate(&n, &[x, two]),
            Err(OracleError::Invalid(_))
        ));
    }

    #[test]
    fn cast_like_casts_to_the_second_inputs_type() {
        let x = v(DType::F32, vec![4], vec![2.7, -1.5, 0.0, 300.0]);
        let like = |d| v(d, vec![1], vec![0.0]);
        let n = node("CastLike", 15, &[]);
        let out = Reference
            .evaluate(&n, &[x.clone(), like(DType::I32)])
            .unwrap();
        assert_eq!(out[0].value.dtype, DType::I32);
        assert_eq!(out[0].value.data, vec![2.0, -1.0, 0.0, 300.0]);
        let out = Reference
            .evaluate(&n, &[x.clone(), like(DType::Bool)])
            .unwrap();
        assert_eq!(out[0].value.data, vec![1.0, 1.0, 0.0, 1.0]);
        let out = Reference
            .evaluate(&n, &[x.clone(), like(DType::F16)])
            .unwrap();
        assert_eq!(out[0].value.dtype, DType::F16);
        assert_eq!(out[0].value.data, vec![2.69921875, -1.5, 0.0, 300.0]);
        // The same as Cast with `to` naming that type.
        let cast = node("Cast", 19, &[("to", Attr::Int(10))]);
        assert_eq!(
            Reference.evaluate(&cast, std::slice::from_ref(&x)).unwrap(),
            Reference
                .evaluate(&n, &[x.clone(), like(DType::F16)])
                .unwrap()
        );
        // 300 is out of int8's range: undefined, as for Cast.
        assert!(matches!(
            Reference.evaluate(&n, &[x.clone(), like(DType::I8)]),
            Err(OracleError::Unsupported(_))
        ));
        assert!(matches!(
            Reference.evaluate(&n, &[x]),
            Err(OracleError::Invalid(_))
        ));
        assert!(Reference.supports(&node("CastLike", 13, &[])).is_err());
    }
}
