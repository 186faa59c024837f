//! Variadic elementwise ops (Sum, Mean, Max, Min) and Where, all with numpy broadcasting.
use ndarray::{ArrayD, IxDyn, Zip};

use super::broadcast::{PAR_THRESHOLD, broadcast_shapes, view_as};
use super::cast::cast;
use super::elementwise::{Ar, Num, arith_t, check_out};
use super::{OpCtx, Registry, input, single};
use crate::error::OpResult;
use crate::tensor::{DType, Tensor, Value};
use crate::{bail, map_array2};

/// Folds the inputs with `op` left to right (one input is returned as is). f16 and bf16 inputs are
/// folded in f32 and the result is left in f32 for the caller to round once ([`narrow`]).
fn fold(ctx: &OpCtx, inputs: &[Option<&Value>], op: Ar) -> OpResult<Tensor> {
    let all = (0..inputs.len())
        .map(|i| input(inputs, i))
        .collect::<OpResult<Vec<_>>>()?;
    let Some((&first, rest)) = all.split_first() else {
        bail!("needs at least one input");
    };
    let shapes: Vec<&[usize]> = all.iter().map(|t| t.shape()).collect();
    check_out(ctx, &shapes, first.dtype().size_in_memory())?;
    if rest.is_empty() {
        return Ok(first.clone());
    }
    let wide: Vec<Tensor>;
    let all: Vec<&Tensor> = if matches!(first.dtype(), DType::F16 | DType::BF16) {
        wide = all
            .iter()
            .map(|t| cast(t, DType::F32, false))
            .collect::<OpResult<_>>()?;
        wide.iter().collect()
    } else {
        all
    };
    let (first, second, rest) = (all[0], all[1], &all[2..]);
    rest.iter()
        .try_fold(arith_t(first, second, op)?, |acc, t| arith_t(&acc, t, op))
}

/// The fold's result rounded once into the inputs' type (f16 and bf16 were summed in f32).
fn narrow(t: Tensor, like: DType) -> OpResult<Tensor> {
    if t.dtype() == like {
        Ok(t)
    } else {
        cast(&t, like, false)
    }
}

fn first_dtype(inputs: &[Option<&Value>]) -> OpResult<DType> {
    Ok(input(inputs, 0)?.dtype())
}

fn k_sum(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    single(narrow(fold(ctx, inputs, Ar::Add)?, first_dtype(inputs)?)?)
}

fn k_max(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    single(narrow(fold(ctx, inputs, Ar::Max)?, first_dtype(inputs)?)?)
}

fn k_min(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    single(narrow(fold(ctx, inputs, Ar::Min)?, first_dtype(inputs)?)?)
}

fn k_mean(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let sum = fold(ctx, inputs, Ar::Add)?;
    fn div<T: Num>(a: &ArrayD<T>, n: usize) -> ArrayD<T> {
        let n = T::from_f64(n as f64);
        super::broadcast::unary(a, |v: T| v.n_div(n))
    }
    let n = inputs.len();
    let mean = match &sum {
        Tensor::F32(a) => Tensor::F32(div(a, n)),
        Tensor::F64(a) => Tensor::F64(div(a, n)),
        Tensor::F16(a) => Tensor::F16(div(a, n)),
        Tensor::BF16(a) => Tensor::BF16(div(a, n)),
        other => crate::unsupported!("Mean of dtype {} (expected a float type)", other.dtype()),
    };
    single(narrow(mean, first_dtype(inputs)?)?)
}

/// `cond ? x : y` elementwise over the broadcast shape of all three.
fn select<T: Clone + Default + Send + Sync>(
    c: &ArrayD<bool>,
    x: &ArrayD<T>,
    y: &ArrayD<T>,
) -> OpResult<ArrayD<T>> {
    let shape = broadcast_shapes(&[c.shape(), x.shape(), y.shape()])?;
    let same = c.shape() == shape.as_slice() && x.shape() == c.shape() && y.shape() == c.shape();
    if same && let (Some(cs), Some(xs), Some(ys)) = (c.as_slice(), x.as_slice(), y.as_slice()) {
        let pick = |((&k, p), q): ((&bool, &T), &T)| if k { p.clone() } else { q.clone() };
        let v: Vec<T> = if cs.len() >= PAR_THRESHOLD {
            use rayon::prelude::*;
            cs.par_iter()
                .zip(xs.par_iter())
                .zip(ys.par_iter())
                .map(pick)
                .collect()
        } else {
            cs.iter().zip(xs).zip(ys).map(pick).collect()
        };
        return Ok(ArrayD::from_shape_vec(IxDyn(&shape), v)?);
    }
    let (cv, xv, yv) = (
        view_as(c, &shape)?,
        view_as(x, &shape)?,
        view_as(y, &shape)?,
    );
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

fn k_where(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let Tensor::Bool(c) = input(inputs, 0)? else {
        bail!(
            "Where condition must be bool, got {}",
            input(inputs, 0)?.dtype()
        );
    };
    let (x, y) = (input(inputs, 1)?, input(inputs, 2)?);
    check_out(
        ctx,
        &[c.shape(), x.shape(), y.shape()],
        x.dtype().size_in_memory(),
    )?;
    single(map_array2!(x, y, a, b => select(c, a, b)?)?)
}

pub fn register(r: &mut Registry) {
    r.add("", "Sum", k_sum);
    r.add("", "Mean", k_mean);
    r.add("", "Max", k_max);
    r.add("", "Min", k_min);
    r.add("", "Where", k_where);
}
