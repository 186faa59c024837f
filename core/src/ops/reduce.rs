//! Reductions (Reduce*, ArgMax, ArgMin) with axes as attribute or input.
//!
//! Every reduction is brought to the shape `[outer, r, inner]` (reducing the middle): directly when the
//! reduced axes are one block of the row-major layout, after a transposing copy otherwise. Floats
//! accumulate in f64; integers in i128 with wrapping, which matches numpy's wrapping in the input type.
//!
//! The [`Elem`] trait and [`lanes`] are also used by `softmax.rs` and `norm.rs`.
use half::{bf16, f16};
use ndarray::{ArrayD, ArrayViewD, IxDyn};
use rayon::prelude::*;

use super::broadcast::PAR_THRESHOLD;
use super::{OpCtx, Registry, input, norm_axis, opt_input, single};
use crate::error::{OpError, OpResult};
use crate::tensor::{Tensor, Value};
use crate::{bail, unsupported};

pub fn register(r: &mut Registry) {
    r.add("", "ReduceSum", reduce_sum);
    r.add("", "ReduceMean", reduce_mean);
    r.add("", "ReduceMax", reduce_max);
    r.add("", "ReduceMin", reduce_min);
    r.add("", "ReduceProd", reduce_prod);
    r.add("", "ReduceL1", reduce_l1);
    r.add("", "ReduceL2", reduce_l2);
    r.add("", "ReduceSumSquare", reduce_sum_square);
    r.add("", "ReduceLogSum", reduce_log_sum);
    r.add("", "ReduceLogSumExp", reduce_log_sum_exp);
    r.add("", "ArgMax", arg_max);
    r.add("", "ArgMin", arg_min);
}

/// A numeric element type as the reductions and normalizations see it.
pub(crate) trait Elem: Copy + Send + Sync + PartialOrd + 'static {
    const FLOAT: bool;
    /// -inf for floats, the minimum for integers.
    const LOWEST: Self;
    /// +inf for floats, the maximum for integers.
    const HIGHEST: Self;
    fn to_f64(self) -> f64;
    /// Rounds for floats; truncates and saturates for integers (like numpy's `astype`).
    fn from_f64(v: f64) -> Self;
    fn to_i128(self) -> i128;
    /// Wraps for integers.
    fn from_i128(v: i128) -> Self;
    fn nan(self) -> bool;
}

macro_rules! impl_int {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            const FLOAT: bool = false;
            const LOWEST: Self = <$t>::MIN;
            const HIGHEST: Self = <$t>::MAX;
            fn to_f64(self) -> f64 { self as f64 }
            fn from_f64(v: f64) -> Self { v as $t }
            fn to_i128(self) -> i128 { self as i128 }
            fn from_i128(v: i128) -> Self { v as $t }
            fn nan(self) -> bool { false }
        }
    )*};
}
impl_int!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! impl_float {
    ($($t:ty: $to:expr, $from:expr);*) => {$(
        impl Elem for $t {
            const FLOAT: bool = true;
            const LOWEST: Self = <$t>::NEG_INFINITY;
            const HIGHEST: Self = <$t>::INFINITY;
            fn to_f64(self) -> f64 { ($to)(self) }
            fn from_f64(v: f64) -> Self { ($from)(v) }
            fn to_i128(self) -> i128 { ($to)(self) as i128 }
            fn from_i128(v: i128) -> Self { ($from)(v as f64) }
            fn nan(self) -> bool { self != self }
        }
    )*};
}
impl_float!(
    f32: |x: f32| x as f64, |v: f64| v as f32;
    f64: |x: f64| x, |v: f64| v;
    f16: |x: f16| x.to_f64(), f16::from_f64;
    bf16: |x: bf16| x.to_f64(), bf16::from_f64
);

