//! MatMulInteger, ConvInteger and DynamicQuantizeLinear: both oracles against the specification's worked
//! examples, against each other on seeded random operands (every signedness, zero points per
//! tensor, row and column, broadcast batches), and on quotients that fall on ties, where the
//! broken variant (ties away from zero) must differ.
#![forbid(unsafe_code)]
use std::collections::BTreeMap;

use quorum_oracle::independent::Independent;
use quorum_oracle::reference::Reference;
use quorum_oracle::{Attr, DType, NodeSpec, Oracle, Value};

const ORACLES: [&dyn Oracle; 2] = [&Reference, &Independent];

fn spec(op: &str, opset: i64, outputs: usize) -> NodeSpec {
    NodeSpec {
        domain: String::new(),
        op_type: op.into(),
        opset,
        attrs: BTreeMap::new(),
        num_outputs: outputs,
    }
}

fn value(dtype: DType, shape: &[usize], data: &[f64]) -> Option<Value> {
    Some(Value::new(dtype, shape.to_vec(), data.to_vec()).unwrap())
}

fn lcg(s: &mut u64) -> u64 {
    *s = s
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *s >> 33
}

fn int8(shape: &[usize], signed: bool, s: &mut u64) -> Option<Value> {
    let n: usize = shape.iter().product();
    let data: Vec<f64> = (0..n)
        .map(|_| {
            let b = lcg(s) as u8;
            if signed { b as i8 as f64 } else { b as f64 }
        })
        .collect();
    value(if signed { DType::I8 } else { DType::U8 }, shape, &data)
}

/// The example of the specification's MatMulInteger page.
#[test]
fn matmul_integer_specification_example() {
    let a = value(
        DType::U8,
        &[4, 3],
        &[11., 7., 3., 10., 6., 2., 9., 5., 1., 8., 4., 0.],
    );
    let b = value(DType::U8, &[3, 2], &[1., 4., 2., 5., 3., 6.]);
    let za = value(DType::U8, &[], &[12.]);
    let zb = value(DType::U8, &[], &[0.]);
    let want = [-38., -83., -44., -98., -50., -113., -56., -128.];
    for o in ORACLES {
        let out = o
            .evaluate(
                &spec("MatMulInteger", 10, 1),
                &[a.clone(), b.clone(), za.clone(), zb.clone()],
            )
            .unwrap();
        assert_eq!(out[0].value.shape, vec![4, 2], "{}", o.name());
        assert_eq!(out[0].value.data, want, "{}", o.name());
        assert_eq!(out[0].value.dtype, DType::I32);
    }
}

/// The example of the specification's DynamicQuantizeLinear page, and values whose quotients are
/// ties (the range 0..255 makes the scale 1): 2.5 → 2, 3.5 → 4, 100.5 → 100. Rounding ties away
/// from zero (the broken variant) gives 3 and 101.
#[test]
fn dynamic_quantize_specification_example_and_ties() {
    let x = value(DType::F32, &[6], &[0., 2., -3., -2.5, 1.34, 0.5]);
    for o in ORACLES {
        let out = o
            .evaluate(
                &spec("DynamicQuantizeLinear", 11, 3),
                std::slice::from_ref(&x),
            )
            .unwrap();
        assert_eq!(
            out[0].value.data,
            [153., 255., 0., 26., 221., 179.],
            "{}",
            o.name()
        );
        assert_eq!(out[1].value.data, [(5.0f32 / 255.0) as f64], "{}", o.name());
        assert_eq!(out[2].value.data, [153.], "{}", o.name());
    }
    let x = value(DType::F32, &[5], &[0., 255., 2.5, 3.5, 100.5]);
    let away: Vec<f64> = [0.0f64, 255., 2.5, 3.5, 100.5]
        .iter()
        .map(|v| v.round())
        .collect();
    for o in ORACLES {
        let out = o
            .evaluate(
                &spec("DynamicQuantizeLinear", 11, 3),
                std::slice::from_ref(&x),
            )
            .unwrap();
        assert_eq!(out[0].value.data, [0., 255., 2., 4., 100.], "{}", o.name());
        assert_ne!(out[0].value.data, away, "the data must hold ties");
    }
    // All zeros: the scale is 1 and everything quantizes to the zero point 0.
    let x = value(DType::F32, &[3], &[0., 0., -0.]);
    for o in ORACLES {
        let out = o
            .evaluate(
                &spec("DynamicQuantizeLinear", 11, 3),
                std::slice::from_ref(&x),
            )
            .unwrap();
        assert_eq!(out[1].value.data, [(1.0f32 / 255.0) as f64], "{}", o.name());
        assert_eq!(out[0].value.data, [0., 0., 0.]);
    }
}

