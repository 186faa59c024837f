//! The WebAssembly build (`quorum-wasm` for `wasm32-unknown-unknown`, run under node by
//! `wasm/examples/run-model.mjs`) runs corpus models and writes what this CLI writes: the same
//! files, the same dtypes and shapes, integers, booleans, strings and protobuf outputs bit for bit,
//! floats within a few rounding steps (the native kernels are AVX2/AVX-512 with other summation
//! orders; the module runs the portable ones on one thread). The comparison is shown to catch a
//! perturbed element, a changed shape and a missing file. First, the JavaScript wrapper's `.npy`
//! codec is tested on its own (`wasm/js/codec.test.mjs`).
//!
//! Needs node (`.ci/run` installs it); `QUORUM_SKIP_WASM_TESTS=1` skips this test, saying so. The
//! module is built once into target/wasm/ (`cargo xtask wasm` builds the same file).
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use quorum::{DType, Tensor};

/// Corpus cases run both ways: convolution, GEMM, recurrent, normalisation, softmax, resize,
/// gather, reductions, einsum, strings, bfloat16 and sequence outputs, and a whole light model.
const CASES: &[&str] = &[
    "node/test_conv_with_strides_padding",
    "node/test_gemm_all_attributes",
    "node/test_matmul_4d",
    "node/test_lstm_with_initial_bias",
    "node/test_layer_normalization_4d_axis1",
    "node/test_softmax_axis_1",
    "node/test_resize_upsample_scales_linear",
    "node/test_gather_elements_1",
    "node/test_reduce_log_sum_exp_keepdims_random",
    "node/test_einsum_batch_matmul",
    "node/test_string_concat_utf8",
    "node/test_string_split_basic",
    "node/test_split_to_sequence_1",
    "node/test_cast_FLOAT_to_BFLOAT16",
    "node/test_argmax_keepdims_random",
    "node/test_nonzero_example",
    "light/test_squeezenet",
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Builds the module (release, into target/wasm/); its path.
fn module() -> PathBuf {
    let root = workspace();
    let target = root.join("target/wasm");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(&root)
        .env("CARGO_TARGET_DIR", &target)
        .args([
            "build",
            "--release",
            "-p",
            "quorum-wasm",
            "--target",
            "wasm32-unknown-unknown",
        ])
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "building quorum-wasm for wasm32-unknown-unknown failed (rustup target add \
         wasm32-unknown-unknown?):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    target.join("wasm32-unknown-unknown/release/quorum_wasm.wasm")
}

/// The case's model and its inputs as `NAME=FILE` (the first data set).
fn case(dir: &Path) -> (PathBuf, Vec<String>) {
    let model = dir.join("model.onnx");
    let m = quorum::loader::model_from_file(&model, &Default::default()).expect("loads");
    let names: Vec<String> = m.graph.runtime_inputs().map(|i| i.name.clone()).collect();
    let data = dir.join("test_data_set_0");
    let inputs = names
        .iter()
        .enumerate()
        .map(|(k, n)| format!("{n}={}", data.join(format!("input_{k}.pb")).display()))
        .collect();
    (model, inputs)
}

/// The inputs `NAME=FILE.pb` written as `.npy` files under `dir` (`None` where one has no `.npy`
/// form: bfloat16, a sequence...).
fn as_npy(model: &Path, inputs: &[String], dir: &Path) -> Option<Vec<String>> {
    let m = quorum::loader::model_from_file(model, &Default::default()).expect("loads");
    std::fs::create_dir_all(dir).unwrap();
    inputs
        .iter()
        .enumerate()
        .map(|(k, spec)| {
            let (name, file) = spec.split_once('=').expect("NAME=FILE");
            let ty = &m.graph.inputs.iter().find(|i| i.name == name)?.ty;
            let bytes = std::fs::read(file).expect("input");
            let v = quorum::loader::value_from_pb(&bytes, ty, &Default::default()).ok()?;
            let npy = quorum::npy::write(v.as_tensor()?).ok()?;
            let path = dir.join(format!("input_{k}.npy"));
            std::fs::write(&path, npy).unwrap();
            Some(format!("{name}={}", path.display()))
        })
        .collect()
}

/// Every file a run wrote, by name.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .expect("output dir")
        .map(|e| {
            let p = e.expect("entry").path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).expect("read"))
        })
        .collect()
}

