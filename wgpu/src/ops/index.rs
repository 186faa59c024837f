//! WGSL kernels: index-driven data movement and generators (GatherElements, ScatterElements,
//! OneHot, Trilu, Range, CumSum), on the CUDA backend's plan.
//!
//! GatherElements and ScatterElements take their flat data offsets from the CPU's own
//! `element_offsets` (indices read and validated on the host, so a bad index is an error and never a
//! wild access), uploaded as 32-bit words. ScatterElements copies the data, then runs one thread
//! per line of the indices along the axis, applying that line's updates in index order: two updates
//! can only meet on one output element when they lie on the same line, so the result is the CPU's,
//! in order, bit for bit. OneHot takes each index's position from the CPU's `one_hot_pos`, Range its
//! count from `range_plan`; Trilu is a masked copy. Data moves as raw words (one or two per
//! element, `crate::memory`), so every device dtype works except where arithmetic is done
//! (scatter reductions, Range).
use super::{WgpuKernel, decline, dev, invalid, require_f64, u32_len};
use crate::memory::{WTensor, words};
use crate::run::{KResult, Run};
use crate::wgsl;
use quorum_core::backend::NodeInputs;
use quorum_core::device::index::{
    ScatterLines, cumsum_plan, gather_elements_plan, one_hot_lines, scatter_elements_lines,
    scatter_nd_lines, trilu_k, trilu_plan,
};
use quorum_core::index_kernel;
use quorum_core::ir::Node;
use quorum_core::ops::OpCtx;
use quorum_core::ops::data::index::Reduction;
use quorum_core::ops::shape::{RangePlan, range_plan};
use quorum_core::tensor::{DType, Tensor, Value};

/// The longest line of in-order scatter updates one thread applies; longer lines run on the CPU.
const MAX_SERIAL: usize = 8192;

pub fn claim(node: &Node) -> Option<Result<WgpuKernel, String>> {
    index_kernel!(node.op_type.as_str(), WgpuKernel).map(Ok)
}

/// Input `i` read on the host, as a tensor.
fn host_tensor(inputs: &dyn NodeInputs, i: usize, what: &str) -> KResult<std::sync::Arc<Value>> {
    let v = inputs
        .host(i)?
        .ok_or_else(|| invalid(format!("{what} (input {i}) is required")))?;
    if v.as_tensor().is_none() {
        return Err(invalid(format!("{what} must be a tensor")));
    }
    Ok(v)
}

fn tensor_of(v: &Value) -> &Tensor {
    v.as_tensor().expect("checked by host_tensor")
}

/// Words per element of `t` on the device.
fn elem_words(t: &WTensor) -> KResult<usize> {
    match words(t.dtype) {
        Some(w) => Ok(w),
        None => decline!("{} values stay on the host", t.dtype),
    }
}

/// Uploads 32-bit element offsets or positions (each below 2³¹: the caller checked the tensor
/// they index).
fn upload_words(run: &Run, v: Vec<i32>) -> KResult<WTensor> {
    let n = v.len();
    let t = Tensor::I32(
        ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[n]), v)
            .map_err(|e| invalid(e.to_string()))?,
    );
    run.upload(&t)
}

/// `out[i] = x[offs[i]]`, one thread per output element, word by word.
fn k_gather_elements(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let x = dev(inputs, 0)?;
    let iv = host_tensor(inputs, 1, "GatherElements indices")?;
    let (offs, out_shape) = gather_elements_plan(ctx, &x.shape, tensor_of(&iv))?;
    let n = u32_len(&out_shape)? as usize;
    let out = run.alloc(x.dtype, &out_shape)?;
    if n == 0 {
        return Ok(vec![out]);
    }
    u32_len(&x.shape)?;
    let w = elem_words(&x)?;
    let offs = upload_words(run, offs.into_iter().map(|o| o as i32).collect())?;
    let body = format!(
        "let s = i1[i] * {w}u;\nfor (var k = 0u; k < {w}u; k = k + 1u) {{ o0[i * {w}u + k] = i0[s + k]; }}\n"
    );
    let src = format!("{}{}", wgsl::header(1, 2), wgsl::entry_1d(&body));
    run.dispatch_n(
        "gather_elements",
        &src,
        &[&out],
        &[&x, &offs],
        vec![n as u32],
        n,
    )?;
    Ok(vec![out])
}

