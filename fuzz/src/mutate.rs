//! Structure-aware mutations of a decoded `ModelProto`, and byte mutations of its encoding.
//!
//! A mutation holds raw selectors (`usize`) that are reduced modulo what the model has when it is
//! applied, so one strategy serves every model and a printed mutation replays exactly.
use proptest::prelude::*;
use quorum::proto::{
    self, AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, TypeProto,
    attribute_proto::AttributeType,
    tensor_shape_proto::{Dimension, dimension},
    type_proto,
};

/// A change to one graph of the model (`graph` selects among the main graph and every subgraph,
/// depth first).
#[derive(Debug, Clone)]
pub struct Mutation {
    pub graph: usize,
    pub kind: Kind,
}

#[derive(Debug, Clone)]
pub enum Kind {
    /// One dim of a declared input, output or value_info type.
    TypeDim { value: usize, dim: usize, to: i64 },
    /// Makes a dim of a declared type symbolic (shared symbols tie inputs together).
    TypeSymbol {
        value: usize,
        dim: usize,
        symbol: u8,
    },
    /// The element type of a declared input, output or value_info.
    TypeElem { value: usize, to: i32 },
    /// The rank of a declared type: dims added or dropped.
    TypeRank { value: usize, rank: usize },
    /// An initializer's dims (its data left as it was).
    InitDims { init: usize, dims: Vec<i64> },
    /// An initializer's data type (its data left as it was).
    InitType { init: usize, to: i32 },
    /// An initializer's raw bytes cut to a length.
    InitTruncate { init: usize, len: usize },
    /// A byte of an initializer's raw data xor-ed (NaN, Inf, huge or negative values).
    InitFlip { init: usize, byte: usize, xor: u8 },
    /// An initializer removed (its readers now dangle, or become graph inputs without a value).
    RemoveInit { init: usize },
    /// A node input cleared to "" (an omitted optional input).
    ClearInput { node: usize, input: usize },
    /// A node input removed from the list.
    RemoveInput { node: usize, input: usize },
    /// A node input repeated at the end.
    DuplicateInput { node: usize, input: usize },
    /// A node input pointed at another name of the graph (possibly a later node's output: a cycle) or
    /// at a fresh name.
    Rewire {
        node: usize,
        input: usize,
        to: usize,
    },
    /// A node output renamed to another name of the graph (duplicate producers) or a fresh name.
    RenameOutput {
        node: usize,
        output: usize,
        to: usize,
    },
    /// A node deleted.
    RemoveNode { node: usize },
    /// A node's op type replaced.
    OpType { node: usize, to: usize },
    /// A node's domain replaced.
    Domain { node: usize, to: usize },
    /// An int attribute (or one entry of an ints attribute) set.
    AttrInt { node: usize, attr: usize, to: i64 },
    /// An attribute's declared type changed, its value fields left as they were.
    AttrType { node: usize, attr: usize, to: i32 },
    /// An attribute removed.
    RemoveAttr { node: usize, attr: usize },
    /// A node wrapped in `depth` nested If nodes (its inputs now outer-scope references).
    NestInIf { node: usize, depth: usize },
    /// A graph output repeated.
    DuplicateOutput { output: usize },
    /// The default-domain opset set.
    Opset { to: i64 },
}

/// A change to the encoded bytes, applied after the structural mutations.
#[derive(Debug, Clone)]
pub enum Bytes {
    Keep,
    /// Cut to `per_mille` / 1000 of the length.
    Truncate {
        per_mille: usize,
    },
    /// Bytes at (position per mille of the length) xor-ed.
    Flip {
        at: Vec<(usize, u8)>,
    },
}

const OPS: &[&str] = &[
    "Add",
    "Relu",
    "Reshape",
    "Expand",
    "ConstantOfShape",
    "Tile",
    "Range",
    "Loop",
    "If",
    "Scan",
    "Concat",
    "Gather",
    "Conv",
    "MatMul",
    "Slice",
    "Pad",
    "Resize",
    "Split",
    "NoSuchOp",
    "",
];

const DOMAINS: &[&str] = &[
    "",
    "ai.onnx",
    "ai.onnx.ml",
    "com.microsoft",
    "no.such.domain",
];

fn dim_value() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(0i64),
        Just(1),
        Just(-1),
        Just(-7),
        Just(1 << 20),
        Just(1 << 40),
        Just(1 << 62),
        Just(i64::MAX),
        Just(i64::MIN),
        0i64..16,
    ]
}

fn data_type() -> impl Strategy<Value = i32> {
    prop_oneof![0i32..=26, Just(-1), Just(1000)]
}

