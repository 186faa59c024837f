#![allow(non_snake_case)] // the driver's entry points keep their C names
//! The CUDA driver API, opened at run time from `libcuda.so.1` with libloading: no CUDA SDK at build
//! time. Every call is checked and a failure carries the CUDA error name (a failed PTX JIT, the
//! JIT's error log too). Handles are RAII and hold an
//! `Arc` of the context they belong to, so no stream, event, module or allocation can outlive it.
//!
//! # Safety of the calls
//! Every `unsafe` block below calls through a field of [`Api`], and leans on the same three facts,
//! which the blocks' `SAFETY` comments call the driver invariants:
//! 1. Each field was resolved from `libcuda.so.1` by its exported name and typed with that entry
//!    point's prototype in `cuda.h` (the table given to `api!`: versioned names such as `_v2` where
//!    the header maps the plain name to them, `CUresult` and the enums as `c_int`, handles as
//!    pointers, `CUdeviceptr` as `u64`). The `Library` lives in the same `Api`, which every caller
//!    reaches through an `Arc<Api>` it holds, so the code behind a pointer stays mapped while it
//!    is called.
//! 2. Every handle passed in (context, stream, event, module, function, graph) was created by the
//!    driver and is owned by the RAII value that passes it; that value is alive for the call (it
//!    is borrowed), and only its `Drop` destroys the handle, exactly once. Each handle holds an
//!    `Arc<Context>`, so its context is retained until after the handle is gone.
//! 3. Host pointers handed to the driver (out-parameters, buffers, strings) point at live Rust
//!    values of the type and length the prototype reads or writes, borrowed for the whole call;
//!    the driver keeps none of them after returning except where a block says so.
use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::sync::Arc;

use libloading::Library;

pub type CuResult = c_int;
pub type CuDevice = c_int;
pub type CuContext = *mut c_void;
pub type CuModule = *mut c_void;
pub type CuFunction = *mut c_void;
pub type CuStream = *mut c_void;
pub type CuEvent = *mut c_void;
pub type CuDevicePtr = u64;
pub type CuGraph = *mut c_void;
pub type CuGraphExec = *mut c_void;

const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: c_int = 16;
const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: c_int = 75;
const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: c_int = 76;
const CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: c_int = 97;
const CU_JIT_INFO_LOG_BUFFER: c_int = 3;
const CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES: c_int = 4;
const CU_JIT_ERROR_LOG_BUFFER: c_int = 5;
const CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: c_int = 6;
const CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: c_int = 8;
const CU_STREAM_NON_BLOCKING: c_uint = 1;
const CU_EVENT_DEFAULT: c_uint = 0;
const CU_EVENT_DISABLE_TIMING: c_uint = 2;
/// `CU_STREAM_CAPTURE_MODE_RELAXED`: other threads may use the driver while a stream captures.
const CU_STREAM_CAPTURE_MODE_RELAXED: c_int = 2;

/// A failed driver call: which call, the CUDA error name, and anything the driver logged.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CudaError {
    #[error(
        "libcuda.so.1 could not be opened ({0}); install the NVIDIA driver or run on a machine with an NVIDIA GPU"
    )]
    NoLibrary(String),
    #[error("libcuda.so.1 lacks {0} (driver too old?)")]
    MissingSymbol(&'static str),
    #[error("{call} failed: {name} ({code})")]
    Call {
        call: &'static str,
        name: String,
        code: i32,
    },
    #[error("PTX JIT failed: {name}\n{log}")]
    Jit { name: String, log: String },
    #[error("no CUDA device (cuDeviceGetCount returned 0)")]
    NoDevice,
    #[error(
        "device memory budget of {budget} bytes exceeded (asked for {asked} more, {held} held)"
    )]
    OverBudget {
        asked: usize,
        held: usize,
        budget: usize,
    },
}

pub type Result<T> = std::result::Result<T, CudaError>;

macro_rules! api {
    ($($name:ident : fn($($arg:ty),*) -> CuResult;)*) => {
        /// The driver entry points Quorum uses, resolved once.
        #[allow(non_snake_case)]
        pub struct Api {
            _lib: Library,
            $(pub $name: unsafe extern "C" fn($($arg),*) -> CuResult,)*
        }

        impl Api {
            fn load(lib: Library) -> Result<Api> {
                // SAFETY: `Library::get` is unsafe because the caller asserts the symbol's type:
                // each name here is a libcuda entry point and the type given to it is that
                // entry point's prototype in `cuda.h` (the table below; driver invariant 1). The
                // copied-out function pointers outlive the `Symbol` borrows, which is sound only
                // because `lib` moves into the same `Api` and is unloaded no earlier than they
                // are dropped.
                unsafe {
                    $(let $name = *lib
                        .get::<unsafe extern "C" fn($($arg),*) -> CuResult>(
                            concat!(stringify!($name), "\0").as_bytes(),
                        )
                        .map_err(|_| CudaError::MissingSymbol(stringify!($name)))?;)*
                    Ok(Api { _lib: lib, $($name,)* })
                }
            }
        }
    };
}

