//! onnxruntime's quantized contrib ops (domain `com.microsoft`), which its QOperator quantizer
//! (`quantize_static(..., QuantFormat.QOperator)`) writes for the ops between convolutions:
//! QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool,
//! QLinearConcat and QGemm. Without them such a model does not load.
//!
//! Each op is defined by its formula on the dequantized values (onnxruntime's contrib operator
//! documentation), `y = saturate(round(f(dequantize(x…)) / y_scale) + y_zero_point)`. Here `f` is
//! computed in f64 from the exact dequantized values (an 8-bit level times an f32 scale is exact in
//! f64) and rounded once, ties to even, into the zero point's type; sums of levels (the pool, the
//! product's) are exact integers. onnxruntime computes the same formulas in f32, so where a value
//! lies within f32 rounding of an edge between two levels its output can be one level away.
//!
//! Every 8-bit input has 256 possible values, so the one-input ops are a table of 256 levels made
//! once per call, and the two-input ones read two 256-entry tables of dequantized values.
use ndarray::{ArrayD, Axis, IxDyn};

use super::int::{centered, matmul_f64};
use super::int_range;
use crate::error::OpResult;
use crate::ops::broadcast;
use crate::ops::cast::to_f64_vec;
use crate::ops::{OpCtx, Registry, input, norm_axis, opt_input, single};
use crate::tensor::{DType, Tensor, Value};
use crate::{bail, unsupported};

/// onnxruntime's contrib domain.
pub const DOMAIN: &str = "com.microsoft";

pub fn register(r: &mut Registry) {
    r.add(DOMAIN, "QLinearAdd", |ctx, inputs| {
        binary(ctx, inputs, |a, b| a + b)
    });
    r.add(DOMAIN, "QLinearMul", |ctx, inputs| {
        binary(ctx, inputs, |a, b| a * b)
    });
    r.add(DOMAIN, "QLinearSigmoid", |ctx, inputs| {
        unary(ctx, inputs, |x| 1.0 / (1.0 + (-x).exp()))
    });
    r.add(DOMAIN, "QLinearLeakyRelu", |ctx, inputs| {
        let alpha = f64::from(ctx.attr_f("alpha", 0.01)?);
        unary(ctx, inputs, move |x| if x < 0.0 { alpha * x } else { x })
    });
    r.add(DOMAIN, "QLinearGlobalAveragePool", global_average_pool);
    r.add(DOMAIN, "QLinearConcat", concat);
    r.add(DOMAIN, "QGemm", gemm);
}

/// One per-tensor quantization: a scale, a zero point and the 8-bit type they describe.
#[derive(Debug, Clone, Copy)]
struct Quant {
    scale: f64,
    zero: f64,
    dtype: DType,
    /// The type's levels, `[lo, hi]`.
    lo: f64,
    hi: f64,
}

impl Quant {
    /// The quantization of inputs `scale` and `zero` (absent: 0 of `dtype`, the data's type when
    /// known, else u8). Both must be scalars; the zero point fixes the type where it is given.
    fn of(
        inputs: &[Option<&Value>],
        scale: usize,
        zero: usize,
        dtype: Option<DType>,
        what: &str,
    ) -> OpResult<Quant> {
        let s = input(inputs, scale)?;
        let z = opt_input(inputs, zero)?;
        let one = |t: &Tensor, name: &str| -> OpResult<f64> {
            match to_f64_vec(t)?.as_slice() {
                [v] => Ok(*v),
                _ => bail!(
                    "{what}'s {name} must be a scalar, got shape {:?}",
                    t.shape()
                ),
            }
        };
        if s.dtype() != DType::F32 {
            bail!("{what}'s scale must be float, got {}", s.dtype());
        }
        let dtype = match (z.map(Tensor::dtype), dtype) {
            (Some(zd), Some(d)) if zd != d => {
                bail!("{what}'s zero point is {zd} where its data is {d}")
            }
            (Some(d), _) | (None, Some(d)) => d,
            (None, None) => DType::U8,
        };
        if !matches!(dtype, DType::U8 | DType::I8) {
            unsupported!("{what} of type {dtype} (expected uint8 or int8)");
        }
        let (lo, hi) = int_range(dtype).unwrap_or((0, 255));
        Ok(Quant {
            scale: one(s, "scale")?,
            zero: z.map(|z| one(z, "zero point")).transpose()?.unwrap_or(0.0),
            dtype,
            lo: lo as f64,
            hi: hi as f64,
        })
    }

