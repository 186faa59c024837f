//! Unary, binary and variadic elementwise ops, Clip, Cast, Where, BitShift, Identity.
use quorum_oracle::{DType, Value};

use super::{Case, Dist, Gen, scalar};

pub(super) fn generate(op: &'static str, g: &mut Gen) -> Option<Case> {
    Some(match op {
        "Clip" => clip(g),
        "Not" => {
            let s = g.shape(0, 4, true);
            let mut c = Case::new(op, 1, g.seed);
            c.input(g.bools(&s));
            c
        }
        "IsNaN" | "IsInf" => is_special(op, g),
        "Cast" => cast(g),
        "Identity" => {
            let opset = g.pick(&[21, 19, 16, 14, 13]);
            let s = g.shape(0, 4, true);
            let dtype = g.pick(&[DType::F32, DType::I64, DType::Bool]);
            let mut c = Case::new(op, opset, g.seed);
            c.input(values(g, dtype, &s));
            c
        }
        "Add" | "Sub" | "Mul" | "Div" => arithmetic(op, g),
        "Pow" => pow(g),
        "Mod" => modulo(g),
        "Min" | "Max" | "Sum" | "Mean" => variadic(op, g),
        "PRelu" => {
            let opset = g.pick(&[16, 9]);
            let x = g.shape(1, 4, true);
            let slope = g.unidirectional(&x);
            let mut c = Case::new(op, opset, g.seed);
            let xv = g.floats_any(&x);
            c.input(xv).input(g.floats(&slope, Dist::Signed(1.0)));
            c
        }
        "Equal" | "Less" | "LessOrEqual" | "Greater" | "GreaterOrEqual" => compare(op, g),
        "And" | "Or" | "Xor" => {
            let s = g.broadcast(2, 0, 4, true);
            let mut c = Case::new(op, 7, g.seed);
            c.input(g.bools(&s[0])).input(g.bools(&s[1]));
            c
        }
        "Where" => {
            let opset = g.pick(&[16, 9]);
            let s = g.broadcast(3, 0, 4, true);
            let dtype = if g.chance(20) { DType::I64 } else { DType::F32 };
            let mut c = Case::new(op, opset, g.seed);
            c.input(g.bools(&s[0]));
            c.input(values(g, dtype, &s[1]));
            c.input(values(g, dtype, &s[2]));
            c
        }
        "BitShift" => bitshift(g),
        _ => return unary(op, g),
    })
}

/// Values of `dtype` for ops that take any numeric type: floats signed, ints small.
fn values(g: &mut Gen, dtype: DType, shape: &[usize]) -> Value {
    match dtype {
        DType::F32 => g.floats_any(shape),
        DType::Bool => g.bools(shape),
        d => g.ints(d, shape, -9, 9),
    }
}

/// (opsets newest first, integer inputs allowed)
fn unary_forms(op: &str) -> Option<(&'static [i64], bool)> {
    Some(match op {
        "Abs" | "Neg" => (&[13, 6], true),
        "Sign" => (&[13, 9], true),
        "Relu" => (&[14, 13, 6], true),
        "Ceil" | "Floor" | "Reciprocal" | "Sqrt" | "Exp" | "Log" | "Tanh" | "Sigmoid" => {
            (&[13, 6], false)
        }
        "Round" => (&[22, 11], false),
        "Erf" => (&[13, 9], false),
        "Sin" | "Cos" | "Tan" => (&[22, 7], false),
        "LeakyRelu" => (&[16, 6], false),
        "Elu" | "Selu" | "HardSigmoid" => (&[22, 6], false),
        "Celu" => (&[12], false),
        "HardSwish" => (&[22, 14], false),
        "Softplus" | "Softsign" => (&[22, 1], false),
        "Gelu" => (&[20], false),
        "Mish" => (&[22, 18], false),
        "ThresholdedRelu" => (&[22, 10], false),
        _ => return None,
    })
}

