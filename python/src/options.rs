//! `SessionOptions`, `GraphOptimizationLevel`, `RunOptions` and the provider list, with
//! onnxruntime's names, mapped to the runtime's session options.
use std::collections::HashMap;
use std::ffi::CString;

use pyo3::exceptions::{PyUserWarning, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};
use quorum::session::sampling::Sampling;
use quorum::{Availability, Provider, VerifyMode};

/// onnxruntime's optimisation levels. Any level but `ORT_DISABLE_ALL` turns Quorum's rewrites (and
/// constant folding) on: most keep every output bit for bit, and the rest stay within the f32
/// rounding bound their modules state.
#[pyclass(module = "quorum", eq, eq_int)]
#[derive(Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types, clippy::upper_case_acronyms)]
pub enum GraphOptimizationLevel {
    ORT_DISABLE_ALL = 0,
    ORT_ENABLE_BASIC = 1,
    ORT_ENABLE_EXTENDED = 2,
    ORT_ENABLE_ALL = 99,
}

/// Accepted where onnxruntime takes one (`run(..., run_options)`); nothing in it changes a run.
#[pyclass(module = "quorum", get_all, set_all)]
#[derive(Default)]
pub struct RunOptions {
    log_severity_level: i32,
    log_verbosity_level: i32,
    run_tag: String,
    terminate: bool,
}

#[pymethods]
impl RunOptions {
    #[new]
    fn new() -> Self {
        RunOptions {
            log_severity_level: 2,
            ..RunOptions::default()
        }
    }
}

/// Session options with onnxruntime's names, and Quorum's own (`verify`, `allow_unchecked`,
/// `streams`, `graph_capture`, `precision`, `keep_f32`, `dims`, `max_tensor_bytes`).
///
/// Accepted for compatibility and without effect: `intra_op_num_threads` and
/// `inter_op_num_threads` (the CPU's threads are rayon's one pool per process, sized by
/// `RAYON_NUM_THREADS`), `execution_mode`, `log_severity_level`, `log_verbosity_level`,
/// `enable_mem_pattern`, `enable_profiling`, `logid`.
#[pyclass(module = "quorum", get_all, set_all)]
pub struct SessionOptions {
    graph_optimization_level: GraphOptimizationLevel,
    /// The memory arena for activations (`enable_cpu_mem_arena`, on by default).
    enable_cpu_mem_arena: bool,
    intra_op_num_threads: i32,
    inter_op_num_threads: i32,
    execution_mode: i32,
    log_severity_level: i32,
    log_verbosity_level: i32,
    enable_mem_pattern: bool,
    enable_profiling: bool,
    logid: String,
    /// off, shadow, strict, sample[=R[:K]] or sample-strict[=R[:K]] (R: N or P%; see the README).
    verify: String,
    /// Op types strict verification lets through when the oracles cannot judge them.
    allow_unchecked: Vec<String>,
    /// Device streams a run may use.
    streams: usize,
    /// Device graph capture: off, on or auto.
    graph_capture: String,
    /// Arithmetic of the model's f32 values: f32 (exact), tf32 (tensor cores for f32 products), or
    /// f16 / bf16 (the model converted to that type at session build; see `keep_f32`).
    precision: String,
    /// Op types kept in f32 when `precision` is f16 or bf16, beside the default list.
    keep_f32: Vec<String>,
    /// Values of symbolic dimensions.
    dims: HashMap<String, i64>,
    max_tensor_bytes: u64,
}

#[pymethods]
impl SessionOptions {
    #[new]
    fn new() -> Self {
        SessionOptions {
            graph_optimization_level: GraphOptimizationLevel::ORT_ENABLE_ALL,
            enable_cpu_mem_arena: true,
            intra_op_num_threads: 0,
            inter_op_num_threads: 0,
            execution_mode: 0,
            log_severity_level: 2,
            log_verbosity_level: 0,
            enable_mem_pattern: true,
            enable_profiling: false,
            logid: String::new(),
            verify: "off".into(),
            allow_unchecked: Vec::new(),
            streams: 1,
            graph_capture: "off".into(),
            precision: "f32".into(),
            keep_f32: Vec::new(),
            dims: HashMap::new(),
            max_tensor_bytes: quorum::DEFAULT_MAX_TENSOR_BYTES,
        }
    }

    /// onnxruntime's way to give a symbolic dimension its value.
    fn add_free_dimension_override_by_name(&mut self, name: String, value: i64) {
        self.dims.insert(name, value);
    }
}

