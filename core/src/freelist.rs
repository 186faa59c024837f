//! Free device blocks by size class under a byte budget: the bookkeeping that the CUDA and wgpu
//! pools share. It holds no lock and makes no device call (the caller locks it and passes the
//! allocation in), so that the model check in `runtime/tests/model_pool.rs` drives this very code
//! under `loom` with a model of streams and runs around it.
//!
//! The rule every caller keeps: a block is handed back ([`FreeLists::give`]) only once no stream can
//! still touch it; within a run, blocks freed mid-run wait in that run's own list, behind events.
use std::collections::HashMap;

/// The size class of a request: 256-byte minimum, then powers of two up to 64 MiB, then 2 MiB steps.
pub fn size_class(bytes: usize) -> usize {
    if bytes <= 256 {
        256
    } else if bytes <= 64 << 20 {
        bytes.next_power_of_two()
    } else {
        bytes.div_ceil(2 << 20) * (2 << 20)
    }
}

/// A device allocation the lists can hold.
pub trait Block {
    /// Its size in bytes (its size class).
    fn bytes(&self) -> usize;
}

/// Why [`FreeLists::take`] gave nothing.
#[derive(Debug, PartialEq, Eq)]
pub enum TakeError<E> {
    /// Even with every cached block released, `asked` more bytes would pass the budget.
    OverBudget {
        asked: usize,
        held: usize,
        budget: usize,
    },
    /// The allocation itself failed.
    Alloc(E),
}

/// Cached blocks by size class, and the bytes allocated in all (cached or in use).
pub struct FreeLists<M> {
    free: HashMap<usize, Vec<M>>,
    held: usize,
}

impl<M> Default for FreeLists<M> {
    fn default() -> Self {
        FreeLists {
            free: HashMap::new(),
            held: 0,
        }
    }
}

impl<M: Block> FreeLists<M> {
    /// A block of size class `class`: a cached one (`true`: a pool hit), else a new one from
    /// `alloc`, after releasing every cached block (through `release`) if the budget needs it.
    pub fn take<E>(
        &mut self,
        class: usize,
        budget: usize,
        alloc: impl FnOnce(usize) -> Result<M, E>,
        mut release: impl FnMut(M),
    ) -> Result<(M, bool), TakeError<E>> {
        if let Some(m) = self.free.get_mut(&class).and_then(Vec::pop) {
            return Ok((m, true));
        }
        if self.held + class > budget {
            for m in self.free.drain().flat_map(|(_, v)| v) {
                self.held -= m.bytes();
                release(m);
            }
            if self.held + class > budget {
                return Err(TakeError::OverBudget {
                    asked: class,
                    held: self.held,
                    budget,
                });
            }
        }
        let m = alloc(class).map_err(TakeError::Alloc)?;
        self.held += m.bytes();
        Ok((m, false))
    }

    /// Hands a block back for reuse (only once nothing can still use it).
    pub fn give(&mut self, m: M) {
        self.free.entry(m.bytes()).or_default().push(m);
    }

    /// Bytes allocated (cached or in use).
    pub fn held(&self) -> usize {
        self.held
    }

    /// Bytes cached for reuse.
    pub fn cached(&self) -> usize {
        self.free.values().flatten().map(Block::bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct B(usize, u32);
    impl Block for B {
        fn bytes(&self) -> usize {
            self.0
        }
    }

    #[test]
    fn reuses_by_class_and_trims_the_cache_at_the_budget() {
        let mut f = FreeLists::<B>::default();
        let mut next = 0;
        let mut alloc = |c| -> Result<B, ()> {
            next += 1;
            Ok(B(c, next))
        };
        let (a, hit) = f.take(256, 1024, &mut alloc, drop).unwrap();
        assert!(!hit);
        f.give(a);
        let (a, hit) = f.take(256, 1024, &mut alloc, drop).unwrap();
        assert!(hit && a == B(256, 1));
        f.give(a);
        // 512 more fits beside the cached 256; 1024 does not until the cache goes.
        let (b, _) = f.take(512, 1024, &mut alloc, drop).unwrap();
        assert_eq!((f.held(), f.cached()), (768, 256));
        let mut released = Vec::new();
        let over = f.take(1024, 1024, &mut alloc, |m| released.push(m));
        assert_eq!(released, vec![B(256, 1)]);
        assert_eq!(
            over.unwrap_err(),
            TakeError::OverBudget {
                asked: 1024,
                held: 512,
                budget: 1024
            }
        );
        f.give(b);
        assert_eq!((f.held(), f.cached()), (512, 512));
    }
}
