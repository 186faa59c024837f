//! The executor: runs a plan's steps in order, each on the CPU or on the device its step was placed
//! on, keeping values where they were produced (`residency`), checking device results when
//! verification is on, and dropping each value after its last reader. Device results are judged
//! through `verify::Policy`; Shape and Size read a device value's shape without downloading it.
use std::cell::RefCell;
use std::sync::Arc;

use super::dispatch::Dispatch;
use super::placement::DeviceStep;
use super::residency::{Scope, Slot, SlotInputs};
use super::schedule::{Schedule, StepSchedule};
use crate::backend::{DeviceError, DeviceRun, Replay};
use crate::counters::Counters;
use crate::error::{Error, OpError, OpResult, Result};
use crate::ir::{Graph, Node};
use crate::mutants::{self, Mutant};
use crate::ops::{OpCtx, SubgraphRunner};
use crate::plan::{Plan, Step, graph_key};
use crate::tensor::{Tensor, Value};
use crate::verify::{Policy, Use, VerifyMode};

/// One run's execution state: its limits, its verification policy, its counters and the device
/// side of each of the session's accelerators.
pub(super) struct Exec<'s> {
    /// Time each top-level step into `Counters::op_time`.
    pub profile: bool,
    pub max_tensor_bytes: u64,
    pub max_loop_iterations: u64,
    /// `auto`'s per-node decision (CPU or the claimed device) for nodes whose inputs are on the host.
    pub dispatch: &'s Dispatch,
    /// This run's placement of the nodes `auto` decides for (`trial`).
    pub whole: super::trial::Whole,
    pub policy: Policy<'s>,
    pub counters: &'s Counters,
    /// Where kernels' f32 outputs take their storage, and where dead values' storage goes.
    pub arena: &'s crate::arena::Arena,
    /// Indexed like the session's devices (a `DeviceTensor::device` is an index here).
    pub devices: Vec<Box<dyn DeviceRun + 's>>,
    /// The top-level steps that recorded their event in this run (a step placed on a device may
    /// still run on the CPU, and then records nothing to wait for).
    pub recorded: RefCell<Vec<bool>>,
    /// The next name for an event that no step names (events are named by steps below this).
    pub next_event: std::cell::Cell<usize>,
    /// Capturing this run into a graph: the run inputs uploaded first, in the replay's order.
    pub capture: Option<Vec<String>>,
    /// Why the capture of this run was refused, once something refused it.
    pub refusal: RefCell<Option<String>>,
    /// The captured graph, once the run ended its capture.
    pub replay: RefCell<Option<Box<dyn Replay>>>,
    /// A sampled run's window (`sampling`): its nodes' inputs and outputs go to the sampler.
    pub sample: Option<&'s super::sampling::Window<'s>>,
    /// A strict run's judges (`judges`): its device nodes are judged on them while it goes on.
    pub judges: Option<&'s super::judges::Judges>,
    /// The values computed from tensor shapes alone for this run's input-shape key (`shapes_only`
    /// steps take them from here, or compute and keep them).
    pub shape_values: Option<std::sync::Arc<super::shape_values::KeyValues>>,
    /// IO binding (`Session::run_bound`): run inputs already on a device, adopted by this run's
    /// device side (`DeviceRun::adopt`); taken by the top-level plan.
    pub bound: RefCell<Vec<(String, crate::backend::DeviceTensor)>>,
    /// Graph outputs to leave on their device instead of copying back, where a device made them.
    pub keep: &'s [String],
    /// Run inputs in page-locked host memory, shared with their pinned tensors.
    pub pinned: &'s [(String, Arc<Value>)],
    /// Graph outputs to copy into page-locked host memory (`Session::run_into`).
    pub into: &'s [&'s dyn super::binding::Dest],
    /// The outputs left on a device, by name; each one's place among the outputs holds an empty
    /// optional instead.
    pub kept: RefCell<Vec<(String, crate::backend::DeviceTensor)>>,
}

/// Where a top-level graph output is while the run ends.
enum Out {
    Host(Arc<Value>),
    Later {
        device: usize,
        at: usize,
    },
    /// Left on a device, or already in its pinned tensor: an empty optional holds its place.
    Kept,
    /// Copied back through staging, then into a pinned tensor's bytes.
    LaterInto {
        device: usize,
        at: usize,
        into: usize,
    },
}

