//! Data movement and views: Transpose, Concat, Slice, Gather, Expand, Tile, Reshape, Flatten, Squeeze,
//! Unsqueeze.
use super::{
    broadcast_index, broadcast_shapes, input, norm_axis, opt_input, output, strides, unravel,
};
use crate::{NodeSpec, OracleError, Output, Value};

const OPS: &[&str] = &[
    "Transpose",
    "Concat",
    "Slice",
    "Gather",
    "Expand",
    "Tile",
    "Reshape",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
];

pub(super) fn covers(op: &str) -> bool {
    OPS.contains(&op)
}

pub(super) fn supports(node: &NodeSpec) -> Result<(), String> {
    if node.num_outputs > 1 {
        return Err(format!("{} has one output", node.op_type));
    }
    if node.op_type == "Reshape" && node.opset < 5 {
        return Err("Reshape before opset 5 (shape attribute) is not covered".into());
    }
    Ok(())
}

fn ints_of(v: &Value) -> Vec<i64> {
    v.data.iter().map(|&x| x as i64).collect()
}

fn done(x: &Value, shape: Vec<usize>, data: Vec<f64>) -> Result<Vec<Output>, OracleError> {
    let mag = data.iter().map(|v| v.abs()).collect();
    Ok(vec![output(x.dtype, shape, data, mag)?])
}

pub(super) fn evaluate(
    node: &NodeSpec,
    inputs: &[Option<Value>],
) -> Result<Vec<Output>, OracleError> {
    let op = node.op_type.as_str();
    let x = input(node, inputs, 0)?;
    let rank = x.shape.len();
    match op {
        "Transpose" => {
            let perm: Vec<usize> = match node.ints("perm")? {
                Some(p) => p
                    .iter()
                    .map(|&a| norm_axis(a, rank, op))
                    .collect::<Result<_, _>>()?,
                None => (0..rank).rev().collect(),
            };
            if perm.len() != rank {
                return Err(OracleError::Invalid(format!(
                    "Transpose perm {perm:?} for rank {rank}"
                )));
            }
            let shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
            let ist = strides(&x.shape);
            let data = (0..x.len())
                .map(|f| {
                    let oi = unravel(f, &shape);
                    // output[i] = input[j] with j[perm[d]] = i[d]
                    x.data[(0..rank).map(|d| oi[d] * ist[perm[d]]).sum::<usize>()]
                })
                .collect();
            done(x, shape, data)
        }
        "Concat" => {
            let vals: Vec<&Value> = inputs.iter().flatten().collect();
            let axis = norm_axis(node.int("axis", 0)?, rank, op)?;
            let mut shape = x.shape.clone();
            shape[axis] = vals.iter().map(|v| v.shape[axis]).sum();
            let outer: usize = x.shape[..axis].iter().product();
            let inner: usize = x.shape[axis + 1..].iter().product();
            let mut data = Vec::new();
            for o in 0..outer {
                for v in &vals {
                    let chunk = v.shape[axis] * inner;
                    data.extend_from_slice(&v.data[o * chunk..(o + 1) * chunk]);
                }
            }
            done(x, shape, data)
        }
        "Gather" => {
            let idx = input(node, inputs, 1)?;
            let axis = norm_axis(node.int("axis", 0)?, rank, op)?;
            let outer: usize = x.shape[..axis].iter().product();
            let inner: usize = x.shape[axis + 1..].iter().product();
            let dim = x.shape[axis] as i64;
            let mut data = Vec::new();
            for o in 0..outer {
                for &iv in &idx.data {
                    let mut i = iv as i64;
                    if i < 0 {
                        i += dim;
                    }
                    if i < 0 || i >= dim {
                        return Err(OracleError::Invalid(format!(
                            "Gather index {iv} out of range"
                        )));
                    }
                    let b = (o * x.shape[axis] + i as usize) * inner;
                    data.extend_from_slice(&x.data[b..b + inner]);
                }
            }
            let mut shape = x.shape[..axis].to_vec();
            shape.extend(&idx.shape);
            shape.extend(&x.shape[axis + 1..]);
            done(x, shape, data)
        }
        "Slice" => slice(node, inputs, x),
        "Expand" => {
            let target: Vec<usize> = ints_of(input(node, inputs, 1)?)
                .iter()
                .map(|&d| d as usize)
                .collect();
            let shape = broadcast_shapes(&[&x.shape, &target])?;
            let n: usize = shape.iter().product();
            let data = (0..n)
                .map(|f| x.data[broadcast_index(&unravel(f, &shape), &x.shape)])
                .collect();
            done(x, shape, data)
        }
        "Tile" => {
            let reps = ints_of(input(node, inputs, 1)?);
            if reps.len() != rank {
                return Err(OracleError::Invalid(
                    "Tile repeats length differs from rank".into(),
                ));
            }
            let shape: Vec<usize> = (0..rank).map(|d| x.shape[d] * reps[d] as usize).collect();
            let ist = strides(&x.shape);
            let n: usize = shape.iter().product();
            let data = (0..n)
                .map(|f| {
                    let oi = unravel(f, &shape);
                    x.data[(0..rank)
                        .map(|d| (oi[d] % x.shape[d]) * ist[d])
                        .sum::<usize>()]
                })
                .collect();
            done(x, shape, data)
        }
        "Reshape" => {
            let spec = ints_of(input(node, inputs, 1)?);
            let allowzero = node.int("allowzero", 0)? != 0;
            let mut shape = Vec::with_capacity(spec.len());
            let mut infer = None;
            for (i, &s) in spec.iter().enumerate() {
                if s == 0 && !allowzero {
                    shape.push(
                        *x.shape
                            .get(i)
                            .ok_or_else(|| OracleError::Invalid("Reshape 0 beyond rank".into()))?,
                    );
                } else if s == -1 {
                    infer = Some(i);
                    shape.push(1);
                } else if s < 0 {
                    return Err(OracleError::Invalid(format!("Reshape dimension {s}")));
                } else {
                    shape.push(s as usize);
                }
            }
            if let Some(i) = infer {
                let known: usize = shape.iter().product();
                if known == 0 {
                    return Err(OracleError::Invalid(
                        "Reshape cannot infer -1 next to a zero dimension".into(),
                    ));
                }
                shape[i] = x.len() / known;
            }
            done(x, shape, x.data.clone())
        }
        "Flatten" => {
            let a = node.int("axis", 1)?;
            let a = if a < 0 { a + rank as i64 } else { a };
            if a < 0 || a > rank as i64 {
                return Err(OracleError::Invalid(format!(
                    "Flatten axis {a} for rank {rank}"
                )));
            }
            let a = a as usize;
            let shape = vec![x.shape[..a].iter().product(), x.shape[a..].iter().product()];
            done(x, shape, x.data.clone())
        }
        "Squeeze" | "Unsqueeze" => {
            let axes: Option<Vec<i64>> = if node.opset >= 13 {
                opt_input(inputs, 1).map(ints_of)
            } else {
                node.ints("axes")?
            };
            let shape = if op == "Squeeze" {
                match axes {
                    None => x.shape.iter().cloned().filter(|&d| d != 1).collect(),
                    Some(a) => {
                        let ax: Vec<usize> = a
                            .iter()
                            .map(|&v| norm_axis(v, rank, op))
                            .collect::<Result<_, _>>()?;
                        x.shape
                            .iter()
                            .enumerate()
                            .filter(|(i, _)| !ax.contains(i))
                            .map(|(_, &d)| d)
                            .collect()
                    }
                }
            } else {
                let a = axes.ok_or_else(|| OracleError::Invalid("Unsqueeze needs axes".into()))?;
                let out_rank = rank + a.len();
                let ax: Vec<usize> = a
                    .iter()
                    .map(|&v| norm_axis(v, out_rank, op))
                    .collect::<Result<_, _>>()?;
                let mut it = x.shape.iter();
                (0..out_rank)
                    .map(|i| {
                        if ax.contains(&i) {
                            1
                        } else {
                            *it.next().unwrap_or(&1)
                        }
                    })
                    .collect()
            };
            done(x, shape, x.data.clone())
        }
        _ => Err(OracleError::Unsupported(format!(
            "{op} is not a data-movement op"
        ))),
    }
}

