//! CUDA kernels: the `matmul` family (MatMul, Gemm), and the GEMM launcher that Conv reuses.
//!
//! Every product runs through one kernel of `matmul/tile.rs` / `matmul/skinny.rs`:
//! - at most 4 rows with a strided B: the skinny kernel (B streamed once with 16-byte loads), split
//!   along K when its columns alone would leave SMs idle;
//! - else the register-tiled kernel, 128×128 or 64×64 tiles, whole or split along K (partials in an
//!   f32 workspace, then a reduction that applies alpha, beta·C and the output dtype), as the cost
//!   model of `matmul/plan.rs` chooses for the shape and the device's SM count;
//! - or the naive kernel when `QUORUM_CUDA_GEMM=naive` is set (a reference for bisecting).
//!
//! The launcher (kernel, plan, split, reduction) is `matmul/launch.rs`. `sgemm` runs a plain
//! (batched) product on device tensors without a session, for benchmarks;
//! `sgemm_plan` the same with the tiled kernels' plan forced.
mod launch;
pub mod plan;
pub mod skinny;
pub mod tc;
pub mod tc_async;
pub mod tile;
pub mod wgmma;

pub(crate) use self::launch::{run_gemm, run_gemm_with};
use self::tile::Im2col;
use super::elem::Elem;
use super::{broadcast_strides, require_u32_len, strides};
use crate::memory::DevTensor;
use crate::{CudaKernel, Inputs, KError, KResult, Run, dev_input};
use quorum_core::error::OpError;
use quorum_core::ir::Node;
use quorum_core::ops::OpCtx;
use quorum_core::tensor::DType;

/// The kernel for `node` if this family owns its op type.
pub fn claim(node: &Node) -> Option<Result<CudaKernel, String>> {
    match node.op_type.as_str() {
        "MatMul" => Some(Ok(matmul as CudaKernel)),
        "Gemm" => Some(Ok(gemm as CudaKernel)),
        "Einsum" => Some(Ok(einsum as CudaKernel)),
        "MatMulInteger" => Some(Ok(super::integer::k_matmul_integer as CudaKernel)),
        "QLinearMatMul" => Some(Ok(super::integer::k_qlinear_matmul as CudaKernel)),
        _ => None,
    }
}

/// The kernel for one of Quorum's own (`com.quorum`) ops this family runs: MatMulBias.
pub fn claim_fused(node: &Node) -> Option<CudaKernel> {
    (node.op_type == "MatMulBias").then_some(matmul_bias as CudaKernel)
}

fn invalid(msg: String) -> KError {
    KError::Op(OpError::Invalid(msg))
}

/// The common float dtype of `ts` (f32, f16 or bf16), or a decline.
pub(crate) fn float_dtype(what: &str, ts: &[&DevTensor]) -> KResult<DType> {
    let d = ts[0].dtype;
    if let Some(o) = ts.iter().find(|t| t.dtype != d) {
        return Err(invalid(format!(
            "{what}: operands differ in dtype: {} and {}",
            d, o.dtype
        )));
    }
    if Elem::device(d).is_none() {
        crate::decline!(
            "{what} of {d} (the CUDA kernels take f32, f16{})",
            if super::elem::bf16_enabled() {
                " and bf16"
            } else {
                super::elem::BF16_OFF
            }
        );
    }
    Ok(d)
}

/// A size as a kernel's u32 (sizes past 2^31 decline: the kernels index in 32 bits).
fn u32of(x: usize) -> KResult<u32> {
    u32::try_from(x)
        .ok()
        .filter(|&v| v < (1u32 << 31))
        .ok_or_else(|| KError::Decline(format!("{x} exceeds 32-bit indexing")))
}

/// How a GEMM reads its B operand.
#[derive(Clone, Copy, Debug)]
pub(crate) enum BOperand {
    /// `b[k·ldb + n]`, or `b[n·ldb + k]` when `trans`.
    Strided { ldb: usize, trans: bool },
    /// Gathered from a convolution input (channel-major planes of the batch's group).
    Im2col(Im2col),
}

