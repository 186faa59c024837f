//! CUDA kernels: QuantizeLinear and DequantizeLinear per tensor or per axis (the activations of a
//! QDQ model: a weight's DequantizeLinear folds at session build), one thread per element, with
//! the CPU kernel's layout and type rules (`quorum_core::ops::quantize`):
//! - QuantizeLinear of f32, f16, bf16 or i32 by an f32 scale to u8, i8, u16 or i16: the input
//!   rounded to f32 (exact but for i32), `div.rn.f32` (the correctly rounded quotient: the CPU's
//!   f32 precision), `cvt.rni` (ties to even; NaN gives 0, beyond ±2³¹ saturates), plus the zero
//!   point, clamped to the type;
//! - DequantizeLinear of 8- and 16-bit integers: `(x − zero point)` is exact, its product with the
//!   scale is rounded once to the output type (in f32 for an f32 output, in f64, where it is exact,
//!   for f16; bf16 from 8-bit inputs only, whose product f32 holds exactly).
//!
//! Blocked scales, other precisions and types, and int32 inputs to DequantizeLinear (a bias: its
//! product can exceed f64's exact range) decline to the CPU with the reason.
use super::cast::{Kind, kind, load_value, size};
use super::{require_u32_len, thread_index};
use crate::decline;
use crate::driver::Arg;
use crate::ptx::{Kernel, Reg, Space, Ty, module};
use crate::{DevTensor, Inputs, KResult, Run, blocks, dev_input};
use quorum_core::ops::OpCtx;
use quorum_core::ops::quantize::{
    Layout, block_size, dequantized_type, division_type, int_range, quantized_type,
};
use quorum_core::tensor::DType;

/// The scale's layout and the optional zero point, checked against the CPU's rules.
fn parameters(
    ctx: &OpCtx,
    inputs: &dyn Inputs,
    x: &DevTensor,
) -> KResult<(DevTensor, Option<DevTensor>, Layout)> {
    let scale = dev_input(inputs, 1)?;
    let zp = if inputs.present(2) {
        Some(dev_input(inputs, 2)?)
    } else {
        None
    };
    let block = block_size(ctx)?;
    if block > 0 {
        decline!("blocked quantization (block_size {block}) runs on the CPU");
    }
    let lay = Layout::new(
        &x.shape,
        &scale.shape,
        zp.as_ref().map(|z| z.shape.as_slice()),
        ctx.attr_i("axis", 1)?,
        block,
    )?;
    if scale.dtype != DType::F32 {
        decline!(
            "a {} scale runs on the CPU (the kernel takes f32)",
            scale.dtype
        );
    }
    Ok((scale, zp, lay))
}

/// Per-axis kernels take (inner, dim) to find an element's scale; per-tensor ones read element 0.
fn layout_args(lay: &Layout) -> KResult<[Arg; 2]> {
    let u = |v: usize| {
        u32::try_from(v)
            .map_err(|_| crate::KError::Decline(format!("a dim of {v} exceeds 32-bit indexing")))
    };
    Ok([Arg::U32(u(lay.inner)?), Arg::U32(u(lay.d.max(1))?)])
}

pub(super) fn k_quantize(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let x = dev_input(inputs, 0)?;
    let (scale, zp, lay) = parameters(ctx, inputs, &x)?;
    let out = quantized_type(ctx, zp.as_ref().map(|z| z.dtype))?;
    let Some((lo, hi)) =
        int_range(out).filter(|_| matches!(out, DType::U8 | DType::I8 | DType::U16 | DType::I16))
    else {
        decline!("QuantizeLinear to {out} runs on the CPU");
    };
    if !matches!(x.dtype, DType::F32 | DType::F16 | DType::BF16 | DType::I32) {
        decline!("QuantizeLinear of {} runs on the CPU", x.dtype);
    }
    let prec = division_type(ctx, x.dtype, scale.dtype)?;
    if prec != DType::F32 {
        decline!("a quotient in {prec} runs on the CPU (the kernel divides in f32)");
    }
    let n = require_u32_len(&x.shape)?;
    let y = run.alloc(out, &x.shape)?;
    if n == 0 {
        return Ok(vec![y]);
    }
    let (src, dst) = (kind_of(x.dtype)?, kind_of(out)?);
    let k = quantize_kernel(src, dst, zp.is_some(), !lay.single, (lo, hi));
    launch(run, k, "quantize", [&y, &x, &scale], zp.as_ref(), n, &lay)?;
    Ok(vec![y])
}

