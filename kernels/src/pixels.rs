//! Convolutions with a short sum, by vectors of output pixels: a network's first layer (3 channels
//! of 3×3, 27 steps) on AVX-512, with no patch packed.
//!
//! The register tile is 8 output channels (one panel of the GEMM's packed `A`, the weights as the
//! GEMM path packs them) by 32 consecutive output pixels of one row (two vectors). For each step
//! `p = (c, kh, kw)` the 8 weights are broadcast and the 32 pixels' input values are loaded as
//! vectors: the input is first copied into a grid whose rows are split by column phase (column `j`
//! of a padded row goes to phase `j mod s` at `j / s`, `s` the column stride), so that the inputs of
//! consecutive output pixels lie next to each other for any stride. The copy is of the input's size
//! (600 KiB for a 224² image), where the GEMM path gathers every patch value (`K` of them per
//! output pixel) into its packed `B`, then passes over each stored tile for the activation.
//!
//! **The same bits as the GEMM.** Each output's sum runs over `p` in the GEMM's order, from zero,
//! one fused multiply-add a step, in one block (the depth is at most [`MAX_DEPTH`], within the
//! GEMM's first block); padding is read as zeros, as the GEMM's packing writes them. The epilogue
//! is [`Epilogue`]'s: `act((sum + bias) + residual)`, each addition rounded, Relu, Clip,
//! LeakyRelu, Sigmoid and SiLU in registers and HardSwish over each stored row by
//! [`crate::Activation::apply`]. So a convolution gives the bits of `sgemm` over its patches
//! (tested).
use std::mem::MaybeUninit;

use rayon::prelude::*;

use crate::Isa;
use crate::gemm::{Epilogue, PAR_MIN_WORK, Threads};
use crate::pack::PackedA;

/// The deepest sum this path takes: the GEMM's first block of steps (`k_step`), so that each sum is
/// the GEMM's, from zero in one block. (Where the path pays is the caller's choice: each panel of
/// 8 channels reads its `B` values where they lie, where the GEMM packs them once.)
pub const MAX_DEPTH: usize = 256;

/// The largest column stride: the grid holds one phase per column of the stride.
pub const MAX_STRIDE: usize = 4;

/// Output pixels per tile: two vectors.
const TILE: usize = 32;

/// A 2-D convolution over an unpadded input, read through the phase grid.
#[derive(Debug, Clone, Copy)]
pub struct PixelConv<'a> {
    /// `channels` planes of `ins[0] × ins[1]` values.
    pub x: &'a [f32],
    pub channels: usize,
    pub ins: [usize; 2],
    pub kernel: [usize; 2],
    pub strides: [usize; 2],
    pub dilations: [usize; 2],
    /// Zeros before the first row and column; those after the last follow from `outs`.
    pub pads: [usize; 2],
    pub outs: [usize; 2],
}

