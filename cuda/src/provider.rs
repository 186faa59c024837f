//! CUDA behind the backend seam (`quorum_core::backend`): claims by the kernel families' `claim`, a device
//! session holding the process's device and the session's resident weights, and a per-run context
//! wrapping [`Run`]. Device values cross the seam as `DeviceTensor`s holding this backend's `DevBuf`.
use std::sync::Arc;

use super::memory::{DevBuf, DevTensor, WeightCache};
use super::{Captured, CudaKernel, Device, Inputs, KError, KResult, Run};
use quorum_core::backend::{
    Arithmetic, Backend, Claim, DeviceError, DeviceOptions, DeviceRun, DeviceSession, DeviceTensor,
    NodeInputs, Precision, Provider, Replay,
};
use quorum_core::counters::Counters;
use quorum_core::ir::Node;
use quorum_core::ops::OpCtx;
use quorum_core::tensor::{DType, Tensor, Value};

/// The CUDA backend (registered in `quorum::providers::backend`).
pub struct CudaBackend;

impl Backend for CudaBackend {
    fn provider(&self) -> Provider {
        Provider::Cuda
    }

    fn available(&self) -> Result<(), String> {
        Device::get().map(|_| ()).map_err(|e| e.to_string())
    }

    fn claim(&self, node: &Node) -> Result<Claim, String> {
        super::ops::claim(node).map(|k| Claim(Box::new(k)))
    }

    fn open(&self, options: &DeviceOptions) -> Result<Arc<dyn DeviceSession>, String> {
        let device = Device::get().map_err(|e| e.to_string())?;
        Ok(Arc::new(CudaSession {
            device,
            weights: WeightCache::default(),
            precision: options.precision,
        }))
    }
}

/// One session's CUDA side: the process's device and the weights this session keeps on it.
struct CudaSession {
    device: Arc<Device>,
    weights: WeightCache,
    precision: Precision,
}

impl DeviceSession for CudaSession {
    fn device_name(&self) -> String {
        let (major, minor) = self.device.ctx.info.compute_capability;
        format!(
            "{} (compute capability {major}.{minor})",
            self.device.ctx.info.name
        )
    }

    /// The kernel module's version from `/proc/driver/nvidia/version` (the driver the device
    /// runs; `cuDriverGetVersion` gives only the CUDA version it supports).
    fn driver_version(&self) -> Option<String> {
        let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
        nvidia_driver_version(&text)
    }

    fn begin<'s>(
        &'s self,
        index: usize,
        streams: usize,
        counters: &'s Counters,
        poison: Option<u8>,
    ) -> Result<Box<dyn DeviceRun + 's>, DeviceError> {
        let run = Run::with_streams(&self.device, counters, poison, streams)
            .map_err(|e| DeviceError::Device(e.to_string()))?;
        run.allow_tf32(self.precision == Precision::Tf32);
        Ok(Box::new(CudaRun {
            run,
            device: self.device.clone(),
            weights: &self.weights,
            index,
            delays: Delays::from_env(),
        }))
    }

    fn pin_host(
        &self,
        ptr: *mut u8,
        bytes: usize,
    ) -> Result<Box<dyn std::any::Any + Send + Sync>, DeviceError> {
        let pin = self
            .device
            .pin_host(ptr, bytes)
            .map_err(|e| DeviceError::Device(e.to_string()))?;
        Ok(Box::new(pin))
    }
}

struct CudaRun<'s> {
    run: Run<'s>,
    device: Arc<Device>,
    weights: &'s WeightCache,
    index: usize,
    /// Random spin kernels before launches (`QUORUM_FUZZ_DELAYS`), for the stream fuzzer.
    delays: Option<Delays>,
}

/// `QUORUM_FUZZ_DELAYS=SEED`: before a third of the launches, a spin kernel of up to ~200 µs on the
/// launch's stream, drawn from `SEED` (set per run by the stream fuzzer; unset, no delays).
struct Delays(std::cell::Cell<u64>);

impl Delays {
    fn from_env() -> Option<Delays> {
        let seed: u64 = std::env::var("QUORUM_FUZZ_DELAYS")
            .ok()?
            .trim()
            .parse()
            .ok()?;
        Some(Delays(std::cell::Cell::new(seed ^ 0x9e37_79b9_7f4a_7c15)))
    }

    fn next(&self) -> Option<u64> {
        let mut z = self.0.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        self.0.set(z);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        z.is_multiple_of(3).then_some((z >> 8) % 400_000)
    }
}

