//! Accurate transcendental functions for generated kernels. PTX's fast instructions (`ex2.approx`,
//! `sin.approx`, `tanh.approx`) are off by far more than the oracles allow, so these work in f64
//! (exact for every f32 input) with range reduction and polynomials, and round once to f32: the
//! result is within about one f32 ulp. Constants are fdlibm's (published facts).
use crate::ptx::{Cmp, Kernel, Op, Reg, Ty};

use quorum_core::device::forms::fdlibm::{LN2_HI, LN2_LO, PIO2_1, PIO2_2, PIO2_3};

const LOG2E: f64 = std::f64::consts::LOG2_E;
const TWO_OVER_PI: f64 = std::f64::consts::FRAC_2_PI;

fn d(v: f64) -> Op {
    Op::D(v)
}

/// `p(x) = c[0] + c[1]·x + ... ` by Horner's rule.
fn horner(k: &mut Kernel, x: Reg, c: &[f64]) -> Reg {
    let mut p = k.mov(Ty::F64, d(c[c.len() - 1]));
    for &ci in c[..c.len() - 1].iter().rev() {
        p = k.fma(Ty::F64, p, x, d(ci));
    }
    p
}

fn factorial(n: u32) -> f64 {
    (1..=n).map(f64::from).product()
}

/// `2^n` for an s32 `n` in [-1022, 1023], built from its bits.
fn pow2(k: &mut Kernel, n: Reg) -> Reg {
    let b = k.add(Ty::S32, n, 1023i32);
    let b = k.cvt(Ty::S64, Ty::S32, "", b);
    let b = k.shl(Ty::S64, b, 52u32);
    k.bitcast(Ty::F64, b)
}

/// e^x in f64 (NaN → NaN, overflow → +inf, underflow → 0).
pub fn exp64(k: &mut Kernel, x: Reg) -> Reg {
    let xc = k.max(Ty::F64, x, d(-746.0));
    let xc = k.min(Ty::F64, xc, d(710.0));
    let t = k.mul(Ty::F64, xc, d(LOG2E));
    let n = k.cvt(Ty::S32, Ty::F64, ".rni", t);
    let nf = k.cvt(Ty::F64, Ty::S32, ".rn", n);
    let negn = k.unary("neg", Ty::F64, nf);
    let r = k.fma(Ty::F64, negn, d(LN2_HI), xc);
    let r = k.fma(Ty::F64, negn, d(LN2_LO), r);
    let c: Vec<f64> = (0..=13).map(|i| 1.0 / factorial(i)).collect();
    let p = horner(k, r, &c);
    // 2^n as 2^(n>>1) · 2^(n - n>>1): each half stays a normal f64 for n in [-1076, 1025].
    let n1 = k.shr(Ty::S32, n, 1u32);
    let n2 = k.sub(Ty::S32, n, n1);
    let s1 = pow2(k, n1);
    let s2 = pow2(k, n2);
    let y = k.mul(Ty::F64, p, s1);
    let y = k.mul(Ty::F64, y, s2);
    let nan = k.setp(Cmp::Nan, Ty::F64, x, x);
    k.selp(Ty::F64, x, y, nan)
}

