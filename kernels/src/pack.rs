//! The GEMM's operands in the layouts its micro-kernels read.
//!
//! `A` (`M×K`, the weights of a convolution) is packed once into panels of `MR` rows: panel `q` holds,
//! for each `p`, the `MR` values `A[q·MR + i, p]` (zeros past `M`). `B` (`K×N`) is packed per call,
//! one cache block at a time, into panels of `NR` columns: for each `p`, `NR` consecutive values of
//! row `p` (zeros past `N`). `B` is read either from a dense row-major matrix or straight from a
//! convolution's input ([`ConvPatches`]): the im2col matrix exists only one block at a time, in the
//! packing buffer.
//!
//! A MatMul's left operand, packed per call, is packed eight full rows at a time by 8×8 vector
//! transposes (`pack_rows8_avx`). The pieces of a convolution's packed rows are masked AVX-512
//! loads and stores (`lanes.rs`), on AVX-512 replayed from a plan made once per tap and block of
//! columns (`pack_plan.rs`).
use crate::Isa;
use crate::aligned::AlignedF32;
#[cfg(target_arch = "x86_64")]
use crate::lanes::Avx512;
use crate::lanes::{Lanes, Plain};
use crate::pack_plan::PatchPlan;

/// Values of `A` from which its panels are packed across rayon's threads.
const PAR_PACK: usize = 1 << 15;

/// `A` packed for one instruction set's tile.
#[derive(Debug, Clone)]
pub struct PackedA {
    isa: Isa,
    m: usize,
    k: usize,
    data: AlignedF32,
}

impl PackedA {
    /// Packs the `m×k` matrix with `A[i, p] = a[i·lda + p]`.
    ///
    /// # Panics
    /// When `a` is too short for `m`, `k` and `lda` (a caller's error).
    pub fn new(isa: Isa, m: usize, k: usize, a: &[f32], lda: usize) -> PackedA {
        assert!(
            m == 0 || k == 0 || lda >= k,
            "PackedA: row stride {lda} is shorter than a row of {k}"
        );
        PackedA::strided(isa, m, k, a, lda, 1)
    }

    /// Packs the `m×k` matrix with `A[i, p] = a[i·rs + p·cs]` (a transposed store: `rs = 1`,
    /// `cs = m`).
    ///
    /// # Panics
    /// When `a` is too short for the shape and strides (a caller's error).
    pub fn strided(isa: Isa, m: usize, k: usize, a: &[f32], rs: usize, cs: usize) -> PackedA {
        assert!(isa.is_supported(), "PackedA: {isa:?} is not supported here");
        assert!(
            m == 0 || k == 0 || (m - 1) * rs + (k - 1) * cs < a.len(),
            "PackedA: a {m}x{k} matrix with strides ({rs}, {cs}) does not fit in {} values",
            a.len()
        );
        let mr = isa.mr();
        let panels = m.div_ceil(mr);
        let mut data = AlignedF32::zeroed(panels * mr * k);
        let pack = |(q, panel): (usize, &mut [f32])| {
            #[cfg(target_arch = "x86_64")]
            if isa == Isa::Avx512 && cs == 1 && m - q * mr >= 8 {
                // SAFETY: AVX-512 (and so AVX) is supported (asserted above), its panels are of 8
                // rows; eight rows of k values start at q·8·rs (checked against `a` above), and
                // the panel holds 8·k values.
                unsafe { pack_rows8_avx(&a[q * mr * rs..], rs, k, panel) };
                return;
            }
            for i in 0..mr.min(m - q * mr) {
                let r = (q * mr + i) * rs;
                if cs == 1 {
                    for (p, &v) in a[r..r + k].iter().enumerate() {
                        panel[p * mr + i] = v;
                    }
                } else {
                    for p in 0..k {
                        panel[p * mr + i] = a[r + p * cs];
                    }
                }
            }
        };
        // A left operand packed per call (a MatMul's activations) is on the GEMM's critical path:
        // above a GEMM's own threshold of work, its panels are packed across the threads.
        if k > 0 && m * k >= PAR_PACK && rayon::current_num_threads() > 1 {
            use rayon::prelude::*;
            data.par_chunks_mut(mr * k).enumerate().for_each(pack);
        } else if k > 0 {
            data.chunks_mut(mr * k).enumerate().for_each(pack);
        }
        PackedA { isa, m, k, data }
    }

