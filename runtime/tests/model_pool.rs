//! Model check (loom, bounded preemptions) of the host-side bookkeeping around device memory and
//! streams: the shared pool's free lists (`quorum::freelist::FreeLists`, the code both accelerators'
//! pools run), and a model of the protocol the CUDA run keeps around them: a block goes back to the
//! shared pool only after every stream of its run has finished; a block freed mid-run is reused
//! by another stream of the same run only after the event recorded behind its last reader; a stream
//! goes back to the device's list only after it has been synchronised.
//!
//! Streams are modelled as threads that run their queued work, the device as a per-block count of
//! operations in flight: a write that finds another operation on its block is the race the
//! protocol exists to prevent. loom explores every interleaving up to the preemption bound. Each
//! rule has a broken variant (the same model with the rule dropped) that the check must catch.
use std::panic::{AssertUnwindSafe, catch_unwind};

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use loom::sync::{Arc, Mutex};
use loom::thread;
use quorum::freelist::{Block, FreeLists};

#[derive(Debug)]
struct Blk {
    id: usize,
    bytes: usize,
}

impl Block for Blk {
    fn bytes(&self) -> usize {
        self.bytes
    }
}

/// The device: for each block (and each stream), how many operations touch it now.
struct Device {
    busy: Vec<AtomicUsize>,
    next_id: AtomicUsize,
}

impl Device {
    fn new(n: usize) -> Arc<Device> {
        Arc::new(Device {
            busy: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            next_id: AtomicUsize::new(0),
        })
    }

    /// A kernel that writes `id`: nothing else may touch it meanwhile.
    fn write(&self, id: usize) {
        let before = self.busy[id].fetch_add(1, SeqCst);
        assert_eq!(
            before, 0,
            "block {id} written while another operation touches it"
        );
        thread::yield_now();
        self.busy[id].fetch_sub(1, SeqCst);
    }

    /// A kernel that reads `id` (a write may not overlap it; the write's check sees the count).
    fn read(&self, id: usize) {
        self.busy[id].fetch_add(1, SeqCst);
        thread::yield_now();
        self.busy[id].fetch_sub(1, SeqCst);
    }
}

/// Which rule the model keeps (everything but the one named is kept).
#[derive(Clone, Copy, PartialEq, Debug)]
enum Rule {
    All,
    /// A run hands its blocks back before synchronising its streams.
    GiveBeforeSync,
    /// A block freed mid-run is reused on another stream without waiting for its release event.
    NoReleaseWait,
    /// A stream goes back to the device's list before it is synchronised.
    StreamBackBeforeSync,
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// Two concurrent runs, each taking one block from the shared pool (the real free lists, under a
/// lock), writing it on its stream, and handing it back.
fn shared_pool(rule: Rule) {
    model(move || {
        let dev = Device::new(2);
        let pool = Arc::new(Mutex::new(FreeLists::<Blk>::default()));
        let runs: Vec<_> = (0..2)
            .map(|_| {
                let (dev, pool) = (dev.clone(), pool.clone());
                thread::spawn(move || {
                    let (blk, _) = pool
                        .lock()
                        .unwrap()
                        .take(
                            256,
                            1 << 20,
                            |bytes| {
                                let id = dev.next_id.fetch_add(1, SeqCst);
                                Ok::<_, ()>(Blk { id, bytes })
                            },
                            drop,
                        )
                        .unwrap();
                    let id = blk.id;
                    let stream = {
                        let dev = dev.clone();
                        thread::spawn(move || dev.write(id))
                    };
                    if rule == Rule::GiveBeforeSync {
                        pool.lock().unwrap().give(blk);
                        stream.join().unwrap();
                    } else {
                        stream.join().unwrap();
                        pool.lock().unwrap().give(blk);
                    }
                })
            })
            .collect();
        for r in runs {
            r.join().unwrap();
        }
        let p = pool.lock().unwrap();
        assert_eq!(p.held(), p.cached(), "every block is back and counted once");
    });
}

/// One run on two streams: stream A reads block 0 and records the release event; the host, having
/// enqueued that read, parks the block; the next allocation, for stream B, reuses it and must make
/// B wait for the event before B writes.
fn release_event(rule: Rule) {
    model(move || {
        let dev = Device::new(1);
        let event = Arc::new(AtomicBool::new(false));
        let parked = Arc::new(Mutex::new(FreeLists::<Blk>::default()));
        let a = {
            let (dev, event) = (dev.clone(), event.clone());
            thread::spawn(move || {
                dev.read(0);
                event.store(true, SeqCst);
            })
        };
        // The host hands the block back right after enqueuing A's read (not after it ran).
        parked.lock().unwrap().give(Blk { id: 0, bytes: 256 });
        let (blk, hit) = parked
            .lock()
            .unwrap()
            .take(256, 1 << 20, |_| Err(()), drop)
            .unwrap();
        assert!(hit);
        let wait = rule != Rule::NoReleaseWait;
        let b = {
            let (dev, event) = (dev.clone(), event.clone());
            thread::spawn(move || {
                if wait {
                    while !event.load(SeqCst) {
                        thread::yield_now();
                    }
                }
                dev.write(blk.id);
            })
        };
        a.join().unwrap();
        b.join().unwrap();
    });
}

/// Two runs taking a stream each from the device's list, one after the other: a stream handed
/// back must hold no queued work (its run synchronised it first).
fn stream_handout(rule: Rule) {
    model(move || {
        let dev = Device::new(1);
        let streams = Arc::new(Mutex::new(vec![0usize]));
        let runs: Vec<_> = (0..2)
            .map(|_| {
                let (dev, streams) = (dev.clone(), streams.clone());
                thread::spawn(move || {
                    let Some(s) = streams.lock().unwrap().pop() else {
                        // No free stream: this run creates its own (not modelled further).
                        return;
                    };
                    let work = {
                        let dev = dev.clone();
                        thread::spawn(move || dev.write(s))
                    };
                    if rule == Rule::StreamBackBeforeSync {
                        streams.lock().unwrap().push(s);
                        work.join().unwrap();
                    } else {
                        work.join().unwrap();
                        streams.lock().unwrap().push(s);
                    }
                })
            })
            .collect();
        for r in runs {
            r.join().unwrap();
        }
    });
}

/// Whether the model check reports a violation for `f(rule)`.
fn caught(f: fn(Rule), rule: Rule) -> bool {
    catch_unwind(AssertUnwindSafe(|| f(rule))).is_err()
}

#[test]
fn shared_pool_reuse_waits_for_the_runs_streams() {
    shared_pool(Rule::All);
    assert!(
        caught(shared_pool, Rule::GiveBeforeSync),
        "a block handed back before its run synchronised must be caught"
    );
}

#[test]
fn reuse_on_another_stream_waits_for_the_release_event() {
    release_event(Rule::All);
    assert!(
        caught(release_event, Rule::NoReleaseWait),
        "a reuse without the release event's wait must be caught"
    );
}

#[test]
fn streams_go_back_only_after_synchronisation() {
    stream_handout(Rule::All);
    assert!(
        caught(stream_handout, Rule::StreamBackBeforeSync),
        "a stream handed back with work queued must be caught"
    );
}
