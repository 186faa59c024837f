//! `com.quorum` FusedAttention judged as the subgraph it replaced: each oracle computes
//! `MatMul(Q, Kᵀ) → scale → + mask → Softmax → MatMul(·, V)` with its own ops, in f64, and the
//! device's output is compared with the result under a bound derived for the chain.
//!
//! ## The bound
//!
//! For an output `o_ic = Σ_j p_ij·v_jc` (row `i` of the scores, column `c` of V), in units of the
//! computed type's ε, to first order (a correct kernel's error; every term is a worst case):
//!
//! - the sum over the `T` keys: `C_T·Σ_j p_ij·|v_jc|`, `C_T = max(C_REDUCE, (T + 2)/2)` as for any
//!   long sum of known length;
//! - each logit `x_ij = f·s_ij + m_ij` (`s` the product of Q and Kᵀ after their own scales, `f`
//!   the scale after it, `m` the mask) off by `δx_ij = |f|·(C_D + 2)·Σ_d|q_id·k_jd| + 2·|x_ij|`
//!   (the dot product's bound, two roundings of the operands for a kernel that folds every scale
//!   into one factor on Q, then one rounding each for the scale and the mask), which moves `p_ij`
//!   by `p_ij·(δx_ij + A_i)`, `A_i = Σ_j p_ij·δx_ij`;
//! - the probabilities' own rounding, relative `E_ij = (T − 1)/2 + 3·T + 2.5·(|d_ij| + W_i) + 8.5`:
//!   Softmax's bound (`quorum_oracle::arbitrate`, "Softmax and LogSoftmax") plus `3·T` for a kernel
//!   that rescales its running sums each time the maximum grows (online softmax: at most one
//!   rescale per key, each an exponential within 3 ulps).
//!
//! - in f16 and bf16 models, the chain's own roundings of its intermediates to the model's type,
//!   each half an ulp of that type, `k` in units of ε (2¹² for f16, 2¹⁵ for bf16, 0 for f32): Q
//!   and Kᵀ after their own scales (`2·k·|f|·Σ_d|q_id·k_jd|`, where they have one), the scores
//!   after the product and after the scale (`2·k·|f·s_ij|`), the logits after the mask
//!   (`k·|x_ij|`), both added to `δx_ij`, and the probabilities (`k` added to `E_ij`). A fused
//!   kernel that keeps them in f32 is more accurate than the chain, and is judged by the chain's
//!   bound, which the CPU's FusedAttention (the chain itself) must meet too.
//!
//! So `|error_ic| ≤ 2·ε·Σ_j p_ij·|v_jc|·(C_T + E_ij + δx_ij + A_i)`, the factor 2 covering the
//! second-order terms as in Softmax's bound; it is handed to the arbitration as the magnitude
//! `m_ic` of a long sum (`C_REDUCE·ε·m_ic`), so the output's own rounding (half an ulp of its type)
//! and the oracles' f64 accuracy are added as for every op. Keys whose probability is 0 in f64
//! (masked by −∞ or by a large negative mask) contribute nothing, whatever their logit. The spread
//! judge does not run: there is no sequential model of the chain.
use std::collections::BTreeMap;

use quorum_oracle as oracle;
use quorum_oracle::Oracle;
use quorum_oracle::arbitrate::{Arithmetic, Bound, C_REDUCE, Class, EngineOutput, Verdict};

use super::{Check, Unsettled, Wrong, oracle_dtype, to_oracle};
use crate::ir::Node;
use crate::ops::attention::fused::{Dims, Form, dims};
use crate::tensor::{Tensor, Value};

fn spec(op: &str, opset: i64, attrs: &[(&str, oracle::Attr)]) -> oracle::NodeSpec {
    oracle::NodeSpec {
        domain: String::new(),
        op_type: op.into(),
        opset,
        attrs: attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect::<BTreeMap<_, _>>(),
        num_outputs: 1,
    }
}

