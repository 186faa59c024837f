//! CUDA kernels: the `conv` family (Conv, ConvTranspose), 1-D to 3-D (spatial dims padded to three
//! with leading ones, as the CPU kernel does; geometry, pads and auto_pad come from
//! `quorum_core::ops::conv`).
//!
//! Conv runs one of three ways:
//! - pointwise (1×1 kernel, stride 1, no pads): a GEMM per (batch, group) on the input as it lies;
//! - depthwise (one input channel per group, any multiplier): a direct kernel, one thread per output;
//! - everything else: implicit GEMM, the tiled GEMM kernel with a B operand gathered from the input
//!   (the im2col index computed in the tile-load phase), per (batch, group).
//!
//! ConvTranspose runs a direct gather kernel: each output element sums the input positions that map
//! onto it.
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use super::elem::Elem;
use super::matmul::tile::Im2col;
use super::matmul::{BOperand, Problem, float_dtype, run_gemm};
use super::{require_u32_len, thread_index};
use crate::driver::Arg;
use crate::memory::DevTensor;
use crate::ptx::{self, Cmp, Kernel, Reg, Space, Ty};
use crate::{CudaKernel, Inputs, KError, KResult, Run, blocks, dev_input};
use quorum_core::device::conv::{conv_plan, convt_plan};
use quorum_core::error::OpError;
use quorum_core::ir::Node;
use quorum_core::ops::OpCtx;
use quorum_core::ops::conv::Geom;
use quorum_core::tensor::DType;

/// The kernel for `node` if this family owns its op type.
pub fn claim(node: &Node) -> Option<Result<CudaKernel, String>> {
    match node.op_type.as_str() {
        "Conv" => Some(Ok(conv as CudaKernel)),
        "ConvTranspose" => Some(Ok(conv_transpose as CudaKernel)),
        "ConvInteger" => Some(Ok(super::integer_conv::k_conv_integer as CudaKernel)),
        "QLinearConv" => Some(Ok(super::integer_conv::k_qlinear_conv as CudaKernel)),
        _ => None,
    }
}

fn invalid(msg: String) -> KError {
    KError::Op(OpError::Invalid(msg))
}

fn u32of(x: usize) -> KResult<u32> {
    u32::try_from(x)
        .ok()
        .filter(|&v| v < (1u32 << 31))
        .ok_or_else(|| KError::Decline(format!("{x} exceeds 32-bit indexing")))
}

fn i32of(x: i64) -> KResult<i32> {
    i32::try_from(x)
        .ok()
        .ok_or_else(|| KError::Decline(format!("pad {x} exceeds 32-bit indexing")))
}

/// X, W and the optional bias on the device, with their common float dtype.
fn operands(
    what: &str,
    inputs: &dyn Inputs,
) -> KResult<(DevTensor, DevTensor, Option<DevTensor>, DType)> {
    let x = dev_input(inputs, 0)?;
    let w = dev_input(inputs, 1)?;
    let b = if inputs.present(2) {
        inputs.dev(2)?
    } else {
        None
    };
    let mut ts = vec![&x, &w];
    ts.extend(b.as_ref());
    let dtype = float_dtype(what, &ts)?;
    let (xs, ws) = (&x.shape, &w.shape);
    if xs.len() < 3 || ws.len() != xs.len() {
        return Err(invalid(format!(
            "{what} needs X of rank >= 3 and W of the same rank, got {xs:?} and {ws:?}"
        )));
    }
    if xs.len() > 5 {
        crate::decline!("{what} with {} spatial dims", xs.len() - 2);
    }
    Ok((x, w, b, dtype))
}

fn geom_pads(g: &Geom) -> KResult<[i32; 3]> {
    Ok([i32of(g.pb[0])?, i32of(g.pb[1])?, i32of(g.pb[2])?])
}

fn u32s(v: [usize; 3]) -> KResult<[u32; 3]> {
    Ok([u32of(v[0])?, u32of(v[1])?, u32of(v[2])?])
}

