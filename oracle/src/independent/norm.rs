//! Normalizations: BatchNormalization (inference), LayerNormalization, InstanceNormalization,
//! GroupNormalization, LRN. Statistics are two-pass: a pairwise mean, then the pairwise mean of squared
//! deviations (not E[x^2] - E[x]^2).
use super::parallel::deal_rows;
use super::*;

pub(super) const OPS: &[&str] = &[
    "BatchNormalization",
    "LayerNormalization",
    "InstanceNormalization",
    "GroupNormalization",
    "LRN",
];

pub(super) fn check(node: &NodeSpec) -> Result<(), String> {
    let e = |r: Result<i64, OracleError>| r.map_err(|e| e.to_string());
    match node.op_type.as_str() {
        "BatchNormalization" => {
            if e(node.int("training_mode", 0))? != 0 || node.num_outputs > 1 {
                return Err(
                    "BatchNormalization training mode (extra outputs) is not covered".into(),
                );
            }
            if node.opset < 9 && e(node.int("spatial", 1))? == 0 {
                return Err("BatchNormalization spatial=0 is not covered".into());
            }
        }
        "InstanceNormalization" | "LRN" | "GroupNormalization" if node.num_outputs > 1 => {
            return Err(format!("{} has one output", node.op_type));
        }
        _ => {}
    }
    Ok(())
}

pub(super) fn eval(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    match node.op_type.as_str() {
        "BatchNormalization" => batch_norm(node, inputs),
        "LayerNormalization" => layer_norm(node, inputs),
        "InstanceNormalization" | "GroupNormalization" => group_norm(node, inputs),
        "LRN" => lrn(node, inputs),
        other => unsupported(format!("{other} is not a normalization")),
    }
}

/// (mean, variance) two-pass with pairwise sums.
fn moments(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = pairwise_sum(xs) / n;
    let dev: Vec<f64> = xs.iter().map(|x| (x - mean) * (x - mean)).collect();
    (mean, pairwise_sum(&dev) / n)
}

fn per_channel(v: &Value, c: usize, what: &str) -> Result<(), OracleError> {
    if v.data.len() != c {
        return invalid(format!(
            "{what} must have {c} elements, got shape {:?}",
            v.shape
        ));
    }
    Ok(())
}

fn batch_norm(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let scale = input(node, inputs, 1)?;
    let bias = input(node, inputs, 2)?;
    let mean = input(node, inputs, 3)?;
    let var = input(node, inputs, 4)?;
    let eps = node.float("epsilon", 1e-5f32 as f64)?;
    if x.shape.len() < 2 {
        return invalid("BatchNormalization input rank must be >= 2");
    }
    let c = x.shape[1];
    for (v, w) in [(scale, "scale"), (bias, "B"), (mean, "mean"), (var, "var")] {
        per_channel(v, c, w)?;
    }
    let inner: usize = x.shape[2..].iter().product();
    let mut data = Vec::with_capacity(x.len());
    let mut mag = Vec::with_capacity(x.len());
    for (i, &v) in x.data.iter().enumerate() {
        let ch = (i / inner) % c;
        let inv = 1.0 / (var.data[ch] + eps).sqrt();
        let t = scale.data[ch] * inv;
        data.push(t * (v - mean.data[ch]) + bias.data[ch]);
        mag.push(t.abs() * (v.abs() + mean.data[ch].abs()) + bias.data[ch].abs());
    }
    Ok(vec![make_output(x.dtype, x.shape.clone(), data, mag)?])
}

