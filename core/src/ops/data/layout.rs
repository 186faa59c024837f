//! Layout ops (a submodule of `data.rs`): Pad, Tile, DepthToSpace, SpaceToDepth, Trilu,
//! ReverseSequence, CumSum.
use ndarray::ArrayD;
use rayon::prelude::*;

use super::super::broadcast::PAR_THRESHOLD;
use super::super::{OpCtx, Registry, input, norm_axis, opt_input, single};
use super::{Arith, Elem, arr, flat, permute_as, strides_of, view_copy};
use crate::error::{OpError, OpResult};
use crate::tensor::{Tensor, Value};
use crate::{bail, map_array, map_numeric, unsupported};
use half::{bf16, f16};

pub fn register(r: &mut Registry) {
    r.add("", "Pad", pad);
    r.add("", "Tile", tile);
    r.add("", "DepthToSpace", depth_to_space);
    r.add("", "SpaceToDepth", space_to_depth);
    r.add("", "Trilu", trilu);
    r.add("", "ReverseSequence", reverse_sequence);
    r.add("", "CumSum", cumsum);
}

#[derive(Clone, Copy, PartialEq)]
enum PadMode {
    Constant,
    Reflect,
    Edge,
    Wrap,
}

fn pad(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let r = x.rank();
    let mode = match ctx.attr_s("mode", "constant")?.as_str() {
        "constant" => PadMode::Constant,
        "reflect" => PadMode::Reflect,
        "edge" => PadMode::Edge,
        "wrap" => PadMode::Wrap,
        m => bail!("unknown Pad mode '{m}'"),
    };
    let (pads, value, axes): (Vec<i64>, Option<&Tensor>, Option<Vec<i64>>) = if ctx.opset() < 11 {
        let name = if ctx.opset() < 2 { "paddings" } else { "pads" };
        let Some(p) = ctx.attr_opt_ints(name)? else {
            bail!("Pad needs the '{name}' attribute")
        };
        (p, None, None)
    } else {
        let axes = opt_input(inputs, 3)?.map(|t| t.to_i64_vec()).transpose()?;
        (input(inputs, 1)?.to_i64_vec()?, opt_input(inputs, 2)?, axes)
    };
    let axes: Vec<usize> = match axes {
        Some(a) => a
            .iter()
            .map(|&v| norm_axis(v, r))
            .collect::<OpResult<_>>()?,
        None => (0..r).collect(),
    };
    let na = axes.len();
    if pads.len() != 2 * na {
        bail!("Pad has {} pads for {na} axes", pads.len());
    }
    let mut begin = vec![0i64; r];
    let mut out_shape = x.shape().to_vec();
    for (i, &a) in axes.iter().enumerate() {
        let d = x.shape()[a] as i64;
        let o = d.saturating_add(pads[i]).saturating_add(pads[na + i]);
        if o < 0 {
            bail!("Pad {pads:?} crops axis {a} of size {d} below zero");
        }
        if o > 0 && d == 0 && mode != PadMode::Constant {
            bail!("Pad mode needs a non-empty axis {a} to pad from");
        }
        begin[a] = pads[i];
        out_shape[a] = o as usize;
    }
    ctx.check_alloc(&out_shape, x.dtype().size_in_memory())?;
    let maps = pad_maps(x.shape(), &begin, &out_shape, mode);
    let f = ctx.attr_f("value", 0.0)? as f64;
    single(map_array!(x, a => pad_impl(a, value, f, &maps, &begin, &out_shape)?))
}

/// For each axis, the source index of every output index (-1: the constant).
fn pad_maps(shape: &[usize], begin: &[i64], out_shape: &[usize], mode: PadMode) -> Vec<Vec<isize>> {
    let map = |d: i64, i: i64| -> i64 {
        if (0..d).contains(&i) {
            return i;
        }
        match mode {
            PadMode::Constant => -1,
            PadMode::Edge => i.clamp(0, d - 1),
            PadMode::Wrap => i.rem_euclid(d),
            PadMode::Reflect if d == 1 => 0,
            PadMode::Reflect => {
                let m = i.rem_euclid(2 * (d - 1));
                if m >= d { 2 * (d - 1) - m } else { m }
            }
        }
    };
    (0..shape.len())
        .map(|a| {
            (0..out_shape[a] as i64)
                .map(|j| map(shape[a] as i64, j - begin[a]) as isize)
                .collect()
        })
        .collect()
}

