//! Index-driven data ops (a submodule of `data.rs`): Gather, GatherElements, GatherND, Scatter,
//! ScatterElements, ScatterND, OneHot, NonZero, Compress, TopK, Unique.
use std::cmp::Ordering;

use ndarray::ArrayD;
use rayon::prelude::*;

use super::super::broadcast::PAR_THRESHOLD;
use super::super::{OpCtx, Registry, input, norm_axis, single};
use super::{Arith, Elem, arr, flat, same, strides_of, tcmp};
use crate::error::{OpError, OpResult};
use crate::tensor::{Tensor, Value};
use crate::{bail, map_array, map_numeric, unsupported, with_array};

pub fn register(r: &mut Registry) {
    r.add("", "Gather", gather);
    r.add("", "GatherElements", gather_elements);
    r.add("", "GatherND", gather_nd);
    r.add("", "Scatter", scatter_elements);
    r.add("", "ScatterElements", scatter_elements);
    r.add("", "ScatterND", scatter_nd);
    r.add("", "OneHot", one_hot);
    r.add("", "NonZero", non_zero);
    r.add("", "Compress", compress);
    r.add("", "TopK", top_k);
    r.add("", "Unique", unique);
}

/// `i` (possibly negative) as an index into a dimension of `dim`.
fn norm_index(i: i64, dim: usize, what: &str) -> OpResult<usize> {
    let d = dim as i64;
    let j = if i < 0 { i + d } else { i };
    if j < 0 || j >= d {
        bail!("{what} index {i} is out of range for a dimension of {dim}");
    }
    Ok(j as usize)
}

/// Copies the chunks `src[o..o + len]` for every offset `o` into one vector, in parallel when large.
pub(crate) fn gather_chunks<T: Clone + Send + Sync>(
    src: &[T],
    offs: &[usize],
    len: usize,
) -> Vec<T> {
    let n = offs.len() * len;
    if n == 0 {
        return Vec::new();
    }
    if n >= PAR_THRESHOLD {
        let mut out = vec![src[offs[0]].clone(); n];
        out.par_chunks_mut(len)
            .zip(offs.par_iter())
            .with_min_len((4096 / len).max(1))
            .for_each(|(d, &o)| {
                d.clone_from_slice(&src[o..o + len]);
            });
        out
    } else {
        let mut out = Vec::with_capacity(n);
        for &o in offs {
            out.extend_from_slice(&src[o..o + len]);
        }
        out
    }
}

/// The chunk offsets selecting `idx` along the middle axis of `[outer, dim, inner]`.
fn axis_offsets(outer: usize, dim: usize, inner: usize, idx: &[usize]) -> Vec<usize> {
    (0..outer)
        .flat_map(|o| idx.iter().map(move |&i| (o * dim + i) * inner))
        .collect()
}

/// `t` with the entries `idx` taken along `axis`; the axis is replaced by `idx_shape`.
pub(crate) fn take_axis(
    t: &Tensor,
    axis: usize,
    idx: &[usize],
    idx_shape: &[usize],
) -> OpResult<Tensor> {
    let s = t.shape();
    let (outer, inner): (usize, usize) =
        (s[..axis].iter().product(), s[axis + 1..].iter().product());
    let offs = axis_offsets(outer, s[axis], inner, idx);
    let shape: Vec<usize> = s[..axis]
        .iter()
        .chain(idx_shape)
        .chain(&s[axis + 1..])
        .copied()
        .collect();
    Ok(map_array!(t, a => arr(&shape, gather_chunks(&flat(a), &offs, inner))?))
}

fn gather(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (x, ind) = (input(inputs, 0)?, input(inputs, 1)?);
    if x.rank() == 0 {
        bail!("Gather on a scalar");
    }
    let axis = norm_axis(ctx.attr_i("axis", 0)?, x.rank())?;
    let dim = x.shape()[axis];
    let idx: Vec<usize> = ind
        .to_i64_vec()?
        .into_iter()
        .map(|i| norm_index(i, dim, "Gather"))
        .collect::<OpResult<_>>()?;
    single(take_axis(x, axis, &idx, ind.shape())?)
}

