//! `import quorum`: Quorum from Python with onnxruntime's API (`InferenceSession`, `run`,
//! `get_inputs`, `SessionOptions`, provider names such as `"CUDAExecutionProvider"`), plus what
//! onnxruntime does not have: verification and its summary, the placement report, counters and
//! `compare`. numpy arrays go in and out; errors are Python exceptions carrying the runtime's one-line
//! messages, with onnxruntime's kinds (`InvalidArgument`, `Fail`, `NoSuchFile`, `InvalidGraph`,
//! `NotImplemented`, `RuntimeException`) and ours (`VerificationFailed`), all `QuorumError`s.
//!
//! Copies: an output leaves the runtime without a copy (its array is moved into the numpy array
//! Python receives). An input is copied once into a runtime tensor, which owns its storage: a run
//! releases the GIL and may keep a tensor past the call (the arena, a captured graph's inputs), so
//! it cannot borrow memory that Python may change or free meanwhile.
#![forbid(unsafe_code)]

mod convert;
mod options;

use std::path::PathBuf;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use quorum::{Availability, Error, Provider, Session};

pyo3::create_exception!(
    quorum,
    QuorumError,
    PyRuntimeError,
    "Every error Quorum raises."
);
pyo3::create_exception!(
    quorum,
    InvalidArgument,
    QuorumError,
    "A bad input: an unknown name, a wrong dtype or shape."
);
pyo3::create_exception!(quorum, Fail, QuorumError, "A node failed while running.");
pyo3::create_exception!(quorum, NoSuchFile, QuorumError, "A file could not be read.");
pyo3::create_exception!(
    quorum,
    InvalidGraph,
    QuorumError,
    "The model is malformed or invalid."
);
pyo3::create_exception!(
    quorum,
    NotImplemented,
    QuorumError,
    "The model uses an op, opset or type Quorum does not run."
);
pyo3::create_exception!(
    quorum,
    RuntimeException,
    QuorumError,
    "A provider or device failed."
);
pyo3::create_exception!(
    quorum,
    VerificationFailed,
    QuorumError,
    "Strict verification: an accelerated result is outside its bound, or could not be judged."
);

/// The Python exception for a runtime error, with its one-line message.
pub(crate) fn raise(e: Error) -> PyErr {
    let msg = e.to_string();
    match e {
        Error::Input { .. } => InvalidArgument::new_err(msg),
        Error::Node { .. } | Error::TooLarge { .. } => Fail::new_err(msg),
        Error::Io { .. } => NoSuchFile::new_err(msg),
        Error::Decode(_) | Error::InvalidModel(_) => InvalidGraph::new_err(msg),
        Error::Unsupported { .. } | Error::UnsupportedOpset { .. } => NotImplemented::new_err(msg),
        Error::Provider(_) | Error::Device(_) => RuntimeException::new_err(msg),
        Error::VerifyMismatch { .. } | Error::VerifyUnsettled { .. } => {
            VerificationFailed::new_err(msg)
        }
    }
}

/// onnxruntime's name for a provider.
fn ort_name(p: Provider) -> &'static str {
    match p {
        Provider::Cpu => "CPUExecutionProvider",
        Provider::Cuda => "CUDAExecutionProvider",
        Provider::Wgpu => "WebGpuExecutionProvider",
        Provider::Sim => "QuorumSimExecutionProvider",
    }
}

/// The providers usable here, by onnxruntime's names, accelerators first.
#[pyfunction]
fn get_available_providers() -> Vec<&'static str> {
    Provider::ACCELERATORS
        .into_iter()
        .filter(|p| p.available().is_ok())
        .chain([Provider::Cpu])
        .map(ort_name)
        .collect()
}

/// "GPU" where CUDA is usable here, else "CPU" (onnxruntime's `get_device`).
#[pyfunction]
fn get_device() -> &'static str {
    if Provider::Cuda.available().is_ok() {
        "GPU"
    } else {
        "CPU"
    }
}

/// A model's input or output: name, shape (ints, symbol names, `None` for unknown) and type
/// (`"tensor(float)"`, onnxruntime's spelling).
#[pyclass(module = "quorum", frozen, get_all)]
struct NodeArg {
    name: String,
    shape: Option<Vec<Py<PyAny>>>,
    r#type: String,
}

