//! `cargo xtask zoo`: every architecture of the zoo (`benches/zoo/entries.py`: torchvision, timm,
//! transformers, their other exporters and opsets, QDQ and f16 variants), exported here offline,
//! run through Quorum on each engine asked for and through onnxruntime, compared and timed. Writes
//! `reports/zoo/<engine>.{md,json}`.
//!
//! Every (entry, engine) result is kept under `target/zoo/results/<engine>/<entry>.json`, stamped
//! with the exports and the `quorum` binary it came from, so an interrupted run resumes where it
//! stopped and `--shard I/N` runs on several machines (or one after another) fill one report: the
//! report is rendered from every stored result of the current exports, not only this run's (each
//! row's binary is in the JSON; the report counts the results per binary).
mod report;
mod slice;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};

use crate::bench_cpu::{self, BenchModel, Sides};
pub use report::{EntryResult, Status};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Engines to run Quorum on (`cpu`, `wgpu`, `cuda`; repeatable).
    #[arg(long = "engine", default_value = "cpu")]
    engines: Vec<String>,
    /// Only entries whose name contains one of these (repeatable).
    #[arg(long)]
    only: Vec<String>,
    /// Only entries of these sources (`torchvision`, `timm`, `transformers`; repeatable).
    #[arg(long)]
    source: Vec<String>,
    /// This run's part of the zoo: entries whose catalogue index is I modulo N.
    #[arg(long, value_parser = parse_shard)]
    shard: Option<(usize, usize)>,
    /// Leave out entries with more parameters than this many millions: not exported, listed in
    /// the report as left out, with the limit.
    #[arg(long)]
    max_mparams: Option<f64>,
    /// Run entries again even when a result of this binary and these exports is stored.
    #[arg(long)]
    fresh: bool,
    /// Timed rounds per entry; each round runs both runtimes, the order swapping every round.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Milliseconds each runtime runs per round.
    #[arg(long, default_value_t = 300)]
    round_ms: u64,
    /// Threads for each runtime.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// A `quorum` binary to use instead of building one (`cargo build --release -p quorum`).
    #[arg(long)]
    quorum: Option<PathBuf>,
    /// Folder of the report, relative to the workspace root.
    #[arg(long, default_value = "reports/zoo")]
    out: PathBuf,
    /// Export and run nothing: render the report from the stored results.
    #[arg(long)]
    report_only: bool,
    /// Delete an entry's exported model once its results are stored when it is larger than this
    /// many MB (the large architectures take tens of GB together); a later run exports it again.
    #[arg(long)]
    prune_mb: Option<u64>,
}

fn parse_shard(s: &str) -> Result<(usize, usize), String> {
    let (i, n) = s.split_once('/').ok_or("expected I/N, e.g. 0/4")?;
    let (i, n): (usize, usize) = (
        i.parse().map_err(|e| format!("{i}: {e}"))?,
        n.parse().map_err(|e| format!("{n}: {e}"))?,
    );
    if n == 0 || i >= n {
        return Err(format!("shard {i}/{n}: need 0 <= I < N"));
    }
    Ok((i, n))
}

/// One line of the exporter's `--list`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CatalogueEntry {
    pub name: String,
    pub source: String,
    pub family: String,
    pub exporter: String,
    pub opset: Option<u32>,
    /// The entry this one is derived from (another exporter or opset, quantization, f16).
    pub of: Option<String>,
}

