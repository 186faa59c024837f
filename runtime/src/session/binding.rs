//! IO binding: runs whose inputs and outputs may stay on the device ([`Session::run_bound`]), so
//! that a pipeline of models, or a loop over one, hands device buffers from run to run instead of
//! copying every value to the host and back (what onnxruntime's `IoBinding` does for device
//! memory).
//!
//! A [`DeviceValue`] is a run's output left where a device made it. It is complete when it is
//! handed out (its run synchronised its streams before returning), it is never written again, and
//! its memory goes back to the device's pool when the last handle drops. A later run of this
//! session, or of another session on the same device, takes it as an input without a copy
//! (`DeviceRun::adopt`); [`DeviceValue::to_host`] copies it back. Bound runs run eagerly (no graph
//! capture, whose replays reuse fixed buffers, and no sampling).
use std::cell::RefCell;
use std::sync::Arc;

use super::Session;
use crate::backend::{DeviceRun, DeviceSession, DeviceTensor};
use crate::counters::Counters;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor, Value};

pub use quorum_core::pinned::PinnedTensor;

/// A run's input or output where it lives: on the host, or left on a device; as an input, also a
/// host tensor page-locked in place ([`Session::pin`]), uploaded without staging.
#[derive(Debug, Clone)]
pub enum Bound {
    Host(Value),
    Device(DeviceValue),
    Pinned(Arc<PinnedTensor>),
}

impl Bound {
    /// The value on the host: itself, or a device value copied back.
    pub fn into_host(self) -> Result<Value> {
        match self {
            Bound::Host(v) => Ok(v),
            Bound::Device(d) => d.to_host().map(Value::Tensor),
            Bound::Pinned(p) => Ok(Value::Tensor(p.tensor().clone())),
        }
    }

    pub fn as_device(&self) -> Option<&DeviceValue> {
        match self {
            Bound::Device(d) => Some(d),
            Bound::Host(_) | Bound::Pinned(_) => None,
        }
    }
}

/// A tensor a run left on a device (see the module docs). Cloning shares the buffer.
#[derive(Clone)]
pub struct DeviceValue {
    tensor: DeviceTensor,
    /// The device side of the session that made it (for [`DeviceValue::to_host`]).
    owner: Arc<dyn DeviceSession>,
}

impl std::fmt::Debug for DeviceValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceValue({}{:?} on {})",
            self.tensor.dtype,
            self.tensor.shape,
            self.owner.device_name()
        )
    }
}

impl DeviceValue {
    pub fn dtype(&self) -> DType {
        self.tensor.dtype
    }

    pub fn shape(&self) -> &[usize] {
        &self.tensor.shape
    }

    /// The device it lives on, in words.
    pub fn device_name(&self) -> String {
        self.owner.device_name()
    }

    /// Copies the value back to the host (a run of its own on the device).
    pub fn to_host(&self) -> Result<Tensor> {
        let counters = Counters::default();
        let run = self
            .owner
            .begin(0, 1, &counters, None)
            .map_err(|e| Error::Device(format!("starting a copy back: {e}")))?;
        let d = run
            .adopt(&self.tensor)
            .map_err(|e| Error::Device(format!("copying {self:?} back: {e}")))?;
        run.download(&d)
            .map_err(|e| Error::Device(format!("copying {self:?} back: {e}")))
    }
}

/// What a bound run takes beside its host inputs, and what it left on a device.
pub(super) struct Binding<'a> {
    /// Inputs on a device, by name, with the device side that made each.
    pub inputs: Vec<(String, DeviceValue)>,
    /// Inputs in page-locked host memory, shared with their [`PinnedTensor`]s.
    pub pinned: Vec<(String, Arc<Value>)>,
    /// Outputs to leave on a device.
    pub keep: Vec<String>,
    /// Outputs to copy into page-locked host memory (`run_into`).
    pub into: Vec<Into<'a>>,
    /// The outputs left on a device (filled by the run), with their device's index.
    pub kept: RefCell<Vec<(String, DeviceTensor)>>,
}

