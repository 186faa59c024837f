//! Reductions (pairwise summation over each reduced group), ArgMax and ArgMin, and CumSum (a
//! running sum carried from one element of the axis to the next).
//!
//! Each output element's group is gathered through two precomputed offset lists: the offsets of the
//! kept coordinates and the offsets of the reduced coordinates; element = kept[o] + reduced[r].
use super::softmax::log_sum_exp;
use super::*;

pub(super) const OPS: &[&str] = &[
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
    "ArgMax",
    "ArgMin",
    "CumSum",
];

pub(super) fn check(_node: &NodeSpec) -> Result<(), String> {
    Ok(())
}

pub(super) fn eval(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    match node.op_type.as_str() {
        "ArgMax" | "ArgMin" => arg(node, inputs),
        "CumSum" => cumsum(node, inputs),
        _ => reduce(node, inputs),
    }
}

/// The reduced axes (sorted, deduplicated), or None for "no reduction" (noop_with_empty_axes).
fn reduced_axes(
    node: &NodeSpec,
    inputs: &[Option<Value>],
    rank: usize,
) -> Result<Option<Vec<usize>>, OracleError> {
    let raw: Option<Vec<i64>> = match opt_input(inputs, 1) {
        Some(v) => Some(v.data.iter().map(|&a| a as i64).collect()),
        None => node.ints("axes")?,
    };
    let raw = raw.unwrap_or_default();
    if raw.is_empty() {
        if node.int("noop_with_empty_axes", 0)? != 0 {
            return Ok(None);
        }
        return Ok(Some((0..rank).collect()));
    }
    let mut axes = Vec::with_capacity(raw.len());
    for a in raw {
        axes.push(norm_axis(a, rank)?);
    }
    axes.sort_unstable();
    axes.dedup();
    Ok(Some(axes))
}

fn reduce(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let rank = x.shape.len();
    let keepdims = node.int("keepdims", 1)? != 0;
    let axes = reduced_axes(node, inputs, rank)?;
    // noop: a reduction over no axes, every group one element.
    let (axes, noop) = match axes {
        Some(a) => (a, false),
        None => (Vec::new(), true),
    };
    let kept: Vec<usize> = (0..rank).filter(|d| !axes.contains(d)).collect();
    let kept_offs = axis_offsets(&x.shape, &kept);
    let red_offs = axis_offsets(&x.shape, &axes);
    let n = red_offs.len() as f64;
    let op = node.op_type.as_str();
    let mut data = Vec::with_capacity(kept_offs.len());
    let mut mag = Vec::with_capacity(kept_offs.len());
    let mut g = Vec::with_capacity(red_offs.len());
    for &k in &kept_offs {
        g.clear();
        g.extend(red_offs.iter().map(|&r| x.data[k + r]));
        let abs: Vec<f64> = g.iter().map(|v| v.abs()).collect();
        let sabs = pairwise_sum(&abs);
        let (r, m) = match op {
            "ReduceSum" => (pairwise_sum(&g), sabs),
            "ReduceMean" => (pairwise_sum(&g) / n, sabs / n),
            "ReduceMax" | "ReduceMin" => {
                let want_max = op == "ReduceMax";
                // Start from the type's bottom (max) or top (min): what an empty set yields --
                // -inf / +inf for floats, the type's extreme for integers, false / true for bool.
                let (bottom, top) = match (x.dtype, int_bits(x.dtype)) {
                    (DType::Bool, _) => (0.0, 1.0),
                    (_, Some((bits, true))) => (
                        -(2f64.powi(bits as i32 - 1)),
                        2f64.powi(bits as i32 - 1) - 1.0,
                    ),
                    (_, Some((bits, false))) => (0.0, 2f64.powi(bits as i32) - 1.0),
                    _ => (f64::NEG_INFINITY, f64::INFINITY),
                };
                let mut best = if want_max { bottom } else { top };
                for &v in &g {
                    if v.is_nan() || best.is_nan() {
                        best = f64::NAN;
                    } else if (want_max && v > best) || (!want_max && v < best) {
                        best = v;
                    }
                }
                (best, best.abs())
            }
            "ReduceProd" => match int_bits(x.dtype) {
                // Integers wrap around (two's complement), and the product is formed modulo 2^64 in
                // u64 (f64 is exact only to 2^53; 60 factors of 5 reach 8.7e41), then read in the
                // type: the low `bits` bits, sign-extended for signed types.
                Some((bits, signed)) => {
                    let p = g
                        .iter()
                        .fold(1u64, |acc, &v| acc.wrapping_mul(v as i128 as u64));
                    let low = if bits == 64 {
                        p
                    } else {
                        p & ((1u64 << bits) - 1)
                    };
                    let r = if signed && low >> (bits - 1) == 1 {
                        low as i128 - (1i128 << bits)
                    } else {
                        low as i128
                    };
                    (r as f64, 0.0)
                }
                None => {
                    let p = g.iter().product::<f64>();
                    (p, p.abs())
                }
            },
            "ReduceL1" => (sabs, sabs),
            "ReduceL2" => {
                let sq: Vec<f64> = g.iter().map(|v| v * v).collect();
                let r = pairwise_sum(&sq).sqrt();
                (r, r)
            }
            "ReduceSumSquare" => {
                let sq: Vec<f64> = g.iter().map(|v| v * v).collect();
                let r = pairwise_sum(&sq);
                (r, r)
            }
            "ReduceLogSum" => {
                let s = pairwise_sum(&g);
                let r = s.ln();
                (r, r.abs() + if s != 0.0 { sabs / s.abs() } else { 0.0 })
            }
            "ReduceLogSumExp" => {
                let r = log_sum_exp(&g);
                (r, r.abs() + 1.0)
            }
            other => return unsupported(format!("{other} is not a reduction")),
        };
        let r = if int_bits(x.dtype).is_some() && op != "ReduceProd" {
            wrap_int(x.dtype, if op == "ReduceMean" { r.trunc() } else { r })
        } else {
            r
        };
        data.push(r);
        mag.push(m);
    }
    let shape: Vec<usize> = if noop {
        x.shape.clone()
    } else if keepdims {
        (0..rank)
            .map(|d| if axes.contains(&d) { 1 } else { x.shape[d] })
            .collect()
    } else {
        kept.iter().map(|&d| x.shape[d]).collect()
    };
    Ok(vec![make_output(x.dtype, shape, data, mag)?])
}

