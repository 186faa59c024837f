//! Elementwise rules with special cases, kept apart from the op plumbing in `elementwise`: erf / erfc,
//! sigmoid and softplus in their overflow-free forms, rounding half to even, PRelu's legacy
//! per-channel slope, Mod with fmod=0 on floats, and BitShift.
use super::elementwise::binary;
use super::*;

/// erf by its alternating Maclaurin series near zero and as 1 - erfc (continued fraction) beyond; a
/// different route from the reference oracle's all-positive series.
pub(crate) fn erf(x: f64) -> f64 {
    if x.is_nan() || x == 0.0 {
        return x;
    }
    let a = x.abs();
    let r = if a < 2.5 {
        erf_series(a)
    } else {
        1.0 - erfc_cf(a)
    };
    r.min(1.0).copysign(x)
}

/// 1 - erf(x), without the cancellation of forming it from erf where erf(x) is near 1 or -1: the
/// continued fraction from x = 1 on (accurate to ~2e-16 there; 1 - series would lose ~1e-11 of the
/// result near 2.5, where erfc is 4e-4), 1 - series below (erf(1) = 0.84: at most a factor ~6 lost).
pub(crate) fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        x
    } else if x < 0.0 {
        2.0 - erfc(-x)
    } else if x < 1.0 {
        1.0 - erf_series(x)
    } else {
        erfc_cf(x)
    }
}

/// Maclaurin series, 2/sqrt(pi) * sum (-1)^n a^(2n+1) / (n! (2n+1)), for 0 <= a < 2.5: the largest
/// term is under e^(6.25) ~ 520 times the result, so cancellation costs under 3 digits.
fn erf_series(a: f64) -> f64 {
    let x2 = a * a;
    let mut p = a; // (-1)^n a^(2n+1) / n!
    let mut sum = a;
    for n in 1..200 {
        p *= -x2 / n as f64;
        let t = p / (2 * n + 1) as f64;
        sum += t;
        if t.abs() < 1e-17 * sum.abs() {
            break;
        }
    }
    2.0 / std::f64::consts::PI.sqrt() * sum
}

/// erfc(a) for a >= 1 by its continued fraction, exp(-a^2)/sqrt(pi) / (a + (1/2)/(a + 1/(a +
/// (3/2)/(a + ...)))), evaluated from the tail; 400 levels converge to f64 precision from a ~ 0.75.
fn erfc_cf(a: f64) -> f64 {
    if a > 27.0 {
        return 0.0; // exp(-a^2) underflows
    }
    let mut t = a;
    for k in (1..=400).rev() {
        t = a + (k as f64 / 2.0) / t;
    }
    (-a * a).exp() / std::f64::consts::PI.sqrt() / t
}

/// Round half to even, without `round_ties_even`.
pub(crate) fn round_half_even(x: f64) -> f64 {
    if !x.is_finite() {
        return x;
    }
    let f = x.floor();
    let d = x - f;
    if d > 0.5 {
        f + 1.0
    } else if d < 0.5 || (f / 2.0).floor() * 2.0 == f {
        f
    } else {
        f + 1.0
    }
}

pub(crate) fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

pub(crate) fn softplus(x: f64) -> f64 {
    x.max(0.0) + (-x.abs()).exp().ln_1p()
}

/// PRelu. Since opset 7 the slope broadcasts unidirectionally onto X. Opsets 1 and 6 define a slope
/// "shared across channels" when it has one element and otherwise one value per channel: a [C] slope
/// then scales channel c (axis 1) of an [N, C, ...] X, read here by walking X's channel index.
pub(super) fn prelu(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let slope = input(node, inputs, 1)?;
    let per_channel = node.opset < 7
        && x.shape.len() >= 2
        && slope.shape.len() == 1
        && slope.len() > 1
        && slope.len() == x.shape[1];
    if per_channel {
        let inner: usize = x.shape[2..].iter().product();
        let c = x.shape[1];
        let data: Vec<f64> = x
            .data
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                if v < 0.0 {
                    v * slope.data[(i / inner.max(1)) % c]
                } else {
                    v
                }
            })
            .collect();
        let mag = data.iter().map(|v| v.abs()).collect();
        return Ok(vec![make_output(x.dtype, x.shape.clone(), data, mag)?]);
    }
    if broadcast_shape(&[&x.shape, &slope.shape])? != x.shape {
        return invalid(format!(
            "PRelu slope {:?} is not unidirectionally broadcastable to X {:?}",
            slope.shape, x.shape
        ));
    }
    binary(node, inputs)
}

