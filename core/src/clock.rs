//! Time for a run's figures (elapsed milliseconds, per-node profiles) and for unseeded random ops,
//! on every target.
//!
//! `std::time::Instant::now()` and `SystemTime::now()` panic on `wasm32-unknown-unknown`, which has
//! no clock of its own. There a [`Stamp`] reads the source its embedder installs with
//! [`set_source`] (the JavaScript wrapper of `quorum-wasm` installs `performance.now()`), and
//! without one every stamp is zero: elapsed times read 0 and nothing panics. Everywhere else a stamp
//! is an `Instant` and `set_source` is not consulted.
use std::sync::OnceLock;
use std::time::Duration;

/// Whether this target lacks a clock of its own (`wasm32-unknown-unknown`).
const NO_CLOCK: bool = cfg!(all(target_arch = "wasm32", target_os = "unknown"));

/// The embedder's clock: milliseconds from any fixed origin, never decreasing.
static SOURCE: OnceLock<fn() -> f64> = OnceLock::new();

/// Installs the clock that stamps read where the target has none; the first call wins. Returns
/// whether this call installed it.
pub fn set_source(now_ms: fn() -> f64) -> bool {
    SOURCE.set(now_ms).is_ok()
}

/// A point in time, to measure what elapsed since.
#[derive(Debug, Clone, Copy)]
pub struct Stamp(Inner);

#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
type Inner = std::time::Instant;
#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
type Inner = f64;

impl Stamp {
    pub fn now() -> Stamp {
        #[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
        {
            Stamp(std::time::Instant::now())
        }
        #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
        {
            Stamp(embedder_ms())
        }
    }

    /// Time since this stamp (zero where no clock is installed).
    pub fn elapsed(&self) -> Duration {
        #[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
        {
            self.0.elapsed()
        }
        #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
        {
            let ms = (embedder_ms() - self.0).max(0.0);
            Duration::from_secs_f64(ms / 1e3)
        }
    }
}

/// The embedder's clock in milliseconds, 0 without one.
fn embedder_ms() -> f64 {
    SOURCE.get().map_or(0.0, |f| f()).max(0.0)
}

/// Some nanoseconds that differ between processes and calls, to seed unseeded random ops: the wall
/// clock where the target has one, the embedder's clock (or 0) where it has not.
pub fn entropy() -> u64 {
    if NO_CLOCK {
        return (embedder_ms() * 1e6) as u64;
    }
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_measure_elapsed_time_here() {
        let t = Stamp::now();
        std::thread::sleep(Duration::from_millis(5));
        assert!(t.elapsed() >= Duration::from_millis(5), "{:?}", t.elapsed());
        // A native target has its own clock: an installed source is not what stamps read.
        const { assert!(!NO_CLOCK) };
        assert_ne!(entropy(), 0);
    }
}
