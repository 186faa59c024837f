//! Data movement and views. Most ops here are expressed as per-dimension offset tables (output
//! coordinate -> input offset contribution, or None for "outside"), combined into one gather map.
use super::*;

pub(super) const OPS: &[&str] = &[
    "Reshape",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
    "Transpose",
    "Concat",
    "Split",
    "Slice",
    "Gather",
    "GatherElements",
    "ScatterElements",
    "ScatterND",
    "Expand",
    "Pad",
    "Tile",
    "DepthToSpace",
    "SpaceToDepth",
    "Trilu",
    "Range",
    "OneHot",
];

pub(super) fn check(node: &NodeSpec) -> Result<(), String> {
    let s = |n: &str, d: &str| node.string(n, d).map_err(|e| e.to_string());
    match node.op_type.as_str() {
        "Pad" => {
            let m = s("mode", "constant")?;
            if !matches!(m.as_str(), "constant" | "reflect" | "edge" | "wrap") {
                return Err(format!("Pad mode '{m}' is not covered"));
            }
        }
        "ScatterElements" | "ScatterND" => {
            let r = s("reduction", "none")?;
            if !matches!(r.as_str(), "none" | "add" | "mul" | "max" | "min") {
                return Err(format!("{} reduction '{r}' is not covered", node.op_type));
            }
        }
        "DepthToSpace" | "SpaceToDepth" => {
            let m = s("mode", "DCR")?;
            if m != "DCR" && m != "CRD" {
                return Err(format!("{} mode '{m}' is not covered", node.op_type));
            }
        }
        _ => {}
    }
    Ok(())
}

/// Combines per-dim offset tables into one map over the output (row-major); None where any dim is None.
fn gather_map(tables: &[Vec<Option<usize>>]) -> Vec<Option<usize>> {
    let mut map = vec![Some(0usize)];
    for t in tables {
        let mut next = Vec::with_capacity(map.len() * t.len());
        for &m in &map {
            for &e in t {
                next.push(match (m, e) {
                    (Some(a), Some(b)) => Some(a + b),
                    _ => None,
                });
            }
        }
        map = next;
    }
    map
}

fn gathered(
    x: &Value,
    shape: Vec<usize>,
    map: &[Option<usize>],
    fill: f64,
) -> Result<Output, OracleError> {
    let data: Vec<f64> = map
        .iter()
        .map(|m| m.map(|i| x.data[i]).unwrap_or(fill))
        .collect();
    let mag = data.iter().map(|v| v.abs()).collect();
    make_output(x.dtype, shape, data, mag)
}

fn same(x: &Value, shape: Vec<usize>) -> Result<Output, OracleError> {
    let mag = x.data.iter().map(|v| v.abs()).collect();
    make_output(x.dtype, shape, x.data.clone(), mag)
}

fn ints_of(v: &Value) -> Vec<i64> {
    v.data.iter().map(|&d| d as i64).collect()
}

/// Axes from input `i` (opset >= `from`) or the `axes` attribute.
fn axes_arg(
    node: &NodeSpec,
    inputs: &[Option<Value>],
    i: usize,
    from: i64,
) -> Result<Option<Vec<i64>>, OracleError> {
    if node.opset >= from {
        Ok(opt_input(inputs, i).map(ints_of))
    } else {
        node.ints("axes")
    }
}

