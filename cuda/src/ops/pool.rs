//! CUDA kernels: the `pool` family (MaxPool, AveragePool, LpPool, GlobalAveragePool, GlobalMaxPool).
//!
//! Windowed pools are one thread per output element: the thread decomposes its index into the
//! (n, c) plane and the output position, then walks every tap of the window in nested loops (1 to 3
//! spatial dims), with predicates for "inside the input" and "inside the padded extent" (for
//! count_include_pad). The geometry (output shape, pads from auto_pad and ceil_mode) is the CPU
//! kernel's `pool_geom`, baked into the PTX as constants. MaxPool keeps the first maximum (the first NaN
//! wins, like the CPU kernel) and its flattened index, row- or
//! column-major over the spatial dims. Sums and powers are f64. Global pools are reductions.
use super::math::{exp64, log64};
use super::reduce::rows::{BLOCK, Elem, NONE, d, f64_of, load, store, store_f64};
use super::reduce::{Red, reduce_dev};
use super::{require_u32_len, thread_index};
use crate::driver::Arg;
use crate::ptx::{Cmp, Kernel, Op, Reg, Space, Ty, module};
use crate::{CudaKernel, DevTensor, Inputs, KError, KResult, Run, blocks, dev_input};
use quorum_core::error::OpError;
use quorum_core::ir::Node;
use quorum_core::ops::OpCtx;
use quorum_core::ops::pool::{PGeom, out_shape, pool_geom};
use quorum_core::tensor::DType;

/// The kernel for `node` if this family owns its op type.
pub fn claim(node: &Node) -> Option<Result<CudaKernel, String>> {
    Some(Ok(match node.op_type.as_str() {
        "MaxPool" | "AveragePool" | "LpPool" => k_pool as CudaKernel,
        "GlobalAveragePool" | "GlobalMaxPool" => k_global as CudaKernel,
        _ => return None,
    }))
}

/// What a window computes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum PoolKind {
    Max { indices: bool, col_major: bool },
    Avg { include_pad: bool },
    Lp(f64),
}

/// One spatial dim of a window walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Dim {
    pub ins: usize,
    pub outs: usize,
    pub k: usize,
    pub s: usize,
    pub d: usize,
    pub pb: i64,
    pub pe: i64,
    /// Input element stride of this dim within a plane.
    pub stride: usize,
    /// Multiplier of the position in the Indices output (row- or column-major).
    pub mul: usize,
}

/// The spatial dims of `g` (only the real ones), with strides and index multipliers.
pub(crate) fn dims_of(g: &PGeom, col_major: bool) -> Vec<Dim> {
    let r = g.rank;
    let ins = &g.ins[3 - r..];
    let mut stride = vec![1usize; r];
    for i in (0..r.saturating_sub(1)).rev() {
        stride[i] = stride[i + 1] * ins[i + 1];
    }
    let mut col = vec![1usize; r];
    for i in 1..r {
        col[i] = col[i - 1] * ins[i - 1];
    }
    (0..r)
        .map(|i| {
            let j = 3 - r + i;
            Dim {
                ins: g.ins[j],
                outs: g.outs[j],
                k: g.k[j],
                s: g.s[j],
                d: g.d[j],
                pb: g.pb[j],
                pe: g.pe[j],
                stride: stride[i],
                mul: if col_major { col[i] } else { stride[i] },
            }
        })
        .collect()
}

/// Per-tap state handed to the innermost loop body.
struct Tap {
    valid: Reg,
    padded: Reg,
    off: Reg,
    ioff: Reg,
}

