//! IO binding on the simulated device (the run protocol CUDA runs): outputs left on the device feed
//! the next run without a copy either way and give the host run's answer bit for bit; values go
//! to the device and back explicitly; what cannot be bound is refused with the input's name.
use std::collections::HashMap;
use std::sync::Arc;

use super::{Bound, Session, SessionOptions};
use crate::Provider;
use crate::error::Error;
use crate::ir::{Dim, Model, Node, ValueInfo, ValueType};
use crate::tensor::{DType, Tensor, Value};

const SHAPE: [usize; 2] = [4, 8];

fn info(name: &str) -> ValueInfo {
    ValueInfo {
        name: name.into(),
        ty: ValueType::Tensor {
            dtype: Some(DType::F32),
            shape: Some(SHAPE.iter().map(|&d| Dim::Fixed(d as i64)).collect()),
        },
    }
}

fn node(name: &str, op: &str, i: &[&str], o: &str) -> Node {
    Node {
        name: name.into(),
        op_type: op.into(),
        domain: String::new(),
        opset: 17,
        inputs: i.iter().map(|s| s.to_string()).collect(),
        outputs: vec![o.into()],
        attrs: HashMap::new(),
    }
}

/// Seeded values in [-2, 2), never all zeros.
fn values(seed: u64) -> Tensor {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let v = (0..SHAPE.iter().product::<usize>())
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0
        })
        .collect();
    Tensor::from_f32(&SHAPE, v).unwrap()
}

/// y = Tanh(x · c) + x: an output of the input's shape, so that it can be fed back.
fn model() -> Model {
    Model::for_test(
        vec![
            node("scale", "Mul", &["x", "c"], "t"),
            node("tanh", "Tanh", &["t"], "u"),
            node("res", "Add", &["u", "x"], "y"),
        ],
        vec![info("x")],
        vec![info("y")],
        [("c".to_string(), Arc::new(Value::Tensor(values(99))))].into(),
    )
}

