//! Engines `oracle-reference` and `oracle-independent`: a model run node by node through one of the CPU
//! oracles (quorum-oracle). A node the oracle does not cover makes the case `unsupported`, never a pass.
//!
//! A few nodes hold data rather than computation, and the engine binds them itself: `Constant` (every
//! numeric value form), `Shape` and `Size`. Everything else, `ConstantOfShape`, `Dropout` and
//! `CastLike` included, is the oracle's. Models holding more than [`MAX_WEIGHTS`] weight values are
//! declined (the `light` networks: scalar f64 takes minutes on them).
//!
//! [`compare_oracles`] runs both oracles on every node of a model with the same inputs and reports
//! where they disagree.
use std::collections::HashMap;
use std::path::Path;

use quorum::ir::{Attr, Model, Node};
use quorum::{Tensor, Value};
use quorum_oracle::{self as oracle, Oracle};

use crate::arbitrate::{self, Verdict};
use crate::engine::{Engine, EngineError, Prepared};

pub struct OracleEngine {
    name: &'static str,
    make: fn() -> Box<dyn Oracle + Send + Sync>,
}

pub fn reference() -> OracleEngine {
    OracleEngine {
        name: "oracle-reference",
        make: || Box::new(oracle::reference::Reference),
    }
}

pub fn independent() -> OracleEngine {
    OracleEngine {
        name: "oracle-independent",
        make: || Box::new(oracle::independent::Independent),
    }
}

struct OracleModel {
    model: Model,
    oracle: Box<dyn Oracle + Send + Sync>,
    steps: Vec<Step>,
}

impl Engine for OracleEngine {
    fn name(&self) -> &str {
        self.name
    }

    /// Part of a default run: each oracle engine covers the corpus in seconds (see
    /// `conformance/tests/corpus_oracles.rs`) against its own expectation list.
    fn runs_by_default(&self) -> bool {
        true
    }

    fn prepare(&self, path: &Path) -> Result<Box<dyn Prepared>, EngineError> {
        let model = quorum::loader::model_from_file(path, &Default::default())
            .map_err(|e| EngineError::Failed(e.to_string()))?;
        let oracle = (self.make)();
        let steps = plan(&model, &[oracle.as_ref()])?;
        Ok(Box::new(OracleModel {
            model,
            oracle,
            steps,
        }))
    }
}

/// How the engine executes one node.
enum Step {
    /// Data the engine binds itself.
    Bound(Bound),
    /// Computation, by the oracle.
    Oracle(oracle::NodeSpec),
}

enum Bound {
    /// A `Constant`'s value.
    Value(oracle::Value),
    /// `Shape` with its `start` and `end`.
    Shape(i64, Option<i64>),
    /// `Size`: the element count of input 0.
    Size,
}

/// The most weight values (initializers plus `ConstantOfShape` fills) a model may hold for the oracle
/// engines to run it, unless `QUORUM_ORACLE_MAX_WEIGHTS` says otherwise. Every corpus model but the
/// `light` networks holds under 20 000; of those, squeezenet and shufflenet (1.2 and 1.4 million,
/// seconds through the scalar f64 oracles) fit, and the rest (7 to 144 million weights, 0.7 to 20
/// billion multiply-adds, up to minutes each) are declined.
pub const MAX_WEIGHTS: u64 = 2_000_000;

