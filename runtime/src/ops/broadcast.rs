//! Numpy-style multidirectional broadcasting, shared by every elementwise kernel.
use ndarray::{ArrayD, ArrayViewD, IxDyn, Zip};

use crate::error::{OpError, OpResult};

/// The broadcast shape of several shapes, or an error naming them.
pub fn broadcast_shapes(shapes: &[&[usize]]) -> OpResult<Vec<usize>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1usize; rank];
    for s in shapes {
        let off = rank - s.len();
        for (i, &d) in s.iter().enumerate() {
            let o = &mut out[off + i];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return Err(OpError::Invalid(format!("shapes {shapes:?} cannot be broadcast together")));
            }
        }
    }
    Ok(out)
}

/// A view of `a` broadcast to `shape` (which must be a valid broadcast target).
pub fn view_as<'a, T>(a: &'a ArrayD<T>, shape: &[usize]) -> OpResult<ArrayViewD<'a, T>> {
    a.broadcast(IxDyn(shape))
        .ok_or_else(|| OpError::Invalid(format!("cannot broadcast {:?} to {shape:?}", a.shape())))
}

/// Elements past which elementwise work is split across threads.
pub const PAR_THRESHOLD: usize = 1 << 15;

/// `f(a, b)` elementwise with broadcasting.
pub fn binary<A, B, O, F>(a: &ArrayD<A>, b: &ArrayD<B>, f: F) -> OpResult<ArrayD<O>>
where
    A: Clone + Sync,
    B: Clone + Sync,
    O: Clone + Send + Default,
    F: Fn(A, B) -> O + Sync + Send,
{
    if a.shape() == b.shape() {
        if let (Some(x), Some(y)) = (a.as_slice(), b.as_slice()) {
            let v: Vec<O> = if x.len() >= PAR_THRESHOLD {
                use rayon::prelude::*;
                x.par_iter().zip(y.par_iter()).map(|(p, q)| f(p.clone(), q.clone())).collect()
            } else {
                x.iter().zip(y).map(|(p, q)| f(p.clone(), q.clone())).collect()
            };
            return Ok(ArrayD::from_shape_vec(IxDyn(a.shape()), v)?);
        }
    }
    if b.len() == 1 && b.ndim() <= a.ndim() {
        let s = b.iter().next().unwrap().clone();
        let shape = broadcast_shapes(&[a.shape(), b.shape()])?;
        return Ok(a.broadcast(IxDyn(&shape)).unwrap().map(|p| f(p.clone(), s.clone())));
    }
    let shape = broadcast_shapes(&[a.shape(), b.shape()])?;
    let av = view_as(a, &shape)?;
    let bv = view_as(b, &shape)?;
    let mut out = ArrayD::<O>::default(IxDyn(&shape));
    let z = Zip::from(&mut out).and(&av).and(&bv);
    if shape.iter().product::<usize>() >= PAR_THRESHOLD {
        z.par_for_each(|o, p, q| *o = f(p.clone(), q.clone()));
    } else {
        z.for_each(|o, p, q| *o = f(p.clone(), q.clone()));
    }
    Ok(out)
}

/// `f(a)` elementwise, in parallel for large inputs.
pub fn unary<A, O, F>(a: &ArrayD<A>, f: F) -> ArrayD<O>
where
    A: Clone + Sync,
    O: Clone + Send,
    F: Fn(A) -> O + Sync + Send,
{
    if let Some(x) = a.as_slice() {
        if x.len() >= PAR_THRESHOLD {
            use rayon::prelude::*;
            let v: Vec<O> = x.par_iter().map(|p| f(p.clone())).collect();
            return ArrayD::from_shape_vec(IxDyn(a.shape()), v).unwrap();
        }
    }
    a.map(|p| f(p.clone()))
}
