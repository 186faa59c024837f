//! The short moves of convolution packing: each piece of a packed panel row is at most one panel
//! wide (`NR` values), copied from an input row (every `s`-th value) or zeroed. Slice operations
//! compile these to calls of `memmove`/`memset`, whose dispatch costs more than the move itself at
//! these lengths; on AVX-512 each is two masked vector moves instead.
//!
//! It also holds the crate's one lane-mask rule (`first`) and the even/odd split
//! (`deinterleave`) that both the depthwise stride phases and the pixel kernel's phase grid are
//! made by.

/// How a packing routine moves at most one panel width of values.
pub(crate) trait Lanes {
    /// `dst[i] = 0` for `i < len`.
    ///
    /// # Safety
    /// `dst` is valid for `len` writes; `len` is at most the panel width of the implementation.
    unsafe fn zero(dst: *mut f32, len: usize);

    /// `dst[i] = src[i·s]` for `i < len`.
    ///
    /// # Safety
    /// `dst` is valid for `len` writes and `src` for reads at `i·s`, `i < len`; `len` is at most
    /// the panel width of the implementation; `s >= 1`.
    unsafe fn copy(dst: *mut f32, src: *const f32, len: usize, s: usize);
}

/// Slice operations: any panel width, any target.
pub(crate) struct Plain;

impl Lanes for Plain {
    /// # Safety
    /// [`Lanes::zero`]'s contract (any `len`: this form has no panel width limit).
    #[inline(always)]
    unsafe fn zero(dst: *mut f32, len: usize) {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(dst, len) }.fill(0.0);
    }

    /// # Safety
    /// [`Lanes::copy`]'s contract (any `len`: this form has no panel width limit).
    #[inline(always)]
    unsafe fn copy(dst: *mut f32, src: *const f32, len: usize, s: usize) {
        // SAFETY: the caller's contract.
        let dst = unsafe { std::slice::from_raw_parts_mut(dst, len) };
        if s == 1 {
            // SAFETY: the caller's contract (`src` valid for `len` reads at stride 1).
            dst.copy_from_slice(unsafe { std::slice::from_raw_parts(src, len) });
        } else {
            for (i, d) in dst.iter_mut().enumerate() {
                // SAFETY: the caller's contract.
                *d = unsafe { *src.add(i * s) };
            }
        }
    }
}

/// Masked AVX-512 moves of up to 32 values (two vectors). Only inlined into functions compiled
/// with `avx512f` (see `ConvPatches::pack_panels`): its methods are not themselves marked, so
/// that they inline there.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Avx512;

/// The mask of the first `n` of 16 lanes (`n` may exceed 16): the one mask rule of the crate's
/// masked vector code (packing, depthwise planes, pixel tiles).
#[inline(always)]
pub(crate) fn first(n: usize) -> u16 {
    if n >= 16 { u16::MAX } else { (1u16 << n) - 1 }
}

