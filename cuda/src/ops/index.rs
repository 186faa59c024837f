//! CUDA kernels: index-driven data movement and generators.
//!
//! GatherElements and ScatterElements take their flat data offsets from the CPU's own
//! `element_offsets` (indices validated on the host, so a bad index is an error and never a wild
//! access), uploaded as 32-bit offsets; GatherElements whose indices are device values (not fixed
//! for the session) reads and checks them in the kernel instead, raising the run's fault word for
//! one out of range, as Gather does. ScatterElements copies the data, then runs one thread per line
//! of the indices along the axis, applying that line's updates in index order: two updates can only
//! meet on one output element when they lie on the same line, so the result is the CPU's, in order,
//! bit for bit. OneHot takes each index's position from the CPU's `one_hot_pos` (host), Range its
//! count from `range_plan`; Trilu is a masked copy. CumSum runs one thread per line of the CPU's
//! `ScanPlan`, summing in the CPU's order, so its outputs are the CPU's bit for bit. Data moves as raw bits, so every device dtype works
//! except where arithmetic is done (scatter reductions, Range).
use std::sync::Arc;

use ndarray::{ArrayD, IxDyn};

use super::movement::{checked_index, elem_ty, store_bits};
use super::{require_u32_len, thread_index};
use crate::decline;
use crate::driver::Arg;
use crate::ptx::{Cmp, Kernel, Op, Reg, Space, Ty, module};
use crate::{CudaKernel, DevTensor, Fault, Inputs, KError, KResult, Run, blocks, dev_input};
use quorum_core::device::index::{
    ScanPlan, ScatterLines, cumsum_plan, gather_elements_axis, gather_elements_plan, one_hot_lines,
    scatter_elements_lines, scatter_nd_lines, trilu_k, trilu_plan,
};
use quorum_core::error::OpError;
use quorum_core::index_kernel;
use quorum_core::ir::Node;
use quorum_core::ops::OpCtx;
use quorum_core::ops::data::index::Reduction;
use quorum_core::ops::shape::{RangePlan, range_plan};
use quorum_core::tensor::{DType, Tensor, Value};

/// Threads per block of every kernel here.
const BLOCK: u32 = 256;

/// The longest line of in-order scatter updates one thread applies (a dependent chain of global
/// loads and stores); longer lines run on the CPU.
const MAX_SERIAL: u32 = 8192;

/// The kernel for one of this family's nodes, None for other ops.
pub fn claim(node: &Node) -> Option<Result<CudaKernel, String>> {
    index_kernel!(node.op_type.as_str(), CudaKernel).map(Ok)
}

fn invalid(msg: String) -> KError {
    KError::Op(OpError::Invalid(msg))
}

/// Input `i` read on the host (small parameters, and the indices this family validates there).
fn host_value(inputs: &dyn Inputs, i: usize, what: &str) -> KResult<Arc<Value>> {
    inputs
        .host(i)?
        .ok_or_else(|| invalid(format!("{what} (input {i}) is required")))
}

fn as_tensor<'a>(v: &'a Value, what: &str) -> KResult<&'a Tensor> {
    v.as_tensor()
        .ok_or_else(|| invalid(format!("{what} must be a tensor")))
}

/// Uploads 32-bit element offsets (each below 2³¹: the caller checked the tensor they index).
fn upload_offsets(run: &Run, offs: Vec<i32>) -> KResult<DevTensor> {
    let n = offs.len();
    let t = ArrayD::from_shape_vec(IxDyn(&[n]), offs).map_err(|e| KError::Op(e.into()))?;
    run.upload(&Tensor::I32(t))
}

fn launch_1d(run: &Run, k: Kernel, n: u32, args: &[Arg]) -> KResult<()> {
    let name = k.name().to_string();
    let ptx = module(run.cc(), &[k]);
    run.launch(
        &ptx,
        &name,
        (blocks(n as usize, BLOCK), 1, 1),
        (BLOCK, 1, 1),
        0,
        args,
    )
}

// ---------------------------------------------------------------------------------------------
// GatherElements

/// `out[i] = x[offs[i]]`, one thread per output element.
pub(super) fn gather_elements_kernel(ty: Ty, size: usize) -> Kernel {
    let mut k = Kernel::new(&format!("gather_elements_b{}", size * 8));
    let op = k.param_ptr("out");
    let xp = k.param_ptr("x");
    let fp = k.param_ptr("offs");
    let n = k.param("n", Ty::U32);
    let i = thread_index(&mut k, n);
    let fa = k.addr(fp, i, 4);
    let off = k.ld_nc(Ty::U32, fa, 0);
    let sa = k.addr(xp, off, size);
    let v = k.ld_nc(ty, sa, 0);
    let oa = k.addr(op, i, size);
    store_bits(&mut k, ty, oa, v);
    k
}

