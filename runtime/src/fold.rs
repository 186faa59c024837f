//! Constant folding at session build. A node whose inputs are all constants (initializers a caller
//! cannot override, or outputs of nodes folded before it) runs once, on the CPU, when the session is
//! built; its tensor outputs become initializers and the node leaves the plan. Every run then skips
//! it, and on an accelerator its outputs are weights: uploaded once, checked on every lookup, rather
//! than computed (or uploaded) on every run. "Light" models build all of their weights with
//! ConstantOfShape at run time; folded, they behave like ordinary models.
//!
//! Not folded: random ops (each run draws anew), nodes with subgraphs, nodes whose kernel fails on
//! the constants (the error stays where the user expects it: at run time, naming the node) and nodes
//! with a non-tensor output. An initializer also listed as a graph input is a default a caller may
//! override from IR version 4 on, so it is not a constant there; before IR 4 it is one.
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::ir::{Graph, Node};
use crate::ops::{NoSubgraphs, OpCtx};
use crate::plan::{Plan, reads, subgraphs};
use crate::tensor::Value;

/// Ops whose output is not a function of their inputs.
const RANDOM: &[&str] = &[
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Bernoulli",
    "Multinomial",
    "Dropout",
];

/// The graph of `plan` with its constant nodes folded into initializers, and the names of the
/// folded nodes; `None` when nothing folds.
/// `overridable`: whether an initializer that is also a graph input is a default the caller may
/// replace (IR version 4 on; before, every initializer had to be listed as an input and all are
/// constants).
pub(crate) fn fold_constants(
    plan: &Plan,
    overridable: bool,
    max_tensor_bytes: u64,
) -> Option<(Graph, Vec<String>)> {
    let g = &*plan.graph;
    let mut consts = constants(g, overridable);
    let mut folded = vec![false; g.nodes.len()];
    let mut made: Vec<String> = Vec::new();
    for step in &plan.steps {
        let node = &g.nodes[step.node];
        if !foldable(node) {
            continue;
        }
        let ins: Option<Vec<Option<Arc<Value>>>> = node
            .inputs
            .iter()
            .map(|n| {
                if n.is_empty() {
                    Some(None)
                } else {
                    consts.get(n).map(|v| Some(v.clone()))
                }
            })
            .collect();
        let Some(ins) = ins else { continue };
        let refs: Vec<Option<&Value>> = ins.iter().map(|v| v.as_deref()).collect();
        let ctx = OpCtx {
            node,
            runner: &NoSubgraphs,
            max_tensor_bytes,
        };
        let Ok(outs) = (step.kernel)(&ctx, &refs) else {
            continue;
        };
        let named: Vec<(&String, Value)> = node
            .outputs
            .iter()
            .zip(outs)
            .filter(|(n, _)| !n.is_empty())
            .collect();
        let wanted = node.outputs.iter().filter(|n| !n.is_empty()).count();
        if named.len() != wanted || named.iter().any(|(_, v)| v.as_tensor().is_none()) {
            continue;
        }
        for (name, v) in named {
            consts.insert(name.clone(), Arc::new(v));
            made.push(name.clone());
        }
        folded[step.node] = true;
    }
    if !folded.contains(&true) {
        return None;
    }
    let nodes: Vec<Node> = g
        .nodes
        .iter()
        .zip(&folded)
        .filter(|(_, f)| !**f)
        .map(|(n, _)| n.clone())
        .collect();
    // Keep the folded values something still reads (a remaining node, a subgraph of one, or a
    // graph output); intermediate steps of a folded chain are dropped.
    let mut needed: HashSet<String> = g.outputs.iter().map(|o| o.name.clone()).collect();
    for n in &nodes {
        needed.extend(reads(n, &plan.subplans));
    }
    let mut initializers = g.initializers.clone();
    for name in made {
        if needed.contains(&name) {
            initializers.insert(name.clone(), consts[&name].clone());
        }
    }
    let names = g
        .nodes
        .iter()
        .zip(&folded)
        .filter(|(_, f)| **f)
        .map(|(n, _)| n.name.clone())
        .collect();
    Some((
        Graph {
            name: g.name.clone(),
            nodes,
            inputs: g.inputs.clone(),
            outputs: g.outputs.clone(),
            initializers,
            value_info: g.value_info.clone(),
        },
        names,
    ))
}

/// The values of `g` no run can change: its initializers, less those a caller may override (when
/// `overridable`, an initializer that is also a graph input is only a default).
pub(crate) fn constants(g: &Graph, overridable: bool) -> HashMap<String, Arc<Value>> {
    let inputs: HashSet<&str> = g.inputs.iter().map(|i| i.name.as_str()).collect();
    g.initializers
        .iter()
        .filter(|(k, _)| !(overridable && inputs.contains(k.as_str())))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn foldable(node: &Node) -> bool {
    !RANDOM.contains(&node.op_type.as_str()) && subgraphs(node).is_empty()
}
