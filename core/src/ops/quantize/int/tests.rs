//! The exact f64/f32 paths of the integer ops against their definitions.
use super::*;

fn lcg(seed: &mut u64) -> u64 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *seed >> 33
}

/// Worst-case 8-bit products (±255 · ±255, odd, mostly one sign) over K = 1,000: four slices
/// of the exact f32 path, every output equal to the integer sum; and the same product as one
/// f32 GEMM over all of K (the slicing taken out: the broken variant) is caught, its sums past
/// 2²⁴ having lost their odd units.
#[test]
fn integer_products_are_exact_past_one_slice() {
    let (m, n, k) = (3, 5, 1000);
    let mut s = 11u64;
    let a: Vec<f64> = (0..m * k)
        .map(|i| {
            if i % 7 == 0 {
                -255.0
            } else {
                255.0 - (lcg(&mut s) % 3) as f64 * 2.0
            }
        })
        .collect();
    let b: Vec<f64> = (0..k * n)
        .map(|_| 255.0 - (lcg(&mut s) % 2) as f64 * 2.0)
        .collect();
    let naive = |i: usize, j: usize| -> i64 {
        (0..k)
            .map(|p| a[i * k + p] as i64 * b[p * n + j] as i64)
            .sum()
    };
    let mut c = vec![f64::NAN; m * n];
    gemm_f64(m, n, k, &a, &b, &mut c);
    for i in 0..m {
        for j in 0..n {
            assert_eq!(c[i * n + j], naive(i, j) as f64, "({i}, {j})");
            assert!(naive(i, j).abs() > 1 << 24, "the sums must pass 2^24");
        }
    }
    // One f32 GEMM over all of K: wrong somewhere.
    let (a32, b32): (Vec<f32>, Vec<f32>) = (
        a.iter().map(|&v| v as f32).collect(),
        b.iter().map(|&v| v as f32).collect(),
    );
    let mut whole = vec![0f32; m * n];
    crate::ops::matmul::gemm_into(
        m, n, k, &a32, k, 1, &b32, n, 1, &mut whole, n, 1.0, false, false,
    );
    let wrong = (0..m * n)
        .filter(|&i| whole[i] as f64 != naive(i / n, i % n) as f64)
        .count();
    assert!(
        wrong > 0,
        "an unsliced f32 GEMM was exact: the test data is too easy"
    );
    // Operands that are not small integers (float8 values) take the f64 kernels.
    assert!(small_ints(&[0.5, 1.0]).is_none());
    assert!(small_ints(&[256.0]).is_none());
    assert!(small_ints(&[f64::NAN]).is_none());
    assert_eq!(
        small_ints(&[-255.0, 0.0, 7.0]),
        Some(vec![-255.0, 0.0, 7.0])
    );
}

#[test]
fn batched_matmul_matches_naive() {
    let mut s = 3u64;
    let (ash, bsh) = ([2, 1, 3, 4], [3, 4, 5]);
    let a: Vec<f64> = (0..24)
        .map(|_| (lcg(&mut s) % 255) as f64 - 128.0)
        .collect();
    let b: Vec<f64> = (0..60).map(|_| (lcg(&mut s) % 255) as f64).collect();
    let (c, shape) = matmul_f64(&a, &ash, &b, &bsh).unwrap();
    assert_eq!(shape, vec![2, 3, 3, 5]);
    for i in 0..2 {
        for j in 0..3 {
            for m in 0..3 {
                for n in 0..5 {
                    let want: f64 = (0..4)
                        .map(|k| a[i * 12 + m * 4 + k] * b[j * 20 + k * 5 + n])
                        .sum();
                    assert_eq!(c[((i * 3 + j) * 3 + m) * 5 + n], want);
                }
            }
        }
    }
}

#[test]
fn conv_matches_direct_sum() {
    // x [2, 4, 7, 6], w [6, 2, 3, 2], group 2, strides [2, 1], dilations [1, 2], pads [1, 0, 2, 1].
    let g = Geom {
        n: 2,
        c: 4,
        m: 6,
        group: 2,
        ins: vec![7, 6],
        k: vec![3, 2],
        stride: vec![2, 1],
        dil: vec![1, 2],
        pad: vec![1, 0],
        outs: vec![(7 + 3 - 3) / 2 + 1, (6 + 1 - 3) + 1],
    };
    let mut s = 5u64;
    let x: Vec<f64> = (0..2 * 4 * 42)
        .map(|_| (lcg(&mut s) % 255) as f64 - 100.0)
        .collect();
    let w: Vec<f64> = (0..6 * 2 * 6)
        .map(|_| (lcg(&mut s) % 255) as f64 - 128.0)
        .collect();
    let y = conv_f64(&g, &x, &w);
    let (oh, ow) = (g.outs[0], g.outs[1]);
    for n in 0..2 {
        for m in 0..6 {
            let gi = m / 3;
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut want = 0.0;
                    for c in 0..2 {
                        for ky in 0..3 {
                            for kx in 0..2 {
                                let iy = (oy * 2 + ky) as isize - 1;
                                let ix = (ox + kx * 2) as isize;
                                if (0..7).contains(&iy) && (0..6).contains(&ix) {
                                    let xi =
                                        ((n * 4 + gi * 2 + c) * 7 + iy as usize) * 6 + ix as usize;
                                    want += x[xi] * w[((m * 2 + c) * 3 + ky) * 2 + kx];
                                }
                            }
                        }
                    }
                    assert_eq!(y[((n * 6 + m) * oh + oy) * ow + ox], want);
                }
            }
        }
    }
}
