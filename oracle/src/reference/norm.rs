//! BatchNormalization (inference), InstanceNormalization, LayerNormalization.
use super::parallel::rows;
use super::{broadcast_index, input, norm_axis, opt_input, output, unravel};
use crate::{DType, NodeSpec, OracleError, Output, Value};

pub(super) fn supports(node: &NodeSpec) -> Result<(), String> {
    let e = |x: OracleError| x.to_string();
    match node.op_type.as_str() {
        "BatchNormalization" => {
            if node.int("training_mode", 0).map_err(e)? != 0 || node.num_outputs > 1 {
                return Err(
                    "BatchNormalization training mode (extra outputs) is not covered".into(),
                );
            }
            if node.opset < 9 && node.int("spatial", 1).map_err(e)? == 0 {
                return Err("BatchNormalization spatial=0 is not covered".into());
            }
            Ok(())
        }
        "InstanceNormalization" => {
            if node.num_outputs > 1 {
                return Err("InstanceNormalization has one output".into());
            }
            Ok(())
        }
        "GroupNormalization" | "LRN" => {
            if node.num_outputs > 1 {
                return Err(format!("{} has one output", node.op_type));
            }
            Ok(())
        }
        "LayerNormalization" => {
            if node.num_outputs > 3 {
                return Err("LayerNormalization has at most 3 outputs".into());
            }
            Ok(())
        }
        op => Err(format!("{op} is not a normalization")),
    }
}

pub(super) fn evaluate(
    node: &NodeSpec,
    inputs: &[Option<Value>],
) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let eps = node.float("epsilon", 1e-5f32 as f64)?;
    match node.op_type.as_str() {
        "BatchNormalization" => {
            let (scale, bias, mean, var) = (
                input(node, inputs, 1)?,
                input(node, inputs, 2)?,
                input(node, inputs, 3)?,
                input(node, inputs, 4)?,
            );
            if x.shape.len() < 2 {
                return Err(OracleError::Invalid(
                    "BatchNormalization needs rank >= 2".into(),
                ));
            }
            let mut data = Vec::with_capacity(x.len());
            let mut mag = Vec::with_capacity(x.len());
            for (flat, &v) in x.data.iter().enumerate() {
                let c = unravel(flat, &x.shape)[1];
                // Y = (X - input_mean) / sqrt(input_var + epsilon) * scale + B
                let t = (v - mean.data[c]) / (var.data[c] + eps).sqrt() * scale.data[c];
                data.push(t + bias.data[c]);
                mag.push(t.abs() + bias.data[c].abs());
            }
            Ok(vec![output(x.dtype, x.shape.clone(), data, mag)?])
        }
        "InstanceNormalization" => {
            let (scale, bias) = (input(node, inputs, 1)?, input(node, inputs, 2)?);
            if x.shape.len() < 3 {
                return Err(OracleError::Invalid(
                    "InstanceNormalization needs rank >= 3".into(),
                ));
            }
            let (n, c) = (x.shape[0], x.shape[1]);
            let inner: usize = x.shape[2..].iter().product();
            let mut data = vec![0.0; x.len()];
            let mut mag = vec![0.0; x.len()];
            for ni in 0..n {
                for ci in 0..c {
                    let base = (ni * c + ci) * inner;
                    let sl = &x.data[base..base + inner];
                    let mean = sl.iter().sum::<f64>() / inner as f64;
                    let var =
                        sl.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / inner as f64;
                    for j in 0..inner {
                        let t = scale.data[ci] * (sl[j] - mean) / (var + eps).sqrt();
                        data[base + j] = t + bias.data[ci];
                        mag[base + j] = t.abs() + bias.data[ci].abs();
                    }
                }
            }
            Ok(vec![output(x.dtype, x.shape.clone(), data, mag)?])
        }
        "GroupNormalization" => {
            let (scale, bias) = (input(node, inputs, 1)?, input(node, inputs, 2)?);
            let g = node.int("num_groups", 0)?;
            if x.shape.len() < 2 || g <= 0 || x.shape[1] % g as usize != 0 {
                return Err(OracleError::Invalid(format!(
                    "GroupNormalization num_groups {g} with X {:?}",
                    x.shape
                )));
            }
            let g = g as usize;
            let (n, c) = (x.shape[0], x.shape[1]);
            let cpg = c / g;
            let sp: usize = x.shape[2..].iter().product();
            // Opset 18 has one scale/bias per group; opset 21 one per channel.
            let per_channel = node.opset >= 21 || scale.len() == c && c != g;
            let mut data = vec![0.0; x.len()];
            let mut mag = vec![0.0; x.len()];
            for ni in 0..n {
                for gi in 0..g {
                    let base = (ni * c + gi * cpg) * sp;
                    let len = cpg * sp;
                    let sl = &x.data[base..base + len];
                    let mean = sl.iter().sum::<f64>() / len as f64;
                    let var = sl.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / len as f64;
                    for j in 0..len {
                        let ch = gi * cpg + j / sp;
                        let si = if per_channel { ch } else { gi };
                        let t = scale.data[si] * (sl[j] - mean) / (var + eps).sqrt();
                        data[base + j] = t + bias.data[si];
                        mag[base + j] = t.abs() + bias.data[si].abs();
                    }
                }
            }
            Ok(vec![output(x.dtype, x.shape.clone(), data, mag)?])
        }
        "LRN" => {
            let size = node.int("size", 0)?;
            if size <= 0 || x.shape.len() < 2 {
                return Err(OracleError::Invalid(format!(
                    "LRN size {size} with X {:?}",
                    x.shape
                )));
            }
            let alpha = node.float("alpha", 1e-4f32 as f64)?;
            let beta = node.float("beta", 0.75)?;
            let bias = node.float("bias", 1.0)?;
            let c = x.shape[1] as i64;
            let sp: usize = x.shape[2..].iter().product();
            let lo_off = (size - 1) / 2; // floor((size - 1) / 2)
            let hi_off = size / 2; // ceil((size - 1) / 2)
            let mut data = vec![0.0; x.len()];
            for (f, y) in data.iter_mut().enumerate() {
                let s = f % sp;
                let ch = ((f / sp) as i64) % c;
                let n = f / sp / c as usize;
                let mut sq = 0.0;
                for i in (ch - lo_off).max(0)..=(ch + hi_off).min(c - 1) {
                    let v = x.data[(n * c as usize + i as usize) * sp + s];
                    sq += v * v;
                }
                *y = x.data[f] / (bias + alpha / size as f64 * sq).powf(beta);
            }
            let mag = data.iter().map(|v| v.abs()).collect();
            Ok(vec![output(x.dtype, x.shape.clone(), data, mag)?])
        }
        _ => layer_norm(node, inputs, x, eps),
    }
}

