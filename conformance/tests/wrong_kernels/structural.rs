//! Kernels that compute the wrong thing: data one position off, the wrong axis, a missing bias, a
//! transposed operand, a stale output, an overflowing softmax, an ignored dilation.
use std::cell::RefCell;

use quorum_oracle::Attr;
use rstest::rstest;

use crate::common::*;

fn pad_constant(x: &[f32], (h, w): (usize, usize), pads: [usize; 4], shift: usize) -> Vec<f32> {
    let (oh, ow) = (h + pads[0] + pads[2], w + pads[1] + pads[3]);
    let mut y = vec![0.0f32; oh * ow];
    for i in 0..h {
        for j in 0..w {
            y[(i + pads[0]) * ow + j + pads[1] + shift] = x[i * w + j];
        }
    }
    y
}

#[rstest]
#[case::correct(0, true)]
#[case::shifted_by_one(1, false)]
fn pad(#[case] shift: usize, #[case] right: bool) {
    for seed in SEEDS {
        let mut rng = Rng(seed);
        let (h, w) = (3, 4);
        let pads = [1, 1, 2, 2];
        let x = rng.vec(h * w, 3.0);
        let spec = Spec::new("Pad", 18, vec![]);
        let pads_in: Vec<i64> = pads.iter().map(|&p| p as i64).collect();
        let inputs = [Some(T::f32(&[h, w], &x)), Some(T::i64(&pads_in))];
        let o = setup(&spec, &inputs);
        let y = f32_out(&o, &pad_constant(&x, (h, w), pads, shift));
        expect(judge(&spec, &y, &o), right, "Pad");
    }
}

fn reduce_sum_2d(x: &[f32], n: usize, axis: usize) -> Vec<f32> {
    (0..n)
        .map(|k| {
            (0..n)
                .map(|j| {
                    if axis == 1 {
                        x[k * n + j]
                    } else {
                        x[j * n + k]
                    }
                })
                .sum()
        })
        .collect()
}

/// A square input, so reducing the wrong axis gives the right shape.
#[rstest]
#[case::correct(1, true)]
#[case::wrong_axis(0, false)]
fn reduce_sum(#[case] axis: usize, #[case] right: bool) {
    for seed in SEEDS {
        let mut rng = Rng(seed);
        let n = 5;
        let x = rng.vec(n * n, 3.0);
        let spec = Spec::new("ReduceSum", 13, vec![("keepdims", Attr::Int(0))]);
        let inputs = [Some(T::f32(&[n, n], &x)), Some(T::i64(&[1]))];
        let o = setup(&spec, &inputs);
        let y = f32_out(&o, &reduce_sum_2d(&x, n, axis));
        expect(judge(&spec, &y, &o), right, "ReduceSum over axis 1");
    }
}

pub fn gemm(a: &[f32], b: &[f32], c: Option<&[f32]>, (m, k, n): (usize, usize, usize)) -> Vec<f32> {
    let mut y = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0f32;
            for p in 0..k {
                s += a[i * k + p] * b[p * n + j];
            }
            y[i * n + j] = s + c.map_or(0.0, |c| c[j]);
        }
    }
    y
}

#[rstest]
#[case::correct(true)]
#[case::without_c(false)]
fn gemm_bias(#[case] with_c: bool) {
    for seed in SEEDS {
        let mut rng = Rng(seed);
        let (m, k, n) = (4, 6, 5);
        let (a, b, c) = (rng.vec(m * k, 2.0), rng.vec(k * n, 2.0), rng.vec(n, 2.0));
        let spec = Spec::new("Gemm", 13, vec![]);
        let inputs = [
            Some(T::f32(&[m, k], &a)),
            Some(T::f32(&[k, n], &b)),
            Some(T::f32(&[n], &c)),
        ];
        let o = setup(&spec, &inputs);
        let y = gemm(&a, &b, with_c.then_some(c.as_slice()), (m, k, n));
        expect(judge(&spec, &f32_out(&o, &y), &o), with_c, "Gemm");
    }
}

/// The wrong kernel: the correct CPU kernel with the bias input dropped.
#[rstest]
#[case::correct(true)]
#[case::without_bias(false)]
fn conv_bias(#[case] with_bias: bool) {
    for seed in SEEDS {
        let mut rng = Rng(seed);
        let spec = Spec::new("Conv", 11, vec![("pads", Attr::Ints(vec![1, 1, 1, 1]))]);
        let x = T::f32(&[1, 2, 5, 5], &rng.vec(50, 2.0));
        let w = T::f32(&[3, 2, 3, 3], &rng.vec(54, 1.0));
        let b = T::f32(&[3], &rng.vec(3, 2.0));
        let inputs = [Some(x.clone()), Some(w.clone()), Some(b)];
        let o = setup(&spec, &inputs);
        let y = if with_bias {
            cpu_kernel(&spec, &inputs)
        } else {
            cpu_kernel(&spec, &[Some(x), Some(w), None])
        };
        expect(judge(&spec, &y, &o), with_bias, "Conv");
    }
}

