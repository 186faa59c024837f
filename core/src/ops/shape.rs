//! Shape manipulation and generators: Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze, Identity,
//! Constant, ConstantOfShape, EyeLike, Range, Expand.
use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};

use super::data::{arr, numel, strides_of, view_copy};
use super::{OpCtx, Registry, input, norm_axis, opt_input, single};
use crate::error::{OpError, OpResult};
use crate::tensor::{DType, Tensor, Value};
use crate::{bail, unsupported};

pub fn register(r: &mut Registry) {
    r.add("", "Shape", shape);
    r.add("", "Size", size);
    r.add("", "Reshape", reshape);
    r.add("", "Flatten", flatten);
    r.add("", "Squeeze", squeeze);
    r.add("", "Unsqueeze", unsqueeze);
    r.add("", "Identity", identity);
    r.add("", "Constant", constant);
    r.add("", "ConstantOfShape", constant_of_shape);
    r.add("", "EyeLike", eye_like);
    r.add("", "Range", range);
    r.add("", "Expand", expand);
}

fn i64s(v: &[usize]) -> Vec<i64> {
    v.iter().map(|&d| d as i64).collect()
}

/// A shape read from an integer tensor: every entry must be non-negative.
fn dims_of(t: &Tensor, what: &str) -> OpResult<Vec<usize>> {
    let v = t.to_i64_vec()?;
    if t.rank() > 1 || v.iter().any(|&d| d < 0) {
        bail!(
            "{what} {v:?} (shape {:?}) is not a list of non-negative dims",
            t.shape()
        );
    }
    Ok(v.into_iter().map(|d| d as usize).collect())
}

fn shape(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let v = shape_values(ctx, input(inputs, 0)?.shape())?;
    single(Tensor::from_i64(&[v.len()], v)?)
}

/// Shape's output for an input of shape `s`: its dims from `start` to `end` (opset 15; negative
/// counts from the back, both clamped to [0, rank]). Shared with the device kernels, which read
/// only the input's shape.
pub fn shape_values(ctx: &OpCtx, s: &[usize]) -> OpResult<Vec<i64>> {
    let r = s.len() as i64;
    let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
    let start = clamp(ctx.attr_i("start", 0)?);
    let end = clamp(ctx.attr_opt_i("end")?.unwrap_or(r));
    Ok(if start < end {
        i64s(&s[start..end])
    } else {
        Vec::new()
    })
}

fn size(_: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    single(Tensor::scalar_i64(input(inputs, 0)?.len() as i64))
}

fn reshape(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    view(ctx, inputs)
}

fn flatten(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    view(ctx, inputs)
}

fn squeeze(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    view(ctx, inputs)
}

fn unsqueeze(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    view(ctx, inputs)
}

/// Reshape, Flatten, Squeeze, Unsqueeze on the CPU: the data unchanged under [`view_shape`].
fn view(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let param = opt_input(inputs, 1)?.map(|t| t.to_i64_vec()).transpose()?;
    single(x.reshape(&view_shape(ctx, x.shape(), param)?)?)
}

/// The output shape of a view op (Reshape, Flatten, Squeeze, Unsqueeze) on an input of shape `ins`;
/// `param` is the second input's values (shape or axes) where the opset takes them as an input.
/// Every backend uses this, so the shape rules are written once.
pub fn view_shape(ctx: &OpCtx, ins: &[usize], param: Option<Vec<i64>>) -> OpResult<Vec<usize>> {
    match ctx.node.op_type.as_str() {
        "Reshape" => reshape_shape(ctx, ins, param),
        "Flatten" => {
            let r = ins.len() as i64;
            let a = ctx.attr_i("axis", 1)?;
            let a = if a < 0 { a + r } else { a };
            if a < 0 || a > r {
                bail!("Flatten axis {a} is out of range for rank {r}");
            }
            Ok(vec![
                ins[..a as usize].iter().product(),
                ins[a as usize..].iter().product(),
            ])
        }
        "Squeeze" => {
            let axes = if ctx.opset() < 13 {
                ctx.attr_opt_ints("axes")?
            } else {
                param
            };
            let drop: Vec<usize> = match axes {
                Some(axes) => {
                    let a: Vec<usize> = axes
                        .iter()
                        .map(|&v| norm_axis(v, ins.len()))
                        .collect::<OpResult<_>>()?;
                    if let Some(&bad) = a.iter().find(|&&d| ins[d] != 1) {
                        bail!(
                            "Squeeze axis {bad} has size {}, not 1 (shape {ins:?})",
                            ins[bad]
                        );
                    }
                    a
                }
                None => (0..ins.len()).filter(|&d| ins[d] == 1).collect(),
            };
            Ok((0..ins.len())
                .filter(|d| !drop.contains(d))
                .map(|d| ins[d])
                .collect())
        }
        "Unsqueeze" => {
            let axes = if ctx.opset() < 13 {
                ctx.attr_opt_ints("axes")?
            } else {
                param
            };
            let Some(axes) = axes else {
                bail!("Unsqueeze needs axes")
            };
            let r = ins.len() + axes.len();
            let mut ones = vec![false; r];
            for &a in &axes {
                let a = norm_axis(a, r)?;
                if std::mem::replace(&mut ones[a], true) {
                    bail!("Unsqueeze axes {axes:?} repeat an axis");
                }
            }
            let mut dims = ins.iter();
            Ok(ones
                .iter()
                .map(|&one| {
                    if one {
                        1
                    } else {
                        dims.next().copied().unwrap_or(1)
                    }
                })
                .collect())
        }
        other => bail!("{other} is not a view op"),
    }
}

