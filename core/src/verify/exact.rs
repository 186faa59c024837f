//! 64-bit integers judged exactly where f64 cannot tell neighbours apart (2⁵³ and beyond). The two
//! oracles hold every element as an f64; instead of a third, exact evaluator, each family below poses
//! the node to both oracles on small integers that f64 holds exactly, and rebuilds the exact answer
//! from theirs.
//!
//! **Movement ops, by identity** (Transpose, Reshape, Gather, Concat, Slice, Pad, Where...: every
//! output element is a copy of one input element). Each element of the op's data inputs is replaced by
//! its own identity (1, 2, 3... across the data inputs), and both oracles run the op on those. Their
//! answer says, for every output element, which input element it is a copy of; the device's value
//! must then equal that element's value as the input holds it, compared as integers. The index,
//! shape and condition inputs (Gather's indices, Reshape's shape, Where's condition) are given as they
//! are, so the oracles choose the same elements the device had to.
//!
//! **Ring ops, by limbs** (Add, Sub, Neg, Sum, CumSum, ReduceSum, Cast to a 32- or 64-bit integer:
//! linear; Mul, MatMul: bilinear). Integer arithmetic on the device wraps modulo 2⁶⁴ (or the output's
//! width), and these ops are ring operations, so they commute with splitting each 64-bit element into
//! four 16-bit limbs, x = Σᵢ xᵢ·2¹⁶ⁱ: a linear op is Σᵢ op(xᵢ)·2¹⁶ⁱ and a bilinear one
//! Σᵢ₊ⱼ₍₄ op(xᵢ, yⱼ)·2¹⁶⁽ⁱ⁺ʲ⁾ modulo 2⁶⁴. Each op(limbs) is a sum of at most n terms below 2³² (one
//! product of two limbs), exact in f64 while n < 2²¹; the oracles must agree on every one, and the
//! combination is done in i128 and reduced to the output's width.
//!
//! **Order ops, by rank** (Max, Min, Clip, ReduceMax, ReduceMin, ArgMax, ArgMin, TopK and the
//! comparisons): their answer depends on the values only through comparisons, so replacing every data
//! element by its rank among all of them (equal values one rank) changes nothing but the values they
//! return, which are mapped back from ranks. Bool and index outputs are compared as they are.
//!
//! An op in none of the families, or whose posed answer is not what the family promises (an output
//! element that is no identity, no rank), is unsettled, never passed.
use quorum_oracle as oracle;
use quorum_oracle::Oracle;
use quorum_oracle::arbitrate::Wrong;

use super::{Check, EXACT_IN_F64, Unsettled};
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

/// Judges output `k` (`out`) of the node exactly: a movement op by identity, a ring op by limbs,
/// an order op by rank. `None` where the op is in no family or its inputs are not what the family
/// needs; `Some(Ok(()))` when every element is the exact answer; otherwise the check's verdict.
pub(super) fn judge(
    spec: &oracle::NodeSpec,
    inputs: &[Option<&Value>],
    args: &[Option<oracle::Value>],
    out: &Tensor,
    k: usize,
) -> Option<Result<(), Check>> {
    if !spec.domain.is_empty() {
        return None;
    }
    movement(spec, inputs, args, out, k)
        .or_else(|| ring(spec, inputs, args, out, k))
        .or_else(|| order(spec, inputs, args, out, k))
}

/// Judges output `k` of a movement op exactly, by identity. `None` where the op is not a movement op
/// or a data input is not an integer tensor.
fn movement(
    spec: &oracle::NodeSpec,
    inputs: &[Option<&Value>],
    args: &[Option<oracle::Value>],
    out: &Tensor,
    k: usize,
) -> Option<Result<(), Check>> {
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
    if values.len() as f64 >= EXACT_IN_F64 {
        return None;
    }
    let traced = match agreed(spec, &id_args, k, "trace the elements of", out) {
        Ok(v) => v,
        Err(c) => return Some(Err(c)),
    };
    let got = integers(out)?;
    let mut want = Vec::with_capacity(traced.data.len());
    for (index, &id) in traced.data.iter().enumerate() {
        let Some(&value) = (id >= 1.0 && id.fract() == 0.0)
            .then(|| values.get(id as usize - 1))
            .flatten()
        else {
            return Some(Err(Check::Unsettled(Unsettled::NotCovered(format!(
                "{} output {k} element {index} is not a copy of an input element",
                spec.op_type
            )))));
        };
        want.push(value);
    }
    Some(compare(&got, &want, k))
}

