//! The 8-bit quantization loops over slices, on the widest vectors this CPU has: QuantizeLinear's
//! f32 path ([`quantize_u8`], [`quantize_i8`], by [`quantize_level`], the formula a fused
//! QuantizeLinear → DequantizeLinear pair, `crate::activation::FakeQuant`, also computes) and the integer products' requantization
//! ([`requantize_u8`], [`requantize_i8`]). Each is the scalar formula per element, written with
//! floats, selects and one conversion of an in-range integer value so that the loops vectorize;
//! called outside [`crate::simd_dispatch`] they were scalar (a QuantizeLinear of 800,000 values
//! took 0.65 ms, 0.8 ns a value, on this project's AVX-512 machine).

/// QuantizeLinear's level of `x`: `x / s` rounded to f32, rounded to an integer with ties to even,
/// plus the zero point `z`, saturated to `[lo, hi]`, as an f32 (an integer of at most 16 bits).
/// Ties to even come from adding and taking away 1.5·2²³, exact for |x/s| ≤ 2²², which the first
/// clamp ensures (anything beyond saturates a 16-bit type either way); a NaN quotient gives the
/// zero point, as converting NaN to an integer gives 0. No libm call and no integer conversion, so
/// loops over slices vectorize. The quotient of two f32 values rounded to f32 is their f64 quotient
/// rounded to f32 (53 ≥ 2·24 + 2), so this is also what an f64 evaluation of the formula gives.
#[inline(always)]
pub fn quantize_level(x: f32, s: f32, z: f32, lo: f32, hi: f32) -> f32 {
    quantize_level_or(x, s, z, lo, hi, z)
}

/// [`quantize_level`] with `nan` as the level of a NaN quotient (DynamicQuantizeLinear's is 0,
/// the reference's conversion of NaN after the zero point is added).
#[inline(always)]
pub fn quantize_level_or(x: f32, s: f32, z: f32, lo: f32, hi: f32, nan: f32) -> f32 {
    const SHIFT: f32 = 12_582_912.0;
    let r = (x / s).clamp(-4_194_304.0, 4_194_304.0);
    let r = (r + SHIFT) - SHIFT;
    let q = if r.is_nan() { nan } else { r + z };
    // Selects, not `f32::max`/`min` (whose NaN rule costs a comparison more a lane; q is a number).
    let q = if q < lo { lo } else { q };
    if q > hi { hi } else { q }
}

/// An integer-valued f32 `q` with |q| < 2²² as an i32, from the bits of `q + 1.5·2²³` (whose unit
/// is 1): `q as i32` gives the same value, but its saturating conversion does not vectorize (each
/// lane was compared and branched on).
#[inline(always)]
fn level_i32(q: f32) -> i32 {
    ((q + 12_582_912.0).to_bits() as i32).wrapping_sub(0x4B40_0000)
}

/// An integer-valued f64 `q` with |q| < 2⁵⁰ as an i64, from the bits of `q + 1.5·2⁵²`.
#[inline(always)]
pub(crate) fn level_i64(q: f64) -> i64 {
    ((q + 6_755_399_441_055_744.0).to_bits() as i64).wrapping_sub(0x4338_0000_0000_0000)
}

/// `dst[i] = quantize_level(src[i], s, z, lo, hi)` as u8 (`[lo, hi]` within u8's range).
pub fn quantize_u8(src: &[f32], dst: &mut [u8], s: f32, z: f32, lo: f32, hi: f32) {
    let src = &src[..dst.len()];
    crate::simd_dispatch!(
        |src: &[f32], dst: &mut [u8], s: f32, z: f32, lo: f32, hi: f32| {
            dst.iter_mut()
                .zip(src)
                .for_each(|(d, &x)| *d = level_i32(quantize_level(x, s, z, lo, hi)) as u8)
        }
    )
}

