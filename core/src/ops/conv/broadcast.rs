//! The f32 path of 2-D (and 1-D) convolutions on AVX-512: `quorum_kernels::conv_direct`, output
//! pixels broadcast against vectors of 32 output channels' weights, read straight from the input
//! (a zero-padded copy where the convolution pads). No patch is packed, which the GEMM path does
//! for every value of `B`; the sums are the GEMM's, in its order and blocking, so the output has
//! the bits of the GEMM path (tested against it).
//!
//! Taken (`plan`) on AVX-512 for 2-D and 1-D convolutions of column stride 1 or 2 that sum over at
//! least 128 steps and fill their 32-channel panels to 80%, and pointwise ones only over sums of at
//! least 256 steps on planes that would leave a tenth of the GEMM's 32-column panels unused (7²,
//! 13², 14²). The padded copy (`conv/shifted.rs`'s `pad_planes`) is one zero fill with the rows
//! copied over it, planes split across the threads when large, its buffer kept per thread between
//! calls.
use quorum_kernels::{DirectConv, Isa, PackedB, Threads, conv_direct};

use super::forward::ConvShape;
use super::shifted::pad_planes;
use crate::ops::OpCtx;

/// Output channels per register tile of the direct kernel.
const PANEL: usize = 32;

/// The grid a convolution is read from: its input (`padded == false`, every read inside it) or a
/// padded copy of `rows × cols` planes.
#[derive(Debug)]
pub(super) struct Broadcast {
    rows: usize,
    cols: usize,
    padded: bool,
}

/// `Wᵀ` packed per group as 32-wide panels of output channels.
#[derive(Debug)]
pub(super) struct BroadcastWeights {
    groups: Vec<PackedB>,
}

/// Steps of the sum below which the GEMM keeps a convolution: each tile of the direct kernel ends
/// in a transposition of its 32 channels × 14 pixels into the output's planes, which a short sum
/// does not pay for (measured with `kernels/examples/gemm_rate.rs` when that was a gather per
/// channel, about 400 cycles a tile; register transposes since stop 33, not measured again here).
const MIN_DEPTH: usize = 128;

/// A pointwise convolution takes the direct path where the GEMM would leave at least this share
/// (percent) of its 32-column panels' lanes unused: planes of 7² (49 columns in 64, 23%) and 14²
/// (196 in 224, 12.5%), and squeezenet's 13² (12%), not 28² (2%) or 56² (none). Elsewhere its
/// input planes are the GEMM's `B` as they lie, copied at memory speed, and the GEMM ran
/// mobilenet_v2's and efficientnet_b0's 1×1 convolutions 1–7% faster than the direct kernel on the
/// Xeon of stop 31. On the AMD EPYC of stop 32 (`kernels/examples/gemm_rate.rs`, two threads):
/// 1280×49×320 168.7 → 200.1 GFLOP/s, 320×49×960 160 → 199, 1000×169×512 197 → 210; in the
/// models, mobilenet_v2's 960 → 320 at 7² 0.267 → 0.212 ms and resnet50's last stage's 1×1
/// convolutions 11–19% faster.
const POINTWISE_MIN_WASTE: usize = 10;

/// The shortest sum of a pointwise convolution that [`POINTWISE_MIN_WASTE`] sends to the direct
/// path. The gains above were all over 320 input channels or more; shufflenet's grouped 136 → 136
/// at 7² (four groups, run in parallel) went 0.06–0.07 → 0.08–0.09 ms on the direct kernel.
const POINTWISE_MIN_DEPTH: usize = 256;

