//! WGSL kernels: MatMul (batched, broadcast batch dims, 1-D operands; shapes by the CPU's
//! `matmul_shape`) and Gemm (transA, transB, alpha, beta, broadcast C), through the tiled GEMM
//! template the convolutions share (`gemm_tile`).
use super::gemm_tile::gemm;
use super::{WgpuKernel, broadcast_strides, decline, dev, dev_opt, invalid, strides};
use crate::memory::WTensor;
use crate::run::{KResult, Run};
use crate::wgsl;
use quorum_core::backend::NodeInputs;
use quorum_core::ir::Node;
use quorum_core::ops::OpCtx;
use quorum_core::tensor::DType;

pub fn claim(node: &Node) -> Option<Result<WgpuKernel, String>> {
    match node.op_type.as_str() {
        "MatMul" => Some(Ok(k_matmul as WgpuKernel)),
        "Gemm" => Some(Ok(k_gemm as WgpuKernel)),
        "Einsum" => Some(Ok(k_einsum as WgpuKernel)),
        _ => None,
    }
}

/// Declines unless every operand is f32 or f16, all the same.
pub fn float_dtype(what: &str, ts: &[&WTensor]) -> KResult<DType> {
    let d = ts[0].dtype;
    if !matches!(d, DType::F32 | DType::F16) || ts.iter().any(|t| t.dtype != d) {
        decline!(
            "{what} on {}: the WGSL kernels take f32 or f16, all alike",
            ts.iter()
                .map(|t| t.dtype.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(d)
}

fn k_matmul(_: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let a = dev(inputs, 0)?;
    let b = dev(inputs, 1)?;
    Ok(vec![matmul(run, &a, &b)?])
}

/// Einsum: the shared plan of permutations and GEMMs (`quorum_core::device::einsum`).
fn k_einsum(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    quorum_core::device::einsum::k_einsum(ctx, run, inputs)
}

/// MatMul of two device tensors (numpy rules), outside any session too (benchmarks).
pub fn matmul(run: &Run, a: &WTensor, b: &WTensor) -> KResult<WTensor> {
    let d = float_dtype("MatMul", &[a, b])?;
    let quorum_core::ops::matmul::MatMulShape {
        m,
        k,
        n,
        a_batch,
        b_batch,
        batch,
        out_shape,
    } = quorum_core::ops::matmul::matmul_shape(&a.shape, &b.shape)?;
    let out = run.alloc(d, &out_shape)?;
    let nb: usize = batch.iter().product();
    if out.is_empty() {
        return Ok(out);
    }
    if k == 0 {
        super::fill_words(run, &out, 0, false)?;
        return Ok(out);
    }
    // Batch offsets: A and B strides over the broadcast batch dims (0 where broadcast).
    let ast: Vec<i64> = broadcast_strides(&a_batch, &batch)
        .iter()
        .map(|s| s * (m * k) as i64)
        .collect();
    let bst: Vec<i64> = broadcast_strides(&b_batch, &batch)
        .iter()
        .map(|s| s * (k * n) as i64)
        .collect();
    let mut extra = vec![batch.len() as u32];
    extra.extend(batch.iter().map(|&v| v as u32));
    extra.extend(ast.iter().map(|&v| v as u32));
    extra.extend(bst.iter().map(|&v| v as u32));
    let ops = format!(
        r#"
var<private> abase: u32;
var<private> bbase: u32;
var<private> cbase: u32;
fn setup(b: u32) {{
  let r = P[4];
  var rest = b;
  abase = 0u;
  bbase = 0u;
  for (var q = 0u; q < r; q = q + 1u) {{
    let d = r - 1u - q;
    let c = rest % P[5u + d];
    rest = rest / P[5u + d];
    abase = abase + c * P[5u + r + d];
    bbase = bbase + c * P[5u + 2u * r + d];
  }}
  cbase = b * P[0] * P[1];
}}
fn loadA(m: u32, k: u32) -> f32 {{ return {la}; }}
fn loadB(k: u32, n: u32) -> f32 {{ return {lb}; }}
fn storeC(m: u32, n: u32, v: f32) {{ o0[cbase + m * P[1] + n] = {st}; }}
"#,
        la = wgsl::load(d, "i0[abase + m * P[2] + k]"),
        lb = wgsl::load(d, "i1[bbase + k * P[1] + n]"),
        st = wgsl::store(d, "v"),
    );
    gemm(
        run,
        "matmul",
        &ops,
        &[d],
        &[&out],
        &[a, b],
        (m, n, k, nb),
        extra,
    )?;
    Ok(out)
}

fn k_gemm(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let a = dev(inputs, 0)?;
    let b = dev(inputs, 1)?;
    let c = if inputs.present(2) {
        dev_opt(inputs, 2)?
    } else {
        None
    };
    let mut ts = vec![&a, &b];
    ts.extend(c.as_ref());
    let d = float_dtype("Gemm", &ts)?;
    let ta = ctx.attr_i("transA", 0)? != 0;
    let tb = ctx.attr_i("transB", 0)? != 0;
    let alpha = ctx.attr_f("alpha", 1.0)?;
    let beta = ctx.attr_f("beta", 1.0)?;
    let [m, k, n] = quorum_core::device::forms::gemm_dims(&a.shape, &b.shape, ta, tb)?;
    let cst = match &c {
        Some(c) => {
            if c.shape.len() > 2
                || quorum_core::ops::broadcast::broadcast_shapes(&[&c.shape, &[m, n]]).ok()
                    != Some(vec![m, n])
            {
                return Err(invalid(format!(
                    "Gemm C {:?} does not broadcast to [{m}, {n}]",
                    c.shape
                )));
            }
            broadcast_strides(&c.shape, &[m, n])
        }
        None => vec![0, 0],
    };
    let out = run.alloc(d, &[m, n])?;
    if out.is_empty() {
        return Ok(vec![out]);
    }
    let ast = strides(&a.shape);
    let bst = strides(&b.shape);
    let (am, ak) = if ta {
        (ast[1], ast[0])
    } else {
        (ast[0], ast[1])
    };
    let (bk, bn) = if tb {
        (bst[1], bst[0])
    } else {
        (bst[0], bst[1])
    };
    let extra = vec![
        am as u32,
        ak as u32,
        bk as u32,
        bn as u32,
        cst[0] as u32,
        cst[1] as u32,
        alpha.to_bits(),
        beta.to_bits(),
    ];
    // alpha·AB + beta·C: ONNX computes the product first; with beta·C absent or beta 0, C is not read.
    let has_c = c.is_some() && beta != 0.0;
    let cterm = if has_c {
        format!(
            " + bitcast<f32>(P[11]) * {}",
            wgsl::load(d, "i2[m * P[8] + n * P[9]]")
        )
    } else {
        String::new()
    };
    let ops = format!(
        r#"
fn setup(b: u32) {{}}
fn loadA(m: u32, k: u32) -> f32 {{ return {la}; }}
fn loadB(k: u32, n: u32) -> f32 {{ return {lb}; }}
fn storeC(m: u32, n: u32, v: f32) {{ o0[m * P[1] + n] = {st}; }}
"#,
        la = wgsl::load(d, "i0[m * P[4] + k * P[5]]"),
        lb = wgsl::load(d, "i1[k * P[6] + n * P[7]]"),
        st = wgsl::store(d, &format!("bitcast<f32>(P[10]) * v{cterm}")),
    );
    let mut ins = vec![&a, &b];
    if has_c {
        ins.extend(c.as_ref());
    }
    if k == 0 {
        decline!("Gemm with K = 0");
    }
    gemm(run, "gemm", &ops, &[d], &[&out], &ins, (m, n, k, 1), extra)?;
    Ok(vec![out])
}
