//! One `Session::run` on the GPU: the shared run protocol (`quorum_core::device::protocol`) over
//! the CUDA driver, plus what only CUDA has: kernel launches, device-to-device copies and graph
//! capture.
use std::sync::{Arc, Mutex};

use crate::capture::Captured;
use crate::driver::{Arg, DeviceMemory, Event, Function, PinnedMemory, Stream};
use crate::memory::{self, DevBuf, device_elem_size, tensor_bytes, tensor_from_bytes};
use crate::{DevTensor, Device, Fault, KError, KResult, ptx};
use quorum_core::backend::Arithmetic;
use quorum_core::cmdlog::{Agent, Command, Range};
use quorum_core::counters::Counters;
use quorum_core::device::protocol::{self, Buffer, CaptureLog, Driver, RunProtocol};
use quorum_core::error::OpError;
use quorum_core::tensor::{DType, Tensor};

/// The element type and shape a read-back copy is rebuilt with.
pub(crate) struct Shaped {
    pub(crate) dtype: DType,
    pub(crate) shape: Vec<usize>,
}

/// An output copy started by [`Run::download_later`], collected by [`Run::finish`] or a replay.
pub(crate) type Later = protocol::Later<PinnedMemory, Shaped>;
/// A device check's flag word and its meaning.
pub(crate) type Check = protocol::Check<PinnedMemory>;

impl Buffer for DevBuf {
    type Mem = DeviceMemory;

    fn ptr(&self) -> u64 {
        DevBuf::ptr(self)
    }

    fn bytes(&self) -> u64 {
        DevBuf::bytes(self) as u64
    }

    fn into_mem(self) -> Option<DeviceMemory> {
        self.into_memory()
    }
}

/// The CUDA driver calls the run protocol makes.
pub(crate) struct CudaDriver<'a> {
    pub(crate) device: &'a Device,
}

impl Driver for CudaDriver<'_> {
    type Stream = Stream;
    type Event = Event;
    type Mem = DeviceMemory;
    type Buf = DevBuf;
    type Pinned = PinnedMemory;
    type Later = Shaped;
    type Error = KError;

    fn invalid(msg: String) -> KError {
        KError::Op(OpError::Invalid(msg))
    }

    fn fault(f: Fault) -> KError {
        KError::Fault(f)
    }

    fn decline(msg: String) -> KError {
        KError::Decline(msg)
    }

    fn stream_id(&self, s: &Stream) -> u64 {
        s.raw as u64
    }

    fn event_id(&self, e: &Event) -> u64 {
        e.raw as u64
    }

    fn mem_range(&self, m: &DeviceMemory) -> (u64, u64) {
        (m.ptr, m.bytes as u64)
    }

    fn pinned_range(&self, p: &PinnedMemory) -> (u64, u64) {
        (p.ptr as u64, p.bytes as u64)
    }

    fn pinned_bytes<'p>(&self, p: &'p PinnedMemory) -> &'p [u8] {
        p.as_slice()
    }

    fn take_event(&self) -> KResult<Event> {
        Ok(self.device.take_event()?)
    }

    fn give_event(&self, e: Event) {
        self.device.give_event(e);
    }

    fn give_streams(&self, s: Vec<Stream>) {
        self.device.give_streams(s);
    }

    fn record(&self, e: &Event, on: &Stream) -> KResult<()> {
        Ok(e.record(on)?)
    }

    fn wait(&self, s: &Stream, e: &Event) -> KResult<()> {
        Ok(s.wait(e)?)
    }

    fn sync_stream(&self, s: &Stream) -> KResult<()> {
        Ok(s.synchronize()?)
    }

    fn sync_event(&self, e: &Event) -> KResult<()> {
        Ok(e.synchronize()?)
    }

    fn take_mem(&self, bytes: usize, counters: &Counters) -> KResult<DeviceMemory> {
        Ok(self.device.pool.take(bytes, counters)?)
    }

    fn give_mem(&self, m: DeviceMemory) {
        self.device.pool.give(m);
    }

    fn wrap(&self, m: DeviceMemory) -> DevBuf {
        DevBuf::new(m, self.device.pool.clone())
    }

    fn fill32(&self, s: &Stream, ptr: u64, value: u32, words: usize) -> KResult<()> {
        Ok(s.fill32(ptr, value, words)?)
    }

    fn take_pinned(&self, bytes: usize) -> KResult<PinnedMemory> {
        Ok(self.device.staging.take(bytes)?)
    }

    fn give_pinned(&self, p: PinnedMemory) {
        self.device.staging.give(p);
    }

    fn upload(&self, s: &Stream, dst: u64, src: &PinnedMemory, at: usize, n: usize) -> KResult<()> {
        Ok(s.upload(dst, &src.as_slice()[at..at + n])?)
    }

    fn upload_host(&self, s: &Stream, dst: u64, src: &[u8]) -> KResult<()> {
        Ok(s.upload(dst, src)?)
    }

    unsafe fn download_host(&self, s: &Stream, dst: u64, src: u64, n: usize) -> KResult<()> {
        // SAFETY: the protocol's caller vouches that `[dst, dst + n)` is live, page-locked and
        // untouched until the stream has passed the copy.
        let dst = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, n) };
        Ok(s.download(dst, src)?)
    }

    fn upload_piece(&self) -> Option<usize> {
        memory::pipelined().then_some(memory::UPLOAD_PIECE)
    }

    fn download(&self, s: &Stream, dst: &mut PinnedMemory, src: u64, n: usize) -> KResult<()> {
        Ok(s.download(&mut dst.as_mut_slice()[..n], src)?)
    }
}

