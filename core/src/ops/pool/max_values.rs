//! MaxPool's values alone (no Indices output): a row-separable path for windows over the last two
//! dims without dilation (the common form), and the general window walk for the rest. Both follow
//! the rule of the indexed path: the first tap in window order, then any greater tap or NaN until
//! the max is NaN.
use ndarray::{ArrayD, IxDyn};

use super::{EmptyMax, PGeom, for_planes, windows};
use crate::error::OpResult;

/// MaxPool's values, by the separable path where it applies.
pub(super) fn max_pool_values<T: Copy + PartialOrd + EmptyMax + Send + Sync>(
    g: &PGeom,
    xd: &[T],
    oshape: &[usize],
) -> OpResult<ArrayD<T>> {
    let planes = oshape.iter().product::<usize>() / g.out_sp().max(1);
    if let Some(y) = T::max_pool_kernel(g, xd, planes) {
        return Ok(ArrayD::from_shape_vec(IxDyn(oshape), y)?);
    }
    if separable(g) {
        max_pool_rows(g, xd, oshape, take)
    } else {
        max_pool_windows(g, xd, oshape)
    }
}

/// Windows over the last two dims only (one tap along the first padded dim, no padding there) and
/// without dilation.
pub(super) fn separable(g: &PGeom) -> bool {
    g.k[0] == 1 && g.s[0] == 1 && g.pb[0] == 0 && g.pe[0] == 0 && g.d == [1, 1, 1]
}

/// `best` after seeing `v`, by the window rule (taps in order; NaN wins and stays).
#[inline(always)]
pub(super) fn take<T: PartialOrd + Copy>(best: T, v: T) -> T {
    // `x != x` exactly for NaN. Non-short-circuit `&` and `|`, so that the choice compiles to a
    // select rather than branches: on data without order (any real activation map) the branches
    // mispredicted about half the time, and a 3×3 MaxPool took some 4 ns a tap.
    #[allow(clippy::eq_op)]
    let replace = (best == best) & ((v > best) | (v != v));
    if replace { v } else { best }
}

