//! Normalizations: BatchNormalization, InstanceNormalization, LayerNormalization, GroupNormalization, LRN and friends.
//!
//! Statistics are computed in f64 (two passes: mean, then centred variance) whatever the input type;
//! the normalized values are rounded once to the output type.
//!
//! A row's statistics, which one running sum would serialise, are eight interleaved f64 sums in a
//! fixed order (`lane_sum`); f32 LayerNormalization's rows run inside AVX-512/AVX2 wrappers
//! (`simd_dispatch!`) with the generic form's operations, so its bits.
use std::mem::MaybeUninit;

use half::{bf16, f16};
use ndarray::{ArrayD, CowArray, IxDyn};
use rayon::prelude::*;

use super::broadcast::PAR_THRESHOLD;
use super::reduce::{Elem, geometry, lanes, with_layout};
use super::{OpCtx, Registry, input, norm_axis, opt_input};
use crate::error::{OpError, OpResult};
use crate::tensor::{DType, Tensor, Value};
use crate::{bail, unsupported};

pub fn register(r: &mut Registry) {
    r.add("", "BatchNormalization", batch_norm);
    r.add("", "InstanceNormalization", instance_norm);
    r.add("", "LayerNormalization", layer_norm);
    r.add("", "GroupNormalization", group_norm);
    r.add("", "RMSNormalization", rms_norm);
    r.add("", "LRN", lrn);
    r.add("", "MeanVarianceNormalization", mvn);
    r.add("", "LpNormalization", lp_norm);
}

fn slice_of<'a, T>(c: &'a CowArray<T, IxDyn>) -> OpResult<&'a [T]> {
    c.as_slice()
        .ok_or_else(|| OpError::Invalid("internal: non-contiguous layout".into()))
}

/// Runs `$body` (which yields a `Vec<T>` of the input's shape) on the row-major elements `$s` of a float
/// tensor, and wraps the result in a tensor of the same dtype and shape.
macro_rules! float_kernel {
    ($x:expr, $what:expr, $s:ident => $body:expr) => {{
        match $x {
            Tensor::F32(a) => {
                let c = a.as_standard_layout();
                let $s = slice_of(&c)?;
                Tensor::F32(ArrayD::from_shape_vec(IxDyn(a.shape()), $body)?)
            }
            Tensor::F64(a) => {
                let c = a.as_standard_layout();
                let $s = slice_of(&c)?;
                Tensor::F64(ArrayD::from_shape_vec(IxDyn(a.shape()), $body)?)
            }
            Tensor::F16(a) => {
                let c = a.as_standard_layout();
                let $s = slice_of(&c)?;
                Tensor::F16(ArrayD::from_shape_vec(IxDyn(a.shape()), $body)?)
            }
            Tensor::BF16(a) => {
                let c = a.as_standard_layout();
                let $s = slice_of(&c)?;
                Tensor::BF16(ArrayD::from_shape_vec(IxDyn(a.shape()), $body)?)
            }
            other => unsupported!("{} of {}", $what, other.dtype()),
        }
    }};
}

/// A parameter tensor as f64, broadcast (numpy rules, one-directional) to `target`, row-major.
fn param(t: &Tensor, target: &[usize], what: &str) -> OpResult<Vec<f64>> {
    let v = t.to_f64_vec()?;
    if t.shape() == target {
        return Ok(v);
    }
    let a = ArrayD::from_shape_vec(IxDyn(t.shape()), v)?;
    match a.broadcast(IxDyn(target)) {
        Some(b) => Ok(b.iter().copied().collect()),
        None => bail!(
            "{what} of shape {:?} does not broadcast to {target:?}",
            t.shape()
        ),
    }
}

/// Per-channel parameter of `c` values (a tensor of `c` elements of any shape).
fn channel_param(t: &Tensor, c: usize, what: &str) -> OpResult<Vec<f64>> {
    if t.len() != c {
        bail!("{what} has shape {:?}, expected {c} elements", t.shape());
    }
    t.to_f64_vec()
}

/// Σ f(x) over `x` in f64, in eight interleaved partial sums (element `i` into sum `i mod 8`)
/// added pairwise at the end, then the tail: a fixed order, which the compiler can keep in vector
/// registers, where one running sum waits on each add in turn (a row's statistics were most of a
/// LayerNormalization's time).
#[inline(always)]
fn lane_sum<T: Elem>(x: &[T], f: impl Fn(f64) -> f64) -> f64 {
    let mut acc = [0f64; 8];
    let chunks = x.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, v) in acc.iter_mut().zip(c) {
            *a += f(v.to_f64());
        }
    }
    let [a0, a1, a2, a3, a4, a5, a6, a7] = acc;
    let mut sum = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7));
    for v in tail {
        sum += f(v.to_f64());
    }
    sum
}

