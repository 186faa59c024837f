//! MatMul, Gemm and Einsum over a cache-blocked GEMM (f32 MatMul through the packed GEMM of
//! `quorum-kernels` in `matmul/packed.rs`; otherwise the `gemm` crate for f32/f64; f16/bf16 are
//! computed in f32; integers use a plain wrapping loop).
//!
//! [`gemm_into`] / [`sgemm`] are the shared entry points other kernels (Conv, ConvTranspose, ...) use.
use half::{bf16, f16};

use super::cast::{narrow, widen};
use ndarray::{ArrayD, Axis, IxDyn};
use rayon::prelude::*;

use super::broadcast::broadcast_shapes;
use super::{OpCtx, Registry, input, opt_input, single};
use crate::error::OpResult;
use crate::tensor::{Tensor, Value};
use crate::{bail, unsupported};

mod packed;
pub(crate) use packed::gemm_to_vec;
pub(super) use packed::matmul_bias_f32;

pub fn register(r: &mut Registry) {
    r.add("", "MatMul", matmul);
    r.add("", "Gemm", gemm_op);
    r.add("", "Einsum", einsum);
}

// ---------------------------------------------------------------------------------------------
// The GEMM core
// ---------------------------------------------------------------------------------------------

/// Float types the `gemm` crate multiplies natively.
pub(crate) trait GemmFloat: num_traits::Float + Send + Sync + 'static {}
impl GemmFloat for f32 {}
impl GemmFloat for f64 {}

/// Work (m·n·k) below which a GEMM runs on the calling thread.
pub const PAR_WORK: usize = 32 * 32 * 32;

