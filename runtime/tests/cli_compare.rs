//! `quorum compare` end to end on the simulated device: a clean placement has no wrong node, and a
//! kernel made wrong on purpose (`QUORUM_SIM_BREAK`, one element 0.8% off) is named as the first
//! wrong node, with its element, both values and the bound, whichever node of the chain it is.
mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use common::*;

/// Seeded values in [-1, 1) (never all zeros).
fn seeded(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 23) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// x [4, 64] → MatMul W [64, 32] → Relu → Add b [32] → Softmax → y, in a fresh folder.
fn write_chain(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("quorum-compare-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let m = model(
        vec![
            node("MatMul", &["x", "w"], &["h"]),
            node("Relu", &["h"], &["r"]),
            node("Add", &["r", "b"], &["a"]),
            node("Softmax", &["a"], &["y"]),
        ],
        vec![value_info("x", tensor_type(1, &[4, 64]))],
        vec![value_info("y", tensor_type(1, &[4, 32]))],
        vec![
            f32_tensor("w", &[64, 32], &seeded(1, 64 * 32)),
            f32_tensor("b", &[32], &seeded(2, 32)),
        ],
        17,
    );
    let path = dir.join("model.onnx");
    std::fs::write(&path, bytes(&m)).unwrap();
    path
}

fn compare(model: &PathBuf, broken: Option<&str>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_quorum"));
    c.env_remove("RUST_BACKTRACE")
        .env_remove("QUORUM_VERIFY")
        .args([
            "compare",
            "--provider",
            "sim",
            "--against",
            "cpu",
            "--seed",
            "3",
        ])
        .arg(model);
    match broken {
        Some(op) => c.env(quorum::sim::BREAK_VAR, op),
        None => c.env_remove(quorum::sim::BREAK_VAR),
    };
    c.output().unwrap()
}

#[test]
fn a_clean_placement_has_no_wrong_node() {
    let model = write_chain("clean");
    let out = compare(&model, None);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("compared 4 of 4 nodes"), "{stdout}");
    assert!(stdout.contains("no node is wrong on its own"), "{stdout}");
}

#[test]
fn a_broken_kernel_is_named_wherever_it_is() {
    let model = write_chain("broken");
    for (op, at) in [("MatMul", 1), ("Relu", 2), ("Add", 3), ("Softmax", 4)] {
        let out = compare(&model, Some(op));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(6), "{op}: {stdout}{stderr}");
        assert!(
            stdout.contains(&format!("first wrong node: '{op}_node' ({op})")),
            "{op}: {stdout}"
        );
        // The scan stops at the wrong node, and names its element, both values and the bound.
        assert!(
            stdout.contains(&format!("compared {at} of 4 nodes")),
            "{op}: {stdout}"
        );
        assert!(
            stdout.contains("on its own inputs it is wrong too"),
            "{op}: {stdout}"
        );
        assert!(stdout.contains("both oracles"), "{op}: {stdout}");
        assert!(stdout.contains("allowed error"), "{op}: {stdout}");
        assert!(stderr.contains("is wrong on its own"), "{op}: {stderr}");
    }
}

/// Two nodes of one name: the second gets a name of its place (`#k`), so the wrong one is told
/// apart. (Unnamed nodes are named by the loader, `Op_k`.)
#[test]
fn a_wrong_node_sharing_its_name_is_named_by_its_place() {
    let dir = std::env::temp_dir().join(format!("quorum-compare-dup-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut relu = node("Relu", &["h"], &["r"]);
    relu.name = Some("dup".into());
    let mut neg = node("Neg", &["r"], &["y"]);
    neg.name = Some("dup".into());
    let m = model(
        vec![node("MatMul", &["x", "w"], &["h"]), relu, neg],
        vec![value_info("x", tensor_type(1, &[4, 64]))],
        vec![value_info("y", tensor_type(1, &[4, 32]))],
        vec![f32_tensor("w", &[64, 32], &seeded(5, 64 * 32))],
        17,
    );
    let path = dir.join("model.onnx");
    std::fs::write(&path, bytes(&m)).unwrap();
    let out = compare(&path, Some("Neg"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(6), "{stdout}");
    assert!(stdout.contains("first wrong node: '#2' (Neg)"), "{stdout}");
}