/// A MatMulInteger form: A's and B's shapes, their zero points' shapes (none where `None`).
type Form = (
    &'static [usize],
    &'static [usize],
    Option<&'static [usize]>,
    Option<&'static [usize]>,
);

/// Both oracles agree on random operands of every form they cover.
#[test]
fn both_oracles_agree_on_random_operands() {
    let mut s = 17u64;
    // (A, B, A's zero point, B's zero point)
    let forms: [Form; 6] = [
        (&[5, 7], &[7, 3], Some(&[]), Some(&[])),
        (&[2, 4, 9], &[9, 6], Some(&[4]), Some(&[6])),
        (&[3, 1, 2, 5], &[2, 5, 4], None, Some(&[4])),
        (&[6], &[6, 2], Some(&[]), None),
        (&[3, 6], &[6], None, None),
        (&[2, 40, 300], &[300, 17], Some(&[40]), Some(&[])),
    ];
    for (ash, bsh, za, zb) in forms {
        for (sa, sb) in [(false, true), (true, false), (false, false), (true, true)] {
            let inputs = vec![
                int8(ash, sa, &mut s),
                int8(bsh, sb, &mut s),
                za.and_then(|z| int8(z, sa, &mut s)),
                zb.and_then(|z| int8(z, sb, &mut s)),
            ];
            let outs: Vec<_> = ORACLES
                .iter()
                .map(|o| o.evaluate(&spec("MatMulInteger", 10, 1), &inputs).unwrap())
                .collect();
            assert_eq!(
                outs[0][0].value.shape, outs[1][0].value.shape,
                "{ash:?}×{bsh:?}"
            );
            assert_eq!(
                outs[0][0].value.data, outs[1][0].value.data,
                "{ash:?}×{bsh:?}"
            );
        }
    }
    for n in [1usize, 7, 1000] {
        let data: Vec<f64> = (0..n)
            .map(|_| ((lcg(&mut s) % 20_001) as f64 - 10_000.0) / 97.0)
            .map(|v| v as f32 as f64)
            .collect();
        let x = value(DType::F32, &[n], &data);
        let outs: Vec<_> = ORACLES
            .iter()
            .map(|o| {
                o.evaluate(
                    &spec("DynamicQuantizeLinear", 11, 3),
                    std::slice::from_ref(&x),
                )
                .unwrap()
            })
            .collect();
        for (k, (r, i)) in outs[0].iter().zip(&outs[1]).enumerate() {
            assert_eq!(r.value.data, i.value.data, "n {n}, output {k}");
        }
    }
}

fn conv_spec(attrs: &[(&str, Attr)]) -> NodeSpec {
    let mut s = spec("ConvInteger", 10, 1);
    for (k, v) in attrs {
        s.attrs.insert((*k).into(), v.clone());
    }
    s
}