pub(super) fn eval(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let rank = x.shape.len();
    let out = match node.op_type.as_str() {
        "Reshape" => {
            let spec = ints_of(input(node, inputs, 1)?);
            let allowzero = node.int("allowzero", 0)? != 0;
            let mut shape = Vec::with_capacity(spec.len());
            let mut infer = None;
            for (i, &d) in spec.iter().enumerate() {
                if d == -1 {
                    if infer.is_some() {
                        return invalid("Reshape with two -1 dims");
                    }
                    infer = Some(i);
                    shape.push(1);
                } else if d == 0 && !allowzero {
                    if i >= rank {
                        return invalid("Reshape 0 dim beyond input rank");
                    }
                    shape.push(x.shape[i]);
                } else if d < 0 {
                    return invalid(format!("Reshape dim {d}"));
                } else {
                    shape.push(d as usize);
                }
            }
            if let Some(i) = infer {
                let known: usize = shape.iter().product();
                if known == 0 || x.len() % known != 0 {
                    return invalid(format!(
                        "Reshape cannot infer -1 for {:?} -> {spec:?}",
                        x.shape
                    ));
                }
                shape[i] = x.len() / known;
            }
            if shape.iter().product::<usize>() != x.len() {
                return invalid(format!(
                    "Reshape {:?} -> {shape:?} changes the element count",
                    x.shape
                ));
            }
            same(x, shape)?
        }
        "Flatten" => {
            let a = node.int("axis", 1)?;
            let r = rank as i64;
            if a < -r || a > r {
                return invalid(format!("Flatten axis {a} out of range"));
            }
            let a = if a < 0 { (a + r) as usize } else { a as usize };
            same(
                x,
                vec![x.shape[..a].iter().product(), x.shape[a..].iter().product()],
            )?
        }
        "Squeeze" => {
            let axes = axes_arg(node, inputs, 1, 13)?;
            let drop: Vec<usize> = match axes {
                Some(a) if !a.is_empty() => {
                    let mut v = Vec::new();
                    for ax in a {
                        let d = norm_axis(ax, rank)?;
                        if x.shape[d] != 1 {
                            return invalid(format!("Squeeze axis {ax} has size {}", x.shape[d]));
                        }
                        v.push(d);
                    }
                    v
                }
                _ => (0..rank).filter(|&d| x.shape[d] == 1).collect(),
            };
            same(
                x,
                (0..rank)
                    .filter(|d| !drop.contains(d))
                    .map(|d| x.shape[d])
                    .collect(),
            )?
        }
        "Unsqueeze" => {
            let Some(axes) = axes_arg(node, inputs, 1, 13)? else {
                return invalid("Unsqueeze needs axes");
            };
            let out_rank = rank + axes.len();
            let mut ins = Vec::new();
            for a in axes {
                ins.push(norm_axis(a, out_rank)?);
            }
            let mut shape = Vec::with_capacity(out_rank);
            let mut it = x.shape.iter();
            for d in 0..out_rank {
                shape.push(if ins.contains(&d) {
                    1
                } else {
                    *it.next().unwrap_or(&1)
                });
            }
            same(x, shape)?
        }
        "Transpose" => {
            let perm: Vec<usize> = match node.ints("perm")? {
                Some(p) => p
                    .iter()
                    .map(|&v| norm_axis(v, rank))
                    .collect::<Result<_, _>>()?,
                None => (0..rank).rev().collect(),
            };
            let st = strides(&x.shape);
            let shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
            let tables: Vec<Vec<Option<usize>>> = perm
                .iter()
                .map(|&p| (0..x.shape[p]).map(|o| Some(o * st[p])).collect())
                .collect();
            gathered(x, shape, &gather_map(&tables), 0.0)?
        }
        "Concat" => return concat(node, inputs),
        "Split" => return split(node, inputs),
        "Slice" => slice(node, inputs, x)?,
        "Gather" => {
            let idx = input(node, inputs, 1)?;
            let axis = norm_axis(node.int("axis", 0)?, rank)?;
            let n = x.shape[axis] as i64;
            let st = strides(&x.shape);
            let mut shape = x.shape[..axis].to_vec();
            shape.extend(&idx.shape);
            shape.extend(&x.shape[axis + 1..]);
            let mut tables: Vec<Vec<Option<usize>>> = (0..axis)
                .map(|d| (0..x.shape[d]).map(|o| Some(o * st[d])).collect())
                .collect();
            let mut it = Vec::with_capacity(idx.len());
            for &i in &idx.data {
                let i = i as i64;
                let j = if i < 0 { i + n } else { i };
                if j < 0 || j >= n {
                    return invalid(format!("Gather index {i} out of range for {n}"));
                }
                it.push(Some(j as usize * st[axis]));
            }
            tables.push(it);
            for d in axis + 1..rank {
                tables.push((0..x.shape[d]).map(|o| Some(o * st[d])).collect());
            }
            gathered(x, shape, &gather_map(&tables), 0.0)?
        }
        "GatherElements" | "ScatterElements" => return elements(node, inputs),
        "ScatterND" => return scatter_nd(node, inputs),
        "Expand" => {
            let target: Vec<usize> = ints_of(input(node, inputs, 1)?)
                .iter()
                .map(|&v| v.max(0) as usize)
                .collect();
            let shape = broadcast_shape(&[&x.shape, &target])?;
            let map: Vec<Option<usize>> =
                index_map(&x.shape, &shape).into_iter().map(Some).collect();
            gathered(x, shape, &map, 0.0)?
        }
        "Tile" => {
            let reps = ints_of(input(node, inputs, 1)?);
            if reps.len() != rank || reps.iter().any(|&r| r < 0) {
                return invalid(format!("Tile repeats {reps:?} for rank {rank}"));
            }
            let st = strides(&x.shape);
            let shape: Vec<usize> = (0..rank).map(|d| x.shape[d] * reps[d] as usize).collect();
            let tables: Vec<Vec<Option<usize>>> = (0..rank)
                .map(|d| {
                    (0..shape[d])
                        .map(|o| Some((o % x.shape[d]) * st[d]))
                        .collect()
                })
                .collect();
            gathered(x, shape, &gather_map(&tables), 0.0)?
        }
        "Pad" => pad(node, inputs, x)?,
        "DepthToSpace" | "SpaceToDepth" => depth_space(node, x)?,
        "Trilu" => {
            if rank < 2 {
                return invalid("Trilu needs rank >= 2");
            }
            let k = opt_input(inputs, 1).map(|v| v.data[0] as i64).unwrap_or(0);
            let upper = node.int("upper", 1)? != 0;
            let (h, w) = (x.shape[rank - 2], x.shape[rank - 1]);
            let data: Vec<f64> = x
                .data
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    let (r, c) = (((i / w) % h) as i64, (i % w) as i64);
                    let keep = if upper { c - r >= k } else { c - r <= k };
                    if keep { v } else { 0.0 }
                })
                .collect();
            let mag = data.iter().map(|v| v.abs()).collect();
            make_output(x.dtype, x.shape.clone(), data, mag)?
        }
        "Range" => {
            let start = x.data.first().copied().unwrap_or(0.0);
            let limit = input(node, inputs, 1)?.data[0];
            let delta = input(node, inputs, 2)?.data[0];
            if delta == 0.0 {
                return invalid("Range delta 0");
            }
            let n = ((limit - start) / delta).ceil().max(0.0) as usize;
            let data: Vec<f64> = (0..n).map(|i| start + i as f64 * delta).collect();
            let mag = data
                .iter()
                .map(|v| v.abs() + (delta.abs() * n as f64))
                .collect();
            make_output(x.dtype, vec![n], data, mag)?
        }
        "OneHot" => {
            let depth = input(node, inputs, 1)?.data[0];
            let values = input(node, inputs, 2)?;
            if values.len() != 2 {
                return invalid("OneHot values must have 2 elements");
            }
            let d = depth as i64;
            if d < 1 {
                return invalid("OneHot depth must be >= 1");
            }
            let axis = norm_axis(node.int("axis", -1)?, rank + 1)?;
            let mut shape = x.shape[..axis].to_vec();
            shape.push(d as usize);
            shape.extend(&x.shape[axis..]);
            let outer: usize = x.shape[..axis].iter().product();
            let inner: usize = x.shape[axis..].iter().product();
            let mut data = vec![values.data[0]; outer * d as usize * inner];
            for o in 0..outer {
                for i in 0..inner {
                    let mut v = x.data[o * inner + i] as i64;
                    if v < 0 {
                        v += d;
                    }
                    if (0..d).contains(&v) {
                        data[(o * d as usize + v as usize) * inner + i] = values.data[1];
                    }
                }
            }
            let mag = data.iter().map(|v| v.abs()).collect();
            make_output(values.dtype, shape, data, mag)?
        }
        other => return unsupported(format!("{other} is not data movement")),
    };
    Ok(vec![out])
}

