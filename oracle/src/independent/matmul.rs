//! MatMul and Gemm through blocked f64 products with Neumaier-compensated accumulation (Einsum in
//! `einsum.rs`).
use super::parallel::deal_rows;
use super::*;

pub(super) const OPS: &[&str] = &["MatMul", "Gemm", "Einsum"];

pub(super) fn check(_node: &NodeSpec) -> Result<(), String> {
    Ok(())
}

/// Terms per block: each block's partial dot product is compensated on its own, then folded into the
/// output's compensated total.
const BLOCK: usize = 16;

/// Output columns computed together: their accumulators stay in the first-level cache, and the k rows
/// of B under them in the second-level cache while the rows of A pass.
const COLUMNS: usize = 128;

/// Strided view of a matrix: element (i, j) at `off + i * rs + j * cs`.
#[derive(Clone, Copy)]
pub(crate) struct Mat<'a> {
    pub data: &'a [f64],
    pub off: usize,
    pub rs: usize,
    pub cs: usize,
}

impl Mat<'_> {
    fn at(&self, i: usize, j: usize) -> f64 {
        self.data[self.off + i * self.rs + j * self.cs]
    }
}

/// One Neumaier step on a (sum, compensation) pair held apart, as [`Neumaier::add`] does it.
#[inline(always)]
fn compensated_add(sum: &mut f64, comp: &mut f64, x: f64) {
    let t = *sum + x;
    *comp += if sum.abs() >= x.abs() {
        (*sum - t) + x
    } else {
        (x - t) + *sum
    };
    *sum = t;
}

/// [`Neumaier::value`] of a pair held apart.
#[inline(always)]
fn compensated_value(sum: f64, comp: f64) -> f64 {
    if sum.is_finite() { sum + comp } else { sum }
}

/// C = A (m x k) . B (k x n); returns (values, Σ|a·b|) row-major. The k dimension is walked in blocks
/// of [`BLOCK`]; each block's partial dot product is compensated and folded into a compensated
/// accumulator, and Σ|a·b| is the sum of the blocks' sums. Rows are spread over `threads` threads;
/// within a row, [`COLUMNS`] outputs advance together so that each row of B is read once per block
/// of outputs. Neither changes what each output adds, or in which order.
pub(crate) fn product(
    a: Mat,
    b: Mat,
    m: usize,
    k: usize,
    n: usize,
    threads: usize,
) -> (Vec<f64>, Vec<f64>) {
    let packed: Vec<f64>;
    let bk: &[f64] = match b.data.get(b.off..b.off + k * n) {
        Some(rows) if b.cs == 1 && b.rs == n => rows,
        _ => {
            packed = (0..k * n).map(|f| b.at(f / n, f % n)).collect();
            &packed
        }
    };
    let mut data = vec![0.0; m * n];
    let mut mag = vec![0.0; m * n];
    deal_rows(threads, &mut data, &mut mag, n, k * n, |first, d, g| {
        // Column tiles outside the rows: the tile of B under them stays in cache for every row.
        for j0 in (0..n).step_by(COLUMNS) {
            let w = COLUMNS.min(n - j0);
            for (r, (dr, gr)) in d.chunks_mut(n).zip(g.chunks_mut(n)).enumerate() {
                let (out, m) = (&mut dr[j0..j0 + w], &mut gr[j0..j0 + w]);
                product_tile(a, first + r, k, bk, n, j0, out, m);
            }
        }
    });
    (data, mag)
}

