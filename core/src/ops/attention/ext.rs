//! The smaller newer operators that go with attention: RotaryEmbedding, Swish, SwiGLU, LinearAttention,
//! CausalConvWithState, TensorScatter, BitCast and CumProd. A child module of `attention.rs` (shares its
//! [`Cf`] conversion trait).
use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};

use super::super::{OpCtx, Registry, input, norm_axis, opt_input, single};
use super::{Cf, is_float};
use crate::error::OpResult;
use crate::tensor::{DType, Tensor, Value};
use crate::{bail, unsupported};

pub fn register(r: &mut Registry) {
    r.add("", "RotaryEmbedding", rotary_embedding);
    r.add("", "Swish", swish);
    r.add("", "SwiGLU", swiglu);
    r.add("", "LinearAttention", linear_attention);
    r.add("", "CausalConvWithState", causal_conv_with_state);
    r.add("", "TensorScatter", tensor_scatter);
    r.add("", "BitCast", bitcast);
    r.add("", "CumProd", cumprod);
}

fn float_dtype(t: &Tensor, op: &str) -> OpResult<DType> {
    let d = t.dtype();
    if !is_float(d) {
        unsupported!("{op} of dtype {d} (expected a float type)");
    }
    Ok(d)
}

// ---------------------------------------------------------------- RotaryEmbedding

fn rotary_embedding(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let xt = input(inputs, 0)?;
    let dt = float_dtype(xt, "RotaryEmbedding")?;
    let (cos_t, sin_t) = (input(inputs, 1)?, input(inputs, 2)?);
    let pos_t = opt_input(inputs, 3)?;
    let xs = xt.shape();
    // (batch, heads, seq, head_size) and the strides of batch, head, seq in the input.
    let (b, h, s, hd, strides) = match xs.len() {
        4 => (
            xs[0],
            xs[1],
            xs[2],
            xs[3],
            [xs[1] * xs[2] * xs[3], xs[2] * xs[3], xs[3]],
        ),
        3 => {
            let nh = ctx.attr_i("num_heads", 0)?;
            if nh <= 0 || xs[2] % nh as usize != 0 {
                bail!(
                    "a 3-D input needs num_heads dividing the hidden size {}, got {nh}",
                    xs[2]
                );
            }
            let nh = nh as usize;
            let hd = xs[2] / nh;
            (xs[0], nh, xs[1], hd, [xs[1] * xs[2], hd, xs[2]])
        }
        _ => bail!("input must be 3-D or 4-D, got {xs:?}"),
    };
    let rd = match ctx.attr_i("rotary_embedding_dim", 0)? {
        0 => hd,
        r if r > 0 && r as usize <= hd && r % 2 == 0 => r as usize,
        r => bail!("rotary_embedding_dim {r} must be even and at most the head size {hd}"),
    };
    let half = rd / 2;
    let interleaved = ctx.attr_i("interleaved", 0)? != 0;
    let (cos, sin) = (f32::read(cos_t)?, f32::read(sin_t)?);
    if cos_t.shape() != sin_t.shape() || cos_t.shape().last() != Some(&half) {
        bail!(
            "cos_cache {:?} and sin_cache {:?} must end in rotary_dim/2 = {half}",
            cos_t.shape(),
            sin_t.shape()
        );
    }
    // Row of the caches for each (batch, position).
    let rows: Vec<usize> = match pos_t {
        Some(p) => {
            if p.shape() != [b, s] {
                bail!(
                    "position_ids must have shape [{b}, {s}], got {:?}",
                    p.shape()
                );
            }
            let maxp = cos_t.shape()[0];
            if cos_t.rank() != 2 {
                bail!(
                    "with position_ids the caches must be 2-D, got {:?}",
                    cos_t.shape()
                );
            }
            p.to_i64_vec()?
                .into_iter()
                .map(|v| {
                    if v >= 0 && (v as usize) < maxp {
                        Ok(v as usize)
                    } else {
                        bail!("position id {v} is outside [0, {maxp})")
                    }
                })
                .collect::<OpResult<_>>()?
        }
        None => {
            if cos_t.shape() != [b, s, half] {
                bail!(
                    "without position_ids the caches must have shape [{b}, {s}, {half}], got {:?}",
                    cos_t.shape()
                );
            }
            (0..b * s).collect()
        }
    };
    let rt = f32::rounder(dt);
    let mut y = f32::read(xt)?;
    for bi in 0..b {
        for hi in 0..h {
            for si in 0..s {
                let o = bi * strides[0] + hi * strides[1] + si * strides[2];
                let row = rows[bi * s + si] * half;
                let x = &mut y[o..o + rd];
                let orig: Vec<f32> = x.to_vec();
                for k in 0..half {
                    let (c, sn) = (cos[row + k], sin[row + k]);
                    let (i1, i2) = if interleaved {
                        (2 * k, 2 * k + 1)
                    } else {
                        (k, k + half)
                    };
                    let (x1, x2) = (orig[i1], orig[i2]);
                    x[i1] = rt(rt(c * x1) - rt(sn * x2));
                    x[i2] = rt(rt(sn * x1) + rt(c * x2));
                }
            }
        }
    }
    single(f32::write(dt, xs, y)?)
}

