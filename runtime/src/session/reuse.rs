//! The memory plan at run time: where a value dies at a node and nothing else holds it, the node's
//! output takes its storage instead of new memory. A view op (Reshape, Flatten, Squeeze, Unsqueeze)
//! takes it reshaped; an elementwise op with an in-place form (`ops::InPlace`: Add, Sub, Mul, Div,
//! the unary math and activations) writes its output over it. Which inputs may be taken is fixed
//! by the plan's lifetimes (`Step::frees`, `plan::donors`); whether one is held elsewhere (an
//! initializer, a caller's value, a device copy) is seen here, per run.
//!
//! Only a node's first two inputs, dying there and read once, are candidates; "held once" means
//! not an initializer, no device copy, its `Arc` held once. A view op takes the storage reshaped
//! by the kernel's own shape rule (`ops::shape::view_shape`) instead of running the kernel, which
//! copies. The in-place forms are registered beside their kernels: Add, Sub, Mul and Div over
//! either operand that already has the broadcast shape, the unary math ops and activations (from
//! the same macro as their kernels), and Softmax, LogSoftmax and Hardmax; each writes the kernel's
//! own formula, bit for bit. A form that declines (a dtype, a broadcast that grows the output, an
//! attribute form) leaves the input untouched and the kernel runs. `Counters::in_place_outputs`
//! counts both kinds. The storage of other dead f32 values goes to the arena (`crate::arena`).
use std::sync::Arc;

use super::exec::Exec;
use super::residency::{Scope, Slot};
use crate::error::Result;
use crate::ir::Node;
use crate::plan::{Plan, Step};
use crate::tensor::{Tensor, Value};

/// Whether `slot` holds a host tensor that only the running graph's scope holds: produced by this
/// run (not an initializer, not computed from shapes for a capture), with no device copy.
fn owned_tensor(slot: &Slot) -> bool {
    match slot {
        Slot::Host {
            value,
            weight: false,
            from_shapes: false,
            copies,
        } => {
            Arc::strong_count(value) == 1
                && copies.borrow().is_empty()
                && matches!(&**value, Value::Tensor(t) if !matches!(t, Tensor::Packed(..)))
        }
        _ => false,
    }
}

/// Takes the tensor of `name` out of `scope`, where [`owned_tensor`] said it may.
fn take_tensor(scope: &mut Scope, name: &str) -> Tensor {
    let Some(Slot::Host { value, .. }) = scope.values.remove(name) else {
        unreachable!("checked by owned_tensor");
    };
    match Arc::try_unwrap(value) {
        Ok(Value::Tensor(t)) => t,
        _ => unreachable!("checked by owned_tensor: a tensor held once"),
    }
}

impl Exec<'_> {
    /// A view op whose data input dies at this step, is on the host and is held by nothing else:
    /// that storage, reshaped, where the kernel would copy it (shufflenet's 33 Reshapes were 13% of
    /// its run). `None` wherever any of that does not hold, or the shape rule refuses: the kernel
    /// then runs as usual, with its own errors. The shape is the kernel's own (`view_shape`), so
    /// the result is the kernel's, bit for bit.
    pub(super) fn view_in_place(
        &self,
        plan: &Plan,
        scope: &mut Scope,
        node: &Node,
        step: &Step,
    ) -> Option<Value> {
        if !(node.domain.is_empty() || node.domain == "ai.onnx")
            || !matches!(
                node.op_type.as_str(),
                "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze"
            )
        {
            return None;
        }
        let name = node.inputs.first()?;
        if !crate::plan::donors(node, &step.frees)[0] {
            return None;
        }
        if !owned_tensor(scope.values.get(name)?) {
            return None;
        }
        let shape = {
            let Slot::Host { value, .. } = scope.values.get(name)? else {
                return None;
            };
            let x = value.as_tensor()?;
            let param = match node.inputs.get(1).filter(|n| !n.is_empty()) {
                Some(n) => {
                    let v = self.host_value(scope.get(n)?, node).ok()?;
                    Some(v.as_tensor()?.to_i64_vec().ok()?)
                }
                None => None,
            };
            let shape = self
                .with_ctx(plan, scope, node, |ctx| {
                    crate::ops::shape::view_shape(ctx, x.shape(), param)
                })
                .ok()?;
            if shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)) != Some(x.len()) {
                return None;
            }
            shape
        };
        let view = take_tensor(scope, name).into_shape(&shape).ok()?;
        crate::counters::Counters::bump(&self.counters.in_place_outputs, 1);
        Some(Value::Tensor(view))
    }

    /// An elementwise op with an in-place form whose input `at` (one the plan marked: it dies here
    /// and the node reads it once) is held by nothing else: the output written over that input.
    /// `None` where no input qualifies or the form declines (or fails); the input is then back in
    /// `scope` as it was and the kernel runs.
    pub(super) fn write_in_place(
        &self,
        plan: &Plan,
        scope: &mut Scope,
        node: &Node,
        step: &Step,
    ) -> Result<Option<Value>> {
        let Some((over, donors)) = step.in_place else {
            return Ok(None);
        };
        let Some(at) = (0..2)
            .find(|&i| donors[i] && scope.values.get(&node.inputs[i]).is_some_and(owned_tensor))
        else {
            return Ok(None);
        };
        let args: Vec<Option<Arc<Value>>> = node
            .inputs
            .iter()
            .enumerate()
            .map(|(i, name)| match scope.get(name) {
                Some(slot) if i != at && !name.is_empty() => self.host_value(slot, node).map(Some),
                _ => Ok(None),
            })
            .collect::<Result<_>>()?;
        let name = node.inputs[at].clone();
        let mut donor = take_tensor(scope, &name);
        let refs: Vec<Option<&Value>> = args.iter().map(|a| a.as_deref()).collect();
        if let Ok(true) = self.with_ctx(plan, scope, node, |ctx| over(ctx, &mut donor, at, &refs)) {
            crate::counters::Counters::bump(&self.counters.in_place_outputs, 1);
            return Ok(Some(Value::Tensor(donor)));
        }
        // Declined, or an error: the input back as it was (a form writes nothing before it
        // accepts), and the kernel runs and reports its own errors.
        scope
            .values
            .insert(name, Slot::host(Arc::new(Value::Tensor(donor)), false));
        Ok(None)
    }
}