/// ln(x) in f64 for x from f32 (normal in f64); 0 → -inf, x < 0 → NaN, +inf → +inf, NaN → NaN.
pub fn log64(k: &mut Kernel, x: Reg) -> Reg {
    let bits = k.bitcast(Ty::U64, x);
    let e = k.shr(Ty::U64, bits, 52u32);
    let e = k.and(Ty::U64, e, 0x7FFu32);
    let e = k.cvt(Ty::S32, Ty::U64, "", e);
    let e = k.sub(Ty::S32, e, 1023i32);
    let mb = k.and(Ty::U64, bits, Op::I(0x000F_FFFF_FFFF_FFFF));
    let mb = k.or(Ty::U64, mb, Op::I(0x3FF0_0000_0000_0000));
    let m = k.bitcast(Ty::F64, mb);
    let big = k.setp(Cmp::Gt, Ty::F64, m, d(std::f64::consts::SQRT_2));
    let mh = k.mul(Ty::F64, m, d(0.5));
    let m = k.selp(Ty::F64, mh, m, big);
    let e1 = k.add(Ty::S32, e, 1i32);
    let e = k.selp(Ty::S32, e1, e, big);
    let num = k.sub(Ty::F64, m, d(1.0));
    let den = k.add(Ty::F64, m, d(1.0));
    let s = k.div(Ty::F64, num, den);
    let s2 = k.mul(Ty::F64, s, s);
    let c: Vec<f64> = (0..=11).map(|i| 1.0 / (2 * i + 1) as f64).collect();
    let p = horner(k, s2, &c);
    let two_s = k.mul(Ty::F64, s, d(2.0));
    let lm = k.mul(Ty::F64, two_s, p);
    let ef = k.cvt(Ty::F64, Ty::S32, ".rn", e);
    let lo = k.fma(Ty::F64, ef, d(LN2_LO), lm);
    let y = k.fma(Ty::F64, ef, d(LN2_HI), lo);
    // Special values, last wins: +inf, zero, negative, NaN.
    let inf = k.setp(Cmp::Eq, Ty::F64, x, d(f64::INFINITY));
    let y = k.selp(Ty::F64, d(f64::INFINITY), y, inf);
    let zero = k.setp(Cmp::Eq, Ty::F64, x, d(0.0));
    let y = k.selp(Ty::F64, d(f64::NEG_INFINITY), y, zero);
    let neg = k.setp(Cmp::Lt, Ty::F64, x, d(0.0));
    let y = k.selp(Ty::F64, d(f64::NAN), y, neg);
    let nan = k.setp(Cmp::Nan, Ty::F64, x, x);
    k.selp(Ty::F64, x, y, nan)
}

/// (sin x, cos x) in f64. Accurate while |x| < 2^20·π/2; beyond that the reduction loses bits.
pub fn sincos64(k: &mut Kernel, x: Reg) -> (Reg, Reg) {
    let t = k.mul(Ty::F64, x, d(TWO_OVER_PI));
    let nf = k.cvt(Ty::F64, Ty::F64, ".rni", t);
    let negn = k.unary("neg", Ty::F64, nf);
    let r = k.fma(Ty::F64, negn, d(PIO2_1), x);
    let r = k.fma(Ty::F64, negn, d(PIO2_2), r);
    let r = k.fma(Ty::F64, negn, d(PIO2_3), r);
    let r2 = k.mul(Ty::F64, r, r);
    // sin r = r·S(r²), cos r = C(r²) on |r| ≤ π/4.
    let sc: Vec<f64> = (0..=8)
        .map(|i| {
            let s = if i % 2 == 0 { 1.0 } else { -1.0 };
            s / factorial(2 * i + 1)
        })
        .collect();
    let cc: Vec<f64> = (0..=9)
        .map(|i| {
            let s = if i % 2 == 0 { 1.0 } else { -1.0 };
            s / factorial(2 * i)
        })
        .collect();
    let sp = horner(k, r2, &sc);
    let sinr = k.mul(Ty::F64, r, sp);
    let cosr = horner(k, r2, &cc);
    // Quadrant n mod 4 (n fits s64 for any finite f32 input).
    let n = k.cvt(Ty::S64, Ty::F64, ".rni", nf);
    let q = k.and(Ty::S64, n, 3u32);
    let q = k.cvt(Ty::U32, Ty::S64, "", q);
    let nsin = k.unary("neg", Ty::F64, sinr);
    let ncos = k.unary("neg", Ty::F64, cosr);
    let q1 = k.setp(Cmp::Eq, Ty::U32, q, 1u32);
    let q2 = k.setp(Cmp::Eq, Ty::U32, q, 2u32);
    let q3 = k.setp(Cmp::Eq, Ty::U32, q, 3u32);
    // sin: [s, c, -s, -c]; cos: [c, -s, -c, s].
    let s = k.selp(Ty::F64, cosr, sinr, q1);
    let s = k.selp(Ty::F64, nsin, s, q2);
    let s = k.selp(Ty::F64, ncos, s, q3);
    let c = k.selp(Ty::F64, nsin, cosr, q1);
    let c = k.selp(Ty::F64, ncos, c, q2);
    let c = k.selp(Ty::F64, sinr, c, q3);
    (s, c)
}

