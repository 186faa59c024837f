//! Tests of the data-movement ops (split from movement.rs to keep it short).
use super::super::testkit::*;
use super::*;
use crate::Attr;

fn i64v(shape: &[usize], d: Vec<f64>) -> Option<Value> {
    typed(DType::I64, shape, d)
}

#[test]
fn transpose_random() {
    let mut r = SplitMix64(4);
    let x = r.values(24);
    let out = eval(
        &node("Transpose", 13, vec![("perm", Attr::Ints(vec![2, 0, 1]))]),
        &[f32v(&[2, 3, 4], x.clone())],
    )
    .unwrap();
    assert_eq!(out[0].value.shape, vec![4, 2, 3]);
    for a in 0..2 {
        for b in 0..3 {
            for c in 0..4 {
                assert_eq!(
                    out[0].value.data[(c * 2 + a) * 3 + b],
                    x[(a * 3 + b) * 4 + c]
                );
            }
        }
    }
}

#[test]
fn slice_concat_split() {
    let x: Vec<f64> = (0..20).map(|v| v as f64).collect();
    let s = eval(
        &node("Slice", 13, vec![]),
        &[
            f32v(&[4, 5], x.clone()),
            i64v(&[2], vec![-1.0, 4.0]),
            i64v(&[2], vec![-10.0, 0.0]),
            i64v(&[2], vec![0.0, 1.0]),
            i64v(&[2], vec![-2.0, -2.0]),
        ],
    )
    .unwrap();
    assert_eq!(s[0].value.shape, vec![2, 2]);
    assert_eq!(s[0].value.data, vec![19.0, 17.0, 9.0, 7.0]);
    let c = eval(
        &node("Concat", 13, vec![("axis", Attr::Int(1))]),
        &[
            f32v(&[2, 1], vec![1.0, 2.0]),
            f32v(&[2, 2], vec![3.0, 4.0, 5.0, 6.0]),
        ],
    )
    .unwrap();
    assert_eq!(c[0].value.data, vec![1.0, 3.0, 4.0, 2.0, 5.0, 6.0]);
    let mut nd = node("Split", 13, vec![("axis", Attr::Int(1))]);
    nd.num_outputs = 2;
    let sp = eval(
        &nd,
        &[
            f32v(&[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
            i64v(&[2], vec![1.0, 2.0]),
        ],
    )
    .unwrap();
    assert_eq!(sp[0].value.data, vec![1.0, 4.0]);
    assert_eq!(sp[1].value.data, vec![2.0, 3.0, 5.0, 6.0]);
    let mut n18 = node("Split", 18, vec![("num_outputs", Attr::Int(2))]);
    n18.num_outputs = 2;
    let s18 = eval(&n18, &[f32v(&[5], vec![1.0, 2.0, 3.0, 4.0, 5.0])]).unwrap();
    assert_eq!(s18[0].value.data, vec![1.0, 2.0, 3.0]);
    assert_eq!(s18[1].value.data, vec![4.0, 5.0]);
}

#[test]
fn gather_family() {
    let x = f32v(&[3, 2], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let g = eval(
        &node("Gather", 13, vec![]),
        &[x.clone(), i64v(&[2, 2], vec![0.0, 1.0, -1.0, 0.0])],
    )
    .unwrap();
    assert_eq!(g[0].value.shape, vec![2, 2, 2]);
    assert_eq!(
        g[0].value.data,
        vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 1.0, 2.0]
    );
    let ge = eval(
        &node("GatherElements", 13, vec![("axis", Attr::Int(1))]),
        &[x.clone(), i64v(&[3, 2], vec![1.0, 0.0, 0.0, 0.0, 1.0, 1.0])],
    )
    .unwrap();
    assert_eq!(ge[0].value.data, vec![2.0, 1.0, 3.0, 3.0, 6.0, 6.0]);
    let se = eval(
        &node(
            "ScatterElements",
            16,
            vec![
                ("axis", Attr::Int(0)),
                ("reduction", Attr::String("add".into())),
            ],
        ),
        &[
            x,
            i64v(&[1, 2], vec![2.0, 2.0]),
            f32v(&[1, 2], vec![10.0, 20.0]),
        ],
    )
    .unwrap();
    assert_eq!(se[0].value.data, vec![1.0, 2.0, 3.0, 4.0, 15.0, 26.0]);
}

#[test]
fn pad_modes() {
    let x = f32v(&[1, 3], vec![1.0, 2.0, 3.0]);
    let pads = i64v(&[4], vec![0.0, 2.0, 0.0, 2.0]);
    let run = |m: &str| {
        eval(
            &node("Pad", 19, vec![("mode", Attr::String(m.into()))]),
            &[x.clone(), pads.clone(), f32v(&[], vec![9.0])],
        )
        .unwrap()[0]
            .value
            .data
            .clone()
    };
    assert_eq!(run("constant"), vec![9.0, 9.0, 1.0, 2.0, 3.0, 9.0, 9.0]);
    assert_eq!(run("edge"), vec![1.0, 1.0, 1.0, 2.0, 3.0, 3.0, 3.0]);
    assert_eq!(run("reflect"), vec![3.0, 2.0, 1.0, 2.0, 3.0, 2.0, 1.0]);
    assert_eq!(run("wrap"), vec![2.0, 3.0, 1.0, 2.0, 3.0, 1.0, 2.0]);
}

#[test]
fn views_tile_expand_misc() {
    let x = f32v(&[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let r = eval(
        &node("Reshape", 14, vec![]),
        &[x.clone(), i64v(&[2], vec![-1.0, 2.0])],
    )
    .unwrap();
    assert_eq!(r[0].value.shape, vec![3, 2]);
    let u = eval(
        &node("Unsqueeze", 13, vec![]),
        &[x.clone(), i64v(&[2], vec![0.0, -1.0])],
    )
    .unwrap();
    assert_eq!(u[0].value.shape, vec![1, 2, 3, 1]);
    let sq = eval(&node("Squeeze", 11, vec![]), &[u[0].value.clone().into()]).unwrap();
    assert_eq!(sq[0].value.shape, vec![2, 3]);
    let t = eval(
        &node("Tile", 13, vec![]),
        &[f32v(&[2], vec![1.0, 2.0]), i64v(&[1], vec![3.0])],
    )
    .unwrap();
    assert_eq!(t[0].value.data, vec![1.0, 2.0, 1.0, 2.0, 1.0, 2.0]);
    let e = eval(
        &node("Expand", 13, vec![]),
        &[
            f32v(&[2, 1], vec![1.0, 2.0]),
            i64v(&[3], vec![2.0, 1.0, 2.0]),
        ],
    )
    .unwrap();
    assert_eq!(e[0].value.shape, vec![2, 2, 2]);
    assert_eq!(
        e[0].value.data,
        vec![1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 2.0, 2.0]
    );
    let tr = eval(
        &node("Trilu", 14, vec![("upper", Attr::Int(0))]),
        &[
            f32v(&[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
            i64v(&[], vec![0.0]),
        ],
    )
    .unwrap();
    assert_eq!(tr[0].value.data, vec![1.0, 0.0, 0.0, 4.0, 5.0, 0.0]);
    let rg = eval(
        &node("Range", 11, vec![]),
        &[
            f32v(&[], vec![1.0]),
            f32v(&[], vec![2.0]),
            f32v(&[], vec![0.3]),
        ],
    )
    .unwrap();
    assert_eq!(rg[0].value.shape, vec![4]);
    let oh = eval(
        &node("OneHot", 11, vec![("axis", Attr::Int(0))]),
        &[
            i64v(&[2], vec![1.0, -1.0]),
            f32v(&[], vec![3.0]),
            f32v(&[2], vec![0.0, 5.0]),
        ],
    )
    .unwrap();
    assert_eq!(oh[0].value.shape, vec![3, 2]);
    assert_eq!(oh[0].value.data, vec![0.0, 0.0, 5.0, 0.0, 0.0, 5.0]);
    let mut rnd = SplitMix64(99);
    let v = rnd.values(16);
    let d2s = eval(
        &node("SpaceToDepth", 13, vec![("blocksize", Attr::Int(2))]),
        &[f32v(&[1, 1, 4, 4], v.clone())],
    )
    .unwrap();
    let back = eval(
        &node("DepthToSpace", 13, vec![("blocksize", Attr::Int(2))]),
        &[Some(d2s[0].value.clone())],
    )
    .unwrap();
    assert_eq!(back[0].value.data, v);
    assert_eq!(d2s[0].value.data[0..4], [v[0], v[2], v[8], v[10]]);
}
