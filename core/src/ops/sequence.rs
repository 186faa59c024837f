//! Sequences and optionals: SequenceConstruct/Empty/At/Insert/Erase/Length, SplitToSequence,
//! ConcatFromSequence, SequenceMap, Optional, OptionalGetElement, OptionalHasElement.
//!
//! Also holds the tensor slicing/stacking helpers the control-flow kernels share (`stack`, `concat`,
//! `slice_axis`, `index_axis`).
use ndarray::{ArrayD, Axis, IxDyn, Slice};

use super::{OpCtx, Registry, input, opt_input, single};
use crate::error::{OpError, OpResult};
use crate::ir::{Attr, ValueType};
use crate::tensor::{DType, Tensor, Value};
use crate::{bail, map_array, unsupported};

pub fn register(r: &mut Registry) {
    r.add("", "SequenceConstruct", sequence_construct);
    r.add("", "SequenceEmpty", sequence_empty);
    r.add("", "SequenceAt", sequence_at);
    r.add("", "SequenceInsert", sequence_insert);
    r.add("", "SequenceErase", sequence_erase);
    r.add("", "SequenceLength", sequence_length);
    r.add("", "SplitToSequence", split_to_sequence);
    r.add("", "ConcatFromSequence", concat_from_sequence);
    r.add("", "SequenceMap", sequence_map);
    r.add("", "Optional", optional);
    r.add("", "OptionalGetElement", optional_get_element);
    r.add("", "OptionalHasElement", optional_has_element);
}

// ---------------------------------------------------------------------------------------------
// Shared tensor helpers (used by control.rs too).

/// Joins tensors of one dtype along `axis`: stacked along a new axis when `new_axis`, concatenated
/// along an existing one otherwise.
fn join(items: &[Tensor], axis: usize, new_axis: bool) -> OpResult<Tensor> {
    let Some(first) = items.first() else {
        bail!("cannot join an empty list of tensors")
    };
    let dt = first.dtype();
    if let Some(t) = items.iter().find(|t| t.dtype() != dt) {
        bail!(
            "cannot join tensors of different dtypes: {dt} and {}",
            t.dtype()
        );
    }
    let shapes_err = || {
        OpError::Invalid(format!(
            "cannot {} tensors of shapes {:?} along axis {axis}",
            if new_axis { "stack" } else { "concatenate" },
            items.iter().map(|t| t.shape().to_vec()).collect::<Vec<_>>()
        ))
    };
    // ndarray asserts (panics) on mixed ranks or an axis past the rank, so those are refused here.
    let rank = first.rank();
    let axis_ok = if new_axis { axis <= rank } else { axis < rank };
    if !axis_ok || items.iter().any(|t| t.rank() != rank) {
        return Err(shapes_err());
    }
    Ok(map_array!(first, a => {
        let views: Vec<_> = items
            .iter()
            .map(|t| downcast_like(a, t))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(shapes_err)?;
        let j = if new_axis {
            ndarray::stack(Axis(axis), &views).map_err(|_| shapes_err())?
        } else {
            ndarray::concatenate(Axis(axis), &views).map_err(|_| shapes_err())?
        };
        // Kernels downstream expect row-major data.
        if j.is_standard_layout() { j } else { j.as_standard_layout().into_owned() }
    }))
}

/// A view of `t`'s array when `t` holds the same element type as `like`.
fn downcast_like<'t, T: 'static>(
    _like: &ArrayD<T>,
    t: &'t Tensor,
) -> Option<ndarray::ArrayViewD<'t, T>> {
    crate::with_array!(t, x => (x as &dyn std::any::Any).downcast_ref::<ArrayD<T>>().map(|a| a.view()))
}

/// Stacks tensors of equal shape along a new axis `axis`.
pub(crate) fn stack(items: &[Tensor], axis: usize) -> OpResult<Tensor> {
    join(items, axis, true)
}

/// Concatenates tensors along the existing axis `axis`.
pub(crate) fn concat(items: &[Tensor], axis: usize) -> OpResult<Tensor> {
    join(items, axis, false)
}

