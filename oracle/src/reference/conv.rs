//! Conv (N-D, groups, strides, dilations, explicit pads, auto_pad), transcribed as the direct sum
//! Y[n, m, o] = B[m] + Σ_c Σ_k X[n, g·C/G + c, o·s − pad_begin + k·d] · W[m, c, k].
use super::parallel::rows;
use super::{input, opt_input, output, strides, unravel};
use crate::{NodeSpec, OracleError, Output, Value};

pub(super) fn supports(node: &NodeSpec) -> Result<(), String> {
    if node.num_outputs > 1 {
        return Err(format!("{} has one output", node.op_type));
    }
    let ap = node
        .string("auto_pad", "NOTSET")
        .map_err(|e| e.to_string())?;
    if !matches!(
        ap.as_str(),
        "NOTSET" | "VALID" | "SAME_UPPER" | "SAME_LOWER"
    ) {
        return Err(format!("Conv auto_pad '{ap}' is not covered"));
    }
    Ok(())
}

/// Output size and begin pad of one spatial dimension.
pub(super) fn out_dim(
    auto_pad: &str,
    inp: usize,
    k: usize,
    stride: usize,
    dil: usize,
    pb: usize,
    pe: usize,
) -> Result<(usize, usize), OracleError> {
    let eff = dil * (k - 1) + 1;
    match auto_pad {
        "SAME_UPPER" | "SAME_LOWER" => {
            let out = inp.div_ceil(stride);
            let total = ((out.saturating_sub(1)) * stride + eff).saturating_sub(inp);
            let begin = if auto_pad == "SAME_UPPER" {
                total / 2
            } else {
                total - total / 2
            };
            Ok((out, begin))
        }
        _ => {
            let (pb, pe) = if auto_pad == "VALID" {
                (0, 0)
            } else {
                (pb, pe)
            };
            let padded = inp + pb + pe;
            if padded < eff {
                return Err(OracleError::Invalid(
                    "Conv kernel larger than the padded input".into(),
                ));
            }
            Ok(((padded - eff) / stride + 1, pb))
        }
    }
}

