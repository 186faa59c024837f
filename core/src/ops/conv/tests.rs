//! Conv, ConvTranspose and FusedConv against direct loops; the f32 packed path against the general
//! path and f64 sums on shapes at the edges of each path, with a deliberately broken variant the
//! check must catch; FusedConv against Conv followed by the activation's own kernel; the weight cache.
use std::sync::Arc;

use ndarray::ArrayD;
use quorum_kernels::{Activation, Isa, Threads};

use super::forward::{ConvShape, conv, conv_general};
use super::packed::{conv_f32, conv_packed, pack_weights};
use super::transpose::conv_transpose;
use crate::ir::Attr;
use crate::ops::testing::run_kernel;
use crate::ops::{Kernel, OpCtx};
use crate::tensor::{Tensor, Value};

/// A node's attributes, as the tests write them.
type Attrs = Vec<(&'static str, Attr)>;

/// A convolution to test: (attributes, X shape, W shape).
type Geometry = (Attrs, Vec<usize>, Vec<usize>);

fn call(k: Kernel, attrs: Vec<(&str, Attr)>, ins: Vec<Option<Tensor>>) -> Tensor {
    run_kernel(k, "X", 22, attrs, ins, 1).unwrap().remove(0)
}

fn rand(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn t(shape: &[usize], seed: u64) -> (Tensor, Vec<f32>) {
    let v = rand(seed, shape.iter().product());
    (Tensor::from_f32(shape, v.clone()).unwrap(), v)
}

fn ints(v: &[i64]) -> Attr {
    Attr::Ints(v.to_vec())
}

fn close(got: &Tensor, want: &[f32], shape: &[usize]) {
    assert_eq!(got.shape(), shape);
    let g = got.to_f64_vec().unwrap();
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        assert!(
            (*a as f32 - b).abs() <= 1e-4 * (1.0 + b.abs()),
            "at {i}: {a} vs {b}"
        );
    }
}

/// Direct 2-D convolution: x [n,c,h,w], w [m,c/g,kh,kw], strides s, dilations d, pads [t,l,b,r].
#[allow(clippy::too_many_arguments)]
fn naive(
    x: &[f32],
    xs: [usize; 4],
    w: &[f32],
    ws: [usize; 4],
    b: &[f32],
    g: usize,
    s: [usize; 2],
    d: [usize; 2],
    p: [usize; 4],
) -> (Vec<f32>, [usize; 4]) {
    let [n, c, h, wd] = xs;
    let [m, cg, kh, kw] = ws;
    let oh = (h + p[0] + p[2] - (d[0] * (kh - 1) + 1)) / s[0] + 1;
    let ow = (wd + p[1] + p[3] - (d[1] * (kw - 1) + 1)) / s[1] + 1;
    let mut y = vec![0f32; n * m * oh * ow];
    for ni in 0..n {
        for oc in 0..m {
            for i in 0..oh {
                for j in 0..ow {
                    let mut acc = b[oc];
                    for ic in 0..cg {
                        for a in 0..kh {
                            for bb in 0..kw {
                                let yy = (i * s[0] + a * d[0]) as i64 - p[0] as i64;
                                let xx = (j * s[1] + bb * d[1]) as i64 - p[1] as i64;
                                if yy < 0 || xx < 0 || yy >= h as i64 || xx >= wd as i64 {
                                    continue;
                                }
                                let ch = (oc / (m / g)) * cg + ic;
                                acc += x[((ni * c + ch) * h + yy as usize) * wd + xx as usize]
                                    * w[((oc * cg + ic) * kh + a) * kw + bb];
                            }
                        }
                    }
                    y[((ni * m + oc) * oh + i) * ow + j] = acc;
                }
            }
        }
    }
    (y, [n, m, oh, ow])
}

#[test]
fn conv_groups_depthwise_asymmetric_pads_dilation() {
    // Grouped (im2col + GEMM per group) and depthwise with multiplier 2 (direct path).
    for (g, ws) in [(2usize, [4usize, 2, 3, 2]), (4, [8, 1, 3, 3])] {
        let (x, xv) = t(&[2, 4, 7, 6], 1);
        let (w, wv) = t(&ws, 2);
        let (b, bv) = t(&[ws[0]], 3);
        let attrs = vec![
            ("group", Attr::Int(g as i64)),
            ("strides", ints(&[2, 2])),
            ("dilations", ints(&[2, 1])),
            ("pads", ints(&[1, 0, 2, 1])),
        ];
        let got = call(conv, attrs, vec![Some(x), Some(w), Some(b)]);
        let (want, shape) = naive(
            &xv,
            [2, 4, 7, 6],
            &wv,
            ws,
            &bv,
            g,
            [2, 2],
            [2, 1],
            [1, 0, 2, 1],
        );
        close(&got, &want, &shape);
    }
}

#[test]
fn conv_same_lower_and_pointwise() {
    let (x, xv) = t(&[1, 3, 5, 5], 4);
    let (w, wv) = t(&[2, 3, 2, 2], 5);
    let zero = vec![0f32; 2];
    // SAME_LOWER, stride 1, k 2: total pad 1, all at the start.
    let got = call(
        conv,
        vec![("auto_pad", Attr::String(b"SAME_LOWER".to_vec()))],
        vec![Some(x.clone()), Some(w)],
    );
    let (want, shape) = naive(
        &xv,
        [1, 3, 5, 5],
        &wv,
        [2, 3, 2, 2],
        &zero,
        1,
        [1, 1],
        [1, 1],
        [1, 1, 0, 0],
    );
    close(&got, &want, &shape);
    let (w1, w1v) = t(&[2, 3, 1, 1], 6);
    let (want, shape) = naive(
        &xv,
        [1, 3, 5, 5],
        &w1v,
        [2, 3, 1, 1],
        &zero,
        1,
        [1, 1],
        [1, 1],
        [0; 4],
    );
    close(&call(conv, vec![], vec![Some(x), Some(w1)]), &want, &shape);
}

#[test]
fn conv_transpose_matches_scatter() {
    // X [1,4,3,2], W [4, 3, 3, 2] with group 2 -> M = 6; strides 2x1, pads, output_padding.
    let (x, xv) = t(&[1, 4, 3, 2], 7);
    let (w, wv) = t(&[4, 3, 3, 2], 8);
    let (b, bv) = t(&[6], 9);
    let attrs = vec![
        ("group", Attr::Int(2)),
        ("strides", ints(&[2, 1])),
        ("pads", ints(&[1, 0, 0, 1])),
        ("output_padding", ints(&[1, 0])),
    ];
    let got = call(conv_transpose, attrs, vec![Some(x), Some(w), Some(b)]);
    let (oh, ow) = (2 * 2 + 1 + 3 - 1, 1 + 2 - 1);
    let mut want = vec![0f32; 6 * oh * ow];
    for oc in 0..6 {
        for v in &mut want[oc * oh * ow..(oc + 1) * oh * ow] {
            *v = bv[oc];
        }
    }
    for ic in 0..4 {
        let gi = ic / 2;
        for i in 0..3 {
            for j in 0..2 {
                for ml in 0..3 {
                    for a in 0..3 {
                        for c in 0..2 {
                            let yy = (i * 2 + a) as i64 - 1;
                            let xx = (j + c) as i64;
                            if yy < 0 || yy >= oh as i64 || xx >= ow as i64 {
                                continue;
                            }
                            let oc = gi * 3 + ml;
                            want[(oc * oh + yy as usize) * ow + xx as usize] +=
                                xv[(ic * 3 + i) * 2 + j] * wv[((ic * 3 + ml) * 3 + a) * 2 + c];
                        }
                    }
                }
            }
        }
    }
    close(&got, &want, &[1, 6, oh, ow]);
}

/// `(value, Σ|terms|)` of every output of a convolution, in f64 from the definition (taps in the
/// padding contribute nothing), with the geometry the kernels computed.
fn reference(x: &[f32], w: &[f32], b: Option<&[f32]>, sh: &ConvShape) -> Vec<(f64, f64)> {
    let (g, m, mg, cg) = (&sh.g, sh.m, sh.mg(), sh.cg());
    let (in_sp, out_sp, ksz) = (g.in_sp(), g.out_sp(), g.ksz());
    let mut out = Vec::with_capacity(sh.n * m * out_sp);
    for ni in 0..sh.n {
        for oc in 0..m {
            for o in 0..out_sp {
                let od = [
                    o / (g.outs[1] * g.outs[2]),
                    (o / g.outs[2]) % g.outs[1],
                    o % g.outs[2],
                ];
                let (mut s, mut mag) = b.map_or((0.0, 0.0), |b| (b[oc] as f64, b[oc].abs() as f64));
                for ic in 0..cg {
                    let ch = (oc / mg) * cg + ic;
                    'taps: for kk in 0..ksz {
                        let kp = g.kpos(kk);
                        let mut pos = 0usize;
                        for d in 0..3 {
                            let v = (od[d] * g.s[d] + kp[d] * g.d[d]) as i64 - g.pb[d];
                            if v < 0 || v >= g.ins[d] as i64 {
                                continue 'taps;
                            }
                            pos = pos * g.ins[d] + v as usize;
                        }
                        let t = x[(ni * sh.c + ch) * in_sp + pos] as f64
                            * w[(oc * cg + ic) * ksz + kk] as f64;
                        s += t;
                        mag += t.abs();
                    }
                }
                out.push((s, mag));
            }
        }
    }
    out
}

