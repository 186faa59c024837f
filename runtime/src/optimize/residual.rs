//! `conv-residual`: Conv → Add(·, r) (or a two-input Sum) → optional activation, the residual
//! connection of ResNets, MobileNetV2 and EfficientNet, becomes one `com.quorum` FusedConv whose
//! fourth input `r` is added after the bias and before the activation. The f32 kernel adds it in
//! the GEMM's epilogue as each tile is stored, `act((conv + bias) + r)` with each sum rounded as
//! the Conv and the Add round it, so the outputs are bit for bit the chain's; an `r` of another
//! shape broadcasts after the Conv, as the Add broadcast it. Two passes over the activations
//! (the Add, the activation) become none.
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use quorum_kernels::Activation;

use super::{Rewrite, activation_attrs, activation_of, pinned, readers, sole_reader};
use crate::ir::{Attr, Graph};
use crate::ops::QUORUM_DOMAIN;
use crate::tensor::{DType, Value};

pub(super) fn fuse_conv_residual(
    g: &mut Graph,
    constants: &HashMap<String, Arc<Value>>,
    done: &mut Vec<Rewrite>,
) {
    let pinned = pinned(g);
    let readers = readers(g);
    let sole = |v: &str| sole_reader(&pinned, &readers, v);
    // (conv, residual input, activation, absorbed nodes, output)
    let mut fusions: Vec<(usize, String, Activation, Vec<usize>, String)> = Vec::new();
    let mut absorbed: HashSet<usize> = HashSet::new();
    for (i, conv) in g.nodes.iter().enumerate() {
        if conv.op_type != "Conv" || !conv.domain.is_empty() || conv.outputs.len() != 1 {
            continue;
        }
        let f32_weight = conv
            .inputs
            .get(1)
            .and_then(|w| constants.get(w))
            .and_then(|w| w.as_tensor())
            .is_some_and(|w| w.dtype() == DType::F32);
        let y = &conv.outputs[0];
        if !f32_weight || y.is_empty() || conv.inputs.len() > 3 {
            continue;
        }
        let Some((a, pos)) = sole(y) else { continue };
        let add = &g.nodes[a];
        let two = add.inputs.len() == 2 && add.inputs.iter().all(|s| !s.is_empty());
        if !matches!(add.op_type.as_str(), "Add" | "Sum")
            || !add.domain.is_empty()
            || !two
            || add.outputs.len() != 1
            || add.outputs[0].is_empty()
            || absorbed.contains(&a)
        {
            continue;
        }
        let r = add.inputs[1 - pos].clone();
        if r == *y {
            continue;
        }
        let z = add.outputs[0].clone();
        let mut nodes = vec![a];
        let (act, out) = match sole(&z) {
            Some((n, 0))
                if g.nodes[n].outputs.len() == 1
                    && !g.nodes[n].outputs[0].is_empty()
                    && !absorbed.contains(&n) =>
            {
                match activation_of(&g.nodes[n], DType::F32, constants) {
                    Some(act) => {
                        nodes.push(n);
                        (act, g.nodes[n].outputs[0].clone())
                    }
                    None => (Activation::None, z),
                }
            }
            _ => (Activation::None, z),
        };
        absorbed.extend(nodes.iter().copied());
        fusions.push((i, r, act, nodes, out));
    }
    if fusions.is_empty() {
        return;
    }
    for (i, r, act, nodes, out) in &fusions {
        let (name, params) = activation_attrs(*act);
        let names: Vec<String> = nodes
            .iter()
            .map(|&n| format!("{} '{}'", g.nodes[n].op_type, g.nodes[n].name))
            .collect();
        let conv = &mut g.nodes[*i];
        conv.op_type = "FusedConv".into();
        conv.domain = QUORUM_DOMAIN.into();
        conv.opset = 1;
        conv.inputs.resize(3, String::new());
        conv.inputs.push(r.clone());
        conv.outputs = vec![out.clone()];
        conv.attrs
            .insert("activation".into(), Attr::String(name.as_bytes().to_vec()));
        if !params.is_empty() {
            conv.attrs
                .insert("activation_params".into(), Attr::Floats(params));
        }
        done.push(Rewrite {
            pass: "conv-residual",
            detail: format!(
                "Conv '{}' + {} → FusedConv(residual '{r}'{})",
                conv.name,
                names.join(" + "),
                if name.is_empty() {
                    String::new()
                } else {
                    format!(", {name}")
                }
            ),
        });
    }
    super::remove_nodes(g, |i| absorbed.contains(&i));
}
