//! Type conversions: Cast and CastLike across every dtype, narrow float and int formats included.
//!
//! Every element goes through a small scalar [`V`] (float, signed or unsigned integer), so each
//! source/target pair is one monomorphised closure. Narrow float formats (float8/6/4) have exact
//! bit-level encoders from their definitions (round to nearest even, ONNX saturation rules); f16 and
//! bf16 from f64 use the same encoder since `half`'s f64 path truncates before rounding.
use half::{bf16, f16};
use ndarray::ArrayD;

use super::broadcast::unary;
use super::{OpCtx, Registry, input, single};
use crate::error::{OpError, OpResult};
use crate::ir::Attr;
use crate::tensor::{DType, Tensor, Value};
use crate::{bail, unsupported};

pub fn register(r: &mut Registry) {
    r.add("", "Cast", cast_op);
    r.add("", "CastLike", cast_like_op);
}

/// Rounding of casts to float8e8m0 (the `round_mode` attribute).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoundMode {
    Up,
    Down,
    Nearest,
}

fn round_mode(ctx: &OpCtx) -> OpResult<RoundMode> {
    Ok(match ctx.attr_s("round_mode", "up")?.as_str() {
        "up" => RoundMode::Up,
        "down" => RoundMode::Down,
        "nearest" => RoundMode::Nearest,
        m => bail!("round_mode must be 'up', 'down' or 'nearest', got '{m}'"),
    })
}

fn saturate_attr(ctx: &OpCtx) -> OpResult<bool> {
    Ok(ctx.opset() < 19 || ctx.attr_i("saturate", 1)? != 0)
}

/// The `to` attribute: a DataType code, or (Cast-1) the type's name.
pub fn to_attr(ctx: &OpCtx) -> OpResult<DType> {
    let code = match ctx.attr("to") {
        Some(Attr::Int(v)) => *v,
        Some(Attr::String(s)) => {
            let name = String::from_utf8_lossy(s).to_ascii_uppercase();
            let names = [
                "",
                "FLOAT",
                "UINT8",
                "INT8",
                "UINT16",
                "INT16",
                "INT32",
                "INT64",
                "STRING",
                "BOOL",
                "FLOAT16",
                "DOUBLE",
                "UINT32",
                "UINT64",
                "COMPLEX64",
                "COMPLEX128",
                "BFLOAT16",
            ];
            match names.iter().position(|n| *n == name) {
                Some(p) if p > 0 => p as i64,
                _ => bail!("attribute 'to' names an unknown type '{name}'"),
            }
        }
        Some(a) => bail!("attribute 'to' must be int, got {}", a.kind()),
        None => bail!("required attribute 'to' is missing"),
    };
    dtype_of(code)
}

fn dtype_of(code: i64) -> OpResult<DType> {
    match i32::try_from(code).ok().and_then(DType::from_onnx) {
        Some(d) => Ok(d),
        None => bail!("unknown data type code {code}"),
    }
}

fn cast_op(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let to = to_attr(ctx)?;
    single(cast_with(x, to, saturate_attr(ctx)?, round_mode(ctx)?)?)
}

fn cast_like_op(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let like = input(inputs, 1)?;
    single(cast_with(
        x,
        like.dtype(),
        saturate_attr(ctx)?,
        round_mode(ctx)?,
    )?)
}

/// f16 and bf16: the half types, which the float kernels compute in f32 and round once.
/// Converting them by slices (eight at a time where the CPU converts f16 in hardware, F16C) is
/// exact and an order of magnitude faster than element by element, where each conversion asks
/// which instructions the CPU has.
pub(crate) trait Half: Copy + Send + Sync + 'static {
    const ZERO: Self;
    fn up_slice(s: &[Self], out: &mut [f32]);
    fn down_slice(s: &[f32], out: &mut [Self]);
    fn up1(self) -> f32;
    fn down1(v: f32) -> Self;
}

