//! Runs whose outputs become the next run's inputs without a trip through host tensors (a decoder's
//! key/value cache step after step): where a run replays a captured graph, each [`CarryPair`]'s
//! output is copied into the staging buffer the graph uploads that input from, and the next run of
//! the same [`CarryState`] leaves the input out. The sequence holds the graph meanwhile (other runs
//! of the key run eagerly instead of overwriting its inputs) until it runs without a carry (which
//! returns every output) or is dropped.
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::Session;
use super::capture::{self, Captured, CarryPair, GraphCapture, ShapeKey};
use crate::error::{Error, Result};
use crate::tensor::Value;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// One sequence of carried runs (see the module docs).
pub struct CarryState {
    id: u64,
    /// The graph whose staging holds this sequence's carried inputs, its shape key and the carried
    /// inputs' names.
    held: Option<(ShapeKey, Arc<Captured>, Vec<String>)>,
}

impl CarryState {
    /// Whether the next run may (and must) leave the carried inputs out.
    pub fn holds(&self) -> bool {
        self.held.is_some()
    }

    fn let_go(&mut self) {
        if let Some((_, g, _)) = self.held.take() {
            g.release(self.id);
        }
    }
}

impl Default for CarryState {
    fn default() -> CarryState {
        CarryState {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            held: None,
        }
    }
}

impl Drop for CarryState {
    fn drop(&mut self) {
        self.let_go();
    }
}

impl Session {
    /// [`Session::run`] with `carry`: where the run replays a captured graph, the outputs `carry`
    /// names are not returned but staged as the next run's inputs (`state` then
    /// [`holds`](CarryState::holds) them, and the next run leaves them out); elsewhere (eager runs,
    /// the capture itself, a device without carries) every output is returned and nothing is held.
    /// An empty `carry` returns every output and lets go.
    pub fn run_carrying(
        &self,
        inputs: Vec<(String, Value)>,
        carry: &[CarryPair],
        state: &mut CarryState,
    ) -> Result<Vec<(String, Value)>> {
        if let Some((key, graph, names)) = &state.held {
            let key = key.clone();
            let given: ShapeKey = capture::shape_key(&inputs);
            if let Some((n, d, s)) = given.iter().find(|g| !key.contains(g)) {
                return Err(Error::Input {
                    name: n.clone(),
                    msg: format!(
                        "is {d}{s:?}, but the held graph's inputs are {}",
                        describe(&key)
                    ),
                });
            }
            if let Some(n) = names.iter().find(|n| given.iter().any(|g| &g.0 == *n)) {
                return Err(Error::Input {
                    name: n.clone(),
                    msg: "is carried from the previous run and must be left out".into(),
                });
            }
            let (graph, staged) = (graph.clone(), names.clone());
            let r = graph.replay_carrying(
                &self.plan.graph,
                &key,
                &inputs,
                &staged,
                carry,
                state.id,
                &self.counters,
            );
            return match r {
                Some(Ok(outs)) => {
                    if carry.is_empty() {
                        state.let_go();
                    } else {
                        state.held =
                            Some((key, graph, carry.iter().map(|c| c.input.clone()).collect()));
                    }
                    Ok(outs)
                }
                Some(Err(e)) => {
                    state.let_go();
                    Err(e)
                }
                None => Err(Error::Device(
                    "the graph holding the carried inputs is being replayed by another run".into(),
                )),
            };
        }
        let plain = carry.is_empty()
            || self.sampler.is_some()
            || self.options.graph_capture == GraphCapture::Off
            || self.capture_blocker.is_some();
        if plain {
            return self.run(inputs);
        }
        super::inputs::check_inputs(&self.model, &self.plan.graph, &inputs)?;
        let key = capture::shape_key(&inputs);
        match self.graphs.plan(&key) {
            capture::Plan::Replay(c) => match c.replay_carrying(
                &self.plan.graph,
                &key,
                &inputs,
                &[],
                carry,
                state.id,
                &self.counters,
            ) {
                Some(Ok(outs)) => {
                    let names = carry.iter().map(|p| p.input.clone()).collect();
                    state.held = Some((key, c, names));
                    Ok(outs)
                }
                Some(Err(e)) => Err(e),
                None => Ok(self.execute(inputs, None)?.0),
            },
            capture::Plan::Capture => self.capture(&key, inputs),
            capture::Plan::Eager => Ok(self.execute(inputs, None)?.0),
        }
    }
}

fn describe(key: &ShapeKey) -> String {
    key.iter()
        .map(|(n, d, s)| format!("{n}: {d}{s:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}
