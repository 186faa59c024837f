//! Output elements whose value the ONNX specification leaves undefined: the runner does not compare
//! them, and counts them in the case's report.
//!
//! Cast's specification (`onnx.defs.get_schema('Cast').doc`), on numeric conversions:
//!
//! > Casting from floating point to:
//! >   * floating point: +/- infinity if OOR (out of range).
//! >   * fixed point: undefined if OOR.
//!
//! CastLike casts to the type of its second input and shares these rules. So for a graph output
//! produced by a Cast or CastLike node whose input is a graph input fed by the test data, of a float
//! type, and whose output is a fixed-point (integer) type, an output element is undefined when its
//! input is NaN or ±infinity, or when the input truncated toward zero lies outside the target type's
//! range (int4 holds -8..=7, so 7.9 is defined and -9.0 is not). Every other element is compared as
//! usual. The expected data for such elements depends on the numpy and ml_dtypes releases that wrote
//! it (ml_dtypes 0.7 gives 0 for out-of-range int4, earlier releases wrapped), and Quorum wraps: the
//! specification allows both.
use quorum::ir::Model;
use quorum::{DType, Tensor, Value};

/// The elements of one output that are not compared, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Undefined {
    /// One flag per element (flat index) of the output.
    pub mask: Vec<bool>,
    pub count: usize,
    /// e.g. `Cast float16 -> int4 of NaN, ±inf or out-of-range values`.
    pub why: String,
}

/// The range of a fixed-point type as `[lo, hi)` (powers of two, exact in f64).
fn fixed_point_range(d: DType) -> Option<(f64, f64)> {
    let (bits, signed) = match d {
        DType::I2 => (2, true),
        DType::U2 => (2, false),
        DType::I4 => (4, true),
        DType::U4 => (4, false),
        DType::I8 => (8, true),
        DType::U8 => (8, false),
        DType::I16 => (16, true),
        DType::U16 => (16, false),
        DType::I32 => (32, true),
        DType::U32 => (32, false),
        DType::I64 => (64, true),
        DType::U64 => (64, false),
        _ => return None,
    };
    Some(if signed {
        (-(2f64.powi(bits - 1)), 2f64.powi(bits - 1))
    } else {
        (0.0, 2f64.powi(bits))
    })
}

/// A float tensor's elements as f64 (narrow formats decoded exactly); `None` for other types.
fn float_values(t: &Tensor) -> Option<Vec<f64>> {
    match t {
        Tensor::Packed(d, a) if d.is_narrow_float() => Some(
            a.iter()
                .map(|&b| quorum::ops::cast::decode_narrow(*d, b))
                .collect(),
        ),
        t if t.dtype().is_float() => t.to_f64_vec().ok(),
        _ => None,
    }
}

/// Which elements of a float→fixed-point cast of `input` to `target` are undefined (NaN, ±inf, or
/// out of range after truncation); `None` when the cast is not float→fixed-point.
pub fn cast_mask(input: &Tensor, target: DType) -> Option<Vec<bool>> {
    let (lo, hi) = fixed_point_range(target)?;
    let values = float_values(input)?;
    Some(
        values
            .iter()
            .map(|x| {
                let t = x.trunc();
                // NaN fails both comparisons, so it counts as out of range too.
                !(t >= lo && t < hi)
            })
            .collect(),
    )
}

/// The undefined elements of graph output `k` of `model`, given the run's inputs and the expected
/// output (whose dtype is the cast's target); `None` when every element is defined.
pub fn for_output(
    model: &Model,
    inputs: &[(String, Value)],
    k: usize,
    expected: &Value,
) -> Option<Undefined> {
    let g = &model.graph;
    let out = g.outputs.get(k)?;
    let node = g
        .nodes
        .iter()
        .find(|n| n.outputs.first() == Some(&out.name))?;
    if !node.domain.is_empty() || !matches!(node.op_type.as_str(), "Cast" | "CastLike") {
        return None;
    }
    let src = node.inputs.first()?;
    let (_, Value::Tensor(input)) = inputs.iter().find(|(name, _)| name == src)? else {
        return None;
    };
    let target = match expected {
        Value::Tensor(t) => t.dtype(),
        Value::Optional(Some(v)) => v.as_tensor()?.dtype(),
        _ => return None,
    };
    let mask = cast_mask(input, target)?;
    if mask.len() != expected.as_tensor().map_or(mask.len(), Tensor::len) {
        return None;
    }
    let count = mask.iter().filter(|&&m| m).count();
    (count > 0).then(|| Undefined {
        mask,
        count,
        why: format!(
            "{} {} -> {} of NaN, ±inf or out-of-range values",
            node.op_type,
            input.dtype(),
            target
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_nan_and_infinity_are_undefined_in_range_values_are_not() {
        let x = Tensor::from_f32(
            &[9],
            vec![
                7.9,
                -8.0,
                -8.9,
                -9.0,
                8.0,
                f32::NAN,
                f32::INFINITY,
                -0.5,
                15.5,
            ],
        )
        .unwrap();
        let m = cast_mask(&x, DType::I4).unwrap();
        assert_eq!(
            m,
            [false, false, false, true, true, true, true, false, true]
        );
        let u = cast_mask(&x, DType::U4).unwrap();
        // -0.5 truncates to 0 (defined); 15.5 to 15 (defined); -8.0 is out of range.
        assert_eq!(
            u,
            [false, true, true, true, false, true, true, false, false]
        );
        let wide = cast_mask(&x, DType::I64).unwrap();
        assert_eq!(wide.iter().filter(|&&b| b).count(), 2, "NaN and inf only");
    }

    #[test]
    fn the_64_bit_bounds_are_exact() {
        let x = Tensor::from_f64s(
            DType::F64,
            &[3],
            vec![-(2f64.powi(63)), 2f64.powi(63), 2f64.powi(64) - 4096.0],
        )
        .unwrap();
        assert_eq!(cast_mask(&x, DType::I64).unwrap(), [false, true, true]);
        assert_eq!(cast_mask(&x, DType::U64).unwrap(), [true, false, false]);
    }

    #[test]
    fn casts_that_are_defined_everywhere_have_no_mask() {
        let x = Tensor::from_f32(&[2], vec![f32::NAN, 1e9]).unwrap();
        assert!(cast_mask(&x, DType::Bool).is_none());
        assert!(cast_mask(&x, DType::F16).is_none());
        let ints = Tensor::from_i64(&[1], vec![300]).unwrap();
        assert!(
            cast_mask(&ints, DType::I8).is_none(),
            "fixed point wraps: defined"
        );
    }
}
