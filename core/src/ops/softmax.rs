//! Softmax, LogSoftmax and Hardmax, with the pre-13 flatten-to-2-D semantics.
//!
//! Both forms become lanes of `[outer, n, inner]`: from opset 13 the lane is the one axis (`inner` the
//! product of the axes after it); before 13 the input is flattened to 2-D at `axis` and each row is a lane.
//!
//! f32 lanes run inside AVX-512/AVX2 wrappers (`simd_dispatch!`), their maximum as sixteen running
//! maxima side by side (`lane_max_f32`; the serial scan decides only where a NaN is present). Each
//! op also has an in-place form over a dying input (the memory plan, `session/reuse.rs`).
use super::cast::{narrow, widen};
use ndarray::{ArrayD, IxDyn};
use num_traits::Float;
use quorum_kernels::activation::exp_f32;
use rayon::prelude::*;

use super::broadcast::PAR_THRESHOLD;
use super::reduce::Elem;
use super::{OpCtx, Registry, input, norm_axis, single};
use crate::error::{OpError, OpResult};
use crate::tensor::{Tensor, Value};
use crate::unsupported;

pub fn register(r: &mut Registry) {
    r.add("", "Softmax", softmax);
    r.add("", "LogSoftmax", log_softmax);
    r.add("", "Hardmax", hardmax);
    r.in_place("", "Softmax", |c, t, _, _| run_over(c, t, Kind::Soft));
    r.in_place("", "LogSoftmax", |c, t, _, _| run_over(c, t, Kind::LogSoft));
    r.in_place("", "Hardmax", |c, t, _, _| run_over(c, t, Kind::Hard));
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Soft,
    LogSoft,
    Hard,
}

/// A contiguous lane's maximum, NaN if any value is (the first NaN stays).
#[inline(always)]
fn lane_max<T: Float>(b: &[T]) -> T {
    b.iter().fold(
        T::neg_infinity(),
        |m, &v| if v > m || v.is_nan() { v } else { m },
    )
}

/// [`lane_max`] of f32 values: sixteen running maxima side by side (element `i` into maximum
/// `i mod 16`), which the compiler keeps in vector registers, where one running maximum waits on
/// each comparison in turn (it was most of a Softmax's time). A maximum's value does not depend on
/// the order; where a NaN is present, the serial scan decides which NaN stays.
#[inline(always)]
fn lane_max_f32(b: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 16];
    let mut nan = false;
    let chunks = b.chunks_exact(16);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = if v > *a { v } else { *a };
            nan |= v.is_nan();
        }
    }
    for (a, &v) in acc.iter_mut().zip(tail) {
        *a = if v > *a { v } else { *a };
        nan |= v.is_nan();
    }
    if nan {
        return lane_max(b);
    }
    acc.iter()
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m })
}

