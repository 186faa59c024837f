//! Register-blocked micro-kernels: one `MR×NR` tile of `C`, `C (+)= Σ_p a[p]ᵀ·b[p]`, where `a` is a
//! packed `A` panel (`MR` values per step `p`) and `b` a packed `B` panel (`NR` values per step).
//!
//! Each `A` value is broadcast and multiplied into `NR/W` vectors of `B` (W lanes per vector), so
//! the accumulators hold `MR` rows of `NR` contiguous outputs. Tiles: AVX-512 8×32 (16 accumulators
//! of 32), AVX2+FMA 6×16 (12 of 16), portable 4×8. One accumulator per output, summed in `p` order
//! with one rounding per step (a fused multiply-add on the SIMD paths).
use crate::Isa;

/// Largest `MR·NR` over the instruction sets: the size of the scratch tile for partial tiles.
const MAX_TILE: usize = 8 * 32;

/// Writes the `rows × cols` corner of one tile of `C` at `c` (row stride `ldc`): the sum over `k`
/// steps of the panels at `a` and `b`, added to what `C` holds when `accumulate`.
///
/// # Safety
/// `a` must hold `k·mr` values and `b` `k·nr` values of `isa`'s tile; `c` must be valid for writes
/// (and for reads when `accumulate`) at `i·ldc + j` for `i < rows`, `j < cols`, with `rows <= mr`
/// and `cols <= nr`; `isa` must be supported by this CPU.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn tile(
    isa: Isa,
    k: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    rows: usize,
    cols: usize,
    accumulate: bool,
) {
    let (mr, nr) = (isa.mr(), isa.nr());
    let full: unsafe fn(usize, *const f32, *const f32, *mut f32, usize, bool) = match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => avx512_8x32,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => avx2_6x16,
        _ => portable_4x8,
    };
    // A tile of few rows (a batch of one through a layer's weights) computes only its rows, each
    // with the same sum as in the full tile.
    #[cfg(target_arch = "x86_64")]
    let full = match (isa, rows) {
        (Isa::Avx512, 1) => avx512_1x32,
        (Isa::Avx512, 2..=4) => avx512_4x32,
        _ => full,
    };
    // SAFETY: the caller's contract; a partial tile goes through a scratch tile of the full size.
    unsafe {
        if rows == mr && cols == nr {
            full(k, a, b, c, ldc, accumulate);
            return;
        }
        let mut scratch = [0f32; MAX_TILE];
        full(k, a, b, scratch.as_mut_ptr(), nr, false);
        for i in 0..rows {
            let src = &scratch[i * nr..i * nr + cols];
            let dst = std::slice::from_raw_parts_mut(c.add(i * ldc), cols);
            if accumulate {
                for (d, s) in dst.iter_mut().zip(src) {
                    *d += *s;
                }
            } else {
                dst.copy_from_slice(src);
            }
        }
    }
}

/// What a fused 8×32 tile adds to its sums before its activation, as [`crate::Epilogue`] would on
/// the stored rows: pointers at the tile's first row and column.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
pub(crate) struct TileEpi {
    /// `bias[i]` for the tile's row `i` (8 values), or none.
    pub bias: Option<*const f32>,
    /// Laid out as `C` (row stride `ldc`), or none.
    pub residual: Option<*const f32>,
    /// 32 values, one per column, where there is no residual; or none.
    pub col_bias: Option<*const f32>,
    pub lanes: crate::activation::lanes::Lanes,
}

