//! The reference oracle: ONNX operator definitions transcribed as directly as possible.
//!
//! Scalar loops, f64 accumulation, the specification's own index formulas. One file per op family.
use crate::{DType, NodeSpec, Oracle, OracleError, Output, Value};

mod conv;
mod data;
mod data2;
mod einsum;
mod elementwise;
mod fill;
mod integer;
mod matmul;
mod norm;
mod parallel;
mod pool;
mod quantize;
mod reduce;
mod resize;
mod rnn;
mod scalar_ops;
mod softmax;
mod special;

#[cfg(test)]
mod testutil;

pub struct Reference;

/// Which family handles an op, or why it is refused.
fn family(node: &NodeSpec) -> Result<Family, String> {
    if !node.domain.is_empty() && node.domain != "ai.onnx" {
        return Err(format!("domain '{}' is not covered", node.domain));
    }
    let op = node.op_type.as_str();
    if elementwise::covers(op) {
        return Ok(Family::Elementwise);
    }
    if matches!(op, "MatMul" | "Gemm" | "Einsum") {
        return Ok(Family::MatMul);
    }
    if matches!(op, "Softmax" | "LogSoftmax" | "Hardmax") {
        return Ok(Family::Softmax);
    }
    if matches!(
        op,
        "BatchNormalization"
            | "InstanceNormalization"
            | "LayerNormalization"
            | "GroupNormalization"
            | "LRN"
    ) {
        return Ok(Family::Norm);
    }
    if matches!(
        op,
        "MaxPool" | "AveragePool" | "LpPool" | "GlobalAveragePool" | "GlobalMaxPool"
    ) {
        return Ok(Family::Pool);
    }
    if data::covers(op) {
        return Ok(Family::Data);
    }
    if data2::covers(op) {
        return Ok(Family::Data2);
    }
    if fill::covers(op) {
        return Ok(Family::Fill);
    }
    if op == "Resize" {
        return Ok(Family::Resize);
    }
    if op == "Conv" || op == "ConvTranspose" {
        return Ok(Family::Conv);
    }
    if reduce::covers(op) {
        return Ok(Family::Reduce);
    }
    if rnn::covers(op) {
        return Ok(Family::Rnn);
    }
    if quantize::covers(op) {
        return Ok(Family::Quantize);
    }
    if integer::covers(op) {
        return Ok(Family::Integer);
    }
    Err(format!("{op} is not covered by the reference oracle"))
}

enum Family {
    Elementwise,
    MatMul,
    Softmax,
    Reduce,
    Conv,
    Norm,
    Pool,
    Data,
    Data2,
    Fill,
    Resize,
    Rnn,
    Quantize,
    Integer,
}

impl Oracle for Reference {
    fn name(&self) -> &'static str {
        "oracle-reference"
    }

    fn supports(&self, node: &NodeSpec) -> Result<(), String> {
        match family(node)? {
            Family::Elementwise => elementwise::supports(node),
            Family::MatMul => matmul::supports(node),
            Family::Softmax => softmax::supports(node),
            Family::Reduce => reduce::supports(node),
            Family::Conv => conv::supports(node),
            Family::Norm => norm::supports(node),
            Family::Pool => pool::supports(node),
            Family::Data => data::supports(node),
            Family::Data2 => data2::supports(node),
            Family::Fill => fill::supports(node),
            Family::Resize => resize::supports(node),
            Family::Rnn => rnn::supports(node),
            Family::Quantize => quantize::supports(node),
            Family::Integer => integer::supports(node),
        }
    }

    fn evaluate(
        &self,
        node: &NodeSpec,
        inputs: &[Option<Value>],
    ) -> Result<Vec<Output>, OracleError> {
        let fam = family(node).map_err(OracleError::Unsupported)?;
        let supported = match fam {
            Family::Elementwise => elementwise::supports(node),
            Family::MatMul => matmul::supports(node),
            Family::Softmax => softmax::supports(node),
            Family::Reduce => reduce::supports(node),
            Family::Conv => conv::supports(node),
            Family::Norm => norm::supports(node),
            Family::Pool => pool::supports(node),
            Family::Data => data::supports(node),
            Family::Data2 => data2::supports(node),
            Family::Fill => fill::supports(node),
            Family::Resize => resize::supports(node),
            Family::Rnn => rnn::supports(node),
            Family::Quantize => quantize::supports(node),
            Family::Integer => integer::supports(node),
        };
        supported.map_err(OracleError::Unsupported)?;
        match fam {
            Family::Elementwise => elementwise::evaluate(node, inputs),
            Family::MatMul => matmul::evaluate(node, inputs),
            Family::Softmax => softmax::evaluate(node, inputs),
            Family::Reduce => reduce::evaluate(node, inputs),
            Family::Conv if node.op_type == "ConvTranspose" => {
                conv::evaluate_transpose(node, inputs)
            }
            Family::Conv => conv::evaluate(node, inputs),
            Family::Norm => norm::evaluate(node, inputs),
            Family::Pool => pool::evaluate(node, inputs),
            Family::Data => data::evaluate(node, inputs),
            Family::Data2 => data2::evaluate(node, inputs),
            Family::Fill => fill::evaluate(node, inputs),
            Family::Resize => resize::evaluate(node, inputs),
            Family::Rnn => rnn::evaluate(node, inputs),
            Family::Quantize => quantize::evaluate(node, inputs),
            Family::Integer => integer::evaluate(node, inputs),
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// Shared helpers (reference-local).

/// The required input `i`.
pub(crate) fn input<'a>(
    node: &NodeSpec,
    inputs: &'a [Option<Value>],
    i: usize,
) -> Result<&'a Value, OracleError> {
    match inputs.get(i) {
        Some(Some(v)) => Ok(v),
        _ => Err(OracleError::Invalid(format!(
            "{}: required input {i} is missing",
            node.op_type
        ))),
    }
}

