//! The corpus: generated from a pinned `onnx` release (installed with pip into a virtual environment
//! under `target/`) by `corpus/generate.py`, plus Quorum's regression cases from `cases/regression.py`.
//! Regenerated only when the pin or a generator script changes.
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The onnx release the corpus is generated from.
pub const ONNX_PIN: &str = "1.23.2";

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

/// FNV-1a over the generator scripts and the pin: the corpus's identity.
fn stamp() -> Result<String> {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    };
    feed(ONNX_PIN.as_bytes());
    for s in scripts() {
        feed(&std::fs::read(&s).with_context(|| format!("reading {}", s.display()))?);
    }
    Ok(format!("{h:016x}"))
}

/// The Python that runs the generators: `$QUORUM_PYTHON` if set (a machine without network that already
/// has onnx 1.23.x), else a venv under `target/` with the pinned onnx, created on first use.
fn python() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("QUORUM_PYTHON") {
        return Ok(PathBuf::from(p));
    }
    let venv = crate::workspace_root().join("target/corpus-venv");
    let py = venv.join("bin/python");
    let has_pin = py.is_file()
        && Command::new(&py)
            .args([
                "-c",
                &format!("import onnx,sys; sys.exit(onnx.__version__ != '{ONNX_PIN}')"),
            ])
            .status()
            .is_ok_and(|s| s.success());
    if !has_pin {
        eprintln!("corpus: creating {} with onnx=={ONNX_PIN}", venv.display());
        run(
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
            "python3 -m venv (install python3-venv?)",
        )?;
        run(
            Command::new(&py).args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                &format!("onnx=={ONNX_PIN}"),
            ]),
            "pip install onnx",
        )?;
    }
    Ok(py)
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

/// Makes sure a current corpus exists at `dir`, generating it if missing or stale.
pub fn ensure(dir: &Path) -> Result<()> {
    let want = stamp()?;
    let stamp_file = dir.join(".quorum-stamp");
    if std::fs::read_to_string(&stamp_file).is_ok_and(|s| s.trim() == want) {
        return Ok(());
    }
    generate(dir)?;
    std::fs::write(&stamp_file, want)?;
    Ok(())
}

/// Generates the corpus at `dir` (replacing what is there).
pub fn generate(dir: &Path) -> Result<()> {
    let py = python()?;
    let [gen_script, cases_script] = scripts();
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)?;
    }
    eprintln!(
        "corpus: generating the ONNX backend corpus into {}",
        dir.display()
    );
    run(
        Command::new(&py).arg(&gen_script).arg("--out").arg(dir),
        "corpus/generate.py",
    )?;
    run(
        Command::new(&py)
            .arg(&cases_script)
            .arg("--out")
            .arg(dir.join("cases")),
        "cases/regression.py",
    )?;
    Ok(())
}
