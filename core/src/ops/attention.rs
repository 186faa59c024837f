//! Attention-style ops: Attention (opset 23-25) and the preview FlexAttention here; RotaryEmbedding,
//! LinearAttention, CausalConvWithState, Swish, SwiGLU, TensorScatter, BitCast and CumProd in
//! `attention/ext.rs`.
//!
//! Attention works head by head on `[B, H, S, D]` layouts (3-D inputs are unpacked first) with its own
//! dot-product loops. It follows the reference's rounding points so that float16/bfloat16 results agree
//! to the last bit or so: Q and K are scaled by `sqrt(scale)` in the input type, each score is rounded to
//! the input type, the softmax runs in `softmax_precision` and the probabilities are rounded back before
//! the product with V. Masks (`attn_mask`, `is_causal`, the sliding window and `nonpad_kv_seqlen`) are
//! evaluated per element, never materialised; a row whose combined bias is all `-inf` gives zeros.
use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};
use num_traits::Float;
use rayon::prelude::*;

use super::{OpCtx, Registry, input, opt_input};
use crate::error::OpResult;
use crate::tensor::{DType, Tensor, Value};
use crate::{bail, unsupported};

mod ext;
pub mod fused;

pub fn register(r: &mut Registry) {
    r.add("", "Attention", attention);
    r.add("ai.onnx.preview", "FlexAttention", flex_attention);
    ext::register(r);
    fused::register(r);
}

/// The element type computations run in: f32 for 32-bit-and-narrower floats, f64 for double.
trait Cf: Float + Send + Sync + 'static {
    fn fx(v: f64) -> Self;
    fn f64of(self) -> f64;
    /// The contents of a float tensor, converted.
    fn read(t: &Tensor) -> OpResult<Vec<Self>>;
    /// A tensor of `d` from values already rounded to it.
    fn write(d: DType, shape: &[usize], v: Vec<Self>) -> OpResult<Tensor>;
    /// Rounding to `d`'s precision, as a value of this type.
    fn rounder(d: DType) -> fn(Self) -> Self;
}

fn id<T>(x: T) -> T {
    x
}

impl Cf for f32 {
    fn fx(v: f64) -> f32 {
        v as f32
    }
    fn f64of(self) -> f64 {
        self as f64
    }
    fn read(t: &Tensor) -> OpResult<Vec<f32>> {
        Ok(match t {
            Tensor::F32(a) => a.iter().copied().collect(),
            Tensor::F16(a) => a.iter().map(|x| x.to_f32()).collect(),
            Tensor::BF16(a) => a.iter().map(|x| x.to_f32()).collect(),
            Tensor::F64(a) => a.iter().map(|&x| x as f32).collect(),
            o => unsupported!("dtype {} (expected a float type)", o.dtype()),
        })
    }
    fn write(d: DType, shape: &[usize], v: Vec<f32>) -> OpResult<Tensor> {
        let s = IxDyn(shape);
        Ok(match d {
            DType::F32 => Tensor::F32(ArrayD::from_shape_vec(s, v)?),
            DType::F16 => Tensor::F16(ArrayD::from_shape_vec(
                s,
                v.into_iter().map(f16::from_f32).collect(),
            )?),
            DType::BF16 => Tensor::BF16(ArrayD::from_shape_vec(
                s,
                v.into_iter().map(bf16::from_f32).collect(),
            )?),
            DType::F64 => Tensor::F64(ArrayD::from_shape_vec(
                s,
                v.into_iter().map(|x| x as f64).collect(),
            )?),
            d => unsupported!("dtype {d} (expected a float type)"),
        })
    }
    fn rounder(d: DType) -> fn(f32) -> f32 {
        match d {
            DType::F16 => |x| f16::from_f32(x).to_f32(),
            DType::BF16 => |x| bf16::from_f32(x).to_f32(),
            _ => id,
        }
    }
}

