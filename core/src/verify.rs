//! Verification of accelerated results against the two CPU oracles (`quorum-oracle`).
//!
//! `VerifyMode::Off` trusts the accelerator; `Shadow` also runs each accelerated node's inputs through
//! both oracles, logs and counts a mismatch and continues with the CPU kernel's result; `Strict` ends
//! the run with [`Error::VerifyMismatch`](crate::Error::VerifyMismatch). The verdict is the one
//! arbitration function of `quorum_oracle::arbitrate`, with the error bound of the op's class: both
//! oracles agree and the device differs → the device is wrong. A check the oracles cannot settle (they
//! disagree, they reject the inputs, or they do not cover the op, a dtype or an attribute) is never
//! passed: `Strict` stops the run ([`Error::VerifyUnsettled`](crate::Error::VerifyUnsettled)) unless
//! the op is allowed by name (`SessionOptions::allow_unchecked`), `Shadow` counts and reports it.
use std::collections::BTreeMap;

use quorum_oracle as oracle;
use quorum_oracle::Oracle;
/// What a mismatch found (the oracles' own type).
pub use quorum_oracle::arbitrate::Wrong;
use quorum_oracle::arbitrate::{
    Arithmetic, Bound, EngineOutput, Verdict, arbitrate, sequential_f32, spread,
};

use crate::counters::Counters;
use crate::error::{Error, Result};
use crate::ir::{Attr, Node};
use crate::tensor::{DType, Tensor, Value};

/// How much an accelerated result is trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VerifyMode {
    #[default]
    Off,
    Shadow,
    Strict,
}

impl std::str::FromStr for VerifyMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "off" => Ok(VerifyMode::Off),
            "shadow" => Ok(VerifyMode::Shadow),
            "strict" => Ok(VerifyMode::Strict),
            other => Err(format!(
                "verify mode '{other}' is not one of off, shadow, strict"
            )),
        }
    }
}

impl VerifyMode {
    /// `QUORUM_VERIFY` overrides the mode a session was built with (an invalid value is an error).
    pub fn with_env_override(self) -> Result<VerifyMode, String> {
        match std::env::var("QUORUM_VERIFY") {
            Ok(v) if !v.is_empty() => v.parse().map_err(|e: String| format!("QUORUM_VERIFY: {e}")),
            _ => Ok(self),
        }
    }
}

/// The outcome of checking one node's outputs.
#[derive(Debug, Clone, PartialEq)]
pub enum Check {
    Agree,
    /// Output `output` is wrong: a value outside the bound, or the wrong dtype, shape or count.
    Mismatch {
        output: usize,
        wrong: Wrong,
    },
    /// The oracles could not judge.
    Unsettled(Unsettled),
}

/// Why the oracles could not judge a node.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Unsettled {
    /// The two oracles gave different answers: a human must settle which is right.
    OraclesDisagree(String),
    /// The oracles refuse these inputs as breaking the op's contract (the device computed something).
    InputsRejected(String),
    /// The op, one of its forms, a dtype or an attribute is outside the oracles' set.
    NotCovered(String),
}

impl std::fmt::Display for Unsettled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unsettled::OraclesDisagree(m) => write!(f, "the oracles disagree: {m}"),
            Unsettled::InputsRejected(m) => write!(f, "the oracles reject the inputs: {m}"),
            Unsettled::NotCovered(m) => write!(f, "not covered by the oracles: {m}"),
        }
    }
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Check::Agree => f.write_str("agrees with both oracles"),
            Check::Mismatch { output, wrong } => write!(f, "output {output}: {}", describe(wrong)),
            Check::Unsettled(u) => write!(f, "unsettled: {u}"),
        }
    }
}

/// One line for a wrong output.
pub fn describe(wrong: &Wrong) -> String {
    match wrong {
        Wrong::Value {
            index,
            engine,
            oracle,
            allowed,
        } => format!(
            "element {index}: device {engine}, both oracles {oracle} (allowed error {allowed:e})"
        ),
        Wrong::Form(m) => m.clone(),
        Wrong::Integer {
            index,
            engine,
            oracle,
        } => format!("element {index}: device {engine}, both oracles {oracle} (exact)"),
        Wrong::Spread {
            error,
            sequential,
            allowed,
        } => format!(
            "every element within its bound, but the errors' root mean square {error:e} is over \
             {allowed:e} (a correct f32 kernel summing in order: {sequential:e}): a systematic \
             error in every term, such as operands rounded to TF32"
        ),
    }
}

