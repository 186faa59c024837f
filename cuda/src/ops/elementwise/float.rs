//! CUDA elementwise kernels: the f32 expressions of the float ops (a child of `elementwise`,
//! declared in `elementwise.rs`). Each takes f32 registers (f16 operands are widened by the loader)
//! and returns the f32 result, rounded once: arithmetic in f32, transcendental functions through
//! `math` in f64.
use super::super::math::{erf64_for_f32, exp64, gelu64_for_f32, log64, sincos64, tanh64};
use crate::ptx::{Cmp, Kernel, Op, Reg, Ty};
use quorum_core::ops::unary_op::UnaryOp;

fn f64_of(k: &mut Kernel, x: Reg) -> Reg {
    k.cvt(Ty::F64, Ty::F32, "", x)
}

fn f32_of(k: &mut Kernel, x: Reg) -> Reg {
    k.cvt(Ty::F32, Ty::F64, ".rn", x)
}

/// NaN-propagating max/min of two f32 registers (IEEE max returns the number; ONNX wants NaN).
pub(super) fn nan_max(k: &mut Kernel, a: Reg, b: Reg, is_max: bool) -> Reg {
    let m = if is_max {
        k.max(Ty::F32, a, b)
    } else {
        k.min(Ty::F32, a, b)
    };
    let an = k.setp(Cmp::Nan, Ty::F32, a, a);
    let m = k.selp(Ty::F32, a, m, an);
    let bn = k.setp(Cmp::Nan, Ty::F32, b, b);
    k.selp(Ty::F32, b, m, bn)
}

/// Softplus in f64: log(1 + e^x), with the tails taken where the direct form loses accuracy.
fn softplus64(k: &mut Kernel, x: Reg) -> Reg {
    let e = exp64(k, x);
    let ep1 = k.add(Ty::F64, e, Op::D(1.0));
    let mid = log64(k, ep1);
    let nx = k.unary("neg", Ty::F64, x);
    let en = exp64(k, nx);
    let hi = k.add(Ty::F64, x, en);
    let is_lo = k.setp(Cmp::Lt, Ty::F64, x, Op::D(-20.0));
    let y = k.selp(Ty::F64, e, mid, is_lo);
    let is_hi = k.setp(Cmp::Gt, Ty::F64, x, Op::D(20.0));
    k.selp(Ty::F64, hi, y, is_hi)
}

/// `f(x)` computed in f64 and rounded once to f32.
fn via_f64(k: &mut Kernel, x: Reg, f: impl FnOnce(&mut Kernel, Reg) -> Reg) -> Reg {
    let xd = f64_of(k, x);
    let y = f(k, xd);
    f32_of(k, y)
}

/// Elu, Selu (`gamma`) and Celu (`celu`: the argument scaled by 1/alpha) in f64.
fn elu64(k: &mut Kernel, xd: Reg, alpha: f32, gamma: Option<f32>, celu: bool) -> Reg {
    let a = alpha as f64;
    let scaled = if celu {
        k.div(Ty::F64, xd, Op::D(a))
    } else {
        xd
    };
    let e = exp64(k, scaled);
    let em1 = k.sub(Ty::F64, e, Op::D(1.0));
    let negv = k.mul(Ty::F64, em1, Op::D(a));
    let is_neg = k.setp(Cmp::Lt, Ty::F64, xd, Op::D(0.0));
    let y = k.selp(Ty::F64, negv, xd, is_neg);
    match gamma {
        Some(g) => k.mul(Ty::F64, y, Op::D(g as f64)),
        None => y,
    }
}