/// A row's mean and 1/sqrt(variance + eps); without `center` the mean is 0 and the variance the
/// mean square (RMS).
#[inline(always)]
fn row_stats<T: Elem>(xr: &[T], center: bool, eps: f64) -> (f64, f64) {
    let n = xr.len() as f64;
    let mean = if center { lane_sum(xr, |v| v) / n } else { 0.0 };
    let var = lane_sum(xr, |v| {
        let d = v - mean;
        d * d
    }) / n;
    (mean, 1.0 / (var + eps).sqrt())
}

/// Normalizes each row of `cols` elements: `y = (x - mean) * inv * w + b` with `(w, b) = wb(row, col)`;
/// without `center`, `mean` is 0 and `inv` is 1/sqrt(mean(x^2) + eps) (RMS). Returns the outputs and
/// each row's (mean, inv).
fn norm_rows<T: Elem, O: Elem>(
    x: &[T],
    cols: usize,
    eps: f64,
    center: bool,
    wb: impl Fn(usize, usize) -> (f64, f64) + Sync,
) -> (Vec<O>, Vec<(f64, f64)>) {
    let zero = O::from_f64(0.0);
    if cols == 0 || x.is_empty() {
        return (vec![zero; x.len()], Vec::new());
    }
    let rows = x.len() / cols;
    let mut y = vec![zero; x.len()];
    let mut st = vec![(0.0, 0.0); rows];
    let work = |r: usize, yr: &mut [O], xr: &[T], s: &mut (f64, f64)| {
        let (mean, inv) = row_stats(xr, center, eps);
        for (k, (o, v)) in yr.iter_mut().zip(xr).enumerate() {
            let (w, b) = wb(r, k);
            *o = O::from_f64((v.to_f64() - mean) * inv * w + b);
        }
        *s = (mean, inv);
    };
    if x.len() >= PAR_THRESHOLD {
        y.par_chunks_mut(cols)
            .zip(x.par_chunks(cols))
            .zip(st.par_iter_mut())
            .enumerate()
            .for_each(|(r, ((yr, xr), s))| work(r, yr, xr, s));
    } else {
        y.chunks_mut(cols)
            .zip(x.chunks(cols))
            .zip(st.iter_mut())
            .enumerate()
            .for_each(|(r, ((yr, xr), s))| work(r, yr, xr, s));
    }
    (y, st)
}

/// One row of [`layer_norm_f32`]'s work: (output row, input row) and the row's (mean, 1/σ) slot.
type RowJob<'a> = ((&'a mut [MaybeUninit<f32>], &'a [f32]), &'a mut (f64, f64));

/// [`norm_rows`] for f32 LayerNormalization (a scale and bias per column): each element's
/// operations are the generic form's, so the bits are the same, but each row runs on the widest
/// vectors the CPU has (the generic loop stayed scalar SSE2) and the output is written once.
fn layer_norm_f32(
    x: &[f32],
    cols: usize,
    eps: f64,
    w: &[f64],
    b: &[f64],
) -> (Vec<f32>, Vec<(f64, f64)>) {
    if cols == 0 || x.is_empty() || w.len() < cols || b.len() < cols {
        return norm_rows(x, cols, eps, true, |_, k| (w[k], b[k]));
    }
    let rows = x.len() / cols;
    let (w, b) = (&w[..cols], &b[..cols]);
    let mut y: Vec<f32> = crate::arena::vec(x.len());
    let mut st = vec![(0.0, 0.0); rows];
    let out = &mut y.spare_capacity_mut()[..x.len()];
    let work = |((yr, xr), s): RowJob<'_>| {
        *s = layer_norm_row_f32(yr, xr, w, b, eps);
    };
    if x.len() >= PAR_THRESHOLD {
        out.par_chunks_mut(cols)
            .zip(x.par_chunks(cols))
            .zip(st.par_iter_mut())
            .for_each(work);
    } else {
        out.chunks_mut(cols)
            .zip(x.chunks(cols))
            .zip(st.iter_mut())
            .for_each(work);
    }
    // SAFETY: the rows cover the first x.len() elements, and each row writes all of its own.
    unsafe { y.set_len(x.len()) };
    (y, st)
}