/// Flat data offsets of GatherElements/ScatterElements: `indices` replaces the coordinate on `axis`.
pub fn element_offsets(dshape: &[usize], ind: &Tensor, axis: usize) -> OpResult<Vec<usize>> {
    let ishape = ind.shape();
    element_indices_fit(dshape, ishape, axis)?;
    let idx = ind.to_i64_vec()?;
    let dst = strides_of(dshape);
    let r = ishape.len();
    let mut pos = vec![0usize; r];
    let mut base = 0usize;
    let mut offs = Vec::with_capacity(idx.len());
    for &i in &idx {
        offs.push(base + norm_index(i, dshape[axis], "element")? * dst[axis] as usize);
        for d in (0..r).rev() {
            pos[d] += 1;
            if d != axis {
                base += dst[d] as usize;
            }
            if pos[d] < ishape[d] {
                break;
            }
            if d != axis {
                base -= dst[d] as usize * ishape[d];
            }
            pos[d] = 0;
        }
    }
    Ok(offs)
}

/// GatherElements' and ScatterElements' shape rule: indices of the data's rank, no larger off
/// the axis.
pub fn element_indices_fit(dshape: &[usize], ishape: &[usize], axis: usize) -> OpResult<()> {
    if ishape.len() != dshape.len()
        || ishape
            .iter()
            .zip(dshape)
            .enumerate()
            .any(|(d, (&i, &s))| d != axis && i > s)
    {
        bail!("indices of shape {ishape:?} do not fit data of shape {dshape:?} on axis {axis}");
    }
    Ok(())
}

fn gather_elements(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (x, ind) = (input(inputs, 0)?, input(inputs, 1)?);
    let axis = norm_axis(ctx.attr_i("axis", 0)?, x.rank())?;
    let offs = element_offsets(x.shape(), ind, axis)?;
    single(map_array!(x, a => arr(ind.shape(), gather_chunks(&flat(a), &offs, 1))?))
}

/// For GatherND/ScatterND: the data offset of every index tuple (batch dims first), and the size of
/// the slice each one addresses.
fn nd_offsets(dshape: &[usize], ind: &Tensor, b: usize) -> OpResult<(Vec<usize>, usize)> {
    let ishape = ind.shape();
    let q = ishape.len();
    let r = dshape.len();
    let Some(&k) = ishape.last() else {
        bail!("indices must have rank >= 1")
    };
    if b >= q || b + k > r || ishape[..b] != dshape[..b] {
        bail!(
            "indices of shape {ishape:?} do not fit data of shape {dshape:?} with batch_dims {b}"
        );
    }
    let idx = ind.to_i64_vec()?;
    let dst = strides_of(dshape);
    let inner: usize = dshape[b + k..].iter().product();
    let nb: usize = ishape[..b].iter().product();
    let batch = if b == 0 { 0 } else { dst[b - 1] as usize };
    let per = ishape[b..q - 1].iter().product::<usize>();
    let mut offs = Vec::with_capacity(nb * per);
    for (t, tuple) in idx.chunks(k.max(1)).enumerate().take(nb * per) {
        let mut o = (t / per.max(1)) * batch;
        for (j, &i) in tuple.iter().enumerate().take(k) {
            o += norm_index(i, dshape[b + j], "GatherND/ScatterND")? * dst[b + j] as usize;
        }
        offs.push(o);
    }
    if k == 0 {
        // Every tuple is empty: each addresses its whole batch slice.
        offs = (0..nb * per).map(|t| (t / per.max(1)) * batch).collect();
    }
    Ok((offs, inner))
}

fn gather_nd(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (x, ind) = (input(inputs, 0)?, input(inputs, 1)?);
    let b = ctx.attr_i("batch_dims", 0)?;
    if b < 0 {
        bail!("batch_dims {b} is negative");
    }
    let b = b as usize;
    let (offs, inner) = nd_offsets(x.shape(), ind, b)?;
    let ishape = ind.shape();
    let k = ishape[ishape.len() - 1];
    let shape: Vec<usize> = ishape[..ishape.len() - 1]
        .iter()
        .chain(&x.shape()[b + k..])
        .copied()
        .collect();
    single(map_array!(x, a => arr(&shape, gather_chunks(&flat(a), &offs, inner))?))
}

