//! Sessions on CUDA as a whole: weight residency, several sessions, many threads, dropping on
//! another thread, activation residency (one upload per input, one download per output).
use std::sync::Arc;

use quorum::proto;
use quorum::{Provider, Session, SessionOptions, Tensor, Value};

use crate::harness::{POISON_NAN, on_cpu, rand_f32};
use crate::models::{model, node, tensor_proto};

/// An opset-17 model of `nodes` with graph input `x`, graph output `y` and `inits`.
fn graph_model(nodes: Vec<proto::NodeProto>, inits: Vec<proto::TensorProto>) -> Vec<u8> {
    model(nodes, &["x"], &["y"], inits)
}

/// y = Relu(x · w + b) · s, with w, b, s initializers: an all-CUDA chain of four nodes.
fn chain_model() -> Vec<u8> {
    graph_model(
        vec![
            node("Mul", &["x", "w"], "t1"),
            node("Add", &["t1", "b"], "t2"),
            node("Relu", &["t2"], "t3"),
            node("Mul", &["t3", "s"], "y"),
        ],
        vec![
            tensor_proto("w", &rand_f32(1, &[64, 256])),
            tensor_proto("b", &rand_f32(2, &[256])),
            tensor_proto("s", &rand_f32(3, &[64, 256])),
        ],
    )
}

fn session() -> Session {
    let providers = if on_cpu() {
        vec![Provider::Cpu]
    } else {
        vec![Provider::Cuda, Provider::Cpu]
    };
    Session::from_bytes(
        &chain_model(),
        SessionOptions {
            providers,
            poison_device_buffers: Some(crate::harness::POISON_NAN),
            ..Default::default()
        },
    )
    .unwrap()
}

fn run(s: &Session, seed: u64) -> Tensor {
    let x = rand_f32(seed, &[64, 256]);
    let mut out = s.run(vec![("x".into(), Value::Tensor(x))]).unwrap();
    out.remove(0).1.into_tensor().unwrap()
}

fn cpu_reference(seed: u64) -> Tensor {
    let s = Session::from_bytes(&chain_model(), SessionOptions::default()).unwrap();
    run(&s, seed)
}

#[test]
fn steady_state_uploads_no_weights_and_keeps_activations_on_the_device() {
    let s = session();
    let first = run(&s, 10);
    let c1 = s.counters();
    let second = run(&s, 11);
    let c2 = s.counters();
    assert_eq!(first, cpu_reference(10), "first run differs from the CPU");
    assert_eq!(second, cpu_reference(11), "second run differs from the CPU");
    if on_cpu() {
        return;
    }
    let weight_bytes = (64 * 256 + 256 + 64 * 256) * 4;
    assert_eq!(c1.weight_bytes_uploaded, weight_bytes as u64, "{c1:?}");
    assert_eq!(c2.weight_bytes_uploaded, c1.weight_bytes_uploaded, "{c2:?}");
    // Steady state: one upload (x), one download (y) per run; modules come from the cache.
    assert_eq!(c2.h2d_calls - c1.h2d_calls, 1, "{c1:?} -> {c2:?}");
    assert_eq!(c2.d2h_calls - c1.d2h_calls, 1, "{c1:?} -> {c2:?}");
    assert_eq!(c2.module_misses, c1.module_misses, "{c1:?} -> {c2:?}");
    assert_eq!(
        c2.kernel_launches - c1.kernel_launches,
        4,
        "{c1:?} -> {c2:?}"
    );
    println!("steady-state counters (two runs): {c2:?}");
}

#[test]
fn two_sessions_in_one_process() {
    let (a, b) = (session(), session());
    let (ya, yb) = (run(&a, 20), run(&b, 20));
    assert_eq!(ya, yb);
    assert_eq!(ya, cpu_reference(20));
}