/// One (batched) GEMM over device buffers: `Y = alpha · A·B + beta · C`.
pub(crate) struct Problem {
    pub dtype: DType,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: u64,
    pub lda: usize,
    pub trans_a: bool,
    pub b: u64,
    pub bop: BOperand,
    /// C and its element strides along m and n (0 where broadcast).
    pub c: Option<(u64, usize, usize)>,
    pub y: u64,
    pub ldy: usize,
    pub alpha: f32,
    pub beta: f32,
    /// Batch dims and, per dim, the element strides of A, B, C and Y (0 where broadcast).
    pub batch: Vec<usize>,
    pub strides: [Vec<usize>; 4],
    /// Where the tensors A, B, C and Y point into end (exclusive addresses; see [`ends`]): a launch
    /// declares each operand from its own (batch-offset) pointer to there.
    pub ends: [u64; 4],
}

/// The `ends` of a [`Problem`] over these tensors (C absent: 0).
pub(crate) fn ends(a: &DevTensor, b: &DevTensor, c: Option<&DevTensor>, y: &DevTensor) -> [u64; 4] {
    [a.end(), b.end(), c.map_or(0, DevTensor::end), y.end()]
}

/// Strides of C (shape `cs`, rank ≤ 2) broadcast unidirectionally to `[m, n]`.
fn c_strides(cs: &[usize], m: usize, n: usize) -> KResult<(usize, usize)> {
    let bad = || {
        invalid(format!(
            "Gemm: C of shape {cs:?} cannot broadcast to [{m}, {n}]"
        ))
    };
    if cs.len() > 2 {
        return Err(bad());
    }
    let mut full = vec![1usize; 2 - cs.len()];
    full.extend_from_slice(cs);
    if (full[0] != m && full[0] != 1) || (full[1] != n && full[1] != 1) {
        return Err(bad());
    }
    let st = broadcast_strides(&full, &[m, n]);
    Ok((st[0] as usize, st[1] as usize))
}

/// `alpha · op(A) · op(B) + beta · C` on device tensors, for benchmarks and other kernels (no
/// session needed: any [`Run`] will do).
///
/// A holds `[batch, M, K]` (`[batch, K, M]` when `trans_a`) or a single matrix shared by every batch;
/// B likewise `[batch, K, N]` (`[batch, N, K]` when `trans_b`). C, if given, broadcasts to `[M, N]`
/// (the same for every batch). The result is `[M, N]` when `batch` is 1, else `[batch, M, N]`.
#[allow(clippy::too_many_arguments)]
pub fn sgemm(
    run: &Run,
    a: &DevTensor,
    b: &DevTensor,
    c: Option<&DevTensor>,
    m: usize,
    n: usize,
    k: usize,
    trans_a: bool,
    trans_b: bool,
    alpha: f32,
    beta: f32,
    batch: usize,
) -> KResult<DevTensor> {
    sgemm_plan(
        run, a, b, c, m, n, k, trans_a, trans_b, alpha, beta, batch, None,
    )
}

/// [`sgemm`] with the tiled kernels' plan forced (`None`: the cost model's choice), for the plan
/// benchmark and for tests that run every candidate.
#[allow(clippy::too_many_arguments)]
pub fn sgemm_plan(
    run: &Run,
    a: &DevTensor,
    b: &DevTensor,
    c: Option<&DevTensor>,
    m: usize,
    n: usize,
    k: usize,
    trans_a: bool,
    trans_b: bool,
    alpha: f32,
    beta: f32,
    batch: usize,
    plan: Option<plan::Plan>,
) -> KResult<DevTensor> {
    let mut ts = vec![a, b];
    ts.extend(c);
    let dtype = float_dtype("sgemm", &ts)?;
    let share = |t: &DevTensor, mat: usize, what: &str| -> KResult<usize> {
        if t.len() == mat {
            Ok(0)
        } else if t.len() == mat * batch {
            Ok(mat)
        } else {
            Err(invalid(format!(
                "sgemm: {what} has {} elements, expected {mat} or {}",
                t.len(),
                mat * batch
            )))
        }
    };
    let sa = share(a, m * k, "A")?;
    let sb = share(b, k * n, "B")?;
    let shape = if batch == 1 {
        vec![m, n]
    } else {
        vec![batch, m, n]
    };
    require_u32_len(&shape)?;
    let y = run.alloc(dtype, &shape)?;
    let cst = match c {
        Some(c) => Some((c.ptr(), c_strides(&c.shape, m, n)?)),
        None => None,
    };
    run_gemm_with(
        run,
        &Problem {
            dtype,
            m,
            n,
            k,
            a: a.ptr(),
            lda: if trans_a { m } else { k },
            trans_a,
            b: b.ptr(),
            bop: BOperand::Strided {
                ldb: if trans_b { k } else { n },
                trans: trans_b,
            },
            c: cst.map(|(p, (rs, cs))| (p, rs, cs)),
            y: y.ptr(),
            ldy: n,
            alpha,
            beta,
            batch: vec![batch],
            strides: [vec![sa], vec![sb], vec![0], vec![m * n]],
            ends: ends(a, b, c, &y),
        },
        plan,
    )?;
    Ok(y)
}

