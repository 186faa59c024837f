//! Resize through precomputed per-axis coordinate tables (output coordinate -> list of (input index,
//! weight), or "extrapolate"), applied one axis at a time (the N-D kernels are separable).
//!
//! Resize-10 (X and scales; nearest and linear) leaves its coordinate rule unwritten. The data of its
//! own tests (onnx 1.5) fixes it, as onnxruntime's opset-10 path computes it: source = output / scale,
//! and a fractional nearest source rounds down on an axis scaled up, up on one scaled down.
use super::*;

pub(super) const OPS: &[&str] = &["Resize"];

/// Coordinate modes of every opset from 11 (tf_half_pixel_for_nn is checked apart).
const COORDINATE_MODES: &[&str] = &[
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
];

pub(super) fn check(node: &NodeSpec) -> Result<(), String> {
    let s = |n: &str, d: &str| node.string(n, d).map_err(|e| e.to_string());
    let mode = s("mode", "nearest")?;
    match node.opset {
        ..=9 => return Err("no Resize before opset 10".into()),
        10 if mode == "nearest" || mode == "linear" => return Ok(()),
        10 => return Err(format!("Resize-10 knows no mode '{mode}'")),
        _ => {}
    }
    if !matches!(mode.as_str(), "nearest" | "linear" | "cubic") {
        return Err(format!("Resize mode '{mode}' is not covered"));
    }
    let ct = s("coordinate_transformation_mode", "half_pixel")?;
    // "(x + 0.5) / scale": introduced by Resize-11, gone from the list in Resize-19.
    let tf_nn_here = ct == "tf_half_pixel_for_nn" && (11..=18).contains(&node.opset);
    if !tf_nn_here && !COORDINATE_MODES.contains(&ct.as_str()) {
        return Err(format!(
            "coordinate_transformation_mode '{ct}' is not covered"
        ));
    }
    let nm = s("nearest_mode", "round_prefer_floor")?;
    if !matches!(
        nm.as_str(),
        "round_prefer_floor" | "round_prefer_ceil" | "floor" | "ceil"
    ) {
        return Err(format!("nearest_mode '{nm}' is not covered"));
    }
    let p = s("keep_aspect_ratio_policy", "stretch")?;
    if !matches!(p.as_str(), "stretch" | "not_larger" | "not_smaller") {
        return Err(format!("keep_aspect_ratio_policy '{p}' is not covered"));
    }
    Ok(())
}

/// Cubic convolution kernel with coefficient `a`.
fn cubic(a: f64, d: f64) -> f64 {
    let x = d.abs();
    if x <= 1.0 {
        (a + 2.0) * x * x * x - (a + 3.0) * x * x + 1.0
    } else if x < 2.0 {
        a * x * x * x - 5.0 * a * x * x + 8.0 * a * x - 4.0 * a
    } else {
        0.0
    }
}

/// The size of the terms a kernel weight at distance `d` is computed from, sum |c_k| |d|^k over the
/// kernel polynomial's coefficients, for the error allowance: a weight can be tiny beside its terms
/// (cubic weights near distance 1 or 2) and its rounding error follows the terms.
fn weight_size(linear: bool, a: f64, d: f64) -> f64 {
    let x = d.abs();
    // Coefficients of 1, x, x^2, x^3.
    let c: [f64; 4] = if linear {
        [1.0, -1.0, 0.0, 0.0]
    } else if x <= 1.0 {
        [1.0, 0.0, -(a + 3.0), a + 2.0]
    } else {
        [-4.0 * a, 8.0 * a, -5.0 * a, a]
    };
    c.iter()
        .enumerate()
        .map(|(k, ck)| ck.abs() * x.powi(k as i32))
        .sum()
}

/// How source coordinates and taps are formed, from the node's attributes (Resize-10: fixed).
struct Rule {
    mode: String,
    ct: String,
    /// A nearest_mode, or "by direction" for Resize-10.
    nm: String,
    a: f64,
    exclude: bool,
    antialias: bool,
}

