//! `cargo xtask gpu-bundle [--dev]`: the gpu-tests binary, the `quorum` CLI, the conformance runner
//! and the benchmark matrix (`quorum-matrix`),
//! built in release (or the dev profile, for quick correctness runs), stripped and gzipped, with `run.sh`, in `target/gpu-bundle/` — everything a GPU machine without a
//! Rust toolchain needs (the corpus is generated there by the same generator script).
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

const RUN_SH: &str = include_str!("gpu_run.sh");
/// The bundle must fit in what the GPU machine accepts with the working tree.
const MAX_BYTES: u64 = 60 << 20;

fn cargo(root: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(root)
        .env("CARGO_PROFILE_RELEASE_STRIP", "true")
        .args(args)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running cargo {args:?}"))?;
    if !out.status.success() {
        bail!("cargo {args:?} failed");
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The test executable cargo reports for `--test gpu`.
fn test_executable(json: &str) -> Option<PathBuf> {
    json.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["target"]["name"] == "gpu" && v["profile"]["test"] == true)
        .find_map(|v| v["executable"].as_str().map(PathBuf::from))
}

pub fn run(dev: bool, mutants: bool) -> Result<bool> {
    let root = quorum_conformance::workspace_root();
    let (profile, profile_dir) = if dev {
        ("--profile=dev", "debug")
    } else {
        ("--release", "release")
    };
    // One cargo invocation for the suite and the three binaries: features (of `quorum` and of the
    // dependencies the suite's own dependencies bring, such as proptest's) are resolved once, so
    // the `quorum` library builds once. Two invocations resolved them apart and built it twice
    // (18 minutes here, against 9 for one build).
    let features = if mutants {
        "quorum-device-tests/gpu-tests,quorum-device-tests/mutants"
    } else {
        "quorum-device-tests/gpu-tests"
    };
    let json = cargo(
        &root,
        &[
            "build",
            profile,
            "-p",
            "quorum-device-tests",
            "-p",
            "quorum",
            "-p",
            "quorum-conformance",
            "-p",
            "quorum-matrix",
            "--features",
            features,
            "--test",
            "gpu",
            "--bin",
            "quorum",
            "--bin",
            "conformance",
            "--bin",
            "quorum-matrix",
            "--message-format=json",
        ],
    )?;
    let tests = test_executable(&json).context("cargo did not report the gpu test executable")?;
    let dir = root.join("target/gpu-bundle");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(|d| root.join(d))
        .unwrap_or_else(|| root.join("target"));
    let release = target.join(profile_dir);
    let files = [
        (tests, "gpu-tests"),
        (release.join("quorum"), "quorum"),
        (release.join("conformance"), "conformance"),
        (release.join("quorum-matrix"), "quorum-matrix"),
    ];
    // Stripped, the four binaries are ~30 MiB each; gzip brings them to a quarter, and run.sh unpacks.
    let mut total = 0;
    for (from, to) in &files {
        let dest = dir.join(to);
        std::fs::copy(from, &dest).with_context(|| format!("copying {}", from.display()))?;
        if dev {
            // The dev profile keeps dependencies' debug info; strip the copy (not the build's
            // own file, so the dev build's fingerprints stay as they are).
            let ok = Command::new("strip")
                .arg(&dest)
                .status()
                .context("running strip")?
                .success();
            if !ok {
                bail!("strip {} failed", dest.display());
            }
        }
        let ok = Command::new("gzip")
            .args(["-9", "-f"])
            .arg(&dest)
            .status()
            .context("running gzip")?
            .success();
        if !ok {
            bail!("gzip {} failed", dest.display());
        }
        total += dir.join(format!("{to}.gz")).metadata()?.len();
    }
    // The GPU machine's copy of the tree has no git: the commit measured travels with the bundle
    // (`quorum-matrix` reads it through QUORUM_COMMIT, which run.sh sets).
    let commit = Command::new("git")
        .current_dir(&root)
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let dirty = Command::new("git")
        .current_dir(&root)
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .is_ok_and(|o| !o.stdout.is_empty());
    std::fs::write(
        dir.join("commit.txt"),
        if dirty {
            format!("{commit}-dirty\n")
        } else {
            format!("{commit}\n")
        },
    )?;
    let script = dir.join("run.sh");
    std::fs::write(&script, RUN_SH)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
    }
    println!(
        "gpu bundle: {} ({:.1} MiB)",
        dir.display(),
        total as f64 / (1 << 20) as f64
    );
    if total > MAX_BYTES {
        bail!("the bundle is {total} bytes, over the {MAX_BYTES}-byte limit");
    }
    Ok(true)
}
