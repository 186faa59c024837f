//! Graph capture on the simulated device, as CUDA's: a captured run keeps its buffers, staging and
//! output copies at fixed addresses, and a replay writes new inputs into that staging (through the
//! run protocol's [`stage_replay_inputs`], the code CUDA's replay runs), re-runs the captured steps
//! in order on the values the buffers hold, and reads the outputs from the same copies. What it
//! computes comes from what the staging holds, so a replay whose inputs were not staged returns the
//! inputs before, as a CUDA graph would.
use std::sync::{Arc, Mutex};

use quorum_core::backend::{Carry, DeviceError, Footprint, Replay};
use quorum_core::cmdlog::{CommandLog, Range};
use quorum_core::counters::Counters;
use quorum_core::device::protocol::stage_replay_inputs;
use quorum_core::ir::Node;
use quorum_core::ops::{Kernel, NoSubgraphs, OpCtx};
use quorum_core::tensor::{Tensor, Value};

use super::{Shared, SimBuf, SimMem, SimPinned, Slot, bytes_of, read, run_kernel};

/// One launch of a captured run: the kernel, its node, the slots it reads (with the shape each
/// input has there: a view reads its source's buffer) and the slots it writes.
pub(super) struct Launch {
    pub kernel: Kernel,
    pub node: Node,
    pub max_tensor_bytes: u64,
    pub broken: bool,
    /// Whether its products take TF32 operands.
    pub tf32: bool,
    /// The wrong accumulator of a half MatMul (`F16_ACCUMULATOR`, `BF16_BLOCK_ACCUMULATOR`).
    pub half_acc: Option<super::HalfAccumulator>,
    pub inputs: Vec<Option<(Slot, Vec<usize>)>>,
    pub outputs: Vec<Slot>,
}

/// A step of a captured run, replayed in order.
pub(super) enum Step {
    /// The run's `upload`-th upload: the bytes its staging holds, into a buffer.
    Upload {
        upload: usize,
        slot: Slot,
    },
    Launch(Box<Launch>),
}

/// What a capture records beside the run protocol's own [`CaptureLog`](quorum_core::device::protocol::CaptureLog).
#[derive(Default)]
pub(super) struct Recording {
    pub steps: Vec<Step>,
    /// Each upload's tensor (what its staging holds after the captured run), in upload order.
    pub uploaded: Vec<Tensor>,
    /// Each read-back copy's slot and shape, in `download_later` order.
    pub later: Vec<(Slot, Vec<usize>)>,
}

/// A captured run of the simulated device.
pub(super) struct SimReplay {
    pub steps: Vec<Step>,
    pub later: Vec<(Slot, Vec<usize>)>,
    /// Each upload's staging index and bytes (`None`: empty), from the run protocol's capture log.
    pub uploads: Vec<Option<(usize, usize)>>,
    /// What each staging buffer holds, by staging index (what the graph's uploads read).
    pub staged: Mutex<Vec<Option<Tensor>>>,
    pub staging: Vec<SimPinned>,
    /// The pinned read-back copies, as (start, bytes).
    pub copies: Vec<SimPinned>,
    pub copy_bytes: Vec<usize>,
    pub buffers: Vec<Arc<SimBuf>>,
    pub resident: Vec<Arc<SimBuf>>,
    pub parked: Vec<SimMem>,
    pub shared: Arc<Shared>,
}

