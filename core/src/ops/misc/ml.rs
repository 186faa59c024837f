//! ai.onnx.ml (LabelEncoder, ArrayFeatureExtractor, Binarizer, TreeEnsemble) and
//! ai.onnx.preview.training (Adagrad, Adam, Momentum) operators.
use std::collections::HashMap;

use ndarray::{ArrayD, Axis, IxDyn};

use super::scalar_f64;
use crate::error::{OpError, OpResult};
use crate::ops::{OpCtx, Registry, input, single};
use crate::tensor::{DType, Tensor, Value};
use crate::{bail, map_array, unsupported};

const ML: &str = "ai.onnx.ml";
const TRAINING: &str = "ai.onnx.preview.training";

pub fn register(r: &mut Registry) {
    r.add(ML, "LabelEncoder", label_encoder);
    r.add(ML, "ArrayFeatureExtractor", array_feature_extractor);
    r.add(ML, "Binarizer", binarizer);
    r.add(ML, "TreeEnsemble", tree_ensemble);
    r.add(TRAINING, "Adagrad", adagrad);
    r.add(TRAINING, "Adam", adam);
    r.add(TRAINING, "Momentum", momentum);
}

// ---------------------------------------------------------------------------------------------
// LabelEncoder.

/// A hashable lookup key: integers, floats (by canonical bits) or strings.
#[derive(Hash, PartialEq, Eq, Clone, Debug)]
enum Key {
    I(i64),
    F(u64),
    S(String),
}

fn float_key(x: f64) -> Key {
    // One key for every NaN, and -0.0 == 0.0.
    Key::F(if x.is_nan() {
        f64::NAN.to_bits()
    } else if x == 0.0 {
        0
    } else {
        x.to_bits()
    })
}

fn keys_of(t: &Tensor) -> OpResult<Vec<Key>> {
    Ok(match t {
        Tensor::Str(a) => a.iter().map(|s| Key::S(s.clone())).collect(),
        t if t.dtype().is_float() => t.to_f64_vec()?.into_iter().map(float_key).collect(),
        t => t.to_i64_vec()?.into_iter().map(Key::I).collect(),
    })
}

fn strings_tensor(v: Vec<String>) -> OpResult<Tensor> {
    let n = v.len();
    Ok(Tensor::Str(ArrayD::from_shape_vec(IxDyn(&[n]), v)?))
}

