//! The integer and quantized matmul and conv ops: MatMulInteger, QLinearMatMul, ConvInteger,
//! QLinearConv. A child module of `quantize.rs`; operands are centered on their zero points as f64,
//! where every product and sum of 8-bit operands is exact. Where both operands are such integers
//! (magnitude at most 255) the product runs as f32 GEMMs over slices of K short enough that every
//! partial sum stays an integer below 2²⁴, which f32 holds exactly in any order of summation
//! ([`gemm_ints`]); float8 operands take the f64 `gemm` kernels.
use ndarray::{ArrayD, IxDyn};
use rayon::prelude::*;

use super::{float_tensor, int_range, int_tensor};
use crate::bail;
use crate::error::OpResult;
use crate::ops::broadcast::broadcast_shapes;
use crate::ops::cast::{round_to, to_f64_vec};
use crate::ops::{OpCtx, input, opt_input, single};
use crate::tensor::{DType, Tensor, Value};
use crate::unsupported;

/// The longest slice of K whose products of two operands of magnitude at most 255 sum below
/// 2²⁴ in every order: 256 · 255² = 16,646,400 < 16,777,216.
pub(crate) const EXACT_K: usize = 256;

/// `v` as f32 when every value is an integer of magnitude at most 255 (an 8-bit operand centered
/// on its zero point), else `None`.
fn small_ints(v: &[f64]) -> Option<Vec<f32>> {
    let mut out = Vec::with_capacity(v.len());
    let mut ok = true;
    for &x in v {
        // Truncating to an integer and back is the value itself exactly for integers (NaN and
        // the infinities fail the comparison); no libm call, so the loop stays a tight one.
        let i = x as i32;
        ok &= i as f64 == x && (-255..=255).contains(&i);
        out.push(i as f32);
    }
    ok.then_some(out)
}

/// `c[m×n] = a[m×k] · b[k×n]` for integer operands of magnitude at most 255, exactly: an f32 GEMM
/// per slice of [`EXACT_K`] terms (each partial sum an integer below 2²⁴, exact in f32 whatever
/// order the kernel sums in), the slices added in f64 (exact below 2⁵³).
fn gemm_ints(m: usize, n: usize, k: usize, a: &[f32], b: &[f32], c: &mut [f64]) {
    let mut part = vec![0f32; m * n];
    c[..m * n].iter_mut().for_each(|v| *v = 0.0);
    for p0 in (0..k).step_by(EXACT_K) {
        let len = EXACT_K.min(k - p0);
        crate::ops::matmul::gemm_into(
            m,
            n,
            len,
            &a[p0..],
            k,
            1,
            &b[p0 * n..],
            n,
            1,
            &mut part,
            n,
            1.0,
            false,
            true,
        );
        for (d, &v) in c.iter_mut().zip(&part) {
            *d += v as f64;
        }
    }
}

/// `c[m×n] = a[m×k] · b[k×n]`, row-major f64; exact for 8-bit operands centered on their zero
/// points (through [`gemm_ints`]).
fn gemm_f64(m: usize, n: usize, k: usize, a: &[f64], b: &[f64], c: &mut [f64]) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        c.iter_mut().for_each(|v| *v = 0.0);
        return;
    }
    if let (Some(a32), Some(b32)) = (small_ints(&a[..m * k]), small_ints(&b[..k * n])) {
        gemm_ints(m, n, k, &a32, &b32, c);
        return;
    }
    let par = if m * n * k >= 1 << 18 {
        gemm::Parallelism::Rayon(rayon::current_num_threads())
    } else {
        gemm::Parallelism::None
    };
    debug_assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
    // SAFETY: the slices hold m×k, k×n and m×n row-major elements (checked by every caller), and the
    // strides below stay inside them.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            b.as_ptr(),
            1,
            n as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            par,
        );
    }
}

