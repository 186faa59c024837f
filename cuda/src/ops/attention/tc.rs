//! FusedAttention on the tensor cores, for f16 and bf16 with D and Dv up to [`TC_MAX_WIDTH`]
//! (FlashAttention's idea, written our way).
//!
//! One warp takes 16 query rows of one batch element and needs no shared memory: Q's rows are read
//! once, straight into `mma.m16n8k16` A fragments. The keys go in chunks of 32: the chunk's scores
//! are four m16n8 products over D (K's fragments read from global memory, where the block's
//! neighbours have usually brought them into L1), scaled in f32 by every scale of the chain
//! folded into one factor, the mask added, the keys past T set to −∞. Each row's running maximum
//! and sum are kept by the four lanes that share it (`shfl` across the quad); the accumulators
//! are rescaled when the maximum grows. The chunk's probabilities, rounded to the model's type as
//! the chain rounds them, are already the A fragments of the product with V: the accumulator
//! layout of two adjacent m16n8 tiles is the m16k16 A layout. V's B fragments are pairs of values
//! one row apart, packed from two loads. Sums stay in f32 accumulators; the output is divided by
//! the row's sum and rounded once. The kernel declares the tensor cores' arithmetic
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
    let mut k = Kernel::new("fused_attention_tc");
    let q = k.param_ptr("q");
    let kk = k.param_ptr("k");
    let v = k.param_ptr("v");
    let mask = k.param_ptr("mask");
    let y = k.param_ptr("y");
    let lane = k.special("tid.x");
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
    k.for_range(Ty::U32, 0u32, chunks as u32, 1u32, |k, c| {
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
    // Each row's sum across its quad, then the outputs.
    for (h, &lh) in l.iter().enumerate() {
        let mut sum = lh;
        for sh in [1u32, 2] {
            let other = k.shfl_bfly(sum, sh);
            sum = k.add(Ty::F32, sum, other);
        }
        let row = if h == 0 { rg } else { rg8 };
        let row_in = k.setp(Cmp::Lt, Ty::U32, row, s as u32);
        for (n, on) in o.iter().enumerate() {
            for i in [2 * h, 2 * h + 1] {
                let col = k.add(Ty::U32, q2, (8 * n + i % 2) as u32);
                let col_in = k.setp(Cmp::Lt, Ty::U32, col, dv as u32);
                let both = k.pred_and(row_in, col_in);
                let val = on[i];
                k.when(both, |k| {
                    let r = k.div(Ty::F32, val, sum);
                    let at = k.fma(Ty::U32, row, dv as u32, col);
                    let at = k.fma(Ty::U32, b, (s * dv) as u32, at);
                    let a = k.addr(y, at, e.size());
                    let h16 = e.narrow(k, r);
                    k.st(Space::Global, a, 0, h16);
                });
            }
        }
    }
    k
}