/// The f32 expression of unary float op `u` on `x`: arithmetic in f32, everything else through
/// `math` in f64 with one rounding.
pub(crate) fn unary_expr(k: &mut Kernel, u: UnaryOp, x: Reg) -> Reg {
    let zero = Op::F(0.0);
    match u {
        UnaryOp::Abs => k.unary("abs", Ty::F32, x),
        UnaryOp::Neg => k.unary("neg", Ty::F32, x),
        UnaryOp::Ceil => k.cvt(Ty::F32, Ty::F32, ".rpi", x),
        UnaryOp::Floor => k.cvt(Ty::F32, Ty::F32, ".rmi", x),
        UnaryOp::Round => k.cvt(Ty::F32, Ty::F32, ".rni", x),
        UnaryOp::Sign => {
            let pos = k.setp(Cmp::Gt, Ty::F32, x, zero);
            let neg = k.setp(Cmp::Lt, Ty::F32, x, zero);
            let y = k.selp(Ty::F32, 1.0f32, x, pos);
            k.selp(Ty::F32, -1.0f32, y, neg)
        }
        UnaryOp::Reciprocal => k.unary("rcp.rn", Ty::F32, x),
        UnaryOp::Sqrt => k.unary("sqrt.rn", Ty::F32, x),
        UnaryOp::Relu => {
            // x > 0 ? x : 0, keeping NaN.
            let le = k.setp(Cmp::Le, Ty::F32, x, zero);
            k.selp(Ty::F32, zero, x, le)
        }
        UnaryOp::LeakyRelu { alpha } => {
            let ax = k.mul(Ty::F32, x, alpha);
            let neg = k.setp(Cmp::Lt, Ty::F32, x, zero);
            k.selp(Ty::F32, ax, x, neg)
        }
        UnaryOp::ThresholdedRelu { alpha } => {
            // The definition's `x > alpha ? x : 0`: a NaN fails the comparison and gives 0.
            let gt = k.setp(Cmp::Gt, Ty::F32, x, alpha);
            k.selp(Ty::F32, x, zero, gt)
        }
        UnaryOp::HardSigmoid { alpha, beta } => {
            let v = k.fma(Ty::F32, x, alpha, beta);
            let v = k.max(Ty::F32, v, zero);
            let v = k.min(Ty::F32, v, 1.0f32);
            let nan = k.setp(Cmp::Nan, Ty::F32, x, x);
            k.selp(Ty::F32, x, v, nan)
        }
        UnaryOp::HardSwish => {
            // x · max(0, min(1, x/6 + 1/2)), the ratio computed in f64 so 1/6 is not rounded first.
            let xd = f64_of(k, x);
            let v = k.div(Ty::F64, xd, Op::D(6.0));
            let v = k.add(Ty::F64, v, Op::D(0.5));
            let v = k.max(Ty::F64, v, Op::D(0.0));
            let v = k.min(Ty::F64, v, Op::D(1.0));
            let y = k.mul(Ty::F64, xd, v);
            let y = f32_of(k, y);
            let nan = k.setp(Cmp::Nan, Ty::F32, x, x);
            k.selp(Ty::F32, x, y, nan)
        }
        UnaryOp::Softsign => {
            let ax = k.unary("abs", Ty::F32, x);
            let d = k.add(Ty::F32, ax, 1.0f32);
            k.div(Ty::F32, x, d)
        }
        UnaryOp::Exp => via_f64(k, x, exp64),
        UnaryOp::Log => via_f64(k, x, log64),
        UnaryOp::Sin => via_f64(k, x, |k, xd| sincos64(k, xd).0),
        UnaryOp::Cos => via_f64(k, x, |k, xd| sincos64(k, xd).1),
        UnaryOp::Tan => via_f64(k, x, |k, xd| {
            let (s, c) = sincos64(k, xd);
            k.div(Ty::F64, s, c)
        }),
        UnaryOp::Tanh => via_f64(k, x, tanh64),
        // The result is rounded to f32 (and then f16 where that is the type).
        UnaryOp::Erf => via_f64(k, x, erf64_for_f32),
        UnaryOp::Sigmoid => via_f64(k, x, |k, xd| {
            // x ≥ 0: 1/(1+e^-x); x < 0: e^x/(1+e^x) (no cancellation either way).
            let ax = k.unary("abs", Ty::F64, xd);
            let nax = k.unary("neg", Ty::F64, ax);
            let e = exp64(k, nax);
            let den = k.add(Ty::F64, e, Op::D(1.0));
            let pos = k.div(Ty::F64, Op::D(1.0), den);
            let negv = k.div(Ty::F64, e, den);
            let is_neg = k.setp(Cmp::Lt, Ty::F64, xd, Op::D(0.0));
            k.selp(Ty::F64, negv, pos, is_neg)
        }),
        UnaryOp::Elu { alpha } => via_f64(k, x, |k, xd| elu64(k, xd, alpha, None, false)),
        UnaryOp::Selu { alpha, gamma } => {
            via_f64(k, x, |k, xd| elu64(k, xd, alpha, Some(gamma), false))
        }
        UnaryOp::Celu { alpha } => via_f64(k, x, |k, xd| elu64(k, xd, alpha, None, true)),
        UnaryOp::Softplus => via_f64(k, x, softplus64),
        UnaryOp::Mish => via_f64(k, x, |k, xd| {
            let sp = softplus64(k, xd);
            let t = tanh64(k, sp);
            k.mul(Ty::F64, xd, t)
        }),
        UnaryOp::Gelu { tanh: true } => via_f64(k, x, |k, xd| {
            let half_x = k.mul(Ty::F64, xd, Op::D(0.5));
            let x3 = k.mul(Ty::F64, xd, xd);
            let x3 = k.mul(Ty::F64, x3, xd);
            let inner = k.fma(Ty::F64, x3, Op::D(0.044715), xd);
            let inner = k.mul(Ty::F64, inner, Op::D((2.0 / std::f64::consts::PI).sqrt()));
            // 1 + tanh(u) = 2 / (1 + e^(-2u)): no cancellation for negative x
            // (at x = -10 the sum form gives 0 for -1.4e-37).
            let m2u = k.mul(Ty::F64, inner, Op::D(-2.0));
            let e = exp64(k, m2u);
            let den = k.add(Ty::F64, e, Op::D(1.0));
            let one_p = k.div(Ty::F64, Op::D(2.0), den);
            k.mul(Ty::F64, half_x, one_p)
        }),
        UnaryOp::Gelu { tanh: false } => via_f64(k, x, |k, xd| {
            // An unused x/2, as the generator has always emitted (ptxas drops it): kept so that this
            // change of structure leaves the PTX text as it was.
            let _half_x = k.mul(Ty::F64, xd, Op::D(0.5));
            // Straight-line, f32-grade; no cancellation for negative x.
            gelu64_for_f32(k, xd)
        }),
    }
}

