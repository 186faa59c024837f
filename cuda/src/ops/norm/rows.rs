//! Row normalizations (Instance, Layer and Group normalization): each normalized group is a
//! contiguous row. Rows take one row kernel (three passes in f64: the mean, the centred variance,
//! then `(x - mean) · inv · scale + bias` rounded once), a warp per row where rows fill the device
//! and a block per row where they are few; a row of up to 32 elements per thread is read once into
//! registers, longer ones are read in each pass. A few very long rows take
//! their statistics in chunks (mean and M2 per chunk, merged per row), then one thread per element.
//! The ops differ only in where a row's scale and bias come from ([`ParamAt`]).
use super::super::reduce::rows::{
    BLOCK, Elem, RowIds, Rows, combine_add, d, f32_of, load_f64, store, store_f64,
};
use super::super::{offsets, require_u32_len, thread_index};
use crate::driver::Arg;
use crate::ptx::{Cmp, Kernel, Op, Reg, Space, Ty, module};
use crate::{DevTensor, Inputs, KResult, Run, blocks, dev_input};
use quorum_core::tensor::DType;

/// Where element `j` of row `row` finds its scale and bias.
#[derive(Clone, Debug)]
pub(crate) enum ParamAt {
    /// Indexed by the column through these (simplified) dims and per-parameter strides [scale, bias]
    /// (LayerNormalization's broadcast parameters).
    Cols {
        shape: Vec<usize>,
        strides: Vec<Vec<i64>>,
    },
    /// One per row: `row % c` (InstanceNormalization, per-group GroupNormalization).
    Row { c: usize },
    /// Per channel within a group: `(row % g) · cpg + j / inner` (GroupNormalization, opset 21).
    Channel { g: usize, cpg: usize, inner: usize },
}

/// A row normalization: rows of `cols` contiguous elements.
#[derive(Clone, Debug)]
pub(crate) struct RowNorm {
    pub x: Elem,
    pub scale: Elem,
    /// The bias's element type, `None` when there is no bias (LayerNormalization's optional B).
    pub bias: Option<Elem>,
    pub cols: usize,
    pub eps: f64,
    pub at: ParamAt,
    /// Also write each row's mean and 1/stddev as f32.
    pub stats: bool,
}

/// `a % m` for a constant `m` (0 taken as 1).
pub(super) fn rem_const(k: &mut Kernel, a: Reg, m: usize) -> Reg {
    k.rem(Ty::U32, a, m.max(1) as u32)
}

/// The pointers of a normalization's data and parameters.
struct Params {
    x: Reg,
    w: Reg,
    b: Option<Reg>,
}

impl Params {
    /// Declares `x`, `scale` and (when there is one) `bias`, in that order.
    fn declare(k: &mut Kernel, s: &RowNorm) -> Params {
        let x = k.param_ptr("x");
        let w = k.param_ptr("scale");
        let b = s.bias.map(|_| k.param_ptr("bias"));
        Params { x, w, b }
    }
}

/// `(v - mean) · inv · scale + bias` in f64 for element `j` of row `row`, `v` its value.
#[allow(clippy::too_many_arguments)]
fn normalize(
    k: &mut Kernel,
    s: &RowNorm,
    p: &Params,
    v: Reg,
    row: Reg,
    j: Reg,
    mean: Reg,
    inv: Reg,
) -> Reg {
    let dv = k.sub(Ty::F64, v, mean);
    let t = k.mul(Ty::F64, dv, inv);
    let (wi, bi) = match &s.at {
        ParamAt::Row { c } => {
            let r = rem_const(k, row, *c);
            (r, r)
        }
        ParamAt::Channel { g, cpg, inner } => {
            let r = rem_const(k, row, *g);
            let ch = k.div(Ty::U32, j, (*inner).max(1) as u32);
            let ch = k.fma(Ty::U32, r, *cpg as u32, ch);
            (ch, ch)
        }
        ParamAt::Cols { shape, strides } if !shape.is_empty() => {
            let o = offsets(k, j, shape, strides);
            (o[0], o[1])
        }
        ParamAt::Cols { .. } => {
            let z = k.mov(Ty::U32, 0u32);
            (z, z)
        }
    };
    let wv = load_f64(k, s.scale, p.w, wi);
    let bv = match (p.b, s.bias) {
        (Some(b), Some(eb)) => load_f64(k, eb, b, bi),
        _ => k.mov(Ty::F64, 0.0f64),
    };
    k.fma(Ty::F64, t, wv, bv)
}