/// The specification's two ConvInteger examples: x of 2..10 at zero point 1, W of ones, without
/// pads and with pads of 1 and W's zero points per output channel (0 and 1, so the second channel
/// is 0). Padding counts as the zero point; padding with raw zeros (the broken variant, computed
/// here as the convolution of x padded by hand with 0) differs at every border.
#[test]
fn conv_integer_specification_examples() {
    let x = value(
        DType::U8,
        &[1, 1, 3, 3],
        &[2., 3., 4., 5., 6., 7., 8., 9., 10.],
    );
    let xz = value(DType::U8, &[], &[1.]);
    let w1 = value(DType::U8, &[1, 1, 2, 2], &[1.; 4]);
    for o in ORACLES {
        let out = o
            .evaluate(&conv_spec(&[]), &[x.clone(), w1.clone(), xz.clone()])
            .unwrap();
        assert_eq!(out[0].value.shape, vec![1, 1, 2, 2], "{}", o.name());
        assert_eq!(out[0].value.data, [12., 16., 24., 28.], "{}", o.name());
        assert_eq!(out[0].value.dtype, DType::I32);
    }
    let w2 = value(DType::U8, &[2, 1, 2, 2], &[1.; 8]);
    let wz = value(DType::U8, &[2], &[0., 1.]);
    let pads = ("pads", Attr::Ints(vec![1, 1, 1, 1]));
    let mut want = vec![
        1., 3., 5., 3., 5., 12., 16., 9., 11., 24., 28., 15., 7., 15., 17., 9.,
    ];
    want.extend([0.; 16]);
    let mut padded = vec![0.; 25];
    for r in 0..3 {
        for c in 0..3 {
            padded[(r + 1) * 5 + c + 1] = (2 + r * 3 + c) as f64;
        }
    }
    let padded = value(DType::U8, &[1, 1, 5, 5], &padded);
    for o in ORACLES {
        let out = o
            .evaluate(
                &conv_spec(std::slice::from_ref(&pads)),
                &[x.clone(), w2.clone(), xz.clone(), wz.clone()],
            )
            .unwrap();
        assert_eq!(out[0].value.shape, vec![1, 2, 4, 4], "{}", o.name());
        assert_eq!(out[0].value.data, want, "{}", o.name());
        let raw_zeros = o
            .evaluate(
                &conv_spec(&[]),
                &[padded.clone(), w2.clone(), xz.clone(), wz.clone()],
            )
            .unwrap();
        assert_eq!(raw_zeros[0].value.data.len(), want.len());
        assert_ne!(
            raw_zeros[0].value.data[0], want[0],
            "a corner reads padding"
        );
        assert_eq!(
            raw_zeros[0].value.data[5], want[5],
            "an inner output does not"
        );
    }
}