/// The oracles' name for a dtype (`None` for types they do not take).
pub fn oracle_dtype(d: DType) -> Option<oracle::DType> {
    use oracle::DType as O;
    Some(match d {
        DType::F32 => O::F32,
        DType::F64 => O::F64,
        DType::F16 => O::F16,
        DType::BF16 => O::BF16,
        DType::I8 => O::I8,
        DType::I16 => O::I16,
        DType::I32 => O::I32,
        DType::I64 => O::I64,
        DType::U8 => O::U8,
        DType::U16 => O::U16,
        DType::U32 => O::U32,
        DType::U64 => O::U64,
        DType::Bool => O::Bool,
        _ => return None,
    })
}

/// The runtime's dtype for an oracle dtype.
pub fn from_oracle_dtype(d: oracle::DType) -> DType {
    use oracle::DType as O;
    match d {
        O::F32 => DType::F32,
        O::F64 => DType::F64,
        O::F16 => DType::F16,
        O::BF16 => DType::BF16,
        O::I8 => DType::I8,
        O::I16 => DType::I16,
        O::I32 => DType::I32,
        O::I64 => DType::I64,
        O::U8 => DType::U8,
        O::U16 => DType::U16,
        O::U32 => DType::U32,
        O::U64 => DType::U64,
        O::Bool => DType::Bool,
    }
}

/// A tensor as the oracles' value type (`None` for types the oracles do not take).
pub fn to_oracle(t: &Tensor) -> Option<oracle::Value> {
    let dtype = oracle_dtype(t.dtype())?;
    let data = t.to_f64_vec().ok()?;
    oracle::Value::new(dtype, t.shape().to_vec(), data).ok()
}

/// The oracles' description of a node, or why it cannot be given to them.
pub fn node_spec(n: &Node) -> Result<oracle::NodeSpec, String> {
    let mut attrs = BTreeMap::new();
    for (k, a) in &n.attrs {
        let v = match a {
            Attr::Int(v) => oracle::Attr::Int(*v),
            Attr::Float(v) => oracle::Attr::Float(*v as f64),
            Attr::Ints(v) => oracle::Attr::Ints(v.clone()),
            Attr::Floats(v) => oracle::Attr::Floats(v.iter().map(|&x| x as f64).collect()),
            Attr::String(s) => oracle::Attr::String(String::from_utf8_lossy(s).into_owned()),
            Attr::Strings(s) => oracle::Attr::Strings(
                s.iter()
                    .map(|x| String::from_utf8_lossy(x).into_owned())
                    .collect(),
            ),
            Attr::Tensor(t) => match to_oracle(t) {
                Some(v) => oracle::Attr::Tensor(v),
                None => {
                    return Err(format!(
                        "attribute '{k}' holds a {} tensor, which the oracles do not take",
                        t.dtype()
                    ));
                }
            },
            other => {
                return Err(format!(
                    "attribute '{k}' of kind {} is not passed to the oracles",
                    other.kind()
                ));
            }
        };
        attrs.insert(k.clone(), v);
    }
    Ok(oracle::NodeSpec {
        domain: n.domain.clone(),
        op_type: n.op_type.clone(),
        opset: n.opset,
        attrs,
        num_outputs: n.outputs.len(),
    })
}

/// Judges `outputs` (what the accelerator produced for `node` on `inputs`) against both oracles, each
/// output under the error bound of the node's class (`quorum_oracle::arbitrate::class_of`) for kernels
/// that compute f16 and bf16 in f32.
pub fn check(node: &Node, inputs: &[Option<&Value>], outputs: &[Value]) -> Check {
    check_declared(node, inputs, outputs, Arithmetic::EXACT)
}