fn reshape_shape(ctx: &OpCtx, ins: &[usize], param: Option<Vec<i64>>) -> OpResult<Vec<usize>> {
    let spec = if ctx.opset() < 5 {
        ctx.attr_opt_ints("shape")?
            .ok_or_else(|| OpError::Invalid("Reshape-1 needs the 'shape' attribute".into()))?
    } else {
        param.ok_or_else(|| OpError::Invalid("Reshape needs its shape input".into()))?
    };
    let allowzero = ctx.attr_i("allowzero", 0)? != 0;
    let mut out = Vec::with_capacity(spec.len());
    let mut infer = None;
    for (i, &d) in spec.iter().enumerate() {
        out.push(match d {
            0 if !allowzero => match ins.get(i) {
                Some(&v) => v,
                None => bail!(
                    "Reshape shape {spec:?} copies dim {i} of an input of rank {}",
                    ins.len()
                ),
            },
            -1 if infer.is_none() => {
                infer = Some(i);
                1
            }
            d if d >= 0 => d as usize,
            _ => bail!("Reshape shape {spec:?} has an invalid entry {d}"),
        });
    }
    let len = numel(ins)?;
    if let Some(i) = infer {
        let known = numel(&out)?;
        if known == 0 || len % known != 0 {
            bail!("Reshape cannot infer the -1 of {spec:?} for input of shape {ins:?}");
        }
        out[i] = len / known;
    }
    Ok(out)
}

fn identity(_: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    match inputs.first().copied().flatten() {
        Some(v) => Ok(vec![v.clone()]),
        None => bail!("Identity needs an input"),
    }
}

fn constant(ctx: &OpCtx, _: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    if let Some(t) = ctx.attr_opt_tensor("value")? {
        return single(t.clone());
    }
    if let Some(t) = ctx.attr_opt_tensor("sparse_value")? {
        return single(t.clone());
    }
    let strings = |v: Vec<String>| -> OpResult<Tensor> { Ok(Tensor::Str(arr(&[v.len()], v)?)) };
    const NAMES: [&str; 6] = [
        "value_float",
        "value_floats",
        "value_int",
        "value_ints",
        "value_string",
        "value_strings",
    ];
    let t = match NAMES
        .iter()
        .find(|n| ctx.has_attr(n))
        .copied()
        .or_else(|| ctx.node.attrs.keys().next().map(|k| k.as_str()))
    {
        Some("value_float") => Tensor::F32(ArrayD::from_elem(
            IxDyn(&[]),
            ctx.attr_f("value_float", 0.0)?,
        )),
        Some("value_floats") => {
            let v = ctx.attr_opt_floats("value_floats")?.unwrap_or_default();
            Tensor::from_f32(&[v.len()], v)?
        }
        Some("value_int") => Tensor::scalar_i64(ctx.req_i("value_int")?),
        Some("value_ints") => {
            let v = ctx.attr_opt_ints("value_ints")?.unwrap_or_default();
            Tensor::from_i64(&[v.len()], v)?
        }
        Some("value_string") => Tensor::Str(ArrayD::from_elem(
            IxDyn(&[]),
            ctx.attr_s("value_string", "")?,
        )),
        Some("value_strings") => {
            strings(ctx.attr_opt_strings("value_strings")?.unwrap_or_default())?
        }
        Some(other) => unsupported!("Constant with attribute '{other}'"),
        None => bail!("Constant without a value attribute"),
    };
    single(t)
}

// `map_array!` expands the same code for every dtype: `.clone()` is needed for strings.
#[allow(clippy::clone_on_copy)]
fn constant_of_shape(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (shape, v) = constant_of_shape_plan(ctx, input(inputs, 0)?)?;
    single(crate::map_array!(&v, a => match a.iter().next() {
        Some(e) => ArrayD::from_elem(IxDyn(&shape), e.clone()),
        None => bail!("ConstantOfShape value is empty"),
    }))
}