/// A tensor as an f64 value for the oracles: the chain's intermediate results stay unrounded.
fn wide(t: &Tensor) -> Result<oracle::Value, Unsettled> {
    let mut v = to_oracle(t).ok_or_else(|| {
        Unsettled::NotCovered(format!("the oracles take no {} values", t.dtype()))
    })?;
    v.dtype = oracle::DType::F64;
    Ok(v)
}

/// What one oracle computed for the chain: the output and, per score, the logit, the probability
/// and the magnitude of the product `Σ_d|q_id·k_jd|`.
struct Chain {
    out: oracle::Value,
    logits: oracle::Value,
    probs: oracle::Value,
    products: Vec<f64>,
    /// Q·Kᵀ itself (unscaled).
    scores: Vec<f64>,
    /// Q·Kᵀ's shape (its batch may be narrower than the logits', which the mask can widen).
    products_shape: Vec<usize>,
}

/// The chain through oracle `o`, each step its own op.
fn chain(
    o: &dyn Oracle,
    form: Form,
    [q, k, v]: [&oracle::Value; 3],
    mask: Option<&oracle::Value>,
) -> Result<Chain, Unsettled> {
    let step = |op: &str, opset: i64, attrs: &[(&str, oracle::Attr)], ins: Vec<oracle::Value>| {
        let s = spec(op, opset, attrs);
        o.supports(&s)
            .map_err(|e| Unsettled::NotCovered(format!("{}: {e}", o.name())))?;
        let ins: Vec<Option<oracle::Value>> = ins.into_iter().map(Some).collect();
        let mut out = o.evaluate(&s, &ins).map_err(|e| match e {
            oracle::OracleError::Unsupported(m) => {
                Unsettled::NotCovered(format!("{}: {op}: {m}", o.name()))
            }
            oracle::OracleError::Invalid(m) => {
                Unsettled::InputsRejected(format!("{}: {op}: {m}", o.name()))
            }
        })?;
        if out.is_empty() {
            return Err(Unsettled::NotCovered(format!(
                "{}: {op} gave nothing",
                o.name()
            )));
        }
        Ok(out.swap_remove(0))
    };
    let kt = if form.transpose_k {
        let r = k.shape.len() as i64;
        let mut perm: Vec<i64> = (0..r).collect();
        perm.swap(r as usize - 2, r as usize - 1);
        step(
            "Transpose",
            13,
            &[("perm", oracle::Attr::Ints(perm))],
            vec![k.clone()],
        )?
        .value
    } else {
        k.clone()
    };
    let scalar = |c: f32| oracle::Value {
        dtype: oracle::DType::F64,
        shape: vec![],
        data: vec![c as f64],
    };
    let kt = match form.k_scale {
        Some(c) => step("Mul", 14, &[], vec![kt, scalar(c)])?.value,
        None => kt,
    };
    let q = match form.q_scale {
        Some(c) => step("Mul", 14, &[], vec![q.clone(), scalar(c)])?.value,
        None => q.clone(),
    };
    let scores = step("MatMul", 13, &[], vec![q, kt])?;
    let mut x = scores.value.clone();
    if let Some((s, divide)) = form.scale {
        x = step(
            if divide { "Div" } else { "Mul" },
            14,
            &[],
            vec![x, scalar(s)],
        )?
        .value;
    }
    if let Some(m) = mask {
        x = step("Add", 14, &[], vec![x, m.clone()])?.value;
    }
    let probs = step("Softmax", 13, &[], vec![x.clone()])?.value;
    let out = step("MatMul", 13, &[], vec![probs.clone(), v.clone()])?.value;
    Ok(Chain {
        out,
        logits: x,
        probs,
        products_shape: scores.value.shape,
        products: scores.magnitude,
        scores: scores.value.data,
    })
}

