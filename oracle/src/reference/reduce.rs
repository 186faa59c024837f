//! Reductions (Reduce*), ArgMax / ArgMin, and CumSum (a sum per output).
use super::{input, norm_axis, opt_input, output, strides, unravel};
use crate::{DType, NodeSpec, OracleError, Output, Value};

const REDUCE: &[&str] = &[
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceSumSquare",
    "ReduceLogSum",
    "ReduceLogSumExp",
];

pub(super) fn covers(op: &str) -> bool {
    REDUCE.contains(&op) || matches!(op, "ArgMax" | "ArgMin" | "CumSum")
}

pub(super) fn supports(node: &NodeSpec) -> Result<(), String> {
    if node.num_outputs > 1 {
        return Err(format!("{} has one output", node.op_type));
    }
    Ok(())
}

/// Whether this opset takes `axes` as the second input instead of an attribute.
fn axes_as_input(node: &NodeSpec) -> bool {
    if node.op_type == "ReduceSum" {
        node.opset >= 13
    } else {
        node.opset >= 18
    }
}

pub(super) fn evaluate(
    node: &NodeSpec,
    inputs: &[Option<Value>],
) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let op = node.op_type.as_str();
    if op == "CumSum" {
        return Ok(vec![cumsum(node, x, input(node, inputs, 1)?)?]);
    }
    let rank = x.shape.len();
    let keepdims = node.int("keepdims", 1)? != 0;
    if op == "ArgMax" || op == "ArgMin" {
        return Ok(vec![arg(node, x, keepdims)?]);
    }
    let axes: Vec<i64> = if axes_as_input(node) {
        match opt_input(inputs, 1) {
            Some(a) => a.data.iter().map(|&v| v as i64).collect(),
            None => Vec::new(),
        }
    } else {
        node.ints("axes")?.unwrap_or_default()
    };
    // noop_with_empty_axes with no axes: "reduction happens over an empty set of axes (similar to
    // the case when `axis=()` in numpy) ... the reduction step behaves like a no-op (identity
    // function), but composite-reduction operators will still perform the non-reduction steps as
    // needed. Thus, ReduceLogSum returns the Log of input tensor, and ReduceSumSquare returns the
    // Square of the input tensor" (the attribute's text since onnx 1.16; the onnx reference
    // evaluator does the same, `np.sum(np.square(x), axis=())`). So no axis is reduced: every group
    // below holds one element, and the op's per-element steps (abs, square, log, exp) still apply.
    let noop = node.int("noop_with_empty_axes", 0)? != 0;
    let mut reduced = vec![axes.is_empty() && !noop; rank];
    for &a in &axes {
        reduced[norm_axis(a, rank, op)?] = true;
    }
    let mut out_shape = Vec::new();
    let mut kept_shape = Vec::new(); // output shape as if keepdims=1
    for (&r, &n) in reduced.iter().zip(&x.shape) {
        if r {
            kept_shape.push(1);
            if keepdims {
                out_shape.push(1);
            }
        } else {
            kept_shape.push(n);
            out_shape.push(n);
        }
    }
    let nout: usize = kept_shape.iter().product();
    let kst = strides(&kept_shape);
    let mut groups: Vec<Vec<f64>> = vec![Vec::new(); nout];
    for (flat, &v) in x.data.iter().enumerate() {
        let idx = unravel(flat, &x.shape);
        let mut o = 0;
        for d in 0..rank {
            if !reduced[d] {
                o += idx[d] * kst[d];
            }
        }
        groups[o].push(v);
    }
    let mut data = Vec::with_capacity(nout);
    let mut mag = Vec::with_capacity(nout);
    for g in &groups {
        let n = g.len() as f64;
        let abs_sum: f64 = g.iter().map(|v| v.abs()).sum();
        let sum: f64 = g.iter().sum();
        let (r, m) = match op {
            "ReduceSum" => (sum, abs_sum),
            "ReduceMean" => (sum / n, abs_sum / n),
            // "Reduction over an empty set of values yields minus infinity (if supported by the
            // datatype) or the minimum value of the data type otherwise" (maximum, for ReduceMin).
            "ReduceMax" | "ReduceMin" if g.is_empty() => {
                let r = empty_extreme(x.dtype, op == "ReduceMax");
                (r, r.abs())
            }
            "ReduceMax" => {
                let r = g.iter().fold(f64::NEG_INFINITY, |a, &b| {
                    if a.is_nan() || b.is_nan() {
                        f64::NAN
                    } else {
                        a.max(b)
                    }
                });
                (r, r.abs())
            }
            "ReduceMin" => {
                let r = g.iter().fold(f64::INFINITY, |a, &b| {
                    if a.is_nan() || b.is_nan() {
                        f64::NAN
                    } else {
                        a.min(b)
                    }
                });
                (r, r.abs())
            }
            "ReduceProd" if !x.dtype.is_float() => {
                // Integer types wrap around (two's complement), as their elementwise products do:
                // the product is kept exactly, reduced into the type's range after every factor
                // (f64 holds integers exactly only up to 2^53).
                let r = g
                    .iter()
                    .fold(1i128, |acc, &v| wrap_i128(acc * v as i128, x.dtype));
                (r as f64, 0.0)
            }
            "ReduceProd" => {
                let r: f64 = g.iter().product();
                (r, r.abs())
            }
            "ReduceL1" => (abs_sum, abs_sum),
            "ReduceL2" => {
                let s: f64 = g.iter().map(|v| v * v).sum();
                (s.sqrt(), s.sqrt())
            }
            "ReduceSumSquare" => {
                let s: f64 = g.iter().map(|v| v * v).sum();
                (s, s)
            }
            "ReduceLogSum" => (sum.ln(), sum.ln().abs().max(1.0)),
            "ReduceLogSumExp" => {
                // log(Σ exp(x)), evaluated around the maximum so that it does not overflow.
                let mx = g.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let r = if mx.is_infinite() {
                    g.iter().map(|v| v.exp()).sum::<f64>().ln()
                } else {
                    mx + g.iter().map(|v| (v - mx).exp()).sum::<f64>().ln()
                };
                (r, r.abs().max(1.0))
            }
            _ => return Err(OracleError::Unsupported(format!("{op} is not a reduction"))),
        };
        data.push(r);
        mag.push(m);
    }
    Ok(vec![output(x.dtype, out_shape, data, mag)?])
}