/// `cur ∘ upd` as the CPU's `scatter_reduce` computes it, in the kind's type `t`.
fn combine(red: Reduction, float: bool) -> &'static str {
    match red {
        Reduction::None => "u",
        Reduction::Add => "c + u",
        Reduction::Mul => "c * u",
        // CPU: u if u > c, or u is NaN and c is not (NaN propagates, and c's NaN stays).
        Reduction::Max if float => "select(c, u, u > c || (isnan32(u) && !isnan32(c)))",
        // CPU: u if u < c or u is NaN.
        Reduction::Min if float => "select(c, u, u < c || isnan32(u))",
        Reduction::Max => "max(c, u)",
        Reduction::Min => "min(c, u)",
    }
}

fn k_scatter_elements(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let x = dev(inputs, 0)?;
    let upd = dev(inputs, 2)?;
    let iv = host_tensor(inputs, 1, "ScatterElements indices")?;
    let (xd, ud) = ((&x.shape[..], x.dtype), (&upd.shape[..], upd.dtype));
    let lines = scatter_elements_lines(ctx, xd, tensor_of(&iv), ud)?;
    scatter_lines(run, &x, &upd, lines, "ScatterElements").map(|out| vec![out])
}

/// ScatterND: each element of a slice is a line, whose updates (one per index tuple) apply in order.
fn k_scatter_nd(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let x = dev(inputs, 0)?;
    let upd = dev(inputs, 2)?;
    let iv = host_tensor(inputs, 1, "ScatterND indices")?;
    let (xd, ud) = ((&x.shape[..], x.dtype), (&upd.shape[..], upd.dtype));
    let lines = scatter_nd_lines(ctx, xd, tensor_of(&iv), ud)?;
    scatter_lines(run, &x, &upd, lines, "ScatterND").map(|out| vec![out])
}

/// `out = x`, then the updates of `lines` applied in order, one invocation per line:
/// `out[offs[p]] = red(out[offs[p]], upd[p])`.
fn scatter_lines(
    run: &Run,
    x: &WTensor,
    upd: &WTensor,
    lines: ScatterLines,
    what: &str,
) -> KResult<WTensor> {
    let (offs, len, inner, red) = (lines.offs, lines.len, lines.inner, lines.red);
    let d = x.dtype;
    let float = match (red, d) {
        (Reduction::None, _) => false,
        (_, DType::F32 | DType::F16 | DType::BF16) => true,
        (_, DType::I32) => false,
        (_, DType::F64 | DType::I64) => {
            require_f64(run, what)?;
            d == DType::F64
        }
        (r, d) => decline!("{what} reduction {r:?} of {d}"),
    };
    u32_len(&x.shape)?;
    let total = u32_len(&[offs.len()])? as usize;
    let w = elem_words(x)?;
    let out = run.alloc(d, &x.shape)?;
    super::movement::copy(run, x, &out)?;
    if total == 0 {
        return Ok(out);
    }
    if len > MAX_SERIAL {
        decline!("{what} applies {len} updates per line in order: the CPU is faster");
    }
    super::loop_budget(run, what, len)?;
    let lines = total / len;
    let offs = upload_words(run, offs.into_iter().map(|o| o as i32).collect())?;
    let step = if red == Reduction::None {
        format!(
            "for (var k = 0u; k < {w}u; k = k + 1u) {{ o0[off * {w}u + k] = i0[p * {w}u + k]; }}"
        )
    } else if w == 2 {
        // 64-bit elements: two words, low first, combined in i64 or f64.
        let t = if float { "f64" } else { "i64" };
        let word = |buf: &str, at: &str| {
            format!("bitcast<{t}>(u64({buf}[2u * {at}]) | (u64({buf}[2u * {at} + 1u]) << 32u))")
        };
        format!(
            "let c = {};\nlet u = {};\nlet r = bitcast<u64>({});\n\
             o0[2u * off] = u32(r & 0xfffffffflu);\no0[2u * off + 1u] = u32(r >> 32u);",
            word("o0", "off"),
            word("i0", "p"),
            combine(red, float).replace("isnan32", "isnan64"),
        )
    } else {
        format!(
            "let c = {};\nlet u = {};\no0[off] = {};",
            wgsl::load(d, "o0[off]"),
            wgsl::load(d, "i0[p]"),
            wgsl::store(d, combine(red, float))
        )
    };
    let body = format!(
        "let len = P[1]; let inner = P[2];\n\
         var p = (i / inner) * len * inner + i % inner;\n\
         for (var a = 0u; a < len; a = a + 1u) {{\n\
           let off = i1[p];\n{step}\n\
           p = p + inner;\n\
         }}\n"
    );
    let half = if float && wgsl::needs_half(&[d]) {
        wgsl::HALF
    } else if float && d == DType::F64 {
        "fn isnan64(x: f64) -> bool { return (bitcast<u64>(x) & 0x7ffffffffffffffflu) > 0x7ff0000000000000lu; }\n"
    } else {
        ""
    };
    let src = format!("{}{half}{}", wgsl::header(1, 2), wgsl::entry_1d(&body));
    run.dispatch_n(
        &format!("scatter_elements_{red:?}"),
        &src,
        &[&out],
        &[upd, &offs],
        vec![lines as u32, len as u32, inner.max(1) as u32],
        lines,
    )?;
    Ok(out)
}

