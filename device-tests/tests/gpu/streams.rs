//! Several streams: every result bit-identical to one stream — on branchy graphs of mixed sizes (so
//! buffers are recycled across branches), on the 64³ all-ones MatMul whose operands come from other
//! streams, on the light models, from many threads at once — with poisoned buffers throughout.
use std::path::PathBuf;
use std::sync::Arc;

use quorum::inputs::Rng;
use quorum::{Provider, Session, SessionOptions, Tensor, Value};

use crate::harness::{POISON_NAN, on_cpu, rand_f32};
use crate::models::{model, node, tensor_proto};

fn options(streams: usize) -> SessionOptions {
    let providers = if on_cpu() {
        vec![Provider::Cpu]
    } else {
        vec![Provider::Cuda, Provider::Cpu]
    };
    SessionOptions {
        providers,
        streams,
        poison_device_buffers: Some(POISON_NAN),
        ..Default::default()
    }
}

fn run(s: &Session, inputs: &[(String, Value)]) -> Vec<Value> {
    s.run(inputs.to_vec())
        .unwrap()
        .into_iter()
        .map(|(_, v)| v)
        .collect()
}

/// Bits of every output, so that NaNs compare too.
fn bits(vs: &[Value]) -> Vec<Vec<u64>> {
    vs.iter()
        .map(|v| {
            v.as_tensor()
                .unwrap()
                .to_f64_vec()
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect()
        })
        .collect()
}

/// A random branchy graph over [rows, cols] tensors (any rows): each node reads one or two earlier values
/// (fan-out and fan-in), ops of several costs (a MatMul with a [cols, cols] weight among them);
/// three outputs.
fn branchy_model(seed: u64, cols: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut nodes = Vec::new();
    let mut values = vec!["x".to_string()];
    let inits = vec![
        tensor_proto("w", &rand_f32(seed + 1, &[cols, cols])),
        tensor_proto("b", &rand_f32(seed + 2, &[cols])),
    ];
    for i in 0..40 {
        let pick = |rng: &mut Rng| {
            let k = values.len();
            let back = (rng.uniform().abs() * rng.uniform().abs() * k as f64) as usize;
            values[k - 1 - back.min(k - 1)].clone()
        };
        let out = format!("v{i}");
        let a = pick(&mut rng);
        let n = match (rng.uniform().abs() * 6.0) as usize {
            0 => node("Relu", &[&a], &out),
            1 => node("Tanh", &[&a], &out),
            2 => node("MatMul", &[&a, "w"], &out),
            3 => node("Add", &[&a, "b"], &out),
            4 => {
                let b = pick(&mut rng);
                node("Mul", &[&a, &b], &out)
            }
            _ => {
                let b = pick(&mut rng);
                node("Add", &[&a, &b], &out)
            }
        };
        nodes.push(n);
        values.push(out);
    }
    model(nodes, &["x"], &["v39", "v20", "v31"], inits)
}

#[test]
fn branchy_graphs_are_bit_identical_on_several_streams() {
    for seed in [11, 12, 13, 14] {
        for (rows, cols) in [(8, 16), (64, 128), (3, 1000)] {
            let m = branchy_model(seed, cols);
            let inputs = vec![(
                "x".to_string(),
                Value::Tensor(rand_f32(seed * 7, &[rows, cols])),
            )];
            let one = Session::from_bytes(&m, options(1)).unwrap();
            let want = bits(&run(&one, &inputs));
            for streams in [2, 3, 4, 8] {
                let s = Session::from_bytes(&m, options(streams)).unwrap();
                if !on_cpu() {
                    assert!(
                        s.schedule().streams > 1,
                        "seed {seed}: the schedule used one stream"
                    );
                }
                for round in 0..3 {
                    assert_eq!(
                        bits(&run(&s, &inputs)),
                        want,
                        "seed {seed} {rows}x{cols}, {streams} streams, round {round}"
                    );
                }
            }
        }
    }
}

