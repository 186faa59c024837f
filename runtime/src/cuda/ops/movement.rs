//! CUDA kernels: data movement. Views (Reshape, Flatten, Squeeze, Unsqueeze, Identity) launch nothing:
//! the output shares the input's buffer. Transpose, Expand, Slice, Concat, Split, Tile, DepthToSpace
//! and SpaceToDepth are one strided-copy kernel with different strides; Pad and Gather have their own.
//! Elements are moved as raw bits, so every device dtype works.
use super::{broadcast_strides, offsets, require_u32_len, simplify, strides, thread_index};
use crate::cuda::driver::Arg;
use crate::cuda::memory::{device_elem_size, tensor_bytes};
use crate::cuda::ptx::{Cmp, Kernel, Op, Reg, Space, Ty, module};
use crate::cuda::{
    CudaKernel, DevTensor, Fault, Inputs, KError, KResult, Run, blocks, dev_input, host_f64s,
    host_i64s,
};
use crate::decline;
use crate::error::OpError;
use crate::ir::Node;
use crate::ops::broadcast::broadcast_shapes;
use crate::ops::data::{slice_plan, split_plan};
use crate::ops::shape::{constant_of_shape_plan, view_shape};
use crate::ops::{OpCtx, norm_axis};
use crate::tensor::{DType, Tensor, Value};
use std::sync::Arc;

/// The kernel for `node` if this family owns its op type.
pub fn claim(node: &Node) -> Option<Result<CudaKernel, String>> {
    let op = node.op_type.as_str();
    let k: CudaKernel = match op {
        "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" => k_view,
        "Identity" => k_identity,
        "Dropout" => k_dropout,
        "Transpose" => k_transpose,
        "Expand" => k_expand,
        "Slice" => k_slice,
        "Concat" => k_concat,
        "Split" => k_split,
        "Tile" => k_tile,
        "DepthToSpace" | "SpaceToDepth" => k_space_depth,
        "Pad" => k_pad,
        "Gather" => k_gather,
        "ConstantOfShape" => k_constant_of_shape,
        _ => return None,
    };
    Some(Ok(k))
}

pub(super) fn elem_ty(t: &DevTensor) -> KResult<(Ty, usize)> {
    Ok(match device_elem_size(t.dtype) {
        Some(1) => (Ty::U8, 1),
        Some(2) => (Ty::U16, 2),
        Some(4) => (Ty::U32, 4),
        Some(8) => (Ty::U64, 8),
        _ => decline!("{} values stay on the host", t.dtype),
    })
}

/// `base + (off as signed 32-bit) · size`: strides may be negative (Slice with negative steps).
fn signed_addr(k: &mut Kernel, base: Reg, off: Reg, size: usize) -> Reg {
    let s = k.bitcast(Ty::S32, off);
    k.addr(base, s, size)
}

pub(super) fn store_bits(k: &mut Kernel, ty: Ty, addr: Reg, v: Reg) {
    if ty == Ty::U8 {
        k.st_u8(Space::Global, addr, 0, v);
    } else {
        k.st(Space::Global, addr, 0, v);
    }
}

fn fits_i32(shape: &[usize], strides: &[i64], base: i64) -> bool {
    let reach: i64 = shape
        .iter()
        .zip(strides)
        .map(|(&d, &s)| (d.saturating_sub(1) as i64).saturating_mul(s.abs()))
        .fold(base.abs(), i64::saturating_add);
    reach < i32::MAX as i64
}

/// Copies `shape` elements: destination element `dst_base + Σ c·dst_strides`, source element
/// `src_base + Σ c·src_strides`, for every coordinate `c` of `shape`.
#[allow(clippy::too_many_arguments)]
fn strided_copy(
    run: &Run,
    dst: &DevTensor,
    dst_base: i64,
    dst_strides: &[i64],
    src: &DevTensor,
    src_base: i64,
    src_strides: &[i64],
    shape: &[usize],
) -> KResult<()> {
    let n = require_u32_len(shape)?;
    if n == 0 {
        return Ok(());
    }
    if !fits_i32(shape, src_strides, src_base) || !fits_i32(shape, dst_strides, dst_base) {
        decline!("offsets beyond 32-bit indexing");
    }
    let (ty, size) = elem_ty(src)?;
    let (shape, st) = simplify(shape, &[dst_strides.to_vec(), src_strides.to_vec()]);
    let mut k = Kernel::new("copy");
    let dp = k.param_ptr("dst");
    let sp = k.param_ptr("src");
    let n_r = k.param("n", Ty::U32);
    let i = thread_index(&mut k, n_r);
    let offs = offsets(&mut k, i, &shape, &st);
    let so = k.add(Ty::U32, offs[1], src_base as i32 as u32);
    let doff = k.add(Ty::U32, offs[0], dst_base as i32 as u32);
    let sa = signed_addr(&mut k, sp, so, size);
    let v = k.ld_nc(ty, sa, 0);
    let da = signed_addr(&mut k, dp, doff, size);
    store_bits(&mut k, ty, da, v);
    let ptx = module(run.cc(), &[k]);
    run.launch(
        &ptx,
        "copy",
        (blocks(n as usize, 256), 1, 1),
        (256, 1, 1),
        0,
        &[Arg::Ptr(dst.ptr()), Arg::Ptr(src.ptr()), Arg::U32(n)],
    )
}

