//! Hostile models and inputs: every case here is an error value (or a computed result), never a panic,
//! a stack overflow, a hang or an attempt to allocate what the data asks for.
mod common;

use common::*;
use quorum::proto;
use quorum::{Error, Session, SessionOptions, Tensor, Value};

fn i64_tensor(name: &str, dims: &[i64], data: &[i64]) -> proto::TensorProto {
    proto::TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(7),
        int64_data: data.to_vec(),
        ..Default::default()
    }
}

fn load(m: &proto::ModelProto) -> quorum::Result<Session> {
    Session::from_bytes(&bytes(m), SessionOptions::default())
}

fn run_f32(s: &Session, name: &str, dims: &[usize], data: Vec<f32>) -> quorum::Result<Vec<Value>> {
    let x = Tensor::from_f32(dims, data).unwrap();
    Ok(s.run(vec![(name.into(), Value::Tensor(x))])?
        .into_iter()
        .map(|(_, v)| v)
        .collect())
}

/// Runs a one-node model whose size-giving input is the initializer `shape`; the error must come
/// before allocation (the test would abort on an 8 TiB allocation otherwise) and name the node.
fn huge_output(op: &str, inputs: &[&str], inits: Vec<proto::TensorProto>) {
    let m = model(
        vec![node(op, inputs, &["y"])],
        vec![value_info("x", tensor_type(1, &[1]))],
        vec![value_info("y", tensor_type(1, &[]))],
        inits,
        13,
    );
    let s = load(&m).unwrap();
    let e = run_f32(&s, "x", &[1], vec![1.0]).unwrap_err().to_string();
    assert!(e.contains(&format!("{op}_node")), "{op}: {e}");
    assert!(e.contains("bytes"), "{op}: {e}");
}

#[test]
fn inferred_huge_intermediates_are_refused_before_allocation() {
    let big = 1i64 << 40;
    let cos = model(
        vec![node("ConstantOfShape", &["shape"], &["y"])],
        vec![],
        vec![value_info("y", tensor_type(1, &[]))],
        vec![i64_tensor("shape", &[2], &[big, 1])],
        13,
    );
    let e = load(&cos).unwrap().run(vec![]).unwrap_err().to_string();
    assert!(
        e.contains("ConstantOfShape_node") && e.contains("bytes"),
        "{e}"
    );
    huge_output(
        "Expand",
        &["x", "shape"],
        vec![i64_tensor("shape", &[1], &[big])],
    );
    huge_output(
        "Tile",
        &["x", "repeats"],
        vec![i64_tensor("repeats", &[1], &[big])],
    );

    for (limit, delta) in [(big, 1i64), (i64::MAX, 1), (i64::MIN, -1)] {
        let range = model(
            vec![node("Range", &["start", "limit", "delta"], &["y"])],
            vec![],
            vec![value_info("y", tensor_type(7, &[]))],
            vec![
                i64_tensor("start", &[], &[0]),
                i64_tensor("limit", &[], &[limit]),
                i64_tensor("delta", &[], &[delta]),
            ],
            13,
        );
        let e = load(&range).unwrap().run(vec![]).unwrap_err().to_string();
        assert!(e.contains("Range_node"), "{e}");
    }
    let frange = model(
        vec![node("Range", &["start", "limit", "delta"], &["y"])],
        vec![],
        vec![value_info("y", tensor_type(1, &[]))],
        vec![
            f32_tensor("start", &[], &[0.0]),
            f32_tensor("limit", &[], &[1.0]),
            f32_tensor("delta", &[], &[1e-30]),
        ],
        13,
    );
    let e = load(&frange).unwrap().run(vec![]).unwrap_err().to_string();
    assert!(e.contains("Range_node"), "{e}");
}

