//! `qdq-integer`: a static QDQ model's quantized Conv or MatMul computed on its integers.
//!
//! onnxruntime's quantizer writes a quantized convolution as DequantizeLinear(x) and
//! DequantizeLinear(w) into an f32 Conv whose output one QuantizeLinear reads:
//!
//! ```text
//! xq → DequantizeLinear ─┐
//! wq → DequantizeLinear ─┼→ Conv → [Relu] → QuantizeLinear → yq
//! bq → DequantizeLinear ─┘
//! ```
//!
//! Computed as written, that is two passes over the activation and an f32 convolution. This pass
//! makes it one QLinearConv (one QLinearMatMul for a MatMul) reading `xq`, `wq` and `bq` and
//! writing `yq`: the integer kernels of the QOperator form, and what onnxruntime computes by
//! default. It runs only when the session asks for it (`SessionOptions::qdq_integer`,
//! `--qdq-integer`), because it changes results (below) and because it is not always the faster
//! on this project's 2-core CPU (AVX-512 VNNI, 2 threads, medians against the f32 chain, whose
//! quantization pairs `qdq-pair` fuses into the convolutions' stores):
//!
//! | model | f32 chain | integers | onnxruntime |
//! |---|---:|---:|---:|
//! | dense CNN, 224×224 (`benches/zoo/int8_cpu.py`) | 16.8 ms | 9.8 ms | 4.6 ms |
//! | feed-forward stack (same script) | 12.6 ms | 4.7 ms | 3.3 ms |
//! | zoo slice MobileNet-V3-small, 224×224 | 0.91 ms | 1.42 ms | 0.83 ms |
//!
//! The MobileNet's convolutions are narrow (8 to 144 channels), so the integer products are no
//! faster than the f32 ones, and every activation between them (HardSwish, the squeeze-excitation
//! scale, the residual Add) then costs a DequantizeLinear and a QuantizeLinear of its own.
//!
//! **What it changes.** Both forms approximate the same real number, the convolution of the
//! dequantized values over the output scale, v = S·xs·ws/ys with S = Σ(xq−xz)(wq−wz) + bq exact in
//! integers. The integer form computes S exactly and multiplies it by the multiplier
//! fl(fl(xs·ws)/ys) (relative error within 4u of v, u = 2⁻²⁴, with the f32 product of the
//! requantization). The f32 form's sum of K products and the bias is within γ_{K+1}·T of the real
//! one, T the sum of the terms' magnitudes, and its division by ys adds u·|v|. Each rounds to the
//! nearest level, so **the two outputs differ by at most one level, and only where v + yz lies
//! within δ = (K+2)·u·T/ys + 5u·|v| of a half-integer** (the edge between two levels). Away from
//! edges they are equal. `qlinear/tests.rs` checks every element of random convolutions and
//! products against exactly that, computing S, T and v in f64 on the test's own loops.
//!
//! Matched only where the rewrite's meaning is certain:
//! - the DequantizeLinear of x has one constant f32 scale and one constant u8 or i8 zero point;
//! - the weight is a constant u8 or i8 tensor; its scale is one f32 or, for a Conv, one per output
//!   channel (axis 0), and its zero point likewise, or absent;
//! - the bias (a Conv's third input), when present, is the DequantizeLinear of a constant i32
//!   vector whose scale is bit for bit the f32 product xs·ws per channel and whose zero point is
//!   absent or zero: QLinearConv's bias convention, which onnxruntime's quantizer writes;
//! - the Conv's (MatMul's) output is read only by the QuantizeLinear (one constant f32 scale, one
//!   constant u8 or i8 zero point), or only by a Relu read only by it, when that zero point is its
//!   type's minimum, where the QuantizeLinear's clamp makes the Relu's work (both map every negative
//!   value to the minimum level);
//! - a MatMul's scales and zero points are all scalars;
//! - the Conv is not depthwise (one input channel per group): there the f32 chain, whose
//!   quantization the Conv applies as it stores (`qdq-pair`, `conv-activation`), is the faster
//!   (the zoo slice's MobileNet-V3-small at 224×224: 0.87 ms in f32, 1.61 ms with its depthwise
//!   convolutions on the integers too, against 1.42 ms with them in f32).
//!
//! The DequantizeLinear nodes whose values nothing reads any more go too. It runs before constant
//! folding (which would otherwise turn the weight's DequantizeLinear into an f32 tensor and lose its
//! integers), and for an accelerator's session only where every accelerator runs the op.
//! `QUORUM_QDQ_INTEGER=on|off` overrides the session's choice (to time both forms).
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::qdq::{int_attr, only};
use super::{Rewrite, pinned, producers, readers, sole_reader};
use crate::ir::{Graph, Node};
use crate::tensor::{DType, Tensor, Value};

