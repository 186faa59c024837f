//! CUDA kernels: the `reduce` family (Reduce*, ArgMax, ArgMin).
//!
//! A reduction is a [`Walk`]: the kept dims enumerate the outputs (row-major, which is the output's
//! own layout) and the reduced dims enumerate each output's elements. Both lists drop size-1 dims and
//! merge contiguous neighbours; their sizes and strides are baked into the PTX, so non-adjacent axes
//! need no transposed copy. Each output is one row of a [`Rows`] layout: one thread per output when
//! rows are short or strided (coalesced across outputs), one warp or one block per output when they are
//! long and contiguous. Sums and products accumulate in f64 and round once; Max and Min stay in f32
//! and propagate NaN; LogSumExp takes the max first and then sums exp(x - max) in f64.
pub(crate) mod rows;

use rows::{BLOCK, Elem, NONE, Rows, arg_combine, combine_add, combine_max, d, f32_of, f64_of};

use super::math::{exp64, log64};
use super::{offsets, require_u32_len, strides, thread_index};
use crate::driver::Arg;
use crate::ptx::{Cmp, Kernel, Reg, Space, Ty, module};
use crate::{CudaKernel, DevTensor, Inputs, KError, KResult, Run, blocks, dev_input, host_i64s};
use quorum_core::error::OpError;
use quorum_core::ir::Node;
use quorum_core::ops::reduce::geometry;
use quorum_core::ops::{OpCtx, norm_axis};
use quorum_core::tensor::DType;

/// The kernel for `node` if this family owns its op type.
pub fn claim(node: &Node) -> Option<Result<CudaKernel, String>> {
    let op = node.op_type.as_str();
    Some(Ok(if op == "DynamicQuantizeLinear" {
        super::integer::k_dynamic_quantize as CudaKernel
    } else if op.starts_with("Arg") {
        k_arg as CudaKernel
    } else {
        k_reduce as CudaKernel
    }))
}

/// A reduction operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Red {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    L1,
    L2,
    SumSquare,
    LogSum,
    LogSumExp,
}

impl Red {
    fn of(op: &str) -> Option<Red> {
        Some(match op {
            "ReduceSum" => Red::Sum,
            "ReduceMean" => Red::Mean,
            "ReduceMax" => Red::Max,
            "ReduceMin" => Red::Min,
            "ReduceProd" => Red::Prod,
            "ReduceL1" => Red::L1,
            "ReduceL2" => Red::L2,
            "ReduceSumSquare" => Red::SumSquare,
            "ReduceLogSum" => Red::LogSum,
            "ReduceLogSumExp" => Red::LogSumExp,
            _ => return None,
        })
    }

    /// The opset from which `axes` is the second input rather than an attribute.
    fn axes_input_since(self) -> i64 {
        if self == Red::Sum { 13 } else { 18 }
    }
}

/// How a reduction walks its input: `kept` enumerates the outputs and `red` each output's elements,
/// both as (size, element stride) lists, outermost first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Walk {
    pub kept: Vec<(usize, usize)>,
    pub red: Vec<(usize, usize)>,
    /// Number of outputs.
    pub outputs: usize,
    /// Elements per output.
    pub r: usize,
}

/// Drops size-1 dims and merges neighbours that are contiguous (outer stride = inner size × stride).
fn merge(dims: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for &(n, s) in dims {
        if n == 1 {
            continue;
        }
        if let Some(last) = out.last_mut()
            && last.1 == n * s
        {
            last.0 *= n;
            last.1 = s;
            continue;
        }
        out.push((n, s));
    }
    out
}

impl Walk {
    /// Reducing `shape` over `axes` (normalised, each < rank).
    pub(crate) fn new(shape: &[usize], axes: &[usize]) -> Walk {
        let st = strides(shape);
        let dims: Vec<(usize, usize)> = shape.iter().copied().zip(st).collect();
        let kept: Vec<(usize, usize)> = (0..shape.len())
            .filter(|i| !axes.contains(i))
            .map(|i| dims[i])
            .collect();
        let red: Vec<(usize, usize)> = (0..shape.len())
            .filter(|i| axes.contains(i))
            .map(|i| dims[i])
            .collect();
        Walk {
            outputs: kept.iter().map(|d| d.0).product(),
            r: red.iter().map(|d| d.0).product(),
            kept: merge(&kept),
            red: merge(&red),
        }
    }

