//! The packed GEMM against f64 sums under the bound the runtime's verification uses for sums and
//! products (`64·ε·Σ|terms| + ½ulp`), at the edges of every tile and block, on every instruction set
//! this CPU has, split across threads and not; and a deliberately broken GEMM that the check must
//! catch.
use super::*;
use crate::Isa;
use crate::pack::{ConvPatches, PackedB};

use crate::testing::rand;

/// `(value, Σ|terms|)` of `C[i, j]` in f64 with the bias and the activation.
fn reference(
    a: &[f32],
    b: impl Fn(usize, usize) -> f32,
    (m, n, k): (usize, usize, usize),
    bias: Option<&[f32]>,
    act: Activation,
) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(m * n);
    for i in 0..m {
        for j in 0..n {
            let (mut s, mut mag) = (0f64, 0f64);
            for p in 0..k {
                let t = a[i * k + p] as f64 * b(p, j) as f64;
                s += t;
                mag += t.abs();
            }
            if let Some(bias) = bias {
                s += bias[i] as f64;
                mag += (bias[i] as f64).abs();
            }
            // Activations here are monotone and 1-Lipschitz or nearly: judge after them too.
            out.push((
                act.scalar(s as f32) as f64,
                mag.max(act.scalar(s as f32).abs() as f64),
            ));
        }
    }
    out
}

/// The first element outside the bound, if any.
fn outside(got: &[f32], want: &[(f64, f64)], n: usize, ldc: usize) -> Option<String> {
    let eps = f32::EPSILON as f64;
    for (idx, (v, mag)) in want.iter().enumerate() {
        let (i, j) = (idx / n, idx % n);
        let g = got[i * ldc + j] as f64;
        // 64·ε·m plus half an f32 ulp at the larger value (at least half the smallest subnormal).
        let half_ulp = (v.abs().max(g.abs()) * eps / 2.0).max(f32::from_bits(1) as f64 / 2.0);
        let bound = 64.0 * eps * mag.max(v.abs()) + half_ulp;
        if (g - v).abs() > bound || g.is_nan() != v.is_nan() {
            return Some(format!("C[{i},{j}] = {g}, want {v} (bound {bound:e})"));
        }
    }
    None
}

#[test]
fn dense_gemm_matches_f64_at_tile_and_block_edges() {
    for &isa in Isa::supported() {
        let (mr, nr) = (isa.mr(), isa.nr());
        for (m, n, k) in [
            (1, 1, 1),
            (mr, nr, 3),
            (mr + 1, nr - 1, KC),
            (2 * mr - 1, nr + 1, KC + 1),
            (3, NC + nr + 5, 2 * KC + 7),
            (mr * 5 + 2, 2 * NC + 3, 17),
            // Rows four times the columns and more, B packed per call: split by rows, though
            // two units of columns split more evenly than 17 panels.
            (17 * mr, nr + 1, 40),
            // A short sum (tiles A panel by A panel) over more row panels than one block holds.
            (MC_PANELS * mr + mr + 3, 3 * nr + 1, 9),
            // A large enough for its panels to be packed across threads.
            (70, 9, 600),
            (5, 7, 0),
        ] {
            let a = rand(1 + m as u64, m * k);
            let ld = n + 3;
            let bdata = rand(2 + n as u64, k.max(1) * ld);
            let bias = rand(3, m);
            let packed = PackedA::new(isa, m, k, &a, k);
            let src = BSource::Dense { data: &bdata, ld };
            for (with_bias, act) in [
                (false, Activation::None),
                (true, Activation::Relu),
                (true, Activation::Sigmoid),
            ] {
                let epi = Epilogue {
                    bias: with_bias.then_some(&bias[..]),
                    act,
                    residual: None,
                    col_bias: None,
                };
                let want = reference(&a, |p, j| bdata[p * ld + j], (m, n, k), epi.bias, act);
                let ldc = n + 2;
                let mut serial = vec![f32::NAN; m * ldc];
                let mut split = vec![f32::NAN; m * ldc];
                sgemm(&packed, &src, n, &mut serial, ldc, &epi, Threads::Serial);
                sgemm(&packed, &src, n, &mut split, ldc, &epi, Threads::Always);
                if let Some(e) = outside(&serial, &want, n, ldc) {
                    panic!("{isa:?} {m}x{n}x{k} {act:?}: {e}");
                }
                // Each output sums in the same order however the work is split.
                for (x, y) in serial.iter().zip(&split) {
                    assert_eq!(
                        x.to_bits(),
                        y.to_bits(),
                        "{isa:?} {m}x{n}x{k}: split differs"
                    );
                }
                // The padding columns between rows are left alone.
                for i in 0..m {
                    assert!(
                        serial[i * ldc + n..(i + 1) * ldc]
                            .iter()
                            .all(|v| v.is_nan())
                    );
                }
            }
        }
    }
}

