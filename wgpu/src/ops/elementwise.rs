//! WGSL elementwise kernels: unary, binary and variadic ops, comparisons, logic, BitShift, Where and
//! Clip, over operands broadcast to their common shape.
//!
//! One generator covers them all ([`map`]): a kernel that turns the flat output index into each
//! operand's offset (dims and strides in the parameter words), loads each operand in its kind's
//! type, applies the op's function `f` (`elementwise_expr`) and stores the result. Float ops compute
//! in f32 (f16 and bf16 widened exactly, the result rounded once); integer ops in i32 or u32,
//! wrapping, the result keeping the element type's low bits as the CPU's `wrapping_*` do.
use super::elementwise_expr::{self as ex, Unary};
use super::{
    all_dev, broadcast_strides, decline, dev, offsets_code, offsets_params, require_f64, simplify,
    u32_len,
};
use crate::memory::{WTensor, words};
use crate::run::{KResult, Run};
use crate::wgsl::{self, Kind, kind};
use quorum_core::backend::{DeviceError, NodeInputs};
use quorum_core::ir::Node;
use quorum_core::ops::OpCtx;
use quorum_core::ops::broadcast::broadcast_shapes;
use quorum_core::ops::map_op::{Arith, Compare, Fold, Logic, MapOp};
use quorum_core::tensor::{DType, Tensor};

use super::WgpuKernel;

/// The kernel for `node` if this family owns its op type.
pub fn claim(node: &Node) -> Option<Result<WgpuKernel, String>> {
    let op = node.op_type.as_str();
    Some(match op {
        "Gelu" => quorum_core::device::forms::gelu_mode(node).map(|()| k_map as WgpuKernel),
        "Clip" => Ok(k_clip as WgpuKernel),
        "Where" => Ok(k_where as WgpuKernel),
        _ => Ok(k_map as WgpuKernel),
    })
}

/// Runs `func` (a WGSL function `f` of the operands' values in their kinds' types, returning the
/// output's kind) over `operands` broadcast to their common shape. `lib` is extra WGSL (the f64
/// library, helpers); `attrs` are up to four parameter words, `P[2..6]`. With `flag`, the kernel
/// also binds a one-word output `o1` it may set (a zero divisor), returned beside the result.
#[allow(clippy::too_many_arguments)]
pub fn map(
    run: &Run,
    name: &str,
    operands: &[&WTensor],
    out_dtype: DType,
    func: &str,
    lib: &str,
    attrs: &[u32],
    flag: Option<&WTensor>,
) -> KResult<WTensor> {
    let shapes: Vec<&[usize]> = operands.iter().map(|t| t.shape.as_slice()).collect();
    let out_shape = broadcast_shapes(&shapes)?;
    let n = u32_len(&out_shape)?;
    let out = run.alloc(out_dtype, &out_shape)?;
    if n == 0 {
        return Ok(out);
    }
    let st: Vec<Vec<i64>> = operands
        .iter()
        .map(|t| broadcast_strides(&t.shape, &out_shape))
        .collect();
    let (shape, st) = simplify(&out_shape, &st);
    if let Some(k) = vec4_form(operands, out_dtype, n, &shape, &st) {
        return map_vec4(run, name, operands, out, func, lib, attrs, flag, k);
    }
    let mut body = offsets_code(operands.len(), 6, shape.len());
    let mut args = Vec::new();
    for (j, t) in operands.iter().enumerate() {
        body.push_str(&format!(
            "let a{j} = {};\n",
            wgsl::load(t.dtype, &format!("i{j}[off{j}]"))
        ));
        args.push(format!("a{j}"));
    }
    body.push_str(&format!(
        "o0[i] = {};\n",
        wgsl::store(out_dtype, &format!("f({})", args.join(", ")))
    ));
    let mut dtypes: Vec<DType> = operands.iter().map(|t| t.dtype).collect();
    dtypes.push(out_dtype);
    let half = if wgsl::needs_half(&dtypes) {
        wgsl::HALF
    } else {
        ""
    };
    let outs = if flag.is_some() { 2 } else { 1 };
    let mut params = vec![0u32; 6];
    params[..2].copy_from_slice(&[n, 0]);
    params[2..2 + attrs.len()].copy_from_slice(attrs);
    let rest = offsets_params(n, &shape, &st);
    params[1] = rest[1];
    params.extend_from_slice(&rest[2..]);
    // Generated for this shape: the broadcast walk divides by constants (the op's attribute
    // words, P[2..6], stay parameters).
    let body = wgsl::inline_params(&body, &params, 6);
    let src = format!(
        "{}{half}{lib}\n{func}\n{}",
        wgsl::header(outs, operands.len()),
        wgsl::entry_1d(&body)
    );
    let mut out_refs = vec![&out];
    if let Some(f) = flag {
        out_refs.push(f);
    }
    run.dispatch_n(name, &src, &out_refs, operands, params, n as usize)?;
    Ok(out)
}

