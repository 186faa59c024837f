//! CUDA kernels: the `norm` family (BatchNormalization in inference mode, InstanceNormalization,
//! LayerNormalization, GroupNormalization, LRN).
//!
//! Instance, Layer and Group normalization are row normalizations (`norm/rows.rs`): each normalized
//! group is a contiguous row, normalized in f64 and rounded once. BatchNormalization and LRN are one
//! thread per element. Shape and attribute rules follow the CPU kernels in `ops/norm.rs`.
use super::math::{exp64, log64};
use super::reduce::rows::{BLOCK, Elem, d, load, load_f64, store, store_f64};
use super::{broadcast_strides, require_u32_len, simplify, thread_index};
use crate::driver::Arg;
use crate::ptx::{Kernel, Reg, Ty, module};
use crate::{CudaKernel, DevTensor, Inputs, KError, KResult, Run, blocks, dev_input};
use quorum_core::error::OpError;
use quorum_core::ir::{Attr, Node};
use quorum_core::ops::{OpCtx, norm_axis};

pub(super) mod rows;

use rows::{ParamAt, RowNorm, rem_const, rownorm_run, rownorm_run_stats};

fn int_attr(node: &Node, name: &str, default: i64) -> i64 {
    match node.attrs.get(name) {
        Some(Attr::Int(v)) => *v,
        _ => default,
    }
}

/// Whether a BatchNormalization node computes batch statistics (the CPU kernel's rule per opset).
fn bn_training(node: &Node) -> bool {
    let wanted = node
        .outputs
        .iter()
        .rposition(|o| !o.is_empty())
        .map_or(1, |p| p + 1);
    if node.opset >= 14 {
        int_attr(node, "training_mode", 0) != 0
    } else if node.opset >= 7 {
        wanted > 1
    } else {
        int_attr(node, "is_test", 0) == 0
    }
}

/// The kernel for `node` if this family owns its op type.
pub fn claim(node: &Node) -> Option<Result<CudaKernel, String>> {
    Some(match node.op_type.as_str() {
        "BatchNormalization" if bn_training(node) => Err(
            "BatchNormalization in training mode (batch statistics and running updates) runs on the CPU"
                .into(),
        ),
        "BatchNormalization" => Ok(k_batch_norm as CudaKernel),
        "LayerNormalization" if node.outputs.len() > 1 && int_attr(node, "stash_type", 1) != 1 => {
            Err("LayerNormalization Mean/InvStdDev with stash_type other than float".into())
        }
        "LayerNormalization" => Ok(k_layer_norm as CudaKernel),
        "InstanceNormalization" => Ok(k_instance_norm as CudaKernel),
        "GroupNormalization" => Ok(k_group_norm as CudaKernel),
        "LRN" => Ok(k_lrn as CudaKernel),
        _ => return None,
    })
}

/// The kernel `batchnorm(x, scale, bias, mean, var, y, n)`, one thread per element: channel
/// `(i / inner) % c`, or `i % (c · inner)` for per-element parameters (opset < 9, spatial = 0).
pub(crate) fn bn_kernel(
    ex: Elem,
    ep: [Elem; 4],
    c: usize,
    inner: usize,
    per_elem: bool,
    eps: f64,
) -> Kernel {
    let mut k = Kernel::new("batchnorm");
    let x = k.param_ptr("x");
    let p: Vec<Reg> = ["scale", "bias", "mean", "var"]
        .iter()
        .map(|n| k.param_ptr(n))
        .collect();
    let y = k.param_ptr("y");
    let n = k.param("n", Ty::U32);
    let i = thread_index(&mut k, n);
    let ch = if per_elem {
        rem_const(&mut k, i, c * inner)
    } else {
        let q = k.div(Ty::U32, i, inner.max(1) as u32);
        rem_const(&mut k, q, c)
    };
    // f32 is enough here: the oracles allow 64 ulps of |t|·(|x| + |mean|) + |bias|.
    let v: Vec<Reg> = (0..4).map(|j| load(&mut k, ep[j], p[j], ch)).collect();
    let ve = k.add(Ty::F32, v[3], eps as f32);
    let sd = k.unary("sqrt.rn", Ty::F32, ve);
    let t = k.div(Ty::F32, v[0], sd);
    let xv = load(&mut k, ex, x, i);
    let dv = k.sub(Ty::F32, xv, v[2]);
    let r = k.fma(Ty::F32, t, dv, v[1]);
    store(&mut k, ex, y, i, r);
    k
}

