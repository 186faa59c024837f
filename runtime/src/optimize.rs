//! Graph rewrites at session build. Each rewrite is local and keeps every graph output's name. For
//! sessions whose nodes all run on the CPU (an accelerator's backend claims the model's own ops; a
//! rewritten op it does not know would pull nodes off the device), these keep the unrewritten
//! subgraph's result bit for bit:
//!
//! - `identity`: an Identity node, or a Dropout that is the identity in every run (inference mode
//!   known at build, no mask output), is removed and its readers read its input (the kernel copies
//!   the tensor; the rewrite copies nothing).
//! - `qdq-pair`: a QuantizeLinear read only by a DequantizeLinear, each of one constant f32 scale
//!   and integer zero point (a QDQ model's activations), becomes one `com.quorum`
//!   QuantizeDequantize (`qdq.rs`): one pass instead of two and no 8-bit tensor, the pair's own
//!   arithmetic.
//! - `conv-activation`: Conv followed by Relu, LeakyRelu, Sigmoid, HardSwish or Clip, by the
//!   Sigmoid → Mul pair of SiLU, or (f32) by a QuantizeDequantize, becomes one `com.quorum`
//!   FusedConv that applies the activation as each output tile is stored (one pass over the output instead of two). Only where the weight is
//!   a constant f32 tensor (f64 too, except Clip), so that the dtype is known to be one whose fused
//!   result equals the pair's (FusedConv rounds f16 once where the pair rounds twice), and the Conv
//!   output has no other reader.
//! - `conv-residual`: Conv followed by an Add (or two-input Sum) of another tensor — a residual
//!   connection — and optionally by one of those activations becomes one FusedConv whose fourth
//!   input is added after the bias and before the activation (`residual.rs`): in the GEMM's
//!   epilogue as each tile is stored, the same two roundings the Add and the activation make.
//! - `conv-input-scale`: a Mul whose product only a 1×1 Conv (or FusedConv) reads becomes that
//!   FusedConv's fifth input (`input_scale.rs`): a squeeze-and-excitation block's channel scale,
//!   applied by the f32 kernel as the GEMM packs the convolution's input, the Mul's own products.
//! - `linear-bias`: MatMul by a constant weight then Add of a constant bias (a Linear layer)
//!   becomes one `com.quorum` MatMulBias (`matmul_bias.rs`), whose f32 GEMM adds the bias as it
//!   stores each output, the Add's own sum (the device sessions' `matmul-bias`, exact here).
//!
//! And four that change the arithmetic within the op's own accuracy (stated in each module):
//!
//! - `qdq-integer`, only when asked for (`SessionOptions::qdq_integer`, `--qdq-integer`), before
//!   constant folding (which would turn the quantized weights into f32): DequantizeLinear → Conv
//!   or MatMul → [Relu] → QuantizeLinear, a static QDQ model's quantized op, becomes one
//!   QLinearConv or QLinearMatMul on the integers (`qlinear.rs`); the two differ by at most one
//!   level, and only where the exact value lies within the f32 sum's rounding of the edge between
//!   two levels.
//! - `affine-fold`: a Conv followed by inference BatchNormalization, or Mul, Add or Sub by a
//!   per-channel constant, becomes one Conv whose weight and bias absorb them (`affine.rs`); it runs
//!   before `conv-activation`, which can then fuse the activation after the chain.
//! - `affine-chain`: a BatchNormalization no Conv absorbs, the per-channel steps after it (where
//!   the graph fixes its input's rank) and the activation after them become one `com.quorum`
//!   ChannelAffine pass (`affine_chain.rs`, `ops/channel_affine.rs`, each value written once into
//!   uninitialised memory), the composed scale and shift rounded once.
//! - `gelu`: the five-node exact GELU of exporters before opset 20 becomes one Gelu (`gelu.rs`), an
//!   op every engine runs: one pass over the tensor instead of five, rounded once instead of five
//!   times (on the CPU through the vectorised f32 Gelu, `ops/elementwise/unary/error_function.rs`).
//!
//! For sessions with an accelerator, `gelu` and a rewrite to an op the accelerator runs:
//!
//! - `matmul-bias`: MatMul by a constant weight then Add of a constant bias becomes one `com.quorum`
//!   MatMulBias (`matmul_bias.rs`), where every accelerator of the session runs it.
//! - `attention`: MatMul(Q, Kᵀ) → [scale] → [+ mask] → Softmax → MatMul(·, V) becomes one
//!   `com.quorum` FusedAttention (`attention.rs`), where every accelerator of the session runs it;
//!   the oracles judge it as the chain (`verify/attention.rs` in quorum-core).
//!
//! A value read inside a subgraph, or a graph output, is never renamed or removed.
//! `SessionOptions::optimize` (`--no-optimize`) turns the rewrites off; `quorum info` lists them
//! (`Session::rewrites`).
//!
//! How they are checked: `optimize/tests.rs` compares each exact rewrite's session with the plain
//! one bit for bit; the inexact ones ([`INEXACT_PASSES`], `Rewrite::exact`) have tests holding
//! every element to the Conv's or the elementwise bound; and the CPU conformance engine runs every
//! case the rewrites change both ways, bit for bit, or for an inexact pass within 1e-5 of each
//! output's scale. `gelu` and `matmul-bias` replace a chain by one op the oracles judge against
//! that op's own bound (MatMulBias posed as the Gemm it equals, `verify.rs`).
use std::collections::{HashMap, HashSet};

