//! Conv through im2col and the compensated blocked matrix product.
//!
//! Per spatial dim a coordinate table maps (kernel offset, output position) to an input coordinate or
//! to "padding"; the column matrix is filled from those tables and multiplied by the weights.
use super::matmul::{Mat, product};
use super::*;

pub(super) const OPS: &[&str] = &["Conv"];

pub(super) fn check(node: &NodeSpec) -> Result<(), String> {
    let ap = node
        .string("auto_pad", "NOTSET")
        .map_err(|e| e.to_string())?;
    if !matches!(
        ap.as_str(),
        "NOTSET" | "SAME_UPPER" | "SAME_LOWER" | "VALID"
    ) {
        return Err(format!("auto_pad '{ap}' is not covered"));
    }
    Ok(())
}

/// Per spatial dim: (pad_begin, output size). `ceil` selects ceil_mode output sizes (pooling).
pub(crate) struct Geometry {
    pub pad_begin: Vec<i64>,
    pub pad_end: Vec<i64>,
    pub out: Vec<usize>,
}

pub(crate) fn geometry(
    node: &NodeSpec,
    input: &[usize],
    kernel: &[usize],
    strides: &[usize],
    dil: &[usize],
    ceil: bool,
) -> Result<Geometry, OracleError> {
    let k = input.len();
    let ap = node.string("auto_pad", "NOTSET")?;
    let mut pad_begin = vec![0i64; k];
    let mut pad_end = vec![0i64; k];
    let mut out = vec![0usize; k];
    for d in 0..k {
        let span = (kernel[d] as i64 - 1) * dil[d] as i64 + 1;
        let n = input[d] as i64;
        let s = strides[d] as i64;
        match ap.as_str() {
            "SAME_UPPER" | "SAME_LOWER" => {
                let o = (n + s - 1) / s;
                let total = ((o - 1) * s + span - n).max(0);
                let small = total / 2;
                if ap == "SAME_UPPER" {
                    pad_begin[d] = small;
                    pad_end[d] = total - small;
                } else {
                    pad_begin[d] = total - small;
                    pad_end[d] = small;
                }
                out[d] = o.max(0) as usize;
            }
            _ => {
                if ap == "NOTSET" {
                    if let Some(p) = node.ints("pads")? {
                        if p.len() != 2 * k {
                            return invalid(format!("pads {p:?} must have {} entries", 2 * k));
                        }
                        pad_begin[d] = p[d];
                        pad_end[d] = p[d + k];
                    }
                }
                let room = n + pad_begin[d] + pad_end[d] - span;
                if room < 0 {
                    return invalid(format!(
                        "kernel larger than padded input on spatial dim {d}"
                    ));
                }
                let mut o = if ceil {
                    (room + s - 1) / s + 1
                } else {
                    room / s + 1
                };
                // With ceil_mode a window that would start inside the end padding is dropped.
                if ceil && (o - 1) * s >= n + pad_begin[d] {
                    o -= 1;
                }
                out[d] = o as usize;
            }
        }
    }
    Ok(Geometry {
        pad_begin,
        pad_end,
        out,
    })
}

/// Attribute list of `k` positive values, defaulting to 1s.
pub(crate) fn ones_attr(node: &NodeSpec, name: &str, k: usize) -> Result<Vec<usize>, OracleError> {
    match node.ints(name)? {
        None => Ok(vec![1; k]),
        Some(v) if v.len() == k && v.iter().all(|&x| x >= 1) => {
            Ok(v.iter().map(|&x| x as usize).collect())
        }
        Some(v) => invalid(format!("{name} {v:?} must have {k} positive entries")),
    }
}

/// Coordinate table of one spatial dim: table[kk * out + o] = input coordinate, or None in padding.
pub(crate) fn coord_table(
    n: usize,
    kernel: usize,
    out: usize,
    stride: usize,
    dil: usize,
    pad_begin: i64,
) -> Vec<Option<usize>> {
    let mut t = Vec::with_capacity(kernel * out);
    for kk in 0..kernel {
        for o in 0..out {
            let i = (o * stride + kk * dil) as i64 - pad_begin;
            t.push(if i >= 0 && i < n as i64 {
                Some(i as usize)
            } else {
                None
            });
        }
    }
    t
}