/// One row of [`layer_norm_f32`]; its (mean, 1/σ).
fn layer_norm_row_f32(
    yr: &mut [MaybeUninit<f32>],
    xr: &[f32],
    w: &[f64],
    b: &[f64],
    eps: f64,
) -> (f64, f64) {
    #[inline(always)]
    fn body(yr: &mut [MaybeUninit<f32>], xr: &[f32], w: &[f64], b: &[f64], eps: f64) -> (f64, f64) {
        let (mean, inv) = row_stats(xr, true, eps);
        for (((o, &v), &wk), &bk) in yr.iter_mut().zip(xr).zip(w).zip(b) {
            o.write(((v as f64 - mean) * inv * wk + bk) as f32);
        }
        (mean, inv)
    }
    quorum_kernels::simd_dispatch!(|yr: &mut [MaybeUninit<f32>],
                                    xr: &[f32],
                                    w: &[f64],
                                    b: &[f64],
                                    eps: f64|
     -> (f64, f64) { body(yr, xr, w, b, eps) })
}

/// `y = x * a[c] + b[c]` over `x` laid out as `[n, c, inner]`; with `per_elem`, `a` and `b` hold
/// `c * inner` values indexed by (channel, position).
fn affine_channels<T: Elem>(
    x: &[T],
    c: usize,
    inner: usize,
    a: &[f64],
    b: &[f64],
    per_elem: bool,
) -> Vec<T> {
    let mut y = vec![T::from_f64(0.0); x.len()];
    if inner == 0 || c == 0 {
        return y;
    }
    let work = |i: usize, yr: &mut [T], xr: &[T]| {
        let ch = i % c;
        if per_elem {
            let (pa, pb) = (
                &a[ch * inner..(ch + 1) * inner],
                &b[ch * inner..(ch + 1) * inner],
            );
            for (((o, v), s), t) in yr.iter_mut().zip(xr).zip(pa).zip(pb) {
                *o = T::from_f64(v.to_f64() * s + t);
            }
        } else {
            let (s, t) = (a[ch], b[ch]);
            for (o, v) in yr.iter_mut().zip(xr) {
                *o = T::from_f64(v.to_f64() * s + t);
            }
        }
    };
    if x.len() >= PAR_THRESHOLD {
        y.par_chunks_mut(inner)
            .zip(x.par_chunks(inner))
            .enumerate()
            .for_each(|(i, (yr, xr))| work(i, yr, xr));
    } else {
        y.chunks_mut(inner)
            .zip(x.chunks(inner))
            .enumerate()
            .for_each(|(i, (yr, xr))| work(i, yr, xr));
    }
    y
}

/// `[N, C, inner]` of a tensor of rank >= 2.
fn nc_inner(x: &Tensor, op: &str) -> OpResult<(usize, usize, usize)> {
    let s = x.shape();
    if s.len() < 2 {
        bail!("{op} needs an input of rank >= 2, got shape {s:?}");
    }
    Ok((s[0], s[1], s[2..].iter().product()))
}

/// Per-channel mean and population variance of `x` laid out as `[n, c, inner]`.
fn channel_stats<T: Elem>(x: &[T], n: usize, c: usize, inner: usize) -> (Vec<f64>, Vec<f64>) {
    let cnt = (n * inner) as f64;
    let mut mean = vec![0.0; c];
    let mut var = vec![0.0; c];
    for ch in 0..c {
        let rows =
            || (0..n).flat_map(move |i| x[(i * c + ch) * inner..(i * c + ch + 1) * inner].iter());
        let m = rows().map(|v| v.to_f64()).sum::<f64>() / cnt;
        var[ch] = rows().map(|v| (v.to_f64() - m).powi(2)).sum::<f64>() / cnt;
        mean[ch] = m;
    }
    (mean, var)
}