#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Reduction {
    None,
    Add,
    Mul,
    Max,
    Min,
}

pub fn reduction(ctx: &OpCtx) -> OpResult<Reduction> {
    Ok(match ctx.attr_s("reduction", "none")?.as_str() {
        "none" => Reduction::None,
        "add" => Reduction::Add,
        "mul" => Reduction::Mul,
        "max" => Reduction::Max,
        "min" => Reduction::Min,
        m => bail!("unknown reduction '{m}'"),
    })
}

/// Writes `upd` chunk `t` (of `len` elements) to `out[offs[t]..]`, in order.
fn scatter_set<T: Elem>(
    data: &ArrayD<T>,
    upd: &ArrayD<T>,
    offs: &[usize],
    len: usize,
) -> OpResult<ArrayD<T>> {
    let mut out = flat(data).into_owned();
    let u = flat(upd);
    for (t, &o) in offs.iter().enumerate() {
        out[o..o + len].clone_from_slice(&u[t * len..(t + 1) * len]);
    }
    arr(data.shape(), out)
}

fn scatter_reduce<T: Arith>(
    data: &ArrayD<T>,
    upd: &ArrayD<T>,
    offs: &[usize],
    len: usize,
    red: Reduction,
) -> OpResult<ArrayD<T>> {
    let mut out = flat(data).into_owned();
    let u = flat(upd);
    for (t, &o) in offs.iter().enumerate() {
        for (d, &s) in out[o..o + len].iter_mut().zip(&u[t * len..(t + 1) * len]) {
            *d = match red {
                Reduction::None => s,
                Reduction::Add => d.add(s),
                Reduction::Mul => d.mul(s),
                // NaN propagates like numpy's maximum/minimum.
                Reduction::Max => {
                    if tcmp(&s, d) == Ordering::Greater {
                        s
                    } else {
                        *d
                    }
                }
                Reduction::Min => {
                    if s < *d || s.partial_cmp(&s).is_none() {
                        s
                    } else {
                        *d
                    }
                }
            };
        }
    }
    arr(data.shape(), out)
}

fn scatter_any(
    x: &Tensor,
    upd: &Tensor,
    offs: &[usize],
    len: usize,
    red: Reduction,
) -> OpResult<Tensor> {
    if upd.dtype() != x.dtype() {
        bail!("updates have dtype {}, the data {}", upd.dtype(), x.dtype());
    }
    if red == Reduction::None {
        Ok(map_array!(x, a => scatter_set(a, same(upd, x, "updates")?, offs, len)?))
    } else {
        map_numeric!(x, a => scatter_reduce(a, same(upd, x, "updates")?, offs, len, red)?)
    }
}

fn scatter_elements(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (x, ind, upd) = (input(inputs, 0)?, input(inputs, 1)?, input(inputs, 2)?);
    let axis = norm_axis(ctx.attr_i("axis", 0)?, x.rank())?;
    if upd.shape() != ind.shape() {
        bail!(
            "updates of shape {:?} differ from indices of shape {:?}",
            upd.shape(),
            ind.shape()
        );
    }
    let offs = element_offsets(x.shape(), ind, axis)?;
    single(scatter_any(x, upd, &offs, 1, reduction(ctx)?)?)
}

fn scatter_nd(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (x, ind, upd) = (input(inputs, 0)?, input(inputs, 1)?, input(inputs, 2)?);
    let (offs, inner) = scatter_nd_plan(x.shape(), ind, upd.shape())?;
    single(scatter_any(x, upd, &offs, inner, reduction(ctx)?)?)
}

