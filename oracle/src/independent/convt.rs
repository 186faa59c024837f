//! ConvTranspose through a matrix product and col2im: cols = W_g^T . X_g (compensated blocked product),
//! then every column entry is scattered (compensated accumulation) to its output position.
use super::conv::{multi_indices, ones_attr};
use super::matmul::{Mat, product};
use super::*;

pub(super) const OPS: &[&str] = &["ConvTranspose"];

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

pub(super) fn eval(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let w = input(node, inputs, 1)?;
    let b = opt_input(inputs, 2);
    if x.shape.len() < 3 || w.shape.len() != x.shape.len() {
        return invalid(format!(
            "ConvTranspose shapes X {:?} W {:?}",
            x.shape, w.shape
        ));
    }
    let sp = x.shape.len() - 2;
    let (nb, c) = (x.shape[0], x.shape[1]);
    let g = node.int("group", 1)?.max(1) as usize;
    if c % g != 0 || w.shape[0] != c {
        return invalid(format!(
            "ConvTranspose W {:?} does not match C={c}, group={g}",
            w.shape
        ));
    }
    let cg = c / g;
    let mg = w.shape[1];
    let m = mg * g;
    let kernel = w.shape[2..].to_vec();
    let strides = ones_attr(node, "strides", sp)?;
    let dil = ones_attr(node, "dilations", sp)?;
    let in_sp = x.shape[2..].to_vec();
    let opad: Vec<i64> = node.ints("output_padding")?.unwrap_or_else(|| vec![0; sp]);
    if opad.len() != sp {
        return invalid("output_padding length");
    }
    let ap = node.string("auto_pad", "NOTSET")?;
    let full: Vec<i64> = (0..sp)
        .map(|d| {
            strides[d] as i64 * (in_sp[d] as i64 - 1)
                + opad[d]
                + (kernel[d] as i64 - 1) * dil[d] as i64
                + 1
        })
        .collect();
    let mut pb = vec![0i64; sp];
    let mut out = vec![0usize; sp];
    let target: Option<Vec<i64>> = match node.ints("output_shape")? {
        Some(os) if os.len() == sp => Some(os),
        Some(os) if os.len() == sp + 2 => Some(os[2..].to_vec()),
        Some(os) => return invalid(format!("output_shape {os:?}")),
        None if ap == "SAME_UPPER" || ap == "SAME_LOWER" => {
            Some((0..sp).map(|d| (in_sp[d] * strides[d]) as i64).collect())
        }
        None => None,
    };
    match target {
        Some(t) => {
            for d in 0..sp {
                if t[d] < 0 {
                    return invalid(format!("negative output_shape {t:?}"));
                }
                // total may be negative (output_shape past the full result). The specification's
                // "total/2" rounds toward -inf (Python), so the split is taken as floor(total / 2)
                // for SAME_UPPER's begin and ceil(total / 2) otherwise.
                let total = full[d] - t[d];
                let half = total as f64 / 2.0;
                pb[d] = if ap == "SAME_UPPER" {
                    half.floor() as i64
                } else {
                    half.ceil() as i64
                };
                out[d] = t[d] as usize;
            }
        }
        None => {
            let pads = if ap == "VALID" {
                None
            } else {
                node.ints("pads")?
            };
            let pads = pads.unwrap_or_else(|| vec![0; 2 * sp]);
            if pads.len() != 2 * sp {
                return invalid(format!("pads {pads:?}"));
            }
            for d in 0..sp {
                pb[d] = pads[d];
                let o = full[d] - pads[d] - pads[d + sp];
                if o < 0 {
                    return invalid("negative ConvTranspose output size");
                }
                out[d] = o as usize;
            }
        }
    }
    let kpos = multi_indices(&kernel);
    let ipos = multi_indices(&in_sp);
    let kp = kpos.len();
    let ip = ipos.len();
    let ost = strides_vec(&out);
    let op: usize = out.iter().product();
    // Output position of (kernel position, input position), or None outside the output.
    let mut target_of = vec![None; kp * ip];
    for (kf, k) in kpos.iter().enumerate() {
        for (iff, i) in ipos.iter().enumerate() {
            let mut off = 0usize;
            let mut ok = true;
            for d in 0..sp {
                let o = (i[d] * strides[d] + k[d] * dil[d]) as i64 - pb[d];
                if o < 0 || o >= out[d] as i64 {
                    ok = false;
                    break;
                }
                off += o as usize * ost[d];
            }
            if ok {
                target_of[kf * ip + iff] = Some(off);
            }
        }
    }
    let mut data = vec![0.0; nb * m * op];
    let mut mag = vec![0.0; nb * m * op];
    for n in 0..nb {
        for gi in 0..g {
            // W_g is (Cg, Mg*Kp); its transpose has rows (mi, kf) and columns ci.
            let wt = Mat {
                data: &w.data,
                off: gi * cg * mg * kp,
                rs: 1,
                cs: mg * kp,
            };
            let xm = Mat {
                data: &x.data,
                off: (n * c + gi * cg) * ip,
                rs: ip,
                cs: 1,
            };
            let (cols, cmag) = product(wt, xm, mg * kp, cg, ip, crate::threads());
            for mi in 0..mg {
                let oc = gi * mg + mi;
                let mut acc = vec![Neumaier::default(); op];
                let mut am = vec![0.0; op];
                for kf in 0..kp {
                    for iff in 0..ip {
                        if let Some(t) = target_of[kf * ip + iff] {
                            acc[t].add(cols[(mi * kp + kf) * ip + iff]);
                            am[t] += cmag[(mi * kp + kf) * ip + iff];
                        }
                    }
                }
                let bias = b.map(|b| b.data[oc]).unwrap_or(0.0);
                let base = (n * m + oc) * op;
                for t in 0..op {
                    data[base + t] = acc[t].value() + bias;
                    mag[base + t] = am[t] + bias.abs();
                }
            }
        }
    }
    let mut shape = vec![nb, m];
    shape.extend(&out);
    Ok(vec![make_output(x.dtype, shape, data, mag)?])
}

