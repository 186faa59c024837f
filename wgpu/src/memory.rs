//! Device memory for wgpu: size-classed buffer pools with a budget, the device layout of each dtype
//! (every element one or two 32-bit words), the conversions between host tensors and that layout,
//! and the per-session weight-residency cache.
//!
//! WGSL storage buffers hold 32-bit words, so elements narrower than a word (bool, int8, uint8,
//! int16, uint16, float16, bfloat16) are widened to one word on upload (sign- or zero-extended; the
//! 16-bit floats keep their bits in the low half) and narrowed on download. Kernels then read every
//! operand as `array<u32>` and convert exactly: an f16 value to f32 and back through integer code,
//! with ties to even (`super::wgsl`), which no adapter feature is needed for and which WGSL's own
//! conversions do not promise. 64-bit elements are two words, low first.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ndarray::{ArrayD, IxDyn};

use quorum_core::backend::DeviceError;
use quorum_core::counters::Counters;
use quorum_core::freelist::{Block, FreeLists, TakeError};
use quorum_core::tensor::{DType, Tensor};

/// The size class of a request (the same classes as CUDA's pool).
pub fn size_class(bytes: u64) -> u64 {
    quorum_core::freelist::size_class(bytes as usize) as u64
}

/// What a pool's buffers are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    /// Kernel operands and parameters: storage, copy source and destination.
    Storage,
    /// Downloads: copy destination, mapped for reading.
    Readback,
}

/// Free buffers by size class, with a budget on everything allocated (free or in use).
pub struct Pool {
    device: wgpu::Device,
    usage: Usage,
    budget: u64,
    /// The largest buffer the adapter binds or maps.
    max_buffer: u64,
    state: Mutex<FreeLists<Pooled>>,
}

/// A buffer as the free lists hold it (the lists' `Block` trait lives in `quorum-core`, the buffer
/// type in `wgpu`, so the pool names it through a type of its own).
struct Pooled(wgpu::Buffer);

impl Block for Pooled {
    fn bytes(&self) -> usize {
        self.0.size() as usize
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Pool {
    pub fn new(device: wgpu::Device, usage: Usage, budget: u64, max_buffer: u64) -> Pool {
        Pool {
            device,
            usage,
            budget,
            max_buffer,
            state: Mutex::new(FreeLists::default()),
        }
    }

    /// A buffer of at least `bytes`. The caller hands it back (`give`) only once no submitted or
    /// pending work uses it: a run keeps what it allocated until its work is done.
    /// A tensor larger than one adapter buffer is declined (the CPU runs its node), not an error.
    pub fn take(&self, bytes: u64, counters: &Counters) -> Result<wgpu::Buffer, DeviceError> {
        if bytes > self.max_buffer {
            return Err(DeviceError::Decline(format!(
                "a tensor of {bytes} bytes exceeds the adapter's buffer limit of {}",
                self.max_buffer
            )));
        }
        let class = size_class(bytes).min(self.max_buffer);
        let usage = match self.usage {
            Usage::Storage => {
                wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_SRC
                    | wgpu::BufferUsages::COPY_DST
            }
            Usage::Readback => wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        };
        let alloc = |class: usize| {
            let scope = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
            let b = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size: class as u64,
                usage,
                mapped_at_creation: false,
            });
            match pollster::block_on(scope.pop()) {
                Some(e) => Err(format!("allocating {class} bytes: {e}")),
                None => Ok(Pooled(b)),
            }
        };
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match st.take(class as usize, self.budget as usize, alloc, drop) {
            Ok((Pooled(b), hit)) => {
                let c = if hit {
                    &counters.pool_hits
                } else {
                    &counters.pool_misses
                };
                Counters::bump(c, 1);
                Ok(b)
            }
            Err(TakeError::Alloc(e)) => Err(DeviceError::Device(e)),
            Err(TakeError::OverBudget {
                asked,
                held,
                budget,
            }) => Err(DeviceError::Device(format!(
                "device memory over budget: {asked} bytes asked, {held} held, budget {budget} \
                 (QUORUM_WGPU_BUDGET)"
            ))),
        }
    }

