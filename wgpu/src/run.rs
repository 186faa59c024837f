//! The device side of one `Session::run` on wgpu: the buffers it allocated (kept until its work is
//! done, so another run never receives a buffer this run's kernels still use), the commands it has
//! not submitted yet, its output copies, and its counters.
//!
//! One queue is one stream. A wgpu queue runs what it is given in order, and wgpu orders the
//! dispatches of a pass that touch the same buffer, so a run asked for several streams puts all of
//! them on the one queue in the executor's order: that order already respects every dependency, so
//! `record` and `wait` have nothing left to enforce and are no-ops (still counted by the executor).
//!
//! Commands collect in a list and go to the queue in one submission at each point where the host
//! must see a result (a download, the end of the run), and after every [`SUBMIT_EVERY`] (48)
//! commands, so that the device starts while the host records the rest. Parameters of the
//! collected dispatches are written into one buffer per submission. Data goes up through
//! `Queue::write_buffer`, which wgpu carries out at the start of the next submission — before
//! commands collected earlier — so it only ever targets a buffer fresh from the shared pool, which
//! no collected command can name.
//!
//! A download's mapping reports through a channel, because another run's poll of the shared device
//! may fire the callback. A buffer released mid-run is reused by the run's later allocations
//! whether or not its readers were submitted (they precede on the one queue).
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;

use super::device::{Device, Pipeline};
use super::log::RunLog;
use super::memory::{WBuf, WTensor, as_device_bytes, decode, encode, size_class, words};
use super::timing;
use quorum_core::backend::DeviceError;
use quorum_core::counters::Counters;
use quorum_core::error::OpError;
use quorum_core::mutants::{self, Mutant};
use quorum_core::tensor::{DType, Tensor};

pub type KResult<T> = Result<T, DeviceError>;

/// Threads per workgroup of the one-dimensional kernels (`super::wgsl::entry_1d`).
pub const WG: u32 = 256;

/// Commands collected before they go to the queue without waiting for a download or the run's
/// end, so that the device works while the host records the rest.
pub const SUBMIT_EVERY: usize = 48;

/// A kernel's WGSL: the text, or a key for it and a way to make it.
enum Source<'a> {
    Text(&'a str),
    Keyed(&'a str, &'a dyn Fn() -> String),
}

enum Cmd {
    Dispatch {
        pipeline: Arc<Pipeline>,
        params: Vec<u32>,
        buffers: Vec<Arc<WBuf>>,
        groups: [u32; 3],
        /// The op and launch number of the node that queued it, while the run times its kernels.
        label: Option<(Arc<str>, u64)>,
    },
    Copy {
        src: Arc<WBuf>,
        dst: Arc<WBuf>,
        bytes: u64,
    },
}

impl Cmd {
    /// How many handles on buffer `id` this command holds.
    fn uses(&self, id: u64) -> usize {
        match self {
            Cmd::Dispatch { buffers, .. } => buffers.iter().filter(|b| b.id == id).count(),
            Cmd::Copy { src, dst, .. } => (src.id == id) as usize + (dst.id == id) as usize,
        }
    }
}

/// An output copy started by [`Run::download_later`], collected by [`Run::finish`].
struct Later {
    staging: Arc<WBuf>,
    bytes: u64,
    dtype: DType,
    shape: Vec<usize>,
}

