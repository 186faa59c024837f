//! The contrib quantized ops against their formulas, written here on the levels with index loops:
//! random u8 and i8 data, broadcasting, both pool layouts, several concatenated inputs, QGemm's
//! transposes, per-column scales, bias and f32 output. The comparison is shown to catch a kernel
//! given the wrong scale, one that rounds ties away from zero, and a QGemm that drops its bias.
use ndarray::{ArrayD, IxDyn};

use super::*;
use crate::ir::Attr;
use crate::ops::testing::{run_kernel, seeded_f32};

fn bytes_of(seed: u64, n: usize) -> Vec<u8> {
    seeded_f32(seed, n, 0.0, 256.0)
        .iter()
        .map(|&v| v as u8)
        .collect()
}

fn q8(d: DType, shape: &[usize], seed: u64) -> Tensor {
    tensor_of(
        ArrayD::from_shape_vec(IxDyn(shape), bytes_of(seed, shape.iter().product())).unwrap(),
        d,
    )
}

fn scalar(v: f32) -> Tensor {
    Tensor::from_f32(&[], vec![v]).unwrap()
}

fn zero(d: DType, z: i64) -> Tensor {
    tensor_of(ArrayD::from_elem(IxDyn(&[]), z as u8), d)
}

/// The levels of an 8-bit tensor.
fn levels(t: &Tensor) -> Vec<i64> {
    to_f64_vec(t).unwrap().iter().map(|&v| v as i64).collect()
}

/// The formula's level: nearest (ties to even), saturated.
fn level(v: f64, s: f64, z: i64, d: DType) -> i64 {
    let (lo, hi) = int_range(d).unwrap();
    ((v / s).round_ties_even() as i64 + z).clamp(lo, hi)
}

fn run(op: &str, attrs: Vec<(&str, Attr)>, ins: Vec<Option<Tensor>>) -> Tensor {
    let k = Registry::cpu().get(DOMAIN, op).expect("registered");
    run_kernel(k, op, 1, attrs, ins, 1).unwrap().remove(0)
}

const TYPES: [DType; 2] = [DType::U8, DType::I8];

#[test]
fn add_and_mul_follow_the_formula_with_broadcasting() {
    for d in TYPES {
        let (za, zb, zc) = if d == DType::U8 {
            (131, 120, 128)
        } else {
            (3, -5, -2)
        };
        let (sa, sb, sc) = (0.021f32, 0.013f32, 0.027f32);
        let a = q8(d, &[2, 3, 4], 1);
        let b = q8(d, &[3, 1], 2);
        for (op, f) in [
            ("QLinearAdd", (|x, y| x + y) as fn(f64, f64) -> f64),
            ("QLinearMul", |x, y| x * y),
        ] {
            let sc = if op == "QLinearMul" { sc * 5.0 } else { sc };
            let ins = vec![
                Some(a.clone()),
                Some(scalar(sa)),
                Some(zero(d, za)),
                Some(b.clone()),
                Some(scalar(sb)),
                Some(zero(d, zb)),
                Some(scalar(sc)),
                Some(zero(d, zc)),
            ];
            let got = run(op, vec![], ins);
            assert_eq!(got.shape(), &[2, 3, 4]);
            assert_eq!(got.dtype(), d);
            let (la, lb) = (levels(&a), levels(&b));
            let want: Vec<i64> = (0..24)
                .map(|i| {
                    let (j, _) = ((i / 4) % 3, i % 4);
                    let x = (la[i] - za) as f64 * sa as f64;
                    let y = (lb[j] - zb) as f64 * sb as f64;
                    level(f(x, y), sc as f64, zc, d)
                })
                .collect();
            assert_eq!(levels(&got), want, "{op} {d}");
            // The broken variant: B read with A's scale.
            let wrong: Vec<i64> = (0..24)
                .map(|i| {
                    let j = (i / 4) % 3;
                    let x = (la[i] - za) as f64 * sa as f64;
                    let y = (lb[j] - zb) as f64 * sa as f64;
                    level(f(x, y), sc as f64, zc, d)
                })
                .collect();
            assert_ne!(levels(&got), wrong, "{op} {d}: a wrong scale must show");
        }
    }
}