/// Nested loops over the window taps of `dims[level..]`, combining the per-dim predicates and
/// offsets of the enclosing loops.
fn taps(
    k: &mut Kernel,
    dims: &[Dim],
    starts: &[Reg],
    level: usize,
    outer: Option<Tap>,
    body: &mut dyn FnMut(&mut Kernel, &Tap),
) {
    let Some(dm) = dims.get(level).copied() else {
        if let Some(t) = outer {
            body(k, &t);
        }
        return;
    };
    let start = starts[level];
    k.for_range(Ty::U32, 0u32, dm.k as u32, 1u32, |k, t| {
        let p = k.fma(Ty::S32, t, dm.d as i32, start);
        // A negative position wraps to a huge unsigned value: one compare bounds both sides.
        let inside = k.setp(Cmp::Lt, Ty::U32, p, dm.ins as u32);
        let lo = k.setp(Cmp::Ge, Ty::S32, p, -dm.pb as i32);
        let hi = k.setp(Cmp::Lt, Ty::S32, p, (dm.ins as i64 + dm.pe) as i32);
        let padded = k.pred_and(lo, hi);
        let tap = match &outer {
            None => {
                let off = k.mul(Ty::U32, p, dm.stride as u32);
                let ioff = k.mul(Ty::U32, p, dm.mul as u32);
                Tap {
                    valid: inside,
                    padded,
                    off,
                    ioff,
                }
            }
            Some(o) => Tap {
                valid: k.pred_and(o.valid, inside),
                padded: k.pred_and(o.padded, padded),
                off: k.fma(Ty::U32, p, dm.stride as u32, o.off),
                ioff: k.fma(Ty::U32, p, dm.mul as u32, o.ioff),
            },
        };
        taps(k, dims, starts, level + 1, Some(tap), body);
    });
}

/// The kernel `pool(x, y, [indices], n)`: one thread per output element of `dims`.
pub(crate) fn pool_kernel(kind: PoolKind, e: Elem, dims: &[Dim]) -> Kernel {
    let mut k = Kernel::new("pool");
    let x = k.param_ptr("x");
    let y = k.param_ptr("y");
    let idx_out = match kind {
        PoolKind::Max { indices: true, .. } => Some(k.param_ptr("indices")),
        _ => None,
    };
    let n = k.param("n", Ty::U32);
    let o = thread_index(&mut k, n);
    let mut rest = o;
    let mut coords = vec![rest; dims.len()];
    for (i, dm) in dims.iter().enumerate().rev() {
        coords[i] = k.rem(Ty::U32, rest, dm.outs as u32);
        rest = k.div(Ty::U32, rest, dm.outs as u32);
    }
    let in_plane: usize = dims.iter().map(|dm| dm.ins).product();
    let plane_base = k.mul(Ty::U32, rest, in_plane as u32);
    let starts: Vec<Reg> = dims
        .iter()
        .zip(&coords)
        .map(|(dm, &c)| k.fma(Ty::S32, c, dm.s as i32, -dm.pb as i32))
        .collect();
    match kind {
        PoolKind::Max { .. } => {
            let best = k.mov(Ty::F32, f32::NEG_INFINITY);
            let bi = k.mov(Ty::U32, NONE);
            taps(&mut k, dims, &starts, 0, None, &mut |k, t| {
                k.when(t.valid, |k| {
                    let i = k.add(Ty::U32, plane_base, t.off);
                    let v = load(k, e, x, i);
                    // Take the first tap, then any tap greater than the best or NaN, unless the
                    // best is already NaN: the first NaN wins, with its index (the CPU rule).
                    let none = k.setp(Cmp::Eq, Ty::U32, bi, NONE);
                    let gt = k.setp(Cmp::Gt, Ty::F32, v, best);
                    let v_nan = k.setp(Cmp::Nan, Ty::F32, v, v);
                    let up = k.pred_or(gt, v_nan);
                    let best_num = k.setp(Cmp::Num, Ty::F32, best, best);
                    let up = k.pred_and(up, best_num);
                    let take = k.pred_or(none, up);
                    let nb = k.selp(Ty::F32, v, best, take);
                    let ni = k.selp(Ty::U32, t.ioff, bi, take);
                    k.assign(best, nb);
                    k.assign(bi, ni);
                });
            });
            // A window with no tap inside the input: -inf with index -1 (ReduceMax's empty-set
            // rule, as the CPU kernel and both oracles).
            let none = k.setp(Cmp::Eq, Ty::U32, bi, NONE);
            let v = k.selp(Ty::F32, f32::NEG_INFINITY, best, none);
            store(&mut k, e, y, o, v);
            if let Some(ip) = idx_out {
                let flat = k.add(Ty::U32, plane_base, bi);
                let wide = k.cvt(Ty::S64, Ty::U32, "", flat);
                let wide = k.selp(Ty::S64, Op::I(-1), wide, none);
                let a = k.addr(ip, o, 8);
                k.st(Space::Global, a, 0, wide);
            }
        }
        PoolKind::Avg { include_pad } => {
            let sum = k.mov(Ty::F64, 0.0f64);
            let cnt = k.mov(Ty::U32, 0u32);
            let cnt_pad = k.mov(Ty::U32, 0u32);
            taps(&mut k, dims, &starts, 0, None, &mut |k, t| {
                let one = k.selp(Ty::U32, 1u32, 0u32, t.padded);
                let c = k.add(Ty::U32, cnt_pad, one);
                k.assign(cnt_pad, c);
                k.when(t.valid, |k| {
                    let i = k.add(Ty::U32, plane_base, t.off);
                    let v = load(k, e, x, i);
                    let vd = f64_of(k, v);
                    let s = k.add(Ty::F64, sum, vd);
                    k.assign(sum, s);
                    let c = k.add(Ty::U32, cnt, 1u32);
                    k.assign(cnt, c);
                });
            });
            let c = if include_pad { cnt_pad } else { cnt };
            let cf = k.cvt(Ty::F64, Ty::U32, ".rn", c);
            let r = k.div(Ty::F64, sum, cf);
            store_f64(&mut k, e, y, o, r);
        }
        PoolKind::Lp(p) => {
            let sum = k.mov(Ty::F64, 0.0f64);
            taps(&mut k, dims, &starts, 0, None, &mut |k, t| {
                k.when(t.valid, |k| {
                    let i = k.add(Ty::U32, plane_base, t.off);
                    let v = load(k, e, x, i);
                    let vd = f64_of(k, v);
                    let a = k.unary("abs", Ty::F64, vd);
                    let term = if p == 1.0 {
                        a
                    } else if p == 2.0 {
                        k.mul(Ty::F64, a, a)
                    } else {
                        let l = log64(k, a);
                        let l = k.mul(Ty::F64, l, d(p));
                        exp64(k, l)
                    };
                    let s = k.add(Ty::F64, sum, term);
                    k.assign(sum, s);
                });
            });
            let r = if p == 1.0 {
                sum
            } else if p == 2.0 {
                k.unary("sqrt.rn", Ty::F64, sum)
            } else {
                let l = log64(&mut k, sum);
                let l = k.div(Ty::F64, l, d(p));
                exp64(&mut k, l)
            };
            store_f64(&mut k, e, y, o, r);
        }
    }
    k
}