/// One block `[n, inner]` of lanes, in place.
fn block<T: Float + Elem>(b: &mut [T], n: usize, inner: usize, kind: Kind) {
    if n == 0 || inner == 0 {
        return;
    }
    if inner == 1 {
        match kind {
            Kind::Hard => {
                let mut best = 0;
                for (i, &v) in b.iter().enumerate() {
                    if !b[best].is_nan() && (v.is_nan() || v > b[best]) {
                        best = i;
                    }
                }
                b.iter_mut().for_each(|v| *v = T::zero());
                b[best] = T::one();
            }
            Kind::Soft => {
                let m = lane_max(b);
                let mut sum = 0f64;
                for v in b.iter_mut() {
                    *v = (*v - m).exp();
                    sum += Elem::to_f64(*v);
                }
                let s = <T as Elem>::from_f64(sum);
                b.iter_mut().for_each(|v| *v = *v / s);
            }
            Kind::LogSoft => {
                let m = lane_max(b);
                let sum: f64 = b.iter().map(|&v| Elem::to_f64((v - m).exp())).sum();
                let sub = m + <T as Elem>::from_f64(sum.ln());
                b.iter_mut().for_each(|v| *v = *v - sub);
            }
        }
        return;
    }
    // Strided lanes: work a row of `inner` columns at a time.
    let mut m = b[..inner].to_vec();
    let mut idx = vec![0usize; inner];
    for j in 1..n {
        for (k, &v) in b[j * inner..(j + 1) * inner].iter().enumerate() {
            if !m[k].is_nan() && (v.is_nan() || v > m[k]) {
                m[k] = v;
                idx[k] = j;
            }
        }
    }
    if kind == Kind::Hard {
        b.iter_mut().for_each(|v| *v = T::zero());
        for (k, &j) in idx.iter().enumerate() {
            b[j * inner + k] = T::one();
        }
        return;
    }
    let mut sum = vec![0f64; inner];
    for j in 0..n {
        for ((v, s), &mk) in b[j * inner..(j + 1) * inner]
            .iter_mut()
            .zip(sum.iter_mut())
            .zip(&m)
        {
            let e = (*v - mk).exp();
            *s += Elem::to_f64(e);
            if kind == Kind::Soft {
                *v = e;
            }
        }
    }
    let f: Vec<T> = match kind {
        Kind::Soft => sum.iter().map(|&s| <T as Elem>::from_f64(s)).collect(),
        _ => sum
            .iter()
            .zip(&m)
            .map(|(&s, &mk)| mk + <T as Elem>::from_f64(s.ln()))
            .collect(),
    };
    for j in 0..n {
        for (v, &fk) in b[j * inner..(j + 1) * inner].iter_mut().zip(&f) {
            *v = if kind == Kind::Soft { *v / fk } else { *v - fk };
        }
    }
}

/// [`block`] for f32: a Softmax over contiguous lanes exponentiates with the vectorising
/// [`exp_f32`] (the Exp and Sigmoid kernels' function) and sums in eight f64 partial sums, on the
/// widest vectors the CPU has; other forms as [`block`].
fn block_f32(b: &mut [f32], n: usize, inner: usize, kind: Kind) {
    if inner != 1 || kind != Kind::Soft || n == 0 {
        return block(b, n, inner, kind);
    }
    quorum_kernels::simd_dispatch!(|b: &mut [f32]| { soft_lane_f32(b) })
}

/// One contiguous f32 Softmax lane, in place: the maximum by the NaN rule of [`block`], then
/// `e^(v - max)` and their sum, then the division.
#[inline(always)]
fn soft_lane_f32(b: &mut [f32]) {
    let m = lane_max_f32(b);
    let mut sums = [0f64; 8];
    for chunk in b.chunks_mut(8) {
        for (v, s) in chunk.iter_mut().zip(sums.iter_mut()) {
            *v = exp_f32(*v - m);
            *s += f64::from(*v);
        }
    }
    let s = sums.iter().sum::<f64>() as f32;
    b.iter_mut().for_each(|v| *v /= s);
}

fn compute<T: Float + Elem>(
    a: &ArrayD<T>,
    dims: (usize, usize, usize),
    kind: Kind,
) -> OpResult<ArrayD<T>> {
    compute_with(a, dims, kind, block::<T>)
}

fn compute_with<T: Float + Elem>(
    a: &ArrayD<T>,
    (outer, n, inner): (usize, usize, usize),
    kind: Kind,
    block: fn(&mut [T], usize, usize, Kind),
) -> OpResult<ArrayD<T>> {
    // A contiguous input is copied as one slice (ndarray's n-dimensional iterator costs more than
    // the softmax itself).
    let mut v: Vec<T> = match a.as_slice() {
        Some(s) => {
            let mut v = crate::arena::vec(s.len());
            v.extend_from_slice(s);
            v
        }
        None => a.iter().copied().collect(),
    };
    blocks(&mut v, (outer, n, inner), kind, block);
    Ok(ArrayD::from_shape_vec(IxDyn(a.shape()), v)?)
}

/// The f32 blocks over a widened half array, in place where it is contiguous (`widen` gives a
/// fresh array, so the kernel's copy of its input is not needed).
fn in_f32(mut w: ArrayD<f32>, dims: (usize, usize, usize), kind: Kind) -> OpResult<ArrayD<f32>> {
    match w.as_slice_mut() {
        Some(v) => blocks(v, dims, kind, block_f32),
        None => return compute_with(&w, dims, kind, block_f32),
    }
    Ok(w)
}

