//! The index family's host-side plans, decided once for every backend: GatherElements' offsets,
//! ScatterElements and ScatterND as lines of in-order updates, OneHot's positions, Trilu's triangle,
//! CumSum's lines (`ScanPlan`, the CPU kernel's own).
//! Index values are read and checked on the host by the CPU kernel's own rules (`ops::data::index`),
//! so a device answers exactly where the CPU would and errs where it would.
use crate::error::OpError;
use crate::ops::data::index::{
    Reduction, element_indices_fit, element_offsets, one_hot_plan, one_hot_pos, reduction,
    scatter_nd_plan,
};
pub use crate::ops::data::{ScanPlan, cumsum_plan};
use crate::ops::{OpCtx, norm_axis};
use crate::tensor::{DType, Tensor};

/// GatherElements on data of shape `x` with index tensor `ind`: the data offset of each output
/// element (`out[i] = x[offs[i]]`) and the output shape (the indices').
pub fn gather_elements_plan(
    ctx: &OpCtx,
    x: &[usize],
    ind: &Tensor,
) -> Result<(Vec<usize>, Vec<usize>), OpError> {
    let axis = norm_axis(ctx.attr_i("axis", 0)?, x.len())?;
    // The CPU's rule: shape fit and every index in range, or an error.
    let offs = element_offsets(x, ind, axis)?;
    Ok((offs, ind.shape().to_vec()))
}

/// GatherElements checked by shapes alone, for a kernel that reads its indices on the device: the
/// axis, or the CPU's error where the index shape does not fit the data.
pub fn gather_elements_axis(ctx: &OpCtx, x: &[usize], ishape: &[usize]) -> Result<usize, OpError> {
    let axis = norm_axis(ctx.attr_i("axis", 0)?, x.len())?;
    element_indices_fit(x, ishape, axis)?;
    Ok(axis)
}

/// A scatter as lines: `out = x`, then along each of `inner` lines its `len` updates, update `p`
/// at data offset `offs[p]` (line `l`'s updates are `l, l + inner, ..`), applied in order with
/// `red`. One device thread per line keeps duplicates within a line in the definition's order.
#[derive(Debug, Clone)]
pub struct ScatterLines {
    pub offs: Vec<usize>,
    pub len: usize,
    pub inner: usize,
    pub red: Reduction,
}

/// ScatterElements on data `x` (shape, dtype) with index tensor `ind` and updates `upd`: each
/// line runs along `axis` (its updates are the indices' elements on one line of that axis).
pub fn scatter_elements_lines(
    ctx: &OpCtx,
    x: (&[usize], DType),
    ind: &Tensor,
    upd: (&[usize], DType),
) -> Result<ScatterLines, OpError> {
    let axis = norm_axis(ctx.attr_i("axis", 0)?, x.0.len())?;
    scatter_shape(upd.0, ind.shape())?;
    let offs = element_offsets(x.0, ind, axis)?;
    scatter_dtype(upd.1, x.1)?;
    let ishape = ind.shape();
    Ok(ScatterLines {
        offs,
        len: ishape[axis],
        inner: ishape[axis + 1..].iter().product(),
        red: reduction(ctx)?,
    })
}

/// ScatterND as lines of a scatter: the data offset of every update (each index tuple's slice,
/// element by element); element `e` of every slice is one line (so there are as many lines as a
/// slice has elements), its updates, one per tuple, applied in tuple order.
pub fn scatter_nd_lines(
    ctx: &OpCtx,
    x: (&[usize], DType),
    indices: &Tensor,
    upd: (&[usize], DType),
) -> Result<ScatterLines, OpError> {
    let (bases, slice) = scatter_nd_plan(x.0, indices, upd.0)?;
    scatter_dtype(upd.1, x.1)?;
    let offs = bases
        .iter()
        .flat_map(|&b| (0..slice).map(move |e| b + e))
        .collect();
    Ok(ScatterLines {
        offs,
        len: bases.len(),
        inner: slice,
        red: reduction(ctx)?,
    })
}

