//! A stride-1 convolution whose `B` is read as shifted rows of a zero-padded copy of its input.
//!
//! On a grid `wp` columns wide (the padded width), patch row `(c, kh, kw)` of the im2col matrix is
//! the padded input shifted by `c·hp·wp + kh·d·wp + kw·d`: packing `B` is then a plain copy per row
//! (`BSource::Rows`) instead of the patch gather, which costs 1 to 2 cycles a value. The GEMM
//! computes `wp − wo` extra columns per output row, dropped as the result is compacted into the
//! output, where the epilogue is applied with the same arithmetic per element as the GEMM's store.
//! The sums are those of the gather path (the same `A`, the same values of `B` in the same order,
//! zeros where the patch is in the padding), so the output has the same bits (tested).
//!
//! Taken where that costs less than the gather (`plan`): up to 64 output channels per group, a
//! padded input that fits in L2 (4 MiB), and extra columns cheaper than the values they save
//! gathering.
use quorum_kernels::{Activation, BSource, Epilogue, PackedA, Threads};
use rayon::prelude::*;

use super::forward::ConvShape;

/// The padded grid of a convolution the shifted path takes (along its last two dims: 2-D, or 1-D).
#[derive(Debug)]
pub(super) struct Shifted {
    hp: usize,
    wp: usize,
}

/// Values of `B` gathered by the patch path cost about as much as 48 multiply-adds of the GEMM (a
/// patch value takes 1 to 2 cycles to pack on the 2-core Xeon that `reports/cpu/` uses, 32
/// multiply-adds issue per cycle). The shifted path is taken while its extra columns cost less
/// than half that, `mg·(wp − wo) ≤ 24·wo`: the other half is left for the copy and compaction.
const GATHER_COST: usize = 24;

/// The most output channels (per group) the shifted path takes.
const SHIFTED_MAX_CHANNELS: usize = 64;

/// The largest padded input (values) the shifted path copies: 4 MiB, the L2 of both cores of the
/// machine above. Larger inputs are read from memory by the packing of each block of `B` either
/// way; their copy then costs more than the gather it saves (vgg19's 224- and 112-wide layers
/// ran 5% slower).
const PADDED_MAX: usize = 1 << 20;

/// The grid of `sh` where the shifted path pays: stride 1 along the last two dims, no depth,
/// not pointwise, a padded input that fits [`PADDED_MAX`], and extra columns that cost less than
/// the gather ([`GATHER_COST`]).
pub(super) fn plan(sh: &ConvShape) -> Option<Shifted> {
    let g = &sh.g;
    let [o0, ho, wo] = g.outs;
    // The leading (depth) dim must be trivial: one input, one output reading it unpadded.
    let flat = g.ins[0] == 1 && g.k[0] == 1 && o0 == 1 && g.pb[0] == 0;
    if sh.pointwise() || !flat || g.s[1] != 1 || g.s[2] != 1 || g.pb.iter().any(|&p| p < 0) {
        return None;
    }
    let hp = ho + (g.k[1] - 1) * g.d[1];
    let wp = wo + (g.k[2] - 1) * g.d[2];
    let fits = sh.cg() * hp * wp <= PADDED_MAX;
    // The gather's share of a GEMM falls as the output channels grow (each gathered value feeds
    // `mg` multiply-adds): about 60% at 32 channels, 45% at 64, 25% at 128. Past 64 the copy, the
    // compaction and the extra columns cost more than it saves (crnn_ocr's 128- to 512-channel
    // layers ran 5% slower shifted; densenet121's 32-channel ones 8–11% faster). The compaction
    // moves every output once more, so the gather must also be the larger of the two (crnn_ocr's
    // first layer: 9 patch rows for 64 channels).
    let few = sh.mg() <= SHIFTED_MAX_CHANNELS && sh.cg() * g.ksz() >= sh.mg();
    let cheap = sh.mg() * (wp - wo) <= GATHER_COST * wo;
    (fits && few && cheap && ho * wo > 0).then_some(Shifted { hp, wp })
}