    pub fn isa(&self) -> Isa {
        self.isa
    }

    pub fn rows(&self) -> usize {
        self.m
    }

    pub fn depth(&self) -> usize {
        self.k
    }

    /// Bytes held, for cache accounting.
    pub fn bytes(&self) -> usize {
        self.data.len() * std::mem::size_of::<f32>()
    }

    /// Panel `q` from step `p0` on.
    pub(crate) fn panel(&self, q: usize, p0: usize) -> &[f32] {
        let mr = self.isa.mr();
        &self.data[(q * self.k + p0) * mr..(q + 1) * self.k * mr]
    }
}

/// Eight rows of `k` values (row `i` at `a[i·rs..]`) into one 8-row panel (`panel[p·8 + i]`), by
/// 8×8 transposes of vectors: the scalar packing stores each value to its own place 32 bytes from
/// the last, one store per value, which made the per-call packing of a MatMul's activations a
/// tenth of its time.
///
/// # Safety
/// The CPU has AVX. (The ranges are asserted here: rows out of `a` or a short `panel` panic.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn pack_rows8_avx(a: &[f32], rs: usize, k: usize, panel: &mut [f32]) {
    use std::arch::x86_64::*;
    assert!(
        k == 0 || 7 * rs + k <= a.len(),
        "pack_rows8: rows out of range"
    );
    assert!(panel.len() >= 8 * k, "pack_rows8: panel too short");
    let (src, dst) = (a.as_ptr(), panel.as_mut_ptr());
    let mut p = 0;
    while p + 8 <= k {
        // SAFETY: rows 0..8 at p..p + 8 lie inside `a`, columns p..p + 8 of the panel inside it
        // (both asserted above).
        unsafe {
            let r: [__m256; 8] = std::array::from_fn(|i| _mm256_loadu_ps(src.add(i * rs + p)));
            let t0 = _mm256_unpacklo_ps(r[0], r[1]);
            let t1 = _mm256_unpackhi_ps(r[0], r[1]);
            let t2 = _mm256_unpacklo_ps(r[2], r[3]);
            let t3 = _mm256_unpackhi_ps(r[2], r[3]);
            let t4 = _mm256_unpacklo_ps(r[4], r[5]);
            let t5 = _mm256_unpackhi_ps(r[4], r[5]);
            let t6 = _mm256_unpacklo_ps(r[6], r[7]);
            let t7 = _mm256_unpackhi_ps(r[6], r[7]);
            let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
            let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
            let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
            let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
            let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
            let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
            let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
            let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
            let out = dst.add(p * 8);
            _mm256_storeu_ps(out, _mm256_permute2f128_ps::<0x20>(u0, u4));
            _mm256_storeu_ps(out.add(8), _mm256_permute2f128_ps::<0x20>(u1, u5));
            _mm256_storeu_ps(out.add(16), _mm256_permute2f128_ps::<0x20>(u2, u6));
            _mm256_storeu_ps(out.add(24), _mm256_permute2f128_ps::<0x20>(u3, u7));
            _mm256_storeu_ps(out.add(32), _mm256_permute2f128_ps::<0x31>(u0, u4));
            _mm256_storeu_ps(out.add(40), _mm256_permute2f128_ps::<0x31>(u1, u5));
            _mm256_storeu_ps(out.add(48), _mm256_permute2f128_ps::<0x31>(u2, u6));
            _mm256_storeu_ps(out.add(56), _mm256_permute2f128_ps::<0x31>(u3, u7));
        }
        p += 8;
    }
    for p in p..k {
        for i in 0..8 {
            panel[p * 8 + i] = a[i * rs + p];
        }
    }
}

