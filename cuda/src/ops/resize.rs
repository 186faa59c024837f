//! CUDA kernels: Resize.
//!
//! Op semantics stay in the CPU file: `quorum_core::ops::resize::resize_setup` turns the node's attributes
//! and parameter inputs (roi, scales, sizes, axes, keep_aspect_ratio_policy, every coordinate
//! transformation, nearest mode, cubic coefficient, exclude_outside, antialias) into one table per
//! axis, computed on the host in f64 exactly as the CPU kernel resamples by. Those tables are uploaded
//! as one small u32 tensor, and the device kernel is a generic separable gather: one thread per
//! output element, which takes for each resized axis that axis's taps (source element offset, weight)
//! at its output coordinate and accumulates `Π weights · x[Σ offsets]` in f32 with fma.
//!
//! Nearest mode (and an interpolating resize whose every axis is the identity) moves raw bits, one
//! tap per axis, so it is exact for every device dtype. Linear and cubic take f32 and f16 data; other
//! dtypes decline at run time.
//!
//! Table layout: `quorum_core::ops::resize::device` (words 0..2 hold the extrapolation value's bits in the
//! data's dtype, little-endian, so a 1-, 2- or 4-byte value is read from word 0's first bytes).
use super::{require_u32_len, thread_index};
use crate::decline;
use crate::driver::Arg;
use crate::memory::{device_elem_size, tensor_bytes};
use crate::ptx::{Cmp, Kernel, Reg, Space, Ty, module};
use crate::{CudaKernel, DevTensor, Inputs, KError, KResult, Run, blocks, dev_input};
use quorum_core::error::OpError;
use quorum_core::ir::Node;
use quorum_core::ops::OpCtx;
use quorum_core::ops::resize::device::{DimMap, device_tables};
use quorum_core::ops::resize::{AxisTable, tensor_like};
use quorum_core::tensor::{DType, Tensor};

/// The kernel for a Resize node, None for other ops.
pub fn claim(node: &Node) -> Option<Result<CudaKernel, String>> {
    match node.op_type.as_str() {
        "Resize" => Some(Ok(k_resize as CudaKernel)),
        _ => None,
    }
}

/// Threads per block.
const BLOCK: u32 = 256;

/// Everything the kernel text depends on.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Geometry {
    out_shape: Vec<usize>,
    dims: Vec<DimMap>,
    /// Weighted sum in f32 (data F32 or F16); otherwise a bit gather of `elem`.
    interp: bool,
    /// Element type of the data: F32/F16 when interpolating, U8/U16/U32/U64 for the bit gather.
    elem: Ty,
    /// Some output position takes the extrapolation value.
    extrap: bool,
}

/// The geometry and the table words of a resize of `in_shape` by `tables`.
pub(super) fn layout(
    in_shape: &[usize],
    out_shape: &[usize],
    tables: &[AxisTable],
    elem: Ty,
    fill_bits: u64,
) -> KResult<(Geometry, Vec<u32>)> {
    let t = device_tables(in_shape, tables, fill_bits).map_err(KError::Decline)?;
    let g = Geometry {
        out_shape: out_shape.to_vec(),
        dims: t.dims,
        interp: t.interp,
        elem,
        extrap: t.extrap,
    };
    Ok((g, t.words))
}

/// One tap axis as the kernel walks it: the addresses of its row of offsets and weights.
struct TapRow {
    n: usize,
    offs: Reg,
    weights: Option<Reg>,
}

/// Most leaves (innermost loads) emitted straight-line before the next axis becomes a loop.
const UNROLL: usize = 64;

/// Emits the walk over the taps of `rows[level..]`, calling `leaf(k, element offset, weight)` for
/// each combination (weight `None` for a bit gather).
fn walk(
    k: &mut Kernel,
    rows: &[TapRow],
    level: usize,
    off: Reg,
    w: Option<Reg>,
    unrolled: usize,
    leaf: &mut dyn FnMut(&mut Kernel, Reg, Option<Reg>),
) {
    let Some(row) = rows.get(level) else {
        leaf(k, off, w);
        return;
    };
    // One tap at `[oa + at]` (offsets) and `[wa + at]` (weights).
    let mut tap = |k: &mut Kernel, oa: Reg, wa: Option<Reg>, at: i64, unrolled: usize| {
        let o = k.ld_nc(Ty::U32, oa, at);
        let off2 = k.add(Ty::U32, off, o);
        let w2 = wa.map(|wa| {
            let wk = k.ld_nc(Ty::F32, wa, at);
            match w {
                Some(w) => k.mul(Ty::F32, w, wk),
                None => wk,
            }
        });
        walk(k, rows, level + 1, off2, w2, unrolled, leaf);
    };
    if unrolled * row.n <= UNROLL {
        for t in 0..row.n {
            tap(k, row.offs, row.weights, 4 * t as i64, unrolled * row.n);
        }
    } else {
        let n = row.n as u32;
        k.for_range(Ty::U32, 0u32, n, 1u32, |k, t| {
            let oa = k.addr(row.offs, t, 4);
            let wa = row.weights.map(|r| k.addr(r, t, 4));
            tap(k, oa, wa, 0, 1);
        });
    }
}

