//! Signal processing: DFT, STFT, Hann/Hamming/Blackman windows, MelWeightMatrix.
//!
//! Transforms run in f64 through a mixed-radix FFT (any length; O(n * sum of prime factors)).
use rayon::prelude::*;

use super::{dtype_attr, scalar_f64};
use crate::error::OpResult;
use crate::ops::{OpCtx, Registry, input, opt_input, single};
use crate::tensor::{DType, Tensor, Value};
use crate::{bail, unsupported};

pub fn register(r: &mut Registry) {
    r.add("", "DFT", dft);
    r.add("", "STFT", stft);
    r.add("", "HannWindow", hann_window);
    r.add("", "HammingWindow", hamming_window);
    r.add("", "BlackmanWindow", blackman_window);
    r.add("", "MelWeightMatrix", mel_weight_matrix);
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct C {
    re: f64,
    im: f64,
}

impl C {
    fn mul(self, o: C) -> C {
        C {
            re: self.re * o.re - self.im * o.im,
            im: self.re * o.im + self.im * o.re,
        }
    }
}

/// A transform of one length and direction: twiddles `exp(sign * 2 pi i k / n)`.
struct Fft {
    tw: Vec<C>,
    max_factor: usize,
}

fn smallest_factor(n: usize) -> usize {
    if n.checked_rem(2) == Some(0) {
        return 2;
    }
    let mut f = 3;
    while f * f <= n {
        if n.checked_rem(f) == Some(0) {
            return f;
        }
        f += 2;
    }
    n
}

impl Fft {
    fn new(n: usize, inverse: bool) -> Fft {
        let sign = if inverse { 1.0 } else { -1.0 };
        let tw = (0..n)
            .map(|k| {
                let a = sign * 2.0 * std::f64::consts::PI * k as f64 / n as f64;
                C {
                    re: a.cos(),
                    im: a.sin(),
                }
            })
            .collect();
        let (mut m, mut max_factor) = (n, 1);
        while m > 1 {
            let p = smallest_factor(m);
            max_factor = max_factor.max(p);
            m /= p;
        }
        Fft { tw, max_factor }
    }

    /// `out = DFT(inp)` (unnormalised); `inp.len() == out.len() == n`.
    fn run(&self, inp: &[C], out: &mut [C]) {
        let mut tmp = vec![C::default(); self.max_factor];
        self.rec(inp, 1, out, 1, &mut tmp);
    }

    fn rec(&self, inp: &[C], stride: usize, out: &mut [C], tw_step: usize, tmp: &mut [C]) {
        let n = out.len();
        if n <= 1 {
            if n == 1 {
                out[0] = inp[0];
            }
            return;
        }
        let p = smallest_factor(n);
        let m = n / p;
        for r in 0..p {
            self.rec(
                &inp[r * stride..],
                stride * p,
                &mut out[r * m..(r + 1) * m],
                tw_step * p,
                tmp,
            );
        }
        // X[k + m q] = sum_r w_n^(r (k + m q)) Y_r[k], with w_n = tw[tw_step].
        for k in 0..m {
            for (q, t) in tmp.iter_mut().enumerate().take(p) {
                let idx = k + m * q;
                let mut acc = out[k];
                for r in 1..p {
                    let e = (r * idx) % n;
                    let v = out[r * m + k].mul(self.tw[e * tw_step]);
                    acc.re += v.re;
                    acc.im += v.im;
                }
                *t = acc;
            }
            for q in 0..p {
                out[k + m * q] = tmp[q];
            }
        }
    }
}

/// Reads a `[.., 1]` (real) or `[.., 2]` (complex) tensor as complex values; floats only.
fn complex_input(x: &Tensor) -> OpResult<(Vec<C>, bool)> {
    if !x.dtype().is_float() || x.dtype().is_narrow_float() {
        unsupported!("DFT/STFT of {}", x.dtype());
    }
    let c = x.shape().last().copied().unwrap_or(0);
    let v = x.to_f64_vec()?;
    match c {
        1 => Ok((v.into_iter().map(|re| C { re, im: 0.0 }).collect(), false)),
        2 => Ok((
            v.chunks_exact(2)
                .map(|p| C { re: p[0], im: p[1] })
                .collect(),
            true,
        )),
        _ => bail!(
            "the last dim must be 1 (real) or 2 (complex), got {}",
            x.describe()
        ),
    }
}

/// Parallel over `lines` independent transforms when the total work is large.
fn for_lines<F: Fn(usize, &mut [f64]) + Sync + Send>(
    out: &mut [f64],
    line_len: usize,
    work: usize,
    f: F,
) {
    if line_len == 0 {
        return;
    }
    if work >= 1 << 16 {
        out.par_chunks_mut(line_len)
            .enumerate()
            .for_each(|(i, o)| f(i, o));
    } else {
        out.chunks_mut(line_len)
            .enumerate()
            .for_each(|(i, o)| f(i, o));
    }
}

fn dft(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let r = x.rank();
    if r < 2 {
        bail!(
            "DFT needs rank >= 2 ([signal dims..., 1 or 2]), got {}",
            x.describe()
        );
    }
    let axis = if ctx.opset() >= 20 {
        match opt_input(inputs, 2)? {
            Some(a) => scalar_f64(a, "axis")? as i64,
            None => -2,
        }
    } else {
        ctx.attr_i("axis", 1)?
    };
    let ax = if axis < 0 { axis + r as i64 } else { axis };
    if ax < 0 || ax > r as i64 - 2 {
        bail!(
            "DFT axis {axis} is out of range for {} (the last dim holds complex parts)",
            x.describe()
        );
    }
    let ax = ax as usize;
    let inverse = ctx.attr_i("inverse", 0)? != 0;
    let onesided = ctx.attr_i("onesided", 0)? != 0;
    let shape = x.shape();
    let n_in = shape[ax];
    let n = match opt_input(inputs, 1)? {
        Some(l) => {
            let l = scalar_f64(l, "dft_length")?;
            if l < 1.0 {
                bail!("dft_length must be positive, got {l}");
            }
            l as usize
        }
        None if inverse && onesided => 2 * n_in.saturating_sub(1),
        None => n_in,
    };
    if n == 0 {
        bail!("DFT length is 0 for {}", x.describe());
    }
    let (data, _) = complex_input(x)?;
    let outer: usize = shape[..ax].iter().product();
    let inner: usize = shape[ax + 1..r - 1].iter().product();
    let (n_out, c_out) = match (inverse, onesided) {
        (false, true) => (n / 2 + 1, 2),
        (true, true) => (n, 1),
        _ => (n, 2),
    };
    let mut out_shape = shape.to_vec();
    out_shape[ax] = n_out;
    out_shape[r - 1] = c_out;
    ctx.check_alloc(&out_shape, 8)?;
    let plan = Fft::new(n, inverse);
    let scale = if inverse { 1.0 / n as f64 } else { 1.0 };
    // Work line by line (one outer index, one inner index), writing [n_out, c_out] per line into a
    // line-major buffer, then scatter into the output layout.
    let mut lines = vec![0.0f64; outer * inner * n_out * c_out];
    for_lines(&mut lines, n_out * c_out, outer * inner * n * 8, |li, o| {
        let (oi, ii) = (li / inner, li % inner);
        let at = |k: usize| data[(oi * n_in + k) * inner + ii];
        let mut sig = vec![C::default(); n];
        if inverse && onesided {
            // Hermitian completion of the one-sided spectrum.
            let half = n / 2;
            for (k, s) in sig.iter_mut().enumerate().take(half + 1) {
                *s = if k < n_in { at(k) } else { C::default() };
            }
            for k in half + 1..n {
                let c = sig[n - k];
                sig[k] = C {
                    re: c.re,
                    im: -c.im,
                };
            }
        } else {
            for (k, s) in sig.iter_mut().enumerate().take(n_in.min(n)) {
                *s = at(k);
            }
        }
        let mut res = vec![C::default(); n];
        plan.run(&sig, &mut res);
        for k in 0..n_out {
            o[k * c_out] = res[k].re * scale;
            if c_out == 2 {
                o[k * c_out + 1] = res[k].im * scale;
            }
        }
    });
    let mut out = vec![0.0f64; lines.len()];
    for oi in 0..outer {
        for ii in 0..inner {
            let src = &lines[(oi * inner + ii) * n_out * c_out..][..n_out * c_out];
            for k in 0..n_out {
                let dst = ((oi * n_out + k) * inner + ii) * c_out;
                out[dst..dst + c_out].copy_from_slice(&src[k * c_out..(k + 1) * c_out]);
            }
        }
    }
    single(Tensor::from_f64s(x.dtype(), &out_shape, out)?)
}

fn stft(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let s = x.shape();
    if s.len() != 3 {
        bail!(
            "STFT needs a signal [batch, length, 1 or 2], got {}",
            x.describe()
        );
    }
    let (batch, len) = (s[0], s[1]);
    let step = scalar_f64(input(inputs, 1)?, "frame_step")?;
    if step < 1.0 {
        bail!("frame_step must be positive, got {step}");
    }
    let step = step as usize;
    let window = match opt_input(inputs, 2)? {
        Some(w) if w.rank() == 1 => Some(w.to_f64_vec()?),
        Some(w) => bail!("window must be 1-D, got {}", w.describe()),
        None => None,
    };
    let frame_len = match (opt_input(inputs, 3)?, &window) {
        (Some(l), _) => scalar_f64(l, "frame_length")? as usize,
        (None, Some(w)) => w.len(),
        (None, None) => len,
    };
    if frame_len == 0 || frame_len > len {
        bail!("frame_length {frame_len} must be in [1, signal length {len}]");
    }
    if let Some(w) = window.as_ref().filter(|w| w.len() != frame_len) {
        bail!(
            "window of length {} does not match frame_length {frame_len}",
            w.len()
        );
    }
    let onesided = ctx.attr_i("onesided", 1)? != 0;
    let (data, _) = complex_input(x)?;
    let frames = 1 + (len - frame_len) / step;
    let bins = if onesided {
        frame_len / 2 + 1
    } else {
        frame_len
    };
    let out_shape = [batch, frames, bins, 2];
    ctx.check_alloc(&out_shape, 8)?;
    let plan = Fft::new(frame_len, false);
    let mut out = vec![0.0f64; batch * frames * bins * 2];
    for_lines(
        &mut out,
        bins * 2,
        batch * frames * frame_len * 8,
        |li, o| {
            let (b, f) = (li / frames, li % frames);
            let start = b * len + f * step;
            let sig: Vec<C> = (0..frame_len)
                .map(|k| {
                    let c = data[start + k];
                    let w = window.as_ref().map_or(1.0, |w| w[k]);
                    C {
                        re: c.re * w,
                        im: c.im * w,
                    }
                })
                .collect();
            let mut res = vec![C::default(); frame_len];
            plan.run(&sig, &mut res);
            for k in 0..bins {
                o[2 * k] = res[k].re;
                o[2 * k + 1] = res[k].im;
            }
        },
    );
    single(Tensor::from_f64s(x.dtype(), &out_shape, out)?)
}

/// A window of `size` samples: `f(2 pi n / N)` with N = size (periodic) or size - 1 (symmetric).
fn window(ctx: &OpCtx, inputs: &[Option<&Value>], f: impl Fn(f64) -> f64) -> OpResult<Vec<Value>> {
    let size = scalar_f64(input(inputs, 0)?, "size")?;
    if size < 0.0 {
        bail!("window size must be non-negative, got {size}");
    }
    let size = size as usize;
    let dtype = dtype_attr(ctx, "output_datatype", DType::F32)?;
    ctx.check_alloc(&[size], 8)?;
    let periodic = ctx.attr_i("periodic", 1)? != 0;
    let denom = if periodic {
        size as f64
    } else {
        size as f64 - 1.0
    };
    let v: Vec<f64> = (0..size)
        .map(|n| f(2.0 * std::f64::consts::PI * n as f64 / denom))
        .collect();
    single(Tensor::from_f64s(dtype, &[size], v)?)
}

fn hann_window(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    window(ctx, inputs, |a| 0.5 - 0.5 * a.cos())
}

fn hamming_window(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let alpha = 25.0 / 46.0;
    window(ctx, inputs, move |a| alpha - (1.0 - alpha) * a.cos())
}

fn blackman_window(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    window(ctx, inputs, |a| {
        0.42 - 0.5 * a.cos() + 0.08 * (2.0 * a).cos()
    })
}

fn mel_weight_matrix(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let int =
        |i: usize, what: &str| -> OpResult<i64> { Ok(scalar_f64(input(inputs, i)?, what)? as i64) };
    let (mel_bins, dft_len, rate) = (
        int(0, "num_mel_bins")?,
        int(1, "dft_length")?,
        int(2, "sample_rate")?,
    );
    let lo = scalar_f64(input(inputs, 3)?, "lower_edge_hertz")?;
    let hi = scalar_f64(input(inputs, 4)?, "upper_edge_hertz")?;
    if mel_bins < 1 || dft_len < 1 || rate < 1 || lo < 0.0 || hi < lo {
        bail!(
            "MelWeightMatrix needs positive bins/length/rate and 0 <= lower <= upper, got {mel_bins}, {dft_len}, {rate}, {lo}, {hi}"
        );
    }
    let (mel_bins, spec_bins) = (mel_bins as usize, dft_len as usize / 2 + 1);
    ctx.check_alloc(&[spec_bins, mel_bins], 8)?;
    let to_mel = |hz: f64| 2595.0 * (hz / 700.0).ln_1p() / std::f64::consts::LN_10;
    let (lo_mel, hi_mel) = (to_mel(lo), to_mel(hi));
    let step = (hi_mel - lo_mel) / (mel_bins + 2) as f64;
    // Mel points mapped to spectrogram bin indices (floored).
    let points: Vec<i64> = (0..mel_bins + 2)
        .map(|i| {
            let hz =
                700.0 * (((i as f64 * step + lo_mel) / 2595.0) * std::f64::consts::LN_10).exp_m1();
            (((dft_len + 1) as f64 * hz) / rate as f64).floor() as i64
        })
        .collect();
    let mut out = vec![0.0f64; spec_bins * mel_bins];
    let mut set = |j: i64, i: usize, v: f64| -> OpResult<()> {
        if j < 0 || j as usize >= spec_bins {
            bail!("mel bin edge {j} falls outside the {spec_bins} spectrogram bins");
        }
        out[j as usize * mel_bins + i] = v;
        Ok(())
    };
    for i in 0..mel_bins {
        let (l, c, h) = (points[i], points[i + 1], points[i + 2]);
        if c == l {
            set(c, i, 1.0)?;
        } else {
            for j in l..=c {
                set(j, i, (j - l) as f64 / (c - l) as f64)?;
            }
        }
        if h > c {
            for j in c..h {
                set(j, i, (h - j) as f64 / (h - c) as f64)?;
            }
        }
    }
    single(Tensor::from_f64s(
        dtype_attr(ctx, "output_datatype", DType::F32)?,
        &[spec_bins, mel_bins],
        out,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(x: &[C], inverse: bool) -> Vec<C> {
        let n = x.len();
        let s = if inverse { 1.0 } else { -1.0 };
        (0..n)
            .map(|k| {
                x.iter().enumerate().fold(C::default(), |acc, (j, v)| {
                    let a = s * 2.0 * std::f64::consts::PI * ((j * k) % n) as f64 / n as f64;
                    let p = v.mul(C {
                        re: a.cos(),
                        im: a.sin(),
                    });
                    C {
                        re: acc.re + p.re,
                        im: acc.im + p.im,
                    }
                })
            })
            .collect()
    }

    #[test]
    fn mixed_radix_matches_naive() {
        let mut s = 99u64;
        let mut rnd = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        };
        for n in [1usize, 2, 3, 5, 6, 12, 16, 30, 49, 97, 100] {
            let x: Vec<C> = (0..n)
                .map(|_| C {
                    re: rnd(),
                    im: rnd(),
                })
                .collect();
            for inv in [false, true] {
                let mut out = vec![C::default(); n];
                Fft::new(n, inv).run(&x, &mut out);
                for (a, b) in out.iter().zip(naive(&x, inv)) {
                    assert!(
                        (a.re - b.re).abs() < 1e-9 && (a.im - b.im).abs() < 1e-9,
                        "n={n}"
                    );
                }
            }
        }
    }
}