/// Folds each lane of `data` seen as `[outer, r, inner]` along `r`: `init`, then `step` per element,
/// `combine` to merge partial folds, `fin` for the output. Returns `outer * inner` outputs, row-major.
pub(crate) fn lanes<T, A, O>(
    data: &[T],
    (outer, r, inner): (usize, usize, usize),
    init: A,
    step: impl Fn(A, T) -> A + Sync,
    combine: impl Fn(A, A) -> A + Sync,
    fin: impl Fn(A) -> O + Sync,
) -> Vec<O>
where
    T: Copy + Sync,
    A: Copy + Send + Sync,
    O: Send,
{
    let total = outer * r * inner;
    let par = total >= PAR_THRESHOLD;
    if inner == 1 {
        let lane = |o: usize| {
            let s = &data[o * r..(o + 1) * r];
            if par && outer < 8 && r >= PAR_THRESHOLD {
                let a = s
                    .par_chunks(4096)
                    .map(|c| c.iter().fold(init, |a, &x| step(a, x)))
                    .reduce(|| init, &combine);
                fin(a)
            } else {
                fin(s.iter().fold(init, |a, &x| step(a, x)))
            }
        };
        return if par {
            (0..outer).into_par_iter().map(lane).collect()
        } else {
            (0..outer).map(lane).collect()
        };
    }
    // Columns: accumulate rows of `inner` elements into a vector of accumulators.
    const COLS: usize = 1024;
    let block = |o: usize, k0: usize, k1: usize| -> Vec<O> {
        let mut acc = vec![init; k1 - k0];
        let base = o * r * inner;
        for j in 0..r {
            let row = &data[base + j * inner + k0..base + j * inner + k1];
            for (a, &x) in acc.iter_mut().zip(row) {
                *a = step(*a, x);
            }
        }
        acc.into_iter().map(&fin).collect()
    };
    let tasks: Vec<(usize, usize, usize)> = (0..outer)
        .flat_map(|o| {
            (0..inner)
                .step_by(COLS)
                .map(move |k| (o, k, (k + COLS).min(inner)))
        })
        .collect();
    let parts: Vec<Vec<O>> = if par {
        tasks
            .into_par_iter()
            .map(|(o, a, b)| block(o, a, b))
            .collect()
    } else {
        tasks.into_iter().map(|(o, a, b)| block(o, a, b)).collect()
    };
    parts.into_iter().flatten().collect()
}

/// How a reduction over some axes maps onto `[outer, r, inner]`.
pub struct Geom {
    /// `Some(perm)` when the input must first be transposed (kept axes first, reduced last).
    pub perm: Option<Vec<usize>>,
    pub dims: (usize, usize, usize),
    /// The output shape with reduced axes kept as 1.
    pub keep_shape: Vec<usize>,
    /// The output shape with reduced axes removed.
    pub drop_shape: Vec<usize>,
}

/// The geometry of reducing `shape` over `axes` (normalised, deduplicated here).
pub fn geometry(shape: &[usize], axes: &[usize]) -> Geom {
    let rank = shape.len();
    let mut red = vec![false; rank];
    for &a in axes {
        if a < rank {
            red[a] = true;
        }
    }
    let keep_shape: Vec<usize> = (0..rank)
        .map(|i| if red[i] { 1 } else { shape[i] })
        .collect();
    let drop_shape: Vec<usize> = (0..rank).filter(|&i| !red[i]).map(|i| shape[i]).collect();
    // Reduced axes of size > 1 must form one block of the non-trivial axes for a direct view.
    let nontrivial: Vec<usize> = (0..rank).filter(|&i| shape[i] != 1).collect();
    let flags: Vec<bool> = nontrivial.iter().map(|&i| red[i]).collect();
    let first = flags.iter().position(|&f| f);
    let last = flags.iter().rposition(|&f| f);
    let contiguous = match (first, last) {
        (Some(f), Some(l)) => flags[f..=l].iter().all(|&x| x),
        _ => true,
    };
    let prod = |it: &mut dyn Iterator<Item = usize>| it.product::<usize>();
    if contiguous {
        let (f, l) = match (first, last) {
            (Some(f), Some(l)) => (nontrivial[f], nontrivial[l]),
            // Nothing of size > 1 is reduced: every element is its own lane.
            _ => (rank, rank.saturating_sub(1)),
        };
        if f >= rank {
            let n = prod(&mut shape.iter().copied());
            return Geom {
                perm: None,
                dims: (n, 1, 1),
                keep_shape,
                drop_shape,
            };
        }
        let outer = prod(&mut shape[..f].iter().copied());
        let r = prod(&mut shape[f..=l].iter().copied());
        let inner = prod(&mut shape[l + 1..].iter().copied());
        return Geom {
            perm: None,
            dims: (outer, r, inner),
            keep_shape,
            drop_shape,
        };
    }
    let mut perm: Vec<usize> = (0..rank).filter(|&i| !red[i]).collect();
    perm.extend((0..rank).filter(|&i| red[i]));
    let outer = prod(&mut (0..rank).filter(|&i| !red[i]).map(|i| shape[i]));
    let r = prod(&mut (0..rank).filter(|&i| red[i]).map(|i| shape[i]));
    Geom {
        perm: Some(perm),
        dims: (outer, r, 1),
        keep_shape,
        drop_shape,
    }
}

