//! Pooling by enumerating every window position with an explicit padding mask.
use super::conv::{coord_table, geometry, multi_indices, ones_attr};
use super::*;

pub(super) const OPS: &[&str] = &[
    "MaxPool",
    "AveragePool",
    "LpPool",
    "GlobalAveragePool",
    "GlobalMaxPool",
];

pub(super) fn check(node: &NodeSpec) -> Result<(), String> {
    let ap = node
        .string("auto_pad", "NOTSET")
        .map_err(|e| e.to_string())?;
    if !matches!(
        ap.as_str(),
        "NOTSET" | "SAME_UPPER" | "SAME_LOWER" | "VALID"
    ) {
        return Err(format!("auto_pad '{ap}' is not covered"));
    }
    if node.num_outputs > 1 && node.op_type != "MaxPool" {
        return Err(format!("{} has one output", node.op_type));
    }
    Ok(())
}

pub(super) fn eval(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    if x.shape.len() < 3 {
        return invalid(format!(
            "{} needs rank >= 3, got {:?}",
            node.op_type, x.shape
        ));
    }
    let op = node.op_type.as_str();
    let sp = x.shape.len() - 2;
    let in_sp: Vec<usize> = x.shape[2..].to_vec();
    let global = op.starts_with("Global");
    let (kernel, strides, dil) = if global {
        (in_sp.clone(), vec![1; sp], vec![1; sp])
    } else {
        let Some(k) = node.ints("kernel_shape")? else {
            return invalid(format!("{op} needs kernel_shape"));
        };
        if k.len() != sp || k.iter().any(|&v| v < 1) {
            return invalid(format!("kernel_shape {k:?} for {sp} spatial dims"));
        }
        (
            k.iter().map(|&v| v as usize).collect::<Vec<_>>(),
            ones_attr(node, "strides", sp)?,
            ones_attr(node, "dilations", sp)?,
        )
    };
    let geo = if global {
        super::conv::Geometry {
            pad_begin: vec![0; sp],
            pad_end: vec![0; sp],
            out: vec![1; sp],
        }
    } else {
        geometry(
            node,
            &in_sp,
            &kernel,
            &strides,
            &dil,
            node.int("ceil_mode", 0)? != 0,
        )?
    };
    let tables: Vec<Vec<Option<usize>>> = (0..sp)
        .map(|d| {
            coord_table(
                in_sp[d],
                kernel[d],
                geo.out[d],
                strides[d],
                dil[d],
                geo.pad_begin[d],
            )
        })
        .collect();
    let kpos = multi_indices(&kernel);
    let opos = multi_indices(&geo.out);
    let plane: usize = in_sp.iter().product();
    let row_st = super::strides(&in_sp);
    // Column-major spatial strides for storage_order = 1.
    let mut col_st = vec![1usize; sp];
    for d in 1..sp {
        col_st[d] = col_st[d - 1] * in_sp[d - 1];
    }
    let col_major = node.int("storage_order", 0)? != 0;
    let count_pad = node.int("count_include_pad", 0)? != 0;
    let p = node.float("p", 2.0)?;
    let nc = x.shape[0] * x.shape[1];
    let mut data = Vec::with_capacity(nc * opos.len());
    let mut mag = Vec::with_capacity(nc * opos.len());
    let mut idx = Vec::with_capacity(nc * opos.len());
    for plane_i in 0..nc {
        let base = plane_i * plane;
        for oidx in &opos {
            // Gather (value, flat index) of the window positions that fall inside the input; count the
            // positions inside the padded extent separately for count_include_pad.
            let mut vals: Vec<(f64, usize)> = Vec::with_capacity(kpos.len());
            let mut padded_count = 0usize;
            for kidx in &kpos {
                let mut inside = true;
                let mut in_padded = true;
                let mut off = 0;
                let mut coff = 0;
                for d in 0..sp {
                    match tables[d][kidx[d] * geo.out[d] + oidx[d]] {
                        Some(i) => {
                            off += i * row_st[d];
                            coff += i * col_st[d];
                        }
                        None => {
                            inside = false;
                            let i =
                                (oidx[d] * strides[d] + kidx[d] * dil[d]) as i64 - geo.pad_begin[d];
                            if i >= in_sp[d] as i64 + geo.pad_end[d] {
                                in_padded = false;
                            }
                        }
                    }
                }
                if in_padded {
                    padded_count += 1;
                }
                if inside {
                    vals.push((
                        x.data[base + off],
                        base + if col_major { coff } else { off },
                    ));
                }
            }
            let (r, m, ix) = match op {
                "MaxPool" | "GlobalMaxPool" => {
                    // A NaN in the window makes the max NaN (numpy's max, as ONNX's GlobalMaxPool and
                    // ReduceMax evaluate it), pointing at the first NaN; otherwise the first largest.
                    // A window wholly in the padding has no value: -inf (the type's lowest for
                    // integers), ReduceMax's rule for the max of nothing, and no index (-1).
                    let best = match vals.iter().find(|v| v.0.is_nan()) {
                        Some(&nan) => Some(nan),
                        None => {
                            vals.iter()
                                .fold(None, |b: Option<(f64, usize)>, &(v, i)| match b {
                                    Some(b) if b.0 >= v => Some(b),
                                    _ => Some((v, i)),
                                })
                        }
                    };
                    let (v, i) = match best {
                        Some((v, i)) => (v, i as i64),
                        None => (lowest(x.dtype), -1),
                    };
                    (v, v.abs(), i)
                }
                "AveragePool" | "GlobalAveragePool" => {
                    let xs: Vec<f64> = vals.iter().map(|v| v.0).collect();
                    let abs: Vec<f64> = vals.iter().map(|v| v.0.abs()).collect();
                    let n = if count_pad && !global {
                        padded_count
                    } else {
                        vals.len()
                    } as f64;
                    (pairwise_sum(&xs) / n, pairwise_sum(&abs) / n, 0)
                }
                _ => {
                    let pw: Vec<f64> = vals.iter().map(|v| v.0.abs().powf(p)).collect();
                    let r = pairwise_sum(&pw).powf(1.0 / p);
                    (r, r, 0)
                }
            };
            data.push(r);
            mag.push(m);
            idx.push(ix as f64);
        }
    }
    let mut shape = x.shape[..2].to_vec();
    shape.extend(&geo.out);
    let mut outs = vec![make_output(x.dtype, shape.clone(), data, mag)?];
    if op == "MaxPool" && node.num_outputs > 1 {
        let n = idx.len();
        outs.push(make_output(DType::I64, shape, idx, vec![0.0; n])?);
    }
    Ok(outs)
}