fn batch_norm(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let (scale, bias, mean, var) = (
        input(inputs, 1)?,
        input(inputs, 2)?,
        input(inputs, 3)?,
        input(inputs, 4)?,
    );
    let eps = ctx.attr_f("epsilon", 1e-5)? as f64;
    let momentum = ctx.attr_f("momentum", 0.9)? as f64;
    let opset = ctx.opset();
    let wanted = ctx
        .node
        .outputs
        .iter()
        .rposition(|o| !o.is_empty())
        .map_or(1, |p| p + 1);
    let training = if opset >= 14 {
        ctx.attr_i("training_mode", 0)? != 0
    } else if opset >= 7 {
        wanted > 1
    } else {
        ctx.attr_i("is_test", 0)? == 0
    };
    let (n, c, inner) = nc_inner(x, "BatchNormalization")?;
    let s = scale.to_f64_vec()?;
    let b = bias.to_f64_vec()?;
    let m = mean.to_f64_vec()?;
    let v = var.to_f64_vec()?;
    let per_elem = s.len() != c && s.len() == c * inner && opset < 9;
    let plen = if per_elem { c * inner } else { c };
    if [&s, &b, &m, &v].iter().any(|p| p.len() != plen) {
        bail!(
            "scale {:?}, B {:?}, mean {:?}, var {:?} must have {plen} elements for input {:?}",
            scale.shape(),
            bias.shape(),
            mean.shape(),
            var.shape(),
            x.shape()
        );
    }
    if !training {
        let a: Vec<f64> = s
            .iter()
            .zip(&v)
            .map(|(s, v)| s / (v + eps).sqrt())
            .collect();
        let sh: Vec<f64> = b
            .iter()
            .zip(&m)
            .zip(&a)
            .map(|((b, m), a)| b - m * a)
            .collect();
        let y = float_kernel!(x, "BatchNormalization", xs => affine_channels(xs, c, inner, &a, &sh, per_elem));
        return Ok(vec![Value::Tensor(y)]);
    }
    if per_elem {
        unsupported!("BatchNormalization training mode with spatial=0");
    }
    let (bm, bv) = with_float_slice(x, |xs| channel_stats(xs, n, c, inner))?;
    let a: Vec<f64> = s
        .iter()
        .zip(&bv)
        .map(|(s, v)| s / (v + eps).sqrt())
        .collect();
    let sh: Vec<f64> = b
        .iter()
        .zip(&bm)
        .zip(&a)
        .map(|((b, m), a)| b - m * a)
        .collect();
    let y =
        float_kernel!(x, "BatchNormalization", xs => affine_channels(xs, c, inner, &a, &sh, false));
    let rm: Vec<f64> = m
        .iter()
        .zip(&bm)
        .map(|(m, x)| m * momentum + x * (1.0 - momentum))
        .collect();
    let rv: Vec<f64> = v
        .iter()
        .zip(&bv)
        .map(|(v, x)| v * momentum + x * (1.0 - momentum))
        .collect();
    let mut out = vec![
        Value::Tensor(y),
        Value::Tensor(Tensor::from_f64s(mean.dtype(), mean.shape(), rm)?),
        Value::Tensor(Tensor::from_f64s(var.dtype(), var.shape(), rv)?),
    ];
    if opset < 14 {
        out.push(Value::Tensor(Tensor::from_f64s(
            mean.dtype(),
            mean.shape(),
            bm,
        )?));
        out.push(Value::Tensor(Tensor::from_f64s(
            var.dtype(),
            var.shape(),
            bv,
        )?));
    }
    Ok(out)
}

/// Applies `f` to the row-major elements of a float tensor.
fn with_float_slice<R>(x: &Tensor, f: impl FnOnce(&[f64]) -> R) -> OpResult<R> {
    match x {
        Tensor::F64(a) => {
            let c = a.as_standard_layout();
            Ok(f(slice_of(&c)?))
        }
        Tensor::F32(_) | Tensor::F16(_) | Tensor::BF16(_) => Ok(f(&x.to_f64_vec()?)),
        other => unsupported!("dtype {} (expected a float type)", other.dtype()),
    }
}

fn instance_norm(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let eps = ctx.attr_f("epsilon", 1e-5)? as f64;
    let (_, c, inner) = nc_inner(x, "InstanceNormalization")?;
    let s = channel_param(input(inputs, 1)?, c, "scale")?;
    let b = channel_param(input(inputs, 2)?, c, "B")?;
    let wb = |r: usize, _k: usize| (s[r % c], b[r % c]);
    let y = float_kernel!(x, "InstanceNormalization", xs => norm_rows(xs, inner, eps, true, wb).0);
    Ok(vec![Value::Tensor(y)])
}

/// The dtype of LayerNormalization's Mean and InvStdDev outputs.
fn stash_dtype(ctx: &OpCtx, x: DType) -> OpResult<DType> {
    Ok(match ctx.attr_i("stash_type", 1)? {
        1 => DType::F32,
        16 => DType::BF16,
        10 => DType::F16,
        11 => DType::F64,
        _ => x,
    })
}

