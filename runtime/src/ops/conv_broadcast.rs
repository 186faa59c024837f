//! The f32 path of 2-D (and 1-D) convolutions on AVX-512: `quorum_kernels::conv_direct`, output
//! pixels broadcast against vectors of 32 output channels' weights, read straight from the input
//! (a zero-padded copy where the convolution pads). No patch is packed, which the GEMM path does
//! for every value of `B`; the sums are the GEMM's, in its order and blocking, so the output has
//! the bits of the GEMM path (tested against it).
use quorum_kernels::{DirectConv, Epilogue, Isa, PackedB, Threads, conv_direct};
use rayon::prelude::*;

use super::forward::ConvShape;
use super::shifted::pad_planes;
use crate::ops::OpCtx;

/// Output channels per register tile of the direct kernel.
const PANEL: usize = 32;

/// The grid a convolution is read from: its input (`padded == false`) or a padded copy of
/// `rows × cols` planes.
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
/// in a transposition of its 32 channels × 14 pixels into the output's planes (about 400 cycles),
/// which a short sum does not pay for (measured with `kernels/examples/gemm_rate.rs`).
const MIN_DEPTH: usize = 128;

/// The grid of `sh` where the direct path runs: 2-D or 1-D (no depth), column stride 1 or 2 on
/// AVX-512, no negative pads; output channels (per group) that fill their panels to at least 80%
/// (16 channels would leave half of every multiply-add unused); a sum of at least [`MIN_DEPTH`]
/// steps; and not pointwise (its input planes are the GEMM's `B` as they lie, copied at memory
/// speed, and the GEMM ran those 1-7% faster than the direct kernel: mobilenet_v2's and
/// efficientnet_b0's 1×1 convolutions).
pub(super) fn plan(sh: &ConvShape) -> Option<Broadcast> {
    let g = &sh.g;
    let [o0, ho, wo] = g.outs;
    let flat = g.ins[0] == 1 && g.k[0] == 1 && o0 == 1 && g.pb[0] == 0;
    let mg = sh.mg();
    let full = mg > 0 && mg.div_ceil(PANEL) * PANEL * 4 <= mg * 5;
    let deep = sh.cg() * g.ksz() >= MIN_DEPTH;
    if !flat || !full || !deep || sh.pointwise() || ho * wo == 0 || g.pb.iter().any(|&p| p < 0) {
        return None;
    }
    if !DirectConv::available([g.s[1], g.s[2]]) {
        return None;
    }
    let reach = |i: usize| (g.outs[i] - 1) * g.s[i] + (g.k[i] - 1) * g.d[i] + 1;
    let padded = g.pb != [0, 0, 0];
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
    /// defines it. Groups run in parallel when there are at least twice as many as threads (each
    /// serial), otherwise one after the other, each split across threads.
    pub(super) fn run(
        &self,
        sh: &ConvShape,
        xd: &[f32],
        weights: &BroadcastWeights,
        (bias, act, residual): (Option<&[f32]>, quorum_kernels::Activation, Option<&[f32]>),
        threads: Threads,
    ) -> Vec<f32> {
        let (n, c, m, group) = (sh.n, sh.c, sh.m, sh.group);
        let (cg, mg, g) = (sh.cg(), sh.mg(), &sh.g);
        let (in_sp, out_sp) = (g.in_sp(), g.out_sp());
        let total = n * m * out_sp;
        let mut y: Vec<f32> = Vec::with_capacity(total);
        let chunk = mg * out_sp;
        let out = &mut y.spare_capacity_mut()[..total];
        let par_groups = group > 1 && group >= 2 * rayon::current_num_threads();
        let run = |i: usize, yg: &mut [std::mem::MaybeUninit<f32>], threads: Threads| {
            let (ni, gi) = (i / group, i % group);
            let at = i * chunk;
            let xg = &xd[(ni * c + gi * cg) * in_sp..(ni * c + (gi + 1) * cg) * in_sp];
            let epi = Epilogue {
                bias: bias.map(|b| &b[gi * mg..(gi + 1) * mg]),
                act,
                residual: residual.map(|r| &r[at..at + chunk]),
            };
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
            conv_direct(&weights.groups[gi], &d, yg, &epi, threads);
            if self.padded {
                PADDED.with(|b| b.set(xp));
            }
        };
        if total == 0 {
            return y;
        }
        if par_groups && threads != Threads::Serial {
            out.par_chunks_mut(chunk)
                .enumerate()
                .for_each(|(i, yg)| run(i, yg, Threads::Serial));
        } else {
            for (i, yg) in out.chunks_mut(chunk).enumerate() {
                run(i, yg, threads);
            }
        }
        // SAFETY: the chunks cover `y` (n·group chunks of mg·out_sp values), and conv_direct
        // writes every element of its output.
        unsafe { y.set_len(total) };
        y
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
