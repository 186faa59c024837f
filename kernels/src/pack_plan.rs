//! Convolution patches packed on AVX-512 from a plan of vector moves, made once per block of
//! columns and replayed for every patch row.
//!
//! A packed panel row of a convolution's patches (32 values, two vectors) is pieced together from
//! runs of input columns: one run per output row that the panel crosses, cut where the padding
//! begins. Where those runs lie depends only on the tap `(kd, kh, kw)` and the block's columns,
//! not on the input channel, so the plan lists, for each tap, the masked vector loads that build
//! each vector of the block (relative to the start of a channel's plane) and where to store it.
//! Packing a row is then a walk down its tap's list: no per-run arithmetic, no branches on the
//! geometry, and each vector is stored once, whole (lanes no load reaches are zero).
//!
//! The plan covers input column strides 1 and 2 (the strides of nearly every convolution); other
//! strides pack run by run ([`ConvPatches`]'s general path).
use crate::pack::{ConvPatches, span};

/// Vectors of 16 lanes per packed panel row.
const HALVES: usize = 2;
const LANES: usize = 16;

/// What a plan was made for: the patches' geometry and the block's columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    ins: [usize; 3],
    kernel: [usize; 3],
    strides: [usize; 3],
    dilations: [usize; 3],
    pads: [i64; 3],
    outs: [usize; 3],
    cols: (usize, usize),
}

/// One masked load into the vector being built (and, when `store`, that vector's store).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Load {
    /// Where lane 0 reads (stride 1), or the first of the two vectors read (stride 2), relative to
    /// the start of the channel's plane; lanes outside `mask` are never read, so this may lie
    /// outside the plane.
    src: isize,
    /// The vector of the block: panel `vec / 2`, half `vec % 2`.
    vec: u32,
    /// The lanes this load sets.
    mask: u16,
    /// At stride 2, the lanes of the first and second source vectors that `mask`'s lanes read
    /// (output lane `l` reads source value `2l`).
    lo: u16,
    hi: u16,
    /// The vector is complete after this load: store it and start the next from zero.
    store: bool,
}

/// The plan of one block's columns, kept between calls while they repeat.
#[derive(Debug, Default)]
pub(crate) struct PatchPlan {
    key: Option<Key>,
    loads: Vec<Load>,
    /// The loads of tap `t` are `loads[starts[t]..starts[t + 1]]`.
    starts: Vec<usize>,
}

impl PatchPlan {
    /// Whether the plan can pack these patches (input column stride 1 or 2).
    pub(crate) fn covers(g: &ConvPatches) -> bool {
        matches!(g.strides[2], 1 | 2)
    }