#[test]
fn convolution_patches_match_f64() {
    for &isa in Isa::supported() {
        for (c, ins, kernel, strides, dilations, pads, outs) in [
            (
                3,
                [1, 9, 11],
                [1, 3, 3],
                [1, 1, 1],
                [1, 1, 1],
                [0, 1, 1],
                [1, 9, 11],
            ),
            (
                2,
                [1, 8, 8],
                [1, 7, 7],
                [1, 2, 2],
                [1, 1, 1],
                [0, 3, 3],
                [1, 4, 4],
            ),
            (
                5,
                [1, 6, 5],
                [1, 2, 3],
                [1, 2, 1],
                [1, 2, 1],
                [0, 0, 1],
                [1, 2, 5],
            ),
            (
                4,
                [3, 4, 4],
                [2, 2, 2],
                [1, 1, 1],
                [1, 1, 1],
                [1, 0, 1],
                [4, 3, 5],
            ),
        ] {
            let in_sp: usize = ins.iter().product();
            let x = rand(7, c * in_sp);
            let g = ConvPatches {
                x: &x,
                channels: c,
                ins,
                kernel,
                strides,
                dilations,
                pads,
                outs,
            };
            let (k, n) = (
                c * kernel.iter().product::<usize>(),
                outs.iter().product::<usize>(),
            );
            let m = isa.mr() + 3;
            let a = rand(8, m * k);
            let packed = PackedA::new(isa, m, k, &a, k);
            let bias = rand(9, m);
            let epi = Epilogue {
                bias: Some(&bias),
                act: Activation::LeakyRelu { alpha: 0.1 },
                residual: None,
                col_bias: None,
            };
            // The patch matrix written out, for the reference.
            let mut dense = vec![0f32; k * n];
            let mut row = crate::pack::PackScratch::default();
            let mut panel = vec![0f32; n.div_ceil(isa.nr()) * isa.nr() * k];
            BSource::Conv(g).pack(isa.nr(), (0, k), (0, n), &mut panel, &mut row);
            for p in 0..k {
                for j in 0..n {
                    let (q, jj) = (j / isa.nr(), j % isa.nr());
                    dense[p * n + j] = panel[(q * k + p) * isa.nr() + jj];
                }
            }
            let want = reference(&a, |p, j| dense[p * n + j], (m, n, k), epi.bias, epi.act);
            let mut got = vec![f32::NAN; m * n];
            sgemm(
                &packed,
                &BSource::Conv(g),
                n,
                &mut got,
                n,
                &epi,
                Threads::Always,
            );
            if let Some(e) = outside(&got, &want, n, n) {
                panic!("{isa:?} conv {kernel:?}: {e}");
            }
        }
    }
}

/// The check above catches a deliberately broken GEMM: one that leaves out the last step of `K` (the
/// slip a wrong block edge makes).
#[test]
fn a_broken_gemm_is_caught() {
    let isa = Isa::detected();
    let (m, n, k) = (isa.mr() + 1, isa.nr() + 1, KC + 1);
    let a = rand(11, m * k);
    let bdata = rand(12, k * n);
    let want = reference(
        &a,
        |p, j| bdata[p * n + j],
        (m, n, k),
        None,
        Activation::None,
    );
    let src = BSource::Dense {
        data: &bdata,
        ld: n,
    };
    let mut got = vec![0f32; m * n];
    sgemm(
        &PackedA::new(isa, m, k, &a, k),
        &src,
        n,
        &mut got,
        n,
        &Epilogue::NONE,
        Threads::Serial,
    );
    assert!(outside(&got, &want, n, n).is_none());
    let broken = PackedA::new(isa, m, k - 1, &a, k);
    sgemm(
        &broken,
        &src,
        n,
        &mut got,
        n,
        &Epilogue::NONE,
        Threads::Serial,
    );
    assert!(
        outside(&got, &want, n, n).is_some(),
        "a missing step went unnoticed"
    );
}

