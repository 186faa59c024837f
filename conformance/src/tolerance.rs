//! The tolerance policy: how close an engine's output must be to the expected one. All numeric
//! comparison in the suite goes through [`compare`].
//!
//! Defaults, and why:
//! - Floats: `|actual - expected| <= atol + rtol * |expected|` with `rtol = 1e-3`, `atol = 1e-7`, the
//!   bound the ONNX backend test runner itself applies to this corpus (the expected values come from its
//!   numpy reference, computed in a different order and sometimes in higher precision).
//! - NaN matches NaN; an infinity matches only the same infinity.
//! - Integers, booleans and strings match exactly; dtypes and shapes must be identical.
//! - Per-case overrides (optionally for some engines only) are listed in [`OVERRIDES`], each with its
//!   reason. An override may also accept a float element within [`Tolerance::steps`] representable
//!   values of the expected one, on the grid of the output's own dtype (its ulps).
//! - Elements the specification leaves undefined are not compared at all (see
//!   [`crate::undefined`]); the caller passes them as a mask.
use quorum::{Tensor, Value};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    pub rtol: f64,
    pub atol: f64,
    /// A float element also matches when at most this many representable values of its dtype lie
    /// between it and the expected one, the expected one excluded (1 = the next value up or down).
    pub steps: u32,
}

pub const DEFAULT: Tolerance = Tolerance {
    rtol: 1e-3,
    atol: 1e-7,
    steps: 0,
};

/// A looser bound for one case, on every engine (`engines` empty) or on those named.
#[derive(Debug, Clone, Copy)]
pub struct Override {
    pub case: &'static str,
    pub engines: &'static [&'static str],
    pub tolerance: Tolerance,
    pub reason: &'static str,
}

/// The attention cases whose expected values round every intermediate to 16 bits: four steps of the
/// output's dtype. Why four: the dominant difference is Softmax's running sum over the kv length
/// (6 here), which the reference rounds after each of its 5 additions, at most half a step each: 2.5
/// steps of the sum, one factor shared by every weight of a row, so it moves each output by the same
/// relative amount whatever cancellation follows; half a step more for the engine's own last
/// rounding and half for the reference's, 3.5, rounded up to 4. Observed (steps: elements of 192),
/// bf16 cases on the CPU engine: 3d_causal {1: 23}, 4d_attn_mask_causal {1: 27, 2: 1}, 4d_causal
/// {1: 30, 2: 2}, 4d_causal_padded_kv {1: 54, 2: 4}, 4d_padded_kv {1: 76, 2: 2}; on both oracle
/// engines at most 2 steps (4d_causal_padded_kv {1: 49, 2: 8}); fp16 4d_causal: the oracles
/// {1: 26, 2: 3}, the CPU engine exact or 2 steps (in 2 elements) depending on the order its Softmax
/// sums in, and 2 steps on onnx 1.23.1's data. The cuda engine on an H200, same corpus, folding off:
/// at most 2 steps on every one of these cases, fp16 4d_causal included (bf16 nodes run on the CPU).
/// An exact match is an accident of rounding order, so the bound holds for every engine.
const ROUNDED_16_BIT: Tolerance = Tolerance {
    steps: 4,
    ..DEFAULT
};

const ROUNDED_BF16_REASON: &str = "the expected values round every bfloat16 intermediate (Softmax's running sum after each \
     addition); engines sum in f32 or f64 and round once: at most 2 bfloat16 steps seen, bound 4 (see ROUNDED_16_BIT)";

