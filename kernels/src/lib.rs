//! Quorum's CPU arithmetic cores, kept apart from the runtime so that they are built optimised in every
//! profile (the runtime's own code builds unoptimised in dev to keep compiles short, and the conformance
//! corpus runs the light models through these loops inside `cargo test`).
//!
//! - [`gemm`]: `C = act(A·B + bias)` in f32 over packed panels, cache-blocked and split across rayon's
//!   threads above a measured work size, with register-blocked micro-kernels for AVX-512, AVX2+FMA and
//!   a portable fallback ([`Isa`]).
//! - [`pack`]: the packed left operand ([`PackedA`], made once per weight by the runtime's caches) and
//!   the right operand's sources: a dense row-major matrix, or the patches of a convolution read straight
//!   from its input ([`ConvPatches`]), so that no im2col matrix is ever written.
//! - [`activation`]: the activations a convolution or GEMM can apply in its store pass, with the same
//!   formulas as the runtime's standalone kernels (which call them), so that a fused node equals the
//!   unfused pair bit for bit.
//!
//! - [`igemm`]: exact 8-bit integer products (`u8`/`i8` operands with zero points, `i32` sums) for the
//!   quantized ops, on AVX-512 VNNI with a portable loop beside it.
//! - [`depthwise`]: one plane of a direct (depthwise) convolution, tap by tap in kernel order; on
//!   AVX-512 a row's outputs are held in registers over its taps, the edges masked.
//! - [`recurrent`]: a recurrent layer's step: the recurrence weight (transposed) times the hidden state,
//!   one serial sum per output with the lanes across outputs, and the gate activations over slices.
//!
//! - [`direct`] and [`pixels`]: convolutions on AVX-512 with nothing packed per call (output pixels
//!   broadcast against 32-channel weight panels; vectors of output pixels for short sums), each
//!   with the GEMM path's bits; `testing.rs` holds the convolution case and GEMM reference their
//!   tests share.
//!
//! Nothing here knows ONNX: shapes, attributes and their errors are the runtime's (`core/src/ops/`).
//! Entry points check the sizes they are given and panic on a caller's inconsistency, never on data.
//!
//! **Vector width.** The crates build for baseline x86-64 (SSE2), so one binary runs on any x86-64
//! CPU. A hot loop that needs wider vectors is compiled again inside `#[target_feature]` wrappers
//! (`"avx512f"`, `"avx2,fma"`) of an `#[inline(always)]` body and picked by [`Isa::detected`]
//! (`QUORUM_CPU_ISA` caps it); [`simd_dispatch!`] writes the pair and the choice from one body
//! (every plain pair uses it; the depthwise plane, the recurrent `matvec_t` and the erf and Gelu
//! kernels, whose wrappers differ per instruction set, spell theirs out). The wrappers run the same
//! operations in the same order (Rust never contracts a multiply and an add into an FMA on its
//! own), so every width gives the same bits, NaN signs and payloads aside. Where a formula wants a
//! fused multiply-add it says so (`mul_add`, one rounding on every target: f32 `exp`, the erf and
//! Gelu polynomials) and its loops run inside the FMA-capable wrappers; outside them each
//! `mul_add` is a call to libm's `fmaf` (the same bits, slowly). A wrapper sits inside the task each
//! thread runs, never around a rayon call: a closure handed to rayon is compiled without the
//! features of the function it is written in (a MaxPool wrapped that way stayed SSE2, seen in its
//! disassembly).
// Off x86_64 (the WebAssembly build, an ARM machine) only the portable kernels run: the plans and
// tiles that feed the AVX-512 paths are built but never read there, and the ISA list never grows.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code, unused_mut))]

