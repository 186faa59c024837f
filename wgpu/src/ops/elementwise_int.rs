//! WGSL elementwise kernels on integer tensors of up to 32 bits: Add, Sub, Mul, Div, Mod, PRelu,
//! BitShift, Sum, Max, Min, Abs, Neg, Sign, Relu, computing what the CPU kernels compute, bit for
//! bit. Elements are held in i32 or u32 (sign- or zero-extended on the device); sums, differences,
//! products and negations wrap, and the store keeps the element type's low bits. Division truncates
//! toward zero; WGSL defines `MIN / -1` as `MIN` (the CPU's wrapping result) and `x % -1` as 0. A
//! zero divisor anywhere is the CPU's error "integer division by zero": the kernel sets a flag word,
//! read back after the launch. 64-bit integers are declined (no 64-bit arithmetic is assumed).
use super::elementwise::{map, require_prelu_slope};
use super::{decline, invalid};
use crate::memory::WTensor;
use crate::run::{KResult, Run};
use crate::wgsl::{self, Kind};
use quorum_core::ops::map_op::{Arith, Fold, MapOp};
use quorum_core::ops::unary_op::UnaryOp;
use quorum_core::tensor::DType;

/// Bits of an element type.
fn width(d: DType) -> u32 {
    match d {
        DType::I8 | DType::U8 | DType::Bool => 8,
        DType::I16 | DType::U16 => 16,
        _ => 32,
    }
}

/// An integer node of the map family (`op`, parsed as `desc`) over operands `ts` of kind `k`.
pub(super) fn map_int(
    run: &Run,
    op: &str,
    desc: MapOp,
    ts: &[WTensor],
    k: Kind,
) -> KResult<Vec<WTensor>> {
    let d = ts[0].dtype;
    for x in &ts[1..] {
        if x.dtype != d {
            decline!(
                "{op} operands {d} and {}: the CPU kernel refuses mixed types",
                x.dtype
            );
        }
    }
    let t = wgsl::ty(k);
    let refs: Vec<&WTensor> = ts.iter().collect();
    let zero = if k == Kind::Int { "0i" } else { "0u" };
    let f = match desc {
        MapOp::Arith(a @ (Arith::Add | Arith::Sub | Arith::Mul)) => {
            desc.check_arity(op, ts.len())?;
            let o = match a {
                Arith::Add => "+",
                Arith::Sub => "-",
                Arith::Mul | Arith::Div => "*",
            };
            format!("fn f(a0: {t}, a1: {t}) -> {t} {{ return a0 {o} a1; }}")
        }
        MapOp::PRelu => {
            desc.check_arity(op, ts.len())?;
            require_prelu_slope(&ts[0], &ts[1])?;
            format!("fn f(a0: {t}, a1: {t}) -> {t} {{ return select(a0, a0 * a1, a0 < {zero}); }}")
        }
        MapOp::Arith(Arith::Div) => {
            desc.check_arity(op, ts.len())?;
            return divide(run, &refs, t, k, None).map(|o| vec![o]);
        }
        MapOp::Mod { fmod } => {
            desc.check_arity(op, ts.len())?;
            return divide(run, &refs, t, k, Some(fmod)).map(|o| vec![o]);
        }
        MapOp::BitShift { left } => {
            desc.check_arity(op, ts.len())?;
            let w = width(d);
            let fill = if !left && k == Kind::Int {
                "select(0i, -1i, a0 < 0i)"
            } else {
                zero
            };
            let shifted = if left {
                "a0 << u32(a1)"
            } else {
                "a0 >> u32(a1)"
            };
            // An amount outside [0, width) (compared unsigned) gives the sign fill alone; WGSL
            // would take the amount modulo 32.
            format!(
                "fn f(a0: {t}, a1: {t}) -> {t} {{ if (u32(a1) >= {w}u) {{ return {fill}; }} return {shifted}; }}"
            )
        }
        MapOp::Fold(f @ (Fold::Sum | Fold::Max | Fold::Min)) => {
            let params: Vec<String> = (0..ts.len()).map(|j| format!("a{j}: {t}")).collect();
            let mut body = String::new();
            for j in 1..ts.len() {
                body.push_str(&match f {
                    Fold::Sum | Fold::Mean => format!("acc = acc + a{j};\n"),
                    Fold::Max => format!("acc = max(acc, a{j});\n"),
                    Fold::Min => format!("acc = min(acc, a{j});\n"),
                });
            }
            format!(
                "fn f({}) -> {t} {{ var acc = a0;\n{body}return acc; }}",
                params.join(", ")
            )
        }
        MapOp::Unary(u @ (UnaryOp::Abs | UnaryOp::Neg | UnaryOp::Sign | UnaryOp::Relu)) => {
            desc.check_arity(op, ts.len())?;
            let e = match (u, k) {
                (UnaryOp::Neg, _) => format!("{zero} - a0"),
                (UnaryOp::Sign, Kind::Int) => {
                    "select(select(0i, 1i, a0 > 0i), -1i, a0 < 0i)".into()
                }
                (UnaryOp::Sign, _) => "select(0u, 1u, a0 > 0u)".into(),
                (_, Kind::Uint) => "a0".into(),
                (UnaryOp::Abs, _) => "select(a0, 0i - a0, a0 < 0i)".into(),
                _ => "select(a0, 0i, a0 < 0i)".into(),
            };
            format!("fn f(a0: {t}) -> {t} {{ return {e}; }}")
        }
        MapOp::Fold(Fold::Mean)
        | MapOp::Pow
        | MapOp::Not
        | MapOp::Logic(_)
        | MapOp::IsNaN
        | MapOp::IsInf { .. }
        | MapOp::Compare(_)
        | MapOp::Unary(_) => {
            decline!("{op} on {d}: no WGSL integer kernel (the CPU kernel decides)")
        }
    };
    Ok(vec![map(run, op, &refs, d, &f, "", &[], None)?])
}

