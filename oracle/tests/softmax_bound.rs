//! The Softmax and LogSoftmax bounds (`arbitrate.rs`, "Softmax and LogSoftmax"), judged through the
//! arbitration itself with engine outputs made here: kernels that drop one of 32 lane sums, or answer
//! zeros, must be mismatches on the long rows where a fixed bound passed them; f32 kernels that
//! really compute the op (sequential, pairwise and warp-tree sums; f32, f16 and bf16 outputs) must
//! agree on the same rows, with seeded random logits as well as equal ones.
#![forbid(unsafe_code)]
use quorum_oracle::arbitrate::{Bound, EngineOutput, Verdict, Wrong, arbitrate, round_to};
use quorum_oracle::independent::Independent;
use quorum_oracle::reference::Reference;
use quorum_oracle::{Attr, DType, NodeSpec, Oracle, Value};

struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
}

/// Rows of logits, each already in the element type `dtype` (as a model's tensor would be).
#[derive(Clone, Copy, Debug)]
enum Logits {
    Equal,
    /// Uniform in [-scale, scale), seeded.
    Uniform {
        seed: u64,
        scale: f64,
    },
    /// Half the row masked to -inf (attention), the rest uniform in [-4, 4).
    Masked {
        seed: u64,
    },
}

fn logits(kind: Logits, n: usize, dtype: DType) -> Vec<f64> {
    let raw: Vec<f64> = match kind {
        Logits::Equal => vec![1.5; n],
        Logits::Uniform { seed, scale } => {
            let mut r = SplitMix64(seed);
            (0..n).map(|_| r.unit() * scale).collect()
        }
        Logits::Masked { seed } => {
            let mut r = SplitMix64(seed);
            (0..n)
                .map(|j| {
                    let v = r.unit() * 4.0;
                    if j % 2 == 1 { f64::NEG_INFINITY } else { v }
                })
                .collect()
        }
    };
    raw.into_iter().map(|v| round_to(dtype, v)).collect()
}

/// How an engine kernel adds up a row's exponentials, in f32.
#[derive(Clone, Copy, Debug)]
enum Sum {
    Sequential,
    /// Halves recursively, 8 terms at the leaves (numpy's shape of pairwise summation).
    Pairwise,
    /// 32 lanes each add every 32nd term in order, then a butterfly tree combines the lanes (a
    /// warp's shuffle reduction).
    Warp,
    /// [`Sum::Warp`] with one lane's partial sum left out of the tree: the bug to catch.
    WarpDroppingLane(usize),
}

fn sum_f32(xs: &[f32], how: Sum) -> f32 {
    match how {
        Sum::Sequential => xs.iter().fold(0.0f32, |s, &x| s + x),
        Sum::Pairwise if xs.len() <= 8 => sum_f32(xs, Sum::Sequential),
        Sum::Pairwise => {
            let h = xs.len() / 2;
            sum_f32(&xs[..h], how) + sum_f32(&xs[h..], how)
        }
        Sum::Warp | Sum::WarpDroppingLane(_) => {
            let mut lanes = [0.0f32; 32];
            for (j, &x) in xs.iter().enumerate() {
                lanes[j % 32] += x;
            }
            if let Sum::WarpDroppingLane(l) = how {
                lanes[l] = 0.0;
            }
            let mut width = 16;
            while width > 0 {
                for l in 0..width {
                    lanes[l] += lanes[l + width];
                }
                width /= 2;
            }
            lanes[0]
        }
    }
}

/// An f32 Softmax or LogSoftmax kernel over one row (max, exponentials, their sum, the outputs),
/// its outputs rounded once into `dtype`.
fn kernel(op: &str, row: &[f64], how: Sum, dtype: DType) -> Vec<f64> {
    let x: Vec<f32> = row.iter().map(|&v| v as f32).collect();
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let e: Vec<f32> = x.iter().map(|&v| (v - max).exp()).collect();
    let s = sum_f32(&e, how);
    let out: Vec<f32> = if op == "Softmax" {
        e.iter().map(|&v| v / s).collect()
    } else {
        let l = s.ln();
        x.iter().map(|&v| (v - max) - l).collect()
    };
    out.into_iter().map(|v| round_to(dtype, v as f64)).collect()
}

fn node(op: &str) -> NodeSpec {
    NodeSpec {
        domain: String::new(),
        op_type: op.into(),
        opset: 13,
        attrs: [("axis".to_string(), Attr::Int(-1))].into_iter().collect(),
        num_outputs: 1,
    }
}

/// The arbitration's verdict on `engine` as `op` of the row `row` (shape [1, n]).
fn judge(op: &str, dtype: DType, row: &[f64], engine: &[f64]) -> Verdict {
    let spec = node(op);
    let shape = vec![1, row.len()];
    let input = Value::new(dtype, shape.clone(), row.to_vec()).unwrap();
    let inputs = [Some(input)];
    let reference = Reference.evaluate(&spec, &inputs).unwrap();
    let independent = Independent.evaluate(&spec, &inputs).unwrap();
    let view = EngineOutput {
        dtype,
        shape: &shape,
        data: engine,
    };
    arbitrate(
        view,
        Bound::for_node(&spec, dtype),
        &reference[0],
        &independent[0],
    )
}

