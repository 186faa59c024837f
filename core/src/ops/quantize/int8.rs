//! The 8-bit integer path of MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv: the raw
//! `u8`/`i8` bytes go to the exact integer product of `quorum_kernels::igemm` (AVX-512 VNNI), with
//! no centering into f64 and no f32 slices. Taken only where that kernel runs on this CPU and the
//! operands are the common forms (zero points per tensor, per row of A or per column of B; B
//! two-dimensional or batched like A); every other case returns `None` and the caller's exact
//! f64/f32 path computes it, with the same results.
use std::borrow::Cow;

use ndarray::{ArrayD, IxDyn};

use quorum_kernels::igemm::{self, Int8Matrix, IntKernel};

use super::int::Geom;
use crate::error::OpResult;
use crate::ops::OpCtx;
use crate::ops::cast::to_f64_vec;
use crate::tensor::{DType, Tensor};

/// The longest K whose centered 8-bit products (each at most 255² in magnitude) sum inside
/// `i32` whatever their signs: 33,025 · 65,025 < 2³¹. Past it a 32-bit sum wraps, which
/// MatMulInteger's i32 output does too, but QLinear* requantize the exact sum: past it both
/// products return `None` and the exact path computes them.
const EXACT_I32_K: usize = 33_025;

/// A tensor's bytes in row-major order and whether they are `i8`; `None` for other types.
fn bytes(t: &Tensor) -> Option<(Cow<'_, [u8]>, bool)> {
    match t {
        Tensor::U8(a) => Some((
            match a.as_slice() {
                Some(s) => Cow::Borrowed(s),
                None => Cow::Owned(a.iter().copied().collect()),
            },
            false,
        )),
        Tensor::I8(a) => Some((
            match a.as_slice() {
                // SAFETY: i8 and u8 have the same size and alignment, and every bit pattern is a
                // valid u8; the view lives as long as the borrowed array.
                Some(s) => Cow::Borrowed(unsafe {
                    std::slice::from_raw_parts(s.as_ptr().cast::<u8>(), s.len())
                }),
                None => Cow::Owned(a.iter().map(|&v| v as u8).collect()),
            },
            true,
        )),
        _ => None,
    }
}

/// A zero point's values as i32, when it has the operand's type (else the caller's path reports
/// the mismatch).
fn zero_points(z: Option<&Tensor>, dtype: DType) -> OpResult<Option<Vec<i32>>> {
    match z {
        None => Ok(Some(vec![0])),
        Some(z) if z.dtype() == dtype => {
            Ok(Some(to_f64_vec(z)?.iter().map(|&v| v as i32).collect()))
        }
        Some(_) => Ok(None),
    }
}

/// MatMulInteger's product, exact in wrapping i32, with the output shape; `None` where the integer
/// path does not apply (see the module).
pub(super) fn matmul(
    ctx: &OpCtx,
    a: &Tensor,
    a_zp: Option<&Tensor>,
    b: &Tensor,
    b_zp: Option<&Tensor>,
) -> OpResult<Option<(Vec<i32>, Vec<usize>)>> {
    match kernel() {
        Some(kern) => Ok(
            matmul_with(kern, ctx, a, a_zp, b, b_zp, None)?.and_then(|(p, shape)| match p {
                Product::Sums(c) => Some((c, shape)),
                Product::Levels(_) => None,
            }),
        ),
        None => Ok(None),
    }
}

/// QLinearMatMul's output with scalar scales: [`matmul`]'s product requantized by one multiplier
/// `mult` and zero point `zp` into u8 or i8 `out` as each tile is stored, the integers
/// [`requantize_runs`] gives its sums; `None` where the integer path does not apply.
pub(super) fn matmul_requantized(
    ctx: &OpCtx,
    a: &Tensor,
    a_zp: Option<&Tensor>,
    b: &Tensor,
    b_zp: Option<&Tensor>,
    rq: (f64, f64, DType),
) -> OpResult<Option<Tensor>> {
    match kernel() {
        Some(kern) => Ok(
            matmul_with(kern, ctx, a, a_zp, b, b_zp, Some(rq))?.and_then(|(p, _)| match p {
                Product::Levels(t) => Some(t),
                Product::Sums(_) => None,
            }),
        ),
        None => Ok(None),
    }
}

/// A product's output: the exact sums, or their levels.
enum Product {
    Sums(Vec<i32>),
    Levels(Tensor),
}

