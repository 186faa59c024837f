//! A run captured as a CUDA graph ([`Captured`], replayed with new inputs), with the device checks
//! whose flags come back with each replay's outputs.
use std::sync::{Arc, Mutex};

use super::driver::{self, DeviceMemory, Event, PinnedMemory};
use super::memory::{self, DevBuf, tensor_bytes, tensor_from_bytes};
use super::run::{Check, CudaDriver, Later};
use super::{Device, Fault, KError, KResult};
use quorum_core::backend::{Carry, Footprint};
use quorum_core::cmdlog::{CommandLog, Range};
use quorum_core::counters::Counters;
use quorum_core::device::protocol;
use quorum_core::error::OpError;
use quorum_core::tensor::Tensor;

/// A run's device work captured as a graph, with the buffers, staging and output copies it uses at
/// fixed addresses: replaying it runs the same work on new inputs of the same shapes.
pub struct Captured {
    pub(super) graph: driver::Graph,
    /// Each upload of the captured run, in order: its staging buffer's index and the bytes the
    /// graph copies from it (`None`: empty).
    pub(super) uploads: Vec<Option<(usize, usize)>>,
    pub(super) staging: Mutex<Vec<PinnedMemory>>,
    pub(super) later: Vec<Later>,
    pub(super) alive: Vec<Arc<DevBuf>>,
    /// Resident buffers (weights) the graph reads.
    pub(super) resident: Vec<Arc<DevBuf>>,
    pub(super) parked: Vec<DeviceMemory>,
    pub(super) events: Vec<Event>,
    pub(super) device_pool: Arc<memory::Pool>,
    /// The device checks' flag copies, read after each replay.
    pub(super) checks: Vec<Check>,
}

impl Captured {
    /// The graph's fixed memory, for a replay's command log.
    pub fn footprint(&self) -> Footprint {
        let staging = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        Footprint {
            inputs: self
                .uploads
                .iter()
                .map(|u| u.map(|(k, n)| Range::pinned(staging[k].ptr as u64, n as u64)))
                .collect(),
            outputs: self
                .later
                .iter()
                .map(|l| Range::pinned(l.pinned.ptr as u64, l.bytes.max(1) as u64))
                .chain(
                    self.checks
                        .iter()
                        .map(|c| Range::pinned(c.pinned.ptr as u64, 4)),
                )
                .collect(),
            device: self
                .alive
                .iter()
                .map(|b| Range::device(b.ptr(), b.bytes() as u64))
                .chain(
                    self.parked
                        .iter()
                        .map(|m| Range::device(m.ptr, m.bytes as u64)),
                )
                .collect(),
            weights: self
                .resident
                .iter()
                .map(|b| Range::device(b.ptr(), b.bytes() as u64))
                .collect(),
        }
    }

    /// The first raised device check of the last run of the graph.
    pub(super) fn raised(&self, device: &Device) -> Option<Fault> {
        protocol::raised(&CudaDriver { device }, &self.checks)
    }

    /// Replays the graph: `inputs` are the first uploads of the captured run, in order (same shapes
    /// and dtypes); their bytes go to the staging buffers the graph copies from, the graph runs on
    /// `device`'s stream, and the outputs come back from the pinned buffers the graph copies to.
    pub fn replay(
        &self,
        device: &Device,
        inputs: &[&Tensor],
        counters: &Counters,
    ) -> KResult<Vec<Tensor>> {
        let inputs: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
        self.replay_carrying(device, &inputs, &[], counters, None)?
            .into_iter()
            .map(|t| t.ok_or_else(|| KError::Op(OpError::Invalid("an output was not read".into()))))
            .collect()
    }

    /// [`Captured::replay`] where a `None` input keeps what its staging buffer holds (what the
    /// previous replay's `carry` left there); after the run each [`Carry`] copies an output's pinned
    /// buffer into an input's staging buffer, and the carried outputs come back as `None`. The
    /// graph still moves every input and output across the bus: the transfer counters count them
    /// all; what a carry saves is the host's tensors and their copies.
    pub fn replay_carrying(
        &self,
        device: &Device,
        inputs: &[Option<&Tensor>],
        carry: &[Carry],
        counters: &Counters,
        log: Option<&CommandLog>,
    ) -> KResult<Vec<Option<Tensor>>> {
        let mut staging = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        let invalid = |msg: String| KError::Op(OpError::Invalid(msg));
        protocol::stage_replay_inputs(inputs, &self.uploads, counters, log, invalid, |k, n, t| {
            let bytes = tensor_bytes(t)
                .ok_or_else(|| KError::Decline(format!("{} values stay on the host", t.dtype())))?;
            if n != bytes.len() {
                return Err(invalid(format!(
                    "a replay input has {} bytes, the graph's staging {n}",
                    bytes.len()
                )));
            }
            let pinned = &mut staging[k];
            memory::stage(&mut pinned.as_mut_slice()[..n], &bytes);
            Ok(pinned.ptr as u64)
        })?;
        let stream = device.take_stream()?;
        let ran = self
            .graph
            .launch(&stream)
            .and_then(|_| Counters::time(&counters.wait_nanos, || stream.synchronize()));
        device.give_streams(vec![stream]);
        ran?;
        if let Some(f) = self.raised(device) {
            return Err(KError::Fault(f));
        }
        for c in carry {
            let (Some(l), Some(Some((k, n)))) =
                (self.later.get(c.output), self.uploads.get(c.input))
            else {
                return Err(KError::Op(OpError::Invalid(format!(
                    "carry from output {} to input {}: no such output or staged input",
                    c.output, c.input
                ))));
            };
            c.copy(
                &l.pinned.as_slice()[..l.bytes],
                &mut staging[*k].as_mut_slice()[..*n],
            )
            .map_err(|e| KError::Op(OpError::Invalid(e)))?;
        }
        drop(staging);
        self.later
            .iter()
            .enumerate()
            .map(|(j, l)| {
                Counters::bump(&counters.d2h_bytes, l.bytes as u64);
                Counters::bump(&counters.d2h_calls, 1);
                if carry.iter().any(|c| c.output == j) {
                    return Ok(None);
                }
                let bytes = &l.pinned.as_slice()[..l.bytes];
                Counters::time(&counters.readback_nanos, || {
                    tensor_from_bytes(l.what.dtype, &l.what.shape, bytes)
                })
                .map(Some)
                .ok_or_else(|| KError::Op(OpError::Invalid("cannot rebuild an output".into())))
            })
            .collect()
    }
}

impl Drop for Captured {
    fn drop(&mut self) {
        // The graph goes first; then nothing refers to the buffers any more.
        for m in self.parked.drain(..) {
            self.device_pool.give(m);
        }
        self.alive.clear();
        self.resident.clear();
        drop(std::mem::take(&mut self.events));
    }
}