/// The device state of one `Session::run`: its streams, the buffers it allocated (returned to the
/// pool only after every stream has finished, so another thread's run can never receive a buffer
/// this run's kernels still read), its events and the pinned staging buffers of its copies. The
/// rules are the shared run protocol's (`quorum_core::device::protocol`).
///
/// Kernels launch on the current stream ([`Run::set_stream`]); a buffer handed back mid-run is
/// reused by this run's later allocations only, and an allocation on one stream first waits for the
/// events of the buffer's readers on the others.
pub struct Run<'a> {
    pub device: &'a Device,
    pub counters: &'a Counters,
    proto: RunProtocol<'a, CudaDriver<'a>>,
    /// Audit every launch against its declared accesses ([`crate::audit`]).
    audit: std::cell::Cell<bool>,
    /// Whether f32 products may run on the tensor cores in TF32 (`Precision::Tf32`).
    tf32: std::cell::Cell<bool>,
    /// The arithmetic the current node's launches declared (`Arithmetic::EXACT` unless one ran
    /// on the tensor cores).
    declared: std::cell::Cell<Arithmetic>,
}

fn rebuild(bytes: &[u8], what: &Shaped) -> KResult<Tensor> {
    tensor_from_bytes(what.dtype, &what.shape, bytes).ok_or_else(|| {
        KError::Op(OpError::Invalid(format!(
            "cannot rebuild a {} tensor of shape {:?}",
            what.dtype, what.shape
        )))
    })
}

