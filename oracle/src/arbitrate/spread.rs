//! A judge over all of a node's outputs whose power grows with the length of its sums.
//!
//! The per-element bound of a long sum is a worst case (`(K + 2)/2 · ε · m` at length `K`): sound for
//! every correct kernel, in any order, and so loose at large `K` that an error small per term but
//! present in every term passes it. The case that matters is a GEMM on operands rounded to TF32
//! (10 mantissa bits): each product is off by up to 2⁻¹⁰ of itself, so the sum's error is about
//! `2⁻¹⁰·√(Σt²)/√3`; a correct f32 kernel's error comes from rounding its partial sums, about
//! `2⁻²⁴·√(Σ s_j²)/√3`. For terms of either sign, partial sums walk like `√j`, and the ratio of the
//! two errors is about `2^13.5·√2/√K`: 100× at K = 25,088, 50× at K = 100,000, growing as `1/√K`
//! shrinks more slowly than the worst case widens.
//!
//! So beside the per-element bound, a node's f32 outputs are compared as a whole with the outputs
//! of a model correct kernel: the definition's sum taken in order in f32 (each product rounded to
//! f32, added from p = 0), which has the largest partial sums of the orders kernels use (a blocked,
//! split or pairwise order restarts them), and so the largest rounding error of those orders on the
//! same data, correlations between roundings included (they are the same data's). The engine is
//! wrong when the root mean square of its errors is more than [`SPREAD_LIMIT`] times the model's
//! (or than `SPREAD_LIMIT` half-ulps of the outputs, where the model's sums happen to be exact).
//!
//! False alarms: the statistic is an average over every output of the node, so it does not turn on
//! one unlucky element. A correct kernel's errors are, element by element, sums of the same kind of
//! roundings as the model's, on partial sums no larger in the orders kernels use; for it to fail,
//! its root mean square error would have to exceed the sequential model's by a factor of 16, which
//! the rounding model puts beyond reach for any order whose partial sums stay below the sequential
//! ones. The wrong-kernel suite (`conformance/tests/wrong_kernels/spread.rs`) holds sequential,
//! blocked (8 and 32 accumulators) and pairwise f32 kernels, on random and on constant data, to this
//! judge at K = 25,088 and 100,000: the in-order kernel's spread is the model's (1.00×, it is the
//! model), the others' 0.00–0.36×, against a limit of 16. TF32 operands measure 92× at K = 25,088
//! and 46× at K = 100,000 (the `1/√K` law above), so the judge catches them up to K ≈ 800,000.
//! What the judge does not claim: a kernel that sums in an order built to make its partial sums
//! larger than the sequential ones (none does) is outside its argument. And where the terms share a
//! sign, the partial sums drift like `j`, the in-order model's own error grows like `K^1.5`, and the
//! power falls to about `2^13.5/K`: TF32 is caught there only up to K ≈ 1,000 (12× the model at
//! K = 4,096, under the limit). A blocked kernel's error on the same data is several times smaller
//! than the model's; a model of the engine's own order would restore the power, and is not built.
//!
//! It applies to MatMul and Gemm with f32 outputs and at least [`SPREAD_MIN_TERMS`] terms (below
//! that the per-element bound keeps its power: a TF32 GEMM at K = 64 fails it). Its resolution is
//! the limit: an error spread less than 16× the model's passes, so a kernel that declares TF32
//! operands (`Arithmetic`, the model then rounding its operands too) but rounds them to bf16 (8× the
//! TF32 error) is caught per element at small K and not by this judge at large K.
//!
//! The model sums as the kernel declares (`Arithmetic::sums`): a tensor-core kernel declares the
//! `mma`'s f32 accumulation (a few exact products added at a time, the result truncated toward
//! zero), and the model truncates the same way. That matters where the terms share a sign: every
//! truncation then leans the same way, and on the H100 a correct tensor-core GEMM's errors at
//! K = 4,096 were 32× the round-to-nearest model's spread — a false alarm against a model of the
//! wrong arithmetic, and the right verdict for a kernel that claimed round-to-nearest sums.
use super::{Arithmetic, EngineOutput, Sums, Verdict, Wrong};
use crate::{DType, NodeSpec, Output, Value};

/// The factor by which the root mean square of an engine's errors may exceed the sequential f32
/// model's.
pub const SPREAD_LIMIT: f64 = 16.0;

