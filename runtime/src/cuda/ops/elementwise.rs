//! CUDA kernels: elementwise ops (unary, binary, variadic, comparisons, logic, Where, Clip).
//!
//! One generator covers them all: a kernel over the broadcast output shape that loads each operand at
//! its broadcast offset (constants baked into the PTX), converts it to the compute type, applies the
//! op's expression and stores the result. Float ops compute in f32 (f16 operands are widened and the
//! result rounded once); transcendental functions go through `math` in f64.
use super::math::{erf64, exp64, log64, sincos64, tanh64};
use super::{broadcast_strides, offsets, require_u32_len, simplify, thread_index};
use crate::cuda::driver::Arg;
use crate::cuda::ptx::{Cmp, Kernel, Op, Reg, Space, Ty, module};
use crate::cuda::{
    CudaKernel, DevTensor, Inputs, KError, KResult, Run, blocks, dev_input, host_f64s,
};
use crate::decline;
use crate::error::OpError;
use crate::ir::Node;
use crate::ops::OpCtx;
use crate::ops::broadcast::broadcast_shapes;
use crate::tensor::DType;

/// Op types this family claims in at least one form.
pub const OPS: &[&str] = &[
    "Abs",
    "Neg",
    "Ceil",
    "Floor",
    "Round",
    "Sign",
    "Reciprocal",
    "Sqrt",
    "Exp",
    "Log",
    "Erf",
    "Sin",
    "Cos",
    "Tan",
    "Tanh",
    "Sigmoid",
    "Relu",
    "LeakyRelu",
    "Elu",
    "Selu",
    "Celu",
    "HardSigmoid",
    "HardSwish",
    "Softplus",
    "Softsign",
    "Gelu",
    "Mish",
    "ThresholdedRelu",
    "Clip",
    "Not",
    "IsNaN",
    "IsInf",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Mod",
    "Min",
    "Max",
    "Sum",
    "Mean",
    "PRelu",
    "Equal",
    "Less",
    "LessOrEqual",
    "Greater",
    "GreaterOrEqual",
    "And",
    "Or",
    "Xor",
    "Where",
];

/// The kernel for `node` if this family owns its op type.
pub fn claim(node: &Node) -> Option<Result<CudaKernel, String>> {
    let op = node.op_type.as_str();
    if !OPS.contains(&op) {
        return None;
    }
    Some(match op {
        "Gelu" => match node.attrs.get("approximate") {
            Some(crate::ir::Attr::String(s)) if s != b"none" && s != b"tanh" => Err(format!(
                "Gelu approximate='{}' is not an ONNX mode",
                String::from_utf8_lossy(s)
            )),
            _ => Ok(k_map as CudaKernel),
        },
        "Clip" => Ok(k_clip as CudaKernel),
        "Where" => Ok(k_where as CudaKernel),
        _ => Ok(k_map as CudaKernel),
    })
}

/// How an operand is read into a register.
pub(super) fn load(k: &mut Kernel, base: Reg, off: Reg, dtype: DType) -> KResult<Reg> {
    Ok(match dtype {
        DType::F32 => {
            let a = k.addr(base, off, 4);
            k.ld_nc(Ty::F32, a, 0)
        }
        DType::F16 => {
            let a = k.addr(base, off, 2);
            let h = k.ld_nc(Ty::F16, a, 0);
            k.cvt(Ty::F32, Ty::F16, "", h)
        }
        DType::Bool => {
            let a = k.addr(base, off, 1);
            k.ld_nc(Ty::U8, a, 0)
        }
        DType::I32 => {
            let a = k.addr(base, off, 4);
            let v = k.ld_nc(Ty::S32, a, 0);
            k.cvt(Ty::F32, Ty::S32, ".rn", v)
        }
        DType::I64 => {
            let a = k.addr(base, off, 8);
            let v = k.ld_nc(Ty::S64, a, 0);
            k.cvt(Ty::F32, Ty::S64, ".rn", v)
        }
        d => decline!("elementwise operands of type {d}"),
    })
}

