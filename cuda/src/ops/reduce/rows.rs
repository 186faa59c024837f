//! Device building blocks shared by the reduction-like families (reduce, softmax, norm, pool): float
//! element loads and stores, NaN-propagating max/min, and the row layouts: a "row" is the set of
//! elements that one output (or one normalized group) depends on, handled by one thread, one warp or
//! one block. Row reductions leave the result in every thread of the row.
use crate::blocks;
use crate::ptx::{Cmp, Kernel, Op, Reg, Space, Ty};

/// Threads per block of every kernel built on these rows.
pub(crate) const BLOCK: u32 = 256;

/// Sentinel index of an argmax/argmin state that has seen no element.
pub(crate) const NONE: u32 = u32::MAX;

pub(crate) use crate::ops::elem::Elem;

/// Element `index` (u32) of `base`, as f32.
pub(crate) fn load(k: &mut Kernel, e: Elem, base: Reg, index: Reg) -> Reg {
    let a = k.addr(base, index, e.size());
    e.load_nc(k, a, 0)
}

/// Element `index` (u32) of `base`, as f64.
pub(crate) fn load_f64(k: &mut Kernel, e: Elem, base: Reg, index: Reg) -> Reg {
    let v = load(k, e, base, index);
    f64_of(k, v)
}

/// Stores the f32 value `v` as element `index` of `base` (rounded once for halves).
pub(crate) fn store(k: &mut Kernel, e: Elem, base: Reg, index: Reg, v: Reg) {
    let a = k.addr(base, index, e.size());
    let h = e.narrow(k, v);
    k.st(Space::Global, a, 0, h);
}

/// Stores the f64 value `v` as element `index` of `base`, rounded to the storage type. Halves go
/// through f32 (double rounding, at most a tie-breaking difference in the last bit).
pub(crate) fn store_f64(k: &mut Kernel, e: Elem, base: Reg, index: Reg, v: Reg) {
    let f = f32_of(k, v);
    store(k, e, base, index, f);
}

pub(crate) fn f64_of(k: &mut Kernel, v: Reg) -> Reg {
    k.cvt(Ty::F64, Ty::F32, "", v)
}

pub(crate) fn f32_of(k: &mut Kernel, v: Reg) -> Reg {
    k.cvt(Ty::F32, Ty::F64, ".rn", v)
}

/// max of two f32 registers, NaN if either is NaN (`max.NaN`, sm_80+).
pub(crate) fn max_nan(k: &mut Kernel, a: Reg, b: Reg) -> Reg {
    let r = k.reg(Ty::F32);
    k.raw(format_args!("max.NaN.f32 {r}, {a}, {b}"));
    r
}

/// min of two f32 registers, NaN if either is NaN (`min.NaN`, sm_80+).
pub(crate) fn min_nan(k: &mut Kernel, a: Reg, b: Reg) -> Reg {
    let r = k.reg(Ty::F32);
    k.raw(format_args!("min.NaN.f32 {r}, {a}, {b}"));
    r
}

/// Merges the reduction state `mine` with `other` in place (`mine` receives the result). Every
/// combine used with the warp butterfly must be commutative so that all lanes agree.
pub(crate) type Combine<'a> = &'a dyn Fn(&mut Kernel, &[Reg], &[Reg]);

/// `mine[0] += other[0]` (f32 or f64).
pub(crate) fn combine_add(k: &mut Kernel, mine: &[Reg], other: &[Reg]) {
    let s = k.add(mine[0].ty, mine[0], other[0]);
    k.assign(mine[0], s);
}

/// `mine[0] = max(mine[0], other[0])`, NaN-propagating (f32).
pub(crate) fn combine_max(k: &mut Kernel, mine: &[Reg], other: &[Reg]) {
    let m = max_nan(k, mine[0], other[0]);
    k.assign(mine[0], m);
}

