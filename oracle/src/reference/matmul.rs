//! MatMul (numpy.matmul semantics) and Gemm; Einsum in `einsum.rs`.
use super::parallel::rows;
use super::{broadcast_index, broadcast_shapes, input, opt_input, output, unravel};
use crate::{NodeSpec, OracleError, Output, Value};

pub(super) fn supports(node: &NodeSpec) -> Result<(), String> {
    if node.num_outputs > 1 {
        return Err(format!("{} has one output", node.op_type));
    }
    Ok(())
}

pub(super) fn evaluate(
    node: &NodeSpec,
    inputs: &[Option<Value>],
) -> Result<Vec<Output>, OracleError> {
    let threads = crate::threads();
    match node.op_type.as_str() {
        "MatMul" => Ok(vec![matmul(
            input(node, inputs, 0)?,
            input(node, inputs, 1)?,
            threads,
        )?]),
        "Gemm" => Ok(vec![gemm(node, inputs, threads)?]),
        "Einsum" => super::einsum::evaluate(node, inputs),
        op => Err(OracleError::Unsupported(format!("{op} is not a matrix op"))),
    }
}

/// Columns of the output handled together: their running sums stay in the first-level cache, and the
/// rows of B under them in the second-level cache while every row of A passes.
const COLUMNS: usize = 64;

/// Rows of the output advanced together, each row of B read once for all of them.
const ROWS: usize = 4;

/// Output rows `out.len() / n` of a product: `out[r][j] = Σ_p a(r)[p] · b[p, j]` and
/// `mag[r][j] = Σ_p |a(r)[p] · b[p, j]|`, with `a(r)` row `r`'s row of A (k elements) and `b` k rows
/// of n elements, row-major. Each sum is taken in the definition's order, p = 0, 1, …, starting from
/// 0; the loops run over p outside j (and over a few rows at once) only so that many sums share each
/// element of B they read, which changes no sum.
fn dot_rows<'a>(
    a: impl Fn(usize) -> &'a [f64],
    b: &[f64],
    n: usize,
    out: &mut [f64],
    mag: &mut [f64],
) {
    let nrows = out.len() / n.max(1);
    out.fill(0.0);
    mag.fill(0.0);
    for j0 in (0..n).step_by(COLUMNS) {
        let w = COLUMNS.min(n - j0);
        let mut r = 0;
        while r < nrows {
            let group = ROWS.min(nrows - r);
            let mut s = [[0.0; COLUMNS]; ROWS];
            let mut g = [[0.0; COLUMNS]; ROWS];
            let rows: [&[f64]; ROWS] = std::array::from_fn(|q| a(r + q.min(group - 1)));
            for p in 0..rows[0].len() {
                let bp = &b[p * n + j0..p * n + j0 + w];
                for q in 0..group {
                    let ap = rows[q][p];
                    for ((s, g), &bv) in s[q].iter_mut().zip(g[q].iter_mut()).zip(bp) {
                        let t = ap * bv;
                        *s += t;
                        *g += t.abs();
                    }
                }
            }
            for q in 0..group {
                let at = (r + q) * n + j0;
                out[at..at + w].copy_from_slice(&s[q][..w]);
                mag[at..at + w].copy_from_slice(&g[q][..w]);
            }
            r += group;
        }
    }
}

