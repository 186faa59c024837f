//! QuantizeLinear and DequantizeLinear, per tensor or per axis, computed another way than the
//! reference's:
//! - the per-axis or per-block parameter of each element comes from nested loops over (outer,
//!   axis, inner) instead of an index formula;
//! - QuantizeLinear divides in the hardware type itself where the precision is f32 (Rust's `f32`
//!   division is IEEE's), in f32 rounded once more for f16 and bf16 (24 ≥ 2·11 + 2 bits: that
//!   second rounding is the correctly rounded narrow quotient), in f64 for f64; ties to even by
//!   floor and parity; a NaN quotient gives the zero point, infinities saturate;
//! - DequantizeLinear multiplies exactly in 128-bit integers ((x - zero point) times the scale's
//!   integer significand) and rounds the product to the output format by its bits.
use super::arith::round_half_even;
use super::elementwise::convert;
use super::{dtype_from_onnx, input, invalid, make_output, opt_input, unsupported};
use crate::{DType, NodeSpec, OracleError, Output, Value};

pub(super) const OPS: &[&str] = &["QuantizeLinear", "DequantizeLinear"];

fn type_attr(node: &NodeSpec, name: &str) -> Result<Option<DType>, String> {
    let t = node.int(name, 0).map_err(|e| e.to_string())?;
    if t == 0 {
        return Ok(None);
    }
    dtype_from_onnx(t)
        .map(Some)
        .ok_or_else(|| format!("{name} {t} is not covered"))
}

/// The saturation bounds of a quantized integer type.
fn bounds(d: DType) -> Option<(i64, i64)> {
    match d {
        DType::U8 => Some((0, u8::MAX as i64)),
        DType::I8 => Some((i8::MIN as i64, i8::MAX as i64)),
        DType::U16 => Some((0, u16::MAX as i64)),
        DType::I16 => Some((i16::MIN as i64, i16::MAX as i64)),
        _ => None,
    }
}

pub(super) fn check(node: &NodeSpec) -> Result<(), String> {
    if node.opset < 10 {
        return Err("QuantizeLinear and DequantizeLinear start at opset 10".into());
    }
    if node.num_outputs != 1 {
        return Err(format!("{} has one output", node.op_type));
    }
    if node.opset >= 21 && node.int("block_size", 0).map_err(|e| e.to_string())? < 0 {
        return Err("block_size below 0".into());
    }
    let out = type_attr(node, "output_dtype")?;
    if node.op_type == "QuantizeLinear" {
        if let Some(d) = out
            && bounds(d).is_none()
        {
            return Err(format!("QuantizeLinear to {d:?} is not covered"));
        }
    } else if let Some(d) = out
        && !d.is_float()
    {
        return Err(format!("DequantizeLinear to {d:?}"));
    }
    if let Some(p) = type_attr(node, "precision")?
        && !p.is_float()
    {
        return Err(format!("precision {p:?}"));
    }
    Ok(())
}

/// The scale index of every element of `shape`: all 0 for one scale, else laid out block by block
/// over (outer, axis, inner), the axis index divided by the block size when there is one.
fn parameter_of_each(
    node: &NodeSpec,
    shape: &[usize],
    params: &Value,
) -> Result<Vec<usize>, OracleError> {
    let n: usize = shape.iter().product();
    let block = if node.opset >= 21 {
        node.int("block_size", 0)?.max(0) as usize
    } else {
        0
    };
    if params.data.len() == 1 && (block == 0 || params.shape.len() <= 1) {
        return Ok(vec![0; n]);
    }
    let rank = shape.len() as i64;
    let mut axis = node.int("axis", 1)?;
    if axis < 0 {
        axis += rank;
    }
    if !(0..rank).contains(&axis) {
        return invalid(format!("axis out of range for rank {rank}"));
    }
    let axis = axis as usize;
    let along = if block == 0 {
        if params.shape.len() != 1 || shape[axis] != params.data.len() {
            return invalid(format!(
                "scales of shape {:?} for a dim of {}",
                params.shape, shape[axis]
            ));
        }
        shape[axis]
    } else {
        let mut want = shape.to_vec();
        want[axis] = shape[axis].div_ceil(block);
        if params.shape != want {
            return invalid(format!(
                "blocked scales of shape {:?}, {want:?} expected",
                params.shape
            ));
        }
        want[axis]
    };
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let mut at = Vec::with_capacity(n);
    for o in 0..outer {
        for c in 0..shape[axis] {
            let row = match c.checked_div(block) {
                None => c,
                Some(b) => o * along + b,
            };
            let base = if block == 0 { row } else { row * inner };
            for k in 0..inner {
                at.push(if block == 0 { base } else { base + k });
            }
        }
    }
    Ok(at)
}

