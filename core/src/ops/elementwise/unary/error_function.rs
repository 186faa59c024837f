//! The error function and its complement in f64, to within about one ulp over the whole line: Erf
//! and Gelu compute through them for f64, f16 and bf16 data (the 16-bit types widened to f64), and
//! f64 data needs them that accurate (the arbitration bounds are 4 and 8 ulps of the computed
//! type). f32 data has branch-free vector kernels of its own, [`erf_f32`] and [`gelu_f32`], each
//! within one f32 ulp of these functions rounded.
//!
//! Four polynomials, each of a function that is smooth and far from zero on its interval:
//! - `erf(x) = x + x · Q(x²)` for |x| < 1, Q(z) = erf(√z)/√z − 1 on z in [0, 1] ([`ERF_SMALL`]);
//!   |Q| ≤ 0.16, so the rounding errors of Q weigh a sixth of an ulp;
//! - `erfc(y)` itself on [1/2, 3/4] and [3/4, 1] ([`ERFC_NEAR`]);
//! - `erfc(y) = e^(-y²) · erfcx(y)` for 1 ≤ y < 4, the scaled erfcx(y) = e^(y²) erfc(y) on six
//!   intervals of width 1/2 ([`ERFCX_MID`]);
//! - `erfc(y) = e^(-y²) · H(1/y²) / y` for y ≥ 4, H(s) = erfcx(1/√s) / √s on s in [0, 1/16], which
//!   tends to 1/√π as y grows ([`ERFC_TAIL`]).
//!
//! Elsewhere erf = 1 − erfc, erfc = 1 − erf and erfc(−y) = 2 − erfc(y), each only where the term
//! subtracted is at most about half the result. e^(-y²) is formed with the rounding error of y²
//! taken into account, which would otherwise cost up to y²/2 ulps.
//!
//! Each polynomial is in u in [-1, 1], its interval mapped linearly, in powers of u (evaluated as
//! two independent Horner chains, which keeps the f32 Gelu no slower than the former, less accurate
//! series): mpmath's Chebyshev interpolant at 50 digits, truncated after the last term above 1e-19
//! of the function's smallest magnitude on the interval, expanded into powers of u and rounded to
//! f64 (Python `repr`), the constant term in two parts:
//! ```text
//! from mpmath import mp, mpf, erf, erfc, exp, sqrt, cos, pi
//! mp.dps = 50; N = 64
//! def fit(f, a, b, shift=0):  # f - shift on [a, b] in u = (2x - a - b) / (b - a)
//!     fs = [f((b - a) / 2 * cos(pi * (j + mpf(1) / 2) / N) + (a + b) / 2) for j in range(N)]
//!     c = [2 * sum(fs[j] * cos(pi * k * (j + mpf(1) / 2) / N) for j in range(N)) / N
//!          for k in range(N)]
//!     c[0] = c[0] / 2 - shift
//!     n = max(k for k in range(N) if abs(c[k]) > mpf("1e-19") * min(map(abs, fs))) + 1
//!     t = [[mpf(1)], [mpf(0), mpf(1)]]  # T_k in powers of u: T_k+1 = 2u T_k - T_k-1
//!     while len(t) < n:
//!         t.append([2 * p for p in [mpf(0)] + t[-1]])
//!         for k, p in enumerate(t[-3]):
//!             t[-1][k] -= p
//!     a = [sum(c[k] * t[k][j] for k in range(j, n) if j < len(t[k])) for j in range(n)]
//!     return [float(a[0]), float(a[0] - float(a[0]))] + [float(v) for v in a[1:]]
//! erfcx = lambda x: erfc(x) * exp(x * x)
//! ERF_SMALL = fit(lambda z: erf(sqrt(z)) / sqrt(z) if z > 0 else 2 / sqrt(pi), 0, 1, shift=1)
//! ERFC_NEAR = [fit(erfc, mpf(1) / 2 + mpf(i) / 4, mpf(3) / 4 + mpf(i) / 4) for i in range(2)]
//! ERFCX_MID = [fit(erfcx, 1 + mpf(i) / 2, mpf(3) / 2 + mpf(i) / 2) for i in range(6)]
//! H = lambda s: erfcx(1 / sqrt(s)) / sqrt(s) if s > 0 else 1 / sqrt(pi)
//! ERFC_TAIL = fit(H, 0, mpf(1) / 16)
//! ```
//! (rows of ERFC_NEAR and ERFCX_MID padded with zeros to a common length). Measured against mpmath
//! at 150,000 uniform points over [-6, 6] and 50,000 with 6 ≤ |x| ≤ 27.5, in ulps of the exact
//! value: erf within 1.01, erfc within 1.47, [`gelu`] within 2.04 (0.62, 1.08 and 1.27 ε
//! relative).
//!
//! The accelerators' Erf kernels for f32 and f16 evaluate the `erf_f32` algorithm on these tables
//! ([`ERF_SMALL`], [`ERF_MID_F32`]), shared with CUDA's and wgpu's generated math libraries.

/// The error function 2/√π ∫₀ˣ e^(-t²) dt. NaN stays NaN.
pub fn erf(x: f64) -> f64 {
    let a = x.abs();
    if a < 1.0 {
        x + x * polynomial(&ERF_SMALL, 2.0 * (x * x) - 1.0)
    } else if a < 6.0 {
        // erfc(1) = 0.157: no cancellation; from 6 on, erfc < 2e-17 rounds away against 1.
        (1.0 - erfc_direct(a)).copysign(x)
    } else if a >= 6.0 {
        1f64.copysign(x)
    } else {
        x
    }
}

/// The complementary error function 1 − erf(y), without the cancellation of that difference where
/// erf(y) is near 1. NaN stays NaN.
pub(super) fn erfc(y: f64) -> f64 {
    if y >= 0.5 {
        erfc_direct(y)
    } else if y > -1.0 {
        // erf(y) ≤ erf(1/2) = 0.52 against erfc(y) ≥ 0.48.
        1.0 - erf(y)
    } else if y <= -1.0 {
        2.0 - erfc_direct(-y)
    } else {
        y
    }
}

