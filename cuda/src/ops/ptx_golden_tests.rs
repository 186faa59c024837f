//! Golden digest of the generated PTX: builds a broad sample of every kernel family's modules (the
//! same sample parameters the families' own unit tests use) and hashes all their text into one
//! FNV-1a digest. It pins the output of the PTX builder (`cuda/ptx.rs`) byte for byte, so that a
//! change meant only to make generation faster cannot change a single instruction.
//!
//! A change that is meant to alter the generated code fails this test; check the new text, then
//! update `GOLDEN` to the digest printed by the failure.
use super::cast::{Kind as CastKind, cast_kernel, kind};
use super::conv::{Direct, direct_kernel};
use super::elementwise as ew;
use super::index::{
    cumsum_kernel, gather_elements_dev_kernel, gather_elements_kernel, one_hot_kernel,
    range_kernel, scatter_kernel, trilu_kernel,
};
use super::math::{erf64, exp64, log64, sincos64, tanh64};
use super::matmul::skinny::{build_skinny, reduce_kernel, reduce4_kernel};
use super::matmul::tile::{BSrc, TileCfg, Variant, build, tests::all_cfgs};
use super::norm::rows::tests::sample_params;
use super::norm::rows::{
    ParamAt, RowNorm, norm_apply_kernel, norm_merge_kernel, norm_part_kernel, rownorm_kernel,
};
use super::norm::{bn_kernel, lrn_kernel};
use super::pool::pool_kernel;
use super::pool::tests::{SAMPLE_KINDS, sample_walks};
use super::reduce::rows::{Elem, Rows, combine_add, combine_max};
use super::reduce::tests::FOLDS;
use super::reduce::{Walk, fold_kernel, lse_kernel, merge_kernel, part_kernel};
use super::resize::{layout, resize_kernel};
use super::softmax::{Kind as SoftKind, softmax_kernel};
use crate::ptx::{Kernel, Space, Ty, module};

use quorum_core::ir::{Attr, Node};
use quorum_core::ops::data::index::Reduction;
use quorum_core::ops::map_op::MapOp;
use quorum_core::ops::resize::{AxisTable, Taps};
use quorum_core::ops::{NoSubgraphs, OpCtx};
use quorum_core::tensor::DType;
use quorum_optable::Family;

/// The digest of every module `golden_modules` prints, from the generator as of its last intended
/// change.
const GOLDEN: u64 = 0x89c0_1ae4_58ad_8bdd;

/// FNV-1a, 64-bit: stable across runs and toolchains (unlike `RandomState`).
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn bytes(&mut self, b: &[u8]) {
        for &x in b {
            self.0 ^= x as u64;
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

fn gemm_modules(out: &mut Vec<String>) {
    for cfg in all_cfgs() {
        out.push(module((9, 0), &[build(&cfg)]));
    }
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
            out.push(module((9, 0), &[build_skinny(&cfg)]));
        }
    }
    for (c, h) in [
        (false, Elem::F32),
        (true, Elem::F32),
        (true, Elem::F16),
        (true, Elem::Bf16),
    ] {
        out.push(module(
            (9, 0),
            &[reduce_kernel(c, h, if c { 8 } else { 1 })],
        ));
    }
    for c in [false, true] {
        out.push(module((9, 0), &[reduce4_kernel(c)]));
    }
    // Older targets print a different header.
    out.push(module((8, 6), &[build(&all_cfgs()[0])]));
    out.push(module((7, 5), &[reduce_kernel(true, Elem::F32, 8)]));
}

fn cast_modules(out: &mut Vec<String>) {
    let all = [
        DType::F64,
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::Bool,
    ];
    for from in all {
        for to in all {
            let (s, d) = (kind(from).unwrap(), kind(to).unwrap());
            if from == to || (d == CastKind::Bf16 && !matches!(s, CastKind::F32 | CastKind::F16)) {
                continue;
            }
            out.push(module((9, 0), &[cast_kernel(s, d)]));
        }
    }
}

