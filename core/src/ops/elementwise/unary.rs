//! Unary elementwise math and activations: a child module of `elementwise` (declared in
//! `elementwise.rs` after the dispatch macros), whose `Num` trait and dispatch macros it uses.
use crate::ops::cast::{narrow, widen};
use ndarray::ArrayD;

use super::Num;
use crate::error::OpResult;
use crate::ops::{OpCtx, Registry, broadcast, input, opt_input, single};
use crate::tensor::{Tensor, Value};
use crate::{bail, unsupported};

mod error_function;
/// The erf polynomials the device kernels evaluate too (one source for every engine).
pub use error_function::{ERF_MID_F32, ERF_SMALL};
use error_function::{erf, erf_f32, gelu, gelu_f32};
pub use error_function::{erf as erf_f64, gelu as gelu_f64};

/// Maps a float tensor elementwise: `$x` is an `$F` (f32 for f32/f16/bf16, f64 for f64); f16 and
/// bf16 are computed in f32 and rounded once.
macro_rules! float_map {
    ($t:expr, $F:ident, |$x:ident| $e:expr) => {
        match $t {
            Tensor::F32(a) => {
                type $F = f32;
                Tensor::F32(broadcast::unary(a, |$x: $F| $e))
            }
            Tensor::F64(a) => {
                type $F = f64;
                Tensor::F64(broadcast::unary(a, |$x: $F| $e))
            }
            // Widened and narrowed by slices (`cast::widen`): the same values as element by
            // element, without asking per element which instructions convert them.
            Tensor::F16(a) => {
                type $F = f32;
                let w = crate::ops::cast::widen(a);
                Tensor::F16(crate::ops::cast::narrow(broadcast::unary(&w, |$x: $F| $e)))
            }
            Tensor::BF16(a) => {
                type $F = f32;
                let w = crate::ops::cast::widen(a);
                Tensor::BF16(crate::ops::cast::narrow(broadcast::unary(&w, |$x: $F| $e)))
            }
            other => unsupported!("dtype {} (expected a float type)", other.dtype()),
        }
    };
}

/// [`float_map!`]'s in-place form: `$e` written over the float tensor `$t` (a `&mut Tensor`), each
/// value computed as the kernel computes it; `false` for other dtypes and layouts.
macro_rules! float_map_over {
    ($t:expr, $F:ident, |$x:ident| $e:expr) => {
        match $t {
            Tensor::F32(a) => {
                type $F = f32;
                broadcast::unary_over(a, |$x: $F| $e)
            }
            Tensor::F64(a) => {
                type $F = f64;
                broadcast::unary_over(a, |$x: $F| $e)
            }
            Tensor::F16(a) => {
                type $F = f32;
                half_over(a, |$x: $F| $e)
            }
            Tensor::BF16(a) => {
                type $F = f32;
                half_over(a, |$x: $F| $e)
            }
            _ => false,
        }
    };
}

/// A contiguous half array mapped in place through f32, widened and narrowed by slices
/// (`cast::widen`'s conversions); false, untouched, where it is not contiguous.
fn half_over<H: crate::ops::cast::Half>(
    a: &mut ndarray::ArrayD<H>,
    f: impl Fn(f32) -> f32 + Sync + Send,
) -> bool {
    let Some(s) = a.as_slice_mut() else {
        return false;
    };
    let mut w = vec![0f32; s.len()];
    H::up_slice(s, &mut w);
    let mut wa = ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[w.len()]), w)
        .expect("a 1-D array of its own length");
    if !broadcast::unary_over(&mut wa, f) {
        return false;
    }
    H::down_slice(wa.as_slice().expect("a fresh array is contiguous"), s);
    true
}

/// The in-place form of an op whose f32 values come from a slice kernel: f32 only (other dtypes are
/// left to the kernel).
fn f32_slices_over(t: &mut Tensor, f32s: fn(&[f32], &mut [std::mem::MaybeUninit<f32>])) -> bool {
    match t {
        Tensor::F32(a) => broadcast::unary_slices_over(a, f32s),
        _ => false,
    }
}

