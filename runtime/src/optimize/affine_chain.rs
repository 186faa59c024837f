//! `affine-chain`: an inference BatchNormalization that no Conv absorbs (`affine-fold` takes those
//! after a Conv), the per-channel steps after it (Mul/Add/Sub by per-channel constants, further
//! BatchNormalizations) and the activation after them become one `com.quorum` ChannelAffine,
//! `act(x·a + t)`: one pass over the activations instead of one per step. densenet121 writes BatchNormalization → Mul → Add → Relu on every
//! concatenated input of its dense layers (62 chains, four passes each).
//!
//! The arithmetic changes, within a stated bound. As in `affine-fold`, the chain's scale `a` and
//! shift `t` are composed in f64 from the steps' formulas and rounded once to f32; the op then
//! rounds `x·a` and `+ t`. Against the exact chain that is at most `2⁻²⁴·(2·|x·a| + |t| + |y|)`,
//! where the steps themselves round once each (three to four roundings of values of the same
//! magnitudes): inside the bound the oracles give elementwise chains, `64·2⁻²³·Σ|terms| + ½ulp`.
//!
//! A constant shaped `[m, 1, 1]` is per-channel only for an X of rank 4, so a chain is rewritten
//! only where the graph fixes X's rank (`known_ranks`: constants, declared shapes, and ops that keep
//! their input's rank, from a Conv's weight on), and every constant is per-channel for that rank.
//! The rank is the op's `rank` attribute, checked again when it runs.
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use quorum_kernels::Activation;

use super::affine::{f32_tensor, f32s, fresh_name, step};
use super::{Rewrite, activation_attrs, activation_of, pinned, readers, sole_reader};
use crate::ir::{Attr, Graph, ValueType};
use crate::ops::QUORUM_DOMAIN;
use crate::tensor::{DType, Value};

/// The rank of every value whose rank the graph fixes without running it: constants, declared
/// inputs and value_info, and the outputs of ops that keep their input's rank (a Conv's is its
/// weight's), in node order. The chain rewrite needs it: a constant `[m, 1, 1]` is per-channel
/// only for an X of rank 4 (for one of rank 3 the Mul would broadcast to another shape).
fn known_ranks(g: &Graph, constants: &HashMap<String, Arc<Value>>) -> HashMap<String, usize> {
    let mut r: HashMap<String, usize> = HashMap::new();
    for (name, v) in constants {
        if let Some(t) = v.as_tensor() {
            r.insert(name.clone(), t.shape().len());
        }
    }
    let declared = g
        .inputs
        .iter()
        .map(|i| (&i.name, &i.ty))
        .chain(g.value_info.iter());
    for (name, ty) in declared {
        if let ValueType::Tensor { shape: Some(s), .. } = ty {
            r.insert(name.clone(), s.len());
        }
    }
    for n in &g.nodes {
        let rank = |k: usize| n.inputs.get(k).and_then(|x| r.get(x)).copied();
        let out = match (n.domain.as_str(), n.op_type.as_str()) {
            ("", "Conv" | "ConvTranspose") | (QUORUM_DOMAIN, "FusedConv") => rank(1),
            (
                "",
                "BatchNormalization"
                | "Relu"
                | "LeakyRelu"
                | "Sigmoid"
                | "Tanh"
                | "Clip"
                | "HardSwish"
                | "HardSigmoid"
                | "Elu"
                | "Selu"
                | "Softplus"
                | "Identity"
                | "Dropout"
                | "MaxPool"
                | "AveragePool"
                | "LpPool"
                | "GlobalAveragePool"
                | "GlobalMaxPool"
                | "LRN"
                | "InstanceNormalization"
                | "Neg"
                | "Abs",
            )
            | (QUORUM_DOMAIN, "ChannelAffine") => rank(0),
            ("", "Concat") => n.inputs.iter().find_map(|x| r.get(x)).copied(),
            ("", "Add" | "Sub" | "Mul" | "Div") => rank(0).zip(rank(1)).map(|(a, b)| a.max(b)),
            _ => None,
        };
        if let (Some(k), Some(o)) = (out, n.outputs.first()) {
            r.insert(o.clone(), k);
        }
    }
    r
}

/// The channel count and X's rank of a chain's first step: an inference BatchNormalization whose
/// X has a rank the graph fixes (at least 2). A chain cannot begin at a Mul or Add: its X's axis 1 might be 1
/// and broadcast to the constant's `m` (X `[3, 1]` times `[4]` is `[3, 4]`), which a per-channel
/// map of X cannot give; a BatchNormalization's X has its `m` channels.
fn head(
    n: &crate::ir::Node,
    constants: &HashMap<String, Arc<Value>>,
    ranks: &HashMap<String, usize>,
) -> Option<(usize, usize)> {
    if !n.domain.is_empty() || n.op_type != "BatchNormalization" || n.inputs.is_empty() {
        return None;
    }
    let m = f32s(constants, n.inputs.get(1)?)?.len();
    let rank = *ranks.get(&n.inputs[0])?;
    (rank >= 2).then_some((m, rank))
}

