//! WGSL kernels, one file per op family. Each family's `claim` says, from the node alone, whether
//! wgpu runs it and with which kernel, or why not; a kernel that meets a form it does not compute
//! exactly at run time (a dtype, a shape, an adapter without f64) declines with
//! `DeviceError::Decline`, and the node runs on the CPU.
//!
//! Op semantics (attribute defaults, shape rules, broadcasting) come from `quorum_core::ops`; only the
//! device code lives here.
use std::sync::Arc;

use super::memory::{WBuf, WTensor};
use super::run::{KResult, Run};
use super::wgsl;
use quorum_core::backend::{DeviceError, NodeInputs};
use quorum_core::device::claim::{CodeGenerators, FamilyClaim};
use quorum_core::error::OpError;
use quorum_core::ir::Node;
use quorum_core::ops::OpCtx;
use quorum_core::tensor::DType;
use quorum_optable::Backend;

pub use quorum_core::device::layout::{broadcast_strides, simplify, strides};

pub mod cast;
pub mod conv;
pub mod elementwise;
mod elementwise_expr;
mod elementwise_int;
pub mod gemm_tile;
pub mod index;
pub mod math;
pub mod matmul;
pub mod movement;
mod movement_index;
pub mod norm;
pub mod pool;
pub mod reduce;
pub mod resize;
pub mod softmax;

/// A WGSL kernel for one node.
pub type WgpuKernel = fn(&OpCtx, &Run, &dyn NodeInputs) -> KResult<Vec<WTensor>>;

/// The kernel for `node`, or the reason wgpu declines it (`quorum_core::device::claim`).
pub fn claim(node: &Node) -> Result<WgpuKernel, String> {
    quorum_core::device::claim::claim::<Generators>(node)
}

/// Every op type wgpu claims in at least one form.
pub fn claimed_ops() -> Vec<&'static str> {
    quorum_core::device::claim::claimed_ops::<Generators>()
}

/// This backend's code generators, one per device family of the op table.
pub struct Generators;

impl CodeGenerators for Generators {
    type Kernel = WgpuKernel;
    const BACKEND: Backend = Backend::Wgpu;
    const NAME: &'static str = "WGSL";

    fn elementwise(node: &Node) -> FamilyClaim<WgpuKernel> {
        elementwise::claim(node)
    }
    fn cast(node: &Node) -> FamilyClaim<WgpuKernel> {
        cast::claim(node)
    }
    fn movement(node: &Node) -> FamilyClaim<WgpuKernel> {
        movement::claim(node).or_else(|| movement_index::claim(node))
    }
    fn index(node: &Node) -> FamilyClaim<WgpuKernel> {
        index::claim(node)
    }
    fn resize(node: &Node) -> FamilyClaim<WgpuKernel> {
        resize::claim(node)
    }
    fn matrix(node: &Node) -> FamilyClaim<WgpuKernel> {
        matmul::claim(node)
    }
    fn convolution(node: &Node) -> FamilyClaim<WgpuKernel> {
        conv::claim(node)
    }
    fn reduction(node: &Node) -> FamilyClaim<WgpuKernel> {
        reduce::claim(node)
    }
    fn softmax(node: &Node) -> FamilyClaim<WgpuKernel> {
        softmax::claim(node)
    }
    fn normalization(node: &Node) -> FamilyClaim<WgpuKernel> {
        norm::claim(node)
    }
    fn pooling(node: &Node) -> FamilyClaim<WgpuKernel> {
        pool::claim(node)
    }
    /// The op table gives wgpu no recurrent row (`quorum_optable::CUDA_ONLY` says why), so the
    /// claim never asks; an answer all the same, should a row move.
    fn recurrent(node: &Node) -> FamilyClaim<WgpuKernel> {
        Some(Err(format!("{} has no wgpu kernel", node.op_type)))
    }
}

/// Declines with a formatted reason.
macro_rules! decline {
    ($($t:tt)*) => { return Err(::quorum_core::backend::DeviceError::Decline(format!($($t)*))) };
}
pub(crate) use decline;

/// An operator-contract error, as the CPU kernel would give it.
pub fn invalid(msg: impl Into<String>) -> DeviceError {
    DeviceError::Op(OpError::Invalid(msg.into()))
}

/// This backend's tensor inside a seam tensor (a tensor of another device is declined).
pub fn unwrap(d: quorum_core::backend::DeviceTensor) -> KResult<WTensor> {
    let (dtype, shape) = (d.dtype, d.shape);
    let buf: Arc<WBuf> = d
        .buf
        .downcast::<WBuf>()
        .map_err(|_| DeviceError::Decline("a tensor on another device".into()))?;
    Ok(WTensor { buf, dtype, shape })
}

/// Input `i` on the device, or `None` when omitted.
pub fn dev_opt(inputs: &dyn NodeInputs, i: usize) -> KResult<Option<WTensor>> {
    match inputs.device(i)? {
        None => Ok(None),
        Some(d) => unwrap(d).map(Some),
    }
}