fn concat(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let vals: Vec<&Value> = inputs.iter().flatten().collect();
    let Some(first) = vals.first() else {
        return invalid("Concat needs inputs");
    };
    let rank = first.shape.len();
    let axis = norm_axis(node.int("axis", 0)?, rank)?;
    let outer: usize = first.shape[..axis].iter().product();
    let mut shape = first.shape.clone();
    shape[axis] = 0;
    for v in &vals {
        if v.shape.len() != rank || (0..rank).any(|d| d != axis && v.shape[d] != first.shape[d]) {
            return invalid(format!("Concat shapes {:?} and {:?}", first.shape, v.shape));
        }
        shape[axis] += v.shape[axis];
    }
    let mut data = Vec::with_capacity(shape.iter().product());
    for o in 0..outer {
        for v in &vals {
            let chunk: usize = v.shape[axis..].iter().product();
            data.extend_from_slice(&v.data[o * chunk..(o + 1) * chunk]);
        }
    }
    let mag = data.iter().map(|v: &f64| v.abs()).collect();
    Ok(vec![make_output(first.dtype, shape, data, mag)?])
}

fn split(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let rank = x.shape.len();
    let axis = norm_axis(node.int("axis", 0)?, rank)?;
    let n = x.shape[axis];
    let given = if node.opset >= 13 {
        opt_input(inputs, 1).map(ints_of)
    } else {
        node.ints("split")?
    };
    let sizes: Vec<usize> = match given {
        Some(s) if !s.is_empty() => s.iter().map(|&v| v.max(0) as usize).collect(),
        _ => {
            let k = if node.opset >= 18 {
                node.int("num_outputs", node.num_outputs as i64)?
            } else {
                node.num_outputs as i64
            };
            let k = k.max(1) as usize;
            let each = n.div_ceil(k);
            (0..k)
                .map(|i| each.min(n.saturating_sub(i * each)))
                .collect()
        }
    };
    if sizes.iter().sum::<usize>() != n {
        return invalid(format!("Split sizes {sizes:?} do not add up to {n}"));
    }
    let st = strides(&x.shape);
    let mut outs = Vec::with_capacity(sizes.len());
    let mut start = 0;
    for &s in &sizes {
        let mut shape = x.shape.clone();
        shape[axis] = s;
        let tables: Vec<Vec<Option<usize>>> = (0..rank)
            .map(|d| {
                (0..shape[d])
                    .map(|o| Some((if d == axis { o + start } else { o }) * st[d]))
                    .collect()
            })
            .collect();
        outs.push(gathered(x, shape, &gather_map(&tables), 0.0)?);
        start += s;
    }
    Ok(outs)
}

