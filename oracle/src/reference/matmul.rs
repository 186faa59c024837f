//! MatMul (numpy.matmul semantics) and Gemm.
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
    match node.op_type.as_str() {
        "MatMul" => Ok(vec![matmul(
            input(node, inputs, 0)?,
            input(node, inputs, 1)?,
        )?]),
        "Gemm" => Ok(vec![gemm(node, inputs)?]),
        op => Err(OracleError::Unsupported(format!("{op} is not a matrix op"))),
    }
}

fn matmul(a: &Value, b: &Value) -> Result<Output, OracleError> {
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
    let mut data = Vec::with_capacity(nb * m * n);
    let mut mag = Vec::with_capacity(nb * m * n);
    for bi in 0..nb {
        let idx = unravel(bi, &batch);
        let ao = broadcast_index(&idx, abatch) * m * k;
        let bo = broadcast_index(&idx, bbatch) * k * n;
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0;
                let mut g = 0.0;
                for p in 0..k {
                    let t = a.data[ao + i * k + p] * b.data[bo + p * n + j];
                    s += t;
                    g += t.abs();
                }
                data.push(s);
                mag.push(g);
            }
        }
    }
    let mut shape = batch;
    if !a1 {
        shape.push(m);
    }
    if !b1 {
        shape.push(n);
    }
    output(a.dtype, shape, data, mag)
}

fn gemm(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Output, OracleError> {
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
    // A'[i][p] and B'[p][j] after the optional transposes.
    let at = |i: usize, p: usize| {
        if ta {
            a.data[p * a.shape[1] + i]
        } else {
            a.data[i * a.shape[1] + p]
        }
    };
    let bt = |p: usize, j: usize| {
        if tb {
            b.data[j * b.shape[1] + p]
        } else {
            b.data[p * b.shape[1] + j]
        }
    };
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
    let mut data = Vec::with_capacity(m * n);
    let mut mag = Vec::with_capacity(m * n);
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0;
            let mut g = 0.0;
            for p in 0..k {
                let t = at(i, p) * bt(p, j);
                s += t;
                g += t.abs();
            }
            let mut y = alpha * s;
            let mut gm = alpha.abs() * g;
            if let Some(c) = c {
                let cv = c.data[broadcast_index(&[i, j], &c.shape)];
                y += beta * cv;
                gm += (beta * cv).abs();
            }
            data.push(y);
            mag.push(gm);
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
}