/// The max of no values: -inf for float types, the smallest value of an integer type.
fn lowest(dtype: DType) -> f64 {
    match dtype {
        DType::I8 => i8::MIN as f64,
        DType::I16 => i16::MIN as f64,
        DType::I32 => i32::MIN as f64,
        DType::I64 => i64::MIN as f64,
        DType::U8 | DType::U16 | DType::U32 | DType::U64 | DType::Bool => 0.0,
        _ => f64::NEG_INFINITY,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;
    use crate::Attr;

    #[test]
    fn maxpool_hand_checked_with_indices() {
        // 1x1x3x3, kernel 2, stride 1, pads 1 at the end only.
        let x = vec![1.0, 9.0, 2.0, 4.0, 5.0, 6.0, 7.0, 3.0, 8.0];
        let mut nd = node(
            "MaxPool",
            12,
            vec![
                ("kernel_shape", Attr::Ints(vec![2, 2])),
                ("pads", Attr::Ints(vec![0, 0, 1, 1])),
            ],
        );
        nd.num_outputs = 2;
        let out = eval(&nd, &[f32v(&[1, 1, 3, 3], x.clone())]).unwrap();
        assert_eq!(out[0].value.shape, vec![1, 1, 3, 3]);
        assert_eq!(
            out[0].value.data,
            vec![9.0, 9.0, 6.0, 7.0, 8.0, 8.0, 7.0, 8.0, 8.0]
        );
        assert_eq!(
            out[1].value.data,
            vec![1.0, 1.0, 5.0, 6.0, 8.0, 8.0, 6.0, 8.0, 8.0]
        );
        nd.attrs.insert("storage_order".into(), Attr::Int(1));
        let cm = eval(&nd, &[f32v(&[1, 1, 3, 3], x)]).unwrap();
        // index (h, w) -> w * 3 + h
        assert_eq!(
            cm[1].value.data,
            vec![3.0, 3.0, 7.0, 2.0, 8.0, 8.0, 2.0, 8.0, 8.0]
        );
    }

    #[test]
    fn avgpool_pads_and_ceil() {
        let x: Vec<f64> = (1..=16).map(|v| v as f64).collect();
        let base = vec![
            ("kernel_shape", Attr::Ints(vec![3, 3])),
            ("strides", Attr::Ints(vec![2, 2])),
            ("pads", Attr::Ints(vec![1, 1, 1, 1])),
        ];
        let ex = eval(
            &node("AveragePool", 11, base.clone()),
            &[f32v(&[1, 1, 4, 4], x.clone())],
        )
        .unwrap();
        assert_eq!(ex[0].value.shape, vec![1, 1, 2, 2]);
        // top-left window covers rows/cols -1..=1 -> valid (0,0),(0,1),(1,0),(1,1) = 1,2,5,6
        assert_eq!(ex[0].value.data[0], 14.0 / 4.0);
        let mut inc = base.clone();
        inc.push(("count_include_pad", Attr::Int(1)));
        let ic = eval(
            &node("AveragePool", 11, inc),
            &[f32v(&[1, 1, 4, 4], x.clone())],
        )
        .unwrap();
        assert_eq!(ic[0].value.data[0], 14.0 / 9.0);
        // ceil_mode: 5x5, kernel 2, stride 2 -> 3x3, last window has one row/col.
        let x5: Vec<f64> = (0..25).map(|v| v as f64).collect();
        let c = eval(
            &node(
                "AveragePool",
                11,
                vec![
                    ("kernel_shape", Attr::Ints(vec![2, 2])),
                    ("strides", Attr::Ints(vec![2, 2])),
                    ("ceil_mode", Attr::Int(1)),
                ],
            ),
            &[f32v(&[1, 1, 5, 5], x5)],
        )
        .unwrap();
        assert_eq!(c[0].value.shape, vec![1, 1, 3, 3]);
        assert_eq!(c[0].value.data[2], (4.0 + 9.0) / 2.0);
        assert_eq!(c[0].value.data[8], 24.0);
    }

    #[test]
    fn global_and_lp_random() {
        let mut r = SplitMix64(13);
        let x = r.values(2 * 3 * 4 * 5);
        let ga = eval(
            &node("GlobalAveragePool", 1, vec![]),
            &[f32v(&[2, 3, 4, 5], x.clone())],
        )
        .unwrap();
        let gm = eval(
            &node("GlobalMaxPool", 1, vec![]),
            &[f32v(&[2, 3, 4, 5], x.clone())],
        )
        .unwrap();
        assert_eq!(ga[0].value.shape, vec![2, 3, 1, 1]);
        for pl in 0..6 {
            let s = &x[pl * 20..(pl + 1) * 20];
            assert!((ga[0].value.data[pl] - s.iter().sum::<f64>() / 20.0).abs() < 1e-15);
            assert_eq!(
                gm[0].value.data[pl],
                s.iter().cloned().fold(f64::NEG_INFINITY, f64::max)
            );
        }
        let lp = eval(
            &node(
                "LpPool",
                18,
                vec![
                    ("kernel_shape", Attr::Ints(vec![4, 5])),
                    ("p", Attr::Int(3)),
                ],
            ),
            &[f32v(&[2, 3, 4, 5], x.clone())],
        )
        .unwrap();
        for pl in 0..6 {
            let want = x[pl * 20..(pl + 1) * 20]
                .iter()
                .map(|v| v.abs().powi(3))
                .sum::<f64>()
                .cbrt();
            assert!((lp[0].value.data[pl] - want).abs() < 1e-14);
        }
    }
}
