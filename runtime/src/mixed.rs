//! Mixed precision for an f32 model (`--precision f16|bf16`): at session build, every f32 value of
//! the graph becomes a half (f16 or bf16) except where an op is kept in f32, so that the model's
//! products run on the tensor cores and its activations move half the bytes.
//!
//! What converts: f32 initializers (rounded to nearest; for f16, magnitudes past its largest finite
//! value are clamped to it and counted), the f32 values nodes make, and the attributes that make
//! f32 (`Cast` to float, `ConstantOfShape`'s and `Constant`'s values). What stays: the model's
//! interface (f32 inputs are cast to the half where a converted node reads them, and f32 outputs
//! are cast back, as onnxruntime's converter does with `keep_io_types`), every value of a kept
//! node, and the inputs ONNX types apart from the data (`Resize`'s roi and scales,
//! `LayerNormalization`'s statistics outputs).
//!
//! A node is kept in f32 when its op is on the keep list ([`DEFAULT_KEEP`], where f16's range or
//! resolution loses what the op computes, plus the caller's), when it is outside the default
//! domain, holds a subgraph, or when the element type of an input or output cannot be inferred from
//! the rules here (`out_dtypes`); its half inputs are cast to f32 and its f32 outputs cast to the
//! half where converted nodes read them. A node whose varying f32 inputs were all made by kept
//! nodes stays f32 too, products aside (a hand-written layer norm's variance: the ReduceMean after a
//! kept Pow would overflow f16 on the squares it sums). Each value is cast at most once per type.
//!
//! Verification is unchanged: the converted graph is the model that runs, and each node is judged
//! at the types it has there (a converted node's bound is that of its half kernel). How far the
//! converted model's outputs are from the f32 model's is a property of the model, not of a kernel:
//! `quorum run --precision f16` prints it.
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::ir::{Attr, Graph, Node, ValueType};
use crate::tensor::{DType, Tensor, Value};
use crate::{Error, Result};

/// Ops kept in f32 by default. `Pow`, `ReduceSumSquare`, `ReduceL2` and `ReduceLogSumExp` square or
/// exponentiate before they reduce (a hand-written layer norm's variance overflows f16 at
/// activations of 256); `Range` and `CumSum` accumulate in their own type; `Resize` and `Upsample`
/// take f32 coordinates; the detection and quantization ops compute boxes, scores and scales whose
/// precision users rely on; the window and random generators are defined by a dtype attribute.
pub const DEFAULT_KEEP: &[&str] = &[
    "Pow",
    "ReduceSumSquare",
    "ReduceL2",
    "ReduceLogSumExp",
    "Range",
    "CumSum",
    "Resize",
    "Upsample",
    "NonMaxSuppression",
    "RoiAlign",
    "TopK",
    "QuantizeLinear",
    "DequantizeLinear",
    "DynamicQuantizeLinear",
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Bernoulli",
    "EyeLike",
    "HannWindow",
    "HammingWindow",
    "BlackmanWindow",
    "MelWeightMatrix",
];

/// What a conversion did (printed by the CLI; `Session::conversion`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Conversion {
    /// The half type the model was converted to.
    pub dtype: Option<DType>,
    /// Nodes converted to the half.
    pub converted: usize,
    /// Nodes kept in f32, by op type (only nodes with f32 values).
    pub kept: Vec<(String, usize)>,
    /// Cast nodes inserted at the boundaries.
    pub casts: usize,
    /// f32 initializers converted.
    pub initializers: usize,
    /// Initializer elements clamped to f16's largest finite magnitude.
    pub clamped: usize,
}

/// Whether value `name` exists in the model as f32 or another type, and under which name each
/// representation is available in the converted graph.
struct Values {
    /// The half the model is converted to.
    half: DType,
    /// The value's type in the original model (`None`: not inferred).
    dtype: HashMap<String, Option<DType>>,
    /// (value, type) → the name of that value in that type in the new graph.
    names: HashMap<(String, DType), String>,
}