fn slice(node: &NodeSpec, inputs: &[Option<Value>], x: &Value) -> Result<Output, OracleError> {
    let rank = x.shape.len();
    let (starts, ends, axes, steps) = if node.opset >= 10 {
        (
            ints_of(input(node, inputs, 1)?),
            ints_of(input(node, inputs, 2)?),
            opt_input(inputs, 3).map(ints_of),
            opt_input(inputs, 4).map(ints_of),
        )
    } else {
        (
            node.ints("starts")?.unwrap_or_default(),
            node.ints("ends")?.unwrap_or_default(),
            node.ints("axes")?,
            None,
        )
    };
    let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return invalid("Slice starts/ends/axes/steps lengths differ");
    }
    let st = strides(&x.shape);
    // Per axis, the source indices taken, found by walking from the clamped start by the step (in
    // i128: starts near i64::MAX and steps of i64::MIN do not overflow). Axes not sliced take all.
    let mut taken: Vec<Vec<usize>> = x.shape.iter().map(|&n| (0..n).collect()).collect();
    for i in 0..starts.len() {
        let d = norm_axis(axes[i], rank)?;
        let n = x.shape[d] as i128;
        let s = steps[i] as i128;
        if s == 0 {
            return invalid("Slice step 0");
        }
        let fix = |v: i64| if v < 0 { v as i128 + n } else { v as i128 };
        let mut walk = Vec::new();
        if s > 0 {
            let (b, e) = (fix(starts[i]).clamp(0, n), fix(ends[i]).clamp(0, n));
            let mut k = b;
            while k < e {
                walk.push(k as usize);
                k += s;
            }
        } else if n > 0 {
            // Backwards: starts clamp to [0, n - 1], ends to [-1, n - 1]; an empty axis has no
            // index to start from (those ranges are empty), so nothing is taken.
            let (b, e) = (
                fix(starts[i]).clamp(0, n - 1),
                fix(ends[i]).clamp(-1, n - 1),
            );
            let mut k = b;
            while k > e {
                walk.push(k as usize);
                k += s;
            }
        }
        taken[d] = walk;
    }
    let count: Vec<usize> = taken.iter().map(Vec::len).collect();
    let tables: Vec<Vec<Option<usize>>> = taken
        .iter()
        .enumerate()
        .map(|(d, t)| t.iter().map(|&k| Some(k * st[d])).collect())
        .collect();
    gathered(x, count, &gather_map(&tables), 0.0)
}

