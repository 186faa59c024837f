//! CUDA kernel: `com.quorum` FusedAttention (`quorum_core::ops::attention::fused`), the block
//! `softmax(scale · Q·Kᵀ + mask)·V` in one pass that never writes the scores to memory.
//!
//! One block of four warps takes [`ROWS`] query rows of one batch element; each warp four of them.
//! The block walks the keys in tiles of 32 (one per lane): it stages the tile's K and V in shared
//! memory as f32 (K padded a column so that the lanes' rows fall in different banks), each lane
//! computes its key's score for the warp's four rows (Q, staged with every scale of the chain folded
//! into one factor, read from shared memory by broadcast), adds the mask, and the warp keeps a running maximum and rescales its sums
//! when it grows (online softmax). The probabilities are passed across the warp by shuffles into
//! the rows' outputs, each lane holding the columns `lane + 32·c`; every lane keeps its own part
//! of the rows' sums, added across the warp once at the end. Everything is f32: halves are widened
//! as they are staged and the output rounded once. Exponentials are `ex2.approx` of the argument
//! times log₂e (within the few ulps the oracles' bound allows, `verify/attention.rs`).
//!
//! Shapes are baked into the PTX (one module per call shape, as the other kernels); Q, K and V must
//! be dense; batch dims broadcast by MatMul's rules and the mask by numpy's (stride 0 where
//! broadcast). Widths past [`MAX_WIDTH`] decline, and the node runs on the CPU.
//!
//! Which kernel runs ([`Route`], `QUORUM_CUDA_ATTENTION`): `tc` (the default), the tensor-core
//! kernel (`tc.rs`) for f16 and bf16 up to D, Dv ≤ 128 and the chain's own kernels on the device
//! ([`chain`]) otherwise; `chain`, the chain for every call; `one-pass`, this kernel for every
//! call.
use super::elem::Elem;
use super::matmul::float_dtype;
use super::reduce::rows::load;
use super::{broadcast_strides, offsets, require_u32_len};
use crate::ptx::{Cmp, Kernel, Reg, Space, Ty, module};
use crate::{DevTensor, Inputs, KError, KResult, Run, dev_input};
use quorum_core::backend::Arithmetic;
use quorum_core::error::OpError;
use quorum_core::ops::OpCtx;
use quorum_core::ops::attention::fused::{Dims, Form, dims};

mod tc;

/// Query rows per block (four warps of four rows).
pub const ROWS: usize = 16;
/// Rows per warp.
const WARP_ROWS: usize = 4;
/// Keys per tile: one per lane.
const TILE: usize = 32;
/// The widest D and Dv the kernel takes (shared memory and registers grow with them).
pub const MAX_WIDTH: usize = 256;
const THREADS: u32 = 128;

/// One call's layout: sizes, element type, scale and each operand's batch strides.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub e: Elem,
    pub dims: Dims,
    /// K given as `[T, D]` rows (else `Kᵀ [D, T]`).
    pub k_rows: bool,
    /// Every scale of the chain (on Q, on Kᵀ, on the scores) as one factor, applied to Q as it is
    /// staged.
    pub factor: Option<f32>,
    /// Element strides along the output's batch dims, for Q, K, V and (if present) the mask.
    pub batch_strides: Vec<Vec<i64>>,
    /// The mask's element strides along the scores' rows and columns.
    pub mask_rc: Option<(i64, i64)>,
    /// Q and K start on 4-byte boundaries (the tensor-core kernel then reads pairs of halves
    /// in one load where their rows have an even length).
    pub aligned: bool,
}

impl Plan {
    fn nc(&self) -> usize {
        self.dims.dv.div_ceil(TILE)
    }

    /// Dynamic shared memory: Q's rows, K's tile (padded) and V's tile (columns rounded up to a
    /// multiple of 32, zero beyond Dv).
    pub fn shared_bytes(&self) -> usize {
        let d = self.dims.d;
        4 * (ROWS * d + TILE * (d + 1) + TILE * self.nc() * TILE)
    }
}

