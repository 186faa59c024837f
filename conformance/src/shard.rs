//! A conformance run split across machines: `--shard I/N` runs a deterministic part of the corpus
//! and writes a partial report, and `cargo xtask merge-reports` joins the parts into the same
//! reports and summary one run over the whole corpus writes.
//!
//! Shard `I` of `N` takes the cases whose position in the corpus (sorted by id, as [`crate::case`]
//! discovers them) is `I - 1` modulo `N`: every case in exactly one shard, and each shard a spread of
//! every part and op family, so shards take about the same time. A partial report is the shard's
//! outcomes as they are (`reports/conformance/shards/<engine>-<I>-of-<N>.json`); the merge refuses
//! a set that is not exactly shards 1 to N of one N, that holds a case twice, or that does not
//! cover the corpus the shards were cut from.
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::case::Case;
use crate::coverage::Coverage;
use crate::expect::Status;
use crate::pyenv::Environment;
use crate::runner::Outcome;

/// One part of a sharded run: `index` of `count`, counted from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Shard, String> {
        let bad = || format!("--shard '{s}': write I/N, with 1 <= I <= N (e.g. 2/4)");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count) = (
            i.trim().parse::<usize>().map_err(|_| bad())?,
            n.trim().parse::<usize>().map_err(|_| bad())?,
        );
        if index == 0 || count == 0 || index > count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Shard {
    /// This shard's cases of `cases` (in the corpus's order).
    pub fn select(&self, cases: &[Case]) -> Vec<Case> {
        cases
            .iter()
            .enumerate()
            .filter(|(k, _)| k % self.count == self.index - 1)
            .map(|(_, c)| c.clone())
            .collect()
    }
}

/// A partial report: one engine's outcomes on one shard.
#[derive(Debug, Clone)]
pub struct ShardReport {
    pub engine: String,
    pub device: String,
    pub shard: Shard,
    /// Cases in the corpus the shard was cut from (after any filter), for the merge's check.
    pub corpus_cases: usize,
    pub environment: Option<Environment>,
    pub outcomes: Vec<Outcome>,
}

/// A partial report as written: the outcomes with their status as a name.
#[derive(serde::Serialize, serde::Deserialize)]
struct File {
    engine: String,
    device: String,
    shard: Shard,
    corpus_cases: usize,
    environment: Option<Environment>,
    outcomes: Vec<Record>,
}

/// An [`Outcome`] as written (`Outcome::status` is one of [`Status`]'s static names).
#[derive(serde::Serialize, serde::Deserialize)]
struct Record {
    id: String,
    status: String,
    detail: String,
    ops: Vec<String>,
    millis: f64,
    not_compared: usize,
    coverage: Option<Coverage>,
    by_rule: bool,
}

impl Record {
    fn of(o: &Outcome) -> Record {
        Record {
            id: o.id.clone(),
            status: o.status.to_string(),
            detail: o.detail.clone(),
            ops: o.ops.clone(),
            millis: o.millis,
            not_compared: o.not_compared,
            coverage: o.coverage.clone(),
            by_rule: o.by_rule,
        }
    }

    fn outcome(self) -> Result<Outcome> {
        let status = Status::parse(&self.status)
            .ok_or_else(|| anyhow::anyhow!("case {}: unknown status '{}'", self.id, self.status))?;
        Ok(Outcome {
            id: self.id,
            status: status.as_str(),
            detail: self.detail,
            ops: self.ops,
            millis: self.millis,
            not_compared: self.not_compared,
            coverage: self.coverage,
            by_rule: self.by_rule,
        })
    }
}

/// Where partial reports go: `reports/conformance/shards/` under the workspace.
pub fn default_dir() -> PathBuf {
    crate::workspace_root().join("reports/conformance/shards")
}

impl ShardReport {
    pub fn file_name(&self) -> String {
        format!(
            "{}-{}-of-{}.json",
            self.engine, self.shard.index, self.shard.count
        )
    }

    pub fn write(&self, dir: &Path) -> Result<PathBuf> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(self.file_name());
        let file = File {
            engine: self.engine.clone(),
            device: self.device.clone(),
            shard: self.shard,
            corpus_cases: self.corpus_cases,
            environment: self.environment.clone(),
            outcomes: self.outcomes.iter().map(Record::of).collect(),
        };
        std::fs::write(&path, serde_json::to_string(&file)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }

    pub fn read(path: &Path) -> Result<ShardReport> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let f: File =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        Ok(ShardReport {
            engine: f.engine,
            device: f.device,
            shard: f.shard,
            corpus_cases: f.corpus_cases,
            environment: f.environment,
            outcomes: f
                .outcomes
                .into_iter()
                .map(Record::outcome)
                .collect::<Result<_>>()?,
        })
    }
}

/// Every partial report in `dir` (files ending in `.json`), in name order.
pub fn read_dir(dir: &Path) -> Result<Vec<ShardReport>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    paths.iter().map(|p| ShardReport::read(p)).collect()
}

/// One engine's joined run: what a single run over the whole corpus would have given.
#[derive(Debug, Clone)]
pub struct Merged {
    pub engine: String,
    pub device: String,
    pub environment: Option<Environment>,
    /// In the corpus's order (by case id), as a single run lists them.
    pub outcomes: Vec<Outcome>,
}

/// Joins partial reports, per engine; refuses a set that is not exactly shards 1..N of one N, a
/// case in two shards, or shards that do not add up to their corpus.
pub fn merge(reports: Vec<ShardReport>) -> Result<Vec<Merged>> {
    let mut by_engine: BTreeMap<String, Vec<ShardReport>> = BTreeMap::new();
    for r in reports {
        by_engine.entry(r.engine.clone()).or_default().push(r);
    }
    if by_engine.is_empty() {
        bail!("no partial reports to merge");
    }
    let mut merged = Vec::new();
    for (engine, mut parts) in by_engine {
        parts.sort_by_key(|p| p.shard.index);
        let n = parts[0].shard.count;
        if let Some(p) = parts.iter().find(|p| p.shard.count != n) {
            bail!(
                "engine `{engine}`: shards of different runs (of {n} and of {})",
                p.shard.count
            );
        }
        let have: Vec<usize> = parts.iter().map(|p| p.shard.index).collect();
        let want: Vec<usize> = (1..=n).collect();
        if have != want {
            let missing: Vec<usize> = want.iter().filter(|i| !have.contains(i)).copied().collect();
            bail!(
                "engine `{engine}`: shards {have:?} of {n}; missing {missing:?}, or one given twice"
            );
        }
        let corpus = parts[0].corpus_cases;
        if let Some(p) = parts.iter().find(|p| p.corpus_cases != corpus) {
            bail!(
                "engine `{engine}`: shard {} was cut from {} cases, shard 1 from {corpus}",
                p.shard,
                p.corpus_cases
            );
        }
        let mut seen = HashSet::new();
        let mut outcomes = Vec::with_capacity(corpus);
        for p in &parts {
            for o in &p.outcomes {
                if !seen.insert(o.id.clone()) {
                    bail!("engine `{engine}`: case {} is in two shards", o.id);
                }
                outcomes.push(o.clone());
            }
        }
        if outcomes.len() != corpus {
            bail!(
                "engine `{engine}`: the shards hold {} cases of a corpus of {corpus}",
                outcomes.len()
            );
        }
        outcomes.sort_by(|a, b| a.id.cmp(&b.id));
        merged.push(Merged {
            engine,
            device: parts[0].device.clone(),
            environment: parts[0].environment.clone(),
            outcomes,
        });
    }
    Ok(merged)
}
