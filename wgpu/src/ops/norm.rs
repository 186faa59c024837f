//! WGSL kernels: BatchNormalization (inference), InstanceNormalization, LayerNormalization,
//! GroupNormalization and LRN, each output computed in f64 from the exact inputs and rounded once.
//! The statistics (mean, then the mean squared deviation: two passes) are per lane, one thread per
//! lane. Forms with extra outputs (training statistics, LayerNormalization's Mean and InvStdDev)
//! stay on the CPU. LRN takes a thread per element: the sum of squares over its channel window,
//! then `x / (bias + alpha/size · sum)^beta`, the power by square roots for β = 0.75 and 0.5 (as
//! the CPU kernel takes it) and by `exp64(β · log64(t))` otherwise.
use super::matmul::float_dtype;
use super::{WgpuKernel, decline, dev, invalid, require_f64, u32_len};
use crate::memory::WTensor;
use crate::run::{KResult, Run};
use crate::wgsl;
use quorum_core::backend::NodeInputs;
use quorum_core::ir::Node;
use quorum_core::ops::OpCtx;
use quorum_core::ops::norm_axis;

pub fn claim(node: &Node) -> Option<Result<WgpuKernel, String>> {
    let op = node.op_type.as_str();
    let extra = node.outputs.iter().skip(1).any(|o| !o.is_empty());
    Some(if extra {
        Err(format!("{op} with its statistics outputs stays on the CPU"))
    } else if op == "BatchNormalization" {
        Ok(k_batch as WgpuKernel)
    } else if op == "LRN" {
        Ok(k_lrn as WgpuKernel)
    } else {
        Ok(k_lanes as WgpuKernel)
    })
}

fn k_batch(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    if ctx.opset() >= 14 && ctx.attr_i("training_mode", 0)? != 0 {
        decline!("training-mode BatchNormalization stays on the CPU");
    }
    if ctx.opset() < 9 && ctx.attr_i("spatial", 1)? == 0 {
        decline!("BatchNormalization with spatial=0 stays on the CPU");
    }
    require_f64(run, "BatchNormalization")?;
    let ts: Vec<WTensor> = (0..5).map(|i| dev(inputs, i)).collect::<KResult<_>>()?;
    let refs: Vec<&WTensor> = ts.iter().collect();
    let d = float_dtype("BatchNormalization", &refs)?;
    let x = &ts[0];
    if x.shape.len() < 2 {
        return Err(invalid(format!(
            "BatchNormalization X {:?} has no channels",
            x.shape
        )));
    }
    let c = x.shape[1];
    if ts[1..].iter().any(|t| t.len() != c) {
        return Err(invalid(
            "BatchNormalization parameters must have one value per channel",
        ));
    }
    let n = u32_len(&x.shape)? as usize;
    let inner: usize = x.shape[2..].iter().product();
    let eps = ctx.attr_f("epsilon", 1e-5)?;
    let y = run.alloc(d, &x.shape)?;
    let l = |k: usize, idx: &str| format!("f64({})", wgsl::load(d, &format!("i{k}[{idx}]")));
    let body = format!(
        "let c = (i / P[1]) % P[2];\n\
         let v = ({x} - {mean}) / sqrt({var} + f64(bitcast<f32>(P[3]))) * {sc} + {b};\n\
         o0[i] = {st};\n",
        x = l(0, "i"),
        sc = l(1, "c"),
        b = l(2, "c"),
        mean = l(3, "c"),
        var = l(4, "c"),
        st = wgsl::store(d, "f32(v)"),
    );
    let half = if wgsl::needs_half(&[d]) {
        wgsl::HALF
    } else {
        ""
    };
    let src = format!("{}{half}{}", wgsl::header(1, 5), wgsl::entry_1d(&body));
    run.dispatch_n(
        "batchnorm",
        &src,
        &[&y],
        &refs,
        vec![n as u32, inner.max(1) as u32, c as u32, eps.to_bits()],
        n,
    )?;
    Ok(vec![y])
}

