//! The one seam between the executor and accelerators.
//!
//! A [`Backend`] is a kind of accelerator (CUDA, wgpu): it claims a node at plan time — returning the
//! kernel it will launch — or declines it with a reason, without needing a device, and opens a
//! [`DeviceSession`] for a session. A device session holds what lives as long as the session (the
//! device, resident weights) and starts a [`DeviceRun`] per `Session::run`: the per-run context that
//! allocates, copies, launches and releases. The executor sees device values only as
//! [`DeviceTensor`]s and knows nothing of any backend; adding one touches the registry
//! (`quorum::providers`, in the crate above the backends) and [`Provider`], not the executor.
//!
//! Architecture invariant: this crate names no backend (it cannot: `quorum-core` is below them in
//! the crate graph). The registry that names the backends of this build lives in
//! `quorum::providers`, so that backends depend on the seam and the seam on nothing of theirs.
use std::any::Any;
use std::sync::Arc;

use crate::counters::Counters;
use crate::error::OpError;
use crate::ir::Node;
use crate::ops::OpCtx;
use crate::tensor::{DType, Tensor, Value};

/// Where nodes may run, by name. The CPU runs every node no accelerator claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    Cpu,
    /// NVIDIA GPUs through the CUDA driver (feature `cuda`).
    Cuda,
    /// Any adapter wgpu finds: Vulkan, Metal, DX12 (feature `wgpu`).
    Wgpu,
    /// A simulated device: the CPU kernels behind the device seam, for command logs (`quorum-sim`).
    /// Never chosen by `auto`.
    Sim,
}

impl Provider {
    pub fn name(self) -> &'static str {
        match self {
            Provider::Cpu => "cpu",
            Provider::Cuda => "cuda",
            Provider::Wgpu => "wgpu",
            Provider::Sim => "sim",
        }
    }

    /// The accelerators in the order `auto` prefers them.
    pub const ACCELERATORS: [Provider; 2] = [Provider::Cuda, Provider::Wgpu];
}

/// A kernel a backend claimed for a node at plan time; only that backend looks inside.
pub struct Claim(pub Box<dyn Any + Send + Sync>);

impl std::fmt::Debug for Claim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Claim")
    }
}

/// A kind of accelerator.
pub use quorum_oracle::arbitrate::Arithmetic;

/// The arithmetic a session lets its accelerators use for the products of f32 operands (matrix
/// products and the convolutions done as them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// Every product of exact f32 operands (the default).
    #[default]
    F32,
    /// Products may round their operands to TF32 (10 explicit mantissa bits) on tensor cores, as
    /// onnxruntime's CUDA provider and PyTorch allow; sums stay f32. A node whose kernel did is
    /// verified under that declaration (`DeviceRun::arithmetic`).
    Tf32,
    /// The model's f32 values converted to f16 when the session is built (mixed precision: ops
    /// kept in f32 where f16 would lose what they compute; the runtime's `mixed` module). The
    /// converted model is the one that runs and is verified; f32 products left stay exact.
    F16,
    /// As `F16`, to bfloat16 (f32's range, 8 significant bits).
    Bf16,
}

impl std::str::FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "fp32" | "exact" => Ok(Precision::F32),
            "tf32" => Ok(Precision::Tf32),
            "f16" | "fp16" | "half" => Ok(Precision::F16),
            "bf16" | "bfloat16" => Ok(Precision::Bf16),
            other => Err(format!(
                "precision '{other}' is not one of f32, tf32, f16, bf16"
            )),
        }
    }
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Tf32 => "tf32",
            Precision::F16 => "f16",
            Precision::Bf16 => "bf16",
        }
    }

    /// The half type an f32 model is converted to, for `F16` and `Bf16`.
    pub fn half(self) -> Option<crate::tensor::DType> {
        match self {
            Precision::F16 => Some(crate::tensor::DType::F16),
            Precision::Bf16 => Some(crate::tensor::DType::BF16),
            _ => None,
        }
    }
}