/// `out[o, j, i] = pos[o·inner + i] == j ? values[1] : values[0]`; `pos` is -1 where out of range.
fn k_one_hot(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let iv = host_tensor(inputs, 0, "OneHot indices")?;
    let dv = host_tensor(inputs, 1, "OneHot depth")?;
    let vv = host_tensor(inputs, 2, "OneHot values")?;
    let plan = one_hot_lines(ctx, tensor_of(&iv), tensor_of(&dv), tensor_of(&vv))?;
    let (depth, inner) = (plan.depth, plan.inner);
    let values = dev(inputs, 2)?;
    let n = u32_len(&plan.shape)? as usize;
    let out = run.alloc(values.dtype, &plan.shape)?;
    if n == 0 {
        return Ok(vec![out]);
    }
    let w = elem_words(&values)?;
    let pos = upload_words(run, plan.pos)?;
    let body = format!(
        "let inner = P[1]; let depth = P[2];\n\
         let q = i / inner;\n\
         let hit = i1[(q / depth) * inner + i % inner] == q % depth;\n\
         let v = select(0u, {w}u, hit);\n\
         for (var k = 0u; k < {w}u; k = k + 1u) {{ o0[i * {w}u + k] = i0[v + k]; }}\n"
    );
    let src = format!("{}{}", wgsl::header(1, 2), wgsl::entry_1d(&body));
    run.dispatch_n(
        "one_hot",
        &src,
        &[&out],
        &[&values, &pos],
        vec![n as u32, inner.max(1) as u32, depth as u32],
        n,
    )?;
    Ok(vec![out])
}

/// Keeps `x[.., r, c]` where `c - r >= k` (upper) or `c - r <= k` (lower), zero elsewhere.
fn k_trilu(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let x = dev(inputs, 0)?;
    let kv = if inputs.present(1) {
        let v = host_tensor(inputs, 1, "Trilu k")?;
        trilu_k(tensor_of(&v))?
    } else {
        0
    };
    let (upper, rows, cols, kc) = trilu_plan(ctx, &x.shape, kv)?;
    let n = u32_len(&x.shape)? as usize;
    let out = run.alloc(x.dtype, &x.shape)?;
    if n == 0 {
        return Ok(vec![out]);
    }
    let w = elem_words(&x)?;
    let body = format!(
        "let c = i % P[1]; let r = (i / P[1]) % P[2];\n\
         let keep = i32(c) - i32(r) {cmp} bitcast<i32>(P[3]);\n\
         for (var k = 0u; k < {w}u; k = k + 1u) {{ o0[i * {w}u + k] = select(0u, i0[i * {w}u + k], keep); }}\n",
        cmp = if upper { ">=" } else { "<=" },
    );
    let src = format!("{}{}", wgsl::header(1, 1), wgsl::entry_1d(&body));
    run.dispatch_n(
        if upper { "triu" } else { "tril" },
        &src,
        &[&out],
        &[&x],
        vec![n as u32, cols as u32, rows as u32, kc as u32],
        n,
    )?;
    Ok(vec![out])
}

