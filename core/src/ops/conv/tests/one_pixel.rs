//! The one-pixel path (a pointwise convolution over `[N, C, 1, 1]` run as `X·Wᵀ`) against the
//! `W·X` packed path, bit for bit, and against f64 sums; `Wᵀ` packed without its transpose must be
//! caught.
use super::*;
use crate::ops::conv::packed::{conv_one_pixel, pack_one_pixel};

/// A pointwise convolution over one-pixel inputs, run as `X·Wᵀ`, has the bits of the `W·X` path
/// (one and three images, sums within and across a block of K, each activation with a bias), on
/// every instruction set, serial and split; `Wᵀ` packed as `W` (the transpose forgotten) is caught.
#[test]
fn one_pixel_convolutions_have_the_packed_paths_bits() {
    for (case, (n, c, m)) in [(1, 40, 70), (3, 300, 33), (1, 1152, 48)]
        .into_iter()
        .enumerate()
    {
        with_conv(
            vec![],
            &[n, c, 1, 1],
            &[m, c, 1, 1],
            90 + case as u64,
            |ctx, x, w, b| {
                let sh = ConvShape::new(ctx, x.shape(), w.shape(), Some(b)).unwrap();
                let (xd, wd, bd) = slices(x, w, b);
                let want = reference(xd, wd, Some(bd), &sh);
                for &isa in Isa::supported() {
                    let wt = pack_one_pixel(isa, &sh, wd);
                    for act in [
                        Activation::None,
                        Activation::Relu,
                        Activation::Clip { lo: -0.25, hi: 0.5 },
                        Activation::Sigmoid,
                        Activation::Silu,
                    ] {
                        for threads in [Threads::Serial, Threads::Always] {
                            let got = conv_one_pixel(&sh, xd, &wt, Some(bd), act, threads);
                            let packed = pack_weights(isa, &sh, wd);
                            let old = conv_packed(&sh, xd, &packed, Some(bd), act, threads);
                            let bits =
                                |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                            assert_eq!(bits(&got), bits(&old), "case {case} {isa:?} {act:?}");
                            if act == Activation::None {
                                assert!(outside(&got, &want).is_none(), "case {case} {isa:?}");
                            }
                        }
                    }
                }
                // W packed as if it were Wᵀ: the sums read the wrong weights.
                let isa = Isa::detected();
                let wrong = quorum_kernels::PackedB::new(isa, c, m, wd, m, 1);
                let got =
                    conv_one_pixel(&sh, xd, &wrong, Some(bd), Activation::None, Threads::Serial);
                assert!(
                    outside(&got, &want).is_some(),
                    "case {case}: a transpose went unnoticed"
                );
            },
        );
    }
}
