//! What a session tells about itself: placement, folding and rewrites, profiles, counters,
//! verification, command logs, capture and dispatch reports.
use std::collections::BTreeMap;

use super::{
    GraphRecord, NodePlacement, Session, SessionOptions, VerifyMode, dispatch, sampling, schedule,
};
use crate::counters::{CounterSnapshot, OpVerification};
use crate::ir::Model;

impl Session {
    /// Where each top-level node runs, in execution order.
    pub fn placement(&self) -> &[NodePlacement] {
        &self.placement
    }

    /// The nodes whose inputs were all constants: run once when the session was built, their
    /// outputs kept as initializers (`SessionOptions::fold_constants`).
    pub fn folded_nodes(&self) -> &[String] {
        &self.folded
    }

    /// The compiled plan of the top-level graph (as rewritten and folded).
    #[cfg(test)]
    pub(crate) fn plan(&self) -> &crate::plan::Plan {
        &self.plan
    }

    /// The graph rewrites applied when the session was built (`SessionOptions::optimize`; applied
    /// only when every node runs on the CPU).
    pub fn rewrites(&self) -> &[crate::optimize::Rewrite] {
        &self.rewrites
    }

    /// Time per (op type, provider) over the runs so far, most first: empty unless
    /// `SessionOptions::profile` is on.
    pub fn op_profile(&self) -> Vec<(String, String, crate::counters::OpTime)> {
        let map = self
            .counters
            .op_time
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default();
        let mut v: Vec<_> = map.into_iter().map(|((op, p), t)| (op, p, t)).collect();
        v.sort_by(|a, b| b.2.nanos.cmp(&a.2.nanos).then_with(|| a.0.cmp(&b.0)));
        v
    }

    /// Time per top-level node over the runs so far, most first: (node name, or its first output
    /// where it has none; its time). Empty unless `SessionOptions::profile` is on.
    pub fn node_profile(&self) -> Vec<(String, crate::counters::NodeTime)> {
        let map = self
            .counters
            .node_time
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default();
        let mut v: Vec<_> = map.into_iter().collect();
        v.sort_by(|a, b| {
            b.1.time
                .nanos
                .cmp(&a.1.time.nanos)
                .then_with(|| a.0.cmp(&b.0))
        });
        v
    }

    /// Kernel time on the device per op type over the profiled runs, most first (empty unless
    /// `SessionOptions::profile` is on and a device times its kernels; see `Counters::device_time`).
    pub fn device_profile(&self) -> Vec<(String, crate::counters::OpTime)> {
        let map = self
            .counters
            .device_time
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default();
        let mut v: Vec<_> = map.into_iter().collect();
        v.sort_by(|a, b| b.1.nanos.cmp(&a.1.nanos).then_with(|| a.0.cmp(&b.0)));
        v
    }

    /// The verification mode in force (after the `QUORUM_VERIFY` override).
    pub fn verify_mode(&self) -> VerifyMode {
        self.verify
    }

    /// The session's counters so far (every run, every thread).
    pub fn counters(&self) -> CounterSnapshot {
        self.counters.snapshot()
    }

    /// The top-level nodes whose device kernel declared an arithmetic other than the standard
    /// promise in some run so far (TF32 operands, the tensor cores' sums), with what it declared:
    /// their outputs are judged under that declaration.
    pub fn declared_nodes(&self) -> std::collections::BTreeMap<String, crate::backend::Arithmetic> {
        self.counters
            .declared_nodes
            .lock()
            .map(|n| n.clone())
            .unwrap_or_default()
    }

