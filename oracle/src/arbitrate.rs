//! Arbitration between an engine and the two oracles (as PyTorch's float64 reference helper does):
//! both oracles agree and the engine differs → the engine is wrong; the oracles disagree → a human must
//! look, and the case is never passed.
//!
//! How far an engine may be from the oracles follows from error analysis of the op's class (see
//! [`Class`] and [`class_of`]) and from what the engine promises to compute in ([`Bound::compute`]),
//! never from a constant chosen to pass. With `o` the oracles' exact answer, `m` the magnitude of the
//! terms combined into it (Σ|terms|, from the oracle), `ε` the machine epsilon of the computed type
//! (2⁻²³ for f32) and `½ulp` half a unit in the last place of the *output* type at the result:
//!
//! | class | bound on \|engine − o\| |
//! |---|---|
//! | exact | 0: the engine's value is `o` itself, rounded once into the output type |
//! | correctly rounded | 0 against `o` rounded once into the output type, ties to even |
//! | unary math | `ulps · ε · m + ½ulp + δ`, `ulps` stated per function |
//! | sums and products | `C · ε · m + ½ulp + δ`, `C` per kind of computation |
//!
//! The unary-math and sum bounds also allow `ulps · τ` (or `C · τ`) absolute, `τ` the smallest
//! normal number of the computed type (1.2e-38 in f32): a result or an intermediate below the
//! normal range may be flushed to zero, as WGSL allows and NVIDIA's Vulkan driver does.
//!
//! `δ = C_ORACLES · ε(f64) · m` is the oracles' own accuracy (they compute in f64 with ordinary
//! algorithms and agree to within it): far below any f32 bound, it is what limits f64 judgements.
//!
//! In every class NaN matches only NaN, an infinity only the same infinity, and the engine's value
//! equal to `o` rounded once into the output type is always right (it covers results that overflow the
//! output type). A magnitude that is not finite where the answer is (HardSigmoid(±∞) = 0 or 1) bounds
//! by the answer instead.
//!
//! ## Softmax and LogSoftmax
//!
//! Their class is a long sum (`C_REDUCE`), but the terms of `S = Σ_j e_j`, `e_j = exp(x_j − max)`,
//! are all positive, so nothing cancels and the sum's rounding grows with the row length `n`; and
//! that error reaches every output of the row relative to the output itself. So the oracles do not
//! return a fixed magnitude (1 was returned before: a fixed bound of 7.6e-6, which passed a
//! kernel 3.2% off on a row of 8,192 and an all-zero answer on rows of 131,072, and failed a correct
//! sequential f32 kernel whose sum stalls at 1 beside 131,071 terms under half an ulp). They return
//! `m = 2·E / C_REDUCE`, so that the bound `C_REDUCE·ε·m` is `2·ε·E`, with `E` a first-order bound,
//! in units of ε (of the computed type, u = ε/2), of what a correct kernel may get wrong:
//!
//! - each exponential: the argument `x_j − max` rounded (relative u, so `u·|d_j|` in the result,
//!   `d_j = x_j − max`) and exp itself within `3 + 2·|d_j|` ulps (WGSL's required accuracy, the
//!   loosest of our targets): `δ_j ≤ (3 + 2.5·|d_j|)·ε`;
//! - the sum, in any order (sequential, pairwise, per lane then a tree): at most `n − 1` roundings
//!   reach any term, `(n − 1)·u·S`; the terms' own errors add `Σ_j e_j·δ_j = (3 + 2.5·W)·ε·S`, with
//!   `W = Σ_j e_j·|d_j| / S` the exponentials' weighted mean of `|d_j|`;
//! - the division, within 2.5 ulps (WGSL's `x / y`; a reciprocal and a product are within 1.5).
//!
//! Softmax: `E_i = y_i·((n − 1)/2 + 2.5·(|d_i| + W) + 8.5) + T`, relative to `y_i` but for `T`, the
//! smallest normal number of the computed type over its ε: an exponential or a quotient below the
//! normal range may be flushed to zero or carried as a subnormal (at most that much absolute, as
//! `S ≥ 1`). LogSoftmax, `z_i = d_i − ln S` (or `ln y_i`, whose error the first form's terms cover):
//! `E_i = (n − 1)/2 + 2.5·(|d_i| + W) + 3·(|ln S| + |z_i|) + 16`, absolute (ln within 3 ulps and
//! 2⁻²¹ absolute near 1, the subtraction half an ulp of `z_i`). The factor 2 covers the second-order
//! terms: a product of `(1 + δ)` factors whose first-order sum is `r ≤ ½` is within `r / (1 − r) ≤
//! 2·r` of 1. The `(n − 1)/2` term is the worst case, reached by a sequential sum that stalls; a
//! kernel that rescales a running sum as the maximum grows (online softmax) rounds more often and
//! is not covered. On a row of 8,192 equal logits the Softmax bound is 9.8e-4 relative, 33 times
//! below a dropped lane's 3.2%; on 131,072 it is 1.6% against the zero answer's 100%.
use crate::{DType, NodeSpec, Output, Value};
use quorum_optable::{Accumulation, Class as Table};

