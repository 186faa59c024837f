//! Pooling: MaxPool, AveragePool, LpPool and their global forms (MaxUnpool and RoI pooling are in
//! `pool_roi`).
//!
//! Spatial dims are handled as 3-D (missing leading dims are 1); each (n, c) plane is one task.
use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};
use num_traits::{Float, Zero};
use rayon::prelude::*;

use super::{OpCtx, Registry, input, single};
use crate::error::OpResult;
use crate::tensor::{Tensor, Value};
use crate::{bail, map_numeric, unsupported};

pub fn register(r: &mut Registry) {
    r.add("", "MaxPool", max_pool);
    r.add("", "AveragePool", average_pool);
    r.add("", "LpPool", lp_pool);
    r.add("", "GlobalAveragePool", global_average_pool);
    r.add("", "GlobalMaxPool", global_max_pool);
    r.add("", "GlobalLpPool", global_lp_pool);
    super::pool_roi::register(r);
}

/// Output elements past which planes are processed in parallel.
const PAR_MIN: usize = 1 << 14;

/// Pooling window geometry, padded to 3 spatial dims.
#[derive(Debug, Clone)]
pub struct PGeom {
    pub rank: usize,
    pub ins: [usize; 3],
    pub k: [usize; 3],
    pub s: [usize; 3],
    pub d: [usize; 3],
    pub pb: [i64; 3],
    pub pe: [i64; 3],
    pub outs: [usize; 3],
}

impl PGeom {
    /// The window as a convolution's geometry (its taps are a depthwise convolution's).
    fn conv(&self) -> super::conv::Geom {
        super::conv::Geom {
            ins: self.ins,
            k: self.k,
            s: self.s,
            d: self.d,
            pb: self.pb,
            outs: self.outs,
        }
    }

    fn in_sp(&self) -> usize {
        self.ins.iter().product()
    }
    fn out_sp(&self) -> usize {
        self.outs.iter().product()
    }
    /// The input positions along dim `i` of the window at output `o`: (first position, valid taps
    /// in [0, in)), and the number of taps inside the explicitly padded region.
    fn taps(&self, i: usize, o: usize) -> (i64, usize, usize, usize) {
        let start = (o * self.s[i]) as i64 - self.pb[i];
        let d = self.d[i] as i64;
        let (mut lo, mut hi, mut padded) = (usize::MAX, 0usize, 0usize);
        for t in 0..self.k[i] {
            let p = start + t as i64 * d;
            if p >= 0 && p < self.ins[i] as i64 {
                lo = lo.min(t);
                hi = t + 1;
            }
            if p >= -self.pb[i] && p < self.ins[i] as i64 + self.pe[i] {
                padded += 1;
            }
        }
        if lo == usize::MAX {
            lo = 0;
        }
        (start, lo, hi, padded)
    }
}

fn pad3<T: Copy>(v: &[T], fill: T) -> [T; 3] {
    let mut r = [fill; 3];
    let off = 3 - v.len();
    r[off..].copy_from_slice(v);
    r
}

/// Largest kernel size, stride, dilation or pad accepted (keeps index arithmetic far from overflow).
pub(super) const LIMIT: i64 = 1 << 31;

pub(super) fn ints_attr(
    ctx: &OpCtx,
    name: &str,
    rank: usize,
    default: i64,
    min: i64,
) -> OpResult<Vec<i64>> {
    match ctx.attr_opt_ints(name)? {
        None => Ok(vec![default; rank]),
        Some(v) => {
            if v.len() != rank || v.iter().any(|&x| x < min || x > LIMIT) {
                bail!("attribute {name}={v:?} must have {rank} values in [{min}, {LIMIT}]");
            }
            Ok(v)
        }
    }
}

