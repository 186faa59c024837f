//! WGSL kernels: the Reduce* ops and ArgMax/ArgMin over f32 and f16 (axes as attribute or input,
//! keepdims, noop_with_empty_axes, select_last_index; the axis rules are the CPU's
//! `reduced_axes`). One thread per output walks its reduced elements in order. Sums, products and
//! the functions of them accumulate in f64 (the adapter must have it) and round once; Max, Min and
//! the Arg ops compare in f32, NaN winning (the first NaN for ArgMax/ArgMin, the last with
//! select_last_index).
use super::{WgpuKernel, decline, dev, host_i64s, invalid, require_f64, strides, u32_len};
use crate::memory::WTensor;
use crate::run::{KResult, Run};
use crate::wgsl;
use quorum_core::backend::NodeInputs;
use quorum_core::ir::Node;
use quorum_core::ops::reduce::geometry;
use quorum_core::ops::{OpCtx, norm_axis};
use quorum_core::tensor::DType;

pub fn claim(node: &Node) -> Option<Result<WgpuKernel, String>> {
    let op = node.op_type.as_str();
    Some(Ok(if op.starts_with("Arg") {
        k_arg
    } else {
        k_reduce
    } as WgpuKernel))
}

/// Kept dims and reduced dims of `shape` as (size, stride) lists, for the walk's parameters:
/// `[n_out, kept rank, red rank, r, kept sizes, kept strides, red sizes, red strides]`.
fn walk_params(shape: &[usize], red: &[usize], n_out: usize) -> Vec<u32> {
    let st = strides(shape);
    let kept: Vec<usize> = (0..shape.len()).filter(|d| !red.contains(d)).collect();
    let r: usize = red.iter().map(|&d| shape[d]).product();
    let mut p = vec![n_out as u32, kept.len() as u32, red.len() as u32, r as u32];
    p.extend(kept.iter().map(|&d| shape[d] as u32));
    p.extend(kept.iter().map(|&d| st[d] as u32));
    p.extend(red.iter().map(|&d| shape[d] as u32));
    p.extend(red.iter().map(|&d| st[d] as u32));
    p
}

/// WGSL: `base` (the output's first element) and `fn at(j: u32) -> u32`, the j-th reduced
/// element's offset from it.
const WALK: &str = r#"
fn at(j: u32) -> u32 {
  let kr = P[1];
  let rr = P[2];
  let b = 4u + 2u * kr;
  var rest = j;
  var off = 0u;
  for (var q = 0u; q < rr; q = q + 1u) {
    let d = rr - 1u - q;
    off = off + (rest % P[b + d]) * P[b + rr + d];
    rest = rest / P[b + d];
  }
  return off;
}
fn base_of(i: u32) -> u32 {
  let kr = P[1];
  var rest = i;
  var off = 0u;
  for (var q = 0u; q < kr; q = q + 1u) {
    let d = kr - 1u - q;
    off = off + (rest % P[4u + d]) * P[4u + kr + d];
    rest = rest / P[4u + d];
  }
  return off;
}
"#;

fn float_in(what: &str, d: Option<DType>) -> KResult<DType> {
    match d {
        Some(d @ (DType::F32 | DType::F16)) => Ok(d),
        Some(d) => decline!("{what} on {d}: the WGSL kernels take f32 and f16"),
        None => Err(invalid("input 0 is required")),
    }
}