/// `dst = alpha·A·B (+ dst if accumulate)`, where `A[i,p] = a[i*a_rs + p*a_cs]`,
/// `B[p,j] = b[p*b_rs + j*b_cs]`, `dst[i,j] = dst[i*d_rs + j]`. Runs in parallel (rayon) when `par`
/// and the product is large enough. Panics only if the strides reach outside the slices (a caller bug).
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_into<T: GemmFloat>(
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    a_rs: usize,
    a_cs: usize,
    b: &[T],
    b_rs: usize,
    b_cs: usize,
    dst: &mut [T],
    d_rs: usize,
    alpha: T,
    accumulate: bool,
    par: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        (m - 1) * d_rs + n <= dst.len() && (m == 1 || d_rs >= n),
        "gemm: dst out of bounds"
    );
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                dst[i * d_rs..i * d_rs + n].fill(T::zero());
            }
        }
        return;
    }
    assert!(
        (m - 1) * a_rs + (k - 1) * a_cs < a.len(),
        "gemm: lhs out of bounds"
    );
    assert!(
        (k - 1) * b_rs + (n - 1) * b_cs < b.len(),
        "gemm: rhs out of bounds"
    );
    let parallelism = if par && m.saturating_mul(n).saturating_mul(k) >= PAR_WORK {
        gemm::Parallelism::Rayon(0)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: every element the strides address lies inside the slices (checked above), dst is
    // exclusively borrowed, and T is f32 or f64, which the gemm crate supports.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            d_rs as isize,
            accumulate,
            a.as_ptr(),
            a_cs as isize,
            a_rs as isize,
            b.as_ptr(),
            b_cs as isize,
            b_rs as isize,
            T::one(),
            alpha,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// f32 [`gemm_into`] for row-major operands: `c[m×n] = alpha·op(A)·op(B) + (c if accumulate)` with
/// `A` stored `m×k` (or `k×m` when `trans_a`) and `B` stored `k×n` (or `n×k` when `trans_b`).
#[allow(clippy::too_many_arguments, dead_code)]
pub(crate) fn sgemm(
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    a: &[f32],
    trans_a: bool,
    b: &[f32],
    trans_b: bool,
    c: &mut [f32],
    accumulate: bool,
) {
    let (a_rs, a_cs) = if trans_a { (1, m) } else { (k, 1) };
    let (b_rs, b_cs) = if trans_b { (1, k) } else { (n, 1) };
    gemm_into(
        m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, n, alpha, accumulate, true,
    );
}

/// Element types MatMul/Gemm/Einsum multiply: floats through the gemm crate, integers with
/// wrapping arithmetic.
pub(crate) trait MmElem:
    Copy + Send + Sync + num_traits::Zero + num_traits::One + 'static
{
    /// Same contract as [`gemm_into`].
    #[allow(clippy::too_many_arguments)]
    fn mm(
        m: usize,
        n: usize,
        k: usize,
        a: &[Self],
        a_rs: usize,
        a_cs: usize,
        b: &[Self],
        b_rs: usize,
        b_cs: usize,
        dst: &mut [Self],
        d_rs: usize,
        alpha: Self,
        accumulate: bool,
        par: bool,
    );
    fn from_f64(v: f64) -> Self;
    fn eadd(self, o: Self) -> Self;
    fn emul(self, o: Self) -> Self;
}

macro_rules! mm_float {
    ($($t:ty),*) => {$(
        impl MmElem for $t {
            fn mm(m: usize, n: usize, k: usize, a: &[Self], a_rs: usize, a_cs: usize, b: &[Self], b_rs: usize,
                  b_cs: usize, dst: &mut [Self], d_rs: usize, alpha: Self, accumulate: bool, par: bool) {
                gemm_into(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, dst, d_rs, alpha, accumulate, par)
            }
            fn from_f64(v: f64) -> Self { v as $t }
            fn eadd(self, o: Self) -> Self { self + o }
            fn emul(self, o: Self) -> Self { self * o }
        }
    )*};
}
mm_float!(f32, f64);

macro_rules! mm_int {
    ($($t:ty),*) => {$(
        impl MmElem for $t {
            fn mm(m: usize, n: usize, k: usize, a: &[Self], a_rs: usize, a_cs: usize, b: &[Self], b_rs: usize,
                  b_cs: usize, dst: &mut [Self], d_rs: usize, alpha: Self, accumulate: bool, _par: bool) {
                for i in 0..m {
                    let row = &mut dst[i * d_rs..i * d_rs + n];
                    if !accumulate {
                        row.fill(0);
                    }
                    for p in 0..k {
                        let av = alpha.wrapping_mul(a[i * a_rs + p * a_cs]);
                        if av == 0 {
                            continue;
                        }
                        let bo = p * b_rs;
                        for (j, d) in row.iter_mut().enumerate() {
                            *d = d.wrapping_add(av.wrapping_mul(b[bo + j * b_cs]));
                        }
                    }
                }
            }
            fn from_f64(v: f64) -> Self { v as $t }
            fn eadd(self, o: Self) -> Self { self.wrapping_add(o) }
            fn emul(self, o: Self) -> Self { self.wrapping_mul(o) }
        }
    )*};
}
mm_int!(i8, i16, i32, i64, u8, u16, u32, u64);

/// Flat element offsets of each batch matrix of an operand with batch dims `src` broadcast to `out`.
fn batch_offsets(src: &[usize], out: &[usize], mat: usize) -> Vec<usize> {
    let total: usize = out.iter().product();
    let off = out.len() - src.len();
    // Strides of src (in matrices), 0 along broadcast dims, aligned to out's rank.
    let mut strides = vec![0usize; out.len()];
    let mut s = mat;
    for i in (0..src.len()).rev() {
        strides[off + i] = if src[i] == 1 { 0 } else { s };
        s *= src[i];
    }
    let mut res = Vec::with_capacity(total);
    let mut idx = vec![0usize; out.len()];
    let mut cur = 0usize;
    for _ in 0..total {
        res.push(cur);
        for d in (0..out.len()).rev() {
            idx[d] += 1;
            cur += strides[d];
            if idx[d] < out[d] {
                break;
            }
            cur -= strides[d] * idx[d];
            idx[d] = 0;
        }
    }
    res
}

/// Batched matrix product of contiguous `[batch..., m, k]` and `[batch..., k, n]` operands whose batch
/// dims broadcast. Returns the flat `[batch..., m, n]` result and the broadcast batch shape.
fn batched_mm<T: MmElem>(
    a: &[T],
    a_batch: &[usize],
    b: &[T],
    b_batch: &[usize],
    m: usize,
    k: usize,
    n: usize,
) -> OpResult<(Vec<T>, Vec<usize>)> {
    let batch = broadcast_shapes(&[a_batch, b_batch])?;
    let nb: usize = batch.iter().product();
    let mut out = vec![T::zero(); nb * m * n];
    if out.is_empty() {
        return Ok((out, batch));
    }
    let na: usize = a_batch.iter().product();
    let nbb: usize = b_batch.iter().product();
    if nbb == 1 && na == nb {
        // One tall GEMM: A's batch folds into its rows.
        T::mm(
            nb * m,
            n,
            k,
            a,
            k,
            1,
            b,
            n,
            1,
            &mut out,
            n,
            T::one(),
            false,
            true,
        );
        return Ok((out, batch));
    }
    let ao = batch_offsets(a_batch, &batch, m * k);
    let bo = batch_offsets(b_batch, &batch, k * n);
    let small = m.saturating_mul(n).saturating_mul(k) < PAR_WORK * 8;
    if small && nb > 1 {
        out.par_chunks_mut(m * n).enumerate().for_each(|(i, o)| {
            T::mm(
                m,
                n,
                k,
                &a[ao[i]..],
                k,
                1,
                &b[bo[i]..],
                n,
                1,
                o,
                n,
                T::one(),
                false,
                false,
            )
        });
    } else {
        for (i, o) in out.chunks_mut(m * n).enumerate() {
            T::mm(
                m,
                n,
                k,
                &a[ao[i]..],
                k,
                1,
                &b[bo[i]..],
                n,
                1,
                o,
                n,
                T::one(),
                false,
                true,
            );
        }
    }
    Ok((out, batch))
}

/// numpy.matmul semantics (1-D promotion, broadcast batch dims).
pub(crate) fn matmul_nd<T: MmElem>(
    ctx: &OpCtx,
    a: &ArrayD<T>,
    b: &ArrayD<T>,
) -> OpResult<ArrayD<T>> {
    let (ash, bsh) = (a.shape(), b.shape());
    let MatMulShape {
        m,
        k: ka,
        n,
        a_batch,
        b_batch,
        out_shape,
        ..
    } = matmul_shape(ash, bsh)?;
    let (a_batch, b_batch) = (a_batch.as_slice(), b_batch.as_slice());
    ctx.check_alloc(&out_shape, std::mem::size_of::<T>())?;
    let a = a.as_standard_layout();
    let b = b.as_standard_layout();
    let (Some(asl), Some(bsl)) = (a.as_slice(), b.as_slice()) else {
        bail!("MatMul: non-contiguous operand")
    };
    let (out, _) = batched_mm(asl, a_batch, bsl, b_batch, m, ka, n)?;
    Ok(ArrayD::from_shape_vec(IxDyn(&out_shape), out)?)
}

/// MatMul's shapes (numpy matmul rules): 1-D operands promoted and their unit dim removed from the
/// output, batch dims broadcast. Shared by every backend.
pub struct MatMulShape {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub a_batch: Vec<usize>,
    pub b_batch: Vec<usize>,
    pub batch: Vec<usize>,
    pub out_shape: Vec<usize>,
}

pub fn matmul_shape(ash: &[usize], bsh: &[usize]) -> OpResult<MatMulShape> {
    if ash.is_empty() || bsh.is_empty() {
        bail!("MatMul operands must have rank >= 1, got {ash:?} and {bsh:?}");
    }
    let (ra, rb) = (ash.len(), bsh.len());
    let (m, ka) = if ra == 1 {
        (1, ash[0])
    } else {
        (ash[ra - 2], ash[ra - 1])
    };
    let (kb, n) = if rb == 1 {
        (bsh[0], 1)
    } else {
        (bsh[rb - 2], bsh[rb - 1])
    };
    if ka != kb {
        bail!("MatMul inner dimensions differ: {ash:?} x {bsh:?}");
    }
    let a_batch = if ra <= 2 { &[][..] } else { &ash[..ra - 2] };
    let b_batch = if rb <= 2 { &[][..] } else { &bsh[..rb - 2] };
    let batch = broadcast_shapes(&[a_batch, b_batch])?;
    let mut out_shape = batch.clone();
    if ra > 1 {
        out_shape.push(m);
    }
    if rb > 1 {
        out_shape.push(n);
    }
    Ok(MatMulShape {
        m,
        k: ka,
        n,
        a_batch: a_batch.to_vec(),
        b_batch: b_batch.to_vec(),
        batch,
        out_shape,
    })
}

pub(super) fn matmul(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let a = input(inputs, 0)?;
    let b = input(inputs, 1)?;
    let t = match (a, b) {
        (Tensor::F32(x), Tensor::F32(y)) => Tensor::F32(packed::matmul_f32(ctx, x, y)?),
        (Tensor::F64(x), Tensor::F64(y)) => Tensor::F64(matmul_nd(ctx, x, y)?),
        (Tensor::F16(x), Tensor::F16(y)) => {
            Tensor::F16(narrow(packed::matmul_f32(ctx, &widen(x), &widen(y))?))
        }
        (Tensor::BF16(x), Tensor::BF16(y)) => {
            Tensor::BF16(narrow(packed::matmul_f32(ctx, &widen(x), &widen(y))?))
        }
        (Tensor::I32(x), Tensor::I32(y)) => Tensor::I32(matmul_nd(ctx, x, y)?),
        (Tensor::I64(x), Tensor::I64(y)) => Tensor::I64(matmul_nd(ctx, x, y)?),
        (Tensor::U32(x), Tensor::U32(y)) => Tensor::U32(matmul_nd(ctx, x, y)?),
        (Tensor::U64(x), Tensor::U64(y)) => Tensor::U64(matmul_nd(ctx, x, y)?),
        (Tensor::I8(x), Tensor::I8(y)) => Tensor::I8(matmul_nd(ctx, x, y)?),
        (Tensor::U8(x), Tensor::U8(y)) => Tensor::U8(matmul_nd(ctx, x, y)?),
        (Tensor::I16(x), Tensor::I16(y)) => Tensor::I16(matmul_nd(ctx, x, y)?),
        (Tensor::U16(x), Tensor::U16(y)) => Tensor::U16(matmul_nd(ctx, x, y)?),
        (x, y) if x.dtype() != y.dtype() => bail!(
            "MatMul operands differ in dtype: {} and {}",
            x.dtype(),
            y.dtype()
        ),
        (x, _) => unsupported!("MatMul of {}", x.dtype()),
    };
    single(t)
}

// ---------------------------------------------------------------------------------------------
// Gemm
// ---------------------------------------------------------------------------------------------

/// Gemm's `(m, k)` of op(A) and `(k, n)` of op(B) from 2-D shapes and the transposes, as
/// `(m, k, k_of_b, n)`.
fn gemm_dims(ash: &[usize], bsh: &[usize], ta: bool, tb: bool) -> (usize, usize, usize, usize) {
    let (m, k) = if ta {
        (ash[1], ash[0])
    } else {
        (ash[0], ash[1])
    };
    let (kb, n) = if tb {
        (bsh[1], bsh[0])
    } else {
        (bsh[0], bsh[1])
    };
    (m, k, kb, n)
}

#[allow(clippy::too_many_arguments)]
fn gemm_t<T: MmElem>(
    ctx: &OpCtx,
    a: &ArrayD<T>,
    b: &ArrayD<T>,
    c: Option<&ArrayD<T>>,
    ta: bool,
    tb: bool,
    alpha: f64,
    beta: f64,
) -> OpResult<ArrayD<T>> {
    if a.ndim() != 2 || b.ndim() != 2 {
        bail!(
            "Gemm needs 2-D A and B, got {:?} and {:?}",
            a.shape(),
            b.shape()
        );
    }
    let (m, k, kb, n) = gemm_dims(a.shape(), b.shape(), ta, tb);
    if k != kb {
        bail!(
            "Gemm inner dimensions differ: A {:?} (transA={ta}) B {:?} (transB={tb})",
            a.shape(),
            b.shape()
        );
    }
    ctx.check_alloc(&[m, n], std::mem::size_of::<T>())?;
    let a = a.as_standard_layout();
    let b = b.as_standard_layout();
    let (Some(asl), Some(bsl)) = (a.as_slice(), b.as_slice()) else {
        bail!("Gemm: non-contiguous operand")
    };
    let mut out = vec![T::zero(); m * n];
    let mut acc = false;
    if let Some(c) = c
        && beta != 0.0
        && m * n > 0
    {
        if c.ndim() > 2 {
            bail!(
                "Gemm: C of shape {:?} cannot broadcast to [{m}, {n}]",
                c.shape()
            );
        }
        let Some(cv) = c.broadcast(IxDyn(&[m, n])) else {
            bail!(
                "Gemm: C of shape {:?} cannot broadcast to [{m}, {n}]",
                c.shape()
            );
        };
        let bt = T::from_f64(beta);
        for (d, &v) in out.iter_mut().zip(cv.iter()) {
            *d = if beta == 1.0 { v } else { v.emul(bt) };
        }
        acc = true;
    }
    let (a_rs, a_cs) = if ta { (1, m) } else { (k, 1) };
    let (b_rs, b_cs) = if tb { (1, k) } else { (n, 1) };
    T::mm(
        m,
        n,
        k,
        asl,
        a_rs,
        a_cs,
        bsl,
        b_rs,
        b_cs,
        &mut out,
        n,
        T::from_f64(alpha),
        acc,
        true,
    );
    Ok(ArrayD::from_shape_vec(IxDyn(&[m, n]), out)?)
}

fn gemm_op(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let a = input(inputs, 0)?;
    let b = input(inputs, 1)?;
    let c = opt_input(inputs, 2)?;
    let ta = ctx.attr_i("transA", 0)? != 0;
    let tb = ctx.attr_i("transB", 0)? != 0;
    let alpha = ctx.attr_f("alpha", 1.0)? as f64;
    let beta = ctx.attr_f("beta", 1.0)? as f64;
    if let Some(c) = c
        && c.dtype() != a.dtype()
    {
        bail!("Gemm: C has dtype {} but A has {}", c.dtype(), a.dtype());
    }
    macro_rules! go {
        ($v:ident, $x:expr, $y:expr) => {{
            let cc = match c {
                Some(Tensor::$v(c)) => Some(c),
                _ => None,
            };
            Tensor::$v(gemm_t(ctx, $x, $y, cc, ta, tb, alpha, beta)?)
        }};
    }
    macro_rules! go_half {
        ($v:ident, $h:ty) => {{
            let (Tensor::$v(x), Tensor::$v(y)) = (a, b) else {
                unreachable!()
            };
            let cc = match c {
                Some(Tensor::$v(c)) => Some(widen::<$h>(c)),
                _ => None,
            };
            let (x, y) = (widen::<$h>(x), widen::<$h>(y));
            let r = gemm_t(ctx, &x, &y, cc.as_ref(), ta, tb, alpha, beta)?;
            Tensor::$v(narrow::<$h>(r))
        }};
    }
    let t = match (a, b) {
        (Tensor::F32(x), Tensor::F32(y)) => {
            let cc = match c {
                Some(Tensor::F32(c)) => Some(c),
                _ => None,
            };
            match packed::gemm_f32(ctx, x, y, cc, (ta, tb), (alpha, beta))? {
                Some(r) => Tensor::F32(r),
                None => go!(F32, x, y),
            }
        }
        (Tensor::F64(x), Tensor::F64(y)) => go!(F64, x, y),
        (Tensor::F16(_), Tensor::F16(_)) => go_half!(F16, f16),
        (Tensor::BF16(_), Tensor::BF16(_)) => go_half!(BF16, bf16),
        (Tensor::I32(x), Tensor::I32(y)) => go!(I32, x, y),
        (Tensor::I64(x), Tensor::I64(y)) => go!(I64, x, y),
        (Tensor::U32(x), Tensor::U32(y)) => go!(U32, x, y),
        (Tensor::U64(x), Tensor::U64(y)) => go!(U64, x, y),
        (x, y) if x.dtype() != y.dtype() => bail!(
            "Gemm operands differ in dtype: {} and {}",
            x.dtype(),
            y.dtype()
        ),
        (x, _) => unsupported!("Gemm of {}", x.dtype()),
    };
    single(t)
}

// ---------------------------------------------------------------------------------------------
// Einsum
// ---------------------------------------------------------------------------------------------

/// Labels: letters are their ASCII code; ellipsis dims are `ELL + i` (i counted over the broadcast
/// ellipsis rank, left to right).
const ELL: u32 = 1000;

/// An Einsum equation as labels: each operand's, one per axis, and the output's (explicit, or
/// numpy's implicit form: the ellipsis dims, then every letter used once, in alphabetical order).
pub(crate) struct Parsed {
    pub(crate) inputs: Vec<Vec<u32>>,
    pub(crate) output: Vec<u32>,
}

fn parse_term(term: &str, rank: Option<usize>, ell_rank: usize, what: &str) -> OpResult<Vec<u32>> {
    let mut labels = Vec::new();
    let letters = term.chars().filter(|c| c.is_ascii_alphabetic()).count();
    let mut rest = term;
    let mut seen_ell = false;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("...") {
            if seen_ell {
                bail!("Einsum: {what} '{term}' has more than one ellipsis");
            }
            seen_ell = true;
            let e = match rank {
                Some(r) => {
                    if r < letters {
                        bail!(
                            "Einsum: {what} '{term}' has more labels than the operand's rank {r}"
                        );
                    }
                    r - letters
                }
                None => ell_rank,
            };
            for i in 0..e {
                labels.push(ELL + (ell_rank - e + i) as u32);
            }
            rest = r;
            continue;
        }
        let c = rest.chars().next().unwrap_or(' ');
        if !c.is_ascii_alphabetic() {
            bail!("Einsum: invalid character '{c}' in {what} '{term}'");
        }
        labels.push(c as u32);
        rest = &rest[1..];
    }
    if let Some(r) = rank
        && labels.len() != r
    {
        bail!(
            "Einsum: {what} '{term}' has {} labels but the operand has rank {r}",
            labels.len()
        );
    }
    Ok(labels)
}