api! {
    cuInit: fn(c_uint) -> CuResult;
    cuGetErrorName: fn(CuResult, *mut *const c_char) -> CuResult;
    cuDeviceGetCount: fn(*mut c_int) -> CuResult;
    cuDeviceGet: fn(*mut CuDevice, c_int) -> CuResult;
    cuDeviceGetName: fn(*mut c_char, c_int, CuDevice) -> CuResult;
    cuDeviceGetAttribute: fn(*mut c_int, c_int, CuDevice) -> CuResult;
    cuDeviceTotalMem_v2: fn(*mut usize, CuDevice) -> CuResult;
    cuDevicePrimaryCtxRetain: fn(*mut CuContext, CuDevice) -> CuResult;
    cuDevicePrimaryCtxRelease_v2: fn(CuDevice) -> CuResult;
    cuCtxSetCurrent: fn(CuContext) -> CuResult;
    cuCtxSynchronize: fn() -> CuResult;
    cuMemAlloc_v2: fn(*mut CuDevicePtr, usize) -> CuResult;
    cuMemFree_v2: fn(CuDevicePtr) -> CuResult;
    cuMemAllocHost_v2: fn(*mut *mut c_void, usize) -> CuResult;
    cuMemFreeHost: fn(*mut c_void) -> CuResult;
    cuMemHostRegister_v2: fn(*mut c_void, usize, c_uint) -> CuResult;
    cuMemHostUnregister: fn(*mut c_void) -> CuResult;
    cuMemcpyHtoDAsync_v2: fn(CuDevicePtr, *const c_void, usize, CuStream) -> CuResult;
    cuMemcpyDtoHAsync_v2: fn(*mut c_void, CuDevicePtr, usize, CuStream) -> CuResult;
    cuMemcpyDtoDAsync_v2: fn(CuDevicePtr, CuDevicePtr, usize, CuStream) -> CuResult;
    cuMemsetD32Async: fn(CuDevicePtr, c_uint, usize, CuStream) -> CuResult;
    cuStreamCreate: fn(*mut CuStream, c_uint) -> CuResult;
    cuStreamDestroy_v2: fn(CuStream) -> CuResult;
    cuStreamSynchronize: fn(CuStream) -> CuResult;
    cuStreamWaitEvent: fn(CuStream, CuEvent, c_uint) -> CuResult;
    cuEventCreate: fn(*mut CuEvent, c_uint) -> CuResult;
    cuEventDestroy_v2: fn(CuEvent) -> CuResult;
    cuEventRecord: fn(CuEvent, CuStream) -> CuResult;
    cuEventSynchronize: fn(CuEvent) -> CuResult;
    cuEventElapsedTime: fn(*mut f32, CuEvent, CuEvent) -> CuResult;
    cuModuleLoadDataEx: fn(*mut CuModule, *const c_void, c_uint, *mut c_int, *mut *mut c_void) -> CuResult;
    cuModuleUnload: fn(CuModule) -> CuResult;
    cuModuleGetFunction: fn(*mut CuFunction, CuModule, *const c_char) -> CuResult;
    cuFuncSetAttribute: fn(CuFunction, c_int, c_int) -> CuResult;
    cuLaunchKernel: fn(CuFunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CuStream, *mut *mut c_void, *mut *mut c_void) -> CuResult;
    cuStreamBeginCapture_v2: fn(CuStream, c_int) -> CuResult;
    cuStreamEndCapture: fn(CuStream, *mut CuGraph) -> CuResult;
    cuGraphInstantiateWithFlags: fn(*mut CuGraphExec, CuGraph, u64) -> CuResult;
    cuGraphLaunch: fn(CuGraphExec, CuStream) -> CuResult;
    cuGraphExecDestroy: fn(CuGraphExec) -> CuResult;
    cuGraphDestroy: fn(CuGraph) -> CuResult;
}

impl Api {
    /// Opens `libcuda.so.1` (or `QUORUM_LIBCUDA`, for tests that point at a missing file).
    pub fn open() -> Result<Arc<Api>> {
        let path = std::env::var("QUORUM_LIBCUDA").unwrap_or_else(|_| "libcuda.so.1".into());
        // SAFETY: loading runs the library's initialisers; libcuda's have no preconditions on the
        // loading process. `QUORUM_LIBCUDA` is a test hook that names a missing file or the real
        // driver; whoever sets it vouches for what it names.
        let lib =
            unsafe { Library::new(&path) }.map_err(|e| CudaError::NoLibrary(e.to_string()))?;
        let api = Api::load(lib)?;
        let api = Arc::new(api);
        // SAFETY: driver invariant 1; cuInit takes flags by value (0 is the only valid value) and
        // may be called any number of times from any thread.
        api.check("cuInit", unsafe { (api.cuInit)(0) })?;
        Ok(api)
    }

