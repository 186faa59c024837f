//! The tensor-core GEMM with its operands copied global → shared by `cp.async` through a ring of
//! four stages, for operands whose rows are 16-byte aligned (the common case: for f32 the layout
//! checks of the CUDA-core kernels' 16-byte loads, `vec_a` and B's `vec`; for halves the caller checks
//! 16 bytes, since those flags promise 8).
//!
//! Why: the register-staged kernel (`tc.rs`) waits for each k-tile's global loads before it can
//! store them and pass the barrier; on the H100 (`ncu`, 1024×768×768 split in four) warps spent 56%
//! of their cycles on that wait, and the tensor cores finished each k-tile long before the next
//! arrived. Here tile `t + 3` is in flight while tile `t` is multiplied: each thread copies one
//! (f32) or two (f16) 16-byte chunks of A and as many of B per k-tile (`cp.async.cg`, zero-filled past the matrix's edge
//! by its source size), commits them as a group, and waits only for the group three tiles back.
//!
//! The operands land in shared memory as they lie in global memory: an operand contiguous along k
//! keeps rows of `BK` k values, one contiguous along m|n rows of 128 values, each row padded so
//! that a fragment's reads fall in distinct banks. Two element types:
//! - **f32** (k-tiles of 8): each fragment value is rounded to TF32 (`cvt.rna.tf32.f32`) as it is
//!   loaded from shared memory and multiplied by `mma.m16n8k8` (TF32): the declaration is
//!   `tc.rs`'s (`Arithmetic::TF32`).
//! - **f16 and bf16** (k-tiles of 32): fragments are read with `ldmatrix` (transposed where the
//!   operand is contiguous along m|n) and multiplied as they are by `mma.m16n8k16` (`.f16` or
//!   `.bf16`) with f32 accumulators: exact products, summed in f32 as the tensor cores sum
//!   (truncated; `Arithmetic::TENSOR_CORES`).
use super::tc::{Warps, mma_half, mma_tf32};
use super::tile::{BSrc, Params, TileCfg, Variant, k_tiles, params};
use crate::ops::elem::Elem;
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
    /// The operands' layout in the ring.
    geom: Geom,
}

/// The ring's layout for one element type: element size, k-tile depth, and the padded row lengths
/// (elements) of the two shared layouts. f32: k-tiles of 8 (one `m16n8k8` step per barrier; k 16
/// measured slower on the H100, 107.6 against 123 TFLOP/s at 4096³), rows of 12 along k keep a
/// TF32 fragment's reads (rows `g`, columns `q`) in 32 banks; f16: rows of 40 halves (80 bytes) along k and 136 (272
/// bytes) along m|n put the eight 16-byte rows an `ldmatrix` phase reads in eight distinct bank
/// groups. Every row stays 16-byte aligned for the copies.
#[derive(Clone, Copy)]
struct Geom {
    es: usize,
    bk: usize,
    row_k: usize,
    row_mn: usize,
}

impl Geom {
    fn of(elem: Elem) -> Geom {
        if elem.is_half() {
            Geom {
                es: 2,
                bk: 32,
                row_k: 40,
                row_mn: 136,
            }
        } else {
            Geom {
                es: 4,
                bk: 8,
                row_k: 12,
                row_mn: 136,
            }
        }
    }

    /// Elements in one 16-byte chunk.
    fn per(&self) -> usize {
        16 / self.es
    }

    /// The copies each of the 256 threads issues per operand and k-tile (128 × `bk` elements).
    fn passes(&self) -> usize {
        128 * self.bk / self.per() / 256
    }

    /// Bytes of one operand's part of a stage (`extent` rows of m|n).
    fn part(&self, along_k: bool, extent: usize) -> usize {
        if along_k {
            extent * self.row_k * self.es
        } else {
            self.bk * self.row_mn * self.es
        }
    }
}

enum Step {
    Imm(u32),
    Reg(Reg),
}

