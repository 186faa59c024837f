//! Device memory: a size-classed buffer pool with a budget, pinned staging buffers, the byte views of
//! host tensors, and the per-session weight-residency cache (`quorum_core::weights`, one implementation
//! for every accelerator; the free lists are `quorum_core::freelist`'s, shared with wgpu).
//!
//! No buffer returns to the shared pool while a stream may still use it: a run's buffers go back
//! only after all its streams have synchronised; a buffer freed mid-run is reused by that run's
//! later allocations only, and an allocation on another stream first waits for the events of its
//! readers (gathered over every handle of the buffer) and for the point where it was freed.
//! Buffers a run reads but did not allocate (resident weights) are held by the run until its
//! streams have finished (by its captured graph, for as long as the graph lives), and the weight
//! and module caches keep the first copy inserted, so a copy another run already launched with is
//! never dropped (`device-tests/tests/gpu/system.rs` shows the hold on a device of its own pool,
//! and that without it another run's poison is read).
use std::sync::{Arc, Mutex};

use ndarray::{ArrayD, IxDyn};

use super::driver::{Arg, Context, CudaError, DeviceMemory, PinnedMemory, Result};
pub use quorum_core::counters::{CounterSnapshot, Counters};
use quorum_core::freelist::{Block, FreeLists, TakeError};
use quorum_core::tensor::{DType, Tensor};

pub use quorum_core::freelist::size_class;

/// Free device blocks by size class, with a budget on everything allocated (free or in use).
pub struct Pool {
    ctx: Arc<Context>,
    budget: usize,
    state: Mutex<FreeLists<DeviceMemory>>,
}

impl Block for DeviceMemory {
    fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Pool {
    pub fn new(ctx: Arc<Context>, budget: usize) -> Pool {
        Pool {
            ctx,
            budget,
            state: Mutex::new(FreeLists::default()),
        }
    }

    /// A block of at least `bytes`. The caller must only hand a block back (`give`) once no stream
    /// still uses it; blocks freed in the middle of a run go to that run's own list instead.
    pub fn take(&self, bytes: usize, counters: &Counters) -> Result<DeviceMemory> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let alloc = |class| DeviceMemory::alloc(&self.ctx, class);
        match st.take(size_class(bytes), self.budget, alloc, drop) {
            Ok((m, hit)) => {
                let c = if hit {
                    &counters.pool_hits
                } else {
                    &counters.pool_misses
                };
                Counters::bump(c, 1);
                Ok(m)
            }
            Err(TakeError::Alloc(e)) => Err(e),
            Err(TakeError::OverBudget {
                asked,
                held,
                budget,
            }) => Err(CudaError::OverBudget {
                asked,
                held,
                budget,
            }),
        }
    }

    pub fn give(&self, m: DeviceMemory) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).give(m);
    }

    /// Bytes allocated from the device (in use or cached).
    /// The bytes it may hold (cached or in use).
    pub fn budget(&self) -> usize {
        self.budget
    }

    pub fn held(&self) -> usize {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).held()
    }
}

/// Pinned host buffers, reused across transfers.
pub struct StagingPool {
    ctx: Arc<Context>,
    free: Mutex<Vec<PinnedMemory>>,
}

impl StagingPool {
    pub fn new(ctx: Arc<Context>) -> StagingPool {
        StagingPool {
            ctx,
            free: Mutex::new(Vec::new()),
        }
    }

    pub fn take(&self, bytes: usize) -> Result<PinnedMemory> {
        let class = size_class(bytes);
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = free.iter().position(|p| p.bytes == class) {
            return Ok(free.swap_remove(i));
        }
        drop(free);
        PinnedMemory::alloc(&self.ctx, class)
    }

    pub fn give(&self, p: PinnedMemory) {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        // Keep a bounded cache: pinned memory is scarce.
        if free.len() < 16 {
            free.push(p);
        }
    }
}

/// Element size on the device; `None` for types that stay on the host (strings, packed formats).
pub fn device_elem_size(d: DType) -> Option<usize> {
    match d {
        DType::Str => None,
        d if d.is_narrow_float() => None,
        DType::F32 | DType::I32 | DType::U32 => Some(4),
        DType::F64 | DType::I64 | DType::U64 => Some(8),
        DType::F16 | DType::BF16 | DType::I16 | DType::U16 => Some(2),
        DType::I8 | DType::U8 | DType::Bool => Some(1),
        _ => None,
    }
}