fn is_wrong(v: &Verdict) -> bool {
    matches!(v, Verdict::EngineWrong(Wrong::Value { .. }))
}

/// The lane a broken warp sum drops: one that holds its share of every row here (the masked rows
/// leave the odd lanes nothing but -inf logits, whose loss would be no error at all).
const DROPPED: Sum = Sum::WarpDroppingLane(30);

const KINDS: [Logits; 5] = [
    Logits::Equal,
    Logits::Uniform {
        seed: 1,
        scale: 8.0,
    },
    Logits::Uniform {
        seed: 2,
        scale: 8.0,
    },
    Logits::Uniform {
        seed: 3,
        scale: 30.0,
    },
    Logits::Masked { seed: 4 },
];

#[test]
fn softmax_dropping_one_lane_of_32_is_wrong() {
    for n in [8192, 131_072] {
        for kind in KINDS {
            let row = logits(kind, n, DType::F32);
            let bad = kernel("Softmax", &row, DROPPED, DType::F32);
            let v = judge("Softmax", DType::F32, &row, &bad);
            assert!(is_wrong(&v), "{n} {kind:?}: {v:?}");
        }
    }
}

#[test]
fn all_zero_softmax_is_wrong_at_131072() {
    let n = 131_072;
    for kind in KINDS {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let row = logits(kind, n, dtype);
            let v = judge("Softmax", dtype, &row, &vec![0.0; n]);
            assert!(is_wrong(&v), "{kind:?} {dtype:?}: {v:?}");
        }
    }
}

#[test]
fn f32_softmax_kernels_agree() {
    for n in [8192, 131_072] {
        for kind in KINDS {
            for how in [Sum::Sequential, Sum::Pairwise, Sum::Warp] {
                for dtype in [DType::F32, DType::F16, DType::BF16] {
                    let row = logits(kind, n, dtype);
                    let y = kernel("Softmax", &row, how, dtype);
                    let v = judge("Softmax", dtype, &row, &y);
                    assert_eq!(v, Verdict::Agree, "{n} {kind:?} {how:?} {dtype:?}");
                }
            }
        }
    }
}

#[test]
fn log_softmax_dropping_a_lane_or_answering_zero_is_wrong() {
    for n in [8192, 131_072] {
        for kind in KINDS {
            let row = logits(kind, n, DType::F32);
            let bad = kernel("LogSoftmax", &row, DROPPED, DType::F32);
            let v = judge("LogSoftmax", DType::F32, &row, &bad);
            assert!(is_wrong(&v), "{n} {kind:?}: {v:?}");
            let v = judge("LogSoftmax", DType::F32, &row, &vec![0.0; n]);
            assert!(is_wrong(&v), "{n} {kind:?} zeros: {v:?}");
        }
    }
}

#[test]
fn f32_log_softmax_kernels_agree() {
    for n in [8192, 131_072] {
        for kind in KINDS {
            for how in [Sum::Sequential, Sum::Pairwise, Sum::Warp] {
                for dtype in [DType::F32, DType::F16, DType::BF16] {
                    let row = logits(kind, n, dtype);
                    let z = kernel("LogSoftmax", &row, how, dtype);
                    let v = judge("LogSoftmax", dtype, &row, &z);
                    assert_eq!(v, Verdict::Agree, "{n} {kind:?} {how:?} {dtype:?}");
                }
            }
        }
    }
}

/// One logit of 0 beside 131,071 of -16.7: each exponential (5.6e-8) is under half an ulp of 1, so
/// a sequential f32 sum stays at 1 and the top output is 0.5% high. That is what a correct
/// sequential kernel gives, and the judge must accept it (the fixed bound of 64·2⁻²³ = 7.6e-6 did
/// not); the same row summed by a warp that drops the lane holding the maximum is still wrong.
#[test]
fn a_sequential_sum_that_stalls_agrees_and_a_dropped_lane_does_not() {
    let n = 131_072;
    let mut row = vec![-16.7f32 as f64; n];
    row[0] = 0.0;
    let y = kernel("Softmax", &row, Sum::Sequential, DType::F32);
    let exact = 1.0 / (1.0 + (n - 1) as f64 * (-16.7f32 as f64).exp());
    assert_eq!(y[0], 1.0);
    assert!((y[0] - exact).abs() > 64.0 * 2f64.powi(-23) * 100.0);
    assert_eq!(judge("Softmax", DType::F32, &row, &y), Verdict::Agree);
    let bad = kernel("Softmax", &row, Sum::WarpDroppingLane(0), DType::F32);
    assert!(is_wrong(&judge("Softmax", DType::F32, &row, &bad)));
}
