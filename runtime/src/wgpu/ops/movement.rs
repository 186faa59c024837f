//! WGSL kernels: data movement. Views (Reshape, Flatten, Squeeze, Unsqueeze, Identity, inference
//! Dropout) dispatch nothing: the output shares the input's buffer. Transpose, Expand, Slice, Concat,
//! Split, Tile, DepthToSpace and SpaceToDepth are one strided-copy kernel with different strides
//! (the shape rules are the CPU's: `slice_plan`, `split_plan`, `view_shape`); ConstantOfShape is a
//! fill. Elements move as their words, so every device dtype works.
use super::{
    WgpuKernel, broadcast_strides, decline, dev, dev_opt, host_i64s, invalid, offsets_code,
    offsets_params, simplify, strides, u32_len,
};
use crate::backend::NodeInputs;
use crate::ir::Node;
use crate::ops::broadcast::broadcast_shapes;
use crate::ops::data::{slice_plan, split_plan};
use crate::ops::shape::{constant_of_shape_plan, view_shape};
use crate::ops::{OpCtx, norm_axis};
use crate::tensor::{DType, Tensor, Value};
use crate::wgpu::memory::{WTensor, encode, words};
use crate::wgpu::run::{KResult, Run};
use crate::wgpu::wgsl;

pub fn claim(node: &Node) -> Option<Result<WgpuKernel, String>> {
    let k: WgpuKernel = match node.op_type.as_str() {
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
        "ConstantOfShape" => k_constant_of_shape,
        _ => return None,
    };
    Some(Ok(k))
}

fn elem_words(t: &WTensor) -> KResult<usize> {
    words(t.dtype).ok_or_else(|| {
        crate::backend::DeviceError::Decline(format!("{} values stay on the host", t.dtype))
    })
}

fn contiguous(shape: &[usize]) -> Vec<i64> {
    strides(shape).into_iter().map(|s| s as i64).collect()
}

fn fits_i32(shape: &[usize], strides: &[i64], base: i64) -> bool {
    let reach: i64 = shape
        .iter()
        .zip(strides)
        .map(|(&d, &s)| (d.saturating_sub(1) as i64).saturating_mul(s.abs()))
        .fold(base.abs(), i64::saturating_add);
    reach < i32::MAX as i64 / 2
}

/// Copies `shape` elements: destination element `dst_base + Σ c·dst_strides`, source element
/// `src_base + Σ c·src_strides`, for every coordinate `c` of `shape`.
#[allow(clippy::too_many_arguments)]
pub fn strided_copy(
    run: &Run,
    dst: &WTensor,
    dst_base: i64,
    dst_strides: &[i64],
    src: &WTensor,
    src_base: i64,
    src_strides: &[i64],
    shape: &[usize],
) -> KResult<()> {
    let n = u32_len(shape)?;
    if n == 0 {
        return Ok(());
    }
    if !fits_i32(shape, src_strides, src_base) || !fits_i32(shape, dst_strides, dst_base) {
        decline!("offsets beyond 32-bit indexing");
    }
    let w = elem_words(src)?;
    let (shape, st) = simplify(shape, &[dst_strides.to_vec(), src_strides.to_vec()]);
    let body = format!(
        "{}let d = (P[2] + off0) * {w}u;\nlet s = (P[3] + off1) * {w}u;\nfor (var k = 0u; k < {w}u; k = k + 1u) {{ o0[d + k] = i0[s + k]; }}\n",
        offsets_code(2, 4, shape.len())
    );
    let p = offsets_params(n, &shape, &st);
    let mut params = vec![p[0], p[1], dst_base as i32 as u32, src_base as i32 as u32];
    params.extend_from_slice(&p[2..]);
    // Generated for this geometry: the coordinate walk divides by constants.
    let body = wgsl::inline_params(&body, &params, 1);
    let src_text = format!("{}{}", wgsl::header(1, 1), wgsl::entry_1d(&body));
    run.dispatch_n("copy", &src_text, &[dst], &[src], params, n as usize)
}

/// Copies every element of `src` into `dst` (same element count and dtype).
pub fn copy(run: &Run, src: &WTensor, dst: &WTensor) -> KResult<()> {
    let shape = [src.len()];
    strided_copy(run, dst, 0, &[1], src, 0, &[1], &shape)
}

/// A new tensor holding `src` read through (base, shape, strides).
pub fn gather_view(
    run: &Run,
    src: &WTensor,
    base: i64,
    shape: &[usize],
    src_strides: &[i64],
) -> KResult<WTensor> {
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

fn k_view(ctx: &OpCtx, _: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let x = dev(inputs, 0)?;
    let param = if inputs.present(1) {
        host_i64s(inputs, 1)?
    } else {
        None
    };
    let shape = view_shape(ctx, &x.shape, param)?;
    if shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)) != Some(x.len()) {
        return Err(invalid(format!("cannot view {:?} as {shape:?}", x.shape)));
    }
    Ok(vec![x.view(shape)])
}