/// Each block of `n * inner` values of `v` reduced in place, in parallel when large.
fn blocks<T: Float + Elem>(
    v: &mut [T],
    (outer, n, inner): (usize, usize, usize),
    kind: Kind,
    block: fn(&mut [T], usize, usize, Kind),
) {
    let len = n * inner;
    if len > 0 {
        if v.len() >= PAR_THRESHOLD && outer > 1 {
            v.par_chunks_mut(len).for_each(|b| block(b, n, inner, kind));
        } else {
            v.chunks_mut(len).for_each(|b| block(b, n, inner, kind));
        }
    }
}

/// The in-place form: f32 and f64 in standard layout written over the input (the kernel copies its
/// input and runs the same blocks over the copy); f16 and bf16 go to the kernel.
fn run_over(ctx: &OpCtx, t: &mut Tensor, kind: Kind) -> OpResult<bool> {
    let dims = lanes(ctx, t.shape())?;
    Ok(match t {
        Tensor::F32(a) => a
            .as_slice_mut()
            .map(|v| blocks(v, dims, kind, block_f32))
            .is_some(),
        Tensor::F64(a) => a
            .as_slice_mut()
            .map(|v| blocks(v, dims, kind, block::<f64>))
            .is_some(),
        _ => false,
    })
}

/// `(outer, n, inner)`: the lanes a Softmax, LogSoftmax or Hardmax node reduces over, for an input
/// of `shape` (opset 13's single axis, or the older flatten-to-2-D at `axis`). Shared with the CUDA
/// kernels.
pub fn lanes(ctx: &OpCtx, shape: &[usize]) -> OpResult<(usize, usize, usize)> {
    let rank = shape.len();
    let new = ctx.opset() >= 13;
    let axis = ctx.attr_i("axis", if new { -1 } else { 1 })?;
    // From opset 11 the axis must lie in [-r, r - 1], an empty range for a scalar (ONNX's shape
    // inference: "Input rank must be >= 1"). Before, the input is coerced to 2-D at `axis`, which a
    // scalar allows with axis 0 ([1, 1]).
    if rank == 0 && ctx.opset() >= 11 {
        return Err(OpError::Invalid(format!(
            "{} needs an input of rank >= 1 from opset 11, got a scalar",
            ctx.node.op_type
        )));
    }
    Ok(if new {
        let a = norm_axis(axis, rank)?;
        (
            shape[..a].iter().product(),
            shape[a],
            shape[a + 1..].iter().product(),
        )
    } else {
        // Flatten to 2-D at `axis` (which may equal the rank: one column per row).
        let a = if axis < 0 { axis + rank as i64 } else { axis };
        if a < 0 || a > rank as i64 {
            return Err(OpError::Invalid(format!(
                "axis {axis} is out of range for rank {rank}"
            )));
        }
        let a = a as usize;
        (shape[..a].iter().product(), shape[a..].iter().product(), 1)
    })
}

fn run(ctx: &OpCtx, inputs: &[Option<&Value>], kind: Kind) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let shape = x.shape();
    let dims = lanes(ctx, shape)?;
    let out = match x {
        Tensor::F32(a) => Tensor::F32(compute_with(a, dims, kind, block_f32)?),
        Tensor::F64(a) => Tensor::F64(compute(a, dims, kind)?),
        // f16 and bf16 are computed in f32 and rounded once, as every kernel promises (numpy rounds
        // each intermediate to float16 instead: the corpus cases that show it carry a tolerance).
        Tensor::F16(a) => Tensor::F16(narrow(in_f32(widen(a), dims, kind)?)),
        Tensor::BF16(a) => Tensor::BF16(narrow(in_f32(widen(a), dims, kind)?)),
        other => unsupported!("{kind:?}max of {}", other.dtype()),
    };
    single(out)
}

