//! The memory plan's arena: the storage of f32 activations, handed back when their value dies (the
//! plan's lifetimes, `Step::frees`) and handed out again to the next output that fits, within a run
//! and across runs. A steady-state run of a session then takes its activations' memory from what
//! the previous run gave back: only the graph outputs, which leave with the caller, take new memory.
//!
//! Kernels allocate their outputs through [`vec`] (`Vec::with_capacity`'s contract: a vector of no
//! elements and at least the capacity asked), which takes from the arena the executor has entered
//! on this thread ([`enter`]) and allocates as usual anywhere else (a kernel called outside a
//! session, a worker thread). What is handed out is plain memory: a kernel writes every element it
//! returns, as it does into fresh memory (the kernels' tests poison their outputs first).
//!
//! A request takes the smallest free buffer that holds it and wastes at most half of it (a small
//! output never takes the buffer a large one will ask for next). At the end of each run the arena
//! keeps only what that run asked for ([`Arena::end_run`]), and a freed buffer that no size asked
//! in this run or the last fits is not kept at all: storage of a kernel that allocates for itself
//! goes back to the allocator that serves it. Buffers below [`MIN_BYTES`] are left to the allocator
//! (cheap, and many), and the arena holds at most [`HELD_BYTES`]. Debug builds (the tests) fill
//! what they hand out again with one of the [`POISONS`], the other each run.
//!
//! The kernels that allocate through it: elementwise and broadcast ops, the convolution paths,
//! packed MatMul/Gemm, ChannelAffine, LayerNormalization, pools by taps, Concat, strided copies
//! and Softmax. The others' storage goes back to the process heap, which `crate::heap` sets to
//! keep freed memory, so their outputs and scratch reuse the previous run's pages too. The cost is
//! memory held between a buffer's death and its next use, which glibc would have lent to other
//! sizes (peak resident memory with and without the arena: `reports/cpu/README.md`);
//! `SessionOptions::arena = false` (`--no-arena`) turns it off.
use std::cell::Cell;
use std::mem::ManuallyDrop;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Smallest buffer the arena keeps or hands out, in bytes.
pub const MIN_BYTES: usize = 16 << 10;
/// Most bytes the arena holds free.
pub const HELD_BYTES: usize = 512 << 20;

/// Free f32 buffers of one session.
#[derive(Debug)]
pub struct Arena {
    free: Mutex<Free>,
    /// Most bytes held free ([`HELD_BYTES`] unless built [`Arena::with_ceiling`]).
    ceiling: usize,
    /// Requests served from a freed buffer, and requests of at least [`MIN_BYTES`] that took new
    /// memory.
    pub reused: AtomicU64,
    pub fresh: AtomicU64,
    /// Runs ended ([`Arena::end_run`]): which of the [`POISONS`] a kept buffer is filled with.
    runs: AtomicU64,
}

#[derive(Default, Debug)]
struct Free {
    /// Oldest first.
    buffers: Vec<Vec<f32>>,
    bytes: usize,
    /// The sizes asked since the last [`Arena::end_run`].
    asked: Vec<usize>,
    /// The sizes the last run asked, in order, and those this one has asked so far: a freed
    /// buffer that none of them fits goes to the allocator at once.
    wanted: Vec<usize>,
    now: std::collections::BTreeSet<usize>,
}

impl Free {
    /// Whether a buffer of `cap` values would serve a size asked in the last run or in this one.
    fn wanted(&self, cap: usize) -> bool {
        // Sizes `n` with n <= cap <= 1.5 n: from ceil(2 cap / 3) to cap.
        let least = (cap.saturating_mul(2)).div_ceil(3);
        let from = self.wanted.partition_point(|&n| n < least);
        self.wanted.get(from).is_some_and(|&n| n <= cap)
            || self.now.range(least..=cap).next().is_some()
    }
}

impl Default for Arena {
    fn default() -> Arena {
        Arena::with_ceiling(HELD_BYTES)
    }
}

