//! Control flow: If, Loop and Scan, running subgraphs through the executor.
use super::sequence::{declared_dtype, index_axis, stack};
use super::{OpCtx, Registry, input, norm_axis, opt_input};
use crate::bail;
use crate::error::{OpError, OpResult};
use crate::ir::{Dim, Graph, ValueType};
use crate::tensor::{DType, Tensor, Value};
use ndarray::{ArrayD, IxDyn};

pub fn register(r: &mut Registry) {
    r.add("", "If", if_op);
    r.add("", "Loop", loop_op);
    r.add("", "Scan", scan_op);
}

/// A boolean read from a one-element tensor of any numeric or bool dtype.
fn truth(t: &Tensor, what: &str) -> OpResult<bool> {
    if t.len() != 1 {
        bail!("{what} must hold exactly one element, got {}", t.describe());
    }
    Ok(match t {
        Tensor::Bool(a) => a.iter().next().copied().unwrap_or(false),
        t => t.to_f64_vec()?.first().is_some_and(|&v| v != 0.0),
    })
}

fn if_op(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let cond = truth(input(inputs, 0)?, "If condition")?;
    let g = ctx.attr_graph(if cond { "then_branch" } else { "else_branch" })?;
    let outs = ctx.run_subgraph(g, Vec::new())?;
    if outs.len() < ctx.node.outputs.len() {
        bail!(
            "the {} branch yields {} outputs, the node names {}",
            if cond { "then" } else { "else" },
            outs.len(),
            ctx.node.outputs.len()
        );
    }
    Ok(outs)
}

/// An empty scan output (zero iterations ran): shape `[0] + declared element dims` (unknown dims
/// taken as 0), the declared dtype (float32 when none is declared).
fn empty_scan_output(ty: &ValueType, axis: i64) -> OpResult<Tensor> {
    let dt = declared_dtype(ty).unwrap_or(DType::F32);
    let mut dims: Vec<usize> = match ty {
        ValueType::Tensor { shape: Some(s), .. } => s
            .iter()
            .map(|d| {
                if let Dim::Fixed(v) = d {
                    (*v).max(0) as usize
                } else {
                    0
                }
            })
            .collect(),
        _ => Vec::new(),
    };
    let ax = norm_axis(axis, dims.len() + 1)?;
    dims.insert(ax, 0);
    Ok(Tensor::zeros(dt, &dims))
}

/// Stacks one scan output's per-iteration tensors along `axis` (of the stacked rank), newest first
/// when `reverse`.
fn stack_scan_output(mut items: Vec<Tensor>, axis: i64, reverse: bool) -> OpResult<Tensor> {
    if reverse {
        items.reverse();
    }
    let rank = items.first().map_or(0, |t| t.rank());
    let ax = norm_axis(axis, rank + 1)?;
    stack(&items, ax)
}

