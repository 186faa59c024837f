//! Execution plans: a graph in topological order with each node's kernel resolved, value lifetimes,
//! and compiled plans for its subgraphs. Built once per session; shared by every `run`.
//! A cycle is an error naming its nodes; a subgraph's references to outer-scope values are
//! resolved here, and count as readers for the outer value's lifetime.
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::ir::{Attr, Graph, Node};
use crate::ops::{InPlace, Kernel, Registry};
use crate::tensor::Value;

/// A plan step an accelerator claimed: which of the session's devices, and the kernel it will run.
#[derive(Debug)]
pub struct DeviceStep {
    pub device: usize,
    pub claim: crate::backend::Claim,
}

pub struct Step {
    pub node: usize,
    pub kernel: Kernel,
    /// Values whose last reader is this step (dropped after it runs).
    pub frees: Vec<String>,
    /// The accelerator and kernel, when the session placed this node on one.
    pub device: Option<DeviceStep>,
    /// The node computes only from tensor shapes and constants (Shape, Size, and small arithmetic
    /// on their results): it runs on the host whatever the placement, reads no device data, and a
    /// graph capture may contain it (its results are fixed by the run's input shapes).
    pub shapes_only: bool,
    /// The kernel's in-place form, where it has one and one of the node's first two inputs dies
    /// here (read once by the node): the executor writes the output over that input when, at run
    /// time, nothing else holds it (the memory plan's in-place rule).
    pub in_place: Option<(InPlace, [bool; 2])>,
}

pub struct Plan {
    pub graph: Arc<Graph>,
    pub steps: Vec<Step>,
    pub initializers: HashMap<String, Arc<Value>>,
    /// Names this graph reads from enclosing scopes.
    pub outer_refs: Vec<String>,
    /// Plans of the subgraph attributes, keyed by the address of their `Graph`.
    pub subplans: HashMap<usize, Arc<Plan>>,
}

/// Names a node reads: its inputs plus whatever its subgraphs take from outer scopes.
pub fn reads(node: &Node, subplans: &HashMap<usize, Arc<Plan>>) -> Vec<String> {
    let mut r: Vec<String> = node
        .inputs
        .iter()
        .filter(|s| !s.is_empty())
        .cloned()
        .collect();
    for g in subgraphs(node) {
        if let Some(p) = subplans.get(&graph_key(g)) {
            r.extend(p.outer_refs.iter().cloned());
        }
    }
    r
}

pub fn graph_key(g: &Graph) -> usize {
    g as *const Graph as usize
}

pub fn subgraphs(node: &Node) -> Vec<&Graph> {
    let mut out = Vec::new();
    for a in node.attrs.values() {
        match a {
            Attr::Graph(g) => out.push(&**g),
            Attr::Graphs(gs) => out.extend(gs.iter().map(|g| &**g)),
            _ => {}
        }
    }
    out
}

