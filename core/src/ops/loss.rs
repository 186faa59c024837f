//! Loss functions: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
//!
//! Both bring the input to `[N, C, D]` (D the product of the trailing dims) and the target to `[N, D]`,
//! compute in f64 and return the input's float type. A target equal to `ignore_index` contributes a
//! zero loss and a zero weight; `mean` divides by the sum of the weights of the kept elements.

use super::{OpCtx, Registry, input, opt_input};
use crate::error::OpResult;
use crate::tensor::{DType, Tensor, Value};
use crate::{bail, unsupported};

pub fn register(r: &mut Registry) {
    r.add("", "NegativeLogLikelihoodLoss", nll_loss);
    r.add("", "SoftmaxCrossEntropyLoss", sce_loss);
}

enum Reduction {
    None,
    Sum,
    Mean,
}

struct Common {
    dtype: DType,
    n: usize,
    c: usize,
    d: usize,
    target_shape: Vec<usize>,
    target: Vec<i64>,
    weight: Option<Vec<f64>>,
    ignore: Option<i64>,
    reduction: Reduction,
}

fn common(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Common> {
    let x = input(inputs, 0)?;
    let t = input(inputs, 1)?;
    let dtype = x.dtype();
    if !matches!(dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
        unsupported!("loss input of dtype {dtype} (expected a float type)");
    }
    if !matches!(t.dtype(), DType::I32 | DType::I64) {
        bail!("target must be int32 or int64, got {}", t.dtype());
    }
    let xs = x.shape();
    if xs.len() < 2 {
        bail!("input must have rank >= 2 (N, C, ...), got shape {xs:?}");
    }
    let (n, c) = (xs[0], xs[1]);
    let mut want: Vec<usize> = vec![n];
    want.extend_from_slice(&xs[2..]);
    if t.shape() != want.as_slice() {
        bail!(
            "target shape {:?} does not match input shape {xs:?} (expected {want:?})",
            t.shape()
        );
    }
    let weight = match opt_input(inputs, 2)? {
        Some(w) => {
            if w.shape() != [c] {
                bail!("weight must have shape [{c}], got {:?}", w.shape());
            }
            Some(w.to_f64_vec()?)
        }
        None => None,
    };
    let reduction = match ctx.attr_s("reduction", "mean")?.as_str() {
        "none" => Reduction::None,
        "sum" => Reduction::Sum,
        "mean" => Reduction::Mean,
        r => bail!("reduction must be none, sum or mean, got '{r}'"),
    };
    Ok(Common {
        dtype,
        n,
        c,
        d: xs[2..].iter().product(),
        target_shape: want,
        target: t.to_i64_vec()?,
        weight,
        ignore: ctx.attr_opt_i("ignore_index")?,
        reduction,
    })
}

/// The loss from the log-probabilities `lp` laid out `[N, C, D]`.
fn reduce_loss(cm: &Common, lp: &[f64]) -> OpResult<Tensor> {
    let (c, d) = (cm.c, cm.d);
    let mut loss = vec![0f64; cm.n * d];
    let mut wsum = 0f64;
    for i in 0..cm.n {
        for j in 0..d {
            let k = i * d + j;
            let t = cm.target[k];
            if cm.ignore == Some(t) {
                continue;
            }
            if t < 0 || t as usize >= c {
                bail!("target value {t} at flat index {k} is out of range [0, {c})");
            }
            let t = t as usize;
            let w = cm.weight.as_ref().map_or(1.0, |w| w[t]);
            loss[k] = -lp[(i * c + t) * d + j] * w;
            wsum += w;
        }
    }
    match cm.reduction {
        Reduction::None => Tensor::from_f64s(cm.dtype, &cm.target_shape, loss),
        Reduction::Sum => Tensor::from_f64s(cm.dtype, &[], vec![loss.iter().sum()]),
        Reduction::Mean => Tensor::from_f64s(cm.dtype, &[], vec![loss.iter().sum::<f64>() / wsum]),
    }
}

fn nll_loss(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let cm = common(ctx, inputs)?;
    let x = input(inputs, 0)?.to_f64_vec()?;
    Ok(vec![reduce_loss(&cm, &x)?.into()])
}

fn sce_loss(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let cm = common(ctx, inputs)?;
    let xt = input(inputs, 0)?;
    let mut lp = xt.to_f64_vec()?;
    let (c, d) = (cm.c, cm.d);
    // Log-softmax over the class axis, lane by lane.
    let mut m = vec![0f64; d];
    let mut s = vec![0f64; d];
    for blk in lp.chunks_mut((c * d).max(1)) {
        m.iter_mut().for_each(|v| *v = f64::NEG_INFINITY);
        s.iter_mut().for_each(|v| *v = 0.0);
        for row in blk.chunks(d.max(1)) {
            for (mv, &v) in m.iter_mut().zip(row) {
                if v > *mv || v.is_nan() {
                    *mv = v;
                }
            }
        }
        for row in blk.chunks(d.max(1)) {
            for ((sv, &v), &mv) in s.iter_mut().zip(row).zip(&m) {
                *sv += (v - mv).exp();
            }
        }
        let sub: Vec<f64> = m.iter().zip(&s).map(|(&mv, &sv)| mv + sv.ln()).collect();
        for row in blk.chunks_mut(d.max(1)) {
            for (v, &sb) in row.iter_mut().zip(&sub) {
                *v -= sb;
            }
        }
    }
    let loss = reduce_loss(&cm, &lp)?;
    let mut out = vec![loss.into()];
    if ctx.node.outputs.len() > 1 {
        out.push(Tensor::from_f64s(cm.dtype, xt.shape(), lp)?.into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> f64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0
    }

    fn common_for(
        n: usize,
        c: usize,
        d: usize,
        target: Vec<i64>,
        weight: Option<Vec<f64>>,
        ignore: Option<i64>,
    ) -> Common {
        Common {
            dtype: DType::F64,
            n,
            c,
            d,
            target_shape: vec![n, d],
            target,
            weight,
            ignore,
            reduction: Reduction::Mean,
        }
    }

    #[test]
    fn weighted_mean_skips_ignored() {
        let mut seed = 7u64;
        let (n, c, d) = (2, 3, 2);
        let x: Vec<f64> = (0..n * c * d).map(|_| lcg(&mut seed)).collect();
        let target = vec![0, 2, 1, 1];
        let w = vec![0.5, 2.0, 1.5];
        let cm = common_for(n, c, d, target.clone(), Some(w.clone()), Some(1));
        let got = reduce_loss(&cm, &x).unwrap().to_f64_vec().unwrap()[0];
        // Kept: (i=0,j=0,t=0), (i=0,j=1,t=2).
        let num = -x[0] * w[0] - x[(2) * d + 1] * w[2];
        let want = num / (w[0] + w[2]);
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    }

    #[test]
    fn out_of_range_target_is_an_error() {
        let cm = common_for(1, 3, 1, vec![5], None, None);
        assert!(reduce_loss(&cm, &[0.1, 0.2, 0.3]).is_err());
    }
}
