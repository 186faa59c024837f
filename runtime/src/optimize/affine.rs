//! `affine-fold`: a Conv followed by per-output-channel affine steps — inference
//! BatchNormalization, Mul by a constant, Add or Sub of a constant — becomes one Conv whose weight
//! and bias absorb them (what exporters of Caffe2-era models write as Conv → SpatialBN → Mul → Add,
//! and what onnxruntime folds too). Each step is a full pass over the activations on the CPU; the
//! fold removes them and lets `conv-activation` fuse the activation that follows.
//!
//! The arithmetic changes, within a stated bound. The chain's per-channel scale `a` and shift `t`
//! are composed in f64 from the steps' own formulas (BatchNormalization's `scale / sqrt(var + eps)`
//! as the CPU kernel computes it); the folded weight `W'[m, ·] = f32(a_m · W[m, ·])` and bias
//! `B'_m = f32(a_m · B_m + t_m)` are each rounded once. The folded Conv's output then differs from
//! the chain's by the rounding of each weight (2⁻²⁴ relative, so `2⁻²⁴ · Σ|a·w·x|` at most) plus the
//! chain's own roundings it no longer makes: inside the oracles' bound for the Conv
//! (`64 · 2⁻²³ · Σ|terms| + ½ulp`) with room to spare. Only f32 weights and parameters fold, and
//! only where every scale and shift is finite.
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ndarray::{ArrayD, IxDyn};

use super::{Rewrite, pinned, readers};
use crate::ir::{Attr, Graph, Node};
use crate::tensor::{DType, Tensor, Value};

/// A constant f32 tensor's values.
pub(super) fn f32s(constants: &HashMap<String, Arc<Value>>, name: &str) -> Option<Vec<f64>> {
    let t = constants.get(name)?.as_tensor()?;
    (t.dtype() == DType::F32).then(|| t.to_f64_vec().ok())?
}

/// The per-channel values of a constant operand of an elementwise op on a Conv output of rank
/// `rank` with `m` channels (axis 1): a scalar, or a tensor whose only non-1 dim is the channel
/// one and of size `m`, with no more dims than the output (so the output's shape is unchanged).
fn per_channel(
    constants: &HashMap<String, Arc<Value>>,
    name: &str,
    rank: usize,
    m: usize,
) -> Option<Vec<f64>> {
    let t = constants.get(name)?.as_tensor()?;
    if t.dtype() != DType::F32 || t.shape().len() > rank {
        return None;
    }
    let v = t.to_f64_vec().ok()?;
    if v.len() == 1 {
        return Some(vec![v[0]; m]);
    }
    // Aligned from the right: the channel dim of the output is at `rank - 1 - k` from the end.
    let s = t.shape();
    let chan_from_end = rank - 2;
    let ok = s
        .iter()
        .rev()
        .enumerate()
        .all(|(k, &d)| if k == chan_from_end { d == m } else { d == 1 })
        && s.len() > chan_from_end;
    ok.then_some(v)
}

/// `(scale, shift)` per channel of one step applied to a value of `m` channels and rank `rank`,
/// when the step is a foldable affine map of it (input position `pos` of node `n`).
pub(super) fn step(
    n: &Node,
    pos: usize,
    constants: &HashMap<String, Arc<Value>>,
    rank: usize,
    m: usize,
) -> Option<(Vec<f64>, Vec<f64>)> {
    if !n.domain.is_empty() || n.outputs.len() != 1 || n.outputs[0].is_empty() {
        return None;
    }
    let other = |k: usize| n.inputs.get(k).filter(|s| !s.is_empty());
    match n.op_type.as_str() {
        "BatchNormalization" => {
            // Inference only: one output, no training_mode, spatial (the default) before opset 9,
            // and not the pre-7 forms whose is_test attribute chose the mode.
            let training = matches!(n.attrs.get("training_mode"), Some(Attr::Int(v)) if *v != 0);
            let spatial = !matches!(n.attrs.get("spatial"), Some(Attr::Int(0)));
            if pos != 0 || n.opset < 7 || training || !spatial || n.inputs.len() != 5 {
                return None;
            }
            let eps = match n.attrs.get("epsilon") {
                None => 1e-5f32,
                Some(Attr::Float(e)) => *e,
                Some(_) => return None,
            } as f64;
            let p: Vec<Vec<f64>> = (1..5)
                .map(|k| f32s(constants, other(k)?))
                .collect::<Option<_>>()?;
            if p.iter().any(|v| v.len() != m) {
                return None;
            }
            let (s, b, mean, var) = (&p[0], &p[1], &p[2], &p[3]);
            // As the CPU kernel: y = x · a + (b − mean · a), a = s / sqrt(var + eps), in f64.
            let a: Vec<f64> = s
                .iter()
                .zip(var)
                .map(|(s, v)| s / (v + eps).sqrt())
                .collect();
            let t = b
                .iter()
                .zip(mean)
                .zip(&a)
                .map(|((b, mu), a)| b - mu * a)
                .collect();
            Some((a, t))
        }
        "Mul" | "Add" | "Sub" if n.inputs.len() == 2 => {
            let c = per_channel(constants, other(1 - pos)?, rank, m)?;
            match (n.op_type.as_str(), pos) {
                ("Mul", _) => Some((c, vec![0.0; m])),
                ("Add", _) => Some((vec![1.0; m], c)),
                // x − c; c − x would negate the Conv: also affine, but not written by exporters.
                ("Sub", 0) => Some((vec![1.0; m], c.iter().map(|v| -v).collect())),
                _ => None,
            }
        }
        _ => None,
    }
}

