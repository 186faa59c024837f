//! ConvInteger on CUDA, exact like the CPU's (`quorum_core::ops::quantize`): `conv(X −
//! x_zero_point, W − w_zero_point)` in wrapping 32-bit integers, X and W of u8 or i8 (either), X's
//! zero point per tensor, W's per tensor or per output channel; 1-D to 3-D, groups, strides,
//! dilations, pads and auto_pad (the geometry of `quorum_core::device::conv`, which every
//! convolution kernel takes).
//!
//! It is MatMulInteger's tile ([`super::integer::igemm_kernel`]) once per (image, group): A is the
//! group's rows of W, B the image's columns. A pointwise convolution (1×1, stride 1, no pads) reads
//! its columns from X as it lies; every other gathers them first (`im2col_u8`, one byte a thread)
//! into scratch of (images · groups) × (channels per group · kernel) × output positions bytes,
//! writing the zero point where the kernel reads padding, so that padding counts as 0 once
//! centered, as the specification's reference pads the centered input with zeros.
use super::integer::{
    Epilogue, Per, REQUANT_MAX_K, Requant, TILE, Zp, conv_requant_enabled, eight_bit, igemm_kernel,
    optional, requant, u32of, zp_mode,
};
use super::{require_u32_len, thread_index};
use crate::decline;
use crate::driver::Arg;
use crate::ptx::{Cmp, Kernel, Reg, Space, Ty, module};
use crate::{DevTensor, Inputs, KResult, Run, blocks, dev_input};
use quorum_core::device::conv::conv_plan;
use quorum_core::ops::OpCtx;
use quorum_core::tensor::DType;

pub(super) fn k_conv_integer(
    ctx: &OpCtx,
    run: &Run,
    inputs: &dyn Inputs,
) -> KResult<Vec<DevTensor>> {
    if !conv_requant_enabled() {
        decline!("the ConvInteger kernel is off (QUORUM_CUDA_INT8)");
    }
    let x = dev_input(inputs, 0)?;
    let w = dev_input(inputs, 1)?;
    let (xz, wz) = (optional(inputs, 2)?, optional(inputs, 3)?);
    integer_conv(ctx, run, [&x, &w], [xz.as_ref(), wz.as_ref()], None)
}

pub(super) fn k_qlinear_conv(
    ctx: &OpCtx,
    run: &Run,
    inputs: &dyn Inputs,
) -> KResult<Vec<DevTensor>> {
    if !conv_requant_enabled() {
        decline!("the requantizing integer kernels are off (QUORUM_CUDA_INT8)");
    }
    let x = dev_input(inputs, 0)?;
    let w = dev_input(inputs, 3)?;
    let (xz, wz) = (optional(inputs, 2)?, optional(inputs, 5)?);
    let m = *w.shape.first().unwrap_or(&0);
    let k: usize = w.shape.iter().skip(1).product();
    if k > REQUANT_MAX_K {
        decline!("QLinearConv over K = {k} (its sums could wrap) runs on the CPU");
    }
    let rq = requant("QLinearConv", inputs, [1, 4, 6, 7, 8], m, Per::Row, x.dtype)?;
    integer_conv(ctx, run, [&x, &w], [xz.as_ref(), wz.as_ref()], Some(rq))
}