/// The full AVX-512 8×32 tile of a sum of one block, with its epilogue applied in registers before
/// the one store: `act((sum + bias[i]) + residual[i, j])` (or `+ col_bias[j]`), the operations and
/// order of [`crate::Epilogue`]'s pass over the stored rows, so the same bits. That pass cost short
/// sums most: mobilenet_v2's 16 → 96 expansion at 112² (a sum of 16 steps) took 266 µs without
/// bias and activation and 434 µs with them, on two threads of the AMD EPYC of stop 34.
///
/// # Safety
/// As [`tile`]'s for a full tile that is not accumulated; `epi`'s pointers are valid for the
/// tile's 8 rows (`residual` at row stride `ldc`) and 32 columns; AVX-512F is present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn avx512_8x32_fused(
    k: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    epi: TileEpi,
) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's contract.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); 2]; 8];
        let (mut a, mut b) = (a, b);
        for _ in 0..k {
            let bv = [_mm512_loadu_ps(b), _mm512_loadu_ps(b.add(16))];
            for (i, row) in acc.iter_mut().enumerate() {
                let ai = _mm512_set1_ps(*a.add(i));
                row[0] = _mm512_fmadd_ps(ai, bv[0], row[0]);
                row[1] = _mm512_fmadd_ps(ai, bv[1], row[1]);
            }
            a = a.add(8);
            b = b.add(32);
        }
        for (i, row) in acc.iter().enumerate() {
            for (v, x) in row.iter().enumerate() {
                let mut x = *x;
                if let Some(bias) = epi.bias {
                    x = _mm512_add_ps(x, _mm512_set1_ps(*bias.add(i)));
                }
                if let Some(r) = epi.residual {
                    x = _mm512_add_ps(x, _mm512_loadu_ps(r.add(i * ldc + v * 16)));
                } else if let Some(cb) = epi.col_bias {
                    x = _mm512_add_ps(x, _mm512_loadu_ps(cb.add(v * 16)));
                }
                _mm512_storeu_ps(c.add(i * ldc + v * 16), epi.lanes.apply(x));
            }
        }
    }
}

/// One row of `C` over four whole AVX-512 B panels side by side (`c[0..128]`): the row's sums of
/// [`avx512_1x32`] for each panel, the same operations in the same order, run together. A lone row
/// is two chains of fused multiply-adds per panel, each step waiting on the last (4 cycles on the
/// AMD EPYC of stop 34, where the loads take 1): four panels keep eight chains in flight.
///
/// # Safety
/// `a` holds `k` steps of an AVX-512 `A` panel (8 values a step, the row's first), each `b[t]`
/// `k` steps of a B panel (32 a step); `c` is valid for 128 writes (and reads when
/// `accumulate`); AVX-512F is present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn row_of_4(
    k: usize,
    a: *const f32,
    b: [*const f32; 4],
    c: *mut f32,
    accumulate: bool,
) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's contract.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); 2]; 4];
        for p in 0..k {
            let ai = _mm512_set1_ps(*a.add(p * 8));
            for (t, r) in acc.iter_mut().enumerate() {
                let bp = b[t].add(p * 32);
                r[0] = _mm512_fmadd_ps(ai, _mm512_loadu_ps(bp), r[0]);
                r[1] = _mm512_fmadd_ps(ai, _mm512_loadu_ps(bp.add(16)), r[1]);
            }
        }
        for (t, r) in acc.iter().enumerate() {
            for (v, x) in r.iter().enumerate() {
                let p = c.add(t * 32 + v * 16);
                let out = if accumulate {
                    _mm512_add_ps(_mm512_loadu_ps(p), *x)
                } else {
                    *x
                };
                _mm512_storeu_ps(p, out);
            }
        }
    }
}

/// Elsewhere `block` never calls it (AVX-512 only).
///
/// # Safety
/// Never to be called (it panics): the x86_64 form's contract, for the signature's sake.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) unsafe fn row_of_4(_: usize, _: *const f32, _: [*const f32; 4], _: *mut f32, _: bool) {
    unreachable!("row_of_4 without AVX-512")
}

/// The portable 4×8 tile (also the reference the SIMD tiles are tested against).
///
/// # Safety
/// [`tile`]'s contract for a full tile of the portable instruction set: `a` holds `k·4` values,
/// `b` `k·8`, and `c` is valid for reads and writes of 8 values at each of `c`, `c + ldc`,
/// `c + 2·ldc` and `c + 3·ldc`.
unsafe fn portable_4x8(
    k: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    const MR: usize = 4;
    const NR: usize = 8;
    let mut acc = [[0f32; NR]; MR];
    // SAFETY: the contract of `tile`.
    unsafe {
        let a = std::slice::from_raw_parts(a, k * MR);
        let b = std::slice::from_raw_parts(b, k * NR);
        for (ap, bp) in a.chunks_exact(MR).zip(b.chunks_exact(NR)) {
            for i in 0..MR {
                for j in 0..NR {
                    acc[i][j] += ap[i] * bp[j];
                }
            }
        }
        for (i, row) in acc.iter().enumerate() {
            let dst = std::slice::from_raw_parts_mut(c.add(i * ldc), NR);
            for (d, s) in dst.iter_mut().zip(row) {
                *d = if accumulate { *d + *s } else { *s };
            }
        }
    }
}