/// The kernel for `p`: parameters q, k, v, mask (null when absent), y.
pub fn kernel(p: &Plan) -> Kernel {
    let Dims { s, t, d, dv, .. } = p.dims;
    let nc = p.nc();
    let pitch_v = nc * TILE;
    let mut k = Kernel::new("fused_attention");
    let q = k.param_ptr("q");
    let kk = k.param_ptr("k");
    let v = k.param_ptr("v");
    let mask = k.param_ptr("mask");
    let y = k.param_ptr("y");
    let smem = k.extern_shared();
    let base = k.shared_addr(&smem);
    let qs = base;
    let ks = k.add(Ty::U32, base, (4 * ROWS * d) as u32);
    let vs = k.add(Ty::U32, ks, (4 * TILE * (d + 1)) as u32);
    let tid = k.special("tid.x");
    let lane = k.and(Ty::U32, tid, 31u32);
    let warp = k.shr(Ty::U32, tid, 5u32);
    let row0 = k.special("ctaid.x");
    let row0 = k.mul(Ty::U32, row0, ROWS as u32);
    let b = k.special("ctaid.y");
    let offs = offsets(&mut k, b, &p.dims.batch, &p.batch_strides);
    let (qo, ko, vo) = (offs[0], offs[1], offs[2]);
    let mo = offs.get(3).copied();

    // Q's rows, scaled, into shared memory (zeros past S).
    k.for_range(Ty::U32, tid, (ROWS * d) as u32, THREADS, |k, i| {
        let r = k.div(Ty::U32, i, d as u32);
        let c = k.rem(Ty::U32, i, d as u32);
        let row = k.add(Ty::U32, row0, r);
        let val = k.mov(Ty::F32, 0.0f32);
        let inside = k.setp(Cmp::Lt, Ty::U32, row, s as u32);
        k.when(inside, |k| {
            let at = k.fma(Ty::U32, row, d as u32, c);
            let at = k.add(Ty::U32, at, qo);
            let x = load(k, p.e, q, at);
            let x = match p.factor {
                Some(f) => k.mul(Ty::F32, x, f),
                None => x,
            };
            k.assign(val, x);
        });
        let sa = k.shl(Ty::U32, i, 2u32);
        let sa = k.add(Ty::U32, qs, sa);
        k.st(Space::Shared, sa, 0, val);
    });

    let neg_inf = f32::NEG_INFINITY;
    let m: Vec<Reg> = (0..WARP_ROWS).map(|_| k.mov(Ty::F32, neg_inf)).collect();
    let l: Vec<Reg> = (0..WARP_ROWS).map(|_| k.mov(Ty::F32, 0.0f32)).collect();
    let o: Vec<Vec<Reg>> = (0..WARP_ROWS)
        .map(|_| (0..nc).map(|_| k.mov(Ty::F32, 0.0f32)).collect())
        .collect();
    // This warp's rows (global), and whether each is inside S.
    let wrow = k.fma(Ty::U32, warp, WARP_ROWS as u32, row0);
    let rows: Vec<Reg> = (0..WARP_ROWS)
        .map(|r| k.add(Ty::U32, wrow, r as u32))
        .collect();
    let tiles = t.div_ceil(TILE);
    k.for_range(Ty::U32, 0u32, tiles as u32, 1u32, |k, tile| {
        let key0 = k.mul(Ty::U32, tile, TILE as u32);
        k.bar_sync();
        // K's tile: walk it so that consecutive threads read consecutive memory.
        k.for_range(Ty::U32, tid, (TILE * d) as u32, THREADS, |k, i| {
            let (j, c) = if p.k_rows {
                (k.div(Ty::U32, i, d as u32), k.rem(Ty::U32, i, d as u32))
            } else {
                (
                    k.rem(Ty::U32, i, TILE as u32),
                    k.div(Ty::U32, i, TILE as u32),
                )
            };
            let key = k.add(Ty::U32, key0, j);
            let val = k.mov(Ty::F32, 0.0f32);
            let inside = k.setp(Cmp::Lt, Ty::U32, key, t as u32);
            k.when(inside, |k| {
                let at = if p.k_rows {
                    k.fma(Ty::U32, key, d as u32, c)
                } else {
                    k.fma(Ty::U32, c, t as u32, key)
                };
                let at = k.add(Ty::U32, at, ko);
                let x = load(k, p.e, kk, at);
                k.assign(val, x);
            });
            let sa = k.fma(Ty::U32, j, (d + 1) as u32, c);
            let sa = k.shl(Ty::U32, sa, 2u32);
            let sa = k.add(Ty::U32, ks, sa);
            k.st(Space::Shared, sa, 0, val);
        });
        // V's tile, zero past T and past Dv.
        k.for_range(Ty::U32, tid, (TILE * pitch_v) as u32, THREADS, |k, i| {
            let j = k.div(Ty::U32, i, pitch_v as u32);
            let c = k.rem(Ty::U32, i, pitch_v as u32);
            let key = k.add(Ty::U32, key0, j);
            let val = k.mov(Ty::F32, 0.0f32);
            let in_t = k.setp(Cmp::Lt, Ty::U32, key, t as u32);
            let in_c = k.setp(Cmp::Lt, Ty::U32, c, dv as u32);
            let inside = k.pred_and(in_t, in_c);
            k.when(inside, |k| {
                let at = k.fma(Ty::U32, key, dv as u32, c);
                let at = k.add(Ty::U32, at, vo);
                let x = load(k, p.e, v, at);
                k.assign(val, x);
            });
            let sa = k.shl(Ty::U32, i, 2u32);
            let sa = k.add(Ty::U32, vs, sa);
            k.st(Space::Shared, sa, 0, val);
        });
        k.bar_sync();

        // Scores of this lane's key for the warp's rows.
        let acc: Vec<Reg> = (0..WARP_ROWS).map(|_| k.mov(Ty::F32, 0.0f32)).collect();
        let krow = k.mul(Ty::U32, lane, (4 * (d + 1)) as u32);
        let krow = k.add(Ty::U32, ks, krow);
        let qrow = k.mul(Ty::U32, warp, (4 * WARP_ROWS * d) as u32);
        let qrow = k.add(Ty::U32, qs, qrow);
        for c in 0..d {
            let kv = k.ld(Space::Shared, Ty::F32, krow, 4 * c as i64);
            for (r, &a) in acc.iter().enumerate() {
                let qv = k.ld(Space::Shared, Ty::F32, qrow, (4 * (r * d + c)) as i64);
                k.fma_acc(a, qv, kv);
            }
        }
        let vrow = k.shl(Ty::U32, lane, 2u32);
        let vrow = k.add(Ty::U32, vs, vrow);
        let key = k.add(Ty::U32, key0, lane);
        let key_in = k.setp(Cmp::Lt, Ty::U32, key, t as u32);
        for r in 0..WARP_ROWS {
            let x = acc[r];
            if let (Some(mo), Some((rs, cs))) = (mo, p.mask_rc) {
                let row_in = k.setp(Cmp::Lt, Ty::U32, rows[r], s as u32);
                let both = k.pred_and(row_in, key_in);
                k.when(both, |k| {
                    let at = k.mul(Ty::U32, rows[r], rs as u32);
                    let at = k.fma(Ty::U32, key, cs as u32, at);
                    let at = k.add(Ty::U32, at, mo);
                    let mv = load(k, p.e, mask, at);
                    let sum = k.add(Ty::F32, x, mv);
                    k.assign(x, sum);
                });
            }
            let xs = k.selp(Ty::F32, x, neg_inf, key_in);
            // The tile's maximum across the warp (NaN propagates), then the running one.
            let mut tmax = xs;
            for sh in [16u32, 8, 4, 2, 1] {
                let other = k.shfl_bfly(tmax, sh);
                tmax = super::reduce::rows::max_nan(k, tmax, other);
            }
            let m_new = super::reduce::rows::max_nan(k, m[r], tmax);
            let dead = k.setp(Cmp::Eq, Ty::F32, m_new, neg_inf);
            let arg = k.sub(Ty::F32, m[r], m_new);
            let arg = k.mul(Ty::F32, arg, std::f32::consts::LOG2_E);
            let corr = k.unary("ex2.approx.ftz", Ty::F32, arg);
            let corr = k.selp(Ty::F32, 1.0f32, corr, dead);
            let arg = k.sub(Ty::F32, xs, m_new);
            let arg = k.mul(Ty::F32, arg, std::f32::consts::LOG2_E);
            let pj = k.unary("ex2.approx.ftz", Ty::F32, arg);
            let pj = k.selp(Ty::F32, 0.0f32, pj, dead);
            let lr = k.fma(Ty::F32, l[r], corr, pj);
            k.assign(l[r], lr);
            k.assign(m[r], m_new);
            for &oc in &o[r] {
                let t2 = k.mul(Ty::F32, oc, corr);
                k.assign(oc, t2);
            }
            // O += P·V: key jj's probability from lane jj.
            for jj in 0..TILE {
                let pb = k.reg(Ty::F32);
                k.raw(format_args!(
                    "shfl.sync.idx.b32 {pb}, {pj}, {jj}, 31, 0xffffffff"
                ));
                for (c, &oc) in o[r].iter().enumerate() {
                    let off = 4 * (jj * pitch_v + c * TILE) as i64;
                    let vv = k.ld(Space::Shared, Ty::F32, vrow, off);
                    k.fma_acc(oc, pb, vv);
                }
            }
        }
    });
    // The rows' sums across the warp, then the outputs.
    for r in 0..WARP_ROWS {
        let mut sum = l[r];
        for sh in [16u32, 8, 4, 2, 1] {
            let other = k.shfl_bfly(sum, sh);
            sum = k.add(Ty::F32, sum, other);
        }
        let row_in = k.setp(Cmp::Lt, Ty::U32, rows[r], s as u32);
        for (c, &oc) in o[r].iter().enumerate() {
            let col = k.add(Ty::U32, lane, (c * TILE) as u32);
            let col_in = k.setp(Cmp::Lt, Ty::U32, col, dv as u32);
            let both = k.pred_and(row_in, col_in);
            k.when(both, |k| {
                let val = k.div(Ty::F32, oc, sum);
                let at = k.fma(Ty::U32, rows[r], dv as u32, col);
                let nb = (s * dv) as u32;
                let at = k.fma(Ty::U32, b, nb, at);
                let a = k.addr(y, at, p.e.size());
                let h = p.e.narrow(k, val);
                k.st(Space::Global, a, 0, h);
            });
        }
    }
    k
}