thread_local! {
    /// The padded input (kept by the thread that runs the convolution) and a block of the GEMM's
    /// output on the padded grid (kept by each thread that computes one), between calls.
    static PADDED: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
    static GRID: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Columns of the grid per block, at least: each block's GEMM streams all of `A`, so a block
/// must be wide enough for the multiply-adds to outweigh that (the GEMM's own column blocks are
/// 512 wide).
const GRID_COLS: usize = 1024;

impl Shifted {
    /// The same grid two columns narrower: too narrow for a row and its padding, so the input's
    /// last column is left out (a broken plan, for the tests to catch; one column narrower would
    /// still be right, each row's right padding then being the next row's left).
    #[cfg(test)]
    pub(super) fn narrower(&self) -> Shifted {
        Shifted {
            hp: self.hp,
            wp: self.wp - 2,
        }
    }

    /// One group: `yg` (`mg × ho·wo`) = the epilogue of `a` times the shifted rows of `xg`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run(
        &self,
        xg: &[f32],
        cg: usize,
        g: &super::Geom,
        a: &PackedA,
        epi: &Epilogue,
        yg: &mut [std::mem::MaybeUninit<f32>],
        threads: Threads,
    ) {
        let (hp, wp) = (self.hp, self.wp);
        let [_, ho, wo] = g.outs;
        let plane = hp * wp;
        let offs: Vec<usize> = (0..cg)
            .flat_map(|c| {
                (0..g.k[1]).flat_map(move |kh| {
                    (0..g.k[2]).map(move |kw| c * plane + kh * g.d[1] * wp + kw * g.d[2])
                })
            })
            .collect();
        let mut xp = PADDED.with(|b| b.take());
        // Past the last plane, the reads of the dropped columns of the last rows.
        let len = offs
            .iter()
            .max()
            .map_or(0, |&o| o + ho * wp)
            .max(cg * plane);
        pad_planes(xg, cg, g, (self.hp, self.wp), len, &mut xp);
        let src = (&xp[..], &offs[..]);
        // Output rows per block of the grid: blocks split across the threads (each GEMM then
        // serial) where there are enough of them, otherwise one GEMM over all rows, split as it
        // chooses.
        let rows = GRID_COLS.div_ceil(wp).clamp(1, ho);
        let blocks = ho.div_ceil(rows);
        let par = threads != Threads::Serial && rayon::current_num_threads() > 1;
        assert_eq!(yg.len(), a.rows() * ho * wo, "shifted conv: output size");
        let out = SyncPtr(yg.as_mut_ptr());
        if par && blocks >= 4 * rayon::current_num_threads() {
            (0..blocks).into_par_iter().for_each(|bi| {
                let rs = (bi * rows, ((bi + 1) * rows).min(ho));
                // SAFETY: block `bi` writes only rows rs of each channel's plane of `yg` (sized
                // above), which no other block touches.
                unsafe { self.block(a, src, rs, g, epi, Threads::Serial, out) };
            });
        } else {
            let t = if par { threads } else { Threads::Serial };
            // SAFETY: one block, all rows of `yg` (sized above).
            unsafe { self.block(a, src, (0, ho), g, epi, t, out) };
        }
        PADDED.with(|b| b.set(xp));
    }

    /// Output rows `r0..r1`: the GEMM over their columns of the grid into a block of the grid,
    /// then each kept column moved to rows r0..r1 of channel `m`'s plane of `out`, with the
    /// epilogue.
    ///
    /// # Safety
    /// `out` points at `mg` planes of `ho·wo` values, and no one else writes rows `r0..r1` of
    /// them during the call.
    #[allow(clippy::too_many_arguments)]
    unsafe fn block(
        &self,
        a: &PackedA,
        (xp, offs): (&[f32], &[usize]),
        (r0, r1): (usize, usize),
        g: &super::Geom,
        epi: &Epilogue,
        threads: Threads,
        out: SyncPtr,
    ) {
        let wp = self.wp;
        let [_, ho, wo] = g.outs;
        let mg = a.rows();
        let np = (r1 - r0) * wp;
        let mut cp = GRID.with(|b| b.take());
        cp.clear();
        cp.reserve(mg * np);
        let grid = &mut cp.spare_capacity_mut()[..mg * np];
        // Column j of these rows' grid is column r0·wp + j of the whole grid.
        let src = BSource::Rows {
            data: &xp[r0 * wp..],
            offs,
        };
        quorum_kernels::sgemm_uninit(a, &src, np, grid, np, &Epilogue::NONE, threads);
        // SAFETY: sgemm_uninit wrote every element of its mg × np output.
        unsafe { cp.set_len(mg * np) };
        let out_sp = ho * wo;
        let compact = |m: usize| {
            // SAFETY: rows r0..r1 of channel m's plane (the caller's contract).
            let out = unsafe {
                std::slice::from_raw_parts_mut(out.at(m * out_sp + r0 * wo), (r1 - r0) * wo)
            };
            for oh in 0..r1 - r0 {
                let row = &mut out[oh * wo..(oh + 1) * wo];
                for (d, &v) in row.iter_mut().zip(&cp[m * np + oh * wp..][..wo]) {
                    d.write(v);
                }
                // SAFETY: every value of the row was written just above.
                let row = unsafe { &mut *(row as *mut [_] as *mut [f32]) };
                let bias = epi.bias.map(|b| b[m]);
                match epi.residual {
                    Some(r) => epi
                        .act
                        .apply_add(row, bias, &r[m * out_sp + (r0 + oh) * wo..]),
                    None if bias.is_some() || epi.act != Activation::None => {
                        epi.act.apply(row, bias)
                    }
                    None => {}
                }
            }
        };
        if threads != Threads::Serial && mg * np >= 1 << 15 {
            (0..mg).into_par_iter().for_each(compact);
        } else {
            (0..mg).for_each(compact);
        }
        GRID.with(|b| b.set(cp));
    }
}