fn label_encoder(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    if ctx.opset() < 2 {
        unsupported!("LabelEncoder-1 (classes_strings) is not supported");
    }
    let x = input(inputs, 0)?;
    let keys: Vec<Key> = if let Some(k) = ctx.attr_opt_strings("keys_strings")? {
        k.into_iter().map(Key::S).collect()
    } else if let Some(k) = ctx.attr_opt_ints("keys_int64s")? {
        k.into_iter().map(Key::I).collect()
    } else if let Some(k) = ctx.attr_opt_floats("keys_floats")? {
        k.into_iter().map(|f| float_key(f as f64)).collect()
    } else if let Some(t) = ctx.attr_opt_tensor("keys_tensor")? {
        keys_of(t)?
    } else {
        bail!("LabelEncoder needs one of keys_strings, keys_int64s, keys_floats, keys_tensor");
    };
    // The values, with the default appended as the last entry.
    let values: Tensor = if let Some(v) = ctx.attr_opt_strings("values_strings")? {
        let mut v = v;
        v.push(ctx.attr_s("default_string", "_Unused")?);
        strings_tensor(v)?
    } else if let Some(v) = ctx.attr_opt_ints("values_int64s")? {
        let mut v = v;
        v.push(ctx.attr_i("default_int64", -1)?);
        let n = v.len();
        Tensor::from_i64(&[n], v)?
    } else if let Some(v) = ctx.attr_opt_floats("values_floats")? {
        let mut v = v;
        v.push(ctx.attr_f("default_float", -0.0)?);
        let n = v.len();
        Tensor::from_f32(&[n], v)?
    } else if let Some(v) = ctx.attr_opt_tensor("values_tensor")? {
        let n = v.len();
        let flat = v.reshape(&[n])?;
        let def = match ctx.attr_opt_tensor("default_tensor")? {
            Some(d) if d.len() == 1 && d.dtype() == v.dtype() => d.reshape(&[1])?,
            Some(d) => bail!(
                "default_tensor must be one {} value, got {}",
                v.dtype(),
                d.describe()
            ),
            None => match v.dtype() {
                DType::Str => strings_tensor(vec!["_Unused".into()])?,
                d if d.is_float() => Tensor::from_f64s(d, &[1], vec![-0.0])?,
                d => Tensor::from_f64s(d, &[1], vec![-1.0])?,
            },
        };
        crate::ops::sequence::concat(&[flat, def], 0)?
    } else {
        bail!(
            "LabelEncoder needs one of values_strings, values_int64s, values_floats, values_tensor"
        );
    };
    if keys.len() + 1 != values.len() {
        bail!(
            "LabelEncoder has {} keys but {} values",
            keys.len(),
            values.len() - 1
        );
    }
    let map: HashMap<&Key, usize> = keys.iter().enumerate().map(|(i, k)| (k, i)).collect();
    let idx: Vec<usize> = keys_of(x)?
        .iter()
        .map(|k| map.get(k).copied().unwrap_or(keys.len()))
        .collect();
    let out =
        map_array!(&values, v => v.select(Axis(0), &idx).into_shape_with_order(IxDyn(x.shape()))?);
    single(out)
}

// ---------------------------------------------------------------------------------------------
// ArrayFeatureExtractor, Binarizer.

fn array_feature_extractor(_ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let idx = input(inputs, 1)?.to_i64_vec()?;
    let s = x.shape();
    let Some(&last) = s.last() else {
        bail!("ArrayFeatureExtractor needs rank >= 1, got a scalar")
    };
    if let Some(&bad) = idx.iter().find(|&&i| i < 0 || i as usize >= last) {
        bail!(
            "index {bad} is out of range for the last dim of {}",
            x.describe()
        );
    }
    let mut out_shape: Vec<usize> = if s.len() == 1 {
        vec![1]
    } else {
        s[..s.len() - 1].to_vec()
    };
    out_shape.push(idx.len());
    let idx: Vec<usize> = idx.into_iter().map(|i| i as usize).collect();
    let out = map_array!(x, a => {
        let picked = a.select(Axis(s.len() - 1), &idx);
        picked.as_standard_layout().into_owned().into_shape_with_order(IxDyn(&out_shape))?
    });
    single(out)
}

fn binarizer(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let th = ctx.attr_f("threshold", 0.0)? as f64;
    let v: Vec<f64> = x
        .to_f64_vec()?
        .into_iter()
        .map(|a| if a > th { 1.0 } else { 0.0 })
        .collect();
    single(Tensor::from_f64s(x.dtype(), x.shape(), v)?)
}

// ---------------------------------------------------------------------------------------------
// TreeEnsemble (ai.onnx.ml opset 5).

enum Cmp {
    Leq,
    Lt,
    Gte,
    Gt,
    Eq,
    Neq,
    Member(Vec<f64>),
}

struct TreeNode {
    cmp: Cmp,
    split: f64,
    feature: usize,
    missing_true: bool,
    /// (is_leaf, index) for the true and false branches.
    t: (bool, usize),
    f: (bool, usize),
}

fn attr_f64s(ctx: &OpCtx, name: &str) -> OpResult<Option<Vec<f64>>> {
    Ok(match ctx.attr_opt_tensor(name)? {
        Some(t) => Some(t.to_f64_vec()?),
        None => ctx
            .attr_opt_floats(name)?
            .map(|v| v.into_iter().map(|x| x as f64).collect()),
    })
}