/// The flat index, in a tensor of batch dims `inner` (right-aligned, broadcast where 1), of batch
/// element `b` of the output's batch dims `outer`.
fn batch_index(outer: &[usize], b: usize, inner: &[usize]) -> usize {
    let mut rest = b;
    let (mut idx, mut stride) = (0, 1);
    for (a, &n) in outer.iter().enumerate().rev() {
        let coord = rest % n;
        rest /= n;
        let lead = outer.len() - inner.len();
        if a >= lead {
            let m = inner[a - lead];
            if m != 1 {
                idx += coord * stride;
            }
            stride *= m;
        }
    }
    idx
}

/// The magnitude the bound is derived from, per output element (module doc).
fn magnitudes(c: &Chain, dims: &Dims, form: Form, v: &oracle::Value, k_t: f64) -> Vec<f64> {
    let (s, t, dv) = (dims.s, dims.t, dims.dv);
    let nb: usize = dims.batch.iter().product();
    let tf = t as f64;
    let c_t = C_REDUCE.max((tf + 2.0) / 2.0);
    let c_d = C_REDUCE.max((dims.d as f64 + 2.0) / 2.0);
    let f = form.factor().unwrap_or(1.0).abs();
    // Q and Kᵀ each rounded to the model's type after their own scale.
    let pre = if form.prescaled() { 2.0 } else { 0.0 };
    let batch_of = |shape: &[usize]| shape[..shape.len() - 2].to_vec();
    let (lb, vb) = (batch_of(&c.logits.shape), batch_of(&v.shape));
    let pb = batch_of(&c.products_shape);
    let mut out = vec![0.0; nb * s * dv];
    for b in 0..nb {
        let lrow = batch_index(&dims.batch, b, &lb) * s * t;
        let prow = batch_index(&dims.batch, b, &pb) * s * t;
        let vbase = batch_index(&dims.batch, b, &vb) * t * dv;
        for i in 0..s {
            let x = &c.logits.data[lrow + i * t..lrow + (i + 1) * t];
            let p = &c.probs.data[lrow + i * t..lrow + (i + 1) * t];
            let prod = &c.products[prow + i * t..prow + (i + 1) * t];
            let sc = &c.scores[prow + i * t..prow + (i + 1) * t];
            let max = x
                .iter()
                .copied()
                .filter(|v| v.is_finite())
                .fold(f64::NEG_INFINITY, f64::max);
            let live = |j: usize| p[j] > 0.0;
            let dx: Vec<f64> = (0..t)
                .map(|j| {
                    if live(j) {
                        f * (c_d + 2.0) * prod[j]
                            + 2.0 * x[j].abs()
                            + k_t * (pre * f * prod[j] + 2.0 * f * sc[j].abs() + x[j].abs())
                    } else {
                        0.0
                    }
                })
                .collect();
            let d: Vec<f64> = (0..t)
                .map(|j| if live(j) { (x[j] - max).abs() } else { 0.0 })
                .collect();
            let a: f64 = (0..t).map(|j| p[j] * dx[j]).sum();
            let w: f64 = (0..t).map(|j| p[j] * d[j]).sum();
            let weight: Vec<f64> = (0..t)
                .map(|j| {
                    let e = (tf - 1.0) / 2.0 + 3.0 * tf + 2.5 * (d[j] + w) + 8.5 + k_t;
                    p[j] * (c_t + e + dx[j] + a)
                })
                .collect();
            for col in 0..dv {
                let m: f64 = (0..t)
                    .filter(|&j| live(j))
                    .map(|j| weight[j] * v.data[vbase + j * dv + col].abs())
                    .sum();
                out[(b * s + i) * dv + col] = 2.0 * m / C_REDUCE;
            }
        }
    }
    out
}

