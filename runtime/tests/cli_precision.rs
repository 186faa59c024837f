//! `--precision tf32` end to end on the simulated device, whose MatMul then rounds its operands to
//! TF32 as CUDA's tensor-core GEMM does and declares it: strict verification judges the node under
//! that declaration and passes it. The same rounding left undeclared (a TF32 path that claims f32,
//! `QUORUM_SIM_BREAK=undeclared-tf32`) has every element within its bound and must still fail
//! strict verification, on the spread of its errors. Likewise an f16 MatMul: summed in f32, as
//! CUDA's tensor cores sum f16 products, it passes; summed in f16 (an f16 path that accumulates in
//! f16, `QUORUM_SIM_BREAK=f16-accumulate`) it fails, and so does a bf16 MatMul whose running sum
//! is rounded to bf16 between K-blocks (`QUORUM_SIM_BREAK=bf16-block-accumulate`).
//!
//! The `attention` rewrite, on the same device: the chain `MatMul(Q, Kᵀ) → Div → Add(mask) →
//! Softmax → MatMul(·, V)` runs as one FusedAttention, which strict verification judges as the
//! chain and passes; the same node made wrong (`QUORUM_SIM_BREAK=FusedAttention`, one output
//! element moved by 0.8%) fails it, by name.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use common::*;
use quorum::inputs::Rng;

/// x [8, 4096] → MatMul W [4096, 8] → y: sums of 4,096 products of zero-mean operands, long enough
/// that a systematic rounding of the operands shows in the errors as a whole.
fn write_matmul(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("quorum-precision-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = Rng::new(4096);
    let w: Vec<f32> = (0..4096 * 8).map(|_| rng.uniform() as f32).collect();
    let m = model(
        vec![node("MatMul", &["x", "w"], &["y"])],
        vec![value_info("x", tensor_type(1, &[8, 4096]))],
        vec![value_info("y", tensor_type(1, &[8, 8]))],
        vec![f32_tensor("w", &[4096, 8], &w)],
        17,
    );
    let path = dir.join("model.onnx");
    std::fs::write(&path, bytes(&m)).unwrap();
    path
}

fn bench(model: &PathBuf, precision: &str, broken: Option<&str>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_quorum"));
    c.env_remove("RUST_BACKTRACE")
        .env_remove("QUORUM_VERIFY")
        .args([
            "bench",
            "--provider",
            "sim",
            "--iters",
            "2",
            "--warmup",
            "0",
        ])
        .args(["--json", "--verify", "strict", "--precision", precision])
        .arg(model);
    match broken {
        Some(b) => c.env(quorum::sim::BREAK_VAR, b),
        None => c.env_remove(quorum::sim::BREAK_VAR),
    };
    c.output().unwrap()
}

#[test]
fn a_declared_tf32_matmul_passes_strict_verification() {
    let model = write_matmul("declared");
    let out = bench(&model, "tf32", None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let j: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(j["precision"], "tf32", "{j}");
    assert!(
        j["verification"].to_string().contains("MatMul"),
        "the MatMul was judged: {j}"
    );
}

#[test]
fn tf32_rounding_that_claims_f32_fails_strict_verification() {
    let model = write_matmul("undeclared");
    for precision in ["f32", "tf32"] {
        let out = bench(&model, precision, Some(quorum::sim::UNDECLARED_TF32));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(6), "{precision}: {stderr}");
        assert!(
            stderr.contains("MatMul") && stderr.contains("root mean square"),
            "{precision}: {stderr}"
        );
    }
}

#[test]
fn an_unknown_precision_is_a_usage_error() {
    let model = write_matmul("unknown");
    let out = bench(&model, "fp8", None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--precision") && stderr.contains("fp8"),
        "{stderr}"
    );
}

fn compare(model: &PathBuf, precision: &str, broken: Option<&str>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_quorum"));
    c.env_remove("RUST_BACKTRACE")
        .env_remove("QUORUM_VERIFY")
        .args(["compare", "--provider", "sim", "--against", "cpu"])
        .args(["--seed", "3", "--precision", precision])
        .arg(model);
    match broken {
        Some(b) => c.env(quorum::sim::BREAK_VAR, b),
        None => c.env_remove(quorum::sim::BREAK_VAR),
    };
    c.output().unwrap()
}

/// `quorum compare` judges a node's outputs under what its kernel declared in that run: the TF32
/// MatMul differs from the CPU's bits but is right for TF32 operands; the same rounding claimed
/// as exact f32 is the first wrong node.
#[test]
fn compare_judges_a_tf32_node_under_its_declaration() {
    let model = write_matmul("compare");
    let out = compare(&model, "tf32", None);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("no node is wrong on its own"), "{stdout}");
    let out = compare(&model, "f32", Some(quorum::sim::UNDECLARED_TF32));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(6), "{stdout}");
    assert!(
        stdout.contains("first wrong node") && stdout.contains("MatMul"),
        "{stdout}"
    );
}

