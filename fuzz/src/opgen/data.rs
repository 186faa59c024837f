//! Data movement and views.
use quorum_oracle::{DType, Value};

use super::{Case, Dist, Gen, i64s, scalar};

pub(super) fn generate(op: &'static str, g: &mut Gen) -> Option<Case> {
    Some(match op {
        "Transpose" => {
            let opset = g.pick(&[21, 13, 1]);
            let x = g.shape(0, 4, true);
            let mut c = Case::new(op, opset, g.seed);
            if g.chance(75) {
                let p = g.perm(x.len());
                c.ints("perm", p.iter().map(|&a| a as i64).collect());
            }
            c.input(g.floats_any(&x));
            c
        }
        "Concat" => concat(g),
        "Split" => split(g),
        "Slice" => slice(g),
        "Gather" => gather(g),
        "GatherElements" => gather_elements(g),
        "ScatterElements" => scatter_elements(g),
        "ScatterND" => scatter_nd(g),
        "CumSum" => cumsum(g),
        "Expand" => {
            let opset = g.pick(&[13, 8]);
            let s = g.broadcast(2, 0, 4, true);
            let mut c = Case::new(op, opset, g.seed);
            let shape: Vec<i64> = s[1].iter().map(|&d| d as i64).collect();
            c.input(g.floats_any(&s[0])).input(i64s(&shape));
            c
        }
        "Pad" => pad(g),
        "Tile" => {
            let opset = g.pick(&[13, 6]);
            let x = g.shape(1, 4, true);
            let reps: Vec<i64> = x
                .iter()
                .map(|_| if g.chance(5) { 0 } else { g.int(1, 3) })
                .collect();
            let mut c = Case::new(op, opset, g.seed);
            c.input(g.floats_any(&x)).input(i64s(&reps));
            c
        }
        "DepthToSpace" | "SpaceToDepth" => depth_space(op, g),
        "Trilu" => {
            let x = g.shape(2, 4, true);
            let mut c = Case::new(op, 14, g.seed);
            if g.chance(60) {
                let u = g.int(0, 1);
                c.int("upper", u);
            }
            c.input(g.floats_any(&x));
            if g.chance(60) {
                let k = g.int(-7, 7);
                c.input(scalar(DType::I64, k as f64));
            }
            c
        }
        "Range" => range(g),
        "OneHot" => one_hot(g),
        "Reshape" => reshape(g),
        "Shape" => {
            let opset = g.pick(&[21, 15, 13, 1]);
            let x = g.shape(0, 4, true);
            let r = x.len() as i64;
            let mut c = Case::new(op, opset, g.seed);
            // From opset 15 a slice of the shape: start and end, negative from the back, clamped.
            if opset >= 15 {
                if g.chance(40) {
                    c.int("start", g.int(-r - 1, r + 1));
                }
                if g.chance(40) {
                    c.int("end", g.int(-r - 1, r + 1));
                }
            }
            c.input(g.floats_any(&x));
            c
        }
        "Size" => {
            let opset = g.pick(&[21, 13, 1]);
            let x = g.shape(0, 4, true);
            let mut c = Case::new(op, opset, g.seed);
            c.input(g.floats_any(&x));
            c
        }
        "Flatten" => {
            let opset = g.pick(&[21, 13, 11, 9, 1]);
            let x = g.shape(1, 4, true);
            let r = x.len();
            let mut c = Case::new(op, opset, g.seed);
            let axis = g.size(0, r);
            if axis != 1 || g.chance(30) {
                let a = if opset >= 11 && axis < r && g.chance(40) {
                    axis as i64 - r as i64
                } else {
                    axis as i64
                };
                c.int("axis", a);
            }
            c.input(g.floats_any(&x));
            c
        }
        "Squeeze" => squeeze(g),
        "Unsqueeze" => unsqueeze(g),
        "Resize" => return Some(super::resize::resize(g)),
        "LSTM" | "GRU" => return Some(super::rnn::rnn(op, g)),
        _ => return None,
    })
}

