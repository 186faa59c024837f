//! A wgpu run's command log (`quorum_core::cmdlog`), in the ordering model of one queue.
//!
//! - The queue is one stream, [`QUEUE`]: dispatches and copies are logged on it as they are
//!   collected, in order.
//! - `Queue::write_buffer` is carried out at the start of the next submission, ahead of every
//!   command collected before it but after the work already submitted. It is logged on a stream of
//!   its own, [`PENDING_WRITES`], that waits for the queue's last submission; the queue waits for
//!   the write at once, so commands collected later are ordered after it and commands collected
//!   earlier are not: a write into a buffer that a collected, unsubmitted command touches is a race
//!   in the log, as it is a wrong result on the device.
//! - A submission records an event on the queue; a wait for the device (a poll) is the host's
//!   synchronisation with the queue, after which the host reads mapped staging.
//!
//! Buffers have no addresses: buffer `id` is the device range starting at `id << 40`.
use std::cell::{Cell, RefCell};
use std::sync::Arc;

use quorum_core::cmdlog::{Agent, Command, CommandLog, Range};

use super::memory::WBuf;

/// The queue's stream id in the log.
pub const QUEUE: u64 = 1;
/// The stream id of the writes `write_buffer` leaves for the next submission.
pub const PENDING_WRITES: u64 = 2;

/// The range a buffer stands for in the log.
pub fn range(b: &WBuf) -> Range {
    Range::device(b.id << 40, b.size())
}

/// Where a run's commands go (nothing is kept while no log is attached).
#[derive(Default)]
pub struct RunLog {
    log: RefCell<Option<Arc<CommandLog>>>,
    events: Cell<u64>,
    /// The event of the queue's last submission, which later pending writes follow.
    submitted: Cell<Option<u64>>,
    /// The op of the node being recorded (named in the log).
    node: RefCell<String>,
}

impl RunLog {
    pub fn attach(&self, log: Arc<CommandLog>) {
        *self.log.borrow_mut() = Some(log);
    }

    pub fn on(&self) -> bool {
        self.log.borrow().is_some()
    }

    pub fn node(&self, name: &str) {
        if self.on() {
            *self.node.borrow_mut() = name.to_string();
        }
    }

    fn push(&self, c: Command) {
        if let Some(l) = self.log.borrow().as_ref() {
            l.push(c);
        }
    }

    fn event(&self) -> u64 {
        self.events.set(self.events.get() + 1);
        self.events.get()
    }

    /// Work on `by` reading `reads` and writing `writes`.
    pub fn access(&self, by: Agent, what: &str, reads: &[&WBuf], writes: &[&WBuf]) {
        if !self.on() {
            return;
        }
        self.push(Command::Access {
            by,
            what: what.to_string(),
            node: self.node.borrow().clone(),
            reads: reads.iter().map(|b| range(b)).collect(),
            writes: writes.iter().map(|b| range(b)).collect(),
        });
    }

    /// A command collected for the queue.
    pub fn queued(&self, what: &str, reads: &[&WBuf], writes: &[&WBuf]) {
        self.access(Agent::Stream(QUEUE), what, reads, writes);
    }

    /// A buffer handed to the run (fresh from the pool, or parked by it).
    pub fn alloc(&self, b: &WBuf) {
        self.push(Command::Alloc {
            range: range(b),
            stream: QUEUE,
        });
    }

    /// A buffer the run handed back for its own later allocations.
    pub fn release(&self, b: &WBuf) {
        self.push(Command::Release { range: range(b) });
    }

    /// `Queue::write_buffer` into `b`: after the submitted work, before what is collected next.
    pub fn write_buffer(&self, b: &WBuf) {
        if !self.on() {
            return;
        }
        if let Some(e) = self.submitted.get() {
            self.push(Command::Wait {
                stream: PENDING_WRITES,
                event: e,
            });
        }
        self.access(Agent::Stream(PENDING_WRITES), "write_buffer", &[], &[b]);
        let e = self.event();
        self.push(Command::Record {
            stream: PENDING_WRITES,
            event: e,
        });
        self.push(Command::Wait {
            stream: QUEUE,
            event: e,
        });
    }

    /// The collected commands went to the queue.
    pub fn submit(&self) {
        if !self.on() {
            return;
        }
        let e = self.event();
        self.push(Command::Record {
            stream: QUEUE,
            event: e,
        });
        self.submitted.set(Some(e));
    }

    /// The host waited for the queue's submitted work.
    pub fn waited(&self) {
        self.push(Command::SyncStream { stream: QUEUE });
    }
}
