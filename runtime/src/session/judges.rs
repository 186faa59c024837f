//! Strict verification's judges: the device nodes of a strict run are judged by both oracles on
//! worker threads while the run goes on, and the run returns only after every judgement is in.
//!
//! Judged one by one on the run's thread, a transformer's strict run was the sum of its nodes'
//! oracle times, most of them elementwise nodes each oracle evaluates on one thread (bert-base b8:
//! 50.8 s on the H200's host). The judgements are independent of each other (each takes the node's
//! own inputs, copied out as the run produced them), so they go to a pool as the run passes each node;
//! the run's later nodes go on with the device's values, as strict does after an agreement anyway.
//! Nothing wrong is returned: the run's outputs are handed back only after every node was judged,
//! and the first node in the run's order whose check fails strict's policy (a mismatch, or an
//! unsettled check of an op not allowed unchecked) ends the run with its error, the same error the
//! node-by-node run gave. Shadow stays node by node: it replaces a wrong result with the CPU's before
//! later nodes read it.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::backend::Arithmetic;
use crate::ir::Node;
use crate::tensor::Value;
use crate::verify::{Check, check_declared};

/// One node to judge: its place in the run, the node, its inputs and outputs.
struct Job {
    seq: usize,
    node: Node,
    operands: Arithmetic,
    inputs: Vec<Option<Arc<Value>>>,
    outputs: Vec<Arc<Value>>,
}

/// A run's pool of judges.
pub(super) struct Judges {
    next: AtomicUsize,
    tx: Mutex<Option<SyncSender<Job>>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    verdicts: Arc<Mutex<Vec<(usize, Node, Check)>>>,
}

/// Jobs waiting beyond the busy judges: the run stops to wait past this many (each holds a node's
/// inputs and outputs on the host).
const BACKLOG: usize = 64;

impl Judges {
    /// `threads` judges (at least one).
    pub fn start(threads: usize) -> Judges {
        let (tx, rx) = sync_channel::<Job>(BACKLOG);
        let rx = Arc::new(Mutex::new(rx));
        let verdicts = Arc::new(Mutex::new(Vec::new()));
        let workers = (0..threads.max(1))
            .filter_map(|i| {
                let (rx, verdicts) = (rx.clone(), verdicts.clone());
                std::thread::Builder::new()
                    .name(format!("quorum-judge-{i}"))
                    .spawn(move || judge(&rx, &verdicts))
                    .ok()
            })
            .collect::<Vec<_>>();
        Judges {
            next: AtomicUsize::new(0),
            tx: Mutex::new((!workers.is_empty()).then_some(tx)),
            workers: Mutex::new(workers),
            verdicts,
        }
    }

    /// Hands a node to the judges; `false` when there are none (the caller judges it itself).
    pub fn send(
        &self,
        node: &Node,
        operands: Arithmetic,
        inputs: Vec<Option<Arc<Value>>>,
        outputs: Vec<Arc<Value>>,
    ) -> bool {
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let Some(tx) = tx else {
            return false;
        };
        let job = Job {
            seq: self.next.fetch_add(1, Ordering::Relaxed),
            node: node.clone(),
            operands,
            inputs,
            outputs,
        };
        tx.send(job).is_ok()
    }

    /// Waits for every judgement; the verdicts in the run's order.
    pub fn finish(&self) -> Vec<(Node, Check)> {
        drop(self.tx.lock().unwrap_or_else(|e| e.into_inner()).take());
        for w in self
            .workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            let _ = w.join();
        }
        let mut v = std::mem::take(&mut *self.verdicts.lock().unwrap_or_else(|e| e.into_inner()));
        v.sort_by_key(|(seq, _, _)| *seq);
        v.into_iter().map(|(_, n, c)| (n, c)).collect()
    }
}

impl Drop for Judges {
    fn drop(&mut self) {
        self.finish();
    }
}

fn judge(rx: &Mutex<Receiver<Job>>, verdicts: &Mutex<Vec<(usize, Node, Check)>>) {
    loop {
        let job = match rx.lock().unwrap_or_else(|e| e.into_inner()).recv() {
            Ok(j) => j,
            Err(_) => return,
        };
        let refs: Vec<Option<&Value>> = job.inputs.iter().map(|v| v.as_deref()).collect();
        let outs: Vec<Value> = job.outputs.iter().map(|v| (**v).clone()).collect();
        let c = check_declared(&job.node, &refs, &outs, job.operands);
        verdicts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((job.seq, job.node, c));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;

    fn add(name: &str) -> Node {
        Node {
            name: name.into(),
            op_type: "Add".into(),
            domain: String::new(),
            opset: 14,
            inputs: vec!["a".into(), "b".into()],
            outputs: vec!["y".into()],
            attrs: Default::default(),
        }
    }

    fn f32s(v: Vec<f32>) -> Arc<Value> {
        Arc::new(Value::Tensor(Tensor::from_f32(&[v.len()], v).unwrap()))
    }

    /// Verdicts come back in the order the nodes were sent, whatever order the judges finished in,
    /// each the check of its own node: the wrong one (a sum off by 0.5) is where it was sent.
    #[test]
    fn verdicts_come_back_in_the_runs_order() {
        let judges = Judges::start(4);
        for k in 0..40 {
            let (a, b) = (vec![k as f32, 1.5, -2.0], vec![0.25, k as f32, 3.0]);
            let mut sum: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
            if k == 17 {
                sum[1] += 0.5;
            }
            assert!(judges.send(
                &add(&format!("n{k}")),
                Arithmetic::EXACT,
                vec![Some(f32s(a)), Some(f32s(b))],
                vec![f32s(sum)]
            ));
        }
        let v = judges.finish();
        assert_eq!(v.len(), 40);
        for (k, (node, c)) in v.iter().enumerate() {
            assert_eq!(node.name, format!("n{k}"));
            assert_eq!(matches!(c, Check::Mismatch { .. }), k == 17, "{k}: {c:?}");
        }
    }
}
