//! MatMulInteger and DynamicQuantizeLinear, computed another way than the reference's:
//! - MatMulInteger in i64 arithmetic, each product's operands centered as they are read (the
//!   zero point looked up per row or column at the product), the batch dims broadcast by their
//!   own counters, the sum wrapped to i32 by its low 32 bits;
//! - ConvInteger: each operand centered in i64 (W per output channel by its own index
//!   arithmetic), then this oracle's Conv (im2col and the compensated product, exact on integers
//!   of these sizes), each sum wrapped to i32 by its low 32 bits;
//! - QLinearMatMul and QLinearConv: those sums in i64, not wrapped (QLinearConv's bias added
//!   in i64), the multiplier in Rust's f32 (`x_scale · w_scale / y_scale`; rounded to f16 or bf16
//!   after each operation for scales of those types), the sum times it plus
//!   the zero point in f64, rounded half to even by floor and parity, saturated by comparison;
//! - DynamicQuantizeLinear in Rust's `f32` (IEEE's f32 operations, not f64 rounded), the
//!   extremes taken by a sort-free scan that starts from 0, ties to even by floor and parity.
//!   Degenerate cases as the reference: a range of 0 gives the scale 1; NaN and infinite inputs
//!   are not judged.
use super::arith::round_half_even;
use super::elementwise::convert;
use super::{broadcast_shape, input, invalid, make_output, opt_input, strides, unsupported};
use crate::{DType, NodeSpec, OracleError, Output, Value};

pub(super) const OPS: &[&str] = &[
    "MatMulInteger",
    "ConvInteger",
    "QLinearMatMul",
    "QLinearConv",
    "DynamicQuantizeLinear",
];

pub(super) fn check(node: &NodeSpec) -> Result<(), String> {
    let (first, outputs) = match node.op_type.as_str() {
        "MatMulInteger" | "QLinearMatMul" => (10, 1),
        "ConvInteger" | "QLinearConv" => {
            super::conv::check(node)?;
            (10, 1)
        }
        _ => (11, 3),
    };
    if node.opset < first {
        return Err(format!("{} starts at opset {first}", node.op_type));
    }
    if node.num_outputs > outputs {
        return Err(format!("{} has {outputs} output(s)", node.op_type));
    }
    Ok(())
}

pub(super) fn eval(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    match node.op_type.as_str() {
        "MatMulInteger" => matmul_integer(node, inputs),
        "ConvInteger" => conv_integer(node, inputs),
        "QLinearMatMul" => qlinear_matmul(node, inputs),
        "QLinearConv" => qlinear_conv(node, inputs),
        _ => dynamic_quantize(node, inputs),
    }
}

/// A zero point as a lookup over `lines` rows or columns: `None` for none.
fn zero_points(
    z: Option<&Value>,
    x: &Value,
    lines: usize,
    what: &str,
) -> Result<Option<Vec<i64>>, OracleError> {
    let Some(z) = z else { return Ok(None) };
    if z.dtype != x.dtype {
        return invalid(format!(
            "{what} zero point type {:?} against {:?}",
            z.dtype, x.dtype
        ));
    }
    let v: Vec<i64> = z.data.iter().map(|&d| d as i64).collect();
    if v.len() == 1 {
        return Ok(Some(vec![v[0]; lines]));
    }
    if z.shape.len() == 1 && v.len() == lines {
        return Ok(Some(v));
    }
    unsupported(format!("{what} zero point of shape {:?}", z.shape))
}

fn matmul_integer(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let (shape, sums) = matmul_sums(node, inputs, [0, 2, 1, 3])?;
    let data = sums.iter().map(|&s| s as i32 as f64).collect();
    Ok(vec![make_output(DType::I32, shape, data, vec![])?])
}