/// Elements `start..end` of `t` along `axis` (a copy in standard layout).
pub(crate) fn slice_axis(t: &Tensor, axis: usize, start: usize, end: usize) -> OpResult<Tensor> {
    let n = *t.shape().get(axis).ok_or_else(|| {
        OpError::Invalid(format!("axis {axis} out of range for {}", t.describe()))
    })?;
    if start > end || end > n {
        bail!(
            "slice {start}..{end} out of range for axis {axis} of {}",
            t.describe()
        );
    }
    Ok(
        map_array!(t, a => a.slice_axis(Axis(axis), Slice::from(start..end)).as_standard_layout().into_owned()),
    )
}

/// Element `i` of `t` along `axis`, that axis removed.
pub(crate) fn index_axis(t: &Tensor, axis: usize, i: usize) -> OpResult<Tensor> {
    let n = *t.shape().get(axis).ok_or_else(|| {
        OpError::Invalid(format!("axis {axis} out of range for {}", t.describe()))
    })?;
    if i >= n {
        bail!("index {i} out of range for axis {axis} of {}", t.describe());
    }
    Ok(map_array!(t, a => a.index_axis(Axis(axis), i).as_standard_layout().into_owned()))
}

/// The value at input `i`, which must be present.
fn value<'v>(inputs: &[Option<&'v Value>], i: usize) -> OpResult<&'v Value> {
    inputs
        .get(i)
        .copied()
        .flatten()
        .ok_or_else(|| OpError::Invalid(format!("required input {i} is missing")))
}

/// The sequence at input `i`.
fn seq<'v>(inputs: &[Option<&'v Value>], i: usize) -> OpResult<(Option<DType>, &'v Vec<Tensor>)> {
    match value(inputs, i)? {
        Value::Sequence { dtype, items } => Ok((*dtype, items)),
        v => bail!("input {i} must be a sequence, got {}", v.describe()),
    }
}

/// A scalar (or one-element) integer input read as i64.
fn scalar_i64(t: &Tensor, what: &str) -> OpResult<i64> {
    let v = t.to_i64_vec()?;
    if v.len() != 1 {
        bail!("{what} must hold one element, got {}", t.describe());
    }
    Ok(v[0])
}

fn sequence_value(dtype: Option<DType>, items: Vec<Tensor>) -> Value {
    let dtype = dtype.or_else(|| items.first().map(|t| t.dtype()));
    Value::Sequence { dtype, items }
}