pub(crate) use crate::fold::constants;
use std::sync::Arc;

use quorum_kernels::Activation;

use crate::ir::{Attr, Graph, Node};
use crate::ops::QUORUM_DOMAIN;
use crate::plan::subgraphs;
use crate::tensor::{DType, Value};

/// One rewrite applied: the pass and what it did, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewrite {
    pub pass: &'static str,
    pub detail: String,
}

/// Passes whose result may differ from the unrewritten graph's (each within the bound its module
/// states: the last bits of f32, or one quantization level for `qdq-integer`); every other pass
/// keeps every output bit for bit.
pub const INEXACT_PASSES: &[&str] = &[
    "qdq-integer",
    "affine-fold",
    "affine-chain",
    "gelu",
    "matmul-bias",
    "attention",
];

impl Rewrite {
    /// Whether the rewrite keeps the graph's outputs bit for bit.
    pub fn exact(&self) -> bool {
        !INEXACT_PASSES.contains(&self.pass)
    }
}

impl std::fmt::Display for Rewrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.pass, self.detail)
    }
}

/// `graph` rewritten, with the rewrites applied, or `None` when nothing applies. `constants`: the
/// values no run can change (initializers a caller cannot override, folded values).
pub(crate) fn optimize(
    graph: &Graph,
    constants: &HashMap<String, Arc<Value>>,
) -> Option<(Graph, Vec<Rewrite>)> {
    let mut g = graph.clone();
    let mut done = Vec::new();
    remove_identities(&mut g, &mut done);
    qdq::fuse_qdq_pairs(&mut g, constants, &mut done);
    gelu::fuse_gelu(&mut g, constants, &mut done);
    matmul_bias::fuse_matmul_bias(&mut g, constants, &mut done, "linear-bias");
    // The fold adds initializers (the folded weights and biases) that the fusion must see.
    let mut constants = constants.clone();
    affine::fold_affine(&mut g, &mut constants, &mut done);
    affine_chain::fuse_affine_chains(&mut g, &mut constants, &mut done);
    residual::fuse_conv_residual(&mut g, &constants, &mut done);
    fuse_conv_activation(&mut g, &constants, &mut done);
    input_scale::fold_input_scale(&mut g, &constants, &mut done);
    (!done.is_empty()).then_some((g, done))
}

/// The rewrites made before constant folding (`qdq-integer`), or `None` when nothing applies.
/// `runs(op)`: whether every engine of the session runs that default-domain op.
pub(crate) fn before_folding(
    graph: &Graph,
    constants: &HashMap<String, Arc<Value>>,
    runs: &dyn Fn(&str) -> bool,
) -> Option<(Graph, Vec<Rewrite>)> {
    let mut g = graph.clone();
    let mut done = Vec::new();
    qlinear::fuse_integer(&mut g, constants, runs, &mut done);
    (!done.is_empty()).then_some((g, done))
}

