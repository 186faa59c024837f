//! Direct 2-D convolution on AVX-512: no patch matrix, packed or not.
//!
//! The register tile is `R` output pixels of one output row by 32 output channels (two vectors):
//! for each step `p = (c, kh, kw)` of the sum, the 32 weights `W[m, p]` are loaded from the weights
//! packed once as 32-wide panels (a [`PackedB`] of `Wᵀ`), and each pixel's input value is broadcast
//! straight from the zero-padded input, `R` pixels at a fixed distance (the column stride). Per
//! step that is 2 vector loads and `R` broadcasts for `2R` multiply-adds, the ratio of the GEMM's
//! 8×32 tile at `R = 8` and better above it; and the patches are never copied, which the GEMM's
//! packing of `B` does for every value.
//!
//! **The same bits as the GEMM.** The sum over `p` runs in the GEMM's order and blocking: from
//! zero in blocks of [`k_step`](crate::gemm::k_step) steps, one fused multiply-add per step, each block's sum added to the
//! total of the blocks before it. The epilogue is [`Epilogue`]'s, on the stored rows. So a
//! convolution gives the bits of `sgemm` over its patches (tested).
//!
//! **Memory.** A unit of work is a band of output rows for one panel of 32 channels. Within it, each
//! block of steps meets every tile of the band before the next block is read, so the block's
//! weights (at most 24 KiB) are read once and stay in L1 while the tiles pass; and each tile asks
//! for a share of the next block's weights into L2, one cache line every few steps, so that weights
//! read from memory (resnet50's and vgg19's do not stay in cache between runs) arrive while the
//! tiles compute.
//!
//! Rows of the output are cut into tiles of at most [`MAX_R`] pixels, as even as they divide, so a
//! 56-wide row is four tiles of 14: no column of a tile is wasted. Rows of at most `MAX_R / 2` go
//! two to a tile (a 7-wide row and the next: 14 pixels, consecutive in the output plane), so that
//! the tile's accumulators are all used. Output channels are padded to the panel width (zero
//! weights).
//!
//! The blocks are the GEMM's ([`k_step`](crate::gemm::k_step)): the whole sum up to 256 steps,
//! else equal blocks of at most 192. A band holds about 64 outputs per channel, cut so that the
//! units of work (bands by panels) divide evenly among the threads; each tile's 32 channels reach
//! their output planes by 16×16 transposes in registers.
use std::mem::MaybeUninit;

use rayon::prelude::*;

use crate::Isa;
use crate::gemm::{Epilogue, PAR_MIN_WORK, Threads, k_step};
use crate::pack::PackedB;

/// Output pixels per tile, at most: 28 accumulators, two weight vectors and a broadcast take 31 of
/// the 32 vector registers.
pub const MAX_R: usize = 14;

/// Output channels per panel: two vectors.
const PANEL: usize = 32;

/// A 2-D convolution over a zero-padded input, read in place.
#[derive(Debug, Clone, Copy)]
pub struct DirectConv<'a> {
    /// `channels` planes of `rows × cols` values: the input with its padding. Output `(oh, ow)`,
    /// tap `(kh, kw)` of channel `c` reads `x[c·rows·cols + (oh·s₀ + kh·d₀)·cols + ow·s₁ + kw·d₁]`.
    pub x: &'a [f32],
    pub channels: usize,
    pub rows: usize,
    pub cols: usize,
    pub kernel: [usize; 2],
    pub strides: [usize; 2],
    pub dilations: [usize; 2],
    pub outs: [usize; 2],
}

impl DirectConv<'_> {
    /// Whether the direct path runs these convolutions on this CPU: AVX-512, column stride 1 or 2.
    pub fn available(strides: [usize; 2]) -> bool {
        Isa::Avx512.is_supported() && matches!(strides[1], 1 | 2)
    }

    /// Steps of the sum: `channels · kh · kw`.
    pub fn depth(&self) -> usize {
        self.channels * self.kernel[0] * self.kernel[1]
    }

    /// Panics unless every read lies in `x` (a caller's error).
    fn check(&self) {
        let [oh, ow] = self.outs;
        let reach = |o: usize, s: usize, k: usize, d: usize| (o - 1) * s + (k - 1) * d + 1;
        assert!(
            self.kernel.iter().all(|&k| k > 0)
                && self.strides.iter().all(|&s| s > 0)
                && self.x.len() >= self.channels * self.rows * self.cols
                && (oh == 0
                    || ow == 0
                    || (reach(oh, self.strides[0], self.kernel[0], self.dilations[0])
                        <= self.rows
                        && reach(ow, self.strides[1], self.kernel[1], self.dilations[1])
                            <= self.cols)),
            "conv_direct: {:?} outputs of a {:?} kernel (strides {:?}, dilations {:?}) do not fit \
             {} planes of {}x{} in {} values",
            self.outs,
            self.kernel,
            self.strides,
            self.dilations,
            self.channels,
            self.rows,
            self.cols,
            self.x.len()
        );
    }
}