    /// The value of a byte of this type (i8 as its two's complement).
    fn level(&self, byte: u8) -> f64 {
        if self.dtype == DType::I8 {
            f64::from(byte as i8)
        } else {
            f64::from(byte)
        }
    }

    /// The dequantized value of every byte.
    fn values(&self) -> [f64; 256] {
        std::array::from_fn(|b| (self.level(b as u8) - self.zero) * self.scale)
    }

    /// `v` quantized: the nearest level (ties to even) past the zero point, saturated, as a byte
    /// of this type.
    #[inline(always)]
    fn quantize(&self, v: f64) -> u8 {
        let (lo, hi) = (self.lo, self.hi);
        // Saturated first (to a level past each end, which then saturates the same way), so that
        // the rounding below sees |x| ≤ 2⁹: adding and taking away 1.5·2⁵² leaves x rounded to
        // the nearest integer, ties to even (the default rounding of the add), without the
        // library call `round_ties_even` compiles to on baseline x86-64.
        const ROUND: f64 = 6_755_399_441_055_744.0;
        let x = (v / self.scale).clamp(lo - self.zero - 1.0, hi - self.zero + 1.0);
        let l = ((x + ROUND) - ROUND + self.zero).clamp(lo, hi);
        // NaN (a zero or NaN scale) saturates to 0 through `as`.
        l as i64 as u8
    }
}

/// The bytes of an 8-bit tensor as a u8 array of its shape (i8 as its two's complement).
fn byte_array(t: &Tensor, what: &str) -> OpResult<ArrayD<u8>> {
    match t {
        Tensor::U8(a) => Ok(a.clone()),
        Tensor::I8(a) => Ok(a.mapv(|v| v as u8)),
        _ => unsupported!("{what} of type {} (expected uint8 or int8)", t.dtype()),
    }
}

/// Bytes of `dtype` (u8 or i8) as a tensor.
fn tensor_of(bytes: ArrayD<u8>, dtype: DType) -> Tensor {
    if dtype == DType::I8 {
        Tensor::I8(bytes.mapv(|v| v as i8))
    } else {
        Tensor::U8(bytes)
    }
}

/// QLinearAdd and QLinearMul: A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale,
/// C_zero_point; `C = f(A's values, B's values)` with broadcasting.
fn binary(_: &OpCtx, inputs: &[Option<&Value>], f: fn(f64, f64) -> f64) -> OpResult<Vec<Value>> {
    let (a, b) = (input(inputs, 0)?, input(inputs, 3)?);
    if a.dtype() != b.dtype() {
        bail!(
            "A is {} and B is {}: they must have one type",
            a.dtype(),
            b.dtype()
        );
    }
    let qa = Quant::of(inputs, 1, 2, Some(a.dtype()), "A")?;
    let qb = Quant::of(inputs, 4, 5, Some(b.dtype()), "B")?;
    let qc = Quant::of(inputs, 6, 7, Some(a.dtype()), "C")?;
    let (va, vb) = (qa.values(), qb.values());
    let c = broadcast::binary(
        &byte_array(a, "A")?,
        &byte_array(b, "B")?,
        |x: u8, y: u8| qc.quantize(f(va[x as usize], vb[y as usize])),
    )?;
    single(tensor_of(c, qc.dtype))
}

