//! The happens-before checker: reads a run's command log (`quorum::cmdlog`) and reports every pair of
//! conflicting accesses — a write and a write, or a read and a write, to overlapping bytes of the
//! same memory — that no stream order, event or synchronisation puts one before the other.
//!
//! Each stream and the host keep a vector clock. Work issued to a stream starts after everything the
//! host had seen when it issued it and after the stream's earlier work; a record snapshots the
//! stream's clock into the event, a wait joins the event's clock into the stream's, and a host
//! synchronisation (on a stream or an event) joins it into the host's. Access `a` happens before
//! access `b` when `b`'s clock has reached `a`'s own tick. This is how PyTorch's CUDA sanitizer treats
//! events, applied to byte ranges; it is deterministic: a missing edge is reported whatever the timing
//! of the run that produced the log.
use std::collections::HashMap;
use std::fmt;

use quorum::cmdlog::{Agent, Command, Range};

/// Who advances a clock: a stream, or the host thread of one run (runs checked together are each
/// their own host, ordered with each other only through what they share).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Who {
    Stream(u64),
    Host(u64),
}

type Clock = HashMap<Who, u64>;

fn join(into: &mut Clock, other: &Clock) {
    for (a, &t) in other {
        let e = into.entry(*a).or_insert(0);
        if *e < t {
            *e = t;
        }
    }
}

/// One access as the checker keeps it.
#[derive(Debug, Clone)]
struct Seen {
    index: usize,
    by: Who,
    /// The agent's own tick at this access.
    tick: u64,
    clock: Clock,
    range: Range,
    write: bool,
}

impl Seen {
    /// Whether this access happens before one with clock `c`.
    fn before(&self, c: &Clock) -> bool {
        c.get(&self.by).copied().unwrap_or(0) >= self.tick
    }
}

/// A pair of unordered conflicting accesses.
#[derive(Debug, Clone, PartialEq)]
pub struct Race {
    /// Indices of the two commands in the log, the earlier first.
    pub first: usize,
    pub second: usize,
    /// Who did each (a stream's name, or the host) and what (`kernel`, `upload`, ... with the node).
    pub first_by: String,
    pub second_by: String,
    /// `write/write` or `read/write` (in the order of the two commands).
    pub kind: &'static str,
    /// The overlapping bytes.
    pub range: Range,
}

impl fmt::Display for Race {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} race on {:?} bytes {:#x}..{:#x}: command {} ({}) and command {} ({}) are not ordered",
            self.kind,
            self.range.space,
            self.range.start,
            self.range.start + self.range.len,
            self.first,
            self.first_by,
            self.second,
            self.second_by
        )
    }
}

/// An access to bytes the run had handed back (released and not allocated again): whatever the
/// timing, the bytes may already belong to someone else, or be reused by the next allocation.
#[derive(Debug, Clone, PartialEq)]
pub struct AfterRelease {
    /// The access's command, and the release's.
    pub access: usize,
    pub release: usize,
    pub by: String,
    pub range: Range,
}

impl fmt::Display for AfterRelease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "use after release on {:?} bytes {:#x}..{:#x}: command {} ({}) touches what command {} \
             released",
            self.range.space,
            self.range.start,
            self.range.start + self.range.len,
            self.access,
            self.by,
            self.release
        )
    }
}

/// A [`Command::Fresh`] expectation that the run's own writes do not meet: the bytes the work
/// after it reads were last written by someone else (a replay's input staged by the replay before,
/// say), whatever the timing.
#[derive(Debug, Clone, PartialEq)]
pub struct Stale {
    /// The expectation's command and what it names.
    pub index: usize,
    pub what: String,
    /// The first bytes of the range that no write of the run covers.
    pub range: Range,
}

impl fmt::Display for Stale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stale read of {:?} bytes {:#x}..{:#x}: command {} expects {} written by this run, and \
             nothing of the run wrote them",
            self.range.space,
            self.range.start,
            self.range.start + self.range.len,
            self.index,
            self.what
        )
    }
}

