//! `Session`: a loaded, planned model that can be run many times, from many threads at once.
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, OpError, OpResult, Result};
use crate::ir::{Dim, Graph, Model, ValueType};
use crate::loader::{self, LoadOptions};
use crate::ops::{OpCtx, Registry, SubgraphRunner};
use crate::plan::{Plan, graph_key};
use crate::tensor::Value;

/// How a session is built.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// Largest tensor (bytes in memory) that loading or running may create; larger is an error.
    pub max_tensor_bytes: u64,
    /// Most iterations one `Loop` node may run; more is an error. A Loop whose trip count and condition
    /// come from data could otherwise run forever.
    pub max_loop_iterations: u64,
    /// Values for symbolic input dims, used by tools that generate inputs (`quorum bench`).
    pub dims: HashMap<String, i64>,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            max_tensor_bytes: crate::DEFAULT_MAX_TENSOR_BYTES,
            max_loop_iterations: crate::DEFAULT_MAX_LOOP_ITERATIONS,
            dims: HashMap::new(),
        }
    }
}

pub struct Session {
    model: Model,
    plan: Plan,
    options: SessionOptions,
}

impl Session {
    pub fn from_file(path: impl AsRef<Path>, options: SessionOptions) -> Result<Session> {
        let lo = LoadOptions {
            base_dir: None,
            max_tensor_bytes: options.max_tensor_bytes,
        };
        let path = path.as_ref();
        let model = loader::model_from_file(path, &lo)?;
        Session::from_model(model, options).map_err(|e| match e {
            Error::Unsupported {
                node,
                op,
                domain,
                opset,
                reason,
            } => Error::Unsupported {
                node,
                op,
                domain,
                opset,
                reason: format!("{reason} (in {})", path.display()),
            },
            Error::InvalidModel(m) => Error::InvalidModel(format!("{}: {m}", path.display())),
            e => e,
        })
    }

    pub fn from_bytes(bytes: &[u8], options: SessionOptions) -> Result<Session> {
        let lo = LoadOptions {
            base_dir: None,
            max_tensor_bytes: options.max_tensor_bytes,
        };
        let model = loader::model_from_bytes(bytes, &lo)?;
        Session::from_model(model, options)
    }