/// erfc(x) for x ≥ 2 by its continued fraction, 64 terms evaluated backwards: within 2.3e-16 relative
/// of erfc from x = 2 up (40 terms leave 5e-14 at x = 2).
fn erfc_tail64(k: &mut Kernel, x: Reg) -> Reg {
    let kk = k.mov(Ty::F64, x);
    let terms = k.mov(Ty::U32, 64u32);
    k.for_range(Ty::U32, 0u32, 64u32, 1u32, |k, j| {
        // i = 64 - j runs 64, 63, ..., 1.
        let i = k.sub(Ty::U32, terms, j);
        let fi = k.cvt(Ty::F64, Ty::U32, ".rn", i);
        let half_i = k.mul(Ty::F64, fi, d(0.5));
        let q = k.div(Ty::F64, half_i, kk);
        let next = k.add(Ty::F64, x, q);
        k.assign(kk, next);
    });
    let x2 = k.mul(Ty::F64, x, x);
    let nx2 = k.unary("neg", Ty::F64, x2);
    let e = exp64(k, nx2);
    let den = k.mul(Ty::F64, kk, d(std::f64::consts::PI.sqrt()));
    k.div(Ty::F64, e, den)
}

/// (erf x, erfc x) in f64: the Maclaurin series below |x| = 2, the continued fraction above.
pub fn erf64(k: &mut Kernel, x: Reg) -> (Reg, Reg) {
    let ax = k.unary("abs", Ty::F64, x);
    // Series: erf x = 2/√π Σ (-1)^n x^(2n+1) / (n! (2n+1)); 80 terms suffice for |x| < 2. The
    // series stops at 2 because 1 - series loses what erfc needs beyond it: at |x| = 3.7 its terms
    // reach 1e6, leaving erfc (1.7e-7) with a 1e-5 relative error — a Gelu device failure.
    let xs = k.min(Ty::F64, ax, d(2.0));
    let x2 = k.mul(Ty::F64, xs, xs);
    let nx2 = k.unary("neg", Ty::F64, x2);
    let term = k.mov(Ty::F64, xs);
    let sum = k.mov(Ty::F64, xs);
    k.for_range(Ty::U32, 1u32, 80u32, 1u32, |k, n| {
        let nf = k.cvt(Ty::F64, Ty::U32, ".rn", n);
        let t = k.mul(Ty::F64, term, nx2);
        let t = k.div(Ty::F64, t, nf);
        k.assign(term, t);
        let den = k.fma(Ty::F64, nf, d(2.0), d(1.0));
        let add = k.div(Ty::F64, t, den);
        let s = k.add(Ty::F64, sum, add);
        k.assign(sum, s);
    });
    let small = k.mul(Ty::F64, sum, d(2.0 / std::f64::consts::PI.sqrt()));
    let xt = k.max(Ty::F64, ax, d(2.0));
    let tail = erfc_tail64(k, xt);
    let is_small = k.setp(Cmp::Lt, Ty::F64, ax, d(2.0));
    let one_minus_tail = k.sub(Ty::F64, d(1.0), tail);
    let erf_abs = k.selp(Ty::F64, small, one_minus_tail, is_small);
    let one_minus_small = k.sub(Ty::F64, d(1.0), small);
    let erfc_abs = k.selp(Ty::F64, one_minus_small, tail, is_small);
    let neg = k.setp(Cmp::Lt, Ty::F64, x, d(0.0));
    let nerf = k.unary("neg", Ty::F64, erf_abs);
    let erf = k.selp(Ty::F64, nerf, erf_abs, neg);
    // erfc(-a) = 2 - erfc(a).
    let two_minus = k.sub(Ty::F64, d(2.0), erfc_abs);
    let erfc = k.selp(Ty::F64, two_minus, erfc_abs, neg);
    let nan = k.setp(Cmp::Nan, Ty::F64, x, x);
    let erf = k.selp(Ty::F64, x, erf, nan);
    let erfc = k.selp(Ty::F64, x, erfc, nan);
    (erf, erfc)
}

/// A polynomial stored as the CPU's erf tables store it, `[a₀ hi, a₀ lo, a₁, a₂, ...]`, at `u`:
/// two Horner chains in u² (odd and even powers), then `a₀ hi + (a₀ lo + (u·odd + u²·even))`.
fn split_poly(k: &mut Kernel, a: &[f64], u: Reg) -> Reg {
    let [a0, a0_lo, higher @ ..] = a else {
        return k.mov(Ty::F64, d(a.first().copied().unwrap_or(0.0)));
    };
    let u2 = k.mul(Ty::F64, u, u);
    let pairs = higher.chunks_exact(2);
    let mut odd = k.mov(
        Ty::F64,
        d(pairs.remainder().first().copied().unwrap_or(0.0)),
    );
    let mut even = k.mov(Ty::F64, d(0.0));
    for pair in pairs.rev() {
        odd = k.fma(Ty::F64, odd, u2, d(pair[0]));
        even = k.fma(Ty::F64, even, u2, d(pair[1]));
    }
    let e = k.mul(Ty::F64, u2, even);
    let rest = k.fma(Ty::F64, u, odd, e);
    let rest = k.add(Ty::F64, rest, d(*a0_lo));
    k.add(Ty::F64, rest, d(*a0))
}