fn invalid(msg: String) -> KError {
    KError::Op(OpError::Invalid(msg))
}

fn k_pool(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let op = ctx.node.op_type.as_str();
    let e = Elem::operand("the input", inputs.dtype(0))?;
    let shape = inputs
        .shape(0)
        .ok_or_else(|| invalid("input 0 is required".into()))?;
    let g = pool_geom(ctx, &shape)?;
    let oshape = out_shape(&shape, &g);
    let want_idx = op == "MaxPool" && ctx.node.outputs.len() > 1 && !ctx.node.outputs[1].is_empty();
    let col_major = ctx.attr_i("storage_order", 0)? != 0;
    let kind = match op {
        "MaxPool" => PoolKind::Max {
            indices: want_idx,
            col_major,
        },
        "AveragePool" => PoolKind::Avg {
            include_pad: ctx.attr_i("count_include_pad", 0)? != 0,
        },
        _ => PoolKind::Lp(ctx.attr_f("p", 2.0)? as f64),
    };
    ctx.check_alloc(&oshape, e.size() + if want_idx { 8 } else { 0 })?;
    require_u32_len(&shape)?;
    let n = require_u32_len(&oshape)?;
    let x = dev_input(inputs, 0)?;
    let y = run.alloc(e.dtype(), &oshape)?;
    let idx = if want_idx {
        Some(run.alloc(DType::I64, &oshape)?)
    } else {
        None
    };
    if n > 0 {
        let dims = dims_of(&g, col_major);
        let ptx = module(run.cc(), &[pool_kernel(kind, e, &dims)]);
        let mut args = vec![x.arg_in(), y.arg_out()];
        if let Some(i) = &idx {
            args.push(i.arg_out());
        }
        args.push(Arg::U32(n));
        run.launch(
            &ptx,
            "pool",
            (blocks(n as usize, BLOCK), 1, 1),
            (BLOCK, 1, 1),
            0,
            &args,
        )?;
    }
    let mut out = vec![y];
    out.extend(idx);
    Ok(out)
}