/// Appends a length-delimited protobuf field.
fn field(out: &mut Vec<u8>, number: u64, payload: &[u8]) {
    varint(out, number << 3 | 2);
    varint(out, payload.len() as u64);
    out.extend_from_slice(payload);
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A model whose graph is `levels` If nodes, each holding the next in its `then_branch`, the innermost
/// branch yielding the outer input `x`. Built as bytes, level by level: encoding (or dropping) a nested
/// `ModelProto` of thousands of levels would itself recurse that deep.
fn nested_ifs(levels: usize) -> Vec<u8> {
    let value_info = |name: &str| {
        let mut v = Vec::new();
        field(&mut v, 1, name.as_bytes());
        v
    };
    let graph_attr = |name: &str, graph: &[u8]| {
        let mut a = Vec::new();
        field(&mut a, 1, name.as_bytes());
        varint(&mut a, 20 << 3);
        varint(&mut a, 5);
        field(&mut a, 6, graph);
        a
    };
    let mut else_graph = Vec::new();
    field(&mut else_graph, 12, &value_info("x"));
    let mut graph = else_graph.clone();
    for level in 0..levels {
        let out = format!("y_{level}");
        let mut node = Vec::new();
        field(&mut node, 1, b"cond");
        field(&mut node, 2, out.as_bytes());
        field(&mut node, 3, format!("if_{level}").as_bytes());
        field(&mut node, 4, b"If");
        field(&mut node, 5, &graph_attr("then_branch", &graph));
        field(&mut node, 5, &graph_attr("else_branch", &else_graph));
        graph = Vec::new();
        field(&mut graph, 1, &node);
        field(&mut graph, 12, &value_info(&out));
    }
    field(&mut graph, 11, &value_info("cond"));
    field(&mut graph, 11, &value_info("x"));
    let mut m = Vec::new();
    varint(&mut m, 1 << 3);
    varint(&mut m, 8);
    let mut opset = Vec::new();
    varint(&mut opset, 2 << 3);
    varint(&mut opset, 13);
    field(&mut m, 8, &opset);
    field(&mut m, 7, &graph);
    m
}

#[test]
fn deeply_nested_subgraphs_are_an_error_not_a_stack_overflow() {
    // Nesting up to the decoder's depth limit loads and runs; the inner branches see the outermost `x`.
    let s = Session::from_bytes(&nested_ifs(32), SessionOptions::default()).unwrap();
    let cond = Tensor::Bool(ndarray::ArrayD::from_elem(ndarray::IxDyn(&[]), true));
    let x = Tensor::from_f32(&[2], vec![1.5, -2.0]).unwrap();
    let out = s
        .run(vec![
            ("cond".into(), Value::Tensor(cond)),
            ("x".into(), Value::Tensor(x.clone())),
        ])
        .unwrap();
    assert_eq!(out[0].1, Value::Tensor(x));
    // Thousands of levels, loaded on a thread with a small stack: the runtime must not need more.
    let deep = nested_ifs(5000);
    let result = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || {
            Session::from_bytes(&deep, SessionOptions::default())
                .err()
                .map(|e| e.to_string())
        })
        .unwrap()
        .join()
        .expect("loading must not overflow the stack");
    let e = result.expect("5000 nested subgraphs must be refused");
    assert!(
        e.contains("malformed model") && e.contains("recursion"),
        "{e}"
    );
}

