//! `gelu`: the five nodes exporters write for the exact GELU before opset 20 — `x/√2` (Div, or Mul by
//! 1/√2), Erf, `+ 1`, `· x` and `· ½` in either order (PyTorch writes `(x · (erf + 1)) · ½`, others
//! `(x · ½) · (erf + 1)`) — become one ONNX Gelu (opset 20, `approximate = "none"`).
//!
//! On an accelerator the five nodes are five launches that each stream the tensor through memory
//! (BERT-base: 60 of its 436 kernels); one Gelu reads and writes it once. The arithmetic changes:
//! the chain rounds five times in f32, Gelu once (every engine's Gelu is accurate to a few ulps of
//! the exact function, as the oracles judge it), so results differ in the last bits — by less than
//! the chain's own error, since `1 + erf(z)` cancels for negative x where Gelu does not. It applies
//! to every session: on the CPU the five passes cost too (bert_encoder's chains took 1.36 ms of its
//! 8.9, the fused Gelu, vectorised, a fraction of that).
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::{Rewrite, binary, pinned, producers, readers, sole_reader};
use crate::ir::{Graph, Node};
use crate::tensor::Value;

/// Whether `name` is a constant float scalar (one element) within `tol` of `want`, or `want` as
/// the constant's own type rounds it: an f16 or bf16 model's √2 is 1.4140625, 1.5e-4 from √2, and
/// its chain divides by that (the fused Gelu's argument then moves by less than a sixth of an f16
/// ulp, far inside the chain's five f16 roundings).
fn is_const(constants: &HashMap<String, Arc<Value>>, name: &str, want: f64, tol: f64) -> bool {
    use crate::tensor::DType;
    constants
        .get(name)
        .and_then(|v| v.as_tensor())
        .filter(|t| t.dtype().is_float() && t.len() == 1)
        .and_then(|t| Some((t.dtype(), t.to_f64_vec().ok()?[0])))
        .is_some_and(|(dtype, v)| {
            let rounded = match dtype {
                DType::F16 => half::f16::from_f64(want).to_f64(),
                DType::BF16 => half::bf16::from_f64(want).to_f64(),
                DType::F32 => want as f32 as f64,
                _ => want,
            };
            v == rounded || (v - want).abs() <= tol
        })
}

/// The input of binary node `n` other than the one at position `k`.
fn other(n: &Node, k: usize) -> &str {
    &n.inputs[1 - k]
}

pub(super) fn fuse_gelu(
    g: &mut Graph,
    constants: &HashMap<String, Arc<Value>>,
    done: &mut Vec<Rewrite>,
) {
    let pinned = pinned(g);
    let readers = readers(g);
    let producers = producers(g);
    let sole = |value: &str| sole_reader(&pinned, &readers, value);
    let sqrt2 = std::f64::consts::SQRT_2;
    // (x, the nodes absorbed, the index of the last, the output).
    let mut fusions: Vec<(String, Vec<usize>, usize, String)> = Vec::new();
    let mut absorbed: HashSet<usize> = HashSet::new();
    for (ie, erf) in g.nodes.iter().enumerate() {
        if erf.op_type != "Erf" || !erf.domain.is_empty() || erf.inputs.len() != 1 {
            continue;
        }
        let [e_out] = erf.outputs.as_slice() else {
            continue;
        };
        // x/√2 as Div(x, √2) or Mul(x, 1/√2) (either order), read by the Erf alone.
        let Some(&id) = producers.get(erf.inputs[0].as_str()) else {
            continue;
        };
        if sole(&erf.inputs[0]) != Some((ie, 0)) {
            continue;
        }
        let x = if let Some(d) = binary(&g.nodes[id], "Div") {
            is_const(constants, &d.inputs[1], sqrt2, 1e-6).then(|| d.inputs[0].clone())
        } else if let Some(m) = binary(&g.nodes[id], "Mul") {
            (0..2)
                .find(|&k| is_const(constants, &m.inputs[1 - k], 1.0 / sqrt2, 1e-6))
                .map(|k| m.inputs[k].clone())
        } else {
            None
        };
        let Some(x) = x.filter(|x| !x.is_empty()) else {
            continue;
        };
        // erf + 1.
        let Some((ia, ka)) = sole(e_out) else {
            continue;
        };
        let Some(add) =
            binary(&g.nodes[ia], "Add").filter(|a| is_const(constants, other(a, ka), 1.0, 0.0))
        else {
            continue;
        };
        let Some((im, km)) = sole(&add.outputs[0]) else {
            continue;
        };
        let Some(m1) = binary(&g.nodes[im], "Mul") else {
            continue;
        };
        let f = other(m1, km);
        let found = if f == x {
            // (x · (erf + 1)) · ½.
            sole(&m1.outputs[0]).and_then(|(ih, kh)| {
                binary(&g.nodes[ih], "Mul")
                    .filter(|h| is_const(constants, other(h, kh), 0.5, 0.0))
                    .map(|h| (vec![id, ie, ia, im, ih], ih, h.outputs[0].clone()))
            })
        } else {
            // (x · ½) · (erf + 1): the half product read by this Mul alone.
            producers.get(f).copied().and_then(|ih| {
                let h = binary(&g.nodes[ih], "Mul")?;
                let kx = h.inputs.iter().position(|s| *s == x)?;
                (is_const(constants, other(h, kx), 0.5, 0.0) && sole(f) == Some((im, 1 - km)))
                    .then(|| (vec![id, ie, ia, ih, im], im, m1.outputs[0].clone()))
            })
        };
        if let Some((nodes, last, out)) = found
            && nodes.iter().all(|n| !absorbed.contains(n))
        {
            absorbed.extend(nodes.iter().copied());
            fusions.push((x, nodes, last, out));
        }
    }
    for (x, nodes, last, out) in &fusions {
        let names: Vec<String> = nodes
            .iter()
            .map(|&n| format!("'{}'", g.nodes[n].name))
            .collect();
        let n = &mut g.nodes[*last];
        n.op_type = "Gelu".into();
        n.domain = String::new();
        n.opset = 20;
        n.inputs = vec![x.clone()];
        n.outputs = vec![out.clone()];
        n.attrs.clear();
        done.push(Rewrite {
            pass: "gelu",
            detail: format!("{} → Gelu '{}' of '{x}'", names.join(" + "), n.name),
        });
        absorbed.remove(last);
    }
    super::remove_nodes(g, |i| absorbed.contains(&i));
}
