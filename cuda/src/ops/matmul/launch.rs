//! The GEMM launcher: one product's kernel chosen (skinny, tiled on the CUDA or tensor cores,
//! asynchronous tensor-core tile, naive), its tile plan and split along K (`plan.rs`), the split-K
//! reduction, and the launch. Every MatMul, Gemm and convolution of the family goes through
//! [`run_gemm`].
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use super::tile::{self, BSrc, GemmArgs, SKINNY_ROWS, TileCfg, Variant};
use super::{BOperand, Problem, invalid, plan, skinny, tc_async, u32of, wgmma};
use crate::ops::elem::Elem;
use crate::ops::simplify;
use crate::ptx;
use crate::{KResult, Run, blocks};
use quorum_core::backend::Arithmetic;
use quorum_core::tensor::DType;

type PtxCache = Mutex<HashMap<(TileCfg, (i32, i32)), Arc<String>>>;

/// The PTX of `cfg` for the device (generated once per process).
fn tile_ptx(cc: (i32, i32), cfg: &TileCfg) -> Arc<String> {
    static CACHE: OnceLock<PtxCache> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
    c.entry((*cfg, cc))
        .or_insert_with(|| {
            let text = ptx::module(cc, &[tile::build(cfg)]);
            // `wgmma` exists only in the architecture-specific target.
            Arc::new(if cfg.variant == Variant::Wgmma {
                text.replacen(".target sm_90\n", ".target sm_90a\n", 1)
            } else {
                text
            })
        })
        .clone()
}

/// The split-K reduction's module: [`skinny::reduce4_kernel`] with `vec4`, else
/// [`skinny::reduce_kernel`] with `lanes` lanes per output.
fn reduce_ptx(cc: (i32, i32), has_c: bool, elem: Elem, lanes: u32, vec4: bool) -> Arc<String> {
    type Cache = Mutex<HashMap<(bool, Elem, u32, bool, (i32, i32)), Arc<String>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
    c.entry((has_c, elem, lanes, vec4, cc))
        .or_insert_with(|| {
            let k = if vec4 {
                skinny::reduce4_kernel(has_c)
            } else {
                skinny::reduce_kernel(has_c, elem, lanes)
            };
            Arc::new(ptx::module(cc, &[k]))
        })
        .clone()
}

/// Whether vector loads of four elements are safe (16 bytes of f32, 8 of halves): leading dim and
/// every batch stride a multiple of 4 elements, base aligned to the load's size.
fn vec_ok(dtype: DType, ptr: u64, ld: usize, strides: &[usize]) -> bool {
    let bytes = 4 * dtype.size_in_memory() as u64;
    Elem::of(dtype).is_some()
        && ptr.is_multiple_of(bytes)
        && ld.is_multiple_of(4)
        && strides.iter().all(|s| s.is_multiple_of(4))
}

/// `QUORUM_CUDA_TF32=registers`: the register-staged tensor-core kernel everywhere, for f32 and halves
/// operands (to compare the two, and to bisect).
fn tc_async_off() -> bool {
    static OFF: OnceLock<bool> = OnceLock::new();
    *OFF.get_or_init(|| std::env::var("QUORUM_CUDA_TF32").is_ok_and(|v| v == "registers"))
}

/// `QUORUM_CUDA_F16=cores`: f16 and bf16 products on the CUDA cores (the tensor cores are the default on
/// sm_80 and later), to compare the two and to bisect.
fn f16_tc_off() -> bool {
    static OFF: OnceLock<bool> = OnceLock::new();
    *OFF.get_or_init(|| std::env::var("QUORUM_CUDA_F16").is_ok_and(|v| v == "cores"))
}

fn naive_requested() -> bool {
    static NAIVE: OnceLock<bool> = OnceLock::new();
    *NAIVE.get_or_init(|| std::env::var("QUORUM_CUDA_GEMM").is_ok_and(|v| v == "naive"))
}

/// Runs one GEMM problem on the run's stream.
pub(crate) fn run_gemm(run: &Run, p: &Problem) -> KResult<()> {
    run_gemm_with(run, p, None)
}