pub use quorum_core::tensor::tensor_bytes;

/// The bytes of one piece of a large upload (`protocol::Driver::upload_piece`): large enough that
/// a copy runs at the bus's speed, small enough that staging the first delays little.
pub const UPLOAD_PIECE: usize = 8 << 20;

/// A host copy's share per thread: a copy of fewer than four shares is one memcpy on the caller's
/// thread.
const COPY_SHARE: usize = 512 << 10;

/// Whether large outputs are rebuilt by several threads and large uploads go in pieces that overlap
/// the staging of the next (`QUORUM_CUDA_PIPELINE=off`: an output rebuilt on the caller's thread
/// and an upload staged whole before its copy, as before, for measuring the difference side by
/// side). Read once.
pub fn pipelined() -> bool {
    !matches!(host_path(), HostPath::Whole)
}

/// The host side of large transfers (`QUORUM_CUDA_PIPELINE`): `off` is [`HostPath::Whole`],
/// `small-pages` [`HostPath::Pieces`], anything else [`HostPath::HugePages`] (call 16 on an H100,
/// a Relu over 256 MiB host to host: 161.5 ms whole, 40.2 in pieces, 33.5 with huge pages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostPath {
    /// Uploads staged whole, outputs rebuilt on the caller's thread (the path before pieces).
    Whole,
    /// Uploads in pieces, outputs rebuilt by several threads.
    Pieces,
    /// [`HostPath::Pieces`], with a large output's fresh memory advised to the kernel as huge
    /// pages first (Linux), so that it faults 2 MiB at a time instead of 4 KiB.
    HugePages,
}

pub fn host_path() -> HostPath {
    static PATH: std::sync::OnceLock<HostPath> = std::sync::OnceLock::new();
    *PATH.get_or_init(|| match std::env::var("QUORUM_CUDA_PIPELINE").as_deref() {
        Ok("off") => HostPath::Whole,
        Ok("small-pages") => HostPath::Pieces,
        _ => HostPath::HugePages,
    })
}

/// Asks the kernel for huge pages over the 2 MiB-aligned part of `[ptr, ptr + len)` (fresh, not
/// yet touched memory); a refusal changes nothing but the speed, so it is ignored.
fn advise_huge_pages(ptr: *mut u8, len: usize) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let start = (ptr as usize).next_multiple_of(HUGE);
        let end = (ptr as usize + len) / HUGE * HUGE;
        if end > start {
            // SAFETY: the range lies within the caller's live allocation; MADV_HUGEPAGE only
            // changes how its pages are backed, never their contents.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, len);
}

/// Copies `src` into `dst` (equal lengths, possibly uninitialised memory): a large copy (a batch of
/// images) is split across the threads, since one core's memcpy (into fresh memory, its page
/// faults) is slower than the bus on either side of it.
fn copy_into(dst: &mut [std::mem::MaybeUninit<u8>], src: &[u8], split: bool) {
    assert_eq!(dst.len(), src.len(), "a host copy between unequal ranges");
    let one = |d: &mut [std::mem::MaybeUninit<u8>], s: &[u8]| {
        // SAFETY: `d` and `s` are distinct live ranges of `s.len()` bytes (checked above, and
        // split alike below); a `MaybeUninit<u8>` has `u8`'s layout.
        unsafe { std::ptr::copy_nonoverlapping(s.as_ptr(), d.as_mut_ptr() as *mut u8, s.len()) }
    };
    if src.len() < 4 * COPY_SHARE || !split {
        one(dst, src);
        return;
    }
    use rayon::prelude::*;
    dst.par_chunks_mut(COPY_SHARE)
        .zip(src.par_chunks(COPY_SHARE))
        .for_each(|(d, s)| one(d, s));
}

/// Copies a host tensor's bytes into a pinned staging buffer (split across threads when large).
pub fn stage(dst: &mut [u8], src: &[u8]) {
    // SAFETY: only initialised bytes are written through the view, so `dst` stays initialised.
    let dst = unsafe {
        std::slice::from_raw_parts_mut(
            dst.as_mut_ptr() as *mut std::mem::MaybeUninit<u8>,
            dst.len(),
        )
    };
    copy_into(dst, src, true);
}

