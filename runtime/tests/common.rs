//! Builders for small models in tests, written against the generated protobuf types.
#![allow(dead_code)]
use prost::Message;
use quorum::proto::{self, tensor_proto::DataLocation};

pub fn tensor_type(elem: i32, dims: &[i64]) -> proto::TypeProto {
    use proto::tensor_shape_proto::{Dimension, dimension::Value};
    proto::TypeProto {
        value: Some(proto::type_proto::Value::TensorType(
            proto::type_proto::Tensor {
                elem_type: Some(elem),
                shape: Some(proto::TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| Dimension {
                            value: Some(Value::DimValue(d)),
                            denotation: None,
                        })
                        .collect(),
                }),
            },
        )),
        denotation: None,
    }
}

pub fn symbolic_type(elem: i32, dims: &[&str]) -> proto::TypeProto {
    use proto::tensor_shape_proto::{Dimension, dimension::Value};
    proto::TypeProto {
        value: Some(proto::type_proto::Value::TensorType(
            proto::type_proto::Tensor {
                elem_type: Some(elem),
                shape: Some(proto::TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|d| Dimension {
                            value: Some(Value::DimParam(d.to_string())),
                            denotation: None,
                        })
                        .collect(),
                }),
            },
        )),
        denotation: None,
    }
}

pub fn value_info(name: &str, ty: proto::TypeProto) -> proto::ValueInfoProto {
    proto::ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(ty),
        ..Default::default()
    }
}

pub fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> proto::NodeProto {
    proto::NodeProto {
        op_type: Some(op.into()),
        name: Some(format!("{op}_node")),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

pub fn f32_tensor(name: &str, dims: &[i64], data: &[f32]) -> proto::TensorProto {
    proto::TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(1),
        raw_data: Some(data.iter().flat_map(|v| v.to_le_bytes()).collect()),
        ..Default::default()
    }
}

pub fn external_tensor(
    name: &str,
    dims: &[i64],
    location: &str,
    offset: u64,
    length: u64,
) -> proto::TensorProto {
    let kv = |k: &str, v: String| proto::StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v),
    };
    proto::TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(1),
        data_location: Some(DataLocation::External as i32),
        external_data: vec![
            kv("location", location.into()),
            kv("offset", offset.to_string()),
            kv("length", length.to_string()),
        ],
        ..Default::default()
    }
}

pub fn model(
    nodes: Vec<proto::NodeProto>,
    inputs: Vec<proto::ValueInfoProto>,
    outputs: Vec<proto::ValueInfoProto>,
    inits: Vec<proto::TensorProto>,
    opset: i64,
) -> proto::ModelProto {
    proto::ModelProto {
        ir_version: Some(8),
        opset_import: vec![proto::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(opset),
        }],
        graph: Some(proto::GraphProto {
            name: Some("g".into()),
            node: nodes,
            input: inputs,
            output: outputs,
            initializer: inits,
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn bytes(m: &proto::ModelProto) -> Vec<u8> {
    m.encode_to_vec()
}