    /// The top-level nodes placed on an accelerator whose kernel declined their inputs at run time
    /// (so they ran on the CPU) in some run so far.
    pub fn fallback_nodes(&self) -> Vec<String> {
        self.counters
            .fallback_nodes
            .lock()
            .map(|n| n.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Why kernels declined at run time so far, grouped: (op type, the kernel's reason, nodes, times),
    /// most times first.
    pub fn fallback_reasons(&self) -> Vec<(String, String, usize, u64)> {
        let mut grouped: BTreeMap<(String, String), (usize, u64)> = BTreeMap::new();
        if let Ok(why) = self.counters.fallback_reasons.lock() {
            for (op, reason, times) in why.values() {
                let g = grouped.entry((op.clone(), reason.clone())).or_default();
                g.0 += 1;
                g.1 += times;
            }
        }
        let mut v: Vec<_> = grouped
            .into_iter()
            .map(|((op, reason), (nodes, times))| (op, reason, nodes, times))
            .collect();
        v.sort_by_key(|r| std::cmp::Reverse(r.3));
        v
    }

    /// What verification found so far, per op type (empty while verification is off).
    pub fn verification(&self) -> BTreeMap<String, OpVerification> {
        self.counters
            .verify_by_op
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default()
    }

    /// The device of the session's first accelerator, in words, when it uses one.
    pub fn device_name(&self) -> Option<String> {
        self.devices.first().map(|d| d.session.device_name())
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    /// What the mixed-precision conversion did, where `SessionOptions::precision` asked for one
    /// and the model had f32 values to convert.
    pub fn conversion(&self) -> Option<&crate::mixed::Conversion> {
        self.conversion.as_ref()
    }

    pub fn options(&self) -> &SessionOptions {
        &self.options
    }

    /// The streams and events of the top-level plan, step by step in execution order.
    pub fn schedule(&self) -> &schedule::Schedule {
        &self.schedule
    }

    /// The command logs of the runs so far (one per run, in the order they ended), taken out of the
    /// session; empty unless `SessionOptions::command_log` is on.
    pub fn take_command_logs(&self) -> Vec<Vec<crate::cmdlog::Command>> {
        self.log.as_ref().map(|l| l.take_runs()).unwrap_or_default()
    }

    /// Every run's commands so far as they were issued across threads, each with its run's number
    /// (runs numbered from 0 as they started), taken out of the session; empty unless
    /// `SessionOptions::command_log` is on.
    pub fn take_session_log(&self) -> Vec<(u64, crate::cmdlog::Command)> {
        self.log
            .as_ref()
            .map(|l| l.take_session())
            .unwrap_or_default()
    }

    /// Why runs of this session cannot be captured into a device graph (`None`: they can be, once
    /// warm, when nothing in the run refuses; see [`Session::graph_report`]).
    pub fn capture_blocker(&self) -> Option<&str> {
        self.capture_blocker.as_deref()
    }

    /// Graph capture per input-shape key: warming, replaying (with eager and replay medians where
    /// `auto` measured them), refused with the reason, or slower than eager.
    pub fn graph_report(&self) -> Vec<GraphRecord> {
        self.graphs.report()
    }

    /// Which measured threshold table `auto` uses for each accelerator, or why the conservative
    /// floor stands in (empty unless `min_device_elements` > 0, as `auto` sets it).
    pub fn dispatch_notes(&self) -> &[String] {
        &self.dispatch_notes
    }

    /// For each top-level node in execution order: the last `auto` decision made for it in a run
    /// so far (CPU or its device, and the rule with the threshold that decided), `None` where
    /// `auto` decided nothing (a CPU node, an explicit provider, no run yet).
    pub fn dispatch_decisions(&self) -> Vec<Option<dispatch::Decision>> {
        self.dispatch.decisions()
    }

    /// `auto`'s whole-model trial (`trial`): each placement's fastest timed run and the one
    /// chosen, or how far the trial got; `None` where there is none (not `auto`, or graph capture
    /// on).
    pub fn auto_trial(&self) -> Option<String> {
        self.dispatch.trial.report()
    }

    /// What sampled verification found so far (`None` without it); with `wait`, after its worker
    /// has judged every sample sent so far.
    pub fn sample_report(&self, wait: bool) -> Option<sampling::SampleReport> {
        self.sampler.as_ref().map(|s| s.report(wait))
    }

    /// How many first runs `auto`'s trial takes (0 without one): benchmarks warm up past them.
    pub fn auto_trial_runs(&self) -> usize {
        self.dispatch.trial.runs()
    }
}