/// Runs `f` on the elements of `a` laid out as `g` wants (transposed copy when needed).
pub(crate) fn with_layout<T: Clone, R>(
    a: &ArrayD<T>,
    g: &Geom,
    f: impl FnOnce(&[T]) -> R,
) -> OpResult<R> {
    let v: ArrayViewD<T> = match &g.perm {
        Some(p) => a.view().permuted_axes(IxDyn(p)),
        None => a.view(),
    };
    let std = v.as_standard_layout();
    let s = std
        .as_slice()
        .ok_or_else(|| OpError::Invalid("internal: non-contiguous layout".into()))?;
    Ok(f(s))
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Op {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    L1,
    L2,
    SumSquare,
    LogSum,
    LogSumExp,
}

/// Online log-sum-exp accumulator (running max, sum of exp(x - max)).
fn lse_step(a: (f64, f64), x: f64) -> (f64, f64) {
    let (m, s) = a;
    if x == f64::NEG_INFINITY {
        (m, s)
    } else if x > m {
        (x, s * (m - x).exp() + 1.0)
    } else {
        (m, s + (x - m).exp())
    }
}

fn lse_combine(a: (f64, f64), b: (f64, f64)) -> (f64, f64) {
    if a.1 == 0.0 {
        return b;
    }
    if b.1 == 0.0 {
        return a;
    }
    let m = a.0.max(b.0);
    (m, a.1 * (a.0 - m).exp() + b.1 * (b.0 - m).exp())
}

fn lse_fin(a: (f64, f64)) -> f64 {
    if a.1 == 0.0 {
        f64::NEG_INFINITY
    } else {
        a.0 + a.1.ln()
    }
}

fn reduce_slice<T: Elem>(s: &[T], d: (usize, usize, usize), op: Op) -> Vec<T> {
    let n = d.1;
    let nf = n as f64;
    let max_step = |a: T, x: T| if x.nan() || x > a { x } else { a };
    let min_step = |a: T, x: T| if x.nan() || x < a { x } else { a };
    match op {
        Op::Max => return lanes(s, d, T::LOWEST, max_step, max_step, |a| a),
        Op::Min => return lanes(s, d, T::HIGHEST, min_step, min_step, |a| a),
        Op::LogSumExp => {
            return lanes(
                s,
                d,
                (f64::NEG_INFINITY, 0.0),
                |a, x: T| lse_step(a, x.to_f64()),
                lse_combine,
                |a| T::from_f64(lse_fin(a)),
            );
        }
        _ => {}
    }
    let add = |a: f64, b: f64| a + b;
    if T::FLOAT {
        match op {
            Op::Sum => lanes(s, d, 0.0, |a, x: T| a + x.to_f64(), add, T::from_f64),
            Op::Mean => lanes(
                s,
                d,
                0.0,
                |a, x: T| a + x.to_f64(),
                add,
                |a| T::from_f64(a / nf),
            ),
            Op::Prod => lanes(
                s,
                d,
                1.0,
                |a, x: T| a * x.to_f64(),
                |a, b| a * b,
                T::from_f64,
            ),
            Op::L1 => lanes(s, d, 0.0, |a, x: T| a + x.to_f64().abs(), add, T::from_f64),
            Op::L2 => lanes(
                s,
                d,
                0.0,
                |a, x: T| a + x.to_f64() * x.to_f64(),
                add,
                |a| T::from_f64(a.sqrt()),
            ),
            Op::SumSquare => lanes(
                s,
                d,
                0.0,
                |a, x: T| a + x.to_f64() * x.to_f64(),
                add,
                T::from_f64,
            ),
            Op::LogSum => lanes(
                s,
                d,
                0.0,
                |a, x: T| a + x.to_f64(),
                add,
                |a| T::from_f64(a.ln()),
            ),
            Op::Max | Op::Min | Op::LogSumExp => unreachable!(),
        }
    } else {
        let wadd = |a: i128, b: i128| a.wrapping_add(b);
        let wsq = |a: i128, x: T| a.wrapping_add(x.to_i128().wrapping_mul(x.to_i128()));
        match op {
            Op::Sum => lanes(
                s,
                d,
                0i128,
                |a, x: T| a.wrapping_add(x.to_i128()),
                wadd,
                T::from_i128,
            ),
            Op::Mean => lanes(
                s,
                d,
                0i128,
                |a, x: T| a.wrapping_add(x.to_i128()),
                wadd,
                |a| {
                    // numpy sums in the input type (wrapping) before dividing.
                    let a = T::from_i128(a).to_i128();
                    T::from_i128(if n == 0 { 0 } else { a / n as i128 })
                },
            ),
            Op::Prod => lanes(
                s,
                d,
                1i128,
                |a, x: T| a.wrapping_mul(x.to_i128()),
                |a, b| a.wrapping_mul(b),
                T::from_i128,
            ),
            Op::L1 => lanes(
                s,
                d,
                0i128,
                |a, x: T| a.wrapping_add(x.to_i128().abs()),
                wadd,
                T::from_i128,
            ),
            Op::L2 => lanes(s, d, 0i128, wsq, wadd, |a| {
                T::from_f64(T::from_i128(a).to_f64().sqrt())
            }),
            Op::SumSquare => lanes(s, d, 0i128, wsq, wadd, T::from_i128),
            Op::LogSum => lanes(
                s,
                d,
                0i128,
                |a, x: T| a.wrapping_add(x.to_i128()),
                wadd,
                |a| T::from_f64(T::from_i128(a).to_f64().ln()),
            ),
            Op::Max | Op::Min | Op::LogSumExp => unreachable!(),
        }
    }
}

fn reduce_array<T: Elem>(a: &ArrayD<T>, g: &Geom, keepdims: bool, op: Op) -> OpResult<ArrayD<T>> {
    let v = with_layout(a, g, |s| reduce_slice(s, g.dims, op))?;
    let shape = if keepdims {
        &g.keep_shape
    } else {
        &g.drop_shape
    };
    Ok(ArrayD::from_shape_vec(IxDyn(shape), v)?)
}

fn reduce_bool(a: &ArrayD<bool>, g: &Geom, keepdims: bool, op: Op) -> OpResult<ArrayD<bool>> {
    let v = match op {
        Op::Max => with_layout(a, g, |s| {
            lanes(s, g.dims, false, |a, x| a | x, |a, b| a | b, |a| a)
        })?,
        Op::Min => with_layout(a, g, |s| {
            lanes(s, g.dims, true, |a, x| a & x, |a, b| a & b, |a| a)
        })?,
        _ => unsupported!("{op:?} of bool"),
    };
    let shape = if keepdims {
        &g.keep_shape
    } else {
        &g.drop_shape
    };
    Ok(ArrayD::from_shape_vec(IxDyn(shape), v)?)
}

/// The opset from which the op reads `axes` from its second input instead of an attribute.
fn axes_input_since(op: Op) -> i64 {
    if op == Op::Sum { 13 } else { 18 }
}

/// The reduced axes of a Reduce* node, sorted and deduplicated: `axes` from the second input
/// (`axes_in`) from opset `since` on or when the attribute is absent, else the attribute; no axes means
/// every axis unless `noop_with_empty_axes`. Shared by every backend.
pub fn reduced_axes(
    ctx: &OpCtx,
    rank: usize,
    axes_in: Option<Vec<i64>>,
    since: i64,
) -> OpResult<Vec<usize>> {
    let axes: Vec<i64> = if ctx.opset() >= since || ctx.attr("axes").is_none() {
        match axes_in {
            Some(v) => v,
            None => ctx.attr_opt_ints("axes")?.unwrap_or_default(),
        }
    } else {
        ctx.attr_opt_ints("axes")?.unwrap_or_default()
    };
    let noop = ctx.attr_i("noop_with_empty_axes", 0)? != 0;
    let mut norm: Vec<usize> = if axes.is_empty() {
        if noop {
            Vec::new()
        } else {
            (0..rank).collect()
        }
    } else {
        axes.iter()
            .map(|&a| norm_axis(a, rank))
            .collect::<OpResult<_>>()?
    };
    if rank == 0 {
        norm.clear();
    }
    norm.sort_unstable();
    norm.dedup();
    Ok(norm)
}

fn reduce(ctx: &OpCtx, inputs: &[Option<&Value>], op: Op) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let rank = x.rank();
    let keepdims = ctx.attr_i("keepdims", 1)? != 0;
    let axes_in = opt_input(inputs, 1)?.map(|t| t.to_i64_vec()).transpose()?;
    let norm = reduced_axes(ctx, rank, axes_in, axes_input_since(op))?;
    let g = geometry(x.shape(), &norm);
    let out = match x {
        Tensor::F32(a) => Tensor::F32(reduce_array(a, &g, keepdims, op)?),
        Tensor::F64(a) => Tensor::F64(reduce_array(a, &g, keepdims, op)?),
        Tensor::F16(a) => Tensor::F16(reduce_array(a, &g, keepdims, op)?),
        Tensor::BF16(a) => Tensor::BF16(reduce_array(a, &g, keepdims, op)?),
        Tensor::I8(a) => Tensor::I8(reduce_array(a, &g, keepdims, op)?),
        Tensor::I16(a) => Tensor::I16(reduce_array(a, &g, keepdims, op)?),
        Tensor::I32(a) => Tensor::I32(reduce_array(a, &g, keepdims, op)?),
        Tensor::I64(a) => Tensor::I64(reduce_array(a, &g, keepdims, op)?),
        Tensor::U8(a) => Tensor::U8(reduce_array(a, &g, keepdims, op)?),
        Tensor::U16(a) => Tensor::U16(reduce_array(a, &g, keepdims, op)?),
        Tensor::U32(a) => Tensor::U32(reduce_array(a, &g, keepdims, op)?),
        Tensor::U64(a) => Tensor::U64(reduce_array(a, &g, keepdims, op)?),
        Tensor::Bool(a) => Tensor::Bool(reduce_bool(a, &g, keepdims, op)?),
        other => unsupported!("{op:?} of {}", other.dtype()),
    };
    single(out)
}

