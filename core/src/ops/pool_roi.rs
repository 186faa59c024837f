//! Pooling's inverse and region-of-interest forms: MaxUnpool, MaxRoiPool and RoiAlign.
use ndarray::{ArrayD, IxDyn};
use num_traits::Zero;

use super::pool::{LIMIT, ints_attr};
use super::{OpCtx, Registry, input, opt_input, single};
use crate::error::OpResult;
use crate::tensor::{Tensor, Value};
use crate::{bail, map_numeric, unsupported};

pub fn register(r: &mut Registry) {
    r.add("", "MaxUnpool", max_unpool);
    r.add("", "MaxRoiPool", max_roi_pool);
    r.add("", "RoiAlign", roi_align);
}

// ---------------------------------------------------------------------------------------------
// MaxUnpool
// ---------------------------------------------------------------------------------------------

fn max_unpool(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let idx = input(inputs, 1)?.to_i64_vec()?;
    let xs = x.shape().to_vec();
    if xs.len() < 3 {
        bail!("MaxUnpool needs an input of rank >= 3, got {xs:?}");
    }
    if idx.len() != x.len() {
        bail!(
            "MaxUnpool: indices have {} elements, X has {}",
            idx.len(),
            x.len()
        );
    }
    let r = xs.len() - 2;
    let k = match ctx.attr_opt_ints("kernel_shape")? {
        Some(k) if k.len() == r && k.iter().all(|&v| (1..=LIMIT).contains(&v)) => k,
        Some(k) => bail!("kernel_shape {k:?} must have {r} positive values"),
        None => bail!("required attribute 'kernel_shape' is missing"),
    };
    let s = ints_attr(ctx, "strides", r, 1, 1)?;
    let pads = ints_attr(ctx, "pads", 2 * r, 0, 0)?;
    let mut inferred = xs[..2].to_vec();
    for i in 0..r {
        let v = (xs[i + 2] as i64 - 1)
            .saturating_mul(s[i])
            .saturating_add(k[i] - pads[i] - pads[r + i]);
        if v < 0 {
            bail!("MaxUnpool: inferred output size {v} along dim {i} is negative");
        }
        inferred.push(v as usize);
    }
    let target: Vec<usize> = match opt_input(inputs, 2)? {
        Some(t) => {
            let v = t.to_i64_vec()?;
            if v.len() != xs.len() || v.iter().any(|&d| d < 0) {
                bail!(
                    "MaxUnpool: output_shape {v:?} must have {} non-negative values",
                    xs.len()
                );
            }
            v.iter().map(|&d| d as usize).collect()
        }
        None => inferred.clone(),
    };
    if target.iter().zip(&inferred).any(|(t, i)| t < i) {
        bail!("MaxUnpool: output_shape {target:?} is smaller than the unpooled shape {inferred:?}");
    }
    ctx.check_alloc(&target, x.dtype().size_in_memory())?;
    let n_inf: usize = inferred.iter().product();
    if let Some(bad) = idx.iter().find(|&&i| i < 0 || i as usize >= n_inf) {
        bail!("MaxUnpool: index {bad} is outside the unpooled tensor of shape {inferred:?}");
    }
    fn scatter<T: Clone + Zero>(
        a: &ArrayD<T>,
        idx: &[i64],
        inferred: &[usize],
        target: &[usize],
    ) -> OpResult<ArrayD<T>> {
        let mut y = ArrayD::<T>::zeros(IxDyn(inferred));
        if let Some(ys) = y.as_slice_mut() {
            for (v, &i) in a.iter().zip(idx) {
                ys[i as usize] = v.clone();
            }
        }
        if inferred == target {
            return Ok(y);
        }
        let mut out = ArrayD::<T>::zeros(IxDyn(target));
        let sl: Vec<ndarray::SliceInfoElem> = inferred
            .iter()
            .map(|&d| ndarray::SliceInfoElem::Slice {
                start: 0,
                end: Some(d as isize),
                step: 1,
            })
            .collect();
        out.slice_each_axis_mut(|ax| {
            let ndarray::SliceInfoElem::Slice { start, end, step } = sl[ax.axis.index()] else {
                unreachable!()
            };
            ndarray::Slice { start, end, step }
        })
        .assign(&y);
        Ok(out)
    }
    let t = map_numeric!(x, a => scatter(a, &idx, &inferred, &target)?)?;
    single(t)
}

// ---------------------------------------------------------------------------------------------
// MaxRoiPool and RoiAlign
// ---------------------------------------------------------------------------------------------

