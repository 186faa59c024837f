//! `com.quorum` FusedAttention: the attention block exporters write as separate nodes,
//! `MatMul(Q, Kᵀ) → [Mul or Div by a scalar] → [Add mask] → Softmax(last axis) → MatMul(·, V)`,
//! as one node.
//!
//! Inputs: `Q [..., S, D]`; `K` as `Kᵀ [..., D, T]`, or as `K [..., T, D]` when `transpose_k` is 1
//! (the exporter's Transpose of K absorbed); `V [..., T, Dv]`; an optional additive `mask`
//! broadcastable to the scores `[..., S, T]`. Batch dimensions broadcast by MatMul's rules.
//! Attributes: `scale` (absent: no scaling) and `divide` (1: the scores are divided by `scale`, as
//! `Div` wrote them; 0: multiplied); `q_scale` and `k_scale`, factors Q and Kᵀ are multiplied by
//! before the product (PyTorch's export of `scaled_dot_product_attention` scales both by
//! `√scale`). Output `[..., S, Dv]` in Q's type.
//!
//! The device-session rewrite `attention` (`optimize/attention.rs` in the runtime) writes it so that
//! an accelerator computes the block in one pass, never writing the `[S, T]` scores to memory. On
//! the CPU it runs the nodes it replaces, in order, with their own kernels, so the result is the
//! unfused graph's bit for bit. The oracles judge it as that subgraph too (`verify/attention.rs`):
//! each computes the chain with its own MatMul, Softmax and elementwise ops.
use std::collections::HashMap;

use crate::error::{OpError, OpResult};
use crate::ir::{Attr, Node};
use crate::ops::broadcast::broadcast_shapes;
use crate::ops::{OpCtx, Registry, input, opt_input, single};
use crate::tensor::{Tensor, Value};

/// The op's name in Quorum's domain.
pub const OP: &str = "FusedAttention";

/// How a FusedAttention node scales its scores and where K comes from, from its attributes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Form {
    /// Input 1 is `K [..., T, D]` (transposed by the op), not `Kᵀ [..., D, T]`.
    pub transpose_k: bool,
    /// The scores' scale and whether they are divided by it (`Div`) rather than multiplied.
    pub scale: Option<(f32, bool)>,
    /// Factors Q and Kᵀ are multiplied by before the product.
    pub q_scale: Option<f32>,
    pub k_scale: Option<f32>,
}

impl Form {
    /// The form `node`'s attributes give, or why they are invalid.
    pub fn of(node: &Node) -> Result<Form, String> {
        let int = |name: &str| match node.attrs.get(name) {
            None => Ok(0),
            Some(Attr::Int(v @ (0 | 1))) => Ok(*v),
            Some(_) => Err(format!("{OP} attribute '{name}' must be 0 or 1")),
        };
        let transpose_k = int("transpose_k")? == 1;
        let divide = int("divide")? == 1;
        let float = |name: &str| match node.attrs.get(name) {
            None => Ok(None),
            Some(Attr::Float(s)) => Ok(Some(*s)),
            Some(_) => Err(format!("{OP} attribute '{name}' must be a float")),
        };
        let scale = match float("scale")? {
            None if divide => return Err(format!("{OP} has 'divide' without a 'scale'")),
            None => None,
            Some(s) => Some((s, divide)),
        };
        Ok(Form {
            transpose_k,
            scale,
            q_scale: float("q_scale")?,
            k_scale: float("k_scale")?,
        })
    }

    /// The factor the scores are multiplied by after the product (the reciprocal of a divisor),
    /// if any.
    pub fn factor(&self) -> Option<f64> {
        self.scale
            .map(|(s, divide)| if divide { 1.0 / s as f64 } else { s as f64 })
    }

    /// Every factor the scores take, before and after the product, as one (exact in f64).
    pub fn total_factor(&self) -> Option<f64> {
        let parts = [
            self.q_scale.map(f64::from),
            self.k_scale.map(f64::from),
            self.factor(),
        ];
        parts
            .iter()
            .any(Option::is_some)
            .then(|| parts.iter().flatten().product())
    }

    /// Whether Q or Kᵀ is scaled before the product.
    pub fn prescaled(&self) -> bool {
        self.q_scale.is_some() || self.k_scale.is_some()
    }
}

/// The sizes of one FusedAttention call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dims {
    /// The output's batch dimensions (the operands' broadcast).
    pub batch: Vec<usize>,
    /// Query rows, keys, the query/key width and the value width.
    pub s: usize,
    pub t: usize,
    pub d: usize,
    pub dv: usize,
}