/// `out[i] = x[offset of i's coordinates with the axis's replaced by idx[i]]`, one thread per
/// output element, the index read and checked on the device: a negative index counts from the
/// end; one out of range reads element 0 and raises the fault word. `ishape` and the data's
/// strides are the kernel's constants.
pub(super) fn gather_elements_dev_kernel(
    ty: Ty,
    size: usize,
    ity: Ty,
    ishape: &[usize],
    xstrides: &[usize],
    axis: usize,
    dim: u64,
) -> Kernel {
    let mut k = Kernel::new(&format!("gather_elements_dev_b{}", size * 8));
    let op = k.param_ptr("out");
    let xp = k.param_ptr("x");
    let ip = k.param_ptr("idx");
    let fp = k.param_ptr("fault");
    let n = k.param("n", Ty::U32);
    let i = thread_index(&mut k, n);
    let isize = if ity == Ty::S32 { 4 } else { 8 };
    let ia = k.addr(ip, i, isize);
    let raw = k.ld_nc(ity, ia, 0);
    let iv = checked_index(&mut k, raw, ity, dim, fp);
    // The data offset: each coordinate of i in the index shape times the data's stride, the
    // axis's coordinate replaced by the index.
    let mut off = k.mul(Ty::U32, iv, xstrides[axis] as u32);
    let mut rest = i;
    for d in (0..ishape.len()).rev() {
        if d == 0 {
            if d != axis {
                off = k.fma(Ty::U32, rest, xstrides[d] as u32, off);
            }
            break;
        }
        let c = k.rem(Ty::U32, rest, ishape[d] as u32);
        if d != axis {
            off = k.fma(Ty::U32, c, xstrides[d] as u32, off);
        }
        rest = k.div(Ty::U32, rest, ishape[d] as u32);
    }
    let sa = k.addr(xp, off, size);
    let v = k.ld_nc(ty, sa, 0);
    let oa = k.addr(op, i, size);
    store_bits(&mut k, ty, oa, v);
    k
}

/// GatherElements whose indices are device values (a run input, a value computed on the device):
/// checked on the device, so that the stream never waits for the host and a graph capture goes on
/// (RoBERTa's token types are gathered by position ids computed from the tokens).
fn gather_elements_on_device(
    ctx: &OpCtx,
    run: &Run,
    inputs: &dyn Inputs,
    x: DevTensor,
) -> KResult<Vec<DevTensor>> {
    let ind = dev_input(inputs, 1)?;
    let axis = gather_elements_axis(ctx, &x.shape, &ind.shape)?;
    let ity = match ind.dtype {
        DType::I64 => Ty::S64,
        DType::I32 => Ty::S32,
        d => decline!("GatherElements indices of {d}"),
    };
    let n = require_u32_len(&ind.shape)?;
    let out = run.alloc(x.dtype, &ind.shape)?;
    if n == 0 {
        return Ok(vec![out]);
    }
    require_u32_len(&x.shape)?;
    let dim = x.shape[axis];
    if dim == 0 {
        decline!("GatherElements from an empty axis: every index is out of range");
    }
    let (ty, size) = elem_ty(&x)?;
    let xstrides = super::strides(&x.shape);
    let word = run.fault_word()?;
    launch_1d(
        run,
        gather_elements_dev_kernel(ty, size, ity, &ind.shape, &xstrides, axis, dim as u64),
        n,
        &[
            out.arg_out(),
            x.arg_in(),
            ind.arg_in(),
            word.arg_out(),
            Arg::U32(n),
        ],
    )?;
    let fault = Fault {
        node: ctx.node.name.clone(),
        op: ctx.node.op_type.clone(),
        shapes: format!("[{}{:?}, {}{:?}]", x.dtype, x.shape, ind.dtype, ind.shape),
        msg: format!(
            "a GatherElements index is out of range for axis {axis} of size {dim} (checked on the device)"
        ),
    };
    run.check_fault(word, fault)?;
    Ok(vec![out])
}

fn k_gather_elements(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let x = dev_input(inputs, 0)?;
    if !inputs.fixed(1) {
        return gather_elements_on_device(ctx, run, inputs, x);
    }
    let iv = host_value(inputs, 1, "GatherElements indices")?;
    let ind = as_tensor(&iv, "GatherElements indices")?;
    let (offs, out_shape) = gather_elements_plan(ctx, &x.shape, ind)?;
    let n = require_u32_len(&out_shape)?;
    let out = run.alloc(x.dtype, &out_shape)?;
    if n == 0 {
        return Ok(vec![out]);
    }
    require_u32_len(&x.shape)?;
    let (ty, size) = elem_ty(&x)?;
    let offs = upload_offsets(run, offs.into_iter().map(|o| o as i32).collect())?;
    launch_1d(
        run,
        gather_elements_kernel(ty, size),
        n,
        &[out.arg_out(), x.arg_in(), offs.arg_in(), Arg::U32(n)],
    )?;
    Ok(vec![out])
}