fn conv_modules(out: &mut Vec<String>) {
    for kind in [Direct::Conv, Direct::Transpose] {
        for (b, h) in [
            (false, Elem::F32),
            (true, Elem::F32),
            (true, Elem::F16),
            (true, Elem::Bf16),
        ] {
            out.push(module((9, 0), &[direct_kernel(kind, b, h)]));
        }
    }
}

fn elementwise_modules(out: &mut Vec<String>) {
    // Every unary expression with default attributes, between a half load and a half store.
    let elementwise = [Family::Unary, Family::Binary].into_iter();
    for op in elementwise
        .flat_map(quorum_optable::rows_of)
        .map(|r| r.name)
    {
        let node = Node {
            name: "n".into(),
            op_type: op.to_string(),
            domain: String::new(),
            opset: 13,
            inputs: vec![],
            outputs: vec![],
            attrs: Default::default(),
        };
        let ctx = OpCtx {
            node: &node,
            runner: &NoSubgraphs,
            max_tensor_bytes: 1 << 30,
        };
        let mut k = Kernel::new("ew");
        let y = k.param_ptr("out");
        let x = k.param_ptr("in0");
        let n = k.param("n", Ty::U32);
        let i = super::thread_index(&mut k, n);
        // bf16 for the ops whose names sort first (the loads and stores differ, not the math).
        let half = if op < "B" { DType::BF16 } else { DType::F16 };
        let v = ew::load(&mut k, x, i, half).unwrap();
        if let Ok(Some(u)) = quorum_core::ops::unary_op::UnaryOp::parse(&ctx) {
            let r = ew::unary_expr(&mut k, u, v);
            ew::store(&mut k, y, i, half, r).unwrap();
            out.push(module((9, 0), &[k]));
        }
    }
    // Every map-family expression (`ew::map_expr`), as `k_map` builds it: f32 operands (bools for
    // the logic ops), one for a unary op, two for a binary one, three for a fold.
    for row in [Family::Unary, Family::Binary]
        .into_iter()
        .flat_map(quorum_optable::rows_of)
    {
        let node = Node {
            name: "n".into(),
            op_type: row.name.to_string(),
            domain: String::new(),
            opset: 13,
            inputs: vec![],
            outputs: vec![],
            attrs: [("direction".to_string(), Attr::String("LEFT".into()))].into(),
        };
        let ctx = OpCtx {
            node: &node,
            runner: &NoSubgraphs,
            max_tensor_bytes: 1 << 30,
        };
        let Ok(Some(desc)) = MapOp::parse(&ctx) else {
            continue;
        };
        let bools_in = desc.is_logic();
        let bools_out =
            bools_in || matches!(desc, MapOp::IsNaN | MapOp::IsInf { .. } | MapOp::Compare(_));
        let mut k = Kernel::new("ew");
        let y = k.param_ptr("out");
        let ins: Vec<_> = (0..desc.arity().unwrap_or(3))
            .map(|j| k.param_ptr(&format!("in{j}")))
            .collect();
        let n = k.param("n", Ty::U32);
        let i = super::thread_index(&mut k, n);
        let load = if bools_in { DType::Bool } else { DType::F32 };
        let v: Vec<_> = ins
            .iter()
            .map(|&p| ew::load(&mut k, p, i, load).unwrap())
            .collect();
        let Some(r) = ew::map_expr(&mut k, desc, &v) else {
            continue;
        };
        let store = if bools_out { DType::Bool } else { DType::F32 };
        ew::store(&mut k, y, i, store, r).unwrap();
        out.push(module((9, 0), &[k]));
    }
    // Binary expressions over broadcast offsets, and the other load/store types.
    let mut k = Kernel::new("ew");
    let y = k.param_ptr("out");
    let a = k.param_ptr("in0");
    let b = k.param_ptr("in1");
    let n = k.param("n", Ty::U32);
    let i = super::thread_index(&mut k, n);
    let offs = super::offsets(&mut k, i, &[3, 5, 7], &[vec![35, 7, 1], vec![0, -1, 5]]);
    let x = ew::load(&mut k, a, offs[0], DType::F32).unwrap();
    let z = ew::load(&mut k, b, offs[1], DType::I64).unwrap();
    let w = ew::load(&mut k, b, offs[1], DType::I32).unwrap();
    let p = ew::pow_expr(&mut k, x, z);
    let m = ew::mod_expr(&mut k, p, w, false);
    let f = ew::mod_expr(&mut k, m, x, true);
    ew::store(&mut k, y, i, DType::F32, f).unwrap();
    let bl = ew::load(&mut k, a, i, DType::Bool).unwrap();
    ew::store(&mut k, y, i, DType::Bool, bl).unwrap();
    out.push(module((9, 0), &[k]));
    // Every integer form over every integer and bool dtype.
    out.extend(ew::int_modules());
}

