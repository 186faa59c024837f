//! Unary and binary elementwise math, comparisons, logic, bitwise ops and activations.
//!
//! Integer arithmetic wraps on overflow and integer division truncates toward zero (C semantics, as the
//! ONNX reference does); f16/bf16 math runs in f32 and rounds once.
use std::borrow::Cow;

use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};
use rayon::prelude::*;

use super::broadcast::{self, PAR_THRESHOLD, broadcast_shapes};
use super::{OpCtx, Registry, input, opt_input, single};
use crate::error::{OpError, OpResult};
use crate::tensor::{Tensor, Value};
use crate::{bail, unsupported};

/// Element types with the arithmetic the numeric kernels share (also used by `variadic`).
pub(super) trait Num: Copy + PartialOrd + Default + Send + Sync + 'static {
    fn arr(t: &Tensor) -> Option<&ArrayD<Self>>;
    fn n_add(self, o: Self) -> Self;
    fn n_sub(self, o: Self) -> Self;
    fn n_mul(self, o: Self) -> Self;
    /// Division; integers truncate toward zero (a zero divisor gives 0: callers refuse it first).
    fn n_div(self, o: Self) -> Self;
    /// Remainder with the sign of the divisor (numpy `mod`).
    fn n_mod(self, o: Self) -> Self;
    /// Remainder with the sign of the dividend (C `fmod`).
    fn n_fmod(self, o: Self) -> Self;
    fn n_neg(self) -> Self;
    fn n_abs(self) -> Self;
    fn n_sign(self) -> Self;
    /// Maximum and minimum, propagating NaN.
    fn n_max(self, o: Self) -> Self;
    fn n_min(self, o: Self) -> Self;
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
    fn is_zero(self) -> bool;
}

macro_rules! int_num {
    ($($t:ty => $v:ident),*) => {$(
        #[allow(unused_comparisons)]
        impl Num for $t {
            fn arr(t: &Tensor) -> Option<&ArrayD<Self>> { if let Tensor::$v(a) = t { Some(a) } else { None } }
            fn n_add(self, o: Self) -> Self { self.wrapping_add(o) }
            fn n_sub(self, o: Self) -> Self { self.wrapping_sub(o) }
            fn n_mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            fn n_div(self, o: Self) -> Self { if o == 0 { 0 } else { self.wrapping_div(o) } }
            fn n_mod(self, o: Self) -> Self {
                let r = self.n_fmod(o);
                if r != 0 && ((r < 0) != (o < 0)) { r.wrapping_add(o) } else { r }
            }
            fn n_fmod(self, o: Self) -> Self { if o == 0 { 0 } else { self.wrapping_rem(o) } }
            fn n_neg(self) -> Self { (0 as $t).wrapping_sub(self) }
            fn n_abs(self) -> Self { if self < 0 { self.n_neg() } else { self } }
            fn n_sign(self) -> Self { if self > 0 { 1 } else if self < 0 { (0 as $t).wrapping_sub(1) } else { 0 } }
            fn n_max(self, o: Self) -> Self { if o > self { o } else { self } }
            fn n_min(self, o: Self) -> Self { if o < self { o } else { self } }
            fn to_f64(self) -> f64 { self as f64 }
            fn from_f64(v: f64) -> Self { v as $t }
            fn is_zero(self) -> bool { self == 0 }
        }
    )*};
}
int_num!(i8 => I8, i16 => I16, i32 => I32, i64 => I64, u8 => U8, u16 => U16, u32 => U32, u64 => U64);

macro_rules! float_num {
    ($($t:ty => $v:ident),*) => {$(
        impl Num for $t {
            fn arr(t: &Tensor) -> Option<&ArrayD<Self>> { if let Tensor::$v(a) = t { Some(a) } else { None } }
            fn n_add(self, o: Self) -> Self { self + o }
            fn n_sub(self, o: Self) -> Self { self - o }
            fn n_mul(self, o: Self) -> Self { self * o }
            fn n_div(self, o: Self) -> Self { self / o }
            fn n_mod(self, o: Self) -> Self {
                let r = self % o;
                if r == 0.0 { (0.0 as $t).copysign(o) } else if (r < 0.0) != (o < 0.0) { r + o } else { r }
            }
            fn n_fmod(self, o: Self) -> Self { self % o }
            fn n_neg(self) -> Self { -self }
            fn n_abs(self) -> Self { self.abs() }
            fn n_sign(self) -> Self { if self > 0.0 { 1.0 } else if self < 0.0 { -1.0 } else { self } }
            fn n_max(self, o: Self) -> Self { if o > self || o.is_nan() { o } else { self } }
            fn n_min(self, o: Self) -> Self { if o < self || o.is_nan() { o } else { self } }
            fn to_f64(self) -> f64 { self as f64 }
            fn from_f64(v: f64) -> Self { v as $t }
            fn is_zero(self) -> bool { self == 0.0 }
        }
    )*};
}
float_num!(f32 => F32, f64 => F64);