pub struct Run<'a> {
    pub device: &'a Device,
    pub counters: &'a Counters,
    /// Fill every new buffer with this byte (see `SessionOptions::poison_device_buffers`).
    pub poison: Option<u8>,
    cmds: RefCell<Vec<Cmd>>,
    /// Every buffer this run allocated, by id, released to the pool only when the run's work is done.
    alive: RefCell<HashMap<u64, Arc<WBuf>>>,
    /// Buffers handed back mid-run, reused by this run's later allocations (in queue order).
    parked: RefCell<Vec<Arc<WBuf>>>,
    /// Every buffer a submission used (tensors, weights, parameters, staging), by id, held until
    /// the run's work is done: a weight the session's cache lets go of, or a parameter buffer, must
    /// not return to the shared pool while a submitted kernel may read it.
    held: RefCell<HashMap<u64, Arc<WBuf>>>,
    later: RefCell<Vec<Later>>,
    last: RefCell<Option<wgpu::SubmissionIndex>>,
    /// A submission failed to complete: nothing this run touched goes back to the pools.
    failed: Cell<bool>,
    /// Time each dispatch by timestamp queries (`Run::time_kernels`).
    timing: Cell<bool>,
    /// The op of the node whose kernels are being queued, and its launch number.
    label: RefCell<Option<(Arc<str>, u64)>>,
    launches: Cell<u64>,
    /// Timestamps of submitted work, read at the next wait.
    stamps: RefCell<Vec<timing::Pending>>,
    /// The command log, when the session keeps one (`super::log`).
    log: RunLog,
}

/// A host tensor's bytes in the device layout: borrowed where that is its own memory, encoded
/// otherwise.
fn device_bytes(t: &Tensor) -> KResult<std::borrow::Cow<'_, [u8]>> {
    if let Some(b) = as_device_bytes(t) {
        return Ok(std::borrow::Cow::Borrowed(b));
    }
    encode(t)
        .map(std::borrow::Cow::Owned)
        .ok_or_else(|| DeviceError::Decline(format!("{} values stay on the host", t.dtype())))
}

fn dev_err(e: impl std::fmt::Display) -> DeviceError {
    DeviceError::Device(format!("wgpu: {e}"))
}

/// Workgroup counts for `n` one-dimensional threads in groups of [`WG`]: x up to the adapter's
/// limit, the rest in y (`super::wgsl` recovers the flat index).
pub fn grid(n: usize, max: u32) -> KResult<[u32; 3]> {
    let groups = n.div_ceil(WG as usize);
    let x = groups.min(max as usize).max(1);
    let y = groups.div_ceil(x);
    if y > max as usize {
        return Err(DeviceError::Decline(format!(
            "{n} threads exceed the adapter's dispatch limits"
        )));
    }
    Ok([x as u32, y.max(1) as u32, 1])
}