macro_rules! half_type {
    ($($h:ty),*) => {$(
        impl Half for $h {
            const ZERO: Self = <$h>::ZERO;
            fn up_slice(s: &[Self], out: &mut [f32]) {
                use half::slice::HalfFloatSliceExt;
                s.convert_to_f32_slice(out)
            }
            fn down_slice(s: &[f32], out: &mut [Self]) {
                use half::slice::HalfFloatSliceExt;
                out.convert_from_f32_slice(s)
            }
            fn up1(self) -> f32 {
                self.to_f32()
            }
            fn down1(v: f32) -> Self {
                <$h>::from_f32(v)
            }
        }
    )*};
}
half_type!(f16, bf16);

/// A half array as f32, exactly (by slices where the array is contiguous).
pub(crate) fn widen<H: Half>(a: &ArrayD<H>) -> ArrayD<f32> {
    match a.as_slice() {
        Some(s) => {
            let mut v = vec![0f32; s.len()];
            H::up_slice(s, &mut v);
            ArrayD::from_shape_vec(a.raw_dim(), v).unwrap_or_else(|_| a.mapv(H::up1))
        }
        None => a.mapv(H::up1),
    }
}

/// An f32 array rounded to a half type, to nearest even as `from_f32` rounds (by slices where
/// the array is contiguous).
pub(crate) fn narrow<H: Half>(a: ArrayD<f32>) -> ArrayD<H> {
    match a.as_slice() {
        Some(s) => {
            let mut v = vec![H::ZERO; s.len()];
            H::down_slice(s, &mut v);
            ArrayD::from_shape_vec(a.raw_dim(), v).unwrap_or_else(|_| a.mapv(H::down1))
        }
        None => a.mapv(H::down1),
    }
}

/// Casts `t` to `to` with ONNX Cast semantics (float8e8m0 rounds up).
#[allow(dead_code)] // for other op families
pub(crate) fn cast(t: &Tensor, to: DType, saturate: bool) -> OpResult<Tensor> {
    cast_with(t, to, saturate, RoundMode::Up)
}

/// The elements of any numeric tensor (narrow formats included) as f32.
#[allow(dead_code)] // for other op families
pub(crate) fn to_f32_vec(t: &Tensor) -> OpResult<Vec<f32>> {
    Ok(row_major(map_v(t, f32::from_v)?))
}

/// The elements of any numeric tensor (narrow formats included) as f64, exactly for every type but
/// 64-bit integers beyond 2^53.
pub(crate) fn to_f64_vec(t: &Tensor) -> OpResult<Vec<f64>> {
    Ok(row_major(map_v(t, f64::from_v)?))
}

/// The elements of `a` in row-major order, without walking a dynamic-rank iterator where the
/// storage already is in that order (an elementwise map's result: `unary` keeps the standard
/// layout of a fresh array). Iterating an `ArrayD` element by element recomputes an n-dimensional
/// index per element: on a 110,000-element weight, most of MatMulInteger's time.
fn row_major<O: Clone>(a: ArrayD<O>) -> Vec<O> {
    if a.is_standard_layout() {
        let (v, offset) = a.into_raw_vec_and_offset();
        if offset.unwrap_or(0) == 0 {
            return v;
        }
        return v[offset.unwrap_or(0)..].to_vec();
    }
    a.iter().cloned().collect()
}

/// The elements of any integer or bool tensor (narrow formats included) as i64; floats truncate.
#[allow(dead_code)] // for other op families
pub fn to_i64_vec(t: &Tensor) -> OpResult<Vec<i64>> {
    Ok(row_major(map_v(t, i64::from_v)?))
}