fn arg(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let rank = x.shape.len();
    let axis = norm_axis(node.int("axis", 0)?, rank)?;
    let keepdims = node.int("keepdims", 1)? != 0;
    let last = node.int("select_last_index", 0)? != 0;
    let want_max = node.op_type == "ArgMax";
    let kept: Vec<usize> = (0..rank).filter(|&d| d != axis).collect();
    let kept_offs = axis_offsets(&x.shape, &kept);
    let red_offs = axis_offsets(&x.shape, &[axis]);
    let mut data = Vec::with_capacity(kept_offs.len());
    for &k in &kept_offs {
        // A lane holding NaN: its max and min are NaN (numpy, as ONNX's reference evaluator computes
        // ArgMax / ArgMin), so the index is of a NaN, the first (or the last, select_last_index).
        let mut nans = red_offs
            .iter()
            .enumerate()
            .filter(|&(_, &r)| x.data[k + r].is_nan());
        let nan_at = if last { nans.next_back() } else { nans.next() };
        if let Some((i, _)) = nan_at {
            data.push(i as f64);
            continue;
        }
        let mut best: Option<(usize, f64)> = None;
        for (i, &r) in red_offs.iter().enumerate() {
            let v = x.data[k + r];
            let better = match best {
                None => true,
                Some((_, b)) => {
                    if want_max {
                        v > b || (last && v == b)
                    } else {
                        v < b || (last && v == b)
                    }
                }
            };
            if better {
                best = Some((i, v));
            }
        }
        data.push(best.map(|b| b.0).unwrap_or(0) as f64);
    }
    let shape: Vec<usize> = if keepdims {
        (0..rank)
            .map(|d| if d == axis { 1 } else { x.shape[d] })
            .collect()
    } else {
        kept.iter().map(|&d| x.shape[d]).collect()
    };
    let n = data.len();
    Ok(vec![make_output(DType::I64, shape, data, vec![0.0; n])?])
}