macro_rules! half_num {
    ($($t:ty => $v:ident),*) => {$(
        impl Num for $t {
            fn arr(t: &Tensor) -> Option<&ArrayD<Self>> { if let Tensor::$v(a) = t { Some(a) } else { None } }
            fn n_add(self, o: Self) -> Self { Self::from_f32(self.to_f32() + o.to_f32()) }
            fn n_sub(self, o: Self) -> Self { Self::from_f32(self.to_f32() - o.to_f32()) }
            fn n_mul(self, o: Self) -> Self { Self::from_f32(self.to_f32() * o.to_f32()) }
            fn n_div(self, o: Self) -> Self { Self::from_f32(self.to_f32() / o.to_f32()) }
            fn n_mod(self, o: Self) -> Self { Self::from_f32(self.to_f32().n_mod(o.to_f32())) }
            fn n_fmod(self, o: Self) -> Self { Self::from_f32(self.to_f32() % o.to_f32()) }
            fn n_neg(self) -> Self { -self }
            fn n_abs(self) -> Self { Self::from_f32(self.to_f32().abs()) }
            fn n_sign(self) -> Self { Self::from_f32(self.to_f32().n_sign()) }
            fn n_max(self, o: Self) -> Self { if o > self || o.is_nan() { o } else { self } }
            fn n_min(self, o: Self) -> Self { if o < self || o.is_nan() { o } else { self } }
            fn to_f64(self) -> f64 { self.into() }
            fn from_f64(v: f64) -> Self { Self::from_f64(v) }
            fn is_zero(self) -> bool { self.to_f32() == 0.0 }
        }
    )*};
}
half_num!(f16 => F16, bf16 => BF16);

fn dtype_error(a: &Tensor, b: &Tensor) -> OpError {
    if a.dtype() == b.dtype() {
        OpError::Unsupported(format!("dtype {}", a.dtype()))
    } else {
        OpError::Invalid(format!("operands have different dtypes: {} and {}", a.dtype(), b.dtype()))
    }
}

/// Dispatches a pair of tensors of one listed variant to `$e` (with `$x`, `$y` their arrays), wrapping
/// the resulting array back into a tensor.
macro_rules! pair {
    ($a:expr, $b:expr, $x:ident, $y:ident => $e:expr; $($v:ident),*) => {
        match ($a, $b) {
            $(($crate::tensor::Tensor::$v($x), $crate::tensor::Tensor::$v($y)) => $crate::tensor::Tensor::from($e),)*
            (p, q) => return Err($crate::ops::elementwise::dtype_error(p, q)),
        }
    };
}
macro_rules! num_pair {
    ($a:expr, $b:expr, $x:ident, $y:ident => $e:expr) => {
        pair!($a, $b, $x, $y => $e; F32, F64, F16, BF16, I8, I16, I32, I64, U8, U16, U32, U64)
    };
}
macro_rules! int_pair {
    ($a:expr, $b:expr, $x:ident, $y:ident => $e:expr) => {
        pair!($a, $b, $x, $y => $e; I8, I16, I32, I64, U8, U16, U32, U64)
    };
}
/// Like `pair!` for one tensor.
macro_rules! one {
    ($t:expr, $x:ident => $e:expr; $($v:ident),*) => {
        match $t {
            $($crate::tensor::Tensor::$v($x) => $crate::tensor::Tensor::from($e),)*
            other => $crate::unsupported!("dtype {}", other.dtype()),
        }
    };
}
macro_rules! num_one {
    ($t:expr, $x:ident => $e:expr) => {
        one!($t, $x => $e; F32, F64, F16, BF16, I8, I16, I32, I64, U8, U16, U32, U64)
    };
}
macro_rules! int_one {
    ($t:expr, $x:ident => $e:expr) => {
        one!($t, $x => $e; I8, I16, I32, I64, U8, U16, U32, U64)
    };
}

/// `f(a, b)` with numpy broadcasting. Besides what [`broadcast::binary`] does fast, handles a full
/// contiguous operand against a smaller one that varies along one run of axes (a bias over trailing
/// axes, a per-channel scale, a scalar) with plain slice loops, in parallel when large.
pub(super) fn bin<A, B, O, F>(a: &ArrayD<A>, b: &ArrayD<B>, f: F) -> OpResult<ArrayD<O>>
where
    A: Clone + Send + Sync,
    B: Clone + Send + Sync,
    O: Clone + Send + Sync + Default,
    F: Fn(A, B) -> O + Sync + Send,
{
    if a.shape() != b.shape() {
        let shape = broadcast_shapes(&[a.shape(), b.shape()])?;
        let out = if a.shape() == shape.as_slice() {
            a.as_slice().zip(b.as_slice()).and_then(|(x, y)| runs(x, y, b.shape(), &shape, |p, q| f(p, q)))
        } else if b.shape() == shape.as_slice() {
            b.as_slice().zip(a.as_slice()).and_then(|(y, x)| runs(y, x, a.shape(), &shape, |q, p| f(p, q)))
        } else {
            None
        };
        if let Some(v) = out {
            return Ok(ArrayD::from_shape_vec(IxDyn(&shape), v)?);
        }
    }
    broadcast::binary(a, b, f)
}

