//! Model check (loom, bounded preemptions) of the real run protocol (`quorum::device::protocol`,
//! the code CUDA's runs and the simulated device's run), not a model of it: two runs on two threads
//! share a device's pools and a weight cache through a fake driver whose pools are loom's locks,
//! and every interleaving loom explores must give a session log the happens-before checker passes
//! (`hb::check_session`). The broken variants are the protocol's own injected bugs: each must make
//! some interleaving's log fail the check.
#![forbid(unsafe_code)]
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use loom::sync::Mutex;
use loom::thread;
use quorum::backend::{DeviceError, Fault};
use quorum::cmdlog::{CommandLog, Range, SessionLog};
use quorum::counters::Counters;
use quorum::device::protocol::{Buffer, Driver, RunProtocol};
use quorum::mutants::{Mutant, inject};
use quorum_fuzz::hb;

/// The device's memory: free blocks of 256 bytes by address, and the next fresh address.
#[derive(Default)]
struct Pools {
    device: Mutex<Vec<u64>>,
    pinned: Mutex<Vec<u64>>,
    next: Mutex<u64>,
    events: Mutex<u64>,
}

impl Pools {
    fn take(&self, free: &Mutex<Vec<u64>>) -> u64 {
        if let Some(a) = free.lock().unwrap().pop() {
            return a;
        }
        let mut n = self.next.lock().unwrap();
        *n += 256;
        *n
    }
}

struct Mem(u64);

/// A buffer that goes back to the device pool when its last handle drops.
struct Buf {
    mem: Option<Mem>,
    pools: loom::sync::Arc<Pools>,
}

impl Buffer for Buf {
    type Mem = Mem;

    fn ptr(&self) -> u64 {
        self.mem.as_ref().map_or(0, |m| m.0)
    }

    fn bytes(&self) -> u64 {
        256
    }

    fn into_mem(mut self) -> Option<Mem> {
        self.mem.take()
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        if let Some(m) = self.mem.take() {
            self.pools.device.lock().unwrap().push(m.0);
        }
    }
}

/// Streams and events are names; every call succeeds; memory comes from the shared pools.
struct Fake {
    pools: loom::sync::Arc<Pools>,
}

impl Driver for Fake {
    type Stream = u64;
    type Event = u64;
    type Mem = Mem;
    type Buf = Buf;
    type Pinned = u64;
    type Later = ();
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

    fn mem_range(&self, m: &Mem) -> (u64, u64) {
        (m.0, 256)
    }

    fn pinned_range(&self, p: &u64) -> (u64, u64) {
        (*p, 256)
    }

    fn pinned_bytes<'p>(&self, _: &'p u64) -> &'p [u8] {
        &[]
    }

    fn take_event(&self) -> Result<u64, DeviceError> {
        let mut n = self.pools.events.lock().unwrap();
        *n += 1;
        Ok(*n)
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
        Ok(())
    }

    fn sync_event(&self, _: &u64) -> Result<(), DeviceError> {
        Ok(())
    }

    fn take_mem(&self, _: usize, _: &Counters) -> Result<Mem, DeviceError> {
        Ok(Mem(self.pools.take(&self.pools.device)))
    }

    fn give_mem(&self, m: Mem) {
        self.pools.device.lock().unwrap().push(m.0);
    }

    fn wrap(&self, m: Mem) -> Buf {
        Buf {
            mem: Some(m),
            pools: self.pools.clone(),
        }
    }

    fn fill32(&self, _: &u64, _: u64, _: u32, _: usize) -> Result<(), DeviceError> {
        Ok(())
    }

    fn take_pinned(&self, _: usize) -> Result<u64, DeviceError> {
        Ok(self.pools.take(&self.pools.pinned) | 1 << 40)
    }

    fn give_pinned(&self, p: u64) {
        self.pools.pinned.lock().unwrap().push(p & !(1 << 40));
    }

    fn upload(&self, _: &u64, _: u64, _: &u64, _: usize, _: usize) -> Result<(), DeviceError> {
        Ok(())
    }

    fn download(&self, _: &u64, _: &mut u64, _: u64, _: usize) -> Result<(), DeviceError> {
        Ok(())
    }
}