fn unary(op: &'static str, g: &mut Gen) -> Option<Case> {
    let (opsets, ints) = unary_forms(op)?;
    let opset = g.pick(opsets);
    let shape = g.shape(0, 4, true);
    let mut c = Case::new(op, opset, g.seed);
    let dtype = if ints && (op != "Relu" || opset >= 14) && g.chance(20) {
        g.pick(&[DType::I32, DType::I64, DType::I8])
    } else {
        DType::F32
    };
    // A small positive float drawn from the choices, for alpha/beta/gamma.
    let param = |g: &mut Gen, lo: i64, hi: i64| g.int(lo, hi) as f64 * 0.125;
    match op {
        "LeakyRelu" | "Elu" | "ThresholdedRelu" if g.chance(60) => {
            let a = param(g, -8, 24);
            c.float("alpha", a);
        }
        "Selu" => {
            if g.chance(50) {
                let a = param(g, 1, 24);
                c.float("alpha", a);
            }
            if g.chance(50) {
                let a = param(g, 1, 24);
                c.float("gamma", a);
            }
        }
        "Celu" if g.chance(60) => {
            let a = param(g, 1, 24);
            c.float("alpha", a);
        }
        "HardSigmoid" => {
            if g.chance(50) {
                let a = param(g, -8, 8);
                c.float("alpha", a);
            }
            if g.chance(50) {
                let a = param(g, -8, 8);
                c.float("beta", a);
            }
        }
        "Gelu" if g.chance(50) => {
            let a = g.pick(&["tanh", "none"]);
            c.string("approximate", a);
        }
        _ => {}
    }
    let mut x = if dtype != DType::F32 {
        g.ints(dtype, &shape, -9, 9)
    } else {
        match op {
            "Sqrt" | "Log" if !g.chance(15) => g.floats(&shape, Dist::Range(0.01, 5.0)),
            "Exp" | "Softplus" | "Mish" | "Celu" | "Elu" | "Selu" => {
                g.floats(&shape, Dist::Signed(10.0))
            }
            _ => g.floats_any(&shape),
        }
    };
    if dtype == DType::F32 {
        g.maybe_nan(&mut x, 8);
    }
    c.input(x);
    Some(c)
}

fn clip(g: &mut Gen) -> Case {
    let opset = g.pick(&[13, 12, 11, 6]);
    let shape = g.shape(0, 4, true);
    let mut c = Case::new("Clip", opset, g.seed);
    let dtype = if opset >= 12 && g.chance(20) {
        g.pick(&[DType::I32, DType::I64])
    } else {
        DType::F32
    };
    let mut x = values(g, dtype, &shape);
    // Infinities: clipped to the bounds, which before opset 11 default to the f32 limits.
    if dtype == DType::F32 && !x.data.is_empty() && g.chance(15) {
        let k = g.value_int(0, x.data.len() as i64 - 1) as usize;
        x.data[k] = if g.chance(50) {
            f64::INFINITY
        } else {
            f64::NEG_INFINITY
        };
    }
    let mut lo = g.int(-12, 4) as f64 * 0.25;
    let mut hi = g.int(-4, 12) as f64 * 0.25;
    if dtype != DType::F32 {
        lo = lo.round();
        hi = hi.round();
    }
    // min > max is defined (every value becomes max) from opset 13 only.
    if lo > hi && (opset < 13 || !g.chance(10)) {
        std::mem::swap(&mut lo, &mut hi);
    }
    let (with_lo, with_hi) = (!g.chance(25), !g.chance(25));
    c.input(x);
    if opset < 11 {
        if with_lo {
            c.float("min", lo);
        }
        if with_hi {
            c.float("max", hi);
        }
    } else {
        if with_lo {
            c.input(scalar(dtype, lo));
        } else {
            c.omit();
        }
        if with_hi {
            c.input(scalar(dtype, hi));
        }
    }
    c
}