#[test]
fn one_session_from_eight_threads_gives_identical_results() {
    let s = Arc::new(session());
    let expected: Vec<Tensor> = (0..8).map(|t| cpu_reference(100 + t)).collect();
    for _round in 0..4 {
        let handles: Vec<_> = (0..8u64)
            .map(|t| {
                let s = s.clone();
                std::thread::spawn(move || (0..5).map(|_| run(&s, 100 + t)).collect::<Vec<_>>())
            })
            .collect();
        for (t, h) in handles.into_iter().enumerate() {
            for y in h.join().unwrap() {
                assert_eq!(y, expected[t], "thread {t}");
            }
        }
    }
}

#[test]
fn a_session_dropped_on_another_thread() {
    let s = session();
    let y = run(&s, 30);
    std::thread::spawn(move || {
        let y2 = run(&s, 30);
        drop(s);
        y2
    })
    .join()
    .map(|y2| assert_eq!(y, y2))
    .unwrap();
    // The device is still usable afterwards.
    let s = session();
    assert_eq!(run(&s, 31), cpu_reference(31));
}

#[test]
fn strict_verification_passes_correct_kernels() {
    if on_cpu() {
        return;
    }
    let s = Session::from_bytes(
        &chain_model(),
        SessionOptions {
            providers: vec![Provider::Cuda, Provider::Cpu],
            verify: quorum::VerifyMode::Strict,
            ..Default::default()
        },
    )
    .unwrap();
    let y = run(&s, 40);
    assert_eq!(y, cpu_reference(40));
    let c = s.counters();
    assert_eq!(c.verify_checks, 4, "{c:?}");
    assert_eq!(c.verify_mismatches, 0, "{c:?}");
}

/// Under `auto`, a ConstantOfShape with a large output goes to the device even though its input is
/// a 2-element shape: judged by its small input it would run on the CPU, and its output would go up
/// the bus on every run (light models make all their weights this way).
#[test]
fn auto_places_large_constant_of_shape_on_the_device() {
    if on_cpu() {
        return;
    }
    let m = graph_model(
        vec![
            node("ConstantOfShape", &["shape"], "c"),
            node("Add", &["x", "c"], "y"),
        ],
        vec![tensor_proto(
            "shape",
            &Tensor::from_i64(&[2], vec![256, 256]).unwrap(),
        )],
    );
    let s = Session::from_bytes(
        &m,
        SessionOptions {
            providers: vec![Provider::Cuda, Provider::Cpu],
            min_device_elements: quorum::session::AUTO_MIN_DEVICE_ELEMENTS,
            // Folding would make the constant a weight; this test is about the floor's rule for
            // a generator whose shape is only known at run time.
            fold_constants: false,
            ..Default::default()
        },
    )
    .unwrap();
    let x = rand_f32(50, &[256, 256]);
    let feed = || vec![("x".to_string(), Value::Tensor(x.clone()))];
    let y = s.run(feed()).unwrap();
    let c1 = s.counters();
    s.run(feed()).unwrap();
    let c2 = s.counters();
    let want: Vec<f64> = x.to_f64_vec().unwrap();
    let got = y[0].1.as_tensor().unwrap().to_f64_vec().unwrap();
    assert_eq!(got, want, "ConstantOfShape's default value is 0");
    assert_eq!(
        c2.h2d_bytes - c1.h2d_bytes,
        256 * 256 * 4,
        "{c1:?} -> {c2:?}"
    );
}

