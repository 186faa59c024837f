//! A probe of Hopper's warpgroup matrix multiply (`wgmma.mma_async`, PTX 8.0, target `sm_90a`):
//! not yet a path of any op. It computes `C = A · Btᵀ` for f16 `A` (M×K, row-major) and `Bt`
//! (N×K, row-major: B stored K-major, as a transposed weight would be), f32 accumulators and a
//! row-major f32 `C`, for M and N multiples of 128 and K of 64, so that a device call can say
//! whether the layouts below are right and what rate they reach beside the `mma.sync` tile
//! (`tc_async.rs`) before the launch plan takes them.
//!
//! A block of 256 threads (two warpgroups) owns a 128×128 tile of C; warpgroup `g` its rows
//! `64g..64g + 63`, in 64 f32 registers a thread (`m64n128k16`, four per k-tile of 64). Operands
//! arrive by `cp.async` (16 bytes a copy) in three stages of shared memory, each operand's tile
//! 128 rows of 64 halves (128 bytes) in the 128-byte swizzle that `wgmma` reads: row `r` at `128·r`,
//! its 16-byte chunk `c` at chunk `c ^ (r mod 8)`, the tiles 1024-byte aligned. The matrix
//! descriptor: start address >> 4 (bits 0-13), leading byte offset 1 (unused by swizzled K-major
//! layouts, bits 16-29), stride byte offset 1024 >> 4 (eight rows, bits 32-45), swizzle mode 1 =
//! 128 bytes (bits 62-63); the k16 steps within a tile add 32 bytes (2) to the start.
//!
//! Order per k-tile: wait for this thread's copies of the tile, `fence.proxy.async.shared::cta`
//! (ordinary-proxy writes that the tensor cores read next), a barrier; `wgmma.fence`, four
//! `wgmma`, commit, wait for them (so that the stage read by the previous k-tile is free for the
//! copies issued next, behind the next barrier).
use super::tc::Warps;
use super::tile::{BSrc, Params, TileCfg, k_tiles, params};
use crate::driver::Arg;
use crate::ops::elem::Elem;
use crate::ptx::{Cmp, Kernel, Reg, Ty};
use crate::{DevTensor, KResult, Run, decline};
use quorum_core::tensor::DType;

/// Rows and columns of a block's tile, and k per stage.
pub const BM: u32 = 128;
pub const BN: u32 = 128;
pub const BK: u32 = 64;
/// Shared-memory stages.
pub const STAGES: u32 = 3;
const TILE_BYTES: u32 = BM * BK * 2;
const STAGE_BYTES: u32 = 2 * TILE_BYTES;

/// Dynamic shared memory the kernel needs: the stages and room to align them to 1024 bytes.
pub fn shared_bytes() -> u32 {
    STAGES * STAGE_BYTES + 1024
}

/// The descriptor's constant bits: leading byte offset 1, stride byte offset 1024 >> 4, 128-byte
/// swizzle.
pub const DESC_BITS: u64 = (1 << 16) | (64 << 32) | (1 << 62);

