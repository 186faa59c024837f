//! The GEMM kernels beside the tiled one, with the same parameters (`tile::GemmArgs`): the skinny
//! kernel for products of at most `SKINNY_ROWS` = 4 rows (GEMV-like: classifier heads, batch-1 linear layers), the
//! naive one-thread-per-output reference (`QUORUM_CUDA_GEMM=naive`), and the split-K reduction.
use super::tile::Variant;
use super::tile::{
    BSrc, SKINNY_ROWS, TileCfg, gather_addr, gather_base, gather_k, load1, load4, params,
    store_out, zero,
};
use crate::ops::elem::Elem;
use crate::ptx::{Cmp, Kernel, Reg, Space, Ty};

/// The skinny kernel: `m <= SKINNY_ROWS`, B strided (block 256).
///
/// B contiguous along k (transposed): one warp per output column; each lane walks k in 16-byte
/// steps (lane·4 + 128·i), multiplies by the rows of A and keeps one partial sum per row; a
/// butterfly shuffle sums the lanes. B contiguous along n: a block per 128 columns, each lane owns 4
/// columns, the 8 warps take every 8th k; partial sums meet in shared memory, summed in warp order.
pub fn build_skinny(cfg: &TileCfg) -> Kernel {
    let es = cfg.es();
    let yes = if cfg.split { 4 } else { es };
    let BSrc::Strided {
        trans: trans_b,
        vec: vec_b,
    } = cfg.b
    else {
        panic!("the skinny kernel reads a strided B")
    };
    let Variant::Skinny(nrows) = cfg.variant else {
        panic!("build_skinny takes the skinny variant")
    };
    let nrows = nrows as usize;
    assert!(nrows.is_power_of_two() && nrows <= SKINNY_ROWS);
    let mut k = Kernel::new(&cfg.name());
    let p = params(&mut k, cfg);
    let t = k.special("tid.x");
    let lane = k.and(Ty::U32, t, 31u32);
    let warp = k.shr(Ty::U32, t, 5u32);
    let bx = k.special("ctaid.x");
    let rows: Vec<Reg> = (0..nrows).map(|r| k.mov(Ty::U32, r as u32)).collect();
    let prow: Vec<Reg> = rows
        .iter()
        .map(|&r| k.setp(Cmp::Lt, Ty::U32, r, p.m))
        .collect();
    let elem = cfg.elem;
    let (vec_a, trans_a) = (cfg.vec_a, cfg.trans_a);
    if trans_b {
        let col = k.fma(Ty::U32, bx, 8u32, warp);
        let pn = k.setp(Cmp::Lt, Ty::U32, col, p.n);
        let l4 = k.shl(Ty::U32, lane, 2u32);
        let k0 = k.add(Ty::U32, p.kbeg, l4);
        // B(k, col) = b[col·ldb + k]; A(r, k) = a[r·lda + k] (or a[k·lda + r] transposed).
        let bi = k.fma(Ty::U32, col, p.ldb, k0);
        let bptr = k.addr(p.b, bi, es);
        let aptr: Vec<Reg> = rows
            .iter()
            .map(|&r| {
                let ai = if trans_a {
                    k.fma(Ty::U32, k0, p.lda, r)
                } else {
                    k.fma(Ty::U32, r, p.lda, k0)
                };
                k.addr(p.a, ai, es)
            })
            .collect();
        // Byte step between consecutive k of A, and per loop iteration (128 k).
        let a_kstep = if trans_a {
            Some(k.mul_wide(false, p.lda, es as u32))
        } else {
            None
        };
        let a_iter = a_kstep.map(|_| k.mul_wide(false, p.lda, (128 * es) as u32));
        let acc: Vec<Reg> = rows.iter().map(|_| k.mov(Ty::F32, 0.0f32)).collect();
        let kend = p.kend;
        k.for_range(Ty::U32, k0, kend, 128u32, |k, kk| {
            let inr: Vec<Reg> = (0..4u32)
                .map(|i| {
                    let x = k.add(Ty::U32, kk, i);
                    k.setp(Cmp::Lt, Ty::U32, x, kend)
                })
                .collect();
            let bv = [0; 4].map(|_| k.reg(Ty::F32));
            let pb = [0, 1, 2, 3].map(|i| k.pred_and(pn, inr[i]));
            load4(k, elem, vec_b, bv, pb, bptr);
            for r in 0..nrows {
                let av = [0; 4].map(|_| k.reg(Ty::F32));
                let pa = [0, 1, 2, 3].map(|i| k.pred_and(prow[r], inr[i]));
                match a_kstep {
                    None => load4(k, elem, vec_a, av, pa, aptr[r]),
                    Some(step) => {
                        let mut ad = aptr[r];
                        for i in 0..4 {
                            zero(k, av[i]);
                            if i > 0 {
                                ad = k.add(Ty::U64, ad, step);
                            }
                            load1(k, elem, av[i], pa[i], ad, 0);
                        }
                    }
                }
                for i in 0..4 {
                    k.fma_acc(acc[r], av[i], bv[i]);
                }
            }
            k.raw(format_args!("add.u64 {bptr}, {bptr}, {}", 128 * es));
            for &ap in &aptr {
                match a_iter {
                    None => k.raw(format_args!("add.u64 {ap}, {ap}, {}", 128 * es)),
                    Some(st) => k.raw(format_args!("add.u64 {ap}, {ap}, {st}")),
                }
            }
        });
        for &a in &acc {
            for m in [16u32, 8, 4, 2, 1] {
                let v = k.shfl_bfly(a, m);
                k.raw(format_args!("add.rn.f32 {a}, {a}, {v}"));
            }
        }
        let lane0 = k.setp(Cmp::Eq, Ty::U32, lane, 0u32);
        let pl = k.pred_and(pn, lane0);
        for r in 0..nrows {
            let pst = k.pred_and(pl, prow[r]);
            let yi = k.fma(Ty::U32, rows[r], p.ldy, col);
            let ya = k.addr(p.y, yi, yes);
            store_out(&mut k, cfg, &p, pst, acc[r], ya, rows[r], col);
        }
    } else {
        let l4 = k.shl(Ty::U32, lane, 2u32);
        let n0 = k.fma(Ty::U32, bx, 128u32, l4);
        let q = [0u32, 1, 2, 3].map(|i| {
            let x = k.add(Ty::U32, n0, i);
            k.setp(Cmp::Lt, Ty::U32, x, p.n)
        });
        let kw = k.add(Ty::U32, p.kbeg, warp);
        // B(k, n) = b[k·ldb + n].
        let bi = k.fma(Ty::U32, kw, p.ldb, n0);
        let bptr = k.addr(p.b, bi, es);
        let bstep = k.mul_wide(false, p.ldb, (8 * es) as u32);
        let aptr: Vec<Reg> = rows
            .iter()
            .map(|&r| {
                let ai = if trans_a {
                    k.fma(Ty::U32, kw, p.lda, r)
                } else {
                    k.fma(Ty::U32, r, p.lda, kw)
                };
                k.addr(p.a, ai, es)
            })
            .collect();
        let astep = if trans_a {
            Some(k.mul_wide(false, p.lda, (8 * es) as u32))
        } else {
            None
        };
        let acc: Vec<[Reg; 4]> = rows
            .iter()
            .map(|_| [0; 4].map(|_| k.mov(Ty::F32, 0.0f32)))
            .collect();
        k.for_range(Ty::U32, kw, p.kend, 8u32, |k, _| {
            let bv = [0; 4].map(|_| k.reg(Ty::F32));
            load4(k, elem, vec_b, bv, q, bptr);
            for r in 0..nrows {
                let av = k.mov(Ty::F32, 0.0f32);
                load1(k, elem, av, prow[r], aptr[r], 0);
                for j in 0..4 {
                    k.fma_acc(acc[r][j], av, bv[j]);
                }
            }
            k.raw(format_args!("add.u64 {bptr}, {bptr}, {bstep}"));
            for &ap in &aptr {
                match astep {
                    None => k.raw(format_args!("add.u64 {ap}, {ap}, {}", 8 * es)),
                    Some(st) => k.raw(format_args!("add.u64 {ap}, {ap}, {st}")),
                }
            }
        });
        // Partial sums [warp][row][128 columns] in shared memory, then summed in warp order.
        k.shared_array("part", 8 * nrows * 128 * 4);
        let sbase = k.shared_addr("part");
        let wo = k.mul(Ty::U32, warp, (nrows * 128 * 4) as u32);
        let lo = k.shl(Ty::U32, lane, 4u32);
        let wo = k.add(Ty::U32, wo, lo);
        let sw = k.add(Ty::U32, sbase, wo);
        for (r, v) in acc.iter().enumerate() {
            k.raw(format_args!(
                "st.shared.v4.f32 [{sw}+{}], {{{}, {}, {}, {}}}",
                r * 128 * 4,
                v[0],
                v[1],
                v[2],
                v[3]
            ));
        }
        k.bar_sync();
        for h in 0..(nrows * 128).div_ceil(256) as u32 {
            let o = k.add(Ty::U32, t, 256 * h);
            // One row of 128 columns leaves half the threads without an output.
            let live = k.setp(Cmp::Lt, Ty::U32, o, (nrows * 128) as u32);
            k.when(live, |k| {
                let r = k.shr(Ty::U32, o, 7u32);
                let c = k.and(Ty::U32, o, 127u32);
                let off = k.shl(Ty::U32, o, 2u32);
                let sa = k.add(Ty::U32, sbase, off);
                let sum = k.mov(Ty::F32, 0.0f32);
                for w in 0..8 {
                    let v = k.ld(Space::Shared, Ty::F32, sa, (w * nrows * 128 * 4) as i64);
                    k.raw(format_args!("add.rn.f32 {sum}, {sum}, {v}"));
                }
                let col = k.fma(Ty::U32, bx, 128u32, c);
                let pr = k.setp(Cmp::Lt, Ty::U32, r, p.m);
                let pc = k.setp(Cmp::Lt, Ty::U32, col, p.n);
                let pst = k.pred_and(pr, pc);
                let yi = k.fma(Ty::U32, r, p.ldy, col);
                let ya = k.addr(p.y, yi, yes);
                store_out(k, cfg, &p, pst, sum, ya, r, col);
            });
        }
    }
    k
}

