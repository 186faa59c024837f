//! In-place forms of Add, Sub, Mul and Div (a child module of `elementwise`): the output written over
//! the operand that dies at the node (the memory plan's in-place rule, `session/exec.rs`), where that
//! operand already has the broadcast shape. The values are the kernel's bit for bit: the same
//! operation (`Num::n_add`, ...) on the same pair in the same order, whichever operand is
//! overwritten, over the same broadcast patterns as `bin`'s fast paths; any other pattern is left
//! to the kernel.
use ndarray::ArrayD;
use rayon::prelude::*;

use super::{Ar, Num, run_of};
use crate::error::OpResult;
use crate::ops::broadcast::{PAR_THRESHOLD, broadcast_shapes, par_fill};
use crate::ops::cast::{Half, widen};
use crate::ops::{OpCtx, Registry};
use crate::tensor::{Tensor, Value};

/// `op` written over `donor`, input `at` (0 or 1) of the node, the other operand read from
/// `inputs`. `false`, with nothing written, wherever the kernel would do something else than write
/// `donor`'s shape from the same pairs: broadcasting that grows `donor`, operands of different
/// dtypes, legacy broadcasting (before opset 7), integer division (whose zero divisors are the
/// kernel's error), a broadcast pattern `bin` does not take its fast path for, a layout other than
/// standard.
fn arith_over(
    ctx: &OpCtx,
    donor: &mut Tensor,
    at: usize,
    inputs: &[Option<&Value>],
    op: Ar,
) -> OpResult<bool> {
    if ctx.opset() < 7 || at > 1 || (matches!(op, Ar::Div) && donor.dtype().is_int()) {
        return Ok(false);
    }
    let Some(Some(Value::Tensor(other))) = inputs.get(1 - at) else {
        return Ok(false);
    };
    macro_rules! pairs {
        ($($v:ident),*) => {
            match (donor, other) {
                $((Tensor::$v(d), Tensor::$v(o)) => op_over(d, o, at, op),)*
                (Tensor::F16(d), Tensor::F16(o)) => half_op_over(d, o, at, op),
                (Tensor::BF16(d), Tensor::BF16(o)) => half_op_over(d, o, at, op),
                _ => false,
            }
        };
    }
    Ok(pairs!(F32, F64, I8, I16, I32, I64, U8, U16, U32, U64))
}

/// [`op_over`] for halves: through f32, widened and narrowed by slices (`cast::widen`), the
/// kernel's values (`n_add` and its kin compute in f32 and round once) without converting
/// element by element.
fn half_op_over<H: Half>(d: &mut ArrayD<H>, o: &ArrayD<H>, at: usize, op: Ar) -> bool {
    if d.as_slice().is_none() {
        return false;
    }
    let mut dw = widen(d);
    if !op_over(&mut dw, &widen(o), at, op) {
        return false;
    }
    match (d.as_slice_mut(), dw.as_slice()) {
        (Some(x), Some(w)) => {
            H::down_slice(w, x);
            true
        }
        _ => false,
    }
}

/// The operation as a function item (so that the loops inline it, as `arith` does).
fn op_over<T: Num>(d: &mut ArrayD<T>, o: &ArrayD<T>, at: usize, op: Ar) -> bool {
    match op {
        Ar::Add => over(d, o, at, T::n_add),
        Ar::Sub => over(d, o, at, T::n_sub),
        Ar::Mul => over(d, o, at, T::n_mul),
        Ar::Div => over(d, o, at, T::n_div),
        _ => false,
    }
}

/// `f(input 0, input 1)` with the donor as input `at`.
fn over<T: Num, F>(d: &mut ArrayD<T>, o: &ArrayD<T>, at: usize, f: F) -> bool
where
    F: Fn(T, T) -> T + Sync + Send + Copy,
{
    if at == 0 {
        over_pairs(d, o, f)
    } else {
        over_pairs(d, o, move |p, q| f(q, p))
    }
}

/// `d[i] = g(d[i], o[j])` with `o` broadcast to `d`'s shape: the same shape, a scalar, or one run of
/// matching axes (a bias, a per-channel scale), as `bin` computes them.
fn over_pairs<T: Num, G>(d: &mut ArrayD<T>, o: &ArrayD<T>, g: G) -> bool
where
    G: Fn(T, T) -> T + Sync + Send,
{
    let shape = d.shape().to_vec();
    if broadcast_shapes(&[&shape, o.shape()]).ok().as_deref() != Some(shape.as_slice()) {
        return false;
    }
    let Some(y) = o.as_slice() else {
        return false;
    };
    let Some(x) = d.as_slice_mut() else {
        return false;
    };
    if o.shape() == shape.as_slice() {
        par_fill(x, &|start, c| {
            for (v, q) in c.iter_mut().zip(&y[start..]) {
                *v = g(*v, *q);
            }
        });
        return true;
    }
    let Some((inner, block)) = run_of(y.len(), o.shape(), &shape) else {
        return false;
    };
    let work = |x: &mut [T]| {
        if let [s] = y {
            for v in x {
                *v = g(*v, *s);
            }
        } else if inner == 1 {
            for c in x.chunks_mut(y.len()) {
                for (v, q) in c.iter_mut().zip(y) {
                    *v = g(*v, *q);
                }
            }
        } else {
            for (row, q) in x.chunks_mut(inner).zip(y.iter().cycle()) {
                for v in row {
                    *v = g(*v, *q);
                }
            }
        }
    };
    if x.len() >= PAR_THRESHOLD {
        x.par_chunks_mut(block).for_each(work);
    } else {
        x.chunks_mut(block).for_each(work);
    }
    true
}

pub(super) fn register(r: &mut Registry) {
    r.in_place_either("", "Add", |c, t, at, i| arith_over(c, t, at, i, Ar::Add));
    r.in_place_either("", "Sub", |c, t, at, i| arith_over(c, t, at, i, Ar::Sub));
    r.in_place_either("", "Mul", |c, t, at, i| arith_over(c, t, at, i, Ar::Mul));
    r.in_place_either("", "Div", |c, t, at, i| arith_over(c, t, at, i, Ar::Div));
}

#[cfg(test)]
mod tests;
