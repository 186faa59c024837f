//! Activations applied in a GEMM's store pass (a fused epilogue), with the exact formulas of the
//! runtime's standalone kernels: those kernels call [`Activation::map`] and [`exp_slice`], so a fused
//! node and the unfused pair give the same bits.
//!
//! [`exp_f32`] uses fused multiply-adds (`mul_add`, one rounding on every target). Called outside
//! the vector wrappers here, on x86-64 each one is a call into libm's `fmaf`: correct, and slow.
//! Loops over tensors go through [`Activation::apply`], [`Activation::map`], [`exp_slice`] or
//! another [`crate::simd_dispatch`].

use std::mem::MaybeUninit;

/// An activation a convolution or GEMM applies to each output after adding its bias.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Activation {
    /// The identity.
    None,
    /// `x < 0 ? 0 : x` (NaN and -0 pass through, as ONNX Relu).
    Relu,
    /// Clip (opset 11 and later): `lo` applied first, then `hi`; an absent bound is an infinity.
    Clip { lo: f32, hi: f32 },
    /// `x < 0 ? alpha·x : x`.
    LeakyRelu { alpha: f32 },
    /// `1 / (1 + e^-x)` with [`exp_f32`].
    Sigmoid,
    /// `x · clamp(x/6 + 1/2, 0, 1)`.
    HardSwish,
    /// `x · sigmoid(x)` (SiLU, also called Swish): the Sigmoid → Mul pair that EfficientNet-style
    /// models export, with [`Activation::Sigmoid`]'s formula, so it equals that pair bit for bit.
    Silu,
    /// QuantizeLinear then DequantizeLinear with one scale and zero point each (a QDQ model's
    /// activations): [`FakeQuant::apply`].
    FakeQuant(FakeQuant),
}

/// A QuantizeLinear → DequantizeLinear pair of one f32 scale and integer zero point each, the
/// quantized type's range `[lo, hi]` (integers of at most 16 bits, so every value below is exact
/// in f32). [`FakeQuant::apply`] is the two kernels' arithmetic ([`crate::quant::quantize_level`], then one
/// product), so the pair and a fused node give the same bits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FakeQuant {
    pub scale: f32,
    pub zero: f32,
    pub lo: f32,
    pub hi: f32,
    pub dq_scale: f32,
    pub dq_zero: f32,
}

impl FakeQuant {
    /// `(quantize_level(x) − dq_zero) · dq_scale`: the level minus a zero point is an integer of at
    /// most 17 bits (exact), and its product with the scale is rounded once, as DequantizeLinear's.
    #[inline(always)]
    pub fn apply(self, x: f32) -> f32 {
        (crate::quant::quantize_level(x, self.scale, self.zero, self.lo, self.hi) - self.dq_zero)
            * self.dq_scale
    }
}

/// `$body` with `$f` bound to `$act`'s function of one value: the one `match` on the activation,
/// outside the loops that `$body` runs, so that each arm's loop vectorises.
macro_rules! with_fn {
    ($act:expr, |$f:ident| $body:expr) => {
        match $act {
            Activation::None => {
                let $f = |x: f32| x;
                $body
            }
            Activation::Relu => {
                let $f = relu;
                $body
            }
            Activation::Clip { lo, hi } => {
                let $f = |x: f32| clip(x, lo, hi);
                $body
            }
            Activation::LeakyRelu { alpha } => {
                let $f = |x: f32| leaky_relu(x, alpha);
                $body
            }
            Activation::Sigmoid => {
                let $f = sigmoid;
                $body
            }
            Activation::HardSwish => {
                let $f = hard_swish;
                $body
            }
            Activation::Silu => {
                let $f = |x: f32| x * sigmoid(x);
                $body
            }
            Activation::FakeQuant(q) => {
                let $f = move |x: f32| q.apply(x);
                $body
            }
        }
    };
}

impl Activation {
    /// The activation of one value.
    #[inline(always)]
    pub fn scalar(self, x: f32) -> f32 {
        with_fn!(self, |f| f(x))
    }

    /// `v[i] = act(v[i] + bias)` (no addition when `bias` is `None`); one `match` per call, so the
    /// loops vectorize, with the widest vectors this CPU has (the same operations either way: the
    /// same bits).
    pub fn apply(self, v: &mut [f32], bias: Option<f32>) {
        let act = self;
        crate::simd_dispatch!(|act: Activation, v: &mut [f32], bias: Option<f32>| {
            act.apply_body(v, bias)
        })
    }

