//! The cores of a recurrent layer's time step (RNN, LSTM, GRU): the product of the recurrence weight
//! with the hidden state, and the gate activations over whole slices.
//!
//! The product reads the weight transposed, so the vector lanes run over the outputs `j` and every
//! output is one serial sum over `k` in index order. No lane ever combines with another, so the
//! result is the same bits at every vector width and register blocking: the AVX-512, AVX2 and
//! portable builds differ only in how many outputs they hold in registers at once. Row-major dot
//! products (one output at a time, summed across lanes) left the wide units idle: a step of a
//! 256-wide LSTM was a quarter of a million scalar products.
//!
//! **Panels.** The weight is laid out once ([`panels`]) as panels of [`PANEL`] outputs, each panel's
//! `k` rows consecutive, so that a step reads it front to back. Laid out as one transposed matrix,
//! a 128-output block read 512 bytes from each row, 4 KiB apart: every row in a page of its own,
//! which the hardware prefetchers do not follow. A 256-wide LSTM's step (a 1 MiB weight, past the
//! 1 MiB L2 with the rest) took 17.4 µs that way and 12.0 µs by panels (one thread, AMD EPYC of
//! stop 34).

use crate::Isa;

/// Outputs per panel of [`panels`]: one AVX-512 register block of [`matvec_t`].
pub const PANEL: usize = 128;

/// `r` (`n × k`, row-major: output `j`'s weights are `r[j·k..(j + 1)·k]`) laid out as panels for
/// [`matvec_panels`]: panel `p` (outputs `j0 = p·128` to `j0 + w`, `w = min(128, n − j0)`) starts at
/// `j0·k` and holds `R[j0 + i, kk]` at `j0·k + kk·w + i`.
///
/// Panics when `r` is shorter than `n·k`.
pub fn panels<T: Copy>(r: &[T], n: usize, k: usize) -> Vec<T> {
    assert!(r.len() >= n * k, "panels: {} values for {n} × {k}", r.len());
    let mut out = Vec::with_capacity(n * k);
    for j0 in (0..n).step_by(PANEL) {
        let w = PANEL.min(n - j0);
        for kk in 0..k {
            out.extend((j0..j0 + w).map(|j| r[j * k + kk]));
        }
    }
    out
}

/// `y[j] = Σ_k R[j, k] · x[k]` for `j < y.len()` (`n` outputs, `k = x.len()`), over `R` laid out by
/// [`panels`]`(r, n, k)`: each sum taken in `k` order from 0, a product and a sum per term, the
/// bits of [`matvec_t`] over `R` transposed.
///
/// Panics when `rp` is shorter than `n·k`.
pub fn matvec_panels(isa: Isa, rp: &[f32], x: &[f32], y: &mut [f32]) {
    let (n, k) = (y.len(), x.len());
    assert!(
        rp.len() >= n * k,
        "matvec_panels: {} weights for {n} × {k}",
        rp.len()
    );
    for (j0, yp) in (0..n).step_by(PANEL).zip(y.chunks_mut(PANEL)) {
        let w = yp.len();
        matvec_t(isa, &rp[j0 * k..j0 * k + w * k], w, x, yp);
    }
}

/// `y[j] = Σ_k rt[k·ld + j] · x[k]` for `j < y.len()`, each sum taken in `k` order from 0 (a product
/// and a sum per term, never fused, as `x + y·z` is written).
///
/// Panics when `rt` is shorter than `(x.len() - 1)·ld + y.len()` or `ld < y.len()`.
pub fn matvec_t(isa: Isa, rt: &[f32], ld: usize, x: &[f32], y: &mut [f32]) {
    assert!(ld >= y.len(), "matvec_t: ld {ld} below {} outputs", y.len());
    if let Some(last) = x.len().checked_sub(1) {
        assert!(
            rt.len() >= last * ld + y.len(),
            "matvec_t: {} weights for {} × {} (ld {ld})",
            rt.len(),
            x.len(),
            y.len()
        );
    }
    #[cfg(target_arch = "x86_64")]
    {
        // Eight vector accumulators per block: enough independent sums to cover an add's latency.
        #[target_feature(enable = "avx512f")]
        fn avx512(rt: &[f32], ld: usize, x: &[f32], y: &mut [f32]) {
            matvec_t_body::<128>(rt, ld, x, y)
        }
        #[target_feature(enable = "avx2")]
        fn avx2(rt: &[f32], ld: usize, x: &[f32], y: &mut [f32]) {
            matvec_t_body::<64>(rt, ld, x, y)
        }
        match isa {
            // SAFETY: the guard checked at run time that this CPU has AVX-512F; the body only
            // indexes slices (bounds-checked, sizes asserted above).
            Isa::Avx512 if isa.is_supported() => return unsafe { avx512(rt, ld, x, y) },
            // SAFETY: the guard checked at run time that this CPU has AVX2 (and FMA).
            Isa::Avx2 if isa.is_supported() => return unsafe { avx2(rt, ld, x, y) },
            _ => {}
        }
    }
    let _ = isa;
    matvec_t_body::<32>(rt, ld, x, y)
}