/// Exp and Sigmoid: f32 by the slice kernels of `quorum_kernels::activation` on the widest vectors
/// this CPU has (their fused-epilogue forms use the same formulas, so a fused Sigmoid equals this one
/// bit for bit); f16 and bf16 through the same kernels in f32, rounded once; f64 by `f64` alone.
fn through_f32_slices(
    t: &Tensor,
    f32s: fn(&[f32], &mut [std::mem::MaybeUninit<f32>]),
    f64s: fn(f64) -> f64,
) -> OpResult<Vec<Value>> {
    single(match t {
        Tensor::F32(a) => Tensor::F32(broadcast::unary_slices(a, f32s)),
        Tensor::F64(a) => Tensor::F64(broadcast::unary(a, f64s)),
        Tensor::F16(a) => Tensor::F16(narrow(broadcast::unary_slices(&widen(a), f32s))),
        Tensor::BF16(a) => Tensor::BF16(narrow(broadcast::unary_slices(&widen(a), f32s))),
        other => unsupported!("dtype {} (expected a float type)", other.dtype()),
    })
}

fn k_exp(_: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    through_f32_slices(
        input(inputs, 0)?,
        quorum_kernels::activation::exp_slice,
        f64::exp,
    )
}

fn over_exp(_: &OpCtx, t: &mut Tensor, _: usize, _: &[Option<&Value>]) -> OpResult<bool> {
    Ok(f32_slices_over(t, quorum_kernels::activation::exp_slice))
}

/// f32 Sigmoid: `quorum_kernels::Activation::Sigmoid`'s slice kernel.
fn sigmoid_f32(x: &[f32], y: &mut [std::mem::MaybeUninit<f32>]) {
    quorum_kernels::Activation::Sigmoid.map(x, y)
}

fn over_sigmoid(_: &OpCtx, t: &mut Tensor, _: usize, _: &[Option<&Value>]) -> OpResult<bool> {
    Ok(f32_slices_over(t, sigmoid_f32))
}

/// e^-|x|, then e^x/(1+e^x) below 0 so the subnormal tail survives (1/(1+e^-x) is 0 once e^-x
/// overflows): `quorum_kernels::Activation::Sigmoid`'s formula, which f32 runs.
fn k_sigmoid(_: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    through_f32_slices(input(inputs, 0)?, sigmoid_f32, |x| {
        let e = (-x.abs()).exp();
        let r = 1.0 / (1.0 + e);
        if x < 0.0 { e * r } else { r }
    })
}

/// Erf: f32 through the branch-free slice kernel ([`erf_f32`]), other float types per element.
fn k_erf(_: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    match input(inputs, 0)? {
        Tensor::F32(a) => single(Tensor::F32(broadcast::unary_slices(a, erf_f32))),
        t => single(float_map!(t, F, |x| erf(x as f64) as F)),
    }
}

/// Kernels of one float input, and their in-place forms, from one formula: `$ctx`'s attributes
/// read by the statements in braces, then `$e` per value.
macro_rules! float_kernels {
    ($($name:ident, $over:ident, |$ctx:ident| { $($pre:tt)* } => |$x:ident| $e:expr;)*) => {$(
        #[allow(unused_variables)]
        fn $name($ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
            $($pre)*
            single(float_map!(input(inputs, 0)?, F, |$x| $e))
        }
        #[allow(unused_variables)]
        fn $over($ctx: &OpCtx, t: &mut Tensor, _: usize, _: &[Option<&Value>]) -> OpResult<bool> {
            $($pre)*
            Ok(float_map_over!(t, F, |$x| $e))
        }
    )*};
}

