//! Placement: which provider runs each top-level node. At plan time each node goes to the first
//! accelerator (in the session's priority order) whose backend claims it, the CPU otherwise; at run
//! time `auto` keeps a claimed node whose inputs are all on the host on the CPU when the measured
//! thresholds of its accelerator's adapter say the CPU is faster at its size (`dispatch`), or,
//! where nothing was measured, when it is under a conservative floor.
//!
//! Shape arithmetic is never placed on a device: Shape, Size and the small integer ops on their
//! results (and constants) are marked `Step::shapes_only` and run on the host, their values fixed
//! by the input shapes, so a graph capture may contain them (`shapes_tests.rs`).
use std::sync::Arc;

use super::dispatch::Dispatch;
use super::thresholds;
use crate::backend::{Backend, DeviceSession, Provider};
use crate::error::{Error, Result};
use crate::ir::Node;
use crate::plan::Plan;
use crate::providers::{Availability, backend};

pub use crate::providers::AUTO_MIN_DEVICE_ELEMENTS;

/// Where one node runs, and why not elsewhere (`quorum info`).
#[derive(Debug, Clone)]
pub struct NodePlacement {
    pub node: String,
    pub op: String,
    pub provider: Provider,
    /// Why a listed accelerator declined the node.
    pub declined: Option<String>,
}

pub use crate::plan::DeviceStep;

/// An accelerator a session uses: its provider, its backend and its device side.
pub(super) struct SessionDevice {
    pub provider: Provider,
    pub backend: &'static dyn Backend,
    pub session: Arc<dyn DeviceSession>,
}

/// Opens the device side of every accelerator in `providers` (in order, the CPU skipped).
pub(super) fn open_devices(
    providers: &[Provider],
    options: &crate::backend::DeviceOptions,
) -> Result<Vec<SessionDevice>> {
    let mut devices = Vec::new();
    for &p in providers {
        p.available()
            .map_err(|why| Error::Provider(format!("provider '{}': {why}", p.name())))?;
        if p == Provider::Cpu || devices.iter().any(|d: &SessionDevice| d.provider == p) {
            continue;
        }
        let b = backend(p)
            .ok_or_else(|| Error::Provider(format!("this build has no {} support", p.name())))?;
        let session = b
            .open(options)
            .map_err(|why| Error::Provider(format!("provider '{}': {why}", p.name())))?;
        devices.push(SessionDevice {
            provider: p,
            backend: b,
            session,
        });
    }
    Ok(devices)
}

/// Whether the backend of every device in `devices` claims op `op` of `domain` (in any form: the
/// probe has no inputs or attributes), so that a rewrite to that op keeps the work on the devices.
pub(super) fn every_device_runs(devices: &[SessionDevice], domain: &str, op: &str) -> bool {
    let probe = Node {
        name: String::new(),
        op_type: op.into(),
        domain: domain.into(),
        opset: 1,
        inputs: Vec::new(),
        outputs: Vec::new(),
        attrs: Default::default(),
    };
    devices.iter().all(|d| d.backend.claim(&probe).is_ok())
}

/// Ops that, given only values computed from tensor shapes and constants, are not shape arithmetic:
/// their results are not fixed by the shapes (random generators), or they run graphs of their own.
/// Every other standard op on such inputs is: its result is a function of the input shapes, computed
/// on the host once per input-shape key and kept (`shape_values`), however large (Swin's attention
/// masks: Range, ConstantOfShape, ScatterND, Expand, Where over the window grid).
const NOT_SHAPE_ARITHMETIC: &[&str] = &[
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Multinomial",
    "Bernoulli",
    "Dropout",
    "If",
    "Loop",
    "Scan",
];

