//! Tensor data: every TensorProto data type (raw and typed fields, sub-byte formats unpacked), external
//! data confined to the model's folder, sparse tensors densified, and the serialized test-data values
//! (`.pb` inputs: TensorProto, SequenceProto, OptionalProto).
use std::path::Path;

use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};
use prost::Message;

use super::LoadOptions;
use crate::error::{Error, Result};
use crate::ir::ValueType;
use crate::proto;
use crate::tensor::{DType, Tensor, Value};

/// Checks dims and returns the element count, refusing negative dims and sizes past the limit.
pub fn checked_numel(dims: &[i64], dtype: DType, max_bytes: u64, what: &str) -> Result<usize> {
    let mut n: u128 = 1;
    for &d in dims {
        if d < 0 {
            return Err(Error::InvalidModel(format!(
                "{what}: negative dimension {d} in {dims:?}"
            )));
        }
        n = n.saturating_mul(d as u128);
    }
    let bytes = n.saturating_mul(dtype.size_in_memory() as u128);
    if bytes > max_bytes as u128 {
        return Err(Error::TooLarge {
            what: format!("{what} {dtype}{dims:?}"),
            bytes,
            limit: max_bytes as u128,
        });
    }
    Ok(n as usize)
}

/// Decodes a TensorProto of any data type, from raw_data, the typed fields, or external data.
pub fn decode_tensor(t: &proto::TensorProto, opts: &LoadOptions) -> Result<Tensor> {
    let code = t.data_type.unwrap_or(0);
    let dtype = DType::from_onnx(code).ok_or_else(|| {
        Error::InvalidModel(format!("tensor '{}': unknown data type {code}", t.name()))
    })?;
    if t.segment.is_some() {
        return Err(Error::InvalidModel(format!(
            "tensor '{}': segmented tensors are not supported",
            t.name()
        )));
    }
    let n = checked_numel(
        &t.dims,
        dtype,
        opts.max_tensor_bytes,
        &format!("tensor '{}'", t.name()),
    )?;
    let shape: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
    let external;
    let raw: Option<&[u8]> = if t.data_location() == proto::tensor_proto::DataLocation::External {
        external = read_external(t, opts)?;
        Some(&external)
    } else {
        t.raw_data.as_deref()
    };
    let bad = |what: String| {
        Error::InvalidModel(format!("tensor '{}' {dtype}{:?}: {what}", t.name(), t.dims))
    };
    let tensor = match raw {
        Some(raw) => from_raw(dtype, &shape, n, raw).map_err(bad)?,
        None => from_typed_fields(t, dtype, &shape, n).map_err(bad)?,
    };
    Ok(tensor)
}

fn read_external(t: &proto::TensorProto, opts: &LoadOptions) -> Result<Vec<u8>> {
    let name = t.name();
    let err = |m: String| Error::InvalidModel(format!("tensor '{name}' external data: {m}"));
    let mut location = None;
    let (mut offset, mut length) = (0u64, None::<u64>);
    for kv in &t.external_data {
        match kv.key() {
            "location" => location = Some(kv.value().to_string()),
            "offset" => {
                offset = kv
                    .value()
                    .parse()
                    .map_err(|_| err(format!("bad offset '{}'", kv.value())))?
            }
            "length" => {
                length = Some(
                    kv.value()
                        .parse()
                        .map_err(|_| err(format!("bad length '{}'", kv.value())))?,
                )
            }
            _ => {}
        }
    }
    let location = location.ok_or_else(|| err("no location".into()))?;
    let rel = Path::new(&location);
    if rel.is_absolute()
        || rel
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return Err(err(format!(
            "location '{location}' must be a plain relative path inside the model's folder"
        )));
    }
    let base = opts.base_dir.as_ref().ok_or_else(|| {
        err("the model was loaded from bytes, so there is no folder to read from".into())
    })?;
    let base = if base.as_os_str().is_empty() {
        Path::new(".")
    } else {
        base.as_path()
    };
    let base_real = base
        .canonicalize()
        .map_err(|e| err(format!("model folder {}: {e}", base.display())))?;
    let path = base.join(rel);
    let real = path
        .canonicalize()
        .map_err(|e| err(format!("{}: {e}", path.display())))?;
    if !real.starts_with(&base_real) {
        return Err(err(format!(
            "'{location}' resolves outside the model's folder"
        )));
    }
    let size = std::fs::metadata(&real)
        .map_err(|e| err(format!("{}: {e}", real.display())))?
        .len();
    let length = length.unwrap_or(size.saturating_sub(offset));
    if offset.checked_add(length).is_none_or(|end| end > size) {
        return Err(err(format!(
            "offset {offset} + length {length} lies outside '{location}' ({size} bytes)"
        )));
    }
    if length > opts.max_tensor_bytes {
        return Err(Error::TooLarge {
            what: format!("external data of '{name}'"),
            bytes: length as u128,
            limit: opts.max_tensor_bytes as u128,
        });
    }
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(&real).map_err(|e| err(format!("{}: {e}", real.display())))?;
    f.seek(SeekFrom::Start(offset))
        .map_err(|e| err(e.to_string()))?;
    let mut buf = vec![0u8; length as usize];
    f.read_exact(&mut buf).map_err(|e| err(e.to_string()))?;
    Ok(buf)
}

