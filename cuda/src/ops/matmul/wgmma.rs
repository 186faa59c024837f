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
use crate::driver::Arg;
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

#[cfg(test)]
mod tests {
    use super::*;

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