/// The bits a reused buffer is filled with in debug builds, a quiet NaN in even runs and a finite value
/// (0x3C bytes, about 0.0115) in odd ones: an output element a kernel failed to write then shows
/// in its results instead of a stale value that looks right, whatever the right answer is (with
/// the NaN alone, an unwritten element whose answer is NaN passed). A case run twice sees both.
pub const POISONS: [u32; 2] = [0x7FC0_DEAD, 0x3C3C_3C3C];

impl Arena {
    /// An arena that holds at most `ceiling` bytes free (0: it keeps nothing).
    pub fn with_ceiling(ceiling: usize) -> Arena {
        Arena {
            free: Default::default(),
            ceiling,
            reused: AtomicU64::new(0),
            fresh: AtomicU64::new(0),
            runs: AtomicU64::new(0),
        }
    }

    /// A buffer of capacity at least `n` (and at most 1.5 `n`), empty, if one is free: the smallest,
    /// the most recently freed of those. The request is remembered until [`Arena::end_run`].
    pub fn take(&self, n: usize) -> Option<Vec<f32>> {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        free.asked.push(n);
        free.now.insert(n);
        let most = n.saturating_add(n / 2);
        let best = free
            .buffers
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, b)| (n..=most).contains(&b.capacity()))
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i)?;
        let mut v = free.buffers.remove(best);
        free.bytes -= v.capacity() * 4;
        drop(free);
        if cfg!(debug_assertions) {
            let poison = POISONS[(self.runs.load(Ordering::Relaxed) % 2) as usize];
            v.resize(v.capacity(), f32::from_bits(poison));
            v.clear();
        }
        Some(v)
    }

    /// Ends a run: of the free buffers, keeps one for each request since the last call (the
    /// smallest that fits it, as [`Arena::take`] picks) and hands the rest back to the allocator.
    /// Storage that no output asks for (freed by a kernel that allocates for itself) then returns
    /// to the allocator serving that kernel instead of piling up here; what the next run of the
    /// same plan asks for stays.
    pub fn end_run(&self) {
        self.runs.fetch_add(1, Ordering::Relaxed);
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let mut asked = std::mem::take(&mut free.asked);
        asked.sort_unstable();
        let mut buffers = std::mem::take(&mut free.buffers);
        buffers.sort_by_key(Vec::capacity);
        let mut keep = vec![false; buffers.len()];
        let mut first = 0;
        for &n in &asked {
            while first < buffers.len() && buffers[first].capacity() < n {
                first += 1;
            }
            let Some(k) = (first..buffers.len()).find(|&k| !keep[k]) else {
                break;
            };
            if buffers[k].capacity() <= n.saturating_add(n / 2) {
                keep[k] = true;
            }
        }
        free.buffers = buffers
            .into_iter()
            .zip(keep)
            .filter_map(|(b, kept)| kept.then_some(b))
            .collect();
        free.bytes = free.buffers.iter().map(|b| b.capacity() * 4).sum();
        asked.dedup();
        free.wanted = asked;
        free.now.clear();
    }

    /// Keeps `v`'s storage for a later request, unless it is small, the arena is full, or no size
    /// asked in this run or the last fits it.
    pub fn give(&self, mut v: Vec<f32>) {
        let bytes = v.capacity() * 4;
        if bytes < MIN_BYTES {
            return;
        }
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        if free.bytes + bytes > self.ceiling || !free.wanted(v.capacity()) {
            return;
        }
        v.clear();
        free.bytes += bytes;
        free.buffers.push(v);
    }

    /// Bytes held free.
    pub fn held_bytes(&self) -> usize {
        self.free.lock().unwrap_or_else(|e| e.into_inner()).bytes
    }
}

/// Whether `T`'s layout is f32's.
fn same_layout<T>() -> bool {
    std::mem::size_of::<T>() == 4 && std::mem::align_of::<T>() == 4
}

