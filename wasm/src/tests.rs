//! The exported functions called natively, as the JavaScript wrapper calls them: pointers into
//! memory from `quorum_alloc`, results read from the buffer.
use prost::Message;
use quorum::proto;

use crate::*;

/// `y = Relu(x + b)` over `[2, N]` float32 (`N` symbolic), and `n = Shape(x)` (int64).
fn model() -> Vec<u8> {
    use proto::tensor_shape_proto::{Dimension, dimension::Value as D};
    let ty = |elem: i32, dims: Vec<D>| proto::TypeProto {
        value: Some(proto::type_proto::Value::TensorType(
            proto::type_proto::Tensor {
                elem_type: Some(elem),
                shape: Some(proto::TensorShapeProto {
                    dim: dims
                        .into_iter()
                        .map(|d| Dimension {
                            value: Some(d),
                            denotation: None,
                        })
                        .collect(),
                }),
            },
        )),
        denotation: None,
    };
    let vi = |name: &str, t| proto::ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(t),
        ..Default::default()
    };
    let node = |op: &str, i: &[&str], o: &str| proto::NodeProto {
        op_type: Some(op.into()),
        name: Some(format!("{op}_0")),
        input: i.iter().map(|s| s.to_string()).collect(),
        output: vec![o.into()],
        ..Default::default()
    };
    let x = || vec![D::DimValue(2), D::DimParam("N".into())];
    proto::ModelProto {
        ir_version: Some(8),
        opset_import: vec![proto::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(proto::GraphProto {
            name: Some("g".into()),
            node: vec![
                node("Add", &["x", "b"], "s"),
                node("Relu", &["s"], "y"),
                node("Shape", &["x"], "n"),
            ],
            input: vec![vi("x", ty(1, x())), vi("b", ty(1, vec![D::DimValue(1)]))],
            output: vec![vi("y", ty(1, x())), vi("n", ty(7, vec![D::DimValue(2)]))],
            initializer: vec![proto::TensorProto {
                name: Some("b".into()),
                data_type: Some(1),
                dims: vec![1],
                float_data: vec![-0.25],
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

/// Copies `b` into memory from `quorum_alloc`, as the JavaScript side does.
struct Given(*mut u8, usize);
impl Given {
    fn new(b: &[u8]) -> Given {
        let p = quorum_alloc(b.len());
        assert!(!p.is_null() || b.is_empty());
        if !b.is_empty() {
            // SAFETY: `p` holds `b.len()` bytes.
            unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), p, b.len()) };
        }
        Given(p, b.len())
    }
}
impl Drop for Given {
    fn drop(&mut self) {
        // SAFETY: from `quorum_alloc` with this length, given back once.
        unsafe { quorum_dealloc(self.0, self.1) };
    }
}

fn buffer() -> Vec<u8> {
    // SAFETY: the buffer holds `quorum_buffer_len()` bytes until the next call.
    unsafe { std::slice::from_raw_parts(quorum_buffer_ptr(), quorum_buffer_len()) }.to_vec()
}

fn reply(r: i32) -> Result<Vec<u8>, String> {
    if r < 0 {
        Err(String::from_utf8(buffer()).expect("UTF-8 message"))
    } else {
        Ok(buffer()[..r as usize].to_vec())
    }
}

fn session(model: &[u8], opts: &str) -> Result<i32, String> {
    let (m, o) = (Given::new(model), Given::new(opts.as_bytes()));
    // SAFETY: both ranges come from `quorum_alloc` and are filled.
    let h = unsafe { quorum_session_new(m.0, m.1, o.0, o.1) };
    if h < 0 {
        Err(reply(h).unwrap_err())
    } else {
        Ok(h)
    }
}

fn feed(h: i32, name: &str, value: &[u8]) -> Result<(), String> {
    let (n, v) = (Given::new(name.as_bytes()), Given::new(value));
    // SAFETY: as above.
    reply(unsafe { quorum_feed(h, n.0, n.1, v.0, v.1) }).map(drop)
}

/// Seeded values in [-1, 1) (the runtime's input generator), never all zero.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = quorum::inputs::Rng::new(seed);
    (0..n).map(|_| rng.uniform() as f32).collect()
}

fn npy(shape: &[usize], v: Vec<f32>) -> Vec<u8> {
    quorum::npy::write(&quorum::Tensor::from_f32(shape, v).expect("tensor")).expect("npy")
}

/// Splits an output into its header and its file's bytes.
fn output(h: i32, k: i32) -> (serde_json::Value, Vec<u8>) {
    let b = reply(quorum_output(h, k)).expect("output");
    let nl = b.iter().position(|&c| c == b'\n').expect("header line");
    (
        serde_json::from_slice(&b[..nl]).expect("JSON header"),
        b[nl + 1..].to_vec(),
    )
}

#[test]
fn a_session_runs_npy_and_protobuf_inputs_and_hands_back_npy_outputs() {
    let h = session(&model(), r#"{"dims": {"N": 5}}"#).expect("session");
    let io: serde_json::Value =
        serde_json::from_slice(&reply(quorum_session_io(h)).expect("io")).expect("JSON");
    // The initializer `b` is not an input a caller feeds.
    assert_eq!(io["inputs"].as_array().map(Vec::len), Some(1), "{io}");
    assert_eq!(io["inputs"][0]["name"], "x");
    assert_eq!(io["inputs"][0]["shape"], serde_json::json!([2, "N"]));
    assert_eq!(io["outputs"][1]["dtype"], "int64");

    let x = values(10, 7);
    // Twice: once as .npy, once as a TensorProto; the same answer both times.
    let pb = quorum::pb::tensor_proto("x", &quorum::Tensor::from_f32(&[2, 5], x.clone()).unwrap())
        .encode_to_vec();
    for given in [npy(&[2, 5], x.clone()), pb] {
        feed(h, "x", &given).expect("feed");
        assert_eq!(quorum_run(h), 2, "{:?}", String::from_utf8_lossy(&buffer()));
        let (head, bytes) = output(h, 0);
        assert_eq!(head["name"], "y");
        assert_eq!(head["format"], "npy");
        assert_eq!(head["stem"], "y");
        let y = quorum::npy::read(&bytes).expect("npy output");
        assert_eq!(y.shape(), [2, 5]);
        let want: Vec<f64> = x.iter().map(|&v| f64::from((v - 0.25).max(0.0))).collect();
        assert_eq!(y.to_f64_vec().unwrap(), want);
        let (head, bytes) = output(h, 1);
        assert_eq!(head["name"], "n");
        let n = quorum::npy::read(&bytes).expect("npy output");
        assert_eq!(n.to_i64_vec().unwrap(), [2, 5]);
    }
    assert_eq!(quorum_session_free(h), 0);
}

#[test]
fn bad_calls_are_errors_with_messages_and_the_session_survives_them() {
    let h = session(&model(), "").expect("session");
    // A run with no feeds names the missing input; the session runs after it.
    assert_eq!(quorum_run(h), -1);
    let msg = String::from_utf8(buffer()).unwrap();
    assert!(msg.contains('x'), "{msg}");
    let e = feed(h, "nope", &npy(&[1], vec![1.0])).unwrap_err();
    assert!(e.contains("no input 'nope'") && e.contains("\"x\""), "{e}");
    let e = feed(h, "x", b"\x93NUMPY garbage").unwrap_err();
    assert!(e.contains("input 'x'"), "{e}");
    let e = feed(h, "x", b"not a tensor proto \xff\xff\xff").unwrap_err();
    assert!(e.contains("input 'x'"), "{e}");
    // A null pointer with a length, text that is not UTF-8.
    // SAFETY: null is checked before any read; the value range is empty.
    let r = unsafe { quorum_feed(h, std::ptr::null(), 3, std::ptr::null(), 0) };
    assert_eq!(r, -1);
    assert!(
        String::from_utf8(buffer())
            .unwrap()
            .contains("null pointer")
    );
    assert!(feed(h, "\u{0}x", &[]).is_err());
    let bad = Given::new(&[0xff, 0xfe]);
    // SAFETY: from quorum_alloc, filled.
    assert_eq!(unsafe { quorum_feed(h, bad.0, bad.1, bad.0, 0) }, -1);
    assert!(String::from_utf8(buffer()).unwrap().contains("not UTF-8"));
    // Wrong shapes are the runtime's typed error, with the node named.
    feed(h, "x", &npy(&[3, 2, 2], values(12, 1))).unwrap();
    assert_eq!(quorum_run(h), -1);
    assert!(!buffer().is_empty());
    // Output of a failed run, a handle never made, one freed.
    assert_eq!(quorum_output(h, 0), -1);
    feed(h, "x", &npy(&[2, 3], values(6, 2))).unwrap();
    assert_eq!(quorum_run(h), 2);
    assert_eq!(quorum_output(h, 2), -1);
    assert_eq!(quorum_output(h, -1), -1);
    assert_eq!(quorum_run(h + 1000), -1);
    assert!(String::from_utf8(buffer()).unwrap().contains("no session"));
    assert_eq!(quorum_session_free(h), 0);
    assert_eq!(quorum_session_free(h), -1);
    assert_eq!(quorum_run(h), -1);
}

#[test]
fn models_and_options_that_are_wrong_are_refused_by_name() {
    let e = session(b"\x08\x01garbage that is no model", "").unwrap_err();
    assert!(!e.is_empty());
    let e = session(&model(), r#"{"colour": 1}"#).unwrap_err();
    assert!(e.contains("unknown option 'colour'"), "{e}");
    let e = session(&model(), r#"{"optimize": 3}"#).unwrap_err();
    assert!(e.contains("'optimize'"), "{e}");
    let e = session(&model(), "[1]").unwrap_err();
    assert!(e.contains("not a JSON object"), "{e}");
    assert!(quorum_alloc(0).is_null());
}
