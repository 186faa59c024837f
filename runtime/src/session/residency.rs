//! Residency: where a value of a running graph lives. Values stay where they were produced (host or
//! a device) and move only when a consumer elsewhere needs them: a device value is downloaded once
//! when a CPU consumer or a graph output asks (then kept), a host value is uploaded once per device
//! that reads it (then kept), and initializers go through the device session's resident weights.
use std::cell::{OnceCell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;

use super::exec::Exec;
use crate::backend::{DeviceError, DeviceTensor, NodeInputs};
use crate::error::{Error, Result};
use crate::ir::Node;
use crate::tensor::{DType, Value};

/// A value in a running graph.
pub(super) enum Slot {
    Host {
        value: Arc<Value>,
        /// An initializer: goes to a device through its resident weights, not per run.
        weight: bool,
        /// Computed from tensor shapes only (a `shapes_only` step): a captured graph may bake it in.
        from_shapes: bool,
        /// Its copies on devices, at most one per device.
        copies: RefCell<Vec<DeviceTensor>>,
    },
    Device {
        dev: DeviceTensor,
        /// Its host copy, once a host consumer asked.
        host: OnceCell<Arc<Value>>,
    },
}

impl Slot {
    pub fn host(value: Arc<Value>, weight: bool) -> Slot {
        Slot::Host {
            value,
            weight,
            from_shapes: false,
            copies: RefCell::new(Vec::new()),
        }
    }

    /// The result of a step that computes from tensor shapes only.
    pub fn of_shapes(value: Arc<Value>) -> Slot {
        Slot::Host {
            value,
            weight: false,
            from_shapes: true,
            copies: RefCell::new(Vec::new()),
        }
    }

    pub fn device(dev: DeviceTensor) -> Slot {
        Slot::Device {
            dev,
            host: OnceCell::new(),
        }
    }

    pub fn on_device(&self) -> bool {
        matches!(self, Slot::Device { .. })
    }

    /// The shape of a tensor value.
    pub fn shape(&self) -> Option<Vec<usize>> {
        match self {
            Slot::Host { value, .. } => value.as_tensor().map(|t| t.shape().to_vec()),
            Slot::Device { dev, .. } => Some(dev.shape.clone()),
        }
    }

    /// The dtype of a tensor value.
    pub fn dtype(&self) -> Option<DType> {
        match self {
            Slot::Host { value, .. } => value.as_tensor().map(|t| t.dtype()),
            Slot::Device { dev, .. } => Some(dev.dtype),
        }
    }
}

/// Values visible while a graph runs, chained to the scope of the enclosing graph.
pub(super) struct Scope<'p> {
    pub values: HashMap<String, Slot>,
    pub parent: Option<&'p Scope<'p>>,
}

impl Scope<'_> {
    pub fn get(&self, name: &str) -> Option<&Slot> {
        self.values
            .get(name)
            .or_else(|| self.parent.and_then(|p| p.get(name)))
    }
}

