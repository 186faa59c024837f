//! Small ONNX models written out for the system tests: nodes, initializers, inputs and outputs.
use prost::Message;
use quorum::Tensor;
use quorum::proto;

pub fn tensor_proto(name: &str, t: &Tensor) -> proto::TensorProto {
    proto::TensorProto {
        name: Some(name.into()),
        dims: t.shape().iter().map(|&d| d as i64).collect(),
        data_type: Some(t.dtype().onnx()),
        raw_data: Some(crate::harness::raw_bytes(t)),
        ..Default::default()
    }
}

/// A node named after its op and output.
pub fn node(op: &str, i: &[&str], o: &str) -> proto::NodeProto {
    proto::NodeProto {
        op_type: Some(op.into()),
        name: Some(format!("{op}_{o}")),
        input: i.iter().map(|s| s.to_string()).collect(),
        output: vec![o.into()],
        ..Default::default()
    }
}

/// `n` with the integer attribute `name = v`.
pub fn int_attr(mut n: proto::NodeProto, name: &str, v: i64) -> proto::NodeProto {
    n.attribute.push(proto::AttributeProto {
        name: Some(name.into()),
        i: Some(v),
        r#type: Some(proto::attribute_proto::AttributeType::Int as i32),
        ..Default::default()
    });
    n
}

pub fn value(name: &str) -> proto::ValueInfoProto {
    proto::ValueInfoProto {
        name: Some(name.into()),
        ..Default::default()
    }
}

/// An opset-17 model of `nodes` with these graph inputs, outputs and initializers.
pub fn model(
    nodes: Vec<proto::NodeProto>,
    inputs: &[&str],
    outputs: &[&str],
    inits: Vec<proto::TensorProto>,
) -> Vec<u8> {
    let m = proto::ModelProto {
        ir_version: Some(8),
        opset_import: vec![proto::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(proto::GraphProto {
            name: Some("system".into()),
            node: nodes,
            input: inputs.iter().map(|n| value(n)).collect(),
            output: outputs.iter().map(|n| value(n)).collect(),
            initializer: inits,
            ..Default::default()
        }),
        ..Default::default()
    };
    m.encode_to_vec()
}