pub(super) const PASS: &str = "qdq-integer";

/// A DequantizeLinear's inputs: the quantized value, its scale and zero point (names), and axis.
struct Dequant<'g> {
    q: &'g str,
    scale: &'g str,
    zero: Option<&'g str>,
    axis: i64,
}

fn plain<'g>(n: &'g Node, op: &str) -> Option<&'g Node> {
    (n.op_type == op
        && n.domain.is_empty()
        && n.outputs.len() == 1
        && !n.outputs[0].is_empty()
        && n.inputs.first().is_some_and(|s| !s.is_empty()))
    .then_some(n)
}

/// `n` as a plain DequantizeLinear to f32 (no blocks).
fn dequant(n: &Node) -> Option<Dequant<'_>> {
    let n = plain(n, "DequantizeLinear")?;
    if !(2..=3).contains(&n.inputs.len())
        || n.inputs[1].is_empty()
        || !only(n, &["axis", "block_size", "output_dtype"])
        || int_attr(n, "block_size", 0)? != 0
        || !matches!(int_attr(n, "output_dtype", 0)?, 0 | 1)
    {
        return None;
    }
    Some(Dequant {
        q: &n.inputs[0],
        scale: &n.inputs[1],
        zero: n
            .inputs
            .get(2)
            .filter(|s| !s.is_empty())
            .map(String::as_str),
        axis: int_attr(n, "axis", 1)?,
    })
}

struct Consts<'a>(&'a HashMap<String, Arc<Value>>);

impl Consts<'_> {
    fn tensor(&self, name: &str) -> Option<&Tensor> {
        self.0.get(name)?.as_tensor()
    }

    /// The f32 values of constant `name` when it is an f32 tensor of `len` elements (rank ≤ 1).
    fn f32s(&self, name: &str, len: usize) -> Option<Vec<f32>> {
        let t = self.tensor(name)?;
        (t.dtype() == DType::F32 && t.len() == len && t.rank() <= 1).then_some(())?;
        Some(t.to_f64_vec().ok()?.iter().map(|&v| v as f32).collect())
    }

    /// The one value of constant `name` when it is a one-element u8 or i8 tensor.
    fn zero_8bit(&self, name: &str) -> Option<(DType, i64)> {
        let t = self.tensor(name)?;
        (matches!(t.dtype(), DType::U8 | DType::I8) && t.len() == 1).then_some(())?;
        Some((t.dtype(), *t.to_f64_vec().ok()?.first()? as i64))
    }
}

/// A plain QuantizeLinear to 8 bits with constant scalar parameters: (scale name, zero point
/// name, zero point's type and value).
fn quant<'g>(n: &'g Node, c: &Consts) -> Option<(&'g str, &'g str, DType, i64)> {
    let n = plain(n, "QuantizeLinear")?;
    if n.inputs.len() != 3
        || !only(n, &["axis", "saturate", "block_size", "output_dtype"])
        || int_attr(n, "block_size", 0)? != 0
    {
        return None;
    }
    c.f32s(&n.inputs[1], 1)?;
    let (d, z) = c.zero_8bit(&n.inputs[2])?;
    let code = int_attr(n, "output_dtype", 0)?;
    if code != 0 && DType::from_onnx(i32::try_from(code).ok()?) != Some(d) {
        return None;
    }
    Some((&n.inputs[1], &n.inputs[2], d, z))
}