    /// The CUDA error name of a result code.
    pub fn error_name(&self, code: CuResult) -> String {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: driver invariant 1; `p` is a live local the call writes one pointer into, and
        // an unknown code makes it fail rather than write.
        let r = unsafe { (self.cuGetErrorName)(code, &mut p) };
        if r != 0 || p.is_null() {
            return format!("CUDA_ERROR_{code}");
        }
        // SAFETY: on success `p` points at a NUL-terminated string in the driver's static data,
        // valid while the library stays loaded (it does: `self` holds it); it is copied out here.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    pub fn check(&self, call: &'static str, code: CuResult) -> Result<()> {
        if code == 0 {
            Ok(())
        } else {
            Err(CudaError::Call {
                call,
                name: self.error_name(code),
                code,
            })
        }
    }
}

/// What the device is.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    pub ordinal: i32,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub multiprocessors: i32,
    pub max_shared_per_block: i32,
    pub total_memory: usize,
}

/// The retained primary context of one device. Everything else holds an `Arc<Context>`.
pub struct Context {
    pub api: Arc<Api>,
    raw: CuContext,
    device: CuDevice,
    pub info: DeviceInfo,
}

// SAFETY: a CUcontext is a process-wide handle, not tied to the thread that retained it: the
// driver API is thread-safe, and any thread may make the context current (`bind`, which every
// entry point that needs it calls first) and use it. Releasing it happens once, in `Drop`.
unsafe impl Send for Context {}
// SAFETY: `&Context` only reads the handle and makes driver calls, which the driver serialises
// internally; nothing in `Context` is mutated after construction.
unsafe impl Sync for Context {}

impl Context {
    /// Retains the primary context of device `ordinal`.
    pub fn new(ordinal: i32) -> Result<Arc<Context>> {
        let api = Api::open()?;
        let mut count = 0;
        // SAFETY: driver invariants 1 and 3: `count` is a live `c_int` the call writes.
        api.check("cuDeviceGetCount", unsafe {
            (api.cuDeviceGetCount)(&mut count)
        })?;
        if count <= ordinal {
            return Err(CudaError::NoDevice);
        }
        let mut device = 0;
        // SAFETY: driver invariants 1 and 3: `device` is a live `CUdevice` the call writes; an
        // ordinal out of range makes it fail, not write out of bounds.
        api.check("cuDeviceGet", unsafe {
            (api.cuDeviceGet)(&mut device, ordinal)
        })?;
        let mut name = [0 as c_char; 256];
        // SAFETY: driver invariants 1 and 3: the call writes at most 255 bytes (the length given)
        // into the 256-byte local buffer, so its last byte stays NUL.
        api.check("cuDeviceGetName", unsafe {
            (api.cuDeviceGetName)(name.as_mut_ptr(), 255, device)
        })?;
        let attr = |a: c_int| -> Result<i32> {
            let mut v = 0;
            // SAFETY: driver invariants 1 and 3: `v` is a live `c_int` the call writes; an
            // unknown attribute makes it fail.
            api.check("cuDeviceGetAttribute", unsafe {
                (api.cuDeviceGetAttribute)(&mut v, a, device)
            })?;
            Ok(v)
        };
        let mut total = 0usize;
        // SAFETY: driver invariants 1 and 3: `total` is a live `size_t` (`usize`) the `_v2`
        // entry point writes.
        api.check("cuDeviceTotalMem", unsafe {
            (api.cuDeviceTotalMem_v2)(&mut total, device)
        })?;
        let info = DeviceInfo {
            ordinal,
            // SAFETY: `name` is a live local buffer whose last byte is NUL (the call above wrote
            // at most 255 of its 256 bytes, all initialised to 0), so the scan stops inside it.
            name: unsafe { CStr::from_ptr(name.as_ptr()) }
                .to_string_lossy()
                .into_owned(),
            compute_capability: (
                attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
                attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
            ),
            multiprocessors: attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            max_shared_per_block: attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
            total_memory: total,
        };
        let mut raw = std::ptr::null_mut();
        // SAFETY: driver invariants 1 and 3: `raw` is a live `CUcontext` the call writes. The
        // retain is balanced by the one release in `Context`'s `Drop`.
        api.check("cuDevicePrimaryCtxRetain", unsafe {
            (api.cuDevicePrimaryCtxRetain)(&mut raw, device)
        })?;
        let ctx = Arc::new(Context {
            api,
            raw,
            device,
            info,
        });
        ctx.bind()?;
        Ok(ctx)
    }

    /// Makes this context current on the calling thread. Every entry point that touches the device
    /// calls it first, so a session built on one thread runs on any other.
    pub fn bind(&self) -> Result<()> {
        // SAFETY: driver invariants 1 and 2: `self.raw` is the retained primary context, alive
        // until `self` drops; making it current affects only the calling thread.
        self.api.check("cuCtxSetCurrent", unsafe {
            (self.api.cuCtxSetCurrent)(self.raw)
        })
    }

