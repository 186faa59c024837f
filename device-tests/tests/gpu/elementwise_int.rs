//! Integer and bool elementwise ops on CUDA. Values the oracles hold exactly (they compute in f64, so
//! 64-bit values stay within ±2^52 and products within 2^53) are judged by both oracles; wrapping
//! beyond that, `MIN / -1`, `|MIN|` and 64-bit values at the types' limits are checked bit for bit
//! against the CPU kernels.
use ndarray::{ArrayD, IxDyn};
use quorum::{DType, Tensor};

use crate::harness::*;

const INTS: [DType; 8] = [
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::U16,
    DType::U32,
    DType::U64,
];

/// Operand shapes, broadcasting included.
const PAIRS: &[(&[usize], &[usize])] = &[
    (&[7], &[7]),
    (&[3, 5], &[5]),
    (&[2, 1, 4], &[3, 1]),
    (&[1], &[6, 7]),
    (&[2, 3, 257], &[2, 3, 257]),
];

fn signed(d: DType) -> bool {
    matches!(d, DType::I8 | DType::I16 | DType::I32 | DType::I64)
}

fn bits(d: DType) -> u32 {
    match d {
        DType::I8 | DType::U8 => 8,
        DType::I16 | DType::U16 => 16,
        DType::I32 | DType::U32 => 32,
        _ => 64,
    }
}

/// The type's lowest and highest values.
fn limits(d: DType) -> (i128, i128) {
    let b = bits(d);
    if signed(d) {
        (-(1i128 << (b - 1)), (1i128 << (b - 1)) - 1)
    } else {
        (0, (1i128 << b) - 1)
    }
}

/// The type's range, cut to ±`cap` (values the oracles hold exactly when `cap` ≤ 2^52).
fn range(d: DType, cap: i128) -> (i128, i128) {
    let (lo, hi) = limits(d);
    (lo.max(-cap), hi.min(cap))
}

/// A tensor of `d` holding `v` (each value wrapped into the type; bool is `v != 0`).
pub fn int_tensor(d: DType, shape: &[usize], v: &[i128]) -> Tensor {
    let s = IxDyn(shape);
    macro_rules! arr {
        ($t:ty) => {
            ArrayD::from_shape_vec(s, v.iter().map(|&x| x as $t).collect()).unwrap()
        };
    }
    match d {
        DType::I8 => Tensor::I8(arr!(i8)),
        DType::I16 => Tensor::I16(arr!(i16)),
        DType::I32 => Tensor::I32(arr!(i32)),
        DType::I64 => Tensor::I64(arr!(i64)),
        DType::U8 => Tensor::U8(arr!(u8)),
        DType::U16 => Tensor::U16(arr!(u16)),
        DType::U32 => Tensor::U32(arr!(u32)),
        DType::U64 => Tensor::U64(arr!(u64)),
        DType::Bool => {
            Tensor::Bool(ArrayD::from_shape_vec(s, v.iter().map(|&x| x != 0).collect()).unwrap())
        }
        other => panic!("not an integer type: {other}"),
    }
}

/// Seeded values in `[lo, hi]`.
fn rand_vals(seed: u64, n: usize, (lo, hi): (i128, i128)) -> Vec<i128> {
    let mut rng = quorum::inputs::Rng::new(seed);
    let span = (hi - lo + 1) as u128;
    (0..n)
        .map(|_| lo + ((rng.next_u64() as u128) % span) as i128)
        .collect()
}

fn rand_int(seed: u64, d: DType, shape: &[usize], r: (i128, i128)) -> Tensor {
    let n = shape.iter().product();
    int_tensor(d, shape, &rand_vals(seed, n, r))
}

fn scalar(d: DType, v: i128) -> Tensor {
    int_tensor(d, &[], &[v])
}

/// Add, Sub and Sum wrap across the whole type; Mul wraps with factors below 2^26 (their products
/// stay exact in the oracles' f64); Max and Min over the whole type.
#[test]
fn int_arithmetic_wraps() {
    for (di, &d) in INTS.iter().enumerate() {
        let wide = range(d, 1 << 52);
        let small = range(d, 1 << 26);
        for (p, (a, b)) in PAIRS.iter().enumerate() {
            let seed = (di * 100 + p * 10) as u64;
            for (o, op) in ["Add", "Sub", "Max", "Min"].iter().enumerate() {
                let s = seed + o as u64;
                // The independent oracle does not wrap 64-bit results: u64 differences stay >= 0.
                let (ra, rb) = if d == DType::U64 && *op == "Sub" {
                    ((1 << 51, 1 << 52), (0, 1 << 51))
                } else {
                    (wide, wide)
                };
                Case::new(op)
                    .input(rand_int(s, d, a, ra))
                    .input(rand_int(s + 1000, d, b, rb))
                    .check();
            }
            Case::new("Mul")
                .input(rand_int(seed + 5, d, a, small))
                .input(rand_int(seed + 1005, d, b, small))
                .check();
        }
        // Three 64-bit terms below 2^51 sum exactly in f64.
        let terms = range(d, 1 << 51);
        for op in ["Sum", "Max", "Min"] {
            Case::new(op)
                .input(rand_int(di as u64 + 7, d, &[4, 5], terms))
                .input(rand_int(di as u64 + 8, d, &[5], terms))
                .input(rand_int(di as u64 + 9, d, &[4, 1], terms))
                .check();
            Case::new(op)
                .input(rand_int(di as u64 + 10, d, &[3, 4], terms))
                .check();
        }
    }
}