fn kind() -> impl Strategy<Value = Kind> {
    let u = || any::<usize>();
    prop_oneof![
        (u(), u(), dim_value()).prop_map(|(value, dim, to)| Kind::TypeDim { value, dim, to }),
        (u(), u(), 0u8..3).prop_map(|(value, dim, symbol)| Kind::TypeSymbol { value, dim, symbol }),
        (u(), data_type()).prop_map(|(value, to)| Kind::TypeElem { value, to }),
        (u(), 0usize..7).prop_map(|(value, rank)| Kind::TypeRank { value, rank }),
        (u(), prop::collection::vec(dim_value(), 0..4))
            .prop_map(|(init, dims)| Kind::InitDims { init, dims }),
        (u(), data_type()).prop_map(|(init, to)| Kind::InitType { init, to }),
        (u(), 0usize..64).prop_map(|(init, len)| Kind::InitTruncate { init, len }),
        (u(), u(), any::<u8>()).prop_map(|(init, byte, xor)| Kind::InitFlip { init, byte, xor }),
        u().prop_map(|init| Kind::RemoveInit { init }),
        (u(), u()).prop_map(|(node, input)| Kind::ClearInput { node, input }),
        (u(), u()).prop_map(|(node, input)| Kind::RemoveInput { node, input }),
        (u(), u()).prop_map(|(node, input)| Kind::DuplicateInput { node, input }),
        (u(), u(), u()).prop_map(|(node, input, to)| Kind::Rewire { node, input, to }),
        (u(), u(), u()).prop_map(|(node, output, to)| Kind::RenameOutput { node, output, to }),
        u().prop_map(|node| Kind::RemoveNode { node }),
        (u(), u()).prop_map(|(node, to)| Kind::OpType { node, to }),
        (u(), u()).prop_map(|(node, to)| Kind::Domain { node, to }),
        (u(), u(), dim_value()).prop_map(|(node, attr, to)| Kind::AttrInt { node, attr, to }),
        (u(), u(), 0i32..16).prop_map(|(node, attr, to)| Kind::AttrType { node, attr, to }),
        (u(), u()).prop_map(|(node, attr)| Kind::RemoveAttr { node, attr }),
        (u(), 1usize..6).prop_map(|(node, depth)| Kind::NestInIf { node, depth }),
        u().prop_map(|output| Kind::DuplicateOutput { output }),
        prop_oneof![Just(0i64), Just(1), Just(7), Just(13), Just(99), Just(-3)]
            .prop_map(|to| Kind::Opset { to }),
    ]
}

pub fn mutation() -> impl Strategy<Value = Mutation> {
    (0usize..4, kind()).prop_map(|(graph, kind)| Mutation { graph, kind })
}

pub fn bytes_mutation() -> impl Strategy<Value = Bytes> {
    prop_oneof![
        6 => Just(Bytes::Keep),
        1 => (0usize..1000).prop_map(|per_mille| Bytes::Truncate { per_mille }),
        1 => prop::collection::vec((0usize..1000, 1u8..=255), 1..4).prop_map(|at| Bytes::Flip { at }),
    ]
}

/// Applies `m` to the selected graph of `model`; selectors wrap around, and a mutation that finds
/// nothing to act on (an initializer in a graph without any) does nothing.
pub fn apply(model: &mut ModelProto, m: &Mutation) {
    if let Kind::Opset { to } = m.kind {
        for o in &mut model.opset_import {
            if o.domain.as_deref().unwrap_or("").is_empty() {
                o.version = Some(to);
            }
        }
        return;
    }
    let Some(main) = model.graph.as_mut() else {
        return;
    };
    let count = count_graphs(main);
    let mut target = m.graph % count;
    with_graph(main, &mut target, &mut |g| apply_to_graph(g, &m.kind));
}

pub fn apply_bytes(bytes: &mut Vec<u8>, b: &Bytes) {
    match b {
        Bytes::Keep => {}
        Bytes::Truncate { per_mille } => bytes.truncate(bytes.len() * per_mille / 1000),
        Bytes::Flip { at } => {
            let n = bytes.len();
            for &(pos, xor) in at {
                if n > 0 {
                    bytes[pos * n / 1000 % n] ^= xor;
                }
            }
        }
    }
}

fn subgraphs_mut(g: &mut GraphProto) -> impl Iterator<Item = &mut GraphProto> {
    g.node
        .iter_mut()
        .flat_map(|n| n.attribute.iter_mut())
        .flat_map(|a| a.g.iter_mut().chain(a.graphs.iter_mut()))
}