/// The probe kernel `wgmma_tn`. Parameters: c, a, bt, m, n, k. Grid (N/128, M/128), 256 threads,
/// [`shared_bytes`] of dynamic shared memory. `unswizzled` describes the operands without the
/// swizzle they are stored in: the deliberately wrong variant its test must catch.
pub fn wgmma_tn_kernel(unswizzled: bool) -> Kernel {
    let desc_bits = if unswizzled {
        DESC_BITS & !(3 << 62)
    } else {
        DESC_BITS
    };
    let mut k = Kernel::new("wgmma_tn");
    let cp = k.param_ptr("c");
    let ap = k.param_ptr("a");
    let bp = k.param_ptr("bt");
    let _m = k.param("m", Ty::U32);
    let n = k.param("n", Ty::U32);
    let kk = k.param("k", Ty::U32);
    let sh = k.extern_shared();
    let raw = k.shared_addr(&sh);
    // Align the stages to 1024 bytes (the swizzle's pattern repeats every eight 128-byte rows and
    // is taken from the address bits).
    let base = k.add(Ty::U32, raw, 1023u32);
    let base = k.and(Ty::U32, base, !1023u32);
    let tid = k.special("tid.x");
    let wg = k.shr(Ty::U32, tid, 7u32);
    let warp = k.shr(Ty::U32, tid, 5u32);
    let warp = k.and(Ty::U32, warp, 3u32);
    let lane = k.and(Ty::U32, tid, 31u32);
    let col0 = k.special("ctaid.x");
    let col0 = k.mul(Ty::U32, col0, BN);
    let row0 = k.special("ctaid.y");
    let row0 = k.mul(Ty::U32, row0, BM);
    // This block's first rows of A and Bt (bytes from the operands' starts).
    let a_blk = k.mul_wide(false, row0, kk);
    let a_blk = k.mul(Ty::U64, a_blk, 2i64);
    let a_blk = k.add(Ty::U64, ap, a_blk);
    let b_blk = k.mul_wide(false, col0, kk);
    let b_blk = k.mul(Ty::U64, b_blk, 2i64);
    let b_blk = k.add(Ty::U64, bp, b_blk);
    // Each thread's four chunks of each operand per stage: chunk q = tid + 256·i, row q / 8,
    // chunk q mod 8 of the row; its global offset (bytes, within the k-tile) and swizzled slot.
    let row_bytes = k.mul(Ty::U32, kk, 2u32);
    let mut g_off = Vec::new();
    let mut s_off = Vec::new();
    for i in 0..4u32 {
        let q = k.add(Ty::U32, tid, 256 * i);
        let r = k.shr(Ty::U32, q, 3u32);
        let c = k.and(Ty::U32, q, 7u32);
        let g = k.mul_wide(false, r, row_bytes);
        let c16 = k.shl(Ty::U32, c, 4u32);
        let c16w = k.cvt(Ty::U64, Ty::U32, "", c16);
        g_off.push(k.add(Ty::U64, g, c16w));
        let r7 = k.and(Ty::U32, r, 7u32);
        let sw = k.xor(Ty::U32, c, r7);
        let sw = k.shl(Ty::U32, sw, 4u32);
        let rs = k.shl(Ty::U32, r, 7u32);
        s_off.push(k.add(Ty::U32, rs, sw));
    }
    let tiles = k.shr(Ty::U32, kk, 6u32);
    // Copies of k-tile `t` into stage `t mod STAGES`, committed as one group (an empty group where
    // `t` is past the last tile, so that every thread counts groups alike).
    let issue = |k: &mut Kernel, t: Reg| {
        let live = k.setp(Cmp::Lt, Ty::U32, t, tiles);
        k.when(live, |k| {
            let stage = k.rem(Ty::U32, t, STAGES);
            let sbase = k.mul(Ty::U32, stage, STAGE_BYTES);
            let sbase = k.add(Ty::U32, base, sbase);
            let kbytes = k.mul_wide(false, t, BK * 2);
            for (blk, half) in [(a_blk, 0u32), (b_blk, TILE_BYTES)] {
                let src0 = k.add(Ty::U64, blk, kbytes);
                for i in 0..4 {
                    let src = k.add(Ty::U64, src0, g_off[i]);
                    let dst = k.add(Ty::U32, sbase, s_off[i]);
                    let dst = k.add(Ty::U32, dst, half);
                    k.raw(format_args!(
                        "cp.async.cg.shared.global [{dst}], [{src}], 16"
                    ));
                }
            }
        });
        k.raw("cp.async.commit_group");
    };
    for s in 0..STAGES - 1 {
        let t = k.mov(Ty::U32, s);
        issue(&mut k, t);
    }
    let acc: Vec<Reg> = (0..64).map(|_| k.mov(Ty::F32, 0.0f32)).collect();
    let list = acc
        .iter()
        .map(|r| r.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let one = k.mov(Ty::U32, 1u32);
    let scale_d = k.setp(Cmp::Ne, Ty::U32, one, 0u32);
    k.for_range(Ty::U32, 0u32, tiles, 1u32, |k, t| {
        k.raw(format_args!("cp.async.wait_group {}", STAGES - 2));
        k.raw("fence.proxy.async.shared::cta");
        k.bar_sync();
        let stage = k.rem(Ty::U32, t, STAGES);
        let sbase = k.mul(Ty::U32, stage, STAGE_BYTES);
        let sbase = k.add(Ty::U32, base, sbase);
        // A's rows of this warpgroup: 64 rows of 128 bytes past the tile's start.
        let a_addr = k.mul(Ty::U32, wg, 64 * 128);
        let a_addr = k.add(Ty::U32, sbase, a_addr);
        let b_addr = k.add(Ty::U32, sbase, TILE_BYTES);
        let desc = |k: &mut Kernel, addr: Reg| {
            let f = k.shr(Ty::U32, addr, 4u32);
            let f = k.and(Ty::U32, f, 0x3fffu32);
            let w = k.cvt(Ty::U64, Ty::U32, "", f);
            let d = k.reg(Ty::U64);
            k.raw(format_args!("or.b64 {d}, {w}, {desc_bits}"));
            d
        };
        let da = desc(k, a_addr);
        let db = desc(k, b_addr);
        k.raw("wgmma.fence.sync.aligned");
        for s in 0..4u32 {
            let (ea, eb) = if s == 0 {
                (da, db)
            } else {
                (k.add(Ty::U64, da, 2 * s as i64), k.add(Ty::U64, db, 2 * s as i64))
            };
            k.raw(format_args!(
                "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {{{list}}}, {ea}, {eb}, {scale_d}, 1, 1, 0, 0"
            ));
        }
        k.raw("wgmma.commit_group.sync.aligned");
        k.raw("wgmma.wait_group.sync.aligned 0");
        let next = k.add(Ty::U32, t, STAGES - 1);
        issue(k, next);
    });
    k.raw("cp.async.wait_group 0");
    // The accumulators: warp w of the warpgroup holds rows 16w..16w + 15; lane l's registers
    // 4j..4j + 3 are (row l/4, columns 8j + 2(l mod 4) + 0, 1) and the same 8 rows down.
    let r = k.mul(Ty::U32, wg, 64u32);
    let w16 = k.mul(Ty::U32, warp, 16u32);
    let r = k.add(Ty::U32, r, w16);
    let l4 = k.shr(Ty::U32, lane, 2u32);
    let r = k.add(Ty::U32, r, l4);
    let row = k.add(Ty::U32, row0, r);
    let lc = k.and(Ty::U32, lane, 3u32);
    let lc = k.mul(Ty::U32, lc, 2u32);
    let col = k.add(Ty::U32, col0, lc);
    for half in 0..2u32 {
        let rr = k.add(Ty::U32, row, 8 * half);
        let at = k.mul(Ty::U32, rr, n);
        let at = k.add(Ty::U32, at, col);
        let base = k.addr(cp, at, 4);
        for j in 0..16u32 {
            let (x, y) = (
                acc[(4 * j + 2 * half) as usize],
                acc[(4 * j + 2 * half + 1) as usize],
            );
            k.raw(format_args!(
                "st.global.v2.f32 [{base}+{}], {{{x}, {y}}}",
                32 * j
            ));
        }
    }
    k
}

/// The module text of the probe: `.target sm_90a` (which `wgmma` needs) in place of `sm_90`.
pub fn wgmma_module(unswizzled: bool) -> String {
    crate::ptx::module((9, 0), &[wgmma_tn_kernel(unswizzled)]).replacen(
        ".target sm_90\n",
        ".target sm_90a\n",
        1,
    )
}

/// Runs the probe into `c` (f32, M×N, written whole): `c = a · btᵀ` for f16 `a` (M×K) and `bt`
/// (N×K), on a device of compute capability 9.0; other shapes and devices decline.
#[allow(clippy::too_many_arguments)]
pub fn wgmma_tn(
    run: &Run,
    a: &DevTensor,
    bt: &DevTensor,
    c: &DevTensor,
    m: usize,
    n: usize,
    k: usize,
    unswizzled: bool,
) -> KResult<()> {
    if run.cc() != (9, 0) {
        decline!(
            "wgmma needs compute capability 9.0, the device has {:?}",
            run.cc()
        );
    }
    let fits = m.is_multiple_of(BM as usize)
        && n.is_multiple_of(BN as usize)
        && k.is_multiple_of(BK as usize)
        && k > 0
        && a.dtype == DType::F16
        && bt.dtype == DType::F16
        && c.dtype == DType::F32
        && a.len() == m * k
        && bt.len() == n * k
        && c.len() == m * n
        && m * n < 1 << 31
        && (m.max(n) * k) < 1 << 30;
    if !fits {
        decline!("the wgmma probe takes f16 {m}×{k} by {n}×{k} in multiples of 128, 128, 64");
    }
    let u = |v: usize| Arg::U32(v as u32);
    run.launch(
        &wgmma_module(unswizzled),
        "wgmma_tn",
        ((n / BN as usize) as u32, (m / BM as usize) as u32, 1),
        (256, 1, 1),
        shared_bytes(),
        &[c.arg_out(), a.arg_in(), bt.arg_in(), u(m), u(n), u(k)],
    )?;
    Ok(())
}

/// Whether CUDA's f16 and bf16 GEMMs may take the `wgmma` tile ([`build_wgmma`]) where it fits
/// (`QUORUM_CUDA_WGMMA`: `on` or `off`, the default being [`WGMMA_DEFAULT`]).
pub fn wgmma_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| match std::env::var("QUORUM_CUDA_WGMMA").as_deref() {
        Ok("on") => true,
        Ok("off") => false,
        _ => WGMMA_DEFAULT,
    })
}