fn strides_vec(shape: &[usize]) -> Vec<usize> {
    strides(shape)
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;
    use crate::Attr;

    /// Direct scatter form of a 2-D transposed convolution, group 1, from the definition.
    fn direct(
        x: &[f64],
        xs: [usize; 4],
        w: &[f64],
        ws: [usize; 4],
        s: usize,
        pads: [usize; 4],
        opad: usize,
    ) -> (Vec<f64>, Vec<usize>) {
        let [n, c, h, wd] = xs;
        let [_, m, kh, kw] = ws;
        let fh = s * (h - 1) + opad + kh;
        let fw = s * (wd - 1) + opad + kw;
        let mut full = vec![0.0; n * m * fh * fw];
        for ni in 0..n {
            for ci in 0..c {
                for mi in 0..m {
                    for y in 0..h {
                        for xx in 0..wd {
                            for ky in 0..kh {
                                for kx in 0..kw {
                                    full[((ni * m + mi) * fh + y * s + ky) * fw + xx * s + kx] += x
                                        [((ni * c + ci) * h + y) * wd + xx]
                                        * w[((ci * m + mi) * kh + ky) * kw + kx];
                                }
                            }
                        }
                    }
                }
            }
        }
        let oh = fh - pads[0] - pads[2];
        let ow = fw - pads[1] - pads[3];
        let mut out = Vec::new();
        for p in 0..n * m {
            for y in 0..oh {
                for xx in 0..ow {
                    out.push(full[(p * fh + y + pads[0]) * fw + xx + pads[1]]);
                }
            }
        }
        (out, vec![n, m, oh, ow])
    }

    #[test]
    fn conv_transpose_random() {
        let mut r = SplitMix64(55);
        let x = r.values(2 * 3 * 3 * 4);
        let w = r.values(3 * 2 * 3 * 3);
        let nd = node(
            "ConvTranspose",
            11,
            vec![
                ("strides", Attr::Ints(vec![2, 2])),
                ("pads", Attr::Ints(vec![1, 0, 0, 1])),
                ("output_padding", Attr::Ints(vec![1, 1])),
            ],
        );
        let out = eval(
            &nd,
            &[
                f32v(&[2, 3, 3, 4], x.clone()),
                f32v(&[3, 2, 3, 3], w.clone()),
            ],
        )
        .unwrap();
        let (want, shape) = direct(&x, [2, 3, 3, 4], &w, [3, 2, 3, 3], 2, [1, 0, 0, 1], 1);
        assert_eq!(out[0].value.shape, shape);
        assert!(close(&out[0].value.data, &want, 1e-12));
        // output_shape [6, 8] with stride 2: full is 2*2+0+3 = 7 rows -> total pad 1 -> begin 1 (NOTSET), end 0.
        let nd2 = node(
            "ConvTranspose",
            11,
            vec![
                ("strides", Attr::Ints(vec![2, 2])),
                ("output_shape", Attr::Ints(vec![6, 8])),
            ],
        );
        let o2 = eval(
            &nd2,
            &[
                f32v(&[2, 3, 3, 4], x.clone()),
                f32v(&[3, 2, 3, 3], w.clone()),
            ],
        )
        .unwrap();
        let (want2, shape2) = direct(&x, [2, 3, 3, 4], &w, [3, 2, 3, 3], 2, [1, 1, 0, 0], 0);
        assert_eq!(o2[0].value.shape, shape2);
        assert!(close(&o2[0].value.data, &want2, 1e-12));
    }

    #[test]
    fn conv_transpose_hand_checked_1d_bias() {
        let nd = node("ConvTranspose", 11, vec![]);
        let out = eval(
            &nd,
            &[
                f32v(&[1, 1, 2], vec![1.0, 2.0]),
                f32v(&[1, 1, 2], vec![1.0, -1.0]),
                f32v(&[1], vec![0.5]),
            ],
        )
        .unwrap();
        assert_eq!(out[0].value.data, vec![1.5, 1.5, -1.5]);
        assert_eq!(out[0].magnitude, vec![1.5, 3.5, 2.5]);
    }
}
