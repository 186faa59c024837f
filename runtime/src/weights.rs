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

impl<D: Clone> WeightCache<D> {
    pub fn get(&self, v: &Arc<Value>) -> Option<D> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let e = entries.get(&(Arc::as_ptr(v) as usize))?;
        let t = v.as_tensor()?;
        let same = e.source.upgrade().is_some_and(|s| Arc::ptr_eq(&s, v))
            && e.dtype == t.dtype()
            && e.shape == t.shape();
        same.then(|| e.dev.clone())
    }

    /// Remembers `dev` as the device copy of `v` (a value that is not a tensor is not cached).
    pub fn insert(&self, v: &Arc<Value>, dev: D) {
        let Some(t) = v.as_tensor() else {
            return;
        };
        let entry = WeightEntry {
            source: Arc::downgrade(v),
            dtype: t.dtype(),
            shape: t.shape().to_vec(),
            dev,
        };
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.insert(Arc::as_ptr(v) as usize, entry);
    }

    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