    /// Whether each output's elements are adjacent in memory.
    pub(crate) fn contiguous(&self) -> bool {
        match self.red.as_slice() {
            [] => true,
            [(_, s)] => *s == 1,
            _ => false,
        }
    }

    /// The element offset of output `row`'s first element.
    fn base(&self, k: &mut Kernel, row: Reg) -> Reg {
        if self.kept.is_empty() {
            return k.mov(Ty::U32, 0u32);
        }
        let shape: Vec<usize> = self.kept.iter().map(|d| d.0).collect();
        let st: Vec<i64> = self.kept.iter().map(|d| d.1 as i64).collect();
        offsets(k, row, &shape, &[st])[0]
    }

    /// The offset of element `j` of an output relative to its first element.
    fn red_offset(&self, k: &mut Kernel, j: Reg) -> Reg {
        match self.red.as_slice() {
            [] => k.mov(Ty::U32, 0u32),
            [(_, 1)] => j,
            [(_, s)] => k.mul(Ty::U32, j, *s as u32),
            _ => {
                let shape: Vec<usize> = self.red.iter().map(|d| d.0).collect();
                let st: Vec<i64> = self.red.iter().map(|d| d.1 as i64).collect();
                offsets(k, j, &shape, &[st])[0]
            }
        }
    }
}

/// `body(k, value, j)` over the elements this thread owns of its output (values as f32).
#[allow(clippy::too_many_arguments)]
fn for_elems(
    k: &mut Kernel,
    layout: Rows,
    ids: &rows::RowIds,
    w: &Walk,
    base: Reg,
    x: Reg,
    e: Elem,
    body: impl FnOnce(&mut Kernel, Reg, Reg),
) {
    layout.for_each(k, ids, w.r, |k, j| {
        let off = w.red_offset(k, j);
        let i = k.add(Ty::U32, base, off);
        let v = rows::load(k, e, x, i);
        body(k, v, j);
    });
}

fn combine_mul(k: &mut Kernel, mine: &[Reg], other: &[Reg]) {
    let p = k.mul(mine[0].ty, mine[0], other[0]);
    k.assign(mine[0], p);
}

fn combine_min(k: &mut Kernel, mine: &[Reg], other: &[Reg]) {
    let m = rows::min_nan(k, mine[0], other[0]);
    k.assign(mine[0], m);
}

/// What a one-pass reduction accumulates: a Reduce* operator other than LogSumExp (which needs the
/// max first), or ArgMax/ArgMin. Each is an identity state, a per-element step, a commutative merge
/// and a final value, so the same fold runs in one pass or in chunks merged by a second kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fold {
    Red(Red),
    Arg { is_max: bool, last: bool },
}

impl Fold {
    /// The state's registers (each stored as one 8-byte slot between passes).
    fn init(self, k: &mut Kernel) -> Vec<Reg> {
        match self {
            Fold::Arg { .. } => vec![k.mov(Ty::F32, 0.0f32), k.mov(Ty::U32, NONE)],
            Fold::Red(Red::Max) => vec![k.mov(Ty::F32, f32::NEG_INFINITY)],
            Fold::Red(Red::Min) => vec![k.mov(Ty::F32, f32::INFINITY)],
            Fold::Red(Red::Prod) => vec![k.mov(Ty::F64, 1.0f64)],
            Fold::Red(_) => vec![k.mov(Ty::F64, 0.0f64)],
        }
    }

    fn slots(self) -> usize {
        if matches!(self, Fold::Arg { .. }) {
            2
        } else {
            1
        }
    }

    /// Folds element `j` of value `v` (f32) into `acc`.
    fn step(self, k: &mut Kernel, acc: &[Reg], v: Reg, j: Reg) {
        match self {
            Fold::Arg { .. } => self.combine(k, acc, &[v, j]),
            Fold::Red(Red::Max | Red::Min) => self.combine(k, acc, &[v]),
            Fold::Red(red) => {
                let vd = f64_of(k, v);
                let t = match red {
                    Red::L1 => {
                        let a = k.unary("abs", Ty::F64, vd);
                        k.add(Ty::F64, acc[0], a)
                    }
                    Red::L2 | Red::SumSquare => k.fma(Ty::F64, vd, vd, acc[0]),
                    Red::Prod => k.mul(Ty::F64, acc[0], vd),
                    _ => k.add(Ty::F64, acc[0], vd),
                };
                k.assign(acc[0], t);
            }
        }
    }

