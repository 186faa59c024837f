//! Tensors: a dtype-tagged n-dimensional array (ndarray) and the values a graph passes around.
use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};

use crate::error::{OpError, OpResult};

/// ONNX element types (TensorProto.DataType), numbered as the specification numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32 = 1,
    U8 = 2,
    I8 = 3,
    U16 = 4,
    I16 = 5,
    I32 = 6,
    I64 = 7,
    Str = 8,
    Bool = 9,
    F16 = 10,
    F64 = 11,
    U32 = 12,
    U64 = 13,
    C64 = 14,
    C128 = 15,
    BF16 = 16,
    F8E4M3FN = 17,
    F8E4M3FNUZ = 18,
    F8E5M2 = 19,
    F8E5M2FNUZ = 20,
    U4 = 21,
    I4 = 22,
    F4E2M1 = 23,
    F8E8M0 = 24,
    U2 = 25,
    I2 = 26,
    F6E2M3 = 27,
    F6E3M2 = 28,
}

impl DType {
    pub fn from_onnx(code: i32) -> Option<DType> {
        use DType::*;
        Some(match code {
            1 => F32,
            2 => U8,
            3 => I8,
            4 => U16,
            5 => I16,
            6 => I32,
            7 => I64,
            8 => Str,
            9 => Bool,
            10 => F16,
            11 => F64,
            12 => U32,
            13 => U64,
            14 => C64,
            15 => C128,
            16 => BF16,
            17 => F8E4M3FN,
            18 => F8E4M3FNUZ,
            19 => F8E5M2,
            20 => F8E5M2FNUZ,
            21 => U4,
            22 => I4,
            23 => F4E2M1,
            24 => F8E8M0,
            25 => U2,
            26 => I2,
            27 => F6E2M3,
            28 => F6E3M2,
            _ => return None,
        })
    }

    pub fn onnx(self) -> i32 {
        self as i32
    }

