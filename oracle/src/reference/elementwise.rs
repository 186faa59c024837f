//! Unary, binary and variadic elementwise ops, Where, Clip and Cast.
use super::parallel::{elements, try_elements};
use super::scalar_ops;
use super::special::{erf, erfc, max_nan, min_nan, softplus};
use super::{broadcast_index, broadcast_shapes, input, opt_input, output, unravel, wrap_int};
use crate::{DType, NodeSpec, OracleError, Output, Value};

const UNARY: &[&str] = &[
    "Abs",
    "Neg",
    "Ceil",
    "Floor",
    "Round",
    "Sign",
    "Reciprocal",
    "Sqrt",
    "Exp",
    "Log",
    "Erf",
    "Sin",
    "Cos",
    "Tan",
    "Tanh",
    "Sigmoid",
    "Relu",
    "LeakyRelu",
    "Elu",
    "Selu",
    "Celu",
    "HardSigmoid",
    "HardSwish",
    "Softplus",
    "Softsign",
    "Gelu",
    "Mish",
    "ThresholdedRelu",
    "Not",
    "IsNaN",
    "IsInf",
    "Identity",
];
const BINARY: &[&str] = &[
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Mod",
    "PRelu",
    "Equal",
    "Less",
    "LessOrEqual",
    "Greater",
    "GreaterOrEqual",
    "And",
    "Or",
    "Xor",
    "BitShift",
];
const VARIADIC: &[&str] = &["Sum", "Mean", "Min", "Max"];

pub(super) fn covers(op: &str) -> bool {
    UNARY.contains(&op)
        || BINARY.contains(&op)
        || VARIADIC.contains(&op)
        || matches!(op, "Where" | "Clip" | "Cast")
}

/// ONNX TensorProto data type number to a dtype the oracle holds.
pub(super) fn dtype_from_onnx(t: i64) -> Option<DType> {
    Some(match t {
        1 => DType::F32,
        2 => DType::U8,
        3 => DType::I8,
        4 => DType::U16,
        5 => DType::I16,
        6 => DType::I32,
        7 => DType::I64,
        9 => DType::Bool,
        10 => DType::F16,
        11 => DType::F64,
        12 => DType::U32,
        13 => DType::U64,
        16 => DType::BF16,
        _ => return None,
    })
}

pub(super) fn supports(node: &NodeSpec) -> Result<(), String> {
    let op = node.op_type.as_str();
    let e = |x: OracleError| x.to_string();
    match op {
        "Cast" => {
            let to = node.int("to", -1).map_err(e)?;
            if dtype_from_onnx(to).is_none() {
                return Err(format!(
                    "Cast to ONNX type {to} is not covered (strings, complex, float8, int4)"
                ));
            }
        }
        "Gelu" => {
            let a = node.string("approximate", "none").map_err(e)?;
            if a != "none" && a != "tanh" {
                return Err(format!("Gelu approximate='{a}' is not covered"));
            }
        }
        "BitShift" => {
            let d = node.string("direction", "").map_err(e)?;
            if d != "LEFT" && d != "RIGHT" {
                return Err(format!("BitShift direction '{d}' is not covered"));
            }
        }
        "Mod" => {
            node.int("fmod", 0).map_err(e)?;
        }
        _ => {}
    }
    if node.num_outputs > 1 {
        return Err(format!(
            "{op} has one output, {} requested",
            node.num_outputs
        ));
    }
    Ok(())
}