impl Plan {
    /// Compiles `graph`; `outer` holds the names visible from enclosing graphs.
    pub fn compile(
        graph: Arc<Graph>,
        registry: &Registry,
        outer: &HashSet<String>,
    ) -> Result<Plan> {
        let g = &*graph;
        let mut defined: HashSet<String> = g.inputs.iter().map(|i| i.name.clone()).collect();
        defined.extend(g.initializers.keys().cloned());
        let mut producer: HashMap<&str, usize> = HashMap::new();
        for (i, n) in g.nodes.iter().enumerate() {
            for o in n.outputs.iter().filter(|o| !o.is_empty()) {
                if producer.insert(o, i).is_some() || defined.contains(o) {
                    return Err(Error::InvalidModel(format!(
                        "value '{o}' is produced more than once (node '{}')",
                        n.name
                    )));
                }
            }
        }
        // Names visible to subgraphs: everything in this graph plus what the enclosing scopes see.
        let mut visible: HashSet<String> = outer.clone();
        visible.extend(defined.iter().cloned());
        visible.extend(producer.keys().map(|s| s.to_string()));
        let mut subplans = HashMap::new();
        for n in &g.nodes {
            for a in n.attrs.values() {
                let gs: Vec<&Arc<Graph>> = match a {
                    Attr::Graph(sg) => vec![sg],
                    Attr::Graphs(sgs) => sgs.iter().collect(),
                    _ => vec![],
                };
                for sg in gs {
                    let p = Plan::compile(sg.clone(), registry, &visible)?;
                    subplans.insert(graph_key(sg), Arc::new(p));
                }
            }
        }
        // Kahn's algorithm over intra-graph edges, keeping the model's order among ready nodes.
        let mut indeg = vec![0usize; g.nodes.len()];
        let mut users: Vec<Vec<usize>> = vec![Vec::new(); g.nodes.len()];
        let mut outer_refs = HashSet::new();
        for (i, n) in g.nodes.iter().enumerate() {
            for name in reads(n, &subplans) {
                if let Some(&p) = producer.get(name.as_str()) {
                    indeg[i] += 1;
                    users[p].push(i);
                } else if !defined.contains(&name) {
                    if outer.contains(&name) {
                        outer_refs.insert(name);
                    } else {
                        return Err(Error::InvalidModel(format!(
                            "node '{}' ({}) reads '{name}', which no node, input or initializer provides",
                            n.name, n.op_type
                        )));
                    }
                }
            }
        }
        let mut ready: std::collections::BTreeSet<usize> =
            (0..g.nodes.len()).filter(|&i| indeg[i] == 0).collect();
        let mut order = Vec::with_capacity(g.nodes.len());
        while let Some(i) = ready.pop_first() {
            order.push(i);
            for &u in &users[i] {
                indeg[u] -= 1;
                if indeg[u] == 0 {
                    ready.insert(u);
                }
            }
        }
        if order.len() != g.nodes.len() {
            let stuck: Vec<&str> = (0..g.nodes.len())
                .filter(|&i| indeg[i] > 0)
                .map(|i| g.nodes[i].name.as_str())
                .take(8)
                .collect();
            return Err(Error::InvalidModel(format!(
                "the graph has a cycle through nodes {stuck:?}"
            )));
        }
        for o in &g.outputs {
            if !defined.contains(&o.name) && !producer.contains_key(o.name.as_str()) {
                if outer.contains(&o.name) {
                    outer_refs.insert(o.name.clone());
                } else {
                    return Err(Error::InvalidModel(format!(
                        "graph output '{}' is never produced",
                        o.name
                    )));
                }
            }
        }
        let mut steps = Vec::with_capacity(order.len());
        for &i in &order {
            let n = &g.nodes[i];
            let kernel = resolve(n, registry)?;
            steps.push(Step {
                node: i,
                kernel,
                frees: Vec::new(),
                device: None,
                shapes_only: false,
                in_place: None,
            });
        }
        // Lifetimes: a value is dropped after its last reader, unless it is a graph output.
        let keep: HashSet<&str> = g.outputs.iter().map(|o| o.name.as_str()).collect();
        let mut last: HashMap<String, usize> = HashMap::new();
        for (s, step) in steps.iter().enumerate() {
            for name in reads(&g.nodes[step.node], &subplans) {
                last.insert(name, s);
            }
        }
        for (name, s) in last {
            if !keep.contains(name.as_str()) && !outer_refs.contains(&name) {
                steps[s].frees.push(name);
            }
        }
        for step in &mut steps {
            let n = &g.nodes[step.node];
            if let Some((f, inputs)) = registry.get_in_place(&n.domain, &n.op_type) {
                let mut donors = donors(n, &step.frees);
                // A unary op's other inputs (Clip's bounds) are never written over.
                donors[inputs.min(2)..].fill(false);
                if donors.contains(&true) {
                    step.in_place = Some((f, donors));
                }
            }
        }
        let initializers = g.initializers.clone();
        let mut outer_refs: Vec<String> = outer_refs.into_iter().collect();
        outer_refs.sort();
        Ok(Plan {
            graph,
            steps,
            initializers,
            outer_refs,
            subplans,
        })
    }
}

/// Which of a node's first two inputs an in-place form may write over: those that die at the node
/// (in `frees`: neither graph outputs nor values of enclosing graphs) and that the node reads once.
/// Whether nothing else holds the value (an initializer, a value a caller kept) is for the executor
/// to see at run time.
pub fn donors(node: &Node, frees: &[String]) -> [bool; 2] {
    let dies = |i: usize| {
        node.inputs.get(i).is_some_and(|name| {
            !name.is_empty()
                && frees.contains(name)
                && node.inputs.iter().filter(|n| *n == name).count() == 1
        })
    };
    [dies(0), dies(1)]
}

/// Finds the CPU kernel for a node, or says precisely why there is none.
pub fn resolve(n: &Node, registry: &Registry) -> Result<Kernel> {
    let unsupported = |reason: String| Error::Unsupported {
        node: n.name.clone(),
        op: n.op_type.clone(),
        domain: if n.domain.is_empty() {
            String::new()
        } else {
            format!("{}::", n.domain)
        },
        opset: n.opset,
        reason,
    };
    if n.opset == 0 {
        return Err(unsupported(format!(
            "the model imports no opset for domain '{}'",
            n.domain
        )));
    }
    registry
        .get(&n.domain, &n.op_type)
        .ok_or_else(|| unsupported("no CPU kernel for this operator".into()))
}