fn max_weights() -> u64 {
    std::env::var("QUORUM_ORACLE_MAX_WEIGHTS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(MAX_WEIGHTS)
}

/// The weight values a model holds: its initializers' elements and the elements of every
/// `ConstantOfShape` whose shape is an initializer.
fn weight_count(model: &Model) -> u64 {
    let g = &model.graph;
    let mut total: u64 = 0;
    for v in g.initializers.values() {
        if let Value::Tensor(t) = &**v {
            total = total.saturating_add(t.len() as u64);
        }
    }
    for n in g.nodes.iter().filter(|n| n.op_type == "ConstantOfShape") {
        let shape = n.inputs.first().and_then(|i| g.initializers.get(i));
        if let Some(Value::Tensor(t)) = shape.map(|v| &**v)
            && let Ok(dims) = t.to_i64_vec()
        {
            let count = dims
                .iter()
                .fold(1u64, |a, &d| a.saturating_mul(d.max(0) as u64));
            total = total.saturating_add(count);
        }
    }
    total
}

/// Decides how each node runs; a node neither the engine binds nor every given oracle supports makes
/// the model unsupported, as does a model over the weight budget.
fn plan(model: &Model, oracles: &[&(dyn Oracle + Send + Sync)]) -> Result<Vec<Step>, EngineError> {
    let (weights, budget) = (weight_count(model), max_weights());
    if weights > budget {
        return Err(EngineError::Unsupported(format!(
            "the model holds {weights} weight values; the oracle engines decline models over \
             {budget} (scalar f64 would take minutes; QUORUM_ORACLE_MAX_WEIGHTS raises the limit)"
        )));
    }
    let mut steps = Vec::with_capacity(model.graph.nodes.len());
    for n in &model.graph.nodes {
        if let Some(b) = bound(n)? {
            steps.push(Step::Bound(b));
            continue;
        }
        let spec = node_spec(n)?;
        for o in oracles {
            o.supports(&spec).map_err(|why| {
                outside_table(n).unwrap_or_else(|| {
                    EngineError::Unsupported(format!("node '{}' ({}): {why}", n.name, n.op_type))
                })
            })?;
        }
        steps.push(Step::Oracle(spec));
    }
    Ok(steps)
}

/// For a node an oracle declines whose op is not a row of the op table, the engine's rule: the
/// oracles owe the table's ops and nothing beyond them, so the case is unsupported without a line
/// in the expectation list (`EngineError::Uncovered`). `None` for an op of the table, whose gap
/// must be listed with its reason.
fn outside_table(n: &Node) -> Option<EngineError> {
    let default = n.domain.is_empty() || n.domain == "ai.onnx";
    if default && quorum_optable::find(&n.op_type).is_some() {
        return None;
    }
    Some(EngineError::Uncovered(if default {
        format!(
            "node '{}': {} is outside the op table (optable/src/table.rs); the oracles do not \
             implement it",
            n.name, n.op_type
        )
    } else {
        format!(
            "node '{}': {} is in domain {}, outside the default-domain op table",
            n.name, n.op_type, n.domain
        )
    }))
}

/// The engine's own handling of a data node, or `None` for an oracle's node.
fn bound(n: &Node) -> Result<Option<Bound>, EngineError> {
    if !n.domain.is_empty() && n.domain != "ai.onnx" {
        return Ok(None);
    }
    let unsupported =
        |why: &str| EngineError::Unsupported(format!("node '{}' ({}): {why}", n.name, n.op_type));
    Ok(Some(match n.op_type.as_str() {
        "Constant" => {
            let (dtype, shape, data) = match n.attrs.iter().next() {
                Some((_, Attr::Tensor(t))) => return Ok(Some(Bound::Value(to_oracle(t)?))),
                Some((k, Attr::Float(v))) if k == "value_float" => {
                    (oracle::DType::F32, vec![], vec![*v as f64])
                }
                Some((k, Attr::Floats(v))) if k == "value_floats" => (
                    oracle::DType::F32,
                    vec![v.len()],
                    v.iter().map(|&x| x as f64).collect(),
                ),
                Some((k, Attr::Int(v))) if k == "value_int" => {
                    (oracle::DType::I64, vec![], vec![*v as f64])
                }
                Some((k, Attr::Ints(v))) if k == "value_ints" => (
                    oracle::DType::I64,
                    vec![v.len()],
                    v.iter().map(|&x| x as f64).collect(),
                ),
                Some((k, a)) => {
                    return Err(unsupported(&format!(
                        "a Constant's '{k}' ({}) is not passed to the oracles",
                        a.kind()
                    )));
                }
                None => return Err(EngineError::Failed("Constant without a value".into())),
            };
            Bound::Value(
                oracle::Value::new(dtype, shape, data)
                    .map_err(|e| EngineError::Failed(e.to_string()))?,
            )
        }
        "Shape" => Bound::Shape(int_attr(n, "start").unwrap_or(0), int_attr(n, "end")),
        "Size" => Bound::Size,
        _ => return Ok(None),
    }))
}

fn int_attr(n: &Node, name: &str) -> Option<i64> {
    match n.attrs.get(name) {
        Some(Attr::Int(v)) => Some(*v),
        _ => None,
    }
}

/// Runs a bound node on its inputs.
fn run_bound(
    b: &Bound,
    n: &Node,
    args: &[Option<oracle::Value>],
) -> Result<Vec<oracle::Value>, EngineError> {
    let failed = |m: String| EngineError::Failed(format!("node '{}' ({}): {m}", n.name, n.op_type));
    let arg = |i: usize| {
        args.get(i)
            .and_then(|a| a.as_ref())
            .ok_or_else(|| failed(format!("input {i} is missing")))
    };
    let value = |dtype, shape: Vec<usize>, data| {
        oracle::Value::new(dtype, shape, data).map_err(|e| failed(e.to_string()))
    };
    Ok(match b {
        Bound::Value(v) => vec![v.clone()],
        Bound::Shape(start, end) => {
            let shape = &arg(0)?.shape;
            let r = shape.len() as i64;
            let clamp = |i: i64| (if i < 0 { i + r } else { i }).clamp(0, r) as usize;
            let (s, e) = (clamp(*start), clamp(end.unwrap_or(r)));
            let dims: Vec<f64> = shape[s..e.max(s)].iter().map(|&d| d as f64).collect();
            vec![value(oracle::DType::I64, vec![dims.len()], dims)?]
        }
        Bound::Size => vec![value(
            oracle::DType::I64,
            vec![],
            vec![arg(0)?.len() as f64],
        )?],
    })
}

fn node_spec(n: &Node) -> Result<oracle::NodeSpec, EngineError> {
    quorum::verify::node_spec(n).map_err(|why| {
        EngineError::Unsupported(format!("node '{}' ({}): {why}", n.name, n.op_type))
    })
}

use quorum::verify::from_oracle_dtype;

fn to_oracle(t: &Tensor) -> Result<oracle::Value, EngineError> {
    quorum::verify::to_oracle(t).ok_or_else(|| {
        EngineError::Unsupported(format!("the oracles take no {} values", t.dtype()))
    })
}

/// The graph's values before any node runs: initializers and the given inputs.
fn initial_env(
    model: &Model,
    inputs: Vec<(String, Value)>,
) -> Result<HashMap<String, oracle::Value>, EngineError> {
    let mut env: HashMap<String, oracle::Value> = HashMap::new();
    for (name, v) in &model.graph.initializers {
        if let Value::Tensor(t) = &**v {
            env.insert(name.clone(), to_oracle(t)?);
        }
    }
    for (name, v) in inputs {
        let Value::Tensor(t) = v else {
            return Err(EngineError::Unsupported(
                "the oracles take tensors only".into(),
            ));
        };
        env.insert(name, to_oracle(&t)?);
    }
    Ok(env)
}

/// A node's inputs from `env` (`None` for an omitted optional input).
fn node_args(
    n: &Node,
    env: &HashMap<String, oracle::Value>,
) -> Result<Vec<Option<oracle::Value>>, EngineError> {
    n.inputs
        .iter()
        .map(|name| {
            if name.is_empty() {
                return Ok(None);
            }
            env.get(name).cloned().map(Some).ok_or_else(|| {
                EngineError::Failed(format!("node '{}': input '{name}' has no value", n.name))
            })
        })
        .collect()
}

fn oracle_error(n: &Node, e: oracle::OracleError) -> EngineError {
    match e {
        oracle::OracleError::Unsupported(m) => {
            EngineError::Unsupported(format!("node '{}' ({}): {m}", n.name, n.op_type))
        }
        oracle::OracleError::Invalid(m) => {
            EngineError::Failed(format!("node '{}' ({}): {m}", n.name, n.op_type))
        }
    }
}

fn bind_outputs(n: &Node, outs: Vec<oracle::Value>, env: &mut HashMap<String, oracle::Value>) {
    for (name, v) in n.outputs.iter().zip(outs) {
        if !name.is_empty() {
            env.insert(name.clone(), v);
        }
    }
}

impl Prepared for OracleModel {
    fn run(&self, inputs: Vec<(String, Value)>) -> Result<Vec<Value>, EngineError> {
        let g = &self.model.graph;
        let mut env = initial_env(&self.model, inputs)?;
        // Corpus graphs list nodes in topological order, as the ONNX IR requires.
        for (n, step) in g.nodes.iter().zip(&self.steps) {
            let args = node_args(n, &env)?;
            let outs = match step {
                Step::Bound(b) => run_bound(b, n, &args)?,
                Step::Oracle(spec) => self
                    .oracle
                    .evaluate(spec, &args)
                    .map_err(|e| oracle_error(n, e))?
                    .into_iter()
                    .map(|o| o.value)
                    .collect(),
            };
            bind_outputs(n, outs, &mut env);
        }
        g.outputs
            .iter()
            .map(|o| {
                let v = env.get(&o.name).ok_or_else(|| {
                    EngineError::Failed(format!("output '{}' was not produced", o.name))
                })?;
                let t = Tensor::from_f64s(from_oracle_dtype(v.dtype), &v.shape, v.data.clone())
                    .map_err(|e| EngineError::Failed(e.to_string()))?;
                Ok(Value::Tensor(t))
            })
            .collect()
    }
}

/// Where the two oracles gave different answers for one node.
#[derive(Debug, Clone)]
pub struct Disagreement {
    pub node: String,
    pub op: String,
    /// What differed: an output's shape or type, a value (as [`Verdict::OraclesDisagree`]), or one
    /// oracle refusing inputs the other accepted.
    pub what: String,
}

/// Runs the model at `path` on `inputs` through both oracles, node by node, giving every node the same
/// inputs (the reference oracle's values of its predecessors, so that one difference does not spread),
/// and judges each output as [`arbitrate::oracles_agree`] does. `Err` when the pair does not
/// cover the model (as for the engines) or a node fails in both.
pub fn compare_oracles(
    path: &Path,
    inputs: Vec<(String, Value)>,
) -> Result<Vec<Disagreement>, EngineError> {
    let model = quorum::loader::model_from_file(path, &Default::default())
        .map_err(|e| EngineError::Failed(e.to_string()))?;
    let (r, i) = (
        oracle::reference::Reference,
        oracle::independent::Independent,
    );
    let steps = plan(&model, &[&r, &i])?;
    let mut env = initial_env(&model, inputs)?;
    let mut found = Vec::new();
    for (n, step) in model.graph.nodes.iter().zip(&steps) {
        let args = node_args(n, &env)?;
        let spec = match step {
            Step::Bound(b) => {
                bind_outputs(n, run_bound(b, n, &args)?, &mut env);
                continue;
            }
            Step::Oracle(spec) => spec,
        };
        let mut note = |what: String| {
            found.push(Disagreement {
                node: n.name.clone(),
                op: n.op_type.clone(),
                what,
            })
        };
        let (a, b) = match (r.evaluate(spec, &args), i.evaluate(spec, &args)) {
            (Ok(a), Ok(b)) => (a, b),
            // A form one oracle declines only when it sees the inputs: a coverage gap.
            (Err(e @ oracle::OracleError::Unsupported(_)), _)
            | (_, Err(e @ oracle::OracleError::Unsupported(_))) => {
                return Err(oracle_error(n, e));
            }
            (Err(e), Ok(_)) => {
                note(format!(
                    "reference rejects the inputs ({e}), independent computes"
                ));
                return Ok(found);
            }
            (Ok(_), Err(e)) => {
                note(format!(
                    "independent rejects the inputs ({e}), reference computes"
                ));
                return Ok(found);
            }
            (Err(e), Err(_)) => return Err(oracle_error(n, e)),
        };
        if a.len() != b.len() {
            note(format!("{} outputs vs {}", a.len(), b.len()));
        }
        for (k, (x, y)) in a.iter().zip(&b).enumerate() {
            if x.value.shape != y.value.shape || x.value.dtype != y.value.dtype {
                note(format!(
                    "output {k}: {:?}{:?} vs {:?}{:?}",
                    x.value.dtype, x.value.shape, y.value.dtype, y.value.shape
                ));
                continue;
            }
            let v = arbitrate::oracles_agree(x, y);
            if let Verdict::OraclesDisagree { .. } = v {
                note(format!("output {k}: {v:?}"));
            }
        }
        bind_outputs(n, a.into_iter().map(|o| o.value).collect(), &mut env);
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(domain: &str, op: &str) -> Node {
        Node {
            name: "n0".into(),
            op_type: op.into(),
            domain: domain.into(),
            opset: 17,
            inputs: vec![],
            outputs: vec![],
            attrs: Default::default(),
        }
    }

    /// The rule covers ops outside the op table only: a table op an oracle declines is a gap that
    /// must be listed with its reason, in the default domain under either of its names.
    #[test]
    fn only_ops_outside_the_table_are_unsupported_by_rule() {
        for (domain, op) in [
            ("", "Acos"),
            ("ai.onnx", "Acos"),
            ("ai.onnx.ml", "LabelEncoder"),
        ] {
            assert!(
                matches!(
                    outside_table(&node(domain, op)),
                    Some(EngineError::Uncovered(_))
                ),
                "{domain}:{op}"
            );
        }
        // A table op in another domain is not the table's op.
        assert!(outside_table(&node("com.microsoft", "Softmax")).is_some());
        for row in quorum_optable::ROWS {
            for domain in ["", "ai.onnx"] {
                assert!(
                    outside_table(&node(domain, row.name)).is_none(),
                    "{}: a row of the table was taken for an op outside it",
                    row.name
                );
            }
        }
    }
}