fn loop_op(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let body = ctx.attr_graph("body")?;
    let max_trips = match opt_input(inputs, 0)? {
        Some(m) => {
            let v = m.to_i64_vec()?;
            if v.len() != 1 {
                bail!("Loop's trip count M must be a scalar, got {}", m.describe());
            }
            Some(v[0])
        }
        None => None,
    };
    let mut cond = match opt_input(inputs, 1)? {
        Some(c) => truth(c, "Loop condition")?,
        None => true,
    };
    let mut carried: Vec<Value> = (2..inputs.len())
        .map(|i| {
            inputs[i]
                .cloned()
                .ok_or_else(|| OpError::Invalid(format!("loop-carried input {i} is missing")))
        })
        .collect::<OpResult<_>>()?;
    let n = carried.len();
    if body.inputs.len() != n + 2 {
        bail!(
            "Loop body takes {} inputs, expected 2 + {n} loop-carried values",
            body.inputs.len()
        );
    }
    if body.outputs.len() < n + 1 {
        bail!(
            "Loop body yields {} outputs, expected at least 1 + {n}",
            body.outputs.len()
        );
    }
    let k = body.outputs.len() - 1 - n;
    let mut scans: Vec<Vec<Tensor>> = vec![Vec::new(); k];
    let mut it: i64 = 0;
    let cap = ctx.runner.max_loop_iterations();
    while cond && max_trips.is_none_or(|m| it < m) {
        if it as u64 >= cap {
            bail!("Loop stopped at {it} iterations (SessionOptions::max_loop_iterations)");
        }
        let mut feed = Vec::with_capacity(n + 2);
        feed.push(Value::Tensor(Tensor::scalar_i64(it)));
        feed.push(Value::Tensor(Tensor::Bool(ArrayD::from_elem(
            IxDyn(&[]),
            cond,
        ))));
        feed.extend(carried);
        let mut outs = ctx.run_subgraph(body, feed)?.into_iter();
        cond = match outs.next() {
            Some(Value::Tensor(c)) => truth(&c, "Loop body condition output")?,
            Some(v) => bail!(
                "Loop body condition output must be a tensor, got {}",
                v.describe()
            ),
            None => bail!("Loop body produced no outputs"),
        };
        carried = outs.by_ref().take(n).collect();
        if carried.len() != n {
            bail!("Loop body produced too few outputs");
        }
        for (j, v) in outs.enumerate() {
            match (scans.get_mut(j), v) {
                (Some(dst), Value::Tensor(t)) => dst.push(t),
                (_, v) => bail!(
                    "Loop scan output {j} must be a tensor, got {}",
                    v.describe()
                ),
            }
        }
        it += 1;
    }
    let mut result = carried;
    for (j, items) in scans.into_iter().enumerate() {
        let t = if items.is_empty() {
            empty_scan_output(&body.outputs[1 + n + j].ty, 0)?
        } else {
            stack_scan_output(items, 0, false)?
        };
        result.push(Value::Tensor(t));
    }
    Ok(result)
}

/// Attribute list `name` of `len` entries, defaulting to zeros.
fn ints_or_zeros(ctx: &OpCtx, name: &str, len: usize) -> OpResult<Vec<i64>> {
    match ctx.attr_opt_ints(name)? {
        Some(v) if v.len() == len => Ok(v),
        Some(v) => bail!("attribute '{name}' has {} entries, expected {len}", v.len()),
        None => Ok(vec![0; len]),
    }
}

/// One Scan run (opset 9 semantics, no batch axis): `steps` iterations over `scans`.
struct ScanRun<'a> {
    body: &'a Graph,
    in_axes: Vec<usize>,
    in_reverse: Vec<bool>,
    out_axes: Vec<i64>,
    out_reverse: Vec<bool>,
}

impl ScanRun<'_> {
    fn run(
        &self,
        ctx: &OpCtx,
        mut states: Vec<Value>,
        scans: &[&Tensor],
        steps: usize,
    ) -> OpResult<(Vec<Value>, Vec<Tensor>)> {
        let n = states.len();
        let k =
            self.body.outputs.len().checked_sub(n).ok_or_else(|| {
                OpError::Invalid("Scan body has fewer outputs than states".into())
            })?;
        let mut outs: Vec<Vec<Tensor>> = vec![Vec::with_capacity(steps); k];
        for t in 0..steps {
            let mut feed = Vec::with_capacity(n + scans.len());
            feed.extend(states);
            for (j, s) in scans.iter().enumerate() {
                let i = if self.in_reverse[j] { steps - 1 - t } else { t };
                feed.push(Value::Tensor(index_axis(s, self.in_axes[j], i)?));
            }
            let mut res = ctx.run_subgraph(self.body, feed)?.into_iter();
            states = res.by_ref().take(n).collect();
            if states.len() != n {
                bail!("Scan body produced too few outputs");
            }
            for (j, v) in res.enumerate() {
                match (outs.get_mut(j), v) {
                    (Some(dst), Value::Tensor(t)) => dst.push(t),
                    (_, v) => bail!("Scan output {j} must be a tensor, got {}", v.describe()),
                }
            }
        }
        let mut scan_out = Vec::with_capacity(k);
        for (j, items) in outs.into_iter().enumerate() {
            scan_out.push(if items.is_empty() {
                empty_scan_output(&self.body.outputs[n + j].ty, self.out_axes[j])?
            } else {
                stack_scan_output(items, self.out_axes[j], self.out_reverse[j])?
            });
        }
        Ok((states, scan_out))
    }
}