fn layer_norm(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let shape = x.shape();
    let rank = shape.len();
    let axis = norm_axis(ctx.attr_i("axis", -1)?, rank)?;
    let eps = ctx.attr_f("epsilon", 1e-5)? as f64;
    let norm_shape = &shape[axis..];
    let cols: usize = norm_shape.iter().product();
    let w = param(input(inputs, 1)?, norm_shape, "Scale")?;
    let b = match opt_input(inputs, 2)? {
        Some(t) => param(t, norm_shape, "B")?,
        None => vec![0.0; cols],
    };
    let stats;
    let y = if let Tensor::F32(a) = x {
        let c = a.as_standard_layout();
        let (y, st) = layer_norm_f32(slice_of(&c)?, cols, eps, &w, &b);
        stats = st;
        Tensor::F32(ArrayD::from_shape_vec(IxDyn(a.shape()), y)?)
    } else {
        float_kernel!(x, "LayerNormalization", xs => {
            let (y, st) = norm_rows(xs, cols, eps, true, |_, k| (w[k], b[k]));
            stats = st;
            y
        })
    };
    let mut out = vec![Value::Tensor(y)];
    let wanted = ctx.node.outputs.len();
    if wanted > 1 {
        let sdt = stash_dtype(ctx, x.dtype())?;
        let sshape: Vec<usize> = (0..rank)
            .map(|i| if i < axis { shape[i] } else { 1 })
            .collect();
        let rows = sshape.iter().product::<usize>();
        let (mut mean, mut inv): (Vec<f64>, Vec<f64>) = stats.into_iter().unzip();
        // Empty rows (a zero-sized normalized shape) have no statistics.
        mean.resize(rows, f64::NAN);
        inv.resize(rows, f64::NAN);
        out.push(Value::Tensor(Tensor::from_f64s(sdt, &sshape, mean)?));
        out.push(Value::Tensor(Tensor::from_f64s(sdt, &sshape, inv)?));
    }
    Ok(out)
}

fn rms_norm(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let scale = input(inputs, 1)?;
    let shape = x.shape();
    let axis = norm_axis(ctx.attr_i("axis", -1)?, shape.len())?;
    let eps = ctx.attr_f("epsilon", 1e-5)? as f64;
    let norm_shape = &shape[axis..];
    let cols: usize = norm_shape.iter().product();
    let w = param(scale, norm_shape, "scale")?;
    let wb = |_r: usize, k: usize| (w[k], 0.0);
    // The output takes the scale's dtype.
    macro_rules! out_as {
        ($xs:expr) => {
            match scale.dtype() {
                DType::F32 => Tensor::F32(ArrayD::from_shape_vec(
                    IxDyn(shape),
                    norm_rows::<_, f32>($xs, cols, eps, false, wb).0,
                )?),
                DType::F64 => Tensor::F64(ArrayD::from_shape_vec(
                    IxDyn(shape),
                    norm_rows::<_, f64>($xs, cols, eps, false, wb).0,
                )?),
                DType::F16 => Tensor::F16(ArrayD::from_shape_vec(
                    IxDyn(shape),
                    norm_rows::<_, f16>($xs, cols, eps, false, wb).0,
                )?),
                DType::BF16 => Tensor::BF16(ArrayD::from_shape_vec(
                    IxDyn(shape),
                    norm_rows::<_, bf16>($xs, cols, eps, false, wb).0,
                )?),
                d => unsupported!("RMSNormalization with scale of {d}"),
            }
        };
    }
    let y = match x {
        Tensor::F32(a) => out_as!(slice_of(&a.as_standard_layout())?),
        Tensor::F64(a) => out_as!(slice_of(&a.as_standard_layout())?),
        Tensor::F16(a) => out_as!(slice_of(&a.as_standard_layout())?),
        Tensor::BF16(a) => out_as!(slice_of(&a.as_standard_layout())?),
        other => unsupported!("RMSNormalization of {}", other.dtype()),
    };
    Ok(vec![Value::Tensor(y)])
}

fn group_norm(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let (scale, bias) = (input(inputs, 1)?, input(inputs, 2)?);
    let eps = ctx.attr_f("epsilon", 1e-5)? as f64;
    let g = ctx.req_i("num_groups")?;
    let (_, c, inner) = nc_inner(x, "GroupNormalization")?;
    if g <= 0 || c % g as usize != 0 {
        bail!("num_groups {g} must be positive and divide the {c} channels");
    }
    let g = g as usize;
    let cpg = c / g;
    // Opset 21 takes per-channel scale and bias; opset 18 took one per group.
    let per_channel = ctx.opset() >= 21 || scale.len() != g;
    let n = if per_channel { c } else { g };
    let s = channel_param(scale, n, "scale")?;
    let b = channel_param(bias, n, "bias")?;
    let wb = |r: usize, k: usize| {
        let i = if per_channel {
            (r % g) * cpg + k / inner.max(1)
        } else {
            r % g
        };
        (s[i], b[i])
    };
    let y =
        float_kernel!(x, "GroupNormalization", xs => norm_rows(xs, cpg * inner, eps, true, wb).0);
    Ok(vec![Value::Tensor(y)])
}