/// `full` has `shape`; `small`, of shape `sshape`, is constant except along one run of axes where it
/// matches `shape`. Returns `None` for other patterns.
fn runs<A, B, O, F>(full: &[A], small: &[B], sshape: &[usize], shape: &[usize], f: F) -> Option<Vec<O>>
where
    A: Clone + Send + Sync,
    B: Clone + Send + Sync,
    O: Clone + Send + Sync + Default,
    F: Fn(A, B) -> O + Sync + Send,
{
    let pad = shape.len() - sshape.len();
    let dim = |i: usize| if i < pad { 1 } else { sshape[i - pad] };
    let start = (0..shape.len()).find(|&i| dim(i) != 1).unwrap_or(shape.len());
    let end = (start..shape.len()).find(|&i| dim(i) != shape[i]).unwrap_or(shape.len());
    if (end..shape.len()).any(|i| dim(i) != 1) || small.is_empty() {
        return None;
    }
    let inner: usize = shape[end..].iter().product();
    let period = small.len() * inner;
    if period == 0 {
        return None;
    }
    let block = period * (PAR_THRESHOLD / 4 / period).max(1);
    let mut out = vec![O::default(); full.len()];
    let work = |(o, x): (&mut [O], &[A])| {
        if inner == 1 {
            for (o, (x, y)) in o.iter_mut().zip(x.iter().zip(small.iter().cycle())) {
                *o = f(x.clone(), y.clone());
            }
        } else {
            for ((o, x), y) in o.chunks_mut(inner).zip(x.chunks(inner)).zip(small.iter().cycle()) {
                for (o, x) in o.iter_mut().zip(x) {
                    *o = f(x.clone(), y.clone());
                }
            }
        }
    };
    if full.len() >= PAR_THRESHOLD {
        out.par_chunks_mut(block).zip(full.par_chunks(block)).for_each(work);
    } else {
        out.chunks_mut(block).zip(full.chunks(block)).for_each(work);
    }
    Some(out)
}

/// Before opset 7, Add/Sub/Mul/Div (and the logic and comparison ops) broadcast only with
/// `broadcast=1`, the second operand matching a run of the first's axes starting at `axis` (the
/// trailing axes when absent). Reshapes `b` so numpy broadcasting gives that result.
fn legacy_b<'t>(ctx: &OpCtx, a: &Tensor, b: &'t Tensor) -> OpResult<Cow<'t, Tensor>> {
    if ctx.opset() >= 7 || ctx.attr_i("broadcast", 0)? == 0 || a.shape() == b.shape() || b.len() == 1 {
        return Ok(Cow::Borrowed(b));
    }
    let (ra, rb) = (a.rank(), b.rank());
    let axis = match ctx.attr_opt_i("axis")? {
        Some(ax) if ax < 0 => ax + ra as i64,
        Some(ax) => ax,
        None => ra as i64 - rb as i64,
    };
    let ok = axis >= 0 && (axis as usize) + rb <= ra && a.shape()[axis as usize..axis as usize + rb] == *b.shape();
    if !ok {
        bail!("legacy broadcast of {:?} onto {:?} at axis {axis} does not fit", b.shape(), a.shape());
    }
    let mut shape = b.shape().to_vec();
    shape.resize(ra - axis as usize, 1);
    Ok(Cow::Owned(b.reshape(&shape)?))
}

#[derive(Clone, Copy)]
pub(super) enum Ar {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    FMod,
    Max,
    Min,
}

pub(super) fn arith<T: Num>(a: &ArrayD<T>, b: &ArrayD<T>, op: Ar) -> OpResult<ArrayD<T>> {
    match op {
        Ar::Add => bin(a, b, T::n_add),
        Ar::Sub => bin(a, b, T::n_sub),
        Ar::Mul => bin(a, b, T::n_mul),
        Ar::Div => bin(a, b, T::n_div),
        Ar::Mod => bin(a, b, T::n_mod),
        Ar::FMod => bin(a, b, T::n_fmod),
        Ar::Max => bin(a, b, T::n_max),
        Ar::Min => bin(a, b, T::n_min),
    }
}

/// `a op b` for two numeric tensors of one dtype; an integer zero divisor is an error.
pub(super) fn arith_t(a: &Tensor, b: &Tensor, op: Ar) -> OpResult<Tensor> {
    if matches!(op, Ar::Div | Ar::Mod | Ar::FMod) && b.dtype().is_int() {
        fn zero<T: Num>(a: &ArrayD<T>) -> bool {
            a.iter().any(|v| v.is_zero())
        }
        let any = match b {
            Tensor::I8(x) => zero(x),
            Tensor::I16(x) => zero(x),
            Tensor::I32(x) => zero(x),
            Tensor::I64(x) => zero(x),
            Tensor::U8(x) => zero(x),
            Tensor::U16(x) => zero(x),
            Tensor::U32(x) => zero(x),
            Tensor::U64(x) => zero(x),
            _ => false,
        };
        if any {
            bail!("integer division by zero");
        }
    }
    Ok(num_pair!(a, b, x, y => arith(x, y, op)?))
}