/// [`check`] for a kernel that declares the arithmetic of its long sums
/// (`DeviceRun::arithmetic`): rounded operands widen each product's bound by their rounding, and the
/// spread judge's model kernel rounds its operands and its sums as declared. A kernel that rounds
/// without declaring it is judged as exact, and a systematic rounding shows (`Wrong::Spread`).
pub fn check_declared(
    node: &Node,
    inputs: &[Option<&Value>],
    outputs: &[Value],
    operands: Arithmetic,
) -> Check {
    if node.domain == crate::ops::QUORUM_DOMAIN && node.op_type == "MatMulBias" {
        return check_matmul_bias(node, inputs, outputs, operands);
    }
    if node.domain == crate::ops::QUORUM_DOMAIN && node.op_type == crate::ops::attention::fused::OP
    {
        return attention::check_fused_attention(node, inputs, outputs, operands);
    }
    let spec = match node_spec(node) {
        Ok(s) => s,
        Err(e) => return Check::Unsettled(Unsettled::NotCovered(e)),
    };
    let mut args = Vec::with_capacity(inputs.len());
    for v in inputs {
        match v {
            None => args.push(None),
            Some(Value::Tensor(t)) => match to_oracle(t) {
                Some(o) => args.push(Some(o)),
                None => {
                    return Check::Unsettled(Unsettled::NotCovered(format!(
                        "the oracles take no {} values",
                        t.dtype()
                    )));
                }
            },
            Some(v) => {
                return Check::Unsettled(Unsettled::NotCovered(format!(
                    "the oracles take tensors only, not {}",
                    v.describe()
                )));
            }
        }
    }
    let arg_refs: Vec<Option<&oracle::Value>> = args.iter().map(Option::as_ref).collect();
    let reference = oracle::reference::Reference;
    let independent = oracle::independent::Independent;
    for o in [&reference as &dyn Oracle, &independent] {
        if let Err(e) = o.supports(&spec) {
            return Check::Unsettled(Unsettled::NotCovered(format!("{}: {e}", o.name())));
        }
    }
    let evaluate = |o: &dyn Oracle| {
        o.evaluate(&spec, &args).map_err(|e| match e {
            oracle::OracleError::Unsupported(m) => {
                Unsettled::NotCovered(format!("{}: {m}", o.name()))
            }
            oracle::OracleError::Invalid(m) => {
                Unsettled::InputsRejected(format!("{}: {m}", o.name()))
            }
        })
    };
    let (r, i) = on_both(&evaluate);
    let r = match r {
        Ok(r) => r,
        Err(u) => return Check::Unsettled(u),
    };
    let i = match i {
        Ok(i) => i,
        Err(u) => return Check::Unsettled(u),
    };
    if r.len() != i.len() {
        return Check::Unsettled(Unsettled::OraclesDisagree(format!(
            "reference gives {} outputs, independent {}",
            r.len(),
            i.len()
        )));
    }
    if outputs.len() != r.len() {
        return Check::Mismatch {
            output: outputs.len().min(r.len()),
            wrong: Wrong::Form(format!(
                "{} outputs, the oracles {}",
                outputs.len(),
                r.len()
            )),
        };
    }
    for (k, ((out, ro), io)) in outputs.iter().zip(&r).zip(&i).enumerate() {
        let Value::Tensor(t) = out else {
            return Check::Mismatch {
                output: k,
                wrong: Wrong::Form(format!("{}, the oracles a tensor", out.describe())),
            };
        };
        let Some(dtype) = oracle_dtype(t.dtype()) else {
            return Check::Mismatch {
                output: k,
                wrong: Wrong::Form(format!(
                    "element type {}, the oracles {}",
                    t.dtype(),
                    from_oracle_dtype(ro.value.dtype)
                )),
            };
        };
        if let Some(why) =
            beyond_exact_integers(t, ro).or_else(|| far_inputs(&spec.op_type, t, inputs))
        {
            // Movement, ring and order ops are judged exactly (`exact`: by identity, by limbs, by
            // rank); anything else beyond 2^53 cannot be judged.
            match exact::judge(&spec, inputs, &args, t, k) {
                Some(Ok(())) => continue,
                Some(Err(c)) => return c,
                None => return Check::Unsettled(Unsettled::NotCovered(why)),
            }
        }
        let data = match t.to_f64_vec() {
            Ok(d) => d,
            Err(e) => return Check::Unsettled(Unsettled::NotCovered(e.to_string())),
        };
        let engine = EngineOutput {
            dtype,
            shape: t.shape(),
            data: &data,
        };
        let bound = Bound::for_call(&spec, dtype, &arg_refs).with_arithmetic(operands);
        let verdict = match arbitrate(engine, bound, ro, io) {
            // Every element within its bound: the node's errors as a whole, where a long sum's
            // per-element bound has lost its power (`quorum_oracle::arbitrate::spread`).
            Verdict::Agree if k == 0 => match sequential_f32(&spec, &arg_refs, operands) {
                Some(model) => spread(engine, ro, &model),
                None => Verdict::Agree,
            },
            v => v,
        };
        match verdict {
            Verdict::Agree => {}
            Verdict::EngineWrong(wrong) => return Check::Mismatch { output: k, wrong },
            Verdict::OraclesDisagree {
                index,
                reference,
                independent,
            } => {
                return Check::Unsettled(Unsettled::OraclesDisagree(format!(
                    "output {k} element {index}: reference {reference}, independent {independent}"
                )));
            }
        }
    }
    Check::Agree
}

