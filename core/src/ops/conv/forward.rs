//! Conv and FusedConv: shapes and attributes, the activation of FusedConv, the general path (im2col
//! and GEMM, for every float type; the f32 fast path in `conv/packed.rs` is tested against it) and
//! direct depthwise convolution, which both paths share, with f32 MaxPool and AveragePool on the
//! depthwise taps (`pool_f32`).
//!
//! A pooling window is a depthwise convolution's taps (`kernels/src/depthwise.rs`): MaxPool is a
//! masked vector max by its NaN-else-first-maximum rule (`vmaxps` and one NaN test per tap; which
//! NaN of a window is kept is not specified), AveragePool a sum from zero in window order with
//! weights of one, divided by each output's count. A plane strided along its columns is first
//! split into its grid of `s₁ × s₂` stride phases (`PhaseGrid`, AVX-512 permutes), so that each
//! tap reads consecutive values.
use std::mem::MaybeUninit;

use ndarray::{ArrayD, IxDyn};
use quorum_kernels::Activation;
use quorum_kernels::depthwise::{Tap as DwTap, Taps as DwTaps};
use rayon::prelude::*;

use super::{Geom, PAR_MIN, check_bias, contiguous, conv_geom, fill_bias, float_dispatch, span};
use crate::bail;
use crate::error::OpResult;
use crate::ops::matmul::{GemmFloat, gemm_into};
use crate::ops::{OpCtx, input, opt_input, single};
use crate::tensor::Value;

pub(super) fn conv(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    run(ctx, inputs, Activation::None)
}

/// `com.quorum` FusedConv: Conv's inputs and attributes, and `activation` (`Relu`, `Clip`,
/// `LeakyRelu`, `Sigmoid`, `HardSwish`; absent or empty for none) with `activation_params` (Clip:
/// `[min, max]`; LeakyRelu: `[alpha]`, default 0.01), onnxruntime's FusedConv contract, plus `Silu`
/// (x·sigmoid(x), the Sigmoid → Mul pair; not in onnxruntime's list) and `FakeQuant` (a
/// QuantizeLinear → DequantizeLinear pair, f32 only, with the six parameters of
/// `quantize::fake::from_params`). The bias and
/// the activation are applied as each output tile is stored. For f32 and f64 the result equals Conv
/// followed by the activation node bit for bit; f16 and bf16 are rounded once, after the activation,
/// where the pair rounds twice (equal for Relu and Clip, within a half ulp of the narrow type before
/// the activation otherwise).
pub(super) fn fused_conv(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    run(ctx, inputs, activation_attr(ctx)?)
}

/// The `activation` and `activation_params` attributes of a fused node.
pub(crate) fn activation_attr(ctx: &OpCtx) -> OpResult<Activation> {
    let name = ctx.attr_s("activation", "")?;
    let params = ctx
        .attr_opt_floats("activation_params")?
        .unwrap_or_default();
    let want = |n: usize| -> OpResult<()> {
        if params.len() != n {
            bail!("activation {name} takes {n} activation_params, got {params:?}");
        }
        Ok(())
    };
    Ok(match name.as_str() {
        "" => {
            want(0)?;
            Activation::None
        }
        "Relu" => {
            want(0)?;
            Activation::Relu
        }
        "Sigmoid" => {
            want(0)?;
            Activation::Sigmoid
        }
        "HardSwish" => {
            want(0)?;
            Activation::HardSwish
        }
        "Silu" => {
            want(0)?;
            Activation::Silu
        }
        "Clip" => {
            want(2)?;
            Activation::Clip {
                lo: params[0],
                hi: params[1],
            }
        }
        "FakeQuant" => Activation::FakeQuant(crate::ops::quantize::fake::from_params(&params)?),
        "LeakyRelu" => {
            if params.is_empty() {
                Activation::LeakyRelu { alpha: 0.01 }
            } else {
                want(1)?;
                Activation::LeakyRelu { alpha: params[0] }
            }
        }
        other => {
            bail!(
                "activation '{other}' is not one of Relu, Clip, LeakyRelu, Sigmoid, HardSwish, Silu, FakeQuant"
            )
        }
    })
}