pub(super) fn store(k: &mut Kernel, base: Reg, i: Reg, dtype: DType, v: Reg) -> KResult<()> {
    match dtype {
        DType::F32 => {
            let a = k.addr(base, i, 4);
            k.st(Space::Global, a, 0, v);
        }
        DType::F16 => {
            let a = k.addr(base, i, 2);
            let h = k.cvt(Ty::F16, Ty::F32, ".rn", v);
            k.st(Space::Global, a, 0, h);
        }
        DType::Bool => {
            let a = k.addr(base, i, 1);
            k.st_u8(Space::Global, a, 0, v);
        }
        d => decline!("elementwise results of type {d}"),
    }
    Ok(())
}

/// Runs `expr` over operands broadcast to their common shape.
fn map_kernel(
    run: &Run,
    operands: &[DevTensor],
    out_dtype: DType,
    expr: &dyn Fn(&mut Kernel, &[Reg]) -> KResult<Reg>,
) -> KResult<DevTensor> {
    let shapes: Vec<&[usize]> = operands.iter().map(|t| t.shape.as_slice()).collect();
    let out_shape = broadcast_shapes(&shapes)?;
    let n = require_u32_len(&out_shape)?;
    let out = run.alloc(out_dtype, &out_shape)?;
    if n == 0 {
        return Ok(out);
    }
    let same_f32 = operands
        .iter()
        .all(|t| t.shape == out_shape && t.dtype == DType::F32);
    if same_f32 && out_dtype == DType::F32 && n % 4 == 0 {
        return map_kernel_v4(run, operands, out, n, expr);
    }
    let st: Vec<Vec<i64>> = operands
        .iter()
        .map(|t| broadcast_strides(&t.shape, &out_shape))
        .collect();
    let (shape, st) = simplify(&out_shape, &st);
    let mut k = Kernel::new("ew");
    let out_p = k.param_ptr("out");
    let ptrs: Vec<Reg> = (0..operands.len())
        .map(|j| k.param_ptr(&format!("in{j}")))
        .collect();
    let n_r = k.param("n", Ty::U32);
    let i = thread_index(&mut k, n_r);
    let offs = offsets(&mut k, i, &shape, &st);
    let mut vals = Vec::with_capacity(operands.len());
    for (j, t) in operands.iter().enumerate() {
        vals.push(load(&mut k, ptrs[j], offs[j], t.dtype)?);
    }
    let y = expr(&mut k, &vals)?;
    store(&mut k, out_p, i, out_dtype, y)?;
    let ptx = module(run.cc(), &[k]);
    let mut args = vec![Arg::Ptr(out.ptr())];
    args.extend(operands.iter().map(|t| Arg::Ptr(t.ptr())));
    args.push(Arg::U32(n));
    run.launch(
        &ptx,
        "ew",
        (blocks(n as usize, 256), 1, 1),
        (256, 1, 1),
        0,
        &args,
    )?;
    Ok(out)
}

/// `a + b`, `a - b`, `a · b` or `a / b` with broadcasting, outside any session (benchmarks).
pub fn binary(run: &Run, op: &str, a: &DevTensor, b: &DevTensor) -> KResult<DevTensor> {
    let d = float_dtypes(op, &[a.clone(), b.clone()])?;
    map_kernel(run, &[a.clone(), b.clone()], d, &|k, v| {
        arith(k, op, v[0], v[1])
    })
}

/// The four correctly rounded f32 arithmetic ops.
fn arith(k: &mut Kernel, op: &str, a: Reg, b: Reg) -> KResult<Reg> {
    Ok(match op {
        "Add" => k.add(Ty::F32, a, b),
        "Sub" => k.sub(Ty::F32, a, b),
        "Mul" => k.mul(Ty::F32, a, b),
        "Div" => k.div(Ty::F32, a, b),
        other => decline!("no arithmetic op {other}"),
    })
}