pub(super) fn matmul(a: &Value, b: &Value, threads: usize) -> Result<Output, OracleError> {
    if a.shape.is_empty() || b.shape.is_empty() {
        return Err(OracleError::Invalid(
            "MatMul operands must have rank >= 1".into(),
        ));
    }
    // 1-D operands: A is promoted to [1, K] and B to [K, 1]; the added dimension is removed afterwards.
    let mut ash = a.shape.clone();
    let mut bsh = b.shape.clone();
    let a1 = ash.len() == 1;
    let b1 = bsh.len() == 1;
    if a1 {
        ash.insert(0, 1);
    }
    if b1 {
        bsh.push(1);
    }
    let (m, k) = (ash[ash.len() - 2], ash[ash.len() - 1]);
    let (k2, n) = (bsh[bsh.len() - 2], bsh[bsh.len() - 1]);
    if k != k2 {
        return Err(OracleError::Invalid(format!(
            "MatMul inner dimensions differ: {:?} x {:?}",
            a.shape, b.shape
        )));
    }
    let abatch = &ash[..ash.len() - 2];
    let bbatch = &bsh[..bsh.len() - 2];
    let batch = broadcast_shapes(&[abatch, bbatch])?;
    let nb: usize = batch.iter().product();
    // Where each batch's matrices start in A and B.
    let starts: Vec<(usize, usize)> = (0..nb)
        .map(|bi| {
            let idx = unravel(bi, &batch);
            (
                broadcast_index(&idx, abatch) * m * k,
                broadcast_index(&idx, bbatch) * k * n,
            )
        })
        .collect();
    let mut data = vec![0.0; nb * m * n];
    let mut mag = vec![0.0; nb * m * n];
    rows(threads, &mut data, &mut mag, n, k * n, |first, d, g| {
        // Runs of rows within one batch share that batch's B.
        let mut r = 0;
        while r < d.len() / n {
            let (bi, i) = ((first + r) / m, (first + r) % m);
            let run = (m - i).min(d.len() / n - r);
            let (ao, bo) = starts[bi];
            let at = |q: usize| &a.data[ao + (i + q) * k..ao + (i + q + 1) * k];
            let span = r * n..(r + run) * n;
            dot_rows(
                at,
                &b.data[bo..bo + k * n],
                n,
                &mut d[span.clone()],
                &mut g[span],
            );
            r += run;
        }
    });
    let mut shape = batch;
    if !a1 {
        shape.push(m);
    }
    if !b1 {
        shape.push(n);
    }
    output(a.dtype, shape, data, mag)
}

fn gemm(node: &NodeSpec, inputs: &[Option<Value>], threads: usize) -> Result<Output, OracleError> {
    let a = input(node, inputs, 0)?;
    let b = input(node, inputs, 1)?;
    let c = opt_input(inputs, 2);
    if node.opset < 11 && c.is_none() {
        return Err(OracleError::Invalid(
            "Gemm before opset 11 requires C".into(),
        ));
    }
    let ta = node.int("transA", 0)? != 0;
    let tb = node.int("transB", 0)? != 0;
    let alpha = node.float("alpha", 1.0)?;
    let beta = node.float("beta", 1.0)?;
    if a.shape.len() != 2 || b.shape.len() != 2 {
        return Err(OracleError::Invalid("Gemm operands must be 2-D".into()));
    }
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
        return Err(OracleError::Invalid(format!(
            "Gemm inner dimensions differ: {:?} x {:?}",
            a.shape, b.shape
        )));
    }
    if let Some(c) = c {
        // C must broadcast unidirectionally to [M, N].
        let s = broadcast_shapes(&[&[m, n], &c.shape])?;
        if s != vec![m, n] {
            return Err(OracleError::Invalid(format!(
                "Gemm C {:?} does not broadcast to [{m}, {n}]",
                c.shape
            )));
        }
    }
    // A' and B' after the optional transposes, written out row-major (copies, no arithmetic).
    let at: Vec<f64> = (0..m * k)
        .map(|f| {
            let (i, p) = (f / k, f % k);
            if ta {
                a.data[p * a.shape[1] + i]
            } else {
                a.data[i * a.shape[1] + p]
            }
        })
        .collect();
    let bt: Vec<f64> = (0..k * n)
        .map(|f| {
            let (p, j) = (f / n, f % n);
            if tb {
                b.data[j * b.shape[1] + p]
            } else {
                b.data[p * b.shape[1] + j]
            }
        })
        .collect();
    let mut data = vec![0.0; m * n];
    let mut mag = vec![0.0; m * n];
    rows(threads, &mut data, &mut mag, n, k * n, |first, d, g| {
        let rows = |q: usize| &at[(first + q) * k..(first + q + 1) * k];
        dot_rows(rows, &bt, n, d, g);
    });
    for (f, (y, gm)) in data.iter_mut().zip(mag.iter_mut()).enumerate() {
        *y *= alpha;
        *gm *= alpha.abs();
        if let Some(c) = c {
            let cv = c.data[broadcast_index(&[f / n, f % n], &c.shape)];
            *y += beta * cv;
            *gm += (beta * cv).abs();
        }
    }
    output(a.dtype, vec![m, n], data, mag)
}