/// The kernel `lrn(x, y, n)`, one thread per element: the sum of squares over the channel window
/// `[ch - (size-1)/2, ch + size/2]` (clipped), then `x / (bias + alpha/size · sum)^beta` in f64.
pub(crate) fn lrn_kernel(
    e: Elem,
    c: usize,
    inner: usize,
    size: usize,
    alpha: f64,
    beta: f64,
    bias: f64,
) -> Kernel {
    let mut k = Kernel::new("lrn");
    let x = k.param_ptr("x");
    let y = k.param_ptr("y");
    let n = k.param("n", Ty::U32);
    let i = thread_index(&mut k, n);
    let q = k.div(Ty::U32, i, inner as u32);
    let ch = rem_const(&mut k, q, c);
    // The element of channel 0 at this position.
    let off = k.mul(Ty::U32, ch, inner as u32);
    let base = k.sub(Ty::U32, i, off);
    // Window offsets, clipped to the channel count (the window is clipped to [0, c) anyway).
    let lo = ((size - 1) / 2).min(c) as i32;
    let hi = (size / 2 + 1).min(c) as u32;
    let first = k.sub(Ty::S32, ch, lo);
    let first = k.max(Ty::S32, first, 0i32);
    let end = k.add(Ty::U32, ch, hi);
    let end = k.min(Ty::U32, end, c as u32);
    let sum = k.mov(Ty::F64, 0.0f64);
    k.for_range(Ty::U32, first, end, 1u32, |k, j| {
        let idx = k.fma(Ty::U32, j, inner as u32, base);
        let v = load_f64(k, e, x, idx);
        let t = k.fma(Ty::F64, v, v, sum);
        k.assign(sum, t);
    });
    let den = k.fma(Ty::F64, sum, d(alpha / size as f64), d(bias));
    let l = log64(&mut k, den);
    let l = k.mul(Ty::F64, l, d(beta));
    let p = exp64(&mut k, l);
    let xv = load_f64(&mut k, e, x, i);
    let r = k.div(Ty::F64, xv, p);
    store_f64(&mut k, e, y, i, r);
    k
}

fn invalid(msg: String) -> KError {
    KError::Op(OpError::Invalid(msg))
}

fn shape_of(inputs: &dyn Inputs, i: usize) -> KResult<Vec<usize>> {
    inputs
        .shape(i)
        .ok_or_else(|| invalid(format!("input {i} is required")))
}

/// `[N, C, inner]` of an input of rank >= 2.
fn nc_inner(shape: &[usize], op: &str) -> KResult<(usize, usize, usize)> {
    if shape.len() < 2 {
        return Err(invalid(format!(
            "{op} needs an input of rank >= 2, got shape {shape:?}"
        )));
    }
    Ok((shape[0], shape[1], shape[2..].iter().product()))
}

fn k_batch_norm(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    if bn_training(ctx.node) {
        return Err(KError::Decline("BatchNormalization training mode".into()));
    }
    let ex = Elem::operand("X", inputs.dtype(0))?;
    let mut ep = [Elem::F32; 4];
    for (j, e) in ep.iter_mut().enumerate() {
        *e = Elem::operand("a BatchNormalization parameter", inputs.dtype(j + 1))?;
    }
    let shape = shape_of(inputs, 0)?;
    let (_, c, inner) = nc_inner(&shape, "BatchNormalization")?;
    let lens: Vec<usize> = (1..5)
        .map(|j| shape_of(inputs, j).map(|s| s.iter().product()))
        .collect::<KResult<_>>()?;
    let per_elem = lens[0] != c && lens[0] == c * inner && ctx.opset() < 9;
    let plen = if per_elem { c * inner } else { c };
    if lens.iter().any(|&l| l != plen) {
        return Err(invalid(format!(
            "scale, B, mean and var have {lens:?} elements; {plen} expected for input {shape:?}"
        )));
    }
    let n = require_u32_len(&shape)?;
    let eps = ctx.attr_f("epsilon", 1e-5)? as f64;
    let x = dev_input(inputs, 0)?;
    let params: Vec<DevTensor> = (1..5)
        .map(|j| dev_input(inputs, j))
        .collect::<KResult<_>>()?;
    let y = run.alloc(ex.dtype(), &shape)?;
    if n == 0 {
        return Ok(vec![y]);
    }
    let ptx = module(run.cc(), &[bn_kernel(ex, ep, c, inner, per_elem, eps)]);
    let mut args = vec![x.arg_in()];
    args.extend(params.iter().map(|p| p.arg_in()));
    args.push(y.arg_out());
    args.push(Arg::U32(n));
    run.launch(
        &ptx,
        "batchnorm",
        (blocks(n as usize, BLOCK), 1, 1),
        (BLOCK, 1, 1),
        0,
        &args,
    )?;
    Ok(vec![y])
}