impl Cf for f64 {
    fn fx(v: f64) -> f64 {
        v
    }
    fn f64of(self) -> f64 {
        self
    }
    fn read(t: &Tensor) -> OpResult<Vec<f64>> {
        if !t.dtype().is_float() || t.dtype().is_narrow_float() {
            unsupported!("dtype {} (expected a float type)", t.dtype());
        }
        t.to_f64_vec()
    }
    fn write(d: DType, shape: &[usize], v: Vec<f64>) -> OpResult<Tensor> {
        let s = IxDyn(shape);
        Ok(match d {
            DType::F64 => Tensor::F64(ArrayD::from_shape_vec(s, v)?),
            DType::F32 => Tensor::F32(ArrayD::from_shape_vec(
                s,
                v.into_iter().map(|x| x as f32).collect(),
            )?),
            DType::F16 => Tensor::F16(ArrayD::from_shape_vec(
                s,
                v.into_iter().map(f16::from_f64).collect(),
            )?),
            DType::BF16 => Tensor::BF16(ArrayD::from_shape_vec(
                s,
                v.into_iter().map(bf16::from_f64).collect(),
            )?),
            d => unsupported!("dtype {d} (expected a float type)"),
        })
    }
    fn rounder(d: DType) -> fn(f64) -> f64 {
        round64(d)
    }
}

/// Rounding of an f64 to `d`'s precision.
fn round64(d: DType) -> fn(f64) -> f64 {
    match d {
        DType::F32 => |x| x as f32 as f64,
        DType::F16 => |x| f16::from_f64(x).to_f64(),
        DType::BF16 => |x| bf16::from_f64(x).to_f64(),
        _ => id,
    }
}

/// The float type a `softmax_precision` attribute names.
fn precision_dtype(code: i64) -> OpResult<DType> {
    Ok(match code {
        1 => DType::F32,
        10 => DType::F16,
        11 => DType::F64,
        16 => DType::BF16,
        c => bail!("softmax_precision must be 1, 10, 11 or 16, got {c}"),
    })
}

fn is_float(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
}

/// Dot product with four independent accumulators.
#[inline]
fn dot<C: Float>(a: &[C], b: &[C]) -> C {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [C::zero(); 4];
    let ca = a.chunks_exact(4);
    let cb = b.chunks_exact(4);
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        acc[0] = acc[0] + x[0] * y[0];
        acc[1] = acc[1] + x[1] * y[1];
        acc[2] = acc[2] + x[2] * y[2];
        acc[3] = acc[3] + x[3] * y[3];
    }
    let mut s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    for (x, y) in ra.iter().zip(rb) {
        s = s + *x * *y;
    }
    s
}

/// `[B, S, H*D]` (row-major) to `[B, H, S, D]`.
fn unpack_heads<C: Copy>(v: &[C], b: usize, s: usize, h: usize, d: usize) -> Vec<C> {
    let mut out = Vec::with_capacity(v.len());
    for bi in 0..b {
        for hi in 0..h {
            for si in 0..s {
                let o = ((bi * s + si) * h + hi) * d;
                out.extend_from_slice(&v[o..o + d]);
            }
        }
    }
    out
}

/// `[B, H, S, D]` to `[B, S, H*D]`.
fn pack_heads<C: Copy>(v: &[C], b: usize, h: usize, s: usize, d: usize) -> Vec<C> {
    let mut out = Vec::with_capacity(v.len());
    for bi in 0..b {
        for si in 0..s {
            for hi in 0..h {
                let o = ((bi * h + hi) * s + si) * d;
                out.extend_from_slice(&v[o..o + d]);
            }
        }
    }
    out
}

/// Concatenates `[B, H, P, D]` and `[B, H, S, D]` along the sequence axis.
fn concat_seq<C: Copy>(past: &[C], cur: &[C], bh: usize, p: usize, s: usize, d: usize) -> Vec<C> {
    let mut out = Vec::with_capacity(past.len() + cur.len());
    for i in 0..bh {
        out.extend_from_slice(&past[i * p * d..(i + 1) * p * d]);
        out.extend_from_slice(&cur[i * s * d..(i + 1) * s * d]);
    }
    out
}

/// An attention mask as additive values, broadcast over `[B, H, Sq]` by zero strides; keys past `len`
/// are masked.
struct Mask<C> {
    vals: Vec<C>,
    strides: [usize; 3],
    len: usize,
}