impl PixelConv<'_> {
    /// Whether this path runs a convolution of `depth` steps at column stride `stride` on this CPU.
    pub fn available(depth: usize, stride: usize) -> bool {
        Isa::Avx512.is_supported() && depth <= MAX_DEPTH && (1..=MAX_STRIDE).contains(&stride)
    }

    /// Steps of the sum: `channels · kh · kw`.
    pub fn depth(&self) -> usize {
        self.channels * self.kernel[0] * self.kernel[1]
    }

    /// Rows of the grid, and columns of each phase: enough for every tap of every output.
    fn grid(&self) -> (usize, usize) {
        let [(oh, ow), (kh, kw)] = [
            (self.outs[0], self.outs[1]),
            (self.kernel[0], self.kernel[1]),
        ];
        let rows = (oh - 1) * self.strides[0] + (kh - 1) * self.dilations[0] + 1;
        let phase = ow + (kw - 1) * self.dilations[1] / self.strides[1];
        (rows, phase)
    }

    /// Panics unless the shapes are consistent (a caller's error).
    fn check(&self) {
        assert!(
            self.kernel.iter().all(|&k| k > 0)
                && self.strides.iter().all(|&s| s > 0)
                && self.dilations.iter().all(|&d| d > 0)
                && self.x.len() >= self.channels * self.ins[0] * self.ins[1],
            "conv_pixels: {} planes of {:?} in {} values, kernel {:?}, strides {:?}, dilations {:?}",
            self.channels,
            self.ins,
            self.x.len(),
            self.kernel,
            self.strides,
            self.dilations,
        );
    }

    /// `grid[((c·rows + r)·s + φ)·phase + t]` = the padded input at channel `c`, row `r`, column
    /// `φ + s·t` (zero in the padding); every value written once.
    fn fill(&self, grid: &mut Vec<f32>, par: bool) {
        let (rows, phase) = self.grid();
        let s = self.strides[1];
        let line = s * phase;
        // Every value is written below: only a grid grown past any before it is zeroed first.
        let len = self.channels * rows * line;
        grid.truncate(len);
        grid.resize(len, 0.0);
        let [h, w] = self.ins;
        let [pt, pl] = self.pads;
        let fill_row = |(i, dst): (usize, &mut [f32])| {
            let (c, r) = (i / rows, i % rows);
            let Some(y) = r.checked_sub(pt).filter(|&y| y < h) else {
                dst.fill(0.0);
                return;
            };
            let src = &self.x[(c * h + y) * w..][..w];
            // Padded column j = pl + x lands in phase j % s at j / s: phase φ holds the columns
            // x ≡ φ − pl (mod s) from the first, x0, at t0 = (pl + x0) / s.
            let mut phases = dst.chunks_exact_mut(phase);
            let geom = (pl, s, w);
            let first = |phi: usize| (phi + s * pl.div_ceil(s) - pl) % s;
            if s == 1 {
                let out = phase_part(phases.next().expect("one phase"), 0, geom);
                out.copy_from_slice(&src[..out.len()]);
            } else if s == 2 {
                let (p0, p1) = (
                    phases.next().expect("phase 0"),
                    phases.next().expect("phase 1"),
                );
                // The phase that starts at x0 = 0 takes the even columns, the other the odd.
                let (evens, odds) = if first(0) == 0 { (p0, p1) } else { (p1, p0) };
                let (evens, odds) = (phase_part(evens, 0, geom), phase_part(odds, 1, geom));
                // SAFETY: AVX-512F is supported (`conv_pixels` asserts `available`).
                unsafe { deinterleave(src, evens, odds) };
            } else {
                for (phi, out) in phases.enumerate() {
                    let x0 = first(phi);
                    let out = phase_part(out, x0, geom);
                    for (o, &v) in out.iter_mut().zip(src.iter().skip(x0).step_by(s)) {
                        *o = v;
                    }
                }
            }
        };
        if par {
            grid.par_chunks_mut(line).enumerate().for_each(fill_row);
        } else {
            grid.chunks_mut(line).enumerate().for_each(fill_row);
        }
    }
}

/// The part of a phase row (`out`) that takes the input columns `x0, x0 + s, …` (`w` of them in
/// the row), the columns before it (the left padding) and after it (the right padding, and what
/// no tap reads) zeroed; `pl` is the left padding.
fn phase_part(out: &mut [f32], x0: usize, (pl, s, w): (usize, usize, usize)) -> &mut [f32] {
    let t0 = ((pl + x0) / s).min(out.len());
    let (before, rest) = out.split_at_mut(t0);
    before.fill(0.0);
    let n = w.saturating_sub(x0).div_ceil(s).min(rest.len());
    rest[n..].fill(0.0);
    &mut rest[..n]
}