/// `v` reduced into the two's-complement range of an integer type (modulo 2^bits).
fn wrap_i128(v: i128, dt: DType) -> i128 {
    let (bits, signed) = match dt {
        DType::I8 => (8, true),
        DType::I16 => (16, true),
        DType::I32 => (32, true),
        DType::I64 => (64, true),
        DType::U8 => (8, false),
        DType::U16 => (16, false),
        DType::U32 => (32, false),
        DType::U64 => (64, false),
        _ => return v,
    };
    let m = 1i128 << bits;
    let r = v.rem_euclid(m);
    if signed && r >= m / 2 { r - m } else { r }
}

/// The identity of ReduceMax (`max = true`: the lowest value of the type) or ReduceMin (the highest).
pub(super) fn empty_extreme(dt: DType, max: bool) -> f64 {
    let (lo, hi) = match dt {
        DType::Bool => (0.0, 1.0),
        DType::U8 => (0.0, u8::MAX as f64),
        DType::U16 => (0.0, u16::MAX as f64),
        DType::U32 => (0.0, u32::MAX as f64),
        DType::U64 => (0.0, u64::MAX as f64),
        DType::I8 => (i8::MIN as f64, i8::MAX as f64),
        DType::I16 => (i16::MIN as f64, i16::MAX as f64),
        DType::I32 => (i32::MIN as f64, i32::MAX as f64),
        DType::I64 => (i64::MIN as f64, i64::MAX as f64),
        DType::F32 | DType::F64 | DType::F16 | DType::BF16 => (f64::NEG_INFINITY, f64::INFINITY),
    };
    if max { lo } else { hi }
}