fn arr<T>(shape: &[usize], v: Vec<T>) -> std::result::Result<ArrayD<T>, String> {
    ArrayD::from_shape_vec(IxDyn(shape), v).map_err(|e| e.to_string())
}

/// Number of elements packed per byte for the sub-byte integer and float formats.
pub(crate) fn per_byte(dtype: DType) -> usize {
    match dtype {
        DType::U4 | DType::I4 | DType::F4E2M1 => 2,
        DType::U2 | DType::I2 => 4,
        _ => 1,
    }
}

/// Unpacks sub-byte elements (low bits first); signed integer formats are sign-extended.
fn unpack_bits(dtype: DType, bytes: &[u8], n: usize) -> Vec<u8> {
    let k = per_byte(dtype);
    let bits = 8 / k;
    let mask = ((1u16 << bits) - 1) as u8;
    (0..n)
        .map(|i| {
            let v = (bytes[i / k] >> ((i % k) * bits)) & mask;
            match dtype {
                DType::I4 | DType::I2 if v >> (bits - 1) == 1 => v | !mask,
                _ => v,
            }
        })
        .collect()
}

fn from_raw(
    dtype: DType,
    shape: &[usize],
    n: usize,
    raw: &[u8],
) -> std::result::Result<Tensor, String> {
    let width = match dtype {
        DType::Str => return Err("string tensors cannot use raw_data".into()),
        DType::C64 | DType::C128 => return Err("complex tensors are not supported".into()),
        DType::Bool | DType::U8 | DType::I8 => 1,
        d if d.is_narrow_float() || d.is_int() && per_byte(d) > 1 => {
            let k = per_byte(d);
            let need = n.div_ceil(k);
            if raw.len() != need {
                return Err(format!(
                    "raw_data has {} bytes, {n} elements need {need}",
                    raw.len()
                ));
            }
            return Ok(Tensor::Packed(d, arr(shape, unpack_bits(d, raw, n))?));
        }
        d => d.size_in_memory(),
    };
    if raw.len() != n * width {
        return Err(format!(
            "raw_data has {} bytes, {n} elements need {}",
            raw.len(),
            n * width
        ));
    }
    macro_rules! le {
        ($t:ty, $w:expr) => {
            raw.chunks_exact($w)
                .map(|c| <$t>::from_le_bytes(c.try_into().unwrap()))
                .collect::<Vec<$t>>()
        };
    }
    Ok(match dtype {
        DType::F32 => Tensor::F32(arr(shape, le!(f32, 4))?),
        DType::F64 => Tensor::F64(arr(shape, le!(f64, 8))?),
        DType::F16 => Tensor::F16(arr(
            shape,
            le!(u16, 2).into_iter().map(f16::from_bits).collect(),
        )?),
        DType::BF16 => Tensor::BF16(arr(
            shape,
            le!(u16, 2).into_iter().map(bf16::from_bits).collect(),
        )?),
        DType::I8 => Tensor::I8(arr(shape, raw.iter().map(|&b| b as i8).collect())?),
        DType::U8 => Tensor::U8(arr(shape, raw.to_vec())?),
        DType::Bool => Tensor::Bool(arr(shape, raw.iter().map(|&b| b != 0).collect())?),
        DType::I16 => Tensor::I16(arr(shape, le!(i16, 2))?),
        DType::U16 => Tensor::U16(arr(shape, le!(u16, 2))?),
        DType::I32 => Tensor::I32(arr(shape, le!(i32, 4))?),
        DType::U32 => Tensor::U32(arr(shape, le!(u32, 4))?),
        DType::I64 => Tensor::I64(arr(shape, le!(i64, 8))?),
        DType::U64 => Tensor::U64(arr(shape, le!(u64, 8))?),
        d => return Err(format!("raw data of type {d} is not supported")),
    })
}

