//! The short moves of convolution packing: each piece of a packed panel row is at most one panel
//! wide (`NR` values), copied from an input row (every `s`-th value) or zeroed. Slice operations
//! compile these to calls of `memmove`/`memset`, whose dispatch costs more than the move itself at
//! these lengths; on AVX-512 each is two masked vector moves instead.

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
    #[inline(always)]
    unsafe fn zero(dst: *mut f32, len: usize) {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(dst, len) }.fill(0.0);
    }

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

/// The mask of the first `n` of 16 lanes (`n` may exceed 16).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn first(n: usize) -> u16 {
    if n >= 16 { u16::MAX } else { (1u16 << n) - 1 }
}

#[cfg(target_arch = "x86_64")]
impl Lanes for Avx512 {
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

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn copy_avx512(dst: *mut f32, src: *const f32, len: usize, s: usize) {
        // SAFETY: the test's contract.
        unsafe { Avx512::copy(dst, src, len, s) }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn zero_avx512(dst: *mut f32, len: usize) {
        // SAFETY: the test's contract.
        unsafe { Avx512::zero(dst, len) }
    }
}