/// Dividend and divisor pairs of one shape: divisors a mix of small values and the type's range,
/// never 0 (an error on the CPU), and no `MIN / -1` (the oracles disagree on its wrap; it is
/// checked against the CPU in `int_extremes_match_cpu_bits`).
fn div_operands(seed: u64, d: DType, n: usize) -> (Vec<i128>, Vec<i128>) {
    let wide = range(d, 1 << 52);
    let x = rand_vals(seed, n, wide);
    let small = rand_vals(seed + 1, n, if signed(d) { (-9, 9) } else { (0, 9) });
    let big = rand_vals(seed + 2, n, wide);
    let mut y: Vec<i128> = (0..n)
        .map(|i| if i % 3 == 0 { big[i] } else { small[i] })
        .collect();
    for (i, v) in y.iter_mut().enumerate() {
        if *v == 0 {
            *v = if signed(d) && i % 2 == 0 { -7 } else { 7 };
        }
        if *v == -1 && x[i] == limits(d).0 {
            *v = -2;
        }
    }
    (x, y)
}

/// Div truncates; Mod takes the divisor's sign (`fmod=0`) or the dividend's (`fmod=1`).
#[test]
fn int_division_and_mod() {
    for (di, &d) in INTS.iter().enumerate() {
        for (s, shape) in [&[7usize][..], &[3, 5], &[2, 3, 257]].iter().enumerate() {
            let n = shape.iter().product();
            let (x, y) = div_operands((di * 10 + s) as u64, d, n);
            let (x, y) = (int_tensor(d, shape, &x), int_tensor(d, shape, &y));
            Case::new("Div").input(x.clone()).input(y.clone()).check();
            for fmod in [0, 1] {
                Case::new("Mod")
                    .attr_i("fmod", fmod)
                    .input(x.clone())
                    .input(y.clone())
                    .check();
            }
        }
        // A divisor broadcast along rows, as a constant (through the weight cache).
        let x = rand_int(di as u64 + 50, d, &[4, 5], range(d, 1 << 52));
        let y = int_tensor(
            d,
            &[5],
            &[3, 7, 2, 9, 5].map(|v| if signed(d) { -v } else { v }),
        );
        Case::new("Div")
            .input(x.clone())
            .constant(y.clone())
            .check();
        Case::new("Mod").input(x).constant(y).check();
    }
}

/// A zero anywhere in an integer divisor is the CPU's error, and the device's.
#[test]
fn int_division_by_zero_is_an_error() {
    for d in [DType::I32, DType::U8, DType::I64, DType::U64] {
        let x = rand_int(3, d, &[2, 5], range(d, 1000));
        let y = int_tensor(d, &[5], &[3, 1, 0, 4, 2]);
        for (op, fmod) in [("Div", None), ("Mod", Some(0)), ("Mod", Some(1))] {
            let mut case = Case::new(op);
            if let Some(f) = fmod {
                case = case.attr_i("fmod", f);
            }
            let e = case.input(x.clone()).input(y.clone()).fails();
            assert!(e.contains("division by zero"), "{op} {d}: {e}");
        }
    }
}

/// Abs, Neg, Sign and Relu; `MIN` is left to the CPU comparison (the oracles disagree on `|MIN|`),
/// as is Neg of unsigned values (ONNX has none; the CPU wraps).
#[test]
fn int_unary() {
    for (di, &d) in INTS.iter().enumerate() {
        let (lo, hi) = range(d, 1 << 52);
        let r = (if signed(d) { lo + 1 } else { lo }, hi);
        for (s, shape) in [&[1usize][..], &[7], &[3, 5], &[2, 3, 257]]
            .iter()
            .enumerate()
        {
            // Small values too, so that zeros and both signs are common.
            let n: usize = shape.iter().product();
            let mut v = rand_vals((di * 10 + s) as u64, n, r);
            let tiny = rand_vals(
                (di * 10 + s + 500) as u64,
                n,
                if signed(d) { (-2, 2) } else { (0, 2) },
            );
            for i in (0..n).step_by(2) {
                v[i] = tiny[i];
            }
            let x = int_tensor(d, shape, &v);
            for op in ["Abs", "Sign", "Relu"] {
                Case::new(op).input(x.clone()).check();
            }
            if signed(d) {
                Case::new("Neg").input(x).check();
            }
        }
    }
}

