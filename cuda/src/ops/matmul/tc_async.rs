//! The TF32 tensor-core GEMM with its operands copied global → shared by `cp.async` through a
//! ring of four stages, for f32 operands whose rows are 16-byte aligned (the common case: the
//! layout checks of the CUDA-core kernels' 16-byte loads, `vec_a` and B's `vec`).
//!
//! Why: the register-staged kernel (`tc.rs`) waits for each k-tile's global loads before it can
//! store them and pass the barrier; on the H100 (`ncu`, 1024×768×768 split in four) warps spent 56%
//! of their cycles on that wait, and the tensor cores finished each k-tile long before the next
//! arrived. Here tile `t + 3` is in flight while tile `t` is multiplied: each thread copies one
//! 16-byte chunk of A and one of B per k-tile (`cp.async.cg`, zero-filled past the matrix's edge
//! by its source size), commits it as a group, and waits only for the group three tiles back.
//!
//! The operands land in shared memory as they lie in global memory: an operand contiguous along k
//! keeps rows of 8 k values (padded to 12 floats: a fragment's 32 reads of rows `g` and k columns
//! `q` fall in 32 banks), one contiguous along m|n keeps rows of 128 values (padded to 136). Each
//! fragment value is rounded to TF32 (`cvt.rna.tf32.f32`) as it is loaded from shared memory: the
//! declaration is the same as `tc.rs`'s (`Operands::TF32`).
use super::tc::{Warps, mma_tf32};
use super::tile::{BSrc, Params, TileCfg, Variant, k_tiles, params};
use crate::ptx::{Cmp, Kernel, Reg, Space, Ty};

/// Stages of the shared ring: three k-tiles in flight behind the one being multiplied.
pub const STAGES: usize = 4;

/// One operand's side of the copies: where this thread's chunk comes from and goes to.
struct Copier {
    /// The chunk's global address for the next k-tile to issue.
    ptr: Reg,
    /// Bytes to add to `ptr` per k-tile.
    step: Step,
    /// The chunk's byte offset within the operand's part of a stage.
    soff: Reg,
    /// How many of the chunk's 16 bytes lie in the matrix, and for which k (see `bytes`).
    valid: Valid,
}

enum Step {
    Imm(u32),
    Reg(Reg),
}

enum Valid {
    /// Contiguous along k: the chunk's row is in range (`row_ok`), and its first k is `k4` within
    /// the tile: bytes = clamp(kend − (k0 + k4), 0, 4) · 4.
    AlongK { row_ok: Reg, k4: Reg },
    /// Contiguous along m|n: the chunk's k row is `krow` within the tile, and `cols` bytes of it
    /// lie within the matrix (fixed for the whole loop).
    AlongMn { krow: Reg, cols: Reg },
}

/// This thread's chunk `pass` of an operand stored contiguous along k (128 rows of `BK` values:
/// 4 chunks of 4 per row, rows `t / 4` and `t / 4 + 64`).
#[allow(clippy::too_many_arguments)]
fn along_k(
    k: &mut Kernel,
    t: Reg,
    base: Reg,
    ld: Reg,
    blk: Reg,
    lim: Reg,
    kbeg: Reg,
    pass: usize,
) -> Copier {
    let row = k.shr(Ty::U32, t, 2u32);
    let row = k.add(Ty::U32, row, (pass * 64) as u32);
    let quarter = k.and(Ty::U32, t, 3u32);
    let k4 = k.shl(Ty::U32, quarter, 2u32);
    let r = k.add(Ty::U32, blk, row);
    let row_ok = k.setp(Cmp::Lt, Ty::U32, r, lim);
    let kk = k.add(Ty::U32, kbeg, k4);
    let idx = k.fma(Ty::U32, r, ld, kk);
    let ptr = k.addr(base, idx, 4);
    let so = k.mul(Ty::U32, row, (ROW_K * 4) as u32);
    let soff = k.fma(Ty::U32, k4, 4u32, so);
    Copier {
        ptr,
        step: Step::Imm((BK * 4) as u32),
        soff,
        valid: Valid::AlongK { row_ok, k4 },
    }
}

