//! Unary and binary elementwise math, comparisons, logic, bitwise ops and activations.
//!
//! Integer arithmetic wraps on overflow and integer division truncates toward zero (C semantics, as the
//! ONNX reference does); f16/bf16 math runs in f32 and rounds once.
use std::borrow::Cow;

use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};
use rayon::prelude::*;

use super::broadcast::{self, PAR_THRESHOLD, broadcast_shapes};
use super::{OpCtx, Registry, input, single};
use crate::bail;
use crate::error::{OpError, OpResult};
use crate::tensor::{Tensor, Value};

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
        OpError::Invalid(format!(
            "operands have different dtypes: {} and {}",
            a.dtype(),
            b.dtype()
        ))
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
/// `$e` (a `bool`: whether it wrote) on the array of a numeric tensor, `$x` borrowed mutably; `false`
/// for other dtypes. The in-place forms' dispatch, as `num_one!` is the kernels'.
macro_rules! num_over {
    ($t:expr, $x:ident => $e:expr) => {
        match $t {
            $crate::tensor::Tensor::F32($x) => $e,
            $crate::tensor::Tensor::F64($x) => $e,
            $crate::tensor::Tensor::F16($x) => $e,
            $crate::tensor::Tensor::BF16($x) => $e,
            $crate::tensor::Tensor::I8($x) => $e,
            $crate::tensor::Tensor::I16($x) => $e,
            $crate::tensor::Tensor::I32($x) => $e,
            $crate::tensor::Tensor::I64($x) => $e,
            $crate::tensor::Tensor::U8($x) => $e,
            $crate::tensor::Tensor::U16($x) => $e,
            $crate::tensor::Tensor::U32($x) => $e,
            $crate::tensor::Tensor::U64($x) => $e,
            _ => false,
        }
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
            a.as_slice()
                .zip(b.as_slice())
                .and_then(|(x, y)| runs(x, y, b.shape(), &shape, &f))
        } else if b.shape() == shape.as_slice() {
            b.as_slice()
                .zip(a.as_slice())
                .and_then(|(y, x)| runs(y, x, a.shape(), &shape, |q, p| f(p, q)))
        } else {
            None
        };
        if let Some(v) = out {
            return Ok(ArrayD::from_shape_vec(IxDyn(&shape), v)?);
        }
    }
    broadcast::binary(a, b, f)
}

/// Where `small` (`len` values of shape `sshape`) is constant except along one run of axes where it
/// matches `shape`: how many consecutive values of `shape` each of its values meets (the product of
/// the axes after the run), and the values a chunk of the work holds (whole periods of `small`).
/// `None` for other patterns.
pub(super) fn run_of(len: usize, sshape: &[usize], shape: &[usize]) -> Option<(usize, usize)> {
    let pad = shape.len().checked_sub(sshape.len())?;
    let dim = |i: usize| if i < pad { 1 } else { sshape[i - pad] };
    let start = (0..shape.len())
        .find(|&i| dim(i) != 1)
        .unwrap_or(shape.len());
    let end = (start..shape.len())
        .find(|&i| dim(i) != shape[i])
        .unwrap_or(shape.len());
    if (end..shape.len()).any(|i| dim(i) != 1) || len == 0 {
        return None;
    }
    let inner: usize = shape[end..].iter().product();
    let period = len * inner;
    if period == 0 {
        return None;
    }
    Some((inner, period * (PAR_THRESHOLD / 4 / period).max(1)))
}