/// `C[m, oh·ow_n + ow] = epilogue(Σ_p W[m, p]·x(p, oh, ow))` for every output channel `m < w.cols()`
/// and pixel, with `w` = `Wᵀ` packed (`PackedB::new(Isa::Avx512, K, M, W, 1, K)`, `K` =
/// [`DirectConv::depth`]). Every element of `C` (`M` planes of `oh·ow` values) is written, none read
/// first.
///
/// # Panics
/// When the direct path is not [`DirectConv::available`], `w` is not packed for AVX-512, or the
/// shapes disagree (caller errors).
pub fn conv_direct(
    w: &PackedB,
    g: &DirectConv,
    c: &mut [MaybeUninit<f32>],
    epi: &Epilogue,
    threads: Threads,
) {
    assert!(
        DirectConv::available(g.strides) && w.isa() == Isa::Avx512,
        "conv_direct: needs AVX-512 weights and a column stride of 1 or 2"
    );
    g.check();
    let (k, m) = (g.depth(), w.cols());
    let [oh, ow] = g.outs;
    let out_sp = oh * ow;
    assert_eq!(
        w.depth(),
        k,
        "conv_direct: weights of depth {} for {k} steps",
        w.depth()
    );
    assert!(c.len() >= m * out_sp, "conv_direct: C too small");
    assert!(
        epi.bias.is_none_or(|b| b.len() >= m),
        "conv_direct: bias shorter than {m}"
    );
    assert!(
        epi.residual.is_none_or(|r| r.len() >= m * out_sp),
        "conv_direct: residual too short"
    );
    assert!(
        epi.col_bias.is_none(),
        "conv_direct: a column bias is for GEMMs"
    );
    if m == 0 || out_sp == 0 {
        return;
    }
    let plane = g.rows * g.cols;
    let [kh, kw] = g.kernel;
    let offs: Vec<usize> = (0..g.channels)
        .flat_map(|ch| {
            (0..kh).flat_map(move |i| {
                (0..kw).map(move |j| ch * plane + i * g.dilations[0] * g.cols + j * g.dilations[1])
            })
        })
        .collect();
    let panels = m.div_ceil(PANEL);
    let par = match threads {
        Threads::Serial => false,
        Threads::Auto => m * out_sp * k >= PAR_MIN_WORK,
        Threads::Always => true,
    };
    let workers = if par { rayon::current_num_threads() } else { 1 };
    // Units of work: a band of output rows for one panel of channels.
    let band = band_rows(oh, ow, panels, workers);
    let bands = oh.div_ceil(band);
    // Small weights stay in L2 while the bands pass (bands outer); large ones are streamed once,
    // one panel at a time (panels outer).
    let panels_outer = m * k * 4 > 1 << 20;
    let units = panels * bands;
    let unit = |u: usize| {
        if panels_outer {
            (u / bands, u % bands)
        } else {
            (u % panels, u / panels)
        }
    };
    let out = Out(c.as_mut_ptr().cast::<f32>());
    let run = |u0: usize, u1: usize| {
        let mut tot = Vec::new();
        for u in u0..u1 {
            let (q, b) = unit(u);
            let rows = (b * band, ((b + 1) * band).min(oh));
            // SAFETY: unit (q, b) writes only channels q·32.. and rows `rows` of C (sized above),
            // which no other unit writes; the reads were checked by `g.check`.
            unsafe { band_of(w, g, &offs, q, rows, out, epi, &mut tot) };
        }
    };
    let parts = workers.min(units);
    if parts < 2 {
        run(0, units);
    } else {
        let per = units.div_ceil(parts);
        (0..units.div_ceil(per))
            .into_par_iter()
            .for_each(|t| run(t * per, ((t + 1) * per).min(units)));
    }
}

