//! More data movement: Pad, Split, Trilu, Range, GatherElements, ScatterElements, ScatterND,
//! DepthToSpace, SpaceToDepth.
use super::{input, norm_axis, opt_input, output, strides, unravel};
use crate::{NodeSpec, OracleError, Output, Value};

const OPS: &[&str] = &[
    "OneHot",
    "ScatterElements",
    "ScatterND",
    "Pad",
    "Split",
    "Trilu",
    "Range",
    "GatherElements",
    "DepthToSpace",
    "SpaceToDepth",
];

pub(super) fn covers(op: &str) -> bool {
    OPS.contains(&op)
}

pub(super) fn supports(node: &NodeSpec) -> Result<(), String> {
    let e = |x: OracleError| x.to_string();
    match node.op_type.as_str() {
        "Pad" => {
            let mode = node.string("mode", "constant").map_err(e)?;
            if !matches!(mode.as_str(), "constant" | "reflect" | "edge" | "wrap") {
                return Err(format!("Pad mode '{mode}' is not covered"));
            }
        }
        "DepthToSpace" | "SpaceToDepth" => {
            let mode = node.string("mode", "DCR").map_err(e)?;
            if mode != "DCR" && mode != "CRD" {
                return Err(format!("{} mode '{mode}' is not covered", node.op_type));
            }
        }
        "Split" => return Ok(()),
        "ScatterElements" | "ScatterND" => {
            let r = node.string("reduction", "none").map_err(e)?;
            if !matches!(r.as_str(), "none" | "add" | "mul" | "max" | "min") {
                return Err(format!("{} reduction '{r}' is not covered", node.op_type));
            }
        }
        _ => {}
    }
    if node.num_outputs > 1 {
        return Err(format!("{} has one output", node.op_type));
    }
    Ok(())
}

fn ints_of(v: &Value) -> Vec<i64> {
    v.data.iter().map(|&x| x as i64).collect()
}

/// GatherElements / ScatterElements: `indices` has the data's rank and, off the axis, dims no larger
/// than the data's (each index position names the data element at the same coordinates but the axis).
fn check_element_indices(op: &str, x: &Value, idx: &Value, axis: usize) -> Result<(), OracleError> {
    let fits = idx.shape.len() == x.shape.len()
        && (0..x.shape.len()).all(|d| d == axis || idx.shape[d] <= x.shape[d]);
    if fits {
        Ok(())
    } else {
        Err(OracleError::Invalid(format!(
            "{op}: indices {:?} do not fit data {:?} off axis {axis}",
            idx.shape, x.shape
        )))
    }
}

fn done(x: &Value, shape: Vec<usize>, data: Vec<f64>) -> Result<Output, OracleError> {
    let mag = data.iter().map(|v| v.abs()).collect();
    output(x.dtype, shape, data, mag)
}

