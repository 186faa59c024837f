//! The Python side of corpus generation: the lock (`corpus/requirements.lock`: every package the
//! generators import, directly or through onnx, at an exact version), the interpreter that runs the
//! generators, and how an installed environment differs from the lock.
//!
//! The interpreter is a venv under `target/` installed from the lock with `pip install --no-deps`
//! and checked with `pip check`; a venv whose packages differ from the lock is rebuilt. A machine that
//! cannot install anything names its own Python in `QUORUM_PYTHON`: it is used as it is, and how it
//! differs from the lock is reported (the run's output, `environment.json` in the corpus, the
//! reports), never hidden and never fatal.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// `conformance/corpus/requirements.lock`.
pub fn lock_path() -> PathBuf {
    crate::workspace_root().join("conformance/corpus/requirements.lock")
}

/// The venv the generators run in unless `QUORUM_PYTHON` names another Python.
pub fn venv_dir() -> PathBuf {
    crate::workspace_root().join("target/corpus-venv")
}

/// A package name as PEP 503 compares them: lower case, each run of `-`, `_` and `.` one `-`.
pub fn normalize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.trim().chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// The parsed lock: normalized package name → exact version, and the file's bytes (part of the
/// corpus stamp).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    pub pins: BTreeMap<String, String>,
    pub bytes: Vec<u8>,
}

impl Lock {
    /// Parses `name==version` lines (`#` comments and blank lines skipped); anything else is an error
    /// naming `origin` and the line.
    pub fn parse(text: &str, origin: &Path) -> Result<Lock> {
        let mut pins = BTreeMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let Some((name, version)) = line.split_once("==") else {
                bail!(
                    "{}:{}: expected `name==version` (an exact pin), got `{line}`",
                    origin.display(),
                    i + 1
                );
            };
            let (name, version) = (normalize(name), version.trim().to_string());
            let exact = |s: &str| {
                !s.is_empty()
                    && s.chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '+' | '!'))
            };
            if !exact(&version) || name.is_empty() {
                bail!(
                    "{}:{}: `{line}` is not an exact pin",
                    origin.display(),
                    i + 1
                );
            }
            if pins.insert(name.clone(), version).is_some() {
                bail!("{}:{}: {name} is pinned twice", origin.display(), i + 1);
            }
        }
        if pins.is_empty() {
            bail!("{}: pins no package", origin.display());
        }
        Ok(Lock {
            pins,
            bytes: text.as_bytes().to_vec(),
        })
    }

    /// Reads `conformance/corpus/requirements.lock`.
    pub fn load() -> Result<Lock> {
        PyEnv::corpus().load_lock()
    }
}

/// What every venv holds besides the lock: the installer.
const INSTALLER: &[&str] = &["pip", "setuptools", "wheel"];

/// How `installed` (normalized name → version) differs from the lock, one line per package: missing,
/// or at another version; with `exact`, also a package the lock does not name (the installer aside).
pub fn differences(lock: &Lock, installed: &BTreeMap<String, String>, exact: bool) -> Vec<String> {
    let mut out = Vec::new();
    for (name, want) in &lock.pins {
        match installed.get(name) {
            None => out.push(format!("{name}: not installed (lock: {want})")),
            Some(have) if have != want => out.push(format!("{name}: {have} (lock: {want})")),
            Some(_) => {}
        }
    }
    if exact {
        for (name, have) in installed {
            if !lock.pins.contains_key(name) && !INSTALLER.contains(&name.as_str()) {
                out.push(format!("{name}: {have} installed, not in the lock"));
            }
        }
    }
    out
}

