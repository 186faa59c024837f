//! CUDA kernels, one file per op family. Each family's `claim` says, from the node alone (op type,
//! opset, attributes), whether CUDA runs it and with which kernel, or why not. Shapes and dtypes are
//! only known at run time; a kernel that meets a form it does not handle declines then, and the node
//! runs on the CPU.
//!
//! Op semantics (attribute defaults, shape rules, broadcasting) come from the shared helpers in
//! `crate::ops`; only the device code lives here.
use super::ptx::{Cmp, Kernel, Reg, Ty};
use super::{CudaKernel, KError, KResult};
use crate::ir::Node;
use crate::tensor::DType;
use quorum_optable::{Backend, Family};

pub mod cast;
pub mod conv;
pub mod elementwise;
pub mod index;
pub mod math;
pub mod matmul;
pub mod movement;
pub mod norm;
pub mod pool;
#[cfg(test)]
mod ptx_golden_tests;
pub mod reduce;
pub mod resize;
pub mod softmax;

/// The kernel for `node`, or the reason CUDA declines it. The op table (`quorum_optable`) says
/// whether CUDA claims the op and which family's generator handles it; the family then claims the
/// node's form or declines it.
pub fn claim(node: &Node) -> Result<CudaKernel, String> {
    if node.domain == crate::ops::QUORUM_DOMAIN
        && let Some(k) = matmul::claim_fused(node)
    {
        return Ok(k);
    }
    if !node.domain.is_empty() {
        return Err(format!("domain '{}' has no CUDA kernels", node.domain));
    }
    let Some(row) =
        quorum_optable::find(&node.op_type).filter(|r| r.devices.contains(Backend::Cuda))
    else {
        return Err("no CUDA kernel for this operator".into());
    };
    let family: fn(&Node) -> Option<Result<CudaKernel, String>> = match row.family {
        Family::Unary | Family::Binary => elementwise::claim,
        Family::Cast => cast::claim,
        Family::Movement | Family::View | Family::Fill => movement::claim,
        Family::Index => index::claim,
        Family::Resize => resize::claim,
        Family::Matrix => matmul::claim,
        Family::Convolution => conv::claim,
        Family::Reduction => reduce::claim,
        Family::Softmax => softmax::claim,
        Family::Normalization => norm::claim,
        Family::Pooling => pool::claim,
        Family::Recurrent | Family::Metadata => {
            return Err(format!("the {:?} family runs on the host", row.family));
        }
    };
    family(node).unwrap_or_else(|| {
        Err(format!(
            "the op table puts {} in the {:?} family, whose CUDA kernels do not know it",
            node.op_type, row.family
        ))
    })
}

/// Every op type CUDA claims in at least one form (for `quorum info` and the docs).
pub fn claimed_ops() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = quorum_optable::device_ops(Backend::Cuda).collect();
    v.sort();
    v
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

/// Row-major strides of `shape` in elements.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
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

/// Removes size-1 dims and merges neighbours that every operand walks contiguously, so that the
/// index arithmetic is as short as possible. Returns the new shape and strides.
pub fn simplify(shape: &[usize], strides: &[Vec<i64>]) -> (Vec<usize>, Vec<Vec<i64>>) {
    let mut out_shape: Vec<usize> = Vec::new();
    let mut out_strides: Vec<Vec<i64>> = vec![Vec::new(); strides.len()];
    for d in 0..shape.len() {
        if shape[d] == 1 {
            continue;
        }
        let merge = !out_shape.is_empty()
            && strides.iter().enumerate().all(|(j, s)| {
                let last = *out_strides[j].last().unwrap_or(&0);
                last == s[d] * shape[d] as i64
            });
        if merge {
            let n = out_shape.len() - 1;
            out_shape[n] *= shape[d];
            for (j, s) in strides.iter().enumerate() {
                out_strides[j][n] = s[d];
            }
        } else {
            out_shape.push(shape[d]);
            for (j, s) in strides.iter().enumerate() {
                out_strides[j].push(s[d]);
            }
        }
    }
    (out_shape, out_strides)
}

/// Strides of an operand of shape `in_shape` broadcast (numpy rules, right-aligned) to `out_shape`.
pub fn broadcast_strides(in_shape: &[usize], out_shape: &[usize]) -> Vec<i64> {
    let own = strides(in_shape);
    let lead = out_shape.len() - in_shape.len();
    (0..out_shape.len())
        .map(|d| {
            if d < lead || in_shape[d - lead] == 1 {
                0
            } else {
                own[d - lead] as i64
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simplify_merges_contiguous_and_drops_ones() {
        let shape = [2, 1, 3, 4];
        let a = broadcast_strides(&[2, 1, 3, 4], &shape);
        let b = broadcast_strides(&[4], &shape);
        let (s, st) = simplify(&shape, &[a, b]);
        assert_eq!(s, vec![6, 4]);
        assert_eq!(st, vec![vec![4, 1], vec![0, 1]]);
        let (s, st) = simplify(&[2, 3], &[vec![3, 1], vec![3, 1]]);
        assert_eq!((s, st), (vec![6], vec![vec![1], vec![1]]));
        // A transposed walk does not merge.
        let (s, _) = simplify(&[2, 3], &[vec![1, 2]]);
        assert_eq!(s, vec![2, 3]);
    }
}