/// The first output outside the bound of sums and products (`64·ε·Σ|terms| + ½ulp`, as the
/// verification judges Conv), if any.
// `!(d <= bound)` on purpose: a NaN is outside.
#[allow(clippy::neg_cmp_op_on_partial_ord)]
fn outside(got: &[f32], want: &[(f64, f64)]) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("{} outputs, want {}", got.len(), want.len()));
    }
    let eps = f32::EPSILON as f64;
    for (i, (g, (v, mag))) in got.iter().zip(want).enumerate() {
        let g = *g as f64;
        let half_ulp = (v.abs().max(g.abs()) * eps / 2.0).max(f32::from_bits(1) as f64 / 2.0);
        let bound = 64.0 * eps * mag.max(v.abs()) + half_ulp;
        if !((g - v).abs() <= bound) {
            return Some(format!("output {i}: {g} vs {v} (bound {bound:e})"));
        }
    }
    None
}

/// The contiguous values of a test's X, W and B (as `with_conv` makes them).
fn slices<'a>(
    x: &'a ArrayD<f32>,
    w: &'a ArrayD<f32>,
    b: &'a ArrayD<f32>,
) -> (&'a [f32], &'a [f32], &'a [f32]) {
    let s = |a: &'a ArrayD<f32>| a.as_slice().expect("contiguous test input");
    (s(x), s(w), s(b))
}