/// Float elements agree where `|a − b| ≤ 1e-5 + 1e-4·|b|` (a few rounding steps of f32 through
/// kernels that sum in other orders), NaN with NaN, infinities exactly.
fn close(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= 1e-5 + 1e-4 * b.abs()
}

/// Why two runs' files differ (none: they agree); the count of float files that were bit-identical.
fn differences(
    native: &BTreeMap<String, Vec<u8>>,
    wasm: &BTreeMap<String, Vec<u8>>,
) -> (Vec<String>, usize) {
    let mut why = Vec::new();
    let mut identical = 0;
    if native.keys().ne(wasm.keys()) {
        why.push(format!(
            "files differ: native {:?}, wasm {:?}",
            native.keys().collect::<Vec<_>>(),
            wasm.keys().collect::<Vec<_>>()
        ));
        return (why, identical);
    }
    for (name, n) in native {
        let w = &wasm[name];
        if n == w {
            identical += 1;
            continue;
        }
        if !name.ends_with(".npy") {
            why.push(format!("{name}: protobuf bytes differ"));
            continue;
        }
        let (tn, tw) = (
            quorum::npy::read(n).expect("native npy"),
            quorum::npy::read(w).expect("wasm npy"),
        );
        if tn.dtype() != tw.dtype() || tn.shape() != tw.shape() {
            why.push(format!(
                "{name}: native {}, wasm {}",
                tn.describe(),
                tw.describe()
            ));
            continue;
        }
        if !tn.dtype().is_float() {
            why.push(format!("{name}: {} values differ", tn.dtype()));
            continue;
        }
        let (vn, vw) = (f64s(&tn), f64s(&tw));
        let bad: Vec<usize> = (0..vn.len()).filter(|&i| !close(vw[i], vn[i])).collect();
        if let Some(&i) = bad.first() {
            why.push(format!(
                "{name}: {} of {} elements apart, first [{i}] native {} wasm {}",
                bad.len(),
                vn.len(),
                vn[i],
                vw[i]
            ));
        }
    }
    (why, identical)
}

fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_f64_vec().expect("float tensor")
}