impl SimReplay {
    /// Re-runs the captured steps on what the staging holds now.
    fn run(&self, staged: &[Option<Tensor>]) -> Result<(), DeviceError> {
        for step in &self.steps {
            match step {
                Step::Upload { upload, slot } => {
                    // An empty upload copies nothing: its buffer keeps the captured empty value.
                    if let Some(Some((k, _))) = self.uploads.get(*upload) {
                        let t = staged.get(*k).cloned().flatten().ok_or_else(|| {
                            DeviceError::Device(format!("staging {k} was never written"))
                        })?;
                        *slot.lock().unwrap_or_else(|e| e.into_inner()) =
                            Some(Arc::new(Value::Tensor(t)));
                    }
                }
                Step::Launch(l) => {
                    let values = l
                        .inputs
                        .iter()
                        .map(|i| i.as_ref().map(|(s, shape)| read(s, shape)).transpose())
                        .collect::<Result<Vec<_>, _>>()?;
                    let ctx = OpCtx {
                        node: &l.node,
                        runner: &NoSubgraphs,
                        max_tensor_bytes: l.max_tensor_bytes,
                    };
                    let outs = run_kernel(l.kernel, &ctx, &values, l.tf32, l.broken, l.half_acc)?;
                    if outs.len() != l.outputs.len() {
                        return Err(DeviceError::Device(format!(
                            "node '{}' made {} outputs on replay, {} when captured",
                            l.node.name,
                            outs.len(),
                            l.outputs.len()
                        )));
                    }
                    for (slot, v) in l.outputs.iter().zip(outs) {
                        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(v));
                    }
                }
            }
        }
        Ok(())
    }
}

impl Replay for SimReplay {
    fn footprint(&self) -> Footprint {
        let device = |b: &Arc<SimBuf>| b.range();
        Footprint {
            inputs: self
                .uploads
                .iter()
                .map(|u| u.map(|(k, n)| Range::pinned(self.staging[k].start, n as u64)))
                .collect(),
            outputs: self
                .copies
                .iter()
                .zip(&self.copy_bytes)
                .map(|(p, n)| Range::pinned(p.start, (*n).max(1) as u64))
                .collect(),
            device: self
                .buffers
                .iter()
                .map(device)
                .chain(self.parked.iter().map(|m| Range::device(m.start, m.bytes)))
                .collect(),
            weights: self.resident.iter().map(device).collect(),
        }
    }

    fn replay(&self, inputs: &[&Tensor], counters: &Counters) -> Result<Vec<Tensor>, DeviceError> {
        let inputs: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
        self.replay_carrying(&inputs, &[], counters, None)?
            .into_iter()
            .map(|t| t.ok_or_else(|| DeviceError::Device("an output was not read".into())))
            .collect()
    }

    fn replay_carrying(
        &self,
        inputs: &[Option<&Tensor>],
        carry: &[Carry],
        counters: &Counters,
        log: Option<&CommandLog>,
    ) -> Result<Vec<Option<Tensor>>, DeviceError> {
        if !carry.is_empty() {
            return Err(DeviceError::Decline(
                "the simulated device does not carry outputs between replays".into(),
            ));
        }
        let mut staged = self.staged.lock().unwrap_or_else(|e| e.into_inner());
        stage_replay_inputs(
            inputs,
            &self.uploads,
            counters,
            log,
            DeviceError::Device,
            |k, n, t| {
                if bytes_of(t) != n {
                    return Err(DeviceError::Device(format!(
                        "a replay input has {} bytes, the graph's staging {n}",
                        bytes_of(t)
                    )));
                }
                staged[k] = Some(t.clone());
                Ok(self.staging[k].start)
            },
        )?;
        self.run(&staged)?;
        drop(staged);
        self.later
            .iter()
            .zip(&self.copy_bytes)
            .map(|((slot, shape), n)| {
                Counters::bump(&counters.d2h_bytes, *n as u64);
                Counters::bump(&counters.d2h_calls, 1);
                match &*read(slot, shape)? {
                    Value::Tensor(t) => Ok(Some(t.clone())),
                    _ => Err(DeviceError::Decline("a non-tensor output".into())),
                }
            })
            .collect()
    }
}

impl Drop for SimReplay {
    fn drop(&mut self) {
        for m in self.parked.drain(..) {
            Shared::give(&self.shared.free, m.bytes, m.start);
        }
        for p in self.staging.drain(..).chain(self.copies.drain(..)) {
            Shared::give(&self.shared.pinned, p.bytes, p.start);
        }
    }
}
