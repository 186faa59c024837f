//! The run protocol, written once for every device that has streams: how a run allocates, hands
//! back and reuses buffers, records and waits for events, stages copies through pinned memory, reads
//! results back and returns what it held to the shared pools; with the command log
//! (`crate::cmdlog`) of all of it. CUDA's `Run` and the simulated device are this protocol over
//! their own [`Driver`]: the driver issues the calls (real streams and events, or names), the
//! protocol decides which calls and in what order, so a synchronisation bug here is one bug on
//! both, and the stream fuzzer of `cargo test` (the simulated device) judges the code CUDA runs.
//! Every injected synchronisation bug of the protocol (`crate::mutants`) is injected here, once.
//!
//! The rules:
//! - a buffer handed back mid-run ([`RunProtocol::release`]) is reused by this run's later
//!   allocations only, after the events of its readers, and (with several streams) after a mark
//!   recorded where it was handed back; views share a buffer, and the events of every handle's
//!   release are gathered until the last handle goes;
//! - pinned staging is held by the run until its streams are known to be done;
//! - at the end ([`Drop`]) every stream is synchronised, and only then does anything go back to
//!   the shared pools (device memory, staging, events, streams), each return logged as a host
//!   access ([`Command::Return`]); after a failed synchronisation everything is leaked instead.
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;

mod copies;
mod end;

pub use end::stage_replay_inputs;

use crate::backend::Fault;
use crate::cmdlog::{Agent, Command, CommandLog, Range};
use crate::counters::Counters;
use crate::mutants::{self, Mutant};

/// A run's device buffer: memory that goes back to its pool when the last handle drops, unless
/// taken out first ([`Buffer::into_mem`]).
pub trait Buffer: Send + Sync {
    type Mem;
    fn ptr(&self) -> u64;
    fn bytes(&self) -> u64;
    /// The memory, taken out so that dropping the buffer returns nothing.
    fn into_mem(self) -> Option<Self::Mem>;
}

/// What a device does for the protocol: the calls themselves, no decisions.
pub trait Driver {
    type Stream;
    type Event;
    /// Device memory from the device's pool.
    type Mem;
    type Buf: Buffer<Mem = Self::Mem>;
    /// Pinned host memory from the staging pool.
    type Pinned;
    /// What a read-back copy keeps beside its pinned buffer until it is collected.
    type Later;
    type Error;

    /// An error of the protocol itself (an event never recorded), in the driver's type.
    fn invalid(msg: String) -> Self::Error;
    /// A raised device check as the run's error.
    fn fault(f: Fault) -> Self::Error;
    /// Work the device declines (the caller falls back or refuses a capture), in the driver's type.
    fn decline(msg: String) -> Self::Error;

    /// Names for the command log.
    fn stream_id(&self, s: &Self::Stream) -> u64;
    fn event_id(&self, e: &Self::Event) -> u64;
    fn mem_range(&self, m: &Self::Mem) -> (u64, u64);
    /// A pinned buffer's address and size.
    fn pinned_range(&self, p: &Self::Pinned) -> (u64, u64);
    /// The pinned buffer's bytes (empty where the device keeps none).
    fn pinned_bytes<'p>(&self, p: &'p Self::Pinned) -> &'p [u8];

    fn take_event(&self) -> Result<Self::Event, Self::Error>;
    fn give_event(&self, e: Self::Event);
    fn give_streams(&self, s: Vec<Self::Stream>);
    /// `e` completes when the work issued to `on` so far has.
    fn record(&self, e: &Self::Event, on: &Self::Stream) -> Result<(), Self::Error>;
    /// `s`'s later work waits for the last record of `e`.
    fn wait(&self, s: &Self::Stream, e: &Self::Event) -> Result<(), Self::Error>;
    fn sync_stream(&self, s: &Self::Stream) -> Result<(), Self::Error>;
    fn sync_event(&self, e: &Self::Event) -> Result<(), Self::Error>;

    fn take_mem(&self, bytes: usize, counters: &Counters) -> Result<Self::Mem, Self::Error>;
    fn give_mem(&self, m: Self::Mem);
    /// Memory as a buffer that returns it to the pool when dropped.
    fn wrap(&self, m: Self::Mem) -> Self::Buf;
    fn fill32(
        &self,
        s: &Self::Stream,
        ptr: u64,
        value: u32,
        words: usize,
    ) -> Result<(), Self::Error>;

    fn take_pinned(&self, bytes: usize) -> Result<Self::Pinned, Self::Error>;
    fn give_pinned(&self, p: Self::Pinned);
    /// Copies bytes `at..at + n` of `src` to device address `dst` on `s`.
    fn upload(
        &self,
        s: &Self::Stream,
        dst: u64,
        src: &Self::Pinned,
        at: usize,
        n: usize,
    ) -> Result<(), Self::Error>;
    /// Copies `src`, host memory page-locked in place by its owner, to device address `dst` on `s`
    /// (the caller keeps it alive and unwritten until the stream has passed the copy). Declined
    /// by a device without such memory.
    fn upload_host(&self, _s: &Self::Stream, _dst: u64, _src: &[u8]) -> Result<(), Self::Error> {
        Err(Self::decline(
            "no host memory is page-locked on this device".into(),
        ))
    }
    /// Copies `n` bytes at device address `src` into host memory at `dst`, page-locked in place by
    /// its owner, on `s`.
    ///
    /// # Safety
    /// `[dst, dst + n)` is live memory that nothing reads or writes until the stream has passed
    /// the copy.
    unsafe fn download_host(
        &self,
        _s: &Self::Stream,
        _dst: u64,
        _src: u64,
        _n: usize,
    ) -> Result<(), Self::Error> {
        Err(Self::decline(
            "no host memory is page-locked on this device".into(),
        ))
    }
    /// The bytes of one piece of a large upload outside a capture: each piece is staged and its
    /// copy issued before the next is staged, so the host's staging overlaps the bus (`None`:
    /// every upload is staged whole, then copied).
    fn upload_piece(&self) -> Option<usize> {
        None
    }
    /// Copies `n` bytes at device address `src` into the start of `dst` on `s`.
    fn download(
        &self,
        s: &Self::Stream,
        dst: &mut Self::Pinned,
        src: u64,
        n: usize,
    ) -> Result<(), Self::Error>;
}