thread_local! {
    /// The phase grid, kept between calls by the thread that fills it.
    static GRID: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// `C[m, oh·ow_n + ow] = epilogue(Σ_p W[m, p]·x(p, oh, ow))` for every output channel `m <
/// w.rows()` and pixel, with `w` packed as the GEMM's `A` for AVX-512 (`PackedA::new(Isa::Avx512,
/// M, K, W, K)`, `K` = [`PixelConv::depth`]). Every element of `C` (`M` planes of `oh·ow` values)
/// is written, none read first.
///
/// # Panics
/// When the path is not [`PixelConv::available`], `w` is not packed for AVX-512, or the shapes
/// disagree (caller errors).
pub fn conv_pixels(
    w: &PackedA,
    g: &PixelConv,
    c: &mut [MaybeUninit<f32>],
    epi: &Epilogue,
    threads: Threads,
) {
    g.check();
    let (k, m) = (g.depth(), w.rows());
    assert!(
        PixelConv::available(k, g.strides[1]) && w.isa() == Isa::Avx512,
        "conv_pixels: needs AVX-512 weights, at most {MAX_DEPTH} steps and a column stride of \
         at most {MAX_STRIDE}"
    );
    assert_eq!(
        w.depth(),
        k,
        "conv_pixels: weights of depth {} for {k} steps",
        w.depth()
    );
    let [oh, ow] = g.outs;
    let out_sp = oh * ow;
    assert!(c.len() >= m * out_sp, "conv_pixels: C too small");
    assert!(
        epi.bias.is_none_or(|b| b.len() >= m),
        "conv_pixels: bias shorter than {m}"
    );
    assert!(
        epi.residual.is_none_or(|r| r.len() >= m * out_sp),
        "conv_pixels: residual too short"
    );
    assert!(
        epi.col_bias.is_none(),
        "conv_pixels: a column bias is for GEMMs"
    );
    if m == 0 || out_sp == 0 {
        return;
    }
    let par = match threads {
        Threads::Serial => false,
        Threads::Auto => m * out_sp * k >= PAR_MIN_WORK,
        Threads::Always => true,
    } && rayon::current_num_threads() > 1;
    let (rows, phase) = g.grid();
    let s = g.strides[1];
    let line = s * phase;
    let offs: Vec<usize> = (0..g.channels)
        .flat_map(|ch| {
            (0..g.kernel[0]).flat_map(move |i| {
                (0..g.kernel[1]).map(move |j| {
                    let col = j * g.dilations[1];
                    (ch * rows + i * g.dilations[0]) * line + (col % s) * phase + col / s
                })
            })
        })
        .collect();
    // Where the grid would be the input itself (column stride 1, no padding, rows and columns
    // all read: a pointwise convolution), the input is read in place.
    let in_place = s == 1 && g.pads == [0, 0] && [rows, phase] == g.ins;
    let mut grid = GRID.with(|b| b.take());
    if !in_place {
        g.fill(&mut grid, par && g.channels * rows >= 16);
    }
    let src: &[f32] = if in_place { g.x } else { &grid };
    let panels = m.div_ceil(w.isa().mr());
    // Units of work: a band of output rows, all panels of channels in turn (the band's grid rows,
    // read by every panel, stay in L1 or L2). A band holds at least 256 outputs per channel.
    let band = 256usize.div_ceil(ow).clamp(1, oh);
    let bands = oh.div_ceil(band);
    let out = Out(c.as_mut_ptr().cast::<f32>());
    let run = |b0: usize, b1: usize| {
        for b in b0..b1 {
            let r = (b * band, ((b + 1) * band).min(oh));
            for q in 0..panels {
                // SAFETY: AVX-512F is supported (asserted above); band b of panel q writes only
                // rows r of channels q·8.. of C (sized above), which no other unit writes; every
                // grid read lies in it (`offs` and the row bases stay within `rows × line` per
                // channel, the last pixel's read within `phase` of its row).
                unsafe { avx512::band(w, q, src, &offs, line * g.strides[0], r, g.outs, out, epi) };
            }
        }
    };
    let parts = if par {
        rayon::current_num_threads().min(bands)
    } else {
        1
    };
    if parts < 2 {
        run(0, bands);
    } else {
        let per = bands.div_ceil(parts);
        (0..bands.div_ceil(per))
            .into_par_iter()
            .for_each(|t| run(t * per, ((t + 1) * per).min(bands)));
    }
    GRID.with(|b| b.set(grid));
}

/// The output pointer, shared by threads that write disjoint bands.
#[derive(Clone, Copy)]
struct Out(*mut f32);
// SAFETY: the pointer is C's, mutably borrowed by `conv_pixels` for the whole parallel loop, so it
// outlives every task; each task writes only the rows of its own bands (see `conv_pixels`), so
// moving it to a worker thread lets no two threads write the same value.
unsafe impl Send for Out {}
// SAFETY: as for `Send`: the tasks sharing it write disjoint bands of C and read only their own.
unsafe impl Sync for Out {}

#[cfg(target_arch = "x86_64")]
use crate::lanes::deinterleave;

/// Elsewhere the pixel path is never [`PixelConv::available`].
///
/// # Safety
/// Never to be called (it panics): the x86_64 form's contract, for the signature's sake.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn deinterleave(_: &[f32], _: &mut [f32], _: &mut [f32]) {
    unreachable!("conv_pixels without AVX-512")
}

/// Elsewhere the pixel path is never [`PixelConv::available`]: the x86_64 module's signature.
#[cfg(not(target_arch = "x86_64"))]
mod avx512 {
    use super::{Epilogue, Out, PackedA};