#[pymethods]
impl NodeArg {
    fn __repr__(&self, py: Python<'_>) -> String {
        let shape = match &self.shape {
            None => "None".to_string(),
            Some(s) => format!(
                "[{}]",
                s.iter()
                    .map(|d| d.bind(py).repr().map(|r| r.to_string()).unwrap_or_default())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        format!(
            "NodeArg(name='{}', type='{}', shape={shape})",
            self.name, self.r#type
        )
    }
}

/// A loaded model, ready to run: onnxruntime's `InferenceSession`.
#[pyclass(module = "quorum", frozen)]
struct InferenceSession {
    session: Session,
    providers: Vec<Provider>,
}

#[pymethods]
impl InferenceSession {
    /// `path_or_bytes`: a model file's path or its bytes. `providers`: onnxruntime's names (a
    /// name or a `(name, options)` pair each; options are accepted and ignored) or ours (`cpu`,
    /// `cuda`, `wgpu`, `auto`); a listed provider this machine cannot use is left out with a
    /// warning, as onnxruntime does. The default is the CPU.
    #[new]
    #[pyo3(signature = (path_or_bytes, sess_options=None, providers=None, provider_options=None, **kwargs))]
    fn new(
        py: Python<'_>,
        path_or_bytes: &Bound<'_, PyAny>,
        sess_options: Option<&options::SessionOptions>,
        providers: Option<&Bound<'_, PyAny>>,
        provider_options: Option<&Bound<'_, PyAny>>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let _ = (provider_options, kwargs);
        let (providers, floor) = options::providers(py, providers)?;
        let opts = options::session_options(sess_options, providers.clone(), floor)?;
        let session = if let Ok(b) = path_or_bytes.cast::<PyBytes>() {
            let bytes = b.as_bytes().to_vec();
            py.detach(|| Session::from_bytes(&bytes, opts))
        } else {
            let path: PathBuf = path_or_bytes.extract().map_err(|_| {
                PyValueError::new_err("path_or_bytes: a path (str or os.PathLike) or bytes")
            })?;
            py.detach(|| Session::from_file(&path, opts))
        }
        .map_err(raise)?;
        Ok(InferenceSession { session, providers })
    }

    /// Runs the model: `output_names` (`None` for every output) from `input_feed` (name → numpy
    /// array, or anything `numpy.asarray` takes). Returns the outputs as numpy arrays, in the
    /// order asked. The GIL is released while the model runs.
    #[pyo3(signature = (output_names, input_feed, run_options=None))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        output_names: Option<Vec<String>>,
        input_feed: &Bound<'py, PyDict>,
        run_options: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let _ = run_options;
        let graph = &self.session.model().graph;
        let wanted: Vec<String> = match output_names {
            Some(n) => n,
            None => graph.outputs.iter().map(|o| o.name.clone()).collect(),
        };
        for n in &wanted {
            if !graph.outputs.iter().any(|o| &o.name == n) {
                let have: Vec<&str> = graph.outputs.iter().map(|o| o.name.as_str()).collect();
                return Err(InvalidArgument::new_err(format!(
                    "output '{n}': the model has no such output (it has {have:?})"
                )));
            }
        }
        let mut feeds = Vec::with_capacity(input_feed.len());
        for (k, v) in input_feed.iter() {
            let name: String = k.extract()?;
            let value = convert::to_value(py, &name, &v)?;
            feeds.push((name, value));
        }
        let outputs = py.detach(|| self.session.run(feeds)).map_err(raise)?;
        let mut by_name: std::collections::HashMap<String, quorum::Value> =
            outputs.into_iter().collect();
        let list = PyList::empty(py);
        for n in &wanted {
            let v = by_name.remove(n).ok_or_else(|| {
                Fail::new_err(format!(
                    "output '{n}' was not produced (or asked for twice)"
                ))
            })?;
            list.append(convert::from_value(py, n, v)?)?;
        }
        Ok(list)
    }

    /// The inputs a caller feeds (initializers left out).
    fn get_inputs(&self, py: Python<'_>) -> PyResult<Vec<Py<NodeArg>>> {
        let g = &self.session.model().graph;
        g.runtime_inputs()
            .map(|i| Py::new(py, convert::node_arg(py, i)))
            .collect()
    }

    /// The model's outputs.
    fn get_outputs(&self, py: Python<'_>) -> PyResult<Vec<Py<NodeArg>>> {
        let g = &self.session.model().graph;
        g.outputs
            .iter()
            .map(|i| Py::new(py, convert::node_arg(py, i)))
            .collect()
    }

    /// The providers this session places nodes on, by onnxruntime's names.
    fn get_providers(&self) -> Vec<&'static str> {
        self.providers.iter().map(|&p| ort_name(p)).collect()
    }

