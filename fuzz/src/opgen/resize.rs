//! Resize: every mode, coordinate transformation (tf_half_pixel_for_nn from 11 to 18), nearest mode,
//! cubic form, antialias, axes and aspect-ratio policy, from opset 10 (X and scales only, nearest and
//! linear) to 19.
use quorum_oracle::{DType, Value};

use super::{Case, Gen, f32s, i64s};

pub(super) fn resize(g: &mut Gen) -> Case {
    let opset = g.pick(&[19, 18, 13, 11, 10]);
    let r = g.pick(&[4, 3, 2, 1]);
    let x: Vec<usize> = (0..r).map(|_| g.size(1, 5)).collect();
    let modes: &[&str] = if opset >= 11 {
        &["nearest", "linear", "cubic"]
    } else {
        &["nearest", "linear"]
    };
    let mode = g.pick(modes);
    let mut c = Case::new("Resize", opset, g.seed);
    if mode != "nearest" || g.chance(20) {
        c.string("mode", mode);
    }
    // Which axes change size: mostly the spatial ones (N and C kept) for rank >= 3.
    let resized: Vec<usize> = if r >= 3 && !g.chance(25) {
        (2..r).collect()
    } else {
        g.subset(r, false)
    };
    let with_axes = opset >= 18 && g.chance(30);
    let axes: Vec<usize> = if with_axes {
        resized.clone()
    } else {
        (0..r).collect()
    };
    if with_axes {
        let written: Vec<i64> = axes.iter().map(|&a| g.signed_axis(a, r)).collect();
        c.ints("axes", written);
    }
    let mut ctm = "asymmetric";
    if opset >= 11 {
        let mut ctms = vec![
            "half_pixel",
            "asymmetric",
            "align_corners",
            "pytorch_half_pixel",
            "tf_crop_and_resize",
        ];
        if opset >= 19 {
            ctms.push("half_pixel_symmetric");
        } else {
            // Resize-11's "(x + 0.5) / scale", deprecated from 13, gone in 19.
            ctms.push("tf_half_pixel_for_nn");
        }
        ctm = g.pick(&ctms);
        if ctm != "half_pixel" || g.chance(20) {
            c.string("coordinate_transformation_mode", ctm);
        }
        if mode == "nearest" && g.chance(60) {
            let nm = g.pick(&["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]);
            c.string("nearest_mode", nm);
        }
        if mode == "cubic" {
            if g.chance(40) {
                c.float("cubic_coeff_a", -0.5);
            }
            if g.chance(40) {
                c.int("exclude_outside", 1);
            }
        }
        if ctm == "tf_crop_and_resize" && g.chance(50) {
            let v = g.int(-4, 4) as f64 * 0.5;
            c.float("extrapolation_value", v);
        }
    }
    if opset >= 18 && mode != "nearest" && g.chance(30) {
        c.int("antialias", 1);
    }
    let use_sizes = opset >= 11 && g.chance(40);
    if use_sizes && opset >= 18 && g.chance(35) {
        let p = g.pick(&["not_larger", "not_smaller", "stretch"]);
        c.string("keep_aspect_ratio_policy", p);
    }
    let mut scales = vec![];
    let mut sizes = vec![];
    for &a in &axes {
        let changes = resized.contains(&a);
        if use_sizes {
            sizes.push(if changes { g.int(1, 8) } else { x[a] as i64 });
        } else {
            let mut s = if changes {
                g.pick(&[2.0, 0.5, 1.5, 3.0, 0.75, 1.0, 0.6, 2.5, 1.25])
            } else {
                1.0
            };
            if (x[a] as f64 * s).floor() < 1.0 {
                s = 1.0;
            }
            scales.push(s);
        }
    }
    let k = axes.len();
    c.input(g.floats_any(&x));
    let empty = || Value::new(DType::F32, vec![0], vec![]).expect("empty");
    if opset == 10 {
        c.input(f32s(&scales));
        return c;
    }
    // roi: used by tf_crop_and_resize only; an empty tensor in opset 11, omitted from 13.
    if ctm == "tf_crop_and_resize" {
        let starts: Vec<f64> = (0..k).map(|_| g.int(-2, 6) as f64 * 0.1).collect();
        let ends: Vec<f64> = (0..k).map(|_| g.int(4, 12) as f64 * 0.1).collect();
        c.input(f32s(&[starts, ends].concat()));
    } else if opset == 11 || g.chance(20) {
        c.input(empty());
    } else {
        c.omit();
    }
    if use_sizes {
        if opset == 11 {
            c.input(empty());
        } else {
            c.omit();
        }
        c.input(i64s(&sizes));
    } else {
        c.input(f32s(&scales));
    }
    c
}
