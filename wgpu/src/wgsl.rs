//! WGSL text shared by the generated kernels: the binding header every kernel starts with, the
//! one-dimensional entry point, exact conversions of the 16-bit float types, and exact loads and
//! stores of each dtype's device words (`super::memory`).
//!
//! Every kernel binds its parameter words as `P` (binding 0), its outputs as `o0, o1, ...`
//! (read-write) and its inputs as `i0, i1, ...` (read-only), all `array<u32>`; shapes, strides and
//! attributes travel in `P`, so one compiled pipeline serves every shape of an op form.
//!
//! Many kernels are nevertheless generated for their geometry: [`inline_params`] writes parameter
//! words into the text as literals (or the family writes its constants itself), so that divisions
//! and loop bounds are constants to the shader compiler; pipelines are cached by their text. The
//! GEMM template's pipelines are found by a short key before its long text is made (a keyed source
//! in `run.rs`).
use quorum_core::backend::DeviceError;
use quorum_core::tensor::DType;

use super::run::KResult;

/// Helpers every kernel may use. NaN is told by its bits: WGSL lets an implementation assume no
/// NaN or infinity is present, and lavapipe folds `x != x` to false.
pub const PRELUDE: &str =
    "fn isnan32(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }\n";

/// The binding declarations of a kernel with `outs` outputs and `ins` inputs, and [`PRELUDE`].
pub fn header(outs: usize, ins: usize) -> String {
    header_typed(&vec!["u32"; outs], &vec!["u32"; ins])
}

/// [`header`] with each binding's array element type given (`u32`, or `vec4<u32>` for kernels that
/// move four words at a time: every pooled buffer is a multiple of 256 bytes, so any buffer binds
/// as either).
pub fn header_typed(outs: &[&str], ins: &[&str]) -> String {
    let mut s = String::from(PRELUDE);
    s.push_str("@group(0) @binding(0) var<storage, read> P: array<u32>;\n");
    for (o, t) in outs.iter().enumerate() {
        s.push_str(&format!(
            "@group(0) @binding({}) var<storage, read_write> o{o}: array<{t}>;\n",
            1 + o
        ));
    }
    for (i, t) in ins.iter().enumerate() {
        s.push_str(&format!(
            "@group(0) @binding({}) var<storage, read> i{i}: array<{t}>;\n",
            1 + outs.len() + i
        ));
    }
    s
}

/// A one-dimensional kernel: `body` runs with the flat thread index `i` for `i < P[0]` (the
/// workgroups of `super::run::grid`, x first).
pub fn entry_1d(body: &str) -> String {
    format!(
        "@compute @workgroup_size({wg})\n\
         fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{\n\
         let i = gid.x + gid.y * nwg.x * {wg}u;\n\
         if (i >= P[0]) {{ return; }}\n{body}\n}}\n",
        wg = super::run::WG
    )
}

/// f16 and bf16 bits (low half of a word) to f32 and back, exactly, with ties to even; NaN stays
/// NaN (quieted), overflow goes to infinity, f16 subnormals are kept.
pub const HALF: &str = r#"
fn h2f(h: u32) -> f32 {
  let s = (h & 0x8000u) << 16u;
  let e = (h >> 10u) & 0x1fu;
  let m = h & 0x3ffu;
  if (e == 0x1fu) { return bitcast<f32>(s | 0x7f800000u | (m << 13u)); }
  if (e == 0u) {
    let v = f32(m) * bitcast<f32>(0x33800000u);
    return select(v, -v, s != 0u);
  }
  return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 13u));
}
fn f2h(f: f32) -> u32 {
  let x = bitcast<u32>(f);
  let s = (x >> 16u) & 0x8000u;
  let a = x & 0x7fffffffu;
  if (a > 0x7f800000u) { return s | 0x7e00u | ((a >> 13u) & 0x3ffu); }
  if (a >= 0x477ff000u) { return s | 0x7c00u; }
  if (a >= 0x38800000u) {
    let r = a + 0xfffu + ((a >> 13u) & 1u);
    return s | ((r - 0x38000000u) >> 13u);
  }
  return s | u32(round(bitcast<f32>(a) * 16777216.0));
}
fn bf2f(h: u32) -> f32 { return bitcast<f32>(h << 16u); }
fn f2bf(f: f32) -> u32 {
  let x = bitcast<u32>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) { return (x >> 16u) | 0x40u; }
  return (x + 0x7fffu + ((x >> 16u) & 1u)) >> 16u;
}
"#;

/// How a kernel computes on an operand's elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// In f32 (f32, f16, bf16 operands: the 16-bit ones widened exactly, results rounded once).
    Float,
    /// In i32 (signed integers up to 32 bits, already sign-extended on the device).
    Int,
    /// In u32 (unsigned integers up to 32 bits and bool).
    Uint,
}