pub(super) fn evaluate(
    node: &NodeSpec,
    inputs: &[Option<Value>],
) -> Result<Vec<Output>, OracleError> {
    let op = node.op_type.as_str();
    let out = if UNARY.contains(&op) {
        unary(node, input(node, inputs, 0)?)?
    } else if op == "PRelu" {
        let x = input(node, inputs, 0)?;
        let slope = scalar_ops::prelu_slope(node.opset, x, input(node, inputs, 1)?);
        // Unidirectional: the slope broadcasts onto X, never X onto the slope.
        if broadcast_shapes(&[&x.shape, &slope.shape])? != x.shape {
            return Err(OracleError::Invalid(format!(
                "PRelu slope {:?} does not broadcast onto X {:?}",
                slope.shape, x.shape
            )));
        }
        binary(node, x, &slope)?
    } else if BINARY.contains(&op) {
        binary(node, input(node, inputs, 0)?, input(node, inputs, 1)?)?
    } else if VARIADIC.contains(&op) {
        let vals: Vec<&Value> = inputs.iter().flatten().collect();
        if vals.is_empty() {
            return Err(OracleError::Invalid(format!(
                "{op} needs at least one input"
            )));
        }
        variadic(op, &vals)?
    } else {
        match op {
            "Where" => where_(
                input(node, inputs, 0)?,
                input(node, inputs, 1)?,
                input(node, inputs, 2)?,
            )?,
            "Clip" => clip(node, inputs)?,
            "Cast" => cast(node, input(node, inputs, 0)?)?,
            _ => return Err(OracleError::Unsupported(format!("{op} is not elementwise"))),
        }
    };
    Ok(vec![out])
}

fn unary(node: &NodeSpec, x: &Value) -> Result<Output, OracleError> {
    let op = node.op_type.as_str();
    // Float attributes are f32 in ONNX: the defaults are the f32 values (0.2f32 is not 0.2).
    // Selu's constants are written as the exact decimal expansions of their f32 values.
    #[allow(clippy::excessive_precision)]
    let alpha_default = match op {
        "LeakyRelu" => 0.01f32 as f64,
        "HardSigmoid" => 0.2f32 as f64,
        "Selu" => 1.673_263_192_176_818_847_656_25,
        _ => 1.0,
    };
    let alpha = node.float("alpha", alpha_default)?;
    let beta = node.float("beta", 0.5)?;
    #[allow(clippy::excessive_precision)] // the exact decimal expansion of Selu's f32 gamma
    let gamma = node.float("gamma", 1.050_701_022_148_132_324_218_75)?;
    let detect_neg = node.int("detect_negative", 1)? != 0;
    let detect_pos = node.int("detect_positive", 1)? != 0;
    let approx_tanh = op == "Gelu" && node.string("approximate", "none")? == "tanh";
    let is_int = !x.dtype.is_float() && x.dtype != DType::Bool;
    let f = |v: f64| -> f64 {
        match op {
            "Abs" => v.abs(),
            "Neg" => -v,
            "Ceil" => v.ceil(),
            "Floor" => v.floor(),
            "Round" => v.round_ties_even(),
            "Sign" => {
                if v > 0.0 {
                    1.0
                } else if v < 0.0 {
                    -1.0
                } else {
                    v
                }
            }
            "Reciprocal" => 1.0 / v,
            "Sqrt" => v.sqrt(),
            "Exp" => v.exp(),
            "Log" => v.ln(),
            "Erf" => erf(v),
            "Sin" => v.sin(),
            "Cos" => v.cos(),
            "Tan" => v.tan(),
            "Tanh" => v.tanh(),
            "Sigmoid" => 1.0 / (1.0 + (-v).exp()),
            "Relu" => {
                if v.is_nan() {
                    v
                } else {
                    v.max(0.0)
                }
            } // max(0, NaN) is NaN in ONNX (numpy maximum); f64::max drops it
            "LeakyRelu" => {
                if v < 0.0 {
                    alpha * v
                } else {
                    v
                }
            }
            // e^x - 1 of the Elu, Selu and Celu formulas through exp_m1: formed as e^x minus 1 it
            // cancels for small |x| (x = -2.4e-5 leaves it 1e-11 off).
            "Elu" => {
                if v < 0.0 {
                    alpha * v.exp_m1()
                } else {
                    v
                }
            }
            "Selu" => {
                if v <= 0.0 {
                    // gamma * (alpha * e^x - alpha)
                    gamma * (alpha * v.exp_m1())
                } else {
                    gamma * v
                }
            }
            // max / min as the formulas mean them: NaN in, NaN out.
            "Celu" => max_nan(0.0, v) + min_nan(0.0, alpha * (v / alpha).exp_m1()),
            "HardSigmoid" => max_nan(0.0, min_nan(1.0, alpha * v + beta)),
            "HardSwish" => v * max_nan(0.0, min_nan(1.0, v / 6.0 + 0.5)),
            "Softplus" => softplus(v),
            "Softsign" => v / (1.0 + v.abs()),
            "Gelu" => {
                // 0.5 x (1 + tanh(u)) and 0.5 x (1 + erf(x / sqrt 2)), with the sums formed without
                // cancellation where they are small (x very negative): 1 + tanh(u) = 2 / (1 + e^(-2u))
                // and 1 + erf(z) = erfc(-z).
                if approx_tanh {
                    let c = (2.0 / std::f64::consts::PI).sqrt();
                    let u = c * (v + 0.044715 * v * v * v);
                    0.5 * v * (2.0 / (1.0 + (-2.0 * u).exp()))
                } else {
                    0.5 * v * erfc(-v / std::f64::consts::SQRT_2)
                }
            }
            "Mish" => v * softplus(v).tanh(),
            "ThresholdedRelu" => {
                if v > alpha {
                    v
                } else {
                    0.0
                }
            }
            "Not" => {
                if v != 0.0 {
                    0.0
                } else {
                    1.0
                }
            }
            "IsNaN" => v.is_nan() as u8 as f64,
            "IsInf" => {
                ((v == f64::INFINITY && detect_pos) || (v == f64::NEG_INFINITY && detect_neg)) as u8
                    as f64
            }
            "Identity" => v,
            _ => f64::NAN,
        }
    };
    let out_dtype = if matches!(op, "IsNaN" | "IsInf") {
        DType::Bool
    } else {
        x.dtype
    };
    if is_int && (op == "Reciprocal" || op == "Sqrt") {
        return Err(OracleError::Unsupported(format!("{op} on integer input")));
    }
    let n = x.data.len();
    let (mut data, mut mag) = (vec![0.0; n], vec![0.0; n]);
    elements(&mut data, &mut mag, |first, d, m| {
        let xs = &x.data[first..first + d.len()];
        for ((&v, r), g) in xs.iter().zip(d).zip(m) {
            *r = if is_int {
                wrap_int(f(v), out_dtype)
            } else {
                f(v)
            };
            // The magnitude of the terms combined: |result|, except where the formula adds terms
            // that can cancel (alpha x + beta; x / 6 + 0.5, then times x).
            *g = match op {
                "HardSigmoid" => (alpha * v).abs() + beta.abs(),
                "HardSwish" => v.abs() * (v.abs() / 6.0 + 0.5),
                _ => r.abs(),
            };
        }
    });
    output(out_dtype, x.shape.clone(), data, mag)
}