fn from_typed_fields(
    t: &proto::TensorProto,
    dtype: DType,
    shape: &[usize],
    n: usize,
) -> std::result::Result<Tensor, String> {
    fn check<T>(v: &[T], n: usize, field: &str) -> std::result::Result<(), String> {
        if v.len() != n {
            Err(format!(
                "{field} has {} values, the shape needs {n}",
                v.len()
            ))
        } else {
            Ok(())
        }
    }
    let i32s = &t.int32_data;
    Ok(match dtype {
        DType::F32 => {
            check(&t.float_data, n, "float_data")?;
            Tensor::F32(arr(shape, t.float_data.clone())?)
        }
        DType::F64 => {
            check(&t.double_data, n, "double_data")?;
            Tensor::F64(arr(shape, t.double_data.clone())?)
        }
        DType::I64 => {
            check(&t.int64_data, n, "int64_data")?;
            Tensor::I64(arr(shape, t.int64_data.clone())?)
        }
        DType::U64 => {
            check(&t.uint64_data, n, "uint64_data")?;
            Tensor::U64(arr(shape, t.uint64_data.clone())?)
        }
        DType::U32 => {
            check(&t.uint64_data, n, "uint64_data")?;
            Tensor::U32(arr(
                shape,
                t.uint64_data.iter().map(|&x| x as u32).collect(),
            )?)
        }
        DType::Str => {
            check(&t.string_data, n, "string_data")?;
            Tensor::Str(arr(
                shape,
                t.string_data
                    .iter()
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect(),
            )?)
        }
        DType::C64 | DType::C128 => return Err("complex tensors are not supported".into()),
        d if per_byte(d) > 1 && i32s.len() != n => {
            // Sub-byte formats may also be stored packed, one byte of pairs per int32 value.
            check(i32s, n.div_ceil(per_byte(d)), "int32_data")?;
            let bytes: Vec<u8> = i32s.iter().map(|&x| x as u8).collect();
            Tensor::Packed(d, arr(shape, unpack_bits(d, &bytes, n))?)
        }
        d => {
            check(i32s, n, "int32_data")?;
            match d {
                DType::I32 => Tensor::I32(arr(shape, i32s.clone())?),
                DType::I16 => Tensor::I16(arr(shape, i32s.iter().map(|&x| x as i16).collect())?),
                DType::I8 => Tensor::I8(arr(shape, i32s.iter().map(|&x| x as i8).collect())?),
                DType::U16 => Tensor::U16(arr(shape, i32s.iter().map(|&x| x as u16).collect())?),
                DType::U8 => Tensor::U8(arr(shape, i32s.iter().map(|&x| x as u8).collect())?),
                DType::Bool => Tensor::Bool(arr(shape, i32s.iter().map(|&x| x != 0).collect())?),
                DType::F16 => Tensor::F16(arr(
                    shape,
                    i32s.iter().map(|&x| f16::from_bits(x as u16)).collect(),
                )?),
                DType::BF16 => Tensor::BF16(arr(
                    shape,
                    i32s.iter().map(|&x| bf16::from_bits(x as u16)).collect(),
                )?),
                DType::I4 | DType::I2 => Tensor::Packed(
                    d,
                    arr(shape, i32s.iter().map(|&x| x as i8 as u8).collect())?,
                ),
                d => Tensor::Packed(d, arr(shape, i32s.iter().map(|&x| x as u8).collect())?),
            }
        }
    })
}

