//! WGSL kernels: Softmax, LogSoftmax and Hardmax over the lanes the CPU's `softmax::lanes` gives
//! (opset 13's single axis, or the older flatten at `axis`): the largest element (NaN wins), then
//! the exponentials' sum in f64 (`math`), each output rounded once. Hardmax marks the first largest
//! element (the first NaN where there is one).
//!
//! Lanes of [`WIDE_LANE`] elements or more (a classifier's 1000 logits, attention rows) take a
//! workgroup each: its threads stride over the lane for the maximum and the sum, combined through
//! workgroup memory, then write the outputs. Shorter lanes, and Hardmax, take a thread each. A
//! classifier's one 1000-element lane on one thread took 0.69 ms on the H200.
use super::{WgpuKernel, dev, require_f64, u32_len};
use crate::memory::WTensor;
use crate::run::{KResult, Run};
use crate::wgsl;
use quorum_core::backend::NodeInputs;
use quorum_core::ir::Node;
use quorum_core::ops::OpCtx;

pub fn claim(_node: &Node) -> Option<Result<WgpuKernel, String>> {
    Some(Ok(k_softmax as WgpuKernel))
}

fn k_softmax(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let op = ctx.node.op_type.as_str();
    let x = dev(inputs, 0)?;
    let d = super::matmul::float_dtype(op, &[&x])?;
    let (outer, n, inner) = quorum_core::ops::softmax::lanes(ctx, &x.shape)?;
    u32_len(&x.shape)?;
    super::loop_budget(run, op, 3 * n)?;
    let y = run.alloc(d, &x.shape)?;
    let lanes = outer * inner;
    if lanes == 0 || n == 0 {
        return Ok(vec![y]);
    }
    if op != "Hardmax" && n >= WIDE_LANE {
        return wide(op, run, &x, y, d, [lanes, n, inner]);
    }
    let v = |j: &str| wgsl::load(d, &format!("i0[base + ({j}) * inner]"));
    let max = format!(
        "var mx = {first}; var at_ = 0u;\n\
         for (var j = 1u; j < n; j = j + 1u) {{ let v = {vj}; if (!isnan32(mx) && (isnan32(v) || v > mx)) {{ mx = v; at_ = j; }} }}\n",
        first = v("0u"),
        vj = v("j"),
    );
    let rest = if op == "Hardmax" {
        format!(
            "for (var j = 0u; j < n; j = j + 1u) {{ o0[base + j * inner] = {}; }}\n",
            wgsl::store(d, "select(0.0, 1.0, j == at_)")
        )
    } else {
        require_f64(run, op)?;
        let out = if op == "Softmax" {
            "exp64(f64(v) - m) / s"
        } else {
            "(f64(v) - m) - log64(s)"
        };
        format!(
            "let m = f64(mx);\nvar s = 0.0lf;\n\
             for (var j = 0u; j < n; j = j + 1u) {{ s = s + exp64(f64({vj}) - m); }}\n\
             for (var j = 0u; j < n; j = j + 1u) {{ let v = {vj}; o0[base + j * inner] = {st}; }}\n",
            vj = v("j"),
            st = wgsl::store(d, &format!("f32({out})"))
        )
    };
    let body = format!(
        "let n = P[1]; let inner = P[2];\nlet base = (i / inner) * n * inner + i % inner;\n{max}{rest}"
    );
    let half = if wgsl::needs_half(&[d]) {
        wgsl::HALF
    } else {
        ""
    };
    let math = if op == "Hardmax" {
        String::new()
    } else {
        super::math::library()
    };
    let src = format!(
        "{}{half}{math}{}",
        wgsl::header(1, 1),
        wgsl::entry_1d(&body)
    );
    run.dispatch_n(
        op,
        &src,
        &[&y],
        &[&x],
        vec![lanes as u32, n as u32, inner as u32],
        lanes,
    )?;
    Ok(vec![y])
}

/// The shortest lane that takes a workgroup of its own.
pub const WIDE_LANE: usize = 32;

/// Softmax or LogSoftmax with a workgroup per lane (see the module doc): the same maximum (NaN
/// wins), the same f64 exponentials, their sum combined in another order (an f64 sum of at most a
/// few thousand positive terms, rounded to f32 once at the end either way).
fn wide(
    op: &str,
    run: &Run,
    x: &WTensor,
    y: WTensor,
    d: quorum_core::tensor::DType,
    [lanes, n, inner]: [usize; 3],
) -> KResult<Vec<WTensor>> {
    require_f64(run, op)?;
    let wg: u32 = if n >= 2048 { 256 } else { 64 };
    super::loop_budget(run, op, 3 * n.div_ceil(wg as usize))?;
    let v = |j: &str| wgsl::load(d, &format!("i0[base + ({j}) * inner]"));
    let out = if op == "Softmax" {
        "exp64(f64(v) - m) / s"
    } else {
        "(f64(v) - m) - log64(s)"
    };
    let half = if wgsl::needs_half(&[d]) {
        wgsl::HALF
    } else {
        ""
    };
    // No thread returns early: every thread reaches every barrier.
    let src = format!(
        "{header}{half}{math}\n\
         var<workgroup> wmax: array<f32, {wg}>;\n\
         var<workgroup> wsum: array<f64, {wg}>;\n\
         fn bigger(a: f32, b: f32) -> f32 {{ if (!isnan32(a) && (isnan32(b) || b > a)) {{ return b; }} return a; }}\n\
         @compute @workgroup_size({wg})\n\
         fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{\n\
         let t = lid.x;\n\
         let lane = wid.x + wid.y * nwg.x;\n\
         let live = lane < P[0];\n\
         let n = select(0u, P[1], live); let inner = max(P[2], 1u);\n\
         let base = (lane / inner) * n * inner + lane % inner;\n\
         var mx = bitcast<f32>(0xff800000u);\n\
         for (var j = t; j < n; j = j + {wg}u) {{ mx = bigger(mx, {vj}); }}\n\
         wmax[t] = mx;\n\
         workgroupBarrier();\n\
         for (var h = {half_wg}u; h > 0u; h = h >> 1u) {{\n\
           if (t < h) {{ wmax[t] = bigger(wmax[t], wmax[t + h]); }}\n\
           workgroupBarrier();\n\
         }}\n\
         let m = f64(wmax[0]);\n\
         var s = 0.0lf;\n\
         for (var j = t; j < n; j = j + {wg}u) {{ s = s + exp64(f64({vj}) - m); }}\n\
         wsum[t] = s;\n\
         workgroupBarrier();\n\
         for (var h = {half_wg}u; h > 0u; h = h >> 1u) {{\n\
           if (t < h) {{ wsum[t] = wsum[t] + wsum[t + h]; }}\n\
           workgroupBarrier();\n\
         }}\n\
         s = wsum[0];\n\
         for (var j = t; j < n; j = j + {wg}u) {{ let v = {vj}; o0[base + j * inner] = {st}; }}\n\
         }}\n",
        header = wgsl::header(1, 1),
        math = super::math::library(),
        half_wg = wg / 2,
        vj = v("j"),
        st = wgsl::store(d, &format!("f32({out})")),
    );
    let max = run.device.limits.max_compute_workgroups_per_dimension as usize;
    let gx = lanes.min(max);
    let gy = lanes.div_ceil(gx);
    if gy > max {
        super::decline!("{lanes} lanes exceed the adapter's dispatch limits");
    }
    run.dispatch(
        &format!("{op}_wide"),
        &src,
        &[&y],
        &[x],
        vec![lanes as u32, n as u32, inner as u32],
        [gx as u32, gy as u32, 1],
    )?;
    Ok(vec![y])
}
