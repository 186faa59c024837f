//! Seeded input generation for tools that run a model without user data (`quorum bench`, `quorum run`
//! with inputs left out): values follow each declared input's dtype and shape, never all zeros.
use std::collections::HashMap;

use ndarray::{ArrayD, IxDyn};

use crate::error::{Error, Result};
use crate::ir::{Dim, Graph, ValueType};
use crate::tensor::{DType, Tensor, Value};

/// SplitMix64: small, seedable, good enough for test data.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
}

/// Resolves a declared shape: symbols from `dims` (default 1), unknown dims 1.
pub fn concrete_shape(shape: &[Dim], dims: &HashMap<String, i64>) -> Result<Vec<usize>> {
    shape
        .iter()
        .map(|d| match d {
            Dim::Fixed(v) if *v >= 0 => Ok(*v as usize),
            Dim::Fixed(v) => Err(Error::Input {
                name: String::new(),
                msg: format!("declared dim {v} is negative"),
            }),
            Dim::Symbol(s) => Ok(dims.get(s).copied().unwrap_or(1).max(0) as usize),
            Dim::Unknown => Ok(1),
        })
        .collect()
}

/// A random tensor of `dtype` and `shape`: floats uniform in [-1, 1), integers in [0, 8), bools mixed.
pub fn random_tensor(dtype: DType, shape: &[usize], rng: &mut Rng) -> Result<Tensor> {
    let n = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| Error::Input {
            name: String::new(),
            msg: format!("shape {shape:?} has more elements than this machine can address"),
        })?;
    let s = IxDyn(shape);
    let ints = |rng: &mut Rng| (rng.next_u64() % 8) as i64;
    let err = |e: ndarray::ShapeError| Error::Input {
        name: String::new(),
        msg: e.to_string(),
    };
    Ok(match dtype {
        DType::F32 => Tensor::F32(
            ArrayD::from_shape_vec(s, (0..n).map(|_| rng.uniform() as f32).collect())
                .map_err(err)?,
        ),
        DType::F64 => Tensor::F64(
            ArrayD::from_shape_vec(s, (0..n).map(|_| rng.uniform()).collect()).map_err(err)?,
        ),
        DType::F16 => Tensor::F16(
            ArrayD::from_shape_vec(
                s,
                (0..n).map(|_| half::f16::from_f64(rng.uniform())).collect(),
            )
            .map_err(err)?,
        ),
        DType::BF16 => Tensor::BF16(
            ArrayD::from_shape_vec(
                s,
                (0..n)
                    .map(|_| half::bf16::from_f64(rng.uniform()))
                    .collect(),
            )
            .map_err(err)?,
        ),
        DType::I16 => Tensor::I16(
            ArrayD::from_shape_vec(s, (0..n).map(|_| ints(rng) as i16).collect()).map_err(err)?,
        ),
        DType::U16 => Tensor::U16(
            ArrayD::from_shape_vec(s, (0..n).map(|_| ints(rng) as u16).collect()).map_err(err)?,
        ),
        DType::U32 => Tensor::U32(
            ArrayD::from_shape_vec(s, (0..n).map(|_| ints(rng) as u32).collect()).map_err(err)?,
        ),
        DType::U64 => Tensor::U64(
            ArrayD::from_shape_vec(s, (0..n).map(|_| ints(rng) as u64).collect()).map_err(err)?,
        ),
        DType::Bool => Tensor::Bool(
            ArrayD::from_shape_vec(s, (0..n).map(|_| rng.next_u64() & 1 == 1).collect())
                .map_err(err)?,
        ),
        DType::I64 => Tensor::I64(
            ArrayD::from_shape_vec(s, (0..n).map(|_| ints(rng)).collect()).map_err(err)?,
        ),
        DType::I32 => Tensor::I32(
            ArrayD::from_shape_vec(s, (0..n).map(|_| ints(rng) as i32).collect()).map_err(err)?,
        ),
        DType::U8 => Tensor::U8(
            ArrayD::from_shape_vec(s, (0..n).map(|_| ints(rng) as u8).collect()).map_err(err)?,
        ),
        DType::I8 => Tensor::I8(
            ArrayD::from_shape_vec(s, (0..n).map(|_| ints(rng) as i8).collect()).map_err(err)?,
        ),
        DType::Str => Tensor::Str(
            ArrayD::from_shape_vec(s, (0..n).map(|_| format!("s{}", ints(rng))).collect())
                .map_err(err)?,
        ),
        d => {
            return Err(Error::Input {
                name: String::new(),
                msg: format!("cannot generate {d} inputs"),
            });
        }
    })
}

/// Generates every runtime input of `graph` not already in `given`.
pub fn generate(
    graph: &Graph,
    given: &[(String, Value)],
    dims: &HashMap<String, i64>,
    seed: u64,
) -> Result<Vec<(String, Value)>> {
    generate_within(graph, given, dims, seed, crate::DEFAULT_MAX_TENSOR_BYTES)
}

/// [`generate`], refusing (with [`Error::TooLarge`]) any input over `max_tensor_bytes` before allocating
/// it: declared shapes come from the model, which may ask for anything.
pub fn generate_within(
    graph: &Graph,
    given: &[(String, Value)],
    dims: &HashMap<String, i64>,
    seed: u64,
    max_tensor_bytes: u64,
) -> Result<Vec<(String, Value)>> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    for info in graph.runtime_inputs() {
        if given.iter().any(|(n, _)| n == &info.name) {
            continue;
        }
        let named = |e: Error| match e {
            Error::Input { msg, .. } => Error::Input {
                name: info.name.clone(),
                msg,
            },
            e => e,
        };
        let (dtype, shape) = match &info.ty {
            ValueType::Tensor {
                dtype: Some(d),
                shape,
            } => (
                *d,
                concrete_shape(shape.as_deref().unwrap_or(&[]), dims).map_err(named)?,
            ),
            other => {
                return Err(Error::Input {
                    name: info.name.clone(),
                    msg: format!("cannot generate a value of type {other}; pass it with --input"),
                });
            }
        };
        let bytes = shape.iter().fold(dtype.size_in_memory() as u128, |a, &d| {
            a.saturating_mul(d as u128)
        });
        if bytes > max_tensor_bytes as u128 {
            return Err(Error::TooLarge {
                what: format!("generated input '{}' of shape {shape:?}", info.name),
                bytes,
                limit: max_tensor_bytes as u128,
            });
        }
        out.push((
            info.name.clone(),
            Value::Tensor(random_tensor(dtype, &shape, &mut rng).map_err(named)?),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_numeric_dtype_is_generated_in_its_own_type() {
        use DType::*;
        for d in [
            F32, F64, F16, BF16, I8, I16, I32, I64, U8, U16, U32, U64, Bool,
        ] {
            let mut rng = Rng::new(7);
            let t = random_tensor(d, &[4, 16], &mut rng).unwrap();
            assert_eq!((t.dtype(), t.shape()), (d, &[4usize, 16][..]), "{d}");
            let v = t.to_f64_vec().unwrap();
            assert!(v.iter().any(|&x| x != 0.0), "{d}: all zeros");
            if d.is_float() {
                assert!(v.iter().all(|x| x.abs() <= 1.0), "{d}: outside [-1, 1]");
            }
        }
        // A packed format has no generator: a typed error, not a panic.
        assert!(random_tensor(C64, &[2], &mut Rng::new(7)).is_err());
    }
}
