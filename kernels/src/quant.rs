//! The 8-bit quantization loops over slices, on the widest vectors this CPU has: QuantizeLinear's
//! f32 path ([`quantize_u8`], [`quantize_i8`], by [`quantize_level`], the formula a fused
//! QuantizeLinear → DequantizeLinear pair also computes) and the integer products' requantization
//! ([`requantize_u8`], [`requantize_i8`]). Each is the scalar formula per element, written with
//! floats, selects and one conversion of an in-range integer value so that the loops vectorize;
//! called outside [`crate::simd_dispatch`] they were scalar (a QuantizeLinear of 800,000 values
//! took 0.65 ms, 0.8 ns a value, on this project's AVX-512 machine).
pub use crate::activation::{quantize_level, quantize_level_or};

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
