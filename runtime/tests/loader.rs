//! Loading: external data stays inside the model's folder, bad tensors and graphs are typed errors.
mod common;

use common::*;
use quorum::{Error, Session, SessionOptions, Tensor, Value};

/// A model `y = x + w` whose initializer `w` ([4] f32) lives in external data.
fn add_model(w: quorum::proto::TensorProto) -> Vec<u8> {
    bytes(&model(
        vec![node("Add", &["x", "w"], &["y"])],
        vec![value_info("x", tensor_type(1, &[4]))],
        vec![value_info("y", tensor_type(1, &[4]))],
        vec![w],
        13,
    ))
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("quorum-loader-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn weights() -> Vec<u8> {
    [1.5f32, -2.0, 3.25, 0.5]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect()
}

#[test]
fn external_data_inside_the_folder_loads() {
    let dir = temp_dir("ok");
    let mut data = vec![7u8; 8];
    data.extend(weights());
    std::fs::write(dir.join("w.bin"), data).unwrap();
    std::fs::write(
        dir.join("m.onnx"),
        add_model(external_tensor("w", &[4], "w.bin", 8, 16)),
    )
    .unwrap();
    let s = Session::from_file(dir.join("m.onnx"), SessionOptions::default()).unwrap();
    let x = Tensor::from_f32(&[4], vec![0.25, 0.5, -1.0, 2.0]).unwrap();
    let out = s.run(vec![("x".into(), Value::Tensor(x))]).unwrap();
    assert_eq!(
        out[0].1,
        Value::Tensor(Tensor::from_f32(&[4], vec![1.75, -1.5, 2.25, 2.5]).unwrap())
    );
}

fn load_err(dir: &std::path::Path, w: quorum::proto::TensorProto) -> String {
    std::fs::write(dir.join("m.onnx"), add_model(w)).unwrap();
    match Session::from_file(dir.join("m.onnx"), SessionOptions::default()) {
        Err(e @ Error::InvalidModel(_)) => e.to_string(),
        Err(e) => panic!("expected InvalidModel, got {e}"),
        Ok(_) => panic!("external data should have been refused"),
    }
}

#[test]
fn external_data_escaping_the_folder_is_refused() {
    let dir = temp_dir("escape");
    let outside = temp_dir("outside");
    std::fs::write(outside.join("secret.bin"), weights()).unwrap();
    let abs = outside.join("secret.bin").display().to_string();
    assert!(
        load_err(&dir, external_tensor("w", &[4], &abs, 0, 16)).contains("plain relative path")
    );
    let dotdot = format!(
        "../{}/secret.bin",
        outside.file_name().unwrap().to_string_lossy()
    );
    assert!(
        load_err(&dir, external_tensor("w", &[4], &dotdot, 0, 16)).contains("plain relative path")
    );
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(outside.join("secret.bin"), dir.join("link.bin")).unwrap();
        assert!(
            load_err(&dir, external_tensor("w", &[4], "link.bin", 0, 16))
                .contains("outside the model's folder")
        );
    }
}

#[test]
fn external_data_offsets_outside_the_file_are_refused() {
    let dir = temp_dir("range");
    std::fs::write(dir.join("w.bin"), weights()).unwrap();
    assert!(load_err(&dir, external_tensor("w", &[4], "w.bin", 4, 16)).contains("outside"));
    assert!(
        load_err(&dir, external_tensor("w", &[4], "w.bin", u64::MAX - 2, 16)).contains("outside")
    );
    // Length agrees with the file but not with the declared shape.
    assert!(load_err(&dir, external_tensor("w", &[4], "w.bin", 0, 12)).contains("bytes"));
}

#[test]
fn malformed_bytes_are_decode_errors() {
    assert!(matches!(
        Session::from_bytes(&[], SessionOptions::default()),
        Err(Error::Decode(_))
    ));
    assert!(matches!(
        Session::from_bytes(b"\xff\xff\xff\xff garbage", SessionOptions::default()),
        Err(Error::Decode(_))
    ));
    let good = add_model(f32_tensor("w", &[4], &[1.0, 2.0, 3.0, 4.0]));
    for cut in [1, good.len() / 2, good.len() - 1] {
        assert!(
            Session::from_bytes(&good[..cut], SessionOptions::default()).is_err(),
            "truncated at {cut}"
        );
    }
}

