//! CUDA elementwise kernels: the f32 expressions of the float ops (a child of `elementwise`, mounted
//! there with `#[path]`). Each takes f32 registers (f16 operands are widened by the loader) and returns
//! the f32 result, rounded once: arithmetic in f32, transcendental functions through `math` in f64.
use super::super::math::{erf64_for_f32, exp64, gelu64_for_f32, log64, sincos64, tanh64};
use crate::cuda::KResult;
use crate::cuda::ptx::{Cmp, Kernel, Op, Reg, Ty};
use crate::decline;
use crate::ops::OpCtx;

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

fn fattr(ctx: &OpCtx, name: &str, default: f32) -> KResult<f32> {
    Ok(ctx.attr_f(name, default)?)
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

/// The f32 expression of a unary float op on `x`.
pub(crate) fn unary_expr(ctx: &OpCtx, k: &mut Kernel, op: &str, x: Reg) -> KResult<Reg> {
    let zero = Op::F(0.0);
    Ok(match op {
        "Abs" => k.unary("abs", Ty::F32, x),
        "Neg" => k.unary("neg", Ty::F32, x),
        "Ceil" => k.cvt(Ty::F32, Ty::F32, ".rpi", x),
        "Floor" => k.cvt(Ty::F32, Ty::F32, ".rmi", x),
        "Round" => k.cvt(Ty::F32, Ty::F32, ".rni", x),
        "Sign" => {
            let pos = k.setp(Cmp::Gt, Ty::F32, x, zero);
            let neg = k.setp(Cmp::Lt, Ty::F32, x, zero);
            let y = k.selp(Ty::F32, 1.0f32, x, pos);
            k.selp(Ty::F32, -1.0f32, y, neg)
        }
        "Reciprocal" => k.unary("rcp.rn", Ty::F32, x),
        "Sqrt" => k.unary("sqrt.rn", Ty::F32, x),
        "Relu" => {
            // x > 0 ? x : 0, keeping NaN.
            let le = k.setp(Cmp::Le, Ty::F32, x, zero);
            k.selp(Ty::F32, zero, x, le)
        }
        "LeakyRelu" => {
            let a = fattr(ctx, "alpha", 0.01)?;
            let ax = k.mul(Ty::F32, x, a);
            let neg = k.setp(Cmp::Lt, Ty::F32, x, zero);
            k.selp(Ty::F32, ax, x, neg)
        }
        "ThresholdedRelu" => {
            let a = fattr(ctx, "alpha", 1.0)?;
            // The definition's `x > alpha ? x : 0`: a NaN fails the comparison and gives 0.
            let gt = k.setp(Cmp::Gt, Ty::F32, x, a);
            k.selp(Ty::F32, x, zero, gt)
        }
        "HardSigmoid" => {
            let (a, b) = (fattr(ctx, "alpha", 0.2)?, fattr(ctx, "beta", 0.5)?);
            let v = k.fma(Ty::F32, x, a, b);
            let v = k.max(Ty::F32, v, zero);
            let v = k.min(Ty::F32, v, 1.0f32);
            let nan = k.setp(Cmp::Nan, Ty::F32, x, x);
            k.selp(Ty::F32, x, v, nan)
        }
        "HardSwish" => {
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
        "Softsign" => {
            let ax = k.unary("abs", Ty::F32, x);
            let d = k.add(Ty::F32, ax, 1.0f32);
            k.div(Ty::F32, x, d)
        }
        _ => {
            // f64 paths.
            let xd = f64_of(k, x);
            let y = match op {
                "Exp" => exp64(k, xd),
                "Log" => log64(k, xd),
                "Sin" => sincos64(k, xd).0,
                "Cos" => sincos64(k, xd).1,
                "Tan" => {
                    let (s, c) = sincos64(k, xd);
                    k.div(Ty::F64, s, c)
                }
                "Tanh" => tanh64(k, xd),
                // The result is rounded to f32 (and then f16 where that is the type).
                "Erf" => erf64_for_f32(k, xd),
                "Sigmoid" => {
                    // x ≥ 0: 1/(1+e^-x); x < 0: e^x/(1+e^x) (no cancellation either way).
                    let ax = k.unary("abs", Ty::F64, xd);
                    let nax = k.unary("neg", Ty::F64, ax);
                    let e = exp64(k, nax);
                    let den = k.add(Ty::F64, e, Op::D(1.0));
                    let pos = k.div(Ty::F64, Op::D(1.0), den);
                    let negv = k.div(Ty::F64, e, den);
                    let is_neg = k.setp(Cmp::Lt, Ty::F64, xd, Op::D(0.0));
                    k.selp(Ty::F64, negv, pos, is_neg)
                }
                "Elu" | "Selu" | "Celu" => {
                    let a = fattr(
                        ctx,
                        "alpha",
                        match op {
                            "Selu" => 1.673_263_2,
                            _ => 1.0,
                        },
                    )? as f64;
                    let scaled = if op == "Celu" {
                        k.div(Ty::F64, xd, Op::D(a))
                    } else {
                        xd
                    };
                    let e = exp64(k, scaled);
                    let em1 = k.sub(Ty::F64, e, Op::D(1.0));
                    let negv = k.mul(Ty::F64, em1, Op::D(a));
                    let is_neg = k.setp(Cmp::Lt, Ty::F64, xd, Op::D(0.0));
                    let y = k.selp(Ty::F64, negv, xd, is_neg);
                    if op == "Selu" {
                        let g = fattr(ctx, "gamma", 1.050_701)? as f64;
                        k.mul(Ty::F64, y, Op::D(g))
                    } else {
                        y
                    }
                }
                "Softplus" => softplus64(k, xd),
                "Mish" => {
                    let sp = softplus64(k, xd);
                    let t = tanh64(k, sp);
                    k.mul(Ty::F64, xd, t)
                }
                "Gelu" => {
                    let approx = ctx.attr_s("approximate", "none")?;
                    let half_x = k.mul(Ty::F64, xd, Op::D(0.5));
                    if approx == "tanh" {
                        let x3 = k.mul(Ty::F64, xd, xd);
                        let x3 = k.mul(Ty::F64, x3, xd);
                        let inner = k.fma(Ty::F64, x3, Op::D(0.044715), xd);
                        let inner =
                            k.mul(Ty::F64, inner, Op::D((2.0 / std::f64::consts::PI).sqrt()));
                        // 1 + tanh(u) = 2 / (1 + e^(-2u)): no cancellation for negative x
                        // (at x = -10 the sum form gives 0 for -1.4e-37).
                        let m2u = k.mul(Ty::F64, inner, Op::D(-2.0));
                        let e = exp64(k, m2u);
                        let den = k.add(Ty::F64, e, Op::D(1.0));
                        let one_p = k.div(Ty::F64, Op::D(2.0), den);
                        k.mul(Ty::F64, half_x, one_p)
                    } else {
                        // Straight-line, f32-grade; no cancellation for negative x.
                        gelu64_for_f32(k, xd)
                    }
                }
                other => decline!("no CUDA expression for {other}"),
            };
            f32_of(k, y)
        }
    })
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