fn scan_op(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let body = ctx.attr_graph("body")?;
    let m = ctx.req_i("num_scan_inputs")?;
    if m <= 0 {
        bail!("num_scan_inputs must be positive, got {m}");
    }
    let m = m as usize;
    if ctx.opset() < 9 {
        return scan8(ctx, body, m, inputs);
    }
    let n = inputs.len().checked_sub(m).ok_or_else(|| {
        OpError::Invalid(format!(
            "Scan has {} inputs, fewer than num_scan_inputs {m}",
            inputs.len()
        ))
    })?;
    let states: Vec<Value> = inputs[..n]
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.cloned()
                .ok_or_else(|| OpError::Invalid(format!("state input {i} is missing")))
        })
        .collect::<OpResult<_>>()?;
    let scans: Vec<&Tensor> = (n..n + m)
        .map(|i| input(inputs, i))
        .collect::<OpResult<_>>()?;
    let k = body
        .outputs
        .len()
        .checked_sub(n)
        .ok_or_else(|| OpError::Invalid("Scan body has fewer outputs than states".into()))?;
    let in_axes_raw = ints_or_zeros(ctx, "scan_input_axes", m)?;
    let mut in_axes = Vec::with_capacity(m);
    for (s, &a) in scans.iter().zip(&in_axes_raw) {
        in_axes.push(norm_axis(a, s.rank())?);
    }
    let steps = scans[0]
        .shape()
        .get(in_axes[0])
        .copied()
        .ok_or_else(|| OpError::Invalid("scan input is a scalar".into()))?;
    for (j, s) in scans.iter().enumerate() {
        if s.shape().get(in_axes[j]) != Some(&steps) {
            bail!(
                "scan input {j} ({}) does not have {steps} steps along axis {}",
                s.describe(),
                in_axes[j]
            );
        }
    }
    let run = ScanRun {
        body,
        in_axes,
        in_reverse: ints_or_zeros(ctx, "scan_input_directions", m)?
            .iter()
            .map(|&d| d != 0)
            .collect(),
        out_axes: ints_or_zeros(ctx, "scan_output_axes", k)?,
        out_reverse: ints_or_zeros(ctx, "scan_output_directions", k)?
            .iter()
            .map(|&d| d != 0)
            .collect(),
    };
    let (states, outs) = run.run(ctx, states, &scans, steps)?;
    Ok(states
        .into_iter()
        .chain(outs.into_iter().map(Value::Tensor))
        .collect())
}

