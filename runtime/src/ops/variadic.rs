//! Variadic elementwise ops (Sum, Mean, Max, Min) and Where, all with numpy broadcasting.
use ndarray::{ArrayD, IxDyn, Zip};

use super::broadcast::{PAR_THRESHOLD, broadcast_shapes, view_as};
use super::elementwise::{Ar, Num, arith_t};
use super::{OpCtx, Registry, input, single};
use crate::error::OpResult;
use crate::tensor::{Tensor, Value};
use crate::{bail, map_array2};

/// Folds the inputs with `op` left to right (one input is returned as is).
fn fold(inputs: &[Option<&Value>], op: Ar) -> OpResult<Tensor> {
    let first = input(inputs, 0)?;
    if inputs.len() == 1 {
        return Ok(first.clone());
    }
    let mut acc = arith_t(first, input(inputs, 1)?, op)?;
    for i in 2..inputs.len() {
        acc = arith_t(&acc, input(inputs, i)?, op)?;
    }
    Ok(acc)
}

fn k_sum(_: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    single(fold(inputs, Ar::Add)?)
}

fn k_max(_: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    single(fold(inputs, Ar::Max)?)
}

fn k_min(_: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    single(fold(inputs, Ar::Min)?)
}

fn k_mean(_: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let sum = fold(inputs, Ar::Add)?;
    fn div<T: Num>(a: &ArrayD<T>, n: usize) -> ArrayD<T> {
        let n = T::from_f64(n as f64);
        super::broadcast::unary(a, |v: T| v.n_div(n))
    }
    let n = inputs.len();
    single(match &sum {
        Tensor::F32(a) => Tensor::F32(div(a, n)),
        Tensor::F64(a) => Tensor::F64(div(a, n)),
        Tensor::F16(a) => Tensor::F16(div(a, n)),
        Tensor::BF16(a) => Tensor::BF16(div(a, n)),
        other => crate::unsupported!("Mean of dtype {} (expected a float type)", other.dtype()),
    })
}

/// `cond ? x : y` elementwise over the broadcast shape of all three.
fn select<T: Clone + Default + Send + Sync>(c: &ArrayD<bool>, x: &ArrayD<T>, y: &ArrayD<T>) -> OpResult<ArrayD<T>> {
    let shape = broadcast_shapes(&[c.shape(), x.shape(), y.shape()])?;
    if let (Some(cs), Some(xs), Some(ys)) = (c.as_slice(), x.as_slice(), y.as_slice()) {
        if c.shape() == shape.as_slice() && x.shape() == c.shape() && y.shape() == c.shape() {
            let pick = |((&k, p), q): ((&bool, &T), &T)| if k { p.clone() } else { q.clone() };
            let v: Vec<T> = if cs.len() >= PAR_THRESHOLD {
                use rayon::prelude::*;
                cs.par_iter().zip(xs.par_iter()).zip(ys.par_iter()).map(pick).collect()
            } else {
                cs.iter().zip(xs).zip(ys).map(pick).collect()
            };
            return Ok(ArrayD::from_shape_vec(IxDyn(&shape), v)?);
        }
    }
    let (cv, xv, yv) = (view_as(c, &shape)?, view_as(x, &shape)?, view_as(y, &shape)?);
    let mut out = ArrayD::<T>::default(IxDyn(&shape));
    let z = Zip::from(&mut out).and(&cv).and(&xv).and(&yv);
    let pick = |o: &mut T, &k: &bool, p: &T, q: &T| *o = if k { p.clone() } else { q.clone() };
    if out_len(&shape) >= PAR_THRESHOLD {
        z.par_for_each(pick);
    } else {
        z.for_each(pick);
    }
    Ok(out)
}

fn out_len(shape: &[usize]) -> usize {
    shape.iter().product()
}

fn k_where(_: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let Tensor::Bool(c) = input(inputs, 0)? else {
        bail!("Where condition must be bool, got {}", input(inputs, 0)?.dtype());
    };
    let (x, y) = (input(inputs, 1)?, input(inputs, 2)?);
    single(map_array2!(x, y, a, b => select(c, a, b)?)?)
}

pub fn register(r: &mut Registry) {
    r.add("", "Sum", k_sum);
    r.add("", "Mean", k_mean);
    r.add("", "Max", k_max);
    r.add("", "Min", k_min);
    r.add("", "Where", k_where);
}