// ---------------------------------------------------------------- Swish, SwiGLU

/// `x * sigmoid(alpha * x)` with the reference's rounding to the input type after every step.
fn swish_one<C: Cf>(x: C, alpha: C, rt: fn(C) -> C) -> C {
    let one = C::one();
    let sig = rt(one / rt(one + rt(rt(-alpha * x).exp())));
    rt(x * sig)
}

fn swish_t<C: Cf>(x: &Tensor, alpha: f32, b: Option<&Tensor>) -> OpResult<Tensor> {
    let dt = x.dtype();
    let rt = C::rounder(dt);
    let a = C::fx(alpha as f64);
    let mut v = C::read(x)?;
    v.iter_mut().for_each(|e| *e = swish_one(*e, a, rt));
    if let Some(b) = b {
        for (e, bv) in v.iter_mut().zip(C::read(b)?) {
            *e = rt(*e * bv);
        }
    }
    C::write(dt, x.shape(), v)
}

fn swish(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let alpha = ctx.attr_f("alpha", 1.0)?;
    single(match float_dtype(x, "Swish")? {
        DType::F64 => swish_t::<f64>(x, alpha, None)?,
        _ => swish_t::<f32>(x, alpha, None)?,
    })
}

fn swiglu(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (a, b) = (input(inputs, 0)?, input(inputs, 1)?);
    if a.shape() != b.shape() || a.dtype() != b.dtype() {
        bail!(
            "SwiGLU needs A and B of one shape and type, got {} and {}",
            a.describe(),
            b.describe()
        );
    }
    let alpha = ctx.attr_f("alpha", 1.0)?;
    single(match float_dtype(a, "SwiGLU")? {
        DType::F64 => swish_t::<f64>(a, alpha, Some(b))?,
        _ => swish_t::<f32>(a, alpha, Some(b))?,
    })
}

// ---------------------------------------------------------------- LinearAttention