fn k_arith(ctx: &OpCtx, inputs: &[Option<&Value>], op: Ar) -> OpResult<Vec<Value>> {
    let a = input(inputs, 0)?;
    let b = legacy_b(ctx, a, input(inputs, 1)?)?;
    single(arith_t(a, &b, op)?)
}

fn k_mod(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    k_arith(ctx, inputs, if ctx.attr_i("fmod", 0)? != 0 { Ar::FMod } else { Ar::Mod })
}

/// Integer power by squaring, wrapping; negative exponents truncate like `1 / x^n`.
fn ipow<T: Num>(x: T, e: i64) -> T {
    let one = T::from_f64(1.0);
    if e < 0 {
        let v = x.to_f64();
        return if v == 1.0 || (v == -1.0 && e % 2 == 0) {
            one
        } else if v == -1.0 {
            x
        } else {
            T::default()
        };
    }
    let (mut acc, mut base, mut e) = (one, x, e as u64);
    while e > 0 {
        if e & 1 == 1 {
            acc = acc.n_mul(base);
        }
        base = base.n_mul(base);
        e >>= 1;
    }
    acc
}

fn pow_scalar<F: num_traits::Float + Send + Sync>(x: &ArrayD<F>, e: F) -> ArrayD<F> {
    let c = |v: f64| F::from(v).unwrap_or_else(F::nan);
    if e == c(2.0) {
        broadcast::unary(x, |v| v * v)
    } else if e == c(1.0) {
        x.clone()
    } else if e == c(0.5) {
        broadcast::unary(x, |v| v.sqrt())
    } else if e == c(3.0) {
        broadcast::unary(x, |v| v * v * v)
    } else {
        broadcast::unary(x, |v| v.powf(e))
    }
}

/// Pow: the output has the base's dtype; any numeric exponent dtype.
fn k_pow(_: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (a, b) = (input(inputs, 0)?, input(inputs, 1)?);
    let scalar = b.len() == 1 && b.rank() <= a.rank();
    let out = match (a, b) {
        (Tensor::F32(x), Tensor::F32(y)) if scalar => Tensor::F32(pow_scalar(x, y.iter().copied().sum())),
        (Tensor::F64(x), Tensor::F64(y)) if scalar => Tensor::F64(pow_scalar(x, y.iter().copied().sum())),
        (Tensor::F32(x), Tensor::F32(y)) => Tensor::F32(bin(x, y, f32::powf)?),
        (Tensor::F64(x), Tensor::F64(y)) => Tensor::F64(bin(x, y, f64::powf)?),
        _ if a.dtype().is_int() && b.dtype().is_int() => {
            let e = ArrayD::from_shape_vec(IxDyn(b.shape()), b.to_i64_vec()?)?;
            int_one!(a, x => bin(x, &e, ipow)?)
        }
        _ => {
            let e = ArrayD::from_shape_vec(IxDyn(b.shape()), b.to_f64_vec()?)?;
            fn go<T: Num>(x: &ArrayD<T>, e: &ArrayD<f64>) -> OpResult<ArrayD<T>> {
                bin(x, e, |p: T, q: f64| T::from_f64(p.to_f64().powf(q)))
            }
            num_one!(a, x => go(x, &e)?)
        }
    };
    single(out)
}

/// Bit operations of the integer types.
trait Bits: Num {
    fn and(self, o: Self) -> Self;
    fn or(self, o: Self) -> Self;
    fn xor(self, o: Self) -> Self;
    fn not(self) -> Self;
    /// Shifts by `y`; out-of-range amounts give what the sign fill alone gives (0 or -1).
    fn shift(self, y: Self, left: bool) -> Self;
}

macro_rules! bits {
    ($($t:ty),*) => {$(
        #[allow(unused_comparisons)]
        impl Bits for $t {
            fn and(self, o: Self) -> Self { self & o }
            fn or(self, o: Self) -> Self { self | o }
            fn xor(self, o: Self) -> Self { self ^ o }
            fn not(self) -> Self { !self }
            fn shift(self, y: Self, left: bool) -> Self {
                let n = y as i128;
                if n < 0 || n >= <$t>::BITS as i128 {
                    if !left && self < 0 { !0 } else { 0 }
                } else if left {
                    self.wrapping_shl(n as u32)
                } else {
                    self >> n as u32
                }
            }
        }
    )*};
}
bits!(i8, i16, i32, i64, u8, u16, u32, u64);

#[derive(Clone, Copy)]
enum Bw {
    And,
    Or,
    Xor,
    Shl,
    Shr,
}

