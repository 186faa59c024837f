//! `attention`: the attention block exporters write as separate nodes becomes one `com.quorum`
//! FusedAttention (`quorum_core::ops::attention::fused`):
//!
//! ```text
//! [Transpose(K, last two axes)] → MatMul(Q, Kᵀ) → [Mul or Div by a constant scalar] → [Add mask]
//!     → Softmax(last axis) → MatMul(·, V)
//! ```
//!
//! (the Mul's constant on either side; the Add's mask on either side), with Q and Kᵀ each
//! optionally multiplied by a constant scalar first, as PyTorch exports `scaled_dot_product_attention`
//! (`√scale` on both). Every value inside the chain
//! must have the next node as its one reader; the Transpose is absorbed only where the MatMul is its
//! one reader, else the fused node reads `Kᵀ` as the graph computes it.
//!
//! On an accelerator the chain is five or six launches that write and read the `[S, T]` scores
//! three times (ViT-B/16 in f16: about 890 µs of its 2.27 ms of kernel time on an H100); fused,
//! the scores never leave the chip. The arithmetic changes: the fused kernel keeps the scores and
//! probabilities in f32 where the chain rounds them to the model's type, and rescales its running
//! sums as it goes (online softmax). The oracles judge the fused node as the chain, under a bound
//! that covers both (`quorum_core::verify`'s `attention.rs`). On the CPU, FusedAttention runs the
//! chain's own kernels, so the rewrite is exact there; it is applied only for sessions whose every
//! accelerator runs FusedAttention.
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::{Rewrite, binary, pinned, producers, readers, sole_reader};
use crate::ir::{Attr, Graph, Node};
use crate::ops::QUORUM_DOMAIN;
use crate::tensor::{DType, Value};

/// The value of a constant float scalar of f32, f16 or bf16 (exact in f32), if `name` is one.
fn scalar(constants: &HashMap<String, Arc<Value>>, name: &str) -> Option<f32> {
    let t = constants.get(name)?.as_tensor()?;
    if !matches!(t.dtype(), DType::F32 | DType::F16 | DType::BF16) || t.len() != 1 {
        return None;
    }
    Some(t.to_f64_vec().ok()?[0] as f32)
}

/// Whether `n` is a Softmax over the last axis.
fn last_axis_softmax(n: &Node) -> bool {
    if n.op_type != "Softmax" || !n.domain.is_empty() || n.inputs.len() != 1 {
        return false;
    }
    if n.outputs.len() != 1 || n.outputs[0].is_empty() {
        return false;
    }
    match n.attrs.get("axis") {
        Some(Attr::Int(-1)) => true,
        None => n.opset >= 13,
        _ => false,
    }
}

/// One match: the nodes it absorbs and the fused node's inputs and attributes.
struct Found {
    /// The second MatMul, which the fused node replaces in place.
    at: usize,
    absorbed: Vec<usize>,
    inputs: Vec<String>,
    attrs: HashMap<String, Attr>,
}

