//! Values computed from tensor shapes alone (`Step::shapes_only`: Shape, Size and every op whose
//! inputs are only such values and constants), kept per input-shape key, so that an exported model's
//! index arithmetic and masks (Swin-T builds its shifted-window attention masks from the input's
//! height and width, some 2,000 nodes a run) cost one run per input shape, not every run. The same
//! `Arc` every run also lets a device keep its copy the way it keeps a weight
//! (`DeviceRun::weight`), so nothing of them is uploaded again, and graph capture can bake them in.
//!
//! **Checked, not assumed.** A Shape can read a tensor whose shape depends on data (NonZero's
//! output), so the input shapes do not always decide these values. Each kept step remembers what it
//! read: a Shape or Size step is computed every run (it only reads a shape) and its kept value is
//! reused only when equal; any other step's kept outputs are reused only when its inputs are the
//! very values (the same `Arc`s) it was computed from. A changed shape anywhere upstream therefore
//! recomputes everything after it.
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

/// The shape-derived values of one input-shape key, by top-level step: the identities of the
/// inputs each was computed from, and its outputs.
#[derive(Default)]
pub(super) struct KeyValues {
    steps: Mutex<HashMap<usize, Kept>>,
}

/// One step's kept outputs and the identities of the inputs they were computed from.
type Kept = (Vec<usize>, Vec<Arc<Value>>);

/// The identity of a value: its `Arc`'s address.
pub(super) fn identity(v: &Arc<Value>) -> usize {
    Arc::as_ptr(v) as usize
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
    /// Step `step`'s kept outputs, when they were computed from inputs with these identities.
    pub fn get(&self, step: usize, inputs: &[usize]) -> Option<Vec<Arc<Value>>> {
        let steps = self.steps.lock().unwrap_or_else(|e| e.into_inner());
        let (from, outputs) = steps.get(&step)?;
        (from == inputs).then(|| outputs.clone())
    }

    /// Keeps step `step`'s outputs, computed from inputs with these identities, and returns the
    /// ones to use: the kept ones where they are equal to these (so every run sees the same `Arc`s
    /// while the values stay the same), these otherwise.
    pub fn keep(
        &self,
        step: usize,
        inputs: Vec<usize>,
        outputs: Vec<Arc<Value>>,
    ) -> Vec<Arc<Value>> {
        let mut steps = self.steps.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((from, kept)) = steps.get(&step)
            && *from == inputs
            && kept.len() == outputs.len()
            && kept.iter().zip(&outputs).all(|(k, o)| **k == **o)
        {
            return kept.clone();
        }
        steps.insert(step, (inputs, outputs.clone()));
        outputs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::{DType, Tensor};

    fn key(n: usize) -> ShapeKey {
        vec![("x".into(), DType::F32, vec![1, n])]
    }

    /// A key seen again gives the values its first run kept, the same `Arc`s, while they are
    /// equal and computed from the same inputs; a value that changed (a Shape of a tensor whose
    /// shape depends on data) replaces the kept one, and different inputs miss; a new key starts
    /// empty; past `KEYS_KEPT` keys the least recently used is forgotten.
    #[test]
    fn values_are_kept_per_key_while_what_they_read_is_the_same() {
        let s = ShapeValues::default();
        let i64s = |v: i64| Arc::new(Value::Tensor(Tensor::scalar_i64(v)));
        let v = i64s(7);
        let kept = s.for_key(&key(1)).keep(3, vec![10], vec![v.clone()]);
        assert!(Arc::ptr_eq(&kept[0], &v));
        // Recomputed equal: the first value's Arc is the one used.
        let again = s.for_key(&key(1)).keep(3, vec![10], vec![i64s(7)]);
        assert!(Arc::ptr_eq(&again[0], &v));
        assert!(Arc::ptr_eq(
            &s.for_key(&key(1)).get(3, &[10]).unwrap()[0],
            &v
        ));
        // Other inputs: not served.
        assert!(s.for_key(&key(1)).get(3, &[11]).is_none());
        // Recomputed different (the broken twin would have kept 7): replaced.
        let changed = s.for_key(&key(1)).keep(3, vec![10], vec![i64s(8)]);
        assert_eq!(*changed[0], *i64s(8));
        assert_eq!(*s.for_key(&key(1)).get(3, &[10]).unwrap()[0], *i64s(8));
        assert!(s.for_key(&key(2)).get(3, &[10]).is_none());
        for n in 3..3 + KEYS_KEPT {
            s.for_key(&key(n));
        }
        assert!(
            s.for_key(&key(1)).get(3, &[10]).is_none(),
            "key 1 was the oldest"
        );
    }
}
