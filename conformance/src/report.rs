//! Reports: `reports/conformance/<engine>.json` (every case) and `reports/conformance/summary.md`
//! (per engine, per corpus part and per op family).
use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};

use crate::expect::Status;
use crate::runner::Outcome;

#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct Counts {
    pub pass: usize,
    pub fail: usize,
    pub unsupported: usize,
    pub nondeterministic: usize,
    pub total: usize,
}

impl Counts {
    pub fn add(&mut self, s: Status) {
        self.total += 1;
        match s {
            Status::Pass => self.pass += 1,
            Status::Fail => self.fail += 1,
            Status::Unsupported => self.unsupported += 1,
            Status::Nondeterministic => self.nondeterministic += 1,
        }
    }

    fn row(&self, label: &str) -> String {
        let pct = if self.total == 0 {
            0.0
        } else {
            100.0 * self.pass as f64 / self.total as f64
        };
        format!(
            "| {label} | {} | {} | {} | {} | {} | {pct:.1}% |\n",
            self.pass, self.fail, self.unsupported, self.nondeterministic, self.total
        )
    }
}

/// The op family a case belongs to: that of the registered op its name is about (`test_conv_...` →
/// Conv, `test_attention_..._expanded` → Attention), else of its last node's op; "other" when no op of
/// the case has a CPU kernel.
pub fn family_of(o: &Outcome) -> &'static str {
    let reg = quorum::ops::Registry::cpu();
    let case =
        o.id.rsplit('/')
            .next()
            .unwrap_or("")
            .trim_start_matches("test_")
            .replace('_', "")
            .to_lowercase();
    let named = reg
        .ops()
        .filter(|(_, op)| case.starts_with(&op.to_lowercase()))
        .max_by_key(|(_, op)| op.len());
    named
        .and_then(|(d, op)| reg.family(d, op))
        .or_else(|| {
            o.ops.iter().rev().find_map(|op| {
                let (domain, name) = op.rsplit_once("::").unwrap_or(("", op));
                reg.family(domain, name)
            })
        })
        .unwrap_or("other")
}

pub fn part_of(id: &str) -> &str {
    id.split('/').next().unwrap_or("")
}

pub struct EngineReport<'a> {
    pub engine: &'a str,
    pub device: String,
    pub outcomes: &'a [Outcome],
}

impl EngineReport<'_> {
    pub fn by_part(&self) -> BTreeMap<String, Counts> {
        let mut m: BTreeMap<String, Counts> = BTreeMap::new();
        for o in self.outcomes {
            m.entry(part_of(&o.id).to_string())
                .or_default()
                .add(o.status());
        }
        m
    }

    pub fn by_family(&self) -> BTreeMap<&'static str, Counts> {
        let mut m: BTreeMap<&'static str, Counts> = BTreeMap::new();
        for o in self.outcomes {
            m.entry(family_of(o)).or_default().add(o.status());
        }
        m
    }

    pub fn total(&self) -> Counts {
        let mut c = Counts::default();
        self.outcomes.iter().for_each(|o| c.add(o.status()));
        c
    }

    /// The summary table a person reads in the terminal and in summary.md.
    pub fn markdown(&self) -> String {
        let head = "| | pass | fail | unsupported | nondeterministic | total | pass rate |\n|---|---|---|---|---|---|---|\n";
        let mut s = format!(
            "## Engine `{}` ({})\n\n### By corpus part\n\n{head}",
            self.engine, self.device
        );
        for (p, c) in self.by_part() {
            s.push_str(&c.row(&p));
        }
        s.push_str(&self.total().row("**all**"));
        s.push_str(&format!("\n### By op family\n\n{head}"));
        for (f, c) in self.by_family() {
            s.push_str(&c.row(f));
        }
        s
    }

    pub fn write_json(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir)?;
        let json = serde_json::json!({
            "engine": self.engine,
            "device": self.device,
            "onnx_corpus": crate::corpus::ONNX_PIN,
            "totals": self.total(),
            "by_part": self.by_part(),
            "by_family": self.by_family(),
            "cases": self.outcomes.iter().map(|o| serde_json::json!({
                "id": o.id, "status": o.status, "detail": o.detail, "family": family_of(o),
            })).collect::<Vec<_>>(),
        });
        let path = dir.join(format!("{}.json", self.engine));
        std::fs::write(&path, serde_json::to_string_pretty(&json)? + "\n")
            .with_context(|| format!("writing {}", path.display()))
    }
}

/// Writes summary.md for the engines that ran.
pub fn write_summary(dir: &Path, reports: &[EngineReport]) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut s = format!(
        "# Conformance summary\n\nONNX backend corpus generated from onnx {} (seeded), plus Quorum's own regression cases.\n\
         Each engine's non-passing cases are listed with reasons in `conformance/expected/<engine>.txt`.\n\n",
        crate::corpus::ONNX_PIN
    );
    for r in reports {
        s.push_str(&r.markdown());
        s.push('\n');
    }
    // Engines that did not run here (a GPU engine on a machine without one) keep their last report.
    let mut others: Vec<String> = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let path = e.path();
            let Some(name) = path.file_stem().and_then(|n| n.to_str()) else {
                continue;
            };
            if path.extension().is_none_or(|x| x != "json")
                || reports.iter().any(|r| r.engine == name)
            {
                continue;
            }
            let Ok(j) = std::fs::read_to_string(&path)
                .map_err(anyhow::Error::from)
                .and_then(|t| Ok(serde_json::from_str::<serde_json::Value>(&t)?))
            else {
                continue;
            };
            let t = &j["totals"];
            others.push(format!(
                "| `{name}` | {} | {} | {} | {} | {} | {} |\n",
                j["device"].as_str().unwrap_or("?"),
                t["pass"],
                t["fail"],
                t["unsupported"],
                t["nondeterministic"],
                t["total"]
            ));
        }
    }
    if !others.is_empty() {
        others.sort();
        s.push_str("## Engines not run on this machine (their last reports)\n\n| engine | device | pass | fail | unsupported | nondeterministic | total |\n|---|---|---|---|---|---|---|\n");
        others.iter().for_each(|o| s.push_str(o));
    }
    std::fs::write(dir.join("summary.md"), s).context("writing summary.md")
}