/// QLinearSigmoid and QLinearLeakyRelu: X, X_scale, X_zero_point, Y_scale, Y_zero_point; `Y =
/// f(X's values)`, a table of the 256 possible outputs.
fn unary(_: &OpCtx, inputs: &[Option<&Value>], f: impl Fn(f64) -> f64) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let qx = Quant::of(inputs, 1, 2, Some(x.dtype()), "X")?;
    let qy = Quant::of(inputs, 3, 4, Some(x.dtype()), "Y")?;
    let values = qx.values();
    let table: [u8; 256] = std::array::from_fn(|b| qy.quantize(f(values[b])));
    let y = broadcast::unary(&byte_array(x, "X")?, |b: u8| table[b as usize]);
    single(tensor_of(y, qy.dtype))
}

/// QLinearGlobalAveragePool: X, x_scale, x_zero_point, y_scale, y_zero_point; the mean of each
/// channel's values over the spatial dims (channels second, or last with `channels_last`), the
/// levels summed exactly.
fn global_average_pool(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let qx = Quant::of(inputs, 1, 2, Some(x.dtype()), "X")?;
    let qy = Quant::of(inputs, 3, 4, Some(x.dtype()), "Y")?;
    let shape = x.shape().to_vec();
    if shape.len() < 3 {
        bail!("X of shape {shape:?} must have a batch, a channel and spatial dims");
    }
    let last = ctx.attr_i("channels_last", 0)? != 0;
    let c_axis = if last { shape.len() - 1 } else { 1 };
    let (n, c) = (shape[0], shape[c_axis]);
    let spatial: usize = shape.iter().product::<usize>() / (n * c).max(1);
    let data = byte_array(x, "X")?;
    let data = data.as_standard_layout();
    let flat = data.as_slice().unwrap_or(&[]);
    let mut out = vec![0u8; n * c];
    for (i, o) in out.iter_mut().enumerate() {
        let (b, ch) = (i / c.max(1), i % c.max(1));
        // The channel's levels: a plane (channels first) or a stride-c run (channels last).
        let sum: i64 = if last {
            (0..spatial)
                .map(|p| qx.level(flat[(b * spatial + p) * c + ch]) as i64)
                .sum()
        } else {
            flat[(b * c + ch) * spatial..][..spatial]
                .iter()
                .map(|&v| qx.level(v) as i64)
                .sum()
        };
        let mean = (sum as f64 / spatial.max(1) as f64 - qx.zero) * qx.scale;
        *o = qy.quantize(mean);
    }
    let mut out_shape = vec![1usize; shape.len()];
    out_shape[0] = n;
    out_shape[c_axis] = c;
    single(tensor_of(
        ArrayD::from_shape_vec(IxDyn(&out_shape), out)?,
        qy.dtype,
    ))
}

/// QLinearConcat: Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input; each input's
/// values requantized to Y's parameters, concatenated along `axis`.
fn concat(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    if inputs.len() < 5 || !(inputs.len() - 2).is_multiple_of(3) {
        bail!(
            "QLinearConcat takes Y_scale, Y_zero_point and triples (X, scale, zero point), got {} inputs",
            inputs.len()
        );
    }
    let first = input(inputs, 2)?;
    let qy = Quant::of(inputs, 0, 1, None, "Y")?;
    let axis = norm_axis(ctx.attr_i("axis", 0)?, first.rank())?;
    let mut parts = Vec::new();
    for k in (2..inputs.len()).step_by(3) {
        let x = input(inputs, k)?;
        let what = format!("input {}", (k - 2) / 3);
        let qx = Quant::of(inputs, k + 1, k + 2, Some(x.dtype()), &what)?;
        let values = qx.values();
        let table: [u8; 256] = std::array::from_fn(|b| qy.quantize(values[b]));
        parts.push(byte_array(x, &what)?.mapv(|b| table[b as usize]));
    }
    let views: Vec<_> = parts.iter().map(|p| p.view()).collect();
    let y = ndarray::concatenate(Axis(axis), &views).map_err(|e| {
        crate::error::OpError::Invalid(format!("inputs do not concatenate on axis {axis}: {e}"))
    })?;
    single(tensor_of(y, qy.dtype))
}

