//! f32 buffers that start on a cache line.
//!
//! The micro-kernels load each step of a packed `B` panel as whole vectors (a 64-byte zmm on
//! AVX-512). A `Vec<f32>` starts wherever the allocator puts it (16 bytes past a page for a large
//! one), and then every such load spans two cache lines. Packed panels live here instead
//! (`PackedA`, `PackedB`, each thread's block of `B`); the activations a node allocates do not
//! (they are `Vec`s from the heap).
use std::ops::{Deref, DerefMut};

/// One cache line of f32 values.
#[derive(Clone, Copy, Default, Debug)]
#[repr(C, align(64))]
struct Line([f32; 16]);

/// A growable f32 buffer whose first element sits on a 64-byte boundary (and stays there when
/// cloned).
#[derive(Clone, Default, Debug)]
pub(crate) struct AlignedF32 {
    lines: Vec<Line>,
    len: usize,
}

impl AlignedF32 {
    /// `len` zeros.
    pub(crate) fn zeroed(len: usize) -> AlignedF32 {
        AlignedF32 {
            lines: vec![Line::default(); len.div_ceil(16)],
            len,
        }
    }

    /// As `Vec::resize(len, 0.0)`: the elements kept keep their values, new ones are zero.
    pub(crate) fn resize_zeroed(&mut self, len: usize) {
        let old = self.len;
        if len > self.lines.len() * 16 {
            self.lines.resize(len.div_ceil(16), Line::default());
        }
        self.len = len;
        if len > old {
            self[old..].fill(0.0);
        }
    }
}

impl Deref for AlignedF32 {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        // SAFETY: `lines` holds at least `len` f32 values, contiguous (Line is repr(C) of 16 f32).
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<f32>(), self.len) }
    }
}

impl DerefMut for AlignedF32 {
    fn deref_mut(&mut self) -> &mut [f32] {
        // SAFETY: as in `deref`, and borrowed mutably through `self`.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<f32>(), self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_on_a_line_and_resizes_like_a_vec() {
        let mut rng = 0x9e37_79b9_u32;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 17;
            rng ^= rng << 5;
            rng as f32 / u32::MAX as f32 - 0.5
        };
        let mut a = AlignedF32::zeroed(5);
        let mut v = vec![0f32; 5];
        for len in [5usize, 37, 3, 100, 16, 0, 70] {
            for (x, y) in a.iter_mut().zip(v.iter_mut()) {
                let r = next();
                *x = r;
                *y = r;
            }
            a.resize_zeroed(len);
            v.resize(len, 0.0);
            assert_eq!(&a[..], &v[..], "len {len}");
            assert_eq!(a.as_ptr() as usize % 64, 0);
            assert_eq!(a.clone().as_ptr() as usize % 64, 0);
        }
    }
}
