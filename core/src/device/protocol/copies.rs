//! The run protocol's copies: staging uploads, read-backs now and at the end of the run, device
//! checks and the run's synchronisation (see the parent module for the rules).
use crate::cmdlog::{Agent, Command, Range};
use crate::counters::Counters;
use crate::mutants::{self, Mutant};

use super::{Check, Driver, Fault, Later, RunProtocol, raised};

impl<D: Driver> RunProtocol<'_, D> {
    // ---- copies -----------------------------------------------------------------------------

    /// Copies `n` bytes that `fill` writes into pinned staging to device address `dst` on the
    /// current stream: `fill(staging, range)` writes bytes `range` of the value at the same offsets
    /// of the staging. Outside a capture a large upload goes in pieces
    /// ([`Driver::upload_piece`]): each piece's copy is issued once it is staged, so the host
    /// stages the next while the bus carries it. The staging stays with the run (the copies may
    /// still read it) until its streams are done.
    pub fn upload(
        &self,
        dst: u64,
        n: usize,
        mut fill: impl FnMut(&mut D::Pinned, std::ops::Range<usize>),
    ) -> Result<(), D::Error> {
        if n == 0 {
            if let Some(c) = self.capture.borrow_mut().as_mut() {
                c.uploads.push(None);
            }
            return Ok(());
        }
        let mut pinned = self.take_pinned_logged(n)?;
        let piece = match self.driver.upload_piece() {
            Some(p) if p > 0 && !self.capturing() => p,
            _ => n,
        };
        let base = self.driver.pinned_range(&pinned).0;
        let mut at = 0;
        while at < n {
            let len = piece.min(n - at);
            let staged = Range::pinned(base + at as u64, len as u64);
            let late = mutants::active(Mutant::PieceCopiedBeforeStaged) && piece < n;
            if !late {
                Counters::time(&self.counters.stage_nanos, || {
                    fill(&mut pinned, at..at + len)
                });
                self.log_access(Agent::Host, "stage", vec![], vec![staged]);
            }
            if let Err(e) = self
                .driver
                .upload(self.stream(), dst + at as u64, &pinned, at, len)
            {
                self.staging.borrow_mut().push(pinned);
                return Err(e);
            }
            self.log_work(
                "upload",
                vec![staged],
                vec![Range::device(dst + at as u64, len as u64)],
            );
            if late {
                fill(&mut pinned, at..at + len);
                self.log_access(Agent::Host, "stage", vec![], vec![staged]);
            }
            Counters::bump(&self.counters.h2d_calls, 1);
            at += len;
        }
        Counters::bump(&self.counters.h2d_bytes, n as u64);
        if mutants::active(Mutant::StagingReuse) && self.capture.borrow().is_none() {
            // Back to the pool while the copy may still read it.
            self.give_pinned_logged(pinned);
            return Ok(());
        }
        let mut staging = self.staging.borrow_mut();
        staging.push(pinned);
        if let Some(c) = self.capture.borrow_mut().as_mut() {
            c.uploads.push(Some((staging.len() - 1, n)));
        }
        Ok(())
    }

    /// Copies `src`, host memory its owner page-locked in place, to device address `dst` on the
    /// current stream, with no staging. Not while capturing (a graph would copy from the
    /// caller's memory at every replay).
    pub fn upload_host(&self, dst: u64, src: &[u8]) -> Result<(), D::Error> {
        self.not_capturing("an upload from the caller's page-locked memory")?;
        if src.is_empty() {
            return Ok(());
        }
        let n = src.len() as u64;
        self.driver.upload_host(self.stream(), dst, src)?;
        self.log_work(
            "upload",
            vec![Range::pinned(src.as_ptr() as u64, n)],
            vec![Range::device(dst, n)],
        );
        Counters::bump(&self.counters.h2d_bytes, n);
        Counters::bump(&self.counters.h2d_calls, 1);
        Ok(())
    }

    /// Starts copying `n` bytes at device address `src` into host memory at `dst` that its owner
    /// page-locked in place, after the work before it on the current stream (wait for it with
    /// [`RunProtocol::wait_current`]).
    ///
    /// # Safety
    /// `[dst, dst + n)` is live memory that nothing else reads or writes until the copy is done.
    pub unsafe fn download_host(&self, src: u64, dst: u64, n: usize) -> Result<(), D::Error> {
        self.not_capturing("a copy into the caller's page-locked memory")?;
        if n == 0 {
            return Ok(());
        }
        // SAFETY: the caller's contract.
        unsafe { self.driver.download_host(self.stream(), dst, src, n)? };
        self.log_work(
            "download",
            vec![Range::device(src, n as u64)],
            vec![Range::pinned(dst, n as u64)],
        );
        Counters::bump(&self.counters.d2h_bytes, n as u64);
        Counters::bump(&self.counters.d2h_calls, 1);
        Ok(())
    }

    /// Waits for the work issued so far on the current stream (an event recorded there; the host
    /// blocks on it alone).
    pub fn wait_current(&self) -> Result<(), D::Error> {
        self.not_capturing("a wait for the device")?;
        let done = self.driver.take_event()?;
        let waited = self.record_logged(&done, self.stream()).and_then(|_| {
            Counters::time(&self.counters.wait_nanos, || self.driver.sync_event(&done))
        });
        if waited.is_ok() {
            self.push(Command::SyncEvent {
                event: self.driver.event_id(&done),
            });
        }
        self.driver.give_event(done);
        waited
    }

    /// Copies `n` bytes from device address `src` back after the work before it on the current
    /// stream, waits for that copy alone, and gives `read` the pinned bytes.
    pub fn download<T>(
        &self,
        src: u64,
        n: usize,
        read: impl FnOnce(&D::Pinned) -> T,
    ) -> Result<T, D::Error> {
        self.not_capturing("a host read of a device value")?;
        let pinned = self.copy_back(src, n)?;
        if n > 0 {
            let staged = Range::pinned(self.driver.pinned_range(&pinned).0, n as u64);
            if !mutants::active(Mutant::UnsyncedHostRead) {
                let done = match self.driver.take_event() {
                    Ok(e) => e,
                    Err(e) => {
                        // The copy is in flight: the staging stays with the run.
                        self.staging.borrow_mut().push(pinned);
                        return Err(e);
                    }
                };
                let waited = self.record_logged(&done, self.stream()).and_then(|_| {
                    Counters::time(&self.counters.wait_nanos, || self.driver.sync_event(&done))
                });
                if let Err(e) = waited {
                    // The copy may still write the staging: it stays with the run.
                    self.staging.borrow_mut().push(pinned);
                    self.driver.give_event(done);
                    return Err(e);
                }
                self.push(Command::SyncEvent {
                    event: self.driver.event_id(&done),
                });
                self.driver.give_event(done);
            }
            self.log_access(Agent::Host, "read", vec![staged], vec![]);
        }
        let out = Counters::time(&self.counters.readback_nanos, || read(&pinned));
        self.give_pinned_logged(pinned);
        Ok(out)
    }

    /// Pinned staging with a copy of `n` bytes at `src` issued into it on the current stream
    /// (nothing copied for 0 bytes). On a failed copy the staging stays with the run.
    fn copy_back(&self, src: u64, n: usize) -> Result<D::Pinned, D::Error> {
        let mut pinned = self.take_pinned_logged(n.max(1))?;
        if n > 0 {
            if let Err(e) = self.driver.download(self.stream(), &mut pinned, src, n) {
                self.staging.borrow_mut().push(pinned);
                return Err(e);
            }
            let staged = Range::pinned(self.driver.pinned_range(&pinned).0, n as u64);
            self.log_work("download", vec![Range::device(src, n as u64)], vec![staged]);
            Counters::bump(&self.counters.d2h_bytes, n as u64);
            Counters::bump(&self.counters.d2h_calls, 1);
        }
        Ok(pinned)
    }

    /// Staging from the shared pool: taken in the log.
    fn take_pinned_logged(&self, n: usize) -> Result<D::Pinned, D::Error> {
        let pinned = self.driver.take_pinned(n)?;
        let (ptr, len) = self.driver.pinned_range(&pinned);
        self.push(Command::Take {
            range: Range::pinned(ptr, len),
        });
        Ok(pinned)
    }

    /// Gives staging back to the shared pool: a host access to all of it in the log.
    pub(super) fn give_pinned_logged(&self, pinned: D::Pinned) {
        let (ptr, len) = self.driver.pinned_range(&pinned);
        self.push(Command::Return {
            range: Range::pinned(ptr, len),
        });
        self.driver.give_pinned(pinned);
    }

    /// Starts copying `n` bytes at `src` back on the current stream; [`RunProtocol::finish`]
    /// collects it with `what`. Returns its index among the run's outputs.
    pub fn download_later(&self, src: u64, n: usize, what: D::Later) -> Result<usize, D::Error> {
        let pinned = self.copy_back(src, n)?;
        let mut later = self.later.borrow_mut();
        later.push(Later {
            pinned,
            bytes: n,
            what,
        });
        Ok(later.len() - 1)
    }

    /// Copies the 4-byte flag word at `word` back after the work before it on the current stream;
    /// when the run's work is collected a raised word becomes `fault`, the run's error.
    pub fn check(&self, word: u64, fault: Fault) -> Result<(), D::Error> {
        let pinned = self.copy_back(word, 4)?;
        self.checks.borrow_mut().push(Check { pinned, fault });
        Ok(())
    }

    /// Waits for every stream of the run.
    pub fn synchronize(&self) -> Result<(), D::Error> {
        self.not_capturing("a synchronisation")?;
        for s in &self.streams {
            self.driver.sync_stream(s)?;
            self.push(Command::SyncStream {
                stream: self.driver.stream_id(s),
            });
        }
        Ok(())
    }

    /// Waits for every stream once; then the first raised check is the error, else `read` turns
    /// each [`RunProtocol::download_later`] copy into an output, in order.
    pub fn finish<T>(
        &self,
        mut read: impl FnMut(&D::Pinned, usize, D::Later) -> Result<T, D::Error>,
    ) -> Result<Vec<T>, D::Error> {
        Counters::time(&self.counters.wait_nanos, || self.synchronize())?;
        let checks = std::mem::take(&mut *self.checks.borrow_mut());
        let fault = raised(&self.driver, &checks);
        for c in checks {
            self.give_pinned_logged(c.pinned);
        }
        if let Some(f) = fault {
            return Err(D::fault(f));
        }
        let mut out = Vec::new();
        let later = std::mem::take(&mut *self.later.borrow_mut());
        for l in later {
            let range = Range::pinned(self.driver.pinned_range(&l.pinned).0, l.bytes as u64);
            if l.bytes > 0 {
                self.log_access(Agent::Host, "read", vec![range], vec![]);
            }
            let t = Counters::time(&self.counters.readback_nanos, || {
                read(&l.pinned, l.bytes, l.what)
            });
            self.give_pinned_logged(l.pinned);
            out.push(t?);
        }
        Ok(out)
    }

    /// The first raised check so far (after the run's streams are done).
    pub fn raised(&self) -> Option<Fault> {
        raised(&self.driver, &self.checks.borrow())
    }
}