/// An index input of int64 (mostly) or int32.
fn indices(g: &mut Gen, shape: &[usize], lo: i64, hi: i64) -> Value {
    let d = if g.chance(20) { DType::I32 } else { DType::I64 };
    g.ints(d, shape, lo, hi)
}

fn concat(g: &mut Gen) -> Case {
    let opset = g.pick(&[13, 11, 4]);
    let base = g.shape(1, 4, false);
    let r = base.len();
    let axis = g.size(0, r - 1);
    let n = g.size(1, 4);
    let mut c = Case::new("Concat", opset, g.seed);
    let a = if opset >= 11 {
        g.signed_axis(axis, r)
    } else {
        axis as i64
    };
    c.int("axis", a);
    for _ in 0..n {
        let mut s = base.clone();
        s[axis] = if g.chance(8) { 0 } else { g.dim() };
        c.input(g.floats_any(&s));
    }
    c
}

fn split(g: &mut Gen) -> Case {
    let opset = g.pick(&[18, 13, 11, 2]);
    let mut x = g.shape(1, 4, false);
    let r = x.len();
    let axis = g.size(0, r - 1);
    let n = g.size(1, 4);
    let mut c = Case::new("Split", opset, g.seed);
    if axis != 0 || g.chance(30) {
        let a = if opset >= 11 {
            g.signed_axis(axis, r)
        } else {
            axis as i64
        };
        c.int("axis", a);
    }
    c.outputs(n);
    let explicit = g.chance(55);
    let mut sizes: Vec<i64> = vec![];
    if explicit {
        sizes = (0..n).map(|_| g.int(0, 3)).collect();
        if sizes.iter().all(|&s| s == 0) {
            sizes[0] = 1;
        }
        x[axis] = sizes.iter().sum::<i64>() as usize;
    } else if opset >= 18 {
        c.int("num_outputs", n as i64);
        // Chunks of ceil(d / n); every output must be non-empty except that the last may be smaller.
        let chunk = g.size(1, 3);
        let last = g.size(1, chunk);
        x[axis] = chunk * (n - 1) + last;
    } else {
        x[axis] = n * g.size(1, 3);
    }
    c.input(g.floats_any(&x));
    if explicit {
        if opset >= 13 {
            c.input(i64s(&sizes));
        } else {
            c.ints("split", sizes);
        }
    }
    c
}

fn slice(g: &mut Gen) -> Case {
    let opset = g.pick(&[13, 11, 10, 1]);
    let x = g.shape(1, 4, true);
    let r = x.len();
    let mut axes = g.subset(r, false);
    if g.chance(30) {
        let p = g.perm(axes.len());
        axes = p.iter().map(|&i| axes[i]).collect();
    }
    let all_axes_in_order = axes == (0..axes.len()).collect::<Vec<_>>();
    let mut starts = vec![];
    let mut ends = vec![];
    let mut steps = vec![];
    for &a in &axes {
        let d = x[a] as i64;
        let step = if opset >= 10 && g.chance(50) {
            g.pick(&[-1, 2, -2, 3, -3])
        } else {
            1
        };
        let bound = |g: &mut Gen| -> i64 {
            match g.int(0, 9) {
                0 => g.pick(&[i64::MAX, i64::MIN, i32::MAX as i64, i32::MIN as i64]),
                _ => g.int(-d - 2, d + 2),
            }
        };
        starts.push(bound(g));
        ends.push(bound(g));
        steps.push(step);
    }
    let written: Vec<i64> = axes
        .iter()
        .map(|&a| {
            if opset >= 11 {
                g.signed_axis(a, r)
            } else {
                a as i64
            }
        })
        .collect();
    let give_axes = !all_axes_in_order || g.chance(50);
    let mut c = Case::new("Slice", opset, g.seed);
    c.input(g.floats_any(&x));
    if opset < 10 {
        c.ints("starts", starts).ints("ends", ends);
        if give_axes {
            c.ints("axes", written);
        }
        return c;
    }
    let dt = if g.chance(20) { DType::I32 } else { DType::I64 };
    let clamp32 = |v: &[i64]| -> Vec<f64> {
        v.iter()
            .map(|&x| {
                if dt == DType::I32 {
                    x.clamp(i32::MIN as i64, i32::MAX as i64) as f64
                } else {
                    x as f64
                }
            })
            .collect()
    };
    let vec1 = |v: Vec<f64>| Value::new(dt, vec![v.len()], v).expect("1-D");
    c.input(vec1(clamp32(&starts))).input(vec1(clamp32(&ends)));
    let give_steps = steps.iter().any(|&s| s != 1) || g.chance(30);
    if give_axes || give_steps {
        if give_axes {
            c.input(vec1(clamp32(&written)));
        } else {
            c.omit();
        }
    }
    if give_steps {
        c.input(vec1(clamp32(&steps)));
    }
    c
}