fn conv(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let (x, w, bias, dtype) = operands("Conv", inputs)?;
    let (xs, ws) = (x.shape.clone(), w.shape.clone());
    let p = conv_plan(ctx, &xs, &ws, bias.as_ref().map(|b| b.len()))?;
    let (group, n, c, m, cg, mg) = (p.group, p.n, p.c, p.m, p.cg, p.mg);
    let (g, oshape) = (p.g, p.out_shape);
    let es = dtype.size_in_memory();
    ctx.check_alloc(&oshape, es)?;
    require_u32_len(&xs)?;
    require_u32_len(&ws)?;
    require_u32_len(&oshape)?;
    let y = run.alloc(dtype, &oshape)?;
    if y.is_empty() {
        return Ok(vec![y]);
    }
    let in_sp: usize = g.ins.iter().product();
    let out_sp: usize = g.outs.iter().product();
    let ksz: usize = g.k.iter().product();
    let pointwise = ksz == 1 && g.s == [1, 1, 1] && g.pb == [0, 0, 0] && g.outs == g.ins;
    if cg == 1 && group > 1 && !pointwise {
        direct(
            run,
            Direct::Conv,
            &x,
            &w,
            bias.as_ref(),
            &y,
            &g,
            group,
            cg,
            mg,
        )?;
        return Ok(vec![y]);
    }
    let kdim = cg * ksz;
    let bop = if pointwise {
        BOperand::Strided {
            ldb: out_sp,
            trans: false,
        }
    } else {
        BOperand::Im2col(Im2col {
            ins: u32s(g.ins)?,
            outs: u32s(g.outs)?,
            k: u32s(g.k)?,
            s: u32s(g.s)?,
            d: u32s(g.d)?,
            pads: geom_pads(&g)?,
        })
    };
    run_gemm(
        run,
        &Problem {
            dtype,
            m: mg,
            n: out_sp,
            k: kdim,
            a: w.ptr(),
            lda: kdim,
            trans_a: false,
            b: x.ptr(),
            bop,
            c: bias.as_ref().map(|b| (b.ptr(), 1, 0)),
            y: y.ptr(),
            ldy: out_sp,
            alpha: 1.0,
            beta: 1.0,
            batch: vec![n, group],
            strides: [
                vec![0, mg * kdim],
                vec![c * in_sp, cg * in_sp],
                vec![0, mg],
                vec![m * out_sp, mg * out_sp],
            ],
            ends: super::matmul::ends(&w, &x, bias.as_ref(), &y),
        },
    )?;
    Ok(vec![y])
}

fn conv_transpose(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let (x, w, bias, dtype) = operands("ConvTranspose", inputs)?;
    let (xs, ws) = (x.shape.clone(), w.shape.clone());
    let p = convt_plan(ctx, &xs, &ws, bias.as_ref().map(|b| b.len()))?;
    let (group, cg, mg) = (p.group, p.cg, p.mg);
    let (g, oshape) = (p.g, p.out_shape);
    let es = dtype.size_in_memory();
    ctx.check_alloc(&oshape, es)?;
    require_u32_len(&xs)?;
    require_u32_len(&ws)?;
    require_u32_len(&oshape)?;
    let y = run.alloc(dtype, &oshape)?;
    if y.is_empty() {
        return Ok(vec![y]);
    }
    direct(
        run,
        Direct::Transpose,
        &x,
        &w,
        bias.as_ref(),
        &y,
        &g,
        group,
        cg,
        mg,
    )?;
    Ok(vec![y])
}

/// Which direct kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Direct {
    /// Conv: W `[M, C/group, k...]`, input position `o·s − pad + t·d`.
    Conv,
    /// ConvTranspose: W `[C, M/group, k...]`, input position `(o + pad − t·d) / s` where exact.
    Transpose,
}

fn direct_ptx(cc: (i32, i32), kind: Direct, has_bias: bool, elem: Elem) -> (Arc<String>, String) {
    type Cache = Mutex<HashMap<(Direct, bool, Elem, (i32, i32)), Arc<String>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let name = direct_name(kind, has_bias, elem);
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
    let text = c
        .entry((kind, has_bias, elem, cc))
        .or_insert_with(|| Arc::new(ptx::module(cc, &[direct_kernel(kind, has_bias, elem)])))
        .clone();
    (text, name)
}

fn direct_name(kind: Direct, has_bias: bool, elem: Elem) -> String {
    let k = match kind {
        Direct::Conv => "conv",
        Direct::Transpose => "convt",
    };
    format!("quorum_{k}_direct_b{}_h{}", has_bias as u8, elem.tag())
}

