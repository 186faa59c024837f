//! Assorted operators: NonMaxSuppression, Dropout, Det and the random generators here; strings and
//! TfIdfVectorizer in `text`, signal processing (DFT, STFT, windows, MelWeightMatrix) in `signal`,
//! the ai.onnx.ml and ai.onnx.preview.training operators in `ml`.
use ndarray::{ArrayD, IxDyn};

use super::{OpCtx, Registry, input, opt_input, single};
use crate::error::{OpError, OpResult};
use crate::tensor::{DType, Tensor, Value};
use crate::{bail, unsupported};

mod ml;
mod nms;
mod signal;
mod text;

pub fn register(r: &mut Registry) {
    r.add("", "NonMaxSuppression", nms::non_max_suppression);
    r.add("", "Dropout", dropout);
    r.add("", "Det", det);
    r.add("", "RandomNormal", random_normal);
    r.add("", "RandomUniform", random_uniform);
    r.add("", "RandomNormalLike", random_normal_like);
    r.add("", "RandomUniformLike", random_uniform_like);
    r.add("", "Bernoulli", bernoulli);
    r.add("", "Multinomial", multinomial);
    ml::register(r);
    signal::register(r);
    text::register(r);
}

/// A dtype attribute (ONNX code), or `default` when absent.
pub(crate) fn dtype_attr(ctx: &OpCtx, name: &str, default: DType) -> OpResult<DType> {
    match ctx.attr_opt_i(name)? {
        None => Ok(default),
        Some(c) => i32::try_from(c)
            .ok()
            .and_then(DType::from_onnx)
            .ok_or_else(|| OpError::Invalid(format!("attribute '{name}': unknown dtype {c}"))),
    }
}

/// The single number held by an optional scalar input.
pub(super) fn scalar_f64(t: &Tensor, what: &str) -> OpResult<f64> {
    let v = t.to_f64_vec()?;
    match v.as_slice() {
        [x] => Ok(*x),
        _ => bail!("{what} must hold one value, got {}", t.describe()),
    }
}

// ---------------------------------------------------------------------------------------------
// Dropout (inference; training mode only when it is the identity).

/// Whether a Dropout node draws a random mask (training mode with a non-zero ratio), and its ratio,
/// from its attributes and its optional `ratio` and `training_mode` inputs (opset 12 on). Otherwise
/// it is the identity. Shared with the CUDA kernel.
pub(crate) fn dropout_mode(
    ctx: &OpCtx,
    ratio: Option<&Tensor>,
    training_mode: Option<&Tensor>,
) -> OpResult<(f64, bool)> {
    let (ratio, training) = if ctx.opset() >= 12 {
        let r = match ratio {
            Some(t) => scalar_f64(t, "ratio")?,
            None => 0.5,
        };
        let t = match training_mode {
            Some(t) => scalar_f64(t, "training_mode")? != 0.0,
            None => false,
        };
        (r, t)
    } else {
        (
            ctx.attr_f("ratio", 0.5)? as f64,
            ctx.opset() < 7 && ctx.attr_i("is_test", 0)? == 0,
        )
    };
    Ok((ratio, training && ratio != 0.0))
}

fn dropout(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let (ratio, random) = dropout_mode(ctx, opt_input(inputs, 1)?, opt_input(inputs, 2)?)?;
    if random {
        return dropout_train(ctx, x, ratio);
    }
    let mut outs = vec![Value::Tensor(x.clone())];
    if ctx.node.outputs.len() > 1 {
        let mask = if ctx.opset() >= 10 {
            Tensor::Bool(ArrayD::from_elem(IxDyn(x.shape()), true))
        } else {
            Tensor::from_f64s(x.dtype(), x.shape(), vec![1.0; x.len()])?
        };
        outs.push(Value::Tensor(mask));
    }
    Ok(outs)
}

