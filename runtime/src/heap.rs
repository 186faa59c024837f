//! The process heap, set once for inference: buffers freed after their last reader stay in the
//! heap for the next node and the next run instead of going back to the operating system.
//!
//! glibc's malloc serves a request above its mmap threshold with fresh pages from the kernel and
//! unmaps them when freed, and trims free memory at the top of its heap past a trim threshold. An
//! activation buffer of a few MiB is then page-faulted and zeroed by the kernel on every run
//! (densenet121's concatenations and the affine passes before its convolutions: 48.5 → 41 ms, 2
//! threads on the 2-core Xeon of `reports/cpu/`, the other models within noise). With the mmap
//! threshold at its largest (32 MiB) and the trim threshold at 256 MiB, freed buffers are reused
//! from the heap: a steady-state run takes its memory from what the previous one freed. The cost
//! is that the process keeps what it freed (up to 256 MiB more than it holds), as onnxruntime's
//! arena keeps its blocks.
//!
//! Sessions set it when the first one is built. `QUORUM_HEAP=os` leaves glibc's defaults (for a
//! host process that tunes malloc itself); elsewhere than Linux with glibc it does nothing.

/// The mmap threshold set: glibc's upper limit on 64-bit targets (`4 MiB · sizeof(long)`).
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

/// Both thresholds set; whether glibc accepted them (it refuses an mmap threshold past its limit).
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

    /// glibc takes the thresholds (so sessions really set them), and refuses an mmap threshold
    /// past its limit: the check sees a setting that does not take.
    #[test]
    fn glibc_takes_the_thresholds_and_refuses_past_its_limit() {
        assert!(set_thresholds(MMAP_THRESHOLD, TRIM_THRESHOLD));
        assert!(!set_thresholds(2 * MMAP_THRESHOLD, TRIM_THRESHOLD));
        // Restored: the tests share the process.
        assert!(set_thresholds(MMAP_THRESHOLD, TRIM_THRESHOLD));
    }
}