impl Exec<'_> {
    /// The host value of a slot, downloading a device value on first use.
    pub(super) fn host_value(&self, slot: &Slot, node: &Node) -> Result<Arc<Value>> {
        match slot {
            Slot::Host { value, .. } => Ok(value.clone()),
            Slot::Device { dev, host } => {
                if let Some(v) = host.get() {
                    return Ok(v.clone());
                }
                let run = self.devices.get(dev.device).ok_or_else(|| {
                    Error::Device("a device value outside its device's run".into())
                })?;
                let t = run
                    .download(dev)
                    .map_err(|e| super::exec::device_error(node, e))?;
                let v = Arc::new(Value::Tensor(t));
                let _ = host.set(v.clone());
                Ok(v)
            }
        }
    }

    /// A slot's value on device `device`: its own tensor if it lives there, else a copy (uploaded
    /// once and kept with the slot; initializers through the resident weights).
    pub(super) fn device_value(
        &self,
        slot: &Slot,
        device: usize,
        stream: usize,
        node: &Node,
    ) -> std::result::Result<DeviceTensor, DeviceError> {
        let run = self
            .devices
            .get(device)
            .ok_or_else(|| DeviceError::Device(format!("no device {device} in this run")))?;
        match slot {
            Slot::Device { dev, .. } if dev.device == device => Ok(dev.clone()),
            Slot::Device { .. } => {
                // On another accelerator: through the host.
                let v = self
                    .host_value(slot, node)
                    .map_err(|e| DeviceError::Decline(e.to_string()))?;
                let Value::Tensor(t) = &*v else {
                    return Err(DeviceError::Decline("a non-tensor input".into()));
                };
                run.upload(stream, t)
            }
            Slot::Host {
                value,
                weight,
                from_shapes,
                copies,
            } => {
                if let Some(d) = copies.borrow().iter().find(|d| d.device == device) {
                    if d.stream != stream {
                        // Uploaded on another stream: wait for everything enqueued there so far
                        // (the upload among it).
                        let event = self.fresh_event();
                        self.record(device, d.stream, event)?;
                        self.wait(device, stream, event)?;
                    }
                    return Ok(d.clone());
                }
                let Value::Tensor(t) = &**value else {
                    return Err(DeviceError::Decline("a non-tensor input".into()));
                };
                // A value computed from shapes is the same `Arc` every run of its input-shape key
                // (`shape_values`): the device keeps its copy as it keeps a weight's.
                let d = if *weight || (*from_shapes && self.shape_values.is_some()) {
                    run.weight(value)?
                } else {
                    run.upload(stream, t)?
                };
                copies.borrow_mut().push(d.clone());
                Ok(d)
            }
        }
    }

    /// Hands a slot whose last reader has run back to the devices holding it (resident weights
    /// stay); its buffers are reused only after the recorded events `after`.
    pub(super) fn release(&self, slot: Slot, after: &[usize]) {
        match slot {
            Slot::Device { dev, .. } => {
                if let Some(run) = self.devices.get(dev.device) {
                    run.release(dev, after);
                }
            }
            Slot::Host {
                weight,
                copies,
                value,
                from_shapes,
            } => {
                let kept = weight || (from_shapes && self.shape_values.is_some());
                if !kept {
                    for d in copies.into_inner() {
                        if let Some(run) = self.devices.get(d.device) {
                            run.release(d, after);
                        }
                    }
                    // A dead f32 activation held by nothing else: its storage to the arena.
                    if let Ok(Value::Tensor(crate::tensor::Tensor::F32(a))) = Arc::try_unwrap(value)
                    {
                        self.arena.give(a.into_raw_vec_and_offset().0);
                    }
                }
            }
        }
    }
}

/// A node's inputs as a device kernel sees them.
pub(super) struct SlotInputs<'a, 's> {
    pub exec: &'a Exec<'s>,
    pub node: &'a Node,
    pub slots: &'a [Option<&'a Slot>],
    /// The device the node runs on, and its stream there.
    pub device: usize,
    pub stream: usize,
}

impl NodeInputs for SlotInputs<'_, '_> {
    fn len(&self) -> usize {
        self.slots.len()
    }

    fn present(&self, i: usize) -> bool {
        self.slots.get(i).is_some_and(|s| s.is_some())
    }

    fn dtype(&self, i: usize) -> Option<DType> {
        match self.slots.get(i).copied().flatten()? {
            Slot::Host { value, .. } => value.as_tensor().map(|t| t.dtype()),
            Slot::Device { dev, .. } => Some(dev.dtype),
        }
    }

    fn shape(&self, i: usize) -> Option<Vec<usize>> {
        match self.slots.get(i).copied().flatten()? {
            Slot::Host { value, .. } => value.as_tensor().map(|t| t.shape().to_vec()),
            Slot::Device { dev, .. } => Some(dev.shape.clone()),
        }
    }

    fn device(&self, i: usize) -> std::result::Result<Option<DeviceTensor>, DeviceError> {
        match self.slots.get(i).copied().flatten() {
            None => Ok(None),
            Some(slot) => self
                .exec
                .device_value(slot, self.device, self.stream, self.node)
                .map(Some),
        }
    }

    fn fixed(&self, i: usize) -> bool {
        matches!(
            self.slots.get(i).copied().flatten(),
            Some(
                Slot::Host { weight: true, .. }
                    | Slot::Host {
                        from_shapes: true,
                        ..
                    }
            )
        )
    }

    fn host(&self, i: usize) -> std::result::Result<Option<Arc<Value>>, DeviceError> {
        let Some(slot) = self.slots.get(i).copied().flatten() else {
            return Ok(None);
        };
        let run_value = matches!(
            slot,
            Slot::Host {
                weight: false,
                from_shapes: false,
                ..
            }
        );
        if self.exec.capture.is_some() && run_value {
            // A replay would reuse these values: the graph would not follow new inputs (values
            // computed from shapes alone are fixed by the capture's input-shape key).
            let why = format!(
                "node '{}' ({}) reads the values of a run input on the host",
                self.node.name, self.node.op_type
            );
            self.exec.refuse(why.clone());
            return Err(DeviceError::Decline(why));
        }
        self.exec
            .host_value(slot, self.node)
            .map(Some)
            .map_err(|e| DeviceError::Decline(e.to_string()))
    }
}