/// Mod with fmod=0 on floats: the remainder taking the divisor's sign (numpy's `mod`), from the
/// Euclidean remainder (negating both operands for a negative divisor). Special values per
/// the specification: NaN for a NaN operand, an infinite x or a zero y; a zero result carries y's
/// sign; with an infinite y a finite x stays if the signs agree, else the result is y.
pub(super) fn floor_mod(x: f64, y: f64) -> f64 {
    if x.is_nan() || y.is_nan() || x.is_infinite() || y == 0.0 {
        return f64::NAN;
    }
    if y.is_infinite() {
        return if x == 0.0 || x.is_sign_negative() == y.is_sign_negative() {
            if x == 0.0 { 0.0f64.copysign(y) } else { x }
        } else {
            y
        };
    }
    // mod(x, y) = -mod(-x, -y), so only a positive divisor is needed: there the result is the
    // Euclidean remainder, in [0, y].
    let r = if y < 0.0 {
        -(-x).rem_euclid(-y)
    } else {
        x.rem_euclid(y)
    };
    if r == 0.0 { 0.0f64.copysign(y) } else { r }
}

/// BitShift in `dtype`'s width: integer arithmetic on the value, x * 2^s wrapped modulo 2^bits for a
/// left shift, floor(x / 2^s) for a right shift (an arithmetic shift for signed types). An amount
/// outside [0, bits) leaves only the sign fill: -1 for a right shift of a negative x, otherwise 0.
pub(super) fn shift(x: f64, y: f64, dtype: DType, left: bool) -> Result<f64, OracleError> {
    let Some((bits, signed)) = int_bits(dtype) else {
        return invalid(format!("BitShift on {dtype:?}"));
    };
    let xi = x as i128;
    let amount = y as i128;
    if amount < 0 || amount >= bits as i128 {
        return Ok(if !left && xi < 0 { -1.0 } else { 0.0 });
    }
    let p = 1i128 << amount;
    if left {
        let modulus = 1i128 << bits;
        let mut r = xi.wrapping_mul(p).rem_euclid(modulus);
        if signed && r >= modulus / 2 {
            r -= modulus;
        }
        Ok(r as f64)
    } else {
        Ok(xi.div_euclid(p) as f64)
    }
}

/// Hand-worked checks of the rules above, and of the other corpus readings settled with them (empty
/// ReduceMax / ReduceMin, SpaceToDepth's mode, ConvTranspose's output_shape, Resize's resized length).
#[cfg(test)]
mod tests {
    use super::super::Independent;
    use super::super::testkit::*;
    use super::*;
    use crate::{Attr, Oracle};

    #[test]
    fn floor_mod_by_hand() {
        assert_eq!(floor_mod(-4.5, 2.0), 1.5);
        assert_eq!(floor_mod(7.5, -2.0), -0.5);
        assert_eq!(floor_mod(-7.25, -2.0), -1.25);
        assert_eq!(floor_mod(-1e-20, -3.0), -1e-20);
        assert!(floor_mod(6.0, -3.0).is_sign_negative());
        assert!(floor_mod(-0.0, 5.0).is_sign_positive());
        assert_eq!(floor_mod(-3.0, f64::INFINITY), f64::INFINITY);
        assert_eq!(floor_mod(3.0, f64::INFINITY), 3.0);
        assert!(floor_mod(f64::NEG_INFINITY, 2.0).is_nan());
        assert!(floor_mod(2.0, -0.0).is_nan());
    }

    #[test]
    fn shift_by_hand() {
        let l = |x, y, t| shift(x, y, t, true).unwrap();
        let r = |x, y, t| shift(x, y, t, false).unwrap();
        assert_eq!(l(64.0, 1.0, DType::I8), -128.0);
        assert_eq!(l(-64.0, 1.0, DType::I8), -128.0);
        assert_eq!(l(1.0, 31.0, DType::I32), -2147483648.0);
        assert_eq!(l(3.0, 63.0, DType::U64), 2f64.powi(63));
        assert_eq!(l(255.0, 4.0, DType::U8), 240.0);
        assert_eq!(r(-8.0, 1.0, DType::I8), -4.0);
        assert_eq!(r(-1.0, 5.0, DType::I32), -1.0);
        assert_eq!(r(-8.0, 8.0, DType::I8), -1.0);
        assert_eq!(r(-8.0, -1.0, DType::I32), -1.0);
        assert_eq!(r(4.0, 33.0, DType::I32), 0.0);
        assert_eq!(l(-1.0, 127.0, DType::I8), 0.0);
    }

