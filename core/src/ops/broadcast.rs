//! Numpy-style multidirectional broadcasting, shared by every elementwise kernel, and [`par_fill`], the
//! one place elementwise work is split across threads.
//!
//! Compile-time note: kernels are generic over dtype and closure, so anything generic here is
//! instantiated hundreds of times. Rayon is therefore only reached through `par_fill`, which is generic
//! over the output element type alone and takes the per-chunk work as a `dyn` closure; the per-element
//! loop inside a chunk stays monomorphic and inlinable. A rayon pipeline per instantiation once
//! made one build of the crate take over ten CPU-minutes. Several families still call rayon
//! directly where their instantiations are few; moving the rest is open work.
//!
//! Broadcast binary ops write each output element once, into storage never zero-filled first.
use std::mem::MaybeUninit;

use ndarray::{ArrayD, ArrayViewD, IxDyn};
use rayon::prelude::*;

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
                return Err(OpError::Invalid(format!(
                    "shapes {shapes:?} cannot be broadcast together"
                )));
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

/// Fills `out` by calling `work(start, chunk)` on consecutive chunks (`start` is the chunk's offset),
/// in parallel when `out` is large.
pub fn par_fill<O: Send>(out: &mut [O], work: &(dyn Fn(usize, &mut [O]) + Sync)) {
    let n = out.len();
    let threads = rayon::current_num_threads();
    if n >= PAR_THRESHOLD && threads > 1 {
        let chunk = (n / (threads * 4)).max(PAR_THRESHOLD / 4);
        out.par_chunks_mut(chunk)
            .enumerate()
            .for_each(|(i, c)| work(i * chunk, c));
    } else {
        work(0, out);
    }
}

/// Row-major strides of `shape` as seen from the broadcast `out` shape (0 along broadcast axes).
fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let pad = out.len() - shape.len();
    let mut strides = vec![0usize; out.len()];
    let mut s = 1;
    for i in (0..shape.len()).rev() {
        strides[pad + i] = if shape[i] == 1 { 0 } else { s };
        s *= shape[i];
    }
    strides
}

/// `shape` with adjacent dims merged wherever both operands' strides allow (each operand either
/// contiguous across the pair or broadcast along both), so that the innermost loop is as long as it
/// can be: [1, C, H, W] · [1, C, 1, 1] becomes [C, H·W] · [C, 1].
fn coalesce(
    shape: &[usize],
    sa: Vec<usize>,
    sb: Vec<usize>,
) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    if shape.is_empty() {
        return (vec![1], vec![0], vec![0]);
    }
    let (mut dims, mut ta, mut tb) = (vec![shape[0]], vec![sa[0]], vec![sb[0]]);
    for d in 1..shape.len() {
        let last = dims.len() - 1;
        let merges = |t: &[usize], s: &[usize]| t[last] == s[d] * shape[d];
        if shape[d] == 1 {
            continue;
        }
        if dims[last] == 1 {
            (dims[last], ta[last], tb[last]) = (shape[d], sa[d], sb[d]);
        } else if merges(&ta, &sa) && merges(&tb, &sb) {
            dims[last] *= shape[d];
            (ta[last], tb[last]) = (sa[d], sb[d]);
        } else {
            dims.push(shape[d]);
            ta.push(sa[d]);
            tb.push(sb[d]);
        }
    }
    (dims, ta, tb)
}