fn arg(node: &NodeSpec, x: &Value, keepdims: bool) -> Result<Output, OracleError> {
    let op = node.op_type.as_str();
    let rank = x.shape.len();
    let axis = norm_axis(node.int("axis", 0)?, rank, op)?;
    let last = node.int("select_last_index", 0)? != 0;
    let outer: usize = x.shape[..axis].iter().product();
    let len = x.shape[axis];
    let inner: usize = x.shape[axis + 1..].iter().product();
    let mut data = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let mut best = 0usize;
            for j in 1..len {
                let v = x.data[(o * len + j) * inner + i];
                let b = x.data[(o * len + best) * inner + i];
                // NaN is both the max and the min (numpy's argmax and argmin, which ONNX's reference
                // evaluator runs; ReduceMax and ReduceMin return NaN, so their arg points at one): the
                // first NaN wins, or the last one with select_last_index.
                let better = if v.is_nan() || b.is_nan() {
                    v.is_nan() && (!b.is_nan() || last)
                } else if op == "ArgMax" {
                    v > b || (last && v == b)
                } else {
                    v < b || (last && v == b)
                };
                if better {
                    best = j;
                }
            }
            data.push(best as f64);
        }
    }
    let mut shape = x.shape.clone();
    if keepdims {
        shape[axis] = 1;
    } else {
        shape.remove(axis);
    }
    let n = data.len();
    output(DType::I64, shape, data, vec![0.0; n])
}

/// CumSum by its definition, each output on its own: output `[.., i, ..]` (`i` on the axis) is the
/// sum of the input at `[.., j, ..]` for `j <= i` (`j >= i` with `reverse`; the equality left out
/// with `exclusive`), added in f64; its magnitude is the sum of those terms' magnitudes.
fn cumsum(node: &NodeSpec, x: &Value, axis: &Value) -> Result<Output, OracleError> {
    if axis.data.len() != 1 || axis.shape.len() > 1 {
        return Err(OracleError::Invalid(format!(
            "CumSum axis must be a scalar, got shape {:?}",
            axis.shape
        )));
    }
    let rank = x.shape.len();
    if rank == 0 {
        return Err(OracleError::Invalid(
            "CumSum of a scalar has no axis".into(),
        ));
    }
    let a = norm_axis(axis.data[0] as i64, rank, "CumSum")?;
    let exclusive = node.int("exclusive", 0)? != 0;
    let reverse = node.int("reverse", 0)? != 0;
    let st = strides(&x.shape);
    let mut data = Vec::with_capacity(x.data.len());
    let mut mag = Vec::with_capacity(x.data.len());
    for flat in 0..x.data.len() {
        let i = unravel(flat, &x.shape)[a];
        let terms = (0..x.shape[a]).filter(|&j| match (reverse, exclusive) {
            (false, false) => j <= i,
            (false, true) => j < i,
            (true, false) => j >= i,
            (true, true) => j > i,
        });
        let (mut sum, mut m) = (0.0, 0.0);
        for j in terms {
            let v = x.data[flat - i * st[a] + j * st[a]];
            sum += v;
            m += v.abs();
        }
        data.push(sum);
        mag.push(m);
    }
    output(x.dtype, x.shape.clone(), data, mag)
}

#[cfg(test)]
mod tests {
    use super::super::Reference;
    use super::super::testutil::*;
    use crate::{Attr, DType, Oracle, Value};

    fn v(shape: Vec<usize>, data: Vec<f64>) -> Option<Value> {
        Some(Value::new(DType::F32, shape, data).unwrap())
    }
    fn axes(a: &[i64]) -> Option<Value> {
        Some(
            Value::new(
                DType::I64,
                vec![a.len()],
                a.iter().map(|&x| x as f64).collect(),
            )
            .unwrap(),
        )
    }

    #[test]
    fn reduce_sum_by_hand() {
        let x = v(vec![2, 3], vec![1.0, -2.0, 3.0, 4.0, 5.0, -6.0]);
        let out = Reference
            .evaluate(&node("ReduceSum", 13, &[]), &[x.clone(), axes(&[1])])
            .unwrap();
        assert_eq!(out[0].value.shape, vec![2, 1]);
        assert_all_close(&out[0].value.data, &[2.0, 3.0]);
        assert_all_close(&out[0].magnitude, &[6.0, 15.0]);
        let out = Reference
            .evaluate(
                &node("ReduceSum", 13, &[("keepdims", Attr::Int(0))]),
                &[x.clone(), None],
            )
            .unwrap();
        assert_eq!(out[0].value.shape, Vec::<usize>::new());
        assert_all_close(&out[0].value.data, &[5.0]);
        let out = Reference
            .evaluate(
                &node("ReduceSum", 13, &[("noop_with_empty_axes", Attr::Int(1))]),
                &[x.clone(), None],
            )
            .unwrap();
        assert_eq!(out[0].value.shape, vec![2, 3]);
        let out = Reference
            .evaluate(
                &node(
                    "ReduceMax",
                    13,
                    &[("axes", Attr::Ints(vec![0])), ("keepdims", Attr::Int(0))],
                ),
                std::slice::from_ref(&x),
            )
            .unwrap();
        assert_eq!(out[0].value.data, vec![4.0, 5.0, 3.0]);
        let out = Reference
            .evaluate(&node("ReduceL2", 18, &[]), &[x.clone(), axes(&[-1])])
            .unwrap();
        assert_all_close(&out[0].value.data, &[14f64.sqrt(), 77f64.sqrt()]);
        let out = Reference
            .evaluate(
                &node("ReduceProd", 13, &[("axes", Attr::Ints(vec![1]))]),
                &[x],
            )
            .unwrap();
        assert_all_close(&out[0].value.data, &[-6.0, -120.0]);
    }

