//! WGSL kernels: Conv (1-D to 3-D; groups incl. depthwise, strides, dilations, symmetric and
//! asymmetric pads, auto_pad) and ConvTranspose (output_padding, output_shape), both as an implicit
//! GEMM through `gemm_tile`: per (batch, group) a GEMM whose B operand is the input read
//! through the im2col index (Conv: input position `o·s − pad + t·d`; ConvTranspose: `(o + pad −
//! t·d) / s` where that divides exactly), computed in the tile load. The geometry (output sizes,
//! pads from auto_pad, output_shape) is the CPU's `conv_geom` and `convt_geom`.
use super::gemm_tile::gemm;
use super::matmul::float_dtype;
use super::{WgpuKernel, decline, dev, dev_opt, invalid};
use crate::backend::NodeInputs;
use crate::ir::Node;
use crate::ops::OpCtx;
use crate::ops::conv::{Geom, conv_geom, convt_geom};
use crate::wgpu::memory::WTensor;
use crate::wgpu::run::{KResult, Run};
use crate::wgpu::wgsl;

/// Op types this family claims in at least one form.
pub const OPS: &[&str] = &["Conv", "ConvTranspose"];

pub fn claim(node: &Node) -> Option<Result<WgpuKernel, String>> {
    match node.op_type.as_str() {
        "Conv" => Some(Ok(k_conv as WgpuKernel)),
        "ConvTranspose" => Some(Ok(k_conv_transpose as WgpuKernel)),
        _ => None,
    }
}

fn group_of(ctx: &OpCtx) -> KResult<usize> {
    let group = ctx.attr_i("group", 1)?;
    if group < 1 {
        return Err(invalid(format!("group must be >= 1, got {group}")));
    }
    Ok(group as usize)
}

/// X, W and the optional bias on the device, checked for rank.
fn operands(what: &str, inputs: &dyn NodeInputs) -> KResult<(WTensor, WTensor, Option<WTensor>)> {
    let x = dev(inputs, 0)?;
    let w = dev(inputs, 1)?;
    let b = if inputs.present(2) {
        dev_opt(inputs, 2)?
    } else {
        None
    };
    let mut ts = vec![&x, &w];
    ts.extend(b.as_ref());
    float_dtype(what, &ts)?;
    if x.shape.len() < 3 || w.shape.len() != x.shape.len() {
        return Err(invalid(format!(
            "{what} needs X of rank >= 3 and W of the same rank, got {:?} and {:?}",
            x.shape, w.shape
        )));
    }
    if x.shape.len() > 5 {
        decline!("{what} with {} spatial dims", x.shape.len() - 2);
    }
    Ok((x, w, b))
}

fn check_bias(b: &Option<WTensor>, m: usize) -> KResult<()> {
    if let Some(b) = b
        && b.len() != m
    {
        return Err(invalid(format!(
            "bias has {} elements, expected {m}",
            b.len()
        )));
    }
    Ok(())
}

fn out_shape(n: usize, m: usize, g: &Geom, rank: usize) -> Vec<usize> {
    let mut s = vec![n, m];
    s.extend_from_slice(&g.outs[3 - rank..]);
    s
}

/// Parameter words from `P[4]`: C, Cg, M, Mg, G, then in[3], k[3], s[3], d[3], pads[3], out[3].
fn geom_params(
    c: usize,
    cg: usize,
    m: usize,
    mg: usize,
    groups: usize,
    g: &Geom,
) -> KResult<Vec<u32>> {
    let mut p = vec![c as u32, cg as u32, m as u32, mg as u32, groups as u32];
    for v in [g.ins, g.k, g.s, g.d] {
        p.extend(v.iter().map(|&x| x as u32));
    }
    for &x in &g.pb {
        p.push(
            i32::try_from(x).map_err(|_| {
                crate::backend::DeviceError::Decline(format!("pad {x} beyond 32 bits"))
            })? as u32,
        );
    }
    p.extend(g.outs.iter().map(|&x| x as u32));
    Ok(p)
}