fn binary(node: &NodeSpec, a: &Value, b: &Value) -> Result<Output, OracleError> {
    let op = node.op_type.as_str();
    let shape = broadcast_shapes(&[&a.shape, &b.shape])?;
    let n: usize = shape.iter().product();
    let is_int = !a.dtype.is_float() && a.dtype != DType::Bool;
    let fmod = node.int("fmod", 0)? != 0;
    let left = op == "BitShift" && node.string("direction", "")? == "LEFT";
    let out_dtype = match op {
        "Equal" | "Less" | "LessOrEqual" | "Greater" | "GreaterOrEqual" | "And" | "Or" | "Xor" => {
            DType::Bool
        }
        _ => a.dtype,
    };
    let (mut data, mut mag) = (vec![0.0; n], vec![0.0; n]);
    try_elements(&mut data, &mut mag, |first, d, g| {
        for (flat, (dv, gv)) in (first..).zip(d.iter_mut().zip(g)) {
            let idx = unravel(flat, &shape);
            let x = a.data[broadcast_index(&idx, &a.shape)];
            let y = b.data[broadcast_index(&idx, &b.shape)];
            let b2f = |c: bool| if c { 1.0 } else { 0.0 };
            let r = match op {
                "Add" => x + y,
                "Sub" => x - y,
                "Mul" => x * y,
                "Div" => {
                    if is_int {
                        if y == 0.0 {
                            return Err(OracleError::Invalid("integer Div by zero".into()));
                        }
                        (x / y).trunc()
                    } else {
                        x / y
                    }
                }
                "Pow" => x.powf(y),
                "Mod" => {
                    if fmod {
                        x % y // C fmod: A - trunc(A / B) * B, sign of the dividend
                    } else if a.dtype.is_float() {
                        scalar_ops::mod_floor_float(x, y)
                    } else {
                        scalar_ops::mod_floor_int(x, y)?
                    }
                }
                "PRelu" => {
                    if x < 0.0 {
                        y * x
                    } else {
                        x
                    }
                }
                "Equal" => b2f(x == y),
                "Less" => b2f(x < y),
                "LessOrEqual" => b2f(x <= y),
                "Greater" => b2f(x > y),
                "GreaterOrEqual" => b2f(x >= y),
                "And" => b2f(x != 0.0 && y != 0.0),
                "Or" => b2f(x != 0.0 || y != 0.0),
                "Xor" => b2f((x != 0.0) != (y != 0.0)),
                "BitShift" => scalar_ops::bitshift(x, y, a.dtype, left)?,
                _ => return Err(OracleError::Unsupported(format!("{op} is not binary"))),
            };
            let r = if is_int && out_dtype == a.dtype {
                wrap_int(r, out_dtype)
            } else {
                r
            };
            *dv = r;
            *gv = if matches!(op, "Add" | "Sub") {
                x.abs() + y.abs()
            } else {
                r.abs()
            };
        }
        Ok(())
    })?;
    output(out_dtype, shape, data, mag)
}

