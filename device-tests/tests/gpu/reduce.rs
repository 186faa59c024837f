//! Reductions on CUDA against both oracles: every op with axes as attribute and as input, keepdims,
//! noop_with_empty_axes, non-adjacent and unsorted axes, rows long enough for the warp and block
//! layouts, few long strided rows, empty sets and empty outputs, NaN, f16; ArgMax/ArgMin with ties.
use crate::harness::*;
use quorum::{DType, Tensor};

const REDUCE: &[&str] = &[
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceSumSquare",
    "ReduceLogSum",
    "ReduceLogSumExp",
];

/// (shape, axes): tiny, odd, strided, non-adjacent, unsorted, warp rows, block rows, few long
/// strided rows, axes merged through a size-1 dim.
const SWEEP: &[(&[usize], &[i64])] = &[
    (&[1], &[0]),
    (&[7], &[0]),
    (&[3, 5], &[1]),
    (&[3, 5], &[0]),
    (&[2, 3, 257], &[-1]),
    (&[2, 3, 257], &[1]),
    (&[2, 3, 4, 5], &[0, 2]),
    (&[2, 3, 4, 5], &[1, 3]),
    (&[2, 3, 4, 5], &[3, 0, -3]),
    (&[300, 40], &[1]),
    (&[4, 5000], &[1]),
    (&[5000, 3], &[0]),
    (&[64, 300], &[0]),
    (&[3, 1, 4, 5], &[0, 2]),
];

/// The first opset where `op` takes `axes` as an input.
fn input_opset(op: &str) -> i64 {
    if op == "ReduceSum" { 13 } else { 18 }
}

/// `op` on `x` with `axes` as an attribute (before `input_opset`) or as a constant input.
fn reduce(op: &str, opset: i64, x: Tensor, axes: Option<&[i64]>, keepdims: i64) -> Case {
    let mut c = Case::new(op)
        .opset(opset)
        .attr_i("keepdims", keepdims)
        .input(x);
    if let Some(a) = axes {
        if opset >= input_opset(op) {
            c = c.constant(i64s(&[a.len()], a.to_vec()));
        } else {
            c = c.attr_ints("axes", a);
        }
    }
    c
}

/// Inputs in each op's comfortable range (positive sums for LogSum, products near 1).
fn values(op: &str, seed: u64, shape: &[usize]) -> Tensor {
    match op {
        "ReduceLogSum" => rand_range(seed, shape, 0.1, 2.0),
        "ReduceProd" => rand_range(seed, shape, 0.95, 1.05),
        "ReduceLogSumExp" => rand_range(seed, shape, -50.0, 50.0),
        _ => rand_f32(seed, shape),
    }
}

fn with(t: &Tensor, at: &[(usize, f32)]) -> Tensor {
    let mut v: Vec<f32> = t.to_f64_vec().unwrap().iter().map(|&x| x as f32).collect();
    for &(i, x) in at {
        v[i] = x;
    }
    Tensor::from_f32(t.shape(), v).unwrap()
}

fn to_f16(t: &Tensor) -> Tensor {
    Tensor::from_f64s(DType::F16, t.shape(), t.to_f64_vec().unwrap()).unwrap()
}

#[test]
fn reduce_ops_axes_sweep() {
    for (o, op) in REDUCE.iter().enumerate() {
        let attr_opset = if *op == "ReduceSum" { 11 } else { 13 };
        for (s, (shape, axes)) in SWEEP.iter().enumerate() {
            let seed = (o * 100 + s) as u64;
            for (f, opset) in [attr_opset, input_opset(op)].into_iter().enumerate() {
                let keep = ((s + f) % 2) as i64;
                reduce(op, opset, values(op, seed, shape), Some(axes), keep).check();
            }
        }
    }
}

#[test]
fn reduce_all_axes_and_noop() {
    for (o, op) in REDUCE.iter().enumerate() {
        for (s, shape) in [&[3usize, 5][..], &[2, 3, 257], &[6000]].iter().enumerate() {
            let x = values(op, (o * 10 + s) as u64, shape);
            // No axes at all: every axis, both forms.
            reduce(op, 13, x.clone(), None, 1).check();
            reduce(op, 18, x.clone(), None, 0).check();
            // An empty axes input: every axis, or nothing with noop_with_empty_axes.
            reduce(op, 18, x.clone(), Some(&[]), 1).check();
            // noop: the oracles agree on the ops that are the identity on one element (for
            // L1/L2/SumSquare/LogSum/LogSumExp the reference returns the input unchanged, the
            // independent oracle and the CPU kernel apply the op to each element).
            if [
                "ReduceSum",
                "ReduceMean",
                "ReduceMax",
                "ReduceMin",
                "ReduceProd",
            ]
            .contains(op)
            {
                reduce(op, 18, x.clone(), Some(&[]), 1)
                    .attr_i("noop_with_empty_axes", 1)
                    .check();
                reduce(op, 18, x, None, 0)
                    .attr_i("noop_with_empty_axes", 1)
                    .check();
            }
        }
    }
}

