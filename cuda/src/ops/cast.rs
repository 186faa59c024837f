//! CUDA kernel: Cast and CastLike (QuantizeLinear and DequantizeLinear, the family's other rows, are
//! `quantize.rs`'s) between the numeric dtypes the device holds (f64, f32, f16, bf16,
//! the integers and bool), one thread per element. The conversion rules are the CPU kernel's
//! (`quorum_core::ops::cast`): floats to integers truncate toward zero and keep the target's low bits
//! (two's complement wrap, as numpy), NaN and infinities give 0; integers narrow by their low bits;
//! to bool is `x != 0` (NaN is true); every float rounding is a single round-to-nearest-even from the
//! exact source value, except integers to f16, which round through f32 as the CPU does. Narrow float
//! formats, strings and integer or f64 sources to bf16 stay on the CPU.
use super::{require_u32_len, thread_index};
use crate::decline;
use crate::driver::Arg;
use crate::ptx::{Cmp, Kernel, Op, Reg, Space, Ty, module};
use crate::{CudaKernel, DevTensor, Inputs, KError, KResult, Run, blocks, dev_input};
use quorum_core::error::OpError;
use quorum_core::ir::Node;
use quorum_core::ops::OpCtx;
use quorum_core::tensor::DType;

/// The kernel for a Cast or CastLike node, None for other ops.
pub fn claim(node: &Node) -> Option<Result<CudaKernel, String>> {
    match node.op_type.as_str() {
        "Cast" | "CastLike" => Some(Ok(k_cast as CudaKernel)),
        "QuantizeLinear" => Some(Ok(super::quantize::k_quantize as CudaKernel)),
        "DequantizeLinear" => Some(Ok(super::quantize::k_dequantize as CudaKernel)),
        _ => None,
    }
}

/// How a dtype is held in the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    F64,
    F32,
    F16,
    Bf16,
    /// An integer of `bytes` bytes.
    Int {
        bytes: usize,
        signed: bool,
    },
    Bool,
}

pub(super) fn kind(d: DType) -> Option<Kind> {
    Some(match d {
        DType::F64 => Kind::F64,
        DType::F32 => Kind::F32,
        DType::F16 => Kind::F16,
        DType::BF16 => Kind::Bf16,
        DType::I8 => Kind::Int {
            bytes: 1,
            signed: true,
        },
        DType::I16 => Kind::Int {
            bytes: 2,
            signed: true,
        },
        DType::I32 => Kind::Int {
            bytes: 4,
            signed: true,
        },
        DType::I64 => Kind::Int {
            bytes: 8,
            signed: true,
        },
        DType::U8 => Kind::Int {
            bytes: 1,
            signed: false,
        },
        DType::U16 => Kind::Int {
            bytes: 2,
            signed: false,
        },
        DType::U32 => Kind::Int {
            bytes: 4,
            signed: false,
        },
        DType::U64 => Kind::Int {
            bytes: 8,
            signed: false,
        },
        DType::Bool => Kind::Bool,
        _ => return None,
    })
}

pub(super) fn size(k: Kind) -> usize {
    match k {
        Kind::F64 => 8,
        Kind::F32 => 4,
        Kind::F16 | Kind::Bf16 => 2,
        Kind::Int { bytes, .. } => bytes,
        Kind::Bool => 1,
    }
}

/// A loaded source element: its exact f64 value for floats (and its f32 value when the source is
/// at most f32 wide), or its 64-bit integer value.
pub(super) enum Val {
    Float { f64: Reg, f32: Option<Reg> },
    Int { v: Reg, signed: bool },
}

fn k_cast(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let x = dev_input(inputs, 0)?;
    let to = if ctx.node.op_type == "CastLike" {
        inputs.dtype(1).ok_or_else(|| {
            KError::Op(OpError::Invalid(
                "CastLike needs its target_type input".into(),
            ))
        })?
    } else {
        quorum_core::ops::cast::to_attr(ctx)?
    };
    if x.dtype == to {
        return Ok(vec![x]);
    }
    let (Some(src), Some(dst)) = (kind(x.dtype), kind(to)) else {
        decline!("Cast {} to {to} is done on the CPU", x.dtype);
    };
    if dst == Kind::Bf16 && !matches!(src, Kind::F32 | Kind::F16) {
        decline!("Cast {} to bfloat16 rounds from f64 on the CPU", x.dtype);
    }
    let n = require_u32_len(&x.shape)?;
    let out = run.alloc(to, &x.shape)?;
    if n == 0 {
        return Ok(vec![out]);
    }
    let k = cast_kernel(src, dst);
    let ptx = module(run.cc(), &[k]);
    run.launch(
        &ptx,
        "cast",
        (blocks(n as usize, 256), 1, 1),
        (256, 1, 1),
        0,
        &[out.arg_out(), x.arg_in(), Arg::U32(n)],
    )?;
    Ok(vec![out])
}