/// Blocks of `W` outputs held in registers across the whole sum, then the tail one output at a time
/// (the same sums in the same order).
#[inline(always)]
fn matvec_t_body<const W: usize>(rt: &[f32], ld: usize, x: &[f32], y: &mut [f32]) {
    let n = y.len();
    let mut j0 = 0;
    while j0 + W <= n {
        let mut acc = [0.0f32; W];
        for (k, &xk) in x.iter().enumerate() {
            let row: &[f32; W] = rt[k * ld + j0..k * ld + j0 + W].try_into().unwrap();
            for l in 0..W {
                acc[l] += row[l] * xk;
            }
        }
        y[j0..j0 + W].copy_from_slice(&acc);
        j0 += W;
    }
    // The tail in blocks of 8, then singly: each output's sum is the same whichever block holds it.
    while j0 < n {
        let w = (n - j0).min(8);
        let mut acc = [0.0f32; 8];
        for (k, &xk) in x.iter().enumerate() {
            let row = &rt[k * ld + j0..k * ld + j0 + w];
            for l in 0..w {
                acc[l] += row[l] * xk;
            }
        }
        y[j0..j0 + w].copy_from_slice(&acc[..w]);
        j0 += w;
    }
}

/// `tanh(x)` in f32, branch-free so that loops over slices vectorize: below |x| = 0.55 its Taylor
/// series to x¹⁵ (in Horner form on x²), above it `1 − 2/(e^{2|x|} + 1)` with [`crate::activation::exp_f32`]
/// and the sign of `x`. Within 3 ulps of the exact value (tested against f64 over ±9 and the tails);
/// ±inf give ±1 and NaN gives NaN.
#[inline(always)]
pub fn tanh_f32(x: f32) -> f32 {
    let a = x.abs();
    let x2 = x * x;
    let p = -1.0 / 3.0
        + x2 * (2.0 / 15.0
            + x2 * (-17.0 / 315.0
                + x2 * (62.0 / 2835.0
                    + x2 * (-1382.0 / 155_925.0
                        + x2 * (21_844.0 / 6_081_075.0 + x2 * (-929_569.0 / 638_512_875.0))))));
    // Both forms on |x| (tanh is odd), then x's sign: -0 stays -0.
    let small = a + (a * x2) * p;
    let big = 1.0 - 2.0 / (crate::activation::exp_f32(2.0 * a) + 1.0);
    (if a < 0.55 { small } else { big }).copysign(x)
}

/// A gate activation over a slice, with the widest vectors this CPU has (each element alone: the
/// same bits at every width).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// [`crate::Activation::Sigmoid`]'s formula: `1 / (1 + e^-x)` by [`crate::activation::exp_f32`].
    Sigmoid,
    /// [`tanh_f32`].
    Tanh,
}

impl Gate {
    /// `v[i] = gate(v[i])`.
    pub fn apply(self, v: &mut [f32]) {
        let g = self;
        crate::simd_dispatch!(|g: Gate, v: &mut [f32]| { g.apply_body(v) })
    }

