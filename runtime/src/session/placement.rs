//! Placement: which provider runs each top-level node. At plan time each node goes to the first
//! accelerator (in the session's priority order) whose backend claims it, the CPU otherwise; at run
//! time `auto` keeps a claimed node whose inputs are all on the host on the CPU when the measured
//! thresholds of its accelerator's adapter say the CPU is faster at its size (`dispatch`), or,
//! where nothing was measured, when it is under a conservative floor.
use std::sync::Arc;

use super::dispatch::Dispatch;
use super::thresholds;
use crate::backend::{Claim, DeviceSession, Provider, backend};
use crate::error::{Error, Result};
use crate::plan::Plan;

/// `auto`'s conservative default: elements (or multiply-adds for matmul and conv) below which a
/// node whose inputs are all on the host stays on the CPU, wherever no measured threshold table
/// covers the node (no table for the adapter, no entry for the node's family, or every measured
/// point inside the noise). The floor the runtime used before thresholds were measured.
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
