//! WGSL kernels: Conv (1-D to 3-D; groups incl. depthwise, strides, dilations, symmetric and
//! asymmetric pads, auto_pad) and ConvTranspose (output_padding, output_shape), both as an implicit
//! GEMM through `gemm_tile`: per (batch, group) a GEMM whose B operand is the input read
//! through the im2col index (Conv: input position `o·s − pad + t·d`; ConvTranspose: `(o + pad −
//! t·d) / s` where that divides exactly), computed in the tile load. The geometry (output sizes,
//! pads from auto_pad, output_shape) is the CPU's `conv_geom` and `convt_geom`.
use super::gemm_tile::gemm;
use super::matmul::float_dtype;
use super::{WgpuKernel, decline, dev, dev_opt, invalid};
use crate::memory::WTensor;
use crate::run::{KResult, Run};
use crate::wgsl;
use quorum_core::backend::NodeInputs;
use quorum_core::device::conv::{ConvPlan, conv_plan, convt_plan};
use quorum_core::ir::Node;
use quorum_core::ops::OpCtx;
use quorum_core::ops::conv::Geom;

pub fn claim(node: &Node) -> Option<Result<WgpuKernel, String>> {
    match node.op_type.as_str() {
        "Conv" => Some(Ok(k_conv as WgpuKernel)),
        "ConvTranspose" => Some(Ok(k_conv_transpose as WgpuKernel)),
        _ => None,
    }
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

/// The channel counts and spatial geometry a convolution kernel is generated for.
struct Shape<'a> {
    c: usize,
    cg: usize,
    m: usize,
    mg: usize,
    groups: usize,
    g: &'a Geom,
}