/// Copies a host tensor's bytes into a pinned tensor's (same dtype and shape, checked before).
fn copy_into(t: &Tensor, into: &dyn super::binding::Dest) -> Result<()> {
    let src = quorum_core::tensor::tensor_bytes(t).ok_or_else(|| Error::Input {
        name: into.name().to_string(),
        msg: format!("{} values have no plain bytes", t.dtype()),
    })?;
    let mut copied = Ok(());
    into.with_bytes(&mut |dst| {
        if src.len() == dst.len() {
            dst.copy_from_slice(&src);
        } else {
            copied = Err(Error::Device(format!(
                "output '{}': {} bytes for a pinned tensor of {}",
                into.name(),
                src.len(),
                dst.len()
            )));
        }
    });
    copied
}

struct Runner<'a, 's> {
    exec: &'a Exec<'s>,
    plan: &'a Plan,
    scope: &'a Scope<'a>,
}

impl SubgraphRunner for Runner<'_, '_> {
    fn run_subgraph(&self, graph: &Graph, inputs: Vec<Value>) -> OpResult<Vec<Value>> {
        let plan =
            self.plan.subplans.get(&graph_key(graph)).ok_or_else(|| {
                OpError::Invalid("subgraph was not compiled with its parent".into())
            })?;
        let named = plan
            .graph
            .inputs
            .iter()
            .map(|i| i.name.clone())
            .zip(inputs)
            .collect();
        self.exec
            .run_plan(plan, named, Some(self.scope), None)
            .map_err(|e| OpError::Invalid(format!("in subgraph '{}': {e}", graph.name)))
    }

    fn max_loop_iterations(&self) -> u64 {
        self.exec.max_loop_iterations
    }

    /// Initializers (given or folded) are the session's constants; a run input that overrides an
    /// initializer is held as a plain value and is not one.
    fn constant(&self, name: &str) -> Option<Arc<Value>> {
        match self.scope.get(name)? {
            Slot::Host {
                value,
                weight: true,
                ..
            } => Some(value.clone()),
            _ => None,
        }
    }
}