/// Training-mode Dropout: each element kept with probability `1 - ratio` and scaled by `1 / (1 - ratio)`.
/// Random by definition (seeded by the `seed` attribute when given).
fn dropout_train(ctx: &OpCtx, x: &Tensor, ratio: f64) -> OpResult<Vec<Value>> {
    if !(0.0..1.0).contains(&ratio) {
        bail!("Dropout ratio must lie in [0, 1), got {ratio}");
    }
    let mut rng = Rng::new(
        ctx.attr_opt_f("seed")?
            .or(ctx.attr_opt_i("seed")?.map(|s| s as f32)),
    );
    let keep: Vec<bool> = (0..x.len()).map(|_| rng.uniform() >= ratio).collect();
    let scale = 1.0 / (1.0 - ratio);
    let values = x.to_f64_vec()?;
    let y: Vec<f64> = values
        .iter()
        .zip(&keep)
        .map(|(&v, &k)| if k { v * scale } else { 0.0 })
        .collect();
    let mut outs = vec![Value::Tensor(Tensor::from_f64s(x.dtype(), x.shape(), y)?)];
    if ctx.node.outputs.len() > 1 {
        outs.push(Value::Tensor(Tensor::Bool(ArrayD::from_shape_vec(
            IxDyn(x.shape()),
            keep,
        )?)));
    }
    Ok(outs)
}

// ---------------------------------------------------------------------------------------------
// Det: LU decomposition with partial pivoting, in f64.

fn det_of(a: &mut [f64], n: usize) -> f64 {
    let mut det = 1.0;
    for col in 0..n {
        let mut p = col;
        for r in col + 1..n {
            if a[r * n + col].abs() > a[p * n + col].abs() {
                p = r;
            }
        }
        let piv = a[p * n + col];
        if piv == 0.0 {
            return 0.0;
        }
        if p != col {
            for k in 0..n {
                a.swap(p * n + k, col * n + k);
            }
            det = -det;
        }
        det *= piv;
        for r in col + 1..n {
            let f = a[r * n + col] / piv;
            if f != 0.0 {
                for k in col..n {
                    a[r * n + k] -= f * a[col * n + k];
                }
            }
        }
    }
    det
}

fn det(_ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let s = x.shape();
    let r = s.len();
    if r < 2 || s[r - 1] != s[r - 2] {
        bail!("Det needs [*, M, M], got {}", x.describe());
    }
    if !x.dtype().is_float() || x.dtype().is_narrow_float() {
        unsupported!("Det of {}", x.dtype());
    }
    let n = s[r - 1];
    let v = x.to_f64_vec()?;
    let out: Vec<f64> = if n == 0 {
        vec![1.0; s[..r - 2].iter().product()]
    } else {
        v.chunks_exact(n * n)
            .map(|m| det_of(&mut m.to_vec(), n))
            .collect()
    };
    single(Tensor::from_f64s(x.dtype(), &s[..r - 2], out)?)
}

// ---------------------------------------------------------------------------------------------
// Random generators (nondeterministic unless seeded; never bit-compatible with other runtimes).

/// SplitMix64: small, fast, good enough for sampling.
pub(crate) struct Rng(u64);

