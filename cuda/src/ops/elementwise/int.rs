//! CUDA elementwise kernels on integer and bool tensors (a child of `elementwise`, declared in
//! `elementwise.rs`): Add, Sub, Mul, Div, Mod, PRelu, BitShift, the comparisons, Sum, Max, Min,
//! Abs, Neg, Sign, Relu and Clip, computing what the CPU kernels (`quorum_core::ops::elementwise`)
//! compute, bit for bit.
//!
//! Elements of 8, 16 and 32 bits are computed in 32-bit registers (sign- or zero-extended as they
//! load), 64-bit ones in 64-bit registers, and a result keeps its low bits: sums, differences,
//! products and negations wrap as two's complement, as the CPU's `wrapping_*` do. Division truncates
//! toward zero and `x / -1` is formed as `0 - x`, so `MIN / -1` wraps to `MIN` as the CPU's does (no
//! division instruction sees it). The remainder takes the dividend's sign (`fmod=1`) or the divisor's
//! (`fmod=0`). Shifts by a negative amount or one of at least the width give the sign fill alone.
//!
//! A zero divisor anywhere makes the CPU's Div and Mod an error ("integer division by zero"), a fact
//! about the data: the kernel sets a flag word where it meets one, and the flag is read back after the
//! launch (four bytes, which waits for the stream) to give the same error.
use super::{Io, Param, map_kernel_with, require_prelu_slope};
use crate::decline;
use crate::driver::Arg;
use crate::ptx::{Cmp, Kernel, Reg, Space, Ty};
use crate::{DevTensor, Inputs, KError, KResult, Run};
use quorum_core::error::OpError;
use quorum_core::ops::OpCtx;
use quorum_core::ops::map_op::{Arith, Fold, MapOp};
use quorum_core::ops::unary_op::UnaryOp;
use quorum_core::tensor::DType;

/// How an integer or bool element is held in a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct IntTy {
    /// The register type: S32 or U32 for elements of up to 32 bits (bool is U32), S64 or U64 above.
    pub reg: Ty,
    /// The element's width in memory.
    pub bytes: usize,
    pub signed: bool,
}

/// The kernels' view of `d`, `None` for the float types.
pub(super) fn int_ty(d: DType) -> Option<IntTy> {
    let (reg, bytes, signed) = match d {
        DType::I8 => (Ty::S32, 1, true),
        DType::I16 => (Ty::S32, 2, true),
        DType::I32 => (Ty::S32, 4, true),
        DType::I64 => (Ty::S64, 8, true),
        DType::U8 | DType::Bool => (Ty::U32, 1, false),
        DType::U16 => (Ty::U32, 2, false),
        DType::U32 => (Ty::U32, 4, false),
        DType::U64 => (Ty::U64, 8, false),
        _ => return None,
    };
    Some(IntTy { reg, bytes, signed })
}

fn int_of(d: DType) -> KResult<IntTy> {
    int_ty(d).ok_or_else(|| KError::Decline(format!("{d} is not an integer type")))
}

/// Reads an integer or bool operand into its register type, sign- or zero-extended.
pub(super) fn load(k: &mut Kernel, base: Reg, off: Reg, dtype: DType) -> KResult<Reg> {
    let t = int_of(dtype)?;
    let a = k.addr(base, off, t.bytes);
    Ok(match t.bytes {
        1 | 2 => {
            let raw_ty = if t.bytes == 1 { Ty::U8 } else { Ty::U16 };
            let raw = k.ld_nc(raw_ty, a, 0);
            if t.signed {
                let r = k.reg(Ty::S32);
                let from = if t.bytes == 1 { "s8" } else { "s16" };
                k.raw(format_args!("cvt.s32.{from} {r}, {raw}"));
                r
            } else {
                k.cvt(Ty::U32, raw_ty, "", raw)
            }
        }
        _ => k.ld_nc(t.reg, a, 0),
    })
}

/// Writes the low bits of `v` (of the dtype's register type) as a `dtype` element; a bool result is a
/// 0/1 value in a 16-bit register (`selp.b16`), as the float kernels store theirs.
pub(super) fn store(k: &mut Kernel, base: Reg, i: Reg, dtype: DType, v: Reg) -> KResult<()> {
    if dtype == DType::Bool {
        let a = k.addr(base, i, 1);
        k.st_u8(Space::Global, a, 0, v);
        return Ok(());
    }
    let t = int_of(dtype)?;
    let a = k.addr(base, i, t.bytes);
    match t.bytes {
        1 | 2 => {
            let u = if v.ty == Ty::U32 {
                v
            } else {
                k.bitcast(Ty::U32, v)
            };
            let h = k.cvt(Ty::U16, Ty::U32, "", u);
            if t.bytes == 1 {
                k.st_u8(Space::Global, a, 0, h);
            } else {
                k.st(Space::Global, a, 0, h);
            }
        }
        _ => k.st(Space::Global, a, 0, v),
    }
    Ok(())
}

