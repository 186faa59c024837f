//! The broadcast path (the direct kernel reading the padded input) against the GEMM's patch
//! gather, bit for bit: pads, dilations, strides, 1-D, groups (serial and across threads), a
//! batch, pointwise, the bias, activation and residual of FusedConv; outputs poisoned by the
//! kernel's own contract (every value written, checked finite). Weights of the wrong group must
//! be caught, and geometries the path cannot read go to the GEMM.
use super::*;
use crate::ops::conv::broadcast;
use crate::ops::conv::packed::conv_packed_on;

/// (attributes, X shape, W shape) that the broadcast path takes.
fn cases() -> Vec<Geometry> {
    let i = |v: &[i64]| Attr::Ints(v.to_vec());
    vec![
        (
            vec![("pads", i(&[1, 1, 1, 1]))],
            vec![2, 16, 9, 11],
            vec![32, 16, 3, 3],
        ),
        (
            vec![("pads", i(&[0, 2, 1, 1])), ("dilations", i(&[2, 1]))],
            vec![1, 9, 12, 10],
            vec![52, 9, 3, 5],
        ),
        (vec![("pads", i(&[2, 1]))], vec![2, 26, 40], vec![64, 26, 5]),
        (
            vec![("pads", i(&[1, 1, 1, 1])), ("strides", i(&[2, 2]))],
            vec![1, 15, 15, 17],
            vec![30, 15, 3, 3],
        ),
        // Two groups, one after the other; then eight, in parallel.
        (
            vec![("group", Attr::Int(2)), ("pads", i(&[1, 1, 1, 1]))],
            vec![1, 30, 8, 8],
            vec![64, 15, 3, 3],
        ),
        (
            vec![("group", Attr::Int(8)), ("pads", i(&[1, 1, 1, 1]))],
            vec![1, 128, 5, 6],
            vec![256, 16, 3, 3],
        ),
        // A strided 1x1 over 200 channels (more than one block of the sum), no padding: the input
        // read in place.
        (
            vec![("strides", i(&[2, 2]))],
            vec![1, 200, 7, 9],
            vec![32, 200, 1, 1],
        ),
        // Pointwise over a 7x7 plane: 49 columns, which would leave 15 of the GEMM's 64 unused.
        (vec![], vec![1, 260, 7, 7], vec![32, 260, 1, 1]),
        // Padding at the end only (TensorFlow's SAME at stride 2): the last output row and column
        // read the padding although no begin pad asks for a copy.
        (
            vec![("pads", i(&[0, 0, 1, 1])), ("strides", i(&[2, 2]))],
            vec![1, 16, 8, 10],
            vec![32, 16, 3, 3],
        ),
        // A 7x7 stride-2 stem.
        (
            vec![("pads", i(&[3, 3, 3, 3])), ("strides", i(&[2, 2]))],
            vec![1, 3, 30, 30],
            vec![32, 3, 7, 7],
        ),
    ]
}

#[test]
fn broadcast_equals_the_patch_gather_bit_for_bit() {
    let isa = Isa::detected();
    for (case, (attrs, xs, ws)) in cases().into_iter().enumerate() {
        with_conv(attrs, &xs, &ws, 900 + case as u64, |ctx, x, w, b| {
            let sh = ConvShape::new(ctx, x.shape(), w.shape(), Some(b)).unwrap();
            let Some(plan) = broadcast::plan(&sh) else {
                assert!(
                    isa != Isa::Avx512,
                    "case {case}: the broadcast path is not taken"
                );
                return;
            };
            let (xd, wd, bd) = slices(x, w, b);
            let gemm = pack_weights(isa, &sh, wd);
            let direct = broadcast::pack_weights(&sh, wd);
            let res = rand(950 + case as u64, sh.n * sh.m * sh.g.out_sp());
            for (act, residual) in [
                (Activation::None, None),
                (Activation::Relu, Some(&res[..])),
                (Activation::Silu, None),
            ] {
                for threads in [Threads::Serial, Threads::Always] {
                    let epi = (Some(bd), act, residual);
                    let want = conv_packed_on(&sh, xd, &gemm, epi, threads, None);
                    assert!(want.iter().all(|v| v.is_finite()));
                    let got = plan.run(&sh, xd, &direct, epi, threads);
                    let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&got), bits(&want), "case {case} {act:?} {threads:?}");
                }
            }
            // The outputs agree with f64 sums too (so the comparison above is not of two wrongs),
            // and the op itself takes this path.
            let want = reference(xd, wd, Some(bd), &sh);
            let y = plan.run(
                &sh,
                xd,
                &direct,
                (Some(bd), Activation::None, None),
                Threads::Auto,
            );
            if let Some(e) = outside(&y, &want) {
                panic!("case {case}: {e}");
            }
            let op = conv_f32(ctx, x, w, Some(b), Activation::None).unwrap();
            assert_eq!(
                op.as_slice().unwrap(),
                &y[..],
                "case {case}: the op's own result"
            );
        });
    }
}

