//! `cargo xtask fuzz`: the cargo-fuzz target `load_and_run` (in `fuzz/cargo-fuzz/`) seeded with the
//! conformance models. cargo-fuzz needs nightly features; `RUSTC_BOOTSTRAP=1` unlocks them on stable.
//! No sanitizer: an AddressSanitizer build of the runtime and its kernels takes far longer (their
//! `unsafe` code is SIMD intrinsics, the CUDA driver's FFI and a few buffer routines, each with its
//! SAFETY comment); panics, aborts, memory and time limits are what the fuzzer watches.
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Seeds larger than this are left out: libFuzzer mutates slowly over multi-megabyte inputs.
const MAX_SEED_BYTES: u64 = 256 << 10;

#[derive(clap::Args)]
pub struct Args {
    /// How long to fuzz.
    #[arg(long, default_value_t = 10)]
    minutes: u64,
    /// Memory limit of the fuzzing process, in MiB.
    #[arg(long, default_value_t = 2048)]
    rss_limit_mb: u64,
    /// A single input slower than this many seconds is reported as a hang.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
}

fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Runs the fuzz target; `Ok(false)` when libFuzzer reported a finding.
pub fn run(args: Args) -> Result<bool> {
    let root = quorum_conformance::workspace_root();
    let fuzz_dir = root.join("fuzz/cargo-fuzz");
    ensure_cargo_fuzz()?;
    let corpus = quorum_conformance::corpus::default_dir();
    quorum_conformance::corpus::ensure(&corpus)?;
    let seeds = fuzz_dir.join("corpus/load_and_run");
    let n = copy_seeds(&corpus, &seeds)?;
    println!("{n} seed models in {}", seeds.display());
    let status = cargo()
        .current_dir(&root)
        .env("RUSTC_BOOTSTRAP", "1")
        .args(["fuzz", "run", "--sanitizer", "none", "--fuzz-dir"])
        .arg(&fuzz_dir)
        .arg("load_and_run")
        .arg("--")
        .arg(format!("-max_total_time={}", args.minutes * 60))
        .arg(format!("-rss_limit_mb={}", args.rss_limit_mb))
        .arg(format!("-timeout={}", args.timeout))
        .status()
        .context("running cargo fuzz")?;
    if !status.success() {
        println!(
            "the fuzzer stopped on a finding: see {}",
            fuzz_dir.join("artifacts/load_and_run").display()
        );
    }
    Ok(status.success())
}

fn ensure_cargo_fuzz() -> Result<()> {
    let have = cargo()
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if have {
        return Ok(());
    }
    println!("installing cargo-fuzz");
    let status = cargo()
        .args(["install", "--locked", "cargo-fuzz"])
        .status()
        .context("running cargo install cargo-fuzz")?;
    if !status.success() {
        bail!("cargo install cargo-fuzz failed; install it by hand and retry");
    }
    Ok(())
}

/// Copies every `model.onnx` under the corpus (up to [`MAX_SEED_BYTES`]) to `seeds/<part>-<case>.onnx`.
fn copy_seeds(corpus: &Path, seeds: &Path) -> Result<usize> {
    std::fs::create_dir_all(seeds).with_context(|| format!("creating {}", seeds.display()))?;
    let mut n = 0;
    for part in read_dirs(corpus)? {
        for case in read_dirs(&part)? {
            let model = case.join("model.onnx");
            let Ok(meta) = std::fs::metadata(&model) else {
                continue;
            };
            if meta.len() > MAX_SEED_BYTES {
                continue;
            }
            let name = format!(
                "{}-{}.onnx",
                part.file_name().unwrap_or_default().to_string_lossy(),
                case.file_name().unwrap_or_default().to_string_lossy()
            );
            std::fs::copy(&model, seeds.join(name))
                .with_context(|| format!("copying {}", model.display()))?;
            n += 1;
        }
    }
    Ok(n)
}

fn read_dirs(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}