/// Rows too few to fill the device: the fold runs in chunks merged by a second kernel.
#[test]
fn reduce_in_chunks() {
    let cases: &[(&[usize], &[i64])] = &[
        (&[40000], &[0]),
        (&[3, 70000], &[1]),
        (&[70000, 3], &[0]),
        (&[5, 200, 300], &[0, 2]),
    ];
    for (s, (shape, axes)) in cases.iter().enumerate() {
        for (o, op) in REDUCE.iter().enumerate() {
            let x = match *op {
                "ReduceProd" => rand_range(s as u64, shape, 0.999, 1.001),
                _ => values(op, (s * 10 + o) as u64, shape),
            };
            reduce(op, 18, x, Some(axes), (o % 2) as i64).check();
        }
        if axes.len() == 1 {
            for op in ["ArgMax", "ArgMin"] {
                for last in [0, 1] {
                    for x in [rand_f32(s as u64, shape), ties(s as u64 + 1, shape)] {
                        Case::new(op)
                            .opset(13)
                            .attr_i("axis", axes[0])
                            .attr_i("select_last_index", last)
                            .input(x)
                            .check();
                    }
                }
            }
        }
    }
    let x = with(&rand_f32(9, &[3, 70000]), &[(100_000, f32::NAN)]);
    reduce("ReduceMax", 18, x.clone(), Some(&[1]), 1).check();
    reduce("ReduceSum", 18, x, Some(&[1]), 1).check();
}

#[test]
fn reduce_empty_sets_and_outputs() {
    for op in REDUCE {
        // Empty reduced set: each op's identity (NaN for the mean).
        reduce(op, 18, rand_f32(1, &[2, 0, 3]), Some(&[1]), 1).check();
        // Empty output.
        reduce(op, 18, rand_f32(2, &[0, 4]), Some(&[1]), 0).check();
        // A single element, and a scalar.
        reduce(op, 18, values(op, 3, &[1, 1]), Some(&[0, 1]), 0).check();
        reduce(op, 18, values(op, 4, &[]), None, 1).check();
    }
}

#[test]
fn reduce_propagates_nan() {
    for op in [
        "ReduceSum",
        "ReduceMax",
        "ReduceMin",
        "ReduceMean",
        "ReduceLogSumExp",
    ] {
        for shape in [&[3usize, 40][..], &[2, 3000]] {
            let n = shape[1];
            let x = with(&rand_f32(5, shape), &[(n + 7, f32::NAN)]);
            reduce(op, 18, x.clone(), Some(&[1]), 1).check();
            reduce(op, 18, x, Some(&[0]), 1).check();
        }
    }
}

#[test]
fn reduce_large_magnitudes_and_infinities() {
    let x = rand_range(7, &[3, 2000], -1000.0, 1000.0);
    for op in [
        "ReduceLogSumExp",
        "ReduceMax",
        "ReduceMin",
        "ReduceSum",
        "ReduceL2",
    ] {
        reduce(op, 18, x.clone(), Some(&[1]), 0).check();
    }
    let x = with(
        &rand_f32(8, &[3, 50]),
        &[
            (3, f32::NEG_INFINITY),
            (60, f32::INFINITY),
            (100, f32::NEG_INFINITY),
        ],
    );
    for op in ["ReduceLogSumExp", "ReduceMax", "ReduceMin"] {
        reduce(op, 18, x.clone(), Some(&[1]), 1).check();
    }
}

#[rstest::rstest]
fn reduce_halves(#[values(DType::F16, DType::BF16)] half: DType) {
    if crate::harness::bf16_off(half) {
        return;
    }
    for (shape, axes) in [
        (&[4usize, 5000][..], &[1i64][..]),
        (&[3, 5], &[0]),
        (&[2, 3, 40], &[0, 2]),
    ] {
        let x = Tensor::from_f64s(half, shape, rand_f32(9, shape).to_f64_vec().unwrap()).unwrap();
        for op in [
            "ReduceMax",
            "ReduceMin",
            "ReduceSum",
            "ReduceMean",
            "ReduceLogSumExp",
        ] {
            let r = reduce(op, 18, x.clone(), Some(axes), 1).check();
            assert_eq!(dtype(&r.outputs[0]), half);
        }
    }
}