/// `B` (`K×N`) packed once, whole: panel `q` holds, for each `p` of all `K`, the `NR` values
/// `B[p, q·NR + lane]` (zeros past `N`). The GEMM reads its blocks in place instead of packing them
/// per call: the form for weights (a MatMul's or Gemm's constant right operand), made once per
/// initializer and cached by the runtime.
#[derive(Debug, Clone)]
pub struct PackedB {
    isa: Isa,
    k: usize,
    n: usize,
    data: AlignedF32,
}

impl PackedB {
    /// Packs the `k×n` matrix with `B[p, j] = b[p·rs + j·cs]` (row-major: `rs = n, cs = 1`; a
    /// transposed `n×k` store: `rs = 1, cs = k`).
    ///
    /// # Panics
    /// When `b` is too short for the shape and strides (a caller's error).
    pub fn new(isa: Isa, k: usize, n: usize, b: &[f32], rs: usize, cs: usize) -> PackedB {
        assert!(isa.is_supported(), "PackedB: {isa:?} is not supported here");
        assert!(
            k == 0 || n == 0 || (k - 1) * rs + (n - 1) * cs < b.len(),
            "PackedB: a {k}x{n} matrix with strides ({rs}, {cs}) does not fit in {} values",
            b.len()
        );
        let nr = isa.nr();
        let panels = n.div_ceil(nr);
        let mut data = AlignedF32::zeroed(panels * nr * k);
        for q in 0..panels {
            let panel = &mut data[q * nr * k..(q + 1) * nr * k];
            for lane in 0..nr.min(n - q * nr) {
                let j = q * nr + lane;
                for p in 0..k {
                    panel[p * nr + lane] = b[p * rs + j * cs];
                }
            }
        }
        PackedB { isa, k, n, data }
    }

    pub fn isa(&self) -> Isa {
        self.isa
    }

    pub fn depth(&self) -> usize {
        self.k
    }

    pub fn cols(&self) -> usize {
        self.n
    }

    /// Panel `q` (columns `q·NR..`) from step `p0` on.
    pub(crate) fn panel(&self, q: usize, p0: usize) -> &[f32] {
        let nr = self.isa.nr();
        &self.data[(q * self.k + p0) * nr..(q + 1) * self.k * nr]
    }
}

/// The geometry of a convolution's patches, spatial dims padded to three (leading dims of size 1),
/// over an input of `channels` planes: `B[(c, kd, kh, kw), (od, oh, ow)]` is the input at
/// `o·stride + k·dilation - pad_begin` in plane `c`, or zero outside it.
#[derive(Debug, Clone, Copy)]
pub struct ConvPatches<'a> {
    /// `channels` planes of `ins[0]·ins[1]·ins[2]` values.
    pub x: &'a [f32],
    pub channels: usize,
    pub ins: [usize; 3],
    pub kernel: [usize; 3],
    pub strides: [usize; 3],
    pub dilations: [usize; 3],
    pub pads: [i64; 3],
    pub outs: [usize; 3],
}