/// Runs `check(ctx, x, w, b)` inside a Conv node with `attrs` on seeded inputs of the given shapes.
fn with_conv(
    attrs: Vec<(&str, Attr)>,
    xs: &[usize],
    ws: &[usize],
    seed: u64,
    check: impl Fn(&OpCtx, &ArrayD<f32>, &ArrayD<f32>, &ArrayD<f32>),
) {
    let (x, _) = t(xs, seed);
    let (w, _) = t(ws, seed + 1);
    let (b, _) = t(&[ws[0]], seed + 2);
    let f32s = |t: &Tensor| match t {
        Tensor::F32(a) => a.clone(),
        _ => unreachable!(),
    };
    let (xa, wa, ba) = (f32s(&x), f32s(&w), f32s(&b));
    run_kernel(
        |ctx: &OpCtx, _: &[Option<&Value>]| {
            check(ctx, &xa, &wa, &ba);
            Ok(vec![])
        },
        "Conv",
        22,
        attrs,
        vec![],
        0,
    )
    .unwrap();
}

/// Shapes at the edges of the packed path: the pointwise (dense) source across a column block,
/// depth across a `K` block, a 7×7 stride-2 kernel over 3 channels, a strided 1×1, groups with
/// dilations and asymmetric pads, 1-D and 3-D, auto_pad, depthwise, more rows than a row block, no
/// input channels at all, groups run in parallel, and a column block starting inside the right
/// padding of an output row.
fn edge_cases() -> Vec<Geometry> {
    let i = |v: &[i64]| Attr::Ints(v.to_vec());
    vec![
        (vec![], vec![1, 5, 24, 24], vec![9, 5, 1, 1]),
        (
            vec![("pads", i(&[1, 1, 1, 1]))],
            vec![2, 22, 6, 6],
            vec![17, 22, 3, 3],
        ),
        (
            vec![("pads", i(&[3, 3, 3, 3])), ("strides", i(&[2, 2]))],
            vec![1, 3, 17, 19],
            vec![8, 3, 7, 7],
        ),
        (
            vec![("strides", i(&[2, 2]))],
            vec![1, 6, 9, 9],
            vec![7, 6, 1, 1],
        ),
        (
            vec![
                ("group", Attr::Int(2)),
                ("strides", i(&[2, 2])),
                ("dilations", i(&[2, 1])),
                ("pads", i(&[1, 0, 2, 1])),
            ],
            vec![1, 8, 7, 6],
            vec![6, 4, 3, 2],
        ),
        (vec![("pads", i(&[1, 2]))], vec![2, 4, 37], vec![5, 4, 3]),
        (
            vec![("pads", i(&[1, 1, 1, 0, 1, 1]))],
            vec![1, 2, 4, 5, 6],
            vec![3, 2, 2, 3, 3],
        ),
        (
            vec![
                ("auto_pad", Attr::String(b"SAME_UPPER".to_vec())),
                ("strides", i(&[2, 2])),
            ],
            vec![1, 3, 10, 10],
            vec![4, 3, 3, 3],
        ),
        (
            vec![("group", Attr::Int(4)), ("pads", i(&[1, 1, 1, 1]))],
            vec![1, 4, 7, 7],
            vec![8, 1, 3, 3],
        ),
        (vec![], vec![1, 2, 5, 5], vec![260, 2, 1, 1]),
        (vec![], vec![1, 0, 4, 4], vec![3, 0, 3, 3]),
        (
            vec![("group", Attr::Int(4))],
            vec![1, 12, 5, 5],
            vec![12, 3, 3, 3],
        ),
        // Depthwise with column strides 2 and 3 over rows wider than a vector (the direct path
        // reads each tap from the row's stride phases).
        (
            vec![
                ("group", Attr::Int(4)),
                ("pads", i(&[1, 1, 1, 1])),
                ("strides", i(&[2, 2])),
            ],
            vec![1, 4, 9, 37],
            vec![4, 1, 3, 3],
        ),
        (
            vec![
                ("group", Attr::Int(3)),
                ("pads", i(&[0, 2, 1, 1])),
                ("strides", i(&[1, 3])),
            ],
            vec![1, 3, 5, 40],
            vec![6, 1, 3, 5],
        ),
    ]
}