fn gather(g: &mut Gen) -> Case {
    let opset = g.pick(&[13, 11, 1]);
    let x = g.shape(1, 4, false);
    let r = x.len();
    let axis = g.size(0, r - 1);
    let ishape = g.shape(0, 3, true);
    let d = x[axis] as i64;
    let lo = if opset >= 11 { -d } else { 0 };
    let mut c = Case::new("Gather", opset, g.seed);
    if axis != 0 || g.chance(30) {
        let a = if opset >= 11 {
            g.signed_axis(axis, r)
        } else {
            axis as i64
        };
        c.int("axis", a);
    }
    c.input(g.floats_any(&x));
    c.input(indices(g, &ishape, lo, d - 1));
    c
}

fn gather_elements(g: &mut Gen) -> Case {
    let opset = g.pick(&[13, 11]);
    let x = g.shape(1, 4, false);
    let r = x.len();
    let axis = g.size(0, r - 1);
    let mut ishape = x.clone();
    ishape[axis] = g.dim();
    let d = x[axis] as i64;
    let mut c = Case::new("GatherElements", opset, g.seed);
    if axis != 0 || g.chance(30) {
        let a = g.signed_axis(axis, r);
        c.int("axis", a);
    }
    c.input(g.floats_any(&x));
    c.input(indices(g, &ishape, -d, d - 1));
    c
}

fn scatter_elements(g: &mut Gen) -> Case {
    let opset = g.pick(&[18, 16, 13, 11]);
    let x = g.shape(1, 4, false);
    let r = x.len();
    let axis = g.size(0, r - 1);
    let reductions: &[&str] = match opset {
        18 => &["none", "add", "mul", "max", "min"],
        16 => &["none", "add", "mul"],
        _ => &["none"],
    };
    let reduction = g.pick(reductions);
    let ishape: Vec<usize> = x.iter().map(|&d| g.size(1, d)).collect();
    let d = x[axis];
    let mut idx = indices(g, &ishape, 0, d as i64 - 1);
    if reduction == "none" {
        // Distinct targets along the axis (duplicates are undefined without a reduction): each line
        // of the indices along the axis takes a prefix of a shuffle of 0..d.
        let n: usize = ishape.iter().product();
        let inner: usize = ishape[axis + 1..].iter().product();
        let len = ishape[axis];
        for outer in 0..n / (len * inner) {
            for i in 0..inner {
                let mut p: Vec<usize> = (0..d).collect();
                for k in (1..d).rev() {
                    let j = g.value_int(0, k as i64) as usize;
                    p.swap(k, j);
                }
                for (k, &v) in p.iter().take(len).enumerate() {
                    idx.data[(outer * len + k) * inner + i] = v as f64;
                }
            }
        }
    }
    for v in idx.data.iter_mut() {
        if g.value_int(0, 3) == 0 {
            *v -= d as f64;
        }
    }
    let mut c = Case::new("ScatterElements", opset, g.seed);
    if axis != 0 || g.chance(30) {
        let a = g.signed_axis(axis, r);
        c.int("axis", a);
    }
    if reduction != "none" || (opset >= 16 && g.chance(20)) {
        c.string("reduction", reduction);
    }
    c.input(g.floats_any(&x)).input(idx);
    c.input(g.floats_any(&ishape));
    c
}