fn ints(ctx: &OpCtx, name: &str) -> OpResult<Vec<i64>> {
    ctx.attr_opt_ints(name)?
        .ok_or_else(|| OpError::Invalid(format!("required attribute '{name}' is missing")))
}

fn tree_ensemble(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let (rows, nfeat) = match x.shape() {
        [n, f] => (*n, *f),
        [f] => (1, *f),
        s => bail!("TreeEnsemble needs X [N, F], got {s:?}"),
    };
    if ctx.attr_i("post_transform", 0)? != 0 {
        unsupported!("TreeEnsemble post_transform other than NONE");
    }
    let agg = ctx.attr_i("aggregate_function", 1)?;
    let n_targets = ctx.req_i("n_targets")?;
    if n_targets < 1 {
        bail!("n_targets must be positive, got {n_targets}");
    }
    let n_targets = n_targets as usize;
    let modes = match ctx.attr_opt_tensor("nodes_modes")? {
        Some(t) => t.to_i64_vec()?,
        None => ints(ctx, "nodes_modes")?,
    };
    let splits = attr_f64s(ctx, "nodes_splits")?
        .ok_or_else(|| OpError::Invalid("nodes_splits is missing".into()))?;
    let feats = ints(ctx, "nodes_featureids")?;
    let (tn, tl) = (
        ints(ctx, "nodes_truenodeids")?,
        ints(ctx, "nodes_trueleafs")?,
    );
    let (fnn, fl) = (
        ints(ctx, "nodes_falsenodeids")?,
        ints(ctx, "nodes_falseleafs")?,
    );
    let leaf_t = ints(ctx, "leaf_targetids")?;
    let leaf_w = attr_f64s(ctx, "leaf_weights")?
        .ok_or_else(|| OpError::Invalid("leaf_weights is missing".into()))?;
    let roots = ints(ctx, "tree_roots")?;
    let missing = ctx
        .attr_opt_ints("nodes_missing_value_tracks_true")?
        .unwrap_or_default();
    let members = attr_f64s(ctx, "membership_values")?.unwrap_or_default();
    let nn = modes.len();
    if [
        splits.len(),
        feats.len(),
        tn.len(),
        tl.len(),
        fnn.len(),
        fl.len(),
    ]
    .iter()
    .any(|&l| l != nn)
        || leaf_t.len() != leaf_w.len()
    {
        bail!("TreeEnsemble node or leaf attribute lists differ in length");
    }
    let nl = leaf_w.len();
    let branch = |leaf: i64, id: i64| -> OpResult<(bool, usize)> {
        let lim = if leaf != 0 { nl } else { nn };
        if id < 0 || id as usize >= lim {
            bail!("branch target {id} is out of range");
        }
        Ok((leaf != 0, id as usize))
    };
    // Membership sets are listed in node order, separated by NaN.
    let mut sets = members.split(|v| v.is_nan());
    let mut nodes = Vec::with_capacity(nn);
    for i in 0..nn {
        let cmp = match modes[i] {
            0 => Cmp::Leq,
            1 => Cmp::Lt,
            2 => Cmp::Gte,
            3 => Cmp::Gt,
            4 => Cmp::Eq,
            5 => Cmp::Neq,
            6 => Cmp::Member(
                sets.next()
                    .ok_or_else(|| OpError::Invalid("too few membership_values sets".into()))?
                    .to_vec(),
            ),
            m => bail!("unknown node mode {m}"),
        };
        if feats[i] < 0 || feats[i] as usize >= nfeat {
            bail!("node {i} reads feature {} of {nfeat}", feats[i]);
        }
        nodes.push(TreeNode {
            cmp,
            split: splits[i],
            feature: feats[i] as usize,
            missing_true: missing.get(i).is_some_and(|&m| m != 0),
            t: branch(tl[i], tn[i])?,
            f: branch(fl[i], fnn[i])?,
        });
    }
    for &l in &leaf_t {
        if l < 0 || l as usize >= n_targets {
            bail!("leaf target {l} is out of range for {n_targets} targets");
        }
    }
    // A root whose two branches are the same leaf is that leaf.
    let starts: Vec<(bool, usize)> = roots
        .iter()
        .map(|&r| {
            if r < 0 || r as usize >= nn {
                bail!("tree root {r} is out of range");
            }
            let n = &nodes[r as usize];
            Ok(if n.t.0 && n.f.0 && n.t.1 == n.f.1 {
                (true, r as usize)
            } else {
                (false, r as usize)
            })
        })
        .collect::<OpResult<_>>()?;
    let xs = x.to_f64_vec()?;
    let init = match agg {
        0 | 1 => 0.0,
        2 => f64::MAX,
        3 => f64::MIN,
        a => bail!("unknown aggregate_function {a}"),
    };
    let mut out = vec![init; rows * n_targets];
    for r in 0..rows {
        let row = &xs[r * nfeat..(r + 1) * nfeat];
        let o = &mut out[r * n_targets..(r + 1) * n_targets];
        for &(mut cur) in &starts {
            let mut steps = 0;
            while !cur.0 {
                let n = &nodes[cur.1];
                let v = row[n.feature];
                let hit = (n.missing_true && v.is_nan())
                    || match &n.cmp {
                        Cmp::Leq => v <= n.split,
                        Cmp::Lt => v < n.split,
                        Cmp::Gte => v >= n.split,
                        Cmp::Gt => v > n.split,
                        Cmp::Eq => v == n.split,
                        Cmp::Neq => v != n.split,
                        Cmp::Member(s) => s.contains(&v),
                    };
                cur = if hit { n.t } else { n.f };
                steps += 1;
                if steps > nn {
                    bail!("the tree starting at a root has a cycle");
                }
            }
            let (w, t) = (leaf_w[cur.1], leaf_t[cur.1] as usize);
            o[t] = match agg {
                0 => o[t] + w / starts.len() as f64,
                1 => o[t] + w,
                2 => o[t].min(w),
                _ => o[t].max(w),
            };
        }
    }
    single(Tensor::from_f64s(x.dtype(), &[rows, n_targets], out)?)
}