    /// The name ONNX and numpy users know (`float32`, `int64`, ...).
    pub fn name(self) -> &'static str {
        use DType::*;
        match self {
            F32 => "float32",
            U8 => "uint8",
            I8 => "int8",
            U16 => "uint16",
            I16 => "int16",
            I32 => "int32",
            I64 => "int64",
            Str => "string",
            Bool => "bool",
            F16 => "float16",
            F64 => "float64",
            U32 => "uint32",
            U64 => "uint64",
            C64 => "complex64",
            C128 => "complex128",
            BF16 => "bfloat16",
            F8E4M3FN => "float8e4m3fn",
            F8E4M3FNUZ => "float8e4m3fnuz",
            F8E5M2 => "float8e5m2",
            F8E5M2FNUZ => "float8e5m2fnuz",
            U4 => "uint4",
            I4 => "int4",
            F4E2M1 => "float4e2m1",
            F8E8M0 => "float8e8m0",
            U2 => "uint2",
            I2 => "int2",
            F6E2M3 => "float6e2m3",
            F6E3M2 => "float6e3m2",
        }
    }

    /// Bytes one element occupies in memory here (narrow formats are held one per byte).
    pub fn size_in_memory(self) -> usize {
        use DType::*;
        match self {
            F64 | I64 | U64 | C64 => 8,
            C128 => 16,
            F32 | I32 | U32 => 4,
            F16 | BF16 | I16 | U16 => 2,
            Str => 24,
            _ => 1,
        }
    }

    pub fn is_float(self) -> bool {
        use DType::*;
        matches!(self, F32 | F64 | F16 | BF16) || self.is_narrow_float()
    }

    /// The float formats narrower than 16 bits, held here as their bit patterns.
    pub fn is_narrow_float(self) -> bool {
        use DType::*;
        matches!(
            self,
            F8E4M3FN | F8E4M3FNUZ | F8E5M2 | F8E5M2FNUZ | F4E2M1 | F8E8M0 | F6E2M3 | F6E3M2
        )
    }

    pub fn is_int(self) -> bool {
        use DType::*;
        matches!(
            self,
            U8 | I8 | U16 | I16 | I32 | I64 | U32 | U64 | U4 | I4 | U2 | I2
        )
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A dense tensor. Narrow formats (float8/6/4, int4/2) keep one element per byte in `Packed`: the bit
/// pattern for floats, the value for integers (two's complement for the signed ones).
#[derive(Debug, Clone, PartialEq)]
pub enum Tensor {
    F32(ArrayD<f32>),
    F64(ArrayD<f64>),
    F16(ArrayD<f16>),
    BF16(ArrayD<bf16>),
    I8(ArrayD<i8>),
    I16(ArrayD<i16>),
    I32(ArrayD<i32>),
    I64(ArrayD<i64>),
    U8(ArrayD<u8>),
    U16(ArrayD<u16>),
    U32(ArrayD<u32>),
    U64(ArrayD<u64>),
    Bool(ArrayD<bool>),
    Str(ArrayD<String>),
    Packed(DType, ArrayD<u8>),
}

/// Applies an expression to the array inside any tensor variant.
#[macro_export]
macro_rules! with_array {
    ($t:expr, $a:ident => $e:expr) => {
        match $t {
            $crate::tensor::Tensor::F32($a) => $e,
            $crate::tensor::Tensor::F64($a) => $e,
            $crate::tensor::Tensor::F16($a) => $e,
            $crate::tensor::Tensor::BF16($a) => $e,
            $crate::tensor::Tensor::I8($a) => $e,
            $crate::tensor::Tensor::I16($a) => $e,
            $crate::tensor::Tensor::I32($a) => $e,
            $crate::tensor::Tensor::I64($a) => $e,
            $crate::tensor::Tensor::U8($a) => $e,
            $crate::tensor::Tensor::U16($a) => $e,
            $crate::tensor::Tensor::U32($a) => $e,
            $crate::tensor::Tensor::U64($a) => $e,
            $crate::tensor::Tensor::Bool($a) => $e,
            $crate::tensor::Tensor::Str($a) => $e,
            $crate::tensor::Tensor::Packed(_, $a) => $e,
        }
    };
}

/// Like [`with_array!`] but rebuilds a tensor of the same variant from the expression's array.
#[macro_export]
macro_rules! map_array {
    ($t:expr, $a:ident => $e:expr) => {
        match $t {
            $crate::tensor::Tensor::F32($a) => $crate::tensor::Tensor::F32($e),
            $crate::tensor::Tensor::F64($a) => $crate::tensor::Tensor::F64($e),
            $crate::tensor::Tensor::F16($a) => $crate::tensor::Tensor::F16($e),
            $crate::tensor::Tensor::BF16($a) => $crate::tensor::Tensor::BF16($e),
            $crate::tensor::Tensor::I8($a) => $crate::tensor::Tensor::I8($e),
            $crate::tensor::Tensor::I16($a) => $crate::tensor::Tensor::I16($e),
            $crate::tensor::Tensor::I32($a) => $crate::tensor::Tensor::I32($e),
            $crate::tensor::Tensor::I64($a) => $crate::tensor::Tensor::I64($e),
            $crate::tensor::Tensor::U8($a) => $crate::tensor::Tensor::U8($e),
            $crate::tensor::Tensor::U16($a) => $crate::tensor::Tensor::U16($e),
            $crate::tensor::Tensor::U32($a) => $crate::tensor::Tensor::U32($e),
            $crate::tensor::Tensor::U64($a) => $crate::tensor::Tensor::U64($e),
            $crate::tensor::Tensor::Bool($a) => $crate::tensor::Tensor::Bool($e),
            $crate::tensor::Tensor::Str($a) => $crate::tensor::Tensor::Str($e),
            $crate::tensor::Tensor::Packed(d, $a) => $crate::tensor::Tensor::Packed(*d, $e),
        }
    };
}

/// Like [`map_array!`] for two tensors that must share a variant (e.g. the inputs of Where or Concat).
/// Evaluates to `OpResult<Tensor>`.
#[macro_export]
macro_rules! map_array2 {
    ($x:expr, $y:expr, $a:ident, $b:ident => $e:expr) => {{
        use $crate::tensor::Tensor as T;
        match ($x, $y) {
            (T::F32($a), T::F32($b)) => Ok(T::F32($e)),
            (T::F64($a), T::F64($b)) => Ok(T::F64($e)),
            (T::F16($a), T::F16($b)) => Ok(T::F16($e)),
            (T::BF16($a), T::BF16($b)) => Ok(T::BF16($e)),
            (T::I8($a), T::I8($b)) => Ok(T::I8($e)),
            (T::I16($a), T::I16($b)) => Ok(T::I16($e)),
            (T::I32($a), T::I32($b)) => Ok(T::I32($e)),
            (T::I64($a), T::I64($b)) => Ok(T::I64($e)),
            (T::U8($a), T::U8($b)) => Ok(T::U8($e)),
            (T::U16($a), T::U16($b)) => Ok(T::U16($e)),
            (T::U32($a), T::U32($b)) => Ok(T::U32($e)),
            (T::U64($a), T::U64($b)) => Ok(T::U64($e)),
            (T::Bool($a), T::Bool($b)) => Ok(T::Bool($e)),
            (T::Str($a), T::Str($b)) => Ok(T::Str($e)),
            (T::Packed(d, $a), T::Packed(d2, $b)) if d == d2 => Ok(T::Packed(*d, $e)),
            (x, y) => Err($crate::error::OpError::Invalid(format!(
                "operands have different dtypes: {} and {}",
                x.dtype(),
                y.dtype()
            ))),
        }
    }};
}

/// Applies a generic float expression to f32/f64/f16/bf16 tensors; other dtypes are an error.
#[macro_export]
macro_rules! map_float {
    ($t:expr, $a:ident => $e:expr) => {
        match $t {
            $crate::tensor::Tensor::F32($a) => Ok($crate::tensor::Tensor::F32($e)),
            $crate::tensor::Tensor::F64($a) => Ok($crate::tensor::Tensor::F64($e)),
            $crate::tensor::Tensor::F16($a) => Ok($crate::tensor::Tensor::F16($e)),
            $crate::tensor::Tensor::BF16($a) => Ok($crate::tensor::Tensor::BF16($e)),
            other => Err($crate::error::OpError::Unsupported(format!(
                "dtype {} (expected a float type)",
                other.dtype()
            ))),
        }
    };
}

/// Applies a generic numeric expression to every int and float variant (no bool, string, packed).
#[macro_export]
macro_rules! map_numeric {
    ($t:expr, $a:ident => $e:expr) => {
        match $t {
            $crate::tensor::Tensor::F32($a) => Ok($crate::tensor::Tensor::F32($e)),
            $crate::tensor::Tensor::F64($a) => Ok($crate::tensor::Tensor::F64($e)),
            $crate::tensor::Tensor::F16($a) => Ok($crate::tensor::Tensor::F16($e)),
            $crate::tensor::Tensor::BF16($a) => Ok($crate::tensor::Tensor::BF16($e)),
            $crate::tensor::Tensor::I8($a) => Ok($crate::tensor::Tensor::I8($e)),
            $crate::tensor::Tensor::I16($a) => Ok($crate::tensor::Tensor::I16($e)),
            $crate::tensor::Tensor::I32($a) => Ok($crate::tensor::Tensor::I32($e)),
            $crate::tensor::Tensor::I64($a) => Ok($crate::tensor::Tensor::I64($e)),
            $crate::tensor::Tensor::U8($a) => Ok($crate::tensor::Tensor::U8($e)),
            $crate::tensor::Tensor::U16($a) => Ok($crate::tensor::Tensor::U16($e)),
            $crate::tensor::Tensor::U32($a) => Ok($crate::tensor::Tensor::U32($e)),
            $crate::tensor::Tensor::U64($a) => Ok($crate::tensor::Tensor::U64($e)),
            other => Err($crate::error::OpError::Unsupported(format!(
                "dtype {} (expected a numeric type)",
                other.dtype()
            ))),
        }
    };
}

/// `f` of every element of `a` in row-major order: through the storage where it is contiguous
/// (an `ArrayD` iterator recomputes an n-dimensional index per element, several times slower).
fn map_elems<T: Copy, U>(a: &ArrayD<T>, f: impl Fn(T) -> U) -> Vec<U> {
    match a.as_slice() {
        Some(s) => s.iter().map(|&x| f(x)).collect(),
        None => a.iter().map(|&x| f(x)).collect(),
    }
}

impl Tensor {
    pub fn dtype(&self) -> DType {
        match self {
            Tensor::F32(_) => DType::F32,
            Tensor::F64(_) => DType::F64,
            Tensor::F16(_) => DType::F16,
            Tensor::BF16(_) => DType::BF16,
            Tensor::I8(_) => DType::I8,
            Tensor::I16(_) => DType::I16,
            Tensor::I32(_) => DType::I32,
            Tensor::I64(_) => DType::I64,
            Tensor::U8(_) => DType::U8,
            Tensor::U16(_) => DType::U16,
            Tensor::U32(_) => DType::U32,
            Tensor::U64(_) => DType::U64,
            Tensor::Bool(_) => DType::Bool,
            Tensor::Str(_) => DType::Str,
            Tensor::Packed(d, _) => *d,
        }
    }

    pub fn shape(&self) -> &[usize] {
        with_array!(self, a => a.shape())
    }

    pub fn rank(&self) -> usize {
        self.shape().len()
    }

    pub fn len(&self) -> usize {
        with_array!(self, a => a.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An all-default tensor (zeros, false, empty strings) of the given dtype and shape.
    pub fn zeros(dtype: DType, shape: &[usize]) -> Tensor {
        let s = IxDyn(shape);
        use DType::*;
        match dtype {
            F32 => Tensor::F32(ArrayD::zeros(s)),
            F64 => Tensor::F64(ArrayD::zeros(s)),
            F16 => Tensor::F16(ArrayD::from_elem(s, f16::ZERO)),
            BF16 => Tensor::BF16(ArrayD::from_elem(s, bf16::ZERO)),
            I8 => Tensor::I8(ArrayD::zeros(s)),
            I16 => Tensor::I16(ArrayD::zeros(s)),
            I32 => Tensor::I32(ArrayD::zeros(s)),
            I64 => Tensor::I64(ArrayD::zeros(s)),
            U8 => Tensor::U8(ArrayD::zeros(s)),
            U16 => Tensor::U16(ArrayD::zeros(s)),
            U32 => Tensor::U32(ArrayD::zeros(s)),
            U64 => Tensor::U64(ArrayD::zeros(s)),
            Bool => Tensor::Bool(ArrayD::from_elem(s, false)),
            Str => Tensor::Str(ArrayD::from_elem(s, String::new())),
            d => Tensor::Packed(d, ArrayD::zeros(s)),
        }
    }

    pub fn from_f32(shape: &[usize], v: Vec<f32>) -> OpResult<Tensor> {
        Ok(Tensor::F32(ArrayD::from_shape_vec(IxDyn(shape), v)?))
    }

    pub fn from_i64(shape: &[usize], v: Vec<i64>) -> OpResult<Tensor> {
        Ok(Tensor::I64(ArrayD::from_shape_vec(IxDyn(shape), v)?))
    }

    pub fn scalar_i64(v: i64) -> Tensor {
        Tensor::I64(ArrayD::from_elem(IxDyn(&[]), v))
    }

    /// [`Tensor::reshape`] of a tensor given up: a standard-layout array keeps its storage (no copy).
    /// `None` for packed sub-byte tensors (their storage is not one element per slot) and element
    /// counts that differ; the tensor is then returned in `Err` unchanged.
    pub fn into_shape(self, shape: &[usize]) -> std::result::Result<Tensor, Tensor> {
        fn go<T: Clone>(a: ArrayD<T>, shape: &[usize]) -> ArrayD<T> {
            if a.is_standard_layout() {
                // Same element count and standard layout: cannot fail.
                match a.into_shape_with_order(IxDyn(shape)) {
                    Ok(b) => b,
                    Err(_) => unreachable!("checked element count"),
                }
            } else {
                let v: Vec<T> = a.iter().cloned().collect();
                ArrayD::from_shape_vec(IxDyn(shape), v).expect("checked element count")
            }
        }
        let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        if n != Some(self.len()) || matches!(self, Tensor::Packed(..)) {
            return Err(self);
        }
        macro_rules! each {
            ($($v:ident),*) => {
                match self {
                    $(Tensor::$v(a) => Tensor::$v(go(a, shape)),)*
                    Tensor::Packed(..) => unreachable!("refused above"),
                }
            };
        }
        Ok(each!(
            F32, F64, F16, BF16, I8, I16, I32, I64, U8, U16, U32, U64, Bool, Str
        ))
    }

    /// Reshapes without changing the element order (row-major).
    pub fn reshape(&self, shape: &[usize]) -> OpResult<Tensor> {
        let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        if n != Some(self.len()) {
            return Err(OpError::Invalid(format!(
                "cannot reshape {:?} ({} elements) to {:?}",
                self.shape(),
                self.len(),
                shape
            )));
        }
        Ok(map_array!(self, a => {
            let v: Vec<_> = if a.is_standard_layout() { a.as_slice().unwrap().to_vec() } else { a.iter().cloned().collect() };
            ArrayD::from_shape_vec(IxDyn(shape), v)?
        }))
    }

    /// Integer contents as i64 (shape inputs, indices, axes). Floats are refused.
    pub fn to_i64_vec(&self) -> OpResult<Vec<i64>> {
        Ok(match self {
            Tensor::I64(a) => map_elems(a, |x| x),
            Tensor::I32(a) => map_elems(a, |x| x as i64),
            Tensor::I16(a) => map_elems(a, |x| x as i64),
            Tensor::I8(a) => map_elems(a, |x| x as i64),
            Tensor::U8(a) => map_elems(a, |x| x as i64),
            Tensor::U16(a) => map_elems(a, |x| x as i64),
            Tensor::U32(a) => map_elems(a, |x| x as i64),
            Tensor::U64(a) => map_elems(a, |x| x as i64),
            Tensor::Bool(a) => map_elems(a, |x| x as i64),
            other => {
                return Err(OpError::Invalid(format!(
                    "expected an integer tensor, got {}",
                    other.dtype()
                )));
            }
        })
    }

    /// Numeric contents as f64 (any int or float dtype).
    pub fn to_f64_vec(&self) -> OpResult<Vec<f64>> {
        Ok(match self {
            Tensor::F32(a) => map_elems(a, |x| x as f64),
            Tensor::F64(a) => map_elems(a, |x| x),
            Tensor::F16(a) => map_elems(a, |x| x.to_f64()),
            Tensor::BF16(a) => map_elems(a, |x| x.to_f64()),
            Tensor::Str(_) | Tensor::Packed(..) => {
                return Err(OpError::Invalid(format!(
                    "expected a numeric tensor, got {}",
                    self.dtype()
                )));
            }
            Tensor::Bool(a) => map_elems(a, |x| x as u8 as f64),
            other => other.to_i64_vec()?.into_iter().map(|x| x as f64).collect(),
        })
    }

    /// A one-line description for errors and the CLI, e.g. `float32[1,3,224,224]`.
    pub fn describe(&self) -> String {
        format!("{}{:?}", self.dtype(), self.shape())
    }
}

macro_rules! tensor_from {
    ($($t:ty => $v:ident),*) => {$(
        impl From<ArrayD<$t>> for Tensor {
            fn from(a: ArrayD<$t>) -> Tensor { Tensor::$v(a) }
        }
    )*};
}
tensor_from!(f32 => F32, f64 => F64, f16 => F16, bf16 => BF16, i8 => I8, i16 => I16, i32 => I32, i64 => I64,
    u8 => U8, u16 => U16, u32 => U32, u64 => U64, bool => Bool, String => Str);

/// What flows along a graph edge: a tensor, a sequence of tensors, or an optional value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Tensor(Tensor),
    /// A sequence; `dtype` is its element type when known (an empty sequence still has one).
    Sequence {
        dtype: Option<DType>,
        items: Vec<Tensor>,
    },
    Optional(Option<Box<Value>>),
}

impl Value {
    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            Value::Tensor(t) => Some(t),
            _ => None,
        }
    }

    pub fn into_tensor(self) -> Option<Tensor> {
        match self {
            Value::Tensor(t) => Some(t),
            _ => None,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Value::Tensor(t) => t.describe(),
            Value::Sequence { items, .. } => format!("sequence[{}]", items.len()),
            Value::Optional(None) => "optional(none)".into(),
            Value::Optional(Some(v)) => format!("optional({})", v.describe()),
        }
    }
}