/// Pass 1 of chunked statistics, `norm_part(x, part, rows)`: block (row, c = `ctaid.y`) takes the
/// mean and the sum of squared deviations (M2) of elements `[c·len, (c+1)·len)` of its row, two
/// passes in f64, and stores them at `part[(row · chunks + c) · 2]`.
pub(crate) fn norm_part_kernel(s: &RowNorm, len: usize, chunks: usize) -> Kernel {
    let mut k = Kernel::new("norm_part");
    let x = k.param_ptr("x");
    let part = k.param_ptr("part");
    let nrows = k.param("rows", Ty::U32);
    let layout = Rows::Block;
    let ids = layout.ids(&mut k, nrows);
    let base = k.mul(Ty::U32, ids.row, s.cols as u32);
    let c = k.special("ctaid.y");
    let lo = k.mul(Ty::U32, c, len as u32);
    let hi = k.add(Ty::U32, lo, len as u32);
    let hi = k.min(Ty::U32, hi, s.cols as u32);
    let sum = k.mov(Ty::F64, 0.0f64);
    layout.for_span(&mut k, &ids, lo, hi, |k, j| {
        let i = k.add(Ty::U32, base, j);
        let v = load_f64(k, s.x, x, i);
        let t = k.add(Ty::F64, sum, v);
        k.assign(sum, t);
    });
    layout.reduce(&mut k, &ids, &[sum], &combine_add);
    let cnt = k.sub(Ty::U32, hi, lo);
    let cnt = k.cvt(Ty::F64, Ty::U32, ".rn", cnt);
    let mean = k.div(Ty::F64, sum, cnt);
    let sq = k.mov(Ty::F64, 0.0f64);
    layout.for_span(&mut k, &ids, lo, hi, |k, j| {
        let i = k.add(Ty::U32, base, j);
        let v = load_f64(k, s.x, x, i);
        let dv = k.sub(Ty::F64, v, mean);
        let t = k.fma(Ty::F64, dv, dv, sq);
        k.assign(sq, t);
    });
    layout.reduce(&mut k, &ids, &[sq], &combine_add);
    layout.leader(&mut k, &ids, |k| {
        let at = k.fma(Ty::U32, ids.row, chunks as u32, c);
        let at = k.mul(Ty::U32, at, 2u32);
        let a = k.addr(part, at, 8);
        k.st(Space::Global, a, 0, mean);
        k.st(Space::Global, a, 8, sq);
    });
    k
}

