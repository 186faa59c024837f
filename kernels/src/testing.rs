//! Helpers shared by the crate's tests: seeded values, and a 2-D convolution with its reference
//! output, the GEMM over its patches, which the direct and pixel-vector kernels must equal bit for
//! bit.
use std::mem::MaybeUninit;

use crate::pack::{BSource, ConvPatches, PackedA};
use crate::{Epilogue, Isa, Threads, sgemm_uninit};

/// Every activation a kernel ends with: those applied in registers (Sigmoid and SiLU through the
/// register form of `exp`), with bounds that cut, and one applied over stored values (HardSwish).
pub const ACTIVATIONS: [crate::Activation; 7] = [
    crate::Activation::None,
    crate::Activation::Relu,
    crate::Activation::Clip { lo: -0.5, hi: 0.75 },
    crate::Activation::LeakyRelu { alpha: 0.1 },
    crate::Activation::Sigmoid,
    crate::Activation::HardSwish,
    crate::Activation::Silu,
];

/// Seeded values in [-1, 1), never all zero.
pub fn rand(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// One convolution: input `[c, h, w]`, `m` output channels, kernel, strides, dilations and pads
/// `[top, left, bottom, right]`.
#[derive(Debug, Clone, Copy)]
pub struct ConvCase {
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub m: usize,
    pub kernel: [usize; 2],
    pub strides: [usize; 2],
    pub dilations: [usize; 2],
    pub pads: [usize; 4],
}

impl ConvCase {
    pub fn outs(&self) -> [usize; 2] {
        let o = |i: usize, len: usize, pad: usize| {
            (len + pad - (self.kernel[i] - 1) * self.dilations[i] - 1) / self.strides[i] + 1
        };
        [
            o(0, self.h, self.pads[0] + self.pads[2]),
            o(1, self.w, self.pads[1] + self.pads[3]),
        ]
    }

    /// Steps of the sum: `c · kh · kw`.
    pub fn depth(&self) -> usize {
        self.c * self.kernel[0] * self.kernel[1]
    }

    /// The GEMM over the patches of `x` with weights `w` (`[m, depth]`), into `m·oh·ow` values
    /// and `tail` more, all poisoned (NaN) first.
    pub fn gemm(
        &self,
        w: &[f32],
        x: &[f32],
        epi: &Epilogue,
        threads: Threads,
        tail: usize,
    ) -> Vec<f32> {
        let [oh, ow] = self.outs();
        let (k, n) = (self.depth(), oh * ow);
        let patches = ConvPatches {
            x,
            channels: self.c,
            ins: [1, self.h, self.w],
            kernel: [1, self.kernel[0], self.kernel[1]],
            strides: [1, self.strides[0], self.strides[1]],
            dilations: [1, self.dilations[0], self.dilations[1]],
            pads: [0, self.pads[0] as i64, self.pads[1] as i64],
            outs: [1, oh, ow],
        };
        let mut c = poisoned(self.m * n + tail);
        let a = PackedA::new(Isa::Avx512, self.m, k, w, k);
        sgemm_uninit(&a, &BSource::Conv(patches), n, &mut c, n, epi, threads);
        values(c)
    }
}

/// `n` NaNs, as the uninitialised output a kernel writes.
pub fn poisoned(n: usize) -> Vec<MaybeUninit<f32>> {
    vec![MaybeUninit::new(f32::NAN); n]
}

/// The values of an output made by [`poisoned`] (NaN where a kernel wrote nothing).
pub fn values(v: Vec<MaybeUninit<f32>>) -> Vec<f32> {
    // SAFETY: every element was initialised by `poisoned`, or written since.
    v.into_iter().map(|e| unsafe { e.assume_init() }).collect()
}

/// The first output whose bits differ from the reference's, if any.
pub fn first_difference(got: &[f32], want: &[f32]) -> Option<(usize, f32, f32)> {
    got.iter()
        .zip(want)
        .enumerate()
        .find(|(_, (g, w))| g.to_bits() != w.to_bits())
        .map(|(i, (g, w))| (i, *g, *w))
}