mod arithmetic;
mod spread;
mod terms;
pub use arithmetic::{Arithmetic, Sums};
pub use spread::{
    SPREAD_LIMIT, SPREAD_MIN_TERMS, SPREAD_OUTPUTS, Spread, sequential_f32, spread, spread_of,
};
pub use terms::terms;

/// The outcome of judging one output.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Agree,
    EngineWrong(Wrong),
    OraclesDisagree {
        index: usize,
        reference: f64,
        independent: f64,
    },
}

/// How an engine's output is wrong.
#[derive(Debug, Clone, PartialEq)]
pub enum Wrong {
    /// Element `index` is outside the bound `allowed` of the oracles' `oracle`.
    Value {
        index: usize,
        engine: f64,
        oracle: f64,
        allowed: f64,
    },
    /// The element type, shape or element count differs from the oracles' answer.
    Form(String),
    /// A 64-bit integer element differs from the value both oracles say it is, compared exactly
    /// (beyond 2⁵³, where f64 cannot tell neighbouring integers apart).
    Integer {
        index: usize,
        engine: i128,
        oracle: i128,
    },
    /// Every element within its bound, but the root mean square of the node's errors, `error`, is
    /// beyond `allowed`: [`SPREAD_LIMIT`] times that of a correct f32 kernel summing in order
    /// (`sequential`). See [`spread`].
    Spread {
        error: f64,
        sequential: f64,
        allowed: f64,
    },
}

/// What an op's result is, for the purpose of bounding an engine's error.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Class {
    /// A selection or rearrangement of input values, a comparison, a logical or integer result, a
    /// count or an index: determined exactly.
    Exact,
    /// One conversion into the output type (Cast between float types): within half an ulp, ties to
    /// even — exactly the oracles' answer rounded once.
    Rounded,
    /// A function of one value (and attributes) computed in the promised type: within `ulps` ulps of
    /// the computed type at the magnitude, plus the rounding into the output type.
    Math { ulps: f64 },
    /// Sums and products: `c · ε(computed) · Σ|terms|`, plus the rounding into the output type.
    Sum { c: f64 },
}

/// Elementwise arithmetic (Add, Mul, Sum of a few inputs, Mean, PRelu...): each result takes a handful
/// of roundings in the computed type (variadic Sum and Mean one per input); 8 covers up to 8 inputs.
pub const C_ELEMENTWISE: f64 = 8.0;

/// Reductions, dot products, convolutions, normalisations, softmax, interpolation: the √(terms) growth
/// of a blocked or pairwise sum up to ~4000 terms taken at their full magnitude. Where the number of
/// terms `K` is known ([`terms`]), the constant is raised to the worst case of any sum of that
/// length, `(K + 2)/2`: errors that keep one sign (same-signed terms summed in order) do not cancel.
pub const C_REDUCE: f64 = 64.0;

/// Both oracles compute in f64: they may differ only by f64 rounding of the same terms.
pub const C_ORACLES: f64 = 1e4;

/// `node`'s class in the op table, its attribute form resolved (`None` for an op the table does not
/// list, another domain, or a class attribute of the wrong kind, which makes the node invalid).
fn table_class(node: &NodeSpec) -> Option<Table> {
    if !node.domain.is_empty() && node.domain != "ai.onnx" {
        return None;
    }
    let row = quorum_optable::find(&node.op_type)?;
    let mut invalid = false;
    let class = row.class.resolve(|name| match node.attrs.get(name) {
        None => None,
        Some(_) => node.string(name, "").map_err(|_| invalid = true).ok(),
    });
    (!invalid).then_some(class)
}