fn layer_norm(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let scale = input(node, inputs, 1)?;
    let bias = opt_input(inputs, 2);
    let eps = node.float("epsilon", 1e-5f32 as f64)?;
    let rank = x.shape.len();
    let axis = norm_axis(node.int("axis", -1)?, rank)?;
    let outer: usize = x.shape[..axis].iter().product();
    let n: usize = x.shape[axis..].iter().product();
    let smap = index_map_checked(&scale.shape, &x.shape)?;
    let bmap = match bias {
        Some(b) => Some(index_map_checked(&b.shape, &x.shape)?),
        None => None,
    };
    let threads = crate::threads();
    // Each group's moments, then the normalized groups; both dealt out over threads.
    let mut means = vec![0.0; outer];
    let mut invs = vec![0.0; outer];
    deal_rows(threads, &mut means, &mut invs, 1, 2 * n, |first, ms, is| {
        for (o, (mu, inv)) in (first..).zip(ms.iter_mut().zip(is)) {
            let var;
            (*mu, var) = moments(&x.data[o * n..(o + 1) * n]);
            *inv = 1.0 / (var + eps).sqrt();
        }
    });
    let mut data = vec![0.0; x.len()];
    let mut mag = vec![0.0; x.len()];
    deal_rows(threads, &mut data, &mut mag, n.max(1), n, |first, d, m| {
        for (o, (dr, mr)) in (first..).zip(d.chunks_mut(n).zip(m.chunks_mut(n))) {
            let g = &x.data[o * n..(o + 1) * n];
            let (mu, inv) = (means[o], invs[o]);
            for j in 0..n {
                let i = o * n + j;
                let s = scale.data[smap[i]];
                let b = match (bias, &bmap) {
                    (Some(bv), Some(bm)) => bv.data[bm[i]],
                    _ => 0.0,
                };
                let y = (g[j] - mu) * inv * s;
                dr[j] = y + b;
                mr[j] = y.abs() + b.abs();
            }
        }
    });
    let stat_shape: Vec<usize> = (0..rank)
        .map(|d| if d < axis { x.shape[d] } else { 1 })
        .collect();
    let mut outs = vec![make_output(x.dtype, x.shape.clone(), data, mag)?];
    let stash = match node.int("stash_type", 1)? {
        1 => DType::F32,
        16 => DType::BF16,
        other => {
            return Err(OracleError::Invalid(format!(
                "LayerNormalization stash_type {other} (Mean and InvStdDev are float or bfloat16)"
            )));
        }
    };
    if node.num_outputs > 1 {
        let m = means.iter().map(|v| v.abs()).collect();
        outs.push(make_output(stash, stat_shape.clone(), means, m)?);
    }
    if node.num_outputs > 2 {
        let m = invs.iter().map(|v| v.abs()).collect();
        outs.push(make_output(stash, stat_shape, invs, m)?);
    }
    Ok(outs)
}

/// Index map for a unidirectional broadcast of `from` to `to`.
fn index_map_checked(from: &[usize], to: &[usize]) -> Result<Vec<usize>, OracleError> {
    if from.len() > to.len() || broadcast_shape(&[from, to])? != to {
        return invalid(format!("shape {from:?} does not broadcast to {to:?}"));
    }
    Ok(index_map(from, to))
}

/// InstanceNormalization is GroupNormalization with one channel per group.
fn group_norm(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let scale = input(node, inputs, 1)?;
    let bias = input(node, inputs, 2)?;
    let eps = node.float("epsilon", 1e-5f32 as f64)?;
    if x.shape.len() < 2 {
        return invalid(format!("{} input rank must be >= 2", node.op_type));
    }
    let (nb, c) = (x.shape[0], x.shape[1]);
    let instance = node.op_type == "InstanceNormalization";
    let groups = if instance {
        c
    } else {
        node.int("num_groups", -1)?.max(0) as usize
    };
    if groups == 0 || c % groups != 0 {
        return invalid(format!("num_groups {groups} does not divide C={c}"));
    }
    // Opset 18 GroupNormalization: scale/bias per group; opset 21: per channel.
    let per_group = !instance && node.opset < 21;
    let plen = if per_group { groups } else { c };
    per_channel(scale, plen, "scale")?;
    per_channel(bias, plen, "bias")?;
    let inner: usize = x.shape[2..].iter().product();
    let cpg = c / groups;
    let glen = cpg * inner;
    let mut data = vec![0.0; x.len()];
    let mut mag = vec![0.0; x.len()];
    for n in 0..nb {
        for g in 0..groups {
            let start = (n * c + g * cpg) * inner;
            let xs = &x.data[start..start + glen];
            let (mu, var) = moments(xs);
            let inv = 1.0 / (var + eps).sqrt();
            for (j, &v) in xs.iter().enumerate() {
                let ch = g * cpg + j / inner;
                let p = if per_group { g } else { ch };
                let y = (v - mu) * inv * scale.data[p];
                data[start + j] = y + bias.data[p];
                mag[start + j] = y.abs() + bias.data[p].abs();
            }
        }
    }
    Ok(vec![make_output(x.dtype, x.shape.clone(), data, mag)?])
}