/// Parses equation `eq` for operands of ranks `ranks`.
pub(crate) fn parse_equation(eq: &str, ranks: &[usize]) -> OpResult<Parsed> {
    let eq: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != ranks.len() {
        bail!(
            "Einsum equation '{eq}' has {} operands but {} inputs were given",
            terms.len(),
            ranks.len()
        );
    }
    // The broadcast ellipsis rank.
    let mut ell_rank = 0;
    for (t, &r) in terms.iter().zip(ranks) {
        if t.contains("...") {
            let letters = t.chars().filter(|c| c.is_ascii_alphabetic()).count();
            ell_rank = ell_rank.max(r.saturating_sub(letters));
        }
    }
    let mut inputs = Vec::new();
    for (i, (t, &r)) in terms.iter().zip(ranks).enumerate() {
        inputs.push(parse_term(t, Some(r), ell_rank, &format!("operand {i}"))?);
    }
    let output = match rhs {
        Some(r) => {
            let o = parse_term(r, None, ell_rank, "output")?;
            for (i, l) in o.iter().enumerate() {
                if o[..i].contains(l) {
                    bail!("Einsum: output '{r}' repeats a label");
                }
                if !inputs.iter().any(|x| x.contains(l)) {
                    bail!("Einsum: output label of '{r}' does not appear in any input");
                }
            }
            o
        }
        None => {
            let mut o: Vec<u32> = (0..ell_rank as u32).map(|i| ELL + i).collect();
            let mut letters: Vec<u32> = Vec::new();
            for l in inputs.iter().flatten() {
                if *l < ELL && !letters.contains(l) {
                    let count: usize = inputs
                        .iter()
                        .map(|x| x.iter().filter(|y| *y == l).count())
                        .sum();
                    if count == 1 {
                        letters.push(*l);
                    }
                }
            }
            letters.sort_unstable();
            o.extend(letters);
            o
        }
    };
    Ok(Parsed { inputs, output })
}

