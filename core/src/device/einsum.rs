//! Einsum as a plan of device primitives, for every backend: strided copies that put each
//! operand's labels in order, and batched matrix products. The equation is the CPU's
//! (`ops::matmul::parse_equation`: ellipses, the implicit output), and the contraction order is
//! the CPU's too: operands left to right, each label summed out as soon as no later operand and
//! not the output needs it.
//!
//! One contraction of the running result `a` with the next operand `b` is one batched GEMM: the
//! labels in both that are needed later are its batch, those in both that are not are its `K`,
//! `a`'s own labels its `M` and `b`'s its `N`. A label only one operand has and nothing later
//! needs is summed out first, as a product with a vector of ones (every product exact, so the
//! sum is the GEMM's own). Views reshape for free, so the only data moved are the permutations.
//!
//! What stays on the CPU (a decline, with the reason): a label repeated within one operand (a
//! diagonal), a label of size 1 in one operand broadcast against another size, an empty dim,
//! element types the backend's GEMM does not take, and f16/bf16 equations that need more than one
//! GEMM (each would round its result to the narrow type, where the standard promise rounds once).
use super::layout::{Strided, contiguous};
use super::movement::gather_view;
use super::{DeviceValue, KernelInputs, Primitives, required};
use crate::error::OpError;
use crate::ops::OpCtx;
use crate::ops::matmul::parse_equation;
use crate::tensor::{DType, Tensor};

type Out<P> = Result<Vec<<P as Primitives>::Tensor>, <P as Primitives>::Error>;

/// A tensor with one label per axis.
struct Labelled<T> {
    t: T,
    labels: Vec<u32>,
}

/// The whole Einsum node on the device, or a decline naming why the CPU runs it.
pub fn k_einsum<P: Primitives>(
    ctx: &OpCtx,
    p: &P,
    inputs: &(impl KernelInputs<P::Tensor, P::Error> + ?Sized),
) -> Out<P> {
    let eq = ctx.attr_s("equation", "")?;
    let ops: Vec<P::Tensor> = (0..inputs.len())
        .map(|i| required(inputs, i))
        .collect::<Result<_, _>>()?;
    let Some(first) = ops.first() else {
        return Err(OpError::Invalid("Einsum needs at least one input".into()).into());
    };
    let dtype = first.dtype();
    if ops.iter().any(|t| t.dtype() != dtype) {
        return Err(OpError::Invalid("Einsum inputs differ in dtype".into()).into());
    }
    let ranks: Vec<usize> = ops.iter().map(|t| t.shape().len()).collect();
    let parsed = parse_equation(&eq, &ranks)?;
    let plan = Plan::new(&parsed.inputs, &parsed.output, &ops)?;
    if let Err(why) = plan.device_form(dtype) {
        return Err(P::decline(format!("Einsum '{eq}': {why}")));
    }
    let out_shape: Vec<usize> = parsed.output.iter().map(|&l| plan.size(l)).collect();
    ctx.check_alloc(&out_shape, dtype.size_in_memory())?;

    let mut operands = parsed
        .inputs
        .iter()
        .cloned()
        .zip(ops)
        .map(|(labels, t)| Labelled { t, labels });
    let first = operands.next().expect("one operand at least");
    let later: Vec<Vec<u32>> = parsed.inputs[1..].to_vec();
    let needed = |from: usize, l: u32| {
        parsed.output.contains(&l)
            || later[from.min(later.len())..]
                .iter()
                .any(|x| x.contains(&l))
    };
    let mut cur = sum_out(p, &plan, first, &|l| needed(0, l))?;
    for (i, b) in operands.enumerate() {
        let keep = |l: u32| needed(i + 1, l);
        let a = sum_out(p, &plan, cur, &|l| keep(l) || b.labels.contains(&l))?;
        let b = sum_out(p, &plan, b, &|l| keep(l) || a.labels.contains(&l))?;
        cur = contract(p, &plan, a, b, &keep)?;
    }
    let cur = sum_out(p, &plan, cur, &|l| parsed.output.contains(&l))?;
    Ok(vec![arrange(p, &plan, &cur, &parsed.output)?])
}

/// The sizes of the equation's labels, and the number of GEMMs the plan launches.
struct Plan {
    sizes: Vec<(u32, usize)>,
    gemms: usize,
    repeated: bool,
    broadcast: bool,
}

impl Plan {
    fn new<T: DeviceValue>(
        inputs: &[Vec<u32>],
        output: &[u32],
        ops: &[T],
    ) -> Result<Plan, OpError> {
        let mut sizes: Vec<(u32, usize)> = Vec::new();
        let mut broadcast = false;
        let mut repeated = false;
        for (labels, t) in inputs.iter().zip(ops) {
            for (i, (&l, &d)) in labels.iter().zip(t.shape()).enumerate() {
                repeated |= labels[..i].contains(&l);
                match sizes.iter_mut().find(|(x, _)| *x == l) {
                    None => sizes.push((l, d)),
                    Some((_, s)) if *s == d => {}
                    Some((_, s)) if *s == 1 || d == 1 => {
                        broadcast = true;
                        *s = (*s).max(d);
                    }
                    Some((_, s)) => {
                        return Err(OpError::Invalid(format!(
                            "Einsum: a label has sizes {s} and {d} in different operands"
                        )));
                    }
                }
            }
        }
        // One GEMM per later operand; one per operand (and the result) that sums a label out alone.
        let mut gemms = inputs.len() - 1;
        for (i, labels) in inputs.iter().enumerate() {
            let alone = labels.iter().any(|l| {
                !output.contains(l)
                    && inputs
                        .iter()
                        .enumerate()
                        .all(|(j, o)| j == i || !o.contains(l))
            });
            gemms += usize::from(alone);
        }
        Ok(Plan {
            sizes,
            gemms,
            repeated,
            broadcast,
        })
    }