/// Gelu's exact form x/2 · (1 + erf(x/√2)), as x/2 · erfc(−x/√2) so that it does not cancel for
/// negative x. The argument −x/√2 is rounded to f64 first, as the oracles form it: that rounding is
/// part of the function computed (a relative change δ in z moves erfc(z) by up to (2z² + 1)δ).
pub fn gelu(x: f64) -> f64 {
    0.5 * x * erfc(-x / std::f64::consts::SQRT_2)
}

/// erfc(y) for y ≥ 1/2: [`ERFC_NEAR`] below 1, then e^(-y²) times the scaled complement from
/// [`ERFCX_MID`] or [`ERFC_TAIL`], the products and the quotient carried with their rounding errors
/// so that only e^(-y²) and the last operation round. From y² = 704, where the result nears the
/// subnormal range, e^(-y²) is applied in two halves so that the result is rounded once.
fn erfc_direct(y: f64) -> f64 {
    if y < 1.0 {
        let i = ((y - 0.5) * 4.0) as usize;
        // 8y − 5 and 8y − 7 are exact for y in [1/2, 1].
        return polynomial(&ERFC_NEAR[i], 8.0 * y - (5.0 + 2.0 * i as f64));
    }
    if y > 27.5 {
        return 0.0; // below half the smallest subnormal, as is every erfc from 27.3; also y = ∞
    }
    let (sq, lo) = two_product(y, y);
    let (a0, rest) = if y < 4.0 {
        let i = ((y - 1.0) * 2.0) as usize;
        // y minus the interval's midpoint (a multiple of 1/4 within 1/4 of y) is exact.
        polynomial_parts(&ERFCX_MID[i], 4.0 * (y - (1.25 + 0.5 * i as f64)))
    } else {
        polynomial_parts(&ERFC_TAIL, 32.0 / sq - 1.0)
    };
    // e^(-y²) = e^(-sq) e^(-lo), and e^(-lo) = 1 − lo to 1e-26 (|lo| ≤ 2⁻⁵³ y²): the correction
    // joins the polynomial's smaller terms.
    let rest = rest - (a0 + rest) * lo;
    let (e, rescale) = if sq < 704.0 {
        ((-sq).exp(), 1.0)
    } else {
        let half = (-0.5 * sq).exp();
        (half, half)
    };
    // e (a0 + rest) = p + t, with p + pe = e a0 exactly.
    let (p, pe) = two_product(e, a0);
    let t = pe + e * rest;
    let r = if y < 4.0 {
        p + t
    } else {
        // (p + t) / y = q + ((p − q y) + t) / y, with p − q y exact.
        let q = p / y;
        let (qy, qye) = two_product(q, y);
        q + ((p - qy - qye) + t) / y
    };
    r * rescale
}

/// erf(x) on [1, 4] in powers of u = (2x − 5)/3: the fit above (`fit(erf, 1, 4)`), truncated after
/// the last term above 1e-11 rather than 1e-19, for f32 results only ([`erf_f32`]): within
/// 1.2e-11 of erf on the interval, against half an f32 ulp of at least 3e-8 there.
pub const ERF_MID_F32: [f64; 20] = [
    0.9995930479757179,
    -2.4401655903195117e-18,
    0.0032674262997314085,
    -0.012252847422974571,
    0.02818155464312288,
    -0.043650819346370315,
    0.04645357811647974,
    -0.03187596612108541,
    0.009267782605764047,
    0.0066768572119079205,
    -0.0096221821271832,
    0.0045585208700773565,
    0.00044344739867411783,
    -0.0018600137811144617,
    0.0009188635448303457,
    0.00010030655531192212,
    -0.0002938109408135523,
    7.670250347891768e-05,
    3.2936280501746225e-05,
    -1.5399685280851134e-05,
];

/// erf of f32 values into `out`, each computed in f64 and rounded once: `x + x·Q(x²)` below 1 (as
/// [`erf`]), [`ERF_MID_F32`] on [1, 4], ±1 beyond (erfc(3.9) is under half an ulp of 1). Both
/// polynomials are evaluated for every element and one selected, so the loop has no branch and
/// vectorizes, with the widest vectors this CPU has (the same operations either way: the same
/// bits). Before the rounding the value is within 2e-11 of erf (relative), so the f32 result is
/// erf rounded correctly except within that distance of a rounding boundary, where it may be the
/// other neighbour.
pub(super) fn erf_f32(x: &[f32], out: &mut [std::mem::MaybeUninit<f32>]) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,fma")]
        fn avx512(x: &[f32], out: &mut [std::mem::MaybeUninit<f32>]) {
            erf_f32_body(x, out)
        }
        #[target_feature(enable = "avx2,fma")]
        fn avx2(x: &[f32], out: &mut [std::mem::MaybeUninit<f32>]) {
            erf_f32_body(x, out)
        }
        match quorum_kernels::Isa::detected() {
            // SAFETY: `Isa::detected` returned Avx512 only because `avx512f` was detected on this
            // CPU (FMA, also enabled, is implied by AVX-512F); the body only indexes slices.
            quorum_kernels::Isa::Avx512 => return unsafe { avx512(x, out) },
            // SAFETY: `Isa::Avx2` is returned only where both `avx2` and `fma` were detected.
            quorum_kernels::Isa::Avx2 => return unsafe { avx2(x, out) },
            quorum_kernels::Isa::Portable => {}
        }
    }
    erf_f32_body(x, out)
}

#[inline(always)]
fn erf_f32_body(x: &[f32], out: &mut [std::mem::MaybeUninit<f32>]) {
    for (o, &v) in out.iter_mut().zip(x) {
        o.write(erf_f32_one(v));
    }
}

/// One element of [`erf_f32`].
#[inline(always)]
fn erf_f32_one(v: f32) -> f32 {
    let x = v as f64;
    let a = x.abs();
    let small = x + x * polynomial(&ERF_SMALL, 2.0 * (x * x) - 1.0);
    let mid = polynomial(&ERF_MID_F32, (2.0 * a.clamp(1.0, 4.0) - 5.0) * (1.0 / 3.0));
    let big = if a < 4.0 { mid } else { 1.0 };
    let r = if a < 1.0 { small } else { big.copysign(x) };
    (if a.is_nan() { x } else { r }) as f32
}

