//! Bisect to the first wrong node: run a model on two placements, compare every intermediate value,
//! and name the first node whose kernel is wrong on its own (`quorum compare`).
//!
//! This is how "the output differs from the CPU's" becomes a kernel and an input. Both placements
//! run the model with every node's outputs exposed as graph outputs, without rewrites or constant
//! folding (so that every node of the file exists and is compared). Then, in graph order:
//!
//! 1. A node whose outputs are the same on both placements, bit for bit, is **identical**.
//! 2. Otherwise placement A's outputs are judged by both oracles on placement B's inputs, under the
//!    class bound of strict verification (`quorum_core::verify::check`). Within it, the node
//!    **agrees**: the difference is what its class allows.
//! 3. Beyond it, the node **diverges**. That alone does not convict its kernel: A computed it from
//!    A's inputs, which may already carry earlier nodes' (allowed) errors, and an ill-conditioned op
//!    amplifies them (a deep network of equal weights grows values to 1e17 and every later node
//!    drifts). So A's outputs are judged again on **A's own inputs**. Wrong there, the kernel is
//!    wrong on the inputs it was given: the scan stops and names it. Right there, the divergence
//!    came through its inputs, and the scan goes on.
//! 4. A node the oracles cannot judge (an op outside their set, a sequence value) is **unjudged**,
//!    with its largest difference reported; it neither stops nor convicts.
//!
//! What it does not do: compare inside subgraphs (If, Loop, Scan bodies are judged as their node).
use std::collections::{BTreeMap, HashMap};

use crate::backend::Arithmetic;
use crate::error::Result;
use crate::ir::{Model, ValueInfo, ValueType};
use crate::session::{Session, SessionOptions};
use crate::tensor::Value;
use crate::verify::{Check, check_declared, describe};
use crate::{Error, Provider};

/// How one node compared.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeVerdict {
    Identical,
    Agrees,
    /// Beyond its bound on the trusted placement's inputs (`why`); `own` is the judgement of the
    /// same outputs on the inputs placement A gave the node.
    Diverges {
        why: String,
        own: Own,
    },
    /// The oracles cannot judge it: why, and the largest absolute difference of its outputs.
    Unjudged {
        why: String,
        max_diff: f64,
    },
}

/// A diverging node's outputs judged on its own inputs (placement A's).
#[derive(Debug, Clone, PartialEq)]
pub enum Own {
    /// They agree with both oracles: the divergence came through its inputs.
    Right,
    /// Its kernel is wrong on these inputs: the check's description.
    Wrong(String),
    /// The oracles cannot judge it on those inputs: why.
    Unjudged(String),
}

/// One node's line of a comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeComparison {
    pub node: String,
    pub op: String,
    /// Where each placement ran it.
    pub placed: (Provider, Provider),
    pub verdict: NodeVerdict,
}

/// A whole comparison, in graph order (it ends at the first node wrong alone).
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub nodes: Vec<NodeComparison>,
}

impl Comparison {
    /// The first node whose kernel is wrong on its own.
    pub fn first_wrong(&self) -> Option<&NodeComparison> {
        self.nodes.iter().find(|n| {
            matches!(
                n.verdict,
                NodeVerdict::Diverges {
                    own: Own::Wrong(_),
                    ..
                }
            )
        })
    }

    /// The first node beyond its bound, whatever isolating it found.
    pub fn first_divergence(&self) -> Option<&NodeComparison> {
        self.nodes
            .iter()
            .find(|n| matches!(n.verdict, NodeVerdict::Diverges { .. }))
    }

    /// How many nodes ended with each verdict: identical, agrees, diverges, unjudged.
    pub fn counts(&self) -> [usize; 4] {
        let mut c = [0; 4];
        for n in &self.nodes {
            c[match n.verdict {
                NodeVerdict::Identical => 0,
                NodeVerdict::Agrees => 1,
                NodeVerdict::Diverges { .. } => 2,
                NodeVerdict::Unjudged { .. } => 3,
            }] += 1;
        }
        c
    }
}

/// `model` with every top-level node output among its graph outputs (the model's own outputs
/// first), and a name for every unnamed node (`#k`, its place in the graph), so that each node's
/// placement and verdict can be told apart.
fn expose_intermediates(model: &Model) -> Model {
    let mut m = model.clone();
    let given: std::collections::HashSet<String> =
        m.graph.nodes.iter().map(|n| n.name.clone()).collect();
    let mut seen = std::collections::HashSet::new();
    for (k, node) in m.graph.nodes.iter_mut().enumerate() {
        // An unnamed node, or the second of two with one name.
        if node.name.is_empty() || !seen.insert(node.name.clone()) {
            let mut name = format!("#{k}");
            while given.contains(&name) || seen.contains(&name) {
                name.push('\'');
            }
            seen.insert(name.clone());
            node.name = name;
        }
    }
    let mut seen: std::collections::HashSet<String> =
        m.graph.outputs.iter().map(|o| o.name.clone()).collect();
    for node in &model.graph.nodes {
        for name in node.outputs.iter().filter(|n| !n.is_empty()) {
            if seen.insert(name.clone()) {
                let ty = m
                    .graph
                    .value_info
                    .get(name)
                    .cloned()
                    .unwrap_or(ValueType::Unknown);
                m.graph.outputs.push(ValueInfo {
                    name: name.clone(),
                    ty,
                });
            }
        }
    }
    m
}

/// The options a comparison runs a placement with: the caller's, without rewrites, folding or
/// verification (every node of the file runs, and is judged here, not by the session).
fn plain(mut o: SessionOptions) -> SessionOptions {
    o.optimize = false;
    o.fold_constants = false;
    o.verify = crate::VerifyMode::Off;
    o
}