fn linear_attention(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (qt, kt, vt) = (input(inputs, 0)?, input(inputs, 1)?, input(inputs, 2)?);
    let dt = float_dtype(qt, "LinearAttention")?;
    let (past_t, decay_t, beta_t) = (
        opt_input(inputs, 3)?,
        opt_input(inputs, 4)?,
        opt_input(inputs, 5)?,
    );
    let rule = ctx.attr_s("update_rule", "gated_delta")?;
    let (gating, delta) = match rule.as_str() {
        "linear" => (false, false),
        "gated" => (true, false),
        "delta" => (false, true),
        "gated_delta" => (true, true),
        r => bail!("update_rule must be linear, gated, delta or gated_delta, got '{r}'"),
    };
    if gating != decay_t.is_some() {
        bail!(
            "update_rule '{rule}' {} the decay input",
            if gating { "requires" } else { "forbids" }
        );
    }
    if delta != beta_t.is_some() {
        bail!(
            "update_rule '{rule}' {} the beta input",
            if delta { "requires" } else { "forbids" }
        );
    }
    let (hq, hkv) = (ctx.req_i("q_num_heads")?, ctx.req_i("kv_num_heads")?);
    if hq <= 0 || hkv <= 0 || hq % hkv != 0 {
        bail!("q_num_heads ({hq}) must be a positive multiple of kv_num_heads ({hkv})");
    }
    let (hq, hkv) = (hq as usize, hkv as usize);
    let (qs, ks, vs) = (qt.shape(), kt.shape(), vt.shape());
    if qs.len() != 3 || ks.len() != 3 || vs.len() != 3 {
        bail!("query, key and value must be 3-D, got {qs:?}, {ks:?}, {vs:?}");
    }
    let (b, t) = (qs[0], qs[1]);
    if qs[2] % hq != 0 || vs[2] % hkv != 0 {
        bail!(
            "hidden sizes {} / {} are not multiples of the head counts {hq} / {hkv}",
            qs[2],
            vs[2]
        );
    }
    let (dk, dv) = (qs[2] / hq, vs[2] / hkv);
    if ks != [b, t, hkv * dk] || vs[..2] != [b, t] {
        bail!("key {ks:?} / value {vs:?} do not match query {qs:?}");
    }
    let (q, k, v) = (f32::read(qt)?, f32::read(kt)?, f32::read(vt)?);
    // Per-token, per-kv-head decay: either one value or dk values.
    let decay = match decay_t {
        Some(d) => {
            let last = d.shape().last().copied().unwrap_or(0);
            if d.rank() != 3 || d.shape()[..2] != [b, t] || (last != hkv && last != hkv * dk) {
                bail!(
                    "decay must have shape [{b}, {t}, {hkv}] or [{b}, {t}, {}], got {:?}",
                    hkv * dk,
                    d.shape()
                );
            }
            Some((f32::read(d)?, last / hkv))
        }
        None => None,
    };
    let beta = match beta_t {
        Some(bt) => {
            let last = bt.shape().last().copied().unwrap_or(0);
            if bt.rank() != 3 || bt.shape()[..2] != [b, t] || (last != hkv && last != 1) {
                bail!(
                    "beta must have shape [{b}, {t}, {hkv}] or [{b}, {t}, 1], got {:?}",
                    bt.shape()
                );
            }
            Some((f32::read(bt)?, last))
        }
        None => None,
    };
    let state_len = b * hkv * dk * dv;
    let (mut state, state_dt) = match past_t {
        Some(p) => {
            if p.shape() != [b, hkv, dk, dv] {
                bail!(
                    "past_state must have shape [{b}, {hkv}, {dk}, {dv}], got {:?}",
                    p.shape()
                );
            }
            (f32::read(p)?, float_dtype(p, "LinearAttention state")?)
        }
        None => (vec![0f32; state_len], dt),
    };
    let scale_attr = ctx.attr_f("scale", 0.0)?;
    let scale = (if scale_attr == 0.0 {
        1.0 / (dk as f64).sqrt()
    } else {
        scale_attr as f64
    }) as f32;
    let group = hq / hkv;
    let mut out = vec![0f32; b * t * hq * dv];
    let mut vt_buf = vec![0f32; dv];
    for bi in 0..b {
        for kh in 0..hkv {
            let st = &mut state[(bi * hkv + kh) * dk * dv..(bi * hkv + kh + 1) * dk * dv];
            for ti in 0..t {
                let tok = bi * t + ti;
                let kk = &k[(tok * hkv + kh) * dk..(tok * hkv + kh + 1) * dk];
                let vv = &v[(tok * hkv + kh) * dv..(tok * hkv + kh + 1) * dv];
                if let Some((dec, per)) = &decay {
                    for di in 0..dk {
                        let g = dec[(tok * hkv + kh) * per + if *per == 1 { 0 } else { di }].exp();
                        st[di * dv..(di + 1) * dv].iter_mut().for_each(|x| *x *= g);
                    }
                }
                vt_buf.copy_from_slice(vv);
                if let Some((bv, last)) = &beta {
                    let be = bv[tok * last + if *last == 1 { 0 } else { kh }];
                    for (m, o) in vt_buf.iter_mut().enumerate() {
                        let mut r = 0f32;
                        for di in 0..dk {
                            r += st[di * dv + m] * kk[di];
                        }
                        *o = be * (*o - r);
                    }
                }
                for di in 0..dk {
                    let kd = kk[di];
                    for (x, &u) in st[di * dv..(di + 1) * dv].iter_mut().zip(&vt_buf) {
                        *x += kd * u;
                    }
                }
                for h in kh * group..(kh + 1) * group {
                    let qq = &q[(tok * hq + h) * dk..(tok * hq + h + 1) * dk];
                    let o = &mut out[(tok * hq + h) * dv..(tok * hq + h + 1) * dv];
                    for (di, &qd) in qq.iter().enumerate() {
                        for (x, &s) in o.iter_mut().zip(&st[di * dv..(di + 1) * dv]) {
                            *x += qd * s;
                        }
                    }
                    o.iter_mut().for_each(|x| *x *= scale);
                }
            }
        }
    }
    let rt = f32::rounder(dt);
    out.iter_mut().for_each(|x| *x = rt(*x));
    let rs = f32::rounder(state_dt);
    state.iter_mut().for_each(|x| *x = rs(*x));
    Ok(vec![
        f32::write(dt, &[b, t, hq * dv], out)?.into(),
        f32::write(state_dt, &[b, hkv, dk, dv], state)?.into(),
    ])
}

