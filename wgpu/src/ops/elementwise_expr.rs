//! The WGSL of each elementwise op as a function `f` of its operands' values: float ops take and
//! return f32 (arithmetic in f32, correctly rounded; anything else in f64 through `math` and
//! rounded once), integer ops their kind's i32 or u32 (wrapping), logic and comparisons give a u32
//! 0 or 1. Attributes are read from the parameter words `P[2..6]` (see `elementwise::map`).
use quorum_core::ops::map_op::Compare;
use quorum_core::ops::unary_op::UnaryOp;

/// What a float unary op needs besides f32 arithmetic.
pub struct Unary {
    pub body: String,
    /// The op is computed in f64 (the adapter must have it).
    pub f64: bool,
}

fn f32_body(e: &str) -> Unary {
    Unary {
        body: format!("fn f(a0: f32) -> f32 {{ let x = a0; {e} }}"),
        f64: false,
    }
}

fn f64_body(e: &str) -> Unary {
    Unary {
        body: format!("fn f(a0: f32) -> f32 {{ let x = a0; let xd = f64(x); {e} }}"),
        f64: true,
    }
}

/// The function of float unary op `u` (its attributes are `P[2]`, `P[3]` as f32: [`attr_words`]).
pub fn unary(u: UnaryOp) -> Unary {
    match u {
        UnaryOp::Abs => f32_body("return abs(x);"),
        UnaryOp::Neg => f32_body("return -x;"),
        UnaryOp::Ceil => f32_body("return ceil(x);"),
        UnaryOp::Floor => f32_body("return floor(x);"),
        // WGSL's round takes halfway cases to even, as ONNX's Round does.
        UnaryOp::Round => f32_body("return round(x);"),
        UnaryOp::Sign => f32_body("return select(select(x, -1.0, x < 0.0), 1.0, x > 0.0);"),
        // WGSL lets a compiler assume no NaN: NVIDIA's Vulkan driver turns the plain select into
        // max(x, 0) and Relu(NaN) became 0 on the H200. The NaN test is on the bits.
        UnaryOp::Relu => f32_body("if (isnan32(x)) { return x; } return select(x, 0.0, x <= 0.0);"),
        UnaryOp::LeakyRelu { .. } => f32_body("return select(x, x * bitcast<f32>(P[2]), x < 0.0);"),
        // The definition's `x > alpha ? x : 0`: a NaN fails the comparison and gives 0 (tested on
        // its bits, as WGSL may assume no NaN).
        UnaryOp::ThresholdedRelu { .. } => f32_body(
            "if (isnan32(x)) { return 0.0; } return select(x, 0.0, x <= bitcast<f32>(P[2]));",
        ),
        UnaryOp::HardSigmoid { .. } => f32_body(
            "if (isnan32(x)) { return x; } \
             let v = x * bitcast<f32>(P[2]) + bitcast<f32>(P[3]); \
             return select(select(v, 0.0, v < 0.0), 1.0, v > 1.0);",
        ),
        UnaryOp::Reciprocal => f64_body("return f32(1.0lf / xd);"),
        UnaryOp::Sqrt => f64_body("return f32(sqrt(xd));"),
        UnaryOp::Softsign => f64_body("return f32(xd / (abs(xd) + 1.0lf));"),
        UnaryOp::HardSwish => f64_body(
            "if (isnan32(x)) { return x; } \
             return f32(xd * clamp(xd / 6.0lf + 0.5lf, 0.0lf, 1.0lf));",
        ),
        UnaryOp::Exp => f64_body("return f32(exp64(xd));"),
        UnaryOp::Log => f64_body("return f32(log64(xd));"),
        UnaryOp::Sin => f64_body("return f32(sin64(xd));"),
        UnaryOp::Cos => f64_body("return f32(cos64(xd));"),
        UnaryOp::Tan => f64_body("let sc = sincos64(xd); return f32(sc.x / sc.y);"),
        UnaryOp::Tanh => f64_body("return f32(tanh64(xd));"),
        UnaryOp::Erf => f64_body("return f32(erf64_f32(xd));"),
        UnaryOp::Sigmoid => f64_body(
            "let e = exp64(-abs(xd)); let den = e + 1.0lf; \
             return f32(select(1.0lf / den, e / den, xd < 0.0lf));",
        ),
        UnaryOp::Elu { .. } => f64_body(
            "let a = f64(bitcast<f32>(P[2])); \
             return f32(select(xd, (exp64(xd) - 1.0lf) * a, xd < 0.0lf));",
        ),
        UnaryOp::Celu { .. } => f64_body(
            "let a = f64(bitcast<f32>(P[2])); \
             return f32(select(xd, (exp64(xd / a) - 1.0lf) * a, xd < 0.0lf));",
        ),
        UnaryOp::Selu { .. } => f64_body(
            "let a = f64(bitcast<f32>(P[2])); let g = f64(bitcast<f32>(P[3])); \
             return f32(select(xd, (exp64(xd) - 1.0lf) * a, xd < 0.0lf) * g);",
        ),
        UnaryOp::Softplus => f64_body("return f32(softplus64(xd));"),
        UnaryOp::Mish => f64_body("return f32(xd * tanh64(softplus64(xd)));"),
        UnaryOp::Gelu { tanh: true } => f64_body(
            "let inner = (xd + xd * xd * xd * 0.044715lf) * 0.7978845608028654lf; \
             return f32((xd * 0.5lf) * (2.0lf / (exp64(inner * -2.0lf) + 1.0lf)));",
        ),
        UnaryOp::Gelu { tanh: false } => {
            f64_body("return f32((xd * 0.5lf) * erfc64(xd * -0.7071067811865476lf));")
        }
    }
}

