//! Quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear here, and the integer
//! matmul/conv ops in the child module `quantize/int.rs`.
//!
//! Values travel as f64, exact for every quantized type; each result is rounded once to its type.
use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};
use rayon::prelude::*;

use super::broadcast::{self, PAR_THRESHOLD, par_fill};
use super::cast::{FromV, V, encode_narrow, round_to, to_f64_vec};
use super::{OpCtx, Registry, input, norm_axis, opt_input, single};
use crate::error::OpResult;
use crate::tensor::{DType, Tensor, Value};
use crate::{bail, unsupported};

pub mod contrib;
pub mod fake;
mod int;
mod int8;

pub fn register(r: &mut Registry) {
    r.add("", "QuantizeLinear", quantize_linear);
    r.add("", "DequantizeLinear", dequantize_linear);
    r.add("", "DynamicQuantizeLinear", dynamic_quantize_linear);
    r.add("", "MatMulInteger", int::matmul_integer);
    r.add("", "QLinearMatMul", int::qlinear_matmul);
    r.add("", "ConvInteger", int::conv_integer);
    r.add("", "QLinearConv", int::qlinear_conv);
    fake::register(r);
    contrib::register(r);
}

fn dtype_attr(code: i64) -> OpResult<DType> {
    match i32::try_from(code).ok().and_then(DType::from_onnx) {
        Some(d) => Ok(d),
        None => bail!("unknown data type code {code}"),
    }
}

/// `f(i)` for i in 0..n, in parallel when large.
fn collect<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync + Send) -> Vec<T> {
    if n >= PAR_THRESHOLD {
        (0..n).into_par_iter().map(f).collect()
    } else {
        (0..n).map(f).collect()
    }
}

/// Saturation range of the integer quantized types.
pub fn int_range(d: DType) -> Option<(i64, i64)> {
    Some(match d {
        DType::U8 => (0, 255),
        DType::I8 => (-128, 127),
        DType::U16 => (0, 65535),
        DType::I16 => (-32768, 32767),
        DType::U4 => (0, 15),
        DType::I4 => (-8, 7),
        DType::U2 => (0, 3),
        DType::I2 => (-2, 1),
        DType::I32 => (i32::MIN as i64, i32::MAX as i64),
        _ => return None,
    })
}

/// A tensor of integer type `d` (already in range) from `f(i)`.
fn int_tensor(
    d: DType,
    shape: &[usize],
    f: impl Fn(usize) -> i64 + Sync + Send,
) -> OpResult<Tensor> {
    let n = shape.iter().product();
    let s = IxDyn(shape);
    Ok(match d {
        DType::U8 => Tensor::U8(ArrayD::from_shape_vec(s, collect(n, |i| f(i) as u8))?),
        DType::I8 => Tensor::I8(ArrayD::from_shape_vec(s, collect(n, |i| f(i) as i8))?),
        DType::U16 => Tensor::U16(ArrayD::from_shape_vec(s, collect(n, |i| f(i) as u16))?),
        DType::I16 => Tensor::I16(ArrayD::from_shape_vec(s, collect(n, |i| f(i) as i16))?),
        DType::I32 => Tensor::I32(ArrayD::from_shape_vec(s, collect(n, |i| f(i) as i32))?),
        DType::U4 | DType::I4 | DType::U2 | DType::I2 => Tensor::Packed(
            d,
            ArrayD::from_shape_vec(s, collect(n, |i| f(i) as i8 as u8))?,
        ),
        d => unsupported!("integer output of type {d}"),
    })
}

/// A tensor of float type `d` from `f(i)`, each value rounded once to `d` (narrow formats saturate).
fn float_tensor(
    d: DType,
    shape: &[usize],
    saturate: bool,
    f: impl Fn(usize) -> f64 + Sync + Send,
) -> OpResult<Tensor> {
    let n = shape.iter().product();
    let s = IxDyn(shape);
    Ok(match d {
        DType::F32 => Tensor::F32(ArrayD::from_shape_vec(s, collect(n, |i| f(i) as f32))?),
        DType::F64 => Tensor::F64(ArrayD::from_shape_vec(s, collect(n, f))?),
        DType::F16 => Tensor::F16(ArrayD::from_shape_vec(
            s,
            collect(n, |i| f16::from_v(V::F(f(i)))),
        )?),
        DType::BF16 => Tensor::BF16(ArrayD::from_shape_vec(
            s,
            collect(n, |i| bf16::from_v(V::F(f(i)))),
        )?),
        d if d.is_narrow_float() => {
            encode_narrow(d, 0.0, saturate)?; // refuses formats without an encoder
            let v = collect(n, |i| encode_narrow(d, f(i), saturate).unwrap_or(0));
            Tensor::Packed(d, ArrayD::from_shape_vec(s, v)?)
        }
        d => unsupported!("float output of type {d}"),
    })
}

