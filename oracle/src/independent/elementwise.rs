//! Unary, binary and variadic elementwise ops, Where, Clip and Cast.
//!
//! Broadcasting: each operand gets a precomputed index map from output flat index to operand flat index.
use super::arith::{erf, erfc, floor_mod, prelu, round_half_even, shift, sigmoid, softplus};
use super::parallel::{deal_elements, try_deal_elements};
use super::*;

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
const OTHER: &[&str] = &["Where", "Clip", "Cast"];

pub(super) const OPS: &[&str] = &[
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
    "Sum",
    "Mean",
    "Min",
    "Max",
    "Where",
    "Clip",
    "Cast",
];

pub(super) fn check(node: &NodeSpec) -> Result<(), String> {
    let op = node.op_type.as_str();
    match op {
        "Cast" => {
            let to = node.int("to", -1).map_err(|e| e.to_string())?;
            if dtype_from_onnx(to).is_none() {
                return Err(format!("Cast to element type {to} is not covered"));
            }
        }
        "Gelu" => {
            let a = node
                .string("approximate", "none")
                .map_err(|e| e.to_string())?;
            if a != "none" && a != "tanh" {
                return Err(format!("Gelu approximate='{a}' is not covered"));
            }
        }
        "BitShift" => {
            let d = node.string("direction", "").map_err(|e| e.to_string())?;
            if d != "LEFT" && d != "RIGHT" {
                return Err(format!("BitShift direction '{d}' is not covered"));
            }
        }
        _ => {}
    }
    Ok(())
}

pub(super) fn eval(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let op = node.op_type.as_str();
    if UNARY.contains(&op) {
        unary(node, inputs)
    } else if op == "PRelu" {
        prelu(node, inputs)
    } else if BINARY.contains(&op) {
        binary(node, inputs)
    } else if VARIADIC.contains(&op) {
        variadic(node, inputs)
    } else if OTHER.contains(&op) {
        match op {
            "Where" => where_op(node, inputs),
            "Clip" => clip(node, inputs),
            _ => cast(node, inputs),
        }
    } else {
        unsupported(format!("{op} is not elementwise"))
    }
}

