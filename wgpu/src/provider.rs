//! wgpu behind the backend seam (`quorum_core::backend`): claims by the kernel families' `claim`, a device
//! session holding the process's device and the session's resident weights, and a per-run context
//! wrapping [`Run`]. Device values cross the seam as `DeviceTensor`s holding this backend's `WBuf`.
use std::sync::Arc;

use super::device::Device;
use super::memory::{WTensor, WeightCache};
use super::ops::{WgpuKernel, unwrap};
use super::run::Run;
use quorum_core::backend::{
    Backend, Claim, DeviceError, DeviceOptions, DeviceRun, DeviceSession, DeviceTensor, NodeInputs,
    Provider,
};
use quorum_core::counters::Counters;
use quorum_core::ir::Node;
use quorum_core::ops::OpCtx;
use quorum_core::tensor::{Tensor, Value};

/// The wgpu backend (registered in `quorum::providers::backend`).
pub struct WgpuBackend;

impl Backend for WgpuBackend {
    fn provider(&self) -> Provider {
        Provider::Wgpu
    }

    fn available(&self) -> Result<(), String> {
        Device::get().map(|_| ())
    }

    fn auto_available(&self) -> Result<(), String> {
        Device::get()?.auto_usable()
    }

    fn claim(&self, node: &Node) -> Result<Claim, String> {
        super::ops::claim(node).map(|k| Claim(Box::new(k)))
    }

    fn open(&self, _: &DeviceOptions) -> Result<Arc<dyn DeviceSession>, String> {
        Ok(Arc::new(WgpuSession {
            device: Device::get()?,
            weights: WeightCache::default(),
        }))
    }
}

/// One session's wgpu side: the process's device and the weights this session keeps on it.
struct WgpuSession {
    device: Arc<Device>,
    weights: WeightCache,
}

impl DeviceSession for WgpuSession {
    fn device_name(&self) -> String {
        self.device.describe()
    }

    fn driver_version(&self) -> Option<String> {
        Some(format!(
            "{} {}",
            self.device.info.driver, self.device.info.driver_info
        ))
    }

    /// One queue is one stream: `streams` is accepted and every stream maps onto the queue (see
    /// `super::run`).
    fn begin<'s>(
        &'s self,
        index: usize,
        _streams: usize,
        counters: &'s Counters,
        poison: Option<u8>,
    ) -> Result<Box<dyn DeviceRun + 's>, DeviceError> {
        Ok(Box::new(WgpuRun {
            run: Run::new(&self.device, counters, poison),
            weights: &self.weights,
            index,
        }))
    }
}

struct WgpuRun<'s> {
    run: Run<'s>,
    weights: &'s WeightCache,
    index: usize,
}

impl WgpuRun<'_> {
    fn wrap(&self, t: WTensor) -> DeviceTensor {
        DeviceTensor {
            dtype: t.dtype,
            shape: t.shape,
            device: self.index,
            stream: 0,
            buf: t.buf,
        }
    }
}

impl DeviceRun for WgpuRun<'_> {
    fn launch(
        &self,
        _stream: usize,
        claim: &Claim,
        ctx: &OpCtx,
        inputs: &dyn NodeInputs,
    ) -> Result<Vec<DeviceTensor>, DeviceError> {
        let kernel = claim
            .0
            .downcast_ref::<WgpuKernel>()
            .ok_or_else(|| DeviceError::Device("a claim of another backend".into()))?;
        self.run.label(&ctx.node.qualified_op());
        let outs = kernel(ctx, &self.run, inputs)?;
        Ok(outs.into_iter().map(|t| self.wrap(t)).collect())
    }

    fn upload(&self, _stream: usize, t: &Tensor) -> Result<DeviceTensor, DeviceError> {
        let d = self.run.upload(t)?;
        Ok(self.wrap(d))
    }

    fn weight(&self, v: &Arc<Value>) -> Result<DeviceTensor, DeviceError> {
        if let Some(d) = self.weights.get(v) {
            return Ok(self.wrap(d));
        }
        let Value::Tensor(t) = &**v else {
            return Err(DeviceError::Decline("a non-tensor weight".into()));
        };
        let d = self.run.upload_weight(t)?;
        // Every buffer a dispatch binds is held by the run until its work is done, so a copy
        // that loses the insert race is safe to drop.
        let d = self.weights.insert(v, d);
        Ok(self.wrap(d))
    }

    fn download(&self, d: &DeviceTensor) -> Result<Tensor, DeviceError> {
        self.run.download(&unwrap(d.clone())?)
    }

    fn download_later(&self, d: &DeviceTensor) -> Result<usize, DeviceError> {
        self.run.download_later(&unwrap(d.clone())?)
    }

    /// One queue runs everything in the order given, which already respects every dependency: an
    /// event has nothing to mark.
    fn record(&self, _stream: usize, _event: usize) -> Result<(), DeviceError> {
        Ok(())
    }

    /// See [`WgpuRun::record`]: the queue's order is the wait.
    fn wait(&self, _stream: usize, _event: usize) -> Result<(), DeviceError> {
        Ok(())
    }

    fn release(&self, d: DeviceTensor, _after: &[usize]) {
        if let Ok(t) = unwrap(d) {
            self.run.release(t);
        }
    }

    fn finish(&self) -> Result<Vec<Tensor>, DeviceError> {
        self.run.finish()
    }

    fn time_kernels(&self) {
        self.run.time_kernels();
    }

    fn attach_log(&self, log: Arc<quorum_core::cmdlog::CommandLog>) {
        self.run.attach_log(log);
    }
}
