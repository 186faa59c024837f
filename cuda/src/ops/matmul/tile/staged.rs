//! What the block-tiled GEMM kernels share (the CUDA-core tiles of `tile.rs` and the tensor
//! cores' register-staged tiles of `tc.rs`): each operand's per-thread loaders (contiguous along
//! k, along m|n, or gathered from a convolution's input; in passes where a k-tile is deeper than
//! one pass covers), the double-buffered shared tiles, the prologue and the k-tile loop that
//! prefetches the next tile into registers while the current one is multiplied.
use super::{
    BSrc, Params, TileCfg, gather_addr, gather_base, gather_k, k_tiles, load1, load4, params, zero,
};
use crate::ptx::{Cmp, Kernel, Reg, Space, Ty};

/// One operand's per-thread load state in the tiled kernel.
enum Loader {
    /// Contiguous along k (A not transposed, B transposed): the thread loads (mn, k_off..k_off+4).
    KContig { ptr: Reg, mn_ok: Reg, k_off: Reg },
    /// Contiguous along m|n: the thread loads (mn..mn+4, k_off); `step` = BK rows in bytes.
    MnContig {
        ptr: Reg,
        step: Reg,
        q: [Reg; 4],
        k_off: Reg,
    },
    /// Implicit im2col (B of a convolution): columns as MnContig, each with its base input coords.
    Gather {
        q: [Reg; 4],
        base: [[Reg; 3]; 4],
        k_off: Reg,
    },
}

pub(crate) struct Operand {
    ld: Loader,
    vec: bool,
    vals: [Reg; 4],
    /// Byte offset of this thread's store position within the operand's shared buffer.
    soff: Reg,
    /// Floats per shared row (the tile length along m|n and the padding).
    row: usize,
}

#[allow(clippy::too_many_arguments)]
fn strided_operand(
    k: &mut Kernel,
    cfg: &TileCfg,
    t: Reg,
    base: Reg,
    ld: Reg,
    blk: Reg,
    lim: Reg,
    kbeg: Reg,
    kcontig: bool,
    vec: bool,
    slice: usize,
) -> Operand {
    let (bm, _, bk, _) = cfg.dims();
    let lbk = cfg.load_bk();
    let tile = bm; // BM == BN in both tiled variants
    let es = cfg.es();
    let vals = [0; 4].map(|_| k.mov(Ty::F32, 0.0f32));
    if kcontig {
        let lanes = (lbk / 4) as u32;
        let mn_off = k.shr(Ty::U32, t, lanes.trailing_zeros());
        let lane = k.and(Ty::U32, t, lanes - 1);
        let k_off = k.shl(Ty::U32, lane, 2u32);
        let k_off = sliced(k, k_off, slice * lbk);
        let mn = k.add(Ty::U32, blk, mn_off);
        let mn_ok = k.setp(Cmp::Lt, Ty::U32, mn, lim);
        let kk = k.add(Ty::U32, kbeg, k_off);
        let idx = k.fma(Ty::U32, mn, ld, kk);
        let ptr = k.addr(base, idx, es);
        // Shared position: rows k_off.., column mn_off.
        let so = k.mul(Ty::U32, k_off, ((tile + cfg.pad()) * 4) as u32);
        let soff = k.fma(Ty::U32, mn_off, 4u32, so);
        Operand {
            ld: Loader::KContig { ptr, mn_ok, k_off },
            vec,
            vals,
            soff,
            row: tile + cfg.pad(),
        }
    } else {
        let lanes = (tile / 4) as u32;
        let k_off = k.shr(Ty::U32, t, lanes.trailing_zeros());
        let k_off = sliced(k, k_off, slice * lbk);
        let lane = k.and(Ty::U32, t, lanes - 1);
        let mn_off = k.shl(Ty::U32, lane, 2u32);
        let mn = k.add(Ty::U32, blk, mn_off);
        let q = [0u32, 1, 2, 3].map(|i| {
            let x = k.add(Ty::U32, mn, i);
            k.setp(Cmp::Lt, Ty::U32, x, lim)
        });
        let kk = k.add(Ty::U32, kbeg, k_off);
        let idx = k.fma(Ty::U32, kk, ld, mn);
        let ptr = k.addr(base, idx, es);
        let step = k.mul_wide(false, ld, (bk * es) as u32);
        let so = k.mul(Ty::U32, k_off, ((tile + cfg.pad()) * 4) as u32);
        let soff = k.fma(Ty::U32, mn_off, 4u32, so);
        Operand {
            ld: Loader::MnContig {
                ptr,
                step,
                q,
                k_off,
            },
            vec,
            vals,
            soff,
            row: tile + cfg.pad(),
        }
    }
}