fn contiguous(shape: &[usize]) -> Vec<i64> {
    strides(shape).into_iter().map(|s| s as i64).collect()
}

/// A new tensor holding `src` read through (base, shape, strides).
fn gather_view(
    run: &Run,
    src: &DevTensor,
    base: i64,
    shape: &[usize],
    src_strides: &[i64],
) -> KResult<DevTensor> {
    let out = run.alloc(src.dtype, shape)?;
    strided_copy(
        run,
        &out,
        0,
        &contiguous(shape),
        src,
        base,
        src_strides,
        shape,
    )?;
    Ok(out)
}

fn k_view(ctx: &OpCtx, _: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let x = dev_input(inputs, 0)?;
    let param = if inputs.present(1) {
        host_i64s(inputs, 1)?
    } else {
        None
    };
    let shape = view_shape(ctx, &x.shape, param)?;
    if shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)) != Some(x.len()) {
        return Err(KError::Op(OpError::Invalid(format!(
            "cannot view {:?} as {shape:?}",
            x.shape
        ))));
    }
    Ok(vec![x.view(shape)])
}

fn k_identity(_: &OpCtx, _: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    Ok(vec![dev_input(inputs, 0)?])
}

/// Inference-mode Dropout is the identity: the output shares the input's buffer. A random mask
/// (training mode) stays on the CPU; the mask output of the identity is a device fill.
fn k_dropout(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let scalar = |i: usize| -> KResult<Option<Arc<Value>>> {
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
        decline!("training-mode Dropout draws a random mask on the CPU");
    }
    let x = dev_input(inputs, 0)?;
    let wants_mask = ctx.node.outputs.get(1).is_some_and(|m| !m.is_empty());
    if !wants_mask {
        return Ok(vec![x]);
    }
    // The mask keeps every element: bool from opset 10, the input's type before.
    let dtype = if ctx.opset() >= 10 {
        DType::Bool
    } else {
        x.dtype
    };
    let one = Tensor::from_f64s(dtype, &[], vec![1.0])?;
    let mask = fill(run, &one, &x.shape)?;
    Ok(vec![x, mask])
}

fn k_transpose(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let x = dev_input(inputs, 0)?;
    let r = x.shape.len();
    let perm: Vec<usize> = match ctx.attr_opt_ints("perm")? {
        Some(p) => p
            .iter()
            .map(|&a| norm_axis(a, r))
            .collect::<Result<_, _>>()?,
        None => (0..r).rev().collect(),
    };
    let mut seen = vec![false; r];
    if perm.len() != r || perm.iter().any(|&a| std::mem::replace(&mut seen[a], true)) {
        return Err(KError::Op(OpError::Invalid(format!(
            "perm {perm:?} is not a permutation of {r} axes"
        ))));
    }
    let st = contiguous(&x.shape);
    let shape: Vec<usize> = perm.iter().map(|&a| x.shape[a]).collect();
    let sst: Vec<i64> = perm.iter().map(|&a| st[a]).collect();
    Ok(vec![gather_view(run, &x, 0, &shape, &sst)?])
}

fn k_expand(_: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let x = dev_input(inputs, 0)?;
    let Some(target) = host_i64s(inputs, 1)? else {
        return Err(KError::Op(OpError::Invalid("Expand needs a shape".into())));
    };
    if target.iter().any(|&d| d < 0) {
        return Err(KError::Op(OpError::Invalid(format!(
            "Expand shape {target:?} is negative"
        ))));
    }
    let target: Vec<usize> = target.iter().map(|&d| d as usize).collect();
    let out_shape = broadcast_shapes(&[&x.shape, &target])?;
    let st = broadcast_strides(&x.shape, &out_shape);
    Ok(vec![gather_view(run, &x, 0, &out_shape, &st)?])
}