/// The optional input `i` (absent or omitted gives `None`).
pub(crate) fn opt_input(inputs: &[Option<Value>], i: usize) -> Option<&Value> {
    inputs.get(i).and_then(|v| v.as_ref())
}

/// Row-major strides of a shape.
pub(crate) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// The multi-index of flat position `flat` in `shape`.
pub(crate) fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0usize; shape.len()];
    for d in (0..shape.len()).rev() {
        if shape[d] > 0 {
            idx[d] = flat % shape[d];
            flat /= shape[d];
        }
    }
    idx
}

/// Numpy multidirectional broadcasting of several shapes.
pub(crate) fn broadcast_shapes(shapes: &[&[usize]]) -> Result<Vec<usize>, OracleError> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1usize; rank];
    for s in shapes {
        let off = rank - s.len();
        for (i, &d) in s.iter().enumerate() {
            let o = &mut out[off + i];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return Err(OracleError::Invalid(format!(
                    "shapes {shapes:?} do not broadcast"
                )));
            }
        }
    }
    Ok(out)
}

/// The flat position in a tensor of shape `in_shape` that broadcasts onto output index `out_idx`
/// (right-aligned; a dimension of 1 is read at 0).
pub(crate) fn broadcast_index(out_idx: &[usize], in_shape: &[usize]) -> usize {
    let off = out_idx.len() - in_shape.len();
    let mut flat = 0usize;
    for (d, &n) in in_shape.iter().enumerate() {
        let i = if n == 1 { 0 } else { out_idx[off + d] };
        flat = flat * n + i;
    }
    flat
}

/// Normalises a possibly negative axis against `rank`.
pub(crate) fn norm_axis(axis: i64, rank: usize, op: &str) -> Result<usize, OracleError> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r.max(1) {
        return Err(OracleError::Invalid(format!(
            "{op}: axis {axis} out of range for rank {rank}"
        )));
    }
    Ok(a as usize)
}

/// Wraps an integer result into the range of an integer dtype (two's complement), as a fixed-width
/// machine would; floats and bools are returned unchanged.
pub(crate) fn wrap_int(v: f64, dt: DType) -> f64 {
    let bits = match dt {
        DType::I8 | DType::U8 => 8,
        DType::I16 | DType::U16 => 16,
        DType::I32 | DType::U32 => 32,
        DType::I64 | DType::U64 => 64,
        _ => return v,
    };
    if !v.is_finite() {
        return v;
    }
    let i = v as i128;
    let m = 1i128 << bits;
    let mut r = i.rem_euclid(m);
    let signed = matches!(dt, DType::I8 | DType::I16 | DType::I32 | DType::I64);
    if signed && r >= m / 2 {
        r -= m;
    }
    r as f64
}

/// Builds an output, checking the element count, with magnitude zero for non-float dtypes.
pub(crate) fn output(
    dtype: DType,
    shape: Vec<usize>,
    data: Vec<f64>,
    magnitude: Vec<f64>,
) -> Result<Output, OracleError> {
    let magnitude = if dtype.is_float() {
        magnitude
    } else {
        vec![0.0; data.len()]
    };
    if magnitude.len() != data.len() {
        return Err(OracleError::Invalid(
            "internal: magnitude length mismatch".into(),
        ));
    }
    Ok(Output {
        value: Value::new(dtype, shape, data)?,
        magnitude,
    })
}

#[cfg(test)]
mod tests {
    use super::Reference;
    use super::testutil::node;
    use crate::{Attr, Oracle, OracleError};

    #[test]
    fn supports_agrees_with_evaluate_on_refusals() {
        for op in ["RNN", "NonMaxSuppression", "Upsample"] {
            let n = node(op, 13, &[]);
            assert!(Reference.supports(&n).is_err(), "{op}");
            assert!(
                matches!(
                    Reference.evaluate(&n, &[]),
                    Err(OracleError::Unsupported(_))
                ),
                "{op}"
            );
        }
        let n = node("Resize", 13, &[("mode", Attr::String("area".into()))]);
        assert!(Reference.supports(&n).is_err());
        assert!(matches!(
            Reference.evaluate(&n, &[]),
            Err(OracleError::Unsupported(_))
        ));
        let mut n = node("Add", 13, &[]);
        n.domain = "com.microsoft".into();
        assert!(Reference.supports(&n).is_err());
    }
}