/// Output `k` of the node on `args` as both oracles give it, when they give the same and its shape
/// is the device's (`out`): `what` says what they were asked, for the message when they cannot.
fn agreed(
    spec: &oracle::NodeSpec,
    args: &[Option<oracle::Value>],
    k: usize,
    what: &str,
    out: &Tensor,
) -> Result<oracle::Value, Check> {
    let evaluate = |o: &dyn Oracle| o.evaluate(spec, args).ok();
    let (r, i) = std::thread::scope(|s| {
        let i = s.spawn(|| evaluate(&oracle::independent::Independent));
        (
            evaluate(&oracle::reference::Reference),
            i.join().ok().flatten(),
        )
    });
    let (Some(mut r), Some(i)) = (r, i) else {
        return Err(Check::Unsettled(Unsettled::NotCovered(format!(
            "{}: the oracles do not {what} this node",
            spec.op_type
        ))));
    };
    let (Some(ro), Some(io)) = (r.get(k), i.get(k)) else {
        return Err(Check::Unsettled(Unsettled::OraclesDisagree(format!(
            "output {k} is missing from an oracle's answer"
        ))));
    };
    if ro.value != io.value {
        return Err(Check::Unsettled(Unsettled::OraclesDisagree(format!(
            "output {k}: the oracles differ when asked to {what} this node"
        ))));
    }
    let value = r.swap_remove(k).value;
    if value.shape != out.shape() {
        return Err(Check::Mismatch {
            output: k,
            wrong: Wrong::Form(format!(
                "shape {:?}, the oracles {:?}",
                out.shape(),
                value.shape
            )),
        });
    }
    Ok(value)
}

/// The first element where the device's exact values differ from the oracles'.
fn compare(got: &[i128], want: &[i128], k: usize) -> Result<(), Check> {
    match got.iter().zip(want).position(|(g, w)| g != w) {
        None => Ok(()),
        Some(index) => Err(Check::Mismatch {
            output: k,
            wrong: Wrong::Integer {
                index,
                engine: got[index],
                oracle: want[index],
            },
        }),
    }
}

/// How a ring op combines its data inputs: linear in all of them jointly, or bilinear in two.
enum Ring {
    Linear(Vec<usize>),
    Bilinear(usize, usize),
}

fn ring_inputs(spec: &oracle::NodeSpec, n_inputs: usize) -> Option<Ring> {
    Some(match spec.op_type.as_str() {
        "Add" | "Sub" | "Sum" => Ring::Linear((0..n_inputs).collect()),
        "Neg" | "CumSum" | "ReduceSum" => Ring::Linear(vec![0]),
        // Reducing modulo 2³² or 2⁶⁴ is a ring map; a 16-bit limb fits either without wrapping.
        "Cast" => match spec.attrs.get("to") {
            Some(oracle::Attr::Int(to)) if [6, 7, 12, 13].contains(to) => Ring::Linear(vec![0]),
            _ => return None,
        },
        "Mul" | "MatMul" => Ring::Bilinear(0, 1),
        _ => return None,
    })
}

/// The limbs of 64-bit values: `limb(x, i)` is bits 16i..16i+16 of x's two's complement.
fn limb(x: i128, i: usize) -> f64 {
    ((x as u64 >> (16 * i)) & 0xffff) as f64
}

/// `args` with data input `p` replaced by its limb `i`.
fn with_limb(args: &mut [Option<oracle::Value>], exact: &[Vec<i128>], p: usize, i: usize) {
    if let Some(a) = args[p].as_mut() {
        a.data = exact[p].iter().map(|&x| limb(x, i)).collect();
    }
}

/// The exact integers of a tensor, booleans as 0 and 1 (`None` for a float tensor).
fn exact_values(t: &Tensor) -> Option<Vec<i128>> {
    match t {
        Tensor::Bool(a) => Some(a.iter().map(|&b| b.into()).collect()),
        t => integers(t),
    }
}

/// `x` reduced to the integer type of `t` (its width, signed or not), as that type reads it.
fn wrap_to(x: i128, t: &Tensor) -> i128 {
    match t {
        Tensor::I64(_) => x as i64 as i128,
        Tensor::U64(_) => x as u64 as i128,
        Tensor::I32(_) => x as i32 as i128,
        Tensor::U32(_) => x as u32 as i128,
        Tensor::I16(_) => x as i16 as i128,
        Tensor::U16(_) => x as u16 as i128,
        Tensor::I8(_) => x as i8 as i128,
        Tensor::U8(_) => x as u8 as i128,
        _ => x,
    }
}