#[test]
fn a_loop_that_never_ends_stops_at_the_iteration_limit() {
    let body = proto::GraphProto {
        name: Some("body".into()),
        node: vec![
            node("Identity", &["cond_in"], &["cond_out"]),
            node("Identity", &["v_in"], &["v_out"]),
        ],
        input: vec![
            value_info("i", tensor_type(7, &[])),
            value_info("cond_in", tensor_type(9, &[])),
            value_info("v_in", tensor_type(1, &[1])),
        ],
        output: vec![
            value_info("cond_out", tensor_type(9, &[])),
            value_info("v_out", tensor_type(1, &[1])),
        ],
        ..Default::default()
    };
    let mut lp = node("Loop", &["", "cond", "x"], &["y"]);
    lp.attribute.push(proto::AttributeProto {
        name: Some("body".into()),
        r#type: Some(proto::attribute_proto::AttributeType::Graph as i32),
        g: Some(body),
        ..Default::default()
    });
    let cond = proto::TensorProto {
        name: Some("cond".into()),
        data_type: Some(9),
        raw_data: Some(vec![1]),
        ..Default::default()
    };
    let m = model(
        vec![lp],
        vec![value_info("x", tensor_type(1, &[1]))],
        vec![value_info("y", tensor_type(1, &[1]))],
        vec![cond],
        13,
    );
    let options = SessionOptions {
        max_loop_iterations: 500,
        ..SessionOptions::default()
    };
    let s = Session::from_bytes(&bytes(&m), options).unwrap();
    let e = run_f32(&s, "x", &[1], vec![3.0]).unwrap_err().to_string();
    assert!(
        e.contains("Loop_node") && e.contains("500") && e.contains("max_loop_iterations"),
        "{e}"
    );
}

#[test]
fn load_errors_name_what_is_wrong() {
    let unary = |op: &str, domain: &str, opset: i64| {
        let mut n = node(op, &["x"], &["y"]);
        n.domain = Some(domain.into());
        model(
            vec![n],
            vec![value_info("x", tensor_type(1, &[1]))],
            vec![value_info("y", tensor_type(1, &[1]))],
            vec![],
            opset,
        )
    };
    match load(&unary("Relu", "no.such.domain", 13)) {
        Err(e @ Error::Unsupported { .. }) => {
            let e = e.to_string();
            assert!(
                e.contains("Relu_node") && e.contains("no.such.domain"),
                "{e}"
            );
        }
        other => panic!("expected Unsupported, got {:?}", other.err()),
    }
    let no_graph = proto::ModelProto {
        graph: None,
        ..unary("Relu", "", 13)
    };
    assert!(matches!(load(&no_graph), Err(Error::InvalidModel(m)) if m.contains("no graph")));
    // A field of the wrong wire type: `graph` (field 7) as a varint.
    let wrong_wire = [0x08, 0x08, 0x38, 0x01];
    assert!(matches!(
        Session::from_bytes(&wrong_wire, SessionOptions::default()),
        Err(Error::Decode(_))
    ));
    let dup = model(
        vec![node("Relu", &["x"], &["y"]), node("Neg", &["x"], &["y"])],
        vec![value_info("x", tensor_type(1, &[1]))],
        vec![value_info("y", tensor_type(1, &[1]))],
        vec![],
        13,
    );
    match load(&dup) {
        Err(Error::InvalidModel(m)) => assert!(m.contains("'y'"), "{m}"),
        other => panic!("expected InvalidModel, got {:?}", other.err()),
    }
}

#[test]
fn attributes_of_the_wrong_type_name_node_and_attribute() {
    let mut t = node("Transpose", &["x"], &["y"]);
    t.attribute.push(proto::AttributeProto {
        name: Some("perm".into()),
        r#type: Some(proto::attribute_proto::AttributeType::Float as i32),
        f: Some(1.0),
        ..Default::default()
    });
    let m = model(
        vec![t],
        vec![value_info("x", tensor_type(1, &[1, 2]))],
        vec![value_info("y", tensor_type(1, &[2, 1]))],
        vec![],
        13,
    );
    let e = match load(&m) {
        Err(e) => e.to_string(),
        Ok(s) => run_f32(&s, "x", &[1, 2], vec![1.0, 2.0])
            .unwrap_err()
            .to_string(),
    };
    assert!(e.contains("Transpose_node") && e.contains("perm"), "{e}");
}

