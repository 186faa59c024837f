//! CUDA kernels, one file per op family. Each family's `claim` says, from the node alone (op type,
//! opset, attributes), whether CUDA runs it and with which kernel, or why not. Shapes and dtypes are
//! only known at run time; a kernel that meets a form it does not handle declines then, and the node
//! runs on the CPU.
//!
//! Op semantics (attribute defaults, shape rules, broadcasting) come from the shared helpers in
//! `quorum_core::ops`; only the device code lives here.
use super::ptx::{Cmp, Kernel, Reg, Ty};
use super::{CudaKernel, KError, KResult};
use quorum_core::device::claim::{CodeGenerators, FamilyClaim};
use quorum_core::ir::Node;
use quorum_core::ops::attention::fused::Form;
use quorum_core::tensor::DType;
use quorum_optable::Backend;

pub use quorum_core::device::layout::{broadcast_strides, simplify, strides};

pub mod attention;
pub mod cast;
pub mod conv;
pub mod elem;
pub mod elementwise;
pub mod index;
pub mod integer;
pub mod integer_conv;
pub mod math;
pub mod matmul;
pub mod movement;
pub mod norm;
pub mod pool;
#[cfg(test)]
mod ptx_golden_tests;
pub mod quantize;
pub mod recurrent;
pub mod reduce;
pub mod resize;
pub mod softmax;

/// The kernel for `node`, or the reason CUDA declines it: the fused ops of Quorum's own domain,
/// then the op table's families (`quorum_core::device::claim`).
pub fn claim(node: &Node) -> Result<CudaKernel, String> {
    if node.domain == quorum_core::ops::QUORUM_DOMAIN
        && let Some(k) = matmul::claim_fused(node)
    {
        return Ok(k);
    }
    if node.domain == quorum_core::ops::QUORUM_DOMAIN
        && node.op_type == quorum_core::ops::attention::fused::OP
    {
        return Form::of(node).map(|_| attention::k_fused_attention as CudaKernel);
    }
    quorum_core::device::claim::claim::<Generators>(node)
}

/// Every op type CUDA claims in at least one form (for `quorum info` and the docs).
pub fn claimed_ops() -> Vec<&'static str> {
    quorum_core::device::claim::claimed_ops::<Generators>()
}

/// This backend's code generators, one per device family of the op table.
pub struct Generators;

impl CodeGenerators for Generators {
    type Kernel = CudaKernel;
    const BACKEND: Backend = Backend::Cuda;
    const NAME: &'static str = "CUDA";

    fn elementwise(node: &Node) -> FamilyClaim<CudaKernel> {
        elementwise::claim(node)
    }
    fn cast(node: &Node) -> FamilyClaim<CudaKernel> {
        cast::claim(node)
    }
    fn movement(node: &Node) -> FamilyClaim<CudaKernel> {
        movement::claim(node)
    }
    fn index(node: &Node) -> FamilyClaim<CudaKernel> {
        index::claim(node)
    }
    fn resize(node: &Node) -> FamilyClaim<CudaKernel> {
        resize::claim(node)
    }
    fn matrix(node: &Node) -> FamilyClaim<CudaKernel> {
        matmul::claim(node)
    }
    fn convolution(node: &Node) -> FamilyClaim<CudaKernel> {
        conv::claim(node)
    }
    fn reduction(node: &Node) -> FamilyClaim<CudaKernel> {
        reduce::claim(node)
    }
    fn softmax(node: &Node) -> FamilyClaim<CudaKernel> {
        softmax::claim(node)
    }
    fn normalization(node: &Node) -> FamilyClaim<CudaKernel> {
        norm::claim(node)
    }
    fn pooling(node: &Node) -> FamilyClaim<CudaKernel> {
        pool::claim(node)
    }
    fn recurrent(node: &Node) -> FamilyClaim<CudaKernel> {
        recurrent::claim(node)
    }
}

/// The flat thread index `ctaid.x · ntid.x + tid.x` (u32) and an early exit at `n`.
pub fn thread_index(k: &mut Kernel, n: Reg) -> Reg {
    let bid = k.special("ctaid.x");
    let bdim = k.special("ntid.x");
    let tid = k.special("tid.x");
    let i = k.fma(Ty::U32, bid, bdim, tid);
    let done = k.setp(Cmp::Ge, Ty::U32, i, n);
    k.exit_if(done);
    i
}

/// Declines unless `d` is one of `allowed`.
pub fn require_dtype(what: &str, d: DType, allowed: &[DType]) -> KResult<()> {
    if allowed.contains(&d) {
        Ok(())
    } else {
        Err(KError::Decline(format!(
            "{what} is {d}; the CUDA kernel takes {}",
            allowed
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )))
    }
}

/// Declines tensors whose element count does not fit the kernels' 32-bit indexing.
pub fn require_u32_len(shape: &[usize]) -> KResult<u32> {
    let n: usize = shape.iter().product();
    u32::try_from(n)
        .ok()
        .filter(|&n| n < (1u32 << 31))
        .ok_or_else(|| KError::Decline(format!("{n} elements exceed 32-bit indexing")))
}

/// The element offsets, for each of several operands, of flat output index `i` (u32) over
/// `out_shape`, where operand `j` steps `strides[j][d]` elements along output dim `d` (0 where it is
/// broadcast). Dims and strides are baked into the PTX as constants.
pub fn offsets(k: &mut Kernel, i: Reg, out_shape: &[usize], strides: &[Vec<i64>]) -> Vec<Reg> {
    let mut offs: Vec<Reg> = strides.iter().map(|_| k.mov(Ty::U32, 0u32)).collect();
    let mut rest = i;
    for d in (0..out_shape.len()).rev() {
        let dim = out_shape[d] as u32;
        let coord = if d == 0 {
            rest
        } else {
            let c = k.rem(Ty::U32, rest, dim);
            rest = k.div(Ty::U32, rest, dim);
            c
        };
        for (j, s) in strides.iter().enumerate() {
            let st = s[d];
            if st != 0 {
                // Two's complement wrap-around makes negative strides work in u32 arithmetic.
                offs[j] = k.fma(Ty::U32, coord, st as i32 as u32, offs[j]);
            }
        }
    }
    offs
}
