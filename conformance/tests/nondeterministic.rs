//! Nondeterministic cases are still judged (`conformance/src/nondeterministic.rs`): the CPU engine's
//! random outputs pass the rules, and deliberately corrupted outputs (a Bernoulli value that is not 0
//! or 1, a kept Dropout element off its scale, a mask that disagrees with the output, a Dropout that
//! never drops, a missing output, a wrong shape) fail them.
#![forbid(unsafe_code)]
use std::collections::HashMap;
use std::path::Path;

use quorum::ir::{Dim, Graph, Model, Node, ValueInfo, ValueType};
use quorum::{DType, Session, SessionOptions, Tensor, Value};
use quorum_conformance::case::{self, Case};
use quorum_conformance::engine::{Cpu, Engine, EngineError, Prepared};
use quorum_conformance::expect::{Expectations, Status};
use quorum_conformance::nondeterministic::check;
use quorum_conformance::{corpus, expect, runner};

type Corruption = fn(&[(String, Value)], &mut Vec<Value>);

/// The CPU engine with its outputs altered after each run.
struct Corrupted(Corruption);

struct CorruptedModel(Box<dyn Prepared>, Corruption);

impl Engine for Corrupted {
    fn name(&self) -> &str {
        "cpu"
    }

    fn prepare(&self, model: &Path) -> Result<Box<dyn Prepared>, EngineError> {
        Ok(Box::new(CorruptedModel(Cpu.prepare(model)?, self.0)))
    }
}

impl Prepared for CorruptedModel {
    fn run(&self, inputs: Vec<(String, Value)>) -> Result<Vec<Value>, EngineError> {
        let mut out = self.0.run(inputs.clone())?;
        (self.1)(&inputs, &mut out);
        Ok(out)
    }
}

fn values(v: &Value) -> Vec<f64> {
    v.as_tensor().unwrap().to_f64_vec().unwrap()
}

/// Replaces a tensor's values, keeping dtype and shape.
fn set(v: &mut Value, f: impl FnOnce(&mut Vec<f64>)) {
    let t = v.as_tensor().unwrap();
    let (dtype, shape) = (t.dtype(), t.shape().to_vec());
    let mut x = values(v);
    f(&mut x);
    *v = Value::Tensor(Tensor::from_f64s(dtype, &shape, x).unwrap());
}

fn cases() -> Vec<Case> {
    let dir = corpus::default_dir();
    corpus::ensure(&dir).expect("corpus");
    case::discover(&dir).expect("cases")
}

fn find<'a>(cases: &'a [Case], id: &str) -> &'a Case {
    cases
        .iter()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("{id} is not in the corpus"))
}

#[test]
fn every_listed_nondeterministic_case_passes_its_rules_on_the_cpu_engine() {
    let cases = cases();
    let list = Expectations::load(&expect::path_for("cpu")).unwrap();
    let ids: Vec<&String> = list
        .entries
        .iter()
        .filter(|(_, e)| e.status == Status::Nondeterministic)
        .map(|(id, _)| id)
        .collect();
    assert!(ids.len() >= 10, "{ids:?}");
    for id in ids {
        let o = runner::run_case(&Cpu, find(&cases, id), true);
        assert_eq!(o.status, "nondeterministic", "{id}: {}", o.detail);
        assert!(o.detail.contains("shape and dtype"), "{id}: {}", o.detail);
    }
}

fn judged(case: &str, corruption: Corruption) -> runner::Outcome {
    let cases = cases();
    runner::run_case(&Corrupted(corruption), find(&cases, case), true)
}

fn fails(case: &str, corruption: Corruption, why: &str) {
    let o = judged(case, corruption);
    assert_eq!(
        o.status, "fail",
        "{case}: corrupted output passed: {}",
        o.detail
    );
    assert!(o.detail.contains(why), "{case}: {}", o.detail);
}

#[test]
fn a_bernoulli_value_other_than_0_or_1_fails() {
    fails(
        "node/test_bernoulli",
        |_, o| set(&mut o[0], |v| v[3] = 2.0),
        "element 3 is 2",
    );
    fails(
        "node/test_bernoulli_expanded",
        |_, o| set(&mut o[0], |v| v[0] = 0.5),
        "element 0 is 0.5",
    );
}

#[test]
fn a_kept_dropout_element_off_its_scale_fails() {
    fails(
        "node/test_training_dropout",
        |_, o| {
            set(&mut o[0], |v| {
                let i = v.iter().position(|&y| y != 0.0).unwrap();
                v[i] *= 1.01;
            })
        },
        "neither 0 nor x / (1 - ratio)",
    );
}

#[test]
fn a_mask_that_disagrees_with_the_output_fails() {
    // Mask false where the element was kept.
    fails(
        "node/test_training_dropout_mask",
        |_, o| {
            let kept = values(&o[0]).iter().position(|&y| y != 0.0).unwrap();
            set(&mut o[1], |m| m[kept] = 0.0);
        },
        "mask false but output",
    );
    // Mask true where the element was dropped.
    fails(
        "node/test_training_dropout_default_mask",
        |inputs, o| {
            let x = values(&inputs[0].1);
            let y = values(&o[0]);
            let dropped = (0..y.len()).find(|&i| y[i] == 0.0 && x[i] != 0.0).unwrap();
            set(&mut o[1], |m| m[dropped] = 1.0);
        },
        "mask true but output",
    );
}