/// A buffer handed back mid-run, waiting for this run's next allocation of its size.
pub struct Parked<M, E> {
    pub mem: M,
    /// The executor's events of its readers.
    pub after: Vec<usize>,
    /// The mark recorded where it was handed back, and that stream.
    pub released: Option<(E, usize)>,
}

/// A read-back copy started by [`RunProtocol::download_later`].
pub struct Later<P, L> {
    pub pinned: P,
    pub bytes: usize,
    pub what: L,
}

/// A device check: a flag word copied back, and what a raised flag means.
pub struct Check<P> {
    pub pinned: P,
    pub fault: Fault,
}

/// What a capture keeps while it runs.
pub struct CaptureLog<E> {
    pub events: Vec<E>,
    /// Each upload's staging buffer (an index into the run's staging) and the bytes the graph
    /// copies from it (`None`: an empty tensor).
    pub uploads: Vec<Option<(usize, usize)>>,
}

impl<E> Default for CaptureLog<E> {
    fn default() -> Self {
        CaptureLog {
            events: Vec::new(),
            uploads: Vec::new(),
        }
    }
}

/// Everything a run holds, taken out at the end of a capture for the graph to keep.
pub struct Held<D: Driver> {
    pub staging: Vec<D::Pinned>,
    pub later: Vec<Later<D::Pinned, D::Later>>,
    pub checks: Vec<Check<D::Pinned>>,
    /// Live buffers of the run.
    pub buffers: Vec<Arc<D::Buf>>,
    /// Resident buffers (weights) the run read.
    pub resident: Vec<Arc<D::Buf>>,
    pub parked: Vec<D::Mem>,
    pub events: Vec<D::Event>,
}

/// The first raised flag among `checks`, as its fault.
pub fn raised<D: Driver>(driver: &D, checks: &[Check<D::Pinned>]) -> Option<Fault> {
    checks
        .iter()
        .find(|c| {
            driver
                .pinned_bytes(&c.pinned)
                .get(..4)
                .is_some_and(|w| w != [0; 4])
        })
        .map(|c| c.fault.clone())
}