/// Cases that need a looser bound, with the reason. Keep this short; every entry is a claim.
pub const OVERRIDES: &[Override] = &[
    Override {
        case: "node/test_dft_inverse",
        engines: &[],
        tolerance: Tolerance {
            rtol: 1e-3,
            atol: 1e-5,
            steps: 0,
        },
        reason: "expected values come from complex64 arithmetic: elements that are exactly zero carry rounding noise up \
         to 1.5e-6 beside magnitudes up to 54; Quorum computes in f64",
    },
    Override {
        case: "node/test_dft_inverse_opset19",
        engines: &[],
        tolerance: Tolerance {
            rtol: 1e-3,
            atol: 1e-5,
            steps: 0,
        },
        reason: "same data as node/test_dft_inverse (complex64 rounding noise on zero elements)",
    },
    Override {
        case: "cases/matmul_m1_k25088_n512",
        engines: &[],
        tolerance: Tolerance {
            rtol: 1e-3,
            atol: 1e-3,
            steps: 0,
        },
        reason: "each output sums 25088 products with sum(|a*b|) near 6.3e3: the f32 accumulation bound \
         eps*sqrt(K)*sum|a*b| is ~0.1, outputs near zero lose relative accuracy to cancellation (seen: 1e-4)",
    },
    Override {
        case: "node/test_attention_3d_causal_bf16_expanded",
        engines: &[],
        tolerance: ROUNDED_16_BIT,
        reason: ROUNDED_BF16_REASON,
    },
    Override {
        case: "node/test_attention_4d_attn_mask_causal_bf16_expanded",
        engines: &[],
        tolerance: ROUNDED_16_BIT,
        reason: ROUNDED_BF16_REASON,
    },
    Override {
        case: "node/test_attention_4d_causal_bf16_expanded",
        engines: &[],
        tolerance: ROUNDED_16_BIT,
        reason: ROUNDED_BF16_REASON,
    },
    Override {
        case: "node/test_attention_4d_causal_padded_kv_bf16_expanded",
        engines: &[],
        tolerance: ROUNDED_16_BIT,
        reason: ROUNDED_BF16_REASON,
    },
    Override {
        case: "node/test_attention_4d_padded_kv_bf16_expanded",
        engines: &[],
        tolerance: ROUNDED_16_BIT,
        reason: ROUNDED_BF16_REASON,
    },
    Override {
        case: "node/test_attention_4d_causal_fp16_expanded",
        engines: &[],
        tolerance: ROUNDED_16_BIT,
        reason: "the expected values round every float16 intermediate (MatMul partial sums, Softmax's running sum); \
         engines accumulate in f32/f64 and round once: at most 2 float16 steps seen (CUDA, the oracles, the CPU \
         engine on some Softmax orders and on onnx 1.23.1's data), bound 4 (see ROUNDED_16_BIT)",
    },
];

/// The tolerance for a case id (`part/name`) on an engine.
pub fn for_case(engine: &str, id: &str) -> Tolerance {
    lookup(OVERRIDES, engine, id)
}

fn lookup(table: &[Override], engine: &str, id: &str) -> Tolerance {
    table
        .iter()
        .find(|o| o.case == id && (o.engines.is_empty() || o.engines.contains(&engine)))
        .map(|o| o.tolerance)
        .unwrap_or(DEFAULT)
}

/// Where two values differ most, for the report.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    pub message: String,
}

fn f64s(t: &Tensor) -> Option<Vec<f64>> {
    match t {
        Tensor::F32(_) | Tensor::F64(_) | Tensor::F16(_) | Tensor::BF16(_) => t.to_f64_vec().ok(),
        _ => None,
    }
}

/// Float elements as integers ordered like their values, so that two elements are as many
/// representable values apart as their integers differ (-0 and +0 coincide).
fn ordered(t: &Tensor) -> Option<Vec<i128>> {
    fn key(bits: u64, sign: u64) -> i128 {
        if bits & sign != 0 {
            -((bits & !sign) as i128)
        } else {
            bits as i128
        }
    }
    Some(match t {
        Tensor::F16(a) => a.iter().map(|x| key(x.to_bits() as u64, 1 << 15)).collect(),
        Tensor::BF16(a) => a.iter().map(|x| key(x.to_bits() as u64, 1 << 15)).collect(),
        Tensor::F32(a) => a.iter().map(|x| key(x.to_bits() as u64, 1 << 31)).collect(),
        Tensor::F64(a) => a.iter().map(|x| key(x.to_bits(), 1 << 63)).collect(),
        _ => return None,
    })
}

