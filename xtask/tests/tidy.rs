//! Repository hygiene, run as ordinary tests: docs must not drift from the tree.
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives inside the workspace")
}

/// Every backticked path in ARCHITECTURE.md that starts with one of our top-level folders must exist
/// (except under "Not built yet", which names what is planned).
#[test]
fn architecture_paths_exist() {
    let full = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let text = full.split("## Not built yet").next().unwrap_or(&full);
    let mut checked = 0;
    let mut missing = Vec::new();
    for (i, chunk) in text.split('`').enumerate() {
        let looks_like_path = i % 2 == 1
            && chunk.contains('/')
            && !chunk.contains(' ')
            && [
                "runtime/",
                "conformance/",
                "xtask/",
                "reports/",
                "oracle/",
                "fuzz/",
                "benches/",
            ]
            .iter()
            .any(|p| chunk.starts_with(p));
        if looks_like_path {
            checked += 1;
            let p = chunk.trim_end_matches('/');
            // `runtime/src/proto` is generated into OUT_DIR from runtime/proto/onnx.proto.
            if p != "runtime/src/proto" && !root().join(p).exists() {
                missing.push(chunk.to_string());
            }
        }
    }
    assert!(
        checked > 10,
        "expected ARCHITECTURE.md to name the tree's paths, found {checked}"
    );
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist: {missing:?}"
    );
}

/// The README's two commands are the ones CI and users run.
#[test]
fn readme_names_the_two_commands() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    assert!(readme.contains("cargo xtask conformance"));
    assert!(readme.contains("cargo test --workspace"));
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(
        ci.contains("cargo test --workspace"),
        ".ci/run must run the README's test command"
    );
}
