//! Kernels that compute the right thing at the wrong precision, compare the wrong way, leave an
//! element unwritten or hand back the wrong type: each must be caught by the bound of its op's class
//! (`quorum_oracle::arbitrate`), where a bound of so many ulps of the output type alone (±50% for
//! bf16, ±6% for f16) let them all through.
use half::{bf16, f16};
use quorum_oracle::{Attr, DType};
use rstest::rstest;

use crate::common::*;
use crate::structural::gemm;

fn to_f16(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

/// Cast f32 → bf16 must be the correctly rounded value: 30% off is not "within tolerance".
#[rstest]
#[case::correct(1.0, true)]
#[case::thirty_percent_off(1.3, false)]
fn bf16_cast(#[case] factor: f32, #[case] right: bool) {
    for seed in SEEDS {
        let x = Rng(seed).vec(40, 4.0);
        let spec = Spec::new("Cast", 19, vec![("to", Attr::Int(16))]);
        let o = setup(&spec, &[Some(T::f32(&[5, 8], &x))]);
        let y = x
            .iter()
            .map(|&v| bf16::from_f32(v * factor).to_f64())
            .collect();
        expect(
            judge(&spec, &out(&o, DType::BF16, y), &o),
            right,
            "Cast to bf16",
        );
    }
}

/// Exp of f16 values computed in f32 and rounded once: 3% off is far outside half an f16 ulp.
#[rstest]
#[case::correct(1.0, true)]
#[case::three_percent_off(1.03, false)]
fn f16_exp(#[case] factor: f32, #[case] right: bool) {
    for seed in SEEDS {
        let x = T::f16(&[6, 7], &Rng(seed).vec(42, 3.0));
        let spec = Spec::new("Exp", 13, vec![]);
        let o = setup(&spec, &[Some(x.clone())]);
        let y = x
            .f32s()
            .iter()
            .map(|&v| f16::from_f32(v.exp() * factor).to_f64())
            .collect();
        expect(judge(&spec, &out(&o, DType::F16, y), &o), right, "f16 Exp");
    }
}

#[derive(Clone, Copy, Debug)]
enum Compare {
    Less,
    LessOrEqual,
    Equal,
    Never,
}

impl Compare {
    fn apply(self, a: f32, b: f32) -> bool {
        match self {
            Compare::Less => a < b,
            Compare::LessOrEqual => a <= b,
            Compare::Equal => a == b,
            Compare::Never => false,
        }
    }
}

/// Comparisons drawn from half-steps, so that equal operands are common and Less, LessOrEqual and
/// Equal give different answers.
#[rstest]
#[case::less("Less", Compare::Less, true)]
#[case::less_as_less_or_equal("Less", Compare::LessOrEqual, false)]
#[case::equal("Equal", Compare::Equal, true)]
#[case::equal_always_false("Equal", Compare::Never, false)]
fn comparison_with_ties(#[case] op: &'static str, #[case] kernel: Compare, #[case] right: bool) {
    for seed in SEEDS {
        let mut rng = Rng(seed);
        let (mut a, b) = (rng.halves(64, 2.0), rng.halves(8, 2.0));
        // Besides the ties drawn by chance, one element in five equal to its partner for sure.
        for i in (0..64).step_by(5) {
            a[i] = b[i % 8];
        }
        let spec = Spec::new(op, 13, vec![]);
        let inputs = [Some(T::f32(&[8, 8], &a)), Some(T::f32(&[8], &b))];
        let o = setup(&spec, &inputs);
        let y = (0..64)
            .map(|i| kernel.apply(a[i], b[i % 8]) as u8 as f64)
            .collect();
        expect(
            judge(&spec, &out(&o, DType::Bool, y), &o),
            right,
            &format!("{op} as {kernel:?}"),
        );
    }
}

/// A MatMul of f16 values whose running sum is rounded to f16 after every term, where the kernel
/// promises f32 accumulation and one final rounding.
#[rstest]
#[case::f32_accumulation(false, true)]
#[case::f16_accumulation(true, false)]
fn f16_matmul_accumulator(#[case] accumulate_in_f16: bool, #[case] right: bool) {
    for seed in SEEDS {
        let mut rng = Rng(seed);
        let (m, k, n) = (4, 256, 4);
        let a = T::f16(&[m, k], &rng.vec(m * k, 1.0));
        let b = T::f16(&[k, n], &rng.vec(k * n, 1.0));
        let spec = Spec::new("MatMul", 13, vec![]);
        let o = setup(&spec, &[Some(a.clone()), Some(b.clone())]);
        let (a, b) = (a.f32s(), b.f32s());
        let mut y = Vec::with_capacity(m * n);
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0f32;
                for p in 0..k {
                    s += a[i * k + p] * b[p * n + j];
                    if accumulate_in_f16 {
                        s = to_f16(s);
                    }
                }
                y.push(to_f16(s) as f64);
            }
        }
        expect(
            judge(&spec, &out(&o, DType::F16, y), &o),
            right,
            "f16 MatMul",
        );
    }
}

