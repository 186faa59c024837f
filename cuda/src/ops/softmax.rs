//! CUDA kernels: the `softmax` family (Softmax, LogSoftmax, Hardmax).
//!
//! The op runs over the lanes of `[outer, n, inner]`, the CPU kernel's view: one axis from opset 13,
//! the input flattened to 2-D at `axis` before. Each lane is one row of a [`Rows`] layout (a warp or
//! block for long contiguous lanes, one thread per lane otherwise) and takes three passes: the max
//! (NaN-propagating), the sum of exp(x - max) in f64, then the outputs, computed in f64 and rounded
//! once. Hardmax finds the first index of the max instead (NaN counts as the largest value, like the
//! CPU kernel) and writes the one-hot lane.
use super::math::{exp64, log64};
use super::reduce::rows::{
    BLOCK, Elem, NONE, Rows, arg_combine, combine_add, combine_max, d, f32_of, f64_of, load,
    max_nan, store,
};
use super::require_u32_len;
use crate::driver::Arg;
use crate::ptx::{Cmp, Kernel, Reg, Space, Ty, module};
use crate::{CudaKernel, DevTensor, Inputs, KError, KResult, Run, dev_input};
use quorum_core::error::OpError;
use quorum_core::ir::Node;
use quorum_core::ops::OpCtx;

/// The kernel for `node` if this family owns its op type.
pub fn claim(_node: &Node) -> Option<Result<CudaKernel, String>> {
    Some(Ok(k_softmax as CudaKernel))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Soft,
    LogSoft,
    Hard,
}

/// The kernel `softmax(x, y, rows)` over lanes of `[_, n, inner]`; `rows` = outer · inner lanes.
pub(crate) fn softmax_kernel(kind: Kind, e: Elem, n: usize, inner: usize, layout: Rows) -> Kernel {
    let mut k = Kernel::new("softmax");
    let x = k.param_ptr("x");
    let y = k.param_ptr("y");
    let nrows = k.param("rows", Ty::U32);
    let ids = layout.ids(&mut k, nrows);
    // The lane's first element and the stride between its elements.
    let base = if inner == 1 {
        k.mul(Ty::U32, ids.row, n as u32)
    } else {
        let o = k.div(Ty::U32, ids.row, inner as u32);
        let c = k.rem(Ty::U32, ids.row, inner as u32);
        k.fma(Ty::U32, o, (n * inner) as u32, c)
    };
    let at = |k: &mut Kernel, j: Reg| -> Reg {
        if inner == 1 {
            k.add(Ty::U32, base, j)
        } else {
            k.fma(Ty::U32, j, inner as u32, base)
        }
    };
    if kind == Kind::Hard {
        let v = k.mov(Ty::F32, 0.0f32);
        let i = k.mov(Ty::U32, NONE);
        let comb = arg_combine(true, false);
        layout.for_each(&mut k, &ids, n, |k, j| {
            let xi = at(k, j);
            let xv = load(k, e, x, xi);
            comb(k, &[v, i], &[xv, j]);
        });
        layout.reduce(&mut k, &ids, &[v, i], &comb);
        layout.for_each(&mut k, &ids, n, |k, j| {
            let yi = at(k, j);
            let hit = k.setp(Cmp::Eq, Ty::U32, j, i);
            let o = k.selp(Ty::F32, 1.0f32, 0.0f32, hit);
            store(k, e, y, yi, o);
        });
        return k;
    }
    let m = k.mov(Ty::F32, f32::NEG_INFINITY);
    layout.for_each(&mut k, &ids, n, |k, j| {
        let xi = at(k, j);
        let xv = load(k, e, x, xi);
        let t = max_nan(k, m, xv);
        k.assign(m, t);
    });
    layout.reduce(&mut k, &ids, &[m], &combine_max);
    let md = f64_of(&mut k, m);
    let s = k.mov(Ty::F64, 0.0f64);
    // f32 Softmax keeps exp(x - max) in `y` (rounded once) and rescales it in the last pass, saving
    // one exp per element; f16 would round it twice to half precision, so it recomputes.
    let keep = kind == Kind::Soft && e == Elem::F32;
    layout.for_each(&mut k, &ids, n, |k, j| {
        let xi = at(k, j);
        let xv = load(k, e, x, xi);
        let xd = f64_of(k, xv);
        let dv = k.sub(Ty::F64, xd, md);
        let ev = exp64(k, dv);
        let t = k.add(Ty::F64, s, ev);
        k.assign(s, t);
        if keep {
            let ef = f32_of(k, ev);
            store(k, e, y, xi, ef);
        }
    });
    layout.reduce(&mut k, &ids, &[s], &combine_add);
    let f = if kind == Kind::Soft {
        k.div(Ty::F64, d(1.0), s)
    } else {
        log64(&mut k, s)
    };
    layout.for_each(&mut k, &ids, n, |k, j| {
        let xi = at(k, j);
        let r = if keep {
            // Written by this same thread in the previous pass: a plain (coherent) load.
            let a = k.addr(y, xi, 4);
            let ev = k.ld(Space::Global, Ty::F32, a, 0);
            let ev = f64_of(k, ev);
            k.mul(Ty::F64, ev, f)
        } else {
            let xv = load(k, e, x, xi);
            let xd = f64_of(k, xv);
            let dv = k.sub(Ty::F64, xd, md);
            if kind == Kind::Soft {
                let ev = exp64(k, dv);
                k.mul(Ty::F64, ev, f)
            } else {
                k.sub(Ty::F64, dv, f)
            }
        };
        let r = f32_of(k, r);
        store(k, e, y, xi, r);
    });
    k
}