fn pad_impl<T: Elem>(
    a: &ArrayD<T>,
    value: Option<&Tensor>,
    f: f64,
    maps: &[Vec<isize>],
    begin: &[i64],
    out_shape: &[usize],
) -> OpResult<ArrayD<T>> {
    let cval = match value {
        Some(v) if !v.is_empty() => match T::of(v) {
            Some(c) => c.iter().next().cloned().unwrap_or_default(),
            None => bail!(
                "Pad constant_value has dtype {}, unlike the data",
                v.dtype()
            ),
        },
        _ => T::from_f64(f).unwrap_or_default(),
    };
    let n: usize = out_shape.iter().product();
    let r = out_shape.len();
    if r == 0 {
        return Ok(a.clone());
    }
    let src = flat(a);
    let st = strides_of(a.shape());
    let last = maps[r - 1].as_slice();
    let len = out_shape[r - 1];
    // The interior run of the last axis, copied as one slice.
    let d = a.shape()[r - 1] as i64;
    let lo = begin[r - 1].clamp(0, len as i64) as usize;
    let hi = (begin[r - 1] + d).clamp(lo as i64, len as i64) as usize;
    let rows = n.checked_div(len).unwrap_or(0);
    let outer_shape = &out_shape[..r - 1];
    let ost = strides_of(outer_shape);
    let do_row = |row: usize, dst: &mut [T]| {
        let mut off = 0isize;
        let mut rem = row;
        for (k, &s) in ost.iter().enumerate() {
            let i = rem / s as usize;
            rem %= s as usize;
            let m = maps[k][i];
            if m < 0 {
                return; // already the constant
            }
            off += m * st[k];
        }
        if hi > lo {
            let s0 = (off + last[lo]) as usize;
            dst[lo..hi].clone_from_slice(&src[s0..s0 + hi - lo]);
        }
        for j in (0..lo).chain(hi..len) {
            if last[j] >= 0 {
                dst[j] = src[(off + last[j]) as usize].clone();
            }
        }
    };
    let mut out = vec![cval; n];
    if rows > 0 {
        if n >= PAR_THRESHOLD {
            out.par_chunks_mut(len)
                .enumerate()
                .for_each(|(i, dst)| do_row(i, dst));
        } else {
            out.chunks_mut(len)
                .enumerate()
                .for_each(|(i, dst)| do_row(i, dst));
        }
    }
    arr(out_shape, out)
}

fn tile(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    if ctx.opset() < 6 {
        unsupported!("Tile-1 (tiles/axis inputs)");
    }
    let reps = input(inputs, 1)?.to_i64_vec()?;
    let shape = x.shape();
    if reps.len() != shape.len() || reps.iter().any(|&v| v < 0) {
        bail!("Tile repeats {reps:?} do not fit the input shape {shape:?}");
    }
    let out_shape: Vec<usize> = shape
        .iter()
        .zip(&reps)
        .map(|(&d, &r)| d.saturating_mul(r as usize))
        .collect();
    ctx.check_alloc(&out_shape, x.dtype().size_in_memory())?;
    let st = strides_of(shape);
    let mut vs = Vec::new();
    let mut vst = Vec::new();
    for (i, &d) in shape.iter().enumerate() {
        vs.extend([reps[i] as usize, d]);
        vst.extend([0, st[i]]);
    }
    view_copy(x, 0, &vs, &vst)?
        .reshape(&out_shape)
        .and_then(single)
}

fn block_args(ctx: &OpCtx, x: &Tensor) -> OpResult<(usize, bool, [usize; 4])> {
    let bs = ctx.req_i("blocksize")?;
    let crd = match ctx.attr_s("mode", "DCR")?.as_str() {
        "DCR" => false,
        "CRD" => true,
        m => bail!("unknown mode '{m}'"),
    };
    let &[b, c, h, w] = x.shape() else {
        bail!("expected a 4-D input, got {:?}", x.shape())
    };
    if bs <= 0 || bs > 1 << 31 {
        bail!("blocksize {bs} must be in 1..=2^31");
    }
    Ok((bs as usize, crd, [b, c, h, w]))
}