/// The distributions a Python sees (the first of each name on its path, as `import` finds them).
pub fn installed(py: &Path) -> Result<BTreeMap<String, String>> {
    const LIST: &str = "import importlib.metadata as m, json\n\
        r = {}\n\
        for d in m.distributions():\n    n = d.metadata['Name']\n    if n: r.setdefault(n, d.version)\n\
        print(json.dumps(r))";
    let out = Command::new(py)
        .args(["-c", LIST])
        .output()
        .with_context(|| format!("could not start {}", py.display()))?;
    if !out.status.success() {
        bail!(
            "{} could not list its packages ({}): {}",
            py.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let raw: BTreeMap<String, String> = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("reading the package list of {}", py.display()))?;
    Ok(raw.into_iter().map(|(n, v)| (normalize(&n), v)).collect())
}

/// The Python that runs the generators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Interpreter {
    /// `target/corpus-venv`, installed from the lock.
    Venv(PathBuf),
    /// `$QUORUM_PYTHON`, used as it is.
    External(PathBuf),
}

impl Interpreter {
    pub fn path(&self) -> &Path {
        match self {
            Interpreter::Venv(p) | Interpreter::External(p) => p,
        }
    }

    /// Whether packages beyond the lock count as differences (only in the venv we own).
    fn exact(&self) -> bool {
        matches!(self, Interpreter::Venv(_))
    }

    pub fn source(&self) -> &'static str {
        match self {
            Interpreter::Venv(_) => "venv",
            Interpreter::External(_) => "QUORUM_PYTHON",
        }
    }
}

/// `$QUORUM_PYTHON` when set (a machine without network, used as it is); else the venv, created, or
/// rebuilt when its packages differ from the lock.
pub fn interpreter(lock: &Lock) -> Result<Interpreter> {
    PyEnv::corpus().interpreter(lock)
}

/// A Python environment the project owns: a lock, the venv installed from it, and the variable
/// that names another Python instead. The corpus generators have one ([`PyEnv::corpus`]); so do
/// the benchmarks' exporters and onnxruntime (`xtask/src/bench_cpu.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PyEnv {
    /// What the environment is for, in messages (`corpus`, `bench`).
    pub label: &'static str,
    pub lock: PathBuf,
    pub venv: PathBuf,
    /// When set, names a Python used as it is instead of the venv.
    pub python_var: &'static str,
}

impl PyEnv {
    /// The corpus generators': `conformance/corpus/requirements.lock`, `target/corpus-venv`,
    /// `QUORUM_PYTHON`.
    pub fn corpus() -> PyEnv {
        PyEnv {
            label: "corpus",
            lock: lock_path(),
            venv: venv_dir(),
            python_var: "QUORUM_PYTHON",
        }
    }

    /// Reads and parses the lock.
    pub fn load_lock(&self) -> Result<Lock> {
        let text = std::fs::read_to_string(&self.lock)
            .with_context(|| format!("reading {}", self.lock.display()))?;
        Lock::parse(&text, &self.lock)
    }

    /// `$python_var` when set; else the venv, created, or rebuilt when its packages differ from
    /// the lock.
    pub fn interpreter(&self, lock: &Lock) -> Result<Interpreter> {
        if let Some(p) = std::env::var_os(self.python_var) {
            return Ok(Interpreter::External(PathBuf::from(p)));
        }
        let (label, venv, lock_file) = (self.label, &self.venv, self.lock.display());
        let py = venv.join("bin/python");
        if py.is_file() {
            match installed(&py) {
                Ok(have) => {
                    let diff = differences(lock, &have, true);
                    if diff.is_empty() {
                        return Ok(Interpreter::Venv(py));
                    }
                    eprintln!(
                        "{label}: {} differs from {lock_file} ({}); rebuilding it",
                        venv.display(),
                        diff.join("; ")
                    );
                }
                Err(e) => eprintln!("{label}: {e:#}; rebuilding {}", venv.display()),
            }
            std::fs::remove_dir_all(venv)
                .with_context(|| format!("removing {}", venv.display()))?;
        }
        eprintln!("{label}: creating {} from {lock_file}", venv.display());
        run(
            Command::new("python3").args(["-m", "venv"]).arg(venv),
            "python3 -m venv (install python3-venv?)",
        )?;
        run(
            Command::new(&py)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    "--no-deps",
                    "-r",
                ])
                .arg(&self.lock),
            &format!("pip install --no-deps -r {lock_file}"),
        )?;
        run(
            Command::new(&py).args(["-m", "pip", "check", "--disable-pip-version-check"]),
            &format!("pip check (a dependency missing from {lock_file}?)"),
        )?;
        let diff = differences(lock, &installed(&py)?, true);
        if !diff.is_empty() {
            bail!(
                "{} still differs from {lock_file} after installing it: {}",
                venv.display(),
                diff.join("; ")
            );
        }
        Ok(Interpreter::Venv(py))
    }
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