fn bitwise<T: Bits>(a: &ArrayD<T>, b: &ArrayD<T>, op: Bw) -> OpResult<ArrayD<T>> {
    match op {
        Bw::And => bin(a, b, T::and),
        Bw::Or => bin(a, b, T::or),
        Bw::Xor => bin(a, b, T::xor),
        Bw::Shl => bin(a, b, |x, y| x.shift(y, true)),
        Bw::Shr => bin(a, b, |x, y| x.shift(y, false)),
    }
}

fn k_bitwise(inputs: &[Option<&Value>], op: Bw) -> OpResult<Vec<Value>> {
    let (a, b) = (input(inputs, 0)?, input(inputs, 1)?);
    single(int_pair!(a, b, x, y => bitwise(x, y, op)?))
}

fn k_bitshift(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    match ctx.attr_s("direction", "")?.as_str() {
        "LEFT" => k_bitwise(inputs, Bw::Shl),
        "RIGHT" => k_bitwise(inputs, Bw::Shr),
        d => bail!("BitShift direction must be LEFT or RIGHT, got '{d}'"),
    }
}

fn k_bitwise_not(_: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    single(int_one!(input(inputs, 0)?, x => broadcast::unary(x, Bits::not)))
}

#[derive(Clone, Copy)]
enum Cmp {
    Eq,
    Lt,
    Le,
    Gt,
    Ge,
}

fn compare<T: PartialOrd + Clone + Send + Sync>(a: &ArrayD<T>, b: &ArrayD<T>, op: Cmp) -> OpResult<ArrayD<bool>> {
    match op {
        Cmp::Eq => bin(a, b, |x, y| x == y),
        Cmp::Lt => bin(a, b, |x, y| x < y),
        Cmp::Le => bin(a, b, |x, y| x <= y),
        Cmp::Gt => bin(a, b, |x, y| x > y),
        Cmp::Ge => bin(a, b, |x, y| x >= y),
    }
}

fn k_compare(ctx: &OpCtx, inputs: &[Option<&Value>], op: Cmp) -> OpResult<Vec<Value>> {
    let a = input(inputs, 0)?;
    let b = legacy_b(ctx, a, input(inputs, 1)?)?;
    single(pair!(a, b.as_ref(), x, y => compare(x, y, op)?;
        F32, F64, F16, BF16, I8, I16, I32, I64, U8, U16, U32, U64, Bool, Str))
}

fn k_logic(ctx: &OpCtx, inputs: &[Option<&Value>], f: fn(bool, bool) -> bool) -> OpResult<Vec<Value>> {
    let a = input(inputs, 0)?;
    let b = legacy_b(ctx, a, input(inputs, 1)?)?;
    single(pair!(a, b.as_ref(), x, y => bin(x, y, f)?; Bool))
}

fn k_not(_: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    single(one!(input(inputs, 0)?, x => broadcast::unary(x, |v: bool| !v); Bool))
}

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
            Tensor::F16(a) => {
                type $F = f32;
                Tensor::F16(broadcast::unary(a, |h: f16| {
                    let $x: $F = h.to_f32();
                    f16::from_f32($e)
                }))
            }
            Tensor::BF16(a) => {
                type $F = f32;
                Tensor::BF16(broadcast::unary(a, |h: bf16| {
                    let $x: $F = h.to_f32();
                    bf16::from_f32($e)
                }))
            }
            other => unsupported!("dtype {} (expected a float type)", other.dtype()),
        }
    };
}

/// Kernels of one float input and no attributes.
macro_rules! float_kernels {
    ($($name:ident => |$x:ident| $e:expr;)*) => {$(
        fn $name(_: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
            single(float_map!(input(inputs, 0)?, F, |$x| $e))
        }
    )*};
}

