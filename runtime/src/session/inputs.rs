//! What a run's inputs must be: declared, given once, of the declared dtype and shape, with each
//! symbolic dim bound to one value across inputs.
use std::collections::{HashMap, HashSet};

use crate::error::{Error, Result};
use crate::ir::{Dim, Graph, Model, ValueType};
use crate::tensor::{DType, Value};

/// A run input as the checks see it: its name and, for a tensor, its dtype and shape.
pub(super) type Given<'a> = (&'a str, Option<(DType, &'a [usize])>);

pub(super) fn check_inputs(model: &Model, graph: &Graph, inputs: &[(String, Value)]) -> Result<()> {
    let given: Vec<Given> = inputs
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_tensor().map(|t| (t.dtype(), t.shape()))))
        .collect();
    check_given(model, graph, &given)
}

/// [`check_inputs`] over each input's name and, for a tensor, its dtype and shape (a value on the
/// host or on a device alike).
pub(super) fn check_given(model: &Model, graph: &Graph, inputs: &[Given]) -> Result<()> {
    let declared: HashMap<&str, &ValueType> = graph
        .inputs
        .iter()
        .map(|i| (i.name.as_str(), &i.ty))
        .collect();
    let given: HashSet<&str> = inputs.iter().map(|(n, _)| *n).collect();
    let mut bound: HashMap<&str, (usize, &str)> = HashMap::new();
    for &(name, tensor) in inputs {
        if !overridable_initializers(model) && graph.initializers.contains_key(name) {
            return Err(Error::Input {
                name: name.to_string(),
                msg: format!(
                    "an initializer of an IR version {} model is a constant, not an input",
                    model.ir_version
                ),
            });
        }
        let Some(ty) = declared.get(name) else {
            let expected: Vec<&str> = graph.runtime_inputs().map(|i| i.name.as_str()).collect();
            return Err(Error::Input {
                name: name.to_string(),
                msg: format!("the model has no such input (it takes {expected:?})"),
            });
        };
        if let (ValueType::Tensor { dtype, shape }, Some((t_dtype, t_shape))) = (ty, tensor) {
            if let Some(d) = dtype
                && *d != t_dtype
            {
                return Err(Error::Input {
                    name: name.to_string(),
                    msg: format!("expected {d}, got {t_dtype}"),
                });
            }
            if let Some(shape) = shape {
                let err = || Error::Input {
                    name: name.to_string(),
                    msg: format!("expected shape {ty}, got {t_shape:?}"),
                };
                if shape.len() != t_shape.len() {
                    return Err(err());
                }
                for (d, &actual) in shape.iter().zip(t_shape.iter()) {
                    match d {
                        Dim::Fixed(v) if *v >= 0 && *v as usize != actual => return Err(err()),
                        Dim::Symbol(s) => {
                            if let Some((prev, other)) = bound.insert(s, (actual, name))
                                && prev != actual
                            {
                                return Err(Error::Input {
                                    name: name.to_string(),
                                    msg: format!(
                                        "dim '{s}' is {actual} here but {prev} in input '{other}'"
                                    ),
                                });
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
    }
    for i in graph.runtime_inputs() {
        if !given.contains(i.name.as_str()) {
            return Err(Error::Input {
                name: i.name.clone(),
                msg: format!("required input of type {} was not given", i.ty),
            });
        }
    }
    Ok(())
}

/// Whether a caller may feed a value for an initializer listed among the graph inputs: from IR
/// version 4, where listing it there makes it a default; before, every initializer had to be listed
/// and all of them are constants.
pub(crate) fn overridable_initializers(model: &Model) -> bool {
    model.ir_version >= 4
}