float_kernels! {
    k_ceil, over_ceil, |ctx| {} => |x| x.ceil();
    k_floor, over_floor, |ctx| {} => |x| x.floor();
    k_round, over_round, |ctx| {} => |x| x.round_ties_even();
    k_reciprocal, over_reciprocal, |ctx| {} => |x| x.recip();
    k_sqrt, over_sqrt, |ctx| {} => |x| x.sqrt();
    k_log, over_log, |ctx| {} => |x| x.ln();
    k_sin, over_sin, |ctx| {} => |x| x.sin();
    k_cos, over_cos, |ctx| {} => |x| x.cos();
    k_tan, over_tan, |ctx| {} => |x| x.tan();
    k_asin, over_asin, |ctx| {} => |x| x.asin();
    k_acos, over_acos, |ctx| {} => |x| x.acos();
    k_atan, over_atan, |ctx| {} => |x| x.atan();
    k_sinh, over_sinh, |ctx| {} => |x| x.sinh();
    k_cosh, over_cosh, |ctx| {} => |x| x.cosh();
    k_asinh, over_asinh, |ctx| {} => |x| x.asinh();
    k_acosh, over_acosh, |ctx| {} => |x| x.acosh();
    k_atanh, over_atanh, |ctx| {} => |x| x.atanh();
    k_tanh, over_tanh, |ctx| {} => |x| x.tanh();
    k_softplus, over_softplus, |ctx| {} =>
        |x| if x > 0.0 { x + (-x).exp().ln_1p() } else { x.exp().ln_1p() };
    k_softsign, over_softsign, |ctx| {} => |x| x / (1.0 + x.abs());
    k_mish, over_mish, |ctx| {} =>
        |x| x * (if x > 0.0 { x + (-x).exp().ln_1p() } else { x.exp().ln_1p() }).tanh();
    k_hardswish, over_hardswish, |ctx| {} => |x| x * (x / 6.0 + 0.5).clamp(0.0, 1.0);
    k_leaky_relu, over_leaky_relu, |ctx| { let alpha = ctx.attr_f("alpha", 0.01)?; } =>
        |x| if x < 0.0 { x * alpha as F } else { x };
    k_thresholded_relu, over_thresholded_relu, |ctx| { let alpha = ctx.attr_f("alpha", 1.0)?; } =>
        |x| if x > alpha as F { x } else { 0.0 };
    k_elu, over_elu, |ctx| { let alpha = ctx.attr_f("alpha", 1.0)?; } =>
        |x| if x < 0.0 { alpha as F * x.exp_m1() } else { x };
    k_selu, over_selu, |ctx| {
        let alpha = ctx.attr_f("alpha", crate::ops::unary_op::SELU_ALPHA)?;
        let gamma = ctx.attr_f("gamma", crate::ops::unary_op::SELU_GAMMA)?;
    } => |x| gamma as F * if x > 0.0 { x } else { alpha as F * x.exp_m1() };
    k_celu, over_celu, |ctx| { let alpha = ctx.attr_f("alpha", 1.0)?; } =>
        |x| if x > 0.0 { x } else { alpha as F * (x / alpha as F).exp_m1() };
    k_hard_sigmoid, over_hard_sigmoid, |ctx| {
        let (alpha, beta) = (ctx.attr_f("alpha", 0.2)?, ctx.attr_f("beta", 0.5)?);
    } => |x| (alpha as F * x + beta as F).clamp(0.0, 1.0);
}

fn over_erf(_: &OpCtx, t: &mut Tensor, _: usize, _: &[Option<&Value>]) -> OpResult<bool> {
    Ok(f32_slices_over(t, erf_f32))
}

fn k_abs(_: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    single(num_one!(input(inputs, 0)?, x => broadcast::unary(x, Num::n_abs)))
}

fn k_neg(_: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    single(num_one!(input(inputs, 0)?, x => broadcast::unary(x, Num::n_neg)))
}

fn k_sign(_: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    single(num_one!(input(inputs, 0)?, x => broadcast::unary(x, Num::n_sign)))
}