/// Where [`map`] may move four words per thread: one element per word for every operand and the
/// output, a count divisible by four, and each operand either laid out like the output (stride 1
/// after `simplify`) or one element read by all. Returns the number of vec4s.
fn vec4_form(
    operands: &[&WTensor],
    out_dtype: DType,
    n: u32,
    shape: &[usize],
    st: &[Vec<i64>],
) -> Option<u32> {
    let one_word = |d: DType| words(d) == Some(1);
    let flat = shape.len() == 1 && st.iter().all(|s| s[0] == 1 || s[0] == 0);
    (flat
        && n.is_multiple_of(4)
        && one_word(out_dtype)
        && operands.iter().all(|t| one_word(t.dtype)))
    .then_some(n / 4)
}

/// [`map`]'s kernel over `quads` vec4s of words: operands read four words at a time (a broadcast
/// operand's one word splatted), `f` applied to each lane, four words written. Same `f`, same
/// values as the element-at-a-time kernel.
#[allow(clippy::too_many_arguments)]
fn map_vec4(
    run: &Run,
    name: &str,
    operands: &[&WTensor],
    out: WTensor,
    func: &str,
    lib: &str,
    attrs: &[u32],
    flag: Option<&WTensor>,
    quads: u32,
) -> KResult<WTensor> {
    let mut body = String::new();
    let mut ins = Vec::new();
    for (j, t) in operands.iter().enumerate() {
        if t.len() == 1 {
            ins.push("u32");
            body.push_str(&format!("let w{j} = vec4<u32>(i{j}[0]);\n"));
        } else {
            ins.push("vec4<u32>");
            body.push_str(&format!("let w{j} = i{j}[i];\n"));
        }
    }
    body.push_str("var r: vec4<u32>;\n");
    for lane in ["x", "y", "z", "w"] {
        let args: Vec<String> = operands
            .iter()
            .enumerate()
            .map(|(j, t)| wgsl::load(t.dtype, &format!("w{j}.{lane}")))
            .collect();
        body.push_str(&format!(
            "r.{lane} = {};\n",
            wgsl::store(out.dtype, &format!("f({})", args.join(", ")))
        ));
    }
    body.push_str("o0[i] = r;\n");
    let mut dtypes: Vec<DType> = operands.iter().map(|t| t.dtype).collect();
    dtypes.push(out.dtype);
    let half = if wgsl::needs_half(&dtypes) {
        wgsl::HALF
    } else {
        ""
    };
    let outs: &[&str] = if flag.is_some() {
        &["vec4<u32>", "u32"]
    } else {
        &["vec4<u32>"]
    };
    let src = format!(
        "{}{half}{lib}\n{func}\n{}",
        wgsl::header_typed(outs, &ins),
        wgsl::entry_1d(&body)
    );
    let mut params = vec![0u32; 6];
    params[0] = quads;
    params[2..2 + attrs.len()].copy_from_slice(attrs);
    let mut out_refs = vec![&out];
    if let Some(f) = flag {
        out_refs.push(f);
    }
    run.dispatch_n(
        &format!("{name}_x4"),
        &src,
        &out_refs,
        operands,
        params,
        quads as usize,
    )?;
    Ok(out)
}

/// `a + b`, `a - b`, `a · b` or `a / b` of f32 tensors with broadcasting, outside any session too
/// (benchmarks).
pub fn binary(run: &Run, op: Arith, a: &WTensor, b: &WTensor) -> KResult<WTensor> {
    let e = match op {
        Arith::Add => "a0 + a1",
        Arith::Sub => "a0 - a1",
        Arith::Mul => "a0 * a1",
        Arith::Div => "a0 / a1",
    };
    if a.dtype != DType::F32 || b.dtype != DType::F32 {
        decline!(
            "{} of {} and {}: f32 only here",
            op.name(),
            a.dtype,
            b.dtype
        );
    }
    let f = format!("fn f(a0: f32, a1: f32) -> f32 {{ return {e}; }}");
    map(run, op.name(), &[a, b], DType::F32, &f, "", &[], None)
}