enum Valid {
    /// Contiguous along k: the chunk's row is in range (`row_ok`), and its first k is `k4` within
    /// the tile: bytes = clamp(kend − (k0 + k4), 0, per chunk) · element size.
    AlongK { row_ok: Reg, k4: Reg },
    /// Contiguous along m|n: the chunk's k row is `krow` within the tile, and `cols` bytes of it
    /// lie within the matrix (fixed for the whole loop).
    AlongMn { krow: Reg, cols: Reg },
}

/// This thread's chunk `pass` of an operand stored contiguous along k (128 rows of `BK` values,
/// `BK / per` chunks a row: rows `t / chunks + pass · 256 / chunks`).
#[allow(clippy::too_many_arguments)]
fn along_k(
    k: &mut Kernel,
    geom: Geom,
    t: Reg,
    base: Reg,
    ld: Reg,
    blk: Reg,
    lim: Reg,
    kbeg: Reg,
    pass: usize,
) -> Copier {
    let es = geom.es;
    let chunks = geom.bk / geom.per();
    let row = k.shr(Ty::U32, t, log2(chunks));
    let row = k.add(Ty::U32, row, (pass * 256 / chunks) as u32);
    let quarter = k.and(Ty::U32, t, (chunks - 1) as u32);
    let k4 = k.shl(Ty::U32, quarter, log2(geom.per()));
    let r = k.add(Ty::U32, blk, row);
    let row_ok = k.setp(Cmp::Lt, Ty::U32, r, lim);
    let kk = k.add(Ty::U32, kbeg, k4);
    let idx = k.fma(Ty::U32, r, ld, kk);
    let ptr = k.addr(base, idx, es);
    let so = k.mul(Ty::U32, row, (geom.row_k * es) as u32);
    let soff = k.fma(Ty::U32, k4, es as u32, so);
    Copier {
        ptr,
        step: Step::Imm((geom.bk * es) as u32),
        soff,
        valid: Valid::AlongK { row_ok, k4 },
        geom,
    }
}

/// This thread's chunk `pass` of an operand stored contiguous along m|n (`BK` rows of 128
/// values: `128 / per` chunks a row, so `256 · per / 128` rows a pass).
#[allow(clippy::too_many_arguments)]
fn along_mn(
    k: &mut Kernel,
    geom: Geom,
    t: Reg,
    base: Reg,
    ld: Reg,
    blk: Reg,
    lim: Reg,
    kbeg: Reg,
    pass: usize,
) -> Copier {
    let (es, per) = (geom.es, geom.per());
    let chunks = 128 / per;
    let krow = k.shr(Ty::U32, t, log2(chunks));
    let krow = k.add(Ty::U32, krow, (pass * 256 / chunks) as u32);
    let lane = k.and(Ty::U32, t, (chunks - 1) as u32);
    let c4 = k.shl(Ty::U32, lane, log2(per));
    let col = k.add(Ty::U32, blk, c4);
    // Columns of the chunk inside the matrix: clamp(lim − col, 0, per chunk), as bytes.
    let left = k.sub(Ty::S32, lim, col);
    let left = k.max(Ty::S32, left, 0i32);
    let left = k.min(Ty::S32, left, per as i32);
    let cols = k.shl(Ty::U32, left, log2(es));
    let kk = k.add(Ty::U32, kbeg, krow);
    let idx = k.fma(Ty::U32, kk, ld, col);
    let ptr = k.addr(base, idx, es);
    let step = k.mul_wide(false, ld, (geom.bk * es) as u32);
    let so = k.mul(Ty::U32, krow, (geom.row_mn * es) as u32);
    let soff = k.fma(Ty::U32, c4, es as u32, so);
    Copier {
        ptr,
        step: Step::Reg(step),
        soff,
        valid: Valid::AlongMn { krow, cols },
        geom,
    }
}

fn log2(x: usize) -> u32 {
    debug_assert!(x.is_power_of_two());
    x.trailing_zeros()
}

