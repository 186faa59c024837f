//! The real nodes of the corpus's light models, as matrix cases: each model runs once on the CPU
//! with every node output made a graph output, which gives every value's shape; each top-level
//! node of a measured family then becomes a case with those input shapes and its own attributes
//! (initializers stay weights). Nodes with integer inputs (shapes, indices) are left out: their
//! values, not only their shapes, decide what they do.
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use quorum::ir::{ValueInfo, ValueType};
use quorum::loader::{self, LoadOptions};
use quorum::session::dispatch::family;
use quorum::{DType, Session, SessionOptions, Value};

use crate::cases::Case;

/// The light models of a generated corpus (`<corpus>/light/test_*/model.onnx`), sorted.
pub fn models(corpus: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(corpus.join("light"))
        .map(|d| {
            d.flatten()
                .map(|e| e.path().join("model.onnx"))
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// The model's name (`resnet50` for `.../test_resnet50/model.onnx`).
pub fn model_name(path: &Path) -> String {
    path.parent()
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().trim_start_matches("test_").to_string())
        .unwrap_or_else(|| path.display().to_string())
}

/// The distinct nodes of measured families in the model at `path`, at most `limit` of them (the
/// largest first, by elements of their inputs).
pub fn cases(path: &Path, limit: usize) -> Result<Vec<Case>, String> {
    let mut model =
        loader::model_from_file(path, &LoadOptions::default()).map_err(|e| e.to_string())?;
    let original = model.graph.clone();
    let known: BTreeSet<String> = model.graph.outputs.iter().map(|o| o.name.clone()).collect();
    for n in &original.nodes {
        for o in n
            .outputs
            .iter()
            .filter(|o| !o.is_empty() && !known.contains(*o))
        {
            model.graph.outputs.push(ValueInfo {
                name: o.clone(),
                ty: ValueType::Tensor {
                    dtype: None,
                    shape: None,
                },
            });
        }
    }
    let session = Session::from_model(
        model.clone(),
        SessionOptions {
            fold_constants: false,
            ..Default::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let inputs = quorum::inputs::generate(&model.graph, &[], &HashMap::new(), 1)
        .map_err(|e| e.to_string())?;
    let mut types: HashMap<String, (Vec<usize>, DType)> = HashMap::new();
    let mut note = |name: &str, v: &Value| {
        if let Some(t) = v.as_tensor() {
            types.insert(name.to_string(), (t.shape().to_vec(), t.dtype()));
        }
    };
    for (n, v) in &inputs {
        note(n, v);
    }
    for (n, v) in &original.initializers {
        note(n, v);
    }
    for (n, v) in session.run(inputs).map_err(|e| e.to_string())? {
        note(&n, &v);
    }
    let name = model_name(path);
    let mut seen = BTreeSet::new();
    let mut out: Vec<(usize, Case)> = Vec::new();
    for n in &original.nodes {
        let fam = family(&n.op_type);
        if matches!(fam, "movement" | "index" | "cast" | "resize") || !n.domain.is_empty() {
            continue;
        }
        let mut ins = Vec::new();
        for i in &n.inputs {
            match types.get(i) {
                Some((s, d)) if !i.is_empty() && d.is_float() => ins.push((s.clone(), *d)),
                _ => break,
            }
        }
        if ins.len() != n.inputs.len() || ins.is_empty() {
            continue;
        }
        let weights: Vec<usize> = n
            .inputs
            .iter()
            .enumerate()
            .filter(|(_, i)| original.initializers.contains_key(*i))
            .map(|(k, _)| k)
            .collect();
        let case = Case {
            op: n.op_type.clone(),
            attrs: n.attrs.clone(),
            inputs: ins,
            weights,
            source: format!("light:{name}"),
            opset: n.opset,
        };
        if seen.insert(case.describe()) {
            let size = case
                .inputs
                .iter()
                .map(|(s, _)| s.iter().product::<usize>())
                .sum();
            out.push((size, case));
        }
    }
    out.sort_by_key(|c| std::cmp::Reverse(c.0));
    Ok(out.into_iter().take(limit).map(|(_, c)| c).collect())
}