/// erf x in f64 for a result rounded to f32 (the Erf kernels of f32 and f16): the CPU's `erf_f32`
/// algorithm on its tables — `x + x·Q(x²)` below 1 (`ERF_SMALL`), `ERF_MID_F32` in
/// u = (2|x| − 5)/3 on [1, 4], ±1 beyond — within about 2e-11 of erf before the rounding. Both
/// polynomials are evaluated and one selected: about 30 f64 FMAs, no division, no loop (the
/// series and continued fraction of [`erf64`] cost some 220 f64 divisions per element).
pub fn erf64_for_f32(k: &mut Kernel, x: Reg) -> Reg {
    use quorum_core::ops::elementwise::{ERF_MID_F32, ERF_SMALL};
    let a = k.unary("abs", Ty::F64, x);
    let x2 = k.mul(Ty::F64, x, x);
    let u = k.fma(Ty::F64, x2, d(2.0), d(-1.0));
    let q = split_poly(k, &ERF_SMALL, u);
    let small = k.fma(Ty::F64, x, q, x);
    let ac = k.max(Ty::F64, a, d(1.0));
    let ac = k.min(Ty::F64, ac, d(4.0));
    let um = k.fma(Ty::F64, ac, d(2.0), d(-5.0));
    let um = k.mul(Ty::F64, um, d(1.0 / 3.0));
    let mid = split_poly(k, &ERF_MID_F32, um);
    let below4 = k.setp(Cmp::Lt, Ty::F64, a, d(4.0));
    let big = k.selp(Ty::F64, mid, d(1.0), below4);
    let nbig = k.unary("neg", Ty::F64, big);
    let neg = k.setp(Cmp::Lt, Ty::F64, x, d(0.0));
    let signed = k.selp(Ty::F64, nbig, big, neg);
    let below1 = k.setp(Cmp::Lt, Ty::F64, a, d(1.0));
    let r = k.selp(Ty::F64, small, signed, below1);
    let nan = k.setp(Cmp::Nan, Ty::F64, x, x);
    k.selp(Ty::F64, x, r, nan)
}

/// The scaled complement e^(z²)·erfc(z) on z ∈ [1, 10.5], as a Chebyshev series in
/// u = (2/z − (a + b))/(b − a) with a = 1/10.5, b = 1 (fitted at 4,000 Chebyshev nodes of u): within
/// 8e-14 relative of erfc(z)·e^(z²) over the interval. Beyond 10.5, erfc(z)·z/√2 < 1e-48 is below
/// every f32.
pub const ERFCX_CHEB: [f64; 23] = [
    0.25760951201739574,
    0.18679212706524728,
    -0.017402631215006743,
    0.00033986857865726117,
    0.0003199519485406339,
    -8.661011049765597e-05,
    1.1564813099774283e-05,
    2.54731958142269e-07,
    -6.264882129565503e-07,
    1.9746919033911298e-07,
    -3.502004214905218e-08,
    1.2519479930560963e-09,
    1.7061156033410558e-09,
    -7.581452099249084e-10,
    1.9303576847964887e-10,
    -2.7183024026527228e-11,
    -2.4869794454932862e-12,
    3.1502694041540277e-12,
    -1.2184740839989174e-12,
    3.0463953389072153e-13,
    -4.175643068825894e-14,
    -5.808775321356991e-15,
    6.350470730608337e-15,
];
const ERFCX_LO: f64 = 1.0 / 10.5;