/// ScatterND's plan for data of shape `xs`, indices `ind` and updates of shape `upd`: the data
/// offset of each index tuple's slice (indices checked and made non-negative) and the slice's size
/// (shared with the device kernels).
pub(crate) fn scatter_nd_plan(
    xs: &[usize],
    ind: &Tensor,
    upd: &[usize],
) -> OpResult<(Vec<usize>, usize)> {
    let (offs, inner) = nd_offsets(xs, ind, 0)?;
    let ishape = ind.shape();
    let k = ishape[ishape.len() - 1];
    let want: Vec<usize> = ishape[..ishape.len() - 1]
        .iter()
        .chain(&xs[k..])
        .copied()
        .collect();
    if upd != want.as_slice() {
        bail!("updates of shape {upd:?}, expected {want:?}");
    }
    Ok((offs, inner))
}

/// OneHot's depth, axis and output shape for indices of shape `ishape` (shared with the CUDA kernel).
pub fn one_hot_plan(
    ctx: &OpCtx,
    ishape: &[usize],
    depth: &Tensor,
    values: &Tensor,
) -> OpResult<(usize, usize, Vec<usize>)> {
    let &[depth] = depth.to_f64_vec()?.as_slice() else {
        bail!("OneHot depth must hold one value")
    };
    if !(1.0..1e15).contains(&depth) {
        bail!("OneHot depth {depth} is not a positive count");
    }
    let depth = depth as usize;
    if values.len() != 2 {
        bail!(
            "OneHot values must hold [off, on], got {:?}",
            values.shape()
        );
    }
    let axis = norm_axis(ctx.attr_i("axis", -1)?, ishape.len() + 1)?;
    let shape: Vec<usize> = ishape[..axis]
        .iter()
        .chain(&[depth])
        .chain(&ishape[axis..])
        .copied()
        .collect();
    ctx.check_alloc(&shape, values.dtype().size_in_memory())?;
    Ok((depth, axis, shape))
}

/// The position of index value `v` along OneHot's depth axis (negative wraps), None when outside.
pub fn one_hot_pos(v: f64, depth: usize) -> Option<usize> {
    let mut j = v.trunc();
    if j < 0.0 {
        j += depth as f64;
    }
    (j >= 0.0 && j < depth as f64).then_some(j as usize)
}

// `map_array!` expands the same code for every dtype: `.clone()` is needed for strings.
#[allow(clippy::clone_on_copy)]
fn one_hot(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (ind, depth, values) = (input(inputs, 0)?, input(inputs, 1)?, input(inputs, 2)?);
    let idx = ind.to_f64_vec()?;
    let ishape = ind.shape();
    let (depth, axis, shape) = one_hot_plan(ctx, ishape, depth, values)?;
    let outer: usize = ishape[..axis].iter().product();
    let inner: usize = ishape[axis..].iter().product();
    single(map_array!(values, a => {
        let v = flat(a);
        let mut out = vec![v[0].clone(); outer * depth * inner];
        for o in 0..outer {
            for i in 0..inner {
                if let Some(j) = one_hot_pos(idx[o * inner + i], depth) {
                    out[(o * depth + j) * inner + i] = v[1].clone();
                }
            }
        }
        arr(&shape, out)?
    }))
}

fn non_zero(_: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let shape = x.shape();
    let r = shape.len();
    let hits: Vec<usize> = with_array!(x, a => nonzero_positions(a));
    let n = hits.len();
    let st = strides_of(shape);
    let mut out = vec![0i64; r * n];
    for (c, &h) in hits.iter().enumerate() {
        let mut rem = h;
        for d in 0..r {
            out[d * n + c] = (rem / st[d] as usize) as i64;
            rem %= st[d] as usize;
        }
    }
    single(Tensor::I64(arr(&[r, n], out)?))
}

fn nonzero_positions<T: Elem>(a: &ArrayD<T>) -> Vec<usize> {
    let zero = T::default();
    flat(a)
        .iter()
        .enumerate()
        .filter(|(_, v)| **v != zero)
        .map(|(i, _)| i)
        .collect()
}

