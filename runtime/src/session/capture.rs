//! Graph capture: a run whose device work can be recorded once per set of input shapes is captured
//! after warm-up and replayed afterwards (one launch instead of a launch per node).
//!
//! A plan can be captured only when every top-level node runs on one device, every graph output is
//! made there, and verification is off; a run can be, when nothing in it waits for the device midway
//! (no host read of a device value, no kernel reading a run input's values on the host, no node
//! falling back to the CPU). What refuses a capture is kept per input-shape key with its reason and
//! reported (`Session::graph_report`, counters). Under [`GraphCapture::Auto`] a captured graph is kept
//! only if replaying it measured faster than running eagerly, and the measurement is kept too.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::backend::{Footprint, Replay};
use crate::cmdlog::{Agent, Command, CommandLog, LogSink, Range};
use crate::counters::Counters;
use crate::error::{Error, Result};
use crate::ir::Graph;
use crate::mutants::{self, Mutant};
use crate::tensor::{DType, Value};

/// Whether runs are captured into device graphs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GraphCapture {
    /// Every run launches its nodes one by one.
    #[default]
    Off,
    /// Capture each input-shape key after warm-up and replay it from then on.
    On,
    /// Capture, then keep the graph only if replay measured faster than eager runs.
    Auto,
}

impl std::str::FromStr for GraphCapture {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "off" => Ok(GraphCapture::Off),
            "on" => Ok(GraphCapture::On),
            "auto" => Ok(GraphCapture::Auto),
            other => Err(format!(
                "graph capture '{other}' is not one of off, on, auto"
            )),
        }
    }
}

/// Runs of a shape key before it is captured: the first run uploads the weights and compiles the
/// kernels, which a capture cannot do.
pub const WARMUP_RUNS: usize = 2;

/// Eager runs and replays timed for [`GraphCapture::Auto`]'s decision.
const AUTO_SAMPLES: usize = 7;

/// The dtypes and shapes of a run's inputs, by name.
pub(super) type ShapeKey = Vec<(String, DType, Vec<usize>)>;

pub(super) fn shape_key(inputs: &[(String, Value)]) -> ShapeKey {
    let mut key: ShapeKey = inputs
        .iter()
        .filter_map(|(n, v)| {
            v.as_tensor()
                .map(|t| (n.clone(), t.dtype(), t.shape().to_vec()))
        })
        .collect();
    key.sort();
    key
}

/// What is known of one shape key.
enum State {
    Warming(usize),
    /// A run of this key is being captured (others run eagerly meanwhile).
    Capturing,
    Ready(Arc<Captured>),
    Refused(String),
    /// Captured, but replay measured slower than eager (auto): runs stay eager.
    Lost {
        eager_ms: f64,
        replay_ms: f64,
    },
}

pub(super) struct Captured {
    replay: Box<dyn Replay>,
    /// Where replays log, when the session keeps command logs.
    log: Option<Arc<LogSink>>,
    /// Held by the replay in progress: a graph's buffers, staging and output copies are fixed, so
    /// two replays of one graph at once would share them.
    busy: Mutex<()>,
    /// The run inputs, in the order the replay takes them.
    pub inputs: Vec<String>,
    measured: Option<(f64, f64)>,
    /// The graph outputs' names, dtypes and shapes (what a carry copies from).
    outputs: Vec<(String, DType, Vec<usize>)>,
    /// The carry sequence (`CarryState`) whose inputs the graph's staging holds: until it lets go,
    /// other runs of this key run eagerly rather than overwrite them.
    owner: Mutex<Option<u64>>,
}

/// One shape key's outcome, for reports.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GraphRecord {
    /// The inputs' dtypes and shapes.
    pub inputs: String,
    /// `warming`, `capturing`, `replaying`, `refused: <reason>` or `slower than eager`.
    pub state: String,
    pub eager_ms: Option<f64>,
    pub replay_ms: Option<f64>,
}