/// Run A reads a resident weight in a kernel queued behind a ~100 ms spin; the weight's last other
/// handle goes (as the copy that lost an upload race once did), then run B allocates a buffer of
/// the same size class, poisoned at once on B's idle stream. Returns what A's kernel read, the
/// weight, and whether B was given the weight's memory. On a pool of its own: no other test's
/// allocation can take the block first.
fn weight_read_after_its_handle_goes(hold: bool) -> (Tensor, Tensor, bool) {
    use quorum::cuda::{Counters, Device, Run};
    let device = Device::get().unwrap().isolated();
    let counters = Counters::default();
    let shape = [1000, 300];
    let host = rand_f32(60, &shape);
    let a = Run::new(&device, &counters, Some(POISON_NAN)).unwrap();
    let w = a.upload_weight(&host).unwrap();
    if hold {
        a.hold(&w);
    }
    // Long enough (about half a second) that B's poison lands first even when the suite's other
    // tests keep every SM busy: at 200M cycles, 1 suite run in the H200's call 2 of stop 25 saw the
    // copy run before the poison.
    a.spin(1_000_000_000).unwrap();
    let out = a.alloc(quorum::DType::F32, &shape).unwrap();
    a.copy(&out, &w, w.bytes()).unwrap();
    let later = a.download_later(&out).unwrap();
    let freed = w.ptr();
    drop(w);
    let b = Run::new(&device, &counters, Some(POISON_NAN)).unwrap();
    let taken = b.alloc(quorum::DType::F32, &shape).unwrap();
    let reused = taken.ptr() == freed;
    b.synchronize().unwrap();
    let read = a.finish().unwrap().remove(later);
    drop((taken, b, a));
    (read, host, reused)
}

/// A weight a run's kernels read stays out of the pool until the run is done, whatever happens to
/// its other handles; without the run's hold, the same sequence reads another run's poison.
#[test]
fn a_run_holds_the_weights_its_kernels_read() {
    if on_cpu() {
        return;
    }
    let (read, host, reused) = weight_read_after_its_handle_goes(true);
    assert!(
        !reused,
        "the held weight's memory was handed to another run"
    );
    assert_eq!(read, host, "the held weight was overwritten");
    // Without the hold the other run's poison must reach what A's kernel reads. That depends on
    // B's poison landing during A's spin, which a GPU busy with the suite's other tests can delay
    // past it (seen on the H100 in 2 of 5 suite runs, 2026-12-06): the broken variant is tried up
    // to three times and must show the poison once.
    let mut poisoned = false;
    for _ in 0..3 {
        let (read, host, reused) = weight_read_after_its_handle_goes(false);
        assert!(
            reused,
            "the pool did not hand the freed weight's memory on (the premise of the check)"
        );
        let Tensor::F32(r) = &read else {
            panic!("{read:?}")
        };
        if r.iter().any(|v| v.is_nan()) && read != host {
            poisoned = true;
            break;
        }
    }
    assert!(
        poisoned,
        "without the hold, the freed weight should have been taken and poisoned by the other run"
    );
}

/// An input and an output past the size where uploads go in pieces (8 MiB) and outputs are
/// rebuilt by several threads, with a ragged last piece: every element crosses both ways, eager
/// (pieces overlapping the staging of the next) and replayed from a captured graph (staged whole).
#[test]
fn large_values_cross_whole_in_pieces() {
    use quorum::session::GraphCapture;
    let n = (2 * (8 << 20) + 4 * 333) / 4;
    let pieces = std::env::var("QUORUM_CUDA_PIPELINE").map_or(true, |v| v != "off");
    for capture in [GraphCapture::Off, GraphCapture::On] {
        let providers = if on_cpu() {
            vec![Provider::Cpu]
        } else {
            vec![Provider::Cuda, Provider::Cpu]
        };
        let s = Session::from_bytes(
            &graph_model(vec![node("Neg", &["x"], "y")], vec![]),
            SessionOptions {
                providers,
                poison_device_buffers: Some(POISON_NAN),
                graph_capture: capture,
                ..Default::default()
            },
        )
        .unwrap();
        for seed in 0..3 {
            let x = rand_f32(40 + seed, &[n]);
            let want: Vec<f64> = x.to_f64_vec().unwrap().iter().map(|v| -v).collect();
            let before = s.counters();
            let mut out = s.run(vec![("x".into(), Value::Tensor(x))]).unwrap();
            let after = s.counters();
            let y = out.remove(0).1.into_tensor().unwrap();
            assert_eq!(y.shape(), &[n]);
            let got = y.to_f64_vec().unwrap();
            let wrong = got
                .iter()
                .zip(&want)
                .filter(|(g, w)| g.to_bits() != w.to_bits())
                .count();
            assert_eq!(
                wrong, 0,
                "{capture:?}, run {seed}: {wrong} of {n} elements differ"
            );
            if on_cpu() {
                continue;
            }
            assert_eq!(
                after.h2d_bytes - before.h2d_bytes,
                4 * n as u64,
                "{after:?}"
            );
            if capture == GraphCapture::Off && pieces {
                assert_eq!(
                    after.h2d_calls - before.h2d_calls,
                    3,
                    "three pieces: {after:?}"
                );
            }
        }
    }
}

