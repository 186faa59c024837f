//! FusedConv's fifth input: the other operand of a Mul whose product was the convolution's input,
//! folded in by the optimiser's `conv-input-scale` (`optimize/input_scale.rs`): a
//! squeeze-and-excitation block's channel scale before its 1×1 projection. Inputs 0 and 4 are the
//! Mul's two operands in its order, and the convolution's input is their product, broadcast as Mul
//! broadcasts it.
//!
//! Where one operand is an f32 `[N, C, H, W]` whose channels the other scales (`C` values, every
//! batch item alike) and the convolution takes the packed GEMM over its input planes, each input
//! row is multiplied by its channel's scale as the GEMM packs it (`BSource::ScaledDense`): the
//! products the Mul would have stored, never stored. Anywhere else the Mul runs first, by its own
//! kernel. Either way the result is the Mul's then the convolution's, bit for bit.
use ndarray::ArrayD;
use quorum_kernels::Activation;

use super::contiguous;
use crate::bail;
use crate::error::OpResult;
use crate::ops::{OpCtx, input, opt_input};
use crate::tensor::{Tensor, Value};

/// What the fifth input leaves the convolution to do.
pub(super) enum Scaled {
    /// The convolution's output, the scale applied as its input was packed.
    Done(Value),
    /// The Mul's product, which is the convolution's input.
    Product(Value),
}

/// Whether `s`, right-aligned against the 4-D shape `x`, is 1 on every axis but the channels',
/// where it is `x`'s channel count: one scale per channel, for every batch item alike.
pub(super) fn channel_scale(x: &[usize], s: &[usize]) -> bool {
    if x.len() != 4 || s.len() > 4 {
        return false;
    }
    let pad = 4 - s.len();
    (0..4).all(|i| {
        let d = if i < pad { 1 } else { s[i - pad] };
        d == if i == 1 { x[1] } else { 1 }
    })
}

/// The convolution of `inputs[0] · inputs[4]` with activation `act` and residual `residual`, or
/// that product for the caller to convolve.
pub(super) fn scaled(
    ctx: &OpCtx,
    inputs: &[Option<&Value>],
    act: Activation,
    residual: Option<&Tensor>,
) -> OpResult<Scaled> {
    let value = |i: usize| inputs.get(i).copied().flatten();
    let (Some(av), Some(sv)) = (value(0), value(4)) else {
        bail!("FusedConv: X or its scale is missing")
    };
    fn f32s(t: &Tensor) -> Option<&ArrayD<f32>> {
        match t {
            Tensor::F32(t) => Some(t),
            _ => None,
        }
    }
    let (a, s) = (input(inputs, 0)?, input(inputs, 4)?);
    let (w, b) = (input(inputs, 1)?, opt_input(inputs, 2)?);
    let operands = (f32s(a), f32s(s), f32s(w));
    let bias = b.map(f32s);
    let res = residual.map(f32s);
    if let ((Some(a), Some(s), Some(w)), None | Some(Some(_)), None | Some(Some(_))) =
        (operands, bias, res)
    {
        // Either operand may be the activations: torchvision's blocks write `scale * input`.
        let roles = [(a, s), (s, a)];
        if let Some(&(x, s)) = roles
            .iter()
            .find(|(x, s)| channel_scale(x.shape(), s.shape()))
        {
            let sd = contiguous(s);
            let (b, r) = (bias.flatten(), res.flatten());
            let y = super::packed::conv_f32_scaled(ctx, x, &sd, w, b, act, r)?;
            if let Some(y) = y {
                return Ok(Scaled::Done(Value::Tensor(Tensor::F32(y))));
            }
        }
    }
    Ok(Scaled::Product(crate::ops::elementwise::mul(ctx, av, sv)?))
}

#[cfg(test)]
mod tests {
    use ndarray::IxDyn;

    use super::*;
    use crate::ops::testing::{run_kernel, seeded_f32};