/// `k_off` moved to the loader pass `slice` covers (`by` = its first k within the tile): nothing
/// emitted for the first pass.
fn sliced(k: &mut Kernel, k_off: Reg, by: usize) -> Reg {
    if by == 0 {
        k_off
    } else {
        k.add(Ty::U32, k_off, by as u32)
    }
}

/// Loads the operand's elements of the k-tile starting at `kbase` into its registers.
fn load_tile(k: &mut Kernel, cfg: &TileCfg, op: &Operand, p: &Params, kbase: Reg) {
    let elem = cfg.elem;
    match &op.ld {
        Loader::KContig { ptr, mn_ok, k_off } => {
            let kk = k.add(Ty::U32, kbase, *k_off);
            let preds = [0u32, 1, 2, 3].map(|i| {
                let x = k.add(Ty::U32, kk, i);
                let lt = k.setp(Cmp::Lt, Ty::U32, x, p.kend);
                k.pred_and(*mn_ok, lt)
            });
            load4(k, elem, op.vec, op.vals, preds, *ptr);
        }
        Loader::MnContig { ptr, q, k_off, .. } => {
            let kk = k.add(Ty::U32, kbase, *k_off);
            let pk = k.setp(Cmp::Lt, Ty::U32, kk, p.kend);
            let preds = q.map(|qi| k.pred_and(pk, qi));
            load4(k, elem, op.vec, op.vals, preds, *ptr);
        }
        Loader::Gather { q, base, k_off } => {
            let g = p.g.as_ref().expect("im2col geometry");
            let kk = k.add(Ty::U32, kbase, *k_off);
            let pk = k.setp(Cmp::Lt, Ty::U32, kk, p.kend);
            let (coff, off) = gather_k(k, g, kk);
            for i in 0..4 {
                zero(k, op.vals[i]);
                let ok = k.pred_and(pk, q[i]);
                let (addr, ok) = gather_addr(k, g, p.b, cfg.es(), ok, base[i], coff, off);
                load1(k, elem, op.vals[i], ok, addr, 0);
            }
        }
    }
}

/// Moves the operand's pointer on by one k-tile.
fn advance(k: &mut Kernel, cfg: &TileCfg, op: &Operand) {
    let (_, _, bk, _) = cfg.dims();
    match &op.ld {
        Loader::KContig { ptr, .. } => {
            k.raw(format_args!("add.u64 {ptr}, {ptr}, {}", bk * cfg.es()));
        }
        Loader::MnContig { ptr, step, .. } => k.raw(format_args!("add.u64 {ptr}, {ptr}, {step}")),
        Loader::Gather { .. } => {}
    }
}

