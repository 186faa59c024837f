use std::collections::HashMap;
use std::sync::Arc;

use super::*;
use crate::session::thresholds::{Adapter, Entry, find};
use crate::session::trial::Whole;

fn node(op: &str, attrs: &[(&str, i64)]) -> Node {
    Node {
        name: format!("{op}_0"),
        op_type: op.into(),
        domain: String::new(),
        opset: 17,
        inputs: vec![],
        outputs: vec![],
        attrs: attrs
            .iter()
            .map(|(k, v)| (k.to_string(), Attr::Int(*v)))
            .collect::<HashMap<_, _>>(),
    }
}

fn size(op: &str, attrs: &[(&str, i64)], shapes: &[&[usize]]) -> NodeSize {
    let s: Vec<Option<&[usize]>> = shapes.iter().map(|s| Some(*s)).collect();
    measure(&node(op, attrs), &s, Some(DType::F32), 0)
}

#[test]
fn families_classes_and_work() {
    let add = size("Add", &[], &[&[4, 8], &[4, 8]]);
    assert_eq!(
        (add.family, add.class, add.work),
        ("elementwise", "same", 32)
    );
    let bc = size("Mul", &[], &[&[4, 8], &[8]]);
    assert_eq!((bc.class, bc.work), ("broadcast", 32));
    assert_eq!(size("Relu", &[], &[&[5]]).class, "unary");
    // MatMul work is batch·M·N·K; a vector side is a GEMV.
    let mm = size("MatMul", &[], &[&[2, 3, 4], &[4, 5]]);
    assert_eq!(
        (mm.family, mm.class, mm.work),
        ("matmul", "gemm", 2 * 3 * 5 * 4)
    );
    assert_eq!(size("MatMul", &[], &[&[1, 64], &[64, 10]]).class, "gemv");
    let gemm = size("Gemm", &[("transB", 1)], &[&[8, 16], &[32, 16]]);
    assert_eq!((gemm.class, gemm.work), ("gemm", 8 * 32 * 16));
    // Conv work: batch·spatial·(weight elements); classes by kernel and groups.
    let c = size("Conv", &[], &[&[1, 3, 8, 8], &[16, 3, 3, 3]]);
    assert_eq!(
        (c.family, c.class, c.work),
        ("conv", "spatial", 64 * 16 * 27)
    );
    assert_eq!(
        size("Conv", &[], &[&[1, 8, 8, 8], &[16, 8, 1, 1]]).class,
        "pointwise"
    );
    assert_eq!(
        size("Conv", &[("group", 8)], &[&[1, 8, 8, 8], &[8, 1, 3, 3]]).class,
        "depthwise"
    );
    assert_eq!(
        size("GlobalAveragePool", &[], &[&[1, 8, 4, 4]]).class,
        "global"
    );
    assert_eq!(size("Softmax", &[], &[&[4, 8]]).family, "softmax");
    assert_eq!(work_unit("conv"), "multiply-adds");
    // A generator is sized by what it makes.
    let g = measure(&node("ConstantOfShape", &[]), &[Some(&[2])], None, 1 << 20);
    assert_eq!((g.family, g.work), ("movement", 1 << 20));
}

fn crossover(status: Status, threshold: Option<u64>) -> Crossover {
    Crossover {
        status,
        threshold,
        cpu_wins_up_to: None,
        largest_measured: Some(1 << 26),
        points: 10,
        decided: 8,
    }
}

fn table(entries: Vec<(&str, &str, &str, Crossover)>) -> ThresholdTable {
    ThresholdTable {
        adapter: Adapter {
            id: Adapter::id_for("cuda", "Test GPU"),
            provider: "cuda".into(),
            name: "Test GPU".into(),
            driver: Some("1.0".into()),
        },
        cpu: "test cpu".into(),
        threads: 2,
        matrix: String::new(),
        commit: String::new(),
        date: String::new(),
        entries: entries
            .into_iter()
            .map(|(family, class, dtype, host)| Entry {
                family: family.into(),
                class: class.into(),
                dtype: dtype.into(),
                unit: work_unit(family).into(),
                resident: host.clone(),
                host,
            })
            .collect(),
    }
}

#[test]
fn a_measured_crossover_decides_both_sides_of_it() {
    let t = table(vec![(
        "elementwise",
        "same",
        "float32",
        crossover(Status::Crossover, Some(100_000)),
    )]);
    let mut s = size("Add", &[], &[&[99_999], &[99_999]]);
    let below = decide_host(16, Some(&t), &s);
    assert!(!below.device, "{below:?}");
    assert!(
        below.rule.contains("measured crossover 100000"),
        "{}",
        below.rule
    );
    s.work = 100_000;
    assert!(decide_host(16, Some(&t), &s).device);
    // The floor alone (16) would have sent the smaller node to the device: the table is what
    // decided.
    assert!(decide_host(16, None, &size("Add", &[], &[&[99_999], &[99_999]])).device);
}