    fn combine(self, k: &mut Kernel, a: &[Reg], b: &[Reg]) {
        match self {
            Fold::Arg { is_max, last } => arg_combine(is_max, last)(k, a, b),
            Fold::Red(Red::Max) => combine_max(k, a, b),
            Fold::Red(Red::Min) => combine_min(k, a, b),
            Fold::Red(Red::Prod) => combine_mul(k, a, b),
            Fold::Red(_) => combine_add(k, a, b),
        }
    }

    /// Stores the final value of `acc` (a fold of `r` elements) as output `row` of `y`.
    fn store(self, k: &mut Kernel, acc: &[Reg], e: Elem, y: Reg, row: Reg, r: usize) {
        match self {
            Fold::Arg { .. } => {
                let wide = k.cvt(Ty::S64, Ty::U32, "", acc[1]);
                let a = k.addr(y, row, 8);
                k.st(Space::Global, a, 0, wide);
            }
            Fold::Red(Red::Max | Red::Min) => rows::store(k, e, y, row, acc[0]),
            Fold::Red(red) => {
                let out = match red {
                    Red::Mean => k.div(Ty::F64, acc[0], d(r as f64)),
                    Red::L2 => k.unary("sqrt.rn", Ty::F64, acc[0]),
                    Red::LogSum => log64(k, acc[0]),
                    _ => acc[0],
                };
                rows::store_f64(k, e, y, row, out);
            }
        }
    }
}

/// The kernel `fold(x, y, rows)`: output `row` of `y` folds its whole walk of `x`.
pub(crate) fn fold_kernel(fold: Fold, e: Elem, w: &Walk, layout: Rows) -> Kernel {
    let mut k = Kernel::new("fold");
    let x = k.param_ptr("x");
    let y = k.param_ptr("y");
    let nrows = k.param("rows", Ty::U32);
    let ids = layout.ids(&mut k, nrows);
    let base = w.base(&mut k, ids.row);
    let acc = fold.init(&mut k);
    for_elems(&mut k, layout, &ids, w, base, x, e, |k, v, j| {
        fold.step(k, &acc, v, j)
    });
    layout.reduce(&mut k, &ids, &acc, &|k, a, b| fold.combine(k, a, b));
    layout.leader(&mut k, &ids, |k| fold.store(k, &acc, e, y, ids.row, w.r));
    k
}

/// Pass 1 of a chunked fold, `fold_part(x, part, rows)`: block column `c` = `ctaid.y` folds
/// elements `[c·len, (c+1)·len)` of each row and stores its state in `part`, laid out as
/// `[row][chunk][slot]` with 8-byte slots.
pub(crate) fn part_kernel(
    fold: Fold,
    e: Elem,
    w: &Walk,
    layout: Rows,
    len: usize,
    chunks: usize,
) -> Kernel {
    let mut k = Kernel::new("fold_part");
    let x = k.param_ptr("x");
    let part = k.param_ptr("part");
    let nrows = k.param("rows", Ty::U32);
    let ids = layout.ids(&mut k, nrows);
    let base = w.base(&mut k, ids.row);
    let c = k.special("ctaid.y");
    let lo = k.mul(Ty::U32, c, len as u32);
    let hi = k.add(Ty::U32, lo, len as u32);
    let hi = k.min(Ty::U32, hi, w.r as u32);
    let acc = fold.init(&mut k);
    layout.for_span(&mut k, &ids, lo, hi, |k, j| {
        let off = w.red_offset(k, j);
        let i = k.add(Ty::U32, base, off);
        let v = rows::load(k, e, x, i);
        fold.step(k, &acc, v, j);
    });
    layout.reduce(&mut k, &ids, &acc, &|k, a, b| fold.combine(k, a, b));
    layout.leader(&mut k, &ids, |k| {
        let at = k.fma(Ty::U32, ids.row, chunks as u32, c);
        let at = k.mul(Ty::U32, at, acc.len() as u32);
        let a = k.addr(part, at, 8);
        for (i, &r) in acc.iter().enumerate() {
            k.st(Space::Global, a, (i * 8) as i64, r);
        }
    });
    k
}

