//! The stream fuzzer's CPU side: random DAG models run on the simulated device (`--provider sim`,
//! CUDA's placement and schedule, the CUDA run's allocation and release rules) with several streams;
//! every run's command log goes through the happens-before checker, and every result must equal the
//! CPU's. `cargo xtask fuzz-streams` runs the same on a GPU.
//!
//! Each seed runs on 1, 2, 3, 4 and 8 streams; the one-stream run is also judged strictly against
//! the oracles. Beside the random DAGs, the 64³ all-ones MatMul regression.
#![forbid(unsafe_code)]
use quorum::cmdlog::Command;
use quorum::session::GraphCapture;
use quorum::{Provider, Session, SessionOptions, Value};
use quorum_fuzz::{dags, hb};

fn options(provider: Provider, streams: usize) -> SessionOptions {
    SessionOptions {
        providers: vec![provider, Provider::Cpu],
        streams,
        command_log: true,
        poison_device_buffers: Some(0xff),
        graph_capture: GraphCapture::Off,
        ..Default::default()
    }
}

fn outputs(s: &Session, inputs: &[(String, Value)]) -> Vec<Value> {
    s.run(inputs.to_vec())
        .unwrap()
        .into_iter()
        .map(|(_, v)| v)
        .collect()
}

/// Runs `dag` on the simulated device with `streams` streams and checks every log; returns the
/// number of commands checked.
fn check_dag(dag: &dags::Dag, streams: usize, what: &str) -> usize {
    let cpu = Session::from_bytes(&dag.bytes, SessionOptions::default()).unwrap();
    let want = outputs(&cpu, &dag.inputs);
    // On one stream every device node is also judged against the oracles, as the device fuzzer
    // judges its reference (random inputs reach corners like Sigmoid's f64 underflow).
    let verify = if streams == 1 {
        quorum::VerifyMode::Strict
    } else {
        quorum::VerifyMode::Off
    };
    let sim = Session::from_bytes(
        &dag.bytes,
        SessionOptions {
            verify,
            ..options(Provider::Sim, streams)
        },
    )
    .unwrap();
    let mut commands = 0;
    for round in 0..2 {
        assert_eq!(outputs(&sim, &dag.inputs), want, "{what}: round {round}");
    }
    let logs = sim.take_command_logs();
    // The session's runs one after another, as one log, each run its own host: what a run hands
    // back to the pools and publishes in the weight cache is taken by the next, and the next is
    // ordered after the first only through those (the first run's end synchronises before its
    // returns, and a weight's upload before its publication).
    let across = hb::check_runs(&logs, 5);
    assert!(
        across.is_clean(),
        "{what}, across runs: {:?}",
        across.first()
    );
    for (run, log) in logs.iter().enumerate() {
        let r = hb::check(log, 5);
        assert!(
            r.is_clean(),
            "{what}, run {run}: {}\n{}\n{:?}",
            r.races
                .iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join("\n"),
            r.after_release
                .iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join("\n"),
            r.unrecorded_waits
        );
        commands += log.len();
    }
    commands
}

#[test]
fn random_dags_on_several_streams_have_no_unordered_conflicts() {
    let mut commands = 0;
    let mut multi = 0;
    let mut placed = std::collections::BTreeSet::new();
    for seed in 0..60u64 {
        let dag = dags::generate(seed, 12 + (seed as usize % 30));
        for streams in [1, 2, 3, 4, 8] {
            commands += check_dag(&dag, streams, &format!("seed {seed}, {streams} streams"));
            if streams > 1 {
                let s = Session::from_bytes(&dag.bytes, options(Provider::Sim, streams)).unwrap();
                multi += (s.schedule().streams > 1) as usize;
                placed.extend(
                    s.placement()
                        .iter()
                        .filter(|p| p.provider == Provider::Sim)
                        .map(|p| p.op.clone()),
                );
            }
        }
    }
    eprintln!(
        "{commands} commands checked; {multi} multi-stream schedules; on the device: {placed:?}"
    );
    assert!(multi > 60, "only {multi} schedules used several streams");
    // The fuzzer's breadth: every family of the generator reached the device.
    for op in [
        "MatMul",
        "Add",
        "Softmax",
        "LayerNormalization",
        "ReduceMean",
        "Gather",
        "Conv",
        "Transpose",
        "Concat",
        "Tanh",
    ] {
        assert!(placed.contains(op), "no {op} ran on the device: {placed:?}");
    }
}