/// Square operands, so A·Bᵀ has the right shape.
#[rstest]
#[case::correct(false, true)]
#[case::b_transposed(true, false)]
fn matmul_operand(#[case] transpose_b: bool, #[case] right: bool) {
    for seed in SEEDS {
        let mut rng = Rng(seed);
        let n = 5;
        let (a, b) = (rng.vec(n * n, 2.0), rng.vec(n * n, 2.0));
        let spec = Spec::new("MatMul", 13, vec![]);
        let inputs = [Some(T::f32(&[n, n], &a)), Some(T::f32(&[n, n], &b))];
        let o = setup(&spec, &inputs);
        let b = if transpose_b {
            (0..n * n).map(|i| b[(i % n) * n + i / n]).collect()
        } else {
            b
        };
        let y = f32_out(&o, &gemm(&a, &b, None, (n, n, n)));
        expect(judge(&spec, &y, &o), right, "MatMul");
    }
}

/// A Sigmoid kernel with a cache bug: after its first call it returns the first call's output.
#[derive(Default)]
struct StaleSigmoid {
    cached: RefCell<Option<Vec<f32>>>,
}

impl StaleSigmoid {
    fn run(&self, x: &[f32]) -> Vec<f32> {
        let mut c = self.cached.borrow_mut();
        c.get_or_insert_with(|| x.iter().map(|&v| 1.0 / (1.0 + (-v).exp())).collect())
            .clone()
    }
}

#[test]
fn a_stale_output_is_engine_wrong() {
    for seed in SEEDS {
        let mut rng = Rng(seed);
        let spec = Spec::new("Sigmoid", 13, vec![]);
        let kernel = StaleSigmoid::default();
        let x1 = rng.vec(24, 4.0);
        let x2 = rng.vec(24, 4.0);
        let o1 = setup(&spec, &[Some(T::f32(&[4, 6], &x1))]);
        let o2 = setup(&spec, &[Some(T::f32(&[4, 6], &x2))]);
        assert_agree(
            judge(&spec, &f32_out(&o1, &kernel.run(&x1)), &o1),
            "first call",
        );
        assert_wrong(
            judge(&spec, &f32_out(&o2, &kernel.run(&x2)), &o2),
            "second call (stale)",
        );
    }
}

fn softmax_rows(x: &[f32], cols: usize, subtract_max: bool) -> Vec<f32> {
    x.chunks(cols)
        .flat_map(|row| {
            let m = if subtract_max {
                row.iter().copied().fold(f32::NEG_INFINITY, f32::max)
            } else {
                0.0
            };
            let e: Vec<f32> = row.iter().map(|&v| (v - m).exp()).collect();
            let s: f32 = e.iter().sum();
            e.into_iter().map(move |v| v / s)
        })
        .collect()
}

/// Values 100..1000: exp overflows f32 (beyond ~88.7) to inf, and inf / inf is NaN.
#[rstest]
#[case::correct(true)]
#[case::without_max_subtraction(false)]
fn softmax_on_large_inputs(#[case] subtract_max: bool) {
    for seed in SEEDS {
        let mut rng = Rng(seed);
        let (rows, cols) = (3, 7);
        let x: Vec<f32> = rng
            .vec(rows * cols, 1.0)
            .into_iter()
            .map(|u| 550.0 + 450.0 * u)
            .collect();
        let spec = Spec::new("Softmax", 13, vec![("axis", Attr::Int(-1))]);
        let o = setup(&spec, &[Some(T::f32(&[rows, cols], &x))]);
        let y = softmax_rows(&x, cols, subtract_max);
        assert_eq!(
            y.iter().all(|v| v.is_finite()),
            subtract_max,
            "only the naive softmax overflows"
        );
        expect(judge(&spec, &f32_out(&o, &y), &o), subtract_max, "Softmax");
    }
}

/// 2-D Conv, one image, no padding, stride 1; `tap_dilation` is the step between kernel taps used
/// when reading the input (the bug: 1 where the node says `dilation`).
fn conv2d(
    x: &[f32],
    w: &[f32],
    (c, h, wd): (usize, usize, usize),
    (m, k): (usize, usize),
    dilation: usize,
    tap_dilation: usize,
) -> Vec<f32> {
    let eff = (k - 1) * dilation + 1;
    let (oh, ow) = (h - eff + 1, wd - eff + 1);
    let mut y = vec![0.0f32; m * oh * ow];
    for mo in 0..m {
        for i in 0..oh {
            for j in 0..ow {
                let mut s = 0.0f32;
                for ci in 0..c {
                    for ki in 0..k {
                        for kj in 0..k {
                            let xv =
                                x[(ci * h + i + ki * tap_dilation) * wd + j + kj * tap_dilation];
                            s += xv * w[((mo * c + ci) * k + ki) * k + kj];
                        }
                    }
                }
                y[(mo * oh + i) * ow + j] = s;
            }
        }
    }
    y
}

/// The output size is right; the taps are not dilated.
#[rstest]
#[case::correct(2, true)]
#[case::dilation_ignored(1, false)]
fn conv_dilation(#[case] tap_dilation: usize, #[case] right: bool) {
    for seed in SEEDS {
        let mut rng = Rng(seed);
        let (c, h, wd, m, k) = (2, 7, 8, 3, 3);
        let x = rng.vec(c * h * wd, 2.0);
        let w = rng.vec(m * c * k * k, 1.0);
        let spec = Spec::new("Conv", 11, vec![("dilations", Attr::Ints(vec![2, 2]))]);
        let inputs = [
            Some(T::f32(&[1, c, h, wd], &x)),
            Some(T::f32(&[m, c, k, k], &w)),
        ];
        let o = setup(&spec, &inputs);
        let y = conv2d(&x, &w, (c, h, wd), (m, k), 2, tap_dilation);
        expect(judge(&spec, &f32_out(&o, &y), &o), right, "Conv dilation 2");
    }
}