// ---------------------------------------------------------------- CausalConvWithState

fn causal_conv_with_state(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (xt, wt) = (input(inputs, 0)?, input(inputs, 1)?);
    let dt = float_dtype(xt, "CausalConvWithState")?;
    let (bias_t, past_t) = (opt_input(inputs, 2)?, opt_input(inputs, 3)?);
    let act = ctx.attr_s("activation", "none")?;
    let silu = match act.as_str() {
        "none" => false,
        "silu" | "swish" => true,
        a => bail!("activation must be none, silu or swish, got '{a}'"),
    };
    let (xs, ws) = (xt.shape(), wt.shape());
    if xs.len() != 3 || ws.len() != 3 || ws[0] != xs[1] || ws[1] != 1 || ws[2] == 0 {
        bail!("input {xs:?} must be [B, C, L] and weight {ws:?} [C, 1, k] with k >= 1");
    }
    let (b, c, l, k) = (xs[0], xs[1], xs[2], ws[2]);
    let x = f32::read(xt)?;
    let w = f32::read(wt)?;
    let bias = match bias_t {
        Some(bt) if bt.shape() == [c] => Some(f32::read(bt)?),
        Some(bt) => bail!("bias must have shape [{c}], got {:?}", bt.shape()),
        None => None,
    };
    let past = match past_t {
        Some(p) if p.shape() == [b, c, k - 1] => f32::read(p)?,
        Some(p) => bail!(
            "past_state must have shape [{b}, {c}, {}], got {:?}",
            k - 1,
            p.shape()
        ),
        None => vec![0f32; b * c * (k - 1)],
    };
    let rt = f32::rounder(dt);
    let n = l + k - 1;
    let mut out = vec![0f32; b * c * l];
    let mut present = Vec::with_capacity(b * c * (k - 1));
    let mut padded = vec![0f32; n];
    for bc in 0..b * c {
        let ch = bc % c;
        padded[..k - 1].copy_from_slice(&past[bc * (k - 1)..(bc + 1) * (k - 1)]);
        padded[k - 1..].copy_from_slice(&x[bc * l..(bc + 1) * l]);
        let wk = &w[ch * k..(ch + 1) * k];
        let b0 = bias.as_ref().map_or(0.0, |bv| bv[ch]);
        for (ti, o) in out[bc * l..(bc + 1) * l].iter_mut().enumerate() {
            let acc: f32 = wk.iter().zip(&padded[ti..ti + k]).map(|(a, b)| a * b).sum();
            let mut y = rt(acc + b0);
            if silu {
                y = rt(y * (1.0 / (1.0 + (-y).exp())));
            }
            *o = y;
        }
        present.extend_from_slice(&padded[l..]);
    }
    Ok(vec![
        f32::write(dt, xs, out)?.into(),
        f32::write(dt, &[b, c, k - 1], present)?.into(),
    ])
}

// ---------------------------------------------------------------- TensorScatter

