//! A simulated device behind the backend seam: claimed nodes run through the CPU kernels on values
//! held in "device" buffers with addresses of their own, on streams and events that exist only as
//! names. Everything runs at once, in issue order, so results are always right; what it is for is
//! the command log (`quorum_core::cmdlog`): the same schedule, allocation, reuse and release rules as the
//! CUDA run, recorded on a machine without a GPU, for the happens-before checker to judge.
//!
//! It claims what the CUDA backend claims (where this build has it), so a session's placement and
//! schedule are CUDA's. `--provider sim` (never chosen by `auto`).
#![forbid(unsafe_code)]
use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use quorum_core::backend::{
    Arithmetic, Backend, Claim, DeviceError, DeviceOptions, DeviceRun, DeviceSession, DeviceTensor,
    Fault, NodeInputs, Precision, Provider, Replay,
};
use quorum_core::cmdlog::{Agent, CommandLog, Range};
use quorum_core::counters::Counters;
use quorum_core::device::protocol::{Buffer, CaptureLog, Driver, RunProtocol};
use quorum_core::freelist::size_class;
use quorum_core::ir::{Attr, Node};
use quorum_core::mutants;
use quorum_core::ops::{Kernel, OpCtx, Registry};
use quorum_core::tensor::{Tensor, Value};

mod capture;

use capture::{Launch, Recording, SimReplay, Step};

/// The simulated device (registered in `quorum::providers::backend`).
pub struct SimBackend;

impl Backend for SimBackend {
    fn provider(&self) -> Provider {
        Provider::Sim
    }

    fn available(&self) -> Result<(), String> {
        Ok(())
    }

    fn claim(&self, node: &Node) -> Result<Claim, String> {
        if node
            .attrs
            .values()
            .any(|a| matches!(a, Attr::Graph(_) | Attr::Graphs(_)))
        {
            return Err("nodes with subgraphs run on the CPU".into());
        }
        // What CUDA runs, where it is built: the same placement, so the same schedule.
        #[cfg(feature = "cuda")]
        quorum_cuda::ops::claim(node).map_err(|why| format!("as CUDA would: {why}"))?;
        let kernel = Registry::cpu()
            .get(&node.domain, &node.op_type)
            .ok_or("no CPU kernel to simulate with")?;
        Ok(Claim(Box::new(kernel)))
    }

    fn open(&self, options: &DeviceOptions) -> Result<Arc<dyn DeviceSession>, String> {
        Ok(Arc::new(SimSession {
            broken: std::env::var(BREAK_VAR).ok().filter(|op| !op.is_empty()),
            precision: options.precision,
            shared: Arc::default(),
            weights: Mutex::default(),
        }))
    }
}

/// Names an op whose simulated kernel is made wrong on purpose, for the harnesses that must find a
/// wrong kernel (`quorum compare`'s bisect, strict verification): the middle element of the op's
/// first f32 output is moved by 2⁻⁷ of its magnitude plus 2⁻⁷ (0.8%, far outside any bound, small
/// enough to look plausible). The value [`UNDECLARED_TF32`] instead makes MatMul and Gemm round
/// their operands to TF32 without declaring it. Read when a session opens the device; unset,
/// every kernel is right.
pub const BREAK_VAR: &str = "QUORUM_SIM_BREAK";

/// [`BREAK_VAR`]'s value for a TF32 path that claims f32: every element within its bound, the
/// rounding systematic (what the spread judge exists for).
pub const UNDECLARED_TF32: &str = "undeclared-tf32";

/// [`BREAK_VAR`]'s value for an f16 path that accumulates in f16: a MatMul of two f16 matrices
/// rounds its running sum to f16 after every product (what an `mma` with an f16 accumulator does,
/// and what the standard promise of f32 accumulation forbids). Other MatMuls stay right.
pub const F16_ACCUMULATOR: &str = "f16-accumulate";

/// [`BREAK_VAR`]'s value for a bf16 path that rounds its accumulator to bf16 between K-blocks: a
/// MatMul of two bf16 matrices sums each block of [`BF16_BLOCK`] products in f32, then rounds the
/// running sum to bf16 (what a kernel that keeps its partial sums in a bf16 tile between k-tiles
/// does). Other MatMuls stay right.
pub const BF16_BLOCK_ACCUMULATOR: &str = "bf16-block-accumulate";