fn compress(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (x, cond) = (input(inputs, 0)?, input(inputs, 1)?);
    let cond = cond.to_i64_vec()?;
    let flat_x;
    let (t, axis) = match ctx.attr_opt_i("axis")? {
        Some(_) if x.rank() == 0 => bail!("an axis on a scalar"),
        Some(a) => (x, norm_axis(a, x.rank())?),
        None => {
            flat_x = x.reshape(&[x.len()])?;
            (&flat_x, 0)
        }
    };
    let dim = t.shape()[axis];
    let sel: Vec<usize> = cond
        .iter()
        .enumerate()
        .filter(|(_, c)| **c != 0)
        .map(|(i, _)| i)
        .collect();
    if sel.last().is_some_and(|&i| i >= dim) {
        bail!(
            "Compress condition of length {} selects past the dimension {dim}",
            cond.len()
        );
    }
    single(take_axis(t, axis, &sel, &[sel.len()])?)
}

fn top_k(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let k = if ctx.opset() < 10 {
        ctx.req_i("k")?
    } else {
        let k = input(inputs, 1)?.to_i64_vec()?;
        let &[k] = k.as_slice() else {
            bail!("TopK K must hold one value, got {k:?}")
        };
        k
    };
    if x.rank() == 0 {
        bail!("TopK on a scalar");
    }
    let axis = norm_axis(ctx.attr_i("axis", -1)?, x.rank())?;
    let largest = ctx.attr_i("largest", 1)? != 0;
    let dim = x.shape()[axis];
    if k < 0 || k as usize > dim {
        bail!("TopK k = {k} is out of range for axis {axis} of size {dim}");
    }
    if matches!(x, Tensor::Packed(..)) {
        unsupported!("TopK on {}", x.dtype());
    }
    let mut indices = None;
    let vals = map_numeric!(x, a => {
        let (v, i) = topk_impl(a, axis, k as usize, largest)?;
        indices = Some(i);
        v
    })?;
    let indices = indices.ok_or_else(|| OpError::Invalid("TopK produced no indices".into()))?;
    Ok(vec![
        Value::Tensor(vals),
        Value::Tensor(Tensor::I64(indices)),
    ])
}

fn topk_impl<T: Arith>(
    a: &ArrayD<T>,
    axis: usize,
    k: usize,
    largest: bool,
) -> OpResult<(ArrayD<T>, ArrayD<i64>)> {
    let s = a.shape();
    let (outer, dim, inner): (usize, usize, usize) = (
        s[..axis].iter().product(),
        s[axis],
        s[axis + 1..].iter().product(),
    );
    let mut shape = s.to_vec();
    shape[axis] = k;
    let src = flat(a);
    let n = outer * k * inner;
    let mut vals = vec![T::zero(); n];
    let mut idxs = vec![0i64; n];
    let cmp = |x: &(T, usize), y: &(T, usize)| {
        let c = tcmp(&x.0, &y.0);
        (if largest { c.reverse() } else { c }).then(x.1.cmp(&y.1))
    };
    let mut lane: Vec<(T, usize)> = Vec::with_capacity(dim);
    if k > 0 {
        for o in 0..outer {
            for i in 0..inner {
                lane.clear();
                lane.extend((0..dim).map(|t| (src[(o * dim + t) * inner + i], t)));
                if k < dim {
                    lane.select_nth_unstable_by(k - 1, cmp);
                    lane.truncate(k);
                }
                lane.sort_unstable_by(cmp);
                for (t, &(v, j)) in lane.iter().enumerate() {
                    let p = (o * k + t) * inner + i;
                    vals[p] = v;
                    idxs[p] = j as i64;
                }
            }
        }
    }
    Ok((arr(&shape, vals)?, arr(&shape, idxs)?))
}

