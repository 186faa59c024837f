//! 64-bit integers judged exactly where f64 cannot tell neighbours apart (2⁵³ and beyond), for the
//! ops whose every output element is a copy of one input element: the movement ops (Transpose,
//! Reshape, Gather, Concat, Slice, Pad, Where...).
//!
//! **By identity.** Each element of the op's data inputs is replaced by its own identity, a small
//! integer exact in f64 (1, 2, 3... across the data inputs), and both oracles run the op on those.
//! Their answer says, for every output element, which input element it is a copy of; the device's
//! value must then equal that element's value as the input holds it, compared as integers. The
//! index, shape and condition inputs (Gather's indices, Reshape's shape, Where's condition) are
//! given as they are, so the oracles choose the same elements the device had to. An output element
//! that is no identity (a value the op made, not copied) leaves the output unjudged: such an op is
//! not a movement op.
use quorum_oracle as oracle;
use quorum_oracle::Oracle;
use quorum_oracle::arbitrate::Wrong;

use super::{Check, Unsettled};
use crate::tensor::{Tensor, Value};

/// The data inputs of a movement op: those whose elements the output copies (the others are read
/// for indices, shapes, counts or conditions). `None` for ops that compute their elements.
fn data_inputs(op: &str, n_inputs: usize) -> Option<Vec<usize>> {
    Some(match op {
        "Identity" | "Transpose" | "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" | "Split"
        | "Slice" | "Gather" | "GatherElements" | "GatherND" | "Expand" | "Tile"
        | "DepthToSpace" | "SpaceToDepth" | "Compress" | "ReverseSequence" => vec![0],
        "Concat" => (0..n_inputs).collect(),
        // The constant fill is an input (opset 11 and later): its element is copied too.
        "Pad" => vec![0, 2],
        "ScatterND" | "ScatterElements" => vec![0, 2],
        "Where" => vec![1, 2],
        _ => return None,
    })
}

/// The exact integers of a tensor (`None` for a float or boolean tensor).
fn integers(t: &Tensor) -> Option<Vec<i128>> {
    Some(match t {
        Tensor::I8(a) => a.iter().map(|&v| v.into()).collect(),
        Tensor::I16(a) => a.iter().map(|&v| v.into()).collect(),
        Tensor::I32(a) => a.iter().map(|&v| v.into()).collect(),
        Tensor::I64(a) => a.iter().map(|&v| v.into()).collect(),
        Tensor::U8(a) => a.iter().map(|&v| v.into()).collect(),
        Tensor::U16(a) => a.iter().map(|&v| v.into()).collect(),
        Tensor::U32(a) => a.iter().map(|&v| v.into()).collect(),
        Tensor::U64(a) => a.iter().map(|&v| v.into()).collect(),
        _ => return None,
    })
}

/// Judges output `k` (`out`) of a movement op exactly, by identity. `None` where the op is not a
/// movement op or a data input is not an integer tensor; `Some(Ok(()))` when every element is the
/// input element the oracles say it copies; otherwise the check's verdict.
pub(super) fn movement(
    spec: &oracle::NodeSpec,
    inputs: &[Option<&Value>],
    args: &[Option<oracle::Value>],
    out: &Tensor,
    k: usize,
) -> Option<Result<(), Check>> {
    if !spec.domain.is_empty() {
        return None;
    }
    // ScatterElements with a reduction combines values: not a copy.
    if spec.op_type.starts_with("Scatter") && spec.attrs.contains_key("reduction") {
        match spec.attrs.get("reduction") {
            Some(oracle::Attr::String(r)) if r == "none" => {}
            _ => return None,
        }
    }
    let data = data_inputs(&spec.op_type, inputs.len())?;
    // The values behind identities 1..: every data input's elements, in input order.
    let mut values: Vec<i128> = Vec::new();
    let mut id_args: Vec<Option<oracle::Value>> = args.to_vec();
    for &p in &data {
        let Some(Some(Value::Tensor(t))) = inputs.get(p) else {
            continue;
        };
        let exact = integers(t)?;
        let first = values.len() as f64 + 1.0;
        let ids = (0..exact.len()).map(|i| first + i as f64).collect();
        let a = args.get(p)?.as_ref()?;
        id_args[p] = Some(oracle::Value::new(a.dtype, a.shape.clone(), ids).ok()?);
        values.extend(exact);
    }
    if values.len() as f64 >= 9_007_199_254_740_992.0 {
        return None;
    }
    let evaluate = |o: &dyn Oracle| o.evaluate(spec, &id_args).ok();
    let (r, i) = std::thread::scope(|s| {
        let i = s.spawn(|| evaluate(&oracle::independent::Independent));
        (
            evaluate(&oracle::reference::Reference),
            i.join().ok().flatten(),
        )
    });
    let unsettled = |u: Unsettled| Some(Err(Check::Unsettled(u)));
    let (Some(r), Some(i)) = (r, i) else {
        return unsettled(Unsettled::NotCovered(format!(
            "{}: the oracles do not trace the elements of this node",
            spec.op_type
        )));
    };
    let (Some(r), Some(i)) = (r.get(k), i.get(k)) else {
        return unsettled(Unsettled::OraclesDisagree(format!(
            "output {k} is missing from an oracle's answer"
        )));
    };
    if r.value != i.value {
        return unsettled(Unsettled::OraclesDisagree(format!(
            "output {k}: the oracles copy different elements"
        )));
    }
    if r.value.shape != out.shape() {
        return Some(Err(Check::Mismatch {
            output: k,
            wrong: Wrong::Form(format!(
                "shape {:?}, the oracles {:?}",
                out.shape(),
                r.value.shape
            )),
        }));
    }
    let got = integers(out)?;
    for (index, (&id, &engine)) in r.value.data.iter().zip(&got).enumerate() {
        let Some(&oracle) = (id >= 1.0 && id.fract() == 0.0)
            .then(|| values.get(id as usize - 1))
            .flatten()
        else {
            return unsettled(Unsettled::NotCovered(format!(
                "{} output {k} element {index} is not a copy of an input element",
                spec.op_type
            )));
        };
        if engine != oracle {
            return Some(Err(Check::Mismatch {
                output: k,
                wrong: Wrong::Integer {
                    index,
                    engine,
                    oracle,
                },
            }));
        }
    }
    Some(Ok(()))
}