/// Where the scale and zero point of each element of `x` are: one for all, one per index along
/// `axis`, or one per block of `block` indices along `axis`. Read from shapes alone, so that a
/// device kernel lays its parameters out as this kernel does.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    pub blocked: bool,
    pub single: bool,
    /// Elements after `axis`, the length of `axis`, and the scale's length along it.
    pub inner: usize,
    pub d: usize,
    pub s: usize,
    pub block: usize,
}

impl Layout {
    /// The layout of an input of shape `xs` with a scale of shape `ss` and a zero point of shape
    /// `zs`, from the node's `axis` and `block_size`.
    pub fn new(
        xs: &[usize],
        ss: &[usize],
        zs: Option<&[usize]>,
        axis: i64,
        block: i64,
    ) -> OpResult<Layout> {
        let len = |s: &[usize]| s.iter().product::<usize>();
        if let Some(z) = zs
            && z != ss
            && !(len(z) == 1 && len(ss) == 1)
        {
            bail!("zero point shape {z:?} differs from scale shape {ss:?}");
        }
        let scale_len = len(ss);
        let single = Layout {
            blocked: false,
            single: true,
            inner: 1,
            d: 1,
            s: 1,
            block: 1,
        };
        if scale_len == 1 && (block <= 0 || ss.len() <= 1) {
            return Ok(single);
        }
        if xs.is_empty() {
            bail!("a scalar input takes only a scalar scale, got {ss:?}");
        }
        let ax = norm_axis(axis, xs.len())?;
        let inner: usize = xs[ax + 1..].iter().product();
        let d = xs[ax];
        if block <= 0 {
            if ss.len() != 1 || ss[0] != d {
                bail!(
                    "per-axis scale must be 1-D of length {d} (axis {axis} of {xs:?}), got {ss:?}"
                );
            }
            return Ok(Layout {
                blocked: false,
                single: false,
                inner,
                d,
                s: d,
                block: 1,
            });
        }
        let b = block as usize;
        let ok = ss.len() == xs.len()
            && ss
                .iter()
                .zip(xs)
                .enumerate()
                .all(|(i, (&s, &x))| if i == ax { s == x.div_ceil(b) } else { s == x });
        if !ok {
            bail!(
                "blocked scale shape {ss:?} does not fit input {xs:?} with axis {axis} and block size {block}"
            );
        }
        Ok(Layout {
            blocked: true,
            single: false,
            inner,
            d,
            s: ss[ax],
            block: b,
        })
    }

    /// The scale index of flat element `i`.
    #[inline]
    pub fn index(&self, i: usize) -> usize {
        if self.single {
            0
        } else if !self.blocked {
            (i / self.inner) % self.d
        } else {
            let o = i / (self.inner * self.d);
            let r = i % (self.inner * self.d);
            (o * self.s + (r / self.inner) / self.block) * self.inner + r % self.inner
        }
    }
}

/// The more precise of two float types (f16 with bf16 gives f32); a non-float side yields the other.
fn wider(a: DType, b: DType) -> DType {
    let rank = |d: DType| match d {
        DType::F64 => 4,
        DType::F32 => 3,
        DType::F16 | DType::BF16 => 2,
        _ => 0,
    };
    match (rank(a), rank(b)) {
        (0, 0) => DType::F32,
        (ra, rb) if ra == rb && a != b => DType::F32,
        (ra, rb) => {
            if ra >= rb {
                a
            } else {
                b
            }
        }
    }
}

/// The node's `block_size` (0 before opset 21: no blocks).
pub fn block_size(ctx: &OpCtx) -> OpResult<i64> {
    if ctx.opset() >= 21 {
        ctx.attr_i("block_size", 0)
    } else {
        Ok(0)
    }
}

/// QuantizeLinear's output type: the zero point's, else `output_dtype`, else u8.
pub fn quantized_type(ctx: &OpCtx, zp: Option<DType>) -> OpResult<DType> {
    Ok(match (zp, ctx.attr_i("output_dtype", 0)?) {
        (Some(z), 0) => z,
        (Some(z), o) => {
            let d = dtype_attr(o)?;
            if d != z {
                bail!("output_dtype {d} differs from the zero point's type {z}");
            }
            d
        }
        (None, 0) => DType::U8,
        (None, o) => dtype_attr(o)?,
    })
}