float_kernels! {
    k_ceil => |x| x.ceil();
    k_floor => |x| x.floor();
    k_round => |x| x.round_ties_even();
    k_reciprocal => |x| x.recip();
    k_sqrt => |x| x.sqrt();
    k_exp => |x| x.exp();
    k_log => |x| x.ln();
    k_erf => |x| erf(x as f64) as F;
    k_sin => |x| x.sin();
    k_cos => |x| x.cos();
    k_tan => |x| x.tan();
    k_asin => |x| x.asin();
    k_acos => |x| x.acos();
    k_atan => |x| x.atan();
    k_sinh => |x| x.sinh();
    k_cosh => |x| x.cosh();
    k_asinh => |x| x.asinh();
    k_acosh => |x| x.acosh();
    k_atanh => |x| x.atanh();
    k_tanh => |x| x.tanh();
    k_sigmoid => |x| 1.0 / (1.0 + (-x).exp());
    k_softplus => |x| if x > 0.0 { x + (-x).exp().ln_1p() } else { x.exp().ln_1p() };
    k_softsign => |x| x / (1.0 + x.abs());
    k_mish => |x| x * (if x > 0.0 { x + (-x).exp().ln_1p() } else { x.exp().ln_1p() }).tanh();
    k_hardswish => |x| x * (x / 6.0 + 0.5).clamp(0.0, 1.0);
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

fn relu<T: Num>(x: &ArrayD<T>) -> ArrayD<T> {
    broadcast::unary(x, |v: T| if v < T::default() { T::default() } else { v })
}

fn k_relu(_: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    single(num_one!(input(inputs, 0)?, x => relu(x)))
}

fn k_leaky_relu(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let alpha = ctx.attr_f("alpha", 0.01)?;
    single(float_map!(input(inputs, 0)?, F, |x| if x < 0.0 { x * alpha as F } else { x }))
}

fn k_thresholded_relu(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let alpha = ctx.attr_f("alpha", 1.0)?;
    single(float_map!(input(inputs, 0)?, F, |x| if x > alpha as F { x } else { 0.0 }))
}

fn k_elu(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let alpha = ctx.attr_f("alpha", 1.0)?;
    single(float_map!(input(inputs, 0)?, F, |x| if x < 0.0 { alpha as F * x.exp_m1() } else { x }))
}

fn k_selu(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let alpha = ctx.attr_f("alpha", 1.673_263_2)?;
    let gamma = ctx.attr_f("gamma", 1.050_701)?;
    single(float_map!(input(inputs, 0)?, F, |x| gamma as F * if x > 0.0 { x } else { alpha as F * x.exp_m1() }))
}

fn k_celu(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let alpha = ctx.attr_f("alpha", 1.0)?;
    single(float_map!(input(inputs, 0)?, F, |x| if x > 0.0 { x } else { alpha as F * (x / alpha as F).exp_m1() }))
}

fn k_hard_sigmoid(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (alpha, beta) = (ctx.attr_f("alpha", 0.2)?, ctx.attr_f("beta", 0.5)?);
    single(float_map!(input(inputs, 0)?, F, |x| (alpha as F * x + beta as F).clamp(0.0, 1.0)))
}

fn k_shrink(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (bias, lambd) = (ctx.attr_f("bias", 0.0)?, ctx.attr_f("lambd", 0.5)?);
    single(float_map!(input(inputs, 0)?, F, |x| if x < -lambd as F {
        x + bias as F
    } else if x > lambd as F {
        x - bias as F
    } else {
        0.0
    }))
}

fn k_gelu(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    single(match ctx.attr_s("approximate", "none")?.as_str() {
        "none" => float_map!(x, F, |x| 0.5 * x * (1.0 + erf(x as f64 * std::f64::consts::FRAC_1_SQRT_2) as F)),
        "tanh" => float_map!(x, F, |x| {
            let k = (2.0 / std::f64::consts::PI).sqrt() as F;
            0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
        }),
        a => bail!("Gelu approximate must be 'none' or 'tanh', got '{a}'"),
    })
}

fn clip<T: Num>(x: &ArrayD<T>, lo: Option<&Tensor>, hi: Option<&Tensor>) -> OpResult<ArrayD<T>> {
    let bound = |t: Option<&Tensor>| -> OpResult<Option<T>> {
        let Some(t) = t else { return Ok(None) };
        match T::arr(t) {
            Some(a) if a.len() == 1 => Ok(a.iter().next().copied()),
            Some(a) if a.is_empty() => Ok(None),
            _ => bail!("Clip bound must be a one-element tensor of the input's dtype, got {}", t.describe()),
        }
    };
    let (lo, hi) = (bound(lo)?, bound(hi)?);
    Ok(broadcast::unary(x, move |v: T| {
        let v = match lo {
            Some(l) if v < l => l,
            _ => v,
        };
        match hi {
            Some(h) if v > h => h,
            _ => v,
        }
    }))
}

fn k_clip(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    if ctx.opset() < 11 {
        let (lo, hi) = (ctx.attr_f("min", f32::MIN)?, ctx.attr_f("max", f32::MAX)?);
        return single(float_map!(x, F, |v| if v < lo as F { lo as F } else if v > hi as F { hi as F } else { v }));
    }
    let (lo, hi) = (opt_input(inputs, 1)?, opt_input(inputs, 2)?);
    single(num_one!(x, a => clip(a, lo, hi)?))
}

/// PRelu's slope broadcasts to X. Before opset 7 a 1-D slope could also name the channel axis (axis 1,
/// or the one axis of X of its length): reshape it to that.
fn prelu_slope<'t>(x: &Tensor, s: &'t Tensor) -> OpResult<Cow<'t, Tensor>> {
    if broadcast_shapes(&[x.shape(), s.shape()]).is_ok_and(|sh| sh == x.shape()) {
        return Ok(Cow::Borrowed(s));
    }
    let n = s.len();
    let axis = if x.rank() >= 2 && x.shape()[1] == n {
        Some(1)
    } else {
        let hits: Vec<usize> = (0..x.rank()).filter(|&i| x.shape()[i] == n).collect();
        (hits.len() == 1).then(|| hits[0])
    };
    match axis {
        Some(ax) if s.shape().iter().filter(|&&d| d != 1).count() <= 1 => {
            let mut shape = vec![n];
            shape.resize(x.rank() - ax, 1);
            Ok(Cow::Owned(s.reshape(&shape)?))
        }
        _ => bail!("PRelu slope {:?} does not broadcast to X {:?}", s.shape(), x.shape()),
    }
}