/// The first part of `want` that `writes` (in any order, overlapping or not) leave uncovered.
fn uncovered(want: &Range, writes: &[Range]) -> Option<Range> {
    let mut parts: Vec<(u64, u64)> = writes
        .iter()
        .filter(|w| w.overlaps(want))
        .map(|w| (w.start, w.start.saturating_add(w.len)))
        .collect();
    parts.sort_unstable();
    let end = want.start.saturating_add(want.len);
    let mut at = want.start;
    let mut hole_end = end;
    for (s, e) in parts {
        if s > at {
            hole_end = s.min(end);
            break;
        }
        at = at.max(e);
    }
    (at < end).then(|| Range {
        space: want.space,
        start: at,
        len: hole_end - at,
    })
}

/// What the checker found in one log.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub races: Vec<Race>,
    /// Expectations of bytes written by the run itself that its writes do not meet.
    pub stale: Vec<Stale>,
    /// Accesses to released bytes (at most `max_races` of them listed, like races).
    pub after_release: Vec<AfterRelease>,
    /// Waits on events never recorded (a no-op on the device, almost surely a bug).
    pub unrecorded_waits: Vec<usize>,
    pub accesses: usize,
}

impl Report {
    /// The first thing found, in words (a race, an access after release, a wait on nothing).
    pub fn first(&self) -> Option<String> {
        self.races
            .first()
            .map(|r| r.to_string())
            .or_else(|| self.after_release.first().map(|a| a.to_string()))
            .or_else(|| self.stale.first().map(|a| a.to_string()))
            .or_else(|| {
                self.unrecorded_waits
                    .first()
                    .map(|i| format!("command {i} waits on an event never recorded"))
            })
    }

    pub fn is_clean(&self) -> bool {
        self.races.is_empty()
            && self.unrecorded_waits.is_empty()
            && self.after_release.is_empty()
            && self.stale.is_empty()
    }
}

fn describe(c: &Command) -> String {
    match c {
        Command::Access { by, what, node, .. } => {
            let who = match by {
                Agent::Stream(s) => format!("stream {s}"),
                Agent::Host => "host".into(),
            };
            if node.is_empty() {
                format!("{what} on {who}")
            } else {
                format!("{what} of node '{node}' on {who}")
            }
        }
        other => format!("{other:?}"),
    }
}

/// Checks one run's commands. At most `max_races` races are listed (all are counted by the caller
/// if it asks for more).
pub fn check(log: &[Command], max_races: usize) -> Report {
    let tagged: Vec<(u64, &Command)> = log.iter().map(|c| (0, c)).collect();
    check_tagged(&tagged, max_races)
}

/// Checks the logs of runs one after the other as one log, each run its own host: a later run is
/// ordered after an earlier one only through what it takes from the pools and caches the earlier
/// one returned to or published in (as if the runs had been on threads of their own).
pub fn check_runs(runs: &[Vec<Command>], max_races: usize) -> Report {
    let tagged: Vec<(u64, &Command)> = runs
        .iter()
        .enumerate()
        .flat_map(|(i, log)| log.iter().map(move |c| (i as u64, c)))
        .collect();
    check_tagged(&tagged, max_races)
}

/// Checks a session's log of runs on several threads at once (`quorum::cmdlog::SessionLog`): each
/// command with its run's number, in the order they were issued. Indices in the report are
/// positions in this log.
pub fn check_session(log: &[(u64, Command)], max_races: usize) -> Report {
    let tagged: Vec<(u64, &Command)> = log.iter().map(|(r, c)| (*r, c)).collect();
    check_tagged(&tagged, max_races)
}