thread_local! {
    /// The arena of the session whose kernel runs on this thread (null outside one).
    static CURRENT: Cell<*const Arena> = const { Cell::new(std::ptr::null()) };
}

/// Runs `f` with `arena` as this thread's arena (nested calls restore the outer one after).
pub fn enter<R>(arena: &Arena, f: impl FnOnce() -> R) -> R {
    struct Restore(*const Arena);
    impl Drop for Restore {
        fn drop(&mut self) {
            CURRENT.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(CURRENT.with(|c| c.replace(arena)));
    f()
}

/// An empty vector of capacity at least `n`: from this thread's arena where it holds one, else new.
/// The arena's storage serves elements of f32's size and alignment (f32, i32, u32) of at least
/// [`MIN_BYTES`] in all; other types allocate as usual.
pub fn vec<T>(n: usize) -> Vec<T> {
    if !same_layout::<T>() || n.saturating_mul(4) < MIN_BYTES {
        return Vec::with_capacity(n);
    }
    let ptr = CURRENT.with(Cell::get);
    if ptr.is_null() {
        return Vec::with_capacity(n);
    }
    // SAFETY: `enter` keeps the arena alive and this pointer set only while its closure runs.
    let arena = unsafe { &*ptr };
    let v = match arena.take(n) {
        Some(v) => {
            arena.reused.fetch_add(1, Ordering::Relaxed);
            v
        }
        None => {
            arena.fresh.fetch_add(1, Ordering::Relaxed);
            Vec::with_capacity(n)
        }
    };
    let mut v = ManuallyDrop::new(v);
    // SAFETY: T has f32's size and alignment (checked above), so the allocation has the layout a
    // `Vec<T>` of this capacity would have; the vector is empty, so no value is read as a `T`.
    unsafe { Vec::from_raw_parts(v.as_mut_ptr().cast::<T>(), 0, v.capacity()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel that writes every element of its output but the last, as a buggy one does: the
    /// last element is whatever the storage held.
    fn short_kernel(arena: &Arena, n: usize) -> Vec<f32> {
        enter(arena, || {
            let mut v: Vec<f32> = vec(n);
            let spare = v.spare_capacity_mut();
            for x in &mut spare[..n - 1] {
                x.write(f32::NAN);
            }
            assert!(
                arena.reused.load(Ordering::Relaxed) > 0,
                "a reused, poisoned buffer"
            );
            // SAFETY: the test's point is to expose an element the kernel did not write; every
            // element up to `n` is initialised memory (the arena filled the reused buffer with a
            // poison, which the assert above makes sure of).
            unsafe { v.set_len(n) };
            v
        })
    }

    /// An element a kernel left unwritten, where the right answer is NaN (every element here): with
    /// one NaN poison it passed; over two runs the two poisons show it, since the finite one is not
    /// the answer. The broken variant is the single poison: the first run alone would pass.
    #[cfg(debug_assertions)]
    #[test]
    fn an_unwritten_nan_shows_in_one_of_two_runs() {
        let arena = Arena::default();
        let n = MIN_BYTES;
        let first: Vec<f32> = enter(&arena, || vec(n));
        arena.give(first);
        let mut last = Vec::new();
        for _ in 0..2 {
            let out = short_kernel(&arena, n);
            last.push(out[n - 1].to_bits());
            arena.give(out);
            arena.end_run();
        }
        assert_eq!(last, POISONS, "the unwritten element over two runs");
        assert!(
            last.iter().any(|&b| !f32::from_bits(b).is_nan()),
            "caught in one run"
        );
    }

    #[test]
    fn a_freed_buffer_goes_to_the_next_request_it_fits() {
        let arena = Arena::default();
        let n = MIN_BYTES; // values: four times the minimum in bytes
        let a: Vec<f32> = enter(&arena, || vec(n));
        assert_eq!(arena.fresh.load(Ordering::Relaxed), 1);
        let at = a.as_ptr();
        arena.give(a);
        // Too large for it, then too small to be worth it (more than half wasted).
        let big: Vec<f32> = enter(&arena, || vec(n + 1));
        let small: Vec<f32> = enter(&arena, || vec(n / 2 - 1));
        assert!(big.as_ptr() != at && small.as_ptr() != at);
        let same: Vec<f32> = enter(&arena, || vec(n * 3 / 4));
        assert_eq!((same.as_ptr(), same.len()), (at, 0));
        assert!(same.capacity() >= n * 3 / 4);
        assert_eq!(arena.reused.load(Ordering::Relaxed), 1);
        // Outside `enter`, and for types of another layout, no arena; i32 shares f32's storage.
        arena.give(same);
        let outside: Vec<f32> = vec(n);
        let longs: Vec<i64> = enter(&arena, || vec(n));
        assert!(outside.as_ptr() != at && longs.as_ptr() as *const f32 != at);
        assert_eq!(arena.held_bytes(), n * 4);
        let ints: Vec<i32> = enter(&arena, || vec(n));
        assert_eq!(ints.as_ptr() as *const f32, at);
    }

    #[test]
    fn a_run_keeps_what_it_asked_for_and_no_more() {
        let arena = Arena::default();
        let n = MIN_BYTES;
        // Asked: n twice and 4n once. Freed: two of n, one of 4n, and two that no one asked for
        // (3n, and 10n: a kernel's own), which are not kept.
        let asked: Vec<Vec<f32>> = enter(&arena, || [n, n, 4 * n].map(vec::<f32>).into());
        for v in asked {
            arena.give(v);
        }
        arena.give(Vec::with_capacity(3 * n));
        arena.give(Vec::with_capacity(10 * n));
        assert_eq!(arena.held_bytes(), 6 * n * 4);
        arena.end_run();
        assert_eq!(arena.held_bytes(), 6 * n * 4);
        // Nor after the run: a buffer no size of that run fits is not kept.
        arena.give(Vec::with_capacity(3 * n));
        arena.give(Vec::with_capacity(2 * n - 1));
        assert_eq!(arena.held_bytes(), 6 * n * 4);
        arena.give(Vec::with_capacity(n + n / 2));
        assert_eq!(arena.held_bytes(), (7 * n + n / 2) * 4);
        // The next run finds all three (not the 1.5 n one), and asking again keeps them only.
        let again: Vec<Vec<f32>> = enter(&arena, || [n, n, 4 * n].map(vec::<f32>).into());
        assert_eq!(arena.reused.load(Ordering::Relaxed), 3);
        for v in again {
            arena.give(v);
        }
        arena.end_run();
        assert_eq!(arena.held_bytes(), 6 * n * 4);
        // A run that asks for nothing keeps nothing.
        arena.end_run();
        assert_eq!(arena.held_bytes(), 0);
    }

    #[test]
    fn small_buffers_are_not_kept_and_the_arena_has_a_ceiling() {
        let arena = Arena::default();
        arena.give(Vec::with_capacity(MIN_BYTES / 4 - 1));
        assert_eq!(arena.held_bytes(), 0);
        let quarter = HELD_BYTES / 4 / 4;
        assert!(arena.take(quarter).is_none());
        for _ in 0..5 {
            arena.give(Vec::with_capacity(quarter));
        }
        assert_eq!(arena.held_bytes(), HELD_BYTES);
    }

    #[test]
    fn nested_entries_restore_the_outer_arena() {
        let (outer, inner) = (Arena::default(), Arena::default());
        let n = MIN_BYTES;
        enter(&outer, || {
            enter(&inner, || drop(vec::<f32>(n)));
            drop(vec::<f32>(n));
        });
        assert_eq!(inner.fresh.load(Ordering::Relaxed), 1);
        assert_eq!(outer.fresh.load(Ordering::Relaxed), 1);
    }
}
