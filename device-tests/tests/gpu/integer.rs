//! MatMulInteger and DynamicQuantizeLinear (dynamic quantization) on CUDA against both oracles,
//! exactly: u8 and i8 operands (each), zero points none, per tensor, per row of A and per column
//! of B, B a weight shared by A's batches or batched like A; shapes at and past the 64×64 tile and
//! the 16-byte K stage, K not a multiple of 4, a K long enough that raw sums wrap past 2³¹
//! while the centered result does not. DynamicQuantizeLinear over one element to more blocks than
//! the extremes pass has (its partials then reduced in a grid-strided loop), one-signed inputs (a
//! bound at 0) and half steps of the scale (ties). Broadcast batches decline to the CPU and stay
//! right. ConvInteger over the convolutions of quantized CNNs (its own sweep below).
use crate::harness::*;
use quorum::{DType, Tensor};

/// 8-bit values of `dtype` over its whole range, never all zeros.
fn bytes(seed: u64, dtype: DType, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let (lo, hi) = if dtype == DType::I8 {
        (-128.0, 127.0)
    } else {
        (0.0, 255.0)
    };
    let u = rand_range(seed, &[n.max(1)], 0.0, 1.0)
        .to_f64_vec()
        .unwrap();
    let mut v: Vec<f64> = (0..n)
        .map(|i| (lo + (u[i] * (hi - lo + 1.0)).floor()).min(hi))
        .collect();
    if let Some(x) = v.first_mut()
        && *x == 0.0
    {
        *x = 7.0;
    }
    Tensor::from_f64s(dtype, shape, v).unwrap()
}

#[test]
fn matmul_integer_sweep() {
    if int8_off() {
        return;
    }
    let mut seed = 40u64;
    // (A, B, A's zero point shape, B's zero point shape; None: no zero point)
    #[allow(clippy::type_complexity)]
    let forms: &[(&[usize], &[usize], Option<&[usize]>, Option<&[usize]>)] = &[
        (&[1, 1], &[1, 1], None, None),
        (&[5, 7], &[7, 3], Some(&[]), Some(&[])),
        (&[64, 64], &[64, 64], Some(&[64]), Some(&[64])),
        (&[65, 33], &[33, 130], Some(&[]), Some(&[130])),
        (&[2, 3, 17, 40], &[40, 9], Some(&[17]), None),
        (&[3, 20, 50], &[3, 50, 30], Some(&[]), Some(&[30])),
        (&[128, 300], &[300, 96], Some(&[]), Some(&[])),
        (&[0, 5], &[5, 4], None, None),
    ];
    for (ash, bsh, za, zb) in forms {
        for (ta, tb) in [
            (DType::U8, DType::I8),
            (DType::I8, DType::U8),
            (DType::U8, DType::U8),
            (DType::I8, DType::I8),
        ] {
            seed += 3;
            let mut c = Case::new("MatMulInteger")
                .opset(10)
                .input(bytes(seed, ta, ash))
                .constant(bytes(seed + 1, tb, bsh));
            if let Some(z) = za {
                c = c.constant(bytes(seed + 2, ta, z));
                if let Some(z) = zb {
                    c = c.constant(bytes(seed + 3, tb, z));
                }
            }
            c.check();
        }
    }
    // K 70,000: A at its zero point (255) against B = 127: the raw sum 255·127·70,000 wraps past
    // 2³¹, the centered result is 0; the corrections must bring it back exactly.
    let (m, k, n) = (3usize, 70_000usize, 5usize);
    let a = Tensor::from_f64s(DType::U8, &[m, k], vec![255.0; m * k]).unwrap();
    let b = bytes(9, DType::I8, &[k, n]);
    let za = Tensor::from_f64s(DType::U8, &[], vec![255.0]).unwrap();
    Case::new("MatMulInteger")
        .opset(10)
        .input(a)
        .constant(b)
        .constant(za)
        .check();
}

/// Broadcast batches are the CPU's: the node declines on CUDA and the answer stays right.
#[test]
fn matmul_integer_broadcast_batches_stay_right() {
    Case::new("MatMulInteger")
        .opset(10)
        .input(bytes(1, DType::U8, &[1, 4, 7]))
        .input(bytes(2, DType::I8, &[2, 7, 3]))
        .allow_fallback()
        .check();
}

#[test]
fn dynamic_quantize_sweep() {
    if int8_off() {
        return;
    }
    let shapes: &[&[usize]] = &[&[], &[7], &[1000], &[3, 200_000], &[2, 64, 56, 56]];
    let mut seed = 900u64;
    for shape in shapes {
        for form in 0..4 {
            seed += 1;
            let x = match form {
                0 => rand_range(seed, shape, -3.0, 5.0),
                1 => rand_range(seed, shape, 0.001, 9.0),
                2 => rand_range(seed, shape, -9.0, -0.001),
                _ => {
                    // Half steps of the scale 2/255 (range [-1, 1]): quotients on ties.
                    let n: usize = shape.iter().product();
                    let u = rand_range(seed, &[n.max(1)], 0.0, 1.0)
                        .to_f64_vec()
                        .unwrap();
                    let s = (2.0f32 / 255.0) as f64;
                    let mut v: Vec<f64> = (0..n)
                        .map(|i| ((u[i] * 254.0).floor() - 127.0 + 0.5) * s)
                        .map(|v: f64| (v as f32) as f64)
                        .collect();
                    if n > 1 {
                        v[0] = -1.0;
                        v[1] = 1.0;
                    }
                    Tensor::from_f64s(DType::F32, shape, v).unwrap()
                }
            };
            Case::new("DynamicQuantizeLinear")
                .opset(11)
                .input(x)
                .outputs(3)
                .check();
        }
    }
}

