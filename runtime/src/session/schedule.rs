//! Streams and events: a plan-time pass over the placed plan that puts each device step on a stream
//! and turns every dependency that crosses streams (or leaves the device for the host) into an event.
//!
//! Streams follow chains: a device step continues the stream of the first device producer whose
//! stream it would extend (the producer is that stream's last step so far); otherwise — a second
//! consumer of a fan-out, or a step fed only by the host — it takes the stream that has been idle
//! longest. Independent branches (inception modules, densenet blocks, attention heads) so land on
//! different streams, and a join waits on the events of the branches it does not continue.
//!
//! Events are named by the step that records them (a step records at most one, after its launch).
//! A step records when something must wait for it: a device consumer on another stream, a host
//! consumer, or the release of a value it read (the buffer may be reused by any stream once every
//! reader is done).
use std::collections::HashMap;

use crate::plan::{Plan, reads};

/// The schedule of one plan.
#[derive(Debug, Clone, Default)]
pub struct Schedule {
    /// Streams used (at most the number asked for; 0 when no step is on a device).
    pub streams: usize,
    /// One entry per plan step, in plan order.
    pub steps: Vec<StepSchedule>,
}

/// Where one step runs and what it waits for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepSchedule {
    /// The stream of a device step (`None`: the step runs on the host).
    pub stream: Option<usize>,
    /// Steps (their events) that must be complete before this one: device producers on other streams
    /// for a device step, every device producer for a host step.
    pub waits: Vec<usize>,
    /// Whether this step records an event after its launch.
    pub record: bool,
    /// For each value this step is the last reader of: the steps whose events must complete before
    /// the value's buffer is reused (every device step that read it, and its producer). Empty on a
    /// single stream, where every use is in order.
    pub releases: Vec<(String, Vec<usize>)>,
}

/// Builds the schedule of `plan` for at most `max_streams` streams (at least 1). `on_device[i]`:
/// whether plan step `i` was placed on a device (all on one device; several accelerators in one
/// session share this numbering).
pub fn build(plan: &Plan, on_device: &[bool], max_streams: usize) -> Schedule {
    let g = &*plan.graph;
    let n = plan.steps.len();
    let max_streams = max_streams.max(1);
    // Which step produces each value.
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (s, step) in plan.steps.iter().enumerate() {
        for o in g.nodes[step.node].outputs.iter().filter(|o| !o.is_empty()) {
            producer.insert(o, s);
        }
    }
    let inputs: Vec<Vec<String>> = plan
        .steps
        .iter()
        .map(|st| reads(&g.nodes[st.node], &plan.subplans))
        .collect();
    let mut steps = vec![StepSchedule::default(); n];
    // The last step placed on each stream, and when it was placed.
    let mut tail: Vec<Option<usize>> = Vec::new();
    for s in 0..n {
        if !on_device[s] {
            continue;
        }
        let preds: Vec<usize> = inputs[s]
            .iter()
            .filter_map(|v| producer.get(v.as_str()).copied())
            .filter(|&p| on_device[p])
            .collect();
        let continued = preds
            .iter()
            .copied()
            .find(|&p| steps[p].stream.is_some_and(|st| tail[st] == Some(p)));
        let stream = match continued {
            Some(p) => steps[p].stream.unwrap_or(0),
            None if tail.len() < max_streams => {
                tail.push(None);
                tail.len() - 1
            }
            // The stream idle longest: its last step is the earliest.
            None => (0..tail.len()).min_by_key(|&st| tail[st]).unwrap_or(0),
        };
        tail[stream] = Some(s);
        steps[s].stream = Some(stream);
    }
    // Waits: a device step waits on device producers on other streams; a host step on every device
    // producer (its values come down to the host).
    for s in 0..n {
        let mut waits: Vec<usize> = Vec::new();
        for v in &inputs[s] {
            let Some(&p) = producer.get(v.as_str()) else {
                continue;
            };
            if !on_device[p] {
                continue;
            }
            let cross = match steps[s].stream {
                Some(st) => steps[p].stream != Some(st),
                None => true,
            };
            if cross && !waits.contains(&p) {
                waits.push(p);
            }
        }
        for &p in &waits {
            steps[p].record = true;
        }
        steps[s].waits = waits;
    }
    // Releases: after a value's last reader, once every device reader (and a device producer) is
    // done; each of those records an event. On one stream every use is in order already.
    let several = tail.len() > 1;
    for (s, step) in plan.steps.iter().enumerate().filter(|_| several) {
        for v in &step.frees {
            let mut after: Vec<usize> = (0..=s)
                .filter(|&r| on_device[r] && inputs[r].iter().any(|x| x == v))
                .collect();
            if let Some(&p) = producer.get(v.as_str())
                && on_device[p]
                && !after.contains(&p)
            {
                after.push(p);
            }
            after.sort_unstable();
            if after.is_empty() {
                continue;
            }
            for &r in &after {
                steps[r].record = true;
            }
            steps[s].releases.push((v.clone(), after));
        }
    }
    Schedule {
        streams: tail.len(),
        steps,
    }
}

#[cfg(test)]
mod tests;
