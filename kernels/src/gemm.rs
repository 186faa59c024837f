//! `C = act(A·B + bias)` in f32: `A` packed once ([`PackedA`]), `B` packed here one cache block at a
//! time from its [`BSource`], the bias and activation applied to each tile as it is stored.
//!
//! Blocking: for each block of `NC` columns and [`k_step`] steps (the whole sum up to 256 steps,
//! else equal blocks of at most `KC`), `B` is packed (kc×nc, in L2); each `B`
//! panel (kc×NR, in L1) then meets every `A` panel (MR×kc) of a block of rows that stays in L2. The sum over `K`
//! runs in `p` order, one accumulator per output, and crosses blocks through `C` (the block's
//! sum added to the stored partial sum).
//!
//! Threads: work below [`PAR_MIN_WORK`] multiply-adds runs on the calling thread; above it, the
//! columns or the row panels (whichever divides more evenly) are split into one part per rayon thread.
//! Each thread packs its own `B` blocks into a buffer it keeps between calls, so a steady-state call
//! allocates nothing.
//!
//! Measured choices (the figures are node times in the models, two threads):
//! - Within a block the tiles go `B` panel by `B` panel over `A`'s panels (each `B` panel read
//!   once, from L1), except for a sum of at most 64 steps, whose time is its output's: there `A`'s
//!   panel is fixed over `B`'s, so the output is written `mr` rows at a time rather than every row
//!   of the block at once (mobilenet_v2's 16 → 96 expansion at 112²: 0.51–0.70 → 0.36–0.38 ms on
//!   the 2-core Xeon).
//! - A full AVX-512 tile of a sum of one block applies the epilogue (bias, residual or column
//!   bias, then Relu, Clip, LeakyRelu, Sigmoid or SiLU) in registers before its one store
//!   (`avx512_8x32_fused`), with the operations of the stored-row pass in its order; partial tiles,
//!   HardSwish and longer sums keep that pass, whose cost is small beside a long sum's.
//! - Threads split by rows or columns of panels, the more even way; where `B` is packed per call
//!   and `C` has four times as many rows as columns, by rows unless that is a quarter more uneven
//!   (split by columns, every thread reads all of `A`: squeezenet's last convolution
//!   0.77–0.86 → 0.67–0.68 ms).
//! - A lone row goes four whole `B` panels at a time (`row_of_4`), eight chains of multiply-adds
//!   in flight instead of two; tiles of fewer rows than the panel compute only 1 or 4 rows, with
//!   the full tile's sums.
use std::cell::RefCell;
use std::mem::MaybeUninit;

use rayon::prelude::*;

use crate::Isa;
use crate::activation::Activation;
use crate::aligned::AlignedF32;
#[cfg(target_arch = "x86_64")]
use crate::microkernel::{TileEpi, avx512_8x32_fused};
use crate::microkernel::{row_of_4, tile};
use crate::pack::{BSource, PackScratch, PackedA};

/// Steps of `K` per packed block: a `B` panel (KC×NR) stays in L1 while the `A` panels stream past.
pub(crate) const KC: usize = 192;
/// Steps of `K` per block for a sum of `k` steps: all of them up to [`KC_ONE`], else `k` cut into
/// the fewest blocks of at most [`KC`], of equal depth (no short last block, whose partial sums
/// would cost a pass over `C` for little work).
pub(crate) fn k_step(k: usize) -> usize {
    if k <= KC_ONE {
        k.max(1)
    } else {
        k.div_ceil(k.div_ceil(KC))
    }
}

/// Depth up to which a sum runs as one block: a `B` panel of 256 steps (32 KiB on AVX-512) and the
/// `A` panel streaming past it still fit the 48 KiB L1.
const KC_ONE: usize = 256;

/// `A` panels per block of rows: the block's `A` (about MC_PANELS·8×KC) stays in L2.
const MC_PANELS: usize = 32;
/// Columns per packed block: a multiple of every `NR`.
const NC: usize = 512;
/// The longest sum (steps of a block) whose tiles go A panel by A panel (see `block`). Measured on
/// this project's 2-core AVX-512 Xeon: mobilenet_v2's 16 → 96 expansion at 112² went from 0.51–0.70
/// ms to 0.36–0.38 in the model, and efficientnet_b0 from 10.4–10.7 to 9.7–9.9 ms; orders past 64
/// steps were within noise either way, so the longer sums keep the order that reads each B panel
/// once.
const A_OUTER_MAX_K: usize = 64;

/// Multiply-adds (`m·n·k`) below which a GEMM runs on the calling thread. Measured on a 2-core
/// Xeon (Ice Lake, AVX-512) with two rayon threads: splitting is a loss below about 2^16 and a gain
/// from about 2^17 (see `reports/cpu/light-vs-onnxruntime.md`).
pub const PAR_MIN_WORK: usize = 1 << 17;