pub(super) fn fuse_attention(
    g: &mut Graph,
    constants: &HashMap<String, Arc<Value>>,
    done: &mut Vec<Rewrite>,
) {
    let pinned = pinned(g);
    let readers = readers(g);
    let producers = producers(g);
    // The node that writes `value`, when `reader` (node, input position) is its one reader.
    let sole_from = |value: &str, reader: (usize, usize)| -> Option<usize> {
        (sole_reader(&pinned, &readers, value) == Some(reader))
            .then(|| producers.get(value).copied())
            .flatten()
    };
    let mut found: Vec<Found> = Vec::new();
    let mut taken: HashSet<usize> = HashSet::new();
    for (is, softmax) in g.nodes.iter().enumerate() {
        if !last_axis_softmax(softmax) {
            continue;
        }
        // The reader of the probabilities: MatMul(P, V).
        let Some((i2, 0)) = sole_reader(&pinned, &readers, &softmax.outputs[0]) else {
            continue;
        };
        let Some(mm2) = binary(&g.nodes[i2], "MatMul") else {
            continue;
        };
        // Below the mask: [Mul/Div by a scalar] then MatMul(Q, Kᵀ); the nodes, the scale and
        // the MatMul's index.
        let below = |value: &str, reader: (usize, usize)| {
            let mut nodes = Vec::new();
            let mut scale = None;
            let mut at = sole_from(value, reader)?;
            let n = &g.nodes[at];
            let scaled = if let Some(mul) = binary(n, "Mul") {
                (0..2).find_map(|k| Some((k, scalar(constants, &mul.inputs[1 - k])?, false)))
            } else if let Some(div) = binary(n, "Div") {
                scalar(constants, &div.inputs[1]).map(|s| (0, s, true))
            } else {
                None
            };
            if let Some((k, s, divide)) = scaled {
                nodes.push(at);
                scale = Some((s, divide));
                at = sole_from(&n.inputs[k], (at, k))?;
            }
            binary(&g.nodes[at], "MatMul")?;
            Some((nodes, scale, at))
        };
        let mut mask = String::new();
        let mut absorbed = vec![is];
        let x = softmax.inputs[0].as_str();
        let add = sole_from(x, (is, 0)).and_then(|ia| Some((ia, binary(&g.nodes[ia], "Add")?)));
        let walked = match add {
            Some((ia, add)) => (0..2).find_map(|k| {
                let w = below(&add.inputs[k], (ia, k))?;
                mask = add.inputs[1 - k].clone();
                absorbed.push(ia);
                Some(w)
            }),
            None => below(x, (is, 0)),
        };
        let Some((scaled, scale, i1)) = walked else {
            continue;
        };
        absorbed.extend(scaled);
        let mut attrs: HashMap<String, Attr> = HashMap::new();
        if let Some((s, divide)) = scale {
            attrs.insert("scale".into(), Attr::Float(s));
            attrs.insert("divide".into(), Attr::Int(divide as i64));
        }
        let Some(mm1) = binary(&g.nodes[i1], "MatMul") else {
            continue;
        };
        absorbed.push(i1);
        // A Mul of Q or of Kᵀ by a scalar that only the product reads (PyTorch scales both by
        // √scale): a factor of the fused node.
        let prescale = |value: &str, reader: (usize, usize)| {
            let im = sole_from(value, reader)?;
            let mul = binary(&g.nodes[im], "Mul")?;
            let (k, c) = (0..2).find_map(|k| Some((k, scalar(constants, &mul.inputs[1 - k])?)))?;
            Some((im, k, c))
        };
        let mut q_input = mm1.inputs[0].clone();
        if let Some((im, k, c)) = prescale(&mm1.inputs[0], (i1, 0)) {
            q_input = g.nodes[im].inputs[k].clone();
            attrs.insert("q_scale".into(), Attr::Float(c));
            absorbed.push(im);
        }
        let (mut kt_value, mut kt_reader) = (mm1.inputs[1].clone(), (i1, 1));
        if let Some((im, k, c)) = prescale(&kt_value, kt_reader) {
            kt_value = g.nodes[im].inputs[k].clone();
            kt_reader = (im, k);
            attrs.insert("k_scale".into(), Attr::Float(c));
            absorbed.push(im);
        }
        // Kᵀ from a Transpose of the last two axes that only this MatMul reads: read K instead.
        let mut k_input = kt_value.clone();
        let mut transpose_k = false;
        if let Some(it) = sole_from(&kt_value, kt_reader) {
            let t = &g.nodes[it];
            let swaps_last_two = match t.attrs.get("perm") {
                Some(Attr::Ints(p)) if p.len() >= 2 => {
                    let r = p.len();
                    let want = |i: usize| match r - i {
                        2 => r - 1,
                        1 => r - 2,
                        _ => i,
                    };
                    p.iter().enumerate().all(|(i, &a)| a == want(i) as i64)
                }
                _ => false,
            };
            if t.op_type == "Transpose"
                && t.domain.is_empty()
                && t.inputs.len() == 1
                && swaps_last_two
            {
                k_input = t.inputs[0].clone();
                transpose_k = true;
                absorbed.push(it);
            }
        }
        attrs.insert("transpose_k".into(), Attr::Int(transpose_k as i64));
        if absorbed.iter().chain([&i2]).any(|i| taken.contains(i)) {
            continue;
        }
        taken.extend(absorbed.iter().copied().chain([i2]));
        let mut inputs = vec![q_input, k_input, mm2.inputs[1].clone()];
        if !mask.is_empty() {
            inputs.push(mask);
        }
        found.push(Found {
            at: i2,
            absorbed,
            inputs,
            attrs,
        });
    }
    if found.is_empty() {
        return;
    }
    let mut removed = vec![false; g.nodes.len()];
    for f in found {
        let names: Vec<String> = f
            .absorbed
            .iter()
            .rev()
            .map(|&i| format!("{} '{}'", g.nodes[i].op_type, g.nodes[i].name))
            .collect();
        let n = &mut g.nodes[f.at];
        done.push(Rewrite {
            pass: "attention",
            detail: format!(
                "{} + MatMul '{}' → FusedAttention '{}'",
                names.join(" + "),
                n.name,
                n.name
            ),
        });
        n.op_type = quorum_core::ops::attention::fused::OP.into();
        n.domain = QUORUM_DOMAIN.into();
        n.opset = 1;
        n.inputs = f.inputs;
        n.attrs = f.attrs;
        for i in f.absorbed {
            removed[i] = true;
        }
    }
    super::remove_nodes(g, |i| removed[i]);
}

#[cfg(test)]
mod tests;