/// Judges output `k` of a ring op exactly, by limbs. `None` where the op is not a ring op or an
/// input or the output is not an integer tensor.
fn ring(
    spec: &oracle::NodeSpec,
    inputs: &[Option<&Value>],
    args: &[Option<oracle::Value>],
    out: &Tensor,
    k: usize,
) -> Option<Result<(), Check>> {
    let family = ring_inputs(spec, inputs.len())?;
    let data = match &family {
        Ring::Linear(d) => d.clone(),
        Ring::Bilinear(a, b) => vec![*a, *b],
    };
    let got = integers(out)?;
    let mut exact: Vec<Vec<i128>> = vec![Vec::new(); inputs.len()];
    for &p in &data {
        let Some(Some(Value::Tensor(t))) = inputs.get(p) else {
            return None;
        };
        exact[p] = integers(t)?;
    }
    // The most terms one output element sums: a MatMul's K, a reduction's or a CumSum's length
    // (bounded by the input's size), one product otherwise.
    let terms = match spec.op_type.as_str() {
        "MatMul" => args.first()?.as_ref()?.shape.last().copied().unwrap_or(1),
        _ => exact.iter().map(Vec::len).max().unwrap_or(1).max(1),
    };
    let most = match family {
        Ring::Linear(_) => terms as f64 * 65_535.0,
        Ring::Bilinear(..) => terms as f64 * 65_535.0 * 65_535.0,
    };
    if most >= EXACT_IN_F64 {
        return None;
    }
    // (weight exponent in 16-bit steps, the posed arguments)
    let mut posed: Vec<(usize, Vec<Option<oracle::Value>>)> = Vec::new();
    match family {
        Ring::Linear(d) => {
            for i in 0..4 {
                let mut a = args.to_vec();
                for &p in &d {
                    with_limb(&mut a, &exact, p, i);
                }
                posed.push((i, a));
            }
        }
        Ring::Bilinear(x, y) => {
            for i in 0..4 {
                for j in 0..4 - i {
                    let mut a = args.to_vec();
                    with_limb(&mut a, &exact, x, i);
                    with_limb(&mut a, &exact, y, j);
                    posed.push((i + j, a));
                }
            }
        }
    }
    let mut want: Vec<i128> = Vec::new();
    for (shift, a) in posed {
        let part = match agreed(spec, &a, k, "compute on 16-bit limbs", out) {
            Ok(v) => v,
            Err(c) => return Some(Err(c)),
        };
        if want.is_empty() {
            want = vec![0; part.data.len()];
        }
        for (w, &v) in want.iter_mut().zip(&part.data) {
            if v.fract() != 0.0 || v.abs() >= EXACT_IN_F64 {
                return Some(Err(Check::Unsettled(Unsettled::NotCovered(format!(
                    "{}: a sum of limbs the oracles gave is not an exact integer ({v})",
                    spec.op_type
                )))));
            }
            *w = w.wrapping_add((v as i128) << (16 * shift));
        }
    }
    let want: Vec<i128> = want.into_iter().map(|x| wrap_to(x, out)).collect();
    Some(compare(&got, &want, k))
}

/// The data inputs of an order op (the others are axes, counts or bounds given as they are).
fn order_inputs(op: &str, n_inputs: usize) -> Option<Vec<usize>> {
    Some(match op {
        "Max" | "Min" | "Clip" => (0..n_inputs).collect(),
        "Equal" | "Less" | "Greater" | "LessOrEqual" | "GreaterOrEqual" => vec![0, 1],
        "ReduceMax" | "ReduceMin" | "ArgMax" | "ArgMin" | "TopK" => vec![0],
        _ => return None,
    })
}

/// Judges output `k` of an order op exactly, by rank. `None` where the op is not an order op or a
/// data input is not an integer tensor.
fn order(
    spec: &oracle::NodeSpec,
    inputs: &[Option<&Value>],
    args: &[Option<oracle::Value>],
    out: &Tensor,
    k: usize,
) -> Option<Result<(), Check>> {
    let data = order_inputs(&spec.op_type, inputs.len())?;
    let mut exact: Vec<(usize, Vec<i128>)> = Vec::new();
    for &p in &data {
        match inputs.get(p) {
            Some(Some(Value::Tensor(t))) => exact.push((p, integers(t)?)),
            // An absent optional bound (Clip's min or max).
            Some(None) | None => {}
            Some(Some(_)) => return None,
        }
    }
    let mut values: Vec<i128> = exact.iter().flat_map(|(_, v)| v.iter().copied()).collect();
    values.sort_unstable();
    values.dedup();
    let rank = |x: &i128| values.binary_search(x).map_or(0.0, |r| r as f64 + 1.0);
    let mut ranked = args.to_vec();
    for (p, v) in &exact {
        if let Some(a) = ranked[*p].as_mut() {
            a.data = v.iter().map(rank).collect();
        }
    }
    let answer = match agreed(spec, &ranked, k, "order the ranks of", out) {
        Ok(v) => v,
        Err(c) => return Some(Err(c)),
    };
    let got = exact_values(out)?;
    // A value output holds ranks, mapped back; an index or bool output is compared as it is.
    let is_value = matches!(
        (spec.op_type.as_str(), k),
        ("Max" | "Min" | "Clip" | "ReduceMax" | "ReduceMin", 0) | ("TopK", 0)
    );
    let mut want = Vec::with_capacity(answer.data.len());
    for (index, &v) in answer.data.iter().enumerate() {
        let exact = if is_value {
            (v >= 1.0 && v.fract() == 0.0)
                .then(|| values.get(v as usize - 1).copied())
                .flatten()
        } else {
            (v.fract() == 0.0 && v.abs() < EXACT_IN_F64).then_some(v as i128)
        };
        let Some(exact) = exact else {
            return Some(Err(Check::Unsettled(Unsettled::NotCovered(format!(
                "{} output {k} element {index} is not a rank of an input element",
                spec.op_type
            )))));
        };
        want.push(exact);
    }
    Some(compare(&got, &want, k))
}