/// Output rows per unit of work (a band of rows for one panel of 32 channels), for `workers`
/// threads that take the units in equal runs.
///
/// A band of at least 64 outputs per channel (`base` rows) lets the epilogue run over rows of some
/// length and a block's weights, read into L1 once, serve several tiles. But with few panels, bands
/// of `base` rows may not divide among the threads: densenet121's 128 → 32 3×3 convolutions at 14²
/// (one panel) were three bands of 5, 5 and 4 rows, ten rows on one thread and four on the other.
/// So the band is the one that gives the busiest thread the fewest rows (`ceil(units / workers) ·
/// band`), of at least `base / 2` rows; among equals the smallest from `base` up, else the largest
/// below it.
fn band_rows(oh: usize, ow: usize, panels: usize, workers: usize) -> usize {
    let base = 64usize.div_ceil(ow).clamp(1, oh);
    if workers < 2 {
        return base;
    }
    let load = |b: usize| (panels * oh.div_ceil(b)).div_ceil(workers) * b;
    let least = (base.div_ceil(2)..=oh).map(load).min().unwrap_or(base);
    (base..=oh)
        .find(|&b| load(b) == least)
        .or_else(|| (base.div_ceil(2)..base).rev().find(|&b| load(b) == least))
        .unwrap_or(base)
}

/// The output pointer, shared by threads that write disjoint units.
#[derive(Clone, Copy)]
struct Out(*mut f32);
// SAFETY: the pointer is C's, mutably borrowed by `conv_direct` for the whole parallel loop, so it
// outlives every task; each task writes only the rows of the channels of its own units, so moving
// it to a worker thread lets no two threads write the same value.
unsafe impl Send for Out {}
// SAFETY: as for `Send`: the tasks sharing it write disjoint units of C and read only their own.
unsafe impl Sync for Out {}