/// numpy `matmul` of `a` by `b` (f64, row-major), with 1-D operands and broadcast batch dims.
pub(super) fn matmul_f64(
    a: &[f64],
    ash: &[usize],
    b: &[f64],
    bsh: &[usize],
) -> OpResult<(Vec<f64>, Vec<usize>)> {
    if ash.is_empty() || bsh.is_empty() {
        bail!("matmul operands must have rank >= 1, got {ash:?} and {bsh:?}");
    }
    let a2: Vec<usize> = if ash.len() == 1 {
        vec![1, ash[0]]
    } else {
        ash.to_vec()
    };
    let b2: Vec<usize> = if bsh.len() == 1 {
        vec![bsh[0], 1]
    } else {
        bsh.to_vec()
    };
    let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let (k2, n) = (b2[b2.len() - 2], b2[b2.len() - 1]);
    if k != k2 {
        bail!("matmul inner dimensions differ: {ash:?} and {bsh:?}");
    }
    let ab = &a2[..a2.len() - 2];
    let bb = &b2[..b2.len() - 2];
    let batch = broadcast_shapes(&[ab, bb])?;
    let nb: usize = batch.iter().product();
    // Offset (in matrices) of output batch `i` into an operand with batch dims `src` (size-1 dims repeat).
    let offset = |src: &[usize], i: usize| -> usize {
        let pad = batch.len() - src.len();
        let (mut rem, mut off, mut stride) = (i, 0, 1);
        for ax in (0..batch.len()).rev() {
            let idx = rem % batch[ax];
            rem /= batch[ax];
            if ax >= pad {
                let sd = src[ax - pad];
                if sd != 1 {
                    off += idx * stride;
                }
                stride *= sd;
            }
        }
        off
    };
    let mut out = vec![0.0; nb * m * n];
    if m * n > 0 {
        out.par_chunks_mut(m * n).enumerate().for_each(|(bi, c)| {
            let ao = offset(ab, bi) * m * k;
            let bo = offset(bb, bi) * k * n;
            gemm_f64(m, n, k, &a[ao..ao + m * k], &b[bo..bo + k * n], c);
        });
    }
    let mut shape = batch;
    if ash.len() > 1 {
        shape.push(m);
    }
    if bsh.len() > 1 {
        shape.push(n);
    }
    Ok((out, shape))
}

/// A scale or zero point expanded to `target`: size 1 everywhere, a 1-D one of length `row_len`
/// per row (`per_row`: shape [M] read as [M, 1]), otherwise numpy broadcasting.
fn expand(p: &Tensor, target: &[usize], per_row: bool) -> OpResult<Vec<f64>> {
    let v = to_f64_vec(p)?;
    let n: usize = target.iter().product();
    if v.len() == 1 {
        return Ok(vec![v[0]; n]);
    }
    let mut shape = p.shape().to_vec();
    if per_row && shape.len() == 1 && target.len() >= 2 {
        shape.push(1);
    }
    let arr = ArrayD::from_shape_vec(IxDyn(&shape), v)?;
    match arr.broadcast(IxDyn(target)) {
        Some(b) => Ok(b.iter().copied().collect()),
        None => bail!(
            "quantization parameter of shape {:?} does not fit {target:?}",
            p.shape()
        ),
    }
}

/// `x - zero_point` as f64, checking the operand types.
pub(super) fn centered(
    x: &Tensor,
    zp: Option<&Tensor>,
    per_row: bool,
    what: &str,
) -> OpResult<Vec<f64>> {
    if !matches!(x.dtype(), DType::U8 | DType::I8) && !x.dtype().is_narrow_float() {
        unsupported!("{what} of type {} (expected int8 or uint8)", x.dtype());
    }
    let mut v = to_f64_vec(x)?;
    if let Some(z) = zp {
        if z.dtype() != x.dtype() {
            bail!(
                "{what} zero point type {} differs from {}",
                z.dtype(),
                x.dtype()
            );
        }
        let zv = expand(z, x.shape(), per_row)?;
        v.iter_mut().zip(zv).for_each(|(a, b)| *a -= b);
    }
    Ok(v)
}

pub(super) fn matmul_integer(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let a = input(inputs, 0)?;
    let b = input(inputs, 1)?;
    if let Some((c, shape)) =
        super::int8::matmul(ctx, a, opt_input(inputs, 2)?, b, opt_input(inputs, 3)?)?
    {
        return single(Tensor::I32(ArrayD::from_shape_vec(IxDyn(&shape), c)?));
    }
    let av = centered(a, opt_input(inputs, 2)?, true, "A")?;
    let bv = centered(b, opt_input(inputs, 3)?, false, "B")?;
    let (c, shape) = matmul_f64(&av, a.shape(), &bv, b.shape())?;
    // Exact in f64; wrap like 32-bit accumulation would.
    single(int_tensor(DType::I32, &shape, |i| {
        c[i] as i64 as i32 as i64
    })?)
}