/// Pass 2, `norm_merge(part, stat, [mean, inv], rows)`: one warp per row merges its chunks'
/// statistics: the mean is `Σ n_c·mean_c / cols`, then `M2 = Σ (M2_c + n_c·(mean_c - mean)²)`. It
/// stores the row's mean and 1/stddev as f64 at `stat[row · 2]`, and as f32 in the Mean/InvStdDev
/// outputs when wanted.
pub(crate) fn norm_merge_kernel(s: &RowNorm, len: usize, chunks: usize) -> Kernel {
    let mut k = Kernel::new("norm_merge");
    let part = k.param_ptr("part");
    let stat = k.param_ptr("stat");
    let outs = if s.stats {
        Some((k.param_ptr("mean"), k.param_ptr("inv")))
    } else {
        None
    };
    let nrows = k.param("rows", Ty::U32);
    let layout = Rows::Lanes(32);
    let ids = layout.ids(&mut k, nrows);
    let first = k.mul(Ty::U32, ids.row, (chunks * 2) as u32);
    // Chunk c: its (mean, M2) and its element count as f64.
    let chunk = |k: &mut Kernel, c: Reg| -> (Reg, Reg, Reg) {
        let at = k.fma(Ty::U32, c, 2u32, first);
        let a = k.addr(part, at, 8);
        let mb = k.ld(Space::Global, Ty::F64, a, 0);
        let qb = k.ld(Space::Global, Ty::F64, a, 8);
        let lo = k.mul(Ty::U32, c, len as u32);
        let left = k.sub(Ty::U32, s.cols as u32, lo);
        let nb = k.min(Ty::U32, left, len as u32);
        let nb = k.cvt(Ty::F64, Ty::U32, ".rn", nb);
        (mb, qb, nb)
    };
    let total = k.mov(Ty::F64, 0.0f64);
    layout.for_each(&mut k, &ids, chunks, |k, c| {
        let (mb, _, nb) = chunk(k, c);
        let t = k.fma(Ty::F64, mb, nb, total);
        k.assign(total, t);
    });
    layout.reduce(&mut k, &ids, &[total], &combine_add);
    let mean = k.div(Ty::F64, total, d(s.cols as f64));
    let m2 = k.mov(Ty::F64, 0.0f64);
    layout.for_each(&mut k, &ids, chunks, |k, c| {
        let (mb, qb, nb) = chunk(k, c);
        let dv = k.sub(Ty::F64, mb, mean);
        let sq = k.mul(Ty::F64, dv, dv);
        let t = k.fma(Ty::F64, sq, nb, qb);
        let t = k.add(Ty::F64, m2, t);
        k.assign(m2, t);
    });
    layout.reduce(&mut k, &ids, &[m2], &combine_add);
    let var = k.div(Ty::F64, m2, d(s.cols as f64));
    let ve = k.add(Ty::F64, var, d(s.eps));
    let sd = k.unary("sqrt.rn", Ty::F64, ve);
    let inv = k.div(Ty::F64, d(1.0), sd);
    layout.leader(&mut k, &ids, |k| {
        let at = k.mul(Ty::U32, ids.row, 2u32);
        let a = k.addr(stat, at, 8);
        k.st(Space::Global, a, 0, mean);
        k.st(Space::Global, a, 8, inv);
        if let Some((mp, ip)) = outs {
            let m32 = f32_of(k, mean);
            store(k, Elem::F32, mp, ids.row, m32);
            let i32v = f32_of(k, inv);
            store(k, Elem::F32, ip, ids.row, i32v);
        }
    });
    k
}

/// Pass 3, `norm_apply(x, scale, [bias], stat, y, n)`: one thread per element normalizes with its
/// row's (mean, inv) from `stat`.
pub(crate) fn norm_apply_kernel(s: &RowNorm) -> Kernel {
    let mut k = Kernel::new("norm_apply");
    let p = Params::declare(&mut k, s);
    let stat = k.param_ptr("stat");
    let y = k.param_ptr("y");
    let n = k.param("n", Ty::U32);
    let i = thread_index(&mut k, n);
    let row = k.div(Ty::U32, i, s.cols as u32);
    let j = k.rem(Ty::U32, i, s.cols as u32);
    let at = k.mul(Ty::U32, row, 2u32);
    let a = k.addr(stat, at, 8);
    let mean = k.ld(Space::Global, Ty::F64, a, 0);
    let inv = k.ld(Space::Global, Ty::F64, a, 8);
    let v = load_f64(&mut k, s.x, p.x, i);
    let r = normalize(&mut k, s, &p, v, row, j, mean, inv);
    store_f64(&mut k, s.x, y, i, r);
    k
}

/// The kernel `rownorm(x, scale, [bias], y, [mean, inv], rows)`.
/// Elements per lane up to which a row shared by a warp's lanes is held in registers.
const CACHED_PER_LANE: usize = 32;

