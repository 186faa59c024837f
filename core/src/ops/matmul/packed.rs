//! f32 MatMul and Gemm through the packed GEMM of `quorum-kernels` (AVX-512 or AVX2+FMA
//! micro-kernels): the left operand packed into row panels per call; the right one, when it is a
//! constant of the session (a weight), packed once and cached (`conv/weights.rs`), otherwise read
//! by the GEMM's own block packing. Shapes too thin for its register tile (fewer rows than a tile
//! where B is not a weight, or a handful of columns) keep the general path, which handles them as
//! matrix-vector products.
//!
//! Fewer rows than a tile (a batch of one) take the packed path where `B` is a weight, through
//! tiles that compute only 1 or 4 rows with the full tile's sums (a lone row four whole `B` panels
//! at a time, `row_of_4` in `quorum-kernels`). A Linear layer's bias (MatMulBias,
//! `Epilogue::col_bias`) is added in the GEMM's epilogue, and so is a Gemm's C when alpha and beta
//! are 1 (per column, per row, or a whole residual): the same sum as the pass after it.
use std::sync::Arc;

use ndarray::{ArrayD, IxDyn};
use quorum_kernels::{BSource, Epilogue, Isa, PackedA, PackedB, Threads, sgemm_uninit};
use rayon::prelude::*;

use super::{MatMulShape, batch_offsets, gemm_dims, matmul_nd, matmul_shape};
use crate::bail;
use crate::error::OpResult;
use crate::ops::OpCtx;
use crate::ops::conv::weights::packed_constant;

/// The `m×n` product of the packed GEMM, `epi` applied as it is stored, in a new vector (the GEMM
/// writes every element, so the vector is never filled first).
pub(crate) fn gemm_to_vec(
    a: &PackedA,
    b: &BSource,
    m: usize,
    n: usize,
    epi: &Epilogue,
) -> Vec<f32> {
    let mut out: Vec<f32> = crate::arena::vec(m * n);
    sgemm_uninit(
        a,
        b,
        n,
        &mut out.spare_capacity_mut()[..m * n],
        n,
        epi,
        Threads::Auto,
    );
    // SAFETY: sgemm_uninit wrote every element of the m×n output.
    unsafe { out.set_len(m * n) };
    out
}

pub(super) fn matmul_f32(ctx: &OpCtx, a: &ArrayD<f32>, b: &ArrayD<f32>) -> OpResult<ArrayD<f32>> {
    Ok(matmul_bias_f32(ctx, a, b, None)?.0)
}

/// [`matmul_f32`], with `col_bias` (one value per column of the product, a Linear layer's bias)
/// added as the GEMM stores each output where B is shared by every batch (one tall GEMM); the
/// flag says whether it was. The sum is the Add's own, `product + bias`, so the result equals
/// MatMul then Add bit for bit either way.
pub(crate) fn matmul_bias_f32(
    ctx: &OpCtx,
    a: &ArrayD<f32>,
    b: &ArrayD<f32>,
    col_bias: Option<&[f32]>,
) -> OpResult<(ArrayD<f32>, bool)> {
    let MatMulShape {
        m,
        k,
        n,
        a_batch,
        b_batch,
        batch,
        out_shape,
    } = matmul_shape(a.shape(), b.shape())?;
    let isa = Isa::detected();
    let na: usize = a_batch.iter().product();
    let nbb: usize = b_batch.iter().product();
    let nb: usize = batch.iter().product();
    // One tall GEMM when B is shared: A's batches fold into its rows.
    let tall = nbb == 1 && na == nb;
    let rows = if tall { nb * m } else { m };
    // Fewer rows than a tile (a batch of one) where B is a weight, packed once: the tile kernels
    // compute only those rows.
    let weight = tall && b.ndim() == 2 && is_constant_b(ctx);
    if (rows < isa.mr() && !weight) || rows == 0 || n < isa.nr() / 2 {
        return Ok((matmul_nd(ctx, a, b)?, false));
    }
    ctx.check_alloc(&out_shape, std::mem::size_of::<f32>())?;
    let a = a.as_standard_layout();
    let b = b.as_standard_layout();
    let (Some(asl), Some(bsl)) = (a.as_slice(), b.as_slice()) else {
        bail!("MatMul: non-contiguous operand")
    };
    let total = nb * m * n;
    let mut applied = false;
    let mut out: Vec<f32> = crate::arena::vec(total);
    let spare = &mut out.spare_capacity_mut()[..total];
    if tall {
        let pa = PackedA::new(isa, rows, k, asl, k);
        // A 2-D B that is a session constant: packed once, read in place.
        let cached = if b.ndim() == 2 {
            weight_b(ctx, isa, (k, n), false, bsl)
        } else {
            None
        };
        let src = match &cached {
            Some(pb) => BSource::Packed(pb),
            None => BSource::Dense { data: bsl, ld: n },
        };
        let col_bias = col_bias.filter(|c| c.len() == n);
        applied = col_bias.is_some();
        let epi = Epilogue {
            col_bias,
            ..Epilogue::NONE
        };
        sgemm_uninit(&pa, &src, n, spare, n, &epi, Threads::Auto);
    } else if total > 0 {
        let ao = batch_offsets(&a_batch, &batch, m * k);
        let bo = batch_offsets(&b_batch, &batch, k * n);
        let one = |i: usize, o: &mut [std::mem::MaybeUninit<f32>], threads: Threads| {
            let pa = PackedA::new(isa, m, k, &asl[ao[i]..], k);
            let src = BSource::Dense {
                data: &bsl[bo[i]..],
                ld: n,
            };
            sgemm_uninit(&pa, &src, n, o, n, &Epilogue::NONE, threads);
        };
        // Many small products (attention heads): one per task, each on one thread.
        let work = m.saturating_mul(n).saturating_mul(k.max(1));
        if nb >= 2 * rayon::current_num_threads() && work < quorum_kernels::gemm::PAR_MIN_WORK {
            spare
                .par_chunks_mut(m * n)
                .enumerate()
                .for_each(|(i, o)| one(i, o, Threads::Serial));
        } else {
            for (i, o) in spare.chunks_mut(m * n).enumerate() {
                one(i, o, Threads::Auto);
            }
        }
    }
    // SAFETY: sgemm_uninit writes every element of each `rows × n` (or `m × n`) output it is given,
    // and those outputs cover the first `total` elements.
    unsafe { out.set_len(total) };
    Ok((ArrayD::from_shape_vec(IxDyn(&out_shape), out)?, applied))
}