/// How a FusedAttention call runs on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// The chain's own kernels, one launch per node it replaced.
    Chain,
    /// The tensor-core kernel where it takes the call (halves up to 128 wide), else the chain.
    TensorCores,
    /// The one-pass CUDA-core kernel.
    OnePass,
}

impl Route {
    /// `QUORUM_CUDA_ATTENTION` (`chain`, `tc`, `one-pass`); `tc` by default. On an H100 (stop
    /// 59, call 25, `reports/cuda/f16.md`) the tensor-core kernel with the keys split between
    /// warps took ViT-B/16 f16's graph replay from 1.787 ms (chain) to 1.560, bert-base f16 b1
    /// from 1.524 to 1.350 and b8 from 3.396 to 3.110, strict runs passing; its first form, one
    /// warp walking every key (stop 58), was no faster than the chain, and the one-pass CUDA-core
    /// kernel slower (93 µs a ViT layer).
    pub fn from_env() -> Route {
        static ROUTE: std::sync::OnceLock<Route> = std::sync::OnceLock::new();
        *ROUTE.get_or_init(|| match std::env::var("QUORUM_CUDA_ATTENTION").as_deref() {
            Ok("chain") => Route::Chain,
            Ok("one-pass") => Route::OnePass,
            _ => Route::TensorCores,
        })
    }
}

