//! `com.quorum` MatMulBias: `MatMul(A, B) + bias`, for a 2-D `B` of shape `[K, N]` and a 1-D `bias`
//! of `N` elements: a Linear layer's product and its bias, the pair exporters write as MatMul → Add.
//!
//! The device-session rewrite `matmul-bias` (`optimize/matmul_bias.rs`) writes it so that an
//! accelerator adds the bias as its GEMM stores each output (or in its split-K reduction) instead of
//! streaming the product through memory a second time. On the CPU it is MatMul then Add, bit for
//! bit: in f32 the packed GEMM adds the bias in its epilogue (the Add's own sum, `product + bias`),
//! elsewhere the Add follows. The oracles judge it as what it equals, the Gemm of A's rows (`[∏ leading dims, K]`) by B
//! with C = bias (`verify.rs`).
use super::elementwise::{Ar, arith_t};
use super::{OpCtx, Registry, input, single};
use crate::bail;
use crate::error::OpResult;
use crate::tensor::{Tensor, Value};

pub fn register(r: &mut Registry) {
    r.add(super::QUORUM_DOMAIN, "MatMulBias", matmul_bias);
}

/// Why shapes `a`, `b` and `bias` are not MatMulBias operands (`None`: they are): A of rank 1 or
/// more whose last dim is K, B `[K, N]`, bias `[N]`.
pub fn shape_error(a: &[usize], b: &[usize], bias: &[usize]) -> Option<String> {
    match (a.last(), b, bias) {
        (Some(&k), &[kb, n], &[nc]) if k == kb && nc == n => None,
        _ => Some(format!(
            "MatMulBias takes A [..., K], B [K, N] and bias [N]; got A {a:?}, B {b:?}, bias {bias:?}"
        )),
    }
}

fn matmul_bias(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (a, b, bias) = (input(inputs, 0)?, input(inputs, 1)?, input(inputs, 2)?);
    if let Some(e) = shape_error(a.shape(), b.shape(), bias.shape()) {
        bail!("{e}");
    }
    if a.dtype() != b.dtype() || bias.dtype() != a.dtype() {
        bail!(
            "MatMulBias operands differ in dtype: {}, {} and {}",
            a.dtype(),
            b.dtype(),
            bias.dtype()
        );
    }
    // f32: the bias added as the packed GEMM stores each output, where it takes the product.
    if let (Tensor::F32(x), Tensor::F32(w), Tensor::F32(c)) = (a, b, bias)
        && let Some(c) = c.as_slice()
    {
        let (product, added) = super::matmul::matmul_bias_f32(ctx, x, w, Some(c))?;
        let p = Tensor::F32(product);
        return single(if added {
            p
        } else {
            arith_t(&p, bias, Ar::Add)?
        });
    }
    let product = super::matmul::matmul(ctx, &inputs[..2])?;
    let Some(Value::Tensor(p)) = product.first() else {
        bail!("MatMulBias: MatMul gave no tensor");
    };
    single(arith_t(p, bias, Ar::Add)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::{run_kernel, seeded_f32};
    use crate::tensor::Tensor;

    fn rand(seed: u64, shape: &[usize]) -> Tensor {
        let n = shape.iter().product();
        Tensor::from_f32(shape, seeded_f32(seed, n, -1.0, 1.0)).unwrap()
    }

    fn run(op: &str, domain: &str, inputs: &[&Tensor]) -> OpResult<Tensor> {
        let k = Registry::cpu().get(domain, op).unwrap();
        let ins = inputs.iter().map(|t| Some((*t).clone())).collect();
        Ok(run_kernel(k, op, 17, vec![], ins, 1)?.remove(0))
    }

    #[test]
    fn equals_matmul_then_add_bit_for_bit() {
        // The last two take the packed GEMM, which adds the bias as it stores each output.
        for (i, (ash, n)) in [
            (vec![7usize, 5], 6usize),
            (vec![2, 3, 5], 6),
            (vec![5], 6),
            (vec![2, 9, 5], 70),
            (vec![16, 5], 33),
        ]
        .into_iter()
        .enumerate()
        {
            let a = rand(i as u64 + 1, &ash);
            let b = rand(10 + i as u64, &[5, n]);
            let c = rand(20 + i as u64, &[n]);
            let fused = run("MatMulBias", crate::ops::QUORUM_DOMAIN, &[&a, &b, &c]).unwrap();
            let p = run("MatMul", "", &[&a, &b]).unwrap();
            let pair = run("Add", "", &[&p, &c]).unwrap();
            assert_eq!(fused.shape(), pair.shape());
            assert_eq!(fused.to_f64_vec().unwrap(), pair.to_f64_vec().unwrap());
            // The bias is really added: the product alone differs.
            assert_ne!(fused.to_f64_vec().unwrap(), p.to_f64_vec().unwrap());
        }
    }

    #[test]
    fn other_shapes_and_mixed_dtypes_are_typed_errors() {
        let q = crate::ops::QUORUM_DOMAIN;
        let a = rand(1, &[4, 5]);
        for (b, c) in [
            (vec![5usize, 6], vec![5usize]),
            (vec![5, 6], vec![1, 6]),
            (vec![4, 6], vec![6]),
            (vec![2, 5, 6], vec![6]),
        ] {
            let e = run("MatMulBias", q, &[&a, &rand(2, &b), &rand(3, &c)]).unwrap_err();
            assert!(e.to_string().contains("MatMulBias takes"), "{e}");
        }
        let c64 = Tensor::from_f64s(crate::tensor::DType::F64, &[6], vec![0.5; 6]).unwrap();
        let e = run("MatMulBias", q, &[&a, &rand(2, &[5, 6]), &c64]).unwrap_err();
        assert!(e.to_string().contains("differ in dtype"), "{e}");
    }
}