/// One thread per output, same parameters as the tiled kernel (block 256 = 16×16).
pub fn build_naive(cfg: &TileCfg) -> Kernel {
    let es = cfg.es();
    let yes = if cfg.split { 4 } else { es };
    let mut k = Kernel::new(&cfg.name());
    let p = params(&mut k, cfg);
    let t = k.special("tid.x");
    let tx = k.and(Ty::U32, t, 15u32);
    let ty = k.shr(Ty::U32, t, 4u32);
    let by = k.special("ctaid.y");
    let row = k.fma(Ty::U32, by, 16u32, ty);
    let bx = k.special("ctaid.x");
    let col = k.fma(Ty::U32, bx, 16u32, tx);
    let pr = k.setp(Cmp::Ge, Ty::U32, row, p.m);
    k.exit_if(pr);
    let pc = k.setp(Cmp::Ge, Ty::U32, col, p.n);
    k.exit_if(pc);
    let acc = k.mov(Ty::F32, 0.0f32);
    let always = k.setp(Cmp::Eq, Ty::U32, row, row);
    let gbase = p.g.as_ref().map(|g| gather_base(&mut k, g, col));
    let (lda, ldb) = (p.lda, p.ldb);
    let (pa, pb) = (p.a, p.b);
    let trans_a = cfg.trans_a;
    let bsrc = cfg.b;
    let elem = cfg.elem;
    let geom = p.g;
    k.for_range(Ty::U32, p.kbeg, p.kend, 1u32, |k, kk| {
        let ai = if trans_a {
            k.fma(Ty::U32, kk, lda, row)
        } else {
            k.fma(Ty::U32, row, lda, kk)
        };
        let aa = k.addr(pa, ai, es);
        let av = k.mov(Ty::F32, 0.0f32);
        load1(k, elem, av, always, aa, 0);
        let bv = k.mov(Ty::F32, 0.0f32);
        match bsrc {
            BSrc::Strided { trans, .. } => {
                let bi = if trans {
                    k.fma(Ty::U32, col, ldb, kk)
                } else {
                    k.fma(Ty::U32, kk, ldb, col)
                };
                let ba = k.addr(pb, bi, es);
                load1(k, elem, bv, always, ba, 0);
            }
            BSrc::Im2col => {
                let g = geom.as_ref().expect("im2col geometry");
                let (coff, off) = gather_k(k, g, kk);
                let base = gbase.expect("im2col base");
                let (ba, ok) = gather_addr(k, g, pb, es, always, base, coff, off);
                load1(k, elem, bv, ok, ba, 0);
            }
        }
        k.fma_acc(acc, av, bv);
    });
    let yi = k.fma(Ty::U32, row, p.ldy, col);
    let ya = k.addr(p.y, yi, yes);
    store_out(&mut k, cfg, &p, always, acc, ya, row, col);
    k
}