pub(super) fn evaluate(
    node: &NodeSpec,
    inputs: &[Option<Value>],
) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let w = input(node, inputs, 1)?;
    let b = opt_input(inputs, 2);
    if x.shape.len() < 3 || w.shape.len() != x.shape.len() {
        return Err(OracleError::Invalid(format!(
            "Conv shapes X {:?}, W {:?}",
            x.shape, w.shape
        )));
    }
    let sp = x.shape.len() - 2;
    let (nb, c) = (x.shape[0], x.shape[1]);
    let m = w.shape[0];
    let group = node.int("group", 1)? as usize;
    if group == 0 || c % group != 0 || m % group != 0 || w.shape[1] * group != c {
        return Err(OracleError::Invalid(format!(
            "Conv group {group} with C={c}, W {:?}",
            w.shape
        )));
    }
    let cg = c / group;
    let mg = m / group;
    let kshape: Vec<usize> = w.shape[2..].to_vec();
    if let Some(ks) = node.ints("kernel_shape")?
        && ks.iter().map(|&v| v as usize).collect::<Vec<_>>() != kshape
    {
        return Err(OracleError::Invalid(format!(
            "Conv kernel_shape {ks:?} differs from W {:?}",
            w.shape
        )));
    }
    let get = |name: &str, d: i64, len: usize| -> Result<Vec<usize>, OracleError> {
        let v = node.ints(name)?.unwrap_or_else(|| vec![d; len]);
        if v.len() != len || v.iter().any(|&e| e < 0) {
            return Err(OracleError::Invalid(format!(
                "Conv {name} {v:?} must have {len} non-negative entries"
            )));
        }
        Ok(v.into_iter().map(|e| e as usize).collect())
    };
    let st = get("strides", 1, sp)?;
    let dl = get("dilations", 1, sp)?;
    let pads = get("pads", 0, 2 * sp)?;
    if st.contains(&0) || dl.contains(&0) {
        return Err(OracleError::Invalid(
            "Conv strides and dilations must be positive".into(),
        ));
    }
    let auto_pad = node.string("auto_pad", "NOTSET")?;
    let mut oshape = Vec::with_capacity(sp);
    let mut pbeg = Vec::with_capacity(sp);
    for d in 0..sp {
        let (o, p) = out_dim(
            &auto_pad,
            x.shape[2 + d],
            kshape[d],
            st[d],
            dl[d],
            pads[d],
            pads[sp + d],
        )?;
        oshape.push(o);
        pbeg.push(p);
    }
    let xst = strides(&x.shape);
    let wst = strides(&w.shape);
    let nsp_out: usize = oshape.iter().product();
    let nk: usize = kshape.iter().product();
    // Kernel multi-indices, unravelled once rather than per term.
    let kidx: Vec<Vec<usize>> = (0..nk).map(|kf| unravel(kf, &kshape)).collect();
    if b.is_some_and(|b| b.len() != m) {
        return Err(OracleError::Invalid(format!("Conv bias needs {m} values")));
    }
    let mut data = vec![0.0; nb * m * nsp_out];
    let mut mag = vec![0.0; nb * m * nsp_out];
    // One row per output plane Y[n, mo]; planes are independent and fill on separate threads.
    let work = cg * nk * nsp_out;
    rows(
        crate::threads(),
        &mut data,
        &mut mag,
        nsp_out,
        work,
        |first, d, g| {
            let mut oi = vec![0usize; sp];
            let mut taps: Vec<(usize, usize)> = Vec::with_capacity(nk);
            for (r, (dp, gp)) in d.chunks_mut(nsp_out).zip(g.chunks_mut(nsp_out)).enumerate() {
                let (n, mo) = ((first + r) / m, (first + r) % m);
                let grp = mo / mg;
                for (of, (y, ya)) in dp.iter_mut().zip(gp.iter_mut()).enumerate() {
                    let mut rest = of;
                    for d in (0..sp).rev() {
                        oi[d] = rest % oshape[d];
                        rest /= oshape[d];
                    }
                    // The kernel positions that land inside X for this output, in kernel order, as
                    // offsets within one channel of X and of W: the same for every channel.
                    taps.clear();
                    for ki in &kidx {
                        let mut xrel = 0;
                        let mut inside = true;
                        for d in 0..sp {
                            let pos = (oi[d] * st[d] + ki[d] * dl[d]) as i64 - pbeg[d] as i64;
                            if pos < 0 || pos >= x.shape[2 + d] as i64 {
                                inside = false;
                                break;
                            }
                            xrel += pos as usize * xst[2 + d];
                        }
                        if inside {
                            let wrel: usize = (0..sp).map(|d| ki[d] * wst[2 + d]).sum();
                            taps.push((xrel, wrel));
                        }
                    }
                    let mut s = 0.0;
                    let mut a = 0.0;
                    for ci in 0..cg {
                        let xc = n * xst[0] + (grp * cg + ci) * xst[1];
                        let wc = mo * wst[0] + ci * wst[1];
                        for &(xrel, wrel) in &taps {
                            let t = x.data[xc + xrel] * w.data[wc + wrel];
                            s += t;
                            a += t.abs();
                        }
                    }
                    if let Some(b) = b {
                        s += b.data[mo];
                        a += b.data[mo].abs();
                    }
                    *y = s;
                    *ya = a;
                }
            }
        },
    );
    let mut shape = vec![nb, m];
    shape.extend(oshape);
    Ok(vec![output(x.dtype, shape, data, mag)?])
}

#[cfg(test)]
mod tests {
    use super::super::Reference;
    use super::super::testutil::*;
    use crate::{Attr, DType, Oracle, Value};

    fn v(shape: Vec<usize>, data: Vec<f64>) -> Option<Value> {
        Some(Value::new(DType::F32, shape, data).unwrap())
    }

    #[test]
    fn conv1d_by_hand() {
        // x = [1, 2, 3, 4], w = [1, -1], pads [1, 0], bias 10
        let n = node("Conv", 11, &[("pads", Attr::Ints(vec![1, 0]))]);
        let out = Reference
            .evaluate(
                &n,
                &[
                    v(vec![1, 1, 4], vec![1.0, 2.0, 3.0, 4.0]),
                    v(vec![1, 1, 2], vec![1.0, -1.0]),
                    v(vec![1], vec![10.0]),
                ],
            )
            .unwrap();
        assert_eq!(out[0].value.shape, vec![1, 1, 4]);
        // windows: [0,1] -> -1, [1,2] -> -1, [2,3] -> -1, [3,4] -> -1
        assert_all_close(&out[0].value.data, &[9.0, 9.0, 9.0, 9.0]);
        assert_all_close(&out[0].magnitude, &[11.0, 13.0, 15.0, 17.0]);
    }