/// `full` has `shape`; `small`, of shape `sshape`, is constant except along one run of axes where it
/// matches `shape` ([`run_of`]). Returns `None` for other patterns.
fn runs<A, B, O, F>(
    full: &[A],
    small: &[B],
    sshape: &[usize],
    shape: &[usize],
    f: F,
) -> Option<Vec<O>>
where
    A: Clone + Send + Sync,
    B: Clone + Send + Sync,
    O: Clone + Send + Sync + Default,
    F: Fn(A, B) -> O + Sync + Send,
{
    let (inner, block) = run_of(small.len(), sshape, shape)?;
    // Written whole below (each chunk of `out` meets the chunk of `full` of its length, and every
    // element is written once), so never filled first.
    let mut out: Vec<O> = crate::arena::vec(full.len());
    let spare = &mut out.spare_capacity_mut()[..full.len()];
    let work = |(o, x): (&mut [std::mem::MaybeUninit<O>], &[A])| {
        if let [s] = small {
            for (o, x) in o.iter_mut().zip(x) {
                o.write(f(x.clone(), s.clone()));
            }
        } else if inner == 1 {
            let n = small.len();
            for (o, x) in o.chunks_mut(n).zip(x.chunks(n)) {
                for (o, (x, y)) in o.iter_mut().zip(x.iter().zip(small)) {
                    o.write(f(x.clone(), y.clone()));
                }
            }
        } else {
            let rows = o.chunks_mut(inner).zip(x.chunks(inner));
            for ((o, x), y) in rows.zip(small.iter().cycle()) {
                for (o, x) in o.iter_mut().zip(x) {
                    o.write(f(x.clone(), y.clone()));
                }
            }
        }
    };
    if full.len() >= PAR_THRESHOLD {
        spare
            .par_chunks_mut(block)
            .zip(full.par_chunks(block))
            .for_each(work);
    } else {
        spare
            .chunks_mut(block)
            .zip(full.chunks(block))
            .for_each(work);
    }
    // SAFETY: every element of the first full.len() was written above.
    unsafe { out.set_len(full.len()) };
    Some(out)
}

/// Before opset 7, Add/Sub/Mul/Div/Pow (and the logic and comparison ops) broadcast only with
/// `broadcast=1`, the second operand matching a run of the first's axes starting at `axis` (the
/// trailing axes when absent; exporters also rely on its size-1 axes stretching). Reshapes `b` so
/// numpy broadcasting gives that result.
fn legacy_b<'t>(ctx: &OpCtx, a: &Tensor, b: &'t Tensor) -> OpResult<Cow<'t, Tensor>> {
    if ctx.opset() >= 7
        || ctx.attr_i("broadcast", 0)? == 0
        || a.shape() == b.shape()
        || b.len() == 1
    {
        return Ok(Cow::Borrowed(b));
    }
    let (ra, rb) = (a.rank(), b.rank());
    let axis = match ctx.attr_opt_i("axis")? {
        Some(ax) if ax < 0 => ax + ra as i64,
        Some(ax) => ax,
        None => ra as i64 - rb as i64,
    };
    let fits = |ax: usize| {
        a.shape()[ax..ax + rb]
            .iter()
            .zip(b.shape())
            .all(|(&x, &y)| x == y || y == 1)
    };
    let ok = axis >= 0 && (axis as usize) + rb <= ra && fits(axis as usize);
    if !ok {
        bail!(
            "legacy broadcast of {:?} onto {:?} at axis {axis} does not fit",
            b.shape(),
            a.shape()
        );
    }
    let mut shape = b.shape().to_vec();
    shape.resize(ra - axis as usize, 1);
    Ok(Cow::Owned(b.reshape(&shape)?))
}

/// Refuses a broadcast result of `shapes` with `bytes`-byte elements larger than the session allows.
pub(super) fn check_out(ctx: &OpCtx, shapes: &[&[usize]], bytes: usize) -> OpResult<()> {
    ctx.check_alloc(&broadcast_shapes(shapes)?, bytes)
}

