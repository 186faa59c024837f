//! Weights resident on a device, keyed by the identity of the initializer's `Arc`, for every
//! accelerator (`D` is the backend's device tensor). A lookup is checked, not trusted: the entry
//! keeps a `Weak` to the value it was made from, and an address whose value was dropped and
//! replaced (or whose shape or dtype differs) is uploaded again.
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::tensor::{DType, Value};

pub struct WeightCache<D> {
    entries: Mutex<HashMap<usize, WeightEntry<D>>>,
}

impl<D> Default for WeightCache<D> {
    fn default() -> Self {
        WeightCache {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

struct WeightEntry<D> {
    source: Weak<Value>,
    dtype: DType,
    shape: Vec<usize>,
    dev: D,
}

impl<D> WeightEntry<D> {
    /// Whether this entry is the device copy of `v` (the same live value, dtype and shape).
    fn copy_of(&self, v: &Arc<Value>) -> bool {
        let Some(t) = v.as_tensor() else {
            return false;
        };
        self.source.upgrade().is_some_and(|s| Arc::ptr_eq(&s, v))
            && self.dtype == t.dtype()
            && self.shape == t.shape()
    }
}

impl<D: Clone> WeightCache<D> {
    pub fn get(&self, v: &Arc<Value>) -> Option<D> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let e = entries.get(&(Arc::as_ptr(v) as usize))?;
        e.copy_of(v).then(|| e.dev.clone())
    }

    /// Remembers `dev` as the device copy of `v` and returns the copy to use: `dev`, or the copy
    /// another run made first. Two runs can both miss on `get` and both upload; the first to
    /// insert wins and the second's copy is dropped unused. Replacing instead would free a copy
    /// that the first run's queued kernels may still read. A value that is not a tensor is not
    /// cached.
    pub fn insert(&self, v: &Arc<Value>, dev: D) -> D {
        let Some(t) = v.as_tensor() else {
            return dev;
        };
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let key = Arc::as_ptr(v) as usize;
        if let Some(e) = entries.get(&key)
            && e.copy_of(v)
        {
            return e.dev.clone();
        }
        // Absent, or stale: the value at this address was dropped and replaced, so no run of this
        // session can still be using the old copy through this key. Entries whose value is gone go
        // too (values computed from shapes are dropped when their input-shape key is forgotten):
        // a run that still reads such a copy holds its buffer itself.
        entries.retain(|_, e| e.source.strong_count() > 0);
        entries.insert(
            key,
            WeightEntry {
                source: Arc::downgrade(v),
                dtype: t.dtype(),
                shape: t.shape().to_vec(),
                dev: dev.clone(),
            },
        );
        dev
    }

    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;

    fn weight(seed: f32) -> Arc<Value> {
        let a =
            ndarray::ArrayD::from_shape_vec(vec![2, 3], (0..6).map(|i| seed + i as f32).collect())
                .unwrap();
        Arc::new(Value::Tensor(Tensor::F32(a)))
    }

    /// Two runs miss at once and both upload: the first copy inserted is the one both use, and
    /// the cache still holds it (the second's copy is the one that goes).
    #[test]
    fn the_first_copy_inserted_wins_a_race() {
        let cache = WeightCache::default();
        let v = weight(1.0);
        let first = Arc::new("first");
        let second = Arc::new("second");
        assert!(cache.get(&v).is_none());
        assert!(cache.get(&v).is_none());
        assert!(Arc::ptr_eq(&cache.insert(&v, first.clone()), &first));
        let used = cache.insert(&v, second.clone());
        assert!(
            Arc::ptr_eq(&used, &first),
            "the second run uses the first copy"
        );
        assert!(Arc::ptr_eq(&cache.get(&v).unwrap(), &first));
        drop(used);
        assert_eq!(
            Arc::strong_count(&second),
            1,
            "the cache kept the second copy"
        );
        assert_eq!(cache.len(), 1);
    }

    /// A different value at a reused address is a miss, and its copy replaces the stale entry.
    #[test]
    fn a_stale_entry_is_replaced() {
        let cache = WeightCache::default();
        let v = weight(1.0);
        cache.insert(&v, 1u32);
        drop(v);
        // The allocator may give the new value the old one's address: either way, a miss.
        let w = weight(2.0);
        assert_eq!(cache.get(&w), None);
        assert_eq!(cache.insert(&w, 2), 2);
        assert_eq!(cache.get(&w), Some(2));
    }

    /// A same-address value of another shape is not the cached copy.
    #[test]
    fn a_different_shape_is_a_miss() {
        let cache = WeightCache::default();
        let v = weight(1.0);
        cache.insert(&v, 1u32);
        let mut entries = cache.entries.lock().unwrap();
        entries.get_mut(&(Arc::as_ptr(&v) as usize)).unwrap().shape = vec![3, 2];
        drop(entries);
        assert_eq!(cache.get(&v), None);
        assert_eq!(cache.insert(&v, 2), 2);
    }
}
