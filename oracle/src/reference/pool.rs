//! MaxPool (ceil_mode, dilations, storage_order, Indices), AveragePool (count_include_pad, ceil_mode),
//! GlobalAveragePool, GlobalMaxPool.
use super::{input, output, strides, unravel};
use crate::{DType, NodeSpec, OracleError, Output, Value};

pub(super) fn supports(node: &NodeSpec) -> Result<(), String> {
    let op = node.op_type.as_str();
    let max_outputs = if op == "MaxPool" { 2 } else { 1 };
    if node.num_outputs > max_outputs {
        return Err(format!("{op} has at most {max_outputs} outputs"));
    }
    if op == "MaxPool" || op == "AveragePool" || op == "LpPool" {
        let ap = node
            .string("auto_pad", "NOTSET")
            .map_err(|e| e.to_string())?;
        if !matches!(
            ap.as_str(),
            "NOTSET" | "VALID" | "SAME_UPPER" | "SAME_LOWER"
        ) {
            return Err(format!("{op} auto_pad '{ap}' is not covered"));
        }
        if node
            .ints("kernel_shape")
            .map_err(|e| e.to_string())?
            .is_none()
        {
            return Err(format!("{op} needs kernel_shape"));
        }
    }
    Ok(())
}

pub(super) fn evaluate(
    node: &NodeSpec,
    inputs: &[Option<Value>],
) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let op = node.op_type.as_str();
    if x.shape.len() < 3 {
        return Err(OracleError::Invalid(format!(
            "{op} needs rank >= 3, got {:?}",
            x.shape
        )));
    }
    let sp = x.shape.len() - 2;
    let ishape = &x.shape[2..];
    let is_max = op == "MaxPool" || op == "GlobalMaxPool";
    let is_lp = op == "LpPool";
    let p = node.int("p", 2)? as f64;
    let (k, st, dl, pb, pe, oshape) = if op.starts_with("Global") {
        (
            ishape.to_vec(),
            vec![1; sp],
            vec![1; sp],
            vec![0; sp],
            vec![0; sp],
            vec![1; sp],
        )
    } else {
        geometry(node, ishape)?
    };
    let count_include_pad = node.int("count_include_pad", 0)? != 0;
    let storage_col = node.int("storage_order", 0)? != 0;
    let (nb, c) = (x.shape[0], x.shape[1]);
    let inner: usize = ishape.iter().product();
    let ist = strides(ishape);
    // Column-major strides of the spatial dimensions, for storage_order = 1.
    let mut cst = vec![1usize; sp];
    for d in 1..sp {
        cst[d] = cst[d - 1] * ishape[d - 1];
    }
    let nout: usize = oshape.iter().product();
    let nk: usize = k.iter().product();
    let mut data = Vec::new();
    let mut mag = Vec::new();
    let mut indices = Vec::new();
    for n in 0..nb {
        for ch in 0..c {
            let base = (n * c + ch) * inner;
            for of in 0..nout {
                let oi = unravel(of, &oshape);
                let mut best = f64::NEG_INFINITY;
                let mut best_idx = 0usize;
                let mut found = false;
                let mut sum = 0.0;
                let mut asum = 0.0;
                let mut cnt_valid = 0usize;
                let mut cnt_padded = 0usize;
                let mut lp_sum = 0.0;
                for kf in 0..nk {
                    let ki = unravel(kf, &k);
                    let mut inside = true;
                    let mut in_padded = true;
                    let mut off = 0usize;
                    let mut coff = 0usize;
                    for d in 0..sp {
                        let pos = (oi[d] * st[d] + ki[d] * dl[d]) as i64 - pb[d] as i64;
                        if pos < -(pb[d] as i64) || pos >= (ishape[d] + pe[d]) as i64 {
                            in_padded = false;
                        }
                        if pos < 0 || pos >= ishape[d] as i64 {
                            inside = false;
                        } else {
                            off += pos as usize * ist[d];
                            coff += pos as usize * cst[d];
                        }
                    }
                    if in_padded {
                        cnt_padded += 1;
                    }
                    if !inside {
                        continue;
                    }
                    cnt_valid += 1;
                    let v = x.data[base + off];
                    sum += v;
                    asum += v.abs();
                    lp_sum += v.abs().powf(p);
                    // NaN wins and stays (the first NaN of the window): the max of values with a
                    // NaN among them is NaN, as for ReduceMax and GlobalMaxPool.
                    if !found || v > best || v.is_nan() && !best.is_nan() {
                        best = v;
                        best_idx = base + if storage_col { coff } else { off };
                        found = true;
                    }
                }
                if is_lp {
                    let r = lp_sum.powf(1.0 / p);
                    data.push(r);
                    mag.push(r);
                } else if is_max {
                    // A window wholly in the padding (dilations or auto_pad can make one) holds no
                    // value. The max of no values is "minus infinity (if supported by the datatype) or
                    // the minimum value of the data type otherwise" (ReduceMax's rule; MaxPool does not
                    // say), and its index -1: there is no element to point at.
                    let (v, i) = if found {
                        (best, best_idx as f64)
                    } else {
                        (super::reduce::empty_extreme(x.dtype, true), -1.0)
                    };
                    data.push(v);
                    mag.push(v.abs());
                    indices.push(i);
                } else {
                    let cnt = if count_include_pad {
                        cnt_padded
                    } else {
                        cnt_valid
                    };
                    data.push(sum / cnt as f64);
                    mag.push(asum / cnt as f64);
                }
            }
        }
    }
    let mut shape = vec![nb, c];
    shape.extend(oshape);
    let mut outs = vec![output(x.dtype, shape.clone(), data, mag)?];
    if op == "MaxPool" && node.num_outputs >= 2 {
        let z = vec![0.0; indices.len()];
        outs.push(output(DType::I64, shape, indices, z)?);
    }
    Ok(outs)
}