#[test]
fn a_symbolic_dim_bound_to_two_values_is_an_input_error() {
    let m = model(
        vec![node("Add", &["a", "b"], &["y"])],
        vec![
            value_info("a", symbolic_type(1, &["n"])),
            value_info("b", symbolic_type(1, &["n"])),
        ],
        vec![value_info("y", symbolic_type(1, &["n"]))],
        vec![],
        13,
    );
    let s = load(&m).unwrap();
    let t = |n: usize| Value::Tensor(Tensor::from_f32(&[n], vec![1.0; n]).unwrap());
    let e = s
        .run(vec![("a".into(), t(2)), ("b".into(), t(3))])
        .unwrap_err();
    assert!(
        matches!(&e, Error::Input { msg, .. } if msg.contains("'n'")),
        "{e}"
    );
}

/// Regression (found by `fuzz/tests/mutate_models.rs`): ConcatFromSequence over tensors of different
/// ranks panicked inside ndarray.
#[test]
fn concat_from_sequence_of_mixed_ranks_is_an_error() {
    let mut concat = node("ConcatFromSequence", &["seq"], &["y"]);
    concat.attribute.push(proto::AttributeProto {
        name: Some("axis".into()),
        r#type: Some(proto::attribute_proto::AttributeType::Int as i32),
        i: Some(0),
        ..Default::default()
    });
    let m = model(
        vec![node("SequenceConstruct", &["a", "b"], &["seq"]), concat],
        vec![
            value_info("a", tensor_type(1, &[2])),
            value_info("b", tensor_type(1, &[])),
        ],
        vec![value_info("y", tensor_type(1, &[]))],
        vec![],
        13,
    );
    let s = load(&m).unwrap();
    let e = s
        .run(vec![
            (
                "a".into(),
                Value::Tensor(Tensor::from_f32(&[2], vec![1.0, 2.0]).unwrap()),
            ),
            (
                "b".into(),
                Value::Tensor(Tensor::from_f32(&[], vec![3.0]).unwrap()),
            ),
        ])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("ConcatFromSequence_node") && e.contains("concatenate"),
        "{e}"
    );
}

#[test]
fn generated_inputs_respect_the_size_limit() {
    let m = model(
        vec![node("Relu", &["x"], &["y"])],
        vec![value_info("x", tensor_type(1, &[1 << 20, 1 << 20]))],
        vec![value_info("y", tensor_type(1, &[1 << 20, 1 << 20]))],
        vec![],
        13,
    );
    let s = load(&m).unwrap();
    let e = quorum::inputs::generate_within(&s.model().graph, &[], &Default::default(), 1, 1 << 30)
        .unwrap_err();
    assert!(matches!(e, Error::TooLarge { .. }), "{e}");
}

/// Regression (found by `fuzz/tests/mutate_models.rs`): Split, TopK, Compress and Unique with an axis
/// indexed the shape of a scalar input and panicked.
#[test]
fn axis_ops_on_scalars_are_errors() {
    for (op, extra) in [
        ("Split", vec![]),
        ("TopK", vec!["k"]),
        ("Compress", vec!["cond"]),
        ("Unique", vec![]),
    ] {
        let mut inputs = vec!["x"];
        inputs.extend(extra);
        let mut n = node(op, &inputs, &["y"]);
        n.attribute.push(proto::AttributeProto {
            name: Some("axis".into()),
            r#type: Some(proto::attribute_proto::AttributeType::Int as i32),
            i: Some(0),
            ..Default::default()
        });
        let m = model(
            vec![n],
            vec![value_info("x", tensor_type(1, &[]))],
            vec![value_info("y", tensor_type(1, &[]))],
            vec![
                i64_tensor("k", &[1], &[1]),
                proto::TensorProto {
                    name: Some("cond".into()),
                    dims: vec![1],
                    data_type: Some(9),
                    raw_data: Some(vec![1]),
                    ..Default::default()
                },
            ],
            13,
        );
        let s = load(&m).unwrap();
        let e = run_f32(&s, "x", &[], vec![2.0]).unwrap_err().to_string();
        assert!(
            e.contains(&format!("{op}_node")) && e.contains("scalar"),
            "{op}: {e}"
        );
    }
}