/// The QuantizeLinear that alone reads `value` (directly, or through a Relu its clamp makes
/// redundant): (its node index, the Relu's index if any).
fn quantizer(
    g: &Graph,
    value: &str,
    c: &Consts,
    pinned: &HashSet<String>,
    readers: &HashMap<&str, Vec<(usize, usize)>>,
) -> Option<(usize, Option<usize>)> {
    let (r, 0) = sole_reader(pinned, readers, value)? else {
        return None;
    };
    let n = &g.nodes[r];
    if quant(n, c).is_some() {
        return Some((r, None));
    }
    plain(n, "Relu").filter(|n| n.inputs.len() == 1)?;
    let (q, 0) = sole_reader(pinned, readers, &n.outputs[0])? else {
        return None;
    };
    let (_, _, d, z) = quant(&g.nodes[q], c)?;
    let minimum = if d == DType::U8 { 0 } else { -128 };
    (z == minimum).then_some((q, Some(r)))
}

/// The rewrite of node `i` (a Conv or MatMul): the new node's inputs and the nodes it replaces.
struct Plan {
    conv: usize,
    inputs: Vec<String>,
    output: String,
    /// The QuantizeLinear and Relu it absorbs.
    absorbed: Vec<usize>,
    /// DequantizeLinear nodes it reads past (removed when nothing else reads them).
    past: Vec<usize>,
    /// A zero point to add as an initializer: (name, type).
    zero: Option<(String, DType)>,
}

fn plan(
    g: &Graph,
    i: usize,
    c: &Consts,
    pinned: &HashSet<String>,
    readers: &HashMap<&str, Vec<(usize, usize)>>,
    producers: &HashMap<&str, usize>,
) -> Option<Plan> {
    let n = &g.nodes[i];
    let is_conv = n.op_type == "Conv";
    if !n.domain.is_empty() || n.outputs.len() != 1 || n.outputs[0].is_empty() {
        return None;
    }
    let arity = match n.op_type.as_str() {
        "Conv" => 2..=3,
        "MatMul" => 2..=2,
        _ => return None,
    };
    if !arity.contains(&n.inputs.len()) || n.inputs[..2].iter().any(String::is_empty) {
        return None;
    }
    let source = |k: usize| -> Option<(usize, Dequant)> {
        let name = n.inputs.get(k).filter(|s| !s.is_empty())?;
        let &p = producers.get(name.as_str())?;
        Some((p, dequant(&g.nodes[p])?))
    };
    // x: a runtime (or constant) 8-bit tensor with scalar scale and zero point.
    let (px, x) = source(0)?;
    c.f32s(x.scale, 1)?;
    c.zero_8bit(x.zero?)?;
    // w: a constant 8-bit tensor, scale per tensor or (Conv) per output channel.
    let (pw, w) = source(1)?;
    let wt = c.tensor(w.q)?;
    let wd = wt.dtype();
    if !matches!(wd, DType::U8 | DType::I8) || (is_conv && wt.rank() < 3) {
        return None;
    }
    // A depthwise convolution (one input channel per group) stays in f32: its integer form runs
    // through the same f32 kernel (`int8/depthwise.rs` in quorum-core) with passes to center,
    // convert and requantize besides, where the f32 chain's quantization is fused into the store.
    if is_conv && int_attr(n, "group", 1)? > 1 && wt.shape()[1] == 1 {
        return None;
    }
    let m = if is_conv { wt.shape()[0] } else { 1 };
    let rank = wt.rank() as i64;
    let ws = match c.f32s(w.scale, 1) {
        Some(s) => vec![s[0]; m],
        None if is_conv && (w.axis == 0 || w.axis == -rank) => c.f32s(w.scale, m)?,
        None => return None,
    };
    if let Some(z) = w.zero {
        let t = c.tensor(z)?;
        if t.dtype() != wd || !(t.len() == 1 || (is_conv && t.len() == m && t.rank() == 1)) {
            return None;
        }
    }
    let xs = c.f32s(x.scale, 1)?[0];
    let mut past = vec![px, pw];
    // b: i32 levels of scale xs·ws (f32, per channel), zero point zero.
    let bias = match source(2) {
        None if n.inputs.get(2).is_none_or(String::is_empty) => None,
        None => return None,
        Some((pb, b)) => {
            let bt = c.tensor(b.q)?;
            if bt.dtype() != DType::I32 || bt.len() != m || bt.rank() != 1 {
                return None;
            }
            let bs = match c.f32s(b.scale, 1) {
                Some(s) => vec![s[0]; m],
                None => c.f32s(b.scale, m)?,
            };
            if bs
                .iter()
                .zip(&ws)
                .any(|(b, w)| b.to_bits() != (xs * w).to_bits())
            {
                return None;
            }
            if let Some(z) = b.zero
                && c.tensor(z)?.to_f64_vec().ok()?.iter().any(|&v| v != 0.0)
            {
                return None;
            }
            past.push(pb);
            Some(b.q.to_string())
        }
    };
    let (q, relu) = quantizer(g, &n.outputs[0], c, pinned, readers)?;
    let (ys, yz, _, _) = quant(&g.nodes[q], c)?;
    let zero = match w.zero {
        Some(_) => None,
        None => Some((format!("{}__{PASS}_zero_point", w.q), wd)),
    };
    let wz = w
        .zero
        .map(str::to_string)
        .unwrap_or_else(|| zero.as_ref().map(|z| z.0.clone()).unwrap_or_default());
    let mut inputs = vec![
        x.q.to_string(),
        x.scale.to_string(),
        x.zero?.to_string(),
        w.q.to_string(),
        w.scale.to_string(),
        wz,
        ys.to_string(),
        yz.to_string(),
    ];
    inputs.extend(bias);
    Some(Plan {
        conv: i,
        inputs,
        output: g.nodes[q].outputs[0].clone(),
        absorbed: [Some(q), relu].into_iter().flatten().collect(),
        past,
        zero,
    })
}

