//! Random models for the stream fuzzer: DAGs with fan-out and fan-in, branches of different widths
//! (so the pool recycles buffers across branches), chains of same-shape ops (candidates for in-place
//! reuse), repeated shapes, views, and nodes the device declines in the middle (they run on the
//! CPU, so values cross to the host and back). Every accelerated family appears: products (and
//! long sums of 1,024 terms, where a GEMM may split K and keep a workspace), normalisations,
//! reductions, Softmax, a convolution, Gather, Transpose and Concat; weights are shared between
//! nodes (a MatMul weight, a LayerNormalization's scale and bias, a convolution's filter), so
//! nodes on different streams read one weight.
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

/// `node` with attributes: `(name, Ok(int) | Err(ints))`.
fn node_with(
    op: &str,
    inputs: &[&str],
    output: &str,
    attrs: &[(&str, Result<i64, Vec<i64>>)],
) -> proto::NodeProto {
    use proto::attribute_proto::AttributeType;
    let mut n = node(op, inputs, output);
    n.attribute = attrs
        .iter()
        .map(|(name, v)| match v {
            Ok(i) => proto::AttributeProto {
                name: Some(name.to_string()),
                r#type: Some(AttributeType::Int as i32),
                i: Some(*i),
                ..Default::default()
            },
            Err(ints) => proto::AttributeProto {
                name: Some(name.to_string()),
                r#type: Some(AttributeType::Ints as i32),
                ints: ints.clone(),
                ..Default::default()
            },
        })
        .collect();
    n
}