    /// Makes the plan for columns `j0..j0+nc` of `g`'s patch matrix, unless it is already made.
    fn prepare(&mut self, g: &ConvPatches, (j0, nc): (usize, usize)) {
        let key = Key {
            ins: g.ins,
            kernel: g.kernel,
            strides: g.strides,
            dilations: g.dilations,
            pads: g.pads,
            outs: g.outs,
            cols: (j0, nc),
        };
        if self.key == Some(key) {
            return;
        }
        self.key = Some(key);
        self.loads.clear();
        self.starts.clear();
        let [_, o1, o2] = g.outs;
        let [i0, i1, i2] = g.ins;
        let [_, k1, k2] = g.kernel;
        let [s0, s1, s2] = g.strides;
        let vectors = nc.div_ceil(LANES * HALVES) * HALVES;
        for t in 0..g.taps() {
            self.starts.push(self.loads.len());
            let t = [t / (k1 * k2), (t / k2) % k1, t % k2];
            let off = [g.off(0, t[0]), g.off(1, t[1]), g.off(2, t[2])];
            let (lo, hi) = span(o2, s2, off[2], i2);
            let first = self.loads.len();
            // Runs of columns in one output row and one vector, in column order.
            let mut j = j0;
            while j < j0 + nc {
                let rel = j - j0;
                let (vec, lane) = (rel / LANES, rel % LANES);
                let (row, w0) = (j / o2, j % o2);
                let len = (o2 - w0).min(j0 + nc - j).min(LANES - lane);
                j += len;
                let (ia, ib) = (
                    (row / o1 * s0) as i64 + off[0],
                    (row % o1 * s1) as i64 + off[1],
                );
                if ia < 0 || ia >= i0 as i64 || ib < 0 || ib >= i1 as i64 {
                    continue;
                }
                let (v0, v1) = (lo.clamp(w0, w0 + len), hi.clamp(w0, w0 + len));
                if v0 == v1 {
                    continue;
                }
                // Lane `l` holds output column `w0 - lane + l`, which reads input column
                // `(w0 - lane + l)·s2 + off`.
                let mask = lanes(lane + v0 - w0, lane + v1 - w0);
                let base = (ia as usize * i1 + ib as usize) * i2;
                let src =
                    base as isize + (w0 as isize - lane as isize) * s2 as isize + off[2] as isize;
                let (lo, hi) = if s2 == 2 {
                    (evens(mask as u8), evens((mask >> 8) as u8))
                } else {
                    (0, 0)
                };
                self.loads.push(Load {
                    src,
                    vec: vec as u32,
                    mask,
                    lo,
                    hi,
                    store: false,
                });
            }
            // Every vector of the block is stored: a vector no load reaches gets an empty one.
            let runs = self.loads.split_off(first);
            let mut runs = runs.into_iter().peekable();
            for vec in 0..vectors as u32 {
                let before = self.loads.len();
                while let Some(r) = runs.next_if(|r| r.vec == vec) {
                    self.loads.push(r);
                }
                if self.loads.len() == before {
                    self.loads.push(Load {
                        src: 0,
                        vec,
                        mask: 0,
                        lo: 0,
                        hi: 0,
                        store: false,
                    });
                }
                if let Some(last) = self.loads.last_mut() {
                    last.store = true;
                }
            }
        }
        self.starts.push(self.loads.len());
    }

    /// Rows `p0..p0+kc`, columns `j0..j0+nc` of `g`'s patch matrix into 32-wide panels, as
    /// [`ConvPatches`]'s general path packs them (zeros past `nc`).
    ///
    /// # Safety
    /// The CPU has AVX-512F; `g` is checked against its patch matrix (`BSource::check`), the rows
    /// and columns lie in it, `out` holds `nc.div_ceil(32)·32·kc` values, and
    /// [`PatchPlan::covers`] holds.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    pub(crate) unsafe fn pack(
        &mut self,
        g: &ConvPatches,
        (p0, kc): (usize, usize),
        cols: (usize, usize),
        out: &mut [f32],
    ) {
        use std::arch::x86_64::*;
        debug_assert!(Self::covers(g));
        debug_assert!(out.len() >= cols.1.div_ceil(32) * 32 * kc);
        self.prepare(g, cols);
        let ksz = g.taps();
        let plane_len: usize = g.ins.iter().product();
        let panel = (kc * LANES * HALVES) as isize;
        let at = |vec: u32| (vec as isize >> 1) * panel + (vec as isize & 1) * LANES as isize;
        let evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let (mut c, mut t) = (p0 / ksz, p0 % ksz);
        for p in 0..kc {
            let plane = g.x.as_ptr().wrapping_add(c * plane_len);
            let row = out.as_mut_ptr().wrapping_add(p * LANES * HALVES);
            let loads = &self.loads[self.starts[t]..self.starts[t + 1]];
            let mut acc = _mm512_setzero_ps();
            // SAFETY: each load's enabled lanes read inside channel `c`'s plane (the plan keeps
            // only the columns whose input lies in it) and disabled lanes are not accessed; each
            // store lies in `out` (row `p < kc` of a panel of the block).
            unsafe {
                if g.strides[2] == 1 {
                    for l in loads {
                        acc = _mm512_mask_loadu_ps(acc, l.mask, plane.wrapping_offset(l.src));
                        if l.store {
                            _mm512_storeu_ps(row.offset(at(l.vec)), acc);
                            acc = _mm512_setzero_ps();
                        }
                    }
                } else {
                    for l in loads {
                        let src = plane.wrapping_offset(l.src);
                        let a = _mm512_maskz_loadu_ps(l.lo, src);
                        let b = _mm512_maskz_loadu_ps(l.hi, src.wrapping_add(LANES));
                        let v = _mm512_permutex2var_ps(a, evens, b);
                        acc = _mm512_mask_mov_ps(acc, l.mask, v);
                        if l.store {
                            _mm512_storeu_ps(row.offset(at(l.vec)), acc);
                            acc = _mm512_setzero_ps();
                        }
                    }
                }
            }
            t += 1;
            if t == ksz {
                (c, t) = (c + 1, 0);
            }
        }
    }

    /// Test hook: the plan's loads, to break one deliberately.
    #[cfg(test)]
    pub(crate) fn loads_mut(&mut self) -> &mut [Load] {
        &mut self.loads
    }
}

