//! Softmax, LogSoftmax (both through log-sum-exp) and Hardmax.
//!
//! Opset >= 13: one axis (default -1). Opset < 13: the input is seen as 2-D [prod(dims[..axis]),
//! prod(dims[axis..])] (default axis 1) and the op runs over the second dim.
use super::parallel::deal_rows;
use super::*;
use crate::arbitrate::C_REDUCE;

pub(super) const OPS: &[&str] = &["Softmax", "LogSoftmax", "Hardmax"];

pub(super) fn check(_node: &NodeSpec) -> Result<(), String> {
    Ok(())
}

/// (outer, len, inner) of the groups the op runs over.
fn groups(node: &NodeSpec, shape: &[usize]) -> Result<(usize, usize, usize), OracleError> {
    let rank = shape.len();
    // A scalar has no axis in [-r, r - 1] (the range from opset 11); opset 1 coerces it to [1, 1].
    if rank == 0 && node.opset >= 11 {
        return invalid(format!("a scalar input (opset {})", node.opset));
    }
    if node.opset >= 13 {
        let axis = norm_axis(node.int("axis", -1)?, rank)?;
        Ok((
            shape[..axis].iter().product(),
            shape[axis],
            shape[axis + 1..].iter().product(),
        ))
    } else {
        let axis = node.int("axis", 1)?;
        let r = rank as i64;
        if axis < -r || axis > r {
            return invalid(format!("axis {axis} out of range for rank {rank}"));
        }
        let axis = if axis < 0 {
            (axis + r) as usize
        } else {
            axis as usize
        };
        Ok((
            shape[..axis].iter().product(),
            shape[axis..].iter().product(),
            1,
        ))
    }
}

/// log(sum(exp(x))) = m + log(sum(exp(x - m))) with m = max(x), the sum pairwise.
pub(crate) fn log_sum_exp(xs: &[f64]) -> f64 {
    let (m, l) = shifted_lse(xs);
    m + l
}

/// (m, log(sum(exp(x - m)))) with m = max(x); (m, 0) when m is infinite.
fn shifted_lse(xs: &[f64]) -> (f64, f64) {
    let m = xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    if m.is_infinite() {
        return (m, 0.0);
    }
    let e: Vec<f64> = xs.iter().map(|&x| (x - m).exp()).collect();
    (m, pairwise_sum(&e).ln())
}

/// The smallest normal number of the type a kernel computes `dtype` results in (f64 for f64, f32
/// otherwise), in units of that type's ε.
fn normal_floor(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 2f64.powi(-1022 + 52),
        _ => 2f64.powi(-126 + 23),
    }
}