/// `evens[i] = src[2i]` and `odds[i] = src[2i + 1]` for every `i` each holds: 32 values at a
/// time into 16 evens and 16 odds by two permutes, the last step masked. A depthwise plane's
/// stride phases and the pixel kernel's phase grid are both made by it.
///
/// # Safety
/// AVX-512F is available.
///
/// # Panics
/// When `evens` is longer than `ceil(n/2)` or `odds` than `floor(n/2)`, `n = src.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn deinterleave(src: &[f32], evens: &mut [f32], odds: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = src.len();
    let (ne, no) = (evens.len(), odds.len());
    assert!(
        ne <= n.div_ceil(2) && no <= n / 2,
        "deinterleave: {ne} evens and {no} odds from {n} values"
    );
    // SAFETY: step j reads src[j..j + 32] where it lies inside src (whole, or masked to the
    // r = n − j values left: masked-off lanes are neither read nor faulted on) and writes evens
    // and odds i = j/2.. up to their lengths (whole or masked). Each step has an even or an odd
    // to write, so 2i < n. Pointers are formed with `wrapping_add` and dereferenced only through
    // those masks.
    unsafe {
        let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        let (s, e, o) = (src.as_ptr(), evens.as_mut_ptr(), odds.as_mut_ptr());
        let mut j = 0;
        // Whole steps first, unmasked (a depthwise plane's rows are mostly these).
        while j + 32 <= n && j / 2 + 16 <= ne.min(no) {
            let (x, y) = (_mm512_loadu_ps(s.add(j)), _mm512_loadu_ps(s.add(j + 16)));
            _mm512_storeu_ps(e.add(j / 2), _mm512_permutex2var_ps(x, even, y));
            _mm512_storeu_ps(o.add(j / 2), _mm512_permutex2var_ps(x, odd, y));
            j += 32;
        }
        while j / 2 < ne.max(no) {
            let (i, r) = (j / 2, n - j);
            let (a, b) = if r >= 32 {
                (_mm512_loadu_ps(s.add(j)), _mm512_loadu_ps(s.add(j + 16)))
            } else {
                (
                    _mm512_maskz_loadu_ps(first(r), s.add(j)),
                    _mm512_maskz_loadu_ps(first(r.saturating_sub(16)), s.wrapping_add(j + 16)),
                )
            };
            let put = |dst: *mut f32, left: usize, v: __m512| {
                if left >= 16 {
                    _mm512_storeu_ps(dst.wrapping_add(i), v);
                } else {
                    _mm512_mask_storeu_ps(dst.wrapping_add(i), first(left), v);
                }
            };
            put(e, ne.saturating_sub(i), _mm512_permutex2var_ps(a, even, b));
            put(o, no.saturating_sub(i), _mm512_permutex2var_ps(a, odd, b));
            j += 32;
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl Lanes for Avx512 {
    /// # Safety
    /// [`Lanes::zero`]'s contract with `len <= 32`, and AVX-512F is present on this CPU (the
    /// trait does not say so: only code that checked it, compiled with `avx512f`, names `Avx512`).
    #[inline(always)]
    unsafe fn zero(dst: *mut f32, len: usize) {
        use std::arch::x86_64::*;
        debug_assert!(len <= 32);
        // SAFETY: masked-off lanes are neither written nor faulted on; the enabled ones lie in
        // `dst[..len]` (the caller's contract).
        unsafe {
            let z = _mm512_setzero_ps();
            _mm512_mask_storeu_ps(dst, first(len), z);
            if len > 16 {
                _mm512_mask_storeu_ps(dst.add(16), first(len - 16), z);
            }
        }
    }

    /// # Safety
    /// [`Lanes::copy`]'s contract with `len <= 32`, and AVX-512F is present on this CPU (as for
    /// [`Avx512::zero`]).
    #[inline(always)]
    unsafe fn copy(dst: *mut f32, src: *const f32, len: usize, s: usize) {
        use std::arch::x86_64::*;
        debug_assert!(len <= 32);
        if len == 0 {
            return;
        }
        // SAFETY: masked-off lanes are neither read, written nor faulted on; the enabled ones
        // lie in `dst[..len]` and at `src[i·s]`, `i < len` (the caller's contract). Pointers
        // past the end are formed with `wrapping_add` and only dereferenced through masks.
        unsafe {
            match s {
                1 => {
                    let a = _mm512_maskz_loadu_ps(first(len), src);
                    _mm512_mask_storeu_ps(dst, first(len), a);
                    if len > 16 {
                        let m = first(len - 16);
                        let b = _mm512_maskz_loadu_ps(m, src.wrapping_add(16));
                        _mm512_mask_storeu_ps(dst.add(16), m, b);
                    }
                }
                2 => {
                    // Output lane i reads input 2i: the even lanes of each pair of input vectors.
                    let evens = _mm512_setr_epi32(
                        0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30,
                    );
                    let reads = 2 * len - 1;
                    let load = |v: usize| {
                        _mm512_maskz_loadu_ps(
                            first(reads.saturating_sub(16 * v)),
                            src.wrapping_add(16 * v),
                        )
                    };
                    let lo = _mm512_permutex2var_ps(load(0), evens, load(1));
                    _mm512_mask_storeu_ps(dst, first(len), lo);
                    if len > 16 {
                        let hi = _mm512_permutex2var_ps(load(2), evens, load(3));
                        _mm512_mask_storeu_ps(dst.add(16), first(len - 16), hi);
                    }
                }
                _ => {
                    for i in 0..len {
                        *dst.add(i) = *src.add(i * s);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length up to 32 at strides 1, 2 and 3, against plain indexing, with the lanes around
    /// the destination poisoned (a lane written past `len` shows) and the source ending exactly
    /// where the last read is (a read past it would be out of bounds under Miri and ASan).
    type Copy = unsafe fn(*mut f32, *const f32, usize, usize);
    type Zero = unsafe fn(*mut f32, usize);

    #[test]
    fn moves_match_plain_indexing() {
        #[cfg(target_arch = "x86_64")]
        let avx512 = crate::Isa::Avx512.is_supported();
        for s in 1..=3 {
            for len in 0..=32 {
                let src: Vec<f32> = (0..(len.max(1) - 1) * s + 1)
                    .map(|i| i as f32 + 0.5)
                    .collect();
                let want: Vec<f32> = (0..len).map(|i| src[i * s]).collect();
                let mut movers: Vec<(&str, Copy)> = vec![("plain", Plain::copy)];
                #[cfg(target_arch = "x86_64")]
                if avx512 {
                    movers.push(("avx512", copy_avx512));
                }
                for (name, copy) in movers {
                    let mut dst = vec![f32::NAN; len + 2];
                    // SAFETY: dst holds len values after the first; src holds every read.
                    unsafe { copy(dst.as_mut_ptr().add(1), src.as_ptr(), len, s) };
                    assert!(
                        dst[0].is_nan() && dst[len + 1].is_nan(),
                        "{name} s={s} len={len}"
                    );
                    assert_eq!(&dst[1..=len], &want[..], "{name} s={s} len={len}");
                }
                let mut zeroers: Vec<(&str, Zero)> = vec![("plain", Plain::zero)];
                #[cfg(target_arch = "x86_64")]
                if avx512 {
                    zeroers.push(("avx512", zero_avx512));
                }
                for (name, zero) in zeroers {
                    let mut dst = vec![f32::NAN; len + 2];
                    // SAFETY: dst holds len values after the first.
                    unsafe { zero(dst.as_mut_ptr().add(1), len) };
                    assert!(dst[0].is_nan() && dst[len + 1].is_nan(), "{name} len={len}");
                    assert!(dst[1..=len].iter().all(|&v| v == 0.0), "{name} len={len}");
                }
            }
        }
    }

    /// # Safety
    /// AVX-512F is present, and [`Avx512::copy`]'s contract holds.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn copy_avx512(dst: *mut f32, src: *const f32, len: usize, s: usize) {
        // SAFETY: the test's contract.
        unsafe { Avx512::copy(dst, src, len, s) }
    }

    /// Every length up to 70, and evens and odds cut short, against plain indexing, with the
    /// values around each destination poisoned.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn deinterleave_matches_plain_indexing() {
        if !crate::Isa::Avx512.is_supported() {
            return;
        }
        for n in 0..=70usize {
            let src: Vec<f32> = (0..n).map(|i| i as f32 + 0.5).collect();
            for (ne, no) in [
                (n.div_ceil(2), n / 2),
                (n.div_ceil(2) / 2, n / 2),
                (n / 3, 0),
            ] {
                let (mut e, mut o) = (vec![f32::NAN; ne + 2], vec![f32::NAN; no + 2]);
                // SAFETY: AVX-512F was detected; the lengths are within the contract.
                unsafe { deinterleave(&src, &mut e[1..=ne], &mut o[1..=no]) };
                let want_e: Vec<f32> = (0..ne).map(|i| src[2 * i]).collect();
                let want_o: Vec<f32> = (0..no).map(|i| src[2 * i + 1]).collect();
                assert_eq!(&e[1..=ne], &want_e[..], "n={n} ne={ne}");
                assert_eq!(&o[1..=no], &want_o[..], "n={n} no={no}");
                assert!(e[0].is_nan() && e[ne + 1].is_nan() && o[0].is_nan() && o[no + 1].is_nan());
            }
        }
    }

    /// # Safety
    /// AVX-512F is present, and [`Avx512::zero`]'s contract holds.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn zero_avx512(dst: *mut f32, len: usize) {
        // SAFETY: the test's contract.
        unsafe { Avx512::zero(dst, len) }
    }
}
