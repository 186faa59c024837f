//! Ops whose output is a fill or their input passed through: ConstantOfShape (every fill type, the
//! default fill, scalar and empty shapes), Dropout in every era (is_test, implicit inference, the
//! ratio and training_mode inputs; training only with ratio 0, the one deterministic training form)
//! and CastLike.
use quorum_oracle::{Attr, DType, Value};

use super::{Case, Gen, i64s, scalar};

pub(super) fn generate(op: &'static str, g: &mut Gen) -> Option<Case> {
    Some(match op {
        "ConstantOfShape" => constant_of_shape(g),
        "Dropout" => dropout(g),
        "CastLike" => cast_like(g),
        _ => return None,
    })
}

fn constant_of_shape(g: &mut Gen) -> Case {
    let opset = g.pick(&[9, 25, 23, 21, 20]);
    let dims = g.shape(0, 4, true);
    let mut c = Case::new("ConstantOfShape", opset, g.seed);
    if g.chance(80) {
        let dtype = g.pick(&[
            DType::F32,
            DType::I64,
            DType::F16,
            DType::Bool,
            DType::I32,
            DType::F64,
            DType::U8,
            DType::I8,
            DType::BF16,
            DType::I16,
            DType::U16,
            DType::U32,
            DType::U64,
        ]);
        // Exactly representable in every type, never 0 (0 is the default form's value).
        let v = match dtype {
            DType::Bool => 1.0,
            d if d.is_float() => g.value_int(1, 64) as f64 * 0.125 * sign(g),
            DType::U8 | DType::U16 | DType::U32 | DType::U64 => g.value_int(1, 250) as f64,
            _ => g.value_int(1, 120) as f64 * sign(g),
        };
        // "A one-element tensor": of shape [1], or a scalar.
        let shape = if g.chance(25) { vec![] } else { vec![1] };
        let value = Value::new(dtype, shape, vec![v]).expect("one element");
        c.attr("value", Attr::Tensor(value));
    }
    let dims: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
    c.input(i64s(&dims));
    c
}

/// -1 or 1, from the value seed.
fn sign(g: &mut Gen) -> f64 {
    if g.value_int(0, 1) == 0 { -1.0 } else { 1.0 }
}

fn dropout(g: &mut Gen) -> Case {
    let opset = g.pick(&[22, 13, 12, 10, 7, 6, 1]);
    let shape = g.shape(0, 4, true);
    let mut types = vec![DType::F32, DType::F16, DType::F64];
    if opset >= 13 {
        types.push(DType::BF16);
    }
    let dtype = g.pick(&types);
    let mut c = Case::new("Dropout", opset, g.seed);
    if g.chance(50) {
        c.outputs(2);
    }
    let mut x = g.floats_any(&shape);
    g.maybe_nan(&mut x, 10);
    c.input(Value::new(dtype, x.shape, x.data).expect("same shape"));
    let ratio = |g: &mut Gen| g.int(0, 9) as f64 * 0.1;
    match opset {
        ..=6 => {
            // Testing (is_test = 1, any ratio) or training with ratio 0 (is_test absent or 0).
            if g.chance(70) {
                c.int("is_test", 1);
                if g.chance(50) {
                    let r = ratio(g);
                    c.float("ratio", r);
                }
            } else {
                if g.chance(50) {
                    c.int("is_test", 0);
                }
                c.float("ratio", 0.0);
            }
        }
        7..=11 => {
            if g.chance(50) {
                let r = ratio(g);
                c.float("ratio", r);
            }
        }
        _ => {
            if g.chance(30) {
                c.int("seed", g.int(0, 1000));
            }
            // training_mode: omitted, false, or true with a ratio of exactly 0.
            let training = match g.int(0, 2) {
                0 => None,
                1 => Some(false),
                _ => Some(true),
            };
            let ratio_type = g.pick(&[DType::F32, DType::F16, DType::F64]);
            if training == Some(true) {
                c.input(scalar(ratio_type, 0.0));
            } else if g.chance(50) {
                let r = ratio(g);
                c.input(scalar(ratio_type, r));
            } else {
                c.omit();
            }
            match training {
                Some(t) => c.input(scalar(DType::Bool, if t { 1.0 } else { 0.0 })),
                None => c.omit(),
            };
        }
    }
    c
}

fn cast_like(g: &mut Gen) -> Case {
    let opset = g.pick(&[25, 24, 23, 21, 19, 15]);
    let (_, to, x) = super::elementwise::cast_operands(g);
    let mut c = Case::new("CastLike", opset, g.seed);
    if opset >= 19 && g.chance(30) {
        c.int("saturate", g.int(0, 1));
    }
    // The target's values do not matter, only its type: any shape, empty included.
    let like_shape = g.shape(0, 2, true);
    let like = match to {
        DType::Bool => g.bools(&like_shape),
        d if d.is_float() => {
            let v = g.floats_any(&like_shape);
            Value::new(d, v.shape, v.data).expect("same shape")
        }
        d => g.ints(d, &like_shape, 0, 9),
    };
    c.input(x).input(like);
    c
}
