//! The 8-bit integer products, by the specification's formulas (its reference implementation's
//! numpy operations):
//! - MatMulInteger: `Y = (A − a_zero_point) · (B − b_zero_point)`, numpy's matmul of the centered
//!   operands (exact in f64: every product of 8-bit values and every sum of fewer than 2³⁷ of them
//!   is an integer below 2⁵³), the output int32 wrapped as a 32-bit accumulator wraps (the
//!   specification says nothing of overflow; every engine here wraps). A's zero point is a scalar
//!   or per row (1-D of A's row count), B's a scalar or per column (1-D of B's column count).
//! - ConvInteger: `Y = conv(X − x_zero_point, W − w_zero_point)`, this oracle's Conv (the direct
//!   sum, exact in f64 like the product above) of the centered operands, padding being 0 after
//!   centering (the padded input equals the zero point), wrapped to int32. X's zero point is per
//!   tensor; W's per tensor or per output channel (1-D of M).
//! - QLinearMatMul and QLinearConv: the same sums (exact, not wrapped: the runtimes keep them
//!   where a 32-bit sum cannot wrap), requantized as numpy computes `sum · (x_scale · w_scale /
//!   y_scale) + y_zero_point`: the multiplier in f32 (each operation rounded to f32), the rest in
//!   f64, then rounded half to even and saturated to the output type (y_zero_point's, else the
//!   first operand's: u8 or i8). QLinearConv adds its int32 bias to the sum first. Scales are f32
//!   (or f16, bf16: the multiplier then in that type);
//!   x's (a's) and y's per tensor, w's (b's) per tensor or per output channel (b: per column).
//! - DynamicQuantizeLinear: `x_min = min(0, min x)`, `x_max = max(0, max x)`, `y_scale = (x_max −
//!   x_min) / 255`, `y_zero_point = saturate(round(0 − x_min / y_scale))`, `y = saturate(round(x /
//!   y_scale) + y_zero_point)`, every operation in f32 (each result rounded to f32), rounding half
//!   to even. Where x_max equals x_min (all zeros) the specification divides by zero; the scale is
//!   1 here, as every engine of this project gives. NaN and infinite inputs are not judged (the
//!   scale would not be finite).
use super::scalar_ops::round_to_float;
use super::{input, opt_input, output};
use crate::{DType, NodeSpec, OracleError, Output, Value};

pub(super) fn covers(op: &str) -> bool {
    matches!(
        op,
        "MatMulInteger" | "ConvInteger" | "QLinearMatMul" | "QLinearConv" | "DynamicQuantizeLinear"
    )
}

pub(super) fn supports(node: &NodeSpec) -> Result<(), String> {
    match node.op_type.as_str() {
        "MatMulInteger" if node.num_outputs > 1 => Err("MatMulInteger has one output".into()),
        "MatMulInteger" if node.opset < 10 => Err("MatMulInteger exists from opset 10".into()),
        "ConvInteger" | "QLinearConv" | "QLinearMatMul" if node.opset < 10 => {
            Err(format!("{} exists from opset 10", node.op_type))
        }
        "ConvInteger" | "QLinearConv" => super::conv::supports(node),
        "DynamicQuantizeLinear" if node.num_outputs > 3 => {
            Err("DynamicQuantizeLinear has three outputs".into())
        }
        "DynamicQuantizeLinear" if node.opset < 11 => {
            Err("DynamicQuantizeLinear exists from opset 11".into())
        }
        _ => Ok(()),
    }
}

pub(super) fn evaluate(
    node: &NodeSpec,
    inputs: &[Option<Value>],
) -> Result<Vec<Output>, OracleError> {
    match node.op_type.as_str() {
        "MatMulInteger" => matmul_integer(node, inputs),
        "ConvInteger" => conv_integer(node, inputs),
        "QLinearMatMul" => qlinear_matmul(node, inputs),
        "QLinearConv" => qlinear_conv(node, inputs),
        _ => dynamic_quantize(node, inputs),
    }
}

fn eight_bit(v: &Value, what: &str) -> Result<(), OracleError> {
    if matches!(v.dtype, DType::U8 | DType::I8) {
        Ok(())
    } else {
        Err(OracleError::Unsupported(format!(
            "{what} of type {:?} (u8 or i8 expected)",
            v.dtype
        )))
    }
}

/// `x` minus its zero point: one for all, or `per`-th index `zp[idx(i)]` (a row or a column).
fn centered(
    x: &Value,
    zp: Option<&Value>,
    lines: usize,
    line_of: impl Fn(usize) -> usize,
    what: &str,
) -> Result<Value, OracleError> {
    eight_bit(x, what)?;
    let data = match zp {
        None => x.data.clone(),
        Some(z) => {
            if z.dtype != x.dtype {
                return Err(OracleError::Invalid(format!(
                    "{what}'s zero point is {:?}, {what} is {:?}",
                    z.dtype, x.dtype
                )));
            }
            if z.len() == 1 {
                x.data.iter().map(|v| v - z.data[0]).collect()
            } else if z.shape.len() == 1 && z.len() == lines {
                x.data
                    .iter()
                    .enumerate()
                    .map(|(i, v)| v - z.data[line_of(i)])
                    .collect()
            } else {
                return Err(OracleError::Unsupported(format!(
                    "{what}'s zero point of shape {:?} (a scalar or 1-D of {lines} covered)",
                    z.shape
                )));
            }
        }
    };
    Value::new(DType::F64, x.shape.clone(), data)
}