pub fn pool_geom(ctx: &OpCtx, xs: &[usize]) -> OpResult<PGeom> {
    if xs.len() < 3 {
        bail!("pooling needs an input of rank >= 3, got {xs:?}");
    }
    let ins = &xs[2..];
    let r = ins.len();
    if r > 3 {
        unsupported!("pooling over {r} spatial dims (1 to 3 are supported)");
    }
    let k = match ctx.attr_opt_ints("kernel_shape")? {
        Some(k) if k.len() == r && k.iter().all(|&v| (1..=LIMIT).contains(&v)) => k,
        Some(k) => bail!("kernel_shape {k:?} must have {r} positive values"),
        None => bail!("required attribute 'kernel_shape' is missing"),
    };
    let s = ints_attr(ctx, "strides", r, 1, 1)?;
    let d = ints_attr(ctx, "dilations", r, 1, 1)?;
    let ceil = ctx.attr_i("ceil_mode", 0)? != 0;
    let auto_pad = ctx.attr_s("auto_pad", "NOTSET")?;
    let (mut pb, mut pe, mut outs) = (vec![0i64; r], vec![0i64; r], vec![0usize; r]);
    let explicit = match ctx.attr_opt_ints("pads")? {
        None => vec![0; 2 * r],
        Some(p) if p.len() == 2 * r && p.iter().all(|&v| (0..=LIMIT).contains(&v)) => p,
        Some(p) => bail!("pads {p:?} must have {} non-negative values", 2 * r),
    };
    for i in 0..r {
        let n = ins[i] as i64;
        let dk = (k[i] - 1).saturating_mul(d[i]).saturating_add(1);
        match auto_pad.as_str() {
            "SAME_UPPER" | "SAME_LOWER" => {
                let o = (n + s[i] - 1) / s[i];
                let total = ((o - 1) * s[i] + dk - n).max(0);
                let b = if auto_pad == "SAME_UPPER" {
                    total / 2
                } else {
                    total - total / 2
                };
                (pb[i], pe[i], outs[i]) = (b, total - b, o as usize);
            }
            "VALID" | "NOTSET" | "" => {
                let (b, e) = if auto_pad == "VALID" {
                    (0, 0)
                } else {
                    (explicit[i], explicit[r + i])
                };
                let span = n + b + e - dk;
                if span < 0 {
                    bail!(
                        "pooling window (dilated size {dk}) exceeds the padded input ({}) along dim {i}",
                        n + b + e
                    );
                }
                let mut o = if ceil {
                    (span + s[i] - 1) / s[i] + 1
                } else {
                    span / s[i] + 1
                };
                if ceil && (o - 1) * s[i] >= n + b {
                    o -= 1;
                }
                (pb[i], pe[i], outs[i]) = (b, e, o as usize);
            }
            other => bail!("unknown auto_pad '{other}'"),
        }
    }
    let us = |v: &[i64]| v.iter().map(|&x| x as usize).collect::<Vec<usize>>();
    Ok(PGeom {
        rank: r,
        ins: pad3(ins, 1),
        k: pad3(&us(&k), 1),
        s: pad3(&us(&s), 1),
        d: pad3(&us(&d), 1),
        pb: pad3(&pb, 0),
        pe: pad3(&pe, 0),
        outs: pad3(&outs, 1),
    })
}

pub fn out_shape(xs: &[usize], g: &PGeom) -> Vec<usize> {
    let mut s = xs[..2].to_vec();
    s.extend_from_slice(&g.outs[3 - g.rank..]);
    s
}

/// Runs `f(plane_index, output_plane)` over every output plane, in parallel when large.
fn for_planes<T: Send, F: Fn(usize, &mut [T]) + Sync + Send>(
    y: &mut [T],
    plane: usize,
    work: usize,
    f: F,
) {
    if plane == 0 {
        return;
    }
    if work >= PAR_MIN {
        y.par_chunks_mut(plane)
            .enumerate()
            .for_each(|(i, p)| f(i, p));
    } else {
        y.chunks_mut(plane).enumerate().for_each(|(i, p)| f(i, p));
    }
}