impl<C: Cf> Mask<C> {
    fn new(t: &Tensor, target: [usize; 4]) -> OpResult<Mask<C>> {
        let shape = t.shape();
        if shape.is_empty() || shape.len() > 4 {
            bail!("attn_mask must have rank 1 to 4, got shape {shape:?}");
        }
        let mut s4 = [1usize; 4];
        s4[4 - shape.len()..].copy_from_slice(shape);
        for a in 0..3 {
            if s4[a] != 1 && s4[a] != target[a] {
                bail!("attn_mask of shape {shape:?} cannot be broadcast to {target:?}");
            }
        }
        if s4[3] > target[3] {
            bail!(
                "attn_mask of shape {shape:?} is longer than the {} keys",
                target[3]
            );
        }
        let len = s4[3];
        let si = if s4[2] == 1 { 0 } else { len };
        let sh = if s4[1] == 1 { 0 } else { s4[2] * len };
        let sb = if s4[0] == 1 { 0 } else { s4[1] * s4[2] * len };
        let vals = match t {
            Tensor::Bool(a) => a
                .iter()
                .map(|&m| if m { C::zero() } else { C::neg_infinity() })
                .collect(),
            t if is_float(t.dtype()) => C::read(t)?,
            t => bail!("attn_mask must be bool or float, got {}", t.dtype()),
        };
        Ok(Mask {
            vals,
            strides: [sb, sh, si],
            len,
        })
    }
}

/// Everything one head's computation needs.
struct Attn<'a, C> {
    hq: usize,
    group: usize,
    hkv: usize,
    sq: usize,
    l: usize,
    d: usize,
    dv: usize,
    past: Option<usize>,
    nonpad: Option<&'a [i64]>,
    causal: bool,
    left: i64,
    right: i64,
    softcap: f32,
    mode: i64,
    want_qk: bool,
    mask: Option<&'a Mask<C>>,
    rt: fn(C) -> C,
    rp: fn(f64) -> f64,
    /// Sums in the softmax precision round after every step (numpy's bfloat16 reductions do).
    seq_round: bool,
}

impl<C: Cf> Attn<'_, C> {
    /// Y (`[Sq, Dv]`) and, when wanted, the qk output (`[Sq, L]`) of head `bh` (batch-major).
    fn head(&self, bh: usize, q: &[C], k: &[C], v: &[C]) -> (Vec<C>, Vec<C>) {
        let (sq, l, d, dv) = (self.sq, self.l, self.d, self.dv);
        let (b, h) = (bh / self.hq, bh % self.hq);
        let kvh = b * self.hkv + h / self.group;
        let kb = &k[kvh * l * d..(kvh + 1) * l * d];
        let vb = &v[kvh * l * dv..(kvh + 1) * l * dv];
        let rt = self.rt;
        let offset = match (self.past, self.nonpad) {
            (Some(p), _) => p as i64,
            (None, Some(np)) => np[b] - sq as i64,
            _ => 0,
        };
        let mut y = vec![C::zero(); sq * dv];
        let mut qk = if self.want_qk {
            vec![C::zero(); sq * l]
        } else {
            Vec::new()
        };
        let mut bias = vec![C::zero(); l];
        let mut w = vec![C::zero(); l];
        let mut p = vec![0f64; l];
        let cap = C::fx(self.softcap as f64);
        let ninf = C::neg_infinity();
        for i in 0..sq {
            // The additive bias of this row.
            let pos = i as i64 + offset;
            let moff = self
                .mask
                .map(|m| b * m.strides[0] + h * m.strides[1] + i * m.strides[2]);
            let mut all_masked = true;
            for (j, bj) in bias.iter_mut().enumerate() {
                let ji = j as i64;
                let mut blocked = self.causal && ji > pos;
                blocked |= self.left >= 0 && pos - ji > self.left;
                blocked |= self.right >= 0 && ji - pos > self.right;
                blocked |= self.nonpad.is_some_and(|np| ji >= np[b]);
                let m = match (self.mask, moff) {
                    (Some(m), Some(o)) if j < m.len => m.vals[o + j],
                    (Some(_), _) => ninf,
                    _ => C::zero(),
                };
                *bj = if blocked { m + ninf } else { m };
                all_masked &= *bj == ninf;
            }
            // Scores, softcap, bias.
            let qi = &q[(bh * sq + i) * d..(bh * sq + i + 1) * d];
            for j in 0..l {
                let raw = rt(dot(qi, &kb[j * d..(j + 1) * d]));
                let mut s = raw;
                if self.softcap > 0.0 {
                    s = rt(rt(rt(s / cap).tanh()) * cap);
                }
                let wj = rt(s + bias[j]);
                w[j] = wj;
                if self.want_qk {
                    qk[i * l + j] = match self.mode {
                        0 => raw,
                        1 => s,
                        _ => wj,
                    };
                }
            }
            // Softmax in the softmax precision; a fully masked row is zero.
            let rp = self.rp;
            if all_masked || l == 0 {
                p.iter_mut().for_each(|x| *x = 0.0);
            } else {
                let mut mx = f64::NEG_INFINITY;
                for (pj, &wj) in p.iter_mut().zip(&w) {
                    *pj = rp(wj.f64of());
                    if !mx.is_nan() && (pj.is_nan() || *pj > mx) {
                        mx = *pj;
                    }
                }
                let safe = if mx == f64::NEG_INFINITY { 0.0 } else { mx };
                let mut sum = 0f64;
                for pj in p.iter_mut() {
                    *pj = rp(rp(*pj - safe).exp());
                    sum = if self.seq_round {
                        rp(sum + *pj)
                    } else {
                        sum + *pj
                    };
                }
                let mut sum = rp(sum);
                if sum == 0.0 {
                    sum = 1.0;
                }
                p.iter_mut().for_each(|x| *x = rp(*x / sum));
            }
            if self.want_qk && self.mode == 3 {
                for (o, &pj) in qk[i * l..(i + 1) * l].iter_mut().zip(&p) {
                    *o = rt(C::fx(pj));
                }
            }
            // Y row = P . V
            let yi = &mut y[i * dv..(i + 1) * dv];
            for (j, &pj) in p.iter().enumerate() {
                let pj = rt(C::fx(pj));
                if pj == C::zero() {
                    continue;
                }
                for (o, &x) in yi.iter_mut().zip(&vb[j * dv..(j + 1) * dv]) {
                    *o = *o + pj * x;
                }
            }
            yi.iter_mut().for_each(|x| *x = rt(*x));
        }
        (y, qk)
    }
}