/// The chain FusedAttention replaced, on the device with the chain's own kernels: the same
/// launches and the same arithmetic as the unfused graph (Transpose, Mul, MatMul, Mul or Div,
/// Add, Softmax, MatMul), only without the graph's nodes between them.
fn chain(
    run: &Run,
    form: Form,
    q: &DevTensor,
    k: &DevTensor,
    v: &DevTensor,
    mask: Option<&DevTensor>,
) -> KResult<DevTensor> {
    use quorum_core::device::Primitives;
    use quorum_core::device::layout::{Strided, contiguous};
    use quorum_core::ops::map_op::Arith;
    use quorum_core::tensor::Tensor;
    let scalar = |c: f32| -> KResult<DevTensor> {
        let t = Tensor::from_f64s(q.dtype, &[], vec![c as f64]).map_err(KError::Op)?;
        run.fill(&t, &[])
    };
    let scaled = |x: DevTensor, c: Option<f32>, op: Arith| -> KResult<DevTensor> {
        match c {
            Some(c) => super::elementwise::binary(run, op, &x, &scalar(c)?),
            None => Ok(x),
        }
    };
    let kt = if form.transpose_k {
        let r = k.shape.len();
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 2, r - 1);
        let st = contiguous(&k.shape);
        let from = Strided {
            base: 0,
            strides: perm.iter().map(|&a| st[a]).collect(),
        };
        let shape: Vec<usize> = perm.iter().map(|&a| k.shape[a]).collect();
        quorum_core::device::movement::gather_view(run, k, &from, &shape)?
    } else {
        k.clone()
    };
    let kt = scaled(kt, form.k_scale, Arith::Mul)?;
    let qs = scaled(q.clone(), form.q_scale, Arith::Mul)?;
    let mut x = super::matmul::matmul_tensors(None, run, &qs, &kt, None)?;
    if let Some((c, divide)) = form.scale {
        let op = if divide { Arith::Div } else { Arith::Mul };
        x = scaled(x, Some(c), op)?;
    }
    if let Some(m) = mask {
        x = super::elementwise::binary(run, Arith::Add, &x, m)?;
    }
    let r = x.shape.len();
    let lanes = (x.shape[..r - 1].iter().product(), x.shape[r - 1], 1);
    let p = super::softmax::softmax_dev(run, &x, super::softmax::Kind::Soft, lanes)?;
    super::matmul::matmul_tensors(None, run, &p, v, None)
}