fn k_instance_norm(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let ex = Elem::operand("the input", inputs.dtype(0))?;
    let ew = Elem::operand("scale", inputs.dtype(1))?;
    let eb = Elem::operand("B", inputs.dtype(2))?;
    let shape = shape_of(inputs, 0)?;
    let (n, c, inner) = nc_inner(&shape, "InstanceNormalization")?;
    for j in [1, 2] {
        let l: usize = shape_of(inputs, j)?.iter().product();
        if l != c {
            return Err(invalid(format!(
                "InstanceNormalization parameter {j} has {l} elements, expected {c}"
            )));
        }
    }
    let s = RowNorm {
        x: ex,
        scale: ew,
        bias: Some(eb),
        cols: inner,
        eps: ctx.attr_f("epsilon", 1e-5)? as f64,
        at: ParamAt::Row { c },
        stats: false,
    };
    rownorm_run(run, inputs, &s, &shape, n * c).map(|(y, _)| vec![y])
}

fn k_group_norm(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let ex = Elem::operand("the input", inputs.dtype(0))?;
    let ew = Elem::operand("scale", inputs.dtype(1))?;
    let eb = Elem::operand("bias", inputs.dtype(2))?;
    let shape = shape_of(inputs, 0)?;
    let (n, c, inner) = nc_inner(&shape, "GroupNormalization")?;
    let g = ctx.req_i("num_groups")?;
    if g <= 0 || c % g as usize != 0 {
        return Err(invalid(format!(
            "num_groups {g} must be positive and divide the {c} channels"
        )));
    }
    let g = g as usize;
    let cpg = c / g;
    let slen: usize = shape_of(inputs, 1)?.iter().product();
    let blen: usize = shape_of(inputs, 2)?.iter().product();
    // Opset 21 takes per-channel scale and bias; opset 18 took one per group.
    let per_channel = ctx.opset() >= 21 || slen != g;
    let want = if per_channel { c } else { g };
    if slen != want || blen != want {
        return Err(invalid(format!(
            "GroupNormalization scale ({slen}) and bias ({blen}) must have {want} elements"
        )));
    }
    let s = RowNorm {
        x: ex,
        scale: ew,
        bias: Some(eb),
        cols: cpg * inner,
        eps: ctx.attr_f("epsilon", 1e-5)? as f64,
        at: if per_channel {
            ParamAt::Channel { g, cpg, inner }
        } else {
            ParamAt::Row { c: g }
        },
        stats: false,
    };
    rownorm_run(run, inputs, &s, &shape, n * g).map(|(y, _)| vec![y])
}

/// Whether `p` broadcasts (numpy rules, one-directional) to `target`.
fn broadcasts_to(p: &[usize], target: &[usize]) -> bool {
    p.len() <= target.len()
        && p.iter()
            .rev()
            .zip(target.iter().rev())
            .all(|(&a, &b)| a == b || a == 1)
}