/// ONNX Pow for f32 base `x` and exponent `y`, computed as e^(y·ln|x|) in f64 with C's special cases
/// (C99 F.9.4.4): a base whose sign bit is set (-0 and -∞ included) gives odd integer powers its
/// sign; a finite negative base with a non-integer exponent gives NaN; pow(±1, ±∞), pow(1, y) and
/// pow(x, ±0) are 1, NaN operands included.
pub(crate) fn pow_expr(k: &mut Kernel, x: Reg, y: Reg) -> Reg {
    let xd = f64_of(k, x);
    let yd = f64_of(k, y);
    let ax = k.unary("abs", Ty::F64, xd);
    let l = log64(k, ax);
    let t = k.mul(Ty::F64, yd, l);
    let mag = exp64(k, t);
    let yr = k.cvt(Ty::F64, Ty::F64, ".rni", yd);
    let is_int = k.setp(Cmp::Eq, Ty::F64, yr, yd);
    let half = k.mul(Ty::F64, yd, Op::D(0.5));
    let hr = k.cvt(Ty::F64, Ty::F64, ".rni", half);
    let odd_p = k.setp(Cmp::Ne, Ty::F64, hr, half);
    let odd = k.pred_and(is_int, odd_p);
    let neg_mag = k.unary("neg", Ty::F64, mag);
    let bits = k.bitcast(Ty::S64, xd);
    let sign = k.setp(Cmp::Lt, Ty::S64, bits, 0u32);
    let flip = k.pred_and(sign, odd);
    let r = k.selp(Ty::F64, neg_mag, mag, flip);
    let x_neg = k.setp(Cmp::Lt, Ty::F64, xd, Op::D(0.0));
    let x_fin = k.setp(Cmp::Gt, Ty::F64, xd, Op::D(f64::NEG_INFINITY));
    let not_int = k.pred_not(is_int);
    let no_real = k.pred_and(x_neg, x_fin);
    let no_real = k.pred_and(no_real, not_int);
    let r = k.selp(Ty::F64, Op::D(f64::NAN), r, no_real);
    let y0 = k.setp(Cmp::Eq, Ty::F64, yd, Op::D(0.0));
    let r = k.selp(Ty::F64, Op::D(1.0), r, y0);
    let x1 = k.setp(Cmp::Eq, Ty::F64, xd, Op::D(1.0));
    let r = k.selp(Ty::F64, Op::D(1.0), r, x1);
    let ay = k.unary("abs", Ty::F64, yd);
    let y_inf = k.setp(Cmp::Eq, Ty::F64, ay, Op::D(f64::INFINITY));
    let ax1 = k.setp(Cmp::Eq, Ty::F64, ax, Op::D(1.0));
    let unit = k.pred_and(ax1, y_inf);
    let r = k.selp(Ty::F64, Op::D(1.0), r, unit);
    f32_of(k, r)
}

