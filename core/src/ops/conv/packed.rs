//! The f32 Conv path: per group, `Y = act(W·B + bias)` by the packed GEMM of `quorum-kernels`, with
//! `W` packed once per weight initializer (`conv/weights.rs`) and `B` read by the GEMM's packing
//! straight from the input: a 1×1 convolution's input planes are `B` as they lie, and any other
//! kernel's patches are gathered one cache block at a time, so no im2col matrix is written (or, for
//! a stride-1 convolution, read as shifted rows of a padded copy of the input: `conv/shifted.rs`). The bias
//! and the activation are applied as each tile is stored; the output is written once, never zeroed
//! first. Depthwise convolutions take the direct path shared with the general one.
//!
//! The paths are tried in this order, each giving the GEMM path's bits (tested):
//! - a pointwise convolution of one group over one-pixel inputs (a squeeze-and-excitation block's
//!   two, `[N, C, 1, 1]`): the product `X·Wᵀ` on the GEMM's one-row tiles, `Wᵀ` packed once (the
//!   same sums as `W·X`, whose 32-column tiles would each compute one column);
//! - on AVX-512, a 2-D or 1-D convolution with a sum of at most 128 steps (a network's first layer:
//!   3 channels of 3×3), not pointwise unless to at most 16 output channels (where the GEMM would
//!   pack each input value for at most 16 multiply-adds), whose output rows fill three quarters of
//!   their 16-pixel vectors: the pixel-vector kernel (`pixels_plan`, `quorum_kernels::conv_pixels`),
//!   with Relu, Clip, LeakyRelu, Sigmoid and SiLU in registers and nothing packed or stored twice.
//!   The stems alone went from 0.44 to 0.22 ms (mobilenet_v2) and from 0.56 to 0.33 ms (squeezenet)
//!   on the AMD EPYC of `reports/cpu/`;
//! - on AVX-512, a 2-D or 1-D convolution of at least 128 steps whose output channels fill their
//!   32-channel panels to 80%, not pointwise unless it sums over at least 256 steps on planes that
//!   would leave a tenth of the GEMM's 32-column panels unused (7², 13², 14²; on the AMD EPYC the
//!   direct kernel ran those 6–45% faster, elsewhere the GEMM reads the planes as they lie): the
//!   direct kernel (`conv/broadcast.rs`);
//! - otherwise the packed GEMM, `B` read as shifted rows of a padded copy (`conv/shifted.rs`) where
//!   that costs less than the patch gather, else gathered from the patches (on AVX-512 by a plan of
//!   masked vector loads made once per tap and block of columns, `kernels/src/pack_plan.rs`).
use ndarray::{ArrayD, IxDyn};
use quorum_kernels::{
    Activation, BSource, ConvPatches, Epilogue, Isa, PackedA, PackedB, PixelConv, Threads,
    conv_pixels, sgemm_uninit,
};
use rayon::prelude::*;

use super::broadcast;
use super::contiguous;
use super::forward::{ConvShape, depthwise};
use super::shifted::{self, Shifted};
use super::weights::{PackedWeights, packed_constant, packed_weights};
use crate::error::OpResult;
use crate::ops::OpCtx;

pub(super) fn conv_f32(
    ctx: &OpCtx,
    x: &ArrayD<f32>,
    w: &ArrayD<f32>,
    b: Option<&ArrayD<f32>>,
    act: Activation,
) -> OpResult<ArrayD<f32>> {
    conv_f32_residual(ctx, x, w, b, act, None)
}