fn variadic(op: &str, vals: &[&Value]) -> Result<Output, OracleError> {
    let shapes: Vec<&[usize]> = vals.iter().map(|v| v.shape.as_slice()).collect();
    let shape = broadcast_shapes(&shapes)?;
    let n: usize = shape.iter().product();
    let dt = vals[0].dtype;
    let (mut data, mut mag) = (vec![0.0; n], vec![0.0; n]);
    try_elements(&mut data, &mut mag, |first, d, g| {
        for (flat, (dv, gv)) in (first..).zip(d.iter_mut().zip(g)) {
            let idx = unravel(flat, &shape);
            let xs: Vec<f64> = vals
                .iter()
                .map(|v| v.data[broadcast_index(&idx, &v.shape)])
                .collect();
            let abs_sum: f64 = xs.iter().map(|x| x.abs()).sum();
            let (r, m) = match op {
                "Sum" => (xs.iter().sum::<f64>(), abs_sum),
                "Mean" => (
                    xs.iter().sum::<f64>() / xs.len() as f64,
                    abs_sum / xs.len() as f64,
                ),
                "Max" | "Min" => {
                    let mut r = xs[0];
                    for &x in &xs[1..] {
                        if r.is_nan() || x.is_nan() {
                            r = f64::NAN;
                        } else if (op == "Max" && x > r) || (op == "Min" && x < r) {
                            r = x;
                        }
                    }
                    (r, r.abs())
                }
                _ => return Err(OracleError::Unsupported(format!("{op} is not variadic"))),
            };
            *dv = wrap_int(r, dt);
            *gv = m;
        }
        Ok(())
    })?;
    output(dt, shape, data, mag)
}

fn where_(c: &Value, x: &Value, y: &Value) -> Result<Output, OracleError> {
    let shape = broadcast_shapes(&[&c.shape, &x.shape, &y.shape])?;
    let n: usize = shape.iter().product();
    let (mut data, mut mag) = (vec![0.0; n], vec![0.0; n]);
    elements(&mut data, &mut mag, |first, d, g| {
        for (flat, (dv, gv)) in (first..).zip(d.iter_mut().zip(g)) {
            let idx = unravel(flat, &shape);
            let cond = c.data[broadcast_index(&idx, &c.shape)] != 0.0;
            *dv = if cond {
                x.data[broadcast_index(&idx, &x.shape)]
            } else {
                y.data[broadcast_index(&idx, &y.shape)]
            };
            *gv = dv.abs();
        }
    });
    output(x.dtype, shape, data, mag)
}