/// Mod: `fmod` (sign of x) or Python's mod (sign of y), computed exactly in f64 (x − trunc(x/y)·y
/// is an f32 value, so one fused step in f64 gives it exactly while |x/y| < 2^53). An infinite y
/// with a finite x is taken apart (the fused step would multiply 0 by ∞): fmod gives x; Python's mod
/// gives x when x is 0 or has y's sign, else y.
pub(crate) fn mod_expr(k: &mut Kernel, x: Reg, y: Reg, fmod: bool) -> Reg {
    let xd = f64_of(k, x);
    let yd = f64_of(k, y);
    let q = k.div(Ty::F64, xd, yd);
    let q = k.cvt(Ty::F64, Ty::F64, ".rzi", q);
    let nq = k.unary("neg", Ty::F64, q);
    let r = k.fma(Ty::F64, nq, yd, xd);
    let rneg = k.setp(Cmp::Lt, Ty::F64, r, Op::D(0.0));
    let xneg = k.setp(Cmp::Lt, Ty::F64, xd, Op::D(0.0));
    let yneg = k.setp(Cmp::Lt, Ty::F64, yd, Op::D(0.0));
    let r = if fmod {
        r
    } else {
        // Python: a nonzero remainder takes the divisor's sign.
        let rn = k.setp(Cmp::Ne, Ty::F64, r, Op::D(0.0));
        let differ = k.reg(Ty::Pred);
        k.raw(format_args!("xor.pred {differ}, {rneg}, {yneg}"));
        let fix = k.pred_and(rn, differ);
        let ry = k.add(Ty::F64, r, yd);
        k.selp(Ty::F64, ry, r, fix)
    };
    let ay = k.unary("abs", Ty::F64, yd);
    let ax = k.unary("abs", Ty::F64, xd);
    let y_inf = k.setp(Cmp::Eq, Ty::F64, ay, Op::D(f64::INFINITY));
    let x_fin = k.setp(Cmp::Lt, Ty::F64, ax, Op::D(f64::INFINITY));
    let take = k.pred_and(y_inf, x_fin);
    let special = if fmod {
        xd
    } else {
        let same = k.reg(Ty::Pred);
        k.raw(format_args!("xor.pred {same}, {xneg}, {yneg}"));
        let same = k.pred_not(same);
        let x0 = k.setp(Cmp::Eq, Ty::F64, xd, Op::D(0.0));
        let keep_x = k.pred_or(same, x0);
        k.selp(Ty::F64, xd, yd, keep_x)
    };
    let r = k.selp(Ty::F64, special, r, take);
    f32_of(k, r)
}
