//! Whole models: graph-capture wins and losses per model and input-shape key, and the validation
//! that `auto` placement is never slower than the better of the CPU and each accelerator alone by
//! more than the noise.
use std::collections::HashMap;
use std::path::Path;

use quorum::ir::Model;
use quorum::loader::{self, LoadOptions};
use quorum::session::GraphCapture;
use quorum::{Provider, Session, SessionOptions, Value};
use serde::{Deserialize, Serialize};

use crate::measure::{Budget, Stats, time_session};

/// One model's eager runs against graph replay on one accelerator, at one input-shape key.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GraphOutcome {
    pub model: String,
    pub provider: String,
    /// The inputs' dtypes and shapes.
    pub inputs: String,
    pub eager: Option<Stats>,
    pub replay: Option<Stats>,
    /// `win` (replay faster, outside the noise), `loss` (slower, outside the noise), `undecided`
    /// (inside it), `refused: <reason>` or `failed: <error>`.
    pub verdict: String,
    /// Eager median over replay median.
    pub speedup: Option<f64>,
}

/// The verdict of replay against eager.
pub fn graph_verdict(eager: &Stats, replay: &Stats) -> &'static str {
    if !eager.separated_from(replay) {
        "undecided"
    } else if replay.median_ms < eager.median_ms {
        "win"
    } else {
        "loss"
    }
}

/// A session of `model` on `providers` with generated inputs (seeded, symbolic dims 1).
fn session(
    model: &Model,
    options: SessionOptions,
) -> Result<(Session, Vec<(String, Value)>), String> {
    let feeds = quorum::inputs::generate(&model.graph, &[], &HashMap::new(), 0)
        .map_err(|e| e.to_string())?;
    let s = Session::from_model(model.clone(), options).map_err(|e| e.to_string())?;
    Ok((s, feeds))
}