impl Dims {
    /// The output's shape, `[batch..., S, Dv]`.
    pub fn output(&self) -> Vec<usize> {
        let mut o = self.batch.clone();
        o.extend([self.s, self.dv]);
        o
    }

    /// The scores' shape, `[batch..., S, T]`.
    pub fn scores(&self) -> Vec<usize> {
        let mut o = self.batch.clone();
        o.extend([self.s, self.t]);
        o
    }
}

/// The sizes of a call on operands of shapes `q`, `k` (as given: `Kᵀ` or `K` by `form`), `v` and
/// `mask`, or a message naming the op and every shape when they are not attention's.
pub fn dims(
    form: Form,
    q: &[usize],
    k: &[usize],
    v: &[usize],
    mask: Option<&[usize]>,
) -> Result<Dims, String> {
    let wrong = |why: &str| {
        format!(
            "{OP} takes Q [..., S, D], {} and V [..., T, Dv]{}; got Q {q:?}, K {k:?}, V {v:?}{}: {why}",
            if form.transpose_k {
                "K [..., T, D]"
            } else {
                "Kᵀ [..., D, T]"
            },
            if mask.is_some() {
                " and a mask broadcastable to [..., S, T]"
            } else {
                ""
            },
            mask.map(|m| format!(", mask {m:?}")).unwrap_or_default(),
        )
    };
    if q.len() < 2 || k.len() < 2 || v.len() < 2 {
        return Err(wrong("each operand needs rank 2 or more"));
    }
    let split = |s: &[usize]| (s[..s.len() - 2].to_vec(), s[s.len() - 2], s[s.len() - 1]);
    let (qb, s, d) = split(q);
    let (kb, k0, k1) = split(k);
    let (t, dk) = if form.transpose_k { (k0, k1) } else { (k1, k0) };
    let (vb, tv, dv) = split(v);
    if dk != d {
        return Err(wrong("Q's width differs from K's"));
    }
    if tv != t {
        return Err(wrong("V's rows differ from K's keys"));
    }
    let batch = broadcast_shapes(&[&qb, &kb, &vb])
        .map_err(|_| wrong("the batch dimensions do not broadcast"))?;
    let out = Dims { batch, s, t, d, dv };
    if let Some(m) = mask {
        let scores = out.scores();
        if broadcast_shapes(&[&scores, m]).ok().as_deref() != Some(&scores[..]) {
            return Err(wrong("the mask does not broadcast to the scores"));
        }
    }
    Ok(out)
}

pub(super) fn register(r: &mut Registry) {
    r.add(crate::ops::QUORUM_DOMAIN, OP, fused_attention);
}

/// Runs default-domain op `op` with `attrs` on `inputs` through the CPU's own kernel, as the node
/// this op replaced would have run.
fn call(
    ctx: &OpCtx,
    op: &str,
    opset: i64,
    attrs: HashMap<String, Attr>,
    inputs: &[Option<&Value>],
) -> OpResult<Value> {
    let node = Node {
        name: ctx.node.name.clone(),
        op_type: op.into(),
        domain: String::new(),
        opset,
        inputs: (0..inputs.len())
            .map(|i| format!("{OP}.{op}.{i}"))
            .collect(),
        outputs: vec![format!("{OP}.{op}")],
        attrs,
    };
    let kernel = Registry::cpu()
        .get("", op)
        .ok_or_else(|| OpError::Invalid(format!("{OP}: no CPU kernel for {op}")))?;
    let sub = OpCtx {
        node: &node,
        runner: ctx.runner,
        max_tensor_bytes: ctx.max_tensor_bytes,
    };
    kernel(&sub, inputs)?
        .into_iter()
        .next()
        .ok_or_else(|| OpError::Invalid(format!("{OP}: {op} gave no output")))
}