    pub fn give(&self, b: wgpu::Buffer) {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .give(Pooled(b));
    }

    /// Bytes allocated from the device (in use or cached).
    pub fn held(&self) -> u64 {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).held() as u64
    }
}

/// A pooled buffer, handed back to its pool when the last handle goes. Runs hold every buffer they
/// allocated until their work is done, so a buffer never returns while work may still use it.
pub struct WBuf {
    buffer: Option<wgpu::Buffer>,
    pool: Arc<Pool>,
    /// A process-unique name (wgpu buffers have no address to tell them apart by).
    pub id: u64,
}

impl WBuf {
    pub fn new(buffer: wgpu::Buffer, pool: Arc<Pool>) -> WBuf {
        WBuf {
            buffer: Some(buffer),
            pool,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The buffer (present until the handle drops).
    pub fn buffer(&self) -> &wgpu::Buffer {
        self.buffer
            .as_ref()
            .expect("a WBuf holds its buffer until dropped")
    }

    pub fn size(&self) -> u64 {
        self.buffer.as_ref().map_or(0, |b| b.size())
    }
}

impl Drop for WBuf {
    fn drop(&mut self) {
        if let Some(b) = self.buffer.take() {
            self.pool.give(b);
        }
    }
}

/// A tensor in a wgpu buffer: row-major, contiguous, each element [`words`] 32-bit words. Views
/// (Reshape and friends) share the buffer.
#[derive(Clone)]
pub struct WTensor {
    pub buf: Arc<WBuf>,
    pub dtype: DType,
    pub shape: Vec<usize>,
}

impl WTensor {
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of its elements on the device.
    pub fn bytes(&self) -> u64 {
        (self.len() * words(self.dtype).unwrap_or(0) * 4) as u64
    }

    /// The same data under another shape (same element count, checked by the caller).
    pub fn view(&self, shape: Vec<usize>) -> WTensor {
        WTensor {
            buf: self.buf.clone(),
            dtype: self.dtype,
            shape,
        }
    }
}

/// 32-bit words per element on the device; `None` for types that stay on the host (strings, the
/// packed narrow formats).
pub fn words(d: DType) -> Option<usize> {
    match d {
        DType::F32 | DType::I32 | DType::U32 => Some(1),
        DType::F16 | DType::BF16 | DType::I8 | DType::U8 | DType::I16 | DType::U16 => Some(1),
        DType::Bool => Some(1),
        DType::F64 | DType::I64 | DType::U64 => Some(2),
        _ => None,
    }
}

/// The bytes of a host tensor whose device layout is its own memory (contiguous 32- and 64-bit
/// elements on a little-endian host), borrowed: an upload copies them once, with no encoding pass.
pub fn as_device_bytes(t: &Tensor) -> Option<&[u8]> {
    fn raw<T: bytemuck::Pod>(a: &ArrayD<T>) -> Option<&[u8]> {
        a.as_slice().map(bytemuck::cast_slice)
    }
    if cfg!(target_endian = "big") {
        return None;
    }
    match t {
        Tensor::F32(a) => raw(a),
        Tensor::I32(a) => raw(a),
        Tensor::U32(a) => raw(a),
        Tensor::F64(a) => raw(a),
        Tensor::I64(a) => raw(a),
        Tensor::U64(a) => raw(a),
        _ => None,
    }
}

/// A host tensor in the device layout (little-endian words), or `None` for types that stay on the
/// host.
pub fn encode(t: &Tensor) -> Option<Vec<u8>> {
    fn each<T: Copy>(a: &ArrayD<T>, f: impl Fn(T) -> u32) -> Vec<u8> {
        let mut out = Vec::with_capacity(a.len() * 4);
        for &v in a.iter() {
            out.extend_from_slice(&f(v).to_le_bytes());
        }
        out
    }
    fn each64<T: Copy>(a: &ArrayD<T>, f: impl Fn(T) -> u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(a.len() * 8);
        for &v in a.iter() {
            out.extend_from_slice(&f(v).to_le_bytes());
        }
        out
    }
    Some(match t {
        Tensor::F32(a) => each(a, f32::to_bits),
        Tensor::I32(a) => each(a, |v| v as u32),
        Tensor::U32(a) => each(a, |v| v),
        Tensor::F16(a) => each(a, |v| v.to_bits() as u32),
        Tensor::BF16(a) => each(a, |v| v.to_bits() as u32),
        Tensor::I8(a) => each(a, |v| v as i32 as u32),
        Tensor::U8(a) => each(a, |v| v as u32),
        Tensor::I16(a) => each(a, |v| v as i32 as u32),
        Tensor::U16(a) => each(a, |v| v as u32),
        Tensor::Bool(a) => each(a, |v| v as u32),
        Tensor::F64(a) => each64(a, f64::to_bits),
        Tensor::I64(a) => each64(a, |v| v as u64),
        Tensor::U64(a) => each64(a, |v| v),
        Tensor::Str(_) | Tensor::Packed(..) => return None,
    })
}

/// Rebuilds a host tensor from device words (`bytes` holds exactly the elements).
pub fn decode(dtype: DType, shape: &[usize], bytes: &[u8]) -> Option<Tensor> {
    let n: usize = shape.iter().product();
    let w = words(dtype)?;
    if bytes.len() != n * w * 4 {
        return None;
    }
    let u32s = || {
        bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    };
    let u64s = || {
        bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
    };
    fn arr<T>(shape: &[usize], v: Vec<T>) -> Option<ArrayD<T>> {
        ArrayD::from_shape_vec(IxDyn(shape), v).ok()
    }
    /// Elements whose device layout is their host layout: one copy of the bytes.
    fn same<T: bytemuck::Pod + Default>(
        shape: &[usize],
        n: usize,
        bytes: &[u8],
    ) -> Option<ArrayD<T>> {
        let mut v = vec![T::default(); n];
        bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(bytes);
        arr(shape, v)
    }
    if cfg!(target_endian = "little") {
        match dtype {
            DType::F32 => return Some(Tensor::F32(same(shape, n, bytes)?)),
            DType::I32 => return Some(Tensor::I32(same(shape, n, bytes)?)),
            DType::U32 => return Some(Tensor::U32(same(shape, n, bytes)?)),
            DType::F64 => return Some(Tensor::F64(same(shape, n, bytes)?)),
            DType::I64 => return Some(Tensor::I64(same(shape, n, bytes)?)),
            DType::U64 => return Some(Tensor::U64(same(shape, n, bytes)?)),
            _ => {}
        }
    }
    Some(match dtype {
        DType::F32 => Tensor::F32(arr(shape, u32s().map(f32::from_bits).collect())?),
        DType::I32 => Tensor::I32(arr(shape, u32s().map(|v| v as i32).collect())?),
        DType::U32 => Tensor::U32(arr(shape, u32s().collect())?),
        DType::F16 => Tensor::F16(arr(
            shape,
            u32s().map(|v| half::f16::from_bits(v as u16)).collect(),
        )?),
        DType::BF16 => Tensor::BF16(arr(
            shape,
            u32s().map(|v| half::bf16::from_bits(v as u16)).collect(),
        )?),
        DType::I8 => Tensor::I8(arr(shape, u32s().map(|v| v as i8).collect())?),
        DType::U8 => Tensor::U8(arr(shape, u32s().map(|v| v as u8).collect())?),
        DType::I16 => Tensor::I16(arr(shape, u32s().map(|v| v as i16).collect())?),
        DType::U16 => Tensor::U16(arr(shape, u32s().map(|v| v as u16).collect())?),
        DType::Bool => Tensor::Bool(arr(shape, u32s().map(|v| v != 0).collect())?),
        DType::F64 => Tensor::F64(arr(shape, u64s().map(f64::from_bits).collect())?),
        DType::I64 => Tensor::I64(arr(shape, u64s().map(|v| v as i64).collect())?),
        DType::U64 => Tensor::U64(arr(shape, u64s().collect())?),
        _ => return None,
    })
}

/// The per-session cache of resident weights (`quorum_core::weights`).
pub type WeightCache = quorum_core::weights::WeightCache<WTensor>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_device_dtype_round_trips_through_the_word_layout() {
        let ts = [
            Tensor::from_f32(&[2, 2], vec![1.5, -0.0, f32::NAN, 3e-40]).unwrap(),
            Tensor::from_i64(&[3], vec![i64::MIN, -1, 1 << 40]).unwrap(),
            Tensor::I8(ArrayD::from_shape_vec(IxDyn(&[3]), vec![-128i8, -1, 127]).unwrap()),
            Tensor::U16(ArrayD::from_shape_vec(IxDyn(&[2]), vec![65535u16, 7]).unwrap()),
            Tensor::F16(
                ArrayD::from_shape_vec(
                    IxDyn(&[2]),
                    vec![half::f16::from_f32(-2.5), half::f16::NAN],
                )
                .unwrap(),
            ),
            Tensor::Bool(ArrayD::from_shape_vec(IxDyn(&[3]), vec![true, false, true]).unwrap()),
        ];
        for t in ts {
            let b = encode(&t).unwrap();
            assert_eq!(b.len(), t.len() * words(t.dtype()).unwrap() * 4);
            let back = decode(t.dtype(), t.shape(), &b).unwrap();
            assert_eq!(format!("{back:?}"), format!("{t:?}"), "{}", t.dtype());
        }
        // Sign extension of narrow signed types: -1 as int8 is the word 0xFFFFFFFF.
        let t = Tensor::I8(ArrayD::from_shape_vec(IxDyn(&[1]), vec![-1i8]).unwrap());
        assert_eq!(encode(&t).unwrap(), vec![0xFF; 4]);
        // A broken length is refused, not misread.
        assert!(decode(DType::F32, &[2], &[0; 7]).is_none());
    }

    /// The borrowed fast path gives exactly the words the encoder makes, and a tensor that is not
    /// laid out contiguously (a transposed view) is not borrowed: its bytes would be in memory order,
    /// not the logical order the device layout is.
    #[test]
    fn borrowed_bytes_are_the_encoded_words() {
        let ts = [
            Tensor::from_f32(&[2, 2], vec![1.5, -0.0, f32::NAN, 3e-40]).unwrap(),
            Tensor::from_i64(&[3], vec![i64::MIN, -1, 1 << 40]).unwrap(),
            Tensor::I32(ArrayD::from_shape_vec(IxDyn(&[2]), vec![-7, i32::MAX]).unwrap()),
        ];
        for t in &ts {
            assert_eq!(as_device_bytes(t).unwrap(), &encode(t).unwrap()[..]);
            let back = decode(t.dtype(), t.shape(), as_device_bytes(t).unwrap()).unwrap();
            assert_eq!(format!("{back:?}"), format!("{t:?}"));
        }
        let a =
            ArrayD::from_shape_vec(IxDyn(&[2, 3]), vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        let t = Tensor::F32(a.reversed_axes());
        assert!(as_device_bytes(&t).is_none());
        let words: Vec<f32> = bytemuck::cast_slice(&encode(&t).unwrap()).to_vec();
        assert_eq!(words, vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        let f16 = ArrayD::from_shape_vec(IxDyn(&[1]), vec![half::f16::ONE]).unwrap();
        assert!(as_device_bytes(&Tensor::F16(f16)).is_none());
    }

    #[test]
    fn size_classes_cover_the_request() {
        for b in [0u64, 1, 256, 257, 4097, (64 << 20) + 1] {
            let c = size_class(b);
            assert!(c >= b && c >= 256, "{b} -> {c}");
        }
    }
}