fn lrn_slice<T: Elem>(
    x: &[T],
    c: usize,
    inner: usize,
    size: usize,
    alpha: f64,
    beta: f64,
    bias: f64,
) -> Vec<T> {
    let mut y = vec![T::from_f64(0.0); x.len()];
    let blk = c * inner;
    if blk == 0 {
        return y;
    }
    let lo = (size - 1) / 2;
    let hi = size / 2 + 1; // ceil((size - 1) / 2) + 1: the window's exclusive end offset
    // Output plane `ch` of the image `xb`: each value over its window of channels' squares.
    let plane = |ch: usize, xb: &[T], yp: &mut [T], sq: &mut Vec<f64>| {
        sq.clear();
        sq.resize(inner, 0.0);
        for j in ch.saturating_sub(lo)..(ch + hi).min(c) {
            for (s, v) in sq.iter_mut().zip(&xb[j * inner..(j + 1) * inner]) {
                let v = v.to_f64();
                *s += v * v;
            }
        }
        let scaled = sq.iter().map(|s| bias + alpha / size as f64 * s);
        let out = yp.iter_mut().zip(&xb[ch * inner..(ch + 1) * inner]);
        // t^β by square roots for the common exponents (each correctly rounded in f64, so
        // within a few f64 ulps of `powf`, far inside the f32 bound) instead of a libm call.
        if beta == 0.75 {
            for ((o, v), t) in out.zip(scaled) {
                let r = t.sqrt();
                *o = T::from_f64(v.to_f64() / (r * r.sqrt()));
            }
        } else if beta == 0.5 {
            for ((o, v), t) in out.zip(scaled) {
                *o = T::from_f64(v.to_f64() / t.sqrt());
            }
        } else {
            for ((o, v), t) in out.zip(scaled) {
                *o = T::from_f64(v.to_f64() / t.powf(beta));
            }
        }
    };
    if inner == 0 {
        return y;
    }
    // Output planes split across the threads (each plane alone: its sums are the same wherever it
    // runs). By images, a batch of one ran on one thread: inception_v1's two LRNs took 3.5 ms.
    let image = |i: usize| &x[i / c * blk..][..blk];
    if x.len() >= PAR_THRESHOLD {
        y.par_chunks_mut(inner)
            .enumerate()
            .for_each_init(Vec::new, |sq, (i, yp)| plane(i % c, image(i), yp, sq));
    } else {
        let mut sq = Vec::new();
        y.chunks_mut(inner)
            .enumerate()
            .for_each(|(i, yp)| plane(i % c, image(i), yp, &mut sq));
    }
    y
}

fn lrn(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let size = ctx.req_i("size")?;
    if size <= 0 {
        bail!("LRN size must be positive, got {size}");
    }
    let alpha = ctx.attr_f("alpha", 1e-4)? as f64;
    let beta = ctx.attr_f("beta", 0.75)? as f64;
    let bias = ctx.attr_f("bias", 1.0)? as f64;
    let (_, c, inner) = nc_inner(x, "LRN")?;
    let y =
        float_kernel!(x, "LRN", xs => lrn_slice(xs, c, inner, size as usize, alpha, beta, bias));
    Ok(vec![Value::Tensor(y)])
}

/// Means over `axes` of `a`, shaped with the reduced axes kept as 1.
fn mean_keep(a: &ArrayD<f64>, axes: &[usize]) -> OpResult<ArrayD<f64>> {
    let g = geometry(a.shape(), axes);
    let r = g.dims.1 as f64;
    let v = with_layout(a, &g, |s| {
        lanes(
            s,
            g.dims,
            0.0,
            |acc, x| acc + x,
            |p, q| p + q,
            |acc| acc / r,
        )
    })?;
    Ok(ArrayD::from_shape_vec(IxDyn(&g.keep_shape), v)?)
}