/// `dst[i] = quantize_level(src[i], s, z, lo, hi)` as i8 (`[lo, hi]` within i8's range).
pub fn quantize_i8(src: &[f32], dst: &mut [i8], s: f32, z: f32, lo: f32, hi: f32) {
    let src = &src[..dst.len()];
    crate::simd_dispatch!(
        |src: &[f32], dst: &mut [i8], s: f32, z: f32, lo: f32, hi: f32| {
            dst.iter_mut()
                .zip(src)
                .for_each(|(d, &x)| *d = level_i32(quantize_level(x, s, z, lo, hi)) as i8)
        }
    )
}

/// DynamicQuantizeLinear's loop: [`quantize_level_or`] to `[0, 255]` with NaN at 0.
pub fn dynamic_quantize_u8(src: &[f32], dst: &mut [u8], s: f32, z: f32) {
    let src = &src[..dst.len()];
    crate::simd_dispatch!(|src: &[f32], dst: &mut [u8], s: f32, z: f32| {
        dst.iter_mut()
            .zip(src)
            .for_each(|(d, &x)| *d = level_i32(quantize_level_or(x, s, z, 0.0, 255.0, 0.0)) as u8)
    })
}

/// `saturate(round_ties_even((sum + bias) · mult + zp))` to `[lo, hi]`, in f64: the sum converts
/// exactly, the product and the sum are each rounded once, ties go to even by adding and taking
/// away 1.5·2⁵² (exact below 2⁵⁰, and every value past ±2⁵⁰ saturates an 8-bit type either way),
/// and a NaN gives 0, as converting NaN to an integer does.
#[inline(always)]
pub fn requantize_level(sum: i32, bias: f64, mult: f64, zp: f64, lo: f64, hi: f64) -> f64 {
    const SHIFT: f64 = 6_755_399_441_055_744.0;
    const LIMIT: f64 = 1_125_899_906_842_624.0;
    let v = ((sum as f64 + bias) * mult + zp).clamp(-LIMIT, LIMIT);
    let r = (v + SHIFT) - SHIFT;
    // Selects, not `f64::max`/`min` (whose NaN rule costs a comparison more a lane).
    let r = if r.is_nan() { 0.0 } else { r };
    let r = if r < lo { lo } else { r };
    if r > hi { hi } else { r }
}

/// [`requantize_level`] of each sum as u8 (`[lo, hi]` within u8's range).
pub fn requantize_u8(
    sums: &[i32],
    dst: &mut [u8],
    bias: f64,
    mult: f64,
    zp: f64,
    lo: f64,
    hi: f64,
) {
    let sums = &sums[..dst.len()];
    crate::simd_dispatch!(|sums: &[i32],
                           dst: &mut [u8],
                           bias: f64,
                           mult: f64,
                           zp: f64,
                           lo: f64,
                           hi: f64| {
        dst.iter_mut()
            .zip(sums)
            .for_each(|(d, &v)| *d = level_i64(requantize_level(v, bias, mult, zp, lo, hi)) as u8)
    })
}