/// The grid of `sh` where the direct path runs: 2-D or 1-D (no depth), column stride 1 or 2 on
/// AVX-512, no negative pads; output channels (per group) that fill their panels to at least 80%
/// (16 channels would leave half of every multiply-add unused); a sum of at least [`MIN_DEPTH`]
/// steps; and not pointwise, unless the GEMM's column panels would waste
/// [`POINTWISE_MIN_WASTE`]% of their lanes over a sum of at least [`POINTWISE_MIN_DEPTH`] steps.
pub(super) fn plan(sh: &ConvShape) -> Option<Broadcast> {
    let g = &sh.g;
    let [o0, ho, wo] = g.outs;
    let flat = g.ins[0] == 1 && g.k[0] == 1 && o0 == 1 && g.pb[0] == 0;
    let mg = sh.mg();
    let full = mg > 0 && mg.div_ceil(PANEL) * PANEL * 4 <= mg * 5;
    let deep = sh.cg() * g.ksz() >= MIN_DEPTH;
    let n = ho * wo;
    let cols = n.div_ceil(PANEL) * PANEL;
    let gemm_wastes = (cols - n) * 100 >= POINTWISE_MIN_WASTE * cols;
    let pointwise_ok = !sh.pointwise() || (gemm_wastes && sh.cg() >= POINTWISE_MIN_DEPTH);
    if !flat || !full || !deep || !pointwise_ok || n == 0 || g.pb.iter().any(|&p| p < 0) {
        return None;
    }
    if !DirectConv::available([g.s[1], g.s[2]]) {
        return None;
    }
    let reach = |i: usize| (g.outs[i] - 1) * g.s[i] + (g.k[i] - 1) * g.d[i] + 1;
    // A copy wherever a read falls outside the input: pads at the beginning, or at the end only
    // (TensorFlow's SAME at stride 2 writes pads [0, 0, 1, 1]), which only the reach shows.
    let padded = g.pb != [0, 0, 0] || reach(1) > g.ins[1] || reach(2) > g.ins[2];
    let (rows, cols) = if padded {
        (reach(1), reach(2))
    } else {
        (g.ins[1], g.ins[2])
    };
    Some(Broadcast { rows, cols, padded })
}

/// `W` (`[M, C/group, k...]`, contiguous) as the direct kernel reads it, per group.
pub(super) fn pack_weights(sh: &ConvShape, wd: &[f32]) -> BroadcastWeights {
    let (mg, kdim) = (sh.mg(), sh.cg() * sh.g.ksz());
    BroadcastWeights {
        groups: (0..sh.group)
            .map(|gi| {
                let w = &wd[gi * mg * kdim..(gi + 1) * mg * kdim];
                PackedB::new(Isa::Avx512, kdim, mg, w, 1, kdim)
            })
            .collect(),
    }
}

/// The packed weights of input 1, cached per initializer.
pub(super) fn weights(
    ctx: &OpCtx,
    sh: &ConvShape,
    w: &ndarray::ArrayD<f32>,
) -> std::sync::Arc<BroadcastWeights> {
    super::weights::packed_constant(
        ctx,
        1,
        "conv-broadcast",
        Isa::Avx512,
        sh.group,
        w.shape(),
        || pack_weights(sh, &super::contiguous(w)),
    )
}

thread_local! {
    /// The padded input, kept between calls by the thread that runs the convolution.
    static PADDED: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

impl Broadcast {
    /// The convolution of `xd` (`[N, C, ins...]`): `act(conv + bias) (+ residual)` as FusedConv
    /// defines it, group by group as `packed::per_group` runs them.
    pub(super) fn run(
        &self,
        sh: &ConvShape,
        xd: &[f32],
        weights: &BroadcastWeights,
        (bias, act, residual): (Option<&[f32]>, quorum_kernels::Activation, Option<&[f32]>),
        threads: Threads,
    ) -> Vec<f32> {
        let (cg, g) = (sh.cg(), &sh.g);
        // SAFETY: conv_direct writes every value of each group's output.
        unsafe {
            super::packed::per_group(
                sh,
                xd,
                (bias, act, residual),
                threads,
                |gi, xg, epi, yg, threads| {
                    let mut xp = Vec::new();
                    let x = if self.padded {
                        xp = PADDED.with(|b| b.take());
                        let len = cg * self.rows * self.cols;
                        pad_planes(xg, cg, g, (self.rows, self.cols), len, &mut xp);
                        &xp[..]
                    } else {
                        xg
                    };
                    let d = DirectConv {
                        x,
                        channels: cg,
                        rows: self.rows,
                        cols: self.cols,
                        kernel: [g.k[1], g.k[2]],
                        strides: [g.s[1], g.s[2]],
                        dilations: [g.d[1], g.d[2]],
                        outs: [g.outs[1], g.outs[2]],
                    };
                    conv_direct(&weights.groups[gi], &d, yg, epi, threads);
                    if self.padded {
                        PADDED.with(|b| b.set(xp));
                    }
                },
            )
        }
    }
}

#[cfg(test)]
impl BroadcastWeights {
    /// The groups in reverse order (a broken packing, for the tests to catch).
    pub(super) fn swapped(&self) -> BroadcastWeights {
        BroadcastWeights {
            groups: self.groups.iter().rev().cloned().collect(),
        }
    }
}
