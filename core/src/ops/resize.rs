//! Resampling: Resize, Upsample, GridSample, AffineGrid, Col2Im, CenterCropPad.
//!
//! Resize is separable: each resized axis gets a table of (source index, weight) taps per output
//! position, and the data (as f64, like the reference) is resampled one axis at a time. Nearest mode
//! is a pure gather on the typed data, so it is exact for every dtype.
use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};
use rayon::prelude::*;

use super::broadcast::PAR_THRESHOLD;
use super::{OpCtx, Registry, input, norm_axis, opt_input, single};
use crate::error::OpResult;
use crate::tensor::{Tensor, Value};
use crate::{bail, map_array, unsupported};

pub mod device;
mod grid;

pub fn register(r: &mut Registry) {
    r.add("", "Resize", resize);
    r.add("", "Upsample", upsample);
    r.add("", "GridSample", grid::grid_sample);
    r.add("", "AffineGrid", grid::affine_grid);
    r.add("", "Col2Im", grid::col2im);
    r.add("", "CenterCropPad", grid::center_crop_pad);
}

/// Element types built back from the f64 working values (ints round half to even and saturate, as the
/// reference's saturate_cast does).
pub(crate) trait FromF64: Clone + Send + Sync + Default {
    fn from_f64(v: f64) -> Self;
}
macro_rules! from_f64_int {
    ($($t:ty),*) => {$(impl FromF64 for $t {
        fn from_f64(v: f64) -> Self { v.round_ties_even().clamp(<$t>::MIN as f64, <$t>::MAX as f64) as $t }
    })*};
}
from_f64_int!(i8, i16, i32, i64, u8, u16, u32, u64);
impl FromF64 for f32 {
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}
impl FromF64 for f64 {
    fn from_f64(v: f64) -> Self {
        v
    }
}
impl FromF64 for f16 {
    fn from_f64(v: f64) -> Self {
        f16::from_f64(v)
    }
}
impl FromF64 for bf16 {
    fn from_f64(v: f64) -> Self {
        bf16::from_f64(v)
    }
}
impl FromF64 for bool {
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
}
impl FromF64 for String {
    fn from_f64(_: f64) -> Self {
        String::new()
    }
}

fn build_like<T: FromF64>(_like: &ArrayD<T>, shape: &[usize], v: Vec<f64>) -> OpResult<ArrayD<T>> {
    Ok(ArrayD::from_shape_vec(
        IxDyn(shape),
        v.into_iter().map(T::from_f64).collect(),
    )?)
}

/// A tensor of `like`'s dtype from f64 values.
pub fn tensor_like(like: &Tensor, shape: &[usize], v: Vec<f64>) -> OpResult<Tensor> {
    match like {
        Tensor::Str(_) | Tensor::Packed(..) | Tensor::Bool(_) => {
            unsupported!("dtype {} for an interpolating kernel", like.dtype())
        }
        _ => Ok(map_array!(like, a => build_like(a, shape, v)?)),
    }
}