fn tensor_scatter(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (past, upd) = (input(inputs, 0)?, input(inputs, 1)?);
    let wi = opt_input(inputs, 2)?;
    let (ps, us) = (past.shape(), upd.shape());
    if past.dtype() != upd.dtype() || ps.len() != us.len() || ps.len() < 2 {
        bail!(
            "past_cache {} and update {} must share type and rank (>= 2)",
            past.describe(),
            upd.describe()
        );
    }
    let axis = norm_axis(ctx.attr_i("axis", -2)?, ps.len())?;
    if axis == 0 {
        bail!("axis cannot be the batch axis");
    }
    let circular = match ctx.attr_s("mode", "linear")?.as_str() {
        "linear" => false,
        "circular" => true,
        m => bail!("mode must be linear or circular, got '{m}'"),
    };
    for (i, (&p, &u)) in ps.iter().zip(us).enumerate() {
        if (i != axis && p != u) || (i == axis && u > p) {
            bail!("update shape {us:?} does not fit past_cache shape {ps:?}");
        }
    }
    let b = ps[0];
    let idx = match wi {
        Some(t) => {
            let v = t.to_i64_vec()?;
            if v.len() != b {
                bail!("write_indices must have {b} values, got {}", v.len());
            }
            v
        }
        None => vec![0; b],
    };
    let (maxs, s) = (ps[axis], us[axis]);
    let inner: usize = ps[axis + 1..].iter().product();
    let outer: usize = ps[..axis].iter().product();
    let per_batch = outer / b.max(1);
    let mut positions = Vec::with_capacity(upd.len());
    for o in 0..outer {
        let w = idx[o / per_batch.max(1)];
        for si in 0..s {
            let mut ci = w + si as i64;
            if circular && maxs > 0 {
                ci = ci.rem_euclid(maxs as i64);
            }
            if ci < 0 || ci as usize >= maxs {
                bail!("write index {w} + {si} is outside the cache length {maxs}");
            }
            let base = (o * maxs + ci as usize) * inner;
            positions.extend(base..base + inner);
        }
    }
    let mut present = past.clone();
    present.scatter_flat(&positions, upd)?;
    single(present)
}

// ---------------------------------------------------------------- BitCast

fn bit_width(d: DType) -> Option<u32> {
    use DType::*;
    Some(match d {
        F64 | I64 | U64 => 64,
        F32 | I32 | U32 => 32,
        F16 | BF16 | I16 | U16 => 16,
        I8 | U8 | Bool | F8E4M3FN | F8E4M3FNUZ | F8E5M2 | F8E5M2FNUZ | F8E8M0 => 8,
        I4 | U4 | F4E2M1 => 4,
        I2 | U2 => 2,
        _ => return None,
    })
}

fn to_bits(t: &Tensor, width: u32) -> Vec<u64> {
    let mask = if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    match t {
        Tensor::F32(a) => a.iter().map(|x| x.to_bits() as u64).collect(),
        Tensor::F64(a) => a.iter().map(|x| x.to_bits()).collect(),
        Tensor::F16(a) => a.iter().map(|x| x.to_bits() as u64).collect(),
        Tensor::BF16(a) => a.iter().map(|x| x.to_bits() as u64).collect(),
        Tensor::I8(a) => a.iter().map(|&x| x as u8 as u64).collect(),
        Tensor::I16(a) => a.iter().map(|&x| x as u16 as u64).collect(),
        Tensor::I32(a) => a.iter().map(|&x| x as u32 as u64).collect(),
        Tensor::I64(a) => a.iter().map(|&x| x as u64).collect(),
        Tensor::U8(a) => a.iter().map(|&x| x as u64).collect(),
        Tensor::U16(a) => a.iter().map(|&x| x as u64).collect(),
        Tensor::U32(a) => a.iter().map(|&x| x as u64).collect(),
        Tensor::U64(a) => a.iter().copied().collect(),
        Tensor::Bool(a) => a.iter().map(|&x| x as u64).collect(),
        Tensor::Packed(_, a) => a.iter().map(|&x| x as u64 & mask).collect(),
        Tensor::Str(_) => Vec::new(),
    }
}