/// Gelu of f32 values into `out`, each x/2 · erfc(z), z = −x/√2, computed in f64 and rounded
/// once, with no branch: erfc(y) = e^(−y²) · erfcx(y) for y = z, or y = −z where z < −1 (then
/// erfc(z) = 2 − erfc(−z), which cannot cancel: erfc(1) = 0.157), erfcx from one polynomial on
/// [−1, 10.5] ([`ERFCX_F32`]) and e^(−y²) from [`exp_f64`]. Past y = 10.5 erfc(z) is taken as 0:
/// the product is then below half the least f32 subnormal for every x up to 1e4 in magnitude.
/// z is x times 1/√2 rounded (not x divided by √2 as [`gelu`] forms it): the two differ by an f64
/// ulp at most, far below the f32 result's.
///
/// Below −1e4, and for NaN, the f64 [`gelu`] decides (a rounded tiny product may not be zero there;
/// −∞ · 0 is NaN). Before the rounding each value is within about 2e-13 of Gelu (relative), so the
/// f32 result is Gelu rounded correctly except that close to a rounding boundary.
pub(super) fn gelu_f32(x: &[f32], out: &mut [std::mem::MaybeUninit<f32>]) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512dq,fma")]
        fn avx512(x: &[f32], out: &mut [std::mem::MaybeUninit<f32>]) {
            gelu_f32_body(x, out)
        }
        #[target_feature(enable = "avx2,fma")]
        fn avx2(x: &[f32], out: &mut [std::mem::MaybeUninit<f32>]) {
            gelu_f32_body(x, out)
        }
        let isa = quorum_kernels::Isa::detected();
        let dq = std::arch::is_x86_feature_detected!("avx512dq");
        if isa == quorum_kernels::Isa::Avx512 && dq {
            // SAFETY: `Isa::Avx512` means `avx512f` was detected (FMA is implied by it), and
            // `avx512dq` was detected just above: every feature the wrapper enables is present.
            return unsafe { avx512(x, out) };
        }
        if quorum_kernels::Isa::Avx2.is_supported() && isa != quorum_kernels::Isa::Portable {
            // SAFETY: `Isa::Avx2.is_supported()` holds only where both `avx2` and `fma` were
            // detected. An AVX-512 CPU without DQ (Xeon Phi) comes here too: every width gives the
            // same bits.
            return unsafe { avx2(x, out) };
        }
    }
    gelu_f32_body(x, out)
}

#[inline(always)]
// `!(v >= -1e4)` on purpose: NaN inputs go to the f64 function too.
#[allow(clippy::neg_cmp_op_on_partial_ord)]
fn gelu_f32_body(x: &[f32], out: &mut [std::mem::MaybeUninit<f32>]) {
    // Thirty-two at a time: each step of the polynomial is then four independent vectors, and the
    // chains of one block overlap instead of waiting on each other's latency.
    let mut xs = x.chunks_exact(GELU_LANES);
    let mut os = out.chunks_exact_mut(GELU_LANES);
    for (xb, ob) in (&mut xs).zip(&mut os) {
        let r = gelu_lanes::<GELU_LANES>(xb.try_into().expect("a block"));
        for (o, v) in ob.iter_mut().zip(r) {
            o.write(v);
        }
        // The rare inputs the vector form leaves to the f64 function (one test per block, without
        // a branch per element).
        if xb.iter().fold(false, |any, &v| any | !(v >= -1e4)) {
            for (o, &v) in ob.iter_mut().zip(xb) {
                if !(v >= -1e4) {
                    o.write(gelu(v as f64) as f32);
                }
            }
        }
    }
    for (o, &v) in os.into_remainder().iter_mut().zip(xs.remainder()) {
        o.write(gelu_f32_one(v));
    }
}

/// Elements per block of [`gelu_f32`].
const GELU_LANES: usize = 32;

/// One element of [`gelu_f32`].
#[inline(always)]
fn gelu_f32_one(v: f32) -> f32 {
    if v >= -1e4 {
        gelu_lanes::<1>(&[v])[0]
    } else {
        gelu(v as f64) as f32
    }
}

/// [`gelu_f32`] for `L` elements side by side (each element's operations are the same whatever
/// `L`, so a block and a lone element give the same bits), for x ≥ −1e4. Plain loops over arrays,
/// which the compiler turns into vectors.
#[inline(always)]
fn gelu_lanes<const L: usize>(v: &[f32; L]) -> [f32; L] {
    let (mut x, mut z, mut y, mut u) = ([0f64; L], [0f64; L], [0f64; L], [0f64; L]);
    for i in 0..L {
        x[i] = v[i] as f64;
        z[i] = -x[i] * std::f64::consts::FRAC_1_SQRT_2;
        y[i] = if z[i] < -1.0 { -z[i] } else { z[i] }.min(10.5);
        let t = (y[i] - 3.0) / (y[i] + 3.0);
        u[i] = (2.0 * t - ERFCX_F32_T_SUM) * (1.0 / ERFCX_F32_T_SPAN);
    }
    let cx = polynomial_lanes(&ERFCX_F32, &u);
    let mut r = [0f32; L];
    for i in 0..L {
        let e = exp_f64(-(y[i] * y[i])) * cx[i];
        let erfc = if z[i] < -1.0 {
            2.0 - e
        } else if z[i] <= 10.5 {
            e
        } else {
            0.0
        };
        r[i] = (0.5 * x[i] * erfc) as f32;
    }
    r
}

/// [`polynomial`] at `L` points side by side, with the same operations for each, its steps fused
/// multiply-adds (one rounding each instead of two, and half the operations: [`gelu_f32`]'s time
/// is mostly this polynomial and [`exp_f64`]).
#[inline(always)]
fn polynomial_lanes<const L: usize>(a: &[f64], u: &[f64; L]) -> [f64; L] {
    let mut r = [0f64; L];
    let [a0, a0_lo, higher @ ..] = a else {
        for i in 0..L {
            r[i] = polynomial(a, u[i]);
        }
        return r;
    };
    let mut u2 = [0f64; L];
    for i in 0..L {
        u2[i] = u[i] * u[i];
    }
    let pairs = higher.chunks_exact(2);
    let mut odd = [pairs.remainder().first().copied().unwrap_or(0.0); L];
    let mut even = [0f64; L];
    for pair in pairs.rev() {
        for i in 0..L {
            odd[i] = odd[i].mul_add(u2[i], pair[0]);
            even[i] = even[i].mul_add(u2[i], pair[1]);
        }
    }
    for i in 0..L {
        r[i] = a0 + (a0_lo + u[i].mul_add(odd[i], u2[i] * even[i]));
    }
    r
}

