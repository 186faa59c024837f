//! On-device tests: GatherElements, ScatterElements, OneHot, Trilu, Range, CumSum against both oracles.
use crate::harness::*;
use quorum::{DType, Provider, SessionOptions, Tensor, Value};

/// Seeded integers in [lo, hi).
fn rand_ints(seed: u64, n: usize, lo: i64, hi: i64) -> Vec<i64> {
    let mut rng = quorum::inputs::Rng::new(seed);
    (0..n)
        .map(|_| lo + (rng.next_u64() % (hi - lo).max(1) as u64) as i64)
        .collect()
}

fn as_dtype(t: &Tensor, d: DType) -> Tensor {
    Tensor::from_f64s(d, t.shape(), t.to_f64_vec().unwrap()).unwrap()
}

fn ints(d: DType, shape: &[usize], v: Vec<i64>) -> Tensor {
    Tensor::from_f64s(d, shape, v.into_iter().map(|x| x as f64).collect()).unwrap()
}

fn scalar(d: DType, v: f64) -> Tensor {
    Tensor::from_f64s(d, &[], vec![v]).unwrap()
}

/// The case must fail with an error (on whichever provider runs it), never panic or succeed.
fn expect_error(case: Case, what: &str) {
    let providers = if on_cpu() {
        vec![Provider::Cpu]
    } else {
        vec![Provider::Cuda, Provider::Cpu]
    };
    let (session, feeds) = case.session(SessionOptions {
        providers,
        poison_device_buffers: Some(crate::harness::POISON_NAN),
        ..Default::default()
    });
    let r: Result<Vec<(String, Value)>, _> = session.run(feeds);
    assert!(r.is_err(), "{what}: expected an error");
}

/// Indices of shape `ishape` for data dim `dim` on the axis, negatives included.
fn rand_indices(seed: u64, ishape: &[usize], dim: usize) -> Vec<i64> {
    let n: usize = ishape.iter().product();
    rand_ints(seed, n, -(dim as i64), dim as i64)
}

/// Index shapes for data `shape` on `axis`: the same shape, one with a different axis length, and
/// one with smaller other dims.
fn index_shapes(shape: &[usize], axis: usize, seed: u64) -> Vec<Vec<usize>> {
    let mut a = shape.to_vec();
    a[axis] = 1 + (seed as usize % 4);
    let b: Vec<usize> = shape
        .iter()
        .enumerate()
        .map(|(d, &s)| if d == axis { s + 2 } else { s.div_ceil(2) })
        .collect();
    vec![shape.to_vec(), a, b]
}

const SHAPES: &[&[usize]] = &[&[7], &[3, 4], &[2, 5, 3], &[1, 3, 1, 6], &[17, 33]];

#[test]
fn gather_elements_sweep() {
    let mut seed = 100;
    for &shape in SHAPES {
        let r = shape.len() as i64;
        for axis in -r..r {
            let a = axis.rem_euclid(r) as usize;
            for ishape in index_shapes(shape, a, seed) {
                seed += 1;
                let x = rand_f32(seed, shape);
                let idx = rand_indices(seed, &ishape, shape[a]);
                Case::new("GatherElements")
                    .opset(13)
                    .attr_i("axis", axis)
                    .input(x.clone())
                    .input(i64s(&ishape, idx.clone()))
                    .check();
                // int32 indices as a constant, f16 and int64 data (raw bits of 2 and 8 bytes).
                Case::new("GatherElements")
                    .opset(13)
                    .attr_i("axis", axis)
                    .input(as_dtype(&x, DType::F16))
                    .constant(ints(DType::I32, &ishape, idx.clone()))
                    .check();
                let xi = ints(DType::I64, shape, rand_ints(seed, x.len(), -1000, 1000));
                Case::new("GatherElements")
                    .opset(11)
                    .attr_i("axis", axis)
                    .input(xi)
                    .input(i64s(&ishape, idx))
                    .check();
            }
        }
    }
    // Bytes, and a larger case.
    let xb = ints(DType::U8, &[5, 9], rand_ints(3, 45, 0, 255));
    Case::new("GatherElements")
        .attr_i("axis", 1)
        .input(xb)
        .input(i64s(&[5, 4], rand_indices(4, &[5, 4], 9)))
        .check();
    let x = rand_f32(5, &[64, 300]);
    Case::new("GatherElements")
        .attr_i("axis", 0)
        .input(x)
        .input(i64s(&[50, 300], rand_indices(6, &[50, 300], 64)))
        .check();
}