fn k_identity(_: &OpCtx, _: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    Ok(vec![dev(inputs, 0)?])
}

/// Inference-mode Dropout is the identity; its mask keeps every element (a fill). A random mask
/// (training mode) stays on the CPU.
fn k_dropout(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let scalar = |i: usize| -> KResult<Option<std::sync::Arc<Value>>> {
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
    let x = dev(inputs, 0)?;
    if !ctx.node.outputs.get(1).is_some_and(|m| !m.is_empty()) {
        return Ok(vec![x]);
    }
    let dtype = if ctx.opset() >= 10 {
        DType::Bool
    } else {
        x.dtype
    };
    let one = Tensor::from_f64s(dtype, &[], vec![1.0])?;
    let mask = fill(run, &one, &x.shape)?;
    Ok(vec![x, mask])
}

fn k_transpose(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let x = dev(inputs, 0)?;
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
        return Err(invalid(format!(
            "perm {perm:?} is not a permutation of {r} axes"
        )));
    }
    let st = contiguous(&x.shape);
    let shape: Vec<usize> = perm.iter().map(|&a| x.shape[a]).collect();
    let sst: Vec<i64> = perm.iter().map(|&a| st[a]).collect();
    Ok(vec![gather_view(run, &x, 0, &shape, &sst)?])
}

fn k_expand(_: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let x = dev(inputs, 0)?;
    let Some(target) = host_i64s(inputs, 1)? else {
        return Err(invalid("Expand needs a shape"));
    };
    if target.iter().any(|&d| d < 0) {
        return Err(invalid(format!("Expand shape {target:?} is negative")));
    }
    let target: Vec<usize> = target.iter().map(|&d| d as usize).collect();
    let out_shape = broadcast_shapes(&[&x.shape, &target])?;
    let st = broadcast_strides(&x.shape, &out_shape);
    Ok(vec![gather_view(run, &x, 0, &out_shape, &st)?])
}

fn k_slice(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let x = dev(inputs, 0)?;
    let params = (1..5)
        .map(|i| host_i64s(inputs, i))
        .collect::<KResult<Vec<_>>>()?;
    let (base, shape, st) = slice_plan(ctx, &x.shape, params)?;
    let st: Vec<i64> = st.iter().map(|&s| s as i64).collect();
    Ok(vec![gather_view(run, &x, base as i64, &shape, &st)?])
}

fn k_concat(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let mut parts = Vec::new();
    for i in 0..inputs.len() {
        if let Some(t) = dev_opt(inputs, i)? {
            parts.push(t);
        }
    }
    let Some(first) = parts.first() else {
        return Err(invalid("Concat needs inputs"));
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
            return Err(invalid(format!(
                "Concat inputs {:?} and {:?} ({} and {}) differ off axis {axis}",
                first.shape, p.shape, first.dtype, p.dtype
            )));
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

fn k_split(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let x = dev(inputs, 0)?;
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

fn k_tile(_: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let x = dev(inputs, 0)?;
    let Some(reps) = host_i64s(inputs, 1)? else {
        return Err(invalid("Tile needs repeats"));
    };
    if reps.len() != x.shape.len() || reps.iter().any(|&r| r < 0) {
        return Err(invalid(format!(
            "Tile repeats {reps:?} for shape {:?}",
            x.shape
        )));
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

fn k_space_depth(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let x = dev(inputs, 0)?;
    let b = ctx.req_i("blocksize")?;
    let &[n, c, h, w] = x.shape.as_slice() else {
        return Err(invalid(format!(
            "{} takes a 4-D input, got {:?}",
            ctx.node.op_type, x.shape
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

fn k_constant_of_shape(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let shape = inputs
        .host(0)?
        .ok_or_else(|| invalid("ConstantOfShape needs a shape"))?;
    let Some(shape) = shape.as_tensor() else {
        return Err(invalid("ConstantOfShape shape must be a tensor"));
    };
    let (shape, value) = constant_of_shape_plan(ctx, shape)?;
    Ok(vec![fill(run, &value, &shape)?])
}

/// A new tensor of `shape` with every element equal to `value` (one element), its words repeated.
pub fn fill(run: &Run, value: &Tensor, shape: &[usize]) -> KResult<WTensor> {
    let bytes = encode(value).ok_or_else(|| {
        crate::backend::DeviceError::Decline(format!("a fill of {}", value.dtype()))
    })?;
    let ws: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let out = run.alloc(value.dtype(), shape)?;
    let n = out.len() * ws.len();
    if n == 0 {
        return Ok(out);
    }
    let w = ws.len();
    let src = format!(
        "{}{}",
        wgsl::header(1, 0),
        wgsl::entry_1d(&format!("o0[i] = P[1u + i % {w}u];"))
    );
    let mut params = vec![n as u32];
    params.extend(ws);
    run.dispatch_n("fill_value", &src, &[&out], &[], params, n)?;
    Ok(out)
}