/// Stores the operand's registers into the shared buffer at `buf` (u32 address of the buffer);
/// for the tensor cores, each f32 operand rounded to TF32 first (round to nearest, ties away from
/// zero; a widened f16 or bf16 value is a TF32 value already).
fn store_tile(k: &mut Kernel, cfg: &TileCfg, op: &Operand, buf: Reg) {
    if cfg.tensor_cores() && !cfg.elem.is_half() {
        for v in op.vals {
            let r = k.reg(Ty::U32);
            k.raw(format_args!("cvt.rna.tf32.f32 {r}, {v}"));
            k.raw(format_args!("mov.b32 {v}, {r}"));
        }
    }
    let a = k.add(Ty::U32, buf, op.soff);
    match op.ld {
        Loader::KContig { .. } => {
            for i in 0..4 {
                k.st(Space::Shared, a, (i * op.row * 4) as i64, op.vals[i]);
            }
        }
        _ => {
            let v = op.vals;
            k.raw(format_args!(
                "st.shared.v4.f32 [{a}+0], {{{}, {}, {}, {}}}",
                v[0], v[1], v[2], v[3]
            ));
        }
    }
}

/// What every block-tiled kernel shares: its parameters, block position, double-buffered shared
/// tiles (A stored k-major, then B, per stage) and the two operands' loaders.
pub(crate) struct Tiled {
    pub(crate) p: Params,
    pub(crate) t: Reg,
    pub(crate) tx: Reg,
    pub(crate) ty: Reg,
    pub(crate) mblk: Reg,
    pub(crate) nblk: Reg,
    pub(crate) sbase: Reg,
    /// The operands' loaders, one per pass of the k-tile.
    opa: Vec<Operand>,
    opb: Vec<Operand>,
    /// Bytes of A's tile in a stage, and of a whole stage.
    pub(crate) asz: usize,
    stage: usize,
}

/// Declares the parameters, shared memory and the operands' loaders of a tiled kernel.
pub(crate) fn setup(k: &mut Kernel, cfg: &TileCfg) -> Tiled {
    let (bm, bn, bk, _) = cfg.dims();
    let pad = cfg.pad();
    let p = params(k, cfg);
    let t = k.special("tid.x");
    let tx = k.and(Ty::U32, t, 15u32);
    let ty = k.shr(Ty::U32, t, 4u32);
    let by = k.special("ctaid.y");
    let mblk = k.mul(Ty::U32, by, bm as u32);
    let bx = k.special("ctaid.x");
    let nblk = k.mul(Ty::U32, bx, bn as u32);

    let asz = bk * (bm + pad) * 4;
    let bsz = bk * (bn + pad) * 4;
    let stage = asz + bsz;
    k.shared_array("smem", 2 * stage);
    let sbase = k.shared_addr("smem");

    // One loader per pass of `load_bk` rows of the k-tile (one, but for the tensor cores' deeper
    // tiles).
    let slices = bk / cfg.load_bk();
    let opa: Vec<Operand> = (0..slices)
        .map(|sl| {
            strided_operand(
                k,
                cfg,
                t,
                p.a,
                p.lda,
                mblk,
                p.m,
                p.kbeg,
                !cfg.trans_a,
                cfg.vec_a,
                sl,
            )
        })
        .collect();
    let opb: Vec<Operand> = (0..slices)
        .map(|sl| match cfg.b {
            BSrc::Strided { trans, vec } => {
                strided_operand(k, cfg, t, p.b, p.ldb, nblk, p.n, p.kbeg, trans, vec, sl)
            }
            BSrc::Im2col => {
                let g = p.g.as_ref().expect("im2col geometry");
                let lanes = (bn / 4) as u32;
                let k_off = k.shr(Ty::U32, t, lanes.trailing_zeros());
                let k_off = sliced(k, k_off, sl * cfg.load_bk());
                let lane = k.and(Ty::U32, t, lanes - 1);
                let mn_off = k.shl(Ty::U32, lane, 2u32);
                let col = k.add(Ty::U32, nblk, mn_off);
                let mut q = [t; 4];
                let mut base = [[t; 3]; 4];
                for i in 0..4 {
                    let c = k.add(Ty::U32, col, i as u32);
                    q[i] = k.setp(Cmp::Lt, Ty::U32, c, p.n);
                    base[i] = gather_base(k, g, c);
                }
                let so = k.mul(Ty::U32, k_off, ((bn + pad) * 4) as u32);
                let soff = k.fma(Ty::U32, mn_off, 4u32, so);
                let vals = [0; 4].map(|_| k.mov(Ty::F32, 0.0f32));
                Operand {
                    ld: Loader::Gather { q, base, k_off },
                    vec: false,
                    vals,
                    soff,
                    row: bn + pad,
                }
            }
        })
        .collect();
    Tiled {
        p,
        t,
        tx,
        ty,
        mblk,
        nblk,
        sbase,
        opa,
        opb,
        asz,
        stage,
    }
}

