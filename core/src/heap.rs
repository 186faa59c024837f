//! The process heap, set once for inference: buffers freed after their last reader stay in the
//! heap for the next node and the next run instead of going back to the operating system.
//!
//! glibc's malloc serves a request above its mmap threshold with fresh pages from the kernel and
//! unmaps them when freed, and trims free memory at the top of its heap past a trim threshold. An
//! activation buffer of a few MiB is then page-faulted and zeroed by the kernel on every run
//! (densenet121's concatenations and the affine passes before its convolutions: 43–47 → 39–40 ms,
//! 2 threads on the 2-core Xeon of `reports/cpu/`, the other models within noise). With the mmap
//! threshold at 32 MiB and the trim threshold at 256 MiB, freed buffers are reused
//! from the heap: a steady-state run takes its memory from what the previous one freed. The cost
//! is that the process keeps what it freed (up to 256 MiB more than it holds), as onnxruntime's
//! arena keeps its blocks.
//!
//! Sessions set it when the first one is built. `QUORUM_HEAP=os` leaves glibc's defaults (for a
//! host process that tunes malloc itself); elsewhere than Linux with glibc it does nothing.

/// The mmap threshold set: requests above it are still mapped for themselves (and unmapped when
/// freed), so one huge tensor is not kept.
pub const MMAP_THRESHOLD: i32 = 32 << 20;
/// The trim threshold set.
pub const TRIM_THRESHOLD: i32 = 256 << 20;

/// Sets both thresholds once per process (see the module docs); whether they are set.
pub fn retain_freed_buffers() -> bool {
    static SET: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SET.get_or_init(|| {
        if std::env::var("QUORUM_HEAP").as_deref() == Ok("os") {
            return false;
        }
        set_thresholds(MMAP_THRESHOLD, TRIM_THRESHOLD)
    })
}

/// Both thresholds set; whether glibc took them (`mallopt` returns 1).
fn set_thresholds(mmap: i32, trim: i32) -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only changes malloc's parameters; it is thread-safe in glibc.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, mmap) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, trim) == 1
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = (mmap, trim);
        false
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    /// Minor page faults of this thread so far.
    fn faults() -> i64 {
        // SAFETY: getrusage writes the struct it is given.
        unsafe {
            let mut u: libc::rusage = std::mem::zeroed();
            assert_eq!(libc::getrusage(libc::RUSAGE_THREAD, &mut u), 0);
            u.ru_minflt
        }
    }

    /// Page faults of writing every page of a fresh 16 MiB buffer after one of the same size was
    /// written and freed.
    fn refaults() -> i64 {
        let touch = |len: usize| {
            let mut v: Vec<u8> = Vec::with_capacity(len);
            let p = v.as_mut_ptr();
            for i in (0..len).step_by(4096) {
                // SAFETY: inside the capacity.
                unsafe { p.add(i).write_volatile(1) };
            }
            std::hint::black_box(&mut v);
        };
        touch(16 << 20);
        let before = faults();
        touch(16 << 20);
        faults() - before
    }

    /// With the thresholds set, a freed 16 MiB buffer comes back without a page fault; with
    /// small ones (the behaviour the module replaces: map, unmap, map again) all 4096 of its pages
    /// fault again, and the check sees it.
    #[test]
    fn freed_buffers_come_back_without_page_faults() {
        assert!(set_thresholds(MMAP_THRESHOLD, TRIM_THRESHOLD));
        let kept = refaults();
        assert!(set_thresholds(128 << 10, 128 << 10));
        let unmapped = refaults();
        // Restored: the tests share the process.
        assert!(set_thresholds(MMAP_THRESHOLD, TRIM_THRESHOLD));
        assert!(kept < 64, "{kept} page faults with the buffers kept");
        assert!(
            unmapped > 2048,
            "only {unmapped} page faults with small thresholds"
        );
    }
}