#[test]
fn packed_path_matches_general_path_and_f64_at_path_edges() {
    for (case, (attrs, xs, ws)) in edge_cases().into_iter().enumerate() {
        with_conv(attrs, &xs, &ws, 40 + case as u64, |ctx, x, w, b| {
            let sh = ConvShape::new(ctx, x.shape(), w.shape(), Some(b)).unwrap();
            let (xd, wd, bd) = slices(x, w, b);
            let want = reference(xd, wd, Some(bd), &sh);
            let general = conv_general(ctx, x, w, Some(b), Activation::None).unwrap();
            let general = general.as_slice().unwrap();
            if let Some(e) = outside(general, &want) {
                panic!("case {case}: general path {e}");
            }
            for &isa in Isa::supported() {
                for threads in [Threads::Serial, Threads::Always] {
                    let got = if sh.depthwise() {
                        conv_f32(ctx, x, w, Some(b), Activation::None)
                            .unwrap()
                            .into_raw_vec_and_offset()
                            .0
                    } else {
                        let packed = pack_weights(isa, &sh, wd);
                        conv_packed(&sh, xd, &packed, Some(bd), Activation::None, threads)
                    };
                    if let Some(e) = outside(&got, &want) {
                        panic!("case {case} {isa:?} {threads:?}: packed path {e}");
                    }
                }
            }
        });
    }
}