fn k_slice(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let x = dev_input(inputs, 0)?;
    let params = (1..5)
        .map(|i| host_i64s(inputs, i))
        .collect::<KResult<Vec<_>>>()?;
    let (base, shape, st) = slice_plan(ctx, &x.shape, params)?;
    let st: Vec<i64> = st.iter().map(|&s| s as i64).collect();
    Ok(vec![gather_view(run, &x, base as i64, &shape, &st)?])
}

fn k_concat(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let mut parts = Vec::new();
    for i in 0..inputs.len() {
        if let Some(t) = inputs.dev(i)? {
            parts.push(t);
        }
    }
    let Some(first) = parts.first() else {
        return Err(KError::Op(OpError::Invalid("Concat needs inputs".into())));
    };
    let r = first.shape.len();
    if r == 0 {
        decline!("Concat of scalars");
    }
    let axis = norm_axis(ctx.req_i("axis")?, r)?;
    let mut out_shape = first.shape.clone();
    out_shape[axis] = 0;
    for p in &parts {
        let same_rest = p.shape.len() == r
            && (0..r).all(|d| d == axis || p.shape[d] == first.shape[d])
            && p.dtype == first.dtype;
        if !same_rest {
            return Err(KError::Op(OpError::Invalid(format!(
                "Concat inputs {:?} and {:?} ({} and {}) differ off axis {axis}",
                first.shape, p.shape, first.dtype, p.dtype
            ))));
        }
        out_shape[axis] += p.shape[axis];
    }
    let out = run.alloc(first.dtype, &out_shape)?;
    let ost = contiguous(&out_shape);
    let mut at = 0i64;
    for p in &parts {
        strided_copy(
            run,
            &out,
            at * ost[axis],
            &ost,
            p,
            0,
            &contiguous(&p.shape),
            &p.shape,
        )?;
        at += p.shape[axis] as i64;
    }
    Ok(vec![out])
}

fn k_split(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let x = dev_input(inputs, 0)?;
    let given = if inputs.present(1) {
        host_i64s(inputs, 1)?
    } else {
        None
    };
    let (axis, sizes) = split_plan(ctx, &x.shape, given)?;
    let st = contiguous(&x.shape);
    let mut start = 0i64;
    let mut outs = Vec::new();
    for &s in &sizes {
        let mut shape = x.shape.clone();
        shape[axis] = s as usize;
        outs.push(gather_view(run, &x, start * st[axis], &shape, &st)?);
        start += s;
    }
    Ok(outs)
}

fn k_tile(_: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let x = dev_input(inputs, 0)?;
    let Some(reps) = host_i64s(inputs, 1)? else {
        return Err(KError::Op(OpError::Invalid("Tile needs repeats".into())));
    };
    if reps.len() != x.shape.len() || reps.iter().any(|&r| r < 0) {
        return Err(KError::Op(OpError::Invalid(format!(
            "Tile repeats {reps:?} for shape {:?}",
            x.shape
        ))));
    }
    // The output viewed as [r0, d0, r1, d1, ...] reads the input with stride 0 along each r.
    let st = contiguous(&x.shape);
    let mut view = Vec::new();
    let mut vst = Vec::new();
    for (d, &r) in reps.iter().enumerate() {
        view.extend([r as usize, x.shape[d]]);
        vst.extend([0, st[d]]);
    }
    let out_shape: Vec<usize> = x
        .shape
        .iter()
        .zip(&reps)
        .map(|(&d, &r)| d * r as usize)
        .collect();
    let out = gather_view(run, &x, 0, &view, &vst)?;
    Ok(vec![out.view(out_shape)])
}

