//! The tiled GEMM on the tensor cores (TF32), for f32 operands when the session allows TF32
//! (`Precision::Tf32`): the CUDA-core kernel's loaders, double-buffered shared tiles and epilogue
//! (`tile.rs`), with the products done by `mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32`.
//!
//! Every operand is rounded to TF32 (`cvt.rna.tf32.f32`: 10 explicit mantissa bits, to nearest,
//! ties away from zero) as it enters shared memory, once per element; the products of two TF32
//! values are exact in f32 and the accumulators are f32. That is the declaration the verification
//! bound takes (`Arithmetic::TF32`): the kernel is judged as a sum of rounded operands, and the same
//! numbers declared as exact f32 products are caught (the spread judge).
//!
//! f16 operands take the same kernel at any precision: an f16 value (10 mantissa bits, exponents
//! within TF32's) is a TF32 value, so the loaders widen it exactly, no rounding is applied and
//! none is declared; the products are exact and the sums f32, as for the CUDA-core kernels.
//!
//! The block's 8 warps tile its output 2 × 4: a warp owns `BM/2 × BN/4` outputs (64×32 in the
//! 128×128 tile, 32×16 in the 64×64 one) as m16n8 fragments, and each k-step of 8 loads one A
//! fragment per 16 rows and one B fragment per 8 columns from shared memory. Shared rows are
//! padded by 8 floats so that a fragment's 32 reads (rows `t` and `t + 4`, 8 columns) fall in 32
//! different banks.
use super::tile::{Params, TileCfg, ktile_loop, prologue, setup, store_out};
use crate::ops::elem::Elem;
use crate::ptx::{Cmp, Kernel, Reg, Space, Ty};

/// The kernel for a `Tf32Big` or `Tf32Small` configuration: f32 operands rounded to TF32, or f16
/// and bf16 operands widened (exactly: both are TF32 values).
pub fn build_tc(cfg: &TileCfg) -> Kernel {
    assert!(
        cfg.tensor_cores(),
        "tensor-core GEMM configuration expected"
    );
    let (bm, bn, bk, _) = cfg.dims();
    let pad = cfg.pad();
    let (ra, rb) = (bm + pad, bn + pad);
    let ksteps = bk / 8;
    let yes = if cfg.split { 4 } else { cfg.es() };
    let mut k = Kernel::new(&cfg.name());
    let s = setup(&mut k, cfg);
    let (p, t, mblk, nblk, sbase, asz) = (&s.p, s.t, s.mblk, s.nblk, s.sbase, s.asz);

    let w = Warps::new(&mut k, t, bm, bn);
    let (g, q, wm, wn) = (w.g, w.q, w.wm, w.wn);

    let st = prologue(&mut k, cfg, &s);

    // Per-thread read bases in bytes: A at (k = q, m = wm + g), B at (k = q, n = wn + g).
    let a_rd = {
        let o = k.fma(Ty::U32, q, ra as u32, wm);
        let o = k.add(Ty::U32, o, g);
        let o = k.shl(Ty::U32, o, 2u32);
        k.add(Ty::U32, sbase, o)
    };
    let b_rd = {
        let o = k.fma(Ty::U32, q, rb as u32, wn);
        let o = k.add(Ty::U32, o, g);
        let o = k.shl(Ty::U32, o, 2u32);
        let o = k.add(Ty::U32, o, asz as u32);
        k.add(Ty::U32, sbase, o)
    };

    ktile_loop(&mut k, cfg, &s, &st, |k, rd| {
        let ar = k.add(Ty::U32, a_rd, rd);
        let br = k.add(Ty::U32, b_rd, rd);
        for ks in 0..ksteps {
            let k0 = ks * 8;
            let a: Vec<[Reg; 4]> = (0..w.mts)
                .map(|mt| {
                    let base = (k0 * ra + mt * 16) * 4;
                    [0, 8 * 4, 4 * ra * 4, 4 * ra * 4 + 8 * 4]
                        .map(|o| k.ld(Space::Shared, Ty::U32, ar, (base + o) as i64))
                })
                .collect();
            let b: Vec<[Reg; 2]> = (0..w.nts)
                .map(|nt| {
                    let base = (k0 * rb + nt * 8) * 4;
                    [0, 4 * rb * 4].map(|o| k.ld(Space::Shared, Ty::U32, br, (base + o) as i64))
                })
                .collect();
            for (mt, a) in a.iter().enumerate() {
                for (nt, b) in b.iter().enumerate() {
                    mma_tf32(k, w.acc[mt][nt], a, b);
                }
            }
        }
    });

    w.epilogue(&mut k, cfg, p, mblk, nblk, yes);
    k
}

