//! What a session counts: verification checks, device memory, modules, transfers. Cheap atomics,
//! read with [`Session::counters`](crate::Session::counters).
//!
//! A profiled session (`SessionOptions::profile`, `quorum bench --profile`) times every top-level
//! node into `Counters::op_time`, read as `Session::op_profile` (time per op type and provider),
//! and into `Counters::node_time`, read as `Session::node_profile` (time per node by name,
//! `quorum bench --profile=nodes`, the form to lay beside onnxruntime's own profiler).
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use crate::backend::Arithmetic;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters a session exposes (`Session::counters`). Every field only grows.
#[derive(Default, Debug)]
pub struct Counters {
    pub verify_checks: AtomicU64,
    pub verify_mismatches: AtomicU64,
    /// Checks the oracles could not settle (they disagreed, or neither covers the node).
    pub verify_unsettled: AtomicU64,
    pub pool_hits: AtomicU64,
    pub pool_misses: AtomicU64,
    pub module_hits: AtomicU64,
    pub module_misses: AtomicU64,
    pub weight_bytes_uploaded: AtomicU64,
    pub h2d_bytes: AtomicU64,
    pub h2d_calls: AtomicU64,
    pub d2h_bytes: AtomicU64,
    pub d2h_calls: AtomicU64,
    /// Where a device run's host time goes around its copies, in nanoseconds: writing inputs into
    /// pinned staging, waiting for the device (a read-back's or the run's end), and rebuilding
    /// outputs from staging into host tensors (`quorum bench` prints them per run).
    pub stage_nanos: AtomicU64,
    pub wait_nanos: AtomicU64,
    pub readback_nanos: AtomicU64,
    pub kernel_launches: AtomicU64,
    /// Nodes placed on CUDA that declined at run time (their inputs' dtypes or shapes) and ran on the CPU.
    pub cuda_fallbacks: AtomicU64,
    /// Events recorded and waited on between streams (and for releases), over all runs.
    pub events_recorded: AtomicU64,
    pub events_waited: AtomicU64,
    /// Runs captured into a device graph, replays of captured graphs, and captures refused (the
    /// reasons are in `Session::graph_report`).
    pub graph_captures: AtomicU64,
    pub graph_replays: AtomicU64,
    pub graph_refusals: AtomicU64,
    /// Replays that left outputs staged as the next replay's inputs (`Session::run_carrying`).
    pub graph_carries: AtomicU64,
    /// CPU outputs that took a dying input's storage (the memory plan's in-place rule): views and
    /// elementwise ops written over their input.
    pub in_place_outputs: AtomicU64,
    /// The names of the nodes behind `cuda_fallbacks` (locked only when a kernel declines).
    pub fallback_nodes: Mutex<BTreeSet<String>>,
    /// The top-level nodes whose device kernel declared an arithmetic other than the standard
    /// promise in some run (TF32 operands, the tensor cores' truncated sums; locked only for those
    /// nodes), with what it declared, so that a later judge of their outputs (`quorum compare`)
    /// takes the kernel's declaration.
    pub declared_nodes: Mutex<BTreeMap<String, Arithmetic>>,
    /// Why each of them declined: node name → (op type, the kernel's reason, times).
    pub fallback_reasons: Mutex<BTreeMap<String, (String, String, u64)>>,
    /// What verification found, per op type (written only while verification is on).
    pub verify_by_op: Mutex<BTreeMap<String, OpVerification>>,
    /// Time per op type and where it ran (written only while `SessionOptions::profile` is on).
    pub op_time: Mutex<BTreeMap<(String, String), OpTime>>,
    /// Time per top-level node, keyed by its name (by its first output where it has none), with
    /// its op type and where it ran last (written only while `SessionOptions::profile` is on).
    pub node_time: Mutex<BTreeMap<String, NodeTime>>,
    /// Kernel time on the device per op type, from the device's own clock (written only while
    /// `SessionOptions::profile` is on, by a device that times its kernels: wgpu with timestamp
    /// queries). `calls` counts node launches, `nanos` the time of all their dispatches.
    pub device_time: Mutex<BTreeMap<String, OpTime>>,
}

/// The time the top-level nodes of one op type spent on one provider over a session's runs: wall
/// time on the calling thread from a node's start to its outputs (for a device node, the time to
/// enqueue its work, not the device's time).
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct OpTime {
    /// Node executions.
    pub calls: u64,
    pub nanos: u64,
}

/// The time one top-level node spent over a session's runs (see [`OpTime`] for what is timed).
#[derive(Default, Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NodeTime {
    /// The node's op type, with its domain where that is not the default one.
    pub op: String,
    /// Where its last execution ran: "cpu" or "device".
    pub provider: String,
    pub time: OpTime,
}

