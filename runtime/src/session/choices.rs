//! Where `auto` keeps its whole-model choice between processes (`SessionOptions::auto_choices`):
//! one JSON file of choices keyed by model, adapter and input shapes, so that repeated processes on
//! one machine place a model the same way and so compute with the same kernels (`trial`).
//!
//! The file is read when a session's first run starts and written when its trial decides; a file
//! that cannot be read or parsed is treated as empty (the trial runs, and its choice replaces the
//! file), and a failed write is reported on stderr once and otherwise ignored: the store can make
//! `auto` repeatable, never make a run fail.
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::trial::Whole;
use crate::ir::{Attr, Graph};

/// One recorded choice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    pub placement: Whole,
    /// The trial's report when it chose.
    pub why: String,
    /// Seconds since the Unix epoch.
    pub recorded: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    version: u32,
    choices: BTreeMap<String, Choice>,
}

const VERSION: u32 = 1;

/// A fingerprint of a graph's computation: its nodes (op, domain, names, attributes' kinds and
/// scalar values) and its initializers (name, type, shape and their first and last elements).
/// Not a cryptographic hash: it tells one model from another on a user's machine.
pub fn fingerprint(g: &Graph) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for n in &g.nodes {
        (&n.op_type, &n.domain, &n.inputs, &n.outputs).hash(&mut h);
        let mut attrs: Vec<_> = n.attrs.iter().collect();
        attrs.sort_by(|a, b| a.0.cmp(b.0));
        for (k, v) in attrs {
            k.hash(&mut h);
            match v {
                Attr::Int(i) => i.hash(&mut h),
                Attr::Float(f) => f.to_bits().hash(&mut h),
                Attr::Ints(v) => v.hash(&mut h),
                Attr::Floats(v) => v.iter().for_each(|f| f.to_bits().hash(&mut h)),
                Attr::String(s) => s.hash(&mut h),
                Attr::Strings(v) => v.hash(&mut h),
                Attr::Tensor(t) => tensor(t, &mut h),
                Attr::Tensors(ts) => ts.iter().for_each(|t| tensor(t, &mut h)),
                Attr::Graph(g) => fingerprint(g).hash(&mut h),
                Attr::Graphs(gs) => gs.iter().for_each(|g| fingerprint(g).hash(&mut h)),
                Attr::Type(t) => t.to_string().hash(&mut h),
                Attr::Types(ts) => ts.iter().for_each(|t| t.to_string().hash(&mut h)),
            }
        }
    }
    let mut inits: Vec<_> = g.initializers.iter().collect();
    inits.sort_by(|a, b| a.0.cmp(b.0));
    for (name, v) in inits {
        name.hash(&mut h);
        if let Some(t) = v.as_tensor() {
            tensor(t, &mut h);
        }
    }
    h.finish()
}

/// A tensor's type, shape and, for f32 (most weights), its first and last eight elements into `h`
/// (without converting the whole tensor).
fn tensor(t: &crate::tensor::Tensor, h: &mut impl Hasher) {
    (t.dtype().name(), t.shape()).hash(h);
    if let crate::tensor::Tensor::F32(a) = t
        && let Some(d) = a.as_slice_memory_order()
    {
        for x in d.iter().take(8).chain(d.iter().rev().take(8)) {
            x.to_bits().hash(h);
        }
    }
}

/// The key of a choice: the model's fingerprint, the adapters and the input shapes.
pub fn key(fingerprint: u64, adapters: &str, shapes: &super::capture::ShapeKey) -> String {
    let shapes: Vec<String> = shapes
        .iter()
        .map(|(n, d, s)| format!("{n}:{}{s:?}", d.name()))
        .collect();
    format!("{fingerprint:016x} | {adapters} | {}", shapes.join(", "))
}

fn read(path: &Path) -> File {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice::<File>(&b).ok())
        .filter(|f| f.version == VERSION)
        .unwrap_or_default()
}

/// The choice recorded under `key`, if any.
pub fn lookup(path: &Path, key: &str) -> Option<Choice> {
    read(path).choices.remove(key)
}

/// Records `choice` under `key` (written to a temporary file beside, then renamed over the store).
pub fn record(path: &Path, key: &str, choice: Choice) -> Result<(), String> {
    let mut f = read(path);
    f.version = VERSION;
    f.choices.insert(key.to_string(), choice);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let text = serde_json::to_vec_pretty(&f).map_err(|e| e.to_string())?;
    let tmp: PathBuf = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, text).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Seconds since the Unix epoch (0 where the clock is before it).
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_round_trip_and_a_bad_file_reads_as_empty() {
        let dir = std::env::temp_dir().join(format!("quorum-choices-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("sub/auto.json");
        assert_eq!(lookup(&path, "k"), None);
        let c = Choice {
            placement: Whole::Device,
            why: "fastest".into(),
            recorded: 7,
        };
        record(&path, "k", c.clone()).unwrap();
        record(
            &path,
            "other",
            Choice {
                placement: Whole::Cpu,
                ..c.clone()
            },
        )
        .unwrap();
        assert_eq!(lookup(&path, "k"), Some(c.clone()));
        assert_eq!(lookup(&path, "other").unwrap().placement, Whole::Cpu);
        std::fs::write(&path, b"{ not json").unwrap();
        assert_eq!(lookup(&path, "k"), None);
        record(&path, "k", c.clone()).unwrap();
        assert_eq!(lookup(&path, "k"), Some(c));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Another input shape, adapter or model is another key; the same ones the same key.
    #[test]
    fn keys_tell_shapes_adapters_and_models_apart() {
        use crate::tensor::DType;
        let shapes = |n: usize| vec![("x".to_string(), DType::F32, vec![n, 3])];
        let k = key(1, "H200", &shapes(1));
        assert_eq!(k, key(1, "H200", &shapes(1)));
        assert_ne!(k, key(1, "H200", &shapes(2)));
        assert_ne!(k, key(1, "llvmpipe", &shapes(1)));
        assert_ne!(k, key(2, "H200", &shapes(1)));
        let mut g = crate::session::profile_tests::model().graph;
        let f = fingerprint(&g);
        assert_eq!(f, fingerprint(&g));
        g.nodes[1].op_type = "Sigmoid".into();
        assert_ne!(f, fingerprint(&g));
    }
}