/// The kernel for an integer or bool node of the `elementwise` family that `k_map` dispatches (`op`,
/// parsed as `desc`), or `None` when the first operand is a float (the float kernels take it). Forms
/// the CPU refuses (mixed dtypes, float-only ops, Mean) are declined, so that the CPU gives its error.
pub(super) fn map(
    run: &Run,
    op: &str,
    desc: MapOp,
    ts: &[DevTensor],
) -> KResult<Option<DevTensor>> {
    let d = ts[0].dtype;
    let Some(t) = int_ty(d) else {
        return Ok(None);
    };
    let compare = matches!(desc, MapOp::Compare(_));
    if desc.is_logic() || (d == DType::Bool && !compare) {
        // The logic kernels take bool; other ops on bool decline in the float dispatch.
        return Ok(None);
    }
    for x in &ts[1..] {
        if x.dtype != d {
            decline!(
                "{op} operands {d} and {}: the CPU kernel refuses mixed types",
                x.dtype
            );
        }
    }
    let out = match desc {
        MapOp::Compare(c) => {
            desc.check_arity(op, ts.len())?;
            let c = super::compare(c);
            map_kernel_with(run, ts, DType::Bool, Io::Int, vec![], &|k, v, _| {
                let p = k.setp(c, t.reg, v[0], v[1]);
                Ok(k.selp(Ty::U16, 1u32, 0u32, p))
            })?
        }
        MapOp::Arith(Arith::Div) => {
            desc.check_arity(op, ts.len())?;
            return divide(run, ts, t, false, false).map(Some);
        }
        MapOp::Mod { fmod } => {
            desc.check_arity(op, ts.len())?;
            return divide(run, ts, t, true, fmod).map(Some);
        }
        MapOp::Arith(a @ (Arith::Add | Arith::Sub | Arith::Mul)) => {
            desc.check_arity(op, ts.len())?;
            map_kernel_with(run, ts, d, Io::Int, vec![], &|k, v, _| {
                Ok(match a {
                    Arith::Add => k.add(t.reg, v[0], v[1]),
                    Arith::Sub => k.sub(t.reg, v[0], v[1]),
                    Arith::Mul | Arith::Div => k.mul(t.reg, v[0], v[1]),
                })
            })?
        }
        MapOp::BitShift { left } => {
            desc.check_arity(op, ts.len())?;
            map_kernel_with(run, ts, d, Io::Int, vec![], &|k, v, _| {
                Ok(shift(k, t, v[0], v[1], left))
            })?
        }
        MapOp::PRelu => {
            desc.check_arity(op, ts.len())?;
            require_prelu_slope(&ts[0], &ts[1])?;
            map_kernel_with(run, ts, d, Io::Int, vec![], &|k, v, _| {
                let (x, y) = (v[0], v[1]);
                Ok(if t.signed {
                    let sx = k.mul(t.reg, x, y);
                    let neg = k.setp(Cmp::Lt, t.reg, x, 0u32);
                    k.selp(t.reg, sx, x, neg)
                } else {
                    x
                })
            })?
        }
        MapOp::Fold(f @ (Fold::Sum | Fold::Max | Fold::Min)) => {
            map_kernel_with(run, ts, d, Io::Int, vec![], &|k, v, _| {
                let mut acc = v[0];
                for &x in &v[1..] {
                    acc = match f {
                        Fold::Sum | Fold::Mean => k.add(t.reg, acc, x),
                        Fold::Max => k.max(t.reg, acc, x),
                        Fold::Min => k.min(t.reg, acc, x),
                    };
                }
                Ok(acc)
            })?
        }
        MapOp::Unary(u @ (UnaryOp::Abs | UnaryOp::Neg | UnaryOp::Sign | UnaryOp::Relu)) => {
            desc.check_arity(op, ts.len())?;
            map_kernel_with(run, ts, d, Io::Int, vec![], &|k, v, _| {
                Ok(unary(k, t, u, v[0]))
            })?
        }
        MapOp::Fold(Fold::Mean)
        | MapOp::Pow
        | MapOp::Not
        | MapOp::Logic(_)
        | MapOp::IsNaN
        | MapOp::IsInf { .. }
        | MapOp::Unary(_) => {
            decline!("{op} on {d}: no CUDA integer kernel (the CPU kernel decides)")
        }
    };
    Ok(Some(out))
}

