//! FusedAttention on the tensor cores, for f16 and bf16 with D and Dv up to [`TC_MAX_WIDTH`]
//! (FlashAttention's idea, written our way).
//!
//! A block takes 16 query rows of one batch element with [`split`] warps, which divide the keys
//! between them (chunk `c` to warp `c mod split`): one warp walking every key in order was
//! latency-bound (49 µs a ViT-B/16 layer on an H100, stop 58), a few warps per SM each waiting on
//! its loads in turn. Each warp reads Q's rows once, straight into `mma.m16n8k16` A fragments, and
//! keeps its own running maximum, sum and accumulators; at the end the warps' partial results meet
//! in shared memory, each rescaled by `exp(m_w − m)` to the rows' common maximum `m`, and the block
//! divides the summed accumulators by the summed sums. The keys go in chunks of 32: the chunk's scores
//! are four m16n8 products over D (K's fragments read from global memory, where the block's
//! neighbours have usually brought them into L1), scaled in f32 by every scale of the chain
//! folded into one factor, the mask added, the keys past T set to −∞. Each row's running maximum
//! and sum are kept by the four lanes that share it (`shfl` across the quad); the accumulators
//! are rescaled when the maximum grows. The chunk's probabilities, rounded to the model's type as
//! the chain rounds them, are already the A fragments of the product with V: the accumulator
//! layout of two adjacent m16n8 tiles is the m16k16 A layout. V's B fragments are pairs of values
//! one row apart, packed from two loads. Sums stay in f32 accumulators; the output is divided by
//! the row's sum and rounded once. Combining the warps is one more rescale of each row's sums,
//! within the verification bound's allowance for an online softmax (one rescale per key). The kernel declares the tensor cores' arithmetic
//! (`Arithmetic::TENSOR_CORES`): exact products of the model's values, sums truncated in f32.
use super::super::elem::Elem;
use super::super::offsets;
use super::super::reduce::rows::load;
use super::Plan;
use crate::ptx::{Cmp, Kernel, Reg, Space, Ty};

/// The widest D and Dv this kernel takes (its accumulators and Q's fragments live in registers).
pub const TC_MAX_WIDTH: usize = 128;
/// Query rows a warp takes (the m of the `mma`).
pub const TC_ROWS: usize = 16;
/// Keys per chunk.
const CHUNK: usize = 32;
/// The most warps a block divides the keys between.
const MAX_SPLIT: usize = 8;
/// Shared memory the warps' partial results may take (under the 48 KiB of a static array).
const COMBINE_BYTES: usize = 40 * 1024;

/// The pitch, in f32, of a row of a warp's accumulators in shared memory: Dv rounded up to the
/// eight columns of an m16n8 tile, plus 4 so that the eight rows a store instruction writes fall
/// in different banks.
fn pitch(p: &Plan) -> usize {
    p.dims.dv.div_ceil(8) * 8 + 4
}

/// Bytes of shared memory one warp's partial result takes: its 16 rows' accumulators, maxima and
/// sums.
fn warp_bytes(p: &Plan) -> usize {
    4 * TC_ROWS * (pitch(p) + 2)
}

/// The most warps the keys are divided between: [`MAX_SPLIT`], or less where
/// `QUORUM_CUDA_ATTENTION_SPLIT` says (read once; `1` is stop 58's kernel, one warp walking every
/// key, kept to measure the split against in one run).
fn max_split() -> usize {
    static CAP: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CAP.get_or_init(|| {
        std::env::var("QUORUM_CUDA_ATTENTION_SPLIT")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .map_or(MAX_SPLIT, |n| n.clamp(1, MAX_SPLIT))
    })
}

/// How many warps a block of `p` divides the keys between: one per chunk of keys up to
/// [`max_split`], fewer where their partial results would not fit [`COMBINE_BYTES`].
pub fn split(p: &Plan) -> usize {
    let chunks = p.dims.t.div_ceil(CHUNK).max(1);
    chunks
        .min(max_split())
        .min(COMBINE_BYTES / warp_bytes(p))
        .max(1)
}

/// Threads a block of `p` has.
pub fn threads(p: &Plan) -> u32 {
    (32 * split(p)) as u32
}

/// Whether the tensor-core kernel takes `p`.
pub fn takes(p: &Plan) -> bool {
    p.e.is_half() && p.dims.d <= TC_MAX_WIDTH && p.dims.dv <= TC_MAX_WIDTH
}

