//! DeformConv (2-D): a bilinear im2col at the learned offsets (times the mask), then a GEMM per group.
use ndarray::{ArrayD, IxDyn};
use rayon::prelude::*;

use super::{LIMIT, check_bias, contiguous, conv_geom, fill_bias, float_dispatch};
use crate::error::OpResult;
use crate::ops::matmul::{GemmFloat, gemm_into};
use crate::ops::{OpCtx, input, opt_input, single};
use crate::tensor::Value;
use crate::{bail, unsupported};

/// Bilinear sample of plane `p` (`h`×`w`) at (y, x), zero outside.
fn bilinear<T: GemmFloat>(p: &[T], h: usize, w: usize, y: T, x: T) -> T {
    let (y0f, x0f) = (y.floor(), x.floor());
    let (ly, lx) = (y - y0f, x - x0f);
    let (Some(y0), Some(x0)) = (y0f.to_i64(), x0f.to_i64()) else {
        return T::zero();
    };
    if y0.unsigned_abs() > LIMIT as u64 || x0.unsigned_abs() > LIMIT as u64 {
        return T::zero();
    }
    let one = T::one();
    let at = |yy: i64, xx: i64| -> T {
        if yy < 0 || xx < 0 || yy >= h as i64 || xx >= w as i64 {
            T::zero()
        } else {
            p[yy as usize * w + xx as usize]
        }
    };
    at(y0, x0) * (one - ly) * (one - lx)
        + at(y0, x0 + 1) * (one - ly) * lx
        + at(y0 + 1, x0) * ly * (one - lx)
        + at(y0 + 1, x0 + 1) * ly * lx
}

fn deform_conv_t<T: GemmFloat>(
    ctx: &OpCtx,
    x: &ArrayD<T>,
    r: &[Option<&ArrayD<T>>],
) -> OpResult<ArrayD<T>> {
    let (Some(w), Some(offset)) = (r[0], r[1]) else {
        bail!("DeformConv needs W and offset")
    };
    let (b, mask) = (r[2], r[3]);
    let (xs, ws, os) = (x.shape(), w.shape(), offset.shape());
    if xs.len() != 4 || ws.len() != 4 || os.len() != 4 {
        unsupported!(
            "DeformConv is implemented for 2-D inputs only, got X {xs:?} W {ws:?} offset {os:?}"
        );
    }
    let group = ctx.attr_i("group", 1)?.max(1) as usize;
    let ogroups = ctx.attr_i("offset_group", 1)?.max(1) as usize;
    let (n, c, m) = (xs[0], xs[1], ws[0]);
    if ws[1].checked_mul(group) != Some(c) || m % group != 0 || c % ogroups != 0 {
        bail!(
            "DeformConv channels mismatch: X {xs:?}, W {ws:?}, group {group}, offset_group {ogroups}"
        );
    }
    check_bias(b, m)?;
    let g = conv_geom(ctx, &xs[2..], &ws[2..])?;
    let (kh, kw) = (g.k[1], g.k[2]);
    let ksz = kh * kw;
    let (oh, ow) = (g.outs[1], g.outs[2]);
    if os != [n, ogroups * 2 * ksz, oh, ow] {
        bail!(
            "DeformConv offset shape {os:?}, expected {:?}",
            [n, ogroups * 2 * ksz, oh, ow]
        );
    }
    if let Some(mk) = mask
        && mk.shape() != [n, ogroups * ksz, oh, ow]
    {
        bail!(
            "DeformConv mask shape {:?}, expected {:?}",
            mk.shape(),
            [n, ogroups * ksz, oh, ow]
        );
    }
    let out_shape = [n, m, oh, ow];
    ctx.check_alloc(&out_shape, std::mem::size_of::<T>())?;
    let (cg, mg) = (c / group, m / group);
    let (h, wd_) = (xs[2], xs[3]);
    let (in_sp, out_sp) = (h * wd_, oh * ow);
    let kdim = cg * ksz;
    ctx.check_alloc(&[kdim, out_sp], std::mem::size_of::<T>())?;
    let xd = contiguous(x);
    let wd = contiguous(w);
    let od = contiguous(offset);
    let md = mask.map(contiguous);
    let bd = b.map(contiguous);
    let cpo = c / ogroups;
    let mut y = vec![T::zero(); n * m * out_sp];
    let mut col = vec![T::zero(); kdim * out_sp];
    for ni in 0..n {
        for gi in 0..group {
            col.par_chunks_mut(out_sp)
                .enumerate()
                .for_each(|(row, dst)| {
                    let ci = gi * cg + row / ksz;
                    let kk = row % ksz;
                    let (ki, kj) = (kk / kw, kk % kw);
                    let og = ci / cpo;
                    let plane = &xd[(ni * c + ci) * in_sp..(ni * c + ci + 1) * in_sp];
                    let offy = &od[((ni * ogroups + og) * ksz * 2 + kk * 2) * out_sp..][..out_sp];
                    let offx =
                        &od[((ni * ogroups + og) * ksz * 2 + kk * 2 + 1) * out_sp..][..out_sp];
                    let mrow = md
                        .as_deref()
                        .map(|mk| &mk[((ni * ogroups + og) * ksz + kk) * out_sp..][..out_sp]);
                    for i in 0..oh {
                        for j in 0..ow {
                            let p = i * ow + j;
                            let yy = T::from((i * g.s[1]) as i64 - g.pb[1] + (ki * g.d[1]) as i64)
                                .unwrap_or(T::zero())
                                + offy[p];
                            let xx = T::from((j * g.s[2]) as i64 - g.pb[2] + (kj * g.d[2]) as i64)
                                .unwrap_or(T::zero())
                                + offx[p];
                            let mut v = bilinear(plane, h, wd_, yy, xx);
                            if let Some(mr) = mrow {
                                v = v * mr[p];
                            }
                            dst[p] = v;
                        }
                    }
                });
            let yg = &mut y[(ni * m + gi * mg) * out_sp..(ni * m + (gi + 1) * mg) * out_sp];
            fill_bias(yg, bd.as_deref(), gi * mg, out_sp);
            let wg = &wd[gi * mg * kdim..(gi + 1) * mg * kdim];
            gemm_into(
                mg,
                out_sp,
                kdim,
                wg,
                kdim,
                1,
                &col,
                out_sp,
                1,
                yg,
                out_sp,
                T::one(),
                true,
                true,
            );
        }
    }
    Ok(ArrayD::from_shape_vec(IxDyn(&out_shape), y)?)
}

pub(super) fn deform_conv(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let rest = vec![
        Some(input(inputs, 1)?),
        Some(input(inputs, 2)?),
        opt_input(inputs, 3)?,
        opt_input(inputs, 4)?,
    ];
    fn go<T: GemmFloat>(
        x: &ArrayD<T>,
        r: &[Option<&ArrayD<T>>],
        ctx: &OpCtx,
    ) -> OpResult<ArrayD<T>> {
        deform_conv_t(ctx, x, r)
    }
    single(float_dispatch!(x, rest, go, ctx))
}