/// The K-block after which [`BF16_BLOCK_ACCUMULATOR`] rounds its sum (the asynchronous tile's
/// k-tile of halves).
pub const BF16_BLOCK: usize = 32;

/// A wrong accumulator of a broken half MatMul: the dtype it breaks and after how many products
/// it rounds the running sum to that dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HalfAccumulator {
    dtype: quorum_core::tensor::DType,
    block: usize,
}

impl HalfAccumulator {
    /// The accumulator [`BREAK_VAR`]'s value `broken` names, if it names one.
    fn named(broken: Option<&str>) -> Option<HalfAccumulator> {
        use quorum_core::tensor::DType;
        match broken {
            Some(F16_ACCUMULATOR) => Some(HalfAccumulator {
                dtype: DType::F16,
                block: 1,
            }),
            Some(BF16_BLOCK_ACCUMULATOR) => Some(HalfAccumulator {
                dtype: DType::BF16,
                block: BF16_BLOCK,
            }),
            _ => None,
        }
    }

    fn round(self, v: f32) -> f32 {
        use quorum_core::tensor::DType;
        match self.dtype {
            DType::BF16 => half::bf16::from_f32(v).to_f32(),
            _ => half::f16::from_f32(v).to_f32(),
        }
    }
}

/// The product of two half matrices `[m, k]` · `[k, n]` of `acc`'s dtype with the running sum
/// rounded to that dtype every `acc.block` products; `None` for any other MatMul.
fn half_accumulated(
    inputs: &[Option<Arc<Value>>],
    acc: HalfAccumulator,
) -> Result<Option<Value>, DeviceError> {
    let [Some(a), Some(b)] = inputs else {
        return Ok(None);
    };
    let (Value::Tensor(a), Value::Tensor(b)) = (a.as_ref(), b.as_ref()) else {
        return Ok(None);
    };
    let (&[m, k], &[k2, n]) = (a.shape(), b.shape()) else {
        return Ok(None);
    };
    if a.dtype() != acc.dtype || b.dtype() != acc.dtype || k != k2 {
        return Ok(None);
    }
    let (av, bv) = (a.to_f64_vec()?, b.to_f64_vec()?);
    let mut y = Vec::with_capacity(m * n);
    for i in 0..m {
        for j in 0..n {
            let mut s = 0f32;
            for l in 0..k {
                s += av[i * k + l] as f32 * bv[l * n + j] as f32;
                if (l + 1) % acc.block == 0 {
                    s = acc.round(s);
                }
            }
            y.push(s as f64);
        }
    }
    Ok(Some(Value::Tensor(Tensor::from_f64s(
        acc.dtype,
        &[m, n],
        y,
    )?)))
}

/// Whether the simulated kernel of `node` takes TF32 operands when the session allows it: the
/// ops whose CUDA kernels are the tiled GEMM (convolutions aside: the simulated device keeps them
/// exact, and declares so).
fn rounds_to_tf32(node: &Node) -> bool {
    node.domain.is_empty() && matches!(node.op_type.as_str(), "MatMul" | "Gemm")
}

/// `values` with the f32 products' operands (the first two) rounded to TF32.
fn tf32_operands(values: &[Option<Arc<Value>>]) -> Result<Vec<Option<Arc<Value>>>, DeviceError> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| match v.as_deref() {
            Some(Value::Tensor(t)) if i < 2 && t.dtype() == quorum_core::tensor::DType::F32 => {
                let r: Vec<f32> = t
                    .to_f64_vec()?
                    .into_iter()
                    .map(|x| Arithmetic::TF32.round(x as f32))
                    .collect();
                Ok(Some(Arc::new(Value::Tensor(Tensor::from_f32(
                    t.shape(),
                    r,
                )?))))
            }
            _ => Ok(v.clone()),
        })
        .collect()
}

