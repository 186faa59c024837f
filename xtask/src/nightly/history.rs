//! The nightly history (`reports/history.jsonl`, one record per night and adapter) and the
//! noise-aware regression rule.
//!
//! The rule, for a model's latency on a provider: compare tonight's median with the last
//! `window` nights of the same adapter and matrix size that measured it; it is a regression when
//! there are at least `min_nights` of them and tonight's median is both **above every one of
//! their p90s** (outside the spread those nights showed, run to run and night to night) and
//! **more than `pct` percent above the median of their medians**. Either condition alone fires
//! on noise: a quiet history makes any wobble "outside the spread", and a single noisy night
//! exceeds a percentage. A conformance engine's pass count is exact: any drop is a regression.
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// One model on one provider, one night.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelLatency {
    pub model: String,
    pub provider: String,
    pub median_ms: f64,
    pub p10_ms: f64,
    pub p90_ms: f64,
}

/// One conformance engine's totals, one night.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EngineCounts {
    pub engine: String,
    pub pass: u64,
    pub fail: u64,
    pub unsupported: u64,
    pub nondeterministic: u64,
    pub total: u64,
}

/// One model's graph-capture outcome, one night.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GraphRow {
    pub model: String,
    pub provider: String,
    pub verdict: String,
    pub speedup: Option<f64>,
}

/// One threshold entry, one night.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CrossoverRow {
    pub adapter: String,
    pub family: String,
    pub class: String,
    pub dtype: String,
    pub unit: String,
    pub host: String,
    pub resident: String,
}

/// One night's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub date: String,
    pub commit: String,
    /// The matrix's adapter (the folder under `reports/bench/`): nights compare only with nights
    /// of the same adapter.
    pub adapter_id: String,
    pub cpu: String,
    pub quick: bool,
    pub models: Vec<ModelLatency>,
    pub conformance: Vec<EngineCounts>,
    pub graphs: Vec<GraphRow>,
    pub crossovers: Vec<CrossoverRow>,
    /// What the regression rule found against the nights before.
    pub regressions: Vec<String>,
}

/// Every record of a history file (none when it does not exist).
pub fn read(path: &Path) -> Result<Vec<Record>> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(Vec::new());
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).with_context(|| format!("{} line {}", path.display(), i + 1))
        })
        .collect()
}

/// Writes the history with `record` in it: it replaces a record of the same date and adapter (a
/// night run twice keeps its last run), else it is appended.
pub fn write_with(path: &Path, mut history: Vec<Record>, record: &Record) -> Result<()> {
    history.retain(|r| !(r.date == record.date && r.adapter_id == record.adapter_id));
    history.push(record.clone());
    let mut text = String::new();
    for r in &history {
        text.push_str(&serde_json::to_string(r)?);
        text.push('\n');
    }
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// The rule's parameters.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// Nights looked back at.
    pub window: usize,
    /// Fewer comparable nights than this: no judgement yet.
    pub min_nights: usize,
    /// How much worse than the nights' median a median must be, in percent.
    pub pct: f64,
}

impl Default for Rule {
    fn default() -> Rule {
        Rule {
            window: 7,
            min_nights: 3,
            pct: 10.0,
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Whether `now` regresses against `before` (oldest first): the reason, or `None`.
pub fn latency_regression(
    rule: &Rule,
    before: &[&ModelLatency],
    now: &ModelLatency,
) -> Option<String> {
    let recent = &before[before.len().saturating_sub(rule.window)..];
    if recent.len() < rule.min_nights {
        return None;
    }
    let spread_top = recent.iter().map(|m| m.p90_ms).fold(f64::MIN, f64::max);
    let base = median(recent.iter().map(|m| m.median_ms).collect());
    let limit = base * (1.0 + rule.pct / 100.0);
    (now.median_ms > spread_top && now.median_ms > limit).then(|| {
        format!(
            "{} on {}: median {:.3} ms, {:+.1}% against the median {:.3} ms of the last {} nights, above their highest p90 {:.3} ms",
            now.model,
            now.provider,
            now.median_ms,
            (now.median_ms / base - 1.0) * 100.0,
            base,
            recent.len(),
            spread_top
        )
    })
}

/// Every regression of `now` against the comparable records of `history` (same adapter and
/// matrix size, other dates).
pub fn regressions(rule: &Rule, history: &[Record], now: &Record) -> Vec<String> {
    let past: Vec<&Record> = history
        .iter()
        .filter(|r| r.adapter_id == now.adapter_id && r.quick == now.quick && r.date != now.date)
        .collect();
    let mut out = Vec::new();
    for m in &now.models {
        let before: Vec<&ModelLatency> = past
            .iter()
            .filter_map(|r| {
                r.models
                    .iter()
                    .find(|x| x.model == m.model && x.provider == m.provider)
            })
            .collect();
        out.extend(latency_regression(rule, &before, m));
    }
    for c in &now.conformance {
        if let Some(prev) = past
            .iter()
            .rev()
            .find_map(|r| r.conformance.iter().find(|x| x.engine == c.engine))
            && c.pass < prev.pass
        {
            out.push(format!(
                "conformance {}: {} cases pass, {} the night before",
                c.engine, c.pass, prev.pass
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests;