    pub fn from_model(model: Model, options: SessionOptions) -> Result<Session> {
        let plan = Plan::compile(
            Arc::new(model.graph.clone()),
            Registry::cpu(),
            &HashSet::new(),
        )?;
        Ok(Session {
            model,
            plan,
            options,
        })
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    pub fn options(&self) -> &SessionOptions {
        &self.options
    }

    /// Runs the model. `inputs` are (name, value) pairs for the graph's runtime inputs; the result holds
    /// every graph output in declaration order.
    pub fn run(&self, inputs: Vec<(String, Value)>) -> Result<Vec<(String, Value)>> {
        let graph = &self.plan.graph;
        self.check_inputs(graph, &inputs)?;
        let exec = Exec {
            max_tensor_bytes: self.options.max_tensor_bytes,
            max_loop_iterations: self.options.max_loop_iterations,
        };
        let outs = exec.run_plan(&self.plan, inputs, None)?;
        Ok(graph
            .outputs
            .iter()
            .map(|o| o.name.clone())
            .zip(outs)
            .collect())
    }

    fn check_inputs(&self, graph: &Graph, inputs: &[(String, Value)]) -> Result<()> {
        let declared: HashMap<&str, &ValueType> = graph
            .inputs
            .iter()
            .map(|i| (i.name.as_str(), &i.ty))
            .collect();
        let given: HashSet<&str> = inputs.iter().map(|(n, _)| n.as_str()).collect();
        let mut bound: HashMap<&str, (usize, &str)> = HashMap::new();
        for (name, value) in inputs {
            let Some(ty) = declared.get(name.as_str()) else {
                let expected: Vec<&str> = graph.runtime_inputs().map(|i| i.name.as_str()).collect();
                return Err(Error::Input {
                    name: name.clone(),
                    msg: format!("the model has no such input (it takes {expected:?})"),
                });
            };
            if let (ValueType::Tensor { dtype, shape }, Value::Tensor(t)) = (ty, value) {
                if let Some(d) = dtype {
                    if *d != t.dtype() {
                        return Err(Error::Input {
                            name: name.clone(),
                            msg: format!("expected {d}, got {}", t.dtype()),
                        });
                    }
                }
                if let Some(shape) = shape {
                    let err = || Error::Input {
                        name: name.clone(),
                        msg: format!("expected shape {ty}, got {:?}", t.shape()),
                    };
                    if shape.len() != t.rank() {
                        return Err(err());
                    }
                    for (d, &actual) in shape.iter().zip(t.shape()) {
                        match d {
                            Dim::Fixed(v) if *v >= 0 && *v as usize != actual => return Err(err()),
                            Dim::Symbol(s) => {
                                if let Some((prev, other)) = bound.insert(s, (actual, name)) {
                                    if prev != actual {
                                        return Err(Error::Input {
                                            name: name.clone(),
                                            msg: format!(
                                                "dim '{s}' is {actual} here but {prev} in input '{other}'"
                                            ),
                                        });
                                    }
                                }
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
        for i in graph.runtime_inputs() {
            if !given.contains(i.name.as_str()) {
                return Err(Error::Input {
                    name: i.name.clone(),
                    msg: format!("required input of type {} was not given", i.ty),
                });
            }
        }
        Ok(())
    }
}

/// Values visible while a graph runs, chained to the scope of the enclosing graph.
struct Scope<'p> {
    values: HashMap<String, Arc<Value>>,
    parent: Option<&'p Scope<'p>>,
}

impl Scope<'_> {
    fn get(&self, name: &str) -> Option<&Arc<Value>> {
        self.values
            .get(name)
            .or_else(|| self.parent.and_then(|p| p.get(name)))
    }
}

struct Exec {
    max_tensor_bytes: u64,
    max_loop_iterations: u64,
}

struct Runner<'a> {
    exec: &'a Exec,
    plan: &'a Plan,
    scope: &'a Scope<'a>,
}

impl SubgraphRunner for Runner<'_> {
    fn run_subgraph(&self, graph: &Graph, inputs: Vec<Value>) -> OpResult<Vec<Value>> {
        let plan =
            self.plan.subplans.get(&graph_key(graph)).ok_or_else(|| {
                OpError::Invalid("subgraph was not compiled with its parent".into())
            })?;
        let named = plan
            .graph
            .inputs
            .iter()
            .map(|i| i.name.clone())
            .zip(inputs)
            .collect();
        self.exec
            .run_plan(plan, named, Some(self.scope))
            .map_err(|e| OpError::Invalid(format!("in subgraph '{}': {e}", graph.name)))
    }

    fn max_loop_iterations(&self) -> u64 {
        self.exec.max_loop_iterations
    }
}

impl Exec {
    fn run_plan(
        &self,
        plan: &Plan,
        inputs: Vec<(String, Value)>,
        parent: Option<&Scope>,
    ) -> Result<Vec<Value>> {
        let g = &*plan.graph;
        let mut scope = Scope {
            values: plan.initializers.clone(),
            parent,
        };
        for (name, v) in inputs {
            scope.values.insert(name, Arc::new(v));
        }
        for step in &plan.steps {
            let node = &g.nodes[step.node];
            let args: Vec<Option<Arc<Value>>> = node
                .inputs
                .iter()
                .map(|name| {
                    if name.is_empty() {
                        return Ok(None);
                    }
                    scope.get(name).cloned().map(Some).ok_or_else(|| Error::Node {
                        node: node.name.clone(),
                        op: node.op_type.clone(),
                        shapes: String::new(),
                        msg: format!("input '{name}' has no value (an optional input that was not given?)"),
                    })
                })
                .collect::<Result<_>>()?;
            let refs: Vec<Option<&Value>> = args.iter().map(|a| a.as_deref()).collect();
            let outs = {
                let runner = Runner {
                    exec: self,
                    plan,
                    scope: &scope,
                };
                let ctx = OpCtx {
                    node,
                    runner: &runner,
                    max_tensor_bytes: self.max_tensor_bytes,
                };
                (step.kernel)(&ctx, &refs)
            };
            let outs = outs.map_err(|e| {
                let shapes = format!(
                    "[{}]",
                    refs.iter()
                        .map(|r| r.map_or("-".into(), |v| v.describe()))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                match e {
                    OpError::Unsupported(reason) => Error::Unsupported {
                        node: node.name.clone(),
                        op: node.op_type.clone(),
                        domain: if node.domain.is_empty() {
                            String::new()
                        } else {
                            format!("{}::", node.domain)
                        },
                        opset: node.opset,
                        reason: format!("{reason} (inputs {shapes})"),
                    },
                    OpError::Invalid(msg) => Error::Node {
                        node: node.name.clone(),
                        op: node.op_type.clone(),
                        shapes,
                        msg,
                    },
                }
            })?;
            drop(refs);
            drop(args);
            let wanted = node
                .outputs
                .iter()
                .rposition(|o| !o.is_empty())
                .map_or(0, |p| p + 1);
            if outs.len() < wanted {
                return Err(Error::Node {
                    node: node.name.clone(),
                    op: node.op_type.clone(),
                    shapes: String::new(),
                    msg: format!(
                        "kernel produced {} outputs, the node names {wanted}",
                        outs.len()
                    ),
                });
            }
            for (name, v) in node.outputs.iter().zip(outs) {
                if !name.is_empty() {
                    scope.values.insert(name.clone(), Arc::new(v));
                }
            }
            for f in &step.frees {
                scope.values.remove(f);
            }
        }
        g.outputs
            .iter()
            .map(|o| {
                let v = scope
                    .values
                    .remove(&o.name)
                    .or_else(|| scope.get(&o.name).cloned())
                    .ok_or_else(|| {
                        Error::InvalidModel(format!("graph output '{}' was not produced", o.name))
                    })?;
                Ok(Arc::try_unwrap(v).unwrap_or_else(|a| (*a).clone()))
            })
            .collect()
    }
}