pub(super) fn eval(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let s = input(node, inputs, 1)?;
    let z = opt_input(inputs, 2);
    if z.is_some_and(|z| z.data.len() != s.data.len()) {
        return invalid("the zero point and the scale differ in size");
    }
    let at = parameter_of_each(node, &x.shape, s)?;
    let zero = |i: usize| z.map_or(0.0, |z| z.data[at[i]]);
    if node.op_type == "QuantizeLinear" {
        let out = match (z.map(|z| z.dtype), type_attr(node, "output_dtype")) {
            (_, Err(e)) => return unsupported(e),
            (Some(zt), Ok(Some(o))) if zt != o => {
                return invalid("output_dtype is not the zero point's type");
            }
            (Some(zt), _) => zt,
            (None, Ok(Some(o))) => o,
            (None, Ok(None)) => DType::U8,
        };
        let Some((lo, hi)) = bounds(out) else {
            return unsupported(format!("QuantizeLinear to {out:?}"));
        };
        let prec = match type_attr(node, "precision") {
            Err(e) => return unsupported(e),
            Ok(Some(p)) => p,
            Ok(None) => division_type(x.dtype, s.dtype),
        };
        let mut data = Vec::with_capacity(x.data.len());
        for (i, &v) in x.data.iter().enumerate() {
            let q = quotient(v, s.data[at[i]], prec);
            let r = if q.is_nan() {
                0
            } else if q >= 9.0e15 {
                i64::MAX / 2
            } else if q <= -9.0e15 {
                i64::MIN / 2
            } else {
                round_half_even(q) as i64
            };
            data.push((r + zero(i) as i64).clamp(lo, hi) as f64);
        }
        let n = data.len();
        return Ok(vec![make_output(out, x.shape.clone(), data, vec![0.0; n])?]);
    }
    if z.is_some_and(|z| z.dtype != x.dtype) {
        return invalid("the zero point's type is not the input's");
    }
    let out = match type_attr(node, "output_dtype") {
        Err(e) => return unsupported(e),
        Ok(Some(o)) => o,
        Ok(None) if s.dtype.is_float() => s.dtype,
        Ok(None) => DType::F32,
    };
    let mut data = Vec::with_capacity(x.data.len());
    for (i, &v) in x.data.iter().enumerate() {
        data.push(exact_product(v - zero(i), s.data[at[i]], out)?);
    }
    let mag = data.iter().map(|v| v.abs()).collect();
    Ok(vec![make_output(out, x.shape.clone(), data, mag)?])
}

/// The type `x / scale` is computed in: the more precise float operand (two different 16-bit
/// formats meet in f32); an integer x takes the scale's.
fn division_type(x: DType, s: DType) -> DType {
    let bits = |d: DType| match d {
        DType::F64 => 64,
        DType::F32 => 32,
        DType::F16 | DType::BF16 => 16,
        _ => 0,
    };
    if bits(x) == bits(s) && x != s {
        return DType::F32;
    }
    let w = if bits(x) >= bits(s) { x } else { s };
    if w.is_float() { w } else { DType::F32 }
}

