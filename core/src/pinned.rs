//! Host tensors page-locked in place on a device ([`PinnedTensor`]), what a pinned tensor of
//! PyTorch or onnxruntime's pinned allocator gives: uploads read them straight over the bus and
//! outputs are copied straight into them, with no staging copy on the host. The session's IO
//! binding (`Session::pin`, `Session::run_into`) hands them to runs.
use std::any::Any;
use std::sync::Arc;

use crate::backend::{DeviceError, DeviceSession};
use crate::tensor::{Tensor, Value};

/// A host tensor page-locked in place on a device (see the module docs). Its values are rewritten
/// in place ([`PinnedTensor::copy_from`], [`PinnedTensor::bytes_mut`]); the tensor itself cannot
/// be swapped for another, whose memory would not be locked.
pub struct PinnedTensor {
    /// Dropped first: the memory is unlocked before it is freed.
    _pin: Box<dyn Any + Send + Sync>,
    value: Arc<Value>,
}

impl std::fmt::Debug for PinnedTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let t = self.tensor();
        write!(f, "PinnedTensor({}{:?})", t.dtype(), t.shape())
    }
}

impl PinnedTensor {
    /// Page-locks `t` on the first of `devices` that can (a tensor in another layout than
    /// row-major is laid out so first). Refused for strings and packed types, and where no device
    /// page-locks host memory (each one's reason, joined).
    pub fn pin(t: Tensor, devices: &[&dyn DeviceSession]) -> Result<PinnedTensor, String> {
        if matches!(t, Tensor::Str(_) | Tensor::Packed(..)) {
            return Err(format!("{} values cannot be page-locked", t.dtype()));
        }
        let t = if crate::with_array!(&t, a => a.is_standard_layout()) {
            t
        } else {
            crate::map_array!(&t, a => a.as_standard_layout().into_owned())
        };
        let (ptr, bytes) = crate::with_array!(&t, a => {
            let s = a.as_slice().expect("row-major after the layout above");
            (s.as_ptr() as *mut u8, std::mem::size_of_val(s))
        });
        let value = Arc::new(Value::Tensor(t));
        let mut why = Vec::new();
        for d in devices {
            // `[ptr, ptr + bytes)` is the storage of the tensor in `value`, which the returned
            // `PinnedTensor` owns and drops after the pin (field order), and never replaces.
            match d.pin_host(ptr, bytes) {
                Ok(pin) => return Ok(PinnedTensor { _pin: pin, value }),
                Err(e) => why.push(format!("{}: {e}", d.device_name())),
            }
        }
        Err(if why.is_empty() {
            "no device to page-lock host memory on".into()
        } else {
            why.join("; ")
        })
    }

    pub fn tensor(&self) -> &Tensor {
        match &*self.value {
            Value::Tensor(t) => t,
            _ => unreachable!("a pinned value is a tensor"),
        }
    }

    /// The tensor as a run input, sharing its storage (the upload reads it in place).
    pub fn value(&self) -> Arc<Value> {
        self.value.clone()
    }

    /// The tensor's bytes, row-major, to write new values in place or for a run to copy an
    /// output into; `None` while a run still holds it as an input.
    // The cast to bytes is a no-op in the macro's u8 arm only.
    #[allow(clippy::unnecessary_cast)]
    pub fn bytes_mut(&mut self) -> Option<&mut [u8]> {
        let Value::Tensor(t) = Arc::get_mut(&mut self.value)? else {
            return None;
        };
        crate::with_array!(t, a => {
            let s = a.as_slice_mut()?;
            let n = std::mem::size_of_val(s);
            // SAFETY: a live, uniquely borrowed slice of plain-old-data elements (strings and
            // packed types are refused by `pin`), so any bytes written are valid values.
            Some(unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr() as *mut u8, n) })
        })
    }

    /// Copies `t`'s values in (same dtype and shape).
    pub fn copy_from(&mut self, t: &Tensor) -> Result<(), DeviceError> {
        let mine = self.tensor();
        if (mine.dtype(), mine.shape()) != (t.dtype(), t.shape()) {
            return Err(DeviceError::Device(format!(
                "a pinned {}{:?} tensor cannot take {}{:?} values",
                mine.dtype(),
                mine.shape(),
                t.dtype(),
                t.shape()
            )));
        }
        let src = crate::tensor::tensor_bytes(t).ok_or_else(|| {
            DeviceError::Device(format!("{} values have no plain bytes", t.dtype()))
        })?;
        let dst = self
            .bytes_mut()
            .ok_or_else(|| DeviceError::Device("the pinned tensor is held by a run".into()))?;
        dst.copy_from_slice(&src);
        Ok(())
    }
}