/// Scan-8: every input has a leading batch axis and scan inputs scan along axis 1; optional
/// `sequence_lens` gives each batch entry's length (scan outputs are zero-padded past it).
fn scan8(ctx: &OpCtx, body: &Graph, m: usize, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let rest = inputs.get(1..).unwrap_or(&[]);
    let n = rest.len().checked_sub(m).ok_or_else(|| {
        OpError::Invalid(format!("Scan has too few inputs for num_scan_inputs {m}"))
    })?;
    let states: Vec<&Tensor> = (0..n).map(|i| input(rest, i)).collect::<OpResult<_>>()?;
    let scans: Vec<&Tensor> = (n..n + m)
        .map(|i| input(rest, i))
        .collect::<OpResult<_>>()?;
    let k = body
        .outputs
        .len()
        .checked_sub(n)
        .ok_or_else(|| OpError::Invalid("Scan body has fewer outputs than states".into()))?;
    let batch = scans[0].shape().first().copied().unwrap_or(0);
    let steps =
        scans[0].shape().get(1).copied().ok_or_else(|| {
            OpError::Invalid("Scan-8 inputs need [batch, seq, ...] shapes".into())
        })?;
    for t in states.iter().chain(&scans) {
        if t.shape().first() != Some(&batch) {
            bail!(
                "every Scan-8 input needs batch size {batch}, got {}",
                t.describe()
            );
        }
    }
    for s in &scans {
        if s.shape().get(1) != Some(&steps) {
            bail!(
                "every Scan-8 scan input needs {steps} steps, got {}",
                s.describe()
            );
        }
    }
    let lens: Vec<usize> = match opt_input(inputs, 0)? {
        Some(l) => {
            let v = l.to_i64_vec()?;
            if v.len() != batch || v.iter().any(|&x| x < 0 || x as usize > steps) {
                bail!("sequence_lens {v:?} must hold {batch} lengths in [0, {steps}]");
            }
            v.into_iter().map(|x| x as usize).collect()
        }
        None => vec![steps; batch],
    };
    let run = ScanRun {
        body,
        in_axes: vec![0; m],
        in_reverse: ints_or_zeros(ctx, "directions", m)?
            .iter()
            .map(|&d| d != 0)
            .collect(),
        out_axes: vec![0; k],
        out_reverse: vec![false; k],
    };
    let mut state_rows: Vec<Vec<Tensor>> = vec![Vec::with_capacity(batch); n];
    let mut out_rows: Vec<Vec<Tensor>> = vec![Vec::with_capacity(batch); k];
    for (b, &len) in lens.iter().enumerate() {
        let st: Vec<Value> = states
            .iter()
            .map(|s| index_axis(s, 0, b).map(Value::Tensor))
            .collect::<OpResult<_>>()?;
        let sc: Vec<Tensor> = scans
            .iter()
            .map(|s| index_axis(s, 0, b))
            .collect::<OpResult<_>>()?;
        // Only the first `len` steps of this batch entry take part.
        let sc: Vec<Tensor> = sc
            .iter()
            .map(|s| super::sequence::slice_axis(s, 0, 0, len))
            .collect::<OpResult<_>>()?;
        let refs: Vec<&Tensor> = sc.iter().collect();
        let (st, outs) = run.run(ctx, st, &refs, len)?;
        for (dst, v) in state_rows.iter_mut().zip(st) {
            match v {
                Value::Tensor(t) => dst.push(t),
                v => bail!("Scan-8 states must be tensors, got {}", v.describe()),
            }
        }
        for (dst, t) in out_rows.iter_mut().zip(outs) {
            dst.push(pad_steps(t, steps)?);
        }
    }
    let mut result = Vec::with_capacity(n + k);
    for (j, rows) in state_rows.into_iter().chain(out_rows).enumerate() {
        if rows.is_empty() {
            bail!("Scan-8 with batch size 0 (output {j}) is not supported");
        }
        result.push(Value::Tensor(stack(&rows, 0)?));
    }
    Ok(result)
}

