//! The GitHub workflows pass actionlint, and actionlint catches what it is there for: an action on a
//! retired runtime (node20) and a runner label that `.github/actionlint.yaml` does not declare.
//! actionlint comes from `.ci/run`'s venv (`target/ci-tools`); where that venv is missing (a machine
//! that never ran `.ci/run`), these tests say so and check nothing.
#![forbid(unsafe_code)]
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn actionlint() -> Option<PathBuf> {
    let bin = root().join("target/ci-tools/bin/actionlint");
    if bin.exists() {
        Some(bin)
    } else {
        eprintln!("actionlint is not installed here (run .ci/run once): nothing checked");
        None
    }
}

/// actionlint run in `dir` (a project root with `.github/`): its success and its output.
fn lint(bin: &Path, dir: &Path) -> (bool, String) {
    let out = Command::new(bin).current_dir(dir).output().unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn the_workflows_pass_actionlint() {
    let Some(bin) = actionlint() else { return };
    let (ok, out) = lint(&bin, &root());
    assert!(ok, "{out}");
}

#[test]
fn actionlint_catches_a_retired_runtime_and_an_undeclared_label() {
    let Some(bin) = actionlint() else { return };
    let ci = std::fs::read_to_string(root().join(".github/workflows/ci.yml")).unwrap();
    let config = std::fs::read_to_string(root().join(".github/actionlint.yaml")).unwrap();
    let cases = [
        (
            "node20",
            ci.replace("actions/checkout@v5", "actions/checkout@v4"),
            Some(config.clone()),
            "node20",
        ),
        ("label", ci.clone(), None, "label \"gpu\" is unknown"),
    ];
    for (tag, workflow, config, want) in cases {
        let dir = std::env::temp_dir().join(format!("quorum-lint-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join(".github/workflows")).unwrap();
        // actionlint finds its project (and config) by the repository's root.
        std::fs::create_dir_all(dir.join(".git")).unwrap();
        std::fs::write(dir.join(".github/workflows/ci.yml"), workflow).unwrap();
        if let Some(c) = config {
            std::fs::write(dir.join(".github/actionlint.yaml"), c).unwrap();
        }
        let (ok, out) = lint(&bin, &dir);
        assert!(!ok && out.contains(want), "{tag}: {out}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