/// Converts `graph`'s f32 values to `half` (f16 or bf16), keeping `keep`'s op types (beside
/// [`DEFAULT_KEEP`]) in f32. `None` when the graph has nothing to convert.
pub fn convert(graph: &Graph, half: DType, keep: &[String]) -> Result<Option<(Graph, Conversion)>> {
    convert_with(graph, half, keep, true)
}

/// The products conversion exists for: never kept for continuing a kept computation.
const PRODUCTS: &[&str] = &["MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum"];

/// [`convert`], with the rule that a kept computation continues in f32 (`continue_kept`) as an
/// argument: the tests turn it off to show what it prevents.
fn convert_with(
    graph: &Graph,
    half: DType,
    keep: &[String],
    continue_kept: bool,
) -> Result<Option<(Graph, Conversion)>> {
    if !matches!(half, DType::F16 | DType::BF16) {
        return Err(Error::InvalidModel(format!(
            "mixed precision converts to f16 or bf16, not {half}"
        )));
    }
    let keep: HashSet<&str> = DEFAULT_KEEP
        .iter()
        .copied()
        .chain(keep.iter().map(String::as_str))
        .collect();
    let mut v = Values {
        half,
        dtype: HashMap::new(),
        names: HashMap::new(),
    };
    let mut report = Conversion {
        dtype: Some(half),
        ..Default::default()
    };
    for i in &graph.inputs {
        let d = match &i.ty {
            ValueType::Tensor { dtype, .. } => *dtype,
            _ => None,
        };
        v.dtype.insert(i.name.clone(), d);
    }
    for (name, value) in &graph.initializers {
        let d = match &**value {
            Value::Tensor(t) => Some(t.dtype()),
            _ => None,
        };
        v.dtype.insert(name.clone(), d);
    }
    for (name, d) in v.dtype.clone() {
        if let Some(d) = d {
            v.names.insert((name.clone(), d), name);
        }
    }
    // Values whose own names must keep their original type: the graph's outputs, and every name a
    // subgraph reads (it may capture an outer value, which the subgraph expects as it was).
    let mut pinned: HashSet<String> = graph.outputs.iter().map(|o| o.name.clone()).collect();
    for node in &graph.nodes {
        for a in node.attrs.values() {
            match a {
                Attr::Graph(g) => subgraph_reads(g, &mut pinned),
                Attr::Graphs(gs) => gs.iter().for_each(|g| subgraph_reads(g, &mut pinned)),
                _ => {}
            }
        }
    }
    let mut out = Graph {
        name: graph.name.clone(),
        nodes: Vec::with_capacity(graph.nodes.len()),
        inputs: graph.inputs.clone(),
        outputs: graph.outputs.clone(),
        initializers: HashMap::new(),
        value_info: HashMap::new(),
    };
    let mut inits: HashMap<String, Arc<Value>> = HashMap::new();
    let mut kept: HashMap<String, usize> = HashMap::new();
    // f32 values made by nodes kept in f32.
    let mut kept_made: HashSet<String> = HashSet::new();
    let mut touched = false;
    for node in &graph.nodes {
        let ins: Vec<Option<DType>> = node
            .inputs
            .iter()
            .map(|i| {
                if i.is_empty() {
                    None
                } else {
                    v.dtype.get(i).copied().flatten()
                }
            })
            .collect();
        // Outputs are inferred only from inputs whose types are all known.
        let inputs_known = node
            .inputs
            .iter()
            .zip(&ins)
            .all(|(n, d)| n.is_empty() || d.is_some());
        let outs = inputs_known.then(|| out_dtypes(node, &ins)).flatten();
        let makes_f32 = outs.as_ref().is_some_and(|o| o.contains(&Some(DType::F32)));
        let reads_f32 = ins.contains(&Some(DType::F32));
        let subgraph = node
            .attrs
            .values()
            .any(|a| matches!(a, Attr::Graph(_) | Attr::Graphs(_)));
        let eligible = outs.is_some()
            && node.domain.is_empty()
            && !subgraph
            && !keep.contains(node.op_type.as_str());
        // A node that makes an f32 value converts; one that only reads f32 values (Shape, a
        // comparison) converts where one of them is already a half, and otherwise reads them as
        // they are.
        let reads_a_half = node
            .inputs
            .iter()
            .zip(&ins)
            .any(|(n, d)| *d == Some(DType::F32) && v.names.get(&(n.clone(), half)) == Some(n));
        // A node whose varying f32 inputs were all made by kept nodes continues their
        // computation in f32 (a kept Pow's squares would overflow f16 in the ReduceMean that
        // sums them as surely as in the Pow), products aside: they are what conversion is for.
        let varying: Vec<&String> = node
            .inputs
            .iter()
            .zip(&ins)
            .filter(|(n, d)| **d == Some(DType::F32) && !constant(graph, n))
            .map(|(n, _)| n)
            .collect();
        let continues = continue_kept
            && !varying.is_empty()
            && varying.iter().all(|n| kept_made.contains(*n))
            && !PRODUCTS.contains(&node.op_type.as_str());
        let to_half = eligible && !continues && (makes_f32 || (reads_f32 && reads_a_half));
        if (makes_f32 || reads_f32) && (!eligible || continues) {
            *kept.entry(node.op_type.clone()).or_default() += 1;
        }
        if !to_half {
            for (j, name) in node.outputs.iter().enumerate() {
                if outs.as_ref().and_then(|o| o.get(j).copied().flatten()) == Some(DType::F32) {
                    kept_made.insert(name.clone());
                }
            }
        }
        let mut n = node.clone();
        // Inputs: each in the type this node reads it in.
        for (i, name) in node.inputs.iter().enumerate() {
            let Some(orig) = ins[i] else { continue };
            let want = if to_half && orig == DType::F32 && !f32_input(node, i) {
                half
            } else {
                orig
            };
            n.inputs[i] = v.name_in(
                graph,
                name,
                orig,
                want,
                &mut out.nodes,
                &mut inits,
                &mut report,
            )?;
        }
        // Outputs: the original types, or the half where a converted node made an f32 value.
        let outs = outs.unwrap_or_else(|| vec![None; node.outputs.len()]);
        for (j, name) in node.outputs.iter().enumerate() {
            let orig = outs.get(j).copied().flatten();
            v.dtype.insert(name.clone(), orig);
            if name.is_empty() {
                continue;
            }
            let Some(orig) = orig else { continue };
            let made = if to_half && orig == DType::F32 && !f32_output(node, j) {
                half
            } else {
                orig
            };
            if made == orig || !pinned.contains(name.as_str()) {
                v.names.insert((name.clone(), made), name.clone());
            } else {
                // A graph output (or a value a subgraph reads) made in the half: the node writes
                // a new name, and a Cast gives the value its f32 under its own name.
                let inner = format!("{name}::{}", half.name());
                n.outputs[j] = inner.clone();
                v.names.insert((name.clone(), made), inner);
            }
        }
        if to_half {
            touched = true;
            report.converted += 1;
            set_made_type(&mut n, half)?;
        }
        let renamed: Vec<(String, String)> = node
            .outputs
            .iter()
            .zip(&n.outputs)
            .filter(|(a, b)| a != b)
            .map(|(a, b)| (a.clone(), b.clone()))
            .collect();
        out.nodes.push(n);
        for (orig, inner) in renamed {
            out.nodes.push(cast(&inner, &orig, DType::F32));
            report.casts += 1;
            v.names.insert((orig.clone(), DType::F32), orig);
        }
    }
    if !touched {
        return Ok(None);
    }
    // Initializers: those read in their own type stay; converted copies join them.
    let read: HashSet<&str> = out
        .nodes
        .iter()
        .flat_map(|n| n.inputs.iter().map(String::as_str))
        .chain(out.outputs.iter().map(|o| o.name.as_str()))
        .collect();
    for (name, value) in &graph.initializers {
        let input = graph.inputs.iter().any(|i| &i.name == name);
        if read.contains(name.as_str()) || input {
            out.initializers.insert(name.clone(), value.clone());
        }
    }
    out.initializers.extend(inits);
    // Value types: a value whose own name now holds the half is recorded at it; the rest as they
    // were.
    let own_half: HashSet<&str> = v
        .names
        .iter()
        .filter(|((value, d), name)| *d == half && value == *name)
        .map(|((value, _), _)| value.as_str())
        .collect();
    for (name, ty) in &graph.value_info {
        let ty = match ty {
            ValueType::Tensor {
                dtype: Some(DType::F32),
                shape,
            } if own_half.contains(name.as_str()) => ValueType::Tensor {
                dtype: Some(half),
                shape: shape.clone(),
            },
            t => t.clone(),
        };
        out.value_info.insert(name.clone(), ty);
    }
    let mut kept: Vec<(String, usize)> = kept.into_iter().collect();
    kept.sort();
    report.kept = kept;
    Ok(Some((out, report)))
}