    /// `dst[j] = act(src[j])` for `j < dst.len()` (`src` at least as long): the standalone
    /// activation kernels' slice form, with [`Activation::apply`]'s arithmetic.
    pub fn map(self, src: &[f32], dst: &mut [MaybeUninit<f32>]) {
        let src = &src[..dst.len()];
        let act = self;
        crate::simd_dispatch!(
            |act: Activation, src: &[f32], dst: &mut [MaybeUninit<f32>]| { act.map_body(src, dst) }
        )
    }

    /// `v[j] = act((v[j] + bias) + add[j])` for `j < v.len()`: a residual `add` (at least as long
    /// as `v`) summed after the bias and before the activation, each sum rounded, as an Add node
    /// between the two would.
    pub fn apply_add(self, v: &mut [f32], bias: Option<f32>, add: &[f32]) {
        let add = &add[..v.len()];
        let act = self;
        crate::simd_dispatch!(
            |act: Activation, v: &mut [f32], bias: Option<f32>, add: &[f32]| {
                act.apply_add_body(v, bias, add)
            }
        )
    }

    /// `dst[j] = act(src[j]·a + t)` for `j < dst.len()` (`src` at least as long): a per-channel
    /// affine map and its activation in one pass, each value written once (never zeroed first),
    /// the product and the sum each rounded (no fused multiply-add: an unfused BatchNormalization
    /// rounds both).
    pub fn apply_affine(self, dst: &mut [MaybeUninit<f32>], src: &[f32], a: f32, t: f32) {
        let src = &src[..dst.len()];
        let act = self;
        crate::simd_dispatch!(|act: Activation,
                               dst: &mut [MaybeUninit<f32>],
                               src: &[f32],
                               a: f32,
                               t: f32| {
            act.apply_affine_body(dst, src, a, t)
        })
    }

    #[inline(always)]
    fn map_body(self, src: &[f32], dst: &mut [MaybeUninit<f32>]) {
        with_fn!(self, |f| dst.iter_mut().zip(src).for_each(|(d, &x)| {
            d.write(f(x));
        }))
    }

    #[inline(always)]
    fn apply_affine_body(self, dst: &mut [MaybeUninit<f32>], src: &[f32], a: f32, t: f32) {
        with_fn!(self, |f| dst.iter_mut().zip(src).for_each(|(d, &x)| {
            d.write(f(x * a + t));
        }))
    }

    #[inline(always)]
    fn apply_add_body(self, v: &mut [f32], bias: Option<f32>, add: &[f32]) {
        match bias {
            Some(b) => v.iter_mut().zip(add).for_each(|(x, &r)| *x = (*x + b) + r),
            None => v.iter_mut().zip(add).for_each(|(x, &r)| *x += r),
        }
        self.apply_body(v, None);
    }

    #[inline(always)]
    fn apply_body(self, v: &mut [f32], bias: Option<f32>) {
        with_fn!(self, |f| match bias {
            Some(b) => v.iter_mut().for_each(|x| *x = f(*x + b)),
            None => v.iter_mut().for_each(|x| *x = f(*x)),
        })
    }
}

/// Relu, Clip, LeakyRelu, Sigmoid and SiLU on 16 lanes in registers, for kernels that hold their
/// outputs there (a depthwise plane's rows, a pixel-vector tile). Each select is the scalar form's
/// comparison and each arithmetic step the scalar form's operation ([`exp_f32`]'s fused
/// multiply-adds, the one division of `sigmoid`), so the bits are [`Activation::scalar`]'s.
#[cfg(target_arch = "x86_64")]
pub(crate) mod lanes {
    use super::Activation;
    use std::arch::x86_64::*;

    /// The activation and its constants, broadcast.
    #[derive(Clone, Copy)]
    pub(crate) struct Lanes {
        act: Activation,
        a: __m512,
        b: __m512,
    }

    impl Lanes {
        /// `None` for an activation these lanes do not compute.
        ///
        /// # Safety
        /// AVX-512F is available.
        #[inline(always)]
        pub(crate) unsafe fn new(act: Activation) -> Option<Lanes> {
            let (a, b) = match act {
                Activation::None | Activation::Relu => (0.0, 0.0),
                Activation::Clip { lo, hi } => (lo, hi),
                Activation::LeakyRelu { alpha } => (alpha, 0.0),
                Activation::Sigmoid | Activation::Silu => (0.0, 0.0),
                Activation::HardSwish | Activation::FakeQuant(_) => return None,
            };
            // SAFETY: AVX-512F is available (the caller's promise).
            unsafe {
                Some(Lanes {
                    act,
                    a: _mm512_set1_ps(a),
                    b: _mm512_set1_ps(b),
                })
            }
        }