pub(super) fn load_value(k: &mut Kernel, src: Kind, a: Reg) -> Val {
    let widen = |k: &mut Kernel, f32: Reg| Val::Float {
        f64: k.cvt(Ty::F64, Ty::F32, "", f32),
        f32: Some(f32),
    };
    match src {
        Kind::F64 => Val::Float {
            f64: k.ld_nc(Ty::F64, a, 0),
            f32: None,
        },
        Kind::F32 => {
            let v = k.ld_nc(Ty::F32, a, 0);
            widen(k, v)
        }
        Kind::F16 => {
            let h = k.ld_nc(Ty::F16, a, 0);
            let v = k.cvt(Ty::F32, Ty::F16, "", h);
            widen(k, v)
        }
        Kind::Bf16 => {
            // A bfloat16 is the high half of the f32 with the same value.
            let h = k.ld_nc(Ty::U16, a, 0);
            let w = k.cvt(Ty::U32, Ty::U16, "", h);
            let w = k.shl(Ty::U32, w, 16u32);
            let v = k.bitcast(Ty::F32, w);
            widen(k, v)
        }
        Kind::Int { bytes, signed } => {
            let raw_ty = match bytes {
                1 => Ty::U8,
                2 => Ty::U16,
                4 => Ty::U32,
                _ => Ty::U64,
            };
            let raw = k.ld_nc(raw_ty, a, 0);
            let v = if signed {
                let r = k.reg(Ty::S64);
                let from = ["s8", "s16", "s32", "s64"][bytes.trailing_zeros() as usize];
                if bytes == 8 {
                    k.raw(format_args!("mov.b64 {r}, {raw}"));
                } else {
                    k.raw(format_args!("cvt.s64.{from} {r}, {raw}"));
                }
                r
            } else if bytes == 8 {
                raw
            } else {
                k.cvt(Ty::U64, raw_ty, "", raw)
            };
            Val::Int { v, signed }
        }
        Kind::Bool => {
            let raw = k.ld_nc(Ty::U8, a, 0);
            Val::Int {
                v: k.cvt(Ty::U64, Ty::U8, "", raw),
                signed: false,
            }
        }
    }
}

/// The integer's value rounded to the float type `to`.
fn int_to_float(k: &mut Kernel, to: Ty, v: Reg, signed: bool) -> Reg {
    k.cvt(to, if signed { Ty::S64 } else { Ty::U64 }, ".rn", v)
}

/// The low 64 bits of trunc(f) (f finite), 0 for NaN and infinities: `f as i128 as u64` exactly.
fn float_to_bits(k: &mut Kernel, f: Reg) -> Reg {
    let af = k.unary("abs", Ty::F64, f);
    let finite = k.setp(Cmp::Lt, Ty::F64, af, Op::D(f64::INFINITY));
    let small = k.cvt(Ty::S64, Ty::F64, ".rzi", f);
    let small = k.bitcast(Ty::U64, small);
    // |f| ≥ 2^63 is an integer; f mod 2^64 = f - floor(f / 2^64)·2^64 is exact in f64.
    let q = k.mul(Ty::F64, f, Op::D(2f64.powi(-64)));
    let q = k.cvt(Ty::F64, Ty::F64, ".rmi", q);
    let r = k.fma(Ty::F64, q, Op::D(-(2f64.powi(64))), f);
    let big_bits = k.cvt(Ty::U64, Ty::F64, ".rzi", r);
    let big = k.setp(Cmp::Ge, Ty::F64, af, Op::D(2f64.powi(63)));
    let bits = k.selp(Ty::U64, big_bits, small, big);
    k.selp(Ty::U64, bits, 0u32, finite)
}