/// y = saturate(round(acc * multiplier + y_zero_point)) in the zero point's type (float8 too).
fn requantize(
    shape: &[usize],
    acc: impl Fn(usize) -> f64 + Sync + Send,
    y_zp: Option<&Tensor>,
    fallback: DType,
    zpv: &[f64],
) -> OpResult<Tensor> {
    let out = y_zp.map(|z| z.dtype()).unwrap_or(fallback);
    let zp = |i: usize| if zpv.len() == 1 { zpv[0] } else { zpv[i] };
    if let Some((lo, hi)) = int_range(out) {
        return int_tensor(out, shape, |i| {
            ((acc(i) + zp(i)).round_ties_even() as i64).clamp(lo, hi)
        });
    }
    float_tensor(out, shape, true, |i| acc(i) + zp(i))
}

pub(super) fn qlinear_matmul(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let a = input(inputs, 0)?;
    let a_s = input(inputs, 1)?;
    let a_zp = opt_input(inputs, 2)?;
    let b = input(inputs, 3)?;
    let b_s = input(inputs, 4)?;
    let b_zp = opt_input(inputs, 5)?;
    let y_s = input(inputs, 6)?;
    let y_zp = opt_input(inputs, 7)?;
    let p = a_s.dtype();
    let scalar = |t: &Tensor| t.len() == 1;
    if scalar(a_s) && scalar(b_s) && scalar(y_s) && y_zp.is_none_or(scalar) {
        // Scalar scales: one multiplier, requantized as the integer product stores each tile.
        let v = |t: &Tensor| -> OpResult<f64> { Ok(to_f64_vec(t)?[0]) };
        let mult = round_to(p, round_to(p, v(a_s)? * v(b_s)?) / v(y_s)?);
        let zp = y_zp.map(v).transpose()?.unwrap_or(0.0);
        let out = y_zp.map(|z| z.dtype()).unwrap_or(a.dtype());
        let rq = (mult, zp, out);
        if let Some(t) = super::int8::matmul_requantized(ctx, a, a_zp, b, b_zp, rq)? {
            return single(t);
        }
    }
    let fast = super::int8::matmul(ctx, a, a_zp, b, b_zp)?;
    let (c, shape) = match fast {
        Some((c, shape)) => (c.into_iter().map(f64::from).collect::<Vec<_>>(), shape),
        None => {
            let av = centered(a, a_zp, true, "a")?;
            let bv = centered(b, b_zp, false, "b")?;
            matmul_f64(&av, a.shape(), &bv, b.shape())?
        }
    };
    // The multiplier a_scale * b_scale / y_scale, computed in the scales' type.
    let sa = expand(a_s, &shape, a.rank() >= 2 && b.rank() >= 2)?;
    let sb = expand(b_s, &shape, false)?;
    let sy = expand(y_s, &shape, false)?;
    let mult: Vec<f64> = (0..c.len())
        .map(|i| round_to(p, round_to(p, sa[i] * sb[i]) / sy[i]))
        .collect();
    let zpv = match y_zp {
        Some(z) => expand(z, &shape, false)?,
        None => vec![0.0],
    };
    single(requantize(
        &shape,
        |i| c[i] * mult[i],
        y_zp,
        a.dtype(),
        &zpv,
    )?)
}

/// Convolution geometry from the Conv attributes.
pub(super) struct Geom {
    pub(super) n: usize,
    pub(super) c: usize,
    pub(super) m: usize,
    pub(super) group: usize,
    pub(super) ins: Vec<usize>,
    pub(super) k: Vec<usize>,
    pub(super) stride: Vec<usize>,
    pub(super) dil: Vec<usize>,
    pub(super) pad: Vec<usize>,
    pub(super) outs: Vec<usize>,
}