fn over_abs(_: &OpCtx, t: &mut Tensor, _: usize, _: &[Option<&Value>]) -> OpResult<bool> {
    Ok(num_over!(t, x => broadcast::unary_over(x, Num::n_abs)))
}

fn over_neg(_: &OpCtx, t: &mut Tensor, _: usize, _: &[Option<&Value>]) -> OpResult<bool> {
    Ok(num_over!(t, x => broadcast::unary_over(x, Num::n_neg)))
}

fn relu_of<T: Num>(v: T) -> T {
    if v < T::default() { T::default() } else { v }
}

fn k_relu(_: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    single(num_one!(input(inputs, 0)?, x => broadcast::unary(x, relu_of)))
}

fn over_relu(_: &OpCtx, t: &mut Tensor, _: usize, _: &[Option<&Value>]) -> OpResult<bool> {
    Ok(num_over!(t, x => broadcast::unary_over(x, relu_of)))
}

fn k_shrink(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (bias, lambd) = (
        ctx.attr_f("bias", 0.0)? as f64,
        ctx.attr_f("lambd", 0.5)? as f64,
    );
    fn go<T: Num>(x: &ArrayD<T>, bias: f64, lambd: f64) -> ArrayD<T> {
        broadcast::unary(x, |v: T| match v.to_f64() {
            f if f < -lambd => T::from_f64(f + bias),
            f if f > lambd => T::from_f64(f - bias),
            _ => T::default(),
        })
    }
    single(num_one!(input(inputs, 0)?, x => go(x, bias, lambd)))
}

fn k_gelu(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let approximate = ctx.attr_s("approximate", "none")?;
    if let ("none", Tensor::F32(a)) = (approximate.as_str(), x) {
        // f32 through the branch-free slice kernel ([`gelu_f32`]).
        return single(Tensor::F32(broadcast::unary_slices(a, gelu_f32)));
    }
    single(match approximate.as_str() {
        // Other float types in f64, in forms without cancellation for negative x: 1 + erf(z) = erfc(-z) (see
        // `gelu`), and 1 + tanh(u) = 2 / (1 + e^(-2u)).
        "none" => float_map!(x, F, |x| gelu(x as f64) as F),
        "tanh" => float_map!(x, F, |x| {
            let x = x as f64;
            let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
            (x / (1.0 + (-2.0 * u).exp())) as F
        }),
        a => bail!("Gelu approximate must be 'none' or 'tanh', got '{a}'"),
    })
}

/// f32 Gelu without the tanh approximation, in place (the kernel's slice kernel); other forms are
/// left to the kernel.
fn over_gelu(ctx: &OpCtx, t: &mut Tensor, _: usize, _: &[Option<&Value>]) -> OpResult<bool> {
    Ok(ctx.attr_s("approximate", "none")? == "none" && f32_slices_over(t, gelu_f32))
}

/// Clip with its bounds, one value at a time.
fn clip_of<T: Num>(lo: Option<T>, hi: Option<T>) -> impl Fn(T) -> T + Copy + Send + Sync {
    move |v: T| {
        let v = match lo {
            Some(l) if v < l => l,
            _ => v,
        };
        match hi {
            Some(h) if v > h => h,
            _ => v,
        }
    }
}

/// Clip's bounds (opset 11 on: optional one-element inputs of the input's dtype).
fn clip_bounds<T: Num>(
    lo: Option<&Tensor>,
    hi: Option<&Tensor>,
) -> OpResult<(Option<T>, Option<T>)> {
    let bound = |t: Option<&Tensor>| -> OpResult<Option<T>> {
        let Some(t) = t else { return Ok(None) };
        match T::arr(t) {
            Some(a) if a.len() == 1 => Ok(a.iter().next().copied()),
            Some(a) if a.is_empty() => Ok(None),
            _ => bail!(
                "Clip bound must be a one-element tensor of the input's dtype, got {}",
                t.describe()
            ),
        }
    };
    Ok((bound(lo)?, bound(hi)?))
}

