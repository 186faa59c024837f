//! The end of a run in the run protocol: everything it holds handed to a captured graph, or, when
//! the run is dropped, its streams synchronised and what it held returned to the shared pools (or
//! leaked after a failed synchronisation).
use crate::backend::Footprint;
use crate::cmdlog::{Agent, Command, CommandLog, Range};
use crate::counters::Counters;
use crate::mutants::{self, Mutant};
use crate::tensor::Tensor;

use super::{Buffer, CaptureLog, Driver, Held, RunProtocol};

impl<D: Driver> RunProtocol<'_, D> {
    // ---- capture ----------------------------------------------------------------------------

    pub fn capturing(&self) -> bool {
        self.capture.borrow().is_some()
    }

    pub fn set_capture(&self, c: Option<CaptureLog<D::Event>>) -> Option<CaptureLog<D::Event>> {
        std::mem::replace(&mut *self.capture.borrow_mut(), c)
    }

    /// A capture cannot hold `what`: it would wait for the device mid-run (declined, which
    /// refuses the capture).
    pub fn not_capturing(&self, what: &str) -> Result<(), D::Error> {
        if self.capturing() {
            return Err(D::decline(format!("graph capture: {what}")));
        }
        Ok(())
    }

    /// Logs the end of a capture: the graph's memory is the replays' from here (each replay takes
    /// it after this point).
    pub fn publish_footprint(&self, fp: &Footprint) {
        for range in fp.owned() {
            self.push(Command::Publish { range });
        }
    }

    /// Everything the run holds, for a captured graph to keep (it owns them from here).
    pub fn take_held(&self) -> Held<D> {
        let mut events: Vec<D::Event> = self
            .events
            .borrow_mut()
            .drain()
            .map(|(_, (e, _))| e)
            .collect();
        events.append(&mut self.spent.borrow_mut());
        let parked = std::mem::take(&mut *self.parked.borrow_mut());
        let mut mems = Vec::with_capacity(parked.len());
        for p in parked {
            if let Some((e, _)) = p.released {
                events.push(e);
            }
            mems.push(p.mem);
        }
        Held {
            staging: std::mem::take(&mut *self.staging.borrow_mut()),
            later: std::mem::take(&mut *self.later.borrow_mut()),
            checks: std::mem::take(&mut *self.checks.borrow_mut()),
            buffers: std::mem::take(&mut *self.alive.borrow_mut())
                .into_values()
                .collect(),
            resident: std::mem::take(&mut *self.held.borrow_mut()),
            parked: mems,
            events,
        }
    }
}

/// The host's side of a replay's inputs, for every device that captures graphs: each given input
/// (`inputs[i]`, the captured run's `i`-th upload) is written into its staging by `write`, which
/// gets the staging's index and length from `uploads` (the capture's
/// [`CaptureLog::uploads`](super::CaptureLog)) and returns the address it wrote at; that write is
/// logged as the host's. An input not given keeps what its staging holds (the previous replay's
/// carry), and is counted as moved all the same (the graph copies it). The
/// [`Mutant::StaleReplayInput`] bug writes nothing, so that the graph reads the inputs of the
/// replay before.
pub fn stage_replay_inputs<E>(
    inputs: &[Option<&Tensor>],
    uploads: &[Option<(usize, usize)>],
    counters: &Counters,
    log: Option<&CommandLog>,
    invalid: impl Fn(String) -> E,
    mut write: impl FnMut(usize, usize, &Tensor) -> Result<u64, E>,
) -> Result<(), E> {
    if inputs.len() > uploads.len() {
        return Err(invalid(format!(
            "{} replay inputs, the captured run uploaded {}",
            inputs.len(),
            uploads.len()
        )));
    }
    for (i, (t, up)) in inputs.iter().zip(uploads).enumerate() {
        let (t, Some((k, n))) = (t, up) else {
            match t {
                Some(t) if !t.is_empty() => {
                    return Err(invalid(format!(
                        "replay input {i} has elements, the captured run's had none"
                    )));
                }
                _ => continue,
            }
        };
        Counters::bump(&counters.h2d_bytes, *n as u64);
        Counters::bump(&counters.h2d_calls, 1);
        let Some(t) = t else {
            continue;
        };
        if mutants::active(Mutant::StaleReplayInput) {
            continue;
        }
        let at = Counters::time(&counters.stage_nanos, || write(*k, *n, t))?;
        if let Some(log) = log {
            log.push(Command::Access {
                by: Agent::Host,
                what: "stage".into(),
                node: String::new(),
                reads: vec![],
                writes: vec![Range::pinned(at, *n as u64)],
            });
        }
    }
    Ok(())
}