/// A row of at most `g · CACHED_PER_LANE` elements shared by the `g` threads of `layout` (the lanes
/// of a warp, or a whole block): each thread loads its elements (`lane + t·g`) once, all loads
/// issued before the first is used, and the three passes (sum, the centred squares, normalise and
/// store) work from registers. The same sums in the same order as the looping kernel of the same
/// layout, so the same bits; one read of the row instead of three, and no load waits on the one
/// before it (a row of 384 took 8 µs when each pass waited on every load in turn).
/// Returns the row's mean and 1/stddev.
fn cached_row(
    k: &mut Kernel,
    s: &RowNorm,
    p: &Params,
    y: Reg,
    ids: &RowIds,
    layout: Rows,
    base: Reg,
) -> (Reg, Reg) {
    let g = layout.threads();
    let per = s.cols.div_ceil(g as usize);
    let mut elems = Vec::with_capacity(per);
    for t in 0..per {
        let j = k.add(Ty::U32, ids.lane, t as u32 * g);
        let inside = k.setp(Cmp::Lt, Ty::U32, j, s.cols as u32);
        let here = match ids.valid {
            Some(v) => k.pred_and(inside, v),
            None => inside,
        };
        let i = k.add(Ty::U32, base, j);
        let a = k.addr(p.x, i, s.x.size());
        let v = match s.x {
            Elem::F32 => {
                let v = k.mov(Ty::F32, 0.0f32);
                k.raw(format_args!("@{here} ld.global.nc.f32 {v}, [{a}]"));
                v
            }
            e => {
                let h = k.mov(e.raw(), Op::I(0));
                k.raw(format_args!("@{here} ld.global.nc.b16 {h}, [{a}]"));
                e.widen(k, h)
            }
        };
        elems.push((j, i, here, v));
    }
    let sum = k.mov(Ty::F64, 0.0f64);
    let mut wide = Vec::with_capacity(per);
    for &(_, _, here, v) in &elems {
        let v = k.cvt(Ty::F64, Ty::F32, "", v);
        k.raw(format_args!("@{here} add.rn.f64 {sum}, {sum}, {v}"));
        wide.push(v);
    }
    layout.reduce(k, ids, &[sum], &combine_add);
    let cols = d(s.cols as f64);
    let mean = k.div(Ty::F64, sum, cols);
    let sq = k.mov(Ty::F64, 0.0f64);
    for (&(_, _, here, _), &v) in elems.iter().zip(&wide) {
        let dv = k.sub(Ty::F64, v, mean);
        k.raw(format_args!("@{here} fma.rn.f64 {sq}, {dv}, {dv}, {sq}"));
    }
    layout.reduce(k, ids, &[sq], &combine_add);
    let inv = inv_stddev(k, s, sq);
    for (&(j, i, here, _), &v) in elems.iter().zip(&wide) {
        k.when(here, |k| {
            let r = normalize(k, s, p, v, ids.row, j, mean, inv);
            store_f64(k, s.x, y, i, r);
        });
    }
    (mean, inv)
}

pub(crate) fn rownorm_kernel(s: &RowNorm, layout: Rows) -> Kernel {
    let mut k = Kernel::new("rownorm");
    let p = Params::declare(&mut k, s);
    let y = k.param_ptr("y");
    let stats = if s.stats {
        Some((k.param_ptr("mean"), k.param_ptr("inv")))
    } else {
        None
    };
    let nrows = k.param("rows", Ty::U32);
    let ids = layout.ids(&mut k, nrows);
    let base = k.mul(Ty::U32, ids.row, s.cols as u32);
    let (mean, inv) = match layout {
        Rows::Lanes(_) | Rows::Block
            if s.cols.div_ceil(layout.threads() as usize) <= CACHED_PER_LANE =>
        {
            cached_row(&mut k, s, &p, y, &ids, layout, base)
        }
        _ => looped_row(&mut k, s, &p, y, &ids, layout, base),
    };
    if let Some((mp, ip)) = stats {
        layout.leader(&mut k, &ids, |k| {
            let m32 = f32_of(k, mean);
            store(k, Elem::F32, mp, ids.row, m32);
            let i32v = f32_of(k, inv);
            store(k, Elem::F32, ip, ids.row, i32v);
        });
    }
    k
}

/// 1/√(Σ(x − mean)²/cols + eps) in f64 from the row's centred sum of squares.
fn inv_stddev(k: &mut Kernel, s: &RowNorm, sq: Reg) -> Reg {
    let var = k.div(Ty::F64, sq, d(s.cols as f64));
    let ve = k.add(Ty::F64, var, d(s.eps));
    let sd = k.unary("sqrt.rn", Ty::F64, ve);
    k.div(Ty::F64, d(1.0), sd)
}

