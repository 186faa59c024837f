//! WGSL kernel: Cast and CastLike between f32, f16, bf16, the integers and bool, one thread per
//! element, with the CPU kernel's rules (`quorum_core::ops::cast`): floats to integers truncate toward
//! zero and keep the target's low bits, NaN and infinities give 0; integers narrow by their low bits
//! (64-bit ones too: their low word) and widen by sign or zero extension; to bool is `x != 0` (NaN
//! is true); every float rounding is one round-to-nearest-even from the exact source, done in
//! integer code (WGSL leaves the rounding of its own int-to-float conversions open). Integers to f16
//! round through f32 as the CPU does. f64, floats to 64-bit integers and integers to bf16 stay on
//! the CPU.
use super::{WgpuKernel, decline, dev, u32_len};
use crate::memory::WTensor;
use crate::run::{KResult, Run};
use crate::wgsl;
use quorum_core::backend::NodeInputs;
use quorum_core::ir::Node;
use quorum_core::ops::OpCtx;
use quorum_core::tensor::DType;

pub fn claim(node: &Node) -> Option<Result<WgpuKernel, String>> {
    match node.op_type.as_str() {
        "Cast" | "CastLike" => Some(Ok(k_cast as WgpuKernel)),
        _ => None,
    }
}

/// Exact conversions used by the cast kernel.
const CONVERT: &str = r#"
fn u2f(v: u32) -> f32 {
  if (v < 0x1000000u) { return f32(v); }
  let sh = firstLeadingBit(v) - 23u;
  let m = v >> sh;
  let r = v & ((1u << sh) - 1u);
  let h = 1u << (sh - 1u);
  var mm = m;
  if (r > h || (r == h && (m & 1u) == 1u)) { mm = m + 1u; }
  return ldexp(f32(mm), i32(sh));
}
fn i2f(v: i32) -> f32 {
  let a = select(u32(v), 0u - u32(v), v < 0i);
  let f = u2f(a);
  return select(f, -f, v < 0i);
}
fn f2i(x: f32) -> u32 {
  let b = bitcast<u32>(x);
  let e = i32((b >> 23u) & 0xffu) - 127;
  if (e == 128 || e < 0) { return 0u; }
  let m = (b & 0x7fffffu) | 0x800000u;
  var v = 0u;
  if (e <= 23) { v = m >> u32(23 - e); } else if (e < 55) { v = m << u32(e - 23); }
  return select(v, 0u - v, (b & 0x80000000u) != 0u);
}
"#;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Float,
    Signed,
    Unsigned,
    Bool,
}

fn class(d: DType) -> Option<(Class, usize)> {
    Some(match d {
        DType::F32 | DType::F16 | DType::BF16 => (Class::Float, 1),
        DType::I8 | DType::I16 | DType::I32 => (Class::Signed, 1),
        DType::I64 => (Class::Signed, 2),
        DType::U8 | DType::U16 | DType::U32 => (Class::Unsigned, 1),
        DType::U64 => (Class::Unsigned, 2),
        DType::Bool => (Class::Bool, 1),
        _ => return None,
    })
}

fn k_cast(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let x = dev(inputs, 0)?;
    let to = if ctx.node.op_type == "CastLike" {
        inputs
            .dtype(1)
            .ok_or_else(|| super::invalid("CastLike needs its second input"))?
    } else {
        quorum_core::ops::cast::to_attr(ctx)?
    };
    Ok(vec![cast(run, &x, to)?])
}

/// `x` converted to `to` on the device.
pub fn cast(run: &Run, x: &WTensor, to: DType) -> KResult<WTensor> {
    let from = x.dtype;
    let (Some((fc, fw)), Some((tc, tw))) = (class(from), class(to)) else {
        decline!(
            "Cast from {from} to {to}: the WGSL kernel takes f32, f16, bf16, integers and bool"
        );
    };
    if from == to {
        let out = run.alloc(to, &x.shape)?;
        super::movement::copy(run, x, &out)?;
        return Ok(out);
    }
    if fc == Class::Float && tw == 2 {
        decline!("Cast from {from} to {to}: floats to 64-bit integers stay on the CPU");
    }
    if to == DType::BF16 && fc != Class::Float && fc != Class::Bool {
        decline!("Cast from {from} to bf16 stays on the CPU");
    }
    let n = u32_len(&x.shape)?;
    let out = run.alloc(to, &x.shape)?;
    // The source as words: `w` (low) and `hi` (the high word of a 64-bit integer).
    let read = if fw == 2 {
        "let w = i0[2u * i]; let hi = i0[2u * i + 1u];"
    } else {
        "let w = i0[i]; let hi = select(0u, 0xffffffffu, (w & 0x80000000u) != 0u);"
    };
    // The value as f32 (float targets), or as the low word of the integer (integer targets).
    let value = match (fc, tc) {
        (Class::Bool, Class::Float) => "select(0.0, 1.0, w != 0u)".to_string(),
        (Class::Bool, _) => "w".to_string(),
        (Class::Float, Class::Bool) => format!("select(0u, 1u, {} != 0.0)", wgsl::load(from, "w")),
        (Class::Float, Class::Float) => wgsl::load(from, "w"),
        (Class::Float, _) => format!("f2i({})", wgsl::load(from, "w")),
        (_, Class::Bool) if fw == 2 => "select(0u, 1u, w != 0u || hi != 0u)".into(),
        (_, Class::Bool) => "select(0u, 1u, w != 0u)".into(),
        (Class::Signed, Class::Float) if fw == 1 => "i2f(bitcast<i32>(w))".into(),
        (Class::Unsigned, Class::Float) if fw == 1 => "u2f(w)".into(),
        (_, Class::Float) => {
            decline!("Cast from {from} to {to}: 64-bit integers to floats stay on the CPU")
        }
        _ => "w".into(),
    };
    let store = match (tc, to) {
        (Class::Float, _) => wgsl::store(to, &value),
        (Class::Bool, _) => value.clone(),
        (_, DType::I8) | (_, DType::I16) | (_, DType::I32) => {
            wgsl::store(to, &format!("bitcast<i32>({value})"))
        }
        _ => wgsl::store(to, &value),
    };
    let write = if tw == 2 {
        // Widening to 64 bits: the high word is the sign fill of a signed source, else 0; a 64-bit
        // source keeps its own.
        let hi = match (fc, fw) {
            (_, 2) => "hi",
            (Class::Signed, _) => "select(0u, 0xffffffffu, (bitcast<i32>(lo) < 0i))",
            _ => "0u",
        };
        format!("let lo = {store}; o0[2u * i] = lo; o0[2u * i + 1u] = {hi};")
    } else {
        format!("o0[i] = {store};")
    };
    let half = if wgsl::needs_half(&[from, to]) {
        wgsl::HALF
    } else {
        ""
    };
    let src = format!(
        "{}{half}{CONVERT}{}",
        wgsl::header(1, 1),
        wgsl::entry_1d(&format!("{read}\n{write}"))
    );
    run.dispatch_n("cast", &src, &[&out], &[x], vec![n], n as usize)?;
    Ok(out)
}
