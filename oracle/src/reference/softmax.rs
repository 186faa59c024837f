//! Softmax, LogSoftmax, Hardmax: opset >= 13 along one axis; before 13 over the input flattened to 2-D
//! at `axis` ([prod(d[..axis]), prod(d[axis..])], along the second dimension).
use super::parallel::rows;
use super::{input, norm_axis, output};
use crate::arbitrate::C_REDUCE;
use crate::{DType, NodeSpec, OracleError, Output, Value};

pub(super) fn supports(node: &NodeSpec) -> Result<(), String> {
    if node.num_outputs > 1 {
        return Err(format!("{} has one output", node.op_type));
    }
    Ok(())
}

pub(super) fn evaluate(
    node: &NodeSpec,
    inputs: &[Option<Value>],
) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let op = node.op_type.as_str();
    let rank = x.shape.len();
    let new = node.opset >= 13;
    let axis = node.int("axis", if new { -1 } else { 1 })?;
    // "Accepted range is [-r, r-1] where r = rank(input)" (opset 11 on): empty for a scalar, which
    // ONNX's shape inference rejects ("Input rank must be >= 1"). Opset 1 only coerces the input to
    // 2-D at `axis`; a scalar with axis 0 is then [1, 1].
    if rank == 0 && node.opset >= 11 {
        return Err(OracleError::Invalid(format!(
            "{op}: the input must have rank >= 1 (opset {})",
            node.opset
        )));
    }
    let (_outer, len, inner) = if new {
        let a = norm_axis(axis, rank, op)?;
        (
            x.shape[..a].iter().product(),
            x.shape[a],
            x.shape[a + 1..].iter().product(),
        )
    } else {
        // Old semantics: axis may equal rank (then the 2-D view is [N, 1]).
        let a = if axis < 0 { axis + rank as i64 } else { axis };
        if a < 0 || a > rank as i64 {
            return Err(OracleError::Invalid(format!(
                "{op}: axis {axis} out of range for rank {rank}"
            )));
        }
        let a = a as usize;
        (
            x.shape[..a].iter().product::<usize>(),
            x.shape[a..].iter().product::<usize>(),
            1usize,
        )
    };
    // Below the computed type's normal range, over its ε (the `T` of arbitrate.rs's Softmax section).
    let tiny = if x.dtype == DType::F64 {
        f64::MIN_POSITIVE / f64::EPSILON
    } else {
        f32::MIN_POSITIVE as f64 / f32::EPSILON as f64
    };
    let mut data = vec![0.0; x.data.len()];
    let mut mag = vec![0.0; x.data.len()];
    // Split over threads by whole slabs [len, inner] of one outer index.
    let slab = len * inner;
    let (threads, work) = (crate::threads(), 3 * slab);
    rows(threads, &mut data, &mut mag, slab, work, |first, ys, gs| {
        let base = first * slab;
        for o in first..first + ys.len() / slab {
            for i in 0..inner {
                let at = |j: usize| (o * len + j) * inner + i;
                let mut max = f64::NEG_INFINITY;
                let mut argmax = 0usize;
                // The first maximum, NaN counting as the maximum (numpy's argmax, as ONNX's evaluator
                // computes Hardmax; ArgMax and ReduceMax agree). With a NaN in the lane, Softmax and
                // LogSoftmax are NaN throughout either way (the sum of exponentials is NaN).
                for j in 0..len {
                    let v = x.data[at(j)];
                    if !max.is_nan() && (v > max || v.is_nan()) {
                        max = v;
                        argmax = j;
                    }
                }
                match op {
                    "Hardmax" => {
                        for j in 0..len {
                            ys[at(j) - base] = if j == argmax { 1.0 } else { 0.0 };
                            gs[at(j) - base] = 1.0;
                        }
                    }
                    _ => {
                        let mut sum = 0.0;
                        for j in 0..len {
                            sum += (x.data[at(j)] - max).exp();
                        }
                        // W: the exponentials' weighted mean of |x_j - max| (an exponential of 0, as
                        // for a -inf logit, weighs nothing).
                        let mut weighted = 0.0;
                        for j in 0..len {
                            let d = x.data[at(j)] - max;
                            let e = d.exp();
                            if e > 0.0 {
                                weighted += e * d.abs();
                            }
                        }
                        let w = weighted / sum;
                        let roundings = (len as f64 - 1.0) / 2.0;
                        for j in 0..len {
                            let d = x.data[at(j)] - max;
                            let (y, bound) = if op == "Softmax" {
                                let y = d.exp() / sum;
                                let relative = if y > 0.0 {
                                    y * (roundings + 2.5 * (d.abs() + w) + 8.5)
                                } else {
                                    0.0
                                };
                                (y, relative + tiny)
                            } else {
                                let z = d - sum.ln();
                                let l = sum.ln().abs();
                                (
                                    z,
                                    roundings + 2.5 * (d.abs() + w) + 3.0 * (l + z.abs()) + 16.0,
                                )
                            };
                            ys[at(j) - base] = y;
                            // arbitrate.rs, "Softmax and LogSoftmax": the bound C_REDUCE·ε·m is 2·ε·E.
                            gs[at(j) - base] = 2.0 * bound / C_REDUCE;
                        }
                    }
                }
            }
        }
    });
    Ok(vec![output(x.dtype, x.shape.clone(), data, mag)?])
}