fn run(ctx: &OpCtx, inputs: &[Option<&Value>], act: Activation) -> OpResult<Vec<Value>> {
    let fused = ctx.node.op_type == "FusedConv";
    // FusedConv's fourth input, a residual added before the activation (Conv has three inputs).
    let residual = if fused { opt_input(inputs, 3)? } else { None };
    // Its fifth, a Mul's other operand: the input is their product (`conv/scale.rs`).
    let product;
    let x = match fused.then(|| opt_input(inputs, 4)).transpose()?.flatten() {
        None => input(inputs, 0)?,
        Some(_) => match super::scale::scaled(ctx, inputs, act, residual)? {
            super::scale::Scaled::Done(y) => return Ok(vec![y]),
            super::scale::Scaled::Product(p) => {
                product = p;
                match product.as_tensor() {
                    Some(t) => t,
                    None => bail!("FusedConv: the scaled input is not a tensor"),
                }
            }
        },
    };
    if matches!(act, Activation::FakeQuant(_)) && x.dtype() != crate::tensor::DType::F32 {
        bail!(
            "FusedConv: the FakeQuant activation takes an f32 convolution (DequantizeLinear's output is f32), got {}",
            x.dtype()
        );
    }
    let rest = vec![Some(input(inputs, 1)?), opt_input(inputs, 2)?, residual];
    fn go<T: ConvFloat>(
        x: &ArrayD<T>,
        r: &[Option<&ArrayD<T>>],
        ctx: &OpCtx,
        act: Activation,
    ) -> OpResult<ArrayD<T>> {
        let Some(w) = r[0] else {
            bail!("Conv: W is missing")
        };
        match r[2] {
            None => T::conv(ctx, x, w, r[1], act),
            Some(res) => T::conv_residual(ctx, x, w, r[1], act, res),
        }
    }
    single(float_dispatch!(x, rest, go, ctx, act))
}

/// `act(conv + res)`, `res` broadcast as an Add node broadcasts it: the Conv, then one pass of
/// the sum and the activation, each rounded as the Add and activation nodes round.
fn conv_then_residual<T: ConvFloat>(
    ctx: &OpCtx,
    x: &ArrayD<T>,
    w: &ArrayD<T>,
    b: Option<&ArrayD<T>>,
    act: Activation,
    res: &ArrayD<T>,
) -> OpResult<ArrayD<T>> {
    let y = T::conv(ctx, x, w, b, Activation::None)?;
    let shape = crate::ops::broadcast::broadcast_shapes(&[y.shape(), res.shape()])?;
    let (Some(yb), Some(rb)) = (y.broadcast(shape.clone()), res.broadcast(shape)) else {
        bail!(
            "FusedConv residual of shape {:?} does not broadcast with the output {:?}",
            res.shape(),
            y.shape()
        )
    };
    let mut out = ndarray::Zip::from(&yb).and(&rb).map_collect(|&a, &r| a + r);
    if let Some(v) = out.as_slice_mut() {
        T::activate(v, act);
    }
    Ok(out)
}

/// The float types Conv computes in: f32 through the packed GEMM, f64 through the general path.
pub(super) trait ConvFloat: GemmFloat {
    fn conv(
        ctx: &OpCtx,
        x: &ArrayD<Self>,
        w: &ArrayD<Self>,
        b: Option<&ArrayD<Self>>,
        act: Activation,
    ) -> OpResult<ArrayD<Self>>;

    /// `act(conv + bias + res)`: FusedConv with a residual (see [`conv_then_residual`]).
    fn conv_residual(
        ctx: &OpCtx,
        x: &ArrayD<Self>,
        w: &ArrayD<Self>,
        b: Option<&ArrayD<Self>>,
        act: Activation,
        res: &ArrayD<Self>,
    ) -> OpResult<ArrayD<Self>> {
        conv_then_residual(ctx, x, w, b, act, res)
    }

    /// `act` on each value, with the formulas of the standalone activation kernels for this type.
    fn activate(v: &mut [Self], act: Activation);

    /// The taps of a depthwise convolution in the form this type's plane kernel reads, made once
    /// per convolution; `None` where [`direct_plane`] runs from the taps themselves.
    fn plane_taps(_g: &Geom, _taps: &[DirectTap]) -> Option<DwTaps> {
        None
    }