fn int64s(name: &str, dims: Vec<i64>, v: Vec<i64>) -> proto::TensorProto {
    proto::TensorProto {
        name: Some(name.into()),
        dims,
        data_type: Some(7),
        int64_data: v,
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

/// The `v`-th variant of a DAG's inputs: the same names and shapes, each element `x` as
/// `x·(1 + v/4) − v/8` (variant 0 is the inputs themselves), so that runs of one shape key on
/// different variants give different results (a replay that read the inputs before shows).
pub fn variant(inputs: &[(String, Value)], v: u64) -> Vec<(String, Value)> {
    inputs
        .iter()
        .map(|(n, x)| {
            let t = x.as_tensor().expect("a DAG's inputs are tensors");
            let shifted: Vec<f32> = t
                .to_f64_vec()
                .expect("f32 inputs")
                .iter()
                .map(|&e| (e as f32) * (1.0 + v as f32 * 0.25) - v as f32 * 0.125)
                .collect();
            let t = Tensor::from_f32(t.shape(), shifted).expect("the same shape");
            (n.clone(), Value::Tensor(t))
        })
        .collect()
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
    // Weights by shape, so that later nodes may read one an earlier node reads.
    let mut weights: Vec<(Vec<usize>, String)> = Vec::new();
    let mut weight = |rng: &mut Rng, inits: &mut Vec<proto::TensorProto>, shape: &[usize]| {
        let shared: Vec<&String> = weights
            .iter()
            .filter(|(s, _)| s == shape)
            .map(|(_, n)| n)
            .collect();
        if !shared.is_empty() && rng.uniform().abs() < 0.5 {
            return shared[(rng.uniform().abs() * shared.len() as f64) as usize % shared.len()]
                .clone();
        }
        let name = format!("w{}", weights.len());
        inits.push(tensor_proto(&name, &rand(rng, shape)));
        weights.push((shape.to_vec(), name.clone()));
        name
    };
    for i in 0..size {
        let out = format!("v{i}");
        let k = values.len();
        let back = ((rng.uniform().abs() * rng.uniform().abs()) * k as f64) as usize;
        let (a, wa) = values[k - 1 - back.min(k - 1)].clone();
        let choice = (rng.uniform().abs() * 100.0) as usize;
        let mid = |j: usize| format!("{out}_{j}");
        let w = match choice {
            // Change width through a weight (shared half the time): a branch of another size.
            0..=11 => {
                let to = widths[(rng.uniform().abs() * 3.0) as usize % 3];
                let wname = weight(&mut rng, &mut inits, &[wa, to]);
                nodes.push(node("MatMul", &[&a, &wname], &out));
                to
            }
            // Fan-in: combine with another value of the same width, or with a weight row.
            12..=31 => {
                let same: Vec<&(String, usize)> = values.iter().filter(|(_, w)| *w == wa).collect();
                let (b, _) = same[(rng.uniform().abs() * same.len() as f64) as usize % same.len()];
                let op = ["Add", "Mul", "Sub", "Max"][i % 4];
                nodes.push(node(op, &[&a, b], &out));
                wa
            }
            // A view: a reshape that keeps the data.
            32..=35 => {
                let sname = format!("s{i}");
                inits.push(int64s(&sname, vec![2], vec![-1, wa as i64]));
                nodes.push(node("Reshape", &[&a, &sname], &out));
                wa
            }
            // A node the device declines: it runs on the CPU in the middle of the graph.
            36..=38 => {
                nodes.push(node("Shrink", &[&a], &out));
                wa
            }
            // Softmax over each row.
            39..=43 => {
                nodes.push(node_with("Softmax", &[&a], &out, &[("axis", Ok(-1))]));
                wa
            }
            // LayerNormalization with a scale and bias shared by every norm of this width.
            44..=48 => {
                let scale = weight(&mut rng, &mut inits, &[wa]);
                let bias = weight(&mut rng, &mut inits, &[wa]);
                nodes.push(node_with(
                    "LayerNormalization",
                    &[&a, &scale, &bias],
                    &out,
                    &[("axis", Ok(-1))],
                ));
                wa
            }
            // A reduction read back by a broadcast: each row less its mean.
            49..=52 => {
                let m = mid(0);
                nodes.push(node_with(
                    "ReduceMean",
                    &[&a],
                    &m,
                    &[("axes", Err(vec![-1])), ("keepdims", Ok(1))],
                ));
                nodes.push(node("Sub", &[&a, &m], &out));
                wa
            }
            // Gather columns (with repeats) into a branch of another width.
            53..=56 => {
                let to = widths[(rng.uniform().abs() * 3.0) as usize % 3];
                let idx = format!("idx{i}");
                let cols = (0..to)
                    .map(|_| (rng.uniform().abs() * wa as f64) as i64 % wa as i64)
                    .collect();
                inits.push(int64s(&idx, vec![to as i64], cols));
                nodes.push(node_with("Gather", &[&a, &idx], &out, &[("axis", Ok(1))]));
                to
            }
            // A one-channel convolution along each row, its filter shared.
            57..=59 => {
                let (s3, s2) = (format!("s3_{i}"), format!("s2_{i}"));
                inits.push(int64s(&s3, vec![3], vec![-1, 1, wa as i64]));
                inits.push(int64s(&s2, vec![2], vec![-1, wa as i64]));
                let f = weight(&mut rng, &mut inits, &[1, 1, 3]);
                let (r, c) = (mid(0), mid(1));
                nodes.push(node("Reshape", &[&a, &s3], &r));
                nodes.push(node_with(
                    "Conv",
                    &[&r, &f],
                    &c,
                    &[("pads", Err(vec![1, 1]))],
                ));
                nodes.push(node("Reshape", &[&c, &s2], &out));
                wa
            }
            // Transposed, worked on, transposed back.
            60..=62 => {
                let (t, u) = (mid(0), mid(1));
                let perm = [("perm", Err(vec![1, 0]))];
                nodes.push(node_with("Transpose", &[&a], &t, &perm));
                nodes.push(node("Relu", &[&t], &u));
                nodes.push(node_with("Transpose", &[&u], &out, &perm));
                wa
            }
            // A long sum: through 1,024 columns and back (K = 1,024 for few outputs).
            63..=64 => {
                let to = widths[(rng.uniform().abs() * 3.0) as usize % 3];
                let (w1, w2) = (
                    weight(&mut rng, &mut inits, &[wa, 1024]),
                    weight(&mut rng, &mut inits, &[1024, to]),
                );
                let h = mid(0);
                nodes.push(node("MatMul", &[&a, &w1], &h));
                nodes.push(node("MatMul", &[&h, &w2], &out));
                to
            }
            // Concat of two branches side by side (while they stay narrow).
            65..=67 => {
                let (b, wb) = values[(rng.uniform().abs() * k as f64) as usize % k].clone();
                if wa + wb <= 192 {
                    nodes.push(node_with("Concat", &[&a, &b], &out, &[("axis", Ok(1))]));
                    wa + wb
                } else {
                    nodes.push(node("Relu", &[&a], &out));
                    wa
                }
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