impl<D: Driver> RunProtocol<'_, D> {
    /// Forgets everything but the staging: nothing of a run whose streams failed goes back to a
    /// pool (a copy or kernel of the failed stream may still use it).
    fn leak(&mut self) {
        std::mem::forget(std::mem::take(&mut *self.later.borrow_mut()));
        std::mem::forget(std::mem::take(&mut *self.checks.borrow_mut()));
        std::mem::forget(std::mem::take(&mut *self.parked.borrow_mut()));
        std::mem::forget(std::mem::take(&mut *self.alive.borrow_mut()));
        std::mem::forget(std::mem::take(&mut *self.held.borrow_mut()));
        std::mem::forget(std::mem::take(&mut *self.events.borrow_mut()));
        std::mem::forget(std::mem::take(&mut *self.spent.borrow_mut()));
        std::mem::forget(std::mem::take(&mut self.streams));
    }
}

impl<D: Driver> Drop for RunProtocol<'_, D> {
    fn drop(&mut self) {
        // Nothing goes back to shared pools before every stream is done with it.
        let synced = self
            .streams
            .iter()
            .all(|s| self.driver.sync_stream(s).is_ok());
        if synced {
            for s in &self.streams {
                self.push(Command::SyncStream {
                    stream: self.driver.stream_id(s),
                });
            }
        }
        if !synced && !mutants::active(Mutant::StagingAfterFailedSync) {
            // A failed stream: leak rather than hand possibly-busy memory to others.
            std::mem::forget(std::mem::take(&mut *self.staging.borrow_mut()));
            self.leak();
            return;
        }
        // Pinned staging goes back only once its copies are known to be done (the mutant above
        // hands it back after a failed synchronisation: the bug the log shows as a return no
        // synchronisation orders after the copies).
        for p in std::mem::take(&mut *self.staging.borrow_mut()) {
            self.give_pinned_logged(p);
        }
        if !synced {
            // The mutant's bug stops at the staging: the rest is leaked as it should be.
            self.leak();
            return;
        }
        for l in std::mem::take(&mut *self.later.borrow_mut()) {
            self.give_pinned_logged(l.pinned);
        }
        for c in std::mem::take(&mut *self.checks.borrow_mut()) {
            self.give_pinned_logged(c.pinned);
        }
        for m in std::mem::take(&mut *self.parked.borrow_mut()) {
            let (ptr, len) = self.driver.mem_range(&m.mem);
            self.push(Command::Return {
                range: Range::device(ptr, len),
            });
            self.driver.give_mem(m.mem);
            if let Some((e, _)) = m.released {
                self.driver.give_event(e);
            }
        }
        for e in self.spent.borrow_mut().drain(..) {
            self.driver.give_event(e);
        }
        for (ptr, b) in self.alive.borrow_mut().drain() {
            // Back to the pool now, or when a handle outside the run goes (the run is done with
            // it either way).
            self.push(Command::Return {
                range: Range::device(ptr, b.bytes()),
            });
            drop(b);
        }
        self.held.borrow_mut().clear();
        for (_, (e, _)) in self.events.borrow_mut().drain() {
            self.driver.give_event(e);
        }
        let streams = std::mem::take(&mut self.streams);
        self.driver.give_streams(streams);
    }
}