struct Operand<T> {
    labels: Vec<u32>,
    data: ArrayD<T>,
}

/// Collapses repeated labels of one operand into their diagonal.
fn diagonal<T: MmElem>(op: Operand<T>) -> OpResult<Operand<T>> {
    let mut uniq: Vec<u32> = Vec::new();
    for l in &op.labels {
        if !uniq.contains(l) {
            uniq.push(*l);
        }
    }
    if uniq.len() == op.labels.len() {
        return Ok(op);
    }
    let mut shape = Vec::new();
    for u in &uniq {
        let dims: Vec<usize> = op
            .labels
            .iter()
            .zip(op.data.shape())
            .filter(|(l, _)| *l == u)
            .map(|(_, d)| *d)
            .collect();
        if dims.iter().any(|d| *d != dims[0]) {
            bail!("Einsum: repeated label has different sizes {dims:?}");
        }
        shape.push(dims[0]);
    }
    let map: Vec<usize> = op
        .labels
        .iter()
        .map(|l| uniq.iter().position(|u| u == l).unwrap_or(0))
        .collect();
    let src = op.data;
    let mut idx = vec![0usize; map.len()];
    let data = ArrayD::from_shape_fn(IxDyn(&shape), |u| {
        for (i, m) in map.iter().enumerate() {
            idx[i] = u[*m];
        }
        src[IxDyn(&idx)]
    });
    Ok(Operand { labels: uniq, data })
}