/// Pass 2 of a chunked fold, `fold_merge(part, y, rows)`: one warp per row merges the states of its
/// chunks (in any order: every merge is commutative and, for ArgMax/ArgMin, a total order) and stores
/// the output.
pub(crate) fn merge_kernel(fold: Fold, e: Elem, chunks: usize, r: usize) -> Kernel {
    let mut k = Kernel::new("fold_merge");
    let part = k.param_ptr("part");
    let y = k.param_ptr("y");
    let nrows = k.param("rows", Ty::U32);
    let layout = Rows::Lanes(32);
    let ids = layout.ids(&mut k, nrows);
    let acc = fold.init(&mut k);
    let n = acc.len();
    let first = k.mul(Ty::U32, ids.row, (chunks * n) as u32);
    layout.for_each(&mut k, &ids, chunks, |k, c| {
        let at = k.fma(Ty::U32, c, n as u32, first);
        let a = k.addr(part, at, 8);
        let vals: Vec<Reg> = acc
            .iter()
            .enumerate()
            .map(|(i, r)| k.ld(Space::Global, r.ty, a, (i * 8) as i64))
            .collect();
        fold.combine(k, &acc, &vals);
    });
    layout.reduce(&mut k, &ids, &acc, &|k, a, b| fold.combine(k, a, b));
    layout.leader(&mut k, &ids, |k| fold.store(k, &acc, e, y, ids.row, r));
    k
}

/// The kernel `lse(x, y, rows)`: ReduceLogSumExp, the max first, then the sum of exp(x - max) in
/// f64.
pub(crate) fn lse_kernel(e: Elem, w: &Walk, layout: Rows) -> Kernel {
    let mut k = Kernel::new("lse");
    let x = k.param_ptr("x");
    let y = k.param_ptr("y");
    let nrows = k.param("rows", Ty::U32);
    let ids = layout.ids(&mut k, nrows);
    let base = w.base(&mut k, ids.row);
    let m = k.mov(Ty::F32, f32::NEG_INFINITY);
    for_elems(&mut k, layout, &ids, w, base, x, e, |k, v, _| {
        let t = rows::max_nan(k, m, v);
        k.assign(m, t);
    });
    layout.reduce(&mut k, &ids, &[m], &combine_max);
    let md = f64_of(&mut k, m);
    let s = k.mov(Ty::F64, 0.0f64);
    for_elems(&mut k, layout, &ids, w, base, x, e, |k, v, _| {
        let vd = f64_of(k, v);
        let dv = k.sub(Ty::F64, vd, md);
        let ev = exp64(k, dv);
        let t = k.add(Ty::F64, s, ev);
        k.assign(s, t);
    });
    layout.reduce(&mut k, &ids, &[s], &combine_add);
    let l = log64(&mut k, s);
    let r = k.add(Ty::F64, md, l);
    let r = f32_of(&mut k, r);
    // An infinite max is the result itself (-inf for an empty or all -inf set).
    let am = k.unary("abs", Ty::F32, m);
    let inf = k.setp(Cmp::Eq, Ty::F32, am, f32::INFINITY);
    let res = k.selp(Ty::F32, m, r, inf);
    layout.leader(&mut k, &ids, |k| rows::store(k, e, y, ids.row, res));
    k
}

/// Chunks per row for a fold whose one-pass launch would be `blocks` blocks: enough to give the
/// device about a thousand blocks, each thread still folding a few dozen elements.
fn chunks_for(blocks: usize, threads_per_row: usize, r: usize) -> usize {
    if blocks >= 512 {
        return 1;
    }
    let want = 1024usize.div_ceil(blocks.max(1));
    let most = r / (threads_per_row * 32).max(1);
    want.min(most).clamp(1, 1024)
}