    #[test]
    fn reduce_mean_logsumexp_random() {
        let mut rng = SplitMix64(21);
        let x = rng.vec(2 * 3 * 4);
        let out = Reference
            .evaluate(
                &node("ReduceMean", 18, &[]),
                &[v(vec![2, 3, 4], x.clone()), axes(&[0, 2])],
            )
            .unwrap();
        assert_eq!(out[0].value.shape, vec![1, 3, 1]);
        for b in 0..3 {
            let mut s = 0.0;
            for a in 0..2 {
                for c in 0..4 {
                    s += x[a * 12 + b * 4 + c];
                }
            }
            assert!(close(out[0].value.data[b], s / 8.0));
        }
        let out = Reference
            .evaluate(
                &node("ReduceLogSumExp", 13, &[("axes", Attr::Ints(vec![1]))]),
                &[v(vec![2, 3, 4], x.clone())],
            )
            .unwrap();
        for a in 0..2 {
            for c in 0..4 {
                let s: f64 = (0..3).map(|b| x[a * 12 + b * 4 + c].exp()).sum();
                assert!(close(out[0].value.data[a * 4 + c], s.ln()));
            }
        }
    }

    #[test]
    fn argmax_argmin_by_hand() {
        let x = v(vec![2, 3], vec![1.0, 5.0, 5.0, 7.0, 0.0, 7.0]);
        let out = Reference
            .evaluate(
                &node("ArgMax", 13, &[("axis", Attr::Int(1))]),
                std::slice::from_ref(&x),
            )
            .unwrap();
        assert_eq!(out[0].value.dtype, DType::I64);
        assert_eq!(out[0].value.shape, vec![2, 1]);
        assert_eq!(out[0].value.data, vec![1.0, 0.0]);
        let out = Reference
            .evaluate(
                &node(
                    "ArgMax",
                    13,
                    &[
                        ("axis", Attr::Int(1)),
                        ("select_last_index", Attr::Int(1)),
                        ("keepdims", Attr::Int(0)),
                    ],
                ),
                std::slice::from_ref(&x),
            )
            .unwrap();
        assert_eq!(out[0].value.shape, vec![2]);
        assert_eq!(out[0].value.data, vec![2.0, 2.0]);
        let out = Reference.evaluate(&node("ArgMin", 13, &[]), &[x]).unwrap();
        assert_eq!(out[0].value.data, vec![0.0, 1.0, 0.0]);
    }

    #[test]
    fn empty_max_and_min_give_the_type_extremes() {
        let run = |op: &str, dt: DType| {
            let x = Some(Value::new(dt, vec![2, 0, 3], vec![]).unwrap());
            let out = Reference
                .evaluate(&node(op, 18, &[]), &[x, axes(&[1])])
                .unwrap();
            assert_eq!(out[0].value.shape, vec![2, 1, 3]);
            out[0].value.data[0]
        };
        assert_eq!(run("ReduceMax", DType::Bool), 0.0);
        assert_eq!(run("ReduceMin", DType::Bool), 1.0);
        assert_eq!(run("ReduceMax", DType::I8), -128.0);
        assert_eq!(run("ReduceMin", DType::U8), 255.0);
        assert_eq!(run("ReduceMax", DType::F32), f64::NEG_INFINITY);
        assert_eq!(run("ReduceMin", DType::F16), f64::INFINITY);
    }
}
