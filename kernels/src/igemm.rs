//! Exact 8-bit integer products: `C[i, j] = Σ_p (A[i, p] − za[i]) · (B[p, j] − zb[j])` for `A` and
//! `B` of `u8` or `i8` (each either), zero points per row of `A` and per column of `B`, in 32-bit
//! two's-complement arithmetic (wrapping, as a 32-bit accumulator does; exact whenever the true sum
//! fits in `i32`, which it does for every `K` up to 2³¹ / 255² = 33,025).
//!
//! The operands are brought to one form while they are packed: `A` as `u8` (an `i8` operand plus
//! 128) and `B` as `i8` (a `u8` operand minus 128), the zero points moved by the same 128, which
//! leaves every difference `A − za`, `B − zb` as it was. The sum is then taken on the raw bytes,
//! `S = Σ A·B`, and corrected: `C = S − zb[j]·ΣA[i, ·] − za[i]·ΣB[·, j] + K·za[i]·zb[j]`, every term
//! modulo 2³² (the correction is an identity of integers, so it holds modulo 2³² too).
//!
//! On AVX-512 VNNI (`vpdpbusd`: four `u8 × i8` products added into each `i32` lane, exactly) the
//! register tile is 8 rows × 32 columns. A portable loop computes the same sums over the same
//! packed panels (the tests run both); the runtime takes this module only where [`fast`] is true
//! and keeps its exact f32 GEMMs over short slices of K elsewhere (they run on the AVX2/AVX-512
//! f32 kernels; the portable loop has not been timed against them).
use rayon::prelude::*;

/// Bytes of `K` in one step of a packed panel (`vpdpbusd` sums four products a lane).
const STEP: usize = 4;

/// Multiply-adds below which a product runs on the calling thread.
const PAR_MIN_WORK: usize = 1 << 18;

/// A matrix of 8-bit integers read through strides: element `(i, j)` is `data[i·rs + j·cs]`.
#[derive(Debug, Clone, Copy)]
pub struct Int8Matrix<'a> {
    pub data: &'a [u8],
    pub rs: usize,
    pub cs: usize,
    /// The bytes are `i8` (else `u8`).
    pub signed: bool,
}

impl Int8Matrix<'_> {
    fn check(&self, rows: usize, cols: usize, what: &str) {
        if rows > 0 && cols > 0 {
            let last = (rows - 1) * self.rs + (cols - 1) * self.cs;
            assert!(
                last < self.data.len(),
                "igemm: {what} ({rows}×{cols}, strides {}/{}) exceeds its {} bytes",
                self.rs,
                self.cs,
                self.data.len()
            );
        }
    }
}

/// The kernels a product can run with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntKernel {
    /// Plain Rust: 4×8 tiles.
    Portable,
    /// AVX-512 VNNI (with AVX-512BW): 8×32 tiles of `vpdpbusd`.
    Vnni,
}

impl IntKernel {
    /// Whether this CPU runs `self`.
    pub fn is_supported(self) -> bool {
        match self {
            IntKernel::Portable => true,
            IntKernel::Vnni => vnni(),
        }
    }

    fn tile(self) -> (usize, usize) {
        match self {
            IntKernel::Portable => (4, 8),
            IntKernel::Vnni => (8, 32),
        }
    }
}

