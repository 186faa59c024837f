//! One plane of a direct (depthwise) convolution in f32: `out += Σ_taps w[k]·src[…]`, tap by tap in
//! kernel order, each product rounded and then added (no fused multiply-add), so that every output
//! has the bits of the plain definition whatever the vector width.
//!
//! The runtime describes the convolution's geometry once as a list of [`Tap`]s, each reading its
//! source linearly: output `(od, oh, j)` reads `src[base + od·step₀ + oh·step₁ + j]` where the tap
//! reaches that output. A strided convolution passes its input split into stride phases, so that
//! the columns of a tap are still consecutive.
//!
//! Every output starts from one value (the channel's bias) and ends with an activation, so the plane
//! is written once and never read back: on AVX-512 a row of outputs is held in registers from its
//! starting value over all the taps that reach it (four vectors of 16 at a time), activated there
//! (Relu, Clip, LeakyRelu, Sigmoid, SiLU; HardSwish over the plane once it is stored) and stored once. The columns a
//! tap does not reach are masked out of both its load and its add, so a padded edge costs no scalar
//! tail. Elsewhere the loop runs tap by tap over the row (under AVX2 where the CPU has it). The
//! Sigmoid and SiLU held in registers compute `exp_f32` there with its operations in its order. A
//! plane padded to its own size with rows under 32 runs as one flat row.

use crate::Activation;
use crate::lanes::first;
use std::mem::MaybeUninit;

/// One tap of the kernel and the outputs it reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tap {
    /// Index of the tap's weight in a plane's filter.
    pub k: usize,
    /// The output ranges `[lo, hi)` along the two outer dims that the tap reaches.
    pub rows: [(usize, usize); 2],
    /// The output columns `[c0, c1)` that it reaches.
    pub cols: (usize, usize),
    /// Output `(od, oh, j)` reads `src[base + od·step[0] + oh·step[1] + j]`.
    pub base: isize,
    pub step: [isize; 2],
}

impl Tap {
    fn reaches(&self, od: usize, oh: usize) -> bool {
        let [(h0, h1), (r0, r1)] = self.rows;
        od >= h0 && od < h1 && oh >= r0 && oh < r1 && self.cols.0 < self.cols.1
    }

    /// The source index of output column 0 of row `(od, oh)` (outside `src` where the tap does not
    /// reach column 0).
    fn row_base(&self, od: usize, oh: usize) -> isize {
        self.base + od as isize * self.step[0] + oh as isize * self.step[1]
    }
}

/// Lanes per AVX-512 vector.
const W: usize = 16;

/// Rows narrower than this are run as one flat row where the layout allows (see [`Lanes`]).
const FLAT_BELOW: usize = 32;

/// The taps of one convolution, checked against the source size, with the lanes each reaches.
#[derive(Debug, Clone)]
pub struct Taps {
    taps: Vec<Tap>,
    outs: [usize; 3],
    src_len: usize,
    ksz: usize,
    /// The taps that reach output row `r = od·o1 + oh`, in order:
    /// `reach[row_start[r]..row_start[r + 1]]`, each as its index and [`Tap::row_base`].
    reach: Vec<(usize, isize)>,
    row_start: Vec<usize>,
    /// The rows the vector kernel runs.
    lanes: Lanes,
}

/// The rows of outputs the vector kernel holds in registers, and the lanes each tap reaches in
/// each 16-lane chunk of them.
///
/// Normally these are the output rows. When every tap steps through the source by exactly one
/// output row per row (a stride-1 convolution padded to its own size), output `f` of the whole
/// plane, counted flat, reads `src[base + f]` for every tap, so the plane runs as one row: a row
/// of 7 then fills 49 of 64 lanes instead of 7 of 16, and each tap's loop runs once per plane
/// instead of once per row. The sums per output are the same, in the same tap order.
#[derive(Debug, Clone)]
struct Lanes {
    /// Outputs per row.
    width: usize,
    /// `masks[t·chunks + c]`: the lanes of chunk `c` of a row that tap `t` reaches (the same for
    /// every row it reaches).
    masks: Vec<u16>,
    /// The flat row's taps (each as its index and base), in order; `None` where the rows are the
    /// output rows, whose lists are `Taps::reach`.
    flat: Option<Vec<(usize, isize)>>,
}