/// [`conv_f32`] with a residual `r` of the output's shape added after the bias and before the
/// activation (FusedConv's fourth input): in the GEMM's epilogue as each tile is stored, or, for
/// depthwise convolutions, in one pass after them.
pub(super) fn conv_f32_residual(
    ctx: &OpCtx,
    x: &ArrayD<f32>,
    w: &ArrayD<f32>,
    b: Option<&ArrayD<f32>>,
    act: Activation,
    r: Option<&[f32]>,
) -> OpResult<ArrayD<f32>> {
    let sh = ConvShape::new(ctx, x.shape(), w.shape(), b)?;
    let xd = contiguous(x);
    let bd = b.map(contiguous);
    let bias = bd.as_deref();
    if sh.depthwise() {
        let y = match r {
            None => depthwise(&sh, &xd, &contiguous(w), bias, act),
            Some(r) => {
                let mut y = depthwise(&sh, &xd, &contiguous(w), bias, Activation::None);
                act.apply_add(&mut y, None, r);
                y
            }
        };
        return Ok(ArrayD::from_shape_vec(IxDyn(&sh.out_shape), y)?);
    }
    if r.is_none() && one_pixel(&sh) {
        let isa = Isa::detected();
        let wt = packed_constant(ctx, 1, "conv-one-pixel", isa, 1, w.shape(), || {
            pack_one_pixel(isa, &sh, &contiguous(w))
        });
        let y = conv_one_pixel(&sh, &xd, &wt, bias, act, Threads::Auto);
        return Ok(ArrayD::from_shape_vec(IxDyn(&sh.out_shape), y)?);
    }
    if let Some(pixels) = pixels_plan(&sh) {
        let weights = packed_weights(ctx, 1, Isa::Avx512, sh.group, w.shape(), || {
            pack_weights(Isa::Avx512, &sh, &contiguous(w))
        });
        let y = conv_pixels_on(&sh, &xd, &weights, (bias, act, r), Threads::Auto, pixels);
        return Ok(ArrayD::from_shape_vec(IxDyn(&sh.out_shape), y)?);
    }
    if let Some(direct) = broadcast::plan(&sh) {
        let weights = broadcast::weights(ctx, &sh, w);
        let y = direct.run(&sh, &xd, &weights, (bias, act, r), Threads::Auto);
        return Ok(ArrayD::from_shape_vec(IxDyn(&sh.out_shape), y)?);
    }
    let isa = Isa::detected();
    let weights = packed_weights(ctx, 1, isa, sh.group, w.shape(), || {
        pack_weights(isa, &sh, &contiguous(w))
    });
    let y = conv_packed_residual(&sh, &xd, &weights, bias, act, r, Threads::Auto);
    Ok(ArrayD::from_shape_vec(IxDyn(&sh.out_shape), y)?)
}

/// [`conv_f32_residual`] of `x · s`, `s` one scale per input channel (`conv/scale.rs`), with each
/// input row multiplied by its scale as the GEMM packs it: where the convolution would take the
/// GEMM over its input planes as they lie (a 1×1 convolution of one group that neither the direct
/// nor the shifted path takes) or the pixel path (at most 16 output channels), and `r` is absent or
/// of the output's shape. `None` elsewhere: the caller multiplies first. For the pixel path's
/// convolutions the scaled GEMM is kept over the Mul and the pixel path: on efficientnet_b0's
/// 32 → 16 at 112² its node took 0.123–0.129 ms, where the Mul alone had taken 0.067–0.071 and the
/// pixel path takes mobilenet_v2's same-shaped node in 0.085.
pub(super) fn conv_f32_scaled(
    ctx: &OpCtx,
    x: &ArrayD<f32>,
    s: &[f32],
    w: &ArrayD<f32>,
    b: Option<&ArrayD<f32>>,
    act: Activation,
    r: Option<&ArrayD<f32>>,
) -> OpResult<Option<ArrayD<f32>>> {
    let sh = ConvShape::new(ctx, x.shape(), w.shape(), b)?;
    let dense = sh.pointwise()
        && sh.group == 1
        && s.len() == sh.c
        && r.is_none_or(|r| r.shape() == sh.out_shape.as_slice())
        && !(r.is_none() && one_pixel(&sh))
        && broadcast::plan(&sh).is_none()
        && shifted::plan(&sh).is_none();
    if !dense {
        return Ok(None);
    }
    let (xd, bd, rd) = (contiguous(x), b.map(contiguous), r.map(contiguous));
    let isa = Isa::detected();
    let weights = packed_weights(ctx, 1, isa, sh.group, w.shape(), || {
        pack_weights(isa, &sh, &contiguous(w))
    });
    let (in_sp, out_sp) = (sh.g.in_sp(), sh.g.out_sp());
    let epi = (bd.as_deref(), act, rd.as_deref());
    // SAFETY: sgemm_uninit writes each group's output whole.
    let y = unsafe {
        per_group(&sh, &xd, epi, Threads::Auto, |gi, xg, epi, yg, threads| {
            let src = BSource::ScaledDense {
                data: xg,
                ld: in_sp,
                scale: s,
            };
            sgemm_uninit(&weights.groups[gi], &src, out_sp, yg, out_sp, epi, threads);
        })
    };
    Ok(Some(ArrayD::from_shape_vec(IxDyn(&sh.out_shape), y)?))
}