pub(super) fn eval(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let (_outer, len, inner) = groups(node, &x.shape)?;
    let mut data = vec![0.0; x.data.len()];
    let mut mag = vec![1.0; x.data.len()];
    let floor = normal_floor(x.dtype);
    // Dealt out over threads by slabs [len, inner] of one outer index.
    let slab = len * inner;
    let (threads, work) = (crate::threads(), 3 * slab);
    deal_rows(threads, &mut data, &mut mag, slab, work, |first, ys, gs| {
        let base = first * slab;
        let mut buf = Vec::with_capacity(len);
        for o in first..first + ys.len() / slab {
            for i in 0..inner {
                let idx: Vec<usize> = (0..len).map(|l| (o * len + l) * inner + i).collect();
                buf.clear();
                buf.extend(idx.iter().map(|&j| x.data[j]));
                match node.op_type.as_str() {
                    "Hardmax" => {
                        // 1 at the first NaN if there is one (it is the lane's max, as numpy's argmax has
                        // it), else at the first largest value.
                        let best = buf.iter().position(|v| v.is_nan()).unwrap_or_else(|| {
                            (1..len).fold(0, |b, l| if buf[l] > buf[b] { l } else { b })
                        });
                        for (l, &j) in idx.iter().enumerate() {
                            ys[j - base] = if l == best { 1.0 } else { 0.0 };
                            gs[j - base] = 0.0;
                        }
                    }
                    op => {
                        let (m, l_sum) = shifted_lse(&buf);
                        // log-softmax of every element, then W = Σ softmax_j · |x_j - m| (a term whose
                        // softmax is 0 weighs nothing, however far below the maximum).
                        let ls: Vec<f64> = buf.iter().map(|&v| (v - m) - l_sum).collect();
                        let weights: Vec<f64> = ls
                            .iter()
                            .zip(&buf)
                            .map(|(&l, &v)| {
                                let p = l.exp();
                                if p == 0.0 { 0.0 } else { p * (v - m).abs() }
                            })
                            .collect();
                        let w = pairwise_sum(&weights);
                        // The error bound of arbitrate.rs's "Softmax and LogSoftmax", in ε units: the
                        // sum's worst case, the exponentials' and the final operation's.
                        let rounding = 0.5 * (len as f64 - 1.0);
                        for (l, &j) in idx.iter().enumerate() {
                            let spread = 2.5 * ((buf[l] - m).abs() + w);
                            let bound = if op == "LogSoftmax" {
                                ys[j - base] = ls[l];
                                rounding + spread + 3.0 * (l_sum.abs() + ls[l].abs()) + 16.0
                            } else {
                                let p = ls[l].exp();
                                ys[j - base] = p;
                                let own = if p == 0.0 {
                                    0.0
                                } else {
                                    p * (rounding + spread + 8.5)
                                };
                                own + floor
                            };
                            gs[j - base] = bound * 2.0 / C_REDUCE;
                        }
                    }
                }
            }
        }
    });
    Ok(vec![make_output(x.dtype, x.shape.clone(), data, mag)?])
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;
    use crate::Attr;

    fn direct_softmax(xs: &[f64]) -> Vec<f64> {
        let s: f64 = xs.iter().map(|x| x.exp()).sum();
        xs.iter().map(|x| x.exp() / s).collect()
    }

    #[test]
    fn softmax_axis_new_and_old() {
        let mut r = SplitMix64(9);
        let xs: Vec<f64> = r.values(24).iter().map(|v| v * 3.0).collect();
        // opset 13, axis 1 of [2, 3, 4].
        let out = eval(
            &node("Softmax", 13, vec![("axis", Attr::Int(1))]),
            &[f32v(&[2, 3, 4], xs.clone())],
        )
        .unwrap();
        for o in 0..2 {
            for i in 0..4 {
                let g: Vec<f64> = (0..3).map(|l| xs[o * 12 + l * 4 + i]).collect();
                let want = direct_softmax(&g);
                for l in 0..3 {
                    assert!((out[0].value.data[o * 12 + l * 4 + i] - want[l]).abs() < 1e-14);
                }
            }
        }
        // opset 11, axis 1: rows of 12.
        let old = eval(
            &node("LogSoftmax", 11, vec![]),
            &[f32v(&[2, 3, 4], xs.clone())],
        )
        .unwrap();
        for o in 0..2 {
            let want = direct_softmax(&xs[o * 12..(o + 1) * 12]);
            for l in 0..12 {
                assert!((old[0].value.data[o * 12 + l] - want[l].ln()).abs() < 1e-13);
            }
        }
        // Large inputs stay finite.
        let big = eval(
            &node("Softmax", 13, vec![]),
            &[f32v(&[2], vec![1000.0, 1000.0])],
        )
        .unwrap();
        assert_eq!(big[0].value.data, vec![0.5, 0.5]);
    }

    #[test]
    fn hardmax_forms() {
        let x = vec![1.0, 3.0, 3.0, 0.0, 5.0, 2.0];
        let n = eval(
            &node("Hardmax", 13, vec![("axis", Attr::Int(0))]),
            &[f32v(&[2, 3], x.clone())],
        )
        .unwrap();
        assert_eq!(n[0].value.data, vec![1.0, 0.0, 1.0, 0.0, 1.0, 0.0]);
        let o = eval(
            &node("Hardmax", 11, vec![("axis", Attr::Int(0))]),
            &[f32v(&[2, 3], x.clone())],
        )
        .unwrap();
        assert_eq!(o[0].value.data, vec![0.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
        let l = eval(&node("Hardmax", 13, vec![]), &[f32v(&[2, 3], x)]).unwrap();
        assert_eq!(l[0].value.data, vec![0.0, 1.0, 0.0, 0.0, 1.0, 0.0]);
    }
}
