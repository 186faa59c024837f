//! The 8-bit integer path against the exact f64 path it replaces, on random operands of every
//! signedness, zero points per tensor, row, column and output channel, batches, groups, padding,
//! strides and pointwise convolutions; with every kernel this CPU runs (the portable one always).
use ndarray::{ArrayD, IxDyn};

use super::super::int::{Geom, centered, conv_f64, matmul_f64};
use super::*;
use crate::ir::Node;
use crate::ops::NoSubgraphs;

fn lcg(s: &mut u64) -> u64 {
    *s = s
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *s >> 33
}

fn kernels() -> Vec<IntKernel> {
    [IntKernel::Portable, IntKernel::Vnni]
        .into_iter()
        .filter(|k| k.is_supported())
        .collect()
}

/// A random u8 or i8 tensor.
fn int8(shape: &[usize], signed: bool, s: &mut u64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<u8> = (0..n).map(|_| lcg(s) as u8).collect();
    if signed {
        Tensor::I8(
            ArrayD::from_shape_vec(IxDyn(shape), v.iter().map(|&b| b as i8).collect()).unwrap(),
        )
    } else {
        Tensor::U8(ArrayD::from_shape_vec(IxDyn(shape), v).unwrap())
    }
}

fn with_ctx<R>(f: impl FnOnce(&OpCtx) -> R) -> R {
    let node = Node {
        name: "n".into(),
        op_type: "MatMulInteger".into(),
        domain: String::new(),
        opset: 10,
        inputs: vec![],
        outputs: vec![],
        attrs: Default::default(),
    };
    f(&OpCtx {
        node: &node,
        runner: &NoSubgraphs,
        max_tensor_bytes: 1 << 30,
    })
}

/// The f64 path's result wrapped to i32, as MatMulInteger's kernel writes it.
fn reference_matmul(a: &Tensor, za: Option<&Tensor>, b: &Tensor, zb: Option<&Tensor>) -> Vec<i32> {
    let av = centered(a, za, true, "A").unwrap();
    let bv = centered(b, zb, false, "B").unwrap();
    let (c, _) = matmul_f64(&av, a.shape(), &bv, b.shape()).unwrap();
    c.iter().map(|&v| v as i64 as i32).collect()
}

/// [`matmul_with`]'s sums.
fn sums_with(
    kern: IntKernel,
    ctx: &OpCtx,
    a: &Tensor,
    za: Option<&Tensor>,
    b: &Tensor,
    zb: Option<&Tensor>,
) -> OpResult<Option<(Vec<i32>, Vec<usize>)>> {
    Ok(
        matmul_with(kern, ctx, a, za, b, zb, None)?.and_then(|(p, shape)| match p {
            Product::Sums(c) => Some((c, shape)),
            Product::Levels(_) => None,
        }),
    )
}

/// A, B and their zero points' shapes.
type Case = (
    &'static [usize],
    &'static [usize],
    &'static [usize],
    &'static [usize],
);