#[allow(clippy::too_many_arguments)]
fn direct(
    run: &Run,
    kind: Direct,
    x: &DevTensor,
    w: &DevTensor,
    bias: Option<&DevTensor>,
    y: &DevTensor,
    g: &Geom,
    group: usize,
    cg: usize,
    mg: usize,
) -> KResult<()> {
    let elem = Elem::operand("X", Some(x.dtype))?;
    let (text, name) = direct_ptx(run.cc(), kind, bias.is_some(), elem);
    let total = y.len();
    let mut args = vec![
        x.arg_in(),
        w.arg_in(),
        DevTensor::arg_in_opt(bias),
        y.arg_out(),
        Arg::U32(u32of(total)?),
        Arg::U32(u32of(mg * group)?),
        Arg::U32(u32of(mg)?),
        Arg::U32(u32of(cg)?),
        Arg::U32(u32of(x.shape[1])?),
    ];
    for v in [g.outs, g.ins, g.k, g.s, g.d] {
        args.extend(u32s(v)?.map(Arg::U32));
    }
    args.extend(geom_pads(g)?.map(Arg::I32));
    run.launch_shared(
        &text,
        &name,
        (blocks(total, 256), 1, 1),
        (256, 1, 1),
        0,
        &args,
    )
}

/// One thread per output element `(n, oc, od, oh, ow)`; loops over the group's input channels and
/// the kernel taps, skipping taps that fall outside the input.
pub(super) fn direct_kernel(kind: Direct, has_bias: bool, elem: Elem) -> Kernel {
    let es = elem.size();
    let mut k = Kernel::new(&direct_name(kind, has_bias, elem));
    let x = k.param_ptr("x");
    let w = k.param_ptr("w");
    let bias = k.param_ptr("bias");
    let y = k.param_ptr("y");
    let [total, mch, mg, cg, cin] =
        ["total", "mch", "mg", "cg", "cin"].map(|s| k.param(s, Ty::U32));
    let o = ["o0", "o1", "o2"].map(|s| k.param(s, Ty::U32));
    let i = ["i0", "i1", "i2"].map(|s| k.param(s, Ty::U32));
    let kk = ["k0", "k1", "k2"].map(|s| k.param(s, Ty::U32));
    let s = ["s0", "s1", "s2"].map(|s| k.param(s, Ty::U32));
    let d = ["d0", "d1", "d2"].map(|s| k.param(s, Ty::U32));
    let p = ["p0", "p1", "p2"].map(|s| k.param(s, Ty::S32));

    let e = thread_index(&mut k, total);
    // e = (((nn · mch + oc) · o0 + od) · o1 + oh) · o2 + ow
    let ow = k.rem(Ty::U32, e, o[2]);
    let t = k.div(Ty::U32, e, o[2]);
    let oh = k.rem(Ty::U32, t, o[1]);
    let t = k.div(Ty::U32, t, o[1]);
    let od = k.rem(Ty::U32, t, o[0]);
    let t = k.div(Ty::U32, t, o[0]);
    let oc = k.rem(Ty::U32, t, mch);
    let nn = k.div(Ty::U32, t, mch);
    let oo = [od, oh, ow];
    let grp = k.div(Ty::U32, oc, mg);
    let mo = k.rem(Ty::U32, oc, mg);
    let in_sp = {
        let a = k.mul(Ty::U32, i[0], i[1]);
        k.mul(Ty::U32, a, i[2])
    };
    let ksz = {
        let a = k.mul(Ty::U32, kk[0], kk[1]);
        k.mul(Ty::U32, a, kk[2])
    };
    let acc = if has_bias {
        let ba = k.addr(bias, oc, es);
        let v = elem.load_nc(&mut k, ba, 0);
        k.mov(Ty::F32, v)
    } else {
        k.mov(Ty::F32, 0.0f32)
    };
    // Conv: input position base o·s − pad (per dim), tap adds t·d.
    // Transpose: o + pad, tap subtracts t·d, then divide by s where exact.
    let base: [Reg; 3] = [0, 1, 2].map(|j| match kind {
        Direct::Conv => {
            let a = k.mul(Ty::S32, oo[j], s[j]);
            k.sub(Ty::S32, a, p[j])
        }
        Direct::Transpose => k.add(Ty::S32, oo[j], p[j]),
    });
    k.for_range(Ty::U32, 0u32, cg, 1u32, |k, ci| {
        let ic = k.fma(Ty::U32, grp, cg, ci);
        let plane = {
            let r = k.fma(Ty::U32, nn, cin, ic);
            k.mul(Ty::U32, r, in_sp)
        };
        // Weight row of (oc, ci) for Conv, of (ic, mo) for Transpose.
        let wrow = match kind {
            Direct::Conv => {
                let r = k.fma(Ty::U32, oc, cg, ci);
                k.mul(Ty::U32, r, ksz)
            }
            Direct::Transpose => {
                let r = k.fma(Ty::U32, ic, mg, mo);
                k.mul(Ty::U32, r, ksz)
            }
        };
        // Nested tap loops over the spatial offsets within the plane and the weight row.
        let zero = k.mov(Ty::U32, 0u32);
        tap_loop(
            k,
            kind,
            0,
            &base,
            &i,
            &kk,
            &s,
            &d,
            zero,
            zero,
            &mut |k, xs, ws| {
                let xi = k.add(Ty::U32, plane, xs);
                let xa = k.addr(x, xi, es);
                let xv = elem.load_nc(k, xa, 0);
                let wi = k.add(Ty::U32, wrow, ws);
                let wa = k.addr(w, wi, es);
                let wv = elem.load_nc(k, wa, 0);
                k.fma_acc(acc, xv, wv);
            },
        );
    });
    let ya = k.addr(y, e, es);
    let h = elem.narrow(&mut k, acc);
    k.st(Space::Global, ya, 0, h);
    k
}

