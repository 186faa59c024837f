//! WGSL kernels: MaxPool (ceil_mode, dilations, storage_order, the Indices output), AveragePool
//! (count_include_pad, ceil_mode), GlobalAveragePool and GlobalMaxPool, one thread per output over
//! its window (geometry from the CPU's `pool_geom`). MaxPool's rules are the CPU's: NaN wins (the
//! first NaN's index), a window wholly in the padding gives -inf and index -1. Averages sum in f64
//! and round once; an empty count gives NaN. LpPool sums `|x|^p` in f64 by products (p = 1 to 8;
//! other exponents stay on the CPU) and takes the p-th root once; a window wholly in the padding
//! gives 0, as on the CPU.
use super::matmul::float_dtype;
use super::{WgpuKernel, decline, dev, require_f64, u32_len};
use crate::memory::WTensor;
use crate::run::{KResult, Run};
use crate::wgsl;
use quorum_core::backend::NodeInputs;
use quorum_core::ir::Node;
use quorum_core::ops::OpCtx;
use quorum_core::ops::pool::{PGeom, out_shape, pool_geom};
use quorum_core::tensor::DType;

pub fn claim(_node: &Node) -> Option<Result<WgpuKernel, String>> {
    Some(Ok(k_pool as WgpuKernel))
}

fn global_geom(xs: &[usize]) -> PGeom {
    let r = xs.len() - 2;
    let mut ins = [1usize; 3];
    ins[3 - r..].copy_from_slice(&xs[2..]);
    PGeom {
        rank: r,
        ins,
        k: ins,
        s: [1; 3],
        d: [1; 3],
        pb: [0; 3],
        pe: [0; 3],
        outs: [1; 3],
    }
}

