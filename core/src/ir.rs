//! The intermediate representation a model is lowered to: graphs, nodes with decoded attributes and
//! resolved opsets, value types with symbolic dims. Nothing here refers to protobuf types.
use std::collections::HashMap;
use std::sync::Arc;

use crate::tensor::{DType, Tensor, Value};

/// A dimension as a model declares it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Dim {
    Fixed(i64),
    Symbol(String),
    Unknown,
}

impl std::fmt::Display for Dim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dim::Fixed(v) => write!(f, "{v}"),
            Dim::Symbol(s) => f.write_str(s),
            Dim::Unknown => f.write_str("?"),
        }
    }
}

/// A declared value type (graph inputs, outputs, value_info).
#[derive(Debug, Clone, PartialEq)]
pub enum ValueType {
    Tensor {
        dtype: Option<DType>,
        shape: Option<Vec<Dim>>,
    },
    Sequence(Box<ValueType>),
    Optional(Box<ValueType>),
    Map,
    SparseTensor,
    Unknown,
}

impl std::fmt::Display for ValueType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ValueType::Tensor { dtype, shape } => {
                match dtype {
                    Some(d) => write!(f, "{d}")?,
                    None => f.write_str("tensor")?,
                }
                match shape {
                    Some(s) => write!(
                        f,
                        "[{}]",
                        s.iter()
                            .map(|d| d.to_string())
                            .collect::<Vec<_>>()
                            .join(",")
                    ),
                    None => f.write_str("[*]"),
                }
            }
            ValueType::Sequence(e) => write!(f, "sequence<{e}>"),
            ValueType::Optional(e) => write!(f, "optional<{e}>"),
            ValueType::Map => f.write_str("map"),
            ValueType::SparseTensor => f.write_str("sparse_tensor"),
            ValueType::Unknown => f.write_str("?"),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ValueInfo {
    pub name: String,
    pub ty: ValueType,
}

/// A decoded attribute value.
#[derive(Debug, Clone)]
pub enum Attr {
    Float(f32),
    Int(i64),
    String(Vec<u8>),
    Tensor(Tensor),
    Graph(Arc<Graph>),
    Floats(Vec<f32>),
    Ints(Vec<i64>),
    Strings(Vec<Vec<u8>>),
    Tensors(Vec<Tensor>),
    Graphs(Vec<Arc<Graph>>),
    Type(ValueType),
    Types(Vec<ValueType>),
}

impl Attr {
    pub fn kind(&self) -> &'static str {
        match self {
            Attr::Float(_) => "float",
            Attr::Int(_) => "int",
            Attr::String(_) => "string",
            Attr::Tensor(_) => "tensor",
            Attr::Graph(_) => "graph",
            Attr::Floats(_) => "floats",
            Attr::Ints(_) => "ints",
            Attr::Strings(_) => "strings",
            Attr::Tensors(_) => "tensors",
            Attr::Graphs(_) => "graphs",
            Attr::Type(_) => "type_proto",
            Attr::Types(_) => "type_protos",
        }
    }
}

/// One operator application. `opset` is the version of `domain` in force where the node sits.
#[derive(Debug, Clone)]
pub struct Node {
    pub name: String,
    pub op_type: String,
    /// Normalised: the default domain is `""` (never `"ai.onnx"`).
    pub domain: String,
    pub opset: i64,
    /// Input value names; `""` marks an omitted optional input.
    pub inputs: Vec<String>,
    /// Output value names; `""` marks an output the model does not want.
    pub outputs: Vec<String>,
    pub attrs: HashMap<String, Attr>,
}

impl Node {
    /// `domain::Op` for custom domains, `Op` for the default one.
    pub fn qualified_op(&self) -> String {
        if self.domain.is_empty() {
            self.op_type.clone()
        } else {
            format!("{}::{}", self.domain, self.op_type)
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Graph {
    pub name: String,
    pub nodes: Vec<Node>,
    pub inputs: Vec<ValueInfo>,
    pub outputs: Vec<ValueInfo>,
    /// Always `Value::Tensor`; shared (not copied) with every plan and run of the graph.
    pub initializers: HashMap<String, Arc<Value>>,
    pub value_info: HashMap<String, ValueType>,
}

impl Graph {
    /// Graph inputs that are not also initializers: what a caller must (or may) feed.
    pub fn runtime_inputs(&self) -> impl Iterator<Item = &ValueInfo> {
        self.inputs
            .iter()
            .filter(|i| !self.initializers.contains_key(&i.name))
    }
}

#[derive(Debug, Clone)]
pub struct Model {
    pub ir_version: i64,
    /// Domain → version as the model declares it; the default domain is keyed `""`. Nodes carry the
    /// version they run at (`Node::opset`), which differs only where `warnings` says so.
    pub opsets: HashMap<String, i64>,
    pub producer: String,
    pub graph: Graph,
    pub metadata: Vec<(String, String)>,
    /// What loading accepted but a person should hear about (e.g. a newer opset run as an older
    /// one, `crate::opsets`); the CLI prints each line as a warning.
    pub warnings: Vec<String>,
}

impl Model {
    /// A model of these parts at ONNX opset 17, IR version 8, for unit tests (of this crate and of
    /// the session's).
    #[doc(hidden)]
    pub fn for_test(
        nodes: Vec<Node>,
        inputs: Vec<ValueInfo>,
        outputs: Vec<ValueInfo>,
        initializers: HashMap<String, Arc<Value>>,
    ) -> Model {
        Model {
            ir_version: 8,
            opsets: [(String::new(), 17)].into(),
            producer: "test".into(),
            graph: Graph {
                name: "g".into(),
                nodes,
                inputs,
                outputs,
                initializers,
                value_info: Default::default(),
            },
            metadata: vec![],
            warnings: vec![],
        }
    }
}

impl Model {
    /// Every node of the model, subgraphs included, depth first.
    pub fn all_nodes(&self) -> Vec<&Node> {
        fn walk<'a>(g: &'a Graph, out: &mut Vec<&'a Node>) {
            for n in &g.nodes {
                out.push(n);
                for a in n.attrs.values() {
                    match a {
                        Attr::Graph(sub) => walk(sub, out),
                        Attr::Graphs(subs) => subs.iter().for_each(|s| walk(s, out)),
                        _ => {}
                    }
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.graph, &mut out);
        out
    }
}