/// The rewrites for a session with an accelerator, or `None` when nothing applies. `runs(domain,
/// op)`: whether every accelerator of the session runs that op (a rewrite to an op one of them
/// lacks would move work off it).
pub(crate) fn optimize_for_devices(
    graph: &Graph,
    constants: &HashMap<String, Arc<Value>>,
    runs: &dyn Fn(&str, &str) -> bool,
) -> Option<(Graph, Vec<Rewrite>)> {
    let mut g = graph.clone();
    let mut done = Vec::new();
    gelu::fuse_gelu(&mut g, constants, &mut done);
    if runs(QUORUM_DOMAIN, "MatMulBias") {
        matmul_bias::fuse_matmul_bias(&mut g, constants, &mut done, "matmul-bias");
    }
    // `QUORUM_FUSED_ATTENTION=off` keeps the chain (to time the fused kernel against it).
    let attention_off = std::env::var("QUORUM_FUSED_ATTENTION").is_ok_and(|v| v == "off");
    if runs(QUORUM_DOMAIN, quorum_core::ops::attention::fused::OP) && !attention_off {
        attention::fuse_attention(&mut g, constants, &mut done);
    }
    (!done.is_empty()).then_some((g, done))
}

/// Names a rewrite must not rename or remove: graph outputs and whatever a subgraph reads (it
/// may read any name of an enclosing scope).
fn pinned(g: &Graph) -> HashSet<String> {
    fn walk(g: &Graph, out: &mut HashSet<String>) {
        for n in &g.nodes {
            for sg in subgraphs(n) {
                for m in &sg.nodes {
                    out.extend(m.inputs.iter().filter(|s| !s.is_empty()).cloned());
                }
                out.extend(sg.outputs.iter().map(|o| o.name.clone()));
                walk(sg, out);
            }
        }
    }
    let mut out: HashSet<String> = g.outputs.iter().map(|o| o.name.clone()).collect();
    walk(g, &mut out);
    out
}

/// The one reader of `value` (node index, input position), when it has exactly one and is neither
/// a graph output nor read by a subgraph (`pinned`): a value a rewrite may absorb.
fn sole_reader(
    pinned: &HashSet<String>,
    readers: &HashMap<&str, Vec<(usize, usize)>>,
    value: &str,
) -> Option<(usize, usize)> {
    if pinned.contains(value) {
        return None;
    }
    match readers.get(value).map(Vec::as_slice) {
        Some(&[r]) => Some(r),
        _ => None,
    }
}

/// `n` when it is a default-domain node of `op` with two non-empty inputs and one output.
fn binary<'g>(n: &'g Node, op: &str) -> Option<&'g Node> {
    (n.op_type == op
        && n.domain.is_empty()
        && n.inputs.len() == 2
        && n.inputs.iter().all(|s| !s.is_empty())
        && n.outputs.len() == 1
        && !n.outputs[0].is_empty())
    .then_some(n)
}

/// Removes the nodes whose index (before the removal) `gone` names.
fn remove_nodes(g: &mut Graph, gone: impl Fn(usize) -> bool) {
    let mut k = 0;
    g.nodes.retain(|_| {
        k += 1;
        !gone(k - 1)
    });
}

/// The index of the node that writes each value.
fn producers(g: &Graph) -> HashMap<&str, usize> {
    let mut p = HashMap::new();
    for (i, n) in g.nodes.iter().enumerate() {
        for o in &n.outputs {
            if !o.is_empty() {
                p.insert(o.as_str(), i);
            }
        }
    }
    p
}

/// Readers of each value: (node index, input position).
fn readers(g: &Graph) -> HashMap<&str, Vec<(usize, usize)>> {
    let mut r: HashMap<&str, Vec<(usize, usize)>> = HashMap::new();
    for (i, n) in g.nodes.iter().enumerate() {
        for (k, name) in n.inputs.iter().enumerate() {
            if !name.is_empty() {
                r.entry(name.as_str()).or_default().push((i, k));
            }
        }
    }
    r
}