/// PRelu on the integer types ONNX gives it (opset 16), with slopes that keep products in range.
#[test]
fn int_prelu() {
    for (di, d) in [DType::I32, DType::I64, DType::U32, DType::U64]
        .into_iter()
        .enumerate()
    {
        let r = range(d, 1 << 12);
        for (s, slope) in [&[3usize, 5][..], &[5], &[1]].iter().enumerate() {
            let seed = (di * 10 + s) as u64;
            Case::new("PRelu")
                .opset(16)
                .input(rand_int(seed, d, &[3, 5], r))
                .input(rand_int(seed + 100, d, slope, r))
                .check();
        }
    }
}

/// Clip with constant bounds: both, one or the other, and `lo > hi` (every element becomes `hi`).
#[test]
fn int_clip() {
    for (di, &d) in INTS.iter().enumerate() {
        let x = rand_int(di as u64, d, &[4, 9], range(d, 1 << 52));
        let r = range(d, 1 << 40);
        let mut b = rand_vals(di as u64 + 77, 2, r);
        b.sort();
        let (lo, hi) = (b[0], b[1]);
        Case::new("Clip")
            .opset(13)
            .input(x.clone())
            .constant(scalar(d, lo))
            .constant(scalar(d, hi))
            .check();
        Case::new("Clip")
            .opset(13)
            .input(x.clone())
            .constant(scalar(d, lo))
            .check();
        Case::new("Clip")
            .opset(13)
            .input(x.clone())
            .absent()
            .constant(scalar(d, hi))
            .check();
        Case::new("Clip")
            .opset(13)
            .input(x.clone())
            .constant(scalar(d, hi))
            .constant(scalar(d, lo))
            .check();
        // Bounds as runtime inputs, read on the host.
        Case::new("Clip")
            .opset(13)
            .input(x)
            .input(scalar(d, lo))
            .input(scalar(d, hi))
            .check();
    }
}

/// BitShift both ways: amounts inside the width, at it and past it, negative ones for the signed
/// types (the CPU and both oracles give the sign fill alone); 64-bit results kept below 2^53.
#[test]
fn bitshift() {
    let types = [
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::I8,
        DType::I32,
        DType::I64,
    ];
    for (di, d) in types.into_iter().enumerate() {
        let w = bits(d) as i128;
        let (x_r, y_hi) = if w == 64 {
            (range(d, 1 << 20), 32)
        } else {
            (range(d, 1 << 52), w - 1)
        };
        let amounts: Vec<i128> = {
            let mut v = rand_vals(di as u64 + 300, 40, (0, y_hi));
            v.extend([w, w + 1, 2 * w, limits(d).1]);
            if signed(d) {
                v.extend([-1, -w, limits(d).0]);
            }
            v
        };
        let n = amounts.len();
        let x = rand_int(di as u64 + 400, d, &[n], x_r);
        let y = int_tensor(d, &[n], &amounts);
        for dir in ["LEFT", "RIGHT"] {
            Case::new("BitShift")
                .opset(11)
                .attr_s("direction", dir)
                .input(x.clone())
                .input(y.clone())
                .check();
            // One amount for every element, broadcast.
            Case::new("BitShift")
                .opset(11)
                .attr_s("direction", dir)
                .input(rand_int(di as u64 + 500, d, &[3, 7], x_r))
                .constant(scalar(d, 3))
                .check();
        }
    }
    let e = Case::new("BitShift")
        .opset(11)
        .attr_s("direction", "UP")
        .input(scalar(DType::U8, 1))
        .input(scalar(DType::U8, 1))
        .fails();
    assert!(e.contains("LEFT or RIGHT"), "{e}");
}

const COMPARISONS: [&str; 5] = ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"];

/// Comparisons on every integer type and on bool, drawn from a few values so that ties are common.
#[test]
fn int_and_bool_comparisons_with_ties() {
    for (di, &d) in INTS.iter().chain([DType::Bool].iter()).enumerate() {
        let few = if d == DType::Bool {
            (0, 1)
        } else if signed(d) {
            (-3, 3)
        } else {
            (0, 6)
        };
        for (p, (a, b)) in PAIRS.iter().enumerate() {
            for (o, op) in COMPARISONS.iter().enumerate() {
                let seed = (di * 1000 + p * 10 + o) as u64;
                Case::new(op)
                    .input(rand_int(seed, d, a, few))
                    .input(rand_int(seed + 500, d, b, few))
                    .check();
            }
        }
        if d != DType::Bool {
            for op in COMPARISONS {
                Case::new(op)
                    .input(rand_int(di as u64, d, &[9, 9], range(d, 1 << 52)))
                    .input(rand_int(di as u64 + 1, d, &[9], range(d, 1 << 52)))
                    .check();
            }
        }
    }
}