/// `0 - x`, wrapping.
fn neg(k: &mut Kernel, t: IntTy, x: Reg) -> Reg {
    let z = k.mov(t.reg, 0u32);
    k.sub(t.reg, z, x)
}

/// Abs, Neg, Sign or Relu of `x` (unsigned values are their own Abs and Relu; any other op is
/// declined before this is called).
fn unary(k: &mut Kernel, t: IntTy, op: UnaryOp, x: Reg) -> Reg {
    match op {
        UnaryOp::Neg => neg(k, t, x),
        UnaryOp::Sign => {
            let pos = k.setp(Cmp::Gt, t.reg, x, 0u32);
            let y = k.selp(t.reg, 1u32, 0u32, pos);
            if t.signed {
                let lt = k.setp(Cmp::Lt, t.reg, x, 0u32);
                k.selp(t.reg, -1i32, y, lt)
            } else {
                y
            }
        }
        UnaryOp::Abs if t.signed => {
            let n = neg(k, t, x);
            let lt = k.setp(Cmp::Lt, t.reg, x, 0u32);
            k.selp(t.reg, n, x, lt)
        }
        UnaryOp::Relu if t.signed => {
            let lt = k.setp(Cmp::Lt, t.reg, x, 0u32);
            k.selp(t.reg, 0u32, x, lt)
        }
        _ => x,
    }
}

/// `x` shifted by `y` (the CPU's `Bits::shift`): an amount outside `[0, width)` (compared unsigned,
/// so a negative amount is out of range too) gives the sign fill alone, -1 for a right shift of a
/// negative value and 0 otherwise; signed values shift right arithmetically.
fn shift(k: &mut Kernel, t: IntTy, x: Reg, y: Reg, left: bool) -> Reg {
    let wide = t.bytes == 8;
    let uty = if wide { Ty::U64 } else { Ty::U32 };
    let yu = if y.ty == uty { y } else { k.bitcast(uty, y) };
    let in_range = k.setp(Cmp::Lt, uty, yu, (t.bytes * 8) as u32);
    let amount = if wide {
        k.cvt(Ty::U32, Ty::U64, "", yu)
    } else {
        yu
    };
    let shifted = if left {
        k.shl(t.reg, x, amount)
    } else {
        k.shr(t.reg, x, amount)
    };
    let fill = if !left && t.signed {
        let lt = k.setp(Cmp::Lt, t.reg, x, 0u32);
        k.selp(t.reg, -1i32, 0u32, lt)
    } else {
        k.mov(t.reg, 0u32)
    };
    k.selp(t.reg, shifted, fill, in_range)
}

/// Div, or Mod with `fmod`, of two integer tensors, with the CPU's error for a zero divisor.
fn divide(run: &Run, ts: &[DevTensor], t: IntTy, rem: bool, fmod: bool) -> KResult<DevTensor> {
    let (a, b) = (&ts[0], &ts[1]);
    if a.is_empty() && !b.is_empty() {
        decline!("an empty result: the CPU kernel still checks the divisor for zeros");
    }
    let flag = run.alloc(DType::U32, &[1])?;
    run.fill32(&flag, 0, 1)?;
    let out = map_kernel_with(
        run,
        ts,
        a.dtype,
        Io::Int,
        vec![Param::Ptr("flag", flag.clone())],
        &|k, v, extra| Ok(divide_expr(k, t, v[0], v[1], extra[0], rem, fmod)),
    )?;
    let seen = run.download(&flag)?.to_i64_vec()?;
    run.release(flag, &[]);
    if seen.first().is_some_and(|&f| f != 0) {
        return Err(KError::Op(OpError::Invalid(
            "integer division by zero".into(),
        )));
    }
    Ok(out)
}