/// `v` with the deliberate error of [`BREAK_VAR`] where it is an f32 tensor with elements.
fn broken(v: Value) -> Result<Value, DeviceError> {
    let Value::Tensor(t) = &v else {
        return Ok(v);
    };
    if t.dtype() != quorum_core::tensor::DType::F32 || t.is_empty() {
        return Ok(v);
    }
    let mut data: Vec<f32> = t.to_f64_vec()?.into_iter().map(|x| x as f32).collect();
    let mid = data.len() / 2;
    data[mid] += (data[mid].abs() + 1.0) / 128.0;
    Ok(Value::Tensor(Tensor::from_f32(t.shape(), data)?))
}

/// The simulated device's memory and names, shared by its runs and its buffers.
#[derive(Default)]
struct Shared {
    /// The next fresh address (device and pinned share the counter; their spaces differ).
    next: AtomicU64,
    /// Device memory handed back to the pool, as (size class, start).
    free: Mutex<Vec<(u64, u64)>>,
    /// Pinned staging handed back, as (size class, start).
    pinned: Mutex<Vec<(u64, u64)>>,
    /// Names for streams and events.
    names: AtomicU64,
}

impl Shared {
    fn fresh(&self, class: u64) -> u64 {
        // 256-byte aligned, never 0.
        self.next.fetch_add(class, Ordering::Relaxed) + 4096
    }

    fn name(&self) -> u64 {
        self.names.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn take(list: &Mutex<Vec<(u64, u64)>>, class: u64) -> Option<u64> {
        let mut free = list.lock().unwrap_or_else(|e| e.into_inner());
        free.iter()
            .position(|&(k, _)| k == class)
            .map(|i| free.swap_remove(i).1)
    }

    fn give(list: &Mutex<Vec<(u64, u64)>>, class: u64, start: u64) {
        list.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((class, start));
    }
}

/// One simulated device: its memory, and its resident weights.
struct SimSession {
    shared: Arc<Shared>,
    weights: Mutex<HashMap<usize, (Weak<Value>, DeviceTensor)>>,
    /// The op made wrong on purpose ([`BREAK_VAR`]).
    broken: Option<String>,
    precision: Precision,
}

/// Simulated device memory: an address range.
#[derive(Debug, Clone, Copy)]
struct SimMem {
    start: u64,
    bytes: u64,
}

/// The value a simulated buffer holds (shared with a captured graph's steps, which write and read
/// it again on each replay).
type Slot = Arc<Mutex<Option<Arc<Value>>>>;

/// The value in `slot`, under `shape` (a view's buffer holds its source's value).
fn read(slot: &Slot, shape: &[usize]) -> Result<Arc<Value>, DeviceError> {
    let v = slot
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .ok_or_else(|| {
            DeviceError::Device("a simulated buffer read before it was written".into())
        })?;
    match &*v {
        Value::Tensor(t) if t.shape() != shape => Ok(Arc::new(Value::Tensor(t.reshape(shape)?))),
        _ => Ok(v),
    }
}

/// Runs a kernel as the simulated device does: on TF32 operands where `tf32`, with [`BREAK_VAR`]'s
/// error where `broken_op`.
fn run_kernel(
    kernel: Kernel,
    ctx: &OpCtx,
    inputs: &[Option<Arc<Value>>],
    tf32: bool,
    broken_op: bool,
    half_accumulator: Option<HalfAccumulator>,
) -> Result<Vec<Value>, DeviceError> {
    if let Some(acc) = half_accumulator
        && ctx.node.domain.is_empty()
        && ctx.node.op_type == "MatMul"
        && let Some(y) = half_accumulated(inputs, acc)?
    {
        return Ok(vec![y]);
    }
    let rounded;
    let inputs = if tf32 {
        rounded = tf32_operands(inputs)?;
        &rounded
    } else {
        inputs
    };
    let refs: Vec<Option<&Value>> = inputs.iter().map(|v| v.as_deref()).collect();
    let mut outs = kernel(ctx, &refs)?;
    if broken_op && !outs.is_empty() {
        let first = outs.remove(0);
        outs.insert(0, broken(first)?);
    }
    Ok(outs)
}

/// A simulated buffer: its memory and the value it holds; the memory goes back to the device's
/// pool when the last handle drops, as a CUDA buffer's does.
struct SimBuf {
    mem: Option<SimMem>,
    value: Slot,
    pool: Arc<Shared>,
}

impl SimBuf {
    fn start(&self) -> u64 {
        self.mem.map_or(0, |m| m.start)
    }

