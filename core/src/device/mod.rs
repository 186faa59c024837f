//! Host-side device work written once for every device backend.
//!
//! A backend brings three things: a code generator per family of the op table
//! ([`claim::CodeGenerators`]), the device primitives of [`Primitives`] (allocate, a strided copy, a
//! fill, a MatMul; each a kernel or a driver call of its own) and the way its kernels read a node's inputs
//! ([`KernelInputs`]). Everything above them is here, generic over the backend: which generator
//! claims a node ([`claim`]), element layouts and
//! stride simplification ([`layout`]), and the movement ops that are plans of strided copies
//! ([`movement`]: views, Transpose, Expand, Slice, Concat, Split, Tile, DepthToSpace, SpaceToDepth,
//! ConstantOfShape, inference Dropout), Einsum as permutations and GEMMs ([`einsum`]), plus the
//! host-side plans of the movement ops whose kernels are the backend's own (Pad, Gather). The op semantics themselves (attribute defaults, shape rules)
//! come from `crate::ops`, as the CPU kernels take them.
//!
//! Architecture invariant: a backend's movement code is its primitives; a rule about shapes,
//! attributes or which copies make an op is written here, once.
use std::sync::Arc;

use crate::error::OpError;
use crate::tensor::{DType, Tensor, Value};

pub mod claim;
pub mod conv;
pub mod einsum;
pub mod forms;
pub mod index;
pub mod layout;
pub mod movement;
pub mod protocol;

pub use layout::Strided;

/// A backend's device tensor as the shared code handles it.
pub trait DeviceValue: Clone {
    fn dtype(&self) -> DType;
    fn shape(&self) -> &[usize];
    /// The same storage under another shape of the same element count.
    fn view(&self, shape: Vec<usize>) -> Self;
    fn len(&self) -> usize {
        self.shape().iter().product()
    }
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a device backend provides to the shared code.
pub trait Primitives {
    type Tensor: DeviceValue;
    type Error: From<OpError>;

    /// The error that sends the node back to the CPU, with its reason.
    fn decline(reason: String) -> Self::Error;

    /// A new tensor; its contents are unspecified (poisoned in checked runs).
    fn alloc(&self, dtype: DType, shape: &[usize]) -> Result<Self::Tensor, Self::Error>;

    /// Copies every element of `shape`: `dst` at `to` from `src` at `from` (same dtype).
    fn strided_copy(
        &self,
        dst: &Self::Tensor,
        to: &Strided,
        src: &Self::Tensor,
        from: &Strided,
        shape: &[usize],
    ) -> Result<(), Self::Error>;

    /// A new tensor of `shape` whose every element is `value`'s one element.
    fn fill(&self, value: &Tensor, shape: &[usize]) -> Result<Self::Tensor, Self::Error>;

    /// MatMul of two tensors by numpy's rules (batch dims broadcast), the backend's own GEMM; a
    /// decline for element types it does not multiply.
    fn matmul(&self, a: &Self::Tensor, b: &Self::Tensor) -> Result<Self::Tensor, Self::Error>;
}

/// A node's inputs as a backend's kernel reads them.
pub trait KernelInputs<T, E> {
    /// How many inputs the node has (omitted ones included).
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Whether input `i` is present (not omitted).
    fn present(&self, i: usize) -> bool;
    /// Input `i` on the device (`None` when omitted).
    fn device(&self, i: usize) -> Result<Option<T>, E>;
    /// Input `i` on the host (`None` when omitted): small parameter tensors such as shapes and axes.
    fn host(&self, i: usize) -> Result<Option<Arc<Value>>, E>;
}

/// Input `i` on the device; an operator error when it is missing.
pub fn required<T, E: From<OpError>>(
    inputs: &(impl KernelInputs<T, E> + ?Sized),
    i: usize,
) -> Result<T, E> {
    inputs
        .device(i)?
        .ok_or_else(|| OpError::Invalid(format!("input {i} is required")).into())
}

/// Input `i` read on the host as i64 values (shapes, axes, pads); `None` when omitted.
pub fn host_i64s<T, E: From<OpError>>(
    inputs: &(impl KernelInputs<T, E> + ?Sized),
    i: usize,
) -> Result<Option<Vec<i64>>, E> {
    match inputs.host(i)? {
        None => Ok(None),
        Some(v) => match &*v {
            Value::Tensor(t) => Ok(Some(t.to_i64_vec()?)),
            _ => Err(OpError::Invalid(format!("input {i} must be a tensor")).into()),
        },
    }
}

/// Input `i` read on the host as f64 values (scales, constant values); `None` when omitted.
pub fn host_f64s<T, E: From<OpError>>(
    inputs: &(impl KernelInputs<T, E> + ?Sized),
    i: usize,
) -> Result<Option<Vec<f64>>, E> {
    match inputs.host(i)? {
        None => Ok(None),
        Some(v) => match &*v {
            Value::Tensor(t) => Ok(Some(t.to_f64_vec()?)),
            _ => Err(OpError::Invalid(format!("input {i} must be a tensor")).into()),
        },
    }
}

/// Input `i` read on the host as f64 values when it is present, `None` when omitted.
pub fn optional_f64s<T, E: From<OpError>>(
    inputs: &(impl KernelInputs<T, E> + ?Sized),
    i: usize,
) -> Result<Option<Vec<f64>>, E> {
    if inputs.present(i) {
        host_f64s(inputs, i)
    } else {
        Ok(None)
    }
}

/// Input `i` read on the host as i64 values when it is present, `None` when omitted.
pub fn optional_i64s<T, E: From<OpError>>(
    inputs: &(impl KernelInputs<T, E> + ?Sized),
    i: usize,
) -> Result<Option<Vec<i64>>, E> {
    if inputs.present(i) {
        host_i64s(inputs, i)
    } else {
        Ok(None)
    }
}