fn depth_to_space(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let (bs, crd, [b, c, h, w]) = block_args(ctx, x)?;
    if c % (bs * bs) != 0 {
        bail!("channels {c} are not a multiple of blocksize² {}", bs * bs);
    }
    let c2 = c / (bs * bs);
    let (Some(ho), Some(wo)) = (h.checked_mul(bs), w.checked_mul(bs)) else {
        bail!("output of {h}x{w} times blocksize {bs} overflows");
    };
    let out = [b, c2, ho, wo];
    single(if crd {
        permute_as(x, &[b, c2, bs, bs, h, w], &[0, 1, 4, 2, 5, 3], &out)?
    } else {
        permute_as(x, &[b, bs, bs, c2, h, w], &[0, 3, 4, 1, 5, 2], &out)?
    })
}

fn space_to_depth(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let (bs, crd, [b, c, h, w]) = block_args(ctx, x)?;
    if h % bs != 0 || w % bs != 0 {
        bail!("spatial dims {h}x{w} are not multiples of blocksize {bs}");
    }
    let view = [b, c, h / bs, bs, w / bs, bs];
    let Some(co) = c.checked_mul(bs * bs) else {
        bail!("{c} channels times blocksize² {} overflows", bs * bs);
    };
    let out = [b, co, h / bs, w / bs];
    let perm = if crd {
        [0, 1, 3, 5, 2, 4]
    } else {
        [0, 3, 5, 1, 2, 4]
    };
    single(permute_as(x, &view, &perm, &out)?)
}

fn trilu(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let k = match opt_input(inputs, 1)? {
        Some(t) => *t
            .to_i64_vec()?
            .first()
            .ok_or_else(|| OpError::Invalid("Trilu k is empty".into()))?,
        None => 0,
    };
    let upper = ctx.attr_i("upper", 1)? != 0;
    let r = x.rank();
    if r < 2 {
        bail!("Trilu needs rank >= 2, got {:?}", x.shape());
    }
    let (n, m) = (x.shape()[r - 2], x.shape()[r - 1]);
    single(map_array!(x, a => {
        let mut v = flat(a).into_owned();
        if n * m > 0 {
            for mat in v.chunks_mut(n * m) {
                for (i, row) in mat.chunks_mut(m).enumerate() {
                    // keep j - i >= k (upper) or j - i <= k (lower)
                    let edge = (i as i64).saturating_add(k);
                    let (z0, z1) = if upper { (0, edge.clamp(0, m as i64)) } else { (edge.saturating_add(1).clamp(0, m as i64), m as i64) };
                    row[z0 as usize..z1.max(z0) as usize].fill(Default::default());
                }
            }
        }
        arr(x.shape(), v)?
    }))
}

fn reverse_sequence(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let lens = input(inputs, 1)?.to_i64_vec()?;
    let (ba, ta) = (ctx.attr_i("batch_axis", 1)?, ctx.attr_i("time_axis", 0)?);
    let shape = x.shape();
    if shape.len() < 2 || !matches!((ba, ta), (0, 1) | (1, 0)) {
        bail!(
            "ReverseSequence needs rank >= 2 and batch/time axes 0 and 1, got {shape:?}, {ba}, {ta}"
        );
    }
    let (nb, nt) = (shape[ba as usize], shape[ta as usize]);
    if lens.len() != nb || lens.iter().any(|&l| l < 0 || l as usize > nt) {
        bail!("sequence_lens {lens:?} do not fit batch {nb} and time {nt}");
    }
    let st = strides_of(shape);
    let (sb, stt) = (st[ba as usize] as usize, st[ta as usize] as usize);
    let inner = st[1] as usize;
    single(map_array!(x, a => {
        let src = flat(a);
        let mut v = src.to_vec();
        for (b, &l) in lens.iter().enumerate() {
            let l = l as usize;
            for t in 0..l {
                let (d, s) = (b * sb + t * stt, b * sb + (l - 1 - t) * stt);
                v[d..d + inner].clone_from_slice(&src[s..s + inner]);
            }
        }
        arr(shape, v)?
    }))
}

/// A CumSum as lines: `outer · inner` lines of `dim` elements each (element `t` of line `(o, i)`
/// at `(o · dim + t) · inner + i`), summed in order from the first (or, `reverse`, the last)
/// element; `exclusive` writes each sum before adding its element. The CPU and every device
/// backend read this one plan, and each sums a line in the same order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanPlan {
    pub outer: usize,
    pub dim: usize,
    pub inner: usize,
    pub exclusive: bool,
    pub reverse: bool,
}

