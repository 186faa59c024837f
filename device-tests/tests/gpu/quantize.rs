//! QuantizeLinear and DequantizeLinear on CUDA against both oracles (the activations of a QDQ
//! model): every input and output type the kernels take, per tensor and per axis (both signs of
//! the axis), with and without a zero point, scales as weights and as run inputs; quotients on
//! ties (power-of-two scales, half-step inputs), past both ends of the range, NaN and infinities.
//! Forms the kernels decline (blocked scales, an int32 input to DequantizeLinear) run on the CPU
//! and stay right; a tie rounded away from zero is caught by the oracles' check.
use crate::harness::*;
use quorum::verify::{Check, check};
use quorum::{DType, Tensor, Value};

/// `n` power-of-two scales (exact quotients) or `n` scales anywhere in [0.003, 2].
fn scales(seed: u64, n: usize, pow2: bool) -> Vec<f64> {
    let r = rand_range(seed, &[n], 0.0, 1.0).to_f64_vec().unwrap();
    r.iter()
        .map(|u| {
            if pow2 {
                2f64.powi((u * 7.0).floor() as i32 - 4)
            } else {
                (0.003 + u * 1.997) as f32 as f64
            }
        })
        .collect()
}

/// Inputs over `lo - 40 ..= hi + 40` quanta of each element's scale (whole and half quanta with
/// exact scales: ties), with NaN, both infinities and ±1e30 at fixed positions.
fn inputs(
    seed: u64,
    shape: &[usize],
    param: impl Fn(usize) -> f64,
    (lo, hi): (i64, i64),
) -> Vec<f64> {
    let n: usize = shape.iter().product();
    let u = rand_range(seed, &[n], 0.0, 1.0).to_f64_vec().unwrap();
    (0..n)
        .map(|i| match i % 23 {
            3 => f64::NAN,
            7 => f64::INFINITY,
            11 => f64::NEG_INFINITY,
            13 => 1e30,
            17 => -1e30,
            _ => {
                let q = (lo - 40) as f64 + (u[i] * ((hi - lo + 80) as f64)).floor();
                (q + if i % 2 == 0 { 0.5 } else { 0.0 }) * param(i)
            }
        })
        .collect()
}

fn range(d: DType) -> (i64, i64) {
    match d {
        DType::U8 => (0, 255),
        DType::I8 => (-128, 127),
        DType::U16 => (0, 65535),
        _ => (-32768, 32767),
    }
}

fn code(d: DType) -> i64 {
    match d {
        DType::U8 => 2,
        DType::I8 => 3,
        DType::U16 => 4,
        DType::I16 => 5,
        DType::F16 => 10,
        DType::BF16 => 16,
        _ => 1,
    }
}

/// (shape, axis (None: per tensor), the parameters' count, each element's parameter index).
fn layouts() -> Vec<(Vec<usize>, Option<i64>)> {
    vec![
        (vec![2, 3, 5, 7], None),
        (vec![2, 3, 5, 7], Some(1)),
        (vec![4, 6, 9], Some(-1)),
        (vec![3, 130], Some(0)),
        (vec![], None),
        (vec![0, 3], None),
    ]
}

fn param_index(shape: &[usize], axis: Option<i64>) -> (usize, Box<dyn Fn(usize) -> usize>) {
    match axis {
        None => (1, Box::new(|_| 0)),
        Some(a) => {
            let a = if a < 0 { a + shape.len() as i64 } else { a } as usize;
            let inner: usize = shape[a + 1..].iter().product();
            let d = shape[a];
            (d, Box::new(move |i| (i / inner) % d))
        }
    }
}