    pub fn check(&self, call: &'static str, code: CuResult) -> Result<()> {
        self.api.check(call, code)
    }

    pub fn synchronize(&self) -> Result<()> {
        self.bind()?;
        // SAFETY: driver invariant 1; no arguments, and the context it waits for was made current
        // on this thread just above.
        self.check("cuCtxSynchronize", unsafe { (self.api.cuCtxSynchronize)() })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: driver invariants 1 and 2. Every stream, event, module, graph and allocation
        // holds an `Arc<Context>`, so when this runs none is left; the context is made current,
        // drained, and released once, balancing the retain in `new`. Errors are ignored: there is
        // nothing left to do with them in a destructor.
        unsafe {
            (self.api.cuCtxSetCurrent)(self.raw);
            (self.api.cuCtxSynchronize)();
            (self.api.cuDevicePrimaryCtxRelease_v2)(self.device);
        }
    }
}

/// A device allocation of `bytes` bytes, freed on drop.
pub struct DeviceMemory {
    pub ctx: Arc<Context>,
    pub ptr: CuDevicePtr,
    pub bytes: usize,
}

// SAFETY: a device address is plain data valid in every thread of the process; freeing it (in
// `Drop`, once) makes its context current first, so the thread that does it does not matter.
unsafe impl Send for DeviceMemory {}
// SAFETY: `&DeviceMemory` gives only the address and size; no host memory is reachable through it.
unsafe impl Sync for DeviceMemory {}

impl DeviceMemory {
    pub fn alloc(ctx: &Arc<Context>, bytes: usize) -> Result<DeviceMemory> {
        ctx.bind()?;
        let mut ptr = 0;
        // SAFETY: driver invariants 1 and 3: `ptr` is a live `CUdeviceptr` the call writes; the
        // context is current (bound above). At least one byte is asked for, since a zero-byte
        // request fails.
        ctx.check("cuMemAlloc", unsafe {
            (ctx.api.cuMemAlloc_v2)(&mut ptr, bytes.max(1))
        })?;
        Ok(DeviceMemory {
            ctx: ctx.clone(),
            ptr,
            bytes,
        })
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        // SAFETY: driver invariants 1 and 2: `self.ptr` came from cuMemAlloc in `self.ctx`, which
        // is made current first, and is freed only here, once. (Queued work that still uses the
        // range is the pools' concern: device memory is outside Rust's memory, so a late kernel
        // cannot break a Rust reference.)
        unsafe {
            (self.ctx.api.cuCtxSetCurrent)(self.ctx.raw);
            (self.ctx.api.cuMemFree_v2)(self.ptr);
        }
    }
}

/// Page-locked host memory for transfers that run at full bus speed.
pub struct PinnedMemory {
    pub ctx: Arc<Context>,
    pub(crate) ptr: *mut u8,
    pub(crate) bytes: usize,
}

// SAFETY: the buffer is process memory owned by this value alone (like a `Box<[u8]>`); it is
// freed in `Drop`, which makes the context current first, so any thread may own and drop it.
unsafe impl Send for PinnedMemory {}
// SAFETY: through `&PinnedMemory` the bytes are only read (`as_slice`); writing needs `&mut`.
unsafe impl Sync for PinnedMemory {}