fn layer_norm(
    node: &NodeSpec,
    inputs: &[Option<Value>],
    x: &Value,
    eps: f64,
) -> Result<Vec<Output>, OracleError> {
    let scale = input(node, inputs, 1)?;
    let bias = opt_input(inputs, 2);
    let rank = x.shape.len();
    let axis = norm_axis(node.int("axis", -1)?, rank, "LayerNormalization")?;
    let outer: usize = x.shape[..axis].iter().product();
    let norm_shape = &x.shape[axis..];
    let inner: usize = norm_shape.iter().product();
    let threads = crate::threads();
    // The statistics of each normalized row, then the rows, each pass split over threads.
    let mut means = vec![0.0; outer];
    let mut inv_stds = vec![0.0; outer];
    rows(
        threads,
        &mut means,
        &mut inv_stds,
        1,
        inner,
        |first, ms, ss| {
            for (o, (m, s)) in (first..).zip(ms.iter_mut().zip(ss)) {
                let sl = &x.data[o * inner..(o + 1) * inner];
                let mean = sl.iter().sum::<f64>() / inner as f64;
                let var = sl.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / inner as f64;
                *m = mean;
                *s = 1.0 / (var + eps).sqrt();
            }
        },
    );
    let mut data = vec![0.0; x.len()];
    let mut mag = vec![0.0; x.len()];
    let row = inner.max(1);
    rows(threads, &mut data, &mut mag, row, inner, |first, d, g| {
        let out_rows = d.chunks_mut(inner).zip(g.chunks_mut(inner));
        for (o, (d, g)) in (first..).zip(out_rows) {
            let sl = &x.data[o * inner..(o + 1) * inner];
            let (mean, inv_std) = (means[o], inv_stds[o]);
            for j in 0..inner {
                let idx = unravel(j, norm_shape);
                let s = scale.data[broadcast_index(&idx, &scale.shape)];
                let t = (sl[j] - mean) * inv_std * s;
                let b = bias
                    .map(|b| b.data[broadcast_index(&idx, &b.shape)])
                    .unwrap_or(0.0);
                d[j] = t + b;
                g[j] = t.abs() + b.abs();
            }
        }
    });
    let mut outs = vec![output(x.dtype, x.shape.clone(), data, mag)?];
    let mut stat_shape: Vec<usize> = x.shape[..axis].to_vec();
    stat_shape.resize(rank, 1);
    // "stash_type: Type of Mean and InvStdDev" (type constraint U: float or bfloat16; default 1).
    let stash = match node.int("stash_type", 1)? {
        1 => DType::F32,
        16 => DType::BF16,
        t => {
            return Err(OracleError::Invalid(format!(
                "stash_type {t}: Mean and InvStdDev are float (1) or bfloat16 (16)"
            )));
        }
    };
    if node.num_outputs >= 2 {
        let m = means.iter().map(|v| v.abs()).collect();
        outs.push(output(stash, stat_shape.clone(), means, m)?);
    }
    if node.num_outputs >= 3 {
        let m = inv_stds.iter().map(|v| v.abs()).collect();
        outs.push(output(stash, stat_shape, inv_stds, m)?);
    }
    Ok(outs)
}

#[cfg(test)]
mod tests {
    use super::super::Reference;
    use super::super::testutil::*;
    use crate::{DType, Oracle, Value};

