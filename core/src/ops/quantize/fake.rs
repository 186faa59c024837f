//! `com.quorum` QuantizeDequantize: a QuantizeLinear → DequantizeLinear pair of one scale and
//! zero point each, the graph rewrite `qdq-pair` makes of a QDQ model's activations
//! (`runtime/src/optimize/qdq.rs`). One pass over the tensor instead of two, and no 8-bit tensor in
//! between; the same bits as the pair, because both compute [`FakeQuant::apply`]'s formula
//! (QuantizeLinear's f32 path calls the same `quantize_level`).
//!
//! Attribute `params`: `[scale, zero point, lo, hi, dequantize scale, dequantize zero point]`, the
//! two nodes' constants and the quantized type's range (integers of at most 16 bits). The output is
//! f32, DequantizeLinear's type for an f32 scale. Inputs: f32, and f16, bf16 and i32, which
//! QuantizeLinear divides in f32 (numpy's promotion with an f32 scale), so they take the f32 path
//! once widened; f64, which it divides in f64, takes the formula in f64.
use quorum_kernels::Activation;
use quorum_kernels::activation::FakeQuant;

use crate::error::OpResult;
use crate::ops::broadcast;
use crate::ops::cast::widen;
use crate::ops::{OpCtx, QUORUM_DOMAIN, Registry, input, single};
use crate::tensor::{Tensor, Value};
use crate::{bail, unsupported};

pub const OP: &str = "QuantizeDequantize";

pub fn register(r: &mut Registry) {
    r.add(QUORUM_DOMAIN, OP, quantize_dequantize);
}

/// The pair's constants from six parameters (the order of [`params`]), checked: finite scales, and
/// integer zero points and range of at most 16 bits with the zero points inside the range.
pub fn from_params(p: &[f32]) -> OpResult<FakeQuant> {
    let &[scale, zero, lo, hi, dq_scale, dq_zero] = p else {
        bail!(
            "QuantizeDequantize takes 6 parameters (scale, zero point, lo, hi, dequantize scale, dequantize zero point), got {p:?}"
        )
    };
    let int16 = |v: f32| v.fract() == 0.0 && v.abs() <= 65_535.0;
    if !(int16(zero) && int16(lo) && int16(hi) && int16(dq_zero) && lo <= zero && zero <= hi) {
        bail!(
            "QuantizeDequantize: zero point {zero} and range [{lo}, {hi}] must be integers of at most 16 bits, the zero point inside the range (dequantize zero point {dq_zero})"
        );
    }
    if !(scale.is_finite() && dq_scale.is_finite()) {
        bail!("QuantizeDequantize: scales {scale} and {dq_scale} must be finite");
    }
    Ok(FakeQuant {
        scale,
        zero,
        lo,
        hi,
        dq_scale,
        dq_zero,
    })
}

/// The six parameters of `q`, in [`from_params`]'s order.
pub fn params(q: FakeQuant) -> Vec<f32> {
    vec![q.scale, q.zero, q.lo, q.hi, q.dq_scale, q.dq_zero]
}

fn quantize_dequantize(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let q = from_params(&ctx.attr_opt_floats("params")?.unwrap_or_default())?;
    // The f32 forms on the widest vectors this CPU has, each output written once.
    let act = Activation::FakeQuant(q);
    let f32s = |x: &[f32], y: &mut [std::mem::MaybeUninit<f32>]| act.map(x, y);
    single(Tensor::F32(match input(inputs, 0)? {
        Tensor::F32(a) => broadcast::unary_slices(a, f32s),
        Tensor::F16(a) => broadcast::unary_slices(&widen(a), f32s),
        Tensor::BF16(a) => broadcast::unary_slices(&widen(a), f32s),
        // i32 → f32 rounds once, as QuantizeLinear's f32 division of the exact f64 value does.
        Tensor::I32(a) => broadcast::unary_slices(&a.mapv(|v| v as f32), f32s),
        Tensor::F64(a) => broadcast::unary(a, |v| level_f64(q, v)),
        other => unsupported!(
            "QuantizeDequantize of {} (QuantizeLinear takes float and int32 inputs)",
            other.dtype()
        ),
    }))
}