/// Regression (found by `fuzz/tests/mutate_models.rs`): Split with `num_outputs` = 2^40 allocated a
/// list of 2^40 sizes (and aborted); split sizes whose sum overflows panicked.
#[test]
fn split_counts_and_sizes_from_data_are_checked() {
    let split = |attr: proto::AttributeProto, inputs: &[&str], inits: Vec<proto::TensorProto>| {
        let mut n = node("Split", inputs, &["a", "b"]);
        n.attribute.push(attr);
        model(
            vec![n],
            vec![value_info("x", tensor_type(1, &[4]))],
            vec![value_info("a", tensor_type(1, &[]))],
            inits,
            18,
        )
    };
    let int_attr = |name: &str, v: i64| proto::AttributeProto {
        name: Some(name.into()),
        r#type: Some(proto::attribute_proto::AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    };
    let m = split(int_attr("num_outputs", 1 << 40), &["x"], vec![]);
    let e = run_f32(&load(&m).unwrap(), "x", &[4], vec![1.0; 4]).unwrap_err();
    assert!(e.to_string().contains("Split_node"), "{e}");
    let m = split(
        int_attr("axis", 0),
        &["x", "sizes"],
        vec![i64_tensor("sizes", &[2], &[i64::MAX, 2])],
    );
    let e = run_f32(&load(&m).unwrap(), "x", &[4], vec![1.0; 4]).unwrap_err();
    assert!(e.to_string().contains("do not add up"), "{e}");
}

/// Regression (found by `fuzz/tests/mutate_models.rs`): EyeLike with `k` = i64::MAX overflowed.
#[test]
fn eye_like_with_an_extreme_diagonal_is_all_zeros() {
    let mut n = node("EyeLike", &["x"], &["y"]);
    n.attribute.push(proto::AttributeProto {
        name: Some("k".into()),
        r#type: Some(proto::attribute_proto::AttributeType::Int as i32),
        i: Some(i64::MAX),
        ..Default::default()
    });
    let m = model(
        vec![n],
        vec![value_info("x", tensor_type(1, &[2, 2]))],
        vec![value_info("y", tensor_type(1, &[2, 2]))],
        vec![],
        13,
    );
    let out = run_f32(&load(&m).unwrap(), "x", &[2, 2], vec![1.0; 4]).unwrap();
    assert_eq!(
        out[0],
        Value::Tensor(Tensor::from_f32(&[2, 2], vec![0.0; 4]).unwrap())
    );
}

/// Regression (found by `fuzz/tests/mutate_models.rs`): Conv pads of i64::MIN overflowed `abs`.
#[test]
fn conv_pads_of_i64_min_are_an_error() {
    let mut n = node("Conv", &["x", "w"], &["y"]);
    n.attribute.push(proto::AttributeProto {
        name: Some("pads".into()),
        r#type: Some(proto::attribute_proto::AttributeType::Ints as i32),
        ints: vec![i64::MIN, 0],
        ..Default::default()
    });
    let m = model(
        vec![n],
        vec![value_info("x", tensor_type(1, &[1, 1, 4]))],
        vec![value_info("y", tensor_type(1, &[]))],
        vec![f32_tensor("w", &[1, 1, 2], &[1.0, 1.0])],
        13,
    );
    let e = run_f32(&load(&m).unwrap(), "x", &[1, 1, 4], vec![1.0; 4]).unwrap_err();
    assert!(
        e.to_string().contains("Conv_node") && e.to_string().contains("pads"),
        "{e}"
    );
}

/// Regression (found by `fuzz/tests/mutate_models.rs`): LSTM with `hidden_size` = 2^62 overflowed
/// computing gate sizes.
#[test]
fn lstm_hidden_size_must_agree_with_r() {
    let mut n = node("LSTM", &["x", "w", "r"], &["y"]);
    n.attribute.push(proto::AttributeProto {
        name: Some("hidden_size".into()),
        r#type: Some(proto::attribute_proto::AttributeType::Int as i32),
        i: Some(1 << 62),
        ..Default::default()
    });
    let m = model(
        vec![n],
        vec![value_info("x", tensor_type(1, &[1, 1, 1]))],
        vec![value_info("y", tensor_type(1, &[]))],
        vec![
            f32_tensor("w", &[1, 4, 1], &[0.5; 4]),
            f32_tensor("r", &[1, 4, 1], &[0.5; 4]),
        ],
        14,
    );
    let e = run_f32(&load(&m).unwrap(), "x", &[1, 1, 1], vec![1.0]).unwrap_err();
    assert!(
        e.to_string().contains("LSTM_node") && e.to_string().contains("hidden_size"),
        "{e}"
    );
}

/// Regression (found by `fuzz/tests/mutate_models.rs`): Concat whose first input is a scalar and whose
/// second is 1-D indexed the scalar's shape and panicked.
#[test]
fn concat_of_a_scalar_and_a_vector_is_an_error() {
    let mut n = node("Concat", &["a", "b"], &["y"]);
    n.attribute.push(proto::AttributeProto {
        name: Some("axis".into()),
        r#type: Some(proto::attribute_proto::AttributeType::Int as i32),
        i: Some(0),
        ..Default::default()
    });
    let m = model(
        vec![n],
        vec![value_info("a", tensor_type(1, &[]))],
        vec![value_info("y", tensor_type(1, &[]))],
        vec![f32_tensor("b", &[2], &[1.0, 2.0])],
        13,
    );
    let e = run_f32(&load(&m).unwrap(), "a", &[], vec![1.0]).unwrap_err();
    assert!(e.to_string().contains("incompatible inputs"), "{e}");
}

/// Regression (found by `fuzz/tests/mutate_models.rs`): ConstantOfShape to an empty shape whose other
/// dims multiply past isize::MAX panicked inside ndarray.
#[test]
fn empty_outputs_with_unaddressable_shapes_are_an_error() {
    let m = model(
        vec![node("ConstantOfShape", &["shape"], &["y"])],
        vec![],
        vec![value_info("y", tensor_type(1, &[]))],
        vec![i64_tensor("shape", &[3], &[0, 1 << 40, 1 << 40])],
        13,
    );
    let e = load(&m).unwrap().run(vec![]).unwrap_err().to_string();
    assert!(
        e.contains("ConstantOfShape_node") && e.contains("too large"),
        "{e}"
    );
}

/// Regression (found by `fuzz/tests/mutate_models.rs`): DepthToSpace with `blocksize` = 2^40
/// overflowed computing blocksize².
#[test]
fn depth_to_space_with_a_huge_blocksize_is_an_error() {
    let mut n = node("DepthToSpace", &["x"], &["y"]);
    n.attribute.push(proto::AttributeProto {
        name: Some("blocksize".into()),
        r#type: Some(proto::attribute_proto::AttributeType::Int as i32),
        i: Some(1 << 40),
        ..Default::default()
    });
    let m = model(
        vec![n],
        vec![value_info("x", tensor_type(1, &[1, 4, 1, 1]))],
        vec![value_info("y", tensor_type(1, &[]))],
        vec![],
        13,
    );
    let e = run_f32(&load(&m).unwrap(), "x", &[1, 4, 1, 1], vec![1.0; 4]).unwrap_err();
    assert!(e.to_string().contains("blocksize"), "{e}");
}

/// Regression (found by `fuzz/tests/mutate_models.rs`): TfIdfVectorizer sized a buffer (and its loops)
/// from `max_gram_length` and `max_skip_count` as given, so i64::MAX overflowed; an ngram index of
/// i64::MAX overflowed sizing the output.
#[test]
fn tfidf_with_extreme_gram_attributes_counts_what_the_row_holds() {
    let int_attr = |name: &str, v: i64| proto::AttributeProto {
        name: Some(name.into()),
        r#type: Some(proto::attribute_proto::AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    };
    let ints_attr = |name: &str, v: &[i64]| proto::AttributeProto {
        name: Some(name.into()),
        r#type: Some(proto::attribute_proto::AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    };
    let tfidf = |indexes: &[i64]| {
        let mut n = node("TfIdfVectorizer", &["x"], &["y"]);
        n.attribute = vec![
            int_attr("min_gram_length", 1),
            int_attr("max_gram_length", i64::MAX),
            int_attr("max_skip_count", i64::MAX),
            proto::AttributeProto {
                name: Some("mode".into()),
                r#type: Some(proto::attribute_proto::AttributeType::String as i32),
                s: Some(b"TF".to_vec()),
                ..Default::default()
            },
            ints_attr("ngram_counts", &[0]),
            ints_attr("ngram_indexes", indexes),
            ints_attr("pool_int64s", &[1]),
        ];
        let m = model(
            vec![n],
            vec![value_info("x", tensor_type(7, &[4]))],
            vec![value_info("y", tensor_type(1, &[]))],
            vec![],
            13,
        );
        let x = Tensor::from_i64(&[4], vec![1, 2, 1, 1]).unwrap();
        load(&m).unwrap().run(vec![("x".into(), Value::Tensor(x))])
    };
    let out = tfidf(&[0]).unwrap();
    assert_eq!(
        out[0].1,
        Value::Tensor(Tensor::from_f32(&[1], vec![3.0]).unwrap())
    );
    let e = tfidf(&[i64::MAX]).unwrap_err();
    assert!(e.to_string().contains("TfIdfVectorizer_node"), "{e}");
}

/// Regression (found by the cargo-fuzz target `load_and_run`): Reshape to dims whose product overflows
/// usize panicked in `Tensor::reshape`.
#[test]
fn reshape_to_an_overflowing_shape_is_an_error() {
    let m = model(
        vec![node("Reshape", &["x", "shape"], &["y"])],
        vec![value_info("x", tensor_type(1, &[2]))],
        vec![value_info("y", tensor_type(1, &[]))],
        vec![i64_tensor("shape", &[3], &[1 << 40, 1 << 40, 1 << 40])],
        13,
    );
    let e = run_f32(&load(&m).unwrap(), "x", &[2], vec![1.0, 2.0]).unwrap_err();
    assert!(
        e.to_string().contains("Reshape_node") && e.to_string().contains("cannot reshape"),
        "{e}"
    );
}

/// Load errors from a file name the file, whatever their kind: a size limit and an unknown op.
#[test]
fn load_errors_name_the_file() {
    let dir = std::env::temp_dir().join(format!("quorum-robust-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let huge = proto::TensorProto {
        name: Some("w".into()),
        dims: vec![1 << 30, 1 << 30],
        data_type: Some(1),
        ..Default::default()
    };
    let too_large = model(
        vec![node("Identity", &["w"], &["y"])],
        vec![],
        vec![value_info("y", tensor_type(1, &[]))],
        vec![huge],
        13,
    );
    let p = dir.join("too_large.onnx");
    std::fs::write(&p, bytes(&too_large)).unwrap();
    let Err(e) = Session::from_file(&p, SessionOptions::default()) else {
        panic!("loaded")
    };
    assert!(matches!(e, Error::TooLarge { .. }), "{e}");
    assert!(e.to_string().contains("too_large.onnx"), "{e}");

    let unknown = model(
        vec![node("NoSuchOp", &["x"], &["y"])],
        vec![value_info("x", tensor_type(1, &[1]))],
        vec![value_info("y", tensor_type(1, &[]))],
        vec![],
        13,
    );
    let p = dir.join("unknown_op.onnx");
    std::fs::write(&p, bytes(&unknown)).unwrap();
    let Err(e) = Session::from_file(&p, SessionOptions::default()) else {
        panic!("loaded")
    };
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("unknown_op.onnx") && msg.contains("NoSuchOp"),
        "{msg}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
