//! What `auto` placement decides for each node at run time, and from what.
//!
//! A node an accelerator claimed may still run better on the CPU: when its inputs are on the host,
//! the device must first receive them, and a small kernel costs more in launch and transfer than it
//! saves. The decision needs three things about the node at the shapes it actually runs with: its
//! op *family* (elementwise, matmul, conv...), its *shape class* within the family (a GEMV is not a
//! GEMM; a depthwise convolution is not a 3×3 one) and its *work* (elements, or multiply-adds for
//! matmul and conv). The measured crossover for that family, class and dtype on the adapter the
//! node was placed on (`thresholds`) then says CPU or device; without a measurement the
//! conservative floor of the past (`AUTO_MIN_DEVICE_ELEMENTS`) decides, and the decision says so.
//!
//! The same functions classify the benchmark matrix's points (`quorum-matrix`), so a threshold is
//! always compared with the size it was measured in.
use std::sync::{Arc, Mutex};

use super::residency::Slot;
use super::thresholds::{Crossover, Status, ThresholdTable};
use super::trial::{Trial, Whole};
use crate::ir::{Attr, Node};
use crate::tensor::DType;

/// The op family of an ONNX op type, as the matrix groups ops (one benchmark shape set and one
/// threshold per family and class).
pub fn family(op_type: &str) -> &'static str {
    match op_type {
        "MatMul" | "Gemm" => "matmul",
        "Conv" | "ConvTranspose" => "conv",
        "MaxPool" | "AveragePool" | "GlobalAveragePool" | "GlobalMaxPool" | "LpPool" => "pool",
        "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL1"
        | "ReduceL2" | "ReduceSumSquare" | "ReduceLogSum" | "ReduceLogSumExp" | "ArgMax"
        | "ArgMin" => "reduce",
        "Softmax" | "LogSoftmax" | "Hardmax" => "softmax",
        "BatchNormalization"
        | "InstanceNormalization"
        | "LayerNormalization"
        | "GroupNormalization"
        | "LRN" => "norm",
        "Transpose" | "Concat" | "Split" | "Slice" | "Expand" | "Pad" | "Tile" | "DepthToSpace"
        | "SpaceToDepth" | "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" | "Identity"
        | "Dropout" | "ConstantOfShape" => "movement",
        "Gather" | "GatherElements" | "ScatterElements" | "OneHot" | "Trilu" | "Range" => "index",
        "Cast" | "CastLike" => "cast",
        "Resize" => "resize",
        _ => "elementwise",
    }
}

/// What one node is at the shapes it runs with: the key of its threshold and its size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSize {
    pub family: &'static str,
    pub class: &'static str,
    /// The first input's dtype (the one the kernel computes in), when known.
    pub dtype: Option<DType>,
    /// Elements, or multiply-adds for matmul and conv (see [`work_unit`]).
    pub work: u64,
    /// A generator (ConstantOfShape): its work is what it makes from a few input elements, so a
    /// device run uploads next to nothing and the crossover of device-resident inputs applies.
    pub generated: bool,
}

/// The unit [`NodeSize::work`] counts in for a family.
pub fn work_unit(family: &str) -> &'static str {
    match family {
        "matmul" | "conv" => "multiply-adds",
        _ => "elements",
    }
}

fn elems(s: &[usize]) -> u64 {
    s.iter().fold(1u64, |n, &d| n.saturating_mul(d as u64))
}

fn int_attr(node: &Node, name: &str, default: i64) -> i64 {
    match node.attrs.get(name) {
        Some(Attr::Int(v)) => *v,
        _ => default,
    }
}

/// Classifies `node` from its inputs' shapes (`None`: omitted or not a tensor) and first input's
/// dtype. `generated`: the element count a generator such as ConstantOfShape makes from its small
/// inputs (0 for others), which is its size.
pub fn measure(
    node: &Node,
    shapes: &[Option<&[usize]>],
    dtype: Option<DType>,
    generated: u64,
) -> NodeSize {
    let fam = family(&node.op_type);
    let largest = shapes
        .iter()
        .flatten()
        .map(|s| elems(s))
        .max()
        .unwrap_or(0)
        .max(generated);
    let (class, work) = match fam {
        "matmul" => matmul_class(node, shapes).unwrap_or(("gemm", largest)),
        "conv" => conv_class(node, shapes).unwrap_or(("spatial", largest)),
        "pool" if node.op_type.starts_with("Global") => ("global", largest),
        "pool" => ("window", largest),
        "elementwise" => {
            let present: Vec<&[usize]> = shapes.iter().flatten().copied().collect();
            let class = match present.len() {
                0 | 1 => "unary",
                _ if present.iter().all(|s| *s == present[0]) => "same",
                _ => "broadcast",
            };
            (class, largest)
        }
        _ => ("rows", largest),
    };
    NodeSize {
        family: fam,
        class,
        dtype,
        work,
        generated: generated > 0,
    }
}