/// x [8, 4096] → MatMul W [4096, 8] → y, all f16 (`data_type` 10) or all bf16 (16): sums of
/// 4,096 products of zero-mean half operands.
fn write_half_matmul(tag: &str, data_type: i32) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("quorum-precision-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = Rng::new(4097);
    let w: Vec<u8> = (0..4096 * 8)
        .flat_map(|_| match data_type {
            16 => half::bf16::from_f64(rng.uniform()).to_le_bytes(),
            _ => half::f16::from_f64(rng.uniform()).to_le_bytes(),
        })
        .collect();
    let w = quorum::proto::TensorProto {
        name: Some("w".into()),
        dims: vec![4096, 8],
        data_type: Some(data_type),
        raw_data: Some(w),
        ..Default::default()
    };
    let m = model(
        vec![node("MatMul", &["x", "w"], &["y"])],
        vec![value_info("x", tensor_type(data_type, &[8, 4096]))],
        vec![value_info("y", tensor_type(data_type, &[8, 8]))],
        vec![w],
        17,
    );
    let path = dir.join("model.onnx");
    std::fs::write(&path, bytes(&m)).unwrap();
    path
}

/// A half MatMul whose running sum is rounded to the half (f16 after every product, bf16 after
/// every K-block): summed in f32 it passes strict verification, so rounded it must fail.
#[rstest::rstest]
#[case::f16_every_product("f16acc", 10, quorum::sim::F16_ACCUMULATOR)]
#[case::bf16_between_k_blocks("bf16acc", 16, quorum::sim::BF16_BLOCK_ACCUMULATOR)]
fn a_half_matmul_that_rounds_its_sum_fails_strict_verification(
    #[case] tag: &str,
    #[case] data_type: i32,
    #[case] broken: &str,
) {
    let model = write_half_matmul(tag, data_type);
    let out = bench(&model, "f32", None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "summed in f32: {stderr}");
    let out = bench(&model, "f32", Some(broken));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{broken}: {stderr}");
    assert!(stderr.contains("MatMul"), "{stderr}");
}

/// `quorum run --precision f16|bf16` on an f32 model: converted at session build (the MatMul in the
/// half, the interface f32), the outputs compared with the f32 model's; `--keep-f32 MatMul` leaves
/// nothing to convert.
#[test]
fn run_converts_an_f32_model_and_reports_its_deviation() {
    let model = write_matmul("mixed");
    let out_dir = model.parent().unwrap().join("out");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_quorum"))
            .env_remove("QUORUM_VERIFY")
            .args(["run", "--provider", "cpu", "--output-dir"])
            .arg(&out_dir)
            .args(args)
            .arg(&model)
            .output()
            .unwrap()
    };
    for (precision, name, at_most) in [("f16", "float16", 1e-2), ("bf16", "bfloat16", 5e-2)] {
        let out = run(&["--precision", precision]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(
            stderr.contains(&format!("mixed precision ({name}): 1 nodes converted")),
            "{stderr}"
        );
        let d: f64 = stderr
            .lines()
            .find_map(|l| l.strip_prefix("deviation from the f32 model (CPU) of 'y': "))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no deviation printed: {stderr}"));
        // Operands rounded to the half, sums of 4,096 products in f32: a few of the half's units.
        assert!(d > 0.0 && d < at_most, "{precision}: {d:e}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("y: float32[8, 8]"), "{stdout}");
    }
    let out = run(&["--precision", "f16", "--keep-f32", "MatMul"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("mixed precision"), "{stderr}");
}

/// q [2, 3, 20, 16], kᵀ [2, 3, 16, 45], v [2, 3, 45, 8], mask [20, 45] → o [2, 3, 20, 8].
fn write_attention() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("quorum-attention-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let m = model(
        vec![
            node("MatMul", &["q", "kt"], &["s"]),
            node("Div", &["s", "c"], &["x"]),
            node("Add", &["x", "m"], &["y"]),
            node("Softmax", &["y"], &["p"]),
            node("MatMul", &["p", "v"], &["o"]),
        ],
        vec![
            value_info("q", tensor_type(1, &[2, 3, 20, 16])),
            value_info("kt", tensor_type(1, &[2, 3, 16, 45])),
            value_info("v", tensor_type(1, &[2, 3, 45, 8])),
            value_info("m", tensor_type(1, &[20, 45])),
        ],
        vec![value_info("o", tensor_type(1, &[2, 3, 20, 8]))],
        vec![f32_tensor("c", &[], &[4.0])],
        17,
    );
    let path = dir.join("model.onnx");
    std::fs::write(&path, bytes(&m)).unwrap();
    path
}

#[test]
fn fused_attention_passes_strict_verification_and_a_wrong_one_fails_it() {
    let model = write_attention();
    let out = bench(&model, "f32", None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let j: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert!(
        j["verification"].to_string().contains("FusedAttention"),
        "the fused node was judged: {j}"
    );
    assert!(
        !j["verification"].to_string().contains("Softmax"),
        "no Softmax is left: {j}"
    );

    let out = bench(&model, "f32", Some("FusedAttention"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{stderr}");
    assert!(stderr.contains("FusedAttention"), "{stderr}");
}