/// Runs a body compiled for the widest instruction set this CPU has: the body is copied into an
/// AVX-512F function, an AVX2+FMA function and the plain caller, and [`Isa::detected`] picks one.
/// The body is the same Rust in each, so the vector forms compute what the portable one does (the
/// same bits, where it uses only IEEE operations and `mul_add`); only the width changes.
///
/// `simd_dispatch!(|a: &mut [f32], b: f32| body)` expands, where it stands, to that choice and the
/// value of `body`. The arguments are moved into the wrappers; the body must not `return` (in the
/// portable case it is the caller's own code).
#[macro_export]
macro_rules! simd_dispatch {
    (|$($arg:ident : $ty:ty),* $(,)?| $(-> $ret:ty)? $body:block) => {{
        #[cfg(target_arch = "x86_64")]
        let value = {
            #[target_feature(enable = "avx512f")]
            fn avx512($($arg: $ty),*) $(-> $ret)? $body
            #[target_feature(enable = "avx2,fma")]
            fn avx2($($arg: $ty),*) $(-> $ret)? $body
            match $crate::Isa::detected() {
                // SAFETY: the instruction set was detected on this CPU.
                $crate::Isa::Avx512 => unsafe { avx512($($arg),*) },
                // SAFETY: as above (AVX2 is detected together with FMA).
                $crate::Isa::Avx2 => unsafe { avx2($($arg),*) },
                $crate::Isa::Portable => $body,
            }
        };
        #[cfg(not(target_arch = "x86_64"))]
        let value = $body;
        value
    }};
}

pub mod activation;
mod aligned;
pub mod depthwise;
pub mod direct;
pub mod gemm;
pub mod igemm;
mod lanes;
mod microkernel;
pub mod pack;
mod pack_plan;
pub mod pixels;
pub mod quant;
pub mod recurrent;

pub use activation::Activation;
pub use direct::{DirectConv, conv_direct};
pub use gemm::{Epilogue, Threads, sgemm, sgemm_uninit};
pub use pack::{BSource, ConvPatches, PackedA, PackedB};
pub use pixels::{PixelConv, conv_pixels};

/// The instruction set a GEMM runs with. Packed operands are laid out for one of them (its register
/// tile), so a [`PackedA`] remembers the `Isa` it was packed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Isa {
    /// Plain Rust loops, 4×8 tiles: any target.
    Portable,
    /// AVX2 with FMA, 6×16 tiles.
    Avx2,
    /// AVX-512F, 8×32 tiles.
    Avx512,
}

impl Isa {
    /// The best instruction set this CPU supports (detected once). `QUORUM_CPU_ISA=avx2` or `portable`
    /// caps it, for comparing paths on one machine.
    pub fn detected() -> Isa {
        static ISA: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
        *ISA.get_or_init(|| {
            let best = Isa::supported().last().copied().unwrap_or(Isa::Portable);
            match std::env::var("QUORUM_CPU_ISA").as_deref() {
                Ok("portable") => Isa::Portable,
                Ok("avx2") if best == Isa::Avx512 => Isa::Avx2,
                _ => best,
            }
        })
    }

    /// Every instruction set this CPU can run, weakest first (tests run each of them).
    pub fn supported() -> &'static [Isa] {
        static ALL: std::sync::OnceLock<Vec<Isa>> = std::sync::OnceLock::new();
        ALL.get_or_init(|| {
            let mut v = vec![Isa::Portable];
            #[cfg(target_arch = "x86_64")]
            {
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    v.push(Isa::Avx2);
                }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    v.push(Isa::Avx512);
                }
            }
            v
        })
    }

    /// Whether this CPU runs `self`.
    pub fn is_supported(self) -> bool {
        Isa::supported().contains(&self)
    }

    /// Rows of the register tile: the panel height of a [`PackedA`].
    pub fn mr(self) -> usize {
        match self {
            Isa::Portable => 4,
            Isa::Avx2 => 6,
            Isa::Avx512 => 8,
        }
    }

    /// Columns of the register tile: the panel width of the packed right operand.
    pub fn nr(self) -> usize {
        match self {
            Isa::Portable => 8,
            Isa::Avx2 => 16,
            Isa::Avx512 => 32,
        }
    }
}

/// Helpers shared by the crate's tests.
#[cfg(test)]
pub(crate) mod testing;