/// One run's side of the protocol over driver `D`.
pub struct RunProtocol<'a, D: Driver> {
    pub driver: D,
    pub counters: &'a Counters,
    streams: Vec<D::Stream>,
    current: Cell<usize>,
    /// Fill every new buffer with this byte, so that an unwritten element shows.
    poison: Option<u8>,
    alive: RefCell<HashMap<u64, Arc<D::Buf>>>,
    /// Buffers outside the run that its kernels read (resident weights), held until every stream
    /// has finished: a launch passes only an address, so nothing else would keep them.
    held: RefCell<Vec<Arc<D::Buf>>>,
    parked: RefCell<Vec<Parked<D::Mem, D::Event>>>,
    staging: RefCell<Vec<D::Pinned>>,
    later: RefCell<Vec<Later<D::Pinned, D::Later>>>,
    checks: RefCell<Vec<Check<D::Pinned>>>,
    /// Recorded events by the executor's name for them, with the stream each was recorded on.
    events: RefCell<HashMap<usize, (D::Event, usize)>>,
    /// Events gathered from releases of handles of a buffer that other handles still hold.
    release_waits: RefCell<HashMap<u64, Vec<usize>>>,
    /// Release marks already waited on (kept until the run ends, or with a captured graph).
    spent: RefCell<Vec<D::Event>>,
    /// While the run is captured into a graph.
    capture: RefCell<Option<CaptureLog<D::Event>>>,
    log: RefCell<Option<Arc<CommandLog>>>,
    /// The node whose work is being issued (named in the log).
    node: RefCell<String>,
    /// Keep the node's name without a log (for errors that name it).
    named: Cell<bool>,
}