/// A value that must be a finite non-negative size.
fn to_size(v: f64, what: &str) -> OpResult<usize> {
    if !(0.0..9.0e15).contains(&v) {
        bail!("{what} {v} is not a valid size");
    }
    Ok(v as usize)
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Coord {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfCropAndResize,
    /// Resize-11 only.
    TfHalfPixelForNn,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Nearest {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
    /// Resize-10 and Upsample: floor when upsampling, ceil when downsampling.
    Legacy,
}

struct Params {
    mode: Mode,
    coord: Coord,
    nearest: Nearest,
    cubic_a: f64,
    exclude_outside: bool,
    extrapolation: f64,
    antialias: bool,
}

/// One resized axis: its scale, output length, the fractional output length the coordinate formulas
/// use, and for tf_crop_and_resize the roi (end - start, start * (len - 1)).
struct AxisPlan {
    axis: usize,
    scale: f64,
    out: usize,
    out_f: f64,
    roi: Option<(f64, f64)>,
}

impl Params {
    /// The source coordinate of output position `y`, and whether it is extrapolated.
    fn coord(&self, y: usize, inl: usize, p: &AxisPlan) -> (f64, bool) {
        let y = y as f64;
        let last = inl as f64 - 1.0;
        let x = match self.coord {
            Coord::HalfPixel => (y + 0.5) / p.scale - 0.5,
            Coord::HalfPixelSymmetric => {
                let adjustment = p.out as f64 / p.out_f;
                let offset = inl as f64 / 2.0 * (1.0 - adjustment);
                offset + (y + 0.5) / p.scale - 0.5
            }
            Coord::PytorchHalfPixel if p.out > 1 => (y + 0.5) / p.scale - 0.5,
            Coord::PytorchHalfPixel => 0.0,
            Coord::AlignCorners if p.out_f == 1.0 => 0.0,
            Coord::AlignCorners => y * last / (p.out_f - 1.0),
            Coord::Asymmetric => y / p.scale,
            Coord::TfHalfPixelForNn => (y + 0.5) / p.scale,
            Coord::TfCropAndResize => {
                let (d, off) = p.roi.unwrap_or((1.0, 0.0));
                // "length_resized > 1 ? ... : centre", length_resized being the fractional width
                // (as in the divisor; the corpus's align_corners data fixes that reading).
                let x = if p.out_f > 1.0 {
                    y * d * last / (p.out_f - 1.0)
                } else {
                    d * last / 2.0
                };
                let x = x + off;
                return (x, x < 0.0 || x > last);
            }
        };
        (x, false)
    }

    /// The nearest source index of output position `y` (`None`: extrapolated).
    fn nearest_index(&self, y: usize, inl: usize, p: &AxisPlan) -> Option<usize> {
        let (x, ex) = self.coord(y, inl, p);
        if ex {
            return None;
        }
        let f = x.floor();
        let r = x - f;
        let i = if r == 0.0 {
            f
        } else {
            match self.nearest {
                Nearest::RoundPreferFloor if r <= 0.5 => f,
                Nearest::RoundPreferCeil if r < 0.5 => f,
                Nearest::Floor => f,
                Nearest::Legacy if p.scale >= 1.0 => f,
                _ => f + 1.0,
            }
        };
        Some((i.max(0.0) as usize).min(inl.saturating_sub(1)))
    }

    fn kernel(&self, x: f64) -> f64 {
        let x = x.abs();
        let a = self.cubic_a;
        match self.mode {
            Mode::Cubic if x <= 1.0 => ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0,
            Mode::Cubic if x < 2.0 => ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a,
            Mode::Cubic => 0.0,
            _ => (1.0 - x).clamp(0.0, 1.0),
        }
    }
}

/// Taps of one axis for linear/cubic: `n` (index, weight) pairs per output position (`extrap[o]`:
/// output position `o` takes the extrapolation value instead).
pub struct Taps {
    pub n: usize,
    pub idx: Vec<usize>,
    pub w: Vec<f64>,
    pub extrap: Vec<bool>,
}

/// How one axis of a Resize maps output positions to input positions.
pub enum AxisTable {
    /// Output position `o` is input position `o` (an axis not resized).
    Identity,
    /// Nearest mode: the source index of each output position (`None`: the extrapolation value).
    Map(Vec<Option<usize>>),
    /// Linear and cubic modes: weighted taps.
    Taps(Taps),
}

/// A Resize (or Upsample) node's parameters, resized axes and output shape, from its attributes and
/// parameter inputs: what the CPU kernel and the device kernels both resample by.
pub struct ResizeSetup {
    p: Params,
    plans: Vec<AxisPlan>,
    pub out_shape: Vec<usize>,
}

impl ResizeSetup {
    fn new(shape: &[usize], p: Params, plans: Vec<AxisPlan>) -> ResizeSetup {
        let mut out_shape = shape.to_vec();
        for ap in &plans {
            out_shape[ap.axis] = ap.out;
        }
        ResizeSetup {
            p,
            plans,
            out_shape,
        }
    }

    /// The value of extrapolated outputs (tf_crop_and_resize).
    pub fn extrapolation(&self) -> f64 {
        self.p.extrapolation
    }

    /// One table per axis of an input of shape `shape` (the shape the setup was made for). Nearest:
    /// `Map` for every resized axis; linear and cubic: `Taps` for every resized axis that is not the
    /// identity, in which case the axis is `Identity` as it is for axes not resized.
    pub fn tables(&self, ctx: &OpCtx, shape: &[usize]) -> OpResult<Vec<AxisTable>> {
        let mut t: Vec<AxisTable> = shape.iter().map(|_| AxisTable::Identity).collect();
        for ap in &self.plans {
            let inl = shape[ap.axis];
            if self.p.mode == Mode::Nearest {
                t[ap.axis] = AxisTable::Map(
                    (0..ap.out)
                        .map(|y| self.p.nearest_index(y, inl, ap))
                        .collect(),
                );
                continue;
            }
            let trivial_roi = ap
                .roi
                .is_none_or(|(d, off)| (d - 1.0).abs() < 1e-9 && off.abs() < 1e-9);
            // tf_half_pixel_for_nn maps y to (y + 0.5) / scale: at scale 1 a shift, not the identity.
            let shifts = self.p.coord == Coord::TfHalfPixelForNn;
            if (ap.scale - 1.0).abs() <= 1e-9 && ap.out == inl && trivial_roi && !shifts {
                continue;
            }
            t[ap.axis] = AxisTable::Taps(build_taps(ctx, &self.p, inl, ap)?);
        }
        Ok(t)
    }
}

fn build_taps(ctx: &OpCtx, p: &Params, inl: usize, ap: &AxisPlan) -> OpResult<Taps> {
    let support = if p.mode == Mode::Cubic { 2.0 } else { 1.0 };
    let s = if p.antialias { ap.scale.min(1.0) } else { 1.0 };
    let start = (-support / s).floor() + 1.0;
    let n = to_size(2.0 - 2.0 * start, "antialias filter width")?;
    ctx.check_alloc(&[ap.out, n], 16)?;
    let start = start as i64;
    let (mut idx, mut w) = (vec![0usize; ap.out * n], vec![0f64; ap.out * n]);
    let mut extrap = vec![false; ap.out];
    let hi = inl as i64 - 1;
    for y in 0..ap.out {
        let (x, ex) = p.coord(y, inl, ap);
        if ex {
            extrap[y] = true;
            continue;
        }
        let xf = x.floor();
        // The reference prefers the left neighbour: an integral x has ratio 1 against x - 1.
        let (f, ratio) = if x == xf {
            (xf - 1.0, 1.0)
        } else {
            (xf, x - xf)
        };
        let (wi, ii) = (&mut w[y * n..(y + 1) * n], &mut idx[y * n..(y + 1) * n]);
        let mut outside = vec![false; n];
        for k in 0..n {
            let off = start + k as i64;
            let i = (f as i64).saturating_add(off);
            wi[k] = p.kernel((off as f64 - ratio) * s);
            outside[k] = i < 0 || i > hi;
            ii[k] = i.clamp(0, hi.max(0)) as usize;
        }
        if p.antialias {
            let sum: f64 = wi.iter().sum();
            wi.iter_mut().for_each(|v| *v /= sum);
        }
        if p.exclude_outside {
            for k in 0..n {
                if outside[k] {
                    wi[k] = 0.0;
                }
            }
            let sum: f64 = wi.iter().sum();
            let sum = if sum == 0.0 { 1.0 } else { sum };
            wi.iter_mut().for_each(|v| *v /= sum);
        }
    }
    Ok(Taps { n, idx, w, extrap })
}

/// Resamples axis `axis` of `src` (shape `shape`) with `taps`, returning the new data.
fn apply_taps(src: &[f64], shape: &[usize], axis: usize, t: &Taps, fill: f64) -> Vec<f64> {
    let inl = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    let out = t.extrap.len();
    let mut dst = vec![0f64; outer * out * inner];
    if dst.is_empty() {
        return dst;
    }
    let row = |r: usize, d: &mut [f64]| {
        let (ob, o) = (r / out, r % out);
        if t.extrap[o] {
            d.fill(fill);
            return;
        }
        for k in 0..t.n {
            let w = t.w[o * t.n + k];
            let base = (ob * inl + t.idx[o * t.n + k]) * inner;
            let s = &src[base..base + inner];
            // An index loop: no iterator adaptors left to inline in unoptimised builds.
            let mut i = 0;
            while i < inner {
                d[i] += w * s[i];
                i += 1;
            }
        }
    };
    // Chunks of whole rows, at least a few thousand values each.
    let rows = (4096 / inner).max(1);
    let chunk = |(ci, c): (usize, &mut [f64])| {
        for (k, d) in c.chunks_mut(inner).enumerate() {
            row(ci * rows + k, d);
        }
    };
    if dst.len() * t.n >= PAR_THRESHOLD {
        dst.par_chunks_mut(rows * inner).enumerate().for_each(chunk);
    } else {
        dst.chunks_mut(rows * inner).enumerate().for_each(chunk);
    }
    dst
}

/// Nearest resampling as a gather on the typed data: `maps[a][o]` is the source index of output
/// position `o` on axis `a` (`None`: filled with `fill`).
fn gather<T: Clone + Send + Sync>(
    src: &ArrayD<T>,
    maps: &[Vec<Option<usize>>],
    fill: T,
) -> OpResult<ArrayD<T>> {
    let src = src.as_standard_layout();
    let s = src.as_slice().unwrap_or(&[]);
    let shape: Vec<usize> = maps.iter().map(|m| m.len()).collect();
    let r = shape.len();
    let total: usize = shape.iter().product();
    if r == 0 {
        return Ok(src.to_owned());
    }
    let mut strides = vec![1usize; r];
    for a in (0..r - 1).rev() {
        strides[a] = strides[a + 1] * src.shape()[a + 1];
    }
    let offs: Vec<Vec<Option<usize>>> = maps
        .iter()
        .zip(&strides)
        .map(|(m, &st)| m.iter().map(|i| i.map(|i| i * st)).collect())
        .collect();
    let last = shape[r - 1];
    let mut out: Vec<T> = Vec::with_capacity(total);
    if total > 0 {
        let rows = total / last;
        let mut ix = vec![0usize; r - 1];
        for _ in 0..rows {
            let base = ix
                .iter()
                .enumerate()
                .try_fold(0usize, |acc, (a, &i)| offs[a][i].map(|o| acc + o));
            match base {
                None => out.extend(std::iter::repeat_n(fill.clone(), last)),
                Some(b) => out.extend(offs[r - 1].iter().map(|o| match o {
                    Some(o) => s.get(b + o).cloned().unwrap_or_else(|| fill.clone()),
                    None => fill.clone(),
                })),
            }
            for a in (0..r - 1).rev() {
                ix[a] += 1;
                if ix[a] < shape[a] {
                    break;
                }
                ix[a] = 0;
            }
        }
    }
    Ok(ArrayD::from_shape_vec(IxDyn(&shape), out)?)
}

fn gather_fill<T: FromF64>(
    src: &ArrayD<T>,
    maps: &[Vec<Option<usize>>],
    fill: f64,
) -> OpResult<ArrayD<T>> {
    gather(src, maps, T::from_f64(fill))
}

/// Runs a resize of `x` described by `setup`.
fn run_resize(ctx: &OpCtx, x: &Tensor, setup: &ResizeSetup) -> OpResult<Tensor> {
    let p = &setup.p;
    ctx.check_alloc(&setup.out_shape, x.dtype().size_in_memory().max(8))?;
    if p.mode == Mode::Nearest {
        let tables = setup.tables(ctx, x.shape())?;
        let maps: Vec<Vec<Option<usize>>> = tables
            .into_iter()
            .zip(x.shape())
            .map(|(t, &d)| match t {
                AxisTable::Map(m) => m,
                _ => (0..d).map(Some).collect(),
            })
            .collect();
        return Ok(map_array!(x, a => gather_fill(a, &maps, p.extrapolation)?));
    }
    if matches!(x, Tensor::Bool(_) | Tensor::Str(_) | Tensor::Packed(..)) {
        unsupported!("{:?} interpolation of {} data", p.mode, x.dtype());
    }
    let tables = setup.tables(ctx, x.shape())?;
    let mut data = x.to_f64_vec()?;
    let mut cur = x.shape().to_vec();
    for ap in &setup.plans {
        if let AxisTable::Taps(taps) = &tables[ap.axis] {
            data = apply_taps(&data, &cur, ap.axis, taps, p.extrapolation);
            cur[ap.axis] = ap.out;
        }
    }
    tensor_like(x, &cur, data)
}

fn parse_mode(m: &str) -> OpResult<Mode> {
    Ok(match m {
        "nearest" => Mode::Nearest,
        "linear" | "bilinear" | "trilinear" => Mode::Linear,
        "cubic" | "bicubic" => Mode::Cubic,
        m => bail!("unknown resize mode '{m}'"),
    })
}

/// Plans from per-axis scales (output = floor(in * scale)).
fn plans_from_scales(shape: &[usize], axes: &[usize], scales: &[f64]) -> OpResult<Vec<AxisPlan>> {
    if scales.len() != axes.len() {
        bail!(
            "scales has {} values, expected {} (one per resized axis)",
            scales.len(),
            axes.len()
        );
    }
    let mut plans = Vec::new();
    for (&a, &s) in axes.iter().zip(scales) {
        if !(s > 0.0 && s.is_finite()) {
            bail!("scale {s} for axis {a} must be positive");
        }
        let out_f = s * shape[a] as f64;
        plans.push(AxisPlan {
            axis: a,
            scale: s,
            out: to_size(out_f.floor(), "output size")?,
            out_f,
            roi: None,
        });
    }
    Ok(plans)
}

fn resize(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let f64s = |i: usize| -> OpResult<Option<Vec<f64>>> {
        opt_input(inputs, i)?.map(|t| t.to_f64_vec()).transpose()
    };
    let sizes = opt_input(inputs, 3)?.map(|t| t.to_i64_vec()).transpose()?;
    let setup = resize_setup(ctx, x.shape(), f64s(1)?, f64s(2)?, sizes)?;
    if x.shape().contains(&0) {
        ctx.check_alloc(&setup.out_shape, x.dtype().size_in_memory())?;
        return single(Tensor::zeros(x.dtype(), &setup.out_shape));
    }
    single(run_resize(ctx, x, &setup)?)
}

/// The setup of a Resize node over an input of shape `shape`, from its parameter inputs 1, 2 and 3
/// (roi, scales, sizes; from opset 11 an empty one counts as omitted; opset 10 has scales at 1).
pub fn resize_setup(
    ctx: &OpCtx,
    shape: &[usize],
    in1: Option<Vec<f64>>,
    in2: Option<Vec<f64>>,
    in3: Option<Vec<i64>>,
) -> OpResult<ResizeSetup> {
    let opset = ctx.opset();
    let shape = shape.to_vec();
    let r = shape.len();
    let mode = parse_mode(&ctx.attr_s("mode", "nearest")?)?;
    if opset < 11 {
        let Some(scales) = in1 else {
            bail!("Resize-{opset} needs the scales input")
        };
        let axes: Vec<usize> = (0..r).collect();
        let plans = plans_from_scales(&shape, &axes, &scales)?;
        let p = Params {
            mode,
            coord: Coord::Asymmetric,
            nearest: Nearest::Legacy,
            cubic_a: -0.75,
            exclude_outside: false,
            extrapolation: 0.0,
            antialias: false,
        };
        return Ok(ResizeSetup::new(&shape, p, plans));
    }
    let coord = match ctx
        .attr_s("coordinate_transformation_mode", "half_pixel")?
        .as_str()
    {
        "half_pixel" => Coord::HalfPixel,
        "half_pixel_symmetric" => Coord::HalfPixelSymmetric,
        "pytorch_half_pixel" => Coord::PytorchHalfPixel,
        "align_corners" => Coord::AlignCorners,
        "asymmetric" => Coord::Asymmetric,
        "tf_crop_and_resize" => Coord::TfCropAndResize,
        "tf_half_pixel_for_nn" => Coord::TfHalfPixelForNn,
        m => bail!("unknown coordinate_transformation_mode '{m}'"),
    };
    let nearest = match ctx.attr_s("nearest_mode", "round_prefer_floor")?.as_str() {
        "round_prefer_floor" => Nearest::RoundPreferFloor,
        "round_prefer_ceil" => Nearest::RoundPreferCeil,
        "floor" => Nearest::Floor,
        "ceil" => Nearest::Ceil,
        m => bail!("unknown nearest_mode '{m}'"),
    };
    let p = Params {
        mode,
        coord,
        nearest,
        cubic_a: ctx.attr_f("cubic_coeff_a", -0.75)? as f64,
        exclude_outside: ctx.attr_i("exclude_outside", 0)? != 0,
        extrapolation: ctx.attr_f("extrapolation_value", 0.0)? as f64,
        antialias: ctx.attr_i("antialias", 0)? != 0,
    };
    let axes: Vec<usize> = match ctx.attr_opt_ints("axes")? {
        Some(ax) if opset >= 18 => ax
            .iter()
            .map(|&a| norm_axis(a, r))
            .collect::<OpResult<_>>()?,
        _ => (0..r).collect(),
    };
    for (i, a) in axes.iter().enumerate() {
        if axes[..i].contains(a) {
            bail!("axis {a} is repeated in axes {axes:?}");
        }
    }
    let (roi_v, scales_v) = (in1.filter(|v| !v.is_empty()), in2.filter(|v| !v.is_empty()));
    let sizes_v = in3.filter(|v| !v.is_empty());
    let mut plans = match (scales_v, sizes_v) {
        (Some(_), Some(_)) => bail!("only one of scales and sizes may be given"),
        (None, None) => bail!("one of scales and sizes must be given"),
        (Some(s), None) => plans_from_scales(&shape, &axes, &s)?,
        (None, Some(sizes)) => {
            if sizes.len() != axes.len() || sizes.iter().any(|&v| v < 0) {
                bail!("sizes {sizes:?} must be {} non-negative values", axes.len());
            }
            let ratio = |i: usize| sizes[i] as f64 / shape[axes[i]] as f64;
            let policy = ctx.attr_s("keep_aspect_ratio_policy", "stretch")?;
            let common = match policy.as_str() {
                "stretch" => None,
                "not_larger" => Some((0..axes.len()).map(ratio).fold(f64::INFINITY, f64::min)),
                "not_smaller" => Some((0..axes.len()).map(ratio).fold(f64::NEG_INFINITY, f64::max)),
                m => bail!("unknown keep_aspect_ratio_policy '{m}'"),
            };
            let mut plans = Vec::new();
            for (i, &a) in axes.iter().enumerate() {
                let inl = shape[a] as f64;
                let (scale, out, out_f) = match common {
                    None => (ratio(i), sizes[i] as usize, sizes[i] as f64),
                    Some(sc) => (
                        sc,
                        to_size((sc * inl + 0.5).floor(), "output size")?,
                        sc * inl,
                    ),
                };
                plans.push(AxisPlan {
                    axis: a,
                    scale,
                    out,
                    out_f,
                    roi: None,
                });
            }
            plans
        }
    };
    if coord == Coord::TfCropAndResize {
        let Some(roi) = roi_v else {
            bail!("tf_crop_and_resize needs a roi input")
        };
        let n = axes.len();
        if roi.len() != 2 * n {
            bail!("roi has {} values, expected {}", roi.len(), 2 * n);
        }
        // In f64 whatever the roi's type: the specification's formula is real arithmetic. (ONNX's
        // numpy evaluator happens to form end - start and start * (len - 1) in a float32 roi's
        // precision, but its expected data for every tf_crop_and_resize case of the corpus comes out
        // bit for bit the same with the roi in float64, so the corpus does not ask for f32. Rounding
        // those two to f32 moved source coordinates by ~1e-7, enough to carry one that real
        // arithmetic puts on a nearest-rounding tie or on the extrapolation boundary, e.g. roi
        // [0.4, 1] on 4 values upscaled 2.5 times, whose last output maps to exactly 3, across it.)
        for (i, ap) in plans.iter_mut().enumerate() {
            let last = shape[ap.axis] as f64 - 1.0;
            let (s, e) = (roi[i], roi[n + i]);
            ap.roi = Some((e - s, s * last));
        }
    }
    Ok(ResizeSetup::new(&shape, p, plans))
}

fn upsample(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let r = x.rank();
    let scales: Vec<f64> = if ctx.opset() >= 9 {
        input(inputs, 1)?.to_f64_vec()?
    } else if ctx.opset() >= 7 {
        let Some(s) = ctx.attr_opt_floats("scales")? else {
            bail!("Upsample needs the scales attribute")
        };
        s.iter().map(|&v| v as f64).collect()
    } else {
        if r != 4 {
            bail!("Upsample-1 needs a 4-D input, got rank {r}");
        }
        vec![
            1.0,
            1.0,
            ctx.attr_f("height_scale", 1.0)? as f64,
            ctx.attr_f("width_scale", 1.0)? as f64,
        ]
    };
    let axes: Vec<usize> = (0..r).collect();
    let plans = plans_from_scales(x.shape(), &axes, &scales)?;
    let p = Params {
        mode: parse_mode(&ctx.attr_s("mode", "nearest")?)?,
        coord: Coord::Asymmetric,
        nearest: Nearest::Legacy,
        cubic_a: -0.75,
        exclude_outside: false,
        extrapolation: 0.0,
        antialias: false,
    };
    if p.mode == Mode::Cubic {
        bail!("Upsample supports nearest and linear modes only");
    }
    single(run_resize(ctx, x, &ResizeSetup::new(x.shape(), p, plans))?)
}

#[cfg(test)]
pub(super) mod tests;