/// Whether a GEMM may split its work across rayon's threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threads {
    /// On the calling thread.
    Serial,
    /// Split when the work reaches [`PAR_MIN_WORK`] and rayon has more than one thread.
    Auto,
    /// Split whatever the size (for measuring the crossover, and for tests of the split path).
    Always,
}

/// What is applied to each output as it is stored: `act((C + bias[row]) + residual[i, j])`, or
/// `act((C + bias[row]) + col_bias[j])`.
#[derive(Debug, Clone, Copy)]
pub struct Epilogue<'a> {
    /// One value per row of `C` (a convolution's output channel), or none.
    pub bias: Option<&'a [f32]>,
    pub act: Activation,
    /// Laid out like `C` (`residual[i·ldc + j]` for `C[i, j]`), added after the bias (a residual
    /// connection's Add), or none.
    pub residual: Option<&'a [f32]>,
    /// One value per column of `C` (a Linear layer's bias, for a product of activations by a
    /// weight), added where a residual would be; at most one of the two is given.
    pub col_bias: Option<&'a [f32]>,
}

impl Epilogue<'_> {
    /// Neither bias nor activation.
    pub const NONE: Epilogue<'static> = Epilogue {
        bias: None,
        act: Activation::None,
        residual: None,
        col_bias: None,
    };

    pub(crate) fn is_identity(&self) -> bool {
        self.bias.is_none()
            && self.act == Activation::None
            && self.residual.is_none()
            && self.col_bias.is_none()
    }

    /// The epilogue on row `i`, columns `j0..j0 + dst.len()`, of `C` (row stride `ldc`).
    pub(crate) fn apply(&self, dst: &mut [f32], i: usize, j0: usize, ldc: usize) {
        let bias = self.bias.map(|b| b[i]);
        match (self.residual, self.col_bias) {
            (Some(r), _) => self.act.apply_add(dst, bias, &r[i * ldc + j0..]),
            (None, Some(c)) => self.act.apply_add(dst, bias, &c[j0..]),
            (None, None) => self.act.apply(dst, bias),
        }
    }
}

/// `C[i, j] = act(Σ_p A[i, p]·B[p, j] + bias[i])` for `i < a.rows()`, `j < n`, with `C[i, j]` at
/// `c[i·ldc + j]`. Every element of that region is written (and none read before it is written), so
/// `c` may be uninitialised; [`sgemm`] is the form for initialised slices.
///
/// # Panics
/// When `c`, the bias or `b` is too small for the shapes, or `a` was packed for an instruction set
/// this CPU lacks (caller errors).
pub fn sgemm_uninit(
    a: &PackedA,
    b: &BSource,
    n: usize,
    c: &mut [MaybeUninit<f32>],
    ldc: usize,
    epi: &Epilogue,
    threads: Threads,
) {
    let (m, k) = (a.rows(), a.depth());
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        ldc >= n && (m - 1) * ldc + n <= c.len(),
        "sgemm: C of {} values cannot hold {m}x{n} with row stride {ldc}",
        c.len()
    );
    assert!(
        epi.bias.is_none_or(|bias| bias.len() >= m),
        "sgemm: bias shorter than {m} rows"
    );
    assert!(
        epi.residual.is_none_or(|r| r.len() >= (m - 1) * ldc + n),
        "sgemm: residual too short for {m}x{n} with row stride {ldc}"
    );
    assert!(
        epi.col_bias
            .is_none_or(|c| c.len() >= n && epi.residual.is_none()),
        "sgemm: column bias shorter than {n} columns, or given with a residual"
    );
    assert!(
        a.isa().is_supported(),
        "sgemm: A was packed for {:?}",
        a.isa()
    );
    if let BSource::Packed(pb) = b {
        assert!(
            pb.isa() == a.isa(),
            "sgemm: A packed for {:?}, B for {:?}",
            a.isa(),
            pb.isa()
        );
    }
    b.check(k, n);
    let out = OutPtr(c.as_mut_ptr().cast::<f32>());
    let (mr, nr) = (a.isa().mr(), a.isa().nr());
    let panels = m.div_ceil(mr);
    let work = m.saturating_mul(n).saturating_mul(k.max(1));
    let split = match threads {
        Threads::Serial => false,
        Threads::Auto => work >= PAR_MIN_WORK,
        Threads::Always => true,
    };
    let threads = rayon::current_num_threads();
    if !split || threads < 2 {
        block(a, b, out, ldc, (0, panels), (0, n), epi);
        return;
    }
    let cols = n.div_ceil(nr);
    // Parts of whole panels, split along rows or columns.
    let excess = |units: usize| units.div_ceil(threads) * threads * 1000 / units;
    let (ec, ep) = (excess(cols), excess(panels));
    // The more even split (the larger on a tie); but where B is packed per call and C has four
    // times as many rows as columns or more, rows unless that is a quarter more uneven. Split by
    // columns, every thread reads all of A: squeezenet's last convolution (1000×169, K 512, 2 MB
    // of weights) took 0.83–0.85 ms in the model split by columns (6 units against 125, the more
    // even by 0.8%) and 0.70–0.72 split by rows. Preferring columns wherever n ≥ m as well was
    // tried: resnet50 gained 1.5% and inception_v2 and bert_encoder's attention lost 3–4%.
    let by_cols = if !matches!(b, BSource::Packed(_)) && m >= 4 * n {
        ep * 4 > ec * 5
    } else {
        (ec, panels) <= (ep, cols)
    };
    let (units, per) = if by_cols {
        (cols, cols.div_ceil(threads))
    } else {
        (panels, panels.div_ceil(threads))
    };
    (0..units.div_ceil(per)).into_par_iter().for_each(|t| {
        let (u0, u1) = (t * per, ((t + 1) * per).min(units));
        if by_cols {
            block(
                a,
                b,
                out,
                ldc,
                (0, panels),
                (u0 * nr, (u1 * nr).min(n)),
                epi,
            );
        } else {
            block(a, b, out, ldc, (u0, u1), (0, n), epi);
        }
    });
}

