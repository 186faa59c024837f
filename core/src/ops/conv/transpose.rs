//! ConvTranspose: the output geometry (shared with the CUDA backend), then per group a GEMM
//! `col = Wᵀ·X` and col2im, which adds each column back into the output planes.
use ndarray::{ArrayD, IxDyn};
use rayon::prelude::*;

use super::{
    Geom, LIMIT, PAR_MIN, check_bias, contiguous, explicit_pads, float_dispatch, kernel_attrs,
    pad3, span,
};
use crate::bail;
use crate::error::OpResult;
use crate::ops::matmul::{GemmFloat, gemm_into};
use crate::ops::{OpCtx, input, opt_input, single};
use crate::tensor::Value;
use crate::unsupported;

pub fn convt_geom(ctx: &OpCtx, ins: &[usize], w_spatial: &[usize]) -> OpResult<Geom> {
    let r = ins.len();
    if r == 0 || r > 3 {
        unsupported!("ConvTranspose with {r} spatial dims (1 to 3 are supported)");
    }
    let (k, s, d) = kernel_attrs(ctx, w_spatial)?;
    let op: Vec<i64> = match ctx.attr_opt_ints("output_padding")? {
        None => vec![0; r],
        Some(v) if v.len() == r => v,
        Some(v) if v.len() == 2 * r => v[..r].to_vec(),
        Some(v) => bail!("output_padding {v:?} must have {r} values"),
    };
    if op.iter().any(|x| x.unsigned_abs() > LIMIT as u64) {
        bail!("output_padding {op:?} is out of range");
    }
    let auto_pad = ctx.attr_s("auto_pad", "NOTSET")?;
    let out_attr = ctx.attr_opt_ints("output_shape")?;
    let mut pb = vec![0i64; r];
    let mut outs = vec![0usize; r];
    let (eb, ee) = explicit_pads(ctx, r)?;
    for i in 0..r {
        let dk = ((k[i].max(1) - 1) as i64)
            .saturating_mul(d[i] as i64)
            .saturating_add(1);
        let full = (s[i] as i64)
            .saturating_mul(ins[i] as i64 - 1)
            .saturating_add(op[i])
            .saturating_add(dk);
        if full.unsigned_abs() > (LIMIT * LIMIT) as u64 {
            bail!("ConvTranspose output along spatial dim {i} is too large");
        }
        let target = match &out_attr {
            Some(o) => {
                if o.len() < r {
                    bail!("output_shape {o:?} has fewer than {r} values");
                }
                let t = o[o.len() - r + i];
                if !(1..=LIMIT * LIMIT).contains(&t) {
                    bail!("output_shape {o:?} has an out-of-range value");
                }
                Some(t)
            }
            None if auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER" => {
                Some(ins[i] as i64 * s[i] as i64)
            }
            None => None,
        };
        let o = match target {
            Some(t) => {
                let total = full - t;
                pb[i] = if auto_pad == "SAME_UPPER" {
                    total.div_euclid(2)
                } else {
                    total - total.div_euclid(2)
                };
                t
            }
            None => {
                let (b, e) = if auto_pad == "VALID" {
                    (0, 0)
                } else {
                    (eb[i], ee[i])
                };
                pb[i] = b;
                full - b - e
            }
        };
        if o <= 0 {
            bail!("ConvTranspose output size {o} along spatial dim {i} is not positive");
        }
        outs[i] = o as usize;
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

/// Adds the column matrix `col` (`[ksz, in_sp]` for one output channel) into output plane `out`.
fn col2im_plane<T: GemmFloat>(col: &[T], g: &Geom, out: &mut [T]) {
    let [i0, i1, i2] = g.ins;
    let [_, o1, o2] = g.outs;
    let in_sp = g.in_sp();
    for kk in 0..g.ksz() {
        let kp = g.kpos(kk);
        let row = &col[kk * in_sp..(kk + 1) * in_sp];
        let (h0, h1) = span(i0, g.s[0], g.off(0, kp[0]), g.outs[0]);
        let (r0, r1) = span(i1, g.s[1], g.off(1, kp[1]), o1);
        let (c0, c1) = span(i2, g.s[2], g.off(2, kp[2]), o2);
        let woff = g.off(2, kp[2]);
        for id in h0..h1 {
            let od = (id as i64 * g.s[0] as i64 + g.off(0, kp[0])) as usize;
            for ih in r0..r1 {
                let oh = (ih as i64 * g.s[1] as i64 + g.off(1, kp[1])) as usize;
                let srow = &row[(id * i1 + ih) * i2..(id * i1 + ih + 1) * i2];
                let drow = &mut out[(od * o1 + oh) * o2..(od * o1 + oh + 1) * o2];
                for (iw, &v) in srow.iter().enumerate().take(c1).skip(c0) {
                    let ow = (iw as i64 * g.s[2] as i64 + woff) as usize;
                    drow[ow] = drow[ow] + v;
                }
            }
        }
    }
}

fn conv_transpose_t<T: GemmFloat>(
    ctx: &OpCtx,
    x: &ArrayD<T>,
    w: &ArrayD<T>,
    b: Option<&ArrayD<T>>,
) -> OpResult<ArrayD<T>> {
    let (xs, ws) = (x.shape(), w.shape());
    if xs.len() < 3 || ws.len() != xs.len() {
        bail!("ConvTranspose needs X of rank >= 3 and W of the same rank, got {xs:?} and {ws:?}");
    }
    let group = ctx.attr_i("group", 1)?;
    if group < 1 {
        bail!("group must be >= 1, got {group}");
    }
    let group = group as usize;
    let (n, c) = (xs[0], xs[1]);
    if ws[0] != c || c % group != 0 {
        bail!("ConvTranspose channels mismatch: X {xs:?}, W {ws:?}, group {group}");
    }
    let (cg, mg) = (c / group, ws[1]);
    let m = mg * group;
    check_bias(b, m)?;
    let g = convt_geom(ctx, &xs[2..], &ws[2..])?;
    let mut out_shape = vec![n, m];
    out_shape.extend_from_slice(&g.outs[3 - (xs.len() - 2)..]);
    ctx.check_alloc(&out_shape, std::mem::size_of::<T>())?;
    let (in_sp, out_sp, ksz) = (g.in_sp(), g.out_sp(), g.ksz());
    let rows = mg * ksz;
    ctx.check_alloc(&[rows, in_sp], std::mem::size_of::<T>())?;
    let xd = contiguous(x);
    let wd = contiguous(w);
    let bd = b.map(contiguous);
    let mut y = vec![T::zero(); n * m * out_sp];
    let mut col = vec![T::zero(); rows * in_sp];
    for ni in 0..n {
        for gi in 0..group {
            let xg = &xd[(ni * c + gi * cg) * in_sp..(ni * c + (gi + 1) * cg) * in_sp];
            let wg = &wd[gi * cg * rows..(gi + 1) * cg * rows];
            // col[rows, in_sp] = Wg^T · Xg, Wg stored [cg, rows].
            gemm_into(
                rows,
                in_sp,
                cg,
                wg,
                1,
                rows,
                xg,
                in_sp,
                1,
                &mut col,
                in_sp,
                T::one(),
                false,
                true,
            );
            let yg = &mut y[(ni * m + gi * mg) * out_sp..(ni * m + (gi + 1) * mg) * out_sp];
            let f = |(oc, out): (usize, &mut [T])| {
                if let Some(b) = bd.as_deref() {
                    out.fill(b[gi * mg + oc]);
                }
                col2im_plane(&col[oc * ksz * in_sp..(oc + 1) * ksz * in_sp], &g, out);
            };
            if rows * in_sp >= PAR_MIN {
                yg.par_chunks_mut(out_sp).enumerate().for_each(f);
            } else {
                yg.chunks_mut(out_sp).enumerate().for_each(f);
            }
        }
    }
    Ok(ArrayD::from_shape_vec(IxDyn(&out_shape), y)?)
}

pub(super) fn conv_transpose(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let rest = vec![Some(input(inputs, 1)?), opt_input(inputs, 2)?];
    fn go<T: GemmFloat>(
        x: &ArrayD<T>,
        r: &[Option<&ArrayD<T>>],
        ctx: &OpCtx,
    ) -> OpResult<ArrayD<T>> {
        let Some(w) = r[0] else {
            bail!("ConvTranspose: W is missing")
        };
        conv_transpose_t(ctx, x, w, r[1])
    }
    single(float_dispatch!(x, rest, go, ctx))
}