fn reduce_sum(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    reduce(ctx, inputs, Op::Sum)
}
fn reduce_mean(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    reduce(ctx, inputs, Op::Mean)
}
fn reduce_max(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    reduce(ctx, inputs, Op::Max)
}
fn reduce_min(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    reduce(ctx, inputs, Op::Min)
}
fn reduce_prod(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    reduce(ctx, inputs, Op::Prod)
}
fn reduce_l1(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    reduce(ctx, inputs, Op::L1)
}
fn reduce_l2(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    reduce(ctx, inputs, Op::L2)
}
fn reduce_sum_square(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    reduce(ctx, inputs, Op::SumSquare)
}
fn reduce_log_sum(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    reduce(ctx, inputs, Op::LogSum)
}
fn reduce_log_sum_exp(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    reduce(ctx, inputs, Op::LogSumExp)
}

/// Index of the max (or min) along the lanes of `[outer, r, inner]`. NaN wins, for both, as in
/// numpy's argmax / argmin (ONNX's reference evaluator; ArgMax points at the NaN ReduceMax returns):
/// the first NaN, or the last with `select_last_index` (numpy's argmax of the flipped lane).
fn arg_slice<T: Elem>(s: &[T], d: (usize, usize, usize), max: bool, last: bool) -> Vec<i64> {
    let better = move |x: T, best: T| {
        if x.nan() {
            !best.nan() || last
        } else if best.nan() {
            false
        } else if max {
            if last { x >= best } else { x > best }
        } else if last {
            x <= best
        } else {
            x < best
        }
    };
    // Accumulator: (best value, its index, next index).
    let init: Option<(T, i64)> = None;
    let step = move |a: Option<(T, i64)>, (i, x): (i64, T)| match a {
        Some((b, bi)) if !better(x, b) => Some((b, bi)),
        _ => Some((x, i)),
    };
    let (outer, r, inner) = d;
    let mut out = Vec::with_capacity(outer * inner);
    let mut acc: Vec<Option<(T, i64)>> = vec![init; inner];
    for o in 0..outer {
        acc.iter_mut().for_each(|a| *a = None);
        for j in 0..r {
            let row = &s[(o * r + j) * inner..(o * r + j + 1) * inner];
            for (a, &x) in acc.iter_mut().zip(row) {
                *a = step(*a, (j as i64, x));
            }
        }
        out.extend(acc.iter().map(|a| a.map_or(0, |(_, i)| i)));
    }
    out
}