/// Rows `r0..r1` of output channels `q·32..` (those below `w.cols()`): tiles, then the epilogue.
///
/// Each block of steps meets every tile of the band before the next block is read: the block's
/// weights (at most 192 steps of 32, 24 KiB) are read from memory once and stay in L1 while the
/// tiles pass. Tile by tile over the whole depth (the order before), the first tile read the whole
/// panel from memory with nothing to overlap it: resnet50's 512-channel 3×3 convolution took
/// 1.18 ms with its 9.4 MB of weights in cache and 1.64 ms with them in memory. Each tile keeps its
/// running total in `tot` between blocks; every output's sum is the same, in the same order.
///
/// # Safety
/// `out` holds `w.cols()` planes of `oh·ow` values, of which no one else writes these rows of these
/// channels; `g` was checked; AVX-512F is present.
#[allow(clippy::too_many_arguments)]
unsafe fn band_of(
    w: &PackedB,
    g: &DirectConv,
    offs: &[usize],
    q: usize,
    (r0, r1): (usize, usize),
    out: Out,
    epi: &Epilogue,
    tot: &mut Vec<f32>,
) {
    let [oh, ow] = g.outs;
    let out_sp = oh * ow;
    let channels = PANEL.min(w.cols() - q * PANEL);
    let panel = w.panel(q, 0).as_ptr();
    let per_row = ow.div_ceil(MAX_R);
    let r = ow.div_ceil(per_row);
    // The band's tiles: (row, first column, pixels). Rows of at most MAX_R / 2 go two to a tile
    // (row y's pixels, then row y + 1's: consecutive in the output plane), so that a 7-wide row
    // fills all of the tile's accumulators instead of half.
    let tiles: Vec<(usize, usize, usize)> = if 2 * ow <= MAX_R {
        (r0..r1)
            .step_by(2)
            .map(|y| (y, 0, if y + 1 < r1 { 2 * ow } else { ow }))
            .collect()
    } else {
        (r0..r1)
            .flat_map(|y| (0..per_row).map(move |t| (y, t * r, r.min(ow - t * r))))
            .filter(|&(_, _, n)| n > 0)
            .collect()
    };
    // Between a two-row tile's first row and its second, in the input.
    let row_step = g.strides[0] * g.cols;
    tot.resize(tiles.len() * MAX_R * PANEL, 0.0);
    let k = offs.len();
    let kstep = k_step(k);
    for p0 in (0..k).step_by(kstep) {
        let kc = kstep.min(k - p0);
        // The next block's weights, a share in each tile (into L2, spread over its steps), so that
        // they arrive from memory while this block's tiles run.
        let (next, lines) = if p0 + kc < k {
            let lines = kstep.min(k - p0 - kc) * PANEL * 4 / 64;
            (panel.wrapping_add((p0 + kc) * PANEL), lines)
        } else {
            (panel, 0)
        };
        let share = |t: usize| t * lines / tiles.len();
        for (t, &(y, x0, n)) in tiles.iter().enumerate() {
            let pf = Prefetch {
                at: next.wrapping_add(share(t) * 16),
                lines: share(t + 1) - share(t),
            };
            let src =
                g.x.as_ptr()
                    .wrapping_add(y * g.strides[0] * g.cols + x0 * g.strides[1]);
            let tot = &mut tot[t * MAX_R * PANEL..(t + 1) * MAX_R * PANEL];
            // SAFETY: the reads lie in `g.x` (checked), the tile is `n <= MAX_R` pixels, steps
            // p0..p0 + kc of the panel are inside it and `tot` holds the tile.
            unsafe {
                tile(
                    (n, (n > ow).then_some(row_step)),
                    g.strides[1],
                    &offs[p0..p0 + kc],
                    panel.add(p0 * PANEL),
                    src,
                    tot.try_into().expect("a tile's total"),
                    p0 == 0,
                    pf,
                )
            };
        }
    }
    for (t, &(y, x0, n)) in tiles.iter().enumerate() {
        let tot = tot[t * MAX_R * PANEL..(t + 1) * MAX_R * PANEL]
            .try_into()
            .expect("a tile's total");
        let dst = out.0.wrapping_add(q * PANEL * out_sp + y * ow + x0);
        // SAFETY: for each channel v < channels, `dst + v·out_sp` is row y, columns x0..x0+n of
        // channel q·32 + v: inside C and this unit's (the caller's contract).
        unsafe { store_tile(tot, channels, n, dst, out_sp) };
    }
    if epi.is_identity() {
        return;
    }
    for v in 0..channels {
        let i = q * PANEL + v;
        let j0 = r0 * ow;
        // SAFETY: rows r0..r1 of channel i, written above (the caller's contract).
        let dst =
            unsafe { std::slice::from_raw_parts_mut(out.0.add(i * out_sp + j0), (r1 - r0) * ow) };
        epi.apply(dst, i, j0, out_sp);
    }
}

/// Cache lines a tile asks for into L2 while it runs, one every few steps: `lines` lines from `at`
/// on. Prefetches are hints that never fault, wherever they point.
#[derive(Clone, Copy)]
struct Prefetch {
    at: *const f32,
    lines: usize,
}

/// The tile total (`tot[r·32 + v]`, pixel `r < n`, channel `v < channels`) to the output planes:
/// channel `v`'s `n` pixels to `dst + v·plane`. Each half of 16 channels is transposed in
/// registers (16 pixel rows, the two past [`MAX_R`] zero, into 16 channel rows: 64 shuffles), where
/// a gather per channel (32 a tile) had taken some 400 cycles: 10% of a tile of 144 steps. On the
/// AMD EPYC of stop 33 (`gemm_rate`, alternating binaries), squeezenet's 16 → 64 3×3 at 55² went
/// 84–97 → 97–104 GFLOP/s on one thread and 161 → 184–203 on two.
///
/// # Safety
/// `dst + v·plane` is valid for `n` writes for each `v < channels`; `n <= MAX_R`, `channels <=
/// PANEL`; AVX-512F is present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn store_tile(
    tot: &[f32; MAX_R * PANEL],
    channels: usize,
    n: usize,
    dst: *mut f32,
    plane: usize,
) {
    use std::arch::x86_64::*;
    let mask = crate::lanes::first(n);
    for h in 0..channels.div_ceil(16) {
        let mut r = [_mm512_setzero_ps(); 16];
        for (i, r) in r.iter_mut().enumerate().take(n) {
            // SAFETY: row i < n <= MAX_R of `tot`, channels h·16.. h·16 + 16 <= PANEL.
            *r = unsafe { _mm512_loadu_ps(tot.as_ptr().add(i * PANEL + h * 16)) };
        }
        let cols = transpose16(r);
        for (c, col) in cols.iter().enumerate().take(channels - h * 16) {
            // SAFETY: channel h·16 + c < channels: the caller's contract.
            unsafe { _mm512_mask_storeu_ps(dst.add((h * 16 + c) * plane), mask, *col) };
        }
    }
}