/// The class of `node`'s outputs, from the op table's `class` column (`quorum_optable`; `None` for
/// an op the table does not list). Integer and bool outputs (MaxPool's indices, Dropout's mask) are
/// exact whatever the class.
pub fn class_of(node: &NodeSpec) -> Option<Class> {
    let class = table_class(node)?;
    Some(match class {
        Table::Exact => Class::Exact,
        Table::Rounded => Class::Rounded,
        Table::Math { ulps } => Class::Math { ulps: ulps as f64 },
        Table::Sum(Accumulation::Elementwise | Accumulation::Sequential) => {
            Class::Sum { c: C_ELEMENTWISE }
        }
        Table::Sum(Accumulation::Reduction) => Class::Sum { c: C_REDUCE },
        // `resolve` never returns an attribute class (the table's own test checks none is nested).
        Table::ByAttribute(_) => return None,
    })
}

/// The bound one output is judged by: the op's class and the type the engine promises to compute in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    pub class: Class,
    /// The type results are computed (and accumulated) in before the one rounding into the output
    /// type: f32 for f32, f16 and bf16 kernels, f64 for f64.
    pub compute: DType,
    /// For a long sum, the most terms combined into one output, where known ([`terms`]): the
    /// class constant is then at least the worst case of a sum of that length, `(K + 2)/2`.
    pub terms: Option<usize>,
    /// The arithmetic of the kernel's long sums, as it declares it: the standard promise, or
    /// operands rounded to fewer mantissa bits (TF32) and sums truncated (the tensor cores).
    pub arithmetic: Arithmetic,
}

impl Bound {
    /// The bound for an output of `node` with element type `dtype`, for an engine that keeps the
    /// standard promise ([`standard_compute`]). An op outside [`class_of`]'s table is judged as a long
    /// sum ([`C_REDUCE`]).
    pub fn for_node(node: &NodeSpec, dtype: DType) -> Bound {
        Bound {
            class: class_of(node).unwrap_or(Class::Sum { c: C_REDUCE }),
            compute: if sequential_in_element_type(node) {
                dtype
            } else {
                standard_compute(dtype)
            },
            terms: None,
            arithmetic: Arithmetic::EXACT,
        }
    }

    /// The same bound for a kernel that declares `arithmetic`.
    pub fn with_arithmetic(self, arithmetic: Arithmetic) -> Bound {
        Bound { arithmetic, ..self }
    }

    /// [`Bound::for_node`] for a call of `node` on `inputs`, with the length of its sums where the
    /// node is a long sum ([`terms`]).
    pub fn for_call(node: &NodeSpec, dtype: DType, inputs: &[Option<&Value>]) -> Bound {
        Bound {
            terms: terms(node, inputs),
            ..Bound::for_node(node, dtype)
        }
    }

    /// The constant of a long sum's bound: the class's, raised to the worst case of a sum of
    /// `terms` terms in any order (`γ_K·m ≈ K·u·m`, `u = ε/2`, plus a bias and the conversion).
    fn sum_constant(&self, c: f64) -> f64 {
        match self.terms {
            Some(k) => c.max((k as f64 + 2.0) / 2.0),
            None => c,
        }
    }
}

/// Whether the op table's class of `node` is a sequence of updates of the output in its element
/// type (Scatter's `add` and `mul`, `output[...] += updates[...]` with duplicates applied in order):
/// its kernels round after each update, as that definition does, so they promise the element type,
/// not f32.
fn sequential_in_element_type(node: &NodeSpec) -> bool {
    table_class(node) == Some(Table::Sum(Accumulation::Sequential))
}

/// The type Quorum's kernels compute in for results of type `dtype`: f16 and bf16 are widened to f32
/// (and rounded once at the end), f32 stays f32, f64 stays f64; integers and bools are exact.
pub fn standard_compute(dtype: DType) -> DType {
    match dtype {
        DType::F16 | DType::BF16 | DType::F32 => DType::F32,
        d => d,
    }
}

