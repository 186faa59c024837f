//! QuantizeLinear and DequantizeLinear: per tensor or per axis, with and without a zero point, the
//! integer types of each opset; quotients on ties (power-of-two scales with half-step inputs),
//! saturation (inputs beyond the range) and NaN. MatMulInteger: u8 and i8 operands (each), zero
//! points none, per tensor, per row of A or per column of B, B shared or batched like A.
//! ConvInteger: Conv's geometries (1-D to 3-D, groups, depthwise, strides, dilations, pads,
//! auto_pad) over u8 and i8 operands, X's zero point none or per tensor, W's none, per tensor or
//! per output channel. QLinearMatMul and QLinearConv: the same forms, f32 scales (B's and W's per
//! column or output channel too; powers of two sometimes, so that the requantized values fall on
//! ties), y's scale near the sums' reach or far inside it (saturation), biases of QLinearConv, y's
//! zero point present or not. DynamicQuantizeLinear: signed, one-signed and half-step inputs (quotients on ties).
use quorum_oracle::{DType, Value};

use super::{Case, Dist, Gen};

pub(super) fn generate(op: &'static str, g: &mut Gen) -> Option<Case> {
    Some(match op {
        "QuantizeLinear" => quantize(g),
        "DequantizeLinear" => dequantize(g),
        "MatMulInteger" => matmul_integer(g),
        "ConvInteger" => conv_integer(g),
        "QLinearMatMul" => qlinear_matmul(g),
        "QLinearConv" => qlinear_conv(g),
        "DynamicQuantizeLinear" => dynamic_quantize(g),
        _ => return None,
    })
}

/// The opset, the input's shape and, per axis, the (signed) axis and its dim.
fn layout(g: &mut Gen) -> (i64, Vec<usize>, Option<(i64, usize)>) {
    let opset = g.pick(&[21, 19, 13, 10]);
    let shape = g.shape(0, 4, true);
    let per_axis = opset >= 13 && !shape.is_empty() && g.chance(40);
    let axis = per_axis.then(|| {
        let a = g.size(0, shape.len() - 1);
        (g.signed_axis(a, shape.len()), shape[a])
    });
    (opset, shape, axis)
}

/// A positive scale of `n` elements (a scalar when `scalar`): powers of two (exact quotients, so
/// that half-step inputs are ties) or any value in [0.01, 2].
fn scales(g: &mut Gen, n: usize, scalar: bool, pow2: bool) -> Value {
    let shape = if scalar { vec![] } else { vec![n] };
    let data = (0..n)
        .map(|_| {
            if pow2 {
                2f64.powi(g.value_int(-4, 2) as i32)
            } else {
                (0.01 + g.uniform() * 1.99) as f32 as f64
            }
        })
        .collect();
    Value::new(DType::F32, shape, data).expect("shape matches")
}

/// The quantized types of `opset` with their ranges.
fn int_types(opset: i64) -> &'static [(DType, i64, i64)] {
    const ALL: [(DType, i64, i64); 4] = [
        (DType::U8, 0, 255),
        (DType::I8, -128, 127),
        (DType::U16, 0, 65535),
        (DType::I16, -32768, 32767),
    ];
    if opset >= 21 { &ALL } else { &ALL[..2] }
}

fn quantize(g: &mut Gen) -> Case {
    let (opset, shape, axis) = layout(g);
    let pow2 = g.chance(50);
    let n = axis.map_or(1, |a| a.1);
    let scale = scales(g, n, axis.is_none(), pow2);
    let (ty, lo, hi) = g.pick(int_types(opset));
    let with_zp = g.chance(70);
    // Inputs reach a little past both ends of the range: with exact scales, whole and half
    // quanta (ties, whose rounding is to even); otherwise anywhere.
    let inner = axis.map_or(1, |(a, _)| {
        let a = if a < 0 { a + shape.len() as i64 } else { a } as usize;
        shape[a + 1..].iter().product::<usize>()
    });
    let count: usize = shape.iter().product();
    let reach = ((hi - lo) / 8).max(4);
    let mut x = if pow2 {
        let data = (0..count)
            .map(|i| {
                let q = g.value_int(lo - reach, hi + reach) as f64 + 0.5 * g.value_int(0, 1) as f64;
                q * scale.data[(i / inner) % n]
            })
            .collect();
        Value::new(DType::F32, shape.clone(), data).expect("shape matches")
    } else {
        let big = (hi - lo + 2 * reach) as f64 * scale.data.iter().cloned().fold(0.0, f64::max);
        g.floats(&shape, Dist::Signed(big))
    };
    g.maybe_nan(&mut x, 10);
    let mut c = Case::new("QuantizeLinear", opset, g.seed);
    if let Some((a, _)) = axis {
        c.int("axis", a);
    }
    c.input(x).input(scale);
    if with_zp {
        let zp_shape = if axis.is_some() { vec![n] } else { vec![] };
        let zp = g.ints(ty, &zp_shape, lo.max(-100), hi.min(100));
        c.input(zp);
    } else if ty != DType::U8 && opset >= 21 {
        c.int(
            "output_dtype",
            match ty {
                DType::I8 => 3,
                DType::U16 => 4,
                _ => 5,
            },
        );
    }
    c
}

