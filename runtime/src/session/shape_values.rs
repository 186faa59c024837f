//! Values computed from tensor shapes alone (`Step::shapes_only`: Shape, Size and every op whose
//! inputs are only such values and constants), kept per input-shape key. They are functions of the
//! run inputs' shapes, so a run with a key seen before takes them from here instead of computing
//! them again: an exported model's index arithmetic and masks (Swin-T builds its shifted-window
//! attention masks from the input's height and width, some 2,000 nodes a run) cost one run per
//! input shape, not every run. The same `Arc` every run also lets a device keep its copy the way it
//! keeps a weight (`DeviceRun::weight`), so nothing of them is uploaded again, and graph capture can
//! bake them in.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::capture::ShapeKey;
use crate::tensor::Value;

/// Input-shape keys kept at once (the least recently used goes first).
const KEYS_KEPT: usize = 8;

/// A session's shape-derived values, by input-shape key.
#[derive(Default)]
pub(super) struct ShapeValues {
    keys: Mutex<Vec<(ShapeKey, Arc<KeyValues>)>>,
}

/// The shape-derived values of one input-shape key, by top-level step.
#[derive(Default)]
pub(super) struct KeyValues {
    steps: Mutex<HashMap<usize, Vec<Arc<Value>>>>,
}

impl ShapeValues {
    /// The values kept for `key` (empty the first time it is seen).
    pub fn for_key(&self, key: &ShapeKey) -> Arc<KeyValues> {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = keys.iter().position(|(k, _)| k == key) {
            let entry = keys.remove(i);
            let values = entry.1.clone();
            keys.push(entry);
            return values;
        }
        if keys.len() >= KEYS_KEPT {
            keys.remove(0);
        }
        let values = Arc::new(KeyValues::default());
        keys.push((key.clone(), values.clone()));
        values
    }
}

impl KeyValues {
    /// Step `step`'s outputs, when a run with this key computed them.
    pub fn get(&self, step: usize) -> Option<Vec<Arc<Value>>> {
        self.steps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&step)
            .cloned()
    }

    /// Keeps step `step`'s outputs and returns the ones to use: these, or those another run of the
    /// same key kept first (so every run sees the same `Arc`s).
    pub fn keep(&self, step: usize, outputs: Vec<Arc<Value>>) -> Vec<Arc<Value>> {
        self.steps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(step)
            .or_insert(outputs)
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::{DType, Tensor};

    fn key(n: usize) -> ShapeKey {
        vec![("x".into(), DType::F32, vec![1, n])]
    }

    /// A key seen again gives the values its first run kept, the same `Arc`s; a new key starts
    /// empty; past `KEYS_KEPT` keys the least recently used is forgotten.
    #[test]
    fn values_are_kept_per_key_and_the_oldest_key_goes() {
        let s = ShapeValues::default();
        let v = Arc::new(Value::Tensor(Tensor::scalar_i64(7)));
        let kept = s.for_key(&key(1)).keep(3, vec![v.clone()]);
        assert!(Arc::ptr_eq(&kept[0], &v));
        // A second keeper of the same step gets the first one's values.
        let other = Arc::new(Value::Tensor(Tensor::scalar_i64(7)));
        let again = s.for_key(&key(1)).keep(3, vec![other]);
        assert!(Arc::ptr_eq(&again[0], &v));
        assert!(Arc::ptr_eq(&s.for_key(&key(1)).get(3).unwrap()[0], &v));
        assert!(s.for_key(&key(2)).get(3).is_none());
        for n in 3..3 + KEYS_KEPT {
            s.for_key(&key(n));
        }
        assert!(s.for_key(&key(1)).get(3).is_none(), "key 1 was the oldest");
    }
}
