//! Sampled verification end to end on the simulated device: a clean model is judged node by node
//! with nothing wrong, and a kernel made wrong on purpose (`QUORUM_SIM_BREAK`) is found: reported by
//! `sample`, and failing a later run (exit 6) under `sample-strict`.
mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use common::*;

/// x [4, 64] → MatMul W [64, 32] → Relu → Add b [32] → Softmax → y, in a fresh folder.
fn write_chain(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("quorum-sample-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let w: Vec<f32> = (0..64 * 32)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
        .collect();
    let b: Vec<f32> = (0..32).map(|i| (i as f32 - 15.5) / 8.0).collect();
    let m = model(
        vec![
            node("MatMul", &["x", "w"], &["h"]),
            node("Relu", &["h"], &["r"]),
            node("Add", &["r", "b"], &["a"]),
            node("Softmax", &["a"], &["y"]),
        ],
        vec![value_info("x", tensor_type(1, &[4, 64]))],
        vec![value_info("y", tensor_type(1, &[4, 32]))],
        vec![f32_tensor("w", &[64, 32], &w), f32_tensor("b", &[32], &b)],
        17,
    );
    let path = dir.join("model.onnx");
    std::fs::write(&path, bytes(&m)).unwrap();
    path
}

fn bench(model: &PathBuf, verify: &str, broken: Option<&str>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_quorum"));
    c.env_remove("RUST_BACKTRACE")
        .env_remove("QUORUM_VERIFY")
        .args([
            "bench",
            "--provider",
            "sim",
            "--iters",
            "6",
            "--warmup",
            "0",
            "--json",
        ])
        .args(["--verify", verify])
        .arg(model);
    match broken {
        Some(op) => c.env(quorum::sim::BREAK_VAR, op),
        None => c.env_remove(quorum::sim::BREAK_VAR),
    };
    c.output().unwrap()
}

fn sampling(out: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    let j: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    j["sampling"].clone()
}

#[test]
fn a_clean_model_is_sampled_with_nothing_wrong() {
    let model = write_chain("clean");
    let out = bench(&model, "sample=2:16", None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = sampling(&out);
    assert_eq!(s["runs"], 6, "{s}");
    assert_eq!(s["sampled_runs"], 3, "{s}");
    assert_eq!(s["device_nodes"], 4, "{s}");
    assert_eq!(s["covered"], 4, "{s}");
    assert_eq!(s["judged"], 12, "{s}");
    assert_eq!(s["mismatched"], 0, "{s}");
    assert!(s["first_wrong"].is_null(), "{s}");
}

#[test]
fn a_broken_kernel_is_reported_by_sample_and_fails_the_next_run_under_sample_strict() {
    let model = write_chain("broken");
    let out = bench(&model, "sample=2:16", Some("Relu"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = sampling(&out);
    assert_eq!(s["mismatched"], 3, "{s}");
    let first = s["first_wrong"].as_str().unwrap_or_default();
    assert!(
        first.contains("'Relu_node' (Relu)") && first.contains("allowed error"),
        "{s}"
    );

    // The first run is sampled and wrong; the second fails before it starts.
    let out = bench(&model, "sample-strict=1:16", Some("Relu"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{stderr}");
    assert!(stderr.contains("1 of 1 runs sampled"), "{stderr}");
    assert!(stderr.contains("found by sampled verification"), "{stderr}");
    assert!(stderr.contains("Relu_node"), "{stderr}");
}