// ---------------------------------------------------------------------------------------------
// ScatterElements

/// How a scatter combines: the element type as stored, and the type the arithmetic runs in (f16 is
/// computed in f32, exactly like the CPU's `half` arithmetic: one rounding back to f16).
fn scatter_types(dtype: DType, red: Reduction, bits: Ty) -> KResult<(Ty, Ty)> {
    if red == Reduction::None {
        return Ok((bits, bits));
    }
    Ok(match dtype {
        DType::F32 => (Ty::F32, Ty::F32),
        DType::F64 => (Ty::F64, Ty::F64),
        DType::F16 => (Ty::F16, Ty::F32),
        DType::I32 => (Ty::S32, Ty::S32),
        DType::I64 => (Ty::S64, Ty::S64),
        d => decline!("ScatterElements reduction {red:?} of {d}"),
    })
}

/// `d ∘ u` as the CPU's `scatter_reduce` computes it (`c` is the arithmetic type).
fn combine(k: &mut Kernel, red: Reduction, c: Ty, d: Reg, u: Reg) -> Reg {
    let float = matches!(c, Ty::F32 | Ty::F64);
    match red {
        Reduction::None => u,
        Reduction::Add => k.add(c, d, u),
        Reduction::Mul => k.mul(c, d, u),
        // CPU: u if u > d, or u is NaN and d is not (so NaN propagates and d's NaN stays).
        Reduction::Max if float => {
            let gt = k.setp(Cmp::Gt, c, u, d);
            let un = k.setp(Cmp::Nan, c, u, u);
            let dn = k.setp(Cmp::Num, c, d, d);
            let nan = k.pred_and(un, dn);
            let take = k.pred_or(gt, nan);
            k.selp(c, u, d, take)
        }
        // CPU: u if u < d or u is NaN.
        Reduction::Min if float => {
            let lt = k.setp(Cmp::Lt, c, u, d);
            let un = k.setp(Cmp::Nan, c, u, u);
            let take = k.pred_or(lt, un);
            k.selp(c, u, d, take)
        }
        Reduction::Max => k.max(c, d, u),
        Reduction::Min => k.min(c, d, u),
    }
}

/// One thread per line: `lines = outer·inner` lines of `len` updates each, update `p` of line
/// `(o, j)` at `(o·len + a)·inner + j`, applied for `a = 0, 1, ...` in order to `out[offs[p]]`.
pub(super) fn scatter_kernel(
    red: Reduction,
    st: Ty,
    c: Ty,
    size: usize,
    len: u32,
    inner: u32,
) -> Kernel {
    let mut k = Kernel::new(&format!(
        "scatter_elements_{}_{}",
        format!("{red:?}").to_lowercase(),
        st.suffix()
    ));
    let op = k.param_ptr("out");
    let up = k.param_ptr("upd");
    let fp = k.param_ptr("offs");
    let lines = k.param("lines", Ty::U32);
    let t = thread_index(&mut k, lines);
    let j = k.rem(Ty::U32, t, inner);
    let o = k.div(Ty::U32, t, inner);
    let p0 = k.fma(Ty::U32, o, len.wrapping_mul(inner), j);
    let p = k.mov(Ty::U32, p0);
    k.for_range(Ty::U32, 0u32, len, 1u32, |k, _| {
        let fa = k.addr(fp, p, 4);
        let off = k.ld_nc(Ty::U32, fa, 0);
        let ua = k.addr(up, p, size);
        let u = k.ld_nc(st, ua, 0);
        let da = k.addr(op, off, size);
        let v = if red == Reduction::None {
            u
        } else {
            // Plain (coherent) load: this thread may have written the element already.
            let d = k.ld(Space::Global, st, da, 0);
            let (dc, uc) = if st == c {
                (d, u)
            } else {
                (k.cvt(c, st, "", d), k.cvt(c, st, "", u))
            };
            let r = combine(k, red, c, dc, uc);
            if st == c { r } else { k.cvt(st, c, ".rn", r) }
        };
        store_bits(k, st, da, v);
        k.raw(format_args!("add.u32 {p}, {p}, {inner}"));
    });
    k
}

