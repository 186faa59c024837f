//! Data movement: Transpose, Concat, Split, Slice, and the shared strided-copy core. Pad, Tile,
//! DepthToSpace, SpaceToDepth, Trilu, ReverseSequence and CumSum live in `data/layout.rs`; the
//! index-driven family (Gather/Scatter, OneHot, NonZero, Compress, TopK, Unique) in `data/index.rs`.
//!
//! Most movement ops are one strided copy: a view of the source (base offset, shape, element strides,
//! zero or negative strides allowed) copied out in row-major order by [`strided_gather`], which merges
//! contiguous axes, copies contiguous rows as slices, tiles transposes and splits large work over rayon.
use std::borrow::Cow;
use std::mem::MaybeUninit;

use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};
use rayon::prelude::*;

use super::broadcast::{PAR_THRESHOLD, par_fill};
use super::{OpCtx, Registry, input, norm_axis, opt_input, single};
use crate::error::OpResult;
use crate::tensor::{Tensor, Value};
use crate::{bail, map_array};

pub mod index;
mod layout;

pub use layout::{ScanPlan, cumsum_plan};

pub fn register(r: &mut Registry) {
    r.add("", "Transpose", transpose);
    r.add("", "Concat", concat);
    r.add("", "Split", split);
    r.add("", "Slice", slice);
    index::register(r);
    layout::register(r);
}

// ---------------------------------------------------------------------------------------------
// Shared helpers (also used by shape.rs).

/// An element type of a tensor variant (`u8` also covers the packed narrow formats).
pub(crate) trait Elem:
    Clone + Default + PartialEq + PartialOrd + Send + Sync + 'static
{
    /// The array inside `t` if `t` holds this element type.
    fn of(t: &Tensor) -> Option<&ArrayD<Self>>;
    /// `v` converted to this type (`None` for strings).
    fn from_f64(v: f64) -> Option<Self>;
}

macro_rules! elem_prim {
    ($($t:ty => $v:ident),*) => {$(
        impl Elem for $t {
            fn of(t: &Tensor) -> Option<&ArrayD<Self>> { match t { Tensor::$v(a) => Some(a), _ => None } }
            fn from_f64(v: f64) -> Option<Self> { Some(v as $t) }
        }
    )*};
}
elem_prim!(f32 => F32, f64 => F64, i8 => I8, i16 => I16, i32 => I32, i64 => I64, u16 => U16, u32 => U32, u64 => U64);

impl Elem for u8 {
    fn of(t: &Tensor) -> Option<&ArrayD<Self>> {
        match t {
            Tensor::U8(a) | Tensor::Packed(_, a) => Some(a),
            _ => None,
        }
    }
    fn from_f64(v: f64) -> Option<Self> {
        Some(v as u8)
    }
}

impl Elem for f16 {
    fn of(t: &Tensor) -> Option<&ArrayD<Self>> {
        match t {
            Tensor::F16(a) => Some(a),
            _ => None,
        }
    }
    fn from_f64(v: f64) -> Option<Self> {
        Some(f16::from_f64(v))
    }
}

impl Elem for bf16 {
    fn of(t: &Tensor) -> Option<&ArrayD<Self>> {
        match t {
            Tensor::BF16(a) => Some(a),
            _ => None,
        }
    }
    fn from_f64(v: f64) -> Option<Self> {
        Some(bf16::from_f64(v))
    }
}

impl Elem for bool {
    fn of(t: &Tensor) -> Option<&ArrayD<Self>> {
        match t {
            Tensor::Bool(a) => Some(a),
            _ => None,
        }
    }
    fn from_f64(v: f64) -> Option<Self> {
        Some(v != 0.0)
    }
}

impl Elem for String {
    fn of(t: &Tensor) -> Option<&ArrayD<Self>> {
        match t {
            Tensor::Str(a) => Some(a),
            _ => None,
        }
    }
    fn from_f64(_: f64) -> Option<Self> {
        None
    }
}

