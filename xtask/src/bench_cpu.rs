//! `cargo xtask bench-cpu`: Quorum and onnxruntime side by side on the CPU, with the same inputs and
//! the same thread count, alternating, on every `light` model of the corpus and on real models
//! exported from PyPI packages (`benches/models/export.py`). Writes
//! `reports/cpu/models-vs-onnxruntime.{md,json}`.
//!
//! Quorum is timed through the release `quorum` binary's `bench --json` (per-run times in
//! `times_ms`), not through the library: xtask builds with the dev profile, where Quorum's own code
//! is unoptimised, and the binary is what users run. onnxruntime is timed by
//! `benches/models/ort_run.py` in the venv of `benches/models/requirements.lock`. Each round runs
//! one side then the other, the order swapping every round, so that load from other processes on
//! the machine falls on both; the statistics pool every timed run of every round.
pub mod compare;
pub mod report;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use quorum_conformance::pyenv::{Interpreter, PyEnv};

pub use report::{ModelResult, Side};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Rounds per model; each round runs both runtimes, the order swapping every round.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Milliseconds each runtime runs per round: the number of timed runs per round is this over
    /// the runtime's own latency (measured by one untimed calibration round), at least 2.
    #[arg(long, default_value_t = 1500)]
    round_ms: u64,
    /// Threads for each runtime (RAYON_NUM_THREADS for Quorum, intra_op_num_threads for
    /// onnxruntime).
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// A `quorum` binary to time instead of building one (`cargo build --release -p quorum`).
    #[arg(long)]
    quorum: Option<PathBuf>,
    /// The commit the `--quorum` binary was built from, for the report.
    #[arg(long, requires = "quorum")]
    quorum_commit: Option<String>,
    /// Only models whose name contains one of these (repeatable).
    #[arg(long)]
    only: Vec<String>,
    /// Folder of the report, relative to the workspace root.
    #[arg(long, default_value = "reports/cpu")]
    out: PathBuf,
}

/// The Python environment of the exporters and onnxruntime.
pub fn pyenv() -> PyEnv {
    let root = quorum_conformance::workspace_root();
    PyEnv {
        label: "bench",
        lock: root.join("benches/models/requirements.lock"),
        venv: root.join("target/bench-venv"),
        python_var: "QUORUM_BENCH_PYTHON",
    }
}

/// A model to time: its file and the `.npy` inputs both runtimes get.
#[derive(Debug, Clone)]
pub struct BenchModel {
    pub name: String,
    /// `light` (the corpus) or `real` (exported here).
    pub group: &'static str,
    pub path: PathBuf,
    pub inputs: Vec<(String, PathBuf)>,
    /// What the model is (real models: from their meta.json).
    pub about: String,
    /// What a reader of the output comparison should know (meta.json's `note`).
    pub note: Option<String>,
}

