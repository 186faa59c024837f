//! Resize: nearest (all nearest_modes), linear and cubic (with antialias), every
//! coordinate_transformation_mode, `axes` and `keep_aspect_ratio_policy`; per output element, the
//! tensor product of per-dimension taps with edge-clamped neighbours, as the specification describes.
//!
//! Resize-10 (inputs X and scales; modes nearest and linear) names no coordinate rule: its own test
//! data (onnx 1.5, `test_resize_{up,down}sample_{nearest,linear}`) and onnxruntime's opset-10 path map
//! output x to x / scale ("asymmetric"), and round a nearest source index down when upsampling (x3:
//! 0, 0, 0, 1, 1, 1) and up when downsampling (x0.6 on 4 values: sources 0 and 1/0.6 -> 2).
use super::{input, norm_axis, opt_input, output, strides, unravel};
use crate::{NodeSpec, OracleError, Output, Value};

pub(super) fn supports(node: &NodeSpec) -> Result<(), String> {
    let e = |x: OracleError| x.to_string();
    if node.opset < 10 {
        return Err("Resize exists from opset 10 (Upsample before)".into());
    }
    if node.num_outputs > 1 {
        return Err("Resize has one output".into());
    }
    let mode = node.string("mode", "nearest").map_err(e)?;
    if node.opset == 10 {
        if !matches!(mode.as_str(), "nearest" | "linear") {
            return Err(format!("Resize-10 has no mode '{mode}'"));
        }
        return Ok(());
    }
    let kp = node
        .string("keep_aspect_ratio_policy", "stretch")
        .map_err(e)?;
    if !matches!(kp.as_str(), "stretch" | "not_larger" | "not_smaller") {
        return Err(format!(
            "Resize keep_aspect_ratio_policy '{kp}' is not covered"
        ));
    }
    if !matches!(mode.as_str(), "nearest" | "linear" | "cubic") {
        return Err(format!("Resize mode '{mode}' is not covered"));
    }
    let ct = node
        .string("coordinate_transformation_mode", "half_pixel")
        .map_err(e)?;
    // tf_half_pixel_for_nn is a Resize-11 mode, deprecated from 13 and dropped in 19 (onnxruntime
    // still runs it through 18).
    let tf_nn = ct == "tf_half_pixel_for_nn" && node.opset <= 18;
    if !tf_nn
        && !matches!(
            ct.as_str(),
            "half_pixel"
                | "half_pixel_symmetric"
                | "pytorch_half_pixel"
                | "align_corners"
                | "asymmetric"
                | "tf_crop_and_resize"
        )
    {
        return Err(format!(
            "Resize-{} coordinate_transformation_mode '{ct}' is not covered",
            node.opset
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
    /// Whether `axes` lists the dimension: "non-specified dimensions are interpreted as
    /// non-resizable" (output index i reads input index i, whatever the coordinate mode).
    listed: Vec<bool>,
}

/// Output geometry. `length_resized` is the output width before it is made an integer: input *
/// scale when scales are given (or a keep_aspect_ratio_policy chose the scale), the sizes
/// themselves otherwise. ONNX's reference evaluator and expected data use it unrounded, e.g.
/// align_corners downsampling 4 -> floor(4 * 0.6) = 2 maps output 1 to 1 * 3 / (2.4 - 1).
fn geometry(node: &NodeSpec, x: &Value, inputs: &[Option<Value>]) -> Result<Geometry, OracleError> {
    let rank = x.shape.len();
    // `axes` exists from opset 18.
    let axes_attr = if node.opset >= 18 {
        node.ints("axes")?
    } else {
        None
    };
    let axes: Vec<usize> = match axes_attr {
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
    // Resize-10 takes (X, scales); from 11 (X, roi, scales, sizes), an empty one counting as absent.
    let (roi_in, scales_in, sizes_in) = if node.opset == 10 {
        (None, opt_input(inputs, 1), None)
    } else {
        (
            opt_input(inputs, 1).filter(|v| !v.is_empty()),
            opt_input(inputs, 2).filter(|v| !v.is_empty()),
            opt_input(inputs, 3).filter(|v| !v.is_empty()),
        )
    };
    let inn: Vec<f64> = x.shape.iter().map(|&d| d as f64).collect();
    let mut g = Geometry {
        oshape: x.shape.clone(),
        scales: vec![1.0; rank],
        lresized: inn.clone(),
        roi: vec![(0.0, 1.0); rank],
        listed: (0..rank).map(|d| axes.contains(&d)).collect(),
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
    // Resize-10 has only `mode`: its coordinates are asymmetric and its nearest rounding depends on
    // the direction (see the module's documentation).
    let v10 = node.opset == 10;
    let ct = if v10 {
        "asymmetric".to_string()
    } else {
        node.string("coordinate_transformation_mode", "half_pixel")?
    };
    let nm = if v10 {
        "floor up, ceil down".to_string()
    } else {
        node.string("nearest_mode", "round_prefer_floor")?
    };
    let a = node.float("cubic_coeff_a", -0.75)?;
    let exclude_outside = !v10 && node.int("exclude_outside", 0)? != 0;
    let antialias = node.opset >= 18 && node.int("antialias", 0)? != 0;
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
            if !g.listed[d] {
                taps.push(vec![(oi[d], 1.0, 0.0)]);
                continue;
            }
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
                "tf_half_pixel_for_nn" => (xi + 0.5) / sc,
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
                        "ceil" => xo.ceil(),
                        // Resize-10's rule.
                        _ if sc < 1.0 => xo.ceil(),
                        _ => xo.floor(),
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
mod tests;
