//! The movement ops as plans of strided copies, for every device backend: views (Reshape, Flatten,
//! Squeeze, Unsqueeze, Identity, inference Dropout) launch nothing and share the input's storage;
//! Transpose, Expand, Slice, Concat, Split, Tile, DepthToSpace and SpaceToDepth are strided copies
//! with different strides; ConstantOfShape is a fill. The shape rules are the CPU's
//! (`slice_plan`, `split_plan`, `view_shape`, `constant_of_shape_plan`). Pad and Gather, whose
//! kernels are the backends' own, share their host-side plans ([`pad_plan`], [`gather_plan`]).
//!
//! Each `k_*` function is a whole kernel of a backend's claim table, instantiated for its
//! [`Primitives`] and [`KernelInputs`].
use super::layout::{Strided, broadcast_strides, contiguous};
use super::{DeviceValue, KernelInputs, Primitives, host_f64s, host_i64s, optional_i64s, required};
use crate::error::OpError;
use crate::ops::broadcast::broadcast_shapes;
use crate::ops::data::{slice_plan, split_plan};
use crate::ops::shape::{constant_of_shape_plan, view_shape};
use crate::ops::{OpCtx, norm_axis};
use crate::tensor::{DType, Tensor, Value};

/// The movement kernels planned here for op type `$op`, each as the backend's kernel type `$k`
/// (`Option<$k>`: `None` for Pad, Gather and ops outside the movement families).
#[macro_export]
#[doc(hidden)]
macro_rules! shared_kernel {
    ($op:expr, $k:ty) => {{
        use $crate::device::movement::*;
        let k: Option<$k> = match $op {
            "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" => Some(|c, r, i| k_view(c, r, i)),
            "Identity" => Some(|c, r, i| k_identity(c, r, i)),
            "Dropout" => Some(|c, r, i| k_dropout(c, r, i)),
            "Transpose" => Some(|c, r, i| k_transpose(c, r, i)),
            "Expand" => Some(|c, r, i| k_expand(c, r, i)),
            "Slice" => Some(|c, r, i| k_slice(c, r, i)),
            "Concat" => Some(|c, r, i| k_concat(c, r, i)),
            "Split" => Some(|c, r, i| k_split(c, r, i)),
            "Tile" => Some(|c, r, i| k_tile(c, r, i)),
            "DepthToSpace" | "SpaceToDepth" => Some(|c, r, i| k_space_depth(c, r, i)),
            "ConstantOfShape" => Some(|c, r, i| k_constant_of_shape(c, r, i)),
            _ => None,
        };
        k
    }};
}
pub use crate::shared_kernel;

type Out<P> = Result<Vec<<P as Primitives>::Tensor>, <P as Primitives>::Error>;

fn invalid<E: From<OpError>>(msg: impl Into<String>) -> E {
    OpError::Invalid(msg.into()).into()
}

/// A new tensor holding `src` read through `from` over `shape`.
pub fn gather_view<P: Primitives>(
    p: &P,
    src: &P::Tensor,
    from: &Strided,
    shape: &[usize],
) -> Result<P::Tensor, P::Error> {
    let out = p.alloc(src.dtype(), shape)?;
    p.strided_copy(&out, &Strided::dense(shape), src, from, shape)?;
    Ok(out)
}

/// Reshape, Flatten, Squeeze, Unsqueeze: the input's storage under the new shape.
pub fn k_view<P: Primitives>(
    ctx: &OpCtx,
    _: &P,
    inputs: &(impl KernelInputs<P::Tensor, P::Error> + ?Sized),
) -> Out<P> {
    let x = required(inputs, 0)?;
    let param = optional_i64s(inputs, 1)?;
    let shape = view_shape(ctx, x.shape(), param)?;
    if shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)) != Some(x.len()) {
        return Err(invalid(format!("cannot view {:?} as {shape:?}", x.shape())));
    }
    Ok(vec![x.view(shape)])
}