/// Where moves the bits of any element type.
#[test]
fn where_on_integer_and_bool_values() {
    let cond: Vec<i128> = (0..21).map(|i| (i % 3 == 0) as i128).collect();
    let cond = int_tensor(DType::Bool, &[3, 7], &cond);
    for (di, d) in [DType::I8, DType::U16, DType::I64, DType::U64, DType::Bool]
        .into_iter()
        .enumerate()
    {
        let r = if d == DType::Bool {
            (0, 1)
        } else {
            range(d, 1 << 52)
        };
        Case::new("Where")
            .input(cond.clone())
            .input(rand_int(di as u64, d, &[3, 7], r))
            .input(rand_int(di as u64 + 9, d, &[7], r))
            .check();
    }
}

/// The values the oracles cannot hold or disagree on, against the CPU kernels bit for bit: wrapping
/// at the 64-bit limits, `MIN / -1`, `|MIN|`, `-MIN`, unsigned Neg, PRelu overflow, 64-bit shifts
/// and comparisons of neighbours above 2^53.
#[test]
fn int_extremes_match_cpu_bits() {
    for (di, &d) in INTS.iter().enumerate() {
        let (lo, hi) = limits(d);
        let full = rand_vals(di as u64 + 900, 64, (lo, hi));
        let mut x = full.clone();
        x.extend([lo, lo + 1, hi, hi - 1, 0, 1]);
        let mut y = rand_vals(di as u64 + 901, 64, (lo, hi));
        y.extend([-1, -1, -1, 2, lo, hi]);
        for v in y.iter_mut() {
            if *v == 0 {
                *v = 3;
            }
        }
        let n = x.len();
        let (xt, yt) = (int_tensor(d, &[n], &x), int_tensor(d, &[n], &y));
        for op in ["Add", "Sub", "Mul", "Div", "Max", "Min", "Sum"] {
            Case::new(op)
                .input(xt.clone())
                .input(yt.clone())
                .check_against_cpu();
        }
        for fmod in [0, 1] {
            Case::new("Mod")
                .attr_i("fmod", fmod)
                .input(xt.clone())
                .input(yt.clone())
                .check_against_cpu();
        }
        for op in ["Abs", "Neg", "Sign", "Relu"] {
            Case::new(op).input(xt.clone()).check_against_cpu();
        }
        if matches!(d, DType::I32 | DType::I64 | DType::U32 | DType::U64) {
            Case::new("PRelu")
                .opset(16)
                .input(xt.clone())
                .input(yt.clone())
                .check_against_cpu();
        }
        for dir in ["LEFT", "RIGHT"] {
            let amounts = int_tensor(
                d,
                &[n],
                &rand_vals(di as u64 + 902, n, (0, bits(d) as i128)),
            );
            Case::new("BitShift")
                .opset(11)
                .attr_s("direction", dir)
                .input(xt.clone())
                .input(amounts)
                .check_against_cpu();
        }
        // Neighbours: 2^60 and 2^60 + 1 are one f64.
        let near: Vec<i128> = x.iter().map(|&v| if v < hi { v + 1 } else { v }).collect();
        let near = int_tensor(d, &[n], &near);
        for op in COMPARISONS {
            Case::new(op)
                .input(xt.clone())
                .input(near.clone())
                .check_against_cpu();
        }
        Case::new("Clip")
            .opset(13)
            .input(xt.clone())
            .constant(scalar(d, lo))
            .constant(scalar(d, hi - 1))
            .check_against_cpu();
    }
}

/// Integer forms outside the device's kernels still give the CPU's answer or its error.
#[test]
fn integer_forms_the_device_declines() {
    let base = rand_int(1, DType::I32, &[3, 4], (-9, 9));
    let exp = rand_int(2, DType::I32, &[4], (0, 5));
    Case::new("Pow")
        .opset(15)
        .input(base.clone())
        .input(exp)
        .allow_fallback()
        .check();
    let e = Case::new("Mean")
        .input(base.clone())
        .input(base.clone())
        .fails();
    assert!(e.contains("Mean"), "{e}");
    let e = Case::new("Add")
        .input(base)
        .input(rand_int(3, DType::I64, &[4], (-9, 9)))
        .fails();
    assert!(e.contains("int32") && e.contains("int64"), "{e}");
}