/// The same-shape f32 case: each thread moves four consecutive elements with 16-byte loads and
/// stores (buffers are 256-byte aligned), a quarter of the memory instructions of the general kernel.
fn map_kernel_v4(
    run: &Run,
    operands: &[DevTensor],
    out: DevTensor,
    n: u32,
    expr: &dyn Fn(&mut Kernel, &[Reg]) -> KResult<Reg>,
) -> KResult<DevTensor> {
    let quads = n / 4;
    let mut k = Kernel::new("ew4");
    let out_p = k.param_ptr("out");
    let ptrs: Vec<Reg> = (0..operands.len())
        .map(|j| k.param_ptr(&format!("in{j}")))
        .collect();
    let n_r = k.param("n", Ty::U32);
    let i = thread_index(&mut k, n_r);
    let mut lanes: Vec<[Reg; 4]> = Vec::with_capacity(operands.len());
    for &p in &ptrs {
        let a = k.addr(p, i, 16);
        let r = [
            k.reg(Ty::F32),
            k.reg(Ty::F32),
            k.reg(Ty::F32),
            k.reg(Ty::F32),
        ];
        k.raw(format_args!(
            "ld.global.nc.v4.f32 {{{}, {}, {}, {}}}, [{a}]",
            r[0], r[1], r[2], r[3]
        ));
        lanes.push(r);
    }
    let mut ys = Vec::with_capacity(4);
    for lane in 0..4 {
        let vals: Vec<Reg> = lanes.iter().map(|r| r[lane]).collect();
        ys.push(expr(&mut k, &vals)?);
    }
    let oa = k.addr(out_p, i, 16);
    k.raw(format_args!(
        "st.global.v4.f32 [{oa}], {{{}, {}, {}, {}}}",
        ys[0], ys[1], ys[2], ys[3]
    ));
    let ptx = module(run.cc(), &[k]);
    let mut args = vec![Arg::Ptr(out.ptr())];
    args.extend(operands.iter().map(|t| Arg::Ptr(t.ptr())));
    args.push(Arg::U32(quads));
    run.launch(
        &ptx,
        "ew4",
        (blocks(quads as usize, 256), 1, 1),
        (256, 1, 1),
        0,
        &args,
    )?;
    Ok(out)
}

fn f64_of(k: &mut Kernel, x: Reg) -> Reg {
    k.cvt(Ty::F64, Ty::F32, "", x)
}

fn f32_of(k: &mut Kernel, x: Reg) -> Reg {
    k.cvt(Ty::F32, Ty::F64, ".rn", x)
}

/// NaN-propagating max/min of two f32 registers (IEEE max returns the number; ONNX wants NaN).
fn nan_max(k: &mut Kernel, a: Reg, b: Reg, is_max: bool) -> Reg {
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
pub(super) fn unary_expr(ctx: &OpCtx, k: &mut Kernel, op: &str, x: Reg) -> KResult<Reg> {
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
            let le = k.setp(Cmp::Le, Ty::F32, x, a);
            k.selp(Ty::F32, zero, x, le)
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
                "Erf" => erf64(k, xd).0,
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
                        // 1 + erf(z) = erfc(-z): no cancellation for negative x.
                        let nz = k.mul(Ty::F64, xd, Op::D(-std::f64::consts::FRAC_1_SQRT_2));
                        let (_, erfc) = erf64(k, nz);
                        k.mul(Ty::F64, half_x, erfc)
                    }
                }
                other => decline!("no CUDA expression for {other}"),
            };
            f32_of(k, y)
        }
    })
}