/// Cast with every option.
pub(crate) fn cast_with(
    t: &Tensor,
    to: DType,
    saturate: bool,
    round: RoundMode,
) -> OpResult<Tensor> {
    let from = t.dtype();
    if from == to {
        return Ok(t.clone());
    }
    // Direct paths that `half` does exactly (and in hardware where it can).
    match (t, to) {
        (Tensor::F32(a), DType::F16) => return Ok(Tensor::F16(unary(a, f16::from_f32))),
        (Tensor::F32(a), DType::BF16) => return Ok(Tensor::BF16(unary(a, bf16::from_f32))),
        _ => {}
    }
    Ok(match to {
        DType::F32 => Tensor::F32(map_v(t, f32::from_v)?),
        DType::F64 => Tensor::F64(map_v(t, f64::from_v)?),
        DType::F16 => Tensor::F16(map_v(t, f16::from_v)?),
        DType::BF16 => Tensor::BF16(map_v(t, bf16::from_v)?),
        DType::I8 => Tensor::I8(map_v(t, i8::from_v)?),
        DType::I16 => Tensor::I16(map_v(t, i16::from_v)?),
        DType::I32 => Tensor::I32(map_v(t, i32::from_v)?),
        DType::I64 => Tensor::I64(map_v(t, i64::from_v)?),
        DType::U8 => Tensor::U8(map_v(t, u8::from_v)?),
        DType::U16 => Tensor::U16(map_v(t, u16::from_v)?),
        DType::U32 => Tensor::U32(map_v(t, u32::from_v)?),
        DType::U64 => Tensor::U64(map_v(t, u64::from_v)?),
        DType::Bool => Tensor::Bool(map_v(t, bool::from_v)?),
        DType::Str => Tensor::Str(to_strings(t)?),
        DType::C64 | DType::C128 => unsupported!("cast to {to}: complex tensors are not supported"),
        d => {
            let enc = narrow_encoder(d, saturate, round)?;
            Tensor::Packed(d, map_v(t, enc)?)
        }
    })
}

/// One element on its way between types.
#[derive(Debug, Clone, Copy)]
pub(crate) enum V {
    F(f64),
    I(i64),
    U(u64),
}

pub(crate) trait IntoV: Copy + Send + Sync {
    fn v(self) -> V;
}

pub(crate) trait FromV: Clone + Send {
    fn from_v(v: V) -> Self;
}

macro_rules! into_v {
    ($($t:ty => $e:expr),*) => {$(
        impl IntoV for $t {
            #[inline]
            fn v(self) -> V {
                let f: fn($t) -> V = $e;
                f(self)
            }
        }
    )*};
}
into_v!(f32 => |x| V::F(x as f64), f64 => V::F, f16 => |x| V::F(x.to_f64()), bf16 => |x| V::F(x.to_f64()),
    i8 => |x| V::I(x as i64), i16 => |x| V::I(x as i64), i32 => |x| V::I(x as i64), i64 => V::I,
    u8 => |x| V::I(x as i64), u16 => |x| V::I(x as i64), u32 => |x| V::I(x as i64), u64 => V::U,
    bool => |x| V::I(x as i64));

/// Float to integer: truncation toward zero, then the target's bits (two's complement wrap), the way
/// numpy casts; NaN and infinities (undefined in ONNX) give 0.
#[inline]
fn f2i(x: f64) -> i128 {
    if x.is_finite() { x as i128 } else { 0 }
}

macro_rules! from_v_int {
    ($($t:ty),*) => {$(
        impl FromV for $t {
            #[inline]
            fn from_v(v: V) -> $t {
                match v {
                    V::F(x) => f2i(x) as $t,
                    V::I(i) => i as $t,
                    V::U(u) => u as $t,
                }
            }
        }
    )*};
}
from_v_int!(i8, i16, i32, i64, u8, u16, u32, u64);

impl FromV for f32 {
    #[inline]
    fn from_v(v: V) -> f32 {
        match v {
            V::F(x) => x as f32,
            V::I(i) => i as f32,
            V::U(u) => u as f32,
        }
    }
}

impl FromV for f64 {
    #[inline]
    fn from_v(v: V) -> f64 {
        match v {
            V::F(x) => x,
            V::I(i) => i as f64,
            V::U(u) => u as f64,
        }
    }
}

impl FromV for f16 {
    #[inline]
    fn from_v(v: V) -> f16 {
        match v {
            V::F(x) => f16::from_bits(F16.encode(x, false) as u16),
            // Integers past f32's exact range are far beyond f16's, so the double rounding is harmless.
            V::I(i) => f16::from_f32(i as f32),
            V::U(u) => f16::from_f32(u as f32),
        }
    }
}

impl FromV for bf16 {
    #[inline]
    fn from_v(v: V) -> bf16 {
        bf16::from_bits(BF16.encode(f64::from_v(v), false) as u16)
    }
}