/// Input `i` on the device; an error when it is missing.
pub fn dev(inputs: &dyn NodeInputs, i: usize) -> KResult<WTensor> {
    quorum_core::device::required(inputs, i)
}

/// Every present input on the device.
pub fn all_dev(inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let mut v = Vec::new();
    for i in 0..inputs.len() {
        if let Some(t) = dev_opt(inputs, i)? {
            v.push(t);
        }
    }
    if v.is_empty() {
        return Err(invalid("no inputs"));
    }
    Ok(v)
}

/// Input `i` read on the host as i64 values (shapes, axes, pads); `None` when omitted.
pub fn host_i64s(inputs: &dyn NodeInputs, i: usize) -> KResult<Option<Vec<i64>>> {
    quorum_core::device::host_i64s(inputs, i)
}

/// Input `i` read on the host as f64 values; `None` when omitted.
pub fn host_f64s(inputs: &dyn NodeInputs, i: usize) -> KResult<Option<Vec<f64>>> {
    quorum_core::device::host_f64s(inputs, i)
}

/// Declines unless `d` is one of `allowed`.
pub fn require_dtype(what: &str, d: DType, allowed: &[DType]) -> KResult<()> {
    if allowed.contains(&d) {
        return Ok(());
    }
    decline!(
        "{what} is {d}; the WGSL kernel takes {}",
        allowed
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Declines unless the adapter has f64 and i64 in shaders (what the accurate functions need:
/// `math` takes exponents from the bits of an f64).
pub fn require_f64(run: &Run, what: &str) -> KResult<()> {
    if run.device.caps.f64 && run.device.caps.i64 {
        return Ok(());
    }
    decline!("{what} is computed in f64 and this adapter lacks f64 or i64 shaders")
}

/// Loop iterations one thread may run on a software adapter. llvmpipe (lavapipe) stops a shader's
/// loops after 65535 iterations to guard against hangs, so a longer walk would end early and give
/// a partial result; a kernel that would loop more on such an adapter declines instead (measured:
/// a 40,000-element ReduceSum, whose walk loops twice per element, came back short).
pub const SOFTWARE_LOOP_LIMIT: usize = 32_768;

/// Declines a kernel whose threads loop `iterations` times (loops nested within counted) on an
/// adapter that cuts long loops short ([`SOFTWARE_LOOP_LIMIT`]).
pub fn loop_budget(run: &Run, what: &str, iterations: usize) -> KResult<()> {
    if run.device.software && iterations > SOFTWARE_LOOP_LIMIT {
        decline!(
            "{what} loops {iterations} times per thread; {} (software) ends loops after 65535 iterations",
            run.device.info.name
        );
    }
    Ok(())
}

/// The element count as a u32 for kernel indices, or a decline beyond 2^31.
pub fn u32_len(shape: &[usize]) -> KResult<u32> {
    let n: usize = shape.iter().product();
    match u32::try_from(n) {
        Ok(n) if n < (1 << 31) => Ok(n),
        _ => decline!("{n} elements exceed 32-bit indexing"),
    }
}

/// WGSL statements that turn flat index `i` into element offsets `off0..` of several operands
/// walking the `rank` output dims `P[base..base+rank]` with strides `P[base+rank*(1+j)..]` (two's
/// complement words, so negative strides work in u32 arithmetic), straight-line, each parameter at
/// a literal index (so that `wgsl::inline_params` can make the walk's divisors constants).
pub fn offsets_code(operands: usize, base: usize, rank: usize) -> String {
    let mut s = String::new();
    for j in 0..operands {
        s.push_str(&format!("var off{j} = 0u;\n"));
    }
    s.push_str("var rest = i;\n");
    for d in (0..rank).rev() {
        let dim = base + d;
        s.push_str(&format!(
            "{{\n  let c = rest % P[{dim}];\n  rest = rest / P[{dim}];\n"
        ));
        for j in 0..operands {
            s.push_str(&format!(
                "  off{j} = off{j} + c * P[{}];\n",
                base + rank * (j + 1) + d
            ));
        }
        s.push_str("}\n");
    }
    s
}

/// Parameter words for [`offsets_code`] with `base = 2`: `[n, rank, dims..., strides...]`.
pub fn offsets_params(n: u32, shape: &[usize], strides: &[Vec<i64>]) -> Vec<u32> {
    let mut p = vec![n, shape.len() as u32];
    p.extend(shape.iter().map(|&d| d as u32));
    for s in strides {
        p.extend(s.iter().map(|&v| v as i32 as u32));
    }
    p
}

/// Fills every word of `t`'s buffer (`whole`) or of its elements with `word`, in queue order.
pub fn fill_words(run: &Run, t: &WTensor, word: u32, whole: bool) -> KResult<()> {
    let n = if whole {
        (t.buf.size() / 4) as usize
    } else {
        t.bytes() as usize / 4
    };
    let src = format!("{}{}", wgsl::header(1, 0), wgsl::entry_1d("o0[i] = P[1];"));
    run.dispatch_n("fill", &src, &[t], &[], vec![n as u32, word], n)
}
