//! Verification of accelerated results against the two CPU oracles (`quorum-oracle`).
//!
//! `VerifyMode::Off` trusts the accelerator; `Shadow` also runs each accelerated node's inputs through
//! both oracles, logs and counts a mismatch and continues with the CPU kernel's result; `Strict` ends
//! the run with [`Error::VerifyMismatch`](crate::Error::VerifyMismatch). The verdict is the one
//! arbitration function of `quorum_oracle::arbitrate`: both oracles agree and the device differs →
//! the device is wrong; the oracles disagree → unsettled, counted and logged, never passed as a check.
use std::collections::BTreeMap;

use quorum_oracle as oracle;
use quorum_oracle::Oracle;
use quorum_oracle::arbitrate::{Verdict, arbitrate, eps};

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
    /// Output `output`, element `index`: the device gave `device`, both oracles `oracle`.
    Mismatch {
        output: usize,
        index: usize,
        device: f64,
        oracle: f64,
        allowed: f64,
    },
    /// The oracles could not judge: they disagree, or they do not cover this node or dtype.
    Unsettled(String),
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

/// Judges `outputs` (what the accelerator produced for `node` on `inputs`) against both oracles.
pub fn check(node: &Node, inputs: &[Option<&Value>], outputs: &[Value]) -> Check {
    let spec = match node_spec(node) {
        Ok(s) => s,
        Err(e) => return Check::Unsettled(e),
    };
    let mut args = Vec::with_capacity(inputs.len());
    for v in inputs {
        match v {
            None => args.push(None),
            Some(Value::Tensor(t)) => match to_oracle(t) {
                Some(o) => args.push(Some(o)),
                None => {
                    return Check::Unsettled(format!("the oracles take no {} values", t.dtype()));
                }
            },
            Some(_) => return Check::Unsettled("the oracles take tensors only".into()),
        }
    }
    let reference = oracle::reference::Reference;
    let independent = oracle::independent::Independent;
    for o in [&reference as &dyn Oracle, &independent] {
        if let Err(e) = o.supports(&spec) {
            return Check::Unsettled(format!("not covered by an oracle: {e}"));
        }
    }
    let r = match reference.evaluate(&spec, &args) {
        Ok(r) => r,
        Err(e) => return Check::Unsettled(format!("reference oracle: {e}")),
    };
    let i = match independent.evaluate(&spec, &args) {
        Ok(i) => i,
        Err(e) => return Check::Unsettled(format!("independent oracle: {e}")),
    };
    for (k, out) in outputs.iter().enumerate() {
        let (Some(ro), Some(io)) = (r.get(k), i.get(k)) else {
            continue;
        };
        let Value::Tensor(t) = out else {
            return Check::Unsettled("a non-tensor output".into());
        };
        if t.shape() != ro.value.shape.as_slice() {
            return Check::Mismatch {
                output: k,
                index: 0,
                device: f64::NAN,
                oracle: f64::NAN,
                allowed: 0.0,
            };
        }
        let Ok(data) = t.to_f64_vec() else {
            return Check::Unsettled(format!("output of type {}", t.dtype()));
        };
        match arbitrate(&data, eps(t.dtype().name()), ro, io) {
            Verdict::Agree => {}
            Verdict::EngineWrong {
                index,
                engine,
                oracle,
                allowed,
            } => {
                return Check::Mismatch {
                    output: k,
                    index,
                    device: engine,
                    oracle,
                    allowed,
                };
            }
            Verdict::OraclesDisagree {
                index,
                reference,
                independent,
            } => {
                return Check::Unsettled(format!(
                    "the oracles disagree at output {k} element {index}: reference {reference}, independent {independent}"
                ));
            }
        }
    }
    Check::Agree
}