fn from_bits(d: DType, shape: &[usize], bits: Vec<u64>) -> OpResult<Tensor> {
    fn mk<T>(shape: &[usize], v: Vec<T>) -> OpResult<ArrayD<T>> {
        Ok(ArrayD::from_shape_vec(IxDyn(shape), v)?)
    }
    let sext = |x: u64, w: u32| -> u8 { (((x as u8) << (8 - w)) as i8 >> (8 - w)) as u8 };
    Ok(match d {
        DType::F32 => Tensor::F32(mk(
            shape,
            bits.into_iter().map(|x| f32::from_bits(x as u32)).collect(),
        )?),
        DType::F64 => Tensor::F64(mk(shape, bits.into_iter().map(f64::from_bits).collect())?),
        DType::F16 => Tensor::F16(mk(
            shape,
            bits.into_iter().map(|x| f16::from_bits(x as u16)).collect(),
        )?),
        DType::BF16 => Tensor::BF16(mk(
            shape,
            bits.into_iter()
                .map(|x| bf16::from_bits(x as u16))
                .collect(),
        )?),
        DType::I8 => Tensor::I8(mk(
            shape,
            bits.into_iter().map(|x| x as u8 as i8).collect(),
        )?),
        DType::I16 => Tensor::I16(mk(
            shape,
            bits.into_iter().map(|x| x as u16 as i16).collect(),
        )?),
        DType::I32 => Tensor::I32(mk(
            shape,
            bits.into_iter().map(|x| x as u32 as i32).collect(),
        )?),
        DType::I64 => Tensor::I64(mk(shape, bits.into_iter().map(|x| x as i64).collect())?),
        DType::U8 => Tensor::U8(mk(shape, bits.into_iter().map(|x| x as u8).collect())?),
        DType::U16 => Tensor::U16(mk(shape, bits.into_iter().map(|x| x as u16).collect())?),
        DType::U32 => Tensor::U32(mk(shape, bits.into_iter().map(|x| x as u32).collect())?),
        DType::U64 => Tensor::U64(mk(shape, bits)?),
        DType::Bool => Tensor::Bool(mk(shape, bits.into_iter().map(|x| x != 0).collect())?),
        DType::I4 => Tensor::Packed(
            d,
            mk(shape, bits.into_iter().map(|x| sext(x, 4)).collect())?,
        ),
        DType::I2 => Tensor::Packed(
            d,
            mk(shape, bits.into_iter().map(|x| sext(x, 2)).collect())?,
        ),
        d => Tensor::Packed(d, mk(shape, bits.into_iter().map(|x| x as u8).collect())?),
    })
}

fn bitcast(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let to = ctx.req_i("to")?;
    let Some(target) = i32::try_from(to).ok().and_then(DType::from_onnx) else {
        bail!("'to' = {to} is not a known data type");
    };
    let (Some(wi), Some(wo)) = (bit_width(x.dtype()), bit_width(target)) else {
        unsupported!("BitCast from {} to {target}", x.dtype());
    };
    if wi != wo {
        bail!(
            "BitCast needs types of one bit width, got {} ({wi} bits) and {target} ({wo} bits)",
            x.dtype()
        );
    }
    single(from_bits(target, x.shape(), to_bits(x, wi))?)
}

// ---------------------------------------------------------------- CumProd

trait Prod: Copy {
    const ONE: Self;
    fn times(self, o: Self) -> Self;
}
macro_rules! prod_int {
    ($($t:ty),*) => {$( impl Prod for $t { const ONE: Self = 1; fn times(self, o: Self) -> Self { self.wrapping_mul(o) } } )*};
}
prod_int!(i32, i64, u32, u64);
impl Prod for f32 {
    const ONE: Self = 1.0;
    fn times(self, o: Self) -> Self {
        self * o
    }
}
impl Prod for f64 {
    const ONE: Self = 1.0;
    fn times(self, o: Self) -> Self {
        self * o
    }
}
impl Prod for f16 {
    const ONE: Self = f16::ONE;
    fn times(self, o: Self) -> Self {
        f16::from_f32(self.to_f32() * o.to_f32())
    }
}
impl Prod for bf16 {
    const ONE: Self = bf16::ONE;
    fn times(self, o: Self) -> Self {
        bf16::from_f32(self.to_f32() * o.to_f32())
    }
}