pub(super) fn geom(ctx: &OpCtx, xs: &[usize], ws: &[usize]) -> OpResult<Geom> {
    if xs.len() < 3 || ws.len() != xs.len() {
        bail!("conv input {xs:?} and weight {ws:?} must have the same rank >= 3");
    }
    let nd = xs.len() - 2;
    let group = ctx.attr_i("group", 1)?;
    if group < 1 {
        bail!("group must be positive, got {group}");
    }
    let group = group as usize;
    let (n, c, m) = (xs[0], xs[1], ws[0]);
    if ws[1].checked_mul(group) != Some(c) || m % group != 0 || ws[2..].contains(&0) {
        bail!("input channels {c}, weight {ws:?} and group {group} do not fit");
    }
    let get = |name: &str, def: usize| -> OpResult<Vec<usize>> {
        match ctx.attr_opt_ints(name)? {
            None => Ok(vec![def; nd]),
            Some(v) if v.len() == nd && v.iter().all(|&x| x >= 1) => {
                Ok(v.iter().map(|&x| x as usize).collect())
            }
            Some(v) => bail!("attribute '{name}' {v:?} does not fit {nd} spatial dims"),
        }
    };
    let k = match ctx.attr_opt_ints("kernel_shape")? {
        Some(v) if v.iter().map(|&x| x as usize).eq(ws[2..].iter().copied()) => ws[2..].to_vec(),
        Some(v) => bail!(
            "kernel_shape {v:?} differs from the weight's {:?}",
            &ws[2..]
        ),
        None => ws[2..].to_vec(),
    };
    let stride = get("strides", 1)?;
    let dil = get("dilations", 1)?;
    let ins = xs[2..].to_vec();
    let auto = ctx.attr_s("auto_pad", "NOTSET")?;
    let mut pad = vec![0usize; nd];
    let mut outs = vec![0usize; nd];
    let pads = match ctx.attr_opt_ints("pads")? {
        Some(p) if p.len() == 2 * nd && p.iter().all(|&x| x >= 0) => {
            p.iter().map(|&x| x as usize).collect()
        }
        Some(p) => bail!("pads {p:?} must be {} non-negative values", 2 * nd),
        None => vec![0; 2 * nd],
    };
    for i in 0..nd {
        let ek = (k[i] - 1).saturating_mul(dil[i]).saturating_add(1);
        let (pb, pe) = match auto.as_str() {
            "NOTSET" => (pads[i], pads[i + nd]),
            "VALID" => (0, 0),
            "SAME_UPPER" | "SAME_LOWER" => {
                let o = ins[i].div_ceil(stride[i]);
                let total = ((o.max(1) - 1) * stride[i])
                    .saturating_add(ek)
                    .saturating_sub(ins[i]);
                if auto == "SAME_UPPER" {
                    (total / 2, total - total / 2)
                } else {
                    (total - total / 2, total / 2)
                }
            }
            a => bail!("unknown auto_pad '{a}'"),
        };
        let span = ins[i].saturating_add(pb).saturating_add(pe);
        if span < ek {
            bail!("kernel {k:?} (dilations {dil:?}) larger than padded input {xs:?}");
        }
        pad[i] = pb;
        outs[i] = (span - ek) / stride[i] + 1;
    }
    Ok(Geom {
        n,
        c,
        m,
        group,
        ins,
        k,
        stride,
        dil,
        pad,
        outs,
    })
}

/// The convolution of `x` by `w` (both centered on their zero points), in f64: by im2col and a
/// GEMM per image and group; 8-bit operands (integers of magnitude at most 255) take f32 columns
/// and the exact f32 GEMMs of [`gemm_ints`].
pub(super) fn conv_f64(g: &Geom, x: &[f64], w: &[f64]) -> Vec<f64> {
    if let (Some(x32), Some(w32)) = (small_ints(x), small_ints(w)) {
        return conv_by_columns(g, &x32, &w32, &|m, n, k, a, b, c| {
            gemm_ints(m, n, k, a, b, c)
        });
    }
    conv_by_columns(g, x, w, &|m, n, k, a, b, c| gemm_f64(m, n, k, a, b, c))
}

/// A product `c[m×n] = a[m×k] · b[k×n]` into f64 results.
type ColumnGemm<'a, T> = &'a (dyn Fn(usize, usize, usize, &[T], &[T], &mut [f64]) + Sync);

/// im2col of each image and group into `T` columns, then `gemm` of the group's weights by them.
fn conv_by_columns<T: Copy + Default + Send + Sync>(
    g: &Geom,
    x: &[T],
    w: &[T],
    gemm: ColumnGemm<'_, T>,
) -> Vec<f64> {
    let cg = g.c / g.group;
    let mg = g.m / g.group;
    let ksz: usize = g.k.iter().product();
    let osz: usize = g.outs.iter().product();
    let rows = cg * ksz;
    let mut out = vec![0.0; g.n * g.m * osz];
    let mut col = vec![T::default(); rows * osz];
    for ni in 0..g.n {
        for gi in 0..g.group {
            im2col(g, x, ni, gi, &mut col, T::default());
            let wg = &w[gi * mg * rows..][..mg * rows];
            let og = &mut out[(ni * g.m + gi * mg) * osz..][..mg * osz];
            gemm(mg, osz, rows, wg, &col, og);
        }
    }
    out
}