fn k_pool(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let op = ctx.node.op_type.as_str();
    let x = dev(inputs, 0)?;
    let d = float_dtype(op, &[&x])?;
    let xs = x.shape.clone();
    if xs.len() < 3 || xs.len() > 5 {
        decline!("{op} of rank {}", xs.len());
    }
    let g = if op.starts_with("Global") {
        global_geom(&xs)
    } else {
        pool_geom(ctx, &xs)?
    };
    let oshape = out_shape(&xs, &g);
    u32_len(&xs)?;
    let n = u32_len(&oshape)? as usize;
    let is_max = op.ends_with("MaxPool");
    let lp = if op == "LpPool" {
        let p = ctx.attr_f("p", 2.0)? as f64;
        if !small_int(p) {
            decline!("LpPool with p = {p} (the kernel takes p = 1 to 8)");
        }
        Some(p)
    } else {
        None
    };
    let want_idx = op == "MaxPool" && ctx.node.outputs.get(1).is_some_and(|o| !o.is_empty());
    let include_pad = op == "AveragePool" && ctx.attr_i("count_include_pad", 0)? != 0;
    let col_major = op == "MaxPool" && ctx.attr_i("storage_order", 0)? != 0;
    if !is_max {
        require_f64(run, op)?;
    }
    super::loop_budget(
        run,
        op,
        g.k.iter().product::<usize>() + g.k[0] * g.k[1] + g.k[0],
    )?;
    let y = run.alloc(d, &oshape)?;
    let idx = if want_idx {
        Some(run.alloc(DType::I64, &oshape)?)
    } else {
        None
    };
    if n == 0 {
        return Ok(std::iter::once(y).chain(idx).collect());
    }
    let r = g.rank;
    let mul: [usize; 3] = if col_major {
        let mut m = [0usize; 3];
        let mut acc = 1;
        for j in 0..r {
            m[3 - r + j] = acc;
            acc *= g.ins[3 - r + j];
        }
        m
    } else {
        [g.ins[1] * g.ins[2], g.ins[2], 1]
    };
    let in_sp: usize = g.ins.iter().product();
    let out_sp: usize = g.outs.iter().product();
    let mut params = vec![n as u32, out_sp as u32, in_sp as u32];
    for v in [g.ins, g.k, g.s, g.d] {
        params.extend(v.iter().map(|&x| x as u32));
    }
    for v in [g.pb, g.pe] {
        for &x in &v {
            params.push(i32::try_from(x).map_err(|_| {
                quorum_core::backend::DeviceError::Decline(format!("pad {x} beyond 32 bits"))
            })? as u32);
        }
    }
    params.extend(g.outs.iter().map(|&x| x as u32));
    params.extend(mul.iter().map(|&x| x as u32));
    // P: 0 n, 1 out_sp, 2 in_sp, 3 ins, 6 k, 9 s, 12 d, 15 pb, 18 pe, 21 outs, 24 mul.
    let v = wgsl::load(
        d,
        "i0[plane * P[2] + (u32(a) * P[4] + u32(b)) * P[5] + u32(c)]",
    );
    let inner = if let Some(p) = lp {
        format!("let a = abs(f64({v}));\nsum = sum + {};", lp_pow(p))
    } else if is_max {
        format!(
            "let v = {v};\n\
             if (!found || (!isnan32(best) && (isnan32(v) || v > best))) {{ best = v; found = true; at_ = (u32(a) * P[24] + u32(b) * P[25] + u32(c) * P[26]); }}"
        )
    } else {
        format!("sum = sum + f64({v}); cnt = cnt + 1u;")
    };
    let finish = if let Some(p) = lp {
        format!(
            "o0[i] = {};\n",
            wgsl::store(d, &format!("f32({})", lp_root(p)))
        )
    } else if is_max {
        let mut s = format!(
            "o0[i] = {};\n",
            wgsl::store(d, "select(bitcast<f32>(0xff800000u), best, found)")
        );
        if want_idx {
            s.push_str(
                "let gi = plane * P[2] + at_;\n\
                 o1[2u * i] = select(0xffffffffu, gi, found);\n\
                 o1[2u * i + 1u] = select(0xffffffffu, 0u, found);\n",
            );
        }
        s
    } else {
        let count = if include_pad { "pcnt" } else { "cnt" };
        format!(
            "var v = bitcast<f32>(0x7fc00000u);\nif ({count} > 0u) {{ v = f32(sum / f64({count})); }}\no0[i] = {};\n",
            wgsl::store(d, "v")
        )
    };
    let decl = if is_max {
        "var best = 0.0; var found = false; var at_ = 0u; var pcnt = 0u;"
    } else {
        "var sum = 0.0lf; var cnt = 0u; var pcnt = 0u;"
    };
    let body = format!(
        "let plane = i / P[1];\nlet op_ = i % P[1];\n\
         let o2 = op_ % P[23]; let o1_ = (op_ / P[23]) % P[22]; let o0_ = op_ / (P[22] * P[23]);\n\
         let st0 = i32(o0_ * P[9]) - bitcast<i32>(P[15]);\n\
         let st1 = i32(o1_ * P[10]) - bitcast<i32>(P[16]);\n\
         let st2 = i32(o2 * P[11]) - bitcast<i32>(P[17]);\n\
         {decl}\n\
         for (var t0 = 0u; t0 < P[6]; t0 = t0 + 1u) {{\n\
          let a = st0 + i32(t0 * P[12]);\n\
          let ina = a >= 0 && a < i32(P[3]);\n\
          let pa = a >= -bitcast<i32>(P[15]) && a < i32(P[3]) + bitcast<i32>(P[18]);\n\
          for (var t1 = 0u; t1 < P[7]; t1 = t1 + 1u) {{\n\
           let b = st1 + i32(t1 * P[13]);\n\
           let inb = b >= 0 && b < i32(P[4]);\n\
           let pb_ = b >= -bitcast<i32>(P[16]) && b < i32(P[4]) + bitcast<i32>(P[19]);\n\
           for (var t2 = 0u; t2 < P[8]; t2 = t2 + 1u) {{\n\
            let c = st2 + i32(t2 * P[14]);\n\
            let inc = c >= 0 && c < i32(P[5]);\n\
            let pc = c >= -bitcast<i32>(P[17]) && c < i32(P[5]) + bitcast<i32>(P[20]);\n\
            if (pa && pb_ && pc) {{ pcnt = pcnt + 1u; }}\n\
            if (ina && inb && inc) {{ {inner} }}\n\
           }}\n\
          }}\n\
         }}\n{finish}"
    );
    let half = if wgsl::needs_half(&[d]) {
        wgsl::HALF
    } else {
        ""
    };
    let outs = if want_idx { 2 } else { 1 };
    let math = if lp.is_some_and(|p| p > 2.0) {
        super::math::library()
    } else {
        String::new()
    };
    // Generated for this geometry: the window walk divides and loops by constants.
    let body = wgsl::inline_params(&body, &params, 1);
    let src = format!(
        "{}{half}{math}{}",
        wgsl::header(outs, 1),
        wgsl::entry_1d(&body)
    );
    let mut out_refs = vec![&y];
    out_refs.extend(idx.as_ref());
    run.dispatch_n(op, &src, &out_refs, &[&x], params, n)?;
    Ok(std::iter::once(y).chain(idx).collect())
}

/// An exponent LpPool raises to by products.
fn small_int(p: f64) -> bool {
    p.fract() == 0.0 && (1.0..=8.0).contains(&p)
}

/// `a^p` of the magnitude `a` (an f64 expression named `a`), p a [`small_int`].
fn lp_pow(p: f64) -> String {
    vec!["a"; p as usize].join(" * ")
}

/// The p-th root of the f64 sum `sum`: exact square root for p = 2, `exp64(log64(sum) / p)`
/// beyond (the math library; 0 for a zero sum).
fn lp_root(p: f64) -> String {
    if p == 1.0 {
        "sum".into()
    } else if p == 2.0 {
        "sqrt(sum)".into()
    } else {
        format!("exp64(log64(sum) * {})", wgsl::lf(1.0 / p))
    }
}
