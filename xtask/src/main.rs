//! `cargo xtask <task>`: conformance runs, corpus generation, fuzzing, CPU benchmarks. See the README
//! for each task.
mod bench_cpu;
mod fuzz;
mod gpu_bundle;

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
    /// Generate (or refresh) the corpus under target/corpus from the pinned onnx release.
    Corpus {
        /// Regenerate even if the corpus is current.
        #[arg(long)]
        force: bool,
    },
    /// Time Quorum and onnxruntime side by side on the CPU (light corpus models and real models
    /// exported from PyPI packages); writes reports/cpu/models-vs-onnxruntime.{md,json}.
    BenchCpu(bench_cpu::Args),
    /// Fuzz model loading and running (cargo-fuzz target `load_and_run`), seeded with the corpus models.
    Fuzz(fuzz::Args),
    /// Build the on-device tests and tools (release, stripped) with run.sh into target/gpu-bundle/.
    GpuBundle {
        /// Build with the dev profile instead (Quorum's own crates unoptimised, dependencies
        /// optimised): minutes instead of the release build's half hour, for correctness runs; its
        /// timings are not Quorum's speed.
        #[arg(long)]
        dev: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Conformance(args) => quorum_conformance::cli::run(args),
        Task::BenchCpu(args) => bench_cpu::run(args),
        Task::Fuzz(args) => fuzz::run(args),
        Task::GpuBundle { dev } => gpu_bundle::run(dev),
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