/// Loops over the taps of spatial dim `dim` (and, nested, the following dims); calls `body` with the
/// offsets within the input plane and the weight row of every tap that lands inside the input.
/// `xoff` / `woff` are the offsets accumulated over the outer dims (0 at dim 0).
#[allow(clippy::too_many_arguments)]
fn tap_loop(
    k: &mut Kernel,
    kind: Direct,
    dim: usize,
    base: &[Reg; 3],
    ins: &[Reg; 3],
    ks: &[Reg; 3],
    s: &[Reg; 3],
    d: &[Reg; 3],
    xoff: Reg,
    woff: Reg,
    body: &mut dyn FnMut(&mut Kernel, Reg, Reg),
) {
    if dim == 3 {
        body(k, xoff, woff);
        return;
    }
    k.for_range(Ty::U32, 0u32, ks[dim], 1u32, |k, t| {
        let td = k.mul(Ty::U32, t, d[dim]);
        let (pos, ok) = match kind {
            Direct::Conv => {
                let pos = k.add(Ty::S32, base[dim], td);
                // Negative positions are huge as unsigned: one compare checks both ends.
                let ok = k.setp(Cmp::Lt, Ty::U32, pos, ins[dim]);
                (pos, ok)
            }
            Direct::Transpose => {
                let num = k.sub(Ty::S32, base[dim], td);
                let nonneg = k.setp(Cmp::Ge, Ty::S32, num, 0i32);
                let q = k.div(Ty::U32, num, s[dim]);
                let r = k.rem(Ty::U32, num, s[dim]);
                let exact = k.setp(Cmp::Eq, Ty::U32, r, 0u32);
                let inr = k.setp(Cmp::Lt, Ty::U32, q, ins[dim]);
                let ok = k.pred_and(nonneg, exact);
                let ok = k.pred_and(ok, inr);
                (q, ok)
            }
        };
        k.when(ok, |k| {
            // Row-major offsets within the plane / weight row, one dim at a time.
            let xo = k.fma(Ty::U32, xoff, ins[dim], pos);
            let wo = k.fma(Ty::U32, woff, ks[dim], t);
            tap_loop(k, kind, dim + 1, base, ins, ks, s, d, xo, wo, body);
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_kernels_generate() {
        for kind in [Direct::Conv, Direct::Transpose] {
            for (b, h) in [
                (false, Elem::F32),
                (true, Elem::F32),
                (true, Elem::F16),
                (true, Elem::Bf16),
            ] {
                let text = ptx::module((9, 0), &[direct_kernel(kind, b, h)]);
                let name = direct_name(kind, b, h);
                assert!(text.contains(&format!(".visible .entry {name}(")), "{text}");
                assert!(!text.contains(".approx"));
                // Four pointers, 20 u32 and 3 s32 parameters, matching `direct`'s argument list.
                assert_eq!(text.matches("\t.param .").count(), 4 + 5 + 15 + 3, "{text}");
                // Channel loop plus three tap loops.
                assert!(text.matches("L_loop_").count() >= 4 * 2, "{text}");
                if kind == Direct::Transpose {
                    assert!(text.contains("rem.u32"));
                }
            }
        }
    }

    #[test]
    fn claims_conv_ops() {
        let node = |op: &str| Node {
            name: "n".into(),
            op_type: op.into(),
            domain: String::new(),
            opset: 11,
            inputs: vec![],
            outputs: vec![],
            attrs: Default::default(),
        };
        assert!(matches!(claim(&node("Conv")), Some(Ok(_))));
        assert!(matches!(claim(&node("ConvTranspose")), Some(Ok(_))));
        assert!(claim(&node("MatMul")).is_none());
    }
}
