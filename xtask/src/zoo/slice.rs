//! The slice of the zoo that `cargo test --workspace` runs: small members of each kind
//! (`benches/zoo/zoo_slice.py`), committed under `benches/zoo/slice/` with
//! their seeded inputs and onnxruntime's outputs (`expected/<k>.npy`), judged here by the zoo's own
//! comparison and tolerances on Quorum's CPU engine.
#![cfg(test)]

use std::path::{Path, PathBuf};

use quorum::{Session, SessionOptions, Tensor, Value};

use super::report::{EntryResult, Status};
use super::{CatalogueEntry, tolerance};
use crate::bench_cpu::ModelResult;
use crate::bench_cpu::compare::diff;
use crate::bench_cpu::report::SideResult;

/// How many entries `benches/zoo/zoo_slice.py` holds: a missing or failed export must not
/// shrink the test.
const SLICE_ENTRIES: usize = 9;

fn dir() -> PathBuf {
    quorum_conformance::workspace_root().join("benches/zoo/slice")
}

struct Slice {
    entry: CatalogueEntry,
    model: PathBuf,
    inputs: Vec<(String, Tensor)>,
    expected: Vec<Tensor>,
}

fn read_npy(p: &Path) -> Tensor {
    let bytes = std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    quorum::npy::read(&bytes).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn load(d: &Path) -> Slice {
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("meta.json")).unwrap()).unwrap();
    let entry: CatalogueEntry = serde_json::from_value(meta.clone()).unwrap();
    let inputs = meta["inputs"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, v)| (name.clone(), read_npy(&d.join(v["file"].as_str().unwrap()))))
        .collect();
    let n = meta["expected"]["outputs"].as_array().unwrap().len();
    let expected = (0..n)
        .map(|k| read_npy(&d.join(format!("expected/{k}.npy"))))
        .collect();
    Slice {
        entry,
        model: d.join("model.onnx"),
        inputs,
        expected,
    }
}

fn slices() -> Vec<Slice> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    for d in &dirs {
        assert!(
            d.join("meta.json").is_file(),
            "{}: the slice holds an entry that did not export ({})",
            d.display(),
            std::fs::read_to_string(d.join("error.json")).unwrap_or_default()
        );
    }
    dirs.iter().map(|d| load(d)).collect()
}

/// Judges Quorum's outputs against onnxruntime's as `cargo xtask zoo` does.
fn judge(s: &Slice, ours: &[Tensor]) -> EntryResult {
    let m = ModelResult {
        name: s.entry.name.clone(),
        group: "zoo".into(),
        about: String::new(),
        note: None,
        path: s.model.display().to_string(),
        quorum: SideResult::default(),
        ort: SideResult::default(),
        output_names: Vec::new(),
        comparison: ours
            .iter()
            .zip(&s.expected)
            .enumerate()
            .map(|(k, (q, o))| diff(&k.to_string(), q, o))
            .collect(),
    };
    let mut r = EntryResult::new(s.entry.clone(), "cpu", "", "");
    r.judge(&m, tolerance(&s.entry).0);
    r
}

fn run(s: &Slice) -> Vec<Tensor> {
    let session = Session::from_file(&s.model, SessionOptions::default())
        .unwrap_or_else(|e| panic!("{}: {e}", s.entry.name));
    let feeds = s
        .inputs
        .iter()
        .map(|(n, t)| (n.clone(), Value::Tensor(t.clone())))
        .collect();
    session
        .run(feeds)
        .unwrap_or_else(|e| panic!("{}: {e}", s.entry.name))
        .into_iter()
        .map(|(name, v)| {
            v.as_tensor()
                .unwrap_or_else(|| panic!("{}: output {name} is not a tensor", s.entry.name))
                .clone()
        })
        .collect()
}

#[test]
fn the_zoo_slice_matches_onnxruntime_on_the_cpu() {
    let all = slices();
    assert_eq!(
        all.len(),
        SLICE_ENTRIES,
        "entries under {}",
        dir().display()
    );
    for s in &all {
        let ours = run(s);
        assert_eq!(ours.len(), s.expected.len(), "{}: outputs", s.entry.name);
        let r = judge(s, &ours);
        assert_eq!(
            r.status,
            Status::Match,
            "{}: {}",
            s.entry.name,
            r.reason.unwrap_or_default()
        );
    }
}

/// The broken twin: each entry's first output moved at one element by ten times the tolerance of
/// its scale must be judged a mismatch naming that output.
#[test]
fn a_slice_output_moved_past_its_tolerance_is_a_mismatch() {
    for s in slices() {
        let mut ours = s.expected.clone();
        let t = &ours[0];
        let mut v = t.to_f64_vec().unwrap();
        let scale = v.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(1e-6);
        let last = v.len() - 1;
        v[last] += 10.0 * tolerance(&s.entry).0 * scale;
        ours[0] = Tensor::from_f64s(t.dtype(), t.shape(), v).unwrap();
        let r = judge(&s, &ours);
        assert_eq!(r.status, Status::Mismatch, "{}", s.entry.name);
        assert!(
            r.reason.unwrap_or_default().starts_with("0:"),
            "{}",
            s.entry.name
        );
    }
}