fn mvn(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let rank = x.rank();
    let axes = ctx.attr_opt_ints("axes")?.unwrap_or_else(|| vec![0, 2, 3]);
    let mut axes: Vec<usize> = axes
        .iter()
        .map(|&a| norm_axis(a, rank))
        .collect::<OpResult<_>>()?;
    axes.sort_unstable();
    axes.dedup();
    if !x.dtype().is_float() || x.dtype().is_narrow_float() {
        unsupported!("MeanVarianceNormalization of {}", x.dtype());
    }
    let xf = ArrayD::from_shape_vec(IxDyn(x.shape()), x.to_f64_vec()?)?;
    let mean = mean_keep(&xf, &axes)?;
    let d = &xf - &mean;
    let var = mean_keep(&d.mapv(|v| v * v), &axes)?;
    let y = d / var.mapv(|v| v.sqrt() + 1e-9);
    let (shape, v) = (y.shape().to_vec(), y.into_iter().collect());
    Ok(vec![Value::Tensor(Tensor::from_f64s(
        x.dtype(),
        &shape,
        v,
    )?)])
}

fn lp_slice<T: Elem>(x: &[T], dims: (usize, usize, usize), p: i64) -> Vec<T> {
    let norms: Vec<f64> = if p == 1 {
        lanes(
            x,
            dims,
            0.0,
            |a, v: T| a + v.to_f64().abs(),
            |a, b| a + b,
            |a| a,
        )
    } else {
        lanes(
            x,
            dims,
            0.0,
            |a, v: T| a + v.to_f64() * v.to_f64(),
            |a, b| a + b,
            |a: f64| a.sqrt(),
        )
    };
    let (_, n, inner) = dims;
    x.iter()
        .enumerate()
        .map(|(i, v)| {
            let nm = norms[(i / (n * inner)) * inner + i % inner];
            T::from_f64(if nm == 0.0 { 0.0 } else { v.to_f64() / nm })
        })
        .collect()
}

