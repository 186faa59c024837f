//! The independent oracle: the same functions as the reference, computed another way.
//!
//! Written from the ONNX specification. Broadcasting goes through precomputed per-operand index maps,
//! sums are pairwise or Neumaier-compensated, softmax goes through log-sum-exp, matrix products are
//! blocked with compensated accumulation.
#![allow(
    clippy::needless_range_loop,
    clippy::collapsible_if,
    clippy::type_complexity,
    clippy::identity_op
)]
use crate::{DType, NodeSpec, Oracle, OracleError, Output, Value};

mod arith;
mod conv;
mod convt;
mod einsum;
mod elementwise;
mod fill;
mod integer;
mod matmul;
mod movement;
mod norm;
mod parallel;
mod pool;
mod quantize;
mod reduce;
mod resize;
mod rnn;
mod softmax;

pub struct Independent;

/// Which family handles an op of the default domain.
#[derive(Clone, Copy)]
enum Family {
    Elementwise,
    MatMul,
    Softmax,
    Reduce,
    Conv,
    Pool,
    Norm,
    Movement,
    ConvTranspose,
    Resize,
    Rnn,
    Fill,
    Quantize,
    Integer,
}

fn family(op: &str) -> Option<Family> {
    if elementwise::OPS.contains(&op) {
        Some(Family::Elementwise)
    } else if matmul::OPS.contains(&op) {
        Some(Family::MatMul)
    } else if softmax::OPS.contains(&op) {
        Some(Family::Softmax)
    } else if reduce::OPS.contains(&op) {
        Some(Family::Reduce)
    } else if conv::OPS.contains(&op) {
        Some(Family::Conv)
    } else if pool::OPS.contains(&op) {
        Some(Family::Pool)
    } else if norm::OPS.contains(&op) {
        Some(Family::Norm)
    } else if movement::OPS.contains(&op) {
        Some(Family::Movement)
    } else if convt::OPS.contains(&op) {
        Some(Family::ConvTranspose)
    } else if resize::OPS.contains(&op) {
        Some(Family::Resize)
    } else if rnn::OPS.contains(&op) {
        Some(Family::Rnn)
    } else if fill::OPS.contains(&op) {
        Some(Family::Fill)
    } else if quantize::OPS.contains(&op) {
        Some(Family::Quantize)
    } else if integer::OPS.contains(&op) {
        Some(Family::Integer)
    } else {
        None
    }
}

impl Oracle for Independent {
    fn name(&self) -> &'static str {
        "oracle-independent"
    }

    fn supports(&self, node: &NodeSpec) -> Result<(), String> {
        if !(node.domain.is_empty() || node.domain == "ai.onnx") {
            return Err(format!("domain '{}' is not covered", node.domain));
        }
        match family(&node.op_type) {
            None => Err(format!("{} is not covered", node.op_type)),
            Some(Family::Elementwise) => elementwise::check(node),
            Some(Family::MatMul) => matmul::check(node),
            Some(Family::Softmax) => softmax::check(node),
            Some(Family::Reduce) => reduce::check(node),
            Some(Family::Conv) => conv::check(node),
            Some(Family::Pool) => pool::check(node),
            Some(Family::Norm) => norm::check(node),
            Some(Family::Movement) => movement::check(node),
            Some(Family::ConvTranspose) => convt::check(node),
            Some(Family::Resize) => resize::check(node),
            Some(Family::Rnn) => rnn::check(node),
            Some(Family::Fill) => fill::check(node),
            Some(Family::Quantize) => quantize::check(node),
            Some(Family::Integer) => integer::check(node),
        }
    }

    fn evaluate(
        &self,
        node: &NodeSpec,
        inputs: &[Option<Value>],
    ) -> Result<Vec<Output>, OracleError> {
        self.supports(node).map_err(OracleError::Unsupported)?;
        match family(&node.op_type) {
            None => Err(OracleError::Unsupported(format!(
                "{} is not covered",
                node.op_type
            ))),
            Some(Family::Elementwise) => elementwise::eval(node, inputs),
            Some(Family::MatMul) => matmul::eval(node, inputs),
            Some(Family::Softmax) => softmax::eval(node, inputs),
            Some(Family::Reduce) => reduce::eval(node, inputs),
            Some(Family::Conv) => conv::eval(node, inputs),
            Some(Family::Pool) => pool::eval(node, inputs),
            Some(Family::Norm) => norm::eval(node, inputs),
            Some(Family::Movement) => movement::eval(node, inputs),
            Some(Family::ConvTranspose) => convt::eval(node, inputs),
            Some(Family::Resize) => resize::eval(node, inputs),
            Some(Family::Rnn) => rnn::eval(node, inputs),
            Some(Family::Fill) => fill::eval(node, inputs),
            Some(Family::Quantize) => quantize::eval(node, inputs),
            Some(Family::Integer) => integer::eval(node, inputs),
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// Shared helpers of this oracle.

pub(crate) fn invalid<T>(msg: impl Into<String>) -> Result<T, OracleError> {
    Err(OracleError::Invalid(msg.into()))
}

pub(crate) fn unsupported<T>(msg: impl Into<String>) -> Result<T, OracleError> {
    Err(OracleError::Unsupported(msg.into()))
}

/// The `i`-th input, which must be present.
pub(crate) fn input<'a>(
    node: &NodeSpec,
    inputs: &'a [Option<Value>],
    i: usize,
) -> Result<&'a Value, OracleError> {
    match inputs.get(i) {
        Some(Some(v)) => Ok(v),
        _ => invalid(format!("{} needs input {i}", node.op_type)),
    }
}