/// The element dtype a declared type names (tensor, sequence of tensors, optional of either).
pub(crate) fn declared_dtype(ty: &ValueType) -> Option<DType> {
    match ty {
        ValueType::Tensor { dtype, .. } => *dtype,
        ValueType::Sequence(e) | ValueType::Optional(e) => declared_dtype(e),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Sequence kernels.

fn sequence_construct(_ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let mut items = Vec::with_capacity(inputs.len());
    for i in 0..inputs.len() {
        items.push(input(inputs, i)?.clone());
    }
    if let Some(t) = items
        .first()
        .and_then(|f| items.iter().find(|t| t.dtype() != f.dtype()))
    {
        let first = &items[0];
        bail!(
            "sequence elements must share a dtype: {} and {}",
            first.dtype(),
            t.dtype()
        );
    }
    Ok(vec![sequence_value(None, items)])
}

fn sequence_empty(ctx: &OpCtx, _inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let code = ctx.attr_i("dtype", DType::F32.onnx() as i64)?;
    let dt = i32::try_from(code)
        .ok()
        .and_then(DType::from_onnx)
        .ok_or_else(|| OpError::Invalid(format!("unknown dtype {code}")))?;
    Ok(vec![Value::Sequence {
        dtype: Some(dt),
        items: Vec::new(),
    }])
}

/// Normalises a position into a sequence of `n` items; `inclusive` allows `n` (insertion at the end).
fn seq_pos(p: i64, n: usize, inclusive: bool) -> OpResult<usize> {
    let n_i = n as i64;
    let q = if p < 0 { p + n_i } else { p };
    let hi = if inclusive { n_i } else { n_i - 1 };
    if q < 0 || q > hi {
        bail!("position {p} is out of range for a sequence of {n} items");
    }
    Ok(q as usize)
}

fn sequence_at(_ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (_, items) = seq(inputs, 0)?;
    let p = scalar_i64(input(inputs, 1)?, "position")?;
    let i = seq_pos(p, items.len(), false)?;
    single(items[i].clone())
}

fn sequence_insert(_ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (dtype, items) = seq(inputs, 0)?;
    let t = input(inputs, 1)?;
    if let Some(d) = dtype
        .or_else(|| items.first().map(|x| x.dtype()))
        .filter(|&d| d != t.dtype())
    {
        bail!(
            "cannot insert a {} tensor into a sequence of {d}",
            t.dtype()
        );
    }
    let pos = match opt_input(inputs, 2)? {
        Some(p) => seq_pos(scalar_i64(p, "position")?, items.len(), true)?,
        None => items.len(),
    };
    let mut items = items.clone();
    items.insert(pos, t.clone());
    Ok(vec![Value::Sequence {
        dtype: Some(t.dtype()),
        items,
    }])
}

fn sequence_erase(_ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (dtype, items) = seq(inputs, 0)?;
    if items.is_empty() {
        bail!("cannot erase from an empty sequence");
    }
    let pos = match opt_input(inputs, 1)? {
        Some(p) => seq_pos(scalar_i64(p, "position")?, items.len(), false)?,
        None => items.len() - 1,
    };
    let mut items = items.clone();
    let removed = items.remove(pos);
    Ok(vec![Value::Sequence {
        dtype: dtype.or(Some(removed.dtype())),
        items,
    }])
}

fn sequence_length(_ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (_, items) = seq(inputs, 0)?;
    single(Tensor::scalar_i64(items.len() as i64))
}

fn split_to_sequence(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let axis = super::norm_axis(ctx.attr_i("axis", 0)?, x.rank())?;
    if x.rank() == 0 {
        bail!(
            "SplitToSequence needs a tensor of rank >= 1, got {}",
            x.describe()
        );
    }
    let dim = x.shape()[axis];
    let split = opt_input(inputs, 1)?;
    let lengths: Vec<usize> = match split {
        None => vec![1; dim],
        Some(s) if s.rank() == 0 => {
            let l = scalar_i64(s, "split")?;
            if l <= 0 {
                bail!("split must be positive, got {l}");
            }
            let l = l as usize;
            let mut v = vec![l; dim / l];
            if dim % l > 0 {
                v.push(dim % l);
            }
            v
        }
        Some(s) => {
            let v = s.to_i64_vec()?;
            if v.iter().any(|&l| l < 0) || v.iter().sum::<i64>() != dim as i64 {
                bail!("split {v:?} must be non-negative and sum to the axis length {dim}");
            }
            v.into_iter().map(|l| l as usize).collect()
        }
    };
    let squeeze = split.is_none() && ctx.attr_i("keepdims", 1)? == 0;
    let mut items = Vec::with_capacity(lengths.len());
    let mut pos = 0;
    for l in lengths {
        items.push(if squeeze {
            index_axis(x, axis, pos)?
        } else {
            slice_axis(x, axis, pos, pos + l)?
        });
        pos += l;
    }
    Ok(vec![Value::Sequence {
        dtype: Some(x.dtype()),
        items,
    }])
}

fn concat_from_sequence(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (_, items) = seq(inputs, 0)?;
    let Some(first) = items.first() else {
        bail!("ConcatFromSequence of an empty sequence")
    };
    let new_axis = ctx.attr_i("new_axis", 0)? != 0;
    let axis = ctx.req_i("axis")?;
    if new_axis {
        let axis = super::norm_axis(axis, first.rank() + 1)?;
        single(stack(items, axis)?)
    } else {
        if first.rank() == 0 {
            bail!("cannot concatenate scalars without new_axis=1");
        }
        let axis = super::norm_axis(axis, first.rank())?;
        single(concat(items, axis)?)
    }
}

fn sequence_map(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let body = ctx.attr_graph("body")?;
    let (_, first) = seq(inputs, 0)?;
    let n = first.len();
    let args: Vec<&Value> = (0..inputs.len())
        .map(|i| value(inputs, i))
        .collect::<OpResult<_>>()?;
    for (i, a) in args.iter().enumerate() {
        match a {
            Value::Sequence { items, .. } if items.len() != n => {
                bail!(
                    "input {i} is a sequence of {} items, input 0 has {n}",
                    items.len()
                )
            }
            _ => {}
        }
    }
    let mut outs: Vec<Vec<Tensor>> = vec![Vec::with_capacity(n); body.outputs.len()];
    for k in 0..n {
        let feed: Vec<Value> = args
            .iter()
            .map(|a| match a {
                Value::Sequence { items, .. } => Value::Tensor(items[k].clone()),
                v => (*v).clone(),
            })
            .collect();
        let res = ctx.run_subgraph(body, feed)?;
        for (o, (dst, v)) in outs.iter_mut().zip(res).enumerate() {
            match v {
                Value::Tensor(t) => dst.push(t),
                v => unsupported!(
                    "SequenceMap body output {o} is {}, only tensors are supported",
                    v.describe()
                ),
            }
        }
    }
    Ok(outs
        .into_iter()
        .zip(&body.outputs)
        .map(|(items, vi)| sequence_value(declared_dtype(&vi.ty), items))
        .collect())
}

// ---------------------------------------------------------------------------------------------
// Optionals.

fn optional(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    match inputs.first().copied().flatten() {
        Some(v) => Ok(vec![Value::Optional(Some(Box::new(v.clone())))]),
        None => {
            if !matches!(ctx.attr("type"), Some(Attr::Type(_))) {
                bail!("Optional without an input needs the 'type' attribute");
            }
            Ok(vec![Value::Optional(None)])
        }
    }
}

fn optional_get_element(_ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    match value(inputs, 0)? {
        Value::Optional(Some(v)) => Ok(vec![(**v).clone()]),
        Value::Optional(None) => bail!("the optional input is empty"),
        v => Ok(vec![v.clone()]),
    }
}

fn optional_has_element(_ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let has = match inputs.first().copied().flatten() {
        None | Some(Value::Optional(None)) => false,
        Some(_) => true,
    };
    single(Tensor::Bool(ArrayD::from_elem(IxDyn(&[]), has)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(shape: &[usize], v: Vec<f32>) -> Tensor {
        Tensor::from_f32(shape, v).unwrap()
    }

    #[test]
    fn stack_and_concat_match_direct_layout() {
        // Pseudo-random non-zero values from a fixed LCG.
        let mut s = 12345u32;
        let mut rnd = || {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / 16777216.0 + 0.5
        };
        let a: Vec<f32> = (0..6).map(|_| rnd()).collect();
        let b: Vec<f32> = (0..6).map(|_| rnd()).collect();
        let (ta, tb) = (t(&[2, 3], a.clone()), t(&[2, 3], b.clone()));
        // Stack on axis 1 -> [2, 2, 3]: out[i][k][j] = (k==0 ? a : b)[i][j].
        let st = stack(&[ta.clone(), tb.clone()], 1).unwrap();
        let Tensor::F32(st) = st else { panic!() };
        assert_eq!(st.shape(), &[2, 2, 3]);
        for i in 0..2 {
            for j in 0..3 {
                assert_eq!(st[[i, 0, j]], a[i * 3 + j]);
                assert_eq!(st[[i, 1, j]], b[i * 3 + j]);
            }
        }
        // Concat on axis 1 -> [2, 6].
        let Tensor::F32(c) = concat(&[ta.clone(), tb], 1).unwrap() else {
            panic!()
        };
        assert_eq!(c.shape(), &[2, 6]);
        assert_eq!(c[[1, 4]], b[3 + 1]);
        // Mixed dtypes are an error, not a panic.
        assert!(stack(&[ta, Tensor::scalar_i64(1)], 0).is_err());
        // Slicing and indexing.
        let Tensor::F32(s1) = slice_axis(&t(&[2, 3], a.clone()), 1, 1, 3).unwrap() else {
            panic!()
        };
        assert_eq!(s1.as_slice().unwrap(), &[a[1], a[2], a[4], a[5]]);
        let Tensor::F32(i1) = index_axis(&t(&[2, 3], a.clone()), 1, 2).unwrap() else {
            panic!()
        };
        assert_eq!(i1.as_slice().unwrap(), &[a[2], a[5]]);
        assert!(index_axis(&t(&[2, 3], a), 1, 3).is_err());
    }

    #[test]
    fn positions() {
        assert_eq!(seq_pos(-1, 3, false).unwrap(), 2);
        assert_eq!(seq_pos(3, 3, true).unwrap(), 3);
        assert!(seq_pos(3, 3, false).is_err());
        assert!(seq_pos(-4, 3, true).is_err());
    }
}