/// `f(a, b)` elementwise with broadcasting.
pub fn binary<A, B, O, F>(a: &ArrayD<A>, b: &ArrayD<B>, f: F) -> OpResult<ArrayD<O>>
where
    A: Clone + Sync,
    B: Clone + Sync,
    O: Clone + Send + Default,
    F: Fn(A, B) -> O + Sync + Send,
{
    let shape = broadcast_shapes(&[a.shape(), b.shape()])?;
    let a = a.as_standard_layout();
    let b = b.as_standard_layout();
    let (x, y) = match (a.as_slice(), b.as_slice()) {
        (Some(x), Some(y)) => (x, y),
        _ => {
            return Err(OpError::Invalid(
                "internal: standard layout without a slice".into(),
            ));
        }
    };
    let n: usize = shape.iter().product();
    // Written whole below (every branch covers every element once), so never filled first.
    let mut out: Vec<O> = crate::arena::vec(n);
    let spare = &mut out.spare_capacity_mut()[..n];
    if a.shape() == b.shape() {
        par_fill(spare, &|start, o| {
            for (k, o) in o.iter_mut().enumerate() {
                o.write(f(x[start + k].clone(), y[start + k].clone()));
            }
        });
    } else if y.len() == 1 && a.shape() == shape.as_slice() {
        let s = &y[0];
        par_fill(spare, &|start, o| {
            for (k, o) in o.iter_mut().enumerate() {
                o.write(f(x[start + k].clone(), s.clone()));
            }
        });
    } else if x.len() == 1 && b.shape() == shape.as_slice() {
        let s = &x[0];
        par_fill(spare, &|start, o| {
            for (k, o) in o.iter_mut().enumerate() {
                o.write(f(s.clone(), y[start + k].clone()));
            }
        });
    } else if n > 0 {
        let (shape, sa, sb) = coalesce(
            &shape,
            broadcast_strides(a.shape(), &shape),
            broadcast_strides(b.shape(), &shape),
        );
        let (shape, sa, sb) = (&shape, &sa, &sb);
        par_fill(spare, &|start, o| {
            // Rows of the innermost dim; an odometer over the outer dims, from flat offset `start`.
            let r = shape.len();
            let inner = shape[r - 1];
            let (ea, eb) = (sa[r - 1], sb[r - 1]);
            let mut idx = vec![0usize; r];
            let mut rem = start;
            for d in (0..r).rev() {
                idx[d] = rem % shape[d];
                rem /= shape[d];
            }
            let mut ia: usize = idx.iter().zip(sa).map(|(i, s)| i * s).sum();
            let mut ib: usize = idx.iter().zip(sb).map(|(i, s)| i * s).sum();
            let mut done = 0;
            while done < o.len() {
                let m = (inner - idx[r - 1]).min(o.len() - done);
                let dst = &mut o[done..done + m];
                match (ea, eb) {
                    (1, 1) => {
                        for ((o, p), q) in dst.iter_mut().zip(&x[ia..ia + m]).zip(&y[ib..ib + m]) {
                            o.write(f(p.clone(), q.clone()));
                        }
                    }
                    (1, 0) => {
                        let q = &y[ib];
                        for (o, p) in dst.iter_mut().zip(&x[ia..ia + m]) {
                            o.write(f(p.clone(), q.clone()));
                        }
                    }
                    (0, 1) => {
                        let p = &x[ia];
                        for (o, q) in dst.iter_mut().zip(&y[ib..ib + m]) {
                            o.write(f(p.clone(), q.clone()));
                        }
                    }
                    _ => {
                        for (k, o) in dst.iter_mut().enumerate() {
                            o.write(f(x[ia + k * ea].clone(), y[ib + k * eb].clone()));
                        }
                    }
                }
                done += m;
                if done == o.len() {
                    break;
                }
                // Next row: back to the start of the innermost dim, carry into the outer ones.
                ia -= ea * idx[r - 1];
                ib -= eb * idx[r - 1];
                idx[r - 1] = 0;
                for d in (0..r - 1).rev() {
                    idx[d] += 1;
                    ia += sa[d];
                    ib += sb[d];
                    if idx[d] < shape[d] {
                        break;
                    }
                    ia -= sa[d] * shape[d];
                    ib -= sb[d] * shape[d];
                    idx[d] = 0;
                }
            }
        });
    }
    // SAFETY: par_fill hands each of the first n elements to one call, and each branch writes
    // every element of its chunk.
    unsafe { out.set_len(n) };
    Ok(ArrayD::from_shape_vec(IxDyn(&shape), out)?)
}