/// An output that goes into a [`PinnedTensor`]: its name, and the tensor's dtype, shape and bytes.
pub(super) struct Into<'a> {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub bytes: std::sync::Mutex<&'a mut [u8]>,
}

/// An output's pinned destination as the executor sees it (a trait object, so that the executor's
/// lifetimes need not match the caller's borrow).
pub(super) trait Dest: Sync {
    fn name(&self) -> &str;
    fn dtype(&self) -> DType;
    fn shape(&self) -> &[usize];
    /// Runs `f` on the destination's bytes.
    fn with_bytes(&self, f: &mut dyn FnMut(&mut [u8]));
}

impl Dest for Into<'_> {
    fn name(&self) -> &str {
        &self.name
    }

    fn dtype(&self) -> DType {
        self.dtype
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn with_bytes(&self, f: &mut dyn FnMut(&mut [u8])) {
        f(&mut self.bytes.lock().unwrap_or_else(|e| e.into_inner()));
    }
}

impl Binding<'_> {
    /// The bound inputs' names, dtypes and shapes.
    pub fn shapes(&self) -> Vec<(String, DType, Vec<usize>)> {
        let device = self
            .inputs
            .iter()
            .map(|(n, d)| (n.clone(), d.dtype(), d.shape().to_vec()));
        let pinned = self.pinned.iter().filter_map(|(n, v)| {
            v.as_tensor()
                .map(|t| (n.clone(), t.dtype(), t.shape().to_vec()))
        });
        device.chain(pinned).collect()
    }

    /// Each device input as a value of one of this run's devices (the first that takes it).
    pub fn adopt(
        &self,
        devices: &[Box<dyn DeviceRun + '_>],
    ) -> Result<Vec<(String, DeviceTensor)>> {
        self.inputs
            .iter()
            .map(|(name, v)| {
                let mut why = Vec::new();
                for d in devices {
                    match d.adopt(&v.tensor) {
                        Ok(t) => return Ok((name.clone(), t)),
                        Err(e) => why.push(e.to_string()),
                    }
                }
                Err(Error::Input {
                    name: name.clone(),
                    msg: format!(
                        "is {v:?}, which no device of this session can read ({})",
                        if why.is_empty() {
                            "the session uses no device".to_string()
                        } else {
                            why.join("; ")
                        }
                    ),
                })
            })
            .collect()
    }
}

impl Session {
    /// Copies a host tensor to this session's first device, as a value a bound run takes without
    /// another copy ([`Session::run_bound`]); an error where the session uses no device.
    pub fn to_device(&self, t: &Tensor) -> Result<DeviceValue> {
        let Some(dev) = self.devices.first() else {
            return Err(Error::Device(
                "the session uses no device to copy a value to".into(),
            ));
        };
        let run = dev
            .session
            .begin(0, 1, &self.counters, None)
            .map_err(|e| Error::Device(format!("starting a copy to the device: {e}")))?;
        let tensor = run.upload(0, t).map_err(|e| {
            Error::Device(format!(
                "copying a {}{:?} tensor to the device: {e}",
                t.dtype(),
                t.shape()
            ))
        })?;
        // The copy is done once the run is (its end synchronises); the value outlives the run.
        run.finish()
            .map_err(|e| Error::Device(format!("copying to the device: {e}")))?;
        drop(run);
        Ok(DeviceValue {
            tensor,
            owner: dev.session.clone(),
        })
    }

    /// Page-locks `t` in place on this session's first device that can (CUDA), for bound runs to
    /// upload without staging ([`Bound::Pinned`]) and to copy outputs into ([`Session::run_into`]).
    /// A tensor in another layout than row-major is laid out so first. Refused for strings and
    /// packed types, and where no device of the session page-locks host memory.
    pub fn pin(&self, t: Tensor) -> Result<PinnedTensor> {
        let devices: Vec<&dyn DeviceSession> = self.devices.iter().map(|d| &*d.session).collect();
        PinnedTensor::pin(t, &devices).map_err(|why| {
            Error::Device(format!(
                "no device of this session page-locks host memory ({why})"
            ))
        })
    }

