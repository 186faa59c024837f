//! Rayon's other workers kept awake for the length of a CPU run.
//!
//! A run with no device executes on one of rayon's workers as a whole (`Session::run`), with the
//! other workers spinning here for its length, so a parallel kernel's halves start without a
//! wake-up; runs with a device stay on the calling thread.
//!
//! Each spinner is a job in a loop that runs any job of the pool it finds (`rayon::yield_now`) and
//! otherwise waits with a spin hint, so a parallel kernel's other half is taken at once. Asleep, a
//! worker had to be woken through a futex for every kernel: finish_task_switch, futex_wake and
//! sched_yield were 15% of bert_encoder's samples on two threads once the run itself was moved
//! into the pool. onnxruntime's intra-op pool spins the same way by default.
//!
//! A spinner leaves when the guard drops (the run's end, or its unwinding) and after a millisecond
//! without work: a spinner can be taken up by a worker that waits inside another run's kernel
//! (two sessions sharing the pool), where spinning until this run ended could wait on the very
//! frames beneath it; the limit makes that a pause, and an idle stretch that long costs a wake-up
//! anyway. One that finds itself on the run's own worker (taken from the queue while that worker
//! waited for a kernel's other half) returns at once.
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long a spinner waits without finding work before it leaves.
const IDLE_LIMIT: Duration = Duration::from_millis(1);

/// The guard of a run's spinners: dropping it lets them go.
pub(super) struct Spinners {
    done: Arc<AtomicBool>,
    /// Spinners still in their loop (for tests).
    #[allow(dead_code)]
    live: Arc<AtomicUsize>,
}

impl Spinners {
    /// Called on the worker that runs the plan: one spinner per other worker of the pool.
    pub(super) fn start() -> Spinners {
        let done = Arc::new(AtomicBool::new(false));
        let live = Arc::new(AtomicUsize::new(0));
        let home = rayon::current_thread_index();
        for _ in 1..rayon::current_num_threads() {
            let (done, live) = (done.clone(), live.clone());
            live.fetch_add(1, Ordering::AcqRel);
            rayon::spawn(move || {
                let mut worked = Instant::now();
                while rayon::current_thread_index() != home && !done.load(Ordering::Acquire) {
                    if rayon::yield_now() == Some(rayon::Yield::Executed) {
                        worked = Instant::now();
                    } else if worked.elapsed() > IDLE_LIMIT {
                        break;
                    } else {
                        std::hint::spin_loop();
                    }
                }
                live.fetch_sub(1, Ordering::AcqRel);
            });
        }
        Spinners { done, live }
    }
}

impl Drop for Spinners {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits up to `limit` for every spinner of `live` to leave; the time it took.
    fn leave_within(live: &AtomicUsize, limit: Duration) -> Option<Duration> {
        let t = Instant::now();
        while live.load(Ordering::Acquire) != 0 {
            if t.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        Some(t.elapsed())
    }

    #[test]
    fn spinners_run_the_pools_jobs_and_leave_with_their_run() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        // Kept busy: each spinner runs the jobs it finds, and all leave once the guard drops.
        let live = pool.install(|| {
            let g = Spinners::start();
            let sum: u64 = (0..20_000u64)
                .collect::<Vec<_>>()
                .chunks(100)
                .map(|c| {
                    let (a, b) = rayon::join(|| c.iter().sum::<u64>(), || c.len() as u64);
                    a + b - c.len() as u64
                })
                .sum();
            assert_eq!(sum, (0..20_000u64).sum::<u64>());
            assert!(g.live.load(Ordering::Acquire) <= 2);
            g.live.clone()
        });
        assert!(
            leave_within(&live, Duration::from_secs(5)).is_some(),
            "a spinner outlived its run"
        );
        // A guard that is never dropped: the spinners still leave after the idle limit, not at the
        // run's end. Without the limit (the broken variant) this wait would run out.
        let g = pool.install(Spinners::start);
        let took = leave_within(&g.live, Duration::from_secs(5));
        assert!(
            took.is_some(),
            "idle spinners did not leave while their guard lived"
        );
        assert!(!g.done.load(Ordering::Acquire));
    }

    #[test]
    fn a_pool_of_one_thread_starts_no_spinner() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let g = pool.install(Spinners::start);
        assert_eq!(g.live.load(Ordering::Acquire), 0);
    }
}