#[test]
fn sigmoid_and_leaky_relu_map_every_level() {
    for d in TYPES {
        // Every byte once, so each table entry is checked.
        let x = tensor_of(
            ArrayD::from_shape_vec(IxDyn(&[256]), (0..=255).collect()).unwrap(),
            d,
        );
        let (zx, zy) = if d == DType::U8 { (128, 0) } else { (0, -128) };
        let (sx, sy) = (0.05f32, 1.0f32 / 256.0);
        let ins = |sy: f32, zy: i64| {
            vec![
                Some(x.clone()),
                Some(scalar(sx)),
                Some(zero(d, zx)),
                Some(scalar(sy)),
                Some(zero(d, zy)),
            ]
        };
        let got = run("QLinearSigmoid", vec![], ins(sy, zy));
        let want: Vec<i64> = levels(&x)
            .iter()
            .map(|&l| {
                level(
                    1.0 / (1.0 + (-((l - zx) as f64 * sx as f64)).exp()),
                    sy as f64,
                    zy,
                    d,
                )
            })
            .collect();
        assert_eq!(levels(&got), want, "sigmoid {d}");
        let zy = if d == DType::U8 { 100 } else { 0 };
        let got = run(
            "QLinearLeakyRelu",
            vec![("alpha", Attr::Float(0.1))],
            ins(0.04, zy),
        );
        let want: Vec<i64> = levels(&x)
            .iter()
            .map(|&l| {
                let v = (l - zx) as f64 * sx as f64;
                level(
                    if v < 0.0 { 0.1f32 as f64 * v } else { v },
                    0.04f32 as f64,
                    zy,
                    d,
                )
            })
            .collect();
        assert_eq!(levels(&got), want, "leaky relu {d}");
        // Rounding ties away from zero differs on this data (0.1 · (l − 128) · 0.05 / 0.04 has
        // halves): the comparison would catch it.
        let away: Vec<i64> = levels(&x)
            .iter()
            .map(|&l| {
                let v = (l - zx) as f64 * sx as f64;
                let v = if v < 0.0 { 0.1f32 as f64 * v } else { v };
                let (lo, hi) = int_range(d).unwrap();
                ((v / 0.04f32 as f64).round() as i64 + zy).clamp(lo, hi)
            })
            .collect();
        if away != want {
            assert_ne!(levels(&got), away);
        }
    }
}

#[test]
fn global_average_pool_means_each_channel_in_both_layouts() {
    for d in TYPES {
        let (zx, zy) = if d == DType::U8 { (120, 125) } else { (-3, 4) };
        for last in [false, true] {
            let shape = if last { [2, 5, 7, 3] } else { [2, 3, 5, 7] };
            let x = q8(d, &shape, 9);
            let ins = vec![
                Some(x.clone()),
                Some(scalar(0.03)),
                Some(zero(d, zx)),
                Some(scalar(0.011)),
                Some(zero(d, zy)),
            ];
            let got = run(
                "QLinearGlobalAveragePool",
                vec![("channels_last", Attr::Int(last as i64))],
                ins,
            );
            let l = levels(&x);
            let mut want = Vec::new();
            for b in 0..2 {
                for c in 0..3 {
                    let mut sum = 0i64;
                    for p in 0..35 {
                        sum += if last {
                            l[(b * 35 + p) * 3 + c]
                        } else {
                            l[(b * 3 + c) * 35 + p]
                        };
                    }
                    let mean = (sum as f64 / 35.0 - zx as f64) * 0.03f32 as f64;
                    want.push(level(mean, 0.011f32 as f64, zy, d));
                }
            }
            assert_eq!(
                got.shape(),
                if last {
                    &[2, 1, 1, 3][..]
                } else {
                    &[2, 3, 1, 1][..]
                }
            );
            assert_eq!(levels(&got), want, "{d} channels_last {last}");
        }
    }
}

#[test]
fn concat_requantizes_each_input_to_the_output() {
    let d = DType::U8;
    let parts = [
        (q8(d, &[1, 2, 3], 4), 0.02f32, 128i64),
        (q8(d, &[1, 4, 3], 5), 0.05, 100),
    ];
    let (sy, zy) = (0.04f32, 110i64);
    let mut ins = vec![Some(scalar(sy)), Some(zero(d, zy))];
    for (x, s, z) in &parts {
        ins.extend([Some(x.clone()), Some(scalar(*s)), Some(zero(d, *z))]);
    }
    let got = run("QLinearConcat", vec![("axis", Attr::Int(1))], ins);
    assert_eq!(got.shape(), &[1, 6, 3]);
    let want: Vec<i64> = parts
        .iter()
        .flat_map(|(x, s, z)| {
            levels(x)
                .into_iter()
                .map(move |l| level((l - z) as f64 * *s as f64, sy as f64, zy, d))
        })
        .collect();
    assert_eq!(levels(&got), want);
}