/// Sums out the labels of `op` that `keep` does not contain.
fn sum_out<T: MmElem>(mut op: Operand<T>, keep: &dyn Fn(u32) -> bool) -> Operand<T> {
    for ax in (0..op.labels.len()).rev() {
        if !keep(op.labels[ax]) {
            op.data = op
                .data
                .fold_axis(Axis(ax), T::zero(), |acc, x| acc.eadd(*x));
            op.labels.remove(ax);
        }
    }
    op
}

fn label_size<T>(ops: &[&Operand<T>], l: u32) -> usize {
    ops.iter()
        .flat_map(|o| o.labels.iter().zip(o.data.shape()))
        .filter(|(x, _)| **x == l)
        .map(|(_, d)| *d)
        .max()
        .unwrap_or(1)
}

/// `op`'s data permuted to `order` (a permutation of its labels) and broadcast to `sizes`, contiguous.
fn arrange<T: MmElem>(op: &Operand<T>, order: &[u32], sizes: &[usize]) -> OpResult<Vec<T>> {
    let perm: Vec<usize> = order
        .iter()
        .map(|l| op.labels.iter().position(|x| x == l).unwrap_or(0))
        .collect();
    let v = op.data.view().permuted_axes(IxDyn(&perm));
    let Some(b) = v.broadcast(IxDyn(sizes)) else {
        bail!(
            "Einsum: operand of shape {:?} cannot broadcast to {sizes:?}",
            v.shape()
        );
    };
    Ok(b.iter().copied().collect())
}