/// Launches `fold` over the walk `w` of `x` into `y`: one pass, or two when the rows are too few to
/// fill the device.
fn launch_fold(
    run: &Run,
    fold: Fold,
    e: Elem,
    w: &Walk,
    contiguous: bool,
    x: &DevTensor,
    y: &DevTensor,
) -> KResult<()> {
    let rows = w.outputs;
    let layout = Rows::choose(rows, w.r, contiguous);
    let grid = layout.grid(rows);
    let chunks = chunks_for(grid as usize, layout.threads() as usize, w.r);
    let n = Arg::U32(rows as u32);
    if chunks <= 1 {
        let ptx = module(run.cc(), &[fold_kernel(fold, e, w, layout)]);
        return run.launch(
            &ptx,
            "fold",
            (grid, 1, 1),
            (BLOCK, 1, 1),
            0,
            &[x.arg_in(), y.arg_out(), n],
        );
    }
    let len = w.r.div_ceil(chunks);
    let chunks = w.r.div_ceil(len);
    let part = run.alloc(DType::F64, &[rows * chunks * fold.slots()])?;
    let ptx = module(run.cc(), &[part_kernel(fold, e, w, layout, len, chunks)]);
    run.launch(
        &ptx,
        "fold_part",
        (grid, chunks as u32, 1),
        (BLOCK, 1, 1),
        0,
        &[x.arg_in(), part.arg_out(), n],
    )?;
    let ptx = module(run.cc(), &[merge_kernel(fold, e, chunks, w.r)]);
    let part_arg = part.arg_in();
    let part = run.scratch_before_last_read(part);
    run.launch(
        &ptx,
        "fold_merge",
        (Rows::Lanes(32).grid(rows), 1, 1),
        (BLOCK, 1, 1),
        0,
        &[part_arg, y.arg_out(), n],
    )?;
    if let Some(part) = part {
        run.release(part, &[]);
    }
    Ok(())
}

/// The reduced axes of a Reduce* node, by the rules every backend shares
/// (`quorum_core::ops::reduce::reduced_axes`).
fn reduced_axes(ctx: &OpCtx, inputs: &dyn Inputs, rank: usize, since: i64) -> KResult<Vec<usize>> {
    let axes_in = if inputs.len() > 1 && inputs.present(1) {
        host_i64s(inputs, 1)?
    } else {
        None
    };
    Ok(quorum_core::ops::reduce::reduced_axes(
        ctx, rank, axes_in, since,
    )?)
}

fn input_shape(inputs: &dyn Inputs, i: usize) -> KResult<Vec<usize>> {
    inputs
        .shape(i)
        .ok_or_else(|| KError::Op(OpError::Invalid(format!("input {i} is required"))))
}

/// Reduces the device tensor `x` over `axes` (normalised, sorted, deduplicated) with `red`.
pub(crate) fn reduce_dev(
    run: &Run,
    x: &DevTensor,
    red: Red,
    axes: &[usize],
    keepdims: bool,
) -> KResult<DevTensor> {
    let e = Elem::operand("the input", Some(x.dtype))?;
    require_u32_len(&x.shape)?;
    let g = geometry(&x.shape, axes);
    let out_shape = if keepdims { g.keep_shape } else { g.drop_shape };
    let w = Walk::new(&x.shape, axes);
    let y = run.alloc(e.dtype(), &out_shape)?;
    if w.outputs == 0 {
        return Ok(y);
    }
    if red == Red::LogSumExp {
        let layout = Rows::choose(w.outputs, w.r, w.contiguous());
        let ptx = module(run.cc(), &[lse_kernel(e, &w, layout)]);
        run.launch(
            &ptx,
            "lse",
            (layout.grid(w.outputs), 1, 1),
            (BLOCK, 1, 1),
            0,
            &[x.arg_in(), y.arg_out(), Arg::U32(w.outputs as u32)],
        )?;
    } else {
        launch_fold(run, Fold::Red(red), e, &w, w.contiguous(), x, &y)?;
    }
    Ok(y)
}

fn k_reduce(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let op = ctx.node.op_type.as_str();
    let red = Red::of(op).ok_or_else(|| KError::Decline(format!("{op} is not a reduction")))?;
    Elem::operand("the input", inputs.dtype(0))?;
    let rank = input_shape(inputs, 0)?.len();
    let keepdims = ctx.attr_i("keepdims", 1)? != 0;
    let axes = reduced_axes(ctx, inputs, rank, red.axes_input_since())?;
    let x = dev_input(inputs, 0)?;
    Ok(vec![reduce_dev(run, &x, red, &axes, keepdims)?])
}