    /// `out = act(start + Σ w·x)` over one plane: [`direct_plane`] on this type, or the same sums
    /// by a kernel of its own (the same operations in the same order: the same bits). Every value
    /// of `out` is written.
    fn plane(
        task: &PlaneTask<Self>,
        start: Self,
        act: Activation,
        out: &mut [MaybeUninit<Self>],
        phases: &mut Vec<Self>,
    ) {
        plane_by_taps(task, start, act, out, phases)
    }
}

impl ConvFloat for f32 {
    fn conv(
        ctx: &OpCtx,
        x: &ArrayD<f32>,
        w: &ArrayD<f32>,
        b: Option<&ArrayD<f32>>,
        act: Activation,
    ) -> OpResult<ArrayD<f32>> {
        super::packed::conv_f32(ctx, x, w, b, act)
    }

    /// A residual of the output's own shape is added as each GEMM tile is stored (the same sums in
    /// the same order as the Add after the Conv); any other shape broadcasts after the Conv.
    fn conv_residual(
        ctx: &OpCtx,
        x: &ArrayD<f32>,
        w: &ArrayD<f32>,
        b: Option<&ArrayD<f32>>,
        act: Activation,
        res: &ArrayD<f32>,
    ) -> OpResult<ArrayD<f32>> {
        let sh = ConvShape::new(ctx, x.shape(), w.shape(), b)?;
        if res.shape() != sh.out_shape.as_slice() {
            return conv_then_residual(ctx, x, w, b, act, res);
        }
        let rd = contiguous(res);
        super::packed::conv_f32_residual(ctx, x, w, b, act, Some(&rd))
    }

    fn activate(v: &mut [f32], act: Activation) {
        act.apply(v, None);
    }

    /// The taps read linearly: output `(od, oh, j)` of a tap reads the plane (stride 1 along the
    /// columns) or the phases [`PhaseGrid`] lays out.
    fn plane_taps(g: &Geom, taps: &[DirectTap]) -> Option<DwTaps> {
        let [i0, i1, i2] = g.ins;
        let grid = PhaseGrid::of(g);
        if grid.is_none() && g.s[2] > 1 {
            // A 3-D plane strided along its columns: `direct_plane` from the taps themselves.
            return None;
        }
        let linear = taps
            .iter()
            .map(|t| match grid {
                // Row `oh·s₁ + off₁` is phase row `off₁ mod s₁`, index `oh + off₁ div s₁`; the
                // same for columns.
                Some(pg) => {
                    let (s1, s2) = (g.s[1] as i64, g.s[2] as i64);
                    let (pr, qr) = (t.off[1].rem_euclid(s1), t.off[1].div_euclid(s1));
                    let (pc, qc) = (t.off[2].rem_euclid(s2), t.off[2].div_euclid(s2));
                    let (rows, pw) = (pg.rows as i64, pg.width as i64);
                    DwTap {
                        k: t.k,
                        rows: t.rows,
                        cols: t.cols,
                        base: (((pr * s2 + pc) * rows + qr) * pw + qc) as isize,
                        step: [0, pw as isize],
                    }
                }
                None => {
                    // A row of the source is `i2` values; `i1` rows make a plane.
                    let (row, plane) = (i2 as i64, (i1 * i2) as i64);
                    DwTap {
                        k: t.k,
                        rows: t.rows,
                        cols: t.cols,
                        base: (t.off[0] * plane + t.off[1] * row + t.off[2]) as isize,
                        step: [
                            (g.s[0] as i64 * plane) as isize,
                            (g.s[1] as i64 * row) as isize,
                        ],
                    }
                }
            })
            .collect();
        let src_len = grid.map_or(i0 * i1 * i2, |pg| pg.len(g));
        Some(DwTaps::new(linear, g.outs, src_len, g.ksz()))
    }

    fn plane(
        task: &PlaneTask<f32>,
        start: f32,
        act: Activation,
        out: &mut [MaybeUninit<f32>],
        phases: &mut Vec<f32>,
    ) {
        match task.lin {
            Some(lin) => {
                let src = match PhaseGrid::of(task.g) {
                    Some(pg) => pg.split(task.g, task.x, phases),
                    None => task.x,
                };
                quorum_kernels::depthwise::plane(lin, src, task.w, start, act, out);
            }
            None => plane_by_taps(task, start, act, out, phases),
        }
    }
}