/// All multi-indices of a shape, row-major.
pub(crate) fn multi_indices(shape: &[usize]) -> Vec<Vec<usize>> {
    let mut all = vec![Vec::new()];
    for &n in shape {
        let mut next = Vec::with_capacity(all.len() * n);
        for p in &all {
            for i in 0..n {
                let mut q = p.clone();
                q.push(i);
                next.push(q);
            }
        }
        all = next;
    }
    all
}

pub(super) fn eval(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let w = input(node, inputs, 1)?;
    let b = opt_input(inputs, 2);
    if x.shape.len() < 3 || w.shape.len() != x.shape.len() {
        return invalid(format!("Conv shapes X {:?} W {:?}", x.shape, w.shape));
    }
    let sp = x.shape.len() - 2;
    let (nb, c) = (x.shape[0], x.shape[1]);
    let m = w.shape[0];
    let group = node.int("group", 1)?;
    if group < 1 || c % group as usize != 0 || m % group as usize != 0 {
        return invalid(format!("group {group} does not divide C={c} and M={m}"));
    }
    let g = group as usize;
    let cg = c / g;
    let mg = m / g;
    if w.shape[1] != cg {
        return invalid(format!("W channel dim {} != C/group {cg}", w.shape[1]));
    }
    let kernel: Vec<usize> = w.shape[2..].to_vec();
    if let Some(ks) = node.ints("kernel_shape")? {
        if ks.iter().map(|&v| v as usize).collect::<Vec<_>>() != kernel {
            return invalid(format!("kernel_shape {ks:?} differs from W {:?}", w.shape));
        }
    }
    let strides = ones_attr(node, "strides", sp)?;
    let dil = ones_attr(node, "dilations", sp)?;
    let in_sp = &x.shape[2..];
    let geo = geometry(node, in_sp, &kernel, &strides, &dil, false)?;
    let tables: Vec<Vec<Option<usize>>> = (0..sp)
        .map(|d| {
            coord_table(
                in_sp[d],
                kernel[d],
                geo.out[d],
                strides[d],
                dil[d],
                geo.pad_begin[d],
            )
        })
        .collect();
    let kpos = multi_indices(&kernel);
    let opos = multi_indices(&geo.out);
    let kp = kpos.len();
    let op = opos.len();
    let in_st = strides_of(in_sp);
    let in_plane: usize = in_sp.iter().product();
    let rows = c * kp;
    let mut data = vec![0.0; nb * m * op];
    let mut mag = vec![0.0; nb * m * op];
    for n in 0..nb {
        // im2col: cols[(ci * kp + kf) * op + of].
        let mut cols = vec![0.0; rows * op];
        for ci in 0..c {
            let base = (n * c + ci) * in_plane;
            for (kf, kidx) in kpos.iter().enumerate() {
                for (of, oidx) in opos.iter().enumerate() {
                    let mut off = base;
                    let mut inside = true;
                    for d in 0..sp {
                        match tables[d][kidx[d] * geo.out[d] + oidx[d]] {
                            Some(i) => off += i * in_st[d],
                            None => {
                                inside = false;
                                break;
                            }
                        }
                    }
                    if inside {
                        cols[(ci * kp + kf) * op + of] = x.data[off];
                    }
                }
            }
        }
        for gi in 0..g {
            let wm = Mat {
                data: &w.data,
                off: gi * mg * cg * kp,
                rs: cg * kp,
                cs: 1,
            };
            let cm = Mat {
                data: &cols,
                off: gi * cg * kp * op,
                rs: op,
                cs: 1,
            };
            let (d, gm) = product(wm, cm, mg, cg * kp, op, crate::threads());
            for mi in 0..mg {
                let oc = gi * mg + mi;
                let bias = b.map(|b| b.data[oc]).unwrap_or(0.0);
                for of in 0..op {
                    let dst = (n * m + oc) * op + of;
                    data[dst] = d[mi * op + of] + bias;
                    mag[dst] = gm[mi * op + of] + bias.abs();
                }
            }
        }
    }
    let mut shape = vec![nb, m];
    shape.extend(&geo.out);
    Ok(vec![make_output(x.dtype, shape, data, mag)?])
}