fn unary(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let op = node.op_type.as_str();
    let f: Box<dyn Fn(f64) -> f64 + Sync> = match op {
        "Identity" => Box::new(|v| v),
        "Abs" => Box::new(f64::abs),
        "Neg" => Box::new(|v: f64| -v),
        "Ceil" => Box::new(f64::ceil),
        "Floor" => Box::new(f64::floor),
        "Round" => Box::new(round_half_even),
        "Sign" => Box::new(|v: f64| {
            if v > 0.0 {
                1.0
            } else if v < 0.0 {
                -1.0
            } else if v.is_nan() {
                v
            } else {
                0.0
            }
        }),
        "Reciprocal" => Box::new(|v: f64| 1.0 / v),
        "Sqrt" => Box::new(f64::sqrt),
        "Exp" => Box::new(f64::exp),
        "Log" => Box::new(f64::ln),
        "Erf" => Box::new(erf),
        "Sin" => Box::new(f64::sin),
        "Cos" => Box::new(f64::cos),
        "Tan" => Box::new(f64::tan),
        "Tanh" => Box::new(f64::tanh),
        "Sigmoid" => Box::new(sigmoid),
        "Relu" => Box::new(|v: f64| if v > 0.0 || v.is_nan() { v } else { 0.0 }),
        "LeakyRelu" => {
            let a = node.float("alpha", 0.01f32 as f64)?;
            Box::new(move |v: f64| if v < 0.0 { a * v } else { v })
        }
        "Elu" => {
            let a = node.float("alpha", 1.0)?;
            Box::new(move |v: f64| if v < 0.0 { a * v.exp_m1() } else { v })
        }
        "Selu" => {
            let a = node.float("alpha", 1.673_263_2_f32 as f64)?;
            let g = node.float("gamma", 1.050_701_f32 as f64)?;
            Box::new(move |v: f64| if v <= 0.0 { g * a * v.exp_m1() } else { g * v })
        }
        "Celu" => {
            // max(0, x) + min(0, a (e^(x/a) - 1)) is x for x > 0 and a (e^(x/a) - 1) otherwise, for
            // either sign of a; NaN stays NaN (the formula's max and min propagate it).
            let a = node.float("alpha", 1.0)?;
            Box::new(move |v: f64| {
                if v > 0.0 || v.is_nan() {
                    v
                } else {
                    a * (v / a).exp_m1()
                }
            })
        }
        "HardSigmoid" => {
            // Float attributes are f32 in ONNX: the default alpha is 0.2f32, not 0.2.
            let a = node.float("alpha", 0.2f32 as f64)?;
            let b = node.float("beta", 0.5)?;
            Box::new(move |v: f64| (a * v + b).clamp(0.0, 1.0))
        }
        "HardSwish" => Box::new(|v: f64| v * (v / 6.0 + 0.5).clamp(0.0, 1.0)),
        "Softplus" => Box::new(softplus),
        "Softsign" => Box::new(|v: f64| v / (1.0 + v.abs())),
        "Gelu" => {
            if node.string("approximate", "none")? == "tanh" {
                // 1 + tanh(u) directly where tanh(u) >= 0; where u < 0 it is 2 e^(2u) / (1 + e^(2u)),
                // which does not cancel as tanh(u) nears -1.
                let c = (2.0 / std::f64::consts::PI).sqrt();
                Box::new(move |v: f64| {
                    let u = c * (v + 0.044715 * v * v * v);
                    let one_plus_tanh = if u >= 0.0 {
                        1.0 + u.tanh()
                    } else {
                        let e = (2.0 * u).exp();
                        2.0 * e / (1.0 + e)
                    };
                    0.5 * v * one_plus_tanh
                })
            } else {
                Box::new(|v: f64| 0.5 * v * erfc(-v / std::f64::consts::SQRT_2))
            }
        }
        "Mish" => Box::new(|v: f64| v * softplus(v).tanh()),
        "ThresholdedRelu" => {
            let a = node.float("alpha", 1.0)?;
            Box::new(move |v: f64| if v > a { v } else { 0.0 })
        }
        "Not" => Box::new(|v: f64| if v != 0.0 { 0.0 } else { 1.0 }),
        "IsNaN" => Box::new(|v: f64| if v.is_nan() { 1.0 } else { 0.0 }),
        "IsInf" => {
            let neg = node.int("detect_negative", 1)? != 0;
            let pos = node.int("detect_positive", 1)? != 0;
            Box::new(move |v: f64| {
                if (v == f64::INFINITY && pos) || (v == f64::NEG_INFINITY && neg) {
                    1.0
                } else {
                    0.0
                }
            })
        }
        _ => return unsupported(format!("{op} is not unary")),
    };
    let dtype = match op {
        "Not" | "IsNaN" | "IsInf" => DType::Bool,
        _ => x.dtype,
    };
    // Magnitude: |result|, or the sum of the magnitudes of the terms where the op adds terms that may
    // cancel (HardSigmoid: alpha x + beta; HardSwish: x (x / 6 + 1/2)).
    let terms: Box<dyn Fn(f64, f64) -> f64 + Sync> = match op {
        "HardSigmoid" => {
            let a = node.float("alpha", 0.2f32 as f64)?;
            let b = node.float("beta", 0.5)?;
            Box::new(move |v: f64, _| a.abs() * v.abs() + b.abs())
        }
        "HardSwish" => Box::new(|v: f64, _| v.abs() * v.abs() / 6.0 + v.abs() * 0.5),
        _ => Box::new(|_, r: f64| r.abs()),
    };
    let (mut data, mut mag) = (vec![0.0; x.len()], vec![0.0; x.len()]);
    deal_elements(&mut data, &mut mag, |first, d, g| {
        let xs = &x.data[first..first + d.len()];
        for ((&v, r), m) in xs.iter().zip(d).zip(g) {
            *r = f(v);
            *m = terms(v, *r);
        }
    });
    Ok(vec![make_output(dtype, x.shape.clone(), data, mag)?])
}

