//! Reading and writing numpy `.npy` files (format versions 1–3), for CLI inputs and outputs.
use ndarray::{ArrayD, IxDyn};

use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

fn bad(msg: impl Into<String>) -> Error {
    Error::Decode(format!("npy: {}", msg.into()))
}

/// Parses a `.npy` file's bytes.
pub fn read(bytes: &[u8]) -> Result<Tensor> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(bad("not a .npy file (bad magic)"));
    }
    let major = bytes[6];
    let (hlen, start) = match major {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        _ => return Err(bad(format!("unsupported format version {major}"))),
    };
    let header = bytes
        .get(start..start + hlen)
        .ok_or_else(|| bad("truncated header"))?;
    let header = std::str::from_utf8(header).map_err(|_| bad("header is not text"))?;
    let field = |key: &str| -> Result<&str> {
        let at = header
            .find(&format!("'{key}'"))
            .ok_or_else(|| bad(format!("header has no '{key}'")))?;
        let rest = &header[at + key.len() + 2..];
        Ok(rest[rest.find(':').ok_or_else(|| bad("malformed header"))? + 1..].trim_start())
    };
    let descr = field("descr")?;
    let descr = descr
        .strip_prefix('\'')
        .and_then(|d| d.split('\'').next())
        .ok_or_else(|| bad("malformed descr"))?;
    if field("fortran_order")?.starts_with("True") {
        return Err(bad(
            "fortran_order arrays are not supported; save with np.ascontiguousarray",
        ));
    }
    let shape_text = field("shape")?;
    let shape_text = &shape_text[1..shape_text.find(')').ok_or_else(|| bad("malformed shape"))?];
    let shape: Vec<usize> = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| bad(format!("bad dim '{s}'"))))
        .collect::<Result<_>>()?;
    let data = &bytes[start + hlen..];
    let n: usize = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| bad("shape overflows"))?;
    let little = !descr.starts_with('>');
    let code = descr.trim_start_matches(['<', '>', '|', '=']);
    if !little && !code.ends_with('1') {
        return Err(bad("big-endian arrays are not supported"));
    }
    if let Some(width) = code.strip_prefix('U') {
        let w: usize = width.parse().map_err(|_| bad("bad unicode width"))?;
        let need = n.checked_mul(w * 4).ok_or_else(|| bad("size overflows"))?;
        let data = data.get(..need).ok_or_else(|| bad("truncated data"))?;
        let strings = data
            .chunks(w * 4)
            .map(|c| {
                c.chunks_exact(4)
                    .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .take_while(|&u| u != 0)
                    .filter_map(char::from_u32)
                    .collect::<String>()
            })
            .collect();
        return Ok(Tensor::Str(
            ArrayD::from_shape_vec(IxDyn(&shape), strings).map_err(|e| bad(e.to_string()))?,
        ));
    }
    let (dtype, width) = match code {
        "f4" => (DType::F32, 4),
        "f8" => (DType::F64, 8),
        "f2" => (DType::F16, 2),
        "i1" => (DType::I8, 1),
        "i2" => (DType::I16, 2),
        "i4" => (DType::I32, 4),
        "i8" => (DType::I64, 8),
        "u1" => (DType::U8, 1),
        "u2" => (DType::U16, 2),
        "u4" => (DType::U32, 4),
        "u8" => (DType::U64, 8),
        "b1" => (DType::Bool, 1),
        other => return Err(bad(format!("unsupported dtype '{other}'"))),
    };
    let need = n.checked_mul(width).ok_or_else(|| bad("size overflows"))?;
    let data = data.get(..need).ok_or_else(|| {
        bad(format!(
            "truncated data: {} bytes, {need} needed",
            data.len()
        ))
    })?;
    let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    let proto = crate::proto::TensorProto {
        dims,
        data_type: Some(dtype.onnx()),
        raw_data: Some(data.to_vec()),
        ..Default::default()
    };
    crate::loader::decode_tensor(&proto, &Default::default())
}