fn arg(ctx: &OpCtx, inputs: &[Option<&Value>], max: bool) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let rank = x.rank();
    let axis = norm_axis(ctx.attr_i("axis", 0)?, rank)?;
    let keepdims = ctx.attr_i("keepdims", 1)? != 0;
    let last = ctx.attr_i("select_last_index", 0)? != 0;
    if rank > 0 && x.shape()[axis] == 0 {
        bail!(
            "{} over an empty axis {axis} of shape {:?}",
            if max { "ArgMax" } else { "ArgMin" },
            x.shape()
        );
    }
    let axes: Vec<usize> = if rank == 0 { vec![] } else { vec![axis] };
    let g = geometry(x.shape(), &axes);
    macro_rules! go {
        ($a:expr) => {
            with_layout($a, &g, |s| arg_slice(s, g.dims, max, last))?
        };
    }
    let v = match x {
        Tensor::F32(a) => go!(a),
        Tensor::F64(a) => go!(a),
        Tensor::F16(a) => go!(a),
        Tensor::BF16(a) => go!(a),
        Tensor::I8(a) => go!(a),
        Tensor::I16(a) => go!(a),
        Tensor::I32(a) => go!(a),
        Tensor::I64(a) => go!(a),
        Tensor::U8(a) => go!(a),
        Tensor::U16(a) => go!(a),
        Tensor::U32(a) => go!(a),
        Tensor::U64(a) => go!(a),
        Tensor::Bool(a) => {
            let u = a.mapv(|b| b as u8);
            go!(&u)
        }
        other => unsupported!(
            "{} of {}",
            if max { "ArgMax" } else { "ArgMin" },
            other.dtype()
        ),
    };
    let shape = if keepdims {
        &g.keep_shape
    } else {
        &g.drop_shape
    };
    single(Tensor::I64(ArrayD::from_shape_vec(IxDyn(shape), v)?))
}