impl From<Tensor> for Value {
    fn from(t: Tensor) -> Value {
        Value::Tensor(t)
    }
}

impl Tensor {
    /// Writes `src`'s elements (in row-major order) to the flat positions `positions` of `self`.
    pub fn scatter_flat(&mut self, positions: &[usize], src: &Tensor) -> OpResult<()> {
        let n = self.len();
        if positions.len() != src.len() || positions.iter().any(|&p| p >= n) {
            return Err(OpError::Invalid(
                "scatter positions do not match the source or the target".into(),
            ));
        }
        macro_rules! go {
            ($($v:ident),*) => {
                match (self, src) {
                    $((Tensor::$v(d), Tensor::$v(s)) => {
                        let d = d.as_slice_mut().ok_or_else(|| OpError::Invalid("non-contiguous target".into()))?;
                        for (&p, v) in positions.iter().zip(s.iter()) { d[p] = v.clone(); }
                    })*
                    (Tensor::Packed(a, d), Tensor::Packed(b, s)) if a == b => {
                        let d = d.as_slice_mut().ok_or_else(|| OpError::Invalid("non-contiguous target".into()))?;
                        for (&p, v) in positions.iter().zip(s.iter()) { d[p] = *v; }
                    }
                    (d, s) => return Err(OpError::Invalid(format!("cannot write {} into {}", s.dtype(), d.dtype()))),
                }
            };
        }
        go!(
            F32, F64, F16, BF16, I8, I16, I32, I64, U8, U16, U32, U64, Bool, Str
        );
        Ok(())
    }
}