impl ConvPatches<'_> {
    pub(crate) fn taps(&self) -> usize {
        self.kernel.iter().product()
    }

    /// Offset along dim `i` of tap `t` relative to `o·stride`.
    pub(crate) fn off(&self, i: usize, t: usize) -> i64 {
        (t * self.dilations[i]) as i64 - self.pads[i]
    }

    /// Rows `p0..p0+kc`, columns `j0..j0+nc` of the patch matrix, packed into `NR`-wide panels
    /// (`out[(q·kc + p)·NR + lane]` for column `j0 + q·NR + lane`, zeros past `nc`).
    ///
    /// The block's columns are cut once into pieces that lie in one output row and one panel; each
    /// patch row then copies (or zeroes) piece by piece straight into the panels, with no division
    /// per piece and no intermediate row.
    fn pack_panels<const NR: usize>(
        &self,
        rows: (usize, usize),
        cols: (usize, usize),
        out: &mut [f32],
        scratch: &mut PackScratch,
    ) {
        #[cfg(target_arch = "x86_64")]
        if NR == 32 && Isa::Avx512.is_supported() {
            if PatchPlan::covers(self) {
                // SAFETY: the CPU has AVX-512F (checked above), the plan covers the strides, and
                // the caller checked the block against the patch matrix and sized `out`.
                unsafe { scratch.plan.pack(self, rows, cols, out) };
            } else {
                // SAFETY: the CPU has AVX-512F (checked above).
                unsafe { self.pack_panels_avx512(rows, cols, out, &mut scratch.pieces) };
            }
            return;
        }
        self.pack_panels_with::<NR, Plain>(rows, cols, out, &mut scratch.pieces)
    }

    /// [`ConvPatches::pack_panels`] compiled for AVX-512, its moves masked vector ones.
    ///
    /// # Safety
    /// The CPU has AVX-512F (the masked moves of [`Avx512`] need it); everything else is checked
    /// by the safe `pack_panels_with`, as for the plain form.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn pack_panels_avx512(
        &self,
        rows: (usize, usize),
        cols: (usize, usize),
        out: &mut [f32],
        pieces: &mut Vec<Piece>,
    ) {
        self.pack_panels_with::<32, Avx512>(rows, cols, out, pieces)
    }

    #[inline(always)]
    fn pack_panels_with<const NR: usize, L: Lanes>(
        &self,
        (p0, kc): (usize, usize),
        (j0, nc): (usize, usize),
        out: &mut [f32],
        pieces: &mut Vec<Piece>,
    ) {
        let [_, o1, o2] = self.outs;
        let [i0, i1, i2] = self.ins;
        let [_, k1, k2] = self.kernel;
        let [s0, s1, s2] = self.strides;
        pieces.clear();
        let (mut j, end) = (j0, j0 + nc);
        while j < end {
            let (row, w0) = (j / o2, j % o2);
            let rel = j - j0;
            let lane = rel % NR;
            let len = (o2 - w0).min(end - j).min(NR - lane);
            pieces.push(Piece {
                dst: (rel / NR) * kc * NR + lane,
                w0,
                len,
                a: row / o1,
                b: row % o1,
            });
            j += len;
        }
        let ksz = self.taps();
        let plane_len = i0 * i1 * i2;
        let tail = nc % NR;
        for p in 0..kc {
            let (c, kk) = ((p0 + p) / ksz, (p0 + p) % ksz);
            let t = [kk / (k1 * k2), (kk / k2) % k1, kk % k2];
            let plane = &self.x[c * plane_len..(c + 1) * plane_len];
            let off = [self.off(0, t[0]), self.off(1, t[1]), self.off(2, t[2])];
            let (lo, hi) = span(o2, s2, off[2], i2);
            for pc in pieces.iter() {
                let dst = &mut out[pc.dst + p * NR..][..pc.len];
                let ia = (pc.a * s0) as i64 + off[0];
                let ib = (pc.b * s1) as i64 + off[1];
                if ia < 0 || ia >= i0 as i64 || ib < 0 || ib >= i1 as i64 {
                    // SAFETY: `dst` holds the piece's `len <= NR` values.
                    unsafe { L::zero(dst.as_mut_ptr(), dst.len()) };
                    continue;
                }
                let src = &plane[(ia as usize * i1 + ib as usize) * i2..][..i2];
                let (w0, w1) = (pc.w0, pc.w0 + pc.len);
                let (v0, v1) = (lo.clamp(w0, w1), hi.clamp(w0, w1));
                let (left, rest) = dst.split_at_mut(v0 - w0);
                let (mid, right) = rest.split_at_mut(v1 - v0);
                // SAFETY: each part lies in `dst` (at most NR values); the reads of `mid` are
                // `src[first + i·s2]` for `i < mid.len()`, inside the row: `span` keeps exactly
                // the columns whose input lies in it (a piece wholly in the padding has v0 == v1).
                unsafe {
                    L::zero(left.as_mut_ptr(), left.len());
                    L::zero(right.as_mut_ptr(), right.len());
                    if !mid.is_empty() {
                        let first = ((v0 * s2) as i64 + off[2]) as usize;
                        debug_assert!(first + (mid.len() - 1) * s2 < src.len());
                        L::copy(mid.as_mut_ptr(), src[first..].as_ptr(), mid.len(), s2);
                    }
                }
            }
            if tail != 0 {
                let q = nc / NR;
                let pad = &mut out[(q * kc + p) * NR + tail..(q * kc + p + 1) * NR];
                // SAFETY: fewer than NR values.
                unsafe { L::zero(pad.as_mut_ptr(), pad.len()) };
            }
        }
    }
}

