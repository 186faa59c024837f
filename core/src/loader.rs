//! Lowers ONNX protobuf (`onnx::ModelProto`) into the IR: tensor decoding for every data type, external
//! data confined to the model's folder, attributes, value types, and model-local functions expanded inline.
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use prost::Message;

use crate::error::{Error, Result};
use crate::ir::{Attr, Dim, Graph, Model, Node, ValueInfo, ValueType};
use crate::proto;
use crate::tensor::{DType, Value};

mod tensor_data;
pub(crate) use tensor_data::per_byte;
pub use tensor_data::{checked_numel, decode_sparse, decode_tensor, tensor_from_pb, value_from_pb};

/// Limits and context for decoding.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Folder that external data paths are resolved against (and confined to).
    pub base_dir: Option<PathBuf>,
    /// Largest tensor, in bytes as held in memory, that may be decoded or declared.
    pub max_tensor_bytes: u64,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            base_dir: None,
            max_tensor_bytes: crate::DEFAULT_MAX_TENSOR_BYTES,
        }
    }
}

/// Decodes and lowers a model from bytes.
pub fn model_from_bytes(bytes: &[u8], opts: &LoadOptions) -> Result<Model> {
    if bytes.is_empty() {
        return Err(Error::Decode("the model file is empty".into()));
    }
    let m = proto::ModelProto::decode(bytes)
        .map_err(|e| Error::Decode(format!("not an ONNX model: {e}")))?;
    lower_model(m, opts)
}

/// Reads, decodes and lowers a model file; external data is resolved next to it.
pub fn model_from_file(path: &Path, opts: &LoadOptions) -> Result<Model> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut opts = opts.clone();
    if opts.base_dir.is_none() {
        opts.base_dir = Some(path.parent().map(Path::to_path_buf).unwrap_or_default());
    }
    model_from_bytes(&bytes, &opts).map_err(|e| match e {
        Error::Decode(m) => Error::Decode(format!("{}: {m}", path.display())),
        Error::InvalidModel(m) => Error::InvalidModel(format!("{}: {m}", path.display())),
        Error::TooLarge { what, bytes, limit } => Error::TooLarge {
            what: format!("{}: {what}", path.display()),
            bytes,
            limit,
        },
        e => e,
    })
}

fn lower_model(m: proto::ModelProto, opts: &LoadOptions) -> Result<Model> {
    let mut opsets = HashMap::new();
    for o in &m.opset_import {
        opsets.insert(normalize_domain(o.domain()).to_string(), o.version());
    }
    if m.opset_import.is_empty() {
        // IR version 2 models and earlier predate opset_import; they mean opset 1 of the default domain.
        opsets.insert(String::new(), 1);
    }
    let functions: HashMap<(String, String), proto::FunctionProto> = m
        .functions
        .iter()
        .map(|f| {
            (
                (
                    normalize_domain(f.domain()).to_string(),
                    f.name().to_string(),
                ),
                f.clone(),
            )
        })
        .collect();
    let producer = format!("{} {}", m.producer_name(), m.producer_version())
        .trim()
        .to_string();
    let g = m
        .graph
        .ok_or_else(|| Error::InvalidModel("the model has no graph".into()))?;
    let newer = crate::opsets::Newer::from_env();
    let mut warnings = Vec::new();
    let used = crate::opsets::resolve(&opsets, newer, &mut warnings)?;
    let cx = Lower {
        opts,
        functions: &functions,
        newer,
        warnings: std::cell::RefCell::new(warnings),
    };
    let graph = cx.graph(g, &used, 0)?;
    Ok(Model {
        ir_version: m.ir_version.unwrap_or(0),
        opsets,
        producer,
        graph,
        metadata: m
            .metadata_props
            .iter()
            .map(|p| (p.key().to_string(), p.value().to_string()))
            .collect(),
        warnings: cx.warnings.into_inner(),
    })
}

/// The default domain is spelled `""` or `"ai.onnx"`; the IR always uses `""`.
pub fn normalize_domain(d: &str) -> &str {
    if d == "ai.onnx" { "" } else { d }
}

struct Lower<'a> {
    opts: &'a LoadOptions,
    functions: &'a HashMap<(String, String), proto::FunctionProto>,
    newer: crate::opsets::Newer,
    warnings: std::cell::RefCell<Vec<String>>,
}

/// Model-local functions may call each other; deeper expansion than this is taken as recursion.
const MAX_FUNCTION_DEPTH: usize = 64;