fn remove_identities(g: &mut Graph, done: &mut Vec<Rewrite>) {
    let pinned = pinned(g);
    let read = readers(g);
    let mut rename: HashMap<String, String> = HashMap::new();
    let mut removed = vec![false; g.nodes.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        let identity = n.op_type == "Identity"
            && n.domain.is_empty()
            && n.inputs.len() == 1
            && n.outputs.len() == 1;
        // A mask nothing reads is one nobody will miss.
        let unread =
            |o: &String| o.is_empty() || (!pinned.contains(o) && !read.contains_key(o.as_str()));
        if !(identity || (inference_dropout(n) && n.outputs.iter().skip(1).all(unread))) {
            continue;
        }
        let (Some(src), Some(out)) = (n.inputs.first(), n.outputs.first()) else {
            continue;
        };
        if src.is_empty() || out.is_empty() || pinned.contains(out) {
            continue;
        }
        rename.insert(out.clone(), src.clone());
        removed[i] = true;
        done.push(Rewrite {
            pass: "identity",
            detail: format!("removed {} '{}' ('{out}' is '{src}')", n.op_type, n.name),
        });
    }
    if rename.is_empty() {
        return;
    }
    remove_nodes(g, |i| removed[i]);
    // Chains of Identity resolve to the first input, whatever order the nodes are listed in (the
    // plan compiled before the rewrites has ruled out cycles; the bound is a guard all the same).
    let resolve = |name: &String| {
        let mut to = name;
        for _ in 0..=rename.len() {
            match rename.get(to) {
                Some(next) => to = next,
                None => break,
            }
        }
        to.clone()
    };
    for n in &mut g.nodes {
        for name in &mut n.inputs {
            if rename.contains_key(name) {
                *name = resolve(name);
            }
        }
    }
}

/// A Dropout that is the identity whatever the run: inference mode known at build (opset 12 and
/// later: neither ratio nor training_mode given; 7–11: always; before 7: `is_test` set). Its kernel
/// copies the input then, as Identity's does. (The caller checks that no one reads its mask.)
fn inference_dropout(n: &Node) -> bool {
    let inference = match n.opset {
        o if o >= 12 => n.inputs.iter().skip(1).all(|i| i.is_empty()),
        7..=11 => true,
        _ => matches!(n.attrs.get("is_test"), Some(Attr::Int(t)) if *t != 0),
    };
    n.op_type == "Dropout" && n.domain.is_empty() && inference
}

/// The activation node `act` applies to its first input, when FusedConv can apply it to a Conv
/// output of dtype `dtype` bit for bit.
pub(super) fn activation_of(
    act: &Node,
    dtype: DType,
    constants: &HashMap<String, Arc<Value>>,
) -> Option<Activation> {
    if act.domain == QUORUM_DOMAIN && act.op_type == quorum_core::ops::quantize::fake::OP {
        // The pair's output is f32 whatever its input's type: only an f32 Conv's output matches.
        let Some(Attr::Floats(p)) = act.attrs.get("params") else {
            return None;
        };
        return (dtype == DType::F32)
            .then(|| quorum_core::ops::quantize::fake::from_params(p).ok())?
            .map(Activation::FakeQuant);
    }
    if !act.domain.is_empty() {
        return None;
    }
    let float_attr = |name: &str| match act.attrs.get(name) {
        None => Some(None),
        Some(Attr::Float(v)) => Some(Some(*v)),
        Some(_) => None,
    };
    match act.op_type.as_str() {
        "Relu" => Some(Activation::Relu),
        "Sigmoid" => Some(Activation::Sigmoid),
        "HardSwish" => Some(Activation::HardSwish),
        "LeakyRelu" => Some(Activation::LeakyRelu {
            alpha: float_attr("alpha")?.unwrap_or(0.01),
        }),
        "Clip" if dtype == DType::F32 => {
            if act.opset < 11 {
                return Some(Activation::Clip {
                    lo: float_attr("min")?.unwrap_or(f32::MIN),
                    hi: float_attr("max")?.unwrap_or(f32::MAX),
                });
            }
            let bound = |k: usize, absent: f32| -> Option<f32> {
                match act.inputs.get(k).map(String::as_str) {
                    None | Some("") => Some(absent),
                    Some(name) => {
                        let t = constants.get(name)?.as_tensor()?;
                        (t.dtype() == DType::F32 && t.len() == 1)
                            .then(|| t.to_f64_vec().ok()?.first().map(|&v| v as f32))?
                    }
                }
            };
            Some(Activation::Clip {
                lo: bound(1, f32::NEG_INFINITY)?,
                hi: bound(2, f32::INFINITY)?,
            })
        }
        _ => None,
    }
}

/// The name and parameters FusedConv's attributes give `act`.
pub(super) fn activation_attrs(act: Activation) -> (&'static str, Vec<f32>) {
    match act {
        Activation::None => ("", vec![]),
        Activation::Relu => ("Relu", vec![]),
        Activation::Sigmoid => ("Sigmoid", vec![]),
        Activation::HardSwish => ("HardSwish", vec![]),
        Activation::Silu => ("Silu", vec![]),
        Activation::LeakyRelu { alpha } => ("LeakyRelu", vec![alpha]),
        Activation::Clip { lo, hi } => ("Clip", vec![lo, hi]),
        Activation::FakeQuant(q) => ("FakeQuant", quorum_core::ops::quantize::fake::params(q)),
    }
}