    fn range(&self) -> Range {
        self.mem
            .map_or(Range::device(0, 0), |m| Range::device(m.start, m.bytes))
    }

    fn set(&self, v: Arc<Value>) {
        *self.value.lock().unwrap_or_else(|e| e.into_inner()) = Some(v);
    }
}

impl Buffer for SimBuf {
    type Mem = SimMem;

    fn ptr(&self) -> u64 {
        self.start()
    }

    fn bytes(&self) -> u64 {
        self.mem.map_or(0, |m| m.bytes)
    }

    fn into_mem(mut self) -> Option<SimMem> {
        self.mem.take()
    }
}

impl Drop for SimBuf {
    fn drop(&mut self) {
        if let Some(m) = self.mem.take() {
            Shared::give(&self.pool.free, m.bytes, m.start);
        }
    }
}

/// Pinned staging of the simulated device: an address range, no bytes.
struct SimPinned {
    start: u64,
    bytes: u64,
}

/// The driver calls of the simulated device: names instead of streams and events, address ranges
/// instead of memory, nothing copied (the values travel in the buffers). Every synchronisation
/// succeeds unless a failure is injected (`quorum_core::mutants::fail_syncs_from`).
struct SimDriver {
    shared: Arc<Shared>,
    /// Synchronisations of this run so far (for an injected failure).
    syncs: Cell<u64>,
}

impl SimDriver {
    fn synced(&self) -> Result<(), DeviceError> {
        let n = self.syncs.get() + 1;
        self.syncs.set(n);
        let from = mutants::failing_sync();
        if from != 0 && n >= from {
            return Err(DeviceError::Device(format!(
                "simulated stream failure (synchronisation {n})"
            )));
        }
        Ok(())
    }
}

impl Driver for SimDriver {
    type Stream = u64;
    type Event = u64;
    type Mem = SimMem;
    type Buf = SimBuf;
    type Pinned = SimPinned;
    type Later = Tensor;
    type Error = DeviceError;

    fn invalid(msg: String) -> DeviceError {
        DeviceError::Device(msg)
    }

    fn fault(f: Fault) -> DeviceError {
        DeviceError::Fault(f)
    }

    fn decline(msg: String) -> DeviceError {
        DeviceError::Decline(msg)
    }

    fn stream_id(&self, s: &u64) -> u64 {
        *s
    }

    fn event_id(&self, e: &u64) -> u64 {
        *e
    }

    fn mem_range(&self, m: &SimMem) -> (u64, u64) {
        (m.start, m.bytes)
    }

    fn pinned_range(&self, p: &SimPinned) -> (u64, u64) {
        (p.start, p.bytes)
    }