impl Lanes {
    /// The rows, and the taps that reach row `r` as `reach(taps, r)`.
    fn rows(&self, taps: &Taps) -> usize {
        match self.flat {
            Some(_) => 1,
            None => taps.row_start.len() - 1,
        }
    }

    fn reach<'a>(&'a self, taps: &'a Taps, r: usize) -> &'a [(usize, isize)] {
        match &self.flat {
            Some(f) => f,
            None => &taps.reach[taps.row_start[r]..taps.row_start[r + 1]],
        }
    }
}

impl Taps {
    /// Taps over outputs of shape `outs` reading a source of `src_len` values, with filters of
    /// `ksz` weights.
    ///
    /// # Panics
    /// When a tap reaches an output outside `outs`, reads outside `src_len` values, or names a
    /// weight past `ksz` (a caller's error).
    pub fn new(taps: Vec<Tap>, outs: [usize; 3], src_len: usize, ksz: usize) -> Taps {
        for tap in &taps {
            let [(h0, h1), (r0, r1)] = tap.rows;
            let (c0, c1) = tap.cols;
            assert!(
                h1 <= outs[0] && r1 <= outs[1] && c1 <= outs[2] && tap.k < ksz,
                "depthwise: tap {tap:?} outside outputs {outs:?} or a filter of {ksz}"
            );
            if h0 < h1 && r0 < r1 && c0 < c1 {
                // The index is linear in each of od, oh and j, so its extremes are at the corners.
                for od in [h0, h1 - 1] {
                    for oh in [r0, r1 - 1] {
                        for j in [c0, c1 - 1] {
                            let i = tap.row_base(od, oh) + j as isize;
                            assert!(
                                i >= 0 && (i as usize) < src_len,
                                "depthwise: tap {tap:?} reads {i} of {src_len} values"
                            );
                        }
                    }
                }
            }
        }
        let mut reach = Vec::new();
        let mut row_start = vec![0];
        for od in 0..outs[0] {
            for oh in 0..outs[1] {
                for (t, tap) in taps.iter().enumerate() {
                    if tap.reaches(od, oh) {
                        reach.push((t, tap.row_base(od, oh)));
                    }
                }
                row_start.push(reach.len());
            }
        }
        let [o0, o1, o2] = outs;
        let flat = o2 < FLAT_BELOW
            && taps
                .iter()
                .all(|t| t.step[1] == o2 as isize && (o0 == 1 || t.step[0] == (o1 * o2) as isize));
        let lanes = Lanes::new(&taps, outs, flat);
        Taps {
            taps,
            outs,
            src_len,
            ksz,
            reach,
            row_start,
            lanes,
        }
    }
}

impl Lanes {
    /// The output rows of `taps`, or the plane as one flat row: a caller's choice, valid only
    /// where every tap steps one output row per row (`Taps::new`).
    fn new(taps: &[Tap], [o0, o1, o2]: [usize; 3], flat: bool) -> Lanes {
        if flat {
            let width = o0 * o1 * o2;
            let chunks = width.div_ceil(W);
            let mut masks = vec![0u16; taps.len() * chunks];
            for (t, tap) in taps.iter().enumerate() {
                let [(h0, h1), (r0, r1)] = tap.rows;
                let (c0, c1) = tap.cols;
                let m = &mut masks[t * chunks..(t + 1) * chunks];
                for od in h0..h1 {
                    for oh in r0..r1 {
                        let f = (od * o1 + oh) * o2;
                        (f + c0..f + c1).for_each(|i| m[i / W] |= 1 << (i % W));
                    }
                }
            }
            let reach: Vec<_> = (0..taps.len())
                .filter(|&t| masks[t * chunks..(t + 1) * chunks].iter().any(|&m| m != 0))
                .map(|t| (t, taps[t].base))
                .collect();
            Lanes {
                width,
                masks,
                flat: Some(reach),
            }
        } else {
            let chunks = o2.div_ceil(W);
            let mut masks = vec![0u16; taps.len() * chunks];
            for (t, tap) in taps.iter().enumerate() {
                let (c0, c1) = tap.cols;
                for c in 0..chunks {
                    let lanes = |n: usize| n.saturating_sub(c * W).min(W);
                    masks[t * chunks + c] = first(lanes(c1)) & !first(lanes(c0));
                }
            }
            Lanes {
                width: o2,
                masks,
                flat: None,
            }
        }
    }
}