#[test]
fn matmul_matches_the_f64_path() {
    let mut s = 21u64;
    // (A shape, B shape, A's zero point shape, B's zero point shape)
    let cases: [Case; 6] = [
        (&[5, 7], &[7, 9], &[], &[]),
        (&[2, 3, 33, 70], &[70, 40], &[33], &[]),
        (&[4, 300], &[300, 37], &[], &[37]),
        (&[2, 9, 13], &[2, 13, 17], &[9], &[17]),
        (&[1, 1], &[1, 1], &[1], &[1]),
        (&[3, 0], &[0, 4], &[], &[]),
    ];
    for kern in kernels() {
        for (ci, &(ash, bsh, zash, zbsh)) in cases.iter().enumerate() {
            for (sa, sb) in [(false, true), (true, false), (false, false), (true, true)] {
                let a = int8(ash, sa, &mut s);
                let b = int8(bsh, sb, &mut s);
                let za = int8(zash, sa, &mut s);
                let zb = int8(zbsh, sb, &mut s);
                // The last cases leave a zero point out.
                let zb_opt = (ci != 4).then_some(&zb);
                let want = reference_matmul(&a, Some(&za), &b, zb_opt);
                let (got, shape) = with_ctx(|ctx| sums_with(kern, ctx, &a, Some(&za), &b, zb_opt))
                    .unwrap()
                    .expect("the integer path applies");
                assert_eq!(shape.iter().product::<usize>(), want.len());
                assert_eq!(got, want, "{kern:?} case {ci} signed {sa}/{sb}");
                // Requantized as stored: the levels the sums' requantization gives.
                let (mult, zp, out) = (1.0 / 97.0, if sa { -3.0 } else { 131.0 }, a.dtype());
                let levels = with_ctx(|ctx| {
                    matmul_with(kern, ctx, &a, Some(&za), &b, zb_opt, Some((mult, zp, out)))
                })
                .unwrap()
                .and_then(|(p, _)| match p {
                    Product::Levels(t) => Some(t),
                    Product::Sums(_) => None,
                })
                .expect("the integer path applies");
                let want = requantize_runs(&got, got.len(), &[(0.0, mult)], zp, out, &shape)
                    .unwrap()
                    .unwrap();
                assert_eq!(
                    to_f64_vec(&levels).unwrap(),
                    to_f64_vec(&want).unwrap(),
                    "{kern:?} case {ci} signed {sa}/{sb}: requantized as stored"
                );
            }
        }
        // Shapes it leaves to the f64 path: a 1-D operand, batches that broadcast.
        let a = int8(&[7], false, &mut s);
        let b = int8(&[7, 3], true, &mut s);
        assert!(
            with_ctx(|ctx| sums_with(kern, ctx, &a, None, &b, None))
                .unwrap()
                .is_none()
        );
        let a = int8(&[1, 4, 7], false, &mut s);
        let b = int8(&[2, 7, 3], true, &mut s);
        assert!(
            with_ctx(|ctx| sums_with(kern, ctx, &a, None, &b, None))
                .unwrap()
                .is_none()
        );
    }
}

