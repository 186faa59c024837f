//! numpy arrays to runtime values and back, and the type names onnxruntime writes.
use ndarray::ArrayD;
use numpy::{
    PyArray, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::types::PyList;
use quorum::ir::{Dim, ValueInfo, ValueType};
use quorum::{DType, Tensor, Value};

use crate::{InvalidArgument, NodeArg, NotImplemented};

/// onnxruntime's name of a value type: `tensor(float)`, `seq(tensor(int64))`...
pub(crate) fn type_name(ty: &ValueType) -> String {
    match ty {
        ValueType::Tensor { dtype, .. } => format!(
            "tensor({})",
            dtype.map_or("undefined", |d| match d {
                DType::F32 => "float",
                DType::F64 => "double",
                other => other.name(),
            })
        ),
        ValueType::Sequence(e) => format!("seq({})", type_name(e)),
        ValueType::Optional(e) => format!("optional({})", type_name(e)),
        ValueType::Map => "map".into(),
        ValueType::SparseTensor => "sparse_tensor".into(),
        ValueType::Unknown => "unknown".into(),
    }
}

pub(crate) fn node_arg(py: Python<'_>, v: &ValueInfo) -> NodeArg {
    let shape = match &v.ty {
        ValueType::Tensor {
            shape: Some(dims), ..
        } => Some(
            dims.iter()
                .map(|d| match d {
                    Dim::Fixed(n) => n.into_pyobject(py).expect("int").into_any().unbind(),
                    Dim::Symbol(s) => s.into_pyobject(py).expect("str").into_any().unbind(),
                    Dim::Unknown => py.None(),
                })
                .collect(),
        ),
        _ => None,
    };
    NodeArg {
        name: v.name.clone(),
        shape,
        r#type: type_name(&v.ty),
    }
}

/// `obj` (a numpy array, or anything `numpy.asarray` takes) as the runtime value of input `name`:
/// one copy into storage the runtime owns.
pub(crate) fn to_value(py: Python<'_>, name: &str, obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    let arr = py.import("numpy")?.call_method1("asarray", (obj,))?;
    let untyped = arr.cast::<PyUntypedArray>().map_err(|_| {
        InvalidArgument::new_err(format!("input '{name}': not convertible to a numpy array"))
    })?;
    macro_rules! take {
        ($($t:ty => $v:ident),*) => {
            $(if let Ok(a) = arr.cast::<PyArrayDyn<$t>>() {
                return Ok(Value::Tensor(Tensor::$v(a.readonly().as_array().to_owned())));
            })*
        };
    }
    take!(f32 => F32, f64 => F64, half::f16 => F16, i8 => I8, i16 => I16, i32 => I32,
        i64 => I64, u8 => U8, u16 => U16, u32 => U32, u64 => U64, bool => Bool);
    let dtype = untyped.dtype();
    let kind = dtype.kind();
    if kind == b'U' || kind == b'O' || kind == b'S' {
        let shape: Vec<usize> = untyped.shape().to_vec();
        let flat = arr.call_method0("ravel")?.call_method0("tolist")?;
        let items: Vec<String> = flat
            .cast::<PyList>()?
            .iter()
            .map(|s| match s.extract::<String>() {
                Ok(s) => Ok(s),
                Err(_) => s
                    .extract::<Vec<u8>>()
                    .map(|b| String::from_utf8_lossy(&b).into_owned()),
            })
            .collect::<PyResult<_>>()
            .map_err(|_| {
                InvalidArgument::new_err(format!("input '{name}': an object array of non-strings"))
            })?;
        let a = ArrayD::from_shape_vec(shape, items)
            .map_err(|e| InvalidArgument::new_err(format!("input '{name}': {e}")))?;
        return Ok(Value::Tensor(Tensor::Str(a)));
    }
    Err(InvalidArgument::new_err(format!(
        "input '{name}': numpy dtype {dtype} has no ONNX tensor type Quorum takes"
    )))
}

/// Output `name` as Python sees it: a numpy array (the runtime's array moved in, not copied), a
/// list of arrays for a sequence, `None` or the value for an optional.
pub(crate) fn from_value(py: Python<'_>, name: &str, v: Value) -> PyResult<Py<PyAny>> {
    match v {
        Value::Tensor(t) => from_tensor(py, name, t),
        Value::Sequence { items, .. } => {
            let l = PyList::empty(py);
            for t in items {
                l.append(from_tensor(py, name, t)?)?;
            }
            Ok(l.into_any().unbind())
        }
        Value::Optional(None) => Ok(py.None()),
        Value::Optional(Some(v)) => from_value(py, name, *v),
    }
}

fn from_tensor(py: Python<'_>, name: &str, t: Tensor) -> PyResult<Py<PyAny>> {
    fn moved<T: numpy::Element>(py: Python<'_>, a: ArrayD<T>) -> Py<PyAny> {
        PyArray::from_owned_array(py, a).into_any().unbind()
    }
    Ok(match t {
        Tensor::F32(a) => moved(py, a),
        Tensor::F64(a) => moved(py, a),
        Tensor::F16(a) => moved(py, a),
        Tensor::I8(a) => moved(py, a),
        Tensor::I16(a) => moved(py, a),
        Tensor::I32(a) => moved(py, a),
        Tensor::I64(a) => moved(py, a),
        Tensor::U8(a) => moved(py, a),
        Tensor::U16(a) => moved(py, a),
        Tensor::U32(a) => moved(py, a),
        Tensor::U64(a) => moved(py, a),
        Tensor::Bool(a) => moved(py, a),
        Tensor::Str(a) => {
            // numpy holds strings as Python objects (onnxruntime returns object arrays too).
            let shape = a.shape().to_vec();
            let items: Vec<String> = a.into_iter().collect();
            py.import("numpy")?
                .call_method1("array", (items,))?
                .call_method1("astype", ("object",))?
                .call_method1("reshape", (shape,))?
                .unbind()
        }
        other => {
            return Err(NotImplemented::new_err(format!(
                "output '{name}': numpy has no dtype for {} (add a Cast to float32 to the model)",
                other.dtype()
            )));
        }
    })
}
