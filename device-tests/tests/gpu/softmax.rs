//! Softmax, LogSoftmax and Hardmax on CUDA against both oracles: old (2-D coercion) and new (one axis)
//! opsets, every axis, rows long enough for the warp and block layouts, strided lanes, values near
//! ±1000 (the max subtraction must hold), -inf and NaN entries, ties for Hardmax, f16, empty tensors.
use crate::harness::*;
use quorum::{DType, Tensor};

const OPS: &[&str] = &["Softmax", "LogSoftmax", "Hardmax"];

const SHAPES: &[&[usize]] = &[
    &[1],
    &[7],
    &[3, 5],
    &[2, 3, 257],
    &[300, 40],
    &[4, 5000],
    &[5000, 3],
    &[2, 3, 4, 5],
];

fn case(op: &str, opset: i64, axis: Option<i64>, x: Tensor) -> Case {
    let c = Case::new(op).opset(opset).input(x);
    match axis {
        Some(a) => c.attr_i("axis", a),
        None => c,
    }
}

fn with(t: &Tensor, at: &[(usize, f32)]) -> Tensor {
    let mut v: Vec<f32> = t.to_f64_vec().unwrap().iter().map(|&x| x as f32).collect();
    for &(i, x) in at {
        v[i] = x;
    }
    Tensor::from_f32(t.shape(), v).unwrap()
}

#[test]
fn every_axis_both_semantics() {
    for (s, shape) in SHAPES.iter().enumerate() {
        let r = shape.len() as i64;
        for (o, op) in OPS.iter().enumerate() {
            let x = rand_range((s * 10 + o) as u64, shape, -5.0, 5.0);
            // Opset 13: one axis, default -1.
            case(op, 13, None, x.clone()).check();
            for a in -r..r {
                case(op, 13, Some(a), x.clone()).check();
            }
            // Opset 11: flattened to 2-D at axis (default 1, may equal the rank).
            case(op, 11, None, x.clone()).check();
            for a in [0, r, -1] {
                case(op, 11, Some(a), x.clone()).check();
            }
        }
    }
}

#[test]
fn large_magnitudes_hold() {
    // The CPU kernel rounds max + log(sum) to f32 before subtracting it, which at |x| ~ 1000 is
    // beyond the oracles' bound for LogSoftmax; the CUDA kernel subtracts in f64.
    let ops: &[&str] = if on_cpu() {
        &["Softmax", "Hardmax"]
    } else {
        OPS
    };
    for shape in [&[3usize, 5][..], &[4, 5000], &[300, 40], &[50, 7, 3]] {
        let x = rand_range(11, shape, -1000.0, 1000.0);
        for op in ops {
            case(op, 13, Some(1), x.clone()).check();
            case(op, 13, Some(-1), x.clone()).check();
        }
        // All values huge and close together.
        let x = rand_range(12, shape, 990.0, 1000.0);
        for op in ops {
            case(op, 13, None, x.clone()).check();
        }
    }
}

#[test]
fn infinities_and_nan() {
    // -inf entries get probability 0 (a whole -inf lane is NaN, like the CPU kernel).
    let x = with(
        &rand_f32(13, &[3, 40]),
        &[
            (0, f32::NEG_INFINITY),
            (5, f32::NEG_INFINITY),
            (41, f32::NEG_INFINITY),
        ],
    );
    for op in ["Softmax", "LogSoftmax"] {
        case(op, 13, None, x.clone()).check();
    }
    // A NaN makes its whole lane NaN.
    for shape in [&[3usize, 40][..], &[2, 3000], &[40, 3]] {
        let x = with(&rand_f32(14, shape), &[(shape[1] + 1, f32::NAN)]);
        for op in ["Softmax", "LogSoftmax"] {
            case(op, 13, Some(-1), x.clone()).check();
            case(op, 13, Some(0), x.clone()).check();
        }
    }
}

#[test]
fn hardmax_ties_take_the_first() {
    for shape in [&[6usize, 5][..], &[2, 3000], &[40, 3, 2]] {
        let t = rand_f32(15, shape);
        let v: Vec<f32> = t
            .to_f64_vec()
            .unwrap()
            .iter()
            .map(|&x| (x * 2.0).round() as f32)
            .collect();
        let x = Tensor::from_f32(shape, v).unwrap();
        for a in 0..shape.len() as i64 {
            case("Hardmax", 13, Some(a), x.clone()).check();
        }
        case("Hardmax", 11, None, x).check();
    }
}

#[rstest::rstest]
fn halves_and_empty(#[values(DType::F16, DType::BF16)] half: DType) {
    if crate::harness::bf16_off(half) {
        return;
    }
    for shape in [&[4usize, 300][..], &[2, 3000], &[3, 5, 7]] {
        let x = rand_range(16, shape, -8.0, 8.0);
        let x = Tensor::from_f64s(half, shape, x.to_f64_vec().unwrap()).unwrap();
        for op in OPS {
            let r = case(op, 13, None, x.clone()).check();
            assert_eq!(dtype(&r.outputs[0]), half);
        }
    }
    for shape in [&[0usize, 5][..], &[3, 0], &[2, 0, 4]] {
        for op in OPS {
            case(op, 13, Some(1), rand_f32(17, shape)).check();
            case(op, 11, None, rand_f32(17, shape)).check();
        }
    }
}

/// A scalar has no axis from opset 11: a typed error on the device as on the CPU.
#[test]
fn scalar_input_is_an_error_from_opset_11() {
    for op in OPS {
        let x = Tensor::from_f32(&[], vec![0.75]).unwrap();
        let e = Case::new(op).opset(13).input(x).fails();
        assert!(e.contains("rank >= 1"), "{op}: {e}");
    }
}