/// The (value, index) state of ArgMax/ArgMin (and Hardmax): the preferred of two candidates.
/// NaN beats every number and the earlier NaN wins (numpy's argmax); among equal numbers the first
/// index wins, or the last with `last`. The order is total, so it also serves as the sequential step
/// (`other` = the next element) and the result does not depend on how elements were split.
pub(crate) fn arg_combine(is_max: bool, last: bool) -> impl Fn(&mut Kernel, &[Reg], &[Reg]) {
    move |k: &mut Kernel, a: &[Reg], b: &[Reg]| {
        let (va, ia, vb, ib) = (a[0], a[1], b[0], b[1]);
        let a_none = k.setp(Cmp::Eq, Ty::U32, ia, NONE);
        let b_some = k.setp(Cmp::Ne, Ty::U32, ib, NONE);
        let nan_a = k.setp(Cmp::Nan, Ty::F32, va, va);
        let nan_b = k.setp(Cmp::Nan, Ty::F32, vb, vb);
        // Between equals (two NaNs, or two equal numbers) the earlier index wins, or the later
        // with select_last_index: NaN beats every number for both ArgMax and ArgMin (numpy).
        let pref = if last {
            k.setp(Cmp::Gt, Ty::U32, ib, ia)
        } else {
            k.setp(Cmp::Lt, Ty::U32, ib, ia)
        };
        let num_a = k.pred_not(nan_a);
        let t = k.pred_or(num_a, pref);
        let nan_case = k.pred_and(nan_b, t);
        let cmp = if is_max { Cmp::Gt } else { Cmp::Lt };
        let better = k.setp(cmp, Ty::F32, vb, va);
        let equal = k.setp(Cmp::Eq, Ty::F32, vb, va);
        let tie = k.pred_and(equal, pref);
        let num_case = k.pred_or(better, tie);
        let take = k.pred_or(nan_case, num_case);
        let take = k.pred_and(take, b_some);
        let take = k.pred_or(take, a_none);
        let v = k.selp(Ty::F32, vb, va, take);
        let i = k.selp(Ty::U32, ib, ia, take);
        k.assign(va, v);
        k.assign(ia, i);
    }
}

/// Exchanges `v` with lane `lane ^ mask` of the warp (32- or 64-bit registers).
fn shfl(k: &mut Kernel, v: Reg, mask: u32) -> Reg {
    if v.ty.size() == 8 {
        let lo = k.reg(Ty::U32);
        let hi = k.reg(Ty::U32);
        k.raw(format_args!("mov.b64 {{{lo}, {hi}}}, {v}"));
        let lo2 = k.shfl_bfly(lo, mask);
        let hi2 = k.shfl_bfly(hi, mask);
        let r = k.reg(v.ty);
        k.raw(format_args!("mov.b64 {r}, {{{lo2}, {hi2}}}"));
        r
    } else {
        k.shfl_bfly(v, mask)
    }
}

/// Butterfly reduction over aligned groups of `lanes` lanes (a power of two up to 32; the whole
/// warp takes part): afterwards every lane holds its group's combined state.
pub(crate) fn warp_reduce(k: &mut Kernel, acc: &[Reg], combine: Combine, lanes: u32) {
    for mask in [16u32, 8, 4, 2, 1].into_iter().filter(|&m| m < lanes) {
        let other: Vec<Reg> = acc.iter().map(|&a| shfl(k, a, mask)).collect();
        combine(k, acc, &other);
    }
}

/// How the threads of a launch map onto rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rows {
    /// One thread per row (short rows, or strided rows that neighbouring threads read coalesced).
    Thread,
    /// `s` threads per row (a power of two up to 32) for strided rows: a block holds `256 / s`
    /// neighbouring rows, so each load instruction still reads neighbouring addresses, and the lanes
    /// of a row combine through shared memory.
    Cols(u32),
    /// `g` neighbouring lanes of a warp per row (a power of two from 2 to 32), `256 / g` rows per
    /// block; the lanes of a row combine through shuffles.
    Lanes(u32),
    /// One block of 256 threads per row (long rows).
    Block,
}

/// The per-thread identity within a row layout.
pub(crate) struct RowIds {
    /// The row (u32).
    pub row: Reg,
    /// The thread's index within its row (u32; 0 for `Rows::Thread`).
    pub lane: Reg,
    tid: Reg,
    /// For `Cols` and `Lanes`: whether the row exists (threads past the last row stay for the
    /// barriers and shuffles).
    pub valid: Option<Reg>,
}

/// Threads a launch aims for when it splits strided rows over lanes (about two per H200 core slot).
const TARGET_THREADS: usize = 1 << 18;

impl Rows {
    /// The layout for `rows` rows of `n` elements; `contiguous` when a row's elements are adjacent
    /// in memory (otherwise neighbouring rows are, and threads on neighbouring rows read coalesced).
    pub(crate) fn choose(rows: usize, n: usize, contiguous: bool) -> Rows {
        if !contiguous {
            let mut s = 1usize;
            while s < 32 && rows * s < TARGET_THREADS && n / (2 * s) >= 8 {
                s *= 2;
            }
            return if s == 1 {
                Rows::Thread
            } else {
                Rows::Cols(s as u32)
            };
        }
        if n < 8 {
            Rows::Thread
        } else if n > 1024 {
            Rows::Block
        } else {
            // About eight elements per lane.
            Rows::Lanes((n / 8).next_power_of_two().clamp(2, 32) as u32)
        }
    }

