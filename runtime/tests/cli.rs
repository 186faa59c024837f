//! The `quorum` binary end to end: run writes .npy outputs, bench prints JSON, info shows placement, and
//! failures exit with the documented codes and one line.
mod common;

use std::path::PathBuf;
use std::process::Command;

use common::*;

fn quorum() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_quorum"));
    // The CLI never prints a backtrace (the error names what failed); kept out of the environment
    // all the same, so that a panic's report could not pass for an error line.
    c.env_remove("RUST_BACKTRACE");
    c
}

/// `y = x * w + b` over [n, 4] with symbolic `n`; returns the model's path in a fresh folder.
fn write_model(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("quorum-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let m = model(
        vec![
            node("Mul", &["x", "w"], &["t"]),
            node("Add", &["t", "b"], &["out/y:0"]),
        ],
        vec![value_info("x", symbolic_type(1, &["n", "4"]))],
        vec![value_info("out/y:0", symbolic_type(1, &["n", "4"]))],
        vec![
            f32_tensor("w", &[4], &[0.5, -1.0, 2.0, 3.0]),
            f32_tensor("b", &[4], &[1.0, 1.0, -1.0, 0.0]),
        ],
        14,
    );
    // The shape declares a literal "4" as a symbol; fine, symbols only need to agree with each other.
    let path = dir.join("model.onnx");
    std::fs::write(&path, bytes(&m)).unwrap();
    path
}

#[test]
fn run_writes_npy_outputs_with_safe_names() {
    let model = write_model("run");
    let dir = model.parent().unwrap().to_path_buf();
    let x = quorum::Tensor::from_f32(&[2, 4], vec![1.0, 2.0, 3.0, 4.0, -1.0, -2.0, -3.0, -4.0])
        .unwrap();
    std::fs::write(dir.join("x.npy"), quorum::npy::write(&x).unwrap()).unwrap();
    let out = quorum()
        .arg("run")
        .arg(&model)
        .arg("--input")
        .arg(format!("x={}", dir.join("x.npy").display()))
        .arg("--output-dir")
        .arg(dir.join("outs"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("float32[2, 4]"), "{stdout}");
    let y = quorum::npy::read(&std::fs::read(dir.join("outs/out_y_0.npy")).unwrap()).unwrap();
    let want = quorum::Tensor::from_f32(&[2, 4], vec![1.5, -1.0, 5.0, 12.0, 0.5, 3.0, -7.0, -12.0])
        .unwrap();
    assert_eq!(y, want);
}

#[test]
fn bench_prints_json_with_percentiles() {
    let model = write_model("bench");
    let out = quorum()
        .args([
            "bench", "--iters", "5", "--warmup", "1", "--json", "--dim", "n=3",
        ])
        .arg(&model)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in ["median_ms", "p10_ms", "p90_ms"] {
        assert!(j[key].as_f64().is_some_and(|v| v >= 0.0), "{key} in {j}");
    }
    assert_eq!(j["iters"], 5);
    // Every timed run, in order, for tools that pool runs across processes (cargo xtask bench-cpu).
    let times = j["times_ms"].as_array().expect("times_ms");
    assert_eq!(times.len(), 5, "{j}");
    let mut sorted: Vec<f64> = times.iter().map(|t| t.as_f64().unwrap()).collect();
    sorted.sort_by(f64::total_cmp);
    assert_eq!(j["median_ms"].as_f64(), Some(sorted[2]), "{j}");
    // `auto` on a machine without a GPU: everything on the CPU, nothing launched.
    assert_eq!(j["provider"], "auto");
    assert_eq!(j["counters"]["kernel_launches"], 0, "{j}");
}

/// `--io pinned|device` on the simulated device: the timed runs bind their values (the counters
/// show no transfer for `device`; `pinned` runs the same number of runs), and a session without a
/// device refuses both with the reason.
#[test]
fn bench_binds_inputs_and_outputs_with_io() {
    let model = write_model("bench-io");
    let bench = |io: &str, provider: &str| {
        quorum()
            .args([
                "bench", "--iters", "4", "--warmup", "1", "--json", "--dim", "n=3",
            ])
            .args(["--provider", provider, "--io", io])
            .arg(&model)
            .output()
            .unwrap()
    };
    for io in ["pinned", "device"] {
        let out = bench(io, "sim");
        assert!(
            out.status.success(),
            "{io}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(j["io"], io, "{j}");
        assert_eq!(j["iters"], 4, "{j}");
        if io == "device" {
            assert_eq!(j["transfers"]["h2d_mb"], 0.0, "{j}");
            assert_eq!(j["transfers"]["d2h_mb"], 0.0, "{j}");
        }
        let out = bench(io, "cpu");
        assert!(!out.status.success(), "{io} on the CPU");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("device"), "{io}: {err}");
    }
}

#[test]
fn info_lists_io_ops_and_placement() {
    let model = write_model("info");
    let out = quorum().arg("info").arg(&model).output().unwrap();
    assert!(out.status.success());
    let s = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "x: float32[n,4]",
        "Mul",
        "Add",
        "cpu: takes 2 of 2 nodes",
        "ai.onnx=14",
        "constant folding: 0 of 2 top-level nodes",
    ] {
        assert!(s.contains(needle), "missing '{needle}' in:\n{s}");
    }
}