fn matmul(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    matmul_with_bias(ctx, run, inputs, None)
}

/// Einsum: the shared plan of permutations and GEMMs (`quorum_core::device::einsum`).
fn einsum(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    quorum_core::device::einsum::k_einsum(ctx, run, inputs)
}

/// `com.quorum` MatMulBias: the MatMul with the bias as the GEMM's C (broadcast along the rows),
/// added as each output is stored or in the split-K reduction.
fn matmul_bias(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let bias = dev_input(inputs, 2)?;
    matmul_with_bias(ctx, run, inputs, Some(&bias))
}

fn matmul_with_bias(
    ctx: &OpCtx,
    run: &Run,
    inputs: &dyn Inputs,
    bias: Option<&DevTensor>,
) -> KResult<Vec<DevTensor>> {
    let a = dev_input(inputs, 0)?;
    let b = dev_input(inputs, 1)?;
    Ok(vec![matmul_tensors(Some(ctx), run, &a, &b, bias)?])
}

/// MatMul (with MatMulBias's bias) of device tensors by numpy's rules; `ctx`, where a node asks,
/// bounds the output's size.
pub(crate) fn matmul_tensors(
    ctx: Option<&OpCtx>,
    run: &Run,
    a: &DevTensor,
    b: &DevTensor,
    bias: Option<&DevTensor>,
) -> KResult<DevTensor> {
    if let Some(c) = bias
        && let Some(e) = quorum_core::ops::matmul_bias::shape_error(&a.shape, &b.shape, &c.shape)
    {
        return Err(invalid(e));
    }
    let mut operands = vec![a, b];
    operands.extend(bias);
    let what = if bias.is_some() {
        "MatMulBias"
    } else {
        "MatMul"
    };
    let dtype = float_dtype(what, &operands)?;
    let (ash, bsh) = (a.shape.clone(), b.shape.clone());
    let quorum_core::ops::matmul::MatMulShape {
        m,
        k,
        n,
        a_batch,
        b_batch,
        batch,
        out_shape,
    } = quorum_core::ops::matmul::matmul_shape(&ash, &bsh)?;
    let (a_batch, b_batch) = (a_batch.as_slice(), b_batch.as_slice());
    if let Some(ctx) = ctx {
        ctx.check_alloc(&out_shape, dtype.size_in_memory())?;
    }
    require_u32_len(&ash)?;
    require_u32_len(&bsh)?;
    require_u32_len(&out_shape)?;
    let y = run.alloc(dtype, &out_shape)?;
    if y.is_empty() {
        return Ok(y);
    }
    let scale = |v: Vec<i64>, s: usize| v.into_iter().map(|x| x as usize * s).collect::<Vec<_>>();
    let mut sa = scale(broadcast_strides(a_batch, &batch), m * k);
    let sb = scale(broadcast_strides(b_batch, &batch), k * n);
    let sy: Vec<usize> = strides(&batch).iter().map(|&s| s * m * n).collect();
    let mut m_eff = m;
    let mut bdims = batch.clone();
    // B shared by every batch and A contiguous over them: one tall product.
    let nb: usize = batch.iter().product();
    // A dim of size 1 moves no offset whatever its stride (broadcasting gives it 0): [1, 56, 56, 96]
    // × [96, 384] (a Linear over NHWC maps) is one [3136, 96] × [96, 384] product, not 56 of [56, 96].
    let a_full = sa
        .iter()
        .zip(strides(&batch))
        .zip(&batch)
        .all(|((&s, full), &d)| d == 1 || s == full * m * k);
    if nb > 1 && sb.iter().all(|&s| s == 0) && a_full && (nb * m).div_ceil(64) <= 65535 {
        m_eff = nb * m;
        bdims.clear();
        sa.clear();
    }
    let nbd = bdims.len();
    let strides4 = if bdims.is_empty() {
        [vec![], vec![], vec![], vec![]]
    } else {
        [sa, sb, vec![0; nbd], sy]
    };
    // An operand with a single row or column is contiguous along k whatever its layout.
    let bop = if n == 1 {
        BOperand::Strided {
            ldb: k,
            trans: true,
        }
    } else {
        BOperand::Strided {
            ldb: n,
            trans: false,
        }
    };
    run_gemm(
        run,
        &Problem {
            dtype,
            m: m_eff,
            n,
            k,
            a: a.ptr(),
            lda: k,
            trans_a: false,
            b: b.ptr(),
            bop,
            c: bias.map(|c| (c.ptr(), 0, 1)),
            y: y.ptr(),
            ldy: n,
            alpha: 1.0,
            beta: if bias.is_some() { 1.0 } else { 0.0 },
            batch: bdims,
            strides: strides4,
            ends: ends(a, b, bias, &y),
        },
    )?;
    Ok(y)
}