    fn pinned_bytes<'p>(&self, _: &'p SimPinned) -> &'p [u8] {
        &[]
    }

    fn take_event(&self) -> Result<u64, DeviceError> {
        Ok(self.shared.name())
    }

    fn give_event(&self, _: u64) {}

    fn give_streams(&self, _: Vec<u64>) {}

    fn record(&self, _: &u64, _: &u64) -> Result<(), DeviceError> {
        Ok(())
    }

    fn wait(&self, _: &u64, _: &u64) -> Result<(), DeviceError> {
        Ok(())
    }

    fn sync_stream(&self, _: &u64) -> Result<(), DeviceError> {
        self.synced()
    }

    fn sync_event(&self, _: &u64) -> Result<(), DeviceError> {
        self.synced()
    }

    fn take_mem(&self, bytes: usize, counters: &Counters) -> Result<SimMem, DeviceError> {
        let class = size_class(bytes) as u64;
        let start = match Shared::take(&self.shared.free, class) {
            Some(s) => {
                Counters::bump(&counters.pool_hits, 1);
                s
            }
            None => {
                Counters::bump(&counters.pool_misses, 1);
                self.shared.fresh(class)
            }
        };
        Ok(SimMem {
            start,
            bytes: class,
        })
    }

    fn give_mem(&self, m: SimMem) {
        Shared::give(&self.shared.free, m.bytes, m.start);
    }

    fn wrap(&self, m: SimMem) -> SimBuf {
        SimBuf {
            mem: Some(m),
            value: Slot::default(),
            pool: self.shared.clone(),
        }
    }

    fn fill32(&self, _: &u64, _: u64, _: u32, _: usize) -> Result<(), DeviceError> {
        Ok(())
    }

    fn take_pinned(&self, bytes: usize) -> Result<SimPinned, DeviceError> {
        let class = size_class(bytes) as u64;
        let start =
            Shared::take(&self.shared.pinned, class).unwrap_or_else(|| self.shared.fresh(class));
        Ok(SimPinned {
            start,
            bytes: class,
        })
    }

    fn give_pinned(&self, p: SimPinned) {
        Shared::give(&self.shared.pinned, p.bytes, p.start);
    }

    fn upload(
        &self,
        _: &u64,
        _: u64,
        _: &SimPinned,
        _: usize,
        _: usize,
    ) -> Result<(), DeviceError> {
        Ok(())
    }

    /// Small pieces, so that the stream fuzzer's tensors of a few hundred bytes are uploaded in
    /// several (the staging of one piece beside the copy of the one before, in the command log).
    fn upload_piece(&self) -> Option<usize> {
        Some(64)
    }

    fn download(&self, _: &u64, _: &mut SimPinned, _: u64, _: usize) -> Result<(), DeviceError> {
        Ok(())
    }
}

impl DeviceSession for SimSession {
    fn device_name(&self) -> String {
        "simulated device (CPU kernels)".into()
    }

    fn begin<'s>(
        &'s self,
        index: usize,
        streams: usize,
        counters: &'s Counters,
        poison: Option<u8>,
    ) -> Result<Box<dyn DeviceRun + 's>, DeviceError> {
        let driver = SimDriver {
            shared: self.shared.clone(),
            syncs: Cell::new(0),
        };
        let streams = (0..streams.max(1)).map(|_| self.shared.name()).collect();
        Ok(Box::new(SimRun {
            session: self,
            index,
            proto: RunProtocol::new(driver, streams, counters, poison),
            capture: RefCell::new(None),
            rounded: Cell::new(false),
        }))
    }

    /// Nothing to lock on a simulated device: the pin is a token, and copies into the memory
    /// ([`DeviceRun::download_into`]) write the value's bytes as a device's copy would.
    fn pin_host(
        &self,
        _ptr: *mut u8,
        _bytes: usize,
    ) -> Result<Box<dyn Any + Send + Sync>, DeviceError> {
        Ok(Box::new(()))
    }
}

struct SimRun<'s> {
    session: &'s SimSession,
    index: usize,
    proto: RunProtocol<'s, SimDriver>,
    /// The steps of a capture in progress.
    capture: RefCell<Option<Recording>>,
    /// Whether the last launch rounded its operands to TF32 and declared it.
    rounded: Cell<bool>,
}

/// The scratch a CUDA kernel of this node may use, in bytes (`None` for kernels without): a split-K
/// GEMM's workspace (every GEMM gets one here, as if split over K), a reduction's partials, a norm's
/// statistics. Sized from the outputs, which is all the simulated device needs: a range of its own
/// that lives for two launches.
fn scratch_bytes(node: &Node, outputs: &[Range]) -> Option<usize> {
    let op = node.op_type.as_str();
    let scratch = matches!(op, "MatMul" | "Gemm")
        || op.starts_with("Reduce")
        || matches!(op, "LayerNormalization" | "Softmax" | "ArgMax" | "ArgMin");
    let out: u64 = outputs.iter().map(|r| r.len).sum();
    scratch.then_some((out.max(256) * 2) as usize)
}

/// Ops whose CUDA output is a view of their first input (the same buffer under another shape).
fn is_view(node: &Node) -> bool {
    matches!(
        node.op_type.as_str(),
        "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" | "Identity"
    ) && node.domain.is_empty()
}

