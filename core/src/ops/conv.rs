//! Convolutions: Conv, ConvTranspose, DeformConv, and `com.quorum` FusedConv (a Conv with a bias and
//! activation applied in its store pass, for the graph optimiser to produce).
//!
//! This file holds what the family shares: attribute parsing and output geometry (also read by the
//! CUDA backend), bias checks and the float dtype dispatch. Its children:
//! - `conv/forward.rs`: Conv and FusedConv, with the general im2col + GEMM path (every float type,
//!   and the reference the fast paths are tested against) and direct depthwise convolution;
//! - `conv/packed.rs`: the f32 fast path, a packed GEMM (`quorum-kernels`) reading the patches
//!   straight from the input, with weights packed once per initializer (`conv/weights.rs`);
//! - `conv/shifted.rs`: the f32 path's stride-1 form, `B` read as shifted rows of a padded copy of
//!   the input;
//! - `conv/scale.rs`: FusedConv's input scale, a Mul before a 1×1 convolution folded into the
//!   GEMM's packing of its input;
//! - `conv/broadcast.rs`: the f32 path of 2-D convolutions on AVX-512, the GEMM's sums computed
//!   directly from the (padded) input, pixels broadcast against packed weights, nothing packed per
//!   call;
//! - `conv/transpose.rs`, `conv/deform.rs`: ConvTranspose (GEMM + col2im) and DeformConv (bilinear
//!   im2col + GEMM).
//!
//! Spatial dims are handled as 3-D (missing leading dims are 1), so one set of loops serves all ranks.
use ndarray::ArrayD;

use super::matmul::GemmFloat;
use super::{OpCtx, Registry};
use crate::error::OpResult;
use crate::{bail, unsupported};

mod broadcast;
mod deform;
mod forward;
pub(crate) use forward::{PoolOf, pool_f32};
mod packed;
mod scale;
mod shifted;
mod transpose;
#[doc(hidden)]
pub mod weights;

pub(crate) use forward::activation_attr;

/// Conv of f32 `x` and `w` with `ctx`'s attributes, no bias and no activation, by the fast paths
/// Conv takes (the direct depthwise kernel among them). `ctx`'s runner is not asked for constants:
/// the caller's `w` need not be the node's input 1 (QLinearConv's integer depthwise path passes
/// its centered weights here).
pub(crate) fn conv_f32(ctx: &OpCtx, x: &ArrayD<f32>, w: &ArrayD<f32>) -> OpResult<ArrayD<f32>> {
    let plain = OpCtx {
        node: ctx.node,
        runner: &super::NoSubgraphs,
        max_tensor_bytes: ctx.max_tensor_bytes,
    };
    <f32 as forward::ConvFloat>::conv(&plain, x, w, None, quorum_kernels::Activation::None)
}
pub use transpose::convt_geom;

pub fn register(r: &mut Registry) {
    r.add("", "Conv", forward::conv);
    r.add("", "ConvTranspose", transpose::conv_transpose);
    r.add("", "DeformConv", deform::deform_conv);
    r.add(super::QUORUM_DOMAIN, "FusedConv", forward::fused_conv);
}

/// Elements of work past which loops are split across threads.
const PAR_MIN: usize = 1 << 14;

/// Spatial geometry of a convolution, padded to 3 dims (leading dims of size 1).
#[derive(Debug, Clone)]
pub struct Geom {
    pub ins: [usize; 3],
    pub k: [usize; 3],
    pub s: [usize; 3],
    pub d: [usize; 3],
    pub pb: [i64; 3],
    pub outs: [usize; 3],
}

impl Geom {
    fn in_sp(&self) -> usize {
        self.ins.iter().product()
    }
    fn out_sp(&self) -> usize {
        self.outs.iter().product()
    }
    fn ksz(&self) -> usize {
        self.k.iter().product()
    }
    /// Splits a flat kernel position into (kd, kh, kw).
    fn kpos(&self, kk: usize) -> [usize; 3] {
        [
            kk / (self.k[1] * self.k[2]),
            (kk / self.k[2]) % self.k[1],
            kk % self.k[2],
        ]
    }
    /// Offset (signed) of kernel tap `kp` along dim `i` relative to `t*stride`.
    fn off(&self, i: usize, kp: usize) -> i64 {
        (kp * self.d[i]) as i64 - self.pb[i]
    }
}