/// Contracts two operands, keeping the labels `keep` says are still needed.
fn contract<T: MmElem>(
    ctx: &OpCtx,
    a: Operand<T>,
    b: Operand<T>,
    keep: &dyn Fn(u32) -> bool,
) -> OpResult<Operand<T>> {
    let a = sum_out(a, &|l| keep(l) || b.labels.contains(&l));
    let b = sum_out(b, &|l| keep(l) || a.labels.contains(&l));
    let (mut batch, mut con, mut am, mut bn) = (vec![], vec![], vec![], vec![]);
    for &l in &a.labels {
        if b.labels.contains(&l) {
            if keep(l) { batch.push(l) } else { con.push(l) }
        } else {
            am.push(l);
        }
    }
    for &l in &b.labels {
        if !a.labels.contains(&l) {
            bn.push(l);
        }
    }
    let size = |l: u32| label_size(&[&a, &b], l);
    let sz = |ls: &[u32]| ls.iter().map(|&l| size(l)).collect::<Vec<usize>>();
    let (bs, ms, ks, ns) = (sz(&batch), sz(&am), sz(&con), sz(&bn));
    let esz = std::mem::size_of::<T>();
    for shape in [[&bs, &ms, &ks], [&bs, &ks, &ns], [&bs, &ms, &ns]] {
        let dims: Vec<usize> = shape.iter().flat_map(|v| v.iter().copied()).collect();
        ctx.check_alloc(&dims, esz)?;
    }
    let (nb, m, k, n) = (
        bs.iter().product::<usize>(),
        ms.iter().product::<usize>(),
        ks.iter().product::<usize>(),
        ns.iter().product::<usize>(),
    );
    let a_order: Vec<u32> = batch.iter().chain(&am).chain(&con).copied().collect();
    let b_order: Vec<u32> = batch.iter().chain(&con).chain(&bn).copied().collect();
    let a_sizes: Vec<usize> = bs.iter().chain(&ms).chain(&ks).copied().collect();
    let b_sizes: Vec<usize> = bs.iter().chain(&ks).chain(&ns).copied().collect();
    let av = arrange(&a, &a_order, &a_sizes)?;
    let bv = arrange(&b, &b_order, &b_sizes)?;
    let (out, _) = batched_mm(&av, &[nb], &bv, &[nb], m, k, n)?;
    let labels: Vec<u32> = batch.iter().chain(&am).chain(&bn).copied().collect();
    let shape: Vec<usize> = bs.iter().chain(&ms).chain(&ns).copied().collect();
    Ok(Operand {
        labels,
        data: ArrayD::from_shape_vec(IxDyn(&shape), out)?,
    })
}