fn arg_max(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    arg(ctx, inputs, true)
}
fn arg_min(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    arg(ctx, inputs, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 33) as f32 / (1u64 << 31) as f32) * 4.0 - 2.0 + 0.01
            })
            .collect()
    }

    /// Reduce [3, 4, 5] over the non-adjacent axes {0, 2} (transposed path) and compare with loops.
    #[test]
    fn non_adjacent_axes_match_loops() {
        let x = rand_vec(60, 7);
        let a = ArrayD::from_shape_vec(IxDyn(&[3, 4, 5]), x.clone()).unwrap();
        let g = geometry(&[3, 4, 5], &[0, 2]);
        assert!(g.perm.is_some());
        for op in [Op::Sum, Op::Max, Op::LogSumExp, Op::L2] {
            let got = reduce_array(&a, &g, false, op).unwrap();
            assert_eq!(got.shape(), &[4]);
            for j in 0..4 {
                let vals: Vec<f64> = (0..3)
                    .flat_map(|i| (0..5).map(move |k| (i, k)))
                    .map(|(i, k)| x[i * 20 + j * 5 + k] as f64)
                    .collect();
                let want = match op {
                    Op::Sum => vals.iter().sum::<f64>(),
                    Op::Max => vals.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
                    Op::LogSumExp => vals.iter().map(|v| v.exp()).sum::<f64>().ln(),
                    _ => vals.iter().map(|v| v * v).sum::<f64>().sqrt(),
                };
                assert!(
                    (got[[j]] as f64 - want).abs() < 1e-5,
                    "{op:?} lane {j}: {} vs {want}",
                    got[[j]]
                );
            }
        }
    }

    /// Middle-axis reduction with keepdims (strided accumulator path), integers wrapping like numpy.
    #[test]
    fn middle_axis_ints_wrap() {
        let a = ArrayD::from_shape_vec(
            IxDyn(&[2, 2, 3]),
            vec![i32::MAX, 1, -7, 1, 2, -8, 3, 4, 5, 6, 7, 8],
        )
        .unwrap();
        let g = geometry(a.shape(), &[1]);
        assert!(g.perm.is_none() && g.dims == (2, 2, 3));
        let s = reduce_array(&a, &g, true, Op::Sum).unwrap();
        assert_eq!(s.shape(), &[2, 1, 3]);
        assert_eq!(
            s.iter().copied().collect::<Vec<_>>(),
            vec![i32::MIN, 3, -15, 9, 11, 13]
        );
        let m = reduce_array(&a, &g, false, Op::Mean).unwrap();
        assert_eq!(
            m.iter().copied().collect::<Vec<_>>(),
            vec![i32::MIN / 2, 1, -7, 4, 5, 6]
        );
    }

    /// ArgMax/ArgMin along a strided axis, first versus last of tied values.
    #[test]
    fn arg_ties_strided() {
        // [3, 2]: reduce axis 0; column 0 = [1, 5, 5], column 1 = [2, 2, 0].
        let s = [1.0f32, 2.0, 5.0, 2.0, 5.0, 0.0];
        assert_eq!(arg_slice(&s, (1, 3, 2), true, false), vec![1, 0]);
        assert_eq!(arg_slice(&s, (1, 3, 2), true, true), vec![2, 1]);
        assert_eq!(arg_slice(&s, (1, 3, 2), false, true), vec![0, 2]);
    }

    /// NaN is the answer of both ArgMax and ArgMin: the first NaN, or the last with
    /// select_last_index (numpy's argmax / argmin, and of the flipped lane).
    #[test]
    fn arg_nan_wins_first_or_last() {
        let s = [1.0f32, f32::NAN, 3.0, f32::NAN, 0.0];
        for max in [true, false] {
            assert_eq!(arg_slice(&s, (1, 5, 1), max, false), vec![1]);
            assert_eq!(arg_slice(&s, (1, 5, 1), max, true), vec![3]);
        }
    }

    /// Empty reduced sets give each op's identity.
    #[test]
    fn empty_set_identities() {
        let a = ArrayD::<f32>::zeros(IxDyn(&[2, 0, 4]));
        let g = geometry(a.shape(), &[1]);
        let f = |op| reduce_array(&a, &g, true, op).unwrap()[[0, 0, 0]];
        assert_eq!(f(Op::Sum), 0.0);
        assert_eq!(f(Op::Prod), 1.0);
        assert_eq!(f(Op::Max), f32::NEG_INFINITY);
        assert_eq!(f(Op::Min), f32::INFINITY);
        assert_eq!(f(Op::LogSum), f32::NEG_INFINITY);
        assert_eq!(f(Op::LogSumExp), f32::NEG_INFINITY);
    }
}