impl<'a> Run<'a> {
    /// A run with one stream.
    pub fn new(
        device: &'a Device,
        counters: &'a Counters,
        poison: Option<u8>,
    ) -> Result<Run<'a>, crate::driver::CudaError> {
        Run::with_streams(device, counters, poison, 1)
    }

    /// A run with `streams` streams (at least one), taken from the device's pool.
    pub fn with_streams(
        device: &'a Device,
        counters: &'a Counters,
        poison: Option<u8>,
        streams: usize,
    ) -> Result<Run<'a>, crate::driver::CudaError> {
        device.ctx.bind()?;
        let mut taken = Vec::with_capacity(streams.max(1));
        for _ in 0..streams.max(1) {
            match device.take_stream() {
                Ok(s) => taken.push(s),
                Err(e) => {
                    device.give_streams(taken);
                    return Err(e);
                }
            }
        }
        Ok(Run {
            device,
            counters,
            proto: RunProtocol::new(CudaDriver { device }, taken, counters, poison),
            audit: std::cell::Cell::new(false),
            tf32: std::cell::Cell::new(false),
            declared: std::cell::Cell::new(Arithmetic::EXACT),
        })
    }

    /// Lets f32 products of this run's later launches round their operands to TF32 on the tensor
    /// cores (compute capability 8.0 and later; elsewhere nothing changes).
    pub fn allow_tf32(&self, on: bool) {
        self.tf32.set(on && self.cc() >= (8, 0));
    }

    /// Whether f32 products may use TF32 (the GEMM's choice).
    pub fn tf32_allowed(&self) -> bool {
        self.tf32.get()
    }

    /// Declares the arithmetic of a launch of the current node (joined with its other launches').
    pub fn declare(&self, a: Arithmetic) {
        self.declared.set(self.declared.get().join(a));
    }

    /// How the current node's products took their operands and summed (see
    /// `DeviceRun::arithmetic`).
    pub fn arithmetic(&self) -> Arithmetic {
        self.declared.get()
    }

    /// The current stream: where kernels launch and copies go.
    pub fn stream(&self) -> &Stream {
        self.proto.stream()
    }

    /// Makes stream `s` current (an index below [`Run::stream_count`]).
    pub fn set_stream(&self, s: usize) {
        self.proto.set_stream(s);
    }

    pub fn current_stream(&self) -> usize {
        self.proto.current_stream()
    }

    pub fn stream_count(&self) -> usize {
        self.proto.streams().len()
    }

    /// The stream a host read of a value produced on stream `producer` goes to.
    pub fn read_stream(&self, producer: usize) -> usize {
        self.proto.read_stream(producer)
    }

    /// Records this run's commands into `log` from now on.
    pub fn attach_log(&self, log: Arc<quorum_core::cmdlog::CommandLog>) {
        self.proto.attach_log(log);
    }

    /// Checks every later launch against the accesses it declares ([`crate::audit`]; launches
    /// while capturing are not audited).
    pub fn audit_launches(&self) {
        self.audit.set(true);
        self.proto.name_nodes();
    }

    /// Every device range the run can reach now, as `(address, bytes)`.
    pub(crate) fn reachable(&self) -> Vec<(u64, u64)> {
        self.proto.reachable()
    }

    /// The node whose work is being issued (named when logging or auditing).
    pub(crate) fn node_name(&self) -> String {
        self.proto.node_name()
    }

    /// Names the node whose work follows (for the command log and the audit's errors).
    pub fn begin_node(&self, name: &str) {
        self.declared.set(Arithmetic::EXACT);
        self.proto.begin_node(name);
    }

    /// A new device tensor (contents undefined, or poisoned), for use on the current stream.
    pub fn alloc(&self, dtype: DType, shape: &[usize]) -> KResult<DevTensor> {
        let elem = device_elem_size(dtype)
            .ok_or_else(|| KError::Decline(format!("{dtype} values stay on the host")))?;
        let n = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .and_then(|n| n.checked_mul(elem))
            .ok_or_else(|| KError::Op(OpError::Invalid(format!("shape {shape:?} overflows"))))?;
        let buf = self.proto.alloc(n)?;
        Ok(DevTensor {
            buf,
            dtype,
            shape: shape.to_vec(),
        })
    }

    /// Keeps `t`'s buffer (one the run did not allocate, such as a resident weight) from going back
    /// to the pool until the run's streams have finished, or, captured, until its graph is dropped.
    pub fn hold(&self, t: &DevTensor) {
        self.proto.hold(&t.buf);
    }

    /// Hands a tensor back in the middle of the run. Its buffer is reused by this run's later
    /// allocations once nothing else holds it, after the events `after` (see [`Run::record`]).
    ///
    /// Views share a buffer (Reshape's output is its input's memory): the events of every handle's
    /// release are gathered until the last handle goes, so the buffer waits for the readers of all.
    pub fn release(&self, t: DevTensor, after: &[usize]) {
        self.proto.release(t.buf, after);
    }

    /// A kernel's scratch `t` before the last launch that reads it: kept, for the caller to release
    /// after that launch, unless the `ScratchReleasedEarly` bug is injected, which hands it back
    /// here (the mistake the command log's checker must catch).
    pub fn scratch_before_last_read(&self, t: DevTensor) -> Option<DevTensor> {
        let DevTensor { buf, dtype, shape } = t;
        self.proto
            .scratch_before_last_read(buf)
            .map(|buf| DevTensor { buf, dtype, shape })
    }

    /// Records event `id` on stream `stream` (an event recorded again under the same id is moved).
    pub fn record(&self, stream: usize, id: usize) -> KResult<()> {
        self.proto.record(stream, id)
    }

    /// Makes `stream` wait for recorded event `id` (nothing to do when it was recorded there).
    pub fn wait(&self, stream: usize, id: usize) -> KResult<()> {
        self.proto.wait(stream, id)
    }

    /// Copies a host tensor to the device on the current stream, through a pinned staging buffer.
    pub fn upload(&self, t: &Tensor) -> KResult<DevTensor> {
        let bytes = tensor_bytes(t)
            .ok_or_else(|| KError::Decline(format!("{} values stay on the host", t.dtype())))?;
        let d = self.alloc(t.dtype(), t.shape())?;
        if !self.proto.capturing()
            && self
                .device
                .is_pinned_host(bytes.as_ptr() as usize, bytes.len())
        {
            // The caller's memory, page-locked in place: straight over the bus.
            self.proto.upload_host(d.ptr(), &bytes)?;
            return Ok(d);
        }
        self.proto.upload(d.ptr(), bytes.len(), |pinned, r| {
            memory::stage(&mut pinned.as_mut_slice()[r.clone()], &bytes[r]);
        })?;
        Ok(d)
    }

    /// Uploads a weight outside the run's own buffers (it lives in the session's cache) and waits for
    /// the copy, so that other runs may read it at once.
    pub fn upload_weight(&self, t: &Tensor) -> KResult<DevTensor> {
        self.proto
            .not_capturing("a weight that is not resident yet")?;
        let bytes = tensor_bytes(t)
            .ok_or_else(|| KError::Decline(format!("{} values stay on the host", t.dtype())))?;
        let buf = self
            .proto
            .resident(bytes.len(), |stream, ptr| Ok(stream.upload(ptr, &bytes)?))?;
        Ok(DevTensor {
            buf,
            dtype: t.dtype(),
            shape: t.shape().to_vec(),
        })
    }

    /// Copies a device tensor back: the copy follows the work before it on the current stream, and
    /// the host waits for that copy alone.
    pub fn download(&self, d: &DevTensor) -> KResult<Tensor> {
        let n = d.bytes();
        let shaped = Shaped {
            dtype: d.dtype,
            shape: d.shape.clone(),
        };
        self.proto.download(d.ptr(), n, |pinned| {
            rebuild(&pinned.as_slice()[..n], &shaped)
        })?
    }

    /// A zeroed 32-bit flag word on the current stream, for a kernel to raise (store nonzero) when a
    /// check of its inputs fails; hand it to [`Run::check_fault`] after the launch.
    pub fn fault_word(&self) -> KResult<DevTensor> {
        let w = self.alloc(DType::I32, &[1])?;
        self.fill32(&w, 0, 1)?;
        Ok(w)
    }

    /// Copies `word` back after the work before it on the current stream: when the run's work is
    /// collected ([`Run::finish`], [`Run::end_capture`], every [`Captured::replay`]) a raised word
    /// becomes `fault`, the run's error.
    pub fn check_fault(&self, word: DevTensor, fault: Fault) -> KResult<()> {
        self.proto.check(word.ptr(), fault)?;
        self.release(word, &[]);
        Ok(())
    }

    /// Copies a device tensor into `dst`, host memory page-locked in place
    /// ([`crate::Device::pin_host`]), after the work before it on the current stream, and waits
    /// for that copy alone. Declined where `dst` is not such memory or not the tensor's size.
    pub fn download_into(&self, d: &DevTensor, dst: &mut [u8]) -> KResult<()> {
        let n = d.bytes();
        if dst.len() != n {
            crate::decline!("a {n}-byte tensor into {} bytes", dst.len());
        }
        if !self.device.is_pinned_host(dst.as_ptr() as usize, n) {
            crate::decline!("the destination is not page-locked host memory");
        }
        // SAFETY: `dst` is page-locked (checked above) and exclusively borrowed until this
        // function returns, and it returns only after the copy is done (`wait_current`) or, on a
        // failed wait, with the run's streams unusable.
        unsafe {
            self.proto
                .download_host(d.ptr(), dst.as_mut_ptr() as u64, n)?
        };
        self.proto.wait_current()
    }

    /// Starts copying a device tensor back on the current stream; [`Run::finish`] collects it.
    pub fn download_later(&self, d: &DevTensor) -> KResult<usize> {
        let what = Shaped {
            dtype: d.dtype,
            shape: d.shape.clone(),
        };
        self.proto.download_later(d.ptr(), d.bytes(), what)
    }

    /// Starts capturing the run's device work: the first stream captures, the others join it
    /// through an event. Nothing captured runs until [`Run::end_capture`].
    pub fn begin_capture(&self) -> KResult<()> {
        let mut log = CaptureLog::default();
        let streams = self.proto.streams();
        streams[0].begin_capture()?;
        if streams.len() > 1 {
            let fork = self.device.take_event()?;
            fork.record(&streams[0])?;
            self.proto.push(Command::Record {
                stream: streams[0].raw as u64,
                event: fork.raw as u64,
            });
            for s in &streams[1..] {
                s.wait(&fork)?;
                self.proto.push(Command::Wait {
                    stream: s.raw as u64,
                    event: fork.raw as u64,
                });
            }
            log.events.push(fork);
        }
        self.proto.set_capture(Some(log));
        Ok(())
    }

    /// Abandons a capture (a refusal mid-run): nothing captured has run or will.
    pub fn abort_capture(&self) {
        if let Some(log) = self.proto.set_capture(None) {
            if let Ok(g) = self.proto.streams()[0].end_capture() {
                drop(g);
            }
            for e in log.events {
                self.device.give_event(e);
            }
        }
    }

    /// Ends the capture: joins the streams, instantiates the graph, runs it once and returns this
    /// run's outputs (the [`Run::download_later`] copies) with the graph and everything it uses.
    pub fn end_capture(&self) -> KResult<(Vec<Tensor>, Captured)> {
        let Some(mut log) = self.proto.set_capture(None) else {
            return Err(KError::Op(OpError::Invalid(
                "no capture in progress".into(),
            )));
        };
        let streams = self.proto.streams();
        for s in &streams[1..] {
            let join = self.device.take_event()?;
            join.record(s)?;
            streams[0].wait(&join)?;
            self.proto.push(Command::Record {
                stream: s.raw as u64,
                event: join.raw as u64,
            });
            self.proto.push(Command::Wait {
                stream: streams[0].raw as u64,
                event: join.raw as u64,
            });
            log.events.push(join);
        }
        let graph = streams[0].end_capture()?;
        graph.launch(&streams[0])?;
        streams[0].synchronize()?;
        self.proto.push(Command::SyncStream {
            stream: streams[0].raw as u64,
        });
        let held = self.proto.take_held();
        for l in &held.later {
            self.proto.log_access(
                Agent::Host,
                "read",
                vec![Range::pinned(l.pinned.ptr as u64, l.bytes as u64)],
                vec![],
            );
        }
        let outputs = held
            .later
            .iter()
            .map(|l| rebuild(&l.pinned.as_slice()[..l.bytes], &l.what))
            .collect::<KResult<Vec<_>>>()?;
        let mut events = log.events;
        events.extend(held.events);
        let captured = Captured {
            graph,
            uploads: log.uploads,
            staging: Mutex::new(held.staging),
            later: held.later,
            alive: held.buffers,
            resident: held.resident,
            parked: held.parked,
            events,
            device_pool: self.device.pool.clone(),
            checks: held.checks,
        };
        if let Some(f) = captured.raised(self.device) {
            return Err(KError::Fault(f));
        }
        if self.proto.logging() {
            self.proto.publish_footprint(&captured.footprint());
        }
        Ok((outputs, captured))
    }

    /// Waits for every stream once, then returns the copies started by [`Run::download_later`].
    pub fn finish(&self) -> KResult<Vec<Tensor>> {
        self.proto
            .finish(|pinned, n, what| rebuild(&pinned.as_slice()[..n], &what))
    }

    /// Launches a generated kernel (compiled on first use, then from the module cache).
    pub fn launch(
        &self,
        ptx: &str,
        name: &str,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared: u32,
        args: &[Arg],
    ) -> KResult<()> {
        if grid.0 == 0 || grid.1 == 0 || grid.2 == 0 {
            return Ok(());
        }
        let f = self.device.function(ptx, name, self.counters)?;
        self.launch_function(&f, grid, block, shared, args)
    }

    /// [`Run::launch`] for a text held by a generator cache (see [`Device::shared_function`]).
    pub fn launch_shared(
        &self,
        ptx: &Arc<String>,
        name: &str,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared: u32,
        args: &[Arg],
    ) -> KResult<()> {
        if grid.0 == 0 || grid.1 == 0 || grid.2 == 0 {
            return Ok(());
        }
        let f = self.device.shared_function(ptx, name, self.counters)?;
        self.launch_function(&f, grid, block, shared, args)
    }

    fn launch_function(
        &self,
        f: &Function,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared: u32,
        args: &[Arg],
    ) -> KResult<()> {
        if shared > 48 << 10 {
            f.set_max_dynamic_shared(shared)?;
        }
        if self.audit.get() && !self.proto.capturing() {
            self.audited_launch(f, grid, block, shared, args)?;
        } else {
            f.launch(self.stream(), grid, block, shared, args)?;
        }
        Counters::bump(&self.counters.kernel_launches, 1);
        if self.proto.logging() {
            // The launch's accesses are its declarations.
            let (reads, writes) = crate::audit::declared(args);
            let ranges = |v: Vec<(u64, u64)>| {
                v.into_iter()
                    .map(|(s, e)| Range::device(s, e - s))
                    .collect()
            };
            self.proto.log_work("kernel", ranges(reads), ranges(writes));
        }
        Ok(())
    }

    /// A single-thread kernel that spins for about `cycles` clock cycles on the current stream: the
    /// stream fuzzer puts these on random streams to stretch the interleavings a run can take.
    pub fn spin(&self, cycles: u64) -> KResult<()> {
        let mut k = ptx::Kernel::new("spin");
        let n = k.param("cycles", ptx::Ty::U64);
        let start = k.reg(ptx::Ty::U64);
        let now = k.reg(ptx::Ty::U64);
        let dt = k.reg(ptx::Ty::U64);
        k.raw(format_args!("mov.u64 {start}, %clock64"));
        let top = k.new_label("spin");
        k.label(&top);
        k.raw(format_args!("mov.u64 {now}, %clock64"));
        k.raw(format_args!("sub.u64 {dt}, {now}, {start}"));
        let more = k.setp(ptx::Cmp::Lt, ptx::Ty::U64, dt, n);
        k.bra_if(more, false, &top);
        let text = ptx::module(self.cc(), &[k]);
        self.launch(&text, "spin", (1, 1, 1), (1, 1, 1), 0, &[Arg::U64(cycles)])
    }

    /// Fills `words` 32-bit words of `t` with `value` on the current stream.
    pub fn fill32(&self, t: &DevTensor, value: u32, words: usize) -> KResult<()> {
        self.stream().fill32(t.ptr(), value, words)?;
        self.proto.log_work(
            "fill",
            vec![],
            vec![Range::device(t.ptr(), (words * 4) as u64)],
        );
        Ok(())
    }

    /// Copies `bytes` from `src` to `dst` on the current stream.
    pub fn copy(&self, dst: &DevTensor, src: &DevTensor, bytes: usize) -> KResult<()> {
        self.stream().copy(dst.ptr(), src.ptr(), bytes)?;
        self.proto.log_work(
            "copy",
            vec![Range::device(src.ptr(), bytes as u64)],
            vec![Range::device(dst.ptr(), bytes as u64)],
        );
        Ok(())
    }

    /// The device's compute capability (PTX target).
    pub fn cc(&self) -> (i32, i32) {
        self.device.ctx.info.compute_capability
    }

    /// Waits for every stream of the run.
    pub fn synchronize(&self) -> KResult<()> {
        self.proto.synchronize()
    }
}

impl Drop for Run<'_> {
    fn drop(&mut self) {
        // The protocol's own drop then synchronises and returns what the run held.
        self.abort_capture();
    }
}