fn einsum_t<T: MmElem>(ctx: &OpCtx, p: &Parsed, arrays: Vec<ArrayD<T>>) -> OpResult<ArrayD<T>> {
    let mut ops: Vec<Operand<T>> = Vec::new();
    for (labels, data) in p.inputs.iter().zip(arrays) {
        ops.push(diagonal(Operand {
            labels: labels.clone(),
            data,
        })?);
    }
    // Output sizes (checked before the work).
    let all: Vec<&Operand<T>> = ops.iter().collect();
    let out_shape: Vec<usize> = p.output.iter().map(|&l| label_size(&all, l)).collect();
    ctx.check_alloc(&out_shape, std::mem::size_of::<T>())?;
    let mut iter = ops.into_iter().enumerate();
    let Some((_, first)) = iter.next() else {
        bail!("Einsum needs at least one input")
    };
    let rest_labels: Vec<Vec<u32>> = p.inputs.clone();
    let needed = |from: usize, l: u32| {
        p.output.contains(&l) || rest_labels[from..].iter().any(|x| x.contains(&l))
    };
    let mut cur = sum_out(first, &|l| needed(1, l));
    for (i, op) in iter {
        cur = contract(ctx, cur, op, &|l| needed(i + 1, l))?;
    }
    let cur = sum_out(cur, &|l| p.output.contains(&l));
    let perm: Vec<usize> = p
        .output
        .iter()
        .map(|l| cur.labels.iter().position(|x| x == l).unwrap_or(0))
        .collect();
    let v = cur.data.view().permuted_axes(IxDyn(&perm));
    let Some(b) = v.broadcast(IxDyn(&out_shape)) else {
        bail!("Einsum: result cannot take shape {out_shape:?}")
    };
    Ok(b.as_standard_layout().into_owned())
}