/// Marks the steps that compute only from tensor shapes ([`crate::plan::Step::shapes_only`]): every
/// Shape and Size, then every shape-arithmetic op whose inputs are all such results or constants
/// (initializers no graph input overrides), at least one of them a shape result.
fn mark_shape_arithmetic(plan: &mut Plan) {
    let g = &*plan.graph;
    let overridable: std::collections::HashSet<&str> =
        g.inputs.iter().map(|i| i.name.as_str()).collect();
    let mut from_shapes: std::collections::HashSet<&str> = Default::default();
    for step in &mut plan.steps {
        let node = &g.nodes[step.node];
        let standard = node.domain.is_empty() || node.domain == "ai.onnx";
        let op = node.op_type.as_str();
        let inputs = node.inputs.iter().filter(|n| !n.is_empty());
        let constant = |n: &str| plan.initializers.contains_key(n) && !overridable.contains(n);
        let derived = standard
            && match op {
                "Shape" | "Size" => true,
                _ if !NOT_SHAPE_ARITHMETIC.contains(&op) => {
                    inputs.clone().any(|n| from_shapes.contains(n.as_str()))
                        && inputs
                            .clone()
                            .all(|n| from_shapes.contains(n.as_str()) || constant(n))
                }
                _ => false,
            };
        if derived {
            step.shapes_only = true;
            from_shapes.extend(
                node.outputs
                    .iter()
                    .filter(|o| !o.is_empty())
                    .map(String::as_str),
            );
        }
    }
}

/// Places every top-level step of `plan`: the first accelerator of `providers` that claims it
/// (recorded in the step), the CPU otherwise; shape arithmetic always on the host.
pub(super) fn place(
    plan: &mut Plan,
    providers: &[Provider],
    devices: &[SessionDevice],
) -> Vec<NodePlacement> {
    if !devices.is_empty() {
        mark_shape_arithmetic(plan);
    }
    let mut placement = Vec::with_capacity(plan.steps.len());
    for step in &mut plan.steps {
        let node = &plan.graph.nodes[step.node];
        let mut place = NodePlacement {
            node: node.name.clone(),
            op: node.qualified_op(),
            provider: Provider::Cpu,
            declined: None,
        };
        if step.shapes_only {
            place.declined =
                Some("shape arithmetic: computed on the host from tensor shapes".into());
            placement.push(place);
            continue;
        }
        for &p in providers {
            if p == Provider::Cpu {
                break;
            }
            let Some((index, b)) = devices
                .iter()
                .enumerate()
                .find_map(|(i, d)| (d.provider == p).then_some((i, d.backend)))
            else {
                continue;
            };
            match b.claim(node) {
                Ok(claim) => {
                    step.device = Some(DeviceStep {
                        device: index,
                        claim,
                    });
                    place.provider = p;
                    break;
                }
                Err(why) => place.declined = Some(format!("{}: {why}", p.name())),
            }
        }
        placement.push(place);
    }
    placement
}

/// The dispatch of a session: for `auto` (`floor` > 0), each accelerator's measured threshold
/// table found by its adapter (provider, device name, driver), and a note per accelerator saying
/// which table applies or that the conservative floor stands in (`quorum info` prints them).
/// `trial`: `auto` may time whole-model placements over its first runs (`super::trial`).
pub(super) fn dispatch_for(
    floor: usize,
    devices: &[SessionDevice],
    steps: usize,
    trial: bool,
) -> (Dispatch, Vec<String>) {
    if floor == 0 {
        return (Dispatch::new(0, Vec::new(), steps, false), Vec::new());
    }
    let (tables, problems) = thresholds::available();
    let mut chosen = Vec::with_capacity(devices.len());
    let mut notes: Vec<String> = problems
        .into_iter()
        .map(|p| format!("a threshold table was skipped: {p}"))
        .collect();
    for d in devices {
        let name = d.session.device_name();
        let driver = d.session.driver_version();
        let (table, note) = thresholds::find(&tables, d.provider.name(), &name, driver.as_deref());
        notes.push(format!("{}: {note}", d.provider.name()));
        chosen.push(table);
    }
    (Dispatch::new(floor, chosen, steps, trial), notes)
}