/// The sums of the matrix product of inputs `at[0]` and `at[2]` centered on the zero points at
/// `at[1]` and `at[3]` (each optional), exact.
fn product_sums(
    node: &NodeSpec,
    inputs: &[Option<Value>],
    at: [usize; 4],
) -> Result<Value, OracleError> {
    let a = input(node, inputs, at[0])?;
    let b = input(node, inputs, at[2])?;
    if a.shape.len() < 2 && opt_input(inputs, at[1]).is_some_and(|z| z.len() != 1) {
        return Err(OracleError::Unsupported(
            "a per-row zero point of a 1-D A".into(),
        ));
    }
    let (ar, ac) = match a.shape.len() {
        0 => (1, 1),
        1 => (1, a.shape[0]),
        r => (a.shape[r - 2], a.shape[r - 1]),
    };
    let bc = *b.shape.last().unwrap_or(&1);
    let ac_ = centered(
        a,
        opt_input(inputs, at[1]),
        ar,
        |i| (i / ac.max(1)) % ar.max(1),
        "A",
    )?;
    let bc_ = centered(b, opt_input(inputs, at[3]), bc, |i| i % bc.max(1), "B")?;
    Ok(super::matmul::matmul(&ac_, &bc_, crate::threads())?.value)
}

fn matmul_integer(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let sums = product_sums(node, inputs, [0, 2, 1, 3])?;
    Ok(vec![wrapped_i32(&sums)?])
}

/// Wraps each (integral) sum to a 32-bit integer.
fn wrapped_i32(v: &Value) -> Result<Output, OracleError> {
    let data = v.data.iter().map(|&s| s as i64 as i32 as f64).collect();
    output(DType::I32, v.shape.clone(), data, vec![])
}

/// The sums of the convolution of input `at[0]` by `at[2]`, centered on the zero points at `at[1]`
/// (per tensor) and `at[3]` (per tensor or output channel), exact.
fn conv_sums(
    node: &NodeSpec,
    inputs: &[Option<Value>],
    at: [usize; 4],
) -> Result<Value, OracleError> {
    let x = input(node, inputs, at[0])?;
    let w = input(node, inputs, at[2])?;
    let xz = opt_input(inputs, at[1]);
    if xz.is_some_and(|z| z.len() != 1) {
        return Err(OracleError::Unsupported(
            "an x zero point that is not per tensor (the specification has one)".into(),
        ));
    }
    let m = *w.shape.first().unwrap_or(&0);
    let per = w.len() / m.max(1);
    let xc = centered(x, xz, 1, |_| 0, "x")?;
    let wc = centered(w, opt_input(inputs, at[3]), m, |i| i / per.max(1), "w")?;
    let mut y = super::conv::evaluate(node, &[Some(xc), Some(wc)])?;
    Ok(y.remove(0).value)
}

fn conv_integer(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let sums = conv_sums(node, inputs, [0, 2, 1, 3])?;
    Ok(vec![wrapped_i32(&sums)?])
}

/// A scale's values, finite f32, f16 or bf16: one (`lines` = 1) or `lines` of them.
fn scales(v: &Value, lines: usize, what: &str) -> Result<Vec<f64>, OracleError> {
    let float = matches!(v.dtype, DType::F32 | DType::F16 | DType::BF16);
    if !float || v.data.iter().any(|s| !s.is_finite()) {
        return Err(OracleError::Unsupported(format!(
            "{what} of {:?} {:?} (finite f32, f16 and bf16 scales are covered)",
            v.dtype, v.data
        )));
    }
    if v.len() == 1 || (v.shape.len() == 1 && v.len() == lines) {
        Ok(v.data.clone())
    } else {
        Err(OracleError::Unsupported(format!(
            "{what} of shape {:?} (one, or 1-D of {lines})",
            v.shape
        )))
    }
}