fn vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static V: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *V.get_or_init(|| {
            std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vnni")
                && crate::Isa::detected() == crate::Isa::Avx512
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether this CPU has the vector kernel (AVX-512 VNNI, unless `QUORUM_CPU_ISA` caps the
/// instruction set below AVX-512): the runtime takes [`igemm`] only then, its exact f32 path
/// elsewhere.
pub fn fast() -> bool {
    vnni()
}

/// The best kernel this CPU runs.
pub fn best() -> IntKernel {
    if vnni() {
        IntKernel::Vnni
    } else {
        IntKernel::Portable
    }
}

/// `C[i, j] = Σ_p (A[i, p] − za[i]) · (B[p, j] − zb[j])` (wrapping `i32`) for `i < m`, `j < n`, `p < k`,
/// written at `c[i·c_rs + j·c_cs]`. `za` holds one value or `m`, `zb` one or `n`. Every element of
/// the `m×n` region is written; nothing else.
///
/// # Panics
/// When an operand, a zero point or `c` is too small for the shapes, or `kernel` is not supported
/// on this CPU (caller errors).
#[allow(clippy::too_many_arguments)]
pub fn igemm(
    kernel: IntKernel,
    (m, n, k): (usize, usize, usize),
    a: Int8Matrix,
    za: &[i32],
    b: Int8Matrix,
    zb: &[i32],
    c: &mut [i32],
    (c_rs, c_cs): (usize, usize),
) {
    assert!(
        m == 0 || n == 0 || (m - 1) * c_rs + (n - 1) * c_cs < c.len(),
        "igemm: C too small"
    );
    product(
        kernel,
        (m, n, k),
        a,
        za,
        b,
        zb,
        Out::Sums(c.as_mut_ptr()),
        (c_rs, c_cs),
    );
}

/// How [`igemm_requantized`] turns row `i`'s exact sums into 8-bit levels:
/// [`crate::quant::requantize_level`] with `rows[i]` (or `rows[0]` for all rows) as (bias,
/// multiplier), the output zero point `zp` and the range `[lo, hi]` (u8's or i8's).
#[derive(Debug, Clone, Copy)]
pub struct Requantize<'a> {
    pub rows: &'a [(f64, f64)],
    pub zp: f64,
    pub lo: f64,
    pub hi: f64,
}

/// [`igemm`]'s product requantized as each tile is stored (QLinearConv's and QLinearMatMul's
/// output): `c[i·c_rs + j·c_cs]` is the level of `C[i, j]` by `rq`, as a byte (an i8 level's two's
/// complement where `rq.lo < 0`). The same integers as requantizing [`igemm`]'s sums with
/// [`crate::quant::requantize_u8`] or [`crate::quant::requantize_i8`], without writing and reading
/// the 32-bit sums.
///
/// # Panics
/// As [`igemm`], and when `rq.rows` holds neither 1 nor `m` values.
#[allow(clippy::too_many_arguments)]
pub fn igemm_requantized(
    kernel: IntKernel,
    (m, n, k): (usize, usize, usize),
    a: Int8Matrix,
    za: &[i32],
    b: Int8Matrix,
    zb: &[i32],
    rq: Requantize,
    c: &mut [u8],
    (c_rs, c_cs): (usize, usize),
) {
    assert!(
        m == 0 || n == 0 || (m - 1) * c_rs + (n - 1) * c_cs < c.len(),
        "igemm: C too small"
    );
    assert!(
        rq.rows.len() == 1 || rq.rows.len() == m,
        "igemm: requantization must hold 1 or m rows"
    );
    product(
        kernel,
        (m, n, k),
        a,
        za,
        b,
        zb,
        Out::Levels(c.as_mut_ptr(), rq),
        (c_rs, c_cs),
    );
}

/// The product written through `out` (which the callers checked against the m×n region).
#[allow(clippy::too_many_arguments)]
fn product(
    kernel: IntKernel,
    (m, n, k): (usize, usize, usize),
    a: Int8Matrix,
    za: &[i32],
    b: Int8Matrix,
    zb: &[i32],
    out: Out,
    (c_rs, c_cs): (usize, usize),
) {
    assert!(kernel.is_supported(), "igemm: {kernel:?} is not supported");
    if m == 0 || n == 0 {
        return;
    }
    a.check(m, k, "A");
    b.check(k, n, "B");
    assert!(
        za.len() == 1 || za.len() == m,
        "igemm: za must hold 1 or m values"
    );
    assert!(
        zb.len() == 1 || zb.len() == n,
        "igemm: zb must hold 1 or n values"
    );
    let (mr, nr) = kernel.tile();
    let kq = k.div_ceil(STEP);
    let par = m.saturating_mul(n).saturating_mul(k) >= PAR_MIN_WORK;
    // Zero points in the packed form (A as u8: i8 + 128; B as i8: u8 − 128), one per row of A and
    // one per column of B.
    let za: Vec<i32> = (0..m)
        .map(|i| za[if za.len() == 1 { 0 } else { i }].wrapping_add(if a.signed { 128 } else { 0 }))
        .collect();
    let zb: Vec<i32> = (0..n)
        .map(|j| zb[if zb.len() == 1 { 0 } else { j }].wrapping_sub(if b.signed { 0 } else { 128 }))
        .collect();
    let wide = kernel == IntKernel::Vnni;
    // The packed operands reuse this thread's buffers (every word is written before it is read),
    // which spares zeroing and faulting in megabytes a call.
    let (mut ap, mut bp) = BUFFERS.with(|b| std::mem::take(&mut *b.borrow_mut()));
    let job = |mat, lines, width, columns| Pack {
        mat,
        lines,
        k,
        width,
        columns,
    };
    let ra = pack(job(a, m, mr, false), par, wide, &mut ap);
    let cb = pack(job(b, n, nr, true), par, wide, &mut bp);
    let panels = m.div_ceil(mr);
    let cols = n.div_ceil(nr);
    let fix = Fix {
        za: &za,
        zb: &zb,
        ra: &ra,
        cb: &cb,
        k: k as i32,
    };
    let tile = |pi: usize, cj: usize| {
        let mut acc = [0i32; 8 * 32];
        let a_panel = &ap[pi * kq * mr..][..kq * mr];
        let b_panel = &bp[cj * kq * nr..][..kq * nr];
        let (i0, j0) = (pi * mr, cj * nr);
        let region = (i0, mr.min(m - i0), j0, nr.min(n - j0), nr);
        match kernel {
            IntKernel::Portable => {
                portable_tile(kq, a_panel, b_panel, &mut acc);
                store(&acc, region, &fix, out, (c_rs, c_cs));
            }
            // SAFETY: `kernel.is_supported()` was asserted: AVX-512F, BW and VNNI were detected;
            // the panels hold `kq` steps of 8 rows and 32 columns (sliced just above); the
            // region lies inside the m×n product, whose last element was checked against `c`.
            #[cfg(target_arch = "x86_64")]
            IntKernel::Vnni => unsafe {
                vnni_tile(kq, a_panel, b_panel, &mut acc);
                store_avx512(&acc, region, &fix, out, (c_rs, c_cs));
            },
            #[cfg(not(target_arch = "x86_64"))]
            IntKernel::Vnni => unreachable!("not supported off x86_64"),
        }
    };
    let run = |tile: &(dyn Fn(usize, usize) + Sync)| {
        if par && panels * cols > 1 {
            // Rows of tiles per task, or columns where there are more of them.
            if panels >= cols {
                (0..panels)
                    .into_par_iter()
                    .for_each(|pi| (0..cols).for_each(|cj| tile(pi, cj)));
            } else {
                (0..cols)
                    .into_par_iter()
                    .for_each(|cj| (0..panels).for_each(|pi| tile(pi, cj)));
            }
        } else {
            for pi in 0..panels {
                for cj in 0..cols {
                    tile(pi, cj);
                }
            }
        }
    };
    run(&tile);
    BUFFERS.with(|b| *b.borrow_mut() = (ap, bp));
}

thread_local! {
    /// The packed A and B of this thread's last product, kept for the next.
    static BUFFERS: std::cell::RefCell<(Vec<u32>, Vec<u32>)> = Default::default();
}

/// What turns a raw sum into the centered one: `S − zb[j]·ra[i] − za[i]·cb[j] + k·za[i]·zb[j]`.
struct Fix<'a> {
    za: &'a [i32],
    zb: &'a [i32],
    ra: &'a [i32],
    cb: &'a [i32],
    k: i32,
}

/// Where the tasks store: `C`'s base pointer, of the sums or of their levels, shared by the tasks,
/// which write disjoint elements.
#[derive(Clone, Copy)]
enum Out<'a> {
    Sums(*mut i32),
    Levels(*mut u8, Requantize<'a>),
}
// SAFETY: the tasks write disjoint elements through it (one tile each) and nothing reads them
// until the product returns.
unsafe impl Send for Out<'_> {}
// SAFETY: as for Send: shared by the tasks, each writing only its own tile's elements.
unsafe impl Sync for Out<'_> {}

/// [`store`] compiled for AVX-512 (its loop over a row vectorizes 16 wide).
///
/// # Safety
/// AVX-512F and BW are present, and [`store`]'s contract holds.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn store_avx512(
    acc: &[i32; 256],
    region: (usize, usize, usize, usize, usize),
    fix: &Fix,
    out: Out,
    strides: (usize, usize),
) {
    store(acc, region, fix, out, strides)
}