/// A session's captured graphs by shape key.
#[derive(Default)]
pub(super) struct Graphs {
    entries: Mutex<HashMap<ShapeKey, State>>,
    /// Where replays log, when the session keeps command logs.
    log: Option<Arc<LogSink>>,
}

/// What a run should do about graphs.
pub(super) enum Plan {
    Eager,
    Capture,
    Replay(Arc<Captured>),
}

impl Graphs {
    pub fn new(log: Option<Arc<LogSink>>) -> Graphs {
        Graphs {
            entries: Mutex::default(),
            log,
        }
    }

    /// Decides for a run of `key` (and marks a capture as started).
    pub fn plan(&self, key: &ShapeKey) -> Plan {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let state = entries.entry(key.clone()).or_insert(State::Warming(0));
        match state {
            State::Ready(c) => Plan::Replay(c.clone()),
            State::Warming(n) if *n >= WARMUP_RUNS => {
                *state = State::Capturing;
                Plan::Capture
            }
            State::Warming(n) => {
                *n += 1;
                Plan::Eager
            }
            _ => Plan::Eager,
        }
    }

    fn set(&self, key: &ShapeKey, state: State) {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.clone(), state);
    }

    /// Records a refused capture.
    pub fn refuse(&self, key: &ShapeKey, reason: String, counters: &Counters) {
        Counters::bump(&counters.graph_refusals, 1);
        self.set(key, State::Refused(reason));
    }

    /// Keeps a captured graph: `measured` is (eager, replay) median milliseconds where measured;
    /// with `keep` false the key stays eager (replay was slower).
    pub fn keep(
        &self,
        key: &ShapeKey,
        replay: Box<dyn Replay>,
        inputs: Vec<String>,
        outputs: Vec<(String, DType, Vec<usize>)>,
        measured: Option<(f64, f64)>,
        keep: bool,
    ) {
        let state = match (keep, measured) {
            (false, Some((eager_ms, replay_ms))) => State::Lost {
                eager_ms,
                replay_ms,
            },
            _ => State::Ready(Arc::new(Captured {
                replay,
                log: self.log.clone(),
                busy: Mutex::new(()),
                inputs,
                measured,
                outputs,
                owner: Mutex::new(None),
            })),
        };
        self.set(key, state);
    }

    pub fn report(&self) -> Vec<GraphRecord> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<GraphRecord> = entries
            .iter()
            .map(|(key, state)| {
                let inputs = key
                    .iter()
                    .map(|(n, d, s)| format!("{n}: {d}{s:?}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                let (state, eager_ms, replay_ms) = match state {
                    State::Warming(_) => ("warming".to_string(), None, None),
                    State::Capturing => ("capturing".to_string(), None, None),
                    State::Ready(c) => (
                        "replaying".to_string(),
                        c.measured.map(|m| m.0),
                        c.measured.map(|m| m.1),
                    ),
                    State::Refused(r) => (format!("refused: {r}"), None, None),
                    State::Lost {
                        eager_ms,
                        replay_ms,
                    } => (
                        "slower than eager".to_string(),
                        Some(*eager_ms),
                        Some(*replay_ms),
                    ),
                };
                GraphRecord {
                    inputs,
                    state,
                    eager_ms,
                    replay_ms,
                }
            })
            .collect();
        out.sort_by(|a, b| a.inputs.cmp(&b.inputs));
        out
    }
}

impl Captured {
    /// Replays the graph on `inputs` (by name). `None`: another thread is replaying it right now,
    /// or a carry sequence holds its inputs (the run goes eager rather than wait).
    pub fn replay(
        &self,
        graph: &Graph,
        inputs: &[(String, Value)],
        counters: &Counters,
    ) -> Option<Result<Vec<(String, Value)>>> {
        // Sequence 0 is never issued: it holds nothing and carries nothing.
        self.replay_carrying(graph, &ShapeKey::new(), inputs, &[], &[], 0, counters)
    }
}

