//! The depthwise path's sums against the exact f64 convolution on random 8-bit operands of both
//! signednesses, zero points per tensor and per channel, 1-D and 2-D, strides, pads, dilations and
//! batches; at the bound of exactness with the largest products; and past it, where the f32 sums
//! go wrong (the reason `applies` refuses).
use std::collections::HashMap;

use ndarray::{ArrayD, IxDyn};

use super::*;
use crate::ir::{Attr, Node};
use crate::ops::NoSubgraphs;
use crate::ops::cast::to_f64_vec;
use crate::ops::quantize::int::{centered, conv_f64, geom};

fn lcg(s: &mut u64) -> u8 {
    *s = s
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (*s >> 33) as u8
}

fn int8(shape: &[usize], signed: bool, fill: impl FnMut() -> u8) -> Tensor {
    let v: Vec<u8> = std::iter::repeat_with(fill)
        .take(shape.iter().product())
        .collect();
    if signed {
        Tensor::I8(
            ArrayD::from_shape_vec(IxDyn(shape), v.iter().map(|&b| b as i8).collect()).unwrap(),
        )
    } else {
        Tensor::U8(ArrayD::from_shape_vec(IxDyn(shape), v).unwrap())
    }
}

/// A depthwise convolution's node: `c` groups, and the attributes given.
fn node(c: usize, attrs: &[(&str, Vec<i64>)]) -> Node {
    let mut a: HashMap<String, Attr> = attrs
        .iter()
        .map(|(k, v)| (k.to_string(), Attr::Ints(v.clone())))
        .collect();
    a.insert("group".into(), Attr::Int(c as i64));
    Node {
        name: "dw".into(),
        op_type: "QLinearConv".into(),
        domain: String::new(),
        opset: 10,
        inputs: vec![],
        outputs: vec![],
        attrs: a,
    }
}

fn ctx(node: &Node) -> OpCtx<'_> {
    OpCtx {
        node,
        runner: &NoSubgraphs,
        max_tensor_bytes: 1 << 30,
    }
}

/// The exact sums by the f64 path: the operands centered, then `conv_f64`.
fn reference(g: &Geom, x: &Tensor, zx: &Tensor, w: &Tensor, zw: &Tensor) -> Vec<i32> {
    let xv = centered(x, Some(zx), false, "x").unwrap();
    let (wv, zv) = (to_f64_vec(w).unwrap(), to_f64_vec(zw).unwrap());
    let per = wv.len() / g.m;
    let wc: Vec<f64> = wv
        .iter()
        .enumerate()
        .map(|(i, &v)| v - zv[if zv.len() == 1 { 0 } else { i / per }])
        .collect();
    conv_f64(g, &xv, &wc).iter().map(|&v| v as i32).collect()
}

#[test]
fn depthwise_sums_are_the_exact_sums() {
    let mut s = 3u64;
    // (x shape, kernel, attributes)
    type Case = (Vec<usize>, Vec<usize>, Vec<(&'static str, Vec<i64>)>);
    let cases: Vec<Case> = vec![
        (
            vec![2, 6, 9, 11],
            vec![3, 3],
            vec![("pads", vec![1, 1, 1, 1])],
        ),
        (
            vec![1, 5, 13, 10],
            vec![5, 5],
            vec![("pads", vec![2, 2, 2, 2]), ("strides", vec![2, 2])],
        ),
        (
            vec![1, 4, 10, 10],
            vec![3, 3],
            vec![("pads", vec![2, 0, 1, 2]), ("dilations", vec![2, 2])],
        ),
        (vec![1, 3, 7, 6], vec![3, 2], vec![("strides", vec![1, 3])]),
        (
            vec![2, 3, 17],
            vec![4],
            vec![("pads", vec![1, 2]), ("strides", vec![2])],
        ),
    ];
    for (xs, k, attrs) in cases {
        let c = xs[1];
        let n = node(c, &attrs);
        let ctx = ctx(&n);
        let ws: Vec<usize> = [c, 1].into_iter().chain(k.iter().copied()).collect();
        let g = geom(&ctx, &xs, &ws).unwrap();
        assert!(applies(&g));
        for (sx, sw) in [(false, true), (true, false), (false, false), (true, true)] {
            for per_channel in [false, true] {
                let x = int8(&xs, sx, || lcg(&mut s));
                let w = int8(&ws, sw, || lcg(&mut s));
                let zx = int8(&[], sx, || lcg(&mut s));
                let zw = int8(if per_channel { &ws[..1] } else { &[] }, sw, || lcg(&mut s));
                let want = reference(&g, &x, &zx, &w, &zw);
                let got = sums(&ctx, &g, &x, Some(&zx), &w, Some(&zw))
                    .unwrap()
                    .unwrap();
                assert_eq!(got, want, "{xs:?} {k:?} {attrs:?} signed {sx}/{sw}");
                // The broken variant: x's zero point dropped, caught by the same comparison.
                let wrong = sums(&ctx, &g, &x, None, &w, Some(&zw)).unwrap().unwrap();
                assert_ne!(wrong, want, "a dropped zero point must show");
            }
        }
    }
}

/// Every product at its largest (255 · −255) and every window full: at K = 258 taps (a 2×129
/// kernel) each sum, −258·255², is exact; at 17×17 = 289 the f32 sums have left 2²⁴ and come out
/// wrong, which is why `applies` refuses them (the exact path computes them instead).
#[test]
fn sums_are_exact_up_to_the_bound_and_refused_past_it() {
    for (kh, kw, exact) in [(2, 129, true), (17, 17, false)] {
        let (c, h, w) = (2, kh + 1, kw + 2);
        let n = node(c, &[]);
        let ctx = ctx(&n);
        let (xs, ws) = ([1, c, h, w], [c, 1, kh, kw]);
        let g = geom(&ctx, &xs, &ws).unwrap();
        assert_eq!(applies(&g), exact);
        let x = int8(&xs, false, || 255);
        let zx = int8(&[], false, || 0);
        let wt = int8(&ws, true, || 0x80); // −128
        let zw = int8(&[], true, || 127); // centered: −255
        let want = reference(&g, &x, &zx, &wt, &zw);
        assert!(want.iter().all(|&v| v == -((kh * kw) as i32) * 255 * 255));
        let (xd, _) = bytes(&x).unwrap();
        let (wd, _) = bytes(&wt).unwrap();
        let f32_path = f32_sums(&ctx, &g, &x, (&xd, false, 0), &wt, (&wd, true, &[127])).unwrap();
        assert_eq!(f32_path == want, exact, "K = {}", kh * kw);
        let taken = sums(&ctx, &g, &x, Some(&zx), &wt, Some(&zw)).unwrap();
        assert_eq!(taken.is_some(), exact);
    }
}
