//! QuantizeLinear and DequantizeLinear, by the specification's formulas, per tensor, per axis or
//! per block (opset 21's `block_size`: each scale serves `block_size` consecutive indices along
//! the axis):
//! - QuantizeLinear: `y = saturate(round_half_even(x / y_scale) + y_zero_point)`, the quotient
//!   computed in the precision of the reference implementation (numpy's promotion of x and y_scale:
//!   the wider float type, f32 for f16 with bf16; or the `precision` attribute), each operand and the
//!   quotient rounded to it. The specification leaves a NaN's integer open: it is the zero point
//!   here, as every engine of this project gives (the conversion of NaN to an integer is 0).
//! - DequantizeLinear: `y = (x - x_zero_point) · x_scale`, the exact product rounded once to the
//!   output type (the scale's, or `output_dtype`). The product of a 32-bit integer and a scale can
//!   need more than f64's 53 bits: it is computed as f64's product plus its exact error (`mul_add`),
//!   and a product that lies on a midpoint of the output type is settled by the error's sign.
use super::elementwise::dtype_from_onnx;
use super::scalar_ops::round_to_float;
use super::{input, opt_input, output, strides, unravel};
use crate::{DType, NodeSpec, OracleError, Output, Value};

pub(super) fn covers(op: &str) -> bool {
    matches!(op, "QuantizeLinear" | "DequantizeLinear")
}

/// The integer types a quantized value may have here, with their ranges.
fn int_range(d: DType) -> Option<(f64, f64)> {
    Some(match d {
        DType::U8 => (0.0, 255.0),
        DType::I8 => (-128.0, 127.0),
        DType::U16 => (0.0, 65535.0),
        DType::I16 => (-32768.0, 32767.0),
        DType::I32 => (i32::MIN as f64, i32::MAX as f64),
        _ => return None,
    })
}

fn attr_type(node: &NodeSpec, name: &str) -> Result<Option<DType>, OracleError> {
    match node.int(name, 0)? {
        0 => Ok(None),
        t => dtype_from_onnx(t).map(Some).ok_or_else(|| {
            OracleError::Unsupported(format!("{name} {t} is not a type covered here"))
        }),
    }
}

pub(super) fn supports(node: &NodeSpec) -> Result<(), String> {
    let op = node.op_type.as_str();
    if node.opset < 10 {
        return Err(format!("{op} exists from opset 10"));
    }
    if node.num_outputs > 1 {
        return Err(format!("{op} has one output"));
    }
    if node.opset >= 21 && node.int("block_size", 0).map_err(|e| e.to_string())? < 0 {
        return Err("a negative block_size".into());
    }
    let out = attr_type(node, "output_dtype").map_err(|e| e.to_string())?;
    match (op, out) {
        ("QuantizeLinear", Some(d)) if int_range(d).is_none() || d == DType::I32 => {
            Err(format!("quantizing to {d:?} is not covered"))
        }
        ("DequantizeLinear", Some(d)) if !d.is_float() => {
            Err(format!("DequantizeLinear cannot produce {d:?}"))
        }
        _ => match attr_type(node, "precision").map_err(|e| e.to_string())? {
            Some(p) if !p.is_float() => Err(format!("precision {p:?} is not a float type")),
            _ => Ok(()),
        },
    }
}

pub(super) fn evaluate(
    node: &NodeSpec,
    inputs: &[Option<Value>],
) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let scale = input(node, inputs, 1)?;
    let zp = opt_input(inputs, 2);
    if let Some(z) = zp
        && z.shape != scale.shape
    {
        return Err(OracleError::Invalid(format!(
            "zero point shape {:?} differs from the scale's {:?}",
            z.shape, scale.shape
        )));
    }
    let which = param_index(node, x, scale)?;
    let z_at = |i: usize| zp.map_or(0.0, |z| z.data[which(i)]);
    if node.op_type == "QuantizeLinear" {
        let out = match (zp, attr_type(node, "output_dtype")?) {
            (Some(z), Some(d)) if d != z.dtype => {
                return Err(OracleError::Invalid(format!(
                    "output_dtype {d:?} differs from the zero point's {:?}",
                    z.dtype
                )));
            }
            (Some(z), _) => z.dtype,
            (None, Some(d)) => d,
            (None, None) => DType::U8,
        };
        let Some((lo, hi)) = int_range(out).filter(|_| out != DType::I32) else {
            return Err(OracleError::Unsupported(format!(
                "quantizing to {out:?} is not covered"
            )));
        };
        let prec = match attr_type(node, "precision")? {
            Some(p) => p,
            None => promoted(x.dtype, scale.dtype),
        };
        let round = |v: f64| {
            if prec == DType::F64 {
                v
            } else {
                round_to_float(v, prec)
            }
        };
        let data: Vec<f64> = (0..x.len())
            .map(|i| {
                let q = round(round(x.data[i]) / round(scale.data[which(i)]));
                let r = if q.is_nan() { 0.0 } else { q.round_ties_even() };
                (r + z_at(i)).clamp(lo, hi)
            })
            .collect();
        let n = data.len();
        return Ok(vec![output(out, x.shape.clone(), data, vec![0.0; n])?]);
    }
    if let Some(z) = zp
        && z.dtype != x.dtype
    {
        return Err(OracleError::Invalid(format!(
            "zero point type {:?} differs from the input's {:?}",
            z.dtype, x.dtype
        )));
    }
    let out = match attr_type(node, "output_dtype")? {
        Some(d) => d,
        None if scale.dtype.is_float() => scale.dtype,
        None => DType::F32,
    };
    let data: Vec<f64> = (0..x.len())
        .map(|i| rounded_product(x.data[i] - z_at(i), scale.data[which(i)], out))
        .collect();
    let magnitude = data.iter().map(|v| v.abs()).collect();
    Ok(vec![output(out, x.shape.clone(), data, magnitude)?])
}