/// An output that becomes the next run's input: the output's last positions along `axis`, as many
/// as the input holds (a key/value cache grown by one position, its oldest dropped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CarryPair {
    pub output: String,
    pub input: String,
    pub axis: usize,
}

impl Captured {
    /// Lets go of the staged inputs if sequence `id` holds them.
    pub fn release(&self, id: u64) {
        let mut o = self.owner.lock().unwrap_or_else(|e| e.into_inner());
        if *o == Some(id) {
            *o = None;
        }
    }

    /// The device's description of each pair of `carry` for inputs of shape key `key`.
    fn carries(&self, key: &ShapeKey, carry: &[CarryPair]) -> Result<Vec<crate::backend::Carry>> {
        let bad = |msg: String| Error::Input {
            name: carry.first().map_or(String::new(), |c| c.input.clone()),
            msg,
        };
        carry
            .iter()
            .map(|c| {
                let input = self
                    .inputs
                    .iter()
                    .position(|n| *n == c.input)
                    .ok_or_else(|| bad(format!("'{}' is not a run input", c.input)))?;
                let (output, (_, od, os)) = self
                    .outputs
                    .iter()
                    .enumerate()
                    .find(|(_, o)| o.0 == c.output)
                    .ok_or_else(|| bad(format!("'{}' is not a graph output", c.output)))?;
                let (_, id, is) = key
                    .iter()
                    .find(|k| k.0 == c.input)
                    .ok_or_else(|| bad(format!("'{}' has no shape", c.input)))?;
                let fits = id == od
                    && is.len() == os.len()
                    && c.axis < is.len()
                    && is[c.axis] <= os[c.axis]
                    && (0..is.len()).all(|d| d == c.axis || is[d] == os[d]);
                if !fits {
                    return Err(bad(format!(
                        "output '{}' ({od}{os:?}) cannot become input '{}' ({id}{is:?}) along axis {}",
                        c.output, c.input, c.axis
                    )));
                }
                let size = id.size_in_memory();
                Ok(crate::backend::Carry {
                    output,
                    input,
                    rows: os[..c.axis].iter().product(),
                    out_row: os[c.axis..].iter().product::<usize>() * size,
                    in_row: is[c.axis..].iter().product::<usize>() * size,
                })
            })
            .collect()
    }