/// `out[(od·o1 + oh)·o2 + j] = act(start + Σ w[tap.k]·src[…])`, the taps summed in order over the
/// outputs each tap reaches, each product rounded and then added. Every output is written (one no
/// tap reaches is `act(start)`) and none is read.
///
/// # Panics
/// When `src`, `w` or `out` do not have the sizes the taps were made for (a caller's error).
pub fn plane(
    taps: &Taps,
    src: &[f32],
    w: &[f32],
    start: f32,
    act: Activation,
    out: &mut [MaybeUninit<f32>],
) {
    let [o0, o1, o2] = taps.outs;
    assert!(
        src.len() >= taps.src_len && w.len() >= taps.ksz && out.len() == o0 * o1 * o2,
        "depthwise: {} source values, {} weights and {} outputs for taps over {:?}",
        src.len(),
        w.len(),
        out.len(),
        taps.outs
    );
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2")]
        fn avx2(taps: &Taps, src: &[f32], w: &[f32], act: Activation, out: &mut [f32]) {
            plain(taps, src, w, act, out)
        }
        match crate::Isa::detected() {
            crate::Isa::Avx512 => {
                // SAFETY: AVX-512F was detected; the sizes were checked above and the taps' reads
                // by `Taps::new`; every output is written before it is read as initialised.
                return unsafe { avx512::plane::<false>(taps, src, w, start, act, out) };
            }
            // SAFETY: AVX2 was detected.
            crate::Isa::Avx2 => return unsafe { avx2(taps, src, w, act, fill(out, start)) },
            crate::Isa::Portable => {}
        }
    }
    plain(taps, src, w, act, fill(out, start));
}

/// The columns of `row` split by their index mod `s`: column `j·s + p` goes to
/// `out[p·stride + j]`. A strided plane's source, laid out so that each tap reads contiguous runs.
///
/// # Panics
/// When `out` cannot hold the phases (a caller's error).
pub fn split_columns(row: &[f32], s: usize, out: &mut [f32], stride: usize) {
    let n = row.len();
    if n == 0 {
        return;
    }
    let per = n.div_ceil(s);
    assert!(
        s >= 1 && stride >= per && (s.min(n) - 1) * stride + per <= out.len(),
        "split_columns: {} values cannot hold {s} phases of {per} at stride {stride}",
        out.len()
    );
    #[cfg(target_arch = "x86_64")]
    if s == 2 && crate::Isa::detected() == crate::Isa::Avx512 {
        // The evens from out[0], the odds from out[stride] (stride >= ceil(n/2), checked above).
        let (evens, rest) = out.split_at_mut(stride);
        // SAFETY: AVX-512F was detected; the lengths are those `deinterleave` takes.
        return unsafe { crate::lanes::deinterleave(row, &mut evens[..per], &mut rest[..n / 2]) };
    }
    for p in 0..s.min(n) {
        for (d, &v) in out[p * stride..].iter_mut().zip(row[p..].iter().step_by(s)) {
            *d = v;
        }
    }
}

/// The max of each window over the taps in order, by [`take`]'s rule (a NaN if any, else the first
/// maximal tap): `out[(od·o1 + oh)·o2 + j] = take(…take(-∞, tap₀), tap₁…)`, NaN payloads aside (the
/// AVX-512 path may keep a later NaN of the window). An output no tap reaches is -∞. Every output
/// is written and none is read.
///
/// # Panics
/// When `src` or `out` do not have the sizes the taps were made for (a caller's error).
pub fn plane_max(taps: &Taps, src: &[f32], out: &mut [MaybeUninit<f32>]) {
    let [o0, o1, o2] = taps.outs;
    assert!(
        src.len() >= taps.src_len && out.len() == o0 * o1 * o2,
        "depthwise: {} source values and {} outputs for taps over {:?}",
        src.len(),
        out.len(),
        taps.outs
    );
    #[cfg(target_arch = "x86_64")]
    if crate::Isa::detected() == crate::Isa::Avx512 {
        // SAFETY: AVX-512F was detected; the sizes were checked above and the taps' reads by
        // `Taps::new`; the max path reads no weight.
        return unsafe {
            avx512::plane::<true>(taps, src, &[], f32::NEG_INFINITY, Activation::None, out)
        };
    }
    by_taps(taps, src, fill(out, f32::NEG_INFINITY), |d, _, v| {
        take(d, v)
    });
}

