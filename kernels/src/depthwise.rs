//! One plane of a direct (depthwise) convolution in f32: `out += Σ_taps w[k]·src[…]`, tap by tap in
//! kernel order, each product rounded and then added (no fused multiply-add), so that every output
//! has the bits of the plain definition whatever the vector width.
//!
//! The runtime describes the convolution's geometry once as a list of [`Tap`]s, each reading its
//! source linearly: output `(od, oh, j)` reads `src[base + od·step₀ + oh·step₁ + j]` where the tap
//! reaches that output. A strided convolution passes its input split into stride phases, so that
//! the columns of a tap are still consecutive.
//!
//! On AVX-512 a row of outputs is held in registers over all the taps that reach it (four vectors
//! of 16 at a time) and stored once; the columns a tap does not reach are masked out of both its
//! load and its add, so a padded edge costs no scalar tail. Elsewhere the loop runs tap by tap over
//! the row.

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

/// The taps of one convolution, checked against the source size, with each tap's column masks.
#[derive(Debug, Clone)]
pub struct Taps {
    taps: Vec<Tap>,
    outs: [usize; 3],
    src_len: usize,
    ksz: usize,
    /// `masks[t·chunks + c]`: the lanes of 16-column chunk `c` that tap `t` reaches.
    masks: Vec<u16>,
    /// The taps that reach output row `r = od·o1 + oh`, in order:
    /// `reach[row_start[r]..row_start[r + 1]]`, each as its index and [`Tap::row_base`].
    reach: Vec<(usize, isize)>,
    row_start: Vec<usize>,
}