/// Writes a tile's `rows × cols` corrected sums at rows `i0..`, columns `j0..` of `C` (the tile's
/// row stride in `acc` is `nr`). Every element it writes lies inside the m×n product, which the
/// caller checked against `C`'s length, and belongs to this tile alone.
#[inline(always)]
fn store(
    acc: &[i32; 256],
    (i0, rows, j0, cols, nr): (usize, usize, usize, usize, usize),
    fix: &Fix,
    out: Out,
    (c_rs, c_cs): (usize, usize),
) {
    let zb = &fix.zb[j0..][..cols];
    let cb = &fix.cb[j0..][..cols];
    for ii in 0..rows {
        let i = i0 + ii;
        let (zai, rai) = (fix.za[i], fix.ra[i]);
        let kza = fix.k.wrapping_mul(zai);
        let src = &acc[ii * nr..][..cols];
        let value = |jj: usize| {
            src[jj]
                .wrapping_sub(zb[jj].wrapping_mul(rai))
                .wrapping_sub(zai.wrapping_mul(cb[jj]))
                .wrapping_add(kza.wrapping_mul(zb[jj]))
        };
        match out {
            Out::Sums(c) if c_cs == 1 => {
                // SAFETY: the row's `cols` elements from (i, j0) lie inside the m×n product (the
                // caller's contract), contiguous where the column stride is 1.
                let row = unsafe { std::slice::from_raw_parts_mut(c.add(i * c_rs + j0), cols) };
                for (jj, d) in row.iter_mut().enumerate() {
                    *d = value(jj);
                }
            }
            Out::Sums(c) => {
                for jj in 0..cols {
                    // SAFETY: as above, one element at a time.
                    unsafe { c.add(i * c_rs + (j0 + jj) * c_cs).write(value(jj)) };
                }
            }
            Out::Levels(c, rq) => {
                let (bias, mult) = rq.rows[if rq.rows.len() == 1 { 0 } else { i }];
                let level = |jj: usize| {
                    let q =
                        crate::quant::requantize_level(value(jj), bias, mult, rq.zp, rq.lo, rq.hi);
                    crate::quant::level_i64(q) as u8
                };
                if c_cs == 1 {
                    // SAFETY: as for the sums.
                    let row = unsafe { std::slice::from_raw_parts_mut(c.add(i * c_rs + j0), cols) };
                    for (jj, d) in row.iter_mut().enumerate() {
                        *d = level(jj);
                    }
                } else {
                    for jj in 0..cols {
                        // SAFETY: as for the sums.
                        unsafe { c.add(i * c_rs + (j0 + jj) * c_cs).write(level(jj)) };
                    }
                }
            }
        }
    }
}