pub fn run(a: Args) -> Result<bool> {
    let root = quorum_conformance::workspace_root();
    let work = root.join("target/bench-cpu");
    let corpus = quorum_conformance::corpus::default_dir();
    quorum_conformance::corpus::ensure(&corpus)?;
    let env = pyenv();
    let lock = env.load_lock()?;
    let interp = env.interpreter(&lock)?;
    let py = interp.path().to_path_buf();
    let exported = root.join("target/bench-models");
    export(&root, &py, &exported)?;
    let (quorum, commit, built) = match &a.quorum {
        Some(q) => (
            q.clone(),
            a.quorum_commit
                .clone()
                .unwrap_or_else(|| "unknown (binary given with --quorum)".into()),
            "given with --quorum",
        ),
        None => (
            build_quorum(&root)?,
            commit_of(&root),
            "built by cargo build --release -p quorum",
        ),
    };
    let mut models = light_models(&corpus, &work)?;
    models.extend(real_models(&exported)?);
    if !a.only.is_empty() {
        models.retain(|m| a.only.iter().any(|o| m.name.contains(o.as_str())));
    }
    if models.is_empty() {
        bail!("no model to time (--only {:?})", a.only);
    }
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let sides = Sides {
        quorum: &quorum,
        python: &py,
        runner: &root.join("benches/models/ort_run.py"),
        threads: a.threads,
        provider: "cpu",
    };
    let mut results = Vec::new();
    for m in &models {
        eprintln!("bench-cpu: {} ({})", m.name, m.group);
        let r = bench_one(
            &sides,
            m,
            &work.join("outputs").join(&m.name),
            a.rounds,
            a.round_ms,
        );
        eprintln!("  {}", r.summary());
        results.push(r);
    }
    let meta = report::Meta {
        commit,
        quorum_binary: format!("{} ({built})", quorum.display()),
        machine: machine(),
        threads: a.threads,
        rounds: a.rounds,
        round_ms: a.round_ms,
        python: describe_python(&interp, &env),
        packages: lock.pins.clone(),
        load: format!(
            "{} at the start, {} at the end",
            load_before
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" "),
            std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        ),
    };
    let out = root.join(&a.out);
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let (md, json) = report::render(&meta, &results);
    let md_path = out.join("models-vs-onnxruntime.md");
    std::fs::write(&md_path, md).with_context(|| format!("writing {}", md_path.display()))?;
    std::fs::write(
        out.join("models-vs-onnxruntime.json"),
        serde_json::to_string_pretty(&json)?,
    )?;
    println!("report: {}", md_path.display());
    Ok(results.iter().all(|r| r.failures().is_empty()))
}

/// The Python the reports name: the venv and the lock it came from, or the interpreter the
/// environment variable gave.
pub fn describe_python(interp: &Interpreter, env: &PyEnv) -> String {
    match interp {
        Interpreter::Venv(p) => format!("{} (venv from {})", p.display(), env.lock.display()),
        Interpreter::External(p) => format!("{} ({})", p.display(), env.python_var),
    }
}

/// Runs the exporter unless the models it wrote are from this script and this lock.
fn export(root: &Path, py: &Path, dir: &Path) -> Result<()> {
    let script = root.join("benches/models/export.py");
    let mut stamp_bytes = std::fs::read(&script)?;
    stamp_bytes.extend(std::fs::read(pyenv().lock)?);
    let stamp = format!("{:016x}\n", fnv1a(&stamp_bytes));
    let stamp_path = dir.join("stamp");
    if std::fs::read_to_string(&stamp_path).ok().as_deref() == Some(stamp.as_str()) {
        return Ok(());
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    eprintln!("bench-cpu: exporting the real models to {}", dir.display());
    let status = Command::new(py)
        .arg(&script)
        .arg(dir)
        .status()
        .with_context(|| format!("starting {}", py.display()))?;
    if !status.success() {
        bail!("{} failed ({status})", script.display());
    }
    std::fs::write(&stamp_path, stamp)?;
    Ok(())
}

pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

pub fn build_quorum(root: &Path) -> Result<PathBuf> {
    eprintln!("bench-cpu: cargo build --release -p quorum");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(root)
        .args(["build", "--release", "-p", "quorum"])
        .status()
        .context("running cargo build")?;
    if !status.success() {
        bail!("cargo build --release -p quorum failed ({status})");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    Ok(target.join("release/quorum"))
}

/// `git rev-parse HEAD`, with `+ uncommitted changes` when tracked files differ.
pub fn commit_of(root: &Path) -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .current_dir(root)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let head = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    match git(&["status", "--porcelain", "--untracked-files=no"]) {
        Some(s) if !s.is_empty() => format!("{head} + uncommitted changes"),
        _ => head,
    }
}

/// `lscpu`'s model name and the cores this process may use.
pub fn machine() -> String {
    let model = Command::new("lscpu")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .find_map(|l| l.strip_prefix("Model name:").map(|m| m.trim().to_string()))
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{model}, {cores} cores")
}

/// The light models with the first data set of each (the inputs onnx ships), written as `.npy`.
fn light_models(corpus: &Path, work: &Path) -> Result<Vec<BenchModel>> {
    let cases = quorum_conformance::case::discover(corpus)?;
    let mut out = Vec::new();
    for case in cases.iter().filter(|c| c.part == "light") {
        let model = quorum::loader::model_from_file(&case.model_path(), &Default::default())
            .with_context(|| format!("loading {}", case.model_path().display()))?;
        let sets = quorum_conformance::case::data_sets(case, &model)?;
        let set = sets
            .first()
            .with_context(|| format!("{} has no data set", case.id))?;
        let dir = work.join("inputs").join(case.name());
        std::fs::create_dir_all(&dir)?;
        let names: Vec<&str> = set.inputs.iter().map(|(n, _)| n.as_str()).collect();
        let stems = quorum::output_files::file_stems(&names);
        let mut inputs = Vec::new();
        for ((name, value), stem) in set.inputs.iter().zip(stems) {
            let t = value
                .as_tensor()
                .with_context(|| format!("{}: input {name} is not a tensor", case.id))?;
            let path = dir.join(format!("{stem}.npy"));
            std::fs::write(&path, quorum::npy::write(t)?)?;
            inputs.push((name.clone(), path));
        }
        out.push(BenchModel {
            name: case.name().trim_start_matches("test_").to_string(),
            group: "light",
            path: case.model_path(),
            inputs,
            about: format!("onnx backend corpus {}", case.id),
            note: None,
        });
    }
    Ok(out)
}

/// Every `<dir>/<name>/model.onnx` the exporter wrote, with its `inputs/*.npy`.
fn real_models(dir: &Path) -> Result<Vec<BenchModel>> {
    let mut out = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("model.onnx").is_file())
        .collect();
    entries.sort();
    for d in entries {
        let name = d
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let mut inputs: Vec<(String, PathBuf)> = std::fs::read_dir(d.join("inputs"))
            .with_context(|| format!("{name}: reading its inputs"))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "npy"))
            .map(|p| {
                let stem = p
                    .file_stem()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                (stem, p)
            })
            .collect();
        inputs.sort();
        let meta: serde_json::Value = std::fs::read(d.join("meta.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        out.push(BenchModel {
            name,
            group: "real",
            path: d.join("model.onnx"),
            inputs,
            about: meta["model"].as_str().unwrap_or("").to_string(),
            note: meta["note"].as_str().map(String::from),
        });
    }
    Ok(out)
}