/// This thread's chunk `pass` of an operand stored contiguous along m|n (`BK` rows of 128
/// values, 32 chunks each: rows `t / 32` and `t / 32 + 8`).
#[allow(clippy::too_many_arguments)]
fn along_mn(
    k: &mut Kernel,
    t: Reg,
    base: Reg,
    ld: Reg,
    blk: Reg,
    lim: Reg,
    kbeg: Reg,
    pass: usize,
) -> Copier {
    let krow = k.shr(Ty::U32, t, 5u32);
    let krow = k.add(Ty::U32, krow, (pass * 8) as u32);
    let lane = k.and(Ty::U32, t, 31u32);
    let c4 = k.shl(Ty::U32, lane, 2u32);
    let col = k.add(Ty::U32, blk, c4);
    // Columns of the chunk inside the matrix: clamp(lim − col, 0, 4), as bytes.
    let left = k.sub(Ty::S32, lim, col);
    let left = k.max(Ty::S32, left, 0i32);
    let left = k.min(Ty::S32, left, 4i32);
    let cols = k.shl(Ty::U32, left, 2u32);
    let kk = k.add(Ty::U32, kbeg, krow);
    let idx = k.fma(Ty::U32, kk, ld, col);
    let ptr = k.addr(base, idx, 4);
    let step = k.mul_wide(false, ld, (BK * 4) as u32);
    let so = k.mul(Ty::U32, krow, (ROW_MN * 4) as u32);
    let soff = k.fma(Ty::U32, c4, 4u32, so);
    Copier {
        ptr,
        step: Step::Reg(step),
        soff,
        valid: Valid::AlongMn { krow, cols },
    }
}

/// The k-depth of a tile (two k-steps of the `mma` per barrier), the copies each thread issues
/// per operand and tile, and the padded row lengths of the two shared layouts (floats: 20 keeps a
/// fragment's reads of rows `g`, columns `q` in 32 banks and rows 16-byte aligned).
const BK: usize = 16;
const PASSES: usize = 2;
const ROW_K: usize = BK + 4;
const ROW_MN: usize = 128 + 8;

/// Issues the copy of `c`'s chunk of the k-tile starting at `k0` into the stage part at `dst`,
/// and moves `c` on to the next k-tile. `safe`: an address inside the operand, copied from (0
/// bytes) where the chunk lies wholly outside the matrix.
fn issue(k: &mut Kernel, c: &Copier, k0: Reg, kend: Reg, dst: Reg, safe: Reg) {
    let bytes = match &c.valid {
        Valid::AlongK { row_ok, k4 } => {
            let kk = k.add(Ty::U32, k0, *k4);
            let left = k.sub(Ty::S32, kend, kk);
            let left = k.max(Ty::S32, left, 0i32);
            let left = k.min(Ty::S32, left, 4i32);
            let b = k.shl(Ty::U32, left, 2u32);
            k.selp(Ty::U32, b, 0u32, *row_ok)
        }
        Valid::AlongMn { krow, cols } => {
            let kk = k.add(Ty::U32, k0, *krow);
            let in_k = k.setp(Cmp::Lt, Ty::U32, kk, kend);
            k.selp(Ty::U32, *cols, 0u32, in_k)
        }
    };
    let any = k.setp(Cmp::Ne, Ty::U32, bytes, 0u32);
    let src = k.selp(Ty::U64, c.ptr, safe, any);
    let s = k.add(Ty::U32, dst, c.soff);
    k.raw(format_args!(
        "cp.async.cg.shared.global [{s}], [{src}], 16, {bytes}"
    ));
    let p = c.ptr;
    match c.step {
        Step::Imm(b) => k.raw(format_args!("add.u64 {p}, {p}, {b}")),
        Step::Reg(r) => k.raw(format_args!("add.u64 {p}, {p}, {r}")),
    }
}

/// The shared ring: its base address, the byte offset of the stage the next copies write, the
/// bytes of A's part of a stage, of a stage and of the ring.
struct Ring {
    base: Reg,
    write: Reg,
    asz: usize,
    stage: usize,
    bytes: usize,
}

/// Issues both operands' copies of the k-tile starting at `k0` into the ring's write stage as one
/// group, and moves `k0` and the write stage on.
fn issue_tile(k: &mut Kernel, ops: [&[Copier]; 2], safe: [Reg; 2], k0: Reg, kend: Reg, r: &Ring) {
    let dst = k.add(Ty::U32, r.base, r.write);
    for c in ops[0] {
        issue(k, c, k0, kend, dst, safe[0]);
    }
    let dstb = k.add(Ty::U32, dst, r.asz as u32);
    for c in ops[1] {
        issue(k, c, k0, kend, dstb, safe[1]);
    }
    k.raw("cp.async.commit_group");
    k.raw(format_args!("add.u32 {k0}, {k0}, {BK}"));
    ring_add(k, r.write, r.stage, r.bytes);
}

