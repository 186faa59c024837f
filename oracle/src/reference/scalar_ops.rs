//! Scalar rules of the binary ops whose definitions have special cases: Mod (both `fmod` settings),
//! BitShift (widths, signed types, out-of-range amounts), PRelu's legacy per-channel slope and Cast.
use crate::{DType, OracleError, Value};

/// Mod with `fmod=0` on floats, as the specification states it: `A - floor(A / B) * B`, the result
/// taking the sign of `B`, with the listed special cases. The remainder is formed exactly (IEEE `%`
/// is exact) and moved into `B`'s sign by one addition, rather than through the rounded quotient.
pub(super) fn mod_floor_float(x: f64, y: f64) -> f64 {
    // "If either argument is NaN, NaN is returned."
    if x.is_nan() || y.is_nan() {
        return f64::NAN;
    }
    // "If x is ±∞ and y is not NaN, NaN is returned."
    if x.is_infinite() {
        return f64::NAN;
    }
    // "If y is ±0 and x is not NaN, NaN is returned."
    if y == 0.0 {
        return f64::NAN;
    }
    // "If x is ±0 and y is nonzero, ±0 with the sign of y is returned."
    if x == 0.0 {
        return 0.0f64.copysign(y);
    }
    // "If y is ±∞ and x is finite and nonzero, x is returned when x and y have the same sign;
    //  otherwise, y is returned."
    if y.is_infinite() {
        return if (x < 0.0) == (y < 0.0) { x } else { y };
    }
    let r = x % y; // sign of x, |r| < |y|, exact
    if r == 0.0 {
        0.0f64.copysign(y)
    } else if (r < 0.0) != (y < 0.0) {
        r + y
    } else {
        r
    }
}

/// Mod with `fmod=0` on integers: the remainder with the divisor's sign.
pub(super) fn mod_floor_int(x: f64, y: f64) -> Result<f64, OracleError> {
    if y == 0.0 {
        return Err(OracleError::Invalid("integer Mod by zero".into()));
    }
    let (a, b) = (x as i128, y as i128);
    let mut r = a % b;
    if r != 0 && ((r < 0) != (b < 0)) {
        r += b;
    }
    Ok(r as f64)
}

/// Bit width and signedness of an integer type.
fn int_type(dt: DType) -> Option<(u32, bool)> {
    Some(match dt {
        DType::U8 => (8, false),
        DType::U16 => (16, false),
        DType::U32 => (32, false),
        DType::U64 => (64, false),
        DType::I8 => (8, true),
        DType::I16 => (16, true),
        DType::I32 => (32, true),
        DType::I64 => (64, true),
        _ => return None,
    })
}

/// BitShift of `x` by `y` in type `dt`, as the specification (opset 28) states it: right shifts of
/// signed values are arithmetic; left shifts discard the bits moved past the top of the type; a
/// negative amount, or one at least the width, gives what the sign extension alone produces (-1 for a
/// right shift of a negative value, 0 otherwise).
pub(super) fn bitshift(x: f64, y: f64, dt: DType, left: bool) -> Result<f64, OracleError> {
    let (bits, signed) = int_type(dt)
        .ok_or_else(|| OracleError::Invalid(format!("BitShift on {dt:?} (integers only)")))?;
    let xv = x as i128;
    if y < 0.0 || y >= bits as f64 {
        return Ok(if !left && xv < 0 { -1.0 } else { 0.0 });
    }
    let s = y as u32;
    let r = if left {
        // Shift the two's-complement bit pattern, keep the low `bits` bits, read them back in the type.
        let m: u128 = (1u128 << bits) - 1;
        let u = ((xv as u128) << s) & m;
        if signed && u >> (bits - 1) == 1 {
            (u as i128 - (1i128 << bits)) as f64
        } else {
            u as f64
        }
    } else {
        // i128 `>>` is arithmetic: floor(x / 2^s), the sign filling the vacated bits.
        (xv >> s) as f64
    };
    Ok(r)
}

/// PRelu's slope as it broadcasts onto `x`. Before opset 7 the slope was per channel: a 1-D slope of
/// C > 1 values applies along axis 1 of X (shape [N, C, ...]); "if slope is of size 1, the value is
/// shared across different channels". From opset 7 it broadcasts unidirectionally (numpy rules).
pub(super) fn prelu_slope(opset: i64, x: &Value, slope: &Value) -> Value {
    if opset < 7 && slope.shape.len() == 1 && slope.len() > 1 && x.shape.len() >= 2 {
        // [C] -> [C, 1, ..., 1] (rank(X) - 1 dims), which numpy broadcasting places on axis 1.
        let mut shape = vec![1usize; x.shape.len() - 1];
        shape[0] = slope.len();
        return Value {
            dtype: slope.dtype,
            shape,
            data: slope.data.clone(),
        };
    }
    slope.clone()
}

