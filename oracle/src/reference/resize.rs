//! Resize (opset >= 11): nearest (all nearest_modes), linear and cubic (with antialias), every
//! coordinate_transformation_mode, `axes` and `keep_aspect_ratio_policy`; per output element, the
//! tensor product of per-dimension taps with edge-clamped neighbours, as the specification describes.
use super::{input, norm_axis, opt_input, output, strides, unravel};
use crate::{NodeSpec, OracleError, Output, Value};

pub(super) fn supports(node: &NodeSpec) -> Result<(), String> {
    let e = |x: OracleError| x.to_string();
    if node.opset < 11 {
        return Err("Resize/Upsample before opset 11 is not covered".into());
    }
    if node.num_outputs > 1 {
        return Err("Resize has one output".into());
    }
    let kp = node
        .string("keep_aspect_ratio_policy", "stretch")
        .map_err(e)?;
    if !matches!(kp.as_str(), "stretch" | "not_larger" | "not_smaller") {
        return Err(format!(
            "Resize keep_aspect_ratio_policy '{kp}' is not covered"
        ));
    }
    let mode = node.string("mode", "nearest").map_err(e)?;
    if !matches!(mode.as_str(), "nearest" | "linear" | "cubic") {
        return Err(format!("Resize mode '{mode}' is not covered"));
    }
    let ct = node
        .string("coordinate_transformation_mode", "half_pixel")
        .map_err(e)?;
    if !matches!(
        ct.as_str(),
        "half_pixel"
            | "half_pixel_symmetric"
            | "pytorch_half_pixel"
            | "align_corners"
            | "asymmetric"
            | "tf_crop_and_resize"
    ) {
        return Err(format!(
            "Resize coordinate_transformation_mode '{ct}' is not covered"
        ));
    }
    let nm = node
        .string("nearest_mode", "round_prefer_floor")
        .map_err(e)?;
    if !matches!(
        nm.as_str(),
        "round_prefer_floor" | "round_prefer_ceil" | "floor" | "ceil"
    ) {
        return Err(format!("Resize nearest_mode '{nm}' is not covered"));
    }
    Ok(())
}

/// Keys' cubic convolution kernel with coefficient `a` at distance `x`.
fn cubic_w(x: f64, a: f64) -> f64 {
    let x = x.abs();
    if x <= 1.0 {
        ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    } else {
        0.0
    }
}

fn cubic_coeffs(t: f64, a: f64) -> [f64; 4] {
    [
        cubic_w(t + 1.0, a),
        cubic_w(t, a),
        cubic_w(1.0 - t, a),
        cubic_w(2.0 - t, a),
    ]
}

/// The size of the terms an interpolation weight is computed from, Σ|terms| of the kernel polynomial
/// at distance `u`, for the error allowance (`Output::magnitude`): a weight can be far smaller than
/// its terms (a cubic weight of 1e-7 from terms near 1, at a distance just short of 1 or 2), and its
/// rounding error follows the terms, not the weight. (The source coordinate is formed by the
/// specification's formula in f64 here and in the runtime alike; its rounding is not modelled.)
fn weight_magnitude(linear: bool, u: f64, a: f64) -> f64 {
    let u = u.abs();
    if linear {
        1.0 + u
    } else if u <= 1.0 {
        (a + 2.0).abs() * u * u * u + (a + 3.0).abs() * u * u + 1.0
    } else {
        a.abs() * (u * u * u + 5.0 * u * u + 8.0 * u + 4.0)
    }
}

/// Per dimension: output shape, scale, and `length_resized` of the coordinate formulas.
struct Geometry {
    oshape: Vec<usize>,
    scales: Vec<f64>,
    lresized: Vec<f64>,
    /// (roi_start, roi_end) per dimension; (0, 1) where the roi does not reach.
    roi: Vec<(f64, f64)>,
}