/// `x = x + by`, wrapped to `[0, modulo)` (a stage offset going round the ring).
fn ring_add(k: &mut Kernel, x: Reg, by: usize, modulo: usize) {
    k.raw(format_args!("add.u32 {x}, {x}, {by}"));
    let over = k.setp(Cmp::Ge, Ty::U32, x, modulo as u32);
    k.raw(format_args!("@{over} sub.u32 {x}, {x}, {modulo}"));
}

/// Loads one shared f32 and rounds it to TF32 (a `.b32` operand of `mma`).
fn ld_tf32(k: &mut Kernel, addr: Reg, off: usize) -> Reg {
    let f = k.ld(Space::Shared, Ty::F32, addr, off as i64);
    let r = k.reg(Ty::U32);
    k.raw(format_args!("cvt.rna.tf32.f32 {r}, {f}"));
    r
}

/// The dynamic shared memory a launch of `cfg` needs: the ring of stages.
pub fn shared_bytes(cfg: &TileCfg) -> usize {
    let part = |along_k: bool| {
        if along_k {
            128 * ROW_K * 4
        } else {
            BK * ROW_MN * 4
        }
    };
    let b_along_k = matches!(cfg.b, BSrc::Strided { trans: true, .. });
    STAGES * (part(!cfg.trans_a) + part(b_along_k))
}

/// Whether `cfg` can take this kernel: f32, rows of both operands 16-byte aligned, B strided.
pub fn fits(cfg: &TileCfg) -> bool {
    !cfg.f16 && cfg.vec_a && matches!(cfg.b, BSrc::Strided { vec: true, .. })
}