fn k_reduce(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let op = ctx.node.op_type.as_str();
    let d = float_in(op, inputs.dtype(0))?;
    let x = dev(inputs, 0)?;
    let rank = x.shape.len();
    let since = if op == "ReduceSum" { 13 } else { 18 };
    let axes_in = if inputs.len() > 1 && inputs.present(1) {
        host_i64s(inputs, 1)?
    } else {
        None
    };
    let axes = quorum_core::ops::reduce::reduced_axes(ctx, rank, axes_in, since)?;
    let keepdims = ctx.attr_i("keepdims", 1)? != 0;
    u32_len(&x.shape)?;
    let g = geometry(&x.shape, &axes);
    let out_shape = if keepdims { g.keep_shape } else { g.drop_shape };
    let n_out: usize = out_shape.iter().product();
    let r: usize = axes.iter().map(|&a| x.shape[a]).product();
    let y = run.alloc(d, &out_shape)?;
    if n_out == 0 {
        return Ok(vec![y]);
    }
    if r == 0 {
        decline!("{op} over no elements: the CPU gives the op's identity");
    }
    let passes = if op == "ReduceLogSumExp" { 2 } else { 1 };
    super::loop_budget(run, op, passes * r * (1 + axes.len()))?;
    let v = wgsl::load(d, "i0[b + at(j)]");
    let (init, step, fin, lib) = match op {
        "ReduceMax" | "ReduceMin" => {
            let pick = if op == "ReduceMax" { ">" } else { "<" };
            (
                format!("var acc = {};", wgsl::load(d, "i0[b + at(0u)]")),
                format!(
                    "let v = {v}; if (!isnan32(acc) && (isnan32(v) || v {pick} acc)) {{ acc = v; }}"
                ),
                "acc".to_string(),
                false,
            )
        }
        _ => {
            require_f64(run, op)?;
            let step = match op {
                "ReduceSum" | "ReduceMean" | "ReduceLogSum" => format!("acc = acc + f64({v});"),
                "ReduceProd" => format!("acc = acc * f64({v});"),
                "ReduceL1" => format!("acc = acc + abs(f64({v}));"),
                "ReduceL2" | "ReduceSumSquare" => format!("let v = f64({v}); acc = acc + v * v;"),
                _ => format!("acc = acc + exp64(f64({v}) - mx);"),
            };
            let fin = match op {
                "ReduceMean" => "f32(acc / f64(P[3]))".into(),
                "ReduceL2" => "f32(sqrt(acc))".into(),
                "ReduceLogSum" => "f32(log64(acc))".into(),
                "ReduceLogSumExp" => {
                    "f32(select(mx + log64(acc), mx, isnan64(mx) || (bitcast<u64>(mx) & 0x7fffffffffffffff\
                     lu) == 0x7ff0000000000000lu))"
                        .to_string()
                }
                _ => "f32(acc)".into(),
            };
            let init = if op == "ReduceLogSumExp" {
                // The largest element first (NaN wins), so every exponent is at most 0.
                format!(
                    "var m32 = {first}; for (var j = 1u; j < P[3]; j = j + 1u) {{ let v = {v}; if (!isnan32(m32) && (isnan32(v) || v > m32)) {{ m32 = v; }} }}\n\
                     let mx = f64(m32);\nvar acc = {zero};",
                    first = wgsl::load(d, "i0[b + at(0u)]"),
                    zero = "0.0lf"
                )
            } else if op == "ReduceProd" {
                "var acc = 1.0lf;".into()
            } else {
                "var acc = 0.0lf;".into()
            };
            (init, step, fin, true)
        }
    };
    let (start, init) = if op == "ReduceMax" || op == "ReduceMin" {
        ("1u", init)
    } else {
        ("0u", init)
    };
    let body = format!(
        "let b = base_of(i);\n{init}\nfor (var j = {start}; j < P[3]; j = j + 1u) {{ {step} }}\no0[i] = {};\n",
        wgsl::store(d, &fin)
    );
    let half = if d == DType::F16 { wgsl::HALF } else { "" };
    let math = if lib {
        super::math::library()
    } else {
        String::new()
    };
    let src = format!(
        "{}{half}{math}{WALK}{}",
        wgsl::header(1, 1),
        wgsl::entry_1d(&body)
    );
    run.dispatch_n(
        op,
        &src,
        &[&y],
        &[&x],
        walk_params(&x.shape, &axes, n_out),
        n_out,
    )?;
    Ok(vec![y])
}

fn k_arg(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let op = ctx.node.op_type.as_str();
    let d = float_in(op, inputs.dtype(0))?;
    let x = dev(inputs, 0)?;
    let shape = x.shape.clone();
    let rank = shape.len();
    let axis = norm_axis(ctx.attr_i("axis", 0)?, rank)?;
    let keepdims = ctx.attr_i("keepdims", 1)? != 0;
    let last = ctx.attr_i("select_last_index", 0)? != 0;
    if rank > 0 && shape[axis] == 0 {
        return Err(invalid(format!(
            "{op} over an empty axis {axis} of shape {shape:?}"
        )));
    }
    u32_len(&shape)?;
    let axes: Vec<usize> = if rank == 0 { vec![] } else { vec![axis] };
    let g = geometry(&shape, &axes);
    let out_shape = if keepdims { g.keep_shape } else { g.drop_shape };
    let n_out: usize = out_shape.iter().product();
    let y = run.alloc(DType::I64, &out_shape)?;
    if n_out == 0 {
        return Ok(vec![y]);
    }
    super::loop_budget(run, op, 2 * shape.get(axis).copied().unwrap_or(1))?;
    let pick = if op == "ArgMax" { ">" } else { "<" };
    // A tie goes to the first index, or the last with select_last_index; the first NaN (the last
    // with select_last_index) wins over any number.
    let tie = if last {
        format!("v {pick}= best")
    } else {
        format!("v {pick} best")
    };
    let nan_take = if last {
        "isnan32(v)"
    } else {
        "isnan32(v) && !isnan32(best)"
    };
    let body = format!(
        "let b = base_of(i);\nvar best = {first};\nvar at_ = 0u;\n\
         for (var j = 1u; j < P[3]; j = j + 1u) {{ let v = {v};\n\
           if ({nan_take} || (!isnan32(best) && !isnan32(v) && {tie})) {{ best = v; at_ = j; }} }}\n\
         o0[2u * i] = at_; o0[2u * i + 1u] = 0u;\n",
        first = wgsl::load(d, "i0[b]"),
        v = wgsl::load(d, "i0[b + at(j)]"),
    );
    let half = if d == DType::F16 { wgsl::HALF } else { "" };
    let src = format!(
        "{}{half}{WALK}{}",
        wgsl::header(1, 1),
        wgsl::entry_1d(&body)
    );
    run.dispatch_n(
        op,
        &src,
        &[&y],
        &[&x],
        walk_params(&shape, &axes, n_out),
        n_out,
    )?;
    Ok(vec![y])
}