/// `B` packed once (from a row-major or a transposed store) gives the bits of `B` packed per call,
/// and `A` packed from a transposed store the bits of `A` packed from rows: shapes across tile and
/// block edges, serial and split, with `C` poisoned first.
#[test]
fn prepacked_operands_give_the_same_bits() {
    use crate::pack::PackedB;
    for &isa in Isa::supported() {
        for (m, k, n) in [
            (9usize, 200usize, 37usize),
            (17, 5, 70),
            (3, 400, 1),
            (16, 64, 64),
        ] {
            let a = rand(11, m * k);
            let b = rand(12, k * n);
            let bt: Vec<f32> = (0..n * k).map(|e| b[(e % k) * n + e / k]).collect();
            let at: Vec<f32> = (0..k * m).map(|e| a[(e % m) * k + e / m]).collect();
            let pa = PackedA::new(isa, m, k, &a, k);
            let pa_t = PackedA::strided(isa, m, k, &at, 1, m);
            let pb = PackedB::new(isa, k, n, &b, n, 1);
            let pb_t = PackedB::new(isa, k, n, &bt, 1, k);
            for threads in [Threads::Serial, Threads::Always] {
                let run = |a: &PackedA, src: &BSource| {
                    let mut c = vec![f32::NAN; m * n];
                    sgemm(a, src, n, &mut c, n, &Epilogue::NONE, threads);
                    c.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                };
                let want = run(&pa, &BSource::Dense { data: &b, ld: n });
                assert_eq!(run(&pa, &BSource::Packed(&pb)), want, "{isa:?} {m}x{k}x{n}");
                assert_eq!(
                    run(&pa, &BSource::Packed(&pb_t)),
                    want,
                    "{isa:?} {m}x{k}x{n} Bt"
                );
                assert_eq!(
                    run(&pa_t, &BSource::Packed(&pb)),
                    want,
                    "{isa:?} {m}x{k}x{n} At"
                );
                let ok = c_is_finite(&want);
                assert!(ok, "{isa:?} {m}x{k}x{n}: an element was never written");
            }
        }
    }
}

/// `B` read by row offsets (rows out of order, overlapping, and shifted by one value) gives the
/// bits of the same matrix written out row-major; an offset one value off is seen.
#[test]
fn rows_by_offset_give_the_bits_of_the_matrix_they_name() {
    for &isa in Isa::supported() {
        for (m, k, n) in [
            (9usize, 200usize, 37usize),
            (17, 5, 70),
            (3, 7, 1),
            (16, 64, 600),
        ] {
            let data = rand(21, k * 3 + n + 5);
            let offs: Vec<usize> = (0..k).map(|p| (p * 7) % (k * 3) + p % 2).collect();
            let dense: Vec<f32> = (0..k * n).map(|e| data[offs[e / n] + e % n]).collect();
            let a = rand(22, m * k);
            let pa = PackedA::new(isa, m, k, &a, k);
            for threads in [Threads::Serial, Threads::Always] {
                let run = |offs: &[usize]| {
                    let mut c = vec![f32::NAN; m * n];
                    let src = BSource::Rows { data: &data, offs };
                    sgemm(&pa, &src, n, &mut c, n, &Epilogue::NONE, threads);
                    c.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                };
                let mut want = vec![f32::NAN; m * n];
                let src = BSource::Dense {
                    data: &dense,
                    ld: n,
                };
                sgemm(&pa, &src, n, &mut want, n, &Epilogue::NONE, threads);
                let want: Vec<u32> = want.iter().map(|v| v.to_bits()).collect();
                assert_eq!(run(&offs), want, "{isa:?} {m}x{k}x{n}");
                let mut off_by_one = offs.clone();
                off_by_one[k / 2] += 1;
                assert_ne!(
                    run(&off_by_one),
                    want,
                    "{isa:?} {m}x{k}x{n}: a shifted row went unseen"
                );
            }
        }
    }
}