/// `f(a)` elementwise, in parallel for large inputs.
pub fn unary<A, O, F>(a: &ArrayD<A>, f: F) -> ArrayD<O>
where
    A: Clone + Sync,
    O: Clone + Send,
    F: Fn(A) -> O + Sync + Send,
{
    let a = a.as_standard_layout();
    let Some(x) = a.as_slice() else {
        return a.map(|p| f(p.clone()));
    };
    let mut out: Vec<O> = crate::arena::vec(x.len());
    par_fill(&mut out.spare_capacity_mut()[..x.len()], &|start, o| {
        for (o, v) in o.iter_mut().zip(&x[start..]) {
            o.write(f(v.clone()));
        }
    });
    // SAFETY: par_fill hands every element of the first x.len() to exactly one call, and
    // each call writes all of its chunk.
    unsafe { out.set_len(x.len()) };
    ArrayD::from_shape_vec(IxDyn(a.shape()), out).unwrap_or_else(|_| a.map(|p| f(p.clone())))
}

/// [`unary`] with a kernel over whole slices (`f(inputs, outputs)` writes every output), for
/// kernels written to vectorize across elements; chunks split across threads as [`par_fill`] does.
pub fn unary_slices<A, O, F>(a: &ArrayD<A>, f: F) -> ArrayD<O>
where
    A: Clone + Sync,
    O: Clone + Send,
    F: Fn(&[A], &mut [MaybeUninit<O>]) + Sync,
{
    let a = a.as_standard_layout();
    let owned: Vec<A>;
    let x = match a.as_slice() {
        Some(x) => x,
        None => {
            owned = a.iter().cloned().collect();
            &owned
        }
    };
    let mut out: Vec<O> = crate::arena::vec(x.len());
    par_fill(&mut out.spare_capacity_mut()[..x.len()], &|start, o| {
        f(&x[start..start + o.len()], o)
    });
    // SAFETY: par_fill hands every element of the first x.len() to exactly one call, and `f`
    // writes all of its chunk.
    unsafe { out.set_len(x.len()) };
    ArrayD::from_shape_vec(IxDyn(a.shape()), out).expect("one output per input element")
}

/// [`unary`] written over its operand (`a[i] = f(a[i])`), split across threads as [`par_fill`]
/// splits: the in-place form of an elementwise kernel whose input dies at its node. `false`, with
/// nothing written, where `a` is not in standard layout.
pub fn unary_over<A, F>(a: &mut ArrayD<A>, f: F) -> bool
where
    A: Copy + Send + Sync,
    F: Fn(A) -> A + Sync + Send,
{
    let Some(x) = a.as_slice_mut() else {
        return false;
    };
    par_fill(x, &|_, c| {
        for v in c {
            *v = f(*v);
        }
    });
    true
}

/// Values [`unary_slices_over`] copies out at a time before its slice kernel writes them back.
const OVER_CHUNK: usize = 256;