/// The source of an f32 depthwise plane strided along its columns, split into its `s₁ × s₂` stride
/// phases: phase `(p, q)` holds the values at rows `i·s₁ + p` and columns `j·s₂ + q`, as a grid of
/// `rows × width`. Each tap then reads a contiguous run per output row, and output rows follow one
/// another one phase row apart, so that planes whose phase rows are as wide as their output rows
/// run as one flat row in the kernel. Two-dimensional convolutions only (a 3-D one, or one not
/// strided along its columns, reads the plane itself).
#[derive(Debug, Clone, Copy)]
struct PhaseGrid {
    rows: usize,
    width: usize,
}

impl PhaseGrid {
    fn of(g: &Geom) -> Option<PhaseGrid> {
        (g.ins[0] == 1 && g.outs[0] == 1 && g.s[2] > 1).then(|| PhaseGrid {
            rows: g.ins[1].div_ceil(g.s[1]),
            width: g.ins[2].div_ceil(g.s[2]),
        })
    }

    /// The values of every phase.
    fn len(&self, g: &Geom) -> usize {
        g.s[1] * g.s[2] * self.rows * self.width
    }

    /// `x` split into `phases` (resized, and overwritten where a value lands; a slot none lands in
    /// is never read).
    fn split<'a>(&self, g: &Geom, x: &[f32], phases: &'a mut Vec<f32>) -> &'a [f32] {
        let (s1, s2, i2) = (g.s[1], g.s[2], g.ins[2]);
        phases.resize(self.len(g), 0.0);
        let plane = self.rows * self.width;
        for (r, row) in x.chunks_exact(i2).enumerate() {
            let at = ((r % s1) * s2 * self.rows + r / s1) * self.width;
            quorum_kernels::depthwise::split_columns(row, s2, &mut phases[at..], plane);
        }
        phases
    }
}

impl ConvFloat for f64 {
    fn conv(
        ctx: &OpCtx,
        x: &ArrayD<f64>,
        w: &ArrayD<f64>,
        b: Option<&ArrayD<f64>>,
        act: Activation,
    ) -> OpResult<ArrayD<f64>> {
        conv_general(ctx, x, w, b, act)
    }

    /// The f64 forms of the elementwise kernels (whose f64 `exp` is the library's).
    fn activate(v: &mut [f64], act: Activation) {
        let f: &dyn Fn(f64) -> f64 = match act {
            Activation::None => return,
            Activation::Relu => &|x| if x < 0.0 { 0.0 } else { x },
            Activation::Clip { lo, hi } => &move |x| {
                let x = if x < lo as f64 { lo as f64 } else { x };
                if x > hi as f64 { hi as f64 } else { x }
            },
            Activation::LeakyRelu { alpha } => &move |x| if x < 0.0 { x * alpha as f64 } else { x },
            Activation::Sigmoid => &sigmoid_f64,
            Activation::Silu => &|x| x * sigmoid_f64(x),
            Activation::HardSwish => &|x| x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
            // `run` refuses FakeQuant for any type but f32 (the pair's output is f32 whatever the
            // Conv's type); this arm is the f32 formula all the same.
            Activation::FakeQuant(q) => &move |x| q.apply(x as f32) as f64,
        };
        v.iter_mut().for_each(|x| *x = f(*x));
    }
}

/// The f64 Sigmoid kernel's formula (see `elementwise/unary.rs`).
fn sigmoid_f64(x: f64) -> f64 {
    let e = (-x.abs()).exp();
    let r = 1.0 / (1.0 + e);
    if x < 0.0 { e * r } else { r }
}

/// A Conv node's shapes, checked against each other and the attributes.
pub(super) struct ConvShape {
    pub n: usize,
    pub c: usize,
    pub m: usize,
    pub group: usize,
    pub g: Geom,
    pub out_shape: Vec<usize>,
}