fn count_graphs(g: &mut GraphProto) -> usize {
    1 + subgraphs_mut(g).map(count_graphs).sum::<usize>()
}

/// Calls `f` on the `target`-th graph (depth first); `target` counts down as graphs are passed.
fn with_graph(g: &mut GraphProto, target: &mut usize, f: &mut dyn FnMut(&mut GraphProto)) -> bool {
    if *target == 0 {
        f(g);
        return true;
    }
    *target -= 1;
    for sub in subgraphs_mut(g) {
        if with_graph(sub, target, f) {
            return true;
        }
    }
    false
}

fn pick<T>(items: &mut [T], i: usize) -> Option<&mut T> {
    if items.is_empty() {
        None
    } else {
        let n = items.len();
        items.get_mut(i % n)
    }
}

fn tensor_type(ty: &mut Option<TypeProto>) -> Option<&mut type_proto::Tensor> {
    match ty.as_mut()?.value.as_mut()? {
        type_proto::Value::TensorType(t) => Some(t),
        _ => None,
    }
}

/// Every name in the graph (inputs, initializers, node outputs) plus one fresh name, in a fixed order.
fn names(g: &GraphProto) -> Vec<String> {
    let mut names: Vec<String> = g.input.iter().filter_map(|v| v.name.clone()).collect();
    names.extend(g.initializer.iter().filter_map(|t| t.name.clone()));
    names.extend(g.node.iter().flat_map(|n| n.output.iter().cloned()));
    names.push("fresh_name".into());
    names
}

fn apply_to_graph(g: &mut GraphProto, kind: &Kind) {
    match *kind {
        Kind::TypeDim { value, dim, to } => {
            if let Some(t) = declared(g, value)
                && let Some(d) = t.shape.as_mut().and_then(|s| pick(&mut s.dim, dim))
            {
                d.value = Some(dimension::Value::DimValue(to));
            }
        }
        Kind::TypeSymbol { value, dim, symbol } => {
            if let Some(t) = declared(g, value)
                && let Some(d) = t.shape.as_mut().and_then(|s| pick(&mut s.dim, dim))
            {
                d.value = Some(dimension::Value::DimParam(format!("sym{symbol}")));
            }
        }
        Kind::TypeElem { value, to } => {
            if let Some(t) = declared(g, value) {
                t.elem_type = Some(to);
            }
        }
        Kind::TypeRank { value, rank } => {
            if let Some(t) = declared(g, value) {
                let shape = t.shape.get_or_insert_with(Default::default);
                shape.dim.resize(
                    rank,
                    Dimension {
                        value: Some(dimension::Value::DimValue(2)),
                        denotation: None,
                    },
                );
            }
        }
        Kind::InitDims { init, ref dims } => {
            if let Some(t) = pick(&mut g.initializer, init) {
                t.dims = dims.clone();
            }
        }
        Kind::InitType { init, to } => {
            if let Some(t) = pick(&mut g.initializer, init) {
                t.data_type = Some(to);
            }
        }
        Kind::InitTruncate { init, len } => {
            if let Some(t) = pick(&mut g.initializer, init) {
                truncate_data(t, len);
            }
        }
        Kind::InitFlip { init, byte, xor } => {
            if let Some(raw) = pick(&mut g.initializer, init).and_then(|t| t.raw_data.as_mut())
                && !raw.is_empty()
            {
                let n = raw.len();
                raw[byte % n] ^= xor;
            }
        }
        Kind::RemoveInit { init } => {
            if !g.initializer.is_empty() {
                let n = g.initializer.len();
                g.initializer.remove(init % n);
            }
        }
        Kind::ClearInput { node, input } => {
            if let Some(i) = pick(&mut g.node, node).and_then(|n| pick(&mut n.input, input)) {
                i.clear();
            }
        }
        Kind::RemoveInput { node, input } => {
            if let Some(n) = pick(&mut g.node, node)
                && !n.input.is_empty()
            {
                let len = n.input.len();
                n.input.remove(input % len);
            }
        }
        Kind::DuplicateInput { node, input } => {
            if let Some(n) = pick(&mut g.node, node)
                && let Some(i) = pick(&mut n.input, input).cloned()
            {
                n.input.push(i);
            }
        }
        Kind::Rewire { node, input, to } => {
            let names = names(g);
            let name = names[to % names.len()].clone();
            if let Some(i) = pick(&mut g.node, node).and_then(|n| pick(&mut n.input, input)) {
                *i = name;
            }
        }
        Kind::RenameOutput { node, output, to } => {
            let names = names(g);
            let name = names[to % names.len()].clone();
            if let Some(o) = pick(&mut g.node, node).and_then(|n| pick(&mut n.output, output)) {
                *o = name;
            }
        }
        Kind::RemoveNode { node } => {
            if !g.node.is_empty() {
                let n = g.node.len();
                g.node.remove(node % n);
            }
        }
        Kind::OpType { node, to } => {
            if let Some(n) = pick(&mut g.node, node) {
                n.op_type = Some(OPS[to % OPS.len()].into());
            }
        }
        Kind::Domain { node, to } => {
            if let Some(n) = pick(&mut g.node, node) {
                n.domain = Some(DOMAINS[to % DOMAINS.len()].into());
            }
        }
        Kind::AttrInt { node, attr, to } => {
            if let Some(a) = pick(&mut g.node, node).and_then(|n| pick(&mut n.attribute, attr)) {
                set_attr_int(a, attr, to);
            }
        }
        Kind::AttrType { node, attr, to } => {
            if let Some(a) = pick(&mut g.node, node).and_then(|n| pick(&mut n.attribute, attr)) {
                a.r#type = Some(to);
            }
        }
        Kind::RemoveAttr { node, attr } => {
            if let Some(n) = pick(&mut g.node, node)
                && !n.attribute.is_empty()
            {
                let len = n.attribute.len();
                n.attribute.remove(attr % len);
            }
        }
        Kind::NestInIf { node, depth } => {
            if !g.node.is_empty() {
                let n = g.node.len();
                let idx = node % n;
                let mut inner = g.node[idx].clone();
                for level in 0..depth {
                    inner = wrap_in_if(inner, level);
                }
                g.node[idx] = inner;
                if !g
                    .initializer
                    .iter()
                    .any(|t| t.name.as_deref() == Some(NEST_COND))
                {
                    g.initializer.push(TensorProto {
                        name: Some(NEST_COND.into()),
                        data_type: Some(9),
                        raw_data: Some(vec![1]),
                        ..Default::default()
                    });
                }
            }
        }
        Kind::DuplicateOutput { output } => {
            if let Some(o) = pick(&mut g.output, output).cloned() {
                g.output.push(o);
            }
        }
        Kind::Opset { .. } => {}
    }
}