/// A name not yet used in `g` for a new initializer.
pub(super) fn fresh_name(g: &Graph, taken: &HashSet<String>, base: &str) -> String {
    let mut name = base.to_string();
    let mut k = 1;
    while g.initializers.contains_key(&name) || taken.contains(&name) {
        k += 1;
        name = format!("{base}_{k}");
    }
    name
}

pub(super) fn f32_tensor(shape: &[usize], v: Vec<f32>) -> Option<Arc<Value>> {
    let a = ArrayD::from_shape_vec(IxDyn(shape), v).ok()?;
    Some(Arc::new(Value::Tensor(Tensor::F32(a))))
}

/// Folds every foldable chain of `g`; the new weights and biases go into `g`'s initializers and
/// into `constants`.
pub(super) fn fold_affine(
    g: &mut Graph,
    constants: &mut HashMap<String, Arc<Value>>,
    done: &mut Vec<Rewrite>,
) {
    let pinned = pinned(g);
    let readers = readers(g);
    let produced_names: HashSet<String> = g
        .nodes
        .iter()
        .flat_map(|n| n.outputs.iter().cloned())
        .collect();
    // (conv index, absorbed nodes, the output the folded Conv writes, new W, new B)
    type Fold = (usize, Vec<usize>, String, Arc<Value>, Arc<Value>);
    let mut folds: Vec<Fold> = Vec::new();
    let mut absorbed: HashSet<usize> = HashSet::new();
    for (i, conv) in g.nodes.iter().enumerate() {
        if conv.op_type != "Conv" || !conv.domain.is_empty() || conv.outputs.len() != 1 {
            continue;
        }
        let Some(w) = conv.inputs.get(1).and_then(|w| constants.get(w)) else {
            continue;
        };
        let Some(wt) = w.as_tensor().filter(|t| t.dtype() == DType::F32) else {
            continue;
        };
        let ws = wt.shape().to_vec();
        if ws.len() < 3 || ws[0] == 0 {
            continue;
        }
        let m = ws[0];
        let bias = match conv.inputs.get(2).filter(|s| !s.is_empty()) {
            None => vec![0.0; m],
            Some(b) => match f32s(constants, b) {
                Some(v) if v.len() == m => v,
                _ => continue,
            },
        };
        let rank = ws.len();
        let (mut a, mut t) = (vec![1.0f64; m], vec![0.0f64; m]);
        let mut chain = Vec::new();
        let mut y = conv.outputs[0].clone();
        loop {
            if pinned.contains(&y) {
                break;
            }
            let Some(&[(r, pos)]) = readers.get(y.as_str()).map(Vec::as_slice) else {
                break;
            };
            if absorbed.contains(&r) {
                break;
            }
            let Some((sa, st)) = step(&g.nodes[r], pos, &*constants, rank, m) else {
                break;
            };
            for c in 0..m {
                a[c] *= sa[c];
                t[c] = t[c] * sa[c] + st[c];
            }
            chain.push(r);
            y = g.nodes[r].outputs[0].clone();
        }
        if chain.is_empty() || a.iter().chain(&t).any(|v| !v.is_finite()) {
            continue;
        }
        let wv = match wt.to_f64_vec() {
            Ok(v) => v,
            Err(_) => continue,
        };
        let per = wv.len() / m;
        let new_w: Vec<f32> = wv
            .iter()
            .enumerate()
            .map(|(k, &v)| (v * a[k / per]) as f32)
            .collect();
        let new_b: Vec<f32> = (0..m).map(|c| (a[c] * bias[c] + t[c]) as f32).collect();
        let (Some(nw), Some(nb)) = (f32_tensor(&ws, new_w), f32_tensor(&[m], new_b)) else {
            continue;
        };
        absorbed.extend(chain.iter().copied());
        folds.push((i, chain, y, nw, nb));
    }
    if folds.is_empty() {
        return;
    }
    let mut taken: HashSet<String> = produced_names;
    for (i, chain, out, nw, nb) in folds {
        let names: Vec<String> = chain
            .iter()
            .map(|&n| format!("{} '{}'", g.nodes[n].op_type, g.nodes[n].name))
            .collect();
        let base = if g.nodes[i].name.is_empty() {
            format!("conv{i}")
        } else {
            g.nodes[i].name.clone()
        };
        let wn = fresh_name(g, &taken, &format!("{base}_folded_W"));
        taken.insert(wn.clone());
        let bn = fresh_name(g, &taken, &format!("{base}_folded_B"));
        taken.insert(bn.clone());
        g.initializers.insert(wn.clone(), nw.clone());
        g.initializers.insert(bn.clone(), nb.clone());
        constants.insert(wn.clone(), nw);
        constants.insert(bn.clone(), nb);
        let conv = &mut g.nodes[i];
        conv.inputs.resize(3, String::new());
        conv.inputs[1] = wn;
        conv.inputs[2] = bn;
        conv.outputs = vec![out];
        done.push(Rewrite {
            pass: "affine-fold",
            detail: format!("Conv '{}' absorbs {}", conv.name, names.join(" + ")),
        });
    }
    super::remove_nodes(g, |i| absorbed.contains(&i));
}

#[cfg(test)]
pub(crate) mod tests;