/// ConstantOfShape's output shape (checked against the size limit) and its one-element value
/// (float32 zero by default). Shared by every backend.
pub(crate) fn constant_of_shape_plan(
    ctx: &OpCtx,
    shape: &Tensor,
) -> OpResult<(Vec<usize>, Tensor)> {
    let shape = dims_of(shape, "ConstantOfShape shape")?;
    let value = ctx.attr_opt_tensor("value")?;
    let dtype = value.map_or(DType::F32, |v| v.dtype());
    ctx.check_alloc(&shape, dtype.size_in_memory())?;
    let v = match value {
        Some(v) => v.clone(),
        None => Tensor::zeros(DType::F32, &[1]),
    };
    if v.len() != 1 {
        bail!(
            "ConstantOfShape value must hold one element, got {:?}",
            v.shape()
        );
    }
    Ok((shape, v))
}

/// Sets the elements at flat `positions` of `t` to one.
fn set_ones(t: &mut Tensor, positions: &[usize]) -> OpResult<()> {
    macro_rules! put {
        ($a:expr, $one:expr) => {{
            if let Some(s) = $a.as_slice_mut() {
                for &p in positions {
                    s[p] = $one;
                }
            }
        }};
    }
    match t {
        Tensor::F32(a) => put!(a, 1.0),
        Tensor::F64(a) => put!(a, 1.0),
        Tensor::F16(a) => put!(a, f16::ONE),
        Tensor::BF16(a) => put!(a, bf16::ONE),
        Tensor::I8(a) => put!(a, 1),
        Tensor::I16(a) => put!(a, 1),
        Tensor::I32(a) => put!(a, 1),
        Tensor::I64(a) => put!(a, 1),
        Tensor::U8(a) => put!(a, 1),
        Tensor::U16(a) => put!(a, 1),
        Tensor::U32(a) => put!(a, 1),
        Tensor::U64(a) => put!(a, 1),
        Tensor::Bool(a) => put!(a, true),
        other => unsupported!("EyeLike of dtype {}", other.dtype()),
    }
    Ok(())
}

fn eye_like(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let &[n, m] = x.shape() else {
        bail!("EyeLike needs a 2-D input, got {:?}", x.shape())
    };
    let dtype = match ctx.attr_opt_i("dtype")? {
        Some(c) => DType::from_onnx(c as i32)
            .ok_or_else(|| OpError::Invalid(format!("unknown dtype {c}")))?,
        None => x.dtype(),
    };
    let k = ctx.attr_i("k", 0)?;
    let mut t = Tensor::zeros(dtype, &[n, m]);
    let pos: Vec<usize> = (0..n)
        .filter_map(|i| {
            let j = (i as i64).checked_add(k)?;
            (j >= 0 && j < m as i64).then(|| i * m + j as usize)
        })
        .collect();
    set_ones(&mut t, &pos)?;
    single(t)
}

fn scalar_of(t: &Tensor, what: &str) -> OpResult<()> {
    if t.len() != 1 {
        bail!("Range {what} must be a scalar, got {:?}", t.shape());
    }
    Ok(())
}

/// What Range produces: `n` values `start + i·delta`, computed in f64 (floats) or i128 (integers) and
/// then converted to the inputs' dtype (shared with the CUDA kernel).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RangePlan {
    Float { start: f64, delta: f64, n: usize },
    Int { start: i128, delta: i128, n: usize },
}

/// Validates Range's three scalars and counts its elements.
pub fn range_plan(ctx: &OpCtx, s: &Tensor, l: &Tensor, d: &Tensor) -> OpResult<RangePlan> {
    scalar_of(s, "start")?;
    scalar_of(l, "limit")?;
    scalar_of(d, "delta")?;
    if l.dtype() != s.dtype() || d.dtype() != s.dtype() {
        bail!(
            "Range inputs differ in dtype: {}, {}, {}",
            s.dtype(),
            l.dtype(),
            d.dtype()
        );
    }
    let dt = s.dtype();
    if dt.is_float() {
        let f = |t: &Tensor| -> OpResult<f64> { Ok(t.to_f64_vec()?[0]) };
        let (s0, l0, d0) = (f(s)?, f(l)?, f(d)?);
        if d0 == 0.0 || !(s0.is_finite() && l0.is_finite() && d0.is_finite()) {
            bail!("Range({s0}, {l0}, {d0}) is not a finite range");
        }
        let n = ((l0 - s0) / d0).ceil().max(0.0);
        if n > 1e15 {
            bail!("Range({s0}, {l0}, {d0}) has too many elements");
        }
        let n = n as usize;
        ctx.check_alloc(&[n], dt.size_in_memory())?;
        return Ok(RangePlan::Float {
            start: s0,
            delta: d0,
            n,
        });
    }
    let (s0, l0, d0) = (
        s.to_i64_vec()?[0] as i128,
        l.to_i64_vec()?[0] as i128,
        d.to_i64_vec()?[0] as i128,
    );
    if d0 == 0 {
        bail!("Range delta is 0");
    }
    let span = l0 - s0;
    let n = if (span > 0) == (d0 > 0) && span != 0 {
        (span.abs() + d0.abs() - 1) / d0.abs()
    } else {
        0
    };
    if n > u32::MAX as i128 * 16 {
        bail!("Range({s0}, {l0}, {d0}) has too many elements");
    }
    let n = n as usize;
    ctx.check_alloc(&[n], dt.size_in_memory())?;
    Ok(RangePlan::Int {
        start: s0,
        delta: d0,
        n,
    })
}

