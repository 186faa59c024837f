//! How a run's outputs become files (`quorum run`, and tools that read what it wrote): one file per
//! output, named after the output, as `.npy` where numpy has a dtype for it and as ONNX protobuf
//! (`.pb`: TensorProto, SequenceProto, OptionalProto) otherwise or on request.
use std::collections::HashSet;

use crate::ir::ValueType;
use crate::tensor::Value;

/// The file format asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// `.npy` for tensors numpy has a dtype for; `.pb` for the rest (bfloat16, float8/6/4,
    /// int4/uint4, int2/uint2) and for sequences and optionals.
    #[default]
    Npy,
    /// `.pb` for every output.
    Pb,
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Format, String> {
        match s {
            "npy" => Ok(Format::Npy),
            "pb" => Ok(Format::Pb),
            other => Err(format!("'{other}' is not a format (npy or pb)")),
        }
    }
}

/// One output ready to be written.
#[derive(Debug, Clone, PartialEq)]
pub struct Encoded {
    /// `npy` or `pb`.
    pub extension: &'static str,
    pub bytes: Vec<u8>,
    /// Why a `.pb` was written where `.npy` was asked for (e.g. `numpy has no dtype for bfloat16`).
    pub fallback: Option<String>,
}

/// Encodes `value` (the output `name`, declared as `declared`) in `format`.
pub fn encode(name: &str, value: &Value, declared: Option<&ValueType>, format: Format) -> Encoded {
    let pb = |fallback: Option<String>| Encoded {
        extension: "pb",
        bytes: crate::pb::encode_value(name, value, declared),
        fallback,
    };
    match (format, value) {
        (Format::Pb, _) => pb(None),
        (Format::Npy, Value::Tensor(t)) => match crate::npy::write(t) {
            Ok(bytes) => Encoded {
                extension: "npy",
                bytes,
                fallback: None,
            },
            Err(_) => pb(Some(format!("numpy has no dtype for {}", t.dtype()))),
        },
        (Format::Npy, Value::Sequence { .. }) => pb(Some("a sequence: SequenceProto".into())),
        (Format::Npy, Value::Optional(_)) => pb(Some("an optional: OptionalProto".into())),
    }
}

/// File stems for outputs named `names`, in order: each name with characters outside
/// `[A-Za-z0-9._-]` replaced by `_` (never empty, never hidden), made unique (ignoring case, for
/// file systems that do) by a `_2`, `_3`... suffix, so that no output overwrites another.
pub fn file_stems<S: AsRef<str>>(names: &[S]) -> Vec<String> {
    let mut taken = HashSet::new();
    names
        .iter()
        .map(|n| {
            let base = safe_name(n.as_ref());
            let mut stem = base.clone();
            let mut k = 1;
            while !taken.insert(stem.to_ascii_lowercase()) {
                k += 1;
                stem = format!("{base}_{k}");
            }
            stem
        })
        .collect()
}

fn safe_name(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with('.') {
        format!("output{s}")
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::{DType, Tensor};

    #[test]
    fn stems_are_safe_and_unique() {
        assert_eq!(
            file_stems(&["out/y:0", "out_y_0", "OUT_Y_0", "", ".hidden", "a"]),
            [
                "out_y_0",
                "out_y_0_2",
                "OUT_Y_0_3",
                "output",
                "output.hidden",
                "a"
            ]
        );
    }

    #[test]
    fn npy_falls_back_to_pb_only_where_numpy_has_no_dtype() {
        let f = Value::Tensor(Tensor::from_f32(&[2], vec![1.5, -2.0]).unwrap());
        assert_eq!(encode("f", &f, None, Format::Npy).extension, "npy");
        assert_eq!(encode("f", &f, None, Format::Pb).extension, "pb");
        let bf = Value::Tensor(Tensor::zeros(DType::BF16, &[3]));
        let e = encode("bf", &bf, None, Format::Npy);
        assert_eq!(e.extension, "pb");
        assert_eq!(
            e.fallback.as_deref(),
            Some("numpy has no dtype for bfloat16")
        );
        let seq = Value::Sequence {
            dtype: Some(DType::F32),
            items: vec![],
        };
        assert_eq!(encode("s", &seq, None, Format::Npy).extension, "pb");
        assert!("npz".parse::<Format>().is_err());
    }
}