/// The array of `t` as element type `T`, or an error naming both dtypes.
pub(crate) fn same<'t, T: Elem>(
    t: &'t Tensor,
    like: &Tensor,
    what: &str,
) -> OpResult<&'t ArrayD<T>> {
    match T::of(t) {
        Some(a) if t.dtype() == like.dtype() => Ok(a),
        _ => bail!("{what} has dtype {}, expected {}", t.dtype(), like.dtype()),
    }
}

/// Numeric element types: arithmetic that never panics (integers wrap).
pub(crate) trait Arith: Elem + Copy {
    fn zero() -> Self;
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
}

macro_rules! arith_int {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            fn zero() -> Self { 0 }
            fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
        }
    )*};
}
arith_int!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! arith_float {
    ($($t:ty => $z:expr),*) => {$(
        impl Arith for $t {
            fn zero() -> Self { $z }
            fn add(self, o: Self) -> Self { self + o }
            fn mul(self, o: Self) -> Self { self * o }
        }
    )*};
}
arith_float!(f32 => 0.0, f64 => 0.0, f16 => f16::ZERO, bf16 => bf16::ZERO);

/// A total order over partially ordered values: NaN (anything unordered with itself) sorts above
/// everything and equal to itself.
pub(crate) fn tcmp<T: PartialOrd>(a: &T, b: &T) -> std::cmp::Ordering {
    match a.partial_cmp(b) {
        Some(o) => o,
        None => a.partial_cmp(a).is_none().cmp(&b.partial_cmp(b).is_none()),
    }
}

/// The elements of `a` in row-major order, borrowed when `a` is already contiguous.
pub(crate) fn flat<T: Clone>(a: &ArrayD<T>) -> Cow<'_, [T]> {
    match a.as_slice() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(a.iter().cloned().collect()),
    }
}

pub(crate) fn arr<T>(shape: &[usize], v: Vec<T>) -> OpResult<ArrayD<T>> {
    Ok(ArrayD::from_shape_vec(IxDyn(shape), v)?)
}

/// Row-major element strides of `shape`.
pub(crate) fn strides_of(shape: &[usize]) -> Vec<isize> {
    let mut s = vec![1isize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1] as isize;
    }
    s
}

/// Product of dims, refusing overflow.
pub(crate) fn numel(shape: &[usize]) -> OpResult<usize> {
    shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| crate::error::OpError::Invalid(format!("shape {shape:?} is too large")))
}

/// A copy of the strided view (`base`, `shape`, `strides`) of `t` as a new tensor of `shape`.
/// Every position the view addresses must lie inside `t`.
pub(crate) fn view_copy(
    t: &Tensor,
    base: isize,
    shape: &[usize],
    strides: &[isize],
) -> OpResult<Tensor> {
    Ok(map_array!(t, a => arr(shape, strided_gather(&flat(a), base, shape, strides))?))
}

const TILE: usize = 32;