#[test]
fn qgemm_follows_the_formula() {
    let (m, k, n) = (5, 19, 6);
    for (trans_a, trans_b, per_column, quantized) in [
        (false, false, false, true),
        (true, false, true, true),
        (false, true, true, false),
        (true, true, false, false),
    ] {
        let a = q8(DType::U8, &if trans_a { [k, m] } else { [m, k] }, 11);
        let b = q8(DType::I8, &if trans_b { [n, k] } else { [k, n] }, 12);
        let (sa, za) = (0.02f32, 130i64);
        let bs: Vec<f32> = (0..n).map(|j| 0.004 + 0.001 * j as f32).collect();
        let bz: Vec<i64> = (0..n).map(|j| j as i64 - 2).collect();
        let (b_scale, b_zero) = if per_column {
            (
                Tensor::from_f32(&[n], bs.clone()).unwrap(),
                tensor_of(
                    ArrayD::from_shape_vec(IxDyn(&[n]), bz.iter().map(|&z| z as u8).collect())
                        .unwrap(),
                    DType::I8,
                ),
            )
        } else {
            (scalar(bs[0]), zero(DType::I8, bz[0]))
        };
        let c: Vec<i32> = (0..n).map(|j| (j as i32 - 3) * 700).collect();
        let alpha = 0.5f32;
        let (sy, zy) = (0.05f32, 120i64);
        let mut ins = vec![
            Some(a.clone()),
            Some(scalar(sa)),
            Some(zero(DType::U8, za)),
            Some(b.clone()),
            Some(b_scale),
            Some(b_zero),
            Some(Tensor::I32(
                ArrayD::from_shape_vec(IxDyn(&[n]), c.clone()).unwrap(),
            )),
        ];
        if quantized {
            ins.extend([Some(scalar(sy)), Some(zero(DType::U8, zy))]);
        }
        let attrs = vec![
            ("alpha", Attr::Float(alpha)),
            ("transA", Attr::Int(trans_a as i64)),
            ("transB", Attr::Int(trans_b as i64)),
        ];
        let got = run("QGemm", attrs, ins);
        let (la, lb) = (levels(&a), levels(&b));
        let at = |i: usize, p: usize| {
            if trans_a {
                la[p * m + i]
            } else {
                la[i * k + p]
            }
        };
        let bt = |p: usize, j: usize| {
            if trans_b {
                lb[j * k + p]
            } else {
                lb[p * n + j]
            }
        };
        let col = |j: usize| if per_column { j } else { 0 };
        let real = |i: usize, j: usize, bias: bool| {
            let s: i64 = (0..k)
                .map(|p| (at(i, p) - za) * (bt(p, j) - bz[col(j)]))
                .sum();
            let s = s + if bias { c[j] as i64 } else { 0 };
            alpha as f64 * sa as f64 * bs[col(j)] as f64 * s as f64
        };
        let out = |bias: bool| -> Vec<f64> {
            (0..m * n)
                .map(|i| {
                    let v = real(i / n, i % n, bias);
                    if quantized {
                        level(v, sy as f64, zy, DType::U8) as f64
                    } else {
                        v as f32 as f64
                    }
                })
                .collect()
        };
        let have = to_f64_vec(&got).unwrap();
        assert_eq!(got.shape(), &[m, n]);
        assert_eq!(got.dtype(), if quantized { DType::U8 } else { DType::F32 });
        assert_eq!(
            have,
            out(true),
            "transA {trans_a} transB {trans_b} per column {per_column}"
        );
        assert_ne!(have, out(false), "a dropped bias must show");
    }
}

#[test]
fn malformed_parameters_are_errors() {
    let d = DType::U8;
    let k = Registry::cpu().get(DOMAIN, "QLinearAdd").unwrap();
    let a = q8(d, &[4], 1);
    // A per-tensor op given a vector scale, and a zero point of the other type.
    let vector = Tensor::from_f32(&[2], vec![0.1, 0.2]).unwrap();
    for (s, z) in [(vector, zero(d, 0)), (scalar(0.1), zero(DType::I8, 0))] {
        let ins = vec![
            Some(a.clone()),
            Some(s),
            Some(z),
            Some(a.clone()),
            Some(scalar(0.1)),
            Some(zero(d, 0)),
            Some(scalar(0.1)),
            Some(zero(d, 0)),
        ];
        assert!(run_kernel(k, "QLinearAdd", 1, vec![], ins, 1).is_err());
    }
}