fn bytes_of(t: &Tensor) -> usize {
    t.len() * t.dtype().size_in_memory()
}

fn bytes_of_dev(d: &DeviceTensor) -> usize {
    d.len() * d.dtype.size_in_memory()
}

impl SimRun<'_> {
    fn wrap(&self, buf: Arc<SimBuf>, t: &Tensor) -> DeviceTensor {
        DeviceTensor {
            dtype: t.dtype(),
            shape: t.shape().to_vec(),
            device: self.index,
            stream: self.proto.current_stream(),
            buf: buf as Arc<dyn Any + Send + Sync>,
        }
    }

    fn unwrap(d: &DeviceTensor) -> Result<Arc<SimBuf>, DeviceError> {
        d.buf
            .clone()
            .downcast::<SimBuf>()
            .map_err(|_| DeviceError::Decline("a tensor on another device".into()))
    }

    /// The value `d` holds, under `d`'s shape (a view's buffer holds its source's value).
    fn value(d: &DeviceTensor, buf: &SimBuf) -> Result<Arc<Value>, DeviceError> {
        read(&buf.value, &d.shape)
    }

    fn tensor(d: &DeviceTensor, buf: &SimBuf) -> Result<Tensor, DeviceError> {
        match &*Self::value(d, buf)? {
            Value::Tensor(t) => Ok(t.clone()),
            _ => Err(DeviceError::Decline("a non-tensor value".into())),
        }
    }
}