/// The k-tile offsets of the main loop: the next tile's first k, and the stages read and written.
#[derive(Clone, Copy)]
pub(crate) struct Stages {
    kbase: Reg,
    rd: Reg,
    wr: Reg,
}

/// Loads the k-tile at `kbase` into the loaders' registers.
fn load_all(k: &mut Kernel, cfg: &TileCfg, s: &Tiled, kbase: Reg) {
    for op in s.opa.iter().chain(&s.opb) {
        load_tile(k, cfg, op, &s.p, kbase);
    }
}

/// Stores the loaders' registers into the stage at byte offset `at`.
fn store_all(k: &mut Kernel, cfg: &TileCfg, s: &Tiled, at: Reg) {
    let ab = k.add(Ty::U32, s.sbase, at);
    for op in &s.opa {
        store_tile(k, cfg, op, ab);
    }
    let bb = k.add(Ty::U32, ab, s.asz as u32);
    for op in &s.opb {
        store_tile(k, cfg, op, bb);
    }
}

/// Loads tile 0 into stage 0 and waits for the block.
pub(crate) fn prologue(k: &mut Kernel, cfg: &TileCfg, s: &Tiled) -> Stages {
    let kbase = k.mov(Ty::U32, s.p.kbeg);
    load_all(k, cfg, s, kbase);
    let rd = k.mov(Ty::U32, 0u32);
    let wr = k.mov(Ty::U32, s.stage as u32);
    store_all(k, cfg, s, rd);
    k.bar_sync();
    Stages { kbase, rd, wr }
}

/// The k-tile loop: prefetch the next tile into registers, `compute` on the current stage (given
/// the stage's byte offset), store the prefetched tile into the other stage, one barrier. A
/// prefetch past kend loads zeros.
pub(crate) fn ktile_loop(
    k: &mut Kernel,
    cfg: &TileCfg,
    s: &Tiled,
    st: &Stages,
    mut compute: impl FnMut(&mut Kernel, Reg),
) {
    let (_, _, bk, _) = cfg.dims();
    let Stages { kbase, rd, wr } = *st;
    let p = &s.p;
    let ntiles = k_tiles(k, p, bk);
    let kt = k.mov(Ty::U32, 0u32);
    let top = k.new_label("ktile");
    let done = k.new_label("kdone");
    // kend <= kbeg happens only for an empty K (kend = kbeg = 0): the unsigned span is then 0.
    k.label(&top);
    let fin = k.setp(Cmp::Ge, Ty::U32, kt, ntiles);
    k.bra_if(fin, false, &done);
    k.raw(format_args!("add.u32 {kbase}, {kbase}, {bk}"));
    for op in s.opa.iter().chain(&s.opb) {
        advance(k, cfg, op);
    }
    load_all(k, cfg, s, kbase);
    compute(k, rd);
    store_all(k, cfg, s, wr);
    k.bar_sync();
    let stage = s.stage;
    k.raw(format_args!("xor.b32 {rd}, {rd}, {stage}"));
    k.raw(format_args!("xor.b32 {wr}, {wr}, {stage}"));
    k.raw(format_args!("add.u32 {kt}, {kt}, 1"));
    k.bra(&top);
    k.label(&done);
}
