//! Tests of the pooling kernels (a child module of `pool`).
use super::*;
use crate::ir::Attr;
use crate::ops::Kernel;
use crate::ops::testing::run_kernel;

fn call(k: Kernel, attrs: Vec<(&str, Attr)>, x: Tensor, outs: usize) -> Vec<Tensor> {
    run_kernel(k, "X", 22, attrs, vec![Some(x)], outs).unwrap()
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

fn ints(v: &[i64]) -> Attr {
    Attr::Ints(v.to_vec())
}

#[test]
fn maxpool_ceil_dilation_pads_col_major_indices() {
    // 2-D, H=5, W=6, kernel 2x3, strides 2x2, dilations 2x1, pads [1,0,0,1], ceil_mode.
    let (h, w) = (5usize, 6usize);
    let xv = rand(1, 2 * h * w);
    let x = Tensor::from_f32(&[1, 2, h, w], xv.clone()).unwrap();
    let attrs = vec![
        ("kernel_shape", ints(&[2, 3])),
        ("strides", ints(&[2, 2])),
        ("dilations", ints(&[2, 1])),
        ("pads", ints(&[1, 0, 0, 1])),
        ("ceil_mode", Attr::Int(1)),
        ("storage_order", Attr::Int(1)),
    ];
    let out = call(max_pool, attrs, x, 2);
    // rows: (5+1-3)/2 ceil +1 = 3 (last start 3 < 5+1); cols: (6+1-3)/2 +1 = 3.
    assert_eq!(out[0].shape(), &[1, 2, 3, 3]);
    let (vals, idx) = (out[0].to_f64_vec().unwrap(), out[1].to_i64_vec().unwrap());
    for c in 0..2 {
        for i in 0..3 {
            for j in 0..3 {
                let mut best: Option<(f32, i64)> = None;
                for a in 0..2 {
                    for b in 0..3 {
                        let (yy, xx) = ((i * 2 + a * 2) as i64 - 1, (j * 2 + b) as i64);
                        if yy < 0 || yy >= h as i64 || xx >= w as i64 {
                            continue;
                        }
                        let v = xv[(c * h + yy as usize) * w + xx as usize];
                        if best.is_none_or(|(bv, _)| v > bv) {
                            best = Some((v, (c * h * w) as i64 + yy + xx * h as i64));
                        }
                    }
                }
                let (bv, bi) = best.unwrap();
                let o = (c * 3 + i) * 3 + j;
                assert_eq!((vals[o] as f32, idx[o]), (bv, bi), "at {o}");
            }
        }
    }
}

#[test]
fn averagepool_count_include_pad_ceil_1d() {
    // L=5, k=3, s=2, pads [1,1], ceil: windows start at -1, 1, 3 (3 < 5+1), last one overhangs.
    let xv = rand(2, 5);
    let x = Tensor::from_f32(&[1, 1, 5], xv.clone()).unwrap();
    for include in [0, 1] {
        let attrs = vec![
            ("kernel_shape", ints(&[3])),
            ("strides", ints(&[2])),
            ("pads", ints(&[1, 1])),
            ("ceil_mode", Attr::Int(1)),
            ("count_include_pad", Attr::Int(include)),
        ];
        let got = call(average_pool, attrs, x.clone(), 1)
            .remove(0)
            .to_f64_vec()
            .unwrap();
        assert_eq!(got.len(), 3);
        for (o, g) in got.iter().enumerate() {
            let st = o as i64 * 2 - 1;
            let pos: Vec<i64> = (st..st + 3).collect();
            let sum: f32 = pos
                .iter()
                .filter(|&&p| (0..5).contains(&p))
                .map(|&p| xv[p as usize])
                .sum();
            let n = pos
                .iter()
                .filter(|&&p| {
                    if include == 1 {
                        (-1..6).contains(&p)
                    } else {
                        (0..5).contains(&p)
                    }
                })
                .count();
            assert!(
                (*g as f32 - sum / n as f32).abs() < 1e-5,
                "include {include} at {o}: {g} vs {}",
                sum / n as f32
            );
        }
    }
}

/// A NaN makes its windows' max NaN, with the first NaN's index; the next window without one is
/// unaffected.
#[test]
fn maxpool_nan_propagates_with_first_index() {
    let nan = f32::NAN;
    let x = Tensor::from_f32(&[1, 1, 6], vec![1.0, nan, 3.0, nan, 0.5, 2.0]).unwrap();
    let out = call(max_pool, vec![("kernel_shape", ints(&[2]))], x, 2);
    let (v, i) = (out[0].to_f64_vec().unwrap(), out[1].to_i64_vec().unwrap());
    assert!(v[..4].iter().all(|v| v.is_nan()), "{v:?}");
    assert_eq!(v[4], 2.0);
    assert_eq!(i, vec![1, 1, 3, 3, 5]);
    // A NaN first in the window stays too.
    let x = Tensor::from_f32(&[1, 1, 3], vec![nan, 4.0, nan]).unwrap();
    let out = call(max_pool, vec![("kernel_shape", ints(&[3]))], x, 2);
    assert!(out[0].to_f64_vec().unwrap()[0].is_nan());
    assert_eq!(out[1].to_i64_vec().unwrap(), vec![0]);
}

/// Windows wholly in the padding (here made by dilation and SAME_LOWER padding) give -inf and
/// index -1; a window with a tap inside gives its max.
#[test]
fn maxpool_window_in_padding_is_minus_infinity() {
    let x = Tensor::from_f32(&[1, 1, 3, 1], vec![0.33, 0.62, -0.18]).unwrap();
    let attrs = vec![
        ("auto_pad", Attr::String(b"SAME_LOWER".to_vec())),
        ("dilations", ints(&[1, 2])),
        ("kernel_shape", ints(&[2, 2])),
    ];
    let out = call(max_pool, attrs, x, 2);
    assert_eq!(out[0].shape(), &[1, 1, 3, 1]);
    assert_eq!(out[0].to_f64_vec().unwrap(), vec![f64::NEG_INFINITY; 3]);
    assert_eq!(out[1].to_i64_vec().unwrap(), vec![-1; 3]);
    let x = Tensor::from_f32(&[1, 1, 1], vec![7.0]).unwrap();
    let attrs = vec![
        ("kernel_shape", ints(&[2])),
        ("dilations", ints(&[2])),
        ("pads", ints(&[1, 1])),
    ];
    let out = call(max_pool, attrs, x, 1);
    assert_eq!(out[0].to_f64_vec().unwrap(), vec![f64::NEG_INFINITY]);
}

/// The values-only path (no Indices output) and the path with indices give the same values, bit for
/// bit, over geometries with padding, dilations and ceil_mode, on inputs with NaN and ties.
#[test]
fn maxpool_values_only_path_matches_the_indexed_path() {
    let geometries: Vec<Vec<(&str, Attr)>> = vec![
        vec![("kernel_shape", ints(&[3, 3])), ("strides", ints(&[2, 2]))],
        vec![
            ("kernel_shape", ints(&[2, 3])),
            ("pads", ints(&[1, 2, 1, 0])),
            ("dilations", ints(&[2, 1])),
            ("ceil_mode", Attr::Int(1)),
        ],
        vec![
            ("kernel_shape", ints(&[1, 1])),
            ("pads", ints(&[1, 1, 1, 1])),
        ],
        // f32 runs these by the depthwise kernel's window taps: flat planes (stride 1, padded to
        // size), stride phases with ceil_mode windows past the input, a stride over the kernel.
        vec![
            ("kernel_shape", ints(&[3, 3])),
            ("pads", ints(&[1, 1, 1, 1])),
        ],
        vec![
            ("kernel_shape", ints(&[3, 3])),
            ("strides", ints(&[2, 2])),
            ("ceil_mode", Attr::Int(1)),
        ],
        vec![("kernel_shape", ints(&[2, 2])), ("strides", ints(&[3, 3]))],
    ];
    for (s, (attrs, shape)) in geometries
        .into_iter()
        .flat_map(|g| [(g.clone(), [2usize, 3, 9, 11]), (g, [1, 2, 7, 40])])
        .enumerate()
    {
        let mut v = rand(40 + s as u64, shape.iter().product());
        for (i, x) in v.iter_mut().enumerate() {
            if i % 7 == 3 {
                *x = f32::NAN;
            } else {
                *x = (*x * 3.0).round();
            }
        }
        let x = Tensor::from_f32(&shape, v).unwrap();
        let one = call(max_pool, attrs.clone(), x.clone(), 1);
        let two = call(max_pool, attrs, x, 2);
        let bits = |t: &Tensor| -> Vec<u64> {
            t.to_f64_vec()
                .unwrap()
                .iter()
                .map(|v| if v.is_nan() { u64::MAX } else { v.to_bits() })
                .collect()
        };
        assert_eq!(bits(&one[0]), bits(&two[0]), "geometry {s}");
    }
}

/// The separable MaxPool path against the window walk, bit for bit (NaN payloads and the signs of
/// tied zeros included), over geometries at its edges: padding on every side, ceil_mode windows
/// running past the input, stride larger than the kernel, 1-D and 3-D with one tap in depth, and
/// windows wholly in the padding; plus a deliberately broken variant (a max that ignores the NaN
/// rule) that the comparison must catch.
#[test]
fn maxpool_separable_path_matches_the_window_walk() {
    type Attrs = Vec<(&'static str, Attr)>;
    let geometries: Vec<(Vec<usize>, Attrs)> = vec![
        (
            vec![2, 3, 9, 11],
            vec![("kernel_shape", ints(&[3, 3])), ("strides", ints(&[2, 2]))],
        ),
        (
            vec![1, 2, 8, 7],
            vec![
                ("kernel_shape", ints(&[3, 2])),
                ("pads", ints(&[1, 2, 2, 1])),
                ("ceil_mode", Attr::Int(1)),
                ("strides", ints(&[2, 3])),
            ],
        ),
        (
            vec![1, 2, 6, 6],
            vec![("kernel_shape", ints(&[2, 2])), ("strides", ints(&[3, 3]))],
        ),
        (
            vec![2, 2, 13],
            vec![("kernel_shape", ints(&[4])), ("pads", ints(&[2, 3]))],
        ),
        (
            vec![1, 2, 3, 5, 6],
            vec![
                ("kernel_shape", ints(&[1, 3, 3])),
                ("pads", ints(&[0, 1, 1, 0, 1, 1])),
            ],
        ),
        (
            vec![1, 1, 4, 4],
            vec![
                ("kernel_shape", ints(&[3, 3])),
                ("pads", ints(&[3, 3, 3, 3])),
                ("strides", ints(&[4, 4])),
            ],
        ),
        // Rows wide enough for a run of interior columns (taken tap by tap over the run), at
        // strides 2, 1 and 3: ResNet's stem pool, a same-size pool, a stride past the kernel.
        (
            vec![1, 2, 9, 37],
            vec![
                ("kernel_shape", ints(&[3, 3])),
                ("pads", ints(&[1, 1, 1, 1])),
                ("strides", ints(&[2, 2])),
            ],
        ),
        (
            vec![1, 2, 5, 30],
            vec![
                ("kernel_shape", ints(&[3, 3])),
                ("pads", ints(&[1, 1, 1, 1])),
            ],
        ),
        (
            vec![1, 1, 4, 31],
            vec![
                ("kernel_shape", ints(&[2, 2])),
                ("pads", ints(&[0, 1, 0, 2])),
                ("strides", ints(&[3, 3])),
                ("ceil_mode", Attr::Int(1)),
            ],
        ),
    ];
    for (s, (shape, attrs)) in geometries.into_iter().enumerate() {
        let n: usize = shape.iter().product();
        let mut v = rand(60 + s as u64, n);
        for (i, x) in v.iter_mut().enumerate() {
            *x = match i % 11 {
                3 => f32::from_bits(0x7fc0_0000 | i as u32),
                5 => -0.0,
                7 => 0.0,
                _ => (*x * 2.0).round(),
            };
        }
        let xa = ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&shape), v).unwrap();
        run_kernel(
            |ctx: &OpCtx, _: &[Option<&Value>]| {
                let g = pool_geom(ctx, &shape)?;
                let os = out_shape(&shape, &g);
                let xd = xa.as_slice().unwrap();
                assert!(max_values::separable(&g), "geometry {s}");
                let fast = max_values::max_pool_rows(&g, xd, &os, max_values::take)?;
                let walk = max_values::max_pool_windows(&g, xd, &os)?;
                let bits =
                    |a: &ndarray::ArrayD<f32>| a.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&fast), bits(&walk), "geometry {s}");
                // The broken variant: a plain `>` max, under which a later value replaces a NaN.
                let plain = |b: f32, v: f32| if v > b { v } else { b };
                let broken = max_values::max_pool_rows(&g, xd, &os, plain)?;
                assert_ne!(
                    bits(&broken),
                    bits(&walk),
                    "geometry {s}: a broken max went unnoticed"
                );
                Ok(vec![])
            },
            "MaxPool",
            22,
            attrs,
            vec![],
            0,
        )
        .unwrap();
    }
}