/// The `i`-th input if given.
pub(crate) fn opt_input(inputs: &[Option<Value>], i: usize) -> Option<&Value> {
    inputs.get(i).and_then(|v| v.as_ref())
}

/// Builds an output; integer and bool outputs carry magnitude 0.
pub(crate) fn make_output(
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
        return invalid("internal: magnitude length differs from data length");
    }
    Ok(Output {
        value: Value::new(dtype, shape, data)?,
        magnitude,
    })
}

/// Numpy-style multidirectional broadcast of several shapes.
pub(crate) fn broadcast_shape(shapes: &[&[usize]]) -> Result<Vec<usize>, OracleError> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1usize; rank];
    for s in shapes {
        let lead = rank - s.len();
        for (j, &d) in s.iter().enumerate() {
            let o = &mut out[lead + j];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return invalid(format!("shapes {shapes:?} do not broadcast"));
            }
        }
    }
    // A zero-sized dim beats 1.
    for s in shapes {
        let lead = rank - s.len();
        for (j, &d) in s.iter().enumerate() {
            if d == 0 {
                out[lead + j] = 0;
            }
        }
    }
    Ok(out)
}

/// Row-major strides of a shape.
pub(crate) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut st = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        st[i] = st[i + 1] * shape[i + 1];
    }
    st
}

/// For every flat index of `out_shape`, the flat index of the operand of shape `in_shape` (right-aligned,
/// broadcast dims stride 0). Built dimension by dimension: map' = [m * 1 + k * stride for m, k].
pub(crate) fn index_map(in_shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
    let lead = out_shape.len() - in_shape.len();
    let in_st = strides(in_shape);
    let mut map = vec![0usize];
    for (d, &n) in out_shape.iter().enumerate() {
        let step = if d < lead || in_shape[d - lead] == 1 {
            0
        } else {
            in_st[d - lead]
        };
        let mut next = Vec::with_capacity(map.len() * n);
        for &m in &map {
            for k in 0..n {
                next.push(m + k * step);
            }
        }
        map = next;
    }
    map
}

/// Offsets, in an array of shape `shape`, of every coordinate combination over `axes` (others fixed at 0),
/// in row-major order of those axes.
pub(crate) fn axis_offsets(shape: &[usize], axes: &[usize]) -> Vec<usize> {
    let st = strides(shape);
    let mut offs = vec![0usize];
    for &a in axes {
        let mut next = Vec::with_capacity(offs.len() * shape[a]);
        for &o in &offs {
            for k in 0..shape[a] {
                next.push(o + k * st[a]);
            }
        }
        offs = next;
    }
    offs
}

/// Pairwise (cascade) summation.
pub(crate) fn pairwise_sum(xs: &[f64]) -> f64 {
    if xs.len() <= 8 {
        let mut s = 0.0;
        for &x in xs {
            s += x;
        }
        s
    } else {
        let h = xs.len() / 2;
        pairwise_sum(&xs[..h]) + pairwise_sum(&xs[h..])
    }
}

/// Neumaier-compensated accumulator.
#[derive(Clone, Copy, Default)]
pub(crate) struct Neumaier {
    sum: f64,
    comp: f64,
}

impl Neumaier {
    pub(crate) fn add(&mut self, x: f64) {
        let t = self.sum + x;
        if self.sum.abs() >= x.abs() {
            self.comp += (self.sum - t) + x;
        } else {
            self.comp += (x - t) + self.sum;
        }
        self.sum = t;
    }

    pub(crate) fn value(&self) -> f64 {
        if self.sum.is_finite() {
            self.sum + self.comp
        } else {
            self.sum
        }
    }
}

/// Normalizes a possibly negative axis against `rank`.
pub(crate) fn norm_axis(axis: i64, rank: usize) -> Result<usize, OracleError> {
    let r = rank as i64;
    if axis < -r || axis >= r.max(1) {
        return invalid(format!("axis {axis} out of range for rank {rank}"));
    }
    Ok(if axis < 0 {
        (axis + r) as usize
    } else {
        axis as usize
    })
}