fn invalid(m: String) -> KError {
    KError::Op(OpError::Invalid(m))
}

/// The node's plan for these inputs, or why the kernel declines them.
pub fn plan(form: Form, shapes: [&[usize]; 3], mask: Option<&[usize]>, e: Elem) -> KResult<Plan> {
    let dims = dims(form, shapes[0], shapes[1], shapes[2], mask).map_err(invalid)?;
    if dims.d > MAX_WIDTH || dims.dv > MAX_WIDTH {
        crate::decline!(
            "FusedAttention of width {} and value width {}: the kernel takes up to {MAX_WIDTH}",
            dims.d,
            dims.dv
        );
    }
    let nb: usize = dims.batch.iter().product();
    if nb > 65_535 {
        crate::decline!("FusedAttention over {nb} batch elements: the grid takes up to 65535");
    }
    let batch = &dims.batch;
    let along_batch = |shape: &[usize]| {
        let own = &shape[..shape.len() - 2];
        let inner: usize = shape[shape.len() - 2..].iter().product();
        broadcast_strides(own, batch)
            .into_iter()
            .map(|st| st * inner as i64)
            .collect::<Vec<i64>>()
    };
    let mut batch_strides = vec![
        along_batch(shapes[0]),
        along_batch(shapes[1]),
        along_batch(shapes[2]),
    ];
    let mut mask_rc = None;
    if let Some(m) = mask {
        let all = broadcast_strides(m, &dims.scores());
        let r = all.len();
        mask_rc = Some((all[r - 2], all[r - 1]));
        batch_strides.push(all[..r - 2].to_vec());
    }
    Ok(Plan {
        e,
        dims,
        k_rows: form.transpose_k,
        factor: form.total_factor().map(|f| f as f32),
        batch_strides,
        mask_rc,
        aligned: false,
    })
}