/// Output geometry. `length_resized` is the output width before it is made an integer: input *
/// scale when scales are given (or a keep_aspect_ratio_policy chose the scale), the sizes
/// themselves otherwise. ONNX's reference evaluator and expected data use it unrounded, e.g.
/// align_corners downsampling 4 -> floor(4 * 0.6) = 2 maps output 1 to 1 * 3 / (2.4 - 1).
fn geometry(node: &NodeSpec, x: &Value, inputs: &[Option<Value>]) -> Result<Geometry, OracleError> {
    let rank = x.shape.len();
    let axes: Vec<usize> = match node.ints("axes")? {
        None => (0..rank).collect(),
        Some(a) => {
            let mut v = Vec::with_capacity(a.len());
            for &ax in &a {
                let d = norm_axis(ax, rank, "Resize")?;
                if v.contains(&d) {
                    return Err(OracleError::Invalid(format!("Resize axes {a:?} repeat")));
                }
                v.push(d);
            }
            v
        }
    };
    let k = axes.len();
    let roi_in = opt_input(inputs, 1).filter(|v| !v.is_empty());
    let scales_in = opt_input(inputs, 2).filter(|v| !v.is_empty());
    let sizes_in = opt_input(inputs, 3).filter(|v| !v.is_empty());
    let inn: Vec<f64> = x.shape.iter().map(|&d| d as f64).collect();
    let mut g = Geometry {
        oshape: x.shape.clone(),
        scales: vec![1.0; rank],
        lresized: inn.clone(),
        roi: vec![(0.0, 1.0); rank],
    };
    if let Some(r) = roi_in {
        if r.len() != 2 * k {
            return Err(OracleError::Invalid(format!(
                "Resize roi has {} values for {k} axes",
                r.len()
            )));
        }
        for (i, &d) in axes.iter().enumerate() {
            g.roi[d] = (r.data[i], r.data[k + i]);
        }
    }
    match (sizes_in, scales_in) {
        (Some(s), None) => {
            if s.len() != k || s.data.iter().any(|&v| v < 0.0) {
                return Err(OracleError::Invalid(format!(
                    "Resize sizes {:?} for {k} axes",
                    s.data
                )));
            }
            let policy = node.string("keep_aspect_ratio_policy", "stretch")?;
            if policy == "stretch" {
                for (i, &d) in axes.iter().enumerate() {
                    g.oshape[d] = s.data[i] as usize;
                    g.scales[d] = s.data[i] / inn[d];
                    g.lresized[d] = s.data[i];
                }
            } else {
                // scale = Min (not_larger) or Max (not_smaller) of sizes[i] / in_size[d];
                // out_size[d] = round_int(scale * in_size[d]), halves rounded up.
                let ratios = axes.iter().enumerate().map(|(i, &d)| s.data[i] / inn[d]);
                let sc = if policy == "not_larger" {
                    ratios.fold(f64::INFINITY, f64::min)
                } else {
                    ratios.fold(f64::NEG_INFINITY, f64::max)
                };
                for &d in &axes {
                    g.scales[d] = sc;
                    g.lresized[d] = sc * inn[d];
                    g.oshape[d] = (sc * inn[d] + 0.5).floor().max(0.0) as usize;
                }
            }
        }
        (None, Some(s)) => {
            if s.len() != k || s.data.iter().any(|&v| v.is_nan() || v <= 0.0) {
                return Err(OracleError::Invalid(format!(
                    "Resize scales {:?} for {k} axes",
                    s.data
                )));
            }
            // The specification's sizing formula also multiplies by the roi extent (floor(in *
            // (roi_end - roi_start) * scale)), but its reference evaluator and onnxruntime size the
            // output as floor(in * scale) in every mode; no corpus case tells them apart, and this
            // follows the evaluators.
            for (i, &d) in axes.iter().enumerate() {
                g.scales[d] = s.data[i];
                g.lresized[d] = inn[d] * s.data[i];
                g.oshape[d] = g.lresized[d].floor() as usize;
            }
        }
        _ => {
            return Err(OracleError::Invalid(
                "Resize needs exactly one of scales and sizes".into(),
            ));
        }
    }
    Ok(g)
}