/// X as f64 `[N, C, H, W]` data plus its dims.
fn roi_input(x: &Tensor, what: &str) -> OpResult<(Vec<f64>, [usize; 4])> {
    let s = x.shape();
    if s.len() != 4 {
        bail!("{what} needs a 4-D input, got {s:?}");
    }
    if !x.dtype().is_float() || x.dtype().is_narrow_float() {
        unsupported!("{what} of {}", x.dtype());
    }
    Ok((x.to_f64_vec()?, [s[0], s[1], s[2], s[3]]))
}

fn max_roi_pool(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let (xd, [_, c, h, w]) = roi_input(x, "MaxRoiPool")?;
    let rois_t = input(inputs, 1)?;
    let rois = rois_t.to_f64_vec()?;
    if rois_t.rank() != 2 || rois_t.shape()[1] != 5 {
        bail!(
            "MaxRoiPool: rois must be [num_rois, 5], got {:?}",
            rois_t.shape()
        );
    }
    let ps = match ctx.attr_opt_ints("pooled_shape")? {
        Some(p) if p.len() == 2 && p.iter().all(|&v| v >= 1) => [p[0] as usize, p[1] as usize],
        other => bail!("MaxRoiPool: pooled_shape must be 2 positive ints, got {other:?}"),
    };
    let scale = ctx.attr_f("spatial_scale", 1.0)? as f64;
    let nr = rois_t.shape()[0];
    let oshape = [nr, c, ps[0], ps[1]];
    ctx.check_alloc(&oshape, 8)?;
    let n = x.shape()[0];
    let mut y = vec![0f64; nr * c * ps[0] * ps[1]];
    for (ri, roi) in rois.chunks(5).enumerate() {
        let b = roi[0] as i64;
        if b < 0 || b as usize >= n {
            bail!("MaxRoiPool: roi {ri} has batch index {b}, input batch is {n}");
        }
        let (x1, y1) = (
            (roi[1] * scale).round() as i64,
            (roi[2] * scale).round() as i64,
        );
        let (x2, y2) = (
            (roi[3] * scale).round() as i64,
            (roi[4] * scale).round() as i64,
        );
        let rh = (y2 - y1 + 1).max(1) as f64;
        let rw = (x2 - x1 + 1).max(1) as f64;
        let (bh, bw) = (rh / ps[0] as f64, rw / ps[1] as f64);
        for ci in 0..c {
            let plane = &xd[(b as usize * c + ci) * h * w..][..h * w];
            for ph in 0..ps[0] {
                let hs = ((ph as f64 * bh).floor() as i64 + y1).clamp(0, h as i64) as usize;
                let he = (((ph + 1) as f64 * bh).ceil() as i64 + y1).clamp(0, h as i64) as usize;
                for pw in 0..ps[1] {
                    let ws = ((pw as f64 * bw).floor() as i64 + x1).clamp(0, w as i64) as usize;
                    let we =
                        (((pw + 1) as f64 * bw).ceil() as i64 + x1).clamp(0, w as i64) as usize;
                    let mut m = f64::NEG_INFINITY;
                    for yy in hs..he {
                        for xx in ws..we {
                            m = m.max(plane[yy * w + xx]);
                        }
                    }
                    y[((ri * c + ci) * ps[0] + ph) * ps[1] + pw] =
                        if he <= hs || we <= ws { 0.0 } else { m };
                }
            }
        }
    }
    single(Tensor::from_f64s(x.dtype(), &oshape, y)?)
}

