//! The command log of a device run: every launch, copy, fill, event record and wait, stream or host
//! synchronisation, allocation and release, in the order the host issued them, with the stream each
//! went to and the byte ranges each reads and writes. A happens-before checker (`quorum-fuzz`'s
//! `hb`) finds every pair of conflicting accesses that no event or synchronisation orders.
//!
//! Recording is asked for per session (`SessionOptions::command_log`); when it is off no entry is
//! made and the cost is one branch per device call. Device memory and pinned host memory are two
//! address spaces ([`Space`]); streams and events are named by the backend (for CUDA, their driver
//! handles), so the same name may come back in a later run once returned to its pool.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Which memory a range is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Space {
    Device,
    /// Pinned host memory the device copies to and from (staging).
    Pinned,
}

/// A byte range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Range {
    pub space: Space,
    pub start: u64,
    pub len: u64,
}

impl Range {
    pub fn device(start: u64, len: u64) -> Range {
        Range {
            space: Space::Device,
            start,
            len,
        }
    }

    pub fn pinned(start: u64, len: u64) -> Range {
        Range {
            space: Space::Pinned,
            start,
            len,
        }
    }

    pub fn overlaps(&self, o: &Range) -> bool {
        self.space == o.space
            && self.len > 0
            && o.len > 0
            && self.start < o.start.saturating_add(o.len)
            && o.start < self.start.saturating_add(self.len)
    }
}

/// Who does a command: a stream (its work runs in issue order on it) or the host (now).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Agent {
    Stream(u64),
    Host,
}

/// One command of a run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub enum Command {
    /// Work on `by` (a kernel, a copy, a fill) that reads and writes these ranges. `what` names it
    /// (the kernel, or `upload`, `download`, `fill`, `copy`) and `node` the node it belongs to.
    Access {
        by: Agent,
        what: String,
        node: String,
        reads: Vec<Range>,
        writes: Vec<Range>,
    },
    /// Event `event` recorded on `stream`: it completes when the stream's work issued so far has.
    Record { stream: u64, event: u64 },
    /// `stream`'s later work waits for the last record of `event`.
    Wait { stream: u64, event: u64 },
    /// The host waits for everything issued so far on `stream`.
    SyncStream { stream: u64 },
    /// The host waits for the last record of `event`.
    SyncEvent { event: u64 },
    /// A range handed to the run (from the pool, or reused within it) for work on `stream`.
    Alloc { range: Range, stream: u64 },
    /// A range handed back by the run (to be reused by a later allocation).
    Release { range: Range },
    /// A range returned to a pool shared with other runs (device memory, pinned staging) at the
    /// host's point in the log: every access to it must happen before (the checker treats it as a
    /// host write), and a run that takes it from the pool later comes after this point.
    Return { range: Range },
    /// The host makes resident bytes (an uploaded weight) available to other runs: a run that
    /// takes them later comes after this point.
    Publish { range: Range },
    /// The host takes a range from a pool or cache shared with other runs: what it does from here
    /// comes after every return or publication of those bytes (the pool's or cache's lock orders
    /// the two hosts).
    Take { range: Range },
    /// The work that follows relies on `range` holding bytes written by this run (a graph
    /// replay's staged input, which must be this replay's input, not the one before): some access
    /// of this run earlier in the log must have written every byte of it. `what` names the
    /// expectation (which input).
    Fresh { range: Range, what: String },
}

/// A run's commands as the backend issues them.
#[derive(Debug, Default)]
pub struct CommandLog {
    entries: Mutex<Vec<Command>>,
    /// The session's log of all its runs, and this run's number there.
    session: Option<(Arc<SessionLog>, u64)>,
}

impl CommandLog {
    /// A run's log whose commands also go, tagged with `run`, to the session's log of all runs.
    pub fn teed(session: Arc<SessionLog>, run: u64) -> CommandLog {
        CommandLog {
            entries: Mutex::default(),
            session: Some((session, run)),
        }
    }

    pub fn push(&self, c: Command) {
        if let Some((s, run)) = &self.session {
            s.push(*run, c.clone());
        }
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(c);
    }

    /// The commands so far, in issue order.
    pub fn entries(&self) -> Vec<Command> {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Takes the commands so far, leaving the log empty.
    pub fn take(&self) -> Vec<Command> {
        std::mem::take(&mut *self.entries.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The commands of every run of a session, in the order they were issued across threads, each
/// with its run's number: runs on several threads at once are checked together from it (each run
/// its own host thread, ordered with the others only through the shared pools and caches).
#[derive(Debug, Default)]
pub struct SessionLog {
    entries: Mutex<Vec<(u64, Command)>>,
}

impl SessionLog {
    pub fn push(&self, run: u64, c: Command) {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((run, c));
    }

    /// Takes the commands so far, leaving the log empty.
    pub fn take(&self) -> Vec<(u64, Command)> {
        std::mem::take(&mut *self.entries.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Where a session's runs log (when `SessionOptions::command_log` asks): each finished run's own
/// log, and the session's log of all runs as issued. Graph replays log here too.
#[derive(Debug, Default)]
pub struct LogSink {
    session: Arc<SessionLog>,
    runs: AtomicU64,
    finished: Mutex<Vec<Vec<Command>>>,
}

impl LogSink {
    /// A new run's log, teed to the session's, and the run's number.
    pub fn begin(&self) -> (Arc<CommandLog>, u64) {
        let run = self.runs.fetch_add(1, Ordering::Relaxed);
        (Arc::new(CommandLog::teed(self.session.clone(), run)), run)
    }

    /// Keeps a finished run's commands.
    pub fn end(&self, log: &CommandLog) {
        let commands = log.take();
        self.finished
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(commands);
    }

    /// The finished runs' logs so far, in the order they ended.
    pub fn take_runs(&self) -> Vec<Vec<Command>> {
        std::mem::take(&mut *self.finished.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Every run's commands so far, as issued, with the run's number.
    pub fn take_session(&self) -> Vec<(u64, Command)> {
        self.session.take()
    }
}