/// The Python environment a corpus was generated in: kept as `environment.json` beside the corpus,
/// read by the runner and written into the reports.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Environment {
    /// The interpreter's path.
    pub python: String,
    /// `venv` (installed from the lock) or `QUORUM_PYTHON`.
    pub source: String,
    /// The locked packages as installed (version, or `missing`).
    pub packages: BTreeMap<String, String>,
    /// How the environment differs from the lock (empty: it matches).
    pub differences: Vec<String>,
}

/// Describes `interp` against the lock.
pub fn environment(interp: &Interpreter, lock: &Lock) -> Result<Environment> {
    let have = installed(interp.path())?;
    let root = crate::workspace_root();
    let python = interp.path();
    Ok(Environment {
        python: python
            .strip_prefix(&root)
            .unwrap_or(python)
            .display()
            .to_string(),
        source: interp.source().to_string(),
        packages: lock
            .pins
            .keys()
            .map(|n| (n.clone(), have.get(n).cloned().unwrap_or("missing".into())))
            .collect(),
        differences: differences(lock, &have, interp.exact()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock() -> Lock {
        Lock::parse(
            "# comment\nonnx==1.23.2\nml_dtypes==0.7.0  # trailing\nNumPy==2.4.6\n",
            Path::new("test.lock"),
        )
        .unwrap()
    }

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(n, v)| (normalize(n), v.to_string()))
            .collect()
    }

    #[test]
    fn names_compare_as_pep_503_says() {
        assert_eq!(normalize("typing_extensions"), "typing-extensions");
        assert_eq!(normalize("ML.._Dtypes"), "ml-dtypes");
        assert_eq!(
            lock().pins.keys().collect::<Vec<_>>(),
            ["ml-dtypes", "numpy", "onnx"]
        );
    }

    #[test]
    fn a_matching_environment_has_no_differences() {
        let have = env(&[
            ("onnx", "1.23.2"),
            ("ml-dtypes", "0.7.0"),
            ("numpy", "2.4.6"),
            ("pip", "24.0"),
        ]);
        assert!(differences(&lock(), &have, true).is_empty());
    }

    #[test]
    fn another_version_a_missing_package_and_an_extra_one_are_reported() {
        let have = env(&[("onnx", "1.23.1"), ("numpy", "2.4.6"), ("torch", "2.11.0")]);
        let exact = differences(&lock(), &have, true);
        assert_eq!(
            exact,
            [
                "ml-dtypes: not installed (lock: 0.7.0)",
                "onnx: 1.23.1 (lock: 1.23.2)",
                "torch: 2.11.0 installed, not in the lock",
            ]
        );
        // A Python we do not own (QUORUM_PYTHON) may hold anything else.
        assert_eq!(differences(&lock(), &have, false).len(), 2);
    }

    #[test]
    fn a_lock_line_that_is_not_an_exact_pin_is_an_error_naming_the_line() {
        for bad in ["onnx>=1.23", "onnx==", "onnx==1.*", "onnx==1\nonnx==2"] {
            let e = Lock::parse(bad, Path::new("x.lock"))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("x.lock:"), "{bad}: {e}");
        }
        assert!(Lock::parse("# nothing\n", Path::new("x.lock")).is_err());
    }

    #[test]
    fn the_repository_lock_pins_the_onnx_release_of_the_corpus() {
        let lock = Lock::load().unwrap();
        assert_eq!(
            lock.pins.get("onnx").map(String::as_str),
            Some(crate::corpus::ONNX_PIN)
        );
        for needed in ["numpy", "ml-dtypes", "protobuf", "typing-extensions"] {
            assert!(lock.pins.contains_key(needed), "{needed} is not locked");
        }
    }
}