/// Clenshaw's sum of the Chebyshev series `c` at `u`: b_k = 2u·b_(k+1) − b_(k+2) + c_k, then
/// c_0 + u·b_1 − b_2.
fn clenshaw(k: &mut Kernel, c: &[f64], u: Reg) -> Reg {
    let u2 = k.mul(Ty::F64, u, d(2.0));
    let mut b1 = k.mov(Ty::F64, d(0.0));
    let mut b2 = k.mov(Ty::F64, d(0.0));
    for &ck in c[1..].iter().rev() {
        let t = k.sub(Ty::F64, d(ck), b2);
        let b0 = k.fma(Ty::F64, u2, b1, t);
        b2 = b1;
        b1 = b0;
    }
    let t = k.sub(Ty::F64, d(c[0]), b2);
    k.fma(Ty::F64, u, b1, t)
}

/// Gelu x/2 · (1 + erf(x/√2)) in f64 for a result rounded to f32, with w = x/√2: below |w| = 1,
/// 1 + erf(w) from the small-argument polynomial of [`erf64_for_f32`] (the sum is at least
/// erfc(1) = 0.157: no cancellation); from |w| = 1, E = erfc(|w|) = e^(−w²)·[`ERFCX_CHEB`](|w|),
/// and 1 + erf(w) is E for negative w (the tail, where 1 + erf(w) would cancel) and 2 − E for
/// positive. Straight-line code: about 100 f64 operations and one division. (It evaluated erf's
/// middle polynomial for positive w until BERT-base at batch 8 showed the kernel bound by f64
/// throughput: 43 µs a launch over 3.1 M elements.)
pub fn gelu64_for_f32(k: &mut Kernel, x: Reg) -> Reg {
    use quorum_core::ops::elementwise::ERF_SMALL;
    let w = k.mul(Ty::F64, x, d(std::f64::consts::FRAC_1_SQRT_2));
    let w2 = k.mul(Ty::F64, w, w);
    let u = k.fma(Ty::F64, w2, d(2.0), d(-1.0));
    let q = split_poly(k, &ERF_SMALL, u);
    let erf = k.fma(Ty::F64, w, q, w);
    let near = k.add(Ty::F64, erf, d(1.0));
    // |w| clamped into the fit's interval (outside it the value is unused or vanishes).
    let a = k.unary("abs", Ty::F64, w);
    let zc = k.max(Ty::F64, a, d(1.0));
    let zc = k.min(Ty::F64, zc, d(10.5));
    let s = k.div(Ty::F64, d(2.0), zc);
    let scale = 1.0 / (1.0 - ERFCX_LO);
    let uc = k.fma(Ty::F64, s, d(scale), d(-(1.0 + ERFCX_LO) * scale));
    let r = clenshaw(k, &ERFCX_CHEB, uc);
    let nw2 = k.unary("neg", Ty::F64, w2);
    let ez = exp64(k, nw2);
    let e = k.mul(Ty::F64, ez, r);
    // From |w| = 27.5 (∞ included) erfc is 0, as the CPU's is: x/2 · 0 is −0 for negative x, and
    // NaN at x = −∞.
    let far = k.setp(Cmp::Gt, Ty::F64, a, d(27.5));
    let e = k.selp(Ty::F64, d(0.0), e, far);
    let two_minus = k.sub(Ty::F64, d(2.0), e);
    let negative = k.setp(Cmp::Lt, Ty::F64, w, d(0.0));
    let outer = k.selp(Ty::F64, e, two_minus, negative);
    let is_outer = k.setp(Cmp::Ge, Ty::F64, a, d(1.0));
    let onep = k.selp(Ty::F64, outer, near, is_outer);
    let hx = k.mul(Ty::F64, x, d(0.5));
    let y = k.mul(Ty::F64, hx, onep);
    let nan = k.setp(Cmp::Nan, Ty::F64, x, x);
    k.selp(Ty::F64, x, y, nan)
}

/// tanh x in f64: x·(1 - x²/3) for tiny x, otherwise sign·(1 - 2/(e^(2|x|) + 1)).
pub fn tanh64(k: &mut Kernel, x: Reg) -> Reg {
    let ax = k.unary("abs", Ty::F64, x);
    let a2 = k.mul(Ty::F64, ax, d(2.0));
    let e = exp64(k, a2);
    let ep1 = k.add(Ty::F64, e, d(1.0));
    let q = k.div(Ty::F64, d(2.0), ep1);
    let t = k.sub(Ty::F64, d(1.0), q);
    let neg = k.setp(Cmp::Lt, Ty::F64, x, d(0.0));
    let nt = k.unary("neg", Ty::F64, t);
    let big = k.selp(Ty::F64, nt, t, neg);
    let x2 = k.mul(Ty::F64, x, x);
    let p = k.fma(Ty::F64, x2, d(-1.0 / 3.0), d(1.0));
    let tiny_v = k.mul(Ty::F64, x, p);
    let tiny = k.setp(Cmp::Lt, Ty::F64, ax, d(1.0 / 4096.0));
    let y = k.selp(Ty::F64, tiny_v, big, tiny);
    let nan = k.setp(Cmp::Nan, Ty::F64, x, x);
    k.selp(Ty::F64, x, y, nan)
}