fn dequantize(g: &mut Gen) -> Case {
    let (opset, shape, axis) = layout(g);
    let n = axis.map_or(1, |a| a.1);
    let pow2 = g.chance(30);
    let scale = scales(g, n, axis.is_none(), pow2);
    // int32 (a bias) has no zero point.
    let (ty, lo, hi) = if g.chance(15) {
        (DType::I32, -(1 << 20), 1 << 20)
    } else {
        g.pick(int_types(opset))
    };
    let x = g.ints(ty, &shape, lo, hi);
    let mut c = Case::new("DequantizeLinear", opset, g.seed);
    if let Some((a, _)) = axis {
        c.int("axis", a);
    }
    c.input(x).input(scale);
    if ty != DType::I32 && g.chance(70) {
        let zp_shape = if axis.is_some() { vec![n] } else { vec![] };
        c.input(g.ints(ty, &zp_shape, lo.max(-100), hi.min(100)));
    }
    c
}

/// An 8-bit product's shapes (A's and B's, with m, k and n): A batched or not, B a weight shared
/// by A's batches or batched like A.
#[allow(clippy::type_complexity)]
fn product_shapes(g: &mut Gen) -> (Vec<usize>, Vec<usize>, (usize, usize, usize)) {
    let (m, k, n) = (g.dim(), g.size(1, 40), g.dim());
    let batch: Vec<usize> = if g.chance(40) {
        vec![g.size(1, 3)]
    } else {
        vec![]
    };
    let shared = batch.is_empty() || g.chance(50);
    let a_shape: Vec<usize> = batch.iter().copied().chain([m, k]).collect();
    let b_shape: Vec<usize> = if shared {
        vec![k, n]
    } else {
        batch.iter().copied().chain([k, n]).collect()
    };
    (a_shape, b_shape, (m, k, n))
}

fn matmul_integer(g: &mut Gen) -> Case {
    let (a_shape, b_shape, (m, _, n)) = product_shapes(g);
    let ((ta, la, ha), (tb, lb, hb)) = (eight(g), eight(g));
    let mut c = Case::new("MatMulInteger", 10, g.seed);
    let a = g.ints(ta, &a_shape, la, ha);
    let b = g.ints(tb, &b_shape, lb, hb);
    c.input(a).input(b);
    // Zero points: A's none, scalar or per row; B's (only after A's, inputs being positional)
    // none, scalar or per column.
    let za = g.int(0, 2);
    if za > 0 {
        let shape = if za == 1 { vec![] } else { vec![m] };
        c.input(g.ints(ta, &shape, la, ha));
        let zb = g.int(0, 2);
        if zb > 0 {
            let shape = if zb == 1 { vec![] } else { vec![n] };
            c.input(g.ints(tb, &shape, lb, hb));
        }
    }
    c
}

fn conv_integer(g: &mut Gen) -> Case {
    let (mut c, x, w) = super::nn::conv_layout(g, "ConvInteger", 10);
    let ((tx, lx, hx), (tw, lw, hw)) = (eight(g), eight(g));
    c.input(g.ints(tx, &x, lx, hx))
        .input(g.ints(tw, &w, lw, hw));
    if g.chance(75) {
        c.input(g.ints(tx, &[], lx, hx));
        let zw = g.int(0, 2);
        if zw > 0 {
            let shape = if zw == 1 { vec![] } else { vec![w[0]] };
            c.input(g.ints(tw, &shape, lw, hw));
        }
    }
    c
}