pub(super) fn cast_kernel(src: Kind, dst: Kind) -> Kernel {
    let mut k = Kernel::new("cast");
    let yp = k.param_ptr("y");
    let xp = k.param_ptr("x");
    let n = k.param("n", Ty::U32);
    let i = thread_index(&mut k, n);
    let xa = k.addr(xp, i, size(src));
    let ya = k.addr(yp, i, size(dst));
    let v = load_value(&mut k, src, xa);
    match dst {
        Kind::F64 => {
            let y = match v {
                Val::Float { f64, .. } => f64,
                Val::Int { v, signed } => int_to_float(&mut k, Ty::F64, v, signed),
            };
            k.st(Space::Global, ya, 0, y);
        }
        Kind::F32 => {
            let y = match v {
                Val::Float { f32: Some(f), .. } => f,
                Val::Float { f64, .. } => k.cvt(Ty::F32, Ty::F64, ".rn", f64),
                Val::Int { v, signed } => int_to_float(&mut k, Ty::F32, v, signed),
            };
            k.st(Space::Global, ya, 0, y);
        }
        Kind::F16 => {
            let y = match v {
                Val::Float { f32: Some(f), .. } => k.cvt(Ty::F16, Ty::F32, ".rn", f),
                Val::Float { f64, .. } => k.cvt(Ty::F16, Ty::F64, ".rn", f64),
                Val::Int { v, signed } => {
                    let f = int_to_float(&mut k, Ty::F32, v, signed);
                    k.cvt(Ty::F16, Ty::F32, ".rn", f)
                }
            };
            k.st(Space::Global, ya, 0, y);
        }
        Kind::Bf16 => {
            let Val::Float { f32: Some(f), .. } = v else {
                unreachable!("declined before the kernel is built")
            };
            let y = k.reg(Ty::U16);
            k.raw(format_args!("cvt.rn.bf16.f32 {y}, {f}"));
            k.st(Space::Global, ya, 0, y);
        }
        Kind::Int { bytes, .. } => {
            let bits = match v {
                Val::Float { f64, .. } => float_to_bits(&mut k, f64),
                Val::Int { v, .. } => k.bitcast(Ty::U64, v),
            };
            match bytes {
                8 => k.st(Space::Global, ya, 0, bits),
                4 => {
                    let w = k.cvt(Ty::U32, Ty::U64, "", bits);
                    k.st(Space::Global, ya, 0, w);
                }
                2 => {
                    let w = k.cvt(Ty::U16, Ty::U64, "", bits);
                    k.st(Space::Global, ya, 0, w);
                }
                _ => {
                    let w = k.cvt(Ty::U16, Ty::U64, "", bits);
                    k.st_u8(Space::Global, ya, 0, w);
                }
            }
        }
        Kind::Bool => {
            let nz = match v {
                Val::Float { f64, .. } => k.setp(Cmp::Ne, Ty::F64, f64, Op::D(0.0)),
                Val::Int { v, .. } => k.setp(Cmp::Ne, Ty::U64, v, 0u32),
            };
            let b = k.selp(Ty::U16, 1u32, 0u32, nz);
            k.st_u8(Space::Global, ya, 0, b);
        }
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [DType; 13] = [
        DType::F64,
        DType::F32,
        DType::F16,
        DType::BF16,
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

    /// Every pair the kernel takes prints, loads and stores its own widths, and rounds only with
    /// exact-rounding conversions.
    #[test]
    fn every_pair_prints() {
        for from in ALL {
            for to in ALL {
                let (s, d) = (kind(from).unwrap(), kind(to).unwrap());
                if from == to || (d == Kind::Bf16 && !matches!(s, Kind::F32 | Kind::F16)) {
                    continue;
                }
                let t = module((9, 0), &[cast_kernel(s, d)]);
                assert!(t.contains(".entry cast("), "{from}->{to}");
                assert!(!t.contains("approx"), "{from}->{to}");
                let ld = t.lines().filter(|l| l.contains("ld.global")).count();
                let st = t.lines().filter(|l| l.contains("st.global")).count();
                assert_eq!((ld, st), (1, 1), "{from}->{to}\n{t}");
            }
        }
    }

    #[test]
    fn float_to_int_handles_huge_values_and_nan() {
        let t = module((9, 0), &[cast_kernel(Kind::F32, kind(DType::I8).unwrap())]);
        assert!(t.contains("cvt.rzi.s64.f64"), "{t}");
        assert!(t.contains("cvt.rmi.f64.f64"), "{t}");
        assert!(t.contains("st.global.u8"), "{t}");
    }
}