impl<'a> Shape<'a> {
    fn of(p: &'a ConvPlan) -> Shape<'a> {
        Shape {
            c: p.c,
            cg: p.cg,
            m: p.m,
            mg: p.mg,
            groups: p.group,
            g: &p.g,
        }
    }
}

/// The shared WGSL: `setup`, `loadA`, `loadB`, `storeC` for the convolution `sh`, its geometry
/// written into the text as constants. The im2col index is a handful of divisions per element of
/// B; by constants the compiler turns each into a multiply and a shift, where a divisor read from
/// the parameter words made each a long division (it was most of a batch-1 convolution's time on
/// the H200). A pointwise convolution (1×1 taps, stride 1, no padding) reads B as the input
/// planes as they lie. `transpose`: ConvTranspose's rule (`(o + pad − t·d) / s` where that divides
/// exactly).
fn ops_text(d: quorum_core::tensor::DType, transpose: bool, bias: bool, sh: &Shape) -> String {
    let g = sh.g;
    let (ksz, isz, osz) = (
        g.k.iter().product::<usize>(),
        g.ins.iter().product::<usize>(),
        g.outs.iter().product::<usize>(),
    );
    let (cgu, mgu, mu, cu, groups) = (sh.cg, sh.mg, sh.m, sh.c, sh.groups);
    let load_w = if transpose {
        // W [C, Mg, taps]: row (g·Cg + c), column m.
        format!("i1[((gg * {cgu}u + k / {ksz}u) * {mgu}u + m) * {ksz}u + k % {ksz}u]")
    } else {
        // W [M, Cg, taps]: row (g·Mg + m) of a [M, Cg·taps] matrix.
        format!("i1[(gg * {mgu}u + m) * {}u + k]", cgu * ksz)
    };
    let pointwise =
        !transpose && g.k == [1, 1, 1] && g.s == [1, 1, 1] && g.pb == [0, 0, 0] && g.outs == g.ins;
    let load_b = if pointwise {
        format!(
            "fn loadB(k: u32, p: u32) -> f32 {{\n  return {};\n}}\n",
            wgsl::load(
                d,
                &format!("i0[(nn * {cu}u + gg * {cgu}u + k) * {isz}u + p]")
            )
        )
    } else {
        let mut pos = String::new();
        for q in 0..3 {
            let (st, dl, pb, inq) = (g.s[q], g.d[q], g.pb[q], g.ins[q]);
            let rule = if transpose {
                format!(
                    "let num = i32(o) + ({pb}) - i32(t * {dl}u); if (num < 0 || num % {st} != 0) {{ return -1; }} let iq = num / {st};"
                )
            } else {
                format!("let iq = i32(o * {st}u) - ({pb}) + i32(t * {dl}u);")
            };
            pos.push_str(&format!(
                "fn pos{q}(o: u32, t: u32) -> i32 {{\n  {rule}\n  if (iq < 0 || iq >= {inq}) {{ return -1; }}\n  return iq;\n}}\n"
            ));
        }
        let [_, k1, k2] = g.k;
        let [_, o1, o2] = g.outs;
        let [_, in1, in2] = g.ins;
        format!(
            "{pos}fn loadB(k: u32, p: u32) -> f32 {{\n\
             \x20 let c = k / {ksz}u;\n\
             \x20 let kr = k % {ksz}u;\n\
             \x20 let i0_ = pos0(p / {o12}u, kr / {k12}u);\n\
             \x20 let i1_ = pos1((p / {o2}u) % {o1}u, (kr / {k2}u) % {k1}u);\n\
             \x20 let i2_ = pos2(p % {o2}u, kr % {k2}u);\n\
             \x20 if (i0_ < 0 || i1_ < 0 || i2_ < 0) {{ return 0.0; }}\n\
             \x20 let plane = (nn * {cu}u + gg * {cgu}u + c) * {isz}u;\n\
             \x20 return {xa};\n}}\n",
            o12 = o1 * o2,
            k12 = k1 * k2,
            xa = wgsl::load(
                d,
                &format!("i0[plane + (u32(i0_) * {in1}u + u32(i1_)) * {in2}u + u32(i2_)]")
            ),
        )
    };
    let bias_term = if bias {
        format!(" + {}", wgsl::load(d, &format!("i2[gg * {mgu}u + m]")))
    } else {
        String::new()
    };
    format!(
        r#"
var<private> nn: u32;
var<private> gg: u32;
fn setup(b: u32) {{ nn = b / {groups}u; gg = b % {groups}u; }}
fn loadA(m: u32, k: u32) -> f32 {{ return {wa}; }}
{load_b}fn storeC(m: u32, p: u32, v: f32) {{
  o0[(nn * {mu}u + gg * {mgu}u + m) * {osz}u + p] = {st};
}}
"#,
        wa = wgsl::load(d, &load_w),
        st = wgsl::store(d, &format!("v{bias_term}")),
    )
}

fn k_conv(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let (x, w, bias) = operands("Conv", inputs)?;
    let p = conv_plan(ctx, &x.shape, &w.shape, bias.as_ref().map(|b| b.len()))?;
    let out = launch_shapes(run, &x, &w, &p)?;
    if out.is_empty() {
        return Ok(vec![out]);
    }
    let (n, group, cg, mg) = (p.n, p.group, p.cg, p.mg);
    let ksz: usize = p.g.k.iter().product();
    let osp: usize = p.g.outs.iter().product();
    let sh = Shape::of(&p);
    let mut ins = vec![&x, &w];
    ins.extend(bias.as_ref());
    if cg * ksz == 0 {
        decline!("Conv with an empty reduction");
    }
    gemm(
        run,
        "conv",
        &ops_text(x.dtype, false, bias.is_some(), &sh),
        &[x.dtype],
        &[&out],
        &ins,
        (mg, osp, cg * ksz, n * group),
        Vec::new(),
    )?;
    Ok(vec![out])
}

/// The output of a convolution planned as `p`, allocated, after the checks every launch needs:
/// sizes within 32 bits, pads that fit the kernel's i32 positions.
fn launch_shapes(run: &Run, x: &WTensor, w: &WTensor, p: &ConvPlan) -> KResult<WTensor> {
    let out = run.alloc(x.dtype, &p.out_shape)?;
    if out.is_empty() {
        return Ok(out);
    }
    super::u32_len(&x.shape)?;
    super::u32_len(&w.shape)?;
    super::u32_len(&p.out_shape)?;
    for &pad in &p.g.pb {
        if i32::try_from(pad).is_err() {
            decline!("pad {pad} beyond 32 bits");
        }
    }
    Ok(out)
}

fn k_conv_transpose(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let (x, w, bias) = operands("ConvTranspose", inputs)?;
    let p = convt_plan(ctx, &x.shape, &w.shape, bias.as_ref().map(|b| b.len()))?;
    let out = launch_shapes(run, &x, &w, &p)?;
    if out.is_empty() {
        return Ok(vec![out]);
    }
    let (n, group, cg, mg) = (p.n, p.group, p.cg, p.mg);
    let ksz: usize = p.g.k.iter().product();
    let osp: usize = p.g.outs.iter().product();
    let sh = Shape::of(&p);
    let mut ins = vec![&x, &w];
    ins.extend(bias.as_ref());
    if cg * ksz == 0 {
        super::fill_words(run, &out, 0, false)?;
        decline!("ConvTranspose with an empty reduction");
    }
    gemm(
        run,
        "conv_transpose",
        &ops_text(x.dtype, true, bias.is_some(), &sh),
        &[x.dtype],
        &[&out],
        &ins,
        (mg, osp, cg * ksz, n * group),
        Vec::new(),
    )?;
    Ok(vec![out])
}