/// A row in three passes over memory (the mean, the centred squares, normalise and store), each
/// element owned by one of the row's threads as `layout` says. Returns the mean and 1/stddev.
fn looped_row(
    k: &mut Kernel,
    s: &RowNorm,
    p: &Params,
    y: Reg,
    ids: &RowIds,
    layout: Rows,
    base: Reg,
) -> (Reg, Reg) {
    let x = p.x;
    let sum = k.mov(Ty::F64, 0.0f64);
    layout.for_each(k, ids, s.cols, |k, j| {
        let i = k.add(Ty::U32, base, j);
        let v = load_f64(k, s.x, x, i);
        let t = k.add(Ty::F64, sum, v);
        k.assign(sum, t);
    });
    layout.reduce(k, ids, &[sum], &combine_add);
    let mean = k.div(Ty::F64, sum, d(s.cols as f64));
    let sq = k.mov(Ty::F64, 0.0f64);
    layout.for_each(k, ids, s.cols, |k, j| {
        let i = k.add(Ty::U32, base, j);
        let v = load_f64(k, s.x, x, i);
        let dv = k.sub(Ty::F64, v, mean);
        let t = k.fma(Ty::F64, dv, dv, sq);
        k.assign(sq, t);
    });
    layout.reduce(k, ids, &[sq], &combine_add);
    let inv = inv_stddev(k, s, sq);
    layout.for_each(k, ids, s.cols, |k, j| {
        let i = k.add(Ty::U32, base, j);
        let v = load_f64(k, s.x, x, i);
        let r = normalize(k, s, p, v, ids.row, j, mean, inv);
        store_f64(k, s.x, y, i, r);
    });
    (mean, inv)
}

/// Runs a row normalization of input 0 (scale input 1, bias input 2 when `s.bias`); returns the
/// output and, with `s.stats`, the (mean, inv) tensors of `stat_shape`.
pub(super) fn rownorm_run(
    run: &Run,
    inputs: &dyn Inputs,
    s: &RowNorm,
    shape: &[usize],
    rows: usize,
) -> KResult<(DevTensor, Option<(DevTensor, DevTensor)>)> {
    rownorm_run_stats(run, inputs, s, shape, rows, &[])
}

pub(super) fn rownorm_run_stats(
    run: &Run,
    inputs: &dyn Inputs,
    s: &RowNorm,
    shape: &[usize],
    rows: usize,
    stat_shape: &[usize],
) -> KResult<(DevTensor, Option<(DevTensor, DevTensor)>)> {
    let total = require_u32_len(shape)?;
    let x = dev_input(inputs, 0)?;
    let w = dev_input(inputs, 1)?;
    let b = match s.bias {
        Some(_) => Some(dev_input(inputs, 2)?),
        None => None,
    };
    let y = run.alloc(s.x.dtype(), shape)?;
    let st = if s.stats {
        Some((
            run.alloc(DType::F32, stat_shape)?,
            run.alloc(DType::F32, stat_shape)?,
        ))
    } else {
        None
    };
    if rows == 0 || (total == 0 && !s.stats) {
        return Ok((y, st));
    }
    let mut params = vec![x.arg_in(), w.arg_in()];
    if let Some(b) = &b {
        params.push(b.arg_in());
    }
    let outs: Vec<Arg> = st
        .iter()
        .flat_map(|(m, i)| [m.arg_out(), i.arg_out()])
        .collect();
    let sms = run.device.ctx.info.multiprocessors.max(1) as usize;
    let layout = norm_layout(rows, s.cols, sms);
    let chunks = if layout == Rows::Block {
        norm_chunks(rows, s.cols)
    } else {
        1
    };
    if chunks <= 1 {
        let mut args = params;
        args.push(y.arg_out());
        args.extend(outs);
        args.push(Arg::U32(rows as u32));
        let ptx = module(run.cc(), &[rownorm_kernel(s, layout)]);
        run.launch(
            &ptx,
            "rownorm",
            (layout.grid(rows), 1, 1),
            (BLOCK, 1, 1),
            0,
            &args,
        )?;
        return Ok((y, st));
    }
    // Few long rows: statistics in chunks, merged per row, then one thread per element.
    let len = s.cols.div_ceil(chunks);
    let chunks = s.cols.div_ceil(len);
    let part = run.alloc(DType::F64, &[rows * chunks * 2])?;
    let stat = run.alloc(DType::F64, &[rows * 2])?;
    let n = Arg::U32(rows as u32);
    let ptx = module(run.cc(), &[norm_part_kernel(s, len, chunks)]);
    let args = [x.arg_in(), part.arg_out(), n];
    run.launch(
        &ptx,
        "norm_part",
        (rows as u32, chunks as u32, 1),
        (BLOCK, 1, 1),
        0,
        &args,
    )?;
    let ptx = module(run.cc(), &[norm_merge_kernel(s, len, chunks)]);
    let mut args = vec![part.arg_in(), stat.arg_out()];
    args.extend(outs);
    args.push(n);
    let grid = Rows::Lanes(32).grid(rows);
    run.launch(&ptx, "norm_merge", (grid, 1, 1), (BLOCK, 1, 1), 0, &args)?;
    run.release(part, &[]);
    let ptx = module(run.cc(), &[norm_apply_kernel(s)]);
    let mut args = params;
    args.push(stat.arg_in());
    args.push(y.arg_out());
    args.push(Arg::U32(total));
    let grid = blocks(total as usize, BLOCK);
    let stat = run.scratch_before_last_read(stat);
    run.launch(&ptx, "norm_apply", (grid, 1, 1), (BLOCK, 1, 1), 0, &args)?;
    if let Some(stat) = stat {
        run.release(stat, &[]);
    }
    Ok((y, st))
}

