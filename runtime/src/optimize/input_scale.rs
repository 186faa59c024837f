//! `conv-input-scale`: a Mul whose product only a 1×1 convolution reads, as its input, becomes that
//! convolution's fifth input: a `com.quorum` FusedConv of the Mul's two operands. This is the
//! squeeze-and-excitation block of EfficientNet and MobileNetV3, `Conv1x1(x · s)` with `s` one scale
//! per channel. The f32 kernel multiplies each input row by its scale as the GEMM packs it, the
//! Mul's own products, so the outputs are bit for bit the pair's, and the Mul's pass over the
//! activations (a read and a write of each) is gone. Elsewhere (other shapes, other dtypes, another
//! convolution path) the kernel runs the Mul first (`ops/conv/scale.rs`).
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::{Rewrite, binary, pinned, readers, sole_reader};
use crate::ir::{Attr, Graph};
use crate::ops::QUORUM_DOMAIN;
use crate::tensor::{DType, Value};

pub(super) fn fold_input_scale(
    g: &mut Graph,
    constants: &HashMap<String, Arc<Value>>,
    done: &mut Vec<Rewrite>,
) {
    let pinned = pinned(g);
    let readers = readers(g);
    // (Mul, convolution)
    let mut folds: Vec<(usize, usize)> = Vec::new();
    let mut taken: HashSet<usize> = HashSet::new();
    for (i, n) in g.nodes.iter().enumerate() {
        // Numpy broadcasting (opset 7 on), no legacy `broadcast`/`axis` attributes.
        let Some(mul) = binary(n, "Mul").filter(|m| m.opset >= 7 && m.attrs.is_empty()) else {
            continue;
        };
        if mul.inputs.contains(&mul.outputs[0]) {
            continue;
        }
        let Some((c, 0)) = sole_reader(&pinned, &readers, &mul.outputs[0]) else {
            continue;
        };
        let conv = &g.nodes[c];
        let kind = (conv.domain.as_str(), conv.op_type.as_str());
        let pointwise_f32 = conv
            .inputs
            .get(1)
            .and_then(|w| constants.get(w))
            .and_then(|w| w.as_tensor())
            .is_some_and(|w| w.dtype() == DType::F32 && w.rank() == 4 && w.shape()[2..] == [1, 1]);
        let one_group = match conv.attrs.get("group") {
            None => true,
            Some(Attr::Int(1)) => true,
            Some(_) => false,
        };
        if !matches!(kind, ("", "Conv") | (QUORUM_DOMAIN, "FusedConv"))
            || conv.inputs.len() > 4
            || !pointwise_f32
            || !one_group
            || taken.contains(&c)
        {
            continue;
        }
        taken.insert(c);
        folds.push((i, c));
    }
    if folds.is_empty() {
        return;
    }
    let mut gone = HashSet::new();
    for &(m, c) in &folds {
        let (a, s, mul_name) = {
            let mul = &g.nodes[m];
            (
                mul.inputs[0].clone(),
                mul.inputs[1].clone(),
                mul.name.clone(),
            )
        };
        let conv = &mut g.nodes[c];
        if conv.op_type == "Conv" {
            conv.op_type = "FusedConv".into();
            conv.domain = QUORUM_DOMAIN.into();
            conv.opset = 1;
        }
        conv.inputs[0] = a.clone();
        conv.inputs.resize(4, String::new());
        conv.inputs.push(s.clone());
        done.push(Rewrite {
            pass: "conv-input-scale",
            detail: format!(
                "Mul '{mul_name}' + Conv '{}' → FusedConv(input '{a}' · '{s}')",
                conv.name
            ),
        });
        gone.insert(m);
    }
    super::remove_nodes(g, |i| gone.contains(&i));
}