/// GlobalAveragePool's plane mean against the f64 mean, on planes of every length around its
/// sixteen lanes and a 112×112 one: within (lg n + 2) ulps of the mean's magnitude scale (each lane
/// sums n/16 terms). A mean that leaves out the tail past the last whole group of sixteen must be
/// caught by the same comparison.
#[test]
fn global_average_pool_plane_mean_matches_f64() {
    let within = |p: &[f32], got: f32| {
        let want = p.iter().map(|&v| v as f64).sum::<f64>() / p.len() as f64;
        let scale = p.iter().map(|&v| (v as f64).abs()).sum::<f64>() / p.len() as f64;
        let bound = ((p.len() as f64).log2() + 2.0) * f32::EPSILON as f64 * scale;
        (got as f64 - want).abs() <= bound
    };
    for (s, len) in [1usize, 15, 16, 17, 31, 33, 1000, 112 * 112]
        .into_iter()
        .enumerate()
    {
        let p: Vec<f32> = rand(80 + s as u64, len).iter().map(|v| v + 0.25).collect();
        assert!(within(&p, plane_mean(&p)), "len {len}");
        if len % 16 != 0 && len > 16 {
            // Broken: the tail dropped (the sum of the whole groups over all n values).
            let whole = len - len % 16;
            let broken = p[..whole].iter().sum::<f32>() / len as f32;
            assert!(
                !within(&p, broken),
                "len {len}: a dropped tail went unnoticed"
            );
        }
    }
    // Through the kernel: one mean per plane, in the output's [N, C, 1, 1] shape.
    let xv = rand(90, 2 * 3 * 7 * 9);
    let x = Tensor::from_f32(&[2, 3, 7, 9], xv.clone()).unwrap();
    let y = call(global_average_pool, vec![], x, 1).remove(0);
    assert_eq!(y.shape(), &[2, 3, 1, 1]);
    let Tensor::F32(ya) = &y else { panic!("{y:?}") };
    for (i, plane) in xv.chunks(63).enumerate() {
        assert!(within(plane, ya.as_slice().unwrap()[i]), "plane {i}");
    }
}