/// Applies the pass to `g` (before constant folding). `runs(op)`: whether the session's engines
/// run `op` (QLinearConv, QLinearMatMul).
pub(super) fn fuse_integer(
    g: &mut Graph,
    constants: &HashMap<String, Arc<Value>>,
    runs: &dyn Fn(&str) -> bool,
    done: &mut Vec<Rewrite>,
) {
    let c = Consts(constants);
    let pinned = pinned(g);
    let plans: Vec<Plan> = {
        let readers = readers(g);
        let producers = producers(g);
        (0..g.nodes.len())
            .filter_map(|i| plan(g, i, &c, &pinned, &readers, &producers))
            .filter(|p| runs(target(&g.nodes[p.conv])))
            .collect()
    };
    if plans.is_empty() {
        return;
    }
    let mut drop = vec![false; g.nodes.len()];
    let mut past = HashSet::new();
    for p in plans {
        if let Some((name, d)) = &p.zero {
            let z = match d {
                DType::U8 => Tensor::U8(ndarray::ArrayD::from_elem(ndarray::IxDyn(&[]), 0)),
                _ => Tensor::I8(ndarray::ArrayD::from_elem(ndarray::IxDyn(&[]), 0)),
            };
            g.initializers
                .insert(name.clone(), Arc::new(Value::Tensor(z)));
        }
        let absorbed: Vec<String> = p
            .absorbed
            .iter()
            .map(|&k| g.nodes[k].name.clone())
            .collect();
        let n = &mut g.nodes[p.conv];
        let op = target(n);
        done.push(Rewrite {
            pass: PASS,
            detail: format!(
                "{} '{}' with {} → {op} on the integers",
                n.op_type,
                n.name,
                absorbed
                    .iter()
                    .map(|a| format!("'{a}'"))
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
        });
        n.op_type = op.into();
        n.inputs = p.inputs;
        n.outputs = vec![p.output];
        for k in p.absorbed {
            drop[k] = true;
        }
        past.extend(p.past);
    }
    // The DequantizeLinear nodes read past, by index before the removal.
    let past: HashSet<String> = past
        .iter()
        .map(|&k| g.nodes[k].outputs[0].clone())
        .collect();
    super::remove_nodes(g, |i| drop[i]);
    remove_unread(g, &pinned, &past);
}

fn target(n: &Node) -> &'static str {
    if n.op_type == "Conv" || n.op_type == "QLinearConv" {
        "QLinearConv"
    } else {
        "QLinearMatMul"
    }
}

/// Removes the nodes writing `values` (the DequantizeLinear nodes read past) that no node reads any
/// more and no one else sees.
fn remove_unread(g: &mut Graph, pinned: &HashSet<String>, values: &HashSet<String>) {
    let read: HashSet<String> = readers(g).keys().map(|s| s.to_string()).collect();
    g.nodes.retain(|n| {
        !n.outputs
            .first()
            .is_some_and(|out| values.contains(out) && !read.contains(out) && !pinned.contains(out))
    });
}

#[cfg(test)]
mod tests;
