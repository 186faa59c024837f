//! Measured dispatch thresholds: per adapter, op family, shape class and dtype, the size at which
//! the accelerator beats the CPU with the inputs on the host (transfers paid) and with the inputs
//! already on the device. The tables are derived from the benchmark matrix by `quorum-matrix
//! thresholds` into `reports/thresholds/<adapter-id>.json`; `auto` placement reads the table of the
//! adapter it finds (`dispatch`).
//!
//! Where tables come from, in order: the file or folder named by `QUORUM_THRESHOLDS` (to try a new
//! table without a rebuild, as the GPU bundle does right after measuring), then the tables committed
//! under `reports/thresholds/`, compiled in by `build.rs` so that a binary copied to another
//! machine carries them. A table applies to an adapter of the same provider and name; one measured
//! under another driver still applies, and the decision says so.
use std::path::Path;
use std::sync::Arc;

use crate::tensor::DType;

/// The device a table was measured on.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Adapter {
    /// File-name-safe identity: provider and device name (`cuda-nvidia-h200-cc-9-0`).
    pub id: String,
    pub provider: String,
    /// The device in words, as the backend names it (`DeviceSession::device_name`).
    pub name: String,
    /// The driver version, where the backend reports one.
    pub driver: Option<String>,
}

impl Adapter {
    /// The identity of an adapter: provider and device name, lower-cased, every run of other
    /// characters one `-`.
    pub fn id_for(provider: &str, name: &str) -> String {
        let mut id = String::new();
        for c in format!("{provider} {name}").chars() {
            if c.is_ascii_alphanumeric() {
                id.push(c.to_ascii_lowercase());
            } else if !id.ends_with('-') {
                id.push('-');
            }
        }
        id.trim_matches('-').to_string()
    }
}

/// How one comparison (accelerator against CPU, at one residency) came out over the measured sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// The CPU won the smaller decided sizes, the accelerator every decided size from `threshold`.
    Crossover,
    /// The accelerator won every decided size, the smallest included.
    DeviceAlways,
    /// The CPU won the largest decided size: no crossover in the measured range.
    CpuAlways,
    /// No point was decided: every difference was inside the spread.
    Undecided,
}

/// One comparison's outcome.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Crossover {
    pub status: Status,
    /// The smallest decided size the accelerator won with no decided CPU win above it.
    pub threshold: Option<u64>,
    /// The largest decided size the CPU won (below `threshold` where both exist).
    pub cpu_wins_up_to: Option<u64>,
    /// The largest size measured.
    pub largest_measured: Option<u64>,
    /// Sizes measured and how many of them were decided (outside the noise).
    pub points: usize,
    pub decided: usize,
}

/// The thresholds of one op family, shape class and dtype.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    pub family: String,
    pub class: String,
    /// `DType::name` (`float32`).
    pub dtype: String,
    /// `elements` or `multiply-adds` (`dispatch::work_unit`).
    pub unit: String,
    /// Inputs on the host: the device pays the uploads.
    pub host: Crossover,
    /// Inputs already on the device.
    pub resident: Crossover,
}

/// A table: one adapter's thresholds, with where they came from.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ThresholdTable {
    pub adapter: Adapter,
    /// The CPU the accelerator was compared with, in words, and its threads.
    pub cpu: String,
    pub threads: usize,
    /// The matrix it was derived from (path in the repository), its commit and date.
    pub matrix: String,
    pub commit: String,
    pub date: String,
    pub entries: Vec<Entry>,
}

impl ThresholdTable {
    /// The entry for `family`/`class` at `dtype`, else the same family and class at another dtype
    /// (float32 first), else the family's first class. The string says which fallback was taken
    /// (empty for an exact match).
    pub fn lookup(
        &self,
        family: &str,
        class: &str,
        dtype: Option<DType>,
    ) -> Option<(&Entry, String)> {
        let name = dtype.map(DType::name);
        let same = |e: &&Entry| e.family == family && e.class == class;
        if let Some(e) = self
            .entries
            .iter()
            .find(|e| same(e) && Some(e.dtype.as_str()) == name)
        {
            return Some((e, String::new()));
        }
        let mut others: Vec<&Entry> = self.entries.iter().filter(same).collect();
        others.sort_by_key(|e| e.dtype != "float32");
        if let Some(e) = others.first() {
            return Some((*e, format!(", the {} entry", e.dtype)));
        }
        self.entries
            .iter()
            .find(|e| e.family == family && Some(e.dtype.as_str()) == name)
            .or_else(|| self.entries.iter().find(|e| e.family == family))
            .map(|e| {
                (
                    e,
                    format!(", the {}/{} {} entry", e.family, e.class, e.dtype),
                )
            })
    }
}

/// The tables compiled in from `reports/thresholds/` (file name, JSON text).
const BUILTIN: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/thresholds.rs"));

/// Every table this process can use: `QUORUM_THRESHOLDS` (a file or a folder of `*.json`) first,
/// then the compiled-in ones. A table that does not parse is skipped with its error in the list of
/// problems.
pub fn available() -> (Vec<Arc<ThresholdTable>>, Vec<String>) {
    let mut tables = Vec::new();
    let mut problems = Vec::new();
    if let Some(p) = std::env::var_os("QUORUM_THRESHOLDS") {
        let p = Path::new(&p);
        let files: Vec<std::path::PathBuf> = if p.is_dir() {
            let mut f: Vec<_> = std::fs::read_dir(p)
                .map(|d| d.flatten().map(|e| e.path()).collect())
                .unwrap_or_default();
            f.retain(|f| f.extension().is_some_and(|e| e == "json"));
            f.sort();
            f
        } else {
            vec![p.to_path_buf()]
        };
        for f in files {
            match std::fs::read_to_string(&f) {
                Ok(text) => match serde_json::from_str::<ThresholdTable>(&text) {
                    Ok(t) => tables.push(Arc::new(t)),
                    Err(e) => problems.push(format!("{}: {e}", f.display())),
                },
                Err(e) => problems.push(format!("{}: {e}", f.display())),
            }
        }
    }
    for (name, text) in BUILTIN {
        match serde_json::from_str::<ThresholdTable>(text) {
            Ok(t) => tables.push(Arc::new(t)),
            Err(e) => problems.push(format!("built-in {name}: {e}")),
        }
    }
    (tables, problems)
}

/// The table for an adapter of `provider` named `name` with `driver`: same provider and name, the
/// same driver preferred. The string is a note for reports (another driver, or why there is none).
pub fn find(
    tables: &[Arc<ThresholdTable>],
    provider: &str,
    name: &str,
    driver: Option<&str>,
) -> (Option<Arc<ThresholdTable>>, String) {
    let id = Adapter::id_for(provider, name);
    let same: Vec<&Arc<ThresholdTable>> = tables
        .iter()
        .filter(|t| t.adapter.provider == provider && t.adapter.name == name)
        .collect();
    if let Some(t) = same.iter().find(|t| t.adapter.driver.as_deref() == driver) {
        return (Some((*t).clone()), format!("measured table {id}"));
    }
    if let Some(t) = same.first() {
        return (
            Some((*t).clone()),
            format!(
                "measured table {id}, measured with driver {} (this one: {})",
                t.adapter.driver.as_deref().unwrap_or("unknown"),
                driver.unwrap_or("unknown")
            ),
        );
    }
    (
        None,
        format!(
            "no measured thresholds for {id} (driver {}): conservative defaults",
            driver.unwrap_or("unknown")
        ),
    )
}