fn check_tagged(log: &[(u64, &Command)], max_races: usize) -> Report {
    let mut clocks: HashMap<Who, Clock> = HashMap::new();
    let mut events: HashMap<u64, Clock> = HashMap::new();
    let mut seen: Vec<Seen> = Vec::new();
    // Released ranges not allocated since, with the release's index.
    let mut released: Vec<(Range, usize)> = Vec::new();
    // What a host had seen when it returned or published bytes: a host that takes any of them
    // later joins it.
    let mut shared: HashMap<Range, Clock> = HashMap::new();
    // Every range each run's own work wrote so far (for `Fresh`).
    let mut written: HashMap<u64, Vec<Range>> = HashMap::new();
    let mut report = Report::default();
    for (index, &(run, c)) in log.iter().enumerate() {
        let host = Who::Host(run);
        // Returned or published: what the host has seen, the return itself included, is what a
        // later taker follows (stored once the command is processed below).
        let shares = match c {
            Command::Return { range } | Command::Publish { range } => Some(*range),
            Command::Take { range } => {
                // Taken, the bytes are the taker's (a graph keeps what its run released).
                released.retain(|(r, _)| !r.overlaps(range));
                // Memory freed and allocated again may come back at an overlapping address.
                let from: Vec<Clock> = shared
                    .iter()
                    .filter(|(r, _)| r.overlaps(range))
                    .map(|(_, c)| c.clone())
                    .collect();
                let h = clocks.entry(host).or_default();
                for c in &from {
                    join(h, c);
                }
                continue;
            }
            _ => None,
        };
        // A return to a shared pool is the host taking the bytes back: a host write, which every
        // access to them must happen before.
        let returned;
        let c = match c {
            Command::Return { range } => {
                // Released bytes go back to the pool here: no longer the run's to touch.
                released.retain(|(r, _)| !r.overlaps(range));
                returned = Command::Access {
                    by: Agent::Host,
                    what: "return to the shared pool".into(),
                    node: String::new(),
                    reads: vec![],
                    writes: vec![*range],
                };
                &returned
            }
            c => c,
        };
        match c {
            Command::Access {
                by, reads, writes, ..
            } => {
                if matches!(log[index].1, Command::Access { .. }) {
                    written
                        .entry(run)
                        .or_default()
                        .extend(writes.iter().copied());
                }
                let by = match by {
                    Agent::Stream(s) => Who::Stream(*s),
                    Agent::Host => host,
                };
                let host_clock = clocks.get(&host).cloned().unwrap_or_default();
                let clock = clocks.entry(by).or_default();
                join(clock, &host_clock);
                let tick = clock.get(&by).copied().unwrap_or(0) + 1;
                clock.insert(by, tick);
                let clock = clock.clone();
                let mine = reads
                    .iter()
                    .map(|r| (r, false))
                    .chain(writes.iter().map(|r| (r, true)));
                for (range, write) in mine {
                    report.accesses += 1;
                    if let Some((r, release)) = released.iter().find(|(r, _)| r.overlaps(range))
                        && report.after_release.len() < max_races
                    {
                        let start = r.start.max(range.start);
                        let end = (r.start + r.len).min(range.start + range.len);
                        report.after_release.push(AfterRelease {
                            access: index,
                            release: *release,
                            by: describe(c),
                            range: Range {
                                space: range.space,
                                start,
                                len: end - start,
                            },
                        });
                    }
                    for s in &seen {
                        if !(write || s.write) || !s.range.overlaps(range) || s.before(&clock) {
                            continue;
                        }
                        if report.races.len() < max_races {
                            let start = s.range.start.max(range.start);
                            let end = (s.range.start + s.range.len).min(range.start + range.len);
                            report.races.push(Race {
                                first: s.index,
                                second: index,
                                first_by: describe(log[s.index].1),
                                second_by: describe(c),
                                kind: if write && s.write {
                                    "write/write"
                                } else {
                                    "read/write"
                                },
                                range: Range {
                                    space: range.space,
                                    start,
                                    len: end - start,
                                },
                            });
                        }
                    }
                    seen.push(Seen {
                        index,
                        by,
                        tick,
                        clock: clock.clone(),
                        range: *range,
                        write,
                    });
                }
            }
            Command::Record { stream, event } => {
                let host_clock = clocks.get(&host).cloned().unwrap_or_default();
                let clock = clocks.entry(Who::Stream(*stream)).or_default();
                join(clock, &host_clock);
                events.insert(*event, clock.clone());
            }
            Command::Wait { stream, event } => {
                let host_clock = clocks.get(&host).cloned().unwrap_or_default();
                let Some(ev) = events.get(event).cloned() else {
                    report.unrecorded_waits.push(index);
                    continue;
                };
                let clock = clocks.entry(Who::Stream(*stream)).or_default();
                join(clock, &host_clock);
                join(clock, &ev);
            }
            Command::SyncStream { stream } => {
                let s = clocks
                    .get(&Who::Stream(*stream))
                    .cloned()
                    .unwrap_or_default();
                join(clocks.entry(host).or_default(), &s);
            }
            Command::SyncEvent { event } => {
                if let Some(ev) = events.get(event).cloned() {
                    join(clocks.entry(host).or_default(), &ev);
                }
            }
            // Reuse of a range is judged by the accesses before and after it (a race when they
            // are not ordered); touching it between its release and its next allocation is a bug
            // whatever the order.
            Command::Release { range } => released.push((*range, index)),
            Command::Alloc { range, .. } => released.retain(|(r, _)| !r.overlaps(range)),
            Command::Fresh { range, what } => {
                let mine = written.get(&run).map_or(&[][..], Vec::as_slice);
                if let Some(hole) = uncovered(range, mine)
                    && report.stale.len() < max_races
                {
                    report.stale.push(Stale {
                        index,
                        what: what.clone(),
                        range: hole,
                    });
                }
            }
            // Handled above.
            Command::Return { .. } | Command::Publish { .. } | Command::Take { .. } => {}
        }
        if let Some(key) = shares {
            let h = clocks.get(&host).cloned().unwrap_or_default();
            join(shared.entry(key).or_default(), &h);
        }
    }
    // Keep the unused field honest: a seen access's clock is what `before` compares against.
    debug_assert!(seen.iter().all(|s| s.clock.get(&s.by) == Some(&s.tick)));
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorum::cmdlog::Range;

    fn kernel(stream: u64, reads: &[u64], writes: &[u64]) -> Command {
        Command::Access {
            by: Agent::Stream(stream),
            what: "kernel".into(),
            node: format!("k{stream}"),
            reads: reads.iter().map(|&a| Range::device(a, 256)).collect(),
            writes: writes.iter().map(|&a| Range::device(a, 256)).collect(),
        }
    }

    #[test]
    fn a_cross_stream_read_needs_an_event() {
        // Stream 1 writes A; stream 2 reads it.
        let racy = vec![kernel(1, &[], &[0x1000]), kernel(2, &[0x1000], &[0x2000])];
        let r = check(&racy, 10);
        assert_eq!(r.races.len(), 1, "{r:?}");
        assert_eq!(r.races[0].kind, "read/write");
        let ordered = vec![
            kernel(1, &[], &[0x1000]),
            Command::Record {
                stream: 1,
                event: 9,
            },
            Command::Wait {
                stream: 2,
                event: 9,
            },
            kernel(2, &[0x1000], &[0x2000]),
        ];
        assert!(check(&ordered, 10).is_clean());
        // A record issued before the write does not cover it.
        let early = vec![
            Command::Record {
                stream: 1,
                event: 9,
            },
            kernel(1, &[], &[0x1000]),
            Command::Wait {
                stream: 2,
                event: 9,
            },
            kernel(2, &[0x1000], &[0x2000]),
        ];
        assert_eq!(check(&early, 10).races.len(), 1);
    }

    #[test]
    fn a_return_to_the_pool_needs_the_host_to_have_waited() {
        let upload = Command::Access {
            by: Agent::Stream(1),
            what: "upload".into(),
            node: "x".into(),
            reads: vec![Range::pinned(0x100, 64)],
            writes: vec![Range::device(0x1000, 64)],
        };
        let back = Command::Return {
            range: Range::pinned(0x100, 256),
        };
        // Handed back while the copy may still read it.
        let r = check(&[upload.clone(), back.clone()], 10);
        assert_eq!(r.races.len(), 1, "{r:?}");
        assert!(
            r.first()
                .unwrap()
                .contains("return to the shared pool on host")
        );
        // After the host waited for the stream.
        let synced = vec![upload, Command::SyncStream { stream: 1 }, back];
        assert!(check(&synced, 10).is_clean());
        // A released range returned to the pool is not a use after release.
        let released = vec![
            kernel(1, &[], &[0x1000]),
            Command::Release {
                range: Range::device(0x1000, 256),
            },
            Command::SyncStream { stream: 1 },
            Command::Return {
                range: Range::device(0x1000, 256),
            },
        ];
        assert!(check(&released, 10).is_clean());
    }

    #[test]
    fn runs_are_ordered_only_through_what_they_take() {
        let w = Range::device(0x8000, 256);
        let upload = Command::Access {
            by: Agent::Stream(1),
            what: "weight upload".into(),
            node: "w".into(),
            reads: vec![],
            writes: vec![w],
        };
        let read = kernel(2, &[0x8000], &[0x9000]);
        let take = Command::Take { range: w };
        let publish = Command::Publish { range: w };
        // Published after the host waited for the copy: the other run's read follows it.
        let synced = vec![
            vec![
                upload.clone(),
                Command::SyncStream { stream: 1 },
                publish.clone(),
            ],
            vec![take.clone(), read.clone()],
        ];
        assert!(check_runs(&synced, 10).is_clean());
        // Published without waiting: the other run's read races with the copy.
        let unsynced = vec![
            vec![upload.clone(), publish.clone()],
            vec![take.clone(), read.clone()],
        ];
        assert_eq!(check_runs(&unsynced, 10).races.len(), 1);
        // A run that reads the weight without taking it from the cache follows nothing.
        let untaken = vec![
            vec![upload, Command::SyncStream { stream: 1 }, publish],
            vec![read],
        ];
        assert_eq!(check_runs(&untaken, 10).races.len(), 1);
        // A session's log: the same, tagged by run.
        let tagged: Vec<(u64, Command)> = unsynced
            .iter()
            .enumerate()
            .flat_map(|(r, l)| l.iter().map(move |c| (r as u64, c.clone())))
            .collect();
        assert_eq!(check_session(&tagged, 10).races.len(), 1);
    }

    #[test]
    fn same_stream_work_is_ordered_and_reads_never_conflict() {
        let log = vec![
            kernel(1, &[], &[0x1000]),
            kernel(1, &[0x1000], &[0x1000]),
            kernel(2, &[0x3000], &[0x2000]),
            kernel(1, &[0x3000], &[0x4000]),
        ];
        assert!(check(&log, 10).is_clean());
    }

    #[test]
    fn reuse_after_release_on_another_stream_needs_the_readers_events() {
        // Stream 1 reads B, B is released and reused by stream 2's write.
        let racy = vec![
            kernel(1, &[0x5000], &[0x1000]),
            Command::Release {
                range: Range::device(0x5000, 256),
            },
            Command::Alloc {
                range: Range::device(0x5000, 256),
                stream: 2,
            },
            kernel(2, &[], &[0x5000]),
        ];
        assert_eq!(check(&racy, 10).races[0].kind, "read/write");
        let mut ordered = racy.clone();
        ordered.insert(
            1,
            Command::Record {
                stream: 1,
                event: 3,
            },
        );
        ordered.insert(
            4,
            Command::Wait {
                stream: 2,
                event: 3,
            },
        );
        assert!(check(&ordered, 10).is_clean(), "{:?}", check(&ordered, 10));
    }

    #[test]
    fn the_host_reads_only_after_a_synchronisation() {
        let copy = Command::Access {
            by: Agent::Stream(1),
            what: "download".into(),
            node: "y".into(),
            reads: vec![Range::device(0x1000, 256)],
            writes: vec![Range::pinned(0x9000, 256)],
        };
        let read = Command::Access {
            by: Agent::Host,
            what: "read".into(),
            node: "y".into(),
            reads: vec![Range::pinned(0x9000, 256)],
            writes: vec![],
        };
        assert_eq!(check(&[copy.clone(), read.clone()], 10).races.len(), 1);
        let synced = [
            copy.clone(),
            Command::SyncStream { stream: 1 },
            read.clone(),
        ];
        assert!(check(&synced, 10).is_clean());
        let by_event = [
            copy,
            Command::Record {
                stream: 1,
                event: 4,
            },
            Command::SyncEvent { event: 4 },
            read,
        ];
        assert!(check(&by_event, 10).is_clean());
    }

    #[test]
    fn work_issued_after_a_host_sync_follows_what_the_host_saw() {
        // Stream 1 writes; the host syncs stream 1; stream 2 (no event) then writes the same bytes.
        let log = vec![
            kernel(1, &[], &[0x1000]),
            Command::SyncStream { stream: 1 },
            kernel(2, &[], &[0x1000]),
        ];
        assert!(check(&log, 10).is_clean());
        // Other memory spaces never conflict.
        let spaces = vec![
            Command::Access {
                by: Agent::Stream(1),
                what: "k".into(),
                node: "a".into(),
                reads: vec![],
                writes: vec![Range::device(0x1000, 256)],
            },
            Command::Access {
                by: Agent::Stream(2),
                what: "k".into(),
                node: "b".into(),
                reads: vec![],
                writes: vec![Range::pinned(0x1000, 256)],
            },
        ];
        assert!(check(&spaces, 10).is_clean());
    }

    /// A split-K GEMM whose workspace is released one launch early: the reduction reads bytes the
    /// run had handed back. Reported whatever the streams (here all on one, so no race); the same log
    /// with the release after the reduction, or with the range allocated again before the read, is
    /// clean.
    #[test]
    fn touching_released_bytes_is_reported() {
        let ws = Range::device(0x8000, 256);
        let partials = kernel(1, &[0x1000], &[0x8000]);
        let reduce = kernel(1, &[0x8000], &[0x2000]);
        let release = Command::Release { range: ws };
        let early = vec![partials.clone(), release.clone(), reduce.clone()];
        let r = check(&early, 10);
        assert!(r.races.is_empty(), "{r:?}");
        assert_eq!(r.after_release.len(), 1, "{r:?}");
        assert_eq!(
            (r.after_release[0].access, r.after_release[0].release),
            (2, 1)
        );
        assert!(!r.is_clean());
        assert!(r.after_release[0].to_string().contains("use after release"));
        let right = vec![partials.clone(), reduce.clone(), release.clone()];
        assert!(check(&right, 10).is_clean());
        let reused = vec![
            partials,
            release,
            Command::Alloc {
                range: ws,
                stream: 1,
            },
            reduce,
        ];
        assert!(check(&reused, 10).is_clean());
    }

    #[test]
    fn a_wait_on_an_unrecorded_event_is_reported() {
        let log = vec![Command::Wait {
            stream: 2,
            event: 77,
        }];
        assert_eq!(check(&log, 10).unrecorded_waits, vec![0]);
    }

    #[test]
    fn fresh_bytes_must_be_written_by_the_run_itself() {
        let staging = Range::pinned(0x1000, 64);
        let stage = |start: u64, len: u64| Command::Access {
            by: Agent::Host,
            what: "stage".into(),
            node: String::new(),
            reads: vec![],
            writes: vec![Range::pinned(start, len)],
        };
        let fresh = Command::Fresh {
            range: staging,
            what: "input 0".into(),
        };
        // Written in two pieces by this run: met.
        let ok = vec![stage(0x1020, 32), stage(0x1000, 32), fresh.clone()];
        assert!(check(&ok, 10).is_clean());
        // Half written: the hole is named.
        let half = check(&[stage(0x1000, 32), fresh.clone()], 10);
        assert_eq!(half.stale.len(), 1);
        assert_eq!(half.stale[0].range, Range::pinned(0x1020, 32));
        assert!(half.first().unwrap().contains("input 0"), "{half:?}");
        // A gap in the middle is the first hole.
        let gap = check(&[stage(0x1000, 16), stage(0x1030, 16), fresh.clone()], 10);
        assert_eq!(gap.stale[0].range, Range::pinned(0x1010, 32));
        // Written by an earlier run (the replay before): stale, however ordered.
        let runs = vec![vec![stage(0x1000, 64)], vec![fresh.clone()]];
        assert_eq!(check_runs(&runs, 10).stale.len(), 1);
        // Written after the expectation: stale too.
        assert_eq!(check(&[fresh, stage(0x1000, 64)], 10).stale.len(), 1);
    }
}
