//! Special functions and the NaN rules of the elementwise definitions: erf, erfc, softplus, and the
//! `max` / `min` the specification's formulas use (numpy's `maximum` / `minimum`, where NaN wins,
//! unlike `f64::max`, which drops it).

/// `max(a, b)` as ONNX formulas mean it: NaN if either is NaN.
pub(super) fn max_nan(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// `min(a, b)` as ONNX formulas mean it: NaN if either is NaN.
pub(super) fn min_nan(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

/// erf(x) = 2/sqrt(pi) * exp(-x^2) * sum_{n>=0} 2^n x^(2n+1) / (1*3*...*(2n+1)): all terms positive, so
/// no cancellation; erf(x) rounds to ±1 in f64 beyond |x| = 6.
pub(crate) fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    if a >= 6.0 {
        return x.signum();
    }
    let mut term = a; // n = 0
    let mut sum = a;
    let mut n = 0.0f64;
    while n < 1000.0 {
        n += 1.0;
        term *= 2.0 * a * a / (2.0 * n + 1.0);
        sum += term;
        if term <= sum * 1e-18 {
            break;
        }
    }
    let r = 2.0 / std::f64::consts::PI.sqrt() * (-a * a).exp() * sum;
    r.min(1.0) * x.signum()
}

/// erfc(x) = 1 - erf(x), without the cancellation of that difference where erf(x) is near 1.
///
/// For x^2 >= 1.5, erfc(x) = Γ(1/2, x^2) / Γ(1/2) with the upper incomplete gamma function's Legendre
/// continued fraction, Γ(a, t) = e^(-t) t^a / (t + 1 - a - 1(1 - a) / (t + 3 - a - 2(2 - a) /
/// (t + 5 - a - ...))), evaluated front to back by the modified Lentz method (Numerical Recipes'
/// `gcf`); Γ(1/2) = sqrt(pi). Below, 1 - erf(x) loses at most a factor ~12 to cancellation
/// (erf(1.22) = 0.92; negative x have no cancellation at all).
pub(super) fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let t = x * x;
    if t < 1.5 || x < 0.0 {
        return 1.0 - erf(x);
    }
    if x > 27.0 {
        return 0.0; // e^(-x^2) is below the smallest f64
    }
    const TINY: f64 = 1e-300;
    let a = 0.5;
    let mut b = t + 1.0 - a;
    let mut c = 1.0 / TINY;
    let mut d = 1.0 / b;
    let mut h = d;
    for i in 1..1000 {
        let an = -(i as f64) * (i as f64 - a);
        b += 2.0;
        d = an * d + b;
        if d.abs() < TINY {
            d = TINY;
        }
        c = b + an / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        let del = d * c;
        h *= del;
        if (del - 1.0).abs() < 1e-17 {
            break;
        }
    }
    // e^(-t) t^(1/2) h / sqrt(pi), t^(1/2) = x.
    (-t).exp() * x * h / std::f64::consts::PI.sqrt()
}

/// ln(exp(x) + 1), written so that it does not overflow for large x.
pub(super) fn softplus(x: f64) -> f64 {
    if x > 30.0 {
        x + (-x).exp().ln_1p()
    } else {
        x.exp().ln_1p()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_known_values() {
        // Abramowitz & Stegun table values.
        assert!((erf(0.5) - 0.520_499_877_813_046_5).abs() < 1e-15);
        assert!((erf(1.0) - 0.842_700_792_949_714_9).abs() < 1e-15);
        assert!((erf(-2.0) + 0.995_322_265_018_952_7).abs() < 1e-15);
        assert_eq!(erf(0.0), 0.0);
    }

    #[test]
    fn erfc_known_values() {
        // (x, erfc(x)) from a C library's erfc, on both sides of the switch to the continued fraction.
        for (x, want) in [
            (0.5, 0.479_500_122_186_953_5),
            (1.0, 0.157_299_207_050_285_13),
            (1.3, 0.065_992_055_059_347_55),
            (2.0, 0.004_677_734_981_047_265),
            (5.0, 1.537_459_794_428_035_1e-12),
            (10.0, 2.088_487_583_762_545e-45),
            (12.153_3, 3.302_212_075_358_170_4e-66),
            (26.0, 5.663_192_408_856_143e-296),
        ] {
            let got = erfc(x);
            assert!(
                (got - want).abs() <= 1e-14 * want,
                "erfc({x}) = {got:e}, want {want:e}"
            );
        }
        assert!((erfc(-1.0) - 1.842_700_792_949_715).abs() < 1e-15);
        assert!(erfc(f64::NAN).is_nan());
        assert_eq!(erfc(30.0), 0.0);
    }

    #[test]
    fn nan_wins_max_and_min() {
        assert!(max_nan(f64::NAN, 0.0).is_nan() && max_nan(0.0, f64::NAN).is_nan());
        assert!(min_nan(f64::NAN, 1.0).is_nan() && min_nan(1.0, f64::NAN).is_nan());
        assert_eq!((max_nan(-1.0, 0.0), min_nan(-1.0, 0.0)), (0.0, -1.0));
    }
}