    /// Replays for carry sequence `id`: `inputs` lacks the inputs named in `staged`, which the
    /// sequence's previous replay left in the graph's staging; after the run `carry` stages outputs
    /// for the next one and the sequence holds the graph (with no carry it lets go). `None`: the
    /// graph is held by another sequence or is being replayed (the run goes eager).
    #[allow(clippy::too_many_arguments)]
    pub fn replay_carrying(
        &self,
        graph: &Graph,
        key: &ShapeKey,
        inputs: &[(String, Value)],
        staged: &[String],
        carry: &[CarryPair],
        id: u64,
        counters: &Counters,
    ) -> Option<Result<Vec<(String, Value)>>> {
        // A run that holds nothing does not wait for another replay (it runs eagerly instead); a
        // sequence holding the graph waits (a run that finds it held lets go at once).
        // The `ConcurrentReplays` bug takes neither lock, so that two runs of one graph can
        // overlap on its fixed buffers, staging and output copies.
        let concurrent = mutants::active(Mutant::ConcurrentReplays);
        let mut unlocked = None;
        let mut guard = if concurrent {
            None
        } else if staged.is_empty() {
            Some(match self.owner.try_lock() {
                Ok(o) => o,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => return None,
            })
        } else {
            Some(self.owner.lock().unwrap_or_else(|e| e.into_inner()))
        };
        let owner_locked = guard.is_some();
        let owner: &mut Option<u64> = match guard.as_mut() {
            Some(g) => g,
            None => &mut unlocked,
        };
        if owner.is_some_and(|o| o != id) {
            return None;
        }
        if !staged.is_empty() && *owner != Some(id) {
            return Some(Err(Error::Device(
                "the carried inputs were not staged by this sequence".into(),
            )));
        }
        let busy = match self.busy.try_lock() {
            Ok(b) => Some(b),
            Err(_) if concurrent => None,
            Err(_) => return None,
        };
        let replay = &self.replay;
        let carries = match self.carries(key, carry) {
            Ok(c) => c,
            Err(e) => return Some(Err(e)),
        };
        let mut ordered = Vec::with_capacity(self.inputs.len());
        for name in &self.inputs {
            match inputs
                .iter()
                .find(|(n, _)| n == name)
                .and_then(|(_, v)| v.as_tensor())
            {
                Some(t) => ordered.push(Some(t)),
                None if staged.contains(name) => ordered.push(None),
                None => {
                    return Some(Err(Error::Input {
                        name: name.clone(),
                        msg: "missing from the run (and not carried from the one before)".into(),
                    }));
                }
            }
        }
        Counters::bump(&counters.graph_replays, 1);
        let logged = self.log.as_ref().map(|sink| {
            let (log, run) = sink.begin();
            (sink, log, run, replay.footprint())
        });
        // The locks order this replay after the one before; a replay that took none (the bug)
        // logs no order.
        let locked = owner_locked && busy.is_some();
        if let Some((_, log, _, fp)) = &logged
            && locked
        {
            for range in fp.owned() {
                log.push(Command::Take { range });
            }
        }
        let outs = replay.replay_carrying(
            &ordered,
            &carries,
            counters,
            logged.as_ref().map(|(_, log, _, _)| &**log),
        );
        if let Some((sink, log, run, fp)) = &logged {
            log_replay(log, *run, fp, &ordered, &carries, locked);
            sink.end(log);
        }
        *owner = match (&outs, carries.is_empty()) {
            (Ok(_), false) => {
                Counters::bump(&counters.graph_carries, 1);
                Some(id)
            }
            _ => None,
        };
        let outs = match outs {
            Ok(o) => o,
            Err(crate::backend::DeviceError::Fault(f)) => {
                return Some(Err(super::exec::fault_error(f)));
            }
            Err(e) => {
                return Some(Err(Error::Device(format!(
                    "replaying a captured graph: {e}"
                ))));
            }
        };
        Some(Ok(graph
            .outputs
            .iter()
            .map(|o| o.name.clone())
            .zip(outs)
            .filter_map(|(n, t)| t.map(|t| (n, Value::Tensor(t))))
            .collect()))
    }
}

/// A replay as the command log sees it, after the device logged its staging of the inputs it was
/// given: those inputs' staging must hold this replay's bytes (`Fresh`: a device that staged them
/// elsewhere, or not at all, replays the inputs before); the graph runs on a stream of its own
/// (reading its inputs' staging and the weights, writing its buffers and output copies), the host
/// waits for it, carries outputs into staging and reads the outputs; then (under the replay's
/// locks) it publishes the graph's memory for the next replay.
fn log_replay(
    log: &CommandLog,
    run: u64,
    fp: &Footprint,
    given: &[Option<&crate::tensor::Tensor>],
    carries: &[crate::backend::Carry],
    locked: bool,
) {
    let host = |what: &str, reads: Vec<Range>, writes: Vec<Range>| Command::Access {
        by: Agent::Host,
        what: what.into(),
        node: String::new(),
        reads,
        writes,
    };
    for (i, (t, r)) in given.iter().zip(&fp.inputs).enumerate() {
        if let (Some(_), Some(range)) = (t, r) {
            log.push(Command::Fresh {
                range: *range,
                what: format!("replay input {i}"),
            });
        }
    }
    let stream = 1 << 63 | run;
    log.push(Command::Access {
        by: Agent::Stream(stream),
        what: "graph replay".into(),
        node: String::new(),
        reads: fp
            .inputs
            .iter()
            .flatten()
            .chain(&fp.weights)
            .copied()
            .collect(),
        writes: fp.device.iter().chain(&fp.outputs).copied().collect(),
    });
    log.push(Command::SyncStream { stream });
    for c in carries {
        if let (Some(from), Some(Some(to))) = (fp.outputs.get(c.output), fp.inputs.get(c.input)) {
            log.push(host("carry", vec![*from], vec![*to]));
        }
    }
    log.push(host("read", fp.outputs.clone(), vec![]));
    if locked {
        for range in fp.owned() {
            log.push(Command::Publish { range });
        }
    }
}