impl Values {
    /// The name of value `name` (of original type `orig`) in type `want` in the new graph: as it is,
    /// or cast once (an initializer converted in place, anything else by a Cast node appended to
    /// `nodes`).
    #[allow(clippy::too_many_arguments)]
    fn name_in(
        &mut self,
        graph: &Graph,
        name: &str,
        orig: DType,
        want: DType,
        nodes: &mut Vec<Node>,
        inits: &mut HashMap<String, Arc<Value>>,
        report: &mut Conversion,
    ) -> Result<String> {
        let key = (name.to_string(), want);
        if let Some(n) = self.names.get(&key) {
            return Ok(n.clone());
        }
        // The representation the value has: the other of f32 and the half (only f32 values have
        // two).
        let from = if want == orig { self.half } else { orig };
        let Some(have) = self.names.get(&(name.to_string(), from)).cloned() else {
            return Err(Error::InvalidModel(format!(
                "mixed precision: value '{name}' is read before it is made"
            )));
        };
        let new = format!("{name}::{}", want.name());
        let initializer = graph
            .initializers
            .get(name)
            .filter(|_| constant(graph, name));
        match initializer.map(|c| &**c) {
            Some(Value::Tensor(t)) => {
                let (t, clamped) = convert_tensor(t, want)?;
                report.initializers += 1;
                report.clamped += clamped;
                inits.insert(new.clone(), Arc::new(Value::Tensor(t)));
            }
            _ => {
                nodes.push(cast(&have, &new, want));
                report.casts += 1;
            }
        }
        self.names.insert(key, new.clone());
        Ok(new)
    }
}