/// Packs `lines` lines of `k` bytes (rows of `A`, or columns of `B` when `columns`) into panels of
/// `width` lines: per panel, per step of four bytes of `K`, one word per line holding its four
/// bytes; lines past the last and bytes past `K` are 0 (adding nothing to any sum). Returns the
/// panels and each line's sum of its (converted) bytes. A's bytes become `u8`, B's `i8`. `wide`:
/// the loops are compiled for AVX-512 (the VNNI kernel's machines).
fn pack(job: Pack, par: bool, wide: bool, packed: &mut Vec<u32>) -> Vec<i32> {
    let Pack {
        lines, k, width, ..
    } = job;
    let kq = k.div_ceil(STEP);
    let panel = kq * width;
    let count = lines.div_ceil(width);
    // Every word is written by `pack_panel` (the lines past the last included), so a reused
    // buffer's old words need no clearing.
    if packed.len() < count * panel {
        packed.resize(count * panel, 0);
    } else {
        packed.truncate(count * panel);
    }
    let mut sums = vec![0i32; count * width];
    let fill = |(p, (dst, sum)): (usize, (&mut [u32], &mut [i32]))| {
        #[cfg(target_arch = "x86_64")]
        if wide {
            // SAFETY: `wide` is set only for the VNNI kernel, whose features (AVX-512F and BW
            // among them) were detected.
            return unsafe { pack_panel_avx512(&job, p, dst, sum) };
        }
        let _ = wide;
        pack_panel(&job, p, dst, sum)
    };
    if par {
        packed
            .par_chunks_mut(panel.max(1))
            .zip(sums.par_chunks_mut(width))
            .enumerate()
            .for_each(fill);
    } else {
        packed
            .chunks_mut(panel.max(1))
            .zip(sums.chunks_mut(width))
            .enumerate()
            .for_each(fill);
    }
    sums
}