pub fn k_identity<P: Primitives>(
    _: &OpCtx,
    _: &P,
    inputs: &(impl KernelInputs<P::Tensor, P::Error> + ?Sized),
) -> Out<P> {
    Ok(vec![required(inputs, 0)?])
}

/// Inference-mode Dropout is the identity: the output shares the input's storage, and its mask
/// keeps every element (a fill). A random mask (training mode) stays on the CPU.
pub fn k_dropout<P: Primitives>(
    ctx: &OpCtx,
    p: &P,
    inputs: &(impl KernelInputs<P::Tensor, P::Error> + ?Sized),
) -> Out<P> {
    let scalar = |i: usize| {
        if inputs.present(i) {
            inputs.host(i)
        } else {
            Ok(None)
        }
    };
    let (ratio, training) = (scalar(1)?, scalar(2)?);
    let (_, random) = crate::ops::misc::dropout_mode(
        ctx,
        ratio.as_deref().and_then(Value::as_tensor),
        training.as_deref().and_then(Value::as_tensor),
    )?;
    if random {
        return Err(P::decline(
            "training-mode Dropout draws a random mask on the CPU".into(),
        ));
    }
    let x = required(inputs, 0)?;
    let wants_mask = ctx.node.outputs.get(1).is_some_and(|m| !m.is_empty());
    if !wants_mask {
        return Ok(vec![x]);
    }
    // The mask keeps every element: bool from opset 10, the input's type before.
    let dtype = if ctx.opset() >= 10 {
        DType::Bool
    } else {
        x.dtype()
    };
    let one = Tensor::from_f64s(dtype, &[], vec![1.0])?;
    let mask = p.fill(&one, x.shape())?;
    Ok(vec![x, mask])
}

pub fn k_transpose<P: Primitives>(
    ctx: &OpCtx,
    p: &P,
    inputs: &(impl KernelInputs<P::Tensor, P::Error> + ?Sized),
) -> Out<P> {
    let x = required(inputs, 0)?;
    let xs = x.shape();
    let r = xs.len();
    let perm: Vec<usize> = match ctx.attr_opt_ints("perm")? {
        Some(v) => v
            .iter()
            .map(|&a| norm_axis(a, r))
            .collect::<Result<_, _>>()?,
        None => (0..r).rev().collect(),
    };
    let mut seen = vec![false; r];
    if perm.len() != r || perm.iter().any(|&a| std::mem::replace(&mut seen[a], true)) {
        return Err(invalid(format!(
            "perm {perm:?} is not a permutation of {r} axes"
        )));
    }
    let st = contiguous(xs);
    let shape: Vec<usize> = perm.iter().map(|&a| xs[a]).collect();
    let from = Strided {
        base: 0,
        strides: perm.iter().map(|&a| st[a]).collect(),
    };
    Ok(vec![gather_view(p, &x, &from, &shape)?])
}

pub fn k_expand<P: Primitives>(
    _: &OpCtx,
    p: &P,
    inputs: &(impl KernelInputs<P::Tensor, P::Error> + ?Sized),
) -> Out<P> {
    let x = required(inputs, 0)?;
    let Some(target) = host_i64s(inputs, 1)? else {
        return Err(invalid("Expand needs a shape"));
    };
    if target.iter().any(|&d| d < 0) {
        return Err(invalid(format!("Expand shape {target:?} is negative")));
    }
    let target: Vec<usize> = target.iter().map(|&d| d as usize).collect();
    let out_shape = broadcast_shapes(&[x.shape(), &target])?;
    let from = Strided {
        base: 0,
        strides: broadcast_strides(x.shape(), &out_shape),
    };
    Ok(vec![gather_view(p, &x, &from, &out_shape)?])
}

pub fn k_slice<P: Primitives>(
    ctx: &OpCtx,
    p: &P,
    inputs: &(impl KernelInputs<P::Tensor, P::Error> + ?Sized),
) -> Out<P> {
    let x = required(inputs, 0)?;
    let params = (1..5)
        .map(|i| host_i64s(inputs, i))
        .collect::<Result<Vec<_>, _>>()?;
    let (base, shape, st) = slice_plan(ctx, x.shape(), params)?;
    let from = Strided {
        base: base as i64,
        strides: st.iter().map(|&s| s as i64).collect(),
    };
    Ok(vec![gather_view(p, &x, &from, &shape)?])
}