/// The columns of image `ni`, group `gi`: row `r = (channel in group)·|kernel| + (kernel offset)`,
/// one element per output position, `pad` where the kernel reads outside the input.
pub(super) fn im2col<T: Copy + Send + Sync>(
    g: &Geom,
    x: &[T],
    ni: usize,
    gi: usize,
    col: &mut [T],
    pad: T,
) {
    let nd = g.ins.len();
    let cg = g.c / g.group;
    let ksz: usize = g.k.iter().product();
    let osz: usize = g.outs.iter().product();
    let isz: usize = g.ins.iter().product();
    col.par_chunks_mut(osz.max(1))
        .enumerate()
        .for_each(|(r, dst)| {
            let ci = gi * cg + r / ksz;
            let mut kr = r % ksz;
            let mut kidx = vec![0usize; nd];
            for d in (0..nd).rev() {
                kidx[d] = kr % g.k[d];
                kr /= g.k[d];
            }
            let src = &x[(ni * g.c + ci) * isz..][..isz];
            let mut oidx = vec![0usize; nd];
            for v in dst.iter_mut() {
                let mut off = 0usize;
                let mut inside = true;
                for d in 0..nd {
                    let p =
                        (oidx[d] * g.stride[d] + kidx[d] * g.dil[d]) as isize - g.pad[d] as isize;
                    if p < 0 || p >= g.ins[d] as isize {
                        inside = false;
                        break;
                    }
                    off = off * g.ins[d] + p as usize;
                }
                *v = if inside { src[off] } else { pad };
                for d in (0..nd).rev() {
                    oidx[d] += 1;
                    if oidx[d] < g.outs[d] {
                        break;
                    }
                    oidx[d] = 0;
                }
            }
        });
}

/// A convolution's sums: exact i32 from the 8-bit integer path, or exact f64.
enum Sums {
    I32(Vec<i32>),
    F64(Vec<f64>),
}

impl Sums {
    fn get(&self, i: usize) -> f64 {
        match self {
            Sums::I32(v) => v[i] as f64,
            Sums::F64(v) => v[i],
        }
    }
}

/// The convolution's geometry, with its operands' types, zero points' shapes and sizes checked.
fn conv_checked(
    ctx: &OpCtx,
    x: &Tensor,
    xz: Option<&Tensor>,
    w: &Tensor,
    wz: Option<&Tensor>,
) -> OpResult<Geom> {
    let g = geom(ctx, x.shape(), w.shape())?;
    for (t, what) in [(x, "x"), (w, "w")] {
        if !matches!(t.dtype(), DType::U8 | DType::I8) {
            unsupported!("{what} of type {} (expected int8 or uint8)", t.dtype());
        }
    }
    if let Some(z) = xz
        && z.len() != 1
    {
        unsupported!(
            "x zero point of shape {:?} (only per-tensor is defined)",
            z.shape()
        );
    }
    let out_shape: Vec<usize> = [g.n, g.m]
        .into_iter()
        .chain(g.outs.iter().copied())
        .collect();
    if let Some(z) = wz
        && z.len() != 1
        && (z.len() != g.m || z.rank() != 1)
    {
        bail!(
            "w zero point of shape {:?} must be a scalar or have {} elements",
            z.shape(),
            g.m
        );
    }
    ctx.check_alloc(&out_shape, 8)?;
    let rows = w.shape()[1..].iter().product::<usize>();
    ctx.check_alloc(&[rows, g.outs.iter().product()], 8)?;
    Ok(g)
}

/// The convolution of x by w, each centered on its zero point (w's per output channel), for the
/// geometry `g` that [`conv_checked`] gave.
fn conv_sums(
    ctx: &OpCtx,
    g: &Geom,
    x: &Tensor,
    xz: Option<&Tensor>,
    w: &Tensor,
    wz: Option<&Tensor>,
) -> OpResult<Sums> {
    if let Some(y) = super::int8::depthwise::sums(ctx, g, x, xz, w, wz)? {
        return Ok(Sums::I32(y));
    }
    if let Some(y) = super::int8::conv(g, x, xz, w, wz)? {
        return Ok(Sums::I32(y));
    }
    let xv = centered(x, xz, false, "x")?;
    let wv = match wz {
        Some(z) if z.len() != 1 => {
            let per = w.len() / g.m.max(1);
            let zv = to_f64_vec(z)?;
            let mut v = to_f64_vec(w)?;
            v.iter_mut()
                .enumerate()
                .for_each(|(i, a)| *a -= zv[i / per]);
            v
        }
        z => centered(w, z, false, "w")?,
    };
    Ok(Sums::F64(conv_f64(g, &xv, &wv)))
}