    fn array(shape: &[usize], seed: u64) -> ArrayD<f32> {
        let n = shape.iter().product();
        ArrayD::from_shape_vec(IxDyn(shape), seeded_f32(seed, n, -2.0, 2.0)).unwrap()
    }

    fn bits(a: &ArrayD<f32>) -> Vec<u32> {
        a.iter().map(|v| v.to_bits()).collect()
    }

    /// A 1×1 convolution takes the scaled packing, with the bits of the Mul then the convolution
    /// (with a residual too); a 3×3 convolution, or a residual of another shape, is left to the
    /// caller. Scales taken in the wrong order (reversed) are caught.
    #[test]
    fn a_pointwise_convolution_scales_its_rows_as_packed() {
        let (x, s) = (array(&[2, 24, 8, 8], 1), array(&[24], 2));
        let (w, b, r) = (
            array(&[8, 24, 1, 1], 3),
            array(&[8], 4),
            array(&[2, 8, 8, 8], 5),
        );
        let s4 = s
            .clone()
            .into_shape_with_order(IxDyn(&[1, 24, 1, 1]))
            .unwrap();
        let product = &x * &s4;
        let reversed: Vec<f32> = s.as_slice().unwrap().iter().rev().copied().collect();
        run_kernel(
            |ctx: &OpCtx, _: &[Option<&Value>]| {
                let sd = s.as_slice().unwrap();
                for r in [None, Some(&r)] {
                    let act = Activation::Relu;
                    let got =
                        super::super::packed::conv_f32_scaled(ctx, &x, sd, &w, Some(&b), act, r)?
                            .expect("a 1x1 convolution of one group is scaled as packed");
                    let want = match r {
                        None => super::super::packed::conv_f32(ctx, &product, &w, Some(&b), act)?,
                        Some(r) => {
                            let rd = r.as_slice().unwrap();
                            super::super::packed::conv_f32_residual(
                                ctx,
                                &product,
                                &w,
                                Some(&b),
                                act,
                                Some(rd),
                            )?
                        }
                    };
                    assert_eq!(bits(&got), bits(&want), "residual {}", r.is_some());
                    let wrong = super::super::packed::conv_f32_scaled(
                        ctx,
                        &x,
                        &reversed,
                        &w,
                        Some(&b),
                        act,
                        r,
                    )?
                    .unwrap();
                    assert_ne!(bits(&wrong), bits(&want), "reversed scales went unseen");
                }
                let w3 = array(&[8, 24, 3, 3], 6);
                let none = super::super::packed::conv_f32_scaled(
                    ctx,
                    &x,
                    sd,
                    &w3,
                    None,
                    Activation::None,
                    None,
                )?;
                assert!(none.is_none(), "a 3x3 convolution was scaled as packed");
                let other = array(&[1, 8, 1, 1], 7);
                let none = super::super::packed::conv_f32_scaled(
                    ctx,
                    &x,
                    sd,
                    &w,
                    None,
                    Activation::None,
                    Some(&other),
                )?;
                assert!(none.is_none(), "a broadcast residual was taken");
                Ok(vec![])
            },
            "Conv",
            17,
            vec![],
            vec![],
            0,
        )
        .unwrap();
    }

    #[test]
    fn channel_scales_are_told_from_other_shapes() {
        let x = [2, 24, 8, 8];
        for s in [&[1, 24, 1, 1][..], &[24, 1, 1], &[1, 1, 24, 1, 1][1..]] {
            assert!(channel_scale(&x, s), "{s:?}");
        }
        for s in [
            &[2, 24, 1, 1][..],
            &[24],
            &[24, 1],
            &[1, 24, 8, 8],
            &[1, 1, 1, 1],
            &[1, 24, 1, 1, 1],
        ] {
            assert!(!channel_scale(&x, s), "{s:?}");
        }
        assert!(!channel_scale(&[24, 8, 8], &[24, 1, 1]));
    }
}