fn gemm(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let a = dev_input(inputs, 0)?;
    let b = dev_input(inputs, 1)?;
    let dtype = float_dtype("Gemm", &[&a, &b])?;
    let ta = ctx.attr_i("transA", 0)? != 0;
    let tb = ctx.attr_i("transB", 0)? != 0;
    let alpha = ctx.attr_f("alpha", 1.0)?;
    let beta = ctx.attr_f("beta", 1.0)?;
    let [m, k, n] = quorum_core::device::forms::gemm_dims(&a.shape, &b.shape, ta, tb)?;
    if inputs.present(2)
        && let Some(cd) = inputs.dtype(2)
        && cd != dtype
    {
        return Err(invalid(format!("Gemm: C has dtype {cd} but A has {dtype}")));
    }
    ctx.check_alloc(&[m, n], dtype.size_in_memory())?;
    require_u32_len(&a.shape)?;
    require_u32_len(&b.shape)?;
    require_u32_len(&[m, n])?;
    let y = run.alloc(dtype, &[m, n])?;
    if y.is_empty() {
        return Ok(vec![y]);
    }
    let c = if inputs.present(2) && beta != 0.0 {
        let c = dev_input(inputs, 2)?;
        let (rs, cs) = c_strides(&c.shape, m, n)?;
        Some((c, rs, cs))
    } else {
        None
    };
    run_gemm(
        run,
        &Problem {
            dtype,
            m,
            n,
            k,
            a: a.ptr(),
            lda: a.shape[1],
            trans_a: ta,
            b: b.ptr(),
            bop: BOperand::Strided {
                ldb: b.shape[1],
                trans: tb,
            },
            c: c.as_ref().map(|(c, rs, cs)| (c.ptr(), *rs, *cs)),
            y: y.ptr(),
            ldy: n,
            alpha,
            beta,
            batch: vec![],
            strides: [vec![], vec![], vec![], vec![]],
            ends: ends(&a, &b, c.as_ref().map(|(c, _, _)| c), &y),
        },
    )?;
    Ok(vec![y])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_broadcast_strides() {
        assert_eq!(c_strides(&[], 3, 4).unwrap(), (0, 0));
        assert_eq!(c_strides(&[4], 3, 4).unwrap(), (0, 1));
        assert_eq!(c_strides(&[1], 3, 4).unwrap(), (0, 0));
        assert_eq!(c_strides(&[3, 1], 3, 4).unwrap(), (1, 0));
        assert_eq!(c_strides(&[1, 4], 3, 4).unwrap(), (0, 1));
        assert_eq!(c_strides(&[3, 4], 3, 4).unwrap(), (4, 1));
        assert!(c_strides(&[3], 3, 4).is_err());
        assert!(c_strides(&[2, 3, 4], 3, 4).is_err());
        // M = 1: a [1, N] C has stride 0 along m either way.
        assert_eq!(c_strides(&[1, 4], 1, 4).unwrap(), (0, 1));
    }

    #[test]
    fn claims_matmul_and_gemm_only() {
        let node = |op: &str| Node {
            name: "n".into(),
            op_type: op.into(),
            domain: String::new(),
            opset: 13,
            inputs: vec![],
            outputs: vec![],
            attrs: Default::default(),
        };
        assert!(matches!(claim(&node("MatMul")), Some(Ok(_))));
        assert!(matches!(claim(&node("Gemm")), Some(Ok(_))));
        assert!(claim(&node("Conv")).is_none());
    }
}