fn pad(node: &NodeSpec, inputs: &[Option<Value>], x: &Value) -> Result<Output, OracleError> {
    let rank = x.shape.len();
    let mode = node.string("mode", "constant")?;
    let (pads, value, axes) = if node.opset >= 11 {
        let pads = ints_of(input(node, inputs, 1)?);
        let value = opt_input(inputs, 2)
            .and_then(|v| v.data.first().copied())
            .unwrap_or(0.0);
        (pads, value, opt_input(inputs, 3).map(ints_of))
    } else {
        (
            node.ints("pads")?.unwrap_or_default(),
            node.float("value", 0.0)?,
            None,
        )
    };
    let axes: Vec<usize> = match axes {
        Some(a) => a
            .iter()
            .map(|&v| norm_axis(v, rank))
            .collect::<Result<_, _>>()?,
        None => (0..rank).collect(),
    };
    let k = axes.len();
    if pads.len() != 2 * k {
        return invalid(format!("Pad pads {pads:?} for {k} axes"));
    }
    let mut pb = vec![0i64; rank];
    let mut pe = vec![0i64; rank];
    for (i, &a) in axes.iter().enumerate() {
        pb[a] = pads[i];
        pe[a] = pads[i + k];
    }
    let st = strides(&x.shape);
    let mut shape = Vec::with_capacity(rank);
    let mut tables = Vec::with_capacity(rank);
    for d in 0..rank {
        let n = x.shape[d] as i64;
        let o = n + pb[d] + pe[d];
        if o < 0 {
            return invalid("Pad crops below zero");
        }
        shape.push(o as usize);
        let mut t = Vec::with_capacity(o as usize);
        for j in 0..o {
            let i = j - pb[d];
            let src = if (0..n).contains(&i) {
                Some(i)
            } else {
                match mode.as_str() {
                    "edge" => Some(i.clamp(0, n - 1)),
                    "wrap" => Some(i.rem_euclid(n)),
                    "reflect" => {
                        if n == 1 {
                            Some(0)
                        } else {
                            let p = 2 * (n - 1);
                            let r = i.rem_euclid(p);
                            Some(if r < n { r } else { p - r })
                        }
                    }
                    _ => None,
                }
            };
            t.push(src.map(|s| s as usize * st[d]));
        }
        tables.push(t);
    }
    gathered(x, shape, &gather_map(&tables), value)
}