/// How each runtime is started.
pub struct Sides<'a> {
    pub quorum: &'a Path,
    pub python: &'a Path,
    pub runner: &'a Path,
    pub threads: usize,
    /// Quorum's `--provider`.
    pub provider: &'a str,
}

impl Sides<'_> {
    fn input_args(m: &BenchModel) -> Vec<String> {
        m.inputs
            .iter()
            .flat_map(|(n, p)| ["--input".to_string(), format!("{n}={}", p.display())])
            .collect()
    }

    pub fn quorum(&self, args: &[&str], m: &BenchModel) -> Command {
        let mut c = Command::new(self.quorum);
        c.args(args)
            .arg(&m.path)
            .args(Self::input_args(m))
            .args(["--provider", self.provider])
            .env("RAYON_NUM_THREADS", self.threads.to_string())
            .env_remove("RUST_BACKTRACE");
        c
    }

    fn ort(&self, m: &BenchModel, warmup: usize, iters: usize) -> Command {
        let mut c = Command::new(self.python);
        c.arg(self.runner)
            .arg(&m.path)
            .args(Self::input_args(m))
            .args(["--threads", &self.threads.to_string()])
            .args([
                "--warmup",
                &warmup.to_string(),
                "--iters",
                &iters.to_string(),
            ]);
        c
    }

    /// Per-run times of one timed batch on `side`, or the error it printed.
    fn time(&self, side: Side, m: &BenchModel, iters: usize) -> Result<Vec<f64>, String> {
        let mut c = match side {
            Side::Quorum => {
                let n = iters.to_string();
                self.quorum(&["bench", "--json", "--warmup", "1", "--iters", &n], m)
            }
            Side::Ort => self.ort(m, 1, iters),
        };
        let j = json_of(&mut c)?;
        if side == Side::Quorum && j["threads"].as_u64() != Some(self.threads as u64) {
            return Err(format!(
                "quorum ran with {} threads, not {}",
                j["threads"], self.threads
            ));
        }
        let times: Vec<f64> = j["times_ms"]
            .as_array()
            .map(|v| v.iter().filter_map(|x| x.as_f64()).collect())
            .unwrap_or_default();
        if times.is_empty() {
            return Err(format!("no times_ms in {j}"));
        }
        Ok(times)
    }
}