fn cumprod_arr<T: Prod>(
    a: &ArrayD<T>,
    axis: usize,
    exclusive: bool,
    reverse: bool,
) -> OpResult<ArrayD<T>> {
    let shape = a.shape();
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let mut v: Vec<T> = a.iter().copied().collect();
    for blk in v.chunks_mut((n * inner).max(1)) {
        for r in 0..inner {
            let mut acc = T::ONE;
            for s in 0..n {
                let j = if reverse { n - 1 - s } else { s };
                let e = &mut blk[j * inner + r];
                let x = *e;
                if exclusive {
                    *e = acc;
                    acc = acc.times(x);
                } else {
                    acc = acc.times(x);
                    *e = acc;
                }
            }
        }
    }
    Ok(ArrayD::from_shape_vec(IxDyn(shape), v)?)
}

fn cumprod(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let at = input(inputs, 1)?;
    if at.len() != 1 || at.rank() > 1 {
        bail!("axis must be a scalar, got shape {:?}", at.shape());
    }
    let axis = at.to_i64_vec()?[0];
    if x.rank() == 0 {
        bail!("CumProd needs an input of rank >= 1");
    }
    let axis = norm_axis(axis, x.rank())?;
    let (ex, rev) = (
        ctx.attr_i("exclusive", 0)? != 0,
        ctx.attr_i("reverse", 0)? != 0,
    );
    single(match x {
        Tensor::F32(a) => Tensor::F32(cumprod_arr(a, axis, ex, rev)?),
        Tensor::F64(a) => Tensor::F64(cumprod_arr(a, axis, ex, rev)?),
        Tensor::F16(a) => Tensor::F16(cumprod_arr(a, axis, ex, rev)?),
        Tensor::BF16(a) => Tensor::BF16(cumprod_arr(a, axis, ex, rev)?),
        Tensor::I32(a) => Tensor::I32(cumprod_arr(a, axis, ex, rev)?),
        Tensor::I64(a) => Tensor::I64(cumprod_arr(a, axis, ex, rev)?),
        Tensor::U32(a) => Tensor::U32(cumprod_arr(a, axis, ex, rev)?),
        Tensor::U64(a) => Tensor::U64(cumprod_arr(a, axis, ex, rev)?),
        o => unsupported!("CumProd of dtype {}", o.dtype()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cumprod_exclusive_reverse_axis0() {
        let a = ArrayD::from_shape_vec(IxDyn(&[3, 2]), vec![2i64, 3, 5, 7, 11, 13]).unwrap();
        let r = cumprod_arr(&a, 0, true, true).unwrap();
        // Column 0 reversed exclusive: [5*11, 11, 1]; column 1: [7*13, 13, 1].
        assert_eq!(
            r.iter().copied().collect::<Vec<_>>(),
            vec![55, 91, 11, 13, 1, 1]
        );
    }

    #[test]
    fn bitcast_int4_sign_extends() {
        let u4 = Tensor::Packed(
            DType::U4,
            ArrayD::from_shape_vec(IxDyn(&[3]), vec![0x0f, 0x08, 0x07]).unwrap(),
        );
        let i4 = from_bits(DType::I4, &[3], to_bits(&u4, 4)).unwrap();
        let Tensor::Packed(DType::I4, a) = &i4 else {
            panic!("{i4:?}")
        };
        assert_eq!(
            a.iter().map(|&x| x as i8).collect::<Vec<_>>(),
            vec![-1, -8, 7]
        );
        let back = from_bits(DType::U4, &[3], to_bits(&i4, 4)).unwrap();
        assert_eq!(back, u4);
    }

    #[test]
    fn f32_bits_roundtrip() {
        let x = Tensor::from_f32(&[2], vec![1.5, -0.0]).unwrap();
        let i = from_bits(DType::I32, &[2], to_bits(&x, 32)).unwrap();
        assert_eq!(i.to_i64_vec().unwrap(), vec![0x3fc00000, i32::MIN as i64]);
    }
}