/// The check above catches a deliberately broken packed convolution: one whose packed weights lost
/// the last tap of every filter (the slip an off-by-one in the depth of a patch makes).
#[test]
fn a_broken_packed_conv_is_caught() {
    let i = |v: &[i64]| Attr::Ints(v.to_vec());
    with_conv(
        vec![("pads", i(&[1, 1, 1, 1]))],
        &[1, 3, 6, 6],
        &[4, 3, 3, 3],
        77,
        |ctx, x, w, b| {
            let sh = ConvShape::new(ctx, x.shape(), w.shape(), Some(b)).unwrap();
            let (xd, wd, bd) = slices(x, w, b);
            let want = reference(xd, wd, Some(bd), &sh);
            let isa = Isa::detected();
            let good = conv_packed(
                &sh,
                xd,
                &pack_weights(isa, &sh, wd),
                Some(bd),
                Activation::None,
                Threads::Serial,
            );
            assert!(outside(&good, &want).is_none());
            let kdim = sh.cg() * sh.g.ksz();
            let mut broken = wd.to_vec();
            for f in 0..sh.m {
                broken[f * kdim + kdim - 1] = 0.0;
            }
            let bad = conv_packed(
                &sh,
                xd,
                &pack_weights(isa, &sh, &broken),
                Some(bd),
                Activation::None,
                Threads::Serial,
            );
            assert!(
                outside(&bad, &want).is_some(),
                "a dropped tap went unnoticed"
            );
        },
    );
}

/// The activations FusedConv takes, with their attributes: (FusedConv's activation, its
/// parameters, the op it stands for, that op's attributes).
fn activations() -> Vec<(&'static str, Vec<f32>, &'static str, Attrs)> {
    vec![
        ("Relu", vec![], "Relu", vec![]),
        ("Clip", vec![-0.25, 0.5], "Clip", vec![]),
        (
            "LeakyRelu",
            vec![0.3],
            "LeakyRelu",
            vec![("alpha", Attr::Float(0.3))],
        ),
        ("Sigmoid", vec![], "Sigmoid", vec![]),
        ("HardSwish", vec![], "HardSwish", vec![]),
        // Not one op: Sigmoid, then Mul of its input and output (see the test).
        ("Silu", vec![], "Sigmoid", vec![]),
    ]
}