/// An engine's output as the arbitration sees it.
#[derive(Debug, Clone, Copy)]
pub struct EngineOutput<'a> {
    pub dtype: DType,
    pub shape: &'a [usize],
    pub data: &'a [f64],
}

/// The bits of a float format: explicit mantissa bits and the exponent range of normal numbers.
struct Format {
    mantissa: i32,
    min_exp: i32,
    max_exp: i32,
}

fn format(d: DType) -> Option<Format> {
    let (mantissa, min_exp, max_exp) = match d {
        DType::F16 => (10, -14, 15),
        DType::BF16 => (7, -126, 127),
        DType::F32 => (23, -126, 127),
        DType::F64 => (52, -1022, 1023),
        _ => return None,
    };
    Some(Format {
        mantissa,
        min_exp,
        max_exp,
    })
}

/// ⌊log₂|x|⌋ for a finite nonzero normal f64.
fn exponent(x: f64) -> i32 {
    ((x.to_bits() >> 52) & 0x7ff) as i32 - 1023
}

/// The spacing of values of type `d` at `x` (the subnormal spacing below the normal range); 0 for
/// integer and bool types.
pub fn ulp(d: DType, x: f64) -> f64 {
    let Some(f) = format(d) else {
        return 0.0;
    };
    let e = if x == 0.0 || !x.is_finite() || x.abs() < f64::MIN_POSITIVE {
        f.min_exp
    } else {
        exponent(x).max(f.min_exp)
    };
    2f64.powi(e - f.mantissa)
}

/// `x` rounded once to the nearest value of type `d`, ties to even, overflowing to ±∞ (integers and
/// bools, which the oracles return exactly, pass through).
pub fn round_to(d: DType, x: f64) -> f64 {
    let Some(f) = format(d) else {
        return x;
    };
    if d == DType::F64 || x == 0.0 || !x.is_finite() {
        return x;
    }
    if x.abs() < f64::MIN_POSITIVE {
        // Far below every smaller format's subnormals.
        return 0.0f64.copysign(x);
    }
    let q = 2f64.powi(exponent(x).max(f.min_exp) - f.mantissa);
    let r = (x / q).round_ties_even() * q;
    let max = 2f64.powi(f.max_exp) * (2.0 - 2f64.powi(-f.mantissa));
    if r.abs() > max {
        f64::INFINITY.copysign(x)
    } else {
        r
    }
}

/// Machine epsilon (the ulp of 1) of a type; 0 for integer and bool types.
pub fn eps(d: DType) -> f64 {
    match format(d) {
        Some(f) => 2f64.powi(-f.mantissa),
        None => 0.0,
    }
}

fn same(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b
}

/// Checks that the two oracles agree, element for element, within f64 rounding of the same terms.
pub fn oracles_agree(reference: &Output, independent: &Output) -> Verdict {
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
        // Or both are below anything the output type holds (each rounds to ±0): one oracle
        // underflows to 0 where the other keeps 2.3e-308 (Sigmoid of -709: 1/(1+e^709) overflows
        // its denominator, e^-709/(1+e^-709) does not), and the f32 answer is 0 either way. Found by
        // the stream fuzzer's strict one-stream reference on the H200. Only there: a gap an output
        // rounding would hide elsewhere is still a disagreement.
        let d = reference.value.dtype;
        let vanishes = |x: f64| round_to(d, x) == 0.0;
        if !(same(a, b) || (a - b).abs() <= oracle_bound || (vanishes(a) && vanishes(b))) {
            return Verdict::OraclesDisagree {
                index: k,
                reference: a,
                independent: b,
            };
        }
    }
    Verdict::Agree
}