/// Whether `name` is a constant of `graph` (an initializer no input overrides).
fn constant(graph: &Graph, name: &str) -> bool {
    graph.initializers.contains_key(name) && !graph.inputs.iter().any(|i| i.name == name)
}

/// Adds every name `g`'s nodes (and their subgraphs') read to `names`.
fn subgraph_reads(g: &Graph, names: &mut HashSet<String>) {
    for n in &g.nodes {
        names.extend(n.inputs.iter().filter(|i| !i.is_empty()).cloned());
        for a in n.attrs.values() {
            match a {
                Attr::Graph(s) => subgraph_reads(s, names),
                Attr::Graphs(ss) => ss.iter().for_each(|s| subgraph_reads(s, names)),
                _ => {}
            }
        }
    }
    names.extend(g.outputs.iter().map(|o| o.name.clone()));
}

/// A Cast node `from → to` of type `dtype`.
fn cast(from: &str, to: &str, dtype: DType) -> Node {
    Node {
        name: format!("{to}::cast"),
        op_type: "Cast".into(),
        domain: String::new(),
        opset: 13,
        inputs: vec![from.to_string()],
        outputs: vec![to.to_string()],
        attrs: HashMap::from([("to".to_string(), Attr::Int(dtype.onnx() as i64))]),
    }
}

/// `t` in type `to` (f32 ↔ a half), rounded to nearest; for f16, magnitudes past its largest
/// finite value are clamped (their count is returned), so that a large weight does not become inf.
fn convert_tensor(t: &Tensor, to: DType) -> Result<(Tensor, usize)> {
    const F16_MAX: f64 = 65504.0;
    let mut values = t.to_f64_vec().map_err(op_error)?;
    let mut clamped = 0;
    if to == DType::F16 {
        for x in values
            .iter_mut()
            .filter(|x| x.is_finite() && x.abs() > F16_MAX)
        {
            *x = F16_MAX.copysign(*x);
            clamped += 1;
        }
    }
    Ok((
        Tensor::from_f64s(to, t.shape(), values).map_err(op_error)?,
        clamped,
    ))
}