#[test]
fn the_webassembly_build_under_node_writes_what_the_native_cli_writes() {
    if std::env::var_os("QUORUM_SKIP_WASM_TESTS").is_some() {
        eprintln!("QUORUM_SKIP_WASM_TESTS is set: the WebAssembly build is not tested");
        return;
    }
    let node = Command::new("node").arg("--version").output();
    assert!(
        node.is_ok_and(|o| o.status.success()),
        "node is missing: install Node.js (apt-get install nodejs) or set QUORUM_SKIP_WASM_TESTS=1"
    );
    // The wrapper's .npy codec alone: every dtype round trips, bad files are refused.
    let codec = Command::new("node")
        .arg(workspace().join("wasm/js/codec.test.mjs"))
        .output()
        .expect("node runs");
    assert!(
        codec.status.success(),
        "wasm/js/codec.test.mjs failed:\n{}{}",
        String::from_utf8_lossy(&codec.stdout),
        String::from_utf8_lossy(&codec.stderr)
    );
    let corpus = quorum_conformance::corpus::default_dir();
    quorum_conformance::corpus::ensure(&corpus).expect("corpus");
    let wasm = module();
    let script = workspace().join("wasm/examples/run-model.mjs");
    let tmp = std::env::temp_dir().join(format!("quorum-wasm-node-{}", std::process::id()));
    let mut failures = Vec::new();
    let mut checked = BTreeMap::new();
    let mut npy_cases = 0;
    for name in CASES {
        let dir = corpus.join(name);
        let (model, inputs) = case(&dir);
        let (nd, wd) = (tmp.join(name).join("native"), tmp.join(name).join("wasm"));
        for d in [&nd, &wd] {
            let _ = std::fs::remove_dir_all(d);
            std::fs::create_dir_all(d).unwrap();
        }
        let mut native = Command::new(env!("CARGO_BIN_EXE_quorum"));
        native
            .args(["run", "--provider", "cpu", "--output-dir"])
            .arg(&nd)
            .arg(&model);
        let mut web = Command::new("node");
        web.arg(&script)
            .arg(&model)
            .arg("--wasm")
            .arg(&wasm)
            .arg("--output-dir")
            .arg(&wd);
        for i in &inputs {
            native.args(["--input", i]);
            web.args(["--input", i]);
        }
        for (what, mut c) in [("native", native), ("wasm", web)] {
            let out = c.output().expect("runs");
            assert!(
                out.status.success(),
                "{name}: the {what} run failed:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let (n, w) = (files(&nd), files(&wd));

        // The same inputs as .npy, through the wrapper's .npy reader and writer (typed arrays,
        // BigInt64Array, booleans, UTF-32 strings): the module's outputs, byte for byte.
        if let Some(npys) = as_npy(&model, &inputs, &tmp.join(name).join("npy-inputs")) {
            let wd2 = tmp.join(name).join("wasm-npy");
            let _ = std::fs::remove_dir_all(&wd2);
            let mut c = Command::new("node");
            c.arg(&script)
                .arg(&model)
                .arg("--wasm")
                .arg(&wasm)
                .arg("--output-dir")
                .arg(&wd2);
            for i in &npys {
                c.args(["--input", i]);
            }
            let out = c.output().expect("runs");
            assert!(
                out.status.success(),
                "{name}: the wasm run with .npy inputs failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            if files(&wd2) != w {
                failures.push(format!(
                    "{name}: .npy inputs gave other outputs than .pb inputs"
                ));
            }
            npy_cases += 1;
        }
        assert!(!n.is_empty(), "{name}: the native run wrote nothing");
        let (why, identical) = differences(&n, &w);
        failures.extend(why.into_iter().map(|m| format!("{name}: {m}")));
        checked.insert(*name, (n.len(), identical));

        // The comparison catches a perturbed element, a changed shape and a missing file.
        let (file, bytes) = n.iter().next().expect("a file");
        if file.ends_with(".npy") {
            let t = quorum::npy::read(bytes).unwrap();
            if t.dtype() != DType::Str && !t.is_empty() {
                let mut v = t.to_f64_vec().unwrap();
                v[0] = if v[0] == 0.0 { 1.0 } else { v[0] * 1.01 + 1.0 };
                let bent = Tensor::from_f64s(t.dtype(), t.shape(), v).unwrap();
                let mut m = w.clone();
                m.insert(file.clone(), quorum::npy::write(&bent).unwrap());
                assert!(
                    !differences(&n, &m).0.is_empty(),
                    "{name}: a bent element passed"
                );
                let flat = bent.reshape(&[t.len()]).unwrap();
                if t.rank() != 1 {
                    m.insert(file.clone(), quorum::npy::write(&flat).unwrap());
                    assert!(
                        !differences(&n, &m).0.is_empty(),
                        "{name}: a reshaped output passed"
                    );
                }
            }
        }
        let mut m = w.clone();
        m.remove(file);
        assert!(
            !differences(&n, &m).0.is_empty(),
            "{name}: a missing file passed"
        );
    }
    let _ = std::fs::remove_dir_all(&tmp);
    eprintln!("case: files (bit-identical): {checked:?}; {npy_cases} cases also fed as .npy");
    assert!(
        npy_cases >= CASES.len() / 2,
        "only {npy_cases} cases fed as .npy"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