/// `out[i] = start + i·delta`: f32 and f64 in f64 (the product, then the sum), f32 rounded once; integers in
/// wrapping arithmetic truncated to the output width (64-bit where the output is).
fn k_range(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let vs: Vec<_> = (0..3)
        .map(|i| host_tensor(inputs, i, "Range scalar"))
        .collect::<KResult<_>>()?;
    let (s, l, dl) = (tensor_of(&vs[0]), tensor_of(&vs[1]), tensor_of(&vs[2]));
    let d = s.dtype();
    let plan = range_plan(ctx, s, l, dl)?;
    let (n, value, start, delta) = match plan {
        RangePlan::Float { start, delta, n } => {
            require_f64(run, "Range")?;
            // f16 and bf16 would round twice (f64 to f32 to the narrow type).
            let v = match d {
                DType::F32 => "o0[i] = bitcast<u32>(f32(v));".to_string(),
                DType::F64 => "let b = bitcast<u64>(v);\n\
                               o0[2u * i] = u32(b & 0xfffffffflu);\no0[2u * i + 1u] = u32(b >> 32u);"
                    .to_string(),
                d => decline!("Range of {d}"),
            };
            let bits = |x: f64| x.to_bits();
            (
                n,
                format!(
                    "let st = bitcast<f64>(u64(P[1]) | (u64(P[2]) << 32u));\n\
                     let dl = bitcast<f64>(u64(P[3]) | (u64(P[4]) << 32u));\n\
                     let v = st + f64(i) * dl;\n{v}\n"
                ),
                bits(start),
                bits(delta),
            )
        }
        RangePlan::Int { start, delta, n } => {
            let out = match d {
                DType::I32 | DType::U32 | DType::I16 | DType::U16 | DType::I8 | DType::U8 => {
                    // The low 32 bits of the 64-bit sum are the 32-bit wrapping sum.
                    format!("o0[i] = {};\n", wgsl::store(d, "v"))
                }
                DType::I64 | DType::U64 => {
                    if !run.device.caps.i64 {
                        decline!("Range of {d} needs 64-bit integers in shaders");
                    }
                    "let v64 = (u64(P[1]) | (u64(P[2]) << 32u)) + u64(i) * (u64(P[3]) | (u64(P[4]) << 32u));\n\
                     o0[2u * i] = u32(v64 & 0xfffffffflu);\no0[2u * i + 1u] = u32(v64 >> 32u);\n"
                        .to_string()
                }
                d => decline!("Range of {d}"),
            };
            let body = if matches!(d, DType::I64 | DType::U64) {
                out
            } else {
                let v = match d {
                    DType::I32 | DType::I16 | DType::I8 => "bitcast<i32>(P[1] + i * P[3])",
                    _ => "(P[1] + i * P[3])",
                };
                format!("let v = {v};\n{out}")
            };
            (n, body, start as i64 as u64, delta as i64 as u64)
        }
    };
    let out = run.alloc(d, &[n])?;
    let n = u32_len(&[n])? as usize;
    if n == 0 {
        return Ok(vec![out]);
    }
    let half = if wgsl::needs_half(&[d]) {
        wgsl::HALF
    } else {
        ""
    };
    let src = format!("{}{half}{}", wgsl::header(1, 0), wgsl::entry_1d(&value));
    let lo_hi = |v: u64| [v as u32, (v >> 32) as u32];
    let mut params = vec![n as u32];
    params.extend(lo_hi(start));
    params.extend(lo_hi(delta));
    run.dispatch_n(&format!("range_{d}"), &src, &[&out], &[], params, n)?;
    Ok(vec![out])
}