impl Rng {
    fn new(seed: Option<f32>) -> Rng {
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0x853c_49e6_748f_ea9b);
        let s = match seed {
            Some(s) => s.to_bits() as u64 ^ 0x9e37_79b9_7f4a_7c15,
            None => {
                crate::clock::entropy()
                    ^ COUNTER.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            }
        };
        Rng(s)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

fn shape_attr(ctx: &OpCtx) -> OpResult<Vec<usize>> {
    let s = ctx
        .attr_opt_ints("shape")?
        .ok_or_else(|| OpError::Invalid("required attribute 'shape' is missing".into()))?;
    if s.iter().any(|&d| d < 0) {
        bail!("shape {s:?} has negative dims");
    }
    Ok(s.into_iter().map(|d| d as usize).collect())
}

fn random_fill(ctx: &OpCtx, shape: &[usize], dtype: DType, normal: bool) -> OpResult<Vec<Value>> {
    if !dtype.is_float() || dtype.is_narrow_float() {
        bail!("random output dtype must be float16/32/64 or bfloat16, got {dtype}");
    }
    ctx.check_alloc(shape, dtype.size_in_memory())?;
    let mut rng = Rng::new(ctx.attr_opt_f("seed")?);
    let n: usize = shape.iter().product();
    let v: Vec<f64> = if normal {
        let (mean, scale) = (
            ctx.attr_f("mean", 0.0)? as f64,
            ctx.attr_f("scale", 1.0)? as f64,
        );
        (0..n).map(|_| mean + scale * rng.normal()).collect()
    } else {
        let (lo, hi) = (
            ctx.attr_f("low", 0.0)? as f64,
            ctx.attr_f("high", 1.0)? as f64,
        );
        (0..n).map(|_| lo + (hi - lo) * rng.uniform()).collect()
    };
    single(Tensor::from_f64s(dtype, shape, v)?)
}

fn random_normal(ctx: &OpCtx, _inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    random_fill(
        ctx,
        &shape_attr(ctx)?,
        dtype_attr(ctx, "dtype", DType::F32)?,
        true,
    )
}

fn random_uniform(ctx: &OpCtx, _inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    random_fill(
        ctx,
        &shape_attr(ctx)?,
        dtype_attr(ctx, "dtype", DType::F32)?,
        false,
    )
}

fn random_normal_like(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    random_fill(ctx, x.shape(), dtype_attr(ctx, "dtype", x.dtype())?, true)
}

fn random_uniform_like(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    random_fill(ctx, x.shape(), dtype_attr(ctx, "dtype", x.dtype())?, false)
}

fn bernoulli(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let dtype = dtype_attr(ctx, "dtype", x.dtype())?;
    let mut rng = Rng::new(ctx.attr_opt_f("seed")?);
    let v: Vec<f64> = x
        .to_f64_vec()?
        .into_iter()
        .map(|p| if rng.uniform() < p { 1.0 } else { 0.0 })
        .collect();
    single(Tensor::from_f64s(dtype, x.shape(), v)?)
}

fn multinomial(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let s = x.shape();
    if s.len() != 2 || s[1] == 0 {
        bail!(
            "Multinomial needs [batch, classes] with classes > 0, got {}",
            x.describe()
        );
    }
    let dtype = dtype_attr(ctx, "dtype", DType::I32)?;
    if !matches!(dtype, DType::I32 | DType::I64) {
        bail!("Multinomial output dtype must be int32 or int64, got {dtype}");
    }
    let k = ctx.attr_i("sample_size", 1)?;
    if k < 0 {
        bail!("sample_size must be non-negative, got {k}");
    }
    let k = k as usize;
    ctx.check_alloc(&[s[0], k], 8)?;
    let mut rng = Rng::new(ctx.attr_opt_f("seed")?);
    let logits = x.to_f64_vec()?;
    let mut out = Vec::with_capacity(s[0] * k);
    for row in logits.chunks_exact(s[1]) {
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let cdf: Vec<f64> = row
            .iter()
            .scan(0.0, |acc, &l| {
                *acc += (l - m).exp();
                Some(*acc)
            })
            .collect();
        let total = cdf.last().copied().unwrap_or(0.0);
        for _ in 0..k {
            let u = rng.uniform() * total;
            out.push(cdf.iter().position(|&c| u < c).unwrap_or(s[1] - 1) as f64);
        }
    }
    single(Tensor::from_f64s(dtype, &[s[0], k], out)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn det_matches_cofactor_expansion() {
        let mut rng = Rng::new(Some(3.0));
        for _ in 0..20 {
            let m: Vec<f64> = (0..9).map(|_| rng.uniform() * 4.0 - 2.0).collect();
            let direct = m[0] * (m[4] * m[8] - m[5] * m[7]) - m[1] * (m[3] * m[8] - m[5] * m[6])
                + m[2] * (m[3] * m[7] - m[4] * m[6]);
            let lu = det_of(&mut m.clone(), 3);
            assert!((lu - direct).abs() < 1e-12, "{lu} vs {direct}");
        }
        // A singular matrix.
        assert_eq!(det_of(&mut [1.0, 2.0, 2.0, 4.0], 2), 0.0);
    }

    #[test]
    fn rng_ranges_and_moments() {
        let mut rng = Rng::new(Some(7.0));
        let n = 20000;
        let u: Vec<f64> = (0..n).map(|_| rng.uniform()).collect();
        assert!(u.iter().all(|&x| (0.0..1.0).contains(&x)));
        let z: Vec<f64> = (0..n).map(|_| rng.normal()).collect();
        let mean = z.iter().sum::<f64>() / n as f64;
        let var = z.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
        assert!(
            mean.abs() < 0.05 && (var - 1.0).abs() < 0.05,
            "{mean} {var}"
        );
    }
}