/// ConvInteger against both oracles, exactly: every signedness of x and w, x's zero point none or
/// per tensor, w's none, per tensor or per output channel; the convolutions of quantized CNNs (a
/// 7×7 stride-2 stem, 3×3 with pads at strides 1 and 2, pointwise, depthwise, grouped), a 1-D and
/// a dilated one with auto_pad, sizes past the 64×64 tile in channels and positions.
#[test]
fn conv_integer_sweep() {
    if conv_requant_off() {
        return;
    }
    let mut seed = 4000u64;
    // (x, w, attributes)
    #[allow(clippy::type_complexity)]
    let forms: &[(&[usize], &[usize], &[(&str, &[i64])], Option<&str>)] = &[
        (
            &[1, 3, 32, 32],
            &[16, 3, 7, 7],
            &[("strides", &[2, 2]), ("pads", &[3, 3, 3, 3])],
            None,
        ),
        (
            &[2, 16, 14, 14],
            &[70, 16, 3, 3],
            &[("pads", &[1, 1, 1, 1])],
            None,
        ),
        (
            &[1, 24, 15, 15],
            &[32, 24, 3, 3],
            &[("strides", &[2, 2]), ("pads", &[1, 1, 1, 1])],
            None,
        ),
        (&[2, 40, 9, 9], &[72, 40, 1, 1], &[], None),
        (
            &[1, 12, 10, 10],
            &[12, 1, 3, 3],
            &[("group", &[12]), ("pads", &[1, 1, 1, 1])],
            None,
        ),
        (&[1, 8, 6, 6], &[12, 4, 3, 3], &[("group", &[2])], None),
        (
            &[2, 6, 50],
            &[5, 6, 5],
            &[("strides", &[3])],
            Some("SAME_LOWER"),
        ),
        (
            &[1, 4, 9, 9],
            &[6, 4, 3, 3],
            &[("dilations", &[2, 2])],
            Some("SAME_UPPER"),
        ),
    ];
    for (xs, ws, attrs, auto) in forms {
        for (i, (tx, tw)) in [
            (DType::U8, DType::I8),
            (DType::I8, DType::U8),
            (DType::U8, DType::U8),
            (DType::I8, DType::I8),
        ]
        .into_iter()
        .enumerate()
        {
            seed += 5;
            let mut c = Case::new("ConvInteger")
                .opset(10)
                .input(bytes(seed, tx, xs))
                .constant(bytes(seed + 1, tw, ws));
            for (name, v) in attrs.iter() {
                c = if *name == "group" {
                    c.attr_i(name, v[0])
                } else {
                    c.attr_ints(name, v)
                };
            }
            if let Some(a) = auto {
                c = c.attr_s("auto_pad", a);
            }
            // Zero points: none (i = 0), x's alone (1), both per tensor (2), w's per channel (3).
            if i > 0 {
                c = c.constant(bytes(seed + 2, tx, &[]));
            }
            if i == 2 {
                c = c.constant(bytes(seed + 3, tw, &[]));
            } else if i == 3 {
                c = c.constant(bytes(seed + 3, tw, &ws[..1]));
            }
            c.check();
        }
    }
}

/// An f32 scalar, or a 1-D f32 of `v` where it has more than one value.
fn scales(v: &[f64]) -> Tensor {
    let shape: &[usize] = if v.len() == 1 { &[] } else { &[v.len()] };
    Tensor::from_f64s(DType::F32, shape, v.to_vec()).unwrap()
}

/// The requantizing ops' scales for sums of `k` terms: x's, w's (`lines` of them when `per`)
/// and y's, powers of two when `pow2` (requantized values on ties), y's near the sums' spread.
fn qscales(seed: u64, lines: usize, per: bool, k: usize, pow2: bool) -> (f64, Vec<f64>, f64) {
    let u = rand_range(seed, &[lines + 1], 0.0, 1.0)
        .to_f64_vec()
        .unwrap();
    let one = |v: f64| {
        if pow2 {
            2f64.powi(-(2 + (v * 6.0) as i32))
        } else {
            (0.001 + v * 0.05) as f32 as f64
        }
    };
    let sx = one(u[0]);
    let sw: Vec<f64> = (0..if per { lines } else { 1 })
        .map(|i| one(u[i + 1]))
        .collect();
    let mut sy = sx * sw[0] * (k as f64).sqrt() * 74.0 * 74.0 / 60.0;
    if pow2 {
        sy = 2f64.powi(sy.log2().round() as i32);
    }
    (sx, sw, sy)
}