/// The type QuantizeLinear divides in: `precision`, else the wider of x's and the scale's types
/// (numpy's promotion, which the reference implementation computes).
pub fn division_type(ctx: &OpCtx, x: DType, scale: DType) -> OpResult<DType> {
    Ok(match ctx.attr_i("precision", 0)? {
        0 => wider(x, scale),
        p => dtype_attr(p)?,
    })
}

/// DequantizeLinear's output type: `output_dtype`, else the scale's (f32 for a narrow scale).
pub fn dequantized_type(ctx: &OpCtx, scale: DType) -> OpResult<DType> {
    let out = match ctx.attr_i("output_dtype", 0)? {
        0 if scale.is_float() && !scale.is_narrow_float() => scale,
        0 => DType::F32,
        o => dtype_attr(o)?,
    };
    if !matches!(out, DType::F32 | DType::F16 | DType::BF16 | DType::F64) {
        bail!("DequantizeLinear cannot produce {out}");
    }
    Ok(out)
}

fn quantize_linear(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let scale = input(inputs, 1)?;
    let zp = opt_input(inputs, 2)?;
    let opset = ctx.opset();
    let axis = ctx.attr_i("axis", 1)?;
    let block = block_size(ctx)?;
    let saturate = opset < 19 || ctx.attr_i("saturate", 1)? != 0;
    let out = quantized_type(ctx, zp.map(|z| z.dtype()))?;
    let prec = division_type(ctx, x.dtype(), scale.dtype())?;
    let lay = Layout::new(x.shape(), scale.shape(), zp.map(|z| z.shape()), axis, block)?;
    if lay.single
        && prec == DType::F32
        && let Some(y) = quantize_f32_per_tensor(x, scale, zp, out)?
    {
        return single(y);
    }
    let xv = to_f64_vec(x)?;
    let sv: Vec<f64> = to_f64_vec(scale)?
        .into_iter()
        .map(|s| round_to(prec, s))
        .collect();
    let zv = match zp {
        Some(z) => to_f64_vec(z)?,
        None => vec![0.0; sv.len()],
    };
    if zv.len() != sv.len() {
        bail!("zero point has {} elements, scale {}", zv.len(), sv.len());
    }
    let q = |i: usize| -> (f64, f64) {
        let j = lay.index(i);
        (round_to(prec, round_to(prec, xv[i]) / sv[j]), zv[j])
    };
    let shape = x.shape();
    if let Some((lo, hi)) = int_range(out).filter(|_| out != DType::I32) {
        return single(int_tensor(out, shape, |i| {
            let (v, z) = q(i);
            (v.round_ties_even() as i64)
                .saturating_add(z as i64)
                .clamp(lo, hi)
        })?);
    }
    let fp8 = matches!(
        out,
        DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ
    );
    if !(fp8 || matches!(out, DType::F4E2M1 | DType::F6E2M3 | DType::F6E3M2)) {
        bail!("QuantizeLinear cannot produce {out}");
    }
    // float8 ignores a zero zero-point (keeping -0); float4/6 add it like the reference does.
    single(float_tensor(out, shape, saturate, |i| {
        let (v, z) = q(i);
        if z != 0.0 || !fp8 { v + z } else { v }
    })?)
}

fn dequantize_linear(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let scale = input(inputs, 1)?;
    let zp = opt_input(inputs, 2)?;
    let axis = ctx.attr_i("axis", 1)?;
    let block = block_size(ctx)?;
    let out = dequantized_type(ctx, scale.dtype())?;
    if let Some(z) = zp
        && z.dtype() != x.dtype()
    {
        bail!(
            "zero point type {} differs from input type {}",
            z.dtype(),
            x.dtype()
        );
    }
    let lay = Layout::new(x.shape(), scale.shape(), zp.map(|z| z.shape()), axis, block)?;
    if lay.single
        && out == DType::F32
        && let Some(y) = dequantize_8bit_per_tensor(x, scale, zp)?
    {
        return single(y);
    }
    // Integers (and the float formats' values) are exact in f64, so x - zero_point is too.
    let xv = to_f64_vec(x)?;
    let sv = to_f64_vec(scale)?;
    let zv = match zp {
        Some(z) => to_f64_vec(z)?,
        None => vec![0.0; sv.len()],
    };
    if zv.len() != sv.len() {
        bail!("zero point has {} elements, scale {}", zv.len(), sv.len());
    }
    single(float_tensor(out, x.shape(), true, |i| {
        let j = lay.index(i);
        let v = xv[i];
        let dx = if zv[j] != 0.0 { v - zv[j] } else { v };
        dx * sv[j]
    })?)
}