/// The kernel the runtime takes: VNNI's, where this CPU has it (elsewhere the exact f32 path is
/// quicker than the portable loop).
fn kernel() -> Option<IntKernel> {
    igemm::fast().then_some(IntKernel::Vnni)
}

/// [`matmul`] (`rq` absent) or [`matmul_requantized`] (`rq`: multiplier, zero point, output type)
/// with a given kernel (the tests run the portable one everywhere).
fn matmul_with(
    kern: IntKernel,
    ctx: &OpCtx,
    a: &Tensor,
    a_zp: Option<&Tensor>,
    b: &Tensor,
    b_zp: Option<&Tensor>,
    rq: Option<(f64, f64, DType)>,
) -> OpResult<Option<(Product, Vec<usize>)>> {
    let range = match rq {
        None => None,
        Some((_, _, out)) => match super::int_range(out) {
            Some((lo, hi)) if matches!(out, DType::U8 | DType::I8) => Some((lo as f64, hi as f64)),
            _ => return Ok(None),
        },
    };
    if a.rank() < 2 || b.rank() < 2 {
        return Ok(None);
    }
    let (Some((ad, sa)), Some((bd, sb))) = (bytes(a), bytes(b)) else {
        return Ok(None);
    };
    let (Some(za), Some(zb)) = (zero_points(a_zp, a.dtype())?, zero_points(b_zp, b.dtype())?)
    else {
        return Ok(None);
    };
    let (ash, bsh) = (a.shape(), b.shape());
    let (m, k) = (ash[ash.len() - 2], ash[ash.len() - 1]);
    let (kb, n) = (bsh[bsh.len() - 2], bsh[bsh.len() - 1]);
    if k != kb || k > EXACT_I32_K {
        return Ok(None);
    }
    // A's zero point per tensor or per row ([M]); B's per tensor or per column ([N]).
    let per_row = za.len() != 1;
    if (per_row && (a_zp.is_some_and(|z| z.rank() != 1) || za.len() != m))
        || (zb.len() != 1 && (b_zp.is_some_and(|z| z.rank() != 1) || zb.len() != n))
    {
        return Ok(None);
    }
    let a_batch = &ash[..ash.len() - 2];
    let b_batch = &bsh[..bsh.len() - 2];
    let (shape, batches, rows) = if b_batch.is_empty() {
        // B shared: A's batches are more rows of one product.
        let batches: usize = a_batch.iter().product();
        (ash[..ash.len() - 1].to_vec(), 1, batches * m)
    } else if a_batch == b_batch {
        (ash[..ash.len() - 1].to_vec(), a_batch.iter().product(), m)
    } else {
        return Ok(None);
    };
    let shape: Vec<usize> = shape.into_iter().chain([n]).collect();
    ctx.check_alloc(&shape, 4)?;
    let za: Vec<i32> = if per_row {
        (0..rows).map(|r| za[r % m]).collect()
    } else {
        za
    };
    let len: usize = shape.iter().product();
    let mut c = vec![0i32; if rq.is_some() { 0 } else { len }];
    let mut levels = vec![0u8; if rq.is_some() { len } else { 0 }];
    for bi in 0..batches {
        let a_m = Int8Matrix {
            data: &ad[bi * rows * k..],
            rs: k,
            cs: 1,
            signed: sa,
        };
        let b_m = Int8Matrix {
            data: &bd[bi * k * n..],
            rs: n,
            cs: 1,
            signed: sb,
        };
        match (rq, range) {
            (Some((mult, zp, _)), Some((lo, hi))) => igemm::igemm_requantized(
                kern,
                (rows, n, k),
                a_m,
                &za,
                b_m,
                &zb,
                igemm::Requantize {
                    rows: &[(0.0, mult)],
                    zp,
                    lo,
                    hi,
                },
                &mut levels[bi * rows * n..],
                (n, 1),
            ),
            _ => igemm::igemm(
                kern,
                (rows, n, k),
                a_m,
                &za,
                b_m,
                &zb,
                &mut c[bi * rows * n..],
                (n, 1),
            ),
        }
    }
    Ok(Some(match rq {
        None => (Product::Sums(c), shape),
        Some((_, _, out)) => (Product::Levels(levels_tensor(levels, out, &shape)?), shape),
    }))
}

