//! Resampling on grids and patches: GridSample, AffineGrid, Col2Im, CenterCropPad (a part of
//! resize.rs, included there as `mod grid`).
use ndarray::{ArrayD, IxDyn, Slice};
use rayon::prelude::*;

use super::super::broadcast::PAR_THRESHOLD;
use super::super::{OpCtx, input, norm_axis, single};
use super::{Mode, tensor_like};
use crate::error::OpResult;
use crate::tensor::{Tensor, Value};
use crate::{bail, map_array, map_numeric, unsupported};

fn ints_attr(ctx: &OpCtx, name: &str, n: usize, default: i64) -> OpResult<Vec<i64>> {
    let v = ctx.attr_opt_ints(name)?.unwrap_or_else(|| vec![default; n]);
    if v.len() != n {
        bail!("attribute {name} has {} values, expected {n}", v.len());
    }
    Ok(v)
}

pub(super) fn col2im(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let image = input(inputs, 1)?.to_i64_vec()?;
    let block = input(inputs, 2)?.to_i64_vec()?;
    let r = image.len();
    if block.len() != r || r == 0 {
        bail!("image_shape {image:?} and block_shape {block:?} must have the same non-zero length");
    }
    let dil = ints_attr(ctx, "dilations", r, 1)?;
    let strides = ints_attr(ctx, "strides", r, 1)?;
    let pads = ints_attr(ctx, "pads", 2 * r, 0)?;
    let xs = x.shape();
    if xs.len() != 3 {
        bail!("Col2Im input must be 3-D [N, C*prod(block), L], got {xs:?}");
    }
    if image
        .iter()
        .chain(&block)
        .chain(&dil)
        .chain(&strides)
        .any(|&v| v <= 0)
        || pads.iter().any(|&v| v < 0)
    {
        bail!("Col2Im shapes, dilations and strides must be positive and pads non-negative");
    }
    let k: i64 = block
        .iter()
        .try_fold(1i64, |a, &b| a.checked_mul(b))
        .unwrap_or(i64::MAX);
    if k == 0 || xs[1] as i64 % k != 0 {
        bail!(
            "input channel dimension {} is not a multiple of prod(block_shape) = {k}",
            xs[1]
        );
    }
    if k as usize > xs[1] {
        bail!(
            "input channel dimension {} is smaller than prod(block_shape) = {k}",
            xs[1]
        );
    }
    let c = xs[1] / k as usize;
    let w = |v: i64| v as i128;
    let nb: Vec<i128> = (0..r)
        .map(|i| {
            (w(image[i]) + w(pads[i]) + w(pads[r + i]) - w(dil[i]) * (w(block[i]) - 1) - 1)
                .div_euclid(w(strides[i]))
                + 1
        })
        .collect();
    if nb.iter().any(|&b| b < 1 || b > xs[2] as i128)
        || nb.iter().product::<i128>() != xs[2] as i128
    {
        bail!("input has {} blocks, the geometry gives {nb:?}", xs[2]);
    }
    let mut out_shape = vec![xs[0], c];
    out_shape.extend(image.iter().map(|&v| v as usize));
    ctx.check_alloc(&out_shape, x.dtype().size_in_memory())?;
    // Per dimension, the image position of (kernel offset, block index), or None when in the padding.
    let pos: Vec<Vec<Option<usize>>> = (0..r)
        .map(|i| {
            let mut v = Vec::new();
            for o in 0..w(block[i]) {
                for b in 0..nb[i] {
                    let p = b * w(strides[i]) - w(pads[i]) + o * w(dil[i]);
                    v.push((p >= 0 && p < w(image[i])).then_some(p as usize));
                }
            }
            v
        })
        .collect();
    let geo = Col2ImGeo {
        block: block.iter().map(|&v| v as usize).collect(),
        nb: nb.iter().map(|&v| v as usize).collect(),
        pos,
    };
    let t = map_numeric!(x, a => col2im_impl(a, &out_shape, &geo)?)?;
    single(t)
}

struct Col2ImGeo {
    block: Vec<usize>,
    nb: Vec<usize>,
    pos: Vec<Vec<Option<usize>>>,
}