/// ArgMax/ArgMin over 32- or 64-bit integers (token ids: CLIP's text model picks its pooled
/// position by an ArgMax over them): one thread per output walks the axis in order and keeps the
/// first extreme (the last with `select_last_index`), as the CPU does. `kept`: the output's dims as
/// (size, input stride), outermost first; the axis has `n` elements `s` apart.
pub(crate) fn arg_int_kernel(
    ity: Ty,
    is_max: bool,
    last: bool,
    kept: &[(usize, usize)],
    n: usize,
    s: usize,
) -> Kernel {
    let size = if matches!(ity, Ty::S32 | Ty::U32) {
        4
    } else {
        8
    };
    let mut k = Kernel::new(&format!(
        "arg{}_{}",
        if is_max { "max" } else { "min" },
        ity.suffix()
    ));
    let yp = k.param_ptr("y");
    let xp = k.param_ptr("x");
    let outs = k.param("outputs", Ty::U32);
    let o = thread_index(&mut k, outs);
    let mut base = k.mov(Ty::U32, 0u32);
    let mut rest = o;
    for (d, &(dn, ds)) in kept.iter().enumerate().rev() {
        if d == 0 {
            base = k.fma(Ty::U32, rest, ds as u32, base);
            break;
        }
        let c = k.rem(Ty::U32, rest, dn as u32);
        base = k.fma(Ty::U32, c, ds as u32, base);
        rest = k.div(Ty::U32, rest, dn as u32);
    }
    let xa = k.addr(xp, base, size);
    let first = k.ld_nc(ity, xa, 0);
    let best = k.mov(ity, first);
    let at = k.mov(Ty::U32, 0u32);
    let p = k.mov(Ty::U32, base);
    k.for_range(Ty::U32, 1u32, n as u32, 1u32, |k, j| {
        k.raw(format_args!("add.u32 {p}, {p}, {s}"));
        let a = k.addr(xp, p, size);
        let v = k.ld_nc(ity, a, 0);
        let cmp = match (is_max, last) {
            (true, false) => Cmp::Gt,
            (true, true) => Cmp::Ge,
            (false, false) => Cmp::Lt,
            (false, true) => Cmp::Le,
        };
        let take = k.setp(cmp, ity, v, best);
        let nb = k.selp(ity, v, best, take);
        k.assign(best, nb);
        let na = k.selp(Ty::U32, j, at, take);
        k.assign(at, na);
    });
    let wide = k.cvt(Ty::U64, Ty::U32, "", at);
    let ya = k.addr(yp, o, 8);
    k.st(Space::Global, ya, 0, wide);
    k
}