pub fn run(a: Args) -> Result<bool> {
    let root = quorum_conformance::workspace_root();
    let work = root.join("target/zoo");
    let models = work.join("models");
    let env = bench_cpu::pyenv();
    let lock = env.load_lock()?;
    let interp = env.interpreter(&lock)?;
    let py = interp.path().to_path_buf();
    let script = root.join("benches/zoo/export.py");
    let stamp = export_stamp(&root)?;
    let catalogue = catalogue(&py, &script, &models)?;
    let quorum = match &a.quorum {
        Some(q) => q.clone(),
        None => bench_cpu::build_quorum(&root)?,
    };
    let binary = format!(
        "{:016x}",
        bench_cpu::fnv1a(&std::fs::read(&quorum).with_context(|| quorum.display().to_string())?)
    );
    let picked = pick(&catalogue, &a);
    if !a.report_only {
        if picked.is_empty() {
            bail!(
                "no zoo entry picked (--only {:?}, --shard {:?})",
                a.only,
                a.shard
            );
        }
        refresh_exports(&models, &stamp)?;
        // Export a batch, run it on every engine, prune, then the next batch: the large
        // architectures never have to sit on the disk together.
        for (b, batch) in picked.chunks(EXPORT_BATCH).enumerate() {
            let todo: Vec<CatalogueEntry> = batch
                .iter()
                .filter(|e| {
                    a.fresh
                        || a.engines.iter().any(|engine| {
                            !stored(&work.join("results").join(engine), e, &stamp, &binary)
                        })
                })
                .cloned()
                .collect();
            if todo.is_empty() {
                continue;
            }
            eprintln!(
                "zoo: batch {} of {} ({} entries to run)",
                b + 1,
                picked.len().div_ceil(EXPORT_BATCH),
                todo.len()
            );
            export(
                &py,
                &script,
                &models,
                &with_bases(&catalogue, &todo),
                a.max_mparams,
            )?;
            for engine in &a.engines {
                run_engine(
                    &a, engine, &todo, &models, &work, &py, &quorum, &stamp, &binary,
                )?;
            }
        }
    }
    let meta = report::Meta {
        commit: bench_cpu::commit_of(&root),
        binary: binary.clone(),
        machine: bench_cpu::machine(),
        threads: a.threads,
        rounds: a.rounds,
        round_ms: a.round_ms,
        python: bench_cpu::describe_python(&interp, &env),
        packages: lock.pins.clone(),
        catalogue: catalogue.len(),
    };
    let out = root.join(&a.out);
    std::fs::create_dir_all(&out)?;
    let mut all_ok = true;
    for engine in &a.engines {
        let stored = stored_results(&work.join("results").join(engine), &stamp);
        let (md, json) = report::render(&meta, engine, &catalogue, &stored);
        let md_path = out.join(format!("{engine}.md"));
        std::fs::write(&md_path, md)?;
        std::fs::write(
            out.join(format!("{engine}.json")),
            serde_json::to_string_pretty(&json)?,
        )?;
        println!(
            "zoo {engine}: {} of {} results stored; report {}",
            stored.len(),
            catalogue.len(),
            md_path.display()
        );
        all_ok &= stored.iter().all(|r| r.status.is_pass_or_not_ours());
    }
    Ok(all_ok)
}

/// The exports' stamp: the exporter, the catalogue and the lock, byte for byte.
fn export_stamp(root: &Path) -> Result<String> {
    let mut bytes = Vec::new();
    for f in [
        "benches/zoo/export.py",
        "benches/zoo/entries.py",
        "benches/models/requirements.lock",
    ] {
        bytes.extend(std::fs::read(root.join(f)).with_context(|| f.to_string())?);
    }
    Ok(format!("{:016x}", bench_cpu::fnv1a(&bytes)))
}