// ---------------------------------------------------------------------------------------------
// Training optimizers: inputs R (learning rate), T (step), then groups of per-tensor inputs.

/// Reads R (learning rate) and T (step count).
fn rate_and_step(inputs: &[Option<&Value>]) -> OpResult<(f64, f64)> {
    Ok((
        scalar_f64(input(inputs, 0)?, "R")?,
        scalar_f64(input(inputs, 1)?, "T")?,
    ))
}

/// Applies an elementwise update to every optimized tensor. After R and T the inputs are `groups`
/// lists of n tensors (X, G, then the state lists); `f` maps one element of each list to the new X
/// and new states. Outputs: all new X, then each new state list.
fn optimize<F: Fn(&[f64], &mut [f64])>(
    inputs: &[Option<&Value>],
    groups: usize,
    f: F,
) -> OpResult<Vec<Value>> {
    let rest = inputs.len().saturating_sub(2);
    if rest == 0 || rest.checked_rem(groups) != Some(0) {
        bail!("expected 2 + {groups} * n inputs, got {}", inputs.len());
    }
    let n = rest / groups;
    let mut outs: Vec<Vec<Value>> = vec![Vec::with_capacity(n); groups - 1];
    for i in 0..n {
        let ts: Vec<&Tensor> = (0..groups)
            .map(|g| input(inputs, 2 + g * n + i))
            .collect::<OpResult<_>>()?;
        if ts.iter().any(|t| t.shape() != ts[0].shape()) {
            bail!("optimizer inputs for tensor {i} differ in shape");
        }
        let vals: Vec<Vec<f64>> = ts.iter().map(|t| f64s(t)).collect::<OpResult<_>>()?;
        let len = ts[0].len();
        let mut res = vec![Vec::with_capacity(len); groups - 1];
        let (mut inb, mut outb) = (vec![0.0; groups], vec![0.0; groups - 1]);
        for k in 0..len {
            for (b, v) in inb.iter_mut().zip(&vals) {
                *b = v[k];
            }
            f(&inb, &mut outb);
            for (r, &o) in res.iter_mut().zip(&outb) {
                r.push(o);
            }
        }
        for (j, r) in res.into_iter().enumerate() {
            let src = if j == 0 { ts[0] } else { ts[j + 1] };
            outs[j].push(Value::Tensor(Tensor::from_f64s(
                src.dtype(),
                src.shape(),
                r,
            )?));
        }
    }
    Ok(outs.into_iter().flatten().collect())
}