    /// Runs the model with inputs on the host or left on a device by an earlier run (of this
    /// session or another on the same device), leaving the outputs named in `on_device` where the
    /// device made them instead of copying them back (an output made on the host comes back as
    /// [`Bound::Host`]). Every graph output is returned, in declaration order. Bound runs are
    /// eager: no graph capture or replay, no sampling; verification judges them as any run.
    pub fn run_bound(
        &self,
        inputs: Vec<(String, Bound)>,
        on_device: &[&str],
    ) -> Result<Vec<(String, Bound)>> {
        self.run_binding(inputs, on_device, &mut [])
    }

    /// [`Session::run_bound`], with the outputs named in `into` copied into those pinned tensors
    /// (of the output's dtype and shape), straight from the device where it made them; their
    /// places in the result hold [`Bound::Host`] of an empty optional. Host to host with pinned
    /// tensors on both sides, nothing is copied on the host.
    pub fn run_into(
        &self,
        inputs: Vec<(String, Bound)>,
        into: &mut [(&str, &mut PinnedTensor)],
    ) -> Result<Vec<(String, Bound)>> {
        self.run_binding(inputs, &[], into)
    }

    fn run_binding(
        &self,
        inputs: Vec<(String, Bound)>,
        on_device: &[&str],
        into: &mut [(&str, &mut PinnedTensor)],
    ) -> Result<Vec<(String, Bound)>> {
        for name in on_device.iter().chain(into.iter().map(|(n, _)| n)) {
            if !self.plan.graph.outputs.iter().any(|o| o.name == *name) {
                return Err(Error::Input {
                    name: name.to_string(),
                    msg: "is not an output of the model".into(),
                });
            }
        }
        let mut host = Vec::new();
        let mut device = Vec::new();
        let mut pinned = Vec::new();
        for (name, v) in inputs {
            match v {
                Bound::Host(v) => host.push((name, v)),
                Bound::Device(d) => device.push((name, d)),
                Bound::Pinned(p) => pinned.push((name, p.value())),
            }
        }
        let binding = Binding {
            inputs: device,
            pinned,
            keep: on_device.iter().map(|s| s.to_string()).collect(),
            into: into
                .iter_mut()
                .map(|(name, p)| {
                    let (dtype, shape) = (p.tensor().dtype(), p.tensor().shape().to_vec());
                    let bytes = p.bytes_mut().ok_or_else(|| Error::Input {
                        name: name.to_string(),
                        msg: "its pinned tensor is held by another run".into(),
                    })?;
                    Ok(Into {
                        name: name.to_string(),
                        dtype,
                        shape,
                        bytes: std::sync::Mutex::new(bytes),
                    })
                })
                .collect::<Result<_>>()?,
            kept: RefCell::new(Vec::new()),
        };
        {
            let shapes = binding.shapes();
            let given: Vec<super::inputs::Given> = host
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_tensor().map(|t| (t.dtype(), t.shape()))))
                .chain(
                    shapes
                        .iter()
                        .map(|(n, d, s)| (n.as_str(), Some((*d, &s[..])))),
                )
                .collect();
            super::inputs::check_given(&self.model, &self.plan.graph, &given)?;
        }
        let (outs, _) = self
            .execute_with(host, None, None, Some(&binding))
            .map_err(Error::from)?;
        let mut kept = binding.kept.take();
        outs.into_iter()
            .map(
                |(name, v)| match kept.iter().position(|(n, _)| *n == name) {
                    Some(i) => {
                        let (_, tensor) = kept.swap_remove(i);
                        let owner = self.devices[tensor.device].session.clone();
                        Ok((name, Bound::Device(DeviceValue { tensor, owner })))
                    }
                    None => Ok((name, Bound::Host(v))),
                },
            )
            .collect()
    }
}
