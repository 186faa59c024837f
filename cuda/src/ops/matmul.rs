//! CUDA kernels: the `matmul` family (MatMul, Gemm), and the GEMM launcher that Conv reuses.
//!
//! Every product runs through one kernel of `matmul/tile.rs` / `matmul/skinny.rs`:
//! - at most 4 rows with a strided B: the skinny kernel (B streamed once with 16-byte loads), split
//!   along K when its columns alone would leave SMs idle;
//! - else the register-tiled kernel, 128×128 or 64×64 tiles, whole or split along K (partials in an
//!   f32 workspace, then a reduction that applies alpha, beta·C and the output dtype), as the cost
//!   model of `matmul/plan.rs` chooses for the shape and the device's SM count;
//! - or the naive kernel when `QUORUM_CUDA_GEMM=naive` is set (a reference for bisecting).
//!
//! `sgemm` runs a plain (batched) product on device tensors without a session, for benchmarks;
//! `sgemm_plan` the same with the tiled kernels' plan forced.
pub mod plan;
pub mod skinny;
pub mod tc;
pub mod tc_async;
pub mod tile;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use self::tile::{BSrc, GemmArgs, Im2col, SKINNY_ROWS, TileCfg, Variant};
use super::elem::Elem;
use super::{broadcast_strides, require_u32_len, simplify, strides};
use crate::memory::DevTensor;
use crate::ptx;
use crate::{CudaKernel, Inputs, KError, KResult, Run, blocks, dev_input};
use quorum_core::backend::Arithmetic;
use quorum_core::error::OpError;
use quorum_core::ir::Node;
use quorum_core::ops::OpCtx;
use quorum_core::tensor::DType;

/// The kernel for `node` if this family owns its op type.
pub fn claim(node: &Node) -> Option<Result<CudaKernel, String>> {
    match node.op_type.as_str() {
        "MatMul" => Some(Ok(matmul as CudaKernel)),
        "Gemm" => Some(Ok(gemm as CudaKernel)),
        "Einsum" => Some(Ok(einsum as CudaKernel)),
        _ => None,
    }
}

/// The kernel for one of Quorum's own (`com.quorum`) ops this family runs: MatMulBias.
pub fn claim_fused(node: &Node) -> Option<CudaKernel> {
    (node.op_type == "MatMulBias").then_some(matmul_bias as CudaKernel)
}

fn invalid(msg: String) -> KError {
    KError::Op(OpError::Invalid(msg))
}

/// The common float dtype of `ts` (f32, f16 or bf16), or a decline.
pub(crate) fn float_dtype(what: &str, ts: &[&DevTensor]) -> KResult<DType> {
    let d = ts[0].dtype;
    if let Some(o) = ts.iter().find(|t| t.dtype != d) {
        return Err(invalid(format!(
            "{what}: operands differ in dtype: {} and {}",
            d, o.dtype
        )));
    }
    if Elem::of(d).is_none() {
        crate::decline!("{what} of {d} (the CUDA kernels take f32, f16 and bf16)");
    }
    Ok(d)
}

/// A size as a kernel's u32 (sizes past 2^31 decline: the kernels index in 32 bits).
fn u32of(x: usize) -> KResult<u32> {
    u32::try_from(x)
        .ok()
        .filter(|&v| v < (1u32 << 31))
        .ok_or_else(|| KError::Decline(format!("{x} exceeds 32-bit indexing")))
}

/// How a GEMM reads its B operand.
#[derive(Clone, Copy, Debug)]
pub(crate) enum BOperand {
    /// `b[k·ldb + n]`, or `b[n·ldb + k]` when `trans`.
    Strided { ldb: usize, trans: bool },
    /// Gathered from a convolution input (channel-major planes of the batch's group).
    Im2col(Im2col),
}

/// One (batched) GEMM over device buffers: `Y = alpha · A·B + beta · C`.
pub(crate) struct Problem {
    pub dtype: DType,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: u64,
    pub lda: usize,
    pub trans_a: bool,
    pub b: u64,
    pub bop: BOperand,
    /// C and its element strides along m and n (0 where broadcast).
    pub c: Option<(u64, usize, usize)>,
    pub y: u64,
    pub ldy: usize,
    pub alpha: f32,
    pub beta: f32,
    /// Batch dims and, per dim, the element strides of A, B, C and Y (0 where broadcast).
    pub batch: Vec<usize>,
    pub strides: [Vec<usize>; 4],
    /// Where the tensors A, B, C and Y point into end (exclusive addresses; see [`ends`]): a launch
    /// declares each operand from its own (batch-offset) pointer to there.
    pub ends: [u64; 4],
}

