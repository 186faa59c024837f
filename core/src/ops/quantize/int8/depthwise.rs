//! The exact sums of an 8-bit depthwise convolution (one input and one output channel per group,
//! MobileNet's 3×3 and 5×5 blocks) by Conv's f32 direct depthwise kernel.
//!
//! As a GEMM per group, a depthwise convolution is a product of one row by K ≤ 25 columns: the
//! integer GEMM's tiles are nearly all padding, and the 42 QLinearConv nodes of the zoo's quantized
//! MobileNet-V3-small took 1.16 ms where its f32 Conv nodes had taken under 0.1. Computed in f32 on
//! the centered operands, the sums are exact: each operand is an integer of magnitude at most 255,
//! so each product is at most 255² and every partial sum of at most K products at most K·255², an
//! integer f32 holds exactly while K·255² ≤ 2²⁴, that is K ≤ 258 — in any order of summation, with
//! or without fused multiply-adds. Padding is 0 once centered, as the input padded with its zero
//! point gives.
use ndarray::{ArrayD, IxDyn};

use super::{bytes, zero_points};
use crate::error::OpResult;
use crate::ops::OpCtx;
use crate::ops::quantize::int::Geom;
use crate::tensor::Tensor;

/// The most taps whose sums of centered 8-bit products f32 holds exactly (see the module).
pub(crate) const EXACT_F32_TAPS: usize = 258;

/// Whether [`sums`] computes this convolution.
pub(in crate::ops::quantize) fn applies(g: &Geom) -> bool {
    g.group > 1 && g.group == g.c && g.m == g.c && g.k.iter().product::<usize>() <= EXACT_F32_TAPS
}

/// The exact i32 sums Σ(x − x_zero_point)(w − w_zero_point) of a depthwise convolution, in output
/// order; `None` where it does not apply (see [`applies`]) or the operands are not 8-bit with zero
/// points of their types (x's per tensor, w's per tensor or per channel).
pub(in crate::ops::quantize) fn sums(
    ctx: &OpCtx,
    g: &Geom,
    x: &Tensor,
    xz: Option<&Tensor>,
    w: &Tensor,
    wz: Option<&Tensor>,
) -> OpResult<Option<Vec<i32>>> {
    if !applies(g) {
        return Ok(None);
    }
    let (Some((xd, sx)), Some((wd, sw))) = (bytes(x), bytes(w)) else {
        return Ok(None);
    };
    let (Some(zx), Some(zw)) = (zero_points(xz, x.dtype())?, zero_points(wz, w.dtype())?) else {
        return Ok(None);
    };
    if zx.len() != 1 || !(zw.len() == 1 || zw.len() == g.m) {
        return Ok(None);
    }
    Ok(Some(f32_sums(
        ctx,
        g,
        x,
        (&xd, sx, zx[0]),
        w,
        (&wd, sw, &zw),
    )?))
}

/// The sums through the f32 kernel, exact only where [`applies`] holds (the tests call it past
/// that bound to show the bound is needed).
fn f32_sums(
    ctx: &OpCtx,
    g: &Geom,
    x: &Tensor,
    (xd, sx, zx): (&[u8], bool, i32),
    w: &Tensor,
    (wd, sw, zw): (&[u8], bool, &[i32]),
) -> OpResult<Vec<i32>> {
    let xa = ArrayD::from_shape_vec(IxDyn(x.shape()), centered(xd, sx, &[zx], xd.len()))?;
    let wa = ArrayD::from_shape_vec(IxDyn(w.shape()), centered(wd, sw, zw, wd.len() / g.m))?;
    let y = crate::ops::conv::conv_f32(ctx, &xa, &wa)?;
    let y = y.as_standard_layout();
    let y = y.as_slice().expect("a standard layout is contiguous");
    let mut out = vec![0i32; y.len()];
    by_chunks(&mut out, y, |d, s| {
        // Integers of magnitude below 2²⁴ (the module's bound): the conversion is exact.
        d.iter_mut().zip(s).for_each(|(d, &v)| *d = v as i32);
    });
    Ok(out)
}

/// The bytes as f32 values less their zero point, `zero[i / run]` for byte `i` (one zero point for
/// all when `zero` has one).
fn centered(bytes: &[u8], signed: bool, zero: &[i32], run: usize) -> Vec<f32> {
    let mut out = vec![0f32; bytes.len()];
    let run = run.max(1);
    let zero_of = |i: usize| zero[if zero.len() == 1 { 0 } else { i / run }] as f32;
    if zero.len() == 1 {
        let z = zero_of(0);
        by_chunks(&mut out, bytes, |d, s| {
            if signed {
                d.iter_mut()
                    .zip(s)
                    .for_each(|(d, &b)| *d = b as i8 as f32 - z);
            } else {
                d.iter_mut().zip(s).for_each(|(d, &b)| *d = b as f32 - z);
            }
        });
    } else {
        for (i, (d, &b)) in out.iter_mut().zip(bytes).enumerate() {
            let v = if signed { b as i8 as f32 } else { b as f32 };
            *d = v - zero_of(i);
        }
    }
    out
}

/// `f(out chunk, source chunk)` over matching chunks, across threads when large.
fn by_chunks<S: Sync, D: Send>(out: &mut [D], src: &[S], f: impl Fn(&mut [D], &[S]) + Sync) {
    const CHUNK: usize = 1 << 14;
    if out.len() >= 4 * CHUNK {
        use rayon::prelude::*;
        out.par_chunks_mut(CHUNK)
            .zip(src.par_chunks(CHUNK))
            .for_each(|(d, s)| f(d, s));
    } else {
        f(out, src);
    }
}

#[cfg(test)]
mod tests;