    #[test]
    fn conv2d_stride_same_upper_by_hand() {
        // 3x3 input, 2x2 ones kernel, stride 2, SAME_UPPER: out 2x2, total pad 1 at the end.
        let x: Vec<f64> = (1..=9).map(|v| v as f64).collect();
        let n = node(
            "Conv",
            11,
            &[
                ("strides", Attr::Ints(vec![2, 2])),
                ("auto_pad", Attr::String("SAME_UPPER".into())),
            ],
        );
        let out = Reference
            .evaluate(
                &n,
                &[v(vec![1, 1, 3, 3], x), v(vec![1, 1, 2, 2], vec![1.0; 4])],
            )
            .unwrap();
        assert_eq!(out[0].value.shape, vec![1, 1, 2, 2]);
        assert_all_close(
            &out[0].value.data,
            &[1.0 + 2.0 + 4.0 + 5.0, 3.0 + 6.0, 7.0 + 8.0, 9.0],
        );
    }

    #[test]
    fn conv2d_groups_dilation_random() {
        let mut rng = SplitMix64(33);
        // N=1, C=4, 5x5; M=2, group=2, W [2, 2, 2, 2], dilation 2, pads 1.
        let x = rng.vec(4 * 25);
        let w = rng.vec(2 * 2 * 4);
        let n = node(
            "Conv",
            11,
            &[
                ("group", Attr::Int(2)),
                ("dilations", Attr::Ints(vec![2, 2])),
                ("pads", Attr::Ints(vec![1, 1, 1, 1])),
            ],
        );
        let out = Reference
            .evaluate(
                &n,
                &[
                    v(vec![1, 4, 5, 5], x.clone()),
                    v(vec![2, 2, 2, 2], w.clone()),
                ],
            )
            .unwrap();
        // out = (5 + 2 - 3) / 1 + 1 = 5
        assert_eq!(out[0].value.shape, vec![1, 2, 5, 5]);
        for m in 0..2 {
            for oy in 0..5i64 {
                for ox in 0..5i64 {
                    let mut s = 0.0;
                    for c in 0..2 {
                        for ky in 0..2i64 {
                            for kx in 0..2i64 {
                                let (y, xx) = (oy - 1 + 2 * ky, ox - 1 + 2 * kx);
                                if (0..5).contains(&y) && (0..5).contains(&xx) {
                                    s += x[(m * 2 + c) * 25 + (y * 5 + xx) as usize]
                                        * w[((m * 2 + c) * 2 + ky as usize) * 2 + kx as usize];
                                }
                            }
                        }
                    }
                    assert!(close(out[0].value.data[m * 25 + (oy * 5 + ox) as usize], s));
                }
            }
        }
    }
}

