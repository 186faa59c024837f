//! Weights packed once per initializer, for the packed GEMM: a convolution's `A` panels per group
//! (or `Wᵀ` for the one-pixel and direct paths), a MatMul's or Gemm's `B` panels, and a recurrent
//! layer's `W` (packed for the GEMM) and `R` (as transposed panels), for `rnn.rs`.
//!
//! Keyed, like the CUDA weight cache, by the identity of the initializer's `Arc` (which the session
//! gives a kernel through [`SubgraphRunner::constant`](crate::ops::SubgraphRunner::constant)), and
//! checked, not trusted: an entry keeps a `Weak` to the value it was packed from, and a lookup hits
//! only when that `Weak` still points at the same `Arc` and the layout (instruction set, group,
//! weight shape) is the one asked for. An address whose value was dropped and reused, a value fed
//! per run (no `Arc` given) or a different layout is packed again. Entries whose value is gone are
//! dropped at the next insertion, so the cache holds the packed weights of live sessions only.
use std::any::Any;
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
    packed: Arc<dyn Any + Send + Sync>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Layout {
    /// What the packing is for (a convolution's `A`, a GEMM's `B`, ...): one initializer may be
    /// packed for several uses.
    kind: &'static str,
    isa: Isa,
    group: usize,
    shape: Vec<usize>,
}

/// Entries keyed by the initializer's address and the packing's kind.
type Cache = Mutex<HashMap<(usize, &'static str), Entry>>;

fn cache() -> &'static Cache {
    static CACHE: std::sync::OnceLock<Cache> = std::sync::OnceLock::new();
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
    packed_constant(ctx, input, "conv", isa, group, shape, pack)
}

/// [`packed_weights`] for any packed form `P`, told apart by `kind` (with the instruction set, a
/// `group` or other small parameter, and the weight's shape).
pub(crate) fn packed_constant<P: Any + Send + Sync>(
    ctx: &OpCtx,
    input: usize,
    kind: &'static str,
    isa: Isa,
    group: usize,
    shape: &[usize],
    pack: impl FnOnce() -> P,
) -> Arc<P> {
    let source = ctx
        .node
        .inputs
        .get(input)
        .and_then(|name| ctx.runner.constant(name));
    let Some(source) = source else {
        return Arc::new(pack());
    };
    let layout = Layout {
        kind,
        isa,
        group,
        shape: shape.to_vec(),
    };
    if let Some(hit) = lookup(&source, &layout).and_then(|p| p.downcast::<P>().ok()) {
        return hit;
    }
    let packed = Arc::new(pack());
    let mut entries = cache().lock().unwrap_or_else(|e| e.into_inner());
    entries.retain(|_, e| e.source.strong_count() > 0);
    entries.insert(
        (Arc::as_ptr(&source) as usize, kind),
        Entry {
            source: Arc::downgrade(&source),
            layout,
            packed: packed.clone(),
        },
    );
    packed
}

fn lookup(source: &Arc<Value>, layout: &Layout) -> Option<Arc<dyn Any + Send + Sync>> {
    let entries = cache().lock().unwrap_or_else(|e| e.into_inner());
    let e = entries.get(&(Arc::as_ptr(source) as usize, layout.kind))?;
    let same = e.source.upgrade().is_some_and(|s| Arc::ptr_eq(&s, source)) && e.layout == *layout;
    same.then(|| e.packed.clone())
}

/// Whether the cache holds `source` packed for `isa`, `group` and `shape` (for tests, here and in
/// the session's, which check that a session hands the kernel its initializers as constants).
#[doc(hidden)]
pub fn is_cached(source: &Arc<Value>, isa: Isa, group: usize, shape: &[usize]) -> bool {
    is_cached_as("conv", source, isa, group, shape)
}

/// Whether the cache holds `source` packed as `kind` for `isa`, `group` and `shape` (for tests).
#[doc(hidden)]
pub fn is_cached_as(
    kind: &'static str,
    source: &Arc<Value>,
    isa: Isa,
    group: usize,
    shape: &[usize],
) -> bool {
    let layout = Layout {
        kind,
        isa,
        group,
        shape: shape.to_vec(),
    };
    lookup(source, &layout).is_some()
}