fn k_layer_norm(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let ex = Elem::operand("X", inputs.dtype(0))?;
    let ew = Elem::operand("Scale", inputs.dtype(1))?;
    let has_bias = inputs.len() > 2 && inputs.present(2);
    let eb = if has_bias {
        Some(Elem::operand("B", inputs.dtype(2))?)
    } else {
        None
    };
    let shape = shape_of(inputs, 0)?;
    let rank = shape.len();
    let axis = norm_axis(ctx.attr_i("axis", -1)?, rank)?;
    let norm_shape = &shape[axis..];
    let cols: usize = norm_shape.iter().product();
    let rows: usize = shape[..axis].iter().product();
    let ws = shape_of(inputs, 1)?;
    let bs = if has_bias {
        shape_of(inputs, 2)?
    } else {
        vec![]
    };
    for (p, what) in [(&ws, "Scale"), (&bs, "B")] {
        if !broadcasts_to(p, norm_shape) {
            return Err(invalid(format!(
                "{what} of shape {p:?} does not broadcast to {norm_shape:?}"
            )));
        }
    }
    let stats = ctx.node.outputs.len() > 1;
    if stats && ctx.attr_i("stash_type", 1)? != 1 {
        return Err(KError::Decline("stash_type other than float".into()));
    }
    let (pshape, pstrides) = simplify(
        norm_shape,
        &[
            broadcast_strides(&ws, norm_shape),
            broadcast_strides(&bs, norm_shape),
        ],
    );
    let s = RowNorm {
        x: ex,
        scale: ew,
        bias: eb,
        cols,
        eps: ctx.attr_f("epsilon", 1e-5)? as f64,
        at: ParamAt::Cols {
            shape: pshape,
            strides: pstrides,
        },
        stats,
    };
    let stat_shape: Vec<usize> = (0..rank)
        .map(|i| if i < axis { shape[i] } else { 1 })
        .collect();
    let (y, st) = rownorm_run_stats(run, inputs, &s, &shape, rows, &stat_shape)?;
    let mut out = vec![y];
    if let Some((m, i)) = st {
        out.push(m);
        out.push(i);
    }
    Ok(out)
}

fn k_lrn(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let e = Elem::operand("the input", inputs.dtype(0))?;
    let lrn = quorum_core::device::forms::Lrn::parse(ctx)?;
    let (size, alpha, beta, bias) = (lrn.size, lrn.alpha, lrn.beta, lrn.bias);
    let shape = shape_of(inputs, 0)?;
    let (_, c, inner) = nc_inner(&shape, "LRN")?;
    let n = require_u32_len(&shape)?;
    let x = dev_input(inputs, 0)?;
    let y = run.alloc(e.dtype(), &shape)?;
    if n == 0 {
        return Ok(vec![y]);
    }
    let size = size as usize;
    let ptx = module(
        run.cc(),
        &[lrn_kernel(e, c, inner, size, alpha, beta, bias)],
    );
    run.launch(
        &ptx,
        "lrn",
        (blocks(n as usize, BLOCK), 1, 1),
        (BLOCK, 1, 1),
        0,
        &[x.arg_in(), y.arg_out(), Arg::U32(n)],
    )?;
    Ok(vec![y])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(k: Kernel) -> String {
        let t = module((9, 0), &[k]);
        assert!(!t.contains(".approx"), "{t}");
        t
    }

    #[test]
    fn elementwise_norm_kernels_are_well_formed() {
        let t = text(bn_kernel(Elem::F16, [Elem::F32; 4], 3, 7, false, 1e-5));
        assert!(t.contains("rem.u32") && t.contains("cvt.rn.f16.f32"), "{t}");
        let t = text(lrn_kernel(Elem::F32, 5, 9, 3, 1e-4, 0.75, 1.0));
        assert!(t.contains("max.s32") && t.contains("min.u32"), "{t}");
        assert!(t.contains("L_loop_"), "{t}");
    }

    #[test]
    fn claim_declines_training() {
        let mut node = Node {
            name: "bn".into(),
            op_type: "BatchNormalization".into(),
            domain: String::new(),
            opset: 15,
            inputs: vec!["x".into(); 5],
            outputs: vec!["y".into()],
            attrs: Default::default(),
        };
        assert!(claim(&node).is_some_and(|r| r.is_ok()));
        node.attrs.insert("training_mode".into(), Attr::Int(1));
        assert!(claim(&node).is_some_and(|r| r.is_err()));
        node.opset = 6;
        node.attrs.clear();
        assert!(claim(&node).is_some_and(|r| r.is_err()));
        node.attrs.insert("is_test".into(), Attr::Int(1));
        assert!(claim(&node).is_some_and(|r| r.is_ok()));
    }
}