fn k_arg(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let is_max = ctx.node.op_type == "ArgMax";
    let int = match inputs.dtype(0) {
        Some(DType::I32) => Some(Ty::S32),
        Some(DType::I64) => Some(Ty::S64),
        Some(DType::U32) => Some(Ty::U32),
        Some(DType::U64) => Some(Ty::U64),
        _ => None,
    };
    let e = match int {
        Some(_) => Elem::F32,
        None => Elem::operand("the input", inputs.dtype(0))?,
    };
    let shape = input_shape(inputs, 0)?;
    let rank = shape.len();
    let axis = norm_axis(ctx.attr_i("axis", 0)?, rank)?;
    let keepdims = ctx.attr_i("keepdims", 1)? != 0;
    let last = ctx.attr_i("select_last_index", 0)? != 0;
    if rank > 0 && shape[axis] == 0 {
        return Err(KError::Op(OpError::Invalid(format!(
            "{} over an empty axis {axis} of shape {shape:?}",
            ctx.node.op_type
        ))));
    }
    require_u32_len(&shape)?;
    let axes: Vec<usize> = if rank == 0 { vec![] } else { vec![axis] };
    let g = geometry(&shape, &axes);
    let out_shape = if keepdims { g.keep_shape } else { g.drop_shape };
    let st = strides(&shape);
    let kept: Vec<(usize, usize)> = (0..rank)
        .filter(|&i| i != axis)
        .map(|i| (shape[i], st[i]))
        .collect();
    let (n, s) = if rank == 0 {
        (1, 1)
    } else {
        (shape[axis], st[axis])
    };
    // The reduced dim stays even when it has size 1: the loop index is the answer.
    let w = Walk {
        outputs: kept.iter().map(|d| d.0).product(),
        kept: merge(&kept),
        red: vec![(n, s)],
        r: n,
    };
    let x = dev_input(inputs, 0)?;
    let y = run.alloc(DType::I64, &out_shape)?;
    if w.outputs == 0 {
        return Ok(vec![y]);
    }
    if let Some(ity) = int {
        let outputs = require_u32_len(&[w.outputs])?;
        let kept: Vec<(usize, usize)> = if w.kept.is_empty() {
            vec![(1, 0)]
        } else {
            w.kept.clone()
        };
        let ptx = module(run.cc(), &[arg_int_kernel(ity, is_max, last, &kept, n, s)]);
        let name = if is_max { "argmax" } else { "argmin" };
        run.launch(
            &ptx,
            &format!("{name}_{}", ity.suffix()),
            (blocks(w.outputs, BLOCK), 1, 1),
            (BLOCK, 1, 1),
            0,
            &[y.arg_out(), x.arg_in(), Arg::U32(outputs)],
        )?;
        return Ok(vec![y]);
    }
    launch_fold(run, Fold::Arg { is_max, last }, e, &w, s == 1, &x, &y)?;
    Ok(vec![y])
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn integer_arg_walks_the_axis_in_order() {
        let t = module(
            (9, 0),
            &[arg_int_kernel(
                Ty::S64,
                true,
                false,
                &[(2, 12), (4, 1)],
                3,
                4,
            )],
        );
        assert!(t.contains(".entry argmax_s64("), "{t}");
        for s in [
            "rem.u32 %r6, %r4, 4;",
            "mad.lo.u32 %r9, %r8, 12, %r7;",
            "add.u32 %r11, %r11, 4;",
            "setp.gt.s64",
            "st.global.u64",
        ] {
            assert!(t.contains(s), "{s}: {t}");
        }
        // select_last_index takes ties; ArgMin compares the other way; 32-bit loads.
        let t = module(
            (9, 0),
            &[arg_int_kernel(Ty::S32, false, true, &[(1, 0)], 5, 1)],
        );
        assert!(
            t.contains(".entry argmin_s32(") && t.contains("setp.le.s32"),
            "{t}"
        );
        assert!(t.contains("ld.global.nc.s32"), "{t}");
        let t = module(
            (9, 0),
            &[arg_int_kernel(Ty::U64, true, true, &[(3, 1)], 2, 3)],
        );
        assert!(
            t.contains("setp.ge.u64") || t.contains("setp.hs.u64"),
            "{t}"
        );
    }

    #[test]
    fn walks_merge_and_split() {
        // Trailing axes: contiguous rows.
        let w = Walk::new(&[2, 3, 4, 5], &[2, 3]);
        assert_eq!(
            (w.kept.clone(), w.red.clone()),
            (vec![(6, 20)], vec![(20, 1)])
        );
        assert!(w.contiguous() && w.outputs == 6 && w.r == 20);
        // Middle axis: strided rows.
        let w = Walk::new(&[2, 3, 4], &[1]);
        assert_eq!(
            (w.kept.clone(), w.red.clone()),
            (vec![(2, 12), (4, 1)], vec![(3, 4)])
        );
        assert!(!w.contiguous());
        // Axes separated by a size-1 dim merge through it; truly split axes stay two dims.
        let w = Walk::new(&[3, 1, 4, 5], &[0, 2]);
        assert_eq!(
            (w.kept.clone(), w.red.clone()),
            (vec![(5, 1)], vec![(12, 5)])
        );
        let w = Walk::new(&[3, 5, 7], &[0, 2]);
        assert_eq!(
            (w.kept.clone(), w.red.clone()),
            (vec![(5, 7)], vec![(3, 35), (7, 1)])
        );
        // No axes (noop): one element per output.
        let w = Walk::new(&[2, 3], &[]);
        assert_eq!((w.outputs, w.r, w.red.len()), (6, 1, 0));
        // Empty reduced set.
        let w = Walk::new(&[2, 0, 3], &[1]);
        assert_eq!((w.outputs, w.r), (6, 0));
    }

    fn text(k: Kernel) -> String {
        module((9, 0), &[k])
    }

    /// Every fold, shared with the PTX golden digest.
    pub(crate) const FOLDS: &[Fold] = &[
        Fold::Red(Red::Sum),
        Fold::Red(Red::Mean),
        Fold::Red(Red::Max),
        Fold::Red(Red::Min),
        Fold::Red(Red::Prod),
        Fold::Red(Red::L1),
        Fold::Red(Red::L2),
        Fold::Red(Red::SumSquare),
        Fold::Red(Red::LogSum),
        Fold::Arg {
            is_max: true,
            last: false,
        },
        Fold::Arg {
            is_max: false,
            last: true,
        },
    ];

    fn check_layout(t: &str, layout: Rows) {
        assert!(t.contains(".param .u32 rows"), "{t}");
        assert!(t.contains("L_loop_"), "{t}");
        assert!(!t.contains(".approx"), "{t}");
        let sync = matches!(layout, Rows::Block | Rows::Cols(_));
        assert_eq!(t.contains("bar.sync"), sync, "{t}");
        let shfl = matches!(layout, Rows::Lanes(_) | Rows::Block);
        assert_eq!(t.contains("shfl.sync"), shfl, "{t}");
    }

    #[test]
    fn fold_kernels_are_well_formed() {
        for (shape, axes) in [
            (vec![7, 5000], vec![1]),
            (vec![1000, 40], vec![1]),
            (vec![3, 5, 7], vec![1]),
            (vec![3, 5, 7], vec![0, 2]),
        ] {
            let w = Walk::new(&shape, &axes);
            for layout in [
                Rows::Thread,
                Rows::Cols(8),
                Rows::Lanes(4),
                Rows::Lanes(32),
                Rows::Block,
            ] {
                for &fold in FOLDS {
                    let t = text(fold_kernel(fold, Elem::F32, &w, layout));
                    assert!(t.contains(".visible .entry fold("), "{t}");
                    check_layout(&t, layout);
                    let t = text(part_kernel(fold, Elem::F32, &w, layout, 100, 50));
                    assert!(t.contains(".visible .entry fold_part("), "{t}");
                    assert!(t.contains("%ctaid.y") && t.contains("min.u32"), "{t}");
                    check_layout(&t, layout);
                    let arg = matches!(fold, Fold::Arg { .. });
                    assert_eq!(t.contains("st.global.u32"), arg, "{t}");
                }
                let t = text(lse_kernel(Elem::F32, &w, layout));
                assert!(t.contains(".visible .entry lse("), "{t}");
                check_layout(&t, layout);
            }
        }
        for &fold in FOLDS {
            let t = text(merge_kernel(fold, Elem::F32, 50, 5000));
            assert!(
                t.contains(".visible .entry fold_merge(") && t.contains("ld.global."),
                "{t}"
            );
            let arg = matches!(fold, Fold::Arg { .. });
            assert_eq!(t.contains("st.global.s64"), arg, "{t}");
        }
        let w = Walk::new(&[4, 6], &[1]);
        let t = text(fold_kernel(
            Fold::Red(Red::Max),
            Elem::F16,
            &w,
            Rows::Lanes(32),
        ));
        assert!(
            t.contains("ld.global.nc.b16") && t.contains("cvt.f32.f16"),
            "{t}"
        );
        assert!(
            t.contains("cvt.rn.f16.f32") && t.contains("st.global.b16"),
            "{t}"
        );
        assert!(t.contains("max.NaN.f32"), "{t}");
    }

    #[test]
    fn chunking_fills_the_device() {
        // One long row (reduce all): about a thousand chunks.
        assert_eq!(chunks_for(1, 256, 16 << 20), 1024);
        // 64 long rows, one block each.
        assert_eq!(chunks_for(64, 256, 1 << 20), 16);
        // Enough blocks already, or too little work.
        assert_eq!(chunks_for(1024, 32, 1 << 20), 1);
        assert_eq!(chunks_for(1, 256, 5000), 1);
    }
}
