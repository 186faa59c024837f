//! Arbitration between an engine and the two oracles (as PyTorch's float64 reference helper does):
//! both oracles agree and the engine differs → the engine is wrong; the oracles disagree → a human must
//! look, and the case is never passed.
use crate::Output;

/// The outcome of judging one output.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Agree,
    EngineWrong {
        index: usize,
        engine: f64,
        oracle: f64,
        allowed: f64,
    },
    OraclesDisagree {
        index: usize,
        reference: f64,
        independent: f64,
    },
}

/// Unit roundoff of the engine's element type, by name (`float32`, `float16`, ...). Integer and bool
/// types are exact (0).
pub fn eps(dtype: &str) -> f64 {
    match dtype {
        "float64" => f64::EPSILON,
        "float32" => f32::EPSILON as f64,
        "float16" => 9.765_625e-4,
        "bfloat16" => 7.812_5e-3,
        _ => 0.0,
    }
}

/// How far an engine computing in `eps` precision may be from the exact result of combining terms of
/// total magnitude `magnitude`: `C_ENGINE · eps · magnitude`, plus one rounding of the result itself.
/// `C_ENGINE = 64` covers the √(terms) growth of a blocked or pairwise sum up to ~4000 terms taken at
/// their full magnitude, which in practice bounds far longer sums (errors cancel; Σ|a·b| overstates).
pub const C_ENGINE: f64 = 64.0;

/// Half the spacing of the smallest (subnormal) values of the type with unit roundoff `eps`: the
/// absolute error of rounding a result that underflows (e^-104 in f32 is 6.8e-46, which rounds to 0).
pub fn subnormal_step(eps: f64) -> f64 {
    if eps == f32::EPSILON as f64 {
        f32::from_bits(1) as f64 / 2.0
    } else if eps == 9.765_625e-4 {
        5.960_464_477_539_063e-8 / 2.0
    } else if eps == 7.812_5e-3 {
        9.183_549_615_799_121e-41 / 2.0
    } else {
        f64::MIN_POSITIVE
    }
}

/// Both oracles compute in f64: they may differ only by f64 rounding of the same terms.
pub const C_ORACLES: f64 = 1e4;

fn same(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b
}

/// Judges `engine` (its values as f64, computed in a type with unit roundoff `engine_eps`) against the
/// two oracles' outputs for the same node and inputs.
pub fn arbitrate(
    engine: &[f64],
    engine_eps: f64,
    reference: &Output,
    independent: &Output,
) -> Verdict {
    let (r, i) = (&reference.value.data, &independent.value.data);
    for k in 0..r.len().max(i.len()) {
        let (Some(&a), Some(&b)) = (r.get(k), i.get(k)) else {
            return Verdict::OraclesDisagree {
                index: k,
                reference: r.get(k).copied().unwrap_or(f64::NAN),
                independent: i.get(k).copied().unwrap_or(f64::NAN),
            };
        };
        let mag = reference
            .magnitude
            .get(k)
            .copied()
            .unwrap_or(0.0)
            .max(independent.magnitude.get(k).copied().unwrap_or(0.0))
            .max(a.abs());
        let oracle_bound = C_ORACLES * f64::EPSILON * mag;
        if !same(a, b) && !((a - b).abs() <= oracle_bound) {
            return Verdict::OraclesDisagree {
                index: k,
                reference: a,
                independent: b,
            };
        }
    }
    if engine.len() != r.len() {
        return Verdict::EngineWrong {
            index: engine.len().min(r.len()),
            engine: f64::NAN,
            oracle: f64::NAN,
            allowed: 0.0,
        };
    }
    for (k, (&e, &o)) in engine.iter().zip(r).enumerate() {
        let mag = reference
            .magnitude
            .get(k)
            .copied()
            .unwrap_or(0.0)
            .max(o.abs());
        let allowed =
            C_ENGINE * engine_eps * mag + engine_eps * o.abs() + subnormal_step(engine_eps);
        let ok = if o.is_nan() {
            e.is_nan()
        } else if o.is_infinite() {
            e == o
        } else {
            (e - o).abs() <= allowed
        };
        if !ok {
            return Verdict::EngineWrong {
                index: k,
                engine: e,
                oracle: o,
                allowed,
            };
        }
    }
    Verdict::Agree
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Value};

    fn out(data: Vec<f64>, magnitude: Vec<f64>) -> Output {
        Output {
            value: Value::new(DType::F32, vec![data.len()], data).unwrap(),
            magnitude,
        }
    }

    #[test]
    fn verdicts() {
        let r = out(vec![1.0, -2.5, 1e-3], vec![4.0, 2.5, 50.0]);
        let i = out(vec![1.0 + 1e-15, -2.5, 1e-3], vec![4.0, 2.5, 50.0]);
        let e32 = eps("float32");
        assert_eq!(
            arbitrate(&[1.000_000_1, -2.5, 1.2e-3], e32, &r, &i),
            Verdict::Agree
        );
        assert!(matches!(
            arbitrate(&[1.01, -2.5, 1e-3], e32, &r, &i),
            Verdict::EngineWrong { index: 0, .. }
        ));
        let j = out(vec![1.0, -2.4, 1e-3], vec![4.0, 2.5, 50.0]);
        assert!(matches!(
            arbitrate(&[1.0, -2.5, 1e-3], e32, &r, &j),
            Verdict::OraclesDisagree { index: 1, .. }
        ));
    }

    #[test]
    fn nan_and_infinity_must_match_exactly() {
        let r = out(vec![f64::NAN, f64::INFINITY], vec![1.0, 1.0]);
        assert_eq!(
            arbitrate(&[f64::NAN, f64::INFINITY], eps("float32"), &r, &r.clone()),
            Verdict::Agree
        );
        assert!(matches!(
            arbitrate(&[0.0, f64::INFINITY], eps("float32"), &r, &r.clone()),
            Verdict::EngineWrong { index: 0, .. }
        ));
        assert!(matches!(
            arbitrate(&[f64::NAN, f64::MAX], eps("float32"), &r, &r.clone()),
            Verdict::EngineWrong { index: 1, .. }
        ));
    }

    #[test]
    fn integers_are_exact() {
        let r = out(vec![3.0, 4.0], vec![0.0, 0.0]);
        assert!(matches!(
            arbitrate(&[3.0, 5.0], eps("int64"), &r, &r.clone()),
            Verdict::EngineWrong { index: 1, .. }
        ));
    }
}