/// A thread's scratch for packing `B`: the pieces of a convolution's block, and the plan of its
/// vector moves (kept while the geometry and the block repeat).
#[derive(Debug, Default)]
pub(crate) struct PackScratch {
    pub(crate) pieces: Vec<Piece>,
    pub(crate) plan: PatchPlan,
}

/// A run of a packing block's columns that lies in one output row and one panel.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Piece {
    /// Where its first column goes in the packed block, for patch row 0 (row `p` adds `p·NR`).
    dst: usize,
    /// Its first output column within the row, and its length.
    w0: usize,
    len: usize,
    /// The output row's indices along the first two spatial dims.
    a: usize,
    b: usize,
}

/// The `t` in `[0, count)` with `0 <= t·s + off < bound`, as a range.
pub(crate) fn span(count: usize, s: usize, off: i64, bound: usize) -> (usize, usize) {
    let s = s as i64;
    let lo = if off >= 0 { 0 } else { (-off + s - 1) / s };
    let lim = bound as i64 - off;
    let hi = if lim <= 0 {
        0
    } else {
        ((lim - 1) / s + 1).min(count as i64)
    };
    let lo = lo.min(count as i64);
    (lo as usize, hi.max(lo) as usize)
}

/// Where the GEMM reads `B` (`K×N`) from.
#[derive(Debug, Clone, Copy)]
pub enum BSource<'a> {
    /// Row-major with row stride `ld`: `B[p, j] = data[p·ld + j]` (a 1×1 convolution's input is
    /// its own `B`, `ld` the plane size).
    Dense { data: &'a [f32], ld: usize },
    /// [`BSource::Dense`] with row `p` multiplied by `scale[p]` as it is packed: `B[p, j] =
    /// data[p·ld + j] · scale[p]`, the product a Mul node before a 1×1 convolution would have
    /// stored (a squeeze-and-excitation block's scale, folded into the convolution that reads it).
    ScaledDense {
        data: &'a [f32],
        ld: usize,
        scale: &'a [f32],
    },
    /// A convolution's patches, read from its input as they are packed.
    Conv(ConvPatches<'a>),
    /// Row `p` starts at its own offset: `B[p, j] = data[offs[p] + j]` (a stride-1 convolution
    /// over a zero-padded input: each patch row is the padded input shifted by its tap).
    Rows { data: &'a [f32], offs: &'a [usize] },
    /// Packed once beforehand: read in place, never packed per call.
    Packed(&'a PackedB),
}

impl BSource<'_> {
    /// Checks that every element of a `k×n` `B` lies inside the source.
    pub(crate) fn check(&self, k: usize, n: usize) {
        match self {
            BSource::Dense { data, ld } => assert!(
                k == 0 || n == 0 || ((k - 1) * ld + n <= data.len() && *ld >= n),
                "BSource: a {k}x{n} matrix with row stride {ld} does not fit in {} values",
                data.len()
            ),
            BSource::ScaledDense { data, ld, scale } => {
                BSource::Dense { data, ld: *ld }.check(k, n);
                assert!(
                    scale.len() >= k,
                    "BSource: {} row scales for {k} rows",
                    scale.len()
                );
            }
            BSource::Rows { data, offs } => assert!(
                offs.len() == k && (n == 0 || offs.iter().all(|&o| o + n <= data.len())),
                "BSource: {} row offsets into {} values do not make a {k}x{n} matrix",
                offs.len(),
                data.len()
            ),
            BSource::Packed(pb) => assert!(
                pb.k == k && pb.n == n,
                "BSource: a packed {}x{} B is not {k}x{n}",
                pb.k,
                pb.n
            ),
            BSource::Conv(g) => {
                let in_sp: usize = g.ins.iter().product();
                let out_sp: usize = g.outs.iter().product();
                assert!(
                    k == g.channels * g.taps()
                        && n == out_sp
                        && g.x.len() >= g.channels * in_sp
                        && g.kernel.iter().all(|&t| t > 0)
                        && g.strides.iter().all(|&s| s > 0),
                    "BSource: convolution patches of {:?} do not make a {k}x{n} matrix",
                    (g.channels, g.ins, g.kernel, g.outs)
                );
            }
        }
    }

    /// Packs rows `p0..p0+kc` and columns `j0..j0+nc` into `NR`-wide panels in `out`
    /// (`nc.div_ceil(nr)·nr·kc` values), zeros past column `j0+nc`; `pieces` is scratch.
    pub(crate) fn pack(
        &self,
        nr: usize,
        (p0, kc): (usize, usize),
        (j0, nc): (usize, usize),
        out: &mut [f32],
        scratch: &mut PackScratch,
    ) {
        match nr {
            8 => self.pack_nr::<8>((p0, kc), (j0, nc), out, scratch),
            16 => self.pack_nr::<16>((p0, kc), (j0, nc), out, scratch),
            32 => self.pack_nr::<32>((p0, kc), (j0, nc), out, scratch),
            _ => unreachable!("no instruction set has {nr}-wide panels"),
        }
    }

    /// [`BSource::pack`] for one panel width, so that each panel row is a fixed-size copy.
    fn pack_nr<const NR: usize>(
        &self,
        (p0, kc): (usize, usize),
        (j0, nc): (usize, usize),
        out: &mut [f32],
        scratch: &mut PackScratch,
    ) {
        let full = nc / NR;
        let panels = nc.div_ceil(NR);
        debug_assert!(out.len() >= panels * NR * kc);
        #[cfg(target_arch = "x86_64")]
        if let BSource::ScaledDense { data, ld, scale } = self
            && NR == 32
            && crate::Isa::Avx512.is_supported()
        {
            // SAFETY: AVX-512F is present; the rows and columns lie in `data` (`check`), and `out`
            // holds the panels (debug-asserted above).
            return unsafe { scaled_panels_avx512((data, *ld, scale), (p0, kc), (j0, nc), out) };
        }
        // The values, where row p starts in them, and its scale if any.
        type Rows<'s> = (&'s [f32], &'s dyn Fn(usize) -> usize, Option<&'s [f32]>);
        let (data, start, scale): Rows = match self {
            BSource::Dense { data, ld } => (*data, &move |p| p * ld, None),
            BSource::ScaledDense { data, ld, scale } => (*data, &move |p| p * ld, Some(*scale)),
            BSource::Rows { data, offs } => (*data, &move |p| offs[p], None),
            BSource::Conv(g) => return g.pack_panels::<NR>((p0, kc), (j0, nc), out, scratch),
            BSource::Packed(_) => unreachable!("packed B is read in place"),
        };
        for p in 0..kc {
            let src: &[f32] = &data[start(p0 + p) + j0..][..nc];
            let s = scale.map(|s| s[p0 + p]);
            for (q, part) in src.chunks_exact(NR).enumerate() {
                let dst: &mut [f32; NR] = (&mut out[(q * kc + p) * NR..][..NR])
                    .try_into()
                    .unwrap_or_else(|_| unreachable!());
                let part: &[f32; NR] = part.try_into().unwrap_or_else(|_| unreachable!());
                match s {
                    None => *dst = *part,
                    Some(s) => {
                        for (d, &v) in dst.iter_mut().zip(part) {
                            *d = v * s;
                        }
                    }
                }
            }
            if full < panels {
                let part = &src[full * NR..];
                let dst = &mut out[(full * kc + p) * NR..][..NR];
                dst[..part.len()].copy_from_slice(part);
                if let Some(s) = s {
                    dst[..part.len()].iter_mut().for_each(|v| *v *= s);
                }
                dst[part.len()..].fill(0.0);
            }
        }
    }
}