/// What a session asks of an accelerator when it opens it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeviceOptions {
    pub precision: Precision,
}

pub trait Backend: Send + Sync {
    fn provider(&self) -> Provider;
    /// Whether a device is present and usable here (`Err` says why not).
    fn available(&self) -> Result<(), String>;
    /// Whether `auto` should use it (a software adapter is usable but left out unless named).
    fn auto_available(&self) -> Result<(), String> {
        self.available()
    }
    /// Plan time, from the node alone: the kernel this backend will launch for `node`, or why it
    /// declines it (shown by `quorum info`).
    fn claim(&self, node: &Node) -> Result<Claim, String>;
    /// The device side of one session.
    fn open(&self, options: &DeviceOptions) -> Result<Arc<dyn DeviceSession>, String>;
}

/// What an accelerator keeps for the life of a session: the device and the session's resident
/// weights.
pub trait DeviceSession: Send + Sync {
    /// The device, in words (for reports).
    fn device_name(&self) -> String;
    /// The driver's version, where the backend can tell: with the device name it identifies the
    /// adapter whose measured dispatch thresholds `auto` uses (`session::thresholds`).
    fn driver_version(&self) -> Option<String> {
        None
    }
    /// Starts the device side of one run with `streams` streams (at least one). `index`: this
    /// device's place among the session's accelerators (stamped on every [`DeviceTensor`] it makes).
    /// `poison`: fill every new buffer with this byte, so that an element a kernel fails to write
    /// shows.
    fn begin<'s>(
        &'s self,
        index: usize,
        streams: usize,
        counters: &'s Counters,
        poison: Option<u8>,
    ) -> Result<Box<dyn DeviceRun + 's>, DeviceError>;
    /// Page-locks `[ptr, ptr + bytes)` in place for as long as the returned pin lives, so that
    /// uploads from it and copies into it ([`DeviceRun::download_into`]) skip the staging (what a
    /// pinned tensor of PyTorch, or onnxruntime's pinned allocator, gives). Declined where the
    /// device has no such memory. The range should stay allocated while pinned
    /// ([`crate::pinned::PinnedTensor`] owns what it pins): memory freed while pinned leaves the
    /// copies of a later allocation at its addresses reading and writing the old pages (wrong
    /// values, never another object's memory: a copy into the host writes only a slice its caller
    /// holds exclusively, through the pages the driver locked).
    fn pin_host(
        &self,
        _ptr: *mut u8,
        _bytes: usize,
    ) -> Result<Box<dyn Any + Send + Sync>, DeviceError> {
        Err(DeviceError::Decline(
            "this device page-locks no host memory".into(),
        ))
    }
}