/// The pair for an f64 input: QuantizeLinear divides in f64 and rounds ties to even, then
/// DequantizeLinear's product is exact in f64 and rounded once to f32.
fn level_f64(q: FakeQuant, x: f64) -> f32 {
    let r = x / q.scale as f64;
    let level = if r.is_nan() {
        q.zero as f64
    } else {
        (r.round_ties_even() + q.zero as f64).clamp(q.lo as f64, q.hi as f64)
    };
    ((level - q.dq_zero as f64) * q.dq_scale as f64) as f32
}

#[cfg(test)]
mod tests {
    use ndarray::ArrayD;

    use super::*;
    use crate::ir::Attr;
    use crate::ops::testing::{run_kernel, seeded_f32};
    use crate::tensor::DType;

    /// The pairs tried: (quantized type, scale, zero point, dequantize scale, dequantize zero
    /// point); the last two differ from the first two in some, as nothing stops a model's doing.
    const PAIRS: [(DType, f32, f32, f32, f32); 5] = [
        (DType::U8, 0.05, 128.0, 0.05, 128.0),
        (DType::I8, 0.0731, -3.0, 0.0731, -3.0),
        (DType::U8, 0.1, 0.0, 0.02, 7.0),
        (DType::U16, 0.001, 30_000.0, 0.001, 30_000.0),
        (DType::I16, 0.5, -7.0, 0.25, 3.0),
    ];

    fn range(d: DType) -> (f32, f32) {
        let (lo, hi) = crate::ops::quantize::int_range(d).unwrap();
        (lo as f32, hi as f32)
    }

    fn zero_point(d: DType, z: f32) -> Tensor {
        let t = Tensor::from_f32(&[], vec![z]).unwrap();
        crate::ops::cast::cast(&t, d, true).unwrap()
    }

    /// Seeded values past both ends of every range, the ties of each scale (k + ½ steps, which
    /// QuantizeLinear rounds to even) and their neighbours an ulp away, and NaN, ±∞, ±0 and a subnormal; long enough to be split
    /// across threads.
    fn inputs(s: f32) -> Vec<f32> {
        let mut v = seeded_f32(7, 40_000, -20.0, 20.0);
        for k in -300..300 {
            let tie = (k as f32 + 0.5) * s;
            v.extend([tie.next_down(), tie, tie.next_up()]);
        }
        v.extend([
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            1e-40,
            1e30,
            -1e30,
        ]);
        v
    }

    /// QuantizeLinear then DequantizeLinear, the registered kernels one after the other.
    fn pair(x: &Tensor, (d, s, z, ds, dz): (DType, f32, f32, f32, f32)) -> Vec<u32> {
        let scalar = |v: f32| Some(Tensor::from_f32(&[], vec![v]).unwrap());
        let q = run_kernel(
            super::super::quantize_linear,
            "QuantizeLinear",
            19,
            vec![],
            vec![Some(x.clone()), scalar(s), Some(zero_point(d, z))],
            1,
        )
        .unwrap();
        let y = run_kernel(
            super::super::dequantize_linear,
            "DequantizeLinear",
            19,
            vec![],
            vec![Some(q[0].clone()), scalar(ds), Some(zero_point(d, dz))],
            1,
        )
        .unwrap();
        bits(&y[0])
    }

    fn fused(x: &Tensor, (d, s, z, ds, dz): (DType, f32, f32, f32, f32)) -> OpResult<Vec<u32>> {
        let (lo, hi) = range(d);
        let y = run_kernel(
            quantize_dequantize,
            OP,
            1,
            vec![("params", Attr::Floats(vec![s, z, lo, hi, ds, dz]))],
            vec![Some(x.clone())],
            1,
        )?;
        Ok(bits(&y[0]))
    }