#[test]
fn gather_elements_empty_and_out_of_range() {
    // Empty indices (and empty data with empty indices).
    Case::new("GatherElements")
        .attr_i("axis", 1)
        .input(rand_f32(7, &[3, 4]))
        .input(i64s(&[3, 0], vec![]))
        .check();
    Case::new("GatherElements")
        .attr_i("axis", 0)
        .input(rand_f32(8, &[0, 4]))
        .input(i64s(&[0, 4], vec![]))
        .check();
    for bad in [4, -5, 100] {
        expect_error(
            Case::new("GatherElements")
                .attr_i("axis", 1)
                .input(rand_f32(9, &[2, 4]))
                .input(i64s(&[2, 2], vec![0, 1, bad, 2])),
            "GatherElements index out of range",
        );
    }
}

const REDUCTIONS: &[&str] = &["none", "add", "mul", "max", "min"];

#[test]
fn scatter_elements_sweep() {
    let mut seed = 500;
    for &shape in SHAPES {
        let r = shape.len() as i64;
        for axis in -r..r {
            let a = axis.rem_euclid(r) as usize;
            for ishape in index_shapes(shape, a, seed) {
                if ishape
                    .iter()
                    .zip(shape)
                    .enumerate()
                    .any(|(d, (&i, &s))| d != a && i > s)
                {
                    continue;
                }
                seed += 1;
                let x = rand_f32(seed, shape);
                let idx = rand_indices(seed + 1, &ishape, shape[a]);
                let upd = rand_f32(seed + 2, &ishape);
                for &red in REDUCTIONS {
                    Case::new("ScatterElements")
                        .opset(18)
                        .attr_i("axis", axis)
                        .attr_s("reduction", red)
                        .input(x.clone())
                        .input(i64s(&ishape, idx.clone()))
                        .input(upd.clone())
                        .check();
                }
            }
        }
    }
}