fn scatter_nd(g: &mut Gen) -> Case {
    let opset = g.pick(&[18, 16, 13, 11]);
    let x = g.shape(1, 4, false);
    let k = g.size(1, x.len());
    let reductions: &[&str] = match opset {
        18 => &["none", "add", "mul", "max", "min"],
        16 => &["none", "add", "mul"],
        _ => &["none"],
    };
    let reduction = g.pick(reductions);
    // Index tuples address points of the first k dims; without a reduction they are distinct
    // (duplicates are undefined there), with one they may repeat (applied in order).
    let cells: usize = x[..k].iter().product();
    let batch: Vec<usize> = if reduction == "none" {
        if g.chance(20) {
            vec![]
        } else {
            vec![g.size(1, cells.min(6))]
        }
    } else {
        (0..g.size(0, 2)).map(|_| g.size(1, 3)).collect()
    };
    let n: usize = batch.iter().product();
    let mut order: Vec<usize> = (0..cells).collect();
    for i in (1..cells).rev() {
        let j = g.value_int(0, i as i64) as usize;
        order.swap(i, j);
    }
    let mut tuples = Vec::with_capacity(n * k);
    // `order` has a cell per tuple without a reduction (n <= cells there); with one it is not read.
    for &distinct in order.iter().cycle().take(n) {
        let mut cell = if reduction == "none" {
            distinct
        } else {
            g.value_int(0, cells as i64 - 1) as usize
        };
        let mut tuple = vec![0i64; k];
        for d in (0..k).rev() {
            tuple[d] = (cell % x[d]) as i64;
            cell /= x[d];
        }
        for (d, v) in tuple.iter_mut().enumerate() {
            if g.value_int(0, 3) == 0 {
                *v -= x[d] as i64;
            }
        }
        tuples.extend(tuple.iter().map(|&v| v as f64));
    }
    let ishape: Vec<usize> = batch.iter().copied().chain([k]).collect();
    let idx = Value::new(DType::I64, ishape, tuples).expect("indices of their shape");
    let ushape: Vec<usize> = batch.iter().chain(&x[k..]).copied().collect();
    let mut c = Case::new("ScatterND", opset, g.seed);
    if reduction != "none" || (opset >= 16 && g.chance(20)) {
        c.string("reduction", reduction);
    }
    c.input(g.floats_any(&x)).input(idx);
    c.input(g.floats_any(&ushape));
    c
}

fn pad(g: &mut Gen) -> Case {
    let opset = g.pick(&[21, 19, 18, 13, 11, 2]);
    let modes: &[&str] = if opset >= 19 {
        &["constant", "reflect", "edge", "wrap"]
    } else {
        &["constant", "reflect", "edge"]
    };
    let mode = g.pick(modes);
    let x = g.shape(1, 4, mode == "constant");
    let r = x.len();
    let axes: Vec<usize> = if opset >= 18 && g.chance(40) {
        g.subset(r, false)
    } else {
        (0..r).collect()
    };
    let mut pads = vec![0i64; 2 * axes.len()];
    for (i, &a) in axes.iter().enumerate() {
        let d = x[a] as i64;
        for side in 0..2 {
            pads[i + side * axes.len()] = match mode {
                "constant" if opset >= 11 && g.chance(15) => -g.int(0, d),
                "constant" | "edge" => g.int(0, 3),
                "reflect" => g.int(0, (d - 1).min(3)),
                _ => g.int(0, d.min(3)),
            };
        }
    }
    // Negative pads on both sides must leave the dim non-negative.
    for (i, &a) in axes.iter().enumerate() {
        let d = x[a] as i64;
        let (b, e) = (pads[i], pads[i + axes.len()]);
        if d + b + e < 0 {
            pads[i + axes.len()] = -d - b;
        }
    }
    let mut c = Case::new("Pad", opset, g.seed);
    if mode != "constant" || g.chance(20) {
        c.string("mode", mode);
    }
    c.input(g.floats_any(&x));
    let value = g.int(-8, 8) as f64 * 0.5;
    let with_value = mode == "constant" && g.chance(60);
    if opset < 11 {
        c.ints("pads", pads);
        if with_value {
            c.float("value", value);
        }
        return c;
    }
    c.input(i64s(&pads));
    let with_axes = axes.len() != r || (opset >= 18 && g.chance(20));
    if with_value {
        c.input(scalar(DType::F32, value));
    } else if with_axes || g.chance(20) {
        c.omit();
    }
    if with_axes {
        let written: Vec<i64> = axes.iter().map(|&a| g.signed_axis(a, r)).collect();
        c.input(i64s(&written));
    }
    c
}