fn catalogue(py: &Path, script: &Path, models: &Path) -> Result<Vec<CatalogueEntry>> {
    let out = Command::new(py)
        .arg(script)
        .arg(models)
        .arg("--list")
        .output()
        .with_context(|| format!("starting {}", py.display()))?;
    if !out.status.success() {
        bail!(
            "{} --list failed ({}): {}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).with_context(|| format!("catalogue line {l}")))
        .collect()
}

/// The entries this run covers, in catalogue order.
fn pick(catalogue: &[CatalogueEntry], a: &Args) -> Vec<CatalogueEntry> {
    catalogue
        .iter()
        .enumerate()
        .filter(|(i, _)| a.shard.is_none_or(|(s, n)| i % n == s))
        .map(|(_, e)| e)
        .filter(|e| a.only.is_empty() || a.only.iter().any(|o| e.name.contains(o.as_str())))
        .filter(|e| a.source.is_empty() || a.source.contains(&e.source))
        .cloned()
        .collect()
}

/// `picked` and the entries they are derived from, which must be exported first.
fn with_bases(catalogue: &[CatalogueEntry], picked: &[CatalogueEntry]) -> Vec<String> {
    let mut names: Vec<String> = picked.iter().map(|e| e.name.clone()).collect();
    for e in picked {
        if let Some(base) = &e.of
            && !names.contains(base)
            && catalogue.iter().any(|c| &c.name == base)
        {
            names.push(base.clone());
        }
    }
    names
}

/// Forgets every export when the exporter, catalogue or lock changed since they were written.
fn refresh_exports(models: &Path, stamp: &str) -> Result<()> {
    let path = models.join("stamp");
    if std::fs::read_to_string(&path).ok().as_deref() == Some(stamp) {
        return Ok(());
    }
    if models.exists() {
        eprintln!("zoo: the exporter or its packages changed; exporting again");
        std::fs::remove_dir_all(models)?;
    }
    std::fs::create_dir_all(models)?;
    std::fs::write(path, stamp)?;
    Ok(())
}

/// Whether `name` needs no export: it was exported, its export failed, or it was left out by the
/// same size limit as this run's.
fn exported(models: &Path, name: &str, limit: Option<f64>) -> bool {
    let d = models.join(name);
    d.join("meta.json").is_file() && d.join("model.onnx").is_file()
        || d.join("error.json").is_file()
        || left_out(&d).is_some_and(|(_, l, _)| l == limit)
}

/// An entry the exporter left out by size: (parameters, the limit in millions, why).
fn left_out(d: &Path) -> Option<(u64, Option<f64>, String)> {
    let j: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("left_out.json")).ok()?).ok()?;
    Some((
        j["params"].as_u64()?,
        j["limit_mparams"].as_f64(),
        j["reason"].as_str().unwrap_or("").to_string(),
    ))
}

/// Exports the entries not exported yet: all in one process, then any the process did not finish
/// (it died: out of memory, a crash in native code) one by one, so that one entry cannot take
/// others with it; one that kills its own process is recorded as an export failure.
fn export(
    py: &Path,
    script: &Path,
    models: &Path,
    names: &[String],
    limit: Option<f64>,
) -> Result<()> {
    let todo: Vec<&String> = names
        .iter()
        .filter(|n| !exported(models, n, limit))
        .collect();
    if todo.is_empty() {
        return Ok(());
    }
    eprintln!(
        "zoo: exporting {} entries to {}",
        todo.len(),
        models.display()
    );
    let exporter = || {
        let mut c = Command::new(py);
        c.arg(script).arg(models);
        match limit {
            Some(l) => c.env("ZOO_MAX_MPARAMS", l.to_string()),
            None => c.env_remove("ZOO_MAX_MPARAMS"),
        };
        c
    };
    let _ = exporter().args(&todo).status();
    for name in names.iter().filter(|n| !exported(models, n, limit)) {
        let status = exporter().arg(name).status()?;
        if !exported(models, name, limit) {
            let d = models.join(name);
            std::fs::create_dir_all(&d)?;
            std::fs::write(
                d.join("error.json"),
                serde_json::to_string_pretty(&serde_json::json!({
                    "name": name,
                    "error": format!("the exporter's process ended ({status}) before finishing it"),
                }))?,
            )?;
        }
    }
    Ok(())
}

/// How many entries are exported before they are run (and pruned, with `--prune-mb`).
const EXPORT_BATCH: usize = 24;

/// Whether `e` has a stored result of the current exports and binary in `dir`.
fn stored(dir: &Path, e: &CatalogueEntry, stamp: &str, binary: &str) -> bool {
    std::fs::read(dir.join(format!("{}.json", e.name)))
        .ok()
        .and_then(|b| serde_json::from_slice::<EntryResult>(&b).ok())
        .is_some_and(|r| r.export_stamp == stamp && r.binary == binary)
}