/// One operand's packing.
#[derive(Clone, Copy)]
struct Pack<'a> {
    mat: Int8Matrix<'a>,
    lines: usize,
    k: usize,
    width: usize,
    columns: bool,
}

/// [`pack_panel`] compiled for AVX-512.
///
/// # Safety
/// AVX-512F and BW are present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn pack_panel_avx512(job: &Pack, p: usize, dst: &mut [u32], sum: &mut [i32]) {
    pack_panel(job, p, dst, sum)
}

/// Panel `p` of [`pack`] into `dst` (its `kq·width` words) and `sum` (its `width` line sums).
#[inline(always)]
fn pack_panel(job: &Pack, p: usize, dst: &mut [u32], sum: &mut [i32]) {
    let Pack {
        mat,
        lines,
        k,
        width,
        columns,
    } = *job;
    let kq = k.div_ceil(STEP);
    let here = width.min(lines - p * width);
    // A is stored as u8: an i8 operand gets +128 (its top bit flipped); B as i8: a u8 operand gets
    // −128, the same flip. So the flip is needed exactly when the signedness differs from the form.
    let flip = if mat.signed != columns { 0x80u8 } else { 0 };
    let flip4 = u32::from_ne_bytes([flip; 4]);
    let (line_stride, k_stride) = if columns {
        (mat.cs, mat.rs)
    } else {
        (mat.rs, mat.cs)
    };
    let first = p * width * line_stride;
    if here < width {
        // Lines past the last: zero words, which add nothing.
        for q in 0..kq {
            dst[q * width + here..][..width - here].fill(0);
        }
    }
    let val = |x: u8| -> i32 { if columns { x as i8 as i32 } else { x as i32 } };
    let word = |b: [u8; 4]| u32::from_le_bytes(b) ^ flip4;
    if k_stride == 1 {
        // Each line's K bytes are contiguous: line by line, a step (four bytes) at a time; a short
        // last step is padded with the flip byte, which the flip turns into 0.
        for (w, s) in sum.iter_mut().enumerate().take(here) {
            let src = &mat.data[first + w * line_stride..][..k];
            let mut acc = 0i32;
            for (q, quad) in src.chunks(STEP).enumerate() {
                let mut b = [flip; 4];
                b[..quad.len()].copy_from_slice(quad);
                let v = word(b);
                for x in v.to_le_bytes() {
                    acc = acc.wrapping_add(val(x));
                }
                dst[q * width + w] = v;
            }
            *s = acc;
        }
        return;
    }
    // Step by step along K: four rows at a time, the panel's lines side by side, interleaved into
    // words. Contiguous where B is row-major (its columns are adjacent in each row).
    let pad = vec![flip; here];
    for q in 0..kq {
        let out = &mut dst[q * width..][..here];
        if line_stride == 1 {
            let row = |t: usize| -> &[u8] {
                let kk = q * STEP + t;
                if kk < k {
                    &mat.data[first + kk * k_stride..][..here]
                } else {
                    &pad
                }
            };
            let (r0, r1, r2, r3) = (row(0), row(1), row(2), row(3));
            if here == 32 {
                // The full panel of the VNNI kernel: fixed lengths, so both loops vectorize.
                let r = |x: &[u8]| -> [u8; 32] { x.try_into().expect("32 bytes") };
                let (r0, r1, r2, r3) = (r(r0), r(r1), r(r2), r(r3));
                let o: &mut [u32; 32] = out.try_into().expect("32 words");
                let s: &mut [i32; 32] = (&mut sum[..32]).try_into().expect("32 sums");
                for w in 0..32 {
                    o[w] = (r0[w] as u32
                        | (r1[w] as u32) << 8
                        | (r2[w] as u32) << 16
                        | (r3[w] as u32) << 24)
                        ^ flip4;
                    let t = val(r0[w] ^ flip)
                        .wrapping_add(val(r1[w] ^ flip))
                        .wrapping_add(val(r2[w] ^ flip))
                        .wrapping_add(val(r3[w] ^ flip));
                    s[w] = s[w].wrapping_add(t);
                }
                continue;
            }
            for (w, o) in out.iter_mut().enumerate() {
                *o = (r0[w] as u32
                    | (r1[w] as u32) << 8
                    | (r2[w] as u32) << 16
                    | (r3[w] as u32) << 24)
                    ^ flip4;
            }
            for (w, s) in sum.iter_mut().enumerate().take(here) {
                let t = val(r0[w] ^ flip)
                    .wrapping_add(val(r1[w] ^ flip))
                    .wrapping_add(val(r2[w] ^ flip))
                    .wrapping_add(val(r3[w] ^ flip));
                *s = s.wrapping_add(t);
            }
        } else {
            let byte = |t: usize, w: usize| {
                let kk = q * STEP + t;
                if kk < k {
                    mat.data[first + kk * k_stride + w * line_stride]
                } else {
                    flip
                }
            };
            for (w, (o, s)) in out.iter_mut().zip(sum.iter_mut()).enumerate() {
                let v = word([byte(0, w), byte(1, w), byte(2, w), byte(3, w)]);
                for x in v.to_le_bytes() {
                    *s = s.wrapping_add(val(x));
                }
                *o = v;
            }
        }
    }
}