/// ONNX Pow for f32 base `x` and exponent `y`, computed as e^(y·ln|x|) in f64 with C's special cases.
pub(super) fn pow_expr(k: &mut Kernel, x: Reg, y: Reg) -> Reg {
    let xd = f64_of(k, x);
    let yd = f64_of(k, y);
    let ax = k.unary("abs", Ty::F64, xd);
    let l = log64(k, ax);
    let t = k.mul(Ty::F64, yd, l);
    let mag = exp64(k, t);
    // Negative base: integer exponents keep the sign of x^y, others give NaN.
    let yr = k.cvt(Ty::F64, Ty::F64, ".rni", yd);
    let is_int = k.setp(Cmp::Eq, Ty::F64, yr, yd);
    let half = k.mul(Ty::F64, yd, Op::D(0.5));
    let hr = k.cvt(Ty::F64, Ty::F64, ".rni", half);
    let odd_p = k.setp(Cmp::Ne, Ty::F64, hr, half);
    let odd = k.pred_and(is_int, odd_p);
    let neg_mag = k.unary("neg", Ty::F64, mag);
    let signed = k.selp(Ty::F64, neg_mag, mag, odd);
    let neg_res = k.selp(Ty::F64, signed, Op::D(f64::NAN), is_int);
    let x_neg = k.setp(Cmp::Lt, Ty::F64, xd, Op::D(0.0));
    let r = k.selp(Ty::F64, neg_res, mag, x_neg);
    // y == 0 → 1 (even for NaN x); x == 1 → 1 (even for NaN y).
    let y0 = k.setp(Cmp::Eq, Ty::F64, yd, Op::D(0.0));
    let r = k.selp(Ty::F64, Op::D(1.0), r, y0);
    let x1 = k.setp(Cmp::Eq, Ty::F64, xd, Op::D(1.0));
    let r = k.selp(Ty::F64, Op::D(1.0), r, x1);
    f32_of(k, r)
}

