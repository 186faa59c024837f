//! `qdq-pair`: a QuantizeLinear whose one reader is a DequantizeLinear, both of one f32 scale and
//! one integer zero point given as constants, becomes one `com.quorum` QuantizeDequantize
//! (`quorum_core::ops::quantize::fake`) writing the DequantizeLinear's output.
//!
//! A QDQ model (onnxruntime's quantizer, static or dynamic QDQ format) writes such a pair after
//! nearly every op: MobileNet-V3-small's slice has 110, a quarter of its nodes, and the two passes
//! over each activation took 0.35 ms of its 0.60 (this project's 2-core machine, `quorum bench
//! --profile`). Fused, each activation is read once and written once, and no 8-bit tensor is made.
//! The fused node computes the pair's own arithmetic (QuantizeLinear's f32 path and the fused node
//! both call `quantize_level`; the product is DequantizeLinear's), so the outputs keep every bit.
//!
//! The pair's node then fuses further as an activation (`Activation::FakeQuant`): into the Conv
//! before it (`conv-activation`, the output of a quantized Conv rounded to its levels as each tile
//! is stored) and into ChannelAffine chains, f32 only.
//!
//! Left alone: a QuantizeLinear with other readers or whose output is a graph output, per-axis and
//! blocked scales, scales or zero points a run can change, types other than 8- and 16-bit
//! integers, `precision` or an `output_dtype` other than the zero point's, and a DequantizeLinear
//! whose output is not f32.
use std::collections::HashMap;
use std::sync::Arc;

use quorum_core::ops::quantize::fake;
use quorum_kernels::activation::FakeQuant;

use super::{Rewrite, pinned, producers, readers, sole_reader};
use crate::ir::{Attr, Graph, Node};
use crate::ops::QUORUM_DOMAIN;
use crate::tensor::{DType, Value};

/// One scalar constant of input `k` of `n` (absent: `None` inside `Some`), or `None` when the
/// input is there but not a one-element constant.
fn scalar(
    n: &Node,
    k: usize,
    constants: &HashMap<String, Arc<Value>>,
) -> Option<Option<(DType, f64)>> {
    match n.inputs.get(k).map(String::as_str) {
        None | Some("") => Some(None),
        Some(name) => {
            let t = constants.get(name)?.as_tensor()?;
            (t.len() == 1).then_some(())?;
            Some(Some((t.dtype(), *t.to_f64_vec().ok()?.first()?)))
        }
    }
}

/// The integer attribute `name` of `n` (`default` when absent), `None` when it is not an integer.
pub(super) fn int_attr(n: &Node, name: &str, default: i64) -> Option<i64> {
    match n.attrs.get(name) {
        None => Some(default),
        Some(Attr::Int(v)) => Some(*v),
        Some(_) => None,
    }
}

/// Whether every attribute of `n` is one of `known`.
pub(super) fn only(n: &Node, known: &[&str]) -> bool {
    n.attrs.keys().all(|k| known.contains(&k.as_str()))
}

/// The pair's constants, when `q` → `dq` is a pair this rewrite fuses.
fn pair(q: &Node, dq: &Node, constants: &HashMap<String, Arc<Value>>) -> Option<FakeQuant> {
    let plain = |n: &Node, op: &str| {
        n.op_type == op
            && n.domain.is_empty()
            && (2..=3).contains(&n.inputs.len())
            && n.outputs.len() == 1
            && !n.outputs[0].is_empty()
            && !n.inputs[0].is_empty()
    };
    if !(plain(q, "QuantizeLinear") && plain(dq, "DequantizeLinear")) {
        return None;
    }
    if !only(q, &["axis", "saturate", "block_size", "output_dtype"])
        || !only(dq, &["axis", "block_size", "output_dtype"])
        || int_attr(q, "block_size", 0)? != 0
        || int_attr(dq, "block_size", 0)? != 0
    {
        return None;
    }
    let (Some((DType::F32, s)), Some((DType::F32, ds))) =
        (scalar(q, 1, constants)?, scalar(dq, 1, constants)?)
    else {
        return None;
    };
    let (qz, dz) = (scalar(q, 2, constants)?, scalar(dq, 2, constants)?);
    // The quantized type: the zero point's, else `output_dtype`, else u8 (QuantizeLinear's rule).
    let out = match (qz, int_attr(q, "output_dtype", 0)?) {
        (Some((d, _)), 0) => d,
        (Some((d, _)), code) if DType::from_onnx(i32::try_from(code).ok()?) == Some(d) => d,
        (None, 0) => DType::U8,
        (None, code) => DType::from_onnx(i32::try_from(code).ok()?)?,
        _ => return None,
    };
    let (lo, hi) = match out {
        DType::U8 => (0.0, 255.0),
        DType::I8 => (-128.0, 127.0),
        DType::U16 => (0.0, 65_535.0),
        DType::I16 => (-32_768.0, 32_767.0),
        _ => return None,
    };
    // DequantizeLinear's zero point has the input's type, and its output is the scale's f32.
    if dz.is_some_and(|(d, _)| d != out) || !matches!(int_attr(dq, "output_dtype", 0)?, 0 | 1) {
        return None;
    }
    fake::from_params(&[
        s as f32,
        qz.map_or(0.0, |z| z.1 as f32),
        lo,
        hi,
        ds as f32,
        dz.map_or(0.0, |z| z.1 as f32),
    ])
    .ok()
}

pub(super) fn fuse_qdq_pairs(
    g: &mut Graph,
    constants: &HashMap<String, Arc<Value>>,
    done: &mut Vec<Rewrite>,
) {
    let pinned = pinned(g);
    let readers = readers(g);
    let producers = producers(g);
    // (QuantizeLinear index, DequantizeLinear index, the pair's constants)
    let mut fusions = Vec::new();
    for (i, dq) in g.nodes.iter().enumerate() {
        if dq.op_type != "DequantizeLinear" || !dq.domain.is_empty() {
            continue;
        }
        let Some(x) = dq.inputs.first() else { continue };
        let Some(&p) = producers.get(x.as_str()) else {
            continue;
        };
        if sole_reader(&pinned, &readers, x) != Some((i, 0)) {
            continue;
        }
        if let Some(q) = pair(&g.nodes[p], dq, constants) {
            fusions.push((p, i, q));
        }
    }
    if fusions.is_empty() {
        return;
    }
    let mut drop = vec![false; g.nodes.len()];
    for &(p, i, q) in &fusions {
        let out = g.nodes[i].outputs[0].clone();
        let dq_name = g.nodes[i].name.clone();
        let node = &mut g.nodes[p];
        done.push(Rewrite {
            pass: "qdq-pair",
            detail: format!(
                "QuantizeLinear '{}' + DequantizeLinear '{dq_name}' → QuantizeDequantize",
                node.name
            ),
        });
        node.op_type = fake::OP.into();
        node.domain = QUORUM_DOMAIN.into();
        node.opset = 1;
        node.inputs.truncate(1);
        node.outputs = vec![out];
        node.attrs = HashMap::from([("params".to_string(), Attr::Floats(fake::params(q)))]);
        drop[i] = true;
    }
    super::remove_nodes(g, |i| drop[i]);
}

#[cfg(test)]
mod tests;