pub(super) fn binary(
    node: &NodeSpec,
    inputs: &[Option<Value>],
) -> Result<Vec<Output>, OracleError> {
    let a = input(node, inputs, 0)?;
    let b = input(node, inputs, 1)?;
    let op = node.op_type.as_str();
    let shape = broadcast_shape(&[&a.shape, &b.shape])?;
    let ma = index_map(&a.shape, &shape);
    let mb = index_map(&b.shape, &shape);
    let is_int = int_bits(a.dtype).is_some();
    let out_dtype = match op {
        "Equal" | "Less" | "LessOrEqual" | "Greater" | "GreaterOrEqual" | "And" | "Or" | "Xor" => {
            DType::Bool
        }
        _ => a.dtype,
    };
    let fmod = node.int("fmod", 0)? != 0;
    let left = node.string("direction", "").unwrap_or_default() == "LEFT";
    let (mut data, mut mag) = (vec![0.0; ma.len()], vec![0.0; ma.len()]);
    try_deal_elements(&mut data, &mut mag, |first, d, g| {
        let pairs = ma[first..first + d.len()].iter().zip(&mb[first..]);
        for ((&ia, &ib), (dv, gv)) in pairs.zip(d.iter_mut().zip(g)) {
            let (x, y) = (a.data[ia], b.data[ib]);
            let r = match op {
                "Add" => x + y,
                "Sub" => x - y,
                "Mul" => x * y,
                "Div" => {
                    if is_int {
                        if y == 0.0 {
                            return invalid("integer division by zero");
                        }
                        (x / y).trunc()
                    } else {
                        x / y
                    }
                }
                "Pow" => {
                    let p = x.powf(y);
                    if is_int { p.trunc() } else { p }
                }
                "Mod" => {
                    if fmod {
                        x % y
                    } else if a.dtype.is_float() {
                        floor_mod(x, y)
                    } else {
                        if y == 0.0 {
                            return invalid("integer modulo by zero");
                        }
                        let (xi, yi) = (x as i128, y as i128);
                        let mut r = xi % yi;
                        if r != 0 && ((r < 0) != (yi < 0)) {
                            r += yi;
                        }
                        r as f64
                    }
                }
                "PRelu" => {
                    if x < 0.0 {
                        y * x
                    } else {
                        x
                    }
                }
                "Equal" => (x == y) as u8 as f64,
                "Less" => (x < y) as u8 as f64,
                "LessOrEqual" => (x <= y) as u8 as f64,
                "Greater" => (x > y) as u8 as f64,
                "GreaterOrEqual" => (x >= y) as u8 as f64,
                "And" => (x != 0.0 && y != 0.0) as u8 as f64,
                "Or" => (x != 0.0 || y != 0.0) as u8 as f64,
                "Xor" => ((x != 0.0) != (y != 0.0)) as u8 as f64,
                "BitShift" => shift(x, y, a.dtype, left)?,
                _ => return unsupported(format!("{op} is not binary")),
            };
            let r = if is_int && matches!(op, "Add" | "Sub" | "Mul" | "Pow") {
                wrap_int(a.dtype, r)
            } else {
                r
            };
            let m = match op {
                "Add" | "Sub" => x.abs() + y.abs(),
                _ => r.abs(),
            };
            *dv = r;
            *gv = m;
        }
        Ok(())
    })?;
    Ok(vec![make_output(out_dtype, shape, data, mag)?])
}

fn present(inputs: &[Option<Value>]) -> Vec<&Value> {
    inputs.iter().flatten().collect()
}