/// `best` after seeing `v` by the window rule of MaxPool: an ordered best is replaced by a greater
/// tap or by a NaN; a NaN best stays.
#[inline(always)]
pub fn take(best: f32, v: f32) -> f32 {
    #[allow(clippy::eq_op)]
    let replace = (best == best) & ((v > best) | (v != v));
    if replace { v } else { best }
}

/// `out` with every value set to `start`.
fn fill(out: &mut [MaybeUninit<f32>], start: f32) -> &mut [f32] {
    for o in out.iter_mut() {
        o.write(start);
    }
    // SAFETY: every value was written just above; f32 and MaybeUninit<f32> share a layout.
    unsafe { &mut *(out as *mut [MaybeUninit<f32>] as *mut [f32]) }
}

/// Tap by tap over each row of `out` (which holds the starting values), then the activation: the
/// definition's order, any target (compiled again with AVX2 where that is the widest this CPU has;
/// the same operations, the same bits).
#[inline(always)]
fn plain(taps: &Taps, src: &[f32], w: &[f32], act: Activation, out: &mut [f32]) {
    by_taps(taps, src, out, |d, k, v| d + w[k] * v);
    if act != Activation::None {
        act.apply(out, None);
    }
}

/// `out[…] = f(out[…], tap.k, src[…])` for every tap in order over each output row it reaches:
/// the definition's walk, which the vector kernels must equal.
#[inline(always)]
fn by_taps(taps: &Taps, src: &[f32], out: &mut [f32], f: impl Fn(f32, usize, f32) -> f32) {
    for (r, row) in out.chunks_exact_mut(taps.outs[2].max(1)).enumerate() {
        for &(t, base) in &taps.reach[taps.row_start[r]..taps.row_start[r + 1]] {
            let (c0, c1) = taps.taps[t].cols;
            let (s0, k) = ((base + c0 as isize) as usize, taps.taps[t].k);
            for (d, &v) in row[c0..c1].iter_mut().zip(&src[s0..s0 + (c1 - c0)]) {
                *d = f(*d, k, v);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{Activation, MaybeUninit, Taps, W, first};
    use crate::activation::lanes::Lanes;
    use std::arch::x86_64::*;

    /// # Safety
    /// AVX-512F is available; `src`, `w` and `out` have the sizes checked by `super::plane`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn plane<const MAX: bool>(
        taps: &Taps,
        src: &[f32],
        w: &[f32],
        start: f32,
        act: Activation,
        out: &mut [MaybeUninit<f32>],
    ) {
        let lanes = &taps.lanes;
        let o2 = lanes.width;
        let chunks = o2.div_ceil(W);
        // Relu, Clip, LeakyRelu, Sigmoid and SiLU are applied in registers; HardSwish over the plane
        // once it is stored (rows can be a few values long: one pass costs less than a call each).
        // SAFETY: AVX-512F is enabled here.
        let lanes_act = unsafe { Lanes::new(act) };
        let in_regs = lanes_act.is_some();
        // SAFETY: as above.
        let v = unsafe { Vectors::new(start, lanes_act) };
        for r in 0..lanes.rows(taps) {
            let reach = lanes.reach(taps, r);
            let row = out[r * o2..].as_mut_ptr().cast::<f32>();
            let mut c = 0;
            // SAFETY: the row holds o2 outputs; each chunk's lanes are masked to them, and each
            // tap's to the columns it reaches, whose reads `Taps::new` checked.
            unsafe {
                while c + 4 <= chunks {
                    chunk_run::<4, MAX>(taps, reach, w, src, row, c, &v);
                    c += 4;
                }
                match chunks - c {
                    3 => chunk_run::<3, MAX>(taps, reach, w, src, row, c, &v),
                    2 => chunk_run::<2, MAX>(taps, reach, w, src, row, c, &v),
                    1 => chunk_run::<1, MAX>(taps, reach, w, src, row, c, &v),
                    _ => {}
                }
            }
        }
        if !in_regs {
            // SAFETY: every value of the plane was stored above.
            act.apply(
                unsafe { &mut *(out as *mut [MaybeUninit<f32>] as *mut [f32]) },
                None,
            );
        }
    }

    /// The starting value and the activation in registers, broadcast once per plane.
    struct Vectors {
        start: __m512,
        act: Option<Lanes>,
    }

    impl Vectors {
        /// # Safety
        /// AVX-512F is available.
        #[inline(always)]
        unsafe fn new(start: f32, act: Option<Lanes>) -> Vectors {
            Vectors {
                // SAFETY: the intrinsic only needs AVX-512F, which the caller promises.
                start: unsafe { _mm512_set1_ps(start) },
                act,
            }
        }

        /// # Safety
        /// AVX-512F is available.
        #[inline(always)]
        unsafe fn activate(&self, x: __m512) -> __m512 {
            match &self.act {
                // SAFETY: the caller's promise.
                Some(l) => unsafe { l.apply(x) },
                None => x,
            }
        }
    }

    /// Chunks `c..c + N` of one row: started from the starting value, summed over the taps that
    /// reach the row in registers, activated, stored.
    ///
    /// # Safety
    /// As `plane`; `row` points at a row of `taps.lanes.width` outputs, `c + N` is at most its
    /// chunk count and `reach` is that row's list.
    #[inline(always)]
    unsafe fn chunk_run<const N: usize, const MAX: bool>(
        taps: &Taps,
        reach: &[(usize, isize)],
        w: &[f32],
        src: &[f32],
        row: *mut f32,
        c: usize,
        v: &Vectors,
    ) {
        let o2 = taps.lanes.width;
        let chunks = o2.div_ceil(W);
        let keep: [u16; N] = std::array::from_fn(|i| first(o2 - (c + i) * W));
        // SAFETY: lanes outside the row are masked off (neither read, written nor faulted on);
        // the enabled source lanes are the columns each tap reaches (checked by `Taps::new`).
        // Source addresses are formed with `wrapping_offset` and only read through masks.
        unsafe {
            let mut acc: [__m512; N] = [v.start; N];
            for &(t, base) in reach {
                let masks = taps.lanes.masks.as_ptr().add(t * chunks + c);
                let at = src.as_ptr().wrapping_offset(base + (c * W) as isize);
                if MAX {
                    // The window rule of `take`. `vmaxps x, a` is `x > a ? x : a`, and `a` where
                    // either is NaN: a greater tap replaces the best, an equal one (a zero of the
                    // other sign too) does not, a NaN best stays. Only a NaN tap is left, which
                    // replaces an ordered best; where the best is NaN too, the NaN that stays
                    // may be the later one (a NaN's payload is not kept, as elsewhere).
                    // Three operations a tap where comparing both ways took seven.
                    for (i, a) in acc.iter_mut().enumerate() {
                        let m = *masks.add(i);
                        let x = _mm512_maskz_loadu_ps(m, at.wrapping_add(i * W));
                        let best = _mm512_mask_max_ps(*a, m, x, *a);
                        let nan = _mm512_mask_cmp_ps_mask::<_CMP_UNORD_Q>(m, x, x);
                        *a = _mm512_mask_mov_ps(best, nan, x);
                    }
                    continue;
                }
                let wv = _mm512_set1_ps(*w.get_unchecked(taps.taps.get_unchecked(t).k));
                for (i, a) in acc.iter_mut().enumerate() {
                    let m = *masks.add(i);
                    let x = _mm512_maskz_loadu_ps(m, at.wrapping_add(i * W));
                    *a = _mm512_mask_add_ps(*a, m, *a, _mm512_mul_ps(wv, x));
                }
            }
            for (i, a) in acc.iter().enumerate() {
                _mm512_mask_storeu_ps(row.add((c + i) * W), keep[i], v.activate(*a));
            }
        }
    }
}

#[cfg(test)]
mod tests;
