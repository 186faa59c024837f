//! The exported functions: raw pointers and lengths in, `i32` out (see the crate's protocol). Each
//! validates what it is given and hands the work to the safe functions of the crate root.
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::{Reply, State, call, hand_back, instance};

/// The bytes at `ptr..ptr + len`, or an error naming `what`.
///
/// # Safety
/// A non-null `ptr` points at `len` readable bytes that stay unchanged during the call (memory
/// from [`quorum_alloc`], filled by the caller).
unsafe fn bytes<'a>(ptr: *const u8, len: usize, what: &str) -> Result<&'a [u8], String> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(format!("{what}: a null pointer with {len} bytes"));
    }
    // SAFETY: the caller's contract above.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// # Safety
/// As [`bytes`].
unsafe fn text<'a>(ptr: *const u8, len: usize, what: &str) -> Result<&'a str, String> {
    // SAFETY: the caller's contract.
    let b = unsafe { bytes(ptr, len, what) }?;
    std::str::from_utf8(b).map_err(|e| format!("{what}: not UTF-8 ({e})"))
}

/// Runs `f`, a panic becoming an error (where the target unwinds; `wasm32-unknown-unknown` aborts,
/// which the JavaScript side sees as a trap).
fn guarded(f: impl FnOnce(&mut State) -> Reply) -> i32 {
    call(|s| {
        catch_unwind(AssertUnwindSafe(|| f(s))).unwrap_or_else(|p| {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(format!("internal error (a bug in Quorum): {msg}"))
        })
    })
}

#[cfg(target_arch = "wasm32")]
#[link(wasm_import_module = "quorum")]
unsafe extern "C" {
    /// Milliseconds from a fixed origin (`performance.now()`), imported from the host.
    #[link_name = "now_ms"]
    fn host_now_ms() -> f64;
}

/// Takes `len` bytes of memory for the caller to fill (null when `len` is 0 or too large).
#[unsafe(no_mangle)]
pub extern "C" fn quorum_alloc(len: usize) -> *mut u8 {
    if len == 0 || len > isize::MAX as usize {
        return std::ptr::null_mut();
    }
    Box::into_raw(vec![0u8; len].into_boxed_slice()).cast()
}

/// Gives back memory from [`quorum_alloc`].
///
/// # Safety
/// `ptr` and `len` are those of one earlier [`quorum_alloc`], given back once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn quorum_dealloc(ptr: *mut u8, len: usize) {
    if !ptr.is_null() && len != 0 {
        // SAFETY: the contract: this is the box `quorum_alloc` leaked.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) });
    }
}

/// Where the bytes the last call handed back start.
#[unsafe(no_mangle)]
pub extern "C" fn quorum_buffer_ptr() -> *const u8 {
    crate::STATE.with(|s| s.borrow().buffer.as_ptr())
}

/// How many bytes the last call handed back (an error message's length after a `-1`).
#[unsafe(no_mangle)]
pub extern "C" fn quorum_buffer_len() -> usize {
    crate::STATE.with(|s| s.borrow().buffer.len())
}

/// Loads a model (`.onnx` bytes) with options (JSON, empty for the defaults); a session handle.
///
/// # Safety
/// Both byte ranges as [`bytes`] asks.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn quorum_session_new(
    model: *const u8,
    model_len: usize,
    opts: *const u8,
    opts_len: usize,
) -> i32 {
    #[cfg(target_arch = "wasm32")]
    // SAFETY: the host provides `now_ms` (the module does not instantiate without it).
    quorum::clock::set_source(|| unsafe { host_now_ms() });
    // SAFETY: the caller's contract.
    let (model, opts) = unsafe {
        (
            bytes(model, model_len, "the model"),
            text(opts, opts_len, "the options"),
        )
    };
    guarded(|s| {
        let i = crate::create(model?, opts?)?;
        let h = s.next;
        s.next = s.next.checked_add(1).ok_or("too many sessions")?;
        s.sessions.insert(h, i);
        Ok(h)
    })
}

/// Frees a session.
#[unsafe(no_mangle)]
pub extern "C" fn quorum_session_free(h: i32) -> i32 {
    guarded(|s| {
        s.sessions
            .remove(&h)
            .map(|_| 0)
            .ok_or_else(|| format!("no session {h} (never created, or freed)"))
    })
}

/// The session's inputs and outputs as JSON (see `io`); its length.
#[unsafe(no_mangle)]
pub extern "C" fn quorum_session_io(h: i32) -> i32 {
    guarded(|s| {
        let j = crate::io(instance(s, h)?);
        hand_back(s, j)
    })
}

/// Gives input `name` its value for the next run: `.npy` bytes, or a serialized `TensorProto`,
/// `SequenceProto` or `OptionalProto`. Feeding a name again replaces its value.
///
/// # Safety
/// Both byte ranges as [`bytes`] asks.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn quorum_feed(
    h: i32,
    name: *const u8,
    name_len: usize,
    value: *const u8,
    value_len: usize,
) -> i32 {
    // SAFETY: the caller's contract.
    let (name, value) = unsafe {
        (
            text(name, name_len, "the input name"),
            bytes(value, value_len, "the input value"),
        )
    };
    guarded(|s| {
        crate::feed(instance(s, h)?, name?, value?)?;
        Ok(0)
    })
}

/// Runs the session on what was fed; the number of outputs.
#[unsafe(no_mangle)]
pub extern "C" fn quorum_run(h: i32) -> i32 {
    guarded(|s| {
        let n = crate::run(instance(s, h)?)?;
        i32::try_from(n).map_err(|_| format!("{n} outputs"))
    })
}

/// Output `k` of the last run: a JSON header line (`{"name", "format"}`), then its `.npy` (or
/// `.pb`) bytes; the total length.
#[unsafe(no_mangle)]
pub extern "C" fn quorum_output(h: i32, k: i32) -> i32 {
    guarded(|s| {
        let k = usize::try_from(k).map_err(|_| format!("output {k}"))?;
        let b = crate::encode_output(instance(s, h)?, k)?;
        hand_back(s, b)
    })
}