/// The largest number of steps (representable values of the dtype) between an element of `actual`
/// and the same element of `expected`; `None` unless both are f16, bf16, f32 or f64 of one shape.
pub fn max_steps(actual: &Tensor, expected: &Tensor) -> Option<u128> {
    if actual.dtype() != expected.dtype() || actual.shape() != expected.shape() {
        return None;
    }
    let (a, e) = (ordered(actual)?, ordered(expected)?);
    a.iter().zip(&e).map(|(x, y)| (x - y).unsigned_abs()).max()
}

/// Elements of a non-float tensor as comparable integers: the value of integers and booleans, the
/// stored byte of narrow formats.
fn exact_elements(t: &Tensor) -> Option<Vec<i64>> {
    match t {
        Tensor::Packed(_, a) => Some(a.iter().map(|&b| b as i64).collect()),
        _ => t.to_i64_vec().ok(),
    }
}

/// Compares one tensor with its expected value.
pub fn compare_tensor(actual: &Tensor, expected: &Tensor, tol: Tolerance) -> Result<(), Mismatch> {
    compare_tensor_except(actual, expected, tol, &[])
}

/// Compares one tensor with its expected value, skipping the elements (flat index) that `skip`
/// marks; an empty `skip` compares every element.
pub fn compare_tensor_except(
    actual: &Tensor,
    expected: &Tensor,
    tol: Tolerance,
    skip: &[bool],
) -> Result<(), Mismatch> {
    let fail = |message: String| Err(Mismatch { message });
    if actual.dtype() != expected.dtype() {
        return fail(format!(
            "dtype {} != expected {}",
            actual.dtype(),
            expected.dtype()
        ));
    }
    if actual.shape() != expected.shape() {
        return fail(format!(
            "shape {:?} != expected {:?}",
            actual.shape(),
            expected.shape()
        ));
    }
    let skipped = |i: usize| skip.get(i).copied().unwrap_or(false);
    if let (Some(a), Some(e)) = (f64s(actual), f64s(expected)) {
        let steps = if tol.steps > 0 {
            ordered(actual).zip(ordered(expected))
        } else {
            None
        };
        let within_steps = |i: usize| {
            steps
                .as_ref()
                .is_some_and(|(p, q)| (p[i] - q[i]).unsigned_abs() <= tol.steps as u128)
        };
        let mut worst: Option<(usize, f64)> = None;
        let mut bad = 0usize;
        for (i, (&x, &y)) in a.iter().zip(&e).enumerate() {
            if skipped(i) {
                continue;
            }
            let ok = if y.is_nan() {
                x.is_nan()
            } else if y.is_infinite() {
                x == y
            } else {
                (x - y).abs() <= tol.atol + tol.rtol * y.abs() || (x.is_finite() && within_steps(i))
            };
            if !ok {
                bad += 1;
                let err = if x.is_nan() {
                    f64::INFINITY
                } else {
                    (x - y).abs()
                };
                if worst.is_none_or(|(_, w)| err > w) {
                    worst = Some((i, err));
                }
            }
        }
        if let Some((i, _)) = worst {
            let steps = match &steps {
                Some(_) => format!(", or {} steps", tol.steps),
                None => String::new(),
            };
            return fail(format!(
                "{bad} of {} elements differ; worst at flat index {i}: got {}, expected {} (rtol {}, atol {}{steps})",
                a.len(),
                a[i],
                e[i],
                tol.rtol,
                tol.atol
            ));
        }
        return Ok(());
    }
    if !skip.is_empty()
        && let (Some(a), Some(e)) = (exact_elements(actual), exact_elements(expected))
    {
        let differ: Vec<usize> = (0..a.len())
            .filter(|&i| !skipped(i) && a[i] != e[i])
            .collect();
        return match differ.first() {
            None => Ok(()),
            Some(&i) => fail(format!(
                "{} values: {} of {} compared elements differ; first at flat index {i}: got {}, expected {}",
                actual.dtype(),
                differ.len(),
                (0..a.len()).filter(|&i| !skipped(i)).count(),
                a[i],
                e[i]
            )),
        };
    }
    if actual != expected {
        let n = actual.len();
        let detail = match (actual.to_f64_vec(), expected.to_f64_vec()) {
            (Ok(a), Ok(e)) => match a.iter().zip(&e).position(|(x, y)| x != y) {
                Some(i) => format!(
                    "first difference at flat index {i}: got {}, expected {}",
                    a[i], e[i]
                ),
                None => String::new(),
            },
            _ => String::new(),
        };
        return fail(format!("{} values ({n}) differ {detail}", actual.dtype()));
    }
    Ok(())
}

