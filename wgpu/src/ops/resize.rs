//! WGSL kernel: Resize, on the CUDA backend's plan.
//!
//! Op semantics stay in the CPU file: `quorum_core::ops::resize::resize_setup` turns the node's
//! attributes and parameter inputs (roi, scales, sizes, axes, keep_aspect_ratio_policy, every
//! coordinate transformation, nearest mode, cubic coefficient, exclude_outside, antialias) into
//! one table per axis, computed on the host in f64 exactly as the CPU kernel resamples by, and
//! `quorum_core::ops::resize::device` lays them out as one small u32 tensor. The kernel is a separable
//! gather: one thread per output element, which takes for each resized axis that axis's taps
//! (source element offset, weight) at its output coordinate and accumulates `Π weights · x[Σ
//! offsets]` in f32.
//!
//! Nearest mode (and an interpolating resize whose every axis is the identity) moves raw words,
//! one tap per axis, so it is exact for every device dtype. Linear and cubic take f32, f16 and
//! bf16 data; other dtypes decline at run time.
use super::{WgpuKernel, decline, dev, invalid, u32_len};
use crate::memory::{WTensor, encode, words};
use crate::run::{KResult, Run};
use crate::wgsl;
use quorum_core::backend::NodeInputs;
use quorum_core::ir::Node;
use quorum_core::ops::OpCtx;
use quorum_core::ops::resize::device::{DimMap, device_tables};
use quorum_core::ops::resize::{AxisTable, tensor_like};
use quorum_core::tensor::{DType, Tensor};

pub fn claim(node: &Node) -> Option<Result<WgpuKernel, String>> {
    (node.op_type == "Resize").then_some(Ok(k_resize as WgpuKernel))
}

/// Most tap combinations walked straight-line; beyond, every tap axis is a loop.
const UNROLL: usize = 64;

/// The kernel body for an output of `out_shape` reading tables `dims` (see the module doc);
/// `elem_words` words per element for a raw gather, or `interp` with the data's dtype.
fn body(
    out_shape: &[usize],
    dims: &[DimMap],
    interp: Option<DType>,
    extrap: bool,
    elem_words: usize,
) -> String {
    let r = out_shape.len();
    let mut s = String::from("var rest = i;\n");
    // Output coordinates, last dim first.
    for d in (0..r).rev() {
        let len = out_shape[d];
        if d == 0 {
            s.push_str(&format!("let c{d} = rest;\n"));
        } else {
            s.push_str(&format!(
                "let c{d} = rest % {len}u; rest = rest / {len}u;\n"
            ));
        }
    }
    s.push_str("var base = 0u;\n");
    let mut rows = Vec::new();
    for (d, m) in dims.iter().enumerate() {
        match *m {
            DimMap::Identity { stride } => {
                s.push_str(&format!("base = base + c{d} * {stride}u;\n"));
            }
            DimMap::Taps { n, offs, weights } => {
                s.push_str(&format!("let ro{d} = {offs}u + c{d} * {n}u;\n"));
                if interp.is_some() {
                    s.push_str(&format!("let rw{d} = {weights}u + c{d} * {n}u;\n"));
                }
                rows.push((d, n));
            }
        }
    }
    let w = elem_words;
    if extrap && !rows.is_empty() {
        let any: Vec<String> = rows
            .iter()
            .map(|(d, _)| format!("bitcast<i32>(i1[ro{d}]) < 0"))
            .collect();
        s.push_str(&format!(
            "if ({}) {{ for (var k = 0u; k < {w}u; k = k + 1u) {{ o0[i * {w}u + k] = i1[k]; }} return; }}\n",
            any.join(" || ")
        ));
    }
    match interp {
        Some(d) => {
            s.push_str("var acc = 0.0;\n");
            let combos: usize = rows.iter().map(|r| r.1).product();
            if combos <= UNROLL {
                // Straight-line: every combination of taps, its weight the product of the axes'.
                let mut terms: Vec<(String, String)> = vec![("base".into(), String::new())];
                for &(ax, n) in &rows {
                    terms = terms
                        .iter()
                        .flat_map(|(off, wt)| {
                            (0..n).map(move |t| {
                                let w = format!("bitcast<f32>(i1[rw{ax} + {t}u])");
                                let w = if wt.is_empty() {
                                    w
                                } else {
                                    format!("{wt} * {w}")
                                };
                                (format!("{off} + i1[ro{ax} + {t}u]"), w)
                            })
                        })
                        .collect();
                }
                for (off, wt) in &terms {
                    let v = wgsl::load(d, &format!("i0[{off}]"));
                    let term = if wt.is_empty() {
                        v
                    } else {
                        format!("{wt} * {v}")
                    };
                    s.push_str(&format!("acc = acc + {term};\n"));
                }
            } else {
                // A loop per tap axis, nested in axis order.
                let (mut off, mut wt) = ("base".to_string(), String::new());
                for &(ax, n) in &rows {
                    let w = format!("bitcast<f32>(i1[rw{ax} + t{ax}])");
                    s.push_str(&format!(
                        "for (var t{ax} = 0u; t{ax} < {n}u; t{ax} = t{ax} + 1u) {{\n\
                         let off{ax} = {off} + i1[ro{ax} + t{ax}];\n\
                         let w{ax} = {};\n",
                        if wt.is_empty() {
                            w
                        } else {
                            format!("{wt} * {w}")
                        }
                    ));
                    off = format!("off{ax}");
                    wt = format!("w{ax}");
                }
                let v = wgsl::load(d, &format!("i0[{off}]"));
                s.push_str(&format!("acc = acc + {wt} * {v};\n"));
                s.push_str(&"}".repeat(rows.len()));
            }
            s.push_str(&format!("\no0[i] = {};\n", wgsl::store(d, "acc")));
        }
        None => {
            let off: Vec<String> = std::iter::once("base".to_string())
                .chain(rows.iter().map(|(d, _)| format!("i1[ro{d}]")))
                .collect();
            s.push_str(&format!(
                "let src = ({}) * {w}u;\nfor (var k = 0u; k < {w}u; k = k + 1u) {{ o0[i * {w}u + k] = i0[src + k]; }}\n",
                off.join(" + ")
            ));
        }
    }
    s
}

