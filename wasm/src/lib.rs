//! Quorum's CPU runtime as a WebAssembly module (`wasm32-unknown-unknown`: no threads, no clock, no
//! file system), behind a C ABI small enough to call from plain JavaScript with no generated glue.
//! `wasm/js/quorum.mjs` wraps it in onnxruntime-web's shapes (`InferenceSession.create`, `run`
//! with `Tensor`s); `wasm/examples/run-model.mjs` runs a model under node.
//!
//! # The protocol
//! Every call returns an `i32`: a non-negative result (a handle, a count or a byte length) or `-1`
//! for an error. Bytes a call hands back (a JSON description, an error message, an output) are
//! left in one buffer per module instance, read with [`quorum_buffer_ptr`] and the returned length
//! before the next call replaces them. Bytes given to a call live in memory the caller took with
//! [`quorum_alloc`] and gives back with [`quorum_dealloc`]. Values cross as `.npy` bytes (every
//! dtype numpy has) or as ONNX protobuf (`TensorProto`, `SequenceProto`, `OptionalProto`: every
//! other type), the formats `quorum run` reads and writes.
//!
//! Nothing here panics on what it is given: a bad handle, a null pointer with a non-zero length,
//! text that is not UTF-8, bytes that are not a model or a value each come back as an error
//! message, and the session stays usable after a failed run.
use std::cell::RefCell;
use std::collections::HashMap;

use quorum::ir::{Dim, ValueType};
use quorum::output_files::{self, Format};
use quorum::{Session, SessionOptions, Value};
use serde_json::{Value as Json, json};

mod abi;
pub use abi::*;

/// A session and what its caller has fed it for the next run, and what the last run returned.
struct Instance {
    session: Session,
    feeds: Vec<(String, Value)>,
    outputs: Vec<(String, Value)>,
}

#[derive(Default)]
struct State {
    sessions: HashMap<i32, Instance>,
    next: i32,
    /// What the last call handed back.
    buffer: Vec<u8>,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State { next: 1, ..State::default() });
}

/// A call's result: a non-negative number, or an error message.
type Reply = Result<i32, String>;

/// Runs `f` on the state; an `Err` becomes `-1` with its message in the buffer.
fn call(f: impl FnOnce(&mut State) -> Reply) -> i32 {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        match f(&mut s) {
            Ok(n) => n,
            Err(msg) => {
                s.buffer = msg.into_bytes();
                -1
            }
        }
    })
}

/// Leaves `bytes` in the buffer; their length.
fn hand_back(s: &mut State, bytes: Vec<u8>) -> Reply {
    let n = i32::try_from(bytes.len()).map_err(|_| format!("{} bytes: too large", bytes.len()))?;
    s.buffer = bytes;
    Ok(n)
}

fn instance(s: &mut State, h: i32) -> Result<&mut Instance, String> {
    s.sessions
        .get_mut(&h)
        .ok_or_else(|| format!("no session {h} (never created, or freed)"))
}

/// Session options from the caller's JSON (`{}` for the defaults): `dims` (symbol → value),
/// `optimize`, `fold_constants`, `arena` (booleans) and `max_tensor_bytes`.
fn options(text: &str) -> Result<SessionOptions, String> {
    let mut o = SessionOptions::default();
    if text.trim().is_empty() {
        return Ok(o);
    }
    let j: Json = serde_json::from_str(text).map_err(|e| format!("session options: {e}"))?;
    let Json::Object(map) = j else {
        return Err("session options: not a JSON object".into());
    };
    for (k, v) in map {
        let bad = || format!("session options: '{k}' cannot be {v}");
        match k.as_str() {
            "dims" => {
                let Json::Object(dims) = &v else {
                    return Err(bad());
                };
                for (sym, n) in dims {
                    let n = n.as_i64().ok_or_else(bad)?;
                    o.dims.insert(sym.clone(), n);
                }
            }
            "optimize" => o.optimize = v.as_bool().ok_or_else(bad)?,
            "fold_constants" => o.fold_constants = v.as_bool().ok_or_else(bad)?,
            "arena" => o.arena = v.as_bool().ok_or_else(bad)?,
            "max_tensor_bytes" => o.max_tensor_bytes = v.as_u64().ok_or_else(bad)?,
            _ => {
                return Err(format!(
                    "session options: unknown option '{k}' (dims, optimize, fold_constants, \
                     arena, max_tensor_bytes)"
                ));
            }
        }
    }
    Ok(o)
}