/// Compares values of any kind (tensors, sequences, optionals).
pub fn compare(actual: &Value, expected: &Value, tol: Tolerance) -> Result<(), Mismatch> {
    compare_except(actual, expected, tol, &[])
}

/// [`compare`], skipping the elements `skip` marks in a tensor value (or an optional holding one).
pub fn compare_except(
    actual: &Value,
    expected: &Value,
    tol: Tolerance,
    skip: &[bool],
) -> Result<(), Mismatch> {
    match (actual, expected) {
        (Value::Tensor(a), Value::Tensor(e)) => compare_tensor_except(a, e, tol, skip),
        (Value::Sequence { items: a, .. }, Value::Sequence { items: e, .. }) => {
            if a.len() != e.len() {
                return Err(Mismatch {
                    message: format!("sequence of {} items, expected {}", a.len(), e.len()),
                });
            }
            for (i, (x, y)) in a.iter().zip(e).enumerate() {
                compare_tensor(x, y, tol).map_err(|m| Mismatch {
                    message: format!("item {i}: {}", m.message),
                })?;
            }
            Ok(())
        }
        (Value::Optional(a), Value::Optional(e)) => match (a, e) {
            (None, None) => Ok(()),
            (Some(a), Some(e)) => compare_except(a, e, tol, skip),
            _ => Err(Mismatch {
                message: format!(
                    "optional {} != expected {}",
                    actual.describe(),
                    expected.describe()
                ),
            }),
        },
        // A test-data file cannot say "optional" when the value is present, so an optional holding a
        // value may be compared with the bare value.
        (Value::Optional(Some(a)), e) => compare_except(a, e, tol, skip),
        (a, Value::Optional(Some(e))) => compare_except(a, e, tol, skip),
        _ => Err(Mismatch {
            message: format!(
                "got {}, expected {}",
                actual.describe(),
                expected.describe()
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_bound_is_relative_plus_absolute() {
        let e = Tensor::from_f32(&[3], vec![1.0, -200.0, 0.0]).unwrap();
        let ok = Tensor::from_f32(&[3], vec![1.0009, -200.19, 5e-8]).unwrap();
        let bad = Tensor::from_f32(&[3], vec![1.0011, -200.0, 0.0]).unwrap();
        assert!(compare_tensor(&ok, &e, DEFAULT).is_ok());
        let m = compare_tensor(&bad, &e, DEFAULT).unwrap_err();
        assert!(m.message.contains("flat index 0"), "{}", m.message);
    }

    #[test]
    fn nan_and_infinity_match_only_themselves() {
        let e = Tensor::from_f32(&[2], vec![f32::NAN, f32::INFINITY]).unwrap();
        assert!(compare_tensor(&e.clone(), &e, DEFAULT).is_ok());
        let a = Tensor::from_f32(&[2], vec![0.0, f32::INFINITY]).unwrap();
        assert!(compare_tensor(&a, &e, DEFAULT).is_err());
        let b = Tensor::from_f32(&[2], vec![f32::NAN, f32::MAX]).unwrap();
        assert!(compare_tensor(&b, &e, DEFAULT).is_err());
    }

    #[test]
    fn steps_count_representable_values_of_the_dtype() {
        let one = Tensor::from_f32(&[1], vec![1.0]).unwrap();
        let next =
            |k: u32| Tensor::from_f32(&[1], vec![f32::from_bits(1.0f32.to_bits() + k)]).unwrap();
        let four = Tolerance {
            rtol: 0.0,
            atol: 0.0,
            steps: 4,
        };
        assert!(compare_tensor(&next(4), &one, four).is_ok());
        let m = compare_tensor(&next(5), &one, four).unwrap_err();
        assert!(m.message.contains("4 steps"), "{}", m.message);
        // Across zero: -0 and +0 coincide, the smallest subnormals are one step from zero each.
        let tiny = |bits: u32| Tensor::from_f32(&[1], vec![f32::from_bits(bits)]).unwrap();
        assert!(compare_tensor(&tiny(0x8000_0002), &tiny(2), four).is_ok());
        assert!(compare_tensor(&tiny(0x8000_0003), &tiny(2), four).is_err());
        // No steps by default.
        let tight = Tolerance {
            rtol: 0.0,
            atol: 0.0,
            ..DEFAULT
        };
        assert!(compare_tensor(&next(1), &one, tight).is_err());
    }

    #[test]
    fn overrides_apply_to_the_engines_they_name() {
        let table = [Override {
            case: "node/test_x",
            engines: &["cuda", "oracle-reference"],
            tolerance: ROUNDED_16_BIT,
            reason: "test",
        }];
        assert_eq!(lookup(&table, "cpu", "node/test_x"), DEFAULT);
        assert_eq!(lookup(&table, "cuda", "node/test_x").steps, 4);
        assert_eq!(lookup(&table, "oracle-reference", "node/test_x").steps, 4);
        assert_eq!(lookup(&table, "cuda", "node/test_y"), DEFAULT);
        assert_eq!(
            for_case("cpu", "node/test_attention_4d_causal_bf16_expanded").steps,
            4
        );
        assert_eq!(for_case("cpu", "node/test_add"), DEFAULT);
        for o in OVERRIDES {
            assert!(!o.reason.is_empty(), "{}", o.case);
            assert_eq!(
                OVERRIDES.iter().filter(|p| p.case == o.case).count(),
                1,
                "{}",
                o.case
            );
        }
    }

    #[test]
    fn skipped_elements_are_not_compared_and_the_rest_still_are() {
        let e = Tensor::from_i64(&[4], vec![1, 2, 3, 4]).unwrap();
        let a = Tensor::from_i64(&[4], vec![1, 9, 3, 4]).unwrap();
        assert!(compare_tensor(&a, &e, DEFAULT).is_err());
        assert!(compare_tensor_except(&a, &e, DEFAULT, &[false, true, false, false]).is_ok());
        let m = compare_tensor_except(&a, &e, DEFAULT, &[true, false, false, false]).unwrap_err();
        assert!(m.message.contains("1 of 3 compared"), "{}", m.message);
        let ef = Tensor::from_f32(&[2], vec![1.0, 2.0]).unwrap();
        let af = Tensor::from_f32(&[2], vec![5.0, 2.0]).unwrap();
        assert!(compare_tensor_except(&af, &ef, DEFAULT, &[true, false]).is_ok());
        assert!(compare_tensor_except(&af, &ef, DEFAULT, &[false, true]).is_err());
    }

    #[test]
    fn integers_dtype_and_shape_are_exact() {
        let e = Tensor::from_i64(&[2], vec![3, 4]).unwrap();
        assert!(compare_tensor(&Tensor::from_i64(&[2], vec![3, 5]).unwrap(), &e, DEFAULT).is_err());
        assert!(
            compare_tensor(&Tensor::from_i64(&[1, 2], vec![3, 4]).unwrap(), &e, DEFAULT).is_err()
        );
        assert!(
            compare_tensor(
                &Tensor::from_f32(&[2], vec![3.0, 4.0]).unwrap(),
                &e,
                DEFAULT
            )
            .is_err()
        );
    }
}