    #[inline(always)]
    fn apply_body(self, v: &mut [f32]) {
        match self {
            Gate::Sigmoid => v
                .iter_mut()
                .for_each(|x| *x = crate::Activation::Sigmoid.scalar(*x)),
            Gate::Tanh => v.iter_mut().for_each(|x| *x = tanh_f32(*x)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::rand;

    /// The definition, one output at a time, in k order: what every build must equal bit for bit.
    fn reference(rt: &[f32], ld: usize, x: &[f32], n: usize) -> Vec<f32> {
        (0..n)
            .map(|j| {
                x.iter()
                    .enumerate()
                    .fold(0.0f32, |s, (k, &xk)| s + rt[k * ld + j] * xk)
            })
            .collect()
    }

    #[test]
    fn every_isa_equals_the_serial_sums_bit_for_bit() {
        // Widths around every block size and tail, with a leading dimension wider than the outputs.
        for &(k, n, ld) in &[
            (1, 1, 1),
            (3, 7, 9),
            (17, 31, 40),
            (64, 128, 128),
            (29, 200, 203),
            (256, 1024, 1024),
            (5, 129, 130),
        ] {
            let rt = rand(k as u64 * 31 + n as u64, (k - 1) * ld + n);
            let x = rand(7 + k as u64, k);
            let want = reference(&rt, ld, &x, n);
            for &isa in Isa::supported() {
                let mut y = vec![f32::NAN; n + 3];
                matvec_t(isa, &rt, ld, &x, &mut y[..n]);
                for j in 0..n {
                    assert_eq!(
                        y[j].to_bits(),
                        want[j].to_bits(),
                        "{isa:?} k {k} n {n} j {j}"
                    );
                }
                assert!(
                    y[n..].iter().all(|v| v.is_nan()),
                    "{isa:?} wrote past its outputs"
                );
            }
        }
    }

    #[test]
    fn panels_give_the_serial_sums_bit_for_bit() {
        // Whole panels, a short last one, fewer outputs than a panel, and one input.
        for &(k, n) in &[(256, 1024), (29, 300), (5, 7), (1, 130), (64, 128)] {
            let r = rand(k as u64 * 17 + n as u64, n * k);
            let rt: Vec<f32> = (0..k * n).map(|i| r[(i % n) * k + i / n]).collect();
            let x = rand(11 + k as u64, k);
            let want = reference(&rt, n, &x, n);
            let rp = panels(&r, n, k);
            assert_eq!(rp.len(), n * k);
            for &isa in Isa::supported() {
                let mut y = vec![f32::NAN; n + 3];
                matvec_panels(isa, &rp, &x, &mut y[..n]);
                for j in 0..n {
                    assert_eq!(
                        y[j].to_bits(),
                        want[j].to_bits(),
                        "{isa:?} k {k} n {n} j {j}"
                    );
                }
                assert!(y[n..].iter().all(|v| v.is_nan()), "{isa:?} wrote past");
            }
        }
    }

    #[test]
    fn the_panel_check_catches_a_weight_laid_out_transposed_whole() {
        // A broken variant: the old layout (one transposed matrix) read as panels. The check above
        // must see it wherever a panel is narrower than the outputs.
        let (k, n) = (16, 300);
        let r = rand(5, n * k);
        let rt: Vec<f32> = (0..k * n).map(|i| r[(i % n) * k + i / n]).collect();
        let x = rand(6, k);
        let want = reference(&rt, n, &x, n);
        let mut y = vec![0.0; n];
        matvec_panels(Isa::detected(), &rt, &x, &mut y);
        assert!(want.iter().zip(&y).any(|(a, b)| a.to_bits() != b.to_bits()));
    }

    #[test]
    fn the_comparison_catches_a_sum_in_another_order() {
        // A broken variant: each output summed from the last k down. The check above must see it.
        let (k, n) = (256, 64);
        let rt = rand(3, k * n);
        let x = rand(4, k);
        let want = reference(&rt, n, &x, n);
        let reversed: Vec<f32> = (0..n)
            .map(|j| {
                (0..k)
                    .rev()
                    .fold(0.0f32, |s, kk| s + rt[kk * n + j] * x[kk])
            })
            .collect();
        assert!(
            want.iter()
                .zip(&reversed)
                .any(|(a, b)| a.to_bits() != b.to_bits())
        );
    }

    /// The largest distance, in representable steps, of `f` from the correctly rounded tanh over ±9
    /// (finely around zero and the switch at 0.55) and a few far points.
    fn worst_ulps(f: impl Fn(f32) -> f32) -> (i64, f32) {
        let ulps =
            |x: f32| (f(x).to_bits() as i64 - ((x as f64).tanh() as f32).to_bits() as i64).abs();
        let mut worst = (0, 0.0f32);
        let mut x = -9.0f32;
        let far = [
            1e-30f32,
            -1e-30,
            1e-10,
            0.549_999_9,
            0.55,
            -0.55,
            20.0,
            -50.0,
            88.0,
            1e30,
        ];
        while x <= 9.0 {
            for p in [x, x * 1e-3] {
                if ulps(p) > worst.0 {
                    worst = (ulps(p), p);
                }
            }
            x += 1.0 / 4096.0 + x.abs() * 1e-6;
        }
        for p in far {
            if ulps(p) > worst.0 {
                worst = (ulps(p), p);
            }
        }
        worst
    }

    #[test]
    fn tanh_is_within_three_ulps_of_f64() {
        let worst = worst_ulps(tanh_f32);
        assert!(
            worst.0 <= 3,
            "tanh_f32 is {} ulps off at {}",
            worst.0,
            worst.1
        );
        assert_eq!(tanh_f32(f32::INFINITY), 1.0);
        assert_eq!(tanh_f32(f32::NEG_INFINITY), -1.0);
        assert!(tanh_f32(f32::NAN).is_nan());
        assert_eq!(tanh_f32(0.0).to_bits(), 0.0f32.to_bits());
        assert_eq!(tanh_f32(-0.0).to_bits(), (-0.0f32).to_bits());
        // A broken variant the bound must catch: 2·sigmoid(2x) − 1 everywhere, which cancels near 0.
        let naive = |x: f32| 2.0 * crate::Activation::Sigmoid.scalar(2.0 * x) - 1.0;
        assert!(
            worst_ulps(naive).0 > 3,
            "the bound does not catch the cancelling form"
        );
    }

    #[test]
    fn gates_over_slices_equal_their_scalar_forms() {
        let xs: Vec<f32> = rand(9, 1000)
            .iter()
            .map(|v| v * 12.0)
            .chain([f32::NAN, 0.55, -0.55, 100.0, -100.0])
            .collect();
        let mut s = xs.clone();
        Gate::Sigmoid.apply(&mut s);
        let mut t = xs.clone();
        Gate::Tanh.apply(&mut t);
        for (i, &x) in xs.iter().enumerate() {
            assert_eq!(
                s[i].to_bits(),
                crate::Activation::Sigmoid.scalar(x).to_bits(),
                "sigmoid({x})"
            );
            assert_eq!(t[i].to_bits(), tanh_f32(x).to_bits(), "tanh({x})");
        }
    }
}