/// `out[j][i] = r[i][j]` for a 16×16 block: pairs of rows interleaved by singles, then by pairs
/// within each 128-bit lane (`b[4k + m]`'s lane `L` is rows `4k..4k + 4` at column `4L + m`),
/// then the lanes gathered across: column `4L + m` is lane `L` of `b[m]`, `b[4 + m]`, `b[8 + m]`,
/// `b[12 + m]`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn transpose16(r: [std::arch::x86_64::__m512; 16]) -> [std::arch::x86_64::__m512; 16] {
    use std::arch::x86_64::*;
    let a: [__m512; 16] = std::array::from_fn(|i| {
        let (x, y) = (r[i & !1], r[i | 1]);
        if i & 1 == 0 {
            _mm512_unpacklo_ps(x, y)
        } else {
            _mm512_unpackhi_ps(x, y)
        }
    });
    let b: [__m512; 16] = std::array::from_fn(|i| {
        // b[4k + m]: m = 0, 1 from a[4k], a[4k + 2]; m = 2, 3 from a[4k + 1], a[4k + 3].
        let (k, m) = (i / 4, i % 4);
        let (x, y) = (
            _mm512_castps_pd(a[4 * k + m / 2]),
            _mm512_castps_pd(a[4 * k + 2 + m / 2]),
        );
        _mm512_castpd_ps(if m % 2 == 0 {
            _mm512_unpacklo_pd(x, y)
        } else {
            _mm512_unpackhi_pd(x, y)
        })
    });
    let mut out = [_mm512_setzero_ps(); 16];
    for m in 0..4 {
        let even_lo = _mm512_shuffle_f32x4::<0x88>(b[m], b[4 + m]);
        let even_hi = _mm512_shuffle_f32x4::<0x88>(b[8 + m], b[12 + m]);
        let odd_lo = _mm512_shuffle_f32x4::<0xDD>(b[m], b[4 + m]);
        let odd_hi = _mm512_shuffle_f32x4::<0xDD>(b[8 + m], b[12 + m]);
        out[m] = _mm512_shuffle_f32x4::<0x88>(even_lo, even_hi);
        out[8 + m] = _mm512_shuffle_f32x4::<0xDD>(even_lo, even_hi);
        out[4 + m] = _mm512_shuffle_f32x4::<0x88>(odd_lo, odd_hi);
        out[12 + m] = _mm512_shuffle_f32x4::<0xDD>(odd_lo, odd_hi);
    }
    out
}

/// Elsewhere the direct path is never [`DirectConv::available`].
///
/// # Safety
/// Never to be called (it panics): the x86_64 form's contract, for the signature's sake.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn store_tile(_: &[f32; MAX_R * PANEL], _: usize, _: usize, _: *mut f32, _: usize) {
    unreachable!("conv_direct without AVX-512")
}

/// Elsewhere the direct path is never [`DirectConv::available`].
///
/// # Safety
/// Never to be called (it panics): the x86_64 form's contract, for the signature's sake.
#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::too_many_arguments)]
unsafe fn tile(
    _: (usize, Option<usize>),
    _: usize,
    _: &[usize],
    _: *const f32,
    _: *const f32,
    _: &mut [f32; MAX_R * PANEL],
    _: bool,
    _: Prefetch,
) {
    unreachable!("conv_direct without AVX-512")
}