fn f64s(t: &Tensor) -> OpResult<Vec<f64>> {
    if !t.dtype().is_float() || t.dtype().is_narrow_float() {
        unsupported!("optimizer input of {}", t.dtype());
    }
    t.to_f64_vec()
}

fn adagrad(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (r, t) = rate_and_step(inputs)?;
    let decay = ctx.attr_f("decay_factor", 0.0)? as f64;
    let eps = ctx.attr_f("epsilon", 1e-6)? as f64;
    let norm = ctx.attr_f("norm_coefficient", 0.0)? as f64;
    let lr = r / (1.0 + t * decay);
    optimize(inputs, 3, |v, o| {
        let (x, g, h) = (v[0], v[1], v[2]);
        let gg = norm * x + g;
        let h2 = h + gg * gg;
        o[0] = x - lr * gg / (h2.sqrt() + eps);
        o[1] = h2;
    })
}

fn adam(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (r, t) = rate_and_step(inputs)?;
    let alpha = ctx.attr_f("alpha", 0.9)? as f64;
    let beta = ctx.attr_f("beta", 0.999)? as f64;
    let eps = ctx.attr_f("epsilon", 1e-6)? as f64;
    let norm = ctx.attr_f("norm_coefficient", 0.0)? as f64;
    let post = ctx.attr_f("norm_coefficient_post", 0.0)? as f64;
    let lr = if t > 0.0 {
        r * (1.0 - beta.powf(t)).sqrt() / (1.0 - alpha.powf(t))
    } else {
        r
    };
    optimize(inputs, 4, |v, o| {
        let (x, g, m, h) = (v[0], v[1], v[2], v[3]);
        let gg = norm * x + g;
        let m2 = alpha * m + (1.0 - alpha) * gg;
        let h2 = beta * h + (1.0 - beta) * gg * gg;
        o[0] = (1.0 - post) * (x - lr * m2 / (h2.sqrt() + eps));
        o[1] = m2;
        o[2] = h2;
    })
}

fn momentum(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (r, t) = rate_and_step(inputs)?;
    let req = |name: &str| -> OpResult<f64> {
        Ok(ctx
            .attr_opt_f(name)?
            .ok_or_else(|| OpError::Invalid(format!("attribute '{name}' is missing")))?
            as f64)
    };
    let (alpha, beta) = (req("alpha")?, req("beta")?);
    let norm = ctx.attr_f("norm_coefficient", 0.0)? as f64;
    let nesterov = match ctx.attr_s("mode", "standard")?.as_str() {
        "standard" => false,
        "nesterov" => true,
        m => bail!("unknown Momentum mode '{m}'"),
    };
    let b = if t > 0.0 { beta } else { 1.0 };
    optimize(inputs, 3, |v, o| {
        let (x, g, m) = (v[0], v[1], v[2]);
        let gg = norm * x + g;
        let m2 = alpha * m + b * gg;
        o[0] = if nesterov {
            x - r * (gg + alpha * m2)
        } else {
            x - r * m2
        };
        o[1] = m2;
    })
}