#[test]
fn tensor_data_length_must_match_shape() {
    let short = f32_tensor("w", &[4], &[1.0, 2.0, 3.0]);
    match Session::from_bytes(&add_model(short), SessionOptions::default()) {
        Err(Error::InvalidModel(m)) => assert!(m.contains("'w'"), "{m}"),
        other => panic!("expected InvalidModel, got {:?}", other.err()),
    }
}

#[test]
fn absurd_declared_sizes_are_refused_before_allocation() {
    let mut huge = f32_tensor("w", &[1 << 30, 1 << 30], &[]);
    huge.raw_data = Some(vec![]);
    match Session::from_bytes(&add_model(huge), SessionOptions::default()) {
        Err(Error::TooLarge { .. }) => {}
        other => panic!("expected TooLarge, got {:?}", other.err()),
    }
}

#[test]
fn cycles_and_dangling_inputs_name_the_nodes() {
    let cyc = model(
        vec![node("Relu", &["b"], &["a"]), node("Neg", &["a"], &["b"])],
        vec![],
        vec![value_info("a", tensor_type(1, &[1]))],
        vec![],
        13,
    );
    let e = Session::from_bytes(&bytes(&cyc), SessionOptions::default())
        .err()
        .expect("cycle must fail")
        .to_string();
    assert!(e.contains("cycle") && e.contains("Relu_node"), "{e}");
    let dangling = model(
        vec![node("Relu", &["nowhere"], &["a"])],
        vec![],
        vec![value_info("a", tensor_type(1, &[1]))],
        vec![],
        13,
    );
    let e = Session::from_bytes(&bytes(&dangling), SessionOptions::default())
        .err()
        .expect("must fail")
        .to_string();
    assert!(e.contains("nowhere") && e.contains("Relu_node"), "{e}");
}

#[test]
fn unknown_ops_are_unsupported_naming_node_and_op() {
    let m = model(
        vec![node("NoSuchOp", &["x"], &["y"])],
        vec![value_info("x", tensor_type(1, &[1]))],
        vec![value_info("y", tensor_type(1, &[1]))],
        vec![],
        13,
    );
    match Session::from_bytes(&bytes(&m), SessionOptions::default()) {
        Err(e @ Error::Unsupported { .. }) => {
            assert!(e.to_string().contains("NoSuchOp_node") && e.to_string().contains("NoSuchOp"))
        }
        other => panic!("expected Unsupported, got {:?}", other.err()),
    }
}