fn col2im_impl<T>(a: &ArrayD<T>, out_shape: &[usize], g: &Col2ImGeo) -> OpResult<ArrayD<T>>
where
    T: Copy + std::ops::Add<Output = T> + num_traits::Zero,
{
    let a = a.as_standard_layout();
    let src = a.as_slice().unwrap_or(&[]);
    let r = g.block.len();
    let img: usize = out_shape[2..].iter().product();
    let (k, l): (usize, usize) = (g.block.iter().product(), g.nb.iter().product());
    let mut out = vec![T::zero(); out_shape.iter().product()];
    let mut istr = vec![1usize; r];
    for i in (0..r - 1).rev() {
        istr[i] = istr[i + 1] * out_shape[3 + i];
    }
    // For each (kernel offset, block) pair the image offset, flattened once.
    let mut map: Vec<Option<usize>> = Vec::with_capacity(k * l);
    for kk in 0..k {
        let mut ko = vec![0usize; r];
        let mut rem = kk;
        for i in (0..r).rev() {
            ko[i] = rem % g.block[i];
            rem /= g.block[i];
        }
        for bb in 0..l {
            let mut rem = bb;
            let mut off = Some(0usize);
            for i in (0..r).rev() {
                let b = rem % g.nb[i];
                rem /= g.nb[i];
                off = match (off, g.pos[i][ko[i] * g.nb[i] + b]) {
                    (Some(o), Some(p)) => Some(o + p * istr[i]),
                    _ => None,
                };
            }
            map.push(off);
        }
    }
    let planes = out_shape[0] * out_shape[1];
    for pl in 0..planes {
        let dst = &mut out[pl * img..(pl + 1) * img];
        let s = &src[pl * k * l..(pl + 1) * k * l];
        for (v, m) in s.iter().zip(&map) {
            if let Some(o) = m {
                dst[*o] = dst[*o] + *v;
            }
        }
    }
    Ok(ArrayD::from_shape_vec(IxDyn(out_shape), out)?)
}

pub(super) fn center_crop_pad(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let target = input(inputs, 1)?.to_i64_vec()?;
    let r = x.rank();
    let axes: Vec<usize> = match ctx.attr_opt_ints("axes")? {
        Some(ax) => ax
            .iter()
            .map(|&a| norm_axis(a, r))
            .collect::<OpResult<_>>()?,
        None => (0..r).collect(),
    };
    if axes.len() != target.len() {
        bail!(
            "shape has {} values but there are {} axes",
            target.len(),
            axes.len()
        );
    }
    let mut out_shape = x.shape().to_vec();
    // Per axis: (source start, destination start, copied length).
    let mut win: Vec<(usize, usize, usize)> = x.shape().iter().map(|&d| (0, 0, d)).collect();
    for (&a, &t) in axes.iter().zip(&target) {
        if t < 0 {
            bail!("target shape {target:?} has a negative extent");
        }
        let (d, t) = (x.shape()[a], t as usize);
        out_shape[a] = t;
        win[a] = if t <= d {
            ((d - t) / 2, 0, t)
        } else {
            (0, (t - d) / 2, d)
        };
    }
    ctx.check_alloc(&out_shape, x.dtype().size_in_memory())?;
    let t = map_array!(x, a => {
        let mut o = ArrayD::from_elem(IxDyn(&out_shape), Default::default());
        o.slice_each_axis_mut(|ax| { let (_, s, n) = win[ax.axis.index()]; Slice::from(s..s + n) })
            .assign(&a.slice_each_axis(|ax| { let (s, _, n) = win[ax.axis.index()]; Slice::from(s..s + n) }));
        o
    });
    single(t)
}

#[derive(Clone, Copy, PartialEq)]
enum Pad {
    Zeros,
    Border,
    Reflection,
}

/// Reflects `x` into [lo, hi] by bouncing off the borders (the reference's rule).
fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let rng = hi - lo;
    if rng <= 0.0 || !x.is_finite() {
        return lo;
    }
    if x < lo {
        let dx = lo - x;
        let n = (dx / rng).trunc();
        let r = dx - n * rng;
        if n % 2.0 == 0.0 { lo + r } else { hi - r }
    } else if x > hi {
        let dx = x - hi;
        let n = (dx / rng).trunc();
        let r = dx - n * rng;
        if n % 2.0 == 0.0 { hi - r } else { lo + r }
    } else {
        x
    }
}

fn cubic_coeffs(t: f64) -> [f64; 4] {
    let a = -0.75;
    let near = |x: f64| ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    let far = |x: f64| ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]
}