#[test]
fn quantize_sweep() {
    let mut seed = 1u64;
    for x_type in [DType::F32, DType::F16, DType::BF16, DType::I32] {
        for q_type in [DType::U8, DType::I8, DType::U16, DType::I16] {
            for (shape, axis) in layouts() {
                for (with_zp, pow2) in [(true, true), (false, false), (true, false)] {
                    seed += 1;
                    let (n, at) = param_index(&shape, axis);
                    let s = scales(seed, n, pow2);
                    let (lo, hi) = range(q_type);
                    let mut x = inputs(seed + 100, &shape, |i| s[at(i)], (lo, hi));
                    if x_type == DType::I32 {
                        for v in x.iter_mut() {
                            *v = if v.is_finite() {
                                v.trunc().clamp(-2e9, 2e9)
                            } else {
                                7.0
                            };
                        }
                        // A scalar's half quantum below 1 truncates to 0: never an all-zero input.
                        if x.iter().all(|v| *v == 0.0)
                            && let Some(v) = x.first_mut()
                        {
                            *v = 3.0;
                        }
                    }
                    let xt = Tensor::from_f64s(x_type, &shape, x).unwrap();
                    let st = Tensor::from_f64s(DType::F32, &[n], s.clone()).unwrap();
                    let st = if axis.is_none() {
                        st.reshape(&[]).unwrap()
                    } else {
                        st
                    };
                    let opset = if matches!(q_type, DType::U16 | DType::I16) {
                        21
                    } else {
                        19
                    };
                    let mut c = Case::new("QuantizeLinear").opset(opset).input(xt);
                    if let Some(a) = axis {
                        c = c.attr_i("axis", a);
                    }
                    // The scale is a weight, or (one case in three) a run input.
                    c = if seed.is_multiple_of(3) {
                        c.input(st)
                    } else {
                        c.constant(st)
                    };
                    if with_zp {
                        let z: Vec<f64> = (0..n)
                            .map(|j| {
                                (lo + (j as i64 * 37 + seed as i64) % (hi - lo).min(200)) as f64
                            })
                            .collect();
                        let zt = Tensor::from_f64s(q_type, &[n], z).unwrap();
                        let zt = if axis.is_none() {
                            zt.reshape(&[]).unwrap()
                        } else {
                            zt
                        };
                        c = c.constant(zt);
                    } else if q_type != DType::U8 {
                        c = c.opset(21).attr_i("output_dtype", code(q_type));
                    }
                    c.check();
                }
            }
        }
    }
}

#[test]
fn dequantize_sweep() {
    let mut seed = 500u64;
    for q_type in [DType::U8, DType::I8, DType::U16, DType::I16] {
        for out in [DType::F32, DType::F16, DType::BF16] {
            if out == DType::BF16 && matches!(q_type, DType::U16 | DType::I16) {
                continue;
            }
            for (shape, axis) in layouts() {
                for with_zp in [true, false] {
                    seed += 1;
                    let (n, _) = param_index(&shape, axis);
                    let (lo, hi) = range(q_type);
                    let count: usize = shape.iter().product();
                    let u = rand_range(seed, &[count.max(1)], 0.0, 1.0)
                        .to_f64_vec()
                        .unwrap();
                    let x: Vec<f64> = (0..count)
                        .map(|i| (lo as f64 + (u[i] * (hi - lo + 1) as f64).floor()).min(hi as f64))
                        .collect();
                    let xt = Tensor::from_f64s(q_type, &shape, x).unwrap();
                    let st =
                        Tensor::from_f64s(DType::F32, &[n], scales(seed + 7, n, false)).unwrap();
                    let st = if axis.is_none() {
                        st.reshape(&[]).unwrap()
                    } else {
                        st
                    };
                    let opset = if out == DType::F32 { 21 } else { 23 };
                    let mut c = Case::new("DequantizeLinear").opset(opset).input(xt);
                    if let Some(a) = axis {
                        c = c.attr_i("axis", a);
                    }
                    if out != DType::F32 {
                        c = c.attr_i("output_dtype", code(out));
                    }
                    c = if seed.is_multiple_of(3) {
                        c.input(st)
                    } else {
                        c.constant(st)
                    };
                    if with_zp {
                        let z: Vec<f64> =
                            (0..n).map(|j| (lo + (j as i64 * 53) % 97) as f64).collect();
                        let zt = Tensor::from_f64s(q_type, &[n], z).unwrap();
                        let zt = if axis.is_none() {
                            zt.reshape(&[]).unwrap()
                        } else {
                            zt
                        };
                        c = c.constant(zt);
                    }
                    c.check();
                }
            }
        }
    }
}

/// Blocked scales and int32 inputs decline to the CPU and stay right (blocked scales, which the
/// oracles do not cover, against the CPU engine bit for bit).
#[test]
fn declined_forms_stay_right() {
    let x = rand_range(3, &[4, 6], -20.0, 20.0);
    let s = Tensor::from_f64s(DType::F32, &[4, 2], scales(4, 8, false)).unwrap();
    Case::new("QuantizeLinear")
        .opset(21)
        .attr_i("axis", 1)
        .attr_i("block_size", 3)
        .input(x)
        .constant(s)
        .allow_fallback()
        .check_against_cpu();
    let bias = Tensor::from_f64s(DType::I32, &[5], vec![-70000.0, 3.0, 0.0, 1e9, -5.0]).unwrap();
    Case::new("DequantizeLinear")
        .opset(19)
        .input(bias)
        .constant(Tensor::from_f64s(DType::F32, &[], vec![0.0123]).unwrap())
        .allow_fallback()
        .check();
}