fn op_error(e: crate::error::OpError) -> Error {
    Error::InvalidModel(format!("mixed precision: {e}"))
}

/// Input `i` of `node` stays f32 in a converted node (ONNX types it apart from the data).
fn f32_input(node: &Node, i: usize) -> bool {
    matches!(
        (node.op_type.as_str(), i),
        ("Resize", 1 | 2) | ("Upsample", 1)
    )
}

/// Output `j` of `node` stays f32 in a converted node.
fn f32_output(node: &Node, j: usize) -> bool {
    // LayerNormalization's mean and inverse standard deviation are computed in its stash type.
    matches!((node.op_type.as_str(), j), ("LayerNormalization", 1 | 2))
}

/// Rewrites the attributes of a converted node that make f32 values so that they make `half`.
fn set_made_type(n: &mut Node, half: DType) -> Result<()> {
    match n.op_type.as_str() {
        "Cast" => {
            if matches!(n.attrs.get("to"), Some(Attr::Int(t)) if *t == DType::F32.onnx() as i64) {
                n.attrs.insert("to".into(), Attr::Int(half.onnx() as i64));
            }
        }
        "ConstantOfShape" => {
            let value = match n.attrs.get("value") {
                Some(Attr::Tensor(t)) if t.dtype() == DType::F32 => convert_tensor(t, half)?.0,
                Some(_) => return Ok(()),
                None => Tensor::from_f64s(half, &[1], vec![0.0]).map_err(op_error)?,
            };
            n.attrs.insert("value".into(), Attr::Tensor(value));
        }
        "Constant" => {
            let value = match (
                n.attrs.get("value"),
                n.attrs.get("value_float"),
                n.attrs.get("value_floats"),
            ) {
                (Some(Attr::Tensor(t)), _, _) if t.dtype() == DType::F32 => {
                    convert_tensor(t, half)?.0
                }
                (_, Some(Attr::Float(x)), _) => {
                    Tensor::from_f64s(half, &[], vec![*x as f64]).map_err(op_error)?
                }
                (_, _, Some(Attr::Floats(xs))) => {
                    Tensor::from_f64s(half, &[xs.len()], xs.iter().map(|&x| x as f64).collect())
                        .map_err(op_error)?
                }
                _ => return Ok(()),
            };
            n.attrs.remove("value_float");
            n.attrs.remove("value_floats");
            n.attrs.insert("value".into(), Attr::Tensor(value));
        }
        _ => {}
    }
    Ok(())
}

