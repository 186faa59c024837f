//! CUDA kernels: data movement. The ops are the shared plans of `quorum_core::device::movement` over this
//! backend's primitives: views launch nothing (the output shares the input's buffer); Transpose,
//! Expand, Slice, Concat, Split, Tile, DepthToSpace and SpaceToDepth are one strided-copy kernel with
//! different strides; ConstantOfShape and the Dropout mask are a driver fill. Pad and Gather have
//! kernels of their own over the shared plans. Elements are moved as raw bits, so every device dtype
//! works.
use super::{offsets, require_u32_len, simplify, strides, thread_index};
use crate::decline;
use crate::driver::Arg;
use crate::memory::{device_elem_size, tensor_bytes};
use crate::ptx::{Cmp, Kernel, Op, Reg, Space, Ty, module};
use crate::{CudaKernel, DevTensor, Fault, Inputs, KError, KResult, Run, blocks, dev_input};
use quorum_core::device::layout::widen;
use quorum_core::device::movement::{
    GatherPlan, PadMode, PadPlan, gather_plan, pad_plan, shared_kernel,
};
use quorum_core::device::{DeviceValue, KernelInputs, Primitives, Strided, host_i64s};
use quorum_core::error::OpError;
use quorum_core::ir::Node;
use quorum_core::ops::OpCtx;
use quorum_core::tensor::{DType, Tensor, Value};
use std::sync::Arc;

/// The kernel for `node` if this family owns its op type.
pub fn claim(node: &Node) -> Option<Result<CudaKernel, String>> {
    let op = node.op_type.as_str();
    let k: CudaKernel = match shared_kernel!(op, CudaKernel) {
        Some(k) => k,
        None if op == "Pad" => k_pad,
        None if op == "Gather" => k_gather,
        None => return None,
    };
    Some(Ok(k))
}

impl DeviceValue for DevTensor {
    fn dtype(&self) -> DType {
        self.dtype
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn view(&self, shape: Vec<usize>) -> DevTensor {
        DevTensor::view(self, shape)
    }
}

impl KernelInputs<DevTensor, KError> for dyn Inputs + '_ {
    fn len(&self) -> usize {
        Inputs::len(self)
    }

    fn present(&self, i: usize) -> bool {
        Inputs::present(self, i)
    }

    fn device(&self, i: usize) -> KResult<Option<DevTensor>> {
        self.dev(i)
    }

    fn host(&self, i: usize) -> KResult<Option<Arc<Value>>> {
        Inputs::host(self, i)
    }
}