fn slice(node: &NodeSpec, inputs: &[Option<Value>], x: &Value) -> Result<Vec<Output>, OracleError> {
    let rank = x.shape.len();
    let (starts, ends, axes, steps) = if node.opset < 10 {
        let s = node.ints("starts")?.unwrap_or_default();
        let e = node.ints("ends")?.unwrap_or_default();
        let a = node.ints("axes")?;
        (s, e, a, None)
    } else {
        (
            ints_of(input(node, inputs, 1)?),
            ints_of(input(node, inputs, 2)?),
            opt_input(inputs, 3).map(ints_of),
            opt_input(inputs, 4).map(ints_of),
        )
    };
    let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err(OracleError::Invalid(format!(
            "Slice: starts, ends, axes and steps differ in length ({}, {}, {}, {})",
            starts.len(),
            ends.len(),
            axes.len(),
            steps.len()
        )));
    }
    let mut st = vec![0i64; rank];
    let mut stp = vec![1i64; rank];
    let mut shape = x.shape.clone();
    for i in 0..starts.len() {
        let a = norm_axis(axes[i], rank, "Slice")?;
        // In i128, so that starts / ends near i64::MAX and steps of i64::MIN cannot overflow.
        let dim = x.shape[a] as i128;
        let step = steps[i] as i128;
        if step == 0 {
            return Err(OracleError::Invalid("Slice step 0".into()));
        }
        let (mut s, mut e) = (starts[i] as i128, ends[i] as i128);
        if s < 0 {
            s += dim;
        }
        if e < 0 {
            e += dim;
        }
        // The specification's clamps: [0, dim] for positive steps, starts to [0, dim - 1] and ends
        // to [-1, dim - 1] for negative ones. On an empty axis (dim 0) the latter ranges are empty:
        // there is nothing to take, and the slice is empty whatever starts and ends say.
        let len = if dim == 0 {
            0
        } else if step > 0 {
            s = s.clamp(0, dim);
            e = e.clamp(0, dim);
            (e - s + step - 1).max(0) / step
        } else {
            s = s.clamp(0, dim - 1);
            e = e.clamp(-1, dim - 1);
            (s - e - step - 1).max(0) / (-step)
        };
        st[a] = s as i64;
        stp[a] = steps[i];
        shape[a] = len as usize;
    }
    let ist = strides(&x.shape);
    let n: usize = shape.iter().product();
    let data = (0..n)
        .map(|f| {
            let oi = unravel(f, &shape);
            x.data[(0..rank)
                .map(|d| (st[d] + oi[d] as i64 * stp[d]) as usize * ist[d])
                .sum::<usize>()]
        })
        .collect();
    done(x, shape, data)
}