/// Issues the copy of `c`'s chunk of the k-tile starting at `k0` into the stage part at `dst`,
/// and moves `c` on to the next k-tile. `safe`: an address inside the operand, copied from (0
/// bytes) where the chunk lies wholly outside the matrix.
fn issue(k: &mut Kernel, c: &Copier, k0: Reg, kend: Reg, dst: Reg, safe: Reg) {
    let bytes = match &c.valid {
        Valid::AlongK { row_ok, k4 } => {
            let kk = k.add(Ty::U32, k0, *k4);
            let left = k.sub(Ty::S32, kend, kk);
            let left = k.max(Ty::S32, left, 0i32);
            let left = k.min(Ty::S32, left, c.geom.per() as i32);
            let b = k.shl(Ty::U32, left, log2(c.geom.es));
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
    /// The k-tile's depth.
    bk: usize,
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
    k.raw(format_args!("add.u32 {k0}, {k0}, {}", r.bk));
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
    let geom = Geom::of(cfg.elem);
    let b_along_k = matches!(cfg.b, BSrc::Strided { trans: true, .. });
    STAGES * (geom.part(!cfg.trans_a, 128) + geom.part(b_along_k, 128))
}

/// Whether `cfg` can take this kernel: both operands' rows aligned for vector loads, B strided.
/// (For halves those flags promise 8-byte rows; the caller also checks 16.)
pub fn fits(cfg: &TileCfg) -> bool {
    cfg.vec_a && matches!(cfg.b, BSrc::Strided { vec: true, .. })
}

/// The kernel for a `TcAsync` configuration.
pub fn build_tc_async(cfg: &TileCfg) -> Kernel {
    assert!(cfg.variant == Variant::TcAsync && fits(cfg), "{cfg:?}");
    let BSrc::Strided { trans: trans_b, .. } = cfg.b else {
        unreachable!("fits() takes strided B only")
    };
    let (bm, bn) = (128usize, 128usize);
    let geom = Geom::of(cfg.elem);
    let bk = geom.bk;
    let a_along_k = !cfg.trans_a;
    let b_along_k = trans_b;
    let asz = geom.part(a_along_k, bm);
    let stage = asz + geom.part(b_along_k, bn);
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

    let ca: Vec<Copier> = (0..geom.passes())
        .map(|pass| {
            if a_along_k {
                along_k(&mut k, geom, t, p.a, p.lda, mblk, p.m, p.kbeg, pass)
            } else {
                along_mn(&mut k, geom, t, p.a, p.lda, mblk, p.m, p.kbeg, pass)
            }
        })
        .collect();
    let cb: Vec<Copier> = (0..geom.passes())
        .map(|pass| {
            if b_along_k {
                along_k(&mut k, geom, t, p.b, p.ldb, nblk, p.n, p.kbeg, pass)
            } else {
                along_mn(&mut k, geom, t, p.b, p.ldb, nblk, p.n, p.kbeg, pass)
            }
        })
        .collect();

    // Warps tile the block 2 × 4 (64×32 outputs each), as `tc.rs`'s do.
    let w = Warps::new(&mut k, t, bm, bn);
    let reads = if cfg.elem.is_half() {
        Reads::Half(HalfReads::new(
            &mut k, cfg.elem, geom, t, &w, a_along_k, b_along_k, asz,
        ))
    } else {
        Reads::Tf32(Tf32Reads::new(&mut k, geom, &w, a_along_k, b_along_k, asz))
    };

    // Prologue: the first STAGES − 1 k-tiles in flight (past the end they are all zeros).
    let ntiles = k_tiles(&mut k, &p, bk);
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
        bk,
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
    match &reads {
        Reads::Tf32(r) => r.multiply(&mut k, &w, st),
        Reads::Half(r) => r.multiply(&mut k, &w, st),
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

/// How a k-tile's fragments are read from a stage and multiplied.
enum Reads {
    Tf32(Tf32Reads),
    Half(HalfReads),
}

/// f32 stages: each fragment value loaded alone and rounded to TF32; `m16n8k8`.
struct Tf32Reads {
    geom: Geom,
    a_along_k: bool,
    b_along_k: bool,
    /// This thread's read bases (bytes within a stage; B's past A's part).
    a_rd: Reg,
    b_rd: Reg,
}

impl Tf32Reads {
    fn new(
        k: &mut Kernel,
        geom: Geom,
        w: &Warps,
        a_along_k: bool,
        b_along_k: bool,
        asz: usize,
    ) -> Tf32Reads {
        let (g, q, wm, wn) = (w.g, w.q, w.wm, w.wn);
        let (row_k, row_mn) = (geom.row_k as u32, geom.row_mn as u32);
        // A (m, k): along k at (m·ROW_K + k), along m at (k·ROW_MN + m); B (k, n) likewise.
        let a_rd = if a_along_k {
            let r = k.add(Ty::U32, wm, g);
            let o = k.fma(Ty::U32, r, row_k, q);
            k.shl(Ty::U32, o, 2u32)
        } else {
            let o = k.fma(Ty::U32, q, row_mn, wm);
            let o = k.add(Ty::U32, o, g);
            k.shl(Ty::U32, o, 2u32)
        };
        let b_rd = {
            let o = if b_along_k {
                let r = k.add(Ty::U32, wn, g);
                k.fma(Ty::U32, r, row_k, q)
            } else {
                let o = k.fma(Ty::U32, q, row_mn, wn);
                k.add(Ty::U32, o, g)
            };
            let o = k.shl(Ty::U32, o, 2u32);
            k.add(Ty::U32, o, asz as u32)
        };
        Tf32Reads {
            geom,
            a_along_k,
            b_along_k,
            a_rd,
            b_rd,
        }
    }

    /// (m|n + d, k + dk) → byte offset, in an operand's layout.
    fn off(&self, along_k: bool, d: usize, dk: usize) -> usize {
        if along_k {
            (d * self.geom.row_k + dk) * 4
        } else {
            (dk * self.geom.row_mn + d) * 4
        }
    }

    fn multiply(&self, k: &mut Kernel, w: &Warps, st: Reg) {
        let ar = k.add(Ty::U32, st, self.a_rd);
        let br = k.add(Ty::U32, st, self.b_rd);
        for ks in 0..self.geom.bk / 8 {
            let k0 = ks * 8;
            let a: Vec<[Reg; 4]> = (0..w.mts)
                .map(|mt| {
                    let m0 = mt * 16;
                    [(0, 0), (8, 0), (0, 4), (8, 4)]
                        .map(|(dm, dk)| ld_tf32(k, ar, self.off(self.a_along_k, m0 + dm, k0 + dk)))
                })
                .collect();
            let b: Vec<[Reg; 2]> = (0..w.nts)
                .map(|nt| {
                    [0, 4].map(|dk| ld_tf32(k, br, self.off(self.b_along_k, nt * 8, k0 + dk)))
                })
                .collect();
            for (mt, a) in a.iter().enumerate() {
                for (nt, b) in b.iter().enumerate() {
                    mma_tf32(k, w.acc[mt][nt], a, b);
                }
            }
        }
    }
}

/// f16 and bf16 stages: fragments read by `ldmatrix` (four 8×8 matrices of halves per instruction, each
/// lane giving one 16-byte row's address; `.trans` where the operand is stored along m|n, so that
/// each register holds two consecutive k of one row or column, as `mma.m16n8k16` takes them).
struct HalfReads {
    elem: Elem,
    geom: Geom,
    a_along_k: bool,
    b_along_k: bool,
    /// This lane's row address for A's and B's `ldmatrix` (bytes within a stage).
    a_rd: Reg,
    b_rd: Reg,
}

impl HalfReads {
    #[allow(clippy::too_many_arguments)]
    fn new(
        k: &mut Kernel,
        elem: Elem,
        geom: Geom,
        t: Reg,
        w: &Warps,
        a_along_k: bool,
        b_along_k: bool,
        asz: usize,
    ) -> HalfReads {
        let lane = k.and(Ty::U32, t, 31u32);
        let l7 = k.and(Ty::U32, lane, 7u32);
        let l16 = k.and(Ty::U32, lane, 15u32);
        let bit3 = k.shr(Ty::U32, lane, 3u32);
        let bit3 = k.and(Ty::U32, bit3, 1u32);
        let bit4 = k.shr(Ty::U32, lane, 4u32);
        let (row_k, row_mn) = (geom.row_k as u32, geom.row_mn as u32);
        // A's four matrices: rows 0–7 | 8–15 of the fragment at k 0–7, then at k 8–15.
        let a_rd = if a_along_k {
            // Stored [m][k]: lane l gives row m = wm + l%8 + 8·(l/8 % 2), at k = 8·(l/16).
            let m = k.fma(Ty::U32, bit3, 8u32, l7);
            let m = k.add(Ty::U32, m, w.wm);
            let kk = k.shl(Ty::U32, bit4, 3u32);
            let o = k.fma(Ty::U32, m, row_k, kk);
            k.shl(Ty::U32, o, 1u32)
        } else {
            // Stored [k][m] (read transposed): lane l gives k row l%8 + 8·(l/16), at
            // m = wm + 8·(l/8 % 2).
            let kk = k.fma(Ty::U32, bit4, 8u32, l7);
            let m = k.fma(Ty::U32, bit3, 8u32, w.wm);
            let o = k.fma(Ty::U32, kk, row_mn, m);
            k.shl(Ty::U32, o, 1u32)
        };
        // B's four matrices: the fragments of two adjacent n8 tiles, each at k 0–7 then 8–15.
        let b_rd = {
            let o = if b_along_k {
                // Stored [n][k]: lane l gives row n = wn + l%8 + 8·(l/16), at k = 8·(l/8 % 2).
                let n = k.fma(Ty::U32, bit4, 8u32, l7);
                let n = k.add(Ty::U32, n, w.wn);
                let kk = k.shl(Ty::U32, bit3, 3u32);
                k.fma(Ty::U32, n, row_k, kk)
            } else {
                // Stored [k][n] (read transposed): lane l gives k row l%16, at n = wn + 8·(l/16).
                let n = k.fma(Ty::U32, bit4, 8u32, w.wn);
                k.fma(Ty::U32, l16, row_mn, n)
            };
            let o = k.shl(Ty::U32, o, 1u32);
            k.add(Ty::U32, o, asz as u32)
        };
        HalfReads {
            elem,
            geom,
            a_along_k,
            b_along_k,
            a_rd,
            b_rd,
        }
    }

    /// Byte offset of the block at (m|n + d, k + dk) from a lane's row address, in an operand's
    /// layout.
    fn off(&self, along_k: bool, d: usize, dk: usize) -> usize {
        if along_k {
            (d * self.geom.row_k + dk) * 2
        } else {
            (dk * self.geom.row_mn + d) * 2
        }
    }

    fn multiply(&self, k: &mut Kernel, w: &Warps, st: Reg) {
        let ar = k.add(Ty::U32, st, self.a_rd);
        let br = k.add(Ty::U32, st, self.b_rd);
        for ks in 0..self.geom.bk / 16 {
            let k0 = ks * 16;
            let a: Vec<[Reg; 4]> = (0..w.mts)
                .map(|mt| {
                    let off = self.off(self.a_along_k, mt * 16, k0);
                    ldmatrix4(k, !self.a_along_k, ar, off)
                })
                .collect();
            let b: Vec<[Reg; 2]> = (0..w.nts / 2)
                .flat_map(|pair| {
                    let off = self.off(self.b_along_k, pair * 16, k0);
                    let r = ldmatrix4(k, !self.b_along_k, br, off);
                    [[r[0], r[1]], [r[2], r[3]]]
                })
                .collect();
            for (mt, a) in a.iter().enumerate() {
                for (nt, b) in b.iter().enumerate() {
                    mma_half(k, self.elem, w.acc[mt][nt], a, b);
                }
            }
        }
    }
}

/// `ldmatrix.x4` (transposed or not) at this lane's row address `addr + off`: four `.b16x2`
/// registers, one per 8×8 matrix.
fn ldmatrix4(k: &mut Kernel, trans: bool, addr: Reg, off: usize) -> [Reg; 4] {
    let r = [0; 4].map(|_| k.reg(Ty::U32));
    let tr = if trans { ".trans" } else { "" };
    k.raw(format_args!(
        "ldmatrix.sync.aligned.m8n8.x4{tr}.shared.b16 {{{}, {}, {}, {}}}, [{addr}+{off}]",
        r[0], r[1], r[2], r[3]
    ));
    r
}