/// What verification found for one op type over a session's runs.
#[derive(Default, Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OpVerification {
    pub checked: u64,
    pub mismatched: u64,
    /// Checks the oracles could not settle (allowed by name, or in shadow mode).
    pub unsettled: u64,
    /// Why each unsettled or mismatched check was, with how many times.
    pub reasons: BTreeMap<String, u64>,
}

/// A plain copy of [`Counters`].
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CounterSnapshot {
    pub verify_checks: u64,
    pub verify_mismatches: u64,
    pub verify_unsettled: u64,
    pub pool_hits: u64,
    pub pool_misses: u64,
    pub module_hits: u64,
    pub module_misses: u64,
    pub weight_bytes_uploaded: u64,
    pub h2d_bytes: u64,
    pub h2d_calls: u64,
    pub d2h_bytes: u64,
    pub d2h_calls: u64,
    pub stage_nanos: u64,
    pub wait_nanos: u64,
    pub readback_nanos: u64,
    pub kernel_launches: u64,
    pub cuda_fallbacks: u64,
    pub events_recorded: u64,
    pub events_waited: u64,
    pub graph_captures: u64,
    pub graph_replays: u64,
    pub graph_refusals: u64,
    pub graph_carries: u64,
    pub in_place_outputs: u64,
}

impl Counters {
    pub fn bump(c: &AtomicU64, by: u64) {
        c.fetch_add(by, Ordering::Relaxed);
    }

    /// Runs `f`, adding its wall time to `c` (nanoseconds).
    pub fn time<T>(c: &AtomicU64, f: impl FnOnce() -> T) -> T {
        let t = std::time::Instant::now();
        let out = f();
        Counters::bump(c, t.elapsed().as_nanos() as u64);
        out
    }

    /// Records that `node`'s kernel declared `a` (joined with what it declared before).
    pub fn declared(&self, node: &str, a: Arithmetic) {
        if let Ok(mut names) = self.declared_nodes.lock() {
            let e = names.entry(node.to_string()).or_insert(a);
            *e = e.join(a);
        }
    }

    /// Records that `node` (of `op`), placed on an accelerator, declined its inputs at run time
    /// for `reason` and ran on the CPU.
    pub fn fell_back(&self, node: &str, op: &str, reason: &str) {
        Counters::bump(&self.cuda_fallbacks, 1);
        if let Ok(mut names) = self.fallback_nodes.lock()
            && !names.contains(node)
        {
            names.insert(node.to_string());
        }
        if let Ok(mut why) = self.fallback_reasons.lock() {
            why.entry(node.to_string())
                .or_insert_with(|| (op.to_string(), reason.to_string(), 0))
                .2 += 1;
        }
    }

    /// Records one verification outcome for `op`: `mismatch` and `unsettled` carry the reason.
    pub fn verified(&self, op: &str, mismatch: Option<&str>, unsettled: Option<&str>) {
        Counters::bump(&self.verify_checks, 1);
        if mismatch.is_some() {
            Counters::bump(&self.verify_mismatches, 1);
        }
        if unsettled.is_some() {
            Counters::bump(&self.verify_unsettled, 1);
        }
        let Ok(mut by_op) = self.verify_by_op.lock() else {
            return;
        };
        let entry = by_op.entry(op.to_string()).or_default();
        entry.checked += 1;
        entry.mismatched += mismatch.is_some() as u64;
        entry.unsettled += unsettled.is_some() as u64;
        if let Some(why) = mismatch.or(unsettled) {
            *entry.reasons.entry(why.to_string()).or_default() += 1;
        }
    }

    pub fn snapshot(&self) -> CounterSnapshot {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CounterSnapshot {
            verify_checks: g(&self.verify_checks),
            verify_mismatches: g(&self.verify_mismatches),
            verify_unsettled: g(&self.verify_unsettled),
            pool_hits: g(&self.pool_hits),
            pool_misses: g(&self.pool_misses),
            module_hits: g(&self.module_hits),
            module_misses: g(&self.module_misses),
            weight_bytes_uploaded: g(&self.weight_bytes_uploaded),
            h2d_bytes: g(&self.h2d_bytes),
            h2d_calls: g(&self.h2d_calls),
            d2h_bytes: g(&self.d2h_bytes),
            d2h_calls: g(&self.d2h_calls),
            stage_nanos: g(&self.stage_nanos),
            wait_nanos: g(&self.wait_nanos),
            readback_nanos: g(&self.readback_nanos),
            kernel_launches: g(&self.kernel_launches),
            cuda_fallbacks: g(&self.cuda_fallbacks),
            events_recorded: g(&self.events_recorded),
            events_waited: g(&self.events_waited),
            graph_captures: g(&self.graph_captures),
            graph_replays: g(&self.graph_replays),
            graph_carries: g(&self.graph_carries),
            graph_refusals: g(&self.graph_refusals),
            in_place_outputs: g(&self.in_place_outputs),
        }
    }
}