/// The check the sweeps rely on catches a tie rounded away from zero: QuantizeLinear of -30.5
/// quanta is -30 (ties to even), and -31 in its place is a mismatch. (Runs on any machine.)
#[test]
fn a_tie_rounded_away_from_zero_is_caught() {
    let model = Case::new("QuantizeLinear")
        .opset(19)
        .input(Tensor::from_f32(&[3], vec![-61.0, 5.0, 3.0]).unwrap())
        .constant(Tensor::from_f32(&[], vec![2.0]).unwrap())
        .constant(Tensor::from_f64s(DType::U8, &[], vec![97.0]).unwrap());
    let (session, feeds) = model.session(quorum::SessionOptions::default());
    let node = session.model().graph.nodes[0].clone();
    let right = Tensor::from_f64s(DType::U8, &[3], vec![67.0, 99.0, 99.0]).unwrap();
    let wrong = Tensor::from_f64s(DType::U8, &[3], vec![66.0, 100.0, 99.0]).unwrap();
    let owned: Vec<Option<Value>> = vec![
        Some(feeds[0].1.clone()),
        Some(Value::Tensor(Tensor::from_f32(&[], vec![2.0]).unwrap())),
        Some(Value::Tensor(
            Tensor::from_f64s(DType::U8, &[], vec![97.0]).unwrap(),
        )),
    ];
    let all: Vec<Option<&Value>> = owned.iter().map(Option::as_ref).collect();
    assert!(matches!(
        check(&node, &all, &[Value::Tensor(right)]),
        Check::Agree
    ));
    assert!(matches!(
        check(&node, &all, &[Value::Tensor(wrong)]),
        Check::Mismatch { .. }
    ));
}

/// The zoo slice's statically quantized MobileNetV3 (onnxruntime's QDQ quantizer: u8 activations,
/// s8 weights): on CUDA every node but shape arithmetic runs on the device (the weights'
/// DequantizeLinear folds at session build; the activations' QuantizeLinear and DequantizeLinear
/// run as kernels), strict verification judges every device node with both oracles and finds no
/// mismatch, and the logits are onnxruntime's within the zoo's tolerance for quantized models
/// (5e-2 of scale: an activation on the other side of a rounding boundary moves by one step).
#[test]
fn a_qdq_model_runs_on_the_device_judged_by_the_oracles() {
    use quorum::session::GraphCapture;
    if on_cpu() {
        return;
    }
    let root = std::env::var_os("QUORUM_ROOT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".."));
    let dir = root.join("benches/zoo/slice/slice_tv_mobilenet_v3_small_qdq_static");
    let npy = |p: &str| quorum::npy::read(&std::fs::read(dir.join(p)).unwrap()).unwrap();
    let (x, want) = (npy("inputs/0.npy"), npy("expected/0.npy"));
    for verify in [quorum::VerifyMode::Strict, quorum::VerifyMode::Off] {
        let s = quorum::Session::from_file(
            dir.join("model.onnx"),
            quorum::SessionOptions {
                verify,
                ..crate::graphs::options(1, GraphCapture::Off)
            },
        )
        .unwrap();
        let host: Vec<String> = s
            .placement()
            .iter()
            .filter(|p| p.provider == quorum::Provider::Cpu)
            .map(|p| format!("{} ({}): {:?}", p.node, p.op, p.declined))
            .collect();
        assert!(
            s.placement()
                .iter()
                .filter(|p| p.op.contains("Quantize"))
                .all(|p| p.provider == quorum::Provider::Cuda),
            "{host:?}"
        );
        let out = s.run(vec![("x".into(), Value::Tensor(x.clone()))]).unwrap();
        let got = out[0].1.as_tensor().unwrap().to_f64_vec().unwrap();
        let want = want.to_f64_vec().unwrap();
        let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
        let off = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f64, f64::max);
        assert!(
            off <= 5e-2 * scale,
            "{verify:?}: off by {off:e} of {scale:e}"
        );
        let c = s.counters();
        assert_eq!(c.cuda_fallbacks, 0, "{c:?}");
        if verify == quorum::VerifyMode::Strict {
            assert!(c.verify_checks > 100, "{c:?}");
            assert_eq!((c.verify_mismatches, c.verify_unsettled), (0, 0), "{c:?}");
        }
    }
}