/// Judges a FusedAttention node's `outputs` (module doc).
pub(super) fn check_fused_attention(
    node: &Node,
    inputs: &[Option<&Value>],
    outputs: &[Value],
    operands: Arithmetic,
) -> Check {
    let tensor = |i: usize| match inputs.get(i).copied().flatten() {
        Some(Value::Tensor(t)) => Some(t),
        _ => None,
    };
    let rejected = |m: String| Check::Unsettled(Unsettled::InputsRejected(m));
    let form = match Form::of(node) {
        Ok(f) => f,
        Err(e) => return rejected(e),
    };
    let (Some(q), Some(k), Some(v)) = (tensor(0), tensor(1), tensor(2)) else {
        return rejected("FusedAttention takes Q, K and V tensors".into());
    };
    let mask = tensor(3);
    let dims = match dims(
        form,
        q.shape(),
        k.shape(),
        v.shape(),
        mask.map(|m| m.shape()),
    ) {
        Ok(d) => d,
        Err(e) => return rejected(e),
    };
    let [Value::Tensor(y)] = outputs else {
        return Check::Mismatch {
            output: 0,
            wrong: Wrong::Form(format!("{} outputs, the oracles 1 tensor", outputs.len())),
        };
    };
    let (Some(dtype), Some(_)) = (oracle_dtype(y.dtype()), oracle_dtype(q.dtype())) else {
        return Check::Unsettled(Unsettled::NotCovered(format!(
            "the oracles take no {} values",
            y.dtype()
        )));
    };
    if y.dtype() != q.dtype() || y.shape() != dims.output().as_slice() {
        return Check::Mismatch {
            output: 0,
            wrong: Wrong::Form(format!(
                "{} {:?}, the oracles {} {:?}",
                y.dtype(),
                y.shape(),
                q.dtype(),
                dims.output()
            )),
        };
    }
    let wide_all = || -> Result<_, Unsettled> {
        Ok(([wide(q)?, wide(k)?, wide(v)?], mask.map(wide).transpose()?))
    };
    let (qkv, m) = match wide_all() {
        Ok(x) => x,
        Err(u) => return Check::Unsettled(u),
    };
    let [qv, kv, vv] = &qkv;
    // Half an ulp of the model's type in units of the computed type's ε: what rounding each
    // intermediate of the unfused chain to the model's type may cost (0 where they are one type).
    let compute = oracle::arbitrate::standard_compute(dtype);
    let bits = |d: oracle::DType| match d {
        oracle::DType::F16 => 10,
        oracle::DType::BF16 => 7,
        oracle::DType::F32 => 23,
        _ => 52,
    };
    let k_t = if compute == dtype {
        0.0
    } else {
        (2f64).powi(bits(compute) - bits(dtype) - 1)
    };
    let run = |o: &dyn Oracle| -> Result<oracle::Output, Unsettled> {
        let c = chain(o, form, [qv, kv, vv], m.as_ref())?;
        let magnitude = magnitudes(&c, &dims, form, vv, k_t);
        let mut value = c.out;
        value.dtype = dtype;
        Ok(oracle::Output { value, magnitude })
    };
    let (r, i) = super::on_both(&run);
    let (r, i) = match (r, i) {
        (Ok(r), Ok(i)) => (r, i),
        (Err(u), _) | (_, Err(u)) => return Check::Unsettled(u),
    };
    let data = match y.to_f64_vec() {
        Ok(d) => d,
        Err(e) => return Check::Unsettled(Unsettled::NotCovered(e.to_string())),
    };
    let engine = EngineOutput {
        dtype,
        shape: y.shape(),
        data: &data,
    };
    let bound = Bound {
        class: Class::Sum { c: C_REDUCE },
        compute: oracle::arbitrate::standard_compute(dtype),
        terms: None,
        arithmetic: operands,
    };
    match oracle::arbitrate::arbitrate(engine, bound, &r, &i) {
        Verdict::Agree => Check::Agree,
        Verdict::EngineWrong(wrong) => Check::Mismatch { output: 0, wrong },
        Verdict::OraclesDisagree {
            index,
            reference,
            independent,
        } => Check::Unsettled(Unsettled::OraclesDisagree(format!(
            "output 0 element {index}: reference {reference}, independent {independent}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Attr;
    use crate::ops::testing::{run_kernel, seeded_f32};
    use crate::ops::{QUORUM_DOMAIN, Registry};
    use crate::tensor::DType;

    fn rand(seed: u64, shape: &[usize], lo: f32, hi: f32, dtype: DType) -> Tensor {
        let n = shape.iter().product();
        let v = seeded_f32(seed, n, lo, hi)
            .into_iter()
            .map(f64::from)
            .collect();
        Tensor::from_f64s(dtype, shape, v).unwrap()
    }

    fn attrs(form: Form) -> Vec<(&'static str, Attr)> {
        let mut a = vec![("transpose_k", Attr::Int(form.transpose_k as i64))];
        if let Some((s, divide)) = form.scale {
            a.push(("scale", Attr::Float(s)));
            a.push(("divide", Attr::Int(divide as i64)));
        }
        for (name, v) in [("q_scale", form.q_scale), ("k_scale", form.k_scale)] {
            if let Some(v) = v {
                a.push((name, Attr::Float(v)));
            }
        }
        a
    }

    fn node(form: Form) -> Node {
        Node {
            name: "attn".into(),
            op_type: crate::ops::attention::fused::OP.into(),
            domain: QUORUM_DOMAIN.into(),
            opset: 1,
            inputs: vec!["q".into(), "k".into(), "v".into(), "m".into()],
            outputs: vec!["y".into()],
            attrs: attrs(form)
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        }
    }

    /// The CPU's FusedAttention (the unfused chain's kernels) on `ins`.
    fn cpu(form: Form, ins: &[Option<Tensor>]) -> Tensor {
        let k = Registry::cpu()
            .get(QUORUM_DOMAIN, crate::ops::attention::fused::OP)
            .unwrap();
        run_kernel(k, "FusedAttention", 1, attrs(form), ins.to_vec(), 1)
            .unwrap()
            .remove(0)
    }

    fn judge(form: Form, ins: &[Option<Tensor>], y: Tensor) -> Check {
        let vals: Vec<Option<Value>> = ins.iter().map(|t| t.clone().map(Value::Tensor)).collect();
        let refs: Vec<Option<&Value>> = vals.iter().map(Option::as_ref).collect();
        super::super::check(&node(form), &refs, &[Value::Tensor(y)])
    }

    /// Q [2, 3, 9, 16], K [2, 3, 40, 16] (or Kᵀ), V [2, 3, 40, 8], a mask [9, 40] with large
    /// negative entries and one fully masked column (−10000, as BERT's exporters write it).
    fn case(dtype: DType, transpose_k: bool) -> (Form, Vec<Option<Tensor>>) {
        let form = Form {
            transpose_k,
            scale: Some((4.0, true)),
            q_scale: None,
            k_scale: None,
        };
        let q = rand(1, &[2, 3, 9, 16], -2.0, 2.0, dtype);
        let k = rand(
            2,
            &if transpose_k {
                [2, 3, 40, 16]
            } else {
                [2, 3, 16, 40]
            },
            -2.0,
            2.0,
            dtype,
        );
        let v = rand(3, &[2, 3, 40, 8], -1.0, 3.0, dtype);
        let mut m = seeded_f32(4, 9 * 40, -1.0, 0.0);
        for (i, x) in m.iter_mut().enumerate() {
            if i % 40 == 39 || i % 7 == 3 {
                *x = -10000.0;
            }
        }
        let m = Tensor::from_f64s(dtype, &[9, 40], m.into_iter().map(f64::from).collect());
        let m = m.unwrap();
        (form, vec![Some(q), Some(k), Some(v), Some(m)])
    }

    #[test]
    fn the_unfused_chain_agrees_in_every_form() {
        for dtype in [DType::F32, DType::F16] {
            for tk in [false, true] {
                let (form, ins) = case(dtype, tk);
                let y = cpu(form, &ins);
                assert_eq!(
                    judge(form, &ins, y),
                    Check::Agree,
                    "{dtype} transpose_k {tk}"
                );
                // Without the mask, and without the scale.
                let mut bare = ins.clone();
                bare[3] = None;
                let plain = Form {
                    scale: None,
                    ..form
                };
                let y = cpu(plain, &bare);
                assert_eq!(judge(plain, &bare, y), Check::Agree, "{dtype} bare");
                // Q and Kᵀ scaled before the product, as PyTorch exports its attention.
                let pre = prescaled(form);
                let y = cpu(pre, &ins);
                assert_eq!(judge(pre, &ins, y), Check::Agree, "{dtype} prescaled");
            }
        }
    }

    fn prescaled(form: Form) -> Form {
        Form {
            scale: None,
            q_scale: Some(0.7),
            k_scale: Some(0.7),
            ..form
        }
    }

    fn mismatch(c: &Check) -> bool {
        matches!(c, Check::Mismatch { .. })
    }

    /// The wrong kernels the bound must catch: the mask ignored, the scale multiplied instead of
    /// divided, K's scale dropped, the last key dropped, one element moved by 0.8%.
    #[test]
    fn wrong_attention_kernels_are_caught() {
        for dtype in [DType::F32, DType::F16] {
            let (form, ins) = case(dtype, true);
            let mut unmasked = ins.clone();
            unmasked[3] = None;
            let y = cpu(form, &unmasked);
            assert!(mismatch(&judge(form, &ins, y)), "{dtype}: mask ignored");

            let multiplied = Form {
                scale: Some((4.0, false)),
                ..form
            };
            let y = cpu(multiplied, &ins);
            assert!(mismatch(&judge(form, &ins, y)), "{dtype}: scale multiplied");

            let pre = prescaled(form);
            let half = Form {
                k_scale: None,
                ..pre
            };
            let y = cpu(half, &ins);
            let c = judge(pre, &ins, y);
            assert!(mismatch(&c), "{dtype}: K's scale dropped: {c:?}");

            // The last key that the mask leaves open (column 38) dropped: its probability is
            // set to 0 by masking it too.
            let mut dropped = ins.clone();
            let mut m = dropped[3].as_ref().unwrap().to_f64_vec().unwrap();
            for i in 0..9 {
                m[i * 40 + 38] = f64::NEG_INFINITY;
            }
            dropped[3] = Some(Tensor::from_f64s(dtype, &[9, 40], m).unwrap());
            let y = cpu(form, &dropped);
            assert!(mismatch(&judge(form, &ins, y)), "{dtype}: a key dropped");

            let y = cpu(form, &ins);
            let mut v = y.to_f64_vec().unwrap();
            let mid = v.len() / 2;
            v[mid] += v[mid].abs() / 128.0 + 1.0 / 128.0;
            let y = Tensor::from_f64s(dtype, y.shape(), v).unwrap();
            assert!(
                mismatch(&judge(form, &ins, y)),
                "{dtype}: one element moved"
            );
        }
    }

    #[test]
    fn bad_forms_and_shapes_are_named() {
        let (form, ins) = case(DType::F32, true);
        let y = cpu(form, &ins);
        let mut short = ins.clone();
        short[2] = Some(rand(3, &[2, 3, 39, 8], -1.0, 3.0, DType::F32));
        match judge(form, &short, y.clone()) {
            Check::Unsettled(Unsettled::InputsRejected(m)) => {
                assert!(m.contains("V [2, 3, 39, 8]"), "{m}")
            }
            c => panic!("{c:?}"),
        }
        let cut = Tensor::from_f32(&[2, 3, 9, 7], vec![0.5; 2 * 3 * 9 * 7]).unwrap();
        assert!(mismatch(&judge(form, &ins, cut)));
    }
}