/// The stored results of the current exports, one per entry (the latest run of each, whichever
/// binary ran it: a run of some entries with a new binary keeps the others' rows in the report,
/// and the report says which binary ran how many).
fn stored_results(dir: &Path, stamp: &str) -> Vec<EntryResult> {
    let mut out: Vec<EntryResult> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read(e.path()).ok())
        .filter_map(|b| serde_json::from_slice::<EntryResult>(&b).ok())
        .filter(|r| r.export_stamp == stamp)
        .collect();
    out.sort_by(|a, b| a.entry.name.cmp(&b.entry.name));
    out
}

#[allow(clippy::too_many_arguments)]
fn run_engine(
    a: &Args,
    engine: &str,
    picked: &[CatalogueEntry],
    models: &Path,
    work: &Path,
    py: &Path,
    quorum: &Path,
    stamp: &str,
    binary: &str,
) -> Result<()> {
    let root = quorum_conformance::workspace_root();
    let dir = work.join("results").join(engine);
    std::fs::create_dir_all(&dir)?;
    let todo: Vec<&CatalogueEntry> = picked
        .iter()
        .filter(|e| a.fresh || !stored(&dir, e, stamp, binary))
        .collect();
    eprintln!(
        "zoo {engine}: {} entries, {} stored already",
        picked.len(),
        picked.len() - todo.len()
    );
    let bar = ProgressBar::new(todo.len() as u64).with_style(
        ProgressStyle::with_template(
            "{prefix} [{elapsed_precise}] {bar:30} {pos}/{len} (eta {eta}) {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_prefix(format!("zoo {engine}"));
    let runner = root.join("benches/models/ort_run.py");
    let sides = Sides {
        quorum,
        python: py,
        runner: &runner,
        threads: a.threads,
        provider: engine,
    };
    for e in todo {
        bar.set_message(e.name.clone());
        let r = run_entry(
            a,
            &sides,
            e,
            models,
            &work.join("outputs").join(engine),
            stamp,
            binary,
        );
        let line = format!("{:<44} {}", e.name, r.line());
        if bar.is_hidden() {
            eprintln!("{line}");
        } else {
            bar.println(line);
        }
        std::fs::write(
            dir.join(format!("{}.json", e.name)),
            serde_json::to_string_pretty(&r)?,
        )?;
        if let Some(mb) = a.prune_mb
            && r.bytes.is_some_and(|b| b > mb * 1_000_000)
        {
            // The results stay; the model is exported again if a later run needs it.
            let _ = std::fs::remove_file(models.join(&e.name).join("model.onnx"));
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(())
}

/// The zoo's tolerance for an entry's outputs against onnxruntime's, as a fraction of each output's
/// largest magnitude, with why.
pub fn tolerance(e: &CatalogueEntry) -> (f64, &'static str) {
    match e.family.as_str() {
        "f16" => (
            1e-2,
            "1e-2 of the output's scale: f16 carries 11 bits, and the two runtimes round \
             intermediate values at different points",
        ),
        "quantized" => (
            5e-2,
            "5e-2 of the output's scale: an 8-bit activation that lands on the other side of a \
             rounding boundary moves by one step (1/256 of its range) and the step propagates",
        ),
        _ => (
            1e-3,
            "1e-3 of the output's scale (f32 summed in another order)",
        ),
    }
}

fn run_entry(
    a: &Args,
    sides: &Sides,
    e: &CatalogueEntry,
    models: &Path,
    outputs: &Path,
    stamp: &str,
    binary: &str,
) -> EntryResult {
    let d = models.join(&e.name);
    let mut r = EntryResult::new(e.clone(), sides.provider, stamp, binary);
    let meta: serde_json::Value = std::fs::read(d.join("meta.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    if meta.is_null()
        && let Some((params, _, why)) = left_out(&d)
    {
        r.params = Some(params);
        r.status = Status::LeftOut;
        r.reason = Some(why);
        return r;
    }
    if meta.is_null() {
        let err: serde_json::Value = std::fs::read(d.join("error.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        r.status = Status::ExportFailed;
        r.reason = Some(err["error"].as_str().unwrap_or("not exported").to_string());
        return r;
    }
    r.set_export(&meta);
    if let (Some(limit), Some(p)) = (a.max_mparams, r.params)
        && p as f64 / 1e6 > limit
    {
        r.status = Status::LeftOut;
        r.reason = Some(format!(
            "{:.1} M parameters, over this run's --max-mparams {limit}",
            p as f64 / 1e6
        ));
        return r;
    }
    let inputs: Vec<(String, PathBuf)> = meta["inputs"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), d.join(v["file"].as_str().unwrap_or(""))))
                .collect()
        })
        .unwrap_or_default();
    let model = BenchModel {
        name: e.name.clone(),
        group: "zoo",
        path: d.join("model.onnx"),
        inputs,
        about: meta["exporter_detail"].as_str().unwrap_or("").to_string(),
        note: meta["note"].as_str().map(String::from),
    };
    let m = bench_cpu::bench_one(sides, &model, &outputs.join(&e.name), a.rounds, a.round_ms);
    let (tol, why) = tolerance(e);
    r.tolerance = why.to_string();
    r.note = model.note.clone();
    r.judge(&m, tol);
    if matches!(r.status, Status::Mismatch | Status::OrtFailed) {
        r.oracles(oracles(sides, &model, &outputs.join(&e.name)));
    }
    if sides.provider != "cpu" && r.status.runs() {
        r.placement = placement(sides, &model);
    }
    let _ = std::fs::remove_dir_all(outputs.join(&e.name));
    r
}

/// Both oracles' judgement of every node Quorum computes: a strict run on the simulated device
/// (the CPU kernels behind the device seam, so that every node is judged) for the CPU engine, a
/// strict run on the engine for the others.
fn oracles(sides: &Sides, m: &BenchModel, dir: &Path) -> Result<(), String> {
    let provider = if sides.provider == "cpu" {
        "sim"
    } else {
        sides.provider
    };
    let judge = Sides { provider, ..*sides };
    let out = judge
        .quorum(
            &[
                "run",
                "--verify",
                "strict",
                "--output-dir",
                &dir.join("oracles").display().to_string(),
            ],
            m,
        )
        .output()
        .map_err(|e| format!("could not start quorum: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .rev()
        .find(|l| l.contains("mismatch") || l.contains("unsettled") || l.starts_with("error"))
        .or_else(|| err.trim().lines().last())
        .unwrap_or("")
        .to_string();
    Err(format!("{line} ({})", out.status))
}

/// Where the nodes of one run ran (`quorum bench --profile`): the share on the engine's device and
/// the ops that ran on the CPU.
fn placement(sides: &Sides, m: &BenchModel) -> Option<report::Placement> {
    let mut c = sides.quorum(
        &[
            "bench",
            "--json",
            "--profile",
            "--warmup",
            "0",
            "--iters",
            "1",
        ],
        m,
    );
    let j = bench_cpu::json_of(&mut c).ok()?;
    let mut p = report::Placement::default();
    for row in j["profile"].as_array()? {
        let n = row["nodes_per_run"].as_f64().unwrap_or(0.0);
        p.nodes += n;
        if row["provider"].as_str() == Some("cpu") {
            if let Some(op) = row["op"].as_str() {
                p.cpu_ops.push(op.to_string());
            }
        } else {
            p.device_nodes += n;
        }
    }
    Some(p)
}

/// Quorum's exit code in an error line (`... (exit status: 3)`).
pub fn exit_code(error: &str) -> Option<i32> {
    let tail = error.rsplit_once("exit status: ")?.1;
    tail.trim_end_matches(')').trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_split_the_catalogue_by_index() {
        assert_eq!(parse_shard("1/4"), Ok((1, 4)));
        assert!(parse_shard("4/4").is_err());
        assert!(parse_shard("0/0").is_err());
        assert!(parse_shard("x").is_err());
    }

    #[test]
    fn exit_codes_are_read_from_quorums_error_line() {
        assert_eq!(
            exit_code("error: unsupported op Foo (exit status: 3)"),
            Some(3)
        );
        assert_eq!(exit_code("signal: 9 (SIGKILL)"), None);
    }
}