impl PinnedMemory {
    pub fn alloc(ctx: &Arc<Context>, bytes: usize) -> Result<PinnedMemory> {
        ctx.bind()?;
        let mut p = std::ptr::null_mut();
        // SAFETY: driver invariants 1 and 3: `p` is a live `void *` the call writes; the context
        // is current (bound above); at least one byte is asked for.
        ctx.check("cuMemAllocHost", unsafe {
            (ctx.api.cuMemAllocHost_v2)(&mut p, bytes.max(1))
        })?;
        Ok(PinnedMemory {
            ctx: ctx.clone(),
            ptr: p as *mut u8,
            bytes,
        })
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` is the start of the live allocation of `bytes.max(1)` bytes made in
        // `alloc` and owned by `self`, which the `&mut` borrow keeps alive and unshared; `u8`
        // needs no alignment. This relies on nobody having rewritten the public `ptr`/`bytes`
        // fields, and on no asynchronous copy still touching the buffer (callers synchronise the
        // stream first). cuMemAllocHost does not promise initialised bytes: callers write before
        // they read.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.bytes) }
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: as in `as_mut_slice`, for a shared borrow: the allocation is live and `bytes`
        // long, and no copy into it is still in flight when callers read it (they synchronise
        // the stream or event of the download first).
        unsafe { std::slice::from_raw_parts(self.ptr, self.bytes) }
    }
}

impl Drop for PinnedMemory {
    fn drop(&mut self) {
        // SAFETY: driver invariants 1 and 2: `self.ptr` came from cuMemAllocHost in `self.ctx`,
        // which is made current first; it is freed only here, once, and no slice of it can
        // outlive `self`.
        unsafe {
            (self.ctx.api.cuCtxSetCurrent)(self.ctx.raw);
            (self.ctx.api.cuMemFreeHost)(self.ptr as *mut c_void);
        }
    }
}

/// Host memory its owner allocated, page-locked in place (`cuMemHostRegister`) so that copies to
/// and from it run at the bus's speed without staging; unregistered when dropped.
pub struct HostRegistration {
    ctx: Arc<Context>,
    ptr: usize,
}

impl HostRegistration {
    /// Page-locks `[ptr, ptr + bytes)` (at least one byte). The driver refuses a range that is not
    /// mapped memory of the process; one freed while registered keeps its old pages locked until
    /// the registration drops (copies through it reach those pages, not a later allocation).
    pub fn new(ctx: &Arc<Context>, ptr: *mut u8, bytes: usize) -> Result<HostRegistration> {
        ctx.bind()?;
        // SAFETY: driver invariants 1 and 3 (the context is current); the call only reads the
        // address range's mapping (an unmapped one is an error code, not a fault); flags 0
        // (portable and mapped not asked for).
        ctx.check("cuMemHostRegister", unsafe {
            (ctx.api.cuMemHostRegister_v2)(ptr as *mut c_void, bytes.max(1), 0)
        })?;
        Ok(HostRegistration {
            ctx: ctx.clone(),
            ptr: ptr as usize,
        })
    }
}

impl Drop for HostRegistration {
    fn drop(&mut self) {
        // SAFETY: driver invariant 1; `ptr` was registered in `self.ctx` by `new` and is
        // unregistered only here, once; the context is made current first.
        unsafe {
            (self.ctx.api.cuCtxSetCurrent)(self.ctx.raw);
            (self.ctx.api.cuMemHostUnregister)(self.ptr as *mut c_void);
        }
    }
}

/// A non-blocking stream.
pub struct Stream {
    pub ctx: Arc<Context>,
    pub(crate) raw: CuStream,
}

// SAFETY: a CUstream belongs to its context, not to a thread: any thread may enqueue on it or
// destroy it (`Drop` makes the context current first), and the `Arc<Context>` moves with it.
unsafe impl Send for Stream {}
// SAFETY: the driver API is thread-safe: enqueuing on one stream from several threads at once is
// allowed (the driver orders the calls), and `&Stream` exposes nothing else.
unsafe impl Sync for Stream {}

impl Stream {
    pub fn new(ctx: &Arc<Context>) -> Result<Stream> {
        ctx.bind()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: driver invariants 1 and 3: `raw` is a live `CUstream` the call writes; the
        // context is current (bound above), so the stream is created in it.
        ctx.check("cuStreamCreate", unsafe {
            (ctx.api.cuStreamCreate)(&mut raw, CU_STREAM_NON_BLOCKING)
        })?;
        Ok(Stream {
            ctx: ctx.clone(),
            raw,
        })
    }

    pub fn synchronize(&self) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: driver invariants 1 and 2: `self.raw` is this live stream.
        self.ctx.check("cuStreamSynchronize", unsafe {
            (self.ctx.api.cuStreamSynchronize)(self.raw)
        })
    }

    pub fn wait(&self, event: &Event) -> Result<()> {
        // SAFETY: driver invariants 1 and 2: both handles are live (borrowed) for the call, and
        // the driver keeps no reference to the event once the wait is enqueued. Flags must be 0.
        self.ctx.check("cuStreamWaitEvent", unsafe {
            (self.ctx.api.cuStreamWaitEvent)(self.raw, event.raw, 0)
        })
    }

    /// Copies `src` to device memory at `dst` (asynchronous with respect to the host only when `src`
    /// is pinned; the caller keeps `src` alive until the stream has passed this point).
    pub fn upload(&self, dst: CuDevicePtr, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        // SAFETY: driver invariants 1 and 2; `src` is live and `src.len()` bytes long during the
        // call. From pageable memory the driver has taken its copy of the bytes before it
        // returns; from pinned memory it reads them later, on the stream, and then the caller
        // must keep the buffer alive and unwritten until the stream has passed this copy (the
        // doc comment's contract, which the signature cannot enforce). `dst` is trusted to be a
        // device range of `src.len()` bytes.
        self.ctx.check("cuMemcpyHtoDAsync", unsafe {
            (self.ctx.api.cuMemcpyHtoDAsync_v2)(
                dst,
                src.as_ptr() as *const c_void,
                src.len(),
                self.raw,
            )
        })
    }

    pub fn download(&self, dst: &mut [u8], src: CuDevicePtr) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        // SAFETY: driver invariants 1 and 2; `dst` is live, exclusively borrowed and `dst.len()`
        // bytes long during the call, and the driver writes only those bytes. Into pageable
        // memory the copy has finished when the call returns; into pinned memory it lands later,
        // after the borrow has ended, so callers must not read, reuse or free the buffer until
        // they have synchronised the stream or an event recorded after this copy (every caller
        // in `cuda/` does; the signature cannot enforce it). `src` is trusted to be a device
        // range of `dst.len()` bytes.
        self.ctx.check("cuMemcpyDtoHAsync", unsafe {
            (self.ctx.api.cuMemcpyDtoHAsync_v2)(
                dst.as_mut_ptr() as *mut c_void,
                src,
                dst.len(),
                self.raw,
            )
        })
    }

    pub fn copy(&self, dst: CuDevicePtr, src: CuDevicePtr, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: driver invariants 1 and 2; only device memory is read and written, by value
        // addresses the caller vouches for (a bad range faults the stream, not Rust memory).
        self.ctx.check("cuMemcpyDtoDAsync", unsafe {
            (self.ctx.api.cuMemcpyDtoDAsync_v2)(dst, src, bytes, self.raw)
        })
    }

    /// Fills `words` 32-bit words at `dst` with `value` (used to poison outputs in tests).
    pub fn fill32(&self, dst: CuDevicePtr, value: u32, words: usize) -> Result<()> {
        if words == 0 {
            return Ok(());
        }
        // SAFETY: driver invariants 1 and 2; no host pointer is passed: `words` 32-bit words of
        // device memory at `dst` (the caller's range) are set on the stream.
        self.ctx.check("cuMemsetD32Async", unsafe {
            (self.ctx.api.cuMemsetD32Async)(dst, value, words, self.raw)
        })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: driver invariants 1 and 2: the context is made current, the stream drained
        // (so no copy it still owes can touch host memory after this), and destroyed once.
        unsafe {
            (self.ctx.api.cuCtxSetCurrent)(self.ctx.raw);
            (self.ctx.api.cuStreamSynchronize)(self.raw);
            (self.ctx.api.cuStreamDestroy_v2)(self.raw);
        }
    }
}

/// An event; `timing` events can measure elapsed device time.
pub struct Event {
    pub ctx: Arc<Context>,
    pub(crate) raw: CuEvent,
}

// SAFETY: a CUevent belongs to its context, not to a thread; `Drop` makes the context current
// before destroying it, so it may be dropped anywhere.
unsafe impl Send for Event {}
// SAFETY: recording, waiting on and querying one event from several threads are thread-safe
// driver calls; `&Event` exposes nothing else.
unsafe impl Sync for Event {}

impl Event {
    pub fn new(ctx: &Arc<Context>, timing: bool) -> Result<Event> {
        ctx.bind()?;
        let mut raw = std::ptr::null_mut();
        let flags = if timing {
            CU_EVENT_DEFAULT
        } else {
            CU_EVENT_DISABLE_TIMING
        };
        // SAFETY: driver invariants 1 and 3: `raw` is a live `CUevent` the call writes; the
        // context is current (bound above).
        ctx.check("cuEventCreate", unsafe {
            (ctx.api.cuEventCreate)(&mut raw, flags)
        })?;
        Ok(Event {
            ctx: ctx.clone(),
            raw,
        })
    }

    pub fn record(&self, stream: &Stream) -> Result<()> {
        // SAFETY: driver invariants 1 and 2: the event and the stream are live (borrowed) for the
        // call, and recording keeps no host pointer.
        self.ctx.check("cuEventRecord", unsafe {
            (self.ctx.api.cuEventRecord)(self.raw, stream.raw)
        })
    }

    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: driver invariants 1 and 2: `self.raw` is this live event.
        self.ctx.check("cuEventSynchronize", unsafe {
            (self.ctx.api.cuEventSynchronize)(self.raw)
        })
    }

    /// Milliseconds from `start` to `self` (both recorded and complete).
    pub fn elapsed_since(&self, start: &Event) -> Result<f32> {
        let mut ms = 0f32;
        // SAFETY: driver invariants 1–3: both events are live (borrowed) and `ms` is a live `f32`
        // the call writes; events without timing make it fail, not misbehave.
        self.ctx.check("cuEventElapsedTime", unsafe {
            (self.ctx.api.cuEventElapsedTime)(&mut ms, start.raw, self.raw)
        })?;
        Ok(ms)
    }
}

impl Stream {
    /// Starts capturing this stream's work into a graph (relaxed mode: other threads may keep using
    /// the driver). Work other streams do after waiting on an event of this one joins the capture.
    pub fn begin_capture(&self) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: driver invariants 1 and 2: `self.raw` is this live stream; the mode is a valid
        // `CUstreamCaptureMode` value passed by value.
        self.ctx.check("cuStreamBeginCapture", unsafe {
            (self.ctx.api.cuStreamBeginCapture_v2)(self.raw, CU_STREAM_CAPTURE_MODE_RELAXED)
        })
    }

    /// Ends the capture begun on this stream and instantiates what it captured.
    pub fn end_capture(&self) -> Result<Graph> {
        let mut graph = std::ptr::null_mut();
        // SAFETY: driver invariants 1–3: `self.raw` is this live stream and `graph` a live
        // `CUgraph` the call writes; the graph it returns is ours to destroy.
        self.ctx.check("cuStreamEndCapture", unsafe {
            (self.ctx.api.cuStreamEndCapture)(self.raw, &mut graph)
        })?;
        let mut exec = std::ptr::null_mut();
        // SAFETY: driver invariants 1 and 3: `graph` was just returned by the capture and is used
        // by this thread alone; `exec` is a live `CUgraphExec` the call writes.
        let r = self.ctx.check("cuGraphInstantiateWithFlags", unsafe {
            (self.ctx.api.cuGraphInstantiateWithFlags)(&mut exec, graph, 0)
        });
        if let Err(e) = r {
            // SAFETY: driver invariant 1: `graph` is live, owned here, and destroyed once (no
            // `Graph` value was made to destroy it again).
            unsafe {
                (self.ctx.api.cuGraphDestroy)(graph);
            }
            return Err(e);
        }
        Ok(Graph {
            ctx: self.ctx.clone(),
            graph,
            exec,
        })
    }
}

/// A captured and instantiated CUDA graph.
pub struct Graph {
    pub ctx: Arc<Context>,
    graph: CuGraph,
    exec: CuGraphExec,
}

// SAFETY: the graph and its executable belong to the context, not to a thread; `Drop` makes the
// context current before destroying them, so the value may move and drop anywhere.
unsafe impl Send for Graph {}
// SAFETY: `&Graph` only launches. The driver does not synchronise graph objects internally (calls
// on one graph must be serialised by the caller), so this relies on the callers: `Run::end_capture`
// launches the graph it has just made and not yet shared, and `cuda::Captured::replay` holds its
// staging lock across `launch`.
unsafe impl Sync for Graph {}

impl Graph {
    /// Launches the whole graph on `stream`.
    pub fn launch(&self, stream: &Stream) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: driver invariants 1 and 2: the executable and the stream are live (borrowed);
        // launches of one `Graph` are serialised by its caller (see the `Sync` impl above).
        self.ctx.check("cuGraphLaunch", unsafe {
            (self.ctx.api.cuGraphLaunch)(self.exec, stream.raw)
        })
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: driver invariants 1 and 2: the context is made current, then the executable and
        // the graph it was made from are destroyed once each (`&mut self`: nobody is launching).
        unsafe {
            (self.ctx.api.cuCtxSetCurrent)(self.ctx.raw);
            (self.ctx.api.cuGraphExecDestroy)(self.exec);
            (self.ctx.api.cuGraphDestroy)(self.graph);
        }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: driver invariants 1 and 2: the context is made current and the event destroyed
        // once; the driver allows destroying an event whose recorded work has not completed.
        unsafe {
            (self.ctx.api.cuCtxSetCurrent)(self.ctx.raw);
            (self.ctx.api.cuEventDestroy_v2)(self.raw);
        }
    }
}

/// A JIT-compiled PTX module.
pub struct Module {
    pub ctx: Arc<Context>,
    raw: CuModule,
}

// SAFETY: a loaded module belongs to its context, not to a thread; `Drop` makes the context current
// before unloading, so it may move and drop anywhere.
unsafe impl Send for Module {}
// SAFETY: `&Module` only looks up functions (cuModuleGetFunction), a thread-safe driver call that
// does not change the module.
unsafe impl Sync for Module {}

/// A kernel in a loaded module; keeps its module alive.
#[derive(Clone)]
pub struct Function {
    pub module: Arc<Module>,
    raw: CuFunction,
    pub name: String,
}

// SAFETY: a CUfunction is a handle into its module, valid in any thread while the module is loaded,
// which the `Arc<Module>` beside it guarantees wherever the value goes.
unsafe impl Send for Function {}
// SAFETY: `&Function` launches the kernel and sets one of its attributes; both are thread-safe
// driver calls, and launching one function from several threads at once is allowed.
unsafe impl Sync for Function {}

impl Module {
    /// JIT-compiles PTX text; a failure carries the JIT's error log.
    pub fn load(ctx: &Arc<Context>, ptx: &str) -> Result<Module> {
        ctx.bind()?;
        let src = CString::new(ptx).map_err(|_| CudaError::Jit {
            name: "invalid PTX".into(),
            log: "the PTX text contains a NUL byte".into(),
        })?;
        let mut error_log = vec![0u8; 16 << 10];
        let mut info_log = vec![0u8; 4 << 10];
        let mut opts = [
            CU_JIT_ERROR_LOG_BUFFER,
            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
            CU_JIT_INFO_LOG_BUFFER,
            CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
        ];
        let mut vals: [*mut c_void; 4] = [
            error_log.as_mut_ptr() as *mut c_void,
            error_log.len() as *mut c_void,
            info_log.as_mut_ptr() as *mut c_void,
            info_log.len() as *mut c_void,
        ];
        let mut raw = std::ptr::null_mut();
        // SAFETY: driver invariants 1 and 3, with the context current (bound above): `src` is a
        // NUL-terminated PTX image alive for the call; `opts` and `vals` are 4 entries each, as
        // the count says; each log-buffer option is paired with a live buffer of exactly the size
        // given in the next option (the driver writes at most that many bytes, and writes the
        // used sizes back into the mutable `vals`); nothing is kept after the call returns.
        let code = unsafe {
            (ctx.api.cuModuleLoadDataEx)(
                &mut raw,
                src.as_ptr() as *const c_void,
                opts.len() as c_uint,
                opts.as_mut_ptr(),
                vals.as_mut_ptr(),
            )
        };
        if code != 0 {
            let end = error_log
                .iter()
                .position(|&b| b == 0)
                .unwrap_or(error_log.len());
            return Err(CudaError::Jit {
                name: ctx.api.error_name(code),
                log: String::from_utf8_lossy(&error_log[..end]).into_owned(),
            });
        }
        Ok(Module {
            ctx: ctx.clone(),
            raw,
        })
    }

    pub fn function(self: &Arc<Self>, name: &str) -> Result<Function> {
        let cname = CString::new(name).map_err(|_| CudaError::MissingSymbol("kernel name"))?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: driver invariants 1–3: the module is live (borrowed), `cname` is NUL-terminated
        // and alive for the call, `raw` a live `CUfunction` the call writes. The function handle
        // stays valid while the module is loaded, and the `Function` keeps the module's `Arc`.
        self.ctx.check("cuModuleGetFunction", unsafe {
            (self.ctx.api.cuModuleGetFunction)(&mut raw, self.raw, cname.as_ptr())
        })?;
        Ok(Function {
            module: self.clone(),
            raw,
            name: name.to_string(),
        })
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: driver invariants 1 and 2: every `Function` of this module holds an
        // `Arc<Module>`, so none is left; the context is made current and the module unloaded once.
        unsafe {
            (self.ctx.api.cuCtxSetCurrent)(self.ctx.raw);
            (self.ctx.api.cuModuleUnload)(self.raw);
        }
    }
}

/// A kernel argument, passed by address to `cuLaunchKernel`.
///
/// A pointer argument states what the kernel does with the memory behind it, as an address and an
/// extent in bytes: the run's command log records these ranges as the launch's reads and writes
/// (`quorum_core::cmdlog`), and an audited run checks them against what the kernel really touched
/// (`Run::audit_launches`). There is no bare pointer: every launch site declares its accesses.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    /// Memory the kernel reads and never writes.
    In(CuDevicePtr, usize),
    /// Memory the kernel writes (and may read too): outputs, scratch, fault words.
    Out(CuDevicePtr, usize),
    U32(u32),
    I32(i32),
    U64(u64),
    F32(f32),
}

impl Function {
    /// Allows `bytes` of dynamic shared memory (needed above 48 KiB).
    pub fn set_max_dynamic_shared(&self, bytes: u32) -> Result<()> {
        let ctx = &self.module.ctx;
        // SAFETY: driver invariants 1 and 2: the function is live (its module is held); the
        // attribute and its value are passed by value, and an invalid value makes the call fail.
        ctx.check("cuFuncSetAttribute", unsafe {
            (ctx.api.cuFuncSetAttribute)(
                self.raw,
                CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes as c_int,
            )
        })
    }

    /// Launches on `stream`; errors name the kernel.
    pub fn launch(
        &self,
        stream: &Stream,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared: u32,
        args: &[Arg],
    ) -> Result<()> {
        let mut storage: Vec<u64> = args
            .iter()
            .map(|a| match *a {
                Arg::In(p, _) | Arg::Out(p, _) => p,
                Arg::U64(v) => v,
                Arg::U32(v) => v as u64,
                Arg::I32(v) => v as u32 as u64,
                Arg::F32(v) => v.to_bits() as u64,
            })
            .collect();
        // Each parameter's address; 32-bit values are read from the low half (little-endian).
        let mut ptrs: Vec<*mut c_void> = storage
            .iter_mut()
            .map(|v| v as *mut u64 as *mut c_void)
            .collect();
        let ctx = &self.module.ctx;
        // SAFETY: driver invariants 1 and 2: the function and the stream are live (borrowed). The
        // driver reads one entry of `ptrs` per parameter the kernel declares, and from each entry
        // that parameter's size (at most 8 bytes, from a live `u64` of `storage`), copying them
        // all before it returns, so both vectors may drop afterwards. That the slice `args`
        // matches the kernel's parameter list in count and size is trusted, not checked: a kernel
        // declaring more parameters than `args` holds would make the driver read past `ptrs`. The
        // extra-options pointer is null, as allowed.
        let code = unsafe {
            (ctx.api.cuLaunchKernel)(
                self.raw,
                grid.0,
                grid.1,
                grid.2,
                block.0,
                block.1,
                block.2,
                shared,
                stream.raw,
                ptrs.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        if code != 0 {
            return Err(CudaError::Call {
                call: "cuLaunchKernel",
                name: format!("{} (kernel {})", ctx.api.error_name(code), self.name),
                code,
            });
        }
        Ok(())
    }
}