/// MatMul and Gemm: `gemv` when one side is a vector (M or N is 1), `gemm` otherwise; work is
/// batch·M·N·K.
fn matmul_class(node: &Node, shapes: &[Option<&[usize]>]) -> Option<(&'static str, u64)> {
    let a = (*shapes.first()?)?;
    let b = (*shapes.get(1)?)?;
    let (m, k, n, batch) = if node.op_type == "Gemm" {
        if a.len() != 2 || b.len() != 2 {
            return None;
        }
        let (m, k) = if int_attr(node, "transA", 0) != 0 {
            (a[1], a[0])
        } else {
            (a[0], a[1])
        };
        let n = if int_attr(node, "transB", 0) != 0 {
            b[0]
        } else {
            b[1]
        };
        (m, k, n, 1)
    } else {
        let m = if a.len() >= 2 { a[a.len() - 2] } else { 1 };
        let k = *a.last()?;
        let n = if b.len() >= 2 { *b.last()? } else { 1 };
        let batch = if a.len() > 2 {
            elems(&a[..a.len() - 2])
        } else if b.len() > 2 {
            elems(&b[..b.len() - 2])
        } else {
            1
        };
        (m, k, n, batch)
    };
    let class = if m == 1 || n == 1 { "gemv" } else { "gemm" };
    Some((class, batch.saturating_mul(elems(&[m, n, k]))))
}

/// Conv: `depthwise` (a group per input channel), `pointwise` (a 1×1 kernel) or `spatial`; work is
/// the multiply-adds at stride 1: batch·spatial·M·(C/group)·kernel.
fn conv_class(node: &Node, shapes: &[Option<&[usize]>]) -> Option<(&'static str, u64)> {
    let x = (*shapes.first()?)?;
    let w = (*shapes.get(1)?)?;
    if x.len() < 3 || w.len() != x.len() {
        return None;
    }
    let group = int_attr(node, "group", 1).max(1) as usize;
    let kernel = &w[2..];
    let class = if group > 1 && group == x[1] {
        "depthwise"
    } else if kernel.iter().all(|&k| k == 1) {
        "pointwise"
    } else {
        "spatial"
    };
    let spatial = elems(&x[2..]).saturating_mul(x[0] as u64);
    Some((class, spatial.saturating_mul(elems(w))))
}

/// The element count ConstantOfShape makes from its host shape input, so that `auto` judges it by
/// its output: light models build 100 MB of weights with it on every run, which on the CPU would
/// then go up the bus to their consumers.
pub(super) fn generated_elements(node: &Node, slots: &[Option<&Slot>]) -> u64 {
    if node.op_type != "ConstantOfShape" {
        return 0;
    }
    match slots.first() {
        Some(Some(Slot::Host { value, .. })) => value
            .as_tensor()
            .and_then(|t| crate::ops::cast::to_i64_vec(t).ok())
            .map(|dims| {
                dims.iter()
                    .fold(1u64, |n, &d| n.saturating_mul(d.max(0) as u64))
            })
            .unwrap_or(0),
        _ => 0,
    }
}

/// One `auto` decision, as `quorum info` shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Decision {
    /// The node runs on its accelerator (false: `auto` kept it on the CPU).
    pub device: bool,
    /// The rule that decided, in words: the residency, the node's size and the threshold compared.
    pub rule: String,
}

/// Where a session's `auto` decisions come from, per accelerator.
pub(super) struct Dispatch {
    /// 0: every claimed node goes to its device (an explicit provider list); otherwise `auto` with
    /// this conservative floor (elements) wherever no measurement decides.
    floor: usize,
    /// The measured table of each of the session's accelerators (by device index), if any.
    tables: Vec<Option<Arc<ThresholdTable>>>,
    /// The last decision for each top-level step (by step index), for reports.
    decisions: Mutex<Vec<Option<Decision>>>,
    /// The whole-model trial (`super::trial`): which placement each run uses.
    pub trial: Trial,
}

impl Dispatch {
    /// `trial`: time whole-model placements over the first runs (`auto` without graph capture).
    pub fn new(
        floor: usize,
        tables: Vec<Option<Arc<ThresholdTable>>>,
        steps: usize,
        trial: bool,
    ) -> Dispatch {
        Dispatch {
            floor,
            tables,
            decisions: Mutex::new(vec![None; steps]),
            trial: Trial::new(trial && floor > 0),
        }
    }