/// An 8-bit type with its range.
fn eight(g: &mut Gen) -> (DType, i64, i64) {
    g.pick(&[(DType::U8, 0, 255), (DType::I8, -128, 127)])
}

/// The requantizing ops' scales: x's, w's (one, or `lines` of them) and y's, with the multiplier
/// `x · w / y` putting `k`-term sums (about `√k · 74²` from their center) at about ±60: powers of
/// two on every side half the time (ties), a y's scale 30 times smaller one time in eight
/// (saturation).
fn qlinear_scales(g: &mut Gen, lines: usize, k: usize) -> (Value, Value, Value) {
    let pow2 = g.chance(50);
    let one = |g: &mut Gen| {
        if pow2 {
            2f64.powi(-(g.value_int(2, 8) as i32))
        } else {
            (0.001 + g.uniform() * 0.05) as f32 as f64
        }
    };
    let x = one(g);
    let per = lines > 1 && g.chance(50);
    let w: Vec<f64> = (0..if per { lines } else { 1 }).map(|_| one(g)).collect();
    let reach = (k.max(1) as f64).sqrt() * 74.0 * 74.0 / 60.0;
    let mut y = x * w[0] * reach;
    if pow2 {
        y = 2f64.powi(y.log2().round() as i32);
    }
    if g.chance(12) {
        y /= 32.0;
    }
    let scalar = |v: f64| Value::new(DType::F32, vec![], vec![v as f32 as f64]).expect("scalar");
    let w_shape = if per { vec![lines] } else { vec![] };
    let wv = Value::new(DType::F32, w_shape, w).expect("shape matches");
    (scalar(x), wv, scalar(y))
}

fn qlinear_matmul(g: &mut Gen) -> Case {
    let opset = g.pick(&[10, 21]);
    let (a_shape, b_shape, (_, k, n)) = product_shapes(g);
    let ((ta, la, ha), (tb, lb, hb)) = (eight(g), eight(g));
    let (sa, sb, sy) = qlinear_scales(g, n, k);
    let mut c = Case::new("QLinearMatMul", opset, g.seed);
    c.input(g.ints(ta, &a_shape, la, ha)).input(sa);
    if g.chance(75) {
        c.input(g.ints(ta, &[], la, ha));
    } else {
        c.omit();
    }
    c.input(g.ints(tb, &b_shape, lb, hb)).input(sb);
    if g.chance(75) {
        c.input(g.ints(tb, &[], lb, hb));
    } else {
        c.omit();
    }
    c.input(sy);
    if g.chance(75) {
        let (ty, ly, hy) = eight(g);
        c.input(g.ints(ty, &[], ly.max(-100), hy.min(200)));
    }
    c.trim()
}

fn qlinear_conv(g: &mut Gen) -> Case {
    let (mut c, x, w) = super::nn::conv_layout(g, "QLinearConv", 10);
    let ((tx, lx, hx), (tw, lw, hw)) = (eight(g), eight(g));
    let m = w[0];
    let k: usize = w[1..].iter().product();
    let (sx, sw, sy) = qlinear_scales(g, m, k);
    c.input(g.ints(tx, &x, lx, hx)).input(sx);
    if g.chance(75) {
        c.input(g.ints(tx, &[], lx, hx));
    } else {
        c.omit();
    }
    c.input(g.ints(tw, &w, lw, hw)).input(sw);
    match g.int(0, 2) {
        0 => c.omit(),
        1 => c.input(g.ints(tw, &[], lw, hw)),
        _ => c.input(g.ints(tw, &[m], lw, hw)),
    };
    c.input(sy);
    let bias = g.chance(60);
    if g.chance(75) {
        c.input(g.ints(tx, &[], lx.max(-100), hx.min(200)));
    } else if bias {
        c.omit();
    }
    if bias {
        c.input(g.ints(DType::I32, &[m], -5000, 5000));
    }
    c.trim()
}

fn dynamic_quantize(g: &mut Gen) -> Case {
    let shape = g.shape(0, 4, true);
    let x = match g.int(0, 3) {
        0 => g.floats(&shape, Dist::Range(0.0, 9.0)),
        1 => g.floats(&shape, Dist::Range(-9.0, 0.0)),
        2 => g.floats(&shape, Dist::Halves(127.5)),
        _ => g.floats(&shape, Dist::Signed(4.0)),
    };
    let mut c = Case::new("DynamicQuantizeLinear", 11, g.seed);
    c.input(x);
    c.outputs(3);
    c
}