/// How `d` is computed on, or why the kernels decline it.
pub fn kind(d: DType) -> KResult<Kind> {
    Ok(match d {
        DType::F32 | DType::F16 | DType::BF16 => Kind::Float,
        DType::I32 | DType::I16 | DType::I8 => Kind::Int,
        DType::U32 | DType::U16 | DType::U8 | DType::Bool => Kind::Uint,
        d => {
            return Err(DeviceError::Decline(format!(
                "{d} elements: the WGSL kernels compute on 32-bit and narrower types"
            )));
        }
    })
}

/// The WGSL type of a kind.
pub fn ty(k: Kind) -> &'static str {
    match k {
        Kind::Float => "f32",
        Kind::Int => "i32",
        Kind::Uint => "u32",
    }
}

/// The expression reading word `w` (WGSL text) of a `d` element as its kind's type.
pub fn load(d: DType, w: &str) -> String {
    match d {
        DType::F32 => format!("bitcast<f32>({w})"),
        DType::F16 => format!("h2f({w})"),
        DType::BF16 => format!("bf2f({w})"),
        DType::I32 | DType::I16 | DType::I8 => format!("bitcast<i32>({w})"),
        _ => w.to_string(),
    }
}

/// The word storing value `v` (of the kind of `d`) as a `d` element: narrow integers keep their
/// low bits, sign- or zero-extended as uploads are, so every word is what an upload would make.
pub fn store(d: DType, v: &str) -> String {
    match d {
        DType::F32 => format!("bitcast<u32>({v})"),
        DType::F16 => format!("f2h({v})"),
        DType::BF16 => format!("f2bf({v})"),
        DType::I32 => format!("bitcast<u32>({v})"),
        DType::I16 => format!("bitcast<u32>((({v}) << 16u) >> 16u)"),
        DType::I8 => format!("bitcast<u32>((({v}) << 24u) >> 24u)"),
        DType::U16 => format!("(({v}) & 0xffffu)"),
        DType::U8 => format!("(({v}) & 0xffu)"),
        DType::Bool => format!("select(0u, 1u, ({v}) != 0u)"),
        _ => v.to_string(),
    }
}

/// Whether the text uses the 16-bit float helpers.
pub fn needs_half(ds: &[DType]) -> bool {
    ds.iter().any(|d| matches!(d, DType::F16 | DType::BF16))
}

/// `text` with every parameter word `P[k]` for `k >= from` (a literal index) replaced by its value
/// in `params`, as a `u32` literal: a kernel generated for one geometry, whose divisions and loop
/// bounds the compiler then sees as constants (a division by a constant is a multiply and a
/// shift; by a word read at run time, a long division).
pub fn inline_params(text: &str, params: &[u32], from: usize) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("P[") {
        out.push_str(&rest[..at]);
        let tail = &rest[at + 2..];
        let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
        let k = tail[..digits].parse::<usize>().ok();
        match k {
            Some(k) if k >= from && k < params.len() && tail[digits..].starts_with(']') => {
                out.push_str(&format!("{}u", params[k]));
                rest = &tail[digits + 1..];
            }
            _ => {
                out.push_str("P[");
                rest = tail;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The bits of an f32 as a parameter word.
pub fn fbits(v: f32) -> u32 {
    v.to_bits()
}

/// An f64 literal, exactly (Rust prints the shortest text that reads back as the same value).
pub fn lf(v: f64) -> String {
    if v.is_finite() {
        let s = format!("{v:?}");
        if s.contains('.') || s.contains('e') {
            format!("{s}lf")
        } else {
            format!("{s}.0lf")
        }
    } else if v.is_nan() {
        "bitcast<f64>(0x7ff8000000000000lu)".into()
    } else if v > 0.0 {
        "bitcast<f64>(0x7ff0000000000000lu)".into()
    } else {
        "bitcast<f64>(0xfff0000000000000lu)".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f64_literals_read_back_exactly() {
        for v in [0.5f64, 1.0, 1e-300, std::f64::consts::LN_2, -3.0, 1e22] {
            let s = lf(v);
            let t = s.trim_end_matches("lf");
            assert_eq!(t.parse::<f64>().unwrap(), v, "{s}");
        }
        assert!(lf(f64::INFINITY).contains("0x7ff0"));
    }

    #[test]
    fn parameters_inline_from_the_given_index_only() {
        let t = "let n = P[0]; let a = P[1] * P[12]; let b = P[j]; let c = P[3u + q]; P[40]";
        assert_eq!(
            inline_params(t, &[7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19], 1),
            "let n = P[0]; let a = 8u * 19u; let b = P[j]; let c = P[3u + q]; P[40]"
        );
    }

    #[test]
    fn the_header_binds_parameters_then_outputs_then_inputs() {
        let h = header(1, 2);
        assert!(h.contains("@binding(0) var<storage, read> P"));
        assert!(h.contains("@binding(1) var<storage, read_write> o0"));
        assert!(h.contains("@binding(3) var<storage, read> i1"));
    }
}