/// Both oracles agree on ConvInteger of every form they cover: signedness of each operand, zero
/// points none, per tensor and per output channel, groups (depthwise too), strides, dilations,
/// explicit and automatic pads, 1-D and 2-D, K long enough that raw sums pass 2³¹ is not needed
/// (both wrap alike; the MatMulInteger test covers wrapping).
#[test]
fn both_oracles_agree_on_conv_integer() {
    let mut s = 71u64;
    type ConvForm = (
        &'static [usize],
        &'static [usize],
        Vec<(&'static str, Attr)>,
    );
    let forms: Vec<ConvForm> = vec![
        (&[1, 3, 7, 7], &[4, 3, 3, 3], vec![]),
        (
            &[2, 4, 9, 8],
            &[6, 2, 3, 2],
            vec![
                ("group", Attr::Int(2)),
                ("strides", Attr::Ints(vec![2, 1])),
                ("pads", Attr::Ints(vec![1, 0, 2, 1])),
            ],
        ),
        (
            &[1, 5, 10, 10],
            &[5, 1, 3, 3],
            vec![
                ("group", Attr::Int(5)),
                ("dilations", Attr::Ints(vec![2, 2])),
                ("auto_pad", Attr::String("SAME_UPPER".into())),
            ],
        ),
        (
            &[2, 3, 20],
            &[4, 3, 5],
            vec![
                ("auto_pad", Attr::String("SAME_LOWER".into())),
                ("strides", Attr::Ints(vec![3])),
            ],
        ),
        (&[1, 8, 6, 6], &[16, 8, 1, 1], vec![]),
    ];
    for (xs, ws, attrs) in &forms {
        let m = ws[0];
        for (sx, sw) in [(false, true), (true, false), (false, false), (true, true)] {
            for zp in 0..3 {
                let inputs = vec![
                    int8(xs, sx, &mut s),
                    int8(ws, sw, &mut s),
                    (zp > 0).then(|| int8(&[], sx, &mut s)).flatten(),
                    match zp {
                        1 => int8(&[], sw, &mut s),
                        2 => int8(&[m], sw, &mut s),
                        _ => None,
                    },
                ];
                let node = conv_spec(attrs);
                let outs: Vec<_> = ORACLES
                    .iter()
                    .map(|o| o.evaluate(&node, &inputs).unwrap())
                    .collect();
                assert_eq!(
                    outs[0][0].value.shape, outs[1][0].value.shape,
                    "{xs:?} {ws:?}"
                );
                assert_eq!(
                    outs[0][0].value.data, outs[1][0].value.data,
                    "{xs:?} {ws:?} zp {zp}"
                );
                assert!(outs[0][0].value.data.iter().any(|&v| v != 0.0));
            }
        }
    }
}

/// `QLinearMatMul`'s eight inputs (or `QLinearConv`'s nine) in their order.
#[allow(clippy::too_many_arguments)]
fn qlinear_inputs(
    a: Option<Value>,
    sa: f64,
    za: Option<Value>,
    b: Option<Value>,
    sb: &[f64],
    zb: Option<Value>,
    sy: f64,
    zy: Option<Value>,
) -> Vec<Option<Value>> {
    let scalar = |v: f64| value(DType::F32, &[], &[v as f32 as f64]);
    let sb: Vec<f64> = sb.iter().map(|&v| v as f32 as f64).collect();
    let sb_shape: &[usize] = if sb.len() == 1 { &[] } else { &[sb.len()] };
    vec![
        a,
        scalar(sa),
        za,
        b,
        value(DType::F32, sb_shape, &sb),
        zb,
        scalar(sy),
        zy,
    ]
}

/// `v` rounded to the nearest f16 (ties to even), for normal values: 11 significant bits.
fn half_round(v: f64) -> f64 {
    let e = v.abs().log2().floor() as i32;
    let ulp = 2f64.powi(e - 10);
    (v / ulp).round_ties_even() * ulp
}

/// The specification's QLinearMatMul (2-D, u8; f32 and f16 scales) and QLinearConv examples.
#[test]
fn qlinear_specification_examples() {
    let inputs = qlinear_inputs(
        value(
            DType::U8,
            &[2, 4],
            &[208., 236., 0., 238., 3., 214., 255., 29.],
        ),
        0.0066,
        value(DType::U8, &[1], &[113.]),
        value(
            DType::U8,
            &[4, 3],
            &[
                152., 51., 244., 60., 26., 255., 0., 127., 246., 127., 254., 247.,
            ],
        ),
        &[0.00705],
        value(DType::U8, &[1], &[114.]),
        0.0107,
        value(DType::U8, &[1], &[118.]),
    );
    // The specification's f16-scale form (opset 21) gives the same bytes: the scales as f16.
    let mut halves = inputs.clone();
    for i in [1, 4, 6] {
        let v = halves[i].as_ref().unwrap();
        let h = half_round(v.data[0]);
        halves[i] = value(DType::F16, &v.shape, &[h]);
    }
    for o in ORACLES {
        for (inputs, opset) in [(&inputs, 10), (&halves, 21)] {
            let out = o
                .evaluate(&spec("QLinearMatMul", opset, 1), inputs)
                .unwrap();
            assert_eq!(out[0].value.dtype, DType::U8);
            assert_eq!(
                out[0].value.data,
                [168., 115., 255., 1., 66., 151.],
                "{} opset {opset}",
                o.name()
            );
        }
    }
    let x = [
        255., 174., 162., 25., 203., 168., 58., 15., 59., 237., 95., 129., 0., 64., 56., 242.,
        153., 221., 168., 12., 166., 232., 178., 186., 195., 237., 162., 237., 188., 39., 124.,
        77., 80., 102., 43., 127., 230., 21., 83., 41., 40., 134., 255., 154., 92., 141., 42.,
        148., 247.,
    ];
    let want = [
        0., 81., 93., 230., 52., 87., 197., 240., 196., 18., 160., 126., 255., 191., 199., 13.,
        102., 34., 87., 243., 89., 23., 77., 69., 60., 18., 93., 18., 67., 216., 131., 178., 175.,
        153., 212., 128., 25., 234., 172., 214., 215., 121., 0., 101., 163., 114., 213., 107., 8.,
    ];
    let inputs = qlinear_inputs(
        value(DType::U8, &[1, 1, 7, 7], &x),
        0.003_692_046_97,
        value(DType::U8, &[], &[132.]),
        value(DType::U8, &[1, 1, 1, 1], &[0.]),
        &[0.001_727_945_75],
        value(DType::U8, &[1], &[255.]),
        0.001_626_812_62,
        value(DType::U8, &[], &[123.]),
    );
    for o in ORACLES {
        let out = o.evaluate(&spec("QLinearConv", 10, 1), &inputs).unwrap();
        assert_eq!(out[0].value.data, want, "{}", o.name());
    }
}

/// Requantization on ties: a multiplier of 1/2 on odd sums rounds half to even (1.5 → 2,
/// 2.5 → 2, −0.5 → 0), saturates at both ends, and adds QLinearConv's bias before it; rounding
/// ties away from zero (the broken variant) gives other values on the same data.
#[test]
fn qlinear_requantization_ties_saturation_and_bias() {
    // A = [[3], [5], [-1], [255]] (i8 A centered on 0 except the last, u8), B = [[1]].
    let inputs = qlinear_inputs(
        value(DType::I8, &[4, 1], &[3., 5., -1., 127.]),
        0.5,
        None,
        value(DType::I8, &[1, 1], &[1.]),
        &[1.0],
        None,
        1.0,
        value(DType::I8, &[], &[0.]),
    );
    let away = [2., 3., -1., 64.];
    for o in ORACLES {
        let out = o.evaluate(&spec("QLinearMatMul", 10, 1), &inputs).unwrap();
        assert_eq!(out[0].value.data, [2., 2., 0., 64.], "{}", o.name());
        assert_ne!(out[0].value.data, away, "the data must hold ties");
    }
    // Saturation: sums far past both ends with a u8 output and its zero point.
    let inputs = qlinear_inputs(
        value(DType::U8, &[2, 2], &[255., 255., 0., 0.]),
        1.0,
        value(DType::U8, &[], &[128.]),
        value(DType::U8, &[2, 1], &[255., 255.]),
        &[1.0],
        value(DType::U8, &[], &[0.]),
        1.0,
        value(DType::U8, &[], &[100.]),
    );
    for o in ORACLES {
        let out = o.evaluate(&spec("QLinearMatMul", 10, 1), &inputs).unwrap();
        assert_eq!(out[0].value.data, [255., 0.], "{}", o.name());
    }
    // QLinearConv with a bias per channel: sums 1 and 3 (x = 1, w = 1 and 3) plus biases 2 and
    // -4 give 3 and -1, at a multiplier of 1/2: 1.5 → 2 and -0.5 → 0 (with zero point 10: 12, 10).
    let mut inputs = qlinear_inputs(
        value(DType::U8, &[1, 1, 1, 1], &[1.]),
        0.5,
        None,
        value(DType::U8, &[2, 1, 1, 1], &[1., 3.]),
        &[1.0, 1.0],
        None,
        1.0,
        value(DType::U8, &[], &[10.]),
    );
    inputs.push(value(DType::I32, &[2], &[2., -4.]));
    for o in ORACLES {
        let out = o.evaluate(&spec("QLinearConv", 10, 1), &inputs).unwrap();
        assert_eq!(out[0].value.data, [12., 10.], "{}", o.name());
    }
}

/// Both oracles agree on QLinearMatMul and QLinearConv of every form they cover: signedness,
/// zero points present or not, per-column (per-channel) scales of B (W), biases, geometries.
#[test]
fn both_oracles_agree_on_qlinear_ops() {
    let mut s = 313u64;
    let unit = |s: &mut u64| (lcg(s) % 10_000) as f64 / 10_000.0;
    for (ash, bsh) in [
        (&[5usize, 7][..], &[7usize, 3][..]),
        (&[2, 4, 9], &[9, 6]),
        (&[3, 20, 40], &[3, 40, 17]),
    ] {
        for (sa, sb) in [(false, true), (true, false), (false, false), (true, true)] {
            let n = bsh[bsh.len() - 1];
            let per: Vec<f64> = (0..n).map(|_| 0.001 + unit(&mut s) * 0.01).collect();
            let with_zp = lcg(&mut s).is_multiple_of(2);
            let (a, za, b, zb) = (
                int8(ash, sa, &mut s),
                int8(&[], sa, &mut s),
                int8(bsh, sb, &mut s),
                int8(&[], sb, &mut s),
            );
            // y's scale from the sums' reach, so that the outputs are not all saturated.
            let sums = Reference
                .evaluate(
                    &spec("MatMulInteger", 10, 1),
                    &[a.clone(), b.clone(), za.clone(), zb.clone()],
                )
                .unwrap();
            let reach = sums[0]
                .value
                .data
                .iter()
                .fold(1.0f64, |m, v| m.max(v.abs()));
            let sa_ = 0.01 + unit(&mut s) * 0.1;
            let sy = sa_ * per[0] * reach / (60.0 + unit(&mut s) * 60.0);
            let inputs = qlinear_inputs(
                a,
                sa_,
                za,
                b,
                if with_zp { &per } else { &per[..1] },
                zb,
                sy,
                if with_zp { int8(&[], sa, &mut s) } else { None },
            );
            let outs: Vec<_> = ORACLES
                .iter()
                .map(|o| o.evaluate(&spec("QLinearMatMul", 10, 1), &inputs).unwrap())
                .collect();
            assert_eq!(
                outs[0][0].value.data, outs[1][0].value.data,
                "{ash:?}×{bsh:?}"
            );
            let distinct: std::collections::BTreeSet<i64> =
                outs[0][0].value.data.iter().map(|&v| v as i64).collect();
            // Not one value everywhere (a u8 output without a zero point saturates every
            // negative sum at 0, so two values can be all a small product shows).
            assert!(distinct.len() >= 2, "one output value: {distinct:?}");
        }
    }
    for (xs, ws, group) in [
        (&[1usize, 3, 7, 7][..], &[4usize, 3, 3, 3][..], 1i64),
        (&[2, 4, 6, 5], &[6, 2, 3, 1], 2),
        (&[1, 8, 5, 5], &[8, 1, 3, 3], 8),
    ] {
        for (sx, sw) in [(false, true), (true, false), (false, false), (true, true)] {
            let m = ws[0];
            let per: Vec<f64> = (0..m).map(|_| 0.001 + unit(&mut s) * 0.01).collect();
            let mut inputs = qlinear_inputs(
                int8(xs, sx, &mut s),
                0.01 + unit(&mut s) * 0.1,
                int8(&[], sx, &mut s),
                int8(ws, sw, &mut s),
                &per,
                int8(&[m], sw, &mut s),
                0.05 + unit(&mut s),
                int8(&[], sx, &mut s),
            );
            let bias: Vec<f64> = (0..m)
                .map(|_| (lcg(&mut s) % 2001) as f64 - 1000.0)
                .collect();
            inputs.push(value(DType::I32, &[m], &bias));
            let mut node = spec("QLinearConv", 10, 1);
            node.attrs.insert("group".into(), Attr::Int(group));
            node.attrs
                .insert("pads".into(), Attr::Ints(vec![1, 0, 1, 0]));
            let outs: Vec<_> = ORACLES
                .iter()
                .map(|o| o.evaluate(&node, &inputs).unwrap())
                .collect();
            assert_eq!(outs[0][0].value.shape, outs[1][0].value.shape);
            assert_eq!(
                outs[0][0].value.data, outs[1][0].value.data,
                "{xs:?} {ws:?}"
            );
        }
    }
}