fn k_space_depth(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let x = dev_input(inputs, 0)?;
    let b = ctx.req_i("blocksize")?;
    let &[n, c, h, w] = x.shape.as_slice() else {
        return Err(KError::Op(OpError::Invalid(format!(
            "{} takes a 4-D input, got {:?}",
            ctx.node.op_type, x.shape
        ))));
    };
    if b <= 0 || b > 1 << 16 {
        return Err(KError::Op(OpError::Invalid(format!("blocksize {b}"))));
    }
    let b = b as usize;
    let (view, perm, out): (Vec<usize>, [usize; 6], Vec<usize>) =
        if ctx.node.op_type == "DepthToSpace" {
            if c % (b * b) != 0 {
                return Err(KError::Op(OpError::Invalid(format!(
                    "channels {c} not divisible by blocksize² {}",
                    b * b
                ))));
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
                return Err(KError::Op(OpError::Invalid(format!(
                    "spatial dims {h}×{w} not divisible by blocksize {b}"
                ))));
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
    let sst: Vec<i64> = perm.iter().map(|&a| vst[a]).collect();
    let y = gather_view(run, &x, 0, &shape, &sst)?;
    Ok(vec![y.view(out)])
}

fn k_pad(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let x = dev_input(inputs, 0)?;
    let r = x.shape.len();
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
        let axes = if inputs.present(3) {
            host_i64s(inputs, 3)?
        } else {
            None
        };
        (pads, value, axes)
    };
    let axes: Vec<usize> = match axes {
        Some(a) => a
            .iter()
            .map(|&v| norm_axis(v, r))
            .collect::<Result<_, _>>()?,
        None => (0..r).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return Err(KError::Op(OpError::Invalid(format!(
            "Pad has {} pads for {} axes",
            pads.len(),
            axes.len()
        ))));
    }
    let mut begin = vec![0i64; r];
    let mut end = vec![0i64; r];
    for (i, &a) in axes.iter().enumerate() {
        begin[a] = pads[i];
        end[a] = pads[i + axes.len()];
    }
    let mut out_shape = Vec::with_capacity(r);
    for d in 0..r {
        let v = x.shape[d] as i64 + begin[d] + end[d];
        if v < 0 {
            return Err(KError::Op(OpError::Invalid(format!(
                "Pad makes axis {d} negative ({v})"
            ))));
        }
        out_shape.push(v as usize);
    }
    if mode != "constant"
        && x.shape
            .iter()
            .zip(&out_shape)
            .any(|(&i, &o)| i == 0 && o > 0)
    {
        return Err(KError::Op(OpError::Invalid(format!(
            "Pad mode {mode} of an empty axis"
        ))));
    }
    let n = require_u32_len(&out_shape)?;
    let out = run.alloc(x.dtype, &out_shape)?;
    if n == 0 {
        return Ok(vec![out]);
    }
    if !fits_i32(&x.shape, &contiguous(&x.shape), 0)
        || begin.iter().any(|&b| i32::try_from(b).is_err())
    {
        decline!("Pad input or pads beyond 32-bit indexing");
    }
    let (ty, size) = elem_ty(&x)?;
    // The constant as the element type's bits.
    let cvalue = Tensor::from_f64s(x.dtype, &[1], vec![value])?;
    let cbits =
        tensor_bytes(&cvalue).ok_or_else(|| KError::Decline(format!("Pad of {}", x.dtype)))?;
    let mut word = [0u8; 8];
    word[..cbits.len()].copy_from_slice(&cbits);
    let cval = u64::from_le_bytes(word);
    let ist = contiguous(&x.shape);

    let mut k = Kernel::new("pad");
    let op = k.param_ptr("out");
    let xp = k.param_ptr("x");
    let n_r = k.param("n", Ty::U32);
    let i = thread_index(&mut k, n_r);
    let mut rest = i;
    let src = k.mov(Ty::S32, 0i32);
    let zero = k.mov(Ty::U32, 0u32);
    let inside = k.setp(Cmp::Eq, Ty::U32, zero, 0u32);
    let mut src = src;
    let mut inside = inside;
    for d in (0..r).rev() {
        let dim = out_shape[d] as u32;
        let c = k.rem(Ty::U32, rest, dim);
        rest = k.div(Ty::U32, rest, dim);
        let c = k.bitcast(Ty::S32, c);
        let s = k.sub(Ty::S32, c, begin[d] as i32);
        let id = x.shape[d] as i32;
        let s = match mode.as_str() {
            "constant" => {
                let ge = k.setp(Cmp::Ge, Ty::S32, s, 0i32);
                let lt = k.setp(Cmp::Lt, Ty::S32, s, id);
                let ok = k.pred_and(ge, lt);
                inside = k.pred_and(inside, ok);
                s
            }
            "edge" => {
                let s = k.max(Ty::S32, s, 0i32);
                k.min(Ty::S32, s, id - 1)
            }
            "wrap" => {
                let m = k.rem(Ty::S32, s, id);
                let mp = k.add(Ty::S32, m, id);
                k.rem(Ty::S32, mp, id)
            }
            "reflect" => {
                if id == 1 {
                    k.mov(Ty::S32, 0i32)
                } else {
                    let period = 2 * (id - 1);
                    let a = k.unary("abs", Ty::S32, s);
                    let m = k.rem(Ty::S32, a, period);
                    let back = k.sub(Ty::S32, period, m);
                    let over = k.setp(Cmp::Ge, Ty::S32, m, id);
                    k.selp(Ty::S32, back, m, over)
                }
            }
            other => {
                return Err(KError::Op(OpError::Invalid(format!(
                    "Pad mode '{other}' is not an ONNX mode"
                ))));
            }
        };
        src = k.fma(Ty::S32, s, ist[d] as i32, src);
    }
    let oa = k.addr(op, i, size);
    let cv = k.mov(ty, Op::I(cval as i64));
    let v = k.mov(ty, Op::I(0));
    k.assign(v, Op::R(cv));
    k.when(inside, |k| {
        let sa = k.addr(xp, src, size);
        let loaded = k.ld_nc(ty, sa, 0);
        k.assign(v, Op::R(loaded));
    });
    store_bits(&mut k, ty, oa, v);
    let ptx = module(run.cc(), &[k]);
    run.launch(
        &ptx,
        "pad",
        (blocks(n as usize, 256), 1, 1),
        (256, 1, 1),
        0,
        &[Arg::Ptr(out.ptr()), Arg::Ptr(x.ptr()), Arg::U32(n)],
    )?;
    Ok(vec![out])
}

fn k_gather(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let x = dev_input(inputs, 0)?;
    let r = x.shape.len();
    if r == 0 {
        return Err(KError::Op(OpError::Invalid("Gather on a scalar".into())));
    }
    let axis = norm_axis(ctx.attr_i("axis", 0)?, r)?;
    let dim = x.shape[axis] as i64;
    let ishape = inputs
        .shape(1)
        .ok_or_else(|| KError::Op(OpError::Invalid("Gather needs indices".into())))?;
    let inner: usize = x.shape[axis + 1..].iter().product();
    let mut out_shape = x.shape[..axis].to_vec();
    out_shape.extend(&ishape);
    out_shape.extend(&x.shape[axis + 1..]);
    let ni: usize = ishape.iter().product();
    // Indices fixed for the session (a weight, shape arithmetic) are checked on the host, free of
    // cost. Others (a run input, a device value) are checked by the kernel itself: reading them on
    // the host would stall the stream on a device value and stop a graph capture on a run input
    // (BERT's token ids). A bad index then reads element 0 instead and raises the run's fault word.
    let on_device = !inputs.fixed(1);
    let (itensor, ity, isize) = if on_device {
        let itensor = dev_input(inputs, 1)?;
        let (ity, isize) = match itensor.dtype {
            DType::I64 => (Ty::S64, 8),
            DType::I32 => (Ty::S32, 4),
            d => decline!("Gather indices of {d}"),
        };
        if dim == 0 && ni > 0 {
            decline!("Gather from an empty axis: every index is out of range");
        }
        (itensor, ity, isize)
    } else {
        let idx = host_i64s(inputs, 1)?
            .ok_or_else(|| KError::Op(OpError::Invalid("Gather needs indices".into())))?;
        if let Some(&bad) = idx.iter().find(|&&v| v < -dim || v >= dim) {
            return Err(KError::Op(OpError::Invalid(format!(
                "Gather index {bad} is out of range for axis {axis} of size {dim}"
            ))));
        }
        let norm: Vec<i64> = idx
            .iter()
            .map(|&v| if v < 0 { v + dim } else { v })
            .collect();
        let t = run.upload(&Tensor::from_i64(&[norm.len()], norm)?)?;
        (t, Ty::S64, 8)
    };
    let n = require_u32_len(&out_shape)?;
    let out = run.alloc(x.dtype, &out_shape)?;
    if n == 0 {
        return Ok(vec![out]);
    }
    require_u32_len(&x.shape)?;
    let word = if on_device {
        Some(run.fault_word()?)
    } else {
        None
    };
    let (ty, size) = elem_ty(&x)?;
    let mut k = Kernel::new("gather");
    let op = k.param_ptr("out");
    let xp = k.param_ptr("x");
    let ip = k.param_ptr("idx");
    let fp = k.param_ptr("fault");
    let n_r = k.param("n", Ty::U32);
    let i = thread_index(&mut k, n_r);
    let inn = k.rem(Ty::U32, i, inner as u32);
    let q = k.div(Ty::U32, i, inner as u32);
    let j = k.rem(Ty::U32, q, ni as u32);
    let o = k.div(Ty::U32, q, ni as u32);
    let ia = k.addr(ip, j, isize);
    let raw = k.ld_nc(ity, ia, 0);
    let iv = if on_device {
        // Normalise a negative index, then check it; out of range: element 0, fault raised.
        let raw = if ity == Ty::S32 {
            k.cvt(Ty::S64, Ty::S32, "", raw)
        } else {
            raw
        };
        let neg = k.setp(Cmp::Lt, Ty::S64, raw, 0i64);
        let up = k.add(Ty::S64, raw, dim);
        let norm = k.selp(Ty::S64, up, raw, neg);
        let norm = k.bitcast(Ty::U64, norm);
        let ok = k.setp(Cmp::Lt, Ty::U64, norm, dim);
        let skip = k.new_label("in_range");
        k.bra_if(ok, false, &skip);
        k.st(Space::Global, fp, 0, 1u32);
        k.label(&skip);
        let safe = k.selp(Ty::U64, norm, 0i64, ok);
        k.cvt(Ty::U32, Ty::U64, "", safe)
    } else {
        k.cvt(Ty::U32, Ty::S64, "", raw)
    };
    let row = k.fma(Ty::U32, o, dim as u32, iv);
    let src = k.fma(Ty::U32, row, inner as u32, inn);
    let sa = k.addr(xp, src, size);
    let v = k.ld_nc(ty, sa, 0);
    let oa = k.addr(op, i, size);
    store_bits(&mut k, ty, oa, v);
    let ptx = module(run.cc(), &[k]);
    run.launch(
        &ptx,
        "gather",
        (blocks(n as usize, 256), 1, 1),
        (256, 1, 1),
        0,
        &[
            Arg::Ptr(out.ptr()),
            Arg::Ptr(x.ptr()),
            Arg::Ptr(itensor.ptr()),
            Arg::Ptr(word.as_ref().map_or(0, |w| w.ptr())),
            Arg::U32(n),
        ],
    )?;
    if let Some(w) = word {
        let fault = Fault {
            node: ctx.node.name.clone(),
            op: ctx.node.op_type.clone(),
            shapes: format!("[{}{:?}, {}{:?}]", x.dtype, x.shape, itensor.dtype, ishape),
            msg: format!(
                "a Gather index is out of range for axis {axis} of size {dim} (checked on the device)"
            ),
        };
        run.check_fault(w, fault)?;
    }
    Ok(vec![out])
}

/// ConstantOfShape of a 4-byte value: the driver's 32-bit fill, no kernel and no upload (light models
/// build their weights this way).
fn k_constant_of_shape(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let shape = inputs
        .host(0)?
        .ok_or_else(|| KError::Op(OpError::Invalid("ConstantOfShape needs a shape".into())))?;
    let Some(shape) = shape.as_tensor() else {
        return Err(KError::Op(OpError::Invalid(
            "ConstantOfShape shape must be a tensor".into(),
        )));
    };
    let (shape, value) = constant_of_shape_plan(ctx, shape)?;
    Ok(vec![fill(run, &value, &shape)?])
}

/// A new tensor of `shape` with every element equal to `value` (one element), by a 32-bit device fill
/// of the value's bytes repeated: 1-, 2- and 4-byte values. Pool size classes are multiples of 4
/// bytes, so the last partial word stays inside the allocation (checked).
fn fill(run: &Run, value: &Tensor, shape: &[usize]) -> KResult<DevTensor> {
    let bytes = tensor_bytes(value)
        .ok_or_else(|| KError::Decline(format!("a device fill of {}", value.dtype())))?;
    let word = match *bytes {
        [b] => u32::from(b) * 0x0101_0101,
        [lo, hi] => u32::from(u16::from_le_bytes([lo, hi])) * 0x0001_0001,
        [a, b, c, d] => u32::from_le_bytes([a, b, c, d]),
        _ => decline!("a device fill of {} (8-byte values)", value.dtype()),
    };
    let out = run.alloc(value.dtype(), shape)?;
    let words = (out.len() * bytes.len()).div_ceil(4);
    if words * 4 > out.buf.bytes() {
        decline!("a device fill past its allocation");
    }
    if words > 0 {
        run.fill32(&out, word, words)?;
    }
    Ok(out)
}