/// The check across runs (above, in `check_dag`) can fail: with the first run's end-of-run
/// synchronisations taken out of its log, the second run writes ranges the pool handed back from the
/// first while the first run's streams may still be using them, and the concatenated log shows a
/// race between a command of each run. The first run's own log shows it too, at its returns to the
/// pools.
#[test]
fn the_check_across_runs_sees_reuse_the_first_run_did_not_wait_for() {
    let mut crossing = 0;
    for seed in 0..12u64 {
        let dag = dags::generate(seed, 12 + (seed as usize % 30));
        let sim = Session::from_bytes(&dag.bytes, options(Provider::Sim, 2)).unwrap();
        for _ in 0..2 {
            sim.run(dag.inputs.clone()).unwrap();
        }
        let logs = sim.take_command_logs();
        assert_eq!(logs.len(), 2);
        assert!(hb::check(&logs.concat(), 5).is_clean());
        // The broken twin: run 1 ends without synchronising its streams.
        let first: Vec<Command> = logs[0]
            .iter()
            .filter(|c| !matches!(c, Command::SyncStream { .. }))
            .cloned()
            .collect();
        assert!(
            !hb::check(&first, 1).is_clean(),
            "seed {seed}: returns to the pool unordered after the run's work went unreported"
        );
        let boundary = first.len();
        let joined: Vec<Command> = first.into_iter().chain(logs[1].iter().cloned()).collect();
        let r = hb::check(&joined, 10_000);
        crossing += r
            .races
            .iter()
            .any(|x| x.first < boundary && x.second >= boundary) as usize;
    }
    assert!(
        crossing >= 6,
        "only {crossing} of 12 sessions showed a race across the unsynchronised runs"
    );
}

/// One session run by several threads at once (each run with its own streams, buffers from the
/// session's shared pools): every result equals the CPU's, every run's log is clean, and so are
/// all the runs' commands checked together in the order the threads issued them.
#[test]
fn concurrent_runs_of_one_session_agree_and_their_logs_are_clean() {
    let (mut runs, mut commands) = (0, 0);
    for seed in 100..112u64 {
        let dag = dags::generate(seed, 16 + (seed as usize % 20));
        let cpu = Session::from_bytes(&dag.bytes, SessionOptions::default()).unwrap();
        let want = outputs(&cpu, &dag.inputs);
        let sim = Session::from_bytes(&dag.bytes, options(Provider::Sim, 3)).unwrap();
        std::thread::scope(|s| {
            for t in 0..4 {
                let (sim, dag, want) = (&sim, &dag, &want);
                s.spawn(move || {
                    for round in 0..3 {
                        assert_eq!(
                            &outputs(sim, &dag.inputs),
                            want,
                            "seed {seed}, thread {t}, round {round}"
                        );
                    }
                });
            }
        });
        for (run, log) in sim.take_command_logs().iter().enumerate() {
            let r = hb::check(log, 5);
            assert!(r.is_clean(), "seed {seed}, run {run}: {:?}", r.first());
            runs += 1;
        }
        // All twelve runs together, as the threads issued them.
        let all = sim.take_session_log();
        let r = hb::check_session(&all, 5);
        assert!(
            r.is_clean(),
            "seed {seed}, the session's runs together: {:?}",
            r.first()
        );
        commands += all.len();
    }
    assert!(runs >= 12 * 12, "only {runs} logs");
    eprintln!("{runs} concurrent runs, {commands} commands checked together, no report");
}