pub(super) fn conv_integer(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let w = input(inputs, 1)?;
    let (xz, wz) = (opt_input(inputs, 2)?, opt_input(inputs, 3)?);
    let g = conv_checked(ctx, x, xz, w, wz)?;
    let y = conv_sums(ctx, &g, x, xz, w, wz)?;
    let shape: Vec<usize> = [g.n, g.m]
        .into_iter()
        .chain(g.outs.iter().copied())
        .collect();
    match y {
        Sums::I32(v) => single(Tensor::I32(ArrayD::from_shape_vec(IxDyn(&shape), v)?)),
        Sums::F64(v) => single(int_tensor(DType::I32, &shape, |i| {
            v[i] as i64 as i32 as i64
        })?),
    }
}

pub(super) fn qlinear_conv(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let x_s = input(inputs, 1)?;
    let xz = opt_input(inputs, 2)?;
    let w = input(inputs, 3)?;
    let w_s = input(inputs, 4)?;
    let wz = opt_input(inputs, 5)?;
    let y_s = input(inputs, 6)?;
    let y_zp = opt_input(inputs, 7)?;
    let bias = opt_input(inputs, 8)?;
    let g = conv_checked(ctx, x, xz, w, wz)?;
    let shape: Vec<usize> = [g.n, g.m]
        .into_iter()
        .chain(g.outs.iter().copied())
        .collect();
    let osz: usize = g.outs.iter().product();
    let per_channel = |t: &Tensor, what: &str| -> OpResult<Vec<f64>> {
        let v = to_f64_vec(t)?;
        if v.len() == 1 {
            Ok(vec![v[0]; g.m])
        } else if v.len() == g.m && t.rank() == 1 {
            Ok(v)
        } else {
            bail!(
                "{what} of shape {:?} must be a scalar or have {} elements",
                t.shape(),
                g.m
            )
        }
    };
    let xs = to_f64_vec(x_s)?;
    let ys = to_f64_vec(y_s)?;
    if xs.len() != 1 || ys.len() != 1 {
        bail!(
            "x_scale and y_scale must be scalars, got {:?} and {:?}",
            x_s.shape(),
            y_s.shape()
        );
    }
    let p = x_s.dtype();
    let mult: Vec<f64> = per_channel(w_s, "w_scale")?
        .iter()
        .map(|&ws| round_to(p, round_to(p, xs[0] * ws) / ys[0]))
        .collect();
    let b = match bias {
        Some(b) => per_channel(b, "B")?,
        None => vec![0.0; g.m],
    };
    let zpv = match y_zp {
        Some(z) if z.len() == 1 => to_f64_vec(z)?,
        Some(z) => bail!("y_zero_point must be a scalar, got {:?}", z.shape()),
        None => vec![0.0],
    };
    let out = y_zp.map(|z| z.dtype()).unwrap_or(x.dtype());
    let params: Vec<(f64, f64)> = b.iter().copied().zip(mult.iter().copied()).collect();
    // The integer product requantized as it is stored; else the sums, then the requantization.
    let rq = (&params[..], zpv[0], out);
    // A depthwise convolution's sums come from the f32 direct kernel (`int8/depthwise.rs`), then
    // the requantization; every other 8-bit one requantizes as the integer product stores.
    if !super::int8::depthwise::applies(&g)
        && let Some(t) = super::int8::conv_requantized(&g, x, xz, w, wz, rq, &shape)?
    {
        return single(t);
    }
    let y = conv_sums(ctx, &g, x, xz, w, wz)?;
    if let Sums::I32(v) = &y
        && let Some(t) = super::int8::requantize_runs(v, osz, &params, zpv[0], out, &shape)?
    {
        return single(t);
    }
    let ch = |i: usize| (i / osz.max(1)) % g.m.max(1);
    single(requantize(
        &shape,
        |i| (y.get(i) + b[ch(i)]) * mult[ch(i)],
        y_zp,
        x.dtype(),
        &zpv,
    )?)
}

#[cfg(test)]
mod tests;