fn k_prelu(_: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let s = prelu_slope(x, input(inputs, 1)?)?;
    fn go<T: Num>(x: &ArrayD<T>, s: &ArrayD<T>) -> OpResult<ArrayD<T>> {
        bin(x, s, |v: T, k: T| if v < T::default() { v.n_mul(k) } else { v })
    }
    single(num_pair!(x, s.as_ref(), a, b => go(a, b)?))
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
    single(Tensor::Bool(float_test!(input(inputs, 0)?, |v: f64| v.is_nan())))
}

fn k_isinf(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let pos = ctx.attr_i("detect_positive", 1)? != 0;
    let neg = ctx.attr_i("detect_negative", 1)? != 0;
    let f = |v: f64| v.is_infinite() && if v > 0.0 { pos } else { neg };
    single(Tensor::Bool(float_test!(input(inputs, 0)?, f)))
}

/// 2/sqrt(pi) * (-1)^n / (n! (2n+1)): the Taylor coefficients of erf in x^2 (x times the series).
const ERF_TAYLOR: [f64; 20] = {
    let mut c = [0.0; 20];
    let (mut fact, mut n) = (1.0, 0);
    while n < 20 {
        if n > 0 {
            fact *= n as f64;
        }
        let sign = if n % 2 == 0 { 1.0 } else { -1.0 };
        c[n] = sign * std::f64::consts::FRAC_2_SQRT_PI / (fact * (2 * n + 1) as f64);
        n += 1;
    }
    c
};

/// Chebyshev coefficients of h(t) = x erfc(x) exp(x^2), t = 1/x, on t in [1/6, 0.4] and [0.4, 1]
/// (interpolated at Chebyshev nodes; relative error about 3e-15 and 1.5e-15).
const ERFC_FAR: [f64; 13] = [
    0.5428391662993293, -0.014904719866427175, -0.0010001600995144422, 8.324150368571968e-05,
    -1.3760754589082878e-06, -2.6905987569239345e-07, 2.8452799646030866e-08, -9.192259438213418e-10,
    -9.804896084944541e-11, 1.6671757614257572e-11, -1.0726816672377044e-12, -1.2863917052833113e-14,
    1.0891055130972881e-14,
];
const ERFC_NEAR: [f64; 17] = [
    0.47705154744122635, -0.050101351399559416, 0.00031184716128010496, 0.0003788948402861005,
    -6.336578880337012e-05, 6.33017491693883e-06, -2.990953968312608e-07, -3.835868643472898e-08,
    1.3169219259038028e-08, -2.2362493373904312e-09, 2.6751012399708567e-10, -1.9806142445478642e-11,
    -5.729311315811912e-13, 5.515214855532107e-13, -1.270211305632277e-13, 2.0677459941882698e-14,
    -2.4889453241812464e-15,
];

/// The sum of `c[k] T_k(u)` (Clenshaw).
fn chebyshev(c: &[f64], u: f64) -> f64 {
    let (mut b1, mut b2) = (0.0, 0.0);
    for &ck in c.iter().skip(1).rev() {
        (b1, b2) = (ck + 2.0 * u * b1 - b2, b1);
    }
    c.first().copied().unwrap_or(0.0) + u * b1 - b2
}

/// The error function to about 1e-15 relative: its Taylor series below 1, then 1 - erfc with erfc from
/// a Chebyshev fit of `x erfc(x) exp(x^2)` in 1/x; 1 from 6 on (erfc(6) < 2.2e-17).
pub(super) fn erf(x: f64) -> f64 {
    let ax = x.abs();
    if ax.is_nan() {
        return x;
    }
    if ax < 1.0 {
        let z = x * x;
        return x * ERF_TAYLOR.iter().rev().fold(0.0, |s, &c| s * z + c);
    }
    if ax >= 6.0 {
        return 1f64.copysign(x);
    }
    let t = 1.0 / ax;
    let h = if t < 0.4 {
        let a = 1.0 / 6.0;
        chebyshev(&ERFC_FAR, (2.0 * t - a - 0.4) / (0.4 - a))
    } else {
        chebyshev(&ERFC_NEAR, (2.0 * t - 1.4) / 0.6)
    };
    // exp(-x^2) with the rounding error of x^2 corrected to first order.
    let sq = ax * ax;
    let lo = ax.mul_add(ax, -sq);
    let erfc = (-sq).exp() * (1.0 - lo) * h * t;
    (1.0 - erfc).copysign(x)
}