fn clip<T: Num>(x: &ArrayD<T>, lo: Option<&Tensor>, hi: Option<&Tensor>) -> OpResult<ArrayD<T>> {
    let (lo, hi) = clip_bounds(lo, hi)?;
    Ok(broadcast::unary(x, clip_of(lo, hi)))
}

fn k_clip(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    if ctx.opset() < 11 {
        let (lo, hi) = (ctx.attr_f("min", f32::MIN)?, ctx.attr_f("max", f32::MAX)?);
        return single(float_map!(x, F, |v| if v < lo as F {
            lo as F
        } else if v > hi as F {
            hi as F
        } else {
            v
        }));
    }
    let (lo, hi) = (opt_input(inputs, 1)?, opt_input(inputs, 2)?);
    single(num_one!(x, a => clip(a, lo, hi)?))
}

/// Clip in place from opset 11 (bounds as inputs); the attribute form is left to the kernel.
fn over_clip(ctx: &OpCtx, t: &mut Tensor, _: usize, inputs: &[Option<&Value>]) -> OpResult<bool> {
    if ctx.opset() < 11 {
        return Ok(false);
    }
    let (lo, hi) = (opt_input(inputs, 1)?, opt_input(inputs, 2)?);
    Ok(num_over!(t, a => {
        let (lo, hi) = clip_bounds(lo, hi)?;
        broadcast::unary_over(a, clip_of(lo, hi))
    }))
}

/// Maps a float tensor to booleans through `$f` applied to each value as f64.
macro_rules! float_test {
    ($t:expr, $f:expr) => {
        match $t {
            Tensor::F32(a) => broadcast::unary(a, |v| $f(v as f64)),
            Tensor::F64(a) => broadcast::unary(a, $f),
            Tensor::F16(a) => broadcast::unary(a, |v| $f(v.to_f64())),
            Tensor::BF16(a) => broadcast::unary(a, |v| $f(v.to_f64())),
            other => unsupported!("dtype {} (expected a float type)", other.dtype()),
        }
    };
}

fn k_isnan(_: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    single(Tensor::Bool(
        float_test!(input(inputs, 0)?, |v: f64| v.is_nan())
    ))
}

fn k_isinf(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let pos = ctx.attr_i("detect_positive", 1)? != 0;
    let neg = ctx.attr_i("detect_negative", 1)? != 0;
    let f = |v: f64| v.is_infinite() && if v > 0.0 { pos } else { neg };
    single(Tensor::Bool(float_test!(input(inputs, 0)?, f)))
}