fn variadic(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let vals = present(inputs);
    if vals.is_empty() {
        return invalid(format!("{} needs at least one input", node.op_type));
    }
    let shapes: Vec<&[usize]> = vals.iter().map(|v| v.shape.as_slice()).collect();
    let shape = broadcast_shape(&shapes)?;
    let maps: Vec<Vec<usize>> = vals.iter().map(|v| index_map(&v.shape, &shape)).collect();
    let n_out: usize = shape.iter().product();
    let dtype = vals[0].dtype;
    let k = vals.len() as f64;
    let (mut data, mut mag) = (vec![0.0; n_out], vec![0.0; n_out]);
    try_deal_elements(&mut data, &mut mag, |first, d, g| {
        let mut terms = Vec::with_capacity(vals.len());
        for (o, (dv, gv)) in (first..).zip(d.iter_mut().zip(g)) {
            terms.clear();
            terms.extend(vals.iter().zip(&maps).map(|(v, m)| v.data[m[o]]));
            let abs: Vec<f64> = terms.iter().map(|t| t.abs()).collect();
            let (r, m) = match node.op_type.as_str() {
                "Sum" => (pairwise_sum(&terms), pairwise_sum(&abs)),
                "Mean" => (pairwise_sum(&terms) / k, pairwise_sum(&abs) / k),
                "Max" | "Min" => {
                    let want_max = node.op_type == "Max";
                    let mut best = terms[0];
                    for &t in &terms[1..] {
                        if best.is_nan() || t.is_nan() {
                            best = f64::NAN;
                        } else if (want_max && t > best) || (!want_max && t < best) {
                            best = t;
                        }
                    }
                    (best, best.abs())
                }
                other => return unsupported(format!("{other} is not variadic")),
            };
            let r = if node.op_type == "Sum" {
                wrap_int(dtype, r)
            } else {
                r
            };
            let r = if node.op_type == "Mean" && int_bits(dtype).is_some() {
                r.trunc()
            } else {
                r
            };
            *dv = r;
            *gv = m;
        }
        Ok(())
    })?;
    Ok(vec![make_output(dtype, shape, data, mag)?])
}

fn where_op(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let c = input(node, inputs, 0)?;
    let x = input(node, inputs, 1)?;
    let y = input(node, inputs, 2)?;
    let shape = broadcast_shape(&[&c.shape, &x.shape, &y.shape])?;
    let (mc, mx, my) = (
        index_map(&c.shape, &shape),
        index_map(&x.shape, &shape),
        index_map(&y.shape, &shape),
    );
    let (mut data, mut mag) = (vec![0.0; mc.len()], vec![0.0; mc.len()]);
    deal_elements(&mut data, &mut mag, |first, d, g| {
        for (o, (dv, gv)) in (first..).zip(d.iter_mut().zip(g)) {
            *dv = if c.data[mc[o]] != 0.0 {
                x.data[mx[o]]
            } else {
                y.data[my[o]]
            };
            *gv = dv.abs();
        }
    });
    Ok(vec![make_output(x.dtype, shape, data, mag)?])
}

fn scalar_of(v: &Value, what: &str) -> Result<f64, OracleError> {
    if v.data.len() != 1 {
        return invalid(format!(
            "Clip {what} must be a scalar, got shape {:?}",
            v.shape
        ));
    }
    Ok(v.data[0])
}

fn clip(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let (lo, hi) = if node.opset < 11 {
        (
            // Before opset 11 the bounds default to the largest finite f32 (attribute defaults).
            node.float("min", f32::MIN as f64)?,
            node.float("max", f32::MAX as f64)?,
        )
    } else {
        let lo = match opt_input(inputs, 1) {
            Some(v) => scalar_of(v, "min")?,
            None => f64::NEG_INFINITY,
        };
        let hi = match opt_input(inputs, 2) {
            Some(v) => scalar_of(v, "max")?,
            None => f64::INFINITY,
        };
        (lo, hi)
    };
    // min(max(x, lo), hi): when lo > hi everything becomes hi.
    let (data, mag) = map_elements(x, |v| if v.is_nan() { v } else { v.max(lo).min(hi) });
    Ok(vec![make_output(x.dtype, x.shape.clone(), data, mag)?])
}