/// e^x for an f32 register, within about one ulp.
pub fn exp_f32(k: &mut Kernel, x: Reg) -> Reg {
    let xd = k.cvt(Ty::F64, Ty::F32, "", x);
    let y = exp64(k, xd);
    k.cvt(Ty::F32, Ty::F64, ".rn", y)
}

/// ln x for an f32 register, within about one ulp.
pub fn log_f32(k: &mut Kernel, x: Reg) -> Reg {
    let xd = k.cvt(Ty::F64, Ty::F32, "", x);
    let y = log64(k, xd);
    k.cvt(Ty::F32, Ty::F64, ".rn", y)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ptx::{Space, module};

    #[test]
    fn math_uses_no_approximate_instructions() {
        let mut k = Kernel::new("math");
        let p = k.param_ptr("p");
        let x = k.ld(Space::Global, Ty::F32, p, 0);
        let xd = k.cvt(Ty::F64, Ty::F32, "", x);
        let a = exp64(&mut k, xd);
        let b = log64(&mut k, a);
        let (s, c) = sincos64(&mut k, b);
        let (e, _) = erf64(&mut k, s);
        let t = tanh64(&mut k, e);
        let y = k.add(Ty::F64, t, c);
        let y = k.cvt(Ty::F32, Ty::F64, ".rn", y);
        k.st(Space::Global, p, 0, y);
        let text = module((9, 0), &[k]);
        assert!(!text.contains(".approx"), "{text}");
        assert!(text.contains("cvt.rni.s32.f64"), "{text}");
        assert!(text.contains("cvt.rn.f32.f64"), "{text}");
    }

    /// [`erf64_for_f32`] in Rust, instruction for instruction (each PTX `fma` a `mul_add`), on the
    /// tables given.
    fn erf_for_f32_mirror(x: f64, small_t: &[f64], mid_t: &[f64]) -> f64 {
        let poly = |a: &[f64], u: f64| {
            let u2 = u * u;
            let pairs = a[2..].chunks_exact(2);
            let mut odd = pairs.remainder().first().copied().unwrap_or(0.0);
            let mut even = 0.0f64;
            for pair in pairs.rev() {
                odd = odd.mul_add(u2, pair[0]);
                even = even.mul_add(u2, pair[1]);
            }
            (u.mul_add(odd, u2 * even) + a[1]) + a[0]
        };
        let a = x.abs();
        let small = x.mul_add(poly(small_t, (x * x).mul_add(2.0, -1.0)), x);
        let um = a.clamp(1.0, 4.0).mul_add(2.0, -5.0) * (1.0 / 3.0);
        let big = if a < 4.0 { poly(mid_t, um) } else { 1.0 };
        let r = if a < 1.0 {
            small
        } else if x < 0.0 {
            -big
        } else {
            big
        };
        if x.is_nan() { x } else { r }
    }

    /// The largest error of an erf for f32 results against the runtime's f64 erf, relative below
    /// |x| = 1 and absolute on [1, 4] (where erf's f32 ulp is at least 6e-8), on a dense sweep of
    /// [-6, 6] with the interval ends; from 4 on (±1 there, erfc(4) = 1.5e-8 being under half an
    /// ulp of 1) the two must round to the same f32, or the error is infinite.
    fn erf_for_f32_error(f: &dyn Fn(f64) -> f64) -> f64 {
        let mut worst = 0.0f64;
        let ends = [-4.0, -1.0, -0.0, 0.0, 1.0, 4.0, 1e-30, -1e-30];
        let sweep = (0..=240_000).map(|i| -6.0 + 12.0 * i as f64 / 240_000.0);
        for x in sweep.chain(ends) {
            let x = x as f32 as f64;
            let (got, want) = (f(x), quorum_core::ops::elementwise::erf_f64(x));
            let err = if x.abs() >= 4.0 {
                if got as f32 == want as f32 {
                    0.0
                } else {
                    f64::INFINITY
                }
            } else if x.abs() < 1.0 && want != 0.0 {
                ((got - want) / want).abs()
            } else {
                (got - want).abs()
            };
            worst = worst.max(err);
        }
        worst
    }

    #[test]
    fn erf_for_f32_is_within_2e11_of_erf() {
        use quorum_core::ops::elementwise::{ERF_MID_F32, ERF_SMALL};
        let worst = erf_for_f32_error(&|x| erf_for_f32_mirror(x, &ERF_SMALL, &ERF_MID_F32));
        assert!(worst < 2e-11, "worst error {worst:e}");
        let m = erf_for_f32_mirror(f64::NAN, &ERF_SMALL, &ERF_MID_F32);
        assert!(m.is_nan());
        assert_eq!(
            erf_for_f32_mirror(f64::INFINITY, &ERF_SMALL, &ERF_MID_F32),
            1.0
        );
        assert_eq!(erf_for_f32_mirror(-9.0, &ERF_SMALL, &ERF_MID_F32), -1.0);
    }

    /// The check above fails an erf whose middle polynomial lost its last four terms (errors up to
    /// 1e-7, which would move f32 results by an ulp or two).
    #[test]
    fn erf_for_f32_check_catches_a_truncated_polynomial() {
        use quorum_core::ops::elementwise::{ERF_MID_F32, ERF_SMALL};
        let short = &ERF_MID_F32[..16];
        let worst = erf_for_f32_error(&|x| erf_for_f32_mirror(x, &ERF_SMALL, short));
        assert!(worst > 2e-11, "a truncated polynomial passed: {worst:e}");
    }

    /// The generated erf is the mirrored one: no division, no loop, no approximate instruction.
    #[test]
    fn erf_for_f32_is_straight_line_code() {
        let mut k = Kernel::new("math");
        let p = k.param_ptr("p");
        let x = k.ld(Space::Global, Ty::F32, p, 0);
        let xd = k.cvt(Ty::F64, Ty::F32, "", x);
        let e = erf64_for_f32(&mut k, xd);
        let y = k.cvt(Ty::F32, Ty::F64, ".rn", e);
        k.st(Space::Global, p, 0, y);
        let text = module((9, 0), &[k]);
        assert!(!text.contains("div."), "{text}");
        assert!(!text.contains("bra"), "{text}");
        assert!(!text.contains(".approx"), "{text}");
        assert!(text.matches("fma.rn.f64").count() >= 25, "{text}");
    }

    /// [`gelu64_for_f32`] in Rust, instruction for instruction, on the series given (`exp` from std:
    /// `exp64` is checked against it below).
    fn gelu_for_f32_mirror(x: f64, cheb: &[f64]) -> f64 {
        use quorum_core::ops::elementwise::{ERF_MID_F32, ERF_SMALL};
        let w = x * std::f64::consts::FRAC_1_SQRT_2;
        // Below |w| = 1 the erf mirror takes the small-argument branch the kernel evaluates.
        let near = erf_for_f32_mirror(w, &ERF_SMALL, &ERF_MID_F32) + 1.0;
        let a = w.abs();
        let s = 2.0 / a.clamp(1.0, 10.5);
        let scale = 1.0 / (1.0 - ERFCX_LO);
        let u = s.mul_add(scale, -(1.0 + ERFCX_LO) * scale);
        let (mut b1, mut b2) = (0.0f64, 0.0f64);
        for &c in cheb[1..].iter().rev() {
            (b1, b2) = ((2.0 * u).mul_add(b1, c - b2), b1);
        }
        let r = u.mul_add(b1, cheb[0] - b2);
        let e = if a > 27.5 { 0.0 } else { (-(w * w)).exp() * r };
        let outer = if w < 0.0 { e } else { 2.0 - e };
        let y = (x * 0.5) * if a >= 1.0 { outer } else { near };
        if x.is_nan() { x } else { y }
    }

    /// The largest relative error of a Gelu for f32 results against the CPU's f64 Gelu over a dense
    /// sweep of [-16, 8] (every f32 result from about -1.7e-45 up), where both are normal f32: the
    /// negative tail (x < −√2) and the rest apart. Below |x/√2| = 1 the small-argument erf
    /// polynomial (2e-11) sets the error; from there the erfc series (8e-14).
    fn gelu_for_f32_error(cheb: &[f64]) -> (f64, f64) {
        let (mut tail, mut rest) = (0.0f64, 0.0f64);
        for i in 0..=480_000 {
            let x = (-16.0 + 24.0 * i as f64 / 480_000.0) as f32 as f64;
            let want = quorum_core::ops::elementwise::gelu_f64(x);
            let got = gelu_for_f32_mirror(x, cheb);
            if (want as f32).abs() < f32::MIN_POSITIVE {
                // Subnormal or zero results: the same f32 (within the subnormal's rounding).
                assert!(
                    ((got as f32) - want as f32).abs() <= 1e-45,
                    "{x}: {got} vs {want}"
                );
                continue;
            }
            let e = ((got - want) / want).abs();
            if x < -std::f64::consts::SQRT_2 {
                tail = tail.max(e);
            } else {
                rest = rest.max(e);
            }
        }
        (tail, rest)
    }

    #[test]
    fn gelu_for_f32_is_within_1e10_of_gelu() {
        let (tail, rest) = gelu_for_f32_error(&ERFCX_CHEB);
        assert!(tail < 1e-12, "worst relative error of the tail {tail:e}");
        assert!(rest < 1e-10, "worst relative error {rest:e}");
        assert!(gelu_for_f32_mirror(f64::NAN, &ERFCX_CHEB).is_nan());
        assert_eq!(
            gelu_for_f32_mirror(f64::INFINITY, &ERFCX_CHEB),
            f64::INFINITY
        );
        // As the CPU: −∞ · 0.
        assert!(gelu_for_f32_mirror(f64::NEG_INFINITY, &ERFCX_CHEB).is_nan());
        assert!(quorum_core::ops::elementwise::gelu_f64(f64::NEG_INFINITY).is_nan());
        let z = gelu_for_f32_mirror(-40.0, &ERFCX_CHEB);
        assert!(z == 0.0 && z.is_sign_negative());
    }

    /// The check above fails a tail series that lost its last six terms.
    #[test]
    fn gelu_for_f32_check_catches_a_truncated_series() {
        let (tail, _) = gelu_for_f32_error(&ERFCX_CHEB[..17]);
        assert!(tail > 1e-12, "a truncated series passed: {tail:e}");
    }

    /// One division, no loop, no approximate instruction.
    #[test]
    fn gelu_for_f32_is_straight_line_code() {
        let mut k = Kernel::new("math");
        let p = k.param_ptr("p");
        let x = k.ld(Space::Global, Ty::F32, p, 0);
        let xd = k.cvt(Ty::F64, Ty::F32, "", x);
        let g = gelu64_for_f32(&mut k, xd);
        let y = k.cvt(Ty::F32, Ty::F64, ".rn", g);
        k.st(Space::Global, p, 0, y);
        let text = module((9, 0), &[k]);
        assert_eq!(text.matches("div.").count(), 1, "{text}");
        assert!(!text.contains("bra"), "{text}");
        assert!(!text.contains(".approx"), "{text}");
    }

    /// The same algorithms in Rust f64 (mirroring the generated instruction order) against std.
    #[test]
    fn algorithms_match_std() {
        let exp = |x: f64| {
            let xc = x.clamp(-746.0, 710.0);
            let n = (xc * LOG2E).round_ties_even();
            let r = (-n).mul_add(LN2_HI, xc);
            let r = (-n).mul_add(LN2_LO, r);
            let mut p = 1.0 / factorial(13);
            for i in (0..13).rev() {
                p = p.mul_add(r, 1.0 / factorial(i));
            }
            let n = n as i32;
            let n1 = n >> 1;
            let n2 = n - n1;
            p * f64::from_bits(((n1 + 1023) as u64) << 52)
                * f64::from_bits(((n2 + 1023) as u64) << 52)
        };
        for &x in &[
            -100.0f64, -10.5, -1.0, -1e-8, 0.0, 0.3, 1.0, 20.0, 88.5, 700.0,
        ] {
            let (a, b) = (exp(x), x.exp());
            assert!(((a - b) / b).abs() < 1e-14, "exp({x}) = {a} vs {b}");
        }
        assert_eq!(exp(710.0), f64::INFINITY);
        assert_eq!(exp(-746.0), 0.0);
    }
}