/// `f` of the reference and the independent oracle at once, each on its own thread: their products
/// split over threads inside them, but their elementwise families run on one, and a strict run of
/// a transformer is mostly such nodes in count. A panic of the independent oracle's thread is an
/// unsettled check.
fn on_both<T: Send>(
    f: &(dyn Fn(&dyn Oracle) -> std::result::Result<T, Unsettled> + Sync),
) -> (
    std::result::Result<T, Unsettled>,
    std::result::Result<T, Unsettled>,
) {
    std::thread::scope(|s| {
        let independent = s.spawn(|| f(&oracle::independent::Independent));
        let r = f(&oracle::reference::Reference);
        let i = independent.join().unwrap_or_else(|_| {
            Err(Unsettled::NotCovered(
                "oracle-independent panicked on these inputs".into(),
            ))
        });
        (r, i)
    })
}

/// 2⁵³: every integer up to it is exact in f64, and no further.
const EXACT_IN_F64: f64 = 9_007_199_254_740_992.0;

/// Why a 64-bit integer output cannot be judged exactly, if it cannot: the oracles carry integers as
/// f64, so where the device's or the oracles' value reaches 2⁵³ two integers one apart may compare
/// equal (an off-by-one above 2⁵³ would pass). Such an output of a movement op is judged exactly by
/// identity (`exact`); of any other op it is unsettled, never passed.
fn beyond_exact_integers(t: &Tensor, oracle: &oracle::Output) -> Option<String> {
    if !matches!(t.dtype(), DType::I64 | DType::U64) {
        return None;
    }
    let device_far = match t {
        Tensor::I64(a) => a.iter().any(|&v| v.unsigned_abs() >= 1 << 53),
        Tensor::U64(a) => a.iter().any(|&v| v >= 1 << 53),
        _ => false,
    };
    let oracle_far = oracle.value.data.iter().any(|v| v.abs() >= EXACT_IN_F64);
    (device_far || oracle_far).then(|| {
        format!(
            "{} values of 2^53 or more: the oracles hold integers as f64, exact only below 2^53, \
             so this output cannot be judged exactly",
            t.dtype()
        )
    })
}

/// Why an integer or bool output computed from 64-bit integer inputs of 2⁵³ or more cannot be judged
/// through f64, if it cannot: the oracles would see 2⁶⁰ and 2⁶⁰ + 1 as one value, so an Equal of the
/// two, or their difference, comes out wrong in f64 even when every output is small. (A float output
/// is judged under its class bound, which covers the rounding of such an input.) BitShift's amount
/// is the exception: any amount of 2⁵³ or more shifts every bit out, as its f64 does.
fn far_inputs(op: &str, t: &Tensor, inputs: &[Option<&Value>]) -> Option<String> {
    if t.dtype().is_float() {
        return None;
    }
    let values = match op {
        "BitShift" => &inputs[..inputs.len().min(1)],
        _ => inputs,
    };
    let far = values.iter().flatten().any(|v| match v {
        Value::Tensor(Tensor::I64(a)) => a.iter().any(|&v| v.unsigned_abs() >= 1 << 53),
        Value::Tensor(Tensor::U64(a)) => a.iter().any(|&v| v >= 1 << 53),
        _ => false,
    });
    far.then(|| {
        "inputs of 2^53 or more: the oracles hold integers as f64, exact only below 2^53, so this \
         output cannot be judged exactly"
            .to_string()
    })
}