impl ConvShape {
    pub fn new<T>(
        ctx: &OpCtx,
        xs: &[usize],
        ws: &[usize],
        b: Option<&ArrayD<T>>,
    ) -> OpResult<ConvShape> {
        if xs.len() < 3 || ws.len() != xs.len() {
            bail!("Conv needs X of rank >= 3 and W of the same rank, got {xs:?} and {ws:?}");
        }
        let group = ctx.attr_i("group", 1)?;
        if group < 1 {
            bail!("group must be >= 1, got {group}");
        }
        let group = group as usize;
        let (n, c, m) = (xs[0], xs[1], ws[0]);
        if ws[1].checked_mul(group) != Some(c) || m % group != 0 {
            bail!("Conv channels mismatch: X {xs:?}, W {ws:?}, group {group}");
        }
        check_bias(b, m)?;
        let g = conv_geom(ctx, &xs[2..], &ws[2..])?;
        let mut out_shape = vec![n, m];
        out_shape.extend_from_slice(&g.outs[3 - (xs.len() - 2)..]);
        ctx.check_alloc(&out_shape, std::mem::size_of::<T>())?;
        Ok(ConvShape {
            n,
            c,
            m,
            group,
            g,
            out_shape,
        })
    }

    /// Input channels per group.
    pub fn cg(&self) -> usize {
        self.c / self.group
    }

    /// Output channels per group.
    pub fn mg(&self) -> usize {
        self.m / self.group
    }

    /// One input channel per group (a channel multiplier `mg` allowed): the direct path.
    pub fn depthwise(&self) -> bool {
        self.cg() == 1 && self.group > 1
    }

    /// A 1×1 kernel with unit strides and no padding: the input planes are the GEMM's right operand.
    pub fn pointwise(&self) -> bool {
        let g = &self.g;
        g.ksz() == 1 && g.s == [1, 1, 1] && g.pb == [0, 0, 0] && g.outs == g.ins
    }
}

/// Fills one im2col row (`dst`, `out_sp` long) for channel plane `src` and kernel tap `kp`.
fn im2col_row<T: GemmFloat>(src: &[T], g: &Geom, kp: [usize; 3], dst: &mut [T]) {
    let [o0, o1, o2] = g.outs;
    let [_, i1, i2] = g.ins;
    let (h0, h1) = span(o0, g.s[0], g.off(0, kp[0]), g.ins[0]);
    let (r0, r1) = span(o1, g.s[1], g.off(1, kp[1]), i1);
    let (c0, c1) = span(o2, g.s[2], g.off(2, kp[2]), i2);
    let woff = g.off(2, kp[2]);
    if c0 >= c1 {
        dst.fill(T::zero());
        return;
    }
    for od in 0..o0 {
        let plane = &mut dst[od * o1 * o2..(od + 1) * o1 * o2];
        if od < h0 || od >= h1 {
            plane.fill(T::zero());
            continue;
        }
        let id = (od as i64 * g.s[0] as i64 + g.off(0, kp[0])) as usize;
        plane[..r0 * o2].fill(T::zero());
        plane[r1 * o2..].fill(T::zero());
        for oh in r0..r1 {
            let ih = (oh as i64 * g.s[1] as i64 + g.off(1, kp[1])) as usize;
            let srow = &src[(id * i1 + ih) * i2..(id * i1 + ih + 1) * i2];
            let drow = &mut plane[oh * o2..(oh + 1) * o2];
            drow[..c0].fill(T::zero());
            drow[c1..].fill(T::zero());
            if g.s[2] == 1 {
                let st = (c0 as i64 + woff) as usize;
                drow[c0..c1].copy_from_slice(&srow[st..st + (c1 - c0)]);
            } else {
                for ow in c0..c1 {
                    drow[ow] = srow[(ow as i64 * g.s[2] as i64 + woff) as usize];
                }
            }
        }
    }
}

/// im2col of `cg` channel planes into `col` (`[cg*ksz, out_sp]`).
fn im2col<T: GemmFloat>(x: &[T], g: &Geom, cg: usize, col: &mut [T], par: bool) {
    let (in_sp, out_sp, ksz) = (g.in_sp(), g.out_sp(), g.ksz());
    let f = |(row, dst): (usize, &mut [T])| {
        let c = row / ksz;
        im2col_row(&x[c * in_sp..(c + 1) * in_sp], g, g.kpos(row % ksz), dst);
    };
    if par && cg * ksz * out_sp >= PAR_MIN {
        col.par_chunks_mut(out_sp).enumerate().for_each(f);
    } else {
        col.chunks_mut(out_sp).enumerate().for_each(f);
    }
}

/// One tap of a direct convolution's kernel: its index in the filter, the output ranges it reaches
/// along each dim, and its input offsets. The same for every plane of a convolution.
pub(super) struct DirectTap {
    k: usize,
    rows: [(usize, usize); 2],
    cols: (usize, usize),
    off: [i64; 3],
}