/// Visits every output position of a plane with its window: `f(out_index, [(start, lo, hi, padded); 3])`.
fn windows(g: &PGeom, mut f: impl FnMut(usize, &[(i64, usize, usize, usize); 3])) {
    let t0: Vec<_> = (0..g.outs[0]).map(|o| g.taps(0, o)).collect();
    let t1: Vec<_> = (0..g.outs[1]).map(|o| g.taps(1, o)).collect();
    let t2: Vec<_> = (0..g.outs[2]).map(|o| g.taps(2, o)).collect();
    let mut oi = 0;
    for a in &t0 {
        for b in &t1 {
            for c in &t2 {
                f(oi, &[*a, *b, *c]);
                oi += 1;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// MaxPool
// ---------------------------------------------------------------------------------------------

/// The max of no values, for a window wholly in the padding (dilations or auto_pad can make one):
/// "minus infinity (if supported by the datatype) or the minimum value of the data type otherwise",
/// ReduceMax's rule for an empty reduction (MaxPool's text does not say; onnxruntime's CPU kernel
/// gives the lowest finite value, PyTorch -inf).
trait EmptyMax: Copy {
    const EMPTY_MAX: Self;

    /// MaxPool's values by a kernel of this type's own, where it has one for this geometry.
    fn max_pool_kernel(_g: &PGeom, _xd: &[Self], _planes: usize) -> Option<Vec<Self>> {
        None
    }
}

/// f32 MaxPool by the depthwise convolution's window taps and vector kernel (the window rule of
/// `max_values::take`, the same bits).
impl EmptyMax for f32 {
    const EMPTY_MAX: Self = f32::NEG_INFINITY;

    fn max_pool_kernel(g: &PGeom, xd: &[f32], planes: usize) -> Option<Vec<f32>> {
        let geom = g.conv();
        super::conv::pool_f32(&geom, xd, planes, super::conv::PoolOf::Max)
    }
}

macro_rules! empty_max {
    ($($t:ty => $v:expr),* $(,)?) => {$(impl EmptyMax for $t { const EMPTY_MAX: Self = $v; })*};
}

empty_max! {
    f64 => f64::NEG_INFINITY, f16 => f16::NEG_INFINITY,
    bf16 => bf16::NEG_INFINITY, i8 => i8::MIN, u8 => u8::MIN, i16 => i16::MIN, u16 => u16::MIN,
    i32 => i32::MIN, u32 => u32::MIN, i64 => i64::MIN, u64 => u64::MIN,
}

/// MaxPool of one tensor. A NaN in a window makes its max NaN and its index the first NaN's (the max
/// of values with a NaN among them is NaN, as for ReduceMax and for GlobalMaxPool, which the
/// specification calls MaxPool over the whole plane); a window wholly in the padding gives
/// [`EmptyMax`] and index -1.
fn max_pool_t<T: Copy + PartialOrd + EmptyMax + Send + Sync>(
    ctx: &OpCtx,
    x: &ArrayD<T>,
    want_idx: bool,
) -> OpResult<(ArrayD<T>, Option<ArrayD<i64>>)> {
    let xs = x.shape();
    let g = pool_geom(ctx, xs)?;
    let col_major = ctx.attr_i("storage_order", 0)? != 0;
    let oshape = out_shape(xs, &g);
    ctx.check_alloc(
        &oshape,
        std::mem::size_of::<T>() + if want_idx { 8 } else { 0 },
    )?;
    let x = x.as_standard_layout();
    let Some(xd) = x.as_slice() else {
        bail!("MaxPool: non-contiguous input")
    };
    let (in_sp, out_sp) = (g.in_sp(), g.out_sp());
    let [_, i1, i2] = g.ins;
    let r = g.rank;
    // Multipliers of the (padded 3-D) position for the index output.
    let mul: [usize; 3] = if col_major {
        let dims = &g.ins[3 - r..];
        let mut m = [0usize; 3];
        let mut acc = 1;
        for (j, dd) in dims.iter().enumerate() {
            m[3 - r + j] = acc;
            acc *= dd;
        }
        m
    } else {
        [i1 * i2, i2, 1]
    };
    let total = oshape.iter().product::<usize>();
    if !want_idx {
        return Ok((max_pool_values(&g, xd, &oshape)?, None));
    }
    let mut y: Vec<(T, i64)> = vec![(T::EMPTY_MAX, -1); total];
    for_planes(
        &mut y,
        out_sp,
        g.k.iter().fold(total, |a, &b| a.saturating_mul(b)),
        |pi, out| {
            let src = &xd[pi * in_sp..(pi + 1) * in_sp];
            let base = (pi * in_sp) as i64;
            windows(&g, |oi, w| {
                let mut best: Option<(T, usize)> = None;
                for ka in w[0].1..w[0].2 {
                    let ia = (w[0].0 + (ka * g.d[0]) as i64) as usize;
                    for kb in w[1].1..w[1].2 {
                        let ib = (w[1].0 + (kb * g.d[1]) as i64) as usize;
                        let row = (ia * i1 + ib) * i2;
                        for kc in w[2].1..w[2].2 {
                            let ic = (w[2].0 + (kc * g.d[2]) as i64) as usize;
                            let v = src[row + ic];
                            // Replace unless the best so far is NaN, or `v` is neither NaN nor
                            // greater (`partial_cmp` is None exactly when one of them is NaN).
                            let take = match best {
                                None => true,
                                Some((b, _)) => {
                                    b.partial_cmp(&b).is_some()
                                        && v.partial_cmp(&b) != Some(std::cmp::Ordering::Less)
                                        && v.partial_cmp(&b) != Some(std::cmp::Ordering::Equal)
                                }
                            };
                            if take {
                                best = Some((v, ia * mul[0] + ib * mul[1] + ic * mul[2]));
                            }
                        }
                    }
                }
                out[oi] = match best {
                    Some((v, p)) => (v, base + p as i64),
                    None => (T::EMPTY_MAX, -1),
                };
            });
        },
    );
    let vals = ArrayD::from_shape_vec(IxDyn(&oshape), y.iter().map(|p| p.0).collect())?;
    let idx = if want_idx {
        Some(ArrayD::from_shape_vec(
            IxDyn(&oshape),
            y.iter().map(|p| p.1).collect(),
        )?)
    } else {
        None
    };
    Ok((vals, idx))
}

fn max_pool(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let want = ctx.node.outputs.len() > 1 && !ctx.node.outputs[1].is_empty();
    macro_rules! go {
        ($($v:ident),*) => {
            match x {
                $(Tensor::$v(a) => {
                    let (v, i) = max_pool_t(ctx, a, want)?;
                    (Tensor::$v(v), i)
                })*
                other => unsupported!("MaxPool of {}", other.dtype()),
            }
        };
    }
    let (v, i) = go!(F32, F64, F16, BF16, I8, U8, I16, U16, I32, U32, I64, U64);
    let mut out = vec![Value::Tensor(v)];
    if let Some(i) = i {
        out.push(Value::Tensor(Tensor::I64(i)));
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// AveragePool and LpPool
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
enum Reduce {
    Avg { include_pad: bool },
    Lp(f64),
}

fn lp_pow<T: Float>(v: T, p: f64) -> T {
    let a = v.abs();
    if p == 1.0 {
        a
    } else if p == 2.0 {
        a * a
    } else if p.fract() == 0.0 && p.abs() < 64.0 {
        a.powi(p as i32)
    } else {
        a.powf(T::from(p).unwrap_or(T::one()))
    }
}

fn lp_root<T: Float>(s: T, p: f64) -> T {
    if p == 1.0 {
        s
    } else if p == 2.0 {
        s.sqrt()
    } else {
        s.powf(T::from(1.0 / p).unwrap_or(T::one()))
    }
}

/// AveragePool by a kernel of the type's own, where it has one.
trait AvgPoolKernel: Sized {
    fn avg_pool_kernel(_g: &PGeom, _xd: &[Self], _planes: usize, _pad: bool) -> Option<Vec<Self>> {
        None
    }
}

impl AvgPoolKernel for f64 {}
impl AvgPoolKernel for f16 {}
impl AvgPoolKernel for bf16 {}

/// f32 AveragePool by the depthwise convolution's window taps: each window summed from zero in
/// window order (as the window walk sums it), then divided by its count.
impl AvgPoolKernel for f32 {
    fn avg_pool_kernel(g: &PGeom, xd: &[f32], planes: usize, pad: bool) -> Option<Vec<f32>> {
        // Per dim and output: the valid taps, or with `pad` the taps inside the explicit padding.
        let per = |i: usize| -> Vec<usize> {
            (0..g.outs[i])
                .map(|o| match g.taps(i, o) {
                    (_, _, _, padded) if pad => padded,
                    (_, lo, hi, _) => hi - lo,
                })
                .collect()
        };
        let (c0, c1, c2) = (per(0), per(1), per(2));
        let counts: Vec<f32> = c0
            .iter()
            .flat_map(|&a| c1.iter().map(move |&b| a * b))
            .flat_map(|ab| c2.iter().map(move |&c| (ab * c) as f32))
            .collect();
        let of = super::conv::PoolOf::Mean { counts: &counts };
        super::conv::pool_f32(&g.conv(), xd, planes, of)
    }
}

fn avg_pool_t<T: Float + Send + Sync + AvgPoolKernel>(
    ctx: &OpCtx,
    x: &ArrayD<T>,
    red: Reduce,
) -> OpResult<ArrayD<T>> {
    let xs = x.shape();
    let g = pool_geom(ctx, xs)?;
    let oshape = out_shape(xs, &g);
    ctx.check_alloc(&oshape, std::mem::size_of::<T>())?;
    let x = x.as_standard_layout();
    let Some(xd) = x.as_slice() else {
        bail!("pool: non-contiguous input")
    };
    let (in_sp, out_sp) = (g.in_sp(), g.out_sp());
    let [_, i1, i2] = g.ins;
    let total = oshape.iter().product::<usize>();
    if let Reduce::Avg { include_pad } = red {
        let planes = total / out_sp.max(1);
        if let Some(y) = T::avg_pool_kernel(&g, xd, planes, include_pad) {
            return Ok(ArrayD::from_shape_vec(IxDyn(&oshape), y)?);
        }
    }
    let mut y = vec![T::zero(); total];
    if g.ins[0] == 1 && g.k[0] == 1 && g.outs[0] == 1 && g.pb[0] == 0 {
        // One or two spatial dims: rows of window sums first, then sums of those down the
        // columns (k₁ + k₂ additions an output instead of k₁·k₂).
        let (t1, t2) = (
            (0..g.outs[1]).map(|o| g.taps(1, o)).collect::<Vec<_>>(),
            (0..g.outs[2]).map(|o| g.taps(2, o)).collect::<Vec<_>>(),
        );
        for_planes(&mut y, out_sp, total * (g.k[1] + g.k[2]), |pi, out| {
            let src = &xd[pi * in_sp..(pi + 1) * in_sp];
            separable_plane(&g, &t1, &t2, src, out, red);
        });
        return Ok(ArrayD::from_shape_vec(IxDyn(&oshape), y)?);
    }
    for_planes(
        &mut y,
        out_sp,
        g.k.iter().fold(total, |a, &b| a.saturating_mul(b)),
        |pi, out| {
            let src = &xd[pi * in_sp..(pi + 1) * in_sp];
            windows(&g, |oi, w| {
                let mut sum = T::zero();
                for ka in w[0].1..w[0].2 {
                    let ia = (w[0].0 + (ka * g.d[0]) as i64) as usize;
                    for kb in w[1].1..w[1].2 {
                        let ib = (w[1].0 + (kb * g.d[1]) as i64) as usize;
                        let row = &src[(ia * i1 + ib) * i2..(ia * i1 + ib + 1) * i2];
                        for kc in w[2].1..w[2].2 {
                            let v = row[(w[2].0 + (kc * g.d[2]) as i64) as usize];
                            sum = sum
                                + match red {
                                    Reduce::Avg { .. } => v,
                                    Reduce::Lp(p) => lp_pow(v, p),
                                };
                        }
                    }
                }
                out[oi] = match red {
                    Reduce::Avg { include_pad } => {
                        let count = if include_pad {
                            w[0].3 * w[1].3 * w[2].3
                        } else {
                            (w[0].2 - w[0].1) * (w[1].2 - w[1].1) * (w[2].2 - w[2].1)
                        };
                        if count == 0 {
                            T::nan()
                        } else {
                            sum / T::from(count).unwrap_or(T::one())
                        }
                    }
                    Reduce::Lp(p) => lp_root(sum, p),
                };
            });
        },
    );
    Ok(ArrayD::from_shape_vec(IxDyn(&oshape), y)?)
}

/// One plane of AveragePool or LpPool over (at most) two spatial dims: each input row's window
/// sums along the columns, then each output's sum of those along the rows, then the count or the
/// root. `t1`, `t2`: the windows of each output row and column (`PGeom::taps`).
fn separable_plane<T: Float>(
    g: &PGeom,
    t1: &[(i64, usize, usize, usize)],
    t2: &[(i64, usize, usize, usize)],
    src: &[T],
    out: &mut [T],
    red: Reduce,
) {
    let (rows, cols) = (g.ins[1], g.ins[2]);
    let oc = g.outs[2];
    let (d1, d2) = (g.d[1] as i64, g.d[2] as i64);
    let term = |v: T| match red {
        Reduce::Avg { .. } => v,
        Reduce::Lp(p) => lp_pow(v, p),
    };
    let mut h = vec![T::zero(); rows * oc];
    for r in 0..rows {
        let row = &src[r * cols..(r + 1) * cols];
        let hr = &mut h[r * oc..(r + 1) * oc];
        for (o, &(start, lo, hi, _)) in t2.iter().enumerate() {
            let mut sum = T::zero();
            for k in lo..hi {
                sum = sum + term(row[(start + k as i64 * d2) as usize]);
            }
            hr[o] = sum;
        }
    }
    for (orow, &(start, lo, hi, padded1)) in t1.iter().enumerate() {
        let dst = &mut out[orow * oc..(orow + 1) * oc];
        dst.iter_mut().for_each(|v| *v = T::zero());
        for k in lo..hi {
            let r = (start + k as i64 * d1) as usize;
            for (d, &v) in dst.iter_mut().zip(&h[r * oc..(r + 1) * oc]) {
                *d = *d + v;
            }
        }
        for (o, d) in dst.iter_mut().enumerate() {
            let (_, lo2, hi2, padded2) = t2[o];
            *d = match red {
                Reduce::Avg { include_pad } => {
                    let count = if include_pad {
                        padded1 * padded2
                    } else {
                        (hi - lo) * (hi2 - lo2)
                    };
                    if count == 0 {
                        T::nan()
                    } else {
                        *d / T::from(count).unwrap_or(T::one())
                    }
                }
                Reduce::Lp(p) => lp_root(*d, p),
            };
        }
    }
}

/// Runs a Float kernel on f32/f64 directly and on f16/bf16 through f32.
macro_rules! float_pool {
    ($x:expr, $a:ident => $e:expr) => {
        match $x {
            Tensor::F32($a) => Tensor::F32($e),
            Tensor::F64($a) => Tensor::F64($e),
            Tensor::F16(h) => {
                let $a = &crate::ops::cast::widen::<f16>(h);
                Tensor::F16(crate::ops::cast::narrow($e))
            }
            Tensor::BF16(h) => {
                let $a = &crate::ops::cast::widen::<bf16>(h);
                Tensor::BF16(crate::ops::cast::narrow($e))
            }
            other => unsupported!("dtype {} (expected a float type)", other.dtype()),
        }
    };
}

fn average_pool(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let red = Reduce::Avg {
        include_pad: ctx.attr_i("count_include_pad", 0)? != 0,
    };
    single(float_pool!(x, a => avg_pool_t(ctx, a, red)?))
}

fn lp_pool(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let p = ctx.attr_f("p", 2.0)? as f64;
    single(float_pool!(x, a => avg_pool_t(ctx, a, Reduce::Lp(p))?))
}

// ---------------------------------------------------------------------------------------------
// Global pools
// ---------------------------------------------------------------------------------------------

/// Reduces each (n, c) plane of `x` to one value with `f`.
fn global_t<T: Copy + Send + Sync, F: Fn(&[T]) -> T + Sync + Send>(
    x: &ArrayD<T>,
    f: F,
) -> OpResult<ArrayD<T>> {
    let xs = x.shape();
    if xs.len() < 2 {
        bail!("global pooling needs an input of rank >= 2, got {xs:?}");
    }
    let mut oshape = xs[..2].to_vec();
    oshape.resize(xs.len(), 1);
    let plane: usize = xs[2..].iter().product();
    let planes = xs[0] * xs[1];
    let x = x.as_standard_layout();
    let Some(xd) = x.as_slice() else {
        bail!("global pool: non-contiguous input")
    };
    let y: Vec<T> = if plane == 0 {
        bail!("global pooling over an empty spatial extent {xs:?}");
    } else if xd.len() >= PAR_MIN {
        xd.par_chunks(plane).map(&f).collect()
    } else {
        xd.chunks(plane).map(&f).collect()
    };
    debug_assert_eq!(y.len(), planes);
    Ok(ArrayD::from_shape_vec(IxDyn(&oshape), y)?)
}

fn global_average_pool(_ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    single(float_pool!(x, a => global_t(a, plane_mean)?))
}

/// The mean of one plane: sixteen running sums (one AVX-512 vector's lanes), each over every
/// sixteenth value, then combined. The loop vectorises, where one running sum waited on each add,
/// and each sum rounds over a sixteenth of the terms.
pub(super) fn plane_mean<T: Float>(p: &[T]) -> T {
    let mut lanes = [T::zero(); 16];
    let chunks = p.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        for (s, &v) in lanes.iter_mut().zip(c) {
            *s = *s + v;
        }
    }
    let sum =
        lanes.iter().fold(T::zero(), |a, &b| a + b) + rest.iter().fold(T::zero(), |a, &b| a + b);
    sum / T::from(p.len()).unwrap_or(T::one())
}

fn global_lp_pool(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let p = ctx.attr_f("p", 2.0)? as f64;
    single(
        float_pool!(x, a => global_t(a, |v| lp_root(v.iter().fold(Zero::zero(), |s, &b| s + lp_pow(b, p)), p))?),
    )
}

fn global_max_pool(_ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    fn mx<T: Copy + PartialOrd>(p: &[T]) -> T {
        let mut b = p[0];
        for &v in &p[1..] {
            if v > b || v.partial_cmp(&v).is_none() {
                b = v;
            }
        }
        b
    }
    let t = map_numeric!(x, a => global_t(a, mx)?)?;
    single(t)
}

mod max_values;
use max_values::max_pool_values;

#[cfg(test)]
mod tests;
