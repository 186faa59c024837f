//! Tests of the Resize kernels (a child module of `resize`).
use super::*;
use crate::ir::Attr;
use crate::ops::Kernel;
use crate::ops::testing::run_kernel;

pub(super) fn call(
    k: Kernel,
    op: &str,
    opset: i64,
    attrs: Vec<(&str, Attr)>,
    ins: Vec<Option<Tensor>>,
) -> OpResult<Tensor> {
    Ok(run_kernel(k, op, opset, attrs, ins, 1)?.remove(0))
}

/// Seeded values in [-1, -0.05] U [0.05, 1].
pub(super) fn rand(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (s >> 40) as f32 / (1u64 << 24) as f32;
            let v = 0.05 + 0.95 * u;
            if s & 1 == 0 { v } else { -v }
        })
        .collect()
}

pub(super) fn f32s(t: &Tensor) -> Vec<f32> {
    t.to_f64_vec()
        .unwrap()
        .into_iter()
        .map(|v| v as f32)
        .collect()
}

pub(super) fn s(v: &str) -> Attr {
    Attr::String(v.as_bytes().to_vec())
}

#[test]
fn linear_asymmetric_matches_direct_bilinear() {
    let (h, w) = (3usize, 4usize);
    let data = rand(7, 2 * h * w);
    let x = Tensor::from_f32(&[1, 2, h, w], data.clone()).unwrap();
    let scales = Tensor::from_f32(&[4], vec![1.0, 1.0, 1.5, 2.5]).unwrap();
    let attrs = vec![
        ("mode", s("linear")),
        ("coordinate_transformation_mode", s("asymmetric")),
    ];
    let y = call(
        resize,
        "Resize",
        19,
        attrs,
        vec![Some(x), None, Some(scales)],
    )
    .unwrap();
    let (oh, ow) = (4usize, 10usize);
    assert_eq!(y.shape(), &[1, 2, oh, ow]);
    let got = f32s(&y);
    let lerp = |c: usize, yy: f64, xx: f64| {
        let at = |i: usize, j: usize| data[c * h * w + i.min(h - 1) * w + j.min(w - 1)] as f64;
        let (i0, j0) = (yy.floor() as usize, xx.floor() as usize);
        let (ty, tx) = (yy - i0 as f64, xx - j0 as f64);
        let top = at(i0, j0) * (1.0 - tx) + at(i0, j0 + 1) * tx;
        let bot = at(i0 + 1, j0) * (1.0 - tx) + at(i0 + 1, j0 + 1) * tx;
        top * (1.0 - ty) + bot * ty
    };
    for c in 0..2 {
        for i in 0..oh {
            for j in 0..ow {
                let want = lerp(c, i as f64 / 1.5, j as f64 / 2.5);
                let g = got[(c * oh + i) * ow + j] as f64;
                assert!((g - want).abs() < 1e-5, "({c},{i},{j}): {g} vs {want}");
            }
        }
    }
}

#[test]
fn nearest_is_exact_for_wide_ints_and_extrapolates() {
    let big = [(1i64 << 60) + 1, (1 << 60) + 3, -(1 << 59) - 7, 5];
    let x = Tensor::from_i64(&[1, 1, 2, 2], big.to_vec()).unwrap();
    let sizes = Tensor::from_i64(&[4], vec![1, 1, 4, 4]).unwrap();
    let attrs = vec![
        ("coordinate_transformation_mode", s("asymmetric")),
        ("nearest_mode", s("floor")),
    ];
    let y = call(
        resize,
        "Resize",
        13,
        attrs,
        vec![Some(x.clone()), None, None, Some(sizes.clone())],
    )
    .unwrap();
    let Tensor::I64(a) = &y else { panic!("dtype") };
    for ((i, j), v) in (0..4)
        .flat_map(|i| (0..4).map(move |j| (i, j)))
        .zip(a.iter())
    {
        assert_eq!(*v, big[(i / 2) * 2 + j / 2]);
    }
    // tf_crop_and_resize with a roi reaching outside the input fills the extrapolation value.
    let roi = Tensor::from_f32(&[8], vec![0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 2.0, 1.0]).unwrap();
    let attrs = vec![
        ("coordinate_transformation_mode", s("tf_crop_and_resize")),
        ("extrapolation_value", Attr::Float(9.0)),
    ];
    let y = call(
        resize,
        "Resize",
        13,
        attrs,
        vec![Some(x), Some(roi), None, Some(sizes)],
    )
    .unwrap();
    let v = y.to_i64_vec().unwrap();
    assert_eq!(&v[0..4], &[big[0], big[0], big[1], big[1]]);
    assert_eq!(&v[12..16], &[9, 9, 9, 9]);
}

#[test]
fn tf_half_pixel_for_nn_moves_axes_at_scale_1() {
    // Source (y + 0.5) / scale: at scale 1 every output sits halfway between two inputs (the last
    // one clamped), in linear mode on the axis left at scale 1 as on the resized one.
    let data = rand(11, 2 * 3);
    let x = Tensor::from_f32(&[2, 3], data.clone()).unwrap();
    let scales = Tensor::from_f32(&[2], vec![1.0, 2.0]).unwrap();
    let attrs = vec![
        ("mode", s("linear")),
        ("coordinate_transformation_mode", s("tf_half_pixel_for_nn")),
    ];
    let y = call(
        resize,
        "Resize",
        13,
        attrs,
        vec![Some(x), None, Some(scales)],
    )
    .unwrap();
    assert_eq!(y.shape(), &[2, 6]);
    let at = |i: f64, j: f64| {
        let v = |i: usize, j: usize| data[i.min(1) * 3 + j.min(2)] as f64;
        let (i0, j0) = (i.floor() as usize, j.floor() as usize);
        let (ti, tj) = (i - i0 as f64, j - j0 as f64);
        let top = v(i0, j0) * (1.0 - tj) + v(i0, j0 + 1) * tj;
        let bot = v(i0 + 1, j0) * (1.0 - tj) + v(i0 + 1, j0 + 1) * tj;
        top * (1.0 - ti) + bot * ti
    };
    let got = f32s(&y);
    for i in 0..2 {
        for j in 0..6 {
            let want = at(i as f64 + 0.5, (j as f64 + 0.5) / 2.0);
            let g = got[i * 6 + j] as f64;
            assert!((g - want).abs() < 1e-6, "({i},{j}): {g} vs {want}");
        }
    }
}