fn unique(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    if matches!(x, Tensor::Packed(..)) {
        unsupported!("Unique on {}", x.dtype());
    }
    let sorted = ctx.attr_i("sorted", 1)? != 0;
    let flat_x;
    let (t, axis) = match ctx.attr_opt_i("axis")? {
        Some(_) if x.rank() == 0 => bail!("an axis on a scalar"),
        Some(a) => (x, norm_axis(a, x.rank())?),
        None => {
            flat_x = x.reshape(&[x.len()])?;
            (&flat_x, 0)
        }
    };
    let s = t.shape();
    let (outer, dim, inner): (usize, usize, usize) = (
        s[..axis].iter().product(),
        s[axis],
        s[axis + 1..].iter().product(),
    );
    // Items are the slices along `axis`; compare them lexicographically (outer-major, then inner).
    let (firsts, inverse, counts) = with_array!(t, a => {
        let src = flat(a);
        let item_cmp = |p: usize, q: usize| {
            for o in 0..outer {
                let (bp, bq) = ((o * dim + p) * inner, (o * dim + q) * inner);
                for i in 0..inner {
                    let c = tcmp(&src[bp + i], &src[bq + i]);
                    if c != Ordering::Equal {
                        return c;
                    }
                }
            }
            Ordering::Equal
        };
        let mut order: Vec<usize> = (0..dim).collect();
        order.sort_by(|&p, &q| item_cmp(p, q)); // stable: ties keep first occurrence first
        group(&order, |p, q| item_cmp(p, q) == Ordering::Equal)
    });
    // `firsts` lists groups in sorted order; reorder them by first occurrence when unsorted.
    let mut gorder: Vec<usize> = (0..firsts.len()).collect();
    if !sorted {
        gorder.sort_by_key(|&g| firsts[g]);
    }
    let mut rank_of = vec![0usize; firsts.len()];
    for (pos, &g) in gorder.iter().enumerate() {
        rank_of[g] = pos;
    }
    let sel: Vec<usize> = gorder.iter().map(|&g| firsts[g]).collect();
    let y = take_axis(t, axis, &sel, &[sel.len()])?;
    let ind = sel.iter().map(|&i| i as i64).collect::<Vec<_>>();
    let inv = inverse
        .iter()
        .map(|&g| rank_of[g] as i64)
        .collect::<Vec<_>>();
    let cnt = gorder.iter().map(|&g| counts[g] as i64).collect::<Vec<_>>();
    let (nu, ni) = (ind.len(), inv.len());
    Ok(vec![
        Value::Tensor(y),
        Value::Tensor(Tensor::from_i64(&[nu], ind)?),
        Value::Tensor(Tensor::from_i64(&[ni], inv)?),
        Value::Tensor(Tensor::from_i64(&[nu], cnt)?),
    ])
}

/// Groups a sorted item order into runs of equal items: each group's first item (its smallest
/// index, as the sort is stable), the group of every item, and each group's size.
fn group(
    order: &[usize],
    eq: impl Fn(usize, usize) -> bool,
) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    let mut firsts: Vec<usize> = Vec::new();
    let mut counts: Vec<usize> = Vec::new();
    let mut inverse = vec![0usize; order.len()];
    for &p in order {
        match firsts.last() {
            Some(&f) if eq(f, p) => {
                if let Some(c) = counts.last_mut() {
                    *c += 1;
                }
            }
            _ => {
                firsts.push(p);
                counts.push(1);
            }
        }
        inverse[p] = firsts.len() - 1;
    }
    (firsts, inverse, counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topk_ties_prefer_lower_index_and_nan_is_largest() {
        let a = ArrayD::from_shape_vec(
            ndarray::IxDyn(&[6]),
            vec![1.5f32, f32::NAN, 3.0, 3.0, -2.0, 1.5],
        )
        .unwrap();
        let (v, i) = topk_impl(&a, 0, 4, true).unwrap();
        assert!(v[[0]].is_nan());
        assert_eq!(i.as_slice().unwrap(), &[1, 2, 3, 0]);
        let (v, i) = topk_impl(&a, 0, 3, false).unwrap();
        assert_eq!(v.as_slice().unwrap(), &[-2.0, 1.5, 1.5]);
        assert_eq!(i.as_slice().unwrap(), &[4, 0, 5]);
    }

    #[test]
    fn element_offsets_walk_indices_smaller_than_data() {
        // data [3, 4], indices [2, 2] on axis 1
        let ind = Tensor::from_i64(&[2, 2], vec![3, -1, 0, 2]).unwrap();
        let offs = element_offsets(&[3, 4], &ind, 1).unwrap();
        assert_eq!(offs, vec![3, 3, 4, 6]);
        let offs = element_offsets(&[3, 4], &ind, 0);
        assert!(offs.is_err()); // index 3 out of range on axis 0
    }
}
