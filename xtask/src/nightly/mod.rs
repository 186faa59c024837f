//! `cargo xtask nightly`: the benchmark matrix, the conformance engines present and the model
//! benchmarks, rendered into `reports/nightly/<date>/index.html` (SVG plots) and `summary.md`,
//! with one record appended to `reports/history.jsonl` and the regression rule (`history`)
//! applied against the nights before: a regression is named in the report and fails the command.
//!
//! The measuring is done by the release `quorum-matrix nightly` binary (the GPU bundle ships it,
//! since the GPU machine has no toolchain); `--from DIR` renders a folder it wrote elsewhere,
//! with the conformance reports found beside it.
mod history;
mod page;
mod plots;

#[cfg(test)]
mod browser_tests;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use quorum_matrix::outputs::{Outputs, write_json};

use history::{CrossoverRow, EngineCounts, GraphRow, ModelLatency, Record, Rule};

#[derive(clap::Args)]
pub struct Args {
    /// A small matrix and short budgets (about a minute of measuring on two cores).
    #[arg(long)]
    quick: bool,
    /// Render measurements made elsewhere: a folder written by `quorum-matrix nightly` (the GPU
    /// bundle's `nightly` step), with any `conformance/<engine>.json` reports beside it.
    #[arg(long)]
    from: Option<PathBuf>,
    /// Conformance: `run` every engine available here, read `reports` as they are (stated in
    /// the report), or `skip`.
    #[arg(long, default_value = "run")]
    conformance: String,
    /// The night's date (default: today, UTC; with --from, the matrix's date).
    #[arg(long)]
    date: Option<String>,
    /// How much worse than the recent nights' median a median must be to regress, in percent.
    #[arg(long, default_value_t = 10.0)]
    regression_pct: f64,
    /// Nights of history the rule looks at.
    #[arg(long, default_value_t = 7)]
    window: usize,
}

fn cargo_build(root: &Path, args: &[&str]) -> Result<()> {
    let ok = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(root)
        .args(["build", "--release"])
        .args(args)
        .status()
        .context("running cargo build")?
        .success();
    if !ok {
        bail!("cargo build --release {args:?} failed");
    }
    Ok(())
}

fn release_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(|d| root.join(d))
        .unwrap_or_else(|| root.join("target"))
        .join("release")
}

/// Measures here: the release `quorum-matrix nightly` into `target/nightly/<date>/`.
fn measure_here(root: &Path, quick: bool, date: &str) -> Result<PathBuf> {
    cargo_build(root, &["-p", "quorum-matrix", "--bin", "quorum-matrix"])?;
    let corpus = quorum_conformance::corpus::default_dir();
    if let Err(e) = quorum_conformance::corpus::ensure(&corpus) {
        eprintln!("no corpus ({e:#}): the matrix runs without the light models");
    }
    let out = root.join("target/nightly").join(date);
    let mut cmd = Command::new(release_dir(root).join("quorum-matrix"));
    cmd.current_dir(root)
        .arg("nightly")
        .arg("--out")
        .arg(&out)
        .arg("--corpus")
        .arg(&corpus);
    if quick {
        cmd.arg("--quick");
    }
    if !cmd.status().context("running quorum-matrix")?.success() {
        bail!("quorum-matrix nightly failed");
    }
    Ok(out)
}

/// Runs the conformance engines available here (release runner), leaving their reports in
/// `reports/conformance/`; a run whose results differ from the expectation lists is reported,
/// not fatal: the counts say what changed.
fn run_conformance(root: &Path) -> Result<()> {
    cargo_build(root, &["-p", "quorum-conformance", "--bin", "conformance"])?;
    let status = Command::new(release_dir(root).join("conformance"))
        .current_dir(root)
        .status()
        .context("running the conformance runner")?;
    if !status.success() {
        eprintln!("conformance: results differ from the expectation lists (see its output)");
    }
    Ok(())
}

/// Totals of every `<engine>.json` conformance report in `dir`.
fn conformance_counts(dir: &Path) -> Vec<EngineCounts> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|f| f.extension().is_some_and(|e| e == "json"));
    files.sort();
    files
        .iter()
        .filter_map(|f| {
            let v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(f).ok()?).ok()?;
            let t = v.get("totals")?;
            let n = |k: &str| t.get(k).and_then(|x| x.as_u64()).unwrap_or(0);
            Some(EngineCounts {
                engine: v.get("engine")?.as_str()?.to_string(),
                pass: n("pass"),
                fail: n("fail"),
                unsupported: n("unsupported"),
                nondeterministic: n("nondeterministic"),
                total: n("total"),
            })
        })
        .collect()
}

fn crossover_text(c: &quorum::session::thresholds::Crossover) -> String {
    use quorum::session::thresholds::Status;
    match c.status {
        Status::Crossover => format!(
            "from {} (CPU wins up to {})",
            c.threshold.unwrap_or(0),
            c.cpu_wins_up_to.unwrap_or(0)
        ),
        Status::DeviceAlways => format!("always (from {})", c.threshold.unwrap_or(0)),
        Status::CpuAlways => format!("never up to {}", c.largest_measured.unwrap_or(0)),
        Status::Undecided => format!("undecided ({} points in the noise)", c.points),
    }
}

