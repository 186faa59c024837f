//! [`igemm_requantized`] against the definition: the exact sums (the tests' `naive`), then
//! [`crate::quant::requantize_level`] per element with its row's (bias, multiplier).
use super::tests::{lcg, naive};
use super::*;
use crate::quant::requantize_level;

/// Every kernel this CPU runs, ragged shapes, u8 and i8 ranges, one (bias, multiplier) for all
/// rows and one per row, and C written row-major with a padded row stride or column-major: each
/// byte is its sum's level. Levels taken with the rows' parameters in the wrong order (the
/// broken variant) differ.
#[test]
fn requantized_products_are_the_levels_of_the_sums() {
    let mut seed = 23u64;
    for kernel in [IntKernel::Portable, IntKernel::Vnni] {
        if !kernel.is_supported() {
            eprintln!("{kernel:?} not on this CPU: skipped");
            continue;
        }
        for &(m, n, k) in &[(3, 5, 7), (9, 33, 5), (17, 70, 300)] {
            let ad: Vec<u8> = (0..m * k).map(|_| lcg(&mut seed) as u8).collect();
            let bd: Vec<u8> = (0..k * n).map(|_| lcg(&mut seed) as u8).collect();
            let a = Int8Matrix {
                data: &ad,
                rs: k,
                cs: 1,
                signed: true,
            };
            let b = Int8Matrix {
                data: &bd,
                rs: n,
                cs: 1,
                signed: false,
            };
            let (za, zb) = ([3], [128]);
            let sums = naive((m, n, k), &a, &za, &b, &zb);
            let per_row: Vec<(f64, f64)> = (0..m)
                .map(|i| ((i as f64 - 4.0) * 37.0, 1.0 / (40.0 + 13.0 * i as f64)))
                .collect();
            for rows in [&per_row[..1], &per_row[..]] {
                for (lo, hi, zp) in [(0.0, 255.0, 128.0), (-128.0, 127.0, -5.0)] {
                    let rq = Requantize { rows, zp, lo, hi };
                    let want = |i: usize, j: usize, rows: &[(f64, f64)]| {
                        let (bias, mult) = rows[if rows.len() == 1 { 0 } else { i }];
                        requantize_level(sums[i * n + j], bias, mult, zp, lo, hi) as i64 as u8
                    };
                    for (c_rs, c_cs) in [(n + 3, 1), (1, m)] {
                        let mut c = vec![0xAAu8; m * n + 3 * m];
                        igemm_requantized(
                            kernel,
                            (m, n, k),
                            a,
                            &za,
                            b,
                            &zb,
                            rq,
                            &mut c,
                            (c_rs, c_cs),
                        );
                        for i in 0..m {
                            for j in 0..n {
                                assert_eq!(
                                    c[i * c_rs + j * c_cs],
                                    want(i, j, rows),
                                    "{kernel:?} {m}×{n}×{k} ({i}, {j}) rows {} range [{lo}, {hi}]",
                                    rows.len()
                                );
                            }
                        }
                        if rows.len() > 1 {
                            let reversed: Vec<(f64, f64)> = rows.iter().rev().copied().collect();
                            let differs = (0..m).any(|i| {
                                (0..n).any(|j| c[i * c_rs + j * c_cs] != want(i, j, &reversed))
                            });
                            assert!(differs, "rows in the wrong order went unseen");
                        }
                    }
                }
            }
        }
    }
}