fn clip(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Output, OracleError> {
    let x = input(node, inputs, 0)?;
    let (lo, hi) = if node.opset < 11 {
        (
            // Clip-6: "min (default: -3.402823e+38)", "max (default: 3.402823e+38)".
            node.float("min", -3.402_823_466_385_288_6e38)?,
            node.float("max", 3.402_823_466_385_288_6e38)?,
        )
    } else {
        let scalar = |i: usize, d: f64| -> Result<f64, OracleError> {
            match opt_input(inputs, i) {
                None => Ok(d),
                Some(v) if v.data.len() == 1 => Ok(v.data[0]),
                Some(v) => Err(OracleError::Invalid(format!(
                    "Clip bound must be a scalar, got shape {:?}",
                    v.shape
                ))),
            }
        };
        (scalar(1, f64::NEG_INFINITY)?, scalar(2, f64::INFINITY)?)
    };
    // Spec: y = min(max_value, max(min_value, x)); when min > max every element becomes max.
    let n = x.data.len();
    let (mut data, mut mag) = (vec![0.0; n], vec![0.0; n]);
    elements(&mut data, &mut mag, |first, d, g| {
        let xs = &x.data[first..first + d.len()];
        for ((&v, dv), gv) in xs.iter().zip(d).zip(g) {
            *dv = if v.is_nan() {
                v
            } else {
                let t = if v < lo { lo } else { v };
                if t > hi { hi } else { t }
            };
            *gv = dv.abs();
        }
    });
    output(x.dtype, x.shape.clone(), data, mag)
}

fn cast(node: &NodeSpec, x: &Value) -> Result<Output, OracleError> {
    let to_num = node.int("to", -1)?;
    let to = dtype_from_onnx(to_num).ok_or_else(|| {
        OracleError::Unsupported(format!("Cast to ONNX type {to_num} is not covered"))
    })?;
    cast_to(x, to)
}

/// Cast of `x` to `to` (also CastLike's, with `to` the type of its second input).
pub(super) fn cast_to(x: &Value, to: DType) -> Result<Output, OracleError> {
    let n = x.data.len();
    let (mut data, mut mag) = (vec![0.0; n], vec![0.0; n]);
    try_elements(&mut data, &mut mag, |first, d, g| {
        let xs = &x.data[first..first + d.len()];
        for ((&v, dv), gv) in xs.iter().zip(d).zip(g) {
            *dv = scalar_ops::cast_one(v, x.dtype, to)?;
            *gv = dv.abs();
        }
        Ok(())
    })?;
    output(to, x.shape.clone(), data, mag)
}

#[cfg(test)]
mod tests {
    use super::super::Reference;
    use super::super::testutil::*;
    use crate::{Attr, DType, Oracle, Value};

    fn f32v(shape: Vec<usize>, data: Vec<f64>) -> Option<Value> {
        Some(Value::new(DType::F32, shape, data).unwrap())
    }

    #[test]
    fn add_broadcast_by_hand() {
        let n = node("Add", 14, &[]);
        let a = f32v(vec![2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let b = f32v(vec![3], vec![10.0, -20.0, 30.0]);
        let out = Reference.evaluate(&n, &[a, b]).unwrap();
        assert_eq!(out[0].value.shape, vec![2, 3]);
        assert_all_close(&out[0].value.data, &[11.0, -18.0, 33.0, 14.0, -15.0, 36.0]);
        assert_all_close(&out[0].magnitude, &[11.0, 22.0, 33.0, 14.0, 25.0, 36.0]);
    }

    #[test]
    fn broadcast_both_ways_random() {
        let mut rng = SplitMix64(7);
        let a = rng.vec(3);
        let b = rng.vec(4);
        let n = node("Mul", 14, &[]);
        let out = Reference
            .evaluate(
                &n,
                &[f32v(vec![3, 1], a.clone()), f32v(vec![1, 4], b.clone())],
            )
            .unwrap();
        assert_eq!(out[0].value.shape, vec![3, 4]);
        for (i, &ai) in a.iter().enumerate() {
            for (j, &bj) in b.iter().enumerate() {
                assert!(close(out[0].value.data[i * 4 + j], ai * bj));
            }
        }
    }

    #[test]
    fn comparisons_are_bool() {
        let n = node("Less", 13, &[]);
        let out = Reference
            .evaluate(
                &n,
                &[f32v(vec![3], vec![1.0, 2.0, 3.0]), f32v(vec![], vec![2.0])],
            )
            .unwrap();
        assert_eq!(out[0].value.dtype, DType::Bool);
        assert_eq!(out[0].value.data, vec![1.0, 0.0, 0.0]);
        assert_eq!(out[0].magnitude, vec![0.0; 3]);
    }

    #[test]
    fn unary_by_hand() {
        let x = f32v(vec![4], vec![-2.0, -0.5, 0.5, 2.5]);
        let get = |op: &str, attrs: &[(&str, Attr)]| {
            Reference
                .evaluate(&node(op, 13, attrs), std::slice::from_ref(&x))
                .unwrap()[0]
                .value
                .data
                .clone()
        };
        assert_all_close(&get("Relu", &[]), &[0.0, 0.0, 0.5, 2.5]);
        assert_all_close(
            &get("LeakyRelu", &[("alpha", Attr::Float(0.1))]),
            &[-0.2, -0.05, 0.5, 2.5],
        );
        assert_all_close(&get("Round", &[]), &[-2.0, -0.0, 0.0, 2.0]);
        // The default alpha is the f32 attribute value 0.2f32 (0.20000000298...), not 0.2.
        let a = 0.2f32 as f64;
        assert_all_close(
            &get("HardSigmoid", &[]),
            &[0.5 - 2.0 * a, 0.5 - 0.5 * a, 0.5 + 0.5 * a, 1.0],
        );
        assert_all_close(&get("ThresholdedRelu", &[]), &[0.0, 0.0, 0.0, 2.5]);
        assert_all_close(
            &get("Softsign", &[]),
            &[-2.0 / 3.0, -0.5 / 1.5, 0.5 / 1.5, 2.5 / 3.5],
        );
        assert_all_close(&get("Sign", &[]), &[-1.0, -1.0, 1.0, 1.0]);
    }

    #[test]
    fn mod_signs() {
        let i = |d: Vec<f64>| Some(Value::new(DType::I32, vec![4], d).unwrap());
        let a = i(vec![-4.0, 7.0, 5.0, -7.0]);
        let b = i(vec![3.0, -3.0, 3.0, -3.0]);
        let out = Reference
            .evaluate(&node("Mod", 13, &[]), &[a.clone(), b.clone()])
            .unwrap();
        assert_eq!(out[0].value.data, vec![2.0, -2.0, 2.0, -1.0]);
        let out = Reference
            .evaluate(&node("Mod", 13, &[("fmod", Attr::Int(1))]), &[a, b])
            .unwrap();
        assert_eq!(out[0].value.data, vec![-1.0, 1.0, 2.0, -1.0]);
    }

    #[test]
    fn where_sum_mean_clip_cast() {
        let c = Some(Value::new(DType::Bool, vec![2], vec![1.0, 0.0]).unwrap());
        let out = Reference
            .evaluate(
                &node("Where", 16, &[]),
                &[
                    c,
                    f32v(vec![2, 1], vec![1.0, 2.0]),
                    f32v(vec![2], vec![-1.0, -2.0]),
                ],
            )
            .unwrap();
        assert_eq!(out[0].value.data, vec![1.0, -2.0, 2.0, -2.0]);
        let out = Reference
            .evaluate(
                &node("Mean", 13, &[]),
                &[
                    f32v(vec![2], vec![1.0, -3.0]),
                    f32v(vec![1], vec![2.0]),
                    f32v(vec![2], vec![0.0, 4.0]),
                ],
            )
            .unwrap();
        assert_all_close(&out[0].value.data, &[1.0, 1.0]);
        assert_all_close(&out[0].magnitude, &[1.0, 3.0]);
        let out = Reference
            .evaluate(
                &node("Clip", 13, &[]),
                &[
                    f32v(vec![3], vec![-5.0, 0.5, 5.0]),
                    f32v(vec![], vec![-1.0]),
                    None,
                ],
            )
            .unwrap();
        assert_eq!(out[0].value.data, vec![-1.0, 0.5, 5.0]);
        let out = Reference
            .evaluate(
                &node("Cast", 13, &[("to", Attr::Int(6))]),
                &[f32v(vec![3], vec![-1.7, 0.2, 2.9])],
            )
            .unwrap();
        assert_eq!(out[0].value.dtype, DType::I32);
        assert_eq!(out[0].value.data, vec![-1.0, 0.0, 2.0]);
        let out = Reference
            .evaluate(
                &node("Cast", 13, &[("to", Attr::Int(9))]),
                &[f32v(vec![3], vec![-1.7, 0.0, 2.9])],
            )
            .unwrap();
        assert_eq!(out[0].value.data, vec![1.0, 0.0, 1.0]);
    }

    #[test]
    fn gelu_random_against_formula() {
        let mut rng = SplitMix64(11);
        let xs: Vec<f64> = rng.vec(16).iter().map(|v| v * 3.0).collect();
        let out = Reference
            .evaluate(&node("Gelu", 20, &[]), &[f32v(vec![16], xs.clone())])
            .unwrap();
        for (g, x) in out[0].value.data.iter().zip(&xs) {
            let want = x * 0.5 * (1.0 + super::erf(x / 2f64.sqrt()));
            assert!(close(*g, want));
        }
        let x = 0.7f64;
        // Sigmoid by hand.
        let out = Reference
            .evaluate(&node("Sigmoid", 13, &[]), &[f32v(vec![1], vec![x])])
            .unwrap();
        assert!(close(out[0].value.data[0], 1.0 / (1.0 + (-x).exp())));
    }

    #[test]
    fn activations_against_spec_values() {
        // Values from the ONNX specification's reference evaluator at x = [-1.5, 0.3, 2.0] (it works
        // partly in f32, hence the 1e-6 tolerance).
        let x = Some(Value::new(DType::F64, vec![3], vec![-1.5, 0.3, 2.0]).unwrap());
        // (op, attributes, expected outputs)
        type Case<'a> = (&'a str, &'a [(&'a str, Attr)], [f64; 3]);
        let cases: &[Case] = &[
            (
                "Selu",
                &[],
                [-1.3658143576366604, 0.31521030664443966, 2.1014020442962646],
            ),
            (
                "Celu",
                &[("alpha", Attr::Float(0.5))],
                [-0.475106465816068, 0.3, 2.0],
            ),
            (
                "HardSwish",
                &[],
                [-0.3749999888241291, 0.1650000004470348, 1.6666666865348816],
            ),
            (
                "Mish",
                &[],
                [
                    -0.29809974216680674,
                    0.20800137234811503,
                    1.9439589595339946,
                ],
            ),
            (
                "Softplus",
                &[],
                [0.2014132779827524, 0.8543552444685272, 2.1269280110429727],
            ),
            (
                "Gelu",
                &[("approximate", Attr::String("tanh".into()))],
                [
                    -0.10042842877952132,
                    0.18537092285132223,
                    1.9545976898445463,
                ],
            ),
            ("Elu", &[], [-0.7768698398515702, 0.3, 2.0]),
            (
                "Erf",
                &[],
                [-0.9661051630973816, 0.32862675189971924, 0.9953222870826721],
            ),
            (
                "Tan",
                &[],
                [-14.101419947171719, 0.3093362496096232, -2.185039863261519],
            ),
        ];
        for (op, attrs, want) in cases {
            let out = Reference
                .evaluate(&node(op, 20, attrs), std::slice::from_ref(&x))
                .unwrap();
            for (g, w) in out[0].value.data.iter().zip(want) {
                assert!(
                    (g - w).abs() < 1e-6 * (1.0 + w.abs()),
                    "{op}: got {g}, want {w}"
                );
            }
        }
    }

    #[test]
    fn unsupported_refused() {
        assert!(
            Reference
                .supports(&node("Cast", 13, &[("to", Attr::Int(8))]))
                .is_err()
        );
        assert!(
            Reference
                .supports(&node(
                    "Gelu",
                    20,
                    &[("approximate", Attr::String("x".into()))]
                ))
                .is_err()
        );
        assert!(Reference.supports(&node("Add", 14, &[])).is_ok());
    }
}
