//! The folder a `quorum-matrix nightly` run writes and `cargo xtask nightly` reads:
//!
//! ```text
//! <dir>/matrix.json            the matrix (`matrix::Matrix`)
//! <dir>/thresholds/<id>.json   one table per accelerator measured (`ThresholdTable`)
//! <dir>/graphs.json            eager vs replay per model and shape key (`models::GraphOutcome`)
//! <dir>/models.json            each light model and random chain on every provider and auto
//!                              (`models::Validation`)
//! ```
use std::path::Path;

use anyhow::{Context, Result};
use quorum::session::thresholds::ThresholdTable;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::matrix::Matrix;
use crate::models::{GraphOutcome, Validation};

/// Everything one nightly measurement produced.
pub struct Outputs {
    pub matrix: Matrix,
    pub tables: Vec<ThresholdTable>,
    pub graphs: Vec<GraphOutcome>,
    pub models: Vec<Validation>,
}

pub fn write_json<T: Serialize>(path: &Path, v: &T) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, serde_json::to_string_pretty(v)? + "\n")
        .with_context(|| format!("writing {}", path.display()))
}

pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

impl Outputs {
    pub fn write(&self, dir: &Path) -> Result<()> {
        self.matrix.write(&dir.join("matrix.json"))?;
        for t in &self.tables {
            write_json(
                &dir.join("thresholds")
                    .join(format!("{}.json", t.adapter.id)),
                t,
            )?;
        }
        write_json(&dir.join("graphs.json"), &self.graphs)?;
        write_json(&dir.join("models.json"), &self.models)?;
        Ok(())
    }

    /// Reads a folder; `graphs.json`, `models.json` and the tables may be missing (empty).
    pub fn read(dir: &Path) -> Result<Outputs> {
        let matrix = Matrix::read(&dir.join("matrix.json"))?;
        let mut tables = Vec::new();
        if let Ok(d) = std::fs::read_dir(dir.join("thresholds")) {
            let mut files: Vec<_> = d.flatten().map(|e| e.path()).collect();
            files.sort();
            for f in files
                .iter()
                .filter(|f| f.extension().is_some_and(|e| e == "json"))
            {
                tables.push(read_json(f)?);
            }
        }
        let optional = |name: &str| dir.join(name).is_file();
        Ok(Outputs {
            matrix,
            tables,
            graphs: if optional("graphs.json") {
                read_json(&dir.join("graphs.json"))?
            } else {
                Vec::new()
            },
            models: if optional("models.json") {
                read_json(&dir.join("models.json"))?
            } else {
                Vec::new()
            },
        })
    }
}