fn index_modules(out: &mut Vec<String>) {
    for (ty, size) in [(Ty::U8, 1), (Ty::U16, 2), (Ty::U32, 4), (Ty::U64, 8)] {
        out.push(module((9, 0), &[gather_elements_kernel(ty, size)]));
        out.push(module((9, 0), &[one_hot_kernel(ty, size, 10, 3)]));
        out.push(module((9, 0), &[trilu_kernel(ty, size, true, 3, 5)]));
        out.push(module((9, 0), &[trilu_kernel(ty, size, false, 3, 5)]));
        for ity in [Ty::S32, Ty::S64] {
            let k = gather_elements_dev_kernel(ty, size, ity, &[2, 3, 4], &[20, 4, 1], 1, 5);
            out.push(module((9, 0), &[k]));
        }
    }
    for dtype in [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I64,
    ] {
        for (exclusive, reverse) in [(false, false), (true, false), (false, true), (true, true)] {
            let plan = quorum_core::device::index::ScanPlan {
                outer: 2,
                dim: 5,
                inner: 3,
                exclusive,
                reverse,
            };
            out.push(module(
                (9, 0),
                &[cumsum_kernel(dtype, plan).expect("a CumSum type")],
            ));
        }
    }
    for ity in [Ty::S32, Ty::S64, Ty::U32, Ty::U64] {
        for (is_max, last) in [(true, false), (true, true), (false, false), (false, true)] {
            let k = super::reduce::arg_int_kernel(ity, is_max, last, &[(2, 12), (4, 1)], 3, 4);
            out.push(module((9, 0), &[k]));
        }
    }
    for (red, st, c, size, len, inner) in [
        (Reduction::None, Ty::U32, Ty::U32, 4, 5, 7),
        (Reduction::Add, Ty::F32, Ty::F32, 4, 3, 1),
        (Reduction::Max, Ty::F16, Ty::F32, 2, 3, 1),
        (Reduction::Min, Ty::S64, Ty::S64, 8, 3, 2),
        (Reduction::Mul, Ty::F64, Ty::F64, 8, 3, 2),
    ] {
        out.push(module(
            (9, 0),
            &[scatter_kernel(red, st, c, size, len, inner)],
        ));
    }
    for d in [
        DType::F32,
        DType::F16,
        DType::F64,
        DType::I32,
        DType::I64,
        DType::U8,
    ] {
        out.push(module((9, 0), &[range_kernel(d).unwrap()]));
    }
}

fn math_modules(out: &mut Vec<String>) {
    let mut k = Kernel::new("math");
    let p = k.param_ptr("p");
    let x = k.ld(Space::Global, Ty::F32, p, 0);
    let xd = k.cvt(Ty::F64, Ty::F32, "", x);
    let a = exp64(&mut k, xd);
    let b = log64(&mut k, a);
    let (s, c) = sincos64(&mut k, b);
    let (e, ec) = erf64(&mut k, s);
    let t = tanh64(&mut k, e);
    let y = k.add(Ty::F64, t, c);
    let y = k.add(Ty::F64, y, ec);
    let y = k.cvt(Ty::F32, Ty::F64, ".rn", y);
    k.st(Space::Global, p, 0, y);
    out.push(module((9, 0), &[k]));
}