/// Loads the 16-bit element at `index` (u32) of `base` into a b16 register where `p` holds, 0
/// elsewhere.
fn load_raw(k: &mut Kernel, base: Reg, index: Reg, p: Option<Reg>) -> Reg {
    let h = k.mov(Ty::U16, 0u32);
    let a = k.addr(base, index, 2);
    match p {
        Some(p) => k.raw(format_args!("@{p} ld.global.nc.u16 {h}, [{a}+0]")),
        None => k.raw(format_args!("ld.global.nc.u16 {h}, [{a}+0]")),
    }
    h
}

/// Two b16 registers as one b32 (`lo` in the low half).
fn pack(k: &mut Kernel, lo: Reg, hi: Reg) -> Reg {
    let r = k.reg(Ty::U32);
    k.raw(format_args!("mov.b32 {r}, {{{lo}, {hi}}}"));
    r
}

/// Two f32 registers rounded to the model's half type and packed (`lo` in the low half).
fn pack_f32(k: &mut Kernel, e: Elem, lo: Reg, hi: Reg) -> Reg {
    let r = k.reg(Ty::U32);
    let t = if e == Elem::Bf16 { "bf16x2" } else { "f16x2" };
    k.raw(format_args!("cvt.rn.{t}.f32 {r}, {hi}, {lo}"));
    r
}

/// The pair of elements `(row, col)` and `(row, col + 1)` of a row-major `[rows, cols]` matrix at
/// element offset `base_off` of `base`, as one b32, each 0 outside `rows × cols`.
fn pair(
    k: &mut Kernel,
    base: Reg,
    base_off: Reg,
    (row, col): (Reg, Reg),
    (rows, cols): (usize, usize),
    aligned: bool,
) -> Reg {
    let row_in = k.setp(Cmp::Lt, Ty::U32, row, rows as u32);
    let at = k.fma(Ty::U32, row, cols as u32, col);
    let at = k.add(Ty::U32, at, base_off);
    let c0 = k.setp(Cmp::Lt, Ty::U32, col, cols as u32);
    if cols.is_multiple_of(2) && aligned {
        // Rows of an even length from a 4-byte aligned base: every pair (col even) is whole and
        // aligned (the batch offsets are multiples of `rows · cols`), one 32-bit load.
        let p = k.pred_and(row_in, c0);
        let r = k.mov(Ty::U32, 0u32);
        let a = k.addr(base, at, 2);
        k.raw(format_args!("@{p} ld.global.nc.b32 {r}, [{a}+0]"));
        return r;
    }
    let p0 = k.pred_and(row_in, c0);
    let col1 = k.add(Ty::U32, col, 1u32);
    let c1 = k.setp(Cmp::Lt, Ty::U32, col1, cols as u32);
    let p1 = k.pred_and(row_in, c1);
    let lo = load_raw(k, base, at, Some(p0));
    let at1 = k.add(Ty::U32, at, 1u32);
    let hi = load_raw(k, base, at1, Some(p1));
    pack(k, lo, hi)
}

/// The elements `(row, col)` and `(row + 1, col)` of a row-major `[rows, cols]` matrix, packed.
fn pair_down(
    k: &mut Kernel,
    base: Reg,
    base_off: Reg,
    (row, col): (Reg, Reg),
    (rows, cols): (usize, usize),
) -> Reg {
    let col_in = k.setp(Cmp::Lt, Ty::U32, col, cols as u32);
    let at = k.fma(Ty::U32, row, cols as u32, col);
    let at = k.add(Ty::U32, at, base_off);
    let r0 = k.setp(Cmp::Lt, Ty::U32, row, rows as u32);
    let p0 = k.pred_and(col_in, r0);
    let row1 = k.add(Ty::U32, row, 1u32);
    let r1 = k.setp(Cmp::Lt, Ty::U32, row1, rows as u32);
    let p1 = k.pred_and(col_in, r1);
    let lo = load_raw(k, base, at, Some(p0));
    let at1 = k.add(Ty::U32, at, cols as u32);
    let hi = load_raw(k, base, at1, Some(p1));
    pack(k, lo, hi)
}

fn max_quad(k: &mut Kernel, v: Reg) -> Reg {
    let mut m = v;
    for sh in [1u32, 2] {
        let o = k.shfl_bfly(m, sh);
        m = super::super::reduce::rows::max_nan(k, m, o);
    }
    m
}