    /// Threads that share one row.
    pub(crate) fn threads(self) -> u32 {
        match self {
            Rows::Thread => 1,
            Rows::Cols(s) | Rows::Lanes(s) => s,
            Rows::Block => BLOCK,
        }
    }

    /// Blocks (of [`BLOCK`] threads) to launch for `rows` rows.
    pub(crate) fn grid(self, rows: usize) -> u32 {
        blocks(rows, BLOCK / self.threads())
    }

    /// This thread's row and lane. Threads past `rows` (u32 register) exit for `Thread`; `Block`
    /// launches exactly one block per row; `Cols` and `Lanes` keep them, without work, for their
    /// barriers and full-warp shuffles.
    pub(crate) fn ids(self, k: &mut Kernel, rows: Reg) -> RowIds {
        let tid = k.special("tid.x");
        let bid = k.special("ctaid.x");
        match self {
            Rows::Thread => {
                let row = k.fma(Ty::U32, bid, BLOCK, tid);
                let done = k.setp(Cmp::Ge, Ty::U32, row, rows);
                k.exit_if(done);
                let lane = k.mov(Ty::U32, 0u32);
                RowIds {
                    row,
                    lane,
                    tid,
                    valid: None,
                }
            }
            Rows::Cols(s) => {
                let per = BLOCK / s;
                let rib = k.and(Ty::U32, tid, per - 1);
                let lane = k.shr(Ty::U32, tid, per.trailing_zeros());
                let row = k.fma(Ty::U32, bid, per, rib);
                let valid = k.setp(Cmp::Lt, Ty::U32, row, rows);
                RowIds {
                    row,
                    lane,
                    tid,
                    valid: Some(valid),
                }
            }
            Rows::Lanes(g) => {
                let lane = k.and(Ty::U32, tid, g - 1);
                let sub = k.shr(Ty::U32, tid, g.trailing_zeros());
                let row = k.fma(Ty::U32, bid, BLOCK / g, sub);
                let valid = k.setp(Cmp::Lt, Ty::U32, row, rows);
                RowIds {
                    row,
                    lane,
                    tid,
                    valid: Some(valid),
                }
            }
            Rows::Block => RowIds {
                row: bid,
                lane: tid,
                tid,
                valid: None,
            },
        }
    }

    /// `body(k, j)` for the row's elements `j` in `0..n` that this thread owns (strided by the
    /// threads of the row).
    pub(crate) fn for_each(
        self,
        k: &mut Kernel,
        ids: &RowIds,
        n: usize,
        body: impl FnOnce(&mut Kernel, Reg),
    ) {
        match ids.valid {
            None => k.for_range(Ty::U32, ids.lane, n as u32, self.threads(), body),
            Some(v) => {
                let end = k.selp(Ty::U32, n as u32, 0u32, v);
                k.for_range(Ty::U32, ids.lane, end, self.threads(), body);
            }
        }
    }

    /// `body(k, j)` for the row's elements `j` in `lo..hi` (u32 registers) that this thread owns.
    pub(crate) fn for_span(
        self,
        k: &mut Kernel,
        ids: &RowIds,
        lo: Reg,
        hi: Reg,
        body: impl FnOnce(&mut Kernel, Reg),
    ) {
        let start = k.add(Ty::U32, lo, ids.lane);
        let end = match ids.valid {
            None => hi,
            Some(v) => k.selp(Ty::U32, hi, 0u32, v),
        };
        k.for_range(Ty::U32, start, end, self.threads(), body);
    }

