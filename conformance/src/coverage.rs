//! Device coverage: how many of a case's nodes ran on an accelerator and how many on the CPU, per op.
//! An engine with a device reports it through [`crate::engine::Prepared::coverage`]; the runner keeps
//! it in the case's outcome and the reports add it up per corpus part and per op family.
use std::collections::BTreeMap;

use quorum::{NodePlacement, Provider};

/// Nodes on the device and on the CPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NodeCounts {
    pub device: usize,
    pub cpu: usize,
}

impl NodeCounts {
    pub fn add(&mut self, o: NodeCounts) {
        self.device += o.device;
        self.cpu += o.cpu;
    }

    pub fn total(&self) -> usize {
        self.device + self.cpu
    }

    /// "12/15 (80%)", or "-" when there were no nodes.
    pub fn describe(&self) -> String {
        if self.total() == 0 {
            return "-".into();
        }
        format!(
            "{}/{} ({:.0}%)",
            self.device,
            self.total(),
            100.0 * self.device as f64 / self.total() as f64
        )
    }
}

/// Where one case's top-level nodes ran, over all its runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Coverage {
    /// Op (`domain::Op` outside the default domain) → nodes of it on the device and on the CPU.
    pub by_op: BTreeMap<String, NodeCounts>,
    /// Nodes placed on the device whose kernel declined at run time, so that they ran on the CPU.
    pub fell_back: Vec<String>,
    /// Device node results judged by both oracles (strict verification), over all runs.
    pub checks: u64,
}

impl Coverage {
    /// From a session's plan-time placement (one entry per top-level node) and the nodes that fell
    /// back to the CPU at run time (in any run). Node names must be unique for the count to be exact:
    /// the cuda engine names unnamed nodes before building its session.
    pub fn from_placement(placement: &[NodePlacement], fell_back: &[String]) -> Coverage {
        let mut c = Coverage::default();
        for p in placement {
            let on_device = p.provider != Provider::Cpu && !fell_back.contains(&p.node);
            let e = c.by_op.entry(p.op.clone()).or_default();
            if on_device {
                e.device += 1;
            } else {
                e.cpu += 1;
            }
        }
        c.fell_back = fell_back.to_vec();
        c.fell_back.sort();
        c
    }

    pub fn total(&self) -> NodeCounts {
        let mut t = NodeCounts::default();
        self.by_op.values().for_each(|n| t.add(*n));
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(node: &str, op: &str, provider: Provider) -> NodePlacement {
        NodePlacement {
            node: node.into(),
            op: op.into(),
            provider,
            declined: None,
        }
    }

    #[test]
    fn placed_nodes_count_on_the_device_unless_they_fell_back() {
        let placement = [
            place("a", "Conv", Provider::Cuda),
            place("b", "Conv", Provider::Cuda),
            place("c", "Relu", Provider::Cuda),
            place("d", "NonZero", Provider::Cpu),
        ];
        let c = Coverage::from_placement(&placement, &["b".to_string()]);
        assert_eq!(c.by_op["Conv"], NodeCounts { device: 1, cpu: 1 });
        assert_eq!(c.by_op["Relu"], NodeCounts { device: 1, cpu: 0 });
        assert_eq!(c.by_op["NonZero"], NodeCounts { device: 0, cpu: 1 });
        assert_eq!(c.total(), NodeCounts { device: 2, cpu: 2 });
        assert_eq!(c.fell_back, ["b"]);
        assert_eq!(c.total().describe(), "2/4 (50%)");
        assert_eq!(NodeCounts::default().describe(), "-");
    }
}