        /// The activation of each lane.
        ///
        /// # Safety
        /// AVX-512F is available.
        #[inline(always)]
        pub(crate) unsafe fn apply(&self, x: __m512) -> __m512 {
            // SAFETY: AVX-512F is available. Ordered comparisons: a NaN compares false and
            // passes through, as in the scalar forms.
            unsafe {
                let zero = _mm512_setzero_ps();
                match self.act {
                    Activation::Relu => {
                        _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, zero), zero)
                    }
                    Activation::Clip { .. } => {
                        let x = _mm512_mask_mov_ps(
                            x,
                            _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, self.a),
                            self.a,
                        );
                        _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, self.b), self.b)
                    }
                    Activation::LeakyRelu { .. } => {
                        _mm512_mask_mul_ps(x, _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, zero), x, self.a)
                    }
                    Activation::Sigmoid => sigmoid(x),
                    Activation::Silu => _mm512_mul_ps(x, sigmoid(x)),
                    Activation::None | Activation::HardSwish | Activation::FakeQuant(_) => x,
                }
            }
        }
    }

    /// `sigmoid` of each lane: `e = exp(−|x|)`, `r = 1 / (1 + e)`, `e·r` where `x < 0`, else `r`.
    ///
    /// # Safety
    /// AVX-512F is available.
    #[inline(always)]
    unsafe fn sigmoid(x: __m512) -> __m512 {
        // SAFETY: AVX-512F is available (the caller's promise).
        unsafe {
            // −|x|: the sign bit set (AVX-512F has no float `or`; the integer one on the bits).
            let sign = _mm512_set1_epi32(i32::MIN);
            let neg_abs = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(x), sign));
            let e = exp(neg_abs);
            let one = _mm512_set1_ps(1.0);
            let r = _mm512_div_ps(one, _mm512_add_ps(one, e));
            let below = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_setzero_ps());
            _mm512_mask_mul_ps(r, below, e, r)
        }
    }

    /// [`super::exp_f32`] of each lane, its operations in its order.
    ///
    /// # Safety
    /// AVX-512F is available.
    #[inline(always)]
    unsafe fn exp(x: __m512) -> __m512 {
        // SAFETY: AVX-512F is available (the caller's promise).
        unsafe {
            // `clamp`: `lo > x ? lo : x`, then `hi < x ? hi : x` (vmaxps/vminps return their
            // second operand when either is NaN, so a NaN stays).
            let x = _mm512_max_ps(_mm512_set1_ps(-104.0), x);
            let x = _mm512_min_ps(_mm512_set1_ps(89.0), x);
            let round = _mm512_set1_ps(12_582_912.0);
            let t = _mm512_fmadd_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E), round);
            let n = _mm512_sub_ps(t, round);
            let r = _mm512_fmadd_ps(n, _mm512_set1_ps(-(355.0 / 512.0)), x);
            let r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.121_944_4e-4), r);
            let mut p = _mm512_set1_ps(1.0 / 5040.0);
            for c in super::EXP_TAYLOR {
                p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
            }
            let k = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(0x4B40_0000));
            let half = _mm512_srai_epi32::<1>(k);
            let scale = |e: __m512i| {
                _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(
                    e,
                    _mm512_set1_epi32(127),
                )))
            };
            _mm512_mul_ps(
                _mm512_mul_ps(p, scale(half)),
                scale(_mm512_sub_epi32(k, half)),
            )
        }
    }
}

#[inline(always)]
fn relu(x: f32) -> f32 {
    if x < 0.0 { 0.0 } else { x }
}

#[inline(always)]
fn clip(x: f32, lo: f32, hi: f32) -> f32 {
    let x = if x < lo { lo } else { x };
    if x > hi { hi } else { x }
}

#[inline(always)]
fn leaky_relu(x: f32, alpha: f32) -> f32 {
    if x < 0.0 { x * alpha } else { x }
}

#[inline(always)]
fn sigmoid(x: f32) -> f32 {
    // e^-|x| never overflows; below 0, e^x/(1+e^x) keeps the subnormal tail (x < -88) that
    // 1/(1+e^-x) loses to an infinite denominator. Branch-free (a select) so loops vectorize.
    let e = exp_f32(-x.abs());
    let r = 1.0 / (1.0 + e);
    if x < 0.0 { e * r } else { r }
}