    fn size(&self, l: u32) -> usize {
        self.sizes
            .iter()
            .find(|(x, _)| *x == l)
            .map_or(1, |&(_, s)| s)
    }

    /// Why the device does not run this equation, if it does not.
    fn device_form(&self, dtype: DType) -> Result<(), String> {
        if self.repeated {
            return Err("a label repeats within an operand (a diagonal)".into());
        }
        if self.broadcast {
            return Err("a label of size 1 broadcasts against another size".into());
        }
        if self.sizes.iter().any(|&(_, s)| s == 0) {
            return Err("an empty dim".into());
        }
        if matches!(dtype, DType::F16 | DType::BF16) && self.gemms > 1 {
            return Err(format!(
                "{} GEMMs would each round to {dtype}, where the op rounds once",
                self.gemms
            ));
        }
        Ok(())
    }
}

/// `t` with its axes in the order of `order` (a permutation of its labels), contiguous: the same
/// tensor when already in order, else one strided copy.
fn arrange<P: Primitives>(
    p: &P,
    plan: &Plan,
    t: &Labelled<P::Tensor>,
    order: &[u32],
) -> Result<P::Tensor, P::Error> {
    if t.labels == order {
        return Ok(t.t.clone());
    }
    let st = contiguous(t.t.shape());
    let at = |l: &u32| t.labels.iter().position(|x| x == l).unwrap_or(0);
    let from = Strided {
        base: 0,
        strides: order.iter().map(|l| st[at(l)]).collect(),
    };
    let shape: Vec<usize> = order.iter().map(|&l| plan.size(l)).collect();
    gather_view(p, &t.t, &from, &shape)
}

/// `t` with the labels `keep` refuses summed out: its kept labels first, the summed ones last,
/// viewed as `[kept, summed]` and multiplied by a column of ones.
fn sum_out<P: Primitives>(
    p: &P,
    plan: &Plan,
    t: Labelled<P::Tensor>,
    keep: &dyn Fn(u32) -> bool,
) -> Result<Labelled<P::Tensor>, P::Error> {
    let (kept, summed): (Vec<u32>, Vec<u32>) = t.labels.iter().partition(|&&l| keep(l));
    if summed.is_empty() {
        return Ok(t);
    }
    let order: Vec<u32> = kept.iter().chain(&summed).copied().collect();
    let x = arrange(p, plan, &t, &order)?;
    let rows: usize = kept.iter().map(|&l| plan.size(l)).product();
    let s: usize = summed.iter().map(|&l| plan.size(l)).product();
    let ones = p.fill(&one(x.dtype())?, &[s, 1])?;
    let y = p.matmul(&x.view(vec![rows, s]), &ones)?;
    let shape: Vec<usize> = kept.iter().map(|&l| plan.size(l)).collect();
    Ok(Labelled {
        t: y.view(shape),
        labels: kept,
    })
}

/// One batched GEMM: `a` arranged `[batch, M, K]`, `b` arranged `[batch, K, N]`; the result's
/// labels are batch, then `a`'s own, then `b`'s own.
fn contract<P: Primitives>(
    p: &P,
    plan: &Plan,
    a: Labelled<P::Tensor>,
    b: Labelled<P::Tensor>,
    keep: &dyn Fn(u32) -> bool,
) -> Result<Labelled<P::Tensor>, P::Error> {
    let (mut batch, mut con, mut am, mut bn) = (vec![], vec![], vec![], vec![]);
    for &l in &a.labels {
        match (b.labels.contains(&l), keep(l)) {
            (true, true) => batch.push(l),
            (true, false) => con.push(l),
            (false, _) => am.push(l),
        }
    }
    bn.extend(b.labels.iter().filter(|l| !a.labels.contains(l)));
    let prod = |ls: &[u32]| ls.iter().map(|&l| plan.size(l)).product::<usize>();
    let (nb, m, k, n) = (prod(&batch), prod(&am), prod(&con), prod(&bn));
    let a_order: Vec<u32> = batch.iter().chain(&am).chain(&con).copied().collect();
    let b_order: Vec<u32> = batch.iter().chain(&con).chain(&bn).copied().collect();
    let x = arrange(p, plan, &a, &a_order)?;
    let w = arrange(p, plan, &b, &b_order)?;
    let (xs, ws) = if nb == 1 {
        (vec![m, k], vec![k, n])
    } else {
        (vec![nb, m, k], vec![nb, k, n])
    };
    let y = p.matmul(&x.view(xs), &w.view(ws))?;
    let labels: Vec<u32> = batch.iter().chain(&am).chain(&bn).copied().collect();
    let shape: Vec<usize> = labels.iter().map(|&l| plan.size(l)).collect();
    Ok(Labelled {
        t: y.view(shape),
        labels,
    })
}

/// The value 1 as a one-element tensor of `dtype`.
fn one<E: From<OpError>>(dtype: DType) -> Result<Tensor, E> {
    Ok(Tensor::from_f64s(dtype, &[1], vec![1.0])?)
}
