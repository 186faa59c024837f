//! Kernel timing by timestamp queries (`SessionOptions::profile` on an adapter with
//! `TIMESTAMP_QUERY`): while a run times its kernels, each dispatch goes in a compute pass of its
//! own whose beginning and end write a timestamp; a submission's stamps are resolved into a buffer,
//! copied to a readback buffer, and read once the queue is done, each pair's difference added to
//! its op's device time (`Counters::device_time`).
//!
//! A pass per dispatch keeps the stamps on the kernels alone, but it also puts a pass boundary
//! between every two dispatches, so a timed run's wall time is not an untimed run's: the per-op
//! device times are the figure to read, not the run's latency.
use std::collections::BTreeMap;
use std::sync::Arc;

use quorum_core::counters::{Counters, OpTime};

/// Queries in one query set (wgpu's limit).
pub const MAX_QUERIES: u32 = 4096;

/// The device time of each labelled dispatch, in nanoseconds: `stamps` holds a beginning and an
/// end per dispatch, in dispatch order, in ticks of `period_ns`. A pair whose end precedes its
/// beginning (clocks that are not monotonic across passes on some drivers) counts as zero.
pub fn durations(stamps: &[u64], period_ns: f32) -> Vec<u64> {
    stamps
        .chunks_exact(2)
        .map(|p| (p[1].saturating_sub(p[0]) as f64 * period_ns as f64).round() as u64)
        .collect()
}

/// Adds each dispatch's duration to its label's device time: one call per distinct node launch
/// (consecutive dispatches of one launch share a `launch` number), the nanoseconds of all its
/// dispatches.
pub fn attribute(labels: &[(Arc<str>, u64)], nanos: &[u64], into: &mut BTreeMap<String, OpTime>) {
    let mut last_launch = None;
    for ((label, launch), &ns) in labels.iter().zip(nanos) {
        let e = into.entry(label.to_string()).or_default();
        if last_launch != Some(*launch) {
            e.calls += 1;
            last_launch = Some(*launch);
        }
        e.nanos += ns;
    }
}

/// Stamps of one submission waiting to be read: the readback buffer they were copied into, and the
/// label and launch number of each timed dispatch, in order.
pub struct Pending {
    pub staging: Arc<super::memory::WBuf>,
    pub bytes: u64,
    pub labels: Vec<(Arc<str>, u64)>,
}

/// Reads the stamps of `p` (its submission done) out of `bytes` and adds them to `counters`.
pub fn record(p: &Pending, bytes: &[u8], period_ns: f32, counters: &Counters) {
    let stamps: Vec<u64> = bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect();
    let nanos = durations(&stamps, period_ns);
    let mut m = counters
        .device_time
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    attribute(&p.labels, &nanos, &mut m);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    #[test]
    fn pairs_of_stamps_become_scaled_durations() {
        // Two dispatches, 1 tick = 2.5 ns; a pair out of order counts as zero, not as a wrap.
        assert_eq!(
            durations(&[100, 140, 500, 900, 7, 3], 2.5),
            vec![100, 1000, 0]
        );
    }

    #[test]
    fn each_dispatch_time_goes_to_its_own_op_and_a_launch_counts_once() {
        let labels = vec![
            (label("MatMul"), 1),
            (label("MatMul"), 1), // a second dispatch of the same launch (split-K reduction)
            (label("Relu"), 2),
            (label("MatMul"), 3),
        ];
        let mut m = BTreeMap::new();
        attribute(&labels, &[700, 50, 9, 600], &mut m);
        assert_eq!(
            m["MatMul"],
            OpTime {
                calls: 2,
                nanos: 1350
            }
        );
        assert_eq!(m["Relu"], OpTime { calls: 1, nanos: 9 });

        // The broken variant the attribution must not be: each duration given to the label after
        // it (an off-by-one between stamps and labels) moves MatMul's time onto Relu.
        let mut shifted = BTreeMap::new();
        attribute(&labels[1..], &[700, 50, 9], &mut shifted);
        assert_ne!(shifted.get("Relu"), m.get("Relu"));
    }
}