/// CumSum: one invocation per line of the CPU's `ScanPlan` (`outer · inner` lines of `dim`
/// elements, `inner` apart), summing in the CPU's order so every output is the CPU's bit for bit;
/// f16 and bf16 sum in f32 and round each output once, 32-bit integers wrap in u32 (the same bits
/// for signed values), 64-bit integers add as two words with a carry, f64 adds in f64.
fn k_cumsum(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let x = dev(inputs, 0)?;
    let av = host_tensor(inputs, 1, "CumSum axis")?;
    let plan = cumsum_plan(ctx, &x.shape, tensor_of(&av))?;
    let d = x.dtype;
    let (zero, load, add, store) = match d {
        DType::F32 | DType::F16 | DType::BF16 => (
            "0.0".to_string(),
            wgsl::load(d, "i0[p]"),
            "acc + v",
            wgsl::store(d, "acc"),
        ),
        DType::I32 | DType::U32 => (
            "0u".to_string(),
            "i0[p]".to_string(),
            "acc + v",
            "acc".to_string(),
        ),
        DType::I64 | DType::U64 => (
            "vec2<u32>(0u, 0u)".to_string(),
            "vec2<u32>(i0[2u * p], i0[2u * p + 1u])".to_string(),
            "add64(acc, v)",
            "acc".to_string(),
        ),
        DType::F64 => {
            require_f64(run, "CumSum")?;
            (
                "f64(0.0)".to_string(),
                "bitcast<f64>(u64(i0[2u * p]) | (u64(i0[2u * p + 1u]) << 32u))".to_string(),
                "acc + v",
                "vec2<u32>(u32(bitcast<u64>(acc) & 0xfffffffflu), u32(bitcast<u64>(acc) >> 32u))"
                    .to_string(),
            )
        }
        d => decline!("CumSum of {d}"),
    };
    let n = u32_len(&x.shape)?;
    let out = run.alloc(d, &x.shape)?;
    if n == 0 {
        return Ok(vec![out]);
    }
    if plan.dim > MAX_SERIAL {
        decline!(
            "CumSum sums {} elements per line in order: the CPU is faster",
            plan.dim
        );
    }
    super::loop_budget(run, "CumSum", plan.dim)?;
    let put = if elem_words(&x)? == 2 {
        format!("let w = {store};\no0[2u * p] = w.x;\no0[2u * p + 1u] = w.y;")
    } else {
        format!("o0[p] = {store};")
    };
    let (before, after) = if plan.exclusive {
        (put.as_str(), "")
    } else {
        ("", put.as_str())
    };
    let (first, step) = if plan.reverse {
        ("dim - 1u", "p = p - inner;")
    } else {
        ("0u", "p = p + inner;")
    };
    let body = format!(
        "let dim = P[1]; let inner = P[2];\n\
         var p = ((i / inner) * dim + {first}) * inner + i % inner;\n\
         var acc = {zero};\n\
         for (var a = 0u; a < dim; a = a + 1u) {{\n\
           let v = {load};\n{before}\nacc = {add};\n{after}\n{step}\n\
         }}\n"
    );
    let helpers = match d {
        DType::F16 | DType::BF16 => wgsl::HALF,
        DType::I64 | DType::U64 => {
            "fn add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {\n\
               let lo = a.x + b.x;\n\
               return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));\n}\n"
        }
        _ => "",
    };
    let lines = plan.outer * plan.inner;
    let src = format!("{}{helpers}{}", wgsl::header(1, 1), wgsl::entry_1d(&body));
    run.dispatch_n(
        "cumsum",
        &src,
        &[&out],
        &[&x],
        vec![lines as u32, plan.dim as u32, plan.inner.max(1) as u32],
        lines,
    )?;
    Ok(vec![out])
}
