//! Cast and CastLike on CUDA against both oracles: every pair of the numeric dtypes the device holds,
//! from floats with fractions, negatives, NaN, infinities and values past the target's range, and
//! from integers of both signs.
use crate::harness::*;
use quorum::ir::Attr;
use quorum::{DType, Tensor};

const TYPES: [DType; 13] = [
    DType::F64,
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::U16,
    DType::U32,
    DType::U64,
    DType::Bool,
];

/// The range of integer dtype `d` as f64, clipped to ±300 (the whole range for bool).
fn int_range(d: DType) -> (f64, f64) {
    match d {
        DType::I8 => (-128.0, 127.0),
        DType::U8 => (0.0, 255.0),
        DType::U16 | DType::U32 | DType::U64 => (0.0, 300.0),
        DType::Bool => (0.0, 1.0),
        _ => (-300.0, 300.0),
    }
}

/// Seeded values of `from` for a cast to `to`: fractional floats with NaN, infinities and large
/// magnitudes mixed in where `to` is a float too; values inside both types' ranges otherwise (the
/// oracles call an out-of-range conversion to an integer undefined, as ONNX does).
fn source(from: DType, to: DType, seed: u64, shape: &[usize]) -> Tensor {
    let mut lo: f64 = -300.0;
    let mut hi: f64 = 300.0;
    for d in [from, to] {
        if !d.is_float() {
            let (l, h) = int_range(d);
            lo = lo.max(l);
            hi = hi.min(h);
        }
    }
    let base = rand_range(seed, shape, lo as f32, hi as f32 + 0.999)
        .to_f64_vec()
        .unwrap();
    let v: Vec<f64> = base
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            let x = x.clamp(lo, hi);
            match (from.is_float(), to.is_float(), i % 11) {
                (_, _, _) if from == DType::Bool => (i % 3 == 0) as i64 as f64,
                (true, true, 3) => f64::NAN,
                (true, true, 5) => f64::INFINITY,
                (true, true, 7) => -x * 1e7,
                (true, _, _) => x,
                (false, _, _) => x.trunc().clamp(lo, hi),
            }
        })
        .collect();
    Tensor::from_f64s(from, shape, v).unwrap()
}

fn code(d: DType) -> i64 {
    match d {
        DType::F32 => 1,
        DType::U8 => 2,
        DType::I8 => 3,
        DType::U16 => 4,
        DType::I16 => 5,
        DType::I32 => 6,
        DType::I64 => 7,
        DType::Bool => 9,
        DType::F16 => 10,
        DType::F64 => 11,
        DType::U32 => 12,
        DType::U64 => 13,
        DType::BF16 => 16,
        _ => unreachable!(),
    }
}

#[test]
fn cast_every_pair() {
    for (f, &from) in TYPES.iter().enumerate() {
        for (t, &to) in TYPES.iter().enumerate() {
            if from == to {
                continue;
            }
            // Integer and f64 sources to bfloat16 are left to the CPU (f64 rounding).
            let cpu_only = to == DType::BF16 && !matches!(from, DType::F32 | DType::F16);
            let shape: &[usize] = if (f + t) % 3 == 0 { &[3, 67] } else { &[1000] };
            let x = source(from, to, (f * 13 + t) as u64, shape);
            let mut c = Case::new("Cast")
                .opset(21)
                .attr("to", Attr::Int(code(to)))
                .input(x);
            if cpu_only {
                c = c.allow_fallback();
            }
            let r = c.check();
            assert_eq!(dtype(&r.outputs[0]), to, "{from} -> {to}");
        }
    }
}

/// An empty tensor, and the opset-13 form. (CastLike runs the same kernel; the oracles do not
/// cover it, so it is judged by the conformance corpus's castlike cases instead.)
#[test]
fn cast_empty_and_opset_13() {
    let x = source(DType::F32, DType::F16, 3, &[4, 9]);
    Case::new("Cast")
        .opset(13)
        .attr("to", Attr::Int(10))
        .input(x)
        .check();
    let empty = Tensor::from_f32(&[0, 3], vec![]).unwrap();
    Case::new("Cast")
        .opset(13)
        .attr("to", Attr::Int(7))
        .input(empty)
        .check();
}