/// `xp` = the planes of `xg` at (pt, pl) in zero planes of `hp × wp`, then zeros to `len`. Rows
/// and columns of the input past the padded grid are read by no kept output (each reads rows
/// < ho + (kh − 1)·d = hp, likewise columns) and are left out.
///
/// All of `xp` is zeroed in one fill and the rows copied over it, planes split across the threads
/// for large inputs. Zeroing each row's few pad values on their own was two calls of `memset` per
/// row: on densenet121's 128-channel 14² inputs the padding took a third of its 3×3
/// convolution's time (perf, AMD EPYC of stop 34).
pub(super) fn pad_planes(
    xg: &[f32],
    cg: usize,
    g: &super::Geom,
    (hp, wp): (usize, usize),
    len: usize,
    xp: &mut Vec<f32>,
) {
    let [_, h, w] = g.ins;
    let (pt, pl) = (g.pb[1] as usize, g.pb[2] as usize);
    let plane = hp * wp;
    xp.clear();
    xp.resize(len, 0.0);
    let (rows, cols) = (h.min(hp.saturating_sub(pt)), w.min(wp.saturating_sub(pl)));
    if rows == 0 || cols == 0 || plane == 0 {
        return;
    }
    let copy = |(ci, dst): (usize, &mut [f32])| {
        for y in 0..rows {
            dst[(y + pt) * wp + pl..][..cols].copy_from_slice(&xg[(ci * h + y) * w..][..cols]);
        }
    };
    if cg * plane >= PAD_PAR_MIN {
        xp[..cg * plane]
            .par_chunks_mut(plane)
            .with_min_len(8)
            .enumerate()
            .for_each(copy);
    } else {
        xp[..cg * plane]
            .chunks_mut(plane)
            .enumerate()
            .for_each(copy);
    }
}

/// Values of padded input from which [`pad_planes`] splits its planes across the threads.
const PAD_PAR_MIN: usize = 1 << 15;

/// The output pointer, shared by tasks that write disjoint rows.
#[derive(Clone, Copy)]
struct SyncPtr(*mut std::mem::MaybeUninit<f32>);
// SAFETY: the pointer is only dereferenced inside `Shifted::block`, whose contract gives each call
// rows no other call writes (see `Shifted::run`), and the buffer outlives the parallel loop that
// carries the pointer; sending it to a rayon worker moves no ownership.
unsafe impl Send for SyncPtr {}
// SAFETY: as for `Send`: the tasks that share it write disjoint rows, so no two threads touch the
// same value through it.
unsafe impl Sync for SyncPtr {}

impl SyncPtr {
    /// The pointer `i` values on (a method, so that closures capture the whole `Sync` wrapper).
    ///
    /// # Safety
    /// `i` is inside the allocation.
    unsafe fn at(self, i: usize) -> *mut std::mem::MaybeUninit<f32> {
        // SAFETY: the caller's contract.
        unsafe { self.0.add(i) }
    }
}