/// ConvTranspose (N-D, groups, strides, dilations, pads, output_padding, output_shape, auto_pad):
/// each input element scatters X[n, c, i] · W[c, m, k] into Y[n, g·M/G + m, i·s + k·d − pad_begin].
pub(super) fn evaluate_transpose(
    node: &NodeSpec,
    inputs: &[Option<Value>],
) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let w = input(node, inputs, 1)?;
    let b = opt_input(inputs, 2);
    if x.shape.len() < 3 || w.shape.len() != x.shape.len() {
        return Err(OracleError::Invalid(format!(
            "ConvTranspose shapes X {:?}, W {:?}",
            x.shape, w.shape
        )));
    }
    let sp = x.shape.len() - 2;
    let (nb, c) = (x.shape[0], x.shape[1]);
    let group = node.int("group", 1)? as usize;
    if group == 0 || w.shape[0] != c || c % group != 0 {
        return Err(OracleError::Invalid(format!(
            "ConvTranspose group {group} with C={c}, W {:?}",
            w.shape
        )));
    }
    let mg = w.shape[1];
    let m = mg * group;
    let cg = c / group;
    let kshape: Vec<usize> = w.shape[2..].to_vec();
    let get = |name: &str, d: i64, len: usize| -> Result<Vec<usize>, OracleError> {
        let v = node.ints(name)?.unwrap_or_else(|| vec![d; len]);
        if v.len() != len || v.iter().any(|&e| e < 0) {
            return Err(OracleError::Invalid(format!(
                "ConvTranspose {name} {v:?} must have {len} non-negative entries"
            )));
        }
        Ok(v.into_iter().map(|e| e as usize).collect())
    };
    let st = get("strides", 1, sp)?;
    let dl = get("dilations", 1, sp)?;
    let pads = get("pads", 0, 2 * sp)?;
    let opad = get("output_padding", 0, sp)?;
    let auto_pad = node.string("auto_pad", "NOTSET")?;
    let out_shape_attr = node.ints("output_shape")?;
    let mut oshape = vec![0usize; sp];
    let mut pb = vec![0i64; sp];
    if x.shape[2..].contains(&0) || kshape.contains(&0) {
        return Err(OracleError::Invalid(format!(
            "ConvTranspose with an empty spatial or kernel dimension: X {:?}, W {:?}",
            x.shape, w.shape
        )));
    }
    for d in 0..sp {
        let full = (st[d] * (x.shape[2 + d] - 1) + opad[d] + (kshape[d] - 1) * dl[d] + 1) as i64;
        let target = match (&out_shape_attr, auto_pad.as_str()) {
            (Some(os), _) => {
                // output_shape may list only the spatial dims or all of them.
                let o = if os.len() == sp {
                    os[d]
                } else {
                    *os.get(2 + d).unwrap_or(&0)
                };
                Some(o)
            }
            (None, "SAME_UPPER" | "SAME_LOWER") => Some((x.shape[2 + d] * st[d]) as i64),
            _ => None,
        };
        match target {
            Some(t) => {
                // total_padding may be negative (output_shape beyond the full output: the extra
                // positions get no contribution); "total_padding[i]/2" is then floor division, as
                // in the specification's (Python) reference, so that the excess lands at the end.
                if t < 0 {
                    return Err(OracleError::Invalid(format!(
                        "ConvTranspose output_shape {t} is negative"
                    )));
                }
                let total = full - t;
                let upper = auto_pad == "SAME_UPPER";
                let half = total.div_euclid(2);
                pb[d] = if upper { half } else { total - half };
                oshape[d] = t as usize;
            }
            None => {
                let (b0, e0) = if auto_pad == "VALID" {
                    (0, 0)
                } else {
                    (pads[d] as i64, pads[sp + d] as i64)
                };
                pb[d] = b0;
                oshape[d] = (full - b0 - e0).max(0) as usize;
            }
        }
    }
    let mut shape = vec![nb, m];
    shape.extend(oshape.iter().cloned());
    let yst = strides(&shape);
    let wst = strides(&w.shape);
    let total: usize = shape.iter().product();
    let mut data = vec![0.0; total];
    let mut mag = vec![0.0; total];
    let ishape = &x.shape[2..];
    let nin: usize = ishape.iter().product();
    let nk: usize = kshape.iter().product();
    let kidx: Vec<Vec<usize>> = (0..nk).map(|kf| unravel(kf, &kshape)).collect();
    if b.is_some_and(|b| b.len() != m) {
        return Err(OracleError::Invalid(format!(
            "ConvTranspose bias needs {m} values"
        )));
    }
    for n in 0..nb {
        for ch in 0..c {
            let g = ch / cg;
            for inf in 0..nin {
                let ii = unravel(inf, ishape);
                let xv = x.data[(n * c + ch) * nin + inf];
                for ml in 0..mg {
                    let mo = g * mg + ml;
                    for ki in &kidx {
                        let mut yoff = n * yst[0] + mo * yst[1];
                        let mut inside = true;
                        for d in 0..sp {
                            let o = (ii[d] * st[d] + ki[d] * dl[d]) as i64 - pb[d];
                            if o < 0 || o >= oshape[d] as i64 {
                                inside = false;
                                break;
                            }
                            yoff += o as usize * yst[2 + d];
                        }
                        if !inside {
                            continue;
                        }
                        let mut woff = ch * wst[0] + ml * wst[1];
                        for d in 0..sp {
                            woff += ki[d] * wst[2 + d];
                        }
                        let t = xv * w.data[woff];
                        data[yoff] += t;
                        mag[yoff] += t.abs();
                    }
                }
            }
        }
    }
    if let Some(b) = b {
        let inner: usize = oshape.iter().product();
        for (f, (y, a)) in data.iter_mut().zip(mag.iter_mut()).enumerate() {
            let mo = (f / inner) % m;
            *y += b.data[mo];
            *a += b.data[mo].abs();
        }
    }
    Ok(vec![output(x.dtype, shape, data, mag)?])
}

#[cfg(test)]
mod transpose_tests {
    use super::super::Reference;
    use super::super::testutil::*;
    use crate::{Attr, DType, Oracle, Value};

    fn v(shape: Vec<usize>, data: Vec<f64>) -> Option<Value> {
        Some(Value::new(DType::F32, shape, data).unwrap())
    }