/// The two operands of a binary op (the second reshaped for legacy broadcasting), once their broadcast
/// result, of `bytes`-byte elements (the first operand's size when `None`), is known to be allowed.
fn operands<'v>(
    ctx: &OpCtx,
    inputs: &[Option<&'v Value>],
    bytes: Option<usize>,
) -> OpResult<(&'v Tensor, Cow<'v, Tensor>)> {
    let a = input(inputs, 0)?;
    let b = legacy_b(ctx, a, input(inputs, 1)?)?;
    check_out(
        ctx,
        &[a.shape(), b.shape()],
        bytes.unwrap_or(a.dtype().size_in_memory()),
    )?;
    Ok((a, b))
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
    // Halves through f32 by slices: `n_add` and its kin compute in f32 and round once, so this
    // is the same result without asking per element which instructions convert them.
    use super::cast::{narrow, widen};
    match (a, b) {
        (Tensor::F16(x), Tensor::F16(y)) => {
            return Ok(Tensor::F16(narrow(arith(&widen(x), &widen(y), op)?)));
        }
        (Tensor::BF16(x), Tensor::BF16(y)) => {
            return Ok(Tensor::BF16(narrow(arith(&widen(x), &widen(y), op)?)));
        }
        _ => {}
    }
    Ok(num_pair!(a, b, x, y => arith(x, y, op)?))
}

fn k_arith(ctx: &OpCtx, inputs: &[Option<&Value>], op: Ar) -> OpResult<Vec<Value>> {
    let (a, b) = operands(ctx, inputs, None)?;
    single(arith_t(a, &b, op)?)
}

/// Mul's output for `a · b`, by its kernel (broadcasting, dtypes, errors): what FusedConv's input
/// scale computes where it cannot scale the rows as they are packed (`ops/conv/scale.rs`).
pub(crate) fn mul(ctx: &OpCtx, a: &Value, b: &Value) -> OpResult<Value> {
    let mut out = k_arith(ctx, &[Some(a), Some(b)], Ar::Mul)?;
    Ok(out.swap_remove(0))
}