/// [`run_gemm`] with the tiled kernels' plan given (`None`: the cost model's choice). A plan is
/// ignored where the skinny or naive kernel runs.
pub(crate) fn run_gemm_with(run: &Run, p: &Problem, forced: Option<plan::Plan>) -> KResult<()> {
    // Grids are sized against the device's own SM count (132 on an H100/H200).
    let sms = (run.device.ctx.info.multiprocessors.max(1)) as usize;
    let nb: usize = p.batch.iter().product();
    if p.m == 0 || p.n == 0 || nb == 0 {
        return Ok(());
    }
    let elem = Elem::of(p.dtype).ok_or_else(|| invalid(format!("a GEMM of {}", p.dtype)))?;
    let es = elem.size() as u64;
    let half = elem.is_half();
    let i64s = |v: &Vec<usize>| v.iter().map(|&x| x as i64).collect::<Vec<i64>>();
    let (bdims, bstr) = simplify(&p.batch, &p.strides.clone().map(|s| i64s(&s)));
    let bstr: Vec<Vec<usize>> = bstr
        .iter()
        .map(|s| s.iter().map(|&x| x as usize).collect())
        .collect();
    let has_c = p.c.is_some() && p.beta != 0.0;
    let (c_ptr, c_rs, c_cs) = match p.c {
        Some(c) if has_c => c,
        _ => (0, 0, 0),
    };

    let strided = matches!(p.bop, BOperand::Strided { .. });
    // A launch may split K when one grid covers the batch with its splits (at most three batch dims
    // after simplifying, which drops dims of 1): the convolutions of a batch of small images and
    // the projections of a transformer are such GEMMs.
    let splittable = bdims.len() <= 3 && nb <= 65535;
    // With TF32 allowed, f32 products of the tiled kernels go to the tensor cores (the same tiles
    // and splits: their K steps divide the plan's chunks); the run declares the rounding. f16 and
    // bf16 products go there whatever the precision: both are TF32 values (f16: 10 mantissa bits,
    // a narrower exponent; bf16: 7 bits, the same exponent), so the tensor cores multiply them
    // exactly, and sum in f32 (truncated, as the tensor cores do: declared, and within the
    // standard bound).
    let tf32 = run.tf32_allowed() && p.dtype == DType::F32;
    let tc = tf32 || (half && run.cc() >= (8, 0) && !f16_tc_off());
    let (trans_b, ldb) = match p.bop {
        BOperand::Strided { ldb, trans } => (trans, ldb),
        BOperand::Im2col(_) => (false, 0),
    };
    let tiled = !naive_requested();
    // The skinny kernel uses 16-byte loads of A only when A is not transposed.
    let sa: Vec<usize> = bstr[0].clone();
    let vec_a = tiled && vec_ok(p.dtype, p.a, p.lda, &sa);
    let vec_b = tiled && strided && vec_ok(p.dtype, p.b, ldb, &bstr[1]);
    // Copies of 16 bytes of halves need rows of 8 (the vector loads' flags promise 4).
    let rows16 = |ptr: u64, ld: usize, strides: &[usize]| {
        !half
            || (ptr.is_multiple_of(16)
                && ld.is_multiple_of(8)
                && strides.iter().all(|s| s % 8 == 0))
    };
    // The 128×128 tensor-core tile copies its operands asynchronously where their rows allow
    // 16-byte copies; the cost model then weighs it at its own rates.
    let tc_async = tc
        && vec_a
        && vec_b
        && !tc_async_off()
        && rows16(p.a, p.lda, &sa)
        && rows16(p.b, ldb, &bstr[1]);
    let (variant, mut nsplit, mut kc) = if naive_requested() {
        (Variant::Naive, 1, p.k)
    } else if strided && p.m <= SKINNY_ROWS {
        // GEMV-like: split K when the columns alone leave SMs idle (aim at 4 blocks per SM).
        let (mut ns, mut kc) = (1, p.k);
        let cols = if matches!(p.bop, BOperand::Strided { trans: true, .. }) {
            8
        } else {
            128
        };
        let blocks = p.n.div_ceil(cols);
        if splittable && nb == 1 && blocks < 4 * sms && p.k >= 512 {
            let want = (4 * sms).div_ceil(blocks).min(p.k / 256).max(1);
            if want > 1 {
                kc = p.k.div_ceil(want).next_multiple_of(128);
                ns = p.k.div_ceil(kc);
            }
        }
        (Variant::Skinny(p.m.next_power_of_two() as u8), ns, kc)
    } else {
        let plan = forced.unwrap_or_else(|| {
            plan::choose(
                &plan::Dims {
                    m: p.m,
                    n: p.n,
                    k: p.k,
                    nb,
                    es: es as usize,
                    splittable,
                    tc_async,
                },
                sms,
            )
        });
        (plan.variant, plan.nsplit, plan.kc)
    };
    // A plan naming the wgmma tile takes it where it fits, else what the big tile becomes.
    let want_wgmma = variant == Variant::Wgmma;
    let variant = if want_wgmma { Variant::Big } else { variant };
    let (variant, promote) = match variant {
        Variant::Big if tc => (Variant::Tf32Big, true),
        Variant::Small if tc => (Variant::Tf32Small, false),
        v => (v, false),
    };
    // The tensor cores' sums are truncated, and f32 operands rounded to TF32: the run declares it.
    if matches!(
        variant,
        Variant::Tf32Big | Variant::Tf32Small | Variant::TcAsync
    ) {
        run.declare(if tf32 {
            Arithmetic::TF32
        } else {
            Arithmetic::TENSOR_CORES
        });
    }
    // A split launch covers the batch in one grid (its workspace offsets start at batch 0).
    if nsplit <= 1 || !splittable || nb * nsplit > 65535 {
        nsplit = 1;
        kc = p.k;
    }

    let bsrc = match p.bop {
        BOperand::Strided { .. } => BSrc::Strided {
            trans: trans_b,
            vec: vec_b,
        },
        BOperand::Im2col(_) => BSrc::Im2col,
    };
    let mut cfg = TileCfg {
        variant,
        trans_a: p.trans_a,
        vec_a,
        b: bsrc,
        has_c: has_c && nsplit == 1,
        elem,
        split: nsplit > 1,
    };
    // (A plan that names the register-staged tile keeps it: the benchmark compares the two.)
    if promote && tc_async && tc_async::fits(&cfg) {
        cfg.variant = Variant::TcAsync;
    }
    // Hopper's wgmma tile where it fits: when a plan names it, or on grids of at least four
    // blocks an SM with K of 256 or more (on an H100 it reached 2× the asynchronous tile at 4096³
    // and fell behind it on grids of a wave or two: `reports/cuda/tf32-notes.md`, call 13).
    if cfg.variant == Variant::TcAsync && wgmma::wgmma_enabled() && wgmma::fits(&cfg, run.cc()) {
        let grid = p.m.div_ceil(128) * p.n.div_ceil(128) * nb;
        if want_wgmma || (grid >= 4 * sms && p.k >= 256) {
            cfg.variant = Variant::Wgmma;
            wgmma::count_launch();
        }
    }
    let (bm, bn, _, _) = cfg.dims();
    let gx = blocks(p.n, bn as u32);
    let gy = blocks(p.m, bm as u32);
    if gy > 65535 {
        crate::decline!("GEMM with {} rows exceeds the grid", p.m);
    }
    let text = tile_ptx(run.cc(), &cfg);
    let name = cfg.name();
    let dynamic_shared = match cfg.variant {
        Variant::TcAsync => tc_async::shared_bytes(&cfg) as u32,
        Variant::Wgmma => wgmma::gemm_shared_bytes(wgmma::Pipe::chosen()) as u32,
        _ => 0,
    };

    // The workspace holds split s of batch b (batch dims flattened) at s · nb·m·n + b · m·n.
    let ws = if nsplit > 1 {
        Some(run.alloc(DType::F32, &[nsplit, nb, p.m, p.n])?)
    } else {
        None
    };
    let (y, y_end, ldy, ssy) = match &ws {
        Some(w) => (w.ptr(), w.end(), p.n, nb * p.m * p.n),
        None => (p.y, p.ends[3], p.ldy, 0),
    };
    if ws.is_some() {
        u32of(nsplit * ssy)?;
    }

    let mut args = GemmArgs {
        a: p.a,
        b: p.b,
        c: c_ptr,
        y,
        m: u32of(p.m)?,
        n: u32of(p.n)?,
        k: u32of(p.k)?,
        lda: u32of(p.lda)?,
        ldb: u32of(ldb)?,
        ldy: u32of(ldy)?,
        c_rs: u32of(c_rs)?,
        c_cs: u32of(c_cs)?,
        alpha: p.alpha,
        beta: p.beta,
        nsplit: nsplit as u32,
        kc: u32of(kc)?,
        ssy: u32of(ssy)?,
        im2col: match p.bop {
            BOperand::Im2col(g) => Some(g),
            _ => None,
        },
        ends: [p.ends[0], p.ends[1], p.ends[2], y_end],
        ..Default::default()
    };

    // The last (up to) three batch dims go to the kernel; outer ones are looped here.
    let r = bdims.len();
    let inner = r.saturating_sub(3);
    let kd: Vec<usize> = (0..3)
        .map(|i| if i + r >= 3 { bdims[i + r - 3] } else { 1 })
        .collect();
    let ks = |op: usize, i: usize| -> KResult<u32> {
        if i + r >= 3 {
            u32of(bstr[op][i + r - 3])
        } else {
            Ok(0)
        }
    };
    args.d1 = u32of(kd[1])?;
    args.d2 = u32of(kd[2])?;
    for i in 0..3 {
        args.sa[i] = ks(0, i)?;
        args.sb[i] = ks(1, i)?;
        args.sc[i] = ks(2, i)?;
        args.sy[i] = ks(3, i)?;
    }
    // Y's own batch strides, for the reduction; a split launch writes the workspace's instead.
    let y_batch = args.sy;
    if ws.is_some() {
        let mn = u32of(p.m * p.n)?;
        args.sy = [
            u32of(kd[1] * kd[2] * p.m * p.n)?,
            u32of(kd[2] * p.m * p.n)?,
            mn,
        ];
    }
    let per_z = kd[1] * kd[2] * nsplit;
    if per_z > 65535 {
        crate::decline!("GEMM batch of {nb} exceeds the grid");
    }
    let chunk = (65535 / per_z).max(1);
    let outer: usize = bdims[..inner].iter().product();
    let outer_dims = &bdims[..inner];
    for o in 0..outer {
        // Element offsets of outer batch index `o` for each operand.
        let mut off = [0usize; 4];
        let mut rest = o;
        for d in (0..inner).rev() {
            let i = rest % outer_dims[d];
            rest /= outer_dims[d];
            for (op, x) in off.iter_mut().enumerate() {
                *x += i * bstr[op][d];
            }
        }
        let mut z0 = 0;
        while z0 < kd[0] {
            let zn = chunk.min(kd[0] - z0);
            let mut a = args.clone();
            let zo = |op: usize| off[op] + z0 * if r >= 3 { bstr[op][r - 3] } else { 0 };
            a.a = p.a + zo(0) as u64 * es;
            a.b = p.b + zo(1) as u64 * es;
            if has_c {
                a.c = c_ptr + zo(2) as u64 * es;
            }
            if ws.is_none() {
                a.y = p.y + zo(3) as u64 * es;
            }
            run.launch_shared(
                &text,
                &name,
                (gx, gy, (zn * per_z) as u32),
                (256, 1, 1),
                dynamic_shared,
                &a.args(),
            )?;
            z0 += zn;
        }
    }

    if let Some(w) = ws {
        // Many splits: 8 lanes per output share the sum; few: one thread per output, or per four
        // adjacent outputs where f32 rows are whole 16-byte vectors.
        let lanes = if nsplit >= 16 { 8u32 } else { 1 };
        let vec4 = lanes == 1
            && !half
            && p.n.is_multiple_of(4)
            && p.ldy.is_multiple_of(4)
            && p.y.is_multiple_of(16)
            && w.ptr() % 16 == 0
            && y_batch.iter().all(|s| s % 4 == 0);
        let w_arg = w.arg_in();
        let w = run.scratch_before_last_read(w);
        let text = reduce_ptx(run.cc(), has_c, elem, lanes, vec4);
        let name = if vec4 {
            format!("quorum_gemm_splitk_reduce_c{}_h0_v4", has_c as u8)
        } else {
            format!(
                "quorum_gemm_splitk_reduce_c{}_h{}_l{lanes}",
                has_c as u8,
                elem.tag()
            )
        };
        let total = p.m * p.n;
        let per_block = if vec4 { 1024 } else { 256 / lanes };
        run.launch_shared(
            &text,
            &name,
            (blocks(total, per_block), nb as u32, 1),
            (256, 1, 1),
            0,
            &[
                w_arg,
                crate::driver::Arg::In(c_ptr, tile::span(c_ptr, p.ends[2])),
                crate::driver::Arg::Out(p.y, tile::span(p.y, p.ends[3])),
                crate::driver::Arg::U32(u32of(p.m)?),
                crate::driver::Arg::U32(u32of(p.n)?),
                crate::driver::Arg::U32(u32of(p.ldy)?),
                crate::driver::Arg::U32(u32of(c_rs)?),
                crate::driver::Arg::U32(u32of(c_cs)?),
                crate::driver::Arg::F32(p.alpha),
                crate::driver::Arg::F32(p.beta),
                crate::driver::Arg::U32(nsplit as u32),
                crate::driver::Arg::U32(u32of(ssy)?),
                crate::driver::Arg::U32(args.d1),
                crate::driver::Arg::U32(args.d2),
                crate::driver::Arg::U32(args.sc[0]),
                crate::driver::Arg::U32(args.sc[1]),
                crate::driver::Arg::U32(args.sc[2]),
                crate::driver::Arg::U32(y_batch[0]),
                crate::driver::Arg::U32(y_batch[1]),
                crate::driver::Arg::U32(y_batch[2]),
            ],
        )?;
        if let Some(w) = w {
            run.release(w, &[]);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vec_loads_need_alignment() {
        assert!(vec_ok(DType::F32, 256, 8, &[32, 0]));
        assert!(!vec_ok(DType::F32, 260, 8, &[]));
        assert!(!vec_ok(DType::F32, 256, 6, &[]));
        assert!(!vec_ok(DType::F32, 256, 8, &[6]));
        // f16: 8-byte loads of four elements.
        assert!(vec_ok(DType::F16, 264, 8, &[4]));
        assert!(!vec_ok(DType::F16, 260, 8, &[]));
        assert!(!vec_ok(DType::F16, 256, 6, &[]));
        assert!(vec_ok(DType::BF16, 256, 8, &[]));
        assert!(!vec_ok(DType::F64, 256, 8, &[]));
    }
}