/// Runs `c`, returning its stdout as JSON, or its last line of stderr (with the exit status).
pub fn json_of(c: &mut Command) -> Result<serde_json::Value, String> {
    let out = c.output().map_err(|e| format!("could not start: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let line = err.trim().lines().last().unwrap_or("").to_string();
        return Err(format!("{} ({})", line, out.status));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("unreadable output: {e}"))
}

/// Runs `m` once on each side and compares the outputs, then times both sides in `rounds`
/// alternating rounds of about `round_ms` each.
pub fn bench_one(
    sides: &Sides,
    m: &BenchModel,
    out_dir: &Path,
    rounds: usize,
    round_ms: u64,
) -> ModelResult {
    let mut r = ModelResult::new(m);
    let _ = std::fs::remove_dir_all(out_dir);
    // Outputs of one run each, compared.
    let q_dir = out_dir.join("quorum");
    let o_dir = out_dir.join("onnxruntime");
    let q_run = sides
        .quorum(&["run", "--output-dir", &q_dir.display().to_string()], m)
        .output();
    match q_run {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let line = err.trim().lines().last().unwrap_or("").to_string();
            r.quorum.error = Some(format!("{line} ({})", o.status));
        }
        Err(e) => r.quorum.error = Some(format!("could not start quorum: {e}")),
    }
    let mut ort = sides.ort(m, 1, 1);
    ort.args(["--outputs", &o_dir.display().to_string()]);
    match json_of(&mut ort) {
        Ok(j) => r.output_names = names_of(&j),
        Err(e) => r.ort.error = Some(e),
    }
    if r.quorum.error.is_none() && r.ort.error.is_none() {
        r.comparison = compare::outputs(&q_dir, &o_dir, &r.output_names);
    }
    // Calibration: iterations per round from each side's own latency.
    let mut iters = BTreeMap::new();
    for side in [Side::Quorum, Side::Ort] {
        if r.side(side).error.is_some() {
            continue;
        }
        match sides.time(side, m, 2) {
            Ok(t) => {
                let per = report::percentile(&t, 50.0).max(1e-3);
                iters.insert(
                    side,
                    ((round_ms as f64 / per).ceil() as usize).clamp(2, 500),
                );
            }
            Err(e) => r.side_mut(side).error = Some(e),
        }
    }
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [Side::Quorum, Side::Ort]
        } else {
            [Side::Ort, Side::Quorum]
        };
        for side in order {
            let Some(&n) = iters.get(&side) else { continue };
            if r.side(side).error.is_some() {
                continue;
            }
            match sides.time(side, m, n) {
                Ok(t) => r.side_mut(side).times_ms.extend(t),
                Err(e) => r.side_mut(side).error = Some(e),
            }
        }
    }
    r
}

fn names_of(j: &serde_json::Value) -> Vec<String> {
    j["outputs"]
        .as_array()
        .map(|v| {
            v.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bench_lock_pins_what_the_scripts_import_with_the_corpus_onnx() {
        let lock = pyenv().load_lock().unwrap();
        for p in [
            "torch",
            "torchvision",
            "onnxruntime",
            "onnx",
            "numpy",
            "protobuf",
        ] {
            assert!(lock.pins.contains_key(p), "{p} is not locked");
        }
        assert_eq!(
            lock.pins.get("onnx").map(String::as_str),
            Some(quorum_conformance::corpus::ONNX_PIN)
        );
    }

    #[test]
    fn the_export_stamp_follows_every_byte() {
        assert_ne!(fnv1a(b"torch==2.5.1"), fnv1a(b"torch==2.5.2"));
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
    }
}