/// Densifies a SparseTensorProto (indices either linear `[nnz]` or coordinates `[nnz, rank]`).
pub fn decode_sparse(s: &proto::SparseTensorProto, opts: &LoadOptions) -> Result<Tensor> {
    let values = decode_tensor(
        s.values
            .as_ref()
            .ok_or_else(|| Error::InvalidModel("sparse tensor without values".into()))?,
        opts,
    )?;
    let indices = decode_tensor(
        s.indices
            .as_ref()
            .ok_or_else(|| Error::InvalidModel("sparse tensor without indices".into()))?,
        opts,
    )?;
    let dtype = values.dtype();
    let n = checked_numel(&s.dims, dtype, opts.max_tensor_bytes, "sparse tensor")?;
    let shape: Vec<usize> = s.dims.iter().map(|&d| d as usize).collect();
    let idx = indices
        .to_i64_vec()
        .map_err(|e| Error::InvalidModel(e.to_string()))?;
    let nnz = values.len();
    let linear: Vec<usize> = if indices.rank() == 1 {
        idx.iter().map(|&i| i as usize).collect()
    } else {
        let r = shape.len();
        if idx.len() != nnz * r {
            return Err(Error::InvalidModel(
                "sparse indices do not match the values".into(),
            ));
        }
        idx.chunks(r.max(1))
            .map(|c| {
                c.iter()
                    .zip(&shape)
                    .fold(0usize, |acc, (&i, &d)| acc * d + i as usize)
            })
            .collect()
    };
    if linear.len() != nnz || linear.iter().any(|&i| i >= n) {
        return Err(Error::InvalidModel("sparse indices out of range".into()));
    }
    let mut dense = Tensor::zeros(dtype, &shape);
    dense
        .scatter_flat(&linear, &values)
        .map_err(|e| Error::InvalidModel(e.to_string()))?;
    Ok(dense)
}

/// Decodes a serialized TensorProto (test data, `quorum run --input x=file.pb`).
pub fn tensor_from_pb(bytes: &[u8], opts: &LoadOptions) -> Result<Tensor> {
    let t = proto::TensorProto::decode(bytes)
        .map_err(|e| Error::Decode(format!("not a TensorProto: {e}")))?;
    decode_tensor(&t, opts)
}

/// Decodes a serialized value whose declared type is `ty`: TensorProto, SequenceProto or OptionalProto.
pub fn value_from_pb(bytes: &[u8], ty: &ValueType, opts: &LoadOptions) -> Result<Value> {
    match ty {
        ValueType::Sequence(elem) => {
            let s = proto::SequenceProto::decode(bytes)
                .map_err(|e| Error::Decode(format!("not a SequenceProto: {e}")))?;
            let mut v = sequence_value(&s, opts)?;
            // An empty sequence carries no element type of its own: the declared one is its type.
            if let (
                Value::Sequence {
                    dtype: d @ None, ..
                },
                ValueType::Tensor { dtype, .. },
            ) = (&mut v, elem.as_ref())
            {
                *d = *dtype;
            }
            Ok(v)
        }
        ValueType::Optional(_) => {
            let o = proto::OptionalProto::decode(bytes)
                .map_err(|e| Error::Decode(format!("not an OptionalProto: {e}")))?;
            optional_value(&o, opts)
        }
        _ => Ok(Value::Tensor(tensor_from_pb(bytes, opts)?)),
    }
}

fn sequence_value(s: &proto::SequenceProto, opts: &LoadOptions) -> Result<Value> {
    if !s.sequence_values.is_empty() || !s.map_values.is_empty() || !s.optional_values.is_empty() {
        return Err(Error::Decode(
            "sequences of non-tensors are not supported".into(),
        ));
    }
    let items = s
        .tensor_values
        .iter()
        .map(|t| decode_tensor(t, opts))
        .collect::<Result<Vec<_>>>()?;
    Ok(Value::Sequence {
        dtype: items.first().map(|t| t.dtype()),
        items,
    })
}

fn optional_value(o: &proto::OptionalProto, opts: &LoadOptions) -> Result<Value> {
    let inner = if let Some(t) = &o.tensor_value {
        Some(Value::Tensor(decode_tensor(t, opts)?))
    } else if let Some(s) = &o.sequence_value {
        Some(sequence_value(s, opts)?)
    } else if let Some(v) = &o.optional_value {
        Some(optional_value(v, opts)?)
    } else {
        None
    };
    Ok(Value::Optional(inner.map(Box::new)))
}