/// Whether input 1 is a constant of the running session (a weight, packed once).
fn is_constant_b(ctx: &OpCtx) -> bool {
    ctx.node
        .inputs
        .get(1)
        .is_some_and(|name| ctx.runner.constant(name).is_some())
}

/// Input 1 (`B`, `k×n`, stored transposed when `trans`) packed once when it is a constant of the
/// running session (cached per initializer); `None` when it is fed or computed per run.
fn weight_b(
    ctx: &OpCtx,
    isa: Isa,
    (k, n): (usize, usize),
    trans: bool,
    b: &[f32],
) -> Option<Arc<PackedB>> {
    if !is_constant_b(ctx) {
        return None;
    }
    let (rs, cs) = if trans { (1, k) } else { (n, 1) };
    Some(packed_constant(
        ctx,
        1,
        "gemm-b",
        isa,
        trans as usize,
        &[k, n],
        || PackedB::new(isa, k, n, b, rs, cs),
    ))
}

/// Gemm in f32: `alpha·op(A)·op(B) + beta·C`, or `None` where the shape is too thin for the packed
/// GEMM (the caller's general path runs it).
pub(super) fn gemm_f32(
    ctx: &OpCtx,
    a: &ArrayD<f32>,
    b: &ArrayD<f32>,
    c: Option<&ArrayD<f32>>,
    (ta, tb): (bool, bool),
    (alpha, beta): (f64, f64),
) -> OpResult<Option<ArrayD<f32>>> {
    if a.ndim() != 2 || b.ndim() != 2 {
        return Ok(None);
    }
    let (m, k, kb, n) = gemm_dims(a.shape(), b.shape(), ta, tb);
    let isa = Isa::detected();
    // Fewer rows than a tile (a batch of one) only where B is a weight, packed once.
    if k != kb || m == 0 || (m < isa.mr() && !is_constant_b(ctx)) || n < isa.nr() / 2 {
        return Ok(None);
    }
    let cv = match c {
        Some(c) if beta != 0.0 => match c.broadcast(IxDyn(&[m, n])) {
            Some(v) if c.ndim() <= 2 => Some(v),
            _ => return Ok(None),
        },
        _ => None,
    };
    ctx.check_alloc(&[m, n], std::mem::size_of::<f32>())?;
    let a = a.as_standard_layout();
    let b = b.as_standard_layout();
    let (Some(asl), Some(bsl)) = (a.as_slice(), b.as_slice()) else {
        return Ok(None);
    };
    let pa = if ta {
        PackedA::strided(isa, m, k, asl, 1, m)
    } else {
        PackedA::new(isa, m, k, asl, k)
    };
    let packed_per_call;
    let cached = weight_b(ctx, isa, (k, n), tb, bsl);
    let src = match (&cached, tb) {
        (Some(pb), _) => BSource::Packed(pb),
        (None, false) => BSource::Dense { data: bsl, ld: n },
        (None, true) => {
            packed_per_call = PackedB::new(isa, k, n, bsl, 1, k);
            BSource::Packed(&packed_per_call)
        }
    };
    let (alpha, beta) = (alpha as f32, beta as f32);
    // C added as the GEMM stores each output where nothing comes between (alpha = beta = 1): the
    // same sum, `product + C`, as the pass after it.
    let fused = c
        .filter(|_| cv.is_some() && alpha == 1.0 && beta == 1.0)
        .and_then(|c| c_epilogue(c, m, n));
    let mut out = gemm_to_vec(&pa, &src, m, n, fused.as_ref().unwrap_or(&Epilogue::NONE));
    if fused.is_some() {
        return Ok(Some(ArrayD::from_shape_vec(IxDyn(&[m, n]), out)?));
    }
    if alpha != 1.0 {
        out.iter_mut().for_each(|v| *v *= alpha);
    }
    if let Some(cv) = cv {
        for (row, crow) in out.chunks_mut(n).zip(cv.rows()) {
            for (v, &cval) in row.iter_mut().zip(crow.iter()) {
                *v += if beta == 1.0 { cval } else { cval * beta };
            }
        }
    }
    Ok(Some(ArrayD::from_shape_vec(IxDyn(&[m, n]), out)?))
}