pub(super) fn evaluate(
    node: &NodeSpec,
    inputs: &[Option<Value>],
) -> Result<Vec<Output>, OracleError> {
    let op = node.op_type.as_str();
    let x = input(node, inputs, 0)?;
    let rank = x.shape.len();
    let ist = strides(&x.shape);
    match op {
        "Pad" => {
            let mode = node.string("mode", "constant")?;
            let (pads_raw, cval, axes) = if node.opset < 11 {
                (
                    node.ints("pads")?.unwrap_or_default(),
                    node.float("value", 0.0)?,
                    None,
                )
            } else {
                let c = opt_input(inputs, 2)
                    .and_then(|v| v.data.first().copied())
                    .unwrap_or(0.0);
                (
                    ints_of(input(node, inputs, 1)?),
                    c,
                    opt_input(inputs, 3).map(ints_of),
                )
            };
            let axes: Vec<usize> = match axes {
                Some(a) => a
                    .iter()
                    .map(|&v| norm_axis(v, rank, op))
                    .collect::<Result<_, _>>()?,
                None => (0..rank).collect(),
            };
            let na = axes.len();
            if pads_raw.len() != 2 * na {
                return Err(OracleError::Invalid(format!(
                    "Pad pads {pads_raw:?} for {na} axes"
                )));
            }
            let mut pb = vec![0i64; rank];
            let mut pe = vec![0i64; rank];
            for (i, &a) in axes.iter().enumerate() {
                pb[a] = pads_raw[i];
                pe[a] = pads_raw[na + i];
            }
            let shape: Vec<usize> = (0..rank)
                .map(|d| (x.shape[d] as i64 + pb[d] + pe[d]).max(0) as usize)
                .collect();
            let n: usize = shape.iter().product();
            let mut data = Vec::with_capacity(n);
            for f in 0..n {
                let oi = unravel(f, &shape);
                let mut off = 0usize;
                let mut constant = false;
                for d in 0..rank {
                    let dim = x.shape[d] as i64;
                    let mut i = oi[d] as i64 - pb[d];
                    if (i < 0 || i >= dim) && dim == 0 && mode != "constant" {
                        return Err(OracleError::Invalid(format!(
                            "Pad mode '{mode}' on an empty axis"
                        )));
                    }
                    if i < 0 || i >= dim {
                        match mode.as_str() {
                            "constant" => constant = true,
                            "edge" => i = i.clamp(0, dim - 1),
                            "wrap" => i = i.rem_euclid(dim),
                            _ => {
                                // reflect: mirror about the edges without repeating them
                                if dim == 1 {
                                    i = 0;
                                }
                                while i < 0 || i >= dim {
                                    if i < 0 {
                                        i = -i;
                                    }
                                    if i >= dim {
                                        i = 2 * (dim - 1) - i;
                                    }
                                }
                            }
                        }
                    }
                    if !constant {
                        off += i as usize * ist[d];
                    }
                }
                data.push(if constant { cval } else { x.data[off] });
            }
            Ok(vec![done(x, shape, data)?])
        }
        "Split" => {
            let axis = norm_axis(node.int("axis", 0)?, rank, op)?;
            let dim = x.shape[axis];
            let split: Option<Vec<i64>> = if node.opset >= 13 {
                opt_input(inputs, 1).map(ints_of)
            } else {
                node.ints("split")?
            };
            let parts: Vec<usize> = match split {
                Some(s) => s.iter().map(|&v| v as usize).collect(),
                None => {
                    let k = node.int("num_outputs", node.num_outputs as i64)?.max(1) as usize;
                    let chunk = dim.div_ceil(k);
                    (0..k)
                        .map(|i| chunk.min(dim.saturating_sub(i * chunk)))
                        .collect()
                }
            };
            if parts.iter().sum::<usize>() != dim {
                return Err(OracleError::Invalid(format!(
                    "Split sizes {parts:?} do not add to {dim}"
                )));
            }
            let outer: usize = x.shape[..axis].iter().product();
            let inner: usize = x.shape[axis + 1..].iter().product();
            let mut outs = Vec::new();
            let mut start = 0;
            for &p in &parts {
                let mut data = Vec::new();
                for o in 0..outer {
                    let b = (o * dim + start) * inner;
                    data.extend_from_slice(&x.data[b..b + p * inner]);
                }
                let mut shape = x.shape.clone();
                shape[axis] = p;
                outs.push(done(x, shape, data)?);
                start += p;
            }
            Ok(outs)
        }
        "Trilu" => {
            if rank < 2 {
                return Err(OracleError::Invalid("Trilu needs rank >= 2".into()));
            }
            let upper = node.int("upper", 1)? != 0;
            let k = opt_input(inputs, 1)
                .and_then(|v| v.data.first().copied())
                .unwrap_or(0.0) as i64;
            let data = (0..x.len())
                .map(|f| {
                    let oi = unravel(f, &x.shape);
                    let (i, j) = (oi[rank - 2] as i64, oi[rank - 1] as i64);
                    let keep = if upper { j - i >= k } else { j - i <= k };
                    if keep { x.data[f] } else { 0.0 }
                })
                .collect();
            Ok(vec![done(x, x.shape.clone(), data)?])
        }
        "Range" => {
            let start = x.data[0];
            let limit = input(node, inputs, 1)?.data[0];
            let delta = input(node, inputs, 2)?.data[0];
            let n = ((limit - start) / delta).ceil().max(0.0) as usize;
            let data = (0..n).map(|i| start + i as f64 * delta).collect();
            Ok(vec![done(x, vec![n], data)?])
        }
        "OneHot" => {
            let depth_v = input(node, inputs, 1)?.data[0];
            let values = input(node, inputs, 2)?;
            if depth_v < 1.0 || values.len() != 2 {
                return Err(OracleError::Invalid(
                    "OneHot needs depth >= 1 and two values".into(),
                ));
            }
            let depth = depth_v as i64;
            let axis = norm_axis(node.int("axis", -1)?, rank + 1, op)?;
            let mut shape = x.shape.clone();
            shape.insert(axis, depth as usize);
            let n: usize = shape.iter().product();
            let data = (0..n)
                .map(|f| {
                    let mut oi = unravel(f, &shape);
                    let d = oi.remove(axis) as i64;
                    let mut k = x.data[(0..rank).map(|a| oi[a] * ist[a]).sum::<usize>()] as i64;
                    if k < 0 {
                        k += depth;
                    }
                    if k == d {
                        values.data[1]
                    } else {
                        values.data[0]
                    }
                })
                .collect();
            Ok(vec![done(values, shape, data)?])
        }
        "ScatterElements" => {
            let idx = input(node, inputs, 1)?;
            let upd = input(node, inputs, 2)?;
            let axis = norm_axis(node.int("axis", 0)?, rank, op)?;
            let red = node.string("reduction", "none")?;
            let dim = x.shape[axis] as i64;
            check_element_indices(op, x, idx, axis)?;
            if upd.shape != idx.shape {
                return Err(OracleError::Invalid(format!(
                    "ScatterElements updates {:?} and indices {:?} differ in shape",
                    upd.shape, idx.shape
                )));
            }
            let mut data = x.data.clone();
            // Per element, the magnitude of the terms combined into it: an addition adds |update|
            // to it (the sum can cancel far below its terms), a product scales it, a replacement or
            // a max / min that takes the update restarts it.
            let mut mag: Vec<f64> = x.data.iter().map(|v| v.abs()).collect();
            for (f, &iv) in idx.data.iter().enumerate() {
                let mut oi = unravel(f, &idx.shape);
                let mut i = iv as i64;
                if i < 0 {
                    i += dim;
                }
                if i < 0 || i >= dim {
                    return Err(OracleError::Invalid(format!(
                        "ScatterElements index {iv} out of range"
                    )));
                }
                oi[axis] = i as usize;
                let t = (0..rank).map(|d| oi[d] * ist[d]).sum::<usize>();
                let u = upd.data[f];
                let before = data[t];
                data[t] = match red.as_str() {
                    "add" => before + u,
                    "mul" => before * u,
                    "max" => before.max(u),
                    "min" => before.min(u),
                    _ => u,
                };
                mag[t] = match red.as_str() {
                    "add" => mag[t] + u.abs(),
                    "mul" => mag[t] * u.abs(),
                    "max" | "min" if data[t] == before => mag[t],
                    _ => u.abs(),
                };
            }
            Ok(vec![output(x.dtype, x.shape.clone(), data, mag)?])
        }
        "ScatterND" => {
            // output = data; for each index tuple t (indices' last axis), in order:
            // output[indices[t]] = f(output[indices[t]], updates[t]), a slice of data.shape[k..].
            let idx = input(node, inputs, 1)?;
            let upd = input(node, inputs, 2)?;
            let red = node.string("reduction", "none")?;
            let Some((&k, batch)) = idx.shape.split_last() else {
                return Err(OracleError::Invalid(
                    "ScatterND indices must have rank >= 1".into(),
                ));
            };
            if k > rank {
                return Err(OracleError::Invalid(format!(
                    "ScatterND index tuples of {k} for data of rank {rank}"
                )));
            }
            let want: Vec<usize> = batch.iter().chain(&x.shape[k..]).copied().collect();
            if upd.shape != want {
                return Err(OracleError::Invalid(format!(
                    "ScatterND updates {:?}, expected {want:?}",
                    upd.shape
                )));
            }
            let slice: usize = x.shape[k..].iter().product();
            let tuples: usize = batch.iter().product();
            let mut data = x.data.clone();
            let mut mag: Vec<f64> = x.data.iter().map(|v| v.abs()).collect();
            for t in 0..tuples {
                let mut base = 0;
                for (j, (&dim, &stride)) in x.shape[..k].iter().zip(&ist).enumerate() {
                    let dim = dim as i64;
                    let mut i = idx.data[t * k + j] as i64;
                    if i < 0 {
                        i += dim;
                    }
                    if i < 0 || i >= dim {
                        return Err(OracleError::Invalid(format!(
                            "ScatterND index {} out of range for {dim}",
                            idx.data[t * k + j]
                        )));
                    }
                    base += i as usize * stride;
                }
                for e in 0..slice {
                    let (at, u) = (base + e, upd.data[t * slice + e]);
                    let before = data[at];
                    data[at] = match red.as_str() {
                        "add" => before + u,
                        "mul" => before * u,
                        "max" => before.max(u),
                        "min" => before.min(u),
                        _ => u,
                    };
                    mag[at] = match red.as_str() {
                        "add" => mag[at] + u.abs(),
                        "mul" => mag[at] * u.abs(),
                        "max" | "min" if data[at] == before => mag[at],
                        _ => u.abs(),
                    };
                }
            }
            Ok(vec![output(x.dtype, x.shape.clone(), data, mag)?])
        }
        "GatherElements" => {
            let idx = input(node, inputs, 1)?;
            let axis = norm_axis(node.int("axis", 0)?, rank, op)?;
            let dim = x.shape[axis] as i64;
            check_element_indices(op, x, idx, axis)?;
            let mut data = Vec::with_capacity(idx.len());
            for (f, &iv) in idx.data.iter().enumerate() {
                let mut oi = unravel(f, &idx.shape);
                let mut i = iv as i64;
                if i < 0 {
                    i += dim;
                }
                if i < 0 || i >= dim {
                    return Err(OracleError::Invalid(format!(
                        "GatherElements index {iv} out of range"
                    )));
                }
                oi[axis] = i as usize;
                data.push(x.data[(0..rank).map(|d| oi[d] * ist[d]).sum::<usize>()]);
            }
            Ok(vec![done(x, idx.shape.clone(), data)?])
        }
        _ => {
            // DepthToSpace / SpaceToDepth on [N, C, H, W]
            if rank != 4 {
                return Err(OracleError::Invalid(format!("{op} needs rank 4")));
            }
            let bs = node.int("blocksize", 0)? as usize;
            if bs == 0 {
                return Err(OracleError::Invalid(format!(
                    "{op} needs a positive blocksize"
                )));
            }
            let (n, c, h, w) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
            let at = |nn: usize, cc: usize, hh: usize, ww: usize| {
                x.data[((nn * c + cc) * h + hh) * w + ww]
            };
            if op == "DepthToSpace" {
                let crd = node.string("mode", "DCR")? == "CRD";
                let co = c / (bs * bs);
                let shape = vec![n, co, h * bs, w * bs];
                let mut data = Vec::with_capacity(x.len());
                for nn in 0..n {
                    for cc in 0..co {
                        for y in 0..h * bs {
                            for xx in 0..w * bs {
                                let (hh, i, ww, j) = (y / bs, y % bs, xx / bs, xx % bs);
                                let ci = if crd {
                                    cc * bs * bs + i * bs + j
                                } else {
                                    (i * bs + j) * co + cc
                                };
                                data.push(at(nn, ci, hh, ww));
                            }
                        }
                    }
                }
                Ok(vec![done(x, shape, data)?])
            } else {
                // The inverse of DepthToSpace in the same mode: output channel (i*bs + j)*C + c
                // (DCR, the default) or c*bs*bs + i*bs + j (CRD) holds the input pixel at block
                // offset (i, j) of channel c. `mode` arrived with opset 28; earlier opsets are DCR.
                let crd = node.string("mode", "DCR")? == "CRD";
                if h % bs != 0 || w % bs != 0 {
                    return Err(OracleError::Invalid(format!(
                        "SpaceToDepth: H={h}, W={w} not divisible by blocksize {bs}"
                    )));
                }
                let shape = vec![n, c * bs * bs, h / bs, w / bs];
                let mut data = Vec::with_capacity(x.len());
                for nn in 0..n {
                    for co in 0..c * bs * bs {
                        let (blk, cc) = if crd {
                            (co % (bs * bs), co / (bs * bs))
                        } else {
                            (co / c, co % c)
                        };
                        let (i, j) = (blk / bs, blk % bs);
                        for hh in 0..h / bs {
                            for ww in 0..w / bs {
                                data.push(at(nn, cc, hh * bs + i, ww * bs + j));
                            }
                        }
                    }
                }
                Ok(vec![done(x, shape, data)?])
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Reference;
    use super::super::testutil::*;
    use crate::{Attr, DType, Oracle, Value};

    fn v(shape: Vec<usize>, data: Vec<f64>) -> Option<Value> {
        Some(Value::new(DType::F32, shape, data).unwrap())
    }
    fn iv(d: &[i64]) -> Option<Value> {
        Some(
            Value::new(
                DType::I64,
                vec![d.len()],
                d.iter().map(|&x| x as f64).collect(),
            )
            .unwrap(),
        )
    }

    #[test]
    fn onehot_scatter_by_hand() {
        let idx = Some(Value::new(DType::I64, vec![3], vec![0.0, -1.0, 5.0]).unwrap());
        let out = Reference
            .evaluate(
                &node("OneHot", 11, &[]),
                &[idx, v(vec![], vec![3.0]), v(vec![2], vec![0.0, 7.0])],
            )
            .unwrap();
        assert_eq!(out[0].value.shape, vec![3, 3]);
        assert_eq!(
            out[0].value.data,
            vec![7.0, 0.0, 0.0, 0.0, 0.0, 7.0, 0.0, 0.0, 0.0]
        );
        let i2 = Some(Value::new(DType::I64, vec![1, 2], vec![1.0, 1.0]).unwrap());
        let out = Reference
            .evaluate(
                &node(
                    "ScatterElements",
                    16,
                    &[
                        ("axis", Attr::Int(1)),
                        ("reduction", Attr::String("add".into())),
                    ],
                ),
                &[
                    v(vec![1, 3], vec![1.0, 2.0, 3.0]),
                    i2,
                    v(vec![1, 2], vec![10.0, 20.0]),
                ],
            )
            .unwrap();
        assert_eq!(out[0].value.data, vec![1.0, 32.0, 3.0]);
    }

    #[test]
    fn pad_modes_by_hand() {
        let x = v(vec![3], vec![1.0, 2.0, 3.0]);
        let p = |mode: &str| {
            Reference
                .evaluate(
                    &node("Pad", 13, &[("mode", Attr::String(mode.into()))]),
                    &[x.clone(), iv(&[2, 2]), v(vec![], vec![9.0])],
                )
                .unwrap()[0]
                .value
                .data
                .clone()
        };
        assert_eq!(p("constant"), vec![9.0, 9.0, 1.0, 2.0, 3.0, 9.0, 9.0]);
        assert_eq!(p("edge"), vec![1.0, 1.0, 1.0, 2.0, 3.0, 3.0, 3.0]);
        assert_eq!(p("reflect"), vec![3.0, 2.0, 1.0, 2.0, 3.0, 2.0, 1.0]);
        assert_eq!(p("wrap"), vec![2.0, 3.0, 1.0, 2.0, 3.0, 1.0, 2.0]);
    }

    #[test]
    fn split_trilu_range_by_hand() {
        let mut n = node("Split", 13, &[]);
        n.num_outputs = 2;
        let out = Reference
            .evaluate(
                &n,
                &[v(vec![5], vec![1.0, 2.0, 3.0, 4.0, 5.0]), iv(&[2, 3])],
            )
            .unwrap();
        assert_eq!(out[1].value.data, vec![3.0, 4.0, 5.0]);
        let out = Reference
            .evaluate(
                &node("Trilu", 14, &[]),
                &[v(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]), None],
            )
            .unwrap();
        assert_eq!(out[0].value.data, vec![1.0, 2.0, 0.0, 4.0]);
        let out = Reference
            .evaluate(
                &node("Range", 11, &[]),
                &[
                    v(vec![], vec![1.0]),
                    v(vec![], vec![2.0]),
                    v(vec![], vec![0.25]),
                ],
            )
            .unwrap();
        assert_eq!(out[0].value.data, vec![1.0, 1.25, 1.5, 1.75]);
    }

    #[test]
    // The hand-checked element's indices are written out term by term to mirror the DCR formula.
    #[allow(clippy::identity_op)]
    fn depth_space_roundtrip_random() {
        let mut rng = SplitMix64(77);
        let d = rng.vec(8 * 2 * 3);
        let x = v(vec![1, 8, 2, 3], d.clone());
        let y = Reference
            .evaluate(
                &node("DepthToSpace", 13, &[("blocksize", Attr::Int(2))]),
                &[x],
            )
            .unwrap();
        assert_eq!(y[0].value.shape, vec![1, 2, 4, 6]);
        // DCR: y[0, c, 2h+i, 2w+j] = x[0, (2i+j)*2 + c, h, w]; check one element by hand.
        assert_eq!(
            y[0].value.data[(1 * 4 + 3) * 6 + 4],
            d[((2 + 0) * 2 + 1) * 6 + 1 * 3 + 2]
        );
        let z = Reference
            .evaluate(
                &node("SpaceToDepth", 13, &[("blocksize", Attr::Int(2))]),
                &[Some(y[0].value.clone())],
            )
            .unwrap();
        assert_eq!(z[0].value.data, d);
        let g = Reference
            .evaluate(
                &node("GatherElements", 13, &[("axis", Attr::Int(1))]),
                &[
                    v(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]),
                    Some(Value::new(DType::I64, vec![2, 2], vec![0.0, 0.0, 1.0, 0.0]).unwrap()),
                ],
            )
            .unwrap();
        assert_eq!(g[0].value.data, vec![1.0, 1.0, 4.0, 3.0]);
    }

    #[test]
    fn space_to_depth_crd_inverts_depth_to_space_crd() {
        let mut rng = SplitMix64(78);
        let d = rng.vec(8 * 2 * 3);
        let crd = |op: &str| {
            node(
                op,
                28,
                &[
                    ("blocksize", Attr::Int(2)),
                    ("mode", Attr::String("CRD".into())),
                ],
            )
        };
        let y = Reference
            .evaluate(&crd("DepthToSpace"), &[v(vec![1, 8, 2, 3], d.clone())])
            .unwrap();
        let z = Reference
            .evaluate(&crd("SpaceToDepth"), &[Some(y[0].value.clone())])
            .unwrap();
        assert_eq!(z[0].value.data, d);
        // By hand, one channel of 2 input channels: output channel 1 = (c 0, i 0, j 1), so
        // z[0, 1, h, w] = x[0, 0, 2h, 2w + 1].
        let x: Vec<f64> = (0..2 * 4 * 6).map(|k| k as f64 + 1.0).collect();
        let z = Reference
            .evaluate(&crd("SpaceToDepth"), &[v(vec![1, 2, 4, 6], x.clone())])
            .unwrap();
        assert_eq!(z[0].value.shape, vec![1, 8, 2, 3]);
        assert_eq!(z[0].value.data[6..12], [2.0, 4.0, 6.0, 14.0, 16.0, 18.0]);
    }
}
