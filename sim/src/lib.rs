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
    Backend, Claim, DeviceError, DeviceRun, DeviceSession, DeviceTensor, NodeInputs, Provider,
};
use quorum_core::cmdlog::{Agent, Command, CommandLog, Range};
use quorum_core::counters::Counters;
use quorum_core::ir::{Attr, Node};
use quorum_core::mutants::{self, Mutant};
use quorum_core::ops::{Kernel, OpCtx, Registry};
use quorum_core::tensor::{Tensor, Value};

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

    fn open(&self) -> Result<Arc<dyn DeviceSession>, String> {
        Ok(Arc::new(SimSession {
            broken: std::env::var(BREAK_VAR).ok().filter(|op| !op.is_empty()),
            ..SimSession::default()
        }))
    }
}

/// Names an op whose simulated kernel is made wrong on purpose, for the harnesses that must find a
/// wrong kernel (`quorum compare`'s bisect, strict verification): the middle element of the op's
/// first f32 output is moved by 2⁻⁷ of its magnitude plus 2⁻⁷ (0.8%, far outside any bound, small
/// enough to look plausible). Read when a session opens the device; unset, every kernel is right.
pub const BREAK_VAR: &str = "QUORUM_SIM_BREAK";

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

/// Addresses, streams and events of one simulated device, and its resident weights.
#[derive(Default)]
struct SimSession {
    /// The next fresh address (device and pinned share the counter; their spaces differ).
    next: AtomicU64,
    /// Device ranges returned by finished runs, by size class.
    free: Mutex<Vec<(u64, u64)>>,
    /// Names for streams and events.
    names: AtomicU64,
    weights: Mutex<HashMap<usize, (Weak<Value>, DeviceTensor)>>,
    /// The op made wrong on purpose ([`BREAK_VAR`]).
    broken: Option<String>,
}

/// A simulated buffer: its address and size, and the value it holds.
struct SimBuf {
    start: u64,
    bytes: u64,
    value: Mutex<Option<Arc<Value>>>,
}

/// Size classes as the CUDA pool has them: powers of two from 256 bytes.
fn class(bytes: u64) -> u64 {
    bytes.max(256).next_power_of_two()
}

impl SimSession {
    fn fresh(&self, bytes: u64) -> u64 {
        // 256-byte aligned, never 0.
        self.next.fetch_add(class(bytes), Ordering::Relaxed) + 4096
    }

    fn name(&self) -> u64 {
        self.names.fetch_add(1, Ordering::Relaxed) + 1
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
        Ok(Box::new(SimRun {
            session: self,
            counters,
            index,
            streams: (0..streams.max(1)).map(|_| self.name()).collect(),
            current: Cell::new(0),
            poison: poison.is_some(),
            log: RefCell::new(None),
            alive: RefCell::new(HashMap::new()),
            parked: RefCell::new(Vec::new()),
            release_waits: RefCell::new(HashMap::new()),
            events: RefCell::new(HashMap::new()),
            later: RefCell::new(Vec::new()),
            node: RefCell::new(String::new()),
            staging: RefCell::new(Vec::new()),
        }))
    }
}

struct Parked {
    start: u64,
    bytes: u64,
    after: Vec<usize>,
    released: Option<(u64, usize)>,
}

struct SimRun<'s> {
    session: &'s SimSession,
    /// The session's counters: transfers are counted as the real backends count them.
    counters: &'s Counters,
    index: usize,
    streams: Vec<u64>,
    current: Cell<usize>,
    poison: bool,
    log: RefCell<Option<Arc<CommandLog>>>,
    alive: RefCell<HashMap<u64, Arc<SimBuf>>>,
    parked: RefCell<Vec<Parked>>,
    release_waits: RefCell<HashMap<u64, Vec<usize>>>,
    /// The executor's event names → (this device's name for the record, its stream).
    events: RefCell<HashMap<usize, (u64, usize)>>,
    later: RefCell<Vec<(Tensor, Range)>>,
    node: RefCell<String>,
    /// Staging ranges free for the next upload (only a mutant puts any here mid-run).
    staging: RefCell<Vec<Range>>,
}

/// The scratch a CUDA kernel of this node may use, in bytes (`None` for kernels without): a split-K
/// GEMM's workspace (every GEMM gets one here, as if split over K), a reduction's partials, a norm's
/// statistics. Sized from the outputs, which is all the simulated device needs: a range of its own
/// that lives for two launches.
fn scratch_bytes(node: &Node, outputs: &[Range]) -> Option<u64> {
    let op = node.op_type.as_str();
    let scratch = matches!(op, "MatMul" | "Gemm")
        || op.starts_with("Reduce")
        || matches!(op, "LayerNormalization" | "Softmax" | "ArgMax" | "ArgMin");
    let out: u64 = outputs.iter().map(|r| r.len).sum();
    scratch.then_some(out.max(256) * 2)
}