/// Off: written while no device was at hand.
pub const WGMMA_DEFAULT: bool = false;

static LAUNCHES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// GEMM launches that took the `wgmma` tile in this process (for tests that must know it ran).
pub fn launches() -> usize {
    LAUNCHES.load(std::sync::atomic::Ordering::Relaxed)
}

pub(super) fn count_launch() {
    LAUNCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// Whether a configuration can take the `wgmma` tile on a device of compute capability `cc`:
/// sm_90, f16 or bf16, A contiguous along k, B strided, both with rows of 16 bytes (the caller's
/// `tc_async` check), no split along K.
pub fn fits(cfg: &TileCfg, cc: (i32, i32)) -> bool {
    cc == (9, 0) && cfg.elem.is_half() && !cfg.trans_a && !cfg.split && super::tc_async::fits(cfg)
}

/// The descriptor bits of a K-major operand (rows of 64 halves, eight rows 1024 bytes apart), and of
/// an MN-major one (k rows of 64 halves, eight k rows 1024 bytes apart; one 64-wide atom per
/// instruction, so the leading offset, which would step between atoms, is never taken: it is set
/// to 1024 too).
const DESC_K: u64 = DESC_BITS;
const DESC_MN: u64 = (64 << 16) | (64 << 32) | (1 << 62);

/// `desc | (addr >> 4)` for a shared address.
fn descriptor(k: &mut Kernel, addr: Reg, bits: u64) -> Reg {
    let f = k.shr(Ty::U32, addr, 4u32);
    let f = k.and(Ty::U32, f, 0x3fffu32);
    let w = k.cvt(Ty::U64, Ty::U32, "", f);
    let d = k.reg(Ty::U64);
    k.raw(format_args!("or.b64 {d}, {w}, {bits}"));
    d
}

/// One thread's 16-byte copy of an operand tile: the source element (row, k) or (k row, column)
/// offsets, the swizzled slot, and what decides how many bytes are real.
struct Chunk {
    /// Element offset of the chunk at k-tile 0 (`row · ld + k` or `k · ld + column`).
    at: Reg,
    /// Byte offset within the operand's tile in shared memory.
    slot: Reg,
    /// Along k: the row is in range and the chunk's first k within the tile. Along m|n: the k row
    /// within the tile and the chunk's real bytes (fixed for the whole loop).
    valid: (Reg, Reg),
    along_k: bool,
}

/// The four chunks of this thread for an operand stored along k (128 rows of 64 halves a tile) or
/// along m|n (64 k rows of 128 halves, as two 64-wide atoms 8 KiB apart).
fn chunks(k: &mut Kernel, tid: Reg, along_k: bool, blk: Reg, lim: Reg, ld: Reg) -> Vec<Chunk> {
    (0..4u32)
        .map(|i| {
            let q = k.add(Ty::U32, tid, 256 * i);
            if along_k {
                let r = k.shr(Ty::U32, q, 3u32);
                let c = k.and(Ty::U32, q, 7u32);
                let row = k.add(Ty::U32, blk, r);
                let ok = k.setp(Cmp::Lt, Ty::U32, row, lim);
                let k8 = k.shl(Ty::U32, c, 3u32);
                let at = k.fma(Ty::U32, row, ld, k8);
                let r7 = k.and(Ty::U32, r, 7u32);
                let sw = k.xor(Ty::U32, c, r7);
                let sw = k.shl(Ty::U32, sw, 4u32);
                let slot = k.shl(Ty::U32, r, 7u32);
                let slot = k.add(Ty::U32, slot, sw);
                let okr = k.selp(Ty::U32, 1u32, 0u32, ok);
                Chunk {
                    at,
                    slot,
                    valid: (okr, k8),
                    along_k,
                }
            } else {
                let kr = k.shr(Ty::U32, q, 4u32);
                let cn = k.and(Ty::U32, q, 15u32);
                let col = k.shl(Ty::U32, cn, 3u32);
                let col = k.add(Ty::U32, blk, col);
                let at = k.fma(Ty::U32, kr, ld, col);
                // Real bytes of the chunk: the columns left before the matrix's edge, at most 8.
                let left = k.sub(Ty::S32, lim, col);
                let left = k.max(Ty::S32, left, 0i32);
                let left = k.min(Ty::S32, left, 8i32);
                let bytes = k.shl(Ty::U32, left, 1u32);
                let atom = k.shr(Ty::U32, cn, 3u32);
                let c = k.and(Ty::U32, cn, 7u32);
                let r7 = k.and(Ty::U32, kr, 7u32);
                let sw = k.xor(Ty::U32, c, r7);
                let sw = k.shl(Ty::U32, sw, 4u32);
                let slot = k.shl(Ty::U32, kr, 7u32);
                let slot = k.add(Ty::U32, slot, sw);
                let slot = k.fma(Ty::U32, atom, 8192u32, slot);
                Chunk {
                    at,
                    slot,
                    valid: (kr, bytes),
                    along_k,
                }
            }
        })
        .collect()
}

/// Issues `c`'s copy of the k-tile starting at `k0` (absolute) into the tile at `dst`: the real
/// bytes copied, the rest of the 16 zero-filled (from the operand's base `safe` where none is real).
#[allow(clippy::too_many_arguments)]
fn copy(k: &mut Kernel, c: &Chunk, base: Reg, safe: Reg, ld: Reg, k0: Reg, kend: Reg, dst: Reg) {
    let (bytes, off) = if c.along_k {
        let (okr, k8) = c.valid;
        let kk = k.add(Ty::U32, k0, k8);
        let left = k.sub(Ty::S32, kend, kk);
        let left = k.max(Ty::S32, left, 0i32);
        let left = k.min(Ty::S32, left, 8i32);
        let b = k.shl(Ty::U32, left, 1u32);
        let b = k.mul(Ty::U32, b, okr);
        (b, k0)
    } else {
        let (kr, cols) = c.valid;
        let kk = k.add(Ty::U32, k0, kr);
        let in_k = k.setp(Cmp::Lt, Ty::U32, kk, kend);
        let b = k.selp(Ty::U32, cols, 0u32, in_k);
        (b, k.mul(Ty::U32, k0, ld))
    };
    let at = k.add(Ty::U32, c.at, off);
    let src = k.addr(base, at, 2);
    let any = k.setp(Cmp::Ne, Ty::U32, bytes, 0u32);
    let src = k.selp(Ty::U64, src, safe, any);
    let s = k.add(Ty::U32, dst, c.slot);
    k.raw(format_args!(
        "cp.async.cg.shared.global [{s}], [{src}], 16, {bytes}"
    ));
}

/// Dynamic shared memory of the GEMM tile: [`STAGES`] stages of two 16 KiB tiles, and room to
/// align them to 1024 bytes.
pub fn gemm_shared_bytes() -> usize {
    shared_bytes() as usize
}

/// The `wgmma` GEMM tile for a configuration that [`fits`]: the probe's pipeline (three `cp.async`
/// stages of 128×64 halves per operand in the 128-byte swizzle, two warpgroups of `m64n128k16`
/// or, for B stored along n, two `m64n64k16` a k-step, B read transposed) over the tiled kernels'
/// parameters (`tile::params`: batches, C, alpha and beta) and their epilogue (`tc::Warps`), every
/// copy predicated by the matrix's edges (zero-filled past them).
pub fn build_wgmma(cfg: &TileCfg) -> Kernel {
    let BSrc::Strided {
        trans: b_along_k, ..
    } = cfg.b
    else {
        unreachable!("fits() takes strided B only")
    };
    let ty = match cfg.elem {
        Elem::F16 => "f16",
        Elem::Bf16 => "bf16",
        e => unreachable!("fits() takes halves only, not {e:?}"),
    };
    let mut k = Kernel::new(&cfg.name());
    let p: Params = params(&mut k, cfg);
    let sh = k.extern_shared();
    let raw = k.shared_addr(&sh);
    let base = k.add(Ty::U32, raw, 1023u32);
    let base = k.and(Ty::U32, base, !1023u32);
    let tid = k.special("tid.x");
    let wg = k.shr(Ty::U32, tid, 7u32);
    let warp = k.shr(Ty::U32, tid, 5u32);
    let lane = k.and(Ty::U32, tid, 31u32);
    let nblk = k.special("ctaid.x");
    let nblk = k.mul(Ty::U32, nblk, BN);
    let mblk = k.special("ctaid.y");
    let mblk = k.mul(Ty::U32, mblk, BM);
    let a_chunks = chunks(&mut k, tid, true, mblk, p.m, p.lda);
    let b_chunks = if b_along_k {
        chunks(&mut k, tid, true, nblk, p.n, p.ldb)
    } else {
        chunks(&mut k, tid, false, nblk, p.n, p.ldb)
    };
    let tiles = k_tiles(&mut k, &p, BK as usize);
    let issue = |k: &mut Kernel, t: Reg| {
        let live = k.setp(Cmp::Lt, Ty::U32, t, tiles);
        k.when(live, |k| {
            let stage = k.rem(Ty::U32, t, STAGES);
            let sbase = k.mul(Ty::U32, stage, STAGE_BYTES);
            let sbase = k.add(Ty::U32, base, sbase);
            let k0 = k.fma(Ty::U32, t, BK, p.kbeg);
            for c in &a_chunks {
                copy(k, c, p.a, p.a, p.lda, k0, p.kend, sbase);
            }
            let bbase = k.add(Ty::U32, sbase, TILE_BYTES);
            for c in &b_chunks {
                copy(k, c, p.b, p.b, p.ldb, k0, p.kend, bbase);
            }
        });
        k.raw("cp.async.commit_group");
    };
    for s in 0..STAGES - 1 {
        let t = k.mov(Ty::U32, s);
        issue(&mut k, t);
    }
    // The accumulators as `tc::Warps` fragments: warp w of the block (warpgroup w / 4) owns rows
    // 16w.. of the tile, all 128 columns as sixteen m16n8 fragments.
    let g = k.shr(Ty::U32, lane, 2u32);
    let q = k.and(Ty::U32, lane, 3u32);
    let wm = k.mul(Ty::U32, warp, 16u32);
    let wn = k.mov(Ty::U32, 0u32);
    let acc: Vec<[Reg; 4]> = (0..16)
        .map(|_| [0; 4].map(|_| k.mov(Ty::F32, 0.0f32)))
        .collect();
    let list = |frags: &[[Reg; 4]]| {
        frags
            .iter()
            .flatten()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (all, left, right) = (list(&acc), list(&acc[..8]), list(&acc[8..]));
    let one = k.mov(Ty::U32, 1u32);
    let scale_d = k.setp(Cmp::Ne, Ty::U32, one, 0u32);
    k.for_range(Ty::U32, 0u32, tiles, 1u32, |k, t| {
        k.raw(format_args!("cp.async.wait_group {}", STAGES - 2));
        k.raw("fence.proxy.async.shared::cta");
        k.bar_sync();
        let stage = k.rem(Ty::U32, t, STAGES);
        let sbase = k.mul(Ty::U32, stage, STAGE_BYTES);
        let sbase = k.add(Ty::U32, base, sbase);
        let a_addr = k.mul(Ty::U32, wg, 64 * 128);
        let a_addr = k.add(Ty::U32, sbase, a_addr);
        let b_addr = k.add(Ty::U32, sbase, TILE_BYTES);
        let da = descriptor(k, a_addr, DESC_K);
        let db = descriptor(k, b_addr, if b_along_k { DESC_K } else { DESC_MN });
        k.raw("wgmma.fence.sync.aligned");
        for s in 0..4i64 {
            // A k-step of 16: 32 bytes along a K-major row, 16 rows (2048 bytes) of an MN-major tile.
            let ea = k.add(Ty::U64, da, 2 * s);
            let op = format!("wgmma.mma_async.sync.aligned.m64n{{}}k16.f32.{ty}.{ty}");
            if b_along_k {
                let eb = k.add(Ty::U64, db, 2 * s);
                let op = op.replace("{}", "128");
                k.raw(format_args!(
                    "{op} {{{all}}}, {ea}, {eb}, {scale_d}, 1, 1, 0, 0"
                ));
            } else {
                let op = op.replace("{}", "64");
                let eb = k.add(Ty::U64, db, 128 * s);
                k.raw(format_args!(
                    "{op} {{{left}}}, {ea}, {eb}, {scale_d}, 1, 1, 0, 1"
                ));
                // The second 64 columns: the next atom, 8 KiB on.
                let eb = k.add(Ty::U64, eb, 512i64);
                k.raw(format_args!(
                    "{op} {{{right}}}, {ea}, {eb}, {scale_d}, 1, 1, 0, 1"
                ));
            }
        }
        k.raw("wgmma.commit_group.sync.aligned");
        k.raw("wgmma.wait_group.sync.aligned 0");
        let next = k.add(Ty::U32, t, STAGES - 1);
        issue(k, next);
    });
    k.raw("cp.async.wait_group 0");
    let w = Warps {
        g,
        q,
        wm,
        wn,
        mts: 1,
        nts: 16,
        acc: vec![acc],
    };
    w.epilogue(&mut k, cfg, &p, mblk, nblk, cfg.es());
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The GEMM tile in both of B's layouts and both halves: four `m64n128k16` a k-tile for B
    /// along k, eight `m64n64k16` with B transposed for B along n; every copy zero-fills by its
    /// source size; the epilogue stores halves.
    #[test]
    fn the_gemm_tile_is_well_formed() {
        for (elem, ty) in [(Elem::F16, "f16"), (Elem::Bf16, "bf16")] {
            for trans in [true, false] {
                let cfg = TileCfg {
                    variant: super::super::tile::Variant::Wgmma,
                    trans_a: false,
                    vec_a: true,
                    b: BSrc::Strided { trans, vec: true },
                    has_c: true,
                    elem,
                    split: false,
                };
                assert!(fits(&cfg, (9, 0)) && !fits(&cfg, (8, 0)));
                let t = crate::ptx::module((9, 0), &[build_wgmma(&cfg)]);
                if std::env::var_os("DUMP_PTX").is_some() && !trans && elem == Elem::Bf16 {
                    println!("{t}");
                }
                let n = if trans { 128 } else { 64 };
                let op = format!("wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ty}.{ty}");
                assert_eq!(t.matches(&op).count(), if trans { 4 } else { 8 }, "{t}");
                let tb = if trans { "0, 0;" } else { "0, 1;" };
                assert!(
                    t.lines()
                        .filter(|l| l.contains(&op))
                        .all(|l| l.ends_with(tb))
                );
                assert_eq!(t.matches("cp.async.cg.shared.global").count(), 8 * 3, "{t}");
                assert!(
                    t.contains("st.global.b16") || t.contains("st.global.u16"),
                    "{t}"
                );
            }
        }
    }

    /// The module targets sm_90a and issues four `wgmma` per k-tile with the fences and the
    /// proxy fence in place; 64 accumulators a thread.
    #[test]
    fn the_probe_is_well_formed() {
        let t = wgmma_module(false);
        if std::env::var_os("DUMP_PTX").is_some() {
            println!("{t}");
        }
        assert!(t.starts_with(".version 8.0\n.target sm_90a\n"), "{t}");
        assert_eq!(t.matches("wgmma.mma_async").count(), 4, "{t}");
        assert_eq!(t.matches("wgmma.fence.sync.aligned").count(), 1);
        assert!(t.contains("fence.proxy.async.shared::cta"));
        assert!(t.contains("wgmma.commit_group.sync.aligned"));
        assert_eq!(t.matches("st.global.v2.f32").count(), 32);
        let first = t.lines().find(|l| l.contains("wgmma.mma_async")).unwrap();
        assert_eq!(first.matches("%f").count(), 64, "{first}");
        assert_eq!(DESC_BITS, 0x4000_0040_0001_0000);
        let wrong = wgmma_module(true);
        assert!(
            !wrong.contains(&DESC_BITS.to_string()),
            "the broken variant drops the swizzle"
        );
    }
}