#[cfg(test)]
impl Load {
    /// Drops the highest lane of the load (a run one column short).
    pub(crate) fn drop_last_lane(&mut self) {
        let top = 15 - self.mask.leading_zeros();
        self.mask &= !(1 << top);
    }

    pub(crate) fn mask(&self) -> u16 {
        self.mask
    }
}

/// Lanes `a..b` of 16.
fn lanes(a: usize, b: usize) -> u16 {
    debug_assert!(a < b && b <= LANES);
    (((1u32 << b) - 1) & !((1u32 << a) - 1)) as u16
}

/// Bit `2i` set for each bit `i` of `m`: the source lanes that output lanes `m` read at stride 2.
fn evens(m: u8) -> u16 {
    (0..8)
        .filter(|i| m & (1 << i) != 0)
        .fold(0, |acc, i| acc | (1 << (2 * i)))
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::Isa;
    use crate::pack::tests::patch;

    /// `pack::tests::conv_blocks_match_the_definition` judges the plan (it is the AVX-512 path of
    /// 32-wide panels). Here: that judgement catches a plan whose run is one column short, at
    /// both strides, where the same plan unbroken passes.
    #[test]
    fn a_plan_missing_a_lane_is_caught() {
        if !Isa::Avx512.is_supported() {
            return;
        }
        let x: Vec<f32> = (0..3 * 9 * 11).map(|v| v as f32 + 1.0).collect();
        for (s, outs) in [(1, [1, 9, 11]), (2, [1, 5, 6])] {
            let g = ConvPatches {
                x: &x,
                channels: 3,
                ins: [1, 9, 11],
                kernel: [1, 3, 3],
                strides: [1, s, s],
                dilations: [1, 1, 1],
                pads: [0, 1, 1],
                outs,
            };
            let (k, n) = (3 * g.taps(), outs.iter().product::<usize>());
            let mut plan = PatchPlan::default();
            let pack = |plan: &mut PatchPlan| {
                let mut out = vec![f32::NAN; n.div_ceil(32) * 32 * k];
                // SAFETY: AVX-512F is present, the block is the whole matrix, `out` is sized.
                unsafe { plan.pack(&g, (0, k), (0, n), &mut out) };
                (0..k).all(|p| {
                    (0..n).all(|j| {
                        out[((j / 32) * k + p) * 32 + j % 32].to_bits() == patch(&g, p, j).to_bits()
                    })
                })
            };
            assert!(pack(&mut plan), "stride {s}: the plan itself is wrong");
            let load = plan.loads_mut().iter_mut().find(|l| l.mask() != 0);
            load.expect("a load with lanes").drop_last_lane();
            assert!(
                !pack(&mut plan),
                "stride {s}: a run one column short was missed"
            );
        }
    }
}