/// numpy's type of `x / scale`: the wider float (f32 for f16 with bf16); an integer operand takes
/// the other's type.
fn promoted(x: DType, s: DType) -> DType {
    let rank = |d: DType| match d {
        DType::F64 => 3,
        DType::F32 => 2,
        DType::F16 | DType::BF16 => 1,
        _ => 0,
    };
    match (rank(x), rank(s)) {
        (0, 0) => DType::F32,
        (a, b) if a == b && x != s => DType::F32,
        (a, b) if a >= b => x,
        _ => s,
    }
}

/// Which scale (and zero point) element each input element uses: one for all (a scalar or a
/// one-element scale), the input's index along `axis` (a 1-D scale of that dim's length), or, with
/// a `block_size`, the scale element at the input's multi-index with its `axis` index divided by
/// the block size (a scale of the input's rank).
fn param_index<'a>(
    node: &NodeSpec,
    x: &'a Value,
    scale: &'a Value,
) -> Result<impl Fn(usize) -> usize + 'a, OracleError> {
    let rank = x.shape.len() as i64;
    let block = if node.opset >= 21 {
        node.int("block_size", 0)?.max(0) as usize
    } else {
        0
    };
    let single = scale.len() == 1 && (block == 0 || scale.shape.len() <= 1);
    let a = node.int("axis", 1)?;
    let a = if a < 0 { a + rank } else { a };
    if !single && (a < 0 || a >= rank) {
        return Err(OracleError::Invalid(format!(
            "axis {a} out of range for rank {rank}"
        )));
    }
    let a = a.max(0) as usize;
    if !single && block == 0 && (scale.shape.len() != 1 || x.shape[a] != scale.len()) {
        return Err(OracleError::Invalid(format!(
            "a per-axis scale must be 1-D of axis {a}'s length {}, got {:?}",
            x.shape[a], scale.shape
        )));
    }
    if !single && block > 0 {
        let fits = scale.shape.len() == x.shape.len()
            && (0..x.shape.len()).all(|d| {
                scale.shape[d]
                    == if d == a {
                        x.shape[d].div_ceil(block)
                    } else {
                        x.shape[d]
                    }
            });
        if !fits {
            return Err(OracleError::Invalid(format!(
                "a blocked scale of shape {:?} does not fit {:?} with blocks of {block} on axis {a}",
                scale.shape, x.shape
            )));
        }
    }
    let ss = strides(&scale.shape);
    Ok(move |i: usize| {
        if single {
            return 0;
        }
        let idx = unravel(i, &x.shape);
        if block == 0 {
            return idx[a];
        }
        idx.iter()
            .enumerate()
            .map(|(d, &v)| if d == a { v / block } else { v } * ss[d])
            .sum()
    })
}

/// `a · b` (an integer and a scale) rounded once to `out`.
fn rounded_product(a: f64, b: f64, out: DType) -> f64 {
    let p = a * b;
    if out == DType::F64 || !p.is_finite() {
        return p;
    }
    let err = a.mul_add(b, -p);
    let r = round_to_float(p, out);
    if err == 0.0 || r == p {
        return r;
    }
    // p is a midpoint of `out` exactly when its reflection about p is `out`'s other neighbour.
    let other = 2.0 * p - r;
    if other != r && round_to_float(other, out) == other {
        return if (err > 0.0) == (other > r) { other } else { r };
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_product_on_a_midpoint_is_settled_by_its_error() {
        // a · b = M·2^7 + 2^-23 exactly (M = 24,203,063, odd, 25 bits): f64 drops the 2^-23 and
        // lands on M·2^7, the midpoint between two f32 values; ties to even would go down, the
        // exact value is above.
        let (a, b) = (1_549_096_277.0, 16_777_213.0 / 8_388_608.0);
        assert_eq!(a * b, 3_098_192_000.0);
        assert_eq!(round_to_float(a * b, DType::F32), 3_098_191_872.0);
        assert_eq!(rounded_product(a, b, DType::F32), 3_098_192_128.0);
        assert_eq!(rounded_product(-a, b, DType::F32), -3_098_192_128.0);
        // Exact products round once, ties to even.
        assert_eq!(rounded_product(16_777_217.0, 1.0, DType::F32), 16_777_216.0);
        assert_eq!(rounded_product(-3.0, 0.5, DType::F16), -1.5);
    }

    #[test]
    fn promotion_follows_numpy() {
        assert_eq!(promoted(DType::F32, DType::F16), DType::F32);
        assert_eq!(promoted(DType::F16, DType::BF16), DType::F32);
        assert_eq!(promoted(DType::I32, DType::F16), DType::F16);
        assert_eq!(promoted(DType::F64, DType::F32), DType::F64);
    }
}
