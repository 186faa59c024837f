//! WGSL kernels of data movement that index: Pad (constant, edge, wrap, reflect) and Gather. The
//! pad and axis rules are the CPU's; Gather's indices are checked on the host first, so an
//! out-of-range index is the CPU's error, never a wild read.
use super::{WgpuKernel, decline, dev, host_i64s, invalid, strides, u32_len};
use crate::memory::{WTensor, encode, words};
use crate::run::{KResult, Run};
use crate::wgsl;
use quorum_core::backend::{DeviceError, NodeInputs};
use quorum_core::device::movement::{GatherPlan, PadMode, PadPlan, gather_plan, pad_plan};
use quorum_core::ir::Node;
use quorum_core::ops::OpCtx;
use quorum_core::tensor::Tensor;

pub fn claim(node: &Node) -> Option<Result<WgpuKernel, String>> {
    match node.op_type.as_str() {
        "Pad" => Some(Ok(k_pad as WgpuKernel)),
        "Gather" => Some(Ok(k_gather as WgpuKernel)),
        _ => None,
    }
}

fn k_pad(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let x = dev(inputs, 0)?;
    let r = x.shape.len();
    let PadPlan {
        mode,
        begin,
        end,
        out_shape,
        value,
    } = pad_plan(ctx, &x.shape, inputs)?;
    let rule = match mode {
        PadMode::Constant => "if (s < 0i || s >= id) { inside = false; }",
        PadMode::Edge => "s = clamp(s, 0i, id - 1i);",
        PadMode::Wrap => "s = ((s % id) + id) % id;",
        PadMode::Reflect => {
            "if (id == 1i) { s = 0i; } else { let per = 2i * (id - 1i); let m = abs(s) % per; s = select(m, per - m, m >= id); }"
        }
    };
    let n = u32_len(&out_shape)?;
    u32_len(&x.shape)?;
    let out = run.alloc(x.dtype, &out_shape)?;
    if n == 0 {
        return Ok(vec![out]);
    }
    if begin.iter().chain(&end).any(|&b| i32::try_from(b).is_err()) {
        decline!("pads beyond 32-bit indexing");
    }
    let w = words(x.dtype).ok_or_else(|| DeviceError::Decline(format!("Pad of {}", x.dtype)))?;
    let cw = encode(&Tensor::from_f64s(x.dtype, &[1], vec![value])?)
        .ok_or_else(|| DeviceError::Decline(format!("Pad of {}", x.dtype)))?;
    let cw: Vec<u32> = cw
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    // P: n, rank, constant words (2), then per dim: out dim, in dim, begin, in stride.
    let body = format!(
        "let rank = P[1];\nvar rest = i;\nvar src = 0i;\nvar inside = true;\n\
         for (var k = 0u; k < rank; k = k + 1u) {{\n  let d = rank - 1u - k;\n  let q = 4u + d * 4u;\n\
           let c = i32(rest % P[q]);\n  rest = rest / P[q];\n  let id = i32(P[q + 1u]);\n\
           var s = c - bitcast<i32>(P[q + 2u]);\n  {rule}\n  src = src + s * i32(P[q + 3u]);\n}}\n\
         for (var k = 0u; k < {w}u; k = k + 1u) {{\n\
           o0[i * {w}u + k] = select(P[2u + k], i0[u32(src) * {w}u + k], inside);\n}}\n"
    );
    let src = format!("{}{}", wgsl::header(1, 1), wgsl::entry_1d(&body));
    let ist = strides(&x.shape);
    let mut params = vec![n, r as u32, cw[0], cw.get(1).copied().unwrap_or(0)];
    for d in 0..r {
        params.extend([
            out_shape[d] as u32,
            x.shape[d] as u32,
            begin[d] as i32 as u32,
            ist[d] as u32,
        ]);
    }
    run.dispatch_n("pad", &src, &[&out], &[&x], params, n as usize)?;
    Ok(vec![out])
}

fn k_gather(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let x = dev(inputs, 0)?;
    let ishape = inputs
        .shape(1)
        .ok_or_else(|| invalid("Gather needs indices"))?;
    let plan = gather_plan(ctx, &x.shape, &ishape)?;
    let idx = host_i64s(inputs, 1)?.ok_or_else(|| invalid("Gather needs indices"))?;
    let idx = plan.host_indices(&idx)?;
    let GatherPlan {
        dim,
        inner,
        out_shape,
        ..
    } = plan;
    let norm: Vec<u32> = idx.iter().map(|&v| v as u32).collect();
    let ni = norm.len();
    let itensor = run.upload(&Tensor::U32(
        ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[ni]), norm)
            .map_err(|e| invalid(e.to_string()))?,
    ))?;
    let n = u32_len(&out_shape)?;
    let out = run.alloc(x.dtype, &out_shape)?;
    if n == 0 {
        return Ok(vec![out]);
    }
    u32_len(&x.shape)?;
    let w = words(x.dtype).ok_or_else(|| DeviceError::Decline(format!("Gather of {}", x.dtype)))?;
    let body = format!(
        "let inner = P[1]; let ni = P[2]; let dim = P[3];\n\
         let inn = i % inner; let q = i / inner; let j = q % ni; let o = q / ni;\n\
         let s = (o * dim + i1[j]) * inner + inn;\n\
         for (var k = 0u; k < {w}u; k = k + 1u) {{ o0[i * {w}u + k] = i0[s * {w}u + k]; }}\n"
    );
    let src = format!("{}{}", wgsl::header(1, 2), wgsl::entry_1d(&body));
    run.dispatch_n(
        "gather",
        &src,
        &[&out],
        &[&x, &itensor],
        vec![n, inner as u32, ni as u32, dim as u32],
        n as usize,
    )?;
    run.release(itensor);
    Ok(vec![out])
}