/// The convolution of 8-bit `x` by `w` (zero points per tensor for x, per tensor or per output
/// channel for w: the caller has checked their shapes), exact in wrapping i32, laid out as the
/// output `[N, M, spatial...]`; `None` where the integer path does not apply.
pub(super) fn conv(
    g: &Geom,
    x: &Tensor,
    xz: Option<&Tensor>,
    w: &Tensor,
    wz: Option<&Tensor>,
) -> OpResult<Option<Vec<i32>>> {
    match kernel() {
        Some(kern) => conv_sums(kern, g, x, xz, w, wz),
        None => Ok(None),
    }
}

/// [`conv`] with a given kernel (the tests run the portable one everywhere).
fn conv_sums(
    kern: IntKernel,
    g: &Geom,
    x: &Tensor,
    xz: Option<&Tensor>,
    w: &Tensor,
    wz: Option<&Tensor>,
) -> OpResult<Option<Vec<i32>>> {
    let mut out = vec![0i32; g.n * g.m * g.outs.iter().product::<usize>()];
    let done = conv_with(kern, g, x, xz, w, wz, &mut |at, _, _, product| {
        product.sums(&mut out[at..])
    })?;
    Ok(done.then_some(out))
}

/// QLinearConv's output from the same product: each sum requantized by its output channel's
/// (bias, multiplier) in `params` (`g.m` of them), the zero point `zp`, into u8 or i8 `out` of
/// `shape`, as each tile is stored (`igemm_requantized`): the integers [`requantize_runs`] gives
/// the sums. `None` where the integer path does not apply or `out` is neither u8 nor i8.
pub(super) fn conv_requantized(
    g: &Geom,
    x: &Tensor,
    xz: Option<&Tensor>,
    w: &Tensor,
    wz: Option<&Tensor>,
    rq: (&[(f64, f64)], f64, DType),
    shape: &[usize],
) -> OpResult<Option<Tensor>> {
    match kernel() {
        Some(kern) => conv_levels(kern, g, x, xz, w, wz, rq, shape),
        None => Ok(None),
    }
}

/// [`conv_requantized`] with a given kernel.
#[allow(clippy::too_many_arguments)]
fn conv_levels(
    kern: IntKernel,
    g: &Geom,
    x: &Tensor,
    xz: Option<&Tensor>,
    w: &Tensor,
    wz: Option<&Tensor>,
    (params, zp, out): (&[(f64, f64)], f64, DType),
    shape: &[usize],
) -> OpResult<Option<Tensor>> {
    let Some((lo, hi)) = super::int_range(out).filter(|_| matches!(out, DType::U8 | DType::I8))
    else {
        return Ok(None);
    };
    if params.len() != g.m {
        return Ok(None);
    }
    let mut levels = vec![0u8; g.n * g.m * g.outs.iter().product::<usize>()];
    let done = conv_with(kern, g, x, xz, w, wz, &mut |at, mg, ch, product| {
        let rq = igemm::Requantize {
            rows: &params[ch..][..mg],
            zp,
            lo: lo as f64,
            hi: hi as f64,
        };
        product.levels(rq, &mut levels[at..]);
    })?;
    if !done {
        return Ok(None);
    }
    Ok(Some(levels_tensor(levels, out, shape)?))
}

/// The bytes `igemm_requantized` stored as a tensor of `out` (u8, or i8 from its two's complement).
fn levels_tensor(levels: Vec<u8>, out: DType, shape: &[usize]) -> OpResult<Tensor> {
    let shape = IxDyn(shape);
    Ok(if out == DType::I8 {
        Tensor::I8(ArrayD::from_shape_vec(
            shape,
            levels.into_iter().map(|v| v as i8).collect(),
        )?)
    } else {
        Tensor::U8(ArrayD::from_shape_vec(shape, levels)?)
    })
}

/// One group's product of a convolution: `mg` rows of weights by the columns, written by `sums`
/// or `levels` at the output offset the caller is given.
struct GroupProduct<'a> {
    kern: IntKernel,
    dims: (usize, usize, usize),
    a: Int8Matrix<'a>,
    za: &'a [i32],
    b: Int8Matrix<'a>,
    zb: &'a [i32],
}

