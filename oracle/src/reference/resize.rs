//! Resize (opset >= 11): nearest (all nearest_modes), linear and cubic, every
//! coordinate_transformation_mode; separable per-dimension sampling with edge-clamped neighbours, as in
//! the specification's interpolate_nd.
use super::{input, opt_input, output, strides, unravel};
use crate::{NodeSpec, OracleError, Output, Value};

pub(super) fn supports(node: &NodeSpec) -> Result<(), String> {
    let e = |x: OracleError| x.to_string();
    if node.opset < 11 {
        return Err("Resize/Upsample before opset 11 is not covered".into());
    }
    if node.num_outputs > 1 {
        return Err("Resize has one output".into());
    }
    if node.int("antialias", 0).map_err(e)? != 0 {
        return Err("Resize antialias=1 is not covered".into());
    }
    if node.ints("axes").map_err(e)?.is_some() {
        return Err("Resize axes attribute is not covered".into());
    }
    let kp = node
        .string("keep_aspect_ratio_policy", "stretch")
        .map_err(e)?;
    if kp != "stretch" {
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

fn cubic_coeffs(t: f64, a: f64) -> [f64; 4] {
    let w = |x: f64| -> f64 {
        let x = x.abs();
        if x <= 1.0 {
            ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
        } else if x < 2.0 {
            ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
        } else {
            0.0
        }
    };
    [w(t + 1.0), w(t), w(1.0 - t), w(2.0 - t)]
}

pub(super) fn evaluate(
    node: &NodeSpec,
    inputs: &[Option<Value>],
) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let rank = x.shape.len();
    let roi = opt_input(inputs, 1).filter(|v| !v.is_empty());
    let scales_in = opt_input(inputs, 2).filter(|v| !v.is_empty());
    let sizes_in = opt_input(inputs, 3).filter(|v| !v.is_empty());
    let mode = node.string("mode", "nearest")?;
    let ct = node.string("coordinate_transformation_mode", "half_pixel")?;
    let nm = node.string("nearest_mode", "round_prefer_floor")?;
    let a = node.float("cubic_coeff_a", -0.75)?;
    let exclude_outside = node.int("exclude_outside", 0)? != 0;
    let extrap = node.float("extrapolation_value", 0.0)?;
    // `length_resized` of the coordinate formulas is the output width before it is made an integer
    // (`output_width` = input width * scale when scales are given; the sizes themselves otherwise):
    // the specification's align_corners and tf_crop_and_resize divide by `length_resized - 1`.
    let (oshape, scales, lresized): (Vec<usize>, Vec<f64>, Vec<f64>) = match (sizes_in, scales_in)
    {
        (Some(s), None) => {
            let o: Vec<usize> = s.data.iter().map(|&v| v as usize).collect();
            let sc = (0..rank.min(o.len()))
                .map(|d| o[d] as f64 / x.shape[d] as f64)
                .collect();
            let lr = o.iter().map(|&v| v as f64).collect();
            (o, sc, lr)
        }
        (None, Some(s)) => {
            // The specification's first formula scales the roi extent too (floor(in * (roi_end -
            // roi_start) * scale)), but its own reference evaluator and onnxruntime size the output
            // as floor(in * scale) in every mode; no corpus case tells them apart, and this follows
            // the evaluators.
            let lr: Vec<f64> = (0..rank.min(s.len()))
                .map(|d| x.shape[d] as f64 * s.data[d])
                .collect();
            (
                lr.iter().map(|v| v.floor().max(0.0) as usize).collect(),
                s.data.clone(),
                lr,
            )
        }
        _ => {
            return Err(OracleError::Invalid(
                "Resize needs exactly one of scales and sizes".into(),
            ));
        }
    };
    if oshape.len() != rank || scales.len() != rank {
        return Err(OracleError::Invalid(
            "Resize scales/sizes length differs from rank".into(),
        ));
    }
    let ist = strides(&x.shape);
    let n: usize = oshape.iter().product();
    let mut data = Vec::with_capacity(n);
    let mut mag = Vec::with_capacity(n);
    for f in 0..n {
        let oi = unravel(f, &oshape);
        // Per dimension: list of (input index, weight).
        let mut taps: Vec<Vec<(usize, f64)>> = Vec::with_capacity(rank);
        let mut outside = false;
        for d in 0..rank {
            let (xi, inn, on, sc) = (oi[d] as f64, x.shape[d] as f64, oshape[d] as f64, scales[d]);
            let lr = lresized[d];
            let xo = match ct.as_str() {
                "half_pixel" => (xi + 0.5) / sc - 0.5,
                "half_pixel_symmetric" => {
                    let adj = on / (sc * inn);
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
                    let roi = roi.ok_or_else(|| {
                        OracleError::Invalid("tf_crop_and_resize needs roi".into())
                    })?;
                    if roi.len() != 2 * rank {
                        return Err(OracleError::Invalid(format!(
                            "Resize roi has {} values for rank {rank}",
                            roi.len()
                        )));
                    }
                    let (s, e) = (roi.data[d], roi.data[rank + d]);
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
                    vec![(clampi(r as i64), 1.0)]
                }
                "linear" => {
                    let i0 = xo.floor();
                    let w = xo - i0;
                    let i0 = i0 as i64;
                    vec![(clampi(i0), 1.0 - w), (clampi(i0 + 1), w)]
                }
                _ => {
                    let i0 = xo.floor();
                    let c = cubic_coeffs(xo - i0, a);
                    let i0 = i0 as i64;
                    let mut v: Vec<(usize, f64)> = Vec::with_capacity(4);
                    let mut wsum = 0.0;
                    for (k, &ck) in c.iter().enumerate() {
                        let i = i0 - 1 + k as i64;
                        let w = if exclude_outside && (i < 0 || i > last) {
                            0.0
                        } else {
                            ck
                        };
                        wsum += w;
                        v.push((clampi(i), w));
                    }
                    if exclude_outside && wsum != 0.0 {
                        for p in &mut v {
                            p.1 /= wsum;
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
        let (mut s, mut g) = (0.0, 0.0);
        for tf in 0..total {
            let ti = unravel(tf, &counts);
            let mut w = 1.0;
            let mut off = 0;
            for d in 0..rank {
                let (i, wd) = taps[d][ti[d]];
                w *= wd;
                off += i * ist[d];
            }
            s += w * x.data[off];
            g += (w * x.data[off]).abs();
        }
        data.push(s);
        mag.push(g);
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
}