/// Convolution geometries: a padded strided grouped 3×3, a pointwise, a depthwise with dilation,
/// a 1-D convolution; x's zero point per tensor, w's per tensor and per output channel.
#[test]
fn conv_matches_the_f64_path() {
    let mut s = 5u64;
    let geoms = [
        // n, c, m, group, ins, k, stride, dil, pad (begin; the end pads are in outs)
        (
            2,
            4,
            6,
            2,
            vec![9, 8],
            vec![3, 3],
            vec![2, 1],
            vec![1, 1],
            vec![1, 1],
            vec![5, 8],
        ),
        (
            1,
            16,
            40,
            1,
            vec![7, 5],
            vec![1, 1],
            vec![1, 1],
            vec![1, 1],
            vec![0, 0],
            vec![7, 5],
        ),
        (
            1,
            8,
            8,
            8,
            vec![10, 10],
            vec![3, 3],
            vec![1, 1],
            vec![2, 2],
            vec![2, 2],
            vec![10, 10],
        ),
        // Dilated kernels whose taps all fall in padding for some kernel column: left of the
        // row (begin pad 2, tap 0) and past its end (tap 2 reads column 4 of a row of 2); the
        // ConvInteger property test found the first panicking the row copy.
        (
            1,
            2,
            2,
            2,
            vec![1, 3],
            vec![1, 3],
            vec![1, 1],
            vec![1, 2],
            vec![0, 2],
            vec![1, 1],
        ),
        (
            1,
            2,
            3,
            1,
            vec![1, 2],
            vec![1, 3],
            vec![1, 1],
            vec![1, 4],
            vec![0, 4],
            vec![1, 1],
        ),
        // Strided along the rows (2 and 3), with padding at both ends and a dilated tap: the row
        // copy's strided runs, and outputs whose taps start or end in the padding.
        (
            1,
            3,
            5,
            1,
            vec![11, 13],
            vec![3, 3],
            vec![2, 2],
            vec![1, 1],
            vec![1, 1],
            vec![6, 7],
        ),
        (
            2,
            4,
            4,
            2,
            vec![4, 10],
            vec![2, 3],
            vec![1, 3],
            vec![1, 2],
            vec![0, 2],
            vec![3, 3],
        ),
        // A row stride past the whole row: one output reads inside, the next only padding.
        (
            1,
            2,
            2,
            1,
            vec![3, 3],
            vec![1, 2],
            vec![1, 4],
            vec![1, 1],
            vec![0, 1],
            vec![3, 2],
        ),
        // A 1×1 kernel with an end pad only: not pointwise (the output outgrows the input).
        (
            1,
            2,
            2,
            2,
            vec![1, 1],
            vec![1, 1],
            vec![1, 1],
            vec![1, 1],
            vec![0, 0],
            vec![2, 1],
        ),
        (
            3,
            5,
            7,
            1,
            vec![30],
            vec![4],
            vec![3],
            vec![1],
            vec![2],
            vec![10],
        ),
    ];
    for kern in kernels() {
        for (gi, (n, c, m, group, ins, k, stride, dil, pad, outs)) in geoms.iter().enumerate() {
            let g = Geom {
                n: *n,
                c: *c,
                m: *m,
                group: *group,
                ins: ins.clone(),
                k: k.clone(),
                stride: stride.clone(),
                dil: dil.clone(),
                pad: pad.clone(),
                outs: outs.clone(),
            };
            let xs: Vec<usize> = [*n, *c].into_iter().chain(ins.iter().copied()).collect();
            let ws: Vec<usize> = [*m, c / group]
                .into_iter()
                .chain(k.iter().copied())
                .collect();
            for (sx, sw) in [(false, true), (true, false), (false, false), (true, true)] {
                let x = int8(&xs, sx, &mut s);
                let w = int8(&ws, sw, &mut s);
                let zx = int8(&[], sx, &mut s);
                let zw = int8(
                    if gi % 2 == 0 {
                        &[]
                    } else {
                        std::slice::from_ref(m)
                    },
                    sw,
                    &mut s,
                );
                let xv = centered(&x, Some(&zx), false, "x").unwrap();
                let wvals = to_f64_vec(&w).unwrap();
                let zwv = to_f64_vec(&zw).unwrap();
                let per = wvals.len() / m;
                let wv: Vec<f64> = wvals
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| v - zwv[if zwv.len() == 1 { 0 } else { i / per }])
                    .collect();
                let want: Vec<i32> = conv_f64(&g, &xv, &wv).iter().map(|&v| v as i32).collect();
                let got = conv_sums(kern, &g, &x, Some(&zx), &w, Some(&zw))
                    .unwrap()
                    .expect("the integer path applies");
                assert_eq!(got, want, "{kern:?} geometry {gi} signed {sx}/{sw}");
                // Requantized as stored: the levels the sums' requantization gives, per output
                // channel's (bias, multiplier), into x's type.
                let osz: usize = outs.iter().product();
                let params: Vec<(f64, f64)> = (0..*m)
                    .map(|c| ((c as f64 - 2.0) * 17.0, 1.0 / (9.0 + 5.0 * c as f64)))
                    .collect();
                let (zp, out) = (if sx { -4.0 } else { 120.0 }, x.dtype());
                let shape: Vec<usize> = [*n, *m].into_iter().chain(outs.iter().copied()).collect();
                let levels = conv_levels(
                    kern,
                    &g,
                    &x,
                    Some(&zx),
                    &w,
                    Some(&zw),
                    (&params, zp, out),
                    &shape,
                )
                .unwrap()
                .expect("the integer path applies");
                let sums_then = requantize_runs(&got, osz, &params, zp, out, &shape)
                    .unwrap()
                    .unwrap();
                assert_eq!(
                    to_f64_vec(&levels).unwrap(),
                    to_f64_vec(&sums_then).unwrap(),
                    "{kern:?} geometry {gi} signed {sx}/{sw}: requantized as stored"
                );
                // The broken variant: x's zero point dropped (padding with 0, centering on 0)
                // is caught by the same comparison.
                if zx.len() == 1 && to_f64_vec(&zx).unwrap()[0] != 0.0 {
                    let wrong = conv_sums(kern, &g, &x, None, &w, Some(&zw))
                        .unwrap()
                        .unwrap();
                    assert_ne!(wrong, want, "a dropped zero point must show");
                }
            }
        }
    }
}