/// The taps of `g`'s kernel that reach any output, in kernel order.
pub(super) fn direct_taps(g: &Geom) -> Vec<DirectTap> {
    let [o0, o1, o2] = g.outs;
    (0..g.ksz())
        .map(|k| {
            let kp = g.kpos(k);
            let off = [g.off(0, kp[0]), g.off(1, kp[1]), g.off(2, kp[2])];
            DirectTap {
                k,
                rows: [
                    span(o0, g.s[0], off[0], g.ins[0]),
                    span(o1, g.s[1], off[1], g.ins[1]),
                ],
                cols: span(o2, g.s[2], off[2], g.ins[2]),
                off,
            }
        })
        .filter(|t| t.cols.0 < t.cols.1)
        .collect()
}

/// One plane of a direct convolution: the input plane, its filter, and the convolution's taps
/// (from [`direct_taps`]) and geometry.
pub(super) struct PlaneTask<'a, T> {
    pub x: &'a [T],
    pub w: &'a [T],
    pub taps: &'a [DirectTap],
    pub g: &'a Geom,
    /// The taps in the form of the type's own plane kernel ([`ConvFloat::plane_taps`]).
    pub lin: Option<&'a DwTaps>,
}

/// The plane a plane kernel reads: `x` itself, or with a column stride its stride phases written
/// into `phases` (`phase p` holds columns `i·s + p` of every row), so that each tap reads a
/// contiguous run.
fn split_plane<'a, T: GemmFloat>(task: &PlaneTask<'a, T>, phases: &'a mut Vec<T>) -> &'a [T] {
    let (x, g) = (task.x, task.g);
    let (s2, i2) = (g.s[2], g.ins[2]);
    if s2 == 1 {
        return x;
    }
    let pw = i2.div_ceil(s2);
    let rows_total = x.len() / i2.max(1);
    // Same size for every plane of a convolution: resized once, then overwritten (a slot no
    // column lands in is never read).
    phases.resize(s2 * rows_total * pw, T::zero());
    for (r, row) in x.chunks_exact(i2).enumerate() {
        crate::ops::split_phases(row, s2, &mut phases[r * pw..], rows_total * pw);
    }
    phases
}

/// [`direct_plane`] from `start`, then the activation (`ConvFloat::plane`'s default).
fn plane_by_taps<T: ConvFloat>(
    task: &PlaneTask<T>,
    start: T,
    act: Activation,
    out: &mut [MaybeUninit<T>],
    phases: &mut Vec<T>,
) {
    for o in out.iter_mut() {
        o.write(start);
    }
    // SAFETY: every value of the plane was written just above.
    let out = unsafe { &mut *(out as *mut [MaybeUninit<T>] as *mut [T]) };
    direct_plane(task, out, phases);
    T::activate(out, act);
}

/// Direct convolution of one input plane with one filter (depthwise), added into `out`; `phases`
/// is scratch.
#[inline(always)]
pub(super) fn direct_plane<T: GemmFloat>(task: &PlaneTask<T>, out: &mut [T], phases: &mut Vec<T>) {
    let PlaneTask { x, w, taps, g, .. } = *task;
    let [o0, o1, o2] = g.outs;
    let [_, i1, i2] = g.ins;
    let s2 = g.s[2];
    let pw = i2.div_ceil(s2);
    let rows_total = x.len() / i2.max(1);
    let phases: &[T] = split_plane(task, phases);
    // One output row at a time, every tap in order: the row stays in L1 and each element sums
    // its taps in the same order as a tap-by-tap pass over the plane would (same bits).
    for od in 0..o0 {
        for oh in 0..o1 {
            let drow = &mut out[(od * o1 + oh) * o2..(od * o1 + oh + 1) * o2];
            for t in taps {
                let ([(h0, h1), (r0, r1)], (c0, c1)) = (t.rows, t.cols);
                if od < h0 || od >= h1 || oh < r0 || oh >= r1 {
                    continue;
                }
                let id = (od as i64 * g.s[0] as i64 + t.off[0]) as usize;
                let ih = (oh as i64 * g.s[1] as i64 + t.off[1]) as usize;
                let row = id * i1 + ih;
                let wv = w[t.k];
                // The first tap column, c0·s + off, is inside the row (`span` keeps exactly the
                // columns whose input lies in it).
                let st = (c0 as i64 * s2 as i64 + t.off[2]) as usize;
                let src = if s2 == 1 {
                    &x[row * i2 + st..][..c1 - c0]
                } else {
                    // Column st + j·s is phase st % s, index st / s + j.
                    &phases[((st % s2) * rows_total + row) * pw + st / s2..][..c1 - c0]
                };
                for (d, &v) in drow[c0..c1].iter_mut().zip(src) {
                    *d = *d + wv * v;
                }
            }
        }
    }
}