fn fuse_conv_activation(
    g: &mut Graph,
    constants: &HashMap<String, Arc<Value>>,
    done: &mut Vec<Rewrite>,
) {
    let pinned = pinned(g);
    let readers = readers(g);
    // Conv node index → (activation, the nodes it absorbs, the output the fused node writes).
    let mut fusions: Vec<(usize, Activation, Vec<usize>, String)> = Vec::new();
    let mut absorbed: HashSet<usize> = HashSet::new();
    for (i, conv) in g.nodes.iter().enumerate() {
        if conv.op_type != "Conv" || !conv.domain.is_empty() || conv.outputs.len() != 1 {
            continue;
        }
        let y = &conv.outputs[0];
        let dtype = conv
            .inputs
            .get(1)
            .and_then(|w| constants.get(w))
            .and_then(|w| w.as_tensor())
            .map(|w| w.dtype());
        let Some(dtype @ (DType::F32 | DType::F64)) = dtype else {
            continue;
        };
        if y.is_empty() || pinned.contains(y) {
            continue;
        }
        let users = readers.get(y.as_str()).cloned().unwrap_or_default();
        let single_output = |n: &Node| n.outputs.len() == 1 && !n.outputs[0].is_empty();
        let fusion = match users.as_slice() {
            [(a, 0)] if single_output(&g.nodes[*a]) => {
                activation_of(&g.nodes[*a], dtype, constants)
                    .map(|act| (act, vec![*a], g.nodes[*a].outputs[0].clone()))
            }
            // SiLU: y → Sigmoid → s, Mul(y, s) (either order), s read by the Mul alone.
            [(p, kp), (q, kq)] => {
                let (s, m) = if g.nodes[*p].op_type == "Sigmoid" {
                    ((*p, *kp), (*q, *kq))
                } else {
                    ((*q, *kq), (*p, *kp))
                };
                let (sn, mn) = (&g.nodes[s.0], &g.nodes[m.0]);
                let s_out = sn.outputs.first().cloned().unwrap_or_default();
                let silu = s.1 == 0
                    && sn.op_type == "Sigmoid"
                    && sn.domain.is_empty()
                    && single_output(sn)
                    && !pinned.contains(&s_out)
                    && readers.get(s_out.as_str()).map(Vec::as_slice) == Some(&[(m.0, 1 - m.1)])
                    && mn.op_type == "Mul"
                    && mn.domain.is_empty()
                    && mn.inputs.len() == 2
                    && single_output(mn);
                silu.then(|| (Activation::Silu, vec![s.0, m.0], mn.outputs[0].clone()))
            }
            _ => None,
        };
        if let Some((act, nodes, out)) = fusion
            && nodes.iter().all(|n| !absorbed.contains(n))
        {
            absorbed.extend(nodes.iter().copied());
            fusions.push((i, act, nodes, out));
        }
    }
    if fusions.is_empty() {
        return;
    }
    for (i, act, nodes, out) in &fusions {
        let (name, params) = activation_attrs(*act);
        let names: Vec<String> = nodes.iter().map(|&n| g.nodes[n].name.clone()).collect();
        let conv = &mut g.nodes[*i];
        conv.op_type = "FusedConv".into();
        conv.domain = QUORUM_DOMAIN.into();
        conv.opset = 1;
        conv.outputs = vec![out.clone()];
        conv.attrs
            .insert("activation".into(), Attr::String(name.as_bytes().to_vec()));
        if !params.is_empty() {
            conv.attrs
                .insert("activation_params".into(), Attr::Floats(params));
        }
        done.push(Rewrite {
            pass: "conv-activation",
            detail: format!(
                "Conv '{}' + {} → FusedConv({name})",
                conv.name,
                names
                    .iter()
                    .map(|n| format!("'{n}'"))
                    .collect::<Vec<_>>()
                    .join(" + ")
            ),
        });
    }
    remove_nodes(g, |i| absorbed.contains(&i));
}

pub(crate) mod affine;
mod affine_chain;
mod attention;
mod gelu;
mod input_scale;
#[cfg(test)]
mod input_scale_tests;
mod matmul_bias;
mod qdq;
mod qlinear;
mod residual;

#[cfg(test)]
mod tests;