/// Rebuilds a host tensor from device bytes (`bytes.len()` = elements × element size).
pub fn tensor_from_bytes(dtype: DType, shape: &[usize], bytes: &[u8]) -> Option<Tensor> {
    fn arr<T: Copy>(shape: &[usize], bytes: &[u8]) -> Option<ArrayD<T>> {
        let n: usize = shape.iter().product();
        if bytes.len() != n * std::mem::size_of::<T>() {
            return None;
        }
        // One pass over the bytes (no zeroing first): an output comes back on every run. A large
        // one is written by several threads, which also share the page faults of its fresh memory.
        // Values of f32's layout take the storage of a dead value from the session's arena where
        // the caller entered one (an eager run's outputs: the storage of the run's own inputs,
        // freed after their upload, with its pages already mapped).
        let mut v: Vec<T> = if pipelined() {
            quorum_core::arena::vec(n)
        } else {
            Vec::with_capacity(n)
        };
        if bytes.len() >= 4 * UPLOAD_PIECE && host_path() == HostPath::HugePages {
            advise_huge_pages(v.as_mut_ptr() as *mut u8, bytes.len());
        }
        let spare = v.spare_capacity_mut();
        // SAFETY: the spare capacity is `n` elements of `T`, so `bytes.len()` bytes, viewed as
        // possibly uninitialised bytes; nothing reads them before they are written.
        let spare = unsafe {
            std::slice::from_raw_parts_mut(
                spare.as_mut_ptr() as *mut std::mem::MaybeUninit<u8>,
                bytes.len(),
            )
        };
        copy_into(spare, bytes, pipelined());
        // SAFETY: every `T` here is plain old data, so any bytes are a valid value, and all `n`
        // elements were written above.
        unsafe { v.set_len(n) };
        ArrayD::from_shape_vec(IxDyn(shape), v).ok()
    }
    Some(match dtype {
        DType::F32 => Tensor::F32(arr(shape, bytes)?),
        DType::F64 => Tensor::F64(arr(shape, bytes)?),
        DType::F16 => Tensor::F16(arr(shape, bytes)?),
        DType::BF16 => Tensor::BF16(arr(shape, bytes)?),
        DType::I8 => Tensor::I8(arr(shape, bytes)?),
        DType::I16 => Tensor::I16(arr(shape, bytes)?),
        DType::I32 => Tensor::I32(arr(shape, bytes)?),
        DType::I64 => Tensor::I64(arr(shape, bytes)?),
        DType::U8 => Tensor::U8(arr(shape, bytes)?),
        DType::U16 => Tensor::U16(arr(shape, bytes)?),
        DType::U32 => Tensor::U32(arr(shape, bytes)?),
        DType::U64 => Tensor::U64(arr(shape, bytes)?),
        DType::Bool => Tensor::Bool(arr::<u8>(shape, bytes)?.mapv(|b| b != 0)),
        _ => return None,
    })
}

/// A device buffer handed back to its pool on drop. Drops happen only when no stream still uses the
/// buffer: values freed in the middle of a run are parked in that run until its stream has finished.
pub struct DevBuf {
    mem: Option<DeviceMemory>,
    pool: Arc<Pool>,
}

impl DevBuf {
    pub fn new(mem: DeviceMemory, pool: Arc<Pool>) -> DevBuf {
        DevBuf {
            mem: Some(mem),
            pool,
        }
    }

    pub fn ptr(&self) -> u64 {
        self.mem.as_ref().map_or(0, |m| m.ptr)
    }

    pub fn bytes(&self) -> usize {
        self.mem.as_ref().map_or(0, |m| m.bytes)
    }

    /// Whether the memory came from `pool` (the device whose pool it is).
    pub fn of_pool(&self, pool: &Arc<Pool>) -> bool {
        Arc::ptr_eq(&self.pool, pool)
    }

    /// Takes the memory out (for reuse within the same stream).
    pub fn into_memory(mut self) -> Option<DeviceMemory> {
        self.mem.take()
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        if let Some(m) = self.mem.take() {
            self.pool.give(m);
        }
    }
}

/// A tensor in device memory: row-major, contiguous. Views (Reshape and friends) share the buffer.
#[derive(Clone)]
pub struct DevTensor {
    pub buf: Arc<DevBuf>,
    pub dtype: DType,
    pub shape: Vec<usize>,
}

impl DevTensor {
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn ptr(&self) -> u64 {
        self.buf.ptr()
    }

    pub fn bytes(&self) -> usize {
        self.len() * device_elem_size(self.dtype).unwrap_or(0)
    }

    /// The address just past its elements.
    pub fn end(&self) -> u64 {
        self.ptr() + self.bytes() as u64
    }