/// The split-K reductions' parameters (both kernels take the same), and the offsets of this
/// block's batch (`ctaid.y`).
struct ReduceParams {
    ws: Reg,
    c: Reg,
    y: Reg,
    n: Reg,
    ldy: Reg,
    c_rs: Reg,
    c_cs: Reg,
    alpha: Reg,
    beta: Reg,
    nsplit: Reg,
    ssy: Reg,
    /// m · n.
    total: Reg,
    c_off: Reg,
    y_off: Reg,
    ws_off: Reg,
}

fn reduce_params(k: &mut Kernel) -> ReduceParams {
    let ws = k.param_ptr("ws");
    let c = k.param_ptr("c");
    let y = k.param_ptr("y");
    let [m, n, ldy, c_rs, c_cs] = ["m", "n", "ldy", "c_rs", "c_cs"].map(|s| k.param(s, Ty::U32));
    let alpha = k.param("alpha", Ty::F32);
    let beta = k.param("beta", Ty::F32);
    let nsplit = k.param("nsplit", Ty::U32);
    // Batches: ctaid.y = (z0 · d1 + z1) · d2 + z2, with element strides of C and Y per dim; the
    // workspace holds split s of batch b at s · ssy + b · m · n.
    let [ssy, d1, d2] = ["ssy", "d1", "d2"].map(|s| k.param(s, Ty::U32));
    let sc = ["sc0", "sc1", "sc2"].map(|s| k.param(s, Ty::U32));
    let sy = ["sy0", "sy1", "sy2"].map(|s| k.param(s, Ty::U32));
    let total = k.mul(Ty::U32, m, n);
    let b = k.special("ctaid.y");
    let z2 = k.rem(Ty::U32, b, d2);
    let zt = k.div(Ty::U32, b, d2);
    let z1 = k.rem(Ty::U32, zt, d1);
    let z0 = k.div(Ty::U32, zt, d1);
    let batch_off = |k: &mut Kernel, st: [Reg; 3]| {
        let o = k.mul(Ty::U32, z0, st[0]);
        let o = k.fma(Ty::U32, z1, st[1], o);
        k.fma(Ty::U32, z2, st[2], o)
    };
    let c_off = batch_off(k, sc);
    let y_off = batch_off(k, sy);
    let ws_off = k.mul(Ty::U32, b, total);
    ReduceParams {
        ws,
        c,
        y,
        n,
        ldy,
        c_rs,
        c_cs,
        alpha,
        beta,
        nsplit,
        ssy,
        total,
        c_off,
        y_off,
        ws_off,
    }
}

