//! Cases: a model plus one or more data sets of inputs and expected outputs, in the backend-test layout
//! (`<part>/<name>/model.onnx`, `<part>/<name>/test_data_set_N/{input,output}_K.pb`).
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use quorum::Value;
use quorum::ir::Model;
use quorum::loader::{self, LoadOptions};

/// The corpus parts, in report order. `cases` holds Quorum's own regression cases.
pub const PARTS: &[&str] = &[
    "node",
    "simple",
    "pytorch-converted",
    "pytorch-operator",
    "light",
    "cases",
];

#[derive(Debug, Clone)]
pub struct Case {
    /// `part/name`, the key used by filters, expectation lists and reports.
    pub id: String,
    pub part: String,
    pub dir: PathBuf,
}

impl Case {
    pub fn model_path(&self) -> PathBuf {
        self.dir.join("model.onnx")
    }

    pub fn name(&self) -> &str {
        self.id.rsplit('/').next().unwrap_or(&self.id)
    }
}

/// Every case under `root`'s parts (missing parts are skipped), sorted by id.
pub fn discover(root: &Path) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    for part in PARTS {
        let dir = root.join(part);
        if !dir.is_dir() {
            continue;
        }
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?
        {
            let path = entry?.path();
            if path.join("model.onnx").is_file() {
                let name = path
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                cases.push(Case {
                    id: format!("{part}/{name}"),
                    part: part.to_string(),
                    dir: path,
                });
            }
        }
    }
    cases.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(cases)
}

/// One data set: inputs bound to the model's runtime inputs by position, and the expected outputs.
pub struct DataSet {
    pub name: String,
    pub inputs: Vec<(String, Value)>,
    pub outputs: Vec<Value>,
}

fn numbered(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<(usize, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let k = name
                .strip_prefix(prefix)?
                .strip_suffix(".pb")?
                .parse()
                .ok()?;
            Some((k, e.path()))
        })
        .collect();
    v.sort();
    v.into_iter().map(|(_, p)| p).collect()
}

/// Reads every `test_data_set_*` of a case, typing each file by the model's declared input/output type.
pub fn data_sets(case: &Case, model: &Model) -> Result<Vec<DataSet>> {
    let opts = LoadOptions {
        base_dir: Some(case.dir.clone()),
        ..Default::default()
    };
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&case.dir)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.is_dir()
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("test_data_set_"))
        })
        .collect();
    dirs.sort();
    let runtime_inputs: Vec<_> = model.graph.runtime_inputs().collect();
    let mut sets = Vec::new();
    for d in dirs {
        let mut inputs = Vec::new();
        for (k, path) in numbered(&d, "input_").into_iter().enumerate() {
            let info = runtime_inputs
                .get(k)
                .with_context(|| format!("{}: more input files than model inputs", d.display()))?;
            let bytes = std::fs::read(&path)?;
            let v = loader::value_from_pb(&bytes, &info.ty, &opts)
                .with_context(|| format!("reading {}", path.display()))?;
            inputs.push((info.name.clone(), v));
        }
        let mut outputs = Vec::new();
        for (k, path) in numbered(&d, "output_").into_iter().enumerate() {
            let ty = model
                .graph
                .outputs
                .get(k)
                .map(|o| o.ty.clone())
                .unwrap_or(quorum::ir::ValueType::Unknown);
            let bytes = std::fs::read(&path)?;
            outputs.push(
                loader::value_from_pb(&bytes, &ty, &opts)
                    .with_context(|| format!("reading {}", path.display()))?,
            );
        }
        sets.push(DataSet {
            name: d
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned(),
            inputs,
            outputs,
        });
    }
    Ok(sets)
}