/// The range of `t` in `[0, count)` with `0 <= t*s + off < bound`.
fn span(count: usize, s: usize, off: i64, bound: usize) -> (usize, usize) {
    let s = s as i64;
    let lo = if off >= 0 { 0 } else { (-off + s - 1) / s };
    let lim = bound as i64 - off; // need t*s < lim
    let hi = if lim <= 0 {
        0
    } else {
        ((lim - 1) / s + 1).min(count as i64)
    };
    let lo = lo.min(count as i64);
    (lo as usize, hi.max(lo) as usize)
}

fn pad3<T: Copy>(v: &[T], fill: T) -> [T; 3] {
    let mut r = [fill; 3];
    let off = 3 - v.len();
    r[off..].copy_from_slice(v);
    r
}

/// Largest stride, dilation or pad accepted (keeps the index arithmetic far from overflow).
const LIMIT: i64 = 1 << 31;

/// Reads an ints attribute of `rank` positive values, defaulting to all ones.
fn ints_attr(ctx: &OpCtx, name: &str, rank: usize, min: i64) -> OpResult<Vec<usize>> {
    match ctx.attr_opt_ints(name)? {
        None => Ok(vec![1; rank]),
        Some(v) => {
            if v.len() != rank || v.iter().any(|&x| x < min || x > LIMIT) {
                bail!("attribute {name}={v:?} must have {rank} values in [{min}, {LIMIT}]");
            }
            Ok(v.iter().map(|&x| x as usize).collect())
        }
    }
}

/// Shared attribute parsing for Conv-like ops: (kernel, strides, dilations).
fn kernel_attrs(
    ctx: &OpCtx,
    w_spatial: &[usize],
) -> OpResult<(Vec<usize>, Vec<usize>, Vec<usize>)> {
    let r = w_spatial.len();
    if let Some(ks) = ctx.attr_opt_ints("kernel_shape")?
        && (ks.len() != r || ks.iter().zip(w_spatial).any(|(&a, &b)| a != b as i64))
    {
        bail!("kernel_shape {ks:?} does not match the weight's spatial shape {w_spatial:?}");
    }
    Ok((
        w_spatial.to_vec(),
        ints_attr(ctx, "strides", r, 1)?,
        ints_attr(ctx, "dilations", r, 1)?,
    ))
}

fn explicit_pads(ctx: &OpCtx, r: usize) -> OpResult<(Vec<i64>, Vec<i64>)> {
    match ctx.attr_opt_ints("pads")? {
        None => Ok((vec![0; r], vec![0; r])),
        Some(p) => {
            if p.len() != 2 * r || p.iter().any(|x| x.unsigned_abs() > LIMIT as u64) {
                bail!(
                    "pads {p:?} must have {} values of magnitude <= {LIMIT}",
                    2 * r
                );
            }
            Ok((p[..r].to_vec(), p[r..].to_vec()))
        }
    }
}

