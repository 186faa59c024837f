//! ConstantOfShape (the value replicated outward one axis at a time), Dropout where no element is
//! dropped, CastLike (this oracle's conversion, to the element type of input 1), and the shape
//! readers Shape and Size.
use super::elementwise::cast_to;
use super::*;

pub(super) const OPS: &[&str] = &["ConstantOfShape", "Dropout", "CastLike", "Shape", "Size"];

/// The largest ConstantOfShape output this oracle builds, in elements: 2²⁸, 4 GiB of values and
/// magnitudes, above the [4096, 25088] weight a light VGG-19 builds this way.
const FILL_LIMIT: u128 = 1 << 28;

/// How a Dropout of a given opset learns whether it trains.
#[derive(Clone, Copy, PartialEq)]
enum Era {
    /// Opsets 1 and 6: the `is_test` attribute (0, training, by default) and a `ratio` attribute.
    TestFlag,
    /// Opsets 7 to 11: no mode at all; a runtime runs them as in testing.
    Implicit,
    /// From opset 12: the optional inputs `ratio` (default 0.5) and `training_mode` (default false).
    Inputs,
}

fn era(opset: i64) -> Era {
    match opset {
        ..=6 => Era::TestFlag,
        7..=11 => Era::Implicit,
        _ => Era::Inputs,
    }
}

pub(super) fn check(node: &NodeSpec) -> Result<(), String> {
    let (since, outputs) = match node.op_type.as_str() {
        "ConstantOfShape" => (9, 1),
        "CastLike" => (15, 1),
        "Shape" | "Size" => (1, 1),
        _ => (1, 2),
    };
    if node.opset < since {
        return Err(format!(
            "{} before opset {since} does not exist",
            node.op_type
        ));
    }
    if node.num_outputs > outputs {
        return Err(format!(
            "{} gives {outputs} output(s), not {}",
            node.op_type, node.num_outputs
        ));
    }
    if node.op_type == "Dropout" && era(node.opset) == Era::TestFlag {
        let p = legacy_drop_probability(node).map_err(|e| e.to_string())?;
        if p != 0.0 {
            return Err(format!(
                "Dropout-{} in training (is_test = 0) drops with probability {p}: random",
                node.opset
            ));
        }
    }
    Ok(())
}

pub(super) fn eval(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    match node.op_type.as_str() {
        "ConstantOfShape" => constant_of_shape(node, inputs),
        "Dropout" => dropout(node, inputs),
        "Shape" => shape(node, inputs),
        "Size" => {
            let count: usize = input(node, inputs, 0)?.shape.iter().product();
            Ok(vec![make_output(
                DType::I64,
                vec![],
                vec![count as f64],
                vec![0.0],
            )?])
        }
        _ => {
            let like = input(node, inputs, 1)?;
            Ok(vec![cast_to(input(node, inputs, 0)?, like.dtype)?])
        }
    }
}

/// The input's dims whose axis lies in [start, end) once both are made non-negative (adding the
/// rank) — an axis outside that window, and every axis when the window is empty or inverted, is
/// left out. The attributes exist from opset 15; before it the whole shape.
fn shape(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let dims = &input(node, inputs, 0)?.shape;
    let r = dims.len() as i64;
    let (mut lo, mut hi) = (0, r);
    if node.opset >= 15 {
        lo = node.int("start", 0)?;
        hi = node.int("end", r)?;
    }
    lo += if lo < 0 { r } else { 0 };
    hi += if hi < 0 { r } else { 0 };
    let kept: Vec<f64> = dims
        .iter()
        .enumerate()
        .filter(|&(axis, _)| (axis as i64) >= lo && (axis as i64) < hi)
        .map(|(_, &d)| d as f64)
        .collect();
    let n = kept.len();
    Ok(vec![make_output(DType::I64, vec![n], kept, vec![0.0; n])?])
}