/// QGemm: A, a_scale, a_zero_point, B, b_scale (scalar or per column), b_zero_point (likewise), C
/// (i32, scale alpha·a_scale·b_scale), y_scale, y_zero_point; attributes alpha, transA, transB.
/// `Y = alpha·a_scale·b_scale·(Σ(A − az)(B − bz) + C)`, quantized where y_scale is given, f32
/// otherwise. The sum is exact (integers in f64).
fn gemm(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let oriented = |t: &Tensor, trans: bool, what: &str| -> OpResult<Tensor> {
        if t.rank() != 2 {
            bail!("{what} of shape {:?} must be a matrix", t.shape());
        }
        Ok(match (t, trans) {
            (_, false) => t.clone(),
            (Tensor::U8(a), true) => Tensor::U8(a.t().as_standard_layout().into_owned()),
            (Tensor::I8(a), true) => Tensor::I8(a.t().as_standard_layout().into_owned()),
            _ => unsupported!("{what} of type {} (expected uint8 or int8)", t.dtype()),
        })
    };
    let a = oriented(input(inputs, 0)?, ctx.attr_i("transA", 0)? != 0, "A")?;
    let b = oriented(input(inputs, 3)?, ctx.attr_i("transB", 0)? != 0, "B")?;
    let (m, k, n) = (a.shape()[0], a.shape()[1], b.shape()[1]);
    if b.shape()[0] != k {
        bail!("A' {:?} and B' {:?} do not multiply", a.shape(), b.shape());
    }
    let qa = Quant::of(inputs, 1, 2, Some(a.dtype()), "A")?;
    let (bs, bz) = (input(inputs, 4)?, opt_input(inputs, 5)?);
    let b_scales = to_f64_vec(bs)?;
    if !(b_scales.len() == 1 || (b_scales.len() == n && bs.rank() == 1)) {
        bail!(
            "b_scale of shape {:?} must be a scalar or hold {n} values",
            bs.shape()
        );
    }
    if let Some(z) = bz
        && (z.dtype() != b.dtype() || z.len() != b_scales.len())
    {
        bail!(
            "b_zero_point ({} of shape {:?}) must match b_scale and B's type",
            z.dtype(),
            z.shape()
        );
    }
    let az = opt_input(inputs, 2)?;
    // The exact sums Σ(A − az)(B − bz): integers in f64 (`matmul_f64` multiplies exact values).
    let av = centered(&a, az, true, "A")?;
    let bv = centered(&b, bz, false, "B")?;
    let (sums, _) = matmul_f64(&av, a.shape(), &bv, b.shape())?;
    let bias: Option<ArrayD<f64>> = match opt_input(inputs, 6)? {
        None => None,
        Some(c) if c.dtype() == DType::I32 => {
            let v = ArrayD::from_shape_vec(IxDyn(c.shape()), to_f64_vec(c)?)?;
            Some(broadcast::view_as(&v, &[m, n])?.to_owned())
        }
        Some(c) => bail!("C must be int32, got {}", c.dtype()),
    };
    let alpha = f64::from(ctx.attr_f("alpha", 1.0)?);
    let real = |i: usize| {
        let (r, j) = (i / n.max(1), i % n.max(1));
        let scale = alpha * qa.scale * b_scales[if b_scales.len() == 1 { 0 } else { j }];
        scale * (sums[i] + bias.as_ref().map_or(0.0, |c| c[[r, j]]))
    };
    match opt_input(inputs, 7)? {
        None => {
            let y: Vec<f32> = (0..m * n).map(|i| real(i) as f32).collect();
            single(Tensor::from_f32(&[m, n], y)?)
        }
        Some(_) => {
            let qy = Quant::of(inputs, 7, 8, None, "Y")?;
            let y: Vec<u8> = (0..m * n).map(|i| qy.quantize(real(i))).collect();
            single(tensor_of(
                ArrayD::from_shape_vec(IxDyn(&[m, n]), y)?,
                qy.dtype,
            ))
        }
    }
}

#[cfg(test)]
mod tests;