#[cfg(test)]
mod tests {
    use super::super::Reference;
    use super::super::testutil::*;
    use crate::{Attr, DType, Oracle, Value};

    fn v(shape: Vec<usize>, data: Vec<f64>) -> Option<Value> {
        Some(Value::new(DType::F32, shape, data).unwrap())
    }
    fn iv(d: &[i64]) -> Option<Value> {
        Some(
            Value::new(
                DType::I64,
                vec![d.len()],
                d.iter().map(|&x| x as f64).collect(),
            )
            .unwrap(),
        )
    }

    #[test]
    fn transpose_concat_gather_by_hand() {
        let x = v(vec![2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let out = Reference
            .evaluate(&node("Transpose", 13, &[]), std::slice::from_ref(&x))
            .unwrap();
        assert_eq!(out[0].value.shape, vec![3, 2]);
        assert_eq!(out[0].value.data, vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        let out = Reference
            .evaluate(
                &node("Concat", 13, &[("axis", Attr::Int(1))]),
                &[x.clone(), v(vec![2, 1], vec![7.0, 8.0])],
            )
            .unwrap();
        assert_eq!(
            out[0].value.data,
            vec![1.0, 2.0, 3.0, 7.0, 4.0, 5.0, 6.0, 8.0]
        );
        let out = Reference
            .evaluate(
                &node("Gather", 13, &[("axis", Attr::Int(1))]),
                &[x.clone(), iv(&[-1, 0])],
            )
            .unwrap();
        assert_eq!(out[0].value.shape, vec![2, 2]);
        assert_eq!(out[0].value.data, vec![3.0, 1.0, 6.0, 4.0]);
    }

    #[test]
    fn slice_negative_step_by_hand() {
        let x = v(vec![5], vec![0.0, 1.0, 2.0, 3.0, 4.0]);
        let out = Reference
            .evaluate(
                &node("Slice", 13, &[]),
                &[x.clone(), iv(&[-1]), iv(&[-1000]), iv(&[0]), iv(&[-2])],
            )
            .unwrap();
        assert_eq!(out[0].value.data, vec![4.0, 2.0, 0.0]);
        let out = Reference
            .evaluate(
                &node("Slice", 13, &[]),
                &[x, iv(&[1]), iv(&[i64::MAX]), None, None],
            )
            .unwrap();
        assert_eq!(out[0].value.data, vec![1.0, 2.0, 3.0, 4.0]);
    }

    #[test]
    // Indices are written out term by term (`1 * 12 + ...`) to mirror the layout formula.
    #[allow(clippy::identity_op)]
    fn reshape_expand_tile_random() {
        let mut rng = SplitMix64(66);
        let d = rng.vec(6);
        let x = v(vec![2, 3], d.clone());
        let out = Reference
            .evaluate(&node("Reshape", 14, &[]), &[x.clone(), iv(&[3, -1])])
            .unwrap();
        assert_eq!(out[0].value.shape, vec![3, 2]);
        assert_eq!(out[0].value.data, d);
        let out = Reference
            .evaluate(
                &node("Expand", 13, &[]),
                &[v(vec![3, 1], d[..3].to_vec()), iv(&[2, 1, 4])],
            )
            .unwrap();
        assert_eq!(out[0].value.shape, vec![2, 3, 4]);
        assert_eq!(out[0].value.data[1 * 12 + 2 * 4 + 3], d[2]);
        let out = Reference
            .evaluate(&node("Tile", 13, &[]), &[x, iv(&[2, 1])])
            .unwrap();
        assert_eq!(out[0].value.shape, vec![4, 3]);
        assert_eq!(out[0].value.data[9..], d[3..]);
        let out = Reference
            .evaluate(
                &node("Unsqueeze", 13, &[]),
                &[v(vec![3], d[..3].to_vec()), iv(&[0, -1])],
            )
            .unwrap();
        assert_eq!(out[0].value.shape, vec![1, 3, 1]);
    }
}