/// One block of steps (`offs.len()` of them, at most [`k_step`]'s) of the tile of `n` pixels
/// (`n <= MAX_R`) at column stride `s` (1 or 2), in one row, or with `two = Some(row_step)` half
/// in one row and half in the next: its sum stored to `tot` (`first`) or added to it.
///
/// # Safety
/// AVX-512F is present; for every `p` and pixel `r < n`, `src + offs[p]` plus the pixel's offset
/// (`r·s` in the first row, `row_step + (r − n/2)·s` in a two-row tile's second) lies in the input;
/// `panel` holds `offs.len()` steps of 32 weights.
#[cfg(target_arch = "x86_64")]
// The tile's geometry, its source, weights and running total are all separate inputs of one hot call.
#[allow(clippy::too_many_arguments)]
unsafe fn tile(
    (n, two): (usize, Option<usize>),
    s: usize,
    offs: &[usize],
    panel: *const f32,
    src: *const f32,
    tot: &mut [f32; MAX_R * PANEL],
    first: bool,
    pf: Prefetch,
) {
    macro_rules! by_width {
        ($($r:literal)*) => {
            match (n, s) {
                $(($r, 1) => tile_r::<$r, 1, $r>(offs, panel, src, 0, tot, first, pf),
                  ($r, 2) => tile_r::<$r, 2, $r>(offs, panel, src, 0, tot, first, pf),)*
                _ => unreachable!("tile of {n} pixels at stride {s}"),
            }
        };
    }
    macro_rules! two_rows {
        ($step:expr, $($h:literal)*) => {
            match (n, s) {
                $((n, 1) if n == 2 * $h => tile_r::<{ 2 * $h }, 1, $h>(offs, panel, src, $step, tot, first, pf),
                  (n, 2) if n == 2 * $h => tile_r::<{ 2 * $h }, 2, $h>(offs, panel, src, $step, tot, first, pf),)*
                _ => unreachable!("two-row tile of {n} pixels at stride {s}"),
            }
        };
    }
    // SAFETY: the caller's contract.
    unsafe {
        match two {
            None => by_width!(1 2 3 4 5 6 7 8 9 10 11 12 13 14),
            Some(step) => two_rows!(step, 1 2 3 4 5 6 7),
        }
    }
}

/// [`tile`] for `R` pixels at column stride `S`, the first `H` of one row and the rest (when
/// `H < R`) of the next, `row_step` further in the input: `tot[r·32 + lane]` = the block's sum for
/// pixel `r` and channel `lane` (from zero, one fused multiply-add per step), or the total so far
/// plus it, as the GEMM sums its blocks of [`k_step`] steps.
///
/// # Safety
/// [`tile`]'s contract with `n = R`, `s = S` and the second row starting at pixel `H`: AVX-512F is
/// present, every `src + offs[p] + at` read (`at` the pixel's offset, `row_step` added from pixel
/// `H` on) lies in the input, and `panel` holds `offs.len()` steps of 32 weights.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile_r<const R: usize, const S: usize, const H: usize>(
    offs: &[usize],
    panel: *const f32,
    src: *const f32,
    row_step: usize,
    tot: &mut [f32; MAX_R * PANEL],
    first: bool,
    pf: Prefetch,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    // One prefetch every `every` steps until the tile's lines are asked for: spread, so that they
    // never wait for each other's fill buffers (asked all at once before the tile, they stalled
    // it: 4.6% of resnet50's samples).
    let every = (offs.len() / pf.lines.max(1)).max(1);
    let (mut due, mut line) = (0, 0);
    // SAFETY: the caller's contract: every read lies in the input or the panel.
    unsafe {
        for (p, &off) in offs.iter().enumerate() {
            if p == due && line < pf.lines {
                _mm_prefetch::<_MM_HINT_T1>(pf.at.wrapping_add(line * 16).cast::<i8>());
                line += 1;
                due += every;
            }
            let x = src.add(off);
            let wp = panel.add(p * PANEL);
            let (b0, b1) = (_mm512_loadu_ps(wp), _mm512_loadu_ps(wp.add(16)));
            for (r, a) in acc.iter_mut().enumerate() {
                // Pixels from H on are the next row's (`row_step` further in the input).
                let at = if r < H { r * S } else { row_step + (r - H) * S };
                let xv = _mm512_set1_ps(*x.add(at));
                a[0] = _mm512_fmadd_ps(xv, b0, a[0]);
                a[1] = _mm512_fmadd_ps(xv, b1, a[1]);
            }
        }
        for (r, a) in acc.iter().enumerate() {
            for (h, v) in a.iter().enumerate() {
                let t = tot.as_mut_ptr().add(r * PANEL + h * 16);
                let sum = if first {
                    *v
                } else {
                    _mm512_add_ps(_mm512_loadu_ps(t), *v)
                };
                _mm512_storeu_ps(t, sum);
            }
        }
    }
}

#[cfg(test)]
mod tests;