fn attention(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let q = input(inputs, 0)?;
    match q.dtype() {
        DType::F64 => attention_t::<f64>(ctx, inputs),
        DType::F32 | DType::F16 | DType::BF16 => attention_t::<f32>(ctx, inputs),
        d => unsupported!("Attention of dtype {d}"),
    }
}

fn attention_t<C: Cf>(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (qt, kt, vt) = (input(inputs, 0)?, input(inputs, 1)?, input(inputs, 2)?);
    let dt = qt.dtype();
    if kt.dtype() != dt || vt.dtype() != dt {
        bail!(
            "Q, K and V must share a float type, got {}, {} and {}",
            dt,
            kt.dtype(),
            vt.dtype()
        );
    }
    let mask_t = opt_input(inputs, 3)?;
    let (past_k, past_v) = (opt_input(inputs, 4)?, opt_input(inputs, 5)?);
    let nonpad_t = opt_input(inputs, 6)?;
    let rank = qt.rank();
    if kt.rank() != rank || vt.rank() != rank || (rank != 3 && rank != 4) {
        bail!(
            "Q, K and V must all be 3-D or all 4-D, got {:?}, {:?} and {:?}",
            qt.shape(),
            kt.shape(),
            vt.shape()
        );
    }
    let (qs, ks, vs) = (qt.shape(), kt.shape(), vt.shape());
    let b = qs[0];
    if ks[0] != b || vs[0] != b {
        bail!("Q, K and V must share the batch size, got {qs:?}, {ks:?} and {vs:?}");
    }
    let q_heads = ctx.attr_opt_i("q_num_heads")?;
    let kv_heads = ctx.attr_opt_i("kv_num_heads")?;
    let (mut q, mut k, mut v) = (C::read(qt)?, C::read(kt)?, C::read(vt)?);
    let (hq, hkv, sq, skv, d, dv);
    if rank == 3 {
        let (Some(nq), Some(nkv)) = (q_heads, kv_heads) else {
            bail!("3-D Q, K and V need the q_num_heads and kv_num_heads attributes");
        };
        if nq <= 0
            || nkv <= 0
            || qs[2] % nq as usize != 0
            || ks[2] % nkv as usize != 0
            || vs[2] % nkv as usize != 0
        {
            bail!(
                "hidden sizes {}, {}, {} are not multiples of q_num_heads {nq} / kv_num_heads {nkv}",
                qs[2],
                ks[2],
                vs[2]
            );
        }
        (hq, hkv) = (nq as usize, nkv as usize);
        (sq, skv, d, dv) = (qs[1], ks[1], qs[2] / hq, vs[2] / hkv);
        if ks[2] / hkv != d {
            bail!("Q head size {d} differs from K head size {}", ks[2] / hkv);
        }
        if vs[1] != skv {
            bail!("K and V must share the sequence length, got {ks:?} and {vs:?}");
        }
        q = unpack_heads(&q, b, sq, hq, d);
        k = unpack_heads(&k, b, skv, hkv, d);
        v = unpack_heads(&v, b, skv, hkv, dv);
    } else {
        if ctx.opset() >= 25 && (q_heads.is_some() || kv_heads.is_some()) {
            bail!("q_num_heads and kv_num_heads must not be given with 4-D inputs");
        }
        (hq, sq, d) = (qs[1], qs[2], qs[3]);
        (hkv, skv, dv) = (ks[1], ks[2], vs[3]);
        if ks[3] != d || vs[1] != hkv || vs[2] != skv {
            bail!("K {ks:?} and V {vs:?} do not match Q {qs:?}");
        }
    }
    if hkv == 0 || hq % hkv != 0 {
        bail!("q_num_heads {hq} must be a multiple of kv_num_heads {hkv}");
    }
    // The key/value cache.
    let past = match (past_k, past_v) {
        (Some(pk), Some(pv)) => {
            let p = pk.shape().get(2).copied().unwrap_or(0);
            if pk.shape() != [b, hkv, p, d] || pv.shape() != [b, hkv, p, dv] {
                bail!(
                    "past_key {:?} / past_value {:?} must be [{b}, {hkv}, P, {d}] / [{b}, {hkv}, P, {dv}]",
                    pk.shape(),
                    pv.shape()
                );
            }
            if pk.dtype() != dt || pv.dtype() != dt {
                bail!("past_key and past_value must be {dt}");
            }
            k = concat_seq(&C::read(pk)?, &k, b * hkv, p, skv, d);
            v = concat_seq(&C::read(pv)?, &v, b * hkv, p, skv, dv);
            Some(p)
        }
        (None, None) => None,
        _ => bail!("past_key and past_value must be given together"),
    };
    let l = skv + past.unwrap_or(0);
    let nonpad = match nonpad_t {
        Some(t) => {
            if past.is_some() {
                bail!("nonpad_kv_seqlen cannot be combined with past_key / past_value");
            }
            let np = t.to_i64_vec()?;
            if np.len() != b {
                bail!(
                    "nonpad_kv_seqlen must have {b} values, got shape {:?}",
                    t.shape()
                );
            }
            Some(np)
        }
        None => None,
    };
    let mask = mask_t
        .map(|t| Mask::<C>::new(t, [b, hq, sq, l]))
        .transpose()?;
    let mode = ctx.attr_i("qk_matmul_output_mode", 0)?;
    if !(0..=3).contains(&mode) {
        bail!("qk_matmul_output_mode must be 0..3, got {mode}");
    }
    let (left, right) = (
        ctx.attr_i("left_window_size", -1)?,
        ctx.attr_i("right_window_size", -1)?,
    );
    if left < -1 || right < -1 {
        bail!("window sizes must be -1 or nonnegative, got {left} / {right}");
    }
    let pdt = match ctx.attr_opt_i("softmax_precision")? {
        Some(c) => precision_dtype(c)?,
        None => dt,
    };
    let outs = &ctx.node.outputs;
    let wanted = |i: usize| outs.get(i).is_some_and(|n| !n.is_empty());
    let want_qk = wanted(3);
    ctx.check_alloc(&[b, hq, sq, dv], dt.size_in_memory())?;
    if want_qk {
        ctx.check_alloc(&[b, hq, sq, l], dt.size_in_memory())?;
    }
    let mut result: Vec<Value> = Vec::with_capacity(4);
    let empty = || Value::Tensor(Tensor::zeros(dt, &[0]));
    let (present_k, present_v) = if wanted(1) || wanted(2) {
        (
            C::write(dt, &[b, hkv, l, d], k.clone())?.into(),
            C::write(dt, &[b, hkv, l, dv], v.clone())?.into(),
        )
    } else {
        (empty(), empty())
    };
    // Q and K scaled by sqrt(scale), in the input type.
    let rt = C::rounder(dt);
    let scale = match ctx.attr_opt_f("scale")? {
        Some(s) => s as f64,
        None => 1.0 / (d as f64).sqrt(),
    };
    let sc = rt(C::fx(scale.sqrt()));
    q.iter_mut().for_each(|x| *x = rt(*x * sc));
    k.iter_mut().for_each(|x| *x = rt(*x * sc));
    let cfg = Attn {
        hq,
        group: hq / hkv,
        hkv,
        sq,
        l,
        d,
        dv,
        past,
        nonpad: nonpad.as_deref(),
        causal: ctx.attr_i("is_causal", 0)? != 0,
        left,
        right,
        softcap: ctx.attr_f("softcap", 0.0)?,
        mode,
        want_qk,
        mask: mask.as_ref(),
        rt,
        rp: round64(pdt),
        seq_round: pdt == DType::BF16,
    };
    let work = b * hq * sq * l * (d + dv);
    let heads: Vec<(Vec<C>, Vec<C>)> = if work >= 1 << 16 {
        (0..b * hq)
            .into_par_iter()
            .map(|bh| cfg.head(bh, &q, &k, &v))
            .collect()
    } else {
        (0..b * hq).map(|bh| cfg.head(bh, &q, &k, &v)).collect()
    };
    let mut y = Vec::with_capacity(b * hq * sq * dv);
    let mut qk = Vec::with_capacity(if want_qk { b * hq * sq * l } else { 0 });
    for (yh, qh) in heads {
        y.extend_from_slice(&yh);
        qk.extend_from_slice(&qh);
    }
    let y = if rank == 3 {
        C::write(dt, &[b, sq, hq * dv], pack_heads(&y, b, hq, sq, dv))?
    } else {
        C::write(dt, &[b, hq, sq, dv], y)?
    };
    result.push(y.into());
    result.push(present_k);
    result.push(present_v);
    if want_qk {
        result.push(C::write(dt, &[b, hq, sq, l], qk)?.into());
    }
    Ok(result)
}