/// QLinearMatMul and QLinearConv against both oracles, exactly: the same products as
/// MatMulInteger's and ConvInteger's, requantized per tensor and per column (channel), with and
/// without y's zero point and QLinearConv's bias, on ties (power-of-two scales) and saturating;
/// a K past the bound where 32-bit sums could wrap declines to the CPU and stays right.
#[test]
fn qlinear_sweep() {
    if conv_requant_off() {
        return;
    }
    let mut seed = 7000u64;
    let mm: &[(&[usize], &[usize])] = &[
        (&[5, 7], &[7, 3]),
        (&[64, 64], &[64, 64]),
        (&[2, 65, 300], &[300, 130]),
        (&[3, 20, 50], &[3, 50, 30]),
    ];
    for (i, (ash, bsh)) in mm.iter().enumerate() {
        for (j, (ta, tb)) in [
            (DType::U8, DType::I8),
            (DType::I8, DType::U8),
            (DType::U8, DType::U8),
            (DType::I8, DType::I8),
        ]
        .into_iter()
        .enumerate()
        {
            seed += 7;
            let n = bsh[bsh.len() - 1];
            let k = bsh[bsh.len() - 2];
            let (sx, sw, sy) = qscales(seed, n, j % 2 == 0, k, (i + j) % 2 == 1);
            let mut c = Case::new("QLinearMatMul")
                .opset(10)
                .input(bytes(seed, ta, ash))
                .constant(scales(&[sx]))
                .constant(bytes(seed + 1, ta, &[]))
                .constant(bytes(seed + 2, tb, bsh))
                .constant(scales(&sw))
                .constant(bytes(seed + 3, tb, &[]))
                .constant(scales(&[sy]));
            if j != 3 {
                c = c.constant(bytes(seed + 4, if j == 1 { DType::U8 } else { ta }, &[]));
            }
            c.check();
        }
    }
    // K = 40,000: past the bound, the node runs on the CPU.
    let (sx, sw, sy) = qscales(5, 1, false, 40_000, false);
    Case::new("QLinearMatMul")
        .opset(10)
        .input(bytes(11, DType::U8, &[2, 40_000]))
        .constant(scales(&[sx]))
        .constant(bytes(12, DType::U8, &[]))
        .constant(bytes(13, DType::I8, &[40_000, 3]))
        .constant(scales(&sw))
        .absent()
        .constant(scales(&[sy]))
        .allow_fallback()
        .check();
    #[allow(clippy::type_complexity)]
    let convs: &[(&[usize], &[usize], &[(&str, &[i64])])] = &[
        (
            &[1, 3, 32, 32],
            &[16, 3, 7, 7],
            &[("strides", &[2, 2]), ("pads", &[3, 3, 3, 3])],
        ),
        (
            &[2, 16, 14, 14],
            &[70, 16, 3, 3],
            &[("pads", &[1, 1, 1, 1])],
        ),
        (&[2, 40, 9, 9], &[72, 40, 1, 1], &[]),
        (
            &[1, 12, 10, 10],
            &[12, 1, 3, 3],
            &[("group", &[12]), ("pads", &[1, 1, 1, 1])],
        ),
        (&[1, 8, 6, 6], &[12, 4, 3, 3], &[("group", &[2])]),
    ];
    for (i, (xs, ws, attrs)) in convs.iter().enumerate() {
        for (j, (tx, tw)) in [
            (DType::U8, DType::I8),
            (DType::I8, DType::U8),
            (DType::U8, DType::U8),
            (DType::I8, DType::I8),
        ]
        .into_iter()
        .enumerate()
        {
            seed += 11;
            let m = ws[0];
            let k: usize = ws[1..].iter().product();
            let (sx, sw, sy) = qscales(seed, m, j != 1, k, (i + j) % 3 == 0);
            let mut c = Case::new("QLinearConv")
                .opset(10)
                .input(bytes(seed, tx, xs))
                .constant(scales(&[sx]))
                .constant(bytes(seed + 1, tx, &[]))
                .constant(bytes(seed + 2, tw, ws))
                .constant(scales(&sw));
            c = if j == 2 {
                c.absent()
            } else {
                c.constant(bytes(seed + 3, tw, if j == 0 { &ws[..1] } else { &[] }))
            };
            c = c.constant(scales(&[sy]));
            for (name, v) in attrs.iter() {
                c = if *name == "group" {
                    c.attr_i(name, v[0])
                } else {
                    c.attr_ints(name, v)
                };
            }
            // y's zero point and a bias on three of the four forms; the last has neither.
            if j != 3 {
                c = c.constant(bytes(seed + 4, tx, &[]));
                let b = rand_range(seed + 5, &[m], -3000.0, 3000.0)
                    .to_f64_vec()
                    .unwrap()
                    .into_iter()
                    .map(f64::round)
                    .collect();
                c = c.constant(Tensor::from_f64s(DType::I32, &[m], b).unwrap());
            }
            c.check();
        }
    }
}