impl FromV for bool {
    #[inline]
    fn from_v(v: V) -> bool {
        match v {
            V::F(x) => x != 0.0,
            V::I(i) => i != 0,
            V::U(u) => u != 0,
        }
    }
}

/// `f` applied to every element of `t` (any dtype but complex) seen as a [`V`].
pub(crate) fn map_v<O, F>(t: &Tensor, f: F) -> OpResult<ArrayD<O>>
where
    O: Clone + Send,
    F: Fn(V) -> O + Sync + Send,
{
    fn go<S: IntoV, O: Clone + Send>(a: &ArrayD<S>, f: impl Fn(V) -> O + Sync + Send) -> ArrayD<O> {
        unary(a, |x: S| f(x.v()))
    }
    Ok(match t {
        Tensor::F32(a) => go(a, f),
        Tensor::F64(a) => go(a, f),
        Tensor::F16(a) => go(a, f),
        Tensor::BF16(a) => go(a, f),
        Tensor::I8(a) => go(a, f),
        Tensor::I16(a) => go(a, f),
        Tensor::I32(a) => go(a, f),
        Tensor::I64(a) => go(a, f),
        Tensor::U8(a) => go(a, f),
        Tensor::U16(a) => go(a, f),
        Tensor::U32(a) => go(a, f),
        Tensor::U64(a) => go(a, f),
        Tensor::Bool(a) => go(a, f),
        Tensor::Str(a) => {
            let mut out = Vec::with_capacity(a.len());
            for s in a.iter() {
                out.push(f(parse_str(s)?));
            }
            ArrayD::from_shape_vec(a.raw_dim(), out)?
        }
        Tensor::Packed(d, a) => {
            let d = *d;
            if !is_narrow(d) {
                bail!("a packed tensor cannot hold {d}");
            }
            unary(a, |b: u8| f(narrow_v(d, b)))
        }
    })
}

fn is_narrow(d: DType) -> bool {
    d.is_narrow_float() || matches!(d, DType::U4 | DType::I4 | DType::U2 | DType::I2)
}

/// Width in bits and signedness of the narrow integer formats.
fn narrow_int(d: DType) -> Option<(u32, bool)> {
    match d {
        DType::U4 => Some((4, false)),
        DType::I4 => Some((4, true)),
        DType::U2 => Some((2, false)),
        DType::I2 => Some((2, true)),
        _ => None,
    }
}

/// The value of one narrow element (its bit pattern for floats, its value byte for integers).
#[inline]
pub(crate) fn narrow_v(d: DType, b: u8) -> V {
    if let Some((bits, signed)) = narrow_int(d) {
        let sh = 64 - bits;
        let v = (b as i64) << sh;
        return V::I(if signed {
            v >> sh
        } else {
            ((v as u64) >> sh) as i64
        });
    }
    V::F(decode_narrow(d, b))
}

/// A narrow float bit pattern as f64 (exact).
pub fn decode_narrow(d: DType, b: u8) -> f64 {
    match d {
        DType::F8E8M0 => e8m0_decode(b),
        d => match float_fmt(d) {
            Some(f) => f.decode(b as u32),
            None => f64::NAN,
        },
    }
}

/// Encodes a value to the narrow format `d`: a bit pattern for floats, the wrapped value byte for ints.
fn narrow_encoder(
    d: DType,
    saturate: bool,
    round: RoundMode,
) -> OpResult<impl Fn(V) -> u8 + Sync + Send> {
    let int = narrow_int(d);
    let fmt = float_fmt(d);
    if int.is_none() && fmt.is_none() && d != DType::F8E8M0 {
        unsupported!("cast to {d}");
    }
    // Saturation is only optional for float8; float4/6 have nothing else to overflow to.
    let saturate = saturate
        || !matches!(
            d,
            DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ | DType::F8E8M0
        );
    Ok(move |v: V| -> u8 {
        if let Some((bits, signed)) = int {
            let i = match v {
                V::F(x) => f2i(x) as i64,
                V::I(i) => i,
                V::U(u) => u as i64,
            };
            let sh = 64 - bits;
            return if signed {
                ((i << sh) >> sh) as u8
            } else {
                (((i << sh) as u64) >> sh) as u8
            };
        }
        let x = f64::from_v(v);
        match fmt {
            Some(f) => f.encode(x, saturate) as u8,
            None => e8m0_encode(x as f32, saturate, round),
        }
    })
}