/// Depthwise convolution (one input channel per group, output channel `oc` reading input channel
/// `oc / mg`) by direct loops, one output plane per task: `y = act(bias + Σ w·x)`.
pub(super) fn depthwise<T: ConvFloat>(
    sh: &ConvShape,
    xd: &[T],
    wd: &[T],
    bias: Option<&[T]>,
    act: Activation,
) -> Vec<T> {
    let (g, m, mg) = (&sh.g, sh.m, sh.mg());
    let (in_sp, out_sp, ksz) = (g.in_sp(), g.out_sp(), g.ksz());
    let total = sh.n * m * out_sp;
    let mut y: Vec<T> = crate::arena::vec(total);
    if total == 0 {
        return y;
    }
    let taps = direct_taps(g);
    let lin = T::plane_taps(g, &taps);
    let f = |phases: &mut Vec<T>, (plane, out): (usize, &mut [MaybeUninit<T>])| {
        let (ni, oc) = (plane / m, plane % m);
        let start = bias.map_or(T::zero(), |b| b[oc]);
        let ic = ni * sh.c + oc / mg;
        let task = PlaneTask {
            x: &xd[ic * in_sp..(ic + 1) * in_sp],
            w: &wd[oc * ksz..(oc + 1) * ksz],
            taps: &taps,
            g,
            lin: lin.as_ref(),
        };
        T::plane(&task, start, act, out, phases);
    };
    // The planes are written once, each starting from its bias (never zeroed first).
    let planes = &mut y.spare_capacity_mut()[..total];
    if total.saturating_mul(ksz) >= PAR_MIN {
        planes
            .par_chunks_mut(out_sp)
            .enumerate()
            .for_each_init(Vec::new, f);
    } else {
        let mut phases = Vec::new();
        planes
            .chunks_mut(out_sp)
            .enumerate()
            .for_each(|p| f(&mut phases, p));
    }
    // SAFETY: the planes cover all `total` values, each written by `f`.
    unsafe { y.set_len(total) };
    y
}

/// What [`pool_f32`] takes of each window.
pub(crate) enum PoolOf<'a> {
    /// The max by MaxPool's rule (`quorum_kernels::depthwise::plane_max`: the first NaN of a
    /// window if any, else its first maximal tap).
    Max,
    /// The sum of the taps in window order from zero (the depthwise kernel with weights of one:
    /// each product exact), divided by each output's count (`0` gives NaN): AveragePool.
    Mean { counts: &'a [f32] },
}

/// MaxPool's or AveragePool's values over f32 planes by the depthwise kernel's window taps, `g`
/// giving the window as a convolution's geometry; `None` where those taps do not apply (a 3-D
/// window strided along its columns).
pub(crate) fn pool_f32(g: &Geom, xd: &[f32], planes: usize, of: PoolOf) -> Option<Vec<f32>> {
    let (in_sp, out_sp) = (g.in_sp(), g.out_sp());
    let taps = direct_taps(g);
    let lin = <f32 as ConvFloat>::plane_taps(g, &taps)?;
    let grid = PhaseGrid::of(g);
    let ones = vec![1.0f32; g.ksz()];
    let total = planes * out_sp;
    let mut y: Vec<f32> = crate::arena::vec(total);
    if total == 0 {
        return Some(y);
    }
    let f = |phases: &mut Vec<f32>, (p, out): (usize, &mut [MaybeUninit<f32>])| {
        let x = &xd[p * in_sp..(p + 1) * in_sp];
        let src = match grid {
            Some(pg) => pg.split(g, x, phases),
            None => x,
        };
        match of {
            PoolOf::Max => quorum_kernels::depthwise::plane_max(&lin, src, out),
            PoolOf::Mean { counts } => {
                quorum_kernels::depthwise::plane(&lin, src, &ones, 0.0, Activation::None, out);
                // SAFETY: `plane` wrote every value of the plane.
                let out = unsafe { &mut *(out as *mut [MaybeUninit<f32>] as *mut [f32]) };
                for (v, &c) in out.iter_mut().zip(counts) {
                    *v = if c == 0.0 { f32::NAN } else { *v / c };
                }
            }
        }
    };
    let outs = &mut y.spare_capacity_mut()[..total];
    if total.saturating_mul(g.ksz()) >= PAR_MIN {
        outs.par_chunks_mut(out_sp)
            .enumerate()
            .for_each_init(Vec::new, f);
    } else {
        let mut phases = Vec::new();
        outs.chunks_mut(out_sp)
            .enumerate()
            .for_each(|p| f(&mut phases, p));
    }
    // SAFETY: each plane's kernel writes every value of it, and the planes cover `total`.
    unsafe { y.set_len(total) };
    Some(y)
}