/// The device side of one run: allocation, copies, launches, events and release, in the order the
/// executor asks, on the streams its schedule names (`quorum::session::schedule`). Work on one stream
/// runs in order; across streams only the events order it. Nothing a run allocated goes back to
/// shared pools before the device is done with it.
pub trait DeviceRun {
    /// Runs a node this backend claimed, on `stream`.
    fn launch(
        &self,
        stream: usize,
        claim: &Claim,
        ctx: &OpCtx,
        inputs: &dyn NodeInputs,
    ) -> Result<Vec<DeviceTensor>, DeviceError>;
    /// Copies a host value (a run input, or a value a host step made) to the device, on `stream`.
    fn upload(&self, stream: usize, t: &Tensor) -> Result<DeviceTensor, DeviceError>;
    /// An initializer on the device: uploaded once per session, then resident.
    fn weight(&self, v: &Arc<Value>) -> Result<DeviceTensor, DeviceError>;
    /// A value an earlier run left on the device (IO binding: `Session::run_bound`), as this run's:
    /// held until the run's streams are done, never written or reused by it. Its writer's run had
    /// synchronised before the value was handed out, so any stream may read it at once. Declined
    /// where it lives on another device (or this backend keeps no values between runs).
    fn adopt(&self, _d: &DeviceTensor) -> Result<DeviceTensor, DeviceError> {
        Err(DeviceError::Decline(
            "this device takes no values from other runs".into(),
        ))
    }
    /// Copies a device value back to the host now (after the work before it on its stream; it waits
    /// for that copy alone).
    fn download(&self, d: &DeviceTensor) -> Result<Tensor, DeviceError>;
    /// Copies a device value into `dst`, host memory page-locked on this device
    /// ([`DeviceSession::pin_host`], a [`crate::pinned::PinnedTensor`]'s bytes), straight over
    /// the bus after the work before it on its stream, and waits for that copy alone. Declined
    /// where `dst` is not such memory or not the value's size (the caller copies another way).
    fn download_into(&self, _d: &DeviceTensor, _dst: &mut [u8]) -> Result<(), DeviceError> {
        Err(DeviceError::Decline(
            "this device copies into no page-locked host memory".into(),
        ))
    }
    /// Starts copying a device value back, to be collected by [`DeviceRun::finish`] (the run's
    /// outputs): returns its place in `finish`'s result.
    fn download_later(&self, d: &DeviceTensor) -> Result<usize, DeviceError>;
    /// Records event `event` (the executor's name: the recording step) on `stream`.
    fn record(&self, stream: usize, event: usize) -> Result<(), DeviceError>;
    /// Makes `stream` wait for a recorded event.
    fn wait(&self, stream: usize, event: usize) -> Result<(), DeviceError>;
    /// Hands a value back before the run ends; its buffer may be reused only once the recorded
    /// events `after` (its readers on other streams) are complete.
    fn release(&self, d: DeviceTensor, after: &[usize]);
    /// Waits once for everything the run enqueued and returns the copies of
    /// [`DeviceRun::download_later`], in order.
    fn finish(&self) -> Result<Vec<Tensor>, DeviceError>;
    /// Starts capturing the run's device work into a graph: from here on nothing runs until
    /// [`DeviceRun::end_capture`], and anything that would wait for the device mid-run (a download,
    /// a weight upload) is declined, which refuses the capture.
    fn begin_capture(&self) -> Result<(), DeviceError> {
        Err(DeviceError::Decline(
            "this device does not capture graphs".into(),
        ))
    }
    /// Ends the capture: runs the captured work once and returns this run's outputs (the copies of
    /// [`DeviceRun::download_later`]) and a graph that replays the run on new inputs of the same
    /// shapes (the run's first uploads, in order).
    fn end_capture(&self) -> Result<(Vec<Tensor>, Box<dyn Replay>), DeviceError> {
        Err(DeviceError::Decline(
            "this device does not capture graphs".into(),
        ))
    }
    /// Abandons a capture begun with [`DeviceRun::begin_capture`]: nothing captured runs.
    fn abort_capture(&self) {}
    /// The arithmetic of the last [`DeviceRun::launch`]'s long sums: the standard promise, or
    /// operands rounded (TF32, where the session allows it) and sums truncated (the tensor
    /// cores). Verification judges the node's outputs under this declaration; a kernel that
    /// rounds without declaring it is wrong.
    fn arithmetic(&self) -> Arithmetic {
        Arithmetic::EXACT
    }
    /// Records this run's commands into `log` from now on (`crate::cmdlog`); a backend that keeps
    /// no log ignores it.
    fn attach_log(&self, _log: Arc<crate::cmdlog::CommandLog>) {}
    /// Times each launch's work on the device from now on, into `Counters::device_time` (wgpu:
    /// timestamp queries, where the adapter has them); a backend that cannot ignores it.
    fn time_kernels(&self) {}
    /// Checks every kernel launch from now on against the accesses it declares: the bytes it
    /// changed must lie in its declared writes, and its results must not move when every byte it
    /// did not declare is poisoned (CUDA; slow, for tests and the corpus run, and not while
    /// capturing). A launch that breaks its declaration fails the run with an error naming it. A
    /// backend without declared launches ignores it.
    fn audit_launches(&self) {}
}