/// How far element `o` (with term magnitude `mag`) may be from the engine's `e` under `bound`, for
/// output type `out`. `None`: the element must equal `o` rounded once into `out`.
pub fn allowed(bound: Bound, out: DType, o: f64, mag: f64, e: f64) -> Option<f64> {
    let k = match bound.class {
        Class::Exact | Class::Rounded => return None,
        Class::Math { ulps } => ulps,
        Class::Sum { c } => bound.sum_constant(c),
    };
    format(out)?;
    let mag = if mag.is_finite() {
        mag.max(o.abs())
    } else {
        o.abs()
    };
    // Half an ulp of the output type at the larger of the two values: a result that rounds across a
    // power of two lands on the coarser spacing.
    let at = if e.is_finite() {
        o.abs().max(e.abs())
    } else {
        o.abs()
    };
    // The oracles' own accuracy: they agree to within `C_ORACLES · ε(f64) · m`, and their f64
    // transcendental functions are that far from exact (erf, up to ~130 f64 ulps). Negligible beside
    // an f32 bound (2e-12 against 1e-7 relative), it is what limits the judgement of f64 results.
    let judge = C_ORACLES * f64::EPSILON * mag;
    // A long sum's products of declared rounded operands: each operand within `u` of itself.
    let operands = match bound.class {
        Class::Sum { .. } => 2.0 * bound.arithmetic.unit() * mag,
        _ => 0.0,
    };
    // Results and intermediates below the computed type's normal range may be flushed to zero
    // (WGSL allows it, and NVIDIA's Vulkan driver does it: a BatchNormalization answer of -1.8e-42
    // came back 0 on the H200): each of the `k` roundings may instead lose up to the smallest normal
    // number. 64 of them are 7.5e-37 in f32, far below any answer a wrong kernel is caught by.
    let flushed = k * tiny(bound.compute);
    Some(k * eps(bound.compute) * mag + operands + flushed + ulp(out, at) / 2.0 + judge)
}

/// The smallest normal number of a float type (0 for integer and bool types).
pub fn tiny(d: DType) -> f64 {
    match format(d) {
        Some(f) => 2f64.powi(f.min_exp),
        None => 0.0,
    }
}