/// The shortest sum the spread judge applies to.
pub const SPREAD_MIN_TERMS: usize = 128;

/// The most outputs the model computes: the leading rows of the output holding at most this many
/// (one row at least). A root mean square over thousands of outputs is as steady as over millions,
/// and the model then costs `4096·K` products however large the node, not a second GEMM beside
/// verification's oracles.
pub const SPREAD_OUTPUTS: usize = 4096;

/// The leading outputs (whole rows, [`SPREAD_OUTPUTS`] at most) of the model correct f32 kernel
/// for `node` on `inputs`, its operands and sums taken as `arithmetic` declares, where the judge
/// applies: MatMul and Gemm with f32 operands, sums of at least [`SPREAD_MIN_TERMS`] terms.
pub fn sequential_f32(
    node: &NodeSpec,
    inputs: &[Option<&Value>],
    arithmetic: Arithmetic,
) -> Option<Vec<f64>> {
    let r = |x: f64| f64::from(arithmetic.round(x as f32));
    if !node.domain.is_empty() && node.domain != "ai.onnx" {
        return None;
    }
    let f32_input = |i: usize| {
        inputs
            .get(i)
            .copied()
            .flatten()
            .filter(|v| v.dtype == DType::F32)
    };
    let (a, b) = (f32_input(0)?, f32_input(1)?);
    match node.op_type.as_str() {
        "MatMul" if a.shape.len() == 2 && b.shape.len() == 2 => {
            let (m, k, n) = (a.shape[0], a.shape[1], b.shape[1]);
            (b.shape[0] == k && k >= SPREAD_MIN_TERMS).then(|| {
                product(
                    m,
                    k,
                    n,
                    arithmetic.sums,
                    |i, p| r(a.data[i * k + p]),
                    |p, j| r(b.data[p * n + j]),
                )
            })
        }
        "Gemm" if a.shape.len() == 2 && b.shape.len() == 2 => {
            let ta = node.int("transA", 0).ok()? != 0;
            let tb = node.int("transB", 0).ok()? != 0;
            let alpha = node.float("alpha", 1.0).ok()? as f32;
            let beta = node.float("beta", 1.0).ok()? as f32;
            let (m, k) = if ta {
                (a.shape[1], a.shape[0])
            } else {
                (a.shape[0], a.shape[1])
            };
            let (kb, n) = if tb {
                (b.shape[1], b.shape[0])
            } else {
                (b.shape[0], b.shape[1])
            };
            if kb != k || k < SPREAD_MIN_TERMS {
                return None;
            }
            let (ac, bc) = (a.shape[1], b.shape[1]);
            let at = |i: usize, p: usize| {
                r(if ta {
                    a.data[p * ac + i]
                } else {
                    a.data[i * ac + p]
                })
            };
            let bt = |p: usize, j: usize| {
                r(if tb {
                    b.data[j * bc + p]
                } else {
                    b.data[p * bc + j]
                })
            };
            let mut y = product(m, k, n, arithmetic.sums, at, bt);
            let c = inputs.get(2).copied().flatten();
            for (idx, v) in y.iter_mut().enumerate() {
                let mut r = alpha * *v as f32;
                if let Some(c) = c {
                    let (i, j) = (idx / n, idx % n);
                    let cv = broadcast_at(c, m, n, i, j)? as f32;
                    r += beta * cv;
                }
                *v = r as f64;
            }
            Some(y)
        }
        _ => None,
    }
}

/// `Σ_p a(i, p)·b(p, j)` for the leading rows' outputs ([`SPREAD_OUTPUTS`]), summed in order as
/// `sums` declares: each product rounded to f32 and added in f32 (to nearest), or `block` exact
/// products at a time added to the f32 accumulator and the result truncated toward zero.
fn product(
    m: usize,
    k: usize,
    n: usize,
    sums: Sums,
    a: impl Fn(usize, usize) -> f64,
    b: impl Fn(usize, usize) -> f64,
) -> Vec<f64> {
    // Row by row, p outside j: each output's sum still runs p = 0, 1, … in order.
    let rows = m.min((SPREAD_OUTPUTS / n.max(1)).max(1));
    let mut y = Vec::with_capacity(rows * n);
    let mut s = vec![0.0f32; n];
    let mut part = vec![0.0f64; n];
    for i in 0..rows {
        s.fill(0.0);
        match sums {
            Sums::Nearest => {
                for p in 0..k {
                    let ap = a(i, p) as f32;
                    for (j, acc) in s.iter_mut().enumerate() {
                        *acc += ap * b(p, j) as f32;
                    }
                }
            }
            Sums::Truncated { block } => {
                for p0 in (0..k).step_by(block.max(1)) {
                    part.fill(0.0);
                    for p in p0..(p0 + block.max(1)).min(k) {
                        // Products of f32 values are exact in f64.
                        let ap = a(i, p) as f32 as f64;
                        for (j, t) in part.iter_mut().enumerate() {
                            *t += ap * (b(p, j) as f32 as f64);
                        }
                    }
                    for (acc, t) in s.iter_mut().zip(&part) {
                        *acc = toward_zero(*acc as f64 + t);
                    }
                }
            }
        }
        y.extend(s.iter().map(|&v| v as f64));
    }
    y
}