/// The runtime's options from the Python ones (defaults where none are given).
pub(crate) fn session_options(
    so: Option<&SessionOptions>,
    providers: Vec<Provider>,
    floor: usize,
) -> PyResult<quorum::SessionOptions> {
    let default = SessionOptions::new();
    let so = so.unwrap_or(&default);
    let (verify, verify_sample) = match Sampling::parse(&so.verify) {
        Some(Ok(s)) => (VerifyMode::Off, Some(s)),
        Some(Err(e)) => return Err(PyValueError::new_err(format!("verify: {e}"))),
        None => (
            so.verify
                .parse()
                .map_err(|e: String| PyValueError::new_err(format!("verify: {e}")))?,
            None,
        ),
    };
    let optimize = so.graph_optimization_level != GraphOptimizationLevel::ORT_DISABLE_ALL;
    Ok(quorum::SessionOptions {
        providers,
        min_device_elements: floor,
        verify,
        verify_sample,
        allow_unchecked: so.allow_unchecked.clone(),
        optimize,
        fold_constants: optimize,
        arena: so.enable_cpu_mem_arena,
        streams: so.streams.max(1),
        graph_capture: so
            .graph_capture
            .parse()
            .map_err(|e: String| PyValueError::new_err(format!("graph_capture: {e}")))?,
        precision: so
            .precision
            .parse()
            .map_err(|e: String| PyValueError::new_err(format!("precision: {e}")))?,
        keep_f32: so.keep_f32.clone(),
        dims: so.dims.clone(),
        max_tensor_bytes: so.max_tensor_bytes,
        ..Default::default()
    })
}

/// A provider by onnxruntime's name or ours; `None` for `auto`.
fn provider(name: &str) -> PyResult<Option<Provider>> {
    Ok(Some(match name {
        "CPUExecutionProvider" | "cpu" => Provider::Cpu,
        "CUDAExecutionProvider" | "cuda" => Provider::Cuda,
        "WebGpuExecutionProvider" | "wgpu" => Provider::Wgpu,
        "QuorumSimExecutionProvider" | "sim" => Provider::Sim,
        "auto" => return Ok(None),
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown provider '{other}' (Quorum has CPUExecutionProvider, \
                 CUDAExecutionProvider, WebGpuExecutionProvider, or cpu, cuda, wgpu, sim, auto)"
            )));
        }
    }))
}

/// The session's providers in priority order, the CPU last, and the size floor below which nodes
/// stay on the CPU (`auto`'s; none for a list). A listed provider this machine cannot use is left
/// out with a `UserWarning`, as onnxruntime does.
pub(crate) fn providers(
    py: Python<'_>,
    given: Option<&Bound<'_, PyAny>>,
) -> PyResult<(Vec<Provider>, usize)> {
    let Some(given) = given else {
        return Ok((vec![Provider::Cpu], 0));
    };
    let names: Vec<String> = if let Ok(s) = given.cast::<PyString>() {
        vec![s.to_string()]
    } else {
        let mut v = Vec::new();
        for item in given.try_iter()? {
            let item = item?;
            // onnxruntime takes (name, options) pairs too; the options have no meaning here.
            let name = match item.cast::<PyTuple>() {
                Ok(t) => t.get_item(0)?.extract()?,
                Err(_) => item.extract()?,
            };
            v.push(name);
        }
        v
    };
    let mut out = Vec::new();
    let mut floor = 0;
    for n in &names {
        match provider(n)? {
            None => {
                let (auto, f) = quorum::parse_providers("auto").map_err(PyValueError::new_err)?;
                floor = f;
                out.extend(auto);
            }
            Some(p) => match p.available() {
                Ok(()) => out.push(p),
                Err(why) => {
                    let msg = CString::new(format!(
                        "Specified provider '{n}' is not available here ({why}); it is left out"
                    ))
                    .unwrap_or_default();
                    PyErr::warn(py, &py.get_type::<PyUserWarning>(), &msg, 1)?;
                }
            },
        }
    }
    let mut seen = Vec::new();
    out.retain(|p| {
        let first = !seen.contains(p);
        seen.push(*p);
        first
    });
    if let Some(i) = out.iter().position(|&p| p == Provider::Cpu) {
        out.remove(i);
    }
    out.push(Provider::Cpu);
    Ok((out, floor))
}