/// Runs `kind` over the lanes `(outer, n, inner)` of the device tensor `x`.
pub(crate) fn softmax_dev(
    run: &Run,
    x: &DevTensor,
    kind: Kind,
    (outer, n, inner): (usize, usize, usize),
) -> KResult<DevTensor> {
    let e = Elem::operand("the input", Some(x.dtype))?;
    require_u32_len(&x.shape)?;
    let y = run.alloc(e.dtype(), &x.shape)?;
    let rows = outer * inner;
    if x.is_empty() {
        return Ok(y);
    }
    let layout = Rows::choose(rows, n, inner == 1);
    let ptx = module(run.cc(), &[softmax_kernel(kind, e, n, inner, layout)]);
    run.launch(
        &ptx,
        "softmax",
        (layout.grid(rows), 1, 1),
        (BLOCK, 1, 1),
        0,
        &[x.arg_in(), y.arg_out(), Arg::U32(rows as u32)],
    )?;
    Ok(y)
}

fn k_softmax(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let kind = match ctx.node.op_type.as_str() {
        "Softmax" => Kind::Soft,
        "LogSoftmax" => Kind::LogSoft,
        _ => Kind::Hard,
    };
    Elem::operand("the input", inputs.dtype(0))?;
    let shape = inputs
        .shape(0)
        .ok_or_else(|| KError::Op(OpError::Invalid("input 0 is required".into())))?;
    let dims = quorum_core::ops::softmax::lanes(ctx, &shape)?;
    let x = dev_input(inputs, 0)?;
    Ok(vec![softmax_dev(run, &x, kind, dims)?])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_are_well_formed() {
        for (n, inner) in [(5000, 1), (40, 1), (7, 1), (3, 5), (300, 4)] {
            for layout in [
                Rows::Thread,
                Rows::Cols(8),
                Rows::Lanes(4),
                Rows::Lanes(32),
                Rows::Block,
            ] {
                for kind in [Kind::Soft, Kind::LogSoft, Kind::Hard] {
                    let t = module((9, 0), &[softmax_kernel(kind, Elem::F32, n, inner, layout)]);
                    assert!(t.contains(".visible .entry softmax("), "{t}");
                    assert!(t.contains("L_loop_"), "{t}");
                    assert!(!t.contains(".approx"), "{t}");
                    assert_eq!(
                        t.contains("bar.sync"),
                        matches!(layout, Rows::Block | Rows::Cols(_)),
                        "{t}"
                    );
                    assert_eq!(kind == Kind::Hard, !t.contains("max.NaN.f32"), "{t}");
                    if kind == Kind::Soft {
                        assert!(t.contains("div.rn.f64"), "{t}");
                        // The exponentials are kept in y and rescaled: one exp per element.
                        assert!(t.contains("ld.global.f32"), "{t}");
                        assert_eq!(t.matches("cvt.rni.s32.f64").count(), 1, "{t}");
                    }
                }
            }
        }
        let t = module(
            (9, 0),
            &[softmax_kernel(
                Kind::Soft,
                Elem::F16,
                64,
                1,
                Rows::Lanes(32),
            )],
        );
        assert!(
            t.contains("cvt.f32.f16") && t.contains("cvt.rn.f16.f32"),
            "{t}"
        );
    }
}