#[test]
fn a_dropout_that_never_drops_fails() {
    fails(
        "node/test_training_dropout_mask",
        |inputs, o| {
            let x = values(&inputs[0].1);
            set(&mut o[0], |y| {
                y.iter_mut().zip(&x).for_each(|(y, x)| *y = x / 0.25)
            });
            set(&mut o[1], |m| m.iter_mut().for_each(|m| *m = 1.0));
        },
        "standard deviations",
    );
}

#[test]
fn a_missing_output_or_a_wrong_shape_fails() {
    fails(
        "node/test_training_dropout_mask",
        |_, o| {
            o.pop();
        },
        "1 outputs, expected 2",
    );
    fails(
        "node/test_bernoulli_double",
        |_, o| {
            let t = o[0].as_tensor().unwrap();
            let n = t.len();
            o[0] = Value::Tensor(t.reshape(&[n, 1]).unwrap());
        },
        "but expected",
    );
}

/// x of `n` seeded values in (-1, 1), none zero.
fn seeded(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = ((s >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
            (2.0 * u - 1.0) as f32
        })
        .collect()
}

fn dropout_model(n: usize) -> Model {
    let tensor = |dtype, dims: &[i64]| ValueType::Tensor {
        dtype: Some(dtype),
        shape: Some(dims.iter().map(|&d| Dim::Fixed(d)).collect()),
    };
    let vi = |name: &str, ty| ValueInfo {
        name: name.into(),
        ty,
    };
    Model {
        ir_version: 8,
        opsets: HashMap::from([(String::new(), 13)]),
        producer: "test".into(),
        graph: Graph {
            name: "dropout".into(),
            nodes: vec![Node {
                name: "drop".into(),
                op_type: "Dropout".into(),
                domain: String::new(),
                opset: 13,
                inputs: vec!["x".into(), "r".into(), "t".into()],
                outputs: vec!["y".into(), "m".into()],
                attrs: HashMap::new(),
            }],
            inputs: vec![
                vi("x", tensor(DType::F32, &[n as i64])),
                vi("r", tensor(DType::F32, &[])),
                vi("t", tensor(DType::Bool, &[])),
            ],
            outputs: vec![
                vi("y", tensor(DType::F32, &[n as i64])),
                vi("m", tensor(DType::Bool, &[n as i64])),
            ],
            ..Default::default()
        },
        metadata: Vec::new(),
        warnings: Vec::new(),
    }
}

#[test]
fn the_cpu_dropout_kernel_passes_on_ten_thousand_elements_and_corruptions_fail() {
    let n = 10_000;
    let model = dropout_model(n);
    let x = seeded(n, 20261201);
    assert!(x.iter().all(|&v| v != 0.0));
    let inputs = vec![
        (
            "x".to_string(),
            Value::Tensor(Tensor::from_f32(&[n], x).unwrap()),
        ),
        (
            "r".to_string(),
            Value::Tensor(Tensor::from_f32(&[], vec![0.3]).unwrap()),
        ),
        (
            "t".to_string(),
            Value::Tensor(Tensor::from_f64s(DType::Bool, &[], vec![1.0]).unwrap()),
        ),
    ];
    let session = Session::from_model(model.clone(), SessionOptions::default()).unwrap();
    let out: Vec<Value> = session
        .run(inputs.clone())
        .unwrap()
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    // The expected data of a random op only fixes count, shape and dtype: the output itself serves.
    let expected = out.clone();
    let ok = check(&model, &inputs, &out, &expected).unwrap();
    assert!(ok.contains("consistent with the mask"), "{ok}");

    let scaled_wrong = {
        let mut o = out.clone();
        // 1/(1-0.31) instead of 1/(1-0.3): every kept element off by 1.5%.
        set(&mut o[0], |y| y.iter_mut().for_each(|y| *y *= 0.7 / 0.69));
        o
    };
    let e = check(&model, &inputs, &scaled_wrong, &expected).unwrap_err();
    assert!(e.contains("mask true but output"), "{e}");

    let never = {
        let mut o = out.clone();
        let x = values(&inputs[0].1);
        set(&mut o[0], |y| {
            y.iter_mut().zip(&x).for_each(|(y, x)| *y = x / 0.7)
        });
        set(&mut o[1], |m| m.iter_mut().for_each(|m| *m = 1.0));
        o
    };
    let e = check(&model, &inputs, &never, &expected).unwrap_err();
    assert!(e.contains("dropped: 0, expected 3000.0"), "{e}");

    let too_many = {
        // Drops at ratio 0.4 while claiming 0.3: consistent element by element, caught by the count.
        let mut o = out.clone();
        let x = values(&inputs[0].1);
        let u = seeded(n, 7);
        let keep: Vec<bool> = u.iter().map(|&u| (u as f64 + 1.0) / 2.0 >= 0.4).collect();
        set(&mut o[0], |y| {
            for i in 0..n {
                y[i] = if keep[i] { x[i] / 0.7 } else { 0.0 };
            }
        });
        set(&mut o[1], |m| {
            for i in 0..n {
                m[i] = keep[i] as u8 as f64;
            }
        });
        o
    };
    let e = check(&model, &inputs, &too_many, &expected).unwrap_err();
    assert!(e.contains("standard deviations"), "{e}");
}