/// The regression this project exists for: a 64³ MatMul of all-ones operands, each produced on its
/// own stream (two independent branches), must be 64 everywhere.
#[test]
fn all_ones_matmul_with_operands_from_other_streams() {
    let nodes = vec![
        node("Relu", &["a"], "ra"),
        node("Relu", &["b"], "rb"),
        node("Abs", &["ra"], "pa"),
        node("Abs", &["rb"], "pb"),
        node("MatMul", &["pa", "pb"], "y"),
    ];
    let m = model(nodes, &["a", "b"], &["y"], vec![]);
    let ones = Tensor::from_f32(&[64, 64], vec![1.0; 64 * 64]).unwrap();
    let inputs = vec![
        ("a".to_string(), Value::Tensor(ones.clone())),
        ("b".to_string(), Value::Tensor(ones)),
    ];
    for streams in [1, 2, 4] {
        let s = Session::from_bytes(&m, options(streams)).unwrap();
        if !on_cpu() && streams > 1 {
            let mm = s.placement().iter().position(|p| p.op == "MatMul").unwrap();
            assert_eq!(s.schedule().steps[mm].waits.len(), 1, "{:?}", s.schedule());
        }
        for round in 0..20 {
            let y = run(&s, &inputs).remove(0);
            let v = y.as_tensor().unwrap().to_f64_vec().unwrap();
            let wrong = v.iter().filter(|&&x| x != 64.0).count();
            assert_eq!(
                wrong, 0,
                "{streams} streams, round {round}: {wrong} of 4096 wrong"
            );
        }
    }
}

/// The light models of the corpus (when it has been generated here): several streams give the same
/// bits as one.
#[test]
fn light_models_are_bit_identical_on_several_streams() {
    if on_cpu() {
        return;
    }
    let root = std::env::var_os("QUORUM_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".."));
    let dir = root.join("target/corpus/onnx-1.23.2/light");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!("no corpus at {}: light models skipped", dir.display());
        return;
    };
    let mut checked = 0;
    for e in entries.flatten() {
        let path = e.path().join("model.onnx");
        if !path.is_file() {
            continue;
        }
        let one = Session::from_file(&path, options(1)).unwrap();
        let inputs =
            quorum::inputs::generate(&one.model().graph, &[], &Default::default(), 5).unwrap();
        let want = bits(&run(&one, &inputs));
        let four = Session::from_file(&path, options(4)).unwrap();
        assert_eq!(
            bits(&run(&four, &inputs)),
            want,
            "{}: 4 streams differ from 1",
            path.display()
        );
        eprintln!(
            "{}: {} streams used, identical",
            path.display(),
            four.schedule().streams
        );
        checked += 1;
    }
    eprintln!("{checked} light models checked");
}

/// Eight threads share two sessions of several streams; every result equals the one-stream one.
#[test]
fn eight_threads_on_several_streams_agree() {
    let m = branchy_model(21, 64);
    let one = Session::from_bytes(&m, options(1)).unwrap();
    let sessions = [
        Arc::new(Session::from_bytes(&m, options(4)).unwrap()),
        Arc::new(Session::from_bytes(&m, options(2)).unwrap()),
    ];
    let inputs: Vec<Vec<(String, Value)>> = (0..8)
        .map(|t| vec![("x".to_string(), Value::Tensor(rand_f32(100 + t, &[32, 64])))])
        .collect();
    let want: Vec<_> = inputs.iter().map(|i| bits(&run(&one, i))).collect();
    std::thread::scope(|scope| {
        for t in 0..8 {
            let s = sessions[t % 2].clone();
            let (inputs, want) = (&inputs[t], &want[t]);
            scope.spawn(move || {
                for round in 0..5 {
                    assert_eq!(&bits(&run(&s, inputs)), want, "thread {t} round {round}");
                }
            });
        }
    });
}

/// A session of several streams dropped on another thread while a run of another session is in
/// flight: both finish, the device stays usable.
#[test]
fn a_multi_stream_session_dropped_on_another_thread() {
    let m = branchy_model(31, 32);
    let x = vec![("x".to_string(), Value::Tensor(rand_f32(5, &[16, 32])))];
    let a = Session::from_bytes(&m, options(4)).unwrap();
    let want = bits(&run(&a, &x));
    let b = Session::from_bytes(&m, options(4)).unwrap();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let _ = run(&b, &x);
            drop(b);
        });
        let x = vec![("x".to_string(), Value::Tensor(rand_f32(5, &[16, 32])))];
        assert_eq!(bits(&run(&a, &x)), want);
    });
}