/// Rows scaled as they are packed give the bits of the GEMM over the scaled matrix (each product
/// the Mul node's), over row strides past the width, blocks of the sum and column tails; a scale
/// taken by column instead of by row must be caught.
#[test]
fn rows_scaled_as_packed_give_the_bits_of_the_scaled_matrix() {
    for &isa in Isa::supported() {
        for (m, k, n) in [
            (9usize, 300usize, 37usize),
            (17, 5, 70),
            (3, 7, 1),
            (16, 64, 600),
        ] {
            let ld = n + 3;
            let data = rand(31, k * ld);
            let scale = rand(32, k.max(n));
            let a = rand(33, m * k);
            let pa = PackedA::new(isa, m, k, &a, k);
            let scaled = |by_row: bool| -> Vec<f32> {
                (0..k * n)
                    .map(|e| {
                        let (p, j) = (e / n, e % n);
                        data[p * ld + j] * if by_row { scale[p] } else { scale[j] }
                    })
                    .collect()
            };
            let gemm = |src: &BSource, threads| {
                let mut c = vec![f32::NAN; m * n];
                sgemm(&pa, src, n, &mut c, n, &Epilogue::NONE, threads);
                c.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            };
            for threads in [Threads::Serial, Threads::Always] {
                let src = BSource::ScaledDense {
                    data: &data,
                    ld,
                    scale: &scale,
                };
                let got = gemm(&src, threads);
                let by_row = scaled(true);
                let want = gemm(
                    &BSource::Dense {
                        data: &by_row,
                        ld: n,
                    },
                    threads,
                );
                assert_eq!(got, want, "{isa:?} {m}x{k}x{n}");
                let by_col = scaled(false);
                if n > 1 {
                    assert_ne!(
                        gemm(
                            &BSource::Dense {
                                data: &by_col,
                                ld: n
                            },
                            threads
                        ),
                        got,
                        "{isa:?} {m}x{k}x{n}: a scale by column went unseen"
                    );
                }
            }
        }
    }
}

/// Offsets that would read past the data are refused.
#[test]
#[should_panic(expected = "row offsets")]
fn row_offsets_past_the_data_are_refused() {
    let a = PackedA::new(Isa::Portable, 1, 2, &[1.0, 2.0], 2);
    let data = [0f32; 10];
    let mut c = [0f32; 4];
    let src = BSource::Rows {
        data: &data,
        offs: &[0, 7],
    };
    sgemm(&a, &src, 4, &mut c, 4, &Epilogue::NONE, Threads::Serial);
}

fn c_is_finite(bits: &[u32]) -> bool {
    bits.iter().all(|b| f32::from_bits(*b).is_finite())
}

/// A residual in the epilogue gives, bit for bit, the GEMM with its bias followed by the residual's
/// Add and the activation, on every instruction set, serial and split, at a row stride wider than
/// the output, across more than one block of columns and of K; the comparison is sensitive to a
/// residual read one column off.
#[test]
fn a_residual_epilogue_equals_the_add_and_activation_after_the_gemm() {
    for &isa in Isa::supported() {
        let (m, n, k) = (2 * isa.mr() + 3, 2 * 512 + 37, 200);
        let a = rand(21, m * k);
        let b = rand(22, k * n);
        let bias = rand(23, m);
        let ldc = n + 5;
        let res = rand(24, m * ldc);
        let packed = PackedA::new(isa, m, k, &a, k);
        let src = BSource::Dense { data: &b, ld: n };
        let plain = Epilogue {
            bias: Some(&bias),
            act: Activation::None,
            residual: None,
            col_bias: None,
        };
        let mut want = vec![0f32; m * ldc];
        sgemm(&packed, &src, n, &mut want, ldc, &plain, Threads::Serial);
        let mut shifted = want.clone();
        for i in 0..m {
            let row = &mut want[i * ldc..i * ldc + n];
            Activation::Relu.apply_add(row, None, &res[i * ldc..]);
            let row = &mut shifted[i * ldc..i * ldc + n];
            Activation::Relu.apply_add(row, None, &res[i * ldc + 1..]);
        }
        let fused = Epilogue {
            bias: Some(&bias),
            act: Activation::Relu,
            residual: Some(&res),
            col_bias: None,
        };
        for threads in [Threads::Serial, Threads::Always] {
            let mut got = vec![0f32; m * ldc];
            sgemm(&packed, &src, n, &mut got, ldc, &fused, threads);
            for i in 0..m {
                for j in 0..n {
                    let (g, w) = (got[i * ldc + j], want[i * ldc + j]);
                    assert_eq!(
                        g.to_bits(),
                        w.to_bits(),
                        "{isa:?} {threads:?} at ({i}, {j})"
                    );
                }
            }
            let off = (0..m).any(|i| (0..n).any(|j| got[i * ldc + j] != shifted[i * ldc + j]));
            assert!(off, "a residual one column off should change the result");
        }
    }
}