fn quotient(x: f64, s: f64, prec: DType) -> f64 {
    match prec {
        DType::F64 => x / s,
        DType::F32 => ((x as f32) / (s as f32)) as f64,
        p => {
            let (a, b) = (convert(x, p) as f32, convert(s, p) as f32);
            convert((a / b) as f64, p)
        }
    }
}

/// `k · s` (an integer and a float) rounded once to `out`, from its exact value in 128-bit
/// integers.
fn exact_product(k: f64, s: f64, out: DType) -> Result<f64, OracleError> {
    if !s.is_finite() || k == 0.0 || s == 0.0 {
        return Ok(k * s);
    }
    if k.fract() != 0.0 || k.abs() >= 2f64.powi(64) {
        return unsupported(format!("dequantizing {k}"));
    }
    // s = m · 2^e with an integer m of at most 53 bits.
    let bits = s.abs().to_bits();
    let (raw_e, frac) = ((bits >> 52) as i32, bits & ((1u64 << 52) - 1));
    let (m, e) = if raw_e == 0 {
        (frac, -1074)
    } else {
        (frac | (1u64 << 52), raw_e - 1075)
    };
    let negative = (k < 0.0) != (s < 0.0);
    let n: u128 = (k.abs() as u128) * (m as u128);
    // (significant bits, minimum normal exponent, largest exponent) of the output.
    let (p, emin, emax) = match out {
        DType::F64 => (53, -1022, 1023),
        DType::F32 => (24, -126, 127),
        DType::F16 => (11, -14, 15),
        DType::BF16 => (8, -126, 127),
        d => return unsupported(format!("dequantizing to {d:?}")),
    };
    // n · 2^e: its leading bit is at 2^top; keep p bits (fewer below the normal range).
    let top = 127 - n.leading_zeros() as i32 + e;
    let quantum = (top.max(emin) - (p - 1)).max(e);
    let shift = (quantum - e) as u32;
    let mut kept = if shift >= 128 { 0 } else { n >> shift };
    if shift > 0 && shift <= 128 {
        let rest = if shift == 128 {
            n
        } else {
            n & ((1u128 << shift) - 1)
        };
        let half = 1u128 << (shift - 1);
        if rest > half || (rest == half && kept & 1 == 1) {
            kept += 1;
        }
    }
    // kept ≤ 2^p (a carry may reach the next power of two), so this product is exact.
    let mag = kept as f64 * 2f64.powi(quantum);
    let mag = if mag > (2.0 - 2f64.powi(1 - p)) * 2f64.powi(emax) {
        f64::INFINITY
    } else {
        mag
    };
    Ok(if negative { -mag } else { mag })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products_round_once_from_their_exact_value() {
        // The midpoint f64 lands on (see the reference's test): the exact value is above it.
        let b = 16_777_213.0 / 8_388_608.0;
        assert_eq!(
            exact_product(1_549_096_277.0, b, DType::F32).unwrap(),
            3_098_192_128.0
        );
        assert_eq!(exact_product(-3.0, 0.5, DType::F16).unwrap(), -1.5);
        // 2^24 + 1 ties to even in f32; 65520 overflows f16.
        assert_eq!(
            exact_product(16_777_217.0, 1.0, DType::F32).unwrap(),
            16_777_216.0
        );
        assert_eq!(
            exact_product(65_520.0, 1.0, DType::F16).unwrap(),
            f64::INFINITY
        );
        // A subnormal f16 result keeps fewer bits: 3 · 2^-25 is 1.5 quanta of 2^-24, ties to 2.
        assert_eq!(
            exact_product(3.0, 2f64.powi(-25), DType::F16).unwrap(),
            2.0 * 2f64.powi(-24)
        );
    }

    #[test]
    fn quotients_are_the_precision_types() {
        assert_eq!(quotient(1.0, 3.0, DType::F32), (1.0f32 / 3.0) as f64);
        assert_eq!(division_type(DType::F16, DType::BF16), DType::F32);
        assert_eq!(division_type(DType::I32, DType::F32), DType::F32);
    }
}
