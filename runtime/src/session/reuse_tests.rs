//! The memory plan's in-place rule in a session: outputs written over inputs that die at their
//! node give the same outputs, bit for bit, as every node writing new memory; an initializer, a
//! value read later and a graph output are never written over. Broken variant: a plan that marks an
//! input as dying where a later node still reads it is caught (the later node finds no value).
use std::sync::Arc;

use super::{Session, SessionOptions};
use crate::ir::{Attr, Dim, Model, Node, ValueInfo, ValueType};
use crate::ops::testing::seeded_f32;
use crate::pb::raw_bytes;
use crate::tensor::{DType, Tensor, Value};

const N: usize = 3 * 40 * 40;

fn info(name: &str, shape: &[usize]) -> ValueInfo {
    ValueInfo {
        name: name.into(),
        ty: ValueType::Tensor {
            dtype: Some(DType::F32),
            shape: Some(shape.iter().map(|&d| Dim::Fixed(d as i64)).collect()),
        },
    }
}

/// A node named after its one output.
fn node(op: &str, inputs: &[&str], output: &str, attrs: Vec<(&str, Attr)>) -> Node {
    Node {
        name: output.into(),
        op_type: op.into(),
        domain: String::new(),
        opset: 17,
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: vec![output.into()],
        attrs: attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
    }
}

/// An initializer of seeded values in [-`scale`, `scale`).
fn init(name: &str, seed: u64, shape: &[usize], scale: f32) -> (String, Arc<Value>) {
    let n = shape.iter().product();
    let t = Tensor::from_f32(shape, seeded_f32(seed, n, -scale, scale)).unwrap();
    (name.to_string(), Arc::new(Value::Tensor(t)))
}

/// y = x - Sigmoid(x·w + b), with t = x·w also a graph output when `t_out`: x (a run input) is
/// read twice, w and b are initializers.
fn model(t_out: bool) -> Model {
    let mut outputs = vec![info("y", &[1, 3, 40, 40])];
    if t_out {
        outputs.push(info("t", &[1, 3, 40, 40]));
    }
    Model::for_test(
        vec![
            node("Mul", &["x", "w"], "t", vec![]),
            node("Add", &["t", "b"], "u", vec![]),
            node("Sigmoid", &["u"], "v", vec![]),
            node("Sub", &["x", "v"], "y", vec![]),
        ],
        vec![info("x", &[1, 3, 40, 40])],
        outputs,
        [
            init("w", 2, &[1, 3, 40, 40], 1.5),
            init("b", 3, &[3, 1, 1], 1.5),
        ]
        .into(),
    )
}

fn session(t_out: bool) -> Session {
    let options = SessionOptions {
        optimize: false,
        ..Default::default()
    };
    Session::from_model(model(t_out), options).unwrap()
}

/// Each output's bytes, by name, after one run.
fn try_run(s: &Session) -> crate::error::Result<Vec<(String, Vec<u8>)>> {
    let x = Tensor::from_f32(&[1, 3, 40, 40], seeded_f32(1, N, -2.0, 2.0)).unwrap();
    let mut outs: Vec<(String, Vec<u8>)> = s
        .run(vec![("x".into(), Value::Tensor(x))])?
        .into_iter()
        .map(|(name, v)| (name, raw_bytes(v.as_tensor().unwrap())))
        .collect();
    outs.sort();
    Ok(outs)
}

fn run(s: &Session) -> Vec<(String, Vec<u8>)> {
    try_run(s).unwrap()
}

/// The session with no in-place form: every node writes new memory.
fn reference(t_out: bool) -> Vec<(String, Vec<u8>)> {
    let mut s = session(t_out);
    for step in &mut s.plan.steps {
        step.in_place = None;
    }
    let outs = run(&s);
    assert_eq!(s.counters().in_place_outputs, 0);
    outs
}

#[test]
fn outputs_written_over_dying_inputs_are_the_plain_runs_bit_for_bit() {
    for t_out in [false, true] {
        let want = reference(t_out);
        let s = session(t_out);
        // Twice: the second run sees the initializers the first one read, unchanged.
        for runs in 1..=2u64 {
            assert_eq!(run(&s), want, "t is an output: {t_out}, run {runs}");
            // Add over t (unless t is an output), Sigmoid over u, Sub over x (the run's input,
            // which dies there); Mul reads x again later and w is an initializer.
            let per_run = if t_out { 2 } else { 3 };
            assert_eq!(s.counters().in_place_outputs, per_run * runs);
        }
    }
}

#[test]
fn a_plan_that_frees_a_value_read_later_is_caught() {
    let want = reference(false);
    let mut s = session(false);
    let mul = s
        .plan
        .steps
        .iter()
        .position(|st| s.plan.graph.nodes[st.node].op_type == "Mul")
        .unwrap();
    // Broken: x marked as dying at Mul, though Sub reads it after.
    let form = crate::ops::Registry::cpu()
        .get_in_place("", "Mul")
        .unwrap()
        .0;
    s.plan.steps[mul].in_place = Some((form, [true, false]));
    // Caught: x, taken at Mul, is not there when Sub reads it (an error naming the node), rather
    // than Sub reading Mul's output in its place.
    match try_run(&s) {
        Ok(got) => assert_ne!(got, want, "overwriting x before Sub read it went unnoticed"),
        Err(e) => assert!(e.to_string().contains("'x' has no value"), "{e}"),
    }
}