/// One 4×8 tile of raw sums over packed panels, in plain Rust (any target).
fn portable_tile(kq: usize, a: &[u32], b: &[u32], acc: &mut [i32; 256]) {
    const MR: usize = 4;
    const NR: usize = 8;
    for q in 0..kq {
        let aq = &a[q * MR..][..MR];
        let bq = &b[q * NR..][..NR];
        for i in 0..MR {
            let ab = aq[i].to_le_bytes();
            for j in 0..NR {
                let bb = bq[j].to_le_bytes();
                let mut s = 0i32;
                for t in 0..STEP {
                    s += ab[t] as i32 * bb[t] as i8 as i32;
                }
                acc[i * NR + j] = acc[i * NR + j].wrapping_add(s);
            }
        }
    }
}

/// One 8×32 tile of raw sums: per step, two vectors of B's 32 columns (a word each) and each of
/// A's 8 rows broadcast, `vpdpbusd` into 16 accumulators.
///
/// # Safety
/// AVX-512F, AVX-512BW and AVX-512 VNNI are present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn vnni_tile(kq: usize, a: &[u32], b: &[u32], acc: &mut [i32; 256]) {
    use std::arch::x86_64::*;
    assert!(a.len() >= kq * 8 && b.len() >= kq * 32);
    let mut c = [_mm512_setzero_si512(); 16];
    for q in 0..kq {
        // SAFETY: step q's 32 words of B lie inside the slice (asserted above).
        let (b0, b1) = unsafe {
            let bp = b.as_ptr().add(q * 32);
            (
                _mm512_loadu_si512(bp.cast()),
                _mm512_loadu_si512(bp.add(16).cast()),
            )
        };
        let ar = &a[q * 8..][..8];
        for i in 0..8 {
            let av = _mm512_set1_epi32(ar[i] as i32);
            c[2 * i] = _mm512_dpbusd_epi32(c[2 * i], av, b0);
            c[2 * i + 1] = _mm512_dpbusd_epi32(c[2 * i + 1], av, b1);
        }
    }
    for (i, v) in c.iter().enumerate() {
        // SAFETY: acc holds 256 i32, 16 vectors of 16.
        unsafe { _mm512_storeu_si512(acc.as_mut_ptr().add(i * 16).cast(), *v) };
    }
}