/// A column bias in the epilogue gives, bit for bit, the GEMM followed by the Add of a bias per
/// column (a Linear layer's MatMul and Add), on every instruction set, serial and split, across
/// more than one block of columns and of K, from B packed once and from a dense B; the comparison
/// is sensitive to the bias read one column off.
#[test]
fn a_column_bias_epilogue_equals_the_add_after_the_gemm() {
    for &isa in Isa::supported() {
        let (m, n, k) = (2 * isa.mr() + 3, 2 * 512 + 37, 200);
        let a = rand(31, m * k);
        let b = rand(32, k * n);
        let col = rand(33, n + 1);
        let packed = PackedA::new(isa, m, k, &a, k);
        let pb = PackedB::new(isa, k, n, &b, n, 1);
        let mut want = vec![0f32; m * n];
        let dense = BSource::Dense { data: &b, ld: n };
        sgemm(
            &packed,
            &dense,
            n,
            &mut want,
            n,
            &Epilogue::NONE,
            Threads::Serial,
        );
        let mut shifted = want.clone();
        for i in 0..m {
            for j in 0..n {
                want[i * n + j] += col[j];
                shifted[i * n + j] += col[j + 1];
            }
        }
        let fused = Epilogue {
            bias: None,
            act: Activation::None,
            residual: None,
            col_bias: Some(&col[..n]),
        };
        for src in [dense, BSource::Packed(&pb)] {
            for threads in [Threads::Serial, Threads::Always] {
                let mut got = vec![f32::NAN; m * n];
                sgemm(&packed, &src, n, &mut got, n, &fused, threads);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{isa:?} {threads:?}");
                assert_ne!(bits(&got), bits(&shifted), "one column off passed");
            }
        }
    }
}

/// `PackedA`'s panels hold `A[q·MR + i, p]` at `p·MR + i` (zeros past `M`) on every instruction
/// set, for row counts around whole panels and depths around the 8-wide transposes and their
/// tails, from a row stride wider than a row; the comparison catches two rows swapped.
#[test]
fn packed_a_panels_hold_each_value_in_its_place() {
    for &isa in Isa::supported() {
        let mr = isa.mr();
        for m in [1usize, 7, 8, 13, 16, 17, 24] {
            for k in [1usize, 7, 8, 9, 33] {
                let lda = k + 3;
                let a = rand(41 + (m * k) as u64, m * lda);
                let packed = PackedA::new(isa, m, k, &a, lda);
                let want = |q: usize, swap: bool| -> Vec<f32> {
                    let mut v = vec![0f32; mr * k];
                    for i in 0..mr.min(m - q * mr) {
                        let row = match (swap, i) {
                            (true, 0) if m - q * mr > 1 => 1,
                            (true, 1) => 0,
                            _ => i,
                        };
                        for p in 0..k {
                            v[p * mr + i] = a[(q * mr + row) * lda + p];
                        }
                    }
                    v
                };
                for q in 0..m.div_ceil(mr) {
                    let got = &packed.panel(q, 0)[..mr * k];
                    assert_eq!(got, &want(q, false)[..], "{isa:?} m={m} k={k} panel {q}");
                    if m - q * mr > 1 {
                        assert_ne!(got, &want(q, true)[..], "swapped rows passed");
                    }
                }
            }
        }
    }
}

