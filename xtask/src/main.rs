//! `cargo xtask <task>`: conformance runs, corpus generation, fuzzing, CPU benchmarks. See the README
//! for each task.
#![forbid(unsafe_code)]
mod bench_cpu;
mod fuzz;
mod gpu_bundle;
mod nightly;
mod zoo;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "Quorum's project tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Run the ONNX backend corpus on every available engine (or those named) against the expectation lists.
    Conformance(quorum_conformance::cli::Args),
    /// Join the partial reports of a sharded conformance run (`conformance --shard I/N`, in
    /// reports/conformance/shards/) into each engine's report and the summary, as one run writes them.
    MergeReports {
        /// The folder of partial reports (default: reports/conformance/shards/).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// Generate (or refresh) the corpus under target/corpus from the pinned onnx release.
    Corpus {
        /// Regenerate even if the corpus is current.
        #[arg(long)]
        force: bool,
    },
    /// Time Quorum and onnxruntime side by side on the CPU (light corpus models and real models
    /// exported from PyPI packages); writes reports/cpu/models-vs-onnxruntime.{md,json}.
    BenchCpu(bench_cpu::Args),
    /// The zoo: real architectures (torchvision, timm, transformers, other exporters and opsets,
    /// QDQ and f16), exported offline, run on each engine asked for and on onnxruntime, compared
    /// and timed; resumable and shardable; writes reports/zoo/<engine>.{md,json}.
    Zoo(zoo::Args),
    /// The nightly report: the benchmark matrix, the conformance engines present and the model
    /// benchmarks into reports/nightly/<date>/ (index.html, summary.md), one line in
    /// reports/history.jsonl; exits non-zero on a regression. --from DIR renders measurements made
    /// elsewhere (the GPU bundle's nightly step).
    Nightly(nightly::Args),
    /// Fuzz model loading and running (cargo-fuzz target `load_and_run`), seeded with the corpus models.
    Fuzz(fuzz::Args),
    /// The device stream fuzzer on this machine's GPU: random DAGs on random streams, threads, graph
    /// capture and spin delays, each run compared with one stream and its command log checked.
    FuzzStreams {
        /// How long to fuzz.
        #[arg(long, default_value_t = 5)]
        minutes: u64,
        /// Hunt every injected synchronisation bug instead (`quorum::mutants`), `minutes` each.
        #[arg(long)]
        mutants: bool,
    },
    /// Build the WebAssembly module (`quorum-wasm`, release, for wasm32-unknown-unknown) into
    /// target/wasm/; `wasm/examples/run-model.mjs` runs a model with it under node.
    Wasm,
    /// Build the on-device tests and tools (release, stripped) with run.sh into target/gpu-bundle/.
    GpuBundle {
        /// Build with the dev profile instead (Quorum's own crates unoptimised, dependencies
        /// optimised): minutes instead of the release build's half hour, for correctness runs; its
        /// timings are not Quorum's speed.
        #[arg(long)]
        dev: bool,
        /// Build with the injected synchronisation bugs compiled in (`quorum::mutants`), for the
        /// device mutant hunt (`run.sh mutants`); never for measurements.
        #[arg(long)]
        mutants: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Conformance(args) => quorum_conformance::cli::run(args),
        Task::MergeReports { dir } => quorum_conformance::cli::merge_reports(dir).map(|_| true),
        Task::BenchCpu(args) => bench_cpu::run(args),
        Task::Fuzz(args) => fuzz::run(args),
        Task::Nightly(args) => nightly::run(args),
        Task::Zoo(args) => zoo::run(args),
        Task::GpuBundle { dev, mutants } => gpu_bundle::run(dev, mutants),
        Task::FuzzStreams { minutes, mutants } => fuzz_streams(minutes, mutants),
        Task::Wasm => wasm(),
        Task::Corpus { force } => {
            let dir = quorum_conformance::corpus::default_dir();
            let r = if force {
                quorum_conformance::corpus::generate(&dir)
                    .and_then(|_| quorum_conformance::corpus::ensure(&dir))
            } else {
                quorum_conformance::corpus::ensure(&dir)
            };
            r.map(|_| {
                println!("corpus ready at {}", dir.display());
                true
            })
        }
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// `cargo xtask fuzz-streams`: the device-tests' ignored fuzzer tests, for `minutes`.
fn fuzz_streams(minutes: u64, mutants: bool) -> anyhow::Result<bool> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let features = if mutants {
        "gpu-tests,mutants"
    } else {
        "gpu-tests"
    };
    let test = if mutants {
        "fuzz_streams_mutants"
    } else {
        "fuzz_streams"
    };
    let status = std::process::Command::new(cargo)
        .current_dir(quorum_conformance::workspace_root())
        .env("QUORUM_FUZZ_SECONDS", (minutes * 60).to_string())
        .args([
            "test",
            "--release",
            "-p",
            "quorum-device-tests",
            "--features",
            features,
            "--test",
            "gpu",
            "--",
            "--ignored",
            "--exact",
            &format!("fuzz_streams::{test}"),
            "--nocapture",
        ])
        .status()?;
    Ok(status.success())
}

/// `cargo xtask wasm`: the module `wasm/examples/run-model.mjs` loads by default.
fn wasm() -> anyhow::Result<bool> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = quorum_conformance::workspace_root();
    let target = root.join("target/wasm");
    let status = std::process::Command::new(cargo)
        .current_dir(&root)
        .env("CARGO_TARGET_DIR", &target)
        .args([
            "build",
            "--release",
            "-p",
            "quorum-wasm",
            "--target",
            "wasm32-unknown-unknown",
        ])
        .status()?;
    if !status.success() {
        eprintln!("(is the target installed? rustup target add wasm32-unknown-unknown)");
        return Ok(false);
    }
    let module = target.join("wasm32-unknown-unknown/release/quorum_wasm.wasm");
    let size = std::fs::metadata(&module)?.len();
    println!(
        "{} ({:.1} MiB); run a model: node wasm/examples/run-model.mjs MODEL.onnx --input NAME=FILE",
        module.display(),
        size as f64 / (1u64 << 20) as f64
    );
    Ok(true)
}
