//! The schedule over random DAGs of small CPU-kernel nodes: every dependency that crosses streams
//! or leaves the device has an event, nothing is released before its last reader, streams stay
//! within the limit, and independent branches spread over streams.
use std::collections::HashMap;
use std::sync::Arc;

use super::*;
use crate::inputs::Rng;
use crate::ir::{Graph, Node, ValueInfo, ValueType};
use crate::ops::Registry;

fn node(i: usize, op: &str, inputs: Vec<String>) -> Node {
    Node {
        name: format!("n{i}"),
        op_type: op.into(),
        domain: String::new(),
        opset: 14,
        inputs,
        outputs: vec![format!("v{i}")],
        attrs: Default::default(),
    }
}

/// A random DAG: `n` nodes, each reading one or two earlier values (graph inputs included); a few
/// values are graph outputs.
fn random_plan(rng: &mut Rng, n: usize) -> Plan {
    let mut values = vec!["x".to_string(), "y".to_string()];
    let mut nodes = Vec::new();
    for i in 0..n {
        let pick = |rng: &mut Rng, values: &[String]| {
            // Prefer recent values (chains), sometimes reach back (fan-out, long edges).
            let k = values.len();
            let back = (rng.uniform().abs() * rng.uniform().abs() * k as f64) as usize;
            values[k - 1 - back.min(k - 1)].clone()
        };
        let node = if rng.uniform() > 0.0 {
            node(i, "Relu", vec![pick(rng, &values)])
        } else {
            let a = pick(rng, &values);
            let b = pick(rng, &values);
            node(i, "Add", vec![a, b])
        };
        nodes.push(node);
        values.push(format!("v{i}"));
    }
    let ty = ValueType::Tensor {
        dtype: Some(crate::tensor::DType::F32),
        shape: None,
    };
    let info = |name: &str| ValueInfo {
        name: name.into(),
        ty: ty.clone(),
    };
    let mut outputs = vec![info(&format!("v{}", n - 1))];
    if n > 3 {
        outputs.push(info(&format!("v{}", n / 2)));
    }
    let graph = Graph {
        name: "dag".into(),
        nodes,
        inputs: vec![info("x"), info("y")],
        outputs,
        ..Default::default()
    };
    Plan::compile(Arc::new(graph), Registry::cpu(), &Default::default()).unwrap()
}

/// Checks the schedule's promises against the plan.
fn check(plan: &Plan, on_device: &[bool], max: usize, sched: &Schedule) {
    let g = &*plan.graph;
    assert!(sched.streams <= max, "{} streams for {max}", sched.streams);
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (s, st) in plan.steps.iter().enumerate() {
        producer.insert(&g.nodes[st.node].outputs[0], s);
        let sc = &sched.steps[s];
        assert_eq!(sc.stream.is_some(), on_device[s], "step {s}");
        if let Some(stream) = sc.stream {
            assert!(stream < sched.streams);
        }
    }
    for (c, st) in plan.steps.iter().enumerate() {
        for v in &g.nodes[st.node].inputs {
            let Some(&p) = producer.get(v.as_str()) else {
                continue;
            };
            assert!(p < c, "a producer after its consumer");
            if !on_device[p] {
                continue;
            }
            let cross = sched.steps[c].stream != sched.steps[p].stream;
            if cross {
                assert!(
                    sched.steps[c].waits.contains(&p),
                    "step {c} reads step {p}'s output across streams without waiting"
                );
                assert!(
                    sched.steps[p].record,
                    "step {p} is waited on but records no event"
                );
            }
        }
    }
    // No release before the last reader, and multi-stream releases wait for every device reader.
    let mut last_reader: HashMap<&str, usize> = HashMap::new();
    for (s, st) in plan.steps.iter().enumerate() {
        for v in &g.nodes[st.node].inputs {
            last_reader.insert(v, s);
        }
    }
    for (s, sc) in sched.steps.iter().enumerate() {
        for (v, after) in &sc.releases {
            assert_eq!(last_reader.get(v.as_str()), Some(&s), "{v} released early");
            for (r, st) in plan.steps.iter().enumerate() {
                let reads = g.nodes[st.node].inputs.contains(v);
                if reads && on_device[r] {
                    assert!(
                        after.contains(&r),
                        "{v}: release does not wait for reader {r}"
                    );
                    assert!(sched.steps[r].record);
                }
            }
        }
        if sched.streams > 1 {
            for v in &plan.steps[s].frees {
                let device_use = plan.steps.iter().enumerate().any(|(r, st)| {
                    on_device[r]
                        && (g.nodes[st.node].inputs.contains(v)
                            || g.nodes[st.node].outputs.contains(v))
                });
                if device_use {
                    assert!(
                        sc.releases.iter().any(|(x, _)| x == v),
                        "{v} used on a device but released without events"
                    );
                }
            }
        }
    }
}