/// The memory a captured graph touches at its fixed addresses, for a replay's command log: the
/// staging it uploads each input from (in the order of the replay's inputs, `None` for an empty
/// one), the pinned buffers it copies outputs and device checks into, its device buffers, and the
/// resident ones (weights) it only reads.
#[derive(Debug, Clone, Default)]
pub struct Footprint {
    pub inputs: Vec<Option<crate::cmdlog::Range>>,
    pub outputs: Vec<crate::cmdlog::Range>,
    pub device: Vec<crate::cmdlog::Range>,
    pub weights: Vec<crate::cmdlog::Range>,
}

impl Footprint {
    /// Every range the graph owns while it lives (all but the weights it only reads): what a
    /// replay takes and publishes again.
    pub fn owned(&self) -> Vec<crate::cmdlog::Range> {
        self.inputs
            .iter()
            .flatten()
            .chain(&self.outputs)
            .chain(&self.device)
            .copied()
            .collect()
    }
}

/// A run captured by a device: replays it on new inputs of the same shapes and dtypes.
pub trait Replay: Send + Sync {
    /// What the graph touches, for the command log (empty where the device does not say).
    fn footprint(&self) -> Footprint {
        Footprint::default()
    }

    /// `inputs`: the captured run's first uploads, in order. Returns the run's outputs.
    fn replay(&self, inputs: &[&Tensor], counters: &Counters) -> Result<Vec<Tensor>, DeviceError>;

    /// [`Replay::replay`] where `inputs[i]` is `None` for an input the previous replay's `carry`
    /// left staged; after the run, each [`Carry`] copies an output into an input's staging for the
    /// next replay, and that output comes back as `None` (no host tensor is built for it). A device
    /// that cannot carry replays plainly when there is nothing to carry, and declines otherwise.
    /// With `log`, the device logs the host's writes of the inputs into the graph's staging, where
    /// it made them (`crate::device::protocol::stage_replay_inputs`); the caller logs the rest.
    fn replay_carrying(
        &self,
        inputs: &[Option<&Tensor>],
        carry: &[Carry],
        counters: &Counters,
        log: Option<&crate::cmdlog::CommandLog>,
    ) -> Result<Vec<Option<Tensor>>, DeviceError> {
        let _ = log;
        let given: Option<Vec<&Tensor>> = inputs.iter().copied().collect();
        match given {
            Some(given) if carry.is_empty() => Ok(self
                .replay(&given, counters)?
                .into_iter()
                .map(Some)
                .collect()),
            _ => Err(DeviceError::Decline(
                "this device does not carry outputs between replays".into(),
            )),
        }
    }
}

/// An output of a replay that becomes an input of the next: the output's bytes read as `rows`
/// rows of `out_row` bytes, of which each row's last `in_row` bytes are the input's row (a key/value
/// cache one position longer than its input, its oldest position dropped along the length axis).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Carry {
    pub output: usize,
    pub input: usize,
    pub rows: usize,
    pub out_row: usize,
    pub in_row: usize,
}

impl Carry {
    /// Copies `src` (the output's bytes) into `dst` (the input's), row by row; both must be exactly
    /// the rows' sizes, so that no byte of the input is left from before.
    pub fn copy(&self, src: &[u8], dst: &mut [u8]) -> Result<(), String> {
        let (rows, o, i) = (self.rows, self.out_row, self.in_row);
        if i > o || src.len() != rows * o || dst.len() != rows * i {
            return Err(format!(
                "carry of {rows} rows of {o} bytes into rows of {i}: {} bytes in, {} out",
                src.len(),
                dst.len()
            ));
        }
        for r in 0..rows {
            dst[r * i..(r + 1) * i].copy_from_slice(&src[r * o + (o - i)..(r + 1) * o]);
        }
        Ok(())
    }
}