/// [`sgemm_uninit`] on an initialised `C`.
pub fn sgemm(
    a: &PackedA,
    b: &BSource,
    n: usize,
    c: &mut [f32],
    ldc: usize,
    epi: &Epilogue,
    threads: Threads,
) {
    // SAFETY: f32 and MaybeUninit<f32> have the same layout, and sgemm_uninit only writes f32 values.
    let c = unsafe { &mut *(c as *mut [f32] as *mut [MaybeUninit<f32>]) };
    sgemm_uninit(a, b, n, c, ldc, epi, threads);
}

/// The output pointer, shared by threads that write disjoint tiles.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: the pointer is C's, which `sgemm_uninit` borrows mutably for the whole parallel loop, so
// it outlives every task; each task writes only the rows and columns of its own part (whole row
// panels or whole column panels, split in `sgemm_uninit`), so handing it to a worker thread lets
// no two threads write the same value.
unsafe impl Send for OutPtr {}
// SAFETY: as for `Send`: the tasks sharing it write disjoint parts of C and never read another's.
unsafe impl Sync for OutPtr {}

thread_local! {
    /// Per-thread packing buffers: the packed `B` block and the pieces a convolution's block is cut
    /// into.
    static SCRATCH: RefCell<(AlignedF32, PackScratch)> = RefCell::new(Default::default());
}