/// Weights of the other group (the groups' packed weights swapped) are caught by the comparison.
#[test]
fn weights_of_the_wrong_group_are_caught() {
    let i = |v: &[i64]| Attr::Ints(v.to_vec());
    let attrs = vec![("group", Attr::Int(2)), ("pads", i(&[1, 1, 1, 1]))];
    with_conv(
        attrs,
        &[1, 32, 6, 7],
        &[64, 16, 3, 3],
        991,
        |ctx, x, w, b| {
            let sh = ConvShape::new(ctx, x.shape(), w.shape(), Some(b)).unwrap();
            let Some(plan) = broadcast::plan(&sh) else {
                return;
            };
            let (xd, wd, bd) = slices(x, w, b);
            let want = reference(xd, wd, Some(bd), &sh);
            let epi = (Some(bd), Activation::None, None);
            let good = broadcast::pack_weights(&sh, wd);
            let y = plan.run(&sh, xd, &good, epi, Threads::Serial);
            assert!(outside(&y, &want).is_none());
            let swapped = good.swapped();
            let y = plan.run(&sh, xd, &swapped, epi, Threads::Serial);
            assert!(
                outside(&y, &want).is_some(),
                "weights of the wrong group went unseen"
            );
        },
    );
}

/// Geometries the direct kernel cannot read, or would waste: depth, a column stride of 3,
/// 16 output channels, negative pads, a pointwise convolution over whole column panels, a sum of
/// fewer than 128 steps.
/// Each still equals f64 sums.
#[test]
fn geometries_it_cannot_take_go_to_the_gemm() {
    let i = |v: &[i64]| Attr::Ints(v.to_vec());
    let cases = [
        (
            vec![("pads", i(&[0, 1, 1, 0, 1, 1]))],
            vec![1, 2, 3, 5, 5],
            vec![32, 2, 2, 3, 3],
        ),
        (
            vec![("strides", i(&[1, 3]))],
            vec![1, 16, 6, 10],
            vec![32, 16, 3, 3],
        ),
        (
            vec![("pads", i(&[1, 1, 1, 1]))],
            vec![1, 16, 6, 9],
            vec![16, 16, 3, 3],
        ),
        (
            vec![("pads", i(&[-1, 0, 0, 0]))],
            vec![1, 16, 6, 9],
            vec![32, 16, 3, 3],
        ),
        // Pointwise over 64 columns (the GEMM's panels full), and over 49 but a sum of 160.
        (vec![], vec![1, 300, 8, 8], vec![32, 300, 1, 1]),
        (vec![], vec![1, 160, 7, 7], vec![32, 160, 1, 1]),
        (
            vec![("pads", i(&[1, 1, 1, 1]))],
            vec![1, 14, 6, 9],
            vec![32, 14, 3, 3],
        ),
    ];
    for (case, (attrs, xs, ws)) in cases.into_iter().enumerate() {
        with_conv(attrs, &xs, &ws, 970 + case as u64, |ctx, x, w, b| {
            let sh = ConvShape::new(ctx, x.shape(), w.shape(), Some(b)).unwrap();
            assert!(broadcast::plan(&sh).is_none(), "case {case}: taken");
            let got = conv_f32(ctx, x, w, Some(b), Activation::None).unwrap();
            let (xd, wd, bd) = slices(x, w, b);
            if let Some(e) = outside(got.as_slice().unwrap(), &reference(xd, wd, Some(bd), &sh)) {
                panic!("case {case}: {e}");
            }
        });
    }
}