impl Primitives for Run<'_> {
    type Tensor = DevTensor;
    type Error = KError;

    fn matmul(&self, a: &DevTensor, b: &DevTensor) -> KResult<DevTensor> {
        super::matmul::matmul_tensors(None, self, a, b, None)
    }

    fn decline(reason: String) -> KError {
        KError::Decline(reason)
    }

    fn alloc(&self, dtype: DType, shape: &[usize]) -> KResult<DevTensor> {
        Run::alloc(self, dtype, shape)
    }

    /// One kernel: a thread per element walks the simplified shape; offsets are signed 32-bit (strides
    /// may be negative: Slice with negative steps).
    fn strided_copy(
        &self,
        dst: &DevTensor,
        to: &Strided,
        src: &DevTensor,
        from: &Strided,
        shape: &[usize],
    ) -> KResult<()> {
        let n = require_u32_len(shape)?;
        if n == 0 {
            return Ok(());
        }
        if !fits_i32(from, shape) || !fits_i32(to, shape) {
            decline!("offsets beyond 32-bit indexing");
        }
        let (mut src_base, mut dst_base) = (from.base, to.base);
        let (mut ty, mut size) = elem_ty(src)?;
        let (mut shape, mut st) = simplify(shape, &[to.strides.clone(), from.strides.clone()]);
        // Where every walk keeps neighbours of the innermost axis together (a transformer's heads
        // transposed, a Concat or Slice along an outer axis), a thread moves up to 8 bytes.
        if let Some((w, s, t, b)) = widen(&shape, &st, &[dst_base, src_base], size, 8) {
            let bytes = (w * size) as u64;
            if dst.ptr().is_multiple_of(bytes) && src.ptr().is_multiple_of(bytes) {
                (shape, st, dst_base, src_base) = (s, t, b[0], b[1]);
                (ty, size) = match bytes {
                    2 => (Ty::U16, 2),
                    4 => (Ty::U32, 4),
                    _ => (Ty::U64, 8),
                };
            }
        }
        let n = require_u32_len(&shape)?;
        let mut k = Kernel::new("copy");
        let dp = k.param_ptr("dst");
        let sp = k.param_ptr("src");
        let n_r = k.param("n", Ty::U32);
        let i = thread_index(&mut k, n_r);
        let offs = offsets(&mut k, i, &shape, &st);
        let so = k.add(Ty::U32, offs[1], src_base as i32 as u32);
        let doff = k.add(Ty::U32, offs[0], dst_base as i32 as u32);
        let sa = signed_addr(&mut k, sp, so, size);
        let v = k.ld_nc(ty, sa, 0);
        let da = signed_addr(&mut k, dp, doff, size);
        store_bits(&mut k, ty, da, v);
        let ptx = module(self.cc(), &[k]);
        self.launch(
            &ptx,
            "copy",
            (blocks(n as usize, 256), 1, 1),
            (256, 1, 1),
            0,
            &[dst.arg_out(), src.arg_in(), Arg::U32(n)],
        )
    }

    /// A new tensor of `shape` with every element equal to `value` (one element), by a 32-bit device fill
    /// of the value's bytes repeated: 1-, 2- and 4-byte values. Pool size classes are multiples of 4
    /// bytes, so the last partial word stays inside the allocation (checked).
    fn fill(&self, value: &Tensor, shape: &[usize]) -> KResult<DevTensor> {
        let bytes = tensor_bytes(value)
            .ok_or_else(|| KError::Decline(format!("a device fill of {}", value.dtype())))?;
        let word = match *bytes {
            [b] => u32::from(b) * 0x0101_0101,
            [lo, hi] => u32::from(u16::from_le_bytes([lo, hi])) * 0x0001_0001,
            [a, b, c, d] => u32::from_le_bytes([a, b, c, d]),
            _ => decline!("a device fill of {} (8-byte values)", value.dtype()),
        };
        let out = self.alloc(value.dtype(), shape)?;
        let words = (out.len() * bytes.len()).div_ceil(4);
        if words * 4 > out.buf.bytes() {
            decline!("a device fill past its allocation");
        }
        if words > 0 {
            self.fill32(&out, word, words)?;
        }
        Ok(out)
    }
}

pub(super) fn elem_ty(t: &DevTensor) -> KResult<(Ty, usize)> {
    Ok(match device_elem_size(t.dtype) {
        Some(1) => (Ty::U8, 1),
        Some(2) => (Ty::U16, 2),
        Some(4) => (Ty::U32, 4),
        Some(8) => (Ty::U64, 8),
        _ => decline!("{} values stay on the host", t.dtype),
    })
}

/// An index read on the device (`raw`, s32 or s64) made safe to address an axis of `dim`: a
/// negative index counts from the end; one still out of range reads element 0 and stores 1 in the
/// fault word at `fault`, which the run turns into the node's error. Returns the index as u32.
pub(super) fn checked_index(k: &mut Kernel, raw: Reg, ity: Ty, dim: u64, fault: Reg) -> Reg {
    let raw = if ity == Ty::S32 {
        k.cvt(Ty::S64, Ty::S32, "", raw)
    } else {
        raw
    };
    let neg = k.setp(Cmp::Lt, Ty::S64, raw, 0i64);
    let up = k.add(Ty::S64, raw, dim as i64);
    let norm = k.selp(Ty::S64, up, raw, neg);
    let norm = k.bitcast(Ty::U64, norm);
    let ok = k.setp(Cmp::Lt, Ty::U64, norm, dim as i64);
    let skip = k.new_label("in_range");
    k.bra_if(ok, false, &skip);
    k.st(Space::Global, fault, 0, 1u32);
    k.label(&skip);
    let safe = k.selp(Ty::U64, norm, 0i64, ok);
    k.cvt(Ty::U32, Ty::U64, "", safe)
}

/// `base + (off as signed 32-bit) · size`: strides may be negative (Slice with negative steps).
fn signed_addr(k: &mut Kernel, base: Reg, off: Reg, size: usize) -> Reg {
    let s = k.bitcast(Ty::S32, off);
    k.addr(base, s, size)
}