fn constant_of_shape(
    node: &NodeSpec,
    inputs: &[Option<Value>],
) -> Result<Vec<Output>, OracleError> {
    let spec = input(node, inputs, 0)?;
    if !(spec.dtype == DType::I64 && spec.shape.len() == 1) {
        return invalid(format!(
            "ConstantOfShape's shape input is a 1-D int64 tensor, not {:?} of shape {:?}",
            spec.dtype, spec.shape
        ));
    }
    let dims = spec
        .data
        .iter()
        .map(|&d| {
            if d.is_finite() && d >= 0.0 && d == d.floor() && d < 2f64.powi(63) {
                Ok(d as u64 as usize)
            } else {
                invalid(format!("ConstantOfShape dim {d} is not a size"))
            }
        })
        .collect::<Result<Vec<usize>, _>>()?;
    let elements = if dims.contains(&0) {
        Some(0)
    } else {
        dims.iter()
            .try_fold(1u128, |acc, &d| acc.checked_mul(d as u128))
    };
    if elements.is_none_or(|n| n > FILL_LIMIT) {
        return unsupported(format!(
            "ConstantOfShape {dims:?} is larger than this oracle builds ({FILL_LIMIT} elements)"
        ));
    }
    let (dtype, value) = match node.tensor("value")? {
        None => (DType::F32, 0.0),
        Some(t) => match t.data.as_slice() {
            [only] => (t.dtype, *only),
            _ => {
                return invalid(format!(
                    "ConstantOfShape's value holds {} elements, not one",
                    t.data.len()
                ));
            }
        },
    };
    // Innermost axis first: a row of `value`, then that row repeated along each outer axis (not when
    // a zero dim empties the tensor: the axes inside it may be of any length).
    let mut data = vec![value];
    if elements == Some(0) {
        data.clear();
    } else {
        for &d in dims.iter().rev() {
            data = data.repeat(d);
        }
    }
    let mag = data.iter().map(|v| v.abs()).collect();
    Ok(vec![make_output(dtype, dims, data, mag)?])
}

/// The one element of an optional scalar input, if the input is given.
fn scalar(inputs: &[Option<Value>], i: usize) -> Result<Option<f64>, OracleError> {
    opt_input(inputs, i)
        .map(|v| match v.data.as_slice() {
            [only] => Ok(*only),
            _ => invalid(format!(
                "Dropout input {i} must be a scalar, got {:?}",
                v.shape
            )),
        })
        .transpose()
}

/// Dropout-1/6: the probability of dropping an element, 0 in testing.
fn legacy_drop_probability(node: &NodeSpec) -> Result<f64, OracleError> {
    Ok(match node.int("is_test", 0)? {
        0 => node.float("ratio", 0.5)?,
        _ => 0.0,
    })
}