/// `x / y` truncated, or the remainder with the sign of `x` (`fmod`) or of `y`. A zero `y` sets the
/// word at `flag`; the divide then sees 1 (as it does for `y = -1`, whose quotient is `0 - x` and
/// remainder 0), so no division instruction meets a zero or an overflowing quotient.
fn divide_expr(k: &mut Kernel, t: IntTy, x: Reg, y: Reg, flag: Reg, rem: bool, fmod: bool) -> Reg {
    let zero = k.setp(Cmp::Eq, t.reg, y, 0u32);
    k.when(zero, |k| {
        let one = k.mov(Ty::U32, 1u32);
        k.st(Space::Global, flag, 0, one);
    });
    let minus_one = t.signed.then(|| k.setp(Cmp::Eq, t.reg, y, -1i32));
    let unsafe_y = match minus_one {
        Some(m) => k.pred_or(zero, m),
        None => zero,
    };
    let ys = k.selp(t.reg, 1u32, y, unsafe_y);
    if !rem {
        let q = k.div(t.reg, x, ys);
        return match minus_one {
            Some(m) => {
                let nx = neg(k, t, x);
                k.selp(t.reg, nx, q, m)
            }
            None => q,
        };
    }
    let r = k.rem(t.reg, x, ys);
    if fmod || !t.signed {
        return r;
    }
    // Python's mod: a nonzero remainder whose sign differs from the divisor's moves by one divisor.
    let nonzero = k.setp(Cmp::Ne, t.reg, r, 0u32);
    let rneg = k.setp(Cmp::Lt, t.reg, r, 0u32);
    let yneg = k.setp(Cmp::Lt, t.reg, y, 0u32);
    let differ = k.reg(Ty::Pred);
    k.raw(format_args!("xor.pred {differ}, {rneg}, {yneg}"));
    let fix = k.pred_and(nonzero, differ);
    let ry = k.add(t.reg, r, y);
    k.selp(t.reg, ry, r, fix)
}

/// The lowest and highest values of a register type: the bounds of an absent Clip limit.
fn reg_limits(t: IntTy) -> (u64, u64) {
    match t.reg {
        Ty::S32 => (i32::MIN as u32 as u64, i32::MAX as u64),
        Ty::U32 => (0, u32::MAX as u64),
        Ty::S64 => (i64::MIN as u64, i64::MAX as u64),
        _ => (0, u64::MAX),
    }
}