impl DeviceRun for SimRun<'_> {
    fn launch(
        &self,
        stream: usize,
        claim: &Claim,
        ctx: &OpCtx,
        inputs: &dyn NodeInputs,
    ) -> Result<Vec<DeviceTensor>, DeviceError> {
        let kernel = claim
            .0
            .downcast_ref::<Kernel>()
            .ok_or_else(|| DeviceError::Device("a claim of another backend".into()))?;
        self.proto.set_stream(stream);
        self.proto.begin_node(&ctx.node.name);
        let mut values = Vec::with_capacity(inputs.len());
        let mut read_slots = Vec::with_capacity(inputs.len());
        let mut reads = Vec::new();
        let mut first = None;
        for i in 0..inputs.len() {
            match inputs.device(i)? {
                None => {
                    values.push(None);
                    read_slots.push(None);
                }
                Some(d) => {
                    let buf = Self::unwrap(&d)?;
                    reads.push(buf.range());
                    values.push(Some(Self::value(&d, &buf)?));
                    read_slots.push(Some((buf.value.clone(), d.shape.clone())));
                    if i == 0 {
                        first = Some(buf);
                    }
                }
            }
        }
        let broken_op = self.session.broken.as_deref() == Some(ctx.node.op_type.as_str());
        let undeclared = self.session.broken.as_deref() == Some(UNDECLARED_TF32);
        let declared = self.session.precision == Precision::Tf32;
        let tf32 = rounds_to_tf32(ctx.node) && (declared || undeclared);
        self.rounded.set(tf32 && declared && !undeclared);
        let half_acc = HalfAccumulator::named(self.session.broken.as_deref());
        let outs = run_kernel(*kernel, ctx, &values, tf32, broken_op, half_acc)?;
        // A view, as CUDA makes it: the output is the input's buffer, nothing runs.
        if let (true, Some(buf), [Value::Tensor(t)]) = (is_view(ctx.node), first, outs.as_slice()) {
            return Ok(vec![self.wrap(buf, t)]);
        }
        let mut devs = Vec::with_capacity(outs.len());
        let mut writes = Vec::new();
        for v in outs {
            let Value::Tensor(t) = &v else {
                return Err(DeviceError::Decline("a non-tensor output".into()));
            };
            let buf = self.proto.alloc(bytes_of(t))?;
            writes.push(buf.range());
            let d = self.wrap(buf.clone(), t);
            buf.set(Arc::new(v));
            devs.push(d);
        }
        if let Some(rec) = self.capture.borrow_mut().as_mut() {
            let outputs = devs
                .iter()
                .map(|d| Self::unwrap(d).map(|b| b.value.clone()))
                .collect::<Result<_, _>>()?;
            rec.steps.push(Step::Launch(Box::new(Launch {
                kernel: *kernel,
                node: ctx.node.clone(),
                max_tensor_bytes: ctx.max_tensor_bytes,
                broken: broken_op,
                tf32,
                half_acc,
                inputs: read_slots,
                outputs,
            })));
        }
        match scratch_bytes(ctx.node, &writes) {
            // As CUDA's split-K GEMM, reductions and norms do: outputs first, then a scratch
            // buffer that a first launch writes and a second reads, released after the second.
            Some(bytes) => {
                let scratch = self.proto.alloc(bytes)?;
                let range = scratch.range();
                self.proto.log_work("kernel", reads.clone(), vec![range]);
                let kept = self.proto.scratch_before_last_read(scratch);
                reads.push(range);
                self.proto.log_work("kernel", reads, writes);
                if let Some(scratch) = kept {
                    self.proto.release(scratch, &[]);
                }
            }
            None => self.proto.log_work("kernel", reads, writes),
        }
        Ok(devs)
    }

    fn upload(&self, stream: usize, t: &Tensor) -> Result<DeviceTensor, DeviceError> {
        self.proto.set_stream(stream);
        let bytes = bytes_of(t);
        let buf = self.proto.alloc(bytes)?;
        self.proto.upload(buf.start(), bytes, |_, _| {})?;
        buf.set(Arc::new(Value::Tensor(t.clone())));
        if let Some(rec) = self.capture.borrow_mut().as_mut() {
            rec.steps.push(Step::Upload {
                upload: rec.uploaded.len(),
                slot: buf.value.clone(),
            });
            rec.uploaded.push(t.clone());
        }
        Ok(self.wrap(buf, t))
    }

    fn adopt(&self, d: &DeviceTensor) -> Result<DeviceTensor, DeviceError> {
        let buf = Self::unwrap(d)?;
        if !Arc::ptr_eq(&buf.pool, &self.session.shared) {
            return Err(DeviceError::Decline(
                "a value of another simulated device (another session's)".into(),
            ));
        }
        self.proto.hold(&buf);
        Ok(DeviceTensor {
            dtype: d.dtype,
            shape: d.shape.clone(),
            device: self.index,
            stream: 0,
            buf: buf as Arc<dyn Any + Send + Sync>,
        })
    }

    fn weight(&self, v: &Arc<Value>) -> Result<DeviceTensor, DeviceError> {
        let key = Arc::as_ptr(v) as usize;
        let mut weights = self
            .session
            .weights
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some((w, d)) = weights.get(&key)
            && w.upgrade().is_some_and(|w| Arc::ptr_eq(&w, v))
        {
            self.proto.hold(&Self::unwrap(d)?);
            return Ok(d.clone());
        }
        let Value::Tensor(t) = &**v else {
            return Err(DeviceError::Decline("a non-tensor weight".into()));
        };
        // Outside the run's buffers: written once on the current stream, which the host waits
        // for (as CUDA's upload does) before any kernel may read it from another.
        let buf = self.proto.resident(bytes_of(t), |_, _| Ok(()))?;
        buf.set(v.clone());
        self.proto.hold(&buf);
        let d = self.wrap(buf, t);
        weights.insert(key, (Arc::downgrade(v), d.clone()));
        Ok(d)
    }

    fn download(&self, d: &DeviceTensor) -> Result<Tensor, DeviceError> {
        let buf = Self::unwrap(d)?;
        let current = self.proto.current_stream();
        self.proto.set_stream(self.proto.read_stream(d.stream));
        let read = self.proto.download(buf.start(), bytes_of_dev(d), |_| ());
        self.proto.set_stream(current);
        read?;
        Self::tensor(d, &buf)
    }

    fn download_into(&self, d: &DeviceTensor, dst: &mut [u8]) -> Result<(), DeviceError> {
        let buf = Self::unwrap(d)?;
        let t = Self::tensor(d, &buf)?;
        let bytes = quorum_core::tensor::tensor_bytes(&t)
            .ok_or_else(|| DeviceError::Decline(format!("{} values", t.dtype())))?;
        if bytes.len() != dst.len() {
            return Err(DeviceError::Decline(format!(
                "a {}-byte value into {} bytes",
                bytes.len(),
                dst.len()
            )));
        }
        let current = self.proto.current_stream();
        self.proto.set_stream(self.proto.read_stream(d.stream));
        // The copy follows the work before it on the value's stream: the host waits for that
        // point, then writes the bytes a device's copy would have.
        let waited = self.proto.wait_current();
        self.proto.set_stream(current);
        waited?;
        dst.copy_from_slice(&bytes);
        Ok(())
    }

    fn download_later(&self, d: &DeviceTensor) -> Result<usize, DeviceError> {
        let buf = Self::unwrap(d)?;
        self.proto.set_stream(d.stream);
        let t = Self::tensor(d, &buf)?;
        let at = self.proto.download_later(buf.start(), bytes_of_dev(d), t)?;
        if let Some(rec) = self.capture.borrow_mut().as_mut() {
            rec.later.push((buf.value.clone(), d.shape.clone()));
        }
        Ok(at)
    }

    fn record(&self, stream: usize, event: usize) -> Result<(), DeviceError> {
        self.proto.record(stream, event)
    }

    fn wait(&self, stream: usize, event: usize) -> Result<(), DeviceError> {
        self.proto.wait(stream, event)
    }

    fn release(&self, d: DeviceTensor, after: &[usize]) {
        let Ok(buf) = Self::unwrap(&d) else {
            return;
        };
        drop(d);
        self.proto.release(buf, after);
    }

    fn finish(&self) -> Result<Vec<Tensor>, DeviceError> {
        self.proto.finish(|_, _, t| Ok(t))
    }

    fn attach_log(&self, log: Arc<CommandLog>) {
        self.proto.attach_log(log);
    }

    fn arithmetic(&self) -> Arithmetic {
        if self.rounded.get() {
            Arithmetic::TF32
        } else {
            Arithmetic::EXACT
        }
    }

    fn begin_capture(&self) -> Result<(), DeviceError> {
        self.proto.set_stream(0);
        self.proto.set_capture(Some(CaptureLog::default()));
        *self.capture.borrow_mut() = Some(Recording::default());
        Ok(())
    }

    fn abort_capture(&self) {
        self.proto.set_capture(None);
        self.capture.borrow_mut().take();
    }

    fn end_capture(&self) -> Result<(Vec<Tensor>, Box<dyn Replay>), DeviceError> {
        let (Some(log), Some(rec)) = (
            self.proto.set_capture(None),
            self.capture.borrow_mut().take(),
        ) else {
            return Err(DeviceError::Device("no capture in progress".into()));
        };
        // The captured work runs once (here it already has): the host waits for it and reads
        // the outputs.
        self.proto.synchronize()?;
        let held = self.proto.take_held();
        let mut outputs = Vec::with_capacity(held.later.len());
        let (mut copies, mut copy_bytes) = (Vec::new(), Vec::new());
        for l in held.later {
            if l.bytes > 0 {
                self.proto.log_access(
                    Agent::Host,
                    "read",
                    vec![Range::pinned(l.pinned.start, l.bytes as u64)],
                    vec![],
                );
            }
            outputs.push(l.what);
            copies.push(l.pinned);
            copy_bytes.push(l.bytes);
        }
        // What each staging buffer holds after the captured run: its upload's tensor.
        let mut staged = vec![None; held.staging.len()];
        for (u, t) in log.uploads.iter().zip(rec.uploaded) {
            if let Some((k, _)) = u {
                staged[*k] = Some(t);
            }
        }
        let replay = SimReplay {
            steps: rec.steps,
            later: rec.later,
            uploads: log.uploads,
            staged: Mutex::new(staged),
            staging: held.staging,
            copies,
            copy_bytes,
            buffers: held.buffers,
            resident: held.resident,
            parked: held.parked,
            shared: self.session.shared.clone(),
        };
        if self.proto.logging() {
            self.proto.publish_footprint(&replay.footprint());
        }
        Ok((outputs, Box::new(replay)))
    }
}
