//! `com.quorum` ChannelAffine: `Y = act(X · scale[c] + shift[c])` over channel axis 1 of an f32
//! `X`, `scale` and `shift` of one value per channel; the activation as FusedConv names it
//! (`activation`, `activation_params`).
//!
//! The `affine-chain` rewrite (`optimize/affine_chain.rs`) writes it for an inference
//! BatchNormalization that no Conv absorbs, the per-channel steps after it and their activation:
//! densenet's BatchNormalization → Mul → Add → Relu before each convolution, four passes over the
//! activations, become one. The rewrite matched the constants' shapes to an `X` of rank `rank`
//! (attribute), which the graph fixes; an `X` of another rank or channel count is refused, naming
//! the node (the steps would have broadcast differently).
use rayon::prelude::*;

use super::broadcast::PAR_THRESHOLD;
use super::conv::activation_attr;
use super::{OpCtx, Registry, input, single};
use crate::bail;
use crate::error::OpResult;
use crate::tensor::{Tensor, Value};

pub fn register(r: &mut Registry) {
    r.add(super::QUORUM_DOMAIN, "ChannelAffine", channel_affine);
}

fn channel_affine(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let act = activation_attr(ctx)?;
    let rank = ctx.attr_i("rank", 0)?;
    let (x, scale, shift) = (input(inputs, 0)?, input(inputs, 1)?, input(inputs, 2)?);
    let (Tensor::F32(x), Tensor::F32(scale), Tensor::F32(shift)) = (x, scale, shift) else {
        bail!(
            "ChannelAffine takes f32 X, scale and shift; got {}, {} and {}",
            x.dtype(),
            scale.dtype(),
            shift.dtype()
        );
    };
    let xs = x.shape();
    let m = scale.len();
    if xs.len() as i64 != rank || xs.len() < 2 || xs[1] != m || shift.len() != m {
        bail!(
            "ChannelAffine was made for X of rank {rank} with {m} channels (scale {:?}, shift \
             {:?}); got X {xs:?}: run without the graph rewrites (--no-optimize)",
            scale.shape(),
            shift.shape()
        );
    }
    let x = x.as_standard_layout();
    let xd = x.as_slice().unwrap_or_default();
    let (scale, shift) = (
        scale.iter().copied().collect::<Vec<_>>(),
        shift.iter().copied().collect::<Vec<_>>(),
    );
    let plane = xs[2..].iter().product::<usize>();
    // Each value written once, from its input (never zeroed first).
    let mut y: Vec<f32> = crate::arena::vec(xd.len());
    if plane > 0 {
        let out = &mut y.spare_capacity_mut()[..xd.len()];
        let run = |(i, (yp, xp)): (usize, (&mut [std::mem::MaybeUninit<f32>], &[f32]))| {
            act.apply_affine(yp, xp, scale[i % m], shift[i % m]);
        };
        if xd.len() >= PAR_THRESHOLD {
            out.par_chunks_mut(plane)
                .zip(xd.par_chunks(plane))
                .enumerate()
                .for_each(run);
        } else {
            out.chunks_mut(plane)
                .zip(xd.chunks(plane))
                .enumerate()
                .for_each(run);
        }
        // SAFETY: the planes above cover all xd.len() values (plane divides it: X's shape), and
        // apply_affine wrote each one.
        unsafe { y.set_len(xd.len()) };
    }
    single(Tensor::from_f32(xs, y)?)
}

#[cfg(test)]
mod tests {
    use quorum_kernels::Activation;

    use super::*;
    use crate::ir::Attr;
    use crate::ops::testing::{run_kernel, seeded_f32};

    fn run(
        x: &Tensor,
        scale: &[f32],
        shift: &[f32],
        rank: i64,
        act: &str,
    ) -> OpResult<Vec<Tensor>> {
        let m = scale.len();
        let s = Tensor::from_f32(&[m], scale.to_vec()).unwrap();
        let t = Tensor::from_f32(&[m], shift.to_vec()).unwrap();
        run_kernel(
            channel_affine,
            "ChannelAffine",
            1,
            vec![
                ("rank", Attr::Int(rank)),
                ("activation", Attr::String(act.as_bytes().to_vec())),
            ],
            vec![Some(x.clone()), Some(s), Some(t)],
            1,
        )
    }

    /// Every element is `act(x·scale[c] + shift[c])` of its own channel, bit for bit, in batches
    /// large enough to run in parallel; a swapped pair of channels is caught.
    #[test]
    fn each_channel_gets_its_own_affine_map() {
        let (n, m, h, w) = (2, 5, 33, 41);
        let xd = seeded_f32(3, n * m * h * w, -2.0, 2.0);
        let x = Tensor::from_f32(&[n, m, h, w], xd.clone()).unwrap();
        let scale = seeded_f32(4, m, 0.5, 1.5);
        let shift = seeded_f32(5, m, -1.0, 1.0);
        let want = |scale: &[f32]| -> Vec<u32> {
            xd.iter()
                .enumerate()
                .map(|(i, &v)| {
                    Activation::Relu
                        .scalar(v * scale[(i / (h * w)) % m] + shift[(i / (h * w)) % m])
                        .to_bits()
                })
                .collect()
        };
        let out = run(&x, &scale, &shift, 4, "Relu").unwrap();
        let Some(Tensor::F32(y)) = out.first() else {
            panic!("no f32 output")
        };
        assert_eq!(y.shape(), &[n, m, h, w]);
        let got: Vec<u32> = y.iter().map(|v| v.to_bits()).collect();
        assert_eq!(got, want(&scale));
        let mut swapped = scale.clone();
        swapped.swap(1, 2);
        assert_ne!(
            got,
            want(&swapped),
            "a swapped pair of channels went unseen"
        );
    }

    /// An X of another rank than the rewrite matched, or another channel count, is refused with
    /// the shapes named.
    #[test]
    fn another_rank_or_channel_count_is_refused() {
        let x = Tensor::from_f32(&[1, 3, 4], seeded_f32(6, 12, -1.0, 1.0)).unwrap();
        let e = run(&x, &[1.0; 3], &[0.0; 3], 4, "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("rank 4") && e.contains("[1, 3, 4]"), "{e}");
        let e = run(&x, &[1.0; 2], &[0.0; 2], 3, "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("2 channels"), "{e}");
    }
}