/// The row-major copy of the view of `src` at `base` with `shape` and element `strides`.
pub(crate) fn strided_gather<T: Clone + Send + Sync>(
    src: &[T],
    base: isize,
    shape: &[usize],
    strides: &[isize],
) -> Vec<T> {
    let n: usize = shape.iter().product();
    if n == 0 {
        return Vec::new();
    }
    // Drop unit axes and merge axes that are contiguous with each other.
    let (mut sh, mut st): (Vec<usize>, Vec<isize>) = (Vec::new(), Vec::new());
    for (&d, &s) in shape.iter().zip(strides) {
        if d == 1 {
            continue;
        }
        let k = sh.len();
        if k > 0 && st[k - 1] == s * d as isize {
            sh[k - 1] *= d;
            st[k - 1] = s;
        } else {
            sh.push(d);
            st.push(s);
        }
    }
    if sh.is_empty() {
        return vec![src[base as usize].clone(); n];
    }
    if sh.len() == 1 && st[0] == 1 && n < PAR_THRESHOLD * 8 {
        let mut v = crate::arena::vec(n);
        v.extend_from_slice(&src[base as usize..base as usize + n]);
        return v;
    }
    // Written once, element by element, never filled first.
    let mut buf: Vec<T> = crate::arena::vec(n);
    let out = &mut buf.spare_capacity_mut()[..n];
    let threads = rayon::current_num_threads();
    // Leading axes to split the work over: enough of them to feed every thread, stopping at the
    // source-contiguous axis (which the tiled copy needs whole).
    let (mut k, mut p) = (1, sh[0]);
    while p < threads * 4 && k + 1 < sh.len() && st[k].unsigned_abs() != 1 {
        p *= sh[k];
        k += 1;
    }
    if n >= PAR_THRESHOLD && threads > 1 && k > 1 {
        let inner = n / p;
        let (lead, lst) = (&sh[..k], &st[..k]);
        out.par_chunks_mut(inner)
            .enumerate()
            .for_each(|(j, chunk)| {
                let (mut rem, mut off) = (j, base);
                for d in (0..k).rev() {
                    off += (rem % lead[d]) as isize * lst[d];
                    rem /= lead[d];
                }
                fill_strided(src, off, &sh[k..], &st[k..], chunk);
            });
    } else if n >= PAR_THRESHOLD && sh[0] > 1 && threads > 1 {
        let inner = n / sh[0];
        let mut group = sh[0].div_ceil((threads * 4).min(sh[0]));
        if st[0].unsigned_abs() == 1 {
            group = group.max(TILE); // keep transposes tileable along axis 0
        }
        let (sh, st) = (&sh, &st);
        out.par_chunks_mut(group * inner)
            .enumerate()
            .for_each(|(k, chunk)| {
                let mut s = sh.clone();
                s[0] = chunk.len() / inner;
                fill_strided(src, base + (k * group) as isize * st[0], &s, st, chunk);
            });
    } else {
        fill_strided(src, base, &sh, &st, out);
    }
    // SAFETY: the fills write every element of the n-element view exactly once (each output
    // position, in row-major order, by one of the chunks above).
    unsafe { buf.set_len(n) };
    buf
}

fn fill_strided<T: Clone>(
    src: &[T],
    base: isize,
    shape: &[usize],
    strides: &[isize],
    out: &mut [MaybeUninit<T>],
) {
    let r = shape.len();
    if r == 0 {
        out[0].write(src[base as usize].clone());
        return;
    }
    let l = r - 1;
    let (len, sl) = (shape[l], strides[l]);
    if sl.unsigned_abs() > 1
        && len >= TILE
        && let Some(b) = (0..l)
            .rev()
            .find(|&i| strides[i].unsigned_abs() == 1 && shape[i] >= TILE)
    {
        return fill_tiled(src, base, shape, strides, b, out);
    }
    let mut idx = vec![0usize; l];
    let mut off = base;
    for row in out.chunks_mut(len) {
        if sl == 1 {
            let o = off as usize;
            for (x, v) in row.iter_mut().zip(&src[o..o + len]) {
                x.write(v.clone());
            }
        } else if sl == 0 {
            for x in row.iter_mut() {
                x.write(src[off as usize].clone());
            }
        } else {
            let mut p = off;
            for x in row.iter_mut() {
                x.write(src[p as usize].clone());
                p += sl;
            }
        }
        for d in (0..l).rev() {
            idx[d] += 1;
            off += strides[d];
            if idx[d] < shape[d] {
                break;
            }
            off -= strides[d] * shape[d] as isize;
            idx[d] = 0;
        }
    }
}