pub(super) fn evaluate(
    node: &NodeSpec,
    inputs: &[Option<Value>],
) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let rank = x.shape.len();
    let mode = node.string("mode", "nearest")?;
    let ct = node.string("coordinate_transformation_mode", "half_pixel")?;
    let nm = node.string("nearest_mode", "round_prefer_floor")?;
    let a = node.float("cubic_coeff_a", -0.75)?;
    let exclude_outside = node.int("exclude_outside", 0)? != 0;
    let antialias = node.int("antialias", 0)? != 0;
    let extrap = node.float("extrapolation_value", 0.0)?;
    let g = geometry(node, x, inputs)?;
    let oshape = g.oshape.clone();
    if x.is_empty() && oshape.iter().product::<usize>() > 0 {
        return Err(OracleError::Invalid("Resize of an empty tensor".into()));
    }
    let ist = strides(&x.shape);
    let n: usize = oshape.iter().product();
    let mut data = Vec::with_capacity(n);
    let mut mag = Vec::with_capacity(n);
    for f in 0..n {
        let oi = unravel(f, &oshape);
        // Per dimension: list of (input index, weight, size of the weight's error terms: 0 for the
        // exact weights of nearest, `weight_magnitude` for computed ones).
        let mut taps: Vec<Vec<(usize, f64, f64)>> = Vec::with_capacity(rank);
        let mut outside = false;
        for d in 0..rank {
            let (xi, inn, on, sc) = (
                oi[d] as f64,
                x.shape[d] as f64,
                oshape[d] as f64,
                g.scales[d],
            );
            let lr = g.lresized[d];
            let xo = match ct.as_str() {
                "half_pixel" => (xi + 0.5) / sc - 0.5,
                "half_pixel_symmetric" => {
                    // adjustment = output_width_int / output_width
                    let adj = on / lr;
                    let center = inn / 2.0;
                    center * (1.0 - adj) + (xi + 0.5) / sc - 0.5
                }
                "pytorch_half_pixel" => {
                    if on > 1.0 {
                        (xi + 0.5) / sc - 0.5
                    } else {
                        0.0
                    }
                }
                "align_corners" => {
                    if lr == 1.0 {
                        0.0
                    } else {
                        xi * (inn - 1.0) / (lr - 1.0)
                    }
                }
                "asymmetric" => xi / sc,
                _ => {
                    let (s, e) = g.roi[d];
                    let v = if lr > 1.0 {
                        s * (inn - 1.0) + xi * (e - s) * (inn - 1.0) / (lr - 1.0)
                    } else {
                        0.5 * (s + e) * (inn - 1.0)
                    };
                    if v < 0.0 || v > inn - 1.0 {
                        outside = true;
                    }
                    v
                }
            };
            let last = x.shape[d] as i64 - 1;
            let clampi = |i: i64| i.clamp(0, last) as usize;
            let t = match mode.as_str() {
                "nearest" => {
                    let r = match nm.as_str() {
                        "round_prefer_floor" => {
                            if xo - xo.floor() == 0.5 {
                                xo.floor()
                            } else {
                                xo.round()
                            }
                        }
                        "round_prefer_ceil" => {
                            if xo - xo.floor() == 0.5 {
                                xo.ceil()
                            } else {
                                xo.round()
                            }
                        }
                        "floor" => xo.floor(),
                        _ => xo.ceil(),
                    };
                    vec![(clampi(r as i64), 1.0, 0.0)]
                }
                m if antialias && sc < 1.0 => {
                    // "Stretching the resampling filter by a factor max(1, 1 / scale)": every input
                    // index within the stretched support, weighted by the kernel at scale * distance,
                    // the weights normalised to sum to one.
                    let support = if m == "linear" { 1.0 } else { 2.0 } / sc;
                    let kernel = |u: f64| {
                        if m == "linear" {
                            (1.0 - u.abs()).max(0.0)
                        } else {
                            cubic_w(u, a)
                        }
                    };
                    let mut v: Vec<(usize, f64, f64)> = Vec::new();
                    let mut wsum = 0.0;
                    let (lo, hi) = ((xo - support).floor() as i64, (xo + support).ceil() as i64);
                    for i in lo..=hi {
                        let u = sc * (i as f64 - xo);
                        let w = kernel(u);
                        if w == 0.0 || (exclude_outside && (i < 0 || i > last)) {
                            continue;
                        }
                        wsum += w;
                        v.push((clampi(i), w, weight_magnitude(m == "linear", u, a)));
                    }
                    if wsum != 0.0 {
                        for p in &mut v {
                            p.1 /= wsum;
                            p.2 /= wsum.abs();
                        }
                    }
                    v
                }
                "linear" => {
                    let i0 = xo.floor();
                    let w = xo - i0;
                    let i0 = i0 as i64;
                    vec![
                        (clampi(i0), 1.0 - w, weight_magnitude(true, w, a)),
                        (clampi(i0 + 1), w, weight_magnitude(true, 1.0 - w, a)),
                    ]
                }
                _ => {
                    let i0 = xo.floor();
                    let t = xo - i0;
                    let c = cubic_coeffs(t, a);
                    let dist = [t + 1.0, t, 1.0 - t, 2.0 - t];
                    let i0 = i0 as i64;
                    let mut v: Vec<(usize, f64, f64)> = Vec::with_capacity(4);
                    let mut wsum = 0.0;
                    for (k, &ck) in c.iter().enumerate() {
                        let i = i0 - 1 + k as i64;
                        let (w, wm) = if exclude_outside && (i < 0 || i > last) {
                            (0.0, 0.0)
                        } else {
                            (ck, weight_magnitude(false, dist[k], a))
                        };
                        wsum += w;
                        v.push((clampi(i), w, wm));
                    }
                    if exclude_outside && wsum != 0.0 {
                        for p in &mut v {
                            p.1 /= wsum;
                            p.2 /= wsum.abs();
                        }
                    }
                    v
                }
            };
            taps.push(t);
        }
        if outside {
            data.push(extrap);
            mag.push(extrap.abs());
            continue;
        }
        // Tensor product of the per-dimension taps.
        let counts: Vec<usize> = taps.iter().map(|t| t.len()).collect();
        let total: usize = counts.iter().product();
        let (mut s, mut m) = (0.0, 0.0);
        for tf in 0..total {
            let ti = unravel(tf, &counts);
            let mut w = 1.0;
            let mut off = 0;
            for d in 0..rank {
                let (i, wd, _) = taps[d][ti[d]];
                w *= wd;
                off += i * ist[d];
            }
            // The product's magnitude: |prod w_d|, plus to first order each weight's error terms
            // times the other weights (sum_d W_d prod_{e != d} |w_e|).
            let mut wm = w.abs();
            for d in 0..rank {
                let mut others = taps[d][ti[d]].2;
                for e in (0..rank).filter(|&e| e != d) {
                    others *= taps[e][ti[e]].1.abs();
                }
                wm += others;
            }
            s += w * x.data[off];
            m += wm * x.data[off].abs();
        }
        data.push(s);
        mag.push(m);
    }
    Ok(vec![output(x.dtype, oshape, data, mag)?])
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
    fn resize_nearest_and_linear_by_hand() {
        let x = v(vec![1, 2], vec![1.0, 3.0]);
        let sc = v(vec![2], vec![1.0, 2.0]);
        // asymmetric nearest (floor): x_orig = i / 2 -> [0, 0, 1, 1]
        let n = node(
            "Resize",
            13,
            &[
                (
                    "coordinate_transformation_mode",
                    Attr::String("asymmetric".into()),
                ),
                ("nearest_mode", Attr::String("floor".into())),
            ],
        );
        let out = Reference
            .evaluate(&n, &[x.clone(), None, sc.clone()])
            .unwrap();
        assert_eq!(out[0].value.data, vec![1.0, 1.0, 3.0, 3.0]);
        // half_pixel linear: x_orig = (i + 0.5) / 2 - 0.5 = -0.25, 0.25, 0.75, 1.25 -> clamp edges
        let n = node("Resize", 13, &[("mode", Attr::String("linear".into()))]);
        let out = Reference.evaluate(&n, &[x.clone(), None, sc]).unwrap();
        assert_all_close(&out[0].value.data, &[1.0, 1.5, 2.5, 3.0]);
        // align_corners linear via sizes: 3 outputs -> x_orig 0, 0.5, 1
        let n = node(
            "Resize",
            13,
            &[
                ("mode", Attr::String("linear".into())),
                (
                    "coordinate_transformation_mode",
                    Attr::String("align_corners".into()),
                ),
            ],
        );
        let sizes = Some(Value::new(DType::I64, vec![2], vec![1.0, 3.0]).unwrap());
        let out = Reference.evaluate(&n, &[x, None, None, sizes]).unwrap();
        assert_all_close(&out[0].value.data, &[1.0, 2.0, 3.0]);
    }

    #[test]
    fn resize_cubic_and_crop_against_spec_values() {
        // Expected values from the ONNX specification's reference evaluator (f32 outputs, so 1e-6).
        let near = |g: &[f64], w: &[f64]| {
            for (a, b) in g.iter().zip(w) {
                assert!((a - b).abs() < 1e-6 * (1.0 + b.abs()), "got {a}, want {b}");
            }
        };
        let x = v(vec![1, 4], vec![1.0, 2.0, 4.0, 8.0]);
        let sc = v(vec![2], vec![1.0, 2.0]);
        let out = Reference
            .evaluate(
                &node("Resize", 19, &[("mode", Attr::String("cubic".into()))]),
                &[x.clone(), None, sc.clone()],
            )
            .unwrap();
        near(
            &out[0].value.data,
            &[
                0.89453125, 1.15625, 1.5625, 2.41796875, 3.16015625, 5.1171875, 7.1640625, 8.421875,
            ],
        );
        let n = node(
            "Resize",
            19,
            &[
                ("mode", Attr::String("cubic".into())),
                ("exclude_outside", Attr::Int(1)),
            ],
        );
        let out = Reference
            .evaluate(&n, &[x.clone(), None, sc.clone()])
            .unwrap();
        near(
            &out[0].value.data,
            &[
                0.86363637, 1.14134276, 1.54339623, 2.41796875, 3.16015625, 5.21509457, 7.24381638,
                8.54545498,
            ],
        );
        let n = node(
            "Resize",
            19,
            &[(
                "coordinate_transformation_mode",
                Attr::String("half_pixel_symmetric".into()),
            )],
        );
        let out = Reference.evaluate(&n, &[x.clone(), None, sc]).unwrap();
        assert_eq!(
            out[0].value.data,
            vec![1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 8.0, 8.0]
        );
        let n = node(
            "Resize",
            19,
            &[
                ("mode", Attr::String("linear".into())),
                (
                    "coordinate_transformation_mode",
                    Attr::String("tf_crop_and_resize".into()),
                ),
            ],
        );
        let roi = v(vec![4], vec![0.0, 0.2, 1.0, 0.9]);
        let out = Reference
            .evaluate(&n, &[x, roi, v(vec![2], vec![1.0, 1.5])])
            .unwrap();
        near(&out[0].value.data, &[1.6, 2.04, 2.88, 3.72, 5.12, 6.8]);
    }

    #[test]
    fn cubic_at_node_is_exact() {
        // t = 0: weights [w(1), w(0), w(1), w(2)] = [0, 1, 0, 0] for any a.
        let c = super::cubic_coeffs(0.0, -0.75);
        assert_all_close(&c, &[0.0, 1.0, 0.0, 0.0]);
        // t = 0.5, a = -0.75: w(1.5) = ((a*1.5 - 5a)*1.5 + 8a)*1.5 - 4a = -0.09375, w(0.5) = 0.59375
        let c = super::cubic_coeffs(0.5, -0.75);
        assert_all_close(&c, &[-0.09375, 0.59375, 0.59375, -0.09375]);
    }

    #[test]
    fn cubic_weights_sum_to_one_and_reproduce_linear() {
        let mut rng = SplitMix64(99);
        for _ in 0..8 {
            let t = rng.unit().abs();
            let c = super::cubic_coeffs(t, -0.75);
            assert!(close(c.iter().sum::<f64>(), 1.0));
            // With a = -0.5 Keys' kernel reproduces linear functions: sum c_k * (k - 1) = t.
            let c = super::cubic_coeffs(t, -0.5);
            let lin: f64 = c
                .iter()
                .enumerate()
                .map(|(k, w)| w * (k as f64 - 1.0))
                .sum();
            assert!(close(lin, t));
        }
    }

    #[test]
    fn antialias_axes_and_aspect_policy_by_hand() {
        let x = v(vec![4], vec![1.0, 2.0, 3.0, 4.0]);
        let sc = v(vec![1], vec![0.5]);
        // Linear antialias at scale 1/2: the triangle stretched to radius 2. Output 0 sits at
        // x = 0.5: taps -1, 0, 1, 2 at distances 1.5, 0.5, 0.5, 1.5 -> weights 1/4, 3/4, 3/4, 1/4
        // (sum 2), index -1 clamped to 0: (1 + 3 + 6 + 3) / 8 = 1.625. Output 1 at 2.5: taps 1..4
        // on [2, 3, 4, 4]: (2 + 9 + 12 + 4) / 8 = 3.375.
        let aa = |extra: &[(&str, Attr)]| {
            let mut a = vec![
                ("mode", Attr::String("linear".into())),
                ("antialias", Attr::Int(1)),
            ];
            a.extend(extra.iter().cloned());
            Reference
                .evaluate(&node("Resize", 18, &a), &[x.clone(), None, sc.clone()])
                .unwrap()[0]
                .value
                .data
                .clone()
        };
        assert_all_close(&aa(&[]), &[1.625, 3.375]);
        // exclude_outside drops tap -1: (3/4 * 1 + 3/4 * 2 + 1/4 * 3) / (7/4) = 12/7.
        assert_all_close(
            &aa(&[("exclude_outside", Attr::Int(1))])[..1],
            &[12.0 / 7.0],
        );
        // Upsampling ignores antialias.
        let up = Reference
            .evaluate(
                &node(
                    "Resize",
                    18,
                    &[
                        ("mode", Attr::String("linear".into())),
                        ("antialias", Attr::Int(1)),
                    ],
                ),
                &[x.clone(), None, v(vec![1], vec![2.0])],
            )
            .unwrap();
        assert_all_close(
            &up[0].value.data,
            &[1.0, 1.25, 1.75, 2.25, 2.75, 3.25, 3.75, 4.0],
        );
        // axes [1]: only the last dimension is resized (nearest, asymmetric, scale 2).
        let x2 = v(vec![2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let n = node(
            "Resize",
            18,
            &[
                ("axes", Attr::Ints(vec![-1])),
                (
                    "coordinate_transformation_mode",
                    Attr::String("asymmetric".into()),
                ),
            ],
        );
        let out = Reference
            .evaluate(&n, &[x2.clone(), None, v(vec![1], vec![2.0])])
            .unwrap();
        assert_eq!(out[0].value.shape, vec![2, 6]);
        assert_eq!(
            out[0].value.data,
            vec![1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0, 5.0, 5.0, 6.0, 6.0]
        );
        // keep_aspect_ratio_policy on a [4, 2] input asked for [2, 2]: not_larger takes the smaller
        // ratio 1/2 for both axes -> [2, 1]; not_smaller the larger, 1 -> [4, 2].
        let x3 = v(vec![4, 2], vec![1.0; 8]);
        let sizes = Some(Value::new(DType::I64, vec![2], vec![2.0, 2.0]).unwrap());
        for (policy, want) in [("not_larger", vec![2, 1]), ("not_smaller", vec![4, 2])] {
            let n = node(
                "Resize",
                18,
                &[("keep_aspect_ratio_policy", Attr::String(policy.into()))],
            );
            let out = Reference
                .evaluate(&n, &[x3.clone(), None, None, sizes.clone()])
                .unwrap();
            assert_eq!(out[0].value.shape, want, "{policy}");
        }
    }
}