/// `com.quorum` FusedAttention on the device.
pub fn k_fused_attention(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let form = Form::of(ctx.node).map_err(invalid)?;
    let (q, kt, v) = (
        dev_input(inputs, 0)?,
        dev_input(inputs, 1)?,
        dev_input(inputs, 2)?,
    );
    let mask = if inputs.present(3) {
        Some(dev_input(inputs, 3)?)
    } else {
        None
    };
    let mut all = vec![&q, &kt, &v];
    all.extend(mask.as_ref());
    let dtype = float_dtype("FusedAttention", &all)?;
    let e = Elem::operand("Q", Some(dtype))?;
    let mut p = plan(
        form,
        [&q.shape, &kt.shape, &v.shape],
        mask.as_ref().map(|m| m.shape.as_slice()),
        e,
    )?;
    p.aligned = q.ptr() % 4 == 0 && kt.ptr() % 4 == 0;
    for t in &all {
        require_u32_len(&t.shape)?;
    }
    let out_shape = p.dims.output();
    require_u32_len(&out_shape)?;
    let y = run.alloc(dtype, &out_shape)?;
    if y.is_empty() {
        return Ok(vec![y]);
    }
    if p.dims.t == 0 {
        // No keys: every row's softmax is 0/0, as the chain computes it.
        crate::decline!("FusedAttention over no keys");
    }
    let nb: usize = p.dims.batch.iter().product();
    let args = [
        q.arg_in(),
        kt.arg_in(),
        v.arg_in(),
        DevTensor::arg_in_opt(mask.as_ref()),
        y.arg_out(),
    ];
    let route = Route::from_env();
    if route == Route::TensorCores && tc::takes(&p) {
        run.declare(Arithmetic::TENSOR_CORES);
        let ptx = module(run.cc(), &[tc::kernel(&p)]);
        run.launch(
            &ptx,
            "fused_attention_tc",
            (p.dims.s.div_ceil(tc::TC_ROWS) as u32, nb as u32, 1),
            (tc::threads(&p), 1, 1),
            0,
            &args,
        )?;
        return Ok(vec![y]);
    }
    if route != Route::OnePass {
        return Ok(vec![chain(run, form, &q, &kt, &v, mask.as_ref())?]);
    }
    let ptx = module(run.cc(), &[kernel(&p)]);
    run.launch(
        &ptx,
        "fused_attention",
        (p.dims.s.div_ceil(ROWS) as u32, nb as u32, 1),
        (THREADS, 1, 1),
        p.shared_bytes() as u32,
        &[
            q.arg_in(),
            kt.arg_in(),
            v.arg_in(),
            DevTensor::arg_in_opt(mask.as_ref()),
            y.arg_out(),
        ],
    )?;
    Ok(vec![y])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(transpose_k: bool) -> Form {
        Form {
            transpose_k,
            scale: Some((8.0, true)),
            q_scale: None,
            k_scale: None,
        }
    }

    #[test]
    fn plans_broadcast_batches_and_masks() {
        let p = plan(
            form(true),
            [&[2, 12, 197, 64], &[2, 12, 197, 64], &[1, 12, 197, 64]],
            Some(&[2, 1, 1, 197]),
            Elem::F16,
        )
        .unwrap();
        assert_eq!(p.dims.batch, [2, 12]);
        let (q, v) = (197 * 64, 197 * 64);
        assert_eq!(p.batch_strides[0], [12 * q as i64, q as i64]);
        assert_eq!(p.batch_strides[2], [0, v as i64]);
        assert_eq!(p.batch_strides[3], [197, 0]);
        assert_eq!(p.mask_rc, Some((0, 1)));
        let wide = plan(form(true), [&[5, 300], &[7, 300], &[7, 4]], None, Elem::F32);
        assert!(matches!(wide, Err(KError::Decline(_))));
        let bad = plan(form(false), [&[5, 8], &[7, 8], &[7, 4]], None, Elem::F32);
        assert!(matches!(bad, Err(KError::Op(_))));
    }

    #[test]
    fn kernels_are_well_formed() {
        for (tk, mask, e) in [
            (true, true, Elem::F16),
            (false, false, Elem::F32),
            (true, false, Elem::Bf16),
        ] {
            let m: &[usize] = &[9, 40];
            let p = plan(
                form(tk),
                [
                    &[3, 9, 24],
                    if tk { &[3, 40, 24] } else { &[3, 24, 40] },
                    &[3, 40, 40],
                ],
                mask.then_some(m),
                e,
            )
            .unwrap();
            let t = module((9, 0), &[kernel(&p)]);
            assert!(t.contains(".visible .entry fused_attention("), "{t}");
            assert_eq!(t.matches("bar.sync").count(), 2, "{t}");
            assert!(
                t.contains("ex2.approx.ftz.f32") && t.contains("div.rn.f32"),
                "{t}"
            );
            assert!(t.contains("shfl.sync.idx.b32"), "{t}");
            // Q, K and V once each; the mask, where there is one, for each of a warp's rows.
            assert_eq!(
                t.matches("ld.global.nc").count(),
                3 + WARP_ROWS * mask as usize,
                "{t}"
            );
            assert_eq!(p.nc(), 2);
            assert_eq!(p.shared_bytes(), 4 * (16 * 24 + 32 * 25 + 32 * 64));
        }
    }

    #[test]
    fn half_attention_takes_the_tensor_cores_up_to_their_width() {
        for (e, t) in [(Elem::F16, "f16"), (Elem::Bf16, "bf16")] {
            for (tk, aligned) in [(true, true), (false, false)] {
                let m: &[usize] = &[9, 40];
                let mut p = plan(
                    form(tk),
                    [
                        &[3, 9, 64],
                        if tk { &[3, 40, 64] } else { &[3, 64, 40] },
                        &[3, 40, 24],
                    ],
                    Some(m),
                    e,
                )
                .unwrap();
                p.aligned = aligned;
                assert!(tc::takes(&p));
                let text = module((9, 0), &[tc::kernel(&p)]);
                let mma = format!("mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32");
                // Per chunk: 4 score tiles over 4 k-steps, 2 key steps over 3 value tiles.
                assert_eq!(text.matches(&mma).count(), 4 * 4 + 2 * 3, "{text}");
                assert!(text.contains(&format!("cvt.rn.{t}x2.f32")), "{text}");
                // 40 keys are two chunks: two warps, whose parts meet once in shared memory
                // (16 rows of 24 columns padded to 28, a maximum and a sum each).
                assert_eq!(tc::split(&p), 2);
                assert_eq!(tc::threads(&p), 64);
                assert_eq!(text.matches("bar.sync").count(), 1, "{text}");
                assert!(
                    text.contains(&format!("attn_part[{}]", 2 * 4 * 16 * 30)),
                    "{text}"
                );
                // Q's and K's pairs in one load each only where aligned with rows of even length.
                assert_eq!(text.contains("ld.global.nc.b32"), tk && aligned, "{text}");
            }
        }
        // The split: a warp per chunk of 32 keys up to eight, fewer where the parts of wide
        // values would not fit the shared memory allowed them.
        let split = |t: usize, dv: usize| {
            let p = plan(
                form(true),
                [&[197, 64], &[t, 64], &[t, dv]],
                None,
                Elem::F16,
            )
            .unwrap();
            tc::split(&p)
        };
        assert_eq!(split(197, 64), 7);
        assert_eq!(split(1, 64), 1);
        assert_eq!(split(1024, 64), 8);
        assert_eq!(split(1024, 128), 4);
        let wide = plan(form(true), [&[5, 200], &[7, 200], &[7, 4]], None, Elem::F16).unwrap();
        assert!(!tc::takes(&wide));
        let f32 = plan(form(true), [&[5, 64], &[7, 64], &[7, 4]], None, Elem::F32).unwrap();
        assert!(!tc::takes(&f32));
    }
}