/// One SIMD tile kernel: the first `$rows` rows of an `$mr`-row panel, of `$nv` vectors of `$w`
/// lanes.
macro_rules! simd_tile {
    ($name:ident, $feat:literal, $mr:literal, $rows:literal, $nv:literal, $w:literal,
     $zero:ident, $load:ident, $store:ident, $set1:ident, $fmadd:ident, $add:ident) => {
        /// # Safety
        /// The CPU has the target features `$feat`; `a` holds `k·$mr` values (a panel of `$mr`
        /// rows, of which the first `$rows` are read), `b` holds `k·$nv·$w`, and `c` is valid for
        /// writes (and reads when `accumulate`) of `$nv·$w` values at `c + i·ldc`, `i < $rows`.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $feat)]
        unsafe fn $name(
            k: usize,
            a: *const f32,
            b: *const f32,
            c: *mut f32,
            ldc: usize,
            accumulate: bool,
        ) {
            use std::arch::x86_64::*;
            // SAFETY: the contract of `tile`; this function runs only where `$feat` was detected.
            unsafe {
                let mut acc = [[$zero(); $nv]; $rows];
                let (mut a, mut b) = (a, b);
                for _ in 0..k {
                    let mut bv = [$zero(); $nv];
                    for (v, slot) in bv.iter_mut().enumerate() {
                        *slot = $load(b.add(v * $w));
                    }
                    for (i, row) in acc.iter_mut().enumerate() {
                        let ai = $set1(*a.add(i));
                        for (v, r) in row.iter_mut().enumerate() {
                            *r = $fmadd(ai, bv[v], *r);
                        }
                    }
                    a = a.add($mr);
                    b = b.add($nv * $w);
                }
                for (i, row) in acc.iter().enumerate() {
                    let dst = c.add(i * ldc);
                    for (v, r) in row.iter().enumerate() {
                        let p = dst.add(v * $w);
                        let out = if accumulate { $add($load(p), *r) } else { *r };
                        $store(p, out);
                    }
                }
            }
        }
    };
}

/// An AVX-512 tile of the first `$rows` rows of an 8-row panel, 32 columns wide.
macro_rules! avx512_tile {
    ($name:ident, $rows:literal) => {
        simd_tile!(
            $name,
            "avx512f",
            8,
            $rows,
            2,
            16,
            _mm512_setzero_ps,
            _mm512_loadu_ps,
            _mm512_storeu_ps,
            _mm512_set1_ps,
            _mm512_fmadd_ps,
            _mm512_add_ps
        );
    };
}

avx512_tile!(avx512_8x32, 8);
avx512_tile!(avx512_4x32, 4);
avx512_tile!(avx512_1x32, 1);

