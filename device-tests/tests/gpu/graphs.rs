//! Graph capture: replays identical to eager runs (on one and several streams, for new inputs of the
//! same shapes and for a second shape key), refusals with their reasons, and `auto`'s measurement.
use quorum::session::{GraphCapture, WARMUP_RUNS};
use quorum::{Provider, Session, SessionOptions, Tensor, Value};

use crate::harness::{POISON_NAN, on_cpu, rand_f32};
use crate::models::{int_attr, model, node, tensor_proto};

pub(crate) fn options(streams: usize, graph: GraphCapture) -> SessionOptions {
    let providers = if on_cpu() {
        vec![Provider::Cpu]
    } else {
        vec![Provider::Cuda, Provider::Cpu]
    };
    SessionOptions {
        providers,
        streams,
        graph_capture: graph,
        poison_device_buffers: Some(POISON_NAN),
        ..Default::default()
    }
}

fn bits(s: &Session, x: &Tensor) -> Vec<u64> {
    let out = s.run(vec![("x".into(), Value::Tensor(x.clone()))]).unwrap();
    out[0]
        .1
        .as_tensor()
        .unwrap()
        .to_f64_vec()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// Two branches joined: y = Sigmoid(Relu(x)·w + Tanh(x)·s), every node on the device.
fn branches() -> Vec<u8> {
    model(
        vec![
            node("Relu", &["x"], "a"),
            node("Tanh", &["x"], "b"),
            node("MatMul", &["a", "w"], "c"),
            node("Mul", &["b", "s"], "d"),
            node("Add", &["c", "d"], "e"),
            node("Sigmoid", &["e"], "y"),
        ],
        &["x"],
        &["y"],
        vec![
            tensor_proto("w", &rand_f32(1, &[64, 64])),
            tensor_proto("s", &rand_f32(2, &[64])),
        ],
    )
}

#[test]
fn replays_match_eager_runs_for_new_inputs() {
    let m = branches();
    let eager = Session::from_bytes(&m, options(1, GraphCapture::Off)).unwrap();
    for streams in [1, 3] {
        let s = Session::from_bytes(&m, options(streams, GraphCapture::On)).unwrap();
        if on_cpu() {
            assert!(s.capture_blocker().is_some());
            continue;
        }
        assert_eq!(s.capture_blocker(), None);
        for (i, rows) in [
            (0u64, 16usize),
            (1, 16),
            (2, 16),
            (3, 16),
            (4, 16),
            (5, 40),
            (6, 40),
        ]
        .into_iter()
        .chain((7..11).map(|i| (i, 40)))
        {
            let x = rand_f32(100 + i, &[rows, 64]);
            assert_eq!(
                bits(&s, &x),
                bits(&eager, &x),
                "{streams} streams, run {i} ({rows} rows)"
            );
        }
        let c = s.counters();
        assert_eq!(c.graph_captures, 2, "one capture per shape key: {c:?}");
        // Per key: WARMUP_RUNS eager runs, one captured, the rest replayed (5 and 6 runs).
        let replays = (5 - WARMUP_RUNS - 1) + (6 - WARMUP_RUNS - 1);
        assert_eq!(c.graph_replays as usize, replays, "{c:?}");
        let report = s.graph_report();
        assert_eq!(report.len(), 2, "{report:?}");
        assert!(report.iter().all(|r| r.state == "replaying"), "{report:?}");
    }
}

/// A transformer-style reshape whose target shape is computed from the input's shape (Shape →
/// Gather → Unsqueeze → Concat → Reshape) and a scale from a dim (Cast → Sqrt): the shape
/// arithmetic runs on the host, the graph still captures, and replays follow new values and a
/// second shape key.
fn reshaped_by_its_shape() -> Vec<u8> {
    let cast = int_attr(node("Cast", &["cols"], "colsf"), "to", 1);
    let cat = int_attr(node("Concat", &["rows1", "eight8"], "target"), "axis", 0);
    let ints = |name: &str, dims: &[usize], v: Vec<i64>| {
        tensor_proto(name, &Tensor::from_i64(dims, v).unwrap())
    };
    model(
        vec![
            node("Relu", &["x"], "a"),
            node("Shape", &["a"], "s"),
            node("Gather", &["s", "zero"], "rows"),
            node("Unsqueeze", &["rows", "axes"], "rows1"),
            cat,
            node("Reshape", &["a", "target"], "b"),
            node("Gather", &["s", "one"], "cols"),
            cast,
            node("Sqrt", &["colsf"], "q"),
            node("Mul", &["b", "q"], "y"),
        ],
        &["x"],
        &["y"],
        vec![
            ints("zero", &[], vec![0]),
            ints("one", &[], vec![1]),
            ints("axes", &[1], vec![0]),
            ints("eight8", &[2], vec![8, 8]),
        ],
    )
}

/// RoBERTa's embeddings as exporters write them: position ids from the tokens (Equal → Not →
/// Cast → CumSum → Mul → Cast → Add), then a GatherElements by those ids; every node on the
/// device, the indices device values that the kernel checks itself.
fn positions_from_tokens() -> Vec<u8> {
    let ints = |name: &str, dims: &[usize], v: Vec<i64>| {
        tensor_proto(name, &Tensor::from_i64(dims, v).unwrap())
    };
    model(
        vec![
            node("Equal", &["ids", "pad"], "is_pad"),
            node("Not", &["is_pad"], "real"),
            int_attr(node("Cast", &["real"], "real32"), "to", 6),
            node("CumSum", &["real32", "one"], "count"),
            node("Mul", &["count", "real32"], "pos32"),
            int_attr(node("Cast", &["pos32"], "pos64"), "to", 7),
            node("Add", &["pos64", "pad"], "pos"),
            int_attr(node("GatherElements", &["table", "pos"], "emb"), "axis", 1),
            node("Add", &["emb", "x"], "y"),
        ],
        &["x", "ids"],
        &["y"],
        vec![
            ints("pad", &[], vec![1]),
            ints("one", &[], vec![1]),
            tensor_proto("table", &rand_f32(7, &[2, 40])),
        ],
    )
}

#[test]
fn position_ids_from_the_tokens_capture() {
    let m = positions_from_tokens();
    let eager = Session::from_bytes(&m, options(1, GraphCapture::Off)).unwrap();
    let s = Session::from_bytes(&m, options(1, GraphCapture::On)).unwrap();
    if on_cpu() {
        return;
    }
    assert_eq!(s.capture_blocker(), None, "{:?}", s.placement());
    let run = |s: &Session, x: &Tensor, ids: &Tensor| -> Vec<u64> {
        let out = s
            .run(vec![
                ("x".into(), Value::Tensor(x.clone())),
                ("ids".into(), Value::Tensor(ids.clone())),
            ])
            .unwrap();
        let t = out[0].1.as_tensor().unwrap().to_f64_vec().unwrap();
        t.iter().map(|v| v.to_bits()).collect()
    };
    for i in 0..8u64 {
        // Tokens with padding (id 1) at the end of one row, a different amount each run.
        let mut ids: Vec<i64> = (0..32).map(|j| 4 + ((j * 7 + i as i64) % 50)).collect();
        for j in 0..(i as usize % 5) {
            ids[31 - j] = 1;
        }
        let ids = Tensor::from_i64(&[2, 16], ids).unwrap();
        let x = rand_f32(700 + i, &[2, 16]);
        assert_eq!(run(&s, &x, &ids), run(&eager, &x, &ids), "run {i}");
    }
    let c = s.counters();
    assert!(c.graph_replays > 0, "{c:?} {:?}", s.graph_report());
    assert_eq!(c.cuda_fallbacks, 0, "{c:?}");
}

#[test]
fn shape_arithmetic_on_the_host_does_not_stop_a_capture() {
    let m = reshaped_by_its_shape();
    let eager = Session::from_bytes(&m, options(1, GraphCapture::Off)).unwrap();
    let s = Session::from_bytes(&m, options(1, GraphCapture::On)).unwrap();
    if on_cpu() {
        return;
    }
    assert_eq!(s.capture_blocker(), None, "{:?}", s.placement());
    for (i, rows) in (0u64..5)
        .map(|i| (i, 16usize))
        .chain((5..10).map(|i| (i, 40)))
    {
        let x = rand_f32(300 + i, &[rows, 64]);
        assert_eq!(bits(&s, &x), bits(&eager, &x), "run {i} ({rows} rows)");
    }
    let report = s.graph_report();
    assert_eq!(report.len(), 2, "{report:?}");
    assert!(report.iter().all(|r| r.state == "replaying"), "{report:?}");
}

#[test]
fn light_models_replay_their_eager_results() {
    if on_cpu() {
        return;
    }
    let root = std::env::var_os("QUORUM_ROOT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".."));
    let Ok(entries) = std::fs::read_dir(root.join("target/corpus/onnx-1.23.2/light")) else {
        eprintln!("no corpus here: light models skipped");
        return;
    };
    for e in entries.flatten() {
        let path = e.path().join("model.onnx");
        if !path.is_file() {
            continue;
        }
        let eager = Session::from_file(&path, options(1, GraphCapture::Off)).unwrap();
        let graph = Session::from_file(&path, options(4, GraphCapture::On)).unwrap();
        for seed in 0..5 {
            let inputs =
                quorum::inputs::generate(&eager.model().graph, &[], &Default::default(), seed)
                    .unwrap();
            let a = eager.run(inputs.clone()).unwrap();
            let b = graph.run(inputs).unwrap();
            assert_eq!(a, b, "{}: run {seed}", path.display());
        }
        let report = graph.graph_report();
        eprintln!(
            "{}: {:?} {report:?}",
            path.display(),
            graph.capture_blocker(),
        );
        assert_eq!(graph.capture_blocker(), None, "{}", path.display());
        assert_eq!(report.len(), 1);
        assert_eq!(report[0].state, "replaying", "{}", path.display());
        assert_eq!(graph.counters().graph_replays, 2, "{}", path.display());
    }
}

/// What refuses a capture, and that the run still gives the eager result.
#[test]
fn refusals_say_why_and_runs_stay_right() {
    if on_cpu() {
        return;
    }
    // A node CUDA does not run, in the middle.
    let cpu_middle = model(
        vec![
            node("Relu", &["x"], "a"),
            node("Shrink", &["a"], "b"),
            node("Tanh", &["b"], "y"),
        ],
        &["x"],
        &["y"],
        vec![],
    );
    let s = Session::from_bytes(&cpu_middle, options(1, GraphCapture::On)).unwrap();
    let why = s.capture_blocker().expect("a CPU node blocks capture");
    assert!(
        why.contains("Shrink") && why.contains("runs on the CPU"),
        "{why}"
    );
    // The shape of a Reshape read from a run input on the host: a replay could not follow it.
    let reshape = model(
        vec![
            node("Relu", &["x"], "a"),
            node("Reshape", &["a", "shape"], "b"),
            node("Tanh", &["b"], "y"),
        ],
        &["x", "shape"],
        &["y"],
        vec![],
    );
    let s = Session::from_bytes(&reshape, options(1, GraphCapture::On)).unwrap();
    let eager = Session::from_bytes(&reshape, options(1, GraphCapture::Off)).unwrap();
    let feeds = |seed: u64| {
        vec![
            ("x".to_string(), Value::Tensor(rand_f32(seed, &[4, 6]))),
            (
                "shape".to_string(),
                Value::Tensor(Tensor::from_i64(&[2], vec![6, 4]).unwrap()),
            ),
        ]
    };
    for seed in 0..5 {
        assert_eq!(
            s.run(feeds(seed)).unwrap(),
            eager.run(feeds(seed)).unwrap(),
            "run {seed}"
        );
    }
    let report = s.graph_report();
    assert_eq!(report.len(), 1, "{report:?}");
    if s.capture_blocker().is_none() {
        assert!(
            report[0].state.contains("reads the values of a run input"),
            "{report:?}"
        );
        assert_eq!(s.counters().graph_refusals, 1);
    }
    // Verification reads every result back: no capture.
    let verified = Session::from_bytes(
        &branches(),
        SessionOptions {
            verify: quorum::VerifyMode::Shadow,
            ..options(1, GraphCapture::On)
        },
    )
    .unwrap();
    assert!(
        verified
            .capture_blocker()
            .is_some_and(|w| w.contains("verification"))
    );
}

#[test]
fn auto_measures_eager_against_replay() {
    if on_cpu() {
        return;
    }
    let s = Session::from_bytes(&branches(), options(2, GraphCapture::Auto)).unwrap();
    let eager = Session::from_bytes(&branches(), options(1, GraphCapture::Off)).unwrap();
    for i in 0..6 {
        let x = rand_f32(300 + i, &[8, 64]);
        assert_eq!(bits(&s, &x), bits(&eager, &x), "run {i}");
    }
    let report = s.graph_report();
    assert_eq!(report.len(), 1);
    let r = &report[0];
    assert!(
        r.eager_ms.is_some() && r.replay_ms.is_some(),
        "auto keeps its measurement: {r:?}"
    );
    eprintln!("auto: {r:?}");
}

/// An embedding lookup: token ids (a run input) index a table (a weight), as BERT's first node.
fn embedding() -> Vec<u8> {
    model(
        vec![
            node("Gather", &["table", "ids"], "e"),
            node("Relu", &["e"], "y"),
        ],
        &["ids"],
        &["y"],
        vec![tensor_proto("table", &rand_f32(7, &[50, 8]))],
    )
}

fn ids(v: Vec<i64>) -> Vec<(String, Value)> {
    vec![(
        "ids".to_string(),
        Value::Tensor(Tensor::from_i64(&[2, 3], v).unwrap()),
    )]
}

#[test]
fn gather_checks_run_input_indices_on_the_device() {
    // Indices from a run input are checked by the kernel (a flag copied back with the outputs), not
    // read on the host: the graph captures, a bad index in a replay is the node's error, and the
    // next good run replays again.
    if on_cpu() {
        return;
    }
    let m = embedding();
    let cpu = Session::from_bytes(
        &m,
        SessionOptions {
            providers: vec![Provider::Cpu],
            ..Default::default()
        },
    )
    .unwrap();
    let eager = Session::from_bytes(&m, options(1, GraphCapture::Off)).unwrap();
    let s = Session::from_bytes(&m, options(2, GraphCapture::On)).unwrap();
    assert_eq!(s.capture_blocker(), None, "{:?}", s.placement());
    let good = |i: i64| ids(vec![i % 50, 49, -1, -50, (7 * i) % 50, 3]);
    for i in 0..6 {
        let want = cpu.run(good(i)).unwrap();
        assert_eq!(eager.run(good(i)).unwrap(), want, "eager run {i}");
        assert_eq!(s.run(good(i)).unwrap(), want, "graph run {i}");
    }
    let c = s.counters();
    assert_eq!((c.graph_captures, c.graph_refusals), (1, 0), "{c:?}");
    let replays = c.graph_replays;
    assert!(replays >= 2, "{c:?}");
    let is_range_error = |r: quorum::Result<Vec<(String, Value)>>| match r {
        Err(quorum::Error::Node { op, msg, .. }) => op == "Gather" && msg.contains("out of range"),
        other => panic!("expected Gather's range error, got {other:?}"),
    };
    for bad in [50, -51, i64::MAX, i64::MIN] {
        let feeds = ids(vec![1, 2, bad, 4, 5, 6]);
        assert!(is_range_error(cpu.run(feeds.clone())));
        assert!(
            is_range_error(eager.run(feeds.clone())),
            "eager, index {bad}"
        );
        assert!(is_range_error(s.run(feeds)), "replay, index {bad}");
        // The flag is cleared by the next run: good indices run and replay again.
        assert_eq!(
            s.run(good(bad % 7)).unwrap(),
            cpu.run(good(bad % 7)).unwrap()
        );
        assert_eq!(eager.run(good(1)).unwrap(), cpu.run(good(1)).unwrap());
    }
    let c = s.counters();
    assert_eq!((c.graph_captures, c.graph_refusals), (1, 0), "{c:?}");
    assert_eq!(c.graph_replays, replays + 8, "{c:?}");
}

/// Token-by-token generation with the cache padded to buckets (`quorum::generate`): every step of
/// a bucket has the same shapes, so after warm-up each bucket's steps replay one captured graph,
/// with the cache carried from step to step in the graph's staging buffers; the tokens and logits
/// are the CPU's unpadded ones (the CPU's are PyTorch's, by the runtime's own test), and the same
/// generation with the cache brought back to the host every step gives the same logits bit for
/// bit and moves the same bytes to the device. The padding is poisoned: a replay that read it unmasked would move the logits. A cache
/// carried into the wrong inputs (keys as values) is caught by the same comparison.
#[test]
fn padded_generation_replays_and_matches_the_cpu() {
    use quorum::generate::{CacheLayout, GenerateOptions, generate, generate_with};
    let root = std::env::var_os("QUORUM_ROOT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".."));
    let path = root.join("benches/zoo/decoder-tiny/model.onnx");
    let cpu = Session::from_file(
        &path,
        SessionOptions {
            providers: vec![Provider::Cpu],
            ..Default::default()
        },
    )
    .unwrap();
    let s = Session::from_file(&path, options(1, GraphCapture::On)).unwrap();
    let layout = CacheLayout::of(&s).unwrap();
    let prompt = [4, 7, 12, 54, 26, 75, 21, 56];
    let want = generate(&cpu, &layout, &prompt, 40, |_, _| {}).unwrap();
    let off = |got: &[Vec<f32>]| -> f32 {
        got.iter()
            .zip(&want.logits)
            .map(|(g, w)| {
                let scale = w.iter().fold(0f32, |m, v| m.max(v.abs()));
                g.iter()
                    .zip(w)
                    .map(|(a, b)| (a - b).abs() / scale)
                    .fold(0f32, f32::max)
            })
            .fold(0f32, f32::max)
    };
    let carried = GenerateOptions {
        pad_cache: Some(8),
        pad_value: 1e4,
        ..Default::default()
    };
    let mut rounds = Vec::new();
    for round in 0..2 {
        let before = s.counters();
        let got = generate_with(&s, &layout, &prompt, 40, &carried, |_, _| {}).unwrap();
        assert_eq!(got.tokens, want.tokens, "round {round}");
        let d = off(&got.logits);
        assert!(d <= 1e-5, "round {round}: off by {d:e} of scale");
        let after = s.counters();
        rounds.push((
            got,
            after.h2d_bytes - before.h2d_bytes,
            after.graph_carries - before.graph_carries,
        ));
    }
    if on_cpu() {
        return;
    }
    // Steps with caches of 8 (bucket 8, one step a round: two runs, warm-up only), 9..16, 17..32
    // and 33..46: buckets 16, 32 and 64 are captured on their third run and replay from then on
    // (13 + 29 + 25 replays over the two rounds). In the second round every replay carries but
    // the last of buckets 16 and 32 (whose grown cache moves to the next bucket): 7 + 15 + 14.
    let c = s.counters();
    assert_eq!((c.graph_captures, c.graph_refusals), (3, 0), "{c:?}");
    assert_eq!(c.graph_replays, 67, "{c:?}");
    assert_eq!(rounds[1].2, 36, "{c:?}");
    assert_eq!(c.cuda_fallbacks, 0, "{c:?}");
    // The same generation with the cache back on the host every step: the same bits, no carry, and
    // the same bytes across the bus (the graph still uploads the carried cache from its staging;
    // what a carry saves is the host's tensors and copies).
    let host = GenerateOptions {
        carry: false,
        ..carried.clone()
    };
    let before = s.counters();
    let plain = generate_with(&s, &layout, &prompt, 40, &host, |_, _| {}).unwrap();
    let after = s.counters();
    assert_eq!(
        plain.logits, rounds[1].0.logits,
        "carried and host caches differ"
    );
    assert_eq!(after.graph_carries, before.graph_carries);
    assert_eq!(after.h2d_bytes - before.h2d_bytes, rounds[1].1);
    // Keys carried into the values' inputs: the logits move far outside the tolerance.
    let mut wrong = layout.clone();
    for pair in wrong.cache.chunks_mut(2) {
        let key = pair[0].output.clone();
        pair[0].output = pair[1].output.clone();
        pair[1].output = key;
    }
    let bad = generate_with(&s, &wrong, &prompt, 40, &carried, |_, _| {}).unwrap();
    let d = off(&bad.logits);
    assert!(
        d > 1e-3,
        "a cache carried into the wrong inputs went unnoticed ({d:e})"
    );
}