/// The integer path's requantization against the definition, on sums whose products land on
/// ties (multiplier 0.5 on odd sums, 0.25 on sums ≡ 2 mod 4), saturate, and run per channel; the
/// broken variant, rounding ties away from zero, differs on the same data.
#[test]
fn requantization_rounds_ties_to_even_and_saturates() {
    let mut s = 9u64;
    let sums: Vec<i32> = (0..4000)
        .map(|i| match i % 5 {
            0 => 2 * (lcg(&mut s) % 200) as i32 + 1 - 200,
            1 => 4 * (lcg(&mut s) % 100) as i32 + 2 - 200,
            2 => i32::MAX - (lcg(&mut s) % 7) as i32,
            3 => i32::MIN + (lcg(&mut s) % 7) as i32,
            _ => (lcg(&mut s) % 100_000) as i32 - 50_000,
        })
        .collect();
    let params = [
        (0.0, 0.5),
        (3.0, 0.25),
        (-1.0, 0.001_953_125),
        (0.0, 1.0 / 3.0),
    ];
    let run = 250;
    for (out, zp, lo, hi) in [
        (DType::U8, 128.0, 0i64, 255i64),
        (DType::I8, -3.0, -128, 127),
    ] {
        let want = |round: fn(f64) -> f64| -> Vec<i64> {
            sums.iter()
                .enumerate()
                .map(|(i, &v)| {
                    let (b, m) = params[(i / run) % params.len()];
                    (round((v as f64 + b) * m + zp) as i64).clamp(lo, hi)
                })
                .collect()
        };
        let got = requantize_runs(&sums, run, &params, zp, out, &[sums.len()])
            .unwrap()
            .expect("u8 and i8 are handled");
        let got: Vec<i64> = match &got {
            Tensor::U8(a) => a.iter().map(|&v| v as i64).collect(),
            Tensor::I8(a) => a.iter().map(|&v| v as i64).collect(),
            t => panic!("{:?}", t.dtype()),
        };
        assert_eq!(got, want(f64::round_ties_even), "{out:?}");
        assert_ne!(got, want(f64::round), "the data must hold ties");
    }
    assert!(
        requantize_runs(&sums, run, &params, 0.0, DType::U16, &[sums.len()])
            .unwrap()
            .is_none()
    );
}

/// Past K = 33,025 a 32-bit sum of centered 8-bit products can wrap, which QLinear* must never
/// requantize: both products leave such shapes to the exact path.
#[test]
fn sums_that_could_wrap_go_to_the_exact_path() {
    let mut s = 4u64;
    let k = EXACT_I32_K + 1;
    for kern in kernels() {
        let a = int8(&[1, k], false, &mut s);
        let b = int8(&[k, 2], true, &mut s);
        assert!(
            with_ctx(|ctx| sums_with(kern, ctx, &a, None, &b, None))
                .unwrap()
                .is_none()
        );
        let a = int8(&[1, EXACT_I32_K], false, &mut s);
        let b = int8(&[EXACT_I32_K, 2], true, &mut s);
        assert!(
            with_ctx(|ctx| sums_with(kern, ctx, &a, None, &b, None))
                .unwrap()
                .is_some()
        );
        // A 1-D convolution whose patch (channels × kernel) passes the bound.
        let g = Geom {
            n: 1,
            c: k,
            m: 1,
            group: 1,
            ins: vec![1],
            k: vec![1],
            stride: vec![1],
            dil: vec![1],
            pad: vec![0],
            outs: vec![1],
        };
        let x = int8(&[1, k, 1], false, &mut s);
        let w = int8(&[1, k, 1], true, &mut s);
        assert!(conv_sums(kern, &g, &x, None, &w, None).unwrap().is_none());
    }
}