simd_tile!(
    avx2_6x16,
    "avx2,fma",
    6,
    6,
    2,
    8,
    _mm256_setzero_ps,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_set1_ps,
    _mm256_fmadd_ps,
    _mm256_add_ps
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::rand;

    /// Tiles of fewer rows than the panel (on AVX-512, kernels that compute only 1 or 4 rows)
    /// give the bits of the full tile's rows, from random values whose sums round; the same
    /// steps in reverse order must give other bits.
    #[test]
    fn few_row_tiles_equal_the_full_tiles_rows_bit_for_bit() {
        let rand = |seed: u64, n: usize| crate::testing::rand(seed, n);
        for &isa in Isa::supported() {
            let (mr, nr, k) = (isa.mr(), isa.nr(), 301);
            let (a, b) = (rand(1, k * mr), rand(2, k * nr));
            let start = rand(3, mr * nr);
            let run = |a: &[f32], b: &[f32], rows: usize, accumulate: bool| {
                let mut c = start.clone();
                // SAFETY: panels and C are sized for the tile, the ISA is supported.
                unsafe {
                    tile(
                        isa,
                        k,
                        a.as_ptr(),
                        b.as_ptr(),
                        c.as_mut_ptr(),
                        nr,
                        rows,
                        nr,
                        accumulate,
                    )
                };
                c.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            };
            for accumulate in [false, true] {
                let full = run(&a, &b, mr, accumulate);
                for rows in 1..mr {
                    let got = run(&a, &b, rows, accumulate);
                    assert_eq!(got[..rows * nr], full[..rows * nr], "{isa:?} rows {rows}");
                    assert_eq!(got[rows * nr..], run(&a, &b, 0, false)[rows * nr..]);
                }
                let rev = |v: &[f32], w: usize| -> Vec<f32> {
                    v.chunks(w).rev().flatten().copied().collect()
                };
                let other = run(&rev(&a, mr), &rev(&b, nr), 1, accumulate);
                assert_ne!(other[..nr], full[..nr], "{isa:?}: the order went unseen");
            }
        }
    }

    /// Every supported tile against plain f64 sums, full and partial, overwrite and accumulate.
    /// Four B panels at once give each panel's lone-row tile bit for bit, stored and accumulated;
    /// the panels in another order must give other bits (the check sees a swap).
    #[test]
    fn four_panels_of_a_row_equal_four_lone_row_tiles() {
        if !Isa::Avx512.is_supported() {
            return;
        }
        let k = 301;
        let a = rand(41, k * 8);
        let b: Vec<Vec<f32>> = (0..4).map(|t| rand(42 + t, k * 32)).collect();
        for accumulate in [false, true] {
            let start = rand(47, 128);
            let mut want = start.clone();
            let mut got = start.clone();
            let mut swapped = start.clone();
            // SAFETY: AVX-512 checked above; the panels hold k steps, C 128 values.
            unsafe {
                for (t, bt) in b.iter().enumerate() {
                    let c = want.as_mut_ptr().add(t * 32);
                    avx512_1x32(k, a.as_ptr(), bt.as_ptr(), c, 32, accumulate);
                }
                row_of_4(
                    k,
                    a.as_ptr(),
                    std::array::from_fn(|t| b[t].as_ptr()),
                    got.as_mut_ptr(),
                    accumulate,
                );
                row_of_4(
                    k,
                    a.as_ptr(),
                    std::array::from_fn(|t| b[3 - t].as_ptr()),
                    swapped.as_mut_ptr(),
                    accumulate,
                );
            }
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "accumulate {accumulate}");
            assert_ne!(bits(&swapped), bits(&want), "a swap went unseen");
        }
    }

    #[test]
    fn tiles_match_plain_sums() {
        for &isa in Isa::supported() {
            let (mr, nr) = (isa.mr(), isa.nr());
            for k in [0usize, 1, 7, 33] {
                let a: Vec<f32> = (0..k * mr).map(|i| ((i * 7 % 13) as f32) - 6.0).collect();
                let b: Vec<f32> = (0..k * nr)
                    .map(|i| ((i * 5 % 11) as f32) * 0.5 - 2.0)
                    .collect();
                for (rows, cols) in [
                    (mr, nr),
                    (1, 1),
                    (1, nr),
                    (3, nr),
                    (mr - 1, nr - 3),
                    (mr, 1),
                ] {
                    for accumulate in [false, true] {
                        let ldc = nr + 5;
                        let mut c = vec![3.0f32; mr * ldc];
                        // SAFETY: panels and C are sized for the tile, the ISA is supported.
                        unsafe {
                            tile(
                                isa,
                                k,
                                a.as_ptr(),
                                b.as_ptr(),
                                c.as_mut_ptr(),
                                ldc,
                                rows,
                                cols,
                                accumulate,
                            )
                        };
                        for i in 0..mr {
                            for j in 0..ldc {
                                let mut want = if accumulate || i >= rows || j >= cols {
                                    3.0
                                } else {
                                    0.0
                                };
                                if i < rows && j < cols {
                                    want += (0..k)
                                        .map(|p| a[p * mr + i] as f64 * b[p * nr + j] as f64)
                                        .sum::<f64>()
                                        as f32;
                                }
                                assert_eq!(c[i * ldc + j], want, "{isa:?} k={k} ({i},{j})");
                            }
                        }
                    }
                }
            }
        }
    }
}