/// `x` rounded to f32 toward zero.
fn toward_zero(x: f64) -> f32 {
    let r = x as f32;
    if r.is_finite() && (r as f64).abs() > x.abs() {
        // One step toward zero: the bits of |r| less one, the sign kept.
        f32::from_bits(r.to_bits() - 1)
    } else {
        r
    }
}

/// Gemm's C at output `(i, j)`, broadcast unidirectionally to `[m, n]`; `None` when it does not
/// broadcast.
fn broadcast_at(c: &Value, m: usize, n: usize, i: usize, j: usize) -> Option<f64> {
    let at = match c.shape.as_slice() {
        [] => 0,
        [cn] if *cn == n => j,
        [1] => 0,
        [cm, cn] => {
            let ii = if *cm == m {
                i
            } else if *cm == 1 {
                0
            } else {
                return None;
            };
            let jj = if *cn == n {
                j
            } else if *cn == 1 {
                0
            } else {
                return None;
            };
            ii * cn + jj
        }
        _ => return None,
    };
    c.data.get(at).copied()
}

/// The node's verdict on the spread of its errors: `engine`'s outputs against the exact answer
/// (`reference`) and the sequential model's (`sequential`). `Agree` where the judge does not apply
/// (an output type other than f32, lengths that differ, no element with a finite answer).
pub fn spread(engine: EngineOutput, reference: &Output, sequential: &[f64]) -> Verdict {
    match spread_of(engine, reference, sequential) {
        Some(s) if s.error > SPREAD_LIMIT * s.scale => Verdict::EngineWrong(Wrong::Spread {
            error: s.error,
            sequential: s.sequential,
            allowed: SPREAD_LIMIT * s.scale,
        }),
        _ => Verdict::Agree,
    }
}

/// The root mean squares [`spread`] compares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// Of the engine's errors.
    pub error: f64,
    /// Of the sequential model's errors.
    pub sequential: f64,
    /// What `error` is measured against: `sequential`, or half an f32 ulp of the outputs' root mean
    /// square where that is larger (the model's sums exact).
    pub scale: f64,
}

