//! Accurate transcendental functions for the generated WGSL, in f64 (adapters with `SHADER_F64`):
//! range reduction and polynomials, the same algorithms and fdlibm constants as the CUDA backend's
//! `math`, rounded once to f32 by the caller. WGSL's own `exp`, `log`, `sin`... promise a few ulps
//! at best (and nothing for f64), far from what the oracles allow, so none is used for a result.
//!
//! The library needs `f64` and `i64` in shaders (`super::require_f64` asks for both): exponents are
//! taken from the bits, because lavapipe's LLVM 15 aborts the process compiling `frexp` on f64.
//!
//! Every reduction step is exact whether or not the compiler fuses a multiply and an add: the
//! high parts of ln 2 and π/2 have trailing zero bits, so `n · LN2_HI` is exact for any `n` the
//! clamps allow.
use crate::wgsl::lf;

use quorum_core::device::forms::fdlibm::{LN2_HI, LN2_LO, PIO2_1, PIO2_2, PIO2_3};

fn factorial(n: u32) -> f64 {
    (1..=n).map(f64::from).product()
}

/// Horner's rule for `c[0] + c[1]·x + ...` as WGSL statements ending in `var {out}`.
fn horner(out: &str, x: &str, c: &[f64]) -> String {
    let mut s = format!("var {out} = {};\n", lf(c[c.len() - 1]));
    for &ci in c[..c.len() - 1].iter().rev() {
        s.push_str(&format!("  {out} = fma({out}, {x}, {});\n", lf(ci)));
    }
    s
}

/// A polynomial stored as the CPU's erf tables store it, `[a₀ hi, a₀ lo, a₁, a₂, ...]`, at `u`, as
/// WGSL statements ending in `let {out}`: two Horner chains in u² (odd and even powers), then
/// `a₀ hi + (a₀ lo + (u·odd + u²·even))` — the order of the CUDA backend's `split_poly`.
fn split_poly(out: &str, u: &str, a: &[f64]) -> String {
    let pairs = a[2..].chunks_exact(2);
    let mut s = format!(
        "let {out}_u2 = {u} * {u};\n  var {out}_o = {};\n  var {out}_e = 0.0lf;\n",
        lf(pairs.remainder().first().copied().unwrap_or(0.0))
    );
    for pair in pairs.rev() {
        s.push_str(&format!(
            "  {out}_o = fma({out}_o, {out}_u2, {});\n  {out}_e = fma({out}_e, {out}_u2, {});\n",
            lf(pair[0]),
            lf(pair[1])
        ));
    }
    s.push_str(&format!(
        "  let {out} = (fma({u}, {out}_o, {out}_u2 * {out}_e) + {}) + {};\n",
        lf(a[1]),
        lf(a[0])
    ));
    s
}