/// The convolution of `xw` centered on `z`, into wrapped sums or requantized.
fn integer_conv(
    ctx: &OpCtx,
    run: &Run,
    xw: [&DevTensor; 2],
    z: [Option<&DevTensor>; 2],
    rq: Option<Requant>,
) -> KResult<Vec<DevTensor>> {
    let [x, w] = xw;
    let [xz, wz] = z;
    let (sx, sw) = (
        eight_bit(x.dtype, "ConvInteger's x")?,
        eight_bit(w.dtype, "ConvInteger's w")?,
    );
    let (xs, ws) = (x.shape.clone(), w.shape.clone());
    if xs.len() < 3 || ws.len() != xs.len() || xs.len() > 5 {
        decline!("ConvInteger of x {xs:?} by w {ws:?} runs on the CPU");
    }
    let p = conv_plan(ctx, &xs, &ws, None)?;
    let (group, n, c, m, cg, mg, g) = (p.group, p.n, p.c, p.m, p.cg, p.mg, p.g);
    // x's zero point is per tensor (the specification's); w's per tensor or per output channel.
    let zx = zp_mode(xz, x, 1, "x")?;
    let zw = zp_mode(wz, w, m, "w")?;
    let (epi, out) = rq
        .as_ref()
        .map_or((Epilogue::Sums, DType::I32), |r| (r.epi, r.out));
    ctx.check_alloc(&p.out_shape, out.size_in_memory())?;
    require_u32_len(&xs)?;
    require_u32_len(&ws)?;
    require_u32_len(&p.out_shape)?;
    let y = run.alloc(out, &p.out_shape)?;
    if y.is_empty() {
        return Ok(vec![y]);
    }
    let in_sp: usize = g.ins.iter().product();
    let out_sp: usize = g.outs.iter().product();
    let ksz: usize = g.k.iter().product();
    let kdim = cg * ksz;
    let images = n * group;
    let pointwise = ksz == 1 && g.s == [1, 1, 1] && g.pb == [0, 0, 0] && g.outs == g.ins;
    let kernels = [
        igemm_kernel(sw, sx, zw, zx, epi),
        im2col_u8_kernel(zx != Zp::None),
    ];
    let ptx = module(run.cc(), &kernels);
    let dummy = || Arg::In(x.ptr(), 0);
    let col = if pointwise || kdim == 0 {
        None
    } else {
        let shape = [images, kdim, out_sp];
        ctx.check_alloc(&shape, 1)?;
        let total = require_u32_len(&shape)?;
        let col = run.alloc(x.dtype, &shape)?;
        let dims = |v: [usize; 3]| -> KResult<Vec<Arg>> {
            v.iter()
                .map(|&d| Ok(Arg::U32(u32of(d, "a dim")?)))
                .collect()
        };
        let mut args = vec![
            col.arg_out(),
            x.arg_in(),
            xz.map_or_else(dummy, DevTensor::arg_in),
            Arg::U32(total),
            Arg::U32(u32of(out_sp, "output positions")?),
            Arg::U32(u32of(kdim, "K")?),
            Arg::U32(u32of(group, "groups")?),
            Arg::U32(u32of(cg, "channels")?),
            Arg::U32(u32of(c, "channels")?),
            Arg::U32(u32of(ksz, "kernel")?),
        ];
        args.extend(dims(g.k)?);
        args.extend(dims(g.outs)?);
        args.extend(dims(g.ins)?);
        args.extend(dims(g.s)?);
        args.extend(dims(g.d)?);
        for &pb in &g.pb {
            let Ok(pb) = i32::try_from(pb) else {
                decline!("ConvInteger's pad {pb} exceeds 32 bits");
            };
            args.push(Arg::U32(pb as u32));
        }
        run.launch(
            &ptx,
            "im2col_u8",
            (blocks(total as usize, 256), 1, 1),
            (256, 1, 1),
            0,
            &args,
        )?;
        Some(col)
    };
    let (b_arg, b_stride) = match &col {
        Some(col) => (col.arg_in(), kdim * out_sp),
        None => (x.arg_in(), cg * in_sp),
    };
    let col = col.and_then(|t| run.scratch_before_last_read(t));
    let mut args = vec![
        y.arg_out(),
        w.arg_in(),
        b_arg,
        wz.map_or_else(dummy, DevTensor::arg_in),
        xz.map_or_else(dummy, DevTensor::arg_in),
        Arg::U32(u32of(mg, "rows")?),
        Arg::U32(u32of(out_sp, "columns")?),
        Arg::U32(u32of(kdim, "K")?),
        Arg::U32(u32of(mg, "rows")?),
        Arg::U32(u32of(mg * kdim, "a group's weights")?),
        Arg::U32(u32of(b_stride, "an image's columns")?),
        Arg::U32(u32of(group, "groups")?),
        Arg::U32(u32of(mg, "rows")?),
    ];
    if let Some(r) = rq {
        args.extend(r.args);
    }
    run.launch(
        &ptx,
        "igemm",
        (
            u32of(out_sp.div_ceil(TILE as usize), "column tiles")?,
            u32of(mg.div_ceil(TILE as usize), "row tiles")?,
            u32of(images, "images")?,
        ),
        (256, 1, 1),
        0,
        &args,
    )?;
    if let Some(t) = col {
        run.release(t, &[]);
    }
    Ok(vec![y])
}

/// Splits `v` (below `a · b · c`) into its three digits of radices (a, b, c), most significant
/// first: `[v / (b·c), v / c mod b, v mod c]`.
fn digits(k: &mut Kernel, v: Reg, r: [Reg; 3]) -> [Reg; 3] {
    let last = k.rem(Ty::U32, v, r[2]);
    let t = k.div(Ty::U32, v, r[2]);
    let mid = k.rem(Ty::U32, t, r[1]);
    let first = k.div(Ty::U32, t, r[1]);
    [first, mid, last]
}

