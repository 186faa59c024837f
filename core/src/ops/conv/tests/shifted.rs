//! The shifted path (a stride-1 convolution's `B` read as shifted rows of its padded input) against
//! the patch gather, bit for bit: dilations, asymmetric pads, 1-D, groups, a batch, the bias,
//! activation and residual of FusedConv, serial and split, and enough rows to split them in blocks
//! across threads; outputs poisoned first. A grid too narrow for its rows must be caught.
use super::*;
use crate::ops::conv::Geom;
use crate::ops::conv::packed::conv_packed_on;
use crate::ops::conv::shifted::{self, Shifted};

/// (attributes, X shape, W shape) that the shifted path takes.
fn cases() -> Vec<Geometry> {
    let i = |v: &[i64]| Attr::Ints(v.to_vec());
    vec![
        (
            vec![("pads", i(&[1, 1, 1, 1]))],
            vec![2, 5, 9, 11],
            vec![7, 5, 3, 3],
        ),
        (
            vec![("pads", i(&[0, 2, 1, 1])), ("dilations", i(&[2, 1]))],
            vec![1, 3, 12, 10],
            vec![9, 3, 3, 5],
        ),
        (vec![("pads", i(&[2, 1]))], vec![2, 4, 40], vec![6, 4, 5]),
        (
            vec![("group", Attr::Int(2)), ("pads", i(&[1, 1, 1, 1]))],
            vec![1, 6, 8, 8],
            vec![10, 3, 3, 3],
        ),
        // Rows enough for blocks of the grid split across threads.
        (
            vec![("pads", i(&[1, 1, 1, 1]))],
            vec![1, 2, 96, 96],
            vec![8, 2, 3, 3],
        ),
        // No padding at all: the grid is the input.
        (vec![], vec![1, 3, 7, 9], vec![4, 3, 2, 2]),
        // Padding wider than the input: most of the grid is zeros.
        (
            vec![("pads", i(&[4, 4, 4, 4]))],
            vec![1, 2, 2, 3],
            vec![3, 2, 3, 3],
        ),
    ]
}

/// Geometries the shifted path must leave to the gather: a padded leading dim (the stream
/// fuzzer's case: a 3-D convolution whose one output depth reads only padding), strides, depth.
/// Each still equals f64 sums.
#[test]
fn geometries_it_cannot_read_go_to_the_gather() {
    let i = |v: &[i64]| Attr::Ints(v.to_vec());
    let cases = [
        (
            vec![
                ("group", Attr::Int(2)),
                ("pads", i(&[1, 0, 0, 0, 0, 0])),
                ("strides", i(&[2, 1, 1])),
            ],
            vec![1, 4, 1, 1, 1],
            vec![2, 2, 1, 1, 1],
        ),
        (
            vec![("pads", i(&[1, 1, 1, 1])), ("strides", i(&[1, 2]))],
            vec![1, 3, 6, 9],
            vec![4, 3, 3, 3],
        ),
        (
            vec![("pads", i(&[0, 1, 1, 0, 1, 1]))],
            vec![1, 2, 3, 5, 5],
            vec![3, 2, 2, 3, 3],
        ),
    ];
    for (case, (attrs, xs, ws)) in cases.into_iter().enumerate() {
        with_conv(attrs, &xs, &ws, 700 + case as u64, |ctx, x, w, b| {
            let sh = ConvShape::new(ctx, x.shape(), w.shape(), Some(b)).unwrap();
            assert!(shifted::plan(&sh).is_none(), "case {case}: taken");
            let got = conv_f32(ctx, x, w, Some(b), Activation::None).unwrap();
            let (xd, wd, bd) = slices(x, w, b);
            let want = reference(xd, wd, Some(bd), &sh);
            if let Some(e) = outside(got.as_slice().unwrap(), &want) {
                panic!("case {case}: {e}");
            }
        });
    }
}