/// The kernel `resize(y, x, tables, n)` for `g`.
pub(super) fn resize_kernel(g: &Geometry) -> Kernel {
    let mut k = Kernel::new("resize");
    let yp = k.param_ptr("y");
    let xp = k.param_ptr("x");
    let tp = k.param_ptr("tables");
    let n = k.param("n", Ty::U32);
    let i = thread_index(&mut k, n);
    // Output coordinates, last dim first (None: a dim of length 1, coordinate 0).
    let r = g.out_shape.len();
    let mut coords: Vec<Option<Reg>> = vec![None; r];
    let mut rest = i;
    for d in (0..r).rev() {
        let len = g.out_shape[d] as u32;
        if len == 1 {
            continue;
        }
        if d == 0 || g.out_shape[..d].iter().all(|&l| l == 1) {
            coords[d] = Some(rest);
            break;
        }
        coords[d] = Some(k.rem(Ty::U32, rest, len));
        rest = k.div(Ty::U32, rest, len);
    }
    let mut base = k.mov(Ty::U32, 0u32);
    let mut rows = Vec::new();
    for (d, m) in g.dims.iter().enumerate() {
        match *m {
            DimMap::Identity { stride } => {
                if let Some(c) = coords[d] {
                    base = k.fma(Ty::U32, c, stride, base);
                }
            }
            DimMap::Taps { n, offs, weights } => {
                let row = |k: &mut Kernel, start: usize| {
                    let w = match coords[d] {
                        Some(c) => k.fma(Ty::U32, c, n as u32, start as u32),
                        None => k.mov(Ty::U32, start as u32),
                    };
                    k.addr(tp, w, 4)
                };
                let offs = row(&mut k, offs);
                let weights = g.interp.then(|| row(&mut k, weights));
                rows.push(TapRow { n, offs, weights });
            }
        }
    }
    let esize = g.elem.size();
    let ya = k.addr(yp, i, esize);
    if g.extrap {
        let mut any: Option<Reg> = None;
        for row in &rows {
            let first = k.ld_nc(Ty::U32, row.offs, 0);
            let p = k.setp(Cmp::Lt, Ty::S32, first, 0i32);
            any = Some(match any {
                Some(a) => k.pred_or(a, p),
                None => p,
            });
        }
        if let Some(any) = any {
            let elem = g.elem;
            k.when(any, |k| {
                let f = k.ld_nc(elem, tp, 0);
                store(k, elem, ya, f);
                k.raw("ret");
            });
        }
    }
    if g.interp {
        let acc = k.mov(Ty::F32, 0.0f32);
        let (elem, xp2) = (g.elem, xp);
        walk(&mut k, &rows, 0, base, None, 1, &mut |k, off, w| {
            let a = k.addr(xp2, off, esize);
            let v = k.ld_nc(elem, a, 0);
            let v = if elem == Ty::F16 {
                k.cvt(Ty::F32, Ty::F16, "", v)
            } else {
                v
            };
            match w {
                Some(w) => k.fma_acc(acc, w, v),
                None => k.raw(format_args!("add.f32 {acc}, {acc}, {v}")),
            }
        });
        let out = if g.elem == Ty::F16 {
            k.cvt(Ty::F16, Ty::F32, ".rn", acc)
        } else {
            acc
        };
        k.st(Space::Global, ya, 0, out);
    } else {
        // One tap per axis: the element offset is the sum of the rows' first entries.
        let mut off = base;
        for row in &rows {
            let o = k.ld_nc(Ty::U32, row.offs, 0);
            off = k.add(Ty::U32, off, o);
        }
        let a = k.addr(xp, off, esize);
        let v = k.ld_nc(g.elem, a, 0);
        store(&mut k, g.elem, ya, v);
    }
    k
}