/// Conv by im2col + GEMM (the `gemm` crate) per group, then the activation: every float type, and
/// the reference for the f32 fast path. Depthwise convolutions take the direct path.
pub(super) fn conv_general<T: ConvFloat>(
    ctx: &OpCtx,
    x: &ArrayD<T>,
    w: &ArrayD<T>,
    b: Option<&ArrayD<T>>,
    act: Activation,
) -> OpResult<ArrayD<T>> {
    let sh = ConvShape::new(ctx, x.shape(), w.shape(), b)?;
    let (n, c, m, group) = (sh.n, sh.c, sh.m, sh.group);
    let (cg, mg, g) = (sh.cg(), sh.mg(), &sh.g);
    let (in_sp, out_sp, ksz) = (g.in_sp(), g.out_sp(), g.ksz());
    let kdim = cg * ksz;
    let xd = contiguous(x);
    let wd = contiguous(w);
    let bd = b.map(contiguous);
    let bias = bd.as_deref();
    if sh.depthwise() {
        let y = depthwise(&sh, &xd, &wd, bias, act);
        return Ok(ArrayD::from_shape_vec(IxDyn(&sh.out_shape), y)?);
    }
    let mut y = vec![T::zero(); n * m * out_sp];
    if y.is_empty() {
        return Ok(ArrayD::from_shape_vec(IxDyn(&sh.out_shape), y)?);
    }
    let pointwise = sh.pointwise();
    if !pointwise && cg > 1 {
        ctx.check_alloc(&[kdim, out_sp], std::mem::size_of::<T>())?;
    }
    let par_groups = group > 1 && group >= 2 * rayon::current_num_threads();
    let mut col: Vec<T> = Vec::new();
    for ni in 0..n {
        let xn = &xd[ni * c * in_sp..(ni + 1) * c * in_sp];
        let yn = &mut y[ni * m * out_sp..(ni + 1) * m * out_sp];
        let run_group = |gi: usize, yg: &mut [T], col: &mut Vec<T>, par: bool| {
            let xg = &xn[gi * cg * in_sp..(gi + 1) * cg * in_sp];
            let wg = &wd[gi * mg * kdim..(gi + 1) * mg * kdim];
            fill_bias(yg, bias, gi * mg, out_sp);
            let bmat: &[T] = if pointwise {
                xg
            } else {
                col.resize(kdim * out_sp, T::zero());
                im2col(xg, g, cg, col, par);
                col
            };
            gemm_into(
                mg,
                out_sp,
                kdim,
                wg,
                kdim,
                1,
                bmat,
                out_sp,
                1,
                yg,
                out_sp,
                T::one(),
                true,
                par,
            );
            T::activate(yg, act);
        };
        if par_groups {
            yn.par_chunks_mut(mg * out_sp)
                .enumerate()
                .for_each(|(gi, yg)| {
                    let mut col = Vec::new();
                    run_group(gi, yg, &mut col, false)
                });
        } else {
            for (gi, yg) in yn.chunks_mut(mg * out_sp).enumerate() {
                run_group(gi, yg, &mut col, true);
            }
        }
    }
    Ok(ArrayD::from_shape_vec(IxDyn(&sh.out_shape), y)?)
}