impl GroupProduct<'_> {
    fn sums(&self, c: &mut [i32]) {
        let n = self.dims.1;
        igemm::igemm(
            self.kern,
            self.dims,
            self.a,
            self.za,
            self.b,
            self.zb,
            c,
            (n, 1),
        );
    }

    fn levels(&self, rq: igemm::Requantize, c: &mut [u8]) {
        let n = self.dims.1;
        igemm::igemm_requantized(
            self.kern,
            self.dims,
            self.a,
            self.za,
            self.b,
            self.zb,
            rq,
            c,
            (n, 1),
        );
    }
}

/// The convolution's products, one per image and group, each handed to `emit(offset of its
/// output plane block, rows, first output channel, product)`; `false` where the integer path does
/// not apply.
fn conv_with(
    kern: IntKernel,
    g: &Geom,
    x: &Tensor,
    xz: Option<&Tensor>,
    w: &Tensor,
    wz: Option<&Tensor>,
    emit: &mut dyn FnMut(usize, usize, usize, GroupProduct),
) -> OpResult<bool> {
    let (Some((xd, sx)), Some((wd, sw))) = (bytes(x), bytes(w)) else {
        return Ok(false);
    };
    let (Some(zx), Some(zw)) = (zero_points(xz, x.dtype())?, zero_points(wz, w.dtype())?) else {
        return Ok(false);
    };
    let cg = g.c / g.group;
    let mg = g.m / g.group;
    let ksz: usize = g.k.iter().product();
    let osz: usize = g.outs.iter().product();
    let isz: usize = g.ins.iter().product();
    let rows = cg * ksz;
    if rows > EXACT_I32_K {
        return Ok(false);
    }
    // A pointwise convolution reads its input as the columns themselves (`outs == ins` too: an
    // end pad alone grows the output past the input).
    let pointwise = ksz == 1
        && g.stride.iter().all(|&s| s == 1)
        && g.pad.iter().all(|&p| p == 0)
        && g.outs == g.ins;
    // The columns reuse this thread's buffer (im2col writes every byte before the product reads
    // it), which spares zeroing megabytes a convolution.
    let mut col = COLUMNS.with(|c| std::mem::take(&mut *c.borrow_mut()));
    if !pointwise {
        col.resize(rows * osz, 0);
        col.truncate(rows * osz);
    }
    // Padding is the zero point: a padded element is 0 once centered.
    let pad = zx[0] as u8;
    for ni in 0..g.n {
        for gi in 0..g.group {
            let cols: &[u8] = if pointwise {
                &xd[(ni * g.c + gi * cg) * isz..][..rows * osz]
            } else {
                if g.ins.len() == 2 {
                    im2col_2d(g, &xd, ni, gi, &mut col, pad);
                } else {
                    super::int::im2col(g, &xd, ni, gi, &mut col, pad);
                }
                &col
            };
            let zw_g: &[i32] = if zw.len() == 1 {
                &zw
            } else {
                &zw[gi * mg..][..mg]
            };
            let product = GroupProduct {
                kern,
                dims: (mg, osz, rows),
                a: Int8Matrix {
                    data: &wd[gi * mg * rows..],
                    rs: rows,
                    cs: 1,
                    signed: sw,
                },
                za: zw_g,
                b: Int8Matrix {
                    data: cols,
                    rs: osz,
                    cs: 1,
                    signed: sx,
                },
                zb: &zx,
            };
            emit((ni * g.m + gi * mg) * osz, mg, gi * mg, product);
        }
    }
    COLUMNS.with(|c| *c.borrow_mut() = col);
    Ok(true)
}

thread_local! {
    /// The 8-bit columns of this thread's last convolution, kept for the next.
    static COLUMNS: std::cell::RefCell<Vec<u8>> = Default::default();
}