/// An f32 GEMM whose operands were rounded to TF32's 10-bit mantissa (what tensor cores do when
/// TF32 is allowed) where plain f32 was asked for.
#[rstest]
#[case::f32(false, true)]
#[case::tf32_operands(true, false)]
fn gemm_operand_precision(#[case] tf32: bool, #[case] right: bool) {
    // Round to nearest (ties away) at bit 13: 10 explicit mantissa bits remain.
    let round = |x: f32| {
        if tf32 {
            f32::from_bits((x.to_bits() + 0x1000) & !0x1fff)
        } else {
            x
        }
    };
    for seed in SEEDS {
        let mut rng = Rng(seed);
        let (m, k, n) = (8, 64, 8);
        let (a, b) = (rng.vec(m * k, 1.0), rng.vec(k * n, 1.0));
        let spec = Spec::new("Gemm", 13, vec![]);
        let inputs = [Some(T::f32(&[m, k], &a)), Some(T::f32(&[k, n], &b))];
        let o = setup(&spec, &inputs);
        let a: Vec<f32> = a.into_iter().map(round).collect();
        let b: Vec<f32> = b.into_iter().map(round).collect();
        let y = gemm(&a, &b, None, (m, k, n));
        expect(judge(&spec, &f32_out(&o, &y), &o), right, "Gemm operands");
    }
}

/// The poison patterns a harness fills an output with before a kernel runs: a NaN (0xFF bytes) and a
/// finite value (0x3C bytes, about 0.0115), so that an unwritten element shows whatever the right
/// answer is.
const POISONS: [u32; 2] = [0xffff_ffff, 0x3c3c_3c3c];

/// `a / b` into a poisoned buffer; the buggy kernel stops one element short.
fn div_into(out: &mut [f32], a: &[f32], b: &[f32], skip_last: bool) {
    let n = out.len() - skip_last as usize;
    for i in 0..n {
        out[i] = a[i] / b[i];
    }
}

/// The last element's right answer is NaN (0/0): a NaN poison left there looks right, the finite
/// poison does not. Judged under both patterns, as the GPU suite runs every case.
#[rstest]
#[case::writes_every_element(false, true)]
#[case::last_element_unwritten(true, false)]
fn unwritten_element_where_the_answer_is_nan(#[case] skip_last: bool, #[case] right: bool) {
    for seed in SEEDS {
        let mut rng = Rng(seed);
        let n = 30;
        let (mut a, mut b) = (rng.vec(n, 3.0), rng.vec(n, 3.0));
        a[n - 1] = 0.0;
        b[n - 1] = 0.0;
        let spec = Spec::new("Div", 14, vec![]);
        let inputs = [Some(T::f32(&[5, 6], &a)), Some(T::f32(&[5, 6], &b))];
        let o = setup(&spec, &inputs);
        assert!(o.0.value.data[n - 1].is_nan());
        let verdicts: Vec<_> = POISONS
            .iter()
            .map(|&p| {
                let mut y = vec![f32::from_bits(p); n];
                div_into(&mut y, &a, &b, skip_last);
                judge(&spec, &f32_out(&o, &y), &o)
            })
            .collect();
        // The NaN pattern alone cannot tell: that is why there is a second one.
        assert_agree(verdicts[0].clone(), "NaN poison");
        expect(verdicts[1].clone(), right, "finite poison");
    }
}

/// Values computed right but handed back as f32 where the op's output is f16.
#[rstest]
#[case::f16_output(DType::F16, true)]
#[case::f32_output(DType::F32, false)]
fn output_element_type(#[case] dtype: DType, #[case] right: bool) {
    for seed in SEEDS {
        let x = T::f16(&[3, 9], &Rng(seed).vec(27, 4.0));
        let spec = Spec::new("Sigmoid", 13, vec![]);
        let o = setup(&spec, &[Some(x.clone())]);
        let y = x
            .f32s()
            .iter()
            .map(|&v| {
                let s = 1.0 / (1.0 + (-v).exp());
                if dtype == DType::F16 {
                    to_f16(s) as f64
                } else {
                    s as f64
                }
            })
            .collect();
        expect(judge(&spec, &out(&o, dtype, y), &o), right, "Sigmoid type");
    }
}