/// Geometry of a forward convolution (Conv, DeformConv) from the attributes.
pub fn conv_geom(ctx: &OpCtx, ins: &[usize], w_spatial: &[usize]) -> OpResult<Geom> {
    let r = ins.len();
    if r == 0 || r > 3 {
        unsupported!("convolution with {r} spatial dims (1 to 3 are supported)");
    }
    let (k, s, d) = kernel_attrs(ctx, w_spatial)?;
    let auto_pad = ctx.attr_s("auto_pad", "NOTSET")?;
    let mut pb = vec![0i64; r];
    let mut outs = vec![0usize; r];
    for i in 0..r {
        let dk = ((k[i].max(1) - 1) as i64)
            .saturating_mul(d[i] as i64)
            .saturating_add(1);
        let n = ins[i] as i64;
        let st = s[i] as i64;
        match auto_pad.as_str() {
            "SAME_UPPER" | "SAME_LOWER" => {
                let o = (n + st - 1) / st;
                let total = ((o - 1) * st + dk - n).max(0);
                pb[i] = if auto_pad == "SAME_UPPER" {
                    total / 2
                } else {
                    total - total / 2
                };
                outs[i] = o as usize;
            }
            "VALID" | "NOTSET" | "" => {
                let (b, e) = if auto_pad == "VALID" {
                    (vec![0; r], vec![0; r])
                } else {
                    explicit_pads(ctx, r)?
                };
                let span = n + b[i] + e[i] - dk;
                if span < 0 {
                    bail!(
                        "kernel (dilated size {dk}) is larger than the padded input ({}) along spatial dim {i}",
                        n + b[i] + e[i]
                    );
                }
                pb[i] = b[i];
                outs[i] = (span / st + 1) as usize;
            }
            other => bail!("unknown auto_pad '{other}'"),
        }
    }
    Ok(Geom {
        ins: pad3(ins, 1),
        k: pad3(&k, 1),
        s: pad3(&s, 1),
        d: pad3(&d, 1),
        pb: pad3(&pb, 0),
        outs: pad3(&outs, 1),
    })
}

fn fill_bias<T: GemmFloat>(y: &mut [T], bias: Option<&[T]>, ch0: usize, plane: usize) {
    match bias {
        Some(b) => {
            for (i, row) in y.chunks_mut(plane).enumerate() {
                row.fill(b[ch0 + i]);
            }
        }
        None => y.fill(T::zero()),
    }
}

fn contiguous<T: Clone>(a: &ArrayD<T>) -> std::borrow::Cow<'_, [T]> {
    match a.as_slice() {
        Some(s) => std::borrow::Cow::Borrowed(s),
        None => std::borrow::Cow::Owned(a.iter().cloned().collect()),
    }
}

fn check_bias<T>(b: Option<&ArrayD<T>>, m: usize) -> OpResult<()> {
    if let Some(b) = b
        && b.len() != m
    {
        bail!("bias has {} elements, expected {m}", b.len());
    }
    Ok(())
}