/// The separable path: for each output row, the horizontal maximum of each input row in its window
/// (taps left to right), then those combined top to bottom by the same rule. Equal to the window
/// walk in row-major order: the result is the first NaN if any, else the first maximal tap.
/// `take` is the window rule (a parameter so that tests can break it).
pub(super) fn max_pool_rows<T: Copy + PartialOrd + EmptyMax + Send + Sync>(
    g: &PGeom,
    xd: &[T],
    oshape: &[usize],
    take: impl Fn(T, T) -> T + Sync,
) -> OpResult<ArrayD<T>> {
    let (in_sp, out_sp) = (g.in_sp(), g.out_sp());
    let [d0, i1, i2] = g.ins;
    let [_, o1, o2] = g.outs;
    let total = oshape.iter().product::<usize>();
    let mut y: Vec<T> = vec![T::EMPTY_MAX; total];
    // Per output column: first input column and the valid taps [lo, hi).
    let cols: Vec<(i64, usize, usize)> = (0..o2)
        .map(|o| {
            let (start, lo, hi, _) = g.taps(2, o);
            (start, lo, hi)
        })
        .collect();
    let rows: Vec<(i64, usize, usize)> = (0..o1)
        .map(|o| {
            let (start, lo, hi, _) = g.taps(1, o);
            (start, lo, hi)
        })
        .collect();
    let plane_in = in_sp / d0.max(1);
    // The output columns whose every tap lies in the row: taken tap by tap over the whole run at
    // once, from the row split into its `s` phases (`phase[p][i]` is column `i·s + p`), so that
    // each tap is a contiguous slice and the loop vectorises. The columns at the edges go window by
    // window. Same taps, same order: the same bits.
    let (k2, s2) = (g.k[2], g.s[2]);
    let full = |ow: usize| cols[ow].1 == 0 && cols[ow].2 == k2;
    let a = (0..o2).find(|&ow| full(ow)).unwrap_or(o2);
    let b = (a..o2).find(|&ow| !full(ow)).unwrap_or(o2);
    let phase_len = i2.div_ceil(s2);
    let c0 = cols.get(a).map_or(0, |c| c.0 - (a * s2) as i64);
    for_planes(
        &mut y,
        out_sp,
        g.k.iter().fold(total, |a, &b| a.saturating_mul(b)),
        |pi, out| {
            let mut line = vec![T::EMPTY_MAX; o2];
            let mut phases = vec![T::EMPTY_MAX; if s2 > 1 { s2 * phase_len } else { 0 }];
            for (sub, out) in out.chunks_mut(o1 * o2).enumerate() {
                let src = &xd[pi * in_sp + sub * plane_in..pi * in_sp + (sub + 1) * plane_in];
                for (oh, orow) in out.chunks_mut(o2).enumerate() {
                    let (rstart, rlo, rhi) = rows[oh];
                    for (n, kh) in (rlo..rhi).enumerate() {
                        let ih = (rstart + kh as i64) as usize;
                        let srow = &src[ih * i2..(ih + 1) * i2];
                        if a < b {
                            if s2 > 1 {
                                crate::ops::split_phases(srow, s2, &mut phases, phase_len);
                            }
                            for t in 0..k2 {
                                // Output column ow reads column (ow + q)·s + p of the row.
                                let off = c0 + t as i64;
                                let (p, q) = (off.rem_euclid(s2 as i64), off.div_euclid(s2 as i64));
                                let taps = if s2 > 1 {
                                    &phases[p as usize * phase_len..][..phase_len]
                                } else {
                                    srow
                                };
                                let from = (a as i64 + q) as usize;
                                let taps = &taps[from..from + (b - a)];
                                let dst = &mut line[a..b];
                                if t == 0 {
                                    dst.copy_from_slice(taps);
                                } else {
                                    for (d, &v) in dst.iter_mut().zip(taps) {
                                        *d = take(*d, v);
                                    }
                                }
                            }
                        }
                        for ow in (0..a).chain(b..o2) {
                            let (cstart, clo, chi) = cols[ow];
                            if clo >= chi {
                                continue;
                            }
                            let base = (cstart + clo as i64) as usize;
                            let taps = &srow[base..base + (chi - clo)];
                            line[ow] = taps[1..].iter().fold(taps[0], |b, &v| take(b, v));
                        }
                        if n == 0 {
                            orow.copy_from_slice(&line);
                        } else {
                            for (b, &v) in orow.iter_mut().zip(&line) {
                                *b = take(*b, v);
                            }
                        }
                    }
                    // A window with no valid tap (rows or columns wholly in the padding).
                    if rlo >= rhi {
                        orow.fill(T::EMPTY_MAX);
                    }
                    for (o, &(_, clo, chi)) in orow.iter_mut().zip(&cols) {
                        if clo >= chi {
                            *o = T::EMPTY_MAX;
                        }
                    }
                }
            }
        },
    );
    debug_assert!(i1 > 0 || total == 0);
    Ok(ArrayD::from_shape_vec(IxDyn(oshape), y)?)
}

/// MaxPool's values by walking each window (any geometry), by the same rule as the indexed path.
pub(super) fn max_pool_windows<T: Copy + PartialOrd + EmptyMax + Send + Sync>(
    g: &PGeom,
    xd: &[T],
    oshape: &[usize],
) -> OpResult<ArrayD<T>> {
    let (in_sp, out_sp) = (g.in_sp(), g.out_sp());
    let [_, i1, i2] = g.ins;
    let total = oshape.iter().product::<usize>();
    let mut y: Vec<T> = vec![T::EMPTY_MAX; total];
    for_planes(
        &mut y,
        out_sp,
        g.k.iter().fold(total, |a, &b| a.saturating_mul(b)),
        |pi, out| {
            let src = &xd[pi * in_sp..(pi + 1) * in_sp];
            windows(g, |oi, w| {
                let mut best = T::EMPTY_MAX;
                let mut first = true;
                for ka in w[0].1..w[0].2 {
                    let ia = (w[0].0 + (ka * g.d[0]) as i64) as usize;
                    for kb in w[1].1..w[1].2 {
                        let ib = (w[1].0 + (kb * g.d[1]) as i64) as usize;
                        let row = (ia * i1 + ib) * i2;
                        for kc in w[2].1..w[2].2 {
                            let ic = (w[2].0 + (kc * g.d[2]) as i64) as usize;
                            let v = src[row + ic];
                            // `x != x` exactly for NaN; once the max is NaN it stays.
                            #[allow(clippy::eq_op)]
                            let take = first || (best == best && (v > best || v != v));
                            if take {
                                best = v;
                                first = false;
                            }
                        }
                    }
                }
                out[oi] = best;
            });
        },
    );
    Ok(ArrayD::from_shape_vec(IxDyn(oshape), y)?)
}