/// Gathers the columns of an 8-bit convolution: `col[z, kk, o]` for image-group z, row kk = (input
/// channel of the group, kernel position) and output position o is the input byte that kernel
/// position reads for that output, or the zero point (0 without one) where it reads padding.
/// Parameters: col, x, xz, total, out_sp, kdim, group, cg, c, ksz, then the kernel's, the
/// output's and the input's three dims, strides, dilations and begin pads (as u32, wrapping).
pub fn im2col_u8_kernel(has_zp: bool) -> Kernel {
    let mut k = Kernel::new("im2col_u8");
    let colp = k.param_ptr("col");
    let xp = k.param_ptr("x");
    let zp = k.param_ptr("xz");
    let total = k.param("total", Ty::U32);
    let osp = k.param("out_sp", Ty::U32);
    let kdim = k.param("kdim", Ty::U32);
    let group = k.param("group", Ty::U32);
    let cg = k.param("cg", Ty::U32);
    let c = k.param("c", Ty::U32);
    let ksz = k.param("ksz", Ty::U32);
    let three = |k: &mut Kernel, what: &str| -> [Reg; 3] {
        [0, 1, 2].map(|d| k.param(&format!("{what}{d}"), Ty::U32))
    };
    let kern = three(&mut k, "k");
    let outs = three(&mut k, "o");
    let ins = three(&mut k, "i");
    let st = three(&mut k, "s");
    let dl = three(&mut k, "d");
    let pb = three(&mut k, "p");
    let i = thread_index(&mut k, total);
    let o = k.rem(Ty::U32, i, osp);
    let t = k.div(Ty::U32, i, osp);
    let kk = k.rem(Ty::U32, t, kdim);
    let z = k.div(Ty::U32, t, kdim);
    let img = k.div(Ty::U32, z, group);
    let grp = k.rem(Ty::U32, z, group);
    let ci = k.div(Ty::U32, kk, ksz);
    let kr = k.rem(Ty::U32, kk, ksz);
    let kpos = digits(&mut k, kr, kern);
    let opos = digits(&mut k, o, outs);
    // The input channel's plane, then one coordinate a dim: o·s + k·d − pad, inside where below
    // the input's dim (a negative coordinate wraps past every dim).
    let ch = k.fma(Ty::U32, grp, cg, ci);
    let mut src = k.fma(Ty::U32, img, c, ch);
    let mut inside: Option<Reg> = None;
    for d in 0..3 {
        let at = k.mul(Ty::U32, opos[d], st[d]);
        let at = k.fma(Ty::U32, kpos[d], dl[d], at);
        let at = k.sub(Ty::U32, at, pb[d]);
        let ok = k.setp(Cmp::Lt, Ty::U32, at, ins[d]);
        inside = Some(match inside {
            None => ok,
            Some(p) => k.pred_and(p, ok),
        });
        src = k.fma(Ty::U32, src, ins[d], at);
    }
    let inside = inside.expect("three dims");
    let v = k.mov(Ty::U32, 0u32);
    if has_zp {
        let raw = k.ld_nc(Ty::U8, zp, 0);
        let r = k.cvt(Ty::U32, Ty::U8, "", raw);
        k.assign(v, r);
    }
    k.when(inside, |k| {
        let a = k.addr(xp, src, 1);
        let raw = k.ld_nc(Ty::U8, a, 0);
        let r = k.cvt(Ty::U32, Ty::U8, "", raw);
        k.assign(v, r);
    });
    let b = k.cvt(Ty::U16, Ty::U32, "", v);
    let a = k.addr(colp, i, 1);
    k.st_u8(Space::Global, a, 0, b);
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The gather reads bytes, writes bytes, and loads the zero point only when there is one.
    #[test]
    fn im2col_reads_the_zero_point_only_when_given() {
        let with = module((9, 0), &[im2col_u8_kernel(true)]);
        let without = module((9, 0), &[im2col_u8_kernel(false)]);
        assert_eq!(with.matches("ld.global.nc.u8").count(), 2, "{with}");
        assert_eq!(without.matches("ld.global.nc.u8").count(), 1, "{without}");
        assert!(with.contains("st.global.u8"), "{with}");
    }
}