/// `x` rounded (to nearest even) to the precision of float type `d`; other types leave it unchanged.
pub(crate) fn round_to(d: DType, x: f64) -> f64 {
    match d {
        DType::F32 => x as f32 as f64,
        d => match float_fmt(d) {
            Some(f) => f.decode(f.encode(x, false)),
            None => x,
        },
    }
}

/// Encodes one value to the narrow format `d` (bit pattern or value byte).
pub(crate) fn encode_narrow(d: DType, x: f64, saturate: bool) -> OpResult<u8> {
    Ok(narrow_encoder(d, saturate, RoundMode::Up)?(V::F(x)))
}

/// How a small float format spends its top exponent code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// IEEE: all-ones exponent is infinity (zero mantissa) or NaN.
    Ieee,
    /// No infinity; only all-ones exponent and mantissa is NaN (float8e4m3fn).
    Fn,
    /// No infinity, no negative zero; the negative-zero pattern is the only NaN.
    Fnuz,
    /// Neither infinity nor NaN (float4e2m1, float6).
    Finite,
}

/// A binary float format: exponent and mantissa widths, exponent bias and special values.
#[derive(Debug, Clone, Copy)]
struct Fmt {
    ebits: u32,
    mbits: u32,
    bias: i32,
    kind: Kind,
}

const F16: Fmt = Fmt {
    ebits: 5,
    mbits: 10,
    bias: 15,
    kind: Kind::Ieee,
};
const BF16: Fmt = Fmt {
    ebits: 8,
    mbits: 7,
    bias: 127,
    kind: Kind::Ieee,
};

fn float_fmt(d: DType) -> Option<Fmt> {
    let (ebits, mbits, bias, kind) = match d {
        DType::F8E4M3FN => (4, 3, 7, Kind::Fn),
        DType::F8E4M3FNUZ => (4, 3, 8, Kind::Fnuz),
        DType::F8E5M2 => (5, 2, 15, Kind::Ieee),
        DType::F8E5M2FNUZ => (5, 2, 16, Kind::Fnuz),
        DType::F4E2M1 => (2, 1, 1, Kind::Finite),
        DType::F6E2M3 => (2, 3, 1, Kind::Finite),
        DType::F6E3M2 => (3, 2, 3, Kind::Finite),
        DType::F16 => return Some(F16),
        DType::BF16 => return Some(BF16),
        _ => return None,
    };
    Some(Fmt {
        ebits,
        mbits,
        bias,
        kind,
    })
}

/// 2^k as f64, for k in [-1074, 1023].
#[inline]
fn exp2i(k: i32) -> f64 {
    if k >= -1022 {
        f64::from_bits(((k + 1023) as u64) << 52)
    } else {
        f64::from_bits(1u64 << (k + 1074))
    }
}

impl Fmt {
    fn sign_bit(&self) -> u32 {
        1 << (self.ebits + self.mbits)
    }

    fn emask(&self) -> u32 {
        (1 << self.ebits) - 1
    }

    fn mmask(&self) -> u32 {
        (1 << self.mbits) - 1
    }

    /// The largest finite magnitude's code.
    fn max_code(&self) -> u32 {
        let (e, m) = (self.emask(), self.mmask());
        match self.kind {
            Kind::Ieee => ((e - 1) << self.mbits) | m,
            Kind::Fn => (e << self.mbits) | (m - 1),
            Kind::Fnuz | Kind::Finite => (e << self.mbits) | m,
        }
    }

    fn nan_code(&self, neg: bool) -> u32 {
        let s = if neg { self.sign_bit() } else { 0 };
        match self.kind {
            Kind::Ieee => s | (self.emask() << self.mbits) | (1 << (self.mbits - 1)),
            Kind::Fn => s | (self.emask() << self.mbits) | self.mmask(),
            Kind::Fnuz => self.sign_bit(),
            // No NaN: ml_dtypes (which the ONNX tests use) gives -0 for NaN and +0 for -NaN.
            Kind::Finite => {
                if neg {
                    0
                } else {
                    self.sign_bit()
                }
            }
        }
    }