fn fused_attention(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let form = Form::of(ctx.node).map_err(OpError::Invalid)?;
    let (q, k, v) = (input(inputs, 0)?, input(inputs, 1)?, input(inputs, 2)?);
    let mask = opt_input(inputs, 3)?;
    dims(
        form,
        q.shape(),
        k.shape(),
        v.shape(),
        mask.map(|m| m.shape()),
    )
    .map_err(OpError::Invalid)?;
    let kt = if form.transpose_k {
        let r = k.shape().len() as i64;
        let mut perm: Vec<i64> = (0..r).collect();
        perm.swap(r as usize - 2, r as usize - 1);
        let attrs = HashMap::from([("perm".to_string(), Attr::Ints(perm))]);
        Some(call(ctx, "Transpose", 13, attrs, &[inputs[1]])?)
    } else {
        None
    };
    let mul = |v: Option<&Value>, c: Option<f32>| -> OpResult<Option<Value>> {
        let Some(c) = c else { return Ok(None) };
        let c = Value::Tensor(Tensor::from_f64s(q.dtype(), &[], vec![c as f64])?);
        Ok(Some(call(ctx, "Mul", 14, HashMap::new(), &[v, Some(&c)])?))
    };
    let kt = kt.as_ref().or(inputs[1]);
    let kt_scaled = mul(kt, form.k_scale)?;
    let q_scaled = mul(inputs[0], form.q_scale)?;
    let (qa, kb) = (q_scaled.as_ref().or(inputs[0]), kt_scaled.as_ref().or(kt));
    let mut x = call(ctx, "MatMul", 13, HashMap::new(), &[qa, kb])?;
    if let Some((s, divide)) = form.scale {
        let c = Value::Tensor(Tensor::from_f64s(q.dtype(), &[], vec![s as f64])?);
        let op = if divide { "Div" } else { "Mul" };
        x = call(ctx, op, 14, HashMap::new(), &[Some(&x), Some(&c)])?;
    }
    if mask.is_some() {
        x = call(ctx, "Add", 14, HashMap::new(), &[Some(&x), inputs[3]])?;
    }
    let p = call(ctx, "Softmax", 13, HashMap::new(), &[Some(&x)])?;
    let out = call(ctx, "MatMul", 13, HashMap::new(), &[Some(&p), inputs[2]])?;
    match out {
        Value::Tensor(t) => single(t),
        _ => Err(OpError::Invalid(format!("{OP}: MatMul gave no tensor"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(transpose_k: bool) -> Form {
        Form {
            transpose_k,
            scale: Some((0.125, false)),
            q_scale: None,
            k_scale: None,
        }
    }

    #[test]
    fn dims_follow_matmul_broadcasting_and_name_every_shape() {
        let d = dims(
            form(false),
            &[2, 3, 5, 8],
            &[1, 8, 7],
            &[3, 7, 4],
            Some(&[5, 1]),
        )
        .unwrap();
        assert_eq!(d.batch, [2, 3]);
        assert_eq!((d.s, d.t, d.d, d.dv), (5, 7, 8, 4));
        assert_eq!(d.output(), [2, 3, 5, 4]);
        let d = dims(form(true), &[4, 5, 8], &[4, 7, 8], &[4, 7, 2], None).unwrap();
        assert_eq!((d.s, d.t, d.d, d.dv), (5, 7, 8, 2));
        let e = dims(form(false), &[4, 5, 8], &[4, 7, 8], &[4, 7, 2], None).unwrap_err();
        assert!(e.contains("Q [4, 5, 8]") && e.contains("width"), "{e}");
        let e = dims(form(true), &[5, 8], &[7, 8], &[6, 2], None).unwrap_err();
        assert!(e.contains("V's rows"), "{e}");
        let e = dims(form(true), &[5, 8], &[7, 8], &[7, 2], Some(&[5, 6])).unwrap_err();
        assert!(e.contains("mask [5, 6]"), "{e}");
        let e = dims(form(true), &[2, 5, 8], &[3, 7, 8], &[7, 2], None).unwrap_err();
        assert!(e.contains("batch"), "{e}");
    }

    #[test]
    fn forms_come_from_the_attributes() {
        let mut n = Node {
            name: "a".into(),
            op_type: OP.into(),
            domain: crate::ops::QUORUM_DOMAIN.into(),
            opset: 1,
            inputs: vec![],
            outputs: vec![],
            attrs: HashMap::new(),
        };
        assert_eq!(
            Form::of(&n).unwrap(),
            Form {
                transpose_k: false,
                scale: None,
                q_scale: None,
                k_scale: None,
            }
        );
        n.attrs.insert("divide".into(), Attr::Int(1));
        assert!(Form::of(&n).unwrap_err().contains("without a 'scale'"));
        n.attrs.insert("scale".into(), Attr::Float(8.0));
        assert_eq!(Form::of(&n).unwrap().factor(), Some(0.125));
        assert_eq!(Form::of(&n).unwrap().total_factor(), Some(0.125));
        n.attrs.insert("q_scale".into(), Attr::Float(0.5));
        n.attrs.insert("k_scale".into(), Attr::Float(0.25));
        let f = Form::of(&n).unwrap();
        assert!(f.prescaled());
        assert_eq!(f.total_factor(), Some(0.125 * 0.125));
        n.attrs.insert("transpose_k".into(), Attr::Int(2));
        assert!(Form::of(&n).unwrap_err().contains("0 or 1"));
    }
}