#[test]
fn random_dags_keep_every_promise() {
    let mut rng = Rng::new(0x5c4ed);
    for case in 0..400 {
        let n = 2 + (rng.uniform().abs() * 40.0) as usize;
        let plan = random_plan(&mut rng, n);
        let share = rng.uniform().abs();
        let on_device: Vec<bool> = (0..plan.steps.len())
            .map(|_| rng.uniform().abs() < 0.3 + 0.7 * share)
            .collect();
        for max in [1, 2, 4, 8] {
            let sched = build(&plan, &on_device, max);
            check(&plan, &on_device, max, &sched);
            if max == 1 {
                for (s, sc) in sched.steps.iter().enumerate() {
                    if on_device[s] {
                        assert!(
                            sc.waits.is_empty(),
                            "case {case}: one stream needs no device-to-device waits"
                        );
                    }
                }
            }
        }
    }
}

/// A deliberately broken schedule — one cross-stream wait dropped — fails the check.
#[test]
fn a_dropped_wait_is_caught() {
    let mut rng = Rng::new(7);
    let mut caught = 0;
    for _ in 0..100 {
        let plan = random_plan(&mut rng, 24);
        let on_device = vec![true; plan.steps.len()];
        let mut sched = build(&plan, &on_device, 4);
        let Some(s) = sched.steps.iter().position(|sc| !sc.waits.is_empty()) else {
            continue;
        };
        sched.steps[s].waits.pop();
        let broken = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            check(&plan, &on_device, 4, &sched)
        }));
        assert!(broken.is_err(), "a dropped wait went unnoticed");
        caught += 1;
    }
    assert!(
        caught > 10,
        "only {caught} schedules had a cross-stream wait"
    );
}

/// Four branches from one input, joined by one node: each branch on its own stream, the join waits
/// on the three it does not continue.
#[test]
fn branches_spread_over_streams() {
    let mut nodes = Vec::new();
    for b in 0..4 {
        nodes.push(node(2 * b, "Relu", vec!["x".into()]));
        nodes.push(node(2 * b + 1, "Relu", vec![format!("v{}", 2 * b)]));
    }
    let ends: Vec<String> = (0..4).map(|b| format!("v{}", 2 * b + 1)).collect();
    nodes.push(node(8, "Sum", ends));
    let ty = ValueType::Tensor {
        dtype: Some(crate::tensor::DType::F32),
        shape: None,
    };
    let graph = Graph {
        name: "branches".into(),
        nodes,
        inputs: vec![ValueInfo {
            name: "x".into(),
            ty: ty.clone(),
        }],
        outputs: vec![ValueInfo {
            name: "v8".into(),
            ty,
        }],
        ..Default::default()
    };
    let plan = Plan::compile(Arc::new(graph), Registry::cpu(), &Default::default()).unwrap();
    let on_device = vec![true; 9];
    let sched = build(&plan, &on_device, 4);
    check(&plan, &on_device, 4, &sched);
    assert_eq!(sched.streams, 4);
    let stream_of = |name: &str| {
        let s = plan
            .steps
            .iter()
            .position(|st| plan.graph.nodes[st.node].name == name)
            .unwrap();
        (s, sched.steps[s].stream.unwrap())
    };
    let heads: Vec<usize> = (0..4)
        .map(|b| stream_of(&format!("n{}", 2 * b)).1)
        .collect();
    let mut distinct = heads.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "branch heads on streams {heads:?}");
    for b in 0..4 {
        assert_eq!(
            stream_of(&format!("n{}", 2 * b)).1,
            stream_of(&format!("n{}", 2 * b + 1)).1,
            "a branch stays on its stream"
        );
    }
    let (join, _) = stream_of("n8");
    assert_eq!(sched.steps[join].waits.len(), 3);
    // On two streams the branches share them, and the join still waits on the other stream.
    let two = build(&plan, &on_device, 2);
    check(&plan, &on_device, 2, &two);
    assert_eq!(two.streams, 2);
}