/// A generator's host input is a few elements: it is judged by the crossover of device-resident
/// inputs, not by one that pays uploads of its (large) work.
#[test]
fn a_generator_is_judged_without_uploads() {
    let mut t = table(vec![(
        "movement",
        "rows",
        "int64",
        crossover(Status::CpuAlways, None),
    )]);
    t.entries[0].resident = crossover(Status::Crossover, Some(65_536));
    let g = measure(
        &node("ConstantOfShape", &[]),
        &[Some(&[2])],
        Some(DType::I64),
        1 << 16,
    );
    let d = decide_host(1 << 14, Some(&t), &g);
    assert!(d.device && d.rule.contains("a generator"), "{}", d.rule);
    let small = measure(
        &node("ConstantOfShape", &[]),
        &[Some(&[2])],
        Some(DType::I64),
        4096,
    );
    assert!(!decide_host(1 << 14, Some(&t), &small).device);
    // The same work with uploads to pay (a node that is not a generator) stays on the CPU.
    let moved = measure(
        &node("Transpose", &[]),
        &[Some(&[256, 256])],
        Some(DType::I64),
        0,
    );
    assert_eq!((moved.family, moved.class), ("movement", "rows"));
    assert!(!decide_host(1 << 14, Some(&t), &moved).device);
}

#[test]
fn without_a_decided_measurement_the_floor_decides_and_says_why() {
    let s = size("Add", &[], &[&[1000], &[1000]]);
    let none = decide_host(1 << 14, None, &s);
    assert!(!none.device);
    assert!(none.rule.contains("no measured table"), "{}", none.rule);
    let undecided = table(vec![(
        "elementwise",
        "same",
        "float32",
        crossover(Status::Undecided, None),
    )]);
    let d = decide_host(1 << 14, Some(&undecided), &s);
    assert!(
        !d.device && d.rule.contains("inside the noise"),
        "{}",
        d.rule
    );
    let cpu = table(vec![(
        "elementwise",
        "same",
        "float32",
        crossover(Status::CpuAlways, None),
    )]);
    let big = size("Add", &[], &[&[1 << 24], &[1 << 24]]);
    let d = decide_host(1 << 14, Some(&cpu), &big);
    assert!(
        !d.device && d.rule.contains("CPU won at every"),
        "{}",
        d.rule
    );
}

#[test]
fn lookup_falls_back_to_another_dtype_and_says_so() {
    let t = table(vec![
        (
            "elementwise",
            "same",
            "float16",
            crossover(Status::Crossover, Some(10)),
        ),
        (
            "elementwise",
            "same",
            "float32",
            crossover(Status::Crossover, Some(20)),
        ),
    ]);
    let (e, how) = t.lookup("elementwise", "same", Some(DType::F16)).unwrap();
    assert_eq!((e.dtype.as_str(), how.as_str()), ("float16", ""));
    let (e, how) = t.lookup("elementwise", "same", Some(DType::I64)).unwrap();
    assert_eq!(e.dtype, "float32");
    assert!(how.contains("float32 entry"), "{how}");
    let (e, how) = t
        .lookup("elementwise", "broadcast", Some(DType::F32))
        .unwrap();
    assert_eq!(e.class, "same");
    assert!(how.contains("elementwise/same"), "{how}");
    assert!(t.lookup("conv", "spatial", Some(DType::F32)).is_none());
}

#[test]
fn tables_are_found_by_provider_and_name_preferring_the_driver() {
    let a = Arc::new(table(vec![]));
    let mut other_driver = table(vec![]);
    other_driver.adapter.driver = Some("0.9".into());
    other_driver.cpu = "older".into();
    let b = Arc::new(other_driver);
    let tables = vec![b.clone(), a.clone()];
    let (t, note) = find(&tables, "cuda", "Test GPU", Some("1.0"));
    assert_eq!(t.unwrap().cpu, "test cpu", "{note}");
    let (t, note) = find(&tables, "cuda", "Test GPU", Some("2.0"));
    assert!(t.is_some());
    assert!(note.contains("measured with driver 0.9"), "{note}");
    // Another provider's adapter of the same name is not this one.
    let (t, note) = find(&tables, "wgpu", "Test GPU", Some("1.0"));
    assert!(t.is_none());
    assert!(note.contains("conservative defaults"), "{note}");
    assert_eq!(
        Adapter::id_for("cuda", "NVIDIA H200 (compute capability 9.0)"),
        "cuda-nvidia-h200-compute-capability-9-0"
    );
}

