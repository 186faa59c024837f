//! Writing values as ONNX protobuf: `TensorProto` for every dtype a [`Tensor`] holds (including those
//! numpy has no dtype for: bfloat16, the float8/6/4 formats, int4/uint4, int2/uint2), and
//! `SequenceProto` / `OptionalProto` for sequences and optionals. The inverse of
//! [`crate::loader::value_from_pb`]: what is written here reads back bit for bit.
use prost::Message;

use crate::ir::ValueType;
use crate::loader::per_byte;
use crate::proto;
use crate::tensor::{DType, Tensor, Value};

/// `SequenceProto.DataType` / `OptionalProto.DataType`: what the container holds.
const ELEM_TENSOR: i32 = 1;
const ELEM_SEQUENCE: i32 = 3;
const ELEM_OPTIONAL: i32 = 5;

/// A tensor as a `TensorProto` named `name`: raw little-endian data for numbers (sub-byte formats
/// packed low bits first, as ONNX stores them), `string_data` for strings.
pub fn tensor_proto(name: &str, t: &Tensor) -> proto::TensorProto {
    let mut p = proto::TensorProto {
        name: Some(name.to_string()),
        dims: t.shape().iter().map(|&d| d as i64).collect(),
        data_type: Some(t.dtype().onnx()),
        ..Default::default()
    };
    match t {
        Tensor::Str(a) => p.string_data = a.iter().map(|s| s.as_bytes().to_vec()).collect(),
        t => p.raw_data = Some(raw_bytes(t)),
    }
    p
}

/// The bytes `raw_data` holds for a non-string tensor.
pub fn raw_bytes(t: &Tensor) -> Vec<u8> {
    macro_rules! le {
        ($a:expr, $f:expr) => {
            $a.iter().flat_map($f).collect()
        };
    }
    match t {
        Tensor::F32(a) => le!(a, |x: &f32| x.to_le_bytes()),
        Tensor::F64(a) => le!(a, |x: &f64| x.to_le_bytes()),
        Tensor::F16(a) => le!(a, |x: &half::f16| x.to_bits().to_le_bytes()),
        Tensor::BF16(a) => le!(a, |x: &half::bf16| x.to_bits().to_le_bytes()),
        Tensor::I8(a) => le!(a, |x: &i8| x.to_le_bytes()),
        Tensor::I16(a) => le!(a, |x: &i16| x.to_le_bytes()),
        Tensor::I32(a) => le!(a, |x: &i32| x.to_le_bytes()),
        Tensor::I64(a) => le!(a, |x: &i64| x.to_le_bytes()),
        Tensor::U8(a) => a.iter().copied().collect(),
        Tensor::U16(a) => le!(a, |x: &u16| x.to_le_bytes()),
        Tensor::U32(a) => le!(a, |x: &u32| x.to_le_bytes()),
        Tensor::U64(a) => le!(a, |x: &u64| x.to_le_bytes()),
        Tensor::Bool(a) => a.iter().map(|&b| b as u8).collect(),
        Tensor::Packed(d, a) => pack_bits(*d, a.iter().copied()),
        Tensor::Str(_) => Vec::new(),
    }
}

/// Packs one-element-per-byte narrow values the way ONNX stores them: 2 per byte for 4-bit
/// formats, 4 per byte for 2-bit ones, first element in the low bits; 8-bit formats unchanged.
fn pack_bits(dtype: DType, values: impl ExactSizeIterator<Item = u8>) -> Vec<u8> {
    let k = per_byte(dtype);
    if k == 1 {
        return values.collect();
    }
    let bits = 8 / k;
    let mask = ((1u16 << bits) - 1) as u8;
    let mut out = vec![0u8; values.len().div_ceil(k)];
    for (i, v) in values.enumerate() {
        out[i / k] |= (v & mask) << ((i % k) * bits);
    }
    out
}

/// A value as the protobuf message its kind calls for, named `name`: `TensorProto`,
/// `SequenceProto` or `OptionalProto`. `declared` (the graph's type for the value, if any) gives the
/// element kind of an empty optional.
pub fn encode_value(name: &str, v: &Value, declared: Option<&ValueType>) -> Vec<u8> {
    match v {
        Value::Tensor(t) => tensor_proto(name, t).encode_to_vec(),
        Value::Sequence { items, .. } => sequence_proto(name, items).encode_to_vec(),
        Value::Optional(inner) => optional_proto(name, inner.as_deref(), declared).encode_to_vec(),
    }
}

fn sequence_proto(name: &str, items: &[Tensor]) -> proto::SequenceProto {
    proto::SequenceProto {
        name: Some(name.to_string()),
        elem_type: Some(ELEM_TENSOR),
        tensor_values: items.iter().map(|t| tensor_proto("", t)).collect(),
        ..Default::default()
    }
}

fn optional_proto(
    name: &str,
    inner: Option<&Value>,
    declared: Option<&ValueType>,
) -> proto::OptionalProto {
    let declared_elem = match declared {
        Some(ValueType::Optional(e)) => Some(e.as_ref()),
        _ => None,
    };
    let mut p = proto::OptionalProto {
        name: Some(name.to_string()),
        ..Default::default()
    };
    match inner {
        Some(Value::Tensor(t)) => {
            p.elem_type = Some(ELEM_TENSOR);
            p.tensor_value = Some(tensor_proto("", t));
        }
        Some(Value::Sequence { items, .. }) => {
            p.elem_type = Some(ELEM_SEQUENCE);
            p.sequence_value = Some(sequence_proto("", items));
        }
        Some(Value::Optional(v)) => {
            p.elem_type = Some(ELEM_OPTIONAL);
            p.optional_value = Some(Box::new(optional_proto("", v.as_deref(), declared_elem)));
        }
        None => {
            p.elem_type = match declared_elem {
                Some(ValueType::Tensor { .. }) => Some(ELEM_TENSOR),
                Some(ValueType::Sequence(_)) => Some(ELEM_SEQUENCE),
                Some(ValueType::Optional(_)) => Some(ELEM_OPTIONAL),
                _ => None,
            }
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_bit_values_pack_low_nibble_first_and_keep_only_their_bits() {
        // int4 -1 is held sign-extended (0xff); only its low nibble is stored.
        assert_eq!(
            pack_bits(DType::I4, [0xffu8, 0x07, 0x08].into_iter()),
            [0x7f, 0x08]
        );
        assert_eq!(
            pack_bits(DType::U2, [1u8, 2, 3, 0, 1].into_iter()),
            [0b0011_1001, 0b01]
        );
        assert_eq!(
            pack_bits(DType::F8E5M2, [0xaau8, 0x01].into_iter()),
            [0xaa, 0x01]
        );
    }
}