fn store(k: &mut Kernel, ty: Ty, addr: Reg, v: Reg) {
    if ty == Ty::U8 {
        k.st_u8(Space::Global, addr, 0, v);
    } else {
        k.st(Space::Global, addr, 0, v);
    }
}

/// The bits of `v` in `dtype` as the CPU kernel converts an extrapolation value (ints round half to
/// even and saturate; bool is `v != 0`).
fn fill_bits(dtype: DType, v: f64) -> KResult<u64> {
    if dtype == DType::Bool {
        return Ok((v != 0.0) as u64);
    }
    let t = tensor_like(&Tensor::zeros(dtype, &[1]), &[1], vec![v])?;
    let Some(b) = tensor_bytes(&t) else {
        decline!("{dtype} values stay on the host");
    };
    Ok(quorum_core::device::forms::bits_le(&b))
}

fn invalid(msg: String) -> KError {
    KError::Op(OpError::Invalid(msg))
}

fn k_resize(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let (Some(dtype), Some(in_shape)) = (inputs.dtype(0), inputs.shape(0)) else {
        return Err(invalid("Resize needs its input X".into()));
    };
    let setup = quorum_core::device::forms::resize_setup(ctx, &in_shape, inputs)?;
    let out_shape = setup.out_shape.clone();
    let n = require_u32_len(&out_shape)?;
    require_u32_len(&in_shape)?;
    let Some(esize) = device_elem_size(dtype) else {
        decline!("{dtype} values stay on the host");
    };
    if n == 0 {
        return Ok(vec![run.alloc(dtype, &out_shape)?]);
    }
    if in_shape.contains(&0) {
        decline!("an empty input resized to a non-empty output (zeros)");
    }
    ctx.check_alloc(&out_shape, esize)?;
    let tables = setup.tables(ctx, &in_shape)?;
    let interp = tables.iter().any(|t| matches!(t, AxisTable::Taps(_)));
    let elem = if interp {
        match dtype {
            DType::F32 => Ty::F32,
            DType::F16 => Ty::F16,
            d => decline!("linear/cubic interpolation of {d} data (f32 and f16 only)"),
        }
    } else {
        match esize {
            1 => Ty::U8,
            2 => Ty::U16,
            4 => Ty::U32,
            8 => Ty::U64,
            s => decline!("{s}-byte elements"),
        }
    };
    let fill = fill_bits(dtype, setup.extrapolation())?;
    let (g, words) = layout(&in_shape, &out_shape, &tables, elem, fill)?;
    let table = Tensor::U32(
        ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[words.len()]), words)
            .map_err(|e| invalid(e.to_string()))?,
    );
    let table = run.upload(&table)?;
    let x = dev_input(inputs, 0)?;
    let y = run.alloc(dtype, &out_shape)?;
    let ptx = module(run.cc(), &[resize_kernel(&g)]);
    run.launch(
        &ptx,
        "resize",
        (blocks(n as usize, BLOCK), 1, 1),
        (BLOCK, 1, 1),
        0,
        &[y.arg_out(), x.arg_in(), table.arg_in(), Arg::U32(n)],
    )?;
    Ok(vec![y])
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorum_core::ops::resize::Taps;
    use quorum_core::ops::resize::device::SENTINEL;

    fn text(g: &Geometry) -> String {
        module((9, 0), &[resize_kernel(g)])
    }

    fn taps(n: usize, out: usize, extrap: bool) -> AxisTable {
        AxisTable::Taps(Taps {
            n,
            idx: (0..out * n).map(|i| i % 3).collect(),
            w: (0..out * n).map(|i| i as f64 / 8.0).collect(),
            extrap: (0..out).map(|o| extrap && o == 0).collect(),
        })
    }

    #[test]
    fn nearest_is_a_bit_gather_with_extrapolation() {
        let tables = vec![
            AxisTable::Identity,
            AxisTable::Identity,
            AxisTable::Map(vec![Some(0), Some(0), Some(1), None]),
            AxisTable::Map(vec![Some(1), Some(0), Some(1)]),
        ];
        let (g, words) = layout(&[1, 2, 2, 2], &[1, 2, 4, 3], &tables, Ty::U32, 7).unwrap();
        assert_eq!(&words[..2], &[7, 0]);
        // Axis 2 (stride 2): offsets 0 0 2 SENTINEL; axis 3 (stride 1): 1 0 1.
        assert_eq!(&words[2..6], &[0, 0, 2, SENTINEL]);
        assert_eq!(&words[6..9], &[1, 0, 1]);
        assert!(g.extrap && !g.interp);
        let t = text(&g);
        assert!(t.contains(".visible .entry resize("), "{t}");
        assert!(t.contains(".param .u64 tables"), "{t}");
        assert!(t.contains("ld.global.nc.u32"), "{t}");
        assert!(t.contains("setp.lt.s32"), "{t}");
        assert!(!t.contains("fma.rn.f32"), "{t}");
        assert!(!t.contains(".approx"), "{t}");
    }

    #[test]
    fn interpolation_unrolls_small_taps_and_loops_wide_ones() {
        let tables = vec![AxisTable::Identity, taps(4, 5, false), taps(2, 7, false)];
        let (g, words) = layout(&[3, 4, 6], &[3, 5, 7], &tables, Ty::F32, 0).unwrap();
        assert_eq!(words.len(), 2 + 2 * 20 + 2 * 14);
        assert!(g.interp && !g.extrap);
        let t = text(&g);
        assert_eq!(t.matches("fma.rn.f32").count(), 8, "{t}");
        assert!(!t.contains("L_loop"), "{t}");
        assert!(!t.contains(".approx"), "{t}");
        assert!(t.contains("st.global.f32"), "{t}");
        // Antialiased downsampling: 16 and 12 taps, beyond the unroll budget.
        let tables = vec![taps(16, 3, false), taps(12, 2, true)];
        let (g, _) = layout(&[40, 30], &[3, 2], &tables, Ty::F16, 0).unwrap();
        let t = text(&g);
        assert!(t.contains("L_loop"), "{t}");
        assert!(t.contains("cvt.f32.f16"), "{t}");
        assert!(t.contains("cvt.rn.f16.f32"), "{t}");
        assert!(t.contains("st.global.b16"), "{t}");
        assert!(t.contains("setp.lt.s32"), "{t}");
    }

    #[test]
    fn fill_bits_follow_the_cpu_conversion() {
        assert_eq!(fill_bits(DType::F32, 1.5).unwrap(), 1.5f32.to_bits() as u64);
        assert_eq!(fill_bits(DType::U8, 300.0).unwrap(), 255);
        assert_eq!(fill_bits(DType::I8, -2.5).unwrap(), (-2i8) as u8 as u64);
        assert_eq!(fill_bits(DType::I64, -1.0).unwrap(), u64::MAX);
        assert_eq!(fill_bits(DType::Bool, 0.5).unwrap(), 1);
    }

    /// The kernel's arithmetic on the host: walks `g` and `words` as the generated PTX does.
    fn emulate(g: &Geometry, words: &[u32], x: &[f32]) -> Vec<f32> {
        let n: usize = g.out_shape.iter().product();
        let r = g.out_shape.len();
        (0..n)
            .map(|i| {
                let mut c = vec![0usize; r];
                let mut rest = i;
                for d in (0..r).rev() {
                    c[d] = rest % g.out_shape[d];
                    rest /= g.out_shape[d];
                }
                let mut base = 0usize;
                let mut rows = Vec::new();
                for (d, m) in g.dims.iter().enumerate() {
                    match *m {
                        DimMap::Identity { stride } => base += c[d] * stride as usize,
                        DimMap::Taps { n, offs, weights } => {
                            rows.push((n, offs + c[d] * n, weights + c[d] * n))
                        }
                    }
                }
                if g.extrap && rows.iter().any(|r| (words[r.1] as i32) < 0) {
                    return f32::from_bits(words[0]);
                }
                if !g.interp {
                    return x[base + rows.iter().map(|r| words[r.1] as usize).sum::<usize>()];
                }
                fn rec(
                    rows: &[(usize, usize, usize)],
                    words: &[u32],
                    x: &[f32],
                    off: usize,
                    w: Option<f32>,
                    acc: &mut f32,
                ) {
                    let Some(&(n, o, wr)) = rows.first() else {
                        *acc = w.unwrap_or(1.0).mul_add(x[off], *acc);
                        return;
                    };
                    for k in 0..n {
                        let wk = f32::from_bits(words[wr + k]);
                        let w2 = w.map_or(wk, |w| w * wk);
                        rec(
                            &rows[1..],
                            words,
                            x,
                            off + words[o + k] as usize,
                            Some(w2),
                            acc,
                        );
                    }
                }
                let mut acc = 0f32;
                rec(&rows, words, x, base, None, &mut acc);
                acc
            })
            .collect()
    }

    /// Runs `attrs`/`ins` through the CPU kernel and through the host emulation of the device path.
    fn compare(opset: i64, attrs: Vec<(&str, quorum_core::ir::Attr)>, ins: Vec<Option<Tensor>>) {
        use quorum_core::ops::testing::run_kernel;
        let cpu = quorum_core::ops::Registry::cpu().get("", "Resize").unwrap();
        let want = run_kernel(cpu, "Resize", opset, attrs.clone(), ins.clone(), 1).unwrap();
        let dev = |ctx: &OpCtx, v: &[Option<&quorum_core::tensor::Value>]| {
            let t = |i: usize| v.get(i).copied().flatten().and_then(|v| v.as_tensor());
            let x = t(0).unwrap();
            let f = |i: usize| t(i).map(|t| t.to_f64_vec().unwrap());
            let sz = t(3).map(|t| t.to_i64_vec().unwrap());
            let setup = quorum_core::ops::resize::resize_setup(ctx, x.shape(), f(1), f(2), sz)?;
            let tables = setup.tables(ctx, x.shape())?;
            let elem = if tables.iter().any(|t| matches!(t, AxisTable::Taps(_))) {
                Ty::F32
            } else {
                Ty::U32
            };
            let fill = fill_bits(DType::F32, setup.extrapolation()).unwrap();
            let (g, words) = layout(x.shape(), &setup.out_shape, &tables, elem, fill).unwrap();
            let xs: Vec<f32> = x.to_f64_vec()?.iter().map(|&v| v as f32).collect();
            let y = Tensor::from_f32(&setup.out_shape, emulate(&g, &words, &xs))?;
            Ok(vec![quorum_core::tensor::Value::Tensor(y)])
        };
        let got = run_kernel(dev, "Resize", opset, attrs, ins, 1).unwrap();
        assert_eq!(got[0].shape(), want[0].shape());
        let (a, b) = (got[0].to_f64_vec().unwrap(), want[0].to_f64_vec().unwrap());
        for (k, (a, b)) in a.iter().zip(&b).enumerate() {
            assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{k}: {a} vs {b}");
        }
    }

    #[test]
    fn host_emulation_matches_the_cpu_kernel() {
        use quorum_core::ir::Attr;
        let s = |v: &str| Attr::String(v.as_bytes().to_vec());
        let x = |shape: &[usize]| {
            let n: usize = shape.iter().product();
            let v = (0..n)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
                .collect();
            Some(Tensor::from_f32(shape, v).unwrap())
        };
        let f = |v: &[f32]| Some(Tensor::from_f32(&[v.len()], v.to_vec()).unwrap());
        let z = |v: &[i64]| Some(Tensor::from_i64(&[v.len()], v.to_vec()).unwrap());
        compare(
            19,
            vec![],
            vec![x(&[2, 3, 5, 7]), None, f(&[1.0, 1.0, 2.5, 0.6])],
        );
        compare(
            19,
            vec![("mode", s("linear"))],
            vec![x(&[2, 3, 5, 7]), None, f(&[1.0, 1.5, 2.5, 0.6])],
        );
        compare(
            19,
            vec![
                ("mode", s("cubic")),
                ("antialias", Attr::Int(1)),
                ("exclude_outside", Attr::Int(1)),
            ],
            vec![x(&[1, 2, 17, 23]), None, f(&[1.0, 1.0, 0.3, 0.2])],
        );
        for mode in ["nearest", "linear", "cubic"] {
            compare(
                19,
                vec![
                    ("mode", s(mode)),
                    ("coordinate_transformation_mode", s("tf_crop_and_resize")),
                    ("extrapolation_value", Attr::Float(3.5)),
                ],
                vec![
                    x(&[1, 2, 6, 7]),
                    f(&[0.0, 0.0, -0.3, 0.4, 1.0, 1.0, 1.4, 1.2]),
                    None,
                    z(&[1, 2, 5, 9]),
                ],
            );
        }
        compare(
            18,
            vec![
                ("mode", s("linear")),
                ("axes", Attr::Ints(vec![3, 2])),
                ("keep_aspect_ratio_policy", s("not_larger")),
            ],
            vec![x(&[1, 2, 5, 8]), None, None, z(&[3, 4])],
        );
        compare(
            19,
            vec![("mode", s("linear"))],
            vec![x(&[1, 2, 3, 4, 5]), None, f(&[1.0, 1.0, 2.0, 1.5, 0.6])],
        );
    }
}
