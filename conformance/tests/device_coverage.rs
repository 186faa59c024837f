//! Device-coverage bookkeeping without a GPU: a fake device engine (the CPU session, with a made-up
//! placement and run-time fallback) goes through the real runner and reports, and an engine without a
//! device reports nothing.
#![forbid(unsafe_code)]
use std::path::Path;

use quorum::{NodePlacement, Provider, Session, SessionOptions, Value};
use quorum_conformance::case::{self, Case};
use quorum_conformance::coverage::{Coverage, NodeCounts};
use quorum_conformance::engine::{self, Cpu, Engine, EngineError, Prepared};
use quorum_conformance::report::{EngineReport, family_of_op};
use quorum_conformance::{corpus, runner};

/// Ops the fake device claims at plan time; of those, `Mul` declines at run time.
const CLAIMED: &[&str] = &["Add", "Mul", "ReduceSum"];
const DECLINES: &str = "Mul";

struct FakeDevice;

struct FakeModel(Session);

impl Engine for FakeDevice {
    fn name(&self) -> &str {
        "fake-device"
    }

    fn prepare(&self, path: &Path) -> Result<Box<dyn Prepared>, EngineError> {
        let mut model = quorum::loader::model_from_file(path, &Default::default())
            .map_err(|e| EngineError::Failed(e.to_string()))?;
        engine::name_nodes(&mut model);
        let options = SessionOptions {
            fold_constants: false,
            ..Default::default()
        };
        Ok(Box::new(FakeModel(
            Session::from_model(model, options).map_err(|e| EngineError::Failed(e.to_string()))?,
        )))
    }
}

impl Prepared for FakeModel {
    fn run(&self, inputs: Vec<(String, Value)>) -> Result<Vec<Value>, EngineError> {
        Ok(self
            .0
            .run(inputs)
            .map_err(|e| EngineError::Failed(e.to_string()))?
            .into_iter()
            .map(|(_, v)| v)
            .collect())
    }

    fn coverage(&self) -> Option<Coverage> {
        let placement: Vec<NodePlacement> = self
            .0
            .placement()
            .iter()
            .map(|p| NodePlacement {
                provider: if CLAIMED.contains(&p.op.as_str()) {
                    Provider::Cuda
                } else {
                    Provider::Cpu
                },
                ..p.clone()
            })
            .collect();
        let fell_back: Vec<String> = placement
            .iter()
            .filter(|p| p.op == DECLINES)
            .map(|p| p.node.clone())
            .collect();
        Some(Coverage::from_placement(&placement, &fell_back))
    }
}

const IDS: &[&str] = &[
    "node/test_add",
    "node/test_mul",
    "node/test_relu",
    "cases/reducesum_non_last_axis",
];

fn cases() -> Vec<Case> {
    let dir = corpus::default_dir();
    corpus::ensure(&dir).expect("corpus");
    case::discover(&dir)
        .expect("cases")
        .into_iter()
        .filter(|c| IDS.contains(&c.id.as_str()))
        .collect()
}

#[test]
fn outcomes_and_reports_carry_device_coverage() {
    let cases = cases();
    assert_eq!(cases.len(), IDS.len());
    let outcomes = runner::run_all(&FakeDevice, &cases, &|_| false, 2, &|_| {});
    let by_id = |id: &str| outcomes.iter().find(|o| o.id == id).unwrap();
    for o in &outcomes {
        assert_eq!(o.status, "pass", "{}: {}", o.id, o.detail);
    }
    let total = |id: &str| by_id(id).coverage.as_ref().unwrap().total();
    assert_eq!(total("node/test_add"), NodeCounts { device: 1, cpu: 0 });
    assert_eq!(total("node/test_mul"), NodeCounts { device: 0, cpu: 1 });
    assert_eq!(total("node/test_relu"), NodeCounts { device: 0, cpu: 1 });
    // Constant (no folding, so it is a node) on the CPU, ReduceSum on the device.
    assert_eq!(
        total("cases/reducesum_non_last_axis"),
        NodeCounts { device: 1, cpu: 1 }
    );
    let mul = by_id("node/test_mul").coverage.clone().unwrap();
    assert_eq!(mul.fell_back.len(), 1, "{mul:?}");

    let report = EngineReport {
        engine: "fake-device",
        device: "no device".into(),
        outcomes: &outcomes,
        environment: None,
    };
    assert_eq!(report.coverage_total(), NodeCounts { device: 2, cpu: 3 });
    assert_eq!(
        report.coverage_by_part()["node"],
        NodeCounts { device: 1, cpu: 2 }
    );
    let reduce = report.coverage_by_family()[family_of_op("ReduceSum")];
    assert_eq!(reduce.device, 1);
    let md = report.markdown();
    assert!(md.contains("nodes on the device"), "{md}");
    assert!(md.contains("| 2/5 (40%) |"), "{md}");
    assert!(md.contains("| 1/3 (33%) |"), "{md}");

    let dir = std::env::temp_dir().join(format!("quorum-coverage-{}", std::process::id()));
    report.write_json(&dir).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("fake-device.json")).unwrap())
            .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(json["device_coverage"]["total"]["device"], 2);
    assert_eq!(json["device_coverage"]["total"]["cpu"], 3);
    let mul = json["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "node/test_mul")
        .unwrap();
    assert_eq!(mul["device_nodes"], 0);
    assert_eq!(mul["cpu_nodes"], 1);
    assert_eq!(mul["fell_back"].as_array().unwrap().len(), 1);
    assert_eq!(mul["cpu_ops"], serde_json::json!(["Mul"]));
}

#[test]
fn an_engine_without_a_device_reports_no_coverage() {
    let cases = cases();
    let outcomes = runner::run_all(&Cpu, &cases, &|_| false, 2, &|_| {});
    assert!(outcomes.iter().all(|o| o.coverage.is_none()));
    let report = EngineReport {
        engine: "cpu",
        device: "cpu".into(),
        outcomes: &outcomes,
        environment: None,
    };
    assert!(!report.markdown().contains("nodes on the device"));
}

#[test]
fn a_cpu_session_counts_every_node_on_the_cpu() {
    let case = cases()
        .into_iter()
        .find(|c| c.id == "cases/reducesum_non_last_axis")
        .unwrap();
    let mut model =
        quorum::loader::model_from_file(&case.model_path(), &Default::default()).unwrap();
    engine::name_nodes(&mut model);
    let session = Session::from_model(
        model,
        SessionOptions {
            fold_constants: false,
            ..Default::default()
        },
    )
    .unwrap();
    let c = engine::session_coverage(&session);
    assert_eq!(c.total(), NodeCounts { device: 0, cpu: 2 });
    assert!(c.fell_back.is_empty());
}

#[test]
fn the_cuda_engine_is_skipped_where_there_is_no_device() {
    let cuda = engine::by_name("cuda").unwrap();
    if cuda.available().is_ok() {
        return; // a GPU machine: nothing to check here
    }
    let defaults: Vec<String> = engine::all()
        .into_iter()
        .filter(|e| e.runs_by_default() && e.available().is_ok())
        .map(|e| e.name().to_string())
        .collect();
    assert!(!defaults.contains(&"cuda".to_string()), "{defaults:?}");
    assert!(defaults.contains(&"cpu".to_string()));
}