    fn bits(t: &Tensor) -> Vec<u32> {
        assert_eq!(t.dtype(), DType::F32);
        t.to_f64_vec()
            .unwrap()
            .iter()
            .map(|&v| (v as f32).to_bits())
            .collect()
    }

    /// The fused node equals the pair bit for bit for every pair, on f32 (contiguous and
    /// transposed), f16, bf16, i32 and f64 inputs.
    #[test]
    fn the_fused_pair_equals_quantize_then_dequantize() {
        for p in PAIRS {
            let v = inputs(p.1);
            let n = v.len();
            let x = Tensor::from_f32(&[n], v.clone()).unwrap();
            assert_eq!(fused(&x, p).unwrap(), pair(&x, p), "f32 {p:?}");
            // A transposed view: the pair's QuantizeLinear takes its general path then.
            let m = ArrayD::from_shape_vec(vec![n / 8, 8], v[..n / 8 * 8].to_vec()).unwrap();
            let t = Tensor::F32(m.reversed_axes());
            assert_eq!(fused(&t, p).unwrap(), pair(&t, p), "transposed {p:?}");
            for d in [DType::F16, DType::BF16, DType::I32, DType::F64] {
                let xd = crate::ops::cast::cast(&x, d, true).unwrap();
                assert_eq!(fused(&xd, p).unwrap(), pair(&xd, p), "{d} {p:?}");
            }
        }
    }

    /// The check above catches a fused node that multiplies by the scale's reciprocal instead of
    /// dividing (a common fast form, off by one level wherever x·(1/s) rounds across a level's
    /// edge), and one that rounds ties away from zero.
    #[test]
    fn the_comparison_catches_a_reciprocal_scale_and_ties_away_from_zero() {
        let p = PAIRS[2];
        let v = inputs(p.1);
        let x = Tensor::from_f32(&[v.len()], v.clone()).unwrap();
        let want = pair(&x, p);
        let (lo, hi) = range(p.0);
        let reciprocal: Vec<u32> = v
            .iter()
            .map(|&x| {
                let r = (x * (1.0 / p.1)).round_ties_even();
                let q = if r.is_nan() {
                    p.2
                } else {
                    (r + p.2).clamp(lo, hi)
                };
                ((q - p.4) * p.3).to_bits()
            })
            .collect();
        assert_ne!(reciprocal, want);
        let away: Vec<u32> = v
            .iter()
            .map(|&x| {
                let r = (x / p.1).round();
                let q = if r.is_nan() {
                    p.2
                } else {
                    (r + p.2).clamp(lo, hi)
                };
                ((q - p.4) * p.3).to_bits()
            })
            .collect();
        assert_ne!(away, want);
    }

    /// Malformed parameters are refused with an error naming them, never a panic.
    #[test]
    fn bad_parameters_are_refused() {
        let x = Tensor::from_f32(&[2], vec![1.0, 2.0]).unwrap();
        for params in [
            vec![0.1, 0.0, 0.0, 255.0, 0.1],
            vec![0.1, 0.5, 0.0, 255.0, 0.1, 0.0],
            vec![0.1, 300.0, 0.0, 255.0, 0.1, 0.0],
            vec![f32::NAN, 0.0, 0.0, 255.0, 0.1, 0.0],
            vec![0.1, 0.0, 0.0, 1e9, 0.1, 0.0],
        ] {
            let r = run_kernel(
                quantize_dequantize,
                OP,
                1,
                vec![("params", Attr::Floats(params.clone()))],
                vec![Some(x.clone())],
                1,
            );
            assert!(r.is_err(), "{params:?}");
        }
        let u8s = crate::ops::cast::cast(&x, DType::U8, true).unwrap();
        assert!(fused(&u8s, PAIRS[0]).is_err());
    }
}