/// A transposing copy, tiled over axis `b` (unit source stride) and the last axis.
fn fill_tiled<T: Clone>(
    src: &[T],
    base: isize,
    shape: &[usize],
    strides: &[isize],
    b: usize,
    out: &mut [MaybeUninit<T>],
) {
    let r = shape.len();
    let l = r - 1;
    let ostr = strides_of(shape);
    let others: Vec<usize> = (0..l).filter(|&d| d != b).collect();
    let count: usize = others.iter().map(|&d| shape[d]).product();
    let (nb, sb, ob) = (shape[b], strides[b], ostr[b] as usize);
    let (nl, sl) = (shape[l], strides[l]);
    let mut idx = vec![0usize; others.len()];
    let (mut so, mut dof) = (base, 0usize);
    for _ in 0..count {
        for i0 in (0..nb).step_by(TILE) {
            let i1 = (i0 + TILE).min(nb);
            for j0 in (0..nl).step_by(TILE) {
                let j1 = (j0 + TILE).min(nl);
                for i in i0..i1 {
                    let d = dof + i * ob;
                    let mut p = so + i as isize * sb + j0 as isize * sl;
                    for x in &mut out[d + j0..d + j1] {
                        x.write(src[p as usize].clone());
                        p += sl;
                    }
                }
            }
        }
        for k in (0..others.len()).rev() {
            let d = others[k];
            idx[k] += 1;
            so += strides[d];
            dof += ostr[d] as usize;
            if idx[k] < shape[d] {
                break;
            }
            so -= strides[d] * shape[d] as isize;
            dof -= ostr[d] as usize * shape[d];
            idx[k] = 0;
        }
    }
}

/// `t` viewed as `view` (a reshape), permuted by `perm`, copied out with shape `out_shape`.
pub(crate) fn permute_as(
    t: &Tensor,
    view: &[usize],
    perm: &[usize],
    out_shape: &[usize],
) -> OpResult<Tensor> {
    let st = strides_of(view);
    let shape: Vec<usize> = perm.iter().map(|&p| view[p]).collect();
    let strides: Vec<isize> = perm.iter().map(|&p| st[p]).collect();
    view_copy(t, 0, &shape, &strides)?.reshape(out_shape)
}

// ---------------------------------------------------------------------------------------------

fn transpose(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let r = x.rank();
    let perm = ctx
        .attr_opt_ints("perm")?
        .unwrap_or_else(|| (0..r as i64).rev().collect());
    if perm.len() != r {
        bail!("perm {perm:?} does not match the input rank {r}");
    }
    let mut seen = vec![false; r];
    let mut p = Vec::with_capacity(r);
    for &v in &perm {
        let a = norm_axis(v, r)?;
        if std::mem::replace(&mut seen[a], true) {
            bail!("perm {perm:?} is not a permutation");
        }
        p.push(a);
    }
    let (shape, st) = (x.shape(), strides_of(x.shape()));
    let out_shape: Vec<usize> = p.iter().map(|&a| shape[a]).collect();
    let out_st: Vec<isize> = p.iter().map(|&a| st[a]).collect();
    single(view_copy(x, 0, &out_shape, &out_st)?)
}

fn concat(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let all: Vec<&Tensor> = (0..inputs.len())
        .map(|i| input(inputs, i))
        .collect::<OpResult<_>>()?;
    let Some(first) = all.first() else {
        bail!("Concat needs at least one input")
    };
    let r = all.iter().map(|t| t.rank()).max().unwrap_or(0);
    // Empty tensors of another rank (exporters emit them as placeholders) contribute nothing.
    let parts: Vec<&Tensor> = all
        .iter()
        .copied()
        .filter(|t| t.rank() == r || !t.is_empty())
        .collect();
    let axis = if ctx.opset() < 4 {
        ctx.attr_i("axis", 1)?
    } else {
        ctx.req_i("axis")?
    };
    if r == 0 {
        bail!("Concat of scalars");
    }
    let axis = norm_axis(axis, r)?;
    let Some(lead) = parts.iter().find(|t| t.rank() == r) else {
        bail!("Concat needs an input of rank {r}")
    };
    let mut out_shape = lead.shape().to_vec();
    out_shape[axis] = 0;
    for t in &parts {
        let s = t.shape();
        if s.len() != r
            || s.iter()
                .enumerate()
                .any(|(d, &v)| d != axis && v != out_shape[d])
            || t.dtype() != first.dtype()
        {
            let all: Vec<String> = parts.iter().map(|t| t.describe()).collect();
            bail!("Concat on axis {axis} of incompatible inputs {all:?}");
        }
        out_shape[axis] += s[axis];
    }
    single(map_array!(*first, a => concat_impl(a, &parts, axis, &out_shape)?))
}