/// e^y in f64 for y in [−708, 0] with no branch: y = n·ln 2 + r (n by the 1.5·2⁵² rounding
/// trick, ln 2 in two parts so that n·ln 2 is exact in its high part), e^r by its Taylor series
/// to r¹¹ (|r| ≤ ln 2 / 2: truncation below 7e-15 relative) in fused multiply-adds, scaled by 2ⁿ
/// built in the exponent bits. Within 2e-14 of e^y (relative).
#[inline(always)]
fn exp_f64(y: f64) -> f64 {
    const SHIFT: f64 = 6_755_399_441_055_744.0;
    // fdlibm's constants, digit for digit as published (more digits than an f64 keeps).
    #[allow(clippy::excessive_precision)]
    const LN2_HI: f64 = 6.931_471_803_691_238_164_90e-1;
    #[allow(clippy::excessive_precision)]
    const LN2_LO: f64 = 1.908_214_929_270_587_700_02e-10;
    let t = y.mul_add(std::f64::consts::LOG2_E, SHIFT);
    let n = t - SHIFT;
    let r = n.mul_add(-LN2_LO, n.mul_add(-LN2_HI, y));
    let mut p: f64 = 1.0 / 39_916_800.0;
    for c in [
        1.0 / 3_628_800.0,
        1.0 / 362_880.0,
        1.0 / 40_320.0,
        1.0 / 5_040.0,
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ] {
        p = p.mul_add(r, c);
    }
    // n's integer value sits in t's low mantissa bits.
    let k = (t.to_bits() as i64).wrapping_sub(SHIFT.to_bits() as i64);
    p * f64::from_bits(((k + 1023) << 52) as u64)
}

/// t = (y − 3)/(y + 3) for y in [−1, 10.5] spans [−2, 5/9]: the sum and span of its ends.
const ERFCX_F32_T_SUM: f64 = 5.0 / 9.0 - 2.0;
const ERFCX_F32_T_SPAN: f64 = 5.0 / 9.0 + 2.0;

/// erfcx(y) = e^(y²) erfc(y) for y in [−1, 10.5], in powers of u = (2t − (t₀ + t₁)) / (t₁ − t₀)
/// with t = (y − 3)/(y + 3) ([−2, 5/9] onto [−1, 1]; erfcx is smooth in t where it is not in
/// y's own powers over so long an interval), stored as [`polynomial`] reads it. From the same
/// Chebyshev fit as the module's other tables (`fit` with its threshold 1e-19 raised to 2e-13 of
/// erfcx's smallest value there, enough for an f32 result):
/// ```text
/// y_of_t = lambda t: 3 * (1 + t) / (1 - t)
/// ERFCX_F32 = fit(lambda t: erfcx(y_of_t(t)), mpf(-2), (mpf(21) / 2 - 3) / (mpf(21) / 2 + 3))
/// ```
/// Evaluated in f64 at 40,001 points of [−1, 10.5] against mpmath: within 1.2e-13 (relative).
const ERFCX_F32: [f64; 23] = [
    0.6240539410558988,
    4.4047166646920813e-17,
    -1.355617793814829,
    1.4681776182688093,
    -1.0505100050555591,
    0.4621115647992509,
    -0.08276857133143607,
    -0.025085590131976886,
    0.01260058605743757,
    0.0023420350956200775,
    -0.001620128479890085,
    -0.0004476657909817085,
    0.00018238771647041528,
    0.00010080499272635111,
    -7.777099389842226e-06,
    -1.8961137335223374e-05,
    -4.031141191085054e-06,
    2.3303847439446916e-06,
    1.4859602671779174e-06,
    -6.703596348186942e-08,
    -2.651959703085328e-07,
    -2.0246374103771805e-08,
    2.187623066437123e-08,
];

/// a · b as `(p, e)` with p = a · b rounded and p + e exactly a · b (Dekker's product, each factor
/// split into two 26-bit halves by Veltkamp's method); for |a|, |b| below 1e300.
fn two_product(a: f64, b: f64) -> (f64, f64) {
    let split = |v: f64| {
        let big = v * 134_217_729.0;
        let hi = big - (big - v);
        (hi, v - hi)
    };
    let p = a * b;
    let ((ah, al), (bh, bl)) = (split(a), split(b));
    (p, ((ah * bh - p) + ah * bl + al * bh) + al * bl)
}

/// The polynomial `a₀ + a₁ u + a₂ u² + ...` stored as `[a₀ hi, a₀ lo, a₁, a₂, ...]`: the constant
/// term in two parts (a₀ hi rounded, a₀ lo the rest), as its rounding alone could cost an ulp.
fn polynomial(a: &[f64], u: f64) -> f64 {
    let (a0, rest) = polynomial_parts(a, u);
    a0 + rest
}

/// [`polynomial`] as `a₀ hi` and the sum of the other terms, not yet added: Horner's rule in u² on
/// the odd and on the even powers, two independent chains of half the length.
fn polynomial_parts(a: &[f64], u: f64) -> (f64, f64) {
    let u2 = u * u;
    let [a0, a0_lo, higher @ ..] = a else {
        return (a.first().copied().unwrap_or(0.0), 0.0);
    };
    // (a₁, a₂), (a₃, a₄), ...; an odd count leaves the top odd-power coefficient over.
    let pairs = higher.chunks_exact(2);
    let (mut odd, mut even) = (pairs.remainder().first().copied().unwrap_or(0.0), 0.0);
    for pair in pairs.rev() {
        odd = odd * u2 + pair[0];
        even = even * u2 + pair[1];
    }
    (*a0, a0_lo + (u * odd + u2 * even))
}