/// The scalar value of a one-element scale or zero point.
fn scalar_f64(t: &Tensor) -> OpResult<f64> {
    Ok(to_f64_vec(t)?[0])
}

/// QuantizeLinear of an f32 tensor with one f32 scale to u8 or i8 (the activations of a QDQ
/// model), in f32 arithmetic: `x / s` of two f32 values rounded to f32 is the f64 quotient rounded
/// to f32 (53 ≥ 2·24 + 2, so rounding twice changes nothing), which is what the general path
/// computes; then ties to even, the zero point, saturation. `None` where the general path applies.
fn quantize_f32_per_tensor(
    x: &Tensor,
    scale: &Tensor,
    zp: Option<&Tensor>,
    out: DType,
) -> OpResult<Option<Tensor>> {
    let (Tensor::F32(xa), DType::F32) = (x, scale.dtype()) else {
        return Ok(None);
    };
    let Some((lo, hi)) = int_range(out).filter(|_| matches!(out, DType::U8 | DType::I8)) else {
        return Ok(None);
    };
    let s = scalar_f64(scale)? as f32;
    let z = match zp {
        Some(z) => scalar_f64(z)? as i32,
        None => 0,
    };
    let Some(xs) = xa.as_slice() else {
        return Ok(None);
    };
    // The level's formula is the kernels' (`quantize_level`), which a fused QuantizeLinear →
    // DequantizeLinear pair (`FakeQuant`) also computes: one formula for both.
    let (z, lo, hi) = (z as f32, lo as f32, hi as f32);
    let shape = IxDyn(x.shape());
    Ok(Some(match out {
        DType::U8 => {
            let mut o = vec![0u8; xs.len()];
            par_fill(&mut o, &|at, c: &mut [u8]| {
                quorum_kernels::quant::quantize_u8(&xs[at..], c, s, z, lo, hi)
            });
            Tensor::U8(ArrayD::from_shape_vec(shape, o)?)
        }
        _ => {
            let mut o = vec![0i8; xs.len()];
            par_fill(&mut o, &|at, c: &mut [i8]| {
                quorum_kernels::quant::quantize_i8(&xs[at..], c, s, z, lo, hi)
            });
            Tensor::I8(ArrayD::from_shape_vec(shape, o)?)
        }
    }))
}

/// DequantizeLinear of u8 or i8 with one f32 scale to f32: `x − z` is an integer of at most 9 bits,
/// exact in f32, and its product with the scale rounded once to f32 is what the general path gives
/// (its f64 product is exact, then rounded to f32).
fn dequantize_8bit_per_tensor(
    x: &Tensor,
    scale: &Tensor,
    zp: Option<&Tensor>,
) -> OpResult<Option<Tensor>> {
    if scale.dtype() != DType::F32 {
        return Ok(None);
    }
    let s = scalar_f64(scale)? as f32;
    let z = match zp {
        Some(z) => scalar_f64(z)? as i32,
        None => 0,
    };
    // Written once into the arena's storage, never zeroed first (zeroing a 3 MB activation cost
    // as much as the conversion).
    Ok(Some(Tensor::F32(match x {
        Tensor::U8(a) => broadcast::unary(a, |v| (v as i32 - z) as f32 * s),
        Tensor::I8(a) => broadcast::unary(a, |v| (v as i32 - z) as f32 * s),
        _ => return Ok(None),
    })))
}

/// The least and greatest of 0 and the values, NaNs ignored (`f32::min`/`max`'s rule, which any
/// order of comparison gives): sixteen lanes at a time (they vectorize), chunks across threads.
fn min_max(xv: &[f32]) -> (f32, f32) {
    fn lanes(c: &[f32]) -> (f32, f32) {
        const L: usize = 16;
        let (mut lo, mut hi) = ([0f32; L], [0f32; L]);
        let mut it = c.chunks_exact(L);
        for b in &mut it {
            for i in 0..L {
                lo[i] = lo[i].min(b[i]);
                hi[i] = hi[i].max(b[i]);
            }
        }
        let (mut l, mut h) = (0f32, 0f32);
        for &v in it.remainder().iter().chain(&lo) {
            l = l.min(v);
        }
        for &v in it.remainder().iter().chain(&hi) {
            h = h.max(v);
        }
        (l, h)
    }
    const CHUNK: usize = 1 << 16;
    if xv.len() < 2 * CHUNK {
        return lanes(xv);
    }
    xv.par_chunks(CHUNK)
        .map(lanes)
        .reduce(|| (0.0, 0.0), |a, b| (a.0.min(b.0), a.1.max(b.1)))
}