/// Sums the `nsplit` f32 partials of a split-K launch (workspace `[nsplit, m·n]`) and applies
/// `alpha`, `beta·C` and the output dtype. Params: ws, c, y, m, n, ldy, c_rs, c_cs, alpha, beta,
/// nsplit. Block 256 = (256 / lanes) outputs × `lanes` (1 or 8): lane `l` sums splits l, l+lanes,
/// ... in order (four loads in flight), then the lane sums meet in shared memory, added in lane order
/// (deterministic). Grid: ⌈m·n · lanes / 256⌉ blocks.
pub fn reduce_kernel(has_c: bool, elem: Elem, lanes: u32) -> Kernel {
    assert!(lanes == 1 || lanes == 8);
    let opb = 256 / lanes;
    let es = elem.size();
    let mut k = Kernel::new(&format!(
        "quorum_gemm_splitk_reduce_c{}_h{}_l{lanes}",
        has_c as u8,
        elem.tag()
    ));
    let rp = reduce_params(&mut k);
    let t = k.special("tid.x");
    let tx = k.and(Ty::U32, t, opb - 1);
    let ty = k.shr(Ty::U32, t, opb.trailing_zeros());
    let bx = k.special("ctaid.x");
    let e = k.fma(Ty::U32, bx, opb, tx);
    let valid = k.setp(Cmp::Lt, Ty::U32, e, rp.total);
    let acc = k.mov(Ty::F32, 0.0f32);
    // Bytes from split s to split s + lanes.
    let step = k.mul_wide(false, rp.ssy, 4 * lanes);
    let eb = k.add(Ty::U32, e, rp.ws_off);
    k.for_range(Ty::U32, ty, rp.nsplit, 4 * lanes, |k, s| {
        let i = k.fma(Ty::U32, s, rp.ssy, eb);
        let mut a = k.addr(rp.ws, i, 4);
        let mut vs = Vec::new();
        for j in 0..4u32 {
            if j > 0 {
                a = k.add(Ty::U64, a, step);
            }
            let sj = k.add(Ty::U32, s, lanes * j);
            let inr = k.setp(Cmp::Lt, Ty::U32, sj, rp.nsplit);
            let p = k.pred_and(inr, valid);
            let v = k.mov(Ty::F32, 0.0f32);
            k.raw(format_args!("@{p} ld.global.f32 {v}, [{a}+0]"));
            vs.push((p, v));
        }
        for (p, v) in vs {
            k.raw(format_args!("@{p} add.rn.f32 {acc}, {acc}, {v}"));
        }
    });
    k.shared_array("red", 256 * 4);
    let sbase = k.shared_addr("red");
    let so = k.shl(Ty::U32, t, 2u32);
    let sa = k.add(Ty::U32, sbase, so);
    k.st(Space::Shared, sa, 0, acc);
    k.bar_sync();
    let first = k.setp(Cmp::Eq, Ty::U32, ty, 0u32);
    let go = k.pred_and(first, valid);
    k.when(go, |k| {
        // Lane 0 of output tx sits at tx; lane w at w·opb + tx.
        let sum = k.mov(Ty::F32, 0.0f32);
        for w in 0..lanes {
            let v = k.ld(Space::Shared, Ty::F32, sa, (w * opb * 4) as i64);
            k.raw(format_args!("add.rn.f32 {sum}, {sum}, {v}"));
        }
        let row = k.div(Ty::U32, e, rp.n);
        let col = k.rem(Ty::U32, e, rp.n);
        let mut v = k.mul(Ty::F32, sum, rp.alpha);
        if has_c {
            let co = k.fma(Ty::U32, row, rp.c_rs, rp.c_off);
            let co = k.fma(Ty::U32, col, rp.c_cs, co);
            let ca = k.addr(rp.c, co, es);
            let h = k.ld(Space::Global, elem.raw(), ca, 0);
            let cv = elem.widen(k, h);
            v = k.fma(Ty::F32, rp.beta, cv, v);
        }
        let yi = k.fma(Ty::U32, row, rp.ldy, col);
        let yi = k.add(Ty::U32, yi, rp.y_off);
        let ya = k.addr(rp.y, yi, es);
        let h = elem.narrow(k, v);
        k.st(Space::Global, ya, 0, h);
    });
    k
}