pub(super) fn store_bits(k: &mut Kernel, ty: Ty, addr: Reg, v: Reg) {
    if ty == Ty::U8 {
        k.st_u8(Space::Global, addr, 0, v);
    } else {
        k.st(Space::Global, addr, 0, v);
    }
}

/// Whether every offset of the walk fits the kernels' signed 32-bit arithmetic.
fn fits_i32(walk: &Strided, shape: &[usize]) -> bool {
    walk.reach(shape) < i32::MAX as i64
}

fn k_pad(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let x = dev_input(inputs, 0)?;
    let r = x.shape.len();
    let PadPlan {
        mode,
        begin,
        out_shape,
        value,
        ..
    } = pad_plan(ctx, &x.shape, inputs)?;
    let n = require_u32_len(&out_shape)?;
    let out = run.alloc(x.dtype, &out_shape)?;
    if n == 0 {
        return Ok(vec![out]);
    }
    if !fits_i32(&Strided::dense(&x.shape), &x.shape)
        || begin.iter().any(|&b| i32::try_from(b).is_err())
    {
        decline!("Pad input or pads beyond 32-bit indexing");
    }
    let (ty, size) = elem_ty(&x)?;
    // The constant as the element type's bits.
    let cvalue = Tensor::from_f64s(x.dtype, &[1], vec![value])?;
    let cbits =
        tensor_bytes(&cvalue).ok_or_else(|| KError::Decline(format!("Pad of {}", x.dtype)))?;
    let mut word = [0u8; 8];
    word[..cbits.len()].copy_from_slice(&cbits);
    let cval = u64::from_le_bytes(word);
    let ist = strides(&x.shape);

    let mut k = Kernel::new("pad");
    let op = k.param_ptr("out");
    let xp = k.param_ptr("x");
    let n_r = k.param("n", Ty::U32);
    let i = thread_index(&mut k, n_r);
    let mut rest = i;
    let src = k.mov(Ty::S32, 0i32);
    let zero = k.mov(Ty::U32, 0u32);
    let inside = k.setp(Cmp::Eq, Ty::U32, zero, 0u32);
    let mut src = src;
    let mut inside = inside;
    for d in (0..r).rev() {
        let dim = out_shape[d] as u32;
        let c = k.rem(Ty::U32, rest, dim);
        rest = k.div(Ty::U32, rest, dim);
        let c = k.bitcast(Ty::S32, c);
        let s = k.sub(Ty::S32, c, begin[d] as i32);
        let id = x.shape[d] as i32;
        let s = match mode {
            PadMode::Constant => {
                let ge = k.setp(Cmp::Ge, Ty::S32, s, 0i32);
                let lt = k.setp(Cmp::Lt, Ty::S32, s, id);
                let ok = k.pred_and(ge, lt);
                inside = k.pred_and(inside, ok);
                s
            }
            PadMode::Edge => {
                let s = k.max(Ty::S32, s, 0i32);
                k.min(Ty::S32, s, id - 1)
            }
            PadMode::Wrap => {
                let m = k.rem(Ty::S32, s, id);
                let mp = k.add(Ty::S32, m, id);
                k.rem(Ty::S32, mp, id)
            }
            PadMode::Reflect => {
                if id == 1 {
                    k.mov(Ty::S32, 0i32)
                } else {
                    let period = 2 * (id - 1);
                    let a = k.unary("abs", Ty::S32, s);
                    let m = k.rem(Ty::S32, a, period);
                    let back = k.sub(Ty::S32, period, m);
                    let over = k.setp(Cmp::Ge, Ty::S32, m, id);
                    k.selp(Ty::S32, back, m, over)
                }
            }
        };
        src = k.fma(Ty::S32, s, ist[d] as i32, src);
    }
    let oa = k.addr(op, i, size);
    let cv = k.mov(ty, Op::I(cval as i64));
    let v = k.mov(ty, Op::I(0));
    k.assign(v, Op::R(cv));
    k.when(inside, |k| {
        let sa = k.addr(xp, src, size);
        let loaded = k.ld_nc(ty, sa, 0);
        k.assign(v, Op::R(loaded));
    });
    store_bits(&mut k, ty, oa, v);
    let ptx = module(run.cc(), &[k]);
    run.launch(
        &ptx,
        "pad",
        (blocks(n as usize, 256), 1, 1),
        (256, 1, 1),
        0,
        &[out.arg_out(), x.arg_in(), Arg::U32(n)],
    )?;
    Ok(vec![out])
}