/// Tonight's record from the measurements and conformance counts.
pub fn record(o: &Outputs, conformance: Vec<EngineCounts>, date: &str) -> Record {
    let mut models = Vec::new();
    for v in &o.models {
        for (provider, r) in &v.timings {
            if let Ok(s) = r {
                models.push(ModelLatency {
                    model: v.case.clone(),
                    provider: provider.clone(),
                    median_ms: s.median_ms,
                    p10_ms: s.p10_ms,
                    p90_ms: s.p90_ms,
                });
            }
        }
    }
    Record {
        date: date.into(),
        commit: o.matrix.commit.clone(),
        adapter_id: o.matrix.adapter_id.clone(),
        cpu: o.matrix.machine.cpu.clone(),
        quick: o.matrix.quick,
        models,
        conformance,
        graphs: o
            .graphs
            .iter()
            .map(|g| GraphRow {
                model: g.model.clone(),
                provider: g.provider.clone(),
                verdict: g.verdict.clone(),
                speedup: g.speedup,
            })
            .collect(),
        crossovers: o
            .tables
            .iter()
            .flat_map(|t| {
                t.entries.iter().map(|e| CrossoverRow {
                    adapter: t.adapter.id.clone(),
                    family: e.family.clone(),
                    class: e.class.clone(),
                    dtype: e.dtype.clone(),
                    unit: e.unit.clone(),
                    host: crossover_text(&e.host),
                    resident: crossover_text(&e.resident),
                })
            })
            .collect(),
        regressions: Vec::new(),
    }
}

/// Renders one night into `reports`: the page, the summary, the history line, and the matrix,
/// thresholds, graph outcomes and validation under `bench/` and `thresholds/`; `models`, issue 16's
/// table of models beside PyTorch (`models-vs-pytorch.md` of the bundle's `pytorch` step), is
/// copied beside the page and linked from it. Returns the regressions found.
pub fn render(
    reports: &Path,
    o: &Outputs,
    conformance: Vec<EngineCounts>,
    conformance_source: &str,
    date: &str,
    rule: &Rule,
    models: Option<&Path>,
) -> Result<Vec<String>> {
    let bench = reports.join("bench").join(&o.matrix.adapter_id);
    o.matrix.write(&bench.join("matrix.json"))?;
    write_json(&bench.join("graphs.json"), &o.graphs)?;
    write_json(&bench.join("validation.json"), &o.models)?;
    for t in &o.tables {
        write_json(
            &reports
                .join("thresholds")
                .join(format!("{}.json", t.adapter.id)),
            t,
        )?;
    }
    let history_path = reports.join("history.jsonl");
    let history = history::read(&history_path)?;
    let mut now = record(o, conformance, date);
    now.regressions = history::regressions(rule, &history, &now);
    let dir = reports.join("nightly").join(date);
    std::fs::create_dir_all(&dir)?;
    if let Some(m) = models {
        std::fs::copy(m, dir.join(page::MODELS_TABLE))
            .with_context(|| format!("copying {}", m.display()))?;
    }
    let mut nights: Vec<&Record> = history
        .iter()
        .filter(|r| r.adapter_id == now.adapter_id && r.date != now.date)
        .collect();
    nights.push(&now);
    let ctx = page::Context {
        outputs: o,
        now: &now,
        nights: &nights,
        conformance_source,
        rule,
        models_table: models.is_some(),
    };
    std::fs::write(dir.join("index.html"), page::html(&ctx)?)?;
    std::fs::write(dir.join("summary.md"), page::markdown(&ctx))?;
    history::write_with(&history_path, history.clone(), &now)?;
    Ok(now.regressions)
}

pub fn run(a: Args) -> Result<bool> {
    let root = quorum_conformance::workspace_root();
    let date = a.date.clone().unwrap_or_else(quorum_matrix::machine::today);
    let dir = match &a.from {
        Some(d) => d.clone(),
        None => measure_here(&root, a.quick, &date)?,
    };
    let outputs = Outputs::read(&dir)?;
    let date = match (&a.from, &a.date) {
        (Some(_), None) => outputs.matrix.date.clone(),
        _ => date,
    };
    let (conformance, source) = match (a.conformance.as_str(), &a.from) {
        ("skip", _) => (Vec::new(), "not run".to_string()),
        (_, Some(d)) => (
            conformance_counts(&d.join("conformance")),
            format!(
                "reports measured with the matrix ({})",
                d.join("conformance").display()
            ),
        ),
        ("run", None) => {
            run_conformance(&root)?;
            (
                conformance_counts(&root.join("reports/conformance")),
                "run tonight".to_string(),
            )
        }
        ("reports", None) => (
            conformance_counts(&root.join("reports/conformance")),
            "read from reports/conformance/ as committed, not run tonight".to_string(),
        ),
        (other, _) => bail!("--conformance {other}: expected run, reports or skip"),
    };
    let rule = Rule {
        window: a.window,
        min_nights: 3,
        pct: a.regression_pct,
    };
    // The model table, where the same call ran the bundle's `pytorch` step (`run.sh pytorch
    // nightly` copies it into the nightly folder).
    let models = a
        .from
        .as_ref()
        .map(|d| d.join(page::MODELS_TABLE))
        .filter(|p| p.is_file());
    let regressions = render(
        &root.join("reports"),
        &outputs,
        conformance,
        &source,
        &date,
        &rule,
        models.as_deref(),
    )?;
    let page = root.join("reports/nightly").join(&date).join("index.html");
    println!("nightly report: {}", page.display());
    if regressions.is_empty() {
        println!("no regression");
        Ok(true)
    } else {
        for r in &regressions {
            println!("REGRESSION: {r}");
        }
        Ok(false)
    }
}