/// CumSum as a recurrence over flat offsets: walking the tensor in storage order (backwards with
/// `reverse`), an element's running sum is its predecessor's along the axis (one axis stride back,
/// or forward) plus its own value, or, `exclusive`, plus the predecessor's value.
fn cumsum(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let axis = input(node, inputs, 1)?;
    let &[a] = axis.data.as_slice() else {
        return invalid(format!("CumSum axis holds {} values", axis.data.len()));
    };
    if x.shape.is_empty() {
        return invalid("CumSum of a scalar has no axis");
    }
    let a = norm_axis(a as i64, x.shape.len())?;
    let exclusive = node.int("exclusive", 0)? != 0;
    let reverse = node.int("reverse", 0)? != 0;
    let step = strides(&x.shape)[a];
    let len = x.shape[a];
    let n = x.data.len();
    let mut sum = vec![0.0f64; n];
    let mut mag = vec![0.0f64; n];
    let order: Box<dyn Iterator<Item = usize>> = if reverse {
        Box::new((0..n).rev())
    } else {
        Box::new(0..n)
    };
    for p in order {
        let pos = (p / step) % len;
        let first = if reverse { pos + 1 == len } else { pos == 0 };
        let prev = if reverse {
            p + step
        } else {
            p.wrapping_sub(step)
        };
        let (s0, m0) = if first {
            (0.0, 0.0)
        } else {
            (sum[prev], mag[prev])
        };
        let own = if exclusive {
            if first { 0.0 } else { x.data[prev] }
        } else {
            x.data[p]
        };
        sum[p] = s0 + own;
        mag[p] = m0 + own.abs();
    }
    Ok(vec![make_output(x.dtype, x.shape.clone(), sum, mag)?])
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;
    use crate::Attr;

    #[test]
    fn reduce_random_axes() {
        let mut r = SplitMix64(21);
        let xs = r.values(24);
        let at = |i: usize, j: usize, k: usize| xs[i * 12 + j * 4 + k];
        // ReduceSum over axes [0, 2] as input (opset 13), keepdims.
        let out = eval(
            &node("ReduceSum", 13, vec![]),
            &[
                f32v(&[2, 3, 4], xs.clone()),
                typed(DType::I64, &[2], vec![0.0, -1.0]),
            ],
        )
        .unwrap();
        assert_eq!(out[0].value.shape, vec![1, 3, 1]);
        for j in 0..3 {
            let mut s = 0.0;
            let mut m = 0.0;
            for i in 0..2 {
                for k in 0..4 {
                    s += at(i, j, k);
                    m += at(i, j, k).abs();
                }
            }
            assert!((out[0].value.data[j] - s).abs() < 1e-14);
            assert!((out[0].magnitude[j] - m).abs() < 1e-14);
        }
        // ReduceLogSumExp over axis 1 (attribute, opset 13), no keepdims.
        let l = eval(
            &node(
                "ReduceLogSumExp",
                13,
                vec![("axes", Attr::Ints(vec![1])), ("keepdims", Attr::Int(0))],
            ),
            &[f32v(&[2, 3, 4], xs.clone())],
        )
        .unwrap();
        assert_eq!(l[0].value.shape, vec![2, 4]);
        for i in 0..2 {
            for k in 0..4 {
                let want: f64 = (0..3).map(|j| at(i, j, k).exp()).sum::<f64>().ln();
                assert!((l[0].value.data[i * 4 + k] - want).abs() < 1e-14);
            }
        }
        // ReduceL2 / Prod / Max over everything.
        let l2 = eval(
            &node("ReduceL2", 18, vec![("keepdims", Attr::Int(0))]),
            &[f32v(&[2, 3, 4], xs.clone())],
        )
        .unwrap();
        let want = xs.iter().map(|v| v * v).sum::<f64>().sqrt();
        assert_eq!(l2[0].value.shape, Vec::<usize>::new());
        assert!((l2[0].value.data[0] - want).abs() < 1e-14);
        let mx = eval(
            &node("ReduceMax", 13, vec![("axes", Attr::Ints(vec![2]))]),
            &[f32v(&[2, 3, 4], xs.clone())],
        )
        .unwrap();
        for o in 0..6 {
            let want = xs[o * 4..o * 4 + 4]
                .iter()
                .cloned()
                .fold(f64::NEG_INFINITY, f64::max);
            assert_eq!(mx[0].value.data[o], want);
        }
    }

    #[test]
    fn reduce_noop_and_empty() {
        let x = f32v(&[2, 2], vec![1.0, -2.0, 3.0, -4.0]);
        let noop = eval(
            &node(
                "ReduceSumSquare",
                18,
                vec![("noop_with_empty_axes", Attr::Int(1))],
            ),
            &[x.clone(), typed(DType::I64, &[0], vec![])],
        )
        .unwrap();
        assert_eq!(noop[0].value.shape, vec![2, 2]);
        assert_eq!(noop[0].value.data, vec![1.0, 4.0, 9.0, 16.0]);
        let all = eval(
            &node("ReduceMean", 18, vec![]),
            &[x.clone(), typed(DType::I64, &[0], vec![])],
        )
        .unwrap();
        assert_eq!(all[0].value.shape, vec![1, 1]);
        assert_eq!(all[0].value.data, vec![-0.5]);
        let p = eval(
            &node("ReduceProd", 13, vec![("axes", Attr::Ints(vec![0]))]),
            &[x],
        )
        .unwrap();
        assert_eq!(p[0].value.data, vec![3.0, 8.0]);
        let e = eval(
            &node("ReduceSum", 13, vec![("keepdims", Attr::Int(0))]),
            &[f32v(&[0, 3], vec![]), typed(DType::I64, &[1], vec![0.0])],
        )
        .unwrap();
        assert_eq!(e[0].value.data, vec![0.0, 0.0, 0.0]);
    }

    #[test]
    fn argmax_argmin() {
        let x = f32v(&[2, 3], vec![1.0, 5.0, 5.0, 7.0, 0.0, 7.0]);
        let a = eval(
            &node("ArgMax", 13, vec![("axis", Attr::Int(1))]),
            std::slice::from_ref(&x),
        )
        .unwrap();
        assert_eq!(a[0].value.dtype, DType::I64);
        assert_eq!(a[0].value.shape, vec![2, 1]);
        assert_eq!(a[0].value.data, vec![1.0, 0.0]);
        let l = eval(
            &node(
                "ArgMax",
                13,
                vec![
                    ("axis", Attr::Int(-1)),
                    ("select_last_index", Attr::Int(1)),
                    ("keepdims", Attr::Int(0)),
                ],
            ),
            std::slice::from_ref(&x),
        )
        .unwrap();
        assert_eq!(l[0].value.shape, vec![2]);
        assert_eq!(l[0].value.data, vec![2.0, 2.0]);
        let m = eval(&node("ArgMin", 13, vec![]), &[x]).unwrap();
        assert_eq!(m[0].value.data, vec![0.0, 1.0, 0.0]);
    }
}