#[inline(always)]
fn hard_swish(x: f32) -> f32 {
    x * (x / 6.0 + 0.5).clamp(0.0, 1.0)
}

/// [`exp_f32`]'s polynomial after its leading `1/5040`, highest degree first (shared with the
/// register form in `lanes`).
const EXP_TAYLOR: [f32; 7] = [
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    0.5,
    1.0,
    1.0,
];

/// `e^x` in f32, branch-free so that loops over slices vectorize: Cody-Waite reduction by ln 2 (the
/// split constants of Cephes' expf), a degree-7 Taylor polynomial on |r| <= ln(2)/2 in Horner form
/// with fused multiply-adds, and scaling by 2^n in two halves so that subnormal results come out
/// right. Every coefficient is a product (no division: a vector divide costs as much as the rest of
/// the polynomial), and the result is within 2 ulps of e^x over the normal range (tested).
///
/// Fused, the polynomial is 7 operations instead of 14: a SiLU over a slice took 0.61 ns a value
/// with separate multiplies and adds and 0.43 ns fused on this project's AVX-512 machine (one core,
/// `act_rate`).
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    let x = x.clamp(-104.0, 89.0);
    // Rounded to an integer by adding 1.5·2^23, where the float's unit is 1: `t`'s bits are then
    // those of 1.5·2^23 plus n (|n| <= 150), so n comes out of them as an integer. `n as i32`
    // would give the same value, but its saturating conversion does not vectorise.
    let t = x.mul_add(std::f32::consts::LOG2_E, 12_582_912.0);
    let n = t - 12_582_912.0;
    // n·(355/512) is exact (a 9-bit constant times |n| <= 150), so r is x − n·ln 2 to within the
    // second constant's rounding.
    let r = n.mul_add(-(355.0 / 512.0), x);
    let r = n.mul_add(2.121_944_4e-4, r);
    let mut p: f32 = 1.0 / 5040.0;
    for c in EXP_TAYLOR {
        p = p.mul_add(r, c);
    }
    let k = (t.to_bits() as i32).wrapping_sub(0x4B40_0000);
    let half = k >> 1;
    let scale = |e: i32| f32::from_bits(((e + 127) as u32) << 23);
    p * scale(half) * scale(k - half)
}