fn session(providers: Vec<Provider>) -> Session {
    let options = SessionOptions {
        providers,
        min_device_elements: 0,
        streams: 2,
        poison_device_buffers: Some(0xff),
        ..Default::default()
    };
    Session::from_model(model(), options).unwrap()
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_f64_vec()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

fn host(v: Bound) -> Tensor {
    match v {
        Bound::Host(Value::Tensor(t)) => t,
        other => panic!("expected a host tensor, got {other:?}"),
    }
}

#[test]
fn device_outputs_feed_the_next_run_without_copies_and_match_the_host_runs() {
    let cpu = session(vec![Provider::Cpu]);
    let x = values(1);
    let once = cpu
        .run(vec![("x".into(), Value::Tensor(x.clone()))])
        .unwrap();
    let once = once[0].1.as_tensor().unwrap().clone();
    let twice = cpu
        .run(vec![("x".into(), Value::Tensor(once.clone()))])
        .unwrap();
    let twice = twice[0].1.as_tensor().unwrap().clone();

    let s = session(vec![Provider::Sim, Provider::Cpu]);
    let c0 = s.counters();
    let out = s
        .run_bound(vec![("x".into(), Bound::Host(Value::Tensor(x)))], &["y"])
        .unwrap();
    let c1 = s.counters();
    assert_eq!(out.len(), 1);
    let y = out[0].1.as_device().expect("y stays on the device").clone();
    assert_eq!((y.dtype(), y.shape()), (DType::F32, &SHAPE[..]));
    assert_eq!(c1.d2h_bytes, c0.d2h_bytes, "y was copied back: {c1:?}");
    assert!(c1.h2d_bytes > c0.h2d_bytes, "x was not uploaded: {c1:?}");

    // Fed back: nothing crosses the bus either way but the weight, already resident.
    let out = s
        .run_bound(vec![("x".into(), Bound::Device(y.clone()))], &["y"])
        .unwrap();
    let c2 = s.counters();
    assert_eq!(
        c2.h2d_bytes, c1.h2d_bytes,
        "a device input was uploaded: {c2:?}"
    );
    assert_eq!(
        c2.d2h_bytes, c1.d2h_bytes,
        "a kept output was copied back: {c2:?}"
    );
    let y2 = out[0].1.as_device().unwrap().clone();

    assert_eq!(bits(&y.to_host().unwrap()), bits(&once));
    assert_eq!(bits(&y2.to_host().unwrap()), bits(&twice));
    // The first value is unchanged by the run that read it, and a plain host output comes back.
    assert_eq!(bits(&y.to_host().unwrap()), bits(&once));
    let out = s
        .run_bound(vec![("x".into(), Bound::Device(y))], &[])
        .unwrap();
    assert_eq!(bits(&host(out.into_iter().next().unwrap().1)), bits(&twice));
}

#[test]
fn values_go_to_the_device_and_back_explicitly() {
    let s = session(vec![Provider::Sim, Provider::Cpu]);
    let x = values(7);
    let d = s.to_device(&x).unwrap();
    assert_eq!(bits(&d.to_host().unwrap()), bits(&x));
    let plain = s.run(vec![("x".into(), Value::Tensor(x))]).unwrap();
    let bound = s
        .run_bound(vec![("x".into(), Bound::Device(d))], &[])
        .unwrap();
    assert_eq!(
        bits(&host(bound.into_iter().next().unwrap().1)),
        bits(plain[0].1.as_tensor().unwrap())
    );
}

#[test]
fn what_cannot_be_bound_is_refused_by_name() {
    let s = session(vec![Provider::Sim, Provider::Cpu]);
    let other = session(vec![Provider::Sim, Provider::Cpu]);
    let y = other.to_device(&values(3)).unwrap();
    // Another session's simulated device is another device.
    match s.run_bound(vec![("x".into(), Bound::Device(y.clone()))], &[]) {
        Err(Error::Input { name, msg }) => {
            assert_eq!(name, "x");
            assert!(msg.contains("no device of this session can read"), "{msg}");
        }
        other => panic!("expected an input error, got {other:?}"),
    }
    match s.run_bound(
        vec![("x".into(), Bound::Host(Value::Tensor(values(3))))],
        &["z"],
    ) {
        Err(Error::Input { name, .. }) => assert_eq!(name, "z"),
        other => panic!("expected an input error, got {other:?}"),
    }
    // The declared shape holds for device inputs too.
    let wrong = s
        .to_device(&Tensor::from_f32(&[2, 16], vec![0.5; 32]).unwrap())
        .unwrap();
    match s.run_bound(vec![("x".into(), Bound::Device(wrong))], &[]) {
        Err(Error::Input { name, msg }) => {
            assert_eq!(name, "x");
            assert!(msg.contains("expected shape"), "{msg}");
        }
        other => panic!("expected an input error, got {other:?}"),
    }
    // A session without a device has nothing to copy to, and keeps nothing there.
    let cpu = session(vec![Provider::Cpu]);
    assert!(matches!(cpu.to_device(&values(3)), Err(Error::Device(_))));
    let out = cpu
        .run_bound(
            vec![("x".into(), Bound::Host(Value::Tensor(values(3))))],
            &["y"],
        )
        .unwrap();
    assert!(matches!(out[0].1, Bound::Host(_)));
}

#[test]
fn pinned_inputs_and_outputs_give_the_host_runs_answer_in_place() {
    let cpu = session(vec![Provider::Cpu]);
    let s = session(vec![Provider::Sim, Provider::Cpu]);
    // The output's pinned tensor starts poisoned: an element the run fails to write shows.
    let mut y = s
        .pin(Tensor::from_f32(&SHAPE, vec![f32::NAN; 32]).unwrap())
        .unwrap();
    let mut x = s.pin(values(11)).unwrap();
    for seed in [11u64, 12] {
        if seed != 11 {
            x.copy_from(&values(seed)).unwrap();
        }
        let want = cpu
            .run(vec![("x".into(), Value::Tensor(values(seed)))])
            .unwrap();
        let xs = Arc::new(x);
        let out = s
            .run_into(
                vec![("x".into(), Bound::Pinned(xs.clone()))],
                &mut [("y", &mut y)],
            )
            .unwrap();
        assert!(
            matches!(&out[0].1, Bound::Host(Value::Optional(None))),
            "{out:?}"
        );
        assert_eq!(
            bits(y.tensor()),
            bits(want[0].1.as_tensor().unwrap()),
            "seed {seed}"
        );
        x = Arc::try_unwrap(xs).expect("the run let go of its input");
    }
    // An output of another shape than its pinned tensor is refused by name.
    let mut small = s
        .pin(Tensor::from_f32(&[2], vec![0.0; 2]).unwrap())
        .unwrap();
    match s.run_into(
        vec![("x".into(), Bound::Pinned(Arc::new(x)))],
        &mut [("y", &mut small)],
    ) {
        Err(Error::Input { name, msg }) => {
            assert_eq!(name, "y");
            assert!(msg.contains("pinned tensor"), "{msg}");
        }
        other => panic!("expected an input error, got {other:?}"),
    }
    // A session without a device has nothing to page-lock on.
    let cpu = session(vec![Provider::Cpu]);
    assert!(matches!(cpu.pin(values(2)), Err(Error::Device(_))));
}