fn device_error(e: KError) -> DeviceError {
    match e {
        KError::Decline(m) => DeviceError::Decline(m),
        KError::Op(e) => DeviceError::Op(e),
        KError::Cuda(e) => DeviceError::Device(e.to_string()),
        KError::Device(m) => DeviceError::Device(m),
        KError::Fault(f) => DeviceError::Fault(f),
    }
}

fn kernel_error(e: DeviceError) -> KError {
    match e {
        DeviceError::Decline(m) => KError::Decline(m),
        DeviceError::Op(e) => KError::Op(e),
        DeviceError::Device(m) => KError::Device(m),
        DeviceError::Fault(f) => KError::Fault(f),
    }
}

/// This backend's tensor inside a seam tensor (a tensor of another device is declined).
fn unwrap(d: DeviceTensor) -> KResult<DevTensor> {
    let (dtype, shape) = (d.dtype, d.shape);
    let buf = d
        .buf
        .downcast::<DevBuf>()
        .map_err(|_| KError::Decline("a tensor on another device".into()))?;
    Ok(DevTensor { buf, dtype, shape })
}

impl CudaRun<'_> {
    /// A tensor of this run as the seam sees it, written on the current stream.
    fn wrap(&self, t: DevTensor) -> DeviceTensor {
        DeviceTensor {
            dtype: t.dtype,
            shape: t.shape,
            device: self.index,
            stream: self.run.current_stream(),
            buf: t.buf,
        }
    }
}

impl DeviceRun for CudaRun<'_> {
    fn launch(
        &self,
        stream: usize,
        claim: &Claim,
        ctx: &OpCtx,
        inputs: &dyn NodeInputs,
    ) -> Result<Vec<DeviceTensor>, DeviceError> {
        let kernel = claim
            .0
            .downcast_ref::<CudaKernel>()
            .ok_or_else(|| DeviceError::Device("a claim of another backend".into()))?;
        self.run.set_stream(stream);
        self.run.begin_node(&ctx.node.name);
        if let Some(cycles) = self.delays.as_ref().and_then(|d| d.next()) {
            self.run.spin(cycles).map_err(device_error)?;
        }
        let outs = kernel(ctx, &self.run, &SeamInputs(inputs)).map_err(device_error)?;
        Ok(outs.into_iter().map(|t| self.wrap(t)).collect())
    }

    fn upload(&self, stream: usize, t: &Tensor) -> Result<DeviceTensor, DeviceError> {
        self.run.set_stream(stream);
        let d = self.run.upload(t).map_err(device_error)?;
        Ok(self.wrap(d))
    }

    fn weight(&self, v: &Arc<Value>) -> Result<DeviceTensor, DeviceError> {
        if let Some(d) = self.weights.get(v) {
            self.run.hold(&d);
            return Ok(self.wrap(d));
        }
        let Value::Tensor(t) = &**v else {
            return Err(DeviceError::Decline("a non-tensor weight".into()));
        };
        let d = self.run.upload_weight(t).map_err(device_error)?;
        let d = self.weights.insert(v, d);
        self.run.hold(&d);
        Ok(self.wrap(d))
    }

    fn adopt(&self, d: &DeviceTensor) -> Result<DeviceTensor, DeviceError> {
        let t = unwrap(d.clone()).map_err(device_error)?;
        if !t.buf.of_pool(&self.run.device.pool) {
            return Err(DeviceError::Decline(
                "a value on another CUDA device".into(),
            ));
        }
        self.run.hold(&t);
        Ok(DeviceTensor {
            dtype: t.dtype,
            shape: t.shape,
            device: self.index,
            stream: 0,
            buf: t.buf,
        })
    }

    fn download(&self, d: &DeviceTensor) -> Result<Tensor, DeviceError> {
        let current = self.run.current_stream();
        self.run.set_stream(self.run.read_stream(d.stream));
        let t = unwrap(d.clone()).and_then(|t| self.run.download(&t));
        self.run.set_stream(current);
        t.map_err(device_error)
    }

    fn download_into(&self, d: &DeviceTensor, dst: &mut [u8]) -> Result<(), DeviceError> {
        let current = self.run.current_stream();
        self.run.set_stream(self.run.read_stream(d.stream));
        let done = unwrap(d.clone()).and_then(|t| self.run.download_into(&t, dst));
        self.run.set_stream(current);
        done.map_err(device_error)
    }

    fn download_later(&self, d: &DeviceTensor) -> Result<usize, DeviceError> {
        self.run.set_stream(d.stream);
        let t = unwrap(d.clone()).map_err(device_error)?;
        self.run.download_later(&t).map_err(device_error)
    }

    fn record(&self, stream: usize, event: usize) -> Result<(), DeviceError> {
        self.run.record(stream, event).map_err(device_error)
    }

    fn wait(&self, stream: usize, event: usize) -> Result<(), DeviceError> {
        self.run.wait(stream, event).map_err(device_error)
    }

    fn release(&self, d: DeviceTensor, after: &[usize]) {
        if let Ok(t) = unwrap(d) {
            self.run.release(t, after);
        }
    }

    fn finish(&self) -> Result<Vec<Tensor>, DeviceError> {
        self.run.finish().map_err(device_error)
    }

    fn begin_capture(&self) -> Result<(), DeviceError> {
        self.run.set_stream(0);
        self.run.begin_capture().map_err(device_error)
    }

    fn end_capture(&self) -> Result<(Vec<Tensor>, Box<dyn Replay>), DeviceError> {
        let (outs, captured) = self.run.end_capture().map_err(device_error)?;
        Ok((
            outs,
            Box::new(CudaReplay {
                device: self.device.clone(),
                captured,
            }),
        ))
    }

    fn abort_capture(&self) {
        self.run.abort_capture();
    }

    fn attach_log(&self, log: Arc<quorum_core::cmdlog::CommandLog>) {
        self.run.attach_log(log);
    }

    fn audit_launches(&self) {
        self.run.audit_launches();
    }

    fn arithmetic(&self) -> Arithmetic {
        self.run.arithmetic()
    }
}