/// A model-local function whose body holds a Loop that reads the function's own values (its input
/// `scale` and a constant it computes, and its attribute `k` through a Constant) from inside the
/// loop body, as torch's dynamo exporter writes `aten::as_strided`: expanded inline, the body's
/// reads must follow the function's renaming and its attribute references the call's values.
fn function_with_a_loop(rename_inside_loop: bool) -> quorum::proto::ModelProto {
    use quorum::proto;
    // A constant in the loop body whose value is the function's attribute `k` (the call sets it),
    // as dynamo's as_strided takes its rank.
    let mut k_const = node("Constant", &[], &["k"]);
    k_const.attribute = vec![proto::AttributeProto {
        name: Some("value_float".into()),
        r#type: Some(proto::attribute_proto::AttributeType::Float as i32),
        ref_attr_name: Some("k".into()),
        ..Default::default()
    }];
    let body = proto::GraphProto {
        name: Some("body".into()),
        node: vec![
            k_const,
            node("Mul", &["acc", "two"], &["acc_twice"]),
            node("Add", &["acc_twice", "scale"], &["acc_scaled"]),
            node("Add", &["acc_scaled", "k"], &["acc_out"]),
            node("Identity", &["cond"], &["cond_out"]),
        ],
        input: vec![
            value_info("i", tensor_type(7, &[])),
            value_info("cond", tensor_type(9, &[])),
            value_info("acc", tensor_type(1, &[3])),
        ],
        output: vec![
            value_info("cond_out", tensor_type(9, &[])),
            value_info("acc_out", tensor_type(1, &[3])),
        ],
        ..Default::default()
    };
    let mut two = node("Constant", &[], &["two"]);
    two.attribute = vec![proto::AttributeProto {
        name: Some("value".into()),
        r#type: Some(proto::attribute_proto::AttributeType::Tensor as i32),
        t: Some(f32_tensor("", &[], &[2.0])),
        ..Default::default()
    }];
    let mut lp = node("Loop", &["n", "", "x"], &["y"]);
    lp.attribute = vec![proto::AttributeProto {
        name: Some("body".into()),
        r#type: Some(proto::attribute_proto::AttributeType::Graph as i32),
        g: Some(body),
        ..Default::default()
    }];
    let f = proto::FunctionProto {
        name: Some("Twice".into()),
        domain: Some("local".into()),
        input: vec!["x".into(), "n".into(), "scale".into()],
        output: vec!["y".into()],
        attribute: vec!["k".into()],
        node: vec![two, lp],
        opset_import: vec![proto::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        ..Default::default()
    };
    let mut call = node("Twice", &["a", "steps", "s"], &["out"]);
    call.domain = Some("local".into());
    call.attribute = vec![proto::AttributeProto {
        name: Some("k".into()),
        r#type: Some(proto::attribute_proto::AttributeType::Float as i32),
        f: Some(0.25),
        ..Default::default()
    }];
    let mut m = model(
        vec![call],
        vec![
            value_info("a", tensor_type(1, &[3])),
            value_info("steps", tensor_type(7, &[])),
            value_info("s", tensor_type(1, &[3])),
        ],
        vec![value_info("out", tensor_type(1, &[3]))],
        vec![],
        17,
    );
    m.opset_import.push(proto::OperatorSetIdProto {
        domain: Some("local".into()),
        version: Some(1),
    });
    m.functions.push(f);
    if !rename_inside_loop {
        // The broken twin: the loop body reads a name no scope defines.
        let g = m.functions[0].node[1].attribute[0].g.as_mut().unwrap();
        g.node[2].input[1] = "not_defined_anywhere".into();
    }
    m
}

#[test]
fn a_loop_inside_a_function_reads_the_functions_values() {
    let m = function_with_a_loop(true);
    let s = Session::from_bytes(&bytes(&m), SessionOptions::default()).unwrap();
    let a = [0.25f32, -1.5, 3.0];
    let sc = [0.5f32, 1.0, -2.0];
    let out = s
        .run(vec![
            (
                "a".into(),
                Value::Tensor(Tensor::from_f32(&[3], a.to_vec()).unwrap()),
            ),
            (
                "steps".into(),
                Value::Tensor(Tensor::from_i64(&[], vec![3]).unwrap()),
            ),
            (
                "s".into(),
                Value::Tensor(Tensor::from_f32(&[3], sc.to_vec()).unwrap()),
            ),
        ])
        .unwrap();
    let got = out[0].1.as_tensor().unwrap().to_f64_vec().unwrap();
    for k in 0..3 {
        // acc ← 2·acc + s + k (k = 0.25, the call's attribute), three times: 8a + 7s + 7k.
        let want = 8.0 * a[k] as f64 + 7.0 * sc[k] as f64 + 7.0 * 0.25;
        assert_eq!(got[k], want, "element {k}");
    }
    // A read that no scope defines is still an invalid model naming the node.
    let bad = function_with_a_loop(false);
    let err = Session::from_bytes(&bytes(&bad), SessionOptions::default())
        .err()
        .expect("a dangling read inside a function's loop must not load")
        .to_string();
    assert!(err.contains("not_defined_anywhere"), "{err}");
}