/// Clip (opset 11 on) of an integer tensor: `x < lo → lo`, then `x > hi → hi`, as the CPU kernel
/// orders them (so `lo > hi` gives `hi`). The bounds go in as kernel parameters, not immediates: a
/// 64-bit limit such as `i64::MIN` has no plain PTX literal.
pub(super) fn clip(
    ctx: &OpCtx,
    run: &Run,
    inputs: &dyn Inputs,
    x: DevTensor,
) -> KResult<DevTensor> {
    let t = int_of(x.dtype)?;
    if x.dtype == DType::Bool {
        decline!("Clip on bool: the CPU kernel refuses it");
    }
    if ctx.opset() < 11 {
        decline!(
            "Clip before opset 11 on {}: the CPU kernel takes floats only",
            x.dtype
        );
    }
    let (lo_default, hi_default) = reg_limits(t);
    // Sign- or zero-extended into the register type, as the kernel loads elements.
    let bound = |i: usize, default: u64| -> KResult<u64> {
        Ok(match super::clip_bound(inputs, i, x.dtype)? {
            Some(b) => b.to_i64_vec()?.first().map_or(default, |&v| v as u64),
            None => default,
        })
    };
    let (lo, hi) = (bound(1, lo_default)?, bound(2, hi_default)?);
    let arg = |v: u64| match t.reg {
        Ty::S32 | Ty::U32 => Arg::U32(v as u32),
        _ => Arg::U64(v),
    };
    let params = vec![
        Param::Scalar("lo", t.reg, arg(lo)),
        Param::Scalar("hi", t.reg, arg(hi)),
    ];
    map_kernel_with(
        run,
        std::slice::from_ref(&x),
        x.dtype,
        Io::Int,
        params,
        &|k, v, b| {
            let lt = k.setp(Cmp::Lt, t.reg, v[0], b[0]);
            let y = k.selp(t.reg, b[0], v[0], lt);
            let gt = k.setp(Cmp::Gt, t.reg, y, b[1]);
            Ok(k.selp(t.reg, b[1], y, gt))
        },
    )
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::ptx::module;

    /// Every integer and bool dtype the kernels take.
    pub const INT_DTYPES: [DType; 9] = [
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::Bool,
    ];

    /// A kernel reading two `d` operands at the thread index, applying `f`, storing `out`.
    pub fn sample(
        d: DType,
        out: DType,
        f: &dyn Fn(&mut Kernel, IntTy, Reg, Reg, Reg) -> Reg,
    ) -> String {
        let t = int_ty(d).unwrap();
        let mut k = Kernel::new("ew");
        let y = k.param_ptr("out");
        let a = k.param_ptr("in0");
        let b = k.param_ptr("in1");
        let n = k.param("n", Ty::U32);
        let i = crate::ops::thread_index(&mut k, n);
        let flag = k.param_ptr("flag");
        let x = load(&mut k, a, i, d).unwrap();
        let z = load(&mut k, b, i, d).unwrap();
        let r = f(&mut k, t, x, z, flag);
        store(&mut k, y, i, out, r).unwrap();
        module((9, 0), &[k])
    }

    /// The samples the golden digest pins: every integer op form over every integer dtype.
    pub fn int_modules() -> Vec<String> {
        let mut out = Vec::new();
        for d in INT_DTYPES {
            out.push(sample(d, DType::Bool, &|k, t, x, y, _| {
                let p = k.setp(Cmp::Le, t.reg, x, y);
                k.selp(Ty::U16, 1u32, 0u32, p)
            }));
            if d == DType::Bool {
                continue;
            }
            for op in [UnaryOp::Abs, UnaryOp::Neg, UnaryOp::Sign, UnaryOp::Relu] {
                out.push(sample(d, d, &|k, t, x, _, _| unary(k, t, op, x)));
            }
            for left in [true, false] {
                out.push(sample(d, d, &|k, t, x, y, _| shift(k, t, x, y, left)));
            }
            for (rem, fmod) in [(false, false), (true, false), (true, true)] {
                out.push(sample(d, d, &|k, t, x, y, f| {
                    divide_expr(k, t, x, y, f, rem, fmod)
                }));
            }
        }
        out
    }

    #[test]
    fn loads_and_stores_keep_their_widths() {
        for d in INT_DTYPES {
            let text = sample(d, d, &|k, t, x, y, _| {
                if d == DType::Bool {
                    let p = k.setp(Cmp::Eq, t.reg, x, y);
                    k.selp(Ty::U16, 1u32, 0u32, p)
                } else {
                    k.add(t.reg, x, y)
                }
            });
            let t = int_ty(d).unwrap();
            let (ld, st) = match (t.bytes, t.signed) {
                (1, true) => ("ld.global.nc.u8", "st.global.u8"),
                (1, false) => ("ld.global.nc.u8", "st.global.u8"),
                (2, _) => ("ld.global.nc.u16", "st.global.u16"),
                (4, true) => ("ld.global.nc.s32", "st.global.s32"),
                (4, false) => ("ld.global.nc.u32", "st.global.u32"),
                (_, true) => ("ld.global.nc.s64", "st.global.s64"),
                _ => ("ld.global.nc.u64", "st.global.u64"),
            };
            assert_eq!(text.matches(ld).count(), 2, "{d}\n{text}");
            assert_eq!(text.matches(st).count(), 1, "{d}\n{text}");
            if t.signed && t.bytes < 4 {
                assert!(
                    text.contains(&format!("cvt.s32.s{}", t.bytes * 8)),
                    "{d}\n{text}"
                );
            }
        }
    }

    #[test]
    fn division_never_sees_zero_or_minus_one() {
        let text = sample(DType::I32, DType::I32, &|k, t, x, y, f| {
            divide_expr(k, t, x, y, f, false, false)
        });
        assert!(
            text.contains("setp.eq.s32") && text.contains(", -1;"),
            "{text}"
        );
        assert!(text.contains("st.global.u32"), "{text}");
        assert!(text.contains("div.s32"), "{text}");
        let text = sample(DType::U64, DType::U64, &|k, t, x, y, f| {
            divide_expr(k, t, x, y, f, true, false)
        });
        assert!(
            text.contains("rem.u64") && !text.contains("xor.pred"),
            "{text}"
        );
        let text = sample(DType::I8, DType::I8, &|k, t, x, y, f| {
            divide_expr(k, t, x, y, f, true, false)
        });
        assert!(
            text.contains("rem.s32") && text.contains("xor.pred"),
            "{text}"
        );
    }

    #[test]
    fn shifts_compare_the_amount_unsigned() {
        let text = sample(DType::I64, DType::I64, &|k, t, x, y, _| {
            shift(k, t, x, y, false)
        });
        assert!(
            text.contains("setp.lo.u64") && text.contains("shr.s64"),
            "{text}"
        );
        assert!(text.contains("cvt.u32.u64"), "{text}");
        let text = sample(DType::U8, DType::U8, &|k, t, x, y, _| {
            shift(k, t, x, y, true)
        });
        assert!(
            text.contains("setp.lo.u32") && text.contains(", 8;"),
            "{text}"
        );
        assert!(text.contains("shl.b32"), "{text}");
    }
}