#[test]
fn scatter_elements_dtypes_and_duplicates() {
    // Duplicate indices along one line: applied in index order.
    let x = rand_f32(20, &[4, 6]);
    let idx = i64s(
        &[4, 5],
        vec![1, 1, -5, 3, 1, 0, 0, 0, 5, 5, 2, 2, 2, 2, 2, -1, 5, 0, 5, 4],
    );
    let upd = rand_f32(21, &[4, 5]);
    for &red in REDUCTIONS {
        Case::new("ScatterElements")
            .opset(18)
            .attr_i("axis", 1)
            .attr_s("reduction", red)
            .input(x.clone())
            .input(idx.clone())
            .input(upd.clone())
            .check();
        Case::new("ScatterElements")
            .opset(18)
            .attr_i("axis", 1)
            .attr_s("reduction", red)
            .input(as_dtype(&x, DType::F16))
            .constant(as_dtype(&idx, DType::I32))
            .input(as_dtype(&upd, DType::F16))
            .check();
        let xi = ints(DType::I64, &[4, 6], rand_ints(22, 24, -50, 50));
        let ui = ints(DType::I64, &[4, 5], rand_ints(23, 20, -50, 50));
        Case::new("ScatterElements")
            .opset(18)
            .attr_i("axis", 1)
            .attr_s("reduction", red)
            .input(xi.clone())
            .input(idx.clone())
            .input(ui.clone())
            .check();
        Case::new("ScatterElements")
            .opset(18)
            .attr_i("axis", 1)
            .attr_s("reduction", red)
            .input(as_dtype(&xi, DType::I32))
            .input(idx.clone())
            .input(as_dtype(&ui, DType::I32))
            .check();
        Case::new("ScatterElements")
            .opset(18)
            .attr_i("axis", 1)
            .attr_s("reduction", red)
            .input(as_dtype(&x, DType::F64))
            .input(idx.clone())
            .input(as_dtype(&upd, DType::F64))
            .check();
    }
    // Older opsets (no reduction attribute), a byte dtype, and a larger case along axis 0.
    Case::new("ScatterElements")
        .opset(11)
        .attr_i("axis", 0)
        .input(ints(DType::U8, &[3, 4], rand_ints(24, 12, 0, 255)))
        .input(i64s(&[2, 4], vec![0, 2, -1, 1, 1, 0, 2, 2]))
        .input(ints(DType::U8, &[2, 4], rand_ints(25, 8, 0, 255)))
        .check();
    let ishape = [40, 129];
    Case::new("ScatterElements")
        .opset(16)
        .attr_i("axis", 0)
        .attr_s("reduction", "add")
        .input(rand_f32(26, &[64, 129]))
        .input(i64s(&ishape, rand_indices(27, &ishape, 64)))
        .input(rand_f32(28, &ishape))
        .check();
    // A line longer than the kernel applies serially: declined on purpose.
    Case::new("ScatterElements")
        .opset(18)
        .attr_i("axis", 0)
        .attr_s("reduction", "add")
        .input(rand_f32(33, &[10000]))
        .input(i64s(&[9000], rand_indices(34, &[9000], 10000)))
        .input(rand_f32(35, &[9000]))
        .allow_fallback()
        .check();
    // Empty indices: the output is the data.
    Case::new("ScatterElements")
        .opset(18)
        .attr_i("axis", 0)
        .attr_s("reduction", "mul")
        .input(rand_f32(29, &[3, 4]))
        .input(i64s(&[0, 4], vec![]))
        .input(rand_f32(30, &[0, 4]))
        .check();
}

#[test]
fn scatter_elements_out_of_range() {
    for bad in [3, -4] {
        expect_error(
            Case::new("ScatterElements")
                .opset(18)
                .attr_i("axis", 0)
                .input(rand_f32(31, &[3, 2]))
                .input(i64s(&[1, 2], vec![0, bad]))
                .input(rand_f32(32, &[1, 2])),
            "ScatterElements index out of range",
        );
    }
}

#[test]
fn one_hot_sweep() {
    let mut seed = 900;
    let values = Tensor::from_f32(&[2], vec![-0.5, 3.25]).unwrap();
    for ishape in [&[5][..], &[2, 3], &[3, 1, 4], &[0], &[2, 0]] {
        let r = ishape.len() as i64;
        for depth in [1i64, 4, 11] {
            for axis in -(r + 1)..=r {
                seed += 1;
                let n: usize = ishape.iter().product();
                // In range, negative, and out of range on both sides.
                let idx = rand_ints(seed, n, -depth - 2, depth + 2);
                Case::new("OneHot")
                    .opset(11)
                    .attr_i("axis", axis)
                    .input(i64s(ishape, idx.clone()))
                    .constant(scalar(DType::I64, depth as f64))
                    .constant(values.clone())
                    .check();
                // Float indices (truncated), float depth, f16 and int64 values.
                let fidx: Vec<f64> = idx.iter().map(|&i| i as f64 * 0.97).collect();
                Case::new("OneHot")
                    .opset(11)
                    .attr_i("axis", axis)
                    .input(Tensor::from_f64s(DType::F32, ishape, fidx).unwrap())
                    .input(scalar(DType::F32, depth as f64))
                    .input(as_dtype(&values, DType::F16))
                    .check();
                Case::new("OneHot")
                    .opset(9)
                    .attr_i("axis", axis)
                    .input(ints(DType::I32, ishape, idx))
                    .constant(scalar(DType::I32, depth as f64))
                    .constant(ints(DType::I64, &[2], vec![0, 1]))
                    .check();
            }
        }
    }
    // A larger one, default axis.
    Case::new("OneHot")
        .opset(11)
        .input(i64s(&[300], rand_ints(7, 300, -1000, 1000)))
        .constant(scalar(DType::I64, 1000.0))
        .constant(values)
        .check();
}

