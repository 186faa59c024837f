//! Engines `oracle-reference` and `oracle-independent`: a model run node by node through one of the CPU
//! oracles (quorum-oracle). A node the oracle does not cover makes the case `unsupported`, never a pass.
use std::collections::HashMap;
use std::path::Path;

use quorum::ir::{Attr, Model, Node};
use quorum::{DType, Tensor, Value};
use quorum_oracle::{self as oracle, Oracle};

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
}

impl Engine for OracleEngine {
    fn name(&self) -> &str {
        self.name
    }

    /// Opt-in (`--engine oracle-reference`) until the oracle engines' expectation lists are written: both
    /// oracles are new, and a full corpus run through them takes minutes.
    fn runs_by_default(&self) -> bool {
        false
    }

    fn prepare(&self, path: &Path) -> Result<Box<dyn Prepared>, EngineError> {
        let model = quorum::loader::model_from_file(path, &Default::default())
            .map_err(|e| EngineError::Failed(e.to_string()))?;
        let oracle = (self.make)();
        for n in model
            .graph
            .nodes
            .iter()
            .filter(|n| constant_value(n).is_none())
        {
            let spec = node_spec(n)?;
            oracle.supports(&spec).map_err(|why| {
                EngineError::Unsupported(format!("node '{}' ({}): {why}", n.name, n.op_type))
            })?;
        }
        Ok(Box::new(OracleModel { model, oracle }))
    }
}

/// A `Constant` node holding a tensor is data, not computation: the engine binds it without an oracle.
fn constant_value(n: &Node) -> Option<&Tensor> {
    match (n.op_type.as_str(), n.domain.as_str(), n.attrs.get("value")) {
        ("Constant", "", Some(Attr::Tensor(t))) => Some(t),
        _ => None,
    }
}

fn node_spec(n: &Node) -> Result<oracle::NodeSpec, EngineError> {
    let mut attrs = std::collections::BTreeMap::new();
    for (k, a) in &n.attrs {
        let v = match a {
            Attr::Int(v) => oracle::Attr::Int(*v),
            Attr::Float(v) => oracle::Attr::Float(*v as f64),
            Attr::Ints(v) => oracle::Attr::Ints(v.clone()),
            Attr::Floats(v) => oracle::Attr::Floats(v.iter().map(|&x| x as f64).collect()),
            Attr::String(s) => oracle::Attr::String(String::from_utf8_lossy(s).into_owned()),
            Attr::Strings(s) => oracle::Attr::Strings(
                s.iter()
                    .map(|x| String::from_utf8_lossy(x).into_owned())
                    .collect(),
            ),
            other => {
                return Err(EngineError::Unsupported(format!(
                    "node '{}' ({}): attribute '{k}' of kind {} is not passed to the oracles",
                    n.name,
                    n.op_type,
                    other.kind()
                )));
            }
        };
        attrs.insert(k.clone(), v);
    }
    Ok(oracle::NodeSpec {
        domain: n.domain.clone(),
        op_type: n.op_type.clone(),
        opset: n.opset,
        attrs,
        num_outputs: n.outputs.len(),
    })
}

fn to_oracle_dtype(d: DType) -> Option<oracle::DType> {
    use oracle::DType as O;
    Some(match d {
        DType::F32 => O::F32,
        DType::F64 => O::F64,
        DType::F16 => O::F16,
        DType::BF16 => O::BF16,
        DType::I8 => O::I8,
        DType::I16 => O::I16,
        DType::I32 => O::I32,
        DType::I64 => O::I64,
        DType::U8 => O::U8,
        DType::U16 => O::U16,
        DType::U32 => O::U32,
        DType::U64 => O::U64,
        DType::Bool => O::Bool,
        _ => return None,
    })
}

fn from_oracle_dtype(d: oracle::DType) -> DType {
    use oracle::DType as O;
    match d {
        O::F32 => DType::F32,
        O::F64 => DType::F64,
        O::F16 => DType::F16,
        O::BF16 => DType::BF16,
        O::I8 => DType::I8,
        O::I16 => DType::I16,
        O::I32 => DType::I32,
        O::I64 => DType::I64,
        O::U8 => DType::U8,
        O::U16 => DType::U16,
        O::U32 => DType::U32,
        O::U64 => DType::U64,
        O::Bool => DType::Bool,
    }
}

fn to_oracle(t: &Tensor) -> Result<oracle::Value, EngineError> {
    let dtype = to_oracle_dtype(t.dtype()).ok_or_else(|| {
        EngineError::Unsupported(format!("the oracles take no {} values", t.dtype()))
    })?;
    let data = t
        .to_f64_vec()
        .map_err(|e| EngineError::Unsupported(e.to_string()))?;
    oracle::Value::new(dtype, t.shape().to_vec(), data)
        .map_err(|e| EngineError::Failed(e.to_string()))
}

impl Prepared for OracleModel {
    fn run(&self, inputs: Vec<(String, Value)>) -> Result<Vec<Value>, EngineError> {
        let g = &self.model.graph;
        let mut env: HashMap<String, oracle::Value> = HashMap::new();
        for (name, v) in &g.initializers {
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
        // Corpus graphs list nodes in topological order, as the ONNX IR requires.
        for n in &g.nodes {
            if let Some(t) = constant_value(n) {
                if let Some(name) = n.outputs.first() {
                    env.insert(name.clone(), to_oracle(t)?);
                }
                continue;
            }
            let spec = node_spec(n)?;
            let args = n
                .inputs
                .iter()
                .map(|name| {
                    if name.is_empty() {
                        return Ok(None);
                    }
                    env.get(name).cloned().map(Some).ok_or_else(|| {
                        EngineError::Failed(format!(
                            "node '{}': input '{name}' has no value",
                            n.name
                        ))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            let outs = self.oracle.evaluate(&spec, &args).map_err(|e| match e {
                oracle::OracleError::Unsupported(m) => {
                    EngineError::Unsupported(format!("node '{}' ({}): {m}", n.name, n.op_type))
                }
                oracle::OracleError::Invalid(m) => {
                    EngineError::Failed(format!("node '{}' ({}): {m}", n.name, n.op_type))
                }
            })?;
            for (name, o) in n.outputs.iter().zip(outs) {
                if !name.is_empty() {
                    env.insert(name.clone(), o.value);
                }
            }
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