/// Median milliseconds of `samples` calls of `f`.
pub(super) fn median_ms(samples: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        f()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Samples for `auto`'s comparison.
pub(super) fn auto_samples() -> usize {
    AUTO_SAMPLES
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::DeviceError;
    use crate::tensor::Tensor;

    struct Echo;

    impl Replay for Echo {
        fn replay(
            &self,
            inputs: &[&Tensor],
            _: &Counters,
        ) -> std::result::Result<Vec<Tensor>, DeviceError> {
            Ok(inputs.iter().map(|t| (*t).clone()).collect())
        }
    }

    fn key(rows: usize) -> ShapeKey {
        vec![("x".into(), DType::F32, vec![rows, 4])]
    }

    #[test]
    fn a_key_warms_then_captures_once_then_replays() {
        let g = Graphs::default();
        let counters = Counters::default();
        for _ in 0..WARMUP_RUNS {
            assert!(matches!(g.plan(&key(2)), Plan::Eager));
        }
        assert!(matches!(g.plan(&key(2)), Plan::Capture));
        // While one run captures, the others run eagerly; another key warms on its own.
        assert!(matches!(g.plan(&key(2)), Plan::Eager));
        assert!(matches!(g.plan(&key(3)), Plan::Eager));
        g.keep(
            &key(2),
            Box::new(Echo),
            vec!["x".into()],
            vec![],
            None,
            true,
        );
        let Plan::Replay(c) = g.plan(&key(2)) else {
            panic!("a kept graph replays");
        };
        let graph = crate::ir::Graph {
            outputs: vec![crate::ir::ValueInfo {
                name: "y".into(),
                ty: crate::ir::ValueType::Tensor {
                    dtype: None,
                    shape: None,
                },
            }],
            ..Default::default()
        };
        let x = Tensor::from_f32(&[2, 4], (0..8).map(|i| i as f32 * 0.5 - 1.0).collect()).unwrap();
        let out = c
            .replay(&graph, &[("x".into(), Value::Tensor(x.clone()))], &counters)
            .unwrap()
            .unwrap();
        assert_eq!(out, vec![("y".to_string(), Value::Tensor(x))]);
        assert_eq!(counters.snapshot().graph_replays, 1);
        // A replay missing an input is an error naming it.
        let err = c.replay(&graph, &[], &counters).unwrap().unwrap_err();
        assert!(err.to_string().contains("'x'"), "{err}");
    }

    #[test]
    fn refusals_and_losses_are_reported_and_stay_eager() {
        let g = Graphs::default();
        let counters = Counters::default();
        g.refuse(
            &key(2),
            "node 'n' (CumSum) runs on the CPU".into(),
            &counters,
        );
        assert!(matches!(g.plan(&key(2)), Plan::Eager));
        g.keep(
            &key(5),
            Box::new(Echo),
            vec![],
            vec![],
            Some((1.0, 2.0)),
            false,
        );
        assert!(matches!(g.plan(&key(5)), Plan::Eager));
        let report = g.report();
        assert_eq!(counters.snapshot().graph_refusals, 1);
        assert!(
            report[0].state.starts_with("refused: node 'n'"),
            "{report:?}"
        );
        assert_eq!(report[1].state, "slower than eager");
        assert_eq!(
            (report[1].eager_ms, report[1].replay_ms),
            (Some(1.0), Some(2.0))
        );
    }

    #[test]
    fn modes_parse() {
        assert_eq!("AUTO".parse::<GraphCapture>(), Ok(GraphCapture::Auto));
        assert!("sometimes".parse::<GraphCapture>().is_err());
    }
}