/// The f64 library: `exp64`, `log64`, `sin64`, `cos64`, `erf64`, `erfc64`, `tanh64`,
/// `softplus64`, and `erf64_f32` (erf within about 2e-11, for results rounded to f32: the CPU's
/// `erf_f32` on its tables, no loop and no division). NaN in gives NaN out.
pub fn library() -> String {
    let exp_c: Vec<f64> = (0..=13).map(|i| 1.0 / factorial(i)).collect();
    let log_c: Vec<f64> = (0..=11).map(|i| 1.0 / (2 * i + 1) as f64).collect();
    let sin_c: Vec<f64> = (0..=8)
        .map(|i| if i % 2 == 0 { 1.0 } else { -1.0 } / factorial(2 * i + 1))
        .collect();
    let cos_c: Vec<f64> = (0..=9)
        .map(|i| if i % 2 == 0 { 1.0 } else { -1.0 } / factorial(2 * i))
        .collect();
    format!(
        r#"
fn isnan64(x: f64) -> bool {{ return (bitcast<u64>(x) & 0x7ffffffffffffffflu) > 0x7ff0000000000000lu; }}
fn exp64(x: f64) -> f64 {{
  if (isnan64(x)) {{ return x; }}
  let xc = clamp(x, -746.0lf, 710.0lf);
  let nf = round(xc * {log2e});
  let r0 = fma(-nf, {ln2_hi}, xc);
  let r = fma(-nf, {ln2_lo}, r0);
  {exp_poly}
  let n = i32(nf);
  let n1 = n >> 1u;
  return ldexp(ldexp(p, n1), n - n1);
}}
fn log64(x: f64) -> f64 {{
  if (isnan64(x)) {{ return x; }}
  if (x < 0.0lf) {{ return {nan}; }}
  if (x == 0.0lf) {{ return {ninf}; }}
  if (bitcast<u64>(x) == 0x7ff0000000000000lu) {{ return x; }}
  let w = bitcast<u64>(x);
  var m = bitcast<f64>((w & 0x000ffffffffffffflu) | 0x3ff0000000000000lu);
  var e = i32(u32(w >> 52u) & 0x7ffu) - 1023;
  if (m > {sqrt2}) {{ m = m * 0.5lf; e = e + 1; }}
  let s = (m - 1.0lf) / (m + 1.0lf);
  let s2 = s * s;
  {log_poly}
  let lm = (s * 2.0lf) * q;
  let ef = f64(e);
  return fma(ef, {ln2_hi}, fma(ef, {ln2_lo}, lm));
}}
fn sincos64(x: f64) -> vec2<f64> {{
  let nf = round(x * {two_over_pi});
  let r = fma(-nf, {pio2_3}, fma(-nf, {pio2_2}, fma(-nf, {pio2_1}, x)));
  let r2 = r * r;
  {sin_poly}
  let sr = r * sp;
  {cos_poly}
  let q = u32(nf - 4.0lf * floor(nf * 0.25lf));
  if (q == 1u) {{ return vec2<f64>(cp, -sr); }}
  if (q == 2u) {{ return vec2<f64>(-sr, -cp); }}
  if (q == 3u) {{ return vec2<f64>(-cp, sr); }}
  return vec2<f64>(sr, cp);
}}
fn sin64(x: f64) -> f64 {{ return sincos64(x).x; }}
fn cos64(x: f64) -> f64 {{ return sincos64(x).y; }}
fn erfc_tail64(x: f64) -> f64 {{
  var k = x;
  for (var j = 0u; j < 64u; j = j + 1u) {{
    k = x + (f64(64u - j) * 0.5lf) / k;
  }}
  return exp64(-(x * x)) / (k * {sqrt_pi});
}}
fn erf_pair64(x: f64) -> vec2<f64> {{
  if (isnan64(x)) {{ return vec2<f64>(x, x); }}
  let ax = abs(x);
  let xs = min(ax, 2.0lf);
  let nx2 = -(xs * xs);
  var term = xs;
  var sum = xs;
  for (var n = 1u; n < 80u; n = n + 1u) {{
    let nf = f64(n);
    term = term * nx2 / nf;
    sum = sum + term / (nf * 2.0lf + 1.0lf);
  }}
  let small = sum * {two_over_sqrt_pi};
  let tail = erfc_tail64(max(ax, 2.0lf));
  var e = 1.0lf - tail;
  var c = tail;
  if (ax < 2.0lf) {{ e = small; c = 1.0lf - small; }}
  if (x < 0.0lf) {{ return vec2<f64>(-e, 2.0lf - c); }}
  return vec2<f64>(e, c);
}}
fn erf64(x: f64) -> f64 {{ return erf_pair64(x).x; }}
fn erf64_f32(x: f64) -> f64 {{
  if (isnan64(x)) {{ return x; }}
  let a = abs(x);
  let us = fma(x * x, 2.0lf, -1.0lf);
  {erf_small}
  let um = fma(clamp(a, 1.0lf, 4.0lf), 2.0lf, -5.0lf) * {third};
  {erf_mid}
  if (a < 1.0lf) {{ return fma(x, q, x); }}
  var big = 1.0lf;
  if (a < 4.0lf) {{ big = mid; }}
  return select(big, -big, x < 0.0lf);
}}
fn erfc64(x: f64) -> f64 {{ return erf_pair64(x).y; }}
fn tanh64(x: f64) -> f64 {{
  if (isnan64(x)) {{ return x; }}
  let ax = abs(x);
  if (ax < {tiny}) {{ return x * fma(x * x, {m_third}, 1.0lf); }}
  let t = 1.0lf - 2.0lf / (exp64(ax * 2.0lf) + 1.0lf);
  return select(t, -t, x < 0.0lf);
}}
fn softplus64(x: f64) -> f64 {{
  if (x < -20.0lf) {{ return exp64(x); }}
  if (x > 20.0lf) {{ return x + exp64(-x); }}
  return log64(exp64(x) + 1.0lf);
}}
"#,
        log2e = lf(std::f64::consts::LOG2_E),
        ln2_hi = lf(LN2_HI),
        ln2_lo = lf(LN2_LO),
        exp_poly = horner("p", "r", &exp_c),
        nan = lf(f64::NAN),
        ninf = lf(f64::NEG_INFINITY),
        sqrt2 = lf(std::f64::consts::SQRT_2),
        log_poly = horner("q", "s2", &log_c),
        two_over_pi = lf(std::f64::consts::FRAC_2_PI),
        pio2_1 = lf(PIO2_1),
        pio2_2 = lf(PIO2_2),
        pio2_3 = lf(PIO2_3),
        sin_poly = horner("sp", "r2", &sin_c),
        cos_poly = horner("cp", "r2", &cos_c),
        sqrt_pi = lf(std::f64::consts::PI.sqrt()),
        two_over_sqrt_pi = lf(2.0 / std::f64::consts::PI.sqrt()),
        tiny = lf(1.0 / 4096.0),
        m_third = lf(-1.0 / 3.0),
        third = lf(1.0 / 3.0),
        erf_small = split_poly("q", "us", &quorum_core::ops::elementwise::ERF_SMALL),
        erf_mid = split_poly("mid", "um", &quorum_core::ops::elementwise::ERF_MID_F32),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_calls_no_builtin_transcendental() {
        let l = library();
        for f in [
            "exp(", "log(", "sin(", "cos(", "tanh(", "pow(", "exp2(", "log2(",
        ] {
            let bare = l
                .match_indices(f)
                .any(|(i, _)| !l[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_'));
            assert!(!bare, "the library calls the builtin {f}");
        }
    }
}
