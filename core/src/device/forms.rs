//! The host-side rules of the device kernels, decided once for every backend: the node forms a
//! device kernel declines (the CPU kernel handles them its own way), attribute checks, and the small
//! plans kernels build from attributes and shapes before they generate code. A function here answers
//! with an operator error (`OpError`, the CPU kernel's words) or a decline reason (`Err(String)`
//! inside `Ok`, which each backend turns into its decline).
use super::layout::{broadcast_strides, simplify};
use super::{KernelInputs, optional_f64s, optional_i64s};
use crate::error::OpError;
use crate::ir::{Attr, Node};
use crate::ops::OpCtx;
use crate::ops::broadcast::broadcast_shapes;
use crate::tensor::{DType, Tensor, Value};

/// A decline reason, or `Ok(())` when the form is one the device kernels compute.
pub type Form = Result<(), String>;

/// Gelu's `approximate` at claim time: `none` and `tanh` are ONNX's modes.
pub fn gelu_mode(node: &Node) -> Form {
    match node.attrs.get("approximate") {
        Some(Attr::String(s)) if s != b"none" && s != b"tanh" => Err(format!(
            "Gelu approximate='{}' is not an ONNX mode",
            String::from_utf8_lossy(s)
        )),
        _ => Ok(()),
    }
}

/// A binary node that broadcasts the pre-opset-7 way (`broadcast=1`, `B` placed at `axis`): the CPU
/// kernel lays that out, and numpy's rules the device kernels follow can differ.
pub fn legacy_broadcast(ctx: &OpCtx, shapes: &[&[usize]]) -> Result<Form, OpError> {
    let b_len = |s: &[usize]| s.iter().product::<usize>();
    if ctx.opset() < 7
        && shapes.len() == 2
        && shapes[0] != shapes[1]
        && b_len(shapes[1]) != 1
        && ctx.attr_i("broadcast", 0)? != 0
    {
        return Ok(Err(format!(
            "broadcast=1 at opset {}: the CPU kernel aligns B at its axis",
            ctx.opset()
        )));
    }
    Ok(Ok(()))
}

/// A PRelu slope that does not broadcast onto X (opsets before 7 place a per-channel slope another
/// way; the CPU kernel handles that).
pub fn prelu_slope(x: &[usize], slope: &[usize]) -> Form {
    if broadcast_shapes(&[x, slope]).ok().as_deref() != Some(x) {
        return Err(format!("PRelu slope {slope:?} does not broadcast to {x:?}"));
    }
    Ok(())
}

/// The walk of a broadcast elementwise kernel: each operand's strides onto `out_shape`, simplified.
pub fn broadcast_walk(operands: &[&[usize]], out_shape: &[usize]) -> (Vec<usize>, Vec<Vec<i64>>) {
    let st: Vec<Vec<i64>> = operands
        .iter()
        .map(|s| broadcast_strides(s, out_shape))
        .collect();
    simplify(out_shape, &st)
}

/// Clip's bound input (opset 11 on) as the CPU kernel takes it: absent is no bound; a bound of
/// another dtype than X's, or of more than one value, is refused there, so declined here.
pub fn clip_bound(
    bound: Option<&Value>,
    i: usize,
    x: DType,
) -> Result<Result<Option<Tensor>, String>, OpError> {
    let Some(v) = bound else {
        return Ok(Ok(None));
    };
    let Value::Tensor(b) = v else {
        return Err(OpError::Invalid(format!("Clip bound {i} must be a tensor")));
    };
    if b.dtype() != x || b.len() > 1 {
        return Ok(Err(format!(
            "Clip bound {} on a {x} input: the CPU kernel refuses it",
            b.describe()
        )));
    }
    Ok(Ok((b.len() == 1).then(|| b.clone())))
}

/// Gemm's `(m, k, n)` for 2-D `a` and `b` read as transposed by `ta`, `tb`.
pub fn gemm_dims(a: &[usize], b: &[usize], ta: bool, tb: bool) -> Result<[usize; 3], OpError> {
    if a.len() != 2 || b.len() != 2 {
        return Err(OpError::Invalid(format!(
            "Gemm needs 2-D A and B, got {a:?} and {b:?}"
        )));
    }
    let (m, k) = if ta { (a[1], a[0]) } else { (a[0], a[1]) };
    let (kb, n) = if tb { (b[1], b[0]) } else { (b[0], b[1]) };
    if k != kb {
        return Err(OpError::Invalid(format!(
            "Gemm inner dimensions differ: A {a:?} (transA={ta}) B {b:?} (transB={tb})"
        )));
    }
    Ok([m, k, n])
}

/// LRN's attributes: `size` (positive), `alpha`, `beta` and `bias` with the spec's defaults.
pub struct Lrn {
    pub size: i64,
    pub alpha: f64,
    pub beta: f64,
    pub bias: f64,
}

impl Lrn {
    pub fn parse(ctx: &OpCtx) -> Result<Lrn, OpError> {
        let size = ctx.req_i("size")?;
        if size <= 0 {
            return Err(OpError::Invalid(format!(
                "LRN size must be positive, got {size}"
            )));
        }
        Ok(Lrn {
            size,
            alpha: ctx.attr_f("alpha", 1e-4)? as f64,
            beta: ctx.attr_f("beta", 0.75)? as f64,
            bias: ctx.attr_f("bias", 1.0)? as f64,
        })
    }
}

/// Resize's plan for an input of shape `xs` from the node's optional inputs (ROI or scales, scales,
/// sizes: their meaning depends on the opset, which `resize_setup` reads).
pub fn resize_setup<T, E: From<OpError>>(
    ctx: &OpCtx,
    xs: &[usize],
    inputs: &(impl KernelInputs<T, E> + ?Sized),
) -> Result<crate::ops::resize::ResizeSetup, E> {
    let (in1, in2) = (optional_f64s(inputs, 1)?, optional_f64s(inputs, 2)?);
    let sizes = optional_i64s(inputs, 3)?;
    Ok(crate::ops::resize::resize_setup(ctx, xs, in1, in2, sizes)?)
}

/// The first eight of `bytes` as a little-endian word (a fill value's bits for a kernel constant).
pub fn bits_le(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .take(8)
        .enumerate()
        .fold(0u64, |a, (i, &x)| a | ((x as u64) << (8 * i)))
}

/// fdlibm's constants, digit for digit as published (more digits than an f64 keeps), for the
/// device code generators' f64 math (`exp`, `log`, `sin`/`cos` argument reduction).
#[allow(clippy::excessive_precision)]
pub mod fdlibm {
    pub const LN2_HI: f64 = 6.931_471_803_691_238_164_90e-01;
    pub const LN2_LO: f64 = 1.908_214_929_270_587_700_02e-10;
    pub const PIO2_1: f64 = 1.570_796_326_734_125_614_17e+00;
    pub const PIO2_2: f64 = 6.077_100_506_303_965_976_60e-11;
    pub const PIO2_3: f64 = 2.022_266_248_711_166_455_80e-21;
}