/// OneHot's output: `out[o, j, i] = pos[o·inner + i] == j ? on : off` over `depth` positions `j`.
#[derive(Debug, Clone)]
pub struct OneHotPlan {
    pub depth: usize,
    pub inner: usize,
    pub shape: Vec<usize>,
    /// Each index's position along the depth axis (negative indices wrapped), -1 where outside.
    pub pos: Vec<i32>,
}

/// OneHot for index tensor `ind`, its `depth` and `values` inputs.
pub fn one_hot_lines(
    ctx: &OpCtx,
    ind: &Tensor,
    depth: &Tensor,
    values: &Tensor,
) -> Result<OneHotPlan, OpError> {
    let (depth, axis, shape) = one_hot_plan(ctx, ind.shape(), depth, values)?;
    let pos = ind
        .to_f64_vec()?
        .into_iter()
        .map(|v| one_hot_pos(v, depth).map_or(-1, |p| p as i32))
        .collect();
    Ok(OneHotPlan {
        depth,
        inner: ind.shape()[axis..].iter().product(),
        shape,
        pos,
    })
}

/// ScatterElements' updates must have the indices' shape.
fn scatter_shape(upd: &[usize], indices: &[usize]) -> Result<(), OpError> {
    if upd != indices {
        return Err(OpError::Invalid(format!(
            "updates of shape {upd:?} differ from indices of shape {indices:?}"
        )));
    }
    Ok(())
}

/// A scatter's updates must have the data's dtype.
fn scatter_dtype(upd: DType, x: DType) -> Result<(), OpError> {
    if upd != x {
        return Err(OpError::Invalid(format!(
            "updates have dtype {upd}, the data {x}"
        )));
    }
    Ok(())
}

/// Trilu's plan for input shape `xs` with `k` (0 when the input is omitted): whether it keeps the
/// upper triangle, the matrix's rows and columns, and `k` clamped to `[-rows, cols]` (`c - r` lies
/// in `[1 - rows, cols - 1]`, so the clamp keeps every decision and fits 32 bits).
pub fn trilu_plan(ctx: &OpCtx, xs: &[usize], k: i64) -> Result<(bool, usize, usize, i32), OpError> {
    let upper = ctx.attr_i("upper", 1)? != 0;
    let r = xs.len();
    if r < 2 {
        return Err(OpError::Invalid(format!(
            "Trilu needs rank >= 2, got {xs:?}"
        )));
    }
    let (rows, cols) = (xs[r - 2], xs[r - 1]);
    Ok((
        upper,
        rows,
        cols,
        k.clamp(-(rows as i64), cols as i64) as i32,
    ))
}

/// Trilu's `k` from its input's values.
pub fn trilu_k(k: &Tensor) -> Result<i64, OpError> {
    k.to_i64_vec()?
        .first()
        .copied()
        .ok_or_else(|| OpError::Invalid("Trilu k is empty".into()))
}

/// The index family's kernels by op type, each named as the invoking backend names it
/// (`k_gather_elements`, `k_scatter_elements`, `k_scatter_nd`, `k_one_hot`, `k_trilu`, `k_range`,
/// `k_cumsum`, functions of the backend's kernel type `$k` in scope where it is invoked): the
/// family's table of op to kernel, written once, so that a backend missing one of them does not
/// compile.
#[macro_export]
#[doc(hidden)]
macro_rules! index_kernel {
    ($op:expr, $k:ty) => {{
        let k: Option<$k> = match $op {
            "GatherElements" => Some(k_gather_elements),
            "ScatterElements" => Some(k_scatter_elements),
            "ScatterND" => Some(k_scatter_nd),
            "OneHot" => Some(k_one_hot),
            "Trilu" => Some(k_trilu),
            "Range" => Some(k_range),
            "CumSum" => Some(k_cumsum),
            _ => None,
        };
        k
    }};
}