/// The product's shape and sums (i64, exact) of inputs `at[0]` by `at[2]`, with the zero points
/// at `at[1]` and `at[3]`.
fn matmul_sums(
    node: &NodeSpec,
    inputs: &[Option<Value>],
    at: [usize; 4],
) -> Result<(Vec<usize>, Vec<i64>), OracleError> {
    let a = input(node, inputs, at[0])?;
    let b = input(node, inputs, at[2])?;
    for (v, what) in [(a, "A"), (b, "B")] {
        if !matches!(v.dtype, DType::U8 | DType::I8) {
            return unsupported(format!("{what} of {:?}", v.dtype));
        }
    }
    if a.shape.is_empty() || b.shape.is_empty() {
        return invalid("MatMulInteger needs operands of rank 1 or more");
    }
    // Both operands as stacks of matrices (a vector A is one row, a vector B one column).
    let a_vec = a.shape.len() == 1;
    let b_vec = b.shape.len() == 1;
    let am: Vec<usize> = if a_vec {
        vec![1, a.shape[0]]
    } else {
        a.shape.clone()
    };
    let bm: Vec<usize> = if b_vec {
        vec![b.shape[0], 1]
    } else {
        b.shape.clone()
    };
    let (m, k) = (am[am.len() - 2], am[am.len() - 1]);
    let (kb, n) = (bm[bm.len() - 2], bm[bm.len() - 1]);
    if k != kb {
        return invalid(format!("inner dims {k} and {kb} differ"));
    }
    if a_vec && opt_input(inputs, at[1]).is_some_and(|z| z.data.len() != 1) {
        return unsupported("a per-row zero point of a vector A");
    }
    let za = zero_points(opt_input(inputs, at[1]), a, m, "A")?;
    let zb = zero_points(opt_input(inputs, at[3]), b, n, "B")?;
    let ab = &am[..am.len() - 2];
    let bb = &bm[..bm.len() - 2];
    let batch = broadcast_shape(&[ab, bb])?;
    let count: usize = batch.iter().product();
    let (sa, sb) = (strides(ab), strides(bb));
    let mut out = Vec::with_capacity(count * m * n);
    let mut idx = vec![0usize; batch.len()];
    for _ in 0..count {
        // Each operand's matrix: the batch index, its broadcast dims held at 0.
        let offset = |dims: &[usize], st: &[usize]| -> usize {
            let lead = batch.len() - dims.len();
            (0..dims.len())
                .map(|d| {
                    if dims[d] == 1 {
                        0
                    } else {
                        idx[lead + d] * st[d]
                    }
                })
                .sum()
        };
        let (oa, ob) = (offset(ab, &sa) * m * k, offset(bb, &sb) * k * n);
        for i in 0..m {
            let zi = za.as_ref().map_or(0, |z| z[i]);
            for j in 0..n {
                let zj = zb.as_ref().map_or(0, |z| z[j]);
                let mut s = 0i64;
                for p in 0..k {
                    let x = a.data[oa + i * k + p] as i64 - zi;
                    let y = b.data[ob + p * n + j] as i64 - zj;
                    s += x * y;
                }
                out.push(s);
            }
        }
        for d in (0..batch.len()).rev() {
            idx[d] += 1;
            if idx[d] < batch[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    let mut shape = batch;
    if !a_vec {
        shape.push(m);
    }
    if !b_vec {
        shape.push(n);
    }
    Ok((shape, out))
}

fn conv_integer(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let (shape, sums) = conv_sums(node, inputs, [0, 2, 1, 3])?;
    let data = sums.iter().map(|&s| s as i32 as f64).collect();
    Ok(vec![make_output(DType::I32, shape, data, vec![])?])
}

/// The convolution's shape and sums (i64, exact) of input `at[0]` by `at[2]`, with the zero
/// points at `at[1]` and `at[3]`.
fn conv_sums(
    node: &NodeSpec,
    inputs: &[Option<Value>],
    at: [usize; 4],
) -> Result<(Vec<usize>, Vec<i64>), OracleError> {
    let x = input(node, inputs, at[0])?;
    let w = input(node, inputs, at[2])?;
    for (v, what) in [(x, "x"), (w, "w")] {
        if !matches!(v.dtype, DType::U8 | DType::I8) {
            return unsupported(format!("{what} of {:?}", v.dtype));
        }
    }
    if w.shape.is_empty() {
        return invalid("ConvInteger's W has no output-channel dim");
    }
    let xz = zero_points(opt_input(inputs, at[1]), x, 1, "x")?.map_or(0, |z| z[0]);
    let m = w.shape[0];
    let wz = zero_points(opt_input(inputs, at[3]), w, m, "w")?;
    let per: usize = w.shape[1..].iter().product();
    let xc: Vec<f64> = x.data.iter().map(|&v| (v as i64 - xz) as f64).collect();
    let mut wc = Vec::with_capacity(w.data.len());
    for oc in 0..m {
        let z = wz.as_ref().map_or(0, |z| z[oc]);
        let row = &w.data[oc * per..(oc + 1) * per];
        wc.extend(row.iter().map(|&v| (v as i64 - z) as f64));
    }
    let xc = Value::new(DType::F64, x.shape.clone(), xc)?;
    let wc = Value::new(DType::F64, w.shape.clone(), wc)?;
    let y = super::conv::eval(node, &[Some(xc), Some(wc), None])?;
    let v = &y[0].value;
    Ok((v.shape.clone(), v.data.iter().map(|&s| s as i64).collect()))
}

/// Requantizes `sums` into `out` (u8 or i8): `mult[line(i)]` is `x_scale · w_scale[line] /
/// y_scale` in f32, then `sum · mult + zp` in f64, rounded half to even and saturated.
fn requantize(
    sums: &[i64],
    inputs: &[Option<Value>],
    node: &NodeSpec,
    lines: usize,
    line: impl Fn(usize) -> usize,
    out: DType,
) -> Result<Vec<f64>, OracleError> {
    let (lo, hi) = match out {
        DType::U8 => (0.0, 255.0),
        DType::I8 => (-128.0, 127.0),
        d => return unsupported(format!("an output of {d:?}")),
    };
    let st = input(node, inputs, 1)?.dtype;
    let f32s = |i: usize, count: usize, what: &str| -> Result<Vec<f32>, OracleError> {
        let v = input(node, inputs, i)?;
        let ok = matches!(v.dtype, DType::F32 | DType::F16 | DType::BF16)
            && v.dtype == st
            && v.data.iter().all(|s| s.is_finite())
            && (v.data.len() == 1 || (v.shape.len() == 1 && v.data.len() == count));
        if !ok {
            return unsupported(format!("{what} {:?} of shape {:?}", v.dtype, v.shape));
        }
        Ok(v.data.iter().map(|&s| s as f32).collect())
    };
    let xs = f32s(1, 1, "x_scale")?[0];
    let ws = f32s(4, lines, "w_scale")?;
    let ys = f32s(6, 1, "y_scale")?[0];
    let zp = match opt_input(inputs, 7) {
        None => 0.0,
        Some(z) if z.data.len() == 1 && z.dtype == out => z.data[0],
        Some(z) => return unsupported(format!("y_zero_point of shape {:?}", z.shape)),
    };
    // Each operation in f32, then (for f16 and bf16 scales) rounded to the scales' type: f32 holds
    // the exact product of two such values, and rounds a quotient finely enough that rounding it
    // again to 11 or 8 bits gives the correctly rounded quotient.
    let to = |v: f32| convert(v as f64, st) as f32;
    let mult: Vec<f64> = ws.iter().map(|&w| to(to(xs * w) / ys) as f64).collect();
    Ok(sums
        .iter()
        .enumerate()
        .map(|(i, &s)| {
            let m = if mult.len() == 1 {
                mult[0]
            } else {
                mult[line(i)]
            };
            let q = round_half_even(s as f64 * m + zp);
            if q < lo {
                lo
            } else if q > hi {
                hi
            } else {
                q
            }
        })
        .collect())
}

fn qlinear_matmul(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let (shape, sums) = matmul_sums(node, inputs, [0, 2, 3, 5])?;
    let b = input(node, inputs, 3)?;
    let n = if b.shape.len() == 1 {
        1
    } else {
        b.shape[b.shape.len() - 1]
    };
    let out = opt_input(inputs, 7).map_or(input(node, inputs, 0)?.dtype, |z| z.dtype);
    let data = requantize(&sums, inputs, node, n, |i| i % n, out)?;
    Ok(vec![make_output(out, shape, data, vec![])?])
}

fn qlinear_conv(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let (shape, mut sums) = conv_sums(node, inputs, [0, 2, 3, 5])?;
    let m = shape[1];
    let plane: usize = shape[2..].iter().product();
    let channel = move |i: usize| (i / plane.max(1)) % m.max(1);
    if let Some(b) = opt_input(inputs, 8) {
        if b.dtype != DType::I32 || b.shape != [m] {
            return invalid(format!("bias {:?} of shape {:?}", b.dtype, b.shape));
        }
        for (i, s) in sums.iter_mut().enumerate() {
            *s += b.data[channel(i)] as i64;
        }
    }
    let out = opt_input(inputs, 7).map_or(input(node, inputs, 0)?.dtype, |z| z.dtype);
    let data = requantize(&sums, inputs, node, m, channel, out)?;
    Ok(vec![make_output(out, shape, data, vec![])?])
}

fn dynamic_quantize(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    if x.dtype != DType::F32 {
        return unsupported(format!("DynamicQuantizeLinear of {:?}", x.dtype));
    }
    let xs: Vec<f32> = x.data.iter().map(|&v| v as f32).collect();
    if xs.iter().any(|v| !v.is_finite()) {
        return unsupported("NaN or infinite inputs");
    }
    let (mut lo, mut hi) = (0f32, 0f32);
    for &v in &xs {
        if v < lo {
            lo = v;
        }
        if v > hi {
            hi = v;
        }
    }
    let range = if hi == lo { 1.0f32 } else { hi - lo };
    let scale = range / 255.0f32;
    let zp = round_half_even(((0.0f32 - lo / scale) as f64).clamp(0.0, 255.0));
    let y: Vec<f64> = xs
        .iter()
        .map(|&v| (round_half_even((v / scale) as f64) + zp).clamp(0.0, 255.0))
        .collect();
    let n = y.len();
    Ok(vec![
        make_output(DType::U8, x.shape.clone(), y, vec![0.0; n])?,
        make_output(
            DType::F32,
            vec![],
            vec![scale as f64],
            vec![scale.abs() as f64],
        )?,
        make_output(DType::U8, vec![], vec![zp], vec![0.0])?,
    ])
}