/// IO binding on CUDA: a session's output left on the device feeds another session's run without a
/// copy either way, and pinned tensors go in and out straight over the bus (no staging, no
/// rebuilt output); every element is the host pipeline's, and the pinned output starts poisoned.
#[test]
fn bound_and_pinned_values_cross_without_staging() {
    use quorum::session::Bound;
    if on_cpu() {
        return;
    }
    let n = (8 << 20) / 4 + 999;
    let options = || SessionOptions {
        providers: vec![Provider::Cuda, Provider::Cpu],
        poison_device_buffers: Some(POISON_NAN),
        ..Default::default()
    };
    let neg = Session::from_bytes(
        &graph_model(vec![node("Neg", &["x"], "y")], vec![]),
        options(),
    )
    .unwrap();
    let relu = Session::from_bytes(
        &graph_model(vec![node("Relu", &["x"], "y")], vec![]),
        options(),
    )
    .unwrap();
    let x = rand_f32(50, &[n]);
    let want: Vec<f64> = x
        .to_f64_vec()
        .unwrap()
        .iter()
        .map(|v| (-v).max(0.0))
        .collect();
    let same = |got: &Tensor, what: &str| {
        let got = got.to_f64_vec().unwrap();
        let wrong = got
            .iter()
            .zip(&want)
            .filter(|(g, w)| g.to_bits() != w.to_bits())
            .count();
        assert_eq!(wrong, 0, "{what}: {wrong} of {n} elements differ");
    };

    // Device to device across sessions.
    let a = neg
        .run_bound(
            vec![("x".into(), Bound::Host(Value::Tensor(x.clone())))],
            &["y"],
        )
        .unwrap();
    let y = a[0]
        .1
        .as_device()
        .expect("Neg's output stays on the device")
        .clone();
    let before = relu.counters();
    let b = relu
        .run_bound(vec![("x".into(), Bound::Device(y))], &[])
        .unwrap();
    let after = relu.counters();
    assert_eq!(
        after.h2d_bytes, before.h2d_bytes,
        "the device input was uploaded"
    );
    match b.into_iter().next().unwrap().1 {
        Bound::Host(Value::Tensor(t)) => same(&t, "device to device"),
        other => panic!("{other:?}"),
    }

    // Pinned in, pinned out: one direct copy each way, nothing staged or rebuilt.
    let negx = Tensor::from_f32(
        &[n],
        x.to_f64_vec().unwrap().iter().map(|v| -*v as f32).collect(),
    )
    .unwrap();
    let xp = std::sync::Arc::new(relu.pin(negx).unwrap());
    let mut yp = relu
        .pin(Tensor::from_f32(&[n], vec![f32::NAN; n]).unwrap())
        .unwrap();
    for round in 0..2 {
        let before = relu.counters();
        relu.run_into(
            vec![("x".into(), Bound::Pinned(xp.clone()))],
            &mut [("y", &mut yp)],
        )
        .unwrap();
        let after = relu.counters();
        same(yp.tensor(), &format!("pinned, round {round}"));
        assert_eq!(after.h2d_calls - before.h2d_calls, 1, "{after:?}");
        assert_eq!(after.stage_nanos, before.stage_nanos, "staged: {after:?}");
        assert_eq!(
            after.readback_nanos, before.readback_nanos,
            "rebuilt: {after:?}"
        );
    }
}
