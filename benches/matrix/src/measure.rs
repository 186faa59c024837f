//! Timing one case on one provider, residency and graph mode: a one-node session, warm-up runs
//! (enough for a graph to be captured), then timed runs until both a minimum count and a time
//! budget are reached. Every run returns its outputs on the host, so a device's work is complete
//! when the clock stops.
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorum::inputs::{Rng, random_tensor};
use quorum::ir::{Graph, Model, Node, ValueInfo, ValueType};
use quorum::session::GraphCapture;
use quorum::{Provider, Session, SessionOptions, Value};

use crate::cases::Case;

/// Where a case's inputs are when a run starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Residency {
    /// Non-weight inputs come from the host every run (the device pays the uploads).
    Host,
    /// Every input is already on the device (initializers, resident after the first run).
    Resident,
}

/// Whether runs launch node by node or replay a captured graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GraphMode {
    Eager,
    Replay,
}

/// Median, p10 and p90 of a sample of run times.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Stats {
    pub median_ms: f64,
    pub p10_ms: f64,
    pub p90_ms: f64,
    /// Every timed run, in order (milliseconds).
    pub samples_ms: Vec<f64>,
}

/// The `p`th percentile of sorted values, interpolated linearly (as `quorum bench` reports).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = p / 100.0 * (sorted.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
}

impl Stats {
    pub fn from_samples(samples: Vec<f64>) -> Stats {
        let mut sorted = samples.clone();
        sorted.sort_by(f64::total_cmp);
        Stats {
            median_ms: percentile(&sorted, 50.0),
            p10_ms: percentile(&sorted, 10.0),
            p90_ms: percentile(&sorted, 90.0),
            samples_ms: samples
                .into_iter()
                .map(|t| (t * 1e4).round() / 1e4)
                .collect(),
        }
    }

    /// Whether this and `other` are told apart: their p10–p90 ranges do not overlap. A difference
    /// inside the spread decides nothing.
    pub fn separated_from(&self, other: &Stats) -> bool {
        self.p90_ms < other.p10_ms || other.p90_ms < self.p10_ms
    }
}

/// How long to time each point.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub min_samples: usize,
    pub max_samples: usize,
    pub time: Duration,
}

/// A case's model: its node, then the node's output flattened (a view) and its first element
/// sliced out as the graph output. Non-weight inputs are graph inputs under [`Residency::Host`],
/// every input an initializer under [`Residency::Resident`]. Returns the model and the run inputs.
///
/// The tail is what a node inside a chain of device nodes sees: its output stays where it was made
/// and a consumer reads it there. Without it every point paid the download of the node's whole
/// output, which a chain does not pay; the first H200 matrix, measured that way, had the CPU win
/// every elementwise, norm and convolution size "with the inputs on the host" and placed whole
/// models on the CPU. The tail's own cost (a one-element slice, the same on every provider) is a
/// launch and a four-byte download.
pub fn model(
    case: &Case,
    residency: Residency,
    seed: u64,
) -> quorum::Result<(Model, Vec<(String, Value)>)> {
    let mut rng = Rng::new(seed);
    let node = case.node();
    let mut graph = Graph {
        name: "matrix".into(),
        outputs: vec![ValueInfo {
            name: "out".into(),
            ty: ValueType::Tensor {
                dtype: None,
                shape: None,
            },
        }],
        ..Default::default()
    };
    let mut feeds = Vec::new();
    for (i, (shape, dtype)) in case.inputs.iter().enumerate() {
        let name = node.inputs[i].clone();
        let t = random_tensor(*dtype, shape, &mut rng)?;
        let weight = residency == Residency::Resident || case.weights.contains(&i);
        graph.inputs.push(ValueInfo {
            name: name.clone(),
            ty: ValueType::Tensor {
                dtype: Some(*dtype),
                shape: None,
            },
        });
        if weight {
            graph.initializers.insert(name, Arc::new(Value::Tensor(t)));
        } else {
            feeds.push((name, Value::Tensor(t)));
        }
    }
    let mut node = node;
    node.outputs = vec!["y".into()];
    let opset = node.opset;
    graph.nodes.push(node);
    take_first_element(&mut graph, opset);
    let model = Model {
        ir_version: 8,
        opsets: HashMap::from([(String::new(), case.opset)]),
        producer: "quorum-matrix".into(),
        graph,
        metadata: Vec::new(),
        warnings: Vec::new(),
    };
    Ok((model, feeds))
}

/// Appends `out = Slice(Reshape(y, [-1]), 0, 1)` (Slice's inputs from opset 10, its attributes
/// before).
fn take_first_element(graph: &mut Graph, opset: i64) {
    let ints = |name: &str, v: Vec<i64>| {
        (
            name.to_string(),
            Arc::new(Value::Tensor(
                quorum::Tensor::from_f64s(
                    quorum::DType::I64,
                    &[v.len()],
                    v.iter().map(|&x| x as f64).collect(),
                )
                .expect("a small i64 vector"),
            )),
        )
    };
    let node = |name: &str, op: &str, inputs: &[&str], output: &str| Node {
        name: name.into(),
        op_type: op.into(),
        domain: String::new(),
        opset,
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: vec![output.into()],
        attrs: HashMap::new(),
    };
    let (k, v) = ints("tail_shape", vec![-1]);
    graph.initializers.insert(k, v);
    graph
        .nodes
        .push(node("tail_flat", "Reshape", &["y", "tail_shape"], "flat"));
    if opset >= 10 {
        for (name, v) in [("tail_starts", 0), ("tail_ends", 1)] {
            let (k, t) = ints(name, vec![v]);
            graph.initializers.insert(k, t);
        }
        graph.nodes.push(node(
            "tail_first",
            "Slice",
            &["flat", "tail_starts", "tail_ends"],
            "out",
        ));
    } else {
        let mut n = node("tail_first", "Slice", &["flat"], "out");
        for (name, v) in [("starts", 0), ("ends", 1), ("axes", 0)] {
            n.attrs.insert(name.into(), quorum::ir::Attr::Ints(vec![v]));
        }
        graph.nodes.push(n);
    }
}