impl<'a, D: Driver> RunProtocol<'a, D> {
    /// A run on `streams` (at least one), taken by the caller from the device's pool.
    pub fn new(
        driver: D,
        streams: Vec<D::Stream>,
        counters: &'a Counters,
        poison: Option<u8>,
    ) -> RunProtocol<'a, D> {
        assert!(!streams.is_empty(), "a run has at least one stream");
        RunProtocol {
            driver,
            counters,
            streams,
            current: Cell::new(0),
            poison,
            alive: RefCell::new(HashMap::new()),
            held: RefCell::new(Vec::new()),
            parked: RefCell::new(Vec::new()),
            staging: RefCell::new(Vec::new()),
            later: RefCell::new(Vec::new()),
            checks: RefCell::new(Vec::new()),
            events: RefCell::new(HashMap::new()),
            release_waits: RefCell::new(HashMap::new()),
            spent: RefCell::new(Vec::new()),
            capture: RefCell::new(None),
            log: RefCell::new(None),
            node: RefCell::new(String::new()),
            named: Cell::new(false),
        }
    }

    pub fn streams(&self) -> &[D::Stream] {
        &self.streams
    }

    /// The current stream: where kernels launch and copies go.
    pub fn stream(&self) -> &D::Stream {
        &self.streams[self.current.get().min(self.streams.len() - 1)]
    }

    pub fn set_stream(&self, s: usize) {
        self.current.set(s.min(self.streams.len() - 1));
    }

    pub fn current_stream(&self) -> usize {
        self.current.get()
    }

    /// The stream a host read of a value produced on `producer` goes to: the producer's (the
    /// [`Mutant::DownloadWrongStream`] bug sends it to the current one).
    pub fn read_stream(&self, producer: usize) -> usize {
        if mutants::active(Mutant::DownloadWrongStream) {
            self.current.get()
        } else {
            producer.min(self.streams.len() - 1)
        }
    }

    // ---- the command log --------------------------------------------------------------------

    pub fn attach_log(&self, log: Arc<CommandLog>) {
        *self.log.borrow_mut() = Some(log);
    }

    pub fn logging(&self) -> bool {
        self.log.borrow().is_some()
    }

    /// Keeps the names [`RunProtocol::begin_node`] gives even without a log (an audited run's
    /// errors name the node).
    pub fn name_nodes(&self) {
        self.named.set(true);
    }

    /// The node named by the last [`RunProtocol::begin_node`] (while logging or naming; else
    /// empty).
    pub fn node_name(&self) -> String {
        self.node.borrow().clone()
    }

    /// Names the node whose work follows (for the log).
    pub fn begin_node(&self, name: &str) {
        if self.logging() || self.named.get() {
            let mut n = self.node.borrow_mut();
            n.clear();
            n.push_str(name);
        }
    }

    pub fn push(&self, c: Command) {
        if let Some(log) = self.log.borrow().as_ref() {
            log.push(c);
        }
    }

    fn current_id(&self) -> u64 {
        self.driver.stream_id(self.stream())
    }

    /// Logs work of the current stream.
    pub fn log_work(&self, what: &str, reads: Vec<Range>, writes: Vec<Range>) {
        if self.logging() {
            self.log_access(Agent::Stream(self.current_id()), what, reads, writes);
        }
    }

    pub fn log_access(&self, by: Agent, what: &str, reads: Vec<Range>, writes: Vec<Range>) {
        if let Some(log) = self.log.borrow().as_ref() {
            log.push(Command::Access {
                by,
                what: what.to_string(),
                node: self.node.borrow().clone(),
                reads,
                writes,
            });
        }
    }

    // ---- buffers ----------------------------------------------------------------------------

    /// A buffer of at least `bytes` for work on the current stream: one this run parked, of the
    /// same size class, once its readers and its release are waited for; else one from the pool.
    /// Poisoned when the run asks for it.
    pub fn alloc(&self, bytes: usize) -> Result<Arc<D::Buf>, D::Error> {
        let class = crate::freelist::size_class(bytes) as u64;
        let parked = {
            let mut p = self.parked.borrow_mut();
            p.iter()
                .position(|m| self.driver.mem_range(&m.mem).1 == class)
                .map(|i| p.swap_remove(i))
        };
        let mem = match parked {
            Some(m) if mutants::active(Mutant::SharedFreeList) => {
                if let Some((e, _)) = m.released {
                    self.spent.borrow_mut().push(e);
                }
                m.mem
            }
            Some(m) => {
                // Its readers on other streams must be done before this stream writes it.
                let here = self.current.get();
                {
                    let events = self.events.borrow();
                    for e in &m.after {
                        if let Some((event, on)) = events.get(e)
                            && *on != here
                        {
                            self.wait_logged(self.stream(), event)?;
                        }
                    }
                }
                if let Some((event, on)) = m.released {
                    let waited = if on != here {
                        self.wait_logged(self.stream(), &event)
                    } else {
                        Ok(())
                    };
                    self.spent.borrow_mut().push(event);
                    waited?;
                }
                Counters::bump(&self.counters.pool_hits, 1);
                m.mem
            }
            None => {
                let mem = self.driver.take_mem(bytes, self.counters)?;
                let (ptr, len) = self.driver.mem_range(&mem);
                self.push(Command::Take {
                    range: Range::device(ptr, len),
                });
                mem
            }
        };
        let (ptr, len) = self.driver.mem_range(&mem);
        let range = Range::device(ptr, len);
        if self.logging() {
            let stream = self.current_id();
            self.push(Command::Alloc { range, stream });
        }
        let buf = Arc::new(self.driver.wrap(mem));
        self.alive.borrow_mut().insert(ptr, buf.clone());
        if let Some(byte) = self.poison {
            self.driver.fill32(
                self.stream(),
                ptr,
                u32::from_ne_bytes([byte; 4]),
                (len / 4) as usize,
            )?;
            self.log_work("poison", vec![], vec![range]);
        }
        Ok(buf)
    }

    fn wait_logged(&self, s: &D::Stream, e: &D::Event) -> Result<(), D::Error> {
        self.driver.wait(s, e)?;
        self.push(Command::Wait {
            stream: self.driver.stream_id(s),
            event: self.driver.event_id(e),
        });
        Ok(())
    }

    fn record_logged(&self, e: &D::Event, on: &D::Stream) -> Result<(), D::Error> {
        self.driver.record(e, on)?;
        self.push(Command::Record {
            stream: self.driver.stream_id(on),
            event: self.driver.event_id(e),
        });
        Ok(())
    }

    /// Keeps `buf` (a resident weight from the session's cache, which the run did not allocate)
    /// until the run's streams have finished, or, captured, until its graph is dropped; taking it
    /// from the cache orders the run after the weight's publication.
    /// Every device range the run can reach now: its live buffers, the memory it parked for reuse
    /// and the buffers it holds (weights), as `(address, bytes)` (for an audit of launches).
    pub fn reachable(&self) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = self
            .alive
            .borrow()
            .values()
            .chain(self.held.borrow().iter())
            .map(|b| (b.ptr(), b.bytes()))
            .collect();
        v.extend(
            self.parked
                .borrow()
                .iter()
                .map(|m| self.driver.mem_range(&m.mem)),
        );
        v
    }

    pub fn hold(&self, buf: &Arc<D::Buf>) {
        self.push(Command::Take {
            range: Range::device(buf.ptr(), buf.bytes()),
        });
        self.held.borrow_mut().push(buf.clone());
    }

    /// Hands a handle of the run's buffer back in the middle of the run (the caller has dropped
    /// every other reference it had). The buffer is reused by this run's later allocations once no
    /// handle is left, after the events `after` of every handle's readers.
    pub fn release(&self, buf: Arc<D::Buf>, after: &[usize]) {
        let ptr = buf.ptr();
        drop(buf);
        let mut waits = self.release_waits.borrow_mut();
        let gathered = waits.entry(ptr).or_default();
        for &e in after {
            if !gathered.contains(&e) {
                gathered.push(e);
            }
        }
        let last = self
            .alive
            .borrow()
            .get(&ptr)
            .is_some_and(|b| Arc::strong_count(b) == 1);
        if !last {
            return;
        }
        let mut after = waits.remove(&ptr).unwrap_or_default();
        drop(waits);
        let early = mutants::active(Mutant::EarlyRelease);
        if early {
            after.clear();
        }
        // With several streams, mark where it was handed back: an allocation on another stream
        // waits for that point.
        let released = if self.streams.len() > 1 && !early {
            match self.driver.take_event() {
                Ok(e) if self.record_logged(&e, self.stream()).is_ok() => {
                    Some((e, self.current.get()))
                }
                // Without the mark it must not be reused: it stays alive until the run ends.
                _ => return,
            }
        } else {
            None
        };
        let Some(buf) = self.alive.borrow_mut().remove(&ptr) else {
            return;
        };
        let range = Range::device(ptr, buf.bytes());
        self.push(Command::Release { range });
        if let Ok(buf) = Arc::try_unwrap(buf)
            && let Some(mem) = buf.into_mem()
        {
            self.parked.borrow_mut().push(Parked {
                mem,
                after,
                released,
            });
        }
    }

    /// A kernel's scratch before the last launch that reads it: kept, for the caller to release
    /// after that launch, unless the [`Mutant::ScratchReleasedEarly`] bug is injected, which hands
    /// it back here.
    pub fn scratch_before_last_read(&self, buf: Arc<D::Buf>) -> Option<Arc<D::Buf>> {
        if mutants::active(Mutant::ScratchReleasedEarly) {
            self.release(buf, &[]);
            return None;
        }
        Some(buf)
    }

    /// Memory outside the run's buffers (a resident weight, kept by the session's cache): `copy`
    /// fills it on the current stream and the host waits for that stream, so that kernels of this
    /// and other runs may read it from any stream at once.
    pub fn resident(
        &self,
        n: usize,
        copy: impl FnOnce(&D::Stream, u64) -> Result<(), D::Error>,
    ) -> Result<Arc<D::Buf>, D::Error> {
        self.not_capturing("a weight that is not resident yet")?;
        let mem = self.driver.take_mem(n, self.counters)?;
        let (ptr, len) = self.driver.mem_range(&mem);
        let whole = Range::device(ptr, len);
        self.push(Command::Take { range: whole });
        let buf = Arc::new(self.driver.wrap(mem));
        // Until the copy is known to be done, the memory stays with the run (which leaks it if
        // its streams fail): dropped now, it would go back to the pool under the copy.
        self.held.borrow_mut().push(buf.clone());
        copy(self.stream(), ptr)?;
        self.log_work("weight upload", vec![], vec![Range::device(ptr, n as u64)]);
        if !mutants::active(Mutant::WeightUnsynced) {
            self.driver.sync_stream(self.stream())?;
            self.push(Command::SyncStream {
                stream: self.current_id(),
            });
        }
        // The copy is done: the run lets go (a caller keeps the weight with `hold`).
        let mut held = self.held.borrow_mut();
        if held.last().is_some_and(|b| Arc::ptr_eq(b, &buf)) {
            held.pop();
        }
        drop(held);
        self.push(Command::Publish { range: whole });
        Counters::bump(&self.counters.h2d_bytes, n as u64);
        Counters::bump(&self.counters.h2d_calls, 1);
        Counters::bump(&self.counters.weight_bytes_uploaded, n as u64);
        Ok(buf)
    }

    // ---- events -----------------------------------------------------------------------------

    /// Records the executor's event `id` on `stream` (recorded again, it moves).
    pub fn record(&self, stream: usize, id: usize) -> Result<(), D::Error> {
        let s = stream.min(self.streams.len() - 1);
        let event = match self.events.borrow_mut().remove(&id) {
            Some((e, _)) => e,
            None => self.driver.take_event()?,
        };
        let recorded = self.record_logged(&event, &self.streams[s]);
        self.events.borrow_mut().insert(id, (event, s));
        recorded
    }

    /// Makes `stream` wait for the executor's event `id` (nothing to do where it was recorded).
    pub fn wait(&self, stream: usize, id: usize) -> Result<(), D::Error> {
        let s = stream.min(self.streams.len() - 1);
        let events = self.events.borrow();
        let Some((event, on)) = events.get(&id) else {
            return Err(D::invalid(format!("event {id} was never recorded")));
        };
        if *on != s {
            self.wait_logged(&self.streams[s], event)?;
        }
        Ok(())
    }
}
