//! The direct (depthwise) convolution against its definition in its own order, bit for bit: each
//! output starts at its bias and adds `w·x` tap by tap in kernel order, skipping taps in the
//! padding. The f32 path (`quorum_kernels::depthwise`: on AVX-512 a row's outputs held in registers
//! over every tap that reaches the row, the edge columns masked) must give exactly these bits.
use super::*;

/// `y[oc, oh, ow]` by the definition, 2-D, one input channel per output channel's group.
// The three tensors, the geometry (already grouped in tuples) and the tap order are all inputs.
#[allow(clippy::too_many_arguments)]
fn in_order(
    xd: &[f32],
    wd: &[f32],
    bd: &[f32],
    (c, h, w): (usize, usize, usize),
    (m, kh, kw): (usize, usize, usize),
    (s, d, pt, pl): (usize, usize, usize, usize),
    (oh, ow): (usize, usize),
    reverse: bool,
) -> Vec<u32> {
    let mg = m / c;
    let mut out = Vec::with_capacity(m * oh * ow);
    for oc in 0..m {
        let ic = oc / mg;
        for y in 0..oh {
            for xcol in 0..ow {
                let mut acc = bd[oc];
                let mut taps: Vec<(usize, usize)> =
                    (0..kh).flat_map(|a| (0..kw).map(move |b| (a, b))).collect();
                if reverse {
                    taps.reverse();
                }
                for (a, b) in taps {
                    let iy = (y * s + a * d) as i64 - pt as i64;
                    let ix = (xcol * s + b * d) as i64 - pl as i64;
                    if iy < 0 || ix < 0 || iy >= h as i64 || ix >= w as i64 {
                        continue;
                    }
                    let v = xd[(ic * h + iy as usize) * w + ix as usize];
                    acc += wd[(oc * kh + a) * kw + b] * v;
                }
                out.push(acc.to_bits());
            }
        }
    }
    out
}

/// Row widths around the blocks held in registers (16, 8, singles), strides 1 to 3, dilation,
/// asymmetric pads, 3×3 and 5×5 taps, a channel multiplier of 2; and the comparison catches the
/// same sums in reverse tap order.
#[test]
fn depthwise_rows_equal_the_tap_order_definition_bit_for_bit() {
    let i = |v: &[i64]| Attr::Ints(v.to_vec());
    // (channels, height, width, multiplier, kernel, stride, dilation, pads top/left/bottom/right)
    let cases = [
        (3, 9, 7, 1, 3, 1, 1, [1, 1, 1, 1]),
        (2, 8, 14, 1, 3, 1, 1, [1, 1, 1, 1]),
        (2, 6, 28, 2, 3, 2, 1, [1, 1, 1, 1]),
        (2, 7, 37, 1, 5, 1, 1, [2, 2, 2, 2]),
        (2, 5, 113, 1, 3, 3, 1, [0, 2, 1, 1]),
        (2, 9, 40, 1, 3, 1, 2, [2, 0, 2, 3]),
        (2, 11, 33, 1, 5, 2, 1, [2, 2, 2, 2]),
        (3, 14, 14, 1, 3, 2, 1, [0, 0, 1, 1]),
        (2, 7, 7, 1, 3, 1, 1, [1, 1, 1, 1]),
    ];
    for (n, &(c, h, w, mult, k, s, d, p)) in cases.iter().enumerate() {
        let m = c * mult;
        let attrs = vec![
            ("group", Attr::Int(c as i64)),
            ("strides", i(&[s as i64, s as i64])),
            ("dilations", i(&[d as i64, d as i64])),
            ("pads", i(&p.map(|v| v as i64))),
        ];
        with_conv(
            attrs,
            &[1, c, h, w],
            &[m, 1, k, k],
            300 + n as u64,
            |ctx, x, wt, b| {
                let sh = ConvShape::new(ctx, x.shape(), wt.shape(), Some(b)).unwrap();
                assert!(sh.depthwise(), "case {n}");
                // In registers (Clip) and over the stored plane (Silu), against the activation
                // of the definition's sums.
                for act in [
                    Activation::None,
                    Activation::Clip { lo: -0.25, hi: 0.5 },
                    Activation::Silu,
                ] {
                    let got = conv_f32(ctx, x, wt, Some(b), act).unwrap();
                    let (oh, ow) = (got.shape()[2], got.shape()[3]);
                    let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
                    let (xd, wd, bd) = slices(x, wt, b);
                    let geom = ((c, h, w), (m, k, k), (s, d, p[0], p[1]), (oh, ow));
                    let activated = |v: Vec<u32>| -> Vec<u32> {
                        v.into_iter()
                            .map(|b| act.scalar(f32::from_bits(b)).to_bits())
                            .collect()
                    };
                    let want = in_order(xd, wd, bd, geom.0, geom.1, geom.2, geom.3, false);
                    assert_eq!(got, activated(want), "case {n}, {act:?}");
                    let reversed = in_order(xd, wd, bd, geom.0, geom.1, geom.2, geom.3, true);
                    assert_ne!(
                        got,
                        activated(reversed),
                        "case {n}, {act:?}: the tap order went unseen"
                    );
                }
            },
        );
    }
}