/// The regression this project exists for: a 64³ MatMul of all-ones operands produced on two other
/// streams.
#[test]
fn all_ones_matmul_from_other_streams() {
    use prost::Message;
    use quorum::proto;
    let node = |op: &str, i: &[&str], o: &str| proto::NodeProto {
        op_type: Some(op.into()),
        name: Some(o.into()),
        input: i.iter().map(|s| s.to_string()).collect(),
        output: vec![o.into()],
        ..Default::default()
    };
    let value = |n: &str| proto::ValueInfoProto {
        name: Some(n.into()),
        ..Default::default()
    };
    let model = proto::ModelProto {
        ir_version: Some(8),
        opset_import: vec![proto::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(proto::GraphProto {
            name: Some("ones".into()),
            node: vec![
                node("Relu", &["a"], "ra"),
                node("Relu", &["b"], "rb"),
                node("MatMul", &["ra", "rb"], "y"),
            ],
            input: vec![value("a"), value("b")],
            output: vec![value("y")],
            ..Default::default()
        }),
        ..Default::default()
    };
    let ones = quorum::Tensor::from_f32(&[64, 64], vec![1.0; 4096]).unwrap();
    let dag = dags::Dag {
        bytes: model.encode_to_vec(),
        inputs: vec![
            ("a".into(), Value::Tensor(ones.clone())),
            ("b".into(), Value::Tensor(ones)),
        ],
        nodes: 3,
    };
    for streams in [1, 2, 4] {
        check_dag(
            &dag,
            streams,
            &format!("all-ones MatMul, {streams} streams"),
        );
    }
}

/// Graph capture on the simulated device, which captures and replays as CUDA does (fixed buffers,
/// staging and output copies; a replay stages its inputs through the run protocol's code): every
/// replay of a captured DAG on other inputs equals the CPU's result for those inputs, run by one
/// thread or by three at once, and every log (captures and replays included) is clean, alone, one
/// after another and as the threads issued them.
#[test]
fn captured_replays_on_the_simulated_device_follow_their_inputs_and_log_clean() {
    let (mut captured, mut replays, mut commands) = (0, 0, 0);
    for seed in 200..224u64 {
        let dag = dags::generate(seed, 10 + (seed as usize % 25));
        let cpu = Session::from_bytes(&dag.bytes, SessionOptions::default()).unwrap();
        let variants: Vec<_> = (0..4)
            .map(|v| {
                let inputs = dags::variant(&dag.inputs, v);
                let want = outputs(&cpu, &inputs);
                (inputs, want)
            })
            .collect();
        let sim = Session::from_bytes(
            &dag.bytes,
            SessionOptions {
                graph_capture: GraphCapture::On,
                ..options(Provider::Sim, 1 + seed as usize % 3)
            },
        )
        .unwrap();
        // Warm-up, capture, then replays on every variant.
        for r in 0..8 {
            let (inputs, want) = &variants[r % variants.len()];
            assert_eq!(&outputs(&sim, inputs), want, "seed {seed}, run {r}");
        }
        std::thread::scope(|s| {
            for t in 0..3 {
                let (sim, variants) = (&sim, &variants);
                s.spawn(move || {
                    for r in 0..4 {
                        let (inputs, want) = &variants[(r + t) % variants.len()];
                        assert_eq!(&outputs(sim, inputs), want, "seed {seed}, thread {t}");
                    }
                });
            }
        });
        let n = sim.counters().graph_replays;
        // A DAG with a node the device declines (its Shrink) never captures; every other does.
        assert!(
            n > 0 || sim.capture_blocker().is_some(),
            "seed {seed}: not captured: {:?}",
            sim.graph_report()
        );
        if n > 0 {
            captured += 1;
            replays += n;
        }
        let logs = sim.take_command_logs();
        for (run, log) in logs.iter().enumerate() {
            let r = hb::check(log, 5);
            assert!(r.is_clean(), "seed {seed}, run {run}: {:?}", r.first());
            commands += log.len();
        }
        let r = hb::check_session(&sim.take_session_log(), 5);
        assert!(r.is_clean(), "seed {seed}, together: {:?}", r.first());
    }
    assert!(captured >= 8, "only {captured} of 24 DAGs were captured");
    eprintln!(
        "{captured} DAGs captured, {replays} replays, {commands} commands checked, no report"
    );
}

/// IO binding (`Session::run_bound`) on random DAGs: every input handed in already on the device,
/// every output left there, then a plain run of the same session; the values copied back are the
/// CPU's, and every run's log is clean alone and across runs (a bound run reads buffers another
/// run wrote, ordered only by that run's end).
#[test]
fn bound_runs_of_random_dags_match_the_cpu_and_log_clean() {
    use quorum::session::Bound;
    for seed in 0..24u64 {
        let dag = dags::generate(seed, 10 + (seed as usize % 25));
        let streams = [1, 2, 4][seed as usize % 3];
        let cpu = Session::from_bytes(&dag.bytes, SessionOptions::default()).unwrap();
        let want = outputs(&cpu, &dag.inputs);
        let sim = Session::from_bytes(&dag.bytes, options(Provider::Sim, streams)).unwrap();
        let inputs: Vec<(String, Bound)> = dag
            .inputs
            .iter()
            .map(|(n, v)| {
                let t = v.as_tensor().unwrap();
                (n.clone(), Bound::Device(sim.to_device(t).unwrap()))
            })
            .collect();
        let names: Vec<String> = cpu
            .model()
            .graph
            .outputs
            .iter()
            .map(|o| o.name.clone())
            .collect();
        let keep: Vec<&str> = names.iter().map(String::as_str).collect();
        let got = sim.run_bound(inputs, &keep).unwrap();
        for ((name, b), w) in got.into_iter().zip(&want) {
            let v = b.into_host().unwrap();
            assert_eq!(&v, w, "seed {seed}, output {name}");
        }
        assert_eq!(outputs(&sim, &dag.inputs), want, "seed {seed}, plain run");
        let logs = sim.take_command_logs();
        let across = hb::check_runs(&logs, 5);
        assert!(
            across.is_clean(),
            "seed {seed}, across runs: {:?}",
            across.first()
        );
        for (run, log) in logs.iter().enumerate() {
            let r = hb::check(log, 5);
            assert!(r.is_clean(), "seed {seed}, run {run}: {:?}", r.first());
        }
    }
}
