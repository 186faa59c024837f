//! CUDA kernels: elementwise ops (unary, binary, variadic, comparisons, logic, BitShift, Where, Clip).
//!
//! One generator covers them all: a kernel over the broadcast output shape that loads each operand at
//! its broadcast offset (constants baked into the PTX), converts it to the compute type, applies the
//! op's expression and stores the result. Float ops compute in f32 (f16 and bf16 operands are widened and the
//! result rounded once; the expressions are in `elementwise/float.rs`); transcendental functions go
//! through `math` in f64. Integer and bool operands keep their own type (`elementwise/int.rs`).
use super::elem::Elem;
use super::{offsets, require_u32_len, thread_index};
use crate::decline;
use crate::driver::Arg;
use crate::ptx::{Cmp, Kernel, Reg, Space, Ty, module};
use crate::{CudaKernel, DevTensor, Inputs, KError, KResult, Run, blocks, dev_input};
use quorum_core::error::OpError;
use quorum_core::ir::Node;
use quorum_core::ops::OpCtx;
use quorum_core::ops::broadcast::broadcast_shapes;
use quorum_core::ops::map_op::{Arith, Compare, Fold, Logic, MapOp};
use quorum_core::tensor::{DType, Tensor};

mod float;
mod int;

use float::nan_max;
pub(super) use float::{mod_expr, pow_expr, unary_expr};
#[cfg(test)]
pub(super) use int::tests::int_modules;

/// The kernel for `node` if this family owns its op type.
pub fn claim(node: &Node) -> Option<Result<CudaKernel, String>> {
    let op = node.op_type.as_str();
    Some(match op {
        "Gelu" => quorum_core::device::forms::gelu_mode(node).map(|()| k_map as CudaKernel),
        "Clip" => Ok(k_clip as CudaKernel),
        "Where" => Ok(k_where as CudaKernel),
        _ => Ok(k_map as CudaKernel),
    })
}