fn softmax(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    run(ctx, inputs, Kind::Soft)
}
fn log_softmax(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    run(ctx, inputs, Kind::LogSoft)
}
fn hardmax(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    run(ctx, inputs, Kind::Hard)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The largest error of `got` against Softmax in f64 of the lane's f32 differences from its
    /// maximum (the f32 subtraction rounds first in any f32 Softmax, and e^d turns its half ulp of
    /// `d` into |d|/2 ulps of the result), in units of f32's epsilon relative to each element (an
    /// absolute floor of 1e-30 for elements that underflow).
    fn ulps_off(lane: &[f32], got: &[f32]) -> f64 {
        let m = lane.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        let d: Vec<f64> = lane.iter().map(|&v| (v - m) as f64).collect();
        let z: f64 = d.iter().map(|&d| d.exp()).sum();
        d.iter()
            .zip(got)
            .map(|(&d, &g)| {
                let want = d.exp() / z;
                (g as f64 - want).abs() / (want.max(1e-30) * f32::EPSILON as f64)
            })
            .fold(0.0, f64::max)
    }

    /// The f32 lane path against Softmax in f64, lanes of every length around its eight partial
    /// sums and a long one, values up to ±80 (sums over e^±80 in f64): within 4 ulps of f32 (exp_f32
    /// is within about 2, the division rounds once, the sum once). A path that never combines its
    /// partial sums must be caught by the same comparison on the lanes of comparable terms (at
    /// scale 1; at ±80 one term can be the whole sum).
    #[test]
    fn f32_lanes_match_f64_softmax() {
        let mut rng = crate::inputs::Rng::new(7);
        for len in [1usize, 2, 7, 8, 9, 15, 16, 17, 100, 1000] {
            for scale in [1.0f32, 10.0, 80.0] {
                let lane: Vec<f32> = (0..len)
                    .map(|_| (rng.uniform() as f32 * 2.0 - 1.0) * scale)
                    .collect();
                let mut got = lane.clone();
                block_f32(&mut got, len, 1, Kind::Soft);
                let off = ulps_off(&lane, &got);
                assert!(off <= 4.0, "len {len} scale {scale}: {off} ulps");
                if len >= 9 && scale == 1.0 {
                    // Broken: the partial sums never combined (the first one taken as the sum).
                    let m = lane.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
                    let e: Vec<f32> = lane.iter().map(|&v| exp_f32(v - m)).collect();
                    let first: f64 = e.iter().step_by(8).map(|&v| v as f64).sum();
                    let broken: Vec<f32> = e.iter().map(|&v| v / first as f32).collect();
                    assert!(
                        ulps_off(&lane, &broken) > 4.0,
                        "len {len} scale {scale}: uncombined partial sums went unnoticed"
                    );
                }
            }
        }
        // NaN anywhere makes the lane NaN, as in the general path.
        let mut nan = vec![1.0f32, f32::NAN, 2.0];
        block_f32(&mut nan, 3, 1, Kind::Soft);
        assert!(nan.iter().all(|v| v.is_nan()));
    }

    /// Softmax/LogSoftmax along the middle axis of [2, 3, 4] (strided lanes) against a direct formula.
    /// The vector maximum equals the serial scan's value on every length against its sixteen
    /// lanes and its tail, with infinities, signed zeros and NaNs (then bit for bit: the first NaN);
    /// one that skips the tail (the broken variant) must be caught.
    #[test]
    fn lane_max_f32_equals_the_serial_scan() {
        let skip_tail = |b: &[f32]| lane_max_f32(&b[..b.len() / 16 * 16]);
        let mut caught = false;
        for len in 1..70usize {
            for seed in 0..4u64 {
                let mut b =
                    crate::ops::testing::seeded_f32(seed * 100 + len as u64, len, -5.0, 5.0);
                match seed {
                    1 => b[len / 2] = f32::NEG_INFINITY,
                    2 => b
                        .iter_mut()
                        .for_each(|v| *v = if *v < 0.0 { -0.0 } else { 0.0 }),
                    3 => {
                        b[len - 1] = f32::from_bits(0x7fc0_0001);
                        b[len / 3] = f32::from_bits(0x7fc0_0002);
                    }
                    _ => {}
                }
                let (got, want) = (lane_max_f32(&b), lane_max(&b));
                if want.is_nan() {
                    assert_eq!(got.to_bits(), want.to_bits(), "len {len} seed {seed}");
                } else {
                    assert_eq!(got, want, "len {len} seed {seed}");
                }
                if seed == 0 && len % 16 != 0 {
                    // The last element made the largest: only the tail holds it.
                    b[len - 1] = 9.0;
                    caught |= skip_tail(&b) != lane_max(&b);
                }
            }
        }
        assert!(caught, "a maximum without its tail passed");
    }

    #[test]
    fn strided_axis_matches_formula() {
        let x: Vec<f64> = (0..24)
            .map(|i| ((i * 37 % 11) as f64 - 5.0) * 0.7 + 0.1)
            .collect();
        let a = ArrayD::from_shape_vec(IxDyn(&[2, 3, 4]), x.clone()).unwrap();
        let s = compute(&a, (2, 3, 4), Kind::Soft).unwrap();
        let l = compute(&a, (2, 3, 4), Kind::LogSoft).unwrap();
        let h = compute(&a, (2, 3, 4), Kind::Hard).unwrap();
        for o in 0..2 {
            for k in 0..4 {
                let lane: Vec<f64> = (0..3).map(|j| x[o * 12 + j * 4 + k]).collect();
                let z: f64 = lane.iter().map(|v| v.exp()).sum();
                let best = (0..3).fold(0, |b, j| if lane[j] > lane[b] { j } else { b });
                for (j, &lj) in lane.iter().enumerate() {
                    let i = [o, j, k];
                    assert!((s[i] - lj.exp() / z).abs() < 1e-12);
                    assert!((l[i] - (lj - z.ln())).abs() < 1e-12);
                    assert_eq!(h[i], if j == best { 1.0 } else { 0.0 });
                }
            }
        }
    }

    /// Large values do not overflow (max subtraction), and -inf entries get probability 0.
    #[test]
    fn stable_for_large_and_infinite() {
        let a = ArrayD::from_shape_vec(IxDyn(&[1, 3]), vec![1000.0f32, 999.0, f32::NEG_INFINITY])
            .unwrap();
        let s = compute(&a, (1, 3, 1), Kind::Soft).unwrap();
        let e = (-1.0f64).exp();
        assert!((s[[0, 0]] as f64 - 1.0 / (1.0 + e)).abs() < 1e-6);
        assert_eq!(s[[0, 2]], 0.0);
        let l = compute(&a, (1, 3, 1), Kind::LogSoft).unwrap();
        assert!((l[[0, 1]] as f64 - (-1.0 - (1.0 + e).ln())).abs() < 1e-4);
    }

    /// A scalar has no axis in [-r, r - 1] from opset 11 (an error, not a value); opset 1 coerces
    /// it to [1, 1] at axis 0.
    #[test]
    fn scalar_input_only_before_opset_11() {
        use crate::ir::Attr;
        use crate::ops::testing::run_kernel;
        let x = || vec![Some(Tensor::from_f32(&[], vec![2.0]).unwrap())];
        for opset in [11, 13] {
            assert!(run_kernel(softmax, "Softmax", opset, vec![], x(), 1).is_err());
            assert!(run_kernel(hardmax, "Hardmax", opset, vec![], x(), 1).is_err());
        }
        let axis0 = || vec![("axis", Attr::Int(0))];
        let y = run_kernel(softmax, "Softmax", 1, axis0(), x(), 1).unwrap();
        assert_eq!(y[0].to_f64_vec().unwrap(), vec![1.0]);
        let y = run_kernel(log_softmax, "LogSoftmax", 1, axis0(), x(), 1).unwrap();
        assert_eq!(y[0].to_f64_vec().unwrap(), vec![0.0]);
        assert!(run_kernel(softmax, "Softmax", 1, vec![], x(), 1).is_err());
    }
}