    fn v(shape: Vec<usize>, data: Vec<f64>) -> Option<Value> {
        Some(Value::new(DType::F32, shape, data).unwrap())
    }

    #[test]
    fn batchnorm_by_hand() {
        // channel 0: mean 1, var 4-eps -> (x-1)/2*3+1 ; channel 1: mean 0, var 1-eps -> x*1+0
        let eps = 1e-5f32 as f64; // the default epsilon, an f32 attribute
        let out = Reference
            .evaluate(
                &node("BatchNormalization", 15, &[]),
                &[
                    v(vec![1, 2, 2], vec![3.0, 5.0, -1.0, 2.0]),
                    v(vec![2], vec![3.0, 1.0]),
                    v(vec![2], vec![1.0, 0.0]),
                    v(vec![2], vec![1.0, 0.0]),
                    v(vec![2], vec![4.0 - eps, 1.0 - eps]),
                ],
            )
            .unwrap();
        assert_all_close(&out[0].value.data, &[4.0, 7.0, -1.0, 2.0]);
    }

    #[test]
    fn layernorm_and_instancenorm_by_hand() {
        // Row [1, 3]: mean 2, var 1 -> [-1, 1]/sqrt(1+eps)
        let k = 1.0 / (1.0f64 + 1e-5f32 as f64).sqrt();
        let mut n = node("LayerNormalization", 17, &[]);
        n.num_outputs = 3;
        let out = Reference
            .evaluate(
                &n,
                &[
                    v(vec![2, 2], vec![1.0, 3.0, 0.0, 0.0]),
                    v(vec![2], vec![2.0, 1.0]),
                    v(vec![2], vec![0.5, 0.5]),
                ],
            )
            .unwrap();
        assert_all_close(&out[0].value.data, &[-2.0 * k + 0.5, k + 0.5, 0.5, 0.5]);
        assert_eq!(out[1].value.shape, vec![2, 1]);
        assert_all_close(&out[1].value.data, &[2.0, 0.0]);
        assert_all_close(&out[2].value.data, &[k, 1.0 / (1e-5f32 as f64).sqrt()]);
        let out = Reference
            .evaluate(
                &node("InstanceNormalization", 6, &[]),
                &[
                    v(vec![1, 1, 2], vec![1.0, 3.0]),
                    v(vec![1], vec![2.0]),
                    v(vec![1], vec![1.0]),
                ],
            )
            .unwrap();
        assert_all_close(&out[0].value.data, &[-2.0 * k + 1.0, 2.0 * k + 1.0]);
    }

    #[test]
    fn groupnorm_lrn_by_hand() {
        // 2 channels, 1 group over [1, 3] and [5, 7]: mean 4, var (9 + 1 + 1 + 9) / 4 = 5.
        let k = 1.0 / (5.0f64 + 1e-5f32 as f64).sqrt();
        let x = v(vec![1, 2, 2], vec![1.0, 3.0, 5.0, 7.0]);
        let out = Reference
            .evaluate(
                &node(
                    "GroupNormalization",
                    21,
                    &[("num_groups", crate::Attr::Int(1))],
                ),
                &[
                    x.clone(),
                    v(vec![2], vec![1.0, 2.0]),
                    v(vec![2], vec![0.0, 1.0]),
                ],
            )
            .unwrap();
        assert_all_close(
            &out[0].value.data,
            &[-3.0 * k, -k, 2.0 * k + 1.0, 6.0 * k + 1.0],
        );
        // LRN size 2: channel 0 sums channels {0, 1}, channel 1 sums {1}.
        let out = Reference
            .evaluate(
                &node(
                    "LRN",
                    13,
                    &[
                        ("size", crate::Attr::Int(2)),
                        ("alpha", crate::Attr::Float(2.0)),
                        ("beta", crate::Attr::Float(1.0)),
                    ],
                ),
                &[x],
            )
            .unwrap();
        // y = x / (1 + 2/2 * sq)
        assert_all_close(
            &out[0].value.data,
            &[1.0 / 27.0, 3.0 / 59.0, 5.0 / 26.0, 7.0 / 50.0],
        );
    }

    #[test]
    fn layernorm_random_axis() {
        let mut rng = SplitMix64(44);
        let x = rng.vec(2 * 3 * 4);
        let s = rng.vec(3 * 4);
        let out = Reference
            .evaluate(
                &node("LayerNormalization", 17, &[("axis", crate::Attr::Int(1))]),
                &[v(vec![2, 3, 4], x.clone()), v(vec![3, 4], s.clone())],
            )
            .unwrap();
        for o in 0..2 {
            let row = &x[o * 12..o * 12 + 12];
            let mean: f64 = row.iter().sum::<f64>() / 12.0;
            let var: f64 = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 12.0;
            for j in 0..12 {
                let want = (row[j] - mean) / (var + 1e-5f32 as f64).sqrt() * s[j];
                assert!(close(out[0].value.data[o * 12 + j], want));
            }
        }
    }
}