pub fn register(r: &mut Registry) {
    r.add("", "Add", |c, i| k_arith(c, i, Ar::Add));
    r.add("", "Sub", |c, i| k_arith(c, i, Ar::Sub));
    r.add("", "Mul", |c, i| k_arith(c, i, Ar::Mul));
    r.add("", "Div", |c, i| k_arith(c, i, Ar::Div));
    r.add("", "Mod", k_mod);
    r.add("", "Pow", k_pow);
    r.add("", "PRelu", k_prelu);
    r.add("", "Equal", |c, i| k_compare(c, i, Cmp::Eq));
    r.add("", "Less", |c, i| k_compare(c, i, Cmp::Lt));
    r.add("", "LessOrEqual", |c, i| k_compare(c, i, Cmp::Le));
    r.add("", "Greater", |c, i| k_compare(c, i, Cmp::Gt));
    r.add("", "GreaterOrEqual", |c, i| k_compare(c, i, Cmp::Ge));
    r.add("", "And", |c, i| k_logic(c, i, |x, y| x & y));
    r.add("", "Or", |c, i| k_logic(c, i, |x, y| x | y));
    r.add("", "Xor", |c, i| k_logic(c, i, |x, y| x ^ y));
    r.add("", "Not", k_not);
    r.add("", "BitShift", k_bitshift);
    r.add("", "BitwiseAnd", |_, i| k_bitwise(i, Bw::And));
    r.add("", "BitwiseOr", |_, i| k_bitwise(i, Bw::Or));
    r.add("", "BitwiseXor", |_, i| k_bitwise(i, Bw::Xor));
    r.add("", "BitwiseNot", k_bitwise_not);
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small seeded generator (xorshift64*), values in [0, 1).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> f64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// erf by Simpson's rule on 2/sqrt(pi) exp(-t^2) over [0, x].
    fn erf_integral(x: f64) -> f64 {
        let n = 20_000;
        let h = x / n as f64;
        let f = |t: f64| (-t * t).exp();
        let mut s = f(0.0) + f(x);
        for i in 1..n {
            s += f(i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
        }
        s * h / 3.0 * std::f64::consts::FRAC_2_SQRT_PI
    }

    #[test]
    fn erf_matches_integral() {
        let mut rng = Rng(0x5eed);
        for _ in 0..200 {
            let x = (rng.next() - 0.5) * 14.0;
            let (got, want) = (erf(x), erf_integral(x));
            assert!((got - want).abs() <= 1e-13 * want.abs().max(1e-300), "erf({x}) = {got}, want {want}");
        }
        assert_eq!(erf(0.0), 0.0);
        assert!(erf(f64::NAN).is_nan());
        assert_eq!(erf(f64::INFINITY), 1.0);
    }

    #[test]
    fn broadcast_runs_match_generic_path() {
        let mut rng = Rng(7);
        let shape = [3usize, 4, 5, 6];
        let a = ArrayD::from_shape_fn(IxDyn(&shape), |_| rng.next() as f32 + 0.5);
        for small in [vec![4, 1, 1], vec![6], vec![5, 6], vec![3, 1, 5, 1], vec![1], vec![1, 4, 5, 1]] {
            let b = ArrayD::from_shape_fn(IxDyn(&small), |_| rng.next() as f32 + 0.5);
            let want = broadcast::binary(&a, &b, |x: f32, y: f32| x - y).unwrap();
            assert_eq!(bin(&a, &b, |x: f32, y: f32| x - y).unwrap(), want, "{small:?}");
            let want = broadcast::binary(&b, &a, |x: f32, y: f32| x / y).unwrap();
            assert_eq!(bin(&b, &a, |x: f32, y: f32| x / y).unwrap(), want, "{small:?}");
        }
    }

    #[test]
    fn integer_div_and_mod_signs() {
        let mut rng = Rng(11);
        for _ in 0..500 {
            let a = ((rng.next() - 0.5) * 200.0) as i32;
            let b = ((rng.next() - 0.5) * 30.0) as i32;
            if b == 0 {
                continue;
            }
            assert_eq!(a.n_div(b), a / b);
            let m = a.n_mod(b);
            assert_eq!(m, a - (a as f64 / b as f64).floor() as i32 * b, "{a} mod {b}");
            assert_eq!(a.n_fmod(b), a % b);
        }
        assert_eq!((-7.5f32).n_mod(2.0), 0.5);
        assert_eq!(7.5f32.n_mod(-2.0), -0.5);
        assert!((-6.0f64).n_mod(3.0) == 0.0 && (-6.0f64).n_mod(3.0).is_sign_positive());
        assert_eq!(i8::MIN.n_div(-1), i8::MIN);
    }

    #[test]
    fn shifts_pow_and_rounding() {
        assert_eq!((-8i8).shift(1, false), -4);
        assert_eq!((-8i8).shift(9, false), -1);
        assert_eq!(8u8.shift(8, true), 0);
        assert_eq!(0x41i8.shift(1, true), -126);
        assert_eq!(ipow(3i64, 5), 243);
        assert_eq!(ipow(-2i32, -1), 0);
        assert_eq!(ipow(-1i32, -3), -1);
        assert_eq!(2.5f32.round_ties_even(), 2.0);
        assert_eq!((-3.5f32).round_ties_even(), -4.0);
        assert!(f32::NAN.n_max(1.0).is_nan() && 1.0f32.n_max(f32::NAN).is_nan());
    }
}