fn lp_norm(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let shape = x.shape();
    let p = ctx.attr_i("p", 2)?;
    if p != 1 && p != 2 {
        bail!("LpNormalization p must be 1 or 2, got {p}");
    }
    if shape.is_empty() {
        bail!("LpNormalization needs an input of rank >= 1");
    }
    let axis = norm_axis(ctx.attr_i("axis", -1)?, shape.len())?;
    let dims = (
        shape[..axis].iter().product(),
        shape[axis],
        shape[axis + 1..].iter().product(),
    );
    let y = float_kernel!(x, "LpNormalization", xs => if xs.is_empty() { Vec::new() } else { lp_slice(xs, dims, p) });
    Ok(vec![Value::Tensor(y)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rand_vec(n: usize, seed: u64) -> Vec<f64> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 0.9
            })
            .collect()
    }

    /// LRN with an even size: the window is [c - (size-1)/2 floor, c + (size-1)/2 ceil]; the square
    /// root forms of β = 0.75 and 0.5 and the general `powf` against `powf`, and a deliberately wrong
    /// exponent that the same check must catch.
    /// LRN's planes split across threads (a batch of two f32 images past the parallel threshold)
    /// give the bits of the same planes one image at a time, each image alone below it; and the
    /// window one channel short (a broken variant) is caught.
    #[test]
    fn lrn_split_across_threads_has_the_bits_of_each_image_alone() {
        let (c, inner, size) = (9, 48 * 40, 5);
        let x: Vec<f32> = rand_vec(2 * c * inner, 5)
            .iter()
            .map(|&v| v as f32)
            .collect();
        assert!(x.len() >= PAR_THRESHOLD && c * inner < PAR_THRESHOLD);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let y = lrn_slice(&x, c, inner, size, 1e-2, 0.75, 1.0);
        let alone: Vec<f32> = x
            .chunks(c * inner)
            .flat_map(|img| lrn_slice(img, c, inner, size, 1e-2, 0.75, 1.0))
            .collect();
        assert_eq!(bits(&y), bits(&alone));
        let short: Vec<f32> = x
            .chunks(c * inner)
            .flat_map(|img| lrn_slice(img, c, inner, size - 1, 1e-2, 0.75, 1.0))
            .collect();
        assert_ne!(
            bits(&y),
            bits(&short),
            "a window one channel short went unseen"
        );
    }

    #[test]
    fn lrn_even_window() {
        let (c, inner, size) = (5, 3, 4);
        let x = rand_vec(2 * c * inner, 3);
        for (beta, judged_as) in [(0.75, 0.75), (0.5, 0.5), (0.6, 0.6), (0.75, 0.7)] {
            let y = lrn_slice(&x, c, inner, size, 0.3, beta, 1.5);
            let mut worst = 0f64;
            for n in 0..2 {
                for ch in 0..c {
                    for k in 0..inner {
                        let lo = ch.saturating_sub(1);
                        let hi = (ch + 2).min(c - 1);
                        let sq: f64 = (lo..=hi).map(|j| x[(n * c + j) * inner + k].powi(2)).sum();
                        let i = (n * c + ch) * inner + k;
                        let want = x[i] / (1.5 + 0.3 / 4.0 * sq).powf(judged_as);
                        worst = worst.max((y[i] - want).abs());
                    }
                }
            }
            assert_eq!(
                worst < 1e-12,
                beta == judged_as,
                "beta {beta}: worst {worst:e}"
            );
        }
    }

    /// Group normalization with per-channel scale: statistics per (n, group), affine per channel.
    #[test]
    fn group_rows_per_channel() {
        let (n, c, g, inner) = (2, 4, 2, 3);
        let x = rand_vec(n * c * inner, 9);
        let s = rand_vec(c, 10);
        let b = rand_vec(c, 11);
        let cpg = c / g;
        let (y, st) = norm_rows::<f64, f64>(&x, cpg * inner, 1e-5, true, |r, k| {
            let ch = (r % g) * cpg + k / inner;
            (s[ch], b[ch])
        });
        assert_eq!(st.len(), n * g);
        for r in 0..n * g {
            let row = &x[r * cpg * inner..(r + 1) * cpg * inner];
            let m = row.iter().sum::<f64>() / row.len() as f64;
            let v = row.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / row.len() as f64;
            for (k, xv) in row.iter().enumerate() {
                let ch = (r % g) * cpg + k / inner;
                let want = (xv - m) / (v + 1e-5).sqrt() * s[ch] + b[ch];
                assert!((y[r * cpg * inner + k] - want).abs() < 1e-12);
            }
        }
    }

    /// `lane_sum` counts every element once, whatever the length against its eight lanes and its
    /// tail: distinct powers of two sum exactly, so a dropped, doubled or misplaced element changes
    /// the result; a sum that skips the tail (the broken variant) must be caught by the same check.
    #[test]
    fn lane_sum_counts_each_element_once() {
        let skip_tail = |x: &[f32]| -> f64 {
            let whole = x.len() / 8 * 8;
            lane_sum(&x[..whole], |v| v)
        };
        let mut caught = false;
        for len in 0..40usize {
            let x: Vec<f32> = (0..len).map(|i| 2f32.powi(i as i32 - 20)).collect();
            let want: f64 = x.iter().map(|&v| v as f64).sum();
            assert_eq!(lane_sum(&x, |v| v), want, "len {len}");
            // The squares span 2^-40.. 2^(2·len − 42): exact in f64 up to 26 elements.
            if len <= 26 {
                let sq: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
                assert_eq!(lane_sum(&x, |v| v * v), sq, "len {len}");
            }
            caught |= skip_tail(&x) != want;
        }
        assert!(caught, "a sum without its tail passed");
    }

    /// The f32 LayerNormalization rows give the generic form's bits (and statistics) on every
    /// row length around the sums' lanes, from seeded values with an offset (a mean to remove);
    /// the scale applied after the bias (the broken variant) must differ.
    #[test]
    fn layer_norm_f32_has_the_generic_bits() {
        for cols in [1usize, 7, 8, 9, 64, 256, 300] {
            // 200 rows of 256: enough values for the rows to be split across threads.
            let rows = if cols == 256 { 200 } else { 5 };
            let x: Vec<f32> = crate::ops::testing::seeded_f32(cols as u64, rows * cols, -3.0, 5.0);
            let w: Vec<f64> = crate::ops::testing::seeded_f32(cols as u64 + 1, cols, 0.5, 2.0)
                .iter()
                .map(|&v| v as f64)
                .collect();
            let b: Vec<f64> = crate::ops::testing::seeded_f32(cols as u64 + 2, cols, -1.0, 1.0)
                .iter()
                .map(|&v| v as f64)
                .collect();
            let (got, gst) = layer_norm_f32(&x, cols, 1e-5, &w, &b);
            let (want, wst) = norm_rows::<f32, f32>(&x, cols, 1e-5, true, |_, k| (w[k], b[k]));
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "cols {cols}");
            assert_eq!(gst, wst);
            let (wrong, _) =
                norm_rows::<f32, f32>(&x, cols, 1e-5, true, |_, k| (w[k], b[k] * w[k]));
            if cols > 1 {
                assert_ne!(bits(&got), bits(&wrong), "cols {cols}");
            }
        }
    }
}