fn dynamic_quantize_linear(_ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let xv: std::borrow::Cow<[f32]> = match x {
        Tensor::F32(a) => match a.as_slice() {
            Some(s) => s.into(),
            None => a.iter().copied().collect::<Vec<f32>>().into(),
        },
        other => unsupported!(
            "DynamicQuantizeLinear of {} (only float32 is defined)",
            other.dtype()
        ),
    };
    let (lo, hi) = min_max(&xv);
    let scale = if hi == lo { 1.0f32 } else { hi - lo } / 255.0;
    let zp = (0.0 - lo / scale).clamp(0.0, 255.0).round_ties_even();
    // QuantizeLinear's level (`quorum_kernels::quant`: ties to even without libm, vectorized),
    // except that a NaN gives 0, as `as u8` of NaN after adding the zero point does.
    let mut o = vec![0u8; xv.len()];
    par_fill(&mut o, &|at, c: &mut [u8]| {
        quorum_kernels::quant::dynamic_quantize_u8(&xv[at..], c, scale, zp)
    });
    let y = Tensor::U8(ArrayD::from_shape_vec(IxDyn(x.shape()), o)?);
    Ok(vec![
        y.into(),
        Tensor::F32(ArrayD::from_elem(IxDyn(&[]), scale)).into(),
        Tensor::U8(ArrayD::from_elem(IxDyn(&[]), zp as u8)).into(),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *seed >> 33
    }

    /// The per-tensor fast paths against the definition written out in f64, on values that
    /// include ties, saturation, infinities and NaN.
    #[test]
    fn per_tensor_fast_paths_agree_with_the_definition() {
        let mut seed = 7u64;
        let mut xs: Vec<f32> = (0..70_000)
            .map(|_| (lcg(&mut seed) as i64 % 20_000 - 10_000) as f32 / 37.0)
            .collect();
        xs.extend([
            0.5,
            1.5,
            2.5,
            -0.5,
            -2.5,
            1e30,
            -1e30,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ]);
        let n = xs.len();
        let x = Tensor::F32(ArrayD::from_shape_vec(IxDyn(&[n]), xs.clone()).unwrap());
        for (out, zp, lo, hi) in [
            (DType::U8, 128i64, 0i64, 255i64),
            (DType::I8, -3, -128, 127),
        ] {
            for s in [1.0f32, 0.0371, 3.5] {
                let scale = Tensor::F32(ArrayD::from_elem(IxDyn(&[]), s));
                let z = int_tensor(out, &[], |_| zp).unwrap();
                let q = quantize_f32_per_tensor(&x, &scale, Some(&z), out)
                    .unwrap()
                    .expect("the fast path applies");
                let qv = to_f64_vec(&q).unwrap();
                for (i, &v) in xs.iter().enumerate() {
                    let want = ((((v as f64) / (s as f64)) as f32 as f64).round_ties_even() as i64)
                        .saturating_add(zp)
                        .clamp(lo, hi);
                    assert_eq!(qv[i], want as f64, "quantize {v} / {s} + {zp} ({out})");
                }
                let d = dequantize_8bit_per_tensor(&q, &scale, Some(&z))
                    .unwrap()
                    .expect("the fast path applies");
                let dv = to_f64_vec(&d).unwrap();
                for i in 0..n {
                    let want = ((qv[i] - zp as f64) * s as f64) as f32 as f64;
                    assert_eq!(dv[i], want, "dequantize {} ({out})", qv[i]);
                }
            }
        }
    }

    #[test]
    fn blocked_layout_index() {
        // x [2, 5, 3], axis 1, block 2 -> scale [2, 3, 3].
        let scale = Tensor::F32(ArrayD::zeros(IxDyn(&[2, 3, 3])));
        let lay = Layout::new(&[2, 5, 3], scale.shape(), None, 1, 2).unwrap();
        let mut s = 1u64;
        for _ in 0..50 {
            let (o, d, i) = (
                lcg(&mut s) as usize % 2,
                lcg(&mut s) as usize % 5,
                lcg(&mut s) as usize % 3,
            );
            assert_eq!(lay.index((o * 5 + d) * 3 + i), (o * 3 + d / 2) * 3 + i);
        }
        assert!(Layout::new(&[2, 5, 3], scale.shape(), None, 1, 1).is_err());
    }
}