impl Rule {
    fn of(node: &NodeSpec) -> Result<Rule, OracleError> {
        let mode = node.string("mode", "nearest")?;
        if node.opset == 10 {
            return Ok(Rule {
                mode,
                ct: "asymmetric".into(),
                nm: "by direction".into(),
                a: -0.75,
                exclude: false,
                antialias: false,
            });
        }
        Ok(Rule {
            mode,
            ct: node.string("coordinate_transformation_mode", "half_pixel")?,
            nm: node.string("nearest_mode", "round_prefer_floor")?,
            a: node.float("cubic_coeff_a", -0.75)?,
            exclude: node.int("exclude_outside", 0)? != 0,
            antialias: node.opset >= 18 && node.int("antialias", 0)? != 0,
        })
    }
}

struct AxisPlan {
    /// Per output coordinate: None to extrapolate, else (input index, weight, weight size) triples;
    /// the weight size bounds what the weight was computed from ([`weight_size`]; 0 for nearest,
    /// whose weights are exact).
    taps: Vec<Option<Vec<(usize, f64, f64)>>>,
}

fn plan_axis(rule: &Rule, n_in: usize, n_out: usize, scale: f64, roi: (f64, f64)) -> AxisPlan {
    let (mode, ct, nm) = (&rule.mode, &rule.ct, &rule.nm);
    let (a, exclude, antialias) = (rule.a, rule.exclude, rule.antialias);
    // `lo` is the resized length of the coordinate formulas: n_in * scale, the output width before
    // truncation to an integer (it equals n_out when sizes were given). ONNX's reference evaluator and
    // its expected data use it unrounded, e.g. align_corners downsampling 4 -> floor(2.4) = 2 maps
    // output 1 to 3 / 1.4.
    let (li, lo) = (n_in as f64, n_in as f64 * scale);
    let mut taps = Vec::with_capacity(n_out);
    for o in 0..n_out {
        let xr = o as f64;
        let x = match ct.as_str() {
            "half_pixel" => (xr + 0.5) / scale - 0.5,
            "half_pixel_symmetric" => {
                let adj = n_out as f64 / lo;
                li / 2.0 * (1.0 - adj) + (xr + 0.5) / scale - 0.5
            }
            "pytorch_half_pixel" => {
                if n_out > 1 {
                    (xr + 0.5) / scale - 0.5
                } else {
                    0.0
                }
            }
            "align_corners" => {
                if n_out > 1 {
                    xr * (li - 1.0) / (lo - 1.0)
                } else {
                    0.0
                }
            }
            "asymmetric" => xr / scale,
            "tf_half_pixel_for_nn" => (xr + 0.5) / scale,
            _ => {
                // tf_crop_and_resize: "length_resized > 1 ? start (len - 1) + x (end - start) (len - 1)
                // / (length_resized - 1) : (start + end) / 2 (len - 1)". The corpus reads the divisor's
                // length_resized as the fractional width `lo` (see above), so the test reads it the
                // same way: with scales 0.75 on 2 (lo = 1.5, one output), output 0 maps to `start`,
                // not to the centre, as in the onnx reference evaluator and onnxruntime.
                if lo > 1.0 {
                    roi.0 * (li - 1.0) + xr * (roi.1 - roi.0) * (li - 1.0) / (lo - 1.0)
                } else {
                    0.5 * (roi.0 + roi.1) * (li - 1.0)
                }
            }
        };
        if ct == "tf_crop_and_resize" && (x < 0.0 || x > li - 1.0) {
            taps.push(None);
            continue;
        }
        let clampi = |p: i64| p.clamp(0, n_in as i64 - 1) as usize;
        let f = x.floor();
        let frac = x - f;
        let mut list: Vec<(i64, f64, f64)> = match mode.as_str() {
            "nearest" => {
                let up = if frac == 0.0 {
                    false
                } else {
                    match nm.as_str() {
                        "round_prefer_floor" => frac > 0.5,
                        "round_prefer_ceil" => frac >= 0.5,
                        "floor" => false,
                        "ceil" => true,
                        _ => scale < 1.0,
                    }
                };
                vec![(f as i64 + up as i64, 1.0, 0.0)]
            }
            m => {
                // Kernel support (in input units) 1 for linear, 2 for cubic; stretched when antialiasing
                // a downscale. Enumerate every integer position inside the support.
                let support = if m == "linear" { 1.0 } else { 2.0 };
                let s = if antialias { scale.min(1.0) } else { 1.0 };
                let r = support / s;
                let lo_p = (x - r).floor() as i64;
                let hi_p = (x + r).ceil() as i64;
                let mut l = Vec::new();
                for p in lo_p..=hi_p {
                    let d = (p as f64 - x) * s;
                    let w = if m == "linear" {
                        (1.0 - d.abs()).max(0.0)
                    } else {
                        cubic(a, d)
                    };
                    if w != 0.0 && d.abs() < support {
                        l.push((p, w, weight_size(m == "linear", a, d)));
                    }
                }
                if antialias {
                    let t: f64 = l.iter().map(|e| e.1).sum();
                    for e in l.iter_mut() {
                        e.1 /= t;
                        e.2 /= t.abs();
                    }
                }
                l
            }
        };
        if exclude && mode != "nearest" {
            list.retain(|&(p, _, _)| p >= 0 && p < n_in as i64);
            let t: f64 = list.iter().map(|e| e.1).sum();
            for e in list.iter_mut() {
                e.1 /= t;
                e.2 /= t.abs();
            }
        }
        taps.push(Some(
            list.into_iter()
                .map(|(p, w, ws)| (clampi(p), w, ws))
                .collect(),
        ));
    }
    AxisPlan { taps }
}