/// The deepest sum [`pixels_plan`] takes: each panel of 8 channels reads its input values where they
/// lie, one stream per step, where the GEMM packs them once. Pointwise convolutions with few output
/// channels (which would read the input in place) were measured both ways on mobilenet_v2: 144 → 24
/// at 56² took 0.19–0.21 ms by the GEMM and 0.25–0.27 by this path, both threads each; 32 → 16 at
/// 112² 0.17–0.20 against 0.21–0.24 with the plane as one row on one thread (as rows of the plane,
/// split across threads, it is faster: [`PIXELS_POINTWISE_MAX_CHANNELS`]).
const PIXELS_MAX_DEPTH: usize = 128;

/// The most output channels (per group) of a pointwise convolution that [`pixels_plan`] takes: two
/// panels of 8, so that the input is read twice. The GEMM packs every input value for at most 16
/// multiply-adds there, and the packing is most of its time. Node minima over four alternating
/// runs, AMD EPYC, two threads: mobilenet_v2's 32 → 16 at 112² 0.143 → 0.085 ms, squeezenet's
/// squeezes 96 → 16 and 128 → 16 at 55² 0.084 → 0.055 and 0.154 → 0.095. At 24 channels
/// (mobilenet_v2's 96 → 24 at 56²) the model's node was no faster (0.116 → 0.120).
const PIXELS_POINTWISE_MAX_CHANNELS: usize = 16;

/// Where a convolution takes `quorum_kernels::conv_pixels` (its input's geometry, to which each
/// group's planes are added): AVX-512 (the GEMM's own choice, so that `QUORUM_CPU_ISA` caps it too),
/// 2-D or 1-D, not pointwise unless to at most [`PIXELS_POINTWISE_MAX_CHANNELS`], no negative pads,
/// a short sum ([`PixelConv::available`]: a network's
/// first layer, 3 channels of 3×3), and output rows that fill at least three quarters of the
/// 16-pixel vectors that the tiles store (a 7-wide row would leave more than half of each unused).
pub(super) fn pixels_plan(sh: &ConvShape) -> Option<PixelConv<'static>> {
    let g = &sh.g;
    let [o0, ho, wo] = g.outs;
    let flat = g.ins[0] == 1 && g.k[0] == 1 && o0 == 1 && g.pb[0] == 0;
    let depth = sh.cg() * g.ksz();
    if Isa::detected() != Isa::Avx512
        || ho * wo == 0
        || !flat
        || (sh.pointwise() && sh.mg() > PIXELS_POINTWISE_MAX_CHANNELS)
        || g.pb.iter().any(|&p| p < 0)
        || depth > PIXELS_MAX_DEPTH
        || !PixelConv::available(depth, g.s[2])
        || 4 * wo < 3 * wo.div_ceil(16) * 16
    {
        return None;
    }
    Some(PixelConv {
        x: &[],
        channels: sh.cg(),
        ins: [g.ins[1], g.ins[2]],
        kernel: [g.k[1], g.k[2]],
        strides: [g.s[1], g.s[2]],
        dilations: [g.d[1], g.d[2]],
        pads: [g.pb[1] as usize, g.pb[2] as usize],
        outs: [ho, wo],
    })
}

/// The convolution of `xd` (`[N, C, ins...]`) by `quorum_kernels::conv_pixels`, group by group, with
/// `geom` from [`pixels_plan`] and the weights as the GEMM path packs them (for AVX-512): the bits of
/// the GEMM path.
pub(super) fn conv_pixels_on(
    sh: &ConvShape,
    xd: &[f32],
    weights: &PackedWeights,
    epi: (Option<&[f32]>, Activation, Option<&[f32]>),
    threads: Threads,
    geom: PixelConv,
) -> Vec<f32> {
    // SAFETY: conv_pixels writes each group's output whole.
    unsafe {
        per_group(sh, xd, epi, threads, |gi, xg, epi, yg, threads| {
            let g = PixelConv { x: xg, ..geom };
            conv_pixels(&weights.groups[gi], &g, yg, epi, threads);
        })
    }
}