impl Tensor {
    /// Builds a tensor of `dtype` from f64 values (floats rounded, ints truncated, bools `!= 0`).
    pub fn from_f64s(dtype: DType, shape: &[usize], v: Vec<f64>) -> OpResult<Tensor> {
        let s = IxDyn(shape);
        macro_rules! ints {
            ($v:ident, $t:ty) => {
                Tensor::$v(ArrayD::from_shape_vec(
                    s,
                    v.into_iter().map(|x| x as $t).collect(),
                )?)
            };
        }
        Ok(match dtype {
            DType::F32 => ints!(F32, f32),
            DType::F64 => Tensor::F64(ArrayD::from_shape_vec(s, v)?),
            DType::F16 => Tensor::F16(ArrayD::from_shape_vec(
                s,
                v.into_iter().map(f16::from_f64).collect(),
            )?),
            DType::BF16 => Tensor::BF16(ArrayD::from_shape_vec(
                s,
                v.into_iter().map(bf16::from_f64).collect(),
            )?),
            DType::I8 => ints!(I8, i8),
            DType::I16 => ints!(I16, i16),
            DType::I32 => ints!(I32, i32),
            DType::I64 => ints!(I64, i64),
            DType::U8 => ints!(U8, u8),
            DType::U16 => ints!(U16, u16),
            DType::U32 => ints!(U32, u32),
            DType::U64 => ints!(U64, u64),
            DType::Bool => Tensor::Bool(ArrayD::from_shape_vec(
                s,
                v.into_iter().map(|x| x != 0.0).collect(),
            )?),
            d => return Err(OpError::Unsupported(format!("output dtype {d}"))),
        })
    }
}

