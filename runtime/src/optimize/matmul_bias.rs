//! `matmul-bias`: a MatMul by a constant `[K, N]` weight whose one reader is an Add of a constant
//! `[N]` bias (either operand order) becomes one `com.quorum` MatMulBias (`ops/matmul_bias.rs`).
//!
//! Exporters write every Linear layer with a bias this way (BERT-base: 72 pairs). On an accelerator
//! the Add is a second pass over the product; fused, the GEMM adds the bias as it stores each output
//! (or in its split-K reduction, which reads the partial sums anyway). The arithmetic changes
//! within the GEMM's own bound: the sum `Σ a·b + c` is rounded once or twice, and the oracles judge
//! the fused node as the Gemm it equals. Applied only when every accelerator of the session runs
//! MatMulBias (a node none of them ran would pull the product back to the CPU), and only for f32
//! and f16 weights, the types the GEMM kernels take.
//!
//! CPU sessions apply the same rewrite as `linear-bias`, which keeps the result bit for bit: the
//! CPU's MatMulBias adds the bias in the packed GEMM's epilogue with the Add's own sum (bert_encoder:
//! its twelve bias Adds were 0.37 ms of 8.9).
use std::collections::HashMap;
use std::sync::Arc;

use super::{Rewrite, binary, pinned, producers, readers, sole_reader};
use crate::ir::Graph;
use crate::ops::QUORUM_DOMAIN;
use crate::tensor::{DType, Value};

/// A constant f32 or f16 tensor's dtype and shape.
fn constant<'c>(
    constants: &'c HashMap<String, Arc<Value>>,
    name: &str,
) -> Option<(DType, &'c [usize])> {
    let t = constants.get(name)?.as_tensor()?;
    matches!(t.dtype(), DType::F32 | DType::F16).then(|| (t.dtype(), t.shape()))
}

/// The rewrite, recorded as `pass`: `matmul-bias` for a session with an accelerator (inexact),
/// `linear-bias` for a CPU session (exact: the CPU's MatMulBias is MatMul then Add bit for bit).
pub(super) fn fuse_matmul_bias(
    g: &mut Graph,
    constants: &HashMap<String, Arc<Value>>,
    done: &mut Vec<Rewrite>,
    pass: &'static str,
) {
    let pinned = pinned(g);
    let readers = readers(g);
    let producers = producers(g);
    // (the MatMul's index, the Add's index, the bias).
    let mut fusions: Vec<(usize, usize, String)> = Vec::new();
    for (ia, node) in g.nodes.iter().enumerate() {
        let Some(add) = binary(node, "Add") else {
            continue;
        };
        let found = (0..2).find_map(|k| {
            let product = &add.inputs[k];
            let bias = &add.inputs[1 - k];
            let &im = producers.get(product.as_str())?;
            let mm = binary(&g.nodes[im], "MatMul")?;
            let sole = sole_reader(&pinned, &readers, product) == Some((ia, k));
            let (wd, ws) = constant(constants, &mm.inputs[1])?;
            let (bd, bs) = constant(constants, bias)?;
            (sole && wd == bd && ws.len() == 2 && bs == [ws[1]]).then(|| (im, bias.clone()))
        });
        if let Some((im, bias)) = found {
            fusions.push((im, ia, bias));
        }
    }
    let mut removed = vec![false; g.nodes.len()];
    for (im, ia, bias) in fusions {
        let (a, w, mm_name) = {
            let mm = &g.nodes[im];
            (mm.inputs[0].clone(), mm.inputs[1].clone(), mm.name.clone())
        };
        let n = &mut g.nodes[ia];
        done.push(Rewrite {
            pass,
            detail: format!(
                "MatMul '{mm_name}' + Add '{}' of '{bias}' → MatMulBias '{}'",
                n.name, n.name
            ),
        });
        n.op_type = "MatMulBias".into();
        n.domain = QUORUM_DOMAIN.into();
        n.opset = 1;
        n.inputs = vec![a, w, bias];
        n.attrs.clear();
        removed[im] = true;
    }
    super::remove_nodes(g, |i| removed[i]);
}

#[cfg(test)]
mod tests;