/// Launches a quantize or dequantize kernel over `n` elements: (y, x, scale, zero point or the
/// scale again when there is none, n, inner, dim).
fn launch(
    run: &Run,
    k: Kernel,
    name: &str,
    [y, x, scale]: [&DevTensor; 3],
    zp: Option<&DevTensor>,
    n: u32,
    lay: &Layout,
) -> KResult<()> {
    let ptx = module(run.cc(), &[k]);
    let [inner, dim] = layout_args(lay)?;
    run.launch(
        &ptx,
        name,
        (blocks(n as usize, 256), 1, 1),
        (256, 1, 1),
        0,
        &[
            y.arg_out(),
            x.arg_in(),
            scale.arg_in(),
            // Without a zero point the kernel never dereferences the (then unused) pointer.
            zp.map_or(Arg::In(scale.ptr(), 0), DevTensor::arg_in),
            Arg::U32(n),
            inner,
            dim,
        ],
    )
}

pub(super) fn k_dequantize(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let x = dev_input(inputs, 0)?;
    let (scale, zp, lay) = parameters(ctx, inputs, &x)?;
    if let Some(z) = &zp
        && z.dtype != x.dtype
    {
        decline!(
            "zero point type {} differs from input type {}",
            z.dtype,
            x.dtype
        );
    }
    let wide = match x.dtype {
        DType::U8 | DType::I8 => false,
        DType::U16 | DType::I16 => true,
        d => decline!("DequantizeLinear of {d} runs on the CPU"),
    };
    let out = dequantized_type(ctx, scale.dtype)?;
    if !(out == DType::F32 || out == DType::F16 || (out == DType::BF16 && !wide)) {
        decline!("DequantizeLinear of {} to {out} runs on the CPU", x.dtype);
    }
    let n = require_u32_len(&x.shape)?;
    let y = run.alloc(out, &x.shape)?;
    if n == 0 {
        return Ok(vec![y]);
    }
    let k = dequantize_kernel(kind_of(x.dtype)?, out, zp.is_some(), !lay.single);
    launch(run, k, "dequantize", [&y, &x, &scale], zp.as_ref(), n, &lay)?;
    Ok(vec![y])
}

fn kind_of(d: DType) -> KResult<Kind> {
    match kind(d) {
        Some(k) => Ok(k),
        None => decline!("{d} is not held on the device"),
    }
}

/// An integer element as s64 (sign- or zero-extended).
fn int_value(k: &mut Kernel, src: Kind, a: Reg) -> Reg {
    let v = load_value(k, src, a);
    match v {
        super::cast::Val::Int { v, .. } => k.bitcast(Ty::S64, v),
        super::cast::Val::Float { .. } => unreachable!("an integer kind"),
    }
}

/// Stores the low bits of an s64 at `a` as a `dst` integer.
fn store_int(k: &mut Kernel, dst: Kind, a: Reg, v: Reg) {
    let bits = k.bitcast(Ty::U64, v);
    let w = k.cvt(Ty::U16, Ty::U64, "", bits);
    match dst {
        Kind::Int { bytes: 1, .. } => k.st_u8(Space::Global, a, 0, w),
        _ => k.st(Space::Global, a, 0, w),
    }
}

/// The registers both kernels start from: the output, input and zero-point pointers, the element
/// `i` (threads past `n` exit), its parameter index `j` (0 per tensor; `(i / inner) % dim` per
/// axis) and its scale `s`. Parameters: y, x, scale, zp, n, inner, dim.
struct Prologue {
    yp: Reg,
    xp: Reg,
    zpp: Reg,
    i: Reg,
    j: Reg,
    s: Reg,
}

fn prologue(k: &mut Kernel, per_axis: bool) -> Prologue {
    let yp = k.param_ptr("y");
    let xp = k.param_ptr("x");
    let sp = k.param_ptr("scale");
    let zpp = k.param_ptr("zp");
    let n = k.param("n", Ty::U32);
    let inner = k.param("inner", Ty::U32);
    let dim = k.param("dim", Ty::U32);
    let i = thread_index(k, n);
    let j = if per_axis {
        let q = k.div(Ty::U32, i, inner);
        k.rem(Ty::U32, q, dim)
    } else {
        k.mov(Ty::U32, 0u32)
    };
    let sa = k.addr(sp, j, 4);
    let s = k.ld_nc(Ty::F32, sa, 0);
    Prologue {
        yp,
        xp,
        zpp,
        i,
        j,
        s,
    }
}