/// Mod: `fmod` (sign of x) or Python's mod (sign of y), computed exactly in f64 (x − trunc(x/y)·y
/// is an f32 value, so one fused step in f64 gives it exactly while |x/y| < 2^53). An infinite y
/// with a finite x is taken apart (the fused step would multiply 0 by ∞): fmod gives x; Python's mod
/// gives x when x is 0 or has y's sign, else y.
pub(super) fn mod_expr(k: &mut Kernel, x: Reg, y: Reg, fmod: bool) -> Reg {
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

fn float_dtypes(op: &str, ts: &[DevTensor]) -> KResult<DType> {
    let d = ts[0].dtype;
    if !matches!(d, DType::F32 | DType::F16) {
        decline!("{op} on {d}: the CUDA kernels take float32 and float16");
    }
    for t in &ts[1..] {
        if t.dtype != d && !(op == "Pow" && matches!(t.dtype, DType::F32 | DType::I32 | DType::I64))
        {
            decline!("{op} operands {d} and {}", t.dtype);
        }
    }
    Ok(d)
}

fn all_inputs(inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let mut v = Vec::new();
    for i in 0..inputs.len() {
        if let Some(t) = inputs.dev(i)? {
            v.push(t);
        }
    }
    if v.is_empty() {
        return Err(KError::Op(OpError::Invalid("no inputs".into())));
    }
    Ok(v)
}

fn k_map(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let op = ctx.node.op_type.as_str();
    let ts = all_inputs(inputs)?;
    let out = match op {
        "Not" | "And" | "Or" | "Xor" => {
            for t in &ts {
                if t.dtype != DType::Bool {
                    decline!("{op} on {}", t.dtype);
                }
            }
            map_kernel(run, &ts, DType::Bool, &|k, v| {
                Ok(match op {
                    "Not" => k.xor(Ty::U16, v[0], 1u32),
                    "And" => k.and(Ty::U16, v[0], v[1]),
                    "Or" => k.or(Ty::U16, v[0], v[1]),
                    _ => k.xor(Ty::U16, v[0], v[1]),
                })
            })?
        }
        "IsNaN" | "IsInf" => {
            float_dtypes(op, &ts)?;
            let (pos, neg) = (
                ctx.attr_i("detect_positive", 1)? != 0,
                ctx.attr_i("detect_negative", 1)? != 0,
            );
            map_kernel(run, &ts, DType::Bool, &|k, v| {
                let p = if op == "IsNaN" {
                    k.setp(Cmp::Nan, Ty::F32, v[0], v[0])
                } else {
                    let a = k.setp(Cmp::Eq, Ty::F32, v[0], f32::INFINITY);
                    let b = k.setp(Cmp::Eq, Ty::F32, v[0], f32::NEG_INFINITY);
                    match (pos, neg) {
                        (true, true) => k.pred_or(a, b),
                        (true, false) => a,
                        (false, true) => b,
                        (false, false) => k.pred_and(a, b),
                    }
                };
                Ok(k.selp(Ty::U16, 1u32, 0u32, p))
            })?
        }
        "Equal" | "Less" | "LessOrEqual" | "Greater" | "GreaterOrEqual" => {
            float_dtypes(op, &ts)?;
            if ts.len() != 2 {
                return Err(KError::Op(OpError::Invalid(format!(
                    "{op} takes two inputs"
                ))));
            }
            let c = match op {
                "Equal" => Cmp::Eq,
                "Less" => Cmp::Lt,
                "LessOrEqual" => Cmp::Le,
                "Greater" => Cmp::Gt,
                _ => Cmp::Ge,
            };
            map_kernel(run, &ts, DType::Bool, &|k, v| {
                let p = k.setp(c, Ty::F32, v[0], v[1]);
                Ok(k.selp(Ty::U16, 1u32, 0u32, p))
            })?
        }
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Mod" | "PRelu" => {
            let d = float_dtypes(op, &ts)?;
            if ts.len() != 2 {
                return Err(KError::Op(OpError::Invalid(format!(
                    "{op} takes two inputs"
                ))));
            }
            let fmod = ctx.attr_i("fmod", 0)? != 0;
            if op == "PRelu" {
                // Opsets before 7 broadcast the slope another way; the CPU kernel handles that.
                let shapes = [ts[0].shape.as_slice(), ts[1].shape.as_slice()];
                if broadcast_shapes(&shapes).ok().as_deref() != Some(ts[0].shape.as_slice()) {
                    decline!(
                        "PRelu slope {:?} does not broadcast to {:?}",
                        ts[1].shape,
                        ts[0].shape
                    );
                }
            }
            map_kernel(run, &ts, d, &|k, v| {
                Ok(match op {
                    "Add" | "Sub" | "Mul" | "Div" => arith(k, op, v[0], v[1])?,
                    "Pow" => pow_expr(k, v[0], v[1]),
                    "Mod" => mod_expr(k, v[0], v[1], fmod),
                    _ => {
                        let sx = k.mul(Ty::F32, v[0], v[1]);
                        let neg = k.setp(Cmp::Lt, Ty::F32, v[0], 0.0f32);
                        k.selp(Ty::F32, sx, v[0], neg)
                    }
                })
            })?
        }
        "Sum" | "Mean" | "Max" | "Min" => {
            let d = float_dtypes(op, &ts)?;
            let count = ts.len();
            map_kernel(run, &ts, d, &|k, v| {
                let mut acc = v[0];
                for &x in &v[1..] {
                    acc = match op {
                        "Sum" | "Mean" => k.add(Ty::F32, acc, x),
                        "Max" => nan_max(k, acc, x, true),
                        _ => nan_max(k, acc, x, false),
                    };
                }
                if op == "Mean" {
                    acc = k.div(Ty::F32, acc, count as f32);
                }
                Ok(acc)
            })?
        }
        _ => {
            let d = float_dtypes(op, &ts)?;
            if ts.len() != 1 {
                return Err(KError::Op(OpError::Invalid(format!(
                    "{op} takes one input"
                ))));
            }
            map_kernel(run, &ts, d, &|k, v| unary_expr(ctx, k, op, v[0]))?
        }
    };
    Ok(vec![out])
}