/// A pointwise convolution of one group over inputs of one pixel (`[N, C, 1, 1]`: a
/// squeeze-and-excitation block's two convolutions, after its global average pool). As the GEMM
/// `W·X` it is M rows by N columns, N of them one: each tile of 32 columns computed one, and
/// efficientnet_b0's 32 such convolutions took 0.71 ms a run. As `X·Wᵀ` it is N rows by M columns,
/// on the tiles that compute one row (see [`conv_one_pixel`]).
fn one_pixel(sh: &ConvShape) -> bool {
    sh.group == 1 && sh.pointwise() && sh.g.outs == [1, 1, 1]
}

/// `Wᵀ` (`[C, M]`) packed as the GEMM's right operand, for [`conv_one_pixel`].
pub(super) fn pack_one_pixel(isa: Isa, sh: &ConvShape, wd: &[f32]) -> PackedB {
    PackedB::new(isa, sh.c, sh.m, wd, 1, sh.c)
}

/// [`one_pixel`]'s convolution, `act(X·Wᵀ + bias)` with the bias per column: each output is the
/// sum of the same products in the same order and blocks as on the `W·X` path (a multiply-add
/// does not care which operand is which), then the same bias and activation, so the bits are
/// that path's (tested).
pub(super) fn conv_one_pixel(
    sh: &ConvShape,
    xd: &[f32],
    wt: &PackedB,
    bias: Option<&[f32]>,
    act: Activation,
    threads: Threads,
) -> Vec<f32> {
    let (n, c, m) = (sh.n, sh.c, sh.m);
    let mut y = crate::arena::vec(n * m);
    let epi = Epilogue {
        bias: None,
        act,
        residual: None,
        col_bias: bias,
    };
    let xa = PackedA::new(wt.isa(), n, c, xd, c);
    sgemm_uninit(
        &xa,
        &BSource::Packed(wt),
        m,
        &mut y.spare_capacity_mut()[..n * m],
        m,
        &epi,
        threads,
    );
    // SAFETY: sgemm_uninit wrote every element of the n×m output (none when n or m is 0).
    unsafe { y.set_len(n * m) };
    y
}

/// `W` (`[M, C/group, k...]`, contiguous) packed per group for `isa`.
pub(super) fn pack_weights(isa: Isa, sh: &ConvShape, wd: &[f32]) -> PackedWeights {
    let (mg, kdim) = (sh.mg(), sh.cg() * sh.g.ksz());
    PackedWeights {
        groups: (0..sh.group)
            .map(|gi| {
                PackedA::new(
                    isa,
                    mg,
                    kdim,
                    &wd[gi * mg * kdim..(gi + 1) * mg * kdim],
                    kdim,
                )
            })
            .collect(),
    }
}

/// The convolution of `xd` (`[N, C, ins...]`) by packed weights, `act(conv + bias)`. Groups run in
/// parallel when there are at least twice as many as threads (each GEMM then serial), otherwise one
/// after the other with each GEMM split across threads above its work threshold.
#[cfg(test)]
pub(super) fn conv_packed(
    sh: &ConvShape,
    xd: &[f32],
    weights: &PackedWeights,
    bias: Option<&[f32]>,
    act: Activation,
    threads: Threads,
) -> Vec<f32> {
    conv_packed_residual(sh, xd, weights, bias, act, None, threads)
}

/// [`conv_packed`] with a residual laid out like the output (see [`conv_f32_residual`]).
pub(super) fn conv_packed_residual(
    sh: &ConvShape,
    xd: &[f32],
    weights: &PackedWeights,
    bias: Option<&[f32]>,
    act: Activation,
    residual: Option<&[f32]>,
    threads: Threads,
) -> Vec<f32> {
    let shifted = shifted::plan(sh);
    conv_packed_on(
        sh,
        xd,
        weights,
        (bias, act, residual),
        threads,
        shifted.as_ref(),
    )
}