/// FusedConv against Conv followed by the activation's own kernel: the same bits, in f32 (packed
/// path, serial and split) and f64 (general path), plain, grouped and depthwise.
#[test]
fn fused_conv_equals_conv_then_activation_bit_for_bit() {
    let reg = crate::ops::Registry::cpu();
    let fused = reg.get(crate::ops::QUORUM_DOMAIN, "FusedConv").unwrap();
    let i = |v: &[i64]| Attr::Ints(v.to_vec());
    let shapes: Vec<Geometry> = vec![
        (
            vec![("pads", i(&[1, 1, 1, 1]))],
            vec![1, 6, 9, 9],
            vec![10, 6, 3, 3],
        ),
        (vec![], vec![1, 7, 30, 30], vec![20, 7, 1, 1]),
        (
            vec![("group", Attr::Int(3))],
            vec![1, 3, 6, 6],
            vec![6, 1, 3, 3],
        ),
    ];
    for (attrs, xs, ws) in shapes {
        for (name, params, op, act_attrs) in activations() {
            for f64_ in [false, true] {
                let (x, _) = t(&xs, 5);
                let (w, _) = t(&ws, 6);
                let (b, _) = t(&[ws[0]], 7);
                let (x, w, b) = if f64_ {
                    let up = |t: Tensor| {
                        Tensor::from_f64s(
                            crate::tensor::DType::F64,
                            t.shape(),
                            t.to_f64_vec().unwrap(),
                        )
                        .unwrap()
                    };
                    (up(x), up(w), up(b))
                } else {
                    (x, w, b)
                };
                let conv_out = run_kernel(
                    conv,
                    "Conv",
                    22,
                    attrs.clone(),
                    vec![Some(x.clone()), Some(w.clone()), Some(b.clone())],
                    1,
                )
                .unwrap()
                .remove(0);
                let mut ins = vec![Some(conv_out)];
                if op == "Clip" {
                    let bound = |v: f32| {
                        if f64_ {
                            Tensor::from_f64s(crate::tensor::DType::F64, &[], vec![v as f64])
                                .unwrap()
                        } else {
                            Tensor::from_f32(&[], vec![v]).unwrap()
                        }
                    };
                    ins.push(Some(bound(params[0])));
                    ins.push(Some(bound(params[1])));
                }
                let conv_out = ins[0].clone();
                let mut want =
                    run_kernel(reg.get("", op).unwrap(), op, 22, act_attrs.clone(), ins, 1)
                        .unwrap()
                        .remove(0);
                if name == "Silu" {
                    want = run_kernel(
                        reg.get("", "Mul").unwrap(),
                        "Mul",
                        14,
                        vec![],
                        vec![conv_out, Some(want)],
                        1,
                    )
                    .unwrap()
                    .remove(0);
                }
                let mut fattrs = attrs.clone();
                fattrs.push(("activation", Attr::String(name.as_bytes().to_vec())));
                if !params.is_empty() {
                    fattrs.push(("activation_params", Attr::Floats(params.clone())));
                }
                let got = run_kernel(
                    fused,
                    "FusedConv",
                    1,
                    fattrs,
                    vec![Some(x), Some(w), Some(b)],
                    1,
                )
                .unwrap()
                .remove(0);
                assert_eq!(got.shape(), want.shape());
                let (g, wv) = (got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
                for (k, (p, q)) in g.iter().zip(&wv).enumerate() {
                    assert_eq!(
                        p.to_bits(),
                        q.to_bits(),
                        "{name} f64={f64_} {xs:?} at {k}: {p} vs {q}"
                    );
                }
            }
        }
    }
}

#[test]
fn fused_conv_rejects_bad_activation_attributes() {
    let (x, _) = t(&[1, 2, 4, 4], 1);
    let (w, _) = t(&[3, 2, 3, 3], 2);
    let reg = crate::ops::Registry::cpu();
    let fused = reg.get(crate::ops::QUORUM_DOMAIN, "FusedConv").unwrap();
    for attrs in [
        vec![("activation", Attr::String(b"Gelu".to_vec()))],
        vec![("activation", Attr::String(b"Clip".to_vec()))],
        vec![
            ("activation", Attr::String(b"Relu".to_vec())),
            ("activation_params", Attr::Floats(vec![1.0])),
        ],
        vec![("activation", Attr::Int(1))],
    ] {
        let r = run_kernel(
            fused,
            "FusedConv",
            1,
            attrs,
            vec![Some(x.clone()), Some(w.clone())],
            1,
        );
        assert!(r.is_err());
    }
}

/// A runner that calls every input of the node a constant, each with its own `Arc`.
use crate::ops::testing::Constants;

/// Runs Conv with W given as the constant `w` (an `Arc` the cache may key on).
fn conv_with_constant(x: &Tensor, w: &Arc<Value>) -> Tensor {
    let node = crate::ir::Node {
        name: "c".into(),
        op_type: "Conv".into(),
        domain: String::new(),
        opset: 22,
        inputs: vec!["x".into(), "w".into()],
        outputs: vec!["y".into()],
        attrs: [("pads".to_string(), Attr::Ints(vec![1, 1, 1, 1]))].into(),
    };
    let runner = Constants(vec![("w".into(), w.clone())]);
    let ctx = OpCtx {
        node: &node,
        runner: &runner,
        max_tensor_bytes: 1 << 30,
    };
    let xv = Value::Tensor(x.clone());
    conv(&ctx, &[Some(&xv), Some(w)])
        .unwrap()
        .remove(0)
        .into_tensor()
        .unwrap()
}

/// Weights are packed once per constant `Arc` and reused; a new value, even at a reused address,
/// is packed again (the `Weak` check), so results always follow the weights given.
#[test]
fn weights_are_packed_once_per_constant_and_checked() {
    let (x, _) = t(&[1, 3, 5, 5], 21);
    let shape = [4usize, 3, 3, 3];
    let general = |w: &Tensor| {
        call(
            conv,
            vec![("pads", Attr::Ints(vec![1, 1, 1, 1]))],
            vec![Some(x.clone()), Some(w.clone())],
        )
    };
    let isa = Isa::detected();
    let mut last_addr = None;
    for seed in [31u64, 32, 33] {
        let (w, _) = t(&shape, seed);
        let arc = Arc::new(Value::Tensor(w.clone()));
        assert!(!super::weights::is_cached(&arc, isa, 1, &shape));
        let first = conv_with_constant(&x, &arc);
        assert!(super::weights::is_cached(&arc, isa, 1, &shape));
        let second = conv_with_constant(&x, &arc);
        assert_eq!(first.to_f64_vec().unwrap(), second.to_f64_vec().unwrap());
        assert_eq!(
            first.to_f64_vec().unwrap(),
            general(&w).to_f64_vec().unwrap()
        );
        last_addr = Some(Arc::as_ptr(&arc) as usize);
        drop(arc);
    }
    assert!(last_addr.is_some());
}

mod direct;

mod shifted;

mod broadcast;

mod one_pixel;

mod pixels;