/// Outputs (i, j0..j0 + out.len()) of [`product`] into `out` and `mag`, B given as k contiguous rows
/// of n elements.
#[allow(clippy::too_many_arguments)]
fn product_tile(
    a: Mat,
    i: usize,
    k: usize,
    b: &[f64],
    n: usize,
    j0: usize,
    out: &mut [f64],
    mag: &mut [f64],
) {
    let w = out.len();
    let (mut acc, mut acc_c, mut acc_m) = ([0.0; COLUMNS], [0.0; COLUMNS], [0.0; COLUMNS]);
    for k0 in (0..k).step_by(BLOCK) {
        let (mut part, mut part_c, mut part_m) = ([0.0; COLUMNS], [0.0; COLUMNS], [0.0; COLUMNS]);
        for p in k0..(k0 + BLOCK).min(k) {
            let ap = a.at(i, p);
            let row = &b[p * n + j0..p * n + j0 + w];
            for (((s, c), pm), &bv) in part.iter_mut().zip(&mut part_c).zip(&mut part_m).zip(row) {
                let t = ap * bv;
                compensated_add(s, c, t);
                *pm += t.abs();
            }
        }
        for j in 0..w {
            compensated_add(
                &mut acc[j],
                &mut acc_c[j],
                compensated_value(part[j], part_c[j]),
            );
            acc_m[j] += part_m[j];
        }
    }
    for j in 0..w {
        out[j] = compensated_value(acc[j], acc_c[j]);
        mag[j] = acc_m[j];
    }
}

pub(super) fn eval(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    if node.op_type == "Gemm" {
        gemm(node, inputs)
    } else if node.op_type == "Einsum" {
        super::einsum::einsum(node, inputs)
    } else {
        matmul(node, inputs)
    }
}

fn matmul(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let a = input(node, inputs, 0)?;
    let b = input(node, inputs, 1)?;
    if a.shape.is_empty() || b.shape.is_empty() {
        return invalid("MatMul operands must have rank >= 1");
    }
    let a_vec = a.shape.len() == 1;
    let b_vec = b.shape.len() == 1;
    let ash: Vec<usize> = if a_vec {
        vec![1, a.shape[0]]
    } else {
        a.shape.clone()
    };
    let bsh: Vec<usize> = if b_vec {
        vec![b.shape[0], 1]
    } else {
        b.shape.clone()
    };
    let (m, k) = (ash[ash.len() - 2], ash[ash.len() - 1]);
    let (k2, n) = (bsh[bsh.len() - 2], bsh[bsh.len() - 1]);
    if k != k2 {
        return invalid(format!(
            "MatMul inner dims differ: {:?} x {:?}",
            a.shape, b.shape
        ));
    }
    let abatch = &ash[..ash.len() - 2];
    let bbatch = &bsh[..bsh.len() - 2];
    let batch = broadcast_shape(&[abatch, bbatch])?;
    let amap = index_map(abatch, &batch);
    let bmap = index_map(bbatch, &batch);
    let mut data = Vec::with_capacity(amap.len() * m * n);
    let mut mag = Vec::with_capacity(amap.len() * m * n);
    for (&ia, &ib) in amap.iter().zip(&bmap) {
        let am = Mat {
            data: &a.data,
            off: ia * m * k,
            rs: k,
            cs: 1,
        };
        let bm = Mat {
            data: &b.data,
            off: ib * k * n,
            rs: n,
            cs: 1,
        };
        let (d, g) = product(am, bm, m, k, n, crate::threads());
        data.extend(d);
        mag.extend(g);
    }
    let mut shape = batch;
    if !a_vec {
        shape.push(m);
    }
    if !b_vec {
        shape.push(n);
    }
    if int_bits(a.dtype).is_some() {
        data = data.into_iter().map(|v| wrap_int(a.dtype, v)).collect();
    }
    Ok(vec![make_output(a.dtype, shape, data, mag)?])
}