pub(super) fn eval(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let x = input(node, inputs, 0)?;
    let rank = x.shape.len();
    let rule = Rule::of(node)?;
    let axes_attr = if node.opset >= 18 {
        node.ints("axes")?
    } else {
        None
    };
    let axes: Vec<usize> = match axes_attr {
        Some(a) => a
            .iter()
            .map(|&v| norm_axis(v, rank))
            .collect::<Result<_, _>>()?,
        None => (0..rank).collect(),
    };
    let k = axes.len();
    // Input positions of roi, scales and sizes: Resize-10 has scales alone, at 1.
    let [roi_at, scales_at, sizes_at] = if node.opset == 10 {
        [None, Some(1), None]
    } else {
        [Some(1), Some(2), Some(3)]
    };
    let nonempty =
        |at: Option<usize>| at.and_then(|i| opt_input(inputs, i).filter(|v| !v.is_empty()));
    let ct = rule.ct.as_str();
    let mut roi = vec![(0.0, 1.0); rank];
    if ct == "tf_crop_and_resize" {
        if let Some(r) = nonempty(roi_at) {
            if r.len() != 2 * k {
                return invalid(format!("roi of {} entries for {k} axes", r.len()));
            }
            for (i, &a) in axes.iter().enumerate() {
                roi[a] = (r.data[i], r.data[i + k]);
            }
        }
    }
    let mut scales = vec![1.0; rank];
    let mut out = x.shape.clone();
    if let Some(sz) = nonempty(sizes_at) {
        if sz.len() != k {
            return invalid("sizes length differs from axes");
        }
        let policy = node.string("keep_aspect_ratio_policy", "stretch")?;
        if policy == "stretch" {
            for (i, &a) in axes.iter().enumerate() {
                out[a] = sz.data[i] as usize;
                scales[a] = sz.data[i] / x.shape[a] as f64;
            }
        } else {
            let ratios = axes
                .iter()
                .enumerate()
                .map(|(i, &a)| sz.data[i] / x.shape[a] as f64);
            let s = if policy == "not_larger" {
                ratios.fold(f64::INFINITY, f64::min)
            } else {
                ratios.fold(0.0, f64::max)
            };
            for &a in &axes {
                out[a] = (s * x.shape[a] as f64 + 0.5).floor() as usize;
                scales[a] = s;
            }
        }
    } else if let Some(sc) = nonempty(scales_at) {
        if sc.len() != k {
            return invalid("scales length differs from axes");
        }
        for (i, &a) in axes.iter().enumerate() {
            if sc.data[i] <= 0.0 {
                return invalid("scales must be positive");
            }
            scales[a] = sc.data[i];
            // floor(in * scale): the specification's sizing formula also multiplies by the roi extent,
            // but its reference evaluator and onnxruntime do not; no corpus case separates them.
            out[a] = (x.shape[a] as f64 * sc.data[i]).floor() as usize;
        }
    } else {
        return invalid("Resize needs scales or sizes");
    }
    let extrap = node.float("extrapolation_value", 0.0)?;
    let mut shape = x.shape.clone();
    let mut data = x.data.clone();
    let mut mag: Vec<f64> = x.data.iter().map(|v| v.abs()).collect();
    let mut outside = vec![false; x.len()];
    for d in 0..rank {
        // An axis left out of `axes` is not resized; one resized by 1 is copied, except where the
        // coordinate mode moves it (a roi, or tf_half_pixel_for_nn's source i + 0.5).
        let moved = ct == "tf_crop_and_resize" || ct == "tf_half_pixel_for_nn";
        if !axes.contains(&d) || (out[d] == shape[d] && scales[d] == 1.0 && !moved) {
            continue;
        }
        let plan = plan_axis(&rule, shape[d], out[d], scales[d], roi[d]);
        let outer: usize = shape[..d].iter().product();
        let inner: usize = shape[d + 1..].iter().product();
        let (n_in, n_out) = (shape[d], out[d]);
        let mut nd = vec![0.0; outer * n_out * inner];
        let mut nm = vec![0.0; outer * n_out * inner];
        let mut no = vec![false; outer * n_out * inner];
        for o in 0..outer {
            for (j, t) in plan.taps.iter().enumerate() {
                for i in 0..inner {
                    let dst = (o * n_out + j) * inner + i;
                    match t {
                        None => no[dst] = true,
                        Some(list) => {
                            let mut acc = Neumaier::default();
                            let mut m = 0.0;
                            for &(p, w, ws) in list {
                                let src = (o * n_in + p) * inner + i;
                                acc.add(w * data[src]);
                                // First order: the weight times the error terms carried so far,
                                // plus the weight's own error terms times the value.
                                m += w.abs() * mag[src] + ws * data[src].abs();
                                no[dst] |= outside[src];
                            }
                            nd[dst] = acc.value();
                            nm[dst] = m;
                        }
                    }
                }
            }
        }
        shape[d] = n_out;
        data = nd;
        mag = nm;
        outside = no;
    }
    for (i, &o) in outside.iter().enumerate() {
        if o {
            data[i] = extrap;
            mag[i] = extrap.abs();
        }
    }
    Ok(vec![make_output(x.dtype, shape, data, mag)?])
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;
    use crate::Attr;

    fn attrs(list: &[(&'static str, &str)]) -> Vec<(&'static str, Attr)> {
        list.iter()
            .map(|(k, v)| (*k, Attr::String(v.to_string())))
            .collect()
    }

    #[test]
    fn nearest_upsample_asymmetric() {
        let nd = node(
            "Resize",
            13,
            attrs(&[
                ("coordinate_transformation_mode", "asymmetric"),
                ("nearest_mode", "floor"),
            ]),
        );
        let out = eval(
            &nd,
            &[
                f32v(&[1, 1, 2, 2], vec![1.0, 2.0, 3.0, 4.0]),
                None,
                f32v(&[4], vec![1.0, 1.0, 2.0, 3.0]),
            ],
        )
        .unwrap();
        assert_eq!(out[0].value.shape, vec![1, 1, 4, 6]);
        assert_eq!(&out[0].value.data[..6], &[1.0, 1.0, 1.0, 2.0, 2.0, 2.0]);
        assert_eq!(&out[0].value.data[18..], &[3.0, 3.0, 3.0, 4.0, 4.0, 4.0]);
    }

    #[test]
    fn linear_half_pixel_and_align_corners() {
        // 1-D [1, 2, 3, 4] upsampled x2, half_pixel: x = (o + 0.5) / 2 - 0.5, clamped at the edges.
        let nd = node("Resize", 13, attrs(&[("mode", "linear")]));
        let out = eval(
            &nd,
            &[
                f32v(&[4], vec![1.0, 2.0, 3.0, 4.0]),
                None,
                f32v(&[1], vec![2.0]),
            ],
        )
        .unwrap();
        assert!(close(
            &out[0].value.data,
            &[1.0, 1.25, 1.75, 2.25, 2.75, 3.25, 3.75, 4.0],
            1e-15
        ));
        let ac = node(
            "Resize",
            13,
            attrs(&[
                ("mode", "linear"),
                ("coordinate_transformation_mode", "align_corners"),
            ]),
        );
        let o2 = eval(
            &ac,
            &[
                f32v(&[2, 2], vec![0.0, 3.0, 6.0, 9.0]),
                None,
                None,
                typed(DType::I64, &[2], vec![3.0, 4.0]),
            ],
        )
        .unwrap();
        assert_eq!(o2[0].value.shape, vec![3, 4]);
        assert!(close(
            &o2[0].value.data,
            &[0.0, 1.0, 2.0, 3.0, 3.0, 4.0, 5.0, 6.0, 6.0, 7.0, 8.0, 9.0],
            1e-14
        ));
    }

    #[test]
    fn cubic_random_against_formula() {
        // Cubic at scale 1 is the identity; at scale 2 asymmetric, even outputs hit input samples.
        let mut r = SplitMix64(101);
        let xs = r.values(6);
        let nd = node(
            "Resize",
            13,
            attrs(&[
                ("mode", "cubic"),
                ("coordinate_transformation_mode", "asymmetric"),
            ]),
        );
        let out = eval(&nd, &[f32v(&[6], xs.clone()), None, f32v(&[1], vec![2.0])]).unwrap();
        for i in 0..6 {
            assert!((out[0].value.data[2 * i] - xs[i]).abs() < 1e-15);
        }
        // Odd output 3 -> x = 1.5: taps at 0..3 with weights from the kernel at distances 1.5, 0.5, 0.5, 1.5.
        let a: f64 = -0.75;
        let w1 = a * 3.375 - 5.0 * a * 2.25 + 8.0 * a * 1.5 - 4.0 * a;
        let w0 = (a + 2.0) * 0.125 - (a + 3.0) * 0.25 + 1.0;
        let want = w1 * xs[0] + w0 * xs[1] + w0 * xs[2] + w1 * xs[3];
        assert!((out[0].value.data[3] - want).abs() < 1e-14);
    }

    #[test]
    fn tf_crop_and_resize_extrapolates() {
        let mut a = attrs(&[
            ("mode", "linear"),
            ("coordinate_transformation_mode", "tf_crop_and_resize"),
        ]);
        a.push(("extrapolation_value", Attr::Float(10.0)));
        let nd = node("Resize", 13, a);
        let out = eval(
            &nd,
            &[
                f32v(&[3], vec![0.0, 1.0, 2.0]),
                f32v(&[2], vec![0.5, 1.5]),
                None,
                typed(DType::I64, &[1], vec![3.0]),
            ],
        )
        .unwrap();
        // x = 0.5*2 + o * 1.0 * 2 / 2 = 1, 2, 3 -> last outside.
        assert_eq!(out[0].value.data, vec![1.0, 2.0, 10.0]);
    }

    #[test]
    fn resize_10_rounds_by_direction() {
        let mut r = SplitMix64(310);
        let xs = r.values(5);
        let run = |mode: &str, scale: f64| {
            let nd = node("Resize", 10, attrs(&[("mode", mode)]));
            eval(
                &nd,
                &[f32v(&[1, 5], xs.clone()), f32v(&[2], vec![1.0, scale])],
            )
            .unwrap()
            .remove(0)
        };
        // x2.5 (12 outputs): sources o / 2.5 = 0, 0.4, 0.8, 1.2, ... rounded down.
        let up = run("nearest", 2.5);
        assert_eq!(up.value.shape, vec![1, 12]);
        let want: Vec<f64> = (0..12)
            .map(|o| xs[(o as f64 / 2.5).floor() as usize])
            .collect();
        assert_eq!(up.value.data, want);
        // x0.5 (2 outputs) and x0.75 (3): sources o / s rounded up, 0 and 2; 0, 1.33 -> 2, 2.67 -> 3.
        assert_eq!(run("nearest", 0.5).value.data, vec![xs[0], xs[2]]);
        assert_eq!(run("nearest", 0.75).value.data, vec![xs[0], xs[2], xs[3]]);
        // Linear x0.75: sources 0, 4/3, 8/3 between neighbours; x2: the last output clamps at 4.
        let lin = run("linear", 0.75);
        let at = |p: f64| {
            let i = p.floor() as usize;
            xs[i] + (p - i as f64) * (xs[(i + 1).min(4)] - xs[i])
        };
        assert!(close(
            &lin.value.data,
            &[at(0.0), at(4.0 / 3.0), at(8.0 / 3.0)],
            1e-15
        ));
        let lin = run("linear", 2.0);
        let want: Vec<f64> = (0..10).map(|o| at((o as f64 / 2.0).min(4.0))).collect();
        assert!(close(&lin.value.data, &want, 1e-15));
        assert!(check(&node("Resize", 10, attrs(&[("mode", "cubic")]))).is_err());
    }

    #[test]
    fn tf_half_pixel_for_nn_shifts_by_half() {
        let mut r = SplitMix64(311);
        let xs = r.values(3);
        let tf = ("coordinate_transformation_mode", "tf_half_pixel_for_nn");
        // Downscale 3 -> 1 (scale 1/3): source 0.5 * 3 = 1.5, round_prefer_floor -> 1.
        let nd = node("Resize", 13, attrs(&[tf]));
        let out = eval(
            &nd,
            &[
                f32v(&[3], xs.clone()),
                None,
                None,
                typed(DType::I64, &[1], vec![1.0]),
            ],
        )
        .unwrap();
        assert_eq!(out[0].value.data, vec![xs[1]]);
        // round_prefer_ceil at scale 1: sources 0.5, 1.5, 2.5 -> 1, 2, 2 (clamped).
        let nd = node(
            "Resize",
            11,
            attrs(&[tf, ("nearest_mode", "round_prefer_ceil")]),
        );
        let empty = f32v(&[0], vec![]);
        let out = eval(&nd, &[f32v(&[3], xs.clone()), empty, f32v(&[1], vec![1.0])]).unwrap();
        assert_eq!(out[0].value.data, vec![xs[1], xs[2], xs[2]]);
        // Cubic at scale 1: each output sits halfway, weights w(1.5), w(0.5), w(0.5), w(1.5).
        let nd = node("Resize", 18, attrs(&[tf, ("mode", "cubic")]));
        let out = eval(&nd, &[f32v(&[3], xs.clone()), None, f32v(&[1], vec![1.0])]).unwrap();
        let (w0, w1) = (cubic(-0.75, 0.5), cubic(-0.75, 1.5));
        let x = |i: i64| xs[i.clamp(0, 2) as usize];
        let want: Vec<f64> = (0..3)
            .map(|o| w1 * x(o - 1) + w0 * x(o) + w0 * x(o + 1) + w1 * x(o + 2))
            .collect();
        assert!(close(&out[0].value.data, &want, 1e-15));
        // Only axes named in `axes` move.
        let nd = node("Resize", 18, {
            let mut a = attrs(&[tf, ("nearest_mode", "ceil")]);
            a.push(("axes", Attr::Ints(vec![0])));
            a
        });
        let grid: Vec<f64> = [xs.clone(), xs.clone()].concat();
        let out = eval(
            &nd,
            &[f32v(&[2, 3], grid.clone()), None, f32v(&[1], vec![1.0])],
        )
        .unwrap();
        assert_eq!(out[0].value.data, [xs.clone(), xs.clone()].concat());
        assert!(check(&node("Resize", 19, attrs(&[tf]))).is_err());
        assert!(check(&node("Resize", 18, attrs(&[tf]))).is_ok());
    }
}