/// `quorum generate` on the tiny GPT-2 of `benches/zoo/decoder-tiny`: PyTorch's greedy tokens,
/// one JSON object with `--json`, and the documented exit codes for what does not fit.
#[test]
fn generate_prints_pytorchs_tokens() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../benches/zoo/decoder-tiny");
    let rec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("generate.json")).unwrap()).unwrap();
    let list = |k: &str| -> Vec<String> {
        rec[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.to_string())
            .collect()
    };
    let (prompt, tokens) = (list("prompt").join(","), list("tokens"));
    let model = dir.join("model.onnx");
    let out = quorum()
        .arg("generate")
        .arg(&model)
        .args([
            "--prompt",
            &prompt,
            "--new-tokens",
            &tokens.len().to_string(),
        ])
        .args(["--provider", "cpu"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.lines().next().unwrap().trim(),
        tokens.join(" "),
        "{text}"
    );
    assert!(text.contains("per token median"), "{text}");
    let out = quorum()
        .arg("generate")
        .arg(&model)
        .args([
            "--prompt",
            &prompt,
            "--new-tokens",
            "3",
            "--repeat",
            "2",
            "--json",
        ])
        .args(["--provider", "cpu"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let got: Vec<String> = j["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.to_string())
        .collect();
    assert_eq!(got, tokens[..3]);
    assert_eq!(j["generations_timed"], 1);
    assert!(j["token_ms_median"].as_f64().unwrap() > 0.0);
    // --input does not apply (2); a model without a cache is not a decoder (3).
    let out = quorum()
        .arg("generate")
        .arg(&model)
        .args(["--input", "x=y.npy"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = quorum()
        .arg("generate")
        .arg(write_model("generate"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("key/value cache"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn failures_exit_with_documented_codes() {
    let model = write_model("fail");
    let dir = model.parent().unwrap();
    let bad_model = dir.join("bad.onnx");
    std::fs::write(&bad_model, b"not a model at all").unwrap();
    let out = quorum().arg("run").arg(&bad_model).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim().lines().count(),
        1,
        "one line: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = quorum()
        .arg("run")
        .arg(&model)
        .args(["--input", "x=/nonexistent.npy"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    let out = quorum()
        .arg("run")
        .arg(&model)
        .args(["--input", "nope=/nonexistent.npy"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    let out = quorum()
        .arg("run")
        .arg(&model)
        .args(["--provider", "tpu"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn verification_prints_a_summary_and_takes_allowed_ops() {
    let model = write_model("verify");
    let out = quorum()
        .args([
            "bench",
            "--iters",
            "2",
            "--warmup",
            "0",
            "--json",
            "--provider",
            "cpu",
        ])
        .args(["--verify", "strict", "--allow-unchecked", "Dropout, Resize"])
        .arg(&model)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // Nothing ran on an accelerator here, and the summary says so instead of staying silent.
    assert!(
        stderr.contains("verification (Strict): 0 checks"),
        "{stderr}"
    );
    assert!(stderr.contains("no node ran on an accelerator"), "{stderr}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(json["verification"].is_object(), "{json}");
    // Verification off: no summary.
    let quiet = quorum()
        .args([
            "bench",
            "--iters",
            "1",
            "--warmup",
            "0",
            "--provider",
            "cpu",
        ])
        .arg(&model)
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&quiet.stderr).contains("verification"));
}