/// Runs a float kernel on f32/f64 directly and on f16/bf16 through f32.
macro_rules! float_dispatch {
    ($x:expr, $rest:expr, $f:ident, $($extra:expr),*) => {{
        fn pick<'a, T: 'a>(t: Option<&'a crate::tensor::Tensor>, get: fn(&'a crate::tensor::Tensor) -> Option<&'a ndarray::ArrayD<T>>) -> crate::error::OpResult<Option<&'a ndarray::ArrayD<T>>> {
            match t {
                None => Ok(None),
                Some(t) => get(t).map(Some).ok_or_else(|| crate::error::OpError::Invalid(format!("input dtype {} differs from X", t.dtype()))),
            }
        }
        let rest: Vec<Option<&crate::tensor::Tensor>> = $rest;
        match $x {
            crate::tensor::Tensor::F32(x) => {
                let r: Vec<Option<&ndarray::ArrayD<f32>>> = rest.iter().map(|t| pick(*t, |t| if let crate::tensor::Tensor::F32(a) = t { Some(a) } else { None })).collect::<crate::error::OpResult<_>>()?;
                crate::tensor::Tensor::F32($f(x, &r, $($extra),*)?)
            }
            crate::tensor::Tensor::F64(x) => {
                let r: Vec<Option<&ndarray::ArrayD<f64>>> = rest.iter().map(|t| pick(*t, |t| if let crate::tensor::Tensor::F64(a) = t { Some(a) } else { None })).collect::<crate::error::OpResult<_>>()?;
                crate::tensor::Tensor::F64($f(x, &r, $($extra),*)?)
            }
            crate::tensor::Tensor::F16(x) => {
                let r: Vec<Option<&ndarray::ArrayD<half::f16>>> = rest.iter().map(|t| pick(*t, |t| if let crate::tensor::Tensor::F16(a) = t { Some(a) } else { None })).collect::<crate::error::OpResult<_>>()?;
                let r32: Vec<Option<ndarray::ArrayD<f32>>> = r.iter().map(|a| a.map(crate::ops::cast::widen)).collect();
                let rr: Vec<Option<&ndarray::ArrayD<f32>>> = r32.iter().map(|a| a.as_ref()).collect();
                crate::tensor::Tensor::F16(crate::ops::cast::narrow($f(&crate::ops::cast::widen(x), &rr, $($extra),*)?))
            }
            crate::tensor::Tensor::BF16(x) => {
                let r: Vec<Option<&ndarray::ArrayD<half::bf16>>> = rest.iter().map(|t| pick(*t, |t| if let crate::tensor::Tensor::BF16(a) = t { Some(a) } else { None })).collect::<crate::error::OpResult<_>>()?;
                let r32: Vec<Option<ndarray::ArrayD<f32>>> = r.iter().map(|a| a.map(crate::ops::cast::widen)).collect();
                let rr: Vec<Option<&ndarray::ArrayD<f32>>> = r32.iter().map(|a| a.as_ref()).collect();
                crate::tensor::Tensor::BF16(crate::ops::cast::narrow($f(&crate::ops::cast::widen(x), &rr, $($extra),*)?))
            }
            other => crate::unsupported!("dtype {} (expected a float type)", other.dtype()),
        }
    }};
}
use float_dispatch;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod half_slice_tests {
    use half::f16;
    use ndarray::{ArrayD, IxDyn};

    use crate::ops::cast::{Half, narrow, widen};

    /// The slice conversions of `H` (`cast::widen` and `narrow`) against its element conversions:
    /// every bit pattern up; seeded f32 bit patterns and `extra` (ties, subnormals, overflow)
    /// down; NaN stays NaN.
    fn slices_equal_elements<H: Half + std::fmt::Debug>(
        from_bits: fn(u16) -> H,
        to_bits: fn(H) -> u16,
        extra: &[f32],
    ) {
        let all: Vec<H> = (0..=u16::MAX).map(from_bits).collect();
        let up = widen(&ArrayD::from_shape_vec(IxDyn(&[all.len()]), all.clone()).unwrap());
        for (&h, &f) in all.iter().zip(up.iter()) {
            let want = h.up1();
            assert!(
                want.to_bits() == f.to_bits() || (want.is_nan() && f.is_nan()),
                "{h:?}"
            );
        }
        let mut seed = 3u64;
        let mut xs: Vec<f32> = (0..100_000)
            .map(|_| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                f32::from_bits((seed >> 32) as u32)
            })
            .collect();
        xs.extend_from_slice(extra);
        let down: ArrayD<H> =
            narrow(ArrayD::from_shape_vec(IxDyn(&[xs.len()]), xs.clone()).unwrap());
        for (&x, &h) in xs.iter().zip(down.iter()) {
            let want = H::down1(x);
            let nan = |v: H| v.up1().is_nan();
            assert!(
                to_bits(want) == to_bits(h) || (nan(want) && nan(h)),
                "{x:e}"
            );
        }
    }

    #[test]
    fn slice_conversions_equal_element_conversions() {
        // Halfway between neighbouring f16 values, and just beyond the largest.
        let mut extra: Vec<f32> = (0..2000u16)
            .map(|b| (f16::from_bits(b).to_f32() + f16::from_bits(b + 1).to_f32()) / 2.0)
            .collect();
        extra.extend([
            65504.0,
            65519.0,
            65520.0,
            1e9,
            -1e9,
            5.96e-8,
            2.98e-8,
            f32::NAN,
        ]);
        slices_equal_elements(f16::from_bits, f16::to_bits, &extra);
        // bf16: exactly halfway between neighbours (ties go to even), and the ends of f32.
        let mut extra: Vec<f32> = (0..4000u32)
            .map(|b| f32::from_bits((b << 16) | 0x8000))
            .collect();
        extra.extend([f32::MAX, f32::MIN_POSITIVE, 1e-45, f32::NAN, f32::INFINITY]);
        slices_equal_elements(half::bf16::from_bits, half::bf16::to_bits, &extra);
    }
}
