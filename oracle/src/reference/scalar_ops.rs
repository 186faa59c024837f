//! Scalar rules of the binary ops whose definitions have special cases: Mod (both `fmod` settings),
//! BitShift (widths, signed types, out-of-range amounts) and PRelu's legacy per-channel slope.
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

#[cfg(test)]
mod tests {
    use super::*;

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