    /// Rounds `x` to nearest even; out of range saturates to the largest finite value when `saturate`
    /// (always for formats without infinity or NaN), else becomes infinity (IEEE) or NaN.
    fn encode(&self, x: f64, saturate: bool) -> u32 {
        let neg = x.is_sign_negative();
        if x.is_nan() {
            return self.nan_code(neg);
        }
        let s = if neg { self.sign_bit() } else { 0 };
        let max = self.max_code();
        let overflow = || {
            if saturate || self.kind == Kind::Finite {
                s | max
            } else {
                match self.kind {
                    Kind::Ieee => s | (self.emask() << self.mbits),
                    _ => self.nan_code(neg),
                }
            }
        };
        let a = x.abs();
        if a.is_infinite() {
            return overflow();
        }
        if a < f64::MIN_POSITIVE {
            // Zero, or an f64 subnormal: far below every format's smallest subnormal.
            return if self.kind == Kind::Fnuz { 0 } else { s };
        }
        let m = self.mbits;
        let exp = ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023;
        let emin = 1 - self.bias;
        let mut e = exp.max(emin);
        // a / 2^(e - m): exact, in [2^m, 2^(m+1)) for normals, below 2^m for subnormals.
        let mut q = (a * exp2i(m as i32 - e)).round_ties_even() as u64;
        if q >> (m + 1) != 0 {
            q >>= 1;
            e += 1;
        }
        // For e == emin both branches give q itself (exponent field 0 or 1).
        let mag = if q >> m == 0 {
            q
        } else {
            (((e + self.bias) as u64) << m) | (q & self.mmask() as u64)
        };
        if mag > max as u64 {
            return overflow();
        }
        if mag == 0 && self.kind == Kind::Fnuz {
            return 0;
        }
        s | mag as u32
    }

    fn decode(&self, c: u32) -> f64 {
        let sb = self.sign_bit();
        let c = c & (2 * sb - 1);
        let neg = c & sb != 0;
        let mag = c & (sb - 1);
        let (ef, mf) = (mag >> self.mbits, mag & self.mmask());
        match self.kind {
            Kind::Fnuz if c == sb => return f64::NAN,
            Kind::Fn if mag == (self.emask() << self.mbits) | self.mmask() => {
                return if neg { -f64::NAN } else { f64::NAN };
            }
            Kind::Ieee if ef == self.emask() => {
                let v = if mf == 0 { f64::INFINITY } else { f64::NAN };
                return if neg { -v } else { v };
            }
            _ => {}
        }
        let m = self.mbits as i32;
        let v = if ef == 0 {
            mf as f64 * exp2i(1 - self.bias - m)
        } else {
            (mf + (1 << self.mbits)) as f64 * exp2i(ef as i32 - self.bias - m)
        };
        if neg { -v } else { v }
    }
}

/// float8e8m0: a bare biased exponent (bias 127); 0xFF is NaN.
fn e8m0_decode(b: u8) -> f64 {
    if b == 0xFF {
        f64::NAN
    } else {
        exp2i(b as i32 - 127)
    }
}

/// Encodes to float8e8m0 from the f32 bits, the way the ONNX reference does: the sign is ignored, NaN
/// and infinity give 0xFF, rounding per `round`; saturation stops rounding up into 0xFF.
fn e8m0_encode(x: f32, saturate: bool, round: RoundMode) -> u8 {
    let b = x.to_bits();
    let exp = (b >> 23) & 0xFF;
    if exp == 0xFF {
        return 0xFF;
    }
    let up = match round {
        RoundMode::Up => b & 0x7F_FFFF != 0,
        RoundMode::Down => false,
        RoundMode::Nearest => {
            let g = b & 0x40_0000 != 0;
            let r = b & 0x20_0000 != 0;
            let s = b & 0x1F_FFFF != 0;
            g && (r || s || exp > 0)
        }
    };
    if up && !(saturate && exp == 0xFE) {
        (exp + 1) as u8
    } else {
        exp as u8
    }
}