/// `saturate(round_ties_even((sum + bias) · mult + zp))` of exact i32 sums into a u8 or i8 tensor
/// of `shape`, the sums in runs of `run` elements, run `r` taking `params[r % params.len()]` as
/// (bias, mult): a convolution's channel planes, or one run for a product with scalar scales.
/// The same f64 operations in the same order as the general path's `requantize`, so the same
/// integers; `None` for other output types (that path handles them).
pub(super) fn requantize_runs(
    sums: &[i32],
    run: usize,
    params: &[(f64, f64)],
    zp: f64,
    out: DType,
    shape: &[usize],
) -> OpResult<Option<Tensor>> {
    let Some((lo, hi)) = super::int_range(out).filter(|_| matches!(out, DType::U8 | DType::I8))
    else {
        return Ok(None);
    };
    // The kernels' requantization (`quorum_kernels::quant`): the same f64 operations as the
    // general path's `requantize` (ties to even without libm), vectorized, each run with its own
    // (bias, mult).
    let (lo, hi) = (lo as f64, hi as f64);
    let shape = IxDyn(shape);
    Ok(Some(if out == DType::I8 {
        let mut q = vec![0i8; sums.len()];
        by_runs(&mut q, sums, run, &|r, dst, src| {
            let (bias, mult) = params[r % params.len()];
            quorum_kernels::quant::requantize_i8(src, dst, bias, mult, zp, lo, hi)
        });
        Tensor::I8(ArrayD::from_shape_vec(shape, q)?)
    } else {
        let mut q = vec![0u8; sums.len()];
        by_runs(&mut q, sums, run, &|r, dst, src| {
            let (bias, mult) = params[r % params.len()];
            quorum_kernels::quant::requantize_u8(src, dst, bias, mult, zp, lo, hi)
        });
        Tensor::U8(ArrayD::from_shape_vec(shape, q)?)
    }))
}

/// `f(r, out_run, sums_run)` for each run `r` of `run` elements, across threads when large.
fn by_runs<T: Send, F: Fn(usize, &mut [T], &[i32]) + Sync>(
    q: &mut [T],
    sums: &[i32],
    run: usize,
    f: &F,
) {
    let run = run.max(1);
    if sums.len() >= 1 << 15 {
        use rayon::prelude::*;
        q.par_chunks_mut(run)
            .zip(sums.par_chunks(run))
            .enumerate()
            .for_each(|(r, (d, s))| f(r, d, s));
    } else {
        q.chunks_mut(run)
            .zip(sums.chunks(run))
            .enumerate()
            .for_each(|(r, (d, s))| f(r, d, s));
    }
}

/// [`super::int::im2col`] for two spatial dims, a row of the output at a time: a run of a row of
/// the input copied where the stride is 1, the padding filled around it.
fn im2col_2d(g: &Geom, x: &[u8], ni: usize, gi: usize, col: &mut [u8], pad: u8) {
    let (h, w) = (g.ins[0], g.ins[1]);
    let (kh, kw) = (g.k[0], g.k[1]);
    let (oh, ow) = (g.outs[0], g.outs[1]);
    let cg = g.c / g.group;
    let fill = |(r, dst): (usize, &mut [u8])| {
        let ci = gi * cg + r / (kh * kw);
        let (ky, kx) = ((r / kw) % kh, r % kw);
        let src = &x[(ni * g.c + ci) * h * w..][..h * w];
        let x0 = (kx * g.dil[1]) as isize - g.pad[1] as isize;
        for (oy, d) in dst.chunks_mut(ow.max(1)).enumerate().take(oh) {
            let iy = (oy * g.stride[0] + ky * g.dil[0]) as isize - g.pad[0] as isize;
            if iy < 0 || iy >= h as isize {
                d.fill(pad);
                continue;
            }
            let row = &src[iy as usize * w..][..w];
            // Inside the input for ox in [lo, hi): 0 ≤ ox·s + x0 < w.
            let s = g.stride[1] as isize;
            let lo = ((-x0).max(0) + s - 1) / s;
            let lo = lo.clamp(0, ow as isize) as usize;
            let hi = ((w as isize - x0).max(0) + s - 1) / s;
            let hi = hi.clamp(lo as isize, ow as isize) as usize;
            // Where no output reads inside (hi == lo), lo·s + x0 may lie outside the row.
            d[..lo].fill(pad);
            if hi > lo {
                let start = (lo as isize * s + x0) as usize;
                if s == 1 {
                    d[lo..hi].copy_from_slice(&row[start..][..hi - lo]);
                } else {
                    let s = s as usize;
                    for (v, &r) in d[lo..hi].iter_mut().zip(row[start..].iter().step_by(s)) {
                        *v = r;
                    }
                }
            }
            d[hi..].fill(pad);
        }
    };
    let osz = (oh * ow).max(1);
    if col.len() >= 1 << 16 {
        use rayon::prelude::*;
        col.par_chunks_mut(osz).enumerate().for_each(fill);
    } else {
        col.chunks_mut(osz).enumerate().for_each(fill);
    }
}

pub(super) mod depthwise;

#[cfg(test)]
mod tests;