    #[test]
    fn conv_transpose_1d_by_hand() {
        // x = [1, 2], w = [1, 10, 100], stride 2: y = [1, 10, 100+2, 20, 200]
        let out = Reference
            .evaluate(
                &node("ConvTranspose", 11, &[("strides", Attr::Ints(vec![2]))]),
                &[
                    v(vec![1, 1, 2], vec![1.0, 2.0]),
                    v(vec![1, 1, 3], vec![1.0, 10.0, 100.0]),
                ],
            )
            .unwrap();
        assert_eq!(out[0].value.shape, vec![1, 1, 5]);
        assert_all_close(&out[0].value.data, &[1.0, 10.0, 102.0, 20.0, 200.0]);
        // pads [1, 1] and output_padding 1 -> full length 6, cropped to 4 starting at 1.
        let n = node(
            "ConvTranspose",
            11,
            &[
                ("strides", Attr::Ints(vec![2])),
                ("pads", Attr::Ints(vec![1, 1])),
                ("output_padding", Attr::Ints(vec![1])),
            ],
        );
        let out = Reference
            .evaluate(
                &n,
                &[
                    v(vec![1, 1, 2], vec![1.0, 2.0]),
                    v(vec![1, 1, 3], vec![1.0, 10.0, 100.0]),
                    v(vec![1], vec![0.5]),
                ],
            )
            .unwrap();
        assert_all_close(&out[0].value.data, &[10.5, 102.5, 20.5, 200.5]);
    }

    #[test]
    fn conv_transpose_output_shape_sets_pads() {
        let x = v(vec![1, 1, 2], vec![1.0, 2.0]);
        let w = v(vec![1, 1, 3], vec![1.0, 10.0, 100.0]);
        let run = |attrs: &[(&str, Attr)]| {
            let mut a = vec![("strides", Attr::Ints(vec![2]))];
            a.extend(attrs.iter().cloned());
            Reference
                .evaluate(&node("ConvTranspose", 11, &a), &[x.clone(), w.clone()])
                .unwrap()[0]
                .value
                .data
                .clone()
        };
        // Full output [1, 10, 102, 20, 200] (length 5).
        // output_shape 6: total padding -1, begin = -1 - floor(-1/2) = 0, end -1: one zero appended.
        assert_all_close(
            &run(&[("output_shape", Attr::Ints(vec![6]))]),
            &[1.0, 10.0, 102.0, 20.0, 200.0, 0.0],
        );
        // output_shape 4: total 1, begin = 1 - floor(1/2) = 1 (NOTSET puts the odd one first).
        assert_all_close(
            &run(&[("output_shape", Attr::Ints(vec![4]))]),
            &[10.0, 102.0, 20.0, 200.0],
        );
        // SAME_UPPER: output 2*2 = 4, total 1, begin floor(1/2) = 0.
        assert_all_close(
            &run(&[("auto_pad", Attr::String("SAME_UPPER".into()))]),
            &[1.0, 10.0, 102.0, 20.0],
        );
        // SAME_LOWER: begin 1.
        assert_all_close(
            &run(&[("auto_pad", Attr::String("SAME_LOWER".into()))]),
            &[10.0, 102.0, 20.0, 200.0],
        );
    }

    #[test]
    fn conv_transpose_matches_adjoint_of_conv_random() {
        // <ConvT(x), y> must equal <x, Conv(y)> for the same weights (stride 2, pads 1, no bias).
        let mut rng = SplitMix64(88);
        let x = rng.vec(2 * 3 * 3);
        let w = rng.vec(2 * 3 * 3 * 3); // [C=2, M=3, 3, 3]
        let attrs = [
            ("strides", Attr::Ints(vec![2, 2])),
            ("pads", Attr::Ints(vec![1, 1, 1, 1])),
        ];
        let ct = Reference
            .evaluate(
                &node("ConvTranspose", 11, &attrs),
                &[
                    v(vec![1, 2, 3, 3], x.clone()),
                    v(vec![2, 3, 3, 3], w.clone()),
                ],
            )
            .unwrap();
        assert_eq!(ct[0].value.shape, vec![1, 3, 5, 5]);
        let y = rng.vec(3 * 25);
        let c = Reference
            .evaluate(
                &node("Conv", 11, &attrs),
                &[v(vec![1, 3, 5, 5], y.clone()), v(vec![2, 3, 3, 3], w)],
            )
            .unwrap();
        assert_eq!(c[0].value.shape, vec![1, 2, 3, 3]);
        let lhs: f64 = ct[0].value.data.iter().zip(&y).map(|(a, b)| a * b).sum();
        let rhs: f64 = x.iter().zip(&c[0].value.data).map(|(a, b)| a * b).sum();
        assert!(close(lhs, rhs));
    }
}