/// Cast to a float type: round to nearest, ties to even, at the target's precision (subnormals
/// included), and ±infinity beyond its range ("floating point: +/- infinity if OOR"). Worked on the
/// f64 bit pattern: the 53-bit significand loses its low bits, rounded on the dropped remainder.
pub(super) fn round_to_float(v: f64, dt: DType) -> f64 {
    // (explicit fraction bits, minimum normal exponent, largest finite value)
    let (frac, emin, max): (u32, i32, f64) = match dt {
        DType::F32 => (23, -126, f32::MAX as f64),
        DType::F16 => (10, -14, 65504.0),
        DType::BF16 => (7, -126, (2.0 - 2f64.powi(-7)) * 2f64.powi(127)),
        _ => return v,
    };
    if !v.is_finite() || v == 0.0 {
        return v;
    }
    let bits = v.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    if biased == 0 {
        // An f64 subnormal is below 2^-1022, under half the smallest subnormal of every target.
        return 0.0f64.copysign(v);
    }
    let exp = biased - 1023; // 2^exp <= |v| < 2^(exp+1)
    let sig: u64 = (bits & ((1u64 << 52) - 1)) | (1u64 << 52);
    // Bits to drop: the fraction bits the target lacks, and more below its normal range.
    let drop = (52 - frac) as i64 + (emin - exp).max(0) as i64;
    if drop > 54 {
        return 0.0f64.copysign(v);
    }
    let drop = drop as u32;
    let mut q = sig >> drop;
    let rem = sig & ((1u64 << drop) - 1);
    let half = 1u64 << (drop - 1);
    if rem > half || (rem == half && q & 1 == 1) {
        q += 1;
    }
    let r = q as f64 * 2f64.powi(exp - 52 + drop as i32);
    let r = if r > max { f64::INFINITY } else { r };
    r.copysign(v)
}