pub(super) fn register(r: &mut Registry) {
    r.add("", "Abs", k_abs);
    r.add("", "Neg", k_neg);
    r.add("", "Sign", k_sign);
    r.add("", "Relu", k_relu);
    r.add("", "Clip", k_clip);
    r.add("", "IsNaN", k_isnan);
    r.add("", "IsInf", k_isinf);
    r.add("", "Ceil", k_ceil);
    r.add("", "Floor", k_floor);
    r.add("", "Round", k_round);
    r.add("", "Reciprocal", k_reciprocal);
    r.add("", "Sqrt", k_sqrt);
    r.add("", "Exp", k_exp);
    r.add("", "Log", k_log);
    r.add("", "Erf", k_erf);
    r.add("", "Sin", k_sin);
    r.add("", "Cos", k_cos);
    r.add("", "Tan", k_tan);
    r.add("", "Asin", k_asin);
    r.add("", "Acos", k_acos);
    r.add("", "Atan", k_atan);
    r.add("", "Sinh", k_sinh);
    r.add("", "Cosh", k_cosh);
    r.add("", "Asinh", k_asinh);
    r.add("", "Acosh", k_acosh);
    r.add("", "Atanh", k_atanh);
    r.add("", "Tanh", k_tanh);
    r.add("", "Sigmoid", k_sigmoid);
    r.add("", "Softplus", k_softplus);
    r.add("", "Softsign", k_softsign);
    r.add("", "Mish", k_mish);
    r.add("", "HardSwish", k_hardswish);
    r.add("", "HardSigmoid", k_hard_sigmoid);
    r.add("", "LeakyRelu", k_leaky_relu);
    r.add("", "ThresholdedRelu", k_thresholded_relu);
    r.add("", "Elu", k_elu);
    r.add("", "Selu", k_selu);
    r.add("", "Celu", k_celu);
    r.add("", "Shrink", k_shrink);
    r.add("", "Gelu", k_gelu);
    let in_place: [(&'static str, crate::ops::InPlace); 36] = [
        ("Abs", over_abs),
        ("Neg", over_neg),
        ("Relu", over_relu),
        ("Clip", over_clip),
        ("Ceil", over_ceil),
        ("Floor", over_floor),
        ("Round", over_round),
        ("Reciprocal", over_reciprocal),
        ("Sqrt", over_sqrt),
        ("Exp", over_exp),
        ("Log", over_log),
        ("Erf", over_erf),
        ("Sin", over_sin),
        ("Cos", over_cos),
        ("Tan", over_tan),
        ("Asin", over_asin),
        ("Acos", over_acos),
        ("Atan", over_atan),
        ("Sinh", over_sinh),
        ("Cosh", over_cosh),
        ("Asinh", over_asinh),
        ("Acosh", over_acosh),
        ("Atanh", over_atanh),
        ("Tanh", over_tanh),
        ("Sigmoid", over_sigmoid),
        ("Softplus", over_softplus),
        ("Softsign", over_softsign),
        ("Mish", over_mish),
        ("HardSwish", over_hardswish),
        ("HardSigmoid", over_hard_sigmoid),
        ("LeakyRelu", over_leaky_relu),
        ("ThresholdedRelu", over_thresholded_relu),
        ("Elu", over_elu),
        ("Selu", over_selu),
        ("Celu", over_celu),
        ("Gelu", over_gelu),
    ];
    for (op, f) in in_place {
        r.in_place("", op, f);
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::Rng;
    use super::*;

    /// The Exp kernel's f32 path (the vector slice kernel) is within 2 ulps of e^x, subnormal
    /// results included, and takes NaN and the infinities where they go.
    #[test]
    fn exp_within_two_ulp() {
        let mut rng = Rng(3);
        let mut xs: Vec<f32> = (0..100_000)
            .map(|_| ((rng.next() - 0.5) * 210.0) as f32)
            .collect();
        xs.extend([f32::NAN, f32::NEG_INFINITY, f32::INFINITY]);
        // k_exp's f32 path.
        let x = ArrayD::from_shape_vec(ndarray::IxDyn(&[xs.len()]), xs.clone()).unwrap();
        let y = broadcast::unary_slices(&x, quorum_kernels::activation::exp_slice);
        let y = y.as_slice().unwrap();
        for (&x, &got) in xs.iter().zip(y).take(100_000) {
            let want = (x as f64).exp();
            let got = got as f64;
            let ulp = (want as f32).abs().max(f32::from_bits(1)) as f64 * f32::EPSILON as f64;
            let ulp = if want < f32::MIN_POSITIVE as f64 {
                f32::from_bits(1) as f64
            } else {
                ulp
            };
            assert!(
                (got - want).abs() <= 2.0 * ulp || want > f32::MAX as f64 && got.is_infinite(),
                "exp({x}) = {got}, want {want}"
            );
        }
        assert!(y[100_000].is_nan());
        assert_eq!(y[100_001], 0.0);
        assert_eq!(y[100_002], f32::INFINITY);
        assert_eq!(2.5f32.round_ties_even(), 2.0);
    }
}