#[test]
fn shifted_rows_equal_the_patch_gather_bit_for_bit() {
    let isa = Isa::detected();
    for (case, (attrs, xs, ws)) in cases().into_iter().enumerate() {
        with_conv(attrs, &xs, &ws, 500 + case as u64, |ctx, x, w, b| {
            let sh = ConvShape::new(ctx, x.shape(), w.shape(), Some(b)).unwrap();
            let plan = shifted::plan(&sh);
            assert!(plan.is_some(), "case {case}: the shifted path is not taken");
            let (xd, wd, bd) = slices(x, w, b);
            let weights = pack_weights(isa, &sh, wd);
            let res = rand(600 + case as u64, sh.n * sh.m * sh.g.out_sp());
            for (act, residual) in [
                (Activation::None, None),
                (Activation::Relu, Some(&res[..])),
                (Activation::Silu, None),
            ] {
                for threads in [Threads::Serial, Threads::Always] {
                    let run = |plan: Option<&Shifted>| {
                        let y = conv_packed_on(
                            &sh,
                            xd,
                            &weights,
                            (Some(bd), act, residual),
                            threads,
                            plan,
                        );
                        y.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                    };
                    let want = run(None);
                    assert!(want.iter().all(|&v| f32::from_bits(v).is_finite()));
                    assert_eq!(run(plan.as_ref()), want, "case {case} {act:?} {threads:?}");
                }
            }
            // The outputs agree with f64 sums too (so the comparison above is not of two wrongs).
            let y = conv_packed_on(
                &sh,
                xd,
                &weights,
                (Some(bd), Activation::None, None),
                Threads::Serial,
                plan.as_ref(),
            );
            if let Some(e) = outside(&y, &reference(xd, wd, Some(bd), &sh)) {
                panic!("case {case}: {e}");
            }
        });
    }
}

/// A grid too narrow for a padded row (its input's last column left out) is caught.
#[test]
fn a_grid_of_the_wrong_width_is_caught() {
    let i = |v: &[i64]| Attr::Ints(v.to_vec());
    with_conv(
        vec![("pads", i(&[1, 1, 1, 1]))],
        &[1, 3, 8, 9],
        &[4, 3, 3, 3],
        81,
        |ctx, x, w, b| {
            let sh = ConvShape::new(ctx, x.shape(), w.shape(), Some(b)).unwrap();
            let (xd, wd, bd) = slices(x, w, b);
            let weights = pack_weights(Isa::detected(), &sh, wd);
            let good = shifted::plan(&sh).unwrap();
            let bad = good.narrower();
            let epi = (Some(bd), Activation::None, None);
            let y = |p: &Shifted| conv_packed_on(&sh, xd, &weights, epi, Threads::Serial, Some(p));
            let want = reference(xd, wd, Some(bd), &sh);
            assert!(outside(&y(&good), &want).is_none());
            assert!(
                outside(&y(&bad), &want).is_some(),
                "a grid too narrow went unseen"
            );
        },
    );
}

/// `pad_planes` against the definition, value by value, into a buffer that held other values
/// before (as the thread's kept buffer does): small planes on one thread, and enough channels of
/// 16² planes to split them across threads; asymmetric pads and a tail of zeros past the planes.
/// An input placed one row off must be caught.
#[test]
fn padded_planes_are_the_input_in_zeros() {
    let definition = |xg: &[f32], cg: usize, g: &Geom, (hp, wp): (usize, usize), len: usize| {
        let [_, h, w] = g.ins;
        let (pt, pl) = (g.pb[1] as usize, g.pb[2] as usize);
        let mut v = vec![0f32; len];
        for c in 0..cg {
            for y in 0..hp {
                for x in 0..wp {
                    if (pt..pt + h).contains(&y) && (pl..pl + w).contains(&x) {
                        v[(c * hp + y) * wp + x] = xg[(c * h + y - pt) * w + x - pl];
                    }
                }
            }
        }
        v
    };
    for (cg, [h, w], [pt, pl], [hp, wp], tail) in [
        (3, [5, 7], [1, 2], [7, 10], 9),
        (160, [14, 14], [1, 1], [16, 16], 0),
        (130, [15, 13], [2, 0], [18, 14], 40),
    ] {
        let g = Geom {
            ins: [1, h, w],
            k: [1, 3, 3],
            s: [1; 3],
            d: [1; 3],
            pb: [0, pt as i64, pl as i64],
            outs: [1, h, w],
        };
        let xg = rand(cg as u64, cg * h * w);
        let len = cg * hp * wp + tail;
        let mut xp = vec![f32::NAN; len + 50];
        shifted::pad_planes(&xg, cg, &g, (hp, wp), len, &mut xp);
        let want = definition(&xg, cg, &g, (hp, wp), len);
        assert_eq!(xp.len(), len);
        assert!(
            xp.iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{cg} planes of {h}x{w} in {hp}x{wp}"
        );
        let off = Geom {
            pb: [0, pt as i64 + 1, pl as i64],
            ..g
        };
        let shifted = definition(&xg, cg, &off, (hp + 1, wp), len + cg * wp);
        assert!(
            xp.iter()
                .zip(&shifted)
                .any(|(a, b)| a.to_bits() != b.to_bits()),
            "an input one row off went unseen"
        );
    }
}