fn gemm(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let a = input(node, inputs, 0)?;
    let b = input(node, inputs, 1)?;
    let c = opt_input(inputs, 2);
    if a.shape.len() != 2 || b.shape.len() != 2 {
        return invalid("Gemm operands must be 2-D");
    }
    let ta = node.int("transA", 0)? != 0;
    let tb = node.int("transB", 0)? != 0;
    let alpha = node.float("alpha", 1.0)?;
    let beta = node.float("beta", 1.0)?;
    let (m, k) = if ta {
        (a.shape[1], a.shape[0])
    } else {
        (a.shape[0], a.shape[1])
    };
    let (k2, n) = if tb {
        (b.shape[1], b.shape[0])
    } else {
        (b.shape[0], b.shape[1])
    };
    if k != k2 {
        return invalid(format!(
            "Gemm inner dims differ: {:?} x {:?}",
            a.shape, b.shape
        ));
    }
    let am = if ta {
        Mat {
            data: &a.data,
            off: 0,
            rs: 1,
            cs: m,
        }
    } else {
        Mat {
            data: &a.data,
            off: 0,
            rs: k,
            cs: 1,
        }
    };
    let bm = if tb {
        Mat {
            data: &b.data,
            off: 0,
            rs: 1,
            cs: k,
        }
    } else {
        Mat {
            data: &b.data,
            off: 0,
            rs: n,
            cs: 1,
        }
    };
    let (d, g) = product(am, bm, m, k, n, crate::threads());
    let cmap = match c {
        Some(cv) => {
            let out = broadcast_shape(&[&cv.shape, &[m, n]])?;
            if out != [m, n] {
                return invalid(format!(
                    "Gemm C of shape {:?} does not broadcast to [{m}, {n}]",
                    cv.shape
                ));
            }
            Some(index_map(&cv.shape, &[m, n]))
        }
        None => None,
    };
    let mut data = Vec::with_capacity(m * n);
    let mut mag = Vec::with_capacity(m * n);
    for o in 0..m * n {
        let mut v = alpha * d[o];
        let mut g0 = alpha.abs() * g[o];
        if let (Some(cv), Some(map)) = (c, &cmap) {
            let t = beta * cv.data[map[o]];
            v += t;
            g0 += t.abs();
        }
        data.push(v);
        mag.push(g0);
    }
    if int_bits(a.dtype).is_some() {
        data = data.into_iter().map(|v| wrap_int(a.dtype, v)).collect();
    }
    Ok(vec![make_output(a.dtype, vec![m, n], data, mag)?])
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;
    use crate::Attr;

    fn naive(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                for p in 0..k {
                    c[i * n + j] += a[i * k + p] * b[p * n + j];
                }
            }
        }
        c
    }

    #[test]
    fn matmul_hand_checked() {
        let out = eval(
            &node("MatMul", 13, vec![]),
            &[
                f32v(&[2, 2], vec![1.0, 2.0, 3.0, 4.0]),
                f32v(&[2, 2], vec![5.0, -6.0, 7.0, 8.0]),
            ],
        )
        .unwrap();
        assert_eq!(out[0].value.data, vec![19.0, 10.0, 43.0, 14.0]);
        assert_eq!(out[0].magnitude, vec![19.0, 22.0, 43.0, 50.0]);
        // 1-D x 1-D -> scalar; 1-D x 2-D -> vector.
        let v = eval(
            &node("MatMul", 13, vec![]),
            &[
                f32v(&[3], vec![1.0, 2.0, 3.0]),
                f32v(&[3], vec![4.0, 5.0, 6.0]),
            ],
        )
        .unwrap();
        assert_eq!(v[0].value.shape, Vec::<usize>::new());
        assert_eq!(v[0].value.data, vec![32.0]);
        let w = eval(
            &node("MatMul", 13, vec![]),
            &[
                f32v(&[2], vec![1.0, 2.0]),
                f32v(&[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
            ],
        )
        .unwrap();
        assert_eq!(w[0].value.shape, vec![3]);
        assert_eq!(w[0].value.data, vec![9.0, 12.0, 15.0]);
    }

    #[test]
    fn matmul_batched_broadcast_random() {
        let mut r = SplitMix64(42);
        let (m, k, n) = (3, 37, 4);
        let a = r.values(2 * 1 * m * k);
        let b = r.values(3 * k * n);
        let out = eval(
            &node("MatMul", 13, vec![]),
            &[f32v(&[2, 1, m, k], a.clone()), f32v(&[3, k, n], b.clone())],
        )
        .unwrap();
        assert_eq!(out[0].value.shape, vec![2, 3, m, n]);
        for i in 0..2 {
            for j in 0..3 {
                let want = naive(
                    &a[i * m * k..(i + 1) * m * k],
                    &b[j * k * n..(j + 1) * k * n],
                    m,
                    k,
                    n,
                );
                let off = (i * 3 + j) * m * n;
                assert!(close(&out[0].value.data[off..off + m * n], &want, 1e-12));
            }
        }
    }

    #[test]
    fn gemm_random_trans_and_c() {
        let mut r = SplitMix64(5);
        let (m, k, n) = (3, 20, 5);
        let a = r.values(m * k);
        let b = r.values(k * n);
        let c = r.values(n);
        // Feed A transposed (k x m) and B transposed (n x k).
        let mut at = vec![0.0; k * m];
        for i in 0..m {
            for p in 0..k {
                at[p * m + i] = a[i * k + p];
            }
        }
        let mut bt = vec![0.0; n * k];
        for p in 0..k {
            for j in 0..n {
                bt[j * k + p] = b[p * n + j];
            }
        }
        let nd = node(
            "Gemm",
            13,
            vec![
                ("transA", Attr::Int(1)),
                ("transB", Attr::Int(1)),
                ("alpha", Attr::Float(0.5)),
                ("beta", Attr::Float(2.0)),
            ],
        );
        let out = eval(
            &nd,
            &[f32v(&[k, m], at), f32v(&[n, k], bt), f32v(&[n], c.clone())],
        )
        .unwrap();
        let base = naive(&a, &b, m, k, n);
        let want: Vec<f64> = (0..m * n).map(|o| 0.5 * base[o] + 2.0 * c[o % n]).collect();
        assert!(close(&out[0].value.data, &want, 1e-12));
        let no_c = eval(
            &node("Gemm", 13, vec![]),
            &[f32v(&[m, k], a.clone()), f32v(&[k, n], b.clone()), None],
        )
        .unwrap();
        assert!(close(&no_c[0].value.data, &base, 1e-12));
    }

    /// The product one output at a time, as the oracle first computed it: what the row kernel must
    /// equal bit for bit.
    fn one_at_a_time(a: Mat, b: Mat, m: usize, k: usize, n: usize) -> (Vec<f64>, Vec<f64>) {
        let mut acc = vec![Neumaier::default(); m * n];
        let mut mag = vec![0.0; m * n];
        for k0 in (0..k).step_by(BLOCK) {
            for i in 0..m {
                for j in 0..n {
                    let mut part = Neumaier::default();
                    let mut pm = 0.0;
                    for p in k0..(k0 + BLOCK).min(k) {
                        let t = a.at(i, p) * b.at(p, j);
                        part.add(t);
                        pm += t.abs();
                    }
                    acc[i * n + j].add(part.value());
                    mag[i * n + j] += pm;
                }
            }
        }
        (acc.iter().map(|a| a.value()).collect(), mag)
    }

    fn bits(xs: &[f64]) -> Vec<u64> {
        xs.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn blocks_columns_and_threads_keep_every_sum_bit_for_bit() {
        let mut r = SplitMix64(38);
        for (m, k, n) in [(2, 3, 5), (7, 33, 130), (40, 200, 300)] {
            // Mixed scales so that compensation matters.
            let a: Vec<f64> = r.values(m * k).iter().map(|v| v * 1e8).collect();
            let b = r.values(k * n);
            let direct = (
                Mat {
                    data: &a,
                    off: 0,
                    rs: k,
                    cs: 1,
                },
                Mat {
                    data: &b,
                    off: 0,
                    rs: n,
                    cs: 1,
                },
            );
            // B stored transposed (n x k), read through a strided view, and A the same way.
            let mut bt = vec![0.0; n * k];
            for p in 0..k {
                for j in 0..n {
                    bt[j * k + p] = b[p * n + j];
                }
            }
            let mut at = vec![0.0; k * m];
            for i in 0..m {
                for p in 0..k {
                    at[p * m + i] = a[i * k + p];
                }
            }
            let strided = (
                Mat {
                    data: &at,
                    off: 0,
                    rs: 1,
                    cs: m,
                },
                Mat {
                    data: &bt,
                    off: 0,
                    rs: 1,
                    cs: k,
                },
            );
            let (want, want_mag) = one_at_a_time(direct.0, direct.1, m, k, n);
            for (am, bm) in [direct, strided] {
                for threads in [1, 2, 3] {
                    let (d, g) = product(am, bm, m, k, n, threads);
                    assert_eq!(bits(&d), bits(&want), "{m}x{k}x{n}, {threads} threads");
                    assert_eq!(bits(&g), bits(&want_mag), "{m}x{k}x{n}, {threads} threads");
                }
            }
        }
    }
}