    /// Where each node runs: `[{"node", "op", "provider", "declined"}]` (`declined`: why a listed
    /// accelerator did not take the node, or `None`).
    fn placement<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for p in self.session.placement() {
            let d = PyDict::new(py);
            d.set_item("node", &p.node)?;
            d.set_item("op", &p.op)?;
            d.set_item("provider", p.provider.name())?;
            d.set_item("declined", p.declined.as_deref())?;
            list.append(d)?;
        }
        Ok(list)
    }

    /// What verification found so far, per op: `{"Conv": {"checked", "mismatched", "unsettled",
    /// "reasons": {reason: count}}}`; empty with verification off.
    fn verification<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for (op, v) in self.session.verification() {
            let d = PyDict::new(py);
            d.set_item("checked", v.checked)?;
            d.set_item("mismatched", v.mismatched)?;
            d.set_item("unsettled", v.unsettled)?;
            d.set_item("reasons", v.reasons.into_iter().collect::<Vec<_>>())?;
            out.set_item(op, d)?;
        }
        Ok(out)
    }

    /// The session's counters (runs, nodes per provider, bytes copied, checks...), by name.
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let json = serde_json::to_value(self.session.counters())
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        let d = PyDict::new(py);
        if let serde_json::Value::Object(map) = json {
            for (k, v) in map {
                d.set_item(k, v.as_u64())?;
            }
        }
        Ok(d)
    }

    /// The nodes that ran on the CPU although an accelerator was listed.
    fn fallback_nodes(&self) -> Vec<String> {
        self.session.fallback_nodes()
    }
}

/// Runs `model` on two placements with every intermediate exposed and judges each node (see
/// `quorum compare`): `[{"node", "op", "placed": (a, b), "verdict", "detail"}]` in graph order,
/// `verdict` one of identical, agrees, diverges, unjudged; `detail` says why, and for a diverging
/// node whether its own kernel is wrong ("wrong: ...") or the difference came through its inputs
/// ("right"). `a` is the placement suspected, `b` the one trusted.
#[pyfunction]
#[pyo3(signature = (model, input_feed, a="cuda", b="cpu", sess_options=None))]
fn compare<'py>(
    py: Python<'py>,
    model: PathBuf,
    input_feed: &Bound<'py, PyDict>,
    a: &str,
    b: &str,
    sess_options: Option<&options::SessionOptions>,
) -> PyResult<Bound<'py, PyList>> {
    use quorum::compare::{NodeVerdict, Own};
    let side = |s: &str| -> PyResult<quorum::SessionOptions> {
        let (p, floor) = quorum::parse_providers(s).map_err(PyValueError::new_err)?;
        options::session_options(sess_options, p, floor)
    };
    let (oa, ob) = (side(a)?, side(b)?);
    let mut feeds = Vec::new();
    for (k, v) in input_feed.iter() {
        let name: String = k.extract()?;
        let value = convert::to_value(py, &name, &v)?;
        feeds.push((name, value));
    }
    let m = quorum::loader::model_from_file(&model, &Default::default()).map_err(raise)?;
    let c = py
        .detach(|| quorum::compare::compare(&m, oa, ob, &feeds))
        .map_err(raise)?;
    let list = PyList::empty(py);
    for n in c.nodes {
        let d = PyDict::new(py);
        d.set_item("node", &n.node)?;
        d.set_item("op", &n.op)?;
        d.set_item("placed", (n.placed.0.name(), n.placed.1.name()))?;
        let (verdict, detail) = match n.verdict {
            NodeVerdict::Identical => ("identical", String::new()),
            NodeVerdict::Agrees => ("agrees", String::new()),
            NodeVerdict::Diverges { why, own } => (
                "diverges",
                match own {
                    Own::Right => format!("{why}; right on its own inputs"),
                    Own::Wrong(w) => format!("{why}; wrong on its own inputs: {w}"),
                    Own::Unjudged(u) => format!("{why}; unjudged on its own inputs: {u}"),
                },
            ),
            NodeVerdict::Unjudged { why, max_diff } => {
                ("unjudged", format!("{why} (largest difference {max_diff})"))
            }
        };
        d.set_item("verdict", verdict)?;
        d.set_item("detail", detail)?;
        list.append(d)?;
    }
    Ok(list)
}

/// The module Python imports as `quorum` (maturin's `module-name`).
#[pymodule]
#[pyo3(name = "quorum")]
fn quorum_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<InferenceSession>()?;
    m.add_class::<NodeArg>()?;
    m.add_class::<options::SessionOptions>()?;
    m.add_class::<options::GraphOptimizationLevel>()?;
    m.add_class::<options::RunOptions>()?;
    m.add_function(wrap_pyfunction!(get_available_providers, m)?)?;
    m.add_function(wrap_pyfunction!(get_device, m)?)?;
    m.add_function(wrap_pyfunction!(compare, m)?)?;
    for (name, e) in [
        ("QuorumError", py.get_type::<QuorumError>()),
        ("InvalidArgument", py.get_type::<InvalidArgument>()),
        ("Fail", py.get_type::<Fail>()),
        ("NoSuchFile", py.get_type::<NoSuchFile>()),
        ("InvalidGraph", py.get_type::<InvalidGraph>()),
        ("NotImplemented", py.get_type::<NotImplemented>()),
        ("RuntimeException", py.get_type::<RuntimeException>()),
        ("VerificationFailed", py.get_type::<VerificationFailed>()),
    ] {
        m.add(name, e)?;
    }
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