fn shape_key(feeds: &[(String, Value)]) -> String {
    feeds
        .iter()
        .map(|(n, v)| format!("{n}: {}", v.describe()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Eager against replay for the model at `path` on accelerator `p`.
pub fn graph_outcome(path: &Path, name: &str, p: Provider, budget: &Budget) -> GraphOutcome {
    let mut out = GraphOutcome {
        model: name.into(),
        provider: p.name().into(),
        inputs: String::new(),
        eager: None,
        replay: None,
        verdict: String::new(),
        speedup: None,
    };
    let model = match loader::model_from_file(path, &LoadOptions::default()) {
        Ok(m) => m,
        Err(e) => {
            out.verdict = format!("failed: {e}");
            return out;
        }
    };
    let options = |graph| SessionOptions {
        providers: vec![p, Provider::Cpu],
        graph_capture: graph,
        ..Default::default()
    };
    let timed = |graph| -> Result<(String, Stats, Session), String> {
        let (s, feeds) = session(&model, options(graph))?;
        let stats = time_session(&s, &feeds, budget)?;
        Ok((shape_key(&feeds), stats, s))
    };
    match timed(GraphCapture::Off) {
        Ok((key, stats, _)) => {
            out.inputs = key;
            out.eager = Some(stats);
        }
        Err(e) => {
            out.verdict = format!("failed: {e}");
            return out;
        }
    }
    match timed(GraphCapture::On) {
        Ok((_, stats, s)) => {
            let refused = s.capture_blocker().map(str::to_string).or_else(|| {
                s.graph_report()
                    .into_iter()
                    .find(|r| r.state != "replaying")
                    .map(|r| r.state)
            });
            match refused {
                Some(why) => out.verdict = format!("refused: {why}"),
                None => out.replay = Some(stats),
            }
        }
        Err(e) => out.verdict = format!("failed: {e}"),
    }
    if let (Some(e), Some(r)) = (&out.eager, &out.replay) {
        out.verdict = graph_verdict(e, r).into();
        out.speedup = Some(e.median_ms / r.median_ms.max(1e-9));
    }
    out
}

/// One validation case: `auto` against each provider alone.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Validation {
    pub case: String,
    /// Provider name (`cpu`, `cuda`, ..., `auto`) and its timing, or the error.
    pub timings: Vec<(String, Result<Stats, String>)>,
    /// The fastest provider alone, by median.
    pub best: Option<String>,
    /// `ok` (auto within the noise of the best or faster), `slower` (auto's p10 above the best's
    /// p90: slower by more than the noise), or why it could not be judged.
    pub verdict: String,
}

/// `auto` against the best single provider: slower only when its whole p10–p90 range lies above
/// the best's.
pub fn auto_verdict(best: &Stats, auto: &Stats) -> &'static str {
    if auto.p10_ms > best.p90_ms {
        "slower"
    } else {
        "ok"
    }
}

/// Times `model` under `cpu`, each usable accelerator alone, and `auto`.
pub fn validate(
    case: &str,
    model: &Model,
    accelerators: &[Provider],
    budget: &Budget,
) -> Validation {
    let mut timings = Vec::new();
    let mut configs: Vec<(String, Vec<Provider>, usize)> =
        vec![("cpu".into(), vec![Provider::Cpu], 0)];
    for &a in accelerators {
        configs.push((a.name().into(), vec![a, Provider::Cpu], 0));
    }
    let (auto, floor) = quorum::parse_providers("auto").unwrap_or((vec![Provider::Cpu], 0));
    configs.push(("auto".into(), auto, floor));
    for (name, providers, floor) in configs {
        let options = SessionOptions {
            providers,
            min_device_elements: floor,
            ..Default::default()
        };
        let r = session(model, options).and_then(|(s, feeds)| time_session(&s, &feeds, budget));
        timings.push((name, r));
    }
    let best = timings
        .iter()
        .filter(|(n, _)| n != "auto")
        .filter_map(|(n, r)| r.as_ref().ok().map(|s| (n, s)))
        .min_by(|a, b| a.1.median_ms.total_cmp(&b.1.median_ms));
    let auto = timings
        .iter()
        .find(|(n, _)| n == "auto")
        .and_then(|(_, r)| r.as_ref().ok());
    let (best_name, verdict) = match (best, auto) {
        (Some((n, b)), Some(a)) => (Some(n.clone()), auto_verdict(b, a).to_string()),
        (_, None) => (None, "auto failed".into()),
        (None, _) => (None, "no provider alone ran".into()),
    };
    Validation {
        case: case.into(),
        timings,
        best: best_name,
        verdict,
    }
}

/// A seeded chain of nodes at random sizes (log-uniform from 16 to 4 M elements, matmul sides 8
/// to 512): Add of a weight, Relu, Mul by a row weight, then a MatMul by a weight; what `auto`
/// must place well without having measured these exact sizes.
pub fn random_chain(seed: u64) -> (String, Model) {
    use quorum::ir::{Graph, Node, ValueInfo, ValueType};
    use std::sync::Arc;
    let mut rng = quorum::inputs::Rng::new(seed);
    let mut log_uniform = |lo: f64, hi: f64| {
        let u = rng.uniform() * 0.5 + 0.5;
        (lo.ln() + u * (hi.ln() - lo.ln())).exp().round() as usize
    };
    let cols = 64;
    let rows = (log_uniform(16.0, 4_194_304.0) / cols).max(1);
    let k = log_uniform(8.0, 512.0);
    let n = log_uniform(8.0, 512.0);
    let mut wrng = quorum::inputs::Rng::new(seed ^ 0x5eed);
    let mut init = |shape: &[usize]| {
        Arc::new(Value::Tensor(
            quorum::inputs::random_tensor(quorum::DType::F32, shape, &mut wrng)
                .expect("an f32 tensor of a small shape"),
        ))
    };
    let info = |name: &str, shape: Option<Vec<usize>>| ValueInfo {
        name: name.into(),
        ty: ValueType::Tensor {
            dtype: Some(quorum::DType::F32),
            shape: shape.map(|s| {
                s.into_iter()
                    .map(|d| quorum::ir::Dim::Fixed(d as i64))
                    .collect()
            }),
        },
    };
    let node = |op: &str, i: &[&str], o: &str| Node {
        name: format!("{op}_{o}"),
        op_type: op.into(),
        domain: String::new(),
        opset: 17,
        inputs: i.iter().map(|s| s.to_string()).collect(),
        outputs: vec![o.into()],
        attrs: HashMap::new(),
    };
    let mut graph = Graph {
        name: "chain".into(),
        inputs: vec![info("x", Some(vec![rows, cols]))],
        outputs: vec![info("y", None)],
        ..Default::default()
    };
    // The MatMul takes [rows, cols] × [cols, k] then [.., k] × [k, n]: work grows with all three.
    for (name, shape) in [
        ("w_add", vec![rows, cols]),
        ("w_mul", vec![cols]),
        ("w_a", vec![cols, k]),
        ("w_b", vec![k, n]),
    ] {
        graph.initializers.insert(name.into(), init(&shape));
        graph.inputs.push(info(name, Some(shape)));
    }
    graph.nodes = vec![
        node("Add", &["x", "w_add"], "a"),
        node("Relu", &["a"], "r"),
        node("Mul", &["r", "w_mul"], "m"),
        node("MatMul", &["m", "w_a"], "p"),
        node("MatMul", &["p", "w_b"], "y"),
    ];
    let model = Model {
        ir_version: 8,
        opsets: HashMap::from([(String::new(), 17)]),
        producer: "quorum-matrix".into(),
        graph,
        metadata: Vec::new(),
        warnings: Vec::new(),
    };
    (format!("chain:{rows}x{cols},k{k},n{n}"), model)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[f64]) -> Stats {
        Stats::from_samples(v.to_vec())
    }

    #[test]
    fn verdicts_need_a_difference_outside_the_noise() {
        let eager = s(&[2.0, 2.1, 2.2]);
        assert_eq!(graph_verdict(&eager, &s(&[1.0, 1.1, 1.2])), "win");
        assert_eq!(graph_verdict(&eager, &s(&[3.0, 3.1, 3.2])), "loss");
        assert_eq!(graph_verdict(&eager, &s(&[1.0, 2.1, 4.0])), "undecided");
        let best = s(&[1.0, 1.1, 1.2]);
        assert_eq!(auto_verdict(&best, &s(&[1.15, 1.3, 1.4])), "ok");
        assert_eq!(auto_verdict(&best, &s(&[1.3, 1.4, 1.5])), "slower");
    }
}