    /// This tensor as a kernel argument the kernel only reads (its elements' bytes).
    pub fn arg_in(&self) -> Arg {
        Arg::In(self.ptr(), self.bytes())
    }

    /// This tensor as a kernel argument the kernel writes (its elements' bytes).
    pub fn arg_out(&self) -> Arg {
        Arg::Out(self.ptr(), self.bytes())
    }

    /// An optional input: absent, a null pointer that declares nothing.
    pub fn arg_in_opt(t: Option<&DevTensor>) -> Arg {
        t.map_or(Arg::In(0, 0), DevTensor::arg_in)
    }

    /// The same data under another shape (same element count, checked by the caller).
    pub fn view(&self, shape: Vec<usize>) -> DevTensor {
        DevTensor {
            buf: self.buf.clone(),
            dtype: self.dtype,
            shape,
        }
    }
}

/// The per-session cache of resident weights (`quorum_core::weights`).
pub type WeightCache = quorum_core::weights::WeightCache<DevTensor>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    #[test]
    fn size_classes_cover_the_request() {
        for b in [
            0usize,
            1,
            255,
            256,
            257,
            4096,
            4097,
            (64 << 20) - 1,
            64 << 20,
            (64 << 20) + 1,
        ] {
            let c = size_class(b);
            assert!(c >= b && c >= 256, "{b} -> {c}");
        }
        assert_eq!(size_class(1000), 1024);
        assert_eq!(size_class((64 << 20) + 1), (64 << 20) + (2 << 20));
    }

    #[test]
    fn tensor_bytes_round_trip() {
        let t = Tensor::from_f32(&[2, 3], vec![1.5, -2.0, 3.25, 0.1, 7.0, -0.0]).unwrap();
        let b = tensor_bytes(&t).unwrap();
        assert_eq!(b.len(), 24);
        assert_eq!(tensor_from_bytes(DType::F32, &[2, 3], &b).unwrap(), t);
        let t = Tensor::Bool(ArrayD::from_shape_vec(IxDyn(&[3]), vec![true, false, true]).unwrap());
        let b = tensor_bytes(&t).unwrap();
        assert_eq!(*b, [1, 0, 1]);
        assert_eq!(tensor_from_bytes(DType::Bool, &[3], &b).unwrap(), t);
        assert!(tensor_from_bytes(DType::F32, &[2], &[0; 7]).is_none());
    }

    #[test]
    fn tensor_bytes_borrow_contiguous_arrays_and_gather_others() {
        let a = ArrayD::from_shape_vec(IxDyn(&[2, 3]), vec![1i32, 2, 3, 4, 5, 6]).unwrap();
        let t = Tensor::I32(a.clone());
        assert!(matches!(tensor_bytes(&t), Some(Cow::Borrowed(_))));
        // A transposed view: the bytes come in logical (row-major) order, gathered.
        let tt = Tensor::I32(a.reversed_axes());
        let b = tensor_bytes(&tt).unwrap();
        assert!(matches!(b, Cow::Owned(_)));
        let back = tensor_from_bytes(DType::I32, &[3, 2], &b).unwrap();
        assert_eq!(back.to_i64_vec().unwrap(), vec![1, 4, 2, 5, 3, 6]);
    }

    #[test]
    fn staging_copies_every_byte() {
        // Below and above the size where several threads share the copy, with a ragged last chunk.
        for n in [0usize, 17, (2 << 20) - 3, (2 << 20) + 1, (5 << 20) + 12_345] {
            let src: Vec<u8> = (0..n).map(|i| (i * 31 % 251) as u8 ^ 0x5a).collect();
            let mut dst = vec![0xffu8; n];
            stage(&mut dst, &src);
            assert!(dst == src, "{n} bytes");
        }
    }

    #[test]
    fn large_outputs_are_rebuilt_whole() {
        // Above the size where several threads share the copy into the fresh output, with a
        // ragged last share: every element comes back, in place.
        let n = (3 << 20) / 4 + 77;
        let v: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 1e3).collect();
        let t = Tensor::from_f32(&[n], v).unwrap();
        let b = tensor_bytes(&t).unwrap();
        assert_eq!(tensor_from_bytes(DType::F32, &[n], &b).unwrap(), t);
        let short = &b[..b.len() - 4];
        assert!(tensor_from_bytes(DType::F32, &[n], short).is_none());
    }
}