pub(super) fn grid_sample(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let grid = input(inputs, 1)?;
    let default_mode = if ctx.opset() >= 20 {
        "linear"
    } else {
        "bilinear"
    };
    let mode = match ctx.attr_s("mode", default_mode)?.as_str() {
        "bilinear" | "linear" => Mode::Linear,
        "nearest" => Mode::Nearest,
        "bicubic" | "cubic" => Mode::Cubic,
        m => bail!("unknown GridSample mode '{m}'"),
    };
    let pad = match ctx.attr_s("padding_mode", "zeros")?.as_str() {
        "zeros" => Pad::Zeros,
        "border" => Pad::Border,
        "reflection" => Pad::Reflection,
        m => bail!("unknown padding_mode '{m}'"),
    };
    let align = ctx.attr_i("align_corners", 0)? != 0;
    let (xs, gs) = (x.shape(), grid.shape());
    if xs.len() < 3 || gs.len() != xs.len() || gs[0] != xs[0] || gs[gs.len() - 1] != xs.len() - 2 {
        bail!("X {xs:?} and grid {gs:?} must be [N, C, D1..Dr] and [N, O1..Or, r]");
    }
    let r = xs.len() - 2;
    let (n, c) = (xs[0], xs[1]);
    let dims = &xs[2..];
    let mut out_shape = vec![n, c];
    out_shape.extend_from_slice(&gs[1..=r]);
    ctx.check_alloc(&out_shape, 8)?;
    if matches!(x, Tensor::Bool(_) | Tensor::Str(_) | Tensor::Packed(..)) {
        unsupported!("GridSample of {} data", x.dtype());
    }
    if dims.contains(&0) && n * c > 0 && gs[1..=r].iter().all(|&d| d > 0) {
        bail!("X {xs:?} has an empty spatial dimension to sample from");
    }
    let xv = x.to_f64_vec()?;
    let gv = grid.to_f64_vec()?;
    let g32 = matches!(grid, Tensor::F32(_));
    let npts: usize = gs[1..=r].iter().product();
    let plane: usize = dims.iter().product();
    let mut strides = vec![1usize; r];
    for i in (0..r.saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * dims[i + 1];
    }
    let (lo, hi): (Vec<f64>, Vec<f64>) = dims
        .iter()
        .map(|&d| {
            if align {
                (0.0, d as f64 - 1.0)
            } else {
                (-0.5, d as f64 - 0.5)
            }
        })
        .unzip();
    // Source index of tap `i` on dim `k`, or None for a zero pixel.
    let fetch = |k: usize, i: i64| -> Option<usize> {
        let d = dims[k] as i64;
        match pad {
            Pad::Zeros => (i >= 0 && i < d).then_some(i as usize),
            Pad::Border => Some(i.clamp(0, (d - 1).max(0)) as usize),
            Pad::Reflection => {
                Some((reflect(i as f64, lo[k], hi[k]) as i64).clamp(0, (d - 1).max(0)) as usize)
            }
        }
    };
    // Output as [N, points, C], then transposed.
    let mut tmp = vec![0f64; n * npts * c];
    // Per dim up to four taps (source index or None for a zero pixel, weight), reused per thread.
    pub type Taps = (Vec<[(Option<usize>, f64); 4]>, Vec<usize>);
    let point = |(idx, cnt): &mut Taps, (q, o): (usize, &mut [f64])| {
        let b = q / npts;
        let gp = &gv[q * r..(q + 1) * r];
        for k in 0..r {
            let g = gp[r - 1 - k];
            let d = dims[k] as f64;
            let mut v = if g32 {
                let (g, d) = (g as f32, d as f32);
                (if align {
                    (g + 1.0) / 2.0 * (d - 1.0)
                } else {
                    ((g + 1.0) * d - 1.0) / 2.0
                }) as f64
            } else if align {
                (g + 1.0) / 2.0 * (d - 1.0)
            } else {
                ((g + 1.0) * d - 1.0) / 2.0
            };
            if mode == Mode::Nearest {
                v = v.round_ties_even();
            }
            // Cubic bounds each tap, not the coordinate (PyTorch and onnxruntime; the onnx reference
            // bounds the coordinate first, which changes border results near the edge).
            if mode != Mode::Cubic && (v < lo[k] || v > hi[k]) {
                match pad {
                    Pad::Border => v = v.clamp(0.0, (d - 1.0).max(0.0)),
                    Pad::Reflection => v = reflect(v, lo[k], hi[k]),
                    Pad::Zeros => {}
                }
                if g32 {
                    v = v as f32 as f64;
                }
            }
            let x0 = v.floor();
            let t = v - x0;
            let x0 = x0 as i64;
            let tk = &mut idx[k];
            cnt[k] = match mode {
                Mode::Nearest => {
                    tk[0] = (fetch(k, v as i64), 1.0);
                    1
                }
                Mode::Linear => {
                    tk[0] = (fetch(k, x0), 1.0 - t);
                    tk[1] = (fetch(k, x0.saturating_add(1)), t);
                    2
                }
                Mode::Cubic => {
                    let w = cubic_coeffs(t);
                    for j in 0..4 {
                        tk[j] = (fetch(k, x0.saturating_add(j as i64 - 1)), w[j]);
                    }
                    4
                }
            };
        }
        // Sum over the cartesian product of taps.
        let mut ixa = [0usize; 8];
        let Some(ix) = ixa.get_mut(..r) else { return };
        loop {
            let mut off = Some(0usize);
            let mut w = 1.0;
            for k in 0..r {
                let (i, wk) = idx[k][ix[k]];
                w *= wk;
                off = off.zip(i).map(|(o, i)| o + i * strides[k]);
            }
            if let Some(off) = off {
                for (ch, ov) in o.iter_mut().enumerate() {
                    *ov += w * xv[(b * c + ch) * plane + off];
                }
            }
            let mut k = r;
            loop {
                if k == 0 {
                    return;
                }
                k -= 1;
                ix[k] += 1;
                if ix[k] < cnt[k] {
                    break;
                }
                ix[k] = 0;
            }
        }
    };
    if r > 8 {
        unsupported!("GridSample with {r} spatial dimensions (at most 8)");
    }
    let init = || -> Taps { (vec![[(None, 0.0); 4]; r], vec![0; r]) };
    if c > 0 {
        if tmp.len() >= PAR_THRESHOLD / 4 {
            tmp.par_chunks_mut(c).enumerate().for_each_init(init, point);
        } else {
            let mut st = init();
            tmp.chunks_mut(c)
                .enumerate()
                .for_each(|q| point(&mut st, q));
        }
    }
    let mut out = vec![0f64; tmp.len()];
    for b in 0..n {
        for pt in 0..npts {
            for ch in 0..c {
                out[(b * c + ch) * npts + pt] = tmp[(b * npts + pt) * c + ch];
            }
        }
    }
    single(tensor_like(x, &out_shape, out)?)
}