/// Q(z) = erf(√z)/√z − 1 on z in [0, 1], in powers of u = 2z − 1.
pub const ERF_SMALL: [f64; 15] = [
    -0.03453126133013269,
    9.355257732086903e-19,
    -0.1405360890227171,
    0.019852496688983708,
    -0.0022854855611440673,
    0.00021751715604160108,
    -1.75371694414921e-05,
    1.223382738352401e-06,
    -7.511569160678138e-08,
    4.11580059766496e-09,
    -2.0352493920247854e-10,
    9.167606746069445e-12,
    -3.7910930392717217e-13,
    1.454817075960679e-14,
    -5.166061616805981e-16,
];
/// erfc(y) on [1/2 + i/4, 3/4 + i/4], in powers of u = 8y − 5 − 2i.
const ERFC_NEAR: [[f64; 15]; 2] = [
    [
        0.376759117811582,
        2.7016721189576374e-17,
        -0.09543744197007561,
        0.007456050153912157,
        0.0001087340647445523,
        -4.3081018955710045e-05,
        8.365909138757199e-07,
        1.57718023934176e-07,
        -6.632808992986932e-09,
        -3.9852669277140775e-10,
        2.70706281234853e-11,
        6.840437878185613e-13,
        -7.892924133656881e-14,
        -5.944326175868116e-16,
        1.7976075645976255e-16,
    ],
    [
        0.21592493894014034,
        4.289072711972458e-18,
        -0.06559313066126853,
        0.007174248666076246,
        -0.00018149140970728127,
        -2.7440567000781167e-05,
        2.0512657892494953e-06,
        3.954996394303814e-08,
        -8.867133377074941e-09,
        1.1003890598501669e-10,
        2.4265304024282e-11,
        -8.364402559057658e-13,
        -4.5236549688647046e-14,
        2.784988892820745e-15,
        0.0,
    ],
];
/// erfcx(y) = e^(y²) erfc(y) on [1 + i/2, 3/2 + i/2], in powers of u = 4(y − 5/4 − i/2).
const ERFCX_MID: [[f64; 16]; 6] = [
    [
        0.3678229164523611,
        1.3846140518436162e-19,
        -0.052205468991152464,
        0.006674723218537425,
        -0.0007846605374360513,
        8.598189160491005e-05,
        -8.868776985335674e-06,
        8.674584724741752e-07,
        -8.09193680378784e-08,
        7.232212962964344e-09,
        -6.216436611027967e-10,
        5.155001854106995e-11,
        -4.134419908556481e-12,
        3.215473325967751e-13,
        -2.4784641347778522e-14,
        1.8229207614704157e-15,
    ],
    [
        0.2849722347374364,
        8.539783158039094e-18,
        -0.0327440863786213,
        0.0034852268804429543,
        -0.0003478124256466921,
        3.2829371903628235e-05,
        -2.9501705580379753e-06,
        2.537120416131788e-07,
        -2.096761187943402e-08,
        1.6709180954414315e-09,
        -1.2876652664954847e-10,
        9.619416221153914e-12,
        -6.979895404220431e-13,
        4.929457134410612e-14,
        -3.4506170380182313e-15,
        2.3195261566208467e-16,
    ],
    [
        0.23108725873039188,
        -5.7433552569479915e-18,
        -0.02212162570218729,
        0.001999539213169141,
        -0.00017190719931937565,
        1.4136700602967933e-05,
        -1.1169223473188913e-06,
        8.509165573276882e-08,
        -6.2695972349055866e-09,
        4.4789512428678205e-10,
        -3.1090872253400634e-11,
        2.1007977700408503e-12,
        -1.3842195935974555e-13,
        9.028572914325023e-15,
        -5.681728668064077e-16,
        0.0,
    ],
    [
        0.1936620962790687,
        -1.2015096841558175e-17,
        -0.01580940939015871,
        0.001234912061707679,
        -9.272402964059337e-05,
        6.717116739412168e-06,
        -4.7089363767693736e-07,
        3.20268067630802e-08,
        -2.117835056640085e-09,
        1.3641597543911722e-10,
        -8.573050752397346e-12,
        5.26375688592752e-13,
        -3.161845384403356e-14,
        1.881610394184556e-15,
        -1.0856198532697764e-16,
        0.0,
    ],
    [
        0.16633534842682188,
        -6.131909408737068e-19,
        -0.011799850580292594,
        0.0008085806801886348,
        -5.367923907668294e-05,
        3.460955380993485e-06,
        -2.171704780774156e-07,
        1.3286232618759542e-08,
        -7.937403081374412e-10,
        4.636890033819746e-11,
        -2.6519124570039385e-12,
        1.4865392513151417e-13,
        -8.251892685870237e-15,
        4.457650316847777e-16,
        0.0,
        0.0,
    ],
    [
        0.14558972127503855,
        -1.3715613196400238e-17,
        -0.009114064383180883,
        0.0005549222204578311,
        -3.292629484639286e-05,
        1.9071186800608639e-06,
        -1.0798786613288953e-07,
        5.985430999798539e-09,
        -3.2511432008858033e-10,
        1.7323694828221317e-11,
        -9.063500875357396e-13,
        4.659978523297898e-14,
        -2.3750854606697048e-15,
        1.182281530245802e-16,
        0.0,
        0.0,
    ],
];
/// H(s) = y erfcx(y), s = 1/y², on s in [0, 1/16], in powers of u = 32s − 1.
const ERFC_TAIL: [f64; 18] = [
    0.5557581685752836,
    1.0065687506859128e-17,
    -0.008073805168515994,
    0.0003335970130800048,
    -2.1861074882080398e-05,
    1.914712564892803e-06,
    -2.0641935789536665e-07,
    2.6102696071311923e-08,
    -3.751931342096041e-09,
    5.99653599732232e-10,
    -1.0485101894030065e-10,
    1.981164680140513e-11,
    -4.014268796925446e-12,
    8.630736479469458e-13,
    -1.870326024914366e-13,
    4.377909222985356e-14,
    -1.57311944037457e-14,
    4.249633574253249e-15,
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows `x, erf(x), erfc(x), gelu(x)`, each function's value as the f64 nearest it and the
    /// remainder in ulps of that f64, from mpmath at 40 digits (gelu with −x/√2 rounded to f64, as
    /// [`gelu`] computes it). Interval ends and the f64 below each, Gelu's arguments at interval
    /// ends, 36 seeded uniform points over [-6, 6], and the far tails (26.8: a subnormal erfc).
    const REFERENCE: &str = "
-30.0 -1.0 0.00 2.0 0.00 -1.4720141781446293e-196 0.13
-20.0 -1.0 0.00 2.0 0.00 -5.507248237212663e-88 -0.19
-8.5 -1.0 0.00 2.0 -0.00 -8.057604598872851e-17 -0.24
-5.66961 -0.9999999999999989 -0.32 1.999999999999999 0.16 -4.057256157173114e-08 -0.33
-5.656854249492381 -0.9999999999999988 0.21 1.9999999999999987 0.40 -4.36065904343595e-08 -0.47
-5.58588 -0.9999999999999972 0.20 1.9999999999999971 0.40 -6.494137297040888e-08 0.14
-5.18891 -0.9999999999997835 -0.46 1.9999999999997835 0.23 -5.488014174113725e-07 0.06
-4.83952 -0.9999999999923049 -0.43 1.999999999992305 -0.28 -3.1493925007314407e-06 0.29
-4.29807 -0.9999999987860394 -0.25 1.9999999987860395 -0.38 -3.70261014724068e-05 -0.11
-4.242640687119286 -0.9999999980268247 0.00 1.9999999980268246 0.50 -4.6861020682442525e-05 -0.34
-4.21331 -0.9999999974546773 0.34 1.9999999974546772 0.33 -5.301508745591702e-05 0.05
-4.0 -0.9999999845827421 -0.13 1.999999984582742 0.07 -0.0001266849673324799 0.45
-3.86534 -0.9999999540774759 -0.48 1.999999954077476 -0.26 -0.0002143998833490464 0.47
-3.68208 -0.9999998083375939 -0.35 1.999999808337594 -0.32 -0.0004259039619008141 0.30
-3.24504 -0.9999955500850882 0.23 1.9999955500850881 0.38 -0.0019053921911935062 0.35
-2.9761 -0.9999743316052812 0.25 1.9999743316052812 -0.12 -0.004344207952997848 0.05
-2.8284271247461903 -0.9999366575163338 -0.00 1.9999366575163338 0.00 -0.006615316251384096 -0.31
-2.26164 -0.9986182765730724 0.14 1.9986182765730724 -0.07 -0.02682265974644517 0.45
-2.25 -0.9985372834133188 -0.24 1.9985372834133188 0.12 -0.027505063473850584 -0.47
-2.1328 -0.9974406491390686 -0.36 1.9974406491390686 0.18 -0.03512842771225755 0.24
-2.04677 -0.9962032162645992 0.50 1.996203216264599 0.25 -0.04163199007177325 -0.23
-1.4142135623730951 -0.9544997361036416 -0.16 1.9544997361036416 0.08 -0.11122733598052341 -0.00
-1.0 -0.8427007929497149 0.22 1.8427007929497148 0.39 -0.15865525393145707 0.05
-0.9999999999999999 -0.8427007929497148 -0.36 1.8427007929497148 0.18 -0.1586552539314571 0.31
-0.7071067811865476 -0.682689492137086 0.29 1.6826894921370859 0.35 -0.16952889398908647 0.07
-0.5 -0.5204998778130465 -0.17 1.5204998778130465 0.09 -0.15426876936299347 0.46
-0.134477 -0.150831288165684 -0.22 1.150831288165684 0.40 -0.060045688171029434 -0.34
-3e-09 -3.3851375012865378e-09 0.20 1.0000000033851375 -0.01 -1.4999999964095196e-09 0.44
0.0 0.0 0.00 1.0 0.00 0.0 0.00
1e-10 1.1283791670955126e-10 0.25 0.999999999887162 0.40 5.000000000398942e-11 0.28
0.133794 0.1500743476075827 0.40 0.8499256523924172 0.40 0.07401715063003386 0.01
0.49999999999999994 0.5204998778130465 -0.27 0.47950012218695354 -0.46 0.3457312306370065 -0.21
0.5 0.5204998778130465 0.17 0.4795001221869535 -0.34 0.34573123063700656 -0.27
0.606355 0.6088399281113934 0.27 0.3911600718886065 0.45 0.4413418402769027 0.18
0.63453 0.6304736474604127 -0.19 0.3695263525395873 0.38 0.46773268687986447 0.35
0.7499999999999999 0.7111556336535151 -0.22 0.2888443663464849 0.44 0.5800294857173487 0.20
0.75 0.7111556336535151 0.42 0.28884436634648486 0.15 0.5800294857173488 0.29
0.9999999999999999 0.8427007929497148 0.36 0.1572992070502852 -0.45 0.8413447460685428 -0.17
1.0 0.8427007929497149 -0.22 0.15729920705028513 -0.11 0.8413447460685429 0.01
1.03387 0.8562897464447216 -0.20 0.14371025355527847 -0.19 0.8781707590445019 0.48
1.2664 0.9267002947531104 0.20 0.07329970524688953 0.39 1.1363597723985384 0.05
1.35881 0.9453498764468385 0.06 0.05465012355316145 0.07 1.2404530265354548 -0.18
1.46272 0.9614162176078761 -0.43 0.03858378239212395 -0.16 1.357737651938413 -0.09
1.49768 0.9658282662748182 -0.16 0.034171733725181806 -0.41 1.397173383139919 -0.44
1.4999999999999998 0.9661051464753106 0.46 0.0338948535246893 -0.31 1.3997891980967125 0.31
1.5 0.9661051464753108 -0.31 0.033894853524689274 -0.12 1.399789198096713 -0.49
1.9999999999999998 0.9953222650189527 0.16 0.0046777349810472706 -0.16 1.9544997361036414 -0.20
2.0 0.9953222650189527 0.20 0.004677734981047266 -0.45 1.9544997361036416 -0.07
2.4999999999999996 0.999593047982555 0.41 0.0004069520174449599 0.23 2.4844758366855593 -0.16
2.5 0.999593047982555 0.42 0.0004069520174449589 0.38 2.4844758366855597 -0.14
2.76954 0.9999102384817334 -0.39 8.976151826660542e-05 0.27 2.7617665228491197 -0.06
2.9999999999999996 0.9999779095030014 0.48 2.2090496998585502e-05 0.30 2.9959503059051094 -0.22
3.0 0.9999779095030014 0.48 2.209049699858544e-05 0.05 2.99595030590511 -0.20
3.38478 0.9999983053994878 0.28 1.6946005122162081e-06 -0.04 3.3835744205033014 0.07
3.4999999999999996 0.9999992569016276 0.45 7.430983723414151e-07 0.35 3.499185798223375 0.11
3.5 0.9999992569016276 0.45 7.430983723414128e-07 -0.29 3.4991857982233756 0.12
3.93199 0.9999999731264592 -0.20 2.6873540859043483e-08 0.12 3.931824373628675 0.22
3.9999999999999996 0.9999999845827421 0.13 1.5417257900280076e-08 -0.30 3.999873315032667 -0.00
4.0 0.9999999845827421 0.13 1.541725790028002e-08 -0.35 3.9998733150326675 0.00
4.09861 0.9999999932210033 0.23 6.778996671344121e-09 0.42 4.098524822954223 0.37
4.10897 0.9999999937884804 -0.25 6.211519659450616e-09 -0.08 4.108888349076417 0.17
4.3242 0.9999999990365007 -0.23 9.634993056351322e-10 0.06 4.32416690119618 -0.36
4.3668 0.9999999993408223 0.30 6.591776796218676e-10 0.32 4.366772471676192 -0.09
4.63938 0.9999999999465784 0.38 5.3421558173139025e-11 0.11 4.639371893704644 0.04
4.66608 0.9999999999585595 0.11 4.144050581294521e-11 0.23 4.666072837562215 -0.34
5.05487 0.9999999999991237 0.40 8.762542764876448e-13 0.41 5.054868911474105 -0.45
5.14563 0.9999999999996587 0.06 3.412753554403489e-13 0.34 5.14562931402453 -0.12
5.49318 0.999999999999992 0.48 7.940241686923155e-15 0.09 5.493179891575593 -0.40
5.60641 0.9999999999999978 0.05 2.2152123145174013e-15 -0.05 5.60640994209523 -0.46
5.92158 0.9999999999999999 0.50 5.55159478108799e-17 -0.45 5.921579990559132 0.17
5.999999999999999 1.0 -0.10 2.1519736712499147e-17 -0.46 5.999999994080473 0.37
6.0 1.0 -0.10 2.1519736712498913e-17 0.10 5.999999994080474 0.37
7.5 1.0 -0.00 2.776649386030569e-26 0.42 7.499999999999761 -0.45
10.0 1.0 0.00 2.088487583762545e-45 -0.39 10.0 -0.00
15.25 1.0 0.00 3.6865151492308134e-103 0.08 15.25 0.00
26.5 1.0 0.00 2.2109076642637343e-307 0.06 26.5 0.00
26.8 1.0 0.00 2.484962157e-314 0.11 26.8 0.00
27.25 1.0 0.00 0.0 0.14 27.25 0.00";

    /// The spacing of f64 values at `v` (its exponent's ulp; 2⁻¹⁰⁷⁴ for 0 and subnormals).
    fn ulp(v: f64) -> f64 {
        // 2^(e - 1075) for the biased exponent e: a normal number from e = 53, subnormal below.
        let e = (v.to_bits() >> 52) & 0x7ff;
        if e > 52 {
            f64::from_bits((e - 52) << 52)
        } else {
            f64::from_bits(1 << (e.max(1) - 1))
        }
    }

    #[test]
    fn erf_erfc_gelu_within_ulps_of_mpmath() {
        let bounds = [("erf", 1.0), ("erfc", 1.5), ("gelu", 2.0)];
        let mut worst = [0.0f64; 3];
        for row in REFERENCE.lines().filter(|l| !l.is_empty()) {
            let v: Vec<f64> = row.split(' ').map(|s| s.parse().unwrap()).collect();
            let x = v[0];
            for (k, got) in [erf(x), erfc(x), gelu(x)].into_iter().enumerate() {
                let (near, rem) = (v[1 + 2 * k], v[2 + 2 * k]);
                let off = ((got - near) / ulp(near) - rem).abs();
                let (name, bound) = bounds[k];
                assert!(
                    off <= bound,
                    "{name}({x}) = {got:e}, {off:.2} ulps from {near:e}"
                );
                worst[k] = worst[k].max(off);
            }
        }
        eprintln!("largest errors in ulps (erf, erfc, gelu): {worst:.2?}");
    }

    /// `erf_f32` against the f64 [`erf`] rounded to f32, on a dense sweep of [-5, 5], the interval
    /// ends and special values: at most one f32 ulp apart (the f64 erf is itself within an f64 ulp
    /// of exact), equal almost everywhere, NaN for NaN.
    fn erf_f32_disagreements(f: fn(&[f32], &mut [std::mem::MaybeUninit<f32>])) -> (usize, u32) {
        let mut xs: Vec<f32> = (0..=400_000).map(|i| -5.0 + i as f32 * 2.5e-5).collect();
        xs.extend([
            0.0,
            -0.0,
            1e-40,
            -1e-30,
            1.0,
            -1.0,
            4.0,
            3.9,
            1e30,
            f32::INFINITY,
        ]);
        xs.extend([
            f32::NEG_INFINITY,
            f32::MIN_POSITIVE,
            1.0 - f32::EPSILON / 2.0,
        ]);
        let mut out = vec![std::mem::MaybeUninit::uninit(); xs.len()];
        f(&xs, &mut out);
        let (mut differ, mut worst) = (0, 0);
        for (&x, o) in xs.iter().zip(&out) {
            // SAFETY: `f` writes every element.
            let got = unsafe { o.assume_init() };
            let want = erf(x as f64) as f32;
            let ulps = (got.to_bits() as i64 - want.to_bits() as i64).unsigned_abs() as u32;
            if got.to_bits() != want.to_bits() {
                differ += 1;
                worst = worst.max(ulps);
            }
            assert_eq!(got.is_sign_negative(), want.is_sign_negative(), "erf({x})");
        }
        let mut nan = [std::mem::MaybeUninit::uninit()];
        f(&[f32::NAN], &mut nan);
        // SAFETY: written above.
        assert!(unsafe { nan[0].assume_init() }.is_nan());
        (differ, worst)
    }

    #[test]
    fn erf_f32_is_the_f64_erf_rounded() {
        let (differ, worst) = erf_f32_disagreements(erf_f32);
        assert!(
            worst <= 1 && differ < 40,
            "{differ} differ, by up to {worst} ulps"
        );
    }

    /// The comparison above catches a mid-range polynomial one term short (the kind of slip a
    /// refit would make).
    #[test]
    fn erf_f32_check_catches_a_truncated_polynomial() {
        fn short(x: &[f32], out: &mut [std::mem::MaybeUninit<f32>]) {
            for (o, &v) in out.iter_mut().zip(x) {
                let mut w = erf_f32_one(v);
                let a = (v as f64).abs();
                if (1.0..4.0).contains(&a) {
                    let u = (2.0 * a - 5.0) * (1.0 / 3.0);
                    let last = ERF_MID_F32[ERF_MID_F32.len() - 1] * u.powi(18);
                    w = ((w as f64).abs() - last).copysign(v as f64) as f32;
                }
                o.write(w);
            }
        }
        let (differ, worst) = erf_f32_disagreements(short);
        assert!(
            worst > 1 || differ >= 40,
            "{differ} differ, by up to {worst} ulps"
        );
    }

    /// `gelu_f32` against the f64 [`gelu`] rounded to f32, on a dense sweep of [-16, 8] (every
    /// form: both tails, the subnormal results from x ≈ −13 and the zeros past −14.9) and special
    /// values: how many differ, and by how many ulps at most. Signs, zeros and NaN must agree.
    fn gelu_f32_disagreements(f: fn(&[f32], &mut [std::mem::MaybeUninit<f32>])) -> (usize, u32) {
        let mut xs: Vec<f32> = (0..=960_000).map(|i| -16.0 + i as f32 * 2.5e-5).collect();
        let s2 = std::f32::consts::SQRT_2;
        xs.extend([
            0.0,
            -0.0,
            1e-40,
            -1e-30,
            s2,
            -s2,
            4.0 * s2,
            -4.0 * s2,
            -14.85,
        ]);
        xs.extend([
            -1e4,
            -1e4 - 1.0,
            -3e4,
            1e30,
            -1e30,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ]);
        xs.extend([f32::NAN, f32::MIN_POSITIVE, -f32::MIN_POSITIVE]);
        let mut out = vec![std::mem::MaybeUninit::uninit(); xs.len()];
        f(&xs, &mut out);
        let (mut differ, mut worst) = (0, 0);
        for (&x, o) in xs.iter().zip(&out) {
            // SAFETY: `f` writes every element.
            let got = unsafe { o.assume_init() };
            let want = gelu(x as f64) as f32;
            if want.is_nan() {
                assert!(got.is_nan(), "gelu({x}) = {got}, not NaN");
                continue;
            }
            assert_eq!(got.is_sign_negative(), want.is_sign_negative(), "gelu({x})");
            if got.to_bits() != want.to_bits() {
                differ += 1;
                let ulps = (got.to_bits() as i64 - want.to_bits() as i64).unsigned_abs() as u32;
                worst = worst.max(ulps);
            }
        }
        (differ, worst)
    }

    #[test]
    fn gelu_f32_is_the_f64_gelu_rounded() {
        let (differ, worst) = gelu_f32_disagreements(gelu_f32);
        assert!(
            worst <= 1 && differ < 40,
            "{differ} differ, by up to {worst} ulps"
        );
    }

    /// The comparison catches the erfcx polynomial one term short, and e^y one Taylor term short.
    #[test]
    fn gelu_f32_check_catches_a_truncated_tail() {
        fn short(x: &[f32], out: &mut [std::mem::MaybeUninit<f32>]) {
            for (o, &v) in out.iter_mut().zip(x) {
                let mut w = gelu_f32_one(v);
                let z = -(v as f64) * std::f64::consts::FRAC_1_SQRT_2;
                if (-1.0..=10.5).contains(&z) {
                    let u = (2.0 * ((z - 3.0) / (z + 3.0)) - ERFCX_F32_T_SUM)
                        * (1.0 / ERFCX_F32_T_SPAN);
                    let p = polynomial(&ERFCX_F32[..ERFCX_F32.len() - 1], u);
                    w = (0.5 * v as f64 * exp_f64(-(z * z)) * p) as f32;
                }
                o.write(w);
            }
        }
        let (differ, worst) = gelu_f32_disagreements(short);
        assert!(
            worst > 1 || differ >= 40,
            "{differ} differ, by up to {worst} ulps"
        );
        // e^y without its r¹¹ term, against the full series (both in f64).
        let short_exp = |y: f64| {
            let n = (y * std::f64::consts::LOG2_E).round();
            let r = y - n * std::f64::consts::LN_2;
            let t: f64 = (0..11)
                .map(|k| r.powi(k) / (1..=k).product::<i32>().max(1) as f64)
                .sum();
            t * 2f64.powi(n as i32)
        };
        let worst_exp = (0..10_000)
            .map(|i| -110.25 * i as f64 / 10_000.0 - 1.0)
            .map(|y| ((exp_f64(y) - y.exp()) / y.exp()).abs())
            .fold(0.0f64, f64::max);
        let worst_short = (0..10_000)
            .map(|i| -110.25 * i as f64 / 10_000.0 - 1.0)
            .map(|y| ((short_exp(y) - y.exp()) / y.exp()).abs())
            .fold(0.0f64, f64::max);
        assert!(worst_exp < 2e-14, "exp_f64 off by {worst_exp:e}");
        assert!(
            worst_short > 2e-14,
            "the short series passed: {worst_short:e}"
        );
    }

    #[test]
    fn special_values() {
        assert_eq!(erf(0.0), 0.0);
        assert!(erf(-0.0).is_sign_negative());
        assert!(erf(f64::NAN).is_nan() && erfc(f64::NAN).is_nan() && gelu(f64::NAN).is_nan());
        assert_eq!((erf(f64::INFINITY), erf(f64::NEG_INFINITY)), (1.0, -1.0));
        assert_eq!((erfc(f64::INFINITY), erfc(f64::NEG_INFINITY)), (0.0, 2.0));
        assert_eq!((erfc(27.5), erfc(-27.5)), (0.0, 2.0));
        assert_eq!(gelu(f64::INFINITY), f64::INFINITY);
    }
}