    /// Combines `acc` over the threads of the row; afterwards every thread of the row holds the
    /// result. `Block` and `Cols` go through a fresh shared array and a barrier (every thread of the
    /// block must reach this call).
    pub(crate) fn reduce(self, k: &mut Kernel, ids: &RowIds, acc: &[Reg], combine: Combine) {
        let slot = acc.len() * 8;
        match self {
            Rows::Thread => {}
            Rows::Lanes(g) => warp_reduce(k, acc, combine, g),
            Rows::Cols(s) => {
                // Slot of (lane, row in block) = tid; every lane folds its row's slots in order.
                let name = k.new_label("red");
                k.shared_array(&name, BLOCK as usize * slot);
                let base = k.shared_addr(&name);
                let mine = k.fma(Ty::U32, ids.tid, slot as u32, base);
                for (i, &a) in acc.iter().enumerate() {
                    k.st(Space::Shared, mine, (i * 8) as i64, a);
                }
                k.bar_sync();
                let per = BLOCK / s;
                let rib = k.and(Ty::U32, ids.tid, per - 1);
                let first = k.fma(Ty::U32, rib, slot as u32, base);
                for l in 0..s as usize {
                    let at = (l * per as usize * slot) as i64;
                    let vals: Vec<Reg> = acc
                        .iter()
                        .enumerate()
                        .map(|(i, &a)| k.ld(Space::Shared, a.ty, first, at + (i * 8) as i64))
                        .collect();
                    if l == 0 {
                        for (&a, &v) in acc.iter().zip(&vals) {
                            k.assign(a, v);
                        }
                    } else {
                        combine(k, acc, &vals);
                    }
                }
            }
            Rows::Block => {
                warp_reduce(k, acc, combine, 32);
                let warps = BLOCK / 32;
                let name = k.new_label("red");
                k.shared_array(&name, warps as usize * slot);
                let base = k.shared_addr(&name);
                let lane = k.and(Ty::U32, ids.tid, 31u32);
                let warp = k.shr(Ty::U32, ids.tid, 5u32);
                let mine = k.fma(Ty::U32, warp, slot as u32, base);
                let lead = k.setp(Cmp::Eq, Ty::U32, lane, 0u32);
                k.when(lead, |k| {
                    for (i, &a) in acc.iter().enumerate() {
                        k.st(Space::Shared, mine, (i * 8) as i64, a);
                    }
                });
                k.bar_sync();
                for (i, &a) in acc.iter().enumerate() {
                    let v = k.ld(Space::Shared, a.ty, base, (i * 8) as i64);
                    k.assign(a, v);
                }
                for w in 1..warps as usize {
                    let other: Vec<Reg> = acc
                        .iter()
                        .enumerate()
                        .map(|(i, &a)| k.ld(Space::Shared, a.ty, base, (w * slot + i * 8) as i64))
                        .collect();
                    combine(k, acc, &other);
                }
            }
        }
    }

    /// Runs `body` in one thread of each existing row (for per-row results).
    pub(crate) fn leader(self, k: &mut Kernel, ids: &RowIds, body: impl FnOnce(&mut Kernel)) {
        if self == Rows::Thread {
            return body(k);
        }
        let lead = k.setp(Cmp::Eq, Ty::U32, ids.lane, 0u32);
        let lead = match ids.valid {
            Some(v) => k.pred_and(lead, v),
            None => lead,
        };
        k.when(lead, body);
    }
}

/// An f64 immediate.
pub(crate) fn d(v: f64) -> Op {
    Op::D(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ptx::module;

    #[test]
    fn block_reduce_shuffles_f64_halves_and_syncs() {
        let mut k = Kernel::new("t");
        let n = k.param("n", Ty::U32);
        let ids = Rows::Block.ids(&mut k, n);
        let s = k.mov(Ty::F64, 0.0f64);
        let m = k.mov(Ty::F32, f32::NEG_INFINITY);
        Rows::Block.reduce(&mut k, &ids, &[s], &combine_add);
        Rows::Block.reduce(&mut k, &ids, &[m], &combine_max);
        let text = module((9, 0), &[k]);
        assert!(text.contains("mov.b64 {%r"), "{text}");
        assert!(text.contains("shfl.sync.bfly.b32"), "{text}");
        assert!(text.contains("bar.sync 0"), "{text}");
        assert!(text.contains(".shared .align 16 .b8 L_red_"), "{text}");
        assert!(text.contains("max.NaN.f32"), "{text}");
        assert!(text.contains("ld.shared.f64"), "{text}");
    }

    #[test]
    fn layouts_cover_rows() {
        assert_eq!(Rows::choose(10, 500, true), Rows::Lanes(32));
        assert_eq!(Rows::choose(10, 64, true), Rows::Lanes(8));
        assert_eq!(Rows::choose(10, 9, true), Rows::Lanes(2));
        assert_eq!(Rows::choose(10, 7, true), Rows::Thread);
        assert_eq!(Rows::choose(10, 5000, true), Rows::Block);
        assert_eq!(Rows::choose(300_000, 500, false), Rows::Thread);
        assert_eq!(Rows::choose(8192, 8192, false), Rows::Cols(32));
        assert_eq!(Rows::choose(8192, 40, false), Rows::Cols(4));
        assert_eq!(Rows::choose(3, 5000, false), Rows::Cols(32));
        assert_eq!(Rows::Cols(32).grid(17), 3);
        assert_eq!(Rows::Lanes(32).grid(17), 3);
        assert_eq!(Rows::Lanes(4).grid(65), 2);
        assert_eq!(Rows::Block.grid(17), 17);
        assert_eq!(Rows::Thread.grid(257), 2);
    }
}