/// Instance, Layer and Group normalization: lanes of `len` contiguous elements, each normalized
/// by its own mean and variance, then scaled and shifted per element of the lane (`sc_div`,
/// `sc_mod` pick the parameter: `(j / sc_div) % sc_mod`, offset by `lane % groups_per_n ·
/// sc_lane`).
fn k_lanes(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let op = ctx.node.op_type.as_str();
    require_f64(run, op)?;
    let x = dev(inputs, 0)?;
    let scale = dev(inputs, 1)?;
    // LayerNormalization's B is optional: absent, the shift is 0.
    let bias = if inputs.present(2) {
        Some(dev(inputs, 2)?)
    } else {
        None
    };
    let mut ts = vec![&x, &scale];
    ts.extend(bias.as_ref());
    let d = float_dtype(op, &ts)?;
    let blen = bias.as_ref().map_or(scale.len(), |b| b.len());
    u32_len(&x.shape)?;
    let eps = ctx.attr_f("epsilon", 1e-5)?;
    let shape = &x.shape;
    // (lanes, len, per-lane parameter offset rule)
    let (lanes, len, sc_div, sc_mod, lane_mod, sc_lane) = match op {
        "InstanceNormalization" => {
            if shape.len() < 3 {
                return Err(invalid(format!(
                    "InstanceNormalization X {shape:?} needs rank >= 3"
                )));
            }
            let c = shape[1];
            if scale.len() != c || blen != c {
                return Err(invalid(
                    "InstanceNormalization scale and B need one value per channel",
                ));
            }
            let inner: usize = shape[2..].iter().product();
            (shape[0] * c, inner, inner.max(1), 1, c, 1)
        }
        "LayerNormalization" => {
            if ctx.attr_i("stash_type", 1)? != 1 {
                decline!("LayerNormalization stash_type other than float");
            }
            let axis = norm_axis(ctx.attr_i("axis", -1)?, shape.len())?;
            let len: usize = shape[axis..].iter().product();
            let lanes: usize = shape[..axis].iter().product();
            if (scale.len() != len && scale.len() != 1) || (blen != len && blen != 1) {
                decline!(
                    "LayerNormalization scale {:?} and B of {blen} broadcast partly",
                    scale.shape
                );
            }
            if scale.len() != blen {
                decline!("LayerNormalization scale and B of different sizes");
            }
            (lanes, len, 1, scale.len(), 1, 0)
        }
        _ => {
            let g = ctx.req_i("num_groups")?;
            if shape.len() < 2 || g <= 0 || shape[1] % g as usize != 0 {
                return Err(invalid(format!(
                    "GroupNormalization of {shape:?} in {g} groups"
                )));
            }
            let (g, c) = (g as usize, shape[1]);
            let inner: usize = shape[2..].iter().product();
            let len = c / g * inner;
            if scale.len() == c && blen == c {
                (shape[0] * g, len, inner.max(1), c / g, g, c / g)
            } else if scale.len() == g && blen == g {
                (shape[0] * g, len, len.max(1), 1, g, 1)
            } else {
                return Err(invalid("GroupNormalization scale and B size"));
            }
        }
    };
    super::loop_budget(run, op, 3 * len)?;
    let y = run.alloc(d, shape)?;
    if lanes == 0 || len == 0 {
        return Ok(vec![y]);
    }
    let xv = |j: &str| format!("f64({})", wgsl::load(d, &format!("i0[base + {j}]")));
    let body = format!(
        "let len = P[1];\nlet base = i * len;\nlet pofs = (i % P[5]) * P[6];\n\
         var s = 0.0lf;\nfor (var j = 0u; j < len; j = j + 1u) {{ s = s + {xj}; }}\n\
         let mean = s / f64(len);\nvar q = 0.0lf;\n\
         for (var j = 0u; j < len; j = j + 1u) {{ let e = {xj} - mean; q = q + e * e; }}\n\
         let den = sqrt(q / f64(len) + f64(bitcast<f32>(P[2])));\n\
         for (var j = 0u; j < len; j = j + 1u) {{\n\
           let p = pofs + (j / P[3]) % P[4];\n\
           let v = ({xj} - mean) / den * f64({sc}) + f64({b});\n\
           o0[base + j] = {st};\n}}\n",
        xj = xv("j"),
        sc = wgsl::load(d, "i1[p]"),
        b = if bias.is_some() {
            wgsl::load(d, "i2[p]")
        } else {
            "0.0".into()
        },
        st = wgsl::store(d, "f32(v)"),
    );
    let half = if wgsl::needs_half(&[d]) {
        wgsl::HALF
    } else {
        ""
    };
    let src = format!(
        "{}{half}{}",
        wgsl::header(1, ts.len()),
        wgsl::entry_1d(&body)
    );
    let params = vec![
        lanes as u32,
        len as u32,
        eps.to_bits(),
        sc_div as u32,
        sc_mod as u32,
        lane_mod as u32,
        sc_lane as u32,
    ];
    run.dispatch_n(op, &src, &[&y], &ts, params, lanes)?;
    Ok(vec![y])
}