fn concat_impl<T: Elem>(
    _: &ArrayD<T>,
    parts: &[&Tensor],
    axis: usize,
    out_shape: &[usize],
) -> OpResult<ArrayD<T>> {
    let outer: usize = out_shape[..axis].iter().product();
    let inner: usize = out_shape[axis + 1..].iter().product();
    let mut srcs = Vec::with_capacity(parts.len());
    for t in parts {
        srcs.push((
            flat(same::<T>(t, parts[0], "Concat input")?),
            t.shape()[axis] * inner,
        ));
    }
    let row: usize = srcs.iter().map(|s| s.1).sum();
    let n = outer * row;
    // Where each part's run starts within a row of the output.
    let offs: Vec<usize> = srcs
        .iter()
        .scan(0, |at, s| {
            let o = *at;
            *at += s.1;
            Some(o)
        })
        .collect();
    // Each output element written once, from its part (never filled first); a long output in
    // parallel chunks, each of which may span parts and rows (a channel Concat of one image is one
    // row: it was one thread's copy).
    let mut out: Vec<T> = crate::arena::vec(n);
    par_fill(&mut out.spare_capacity_mut()[..n], &|start, chunk| {
        let mut done = 0;
        while done < chunk.len() {
            let (o, r) = ((start + done) / row, (start + done) % row);
            // The last part starting at or before column r (a part of length 0 is never it).
            let i = offs.partition_point(|&x| x <= r) - 1;
            let (src, c) = &srcs[i];
            let at = r - offs[i];
            let len = (c - at).min(chunk.len() - done);
            let from = &src[o * c + at..o * c + at + len];
            for (d, v) in chunk[done..done + len].iter_mut().zip(from) {
                d.write(v.clone());
            }
            done += len;
        }
    });
    // SAFETY: par_fill hands every element of the first n to exactly one call, and each call
    // writes all of its chunk.
    unsafe { out.set_len(n) };
    arr(out_shape, out)
}

fn split(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let given = opt_input(inputs, 1)?.map(|t| t.to_i64_vec()).transpose()?;
    let (axis, sizes) = split_plan(ctx, x.shape(), given)?;
    let st = strides_of(x.shape());
    let mut start = 0i64;
    let mut outs = Vec::with_capacity(sizes.len());
    for &s in &sizes {
        let mut shape = x.shape().to_vec();
        shape[axis] = s as usize;
        outs.push(Value::Tensor(view_copy(
            x,
            start as isize * st[axis],
            &shape,
            &st,
        )?));
        start += s;
    }
    Ok(outs)
}

/// Split's axis and part sizes for an input of shape `ins` (`given`: the split input's values).
/// Shared by every backend.
pub(crate) fn split_plan(
    ctx: &OpCtx,
    ins: &[usize],
    given: Option<Vec<i64>>,
) -> OpResult<(usize, Vec<i64>)> {
    let r = ins.len();
    if r == 0 {
        bail!("Split on a scalar");
    }
    let axis = norm_axis(ctx.attr_i("axis", 0)?, r)?;
    let dim = ins[axis] as i64;
    let nout = ctx.node.outputs.len();
    let given = match given {
        Some(v) => Some(v),
        None if ctx.opset() < 13 => ctx.attr_opt_ints("split")?,
        None => None,
    };
    let sizes = match given {
        Some(s) => s,
        None => {
            let k = if ctx.opset() >= 18 {
                ctx.attr_opt_i("num_outputs")?.unwrap_or(nout as i64)
            } else {
                nout as i64
            };
            if k <= 0 || k != nout as i64 {
                bail!("Split into {k} outputs, but the node has {nout}");
            }
            if ctx.opset() < 18 && dim % k != 0 {
                bail!("Split of a dimension of {dim} into {k} equal parts");
            }
            let c = (dim + k - 1) / k;
            (0..k).map(|i| c.min(dim - (i * c).min(dim))).collect()
        }
    };
    let total = sizes.iter().try_fold(0i64, |a, &s| a.checked_add(s));
    if sizes.iter().any(|&s| s < 0) || total != Some(dim) {
        bail!("split sizes {sizes:?} do not add up to the dimension {dim} of axis {axis}");
    }
    Ok((axis, sizes))
}