/// The bytes of a host tensor in row-major order, or `None` for strings and packed (narrow)
/// types: what a device copies, a pinned tensor holds (`crate::pinned`) and a host copy writes.
pub fn tensor_bytes(t: &Tensor) -> Option<std::borrow::Cow<'_, [u8]>> {
    fn raw<T: Copy>(a: &ArrayD<T>) -> std::borrow::Cow<'_, [u8]> {
        // Plain-old-data element types only (callers below): their bytes are their representation,
        // so a contiguous array is borrowed as it lies (a run's input goes to the staging buffer
        // in one copy) and any other layout is gathered once.
        let bytes = |s: &[T]| -> &[u8] {
            // SAFETY: `s` is a live slice of `size_of_val(s)` initialised bytes, and every `T`
            // here (floats, integers, bool, f16/bf16) has no padding.
            unsafe { std::slice::from_raw_parts(s.as_ptr() as *const u8, std::mem::size_of_val(s)) }
        };
        match a.as_slice() {
            Some(s) => std::borrow::Cow::Borrowed(bytes(s)),
            None => std::borrow::Cow::Owned(bytes(&a.iter().copied().collect::<Vec<T>>()).to_vec()),
        }
    }
    Some(match t {
        Tensor::F32(a) => raw(a),
        Tensor::F64(a) => raw(a),
        Tensor::F16(a) => raw(a),
        Tensor::BF16(a) => raw(a),
        Tensor::I8(a) => raw(a),
        Tensor::I16(a) => raw(a),
        Tensor::I32(a) => raw(a),
        Tensor::I64(a) => raw(a),
        Tensor::U8(a) => raw(a),
        Tensor::U16(a) => raw(a),
        Tensor::U32(a) => raw(a),
        Tensor::U64(a) => raw(a),
        // A bool is one byte, 0 or 1.
        Tensor::Bool(a) => raw(a),
        Tensor::Str(_) | Tensor::Packed(..) => return None,
    })
}