pub fn k_concat<P: Primitives>(
    ctx: &OpCtx,
    p: &P,
    inputs: &(impl KernelInputs<P::Tensor, P::Error> + ?Sized),
) -> Out<P> {
    let mut parts = Vec::new();
    for i in 0..inputs.len() {
        if let Some(t) = inputs.device(i)? {
            parts.push(t);
        }
    }
    concat(ctx, p, parts)
}

/// Concat of `parts` (the present inputs, in order) along the node's axis.
pub fn concat<P: Primitives>(ctx: &OpCtx, p: &P, parts: Vec<P::Tensor>) -> Out<P> {
    let Some(first) = parts.first() else {
        return Err(invalid("Concat needs inputs"));
    };
    let fs = first.shape();
    let r = fs.len();
    if r == 0 {
        return Err(P::decline("Concat of scalars".into()));
    }
    let axis = norm_axis(ctx.req_i("axis")?, r)?;
    let mut out_shape = fs.to_vec();
    out_shape[axis] = 0;
    for part in &parts {
        let ps = part.shape();
        let same_rest = ps.len() == r
            && (0..r).all(|d| d == axis || ps[d] == fs[d])
            && part.dtype() == first.dtype();
        if !same_rest {
            return Err(invalid(format!(
                "Concat inputs {fs:?} and {ps:?} ({} and {}) differ off axis {axis}",
                first.dtype(),
                part.dtype()
            )));
        }
        out_shape[axis] += ps[axis];
    }
    let out = p.alloc(first.dtype(), &out_shape)?;
    let ost = contiguous(&out_shape);
    let mut at = 0i64;
    for part in &parts {
        let to = Strided {
            base: at * ost[axis],
            strides: ost.clone(),
        };
        p.strided_copy(&out, &to, part, &Strided::dense(part.shape()), part.shape())?;
        at += part.shape()[axis] as i64;
    }
    Ok(vec![out])
}

pub fn k_split<P: Primitives>(
    ctx: &OpCtx,
    p: &P,
    inputs: &(impl KernelInputs<P::Tensor, P::Error> + ?Sized),
) -> Out<P> {
    let x = required(inputs, 0)?;
    let given = optional_i64s(inputs, 1)?;
    let (axis, sizes) = split_plan(ctx, x.shape(), given)?;
    let st = contiguous(x.shape());
    let mut start = 0i64;
    let mut outs = Vec::new();
    for &s in &sizes {
        let mut shape = x.shape().to_vec();
        shape[axis] = s as usize;
        let from = Strided {
            base: start * st[axis],
            strides: st.clone(),
        };
        outs.push(gather_view(p, &x, &from, &shape)?);
        start += s;
    }
    Ok(outs)
}

pub fn k_tile<P: Primitives>(
    _: &OpCtx,
    p: &P,
    inputs: &(impl KernelInputs<P::Tensor, P::Error> + ?Sized),
) -> Out<P> {
    let x = required(inputs, 0)?;
    let xs = x.shape();
    let Some(reps) = host_i64s(inputs, 1)? else {
        return Err(invalid("Tile needs repeats"));
    };
    if reps.len() != xs.len() || reps.iter().any(|&r| r < 0) {
        return Err(invalid(format!("Tile repeats {reps:?} for shape {xs:?}")));
    }
    // The output viewed as [r0, d0, r1, d1, ...] reads the input with stride 0 along each r.
    let st = contiguous(xs);
    let mut view = Vec::new();
    let mut vst = Vec::new();
    for (d, &r) in reps.iter().enumerate() {
        view.extend([r as usize, xs[d]]);
        vst.extend([0, st[d]]);
    }
    let out_shape: Vec<usize> = xs
        .iter()
        .zip(&reps)
        .map(|(&d, &r)| d * r as usize)
        .collect();
    let from = Strided {
        base: 0,
        strides: vst,
    };
    let out = gather_view(p, &x, &from, &view)?;
    Ok(vec![out.view(out_shape)])
}