fn depth_space(op: &'static str, g: &mut Gen) -> Case {
    let b = g.size(1, 3);
    let (n, k, h, w) = (g.size(1, 2), g.size(1, 2), g.size(1, 4), g.size(1, 4));
    let mut c;
    if op == "DepthToSpace" {
        let opset = g.pick(&[13, 11, 1]);
        c = Case::new(op, opset, g.seed);
        if opset >= 11 && g.chance(60) {
            c.string("mode", g.pick(&["DCR", "CRD"]));
        }
        c.input(g.floats_any(&[n, b * b * k, h, w]));
    } else {
        let opset = g.pick(&[13, 1]);
        c = Case::new(op, opset, g.seed);
        c.input(g.floats_any(&[n, k, h * b, w * b]));
    }
    c.int("blocksize", b as i64);
    c
}

/// CumSum over any axis, each direction, inclusive or exclusive; integer data (which wraps on the
/// devices as on the CPU) in one case of five, and an axis of int32 or int64.
fn cumsum(g: &mut Gen) -> Case {
    let opset = g.pick(&[14, 11]);
    let x = g.shape(1, 4, true);
    let axis = g.size(0, x.len() - 1);
    let axis = g.signed_axis(axis, x.len());
    let mut c = Case::new("CumSum", opset, g.seed);
    for attr in ["exclusive", "reverse"] {
        if g.chance(50) {
            let v = g.int(0, 1);
            c.int(attr, v);
        }
    }
    if g.chance(20) {
        let dtype = g.pick(&[DType::I32, DType::I64]);
        c.input(g.ints(dtype, &x, -1000, 1000));
    } else {
        c.input(g.floats_any(&x));
    }
    c.input(scalar(g.pick(&[DType::I64, DType::I32]), axis as f64));
    c
}

fn range(g: &mut Gen) -> Case {
    let dtype = g.pick(&[DType::F32, DType::I64, DType::I32]);
    let n = g.int(0, 8);
    let mut delta = g.int(1, 6);
    if g.chance(40) {
        delta = -delta;
    }
    let start = g.int(-10, 10);
    let mut c = Case::new("Range", 11, g.seed);
    if dtype == DType::F32 {
        // Halves: start + i*delta exact; the limit half a step short of the n-th element (no
        // rounding question in ceil((limit - start) / delta)).
        let (s, d) = (start as f64 * 0.5, delta as f64 * 0.5);
        let limit = s + d * (n as f64 - 0.5);
        c.input(scalar(dtype, s))
            .input(scalar(dtype, limit))
            .input(scalar(dtype, d));
    } else {
        let limit = start + delta * n - if g.chance(50) { 0 } else { delta.signum() };
        c.input(scalar(dtype, start as f64))
            .input(scalar(dtype, limit as f64))
            .input(scalar(dtype, delta as f64));
    }
    c
}