type Geometry = (
    Vec<usize>,
    Vec<usize>,
    Vec<usize>,
    Vec<usize>,
    Vec<usize>,
    Vec<usize>,
);

/// kernel, strides, dilations, begin pads, end pads, output spatial shape.
fn geometry(node: &NodeSpec, ishape: &[usize]) -> Result<Geometry, OracleError> {
    let sp = ishape.len();
    let op = node.op_type.as_str();
    let get = |name: &str, d: i64, len: usize| -> Result<Vec<usize>, OracleError> {
        let v = node.ints(name)?.unwrap_or_else(|| vec![d; len]);
        if v.len() != len || v.iter().any(|&e| e < 0) {
            return Err(OracleError::Invalid(format!(
                "{op} {name} {v:?} must have {len} non-negative entries"
            )));
        }
        Ok(v.into_iter().map(|e| e as usize).collect())
    };
    let k = get("kernel_shape", 1, sp)?;
    let st = get("strides", 1, sp)?;
    let dl = get("dilations", 1, sp)?;
    let pads = get("pads", 0, 2 * sp)?;
    if st.contains(&0) || dl.contains(&0) || k.contains(&0) {
        return Err(OracleError::Invalid(format!(
            "{op} kernel, strides and dilations must be positive"
        )));
    }
    let ceil = node.int("ceil_mode", 0)? != 0;
    let auto_pad = node.string("auto_pad", "NOTSET")?;
    let (mut pb, mut pe, mut out) = (vec![0; sp], vec![0; sp], vec![0; sp]);
    for d in 0..sp {
        let eff = dl[d] * (k[d] - 1) + 1;
        match auto_pad.as_str() {
            "SAME_UPPER" | "SAME_LOWER" => {
                out[d] = ishape[d].div_ceil(st[d]);
                let total = ((out[d] - 1) * st[d] + eff).saturating_sub(ishape[d]);
                pb[d] = if auto_pad == "SAME_UPPER" {
                    total / 2
                } else {
                    total - total / 2
                };
                pe[d] = total - pb[d];
            }
            _ => {
                if auto_pad == "NOTSET" {
                    pb[d] = pads[d];
                    pe[d] = pads[sp + d];
                }
                let padded = ishape[d] + pb[d] + pe[d];
                if padded < eff {
                    return Err(OracleError::Invalid(format!(
                        "{op} kernel larger than the padded input"
                    )));
                }
                let num = padded - eff;
                out[d] = if ceil {
                    num.div_ceil(st[d]) + 1
                } else {
                    num / st[d] + 1
                };
                // A window that would start in the end padding is dropped.
                if ceil && (out[d] - 1) * st[d] >= ishape[d] + pb[d] {
                    out[d] -= 1;
                }
            }
        }
    }
    Ok((k, st, dl, pb, pe, out))
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
    fn maxpool_by_hand_with_indices() {
        let x: Vec<f64> = vec![1.0, 5.0, 2.0, 3.0, 4.0, 0.0, 7.0, 8.0, 6.0];
        let mut n = node(
            "MaxPool",
            12,
            &[
                ("kernel_shape", Attr::Ints(vec![2, 2])),
                ("strides", Attr::Ints(vec![2, 2])),
                ("ceil_mode", Attr::Int(1)),
            ],
        );
        n.num_outputs = 2;
        let out = Reference.evaluate(&n, &[v(vec![1, 1, 3, 3], x)]).unwrap();
        assert_eq!(out[0].value.shape, vec![1, 1, 2, 2]);
        assert_eq!(out[0].value.data, vec![5.0, 2.0, 8.0, 6.0]);
        assert_eq!(out[1].value.data, vec![1.0, 2.0, 7.0, 8.0]);
    }

    #[test]
    fn avgpool_pads_by_hand() {
        // 1-D x = [1, 2, 3], kernel 2, pads [1, 1]: windows [p,1], [1,2], [2,3], [3,p]
        let x = v(vec![1, 1, 3], vec![1.0, 2.0, 3.0]);
        let n = node(
            "AveragePool",
            11,
            &[
                ("kernel_shape", Attr::Ints(vec![2])),
                ("pads", Attr::Ints(vec![1, 1])),
            ],
        );
        let out = Reference.evaluate(&n, std::slice::from_ref(&x)).unwrap();
        assert_all_close(&out[0].value.data, &[1.0, 1.5, 2.5, 3.0]);
        let n = node(
            "AveragePool",
            11,
            &[
                ("kernel_shape", Attr::Ints(vec![2])),
                ("pads", Attr::Ints(vec![1, 1])),
                ("count_include_pad", Attr::Int(1)),
            ],
        );
        let out = Reference.evaluate(&n, std::slice::from_ref(&x)).unwrap();
        assert_all_close(&out[0].value.data, &[0.5, 1.5, 2.5, 1.5]);
        let out = Reference
            .evaluate(&node("GlobalAveragePool", 1, &[]), &[x])
            .unwrap();
        assert_eq!(out[0].value.shape, vec![1, 1, 1]);
        assert_all_close(&out[0].value.data, &[2.0]);
    }

    #[test]
    fn avgpool_ceil_mode_by_hand() {
        // x = [1, 2, 3, 4], kernel 3, stride 2, pads [1, 1], ceil_mode: windows start at -1, 1, 3.
        // Padded extent is [-1, 5): window 3 covers {3, 4} of it (position 5 is beyond), one real value.
        let x = v(vec![1, 1, 4], vec![1.0, 2.0, 3.0, 4.0]);
        let base = [
            ("kernel_shape", Attr::Ints(vec![3])),
            ("strides", Attr::Ints(vec![2])),
            ("pads", Attr::Ints(vec![1, 1])),
            ("ceil_mode", Attr::Int(1)),
        ];
        let mut a = base.to_vec();
        a.push(("count_include_pad", Attr::Int(1)));
        let out = Reference
            .evaluate(&node("AveragePool", 19, &a), std::slice::from_ref(&x))
            .unwrap();
        assert_all_close(&out[0].value.data, &[3.0 / 3.0, 9.0 / 3.0, 4.0 / 2.0]);
        let out = Reference
            .evaluate(&node("AveragePool", 19, &base), &[x])
            .unwrap();
        assert_all_close(&out[0].value.data, &[1.5, 3.0, 4.0]);
        // A last window starting in the end padding is dropped: x = 0..5, k 2, s 2, pads [1, 1].
        let x = v(vec![1, 1, 5], vec![0.0, 1.0, 2.0, 3.0, 4.0]);
        let m = [
            ("kernel_shape", Attr::Ints(vec![2])),
            ("strides", Attr::Ints(vec![2])),
            ("pads", Attr::Ints(vec![1, 1])),
            ("ceil_mode", Attr::Int(1)),
        ];
        let out = Reference.evaluate(&node("MaxPool", 12, &m), &[x]).unwrap();
        assert_eq!(out[0].value.data, vec![0.0, 2.0, 4.0]);
    }

    #[test]
    fn maxpool_storage_order_column_major() {
        // 5x5 input 1..=25, kernel 2, stride 2: maxima at (1,1), (1,3), (3,1), (3,3); column-major
        // index h + w * 5 gives 6, 16, 8, 18.
        let x: Vec<f64> = (1..=25).map(|v| v as f64).collect();
        let mut n = node(
            "MaxPool",
            12,
            &[
                ("kernel_shape", Attr::Ints(vec![2, 2])),
                ("strides", Attr::Ints(vec![2, 2])),
                ("storage_order", Attr::Int(1)),
            ],
        );
        n.num_outputs = 2;
        let out = Reference.evaluate(&n, &[v(vec![1, 1, 5, 5], x)]).unwrap();
        assert_eq!(out[0].value.data, vec![7.0, 9.0, 17.0, 19.0]);
        assert_eq!(out[1].value.data, vec![6.0, 16.0, 8.0, 18.0]);
    }

    #[test]
    fn lppool_by_hand() {
        // p = 2 over windows of 2: sqrt(3^2 + 4^2) = 5, sqrt(4^2 + 0) = 4 (the kernel 2, stride 1, no pads)
        let out = Reference
            .evaluate(
                &node("LpPool", 18, &[("kernel_shape", Attr::Ints(vec![2]))]),
                &[v(vec![1, 1, 3], vec![3.0, -4.0, 0.0])],
            )
            .unwrap();
        assert_all_close(&out[0].value.data, &[5.0, 4.0]);
    }

    #[test]
    fn maxpool_random_dilated() {
        let mut rng = SplitMix64(55);
        let x = rng.vec(2 * 6 * 6);
        let n = node(
            "MaxPool",
            12,
            &[
                ("kernel_shape", Attr::Ints(vec![2, 2])),
                ("dilations", Attr::Ints(vec![2, 2])),
            ],
        );
        let out = Reference
            .evaluate(&n, &[v(vec![1, 2, 6, 6], x.clone())])
            .unwrap();
        assert_eq!(out[0].value.shape, vec![1, 2, 4, 4]);
        for c in 0..2 {
            for i in 0..4 {
                for j in 0..4 {
                    let m = [
                        x[c * 36 + i * 6 + j],
                        x[c * 36 + i * 6 + j + 2],
                        x[c * 36 + (i + 2) * 6 + j],
                        x[c * 36 + (i + 2) * 6 + j + 2],
                    ]
                    .iter()
                    .cloned()
                    .fold(f64::NEG_INFINITY, f64::max);
                    assert_eq!(out[0].value.data[c * 16 + i * 4 + j], m);
                }
            }
        }
    }
}
