//! The pixel-vector path (`quorum_kernels::conv_pixels`: a short sum, tiles of 32 output pixels
//! read from a phase grid of the input) against the patch gather, bit for bit: strides 1 to 4,
//! dilations, asymmetric pads, 1-D, groups, a batch, the bias, activation and residual of
//! FusedConv, serial and split; outputs poisoned first (by the kernel's contract: it writes
//! uninitialised memory, which the gather's bits would not match). Geometries it must leave to the
//! other paths, and a grid read one column off that the comparison must catch.
use super::*;
use crate::ops::conv::packed::{conv_packed_on, conv_pixels_on, pixels_plan};

/// (attributes, X shape, W shape) that the pixel path takes on AVX-512.
fn cases() -> Vec<Geometry> {
    let i = |v: &[i64]| Attr::Ints(v.to_vec());
    vec![
        // A stem: 3×3 stride 2, pads 1, rows of 40.
        (
            vec![("pads", i(&[1, 1, 1, 1])), ("strides", i(&[2, 2]))],
            vec![1, 3, 20, 80],
            vec![16, 3, 3, 3],
        ),
        // Stride 1, asymmetric pads, dilation 2; a batch of two.
        (
            vec![("pads", i(&[0, 2, 1, 1])), ("dilations", i(&[2, 1]))],
            vec![2, 2, 12, 40],
            vec![9, 2, 3, 5],
        ),
        // 1-D, stride 3.
        (
            vec![("pads", i(&[2, 1])), ("strides", i(&[3]))],
            vec![2, 4, 110],
            vec![6, 4, 5],
        ),
        // Two groups of 3 channels, stride 2 columns only.
        (
            vec![
                ("group", Attr::Int(2)),
                ("pads", i(&[1, 1, 1, 1])),
                ("strides", i(&[1, 2])),
            ],
            vec![1, 6, 8, 64],
            vec![10, 3, 3, 3],
        ),
        // Pointwise to 16 channels (squeezenet's squeeze at 55 columns), a batch of two.
        (vec![], vec![2, 12, 6, 55], vec![16, 12, 1, 1]),
        // Patches of 4×4 at stride 4; rows enough to split across threads.
        (
            vec![("strides", i(&[4, 4]))],
            vec![1, 3, 96, 96],
            vec![24, 3, 4, 4],
        ),
    ]
}

/// Geometries the pixel path leaves to the others: rows of 7 (under three quarters of a vector
/// used), a sum of 147 steps (a 7×7 stem), pointwise to more than 16 channels or over a sum of more
/// than 128 steps, and 3-D. Each still equals f64 sums.
#[test]
fn geometries_it_does_not_pay_for_go_elsewhere() {
    let i = |v: &[i64]| Attr::Ints(v.to_vec());
    let cases = [
        (
            vec![("pads", i(&[1, 1, 1, 1]))],
            vec![1, 3, 7, 7],
            vec![4, 3, 3, 3],
        ),
        (
            vec![("pads", i(&[3, 3, 3, 3])), ("strides", i(&[2, 2]))],
            vec![1, 3, 20, 40],
            vec![8, 3, 7, 7],
        ),
        (vec![], vec![1, 3, 4, 40], vec![24, 3, 1, 1]),
        (vec![], vec![1, 144, 2, 40], vec![16, 144, 1, 1]),
        (vec![], vec![1, 2, 3, 5, 40], vec![3, 2, 2, 3, 3]),
    ];
    for (case, (attrs, xs, ws)) in cases.into_iter().enumerate() {
        with_conv(attrs, &xs, &ws, 900 + case as u64, |ctx, x, w, b| {
            let sh = ConvShape::new(ctx, x.shape(), w.shape(), Some(b)).unwrap();
            assert!(pixels_plan(&sh).is_none(), "case {case}: taken");
            let got = conv_f32(ctx, x, w, Some(b), Activation::None).unwrap();
            let (xd, wd, bd) = slices(x, w, b);
            if let Some(e) = outside(got.as_slice().unwrap(), &reference(xd, wd, Some(bd), &sh)) {
                panic!("case {case}: {e}");
            }
        });
    }
}

#[test]
fn pixel_vectors_equal_the_patch_gather_bit_for_bit() {
    if Isa::detected() != Isa::Avx512 {
        return;
    }
    for (case, (attrs, xs, ws)) in cases().into_iter().enumerate() {
        with_conv(attrs, &xs, &ws, 800 + case as u64, |ctx, x, w, b| {
            let sh = ConvShape::new(ctx, x.shape(), w.shape(), Some(b)).unwrap();
            let plan = pixels_plan(&sh).unwrap_or_else(|| panic!("case {case}: not taken"));
            let (xd, wd, bd) = slices(x, w, b);
            let weights = pack_weights(Isa::Avx512, &sh, wd);
            let res = rand(850 + case as u64, sh.n * sh.m * sh.g.out_sp());
            for (act, residual) in [
                (Activation::None, None),
                (Activation::Relu, Some(&res[..])),
                (Activation::Clip { lo: 0.0, hi: 6.0 }, None),
                (Activation::Silu, Some(&res[..])),
            ] {
                for threads in [Threads::Serial, Threads::Always] {
                    let epi = (Some(bd), act, residual);
                    let bits = |y: Vec<f32>| y.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    let want = bits(conv_packed_on(&sh, xd, &weights, epi, threads, None));
                    let got = bits(conv_pixels_on(&sh, xd, &weights, epi, threads, plan));
                    assert_eq!(got, want, "case {case} {act:?} {threads:?}");
                }
            }
            // conv_f32 takes this path, and its outputs agree with f64 sums (so the comparison
            // above is not of two wrongs).
            let y = conv_f32(ctx, x, w, Some(b), Activation::None).unwrap();
            let want = conv_pixels_on(
                &sh,
                xd,
                &weights,
                (Some(bd), Activation::None, None),
                Threads::Auto,
                plan,
            );
            assert_eq!(y.as_slice().unwrap(), &want[..], "case {case}: conv_f32");
            if let Some(e) = outside(&want, &reference(xd, wd, Some(bd), &sh)) {
                panic!("case {case}: {e}");
            }
        });
    }
}

/// A grid read one column off (the left padding taken as one less than it is) is caught by the
/// comparison with f64 sums.
#[test]
fn a_grid_read_one_column_off_is_caught() {
    if Isa::detected() != Isa::Avx512 {
        return;
    }
    let i = |v: &[i64]| Attr::Ints(v.to_vec());
    with_conv(
        vec![("pads", i(&[1, 1, 1, 1])), ("strides", i(&[2, 2]))],
        &[1, 3, 10, 80],
        &[8, 3, 3, 3],
        83,
        |ctx, x, w, b| {
            let sh = ConvShape::new(ctx, x.shape(), w.shape(), Some(b)).unwrap();
            let (xd, wd, bd) = slices(x, w, b);
            let weights = pack_weights(Isa::Avx512, &sh, wd);
            let good = pixels_plan(&sh).unwrap();
            let bad = quorum_kernels::PixelConv {
                pads: [good.pads[0], good.pads[1] - 1],
                ..good
            };
            let epi = (Some(bd), Activation::None, None);
            let y = |p| conv_pixels_on(&sh, xd, &weights, epi, Threads::Serial, p);
            let want = reference(xd, wd, Some(bd), &sh);
            assert!(outside(&y(good), &want).is_none());
            assert!(
                outside(&y(bad), &want).is_some(),
                "a grid read one column off went unseen"
            );
        },
    );
}