fn describe(ty: &ValueType) -> Json {
    match ty {
        ValueType::Tensor { dtype, shape } => json!({
            "kind": "tensor",
            "dtype": dtype.map(|d| d.name()),
            "shape": shape.as_ref().map(|dims| dims.iter().map(|d| match d {
                Dim::Fixed(n) => json!(n),
                Dim::Symbol(s) => json!(s),
                Dim::Unknown => Json::Null,
            }).collect::<Vec<_>>()),
        }),
        ValueType::Sequence(e) => json!({ "kind": "sequence", "element": describe(e) }),
        ValueType::Optional(e) => json!({ "kind": "optional", "element": describe(e) }),
        ValueType::Map => json!({ "kind": "map" }),
        ValueType::SparseTensor => json!({ "kind": "sparse_tensor" }),
        ValueType::Unknown => json!({ "kind": "unknown" }),
    }
}

fn create(model: &[u8], opts: &str) -> Result<Instance, String> {
    let session = Session::from_bytes(model, options(opts)?).map_err(|e| e.to_string())?;
    Ok(Instance {
        session,
        feeds: Vec::new(),
        outputs: Vec::new(),
    })
}

/// `{"inputs": [{name, kind, dtype, shape}...], "outputs": [...]}`: what a caller feeds (inputs
/// that are initializers are left out) and what a run returns.
fn io(i: &Instance) -> Vec<u8> {
    let g = &i.session.model().graph;
    let list = |v: &mut dyn Iterator<Item = &quorum::ir::ValueInfo>| {
        v.map(|vi| {
            let mut d = describe(&vi.ty);
            d["name"] = json!(vi.name);
            d
        })
        .collect::<Vec<_>>()
    };
    let j = json!({
        "inputs": list(&mut g.runtime_inputs()),
        "outputs": list(&mut g.outputs.iter()),
    });
    j.to_string().into_bytes()
}

fn feed(i: &mut Instance, name: &str, bytes: &[u8]) -> Result<(), String> {
    let g = &i.session.model().graph;
    let ty = g
        .runtime_inputs()
        .find(|v| v.name == name)
        .map(|v| v.ty.clone())
        .ok_or_else(|| {
            let names: Vec<&str> = g.runtime_inputs().map(|v| v.name.as_str()).collect();
            format!("the model has no input '{name}' (it takes {names:?})")
        })?;
    let value = if bytes.starts_with(b"\x93NUMPY") {
        quorum::npy::read(bytes).map(Value::Tensor)
    } else {
        quorum::loader::value_from_pb(bytes, &ty, &Default::default())
    }
    .map_err(|e| format!("input '{name}': {e}"))?;
    i.feeds.retain(|(n, _)| n != name);
    i.feeds.push((name.to_string(), value));
    Ok(())
}

/// One run over what was fed (the feeds are used up, whatever the outcome); the number of outputs.
fn run(i: &mut Instance) -> Result<usize, String> {
    let feeds = std::mem::take(&mut i.feeds);
    i.outputs.clear();
    i.outputs = i.session.run(feeds).map_err(|e| e.to_string())?;
    Ok(i.outputs.len())
}

fn output(i: &Instance, k: usize) -> Result<&(String, Value), String> {
    i.outputs
        .get(k)
        .ok_or_else(|| format!("output {k} of {}", i.outputs.len()))
}

/// Output `k` as `quorum run` would write it: a JSON header line (`{"name", "format": "npy" | "pb",
/// "stem"}`, the file stem `quorum run` gives it), a `\n`, then the file's bytes.
fn encode_output(i: &Instance, k: usize) -> Result<Vec<u8>, String> {
    let (name, value) = output(i, k)?;
    let declared = i
        .session
        .model()
        .graph
        .outputs
        .iter()
        .find(|o| &o.name == name)
        .map(|o| &o.ty);
    let e = output_files::encode(name, value, declared, Format::Npy);
    let names: Vec<&str> = i.outputs.iter().map(|(n, _)| n.as_str()).collect();
    let stem = &output_files::file_stems(&names)[k];
    let mut bytes = json!({ "name": name, "format": e.extension, "stem": stem })
        .to_string()
        .into_bytes();
    bytes.push(b'\n');
    bytes.extend_from_slice(&e.bytes);
    Ok(bytes)
}

#[cfg(test)]
mod tests;