#[test]
fn an_explicit_provider_list_never_keeps_a_node_on_the_cpu() {
    let d = Dispatch::new(0, vec![], 1, true);
    let n = node("Add", &[]);
    assert!(!d.keep_on_cpu(0, 0, &n, &[], Whole::Cpu));
    assert_eq!(d.decisions(), vec![None]);
    assert!(d.trial.report().is_none(), "no trial without auto");
    // Under auto, the decision is kept for reports.
    let d = Dispatch::new(1 << 14, vec![None], 1, true);
    assert!(d.keep_on_cpu(0, 0, &n, &[], Whole::Nodes));
    let kept = d.decisions();
    assert!(kept[0].as_ref().is_some_and(|k| !k.device), "{kept:?}");
    // A whole-model placement overrides the node's rule, and says so.
    assert!(!d.keep_on_cpu(0, 0, &n, &[], Whole::Device));
    let kept = d.decisions();
    assert!(
        kept[0]
            .as_ref()
            .is_some_and(|k| k.device && k.rule.contains("whole-model")),
        "{kept:?}"
    );
}

/// `auto` on the simulated device: the trial's runs give each placement its turn, every run
/// returns the same bits (the simulated device runs the CPU kernels), and afterwards every run
/// uses the choice the report names.
#[test]
fn auto_trial_runs_every_placement_then_keeps_one() {
    use crate::session::trial::TRIAL_RUNS;
    use crate::{Provider, Session, SessionOptions};
    let model = crate::session::profile_tests::model();
    let options = SessionOptions {
        providers: vec![Provider::Sim, Provider::Cpu],
        min_device_elements: 1 << 14,
        ..Default::default()
    };
    let s = Session::from_model(model, options).unwrap();
    let feeds = crate::inputs::generate(&s.model().graph, &[], &Default::default(), 3).unwrap();
    let first = s.run(feeds.clone()).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 1..TRIAL_RUNS + 3 {
        let out = s.run(feeds.clone()).unwrap();
        for ((_, a), (_, b)) in first.iter().zip(&out) {
            let (a, b) = (a.as_tensor().unwrap(), b.as_tensor().unwrap());
            assert_eq!(a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
        }
        let on_device = s
            .dispatch_decisions()
            .iter()
            .flatten()
            .filter(|d| d.device)
            .count();
        seen.insert(on_device);
    }
    let report = s.auto_trial().unwrap();
    assert!(report.contains("chosen"), "{report}");
    // The CPU alone (0 nodes on the device) and every node on it were both tried.
    assert!(seen.contains(&0) && seen.len() >= 2, "{seen:?}");
}

/// The trial's first run of each device placement is checked by both oracles (the report counts
/// the checks), and with a store the choice is recorded: a second session of the same model,
/// adapter and input shapes uses it from its first run with no trial (`choices`' tests show that
/// other shapes, adapters or models are other keys).
#[test]
fn auto_checks_its_placements_and_keeps_the_choice() {
    use crate::session::trial::TRIAL_RUNS;
    use crate::{Provider, Session, SessionOptions};
    let dir = std::env::temp_dir().join(format!("quorum-auto-keep-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = dir.join("auto.json");
    let options = SessionOptions {
        providers: vec![Provider::Sim, Provider::Cpu],
        min_device_elements: 1 << 14,
        auto_choices: Some(store.clone()),
        ..Default::default()
    };
    let model = crate::session::profile_tests::model();
    let s = Session::from_model(model.clone(), options.clone()).unwrap();
    let feeds = crate::inputs::generate(&s.model().graph, &[], &Default::default(), 3).unwrap();
    for _ in 0..TRIAL_RUNS {
        s.run(feeds.clone()).unwrap();
    }
    let report = s.auto_trial().unwrap();
    assert!(report.contains("chosen"), "{report}");
    assert!(report.contains("device results checked"), "{report}");
    assert!(!report.contains("not kept"), "{report}");
    // The checked runs were verified in shadow mode although the session's mode is off.
    assert!(s.counters().verify_checks > 0);
    assert_eq!(s.counters().verify_mismatches, 0);
    assert!(store.exists());

    let again = Session::from_model(model, options).unwrap();
    again.run(feeds.clone()).unwrap();
    let kept = again.auto_trial().unwrap();
    assert!(kept.contains("kept from"), "{kept}");
    assert_eq!(
        again.counters().verify_checks,
        0,
        "no trial, no checked run"
    );

    let _ = std::fs::remove_dir_all(&dir);
}

/// With the check off, the trial's runs verify nothing and the choice is made on time alone.
#[test]
fn auto_check_off_verifies_nothing() {
    use crate::session::trial::TRIAL_RUNS;
    use crate::{Provider, Session, SessionOptions};
    let options = SessionOptions {
        providers: vec![Provider::Sim, Provider::Cpu],
        min_device_elements: 1 << 14,
        auto_check: false,
        ..Default::default()
    };
    let s = Session::from_model(crate::session::profile_tests::model(), options).unwrap();
    let feeds = crate::inputs::generate(&s.model().graph, &[], &Default::default(), 3).unwrap();
    for _ in 0..TRIAL_RUNS {
        s.run(feeds.clone()).unwrap();
    }
    let report = s.auto_trial().unwrap();
    assert!(report.contains("chosen"), "{report}");
    assert!(!report.contains("checked"), "{report}");
    assert_eq!(s.counters().verify_checks, 0);
}