fn is_special(op: &'static str, g: &mut Gen) -> Case {
    let opset = if op == "IsNaN" {
        g.pick(&[20, 13, 9])
    } else {
        g.pick(&[20, 10])
    };
    let shape = g.shape(0, 4, true);
    let mut x = g.floats_any(&shape);
    for v in x.data.iter_mut() {
        match g.value_int(0, 9) {
            0 => *v = f64::NAN,
            1 => *v = f64::INFINITY,
            2 => *v = f64::NEG_INFINITY,
            _ => {}
        }
    }
    let mut c = Case::new(op, opset, g.seed);
    if op == "IsInf" {
        if g.chance(40) {
            let v = g.int(0, 1);
            c.int("detect_negative", v);
        }
        if g.chance(40) {
            let v = g.int(0, 1);
            c.int("detect_positive", v);
        }
    }
    c.input(x);
    c
}

fn cast(g: &mut Gen) -> Case {
    let opset = g.pick(&[21, 19, 13, 9, 6]);
    let (to, _, x) = cast_operands(g);
    let mut c = Case::new("Cast", opset, g.seed);
    c.int("to", to).input(x);
    c
}

/// A cast's target (ONNX type number and dtype) and a value to cast to it, of a random shape and
/// element type, inside the range where the conversion is defined (float to integer: within the
/// target's range).
pub(super) fn cast_operands(g: &mut Gen) -> (i64, DType, Value) {
    let shape = g.shape(0, 4, true);
    // (ONNX type number, dtype)
    let types = [
        (1, DType::F32),
        (7, DType::I64),
        (6, DType::I32),
        (10, DType::F16),
        (11, DType::F64),
        (9, DType::Bool),
        (3, DType::I8),
        (2, DType::U8),
        (5, DType::I16),
        (4, DType::U16),
        (12, DType::U32),
        (13, DType::U64),
        (16, DType::BF16),
    ];
    let (to, to_dt) = g.pick(&types);
    let from = g.pick(&[
        DType::F32,
        DType::I64,
        DType::F64,
        DType::F16,
        DType::I32,
        DType::Bool,
        DType::U8,
        DType::I8,
    ]);
    let unsigned_to = matches!(to_dt, DType::U8 | DType::U16 | DType::U32 | DType::U64);
    let x = match from {
        DType::Bool => g.bools(&shape),
        d if d.is_float() => {
            // Float to integer is defined only within the target's range.
            let v = if unsigned_to {
                g.floats(&shape, Dist::Range(0.0, 100.0))
            } else if to_dt.is_float() || to_dt == DType::Bool {
                g.floats_any(&shape)
            } else {
                g.floats(&shape, Dist::Signed(100.0))
            };
            Value::new(d, v.shape, v.data).expect("same shape")
        }
        d => {
            let lo = if unsigned_to || matches!(d, DType::U8) {
                0
            } else {
                -100
            };
            g.ints(d, &shape, lo, 100)
        }
    };
    (to, to_dt, x)
}

fn arithmetic(op: &'static str, g: &mut Gen) -> Case {
    let opset = g.pick(&[14, 13, 7]);
    let s = g.broadcast(2, 0, 4, true);
    let dtype = if g.chance(20) {
        if opset >= 14 {
            g.pick(&[DType::I64, DType::I32, DType::I8])
        } else {
            g.pick(&[DType::I64, DType::I32])
        }
    } else {
        DType::F32
    };
    let a = values(g, dtype, &s[0]);
    let mut b = values(g, dtype, &s[1]);
    if op == "Div" {
        for v in b.data.iter_mut() {
            if v.abs() < 0.25 {
                *v = if dtype == DType::F32 { 0.5 } else { 3.0 };
            }
        }
    }
    let mut c = Case::new(op, opset, g.seed);
    c.input(a).input(b);
    c
}