fn k_mod(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    k_arith(
        ctx,
        inputs,
        if ctx.attr_i("fmod", 0)? != 0 {
            Ar::FMod
        } else {
            Ar::Mod
        },
    )
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
fn k_pow(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (a, b) = operands(ctx, inputs, None)?;
    let b = b.as_ref();
    let scalar = b.len() == 1 && b.rank() <= a.rank();
    let out = match (a, b) {
        (Tensor::F32(x), Tensor::F32(y)) if scalar => {
            Tensor::F32(pow_scalar(x, y.iter().copied().sum()))
        }
        (Tensor::F64(x), Tensor::F64(y)) if scalar => {
            Tensor::F64(pow_scalar(x, y.iter().copied().sum()))
        }
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

fn k_bitwise(ctx: &OpCtx, inputs: &[Option<&Value>], op: Bw) -> OpResult<Vec<Value>> {
    let (a, b) = operands(ctx, inputs, None)?;
    single(int_pair!(a, b.as_ref(), x, y => bitwise(x, y, op)?))
}

fn k_bitshift(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    match ctx.attr_s("direction", "")?.as_str() {
        "LEFT" => k_bitwise(ctx, inputs, Bw::Shl),
        "RIGHT" => k_bitwise(ctx, inputs, Bw::Shr),
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

fn compare<T: PartialOrd + Clone + Send + Sync>(
    a: &ArrayD<T>,
    b: &ArrayD<T>,
    op: Cmp,
) -> OpResult<ArrayD<bool>> {
    match op {
        Cmp::Eq => bin(a, b, |x, y| x == y),
        Cmp::Lt => bin(a, b, |x, y| x < y),
        Cmp::Le => bin(a, b, |x, y| x <= y),
        Cmp::Gt => bin(a, b, |x, y| x > y),
        Cmp::Ge => bin(a, b, |x, y| x >= y),
    }
}

fn k_compare(ctx: &OpCtx, inputs: &[Option<&Value>], op: Cmp) -> OpResult<Vec<Value>> {
    let (a, b) = operands(ctx, inputs, Some(1))?;
    single(pair!(a, b.as_ref(), x, y => compare(x, y, op)?;
        F32, F64, F16, BF16, I8, I16, I32, I64, U8, U16, U32, U64, Bool, Str))
}

fn k_logic(
    ctx: &OpCtx,
    inputs: &[Option<&Value>],
    f: fn(bool, bool) -> bool,
) -> OpResult<Vec<Value>> {
    let (a, b) = operands(ctx, inputs, Some(1))?;
    single(pair!(a, b.as_ref(), x, y => bin(x, y, f)?; Bool))
}

fn k_not(_: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    single(one!(input(inputs, 0)?, x => broadcast::unary(x, |v: bool| !v); Bool))
}

/// Unary math and activations; declared here, after the dispatch macros it uses.
mod unary;
pub use unary::{ERF_MID_F32, ERF_SMALL};
/// The f64 references the device kernels' own tests measure their erf and Gelu against.
#[doc(hidden)]
pub use unary::{erf_f64, gelu_f64};

/// Add, Sub, Mul and Div written over an operand that dies at the node.
mod over;

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
        _ => bail!(
            "PRelu slope {:?} does not broadcast to X {:?}",
            s.shape(),
            x.shape()
        ),
    }
}

fn k_prelu(_: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let s = prelu_slope(x, input(inputs, 1)?)?;
    fn go<T: Num>(x: &ArrayD<T>, s: &ArrayD<T>) -> OpResult<ArrayD<T>> {
        bin(
            x,
            s,
            |v: T, k: T| if v < T::default() { v.n_mul(k) } else { v },
        )
    }
    single(num_pair!(x, s.as_ref(), a, b => go(a, b)?))
}

pub fn register(r: &mut Registry) {
    r.add("", "Add", |c, i| k_arith(c, i, Ar::Add));
    r.add("", "Sub", |c, i| k_arith(c, i, Ar::Sub));
    r.add("", "Mul", |c, i| k_arith(c, i, Ar::Mul));
    r.add("", "Div", |c, i| k_arith(c, i, Ar::Div));
    over::register(r);
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
    r.add("", "BitwiseAnd", |c, i| k_bitwise(c, i, Bw::And));
    r.add("", "BitwiseOr", |c, i| k_bitwise(c, i, Bw::Or));
    r.add("", "BitwiseXor", |c, i| k_bitwise(c, i, Bw::Xor));
    r.add("", "BitwiseNot", k_bitwise_not);
    unary::register(r);
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A small seeded generator (xorshift64*), values in [0, 1).
    pub struct Rng(pub u64);
    impl Rng {
        pub fn next(&mut self) -> f64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    #[test]
    fn broadcast_runs_match_generic_path() {
        let mut rng = Rng(7);
        let cases: [(&[usize], Vec<Vec<usize>>); 2] = [
            (
                &[3, 4, 5, 6],
                vec![
                    vec![4, 1, 1],
                    vec![6],
                    vec![5, 6],
                    vec![3, 1, 5, 1],
                    vec![1],
                    vec![1, 4, 5, 1],
                ],
            ),
            (
                &[8, 64, 96],
                vec![vec![64, 1], vec![96], vec![1, 1], vec![8, 1, 96]],
            ),
        ];
        for (shape, smalls) in cases {
            let a = ArrayD::from_shape_fn(IxDyn(shape), |_| rng.next() as f32 + 0.5);
            for small in smalls {
                let b = ArrayD::from_shape_fn(IxDyn(&small), |_| rng.next() as f32 + 0.5);
                let want = broadcast::binary(&a, &b, |x: f32, y: f32| x - y).unwrap();
                assert_eq!(
                    bin(&a, &b, |x: f32, y: f32| x - y).unwrap(),
                    want,
                    "{small:?}"
                );
                let want = broadcast::binary(&b, &a, |x: f32, y: f32| x / y).unwrap();
                assert_eq!(
                    bin(&b, &a, |x: f32, y: f32| x / y).unwrap(),
                    want,
                    "{small:?}"
                );
            }
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
            assert_eq!(
                a.n_mod(b),
                a - (a as f64 / b as f64).floor() as i32 * b,
                "{a} mod {b}"
            );
            assert_eq!(a.n_fmod(b), a % b);
        }
        assert_eq!((-7.5f32).n_mod(2.0), 0.5);
        assert_eq!(7.5f32.n_mod(-2.0), -0.5);
        assert!((-6.0f64).n_mod(3.0) == 0.0 && (-6.0f64).n_mod(3.0).is_sign_positive());
        assert_eq!(i8::MIN.n_div(-1), i8::MIN);
    }

    #[test]
    fn shifts_powers_and_nan_extrema() {
        assert_eq!((-8i8).shift(1, false), -4);
        assert_eq!((-8i8).shift(9, false), -1);
        assert_eq!(8u8.shift(8, true), 0);
        assert_eq!(0x41i8.shift(1, true), -126);
        assert_eq!(ipow(3i64, 5), 243);
        assert_eq!(ipow(-2i32, -1), 0);
        assert_eq!(ipow(-1i32, -3), -1);
        assert!(f32::NAN.n_max(1.0).is_nan() && 1.0f32.n_max(f32::NAN).is_nan());
        assert!(f16::NAN.n_min(f16::ONE).is_nan());
    }

    /// Halves go through f32 by slices: the same values as the element-by-element route (each
    /// operand widened, the op in f32, rounded once), for every arithmetic op, a broadcast
    /// operand, and values that round, overflow, underflow and are NaN.
    #[test]
    fn half_arithmetic_by_slices_equals_element_by_element() {
        fn by_element<H: Num + Into<f64>>(a: &ArrayD<H>, b: &ArrayD<H>, op: Ar) -> Vec<f64> {
            let b = b.broadcast(a.raw_dim()).unwrap();
            let f = |x: H, y: H| match op {
                Ar::Add => x.n_add(y),
                Ar::Sub => x.n_sub(y),
                Ar::Mul => x.n_mul(y),
                Ar::Div => x.n_div(y),
                Ar::Mod => x.n_mod(y),
                Ar::FMod => x.n_fmod(y),
                Ar::Max => x.n_max(y),
                Ar::Min => x.n_min(y),
            };
            a.iter()
                .zip(b.iter())
                .map(|(&x, &y)| f(x, y).into())
                .collect()
        }
        fn same(got: &[f64], want: &[f64]) -> bool {
            got.iter()
                .zip(want)
                .all(|(g, w)| g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()))
        }
        let mut rng = Rng(11);
        let mut draw = |n: usize| -> Vec<f32> {
            (0..n)
                .map(|i| match i % 13 {
                    0 => f32::NAN,
                    1 => 60000.0,
                    2 => 1e-7,
                    3 => -0.0,
                    _ => ((rng.next() - 0.5) * 200.0) as f32,
                })
                .collect()
        };
        let (av, bv) = (draw(4 * 5 * 6), draw(5 * 6));
        let arr = |v: &[f32], shape: &[usize]| ArrayD::from_shape_vec(IxDyn(shape), v.to_vec());
        let (a32, b32) = (arr(&av, &[4, 5, 6]).unwrap(), arr(&bv, &[5, 6]).unwrap());
        for op in [
            Ar::Add,
            Ar::Sub,
            Ar::Mul,
            Ar::Div,
            Ar::Mod,
            Ar::FMod,
            Ar::Max,
            Ar::Min,
        ] {
            let (a, b) = (a32.mapv(f16::from_f32), b32.mapv(f16::from_f32));
            let want = by_element(&a, &b, op);
            let got = arith_t(&Tensor::F16(a), &Tensor::F16(b), op).unwrap();
            assert!(
                same(&got.to_f64_vec().unwrap(), &want),
                "f16 {:?}",
                op as u8
            );
            let (a, b) = (a32.mapv(bf16::from_f32), b32.mapv(bf16::from_f32));
            let want = by_element(&a, &b, op);
            let got = arith_t(&Tensor::BF16(a), &Tensor::BF16(b), op).unwrap();
            assert!(
                same(&got.to_f64_vec().unwrap(), &want),
                "bf16 {:?}",
                op as u8
            );
        }
    }
}