fn one_hot(g: &mut Gen) -> Case {
    let opset = g.pick(&[11, 9]);
    let ishape = g.shape(0, 3, true);
    let r = ishape.len() as i64;
    let depth = g.int(1, 6);
    let lo = if opset >= 11 { -depth } else { 0 };
    let mut c = Case::new("OneHot", opset, g.seed);
    if g.chance(60) {
        let a = g.int(-r - 1, r);
        c.int("axis", a);
    }
    let idx = if g.chance(20) {
        let v = g.ints(DType::I64, &ishape, lo, depth - 1);
        Value::new(DType::F32, v.shape, v.data).expect("same shape")
    } else {
        indices(g, &ishape, lo, depth - 1)
    };
    let depth_v = if g.chance(30) {
        scalar(DType::F32, depth as f64)
    } else {
        scalar(DType::I64, depth as f64)
    };
    let (off, on) = (g.int(-4, 4) as f64 * 0.5, g.int(-4, 4) as f64 * 0.5 + 3.0);
    c.input(idx).input(depth_v);
    c.input(super::f32s(&[off, on]));
    c
}

fn reshape(g: &mut Gen) -> Case {
    let opset = g.pick(&[21, 19, 14, 13, 5]);
    let x = g.shape(0, 4, false);
    let n: usize = x.iter().product();
    // A random factorisation of n into 0..=4 dims.
    let mut target: Vec<i64> = vec![];
    let mut rest = n;
    let rank = g.size(if n == 1 { 0 } else { 1 }, 4);
    for i in 0..rank {
        if i + 1 == rank {
            target.push(rest as i64);
            break;
        }
        let divs: Vec<usize> = (1..=rest).filter(|d| rest / d * d == rest).collect();
        let d = g.pick(&divs);
        target.push(d as i64);
        rest /= d;
    }
    if target.is_empty() && n != 1 {
        target.push(n as i64);
    }
    // 0 copies the input's dim at the same index; -1 is inferred.
    for i in 0..target.len() {
        if i < x.len() && target[i] == x[i] as i64 && g.chance(30) {
            target[i] = 0;
        }
    }
    let free: Vec<usize> = (0..target.len()).filter(|&i| target[i] != 0).collect();
    if !free.is_empty() && g.chance(40) {
        let i = g.pick(&free);
        target[i] = -1;
    }
    let mut c = Case::new("Reshape", opset, g.seed);
    if opset >= 14 && g.chance(20) {
        c.int("allowzero", 0);
    }
    c.input(g.floats_any(&x)).input(i64s(&target));
    c
}

fn squeeze(g: &mut Gen) -> Case {
    let opset = g.pick(&[21, 13, 11, 1]);
    let mut x = g.shape(1, 4, false);
    for d in x.iter_mut() {
        if g.chance(45) {
            *d = 1;
        }
    }
    let r = x.len();
    let ones: Vec<usize> = (0..r).filter(|&i| x[i] == 1).collect();
    let mut c = Case::new("Squeeze", opset, g.seed);
    c.input(g.floats_any(&x));
    if ones.is_empty() || g.chance(25) {
        return c;
    }
    let pick = g.subset(ones.len(), false);
    let axes: Vec<i64> = pick
        .iter()
        .map(|&i| {
            if opset >= 11 {
                g.signed_axis(ones[i], r)
            } else {
                ones[i] as i64
            }
        })
        .collect();
    if opset >= 13 {
        c.input(i64s(&axes));
    } else {
        c.ints("axes", axes);
    }
    c
}

fn unsqueeze(g: &mut Gen) -> Case {
    let opset = g.pick(&[21, 13, 11, 1]);
    let x = g.shape(0, 3, true);
    let k = g.size(1, 3);
    let out_rank = x.len() + k;
    let mut pos = g.perm(out_rank);
    pos.truncate(k);
    let axes: Vec<i64> = pos
        .iter()
        .map(|&a| {
            if opset >= 11 {
                g.signed_axis(a, out_rank)
            } else {
                a as i64
            }
        })
        .collect();
    let mut c = Case::new("Unsqueeze", opset, g.seed);
    c.input(g.floats(&x, Dist::Signed(3.0)));
    if opset >= 13 {
        c.input(i64s(&axes));
    } else {
        c.ints("axes", axes);
    }
    c
}