impl<'a> Run<'a> {
    pub fn new(device: &'a Device, counters: &'a Counters, poison: Option<u8>) -> Run<'a> {
        Run {
            device,
            counters,
            poison,
            cmds: RefCell::new(Vec::new()),
            alive: RefCell::new(HashMap::new()),
            parked: RefCell::new(Vec::new()),
            held: RefCell::new(HashMap::new()),
            later: RefCell::new(Vec::new()),
            last: RefCell::new(None),
            failed: Cell::new(false),
            timing: Cell::new(false),
            label: RefCell::new(None),
            launches: Cell::new(0),
            stamps: RefCell::new(Vec::new()),
            log: RunLog::default(),
        }
    }

    /// Records this run's commands into `log` from now on, in the one-queue model of
    /// [`super::log`].
    pub fn attach_log(&self, log: Arc<quorum_core::cmdlog::CommandLog>) {
        self.log.attach(log);
    }

    /// Times every dispatch queued from now on into `Counters::device_time` (see `super::timing`),
    /// where the adapter has timestamp queries; returns whether it does.
    pub fn time_kernels(&self) -> bool {
        self.timing.set(self.device.caps.timestamps);
        self.device.caps.timestamps
    }

    /// Names the op whose kernels the following dispatches are (for their device time).
    pub fn label(&self, op: &str) {
        self.log.node(op);
        if self.timing.get() {
            self.launches.set(self.launches.get() + 1);
            *self.label.borrow_mut() = Some((Arc::from(op), self.launches.get()));
        }
    }

    fn fresh(&self, bytes: u64) -> KResult<Arc<WBuf>> {
        let b = self.device.pool.take(bytes.max(4), self.counters)?;
        Ok(Arc::new(WBuf::new(b, self.device.pool.clone())))
    }

    /// A new device tensor (contents undefined, or poisoned).
    pub fn alloc(&self, dtype: DType, shape: &[usize]) -> KResult<WTensor> {
        let w = words(dtype)
            .ok_or_else(|| DeviceError::Decline(format!("{dtype} values stay on the host")))?;
        let bytes = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .and_then(|n| n.checked_mul(w * 4))
            .ok_or_else(|| {
                DeviceError::Op(OpError::Invalid(format!("shape {shape:?} overflows")))
            })? as u64;
        let class = size_class(bytes.max(4));
        let buf = match self.take_parked(class) {
            Some(b) => {
                Counters::bump(&self.counters.pool_hits, 1);
                b
            }
            None => self.fresh(bytes)?,
        };
        self.log.alloc(&buf);
        self.alive.borrow_mut().insert(buf.id, buf.clone());
        let t = WTensor {
            buf,
            dtype,
            shape: shape.to_vec(),
        };
        if let Some(byte) = self.poison {
            super::ops::fill_words(self, &t, u32::from_ne_bytes([byte; 4]), true)?;
        }
        Ok(t)
    }

    /// Keeps `b` until the run's work is done (one handle per buffer however often it is used).
    fn hold(&self, b: &Arc<WBuf>) {
        self.held
            .borrow_mut()
            .entry(b.id)
            .or_insert_with(|| b.clone());
    }

    /// Hands a tensor back mid-run: once no other handle holds its buffer, this run's later
    /// allocations may reuse it (their work follows on the same queue).
    pub fn release(&self, t: WTensor) {
        let id = t.buf.id;
        drop(t);
        // Commands, submitted or not, hold handles too; they do not stop the reuse: everything
        // recorded later runs after them on the one queue (wgpu orders the dispatches' accesses).
        // Counting the pending ones as holders kept every released buffer out of reuse until the
        // run ended (a 64 MiB Add in a loop ran the H200's 8 GiB budget out); counting the
        // submitted ones did the same to a buffer once a download had flushed the run.
        let pending: usize = self.cmds.borrow().iter().map(|c| c.uses(id)).sum();
        let submitted = self.held.borrow().contains_key(&id) as usize;
        let mut alive = self.alive.borrow_mut();
        if alive
            .get(&id)
            .is_some_and(|b| Arc::strong_count(b) == 1 + pending + submitted)
            && let Some(b) = alive.remove(&id)
        {
            self.log.release(&b);
            self.parked.borrow_mut().push(b);
        }
    }

    /// A buffer for a weight's `write_buffer`: fresh from the shared pool, which no collected
    /// command can name. With [`Mutant::WriteBufferIntoCollected`] injected, a buffer this run
    /// parked instead, which a collected command may still read (the write lands ahead of it).
    fn weight_buffer(&self, bytes: u64) -> KResult<Arc<WBuf>> {
        if mutants::active(Mutant::WriteBufferIntoCollected)
            && let Some(b) = self.take_parked(size_class(bytes.max(4)))
        {
            return Ok(b);
        }
        self.fresh(bytes)
    }

    /// A buffer of size class `class` this run handed back, if it has one.
    fn take_parked(&self, class: u64) -> Option<Arc<WBuf>> {
        let mut p = self.parked.borrow_mut();
        p.iter()
            .position(|b| b.size() == class)
            .map(|i| p.swap_remove(i))
    }

    /// Copies a host tensor to a fresh buffer (see the module doc for why fresh).
    pub fn upload(&self, t: &Tensor) -> KResult<WTensor> {
        let bytes = device_bytes(t)?;
        let buf = self.fresh(bytes.len() as u64)?;
        self.log.alloc(&buf);
        if !bytes.is_empty() {
            self.device.queue.write_buffer(buf.buffer(), 0, &bytes);
            self.log.write_buffer(&buf);
            Counters::bump(&self.counters.h2d_bytes, bytes.len() as u64);
            Counters::bump(&self.counters.h2d_calls, 1);
        }
        self.alive.borrow_mut().insert(buf.id, buf.clone());
        Ok(WTensor {
            buf,
            dtype: t.dtype(),
            shape: t.shape().to_vec(),
        })
    }

    /// Uploads a weight outside the run's own buffers (it lives in the session's cache).
    pub fn upload_weight(&self, t: &Tensor) -> KResult<WTensor> {
        let bytes = device_bytes(t)?;
        let buf = self.weight_buffer(bytes.len() as u64)?;
        if !bytes.is_empty() {
            self.device.queue.write_buffer(buf.buffer(), 0, &bytes);
            self.log.write_buffer(&buf);
        }
        Counters::bump(&self.counters.h2d_bytes, bytes.len() as u64);
        Counters::bump(&self.counters.h2d_calls, 1);
        Counters::bump(&self.counters.weight_bytes_uploaded, bytes.len() as u64);
        Ok(WTensor {
            buf,
            dtype: t.dtype(),
            shape: t.shape().to_vec(),
        })
    }

    /// Queues a kernel: `src` is its WGSL (compiled on first use, then from the pipeline cache),
    /// bound as the parameter words `params`, then `outs` (read-write) and `ins` (read-only).
    pub fn dispatch(
        &self,
        name: &str,
        src: &str,
        outs: &[&WTensor],
        ins: &[&WTensor],
        params: Vec<u32>,
        groups: [u32; 3],
    ) -> KResult<()> {
        self.dispatch_with(name, Source::Text(src), outs, ins, params, groups)
    }

    /// [`Run::dispatch`] of a kernel named by `key`, a short text that determines its source:
    /// `build` makes the source only when no pipeline has that key yet.
    #[allow(clippy::too_many_arguments)]
    pub fn dispatch_keyed(
        &self,
        name: &str,
        key: &str,
        build: &dyn Fn() -> String,
        outs: &[&WTensor],
        ins: &[&WTensor],
        params: Vec<u32>,
        groups: [u32; 3],
    ) -> KResult<()> {
        self.dispatch_with(name, Source::Keyed(key, build), outs, ins, params, groups)
    }

    fn dispatch_with(
        &self,
        name: &str,
        src: Source,
        outs: &[&WTensor],
        ins: &[&WTensor],
        params: Vec<u32>,
        groups: [u32; 3],
    ) -> KResult<()> {
        if groups.contains(&0) {
            return Ok(());
        }
        let max = self.device.limits.max_storage_buffers_per_shader_stage as usize;
        if outs.len() + ins.len() + 1 > max {
            return Err(DeviceError::Decline(format!(
                "{} operands exceed the adapter's {max} storage buffers per kernel",
                outs.len() + ins.len()
            )));
        }
        let (o, i) = (outs.len(), ins.len());
        let pipeline = match src {
            Source::Text(t) => self.device.pipeline(name, t, o, i, self.counters),
            Source::Keyed(key, build) => {
                self.device
                    .pipeline_keyed(name, key, build, o, i, self.counters)
            }
        }
        .map_err(DeviceError::Device)?;
        if self.log.on() {
            let r: Vec<&WBuf> = ins.iter().map(|t| &*t.buf).collect();
            let w: Vec<&WBuf> = outs.iter().map(|t| &*t.buf).collect();
            self.log.queued(name, &r, &w);
        }
        let buffers = outs.iter().chain(ins).map(|t| t.buf.clone()).collect();
        let label = if self.timing.get() {
            let l = self.label.borrow().clone();
            Some(l.unwrap_or_else(|| (Arc::from("(unlabelled)"), 0)))
        } else {
            None
        };
        self.cmds.borrow_mut().push(Cmd::Dispatch {
            pipeline,
            params,
            buffers,
            groups,
            label,
        });
        Counters::bump(&self.counters.kernel_launches, 1);
        // The queue starts on what is collected while the host records the rest of the run: one
        // submission at the end kept the device idle until every node had been recorded.
        if self.cmds.borrow().len() >= SUBMIT_EVERY {
            self.flush()?;
        }
        Ok(())
    }

    /// [`Run::dispatch`] over `n` one-dimensional threads (`super::wgsl::entry_1d`).
    pub fn dispatch_n(
        &self,
        name: &str,
        src: &str,
        outs: &[&WTensor],
        ins: &[&WTensor],
        params: Vec<u32>,
        n: usize,
    ) -> KResult<()> {
        if n == 0 {
            return Ok(());
        }
        let g = grid(n, self.device.limits.max_compute_workgroups_per_dimension)?;
        self.dispatch(name, src, outs, ins, params, g)
    }

    /// Submits the collected commands (parameters written into one buffer first).
    fn flush(&self) -> KResult<()> {
        let cmds = std::mem::take(&mut *self.cmds.borrow_mut());
        if cmds.is_empty() {
            return Ok(());
        }
        let align = self
            .device
            .limits
            .min_storage_buffer_offset_alignment
            .max(4) as usize;
        let mut offsets = Vec::new();
        let mut bytes: Vec<u8> = Vec::new();
        for c in &cmds {
            if let Cmd::Dispatch { params, .. } = c {
                let at = bytes.len().next_multiple_of(align);
                bytes.resize(at, 0);
                offsets.push(at as u64);
                let mut p = params.clone();
                if p.is_empty() {
                    p.push(0);
                }
                for w in p {
                    bytes.extend_from_slice(&w.to_le_bytes());
                }
            }
        }
        let pbuf = if bytes.is_empty() {
            None
        } else {
            let b = self.fresh(bytes.len() as u64)?;
            self.device.queue.write_buffer(b.buffer(), 0, &bytes);
            // Every dispatch of the submission reads its words, after the write.
            self.log.write_buffer(&b);
            self.log.queued("parameters", &[&b], &[]);
            self.hold(&b);
            Some(b)
        };
        let dev = &self.device.device;
        let mut enc = dev.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        let timed: Vec<(Arc<str>, u64)> = cmds
            .iter()
            .filter_map(|c| match c {
                Cmd::Dispatch { label, .. } => label.clone(),
                Cmd::Copy { .. } => None,
            })
            .collect();
        let sets: Vec<(wgpu::QuerySet, u32)> = timed
            .chunks((timing::MAX_QUERIES / 2) as usize)
            .map(|c| {
                let count = 2 * c.len() as u32;
                let set = dev.create_query_set(&wgpu::QuerySetDescriptor {
                    label: None,
                    ty: wgpu::QueryType::Timestamp,
                    count,
                });
                (set, count)
            })
            .collect();
        let mut stamped = 0usize;
        let mut k = 0;
        let mut i = 0;
        while i < cmds.len() {
            match &cmds[i] {
                Cmd::Copy { src, dst, bytes } => {
                    enc.copy_buffer_to_buffer(src.buffer(), 0, dst.buffer(), 0, *bytes);
                    i += 1;
                }
                Cmd::Dispatch { label, .. } => {
                    // A timed dispatch has a pass of its own, stamped at its beginning and end.
                    let per_set = (timing::MAX_QUERIES / 2) as usize;
                    let writes = label.as_ref().map(|_| {
                        let at = (stamped % per_set) as u32 * 2;
                        wgpu::ComputePassTimestampWrites {
                            query_set: &sets[stamped / per_set].0,
                            beginning_of_pass_write_index: Some(at),
                            end_of_pass_write_index: Some(at + 1),
                        }
                    });
                    let alone = writes.is_some();
                    if alone {
                        stamped += 1;
                    }
                    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: None,
                        timestamp_writes: writes,
                    });
                    while let Some(Cmd::Dispatch {
                        pipeline,
                        params,
                        buffers,
                        groups,
                        ..
                    }) = cmds.get(i)
                    {
                        let pb = pbuf
                            .as_ref()
                            .ok_or_else(|| dev_err("no parameter buffer"))?;
                        let size = (params.len().max(1) * 4) as u64;
                        let mut entries = vec![wgpu::BindGroupEntry {
                            binding: 0,
                            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                                buffer: pb.buffer(),
                                offset: offsets[k],
                                size: std::num::NonZeroU64::new(size),
                            }),
                        }];
                        for (j, b) in buffers.iter().enumerate() {
                            entries.push(wgpu::BindGroupEntry {
                                binding: 1 + j as u32,
                                resource: b.buffer().as_entire_binding(),
                            });
                        }
                        let bg = dev.create_bind_group(&wgpu::BindGroupDescriptor {
                            label: None,
                            layout: &pipeline.layout,
                            entries: &entries,
                        });
                        pass.set_pipeline(&pipeline.pipeline);
                        pass.set_bind_group(0, &bg, &[]);
                        pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
                        k += 1;
                        i += 1;
                        if alone {
                            break;
                        }
                    }
                }
            }
        }
        if !timed.is_empty() {
            let bytes = 8 * 2 * timed.len() as u64;
            let resolve = dev.create_buffer(&wgpu::BufferDescriptor {
                label: Some("timestamps"),
                size: bytes,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            });
            let mut at = 0u64;
            for (set, n) in &sets {
                enc.resolve_query_set(set, 0..*n, &resolve, at);
                at += 8 * *n as u64;
            }
            let staging = self.staging(bytes)?;
            enc.copy_buffer_to_buffer(&resolve, 0, staging.buffer(), 0, bytes);
            self.log.queued("timestamps", &[], &[&staging]);
            self.stamps.borrow_mut().push(timing::Pending {
                staging,
                bytes,
                labels: timed,
            });
        }
        let idx = self.device.queue.submit([enc.finish()]);
        self.log.submit();
        *self.last.borrow_mut() = Some(idx);
        for c in cmds {
            match c {
                Cmd::Dispatch { buffers, .. } => buffers.iter().for_each(|b| self.hold(b)),
                Cmd::Copy { src, dst, .. } => [src, dst].iter().for_each(|b| self.hold(b)),
            }
        }
        Ok(())
    }

    /// Waits for everything submitted so far, then reports any error wgpu raised meanwhile.
    fn wait(&self) -> KResult<()> {
        let idx = self.last.borrow().clone();
        if let Some(idx) = idx
            && let Err(e) = self.device.device.poll(wgpu::PollType::Wait {
                submission_index: Some(idx),
                timeout: None,
            })
        {
            self.failed.set(true);
            return Err(dev_err(format!("waiting for the queue: {e}")));
        }
        let errors = self.device.take_errors();
        if !errors.is_empty() {
            self.failed.set(true);
            return Err(dev_err(errors.join("; ")));
        }
        self.log.waited();
        let stamps = std::mem::take(&mut *self.stamps.borrow_mut());
        let period = self.device.queue.get_timestamp_period();
        for p in stamps {
            let bytes = self.read(&p.staging, p.bytes)?;
            timing::record(&p, &bytes, period, self.counters);
        }
        Ok(())
    }

    /// A readback buffer of at least `bytes`, held by the run.
    fn staging(&self, bytes: u64) -> KResult<Arc<WBuf>> {
        let b = self.device.readback.take(bytes.max(4), self.counters)?;
        Ok(Arc::new(WBuf::new(b, self.device.readback.clone())))
    }

    /// Maps a waited-for readback buffer and copies its first `bytes` out.
    fn read(&self, staging: &WBuf, bytes: u64) -> KResult<Vec<u8>> {
        self.read_with(staging, bytes, <[u8]>::to_vec)
    }

    /// Maps a waited-for readback buffer and hands its first `bytes` to `f` (which reads them
    /// straight out of the mapping: a download is copied once, into its tensor).
    fn read_with<T>(&self, staging: &WBuf, bytes: u64, f: impl FnOnce(&[u8]) -> T) -> KResult<T> {
        if bytes == 0 {
            return Ok(f(&[]));
        }
        // The callback runs on whichever thread polls the device: with several runs sharing it,
        // another run's poll can take our callback and still be running it when our own poll
        // returns. So the result comes through a channel, and we wait for it after polling.
        let (tx, rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let b = staging.buffer();
        b.map_async(wgpu::MapMode::Read, 0..bytes, move |r| {
            let _ = tx.send(r.map_err(|e| e.to_string()));
        });
        self.device
            .device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| dev_err(format!("mapping a download: {e}")))?;
        match rx.recv_timeout(std::time::Duration::from_secs(120)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(dev_err(format!("mapping a download: {e}"))),
            Err(_) => {
                // Cancel the pending map, so that the buffer goes back to the pool unmapped.
                b.unmap();
                return Err(dev_err(
                    "a download was not mapped within 120 s of the wait",
                ));
            }
        }
        self.log
            .access(quorum_core::cmdlog::Agent::Host, "map", &[staging], &[]);
        let out = {
            let view = b
                .get_mapped_range(0..bytes)
                .map_err(|e| dev_err(format!("reading a download: {e}")))?;
            f(&view)
        };
        b.unmap();
        Ok(out)
    }

    /// The tensor a download's bytes hold.
    fn rebuild(&self, staging: &WBuf, n: u64, dtype: DType, shape: &[usize]) -> KResult<Tensor> {
        self.read_with(staging, n, |bytes| decode(dtype, shape, bytes))?
            .ok_or_else(|| {
                DeviceError::Op(OpError::Invalid(format!(
                    "cannot rebuild a {dtype} tensor of shape {shape:?}"
                )))
            })
    }

    /// Copies a device tensor back now (after the work before it).
    pub fn download(&self, t: &WTensor) -> KResult<Tensor> {
        let n = t.bytes();
        let staging = self.staging(n)?;
        if n > 0 {
            self.log.queued("download", &[&t.buf], &[&staging]);
            self.cmds.borrow_mut().push(Cmd::Copy {
                src: t.buf.clone(),
                dst: staging.clone(),
                bytes: n,
            });
        }
        self.flush()?;
        self.wait()?;
        let out = self.rebuild(&staging, n, t.dtype, &t.shape)?;
        Counters::bump(&self.counters.d2h_bytes, n);
        Counters::bump(&self.counters.d2h_calls, 1);
        Ok(out)
    }

    /// Starts copying a device tensor back; [`Run::finish`] collects it.
    pub fn download_later(&self, t: &WTensor) -> KResult<usize> {
        let n = t.bytes();
        let staging = self.staging(n)?;
        if n > 0 {
            self.log.queued("download", &[&t.buf], &[&staging]);
            self.cmds.borrow_mut().push(Cmd::Copy {
                src: t.buf.clone(),
                dst: staging.clone(),
                bytes: n,
            });
        }
        let mut later = self.later.borrow_mut();
        later.push(Later {
            staging,
            bytes: n,
            dtype: t.dtype,
            shape: t.shape.clone(),
        });
        Ok(later.len() - 1)
    }

    /// Submits what is left, waits once, and returns the copies of [`Run::download_later`].
    pub fn finish(&self) -> KResult<Vec<Tensor>> {
        self.flush()?;
        self.wait()?;
        let later = std::mem::take(&mut *self.later.borrow_mut());
        let mut out = Vec::with_capacity(later.len());
        for l in later {
            out.push(self.rebuild(&l.staging, l.bytes, l.dtype, &l.shape)?);
            Counters::bump(&self.counters.d2h_bytes, l.bytes);
            Counters::bump(&self.counters.d2h_calls, 1);
        }
        Ok(out)
    }

    /// Submits the collected commands and waits for them (benchmarks time the device this way).
    pub fn synchronize(&self) -> KResult<()> {
        self.flush()?;
        self.wait()
    }
}

impl Drop for Run<'_> {
    fn drop(&mut self) {
        // Nothing goes back to the shared pools before the queue is done with it.
        self.cmds.borrow_mut().clear();
        let done = !self.failed.get() && self.wait().is_ok();
        if !done {
            // A failed queue: leak rather than hand possibly-busy buffers to others.
            std::mem::forget(std::mem::take(&mut *self.alive.borrow_mut()));
            std::mem::forget(std::mem::take(&mut *self.parked.borrow_mut()));
            std::mem::forget(std::mem::take(&mut *self.held.borrow_mut()));
            std::mem::forget(std::mem::take(&mut *self.later.borrow_mut()));
            std::mem::forget(std::mem::take(&mut *self.stamps.borrow_mut()));
        }
    }
}