/// f32 AveragePool over two spatial dims (the depthwise kernel's window taps with weights of one)
/// against each window summed from zero in row-major order and divided by its count, bit for bit:
/// padding counted or not, ceil_mode windows past the input, strides over the kernel, dilation,
/// flat and wide planes, NaN inputs; the same sums in reverse window order must be caught.
#[test]
fn averagepool_f32_equals_window_order_sums() {
    let geometries: Vec<Vec<(&str, Attr)>> = vec![
        vec![
            ("kernel_shape", ints(&[3, 3])),
            ("pads", ints(&[1, 1, 1, 1])),
        ],
        vec![
            ("kernel_shape", ints(&[3, 3])),
            ("pads", ints(&[1, 1, 1, 1])),
            ("count_include_pad", Attr::Int(1)),
        ],
        vec![
            ("kernel_shape", ints(&[3, 3])),
            ("strides", ints(&[2, 2])),
            ("ceil_mode", Attr::Int(1)),
        ],
        vec![("kernel_shape", ints(&[2, 2])), ("strides", ints(&[3, 3]))],
        vec![
            ("kernel_shape", ints(&[2, 3])),
            ("pads", ints(&[1, 2, 1, 0])),
            ("dilations", ints(&[2, 1])),
        ],
    ];
    for (s, (attrs, shape)) in geometries
        .into_iter()
        .flat_map(|g| [(g.clone(), [2usize, 3, 9, 11]), (g, [1, 2, 7, 40])])
        .enumerate()
    {
        let mut v = rand(70 + s as u64, shape.iter().product());
        v[5] = f32::NAN;
        let x = Tensor::from_f32(&shape, v.clone()).unwrap();
        let got = call(average_pool, attrs.clone(), x, 1).remove(0);
        let got: Vec<f32> = got
            .to_f64_vec()
            .unwrap()
            .iter()
            .map(|&v| v as f32)
            .collect();
        let attr = |name: &str, d: [i64; 2]| -> [i64; 2] {
            attrs
                .iter()
                .find(|(n, _)| *n == name)
                .map_or(d, |(_, a)| match a {
                    Attr::Ints(v) => [v[0], v[1]],
                    _ => d,
                })
        };
        let (k, st, dl) = (
            attr("kernel_shape", [1, 1]),
            attr("strides", [1, 1]),
            attr("dilations", [1, 1]),
        );
        let pads = attrs
            .iter()
            .find(|(n, _)| *n == "pads")
            .map_or(vec![0; 4], |(_, a)| match a {
                Attr::Ints(v) => v.clone(),
                _ => vec![0; 4],
            });
        let include = attrs.iter().any(|(n, _)| *n == "count_include_pad");
        let ceil = attrs.iter().any(|(n, _)| *n == "ceil_mode");
        let (h, w) = (shape[2] as i64, shape[3] as i64);
        let out = |i: i64, k: i64, s: i64, d: i64, p0: i64, p1: i64| {
            let span = i + p0 + p1 - ((k - 1) * d + 1);
            let o = if ceil {
                (span + s - 1) / s + 1
            } else {
                span / s + 1
            };
            // ceil_mode's last window must start inside the input or its left padding.
            if ceil && (o - 1) * s >= i + p0 {
                o - 1
            } else {
                o
            }
        };
        let oh = out(h, k[0], st[0], dl[0], pads[0], pads[2]);
        let ow = out(w, k[1], st[1], dl[1], pads[1], pads[3]);
        let planes = shape[0] * shape[1];
        let mean = |reverse: bool| -> Vec<u32> {
            let mut r = Vec::new();
            for p in 0..planes {
                let src = &v[p * (h * w) as usize..];
                for y in 0..oh {
                    for xo in 0..ow {
                        let mut taps = Vec::new();
                        let mut padded = 0;
                        for a in 0..k[0] {
                            for b in 0..k[1] {
                                let (iy, ix) = (
                                    y * st[0] + a * dl[0] - pads[0],
                                    xo * st[1] + b * dl[1] - pads[1],
                                );
                                if iy >= -pads[0]
                                    && iy < h + pads[2]
                                    && ix >= -pads[1]
                                    && ix < w + pads[3]
                                {
                                    padded += 1;
                                }
                                if iy >= 0 && iy < h && ix >= 0 && ix < w {
                                    taps.push(src[(iy * w + ix) as usize]);
                                }
                            }
                        }
                        if reverse {
                            taps.reverse();
                        }
                        let count = if include { padded } else { taps.len() };
                        let sum = taps.iter().fold(0.0f32, |a, &b| a + b);
                        let m = if count == 0 {
                            f32::NAN
                        } else {
                            sum / count as f32
                        };
                        r.push(if m.is_nan() { u32::MAX } else { m.to_bits() });
                    }
                }
            }
            r
        };
        let got: Vec<u32> = got
            .iter()
            .map(|v| if v.is_nan() { u32::MAX } else { v.to_bits() })
            .collect();
        assert_eq!(got, mean(false), "geometry {s}");
        assert_ne!(
            got,
            mean(true),
            "geometry {s}: the window order went unseen"
        );
    }
}