    #[test]
    fn prelu_before_opset_7_is_per_channel() {
        // X [1, 2, 2]: channel 0 slope 0.5, channel 1 slope 3.
        let x = f32v(&[1, 2, 2], vec![-2.0, 1.0, -1.0, -4.0]);
        let s = f32v(&[2], vec![0.5, 3.0]);
        let out = Independent
            .evaluate(&node("PRelu", 6, vec![]), &[x.clone(), s.clone()])
            .unwrap();
        assert_eq!(out[0].value.data, vec![-1.0, 1.0, -3.0, -12.0]);
        // From opset 7 a [2] slope aligns with the last axis instead.
        let out = Independent
            .evaluate(&node("PRelu", 7, vec![]), &[x, s])
            .unwrap();
        assert_eq!(out[0].value.data, vec![-1.0, 1.0, -0.5, -12.0]);
    }

    #[test]
    fn empty_max_min_space_to_depth_crd_convt_and_resize_lengths() {
        let empty = typed(DType::Bool, &[2, 0], vec![]);
        let axes = typed(DType::I64, &[1], vec![1.0]);
        let mx = Independent
            .evaluate(
                &node("ReduceMax", 18, vec![]),
                &[empty.clone(), axes.clone()],
            )
            .unwrap();
        let mn = Independent
            .evaluate(&node("ReduceMin", 18, vec![]), &[empty, axes.clone()])
            .unwrap();
        assert_eq!(
            (mx[0].value.data.clone(), mn[0].value.data.clone()),
            (vec![0.0; 2], vec![1.0; 2])
        );
        let e8 = typed(DType::I8, &[0], vec![]);
        let mx = Independent
            .evaluate(&node("ReduceMax", 18, vec![]), &[e8, None])
            .unwrap();
        assert_eq!(mx[0].value.data, vec![-128.0]);
        // SpaceToDepth CRD, blocksize 2, two channels: output channel 1 is channel 0 at block
        // offset (0, 1) (DCR would give channel 1 at offset (0, 0): 16, 18, 24, 26).
        let x: Vec<f64> = (0..32).map(|v| v as f64).collect();
        let n = node(
            "SpaceToDepth",
            28,
            vec![
                ("blocksize", Attr::Int(2)),
                ("mode", Attr::String("CRD".into())),
            ],
        );
        let out = Independent.evaluate(&n, &[f32v(&[1, 2, 4, 4], x)]).unwrap();
        assert_eq!(out[0].value.data[4..8], [1.0, 3.0, 9.0, 11.0]);
        // ConvTranspose 1-D, stride 2: full output [1, 10, 102, 20, 200]; output_shape 6 pads the
        // end (total padding -1 -> begin ceil(-1/2) = 0).
        let n = node(
            "ConvTranspose",
            11,
            vec![
                ("strides", Attr::Ints(vec![2])),
                ("output_shape", Attr::Ints(vec![6])),
            ],
        );
        let out = Independent
            .evaluate(
                &n,
                &[
                    f32v(&[1, 1, 2], vec![1.0, 2.0]),
                    f32v(&[1, 1, 3], vec![1.0, 10.0, 100.0]),
                ],
            )
            .unwrap();
        assert_eq!(out[0].value.data, vec![1.0, 10.0, 102.0, 20.0, 200.0, 0.0]);
        // Resize align_corners 4 -> floor(4 * 0.6) = 2: output 1 samples 3 / (2.4 - 1) = 15/7.
        let n = node(
            "Resize",
            13,
            vec![
                ("mode", Attr::String("linear".into())),
                (
                    "coordinate_transformation_mode",
                    Attr::String("align_corners".into()),
                ),
            ],
        );
        let out = Independent
            .evaluate(
                &n,
                &[
                    f32v(&[4], vec![1.0, 2.0, 3.0, 4.0]),
                    None,
                    f32v(&[1], vec![0.6]),
                ],
            )
            .unwrap();
        assert!(close(&out[0].value.data, &[1.0, 1.0 + 15.0 / 7.0], 1e-14));
    }
}