/// The tensor-core kernel for `p` (parameters as [`super::kernel`]'s).
pub fn kernel(p: &Plan) -> Kernel {
    let (s, t, d, dv) = (p.dims.s, p.dims.t, p.dims.d, p.dims.dv);
    let e = p.e;
    let ksteps = d.div_ceil(16);
    let ntiles = dv.div_ceil(8);
    let nsplit = split(p);
    let pitch = pitch(p);
    let mut k = Kernel::new("fused_attention_tc");
    let q = k.param_ptr("q");
    let kk = k.param_ptr("k");
    let v = k.param_ptr("v");
    let mask = k.param_ptr("mask");
    let y = k.param_ptr("y");
    let smem = k.shared_array("attn_part", nsplit * warp_bytes(p));
    let tid = k.special("tid.x");
    let lane = k.and(Ty::U32, tid, 31u32);
    let warp = k.shr(Ty::U32, tid, 5u32);
    let g = k.shr(Ty::U32, lane, 2u32);
    let qd = k.and(Ty::U32, lane, 3u32);
    let q2 = k.shl(Ty::U32, qd, 1u32);
    let row0 = k.special("ctaid.x");
    let row0 = k.mul(Ty::U32, row0, TC_ROWS as u32);
    let b = k.special("ctaid.y");
    let offs = offsets(&mut k, b, &p.dims.batch, &p.batch_strides);
    let (qo, ko, vo) = (offs[0], offs[1], offs[2]);
    let mo = offs.get(3).copied();
    // This lane's two rows: g and g + 8.
    let rg = k.add(Ty::U32, row0, g);
    let rg8 = k.add(Ty::U32, rg, 8u32);

    // Q's A fragments, one set of four per 16 columns of D.
    let qa: Vec<[Reg; 4]> = (0..ksteps)
        .map(|ks| {
            let c0 = k.add(Ty::U32, q2, (16 * ks) as u32);
            let c8 = k.add(Ty::U32, c0, 8u32);
            [
                pair(&mut k, q, qo, (rg, c0), (s, d), p.aligned),
                pair(&mut k, q, qo, (rg8, c0), (s, d), p.aligned),
                pair(&mut k, q, qo, (rg, c8), (s, d), p.aligned),
                pair(&mut k, q, qo, (rg8, c8), (s, d), p.aligned),
            ]
        })
        .collect();
    let neg_inf = f32::NEG_INFINITY;
    // Running maximum and (this lane's part of the) sum for rows g and g + 8.
    let m = [k.mov(Ty::F32, neg_inf), k.mov(Ty::F32, neg_inf)];
    let l = [k.mov(Ty::F32, 0.0f32), k.mov(Ty::F32, 0.0f32)];
    let o: Vec<[Reg; 4]> = (0..ntiles)
        .map(|_| std::array::from_fn(|_| k.mov(Ty::F32, 0.0f32)))
        .collect();
    let chunks = t.div_ceil(CHUNK);
    k.for_range(Ty::U32, warp, chunks as u32, nsplit as u32, |k, c| {
        let key0 = k.mul(Ty::U32, c, CHUNK as u32);
        // The chunk's scores: tile j holds keys key0 + 8j + 2q, +1 for rows g and g + 8.
        let sc: Vec<[Reg; 4]> = (0..CHUNK / 8)
            .map(|j| {
                let acc: [Reg; 4] = std::array::from_fn(|_| k.mov(Ty::F32, 0.0f32));
                let key = k.add(Ty::U32, key0, (8 * j) as u32);
                let key = k.add(Ty::U32, key, g);
                for (ks, a) in qa.iter().enumerate() {
                    let c0 = k.add(Ty::U32, q2, (16 * ks) as u32);
                    let c8 = k.add(Ty::U32, c0, 8u32);
                    let bf = if p.k_rows {
                        // K [T, D]: the pair (d, d + 1) of key `key` is contiguous.
                        [
                            pair(k, kk, ko, (key, c0), (t, d), p.aligned),
                            pair(k, kk, ko, (key, c8), (t, d), p.aligned),
                        ]
                    } else {
                        // Kᵀ [D, T]: the pair is one row of Kᵀ apart.
                        [
                            pair_down(k, kk, ko, (c0, key), (d, t)),
                            pair_down(k, kk, ko, (c8, key), (d, t)),
                        ]
                    };
                    crate::ops::matmul::tc::mma_half(k, e, acc, a, &bf);
                }
                acc
            })
            .collect();
        // Scale, mask, keys past T; then each row's chunk maximum.
        let mut mx = [neg_inf, neg_inf].map(|x| k.mov(Ty::F32, x));
        for (j, acc) in sc.iter().enumerate() {
            for (i, &x) in acc.iter().enumerate() {
                let row = if i < 2 { rg } else { rg8 };
                let key = k.add(Ty::U32, key0, (8 * j + (i % 2)) as u32);
                let key = k.add(Ty::U32, key, q2);
                if let Some(f) = p.factor {
                    let y2 = k.mul(Ty::F32, x, f);
                    k.assign(x, y2);
                }
                let key_in = k.setp(Cmp::Lt, Ty::U32, key, t as u32);
                if let (Some(mo), Some((rs, cs))) = (mo, p.mask_rc) {
                    let row_in = k.setp(Cmp::Lt, Ty::U32, row, s as u32);
                    let both = k.pred_and(row_in, key_in);
                    k.when(both, |k| {
                        let at = k.mul(Ty::U32, row, rs as u32);
                        let at = k.fma(Ty::U32, key, cs as u32, at);
                        let at = k.add(Ty::U32, at, mo);
                        let mv = load(k, e, mask, at);
                        let sum = k.add(Ty::F32, x, mv);
                        k.assign(x, sum);
                    });
                }
                let xs = k.selp(Ty::F32, x, neg_inf, key_in);
                k.assign(x, xs);
                let h = i / 2;
                let nm = super::super::reduce::rows::max_nan(k, mx[h], x);
                mx[h] = nm;
            }
        }
        for h in 0..2 {
            let cm = max_quad(k, mx[h]);
            let m_new = super::super::reduce::rows::max_nan(k, m[h], cm);
            let dead = k.setp(Cmp::Eq, Ty::F32, m_new, neg_inf);
            let arg = k.sub(Ty::F32, m[h], m_new);
            let arg = k.mul(Ty::F32, arg, std::f32::consts::LOG2_E);
            let corr = k.unary("ex2.approx.ftz", Ty::F32, arg);
            let corr = k.selp(Ty::F32, 1.0f32, corr, dead);
            let mut part = k.mul(Ty::F32, l[h], corr);
            for acc in &sc {
                for i in [2 * h, 2 * h + 1] {
                    let arg = k.sub(Ty::F32, acc[i], m_new);
                    let arg = k.mul(Ty::F32, arg, std::f32::consts::LOG2_E);
                    let pj = k.unary("ex2.approx.ftz", Ty::F32, arg);
                    let pj = k.selp(Ty::F32, 0.0f32, pj, dead);
                    k.assign(acc[i], pj);
                    part = k.add(Ty::F32, part, pj);
                }
            }
            k.assign(l[h], part);
            k.assign(m[h], m_new);
            for on in &o {
                for i in [2 * h, 2 * h + 1] {
                    let r = k.mul(Ty::F32, on[i], corr);
                    k.assign(on[i], r);
                }
            }
        }
        // O += P·V, 16 keys at a time: tiles 2j and 2j + 1 are the A fragment.
        for j in 0..CHUNK / 16 {
            let (t0, t1) = (&sc[2 * j], &sc[2 * j + 1]);
            let pa = [
                pack_f32(k, e, t0[0], t0[1]),
                pack_f32(k, e, t0[2], t0[3]),
                pack_f32(k, e, t1[0], t1[1]),
                pack_f32(k, e, t1[2], t1[3]),
            ];
            let kr = k.add(Ty::U32, key0, (16 * j) as u32);
            let kr = k.add(Ty::U32, kr, q2);
            let kr8 = k.add(Ty::U32, kr, 8u32);
            for (n, on) in o.iter().enumerate() {
                let col = k.add(Ty::U32, g, (8 * n) as u32);
                let bf = [
                    pair_down(k, v, vo, (kr, col), (t, dv)),
                    pair_down(k, v, vo, (kr8, col), (t, dv)),
                ];
                crate::ops::matmul::tc::mma_half(k, e, *on, &pa, &bf);
            }
        }
    });
    // This warp's partial result into shared memory: per row its maximum and sum (the quad's
    // first lane), and its accumulators.
    let base = k.shared_addr(&smem);
    let ms = base;
    let ls = k.add(Ty::U32, base, (4 * TC_ROWS * nsplit) as u32);
    let os = k.add(Ty::U32, ls, (4 * TC_ROWS * nsplit) as u32);
    let wrow = k.mul(Ty::U32, warp, TC_ROWS as u32);
    let first = k.setp(Cmp::Eq, Ty::U32, qd, 0u32);
    for (h, &lh) in l.iter().enumerate() {
        let mut sum = lh;
        for sh in [1u32, 2] {
            let other = k.shfl_bfly(sum, sh);
            sum = k.add(Ty::F32, sum, other);
        }
        let r = k.add(Ty::U32, wrow, g);
        let r = k.add(Ty::U32, r, (8 * h) as u32);
        let r4 = k.shl(Ty::U32, r, 2u32);
        let mh = m[h];
        k.when(first, |k| {
            let a = k.add(Ty::U32, ms, r4);
            k.st(Space::Shared, a, 0, mh);
            let a = k.add(Ty::U32, ls, r4);
            k.st(Space::Shared, a, 0, sum);
        });
        let at = k.mul(Ty::U32, r, (4 * pitch) as u32);
        let at = k.add(Ty::U32, os, at);
        let q8 = k.shl(Ty::U32, q2, 2u32);
        let at = k.add(Ty::U32, at, q8);
        for (n, on) in o.iter().enumerate() {
            for i in [2 * h, 2 * h + 1] {
                k.st(Space::Shared, at, (4 * (8 * n + i % 2)) as i64, on[i]);
            }
        }
    }
    k.bar_sync();
    // The block's outputs: each row's common maximum, the warps' parts rescaled to it and summed,
    // divided by the summed sums, rounded once.
    k.for_range(
        Ty::U32,
        tid,
        (TC_ROWS * dv) as u32,
        (32 * nsplit) as u32,
        |k, idx| {
            let r = k.div(Ty::U32, idx, dv as u32);
            let col = k.rem(Ty::U32, idx, dv as u32);
            let r4 = k.shl(Ty::U32, r, 2u32);
            let mw: Vec<Reg> = (0..nsplit)
                .map(|w| {
                    let a = k.add(Ty::U32, ms, r4);
                    k.ld(Space::Shared, Ty::F32, a, (4 * TC_ROWS * w) as i64)
                })
                .collect();
            let mut top = mw[0];
            for &x in &mw[1..] {
                top = super::super::reduce::rows::max_nan(k, top, x);
            }
            let sum = k.mov(Ty::F32, 0.0f32);
            let acc = k.mov(Ty::F32, 0.0f32);
            let oa = k.mul(Ty::U32, r, pitch as u32);
            let oa = k.add(Ty::U32, oa, col);
            let oa = k.shl(Ty::U32, oa, 2u32);
            let oa = k.add(Ty::U32, os, oa);
            let la = k.add(Ty::U32, ls, r4);
            for (w, &x) in mw.iter().enumerate() {
                let dead = k.setp(Cmp::Eq, Ty::F32, x, neg_inf);
                let arg = k.sub(Ty::F32, x, top);
                let arg = k.mul(Ty::F32, arg, std::f32::consts::LOG2_E);
                let f = k.unary("ex2.approx.ftz", Ty::F32, arg);
                let f = k.selp(Ty::F32, 0.0f32, f, dead);
                let lw = k.ld(Space::Shared, Ty::F32, la, (4 * TC_ROWS * w) as i64);
                let ow = k.ld(Space::Shared, Ty::F32, oa, (4 * TC_ROWS * pitch * w) as i64);
                let s2 = k.fma(Ty::F32, lw, f, sum);
                k.assign(sum, s2);
                let a2 = k.fma(Ty::F32, ow, f, acc);
                k.assign(acc, a2);
            }
            let row = k.add(Ty::U32, row0, r);
            let row_in = k.setp(Cmp::Lt, Ty::U32, row, s as u32);
            k.when(row_in, |k| {
                let val = k.div(Ty::F32, acc, sum);
                let at = k.fma(Ty::U32, row, dv as u32, col);
                let at = k.fma(Ty::U32, b, (s * dv) as u32, at);
                let a = k.addr(y, at, e.size());
                let h16 = e.narrow(k, val);
                k.st(Space::Global, a, 0, h16);
            });
        },
    );
    k
}