/// FlexAttention (ai.onnx.preview): scores in the softmax precision, optionally rewritten by the
/// `score_mod` and `prob_mod` subgraphs. Computed in f64 with the reference's rounding points.
fn flex_attention(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (qt, kt, vt) = (input(inputs, 0)?, input(inputs, 1)?, input(inputs, 2)?);
    let dt = qt.dtype();
    if !is_float(dt) || kt.dtype() != dt || vt.dtype() != dt {
        unsupported!(
            "FlexAttention of {}, {}, {} (expected one float type)",
            dt,
            kt.dtype(),
            vt.dtype()
        );
    }
    let (qs, ks, vs) = (qt.shape(), kt.shape(), vt.shape());
    if qs.len() != 4 || ks.len() != 4 || vs.len() != 4 {
        bail!("FlexAttention needs rank-4 Q, K, V, got {qs:?}, {ks:?}, {vs:?}");
    }
    let (b, hq, lq, e) = (qs[0], qs[1], qs[2], qs[3]);
    let (hkv, s, ev) = (ks[1], ks[2], vs[3]);
    if ks[0] != b || vs[0] != b || ks[3] != e || vs[1] != hkv || vs[2] != s {
        bail!("K {ks:?} and V {vs:?} do not match Q {qs:?}");
    }
    if hkv == 0 || hq % hkv != 0 {
        bail!("q heads {hq} must be a multiple of kv heads {hkv}");
    }
    let pdt = match ctx.attr_opt_i("softmax_precision")? {
        Some(c) => precision_dtype(c)?,
        None if dt == DType::F64 => DType::F64,
        None => DType::F32,
    };
    let (rt, rp) = (round64(dt), round64(pdt));
    let scale = match ctx.attr_opt_f("scale")? {
        Some(v) => v,
        None => (1.0 / (e as f64).sqrt()) as f32,
    };
    let ss = rt(scale.sqrt() as f64);
    let q: Vec<f64> = qt.to_f64_vec()?.into_iter().map(|x| rt(x * ss)).collect();
    let k: Vec<f64> = kt.to_f64_vec()?.into_iter().map(|x| rt(x * ss)).collect();
    let v: Vec<f64> = vt.to_f64_vec()?.into_iter().map(rp).collect();
    let shape = [b, hq, lq, s];
    ctx.check_alloc(&shape, 8)?;
    let group = hq / hkv;
    let mut scores = vec![0f64; b * hq * lq * s];
    for (bh, blk) in scores.chunks_mut((lq * s).max(1)).enumerate().take(b * hq) {
        let kvh = (bh / hq) * hkv + (bh % hq) / group;
        for i in 0..lq {
            let qi = &q[(bh * lq + i) * e..(bh * lq + i + 1) * e];
            for j in 0..s {
                let kj = &k[(kvh * s + j) * e..(kvh * s + j + 1) * e];
                blk[i * s + j] = rp(rt(dot(qi, kj)));
            }
        }
    }
    let modify = |name: &str, vals: Vec<f64>| -> OpResult<Vec<f64>> {
        let Some(crate::ir::Attr::Graph(g)) = ctx.attr(name) else {
            return Ok(vals);
        };
        let t = f64::write(pdt, &shape, vals)?;
        let out = ctx.run_subgraph(g, vec![t.into()])?;
        match out.into_iter().next() {
            Some(Value::Tensor(t)) if t.shape() == shape => {
                Ok(t.to_f64_vec()?.into_iter().map(rp).collect())
            }
            Some(o) => bail!(
                "{name} must return a tensor of shape {shape:?}, got {}",
                o.describe()
            ),
            None => bail!("{name} returned nothing"),
        }
    };
    let mut probs = modify("score_mod", scores)?;
    for row in probs.chunks_mut(s.max(1)) {
        let mx = row.iter().fold(
            f64::NEG_INFINITY,
            |m, &x| if x > m || x.is_nan() { x } else { m },
        );
        let mut sum = 0f64;
        for x in row.iter_mut() {
            *x = rp(rp(*x - mx).exp());
            sum = if pdt == DType::BF16 {
                rp(sum + *x)
            } else {
                sum + *x
            };
        }
        let sum = rp(sum);
        row.iter_mut().for_each(|x| *x = rp(*x / sum));
    }
    let probs = modify("prob_mod", probs)?;
    let mut y = vec![0f64; b * hq * lq * ev];
    for bh in 0..b * hq {
        let kvh = (bh / hq) * hkv + (bh % hq) / group;
        for i in 0..lq {
            let yi = &mut y[(bh * lq + i) * ev..(bh * lq + i + 1) * ev];
            for j in 0..s {
                let pj = probs[(bh * lq + i) * s + j];
                for (o, &x) in yi
                    .iter_mut()
                    .zip(&v[(kvh * s + j) * ev..(kvh * s + j + 1) * ev])
                {
                    *o += pj * x;
                }
            }
            yi.iter_mut().for_each(|x| *x = rp(*x));
        }
    }
    Ok(vec![f64::write(dt, &[b, hq, lq, ev], y)?.into()])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Attr, Graph, Node};
    use crate::ops::SubgraphRunner;

    struct NoRun;
    impl SubgraphRunner for NoRun {
        fn run_subgraph(&self, _: &Graph, _: Vec<Value>) -> OpResult<Vec<Value>> {
            bail!("no subgraphs here")
        }
    }

    fn rand(seed: &mut u64, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                *seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    fn run(attrs: Vec<(&str, Attr)>, ins: Vec<Option<Tensor>>, n_out: usize) -> Vec<Tensor> {
        let node = Node {
            name: "n".into(),
            op_type: "Attention".into(),
            domain: String::new(),
            opset: 24,
            inputs: vec![],
            outputs: (0..n_out).map(|i| format!("o{i}")).collect(),
            attrs: attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        };
        let ctx = OpCtx {
            node: &node,
            runner: &NoRun,
            max_tensor_bytes: u64::MAX,
        };
        let vals: Vec<Option<Value>> = ins.into_iter().map(|t| t.map(Value::Tensor)).collect();
        let refs: Vec<Option<&Value>> = vals.iter().map(|v| v.as_ref()).collect();
        attention(&ctx, &refs)
            .unwrap()
            .into_iter()
            .map(|v| v.into_tensor().unwrap())
            .collect()
    }

    /// GQA, 3-D packing, a KV cache and causal masking against a direct f64 computation.
    #[test]
    fn gqa_3d_causal_with_past() {
        let (b, hq, hkv, sq, skv, p, d) = (2, 4, 2, 3, 2, 2, 5);
        let mut seed = 11;
        let q = rand(&mut seed, b * sq * hq * d);
        let k = rand(&mut seed, b * skv * hkv * d);
        let v = rand(&mut seed, b * skv * hkv * d);
        let pk = rand(&mut seed, b * hkv * p * d);
        let pv = rand(&mut seed, b * hkv * p * d);
        let t = |s: &[usize], v: &Vec<f32>| Some(Tensor::from_f32(s, v.clone()).unwrap());
        let attrs = vec![
            ("q_num_heads", Attr::Int(4)),
            ("kv_num_heads", Attr::Int(2)),
            ("is_causal", Attr::Int(1)),
        ];
        let ins = vec![
            t(&[b, sq, hq * d], &q),
            t(&[b, skv, hkv * d], &k),
            t(&[b, skv, hkv * d], &v),
            None,
            t(&[b, hkv, p, d], &pk),
            t(&[b, hkv, p, d], &pv),
        ];
        let out = run(attrs, ins, 3);
        let y = out[0].to_f64_vec().unwrap();
        let l = p + skv;
        // Key / value j of (batch, kv head): from the cache, then from the packed input.
        let kv = |src: &[f32], past: &[f32], bi: usize, kh: usize, j: usize, x: usize| -> f64 {
            if j < p {
                past[((bi * hkv + kh) * p + j) * d + x] as f64
            } else {
                src[((bi * skv + j - p) * hkv + kh) * d + x] as f64
            }
        };
        for bi in 0..b {
            for h in 0..hq {
                for i in 0..sq {
                    let kh = h / (hq / hkv);
                    let s: Vec<f64> = (0..l)
                        .map(|j| {
                            if j > i + p {
                                return f64::NEG_INFINITY;
                            }
                            let dq: f64 = (0..d)
                                .map(|x| {
                                    q[((bi * sq + i) * hq + h) * d + x] as f64
                                        * kv(&k, &pk, bi, kh, j, x)
                                })
                                .sum();
                            dq / (d as f64).sqrt()
                        })
                        .collect();
                    let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
                    for x in 0..d {
                        let want: f64 = (0..l)
                            .map(|j| (s[j] - m).exp() / z * kv(&v, &pv, bi, kh, j, x))
                            .sum();
                        let got = y[((bi * sq + i) * hq + h) * d + x];
                        assert!(
                            (got - want).abs() < 1e-5,
                            "b{bi} h{h} i{i} x{x}: {got} vs {want}"
                        );
                    }
                }
            }
        }
        assert_eq!(out[1].shape(), &[b, hkv, l, d]);
        assert_eq!(
            out[1].to_f64_vec().unwrap()[..p * d],
            pk[..p * d].iter().map(|&x| x as f64).collect::<Vec<_>>()[..]
        );
    }

    /// A negative causal offset from nonpad_kv_seqlen empties leading rows: zeros, never NaN; a short
    /// float mask is padded with -inf (the mode-3 output shows it).
    #[test]
    fn empty_rows_and_short_mask() {
        let (sq, l, d) = (3, 4, 2);
        let mut seed = 5;
        let t = |s: &[usize], v: Vec<f32>| Some(Tensor::from_f32(s, v).unwrap());
        let ins = vec![
            t(&[1, 1, sq, d], rand(&mut seed, sq * d)),
            t(&[1, 1, l, d], rand(&mut seed, l * d)),
            t(&[1, 1, l, d], rand(&mut seed, l * d)),
            t(&[sq, 3], vec![0.0; sq * 3]),
            None,
            None,
            Some(Tensor::from_i64(&[1], vec![2]).unwrap()),
        ];
        let attrs = vec![
            ("is_causal", Attr::Int(1)),
            ("qk_matmul_output_mode", Attr::Int(3)),
        ];
        let out = run(attrs, ins, 4);
        let y = out[0].to_f64_vec().unwrap();
        let probs = out[3].to_f64_vec().unwrap();
        // offset = 2 - 3 = -1: row 0 sees nothing, row 1 key 0, row 2 keys 0..1 (3 is padding anyway).
        assert!(y[..d].iter().all(|&x| x == 0.0));
        assert_eq!(&probs[..l], &[0.0; 4]);
        assert_eq!(&probs[l..2 * l], &[1.0, 0.0, 0.0, 0.0]);
        assert!((probs[2 * l] + probs[2 * l + 1] - 1.0).abs() < 1e-6 && probs[2 * l + 2] == 0.0);
        assert!(y.iter().all(|x| x.is_finite()));
    }
}