/// The `ends` of a [`Problem`] over these tensors (C absent: 0).
pub(crate) fn ends(a: &DevTensor, b: &DevTensor, c: Option<&DevTensor>, y: &DevTensor) -> [u64; 4] {
    [a.end(), b.end(), c.map_or(0, DevTensor::end), y.end()]
}

type PtxCache = Mutex<HashMap<(TileCfg, (i32, i32)), Arc<String>>>;

/// The PTX of `cfg` for the device (generated once per process).
fn tile_ptx(cc: (i32, i32), cfg: &TileCfg) -> Arc<String> {
    static CACHE: OnceLock<PtxCache> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
    c.entry((*cfg, cc))
        .or_insert_with(|| Arc::new(ptx::module(cc, &[tile::build(cfg)])))
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
    let (bm, bn, _, _) = cfg.dims();
    let gx = blocks(p.n, bn as u32);
    let gy = blocks(p.m, bm as u32);
    if gy > 65535 {
        crate::decline!("GEMM with {} rows exceeds the grid", p.m);
    }
    let text = tile_ptx(run.cc(), &cfg);
    let name = cfg.name();
    let dynamic_shared = if cfg.variant == Variant::TcAsync {
        tc_async::shared_bytes(&cfg) as u32
    } else {
        0
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

/// Strides of C (shape `cs`, rank ≤ 2) broadcast unidirectionally to `[m, n]`.
fn c_strides(cs: &[usize], m: usize, n: usize) -> KResult<(usize, usize)> {
    let bad = || {
        invalid(format!(
            "Gemm: C of shape {cs:?} cannot broadcast to [{m}, {n}]"
        ))
    };
    if cs.len() > 2 {
        return Err(bad());
    }
    let mut full = vec![1usize; 2 - cs.len()];
    full.extend_from_slice(cs);
    if (full[0] != m && full[0] != 1) || (full[1] != n && full[1] != 1) {
        return Err(bad());
    }
    let st = broadcast_strides(&full, &[m, n]);
    Ok((st[0] as usize, st[1] as usize))
}

/// `alpha · op(A) · op(B) + beta · C` on device tensors, for benchmarks and other kernels (no
/// session needed: any [`Run`] will do).
///
/// A holds `[batch, M, K]` (`[batch, K, M]` when `trans_a`) or a single matrix shared by every batch;
/// B likewise `[batch, K, N]` (`[batch, N, K]` when `trans_b`). C, if given, broadcasts to `[M, N]`
/// (the same for every batch). The result is `[M, N]` when `batch` is 1, else `[batch, M, N]`.
#[allow(clippy::too_many_arguments)]
pub fn sgemm(
    run: &Run,
    a: &DevTensor,
    b: &DevTensor,
    c: Option<&DevTensor>,
    m: usize,
    n: usize,
    k: usize,
    trans_a: bool,
    trans_b: bool,
    alpha: f32,
    beta: f32,
    batch: usize,
) -> KResult<DevTensor> {
    sgemm_plan(
        run, a, b, c, m, n, k, trans_a, trans_b, alpha, beta, batch, None,
    )
}

/// [`sgemm`] with the tiled kernels' plan forced (`None`: the cost model's choice), for the plan
/// benchmark and for tests that run every candidate.
#[allow(clippy::too_many_arguments)]
pub fn sgemm_plan(
    run: &Run,
    a: &DevTensor,
    b: &DevTensor,
    c: Option<&DevTensor>,
    m: usize,
    n: usize,
    k: usize,
    trans_a: bool,
    trans_b: bool,
    alpha: f32,
    beta: f32,
    batch: usize,
    plan: Option<plan::Plan>,
) -> KResult<DevTensor> {
    let mut ts = vec![a, b];
    ts.extend(c);
    let dtype = float_dtype("sgemm", &ts)?;
    let share = |t: &DevTensor, mat: usize, what: &str| -> KResult<usize> {
        if t.len() == mat {
            Ok(0)
        } else if t.len() == mat * batch {
            Ok(mat)
        } else {
            Err(invalid(format!(
                "sgemm: {what} has {} elements, expected {mat} or {}",
                t.len(),
                mat * batch
            )))
        }
    };
    let sa = share(a, m * k, "A")?;
    let sb = share(b, k * n, "B")?;
    let shape = if batch == 1 {
        vec![m, n]
    } else {
        vec![batch, m, n]
    };
    require_u32_len(&shape)?;
    let y = run.alloc(dtype, &shape)?;
    let cst = match c {
        Some(c) => Some((c.ptr(), c_strides(&c.shape, m, n)?)),
        None => None,
    };
    run_gemm_with(
        run,
        &Problem {
            dtype,
            m,
            n,
            k,
            a: a.ptr(),
            lda: if trans_a { m } else { k },
            trans_a,
            b: b.ptr(),
            bop: BOperand::Strided {
                ldb: if trans_b { k } else { n },
                trans: trans_b,
            },
            c: cst.map(|(p, (rs, cs))| (p, rs, cs)),
            y: y.ptr(),
            ldy: n,
            alpha,
            beta,
            batch: vec![batch],
            strides: [vec![sa], vec![sb], vec![0], vec![m * n]],
            ends: ends(a, b, c, &y),
        },
        plan,
    )?;
    Ok(y)
}

fn matmul(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    matmul_with_bias(ctx, run, inputs, None)
}

/// Einsum: the shared plan of permutations and GEMMs (`quorum_core::device::einsum`).
fn einsum(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    quorum_core::device::einsum::k_einsum(ctx, run, inputs)
}

/// `com.quorum` MatMulBias: the MatMul with the bias as the GEMM's C (broadcast along the rows),
/// added as each output is stored or in the split-K reduction.
fn matmul_bias(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let bias = dev_input(inputs, 2)?;
    matmul_with_bias(ctx, run, inputs, Some(&bias))
}

fn matmul_with_bias(
    ctx: &OpCtx,
    run: &Run,
    inputs: &dyn Inputs,
    bias: Option<&DevTensor>,
) -> KResult<Vec<DevTensor>> {
    let a = dev_input(inputs, 0)?;
    let b = dev_input(inputs, 1)?;
    Ok(vec![matmul_tensors(Some(ctx), run, &a, &b, bias)?])
}

/// MatMul (with MatMulBias's bias) of device tensors by numpy's rules; `ctx`, where a node asks,
/// bounds the output's size.
pub(crate) fn matmul_tensors(
    ctx: Option<&OpCtx>,
    run: &Run,
    a: &DevTensor,
    b: &DevTensor,
    bias: Option<&DevTensor>,
) -> KResult<DevTensor> {
    if let Some(c) = bias
        && let Some(e) = quorum_core::ops::matmul_bias::shape_error(&a.shape, &b.shape, &c.shape)
    {
        return Err(invalid(e));
    }
    let mut operands = vec![a, b];
    operands.extend(bias);
    let what = if bias.is_some() {
        "MatMulBias"
    } else {
        "MatMul"
    };
    let dtype = float_dtype(what, &operands)?;
    let (ash, bsh) = (a.shape.clone(), b.shape.clone());
    let quorum_core::ops::matmul::MatMulShape {
        m,
        k,
        n,
        a_batch,
        b_batch,
        batch,
        out_shape,
    } = quorum_core::ops::matmul::matmul_shape(&ash, &bsh)?;
    let (a_batch, b_batch) = (a_batch.as_slice(), b_batch.as_slice());
    if let Some(ctx) = ctx {
        ctx.check_alloc(&out_shape, dtype.size_in_memory())?;
    }
    require_u32_len(&ash)?;
    require_u32_len(&bsh)?;
    require_u32_len(&out_shape)?;
    let y = run.alloc(dtype, &out_shape)?;
    if y.is_empty() {
        return Ok(y);
    }
    let scale = |v: Vec<i64>, s: usize| v.into_iter().map(|x| x as usize * s).collect::<Vec<_>>();
    let mut sa = scale(broadcast_strides(a_batch, &batch), m * k);
    let sb = scale(broadcast_strides(b_batch, &batch), k * n);
    let sy: Vec<usize> = strides(&batch).iter().map(|&s| s * m * n).collect();
    let mut m_eff = m;
    let mut bdims = batch.clone();
    // B shared by every batch and A contiguous over them: one tall product.
    let nb: usize = batch.iter().product();
    // A dim of size 1 moves no offset whatever its stride (broadcasting gives it 0): [1, 56, 56, 96]
    // × [96, 384] (a Linear over NHWC maps) is one [3136, 96] × [96, 384] product, not 56 of [56, 96].
    let a_full = sa
        .iter()
        .zip(strides(&batch))
        .zip(&batch)
        .all(|((&s, full), &d)| d == 1 || s == full * m * k);
    if nb > 1 && sb.iter().all(|&s| s == 0) && a_full && (nb * m).div_ceil(64) <= 65535 {
        m_eff = nb * m;
        bdims.clear();
        sa.clear();
    }
    let nbd = bdims.len();
    let strides4 = if bdims.is_empty() {
        [vec![], vec![], vec![], vec![]]
    } else {
        [sa, sb, vec![0; nbd], sy]
    };
    // An operand with a single row or column is contiguous along k whatever its layout.
    let bop = if n == 1 {
        BOperand::Strided {
            ldb: k,
            trans: true,
        }
    } else {
        BOperand::Strided {
            ldb: n,
            trans: false,
        }
    };
    run_gemm(
        run,
        &Problem {
            dtype,
            m: m_eff,
            n,
            k,
            a: a.ptr(),
            lda: k,
            trans_a: false,
            b: b.ptr(),
            bop,
            c: bias.map(|c| (c.ptr(), 0, 1)),
            y: y.ptr(),
            ldy: n,
            alpha: 1.0,
            beta: if bias.is_some() { 1.0 } else { 0.0 },
            batch: bdims,
            strides: strides4,
            ends: ends(a, b, bias, &y),
        },
    )?;
    Ok(y)
}

fn gemm(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let a = dev_input(inputs, 0)?;
    let b = dev_input(inputs, 1)?;
    let dtype = float_dtype("Gemm", &[&a, &b])?;
    let ta = ctx.attr_i("transA", 0)? != 0;
    let tb = ctx.attr_i("transB", 0)? != 0;
    let alpha = ctx.attr_f("alpha", 1.0)?;
    let beta = ctx.attr_f("beta", 1.0)?;
    let [m, k, n] = quorum_core::device::forms::gemm_dims(&a.shape, &b.shape, ta, tb)?;
    if inputs.present(2)
        && let Some(cd) = inputs.dtype(2)
        && cd != dtype
    {
        return Err(invalid(format!("Gemm: C has dtype {cd} but A has {dtype}")));
    }
    ctx.check_alloc(&[m, n], dtype.size_in_memory())?;
    require_u32_len(&a.shape)?;
    require_u32_len(&b.shape)?;
    require_u32_len(&[m, n])?;
    let y = run.alloc(dtype, &[m, n])?;
    if y.is_empty() {
        return Ok(vec![y]);
    }
    let c = if inputs.present(2) && beta != 0.0 {
        let c = dev_input(inputs, 2)?;
        let (rs, cs) = c_strides(&c.shape, m, n)?;
        Some((c, rs, cs))
    } else {
        None
    };
    run_gemm(
        run,
        &Problem {
            dtype,
            m,
            n,
            k,
            a: a.ptr(),
            lda: a.shape[1],
            trans_a: ta,
            b: b.ptr(),
            bop: BOperand::Strided {
                ldb: b.shape[1],
                trans: tb,
            },
            c: c.as_ref().map(|(c, rs, cs)| (c.ptr(), *rs, *cs)),
            y: y.ptr(),
            ldy: n,
            alpha,
            beta,
            batch: vec![],
            strides: [vec![], vec![], vec![], vec![]],
            ends: ends(&a, &b, c.as_ref().map(|(c, _, _)| c), &y),
        },
    )?;
    Ok(vec![y])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_broadcast_strides() {
        assert_eq!(c_strides(&[], 3, 4).unwrap(), (0, 0));
        assert_eq!(c_strides(&[4], 3, 4).unwrap(), (0, 1));
        assert_eq!(c_strides(&[1], 3, 4).unwrap(), (0, 0));
        assert_eq!(c_strides(&[3, 1], 3, 4).unwrap(), (1, 0));
        assert_eq!(c_strides(&[1, 4], 3, 4).unwrap(), (0, 1));
        assert_eq!(c_strides(&[3, 4], 3, 4).unwrap(), (4, 1));
        assert!(c_strides(&[3], 3, 4).is_err());
        assert!(c_strides(&[2, 3, 4], 3, 4).is_err());
        // M = 1: a [1, N] C has stride 0 along m either way.
        assert_eq!(c_strides(&[1, 4], 1, 4).unwrap(), (0, 1));
    }

    #[test]
    fn claims_matmul_and_gemm_only() {
        let node = |op: &str| Node {
            name: "n".into(),
            op_type: op.into(),
            domain: String::new(),
            opset: 13,
            inputs: vec![],
            outputs: vec![],
            attrs: Default::default(),
        };
        assert!(matches!(claim(&node("MatMul")), Some(Ok(_))));
        assert!(matches!(claim(&node("Gemm")), Some(Ok(_))));
        assert!(claim(&node("Conv")).is_none());
    }

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