/// With drop probability 0 nothing is dropped and the kept elements are scaled by 1 / (1 - 0): the
/// output is the input and the mask all "kept". Any other probability draws a random mask.
fn dropout(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    if !matches!(x.dtype, DType::F16 | DType::BF16 | DType::F32 | DType::F64) {
        return invalid(format!("Dropout of a {:?} tensor", x.dtype));
    }
    let p = match era(node.opset) {
        Era::TestFlag => legacy_drop_probability(node)?,
        Era::Implicit => 0.0,
        Era::Inputs => {
            let ratio = scalar(inputs, 1)?;
            match scalar(inputs, 2)? {
                Some(t) if t != 0.0 => ratio.unwrap_or(0.5),
                _ => 0.0,
            }
        }
    };
    if p != 0.0 {
        return unsupported(format!(
            "Dropout in training mode with ratio {p}: the mask is random"
        ));
    }
    let copy = Output {
        value: x.clone(),
        magnitude: x.data.iter().map(|v| v.abs()).collect(),
    };
    if node.num_outputs < 2 {
        return Ok(vec![copy]);
    }
    // The mask took X's type until opset 10 made it bool.
    let mask_dtype = if node.opset < 10 {
        x.dtype
    } else {
        DType::Bool
    };
    let ones: Vec<f64> = x.data.iter().map(|_| 1.0).collect();
    let mask = make_output(mask_dtype, x.shape.clone(), ones.clone(), ones)?;
    Ok(vec![copy, mask])
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;
    use crate::Attr;

    #[test]
    fn shape_windows_and_size() {
        let x = typed(
            DType::F32,
            &[5, 1, 7, 2],
            (0..70).map(|i| i as f64 * 0.25 - 3.0).collect(),
        );
        let run = |opset: i64, attrs: Vec<(&'static str, Attr)>| {
            eval(&node("Shape", opset, attrs), std::slice::from_ref(&x)).unwrap()
        };
        let whole = run(13, vec![]);
        assert_eq!(whole[0].value.data, vec![5.0, 1.0, 7.0, 2.0]);
        assert_eq!(whole[0].value.dtype, DType::I64);
        let tail = run(15, vec![("start", Attr::Int(-2))]);
        assert_eq!(tail[0].value.data, vec![7.0, 2.0]);
        let mid = run(15, vec![("start", Attr::Int(1)), ("end", Attr::Int(-1))]);
        assert_eq!(mid[0].value.data, vec![1.0, 7.0]);
        let wide = run(15, vec![("start", Attr::Int(-9)), ("end", Attr::Int(9))]);
        assert_eq!(wide[0].value.data.len(), 4);
        let none = run(15, vec![("start", Attr::Int(3)), ("end", Attr::Int(1))]);
        assert_eq!(none[0].value.shape, vec![0]);
        let size = eval(&node("Size", 13, vec![]), std::slice::from_ref(&x)).unwrap();
        assert_eq!(size[0].value.data, vec![70.0]);
        assert!(size[0].value.shape.is_empty());
    }

    fn fill(value: Option<Value>, dims: &[f64]) -> Result<Vec<Output>, OracleError> {
        let attrs = value
            .map(|v| vec![("value", Attr::Tensor(v))])
            .unwrap_or_default();
        eval(
            &node("ConstantOfShape", 21, attrs),
            &[typed(DType::I64, &[dims.len()], dims.to_vec())],
        )
    }

    #[test]
    fn constant_of_shape_replicates_the_value() {
        let out = fill(None, &[3, 1, 2].map(|d| d as f64)).unwrap();
        assert_eq!(out[0].value.dtype, DType::F32);
        assert_eq!(out[0].value.shape, vec![3, 1, 2]);
        assert_eq!(out[0].value.data, vec![0.0; 6]);
        let mut r = SplitMix64(44);
        let x = r.unit() * 100.0;
        let v = Value::new(DType::F16, vec![1, 1], vec![x]).unwrap();
        let out = fill(Some(v), &[2.0, 2.0]).unwrap();
        assert_eq!(out[0].value.dtype, DType::F16);
        assert_eq!(out[0].value.data, vec![x; 4]);
        assert_eq!(out[0].magnitude, vec![x.abs(); 4]);
        let v = Value::new(DType::Bool, vec![1], vec![1.0]).unwrap();
        let out = fill(Some(v.clone()), &[]).unwrap();
        assert_eq!(out[0].value.shape, Vec::<usize>::new());
        assert_eq!(out[0].value.data, vec![1.0]);
        assert_eq!(out[0].magnitude, vec![0.0]);
        let out = fill(Some(v), &[5.0, 0.0, 9e18]).unwrap();
        assert!(out[0].value.data.is_empty());
    }

    #[test]
    fn constant_of_shape_errors() {
        assert!(matches!(
            fill(None, &[2.0, 0.5]),
            Err(OracleError::Invalid(_))
        ));
        assert!(matches!(fill(None, &[-3.0]), Err(OracleError::Invalid(_))));
        assert!(matches!(
            fill(None, &[1e6, 1e6, 1e6]),
            Err(OracleError::Unsupported(_))
        ));
        let two = Value::new(DType::I8, vec![2], vec![1.0, 2.0]).unwrap();
        assert!(matches!(
            fill(Some(two), &[2.0]),
            Err(OracleError::Invalid(_))
        ));
        let nd = node("ConstantOfShape", 9, vec![]);
        let matrix = typed(DType::I64, &[1, 1], vec![2.0]);
        assert!(matches!(eval(&nd, &[matrix]), Err(OracleError::Invalid(_))));
        let floats = typed(DType::F32, &[1], vec![2.0]);
        assert!(matches!(eval(&nd, &[floats]), Err(OracleError::Invalid(_))));
        assert!(matches!(eval(&nd, &[]), Err(OracleError::Invalid(_))));
    }

    #[test]
    fn dropout_eras() {
        let mut r = SplitMix64(8);
        let xs = r.values(10);
        let x = typed(DType::F64, &[5, 2], xs.clone());
        let on = typed(DType::Bool, &[], vec![1.0]);
        let off = typed(DType::Bool, &[], vec![0.0]);
        let ratio = |p: f64| typed(DType::F32, &[], vec![p]);
        let run = |opset: i64, attrs: Vec<(&str, Attr)>, rest: Vec<Option<Value>>| {
            let mut nd = node("Dropout", opset, attrs);
            nd.num_outputs = 2;
            let mut ins = vec![x.clone()];
            ins.extend(rest);
            check(&nd).map_err(OracleError::Unsupported)?;
            eval(&nd, &ins)
        };
        let kept = |out: Vec<Output>, mask: DType| {
            assert_eq!(out[0].value, x.clone().unwrap());
            assert_eq!(out[1].value.dtype, mask);
            assert!(out[1].value.data.iter().all(|&m| m == 1.0));
        };
        kept(
            run(1, vec![("is_test", Attr::Int(1))], vec![]).unwrap(),
            DType::F64,
        );
        kept(
            run(6, vec![("ratio", Attr::Float(0.0))], vec![]).unwrap(),
            DType::F64,
        );
        kept(run(9, vec![], vec![]).unwrap(), DType::F64);
        kept(
            run(11, vec![("ratio", Attr::Float(0.9))], vec![]).unwrap(),
            DType::Bool,
        );
        kept(run(12, vec![], vec![ratio(0.4), off]).unwrap(), DType::Bool);
        kept(run(13, vec![], vec![None, None]).unwrap(), DType::Bool);
        kept(
            run(22, vec![], vec![ratio(0.0), on.clone()]).unwrap(),
            DType::Bool,
        );
        for declined in [
            run(6, vec![], vec![]),
            run(13, vec![], vec![None, on.clone()]),
            run(22, vec![], vec![ratio(0.1), on]),
        ] {
            assert!(matches!(declined, Err(OracleError::Unsupported(_))));
        }
        let mut one = node("Dropout", 13, vec![]);
        one.num_outputs = 1;
        assert_eq!(eval(&one, std::slice::from_ref(&x)).unwrap().len(), 1);
        let ints = typed(DType::I64, &[2], vec![1.0, 2.0]);
        assert!(matches!(eval(&one, &[ints]), Err(OracleError::Invalid(_))));
        let wide = typed(DType::F32, &[2], vec![0.1, 0.2]);
        assert!(matches!(
            eval(&one, &[x, wide]),
            Err(OracleError::Invalid(_))
        ));
    }

    #[test]
    fn cast_like_follows_the_second_input() {
        let mut r = SplitMix64(61);
        let xs: Vec<f64> = r.values(8).iter().map(|v| v * 50.0).collect();
        let nd = node("CastLike", 19, vec![("saturate", Attr::Int(1))]);
        let like = |d: DType| typed(d, &[0], vec![]);
        let out = eval(&nd, &[f32v(&[2, 4], xs.clone()), like(DType::I16)]).unwrap();
        assert_eq!(out[0].value.dtype, DType::I16);
        assert_eq!(out[0].value.shape, vec![2, 4]);
        let want: Vec<f64> = xs.iter().map(|v| v.trunc()).collect();
        assert_eq!(out[0].value.data, want);
        let out = eval(&nd, &[f32v(&[2, 4], xs.clone()), like(DType::BF16)]).unwrap();
        for (g, x) in out[0].value.data.iter().zip(&xs) {
            assert!((g - x).abs() <= x.abs() * 2f64.powi(-8), "{g} vs {x}");
        }
        let cast = node("Cast", 19, vec![("to", Attr::Int(16))]);
        assert_eq!(
            super::super::elementwise::eval(&cast, &[f32v(&[2, 4], xs.clone())]).unwrap(),
            out
        );
        assert!(check(&node("CastLike", 14, vec![])).is_err());
        assert!(matches!(
            eval(&nd, &[f32v(&[1], vec![1.0])]),
            Err(OracleError::Invalid(_))
        ));
    }
}