fn k_lrn(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let x = dev(inputs, 0)?;
    let d = float_dtype("LRN", &[&x])?;
    let lrn = quorum_core::device::forms::Lrn::parse(ctx)?;
    let (size, alpha, beta, bias) = (lrn.size, lrn.alpha, lrn.beta, lrn.bias);
    let shape = &x.shape;
    if shape.len() < 2 {
        return Err(invalid(format!(
            "LRN needs an input of rank >= 2, got shape {shape:?}"
        )));
    }
    require_f64(run, "LRN")?;
    let (c, inner) = (shape[1], shape[2..].iter().product::<usize>());
    let n = u32_len(shape)? as usize;
    let size = size as usize;
    super::loop_budget(run, "LRN", size)?;
    let y = run.alloc(d, shape)?;
    if n == 0 {
        return Ok(vec![y]);
    }
    // The window of channel `ch` is `ch - lo ..< ch + hi`, clipped to the channels.
    let (lo, hi) = ((size - 1) / 2, size / 2 + 1);
    let pow = if beta == 0.75 {
        "let r = sqrt(t); let p = r * sqrt(r);".to_string()
    } else if beta == 0.5 {
        "let p = sqrt(t);".to_string()
    } else {
        format!("let p = exp64({} * log64(t));", wgsl::lf(beta))
    };
    let xv = |idx: &str| format!("f64({})", wgsl::load(d, &format!("i0[{idx}]")));
    let body = format!(
        "let inner = P[1]; let c = P[2];\n\
         let ch = (i / inner) % c;\n\
         let base = i - ch * inner;\n\
         let j0 = select(0u, ch - {lo}u, ch >= {lo}u);\n\
         let j1 = min(ch + {hi}u, c);\n\
         var s = 0.0lf;\n\
         for (var j = j0; j < j1; j = j + 1u) {{ let v = {xj}; s = s + v * v; }}\n\
         let t = {bias} + {scale} * s;\n\
         {pow}\n\
         o0[i] = {st};\n",
        xj = xv("base + j * inner"),
        bias = wgsl::lf(bias),
        scale = wgsl::lf(alpha / size as f64),
        st = wgsl::store(d, &format!("f32({} / p)", xv("i"))),
    );
    let half = if wgsl::needs_half(&[d]) {
        wgsl::HALF
    } else {
        ""
    };
    let math = if beta == 0.75 || beta == 0.5 {
        String::new()
    } else {
        super::math::library()
    };
    let src = format!(
        "{}{half}{math}{}",
        wgsl::header(1, 1),
        wgsl::entry_1d(&body)
    );
    run.dispatch_n(
        "lrn",
        &src,
        &[&y],
        &[&x],
        vec![n as u32, inner.max(1) as u32, c as u32],
        n,
    )?;
    Ok(vec![y])
}