/// The shared WGSL: geometry accessors, `setup`, `loadA`, `storeC`; `tap` is the input position
/// rule (text computing `var iq: i32` from `o`, `t`, dim `q`, and `ok`).
fn ops_text(d: crate::tensor::DType, transpose: bool, bias: bool) -> String {
    let load_w = if transpose {
        // W [C, Mg, taps]: row (g·Cg + c), column m.
        "i1[((gg * P[5] + k / ksz()) * P[7] + m) * ksz() + k % ksz()]"
    } else {
        // W [M, Cg, taps]: row (g·Mg + m) of a [M, Cg·taps] matrix.
        "i1[(gg * P[7] + m) * (P[5] * ksz()) + k]"
    };
    let rule = if transpose {
        "let num = i32(o) + pb - i32(t * dl); if (num < 0 || num % i32(st) != 0) { return -1; } let iq = num / i32(st);"
    } else {
        "let iq = i32(o * st) - pb + i32(t * dl);"
    };
    let bias_term = if bias {
        format!(" + {}", wgsl::load(d, "i2[gg * P[7] + m]"))
    } else {
        String::new()
    };
    format!(
        r#"
var<private> nn: u32;
var<private> gg: u32;
fn ksz() -> u32 {{ return P[12] * P[13] * P[14]; }}
fn isz() -> u32 {{ return P[9] * P[10] * P[11]; }}
fn osz() -> u32 {{ return P[24] * P[25] * P[26]; }}
fn setup(b: u32) {{ nn = b / P[8]; gg = b % P[8]; }}
fn pos(q: u32, o: u32, t: u32) -> i32 {{
  let st = P[15u + q];
  let dl = P[18u + q];
  let pb = bitcast<i32>(P[21u + q]);
  {rule}
  if (iq < 0 || iq >= i32(P[9u + q])) {{ return -1; }}
  return iq;
}}
fn loadA(m: u32, k: u32) -> f32 {{ return {wa}; }}
fn loadB(k: u32, p: u32) -> f32 {{
  let c = k / ksz();
  let kr = k % ksz();
  let t2 = kr % P[14];
  let t1 = (kr / P[14]) % P[13];
  let t0 = kr / (P[13] * P[14]);
  let o2 = p % P[26];
  let o1 = (p / P[26]) % P[25];
  let o0_ = p / (P[25] * P[26]);
  let i0_ = pos(0u, o0_, t0);
  let i1_ = pos(1u, o1, t1);
  let i2_ = pos(2u, o2, t2);
  if (i0_ < 0 || i1_ < 0 || i2_ < 0) {{ return 0.0; }}
  let plane = (nn * P[4] + gg * P[5] + c) * isz();
  return {xa};
}}
fn storeC(m: u32, p: u32, v: f32) {{
  o0[(nn * P[6] + gg * P[7] + m) * osz() + p] = {st};
}}
"#,
        wa = wgsl::load(d, load_w),
        xa = wgsl::load(
            d,
            "i0[plane + (u32(i0_) * P[10] + u32(i1_)) * P[11] + u32(i2_)]"
        ),
        st = wgsl::store(d, &format!("v{bias_term}")),
    )
}

fn k_conv(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let (x, w, bias) = operands("Conv", inputs)?;
    let (xs, ws) = (x.shape.clone(), w.shape.clone());
    let group = group_of(ctx)?;
    let (n, c, m) = (xs[0], xs[1], ws[0]);
    if ws[1].checked_mul(group) != Some(c) || m % group != 0 {
        return Err(invalid(format!(
            "Conv channels mismatch: X {xs:?}, W {ws:?}, group {group}"
        )));
    }
    check_bias(&bias, m)?;
    let g = conv_geom(ctx, &xs[2..], &ws[2..])?;
    let oshape = out_shape(n, m, &g, xs.len() - 2);
    let out = run.alloc(x.dtype, &oshape)?;
    if out.is_empty() {
        return Ok(vec![out]);
    }
    let (cg, mg) = (c / group, m / group);
    let ksz: usize = g.k.iter().product();
    let osp: usize = g.outs.iter().product();
    super::u32_len(&xs)?;
    super::u32_len(&ws)?;
    super::u32_len(&oshape)?;
    let extra = geom_params(c, cg, m, mg, group, &g)?;
    let mut ins = vec![&x, &w];
    ins.extend(bias.as_ref());
    if cg * ksz == 0 {
        decline!("Conv with an empty reduction");
    }
    gemm(
        run,
        "conv",
        &ops_text(x.dtype, false, bias.is_some()),
        &[x.dtype],
        &[&out],
        &ins,
        (mg, osp, cg * ksz, n * group),
        extra,
    )?;
    Ok(vec![out])
}

fn k_conv_transpose(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let (x, w, bias) = operands("ConvTranspose", inputs)?;
    let (xs, ws) = (x.shape.clone(), w.shape.clone());
    let group = group_of(ctx)?;
    let (n, c) = (xs[0], xs[1]);
    if ws[0] != c || c % group != 0 {
        return Err(invalid(format!(
            "ConvTranspose channels mismatch: X {xs:?}, W {ws:?}, group {group}"
        )));
    }
    let (cg, mg) = (c / group, ws[1]);
    let m = mg * group;
    check_bias(&bias, m)?;
    let g = convt_geom(ctx, &xs[2..], &ws[2..])?;
    let oshape = out_shape(n, m, &g, xs.len() - 2);
    let out = run.alloc(x.dtype, &oshape)?;
    if out.is_empty() {
        return Ok(vec![out]);
    }
    let ksz: usize = g.k.iter().product();
    let osp: usize = g.outs.iter().product();
    super::u32_len(&xs)?;
    super::u32_len(&ws)?;
    super::u32_len(&oshape)?;
    let extra = geom_params(c, cg, m, mg, group, &g)?;
    let mut ins = vec![&x, &w];
    ins.extend(bias.as_ref());
    if cg * ksz == 0 {
        super::fill_words(run, &out, 0, false)?;
        decline!("ConvTranspose with an empty reduction");
    }
    gemm(
        run,
        "conv_transpose",
        &ops_text(x.dtype, true, bias.is_some()),
        &[x.dtype],
        &[&out],
        &ins,
        (mg, osp, cg * ksz, n * group),
        extra,
    )?;
    Ok(vec![out])
}