/// [`unary_slices`] written over its operand: each piece of at most [`OVER_CHUNK`] values is copied
/// to the stack and the slice kernel writes its results back in place, so that its input and output
/// never alias. `false`, with nothing written, where `a` is not in standard layout.
pub fn unary_slices_over<A>(a: &mut ArrayD<A>, f: fn(&[A], &mut [MaybeUninit<A>])) -> bool
where
    A: Copy + Default + Send + Sync,
{
    let Some(x) = a.as_slice_mut() else {
        return false;
    };
    par_fill(x, &|_, c| {
        let mut copy = [A::default(); OVER_CHUNK];
        for piece in c.chunks_mut(OVER_CHUNK) {
            let src = &mut copy[..piece.len()];
            src.copy_from_slice(piece);
            // SAFETY: `MaybeUninit<A>` has `A`'s layout, and the kernel writes only initialised
            // values into the piece it is given.
            let dst = unsafe {
                std::slice::from_raw_parts_mut(
                    piece.as_mut_ptr().cast::<MaybeUninit<A>>(),
                    piece.len(),
                )
            };
            f(src, dst);
        }
    });
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting_matches_explicit_indexing() {
        let a = ArrayD::from_shape_vec(IxDyn(&[2, 1, 3]), (0..6).map(|v| v as f64 + 0.5).collect())
            .unwrap();
        let b = ArrayD::from_shape_vec(
            IxDyn(&[4, 1]),
            (0..4).map(|v| v as f64 * 10.0 + 1.0).collect(),
        )
        .unwrap();
        let y = binary(&a, &b, |p, q| p * 100.0 + q).unwrap();
        assert_eq!(y.shape(), &[2, 4, 3]);
        for i in 0..2 {
            for j in 0..4 {
                for k in 0..3 {
                    assert_eq!(y[[i, j, k]], a[[i, 0, k]] * 100.0 + b[[j, 0]]);
                }
            }
        }
    }

    #[test]
    fn large_inputs_split_across_threads_write_every_element() {
        let n = PAR_THRESHOLD * 3 + 7;
        let a = ArrayD::from_shape_vec(IxDyn(&[n]), (0..n).map(|v| v as f32).collect()).unwrap();
        let y = unary(&a, |p| p + 1.0);
        assert!(y.iter().enumerate().all(|(i, &v)| v == i as f32 + 1.0));
        let b = ArrayD::from_shape_vec(IxDyn(&[n, 1]), (0..n).map(|v| v as f32).collect()).unwrap();
        let c = ArrayD::from_shape_vec(IxDyn(&[1, 2]), vec![1.0f32, -1.0]).unwrap();
        let z = binary(&b, &c, |p, q| p * q).unwrap();
        assert_eq!(z[[n - 1, 1]], -((n - 1) as f32));
    }

    /// The row-wise general path (dims coalesced, rows split across chunks at any offset) against
    /// explicit indexing, on shapes where the innermost loop has each stride pattern.
    #[test]
    fn general_broadcast_rows_match_explicit_indexing() {
        let n = PAR_THRESHOLD + 77;
        for (sa, sb) in [
            (vec![3, n / 3, 1], vec![1, n / 3, 5]),
            (vec![2, 7, 3, n / 40], vec![7, 1, 1]),
            (vec![1, 9, 1, n / 9], vec![1, 9, n / 9, 1]),
            (vec![4, 1, n / 16], vec![1, 3, n / 16]),
        ] {
            let mk = |s: &[usize], k: f64| {
                let len: usize = s.iter().product();
                ArrayD::from_shape_vec(IxDyn(s), (0..len).map(|v| v as f64 * k + 0.25).collect())
                    .unwrap()
            };
            let (a, b) = (mk(&sa, 1.0), mk(&sb, -0.5));
            let y = binary(&a, &b, |p, q| p * 3.0 + q).unwrap();
            let shape = broadcast_shapes(&[&sa, &sb]).unwrap();
            assert_eq!(y.shape(), shape.as_slice());
            let (va, vb) = (
                a.broadcast(IxDyn(&shape)).unwrap(),
                b.broadcast(IxDyn(&shape)).unwrap(),
            );
            for ((p, q), got) in va.iter().zip(vb.iter()).zip(y.iter()) {
                assert_eq!(*got, p * 3.0 + q, "{sa:?} {sb:?}");
            }
        }
    }

    #[test]
    fn incompatible_shapes_are_an_error() {
        let a = ArrayD::<f32>::zeros(IxDyn(&[2, 3]));
        let b = ArrayD::<f32>::zeros(IxDyn(&[4]));
        assert!(binary(&a, &b, |p, q| p + q).is_err());
    }
}