pub(super) fn fuse_affine_chains(
    g: &mut Graph,
    constants: &mut HashMap<String, Arc<Value>>,
    done: &mut Vec<Rewrite>,
) {
    let pinned = pinned(g);
    let readers = readers(g);
    let ranks = known_ranks(g, constants);
    let sole = |v: &str| sole_reader(&pinned, &readers, v);
    struct Fusion {
        first: usize,
        rest: Vec<usize>,
        x: String,
        out: String,
        a: Vec<f64>,
        t: Vec<f64>,
        act: Activation,
        rank: usize,
    }
    let mut fusions: Vec<Fusion> = Vec::new();
    let mut absorbed: HashSet<usize> = HashSet::new();
    for (i, n) in g.nodes.iter().enumerate() {
        if absorbed.contains(&i) {
            continue;
        }
        let Some((m, rank)) = head(n, constants, &ranks) else {
            continue;
        };
        let Some((mut a, mut t)) = step(n, 0, constants, rank, m) else {
            continue;
        };
        // X is known to be f32: a BatchNormalization before opset 15 with f32 parameters takes
        // only f32 (from 15 its X may be of another float type than its parameters), and so does
        // a Mul, Add or Sub by an f32 constant after it.
        let mut typed = n.opset < 15;
        let mut rest = Vec::new();
        let mut y = n.outputs[0].clone();
        while let Some((r, p)) = sole(&y) {
            let next = &g.nodes[r];
            // `step` takes a BatchNormalization only through its X.
            if absorbed.contains(&r) {
                break;
            }
            let Some((sa, st)) = step(next, p, constants, rank, m) else {
                break;
            };
            typed |= next.op_type != "BatchNormalization";
            for c in 0..m {
                a[c] *= sa[c];
                t[c] = t[c] * sa[c] + st[c];
            }
            rest.push(r);
            y = next.outputs[0].clone();
        }
        let mut act = Activation::None;
        if let Some((r, 0)) = sole(&y)
            && !absorbed.contains(&r)
            && let Some(f) = activation_of(&g.nodes[r], DType::F32, constants)
        {
            act = f;
            rest.push(r);
            y = g.nodes[r].outputs[0].clone();
        }
        if !typed || rest.is_empty() || a.iter().chain(&t).any(|v| !v.is_finite()) {
            continue;
        }
        absorbed.insert(i);
        absorbed.extend(rest.iter().copied());
        fusions.push(Fusion {
            first: i,
            rest,
            x: n.inputs[0].clone(),
            out: y,
            a,
            t,
            act,
            rank,
        });
    }
    if fusions.is_empty() {
        return;
    }
    let mut taken: HashSet<String> = g
        .nodes
        .iter()
        .flat_map(|n| n.outputs.iter().cloned())
        .collect();
    let mut drop: HashSet<usize> = HashSet::new();
    for f in fusions {
        let m = f.a.len();
        let names: Vec<String> = std::iter::once(f.first)
            .chain(f.rest.iter().copied())
            .map(|k| format!("{} '{}'", g.nodes[k].op_type, g.nodes[k].name))
            .collect();
        let (Some(sv), Some(tv)) = (
            f32_tensor(&[m], f.a.iter().map(|&v| v as f32).collect()),
            f32_tensor(&[m], f.t.iter().map(|&v| v as f32).collect()),
        ) else {
            continue;
        };
        let base = match g.nodes[f.first].name.as_str() {
            "" => format!("affine{}", f.first),
            name => name.to_string(),
        };
        let sn = fresh_name(g, &taken, &format!("{base}_chain_scale"));
        taken.insert(sn.clone());
        let tn = fresh_name(g, &taken, &format!("{base}_chain_shift"));
        taken.insert(tn.clone());
        for (name, v) in [(&sn, sv), (&tn, tv)] {
            g.initializers.insert(name.clone(), v.clone());
            constants.insert(name.clone(), v);
        }
        let (act_name, params) = activation_attrs(f.act);
        let node = &mut g.nodes[f.first];
        node.op_type = "ChannelAffine".into();
        node.domain = QUORUM_DOMAIN.into();
        node.opset = 1;
        node.inputs = vec![f.x, sn, tn];
        node.outputs = vec![f.out];
        node.attrs = HashMap::from([
            ("rank".to_string(), Attr::Int(f.rank as i64)),
            (
                "activation".to_string(),
                Attr::String(act_name.as_bytes().to_vec()),
            ),
            ("activation_params".to_string(), Attr::Floats(params)),
        ]);
        drop.extend(f.rest.iter().copied());
        done.push(Rewrite {
            pass: "affine-chain",
            detail: format!("{} become one ChannelAffine", names.join(" + ")),
        });
    }
    super::remove_nodes(g, |i| drop.contains(&i));
}

#[cfg(test)]
mod tests;