/// A node's inputs as a backend's kernel sees them: on the device (uploaded on first use) or on the
/// host (downloaded on first use; for small parameter tensors such as shapes, axes and pads).
pub trait NodeInputs {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Whether input `i` is present (not omitted).
    fn present(&self, i: usize) -> bool;
    fn dtype(&self, i: usize) -> Option<DType>;
    fn shape(&self, i: usize) -> Option<Vec<usize>>;
    fn device(&self, i: usize) -> Result<Option<DeviceTensor>, DeviceError>;
    fn host(&self, i: usize) -> Result<Option<Arc<Value>>, DeviceError>;
    /// Whether input `i`'s values are fixed for the session (a weight, or shape arithmetic): reading
    /// them on the host neither stalls a stream nor stops a graph capture.
    fn fixed(&self, _i: usize) -> bool {
        false
    }
}

/// A tensor in an accelerator's memory. The executor moves it between nodes; only the backend that
/// made it looks inside `buf`.
#[derive(Clone)]
pub struct DeviceTensor {
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// The index, among the session's accelerators, of the one that holds it.
    pub device: usize,
    /// The stream that wrote it (a download waits for the work before it there).
    pub stream: usize,
    pub buf: Arc<dyn Any + Send + Sync>,
}

impl DeviceTensor {
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::fmt::Debug for DeviceTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceTensor({} {:?} on device {})",
            self.dtype, self.shape, self.device
        )
    }
}

/// Why a device step did not produce its outputs.
#[derive(Debug)]
pub enum DeviceError {
    /// A form the kernel does not handle: the node runs on the CPU instead.
    Decline(String),
    /// The inputs break the operator's contract (as the CPU kernel would say).
    Op(OpError),
    /// The device failed (the message names the call and the device's error).
    Device(String),
    /// A check a kernel made on the device failed (found when the run's work was collected).
    Fault(Fault),
}

/// A contract check made on the device rather than on the host (an index out of range, read where
/// reading it on the host would stall the stream or stop a graph capture): the kernel raises a flag
/// word and leaves no wild access behind; the flag comes back with the run's outputs and becomes
/// this error, naming the node as a host check would.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    pub node: String,
    pub op: String,
    /// The node's input shapes, as the node's errors print them.
    pub shapes: String,
    pub msg: String,
}

impl std::fmt::Display for DeviceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceError::Decline(m) => write!(f, "declined: {m}"),
            DeviceError::Op(e) => write!(f, "{e}"),
            DeviceError::Device(m) => f.write_str(m),
            DeviceError::Fault(x) => write!(
                f,
                "node '{}' ({}) with inputs {}: {}",
                x.node, x.op, x.shapes, x.msg
            ),
        }
    }
}

impl From<OpError> for DeviceError {
    fn from(e: OpError) -> Self {
        DeviceError::Op(e)
    }
}

#[cfg(test)]
mod carry_tests {
    use super::Carry;

    /// Two rows (heads) of three positions of two bytes: each row keeps its last two positions, in
    /// row order; a destination or source of another size is an error, not a partial copy.
    #[test]
    fn a_carry_keeps_each_rows_last_positions() {
        let src: Vec<u8> = (0u8..12).collect();
        let c = Carry {
            output: 0,
            input: 0,
            rows: 2,
            out_row: 6,
            in_row: 4,
        };
        let mut dst = vec![0xAAu8; 9];
        c.copy(&src, &mut dst[..8]).unwrap();
        assert_eq!(dst, vec![2, 3, 4, 5, 8, 9, 10, 11, 0xAA]);
        assert!(c.copy(&src[..11], &mut dst[..8]).is_err());
        assert!(c.copy(&src, &mut dst[..7]).is_err());
        assert!(c.copy(&src, &mut dst).is_err());
        let widening = Carry { in_row: 8, ..c };
        assert!(widening.copy(&src, &mut [0u8; 16]).is_err());
    }
}