/// Clamped `(start, count)` of a slice with `step` over a dimension of `dim` (ONNX Slice rules).
fn slice_range(start: i64, end: i64, step: i64, dim: usize) -> (i64, usize) {
    let d = dim as i64;
    let fix = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
    let (s, e) = (fix(start), fix(end));
    let (s, e) = if step > 0 {
        (s.clamp(0, d), e.clamp(0, d))
    } else {
        (s.clamp(0, (d - 1).max(0)), e.clamp(-1, d - 1))
    };
    let span = if step > 0 { e - s } else { s - e };
    if span <= 0 || d == 0 {
        return (s, 0);
    }
    let st = step.unsigned_abs() as i64;
    (s, ((span + st - 1) / st) as usize)
}

fn slice(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let params = (1..5)
        .map(|i| opt_input(inputs, i)?.map(|t| t.to_i64_vec()).transpose())
        .collect::<OpResult<Vec<_>>>()?;
    let (base, shape, strides) = slice_plan(ctx, x.shape(), params)?;
    single(view_copy(x, base, &shape, &strides)?)
}

/// A Slice as a strided view of its input of shape `ins`: (base offset, shape, strides) in elements.
/// `params` are the values of inputs 1–4 (starts, ends, axes, steps) from opset 10 on. Shared by every
/// backend.
pub(crate) fn slice_plan(
    ctx: &OpCtx,
    ins: &[usize],
    params: Vec<Option<Vec<i64>>>,
) -> OpResult<(isize, Vec<usize>, Vec<isize>)> {
    let r = ins.len();
    let mut params = params.into_iter();
    let mut next = || params.next().flatten();
    let (starts, ends, axes, steps) = if ctx.opset() < 10 {
        let get = |n: &str| ctx.attr_opt_ints(n);
        let Some(starts) = get("starts")? else {
            bail!("Slice needs 'starts'")
        };
        let Some(ends) = get("ends")? else {
            bail!("Slice needs 'ends'")
        };
        (starts, ends, get("axes")?, None)
    } else {
        let (Some(starts), Some(ends)) = (next(), next()) else {
            bail!("Slice needs starts and ends")
        };
        (starts, ends, next(), next())
    };
    let k = starts.len();
    let axes = axes.unwrap_or_else(|| (0..k as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; k]);
    if ends.len() != k || axes.len() != k || steps.len() != k {
        bail!(
            "Slice starts {starts:?}, ends {ends:?}, axes {axes:?} and steps {steps:?} differ in length"
        );
    }
    let st = strides_of(ins);
    let mut shape = ins.to_vec();
    let mut strides = st.clone();
    let mut base = 0isize;
    let mut seen = vec![false; r];
    for i in 0..k {
        let a = norm_axis(axes[i], r)?;
        if std::mem::replace(&mut seen[a], true) {
            bail!("Slice axes {axes:?} repeat an axis");
        }
        if steps[i] == 0 {
            bail!("Slice step 0 on axis {a}");
        }
        let (s, n) = slice_range(starts[i], ends[i], steps[i], shape[a]);
        if n > 0 {
            base += s as isize * st[a];
        }
        shape[a] = n;
        strides[a] = st[a] * steps[i] as isize;
    }
    if shape.contains(&0) {
        base = 0;
    }
    Ok((base, shape, strides))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> f32 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((self.0 >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0 + 0.01
        }
    }

    #[test]
    fn strided_gather_transposes_large_tiled() {
        let mut g = Lcg(7);
        let (n, m, k) = (3, 70, 45);
        let src: Vec<f32> = (0..n * m * k).map(|_| g.next()).collect();
        // [n, m, k] -> [k, n, m] : perm (2, 0, 1)
        let st = strides_of(&[n, m, k]);
        let out = strided_gather(&src, 0, &[k, n, m], &[st[2], st[0], st[1]]);
        for c in 0..k {
            for a in 0..n {
                for b in 0..m {
                    assert_eq!(out[(c * n + a) * m + b], src[(a * m + b) * k + c]);
                }
            }
        }
        // large enough for the parallel path, 2-D transpose
        let (p, q) = (300, 257);
        let src: Vec<f32> = (0..p * q).map(|_| g.next()).collect();
        let out = strided_gather(&src, 0, &[q, p], &[1, q as isize]);
        for i in 0..q {
            for j in 0..p {
                assert_eq!(out[i * p + j], src[j * q + i]);
            }
        }
    }

    #[test]
    fn strided_gather_parallel_over_several_leading_axes() {
        let mut g = Lcg(11);
        let (a, b, c, d) = (2, 3, 64, 200);
        let src: Vec<f32> = (0..a * b * c * d).map(|_| g.next()).collect();
        // [a, b, c, d] -> [b, a, d, c], reversed along d (negative stride)
        let st = strides_of(&[a, b, c, d]);
        let base = (d as isize - 1) * st[3];
        let out = strided_gather(&src, base, &[b, a, d, c], &[st[1], st[0], -st[3], st[2]]);
        for j in 0..b {
            for i in 0..a {
                for l in 0..d {
                    for m in 0..c {
                        let want = src[((i * b + j) * c + m) * d + (d - 1 - l)];
                        assert_eq!(out[((j * a + i) * d + l) * c + m], want);
                    }
                }
            }
        }
    }

    #[test]
    fn slice_ranges_clamp_and_negative_steps() {
        assert_eq!(slice_range(0, i64::MAX, 1, 5), (0, 5));
        assert_eq!(slice_range(-1, i64::MIN, -1, 5), (4, 5));
        assert_eq!(slice_range(10, -10, -2, 5), (4, 3));
        assert_eq!(slice_range(3, 1, 1, 5), (3, 0));
        assert_eq!(slice_range(-100, 100, 3, 7), (0, 3));
        assert_eq!(slice_range(0, 0, -1, 0), (0, 0));
    }

    /// Concat writes each element once from its part, in parallel chunks that span parts and rows:
    /// equal to ndarray's concatenation along each axis, with a part of length 0 among them and
    /// outputs long enough to split; the parts in the wrong order are told apart.
    #[test]
    fn concat_equals_ndarray_concatenation_in_parallel_chunks() {
        let mut g = Lcg(11);
        for (shapes, axis) in [
            (vec![[1, 64, 30, 31], [1, 0, 30, 31], [1, 45, 30, 31]], 1),
            (vec![[3, 5, 40, 41], [3, 7, 40, 41]], 1),
            (vec![[2, 3, 300, 17], [2, 3, 300, 40]], 3),
            (vec![[40, 3, 30, 31], [1, 3, 30, 31]], 0),
        ] {
            let arrays: Vec<ArrayD<f32>> = shapes
                .iter()
                .map(|s| {
                    let n = s.iter().product();
                    ArrayD::from_shape_vec(IxDyn(s), (0..n).map(|_| g.next()).collect()).unwrap()
                })
                .collect();
            let tensors: Vec<Tensor> = arrays.iter().map(|a| Tensor::F32(a.clone())).collect();
            let parts: Vec<&Tensor> = tensors.iter().collect();
            let views: Vec<_> = arrays.iter().map(|a| a.view()).collect();
            let want = ndarray::concatenate(ndarray::Axis(axis), &views).unwrap();
            let got = concat_impl(&arrays[0], &parts, axis, want.shape()).unwrap();
            assert!(want.len() >= PAR_THRESHOLD, "{shapes:?} too short to split");
            assert_eq!(got, want, "{shapes:?} along {axis}");
            let swapped: Vec<&Tensor> = parts.iter().rev().copied().collect();
            let mut shape = want.shape().to_vec();
            shape[axis] = swapped.iter().map(|t| t.shape()[axis]).sum();
            let wrong = concat_impl(&arrays[0], &swapped, axis, &shape).unwrap();
            assert_ne!(
                wrong, want,
                "{shapes:?}: the order of the parts went unnoticed"
            );
        }
    }
}