/// `com.quorum` MatMulBias posed to the oracles as the standard op it equals: `Gemm(A', B, bias)`
/// with A' = A's rows (`[∏ leading dims, K]`), its result compared with the device's output taken
/// as `[rows, N]` (the same elements in the same order). The Gemm's bound is the MatMul's plus the
/// bias's magnitude, which is what adding the bias in the GEMM's epilogue can cost.
fn check_matmul_bias(
    node: &Node,
    inputs: &[Option<&Value>],
    outputs: &[Value],
    operands: Arithmetic,
) -> Check {
    let tensor = |i: usize| match inputs.get(i).copied().flatten() {
        Some(Value::Tensor(t)) => Some(t),
        _ => None,
    };
    let (Some(a), Some(b), Some(bias)) = (tensor(0), tensor(1), tensor(2)) else {
        return Check::Unsettled(Unsettled::InputsRejected(
            "MatMulBias takes three tensors".into(),
        ));
    };
    if let Some(e) = crate::ops::matmul_bias::shape_error(a.shape(), b.shape(), bias.shape()) {
        return Check::Unsettled(Unsettled::InputsRejected(e));
    }
    let (k, n) = (b.shape()[0], b.shape()[1]);
    let mut want = a.shape()[..a.shape().len() - 1].to_vec();
    want.push(n);
    let rows: usize = want[..want.len() - 1].iter().product();
    let Ok(a2) = a.reshape(&[rows, k]) else {
        return Check::Unsettled(Unsettled::InputsRejected(format!(
            "MatMulBias: A {:?} is not rows of {k}",
            a.shape()
        )));
    };
    let [Value::Tensor(y)] = outputs else {
        return Check::Mismatch {
            output: 0,
            wrong: Wrong::Form(format!("{} outputs, the oracles 1 tensor", outputs.len())),
        };
    };
    if y.shape() != want.as_slice() {
        return Check::Mismatch {
            output: 0,
            wrong: Wrong::Form(format!("shape {:?}, the oracles {want:?}", y.shape())),
        };
    }
    let Ok(y2) = y.reshape(&[rows, n]) else {
        return Check::Mismatch {
            output: 0,
            wrong: Wrong::Form(format!("shape {:?}, the oracles {want:?}", y.shape())),
        };
    };
    let gemm = Node {
        name: node.name.clone(),
        op_type: "Gemm".into(),
        domain: String::new(),
        opset: 13,
        inputs: node.inputs.clone(),
        outputs: node.outputs.clone(),
        attrs: Default::default(),
    };
    let a2 = Value::Tensor(a2);
    let posed = [Some(&a2), inputs[1], inputs[2]];
    check_declared(&gemm, &posed, &[Value::Tensor(y2)], operands)
}

/// Which result a run goes on with after a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// The accelerator's outputs.
    Device,
    /// The CPU kernel's outputs (the device's were wrong, `Shadow`).
    Cpu,
}

/// What a session does with a check's outcome.
#[derive(Debug, Clone, Copy)]
pub struct Policy<'a> {
    pub mode: VerifyMode,
    /// Op types (`Op` or `domain::Op`) allowed unchecked under `Strict`.
    pub allow_unchecked: &'a [String],
}

impl Policy<'_> {
    /// Counts `check` for `node`'s op in `counters` and decides: a mismatch ends a `Strict` run
    /// ([`Error::VerifyMismatch`]) and makes `Shadow` use the CPU's result; an unsettled check ends a
    /// `Strict` run ([`Error::VerifyUnsettled`]) unless the op is allowed unchecked, and is counted and
    /// reported (per op, with its reason) otherwise.
    pub fn apply(&self, node: &Node, check: &Check, counters: &Counters) -> Result<Use> {
        let op = node.qualified_op();
        match check {
            Check::Agree => {
                counters.verified(&op, None, None);
                Ok(Use::Device)
            }
            Check::Unsettled(why) => {
                let why = why.to_string();
                counters.verified(&op, None, Some(&why));
                let allowed = self
                    .allow_unchecked
                    .iter()
                    .any(|a| *a == node.op_type || *a == op);
                if self.mode == VerifyMode::Strict && !allowed {
                    return Err(Error::VerifyUnsettled {
                        node: node.name.clone(),
                        op,
                        reason: why,
                    });
                }
                if std::env::var_os("QUORUM_VERIFY_LOG").is_some() {
                    eprintln!(
                        "quorum: verify: node '{}' ({op}) unsettled: {why}",
                        node.name
                    );
                }
                Ok(Use::Device)
            }
            Check::Mismatch { output, wrong } => {
                let detail = describe(wrong);
                counters.verified(&op, Some(&detail), None);
                if self.mode == VerifyMode::Strict {
                    return Err(Error::VerifyMismatch {
                        node: node.name.clone(),
                        op,
                        output: *output,
                        detail,
                    });
                }
                eprintln!(
                    "quorum: verify: node '{}' ({op}) output {output}: {detail}; using the CPU result",
                    node.name
                );
                Ok(Use::Cpu)
            }
        }
    }
}

mod attention;
mod exact;
#[cfg(test)]
mod tests;