fn strides_of(shape: &[usize]) -> Vec<usize> {
    strides(shape)
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;
    use crate::Attr;

    /// Direct 2-D convolution straight from the definition.
    #[allow(clippy::too_many_arguments)]
    fn direct2d(
        x: &[f64],
        xs: [usize; 4],
        w: &[f64],
        ws: [usize; 4],
        b: &[f64],
        group: usize,
        stride: [usize; 2],
        dil: [usize; 2],
        pads: [i64; 4],
    ) -> (Vec<f64>, [usize; 4]) {
        let [n, c, h, wd] = xs;
        let [m, cg, kh, kw] = ws;
        let oh = ((h as i64 + pads[0] + pads[2] - ((kh as i64 - 1) * dil[0] as i64 + 1))
            / stride[0] as i64
            + 1) as usize;
        let ow = ((wd as i64 + pads[1] + pads[3] - ((kw as i64 - 1) * dil[1] as i64 + 1))
            / stride[1] as i64
            + 1) as usize;
        let mg = m / group;
        let mut y = vec![0.0; n * m * oh * ow];
        for ni in 0..n {
            for mi in 0..m {
                let gi = mi / mg;
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut s = b[mi];
                        for ci in 0..cg {
                            for ky in 0..kh {
                                for kx in 0..kw {
                                    let iy = (oy * stride[0] + ky * dil[0]) as i64 - pads[0];
                                    let ix = (ox * stride[1] + kx * dil[1]) as i64 - pads[1];
                                    if iy < 0 || ix < 0 || iy >= h as i64 || ix >= wd as i64 {
                                        continue;
                                    }
                                    let xc = gi * cg + ci;
                                    s += x[((ni * c + xc) * h + iy as usize) * wd + ix as usize]
                                        * w[((mi * cg + ci) * kh + ky) * kw + kx];
                                }
                            }
                        }
                        y[((ni * m + mi) * oh + oy) * ow + ox] = s;
                    }
                }
            }
        }
        (y, [n, m, oh, ow])
    }

    #[test]
    fn conv_hand_checked_1d() {
        let nd = node("Conv", 11, vec![("pads", Attr::Ints(vec![1, 1]))]);
        let out = eval(
            &nd,
            &[
                f32v(&[1, 1, 3], vec![1.0, 2.0, 3.0]),
                f32v(&[1, 1, 2], vec![1.0, -1.0]),
                None,
            ],
        )
        .unwrap();
        assert_eq!(out[0].value.shape, vec![1, 1, 4]);
        assert_eq!(out[0].value.data, vec![-1.0, -1.0, -1.0, 3.0]);
        assert_eq!(out[0].magnitude, vec![1.0, 3.0, 5.0, 3.0]);
    }

    #[test]
    fn conv2d_random_groups_strides_dilations_pads() {
        let mut r = SplitMix64(77);
        for &(group, c, m) in &[(1usize, 3usize, 4usize), (2, 4, 6), (4, 4, 4)] {
            let xs = [2, c, 7, 6];
            let ws = [m, c / group, 3, 2];
            let x = r.values(xs.iter().product());
            let w = r.values(ws.iter().product());
            let b = r.values(m);
            let nd = node(
                "Conv",
                11,
                vec![
                    ("group", Attr::Int(group as i64)),
                    ("strides", Attr::Ints(vec![2, 1])),
                    ("dilations", Attr::Ints(vec![1, 2])),
                    ("pads", Attr::Ints(vec![1, 0, 2, 1])),
                ],
            );
            let out = eval(
                &nd,
                &[
                    f32v(&xs, x.clone()),
                    f32v(&ws, w.clone()),
                    f32v(&[m], b.clone()),
                ],
            )
            .unwrap();
            let (want, shape) = direct2d(&x, xs, &w, ws, &b, group, [2, 1], [1, 2], [1, 0, 2, 1]);
            assert_eq!(out[0].value.shape, shape.to_vec());
            assert!(close(&out[0].value.data, &want, 1e-12));
        }
    }

    #[test]
    fn conv_auto_pad_same() {
        let mut r = SplitMix64(8);
        let x = r.values(25);
        let w = r.values(9);
        let up = eval(
            &node(
                "Conv",
                11,
                vec![
                    ("auto_pad", Attr::String("SAME_UPPER".into())),
                    ("strides", Attr::Ints(vec![2, 2])),
                ],
            ),
            &[
                f32v(&[1, 1, 5, 5], x.clone()),
                f32v(&[1, 1, 3, 3], w.clone()),
            ],
        )
        .unwrap();
        assert_eq!(up[0].value.shape, vec![1, 1, 3, 3]);
        // out 3, total pad = 2*2 + 3 - 5 = 2 -> 1 begin, 1 end.
        let (want, _) = direct2d(
            &x,
            [1, 1, 5, 5],
            &w,
            [1, 1, 3, 3],
            &[0.0],
            1,
            [2, 2],
            [1, 1],
            [1, 1, 1, 1],
        );
        assert!(close(&up[0].value.data, &want, 1e-12));
        let x4 = r.values(16);
        let lo = eval(
            &node(
                "Conv",
                11,
                vec![("auto_pad", Attr::String("SAME_LOWER".into()))],
            ),
            &[
                f32v(&[1, 1, 4, 4], x4.clone()),
                f32v(&[1, 1, 3, 3], w.clone()),
            ],
        )
        .unwrap();
        let (want, _) = direct2d(
            &x4,
            [1, 1, 4, 4],
            &w,
            [1, 1, 3, 3],
            &[0.0],
            1,
            [1, 1],
            [1, 1],
            [1, 1, 1, 1],
        );
        assert!(close(&lo[0].value.data, &want, 1e-12));
        let x6 = r.values(36);
        let w2 = r.values(4);
        let lo2 = eval(
            &node(
                "Conv",
                11,
                vec![("auto_pad", Attr::String("SAME_LOWER".into()))],
            ),
            &[
                f32v(&[1, 1, 6, 6], x6.clone()),
                f32v(&[1, 1, 2, 2], w2.clone()),
            ],
        )
        .unwrap();
        let (want, _) = direct2d(
            &x6,
            [1, 1, 6, 6],
            &w2,
            [1, 1, 2, 2],
            &[0.0],
            1,
            [1, 1],
            [1, 1],
            [1, 1, 0, 0],
        );
        assert!(close(&lo2[0].value.data, &want, 1e-12));
    }

    #[test]
    fn conv3d_matches_sum_of_1x1() {
        // A 1x1x1 kernel in 3-D is a per-voxel channel mix.
        let mut r = SplitMix64(2);
        let x = r.values(2 * 2 * 3 * 2);
        let w = r.values(3 * 2);
        let out = eval(
            &node("Conv", 11, vec![]),
            &[
                f32v(&[1, 2, 2, 3, 2], x.clone()),
                f32v(&[3, 2, 1, 1, 1], w.clone()),
                None,
            ],
        )
        .unwrap();
        assert_eq!(out[0].value.shape, vec![1, 3, 2, 3, 2]);
        for mi in 0..3 {
            for v in 0..12 {
                let want = w[mi * 2] * x[v] + w[mi * 2 + 1] * x[12 + v];
                assert!((out[0].value.data[mi * 12 + v] - want).abs() < 1e-14);
            }
        }
    }
}
