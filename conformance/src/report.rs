//! Reports: `reports/conformance/<engine>.json` (every case) and `reports/conformance/summary.md`
//! (per engine, per corpus part and per op family). For an engine with a device, each table also
//! shows device coverage beside the pass rate: nodes that ran on the device out of all nodes (per
//! part: of its cases; per op family: of the nodes of that family's ops, whatever case holds them).
use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};

use crate::coverage::NodeCounts;
use crate::expect::Status;
use crate::pyenv::Environment;
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

    /// A table row; `device` adds the device-coverage column.
    fn row(&self, label: &str, device: Option<NodeCounts>) -> String {
        let pct = if self.total == 0 {
            0.0
        } else {
            100.0 * self.pass as f64 / self.total as f64
        };
        let device = device.map_or(String::new(), |d| format!(" {} |", d.describe()));
        format!(
            "| {label} | {} | {} | {} | {} | {} | {pct:.1}% |{device}\n",
            self.pass, self.fail, self.unsupported, self.nondeterministic, self.total
        )
    }
}

/// The op family of an op (`domain::Op` or `Op`), "other" when no CPU kernel has it.
pub fn family_of_op(op: &str) -> &'static str {
    let (domain, name) = op.rsplit_once("::").unwrap_or(("", op));
    quorum::ops::Registry::cpu()
        .family(domain, name)
        .unwrap_or("other")
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
    /// The Python environment that generated the corpus, when known.
    pub environment: Option<Environment>,
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

    /// Whether the engine reported where nodes ran (an engine with a device).
    pub fn has_coverage(&self) -> bool {
        self.outcomes.iter().any(|o| o.coverage.is_some())
    }

    /// Device coverage of every case's nodes, summed per corpus part.
    pub fn coverage_by_part(&self) -> BTreeMap<String, NodeCounts> {
        let mut m: BTreeMap<String, NodeCounts> = BTreeMap::new();
        for o in self.outcomes {
            if let Some(c) = &o.coverage {
                m.entry(part_of(&o.id).to_string())
                    .or_default()
                    .add(c.total());
            }
        }
        m
    }

    /// Device coverage per op family of the nodes themselves.
    pub fn coverage_by_family(&self) -> BTreeMap<&'static str, NodeCounts> {
        let mut m: BTreeMap<&'static str, NodeCounts> = BTreeMap::new();
        for c in self.outcomes.iter().filter_map(|o| o.coverage.as_ref()) {
            for (op, n) in &c.by_op {
                m.entry(family_of_op(op)).or_default().add(*n);
            }
        }
        m
    }

    pub fn coverage_total(&self) -> NodeCounts {
        let mut t = NodeCounts::default();
        self.outcomes
            .iter()
            .filter_map(|o| o.coverage.as_ref())
            .for_each(|c| t.add(c.total()));
        t
    }

    /// Device node results the oracles judged, over every case.
    pub fn checks(&self) -> u64 {
        self.outcomes
            .iter()
            .filter_map(|o| o.coverage.as_ref())
            .map(|c| c.checks)
            .sum()
    }

    /// The summary table a person reads in the terminal and in summary.md.
    pub fn markdown(&self) -> String {
        let cov = self.has_coverage();
        let head = if cov {
            "| | pass | fail | unsupported | nondeterministic | total | pass rate | nodes on the device |\n|---|---|---|---|---|---|---|---|\n"
        } else {
            "| | pass | fail | unsupported | nondeterministic | total | pass rate |\n|---|---|---|---|---|---|---|\n"
        };
        let mut s = format!("## Engine `{}` ({})\n\n", self.engine, self.device);
        if let Some(env) = &self.environment {
            s.push_str(&environment_line(env));
        }
        s.push_str(&format!("### By corpus part\n\n{head}"));
        let part_cov = self.coverage_by_part();
        let pick = |m: Option<NodeCounts>| cov.then(|| m.unwrap_or_default());
        for (p, c) in self.by_part() {
            s.push_str(&c.row(&p, pick(part_cov.get(&p).copied())));
        }
        s.push_str(
            &self
                .total()
                .row("**all**", pick(Some(self.coverage_total()))),
        );
        s.push_str(&format!("\n### By op family\n\n{head}"));
        let fam_cov = self.coverage_by_family();
        let mut families = self.by_family();
        for f in fam_cov.keys() {
            families.entry(f).or_default();
        }
        for (f, c) in families {
            s.push_str(&c.row(f, pick(fam_cov.get(f).copied())));
        }
        if cov {
            s.push_str(
                "\nNodes on the device: top-level nodes that ran on the device out of all (constant folding \
                 off; a node whose kernel declined at run time counts as CPU). Per part over its cases, per op \
                 family over the nodes of that family's ops.\n",
            );
            s.push_str(&format!(
                "\nNode checks: {} device node results judged by both oracles (strict verification), \
                 beside the comparison with the corpus data.\n",
                self.checks()
            ));
        }
        s
    }

    pub fn write_json(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir)?;
        let cases: Vec<serde_json::Value> = self
            .outcomes
            .iter()
            .map(|o| {
                let mut c = serde_json::json!({
                    "id": o.id, "status": o.status, "detail": o.detail, "family": family_of(o),
                });
                if o.not_compared > 0 {
                    c["not_compared"] = o.not_compared.into();
                }
                if let Some(cov) = &o.coverage {
                    let t = cov.total();
                    c["device_nodes"] = t.device.into();
                    c["node_checks"] = cov.checks.into();
                    c["cpu_nodes"] = t.cpu.into();
                    let cpu_ops: Vec<&String> = cov
                        .by_op
                        .iter()
                        .filter(|(_, n)| n.cpu > 0)
                        .map(|(op, _)| op)
                        .collect();
                    if !cpu_ops.is_empty() {
                        c["cpu_ops"] = serde_json::to_value(cpu_ops).unwrap_or_default();
                    }
                    if !cov.fell_back.is_empty() {
                        c["fell_back"] = serde_json::to_value(&cov.fell_back).unwrap_or_default();
                    }
                }
                c
            })
            .collect();
        let mut json = serde_json::json!({
            "engine": self.engine,
            "device": self.device,
            "onnx_corpus": crate::corpus::ONNX_PIN,
            "python_environment": self.environment,
            "totals": self.total(),
            "by_part": self.by_part(),
            "by_family": self.by_family(),
        });
        if self.has_coverage() {
            json["device_coverage"] = serde_json::json!({
                "node_checks": self.checks(),
                "total": self.coverage_total(),
                "by_part": self.coverage_by_part(),
                "by_family": self.coverage_by_family(),
            });
        }
        json["cases"] = cases.into();
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
            let d = &j["device_coverage"]["total"];
            let device = NodeCounts {
                device: d["device"].as_u64().unwrap_or(0) as usize,
                cpu: d["cpu"].as_u64().unwrap_or(0) as usize,
            };
            others.push(format!(
                "| `{name}` | {} | {} | {} | {} | {} | {} | {} |\n",
                j["device"].as_str().unwrap_or("?"),
                t["pass"],
                t["fail"],
                t["unsupported"],
                t["nondeterministic"],
                t["total"],
                device.describe()
            ));
        }
    }
    if !others.is_empty() {
        others.sort();
        s.push_str("## Engines not run on this machine (their last reports)\n\n| engine | device | pass | fail | unsupported | nondeterministic | total | nodes on the device |\n|---|---|---|---|---|---|---|---|\n");
        others.iter().for_each(|o| s.push_str(o));
    }
    std::fs::write(dir.join("summary.md"), s).context("writing summary.md")
}

/// One line on the Python environment that generated the corpus: which, and how it differs from the
/// lock (a `QUORUM_PYTHON` machine's own Python may).
pub fn environment_line(env: &Environment) -> String {
    if env.differences.is_empty() {
        format!(
            "Corpus generated by {} ({}), matching `conformance/corpus/requirements.lock`.\n\n",
            env.python, env.source
        )
    } else {
        format!(
            "**Corpus generated by {} ({}), which differs from `conformance/corpus/requirements.lock`:** {}.\n\n",
            env.python,
            env.source,
            env.differences.join("; ")
        )
    }
}