impl Taps {
    /// Taps over outputs of shape `outs` reading a source of `src_len` values, with filters of
    /// `ksz` weights.
    ///
    /// # Panics
    /// When a tap reaches an output outside `outs`, reads outside `src_len` values, or names a
    /// weight past `ksz` (a caller's error).
    pub fn new(taps: Vec<Tap>, outs: [usize; 3], src_len: usize, ksz: usize) -> Taps {
        let chunks = outs[2].div_ceil(W);
        let mut masks = vec![0u16; taps.len() * chunks];
        for (t, tap) in taps.iter().enumerate() {
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
            for c in 0..chunks {
                let lanes = |n: usize| n.saturating_sub(c * W).min(W);
                let (lo, hi) = (lanes(c0), lanes(c1));
                masks[t * chunks + c] = first(hi) & !first(lo);
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
        Taps {
            taps,
            outs,
            src_len,
            ksz,
            masks,
            reach,
            row_start,
        }
    }
}

/// The mask of the first `n` lanes, `n <= 16`.
fn first(n: usize) -> u16 {
    if n >= W { u16::MAX } else { (1u16 << n) - 1 }
}

/// `out[(od·o1 + oh)·o2 + j] += w[tap.k]·src[…]` for every tap in order, over the outputs each tap
/// reaches; `out` holds the starting values (a bias).
///
/// # Panics
/// When `src`, `w` or `out` do not have the sizes the taps were made for (a caller's error).
pub fn plane(taps: &Taps, src: &[f32], w: &[f32], out: &mut [f32]) {
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
        fn avx2(taps: &Taps, src: &[f32], w: &[f32], out: &mut [f32]) {
            plain(taps, src, w, out)
        }
        match crate::Isa::detected() {
            // SAFETY: AVX-512F was detected; the sizes were checked above and the taps' reads by
            // `Taps::new`.
            crate::Isa::Avx512 => return unsafe { avx512::plane(taps, src, w, out) },
            // SAFETY: AVX2 was detected.
            crate::Isa::Avx2 => return unsafe { avx2(taps, src, w, out) },
            crate::Isa::Portable => {}
        }
    }
    plain(taps, src, w, out);
}

/// Tap by tap over each row: the definition's order, any target (compiled again with AVX2 where
/// that is the widest this CPU has; the same operations, the same bits).
#[inline(always)]
fn plain(taps: &Taps, src: &[f32], w: &[f32], out: &mut [f32]) {
    let o2 = taps.outs[2];
    for (r, row) in out.chunks_exact_mut(o2.max(1)).enumerate() {
        for &(t, base) in &taps.reach[taps.row_start[r]..taps.row_start[r + 1]] {
            let (c0, c1) = taps.taps[t].cols;
            let s0 = (base + c0 as isize) as usize;
            let wv = w[taps.taps[t].k];
            for (d, &v) in row[c0..c1].iter_mut().zip(&src[s0..s0 + (c1 - c0)]) {
                *d = *d + wv * v;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{Taps, W, first};
    use std::arch::x86_64::*;

    /// # Safety
    /// AVX-512F is available; `src`, `w` and `out` have the sizes checked by `super::plane`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn plane(taps: &Taps, src: &[f32], w: &[f32], out: &mut [f32]) {
        let o2 = taps.outs[2];
        let chunks = o2.div_ceil(W);
        for r in 0..taps.row_start.len() - 1 {
            let reach = &taps.reach[taps.row_start[r]..taps.row_start[r + 1]];
            if reach.is_empty() {
                continue;
            }
            let row = out[r * o2..].as_mut_ptr();
            let mut c = 0;
            // SAFETY: the row holds o2 outputs; each chunk's lanes are masked to them, and each
            // tap's to the columns it reaches, whose reads `Taps::new` checked.
            unsafe {
                while c + 4 <= chunks {
                    chunk_run::<4>(taps, reach, w, src, row, c);
                    c += 4;
                }
                match chunks - c {
                    3 => chunk_run::<3>(taps, reach, w, src, row, c),
                    2 => chunk_run::<2>(taps, reach, w, src, row, c),
                    1 => chunk_run::<1>(taps, reach, w, src, row, c),
                    _ => {}
                }
            }
        }
    }

    /// Chunks `c..c + N` of one row: loaded, summed over the taps that reach the row in
    /// registers, stored.
    ///
    /// # Safety
    /// As `plane`; `row` points at a row of `o2` outputs, `c + N` is at most its chunk count and
    /// `reach` is that row's list.
    #[inline(always)]
    unsafe fn chunk_run<const N: usize>(
        taps: &Taps,
        reach: &[(usize, isize)],
        w: &[f32],
        src: &[f32],
        row: *mut f32,
        c: usize,
    ) {
        let o2 = taps.outs[2];
        let chunks = o2.div_ceil(W);
        let keep: [u16; N] = std::array::from_fn(|i| first(o2 - (c + i) * W));
        // SAFETY: lanes outside the row are masked off (neither read, written nor faulted on);
        // the enabled source lanes are the columns each tap reaches (checked by `Taps::new`).
        // Source addresses are formed with `wrapping_offset` and only read through masks.
        unsafe {
            let mut acc: [__m512; N] =
                std::array::from_fn(|i| _mm512_maskz_loadu_ps(keep[i], row.add((c + i) * W)));
            for &(t, base) in reach {
                let wv = _mm512_set1_ps(*w.get_unchecked(taps.taps.get_unchecked(t).k));
                let masks = taps.masks.as_ptr().add(t * chunks + c);
                let at = src.as_ptr().wrapping_offset(base + (c * W) as isize);
                for (i, a) in acc.iter_mut().enumerate() {
                    let m = *masks.add(i);
                    let v = _mm512_maskz_loadu_ps(m, at.wrapping_add(i * W));
                    *a = _mm512_mask_add_ps(*a, m, *a, _mm512_mul_ps(wv, v));
                }
            }
            for (i, a) in acc.iter().enumerate() {
                _mm512_mask_storeu_ps(row.add((c + i) * W), keep[i], *a);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::rand;

    /// Taps of a 2-D depthwise kernel over an `h×w` plane (no phases: stride 1 along columns),
    /// built like the runtime builds them.
    fn taps_2d((h, w): (usize, usize), k: usize, (s, pad): (usize, usize)) -> (Taps, [usize; 3]) {
        let oh = (h + 2 * pad - k) / s + 1;
        let ow = w + 2 * pad - k + 1;
        let span = |count: usize, s: usize, off: isize, bound: usize| {
            let lo = (0..count)
                .find(|&t| (t * s) as isize + off >= 0)
                .unwrap_or(count);
            let hi = (0..count)
                .rev()
                .find(|&t| ((t * s) as isize + off) < bound as isize)
                .map_or(0, |t| t + 1);
            (lo, hi.max(lo))
        };
        let mut taps = Vec::new();
        for a in 0..k {
            for b in 0..k {
                let (offh, offw) = (a as isize - pad as isize, b as isize - pad as isize);
                taps.push(Tap {
                    k: a * k + b,
                    rows: [(0, 1), span(oh, s, offh, h)],
                    cols: span(ow, 1, offw, w),
                    base: offh * w as isize + offw,
                    step: [0, (s * w) as isize],
                });
            }
        }
        let outs = [1, oh, ow];
        (Taps::new(taps, outs, h * w, k * k), outs)
    }

    /// The dispatched plane (AVX-512 where this CPU has it) equals the tap-by-tap loop bit for bit
    /// over row widths around the chunk sizes, with the outputs' starting values kept; a sum in
    /// another order must differ.
    #[test]
    fn plane_equals_the_tap_order_loop() {
        for (n, &(h, w, k, s, pad)) in [
            (5, 7, 3, 1, 1),
            (6, 14, 3, 1, 1),
            (4, 16, 3, 1, 0),
            (5, 17, 5, 1, 2),
            (6, 33, 3, 2, 1),
            (3, 70, 5, 1, 2),
            (4, 112, 3, 1, 1),
            (3, 130, 3, 1, 0),
        ]
        .iter()
        .enumerate()
        {
            let (taps, [o0, o1, o2]) = taps_2d((h, w), k, (s, pad));
            let src = rand(n as u64, h * w);
            let wt = rand(100 + n as u64, k * k);
            let start = rand(200 + n as u64, o0 * o1 * o2);
            let mut got = start.clone();
            plane(&taps, &src, &wt, &mut got);
            let mut want = start.clone();
            plain(&taps, &src, &wt, &mut want);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "case {n}");
            let mut rev = taps.clone();
            rev.taps.reverse();
            let rev = Taps::new(rev.taps, rev.outs, h * w, k * k);
            let mut other = start.clone();
            plane(&rev, &src, &wt, &mut other);
            assert_ne!(
                bits(&got),
                bits(&other),
                "case {n}: the tap order went unseen"
            );
        }
    }

    /// Outputs no tap reaches keep their starting value (a masked lane written would show).
    #[test]
    fn unreached_outputs_keep_their_values() {
        // One tap reaching columns 3..9 of 20 and rows 1..2 of 3.
        let tap = Tap {
            k: 0,
            rows: [(0, 1), (1, 2)],
            cols: (3, 9),
            base: 0,
            step: [0, 20],
        };
        let taps = Taps::new(vec![tap], [1, 3, 20], 60, 1);
        let src = rand(7, 60);
        let mut out = vec![f32::NAN; 60];
        out[20 + 3..20 + 9].fill(1.0);
        plane(&taps, &src, &[0.5], &mut out);
        for (i, v) in out.iter().enumerate() {
            let reached = (23..29).contains(&i);
            assert_eq!(!v.is_nan(), reached, "output {i}");
            if reached {
                assert_eq!(*v, 1.0 + 0.5 * src[i]);
            }
        }
    }

    /// A tap that would read past the source is refused when the taps are made.
    #[test]
    #[should_panic(expected = "reads")]
    fn a_tap_reading_outside_the_source_is_refused() {
        let tap = Tap {
            k: 0,
            rows: [(0, 1), (0, 2)],
            cols: (0, 10),
            base: 1,
            step: [0, 10],
        };
        Taps::new(vec![tap], [1, 2, 10], 20, 1);
    }
}