/// The attribute words of `u` as its body reads them: `P[2]` and on, each an f32's bits.
pub fn attr_words(u: UnaryOp) -> Vec<u32> {
    match u {
        UnaryOp::LeakyRelu { alpha }
        | UnaryOp::ThresholdedRelu { alpha }
        | UnaryOp::Elu { alpha }
        | UnaryOp::Celu { alpha } => vec![alpha.to_bits()],
        UnaryOp::HardSigmoid { alpha, beta } => vec![alpha.to_bits(), beta.to_bits()],
        UnaryOp::Selu { alpha, gamma } => vec![alpha.to_bits(), gamma.to_bits()],
        UnaryOp::Abs
        | UnaryOp::Neg
        | UnaryOp::Ceil
        | UnaryOp::Floor
        | UnaryOp::Round
        | UnaryOp::Sign
        | UnaryOp::Reciprocal
        | UnaryOp::Sqrt
        | UnaryOp::Exp
        | UnaryOp::Log
        | UnaryOp::Erf
        | UnaryOp::Sin
        | UnaryOp::Cos
        | UnaryOp::Tan
        | UnaryOp::Tanh
        | UnaryOp::Sigmoid
        | UnaryOp::Relu
        | UnaryOp::HardSwish
        | UnaryOp::Softplus
        | UnaryOp::Softsign
        | UnaryOp::Gelu { .. }
        | UnaryOp::Mish => vec![],
    }
}

/// ONNX Pow for an f32 base and an f64 exponent, as e^(y·ln|x|) in f64 with C's special cases (the
/// CUDA backend's `pow_expr`): odd integer powers keep the sign of a base whose sign bit is set, a
/// finite negative base with a non-integer exponent gives NaN, pow(±1, ±∞), pow(1, y) and
/// pow(x, ±0) are 1.
pub const POW: &str = r#"
fn powf(x: f32, yd: f64) -> f32 {
  let xd = f64(x);
  let ax = abs(xd);
  let mag = exp64(yd * log64(ax));
  let is_int = round(yd) == yd;
  let half = yd * 0.5lf;
  let odd = is_int && round(half) != half;
  let sign = (bitcast<u32>(x) & 0x80000000u) != 0u;
  var r = select(mag, -mag, sign && odd);
  if (xd < 0.0lf && bitcast<u64>(xd) != 0xfff0000000000000lu && !is_int) { r = bitcast<f64>(0x7ff8000000000000lu); }
  if (yd == 0.0lf || xd == 1.0lf) { r = 1.0lf; }
  if (ax == 1.0lf && (bitcast<u64>(yd) & 0x7ffffffffffffffflu) == 0x7ff0000000000000lu) { r = 1.0lf; }
  return f32(r);
}
"#;

/// The u32 0/1 of a comparison of `a0` and `a1`.
pub fn compare(c: Compare) -> &'static str {
    match c {
        Compare::Equal => "a0 == a1",
        Compare::Less => "a0 < a1",
        Compare::LessOrEqual => "a0 <= a1",
        Compare::Greater => "a0 > a1",
        Compare::GreaterOrEqual => "a0 >= a1",
    }
}

/// NaN-propagating max (`is_max`) or min of f32 `a` and `b` (WGSL's max and min need not
/// propagate NaN; ONNX's do). NaN is told by its bits (`isnan32`): WGSL lets a compiler assume no
/// NaN, and lavapipe's folds `x != x` to false.
pub fn nan_fold(a: &str, b: &str, is_max: bool) -> String {
    let pick = if is_max { ">" } else { "<" };
    format!("select(select({a}, {b}, {b} {pick} {a} || isnan32({b})), {a}, isnan32({a}))")
}