/// DepthToSpace and SpaceToDepth: one 6-D transpose of the input viewed in blocks.
pub fn k_space_depth<P: Primitives>(
    ctx: &OpCtx,
    p: &P,
    inputs: &(impl KernelInputs<P::Tensor, P::Error> + ?Sized),
) -> Out<P> {
    let x = required(inputs, 0)?;
    let b = ctx.req_i("blocksize")?;
    let &[n, c, h, w] = x.shape() else {
        return Err(invalid(format!(
            "{} takes a 4-D input, got {:?}",
            ctx.node.op_type,
            x.shape()
        )));
    };
    if b <= 0 || b > 1 << 16 {
        return Err(invalid(format!("blocksize {b}")));
    }
    let b = b as usize;
    let (view, perm, out): (Vec<usize>, [usize; 6], Vec<usize>) =
        if ctx.node.op_type == "DepthToSpace" {
            if c % (b * b) != 0 {
                return Err(invalid(format!(
                    "channels {c} not divisible by blocksize² {}",
                    b * b
                )));
            }
            let cc = c / (b * b);
            if ctx.attr_s("mode", "DCR")? == "CRD" {
                (
                    vec![n, cc, b, b, h, w],
                    [0, 1, 4, 2, 5, 3],
                    vec![n, cc, h * b, w * b],
                )
            } else {
                (
                    vec![n, b, b, cc, h, w],
                    [0, 3, 4, 1, 5, 2],
                    vec![n, cc, h * b, w * b],
                )
            }
        } else {
            if h % b != 0 || w % b != 0 {
                return Err(invalid(format!(
                    "spatial dims {h}×{w} not divisible by blocksize {b}"
                )));
            }
            // Opset 28 added `mode`: CRD is the inverse of DepthToSpace CRD.
            let perm = if ctx.attr_s("mode", "DCR")? == "CRD" {
                [0, 1, 3, 5, 2, 4]
            } else {
                [0, 3, 5, 1, 2, 4]
            };
            (
                vec![n, c, h / b, b, w / b, b],
                perm,
                vec![n, c * b * b, h / b, w / b],
            )
        };
    let vst = contiguous(&view);
    let shape: Vec<usize> = perm.iter().map(|&a| view[a]).collect();
    let from = Strided {
        base: 0,
        strides: perm.iter().map(|&a| vst[a]).collect(),
    };
    let y = gather_view(p, &x, &from, &shape)?;
    Ok(vec![y.view(out)])
}

pub fn k_constant_of_shape<P: Primitives>(
    ctx: &OpCtx,
    p: &P,
    inputs: &(impl KernelInputs<P::Tensor, P::Error> + ?Sized),
) -> Out<P> {
    let shape = inputs
        .host(0)?
        .ok_or_else(|| invalid::<P::Error>("ConstantOfShape needs a shape"))?;
    let Some(shape) = shape.as_tensor() else {
        return Err(invalid("ConstantOfShape shape must be a tensor"));
    };
    let (shape, value) = constant_of_shape_plan(ctx, shape)?;
    Ok(vec![p.fill(&value, &shape)?])
}

/// Pad's plan: the mode, pads before and after each axis, the output shape and the constant.
#[derive(Debug, Clone, PartialEq)]
pub struct PadPlan {
    pub mode: PadMode,
    pub begin: Vec<i64>,
    pub end: Vec<i64>,
    pub out_shape: Vec<usize>,
    /// The constant of `constant` mode.
    pub value: f64,
}

/// How Pad fills the border.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PadMode {
    Constant,
    Edge,
    Wrap,
    Reflect,
}

