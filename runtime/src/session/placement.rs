//! Placement: which provider runs each top-level node. At plan time each node goes to the first
//! accelerator (in the session's priority order) whose backend claims it, the CPU otherwise; at run
//! time `auto`'s size floor keeps small nodes whose inputs are all on the host on the CPU.
use std::sync::Arc;

use super::residency::Slot;
use crate::backend::{Claim, DeviceSession, Provider, backend};
use crate::error::{Error, Result};
use crate::ir::Node;
use crate::plan::Plan;

/// Elements below which `auto` keeps a node whose inputs are all on the host on the CPU: the
/// transfers would cost more than the kernel saves. A simple floor until measured thresholds exist.
pub const AUTO_MIN_DEVICE_ELEMENTS: usize = 1 << 14;

/// Where one node runs, and why not elsewhere (`quorum info`).
#[derive(Debug, Clone)]
pub struct NodePlacement {
    pub node: String,
    pub op: String,
    pub provider: Provider,
    /// Why a listed accelerator declined the node.
    pub declined: Option<String>,
}

/// A plan step an accelerator claimed: which of the session's devices, and the kernel it will run.
#[derive(Debug)]
pub struct DeviceStep {
    pub device: usize,
    pub claim: Claim,
}

/// An accelerator a session uses: its provider and its device side.
pub(super) struct SessionDevice {
    pub provider: Provider,
    pub session: Arc<dyn DeviceSession>,
}

/// Opens the device side of every accelerator in `providers` (in order, the CPU skipped).
pub(super) fn open_devices(providers: &[Provider]) -> Result<Vec<SessionDevice>> {
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
            .open()
            .map_err(|why| Error::Provider(format!("provider '{}': {why}", p.name())))?;
        devices.push(SessionDevice {
            provider: p,
            session,
        });
    }
    Ok(devices)
}

/// Places every top-level step of `plan`: the first accelerator of `providers` that claims it
/// (recorded in the step), the CPU otherwise.
pub(super) fn place(
    plan: &mut Plan,
    providers: &[Provider],
    devices: &[SessionDevice],
) -> Vec<NodePlacement> {
    let mut placement = Vec::with_capacity(plan.steps.len());
    for step in &mut plan.steps {
        let node = &plan.graph.nodes[step.node];
        let mut place = NodePlacement {
            node: node.name.clone(),
            op: node.qualified_op(),
            provider: Provider::Cpu,
            declined: None,
        };
        for &p in providers {
            if p == Provider::Cpu {
                break;
            }
            let (Some(index), Some(b)) = (devices.iter().position(|d| d.provider == p), backend(p))
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

/// Whether `auto`'s size floor keeps a claimed node on the CPU: every input is on the host and the
/// largest (or, for a generator like ConstantOfShape, its output) has fewer than `min` elements.
pub(super) fn under_floor(min: usize, node: &Node, slots: &[Option<&Slot>]) -> bool {
    if min == 0 || slots.iter().flatten().any(|s| s.on_device()) {
        return false;
    }
    let largest = slots
        .iter()
        .flatten()
        .filter_map(|s| s.elements())
        .max()
        .unwrap_or(0)
        .max(generated_elements(node, slots));
    largest < min
}

/// The number of elements a generator node makes from small host inputs (ConstantOfShape's shape),
/// so that the `auto` size floor judges it by its output: light models build 100 MB of weights with
/// ConstantOfShape on every run, which on the CPU would then go up the bus to their consumers.
fn generated_elements(node: &Node, slots: &[Option<&Slot>]) -> usize {
    if node.op_type != "ConstantOfShape" {
        return 0;
    }
    match slots.first() {
        Some(Some(Slot::Host { value, .. })) => value
            .as_tensor()
            .and_then(|t| crate::ops::cast::to_i64_vec(t).ok())
            .map(|dims| {
                dims.iter()
                    .fold(1usize, |n, &d| n.saturating_mul(d.max(0) as usize))
            })
            .unwrap_or(0),
        _ => 0,
    }
}