fn pow(g: &mut Gen) -> Case {
    let opset = g.pick(&[15, 13, 12, 7]);
    let s = g.broadcast(2, 0, 4, true);
    let mut c = Case::new("Pow", opset, g.seed);
    match g.int(0, 3) {
        // positive base, any real exponent
        0 | 1 => {
            let a = g.floats(&s[0], Dist::Range(0.1, 3.0));
            c.input(a).input(g.floats(&s[1], Dist::Signed(3.0)));
        }
        // any base, integral exponent (float or, from opset 12, int64)
        2 => {
            let a = g.floats(&s[0], Dist::Signed(3.0));
            let mut e = g.ints(DType::I64, &s[1], -3, 4);
            if opset < 12 || g.chance(50) {
                e.dtype = DType::F32;
            }
            c.input(a).input(e);
        }
        // integer base and exponent (opset 12+)
        _ if opset >= 12 => {
            let a = g.ints(DType::I64, &s[0], -5, 5);
            c.input(a).input(g.ints(DType::I64, &s[1], 0, 4));
        }
        _ => {
            let a = g.floats(&s[0], Dist::Range(0.1, 3.0));
            c.input(a).input(g.floats(&s[1], Dist::Halves(2.0)));
        }
    }
    c
}

fn modulo(g: &mut Gen) -> Case {
    let opset = g.pick(&[13, 10]);
    let s = g.broadcast(2, 0, 4, true);
    let fmod = g.int(0, 1);
    let float = fmod == 1 && !g.chance(30);
    let mut c = Case::new("Mod", opset, g.seed);
    let (a, mut b) = if float {
        (g.floats(&s[0], Dist::Signed(10.0)), g.floats_any(&s[1]))
    } else {
        let d = g.pick(&[DType::I64, DType::I32]);
        (g.ints(d, &s[0], -20, 20), g.ints(d, &s[1], -7, 7))
    };
    for v in b.data.iter_mut() {
        if v.abs() < 0.25 {
            *v = if float { 0.75 } else { 3.0 };
        }
    }
    if fmod == 1 || g.chance(50) {
        c.int("fmod", fmod);
    }
    c.input(a).input(b);
    c
}

fn variadic(op: &'static str, g: &mut Gen) -> Case {
    let opset = if matches!(op, "Min" | "Max") {
        g.pick(&[13, 12, 8])
    } else {
        g.pick(&[13, 8])
    };
    let n = g.size(1, 4);
    let s = g.broadcast(n, 0, 4, true);
    let dtype = if matches!(op, "Min" | "Max") && opset >= 12 && g.chance(20) {
        g.pick(&[DType::I64, DType::I32])
    } else {
        DType::F32
    };
    let mut c = Case::new(op, opset, g.seed);
    for sh in &s {
        c.input(values(g, dtype, sh));
    }
    c
}

fn compare(op: &'static str, g: &mut Gen) -> Case {
    let opsets: &[i64] = match op {
        "Equal" => &[19, 13, 11],
        "Less" | "Greater" => &[13, 9],
        _ => &[16, 12],
    };
    let opset = g.pick(opsets);
    let s = g.broadcast(2, 0, 4, true);
    let dtype = match g.int(0, 9) {
        0 | 1 => DType::I64,
        2 if op == "Equal" => DType::Bool,
        3 => DType::I32,
        _ => DType::F32,
    };
    let mut c = Case::new(op, opset, g.seed);
    for sh in &s {
        let v = match dtype {
            DType::F32 => g.floats(sh, Dist::Halves(1.5)),
            DType::Bool => g.bools(sh),
            d => g.ints(d, sh, -3, 3),
        };
        c.input(v);
    }
    c
}

fn bitshift(g: &mut Gen) -> Case {
    let s = g.broadcast(2, 0, 4, true);
    let (dtype, bits) = g.pick(&[
        (DType::U8, 8),
        (DType::U16, 16),
        (DType::U32, 32),
        (DType::U64, 64),
    ]);
    let left = g.chance(50);
    // u64 results must stay exact in f64 (the oracles' element type): below 2^53.
    let (xmax, smax) = if bits == 64 {
        ((1i64 << 20) - 1, 30)
    } else {
        ((1i64 << bits) - 1, bits - 1)
    };
    let mut c = Case::new("BitShift", 11, g.seed);
    c.string("direction", if left { "LEFT" } else { "RIGHT" });
    c.input(g.ints(dtype, &s[0], 0, xmax.min(1 << 20)));
    c.input(g.ints(dtype, &s[1], 0, smax));
    c
}