/// The f64 library when the function calls it.
fn lib_for(func: &str) -> String {
    if func.contains("64(") {
        super::math::library()
    } else {
        String::new()
    }
}

fn same_dtypes(op: &str, ts: &[WTensor]) -> KResult<DType> {
    let d = ts[0].dtype;
    for t in &ts[1..] {
        if t.dtype != d {
            decline!(
                "{op} operands {d} and {}: the CPU kernel decides mixed types",
                t.dtype
            );
        }
    }
    Ok(d)
}

/// Declines a binary node that broadcasts the pre-opset-7 way (`quorum_core::device::forms`).
fn legacy_broadcast(ctx: &OpCtx, ts: &[WTensor]) -> KResult<()> {
    let shapes: Vec<&[usize]> = ts.iter().map(|t| t.shape.as_slice()).collect();
    quorum_core::device::forms::legacy_broadcast(ctx, &shapes)?.map_err(DeviceError::Decline)
}

fn k_map(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let op = ctx.node.op_type.as_str();
    let ts = all_dev(inputs)?;
    legacy_broadcast(ctx, &ts)?;
    let Some(desc) = MapOp::parse(ctx)? else {
        decline!("no WGSL expression for {op}");
    };
    let refs: Vec<&WTensor> = ts.iter().collect();
    let d = ts[0].dtype;
    let k = kind(d)?;
    let t = wgsl::ty(k);
    let out = match desc {
        MapOp::Not => logic(run, op, &refs, "fn f(a0: u32) -> u32 { return 1u - a0; }")?,
        MapOp::Logic(l) => {
            let f = match l {
                Logic::And => "fn f(a0: u32, a1: u32) -> u32 { return a0 & a1; }",
                Logic::Or => "fn f(a0: u32, a1: u32) -> u32 { return a0 | a1; }",
                Logic::Xor => "fn f(a0: u32, a1: u32) -> u32 { return a0 ^ a1; }",
            };
            logic(run, op, &refs, f)?
        }
        _ if d == DType::Bool && desc != MapOp::Compare(Compare::Equal) => {
            decline!("{op} on bool: the CPU kernel decides")
        }
        MapOp::Compare(c) => {
            desc.check_arity(op, ts.len())?;
            same_dtypes(op, &ts)?;
            let f = format!(
                "fn f(a0: {t}, a1: {t}) -> u32 {{ return select(0u, 1u, {}); }}",
                ex::compare(c)
            );
            map(run, op, &refs, DType::Bool, &f, "", &[], None)?
        }
        MapOp::IsNaN => {
            float_only(op, k)?;
            let f = "fn f(a0: f32) -> u32 { return select(0u, 1u, isnan32(a0)); }";
            // The same parameter words as IsInf's (unread here), so both take one layout.
            map(run, op, &refs, DType::Bool, f, "", &[1, 1], None)?
        }
        MapOp::IsInf { positive, negative } => {
            float_only(op, k)?;
            let f = "fn f(a0: f32) -> u32 { let b = bitcast<u32>(a0); \
                 let p = b == 0x7f800000u && P[2] != 0u; let n = b == 0xff800000u && P[3] != 0u; \
                 return select(0u, 1u, p || n); }";
            let words = [u32::from(positive), u32::from(negative)];
            map(run, op, &refs, DType::Bool, f, "", &words, None)?
        }
        _ if k != Kind::Float => {
            return super::elementwise_int::map_int(run, op, desc, &ts, k);
        }
        MapOp::Arith(a) => {
            desc.check_arity(op, ts.len())?;
            same_dtypes(op, &ts)?;
            let e = match a {
                Arith::Add => "a0 + a1",
                Arith::Sub => "a0 - a1",
                Arith::Mul => "a0 * a1",
                // Correctly rounded where the adapter has f64 (WGSL's f32 division promises 2.5 ulp).
                Arith::Div if run.device.caps.f64 => "f32(f64(a0) / f64(a1))",
                Arith::Div => "a0 / a1",
            };
            let f = format!("fn f(a0: f32, a1: f32) -> f32 {{ return {e}; }}");
            map(run, op, &refs, d, &f, "", &[], None)?
        }
        MapOp::Pow => {
            desc.check_arity(op, ts.len())?;
            require_f64(run, "Pow")?;
            let yt = match ts[1].dtype {
                y if y == d => "f64(a1)",
                DType::I32 | DType::I16 | DType::I8 => "f64(a1)",
                DType::U32 | DType::U16 | DType::U8 => "f64(a1)",
                y => decline!("Pow exponent {y} with a {d} base"),
            };
            let yk = wgsl::ty(kind(ts[1].dtype)?);
            let f = format!("fn f(a0: f32, a1: {yk}) -> f32 {{ return powf(a0, {yt}); }}");
            let lib = format!("{}{}", super::math::library(), ex::POW);
            map(run, op, &refs, d, &f, &lib, &[], None)?
        }
        MapOp::Mod { .. } => decline!(
            "float Mod: the exact remainder needs a fused multiply-add, which WGSL does not promise"
        ),
        MapOp::PRelu => {
            desc.check_arity(op, ts.len())?;
            same_dtypes(op, &ts)?;
            require_prelu_slope(&ts[0], &ts[1])?;
            let f = "fn f(a0: f32, a1: f32) -> f32 { return select(a0, a0 * a1, a0 < 0.0); }";
            map(run, op, &refs, d, f, "", &[], None)?
        }
        MapOp::Fold(fold) => {
            same_dtypes(op, &ts)?;
            let params: Vec<String> = (0..ts.len()).map(|j| format!("a{j}: f32")).collect();
            let mut body = String::new();
            for j in 1..ts.len() {
                let next = match fold {
                    Fold::Sum | Fold::Mean => format!("acc + a{j}"),
                    Fold::Max => ex::nan_fold("acc", &format!("a{j}"), true),
                    Fold::Min => ex::nan_fold("acc", &format!("a{j}"), false),
                };
                body.push_str(&format!("acc = {next};\n"));
            }
            let fin = if fold == Fold::Mean && ts.len() > 1 {
                if run.device.caps.f64 {
                    format!("f32(f64(acc) / {}.0lf)", ts.len())
                } else {
                    format!("acc / {}.0", ts.len())
                }
            } else {
                "acc".into()
            };
            let f = format!(
                "fn f({}) -> f32 {{ var acc = a0;\n{body}return {fin}; }}",
                params.join(", ")
            );
            map(run, op, &refs, d, &f, "", &[], None)?
        }
        MapOp::BitShift { .. } => decline!("BitShift on {d}: the CPU kernel takes integers only"),
        MapOp::Unary(u) => {
            desc.check_arity(op, ts.len())?;
            let unary: Unary = ex::unary(u);
            if unary.f64 {
                require_f64(run, op)?;
            }
            let attrs = ex::attr_words(u);
            let lib = lib_for(&unary.body);
            map(run, op, &refs, d, &unary.body, &lib, &attrs, None)?
        }
    };
    Ok(vec![out])
}