/// ONNX TensorProto element type number to [`DType`].
pub(crate) fn dtype_from_onnx(t: i64) -> Option<DType> {
    Some(match t {
        1 => DType::F32,
        2 => DType::U8,
        3 => DType::I8,
        4 => DType::U16,
        5 => DType::I16,
        6 => DType::I32,
        7 => DType::I64,
        9 => DType::Bool,
        10 => DType::F16,
        11 => DType::F64,
        12 => DType::U32,
        13 => DType::U64,
        16 => DType::BF16,
        _ => return None,
    })
}

/// Bit width and signedness of an integer dtype.
pub(crate) fn int_bits(dtype: DType) -> Option<(u32, bool)> {
    Some(match dtype {
        DType::I8 => (8, true),
        DType::I16 => (16, true),
        DType::I32 => (32, true),
        DType::I64 => (64, true),
        DType::U8 => (8, false),
        DType::U16 => (16, false),
        DType::U32 => (32, false),
        DType::U64 => (64, false),
        _ => return None,
    })
}

/// Wraps an integral value into the two's-complement range of an integer dtype (identity otherwise).
pub(crate) fn wrap_int(dtype: DType, v: f64) -> f64 {
    match int_bits(dtype) {
        Some((bits, signed)) if bits < 64 && v.is_finite() => {
            let m = 1i128 << bits;
            let mut r = (v as i128).rem_euclid(m);
            if signed && r >= m / 2 {
                r -= m;
            }
            r as f64
        }
        _ => v,
    }
}

#[cfg(test)]
pub(crate) mod testkit {
    use crate::{Attr, DType, NodeSpec, Value};
    use std::collections::BTreeMap;

    /// SplitMix64 pseudo-random numbers for tests.
    pub struct SplitMix64(pub u64);

    impl SplitMix64 {
        pub fn next_u64(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        /// Uniform in [-1, 1), never exactly zero.
        pub fn unit(&mut self) -> f64 {
            let u = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            let v = 2.0 * u - 1.0;
            if v == 0.0 { 0.5 } else { v }
        }

        pub fn values(&mut self, n: usize) -> Vec<f64> {
            (0..n).map(|_| self.unit()).collect()
        }
    }

    pub fn node(op: &str, opset: i64, attrs: Vec<(&str, Attr)>) -> NodeSpec {
        let attrs: BTreeMap<String, Attr> =
            attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        NodeSpec {
            domain: String::new(),
            op_type: op.to_string(),
            opset,
            attrs,
            num_outputs: 1,
        }
    }

    pub fn f32v(shape: &[usize], data: Vec<f64>) -> Option<Value> {
        Some(Value::new(DType::F32, shape.to_vec(), data).unwrap())
    }

    pub fn typed(dtype: DType, shape: &[usize], data: Vec<f64>) -> Option<Value> {
        Some(Value::new(dtype, shape.to_vec(), data).unwrap())
    }

    pub fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(x, y)| (x - y).abs() <= tol * (1.0 + y.abs()) || (x.is_nan() && y.is_nan()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_map_broadcasts() {
        assert_eq!(index_map(&[3], &[2, 3]), vec![0, 1, 2, 0, 1, 2]);
        assert_eq!(index_map(&[2, 1], &[2, 3]), vec![0, 0, 0, 1, 1, 1]);
        assert_eq!(
            broadcast_shape(&[&[2, 1, 4], &[3, 1]]).unwrap(),
            vec![2, 3, 4]
        );
        assert!(broadcast_shape(&[&[2], &[3]]).is_err());
    }

    #[test]
    fn supports_agrees_with_evaluate() {
        use super::testkit::node;
        use crate::Attr;
        // Every row of the op table: tests/op_table.rs.
        assert!(
            Independent
                .supports(&node("Cast", 13, vec![("to", Attr::Int(1))]))
                .is_ok()
        );
        assert!(
            Independent
                .supports(&node(
                    "BitShift",
                    11,
                    vec![("direction", Attr::String("RIGHT".into()))]
                ))
                .is_ok()
        );
        let nope = node("GatherND", 12, vec![]);
        assert!(Independent.supports(&nope).is_err());
        assert!(matches!(
            Independent.evaluate(&nope, &[]),
            Err(OracleError::Unsupported(_))
        ));
        let r9 = node("Resize", 9, vec![]);
        assert!(Independent.supports(&r9).is_err());
        assert!(matches!(
            Independent.evaluate(&r9, &[]),
            Err(OracleError::Unsupported(_))
        ));
    }

    #[test]
    fn sums_and_wrap() {
        let xs: Vec<f64> = (1..=100).map(|i| i as f64).collect();
        assert_eq!(pairwise_sum(&xs), 5050.0);
        let mut n = Neumaier::default();
        for x in [1e16, 1.0, -1e16] {
            n.add(x);
        }
        assert_eq!(n.value(), 1.0);
        assert_eq!(wrap_int(DType::I8, 130.0), -126.0);
        assert_eq!(wrap_int(DType::U8, -1.0), 255.0);
        assert_eq!(
            axis_offsets(&[2, 3, 4], &[0, 2]),
            vec![0, 1, 2, 3, 12, 13, 14, 15]
        );
    }
}