fn lrn(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let size = node.int("size", 0)?;
    if size < 1 {
        return invalid("LRN needs size >= 1");
    }
    let alpha = node.float("alpha", 1e-4f32 as f64)?;
    let beta = node.float("beta", 0.75)?;
    let bias = node.float("bias", 1.0)?;
    if x.shape.len() < 2 {
        return invalid("LRN input rank must be >= 2");
    }
    let c = x.shape[1] as i64;
    let inner: usize = x.shape[2..].iter().product();
    let lo = (size - 1) / 2;
    let hi = (size - 1) - lo; // ceil((size - 1) / 2)
    let mut data = Vec::with_capacity(x.len());
    for (i, &v) in x.data.iter().enumerate() {
        let ch = ((i / inner) as i64) % c;
        let base = i - (ch as usize) * inner;
        let sq: Vec<f64> = ((ch - lo).max(0)..=(ch + hi).min(c - 1))
            .map(|k| x.data[base + k as usize * inner].powi(2))
            .collect();
        data.push(v / (bias + alpha / size as f64 * pairwise_sum(&sq)).powf(beta));
    }
    let mag = data.iter().map(|v| v.abs()).collect();
    Ok(vec![make_output(x.dtype, x.shape.clone(), data, mag)?])
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;
    use crate::Attr;

    #[test]
    fn batch_norm_random() {
        let mut r = SplitMix64(31);
        let x = r.values(2 * 3 * 4);
        let s = r.values(3);
        let b = r.values(3);
        let m = r.values(3);
        let v: Vec<f64> = r.values(3).iter().map(|v| v.abs() + 0.1).collect();
        let out = eval(
            &node("BatchNormalization", 15, vec![]),
            &[
                f32v(&[2, 3, 4], x.clone()),
                f32v(&[3], s.clone()),
                f32v(&[3], b.clone()),
                f32v(&[3], m.clone()),
                f32v(&[3], v.clone()),
            ],
        )
        .unwrap();
        for i in 0..24 {
            let c = (i / 4) % 3;
            let want = (x[i] - m[c]) / (v[c] + 1e-5f32 as f64).sqrt() * s[c] + b[c];
            assert!((out[0].value.data[i] - want).abs() < 1e-14);
        }
    }

    #[test]
    fn layer_norm_random_with_stats() {
        let mut r = SplitMix64(17);
        let x = r.values(2 * 3 * 4);
        let s = r.values(12);
        let b = r.values(12);
        let mut nd = node("LayerNormalization", 17, vec![("axis", Attr::Int(1))]);
        nd.num_outputs = 3;
        let out = eval(
            &nd,
            &[
                f32v(&[2, 3, 4], x.clone()),
                f32v(&[3, 4], s.clone()),
                f32v(&[3, 4], b.clone()),
            ],
        )
        .unwrap();
        for o in 0..2 {
            let g = &x[o * 12..(o + 1) * 12];
            let mean: f64 = g.iter().sum::<f64>() / 12.0;
            let var: f64 = g.iter().map(|v| v * v).sum::<f64>() / 12.0 - mean * mean;
            let inv = 1.0 / (var + 1e-5f32 as f64).sqrt();
            for j in 0..12 {
                let want = (g[j] - mean) * inv * s[j] + b[j];
                assert!((out[0].value.data[o * 12 + j] - want).abs() < 1e-12);
            }
            assert!((out[1].value.data[o] - mean).abs() < 1e-14);
            assert!((out[2].value.data[o] - inv).abs() < 1e-10);
        }
        assert_eq!(out[1].value.shape, vec![2, 1, 1]);
    }

    #[test]
    fn instance_group_lrn() {
        let x = vec![1.0, 2.0, 3.0, 4.0, -1.0, 1.0, -1.0, 1.0];
        let inst = eval(
            &node(
                "InstanceNormalization",
                6,
                vec![("epsilon", Attr::Float(0.0))],
            ),
            &[
                f32v(&[1, 2, 4], x.clone()),
                f32v(&[2], vec![1.0, 2.0]),
                f32v(&[2], vec![0.0, 1.0]),
            ],
        )
        .unwrap();
        let k = 1.0 / 1.25f64.sqrt();
        let want = [-1.5 * k, -0.5 * k, 0.5 * k, 1.5 * k, -1.0, 3.0, -1.0, 3.0];
        assert!(close(&inst[0].value.data, &want, 1e-14));
        // One group over both channels equals layer norm over [C, L].
        let gn = eval(
            &node(
                "GroupNormalization",
                21,
                vec![("num_groups", Attr::Int(1)), ("epsilon", Attr::Float(0.0))],
            ),
            &[
                f32v(&[1, 2, 4], x.clone()),
                f32v(&[2], vec![1.0, 1.0]),
                f32v(&[2], vec![0.0, 0.0]),
            ],
        )
        .unwrap();
        let mean = 10.0 / 8.0;
        let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / 8.0;
        let want: Vec<f64> = x.iter().map(|v| (v - mean) / var.sqrt()).collect();
        assert!(close(&gn[0].value.data, &want, 1e-14));
        // LRN size 3 over 3 channels of one pixel.
        let l = eval(
            &node(
                "LRN",
                13,
                vec![
                    ("size", Attr::Int(3)),
                    ("alpha", Attr::Float(0.3)),
                    ("beta", Attr::Float(0.5)),
                    ("bias", Attr::Float(2.0)),
                ],
            ),
            &[f32v(&[1, 3, 1], vec![1.0, 2.0, 3.0])],
        )
        .unwrap();
        let want = [
            1.0 / (2.0 + 0.1 * 5.0f64).sqrt(),
            2.0 / (2.0 + 0.1 * 14.0f64).sqrt(),
            3.0 / (2.0 + 0.1 * 13.0f64).sqrt(),
        ];
        assert!(close(&l[0].value.data, &want, 1e-14));
    }
}
