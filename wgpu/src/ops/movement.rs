//! WGSL kernels: data movement. The ops are the shared plans of `quorum_core::device::movement` over this
//! backend's primitives: views dispatch nothing (the output shares the input's buffer); Transpose,
//! Expand, Slice, Concat, Split, Tile, DepthToSpace and SpaceToDepth are one strided-copy kernel with
//! different strides; ConstantOfShape and the Dropout mask are a fill. Pad and Gather are in
//! `movement_index`. Elements move as their words, so every device dtype works.
use super::{WgpuKernel, decline, dev_opt, offsets_code, offsets_params, simplify, u32_len};
use crate::memory::{WTensor, encode, words};
use crate::run::{KResult, Run};
use crate::wgsl;
use quorum_core::backend::{DeviceError, NodeInputs};
use quorum_core::device::movement::shared_kernel;
use quorum_core::device::{DeviceValue, KernelInputs, Primitives, Strided};
use quorum_core::ir::Node;
use quorum_core::tensor::{DType, Tensor, Value};
use std::sync::Arc;

pub fn claim(node: &Node) -> Option<Result<WgpuKernel, String>> {
    shared_kernel!(node.op_type.as_str(), WgpuKernel).map(Ok)
}

impl DeviceValue for WTensor {
    fn dtype(&self) -> DType {
        self.dtype
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn view(&self, shape: Vec<usize>) -> WTensor {
        WTensor::view(self, shape)
    }
}

impl KernelInputs<WTensor, DeviceError> for dyn NodeInputs + '_ {
    fn len(&self) -> usize {
        NodeInputs::len(self)
    }

    fn present(&self, i: usize) -> bool {
        NodeInputs::present(self, i)
    }

    fn device(&self, i: usize) -> KResult<Option<WTensor>> {
        dev_opt(self, i)
    }

    fn host(&self, i: usize) -> KResult<Option<Arc<Value>>> {
        NodeInputs::host(self, i)
    }
}

impl Primitives for Run<'_> {
    type Tensor = WTensor;
    type Error = DeviceError;

    fn matmul(&self, a: &WTensor, b: &WTensor) -> KResult<WTensor> {
        super::matmul::matmul(self, a, b)
    }

    fn decline(reason: String) -> DeviceError {
        DeviceError::Decline(reason)
    }

    fn alloc(&self, dtype: DType, shape: &[usize]) -> KResult<WTensor> {
        Run::alloc(self, dtype, shape)
    }

    /// One kernel generated for the geometry: a thread per element walks the simplified shape and
    /// moves the element's words.
    fn strided_copy(
        &self,
        dst: &WTensor,
        to: &Strided,
        src: &WTensor,
        from: &Strided,
        shape: &[usize],
    ) -> KResult<()> {
        let n = u32_len(shape)?;
        if n == 0 {
            return Ok(());
        }
        if !fits_i32(from, shape) || !fits_i32(to, shape) {
            decline!("offsets beyond 32-bit indexing");
        }
        let (src_base, dst_base) = (from.base, to.base);
        let w = elem_words(src)?;
        let (shape, st) = simplify(shape, &[to.strides.clone(), from.strides.clone()]);
        let body = format!(
            "{}let d = (P[2] + off0) * {w}u;\nlet s = (P[3] + off1) * {w}u;\nfor (var k = 0u; k < {w}u; k = k + 1u) {{ o0[d + k] = i0[s + k]; }}\n",
            offsets_code(2, 4, shape.len())
        );
        let p = offsets_params(n, &shape, &st);
        let mut params = vec![p[0], p[1], dst_base as i32 as u32, src_base as i32 as u32];
        params.extend_from_slice(&p[2..]);
        // Generated for this geometry: the coordinate walk divides by constants.
        let body = wgsl::inline_params(&body, &params, 1);
        let src_text = format!("{}{}", wgsl::header(1, 1), wgsl::entry_1d(&body));
        self.dispatch_n("copy", &src_text, &[dst], &[src], params, n as usize)
    }

    /// A fill of the value's words repeated.
    fn fill(&self, value: &Tensor, shape: &[usize]) -> KResult<WTensor> {
        let bytes = encode(value).ok_or_else(|| {
            quorum_core::backend::DeviceError::Decline(format!("a fill of {}", value.dtype()))
        })?;
        let ws: Vec<u32> = bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let out = self.alloc(value.dtype(), shape)?;
        let n = out.len() * ws.len();
        if n == 0 {
            return Ok(out);
        }
        let w = ws.len();
        let src = format!(
            "{}{}",
            wgsl::header(1, 0),
            wgsl::entry_1d(&format!("o0[i] = P[1u + i % {w}u];"))
        );
        let mut params = vec![n as u32];
        params.extend(ws);
        self.dispatch_n("fill_value", &src, &[&out], &[], params, n)?;
        Ok(out)
    }
}

fn elem_words(t: &WTensor) -> KResult<usize> {
    words(t.dtype)
        .ok_or_else(|| DeviceError::Decline(format!("{} values stay on the host", t.dtype)))
}

/// Whether every offset of the walk, in words (an element is at most two), fits WGSL's signed
/// 32-bit arithmetic.
fn fits_i32(walk: &Strided, shape: &[usize]) -> bool {
    walk.reach(shape) < i32::MAX as i64 / 2
}

/// Copies every element of `src` into `dst` (same element count and dtype).
pub fn copy(run: &Run, src: &WTensor, dst: &WTensor) -> KResult<()> {
    let shape = [src.len()];
    let flat = Strided::dense(&shape);
    run.strided_copy(dst, &flat, src, &flat, &shape)
}