/// A logic op `f` over bool operands `ts` (declined for any other type).
fn logic(run: &Run, op: &str, ts: &[&WTensor], f: &str) -> KResult<WTensor> {
    for t in ts {
        if t.dtype != DType::Bool {
            decline!("{op} on {}", t.dtype);
        }
    }
    map(run, op, ts, DType::Bool, f, "", &[], None)
}

fn float_only(op: &str, k: Kind) -> KResult<()> {
    if k != Kind::Float {
        decline!("{op} on integers: the CPU kernel decides");
    }
    Ok(())
}

/// Declines a PRelu whose slope does not broadcast onto X (`quorum_core::device::forms`).
pub fn require_prelu_slope(x: &WTensor, slope: &WTensor) -> KResult<()> {
    quorum_core::device::forms::prelu_slope(&x.shape, &slope.shape).map_err(DeviceError::Decline)
}

/// Clip's bound input `i` (opset 11 on), as `quorum_core::device::forms::clip_bound` takes it.
fn clip_bound(inputs: &dyn NodeInputs, i: usize, x: DType) -> KResult<Option<Tensor>> {
    let bound = inputs.host(i)?;
    quorum_core::device::forms::clip_bound(bound.as_deref(), i, x)?.map_err(DeviceError::Decline)
}

fn k_clip(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let x = dev(inputs, 0)?;
    let k = kind(x.dtype)?;
    if x.dtype == DType::Bool {
        decline!("Clip on bool: the CPU kernel refuses it");
    }
    let t = wgsl::ty(k);
    let (lo, hi): (u32, u32) = match k {
        Kind::Float => {
            let (lo, hi) = if ctx.opset() < 11 {
                (ctx.attr_f("min", f32::MIN)?, ctx.attr_f("max", f32::MAX)?)
            } else {
                let b = |i: usize, default: f32| -> KResult<f32> {
                    Ok(match clip_bound(inputs, i, x.dtype)? {
                        Some(b) => b.to_f64_vec()?.first().map_or(default, |&v| v as f32),
                        None => default,
                    })
                };
                (b(1, f32::NEG_INFINITY)?, b(2, f32::INFINITY)?)
            };
            (lo.to_bits(), hi.to_bits())
        }
        _ => {
            if ctx.opset() < 11 {
                decline!(
                    "Clip before opset 11 on {}: the CPU kernel takes floats only",
                    x.dtype
                );
            }
            let (dlo, dhi) = if k == Kind::Int {
                (i32::MIN as u32, i32::MAX as u32)
            } else {
                (0, u32::MAX)
            };
            let b = |i: usize, default: u32| -> KResult<u32> {
                Ok(match clip_bound(inputs, i, x.dtype)? {
                    Some(b) => b.to_i64_vec()?.first().map_or(default, |&v| v as u32),
                    None => default,
                })
            };
            (b(1, dlo)?, b(2, dhi)?)
        }
    };
    let conv = |p: &str| match k {
        Kind::Float => format!("bitcast<f32>({p})"),
        Kind::Int => format!("bitcast<i32>({p})"),
        Kind::Uint => p.to_string(),
    };
    // x < lo first, then > hi, as the CPU orders them. NaN stays NaN, told by its bits: WGSL lets a
    // compiler assume no NaN, and NVIDIA's Vulkan driver turns the two selects into min/max, which
    // return the bound (Clip(NaN) with no bounds gave -inf on the H200).
    let keep_nan = if k == Kind::Float {
        "if (isnan32(a0)) { return a0; } "
    } else {
        ""
    };
    let f = format!(
        "fn f(a0: {t}) -> {t} {{ {keep_nan}let lo = {}; let hi = {}; let y = select(a0, lo, a0 < lo); return select(y, hi, y > hi); }}",
        conv("P[2]"),
        conv("P[3]")
    );
    Ok(vec![map(
        run,
        "Clip",
        &[&x],
        x.dtype,
        &f,
        "",
        &[lo, hi],
        None,
    )?])
}