/// The split-K reduction for f32 outputs whose rows are whole 16-byte vectors (`n`, `ldy`, Y's batch
/// offsets and both base addresses multiples of 4 elements): each thread sums four adjacent outputs
/// over the splits with 16-byte loads, four splits in flight, and stores them with one 16-byte store.
/// The same parameters as [`reduce_kernel`], and the same sums in the same order (split 0 first), so
/// its outputs are bit for bit those of `reduce_kernel(.., 1)`. BERT-base at batch 8 spent 10% of
/// its kernel time in `reduce_kernel`, at about half the device's bandwidth.
pub fn reduce4_kernel(has_c: bool) -> Kernel {
    let mut k = Kernel::new(&format!("quorum_gemm_splitk_reduce_c{}_h0_v4", has_c as u8));
    let rp = reduce_params(&mut k);
    let t = k.special("tid.x");
    let bx = k.special("ctaid.x");
    let q = k.fma(Ty::U32, bx, 256u32, t);
    let e = k.shl(Ty::U32, q, 2u32);
    let done = k.setp(Cmp::Ge, Ty::U32, e, rp.total);
    k.exit_if(done);
    let acc = [0; 4].map(|_| k.mov(Ty::F32, 0.0f32));
    let step = k.mul_wide(false, rp.ssy, 4);
    let eb = k.add(Ty::U32, e, rp.ws_off);
    k.for_range(Ty::U32, 0u32, rp.nsplit, 4u32, |k, s| {
        let i = k.fma(Ty::U32, s, rp.ssy, eb);
        let mut a = k.addr(rp.ws, i, 4);
        let mut loads = Vec::new();
        for j in 0..4u32 {
            if j > 0 {
                a = k.add(Ty::U64, a, step);
            }
            let sj = k.add(Ty::U32, s, j);
            let p = k.setp(Cmp::Lt, Ty::U32, sj, rp.nsplit);
            let v = [0; 4].map(|_| k.mov(Ty::F32, 0.0f32));
            k.raw(format_args!(
                "@{p} ld.global.v4.f32 {{{}, {}, {}, {}}}, [{a}+0]",
                v[0], v[1], v[2], v[3]
            ));
            loads.push((p, v));
        }
        for (p, v) in loads {
            for (x, vx) in acc.iter().zip(v) {
                k.raw(format_args!("@{p} add.rn.f32 {x}, {x}, {vx}"));
            }
        }
    });
    let row = k.div(Ty::U32, e, rp.n);
    let col = k.rem(Ty::U32, e, rp.n);
    let mut out = Vec::new();
    for (j, &x) in acc.iter().enumerate() {
        // `reduce_kernel` adds its one lane's sum to 0 before scaling; so does this.
        let sum = k.mov(Ty::F32, 0.0f32);
        k.raw(format_args!("add.rn.f32 {sum}, {sum}, {x}"));
        let mut v = k.mul(Ty::F32, sum, rp.alpha);
        if has_c {
            let cj = k.add(Ty::U32, col, j as u32);
            let co = k.fma(Ty::U32, row, rp.c_rs, rp.c_off);
            let co = k.fma(Ty::U32, cj, rp.c_cs, co);
            let ca = k.addr(rp.c, co, 4);
            let cv = k.ld(Space::Global, Ty::F32, ca, 0);
            v = k.fma(Ty::F32, rp.beta, cv, v);
        }
        out.push(v);
    }
    let yi = k.fma(Ty::U32, row, rp.ldy, col);
    let yi = k.add(Ty::U32, yi, rp.y_off);
    let ya = k.addr(rp.y, yi, 4);
    k.raw(format_args!(
        "st.global.v4.f32 [{ya}+0], {{{}, {}, {}, {}}}",
        out[0], out[1], out[2], out[3]
    ));
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ptx::module;

    #[test]
    fn reduce4_kernel_moves_16_bytes_at_a_time() {
        for c in [false, true] {
            let text = module((9, 0), &[reduce4_kernel(c)]);
            assert_eq!(text.matches("ld.global.v4.f32").count(), 4, "{text}");
            assert_eq!(text.matches("st.global.v4.f32").count(), 1, "{text}");
            assert!(!text.contains(".approx"));
        }
    }

    #[test]
    fn reduce_kernel_generates() {
        for (c, h) in [
            (false, Elem::F32),
            (true, Elem::F32),
            (true, Elem::F16),
            (true, Elem::Bf16),
        ] {
            let text = module((9, 0), &[reduce_kernel(c, h, if c { 8 } else { 1 })]);
            assert!(text.contains("quorum_gemm_splitk_reduce"));
            assert!(!text.contains(".approx"));
        }
    }

    #[test]
    fn skinny_kernels_stream_b() {
        for trans in [false, true] {
            for (vec, elem, split) in [
                (true, Elem::F32, false),
                (false, Elem::F16, false),
                (false, Elem::Bf16, false),
                (true, Elem::F32, true),
            ] {
                let cfg = TileCfg {
                    variant: Variant::Skinny(4),
                    trans_a: false,
                    vec_a: vec,
                    b: BSrc::Strided { trans, vec },
                    has_c: !split,
                    elem,
                    split,
                };
                let text = module((9, 0), &[build_skinny(&cfg)]);
                assert!(!text.contains(".approx"));
                if vec {
                    assert!(text.contains("ld.global.nc.v4.f32"), "{text}");
                }
                if trans {
                    // Five butterfly steps per row.
                    assert_eq!(text.matches("shfl.sync.bfly.b32").count(), 5 * SKINNY_ROWS);
                } else {
                    assert!(
                        text.contains("bar.sync 0")
                            && text.contains(".shared .align 16 .b8 part[16384]")
                    );
                }
            }
        }
    }
}