/// A small CNN: Conv 3→16 (3×3, padded) + Relu, MaxPool 2×2, Conv 16→16 (1×1) + the pool's output,
/// Sigmoid, GlobalAveragePool, Flatten, Gemm to 10. Its activations are 16 × 32² and 16 × 16² f32s,
/// above the arena's minimum.
fn cnn() -> Model {
    let ints = |v: &[i64]| Attr::Ints(v.to_vec());
    Model::for_test(
        vec![
            node(
                "Conv",
                &["x", "w1", "b1"],
                "c1",
                vec![
                    ("kernel_shape", ints(&[3, 3])),
                    ("pads", ints(&[1, 1, 1, 1])),
                ],
            ),
            node("Relu", &["c1"], "r1", vec![]),
            node(
                "MaxPool",
                &["r1"],
                "p1",
                vec![("kernel_shape", ints(&[2, 2])), ("strides", ints(&[2, 2]))],
            ),
            node(
                "Conv",
                &["p1", "w2", "b2"],
                "c2",
                vec![("kernel_shape", ints(&[1, 1]))],
            ),
            node("Add", &["c2", "p1"], "s2", vec![]),
            node("Sigmoid", &["s2"], "g2", vec![]),
            node("GlobalAveragePool", &["g2"], "a2", vec![]),
            node("Flatten", &["a2"], "f2", vec![]),
            node(
                "Gemm",
                &["f2", "w3", "b3"],
                "y",
                vec![("transB", Attr::Int(1))],
            ),
        ],
        vec![info("x", &[1, 3, 32, 32])],
        vec![info("y", &[1, 10])],
        [
            init("w1", 11, &[16, 3, 3, 3], 0.5),
            init("b1", 12, &[16], 0.5),
            init("w2", 13, &[16, 16, 1, 1], 0.5),
            init("b2", 14, &[16], 0.5),
            init("w3", 15, &[10, 16], 0.5),
            init("b3", 16, &[10], 0.5),
        ]
        .into(),
    )
}

fn cnn_run(s: &Session) -> Vec<u8> {
    let x = Tensor::from_f32(&[1, 3, 32, 32], seeded_f32(5, 3 * 32 * 32, -1.0, 1.0)).unwrap();
    let out = s.run(vec![("x".into(), Value::Tensor(x))]).unwrap();
    raw_bytes(out[0].1.as_tensor().unwrap())
}

/// Runs the CNN three times; (requests the arena served, requests that took new memory) in the
/// third run, with every run's output checked equal to the first's, bit for bit.
fn steady_state(s: &Session) -> (u64, u64) {
    use std::sync::atomic::Ordering::Relaxed;
    let first = cnn_run(s);
    assert_eq!(cnn_run(s), first);
    let (reused, fresh) = (s.arena.reused.load(Relaxed), s.arena.fresh.load(Relaxed));
    assert_eq!(cnn_run(s), first, "a run from reused storage differs");
    (
        s.arena.reused.load(Relaxed) - reused,
        s.arena.fresh.load(Relaxed) - fresh,
    )
}

#[test]
fn a_steady_state_run_takes_its_activations_from_the_arena() {
    for optimize in [true, false] {
        let options = SessionOptions {
            optimize,
            ..Default::default()
        };
        let s = Session::from_model(cnn(), options).unwrap();
        let (reused, fresh) = steady_state(&s);
        assert_eq!(
            fresh, 0,
            "optimize {optimize}: new memory in a steady-state run"
        );
        assert!(
            reused >= 2,
            "optimize {optimize}: {reused} outputs from the arena"
        );
    }
}

#[test]
fn an_arena_that_keeps_nothing_is_caught() {
    // Broken: freed storage is dropped, so every run allocates again.
    let mut s = Session::from_model(cnn(), SessionOptions::default()).unwrap();
    s.arena = crate::arena::Arena::with_ceiling(0);
    let (reused, fresh) = steady_state(&s);
    assert_eq!(reused, 0);
    assert!(
        fresh > 0,
        "the steady-state check would not see an arena that keeps nothing"
    );
}

/// Clip whose bounds die at it (computed by Neg) while its input lives on (Add reads it after):
/// the output is Clip's, never written over a bound (a scalar). The device tests found this
/// through wgpu, where the input had a device copy and the bound was the first input free.
#[test]
fn a_unary_op_never_writes_over_its_parameters() {
    let scalar = |name: &str, v: f32| {
        let t = Tensor::from_f32(&[], vec![v]).unwrap();
        (name.to_string(), Arc::new(Value::Tensor(t)))
    };
    let model = Model::for_test(
        vec![
            node("Neg", &["a"], "lo", vec![]),
            node("Neg", &["b"], "hi", vec![]),
            node("Clip", &["x", "lo", "hi"], "c", vec![]),
            node("Add", &["c", "x"], "y", vec![]),
        ],
        vec![info("x", &[1, 3, 40, 40])],
        vec![info("y", &[1, 3, 40, 40])],
        [scalar("a", 0.5), scalar("b", -0.75)].into(),
    );
    let options = SessionOptions {
        optimize: false,
        fold_constants: false,
        ..Default::default()
    };
    let s = Session::from_model(model, options).unwrap();
    let x = Tensor::from_f32(&[1, 3, 40, 40], seeded_f32(9, N, -2.0, 2.0)).unwrap();
    let y = s.run(vec![("x".into(), Value::Tensor(x.clone()))]).unwrap();
    let y = y[0].1.as_tensor().unwrap();
    assert_eq!(y.shape(), &[1, 3, 40, 40]);
    let (Tensor::F32(x), Tensor::F32(y)) = (&x, y) else {
        unreachable!()
    };
    for (v, got) in x.iter().zip(y.iter()) {
        assert_eq!(*got, v.clamp(-0.5, 0.75) + v);
    }
    // Add wrote over Clip's output, which died there; Clip had no input to write over.
    assert_eq!(s.counters().in_place_outputs, 1);
}