fn range(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let (s, l, d) = (input(inputs, 0)?, input(inputs, 1)?, input(inputs, 2)?);
    let dt = s.dtype();
    let t = match range_plan(ctx, s, l, d)? {
        RangePlan::Float {
            start: s0,
            delta: d0,
            n,
        } => {
            let vals = (0..n).map(|i| s0 + i as f64 * d0);
            match dt {
                DType::F32 => Tensor::F32(arr(&[n], vals.map(|v| v as f32).collect())?),
                DType::F64 => Tensor::F64(arr(&[n], vals.collect())?),
                DType::F16 => Tensor::F16(arr(&[n], vals.map(f16::from_f64).collect())?),
                DType::BF16 => Tensor::BF16(arr(&[n], vals.map(bf16::from_f64).collect())?),
                other => unsupported!("Range of {other}"),
            }
        }
        RangePlan::Int {
            start: s0,
            delta: d0,
            n,
        } => {
            let vals = (0..n as i128).map(|i| s0 + i * d0);
            match dt {
                DType::I64 => Tensor::I64(arr(&[n], vals.map(|v| v as i64).collect())?),
                DType::I32 => Tensor::I32(arr(&[n], vals.map(|v| v as i32).collect())?),
                DType::I16 => Tensor::I16(arr(&[n], vals.map(|v| v as i16).collect())?),
                DType::I8 => Tensor::I8(arr(&[n], vals.map(|v| v as i8).collect())?),
                DType::U8 => Tensor::U8(arr(&[n], vals.map(|v| v as u8).collect())?),
                DType::U16 => Tensor::U16(arr(&[n], vals.map(|v| v as u16).collect())?),
                DType::U32 => Tensor::U32(arr(&[n], vals.map(|v| v as u32).collect())?),
                DType::U64 => Tensor::U64(arr(&[n], vals.map(|v| v as u64).collect())?),
                other => unsupported!("Range of {other}"),
            }
        }
    };
    single(t)
}

fn expand(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let want = dims_of(input(inputs, 1)?, "Expand shape")?;
    let xs = x.shape();
    let r = xs.len().max(want.len());
    let pad = |s: &[usize], i: usize| {
        if i + s.len() >= r {
            s[i + s.len() - r]
        } else {
            1
        }
    };
    let mut out = Vec::with_capacity(r);
    for i in 0..r {
        let (a, b) = (pad(xs, i), pad(&want, i));
        out.push(match (a, b) {
            (a, b) if a == b => a,
            (1, b) => b,
            (a, 1) => a,
            _ => bail!("Expand of shape {xs:?} to {want:?}: dims {a} and {b} do not broadcast"),
        });
    }
    ctx.check_alloc(&out, x.dtype().size_in_memory())?;
    let st = strides_of(xs);
    let strides: Vec<isize> = (0..r)
        .map(|i| {
            if i + xs.len() < r || xs[i + xs.len() - r] == 1 {
                0
            } else {
                st[i + xs.len() - r]
            }
        })
        .collect();
    single(view_copy(x, 0, &out, &strides)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expand_broadcasts_both_ways() {
        // x [3, 1] expanded by shape [2, 1, 4] -> [2, 3, 4]
        let vals = [0.25f32, -1.5, 7.0];
        let x = Tensor::from_f32(&[3, 1], vals.to_vec()).unwrap();
        let st = strides_of(x.shape());
        let y = view_copy(&x, 0, &[2, 3, 4], &[0, st[0], 0]).unwrap();
        let Tensor::F32(y) = y else { panic!() };
        for ((_, i, _), v) in y.indexed_iter().map(|(ix, v)| ((ix[0], ix[1], ix[2]), *v)) {
            assert_eq!(v, vals[i]);
        }
    }
}