fn whole(b: &Buf) -> Range {
    Range::device(b.ptr(), 256)
}

/// One run: the weight from the cache (uploaded by whichever run comes first), an input uploaded
/// on stream 1 and read with the weight there, then handed back; on stream 0 a poisoned buffer
/// (the input's block again) that the product of stream 1 is read into behind an event, read back
/// at once and at the end. Then the run ends and returns what it had.
fn run(
    id: u64,
    pools: loom::sync::Arc<Pools>,
    cache: &Mutex<Option<Arc<Buf>>>,
    session: Arc<SessionLog>,
) -> Result<(), DeviceError> {
    let counters = Counters::default();
    let streams = vec![id * 10 + 1, id * 10 + 2];
    let p = RunProtocol::new(Fake { pools }, streams, &counters, Some(0xff));
    p.attach_log(Arc::new(CommandLog::teed(session, id)));
    p.set_stream(1);
    let w = {
        let mut c = cache.lock().unwrap();
        match &*c {
            Some(w) => w.clone(),
            None => {
                let w = p.resident(256, |_, _| Ok(()))?;
                *c = Some(w.clone());
                w
            }
        }
    };
    p.hold(&w);
    let x = p.alloc(256)?;
    p.upload(x.ptr(), 256, |_, _| {})?;
    let y = p.alloc(256)?;
    p.log_work("kernel", vec![whole(&x), whole(&w)], vec![whole(&y)]);
    p.record(1, 0)?;
    p.release(x, &[]);
    p.set_stream(0);
    let z = p.alloc(256)?;
    p.wait(0, 0)?;
    p.log_work("kernel", vec![whole(&y), whole(&w)], vec![whole(&z)]);
    p.record(0, 1)?;
    p.release(y, &[1]);
    p.download(z.ptr(), 256, |_| ())?;
    p.download_later(z.ptr(), 256, ())?;
    p.finish(|_, _, ()| Ok(()))?;
    Ok(())
}

/// Explores two concurrent runs; panics (inside loom, which reports the interleaving) when a
/// session log fails the check. Returns the interleavings explored.
fn explore() -> usize {
    let explored = Arc::new(AtomicUsize::new(0));
    let counted = explored.clone();
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(2);
    model.check(move || {
        counted.fetch_add(1, Ordering::Relaxed);
        let pools = loom::sync::Arc::new(Pools::default());
        let cache = loom::sync::Arc::new(Mutex::new(None));
        let session = Arc::new(SessionLog::default());
        let other = {
            let (pools, cache, session) = (pools.clone(), cache.clone(), session.clone());
            thread::spawn(move || run(2, pools, &cache, session).unwrap())
        };
        run(1, pools, &cache, session.clone()).unwrap();
        other.join().unwrap();
        let log = session.take();
        let r = hb::check_session(&log, 1);
        assert!(r.is_clean(), "CHECKER: {}", r.first().unwrap_or_default());
    });
    explored.load(Ordering::Relaxed)
}

#[test]
fn every_interleaving_of_two_runs_passes_the_checker_and_broken_protocols_fail_it() {
    inject(None);
    let n = explore();
    assert!(n > 100, "only {n} interleavings explored");
    eprintln!("clean: {n} interleavings of two runs, every session log clean");
    // Bugs that show across runs (a weight published before its copy is done), within a run (a
    // buffer reused without its readers' events, staging reused under its copy, a host read
    // before its copy).
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut missed = Vec::new();
    for m in [
        Mutant::WeightUnsynced,
        Mutant::EarlyRelease,
        Mutant::StagingReuse,
        Mutant::UnsyncedHostRead,
    ] {
        inject(Some(m));
        let found = catch_unwind(AssertUnwindSafe(explore));
        inject(None);
        let why = match &found {
            Ok(_) => String::new(),
            Err(e) => e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default(),
        };
        if why.contains("CHECKER: ") {
            eprintln!("MUTANT {m:?}: {why}");
        } else {
            missed.push((m, why));
        }
    }
    std::panic::set_hook(quiet);
    assert!(
        missed.is_empty(),
        "not caught by the checker in any interleaving: {missed:?}"
    );
}