#[cfg(test)]
#[path = "igemm/requantized_tests.rs"]
mod requantized_tests;

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn lcg(s: &mut u64) -> u64 {
        *s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *s >> 33
    }

    /// The definition, in i64 then wrapped to i32.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn naive(
        (m, n, k): (usize, usize, usize),
        a: &Int8Matrix,
        za: &[i32],
        b: &Int8Matrix,
        zb: &[i32],
    ) -> Vec<i32> {
        let val = |mat: &Int8Matrix, at: usize| {
            let v = mat.data[at];
            if mat.signed { v as i8 as i64 } else { v as i64 }
        };
        let mut c = vec![0i32; m * n];
        for i in 0..m {
            for j in 0..n {
                let zai = za[if za.len() == 1 { 0 } else { i }] as i64;
                let zbj = zb[if zb.len() == 1 { 0 } else { j }] as i64;
                let mut s = 0i64;
                for p in 0..k {
                    s += (val(a, i * a.rs + p * a.cs) - zai) * (val(b, p * b.rs + j * b.cs) - zbj);
                }
                c[i * n + j] = s as i32;
            }
        }
        c
    }

    /// Every kernel this CPU runs, every signedness of A and B, zero points per tensor and per
    /// row/column, ragged shapes (edges of the 8×32 and 4×8 tiles, K not a multiple of 4), B read
    /// transposed, against the definition; worst-case magnitudes (255·255 and −128·255) over a K
    /// long enough that the raw sums wrap past 2³¹ while the centered result does not.
    #[test]
    fn every_kernel_matches_the_definition() {
        let mut seed = 11u64;
        let shapes = [
            (1, 1, 1),
            (3, 5, 7),
            (8, 32, 4),
            (9, 33, 5),
            (17, 70, 300),
            (64, 40, 1031),
        ];
        for kernel in [IntKernel::Portable, IntKernel::Vnni] {
            if !kernel.is_supported() {
                eprintln!("{kernel:?} not on this CPU: skipped");
                continue;
            }
            for &(m, n, k) in &shapes {
                for (sa, sb) in [(false, true), (true, false), (false, false), (true, true)] {
                    let ad: Vec<u8> = (0..m * k).map(|_| lcg(&mut seed) as u8).collect();
                    let bd: Vec<u8> = (0..k * n).map(|_| lcg(&mut seed) as u8).collect();
                    // A transposed where n is odd (read as columns of a row-major k×m), B where
                    // m is odd (as rows of a row-major n×k).
                    let a = if n % 2 == 1 {
                        Int8Matrix {
                            data: &ad,
                            rs: 1,
                            cs: m,
                            signed: sa,
                        }
                    } else {
                        Int8Matrix {
                            data: &ad,
                            rs: k,
                            cs: 1,
                            signed: sa,
                        }
                    };
                    let b = if m % 2 == 1 {
                        Int8Matrix {
                            data: &bd,
                            rs: 1,
                            cs: k,
                            signed: sb,
                        }
                    } else {
                        Int8Matrix {
                            data: &bd,
                            rs: n,
                            cs: 1,
                            signed: sb,
                        }
                    };
                    let z = |s: &mut u64, signed: bool| {
                        let v = lcg(s) as u8;
                        if signed { v as i8 as i32 } else { v as i32 }
                    };
                    let za: Vec<i32> = if k % 2 == 0 {
                        vec![z(&mut seed, sa)]
                    } else {
                        (0..m).map(|_| z(&mut seed, sa)).collect()
                    };
                    let zb: Vec<i32> = (0..if n % 2 == 0 { 1 } else { n })
                        .map(|_| z(&mut seed, sb))
                        .collect();
                    let want = naive((m, n, k), &a, &za, &b, &zb);
                    let mut got = vec![i32::MIN + 7; m * n];
                    igemm(kernel, (m, n, k), a, &za, b, &zb, &mut got, (n, 1));
                    assert_eq!(got, want, "{kernel:?} {m}×{n}×{k} signed {sa}/{sb}");
                }
            }
            // Extremes: u8 255 against i8 −128 with B's zero point 127, (255)·(−255) over K 33,000
            // is −2,145,825,000, just inside i32; and A equal to its zero point over K 70,000,
            // whose raw sum 255·127·70,000 wraps past 2³¹ while the centered result is 0.
            for (k, za, want) in [(33_000usize, 0, -65_025 * 33_000), (70_000, 255, 0)] {
                let (m, n) = (9, 33);
                let ad = vec![255u8; m * k];
                let bd = vec![if za == 0 { 0x80u8 } else { 127 }; k * n];
                let a = Int8Matrix {
                    data: &ad,
                    rs: k,
                    cs: 1,
                    signed: false,
                };
                let b = Int8Matrix {
                    data: &bd,
                    rs: n,
                    cs: 1,
                    signed: true,
                };
                let zb = if za == 0 { 127 } else { 0 };
                let mut got = vec![1i32; m * n];
                igemm(kernel, (m, n, k), a, &[za], b, &[zb], &mut got, (n, 1));
                assert!(
                    got.iter().all(|&v| v == want),
                    "{kernel:?} K {k}: {:?}",
                    &got[..3]
                );
            }
        }
    }

    /// The broken variant: the zero-point correction of B's column sums dropped (an easy slip when
    /// B's zero point is usually 0) gives wrong answers wherever A's zero point is not 0, and the
    /// comparison above would catch it: shown on one case.
    #[test]
    fn a_dropped_correction_is_caught() {
        let (m, n, k) = (5, 6, 9);
        let mut seed = 3u64;
        let ad: Vec<u8> = (0..m * k).map(|_| lcg(&mut seed) as u8).collect();
        let bd: Vec<u8> = (0..k * n).map(|_| lcg(&mut seed) as u8).collect();
        let a = Int8Matrix {
            data: &ad,
            rs: k,
            cs: 1,
            signed: false,
        };
        let b = Int8Matrix {
            data: &bd,
            rs: n,
            cs: 1,
            signed: true,
        };
        let want = naive((m, n, k), &a, &[37], &b, &[0]);
        // Without the term −za·ΣB: the raw sum with the B-side correction only.
        let wrong = naive((m, n, k), &a, &[0], &b, &[0]);
        assert_ne!(want, wrong);
        let mut got = vec![0i32; m * n];
        igemm(best(), (m, n, k), a, &[37], b, &[0], &mut got, (n, 1));
        assert_eq!(got, want);
        assert_ne!(got, wrong);
    }

    /// Rates of the shapes the quantized models run (`cargo test -p quorum-kernels --release
    /// igemm_rates -- --ignored --nocapture`): a transformer's feed-forward product and two
    /// convolutions' (output channels × pixels × patch).
    #[test]
    #[ignore]
    fn igemm_rates() {
        for (m, n, k) in [(128, 3072, 768), (64, 12544, 576), (256, 784, 2304)] {
            let ad = vec![3u8; m * k];
            let bd = vec![5u8; k * n];
            let a = Int8Matrix {
                data: &ad,
                rs: k,
                cs: 1,
                signed: false,
            };
            let b = Int8Matrix {
                data: &bd,
                rs: n,
                cs: 1,
                signed: true,
            };
            let mut c = vec![0i32; m * n];
            let mut best = f64::MAX;
            for _ in 0..10 {
                let t = std::time::Instant::now();
                igemm(best_kernel(), (m, n, k), a, &[1], b, &[2], &mut c, (n, 1));
                best = best.min(t.elapsed().as_secs_f64());
            }
            let gmacs = (m * n * k) as f64 / best / 1e9;
            println!("{m}×{n}×{k}: {:.3} ms, {gmacs:.0} GMAC/s", best * 1e3);
        }
    }

    fn best_kernel() -> IntKernel {
        best()
    }
}
