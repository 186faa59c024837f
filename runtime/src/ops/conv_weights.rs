//! Convolution weights packed once per initializer, for the packed GEMM.
//!
//! Keyed, like the CUDA weight cache, by the identity of the initializer's `Arc` (which the session
//! gives a kernel through [`SubgraphRunner::constant`](crate::ops::SubgraphRunner::constant)), and
//! checked, not trusted: an entry keeps a `Weak` to the value it was packed from, and a lookup hits
//! only when that `Weak` still points at the same `Arc` and the layout (instruction set, group,
//! weight shape) is the one asked for. An address whose value was dropped and reused, a value fed
//! per run (no `Arc` given) or a different layout is packed again. Entries whose value is gone are
//! dropped at the next insertion, so the cache holds the packed weights of live sessions only.
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use quorum_kernels::{Isa, PackedA};

use crate::ops::OpCtx;
use crate::tensor::Value;

/// One convolution's weights, one packed `A` per group.
#[derive(Debug)]
pub(crate) struct PackedWeights {
    pub groups: Vec<PackedA>,
}

struct Entry {
    source: Weak<Value>,
    layout: Layout,
    packed: Arc<PackedWeights>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Layout {
    isa: Isa,
    group: usize,
    shape: Vec<usize>,
}

fn cache() -> &'static Mutex<HashMap<usize, Entry>> {
    static CACHE: std::sync::OnceLock<Mutex<HashMap<usize, Entry>>> = std::sync::OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// The packed weights of input `input` of the node: from the cache when that input is a constant of
/// the running session and was packed before in this layout, else made by `pack` (and cached when
/// the input is a constant).
pub(super) fn packed_weights(
    ctx: &OpCtx,
    input: usize,
    isa: Isa,
    group: usize,
    shape: &[usize],
    pack: impl FnOnce() -> PackedWeights,
) -> Arc<PackedWeights> {
    let source = ctx
        .node
        .inputs
        .get(input)
        .and_then(|name| ctx.runner.constant(name));
    let Some(source) = source else {
        return Arc::new(pack());
    };
    let layout = Layout {
        isa,
        group,
        shape: shape.to_vec(),
    };
    if let Some(hit) = lookup(&source, &layout) {
        return hit;
    }
    let packed = Arc::new(pack());
    let mut entries = cache().lock().unwrap_or_else(|e| e.into_inner());
    entries.retain(|_, e| e.source.strong_count() > 0);
    entries.insert(
        Arc::as_ptr(&source) as usize,
        Entry {
            source: Arc::downgrade(&source),
            layout,
            packed: packed.clone(),
        },
    );
    packed
}

fn lookup(source: &Arc<Value>, layout: &Layout) -> Option<Arc<PackedWeights>> {
    let entries = cache().lock().unwrap_or_else(|e| e.into_inner());
    let e = entries.get(&(Arc::as_ptr(source) as usize))?;
    let same = e.source.upgrade().is_some_and(|s| Arc::ptr_eq(&s, source)) && e.layout == *layout;
    same.then(|| e.packed.clone())
}

/// Whether the cache holds `source` packed for `isa`, `group` and `shape` (for tests).
#[cfg(test)]
pub(super) fn is_cached(source: &Arc<Value>, isa: Isa, group: usize, shape: &[usize]) -> bool {
    let layout = Layout {
        isa,
        group,
        shape: shape.to_vec(),
    };
    lookup(source, &layout).is_some()
}