/// The device words of the extrapolation value `v` as `dtype` (converted as the CPU kernel
/// converts it: ints round half to even and saturate; bool is `v != 0`), two words.
fn fill_bits(dtype: DType, v: f64) -> KResult<u64> {
    let t = if dtype == DType::Bool {
        Tensor::from_f64s(DType::Bool, &[1], vec![(v != 0.0) as u8 as f64])?
    } else {
        tensor_like(&Tensor::zeros(dtype, &[1]), &[1], vec![v])?
    };
    let Some(b) = encode(&t) else {
        decline!("{dtype} values stay on the host");
    };
    Ok(quorum_core::device::forms::bits_le(&b))
}

fn k_resize(ctx: &OpCtx, run: &Run, inputs: &dyn NodeInputs) -> KResult<Vec<WTensor>> {
    let x = dev(inputs, 0)?;
    let in_shape = x.shape.clone();
    let setup = quorum_core::device::forms::resize_setup(ctx, &in_shape, inputs)?;
    let out_shape = setup.out_shape.clone();
    let n = u32_len(&out_shape)? as usize;
    u32_len(&in_shape)?;
    let Some(w) = words(x.dtype) else {
        decline!("{} values stay on the host", x.dtype);
    };
    ctx.check_alloc(&out_shape, 4 * w)?;
    if n == 0 {
        return Ok(vec![run.alloc(x.dtype, &out_shape)?]);
    }
    if in_shape.contains(&0) {
        decline!("an empty input resized to a non-empty output (zeros)");
    }
    let tables = setup.tables(ctx, &in_shape)?;
    let interp = tables.iter().any(|t| matches!(t, AxisTable::Taps(_)));
    if interp && !matches!(x.dtype, DType::F32 | DType::F16 | DType::BF16) {
        decline!(
            "linear/cubic interpolation of {} data (f32, f16 and bf16 only)",
            x.dtype
        );
    }
    let fill = fill_bits(x.dtype, setup.extrapolation())?;
    let t = device_tables(&in_shape, &tables, fill)
        .map_err(quorum_core::backend::DeviceError::Decline)?;
    let longest = t
        .dims
        .iter()
        .map(|d| match d {
            DimMap::Taps { n, .. } => *n,
            DimMap::Identity { .. } => 1,
        })
        .product::<usize>();
    super::loop_budget(run, "Resize", longest)?;
    let table = Tensor::U32(
        ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[t.words.len()]), t.words)
            .map_err(|e| invalid(e.to_string()))?,
    );
    let table = run.upload(&table)?;
    let y = run.alloc(x.dtype, &out_shape)?;
    let text = body(
        &out_shape,
        &t.dims,
        t.interp.then_some(x.dtype),
        t.extrap,
        w,
    );
    let half = if t.interp && wgsl::needs_half(&[x.dtype]) {
        wgsl::HALF
    } else {
        ""
    };
    let src = format!("{}{half}{}", wgsl::header(1, 2), wgsl::entry_1d(&text));
    run.dispatch_n("resize", &src, &[&y], &[&x, &table], vec![n as u32], n)?;
    Ok(vec![y])
}