/// One element of Cast (`elementwise::cast_to`): `v`, held as `from`, converted to `to`.
pub(super) fn cast_one(v: f64, from: DType, to: DType) -> Result<f64, OracleError> {
    Ok(if to == DType::Bool {
        if v != 0.0 { 1.0 } else { 0.0 }
    } else if to.is_float() {
        round_to_float(v, to)
    } else {
        if !v.is_finite() {
            return Err(OracleError::Unsupported(format!(
                "Cast of {v} to an integer type is undefined"
            )));
        }
        let t = v.trunc();
        let (lo, hi) = match to {
            DType::I8 => (-128.0, 127.0),
            DType::U8 => (0.0, 255.0),
            DType::I16 => (-32768.0, 32767.0),
            DType::U16 => (0.0, 65535.0),
            DType::I32 => (-2147483648.0, 2147483647.0),
            DType::U32 => (0.0, 4294967295.0),
            DType::I64 => (-9.223_372_036_854_776e18, 9.223_372_036_854_776e18),
            _ => (0.0, 1.8446744073709552e19),
        };
        if from.is_float() && (t < lo || t > hi) {
            return Err(OracleError::Unsupported(format!(
                "Cast of {v} out of range of {to:?} is undefined"
            )));
        }
        super::wrap_int(t, to)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_to_float_by_hand() {
        // f16 has 10 fraction bits: 1 + 2^-11 is a tie between 1 and 1 + 2^-10 -> even (1).
        assert_eq!(round_to_float(1.0 + 2f64.powi(-11), DType::F16), 1.0);
        // 1 + 3 * 2^-11 ties between 1 + 2^-10 (odd) and 1 + 2^-9 (even) -> 1 + 2^-9.
        assert_eq!(
            round_to_float(1.0 + 3.0 * 2f64.powi(-11), DType::F16),
            1.0 + 2f64.powi(-9)
        );
        assert_eq!(
            round_to_float(0.4789254665374756, DType::F16),
            0.47900390625
        );
        assert_eq!(round_to_float(0.4789254665374756, DType::BF16), 0.478515625);
        assert_eq!(
            round_to_float(0.1, DType::F32),
            0.1f32 as f64 // Rust's own f64 -> f32 conversion rounds to nearest even
        );
        // Range: f16 max 65504; 65519 rounds down to it, 65520 (a tie, odd side) overflows.
        assert_eq!(round_to_float(65519.0, DType::F16), 65504.0);
        assert_eq!(round_to_float(-65520.0, DType::F16), f64::NEG_INFINITY);
        assert_eq!(round_to_float(1e39, DType::F32), f64::INFINITY);
        // Subnormals: f16's smallest is 2^-24; 2^-25 is a tie with 0 -> 0; 3 * 2^-26 -> 2^-24.
        assert_eq!(round_to_float(2f64.powi(-25), DType::F16), 0.0);
        assert_eq!(
            round_to_float(3.0 * 2f64.powi(-26), DType::F16),
            2f64.powi(-24)
        );
        assert_eq!(
            round_to_float(5.0 * 2f64.powi(-24), DType::F16),
            5.0 * 2f64.powi(-24)
        );
        assert!(round_to_float(-1e-300, DType::F32).is_sign_negative());
        assert_eq!(round_to_float(1e-300, DType::F32), 0.0);
        assert!(round_to_float(f64::NAN, DType::BF16).is_nan());
        assert_eq!(round_to_float(0.1, DType::F64), 0.1);
    }

    #[test]
    fn mod_floor_float_signs_and_special_cases() {
        // Hand-worked: -4.5 mod 2 = 1.5 (= -4.5 - (-3)*2); 7.5 mod -2 = -0.5; 5 mod 8 = 5.
        assert_eq!(mod_floor_float(-4.5, 2.0), 1.5);
        assert_eq!(mod_floor_float(7.5, -2.0), -0.5);
        assert_eq!(mod_floor_float(5.0, 8.0), 5.0);
        assert_eq!(mod_floor_float(-7.25, -2.0), -1.25);
        // Zero results take the divisor's sign.
        assert!(mod_floor_float(4.0, -2.0).is_sign_negative());
        assert!(mod_floor_float(-0.0, 2.0).is_sign_positive());
        assert!(mod_floor_float(0.0, -2.0).is_sign_negative());
        // Infinite divisor: x when the signs agree, else the divisor.
        assert_eq!(mod_floor_float(3.0, f64::INFINITY), 3.0);
        assert_eq!(mod_floor_float(-3.0, f64::INFINITY), f64::INFINITY);
        assert_eq!(mod_floor_float(1.0, f64::NEG_INFINITY), f64::NEG_INFINITY);
        assert_eq!(mod_floor_float(-1.0, f64::NEG_INFINITY), -1.0);
        for (x, y) in [
            (f64::INFINITY, 2.0),
            (1.0, 0.0),
            (1.0, -0.0),
            (f64::NAN, 2.0),
            (1.0, f64::NAN),
        ] {
            assert!(mod_floor_float(x, y).is_nan(), "{x} mod {y}");
        }
    }

    #[test]
    fn mod_floor_int_by_hand() {
        assert_eq!(mod_floor_int(-4.0, 3.0).unwrap(), 2.0);
        assert_eq!(mod_floor_int(7.0, -3.0).unwrap(), -2.0);
        assert_eq!(mod_floor_int(-7.0, -3.0).unwrap(), -1.0);
        assert!(mod_floor_int(1.0, 0.0).is_err());
    }

    #[test]
    fn bitshift_by_hand() {
        let l = |x, y, dt| bitshift(x, y, dt, true).unwrap();
        let r = |x, y, dt| bitshift(x, y, dt, false).unwrap();
        assert_eq!(l(16.0, 1.0, DType::U8), 32.0);
        assert_eq!(l(200.0, 1.0, DType::U8), 144.0); // 400 - 256
        assert_eq!(l(64.0, 1.0, DType::I8), -128.0);
        assert_eq!(l(1.0, 7.0, DType::I8), -128.0);
        assert_eq!(l(-64.0, 1.0, DType::I8), -128.0);
        assert_eq!(l(1.0, 31.0, DType::I32), -2147483648.0);
        assert_eq!(r(-8.0, 1.0, DType::I8), -4.0);
        assert_eq!(r(-1.0, 1.0, DType::I32), -1.0);
        assert_eq!(r(-128.0, 1.0, DType::I8), -64.0);
        assert_eq!(r(16.0, 3.0, DType::U16), 2.0);
        // Out-of-range amounts.
        assert_eq!(r(-8.0, 8.0, DType::I8), -1.0);
        assert_eq!(r(4.0, 9.0, DType::I8), 0.0);
        assert_eq!(r(-1.0, -16.0, DType::I8), -1.0);
        assert_eq!(l(-8.0, 32.0, DType::I32), 0.0);
        assert_eq!(l(4.0, -1.0, DType::I32), 0.0);
        assert_eq!(l(1.0, 64.0, DType::U64), 0.0);
        assert!(bitshift(1.0, 1.0, DType::F32, true).is_err());
    }

    #[test]
    fn prelu_legacy_slope_goes_on_axis_1() {
        let x = Value::new(DType::F32, vec![2, 3, 4], vec![0.0; 24]).unwrap();
        let s = Value::new(DType::F32, vec![3], vec![0.1, 0.2, 0.3]).unwrap();
        assert_eq!(prelu_slope(6, &x, &s).shape, vec![3, 1]);
        assert_eq!(prelu_slope(7, &x, &s).shape, vec![3]);
        let one = Value::new(DType::F32, vec![1], vec![0.1]).unwrap();
        assert_eq!(prelu_slope(6, &x, &one).shape, vec![1]);
    }
}
