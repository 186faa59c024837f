//! The runtime's error type: every failure names what a person needs to act on (file, node, op, shapes).
use std::path::PathBuf;

/// Errors from loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("malformed model: {0}")]
    Decode(String),
    #[error("invalid model: {0}")]
    InvalidModel(String),
    #[error("unsupported: node '{node}' ({domain}{op}, opset {opset}): {reason}")]
    Unsupported {
        node: String,
        op: String,
        domain: String,
        opset: i64,
        reason: String,
    },
    /// The model imports a version of an ONNX domain newer than Quorum implements.
    #[error(
        "unsupported: the model imports {domain} opset {declared}; Quorum implements {domain} up to opset {latest}. Export the model at opset {latest} or lower, or set QUORUM_ALLOW_NEWER_OPSETS=1 to run its nodes as opset {latest}"
    )]
    UnsupportedOpset {
        domain: String,
        declared: i64,
        latest: i64,
    },
    #[error("node '{node}' ({op}) with inputs {shapes}: {msg}")]
    Node {
        node: String,
        op: String,
        shapes: String,
        msg: String,
    },
    #[error("input '{name}': {msg}")]
    Input { name: String, msg: String },
    /// A provider listed in the session options cannot be used, or an option is invalid.
    #[error("{0}")]
    Provider(String),
    /// The device failed (a driver call, a JIT error, out of device memory).
    #[error("device error: {0}")]
    Device(String),
    /// Strict verification: an accelerated result differs from what both oracles computed (a value
    /// outside the op's error bound, or the wrong dtype, shape or number of outputs).
    #[error("verification failed: node '{node}' ({op}) output {output}: {detail}")]
    VerifyMismatch {
        node: String,
        op: String,
        output: usize,
        detail: String,
    },
    /// Strict verification: the oracles could not judge an accelerated node (they disagree, reject the
    /// inputs, or do not cover the op) and the op is not allowed unchecked.
    #[error(
        "verification could not settle node '{node}' ({op}): {reason} (allow the op unchecked by name, e.g. --allow-unchecked {op})"
    )]
    VerifyUnsettled {
        node: String,
        op: String,
        reason: String,
    },
    #[error("tensor of {bytes} bytes exceeds the limit of {limit} bytes ({what})")]
    TooLarge {
        what: String,
        bytes: u128,
        limit: u128,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a kernel reports; the executor adds the node name, op and input shapes.
#[derive(Debug, Clone, PartialEq)]
pub enum OpError {
    /// The inputs or attributes break the operator's contract.
    Invalid(String),
    /// A valid form of the operator that this kernel does not implement.
    Unsupported(String),
}

impl std::fmt::Display for OpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpError::Invalid(m) => write!(f, "{m}"),
            OpError::Unsupported(m) => write!(f, "unsupported: {m}"),
        }
    }
}

impl From<ndarray::ShapeError> for OpError {
    fn from(e: ndarray::ShapeError) -> Self {
        OpError::Invalid(format!("shape error: {e}"))
    }
}

pub type OpResult<T> = std::result::Result<T, OpError>;

/// `bail!("...")` inside a kernel: an [`OpError::Invalid`] with a formatted message.
#[macro_export]
macro_rules! bail {
    ($($t:tt)*) => { return Err($crate::error::OpError::Invalid(format!($($t)*))) };
}

/// `unsupported!("...")` inside a kernel: an [`OpError::Unsupported`] with a formatted message.
#[macro_export]
macro_rules! unsupported {
    ($($t:tt)*) => { return Err($crate::error::OpError::Unsupported(format!($($t)*))) };
}