/// Zero-pads a stacked scan output along axis 0 to `steps` entries.
fn pad_steps(t: Tensor, steps: usize) -> OpResult<Tensor> {
    let have = t.shape().first().copied().unwrap_or(0);
    if have >= steps {
        return Ok(t);
    }
    let mut shape = t.shape().to_vec();
    shape[0] = steps - have;
    let pad = Tensor::zeros(t.dtype(), &shape);
    super::sequence::concat(&[t, pad], 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_scan_output_shapes() {
        let ty = ValueType::Tensor {
            dtype: Some(DType::F64),
            shape: Some(vec![Dim::Fixed(3), Dim::Symbol("n".into())]),
        };
        let t = empty_scan_output(&ty, 0).unwrap();
        assert_eq!((t.dtype(), t.shape()), (DType::F64, &[0usize, 3, 0][..]));
        let t = empty_scan_output(&ty, -1).unwrap();
        assert_eq!(t.shape(), &[3, 0, 0]);
    }

    #[test]
    fn reversed_stack_and_padding() {
        let items: Vec<Tensor> = (1..=3)
            .map(|i| Tensor::from_f32(&[2], vec![i as f32, -(i as f32)]).unwrap())
            .collect();
        let Tensor::F32(s) = stack_scan_output(items, -1, true).unwrap() else {
            panic!()
        };
        // Axis -1 of the stacked rank 2: out[j][t] = item[2 - t][j].
        assert_eq!(s.shape(), &[2, 3]);
        assert_eq!(s.as_slice().unwrap(), &[3.0, 2.0, 1.0, -3.0, -2.0, -1.0]);
        let p = pad_steps(Tensor::from_f32(&[1, 2], vec![0.5, 1.5]).unwrap(), 3).unwrap();
        assert_eq!(
            p,
            Tensor::from_f32(&[3, 2], vec![0.5, 1.5, 0.0, 0.0, 0.0, 0.0]).unwrap()
        );
        assert!(truth(&Tensor::from_f32(&[2], vec![1.0, 1.0]).unwrap(), "c").is_err());
    }

    /// A body that adds the scan slice to the state and emits the new state as the scan output.
    struct SumBody;

    impl crate::ops::SubgraphRunner for SumBody {
        fn run_subgraph(&self, _g: &Graph, inputs: Vec<Value>) -> OpResult<Vec<Value>> {
            let (Value::Tensor(Tensor::F32(s)), Value::Tensor(Tensor::F32(x))) =
                (&inputs[0], &inputs[1])
            else {
                bail!("bad feed");
            };
            let next = Value::Tensor(Tensor::F32(s + x));
            Ok(vec![next.clone(), next])
        }
    }

    #[test]
    fn scan_reverse_input_and_output_axis() {
        use crate::ir::{Attr, Node, ValueInfo};
        use std::collections::HashMap;
        use std::sync::Arc;
        let vi = |n: &str| ValueInfo {
            name: n.into(),
            ty: ValueType::Unknown,
        };
        let body = Graph {
            inputs: vec![vi("s"), vi("x")],
            outputs: vec![vi("s2"), vi("y")],
            ..Default::default()
        };
        let mut attrs = HashMap::new();
        attrs.insert("body".to_string(), Attr::Graph(Arc::new(body)));
        attrs.insert("num_scan_inputs".to_string(), Attr::Int(1));
        attrs.insert("scan_input_axes".to_string(), Attr::Ints(vec![1]));
        attrs.insert("scan_input_directions".to_string(), Attr::Ints(vec![1]));
        attrs.insert("scan_output_axes".to_string(), Attr::Ints(vec![-1]));
        let node = Node {
            name: "scan".into(),
            op_type: "Scan".into(),
            domain: String::new(),
            opset: 16,
            inputs: vec!["s".into(), "x".into()],
            outputs: vec!["s_out".into(), "y".into()],
            attrs,
        };
        let ctx = OpCtx {
            node: &node,
            runner: &SumBody,
            max_tensor_bytes: 1 << 30,
        };
        // x: [2, 3] (scan axis 1, 3 steps), state: [2]; seeded non-zero values.
        let mut seed = 17u32;
        let mut rnd = || {
            seed = seed.wrapping_mul(1103515245).wrapping_add(12345);
            ((seed >> 16) % 100) as f32 / 10.0 + 0.1
        };
        let xv: Vec<f32> = (0..6).map(|_| rnd()).collect();
        let s0 = vec![rnd(), rnd()];
        let x = Value::Tensor(Tensor::from_f32(&[2, 3], xv.clone()).unwrap());
        let s = Value::Tensor(Tensor::from_f32(&[2], s0.clone()).unwrap());
        let out = scan_op(&ctx, &[Some(&s), Some(&x)]).unwrap();
        // Reverse scan: step t reads column 2 - t; output y[:, t] is the running sum after step t.
        let mut want_y = vec![0.0f32; 6];
        let mut acc = s0.clone();
        for t in 0..3 {
            for r in 0..2 {
                acc[r] += xv[r * 3 + (2 - t)];
                want_y[r * 3 + t] = acc[r];
            }
        }
        assert_eq!(out[0], Value::Tensor(Tensor::from_f32(&[2], acc).unwrap()));
        assert_eq!(
            out[1],
            Value::Tensor(Tensor::from_f32(&[2, 3], want_y).unwrap())
        );
    }
}