#[test]
fn trilu_sweep() {
    let shapes: &[&[usize]] = &[
        &[4, 5],
        &[5, 4],
        &[1, 6],
        &[6, 1],
        &[3, 1, 7],
        &[2, 3, 4, 4],
        &[33, 65],
        &[0, 3],
        &[2, 0, 3],
    ];
    let mut seed = 1300;
    for &shape in shapes {
        for upper in [0, 1] {
            seed += 1;
            let x = rand_f32(seed, shape);
            Case::new("Trilu")
                .opset(14)
                .attr_i("upper", upper)
                .input(x.clone())
                .check();
            for k in [-100, -7, -2, -1, 0, 1, 3, 64, i64::MIN, i64::MAX] {
                Case::new("Trilu")
                    .opset(14)
                    .attr_i("upper", upper)
                    .input(x.clone())
                    .constant(scalar(DType::I64, k as f64))
                    .check();
            }
            Case::new("Trilu")
                .opset(14)
                .attr_i("upper", upper)
                .input(as_dtype(&x, DType::F16))
                .input(scalar(DType::I64, 1.0))
                .check();
            let xi = ints(DType::I64, shape, rand_ints(seed, x.len(), -9, 9));
            Case::new("Trilu")
                .opset(14)
                .attr_i("upper", upper)
                .input(xi)
                .constant(scalar(DType::I64, -1.0))
                .check();
            let xb = ints(DType::U8, shape, rand_ints(seed, x.len(), 1, 255));
            Case::new("Trilu")
                .opset(14)
                .attr_i("upper", upper)
                .input(xb)
                .absent()
                .check();
        }
    }
}

#[test]
fn range_sweep() {
    let floats: &[(f64, f64, f64)] = &[
        (0.0, 10.0, 3.0),
        (10.0, 0.0, -2.5),
        (1.0, 1.0, 1.0),
        (5.0, 1.0, 1.0),
        (0.1, 5.3, 0.7),
        (-3.3, 7.1, 0.013),
        (0.0, 100000.0, 1.0),
    ];
    for &(s, l, d) in floats {
        for dt in [DType::F32, DType::F64, DType::F16] {
            if dt == DType::F16 && l > 60000.0 {
                continue;
            }
            Case::new("Range")
                .opset(11)
                .input(scalar(dt, s))
                .input(scalar(dt, l))
                .input(scalar(dt, d))
                .check();
        }
    }
    let ints_: &[(i64, i64, i64)] = &[
        (0, 10, 3),
        (10, -5, -3),
        (2, 2, 1),
        (5, 1, 1),
        (-7, 100, 7),
        (0, 70000, 1),
        (-1 << 40, (-1 << 40) + 1000, 17),
    ];
    for &(s, l, d) in ints_ {
        for dt in [DType::I64, DType::I32, DType::I16] {
            let fits = |v: i64| match dt {
                DType::I32 => i32::try_from(v).is_ok(),
                DType::I16 => i16::try_from(v).is_ok(),
                _ => true,
            };
            if !(fits(s) && fits(l) && fits(d)) {
                continue;
            }
            Case::new("Range")
                .opset(11)
                .constant(scalar(dt, s as f64))
                .input(scalar(dt, l as f64))
                .input(scalar(dt, d as f64))
                .check();
        }
    }
    let r = Case::new("Range")
        .opset(11)
        .input(scalar(DType::F32, 0.0))
        .input(scalar(DType::F32, 10.0))
        .input(scalar(DType::F32, 3.0))
        .check();
    let t = r.outputs[0].as_tensor().expect("a tensor");
    assert_eq!(t.to_f64_vec().unwrap(), vec![0.0, 3.0, 6.0, 9.0]);
    // bfloat16 is declined on purpose (no exact f64 → bf16 rounding on the device).
    Case::new("Range")
        .opset(11)
        .input(scalar(DType::BF16, 0.0))
        .input(scalar(DType::BF16, 5.0))
        .input(scalar(DType::BF16, 0.5))
        .allow_fallback()
        .check();
    expect_error(
        Case::new("Range")
            .opset(11)
            .input(scalar(DType::F32, 0.0))
            .input(scalar(DType::F32, 5.0))
            .input(scalar(DType::F32, 0.0)),
        "Range with delta 0",
    );
}

