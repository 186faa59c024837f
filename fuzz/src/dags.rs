//! Random models for the stream fuzzer: DAGs with fan-out and fan-in, branches of different widths
//! (so the pool recycles buffers across branches), chains of same-shape ops (candidates for in-place
//! reuse), repeated shapes, views, and nodes the device declines in the middle (they run on the
//! CPU, so values cross to the host and back).
use prost::Message;
use quorum::inputs::Rng;
use quorum::proto;
use quorum::{Tensor, Value};

/// A generated model and inputs for it.
pub struct Dag {
    pub bytes: Vec<u8>,
    pub inputs: Vec<(String, Value)>,
    /// Nodes, for messages.
    pub nodes: usize,
}

fn tensor_proto(name: &str, t: &Tensor) -> proto::TensorProto {
    proto::TensorProto {
        name: Some(name.into()),
        dims: t.shape().iter().map(|&d| d as i64).collect(),
        data_type: Some(t.dtype().onnx()),
        float_data: t
            .to_f64_vec()
            .unwrap_or_default()
            .iter()
            .map(|&x| x as f32)
            .collect(),
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], output: &str) -> proto::NodeProto {
    proto::NodeProto {
        op_type: Some(op.into()),
        name: Some(format!("{op}_{output}")),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        ..Default::default()
    }
}

fn value(name: &str) -> proto::ValueInfoProto {
    proto::ValueInfoProto {
        name: Some(name.into()),
        ..Default::default()
    }
}

fn rand(rng: &mut Rng, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_f32(shape, (0..n).map(|_| rng.uniform() as f32).collect()).unwrap()
}

/// A random DAG of `size` nodes over `rows` rows; widths drawn from a few values so shapes repeat.
pub fn generate(seed: u64, size: usize) -> Dag {
    let mut rng = Rng::new(seed);
    let mut pick = |n: usize| (rng.uniform().abs() * n as f64) as usize % n.max(1);
    let widths = [8usize, 32, 96];
    let rows = [1usize, 3, 16][pick(3)];
    let mut rng = Rng::new(seed ^ 0x9e37);
    // (name, width) of every value so far.
    let mut values: Vec<(String, usize)> = vec![("x".into(), widths[1])];
    let mut nodes = Vec::new();
    let mut inits = Vec::new();
    for i in 0..size {
        let out = format!("v{i}");
        let k = values.len();
        let back = ((rng.uniform().abs() * rng.uniform().abs()) * k as f64) as usize;
        let (a, wa) = values[k - 1 - back.min(k - 1)].clone();
        let choice = (rng.uniform().abs() * 100.0) as usize;
        let w = match choice {
            // Change width through a weight: a branch of another size.
            0..=14 => {
                let to = widths[(rng.uniform().abs() * 3.0) as usize % 3];
                let wname = format!("w{i}");
                inits.push(tensor_proto(&wname, &rand(&mut rng, &[wa, to])));
                nodes.push(node("MatMul", &[&a, &wname], &out));
                to
            }
            // Fan-in: combine with another value of the same width, or with a weight row.
            15..=39 => {
                let same: Vec<&(String, usize)> = values.iter().filter(|(_, w)| *w == wa).collect();
                let (b, _) = same[(rng.uniform().abs() * same.len() as f64) as usize % same.len()];
                let op = ["Add", "Mul", "Sub", "Max"][i % 4];
                nodes.push(node(op, &[&a, b], &out));
                wa
            }
            // A view: a reshape that keeps the data.
            40..=44 => {
                let sname = format!("s{i}");
                inits.push(proto::TensorProto {
                    name: Some(sname.clone()),
                    dims: vec![2],
                    data_type: Some(7),
                    int64_data: vec![-1, wa as i64],
                    ..Default::default()
                });
                nodes.push(node("Reshape", &[&a, &sname], &out));
                wa
            }
            // A node the device declines: it runs on the CPU in the middle of the graph.
            45..=49 => {
                let axis = format!("axis{i}");
                inits.push(proto::TensorProto {
                    name: Some(axis.clone()),
                    dims: vec![],
                    data_type: Some(7),
                    int64_data: vec![1],
                    ..Default::default()
                });
                nodes.push(node("CumSum", &[&a, &axis], &out));
                wa
            }
            // Same-shape chains.
            _ => {
                let op = ["Relu", "Tanh", "Sigmoid", "Abs", "Neg", "Exp"][i % 6];
                let src = if op == "Exp" {
                    // Keep Exp's argument small: squash first.
                    let t = format!("t{i}");
                    nodes.push(node("Tanh", &[&a], &t));
                    t
                } else {
                    a.clone()
                };
                nodes.push(node(op, &[&src], &out));
                wa
            }
        };
        values.push((out, w));
    }
    // Outputs: the last value and two earlier ones (values read after their branch ended).
    let n = values.len();
    let mut outputs: Vec<String> = vec![values[n - 1].0.clone()];
    for j in [n / 2, n / 3] {
        if j > 0 && !outputs.contains(&values[j].0) {
            outputs.push(values[j].0.clone());
        }
    }
    let model = proto::ModelProto {
        ir_version: Some(8),
        opset_import: vec![proto::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(proto::GraphProto {
            name: Some("dag".into()),
            node: nodes,
            input: vec![value("x")],
            output: outputs.iter().map(|o| value(o)).collect(),
            initializer: inits,
            ..Default::default()
        }),
        ..Default::default()
    };
    let x = rand(&mut rng, &[rows, widths[1]]);
    Dag {
        bytes: model.encode_to_vec(),
        inputs: vec![("x".into(), Value::Tensor(x))],
        nodes: size,
    }
}