/// [`requantize_level`] of each sum as i8 (`[lo, hi]` within i8's range).
pub fn requantize_i8(
    sums: &[i32],
    dst: &mut [i8],
    bias: f64,
    mult: f64,
    zp: f64,
    lo: f64,
    hi: f64,
) {
    let sums = &sums[..dst.len()];
    crate::simd_dispatch!(|sums: &[i32],
                           dst: &mut [i8],
                           bias: f64,
                           mult: f64,
                           zp: f64,
                           lo: f64,
                           hi: f64| {
        dst.iter_mut()
            .zip(sums)
            .for_each(|(d, &v)| *d = level_i64(requantize_level(v, bias, mult, zp, lo, hi)) as i8)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// QuantizeLinear's level by integers, as its general path computes it: the f32 quotient,
    /// rounded with ties to even, converted (NaN to 0, saturating), plus the zero point, clamped.
    fn level_by_integers(x: f32, s: f32, z: i32, lo: i32, hi: i32) -> i32 {
        ((x / s).round_ties_even() as i32)
            .saturating_add(z)
            .clamp(lo, hi)
    }

    /// `quantize_level` (floats only, so that it vectorizes) is the integer formula on ties, their
    /// neighbours, values past every range, NaN and the infinities, for 8- and 16-bit types; a
    /// level rounding ties away from zero is caught.
    #[test]
    fn the_float_level_is_the_integer_level() {
        let cases = [
            (0.05f32, 128, 0, 255),
            (0.0731, -3, -128, 127),
            (0.001, 30_000, 0, 65_535),
            (0.5, -7, -32_768, 32_767),
            (3e-6, 0, -128, 127),
        ];
        for (s, z, lo, hi) in cases {
            let mut xs = vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 1e-40];
            for k in -70_000..70_000 {
                let tie = (k as f32 + 0.5) * s;
                xs.extend([tie.next_down(), tie, tie.next_up(), k as f32 * s * 1.37]);
            }
            let mut away = 0;
            for &x in &xs {
                let want = level_by_integers(x, s, z, lo, hi);
                let got = quantize_level(x, s, z as f32, lo as f32, hi as f32);
                assert_eq!(got, want as f32, "x {x} scale {s} zero {z}");
                let r = x / s;
                if r.is_finite() && r.abs() < 1e6 {
                    let rounded_away = ((r.round() + z as f32).clamp(lo as f32, hi as f32)) as i32;
                    away += (rounded_away != want) as usize;
                }
            }
            assert!(
                away > 0,
                "no tie told the rounding rules apart at scale {s}"
            );
        }
    }

    /// The requantization as the general path computes it: f64, libm's ties to even, a saturating
    /// conversion, then the clamp.
    fn by_integers(sum: i32, bias: f64, mult: f64, zp: f64, lo: i64, hi: i64) -> i64 {
        (((sum as f64 + bias) * mult + zp).round_ties_even() as i64).clamp(lo, hi)
    }

    /// The slice loops equal the scalar formulas, and those the integer forms, on every lane and
    /// the tails: sums at exact ties (k + ½ after the multiplier), both ends of each range, the
    /// extremes of i32, and a NaN multiplier.
    #[test]
    fn slices_equal_the_integer_formulas() {
        let mut sums: Vec<i32> = (-3000..3000).map(|k| k * 37).collect();
        sums.extend([i32::MIN, i32::MAX, 0, 1, -1]);
        for (mult, bias, zp) in [
            (0.5, 0.0, 128.0),
            (1.0 / 64.0, 32.0, -3.0),
            (2.5e-3, -7.0, 0.0),
        ] {
            for (lo, hi) in [(0i64, 255i64), (-128, 127)] {
                let want: Vec<i64> = sums
                    .iter()
                    .map(|&v| by_integers(v, bias, mult, zp, lo, hi))
                    .collect();
                let mut u = vec![0u8; sums.len()];
                let mut i = vec![0i8; sums.len()];
                if lo == 0 {
                    requantize_u8(&sums, &mut u, bias, mult, zp, 0.0, 255.0);
                    assert_eq!(u.iter().map(|&v| v as i64).collect::<Vec<_>>(), want);
                } else {
                    requantize_i8(&sums, &mut i, bias, mult, zp, -128.0, 127.0);
                    assert_eq!(i.iter().map(|&v| v as i64).collect::<Vec<_>>(), want);
                }
            }
        }
        let mut u = vec![9u8; 3];
        requantize_u8(&[1, 2, 3], &mut u, 0.0, f64::NAN, 0.0, 0.0, 255.0);
        assert_eq!(u, [0, 0, 0]);
    }

    #[test]
    fn quantized_slices_equal_the_level() {
        let s = 0.1f32;
        let mut xs: Vec<f32> = (-400..400).map(|k| (k as f32 + 0.5) * s).collect();
        xs.extend([f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0, 1e30]);
        let mut u = vec![0u8; xs.len()];
        quantize_u8(&xs, &mut u, s, 128.0, 0.0, 255.0);
        let mut i = vec![0i8; xs.len()];
        quantize_i8(&xs, &mut i, s, -3.0, -128.0, 127.0);
        for (k, &x) in xs.iter().enumerate() {
            assert_eq!(u[k] as f32, quantize_level(x, s, 128.0, 0.0, 255.0), "{x}");
            assert_eq!(
                i[k] as f32,
                quantize_level(x, s, -3.0, -128.0, 127.0),
                "{x}"
            );
        }
    }
}