/// The element types of `node`'s outputs from its inputs' (`None` in a slot: not a tensor, or
/// unknown); `None` when the op's rule is not known here (the node is then kept as it is).
fn out_dtypes(node: &Node, ins: &[Option<DType>]) -> Option<Vec<Option<DType>>> {
    let n = node.outputs.len();
    let first = ins.first().copied().flatten();
    let input = |i: usize| ins.get(i).copied().flatten();
    let all = |d: Option<DType>| Some(vec![d; n]);
    if !node.domain.is_empty() {
        return None;
    }
    let attr_type = |name: &str| match node.attrs.get(name) {
        Some(Attr::Int(t)) => DType::from_onnx(*t as i32),
        _ => None,
    };
    match node.op_type.as_str() {
        "Cast" => all(attr_type("to")),
        "CastLike" => all(input(1)),
        "Shape" | "Size" | "NonZero" | "ArgMax" | "ArgMin" | "NonMaxSuppression" => {
            all(Some(DType::I64))
        }
        "Equal" | "Less" | "LessOrEqual" | "Greater" | "GreaterOrEqual" | "Not" | "And" | "Or"
        | "Xor" | "IsNaN" | "IsInf" => all(Some(DType::Bool)),
        "TopK" => Some(vec![first, Some(DType::I64)]),
        "Dropout" => Some(vec![first, Some(DType::Bool)]),
        "Unique" => Some(vec![
            first,
            Some(DType::I64),
            Some(DType::I64),
            Some(DType::I64),
        ]),
        "LayerNormalization" => Some(vec![first, Some(DType::F32), Some(DType::F32)]),
        "Where" => all(input(1)),
        "OneHot" => all(input(2)),
        "Constant" => {
            let d = match (
                node.attrs.get("value"),
                node.attrs.contains_key("value_float") || node.attrs.contains_key("value_floats"),
                node.attrs.contains_key("value_int") || node.attrs.contains_key("value_ints"),
            ) {
                (Some(Attr::Tensor(t)), _, _) => Some(t.dtype()),
                (_, true, _) => Some(DType::F32),
                (_, _, true) => Some(DType::I64),
                _ => return None,
            };
            all(d)
        }
        "ConstantOfShape" => all(match node.attrs.get("value") {
            Some(Attr::Tensor(t)) => Some(t.dtype()),
            _ => Some(DType::F32),
        }),
        "MatMulInteger" | "ConvInteger" => all(Some(DType::I32)),
        "QLinearMatMul" | "QLinearConv" => all(input(7)),
        "QuantizeLinear" => all(input(2).or(Some(DType::U8))),
        "DequantizeLinear" => all(input(1)),
        "DynamicQuantizeLinear" => Some(vec![Some(DType::U8), Some(DType::F32), Some(DType::U8)]),
        // Ops defined by a dtype attribute, subgraph holders and sequences: not inferred here.
        "RandomNormal" | "RandomUniform" | "RandomNormalLike" | "RandomUniformLike"
        | "Bernoulli" | "EyeLike" | "Multinomial" | "HannWindow" | "HammingWindow"
        | "BlackmanWindow" | "MelWeightMatrix" | "If" | "Loop" | "Scan" | "StringNormalizer"
        | "TfIdfVectorizer" | "ImageDecoder" | "RegexFullMatch" | "StringConcat"
        | "StringSplit" | "LabelEncoder" => None,
        op if op.starts_with("Sequence")
            || op.starts_with("Optional")
            || op == "SplitToSequence"
            || op == "ConcatFromSequence" =>
        {
            None
        }
        // Every other op makes its data input's type (elementwise, normalisations, products,
        // movement, reductions, pooling).
        _ => input(0).map(|d| vec![Some(d); n]),
    }
}

/// How far each output of a converted model is from the f32 model's on the same inputs: the largest
/// absolute difference over the largest magnitude of the f32 output (NaN where an output is not a
/// numeric tensor of the same shape, or holds NaN where the other does not). A property of the
/// model at that precision, not a kernel check: the oracles judge the kernels.
pub fn deviation(reference: &[(String, Value)], got: &[(String, Value)]) -> Vec<(String, f64)> {
    reference
        .iter()
        .map(|(name, r)| {
            let g = got.iter().find(|(n, _)| n == name).map(|(_, v)| v);
            let d = match (r, g) {
                (Value::Tensor(r), Some(Value::Tensor(g))) if r.shape() == g.shape() => {
                    match (r.to_f64_vec(), g.to_f64_vec()) {
                        (Ok(r), Ok(g)) => relative_max(&r, &g),
                        _ => f64::NAN,
                    }
                }
                _ => f64::NAN,
            };
            (name.clone(), d)
        })
        .collect()
}

fn relative_max(r: &[f64], g: &[f64]) -> f64 {
    let mut diff = 0f64;
    let mut scale = 0f64;
    for (&a, &b) in r.iter().zip(g) {
        if a.is_nan() != b.is_nan() {
            return f64::NAN;
        }
        if a.is_finite() && b.is_finite() {
            diff = diff.max((a - b).abs());
            scale = scale.max(a.abs());
        } else if a != b && !a.is_nan() {
            return f64::INFINITY;
        }
    }
    if scale == 0.0 { diff } else { diff / scale }
}

#[cfg(test)]
mod tests;