pub(super) fn affine_grid(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let theta = input(inputs, 0)?;
    let size = input(inputs, 1)?.to_i64_vec()?;
    let ts = theta.shape();
    let r = size.len().saturating_sub(2);
    if !(r == 2 || r == 3)
        || ts.len() != 3
        || ts[1] != r
        || ts[2] != r + 1
        || size.iter().any(|&v| v < 0)
    {
        bail!(
            "theta {ts:?} and size {size:?} must be [N, 2, 3] with [N, C, H, W] or [N, 3, 4] with [N, C, D, H, W]"
        );
    }
    let align = ctx.attr_i("align_corners", 0)? != 0;
    let n = ts[0];
    let sp: Vec<usize> = size[2..].iter().map(|&v| v as usize).collect();
    let mut out_shape = vec![n];
    out_shape.extend_from_slice(&sp);
    out_shape.push(r);
    ctx.check_alloc(&out_shape, 8)?;
    let th = theta.to_f64_vec()?;
    // Normalised base coordinate of index i along a dim of length d.
    let base = |i: usize, d: usize| -> f64 {
        if align {
            if d <= 1 {
                -1.0
            } else {
                -1.0 + i as f64 * (2.0 / (d as f64 - 1.0))
            }
        } else {
            let step = 2.0 / d as f64;
            -1.0 + step / 2.0 + i as f64 * step
        }
    };
    let npts: usize = sp.iter().product();
    let mut out = Vec::with_capacity(n * npts * r);
    for b in 0..n {
        let m = &th[b * r * (r + 1)..(b + 1) * r * (r + 1)];
        for p in 0..npts {
            // Homogeneous point (x, y[, z], 1): x runs along the last spatial dim.
            let mut rem = p;
            let mut hp = vec![1.0; r + 1];
            for k in (0..r).rev() {
                let i = rem % sp[k];
                rem /= sp[k];
                hp[r - 1 - k] = base(i, sp[k]);
            }
            for row in 0..r {
                out.push((0..=r).map(|j| m[row * (r + 1) + j] * hp[j]).sum::<f64>());
            }
        }
    }
    single(tensor_like(theta, &out_shape, out)?)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{call, f32s, rand, s};
    use super::*;
    use crate::ir::Attr;

    #[test]
    fn col2im_matches_direct_accumulation() {
        let (img, blk, st, dil, pads) = (
            [5usize, 6usize],
            [2usize, 3usize],
            [2usize, 1usize],
            [1usize, 2usize],
            [1usize, 0, 1, 1],
        );
        let nb: Vec<usize> = (0..2)
            .map(|i| (img[i] + pads[i] + pads[2 + i] - dil[i] * (blk[i] - 1) - 1) / st[i] + 1)
            .collect();
        let (k, l, c) = (blk[0] * blk[1], nb[0] * nb[1], 2usize);
        let data = rand(11, c * k * l);
        let x = Tensor::from_f32(&[1, c * k, l], data.clone()).unwrap();
        let ints = |v: &[usize]| Attr::Ints(v.iter().map(|&x| x as i64).collect());
        let attrs = vec![
            ("strides", ints(&st)),
            ("dilations", ints(&dil)),
            ("pads", ints(&pads)),
        ];
        let ins = vec![
            Some(x),
            Some(Tensor::from_i64(&[2], vec![5, 6]).unwrap()),
            Some(Tensor::from_i64(&[2], vec![2, 3]).unwrap()),
        ];
        let y = f32s(&call(col2im, "Col2Im", 18, attrs, ins).unwrap());
        let mut want = vec![0f64; c * img[0] * img[1]];
        for ch in 0..c {
            for (kk, (ki, kj)) in (0..blk[0])
                .flat_map(|a| (0..blk[1]).map(move |b| (a, b)))
                .enumerate()
            {
                for (ll, (bi, bj)) in (0..nb[0])
                    .flat_map(|a| (0..nb[1]).map(move |b| (a, b)))
                    .enumerate()
                {
                    let pi = (bi * st[0] + ki * dil[0]) as i64 - pads[0] as i64;
                    let pj = (bj * st[1] + kj * dil[1]) as i64 - pads[1] as i64;
                    if pi >= 0 && pj >= 0 && (pi as usize) < img[0] && (pj as usize) < img[1] {
                        want[(ch * img[0] + pi as usize) * img[1] + pj as usize] +=
                            data[(ch * k + kk) * l + ll] as f64;
                    }
                }
            }
        }
        for (g, w) in y.iter().zip(&want) {
            assert!((*g as f64 - w).abs() < 1e-5);
        }
    }

    #[test]
    fn grid_sample_hits_pixels_and_midpoints() {
        let data = rand(3, 2 * 3 * 4);
        let x = Tensor::from_f32(&[1, 2, 3, 4], data.clone()).unwrap();
        // align_corners=1: normalised -1..1 maps onto pixel centres 0..d-1.
        let norm = |i: f32, d: f32| 2.0 * i / (d - 1.0) - 1.0;
        let pts = [(0.0f32, 0.0f32), (2.0, 3.0), (1.0, 2.0), (0.5, 1.5)];
        let grid: Vec<f32> = pts
            .iter()
            .flat_map(|&(i, j)| [norm(j, 4.0), norm(i, 3.0)])
            .collect();
        let grid = Tensor::from_f32(&[1, 1, 4, 2], grid).unwrap();
        let attrs = vec![("align_corners", Attr::Int(1)), ("mode", s("linear"))];
        let y = f32s(
            &call(
                grid_sample,
                "GridSample",
                20,
                attrs,
                vec![Some(x), Some(grid)],
            )
            .unwrap(),
        );
        for c in 0..2 {
            let at = |i: usize, j: usize| data[c * 12 + i * 4 + j];
            let want = [
                at(0, 0),
                at(2, 3),
                at(1, 2),
                (at(0, 1) + at(0, 2) + at(1, 1) + at(1, 2)) / 4.0,
            ];
            for (p, w) in want.iter().enumerate() {
                assert!(
                    (y[c * 4 + p] - w).abs() < 1e-5,
                    "c{c} p{p}: {} vs {w}",
                    y[c * 4 + p]
                );
            }
        }
    }
}