/// Values on a coarse grid, so that maxima and minima tie.
fn ties(seed: u64, shape: &[usize]) -> Tensor {
    let t = rand_f32(seed, shape);
    let v: Vec<f32> = t
        .to_f64_vec()
        .unwrap()
        .iter()
        .map(|&x| (x * 3.0).round() as f32)
        .collect();
    Tensor::from_f32(shape, v).unwrap()
}

#[test]
fn argmax_argmin() {
    let cases: &[(&[usize], &[i64])] = &[
        (&[1], &[0]),
        (&[7], &[0, -1]),
        (&[3, 5], &[0, 1, -1]),
        (&[2, 3, 257], &[1, 2]),
        (&[300, 40], &[1]),
        (&[4, 5000], &[1]),
        (&[5000, 3], &[0]),
        (&[2, 1, 3], &[1]),
    ];
    for (s, (shape, axes)) in cases.iter().enumerate() {
        for &axis in *axes {
            for (o, op) in ["ArgMax", "ArgMin"].iter().enumerate() {
                for last in [0, 1] {
                    let keep = ((s + o + last as usize) % 2) as i64;
                    for x in [rand_f32((s * 10 + o) as u64, shape), ties(s as u64, shape)] {
                        let r = Case::new(op)
                            .opset(13)
                            .attr_i("axis", axis)
                            .attr_i("keepdims", keep)
                            .attr_i("select_last_index", last)
                            .input(x)
                            .check();
                        assert_eq!(dtype(&r.outputs[0]), DType::I64);
                    }
                }
            }
        }
    }
    // Default attributes (axis 0, keepdims 1), opset 11, and f16.
    Case::new("ArgMax")
        .opset(11)
        .input(ties(3, &[6, 4]))
        .check();
    Case::new("ArgMin")
        .opset(13)
        .attr_i("axis", 1)
        .input(to_f16(&ties(4, &[3, 300])))
        .check();
}

/// ArgMax and ArgMin over integers (CLIP's text model takes its pooled position by an ArgMax of
/// the token ids): 32- and 64-bit, ties in both directions, values beyond 2^53 (which the oracles
/// hold as f64, so those are judged against the CPU bit for bit).
#[test]
fn argmax_argmin_integers() {
    let ints = |d: DType, shape: &[usize], seed: u64, spread: i64| {
        let n: usize = shape.iter().product();
        let mut rng = quorum::inputs::Rng::new(seed);
        let v: Vec<f64> = (0..n)
            .map(|_| (rng.next_u64() % (2 * spread as u64 + 1)) as f64 - spread as f64)
            .collect();
        Tensor::from_f64s(d, shape, v).unwrap()
    };
    for (s, (shape, axis)) in [
        (&[2usize, 77][..], 1i64),
        (&[7], 0),
        (&[3, 5, 4], -2),
        (&[300, 6], 0),
    ]
    .iter()
    .enumerate()
    {
        for d in [DType::I32, DType::I64] {
            for op in ["ArgMax", "ArgMin"] {
                for last in [0, 1] {
                    // A narrow spread makes ties, which `select_last_index` decides.
                    let r = Case::new(op)
                        .opset(13)
                        .attr_i("axis", *axis)
                        .attr_i("select_last_index", last)
                        .input(ints(d, shape, 900 + s as u64, 3))
                        .check();
                    assert_eq!(dtype(&r.outputs[0]), DType::I64);
                }
            }
        }
    }
    let big = Tensor::from_i64(
        &[2, 3],
        vec![i64::MAX, i64::MAX - 1, 5, -3, i64::MIN, i64::MIN + 1],
    )
    .unwrap();
    for op in ["ArgMax", "ArgMin"] {
        Case::new(op)
            .opset(13)
            .attr_i("axis", 1)
            .input(big.clone())
            .check_against_cpu();
    }
}

/// NaN is the answer of ArgMax and ArgMin: the first NaN of the lane, or the last with
/// select_last_index, over short rows and rows long enough to be split between threads.
#[test]
fn argmax_argmin_nan() {
    for (s, shape) in [&[5usize, 9][..], &[3, 3000], &[3000, 4]]
        .iter()
        .enumerate()
    {
        let x = ties(60 + s as u64, shape);
        let n = x.len();
        let nans: Vec<(usize, f32)> = (0..n).step_by(5).map(|i| (i, f32::NAN)).collect();
        let x = with(&x, &nans);
        for axis in 0..shape.len() as i64 {
            for op in ["ArgMax", "ArgMin"] {
                for last in [0, 1] {
                    Case::new(op)
                        .opset(13)
                        .attr_i("axis", axis)
                        .attr_i("select_last_index", last)
                        .input(x.clone())
                        .check();
                }
            }
        }
    }
}