/// Where(cond, x, y) for any element type: the words are moved, not interpreted.
fn k_where(_: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let c = dev(inputs, 0)?;
    let x = dev(inputs, 1)?;
    let y = dev(inputs, 2)?;
    if c.dtype != DType::Bool || x.dtype != y.dtype {
        decline!("Where with {}, {}, {}", c.dtype, x.dtype, y.dtype);
    }
    let w = words(x.dtype).ok_or_else(|| DeviceError::Decline(format!("Where on {}", x.dtype)))?;
    let shapes = [c.shape.as_slice(), x.shape.as_slice(), y.shape.as_slice()];
    let out_shape = broadcast_shapes(&shapes)?;
    let n = u32_len(&out_shape)?;
    let out = run.alloc(x.dtype, &out_shape)?;
    if n == 0 {
        return Ok(vec![out]);
    }
    let (shape, st) = quorum_core::device::forms::broadcast_walk(&shapes, &out_shape);
    let mut body = offsets_code(3, 2, shape.len());
    body.push_str(&format!(
        "let pick = i0[off0] != 0u;\nfor (var w = 0u; w < {w}u; w = w + 1u) {{ o0[i * {w}u + w] = select(i2[off2 * {w}u + w], i1[off1 * {w}u + w], pick); }}\n"
    ));
    let params = offsets_params(n, &shape, &st);
    // Generated for this shape: the broadcast walk divides by constants.
    let body = wgsl::inline_params(&body, &params, 1);
    let src = format!("{}{}", wgsl::header(1, 3), wgsl::entry_1d(&body));
    run.dispatch_n("where", &src, &[&out], &[&c, &x, &y], params, n as usize)?;
    Ok(vec![out])
}