/// [`conv_packed_residual`] with `B` read as shifted rows of the padded input where `shifted`
/// is given (see `conv/shifted.rs`), by the patch gather otherwise: the same bits either way.
pub(super) fn conv_packed_on(
    sh: &ConvShape,
    xd: &[f32],
    weights: &PackedWeights,
    (bias, act, residual): (Option<&[f32]>, Activation, Option<&[f32]>),
    threads: Threads,
    shifted: Option<&Shifted>,
) -> Vec<f32> {
    let (cg, g) = (sh.cg(), &sh.g);
    let (in_sp, out_sp) = (g.in_sp(), g.out_sp());
    let pointwise = sh.pointwise();
    // SAFETY: each group's output is written whole by the shifted path or sgemm_uninit.
    unsafe {
        per_group(
            sh,
            xd,
            (bias, act, residual),
            threads,
            |gi, xg, epi, yg, threads| {
                if let Some(plan) = shifted {
                    return plan.run(xg, cg, g, &weights.groups[gi], epi, yg, threads);
                }
                let src = if pointwise {
                    BSource::Dense {
                        data: xg,
                        ld: in_sp,
                    }
                } else {
                    BSource::Conv(ConvPatches {
                        x: xg,
                        channels: cg,
                        ins: g.ins,
                        kernel: g.k,
                        strides: g.s,
                        dilations: g.d,
                        pads: g.pb,
                        outs: g.outs,
                    })
                };
                quorum_kernels::sgemm_uninit(
                    &weights.groups[gi],
                    &src,
                    out_sp,
                    yg,
                    out_sp,
                    epi,
                    threads,
                );
            },
        )
    }
}

/// The output of `sh` over `xd` (`[N, C, ins...]`), each (batch, group) computed by
/// `conv(group, its input planes, its epilogue, its output planes, threads)` with its slices of the
/// bias and residual. Groups run in parallel when there are at least twice as many as threads (each
/// serial), otherwise one after the other with `threads`.
///
/// # Safety
/// `conv` writes every value of the output it is given: the result is read as initialised.
pub(super) unsafe fn per_group(
    sh: &ConvShape,
    xd: &[f32],
    (bias, act, residual): (Option<&[f32]>, Activation, Option<&[f32]>),
    threads: Threads,
    conv: impl Fn(usize, &[f32], &Epilogue, &mut [std::mem::MaybeUninit<f32>], Threads) + Sync,
) -> Vec<f32> {
    let (n, c, m, group) = (sh.n, sh.c, sh.m, sh.group);
    let (cg, mg) = (sh.cg(), sh.mg());
    let (in_sp, out_sp) = (sh.g.in_sp(), sh.g.out_sp());
    let total = n * m * out_sp;
    let mut y: Vec<f32> = crate::arena::vec(total);
    if total == 0 {
        return y;
    }
    let par_groups = group > 1 && group >= 2 * rayon::current_num_threads();
    let out = &mut y.spare_capacity_mut()[..total];
    let chunk = mg * out_sp;
    let run = |i: usize, yg: &mut [std::mem::MaybeUninit<f32>], threads: Threads| {
        let (ni, gi) = (i / group, i % group);
        let at = i * chunk;
        let xg = &xd[(ni * c + gi * cg) * in_sp..(ni * c + (gi + 1) * cg) * in_sp];
        let epi = Epilogue {
            bias: bias.map(|b| &b[gi * mg..(gi + 1) * mg]),
            act,
            residual: residual.map(|r| &r[at..at + chunk]),
            col_bias: None,
        };
        conv(gi, xg, &epi, yg, threads);
    };
    if par_groups && threads != Threads::Serial {
        out.par_chunks_mut(chunk)
            .enumerate()
            .for_each(|(i, yg)| run(i, yg, Threads::Serial));
    } else {
        for (i, yg) in out.chunks_mut(chunk).enumerate() {
            run(i, yg, threads);
        }
    }
    // SAFETY: the chunks cover `out` (n·group chunks of mg·out_sp values), and `conv` writes every
    // element of its output (the caller's contract).
    unsafe { y.set_len(total) };
    y
}