/// The plan of a CumSum node over data of shape `shape`, its axis the tensor `axis`.
pub fn cumsum_plan(ctx: &OpCtx, shape: &[usize], axis: &Tensor) -> OpResult<ScanPlan> {
    let axis = axis.to_i64_vec()?;
    let &[axis] = axis.as_slice() else {
        bail!("CumSum axis must hold one value, got {axis:?}")
    };
    let axis = norm_axis(axis, shape.len())?;
    Ok(ScanPlan {
        outer: shape[..axis].iter().product(),
        dim: shape.get(axis).copied().unwrap_or(1),
        inner: shape[axis + 1..].iter().product(),
        exclusive: ctx.attr_i("exclusive", 0)? != 0,
        reverse: ctx.attr_i("reverse", 0)? != 0,
    })
}

fn cumsum(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let p = cumsum_plan(ctx, x.shape(), input(inputs, 1)?)?;
    // f16 and bf16 sum in f32 and round each output once (the standard promise of a long sum);
    // every other type sums in itself (integers wrap).
    single(match x {
        Tensor::F16(a) => Tensor::F16(scan(a, p, 0f32, |v| v.to_f32(), f16::from_f32)?),
        Tensor::BF16(a) => Tensor::BF16(scan(a, p, 0f32, |v| v.to_f32(), bf16::from_f32)?),
        x => map_numeric!(x, a => scan(a, p, Arith::zero(), |v| v, |v| v)?)?,
    })
}

/// The sums of `plan`'s lines of `a`, accumulated in `A` (`up` widens an element, `down` rounds
/// a sum back).
fn scan<T: Copy + Default, A: Arith>(
    a: &ArrayD<T>,
    plan: ScanPlan,
    zero: A,
    up: impl Fn(T) -> A,
    down: impl Fn(A) -> T,
) -> OpResult<ArrayD<T>> {
    let ScanPlan {
        outer,
        dim,
        inner,
        exclusive,
        reverse,
    } = plan;
    let src = flat(a);
    let mut out = vec![T::default(); src.len()];
    let mut acc = vec![zero; inner];
    for o in 0..outer {
        acc.fill(zero);
        for k in 0..dim {
            let t = if reverse { dim - 1 - k } else { k };
            let p = (o * dim + t) * inner;
            for i in 0..inner {
                let v = up(src[p + i]);
                if exclusive {
                    out[p + i] = down(acc[i]);
                    acc[i] = acc[i].add(v);
                } else {
                    acc[i] = acc[i].add(v);
                    out[p + i] = down(acc[i]);
                }
            }
        }
    }
    arr(a.shape(), out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pads one axis of `v` by (b, e) with numpy's modes, directly.
    fn pad1(v: &[f32], b: i64, e: i64, mode: PadMode) -> Vec<f32> {
        let d = v.len() as i64;
        (-b..d + e)
            .map(|i| match mode {
                _ if (0..d).contains(&i) => v[i as usize],
                PadMode::Constant => 0.5,
                PadMode::Edge => v[i.clamp(0, d - 1) as usize],
                PadMode::Wrap => v[i.rem_euclid(d) as usize],
                PadMode::Reflect => {
                    // reflect repeatedly, like numpy
                    let mut j = i;
                    while !(0..d).contains(&j) {
                        j = if j < 0 { -j } else { 2 * (d - 1) - j };
                    }
                    v[j as usize]
                }
            })
            .collect()
    }

    #[test]
    fn pad_modes_match_direct_reflection_and_cropping() {
        let v: Vec<f32> = (0..5).map(|i| (i as f32 * 0.37 + 0.1).sin()).collect();
        let a = ArrayD::from_shape_vec(ndarray::IxDyn(&[1, 5]), v.clone()).unwrap();
        for mode in [
            PadMode::Constant,
            PadMode::Edge,
            PadMode::Wrap,
            PadMode::Reflect,
        ] {
            for (b, e) in [(3, 11), (-2, 4), (0, -3), (9, 0)] {
                let maps = pad_maps(&[1, 5], &[0, b], &[1, (5 + b + e) as usize], mode);
                let got =
                    pad_impl(&a, None, 0.5, &maps, &[0, b], &[1, (5 + b + e) as usize]).unwrap();
                assert_eq!(
                    got.as_slice().unwrap(),
                    pad1(&v, b, e, mode).as_slice(),
                    "{b} {e}"
                );
            }
        }
    }
}