    /// Whether `auto` keeps top-level step `step` (claimed by device `device`) on the CPU for
    /// a run placing its nodes as `whole`; the decision is kept for [`Dispatch::decisions`].
    pub fn keep_on_cpu(
        &self,
        step: usize,
        device: usize,
        node: &Node,
        slots: &[Option<&Slot>],
        whole: Whole,
    ) -> bool {
        if self.floor == 0 {
            return false;
        }
        if whole != Whole::Nodes {
            // Every node of the run alike: the kept decision is rebuilt only when it changes.
            let device = whole == Whole::Device;
            if let Ok(mut all) = self.decisions.lock()
                && let Some(s) = all.get_mut(step)
                && !s
                    .as_ref()
                    .is_some_and(|d| d.device == device && d.rule == whole.rule())
            {
                *s = Some(Decision {
                    device,
                    rule: whole.rule().into(),
                });
            }
            return !device;
        }
        let d = self.decide(device, node, slots);
        let on_cpu = !d.device;
        if let Ok(mut all) = self.decisions.lock()
            && let Some(s) = all.get_mut(step)
            && s.as_ref() != Some(&d)
        {
            *s = Some(d);
        }
        on_cpu
    }

    fn decide(&self, device: usize, node: &Node, slots: &[Option<&Slot>]) -> Decision {
        if slots.iter().flatten().any(|s| s.on_device()) {
            return Decision {
                device: true,
                rule: "an input is already on the device (moving it back costs a download)".into(),
            };
        }
        let shapes: Vec<Option<Vec<usize>>> =
            slots.iter().map(|s| s.and_then(Slot::shape)).collect();
        let refs: Vec<Option<&[usize]>> = shapes.iter().map(|s| s.as_deref()).collect();
        let dtype = slots.iter().flatten().next().and_then(|s| s.dtype());
        let size = measure(node, &refs, dtype, generated_elements(node, slots));
        let table = self.tables.get(device).and_then(|t| t.as_deref());
        decide_host(self.floor, table, &size)
    }

    /// The last decision for each top-level step (`None`: not decided by `auto` in any run so far).
    pub fn decisions(&self) -> Vec<Option<Decision>> {
        self.decisions.lock().map(|d| d.clone()).unwrap_or_default()
    }
}

/// The decision for a node whose inputs are all on the host, of size `size`: the measured
/// crossover of `table` where it has one for the node's family, class and dtype, the floor
/// otherwise.
pub fn decide_host(floor: usize, table: Option<&ThresholdTable>, size: &NodeSize) -> Decision {
    let unit = work_unit(size.family);
    let what = format!(
        "{}/{} {}",
        size.family,
        size.class,
        size.dtype.map_or("?".to_string(), |d| d.to_string())
    );
    let fallback = |why: String| {
        let device = size.work >= floor as u64;
        Decision {
            device,
            rule: format!(
                "host inputs, {what}: {} {unit} {} the conservative floor {floor} ({why})",
                size.work,
                if device { ">=" } else { "<" }
            ),
        }
    };
    let Some(table) = table else {
        return fallback("no measured table for this adapter".into());
    };
    let Some((entry, how)) = table.lookup(size.family, size.class, size.dtype) else {
        return fallback(format!("table {} has no {what} entry", table.adapter.id));
    };
    // A generator uploads only its shape: the measured cost of uploads does not apply to it.
    let (c, what): (&Crossover, String) = if size.generated {
        (&entry.resident, format!("{what} (a generator: no uploads)"))
    } else {
        (&entry.host, what.clone())
    };
    let source = format!("{}{how}", table.adapter.id);
    match c.status {
        Status::Crossover | Status::DeviceAlways => {
            let t = c.threshold.unwrap_or(0);
            let device = size.work >= t;
            Decision {
                device,
                rule: format!(
                    "host inputs, {what}: {} {unit} {} measured crossover {t} ({source})",
                    size.work,
                    if device { ">=" } else { "<" }
                ),
            }
        }
        Status::CpuAlways => Decision {
            device: false,
            rule: format!(
                "host inputs, {what}: the CPU won at every measured size up to {} {unit} ({source})",
                c.largest_measured.unwrap_or(0)
            ),
        },
        Status::Undecided => fallback(format!(
            "{source}: every measured {what} point was inside the noise"
        )),
    }
}

#[cfg(test)]
mod tests;
