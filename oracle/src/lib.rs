//! Quorum's oracles: two CPU implementations of the accelerated op set, written independently of each
//! other and of the runtime, computing in f64.
//!
//! - [`reference`]: the ONNX operator definitions transcribed as directly as possible (scalar loops, the
//!   specification's own index formulas).
//! - [`independent`]: the same functions computed another way (im2col for convolution, pairwise sums,
//!   log-sum-exp softmax, compensated dot products...), so that a shared misreading is unlikely.
//!
//! Neither calls the other; they share only the value type, attribute decoding and the thread-count
//! setting ([`threads`]) in this file, and the arbitration's `C_REDUCE`, the unit in which both
//! express Softmax's and LogSoftmax's magnitudes. Each splits its work over threads its own way; the value of
//! every output element is computed by one thread, in the same order whatever the thread count, so an
//! answer does not depend on how many threads computed it.
//! Beside each output value an oracle returns, per element, the magnitude of the terms it combined
//! (e.g. Σ|a·b| for a dot product), from which a tolerance can be derived as an error bound; for
//! Softmax and LogSoftmax, whose sum of positive terms does not fit that model, a magnitude derived
//! from the row's error analysis (`arbitrate`, "Softmax and LogSoftmax").
#![forbid(unsafe_code)]

pub mod arbitrate;
pub mod independent;
pub mod reference;

use std::collections::BTreeMap;

/// The environment variable that sets how many threads one oracle evaluation may use.
pub const THREADS_ENV: &str = "QUORUM_ORACLE_THREADS";

/// How many threads one oracle evaluation may use: [`THREADS_ENV`] when it holds a positive integer,
/// else the machine's available parallelism (1 where that is unknown). Read at each evaluation, so a
/// process can change it between calls; a value that is not a positive integer is ignored rather than
/// failing a verification over a setting.
pub fn threads() -> usize {
    std::env::var(THREADS_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Element types the oracles understand (ONNX numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F64,
    F16,
    BF16,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    Bool,
}

impl DType {
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }
}

/// A tensor as the oracles see it: every element held as f64 (integers and bools are exact in f64 up
/// to 2^53; beyond it the runtime's check traces a movement op's elements by identity and leaves
/// other integer results unjudged), row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Value {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

impl Value {
    pub fn new(dtype: DType, shape: Vec<usize>, data: Vec<f64>) -> Result<Value, OracleError> {
        let n: usize = shape.iter().product();
        if n != data.len() {
            return Err(OracleError::Invalid(format!(
                "shape {shape:?} needs {n} elements, got {}",
                data.len()
            )));
        }
        Ok(Value { dtype, shape, data })
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

/// An oracle's answer for one output: the value and, per element, the magnitude of what was combined to
/// make it (Σ|terms|; for elementwise ops simply |result| or the inputs' magnitude).
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    pub value: Value,
    pub magnitude: Vec<f64>,
}

/// An attribute value.
#[derive(Debug, Clone, PartialEq)]
pub enum Attr {
    Int(i64),
    Float(f64),
    Ints(Vec<i64>),
    Floats(Vec<f64>),
    String(String),
    Strings(Vec<String>),
    /// A tensor attribute (`ConstantOfShape`'s `value`, `Constant`'s `value`).
    Tensor(Value),
}

/// What an oracle needs to know about a node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSpec {
    /// `""` for the default ONNX domain.
    pub domain: String,
    pub op_type: String,
    pub opset: i64,
    pub attrs: BTreeMap<String, Attr>,
    /// How many outputs the node asks for.
    pub num_outputs: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub enum OracleError {
    /// The oracle does not cover this op or form (never a pass).
    Unsupported(String),
    /// The inputs or attributes break the operator's contract.
    Invalid(String),
}

impl std::fmt::Display for OracleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OracleError::Unsupported(m) => write!(f, "unsupported: {m}"),
            OracleError::Invalid(m) => write!(f, "invalid: {m}"),
        }
    }
}

impl std::error::Error for OracleError {}

/// Attribute decoding, shared by both oracles (the one thing they share besides [`Value`]).
impl NodeSpec {
    pub fn int(&self, name: &str, default: i64) -> Result<i64, OracleError> {
        match self.attrs.get(name) {
            None => Ok(default),
            Some(Attr::Int(v)) => Ok(*v),
            Some(a) => Err(OracleError::Invalid(format!(
                "attribute '{name}' must be an int, got {a:?}"
            ))),
        }
    }

    pub fn float(&self, name: &str, default: f64) -> Result<f64, OracleError> {
        match self.attrs.get(name) {
            None => Ok(default),
            Some(Attr::Float(v)) => Ok(*v),
            Some(Attr::Int(v)) => Ok(*v as f64),
            Some(a) => Err(OracleError::Invalid(format!(
                "attribute '{name}' must be a float, got {a:?}"
            ))),
        }
    }

    pub fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, OracleError> {
        match self.attrs.get(name) {
            None => Ok(None),
            Some(Attr::Ints(v)) => Ok(Some(v.clone())),
            Some(Attr::Int(v)) => Ok(Some(vec![*v])),
            Some(a) => Err(OracleError::Invalid(format!(
                "attribute '{name}' must be ints, got {a:?}"
            ))),
        }
    }

    pub fn floats(&self, name: &str) -> Result<Option<Vec<f64>>, OracleError> {
        match self.attrs.get(name) {
            None => Ok(None),
            Some(Attr::Floats(v)) => Ok(Some(v.clone())),
            Some(a) => Err(OracleError::Invalid(format!(
                "attribute '{name}' must be floats, got {a:?}"
            ))),
        }
    }

    pub fn tensor(&self, name: &str) -> Result<Option<&Value>, OracleError> {
        match self.attrs.get(name) {
            None => Ok(None),
            Some(Attr::Tensor(v)) => Ok(Some(v)),
            Some(a) => Err(OracleError::Invalid(format!(
                "attribute '{name}' must be a tensor, got {a:?}"
            ))),
        }
    }

    pub fn string(&self, name: &str, default: &str) -> Result<String, OracleError> {
        match self.attrs.get(name) {
            None => Ok(default.to_string()),
            Some(Attr::String(v)) => Ok(v.clone()),
            Some(a) => Err(OracleError::Invalid(format!(
                "attribute '{name}' must be a string, got {a:?}"
            ))),
        }
    }
}

/// The interface both oracles implement.
pub trait Oracle {
    fn name(&self) -> &'static str;
    /// `Ok(())` when the oracle covers this node (op, opset, attribute forms); `Err(reason)` otherwise.
    fn supports(&self, node: &NodeSpec) -> Result<(), String>;
    /// Computes the node's outputs. `inputs` in node order; `None` for an omitted optional input.
    fn evaluate(
        &self,
        node: &NodeSpec,
        inputs: &[Option<Value>],
    ) -> Result<Vec<Output>, OracleError>;
}
