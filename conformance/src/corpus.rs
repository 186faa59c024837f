//! The corpus: generated from a pinned `onnx` release by `corpus/generate.py`, plus Quorum's regression
//! cases from `cases/regression.py`, in a Python whose every package is locked
//! (`corpus/requirements.lock`, see [`crate::pyenv`]). Regenerated only when the lock, a generator
//! script or `QUORUM_PYTHON` changes.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use anyhow::{Context, Result, bail};

use crate::pyenv::{self, Environment, Lock};

/// The onnx release the corpus is generated from (the lock pins the same version; a test checks).
pub const ONNX_PIN: &str = "1.23.2";

/// Beside the corpus: the Python environment that generated it ([`Environment`]).
pub const ENVIRONMENT_FILE: &str = "environment.json";

pub fn default_dir() -> PathBuf {
    crate::workspace_root()
        .join("target/corpus")
        .join(format!("onnx-{ONNX_PIN}"))
}

fn scripts() -> [PathBuf; 2] {
    let root = crate::workspace_root();
    [
        root.join("conformance/corpus/generate.py"),
        root.join("conformance/cases/regression.py"),
    ]
}

/// FNV-1a over the pin, the lock, the generator scripts and `QUORUM_PYTHON`: the corpus's identity.
fn stamp(lock: &Lock) -> Result<String> {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
        // A separator, so that moving bytes from one part to the next changes the stamp.
        h = (h ^ 0xff).wrapping_mul(0x0100_0000_01b3);
    };
    feed(ONNX_PIN.as_bytes());
    feed(&lock.bytes);
    for s in scripts() {
        feed(&std::fs::read(&s).with_context(|| format!("reading {}", s.display()))?);
    }
    if let Some(p) = std::env::var_os("QUORUM_PYTHON") {
        feed(p.to_string_lossy().as_bytes());
    }
    Ok(format!("{h:016x}"))
}

/// Test binaries run their tests on threads that may all ask for the corpus at once.
static GENERATING: Mutex<()> = Mutex::new(());

/// Makes sure a current corpus exists at `dir`, generating it if missing or stale.
pub fn ensure(dir: &Path) -> Result<()> {
    let _one_at_a_time = GENERATING.lock().unwrap_or_else(|p| p.into_inner());
    let want = stamp(&Lock::load()?)?;
    let stamp_file = dir.join(".quorum-stamp");
    if std::fs::read_to_string(&stamp_file).is_ok_and(|s| s.trim() == want) {
        return Ok(());
    }
    generate_unlocked(dir)?;
    std::fs::write(&stamp_file, want)
        .with_context(|| format!("writing {}", stamp_file.display()))?;
    Ok(())
}

/// Generates the corpus at `dir` (replacing what is there).
pub fn generate(dir: &Path) -> Result<()> {
    let _one_at_a_time = GENERATING.lock().unwrap_or_else(|p| p.into_inner());
    generate_unlocked(dir)
}

fn generate_unlocked(dir: &Path) -> Result<()> {
    let lock = Lock::load()?;
    let interp = pyenv::interpreter(&lock)?;
    let env = pyenv::environment(&interp, &lock)?;
    if !env.differences.is_empty() {
        eprintln!(
            "corpus: WARNING: {} ({}) differs from {}: {}",
            env.python,
            env.source,
            pyenv::lock_path().display(),
            env.differences.join("; ")
        );
    }
    let py = interp.path();
    let [gen_script, cases_script] = scripts();
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)?;
    }
    eprintln!(
        "corpus: generating the ONNX backend corpus into {}",
        dir.display()
    );
    run(
        Command::new(py).arg(&gen_script).arg("--out").arg(dir),
        "corpus/generate.py",
    )?;
    run(
        Command::new(py)
            .arg(&cases_script)
            .arg("--out")
            .arg(dir.join("cases")),
        "cases/regression.py",
    )?;
    let path = dir.join(ENVIRONMENT_FILE);
    std::fs::write(&path, serde_json::to_string_pretty(&env)? + "\n")
        .with_context(|| format!("writing {}", path.display()))
}

/// The environment that generated the corpus at `dir`, when it recorded one.
pub fn environment(dir: &Path) -> Option<Environment> {
    let text = std::fs::read_to_string(dir.join(ENVIRONMENT_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

fn run(cmd: &mut Command, what: &str) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("could not start {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}