fn k_clip(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let x = dev_input(inputs, 0)?;
    float_dtypes("Clip", std::slice::from_ref(&x))?;
    let (lo, hi) = if ctx.opset() < 11 {
        (
            ctx.attr_f("min", f32::NEG_INFINITY)?,
            ctx.attr_f("max", f32::INFINITY)?,
        )
    } else {
        let bound = |i: usize, default: f32| -> KResult<f32> {
            match host_f64s(inputs, i)? {
                None => Ok(default),
                Some(v) if v.len() == 1 => Ok(v[0] as f32),
                Some(v) => Err(KError::Op(OpError::Invalid(format!(
                    "Clip bound {i} must be a scalar, got {} values",
                    v.len()
                )))),
            }
        };
        (bound(1, f32::NEG_INFINITY)?, bound(2, f32::INFINITY)?)
    };
    let out = map_kernel(run, &[x.clone()], x.dtype, &|k, v| {
        // NaN stays NaN: comparisons with NaN are false.
        let lt = k.setp(Cmp::Lt, Ty::F32, v[0], lo);
        let y = k.selp(Ty::F32, lo, v[0], lt);
        let gt = k.setp(Cmp::Gt, Ty::F32, y, hi);
        Ok(k.selp(Ty::F32, hi, y, gt))
    })?;
    Ok(vec![out])
}

/// Where(cond, x, y) for any element type: the bits are moved, not interpreted.
fn k_where(_: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let c = dev_input(inputs, 0)?;
    let x = dev_input(inputs, 1)?;
    let y = dev_input(inputs, 2)?;
    if c.dtype != DType::Bool || x.dtype != y.dtype {
        decline!("Where with {}, {}, {}", c.dtype, x.dtype, y.dtype);
    }
    let (ty, size) = match crate::cuda::memory::device_elem_size(x.dtype) {
        Some(1) => (Ty::U8, 1),
        Some(2) => (Ty::U16, 2),
        Some(4) => (Ty::U32, 4),
        Some(8) => (Ty::U64, 8),
        _ => decline!("Where on {}", x.dtype),
    };
    let shapes = [c.shape.as_slice(), x.shape.as_slice(), y.shape.as_slice()];
    let out_shape = broadcast_shapes(&shapes)?;
    let n = require_u32_len(&out_shape)?;
    let out = run.alloc(x.dtype, &out_shape)?;
    if n == 0 {
        return Ok(vec![out]);
    }
    let st: Vec<Vec<i64>> = [&c, &x, &y]
        .iter()
        .map(|t| broadcast_strides(&t.shape, &out_shape))
        .collect();
    let (shape, st) = simplify(&out_shape, &st);
    let mut k = Kernel::new("where");
    let out_p = k.param_ptr("out");
    let cp = k.param_ptr("c");
    let xp = k.param_ptr("x");
    let yp = k.param_ptr("y");
    let n_r = k.param("n", Ty::U32);
    let i = thread_index(&mut k, n_r);
    let offs = offsets(&mut k, i, &shape, &st);
    let ca = k.addr(cp, offs[0], 1);
    let cv = k.ld_nc(Ty::U8, ca, 0);
    let xa = k.addr(xp, offs[1], size);
    let ya = k.addr(yp, offs[2], size);
    let p = k.setp(Cmp::Ne, Ty::U16, cv, 0u32);
    let src = k.selp(Ty::U64, xa, ya, p);
    let v = k.ld_nc(ty, src, 0);
    let oa = k.addr(out_p, i, size);
    if ty == Ty::U8 {
        k.st_u8(Space::Global, oa, 0, v);
    } else {
        k.st(Space::Global, oa, 0, v);
    }
    let ptx = module(run.cc(), &[k]);
    run.launch(
        &ptx,
        "where",
        (blocks(n as usize, 256), 1, 1),
        (256, 1, 1),
        0,
        &[
            Arg::Ptr(out.ptr()),
            Arg::Ptr(c.ptr()),
            Arg::Ptr(x.ptr()),
            Arg::Ptr(y.ptr()),
            Arg::U32(n),
        ],
    )?;
    Ok(vec![out])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_claimed_op_has_a_kernel() {
        for op in OPS {
            let node = Node {
                name: "n".into(),
                op_type: op.to_string(),
                domain: String::new(),
                opset: 13,
                inputs: vec![],
                outputs: vec![],
                attrs: Default::default(),
            };
            assert!(claim(&node).is_some_and(|r| r.is_ok()), "{op}");
        }
    }
}