/// What one timing gave: the stats, and what a reader should know (a refused capture, a node
/// that fell back to the CPU).
pub struct Timed {
    pub stats: Stats,
    pub note: Option<String>,
}

/// Times `case` on `provider` (the CPU, or one accelerator alone: every node it claims on it).
pub fn time(
    case: &Case,
    provider: Provider,
    residency: Residency,
    graph: GraphMode,
    budget: &Budget,
) -> Result<Timed, String> {
    let (model, feeds) = model(case, residency, 7).map_err(|e| e.to_string())?;
    let options = SessionOptions {
        providers: if provider == Provider::Cpu {
            vec![Provider::Cpu]
        } else {
            vec![provider, Provider::Cpu]
        },
        fold_constants: false,
        graph_capture: match graph {
            GraphMode::Eager => GraphCapture::Off,
            GraphMode::Replay => GraphCapture::On,
        },
        ..Default::default()
    };
    let session = Session::from_model(model, options).map_err(|e| e.to_string())?;
    // The case's node is the first; the tail may be claimed when it is not.
    if provider != Provider::Cpu
        && session
            .placement()
            .first()
            .is_none_or(|p| p.provider == Provider::Cpu)
    {
        let why = session
            .placement()
            .first()
            .and_then(|p| p.declined.clone())
            .unwrap_or_else(|| "not claimed".into());
        return Err(format!("declined: {why}"));
    }
    if graph == GraphMode::Replay
        && let Some(why) = session.capture_blocker()
    {
        return Err(format!("no graph: {why}"));
    }
    let stats = time_session(&session, &feeds, budget)?;
    let mut note = None;
    if graph == GraphMode::Replay {
        let report = session.graph_report();
        if let Some(r) = report.iter().find(|r| r.state != "replaying") {
            return Err(format!("no graph: {}", r.state));
        }
    }
    let fallbacks = session.fallback_nodes();
    if !fallbacks.is_empty() {
        note = Some(format!(
            "fell back to the CPU at run time: {}",
            fallbacks.join(", ")
        ));
    }
    Ok(Timed { stats, note })
}

/// Times runs of a built session on `feeds` (cloned outside the clock): warm-up runs first
/// (weights uploaded, kernels compiled and, where capture is on, the graph captured), then runs
/// until `budget` is spent.
pub fn time_session(
    session: &Session,
    feeds: &[(String, Value)],
    budget: &Budget,
) -> Result<Stats, String> {
    // `auto` first times whole-model placements (`quorum::session::trial`): not part of its
    // steady state.
    for _ in 0..quorum::session::WARMUP_RUNS + 2 + session.auto_trial_runs() {
        session.run(feeds.to_vec()).map_err(|e| e.to_string())?;
    }
    let mut samples = Vec::new();
    let start = Instant::now();
    while samples.len() < budget.min_samples
        || (samples.len() < budget.max_samples && start.elapsed() < budget.time)
    {
        let batch = feeds.to_vec();
        let t = Instant::now();
        session.run(batch).map_err(|e| e.to_string())?;
        samples.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(Stats::from_samples(samples))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(v: &[f64]) -> Stats {
        Stats::from_samples(v.to_vec())
    }

    #[test]
    fn percentiles_interpolate_and_spreads_decide() {
        let s = stats(&[5.0, 1.0, 3.0, 2.0, 4.0]);
        assert_eq!((s.median_ms, s.p10_ms, s.p90_ms), (3.0, 1.4, 4.6));
        assert_eq!(s.samples_ms[0], 5.0, "samples stay in run order");
        // Disjoint ranges decide; overlapping ones do not, however far apart the medians.
        let fast = stats(&[1.0, 1.1, 1.2]);
        let slow = stats(&[2.0, 2.1, 2.2]);
        assert!(fast.separated_from(&slow) && slow.separated_from(&fast));
        // Medians 1.1 and 5.0, but the noisy one's p10 reaches into the fast one's range.
        let noisy = stats(&[1.0, 1.1, 1.2, 3.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0]);
        assert_eq!(noisy.median_ms, 5.0);
        assert!(!fast.separated_from(&noisy));
    }

    #[test]
    fn a_case_runs_on_the_cpu_in_both_residencies() {
        let case = crate::cases::sweep(crate::cases::Size::Quick, &["elementwise".into()])
            .into_iter()
            .next()
            .unwrap();
        let budget = Budget {
            min_samples: 3,
            max_samples: 3,
            time: Duration::ZERO,
        };
        for r in [Residency::Host, Residency::Resident] {
            let t = time(&case, Provider::Cpu, r, GraphMode::Eager, &budget).unwrap();
            assert_eq!(t.stats.samples_ms.len(), 3);
            assert!(t.stats.p10_ms <= t.stats.median_ms && t.stats.median_ms <= t.stats.p90_ms);
        }
        // The CPU captures no graphs: the point says why rather than timing eager runs as replay.
        let e = time(
            &case,
            Provider::Cpu,
            Residency::Host,
            GraphMode::Replay,
            &budget,
        );
        assert!(e.is_err_and(|e| e.contains("no graph")));
    }
}
