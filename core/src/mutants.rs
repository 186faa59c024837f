//! Injected synchronisation bugs, one at a time, so that the happens-before checker and the stream
//! fuzzer can prove they catch each kind (`quorum-fuzz`'s `tests/mutants.rs`). Compiled in only with
//! the `mutants` feature; without it [`active`] is a constant `false` and every injection point
//! folds away.
#[cfg(feature = "mutants")]
use std::sync::atomic::{AtomicU8, Ordering};

/// One injected bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Mutant {
    /// The executor drops the event wait of a cross-stream edge.
    DropWait = 1,
    /// A buffer goes back to the run's free list without its readers' events.
    EarlyRelease,
    /// A download is issued on the current stream, not its producer's.
    DownloadWrongStream,
    /// A pinned staging buffer is reused before its upload has completed.
    StagingReuse,
    /// A step's event is recorded before its launch instead of after.
    RecordBeforeLaunch,
    /// A graph replay does not stage the inputs it was given: the graph reads what its staging
    /// held from the replay before.
    StaleReplayInput,
    /// The host reads a downloaded value without waiting for the copy.
    UnsyncedHostRead,
    /// The free list hands a buffer to another stream without waiting for anything.
    SharedFreeList,
    /// A kernel's scratch (split-K workspace, reduction partials, norm statistics) is released
    /// before the last launch that reads it.
    ScratchReleasedEarly,
    /// A run whose synchronisation failed returns its pinned staging to the shared pool anyway
    /// (a copy of the failed stream may still be reading it).
    StagingAfterFailedSync,
    /// A weight's upload is published to other runs without the host waiting for the copy.
    WeightUnsynced,
    /// Two runs replay one captured graph at once (the replay takes no lock), sharing its fixed
    /// buffers, staging and output copies.
    ConcurrentReplays,
    /// wgpu: a weight is written (`Queue::write_buffer`) into a buffer the run parked, which a
    /// command collected but not yet submitted still reads; the write lands ahead of that command.
    WriteBufferIntoCollected,
    /// A large upload's piece is copied before it is staged: the bus may carry the staging's old
    /// bytes while the host writes the new ones.
    PieceCopiedBeforeStaged,
}

impl Mutant {
    pub const ALL: [Mutant; 14] = [
        Mutant::DropWait,
        Mutant::EarlyRelease,
        Mutant::DownloadWrongStream,
        Mutant::StagingReuse,
        Mutant::RecordBeforeLaunch,
        Mutant::StaleReplayInput,
        Mutant::UnsyncedHostRead,
        Mutant::SharedFreeList,
        Mutant::ScratchReleasedEarly,
        Mutant::StagingAfterFailedSync,
        Mutant::WeightUnsynced,
        Mutant::ConcurrentReplays,
        Mutant::WriteBufferIntoCollected,
        Mutant::PieceCopiedBeforeStaged,
    ];

    /// Why a GPU cannot express this bug, where it cannot: the device hunt skips it, and the hunt
    /// of `cargo test` on the simulated device (which runs the same run protocol) must catch it.
    pub fn off_device(self) -> Option<&'static str> {
        match self {
            Mutant::StagingAfterFailedSync => Some(
                "it needs a failed stream synchronisation, which leaves a GPU's context unusable; \
                 the simulated device injects the failure into the same run protocol",
            ),
            Mutant::PieceCopiedBeforeStaged => Some(
                "CUDA uploads in pieces only past 8 MiB, larger than the fuzzer's tensors; the \
                 simulated device, whose pieces are a few dozen bytes, runs the same run protocol",
            ),
            Mutant::WriteBufferIntoCollected => Some(
                "it is the wgpu backend's (one queue, writes ahead of collected commands); \
                 `cargo test`'s wgpu hunt catches it on the adapter present (lavapipe in CI)",
            ),
            _ => None,
        }
    }

    /// Whether the bug lives in graph replay: a hunt must capture graphs and replay them to see it
    /// (`cargo test`'s on the simulated device, which captures as CUDA does).
    pub fn needs_capture(self) -> bool {
        matches!(self, Mutant::StaleReplayInput | Mutant::ConcurrentReplays)
    }

    /// Whether the bug lives in the wgpu backend, not in the run protocol that CUDA and the
    /// simulated device share: only a hunt over wgpu runs can catch it.
    pub fn wgpu_only(self) -> bool {
        matches!(self, Mutant::WriteBufferIntoCollected)
    }
}

#[cfg(feature = "mutants")]
static ACTIVE: AtomicU8 = AtomicU8::new(0);

/// Injects `m` (or nothing) for every session in the process from now on.
#[cfg(feature = "mutants")]
pub fn inject(m: Option<Mutant>) {
    ACTIVE.store(m.map_or(0, |m| m as u8), Ordering::SeqCst);
}

/// Whether bug `m` is injected.
#[inline]
pub fn active(m: Mutant) -> bool {
    #[cfg(feature = "mutants")]
    {
        ACTIVE.load(Ordering::Relaxed) == m as u8
    }
    #[cfg(not(feature = "mutants"))]
    {
        let _ = m;
        false
    }
}

#[cfg(feature = "mutants")]
static FAIL_SYNC: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Not a bug of ours but a device's: the simulated device fails every synchronisation of a run
/// from its `n`-th on (0: never), as a stream whose kernel faulted does, so that what the run does
/// after a failed synchronisation is exercised. Process-wide, like [`inject`].
#[cfg(feature = "mutants")]
pub fn fail_syncs_from(n: u64) {
    FAIL_SYNC.store(n, Ordering::SeqCst);
}

/// From which synchronisation of a run the simulated device fails them (0: never).
#[inline]
pub fn failing_sync() -> u64 {
    #[cfg(feature = "mutants")]
    {
        FAIL_SYNC.load(Ordering::Relaxed)
    }
    #[cfg(not(feature = "mutants"))]
    {
        0
    }
}