/// Rounds `v` to a binary float format with `p` significant bits (implicit one included), minimum normal
/// exponent `emin` and largest finite value `max`; round half to even, overflow to infinity.
pub(crate) fn round_to_format(v: f64, p: i32, emin: i32, max: f64) -> f64 {
    if !v.is_finite() || v == 0.0 {
        return v;
    }
    let a = v.abs();
    // exponent e with 2^e <= a < 2^(e+1)
    let mut e = a.log2().floor() as i32;
    if 2f64.powi(e) > a {
        e -= 1;
    } else if 2f64.powi(e + 1) <= a {
        e += 1;
    }
    let e = e.max(emin);
    let ulp = 2f64.powi(e - (p - 1));
    let r = round_half_even(a / ulp) * ulp;
    let r = if r > max { f64::INFINITY } else { r };
    r.copysign(v)
}

pub(crate) fn convert(v: f64, to: DType) -> f64 {
    match to {
        DType::F64 => v,
        DType::F32 => round_to_format(v, 24, -126, f32::MAX as f64),
        DType::F16 => round_to_format(v, 11, -14, 65504.0),
        DType::BF16 => round_to_format(v, 8, -126, 3.389_531_389_251_535_5e38),
        DType::Bool => {
            if v != 0.0 {
                1.0
            } else {
                0.0
            }
        }
        _ => {
            if v.is_nan() {
                0.0
            } else {
                wrap_int(to, v.trunc())
            }
        }
    }
}

fn cast(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let to = node.int("to", -1)?;
    let Some(dt) = dtype_from_onnx(to) else {
        return unsupported(format!("Cast to element type {to}"));
    };
    Ok(vec![cast_to(x, dt)?])
}

/// `x` converted to `dt` (Cast, and CastLike with the type of its second input).
pub(super) fn cast_to(x: &Value, dt: DType) -> Result<Output, OracleError> {
    let (data, mag) = map_elements(x, |v| convert(v, dt));
    make_output(dt, x.shape.clone(), data, mag)
}