#[cfg(test)]
mod tests {
    use super::super::Reference;
    use super::super::testutil::*;
    use crate::{Attr, DType, Oracle, Value};

    fn v(shape: Vec<usize>, data: Vec<f64>) -> Option<Value> {
        Some(Value::new(DType::F32, shape, data).unwrap())
    }

    #[test]
    fn matmul_2x2_by_hand() {
        let out = Reference
            .evaluate(
                &node("MatMul", 13, &[]),
                &[
                    v(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]),
                    v(vec![2, 2], vec![5.0, -6.0, 7.0, 8.0]),
                ],
            )
            .unwrap();
        // [[1*5+2*7, -6+16], [15+28, -18+32]]
        assert_all_close(&out[0].value.data, &[19.0, 10.0, 43.0, 14.0]);
        assert_all_close(&out[0].magnitude, &[19.0, 22.0, 43.0, 50.0]);
    }

    #[test]
    fn matmul_1d_operands() {
        let out = Reference
            .evaluate(
                &node("MatMul", 13, &[]),
                &[
                    v(vec![3], vec![1.0, 2.0, 3.0]),
                    v(vec![3], vec![4.0, 5.0, 6.0]),
                ],
            )
            .unwrap();
        assert_eq!(out[0].value.shape, Vec::<usize>::new());
        assert_all_close(&out[0].value.data, &[32.0]);
        let out = Reference
            .evaluate(
                &node("MatMul", 13, &[]),
                &[
                    v(vec![2], vec![1.0, 2.0]),
                    v(vec![3, 2, 2], (1..=12).map(|x| x as f64).collect()),
                ],
            )
            .unwrap();
        assert_eq!(out[0].value.shape, vec![3, 2]);
        assert_all_close(&out[0].value.data, &[7.0, 10.0, 19.0, 22.0, 31.0, 34.0]);
    }

    #[test]
    // Sizes are written as products of the shapes' dimensions (`2 * 1 * 3 * 4` for [2, 1, 3, 4]).
    #[allow(clippy::identity_op)]
    fn matmul_broadcast_batch_random() {
        let mut rng = SplitMix64(3);
        let a = rng.vec(2 * 1 * 3 * 4);
        let b = rng.vec(5 * 4 * 2);
        let out = Reference
            .evaluate(
                &node("MatMul", 13, &[]),
                &[v(vec![2, 1, 3, 4], a.clone()), v(vec![5, 4, 2], b.clone())],
            )
            .unwrap();
        assert_eq!(out[0].value.shape, vec![2, 5, 3, 2]);
        for x in 0..2 {
            for y in 0..5 {
                for i in 0..3 {
                    for j in 0..2 {
                        let want: f64 = (0..4)
                            .map(|p| a[x * 12 + i * 4 + p] * b[y * 8 + p * 2 + j])
                            .sum();
                        let got = out[0].value.data[((x * 5 + y) * 3 + i) * 2 + j];
                        assert!(close(got, want));
                    }
                }
            }
        }
    }

    #[test]
    fn gemm_trans_alpha_beta_random() {
        let mut rng = SplitMix64(5);
        let a = rng.vec(4 * 3); // A stored [K=4, M=3], transA
        let b = rng.vec(2 * 4); // B stored [N=2, K=4], transB
        let c = rng.vec(2); // [N] broadcast
        let n = node(
            "Gemm",
            13,
            &[
                ("transA", Attr::Int(1)),
                ("transB", Attr::Int(1)),
                ("alpha", Attr::Float(0.5)),
                ("beta", Attr::Float(2.0)),
            ],
        );
        let out = Reference
            .evaluate(
                &n,
                &[
                    v(vec![4, 3], a.clone()),
                    v(vec![2, 4], b.clone()),
                    v(vec![2], c.clone()),
                ],
            )
            .unwrap();
        assert_eq!(out[0].value.shape, vec![3, 2]);
        for i in 0..3 {
            for j in 0..2 {
                let dot: f64 = (0..4).map(|p| a[p * 3 + i] * b[j * 4 + p]).sum();
                assert!(close(out[0].value.data[i * 2 + j], 0.5 * dot + 2.0 * c[j]));
            }
        }
    }

    #[test]
    fn gemm_no_c_by_hand() {
        let out = Reference
            .evaluate(
                &node("Gemm", 13, &[]),
                &[
                    v(vec![1, 2], vec![1.0, 2.0]),
                    v(vec![2, 1], vec![3.0, 4.0]),
                    None,
                ],
            )
            .unwrap();
        assert_all_close(&out[0].value.data, &[11.0]);
    }

    /// The definition's loop, one output at a time: what the row kernel must equal bit for bit.
    fn scalar(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> (Vec<f64>, Vec<f64>) {
        let (mut data, mut mag) = (Vec::new(), Vec::new());
        for i in 0..m {
            for j in 0..n {
                let (mut s, mut g) = (0.0, 0.0);
                for p in 0..k {
                    let t = a[i * k + p] * b[p * n + j];
                    s += t;
                    g += t.abs();
                }
                data.push(s);
                mag.push(g);
            }
        }
        (data, mag)
    }

    fn bits(xs: &[f64]) -> Vec<u64> {
        xs.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn rows_and_threads_keep_every_sum_bit_for_bit() {
        let mut rng = SplitMix64(38);
        // Odd sizes around the column block, and a product big enough to be split over threads.
        for (m, k, n) in [(3, 5, 7), (5, 300, 257), (64, 129, 513)] {
            let a = rng.vec(m * k);
            let b: Vec<f64> = rng.vec(k * n).iter().map(|v| v * 1e3).collect();
            let (want, want_mag) = scalar(&a, &b, m, k, n);
            for threads in [1, 2, 3] {
                let out = super::matmul(
                    &Value::new(DType::F32, vec![m, k], a.clone()).unwrap(),
                    &Value::new(DType::F32, vec![k, n], b.clone()).unwrap(),
                    threads,
                )
                .unwrap();
                assert_eq!(bits(&out.value.data), bits(&want), "{m}x{k}x{n}, {threads}");
                assert_eq!(bits(&out.magnitude), bits(&want_mag), "{m}x{k}x{n}");
            }
        }
    }

    #[test]
    fn batched_rows_split_across_batches_keep_every_sum() {
        // [2, 1, 7, 200] x [3, 200, 300]: 42 rows in 6 batches, split over threads mid-batch.
        let mut rng = SplitMix64(39);
        let (m, k, n) = (7, 200, 300);
        let a = rng.vec(2 * m * k);
        let b = rng.vec(3 * k * n);
        for threads in [1, 4, 7] {
            let out = super::matmul(
                &Value::new(DType::F32, vec![2, 1, m, k], a.clone()).unwrap(),
                &Value::new(DType::F32, vec![3, k, n], b.clone()).unwrap(),
                threads,
            )
            .unwrap();
            for x in 0..2 {
                for y in 0..3 {
                    let want = scalar(
                        &a[x * m * k..(x + 1) * m * k],
                        &b[y * k * n..(y + 1) * k * n],
                        m,
                        k,
                        n,
                    );
                    let at = (x * 3 + y) * m * n;
                    let got = &out.value.data[at..at + m * n];
                    assert_eq!(bits(got), bits(&want.0), "batch {x},{y}, {threads}");
                    let got = &out.magnitude[at..at + m * n];
                    assert_eq!(bits(got), bits(&want.1), "batch {x},{y}, {threads}");
                }
            }
        }
    }
}