pub(super) fn quantize_kernel(
    src: Kind,
    dst: Kind,
    zp: bool,
    per_axis: bool,
    (lo, hi): (i64, i64),
) -> Kernel {
    let mut k = Kernel::new("quantize");
    let Prologue {
        yp,
        xp,
        zpp,
        i,
        j,
        s,
    } = prologue(&mut k, per_axis);
    let xa = k.addr(xp, i, size(src));
    let x = match load_value(&mut k, src, xa) {
        super::cast::Val::Float { f32: Some(f), .. } => f,
        super::cast::Val::Float { f64, .. } => k.cvt(Ty::F32, Ty::F64, ".rn", f64),
        super::cast::Val::Int { v, signed } => {
            k.cvt(Ty::F32, if signed { Ty::S64 } else { Ty::U64 }, ".rn", v)
        }
    };
    let q = k.div(Ty::F32, x, s);
    // Ties to even; NaN gives 0 and beyond ±2^31 saturates (the CPU's `as` conversion).
    let r = k.cvt(Ty::S32, Ty::F32, ".rni", q);
    let r = k.cvt(Ty::S64, Ty::S32, "", r);
    let r = if zp {
        let za = k.addr(zpp, j, size(dst));
        let z = int_value(&mut k, dst, za);
        k.add(Ty::S64, r, z)
    } else {
        r
    };
    let r = k.max(Ty::S64, r, lo);
    let r = k.min(Ty::S64, r, hi);
    let ya = k.addr(yp, i, size(dst));
    store_int(&mut k, dst, ya, r);
    k
}

pub(super) fn dequantize_kernel(src: Kind, out: DType, zp: bool, per_axis: bool) -> Kernel {
    let mut k = Kernel::new("dequantize");
    let Prologue {
        yp,
        xp,
        zpp,
        i,
        j,
        s,
    } = prologue(&mut k, per_axis);
    let xa = k.addr(xp, i, size(src));
    let v = int_value(&mut k, src, xa);
    let v = if zp {
        let za = k.addr(zpp, j, size(src));
        let z = int_value(&mut k, src, za);
        k.sub(Ty::S64, v, z)
    } else {
        v
    };
    // |x − zero point| < 2^17: exact in f32 and f64.
    match out {
        DType::F32 => {
            let f = k.cvt(Ty::F32, Ty::S64, ".rn", v);
            let y = k.mul(Ty::F32, f, s);
            let ya = k.addr(yp, i, 4);
            k.st(Space::Global, ya, 0, y);
        }
        DType::BF16 => {
            // 9 bits times 8: exact in f32, rounded once to bf16.
            let f = k.cvt(Ty::F32, Ty::S64, ".rn", v);
            let p = k.mul(Ty::F32, f, s);
            let y = k.reg(Ty::U16);
            k.raw(format_args!("cvt.rn.bf16.f32 {y}, {p}"));
            let ya = k.addr(yp, i, 2);
            k.st(Space::Global, ya, 0, y);
        }
        _ => {
            // f16: 17 bits times 24 is exact in f64, rounded once to f16.
            let f = k.cvt(Ty::F64, Ty::S64, ".rn", v);
            let s64 = k.cvt(Ty::F64, Ty::F32, "", s);
            let p = k.mul(Ty::F64, f, s64);
            let y = k.cvt(Ty::F16, Ty::F64, ".rn", p);
            let ya = k.addr(yp, i, 2);
            k.st(Space::Global, ya, 0, y);
        }
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(d: DType) -> Kind {
        kind(d).unwrap()
    }

    /// The quotient is IEEE's and its rounding ties to even: no approximate division, no other
    /// rounding mode; the zero point is read only when there is one.
    #[test]
    fn quantize_divides_exactly_and_rounds_to_even() {
        for zp in [false, true] {
            let t = module(
                (9, 0),
                &[quantize_kernel(
                    k(DType::F16),
                    k(DType::I8),
                    zp,
                    true,
                    (-128, 127),
                )],
            );
            assert!(t.contains("div.rn.f32"), "{t}");
            assert!(t.contains("cvt.rni.s32.f32"), "{t}");
            assert!(!t.contains("approx") && !t.contains("div.full"), "{t}");
            assert!(t.contains("st.global.u8"), "{t}");
            let loads = t.lines().filter(|l| l.contains("ld.global")).count();
            assert_eq!(loads, 2 + zp as usize, "{t}");
        }
        let t = module(
            (9, 0),
            &[quantize_kernel(
                k(DType::F32),
                k(DType::U16),
                false,
                false,
                (0, 65535),
            )],
        );
        assert!(t.contains("st.global.u16"), "{t}");
        assert!(
            !t.contains("rem.u32"),
            "per tensor: no index arithmetic\n{t}"
        );
    }

    /// Dequantization rounds once: in f32 for f32, through f64 for f16 (16-bit inputs times an f32
    /// scale need 41 bits).
    #[test]
    fn dequantize_rounds_once() {
        let t = module(
            (9, 0),
            &[dequantize_kernel(k(DType::U8), DType::F32, true, false)],
        );
        assert!(t.contains("mul.rn.f32") && !t.contains("f64"), "{t}");
        let t = module(
            (9, 0),
            &[dequantize_kernel(k(DType::I16), DType::F16, true, true)],
        );
        assert!(
            t.contains("mul.rn.f64") && t.contains("cvt.rn.f16.f64"),
            "{t}"
        );
        assert!(
            !t.contains("cvt.rn.f32.f64"),
            "no double rounding through f32\n{t}"
        );
    }
}