/// How an operand is read into a register.
pub(super) fn load(k: &mut Kernel, base: Reg, off: Reg, dtype: DType) -> KResult<Reg> {
    if let Some(e) = Elem::of(dtype) {
        let a = k.addr(base, off, e.size());
        return Ok(e.load_nc(k, a, 0));
    }
    Ok(match dtype {
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
    if let Some(e) = Elem::of(dtype) {
        let a = k.addr(base, i, e.size());
        let h = e.narrow(k, v);
        k.st(Space::Global, a, 0, h);
        return Ok(());
    }
    match dtype {
        DType::Bool => {
            let a = k.addr(base, i, 1);
            k.st_u8(Space::Global, a, 0, v);
        }
        d => decline!("elementwise results of type {d}"),
    }
    Ok(())
}

/// How a map kernel reads its operands and writes its result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Io {
    /// Converted to and from f32 ([`load`], [`store`]).
    Float,
    /// At their own width, in 32- or 64-bit integer registers (`int::load`, `int::store`).
    Int,
}

/// A parameter a map kernel takes after `n`; its register is handed to the expression.
enum Param {
    /// A device pointer the kernel writes (a flag word it may set).
    Ptr(&'static str, DevTensor),
    /// A scalar of a register type (a value with no plain PTX literal).
    Scalar(&'static str, Ty, Arg),
}

/// The expression of a map kernel: the operands' registers and the extra parameters' registers in,
/// the result out.
type Expr<'a> = &'a dyn Fn(&mut Kernel, &[Reg], &[Reg]) -> KResult<Reg>;

/// The expression of a map kernel without extra parameters: the operands' registers in, the result
/// out.
type MapExpr<'a> = &'a dyn Fn(&mut Kernel, &[Reg]) -> KResult<Reg>;

/// Runs `expr` over float operands broadcast to their common shape.
fn map_kernel(
    run: &Run,
    operands: &[DevTensor],
    out_dtype: DType,
    expr: MapExpr,
) -> KResult<DevTensor> {
    map_kernel_with(
        run,
        operands,
        out_dtype,
        Io::Float,
        Vec::new(),
        &|k, v, _| expr(k, v),
    )
}

/// Runs `expr` over operands broadcast to their common shape, read and written as `io` says, with
/// `extra` parameters after `n`.
fn map_kernel_with(
    run: &Run,
    operands: &[DevTensor],
    out_dtype: DType,
    io: Io,
    extra: Vec<Param>,
    expr: Expr,
) -> KResult<DevTensor> {
    let shapes: Vec<&[usize]> = operands.iter().map(|t| t.shape.as_slice()).collect();
    let out_shape = broadcast_shapes(&shapes)?;
    let n = require_u32_len(&out_shape)?;
    let out = run.alloc(out_dtype, &out_shape)?;
    if n == 0 {
        return Ok(out);
    }
    if io == Io::Float && extra.is_empty() && n % 4 == 0 && !ew4_off() {
        // Four elements a thread where every operand is the output's shape (or one element) and
        // type, f32 or a half, and lies aligned for the vector loads.
        let lanes: Option<Vec<bool>> = Elem::of(out_dtype)
            .is_some()
            .then(|| {
                operands
                    .iter()
                    .map(|t| {
                        let full = t.shape == out_shape;
                        let aligned = t.ptr() % (4 * t.dtype.size_in_memory() as u64) == 0;
                        (t.dtype == out_dtype && (t.len() == 1 || (full && aligned)))
                            .then_some(full)
                    })
                    .collect()
            })
            .flatten();
        if let Some(full) = lanes
            && full.iter().any(|&f| f)
        {
            return map_kernel_v4(run, operands, &full, out, n, expr);
        }
    }
    let shapes: Vec<&[usize]> = operands.iter().map(|t| t.shape.as_slice()).collect();
    let (shape, st) = quorum_core::device::forms::broadcast_walk(&shapes, &out_shape);
    let mut k = Kernel::new("ew");
    let out_p = k.param_ptr("out");
    let ptrs: Vec<Reg> = (0..operands.len())
        .map(|j| k.param_ptr(&format!("in{j}")))
        .collect();
    let n_r = k.param("n", Ty::U32);
    let i = thread_index(&mut k, n_r);
    let mut args = vec![out.arg_out()];
    args.extend(operands.iter().map(|t| t.arg_in()));
    args.push(Arg::U32(n));
    let mut extra_regs = Vec::with_capacity(extra.len());
    for p in extra {
        match p {
            Param::Ptr(name, t) => {
                extra_regs.push(k.param_ptr(name));
                args.push(t.arg_out());
            }
            Param::Scalar(name, ty, v) => {
                extra_regs.push(k.param(name, ty));
                args.push(v);
            }
        }
    }
    let offs = offsets(&mut k, i, &shape, &st);
    let mut vals = Vec::with_capacity(operands.len());
    for (j, t) in operands.iter().enumerate() {
        vals.push(match io {
            Io::Float => load(&mut k, ptrs[j], offs[j], t.dtype)?,
            Io::Int => int::load(&mut k, ptrs[j], offs[j], t.dtype)?,
        });
    }
    let y = expr(&mut k, &vals, &extra_regs)?;
    match io {
        Io::Float => store(&mut k, out_p, i, out_dtype, y)?,
        Io::Int => int::store(&mut k, out_p, i, out_dtype, y)?,
    }
    let ptx = module(run.cc(), &[k]);
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
pub fn binary(run: &Run, op: Arith, a: &DevTensor, b: &DevTensor) -> KResult<DevTensor> {
    let ts = [a.clone(), b.clone()];
    let d = float_dtypes(op.name(), &ts, false)?;
    map_kernel(run, &ts, d, &|k, v| Ok(arith(k, op, v[0], v[1])))
}

/// The four correctly rounded f32 arithmetic ops.
fn arith(k: &mut Kernel, op: Arith, a: Reg, b: Reg) -> Reg {
    match op {
        Arith::Add => k.add(Ty::F32, a, b),
        Arith::Sub => k.sub(Ty::F32, a, b),
        Arith::Mul => k.mul(Ty::F32, a, b),
        Arith::Div => k.div(Ty::F32, a, b),
    }
}

/// `QUORUM_CUDA_EW4=off`: every elementwise map through the general kernel (to compare, to bisect).
fn ew4_off() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OFF.get_or_init(|| std::env::var("QUORUM_CUDA_EW4").is_ok_and(|v| v == "off"))
}

/// The same-shape case, f32 or a half: each thread moves four consecutive elements with one vector
/// load per operand (16 bytes of f32, 8 of halves) and one vector store, a quarter of the memory
/// instructions of the general kernel; an operand of one element (`full[j]` false: a scalar
/// constant, such as a GELU's 0.5) is loaded once and used for all four.
fn map_kernel_v4(
    run: &Run,
    operands: &[DevTensor],
    full: &[bool],
    out: DevTensor,
    n: u32,
    expr: Expr,
) -> KResult<DevTensor> {
    let quads = n / 4;
    let elem = Elem::of(out.dtype).expect("checked by the caller");
    let name = match elem {
        Elem::F32 => "ew4",
        Elem::F16 => "ew4h",
        Elem::Bf16 => "ew4b",
    };
    let es = 4 * elem.size();
    let mut k = Kernel::new(name);
    let out_p = k.param_ptr("out");
    let ptrs: Vec<Reg> = (0..operands.len())
        .map(|j| k.param_ptr(&format!("in{j}")))
        .collect();
    let n_r = k.param("n", Ty::U32);
    let i = thread_index(&mut k, n_r);
    let mut lanes: Vec<[Reg; 4]> = Vec::with_capacity(operands.len());
    for (j, &p) in ptrs.iter().enumerate() {
        if !full[j] {
            let zero = k.mov(Ty::U32, 0u32);
            let v = load(&mut k, p, zero, out.dtype)?;
            lanes.push([v; 4]);
            continue;
        }
        let a = k.addr(p, i, es);
        let r = [0; 4].map(|_| k.reg(Ty::F32));
        if elem.is_half() {
            let h = [0; 4].map(|_| k.reg(elem.raw()));
            k.raw(format_args!(
                "ld.global.nc.v4.b16 {{{}, {}, {}, {}}}, [{a}]",
                h[0], h[1], h[2], h[3]
            ));
            for l in 0..4 {
                elem.widen_into(&mut k, r[l], h[l], None);
            }
        } else {
            k.raw(format_args!(
                "ld.global.nc.v4.f32 {{{}, {}, {}, {}}}, [{a}]",
                r[0], r[1], r[2], r[3]
            ));
        }
        lanes.push(r);
    }
    let mut ys = Vec::with_capacity(4);
    for lane in 0..4 {
        let vals: Vec<Reg> = lanes.iter().map(|r| r[lane]).collect();
        ys.push(expr(&mut k, &vals, &[])?);
    }
    let oa = k.addr(out_p, i, es);
    if elem.is_half() {
        let h: Vec<Reg> = ys.iter().map(|&y| elem.narrow(&mut k, y)).collect();
        k.raw(format_args!(
            "st.global.v4.b16 [{oa}], {{{}, {}, {}, {}}}",
            h[0], h[1], h[2], h[3]
        ));
    } else {
        k.raw(format_args!(
            "st.global.v4.f32 [{oa}], {{{}, {}, {}, {}}}",
            ys[0], ys[1], ys[2], ys[3]
        ));
    }
    let ptx = module(run.cc(), &[k]);
    let mut args = vec![out.arg_out()];
    args.extend(operands.iter().map(|t| t.arg_in()));
    args.push(Arg::U32(quads));
    run.launch(
        &ptx,
        name,
        (blocks(quads as usize, 256), 1, 1),
        (256, 1, 1),
        0,
        &args,
    )?;
    Ok(out)
}

/// The float type of `op`'s operands `ts`: f32, f16 or bf16, every operand of it, but Pow's
/// exponent (`pow`), which may also be f32, i32 or i64.
fn float_dtypes(op: &str, ts: &[DevTensor], pow: bool) -> KResult<DType> {
    let d = ts[0].dtype;
    if Elem::device(d).is_none() {
        decline!(
            "{op} on {d}: the CUDA kernels take float32, float16{}",
            if super::elem::bf16_enabled() {
                " and bfloat16"
            } else {
                super::elem::BF16_OFF
            }
        );
    }
    for t in &ts[1..] {
        let exponent = pow && matches!(t.dtype, DType::F32 | DType::I32 | DType::I64);
        if t.dtype != d && !exponent {
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

/// Declines a binary node that broadcasts the pre-opset-7 way (`quorum_core::device::forms`).
fn legacy_broadcast(ctx: &OpCtx, ts: &[DevTensor]) -> KResult<()> {
    let shapes: Vec<&[usize]> = ts.iter().map(|t| t.shape.as_slice()).collect();
    quorum_core::device::forms::legacy_broadcast(ctx, &shapes)?.map_err(KError::Decline)
}

/// Declines a PRelu whose slope does not broadcast onto X (`quorum_core::device::forms`).
fn require_prelu_slope(x: &DevTensor, slope: &DevTensor) -> KResult<()> {
    quorum_core::device::forms::prelu_slope(&x.shape, &slope.shape).map_err(KError::Decline)
}

fn k_map(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let op = ctx.node.op_type.as_str();
    let ts = all_inputs(inputs)?;
    legacy_broadcast(ctx, &ts)?;
    let Some(desc) = MapOp::parse(ctx)? else {
        decline!("no CUDA expression for {op}");
    };
    if let Some(out) = int::map(run, op, desc, &ts)? {
        return Ok(vec![out]);
    }
    let expr = |k: &mut Kernel, v: &[Reg]| -> KResult<Reg> {
        map_expr(k, desc, v).ok_or_else(|| KError::Decline(format!("no CUDA expression for {op}")))
    };
    let out = match desc {
        MapOp::Not | MapOp::Logic(_) => bool_map(run, op, &ts, &expr)?,
        MapOp::IsNaN | MapOp::IsInf { .. } => {
            float_dtypes(op, &ts, false)?;
            map_kernel(run, &ts, DType::Bool, &expr)?
        }
        MapOp::Compare(_) => {
            float_dtypes(op, &ts, false)?;
            desc.check_arity(op, ts.len())?;
            map_kernel(run, &ts, DType::Bool, &expr)?
        }
        MapOp::Arith(_) | MapOp::Pow | MapOp::Mod { .. } | MapOp::Unary(_) => {
            float_map(run, desc, op, &ts, &expr)?
        }
        MapOp::PRelu => {
            let d = float_dtypes(op, &ts, false)?;
            desc.check_arity(op, ts.len())?;
            require_prelu_slope(&ts[0], &ts[1])?;
            map_kernel(run, &ts, d, &expr)?
        }
        MapOp::Fold(_) => {
            let d = float_dtypes(op, &ts, false)?;
            map_kernel(run, &ts, d, &expr)?
        }
        MapOp::BitShift { .. } => decline!(
            "BitShift on {}: the CPU kernel takes integers only",
            ts[0].dtype
        ),
    };
    Ok(vec![out])
}

/// The expression of `desc` over operand registers `v`, loaded as f32 (or as bools, 0 or 1, for
/// the logic ops): the f32 result, or the predicate as a bool (`u16` 0 or 1). `None` for an op with
/// no float kernel (BitShift takes integers only). One exhaustive match: a new `MapOp` is a compile
/// error here until it has its expression. The PTX golden digest covers every one.
pub(super) fn map_expr(k: &mut Kernel, desc: MapOp, v: &[Reg]) -> Option<Reg> {
    let flag = |k: &mut Kernel, p: Reg| k.selp(Ty::U16, 1u32, 0u32, p);
    Some(match desc {
        MapOp::Not => k.xor(Ty::U16, v[0], 1u32),
        MapOp::Logic(Logic::And) => k.and(Ty::U16, v[0], v[1]),
        MapOp::Logic(Logic::Or) => k.or(Ty::U16, v[0], v[1]),
        MapOp::Logic(Logic::Xor) => k.xor(Ty::U16, v[0], v[1]),
        MapOp::IsNaN => {
            let p = k.setp(Cmp::Nan, Ty::F32, v[0], v[0]);
            flag(k, p)
        }
        MapOp::IsInf { positive, negative } => {
            let a = k.setp(Cmp::Eq, Ty::F32, v[0], f32::INFINITY);
            let b = k.setp(Cmp::Eq, Ty::F32, v[0], f32::NEG_INFINITY);
            let p = match (positive, negative) {
                (true, true) => k.pred_or(a, b),
                (true, false) => a,
                (false, true) => b,
                (false, false) => k.pred_and(a, b),
            };
            flag(k, p)
        }
        MapOp::Compare(c) => {
            let p = k.setp(compare(c), Ty::F32, v[0], v[1]);
            flag(k, p)
        }
        MapOp::Arith(a) => arith(k, a, v[0], v[1]),
        MapOp::Pow => pow_expr(k, v[0], v[1]),
        MapOp::Mod { fmod } => mod_expr(k, v[0], v[1], fmod),
        MapOp::PRelu => {
            let sx = k.mul(Ty::F32, v[0], v[1]);
            let neg = k.setp(Cmp::Lt, Ty::F32, v[0], 0.0f32);
            k.selp(Ty::F32, sx, v[0], neg)
        }
        MapOp::Fold(f) => {
            let mut acc = v[0];
            for &x in &v[1..] {
                acc = match f {
                    Fold::Sum | Fold::Mean => k.add(Ty::F32, acc, x),
                    Fold::Max => nan_max(k, acc, x, true),
                    Fold::Min => nan_max(k, acc, x, false),
                };
            }
            if f == Fold::Mean {
                acc = k.div(Ty::F32, acc, v.len() as f32);
            }
            acc
        }
        MapOp::BitShift { .. } => return None,
        MapOp::Unary(u) => unary_expr(k, u, v[0]),
    })
}

/// A logic op over bool operands `ts` (declined for any other type).
fn bool_map(run: &Run, op: &str, ts: &[DevTensor], expr: MapExpr) -> KResult<DevTensor> {
    for t in ts {
        if t.dtype != DType::Bool {
            decline!("{op} on {}", t.dtype);
        }
    }
    map_kernel(run, ts, DType::Bool, expr)
}

/// A float op of fixed arity over operands `ts`, computed in f32 and stored in their type.
fn float_map(
    run: &Run,
    desc: MapOp,
    op: &str,
    ts: &[DevTensor],
    expr: MapExpr,
) -> KResult<DevTensor> {
    let d = float_dtypes(op, ts, desc == MapOp::Pow)?;
    desc.check_arity(op, ts.len())?;
    map_kernel(run, ts, d, expr)
}

/// The PTX comparison of a comparison op.
pub(super) fn compare(c: Compare) -> Cmp {
    match c {
        Compare::Equal => Cmp::Eq,
        Compare::Less => Cmp::Lt,
        Compare::LessOrEqual => Cmp::Le,
        Compare::Greater => Cmp::Gt,
        Compare::GreaterOrEqual => Cmp::Ge,
    }
}

/// Clip's bound input `i` (opset 11 on), as `quorum_core::device::forms::clip_bound` takes it.
pub(super) fn clip_bound(inputs: &dyn Inputs, i: usize, x: DType) -> KResult<Option<Tensor>> {
    let bound = inputs.host(i)?;
    quorum_core::device::forms::clip_bound(bound.as_deref(), i, x)?.map_err(KError::Decline)
}

fn k_clip(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let x = dev_input(inputs, 0)?;
    if int::int_ty(x.dtype).is_some() {
        return Ok(vec![int::clip(ctx, run, inputs, x)?]);
    }
    float_dtypes("Clip", std::slice::from_ref(&x), false)?;
    let (lo, hi) = if ctx.opset() < 11 {
        (
            // Clip-6's defaults are the f32 limits, not infinities: Clip(±inf) is ±f32::MAX.
            ctx.attr_f("min", f32::MIN)?,
            ctx.attr_f("max", f32::MAX)?,
        )
    } else {
        let bound = |i: usize, default: f32| -> KResult<f32> {
            Ok(match clip_bound(inputs, i, x.dtype)? {
                Some(b) => b.to_f64_vec()?.first().map_or(default, |&v| v as f32),
                None => default,
            })
        };
        (bound(1, f32::NEG_INFINITY)?, bound(2, f32::INFINITY)?)
    };
    let out = map_kernel(run, std::slice::from_ref(&x), x.dtype, &|k, v| {
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
    let (ty, size) = match crate::memory::device_elem_size(x.dtype) {
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
    let (shape, st) = quorum_core::device::forms::broadcast_walk(&shapes, &out_shape);
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
            out.arg_out(),
            c.arg_in(),
            x.arg_in(),
            y.arg_in(),
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
        let families = [
            quorum_optable::Family::Unary,
            quorum_optable::Family::Binary,
        ];
        for op in families
            .into_iter()
            .flat_map(quorum_optable::rows_of)
            .map(|r| r.name)
        {
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