fn depth_space(node: &NodeSpec, x: &Value) -> Result<Output, OracleError> {
    if x.shape.len() != 4 {
        return invalid(format!("{} needs a 4-D input", node.op_type));
    }
    let b = node.int("blocksize", 0)?;
    if b < 1 {
        return invalid("blocksize must be >= 1");
    }
    let b = b as usize;
    let (n, c, h, w) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
    let mut data;
    let shape;
    if node.op_type == "DepthToSpace" {
        if c % (b * b) != 0 {
            return invalid("DepthToSpace channels not divisible by blocksize^2");
        }
        let oc = c / (b * b);
        let crd = node.string("mode", "DCR")? == "CRD";
        shape = vec![n, oc, h * b, w * b];
        data = vec![0.0; x.len()];
        for ni in 0..n {
            for co in 0..oc {
                for y in 0..h * b {
                    for xx in 0..w * b {
                        let (by, bx) = (y % b, xx % b);
                        let ci = if crd {
                            co * b * b + by * b + bx
                        } else {
                            (by * b + bx) * oc + co
                        };
                        data[((ni * oc + co) * h * b + y) * w * b + xx] =
                            x.data[((ni * c + ci) * h + y / b) * w + xx / b];
                    }
                }
            }
        }
    } else {
        if h % b != 0 || w % b != 0 {
            return invalid("SpaceToDepth spatial dims not divisible by blocksize");
        }
        let (oh, ow) = (h / b, w / b);
        // Opset 28's `mode`: DCR (default) puts the block offset outermost in the output channel
        // ([by, bx, c]), CRD innermost ([c, by, bx]) -- the inverse of DepthToSpace in that mode.
        let crd = node.string("mode", "DCR")? == "CRD";
        shape = vec![n, c * b * b, oh, ow];
        data = vec![0.0; x.len()];
        for ni in 0..n {
            for co in 0..c * b * b {
                let (by, bx, ci) = if crd {
                    (co / b % b, co % b, co / (b * b))
                } else {
                    (co / c / b, co / c % b, co % c)
                };
                for y in 0..oh {
                    for xx in 0..ow {
                        data[((ni * c * b * b + co) * oh + y) * ow + xx] =
                            x.data[((ni * c + ci) * h + y * b + by) * w + xx * b + bx];
                    }
                }
            }
        }
    }
    let mag = data.iter().map(|v| v.abs()).collect();
    make_output(x.dtype, shape, data, mag)
}