    /// # Safety
    /// Never to be called (it panics): the x86_64 form's contract, for the signature's sake.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn band(
        _: &PackedA,
        _: usize,
        _: &[f32],
        _: &[usize],
        _: usize,
        _: (usize, usize),
        _: [usize; 2],
        _: Out,
        _: &Epilogue,
    ) {
        unreachable!("conv_pixels without AVX-512")
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{Epilogue, Out, PackedA, TILE};
    use crate::activation::lanes::Lanes;
    use crate::lanes::first;
    use std::arch::x86_64::*;

    /// Output rows `r0..r1` of the channels of panel `q` of `w`: tiles of 32 pixels (the last of
    /// a row masked), then, for an activation not computed in registers, that activation over
    /// each stored row.
    ///
    /// # Safety
    /// AVX-512F is available; `out` holds `w.rows()` planes of `oh·ow` values, of which no one
    /// else writes these rows of these channels; row `oh` of the output reads the grid at
    /// `oh·row_step + offs[p] + ow`, all inside `grid`.
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn band(
        w: &PackedA,
        q: usize,
        grid: &[f32],
        offs: &[usize],
        row_step: usize,
        (r0, r1): (usize, usize),
        [oh, ow]: [usize; 2],
        out: Out,
        epi: &Epilogue,
    ) {
        let out_sp = oh * ow;
        let channels = 8.min(w.rows() - q * 8);
        let a = w.panel(q, 0).as_ptr();
        // SAFETY: AVX-512F is available (the caller's promise).
        let lanes = unsafe { Lanes::new(epi.act) };
        for y in r0..r1 {
            let base = grid.as_ptr().wrapping_add(y * row_step);
            let mut x0 = 0;
            while x0 < ow {
                let n = (ow - x0).min(TILE);
                let at = base.wrapping_add(x0);
                // SAFETY: the caller's contract: lanes below n read the grid at offs[p] + x0 + j
                // of this row; the rest are masked off (neither read nor faulted on). The tile
                // is stored to channels q·8.. of row y, columns x0..x0 + n.
                unsafe {
                    let to = Store {
                        out,
                        out_sp,
                        at: y * ow + x0,
                        n,
                        q,
                        channels,
                    };
                    if n > 16 {
                        let acc = tile::<2>(a, offs, at, [u16::MAX, first(n - 16)]);
                        to.put(&acc, epi, lanes.as_ref());
                    } else {
                        let acc = tile::<1>(a, offs, at, [first(n)]);
                        to.put(&acc, epi, lanes.as_ref());
                    }
                }
                x0 += n;
            }
            if lanes.is_none() {
                for ch in q * 8..q * 8 + channels {
                    // SAFETY: row y of channel ch, written whole just above (the caller's
                    // contract: no one else writes it).
                    let row = unsafe {
                        std::slice::from_raw_parts_mut(out.0.add(ch * out_sp + y * ow), ow)
                    };
                    epi.act.apply(row, None);
                }
            }
        }
    }

    /// Where a tile goes: `n` pixels from `at` of each plane of the panel's channels.
    struct Store {
        out: Out,
        out_sp: usize,
        at: usize,
        n: usize,
        q: usize,
        channels: usize,
    }

    impl Store {
        /// `act((acc + bias) + residual)` of the tile's outputs, stored (the activation only where
        /// `lanes` computes it).
        ///
        /// # Safety
        /// AVX-512F is available; the `n` pixels from `at` of each of the panel's channels lie in
        /// the output (and the residual, laid out like it) and are this caller's to write.
        #[inline(always)]
        unsafe fn put<const V: usize>(
            &self,
            acc: &[[__m512; V]; 8],
            epi: &Epilogue,
            lanes: Option<&Lanes>,
        ) {
            for (i, acc) in acc.iter().enumerate().take(self.channels) {
                let ch = self.q * 8 + i;
                let at = ch * self.out_sp + self.at;
                for (j, &v) in acc.iter().enumerate() {
                    let m = first(self.n - 16 * j);
                    // SAFETY: the caller's contract; lanes past `n` are masked off.
                    unsafe {
                        let mut v = v;
                        if let Some(b) = epi.bias {
                            v = _mm512_add_ps(v, _mm512_set1_ps(*b.get_unchecked(ch)));
                        }
                        if let Some(r) = epi.residual {
                            let r = _mm512_maskz_loadu_ps(m, r.as_ptr().add(at + 16 * j));
                            v = _mm512_add_ps(v, r);
                        }
                        if let Some(l) = lanes {
                            v = l.apply(v);
                        }
                        _mm512_mask_storeu_ps(self.out.0.add(at + 16 * j), m, v);
                    }
                }
            }
        }
    }

    /// The sums of one tile: 8 channels (panel `a`, 8 weights a step) by `V` vectors of pixels,
    /// step `p`'s pixels read at `at + offs[p]` under `masks`.
    ///
    /// # Safety
    /// AVX-512F is available; `a` holds `8·offs.len()` values; the masked-on lanes' reads lie in
    /// the grid.
    #[inline(always)]
    unsafe fn tile<const V: usize>(
        a: *const f32,
        offs: &[usize],
        at: *const f32,
        masks: [u16; V],
    ) -> [[__m512; V]; 8] {
        // SAFETY: the caller's contract; masked-off lanes are not read.
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); V]; 8];
            for (p, &off) in offs.iter().enumerate() {
                let src = at.wrapping_add(off);
                let x: [__m512; V] = std::array::from_fn(|v| {
                    _mm512_maskz_loadu_ps(masks[v], src.wrapping_add(16 * v))
                });
                let wp = a.add(8 * p);
                for (i, row) in acc.iter_mut().enumerate() {
                    let wv = _mm512_set1_ps(*wp.add(i));
                    for (r, &x) in row.iter_mut().zip(&x) {
                        *r = _mm512_fmadd_ps(wv, x, *r);
                    }
                }
            }
            acc
        }
    }
}

#[cfg(test)]
mod tests;