/// Every value of one run of `model` on `options`: feeds, initializers and node outputs by name,
/// where each node ran, and what the nodes whose kernels declared an arithmetic of their own
/// (TF32 operands, the tensor cores' sums) declared.
type Ran = (
    HashMap<String, Value>,
    HashMap<String, Provider>,
    BTreeMap<String, Arithmetic>,
);

fn run_all(model: &Model, options: SessionOptions, feeds: &[(String, Value)]) -> Result<Ran> {
    let session = Session::from_model(model.clone(), options)?;
    let mut values: HashMap<String, Value> = model
        .graph
        .initializers
        .iter()
        .map(|(k, v)| (k.clone(), (**v).clone()))
        .collect();
    values.extend(feeds.iter().cloned());
    values.extend(session.run(feeds.to_vec())?);
    let placed = session
        .placement()
        .iter()
        .map(|p| (p.node.clone(), p.provider))
        .collect();
    Ok((values, placed, session.declared_nodes()))
}

fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Tensor(x), Value::Tensor(y)) => {
            x.dtype() == y.dtype()
                && x.shape() == y.shape()
                && match (x.to_f64_vec(), y.to_f64_vec()) {
                    (Ok(p), Ok(q)) => p
                        .iter()
                        .zip(&q)
                        .all(|(u, v)| u.to_bits() == v.to_bits() || (u.is_nan() && v.is_nan())),
                    _ => false,
                }
        }
        _ => false,
    }
}

/// The largest absolute difference between two values' elements (∞ where their forms differ).
fn max_diff(a: &Value, b: &Value) -> f64 {
    match (a, b) {
        (Value::Tensor(x), Value::Tensor(y)) if x.shape() == y.shape() => {
            match (x.to_f64_vec(), y.to_f64_vec()) {
                (Ok(p), Ok(q)) => p
                    .iter()
                    .zip(&q)
                    .map(|(u, v)| if u == v { 0.0 } else { (u - v).abs() })
                    .fold(
                        0.0,
                        |m: f64, d| if d.is_nan() { f64::INFINITY } else { m.max(d) },
                    ),
                _ => f64::INFINITY,
            }
        }
        _ => f64::INFINITY,
    }
}

/// Compares every node of `model` on placement `a` (the one suspected) against placement `b` (the
/// one trusted, e.g. the CPU), fed `feeds`; see the module's description.
pub fn compare(
    model: &Model,
    a: SessionOptions,
    b: SessionOptions,
    feeds: &[(String, Value)],
) -> Result<Comparison> {
    let exposed = expose_intermediates(model);
    let (va, placed_a, declared_a) = run_all(&exposed, plain(a), feeds)?;
    let (vb, placed_b, _) = run_all(&exposed, plain(b), feeds)?;
    let mut nodes = Vec::new();
    for node in &exposed.graph.nodes {
        let placed = (
            placed_a.get(&node.name).copied().unwrap_or(Provider::Cpu),
            placed_b.get(&node.name).copied().unwrap_or(Provider::Cpu),
        );
        let names: Vec<&String> = node.outputs.iter().filter(|n| !n.is_empty()).collect();
        let pairs: Option<Vec<(&Value, &Value)>> = names
            .iter()
            .map(|n| Some((va.get(*n)?, vb.get(*n)?)))
            .collect();
        let Some(pairs) = pairs else {
            return Err(Error::InvalidModel(format!(
                "node '{}' ({}): an output missing from a run being compared",
                node.name, node.op_type
            )));
        };
        let verdict = if pairs.iter().all(|(x, y)| same_value(x, y)) {
            NodeVerdict::Identical
        } else {
            let inputs: Vec<Option<&Value>> = node
                .inputs
                .iter()
                .map(|n| if n.is_empty() { None } else { vb.get(n) })
                .collect();
            let outputs: Vec<Value> = node
                .outputs
                .iter()
                .filter_map(|n| va.get(n).cloned())
                .collect();
            // A's outputs are judged under what A's kernel declared.
            let operands = declared_a
                .get(&node.name)
                .copied()
                .unwrap_or(Arithmetic::EXACT);
            match check_declared(node, &inputs, &outputs, operands) {
                Check::Agree => NodeVerdict::Agrees,
                Check::Mismatch { output, wrong } => {
                    let own_inputs: Vec<Option<&Value>> = node
                        .inputs
                        .iter()
                        .map(|n| if n.is_empty() { None } else { va.get(n) })
                        .collect();
                    let own = match check_declared(node, &own_inputs, &outputs, operands) {
                        Check::Agree => Own::Right,
                        Check::Mismatch { output, wrong } => {
                            Own::Wrong(format!("output {output}: {}", describe(&wrong)))
                        }
                        Check::Unsettled(u) => Own::Unjudged(u.to_string()),
                    };
                    NodeVerdict::Diverges {
                        why: format!("output {output}: {}", describe(&wrong)),
                        own,
                    }
                }
                Check::Unsettled(u) => NodeVerdict::Unjudged {
                    why: u.to_string(),
                    max_diff: pairs
                        .iter()
                        .map(|(x, y)| max_diff(x, y))
                        .fold(0.0, f64::max),
                },
            }
        };
        let stop = matches!(
            verdict,
            NodeVerdict::Diverges {
                own: Own::Wrong(_),
                ..
            }
        );
        nodes.push(NodeComparison {
            node: node.name.clone(),
            op: node.op_type.clone(),
            placed,
            verdict,
        });
        if stop {
            break;
        }
    }
    Ok(Comparison { nodes })
}