/// The warps of a 256-thread block on its BM × BN output tile: warp `w` of 8 owns rows `wm..` and
/// columns `wn..` (a 2 × 4 grid of `BM/2 × BN/4` pieces) as m16n8 fragments; within a fragment,
/// lane `4·g + q` holds rows `g` and `g + 8`, k columns `q` and `q + 4` (A), k rows `q` and
/// `q + 4` (B), and output columns `2q` and `2q + 1`. `acc[mt][nt]`: the f32 accumulators of
/// fragment (mt, nt), zeroed.
pub(super) struct Warps {
    pub g: Reg,
    pub q: Reg,
    pub wm: Reg,
    pub wn: Reg,
    pub mts: usize,
    pub nts: usize,
    pub acc: Vec<Vec<[Reg; 4]>>,
}

impl Warps {
    pub fn new(k: &mut Kernel, t: Reg, bm: usize, bn: usize) -> Warps {
        let warp = k.shr(Ty::U32, t, 5u32);
        let lane = k.and(Ty::U32, t, 31u32);
        let g = k.shr(Ty::U32, lane, 2u32);
        let q = k.and(Ty::U32, lane, 3u32);
        let wrow = k.shr(Ty::U32, warp, 2u32);
        let wm = k.mul(Ty::U32, wrow, (bm / 2) as u32);
        let wcol = k.and(Ty::U32, warp, 3u32);
        let wn = k.mul(Ty::U32, wcol, (bn / 4) as u32);
        let (mts, nts) = (bm / 2 / 16, bn / 4 / 8);
        let acc = (0..mts)
            .map(|_| {
                (0..nts)
                    .map(|_| [0; 4].map(|_| k.mov(Ty::F32, 0.0f32)))
                    .collect()
            })
            .collect();
        Warps {
            g,
            q,
            wm,
            wn,
            mts,
            nts,
            acc,
        }
    }

    /// Writes every accumulator: accumulator i of fragment (mt, nt) is output
    /// (g + 8·(i / 2), 2q + i % 2) of it (`yes`: the output's element size).
    pub fn epilogue(
        &self,
        k: &mut Kernel,
        cfg: &TileCfg,
        p: &Params,
        mblk: Reg,
        nblk: Reg,
        yes: usize,
    ) {
        let row0 = {
            let r = k.add(Ty::U32, mblk, self.wm);
            k.add(Ty::U32, r, self.g)
        };
        let col0 = {
            let c = k.add(Ty::U32, nblk, self.wn);
            k.fma(Ty::U32, self.q, 2u32, c)
        };
        let cols: Vec<(Reg, Reg)> = (0..self.nts * 2)
            .map(|j| {
                let c = k.add(Ty::U32, col0, ((j / 2) * 8 + j % 2) as u32);
                (c, k.setp(Cmp::Lt, Ty::U32, c, p.n))
            })
            .collect();
        for (mt, frags) in self.acc.iter().enumerate() {
            for half in 0..2 {
                let row = k.add(Ty::U32, row0, (mt * 16 + half * 8) as u32);
                let prow = k.setp(Cmp::Lt, Ty::U32, row, p.m);
                let yrow = k.mul(Ty::U32, row, p.ldy);
                for (nt, d) in frags.iter().enumerate() {
                    for e in 0..2 {
                        let (col, pcol) = cols[nt * 2 + e];
                        let pij = k.pred_and(prow, pcol);
                        let yi = k.add(Ty::U32, yrow, col);
                        let ya = k.addr(p.y, yi, yes);
                        store_out(k, cfg, p, pij, d[half * 2 + e], ya, row, col);
                    }
                }
            }
        }
    }
}

/// `d += a · b` on the tensor cores: one m16n8k8 product of TF32 fragments, f32 accumulators.
pub(super) fn mma_tf32(k: &mut Kernel, d: [Reg; 4], a: &[Reg; 4], b: &[Reg; 2]) {
    k.raw(format_args!(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 \
         {{{}, {}, {}, {}}}, {{{}, {}, {}, {}}}, {{{}, {}}}, {{{}, {}, {}, {}}}",
        d[0], d[1], d[2], d[3], a[0], a[1], a[2], a[3], b[0], b[1], d[0], d[1], d[2], d[3]
    ));
}

/// `d += a · b` on the tensor cores: one m16n8k16 product of 16-bit fragments, f16 or bf16 as
/// `elem` says (`a`: four registers of two halves, rows `g` and `g + 8` at k `2q, 2q + 1` and
/// `2q + 8, 2q + 9`; `b`: two, k `2q, 2q + 1` and `2q + 8, 2q + 9` at column `g`), f32
/// accumulators laid out as `mma_tf32`'s. Both halves share the fragment layout.
pub(crate) fn mma_half(k: &mut Kernel, elem: Elem, d: [Reg; 4], a: &[Reg; 4], b: &[Reg; 2]) {
    let t = match elem {
        Elem::Bf16 => "bf16",
        _ => "f16",
    };
    k.raw(format_args!(
        "mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32 \
         {{{}, {}, {}, {}}}, {{{}, {}, {}, {}}}, {{{}, {}}}, {{{}, {}, {}, {}}}",
        d[0], d[1], d[2], d[3], a[0], a[1], a[2], a[3], b[0], b[1], d[0], d[1], d[2], d[3]
    ));
}