/// Parses one string element: integers exactly, otherwise a float ("1e-5", "INF", "-inf", "NaN" in
/// any case), or "true"/"false".
fn parse_str(s: &str) -> OpResult<V> {
    let t = s.trim();
    if let Ok(i) = t.parse::<i64>() {
        return Ok(V::I(i));
    }
    if let Ok(u) = t.parse::<u64>() {
        return Ok(V::U(u));
    }
    let l = t.to_ascii_lowercase();
    let body = l.strip_prefix('+').unwrap_or(&l);
    match body {
        "inf" | "infinity" => return Ok(V::F(f64::INFINITY)),
        "-inf" | "-infinity" => return Ok(V::F(f64::NEG_INFINITY)),
        "nan" | "-nan" => return Ok(V::F(f64::NAN)),
        "true" => return Ok(V::I(1)),
        "false" => return Ok(V::I(0)),
        _ => {}
    }
    match body.parse::<f64>() {
        Ok(x) => Ok(V::F(x)),
        Err(_) => Err(OpError::Invalid(format!(
            "cannot cast string '{s}' to a number"
        ))),
    }
}

fn to_strings(t: &Tensor) -> OpResult<ArrayD<String>> {
    Ok(match t {
        Tensor::F32(a) => {
            a.map(|&x| fmt_float(x as f64, 1e6, |s| s.parse::<f32>().ok().map(|y| y as f64)))
        }
        Tensor::F64(a) => a.map(|&x| fmt_float(x, 1e16, |s| s.parse::<f64>().ok())),
        Tensor::F16(a) => a.map(|x| fmt_in(x.to_f64(), 1e3, F16)),
        Tensor::BF16(a) => a.map(|x| fmt_in(x.to_f64(), 1e6, BF16)),
        Tensor::Bool(a) => a.map(|&b| if b { "True" } else { "False" }.to_string()),
        Tensor::Str(a) => a.clone(),
        Tensor::Packed(d, a) if d.is_narrow_float() => {
            let d = *d;
            a.map(|&b| {
                fmt_float(decode_narrow(d, b), 1e6, |s| {
                    s.parse::<f32>().ok().map(|y| y as f64)
                })
            })
        }
        other => map_v(other, |v| match v {
            V::I(i) => i.to_string(),
            V::U(u) => u.to_string(),
            V::F(x) => fmt_float(x, 1e16, |s| s.parse::<f64>().ok()),
        })?,
    })
}

fn fmt_in(x: f64, cutoff: f64, f: Fmt) -> String {
    fmt_float(x, cutoff, |s| {
        s.parse::<f64>().ok().map(|y| f.decode(f.encode(y, false)))
    })
}