/// A CUDA graph of a captured run, replayed on the device's streams.
struct CudaReplay {
    device: Arc<Device>,
    captured: Captured,
}

impl Replay for CudaReplay {
    fn footprint(&self) -> quorum_core::backend::Footprint {
        self.captured.footprint()
    }

    fn replay(&self, inputs: &[&Tensor], counters: &Counters) -> Result<Vec<Tensor>, DeviceError> {
        self.captured
            .replay(&self.device, inputs, counters)
            .map_err(device_error)
    }

    fn replay_carrying(
        &self,
        inputs: &[Option<&Tensor>],
        carry: &[quorum_core::backend::Carry],
        counters: &Counters,
        log: Option<&quorum_core::cmdlog::CommandLog>,
    ) -> Result<Vec<Option<Tensor>>, DeviceError> {
        self.captured
            .replay_carrying(&self.device, inputs, carry, counters, log)
            .map_err(device_error)
    }
}

/// The executor's node inputs as the CUDA kernels' [`Inputs`].
struct SeamInputs<'a>(&'a dyn NodeInputs);

impl Inputs for SeamInputs<'_> {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn present(&self, i: usize) -> bool {
        self.0.present(i)
    }

    fn dtype(&self, i: usize) -> Option<DType> {
        self.0.dtype(i)
    }

    fn shape(&self, i: usize) -> Option<Vec<usize>> {
        self.0.shape(i)
    }

    fn dev(&self, i: usize) -> KResult<Option<DevTensor>> {
        match self.0.device(i).map_err(kernel_error)? {
            None => Ok(None),
            Some(d) => unwrap(d).map(Some),
        }
    }

    fn host(&self, i: usize) -> KResult<Option<Arc<Value>>> {
        self.0.host(i).map_err(kernel_error)
    }

    fn fixed(&self, i: usize) -> bool {
        self.0.fixed(i)
    }
}

/// The driver version in the text of `/proc/driver/nvidia/version` ("NVRM version: NVIDIA UNIX
/// x86_64 Kernel Module  580.159.03  Tue ..."): the first word that is dotted numbers.
pub fn nvidia_driver_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM"))?;
    line.split_whitespace()
        .find(|w| w.contains('.') && w.chars().all(|c| c.is_ascii_digit() || c == '.'))
        .map(str::to_string)
}

#[cfg(test)]
mod driver_version_tests {
    #[test]
    fn reads_the_kernel_module_version() {
        let text = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.03  Tue Oct  7 2025\nGCC version:  gcc version 13.3.0\n";
        assert_eq!(
            super::nvidia_driver_version(text).as_deref(),
            Some("580.159.03")
        );
        // A file without the NVRM line names no driver.
        assert_eq!(
            super::nvidia_driver_version("GCC version: 13.3.0 1.2"),
            None
        );
    }
}