fn roi_align(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let (xd, [n, c, h, w]) = roi_input(x, "RoiAlign")?;
    let rois_t = input(inputs, 1)?;
    let rois = rois_t.to_f64_vec()?;
    let bidx = input(inputs, 2)?.to_i64_vec()?;
    if rois_t.rank() != 2 || rois_t.shape()[1] != 4 || rois_t.shape()[0] != bidx.len() {
        bail!(
            "RoiAlign: rois must be [num_rois, 4] matching batch_indices ({}), got {:?}",
            bidx.len(),
            rois_t.shape()
        );
    }
    let mode = ctx.attr_s("mode", "avg")?.to_ascii_lowercase();
    let max_mode = match mode.as_str() {
        "avg" => false,
        "max" => true,
        m => bail!("RoiAlign: unknown mode '{m}'"),
    };
    let oh = ctx.attr_i("output_height", 1)?;
    let ow = ctx.attr_i("output_width", 1)?;
    if oh < 1 || ow < 1 {
        bail!("RoiAlign: output size {oh}x{ow} must be positive");
    }
    let (oh, ow) = (oh as usize, ow as usize);
    let ratio = ctx.attr_i("sampling_ratio", 0)?;
    let scale = ctx.attr_f("spatial_scale", 1.0)? as f64;
    let default_ctm = if ctx.opset() >= 16 {
        "half_pixel"
    } else {
        "output_half_pixel"
    };
    let half_pixel = match ctx
        .attr_s("coordinate_transformation_mode", default_ctm)?
        .as_str()
    {
        "half_pixel" => true,
        "output_half_pixel" => false,
        m => bail!("RoiAlign: unknown coordinate_transformation_mode '{m}'"),
    };
    let nr = bidx.len();
    let oshape = [nr, c, oh, ow];
    ctx.check_alloc(&oshape, 8)?;
    let mut y = vec![0f64; nr * c * oh * ow];
    if h == 0 || w == 0 {
        return single(Tensor::from_f64s(x.dtype(), &oshape, y)?);
    }
    for (ri, roi) in rois.chunks(4).enumerate() {
        let b = bidx[ri];
        if b < 0 || b as usize >= n {
            bail!("RoiAlign: roi {ri} has batch index {b}, input batch is {n}");
        }
        let off = if half_pixel { 0.5 } else { 0.0 };
        let (sx, sy) = (roi[0] * scale - off, roi[1] * scale - off);
        let (ex, ey) = (roi[2] * scale - off, roi[3] * scale - off);
        let (mut rw, mut rh) = (ex - sx, ey - sy);
        if !half_pixel {
            rw = rw.max(1.0);
            rh = rh.max(1.0);
        }
        let (bh, bw) = (rh / oh as f64, rw / ow as f64);
        let gh = if ratio > 0 {
            ratio as usize
        } else {
            (rh / oh as f64).ceil().max(0.0) as usize
        };
        let gw = if ratio > 0 {
            ratio as usize
        } else {
            (rw / ow as f64).ceil().max(0.0) as usize
        };
        let samples = gh
            .checked_mul(gw)
            .and_then(|v| v.checked_mul(oh))
            .and_then(|v| v.checked_mul(ow));
        if samples.is_none_or(|v| v > (ctx.max_tensor_bytes / 32) as usize) {
            bail!("RoiAlign: roi {ri} needs a {gh}x{gw} sampling grid per bin, too many samples");
        }
        let count = (gh * gw).max(1) as f64;
        // Precomputed bilinear taps for each sample point: 4 (position, weight) pairs.
        let mut taps: Vec<[(usize, f64); 4]> = Vec::with_capacity(oh * ow * gh * gw);
        for ph in 0..oh {
            for pw in 0..ow {
                for iy in 0..gh {
                    let yy = sy + ph as f64 * bh + (iy as f64 + 0.5) * bh / gh as f64;
                    for ix in 0..gw {
                        let xx = sx + pw as f64 * bw + (ix as f64 + 0.5) * bw / gw as f64;
                        if yy < -1.0 || yy > h as f64 || xx < -1.0 || xx > w as f64 {
                            taps.push([(0, 0.0); 4]);
                            continue;
                        }
                        let (mut yv, mut xv) = (yy.max(0.0), xx.max(0.0));
                        let (mut y0, mut x0) = (yv as usize, xv as usize);
                        let y1 = if y0 >= h - 1 {
                            y0 = h - 1;
                            yv = y0 as f64;
                            y0
                        } else {
                            y0 + 1
                        };
                        let x1 = if x0 >= w - 1 {
                            x0 = w - 1;
                            xv = x0 as f64;
                            x0
                        } else {
                            x0 + 1
                        };
                        let (ly, lx) = (yv - y0 as f64, xv - x0 as f64);
                        let (hy, hx) = (1.0 - ly, 1.0 - lx);
                        taps.push([
                            (y0 * w + x0, hy * hx),
                            (y0 * w + x1, hy * lx),
                            (y1 * w + x0, ly * hx),
                            (y1 * w + x1, ly * lx),
                        ]);
                    }
                }
            }
        }
        let per = gh * gw;
        for ci in 0..c {
            let plane = &xd[(b as usize * c + ci) * h * w..][..h * w];
            for p in 0..oh * ow {
                let ts = &taps[p * per..(p + 1) * per];
                let v = if max_mode {
                    let mut m: Option<f64> = None;
                    for t in ts {
                        let s = t
                            .iter()
                            .map(|&(i, wt)| wt * plane[i])
                            .fold(f64::NEG_INFINITY, f64::max);
                        m = Some(m.map_or(s, |m| m.max(s)));
                    }
                    m.unwrap_or(0.0)
                } else {
                    ts.iter()
                        .map(|t| t.iter().map(|&(i, wt)| wt * plane[i]).sum::<f64>())
                        .sum::<f64>()
                        / count
                };
                y[(ri * c + ci) * oh * ow + p] = v;
            }
        }
    }
    single(Tensor::from_f64s(x.dtype(), &oshape, y)?)
}