fn k_gather(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let x = dev_input(inputs, 0)?;
    let ishape = inputs
        .shape(1)
        .ok_or_else(|| KError::Op(OpError::Invalid("Gather needs indices".into())))?;
    let plan = gather_plan(ctx, &x.shape, &ishape)?;
    let GatherPlan {
        axis,
        dim,
        inner,
        ref out_shape,
    } = plan;
    let ni: usize = ishape.iter().product();
    // Indices fixed for the session (a weight, shape arithmetic) are checked on the host, free of
    // cost. Others (a run input, a device value) are checked by the kernel itself: reading them on
    // the host would stall the stream on a device value and stop a graph capture on a run input
    // (BERT's token ids). A bad index then reads element 0 instead and raises the run's fault word.
    let on_device = !inputs.fixed(1);
    let (itensor, ity, isize) = if on_device {
        let itensor = dev_input(inputs, 1)?;
        let (ity, isize) = match itensor.dtype {
            DType::I64 => (Ty::S64, 8),
            DType::I32 => (Ty::S32, 4),
            d => decline!("Gather indices of {d}"),
        };
        if dim == 0 && ni > 0 {
            decline!("Gather from an empty axis: every index is out of range");
        }
        (itensor, ity, isize)
    } else {
        let idx = host_i64s(inputs, 1)?
            .ok_or_else(|| KError::Op(OpError::Invalid("Gather needs indices".into())))?;
        let norm = plan.host_indices(&idx)?;
        let t = run.upload(&Tensor::from_i64(&[norm.len()], norm)?)?;
        (t, Ty::S64, 8)
    };
    let n = require_u32_len(out_shape)?;
    let out = run.alloc(x.dtype, out_shape)?;
    if n == 0 {
        return Ok(vec![out]);
    }
    require_u32_len(&x.shape)?;
    let word = if on_device {
        Some(run.fault_word()?)
    } else {
        None
    };
    let (ty, size) = elem_ty(&x)?;
    let mut k = Kernel::new("gather");
    let op = k.param_ptr("out");
    let xp = k.param_ptr("x");
    let ip = k.param_ptr("idx");
    let fp = k.param_ptr("fault");
    let n_r = k.param("n", Ty::U32);
    let i = thread_index(&mut k, n_r);
    let inn = k.rem(Ty::U32, i, inner as u32);
    let q = k.div(Ty::U32, i, inner as u32);
    let j = k.rem(Ty::U32, q, ni as u32);
    let o = k.div(Ty::U32, q, ni as u32);
    let ia = k.addr(ip, j, isize);
    let raw = k.ld_nc(ity, ia, 0);
    let iv = if on_device {
        checked_index(&mut k, raw, ity, dim as u64, fp)
    } else {
        k.cvt(Ty::U32, Ty::S64, "", raw)
    };
    let row = k.fma(Ty::U32, o, dim as u32, iv);
    let src = k.fma(Ty::U32, row, inner as u32, inn);
    let sa = k.addr(xp, src, size);
    let v = k.ld_nc(ty, sa, 0);
    let oa = k.addr(op, i, size);
    store_bits(&mut k, ty, oa, v);
    let ptx = module(run.cc(), &[k]);
    run.launch(
        &ptx,
        "gather",
        (blocks(n as usize, 256), 1, 1),
        (256, 1, 1),
        0,
        &[
            out.arg_out(),
            x.arg_in(),
            itensor.arg_in(),
            word.as_ref().map_or(Arg::Out(0, 0), DevTensor::arg_out),
            Arg::U32(n),
        ],
    )?;
    if let Some(w) = word {
        let fault = Fault {
            node: ctx.node.name.clone(),
            op: ctx.node.op_type.clone(),
            shapes: format!("[{}{:?}, {}{:?}]", x.dtype, x.shape, itensor.dtype, ishape),
            msg: format!(
                "a Gather index is out of range for axis {axis} of size {dim} (checked on the device)"
            ),
        };
        run.check_fault(w, fault)?;
    }
    Ok(vec![out])
}