/// `saturate(round_half_even(sums[i] · multiplier[line(i)] + zp))`, the multiplier `x_scale ·
/// w_scale[line] / y_scale` in f32, into `out` (u8 or i8).
#[allow(clippy::too_many_arguments)]
fn requantize(
    sums: &Value,
    x_scale: &Value,
    w_scale: &Value,
    lines: usize,
    line: impl Fn(usize) -> usize,
    y_scale: &Value,
    y_zp: Option<&Value>,
    out: DType,
) -> Result<Output, OracleError> {
    let (lo, hi) = match out {
        DType::U8 => (0.0, 255.0),
        DType::I8 => (-128.0, 127.0),
        d => return Err(OracleError::Unsupported(format!("an output of {d:?}"))),
    };
    // The multiplier in the scales' type (numpy's f16 arithmetic rounds each operation to f16).
    let st = x_scale.dtype;
    if w_scale.dtype != st || y_scale.dtype != st {
        return Err(OracleError::Invalid(format!(
            "scales of {st:?}, {:?} and {:?}",
            w_scale.dtype, y_scale.dtype
        )));
    }
    let f = |v: f64| round_to_float(v, st);
    let xs = scales(x_scale, 1, "x's scale")?;
    let ws = scales(w_scale, lines, "w's scale")?;
    let ys = scales(y_scale, 1, "y's scale")?;
    let zp = match y_zp {
        None => 0.0,
        Some(z) if z.len() == 1 && z.dtype == out => z.data[0],
        Some(z) => {
            return Err(OracleError::Unsupported(format!(
                "y's zero point {:?} of shape {:?}",
                z.dtype, z.shape
            )));
        }
    };
    let mult: Vec<f64> = ws.iter().map(|&w| f(f(xs[0] * w) / ys[0])).collect();
    let data = sums
        .data
        .iter()
        .enumerate()
        .map(|(i, &s)| {
            let m = mult[if mult.len() == 1 { 0 } else { line(i) }];
            (s * m + zp).round_ties_even().clamp(lo, hi)
        })
        .collect();
    output(out, sums.shape.clone(), data, vec![])
}

/// The output type: y's zero point's, else the first operand's.
fn out_type(inputs: &[Option<Value>], first: &Value) -> DType {
    opt_input(inputs, 7).map_or(first.dtype, |z| z.dtype)
}

fn qlinear_matmul(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let sums = product_sums(node, inputs, [0, 2, 3, 5])?;
    let n = *input(node, inputs, 3)?.shape.last().unwrap_or(&1);
    let out = out_type(inputs, input(node, inputs, 0)?);
    Ok(vec![requantize(
        &sums,
        input(node, inputs, 1)?,
        input(node, inputs, 4)?,
        n,
        |i| i % n.max(1),
        input(node, inputs, 6)?,
        opt_input(inputs, 7),
        out,
    )?])
}

fn qlinear_conv(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let mut sums = conv_sums(node, inputs, [0, 2, 3, 5])?;
    let m = *sums.shape.get(1).unwrap_or(&1);
    let plane: usize = sums.shape.iter().skip(2).product();
    let channel = |i: usize| (i / plane.max(1)) % m.max(1);
    if let Some(b) = opt_input(inputs, 8) {
        if b.dtype != DType::I32 || b.shape.len() != 1 || b.len() != m {
            return Err(OracleError::Invalid(format!(
                "QLinearConv's bias {:?} of shape {:?} (int32 of M = {m})",
                b.dtype, b.shape
            )));
        }
        for (i, s) in sums.data.iter_mut().enumerate() {
            *s += b.data[channel(i)];
        }
    }
    let out = out_type(inputs, input(node, inputs, 0)?);
    Ok(vec![requantize(
        &sums,
        input(node, inputs, 1)?,
        input(node, inputs, 4)?,
        m,
        channel,
        input(node, inputs, 6)?,
        opt_input(inputs, 7),
        out,
    )?])
}

fn dynamic_quantize(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    if x.dtype != DType::F32 {
        return Err(OracleError::Unsupported(format!(
            "DynamicQuantizeLinear of {:?} (f32 is defined)",
            x.dtype
        )));
    }
    if x.data.iter().any(|v| !v.is_finite()) {
        return Err(OracleError::Unsupported(
            "a NaN or infinite input (the scale would not be finite)".into(),
        ));
    }
    let f = |v: f64| round_to_float(v, DType::F32);
    let lo = x.data.iter().fold(0.0f64, |a, &v| a.min(v));
    let hi = x.data.iter().fold(0.0f64, |a, &v| a.max(v));
    let scale = if hi == lo { 1.0 } else { f(hi - lo) };
    let scale = f(scale / 255.0);
    let zp = f(0.0 - f(lo / scale));
    let zp = if zp.is_nan() {
        0.0
    } else {
        zp.clamp(0.0, 255.0).round_ties_even()
    };
    let y: Vec<f64> = x
        .data
        .iter()
        .map(|&v| {
            let q = f(v / scale);
            let q = if q.is_nan() { 0.0 } else { q.round_ties_even() };
            (q + zp).clamp(0.0, 255.0)
        })
        .collect();
    let n = y.len();
    Ok(vec![
        output(DType::U8, x.shape.clone(), y, vec![0.0; n])?,
        output(DType::F32, vec![], vec![scale], vec![scale.abs()])?,
        output(DType::U8, vec![], vec![zp], vec![0.0])?,
    ])
}