/// The kernel for a `Tf32Async` configuration.
pub fn build_tc_async(cfg: &TileCfg) -> Kernel {
    assert!(cfg.variant == Variant::Tf32Async && fits(cfg), "{cfg:?}");
    let BSrc::Strided { trans: trans_b, .. } = cfg.b else {
        unreachable!("fits() takes strided B only")
    };
    let (bm, bn) = (128usize, 128usize);
    let a_along_k = !cfg.trans_a;
    let b_along_k = trans_b;
    let part = |along_k: bool, extent: usize| {
        if along_k {
            extent * ROW_K * 4
        } else {
            BK * ROW_MN * 4
        }
    };
    let asz = part(a_along_k, bm);
    let stage = asz + part(b_along_k, bn);
    let ring = STAGES * stage;
    assert_eq!(ring, shared_bytes(cfg), "{cfg:?}");
    let yes = if cfg.split { 4 } else { cfg.es() };

    let mut k = Kernel::new(&cfg.name());
    let p: Params = params(&mut k, cfg);
    let t = k.special("tid.x");
    let by = k.special("ctaid.y");
    let mblk = k.mul(Ty::U32, by, bm as u32);
    let bx = k.special("ctaid.x");
    let nblk = k.mul(Ty::U32, bx, bn as u32);
    // The ring is larger than a static array may be: the launch sizes it (`shared_bytes`).
    let smem = k.extern_shared();
    let sbase = k.shared_addr(&smem);

    let ca: Vec<Copier> = (0..PASSES)
        .map(|pass| {
            if a_along_k {
                along_k(&mut k, t, p.a, p.lda, mblk, p.m, p.kbeg, pass)
            } else {
                along_mn(&mut k, t, p.a, p.lda, mblk, p.m, p.kbeg, pass)
            }
        })
        .collect();
    let cb: Vec<Copier> = (0..PASSES)
        .map(|pass| {
            if b_along_k {
                along_k(&mut k, t, p.b, p.ldb, nblk, p.n, p.kbeg, pass)
            } else {
                along_mn(&mut k, t, p.b, p.ldb, nblk, p.n, p.kbeg, pass)
            }
        })
        .collect();

    // Warps tile the block 2 × 4 (64×32 outputs each), as `tc.rs`'s do.
    let w = Warps::new(&mut k, t, bm, bn);
    let (g, q, wm, wn, mts, nts) = (w.g, w.q, w.wm, w.wn, w.mts, w.nts);

    // Fragment read bases (bytes within a stage) and each fragment register's offset from them.
    // A (m, k): along k at (m·12 + k), along m at (k·136 + m); B (k, n): along k at (n·12 + k),
    // along n at (k·136 + n).
    let a_rd = if a_along_k {
        let r = k.add(Ty::U32, wm, g);
        let o = k.fma(Ty::U32, r, ROW_K as u32, q);
        k.shl(Ty::U32, o, 2u32)
    } else {
        let o = k.fma(Ty::U32, q, ROW_MN as u32, wm);
        let o = k.add(Ty::U32, o, g);
        k.shl(Ty::U32, o, 2u32)
    };
    let b_rd = {
        let o = if b_along_k {
            let r = k.add(Ty::U32, wn, g);
            k.fma(Ty::U32, r, ROW_K as u32, q)
        } else {
            let o = k.fma(Ty::U32, q, ROW_MN as u32, wn);
            k.add(Ty::U32, o, g)
        };
        let o = k.shl(Ty::U32, o, 2u32);
        k.add(Ty::U32, o, asz as u32)
    };
    // (m + dm, k + dk) → byte offset, per layout.
    let a_off = |dm: usize, dk: usize| {
        if a_along_k {
            (dm * ROW_K + dk) * 4
        } else {
            (dk * ROW_MN + dm) * 4
        }
    };
    let b_off = |dn: usize, dk: usize| {
        if b_along_k {
            (dn * ROW_K + dk) * 4
        } else {
            (dk * ROW_MN + dn) * 4
        }
    };

    // Prologue: the first STAGES − 1 k-tiles in flight (past the end they are all zeros).
    let ntiles = k_tiles(&mut k, &p, BK);
    let kissue = k.mov(Ty::U32, p.kbeg);
    let ws = k.mov(Ty::U32, 0u32);
    let safe_a = p.a;
    let safe_b = p.b;
    let ring_at = Ring {
        base: sbase,
        write: ws,
        asz,
        stage,
        bytes: ring,
    };
    for _ in 0..STAGES - 1 {
        issue_tile(
            &mut k,
            [&ca, &cb],
            [safe_a, safe_b],
            kissue,
            p.kend,
            &ring_at,
        );
    }

    let rs = k.mov(Ty::U32, 0u32);
    let kt = k.mov(Ty::U32, 0u32);
    let top = k.new_label("ktile");
    let done = k.new_label("kdone");
    k.label(&top);
    let fin = k.setp(Cmp::Ge, Ty::U32, kt, ntiles);
    k.bra_if(fin, false, &done);
    // Tile kt has landed (this thread's copies), and every thread is past tile kt − 1, whose
    // stage the next copy overwrites.
    k.raw(format_args!("cp.async.wait_group {}", STAGES - 2));
    k.bar_sync();
    issue_tile(
        &mut k,
        [&ca, &cb],
        [safe_a, safe_b],
        kissue,
        p.kend,
        &ring_at,
    );
    let st = k.add(Ty::U32, sbase, rs);
    let ar = k.add(Ty::U32, st, a_rd);
    let br = k.add(Ty::U32, st, b_rd);
    for ks in 0..BK / 8 {
        let k0 = ks * 8;
        let a: Vec<[Reg; 4]> = (0..mts)
            .map(|mt| {
                let m0 = mt * 16;
                [(0, 0), (8, 0), (0, 4), (8, 4)]
                    .map(|(dm, dk)| ld_tf32(&mut k, ar, a_off(m0 + dm, k0 + dk)))
            })
            .collect();
        let b: Vec<[Reg; 2]> = (0..nts)
            .map(|nt| [0, 4].map(|dk| ld_tf32(&mut k, br, b_off(nt * 8, k0 + dk))))
            .collect();
        for (mt, a) in a.iter().enumerate() {
            for (nt, b) in b.iter().enumerate() {
                mma_tf32(&mut k, w.acc[mt][nt], a, b);
            }
        }
    }
    ring_add(&mut k, rs, stage, ring);
    k.raw(format_args!("add.u32 {kt}, {kt}, 1"));
    k.bra(&top);
    k.label(&done);
    // No copy may still be writing shared memory when the block exits.
    k.raw("cp.async.wait_group 0");

    w.epilogue(&mut k, cfg, &p, mblk, nblk, yes);
    k
}