/// The spread of `engine`'s errors beside the sequential model's over the outputs the model holds
/// (the leading ones), `None` where the judge does not apply.
pub fn spread_of(engine: EngineOutput, reference: &Output, sequential: &[f64]) -> Option<Spread> {
    let exact = &reference.value.data;
    if engine.dtype != DType::F32
        || engine.data.len() != exact.len()
        || sequential.len() > exact.len()
    {
        return None;
    }
    let (mut e2, mut s2, mut o2, mut n) = (0.0, 0.0, 0.0, 0usize);
    for ((&y, &o), &s) in engine.data.iter().zip(exact).zip(sequential) {
        if !(y.is_finite() && o.is_finite() && s.is_finite()) {
            continue;
        }
        e2 += (y - o) * (y - o);
        s2 += (s - o) * (s - o);
        o2 += o * o;
        n += 1;
    }
    if n == 0 {
        return None;
    }
    let rms = |x: f64| (x / n as f64).sqrt();
    // Half an f32 ulp of the outputs' scale: the floor where the model's sums are exact.
    let floor = rms(o2) * f64::from(f32::EPSILON) / 2.0;
    Some(Spread {
        error: rms(e2),
        sequential: rms(s2),
        scale: rms(s2).max(floor),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Attr;

    /// Truncation steps toward zero by at most one ulp, for either sign, and keeps what f32
    /// holds exactly.
    #[test]
    fn toward_zero_truncates() {
        let third = 1.0f64 / 3.0;
        for x in [third, -third, 1e-40, -1e-40, 1.0 + 1e-9, -(1.0 + 1e-9)] {
            let t = toward_zero(x) as f64;
            assert!(t.abs() <= x.abs(), "{x}: {t}");
            let next = f32::from_bits(toward_zero(x).to_bits() + 1) as f64;
            assert!(
                next.abs() > x.abs(),
                "{x}: {t} is not the nearest toward zero"
            );
        }
        assert_eq!(toward_zero(0.5), 0.5);
        assert_eq!(toward_zero(-2.0), -2.0);
        assert_eq!(toward_zero(0.0), 0.0);
    }

    fn spec(op: &str, attrs: &[(&str, Attr)]) -> NodeSpec {
        NodeSpec {
            domain: String::new(),
            op_type: op.into(),
            opset: 13,
            attrs: attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            num_outputs: 1,
        }
    }

    fn f32s(shape: &[usize], data: Vec<f64>) -> Value {
        Value::new(DType::F32, shape.to_vec(), data).unwrap()
    }

    /// The model is the definition's sum in f32, Gemm's alpha, beta and broadcast C applied; short
    /// sums and other types are not judged.
    #[test]
    fn the_model_applies_where_it_should() {
        let k = SPREAD_MIN_TERMS;
        let a = f32s(&[1, k], vec![0.1; k]);
        let b = f32s(&[k, 2], vec![0.5; 2 * k]);
        let c = f32s(&[2], vec![1.0, -1.0]);
        let gemm = spec(
            "Gemm",
            &[("alpha", Attr::Float(2.0)), ("beta", Attr::Float(3.0))],
        );
        let y = sequential_f32(&gemm, &[Some(&a), Some(&b), Some(&c)], Arithmetic::EXACT).unwrap();
        let dot = (0..k).fold(0.0f32, |s, _| s + 0.1f32 * 0.5f32);
        assert_eq!(y, vec![(2.0 * dot + 3.0) as f64, (2.0 * dot - 3.0) as f64]);
        let short = f32s(&[1, k - 1], vec![0.1; k - 1]);
        let b_short = f32s(&[k - 1, 2], vec![0.5; 2 * (k - 1)]);
        assert!(
            sequential_f32(
                &spec("MatMul", &[]),
                &[Some(&short), Some(&b_short)],
                Arithmetic::EXACT
            )
            .is_none()
        );
        let f64a = Value::new(DType::F64, vec![1, k], vec![0.1; k]).unwrap();
        assert!(
            sequential_f32(
                &spec("MatMul", &[]),
                &[Some(&f64a), Some(&b)],
                Arithmetic::EXACT
            )
            .is_none()
        );
        assert!(
            sequential_f32(&spec("Conv", &[]), &[Some(&a), Some(&b)], Arithmetic::EXACT).is_none()
        );
        // A wide output: only the leading rows holding SPREAD_OUTPUTS outputs are modelled.
        let wide = f32s(&[k, 1024], vec![0.5; k * 1024]);
        let many = f32s(&[8, k], vec![0.1; 8 * k]);
        let y = sequential_f32(
            &spec("MatMul", &[]),
            &[Some(&many), Some(&wide)],
            Arithmetic::EXACT,
        );
        assert_eq!(y.map(|y| y.len()), Some(SPREAD_OUTPUTS));
    }

    /// Where the model's sums are exact, the floor is half an ulp of the outputs: an engine off by
    /// one ulp everywhere passes, one off by 16 ulps everywhere does not.
    #[test]
    fn exact_model_sums_fall_back_to_the_output_ulp() {
        let exact = vec![1.0; 64];
        let reference = Output {
            value: Value::new(DType::F32, vec![64], exact.clone()).unwrap(),
            magnitude: exact.clone(),
        };
        let off = |ulps: f64| -> Vec<f64> { vec![1.0 + ulps * f64::from(f32::EPSILON); 64] };
        fn view(d: &[f64]) -> EngineOutput<'_> {
            EngineOutput {
                dtype: DType::F32,
                shape: &[64],
                data: d,
            }
        }
        let one = off(1.0);
        assert_eq!(spread(view(&one), &reference, &exact), Verdict::Agree);
        let sixteen = off(16.0);
        assert!(matches!(
            spread(view(&sixteen), &reference, &exact),
            Verdict::EngineWrong(Wrong::Spread { .. })
        ));
    }
}