fn norm_modules(out: &mut Vec<String>) {
    out.push(module(
        (9, 0),
        &[bn_kernel(Elem::F16, [Elem::F32; 4], 3, 7, false, 1e-5)],
    ));
    out.push(module(
        (9, 0),
        &[bn_kernel(Elem::F32, [Elem::F16; 4], 3, 7, true, 1e-3)],
    ));
    out.push(module(
        (9, 0),
        &[lrn_kernel(Elem::F32, 5, 9, 3, 1e-4, 0.75, 1.0)],
    ));
    for at in sample_params() {
        for layout in [Rows::Thread, Rows::Lanes(4), Rows::Lanes(32), Rows::Block] {
            for (bias, stats) in [(Some(Elem::F32), false), (None, true)] {
                let s = RowNorm {
                    x: Elem::F32,
                    scale: Elem::F32,
                    bias,
                    cols: 20,
                    eps: 1e-5,
                    at: at.clone(),
                    stats,
                };
                out.push(module((9, 0), &[rownorm_kernel(&s, layout)]));
            }
        }
    }
    let s = RowNorm {
        x: Elem::F16,
        scale: Elem::F32,
        bias: Some(Elem::F32),
        cols: 40960,
        eps: 1e-5,
        at: ParamAt::Channel {
            g: 32,
            cpg: 10,
            inner: 4096,
        },
        stats: true,
    };
    out.push(module((9, 0), &[norm_part_kernel(&s, 2048, 20)]));
    out.push(module((9, 0), &[norm_merge_kernel(&s, 2048, 20)]));
    out.push(module((9, 0), &[norm_apply_kernel(&s)]));
    let s = RowNorm {
        x: Elem::Bf16,
        scale: Elem::Bf16,
        ..s
    };
    out.push(module((9, 0), &[norm_apply_kernel(&s)]));
}

fn pool_modules(out: &mut Vec<String>) {
    for dims in sample_walks() {
        for kind in SAMPLE_KINDS {
            for e in [Elem::F32, Elem::F16, Elem::Bf16] {
                out.push(module((9, 0), &[pool_kernel(kind, e, &dims)]));
            }
        }
    }
}

fn reduce_modules(out: &mut Vec<String>) {
    for (shape, axes) in [
        (vec![7, 5000], vec![1]),
        (vec![1000, 40], vec![1]),
        (vec![3, 5, 7], vec![1]),
        (vec![3, 5, 7], vec![0, 2]),
    ] {
        let w = Walk::new(&shape, &axes);
        for layout in [
            Rows::Thread,
            Rows::Cols(8),
            Rows::Lanes(4),
            Rows::Lanes(32),
            Rows::Block,
        ] {
            for &fold in FOLDS {
                out.push(module((9, 0), &[fold_kernel(fold, Elem::F32, &w, layout)]));
                out.push(module(
                    (9, 0),
                    &[part_kernel(fold, Elem::F32, &w, layout, 100, 50)],
                ));
            }
            out.push(module((9, 0), &[lse_kernel(Elem::F32, &w, layout)]));
        }
    }
    for &fold in FOLDS {
        out.push(module((9, 0), &[merge_kernel(fold, Elem::F32, 50, 5000)]));
        let w = Walk::new(&[4, 6], &[1]);
        for e in [Elem::F16, Elem::Bf16] {
            out.push(module((9, 0), &[fold_kernel(fold, e, &w, Rows::Lanes(32))]));
        }
    }
    let mut k = Kernel::new("t");
    let n = k.param("n", Ty::U32);
    let ids = Rows::Block.ids(&mut k, n);
    let s = k.mov(Ty::F64, 0.0f64);
    let m = k.mov(Ty::F32, f32::NEG_INFINITY);
    Rows::Block.reduce(&mut k, &ids, &[s], &combine_add);
    Rows::Block.reduce(&mut k, &ids, &[m], &combine_max);
    out.push(module((9, 0), &[k]));
}