fn descr(t: &Tensor) -> Result<String> {
    Ok(match t {
        Tensor::F32(_) => "<f4".into(),
        Tensor::F64(_) => "<f8".into(),
        Tensor::F16(_) => "<f2".into(),
        Tensor::I8(_) => "|i1".into(),
        Tensor::I16(_) => "<i2".into(),
        Tensor::I32(_) => "<i4".into(),
        Tensor::I64(_) => "<i8".into(),
        Tensor::U8(_) => "|u1".into(),
        Tensor::U16(_) => "<u2".into(),
        Tensor::U32(_) => "<u4".into(),
        Tensor::U64(_) => "<u8".into(),
        Tensor::Bool(_) => "|b1".into(),
        Tensor::Str(a) => format!(
            "<U{}",
            a.iter()
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
                .max(1)
        ),
        other => return Err(bad(format!("numpy has no dtype for {}", other.dtype()))),
    })
}

/// Serializes a tensor as a version 1 `.npy` file (strings as numpy unicode arrays).
pub fn write(t: &Tensor) -> Result<Vec<u8>> {
    let d = descr(t)?;
    let shape = match t.shape() {
        [] => "()".to_string(),
        [x] => format!("({x},)"),
        s => format!(
            "({})",
            s.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '{d}', 'fortran_order': False, 'shape': {shape}, }}");
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    macro_rules! le {
        ($a:expr, $f:expr) => {
            for x in $a.iter() {
                out.extend_from_slice(&$f(x));
            }
        };
    }
    match t {
        Tensor::F32(a) => le!(a, |x: &f32| x.to_le_bytes()),
        Tensor::F64(a) => le!(a, |x: &f64| x.to_le_bytes()),
        Tensor::F16(a) => le!(a, |x: &half::f16| x.to_bits().to_le_bytes()),
        Tensor::I8(a) => le!(a, |x: &i8| x.to_le_bytes()),
        Tensor::I16(a) => le!(a, |x: &i16| x.to_le_bytes()),
        Tensor::I32(a) => le!(a, |x: &i32| x.to_le_bytes()),
        Tensor::I64(a) => le!(a, |x: &i64| x.to_le_bytes()),
        Tensor::U8(a) => le!(a, |x: &u8| x.to_le_bytes()),
        Tensor::U16(a) => le!(a, |x: &u16| x.to_le_bytes()),
        Tensor::U32(a) => le!(a, |x: &u32| x.to_le_bytes()),
        Tensor::U64(a) => le!(a, |x: &u64| x.to_le_bytes()),
        Tensor::Bool(a) => le!(a, |x: &bool| [*x as u8]),
        Tensor::Str(a) => {
            let w: usize = d[2..].parse().unwrap_or(1);
            for s in a.iter() {
                let mut chars: Vec<u32> = s.chars().map(|c| c as u32).collect();
                chars.resize(w, 0);
                chars
                    .iter()
                    .for_each(|c| out.extend_from_slice(&c.to_le_bytes()));
            }
        }
        other => return Err(bad(format!("numpy has no dtype for {}", other.dtype()))),
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_numbers_and_strings() {
        let f = Tensor::from_f32(&[2, 3], vec![1.5, -2.0, 3.25, 4.0, 5.5, -6.75]).unwrap();
        assert_eq!(read(&write(&f).unwrap()).unwrap(), f);
        let i = Tensor::from_i64(&[3], vec![-7, 0, 9]).unwrap();
        assert_eq!(read(&write(&i).unwrap()).unwrap(), i);
        let s = Tensor::Str(
            ArrayD::from_shape_vec(IxDyn(&[2]), vec!["héllo".to_string(), "x".into()]).unwrap(),
        );
        assert_eq!(read(&write(&s).unwrap()).unwrap(), s);
        let scalar = Tensor::F32(ArrayD::from_elem(IxDyn(&[]), 2.5));
        assert_eq!(read(&write(&scalar).unwrap()).unwrap(), scalar);
    }

    #[test]
    fn truncated_files_are_errors() {
        let f = Tensor::from_f32(&[4], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
        let bytes = write(&f).unwrap();
        for cut in [0, 5, 9, 20, bytes.len() - 1] {
            assert!(read(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }
}
