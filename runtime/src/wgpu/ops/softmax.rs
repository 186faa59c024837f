//! WGSL kernels: Softmax, LogSoftmax and Hardmax over the lanes the CPU's `softmax::lanes` gives
//! (opset 13's single axis, or the older flatten at `axis`). One thread per lane: the largest
//! element (NaN wins), then the exponentials' sum in f64 (`math`), each output rounded once.
//! Hardmax marks the first largest element (the first NaN where there is one).
use super::{WgpuKernel, dev, require_f64, u32_len};
use crate::backend::NodeInputs;
use crate::ir::Node;
use crate::ops::OpCtx;
use crate::wgpu::memory::WTensor;
use crate::wgpu::run::{KResult, Run};
use crate::wgpu::wgsl;

/// Op types this family claims in at least one form.
pub const OPS: &[&str] = &["Softmax", "LogSoftmax", "Hardmax"];

pub fn claim(node: &Node) -> Option<Result<WgpuKernel, String>> {
    OPS.contains(&node.op_type.as_str())
        .then_some(Ok(k_softmax as WgpuKernel))
}

fn k_softmax(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let op = ctx.node.op_type.as_str();
    let x = dev(inputs, 0)?;
    let d = super::matmul::float_dtype(op, &[&x])?;
    let (outer, n, inner) = crate::ops::softmax::lanes(ctx, &x.shape)?;
    u32_len(&x.shape)?;
    super::loop_budget(run, op, 3 * n)?;
    let y = run.alloc(d, &x.shape)?;
    let lanes = outer * inner;
    if lanes == 0 || n == 0 {
        return Ok(vec![y]);
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