#[cfg(test)]
mod tests {
    use super::super::Reference;
    use super::super::testutil::*;
    use crate::{Attr, DType, Oracle, Value};

    fn v(shape: Vec<usize>, data: Vec<f64>) -> Option<Value> {
        Some(Value::new(DType::F32, shape, data).unwrap())
    }

    #[test]
    fn softmax_by_hand() {
        let out = Reference
            .evaluate(
                &node("Softmax", 13, &[]),
                &[v(vec![1, 2], vec![0.0, 2f64.ln()])],
            )
            .unwrap();
        // exp: 1, 2 -> 1/3, 2/3
        assert_all_close(&out[0].value.data, &[1.0 / 3.0, 2.0 / 3.0]);
        let out = Reference
            .evaluate(&node("LogSoftmax", 13, &[]), &[v(vec![2], vec![0.0, 0.0])])
            .unwrap();
        assert_all_close(&out[0].value.data, &[-(2f64.ln()), -(2f64.ln())]);
        let out = Reference
            .evaluate(
                &node("Hardmax", 13, &[("axis", Attr::Int(0))]),
                &[v(vec![3, 1], vec![1.0, 3.0, 3.0])],
            )
            .unwrap();
        assert_eq!(out[0].value.data, vec![0.0, 1.0, 0.0]);
    }

    #[test]
    fn softmax_axis_random() {
        let mut rng = SplitMix64(9);
        let x = rng.vec(2 * 3 * 4);
        let out = Reference
            .evaluate(
                &node("Softmax", 13, &[("axis", Attr::Int(1))]),
                &[v(vec![2, 3, 4], x.clone())],
            )
            .unwrap();
        for a in 0..2 {
            for c in 0..4 {
                let s: f64 = (0..3).map(|b| x[a * 12 + b * 4 + c].exp()).sum();
                for b in 0..3 {
                    assert!(close(
                        out[0].value.data[a * 12 + b * 4 + c],
                        x[a * 12 + b * 4 + c].exp() / s
                    ));
                }
            }
        }
    }

    #[test]
    fn softmax_old_opset_flattens() {
        let mut rng = SplitMix64(10);
        let x = rng.vec(2 * 3 * 4);
        // opset 11, axis 1: rows of 12 elements.
        let out = Reference
            .evaluate(&node("Softmax", 11, &[]), &[v(vec![2, 3, 4], x.clone())])
            .unwrap();
        for r in 0..2 {
            let s: f64 = (0..12).map(|j| x[r * 12 + j].exp()).sum();
            for j in 0..12 {
                assert!(close(
                    out[0].value.data[r * 12 + j],
                    x[r * 12 + j].exp() / s
                ));
            }
        }
        let out = Reference
            .evaluate(&node("Hardmax", 11, &[]), &[v(vec![2, 3, 4], x.clone())])
            .unwrap();
        let ones: f64 = out[0].value.data.iter().sum();
        assert_eq!(ones, 2.0);
    }
}