/// [`BSource::ScaledDense`]'s 32-wide panels on AVX-512: each row's values times its scale, a
/// vector at a time, the last panel's lanes past the columns zero. A loop over the values compiled
/// for the baseline instruction set packed at about 60% of a plain copy's rate, and the 1×1
/// convolutions with few output channels that read these panels are bound by their packing.
///
/// # Safety
/// AVX-512F is present; rows `p0..p0 + kc` and columns `j0..j0 + nc` lie in `data` at row stride
/// `ld`, `scale` has a value for each of those rows, and `out` holds `⌈nc/32⌉·32·kc` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn scaled_panels_avx512(
    (data, ld, scale): (&[f32], usize, &[f32]),
    (p0, kc): (usize, usize),
    (j0, nc): (usize, usize),
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    let panels = nc.div_ceil(32);
    for p in 0..kc {
        let src = data[(p0 + p) * ld + j0..][..nc].as_ptr();
        let s = _mm512_set1_ps(scale[p0 + p]);
        for q in 0..panels {
            let dst = out[(q * kc + p) * 32..][..32].as_mut_ptr();
            for h in 0..2 {
                let at = q * 32 + h * 16;
                let m = crate::lanes::first(nc.saturating_sub(at));
                // SAFETY: lanes below nc − at read columns inside the row; `dst` holds 32 values.
                unsafe {
                    let v = _mm512_maskz_loadu_ps(m, src.add(at));
                    _mm512_storeu_ps(dst.add(h * 16), _mm512_maskz_mul_ps(m, v, s));
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The patch matrix element by its definition.
    pub(crate) fn patch(g: &ConvPatches, p: usize, j: usize) -> f32 {
        let ksz: usize = g.kernel.iter().product();
        let (c, kk) = (p / ksz, p % ksz);
        let t = [
            kk / (g.kernel[1] * g.kernel[2]),
            (kk / g.kernel[2]) % g.kernel[1],
            kk % g.kernel[2],
        ];
        let o = [
            j / (g.outs[1] * g.outs[2]),
            (j / g.outs[2]) % g.outs[1],
            j % g.outs[2],
        ];
        let mut idx = [0usize; 3];
        for d in 0..3 {
            let v = (o[d] * g.strides[d] + t[d] * g.dilations[d]) as i64 - g.pads[d];
            if v < 0 || v >= g.ins[d] as i64 {
                return 0.0;
            }
            idx[d] = v as usize;
        }
        let in_sp: usize = g.ins.iter().product();
        g.x[c * in_sp + (idx[0] * g.ins[1] + idx[1]) * g.ins[2] + idx[2]]
    }

    /// Packed blocks of patches against the definition, element by element (the buffer poisoned
    /// first, so an unwritten lane shows), for every panel width, blocks starting at every row and
    /// column offset, tails of the last panel included.
    #[test]
    fn conv_blocks_match_the_definition() {
        fn check<const NR: usize>(g: &ConvPatches, k: usize, n: usize) {
            let mut scratch = PackScratch::default();
            for (p0, kc) in [(0, k), (1, k - 1), (k / 2, k - k / 2), (k - 1, 1)] {
                for j0 in 0..n {
                    for nc in [n - j0, (n - j0).min(NR + 3), 1] {
                        let panels = nc.div_ceil(NR);
                        let mut out = vec![f32::NAN; panels * NR * kc];
                        BSource::Conv(*g).pack_nr::<NR>((p0, kc), (j0, nc), &mut out, &mut scratch);
                        for p in 0..kc {
                            for jj in 0..panels * NR {
                                let got = out[((jj / NR) * kc + p) * NR + jj % NR];
                                let want = if jj < nc {
                                    patch(g, p0 + p, j0 + jj)
                                } else {
                                    0.0
                                };
                                assert_eq!(
                                    got.to_bits(),
                                    want.to_bits(),
                                    "NR={NR} {:?} block ({p0},{kc})x({j0},{nc}) p={p} j={jj}",
                                    g.kernel
                                );
                            }
                        }
                    }
                }
            }
        }
        let x: Vec<f32> = (0..2 * 2 * 5 * 7).map(|v| v as f32 + 1.0).collect();
        for (kernel, strides, dilations, pads, outs) in [
            ([1, 3, 3], [1, 1, 1], [1, 1, 1], [0, 1, 1], [2, 5, 7]),
            ([1, 3, 2], [1, 2, 3], [1, 1, 2], [0, 2, 1], [2, 4, 2]),
            ([2, 1, 1], [1, 1, 1], [1, 1, 1], [0, 0, 0], [1, 5, 7]),
            ([1, 7, 7], [1, 2, 2], [1, 1, 1], [0, 3, 3], [2, 3, 4]),
            ([1, 5, 5], [1, 1, 1], [1, 1, 1], [0, 3, 4], [2, 7, 10]),
        ] {
            let g = ConvPatches {
                x: &x,
                channels: 2,
                ins: [2, 5, 7],
                kernel,
                strides,
                dilations,
                pads,
                outs,
            };
            let (k, n) = (2 * g.taps(), outs.iter().product::<usize>());
            check::<8>(&g, k, n);
            check::<16>(&g, k, n);
            check::<32>(&g, k, n);
        }
        // Rows wider than a panel: pieces of every length up to 32, at strides 1 and 2 (the
        // AVX-512 moves' second vector and their even-lane gather).
        let x: Vec<f32> = (0..2 * 3 * 70).map(|v| v as f32 + 1.0).collect();
        for (strides, outs) in [([1, 1, 1], [1, 3, 70]), ([1, 1, 2], [1, 3, 35])] {
            let g = ConvPatches {
                x: &x,
                channels: 2,
                ins: [1, 3, 70],
                kernel: [1, 3, 3],
                strides,
                dilations: [1, 1, 1],
                pads: [0, 1, 1],
                outs,
            };
            let (k, n) = (2 * g.taps(), outs.iter().product::<usize>());
            check::<32>(&g, k, n);
        }
    }

    /// The check above catches a packing that drops a piece's last column (the off-by-one a
    /// wrong piece length makes): the same comparison on a deliberately broken copy.
    #[test]
    fn a_broken_packing_is_caught() {
        let x: Vec<f32> = (0..3 * 6 * 6).map(|v| v as f32 + 1.0).collect();
        let g = ConvPatches {
            x: &x,
            channels: 3,
            ins: [1, 6, 6],
            kernel: [1, 3, 3],
            strides: [1, 1, 1],
            dilations: [1, 1, 1],
            pads: [0, 1, 1],
            outs: [1, 6, 6],
        };
        let (k, n) = (27usize, 36usize);
        let mut out = vec![f32::NAN; n.div_ceil(8) * 8 * k];
        let mut scratch = PackScratch::default();
        BSource::Conv(g).pack_nr::<8>((0, k), (0, n), &mut out, &mut scratch);
        // Break it: the last column of the first piece of row 4 is left as poison.
        let first = scratch.pieces[0];
        out[first.dst + 4 * 8 + first.len - 1] = f32::NAN;
        let wrong = (0..k).any(|p| {
            (0..n)
                .any(|j| out[((j / 8) * k + p) * 8 + j % 8].to_bits() != patch(&g, p, j).to_bits())
        });
        assert!(wrong, "the comparison missed a dropped column");
    }

    #[test]
    fn packed_a_panels_hold_columns_of_mr_rows() {
        let (m, k) = (7, 3);
        let a: Vec<f32> = (0..m * 5).map(|v| v as f32).collect();
        for &isa in Isa::supported() {
            let pa = PackedA::new(isa, m, k, &a, 5);
            let mr = isa.mr();
            for q in 0..m.div_ceil(mr) {
                let panel = pa.panel(q, 0);
                for p in 0..k {
                    for i in 0..mr {
                        let r = q * mr + i;
                        let want = if r < m { a[r * 5 + p] } else { 0.0 };
                        assert_eq!(panel[p * mr + i], want);
                    }
                }
            }
        }
    }
}