fn einsum(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let eq = ctx.attr_s("equation", "")?;
    let ts: Vec<&Tensor> = (0..inputs.len())
        .map(|i| input(inputs, i))
        .collect::<OpResult<_>>()?;
    if ts.is_empty() {
        bail!("Einsum needs at least one input");
    }
    let ranks: Vec<usize> = ts.iter().map(|t| t.rank()).collect();
    let p = parse_equation(&eq, &ranks)?;
    let dt = ts[0].dtype();
    if ts.iter().any(|t| t.dtype() != dt) {
        bail!("Einsum inputs differ in dtype");
    }
    macro_rules! go {
        ($v:ident) => {{
            let arrays = ts.iter().map(|t| match t {
                Tensor::$v(a) => a.clone(),
                _ => unreachable!(),
            });
            Tensor::$v(einsum_t(ctx, &p, arrays.collect())?)
        }};
    }
    macro_rules! go_half {
        ($v:ident, $h:ty) => {{
            let arrays = ts.iter().map(|t| match t {
                Tensor::$v(a) => widen::<$h>(a),
                _ => unreachable!(),
            });
            Tensor::$v(narrow::<$h>(einsum_t(ctx, &p, arrays.collect())?))
        }};
    }
    let t = match ts[0] {
        Tensor::F32(_) => go!(F32),
        Tensor::F64(_) => go!(F64),
        Tensor::F16(_) => go_half!(F16, f16),
        Tensor::BF16(_) => go_half!(BF16, bf16),
        Tensor::I8(_) => go!(I8),
        Tensor::I16(_) => go!(I16),
        Tensor::I32(_) => go!(I32),
        Tensor::I64(_) => go!(I64),
        Tensor::U8(_) => go!(U8),
        Tensor::U16(_) => go!(U16),
        Tensor::U32(_) => go!(U32),
        Tensor::U64(_) => go!(U64),
        t => unsupported!("Einsum of {}", t.dtype()),
    };
    single(t)
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::ir::Attr;
    use crate::ops::Kernel;
    use crate::ops::testing::run_kernel;

    fn call(k: Kernel, attrs: Vec<(&str, Attr)>, ins: Vec<Option<Tensor>>) -> Tensor {
        run_kernel(k, "X", 22, attrs, ins, 1).unwrap().remove(0)
    }

    fn rand(seed: u64, n: usize) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    fn t(shape: &[usize], seed: u64) -> (Tensor, Vec<f32>) {
        let v = rand(seed, shape.iter().product());
        (Tensor::from_f32(shape, v.clone()).unwrap(), v)
    }

    fn close(got: &Tensor, want: &[f32], shape: &[usize]) {
        assert_eq!(got.shape(), shape);
        let g = got.to_f64_vec().unwrap();
        for (i, (a, b)) in g.iter().zip(want).enumerate() {
            assert!(
                (*a as f32 - b).abs() <= 1e-4 * (1.0 + b.abs()),
                "at {i}: {a} vs {b}"
            );
        }
    }

    #[test]
    fn matmul_broadcast_batch_and_1d() {
        let (a, av) = t(&[2, 1, 3, 4], 1);
        let (b, bv) = t(&[3, 4, 5], 2);
        let mut want = vec![0f32; 2 * 3 * 3 * 5];
        for i in 0..2 {
            for j in 0..3 {
                for r in 0..3 {
                    for c in 0..5 {
                        want[((i * 3 + j) * 3 + r) * 5 + c] = (0..4)
                            .map(|p| av[(i * 3 + r) * 4 + p] * bv[(j * 4 + p) * 5 + c])
                            .sum();
                    }
                }
            }
        }
        close(
            &call(matmul, vec![], vec![Some(a), Some(b)]),
            &want,
            &[2, 3, 3, 5],
        );
        let (v, vv) = t(&[4], 3);
        let (m, mv) = t(&[2, 4, 3], 4);
        let want: Vec<f32> = (0..6)
            .map(|o| {
                (0..4)
                    .map(|p| vv[p] * mv[(o / 3) * 12 + p * 3 + o % 3])
                    .sum()
            })
            .collect();
        close(
            &call(matmul, vec![], vec![Some(v), Some(m)]),
            &want,
            &[2, 3],
        );
    }

    #[test]
    fn gemm_transposes_and_bias() {
        let (a, av) = t(&[4, 3], 5); // transA: A' is 3x4
        let (b, bv) = t(&[6, 4], 6); // transB: B' is 4x6
        let (c, cv) = t(&[6], 7);
        let attrs = vec![
            ("transA", Attr::Int(1)),
            ("transB", Attr::Int(1)),
            ("alpha", Attr::Float(0.5)),
            ("beta", Attr::Float(2.0)),
        ];
        let mut want = vec![0f32; 18];
        for i in 0..3 {
            for j in 0..6 {
                let s: f32 = (0..4).map(|p| av[p * 3 + i] * bv[j * 4 + p]).sum();
                want[i * 6 + j] = 0.5 * s + 2.0 * cv[j];
            }
        }
        close(
            &call(gemm_op, attrs, vec![Some(a), Some(b), Some(c)]),
            &want,
            &[3, 6],
        );
    }

    #[test]
    fn einsum_diagonal_ellipsis_chain() {
        let eq = |s: &str| vec![("equation", Attr::String(s.as_bytes().to_vec()))];
        let (x, xv) = t(&[3, 3], 8);
        close(
            &call(einsum, eq("ii->i"), vec![Some(x.clone())]),
            &[xv[0], xv[4], xv[8]],
            &[3],
        );
        close(
            &call(einsum, eq("ii"), vec![Some(x)]),
            &[xv[0] + xv[4] + xv[8]],
            &[],
        );
        // Broadcast ellipsis: [2,1,2,3] x [4,3,2] -> [2,4,2,2]
        let (a, av) = t(&[2, 1, 2, 3], 9);
        let (b, bv) = t(&[4, 3, 2], 10);
        let mut want = vec![0f32; 2 * 4 * 2 * 2];
        for i in 0..2 {
            for j in 0..4 {
                for r in 0..2 {
                    for c in 0..2 {
                        want[((i * 4 + j) * 2 + r) * 2 + c] = (0..3)
                            .map(|p| av[(i * 2 + r) * 3 + p] * bv[(j * 3 + p) * 2 + c])
                            .sum();
                    }
                }
            }
        }
        close(
            &call(einsum, eq("...ij,...jk->...ik"), vec![Some(a), Some(b)]),
            &want,
            &[2, 4, 2, 2],
        );
        // Three operands with a summed-out free label: ij,jk,kl->i
        let (p, pv) = t(&[2, 3], 11);
        let (q, qv) = t(&[3, 4], 12);
        let (r, rv) = t(&[4, 2], 13);
        let want: Vec<f32> = (0..2)
            .map(|i| {
                let mut s = 0.0;
                for j in 0..3 {
                    for k in 0..4 {
                        for l in 0..2 {
                            s += pv[i * 3 + j] * qv[j * 4 + k] * rv[k * 2 + l];
                        }
                    }
                }
                s
            })
            .collect();
        close(
            &call(einsum, eq("ij,jk,kl->i"), vec![Some(p), Some(q), Some(r)]),
            &want,
            &[2],
        );
    }
}