/// Gemm's C as an epilogue: a bias per column (C of `[n]` or `[1, n]`), per row (`[m, 1]`), or
/// the whole `m×n` as a residual; `None` for other layouts (a scalar, a strided C).
fn c_epilogue(c: &ArrayD<f32>, m: usize, n: usize) -> Option<Epilogue<'_>> {
    let flat = c.as_slice()?;
    match c.shape() {
        [nc] | [1, nc] if *nc == n => Some(Epilogue {
            col_bias: Some(flat),
            ..Epilogue::NONE
        }),
        [mc, 1] if *mc == m => Some(Epilogue {
            bias: Some(flat),
            ..Epilogue::NONE
        }),
        [mc, nc] if *mc == m && *nc == n => Some(Epilogue {
            residual: Some(flat),
            ..Epilogue::NONE
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::run_kernel;
    use crate::tensor::Tensor;

    fn rand(seed: u64, n: usize) -> Vec<f32> {
        crate::ops::testing::seeded_f32(seed, n, -1.0, 1.0)
    }

    /// numpy.matmul by f64 sums over broadcast batches, and the bound each element may be off by
    /// (f32 rounding of a k-term sum: k·ε·Σ|a·b|).
    fn reference(a: &[f32], ash: &[usize], b: &[f32], bsh: &[usize]) -> Vec<(f64, f64)> {
        let s = matmul_shape(ash, bsh).unwrap();
        let ao = batch_offsets(&s.a_batch, &s.batch, s.m * s.k);
        let bo = batch_offsets(&s.b_batch, &s.batch, s.k * s.n);
        let mut out = Vec::new();
        for bi in 0..ao.len() {
            for i in 0..s.m {
                for j in 0..s.n {
                    let (mut sum, mut mag) = (0f64, 0f64);
                    for p in 0..s.k {
                        let t = a[ao[bi] + i * s.k + p] as f64 * b[bo[bi] + p * s.n + j] as f64;
                        sum += t;
                        mag += t.abs();
                    }
                    out.push((sum, (s.k as f64 + 2.0) * f32::EPSILON as f64 * mag + 1e-30));
                }
            }
        }
        out
    }

    /// The first element of `got` outside its bound.
    fn outside(got: &Tensor, want: &[(f64, f64)]) -> Option<usize> {
        let g: Vec<f32> = got
            .to_f64_vec()
            .unwrap()
            .iter()
            .map(|&v| v as f32)
            .collect();
        first_outside(&g, want)
    }

    // `!(d <= tol)` on purpose: a NaN is outside.
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    fn first_outside(got: &[f32], want: &[(f64, f64)]) -> Option<usize> {
        if got.len() != want.len() {
            return Some(0);
        }
        got.iter()
            .zip(want)
            .position(|(g, (w, tol))| !((*g as f64 - w).abs() <= *tol))
    }

    /// Tall (shared B), batched with broadcasting both ways, many small products, 1-D promotion,
    /// an empty K, and shapes thin enough to take the general path, each against f64 sums.
    #[test]
    fn packed_matmul_matches_f64_sums() {
        for (ash, bsh) in [
            (vec![4, 20, 37], vec![37, 45]),
            (vec![2, 3, 20, 37], vec![3, 37, 45]),
            (vec![3, 1, 9, 40], vec![1, 4, 40, 33]),
            (vec![16, 9, 8], vec![16, 8, 40]),
            (vec![37], vec![37, 45]),
            (vec![20, 0], vec![0, 45]),
            (vec![20, 37], vec![37, 3]),
            (vec![130, 64], vec![64, 200]),
        ] {
            let (na, nb) = (ash.iter().product(), bsh.iter().product());
            let (a, b) = (rand(1, na), rand(2, nb));
            let got = run_kernel(
                super::super::matmul,
                "MatMul",
                13,
                vec![],
                vec![
                    Some(Tensor::from_f32(&ash, a.clone()).unwrap()),
                    Some(Tensor::from_f32(&bsh, b.clone()).unwrap()),
                ],
                1,
            )
            .unwrap()
            .remove(0);
            let want = reference(&a, &ash, &b, &bsh);
            assert_eq!(outside(&got, &want), None, "{ash:?} x {bsh:?}");
        }
    }

    /// The comparison above catches a product one term short (a lost step of K), the slip a wrong
    /// block edge makes.
    #[test]
    fn the_comparison_catches_a_lost_term() {
        let (ash, bsh) = (vec![20usize, 37], vec![37usize, 45]);
        let (a, b) = (rand(3, 20 * 37), rand(4, 37 * 45));
        let want = reference(&a, &ash, &b, &bsh);
        let short = reference(&a[..], &ash, &b, &bsh)
            .iter()
            .enumerate()
            .map(|(e, (w, _))| {
                let (i, j) = (e / 45, e % 45);
                (w - a[i * 37 + 36] as f64 * b[36 * 45 + j] as f64) as f32
            })
            .collect::<Vec<f32>>();
        assert!(first_outside(&short, &want).is_some());
    }

    /// A runner that calls input `w` a constant of the session.
    struct Constant(Arc<crate::tensor::Value>);

    impl crate::ops::SubgraphRunner for Constant {
        fn run_subgraph(
            &self,
            _: &crate::ir::Graph,
            _: Vec<crate::tensor::Value>,
        ) -> OpResult<Vec<crate::tensor::Value>> {
            unreachable!()
        }

        fn constant(&self, name: &str) -> Option<Arc<crate::tensor::Value>> {
            (name == "w").then(|| self.0.clone())
        }
    }

    /// Gemm through the packed path: every transpose, alpha and beta, C of each broadcast shape, B
    /// fed per run and B a cached constant (twice: the second from the cache), tiles of 19, 3 and 1
    /// rows, against f64 sums of the definition.
    #[test]
    fn packed_gemm_matches_f64_sums() {
        use crate::ir::{Attr, Node};
        use crate::tensor::Value;
        // 1 and 3 rows: fewer than a tile, which the packed path takes where B is a constant.
        for (m, k, n) in [(19usize, 70usize, 41usize), (1, 300, 70), (3, 70, 41)] {
            for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
                for (cshape, alpha, beta) in [
                    (vec![n], 1.0f32, 1.0f32),
                    (vec![m, 1], 0.5, -2.0),
                    (vec![m, n], 1.0, 0.25),
                    (vec![], 2.0, 1.0),
                ] {
                    let ash = if ta { [k, m] } else { [m, k] };
                    let bsh = if tb { [n, k] } else { [k, n] };
                    let (a, b) = (rand(5, m * k), rand(6, k * n));
                    let c = rand(7, cshape.iter().product());
                    let at = |i: usize, p: usize| if ta { a[p * m + i] } else { a[i * k + p] };
                    let bt = |p: usize, j: usize| if tb { b[j * k + p] } else { b[p * n + j] };
                    let cat = |i: usize, j: usize| match cshape.as_slice() {
                        [_] => c[j],
                        [_, 1] => c[i],
                        [_, _] => c[i * n + j],
                        _ => c[0],
                    };
                    let mut want = Vec::new();
                    for i in 0..m {
                        for j in 0..n {
                            let (mut sum, mut mag) = (0f64, 0f64);
                            for p in 0..k {
                                let t = at(i, p) as f64 * bt(p, j) as f64;
                                sum += t;
                                mag += t.abs();
                            }
                            let v = alpha as f64 * sum + beta as f64 * cat(i, j) as f64;
                            let tol = (k as f64 + 4.0)
                                * f32::EPSILON as f64
                                * (alpha.abs() as f64 * mag
                                    + (beta as f64 * cat(i, j) as f64).abs())
                                + 1e-30;
                            want.push((v, tol));
                        }
                    }
                    let node = Node {
                        name: "g".into(),
                        op_type: "Gemm".into(),
                        domain: String::new(),
                        opset: 13,
                        inputs: vec!["a".into(), "w".into(), "c".into()],
                        outputs: vec!["y".into()],
                        attrs: [
                            ("transA".to_string(), Attr::Int(ta as i64)),
                            ("transB".to_string(), Attr::Int(tb as i64)),
                            ("alpha".to_string(), Attr::Float(alpha)),
                            ("beta".to_string(), Attr::Float(beta)),
                        ]
                        .into(),
                    };
                    let av = Value::Tensor(Tensor::from_f32(&ash, a.clone()).unwrap());
                    let bv = Arc::new(Value::Tensor(Tensor::from_f32(&bsh, b.clone()).unwrap()));
                    let cv = Value::Tensor(Tensor::from_f32(&cshape, c.clone()).unwrap());
                    let fed = crate::ops::NoSubgraphs;
                    let constant = Constant(bv.clone());
                    for runner in [
                        &fed as &dyn crate::ops::SubgraphRunner,
                        &constant,
                        &constant,
                    ] {
                        let ctx = OpCtx {
                            node: &node,
                            runner,
                            max_tensor_bytes: 1 << 30,
                        };
                        let got = super::super::gemm_op(&ctx, &[Some(&av), Some(&bv), Some(&cv)])
                            .unwrap()
                            .remove(0)
                            .into_tensor()
                            .unwrap();
                        assert_eq!(got.shape(), &[m, n]);
                        assert_eq!(
                            outside(&got, &want),
                            None,
                            "m={m} transA={ta} transB={tb} C{cshape:?} alpha={alpha} beta={beta}"
                        );
                    }
                }
            }
        }
    }

    /// Gemm with alpha = beta = 1 adds C as the GEMM stores each output (a bias per column, per
    /// row, or a whole residual): bit for bit the product without C, then C added, for every C
    /// layout the epilogue takes, B fed and B a constant; and C read in the wrong layout (a row's
    /// bias as a column's) must differ.
    #[test]
    fn gemm_adds_c_in_the_epilogue_bit_for_bit() {
        use crate::ir::{Attr, Node};
        use crate::tensor::Value;
        let (m, k, n) = (19usize, 70usize, 41usize);
        let node = |inputs: &[&str]| Node {
            name: "g".into(),
            op_type: "Gemm".into(),
            domain: String::new(),
            opset: 13,
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: vec!["y".into()],
            attrs: [("transB".to_string(), Attr::Int(1))].into(),
        };
        let a = Value::Tensor(Tensor::from_f32(&[m, k], rand(11, m * k)).unwrap());
        let w = Arc::new(Value::Tensor(
            Tensor::from_f32(&[n, k], rand(12, n * k)).unwrap(),
        ));
        let run = |node: &Node, runner: &dyn crate::ops::SubgraphRunner, c: Option<&Value>| {
            let ctx = OpCtx {
                node,
                runner,
                max_tensor_bytes: 1 << 30,
            };
            let mut ins = vec![Some(&a), Some(&*w)];
            ins.extend(c.map(Some));
            let t = super::super::gemm_op(&ctx, &ins).unwrap().remove(0);
            t.into_tensor().unwrap().to_f64_vec().unwrap()
        };
        let constant = Constant(w.clone());
        let product = run(&node(&["a", "w"]), &constant, None);
        for cshape in [vec![n], vec![1, n], vec![m, 1], vec![m, n]] {
            let c = rand(13, cshape.iter().product());
            let cat = |i: usize, j: usize| match cshape.as_slice() {
                [_] | [1, _] => c[j],
                [_, 1] => c[i],
                _ => c[i * n + j],
            };
            let want: Vec<u32> = (0..m * n)
                .map(|e| (product[e] as f32 + cat(e / n, e % n)).to_bits())
                .collect();
            let cv = Value::Tensor(Tensor::from_f32(&cshape, c.clone()).unwrap());
            for runner in [
                &crate::ops::NoSubgraphs as &dyn crate::ops::SubgraphRunner,
                &constant,
            ] {
                let got: Vec<u32> = run(&node(&["a", "w", "c"]), runner, Some(&cv))
                    .iter()
                    .map(|&v| (v as f32).to_bits())
                    .collect();
                assert_eq!(got, want, "C{cshape:?}");
            }
            if cshape == [m, 1] {
                let wrong: Vec<u32> = (0..m * n)
                    .map(|e| (product[e] as f32 + c[(e % n) % m]).to_bits())
                    .collect();
                assert_ne!(wrong, want, "a row's bias read as a column's passed");
            }
        }
    }
}