/// The row layout of `rows` rows of `cols` elements on `sms` SMs: [`Rows::choose`]'s, except that
/// fewer rows than sixteen per SM, of at least a block's worth of elements, take a block each rather
/// than a warp. BERT-base at batch 1 (128 rows of 768) as 128 warps, each lane summing 24 elements
/// in turn, took 12.3 µs; a block per row, 8× the threads and 3 elements each, 3.8 µs. At batch 8
/// (1024 rows) the warps took 13 µs: 1024 warps are 8 per SM, too few to hide the loads, where 1024
/// blocks of 256 threads fill the device in one wave.
fn norm_layout(rows: usize, cols: usize, sms: usize) -> Rows {
    match Rows::choose(rows, cols, true) {
        Rows::Lanes(32)
            if rows < 16 * sms
                && cols >= BLOCK as usize
                && cols.div_ceil(BLOCK as usize) <= CACHED_PER_LANE =>
        {
            Rows::Block
        }
        layout => layout,
    }
}

/// Chunks per row when `rows` rows of `cols` elements would leave the device mostly idle with one
/// block per row: about a thousand blocks, each thread still taking a few elements per pass.
fn norm_chunks(rows: usize, cols: usize) -> usize {
    if rows >= 512 {
        return 1;
    }
    let want = 1024usize.div_ceil(rows.max(1));
    let most = cols / (BLOCK as usize * 8);
    want.min(most).clamp(1, 1024)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn few_rows_take_a_block_each() {
        // BERT-base at batch 1 and 8 and ViT-S: a block per row; batch 32: a warp per row; short
        // rows and rows too long to hold stay as `Rows::choose` has them.
        assert_eq!(norm_layout(128, 768, 132), Rows::Block);
        assert_eq!(norm_layout(197, 384, 132), Rows::Block);
        assert_eq!(norm_layout(1024, 768, 132), Rows::Block);
        assert_eq!(norm_layout(4096, 768, 132), Rows::Lanes(32));
        assert_eq!(norm_layout(3136, 96, 132), Rows::choose(3136, 96, true));
        assert_eq!(norm_layout(128, 96, 132), Rows::choose(128, 96, true));
        assert_eq!(norm_layout(8, 20_000, 132), Rows::Block);
    }

    fn text(k: Kernel) -> String {
        let t = module((9, 0), &[k]);
        assert!(!t.contains(".approx"), "{t}");
        t
    }

    /// Parameter placements (per row, per channel group, broadcast columns, scalar), shared with
    /// the PTX golden digest.
    pub(crate) fn sample_params() -> [ParamAt; 4] {
        [
            ParamAt::Row { c: 3 },
            ParamAt::Channel {
                g: 2,
                cpg: 3,
                inner: 5,
            },
            ParamAt::Cols {
                shape: vec![4, 5],
                strides: vec![vec![5, 1], vec![0, 1]],
            },
            ParamAt::Cols {
                shape: vec![],
                strides: vec![vec![], vec![]],
            },
        ]
    }

    #[test]
    fn rownorm_kernels_are_well_formed() {
        for at in sample_params() {
            for layout in [Rows::Thread, Rows::Lanes(4), Rows::Lanes(32), Rows::Block] {
                for (bias, stats) in [(Some(Elem::F32), false), (None, true)] {
                    let s = RowNorm {
                        x: Elem::F32,
                        scale: Elem::F32,
                        bias,
                        cols: 20,
                        eps: 1e-5,
                        at: at.clone(),
                        stats,
                    };
                    let t = text(rownorm_kernel(&s, layout));
                    assert!(t.contains(".visible .entry rownorm("), "{t}");
                    assert!(t.contains("sqrt.rn.f64") && t.contains("div.rn.f64"), "{t}");
                    assert_eq!(t.contains(".param .u64 bias"), bias.is_some(), "{t}");
                    assert_eq!(t.contains(".param .u64 mean"), stats, "{t}");
                    assert_eq!(t.contains("bar.sync"), layout == Rows::Block, "{t}");
                }
            }
        }
    }

    /// A row of up to 32 elements per lane is loaded once, every load issued up front and
    /// predicated on the row's end; longer rows loop.
    #[test]
    fn short_rows_are_held_in_registers() {
        let at = ParamAt::Cols {
            shape: vec![],
            strides: vec![vec![], vec![]],
        };
        let s = |cols| RowNorm {
            x: Elem::F32,
            scale: Elem::F32,
            bias: Some(Elem::F32),
            cols,
            eps: 1e-5,
            at: at.clone(),
            stats: false,
        };
        let held = text(rownorm_kernel(&s(384), Rows::choose(197, 384, true)));
        let predicated = held
            .lines()
            .filter(|l| l.contains("@") && l.contains("ld.global.nc.f32"))
            .count();
        assert_eq!(predicated, 12, "{held}");
        // A block's threads hold a row of 2000 (8 each); one of 9000 (36 each) is read per pass.
        let block = text(rownorm_kernel(&s(2000), Rows::Block));
        let predicated = block
            .lines()
            .filter(|l| l.contains("@") && l.contains("ld.global.nc.f32"))
            .count();
        assert_eq!(predicated, 8, "{block}");
        let looped = text(rownorm_kernel(&s(9000), Rows::choose(197, 9000, true)));
        let predicated = looped
            .lines()
            .filter(|l| l.contains("@") && l.contains("ld.global.nc.f32"))
            .count();
        assert_eq!(predicated, 0, "{looped}");
    }

    #[test]
    fn chunked_statistics_kernels_are_well_formed() {
        let s = RowNorm {
            x: Elem::F16,
            scale: Elem::F32,
            bias: Some(Elem::F32),
            cols: 40960,
            eps: 1e-5,
            at: ParamAt::Channel {
                g: 32,
                cpg: 10,
                inner: 4096,
            },
            stats: true,
        };
        let t = text(norm_part_kernel(&s, 2048, 20));
        assert!(t.contains("%ctaid.y") && t.contains("bar.sync"), "{t}");
        assert!(t.contains("st.global.f64"), "{t}");
        let t = text(norm_merge_kernel(&s, 2048, 20));
        assert!(
            t.contains(".param .u64 mean") && t.contains("ld.global.f64"),
            "{t}"
        );
        let t = text(norm_apply_kernel(&s));
        assert!(
            t.contains(".param .u64 stat") && t.contains("cvt.rn.f16.f32"),
            "{t}"
        );
        assert_eq!(norm_chunks(32, 40960), 20);
        assert_eq!(norm_chunks(2048, 40960), 1);
        assert_eq!(norm_chunks(2, 1000), 1);
    }
}