/// Pad's plan for an input of shape `xs`, from the node's attributes (before opset 11) or its
/// inputs (`pads`, the constant and `axes`, from opset 11).
pub fn pad_plan<T, E: From<OpError>>(
    ctx: &OpCtx,
    xs: &[usize],
    inputs: &(impl KernelInputs<T, E> + ?Sized),
) -> Result<PadPlan, E> {
    let r = xs.len();
    let mode = ctx.attr_s("mode", "constant")?;
    let (pads, value, axes) = if ctx.opset() < 11 {
        let pads = ctx.attr_opt_ints("pads")?.unwrap_or_default();
        (pads, ctx.attr_f("value", 0.0)? as f64, None)
    } else {
        let pads = host_i64s(inputs, 1)?.unwrap_or_default();
        let value = if inputs.present(2) {
            host_f64s(inputs, 2)?
                .and_then(|v| v.first().copied())
                .unwrap_or(0.0)
        } else {
            0.0
        };
        (pads, value, optional_i64s(inputs, 3)?)
    };
    let axes: Vec<usize> = match axes {
        Some(a) => a
            .iter()
            .map(|&v| norm_axis(v, r))
            .collect::<Result<_, _>>()?,
        None => (0..r).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return Err(invalid(format!(
            "Pad has {} pads for {} axes",
            pads.len(),
            axes.len()
        )));
    }
    let mut begin = vec![0i64; r];
    let mut end = vec![0i64; r];
    for (i, &a) in axes.iter().enumerate() {
        begin[a] = pads[i];
        end[a] = pads[i + axes.len()];
    }
    let mut out_shape = Vec::with_capacity(r);
    for d in 0..r {
        let v = xs[d] as i64 + begin[d] + end[d];
        if v < 0 {
            return Err(invalid(format!("Pad makes axis {d} negative ({v})")));
        }
        out_shape.push(v as usize);
    }
    if mode != "constant" && xs.iter().zip(&out_shape).any(|(&i, &o)| i == 0 && o > 0) {
        return Err(invalid(format!("Pad mode {mode} of an empty axis")));
    }
    let mode = match mode.as_str() {
        "constant" => PadMode::Constant,
        "edge" => PadMode::Edge,
        "wrap" => PadMode::Wrap,
        "reflect" => PadMode::Reflect,
        other => return Err(invalid(format!("Pad mode '{other}' is not an ONNX mode"))),
    };
    Ok(PadPlan {
        mode,
        begin,
        end,
        out_shape,
        value,
    })
}

/// Gather's plan: the axis, its size, the elements after it and the output shape, for data of
/// shape `xs` and indices of shape `ishape`.
#[derive(Debug, Clone, PartialEq)]
pub struct GatherPlan {
    pub axis: usize,
    pub dim: i64,
    pub inner: usize,
    pub out_shape: Vec<usize>,
}

pub fn gather_plan(ctx: &OpCtx, xs: &[usize], ishape: &[usize]) -> Result<GatherPlan, OpError> {
    let r = xs.len();
    if r == 0 {
        return Err(OpError::Invalid("Gather on a scalar".into()));
    }
    let axis = norm_axis(ctx.attr_i("axis", 0)?, r)?;
    let mut out_shape = xs[..axis].to_vec();
    out_shape.extend(ishape);
    out_shape.extend(&xs[axis + 1..]);
    Ok(GatherPlan {
        axis,
        dim: xs[axis] as i64,
        inner: xs[axis + 1..].iter().product(),
        out_shape,
    })
}

impl GatherPlan {
    /// Indices read on the host, checked against the axis and made non-negative.
    pub fn host_indices(&self, idx: &[i64]) -> Result<Vec<i64>, OpError> {
        let (dim, axis) = (self.dim, self.axis);
        if let Some(&bad) = idx.iter().find(|&&v| v < -dim || v >= dim) {
            return Err(OpError::Invalid(format!(
                "Gather index {bad} is out of range for axis {axis} of size {dim}"
            )));
        }
        Ok(idx
            .iter()
            .map(|&v| if v < 0 { v + dim } else { v })
            .collect())
    }
}