const NEST_COND: &str = "nest_cond";

/// `If(nest_cond)` whose branches both hold `node` (each branch's outputs are the node's outputs).
fn wrap_in_if(node: NodeProto, level: usize) -> NodeProto {
    let outputs = node.output.clone();
    let branch = |name: &str| GraphProto {
        name: Some(format!("{name}_{level}")),
        node: vec![node.clone()],
        output: outputs
            .iter()
            .filter(|o| !o.is_empty())
            .map(|o| proto::ValueInfoProto {
                name: Some(o.clone()),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let graph_attr = |name: &str| AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(branch(name)),
        ..Default::default()
    };
    let attribute = vec![graph_attr("then_branch"), graph_attr("else_branch")];
    NodeProto {
        input: vec![NEST_COND.into()],
        output: outputs.into_iter().filter(|o| !o.is_empty()).collect(),
        name: Some(format!("nest_{level}")),
        op_type: Some("If".into()),
        attribute,
        ..Default::default()
    }
}

/// The tensor type of the `i`-th declared value (inputs, then outputs, then value_info).
fn declared(g: &mut GraphProto, i: usize) -> Option<&mut type_proto::Tensor> {
    let n = g.input.len() + g.output.len() + g.value_info.len();
    if n == 0 {
        return None;
    }
    let i = i % n;
    let v = if i < g.input.len() {
        &mut g.input[i]
    } else if i < g.input.len() + g.output.len() {
        &mut g.output[i - g.input.len()]
    } else {
        &mut g.value_info[i - g.input.len() - g.output.len()]
    };
    tensor_type(&mut v.r#type)
}

fn truncate_data(t: &mut TensorProto, len: usize) {
    if let Some(raw) = t.raw_data.as_mut() {
        raw.truncate(len);
    }
    t.float_data.truncate(len);
    t.int32_data.truncate(len);
    t.int64_data.truncate(len);
    t.double_data.truncate(len);
    t.uint64_data.truncate(len);
    t.string_data.truncate(len);
}

fn set_attr_int(a: &mut AttributeProto, sel: usize, to: i64) {
    if !a.ints.is_empty() {
        let n = a.ints.len();
        a.ints[sel % n] = to;
    } else if a.t.is_some() {
        if let Some(t) = a.t.as_mut() {
            t.dims = vec![to];
        }
    } else {
        a.i = Some(to);
    }
}