impl Lower<'_> {
    fn graph(
        &self,
        g: proto::GraphProto,
        opsets: &HashMap<String, i64>,
        depth: usize,
    ) -> Result<Graph> {
        let mut initializers = HashMap::new();
        for t in &g.initializer {
            let tensor = decode_tensor(t, self.opts)
                .map_err(|e| in_context(e, &format!("initializer '{}'", t.name())))?;
            initializers.insert(t.name().to_string(), Arc::new(Value::Tensor(tensor)));
        }
        for s in &g.sparse_initializer {
            let name = s
                .values
                .as_ref()
                .map(|v| v.name().to_string())
                .unwrap_or_default();
            let tensor = decode_sparse(s, self.opts)
                .map_err(|e| in_context(e, &format!("sparse initializer '{name}'")))?;
            initializers.insert(name, Arc::new(Value::Tensor(tensor)));
        }
        let mut nodes = Vec::with_capacity(g.node.len());
        for (i, n) in g.node.iter().enumerate() {
            self.node(n, i, opsets, &HashMap::new(), depth, &mut nodes)?;
        }
        Ok(Graph {
            name: g.name().to_string(),
            nodes,
            inputs: g.input.iter().map(value_info).collect(),
            outputs: g.output.iter().map(value_info).collect(),
            initializers,
            value_info: g
                .value_info
                .iter()
                .map(|v| (v.name().to_string(), value_type(v.r#type.as_ref())))
                .collect(),
        })
    }

    /// Lowers one node into `out`; a call to a model-local function is expanded into its body.
    fn node(
        &self,
        n: &proto::NodeProto,
        index: usize,
        opsets: &HashMap<String, i64>,
        attr_scope: &HashMap<String, proto::AttributeProto>,
        depth: usize,
        out: &mut Vec<Node>,
    ) -> Result<()> {
        let domain = normalize_domain(n.domain()).to_string();
        let name = if n.name().is_empty() {
            format!("{}_{index}", n.op_type())
        } else {
            n.name().to_string()
        };
        let key = (domain.clone(), n.op_type().to_string());
        if let Some(f) = self.functions.get(&key) {
            if depth >= MAX_FUNCTION_DEPTH {
                return Err(Error::InvalidModel(format!(
                    "node '{name}': function '{}' nests too deeply",
                    f.name()
                )));
            }
            return self.expand_function(n, &name, f, attr_scope, depth, out);
        }
        let mut attrs = HashMap::new();
        for a in &n.attribute {
            let a = if !a.ref_attr_name().is_empty() {
                match attr_scope.get(a.ref_attr_name()) {
                    Some(actual) => {
                        let mut actual = actual.clone();
                        actual.name = a.name.clone();
                        actual
                    }
                    None => continue,
                }
            } else {
                a.clone()
            };
            let v = self.attribute(&a, opsets, depth).map_err(|e| match e {
                Error::InvalidModel(m) => Error::InvalidModel(format!(
                    "node '{name}' ({}) attribute '{}': {m}",
                    n.op_type(),
                    a.name()
                )),
                e => e,
            })?;
            attrs.insert(a.name().to_string(), v);
        }
        let opset = opsets.get(&domain).copied().unwrap_or(0);
        out.push(Node {
            name,
            op_type: n.op_type().to_string(),
            domain,
            opset,
            inputs: n.input.clone(),
            outputs: n.output.clone(),
            attrs,
        });
        Ok(())
    }

    fn expand_function(
        &self,
        call: &proto::NodeProto,
        call_name: &str,
        f: &proto::FunctionProto,
        caller_attrs: &HashMap<String, proto::AttributeProto>,
        depth: usize,
        out: &mut Vec<Node>,
    ) -> Result<()> {
        let mut f_opsets = HashMap::new();
        for o in &f.opset_import {
            f_opsets.insert(normalize_domain(o.domain()).to_string(), o.version());
        }
        let f_opsets =
            crate::opsets::resolve(&f_opsets, self.newer, &mut self.warnings.borrow_mut())?;
        // Attribute values: the call's own (resolving its refs against the caller), else the defaults.
        let mut scope: HashMap<String, proto::AttributeProto> = HashMap::new();
        for a in &f.attribute_proto {
            scope.insert(a.name().to_string(), a.clone());
        }
        for a in &call.attribute {
            if !a.ref_attr_name().is_empty() {
                if let Some(v) = caller_attrs.get(a.ref_attr_name()) {
                    scope.insert(a.name().to_string(), v.clone());
                }
            } else {
                scope.insert(a.name().to_string(), a.clone());
            }
        }
        let mut rename: HashMap<String, String> = HashMap::new();
        for (i, formal) in f.input.iter().enumerate() {
            rename.insert(
                formal.clone(),
                call.input.get(i).cloned().unwrap_or_default(),
            );
        }
        for (i, formal) in f.output.iter().enumerate() {
            rename.insert(
                formal.clone(),
                call.output.get(i).cloned().unwrap_or_default(),
            );
        }
        let prefix = format!("{call_name}/{}/", f.name());
        let map = |v: &String, rename: &HashMap<String, String>| -> String {
            if v.is_empty() {
                return String::new();
            }
            rename
                .get(v)
                .cloned()
                .unwrap_or_else(|| format!("{prefix}{v}"))
        };
        for (i, body) in f.node.iter().enumerate() {
            let mut n = body.clone();
            n.input = n.input.iter().map(|v| map(v, &rename)).collect();
            n.output = n.output.iter().map(|v| map(v, &rename)).collect();
            // A Loop's or If's body inside the function reads the function's values by their
            // names in the function: those it does not define itself are renamed as above.
            // Their nodes' attributes may refer to the function's (`ref_attr_name`) too.
            for a in &mut n.attribute {
                for g in a.g.iter_mut().chain(a.graphs.iter_mut()) {
                    rename_free(g, &HashSet::new(), &|v: &String| map(v, &rename));
                    resolve_attribute_refs(g, &scope);
                }
            }
            n.name = Some(format!(
                "{prefix}{}",
                if body.name().is_empty() {
                    format!("{}_{i}", body.op_type())
                } else {
                    body.name().to_string()
                }
            ));
            self.node(&n, i, &f_opsets, &scope, depth + 1, out)?;
        }
        Ok(())
    }

    fn attribute(
        &self,
        a: &proto::AttributeProto,
        opsets: &HashMap<String, i64>,
        depth: usize,
    ) -> Result<Attr> {
        use proto::attribute_proto::AttributeType as T;
        let ty = match a.r#type {
            Some(_) => a.r#type(),
            None => infer_attr_type(a),
        };
        let sub = |g: &proto::GraphProto| self.graph(g.clone(), opsets, depth + 1).map(Arc::new);
        Ok(match ty {
            T::Float => Attr::Float(a.f()),
            T::Int => Attr::Int(a.i()),
            T::String => Attr::String(a.s().to_vec()),
            T::Tensor => Attr::Tensor(decode_tensor(
                a.t.as_ref().ok_or_else(|| missing("t"))?,
                self.opts,
            )?),
            T::Graph => Attr::Graph(sub(a.g.as_ref().ok_or_else(|| missing("g"))?)?),
            T::SparseTensor => Attr::Tensor(decode_sparse(
                a.sparse_tensor
                    .as_ref()
                    .ok_or_else(|| missing("sparse_tensor"))?,
                self.opts,
            )?),
            T::TypeProto => Attr::Type(value_type(a.tp.as_ref())),
            T::Floats => Attr::Floats(a.floats.clone()),
            T::Ints => Attr::Ints(a.ints.clone()),
            T::Strings => Attr::Strings(a.strings.clone()),
            T::Tensors => Attr::Tensors(
                a.tensors
                    .iter()
                    .map(|t| decode_tensor(t, self.opts))
                    .collect::<Result<_>>()?,
            ),
            T::Graphs => Attr::Graphs(a.graphs.iter().map(sub).collect::<Result<_>>()?),
            T::SparseTensors => Attr::Tensors(
                a.sparse_tensors
                    .iter()
                    .map(|t| decode_sparse(t, self.opts))
                    .collect::<Result<_>>()?,
            ),
            T::TypeProtos => {
                Attr::Types(a.type_protos.iter().map(|t| value_type(Some(t))).collect())
            }
            T::Undefined => return Err(Error::InvalidModel("attribute has no type".into())),
        })
    }
}

/// Replaces every attribute of `g`'s nodes (a subgraph of a function body, and the subgraphs
/// inside it) that refers to one of the function's attributes by that attribute's value in this
/// call; one the call does not set and the function gives no default for is dropped, as at the
/// top of the body.
fn resolve_attribute_refs(
    g: &mut proto::GraphProto,
    scope: &HashMap<String, proto::AttributeProto>,
) {
    for n in &mut g.node {
        n.attribute = std::mem::take(&mut n.attribute)
            .into_iter()
            .filter_map(|a| {
                if a.ref_attr_name().is_empty() {
                    return Some(a);
                }
                scope.get(a.ref_attr_name()).map(|v| {
                    let mut v = v.clone();
                    v.name = a.name.clone();
                    v
                })
            })
            .collect();
        for a in &mut n.attribute {
            for sub in a.g.iter_mut().chain(a.graphs.iter_mut()) {
                resolve_attribute_refs(sub, scope);
            }
        }
    }
}

/// Renames every name `g` (a subgraph of a function body) reads but does not define, nor any
/// graph enclosing it inside the function (`local`): those are the function's own values.
fn rename_free(
    g: &mut proto::GraphProto,
    local: &HashSet<String>,
    map: &dyn Fn(&String) -> String,
) {
    let mut here: HashSet<String> = local.clone();
    here.extend(g.input.iter().map(|i| i.name().to_string()));
    here.extend(g.initializer.iter().map(|t| t.name().to_string()));
    here.extend(
        g.sparse_initializer
            .iter()
            .filter_map(|s| s.values.as_ref().map(|v| v.name().to_string())),
    );
    for n in &g.node {
        here.extend(n.output.iter().cloned());
    }
    let free = |v: &mut String| {
        if !v.is_empty() && !here.contains(v.as_str()) {
            *v = map(v);
        }
    };
    for n in &mut g.node {
        n.input.iter_mut().for_each(&free);
        for a in &mut n.attribute {
            for sub in a.g.iter_mut().chain(a.graphs.iter_mut()) {
                rename_free(sub, &here, map);
            }
        }
    }
    for o in &mut g.output {
        if let Some(name) = o.name.as_mut() {
            free(name);
        }
    }
}

/// Prefixes an error's message with where it happened, keeping its kind (a size limit stays `TooLarge`).
fn in_context(e: Error, place: &str) -> Error {
    match e {
        Error::TooLarge { what, bytes, limit } => Error::TooLarge {
            what: format!("{place}: {what}"),
            bytes,
            limit,
        },
        Error::InvalidModel(m) => Error::InvalidModel(format!("{place}: {m}")),
        e => Error::InvalidModel(format!("{place}: {e}")),
    }
}

fn missing(field: &str) -> Error {
    Error::InvalidModel(format!(
        "attribute declares a {field} value but carries none"
    ))
}

/// Very old models leave `type` unset; the populated field says what it is.
fn infer_attr_type(a: &proto::AttributeProto) -> proto::attribute_proto::AttributeType {
    use proto::attribute_proto::AttributeType as T;
    if a.f.is_some() {
        T::Float
    } else if a.i.is_some() {
        T::Int
    } else if a.s.is_some() {
        T::String
    } else if a.t.is_some() {
        T::Tensor
    } else if a.g.is_some() {
        T::Graph
    } else if !a.floats.is_empty() {
        T::Floats
    } else if !a.ints.is_empty() {
        T::Ints
    } else if !a.strings.is_empty() {
        T::Strings
    } else if !a.tensors.is_empty() {
        T::Tensors
    } else if !a.graphs.is_empty() {
        T::Graphs
    } else {
        T::Undefined
    }
}

fn value_info(v: &proto::ValueInfoProto) -> ValueInfo {
    ValueInfo {
        name: v.name().to_string(),
        ty: value_type(v.r#type.as_ref()),
    }
}

/// Lowers a TypeProto; absent parts become `Unknown` / `None`.
pub fn value_type(t: Option<&proto::TypeProto>) -> ValueType {
    use proto::type_proto::Value as V;
    let Some(v) = t.and_then(|t| t.value.as_ref()) else {
        return ValueType::Unknown;
    };
    match v {
        V::TensorType(tt) => ValueType::Tensor {
            dtype: tt.elem_type.and_then(DType::from_onnx),
            shape: tt
                .shape
                .as_ref()
                .map(|s| s.dim.iter().map(|d| dim(d.value.as_ref())).collect()),
        },
        V::SequenceType(s) => ValueType::Sequence(Box::new(value_type(s.elem_type.as_deref()))),
        V::OptionalType(o) => ValueType::Optional(Box::new(value_type(o.elem_type.as_deref()))),
        V::MapType(_) => ValueType::Map,
        V::SparseTensorType(_) => ValueType::SparseTensor,
        V::OpaqueType(_) => ValueType::Unknown,
    }
}

/// Lowers one declared dimension. A real symbol (`batch`, `seq_len`) names a size that every input
/// declaring it must share; `?` (PaddlePaddle's "unknown"), an empty `dim_param`, a negative
/// `dim_value` and an absent dimension say only that the size is not known, so each is its own
/// anonymous [`Dim::Unknown`], never one shared symbol.
fn dim(d: Option<&proto::tensor_shape_proto::dimension::Value>) -> Dim {
    use proto::tensor_shape_proto::dimension::Value as D;
    match d {
        Some(D::DimValue(v)) if *v >= 0 => Dim::Fixed(*v),
        Some(D::DimParam(p)) if !p.is_empty() && p != "?" => Dim::Symbol(p.clone()),
        _ => Dim::Unknown,
    }
}