#[test]
fn cumsum_sweep() {
    let shapes: &[&[usize]] = &[
        &[7],
        &[3, 4],
        &[2, 5, 3],
        &[1, 3, 1, 6],
        &[17, 33],
        &[2, 0, 3],
    ];
    let mut seed = 1500;
    for &shape in shapes {
        let r = shape.len() as i64;
        for axis in -r..r {
            for (exclusive, reverse) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
                seed += 1;
                let x = rand_f32(seed, shape);
                let case = |x: Tensor, axis: Tensor| {
                    Case::new("CumSum")
                        .opset(14)
                        .attr_i("exclusive", exclusive)
                        .attr_i("reverse", reverse)
                        .input(x)
                        .constant(axis)
                };
                case(x.clone(), scalar(DType::I64, axis as f64)).check();
                // The kernels sum each line in the CPU's order: the CPU's bits exactly.
                case(x.clone(), scalar(DType::I32, axis as f64)).check_against_cpu();
                for d in [DType::F16, DType::BF16, DType::F64] {
                    case(as_dtype(&x, d), scalar(DType::I64, axis as f64)).check();
                }
                for d in [DType::I32, DType::I64] {
                    let xi = ints(d, shape, rand_ints(seed, x.len(), -500, 500));
                    case(xi, scalar(DType::I64, axis as f64)).check();
                }
            }
        }
    }
    // Integers wrap, as on the CPU: 64-bit sums past 2^63 (beyond the oracles' f64), 32-bit ones
    // past 2^31.
    let big = ints(
        DType::I64,
        &[2, 3],
        vec![i64::MAX - 5, 9, -3, i64::MIN + 2, -7, 1],
    );
    Case::new("CumSum")
        .opset(14)
        .input(big)
        .constant(scalar(DType::I64, 1.0))
        .check_against_cpu();
    let big = ints(DType::U32, &[4], vec![u32::MAX as i64 - 1, 3, 7, 1]);
    Case::new("CumSum")
        .opset(14)
        .input(big)
        .constant(scalar(DType::I64, 0.0))
        .check_against_cpu();
    // Position ids as RoBERTa exports write them: a CumSum of the attention mask along the
    // sequence; and the values, checked outright.
    let mask = ints(
        DType::I64,
        &[2, 6],
        vec![1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1],
    );
    let r = Case::new("CumSum")
        .opset(14)
        .input(mask)
        .constant(scalar(DType::I64, 1.0))
        .check();
    let t = r.outputs[0].as_tensor().expect("a tensor");
    assert_eq!(
        t.to_f64_vec().unwrap(),
        vec![1., 2., 3., 4., 4., 4., 1., 2., 3., 4., 5., 6.]
    );
    // Long lines: 4,000 same-signed terms summed in order (the long-sum bound's worst case), and a
    // line past the in-order limit, which the CPU runs.
    let long = Tensor::from_f64s(DType::F32, &[2, 4000], vec![0.1; 8000]).unwrap();
    Case::new("CumSum")
        .opset(14)
        .input(long)
        .constant(scalar(DType::I64, 1.0))
        .check_against_cpu();
    Case::new("CumSum")
        .opset(14)
        .input(rand_f32(1600, &[9000]))
        .constant(scalar(DType::I64, 0.0))
        .allow_fallback()
        .check();
    // An axis out of range is an error on every provider.
    expect_error(
        Case::new("CumSum")
            .opset(14)
            .input(rand_f32(1601, &[3, 4]))
            .constant(scalar(DType::I64, 2.0)),
        "CumSum axis 2 of a rank-2 tensor",
    );
}