/// Formats like numpy's `str` of a float scalar: the shortest digits that read back (through
/// `round_trip`, which rounds a parsed string to the source type) to `x`, positional for
/// 1e-4 <= |x| < `cutoff` ("0.5", "100.0"), scientific otherwise ("1e-05", "1.5e+16"). numpy's
/// cutoff is 1e3 for float16, 1e6 for float32 and 1e16 for float64.
fn fmt_float(x: f64, cutoff: f64, round_trip: impl Fn(&str) -> Option<f64>) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    let mut sci = String::new();
    for p in 0..17 {
        sci = format!("{:.*e}", p, x);
        if round_trip(&sci) == Some(x) {
            break;
        }
    }
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let neg = mant.starts_with('-');
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    let digits = digits.trim_end_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    let sign = if neg { "-" } else { "" };
    if !(1e-4..cutoff).contains(&x.abs()) {
        let (d0, rest) = digits.split_at(1);
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let es = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{d0}{frac}e{es}{:02}", exp.abs());
    }
    if exp >= 0 {
        let e = exp as usize + 1;
        let (int, frac) = if digits.len() > e {
            (digits[..e].to_string(), digits[e..].to_string())
        } else {
            (
                format!("{digits}{}", "0".repeat(e - digits.len())),
                "0".to_string(),
            )
        };
        format!("{sign}{int}.{frac}")
    } else {
        format!("{sign}0.{}{digits}", "0".repeat((-exp - 1) as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *seed >> 11
    }

    #[test]
    fn f16_bf16_encoder_matches_half_on_f32() {
        let mut s = 7u64;
        for _ in 0..200_000 {
            let x = f32::from_bits(lcg(&mut s) as u32);
            if x.is_nan() {
                continue;
            }
            assert_eq!(
                F16.encode(x as f64, false) as u16,
                f16::from_f32(x).to_bits(),
                "{x:e}"
            );
            assert_eq!(
                BF16.encode(x as f64, false) as u16,
                bf16::from_f32(x).to_bits(),
                "{x:e}"
            );
        }
    }

    #[test]
    fn narrow_round_trip_and_rne() {
        for d in [
            DType::F8E4M3FN,
            DType::F8E4M3FNUZ,
            DType::F8E5M2,
            DType::F8E5M2FNUZ,
            DType::F4E2M1,
        ] {
            let f = float_fmt(d).unwrap();
            for c in 0..(2 * f.sign_bit()) {
                let v = f.decode(c);
                if v.is_nan() || v.is_infinite() || (v == 0.0 && c != 0 && f.kind == Kind::Fnuz) {
                    continue;
                }
                assert_eq!(f.encode(v, true), c, "{d} code {c}");
            }
        }
        let e4 = float_fmt(DType::F8E4M3FN).unwrap();
        // 0.5 + 1/32 is a tie between 0.5 (even) and 0.5625.
        assert_eq!(e4.decode(e4.encode(0.53125, true)), 0.5);
        assert_eq!(e4.decode(e4.encode(0.59375, true)), 0.625);
        assert_eq!(e4.encode(1e6, true), 0x7E);
        assert_eq!(e4.encode(-1e6, false), 0xFF);
        assert_eq!(e4.encode(464.0, false), 0x7E); // rounds down to 448
        assert_eq!(e4.encode(480.0, false), 0x7F); // rounds up past 448
        let e5 = float_fmt(DType::F8E5M2).unwrap();
        assert_eq!(e5.encode(f64::INFINITY, false), 0x7C);
        assert_eq!(e5.encode(f64::NAN, false), 0x7E);
        assert_eq!(e5.encode(2f64.powi(-17), true), 0); // half the smallest subnormal: tie to 0
        assert_eq!(e5.encode(3.0 * 2f64.powi(-18), true), 1);
    }

    #[test]
    fn ints_and_strings() {
        let t = Tensor::from_f32(&[5], vec![-9.0, 15.0, 2.7, -2.7, 300.0]).unwrap();
        let Tensor::Packed(_, a) = cast(&t, DType::I4, true).unwrap() else {
            panic!()
        };
        assert_eq!(
            a.iter().map(|&b| b as i8).collect::<Vec<_>>(),
            vec![7, -1, 2, -2, -4]
        );
        let Tensor::I8(a) = cast(&t, DType::I8, true).unwrap() else {
            panic!()
        };
        assert_eq!(
            a.iter().copied().collect::<Vec<_>>(),
            vec![-9, 15, 2, -2, 44]
        );
        let t = Tensor::from_f32(
            &[6],
            vec![0.47892547, 1e6, 1e-7, 1e16, -0.5, f32::NEG_INFINITY],
        )
        .unwrap();
        let Tensor::Str(s) = cast(&t, DType::Str, true).unwrap() else {
            panic!()
        };
        assert_eq!(
            s.iter().cloned().collect::<Vec<_>>(),
            vec!["0.47892547", "1e+06", "1e-07", "1e+16", "-0.5", "-inf"]
        );
        let back = cast(&Tensor::Str(s), DType::F32, true).unwrap();
        assert_eq!(back, t);
        let t = Tensor::Str(
            ArrayD::from_shape_vec(
                ndarray::IxDyn(&[3]),
                vec!["+INF".into(), "NaN".into(), "1E8".into()],
            )
            .unwrap(),
        );
        let v = to_f64_vec(&t).unwrap();
        assert!(v[0] == f64::INFINITY && v[1].is_nan() && v[2] == 1e8);
    }
}
