//! Convolutions: Conv and ConvTranspose (1-D/2-D/3-D, groups, dilations, pads, auto_pad) via im2col +
//! GEMM, with direct paths for depthwise and 1x1 convolutions; DeformConv (2-D) via a bilinear im2col.
//!
//! Spatial dims are handled as 3-D (missing leading dims are 1), so one set of loops serves all ranks.
use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};
use rayon::prelude::*;

use super::matmul::{GemmFloat, gemm_into};
use super::{OpCtx, Registry, input, opt_input, single};
use crate::error::OpResult;
use crate::tensor::{Tensor, Value};
use crate::{bail, unsupported};

pub fn register(r: &mut Registry) {
    r.add("", "Conv", conv);
    r.add("", "ConvTranspose", conv_transpose);
    r.add("", "DeformConv", deform_conv);
}

/// Elements of work past which loops are split across threads.
const PAR_MIN: usize = 1 << 14;

/// Spatial geometry of a convolution, padded to 3 dims (leading dims of size 1).
#[derive(Debug, Clone)]
pub(crate) struct Geom {
    pub(crate) ins: [usize; 3],
    pub(crate) k: [usize; 3],
    pub(crate) s: [usize; 3],
    pub(crate) d: [usize; 3],
    pub(crate) pb: [i64; 3],
    pub(crate) outs: [usize; 3],
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
pub(crate) fn conv_geom(ctx: &OpCtx, ins: &[usize], w_spatial: &[usize]) -> OpResult<Geom> {
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

/// Fills one im2col row (`dst`, `out_sp` long) for channel plane `src` and kernel tap `kp`.
fn im2col_row<T: GemmFloat>(src: &[T], g: &Geom, kp: [usize; 3], dst: &mut [T]) {
    let [o0, o1, o2] = g.outs;
    let [_, i1, i2] = g.ins;
    let (h0, h1) = span(o0, g.s[0], g.off(0, kp[0]), g.ins[0]);
    let (r0, r1) = span(o1, g.s[1], g.off(1, kp[1]), i1);
    let (c0, c1) = span(o2, g.s[2], g.off(2, kp[2]), i2);
    let woff = g.off(2, kp[2]);
    if c0 >= c1 {
        dst.fill(T::zero());
        return;
    }
    for od in 0..o0 {
        let plane = &mut dst[od * o1 * o2..(od + 1) * o1 * o2];
        if od < h0 || od >= h1 {
            plane.fill(T::zero());
            continue;
        }
        let id = (od as i64 * g.s[0] as i64 + g.off(0, kp[0])) as usize;
        plane[..r0 * o2].fill(T::zero());
        plane[r1 * o2..].fill(T::zero());
        for oh in r0..r1 {
            let ih = (oh as i64 * g.s[1] as i64 + g.off(1, kp[1])) as usize;
            let srow = &src[(id * i1 + ih) * i2..(id * i1 + ih + 1) * i2];
            let drow = &mut plane[oh * o2..(oh + 1) * o2];
            drow[..c0].fill(T::zero());
            drow[c1..].fill(T::zero());
            if g.s[2] == 1 {
                let st = (c0 as i64 + woff) as usize;
                drow[c0..c1].copy_from_slice(&srow[st..st + (c1 - c0)]);
            } else {
                for ow in c0..c1 {
                    drow[ow] = srow[(ow as i64 * g.s[2] as i64 + woff) as usize];
                }
            }
        }
    }
}

/// im2col of `cg` channel planes into `col` (`[cg*ksz, out_sp]`).
fn im2col<T: GemmFloat>(x: &[T], g: &Geom, cg: usize, col: &mut [T], par: bool) {
    let (in_sp, out_sp, ksz) = (g.in_sp(), g.out_sp(), g.ksz());
    let f = |(row, dst): (usize, &mut [T])| {
        let c = row / ksz;
        im2col_row(&x[c * in_sp..(c + 1) * in_sp], g, g.kpos(row % ksz), dst);
    };
    if par && cg * ksz * out_sp >= PAR_MIN {
        col.par_chunks_mut(out_sp).enumerate().for_each(f);
    } else {
        col.chunks_mut(out_sp).enumerate().for_each(f);
    }
}

/// Direct convolution of one input plane with one filter (depthwise), added into `out`.
fn direct_plane<T: GemmFloat>(x: &[T], w: &[T], g: &Geom, out: &mut [T]) {
    let [o0, o1, o2] = g.outs;
    let [_, i1, i2] = g.ins;
    for (kk, &wv) in w.iter().enumerate() {
        let kp = g.kpos(kk);
        let (h0, h1) = span(o0, g.s[0], g.off(0, kp[0]), g.ins[0]);
        let (r0, r1) = span(o1, g.s[1], g.off(1, kp[1]), i1);
        let (c0, c1) = span(o2, g.s[2], g.off(2, kp[2]), i2);
        let woff = g.off(2, kp[2]);
        if c0 >= c1 {
            continue;
        }
        for od in h0..h1 {
            let id = (od as i64 * g.s[0] as i64 + g.off(0, kp[0])) as usize;
            for oh in r0..r1 {
                let ih = (oh as i64 * g.s[1] as i64 + g.off(1, kp[1])) as usize;
                let srow = &x[(id * i1 + ih) * i2..(id * i1 + ih + 1) * i2];
                let drow = &mut out[(od * o1 + oh) * o2..(od * o1 + oh + 1) * o2];
                if g.s[2] == 1 {
                    let st = (c0 as i64 + woff) as usize;
                    for (d, &v) in drow[c0..c1].iter_mut().zip(&srow[st..st + (c1 - c0)]) {
                        *d = *d + wv * v;
                    }
                } else {
                    for ow in c0..c1 {
                        let v = srow[(ow as i64 * g.s[2] as i64 + woff) as usize];
                        drow[ow] = drow[ow] + wv * v;
                    }
                }
            }
        }
    }
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

/// Conv over contiguous data: x `[N, C, ins]`, w `[M, C/group, k]`.
fn conv_t<T: GemmFloat>(
    ctx: &OpCtx,
    x: &ArrayD<T>,
    w: &ArrayD<T>,
    b: Option<&ArrayD<T>>,
) -> OpResult<ArrayD<T>> {
    let (xs, ws) = (x.shape(), w.shape());
    if xs.len() < 3 || ws.len() != xs.len() {
        bail!("Conv needs X of rank >= 3 and W of the same rank, got {xs:?} and {ws:?}");
    }
    let group = ctx.attr_i("group", 1)?;
    if group < 1 {
        bail!("group must be >= 1, got {group}");
    }
    let group = group as usize;
    let (n, c, m) = (xs[0], xs[1], ws[0]);
    if ws[1].checked_mul(group) != Some(c) || m % group != 0 {
        bail!("Conv channels mismatch: X {xs:?}, W {ws:?}, group {group}");
    }
    check_bias(b, m)?;
    let g = conv_geom(ctx, &xs[2..], &ws[2..])?;
    let mut out_shape = vec![n, m];
    out_shape.extend_from_slice(&g.outs[3 - (xs.len() - 2)..]);
    ctx.check_alloc(&out_shape, std::mem::size_of::<T>())?;
    let (cg, mg) = (c / group, m / group);
    let (in_sp, out_sp, ksz) = (g.in_sp(), g.out_sp(), g.ksz());
    let kdim = cg * ksz;
    let xd = contiguous(x);
    let wd = contiguous(w);
    let bd = b.map(contiguous);
    let bias = bd.as_deref();
    let mut y = vec![T::zero(); n * m * out_sp];
    if y.is_empty() {
        return Ok(ArrayD::from_shape_vec(IxDyn(&out_shape), y)?);
    }
    let pointwise = ksz == 1 && g.s == [1, 1, 1] && g.pb == [0, 0, 0] && g.outs == g.ins;
    if !pointwise && cg > 1 {
        ctx.check_alloc(&[kdim, out_sp], std::mem::size_of::<T>())?;
    }
    let par_groups = group > 1 && group >= 2 * rayon::current_num_threads();
    let mut col: Vec<T> = Vec::new();
    for ni in 0..n {
        let xn = &xd[ni * c * in_sp..(ni + 1) * c * in_sp];
        let yn = &mut y[ni * m * out_sp..(ni + 1) * m * out_sp];
        if cg == 1 && group > 1 {
            // Depthwise (with channel multiplier mg): direct loops, one output plane per task.
            let f = |(oc, out): (usize, &mut [T])| {
                out.fill(bias.map_or(T::zero(), |b| b[oc]));
                let ic = oc / mg;
                direct_plane(
                    &xn[ic * in_sp..(ic + 1) * in_sp],
                    &wd[oc * ksz..(oc + 1) * ksz],
                    &g,
                    out,
                );
            };
            if m.saturating_mul(out_sp).saturating_mul(ksz) >= PAR_MIN {
                yn.par_chunks_mut(out_sp).enumerate().for_each(f);
            } else {
                yn.chunks_mut(out_sp).enumerate().for_each(f);
            }
            continue;
        }
        let run_group = |gi: usize, yg: &mut [T], col: &mut Vec<T>, par: bool| {
            let xg = &xn[gi * cg * in_sp..(gi + 1) * cg * in_sp];
            let wg = &wd[gi * mg * kdim..(gi + 1) * mg * kdim];
            fill_bias(yg, bias, gi * mg, out_sp);
            let bmat: &[T] = if pointwise {
                xg
            } else {
                col.resize(kdim * out_sp, T::zero());
                im2col(xg, &g, cg, col, par);
                col
            };
            gemm_into(
                mg,
                out_sp,
                kdim,
                wg,
                kdim,
                1,
                bmat,
                out_sp,
                1,
                yg,
                out_sp,
                T::one(),
                true,
                par,
            );
        };
        if par_groups {
            yn.par_chunks_mut(mg * out_sp)
                .enumerate()
                .for_each(|(gi, yg)| {
                    let mut col = Vec::new();
                    run_group(gi, yg, &mut col, false)
                });
        } else {
            for (gi, yg) in yn.chunks_mut(mg * out_sp).enumerate() {
                run_group(gi, yg, &mut col, true);
            }
        }
    }
    Ok(ArrayD::from_shape_vec(IxDyn(&out_shape), y)?)
}

/// Runs a float kernel on f32/f64 directly and on f16/bf16 through f32.
macro_rules! float_dispatch {
    ($x:expr, $rest:expr, $f:ident, $($extra:expr),*) => {{
        fn pick<'a, T: 'a>(t: Option<&'a Tensor>, get: fn(&'a Tensor) -> Option<&'a ArrayD<T>>) -> OpResult<Option<&'a ArrayD<T>>> {
            match t {
                None => Ok(None),
                Some(t) => get(t).map(Some).ok_or_else(|| crate::error::OpError::Invalid(format!("input dtype {} differs from X", t.dtype()))),
            }
        }
        fn conv_up<T: Copy>(t: Option<&ArrayD<T>>, f: fn(T) -> f32) -> Option<ArrayD<f32>> {
            t.map(|a| a.mapv(f))
        }
        let rest: Vec<Option<&Tensor>> = $rest;
        match $x {
            Tensor::F32(x) => {
                let r: Vec<Option<&ArrayD<f32>>> = rest.iter().map(|t| pick(*t, |t| if let Tensor::F32(a) = t { Some(a) } else { None })).collect::<OpResult<_>>()?;
                Tensor::F32($f(x, &r, $($extra),*)?)
            }
            Tensor::F64(x) => {
                let r: Vec<Option<&ArrayD<f64>>> = rest.iter().map(|t| pick(*t, |t| if let Tensor::F64(a) = t { Some(a) } else { None })).collect::<OpResult<_>>()?;
                Tensor::F64($f(x, &r, $($extra),*)?)
            }
            Tensor::F16(x) => {
                let r: Vec<Option<&ArrayD<f16>>> = rest.iter().map(|t| pick(*t, |t| if let Tensor::F16(a) = t { Some(a) } else { None })).collect::<OpResult<_>>()?;
                let r32: Vec<Option<ArrayD<f32>>> = r.iter().map(|a| conv_up(*a, f16::to_f32)).collect();
                let rr: Vec<Option<&ArrayD<f32>>> = r32.iter().map(|a| a.as_ref()).collect();
                Tensor::F16($f(&x.mapv(f16::to_f32), &rr, $($extra),*)?.mapv(f16::from_f32))
            }
            Tensor::BF16(x) => {
                let r: Vec<Option<&ArrayD<bf16>>> = rest.iter().map(|t| pick(*t, |t| if let Tensor::BF16(a) = t { Some(a) } else { None })).collect::<OpResult<_>>()?;
                let r32: Vec<Option<ArrayD<f32>>> = r.iter().map(|a| conv_up(*a, bf16::to_f32)).collect();
                let rr: Vec<Option<&ArrayD<f32>>> = r32.iter().map(|a| a.as_ref()).collect();
                Tensor::BF16($f(&x.mapv(bf16::to_f32), &rr, $($extra),*)?.mapv(bf16::from_f32))
            }
            other => unsupported!("dtype {} (expected a float type)", other.dtype()),
        }
    }};
}

fn conv(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let rest = vec![Some(input(inputs, 1)?), opt_input(inputs, 2)?];
    fn go<T: GemmFloat>(
        x: &ArrayD<T>,
        r: &[Option<&ArrayD<T>>],
        ctx: &OpCtx,
    ) -> OpResult<ArrayD<T>> {
        let Some(w) = r[0] else {
            bail!("Conv: W is missing")
        };
        conv_t(ctx, x, w, r[1])
    }
    single(float_dispatch!(x, rest, go, ctx))
}

// ---------------------------------------------------------------------------------------------
// ConvTranspose
// ---------------------------------------------------------------------------------------------

pub(crate) fn convt_geom(ctx: &OpCtx, ins: &[usize], w_spatial: &[usize]) -> OpResult<Geom> {
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

fn conv_transpose(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
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

// ---------------------------------------------------------------------------------------------
// DeformConv
// ---------------------------------------------------------------------------------------------

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

fn deform_conv(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
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

#[cfg(test)]
mod tests {

    use super::*;
    use crate::ir::Attr;
    use crate::ops::Kernel;
    use crate::ops::testing::run_kernel;

    fn call(k: Kernel, attrs: Vec<(&str, Attr)>, ins: Vec<Option<Tensor>>) -> Tensor {
        run_kernel(k, "X", 22, attrs, ins, 1).unwrap().remove(0)
    }

    fn rand(seed: u64, n: usize) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    fn t(shape: &[usize], seed: u64) -> (Tensor, Vec<f32>) {
        let v = rand(seed, shape.iter().product());
        (Tensor::from_f32(shape, v.clone()).unwrap(), v)
    }

    fn ints(v: &[i64]) -> Attr {
        Attr::Ints(v.to_vec())
    }

    fn close(got: &Tensor, want: &[f32], shape: &[usize]) {
        assert_eq!(got.shape(), shape);
        let g = got.to_f64_vec().unwrap();
        for (i, (a, b)) in g.iter().zip(want).enumerate() {
            assert!(
                (*a as f32 - b).abs() <= 1e-4 * (1.0 + b.abs()),
                "at {i}: {a} vs {b}"
            );
        }
    }

    /// Direct 2-D convolution: x [n,c,h,w], w [m,c/g,kh,kw], strides s, dilations d, pads [t,l,b,r].
    #[allow(clippy::too_many_arguments)]
    fn naive(
        x: &[f32],
        xs: [usize; 4],
        w: &[f32],
        ws: [usize; 4],
        b: &[f32],
        g: usize,
        s: [usize; 2],
        d: [usize; 2],
        p: [usize; 4],
    ) -> (Vec<f32>, [usize; 4]) {
        let [n, c, h, wd] = xs;
        let [m, cg, kh, kw] = ws;
        let oh = (h + p[0] + p[2] - (d[0] * (kh - 1) + 1)) / s[0] + 1;
        let ow = (wd + p[1] + p[3] - (d[1] * (kw - 1) + 1)) / s[1] + 1;
        let mut y = vec![0f32; n * m * oh * ow];
        for ni in 0..n {
            for oc in 0..m {
                for i in 0..oh {
                    for j in 0..ow {
                        let mut acc = b[oc];
                        for ic in 0..cg {
                            for a in 0..kh {
                                for bb in 0..kw {
                                    let yy = (i * s[0] + a * d[0]) as i64 - p[0] as i64;
                                    let xx = (j * s[1] + bb * d[1]) as i64 - p[1] as i64;
                                    if yy < 0 || xx < 0 || yy >= h as i64 || xx >= wd as i64 {
                                        continue;
                                    }
                                    let ch = (oc / (m / g)) * cg + ic;
                                    acc += x[((ni * c + ch) * h + yy as usize) * wd + xx as usize]
                                        * w[((oc * cg + ic) * kh + a) * kw + bb];
                                }
                            }
                        }
                        y[((ni * m + oc) * oh + i) * ow + j] = acc;
                    }
                }
            }
        }
        (y, [n, m, oh, ow])
    }

    #[test]
    fn conv_groups_depthwise_asymmetric_pads_dilation() {
        // Grouped (im2col + GEMM per group) and depthwise with multiplier 2 (direct path).
        for (g, ws) in [(2usize, [4usize, 2, 3, 2]), (4, [8, 1, 3, 3])] {
            let (x, xv) = t(&[2, 4, 7, 6], 1);
            let (w, wv) = t(&ws, 2);
            let (b, bv) = t(&[ws[0]], 3);
            let attrs = vec![
                ("group", Attr::Int(g as i64)),
                ("strides", ints(&[2, 2])),
                ("dilations", ints(&[2, 1])),
                ("pads", ints(&[1, 0, 2, 1])),
            ];
            let got = call(conv, attrs, vec![Some(x), Some(w), Some(b)]);
            let (want, shape) = naive(
                &xv,
                [2, 4, 7, 6],
                &wv,
                ws,
                &bv,
                g,
                [2, 2],
                [2, 1],
                [1, 0, 2, 1],
            );
            close(&got, &want, &shape);
        }
    }

    #[test]
    fn conv_same_lower_and_pointwise() {
        let (x, xv) = t(&[1, 3, 5, 5], 4);
        let (w, wv) = t(&[2, 3, 2, 2], 5);
        let zero = vec![0f32; 2];
        // SAME_LOWER, stride 1, k 2: total pad 1, all at the start.
        let got = call(
            conv,
            vec![("auto_pad", Attr::String(b"SAME_LOWER".to_vec()))],
            vec![Some(x.clone()), Some(w)],
        );
        let (want, shape) = naive(
            &xv,
            [1, 3, 5, 5],
            &wv,
            [2, 3, 2, 2],
            &zero,
            1,
            [1, 1],
            [1, 1],
            [1, 1, 0, 0],
        );
        close(&got, &want, &shape);
        let (w1, w1v) = t(&[2, 3, 1, 1], 6);
        let (want, shape) = naive(
            &xv,
            [1, 3, 5, 5],
            &w1v,
            [2, 3, 1, 1],
            &zero,
            1,
            [1, 1],
            [1, 1],
            [0; 4],
        );
        close(&call(conv, vec![], vec![Some(x), Some(w1)]), &want, &shape);
    }

    #[test]
    fn conv_transpose_matches_scatter() {
        // X [1,4,3,2], W [4, 3, 3, 2] with group 2 -> M = 6; strides 2x1, pads, output_padding.
        let (x, xv) = t(&[1, 4, 3, 2], 7);
        let (w, wv) = t(&[4, 3, 3, 2], 8);
        let (b, bv) = t(&[6], 9);
        let attrs = vec![
            ("group", Attr::Int(2)),
            ("strides", ints(&[2, 1])),
            ("pads", ints(&[1, 0, 0, 1])),
            ("output_padding", ints(&[1, 0])),
        ];
        let got = call(conv_transpose, attrs, vec![Some(x), Some(w), Some(b)]);
        let (oh, ow) = (2 * 2 + 1 + 3 - 1, 1 + 2 - 1);
        let mut want = vec![0f32; 6 * oh * ow];
        for oc in 0..6 {
            for v in &mut want[oc * oh * ow..(oc + 1) * oh * ow] {
                *v = bv[oc];
            }
        }
        for ic in 0..4 {
            let gi = ic / 2;
            for i in 0..3 {
                for j in 0..2 {
                    for ml in 0..3 {
                        for a in 0..3 {
                            for c in 0..2 {
                                let yy = (i * 2 + a) as i64 - 1;
                                let xx = (j + c) as i64;
                                if yy < 0 || yy >= oh as i64 || xx >= ow as i64 {
                                    continue;
                                }
                                let oc = gi * 3 + ml;
                                want[(oc * oh + yy as usize) * ow + xx as usize] +=
                                    xv[(ic * 3 + i) * 2 + j] * wv[((ic * 3 + ml) * 3 + a) * 2 + c];
                            }
                        }
                    }
                }
            }
        }
        close(&got, &want, &[1, 6, oh, ow]);
    }
}