fn k_scatter_elements(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let x = dev_input(inputs, 0)?;
    let upd = dev_input(inputs, 2)?;
    let iv = host_value(inputs, 1, "ScatterElements indices")?;
    let ind = as_tensor(&iv, "ScatterElements indices")?;
    let lines = scatter_elements_lines(ctx, (&x.shape, x.dtype), ind, (&upd.shape, upd.dtype))?;
    Ok(vec![scatter_lines(
        run,
        &x,
        &upd,
        lines,
        "ScatterElements",
    )?])
}

/// ScatterND: each element of a slice is a line, whose updates (one per index tuple) apply in order.
fn k_scatter_nd(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let x = dev_input(inputs, 0)?;
    let upd = dev_input(inputs, 2)?;
    let iv = host_value(inputs, 1, "ScatterND indices")?;
    let ind = as_tensor(&iv, "ScatterND indices")?;
    let lines = scatter_nd_lines(ctx, (&x.shape, x.dtype), ind, (&upd.shape, upd.dtype))?;
    Ok(vec![scatter_lines(run, &x, &upd, lines, "ScatterND")?])
}

/// `out = x`, then the updates of `lines` applied in order, one thread per line:
/// `out[offs[p]] = red(out[offs[p]], upd[p])`.
fn scatter_lines(
    run: &Run,
    x: &DevTensor,
    upd: &DevTensor,
    lines: ScatterLines,
    what: &str,
) -> KResult<DevTensor> {
    let (offs, len, inner, red) = (lines.offs, lines.len, lines.inner, lines.red);
    require_u32_len(&x.shape)?;
    let total = require_u32_len(&[offs.len()])?;
    let (bits, size) = elem_ty(x)?;
    let (st, c) = scatter_types(x.dtype, red, bits)?;
    let out = run.alloc(x.dtype, &x.shape)?;
    run.copy(&out, x, x.bytes())?;
    if total == 0 {
        return Ok(out);
    }
    let len = len as u32;
    if len > MAX_SERIAL {
        decline!("{what} applies {len} updates per line in order: the CPU is faster");
    }
    let lines = total / len;
    let offs = upload_offsets(run, offs.into_iter().map(|o| o as i32).collect())?;
    launch_1d(
        run,
        scatter_kernel(red, st, c, size, len, inner as u32),
        lines,
        &[out.arg_out(), upd.arg_in(), offs.arg_in(), Arg::U32(lines)],
    )?;
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// OneHot

/// `out[o, j, i] = pos[o·inner + i] == j ? values[1] : values[0]`; `pos` is -1 where out of range.
pub(super) fn one_hot_kernel(ty: Ty, size: usize, depth: u32, inner: u32) -> Kernel {
    let mut k = Kernel::new(&format!("one_hot_b{}", size * 8));
    let op = k.param_ptr("out");
    let vp = k.param_ptr("values");
    let pp = k.param_ptr("pos");
    let n = k.param("n", Ty::U32);
    let i = thread_index(&mut k, n);
    let inn = k.rem(Ty::U32, i, inner);
    let q = k.div(Ty::U32, i, inner);
    let j = k.rem(Ty::U32, q, depth);
    let o = k.div(Ty::U32, q, depth);
    let pi = k.fma(Ty::U32, o, inner, inn);
    let pa = k.addr(pp, pi, 4);
    let pos = k.ld_nc(Ty::U32, pa, 0);
    let hit = k.setp(Cmp::Eq, Ty::U32, pos, j);
    let off = k.ld_nc(ty, vp, 0);
    let on = k.ld_nc(ty, vp, size as i64);
    let v = k.selp(ty, on, off, hit);
    let oa = k.addr(op, i, size);
    store_bits(&mut k, ty, oa, v);
    k
}

fn k_one_hot(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let iv = host_value(inputs, 0, "OneHot indices")?;
    let ind = as_tensor(&iv, "OneHot indices")?;
    let dv = host_value(inputs, 1, "OneHot depth")?;
    let vv = host_value(inputs, 2, "OneHot values")?;
    let plan = one_hot_lines(
        ctx,
        ind,
        as_tensor(&dv, "OneHot depth")?,
        as_tensor(&vv, "OneHot values")?,
    )?;
    let values = dev_input(inputs, 2)?;
    let n = require_u32_len(&plan.shape)?;
    let out = run.alloc(values.dtype, &plan.shape)?;
    if n == 0 {
        return Ok(vec![out]);
    }
    let (ty, size) = elem_ty(&values)?;
    let pos = upload_offsets(run, plan.pos)?;
    launch_1d(
        run,
        one_hot_kernel(ty, size, plan.depth as u32, plan.inner as u32),
        n,
        &[out.arg_out(), values.arg_in(), pos.arg_in(), Arg::U32(n)],
    )?;
    Ok(vec![out])
}

// ---------------------------------------------------------------------------------------------
// Trilu

/// Keeps `x[.., r, c]` where `c - r >= k` (upper) or `c - r <= k` (lower), zero elsewhere.
pub(super) fn trilu_kernel(ty: Ty, size: usize, upper: bool, rows: u32, cols: u32) -> Kernel {
    let mut k = Kernel::new(&format!(
        "{}_b{}",
        if upper { "triu" } else { "tril" },
        size * 8
    ));
    let op = k.param_ptr("out");
    let xp = k.param_ptr("x");
    let n = k.param("n", Ty::U32);
    let kk = k.param("k", Ty::S32);
    let i = thread_index(&mut k, n);
    let c = k.rem(Ty::U32, i, cols);
    let q = k.div(Ty::U32, i, cols);
    let r = k.rem(Ty::U32, q, rows);
    let diff = k.sub(Ty::S32, c, r);
    let keep = k.setp(if upper { Cmp::Ge } else { Cmp::Le }, Ty::S32, diff, kk);
    let xa = k.addr(xp, i, size);
    let v = k.ld_nc(ty, xa, 0);
    let zero = k.mov(ty, 0u32);
    let y = k.selp(ty, v, zero, keep);
    let oa = k.addr(op, i, size);
    store_bits(&mut k, ty, oa, y);
    k
}

fn k_trilu(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let x = dev_input(inputs, 0)?;
    let kv = if inputs.present(1) {
        let v = host_value(inputs, 1, "Trilu k")?;
        trilu_k(as_tensor(&v, "Trilu k")?)?
    } else {
        0
    };
    let (upper, rows, cols, kc) = trilu_plan(ctx, &x.shape, kv)?;
    let n = require_u32_len(&x.shape)?;
    let out = run.alloc(x.dtype, &x.shape)?;
    if n == 0 {
        return Ok(vec![out]);
    }
    let (ty, size) = elem_ty(&x)?;
    launch_1d(
        run,
        trilu_kernel(ty, size, upper, rows as u32, cols as u32),
        n,
        &[out.arg_out(), x.arg_in(), Arg::U32(n), Arg::I32(kc)],
    )?;
    Ok(vec![out])
}

// ---------------------------------------------------------------------------------------------
// Range

/// `out[i] = start + i·delta`: in f64 (multiply, then add, each rounded, as the CPU does) converted
/// once to the output float type; or in wrapping 64-bit integers truncated to the output width.
pub(super) fn range_kernel(dtype: DType) -> KResult<Kernel> {
    let mut k = Kernel::new(&format!("range_{dtype}"));
    let op = k.param_ptr("out");
    let sp = k.param("start", Ty::U64);
    let dp = k.param("delta", Ty::U64);
    let n = k.param("n", Ty::U32);
    let i = thread_index(&mut k, n);
    let (v, size) = if dtype.is_float() {
        let fi = k.cvt(Ty::F64, Ty::U32, ".rn", i);
        let s = k.bitcast(Ty::F64, sp);
        let d = k.bitcast(Ty::F64, dp);
        let prod = k.mul(Ty::F64, fi, d);
        let v = k.reg(Ty::F64);
        // Explicit rounding: never contracted into an fma (the CPU rounds the product).
        k.raw(format_args!("add.rn.f64 {v}, {s}, {prod}"));
        match dtype {
            DType::F64 => (v, 8),
            DType::F32 => (k.cvt(Ty::F32, Ty::F64, ".rn", v), 4),
            DType::F16 => (k.cvt(Ty::F16, Ty::F64, ".rn", v), 2),
            d => decline!("Range of {d}"),
        }
    } else {
        let wi = k.cvt(Ty::U64, Ty::U32, "", i);
        let v = k.fma(Ty::U64, wi, dp, sp);
        match dtype {
            DType::I64 | DType::U64 => (v, 8),
            DType::I32 | DType::U32 => (k.cvt(Ty::U32, Ty::U64, "", v), 4),
            DType::I16 | DType::U16 => (k.cvt(Ty::U16, Ty::U64, "", v), 2),
            // The low byte of a 16-bit register, stored with st.u8.
            DType::I8 | DType::U8 => (k.cvt(Ty::U16, Ty::U64, "", v), 1),
            d => decline!("Range of {d}"),
        }
    };
    let oa = k.addr(op, i, size);
    if size == 1 {
        k.st_u8(Space::Global, oa, 0, v);
    } else {
        k.st(Space::Global, oa, 0, v);
    }
    Ok(k)
}

fn k_range(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let vals = (0..3)
        .map(|i| host_value(inputs, i, "Range scalar"))
        .collect::<KResult<Vec<_>>>()?;
    let s = as_tensor(&vals[0], "Range start")?;
    let l = as_tensor(&vals[1], "Range limit")?;
    let d = as_tensor(&vals[2], "Range delta")?;
    let dtype = s.dtype();
    let (start, delta, n) = match range_plan(ctx, s, l, d)? {
        RangePlan::Float { start, delta, n } => (start.to_bits(), delta.to_bits(), n),
        RangePlan::Int { start, delta, n } => (start as i64 as u64, delta as i64 as u64, n),
    };
    let n = require_u32_len(&[n])?;
    let k = range_kernel(dtype)?;
    let out = run.alloc(dtype, &[n as usize])?;
    if n == 0 {
        return Ok(vec![out]);
    }
    launch_1d(
        run,
        k,
        n,
        &[out.arg_out(), Arg::U64(start), Arg::U64(delta), Arg::U32(n)],
    )?;
    Ok(vec![out])
}

// ---------------------------------------------------------------------------------------------
// CumSum

/// How a CumSum's elements are held: the stored type and size, and the accumulator's type.
fn cumsum_types(dtype: DType) -> KResult<(Ty, usize, Ty)> {
    Ok(match dtype {
        DType::F32 => (Ty::F32, 4, Ty::F32),
        DType::F64 => (Ty::F64, 8, Ty::F64),
        // f16 and bf16 sum in f32, each output rounded once (the CPU's rule).
        DType::F16 => (Ty::F16, 2, Ty::F32),
        DType::BF16 => (Ty::U16, 2, Ty::F32),
        // Two's-complement addition wraps alike for signed and unsigned values.
        DType::I32 | DType::U32 => (Ty::U32, 4, Ty::U32),
        DType::I64 | DType::U64 => (Ty::U64, 8, Ty::U64),
        d => decline!("CumSum of {d}"),
    })
}

/// One thread per line of `plan` (`outer · inner` lines of `dim` elements, `inner` apart), summing
/// its elements in order (from the last with `reverse`) as the CPU does, so every output is the
/// CPU's bit for bit; `exclusive` stores each sum before adding its element.
pub(super) fn cumsum_kernel(dtype: DType, plan: ScanPlan) -> KResult<Kernel> {
    let (st, size, acc_ty) = cumsum_types(dtype)?;
    let mut k = Kernel::new(&format!(
        "cumsum_{dtype}{}{}",
        if plan.exclusive { "_excl" } else { "" },
        if plan.reverse { "_rev" } else { "" }
    ));
    let op = k.param_ptr("out");
    let xp = k.param_ptr("x");
    let lines = k.param("lines", Ty::U32);
    let (dim, inner) = (plan.dim as u32, plan.inner as u32);
    let t = thread_index(&mut k, lines);
    let j = k.rem(Ty::U32, t, inner);
    let o = k.div(Ty::U32, t, inner);
    let first = if plan.reverse { dim - 1 } else { 0 };
    let p0 = k.fma(Ty::U32, o, dim.wrapping_mul(inner), j);
    let p = k.add(Ty::U32, p0, first.wrapping_mul(inner));
    let zero = match acc_ty {
        Ty::F32 => Op::F(0.0),
        Ty::F64 => Op::D(0.0),
        _ => Op::I(0),
    };
    let acc = k.mov(acc_ty, zero);
    k.for_range(Ty::U32, 0u32, dim, 1u32, |k, _| {
        let xa = k.addr(xp, p, size);
        let raw = k.ld_nc(st, xa, 0);
        let v = match dtype {
            DType::F16 => k.cvt(Ty::F32, Ty::F16, "", raw),
            DType::BF16 => {
                // A bfloat16 is the high half of the f32 with the same value.
                let w = k.cvt(Ty::U32, Ty::U16, "", raw);
                let w = k.shl(Ty::U32, w, 16u32);
                k.bitcast(Ty::F32, w)
            }
            _ => raw,
        };
        let oa = k.addr(op, p, size);
        let store = |k: &mut Kernel| match dtype {
            DType::F16 => {
                let h = k.cvt(Ty::F16, Ty::F32, ".rn", acc);
                k.st(Space::Global, oa, 0, h);
            }
            DType::BF16 => {
                let h = k.reg(Ty::U16);
                k.raw(format_args!("cvt.rn.bf16.f32 {h}, {acc}"));
                k.st(Space::Global, oa, 0, h);
            }
            _ => k.st(Space::Global, oa, 0, acc),
        };
        if plan.exclusive {
            store(k);
        }
        let sum = k.add(acc_ty, acc, v);
        k.assign(acc, sum);
        if !plan.exclusive {
            store(k);
        }
        let step = if plan.reverse { "sub" } else { "add" };
        k.raw(format_args!("{step}.u32 {p}, {p}, {inner}"));
    });
    Ok(k)
}

fn k_cumsum(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let x = dev_input(inputs, 0)?;
    let av = host_value(inputs, 1, "CumSum axis")?;
    let plan = cumsum_plan(ctx, &x.shape, as_tensor(&av, "CumSum axis")?)?;
    let n = require_u32_len(&x.shape)?;
    let k = cumsum_kernel(x.dtype, plan)?;
    let out = run.alloc(x.dtype, &x.shape)?;
    if n == 0 {
        return Ok(vec![out]);
    }
    if plan.dim > MAX_SERIAL as usize {
        decline!(
            "CumSum sums {} elements per line in order: the CPU is faster",
            plan.dim
        );
    }
    let lines = (plan.outer * plan.inner) as u32;
    launch_1d(run, k, lines, &[out.arg_out(), x.arg_in(), Arg::U32(lines)])?;
    Ok(vec![out])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(k: Kernel) -> String {
        module((9, 0), &[k])
    }

    fn common(t: &str, entry: &str) {
        assert!(t.contains(&format!(".visible .entry {entry}(")), "{t}");
        assert!(!t.contains(".approx"), "{t}");
        assert!(t.contains("@%p0 ret;"), "bounds check: {t}");
    }

    #[test]
    fn gather_elements_moves_bits_through_offsets() {
        for (ty, size) in [(Ty::U8, 1), (Ty::U16, 2), (Ty::U32, 4), (Ty::U64, 8)] {
            let t = text(gather_elements_kernel(ty, size));
            let name = format!("gather_elements_b{}", size * 8);
            common(&t, &name);
            assert!(t.contains("ld.global.nc.u32"), "{t}");
            assert!(
                t.contains(&format!("mul.wide.u32 %rd8, %r5, {size};")),
                "{t}"
            );
            if size == 1 {
                assert!(t.contains("st.global.u8"), "{t}");
            }
        }
    }

    #[test]
    fn gather_elements_on_the_device_checks_each_index() {
        // Indices [2, 3] into data [4, 5] along axis 1: data strides [5, 1].
        let t = text(gather_elements_dev_kernel(
            Ty::U32,
            4,
            Ty::S64,
            &[2, 3],
            &[5, 1],
            1,
            5,
        ));
        common(&t, "gather_elements_dev_b32");
        for s in [
            "ld.global.nc.s64",
            "setp.lt.s64",
            "add.s64",
            "setp.lo.u64",
            "st.global.u32 [%rd",
            "rem.u32",
            "div.u32",
        ] {
            assert!(t.contains(s), "{s}: {t}");
        }
        // The fault store is skipped for an index in range.
        let fault = t.find("st.global.u32").unwrap();
        assert!(t[..fault].contains("bra L_in_range"), "{t}");
        let t = text(gather_elements_dev_kernel(
            Ty::U16,
            2,
            Ty::S32,
            &[3],
            &[1],
            0,
            7,
        ));
        assert!(
            t.contains("cvt.s64.s32") && t.contains("st.global.u16"),
            "{t}"
        );
    }

    #[test]
    fn scatter_loops_in_order_and_reduces_like_the_cpu() {
        let t = text(scatter_kernel(Reduction::None, Ty::U32, Ty::U32, 4, 5, 7));
        common(&t, "scatter_elements_none_u32");
        assert!(
            t.contains("L_loop_1:") && t.contains("add.u32 %r8, %r8, 7;"),
            "{t}"
        );
        assert!(t.contains("mad.lo.u32 %r7, %r6, 35, %r5;"), "{t}");
        assert!(!t.contains("ld.global.u32"), "no read-back for none: {t}");
        let t = text(scatter_kernel(Reduction::Add, Ty::F32, Ty::F32, 4, 3, 1));
        assert!(t.contains("ld.global.f32") && t.contains("add.f32"), "{t}");
        let t = text(scatter_kernel(Reduction::Max, Ty::F16, Ty::F32, 2, 3, 1));
        for s in [
            "ld.global.b16",
            "cvt.f32.f16",
            "setp.gt.f32",
            "setp.nan.f32",
            "setp.num.f32",
            "selp.f32",
            "cvt.rn.f16.f32",
            "st.global.b16",
        ] {
            assert!(t.contains(s), "{s}: {t}");
        }
        let t = text(scatter_kernel(Reduction::Min, Ty::S64, Ty::S64, 8, 3, 2));
        assert!(t.contains("min.s64") && t.contains("st.global.s64"), "{t}");
        let t = text(scatter_kernel(Reduction::Mul, Ty::F64, Ty::F64, 8, 3, 2));
        assert!(t.contains("mul.rn.f64"), "{t}");
    }

    #[test]
    fn one_hot_selects_on_or_off() {
        let t = text(one_hot_kernel(Ty::U16, 2, 10, 3));
        common(&t, "one_hot_b16");
        assert!(t.contains("rem.u32 %r7, %r6, 10;"), "{t}");
        assert!(t.contains("ld.global.nc.u16 %h1, [%rd3+2];"), "{t}");
        assert!(t.contains("selp.b16"), "{t}");
        assert!(t.contains("setp.eq.u32"), "{t}");
    }

    #[test]
    fn trilu_compares_signed_diagonal_offsets() {
        let t = text(trilu_kernel(Ty::U32, 4, true, 3, 5));
        common(&t, "triu_b32");
        assert!(
            t.contains(".param .s32 k") && t.contains("ld.param.s32"),
            "{t}"
        );
        assert!(t.contains("setp.ge.s32"), "{t}");
        let t = text(trilu_kernel(Ty::U8, 1, false, 3, 5));
        assert!(
            t.contains("setp.le.s32") && t.contains("st.global.u8"),
            "{t}"
        );
    }

    #[test]
    fn cumsum_walks_each_line_in_order() {
        let plan = |exclusive, reverse| ScanPlan {
            outer: 2,
            dim: 5,
            inner: 3,
            exclusive,
            reverse,
        };
        let t = text(cumsum_kernel(DType::F32, plan(false, false)).unwrap());
        common(&t, "cumsum_float32");
        assert!(t.contains("mad.lo.u32 %r7, %r6, 15, %r5;"), "{t}");
        assert!(t.contains("add.u32 %r8, %r7, 0;"), "{t}");
        assert!(
            t.contains("add.f32") && t.contains("add.u32 %r8, %r8, 3;"),
            "{t}"
        );
        assert!(t.contains("mov.f32 %f0, 0f00000000;"), "a float zero: {t}");
        let st = t.find("st.global.f32").unwrap();
        assert!(
            t.find("add.f32").unwrap() < st,
            "inclusive adds, then stores: {t}"
        );
        let t = text(cumsum_kernel(DType::F16, plan(true, true)).unwrap());
        common(&t, "cumsum_float16_excl_rev");
        assert!(
            t.contains("add.u32 %r8, %r7, 12;"),
            "starts at the last: {t}"
        );
        assert!(t.contains("sub.u32 %r8, %r8, 3;"), "{t}");
        assert!(
            t.contains("cvt.f32.f16") && t.contains("cvt.rn.f16.f32"),
            "{t}"
        );
        let st = t.find("st.global.b16").unwrap();
        assert!(
            st < t.find("add.f32").unwrap(),
            "exclusive stores, then adds: {t}"
        );
        let t = text(cumsum_kernel(DType::BF16, plan(false, false)).unwrap());
        assert!(
            t.contains("shl.b32") && t.contains("cvt.rn.bf16.f32"),
            "{t}"
        );
        let t = text(cumsum_kernel(DType::I64, plan(false, false)).unwrap());
        assert!(t.contains("add.u64") && t.contains("st.global.u64"), "{t}");
        assert!(cumsum_kernel(DType::I8, plan(false, false)).is_err());
    }

    #[test]
    fn range_rounds_like_the_cpu() {
        let t = text(range_kernel(DType::F32).unwrap());
        common(&t, "range_float32");
        for s in [
            "cvt.rn.f64.u32",
            "mov.b64 %fd1, %rd2",
            "mul.rn.f64",
            "add.rn.f64",
            "cvt.rn.f32.f64",
            "st.global.f32",
        ] {
            assert!(t.contains(s), "{s}: {t}");
        }
        assert!(!t.contains("fma"), "{t}");
        let t = text(range_kernel(DType::F16).unwrap());
        assert!(
            t.contains("cvt.rn.f16.f64") && t.contains("st.global.b16"),
            "{t}"
        );
        let t = text(range_kernel(DType::I32).unwrap());
        assert!(
            t.contains("mad.lo.u64") && t.contains("cvt.u32.u64") && t.contains("st.global.u32"),
            "{t}"
        );
        let t = text(range_kernel(DType::U8).unwrap());
        assert!(
            t.contains("cvt.u16.u64") && t.contains("st.global.u8"),
            "{t}"
        );
        assert!(range_kernel(DType::BF16).is_err());
    }
}