fn bytes_of(t: &Tensor) -> u64 {
    (t.len() * t.dtype().size_in_memory()) as u64
}

fn bytes_of_dev(d: &DeviceTensor) -> u64 {
    (d.len() * d.dtype.size_in_memory()) as u64
}

impl SimRun<'_> {
    fn stream(&self) -> u64 {
        self.streams[self.current.get()]
    }

    fn push(&self, c: Command) {
        if let Some(log) = self.log.borrow().as_ref() {
            log.push(c);
        }
    }

    fn access(&self, by: Agent, what: &str, reads: Vec<Range>, writes: Vec<Range>) {
        self.push(Command::Access {
            by,
            what: what.into(),
            node: self.node.borrow().clone(),
            reads,
            writes,
        });
    }

    /// A buffer for `bytes` on the current stream: a parked one of the same class once its readers
    /// and its release are waited for, else a fresh or pooled range.
    fn alloc(&self, bytes: u64) -> Arc<SimBuf> {
        let c = class(bytes);
        let here = self.current.get();
        let parked = {
            let mut p = self.parked.borrow_mut();
            p.iter()
                .position(|m| class(m.bytes) == c)
                .map(|i| p.swap_remove(i))
        };
        let start = match parked {
            Some(m) if mutants::active(Mutant::SharedFreeList) => m.start,
            Some(m) => {
                let events = self.events.borrow();
                for e in &m.after {
                    if let Some(&(event, on)) = events.get(e)
                        && on != here
                    {
                        self.push(Command::Wait {
                            stream: self.stream(),
                            event,
                        });
                    }
                }
                if let Some((event, on)) = m.released
                    && on != here
                {
                    self.push(Command::Wait {
                        stream: self.stream(),
                        event,
                    });
                }
                m.start
            }
            None => {
                let pooled = {
                    let mut free = self.session.free.lock().unwrap_or_else(|e| e.into_inner());
                    free.iter()
                        .position(|&(k, _)| k == c)
                        .map(|i| free.swap_remove(i).1)
                };
                pooled.unwrap_or_else(|| self.session.fresh(c))
            }
        };
        let range = Range::device(start, c);
        self.push(Command::Alloc {
            range,
            stream: self.stream(),
        });
        if self.poison {
            self.access(Agent::Stream(self.stream()), "poison", vec![], vec![range]);
        }
        let buf = Arc::new(SimBuf {
            start,
            bytes: c,
            value: Mutex::new(None),
        });
        self.alive.borrow_mut().insert(start, buf.clone());
        buf
    }

    /// Hands the run's buffer at `start` back for reuse after the events `after` (and, with several
    /// streams, a mark recorded here that another stream's allocation waits for).
    fn release_buf(&self, start: u64, mut after: Vec<usize>) {
        let early = mutants::active(Mutant::EarlyRelease);
        if early {
            after.clear();
        }
        let released = (self.streams.len() > 1 && !early).then(|| {
            let event = self.session.name();
            self.push(Command::Record {
                stream: self.stream(),
                event,
            });
            (event, self.current.get())
        });
        let Some(b) = self.alive.borrow_mut().remove(&start) else {
            return;
        };
        self.push(Command::Release {
            range: Range::device(b.start, b.bytes),
        });
        self.parked.borrow_mut().push(Parked {
            start: b.start,
            bytes: b.bytes,
            after,
            released,
        });
    }

    fn wrap(&self, buf: Arc<SimBuf>, t: &Tensor) -> DeviceTensor {
        DeviceTensor {
            dtype: t.dtype(),
            shape: t.shape().to_vec(),
            device: self.index,
            stream: self.current.get(),
            buf: buf as Arc<dyn Any + Send + Sync>,
        }
    }

    fn unwrap(d: &DeviceTensor) -> Result<Arc<SimBuf>, DeviceError> {
        d.buf
            .clone()
            .downcast::<SimBuf>()
            .map_err(|_| DeviceError::Decline("a tensor on another device".into()))
    }

    fn value(buf: &SimBuf) -> Result<Arc<Value>, DeviceError> {
        buf.value
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| {
                DeviceError::Device("a simulated buffer read before it was written".into())
            })
    }

    fn pinned(&self, bytes: u64) -> Range {
        Range::pinned(self.session.fresh(bytes), bytes)
    }

    /// A staging range for an upload: held by the run until it ends (the copy may still be reading
    /// it), unless a mutant hands it back at once for the next upload of the same class.
    fn stage(&self, bytes: u64) -> Range {
        let c = class(bytes);
        let reused = {
            let mut free = self.staging.borrow_mut();
            free.iter()
                .position(|r| r.len == c)
                .map(|i| free.swap_remove(i))
        };
        let range = reused.unwrap_or_else(|| Range::pinned(self.session.fresh(c), c));
        if mutants::active(Mutant::StagingReuse) {
            self.staging.borrow_mut().push(range);
        }
        range
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
        self.current.set(stream.min(self.streams.len() - 1));
        *self.node.borrow_mut() = ctx.node.name.clone();
        let mut values = Vec::with_capacity(inputs.len());
        let mut reads = Vec::new();
        for i in 0..inputs.len() {
            match inputs.device(i)? {
                None => values.push(None),
                Some(d) => {
                    let buf = Self::unwrap(&d)?;
                    reads.push(Range::device(buf.start, buf.bytes));
                    values.push(Some(Self::value(&buf)?));
                }
            }
        }
        let refs: Vec<Option<&Value>> = values.iter().map(|v| v.as_deref()).collect();
        let mut outs = kernel(ctx, &refs)?;
        if self.session.broken.as_deref() == Some(ctx.node.op_type.as_str()) && !outs.is_empty() {
            let first = outs.remove(0);
            outs.insert(0, broken(first)?);
        }
        let mut devs = Vec::with_capacity(outs.len());
        let mut writes = Vec::new();
        for v in outs {
            let Value::Tensor(t) = &v else {
                return Err(DeviceError::Decline("a non-tensor output".into()));
            };
            let buf = self.alloc(bytes_of(t));
            writes.push(Range::device(buf.start, buf.bytes));
            let d = self.wrap(buf.clone(), t);
            *buf.value.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(v));
            devs.push(d);
        }
        let by = Agent::Stream(self.stream());
        match scratch_bytes(ctx.node, &writes) {
            // As CUDA's split-K GEMM, reductions and norms do: outputs first, then a scratch
            // buffer that a first launch writes and a second reads, released after the second.
            Some(bytes) => {
                let scratch = self.alloc(bytes);
                let range = Range::device(scratch.start, scratch.bytes);
                self.access(by, "kernel", reads.clone(), vec![range]);
                let early = mutants::active(Mutant::ScratchReleasedEarly);
                if early {
                    self.release_buf(scratch.start, Vec::new());
                }
                reads.push(range);
                self.access(by, "kernel", reads, writes);
                if !early {
                    self.release_buf(scratch.start, Vec::new());
                }
            }
            None => self.access(by, "kernel", reads, writes),
        }
        Ok(devs)
    }

    fn upload(&self, stream: usize, t: &Tensor) -> Result<DeviceTensor, DeviceError> {
        self.current.set(stream.min(self.streams.len() - 1));
        let bytes = bytes_of(t);
        Counters::bump(&self.counters.h2d_bytes, bytes);
        Counters::bump(&self.counters.h2d_calls, 1);
        let buf = self.alloc(bytes);
        let staged = self.stage(bytes);
        self.access(Agent::Host, "stage", vec![], vec![staged]);
        self.access(
            Agent::Stream(self.stream()),
            "upload",
            vec![staged],
            vec![Range::device(buf.start, buf.bytes)],
        );
        *buf.value.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(Arc::new(Value::Tensor(t.clone())));
        Ok(self.wrap(buf, t))
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
            return Ok(d.clone());
        }
        let Value::Tensor(t) = &**v else {
            return Err(DeviceError::Decline("a non-tensor weight".into()));
        };
        // Outside the run's buffers, never released: written once on the current stream, which the
        // host waits for (as CUDA's upload does) before any kernel may read it from another.
        let start = self.session.fresh(bytes_of(t));
        let buf = Arc::new(SimBuf {
            start,
            bytes: class(bytes_of(t)),
            value: Mutex::new(Some(v.clone())),
        });
        let stream = self.stream();
        self.access(
            Agent::Stream(stream),
            "weight upload",
            vec![],
            vec![Range::device(buf.start, buf.bytes)],
        );
        self.push(Command::SyncStream { stream });
        let d = self.wrap(buf, t);
        weights.insert(key, (Arc::downgrade(v), d.clone()));
        Ok(d)
    }

    fn download(&self, d: &DeviceTensor) -> Result<Tensor, DeviceError> {
        let buf = Self::unwrap(d)?;
        Counters::bump(&self.counters.d2h_bytes, bytes_of_dev(d));
        Counters::bump(&self.counters.d2h_calls, 1);
        let stream = if mutants::active(Mutant::DownloadWrongStream) {
            self.stream()
        } else {
            self.streams[d.stream.min(self.streams.len() - 1)]
        };
        let staged = self.pinned(buf.bytes);
        self.access(
            Agent::Stream(stream),
            "download",
            vec![Range::device(buf.start, buf.bytes)],
            vec![staged],
        );
        if !mutants::active(Mutant::UnsyncedHostRead) {
            let event = self.session.name();
            self.push(Command::Record { stream, event });
            self.push(Command::SyncEvent { event });
        }
        self.access(Agent::Host, "read", vec![staged], vec![]);
        match &*Self::value(&buf)? {
            Value::Tensor(t) => Ok(t.clone()),
            _ => Err(DeviceError::Decline("a non-tensor value".into())),
        }
    }

    fn download_later(&self, d: &DeviceTensor) -> Result<usize, DeviceError> {
        let buf = Self::unwrap(d)?;
        Counters::bump(&self.counters.d2h_bytes, bytes_of_dev(d));
        Counters::bump(&self.counters.d2h_calls, 1);
        let stream = self.streams[d.stream.min(self.streams.len() - 1)];
        let staged = self.pinned(buf.bytes);
        self.access(
            Agent::Stream(stream),
            "download",
            vec![Range::device(buf.start, buf.bytes)],
            vec![staged],
        );
        let t = match &*Self::value(&buf)? {
            Value::Tensor(t) => t.clone(),
            _ => return Err(DeviceError::Decline("a non-tensor value".into())),
        };
        let mut later = self.later.borrow_mut();
        later.push((t, staged));
        Ok(later.len() - 1)
    }

    fn record(&self, stream: usize, event: usize) -> Result<(), DeviceError> {
        let s = stream.min(self.streams.len() - 1);
        let name = self.session.name();
        self.push(Command::Record {
            stream: self.streams[s],
            event: name,
        });
        self.events.borrow_mut().insert(event, (name, s));
        Ok(())
    }

    fn wait(&self, stream: usize, event: usize) -> Result<(), DeviceError> {
        let s = stream.min(self.streams.len() - 1);
        let Some(&(name, on)) = self.events.borrow().get(&event) else {
            return Err(DeviceError::Device(format!(
                "event {event} was never recorded"
            )));
        };
        if on != s {
            self.push(Command::Wait {
                stream: self.streams[s],
                event: name,
            });
        }
        Ok(())
    }

    fn release(&self, d: DeviceTensor, after: &[usize]) {
        let Ok(buf) = Self::unwrap(&d) else {
            return;
        };
        drop(d);
        let start = buf.start;
        drop(buf);
        let mut waits = self.release_waits.borrow_mut();
        let gathered = waits.entry(start).or_default();
        for &e in after {
            if !gathered.contains(&e) {
                gathered.push(e);
            }
        }
        let last = self
            .alive
            .borrow()
            .get(&start)
            .is_some_and(|b| Arc::strong_count(b) == 1);
        if last {
            let after = waits.remove(&start).unwrap_or_default();
            drop(waits);
            self.release_buf(start, after);
        }
    }

    fn finish(&self) -> Result<Vec<Tensor>, DeviceError> {
        for &stream in &self.streams {
            self.push(Command::SyncStream { stream });
        }
        let mut out = Vec::new();
        for (t, staged) in self.later.borrow_mut().drain(..) {
            self.access(Agent::Host, "read", vec![staged], vec![]);
            out.push(t);
        }
        Ok(out)
    }

    fn attach_log(&self, log: Arc<CommandLog>) {
        *self.log.borrow_mut() = Some(log);
    }
}

impl Drop for SimRun<'_> {
    fn drop(&mut self) {
        // Everything has "run": the run's ranges go back to the device's pool.
        let mut free = self.session.free.lock().unwrap_or_else(|e| e.into_inner());
        for p in self.parked.borrow_mut().drain(..) {
            free.push((class(p.bytes), p.start));
        }
        for (_, b) in self.alive.borrow_mut().drain() {
            free.push((class(b.bytes), b.start));
        }
    }
}