/// A kernel's error as the session reports it: the node, its op and its inputs' shapes.
pub(super) fn node_error(node: &Node, refs: &[Option<&Value>], e: OpError) -> Error {
    let shapes = format!(
        "[{}]",
        refs.iter()
            .map(|r| r.map_or("-".into(), |v| v.describe()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    match e {
        OpError::Unsupported(reason) => Error::Unsupported {
            node: node.name.clone(),
            op: node.op_type.clone(),
            domain: if node.domain.is_empty() {
                String::new()
            } else {
                format!("{}::", node.domain)
            },
            opset: node.opset,
            reason: format!("{reason} (inputs {shapes})"),
        },
        OpError::Invalid(msg) => Error::Node {
            node: node.name.clone(),
            op: node.op_type.clone(),
            shapes,
            msg,
        },
    }
}

/// A device step's error as the session reports it.
pub(super) fn device_error(node: &Node, e: DeviceError) -> Error {
    match e {
        DeviceError::Op(e) => node_error(node, &[], e),
        DeviceError::Decline(why) => Error::Device(format!(
            "node '{}' ({}): the device kernel declined after starting: {why}",
            node.name, node.op_type
        )),
        DeviceError::Device(e) => {
            Error::Device(format!("node '{}' ({}): {e}", node.name, node.op_type))
        }
        DeviceError::Fault(f) => fault_error(f),
    }
}

/// A failed device check as the session reports it: the node's error, as a host check gives.
pub(super) fn fault_error(f: crate::backend::Fault) -> Error {
    Error::Node {
        node: f.node,
        op: f.op,
        shapes: f.shapes,
        msg: f.msg,
    }
}

/// A stand-in node for errors that belong to no node (a graph output's download).
fn output_node(name: &str) -> Node {
    Node {
        name: format!("output '{name}'"),
        op_type: String::new(),
        domain: String::new(),
        opset: 0,
        inputs: vec![],
        outputs: vec![],
        attrs: Default::default(),
    }
}

impl Exec<'_> {
    /// Runs the top-level plan under its schedule: streams and events for device steps, the graph
    /// outputs copied back together with one synchronisation at the end.
    pub(super) fn run_top(
        &self,
        plan: &Plan,
        schedule: &Schedule,
        inputs: Vec<(String, Value)>,
    ) -> Result<Vec<Value>> {
        *self.recorded.borrow_mut() = vec![false; plan.steps.len()];
        self.next_event.set(plan.steps.len());
        self.run_plan(plan, inputs, None, Some(schedule))
    }

    /// Runs a plan: the top level (with its schedule) or a subgraph (on the CPU, inside a step).
    pub(super) fn run_plan(
        &self,
        plan: &Plan,
        inputs: Vec<(String, Value)>,
        parent: Option<&Scope>,
        schedule: Option<&Schedule>,
    ) -> Result<Vec<Value>> {
        let g = &*plan.graph;
        let mut scope = Scope {
            values: plan
                .initializers
                .iter()
                .map(|(k, v)| (k.clone(), Slot::host(v.clone(), true)))
                .collect(),
            parent,
        };
        for (name, v) in inputs {
            scope.values.insert(name, Slot::host(Arc::new(v), false));
        }
        if schedule.is_some() {
            for (name, d) in self.bound.borrow_mut().drain(..) {
                scope.values.insert(name, Slot::device(d));
            }
            for (name, v) in self.pinned {
                scope
                    .values
                    .insert(name.clone(), Slot::host(v.clone(), false));
            }
        }
        if schedule.is_some()
            && let Some(names) = &self.capture
        {
            self.begin_capture(&scope, names)?;
        }
        let none = StepSchedule::default();
        for (index, step) in plan.steps.iter().enumerate() {
            let node = &g.nodes[step.node];
            let sched = schedule.and_then(|s| s.steps.get(index)).unwrap_or(&none);
            for name in node.inputs.iter().filter(|n| !n.is_empty()) {
                if scope.get(name).is_none() {
                    return Err(Error::Node {
                        node: node.name.clone(),
                        op: node.op_type.clone(),
                        shapes: String::new(),
                        msg: format!(
                            "input '{name}' has no value (an optional input that was not given?)"
                        ),
                    });
                }
            }
            let started = (self.profile && schedule.is_some()).then(quorum_core::clock::Stamp::now);
            let device_outs = match &step.device {
                Some(ds) if ds.device < self.devices.len() && schedule.is_some() => {
                    self.run_device(plan, &scope, node, step, ds, index, sched)?
                }
                _ => None,
            };
            let outs = match device_outs {
                Some(outs) => outs,
                None if step.shapes_only => self
                    .shape_step(plan, &scope, node, step, index)?
                    .into_iter()
                    .map(Slot::of_shapes)
                    .collect(),
                None if schedule.is_some() && self.capture.is_some() => {
                    return Err(self.refuse(format!(
                        "node '{}' ({}) runs on the CPU",
                        node.name, node.op_type
                    )));
                }
                None => match self.view_in_place(plan, &mut scope, node, step) {
                    Some(v) => vec![Slot::host(Arc::new(v), false)],
                    None => match self.write_in_place(plan, &mut scope, node, step)? {
                        Some(v) => vec![Slot::host(Arc::new(v), false)],
                        None => self
                            .run_cpu(plan, &scope, node, step)?
                            .into_iter()
                            .map(|v| Slot::host(Arc::new(v), false))
                            .collect(),
                    },
                },
            };
            if let Some(t) = started {
                let provider = if outs.iter().any(Slot::on_device) {
                    "device"
                } else {
                    "cpu"
                };
                self.count_time(node, provider, t.elapsed());
            }
            for (name, v) in node.outputs.iter().zip(outs) {
                if !name.is_empty() {
                    scope.values.insert(name.clone(), v);
                }
            }
            for f in &step.frees {
                if let Some(slot) = scope.values.remove(f) {
                    let after = sched
                        .releases
                        .iter()
                        .find(|(v, _)| v == f)
                        .map(|(_, after)| self.recorded_of(after))
                        .unwrap_or_default();
                    self.release(slot, &after);
                }
            }
        }
        if schedule.is_some() {
            return self.collect_outputs(g, scope);
        }
        let mut outs = Vec::with_capacity(g.outputs.len());
        for o in &g.outputs {
            let v = match scope.values.remove(&o.name) {
                Some(slot) => self.host_value(&slot, &output_node(&o.name))?,
                None => match scope.get(&o.name) {
                    Some(slot) => self.host_value(slot, &output_node(&o.name))?,
                    None => {
                        return Err(Error::InvalidModel(format!(
                            "graph output '{}' was not produced",
                            o.name
                        )));
                    }
                },
            };
            outs.push(Arc::try_unwrap(v).unwrap_or_else(|a| (*a).clone()));
        }
        Ok(outs)
    }

    /// `f` given the kernel context of `node` in `scope` (its subgraphs run through this executor).
    pub(super) fn with_ctx<R>(
        &self,
        plan: &Plan,
        scope: &Scope,
        node: &Node,
        f: impl FnOnce(&OpCtx) -> R,
    ) -> R {
        let runner = Runner {
            exec: self,
            plan,
            scope,
        };
        let ctx = OpCtx {
            node,
            runner: &runner,
            max_tensor_bytes: self.max_tensor_bytes,
        };
        crate::arena::enter(self.arena, || f(&ctx))
    }

    /// Adds one execution of `node` to its op type's time and to its own.
    fn count_time(&self, node: &Node, provider: &str, took: std::time::Duration) {
        let mut m = self
            .counters
            .op_time
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let e = m
            .entry((node.qualified_op(), provider.to_string()))
            .or_default();
        e.calls += 1;
        e.nanos += took.as_nanos() as u64;
        drop(m);
        let key = if node.name.is_empty() {
            node.outputs.first().cloned().unwrap_or_default()
        } else {
            node.name.clone()
        };
        let mut m = self
            .counters
            .node_time
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let e = m.entry(key).or_default();
        if e.op.is_empty() {
            e.op = node.qualified_op();
        }
        if e.provider != provider {
            e.provider = provider.to_string();
        }
        e.time.calls += 1;
        e.time.nanos += took.as_nanos() as u64;
    }

    /// Refuses this run's capture (the first reason stands) and returns the error that unwinds it.
    pub(super) fn refuse(&self, reason: String) -> Error {
        let mut r = self.refusal.borrow_mut();
        let reason = r.get_or_insert(reason).clone();
        Error::Provider(format!("graph capture refused: {reason}"))
    }

    /// Records event `event` on `stream` of device `device`, counted.
    pub(super) fn record(
        &self,
        device: usize,
        stream: usize,
        event: usize,
    ) -> std::result::Result<(), DeviceError> {
        crate::counters::Counters::bump(&self.counters.events_recorded, 1);
        self.devices[device].record(stream, event)
    }

    /// Makes `stream` of device `device` wait for `event`, counted.
    pub(super) fn wait(
        &self,
        device: usize,
        stream: usize,
        event: usize,
    ) -> std::result::Result<(), DeviceError> {
        crate::counters::Counters::bump(&self.counters.events_waited, 1);
        self.devices[device].wait(stream, event)
    }

    /// A name for an event no step names.
    pub(super) fn fresh_event(&self) -> usize {
        let e = self.next_event.get();
        self.next_event.set(e + 1);
        e
    }

    /// Starts capturing on the (one) device and uploads the run inputs first, in `names` order: the
    /// replay writes new inputs where these uploads read.
    fn begin_capture(&self, scope: &Scope, names: &[String]) -> Result<()> {
        let run = self
            .devices
            .first()
            .ok_or_else(|| self.refuse("no device".into()))?;
        run.begin_capture()
            .map_err(|e| self.refuse(format!("the device cannot capture: {e}")))?;
        for name in names {
            let slot = scope
                .values
                .get(name)
                .ok_or_else(|| self.refuse(format!("run input '{name}' was not given")))?;
            self.device_value(slot, 0, 0, &output_node(name))
                .map_err(|e| self.refuse(format!("uploading run input '{name}': {e}")))?;
        }
        Ok(())
    }

    /// The events among `steps` that this run recorded.
    fn recorded_of(&self, steps: &[usize]) -> Vec<usize> {
        let recorded = self.recorded.borrow();
        steps
            .iter()
            .copied()
            .filter(|&s| recorded.get(s).copied().unwrap_or(false))
            .collect()
    }

    /// An output that goes into a pinned tensor (`into`, the `k`-th): straight from the device
    /// that made it where the device can, else through staging after the run; a host value is
    /// copied in now.
    fn output_into(&self, slot: &Slot, into: &dyn super::binding::Dest, k: usize) -> Result<Out> {
        if (slot.dtype(), slot.shape()) != (Some(into.dtype()), Some(into.shape().to_vec())) {
            return Err(Error::Input {
                name: into.name().to_string(),
                msg: format!(
                    "is {}{:?}, but its pinned tensor is {}{:?}",
                    slot.dtype()
                        .map_or("not a tensor".into(), |d| d.to_string()),
                    slot.shape().unwrap_or_default(),
                    into.dtype(),
                    into.shape()
                ),
            });
        }
        match slot {
            Slot::Device { dev, host } if host.get().is_none() => {
                let run = &self.devices[dev.device];
                let mut copied = Ok(());
                into.with_bytes(&mut |dst| copied = run.download_into(dev, dst));
                match copied {
                    Ok(()) => Ok(Out::Kept),
                    Err(DeviceError::Decline(_)) => {
                        let at = run
                            .download_later(dev)
                            .map_err(|e| device_error(&output_node(into.name()), e))?;
                        Ok(Out::LaterInto {
                            device: dev.device,
                            at,
                            into: k,
                        })
                    }
                    Err(e) => Err(device_error(&output_node(into.name()), e)),
                }
            }
            slot => {
                let v = self.host_value(slot, &output_node(into.name()))?;
                let t = v.as_tensor().ok_or_else(|| Error::Input {
                    name: into.name().to_string(),
                    msg: "is not a tensor".into(),
                })?;
                copy_into(t, into)?;
                Ok(Out::Kept)
            }
        }
    }

    /// The top-level graph outputs: device values start copying back at once, every device is
    /// synchronised once, then all are collected.
    fn collect_outputs(&self, g: &Graph, scope: Scope) -> Result<Vec<Value>> {
        let mut pending = Vec::with_capacity(g.outputs.len());
        for o in &g.outputs {
            let Some(slot) = scope.get(&o.name) else {
                return Err(Error::InvalidModel(format!(
                    "graph output '{}' was not produced",
                    o.name
                )));
            };
            if let Some(k) = self.into.iter().position(|i| i.name() == o.name) {
                pending.push(self.output_into(slot, self.into[k], k)?);
                continue;
            }
            pending.push(match slot {
                Slot::Device { dev, .. } if self.keep.contains(&o.name) => {
                    self.kept.borrow_mut().push((o.name.clone(), dev.clone()));
                    Out::Kept
                }
                Slot::Device { dev, host } if host.get().is_none() => {
                    let at = self.devices[dev.device]
                        .download_later(dev)
                        .map_err(|e| device_error(&output_node(&o.name), e))?;
                    Out::Later {
                        device: dev.device,
                        at,
                    }
                }
                slot => Out::Host(self.host_value(slot, &output_node(&o.name))?),
            });
        }
        let mut copies: Vec<Vec<Option<crate::tensor::Tensor>>> = Vec::new();
        if self.capture.is_some() {
            if let Some(name) = g.outputs.iter().zip(&pending).find_map(|(o, p)| match p {
                Out::Host(_) => Some(&o.name),
                Out::Later { .. } | Out::Kept | Out::LaterInto { .. } => None,
            }) {
                return Err(self.refuse(format!("graph output '{name}' is not made on the device")));
            }
            let (got, replay) = self.devices[0].end_capture().map_err(|e| match e {
                // The capture worked; the run's inputs broke a node's contract.
                DeviceError::Fault(f) => fault_error(f),
                e => self.refuse(format!("ending the capture: {e}")),
            })?;
            *self.replay.borrow_mut() = Some(replay);
            copies.push(got.into_iter().map(Some).collect());
        } else {
            for run in &self.devices {
                // Outputs rebuilt on the host take dead values' storage from the arena (the
                // inputs', freed after their upload) instead of fresh pages.
                let got =
                    crate::arena::enter(self.arena, || run.finish()).map_err(|e| match e {
                        DeviceError::Fault(f) => fault_error(f),
                        e => Error::Device(format!("finishing the run: {e}")),
                    })?;
                copies.push(got.into_iter().map(Some).collect());
            }
        }
        drop(scope);
        pending
            .into_iter()
            .map(|o| match o {
                Out::Host(v) => Ok(Arc::try_unwrap(v).unwrap_or_else(|a| (*a).clone())),
                Out::Kept => Ok(Value::Optional(None)),
                Out::LaterInto { device, at, into } => {
                    let t = copies[device]
                        .get_mut(at)
                        .and_then(Option::take)
                        .ok_or_else(|| Error::Device("an output copy went missing".into()))?;
                    copy_into(&t, self.into[into])?;
                    Ok(Value::Optional(None))
                }
                Out::Later { device, at } => copies[device]
                    .get_mut(at)
                    .and_then(Option::take)
                    .map(Value::Tensor)
                    .ok_or_else(|| Error::Device("an output copy went missing".into())),
            })
            .collect()
    }

    fn run_cpu(&self, plan: &Plan, scope: &Scope, node: &Node, step: &Step) -> Result<Vec<Value>> {
        let args: Vec<Option<Arc<Value>>> = node
            .inputs
            .iter()
            .map(|name| match name.as_str() {
                "" => Ok(None),
                n => match scope.get(n) {
                    Some(slot) => self.host_value(slot, node).map(Some),
                    None => Ok(None),
                },
            })
            .collect::<Result<_>>()?;
        let refs: Vec<Option<&Value>> = args.iter().map(|a| a.as_deref()).collect();
        let outs = self
            .with_ctx(plan, scope, node, |ctx| (step.kernel)(ctx, &refs))
            .map_err(|e| node_error(node, &refs, e))?;
        let wanted = node
            .outputs
            .iter()
            .rposition(|o| !o.is_empty())
            .map_or(0, |p| p + 1);
        if outs.len() < wanted {
            return Err(Error::Node {
                node: node.name.clone(),
                op: node.op_type.clone(),
                shapes: String::new(),
                msg: format!(
                    "kernel produced {} outputs, the node names {wanted}",
                    outs.len()
                ),
            });
        }
        Ok(outs)
    }

    /// Runs a shape-arithmetic step on the host. Shape and Size read their input's shape where it
    /// lives, so a device value is not downloaded (nor the device waited for).
    /// The outputs of top-level shape step `index`: kept for this run's input-shape key and reused
    /// for the same inputs (a Shape or Size, which only reads a shape, is computed and compared
    /// every run), or computed and kept (`shape_values`).
    fn shape_step(
        &self,
        plan: &Plan,
        scope: &Scope,
        node: &Node,
        step: &Step,
        index: usize,
    ) -> Result<Vec<Arc<Value>>> {
        let reads_shape = matches!(node.op_type.as_str(), "Shape" | "Size");
        let from: Option<Vec<usize>> = if reads_shape {
            Some(Vec::new())
        } else {
            node.inputs
                .iter()
                .map(|n| match scope.get(n) {
                    _ if n.is_empty() => Some(0),
                    Some(Slot::Host { value, .. }) => Some(super::shape_values::identity(value)),
                    _ => None,
                })
                .collect()
        };
        if let (Some(k), Some(f), false) = (&self.shape_values, &from, reads_shape)
            && let Some(kept) = k.get(index, f)
        {
            return Ok(kept);
        }
        let computed = self
            .run_shapes(plan, scope, node, step)?
            .into_iter()
            .map(Arc::new)
            .collect();
        Ok(match (&self.shape_values, from) {
            (Some(k), Some(f)) => k.keep(index, f, computed),
            _ => computed,
        })
    }

    fn run_shapes(
        &self,
        plan: &Plan,
        scope: &Scope,
        node: &Node,
        step: &Step,
    ) -> Result<Vec<Value>> {
        let reads_shape = matches!(node.op_type.as_str(), "Shape" | "Size");
        let on_device = |n: &String| scope.get(n).is_some_and(Slot::on_device);
        if !(reads_shape && node.inputs.first().is_some_and(on_device)) {
            return self.run_cpu(plan, scope, node, step);
        }
        let shape = scope
            .get(&node.inputs[0])
            .and_then(Slot::shape)
            .unwrap_or_default();
        let ctx = OpCtx {
            node,
            runner: &Runner {
                exec: self,
                plan,
                scope,
            },
            max_tensor_bytes: self.max_tensor_bytes,
        };
        let t = if node.op_type == "Size" {
            Tensor::scalar_i64(shape.iter().product::<usize>() as i64)
        } else {
            let v = crate::ops::shape::shape_values(&ctx, &shape)
                .map_err(|e| node_error(node, &[], e))?;
            Tensor::from_i64(&[v.len()], v).map_err(|e| node_error(node, &[], e))?
        };
        Ok(vec![Value::Tensor(t)])
    }

    /// Runs a node on the device its step was placed on. `Ok(None)`: the node stays on the CPU
    /// (under `auto`'s size floor, or the kernel declined these inputs).
    #[allow(clippy::too_many_arguments)]
    fn run_device(
        &self,
        plan: &Plan,
        scope: &Scope,
        node: &Node,
        step: &Step,
        ds: &DeviceStep,
        index: usize,
        sched: &StepSchedule,
    ) -> Result<Option<Vec<Slot>>> {
        let slots: Vec<Option<&Slot>> = node
            .inputs
            .iter()
            .map(|n| if n.is_empty() { None } else { scope.get(n) })
            .collect();
        if self
            .dispatch
            .keep_on_cpu(index, ds.device, node, &slots, self.whole)
        {
            return Ok(None);
        }
        let stream = sched.stream.unwrap_or(0);
        let inputs = SlotInputs {
            exec: self,
            node,
            slots: &slots,
            device: ds.device,
            stream,
        };
        let runner = Runner {
            exec: self,
            plan,
            scope,
        };
        let ctx = OpCtx {
            node,
            runner: &runner,
            max_tensor_bytes: self.max_tensor_bytes,
        };
        let run = &self.devices[ds.device];
        if !mutants::active(Mutant::DropWait) {
            for p in self.recorded_of(&sched.waits) {
                self.wait(ds.device, stream, p)
                    .map_err(|e| device_error(node, e))?;
            }
        }
        let early = sched.record && mutants::active(Mutant::RecordBeforeLaunch);
        if early {
            self.record(ds.device, stream, index)
                .map_err(|e| device_error(node, e))?;
        }
        let outs = match run.launch(stream, &ds.claim, &ctx, &inputs) {
            Ok(o) => o,
            Err(DeviceError::Decline(why)) => {
                self.counters.fell_back(&node.name, &node.op_type, &why);
                return Ok(None);
            }
            Err(e) => return Err(device_error(node, e)),
        };
        // How the node's products took their operands, as its kernel declares it: kept for any
        // later judge of this output, and judged under below.
        let operands = run.arithmetic();
        if operands != crate::backend::Arithmetic::EXACT {
            self.counters.declared(&node.name, operands);
        }
        if sched.record {
            if !early {
                self.record(ds.device, stream, index)
                    .map_err(|e| device_error(node, e))?;
            }
            if let Some(r) = self.recorded.borrow_mut().get_mut(index) {
                *r = true;
            }
        }
        let sampled = self.policy.mode == VerifyMode::Off
            && self.sample.is_some_and(|w| w.takes(plan, index));
        if self.policy.mode == VerifyMode::Off && !sampled {
            return Ok(Some(outs.into_iter().map(Slot::device).collect()));
        }
        // Verification (or a sample of it): the device's outputs against both oracles on the
        // same inputs.
        let host_in: Vec<Option<Arc<Value>>> = slots
            .iter()
            .map(|s| s.map(|s| self.host_value(s, node)).transpose())
            .collect::<Result<_>>()?;
        let host_out: Vec<Arc<Value>> = outs
            .iter()
            .map(|d| {
                run.download(d)
                    .map(|t| Arc::new(Value::Tensor(t)))
                    .map_err(|e| device_error(node, e))
            })
            .collect::<Result<_>>()?;
        let cpu = match (sampled, self.sample) {
            // Sampled: judged later, on the sampler's thread; this run goes on with the device's
            // values.
            (true, Some(w)) => {
                w.send(index, node, operands, host_in, host_out.clone());
                false
            }
            // Strict with judges: judged beside the run, which returns only once every node is.
            _ if self.policy.mode == VerifyMode::Strict
                && self
                    .judges
                    .is_some_and(|j| j.send(node, operands, host_in.clone(), host_out.clone())) =>
            {
                false
            }
            _ => {
                let refs: Vec<Option<&Value>> = host_in.iter().map(|a| a.as_deref()).collect();
                let out_vals: Vec<Value> = host_out.iter().map(|v| (**v).clone()).collect();
                let check = crate::verify::check_declared(node, &refs, &out_vals, operands);
                self.policy.apply(node, &check, self.counters)? == Use::Cpu
            }
        };
        if cpu {
            let cpu = self.run_cpu(plan, scope, node, step)?;
            return Ok(Some(
                cpu.into_iter()
                    .map(|v| Slot::host(Arc::new(v), false))
                    .collect(),
            ));
        }
        Ok(Some(
            outs.into_iter()
                .zip(host_out)
                .map(|(dev, h)| {
                    let slot = Slot::device(dev);
                    if let Slot::Device { host, .. } = &slot {
                        let _ = host.set(h);
                    }
                    slot
                })
                .collect(),
        ))
    }
}