fn resize_modules(out: &mut Vec<String>) {
    let taps = |n: usize, out: usize, extrap: bool| {
        AxisTable::Taps(Taps {
            n,
            idx: (0..out * n).map(|i| i % 3).collect(),
            w: (0..out * n).map(|i| i as f64 / 8.0).collect(),
            extrap: (0..out).map(|o| extrap && o == 0).collect(),
        })
    };
    let nearest = vec![
        AxisTable::Identity,
        AxisTable::Identity,
        AxisTable::Map(vec![Some(0), Some(0), Some(1), None]),
        AxisTable::Map(vec![Some(1), Some(0), Some(1)]),
    ];
    let (g, _) = layout(&[1, 2, 2, 2], &[1, 2, 4, 3], &nearest, Ty::U32, 7).unwrap();
    out.push(module((9, 0), &[resize_kernel(&g)]));
    let tables = vec![AxisTable::Identity, taps(4, 5, false), taps(2, 7, false)];
    let (g, _) = layout(&[3, 4, 6], &[3, 5, 7], &tables, Ty::F32, 0).unwrap();
    out.push(module((9, 0), &[resize_kernel(&g)]));
    let tables = vec![taps(16, 3, false), taps(12, 2, true)];
    let (g, _) = layout(&[40, 30], &[3, 2], &tables, Ty::F16, 0).unwrap();
    out.push(module((9, 0), &[resize_kernel(&g)]));
}

fn softmax_modules(out: &mut Vec<String>) {
    for (n, inner) in [(5000, 1), (40, 1), (7, 1), (3, 5), (300, 4)] {
        for layout in [
            Rows::Thread,
            Rows::Cols(8),
            Rows::Lanes(4),
            Rows::Lanes(32),
            Rows::Block,
        ] {
            for kind in [SoftKind::Soft, SoftKind::LogSoft, SoftKind::Hard] {
                out.push(module(
                    (9, 0),
                    &[softmax_kernel(kind, Elem::F32, n, inner, layout)],
                ));
            }
        }
    }
    for e in [Elem::F16, Elem::Bf16] {
        out.push(module(
            (9, 0),
            &[softmax_kernel(SoftKind::Soft, e, 64, 1, Rows::Lanes(32))],
        ));
    }
}

/// Every sample module, in a fixed order. One module holding two kernels checks `module`'s joins.
fn golden_modules() -> Vec<String> {
    let mut out = Vec::new();
    gemm_modules(&mut out);
    cast_modules(&mut out);
    conv_modules(&mut out);
    elementwise_modules(&mut out);
    index_modules(&mut out);
    math_modules(&mut out);
    norm_modules(&mut out);
    pool_modules(&mut out);
    reduce_modules(&mut out);
    resize_modules(&mut out);
    softmax_modules(&mut out);
    out.push(module(
        (9, 0),
        &[
            reduce_kernel(false, Elem::F32, 1),
            gather_elements_kernel(Ty::U32, 4),
        ],
    ));
    quantize_modules(&mut out);
    out
}

fn quantize_modules(out: &mut Vec<String>) {
    use super::quantize::{dequantize_kernel, quantize_kernel};
    for (x, q, range) in [
        (DType::F32, DType::U8, (0, 255)),
        (DType::F16, DType::I8, (-128, 127)),
        (DType::BF16, DType::U16, (0, 65535)),
        (DType::I32, DType::I16, (-32768, 32767)),
    ] {
        for (zp, per_axis) in [(true, false), (false, true)] {
            let (s, d) = (kind(x).unwrap(), kind(q).unwrap());
            out.push(module(
                (9, 0),
                &[quantize_kernel(s, d, zp, per_axis, range)],
            ));
            out.push(module(
                (9, 0),
                &[dequantize_kernel(d, DType::F32, zp, per_axis)],
            ));
        }
    }
    let (i8k, u16k) = (kind(DType::I8).unwrap(), kind(DType::U16).unwrap());
    out.push(module(
        (9, 0),
        &[dequantize_kernel(i8k, DType::BF16, true, false)],
    ));
    out.push(module(
        (9, 0),
        &[dequantize_kernel(u16k, DType::F16, true, true)],
    ));
}

#[test]
fn generated_ptx_matches_golden_digest() {
    let modules = golden_modules();
    let mut h = Fnv::new();
    for m in &modules {
        h.bytes(&(m.len() as u64).to_le_bytes());
        h.bytes(m.as_bytes());
    }
    let bytes: usize = modules.iter().map(|m| m.len()).sum();
    assert_eq!(
        h.0,
        GOLDEN,
        "the generated PTX changed: digest {:#018x} over {} modules, {bytes} bytes",
        h.0,
        modules.len()
    );
}