/// `dst[j] = e^src[j]` by [`exp_f32`] for `j < dst.len()` (`src` at least as long), on the widest
/// vectors this CPU has: the standalone Exp kernel's loop.
pub fn exp_slice(src: &[f32], dst: &mut [MaybeUninit<f32>]) {
    let src = &src[..dst.len()];
    crate::simd_dispatch!(|src: &[f32], dst: &mut [MaybeUninit<f32>]| {
        dst.iter_mut().zip(src).for_each(|(d, &x)| {
            d.write(exp_f32(x));
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_and_scalar_forms_agree_bit_for_bit() {
        let xs = [
            -7.5f32,
            -0.0,
            0.0,
            1e-3,
            2.5,
            -3.0,
            3.0,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            88.0,
            -90.0,
        ];
        let acts = [
            Activation::None,
            Activation::Relu,
            Activation::Clip { lo: -1.0, hi: 2.0 },
            Activation::Clip {
                lo: f32::NEG_INFINITY,
                hi: 6.0,
            },
            Activation::LeakyRelu { alpha: 0.1 },
            Activation::Sigmoid,
            Activation::HardSwish,
            Activation::Silu,
            Activation::FakeQuant(FakeQuant {
                scale: 0.05,
                zero: 128.0,
                lo: 0.0,
                hi: 255.0,
                dq_scale: 0.05,
                dq_zero: 128.0,
            }),
        ];
        for act in acts {
            for bias in [None, Some(0.25f32)] {
                // Whole vectors and a tail.
                let xs: Vec<f32> = xs.iter().cycle().take(xs.len() * 4 - 3).copied().collect();
                let mut v = xs.to_vec();
                act.apply(&mut v, bias);
                for (x, y) in xs.iter().zip(&v) {
                    let want = act.scalar(bias.map_or(*x, |b| *x + b));
                    // A NaN's sign and payload are not specified for arithmetic results (IEEE 754,
                    // Rust): vector code may take them from the other operand. Any NaN is equal.
                    let same = y.to_bits() == want.to_bits() || (y.is_nan() && want.is_nan());
                    assert!(same, "{act:?} {bias:?} at {x}: {y} vs {want}");
                }
            }
        }
    }

    /// With a residual, each value is the bias sum, then the residual sum, then the activation,
    /// each rounded: the Conv → Add → activation chain's arithmetic.
    #[test]
    fn the_residual_is_added_after_the_bias_and_before_the_activation() {
        let xs = [-7.5f32, 1e-3, 2.5, -3.0, 1e8, f32::NAN, -0.0];
        let rs = [0.5f32, -1e-3, -2.75, 3.0, 1.0, 1.0, 0.0];
        let (xs, rs): (Vec<f32>, Vec<f32>) = xs.iter().zip(&rs).cycle().take(40).unzip();
        let acts = [
            Activation::None,
            Activation::Relu,
            Activation::Clip { lo: -0.5, hi: 2.0 },
            Activation::LeakyRelu { alpha: 0.1 },
            Activation::Sigmoid,
        ];
        for act in acts {
            for bias in [None, Some(0.25f32)] {
                let mut v = xs.to_vec();
                act.apply_add(&mut v, bias, &rs);
                for ((x, r), y) in xs.iter().zip(&rs).zip(&v) {
                    let want = act.scalar(bias.map_or(*x, |b| *x + b) + r);
                    let same = y.to_bits() == want.to_bits() || (y.is_nan() && want.is_nan());
                    assert!(same, "{act:?} {bias:?} at {x} + {r}: {y} vs {want}");
                }
            }
        }
        // The order matters: (x + b) + r rounds differently from x + (b + r) here.
        let mut v = vec![1e8f32];
        Activation::None.apply_add(&mut v, Some(3.0), &[3.0]);
        assert_eq!(v[0], (1e8f32 + 3.0) + 3.0);
        assert_ne!(v[0], 1e8f32 + (3.0 + 3.0));
    }

    /// The affine pass rounds the product, then the sum, then applies the activation: the scalar
    /// formula on every lane of a slice long enough for the vector loops and their tails. A fused
    /// multiply-add would keep the product's last bit: `x·a − t` is then 2⁻²⁴ instead of 0.
    #[test]
    fn the_affine_pass_rounds_the_product_then_the_sum() {
        let x = 1.0 + f32::EPSILON * 2048.0;
        let (a, t) = (x, -(1.0 + f32::EPSILON * 4096.0));
        assert_eq!(
            x.mul_add(a, t),
            f32::EPSILON / 2.0,
            "the case needs a fused difference"
        );
        let xs: Vec<f32> = (0..37)
            .map(|i| {
                if i % 5 == 0 {
                    x
                } else {
                    (i as f32 - 18.0) * 0.37
                }
            })
            .collect();
        for act in [Activation::None, Activation::Relu, Activation::Silu] {
            let mut y = vec![MaybeUninit::new(f32::NAN); xs.len()];
            act.apply_affine(&mut y, &xs, a, t);
            // SAFETY: apply_affine wrote every element (they started as NaN, which the check sees).
            let y: Vec<f32> = y.iter().map(|v| unsafe { v.assume_init() }).collect();
            for (x, y) in xs.iter().zip(&y) {
                let want = act.scalar(*x * a + t);
                assert_eq!(y.to_bits(), want.to_bits(), "{act:?} at {x}");
            }
        }
    }

    /// The largest distance in ulps from `f` to `e^x` (in f64) over a dense grid of the range whose
    /// results are normal f32.
    fn worst_exp_ulps(f: impl Fn(f32) -> f32) -> u32 {
        let mut worst = 0;
        for i in 0..=400_000 {
            let x = -87.0f32 + i as f32 * (175.0 / 400_000.0);
            let want = (x as f64).exp() as f32;
            let got = f(x);
            worst = worst.max((got.to_bits() as i64 - want.to_bits() as i64).unsigned_abs() as u32);
        }
        worst
    }

    /// exp_f32 is within 2 ulps over the normal range; a result off by 3e-7 relative (about 3
    /// ulps) is caught.
    #[test]
    fn exp_is_within_two_ulps() {
        assert!(worst_exp_ulps(exp_f32) <= 2);
        assert!(worst_exp_ulps(|x| exp_f32(x) * (1.0 + 3e-7)) > 2);
    }

    #[test]
    fn activations_follow_onnx() {
        assert_eq!(Activation::Relu.scalar(-0.0).to_bits(), (-0.0f32).to_bits());
        assert!(Activation::Relu.scalar(f32::NAN).is_nan());
        assert_eq!(Activation::Clip { lo: 0.0, hi: 6.0 }.scalar(7.0), 6.0);
        assert_eq!(Activation::LeakyRelu { alpha: 0.5 }.scalar(-2.0), -1.0);
        assert_eq!(Activation::HardSwish.scalar(-4.0), -0.0);
        assert_eq!(Activation::HardSwish.scalar(4.0), 4.0);
        let s = Activation::Sigmoid.scalar(1.0);
        assert!((s as f64 - 1.0 / (1.0 + (-1.0f64).exp())).abs() < 1e-7);
        assert!((exp_f32(-100.0) as f64 - (-100.0f64).exp()).abs() < 1e-45);
        // The subnormal tail: sigmoid(-95) = e^-95 / (1 + e^-95) ≈ 5.5e-42, not 0.
        let tail = Activation::Sigmoid.scalar(-95.0) as f64;
        let want = (-95.0f64).exp();
        assert!(
            (tail - want).abs() <= 2.0 * f32::from_bits(1) as f64,
            "{tail} vs {want}"
        );
        assert_eq!(Activation::Sigmoid.scalar(-200.0), 0.0);
        assert!(Activation::Sigmoid.scalar(f32::NAN).is_nan());
    }

    /// The register forms (`lanes`) against [`Activation::scalar`], bit for bit, over signed zeros,
    /// infinities, NaN, subnormals, both ends of `exp`'s clamp and 4096 seeded values in ±120. The
    /// same comparison must catch the textbook sigmoid `1 / (1 + e^-x)`, which rounds differently
    /// below zero and loses the subnormal tail.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn lanes_equal_the_scalar_forms_bit_for_bit() {
        use std::arch::x86_64::*;
        if !crate::Isa::Avx512.is_supported() {
            return;
        }
        let mut xs = vec![
            -0.0f32,
            0.0,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            1e-40,
            -1e-40,
            88.0,
            89.0,
            89.5,
            -87.0,
            -95.0,
            -103.9,
            -104.0,
            -110.0,
            0.5,
            -0.5,
            20.0,
            -20.0,
        ];
        xs.extend(crate::testing::rand(77, 4096).iter().map(|v| v * 120.0));
        while xs.len() % 16 != 0 {
            xs.push(1.0);
        }
        /// # Safety
        /// The CPU has AVX-512F. (`xs` need not be a multiple of 16 long: a short tail is
        /// left at zero.)
        #[target_feature(enable = "avx512f")]
        unsafe fn apply(act: Activation, xs: &[f32]) -> Option<Vec<f32>> {
            // SAFETY: AVX-512F is available (checked by the caller); each chunk is 16 values.
            unsafe {
                let l = lanes::Lanes::new(act)?;
                let mut out = vec![0f32; xs.len()];
                for (o, x) in out.chunks_exact_mut(16).zip(xs.chunks_exact(16)) {
                    _mm512_storeu_ps(o.as_mut_ptr(), l.apply(_mm512_loadu_ps(x.as_ptr())));
                }
                Some(out)
            }
        }
        let differs = |got: &[f32], want: &dyn Fn(f32) -> f32| {
            xs.iter()
                .zip(got)
                .find(|&(&x, &g)| {
                    let w = want(x);
                    !(g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()))
                })
                .map(|(&x, &g)| (x, g, want(x)))
        };
        let acts = [
            Activation::Relu,
            Activation::Clip { lo: -1.0, hi: 2.0 },
            Activation::LeakyRelu { alpha: 0.1 },
            Activation::Sigmoid,
            Activation::Silu,
        ];
        for act in acts {
            // SAFETY: AVX-512F was detected above.
            let got = unsafe { apply(act, &xs) }.expect("computed in registers");
            if let Some((x, g, w)) = differs(&got, &|x| act.scalar(x)) {
                panic!("{act:?}({x}) = {g} in registers, {w} scalar");
            }
        }
        // SAFETY: as above.
        let got = unsafe { apply(Activation::Sigmoid, &xs) }.unwrap();
        let textbook = |x: f32| 1.0 / (1.0 + exp_f32(-x));
        assert!(
            differs(&got, &textbook).is_some(),
            "the comparison did not tell sigmoid from the textbook form"
        );
        // SAFETY: as above.
        assert!(unsafe { apply(Activation::HardSwish, &xs) }.is_none());
    }
}