/// A lone row (a batch of one, and the last row panel of 9 rows) gives the bits of the same row
/// computed in a full tile of 8: four whole B panels at a time (`row_of_4`), the rest panel by
/// panel, over several blocks of the sum, packed and dense B, with a bias and an activation,
/// split across threads and not.
#[test]
fn a_lone_row_has_the_bits_of_its_row_in_a_full_tile() {
    let (k, n) = (700, 300);
    let x = rand(31, k);
    let b = rand(32, k * n);
    // Row 0's bias is row 8's too, so that the three runs' rows of `x` share it.
    let mut bias = rand(33, 9);
    bias[8] = bias[0];
    let epi = Epilogue {
        bias: Some(&bias),
        act: Activation::Relu,
        residual: None,
        col_bias: None,
    };
    // `x` as row 0 of eight rows, and as row 8 of nine; the other rows random.
    let eight: Vec<f32> = x.iter().copied().chain(rand(34, 7 * k)).collect();
    let nine: Vec<f32> = rand(35, 8 * k)
        .into_iter()
        .chain(x.iter().copied())
        .collect();
    for &isa in Isa::supported() {
        let pb = PackedB::new(isa, k, n, &b, n, 1);
        for threads in [Threads::Serial, Threads::Always] {
            for src in [BSource::Packed(&pb), BSource::Dense { data: &b, ld: n }] {
                let run = |a: &[f32], m: usize, row: usize| {
                    let pa = PackedA::new(isa, m, k, a, k);
                    let mut c = vec![f32::NAN; m * n];
                    sgemm(&pa, &src, n, &mut c, n, &epi, threads);
                    c[row * n..(row + 1) * n]
                        .iter()
                        .map(|v| v.to_bits())
                        .collect::<Vec<_>>()
                };
                let lone = run(&x, 1, 0);
                assert!(c_is_finite(&lone), "{isa:?}: an element never written");
                assert_eq!(
                    lone,
                    run(&eight, 8, 0),
                    "{isa:?} {threads:?} against 8 rows"
                );
                assert_eq!(lone, run(&nine, 9, 8), "{isa:?} {threads:?} against 9 rows");
            }
        }
    }
}

/// Every activation, with a bias and a residual, a column bias, or neither, on a sum of one block
/// (whose full AVX-512 tiles apply the epilogue in registers, the partial ones and HardSwish as
/// stored rows): bit for bit the GEMM's plain sums with `act((x + bias) + add)` applied after, on
/// every instruction set, serial and split. The bias added after the activation must be caught.
#[test]
fn the_epilogue_in_registers_equals_the_pass_over_stored_rows() {
    for &isa in Isa::supported() {
        let (m, n, k) = (2 * isa.mr() + 3, 3 * 32 + 7, 40);
        let (a, b) = (rand(51, m * k), rand(52, k * n));
        let (bias, res, cols) = (rand(53, m), rand(54, m * n), rand(55, n));
        let packed = PackedA::new(isa, m, k, &a, k);
        let src = BSource::Dense { data: &b, ld: n };
        let mut plain = vec![0f32; m * n];
        sgemm(
            &packed,
            &src,
            n,
            &mut plain,
            n,
            &Epilogue::NONE,
            Threads::Serial,
        );
        for act in crate::testing::ACTIVATIONS {
            for (bias, residual, col_bias) in [
                (Some(&bias[..]), Some(&res[..]), None),
                (Some(&bias[..]), None, Some(&cols[..])),
                (None, Some(&res[..]), None),
                (Some(&bias[..]), None, None),
            ] {
                let epi = Epilogue {
                    bias,
                    act,
                    residual,
                    col_bias,
                };
                let want = |late_bias: bool| -> Vec<u32> {
                    (0..m * n)
                        .map(|e| {
                            let (i, j) = (e / n, e % n);
                            let add = residual.map(|r| r[e]).or(col_bias.map(|c| c[j]));
                            let mut x = plain[e];
                            if let (Some(b), false) = (bias, late_bias) {
                                x += b[i];
                            }
                            if let Some(r) = add {
                                x += r;
                            }
                            let mut y = act.scalar(x);
                            if let (Some(b), true) = (bias, late_bias) {
                                y += b[i];
                            }
                            y.to_bits()
                        })
                        .collect()
                };
                for threads in [Threads::Serial, Threads::Always] {
                    let mut got = vec![f32::NAN; m * n];
                    sgemm(&packed, &src, n, &mut got, n, &epi, threads);
                    let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
                    let first = got.iter().zip(want(false)).position(|(g, w)| *g != w);
                    assert!(first.is_none(), "{isa:?} {act:?} {threads:?}: at {first:?}");
                    // The bias moved past the activation (the same where it is the identity).
                    if bias.is_some() && act != Activation::None {
                        assert!(got != want(true), "the bias after {act:?} went unseen");
                    }
                }
            }
        }
    }
}