/// A 3-D f32 AveragePool (not strided along its columns, so on the depthwise taps too) against
/// each window summed from zero in row-major order and divided by its count, bit for bit, padding
/// counted and not; the reverse order must be caught.
#[test]
fn averagepool_f32_3d_equals_window_order_sums() {
    let (k, st, pb, pe) = ([2i64, 2, 3], [1i64, 2, 1], [1i64, 0, 1], [0i64, 1, 1]);
    let shape = [1usize, 2, 5, 6, 7];
    let v = rand(91, shape.iter().product());
    for include in [false, true] {
        let attrs = vec![
            ("kernel_shape", ints(&k)),
            ("strides", ints(&st)),
            ("pads", ints(&[pb[0], pb[1], pb[2], pe[0], pe[1], pe[2]])),
            ("count_include_pad", Attr::Int(include as i64)),
        ];
        let x = Tensor::from_f32(&shape, v.clone()).unwrap();
        let got = call(average_pool, attrs, x, 1).remove(0);
        let got: Vec<u32> = got
            .to_f64_vec()
            .unwrap()
            .iter()
            .map(|&v| (v as f32).to_bits())
            .collect();
        let ins = [shape[2] as i64, shape[3] as i64, shape[4] as i64];
        let outs: Vec<i64> = (0..3)
            .map(|i| (ins[i] + pb[i] + pe[i] - k[i]) / st[i] + 1)
            .collect();
        let mean = |reverse: bool| -> Vec<u32> {
            let mut r = Vec::new();
            for p in 0..shape[1] {
                let src = &v[p * (ins[0] * ins[1] * ins[2]) as usize..];
                for o0 in 0..outs[0] {
                    for o1 in 0..outs[1] {
                        for o2 in 0..outs[2] {
                            let (mut taps, mut padded) = (Vec::new(), 0);
                            for a in 0..k[0] {
                                for b in 0..k[1] {
                                    for c in 0..k[2] {
                                        let at = [
                                            o0 * st[0] + a - pb[0],
                                            o1 * st[1] + b - pb[1],
                                            o2 * st[2] + c - pb[2],
                                        ];
                                        if (0..3).all(|i| at[i] >= -pb[i] && at[i] < ins[i] + pe[i])
                                        {
                                            padded += 1;
                                        }
                                        if (0..3).all(|i| at[i] >= 0 && at[i] < ins[i]) {
                                            taps.push(
                                                src[((at[0] * ins[1] + at[1]) * ins[2] + at[2])
                                                    as usize],
                                            );
                                        }
                                    }
                                }
                            }
                            if reverse {
                                taps.reverse();
                            }
                            let count = if include { padded } else { taps.len() };
                            let sum = taps.iter().fold(0.0f32, |a, &b| a + b);
                            r.push((sum / count as f32).to_bits());
                        }
                    }
                }
            }
            r
        };
        assert_eq!(got, mean(false), "count_include_pad={include}");
        assert_ne!(
            got,
            mean(true),
            "count_include_pad={include}: the window order went unseen"
        );
    }
}