/// Judges `engine` against the two oracles' outputs for the same node and inputs under `bound`.
pub fn arbitrate(
    engine: EngineOutput,
    bound: Bound,
    reference: &Output,
    independent: &Output,
) -> Verdict {
    let agreed = oracles_agree(reference, independent);
    if agreed != Verdict::Agree {
        return agreed;
    }
    let want = &reference.value;
    if engine.dtype != want.dtype {
        return Verdict::EngineWrong(Wrong::Form(format!(
            "element type {:?}, the oracles' {:?}",
            engine.dtype, want.dtype
        )));
    }
    if engine.shape != want.shape.as_slice() {
        return Verdict::EngineWrong(Wrong::Form(format!(
            "shape {:?}, the oracles' {:?}",
            engine.shape, want.shape
        )));
    }
    if engine.data.len() != want.data.len() {
        return Verdict::EngineWrong(Wrong::Form(format!(
            "{} elements, the oracles' {}",
            engine.data.len(),
            want.data.len()
        )));
    }
    for (k, (&e, &o)) in engine.data.iter().zip(&want.data).enumerate() {
        let rounded = round_to(engine.dtype, o);
        if same(e, rounded) {
            continue;
        }
        let mag = reference.magnitude.get(k).copied().unwrap_or(0.0);
        // A NaN or infinite answer admits nothing but itself (compared above).
        let limit = if o.is_finite() {
            allowed(bound, engine.dtype, o, mag, e)
        } else {
            None
        };
        let ok = match limit {
            _ if o.is_nan() || o.is_infinite() || !e.is_finite() => false,
            None => false,
            Some(a) => (e - o).abs() <= a,
        };
        if !ok {
            return Verdict::EngineWrong(Wrong::Value {
                index: k,
                engine: e,
                oracle: o,
                allowed: limit.unwrap_or(0.0),
            });
        }
    }
    Verdict::Agree
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Value;

    fn out(dtype: DType, data: Vec<f64>, magnitude: Vec<f64>) -> Output {
        Output {
            value: Value::new(dtype, vec![data.len()], data).unwrap(),
            magnitude,
        }
    }

    fn judge(dtype: DType, e: &[f64], bound: Bound, o: &Output) -> Verdict {
        let shape = [e.len()];
        let view = EngineOutput {
            dtype,
            shape: &shape,
            data: e,
        };
        arbitrate(view, bound, o, &o.clone())
    }

    /// TF32 keeps 10 mantissa bits, rounding to nearest with ties away from zero; exact operands
    /// are left as they are; a declared rounding widens a long sum's bound by its two roundings.
    #[test]
    fn declared_operands_round_and_widen_the_bound() {
        for x in [1.0f32, 1.000_122_1, -3.3, 1e-30, 6.5e4] {
            let want = f32::from_bits((x.to_bits() + 0x1000) & !0x1fff);
            assert_eq!(Arithmetic::TF32.round(x).to_bits(), want.to_bits(), "{x}");
            assert_eq!(Arithmetic::EXACT.round(x), x);
        }
        assert!(Arithmetic::TF32.round(f32::NAN).is_nan());
        assert_eq!(Arithmetic::TF32.unit(), 0.5f64.powi(11));
        let sum = bound(Class::Sum { c: C_REDUCE });
        let exact = allowed(sum, DType::F32, 1.0, 100.0, 1.0).unwrap();
        let tf32 = allowed(
            sum.with_arithmetic(Arithmetic::TF32),
            DType::F32,
            1.0,
            100.0,
            1.0,
        )
        .unwrap();
        assert!((tf32 - exact - 2.0 * 0.5f64.powi(11) * 100.0).abs() < 1e-12);
        // Not a long sum: operands do not enter.
        let math = bound(Class::Math { ulps: 4.0 });
        assert_eq!(
            allowed(
                math.with_arithmetic(Arithmetic::TF32),
                DType::F32,
                1.0,
                1.0,
                1.0
            ),
            allowed(math, DType::F32, 1.0, 1.0, 1.0)
        );
    }

    /// A subnormal answer flushed to zero is within the bound (a Vulkan driver may flush); an
    /// answer in the normal range returned as zero is not, however small.
    #[test]
    fn subnormal_results_may_be_flushed_but_normal_ones_not() {
        for class in [Class::Sum { c: C_REDUCE }, Class::Math { ulps: 4.0 }] {
            let subnormal = -1.7725e-42;
            let o = out(DType::F32, vec![subnormal], vec![subnormal.abs()]);
            assert_eq!(judge(DType::F32, &[0.0], bound(class), &o), Verdict::Agree);
            let small = 1e-30;
            let o = out(DType::F32, vec![small], vec![small]);
            assert!(is_value_wrong(
                &judge(DType::F32, &[0.0], bound(class), &o),
                0
            ));
        }
        assert_eq!(tiny(DType::F32), f32::MIN_POSITIVE as f64);
        assert_eq!(tiny(DType::I64), 0.0);
    }

    fn bound(class: Class) -> Bound {
        Bound {
            class,
            compute: DType::F32,
            terms: None,
            arithmetic: Arithmetic::EXACT,
        }
    }

    fn is_value_wrong(v: &Verdict, at: usize) -> bool {
        matches!(v, Verdict::EngineWrong(Wrong::Value { index, .. }) if *index == at)
    }

    #[test]
    fn sums_allow_c_eps_terms_plus_half_an_output_ulp() {
        let r = out(DType::F32, vec![1.0, -2.5, 1e-3], vec![4.0, 2.5, 50.0]);
        let i = out(
            DType::F32,
            vec![1.0 + 1e-15, -2.5, 1e-3],
            vec![4.0, 2.5, 50.0],
        );
        let b = bound(Class::Sum { c: C_REDUCE });
        let shape = [3];
        let ok = [1.000_000_1, -2.5, 1.2e-3];
        let view = EngineOutput {
            dtype: DType::F32,
            shape: &shape,
            data: &ok,
        };
        assert_eq!(arbitrate(view, b, &r, &i), Verdict::Agree);
        let bad = [1.01, -2.5, 1e-3];
        let view = EngineOutput { data: &bad, ..view };
        assert!(is_value_wrong(&arbitrate(view, b, &r, &i), 0));
        let j = out(DType::F32, vec![1.0, -2.4, 1e-3], vec![4.0, 2.5, 50.0]);
        assert!(matches!(
            arbitrate(view, b, &r, &j),
            Verdict::OraclesDisagree { index: 1, .. }
        ));
    }

    /// One oracle underflows to 0 where the other keeps 2.3e-308: for an f32 output they agree
    /// (both are the f32 0) and the engine is still judged against the reference; a gap an f32
    /// can hold, or any gap in an f64 output, is still a disagreement (and so is a gap below one
    /// f32 ulp at a normal magnitude: `wrong_kernels` feeds one oracle a perturbed input).
    #[test]
    fn oracles_agree_across_f64_underflow_only() {
        let r = out(DType::F32, vec![0.0, 0.5], vec![0.0, 0.5]);
        let i = out(DType::F32, vec![2.278e-308, 0.5], vec![2.278e-308, 0.5]);
        let b = bound(Class::Math { ulps: 4.0 });
        let shape = [2];
        let ok = [0.0, 0.5];
        let view = EngineOutput {
            dtype: DType::F32,
            shape: &shape,
            data: &ok,
        };
        assert_eq!(arbitrate(view, b, &r, &i), Verdict::Agree);
        let bad = [1e-30, 0.5];
        let view_bad = EngineOutput { data: &bad, ..view };
        assert!(is_value_wrong(&arbitrate(view_bad, b, &r, &i), 0));
        let j = out(DType::F32, vec![1e-30, 0.5], vec![1e-30, 0.5]);
        assert!(matches!(
            arbitrate(view, b, &r, &j),
            Verdict::OraclesDisagree { index: 0, .. }
        ));
        let r64 = out(DType::F64, vec![0.0, 0.5], vec![0.0, 0.5]);
        let i64 = out(DType::F64, vec![2.278e-308, 0.5], vec![2.278e-308, 0.5]);
        let view64 = EngineOutput {
            dtype: DType::F64,
            ..view
        };
        assert!(matches!(
            arbitrate(view64, b, &r64, &i64),
            Verdict::OraclesDisagree { index: 0, .. }
        ));
    }

    #[test]
    fn nan_and_infinity_must_match_exactly() {
        let r = out(DType::F32, vec![f64::NAN, f64::INFINITY], vec![1.0, 1.0]);
        let b = bound(Class::Sum { c: C_REDUCE });
        assert_eq!(
            judge(DType::F32, &[f64::NAN, f64::INFINITY], b, &r),
            Verdict::Agree
        );
        assert!(is_value_wrong(
            &judge(DType::F32, &[0.0, f64::INFINITY], b, &r),
            0
        ));
        assert!(is_value_wrong(
            &judge(DType::F32, &[f64::NAN, f64::MAX], b, &r),
            1
        ));
        let finite = out(DType::F32, vec![2.0], vec![2.0]);
        assert!(is_value_wrong(
            &judge(DType::F32, &[f64::NAN], b, &finite),
            0
        ));
        assert!(is_value_wrong(
            &judge(DType::F32, &[f64::INFINITY], b, &finite),
            0
        ));
    }

    #[test]
    fn integers_are_exact() {
        let r = out(DType::I64, vec![3.0, 4.0], vec![0.0, 0.0]);
        let b = Bound::for_node(&spec("Add"), DType::I64);
        assert!(is_value_wrong(&judge(DType::I64, &[3.0, 5.0], b, &r), 1));
        assert_eq!(judge(DType::I64, &[3.0, 4.0], b, &r), Verdict::Agree);
    }

    fn spec(op: &str) -> NodeSpec {
        NodeSpec {
            domain: String::new(),
            op_type: op.into(),
            opset: 21,
            attrs: Default::default(),
            num_outputs: 1,
        }
    }

    #[test]
    // 3.14159 is a chosen input (it rounds to bf16 3.140625), not an approximation of π.
    #[allow(clippy::approx_constant)]
    fn rounding_is_to_nearest_even_in_each_format() {
        // f16: 1 + 2^-11 is a tie between 1 and 1 + 2^-10: to even (1); 1 + 3·2^-11 rounds up.
        assert_eq!(round_to(DType::F16, 1.0 + 2f64.powi(-11)), 1.0);
        assert_eq!(
            round_to(DType::F16, 1.0 + 3.0 * 2f64.powi(-11)),
            1.0 + 2.0 * 2f64.powi(-10)
        );
        // f16 overflow: 65504 is the largest; 65520 (the tie above it) goes to infinity.
        assert_eq!(round_to(DType::F16, 65519.0), 65504.0);
        assert_eq!(round_to(DType::F16, 65520.0), f64::INFINITY);
        assert_eq!(round_to(DType::F16, -7e4), f64::NEG_INFINITY);
        // f16 subnormals: spacing 2^-24.
        assert_eq!(round_to(DType::F16, 1.4 * 2f64.powi(-24)), 2f64.powi(-24));
        assert_eq!(round_to(DType::F16, 0.4 * 2f64.powi(-24)), 0.0);
        // bf16 keeps 8 significant bits; f32 agrees with Rust's own conversion.
        assert_eq!(round_to(DType::BF16, 1.0 + 2f64.powi(-8)), 1.0);
        assert_eq!(round_to(DType::BF16, 3.14159), 3.140625);
        for x in [0.1, -1e-40, 3.4e38, 3.5e38, 1e-46, 7.0e-46, 123456.789] {
            assert_eq!(round_to(DType::F32, x), x as f32 as f64, "{x}");
        }
        assert_eq!(round_to(DType::I32, 7.0), 7.0);
        assert_eq!(ulp(DType::F32, 1.5), 2f64.powi(-23));
        assert_eq!(ulp(DType::F16, 0.0), 2f64.powi(-24));
        assert_eq!(ulp(DType::BF16, 300.0), 2.0);
    }

    #[test]
    // 3.14159 and its bf16 rounding 3.140625 are chosen inputs, not approximations of π.
    #[allow(clippy::approx_constant)]
    fn a_cast_is_exactly_the_rounded_answer() {
        let b = Bound::for_node(&spec("Cast"), DType::BF16);
        assert_eq!(b.class, Class::Rounded);
        let r = out(DType::BF16, vec![3.140625, 100.0], vec![3.140625, 100.0]);
        assert_eq!(
            judge(DType::BF16, &[3.140625, 100.0], b, &r),
            Verdict::Agree
        );
        // One bf16 step off is wrong, however small.
        assert!(is_value_wrong(
            &judge(DType::BF16, &[3.15625, 100.0], b, &r),
            0
        ));
        // The oracles may answer exactly; the engine's correctly rounded value is what is asked.
        let exact = out(DType::BF16, vec![3.14159], vec![3.14159]);
        assert_eq!(judge(DType::BF16, &[3.140625], b, &exact), Verdict::Agree);
    }

    #[test]
    fn f16_results_are_bounded_by_f32_computation() {
        // Exp of f16: 4 f32 ulps plus half an f16 ulp; 3% off is far outside.
        let b = Bound::for_node(&spec("Exp"), DType::F16);
        let o = std::f64::consts::E;
        let r = out(DType::F16, vec![o], vec![o]);
        assert_eq!(
            judge(DType::F16, &[round_to(DType::F16, o)], b, &r),
            Verdict::Agree
        );
        assert!(is_value_wrong(
            &judge(DType::F16, &[round_to(DType::F16, o * 1.03)], b, &r),
            0
        ));
        // One f16 step off the correctly rounded value is already too far.
        let step = round_to(DType::F16, o) + ulp(DType::F16, o);
        assert!(is_value_wrong(&judge(DType::F16, &[step], b, &r), 0));
    }

    #[test]
    fn an_infinite_magnitude_bounds_by_the_answer() {
        // HardSigmoid(+inf) = 1 with magnitude |alpha·inf| + beta = inf: any finite value used to pass.
        let b = Bound::for_node(&spec("HardSigmoid"), DType::F32);
        let r = out(DType::F32, vec![1.0], vec![f64::INFINITY]);
        assert_eq!(judge(DType::F32, &[1.0], b, &r), Verdict::Agree);
        assert!(is_value_wrong(&judge(DType::F32, &[0.5], b, &r), 0));
    }

    #[test]
    fn form_is_checked_before_values() {
        let r = out(DType::F32, vec![1.0, 2.0], vec![1.0, 2.0]);
        let b = bound(Class::Exact);
        assert!(matches!(
            judge(DType::F64, &[1.0, 2.0], b, &r),
            Verdict::EngineWrong(Wrong::Form(_))
        ));
        assert!(matches!(
            judge(DType::F32, &[1.0], b, &r),
            Verdict::EngineWrong(Wrong::Form(_))
        ));
        let shape = [2, 1];
        let view = EngineOutput {
            dtype: DType::F32,
            shape: &shape,
            data: &[1.0, 2.0],
        };
        assert!(matches!(
            arbitrate(view, b, &r, &r.clone()),
            Verdict::EngineWrong(Wrong::Form(_))
        ));
    }
}