fn k_global(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    Elem::operand("the input", inputs.dtype(0))?;
    let shape = inputs
        .shape(0)
        .ok_or_else(|| invalid("input 0 is required".into()))?;
    if shape.len() < 2 {
        return Err(invalid(format!(
            "global pooling needs an input of rank >= 2, got {shape:?}"
        )));
    }
    if shape[2..].iter().product::<usize>() == 0 {
        return Err(invalid(format!(
            "global pooling over an empty spatial extent {shape:?}"
        )));
    }
    let red = if ctx.node.op_type == "GlobalMaxPool" {
        Red::Max
    } else {
        Red::Mean
    };
    let axes: Vec<usize> = (2..shape.len()).collect();
    let x = dev_input(inputs, 0)?;
    Ok(vec![reduce_dev(run, &x, red, &axes, true)?])
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn dim(ins: usize, k: usize, s: usize, d: usize, pb: i64, pe: i64) -> Dim {
        let outs =
            ((ins as i64 + pb + pe - ((k as i64 - 1) * d as i64 + 1)) / s as i64 + 1) as usize;
        Dim {
            ins,
            outs,
            k,
            s,
            d,
            pb,
            pe,
            stride: 1,
            mul: 1,
        }
    }

    /// Window walks of one, two and three dims (padding, dilation, strides), shared with the PTX
    /// golden digest.
    pub(crate) fn sample_walks() -> Vec<Vec<Dim>> {
        let d1 = vec![dim(7, 3, 2, 1, 1, 1)];
        let mut d2 = vec![dim(5, 2, 1, 2, 0, 1), dim(6, 3, 2, 1, 1, 0)];
        d2[0].stride = 6;
        d2[0].mul = 6;
        let d3 = vec![dim(3, 2, 1, 1, 0, 0); 3];
        vec![d1, d2, d3]
    }

    /// Every window computation, shared with the PTX golden digest.
    pub(crate) const SAMPLE_KINDS: [PoolKind; 6] = [
        PoolKind::Max {
            indices: true,
            col_major: false,
        },
        PoolKind::Max {
            indices: false,
            col_major: true,
        },
        PoolKind::Avg { include_pad: true },
        PoolKind::Avg { include_pad: false },
        PoolKind::Lp(2.0),
        PoolKind::Lp(3.0),
    ];

    #[test]
    fn pool_kernels_are_well_formed() {
        for dims in sample_walks() {
            for kind in SAMPLE_KINDS {
                let t = module((9, 0), &[pool_kernel(kind, Elem::F32, &dims)]);
                assert!(t.contains(".visible .entry pool("), "{t}");
                assert!(!t.contains(".approx"), "{t}");
                assert_eq!(t.matches("L_loop_").count(), 2 * dims.len(), "{t}");
                let idx = matches!(kind, PoolKind::Max { indices: true, .. });
                assert_eq!(t.contains(".param .u64 indices"), idx, "{t}");
                assert_eq!(t.contains("st.global.s64"), idx, "{t}");
            }
        }
    }

    #[test]
    fn column_major_multipliers() {
        let g = PGeom {
            rank: 2,
            ins: [1, 4, 5],
            k: [1, 2, 2],
            s: [1, 1, 1],
            d: [1, 1, 1],
            pb: [0, 0, 0],
            pe: [0, 0, 0],
            outs: [1, 3, 4],
        };
        let row = dims_of(&g, false);
        let col = dims_of(&g, true);
        assert_eq!((row[0].stride, row[1].stride), (5, 1));
        assert_eq!((row[0].mul, row[1].mul), (5, 1));
        assert_eq!((col[0].mul, col[1].mul), (1, 4));
    }
}