/// `f` of each element of `x`, and the results' absolute values as the magnitudes.
fn map_elements(x: &Value, f: impl Fn(f64) -> f64 + Sync) -> (Vec<f64>, Vec<f64>) {
    let (mut data, mut mag) = (vec![0.0; x.len()], vec![0.0; x.len()]);
    deal_elements(&mut data, &mut mag, |first, d, g| {
        let xs = &x.data[first..first + d.len()];
        for ((&v, dv), gv) in xs.iter().zip(d).zip(g) {
            *dv = f(v);
            *gv = dv.abs();
        }
    });
    (data, mag)
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;
    use crate::Attr;

    fn run(node: &NodeSpec, inputs: Vec<Option<Value>>) -> Output {
        eval(node, &inputs).unwrap().remove(0)
    }

    #[test]
    fn erf_and_round() {
        // Known values.
        assert!((erf(0.5) - 0.520_499_877_813_046_5).abs() < 1e-14);
        assert!((erf(-1.5) + 0.966_105_146_475_310_7).abs() < 1e-14);
        assert!((erf(3.0) - 0.999_977_909_503_001_4).abs() < 1e-14);
        assert_eq!(erf(0.0), 0.0);
        assert!(erf(-0.0).is_sign_negative());
        // (x, erf, erfc) from a C library, both sides of the series / continued-fraction switch.
        for (x, e, c) in [
            (0.1, 0.1124629160182849, 0.8875370839817152),
            (1.0, 0.8427007929497149, 0.15729920705028513),
            (2.0, 0.9953222650189527, 0.004677734981047265),
            (2.49, 0.9995707121322661, 0.000429287867733913),
            (2.51, 0.9996142945182758, 0.0003857054817242798),
            (3.5, 0.9999992569016276, 7.430983723414128e-07),
            (5.5, 0.9999999999999927, 7.357847917974398e-15),
        ] {
            assert!((erf(x) - e).abs() < 1e-15, "erf({x})");
            assert!((erf(-x) + e).abs() < 1e-15, "erf(-{x})");
            assert!((erfc(x) - c).abs() < 1e-12 * c, "erfc({x}) = {}", erfc(x));
            assert!((erfc(-x) - (2.0 - c)).abs() < 1e-15, "erfc(-{x})");
        }
        assert_eq!(round_half_even(2.5), 2.0);
        assert_eq!(round_half_even(-2.5), -2.0);
        assert_eq!(round_half_even(3.5), 4.0);
        assert_eq!(round_half_even(-0.4), 0.0);
    }

    #[test]
    fn unary_random_against_formulas() {
        let mut r = SplitMix64(7);
        let xs: Vec<f64> = r.values(50).iter().map(|v| v * 4.0).collect();
        let cases: Vec<(&str, fn(f64) -> f64)> = vec![
            ("Sigmoid", |x| 1.0 / (1.0 + (-x).exp())),
            ("Softplus", |x| (x.exp() + 1.0).ln()),
            ("Tanh", |x| x.tanh()),
            ("Mish", |x| x * ((x.exp() + 1.0).ln()).tanh()),
            ("HardSwish", |x| x * (0.0f64).max(1.0f64.min(x / 6.0 + 0.5))),
            ("Softsign", |x| x / (1.0 + x.abs())),
            ("Selu", |x| {
                if x > 0.0 {
                    1.0507009873554805 * x
                } else {
                    1.0507009873554805 * 1.6732632423543772 * (x.exp() - 1.0)
                }
            }),
        ];
        for (op, f) in cases {
            let out = run(&node(op, 13, vec![]), vec![f32v(&[5, 10], xs.clone())]);
            let want: Vec<f64> = xs.iter().map(|&x| f(x)).collect();
            assert!(close(&out.value.data, &want, 1e-7), "{op}");
        }
        let g = run(&node("Gelu", 20, vec![]), vec![f32v(&[50], xs.clone())]);
        let gt = run(
            &node(
                "Gelu",
                20,
                vec![("approximate", Attr::String("tanh".into()))],
            ),
            vec![f32v(&[50], xs.clone())],
        );
        assert!(close(&g.value.data, &gt.value.data, 1e-3));
    }

    #[test]
    fn binary_broadcast_and_compare() {
        let mut r = SplitMix64(11);
        let a = r.values(6);
        let b = r.values(3);
        let out = run(
            &node("Add", 14, vec![]),
            vec![f32v(&[2, 3], a.clone()), f32v(&[3], b.clone())],
        );
        for i in 0..2 {
            for j in 0..3 {
                assert_eq!(out.value.data[i * 3 + j], a[i * 3 + j] + b[j]);
                assert_eq!(out.magnitude[i * 3 + j], a[i * 3 + j].abs() + b[j].abs());
            }
        }
        let c = run(
            &node("Less", 13, vec![]),
            vec![
                f32v(&[2, 1], vec![0.0, 2.0]),
                f32v(&[1, 3], vec![-1.0, 1.0, 3.0]),
            ],
        );
        assert_eq!(c.value.dtype, DType::Bool);
        assert_eq!(c.value.shape, vec![2, 3]);
        assert_eq!(c.value.data, vec![0.0, 1.0, 1.0, 0.0, 0.0, 1.0]);
        assert_eq!(c.magnitude, vec![0.0; 6]);
    }

    #[test]
    fn integer_div_mod_shift() {
        let i32v = |d: Vec<f64>| typed(DType::I32, &[4], d);
        let d = run(
            &node("Div", 14, vec![]),
            vec![
                i32v(vec![7.0, -7.0, 7.0, -7.0]),
                i32v(vec![2.0, 2.0, -2.0, -2.0]),
            ],
        );
        assert_eq!(d.value.data, vec![3.0, -3.0, -3.0, 3.0]);
        let m = run(
            &node("Mod", 13, vec![]),
            vec![
                i32v(vec![7.0, -7.0, 7.0, -7.0]),
                i32v(vec![3.0, 3.0, -3.0, -3.0]),
            ],
        );
        assert_eq!(m.value.data, vec![1.0, 2.0, -2.0, -1.0]);
        let mf = run(
            &node("Mod", 13, vec![("fmod", Attr::Int(1))]),
            vec![f32v(&[2], vec![-7.5, 7.5]), f32v(&[2], vec![2.0, -2.0])],
        );
        assert_eq!(mf.value.data, vec![-1.5, 1.5]);
        let u8v = |d: Vec<f64>| typed(DType::U8, &[3], d);
        let s = run(
            &node(
                "BitShift",
                11,
                vec![("direction", Attr::String("LEFT".into()))],
            ),
            vec![u8v(vec![1.0, 200.0, 3.0]), u8v(vec![2.0, 1.0, 9.0])],
        );
        assert_eq!(s.value.data, vec![4.0, 144.0, 0.0]);
    }

    #[test]
    fn variadic_where_clip_cast() {
        let s = run(
            &node("Sum", 13, vec![]),
            vec![
                f32v(&[2], vec![1.0, 2.0]),
                f32v(&[1], vec![-3.0]),
                f32v(&[2], vec![0.5, 0.5]),
            ],
        );
        assert_eq!(s.value.data, vec![-1.5, -0.5]);
        assert_eq!(s.magnitude, vec![4.5, 5.5]);
        let m = run(
            &node("Mean", 13, vec![]),
            vec![f32v(&[2], vec![1.0, 2.0]), f32v(&[2], vec![3.0, -2.0])],
        );
        assert_eq!(m.value.data, vec![2.0, 0.0]);
        let mx = run(
            &node("Max", 13, vec![]),
            vec![f32v(&[3], vec![1.0, 5.0, -1.0]), f32v(&[1], vec![2.0])],
        );
        assert_eq!(mx.value.data, vec![2.0, 5.0, 2.0]);
        let w = run(
            &node("Where", 16, vec![]),
            vec![
                typed(DType::Bool, &[2, 1], vec![1.0, 0.0]),
                f32v(&[2], vec![1.0, 2.0]),
                f32v(&[1], vec![9.0]),
            ],
        );
        assert_eq!(w.value.data, vec![1.0, 2.0, 9.0, 9.0]);
        let c = run(
            &node("Clip", 13, vec![]),
            vec![
                f32v(&[4], vec![-2.0, -0.5, 0.5, 2.0]),
                f32v(&[], vec![-1.0]),
                None,
            ],
        );
        assert_eq!(c.value.data, vec![-1.0, -0.5, 0.5, 2.0]);
        let c6 = run(
            &node(
                "Clip",
                6,
                vec![("min", Attr::Float(0.0)), ("max", Attr::Float(1.0))],
            ),
            vec![f32v(&[3], vec![-2.0, 0.5, 2.0])],
        );
        assert_eq!(c6.value.data, vec![0.0, 0.5, 1.0]);
        let k = run(
            &node("Cast", 13, vec![("to", Attr::Int(6))]),
            vec![f32v(&[3], vec![-2.7, 2.7, 3e9])],
        );
        assert_eq!(k.value.dtype, DType::I32);
        assert_eq!(&k.value.data[..2], &[-2.0, 2.0]);
        let h = run(
            &node("Cast", 13, vec![("to", Attr::Int(10))]),
            vec![typed(
                DType::F64,
                &[4],
                vec![1.0 + 1.0 / 4096.0, 65520.0, 0.1, 1e-8],
            )],
        );
        assert_eq!(h.value.data[0], 1.0);
        assert_eq!(h.value.data[1], f64::INFINITY);
        assert!((h.value.data[2] - 0.0999755859375).abs() < 1e-15);
        assert_eq!(h.value.data[3], 0.0);
        let mut r = SplitMix64(3);
        let xs = r.values(20);
        let f = run(
            &node("Cast", 13, vec![("to", Attr::Int(1))]),
            vec![typed(DType::F64, &[20], xs.clone())],
        );
        let want: Vec<f64> = xs.iter().map(|&x| x as f32 as f64).collect();
        assert_eq!(f.value.data, want);
        assert!(check(&node("Cast", 13, vec![("to", Attr::Int(8))])).is_err());
    }
}