/// Div (`modulo` None), or Mod (`Some(fmod)`), of two integer tensors, with the CPU's error for a
/// zero divisor.
fn divide(run: &Run, ts: &[&WTensor], t: &str, k: Kind, modulo: Option<bool>) -> KResult<WTensor> {
    let (rem, fmod) = (modulo.is_some(), modulo == Some(true));
    let (a, b) = (ts[0], ts[1]);
    if a.is_empty() && !b.is_empty() {
        decline!("an empty result: the CPU kernel still checks the divisor for zeros");
    }
    let flag = run.alloc(DType::U32, &[1])?;
    super::fill_words(run, &flag, 0, false)?;
    let one = if k == Kind::Int { "1i" } else { "1u" };
    let zero = if k == Kind::Int { "0i" } else { "0u" };
    let op = if rem { "%" } else { "/" };
    // Python's mod: a nonzero remainder whose sign differs from the divisor's moves by one divisor.
    let fix = if rem && !fmod && k == Kind::Int {
        "if (r != 0i && ((r < 0i) != (a1 < 0i))) { return r + a1; }"
    } else {
        ""
    };
    let f = format!(
        "fn f(a0: {t}, a1: {t}) -> {t} {{ if (a1 == {zero}) {{ o1[0] = 1u; }} \
         let r = a0 {op} select(a1, {one}, a1 == {zero}); {fix} return r; }}"
    );
    let out = map(
        run,
        if rem { "Mod" } else { "Div" },
        ts,
        a.dtype,
        &f,
        "",
        &[],
        Some(&flag),
    )?;
    let seen = run.download(&flag)?.to_i64_vec()?;
    run.release(flag);
    if seen.first().is_some_and(|&f| f != 0) {
        return Err(invalid("integer division by zero"));
    }
    Ok(out)
}