/// Row panels `q0..q1` and columns `j0..j1` of `C`, on the calling thread.
fn block(
    a: &PackedA,
    b: &BSource,
    out: OutPtr,
    ldc: usize,
    (q0, q1): (usize, usize),
    (j0, j1): (usize, usize),
    epi: &Epilogue,
) {
    let isa = a.isa();
    let (mr, nr, m, k) = (isa.mr(), isa.nr(), a.rows(), a.depth());
    let row_range = |q: usize| (q * mr, mr.min(m - q * mr));
    if k == 0 {
        for q in q0..q1 {
            let (r0, rows) = row_range(q);
            for i in r0..r0 + rows {
                // SAFETY: inside C (checked by sgemm_uninit); this part owns these rows and columns.
                let dst =
                    unsafe { std::slice::from_raw_parts_mut(out.0.add(i * ldc + j0), j1 - j0) };
                dst.fill(0.0);
                epi.apply(dst, i, j0, ldc);
            }
        }
        return;
    }
    let kstep = k_step(k);
    // The activation in registers, for full AVX-512 tiles of one-block sums (see `one`).
    #[cfg(target_arch = "x86_64")]
    let fused = if isa == Isa::Avx512 && !epi.is_identity() {
        // SAFETY: A was packed for AVX-512, which sgemm_uninit checked this CPU has.
        unsafe { crate::activation::lanes::Lanes::new(epi.act) }
    } else {
        None
    };
    let run = |bp: &mut AlignedF32, row: &mut PackScratch| {
        for jc in (j0..j1).step_by(NC) {
            let nc = NC.min(j1 - jc);
            let bpanels = nc.div_ceil(nr);
            for pc in (0..k).step_by(kstep) {
                let kc = kstep.min(k - pc);
                if !matches!(b, BSource::Packed(_)) {
                    bp.resize_zeroed(bpanels * nr * kc);
                    b.pack(nr, (pc, kc), (jc, nc), bp, row);
                }
                let last = pc + kc == k;
                // The order of the tiles of a block: B's panel fixed over A's panels (each B panel
                // read once, from L1, and A's from L2), or, for a short sum, A's panel fixed over
                // B's. A short sum's time is its output's: written a row panel at a time, that is
                // `mr` streams of stores, instead of one per row of the block at once.
                let b_outer = kc > A_OUTER_MAX_K;
                let bpanel = |jr: usize| match b {
                    BSource::Packed(pb) => &pb.panel(jc / nr + jr, pc)[..kc * nr],
                    _ => &bp[jr * kc * nr..(jr + 1) * kc * nr],
                };
                // The tile of row panel `q` and B panel `jr`, and its epilogue on the last block.
                let one = |jr: usize, q: usize| {
                    let cols = nr.min(nc - jr * nr);
                    let (r0, rows) = row_range(q);
                    // A full AVX-512 tile of a one-block sum: the epilogue in registers.
                    #[cfg(target_arch = "x86_64")]
                    if let Some(lanes) = fused
                        && pc == 0
                        && last
                        && rows == mr
                        && cols == nr
                    {
                        let col = jc + jr * nr;
                        // SAFETY: as below; the bias has a value per row of A, the residual is
                        // laid out as C and the column bias has one per column (sgemm_uninit's
                        // checks), so the tile's 8 rows and 32 columns of each are inside them.
                        unsafe {
                            let epi = TileEpi {
                                bias: epi.bias.map(|b| b.as_ptr().add(r0)),
                                residual: epi.residual.map(|r| r.as_ptr().add(r0 * ldc + col)),
                                col_bias: epi.col_bias.map(|c| c.as_ptr().add(col)),
                                lanes,
                            };
                            avx512_8x32_fused(
                                kc,
                                a.panel(q, pc).as_ptr(),
                                bpanel(jr).as_ptr(),
                                out.0.add(r0 * ldc + col),
                                ldc,
                                epi,
                            );
                        }
                        return;
                    }
                    // SAFETY: the panels hold kc steps of this ISA's tile; the tile lies inside C
                    // and inside this part's rows and columns; the ISA was checked. `jc` is a
                    // multiple of `nr` (parts and blocks start on panel edges).
                    unsafe {
                        let cp = out.0.add(r0 * ldc + jc + jr * nr);
                        tile(
                            isa,
                            kc,
                            a.panel(q, pc).as_ptr(),
                            bpanel(jr).as_ptr(),
                            cp,
                            ldc,
                            rows,
                            cols,
                            pc > 0,
                        );
                        if last && !epi.is_identity() {
                            for i in 0..rows {
                                let dst = std::slice::from_raw_parts_mut(cp.add(i * ldc), cols);
                                epi.apply(dst, r0 + i, jc + jr * nr, ldc);
                            }
                        }
                    }
                };
                for ic in (q0..q1).step_by(MC_PANELS) {
                    let qs = ic..q1.min(ic + MC_PANELS);
                    // One row (a batch of one through a layer's weights): four whole B panels at
                    // a time, eight independent sums in flight instead of two (see `row_of_4`).
                    let mut first = 0;
                    if isa == Isa::Avx512 && qs.len() == 1 && row_range(ic).1 == 1 {
                        let r0 = row_range(ic).0;
                        while first + 4 <= nc / nr {
                            let jr = first;
                            // SAFETY: as in `one`, for four whole panels side by side in C.
                            unsafe {
                                let cp = out.0.add(r0 * ldc + jc + jr * nr);
                                row_of_4(
                                    kc,
                                    a.panel(ic, pc).as_ptr(),
                                    std::array::from_fn(|t| bpanel(jr + t).as_ptr()),
                                    cp,
                                    pc > 0,
                                );
                                if last && !epi.is_identity() {
                                    let dst = std::slice::from_raw_parts_mut(cp, 4 * nr);
                                    epi.apply(dst, r0, jc + jr * nr, ldc);
                                }
                            }
                            first += 4;
                        }
                    }
                    let bs = bpanels - first;
                    let (outer, inner) = if b_outer {
                        (bs, qs.len())
                    } else {
                        (qs.len(), bs)
                    };
                    for (o, i) in (0..outer).flat_map(|o| (0..inner).map(move |i| (o, i))) {
                        let (jr, q) = if b_outer { (o, ic + i) } else { (i, ic + o) };
                        one(first + jr, q);
                    }
                }
            }
        }
    };
    SCRATCH.with(|s| match s.try_borrow_mut() {
        Ok(mut s) => {
            let (bp, row) = &mut *s;
            run(bp, row)
        }
        Err(_) => run(&mut AlignedF32::default(), &mut PackScratch::default()),
    });
}

#[cfg(test)]
mod tests;