/// GatherElements and ScatterElements: the element at index position p addresses the data element whose
/// coordinates are p's with the axis coordinate replaced by indices[p].
fn elements(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let idx = input(node, inputs, 1)?;
    let rank = x.shape.len();
    if idx.shape.len() != rank {
        return invalid("indices rank must equal data rank");
    }
    let axis = norm_axis(node.int("axis", 0)?, rank)?;
    if (0..rank).any(|d| d != axis && idx.shape[d] > x.shape[d]) {
        return invalid(format!(
            "indices {:?} reach past data {:?} off the axis",
            idx.shape, x.shape
        ));
    }
    let st = strides(&x.shape);
    let n = x.shape[axis] as i64;
    // Offset of each index position in data, without the axis term.
    let tables: Vec<Vec<Option<usize>>> = (0..rank)
        .map(|d| {
            (0..idx.shape[d])
                .map(|o| Some(if d == axis { 0 } else { o * st[d] }))
                .collect()
        })
        .collect();
    let base = gather_map(&tables);
    let mut targets = Vec::with_capacity(idx.len());
    for (p, &i) in idx.data.iter().enumerate() {
        let i = i as i64;
        let j = if i < 0 { i + n } else { i };
        if j < 0 || j >= n {
            return invalid(format!("{} index {i} out of range for {n}", node.op_type));
        }
        targets.push(base[p].unwrap_or(0) + j as usize * st[axis]);
    }
    if node.op_type == "GatherElements" {
        let data: Vec<f64> = targets.iter().map(|&t| x.data[t]).collect();
        let mag = data.iter().map(|v| v.abs()).collect();
        return Ok(vec![make_output(x.dtype, idx.shape.clone(), data, mag)?]);
    }
    let upd = input(node, inputs, 2)?;
    if upd.shape != idx.shape {
        return invalid("ScatterElements updates shape must equal indices shape");
    }
    let red = node.string("reduction", "none")?;
    let mut data = x.data.clone();
    let mut mag: Vec<f64> = x.data.iter().map(|v| v.abs()).collect();
    for (p, &t) in targets.iter().enumerate() {
        let u = upd.data[p];
        data[t] = match red.as_str() {
            "add" => data[t] + u,
            "mul" => data[t] * u,
            "max" => data[t].max(u),
            "min" => data[t].min(u),
            _ => u,
        };
        mag[t] = if red == "add" {
            mag[t] + u.abs()
        } else {
            data[t].abs()
        };
    }
    Ok(vec![make_output(x.dtype, x.shape.clone(), data, mag)?])
}

/// ScatterND, element by element of the updates: update element `p` belongs to index tuple
/// `p / slice`, and its data coordinates are that tuple followed by `p`'s coordinates within the
/// slice; the updates apply in the order of `p`.
fn scatter_nd(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let idx = input(node, inputs, 1)?;
    let upd = input(node, inputs, 2)?;
    let q = idx.shape.len();
    if q == 0 || idx.shape[q - 1] > x.shape.len() {
        return invalid(format!(
            "ScatterND indices {:?} for data {:?}",
            idx.shape, x.shape
        ));
    }
    let k = idx.shape[q - 1];
    let mut expect = idx.shape[..q - 1].to_vec();
    expect.extend_from_slice(&x.shape[k..]);
    if upd.shape != expect {
        return invalid(format!(
            "ScatterND updates {:?}, expected {expect:?}",
            upd.shape
        ));
    }
    let red = node.string("reduction", "none")?;
    let slice_shape = &x.shape[k..];
    let slice: usize = slice_shape.iter().product();
    let st = strides(&x.shape);
    let mut data = x.data.clone();
    let mut mag: Vec<f64> = x.data.iter().map(|v| v.abs()).collect();
    for (p, &u) in upd.data.iter().enumerate() {
        let (t, mut e) = (p / slice, p % slice);
        let mut coords = vec![0usize; x.shape.len()];
        for (j, c) in coords.iter_mut().enumerate().take(k) {
            let n = x.shape[j] as i64;
            let i = idx.data[t * k + j] as i64;
            let i = if i < 0 { i + n } else { i };
            if i < 0 || i >= n {
                return invalid(format!("ScatterND index out of range for {n}"));
            }
            *c = i as usize;
        }
        for d in (0..slice_shape.len()).rev() {
            coords[k + d] = e % slice_shape[d];
            e /= slice_shape[d];
        }
        let at: usize = coords.iter().zip(&st).map(|(c, s)| c * s).sum();
        data[at] = match red.as_str() {
            "add" => data[at] + u,
            "mul" => data[at] * u,
            "max" => data[at].max(u),
            "min" => data[at].min(u),
            _ => u,
        };
        mag[at] = if red == "add" {
            mag[at] + u.abs()
        } else {
            data[at].abs()
        };
    }
    Ok(vec![make_output(x.dtype, x.shape.clone(), data, mag)?])
}

#[cfg(test)]
mod tests;
