//! Normalizations, the softmax family and reductions.
use quorum_oracle::DType;

use super::{Case, Dist, Gen, i64s};

pub(super) fn generate(op: &'static str, g: &mut Gen) -> Option<Case> {
    Some(match op {
        "BatchNormalization" => batch_norm(g),
        "InstanceNormalization" => {
            let opset = g.pick(&[22, 6]);
            let s = channels_first(g, 3, 5);
            let mut c = Case::new(op, opset, g.seed);
            epsilon(&mut c, g);
            c.input(g.floats_any(&s));
            c.input(g.floats_any(&[s[1]])).input(g.floats_any(&[s[1]]));
            c
        }
        "LayerNormalization" => layer_norm(g),
        "GroupNormalization" => group_norm(g),
        "LRN" => {
            let opset = g.pick(&[13, 1]);
            let s = channels_first(g, 3, 4);
            let mut c = Case::new(op, opset, g.seed);
            let size = g.int(1, 5);
            c.int("size", size);
            if g.chance(50) {
                let a = g.int(1, 20) as f64 * 1e-3;
                c.float("alpha", a);
            }
            if g.chance(50) {
                let b = g.int(1, 8) as f64 * 0.25;
                c.float("beta", b);
            }
            if g.chance(50) {
                let b = g.int(1, 8) as f64 * 0.5;
                c.float("bias", b);
            }
            c.input(g.floats_any(&s));
            c
        }
        "Softmax" | "LogSoftmax" | "Hardmax" => softmax(op, g),
        "ArgMax" | "ArgMin" => arg(op, g),
        _ if op.starts_with("Reduce") => reduce(op, g),
        _ => return None,
    })
}

/// (N, C, spatial...) of rank lo..=hi.
fn channels_first(g: &mut Gen, lo: usize, hi: usize) -> Vec<usize> {
    let r = g.size(lo, hi);
    let mut s = vec![g.size(1, 2), g.size(1, 4)];
    s.extend((2..r).map(|_| g.size(1, 5)));
    s
}

fn epsilon(c: &mut Case, g: &mut Gen) {
    if g.chance(40) {
        let e = g.pick(&[1e-3, 1e-2, 0.5, 1e-6]);
        c.float("epsilon", e);
    }
}

fn batch_norm(g: &mut Gen) -> Case {
    let opset = g.pick(&[15, 14, 9]);
    let s = channels_first(g, 2, 5);
    let ch = s[1];
    let mut c = Case::new("BatchNormalization", opset, g.seed);
    epsilon(&mut c, g);
    if g.chance(20) {
        c.float("momentum", 0.8);
    }
    if opset >= 14 && g.chance(20) {
        c.int("training_mode", 0);
    }
    c.input(g.floats_any(&s));
    c.input(g.floats_any(&[ch]));
    c.input(g.floats_any(&[ch]));
    c.input(g.floats_any(&[ch]));
    c.input(g.floats(&[ch], Dist::Range(0.1, 3.0)));
    c
}

fn layer_norm(g: &mut Gen) -> Case {
    let x = g.shape(1, 4, false);
    let r = x.len();
    let axis = g.size(0, r - 1);
    let mut c = Case::new("LayerNormalization", 17, g.seed);
    if axis != r - 1 || g.chance(30) {
        let a = g.signed_axis(axis, r);
        c.int("axis", a);
    }
    epsilon(&mut c, g);
    if g.chance(20) {
        c.int("stash_type", 1);
    }
    let tail = &x[axis..];
    c.input(g.floats_any(&x));
    c.input(g.floats_any(tail));
    if g.chance(60) {
        c.input(g.floats_any(tail));
    }
    if g.chance(30) {
        let n = g.size(2, 3);
        c.outputs(n);
    }
    c
}

fn group_norm(g: &mut Gen) -> Case {
    let opset = g.pick(&[21, 18]);
    let groups = g.size(1, 3);
    let per = g.size(1, 3);
    let r = g.size(3, 4);
    let mut s = vec![g.size(1, 2), groups * per];
    s.extend((2..r).map(|_| g.size(1, 4)));
    let mut c = Case::new("GroupNormalization", opset, g.seed);
    c.int("num_groups", groups as i64);
    epsilon(&mut c, g);
    if opset >= 21 && g.chance(20) {
        c.int("stash_type", 1);
    }
    // Opset 18 takes one scale and bias per group, 21 one per channel.
    let p = if opset >= 21 { s[1] } else { groups };
    c.input(g.floats_any(&s));
    c.input(g.floats_any(&[p])).input(g.floats_any(&[p]));
    c
}

fn softmax(op: &'static str, g: &mut Gen) -> Case {
    let opset = g.pick(&[13, 11, 1]);
    let x = g.shape(1, 4, true);
    let r = x.len();
    let mut c = Case::new(op, opset, g.seed);
    // The default axis is -1 from opset 13, 1 before: rank 1 needs it given.
    let default = if opset >= 13 { r - 1 } else { 1 };
    let axis = g.size(0, r - 1);
    if axis != default || g.chance(30) {
        let a = g.signed_axis(axis, r);
        c.int("axis", a);
    }
    let mut v = match g.int(0, 5) {
        0 if op != "Hardmax" => g.floats(&x, Dist::Signed(60.0)),
        1 | 2 if op == "Hardmax" => g.floats(&x, Dist::Halves(1.0)),
        _ => g.floats_any(&x),
    };
    g.maybe_nan(&mut v, 10);
    c.input(v);
    c
}

fn arg(op: &'static str, g: &mut Gen) -> Case {
    let opset = g.pick(&[13, 12, 11]);
    let x = g.shape(1, 4, false);
    let r = x.len();
    let mut c = Case::new(op, opset, g.seed);
    let axis = g.size(0, r - 1);
    if axis != 0 || g.chance(30) {
        let a = g.signed_axis(axis, r);
        c.int("axis", a);
    }
    if g.chance(50) {
        let k = g.int(0, 1);
        c.int("keepdims", k);
    }
    if opset >= 12 && g.chance(50) {
        let k = g.int(0, 1);
        c.int("select_last_index", k);
    }
    let mut v = if g.chance(50) {
        g.floats(&x, Dist::Halves(1.0))
    } else {
        g.floats_any(&x)
    };
    g.maybe_nan(&mut v, 10);
    c.input(v);
    c
}

fn reduce(op: &'static str, g: &mut Gen) -> Case {
    let opsets: &[i64] = match op {
        "ReduceSum" => &[13, 11, 1],
        "ReduceMax" | "ReduceMin" => &[20, 18, 13, 12, 11, 1],
        _ => &[18, 13, 11, 1],
    };
    let opset = g.pick(opsets);
    let axes_input = if op == "ReduceSum" {
        opset >= 13
    } else {
        opset >= 18
    };
    // Max and Min of an empty set are defined (as -inf / +inf) from opset 18.
    let empty_ok = !matches!(op, "ReduceMax" | "ReduceMin") || opset >= 18;
    let x = g.shape(0, 4, empty_ok);
    let r = x.len();
    let mut c = Case::new(op, opset, g.seed);
    let all = g.chance(25);
    let axes: Vec<usize> = if all { vec![] } else { g.subset(r, true) };
    let written: Vec<i64> = axes.iter().map(|&a| g.signed_axis(a, r)).collect();
    if g.chance(60) {
        let k = g.int(0, 1);
        c.int("keepdims", k);
    }
    let noop = axes_input && axes.is_empty() && !all && g.chance(50);
    if noop {
        c.int("noop_with_empty_axes", 1);
    }
    let dtype =
        if matches!(op, "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceProd") && g.chance(15) {
            DType::I64
        } else {
            DType::F32
        };
    let mut v = match op {
        _ if dtype == DType::I64 => g.ints(DType::I64, &x, -5, 5),
        "ReduceLogSum" => g.floats(&x, Dist::Range(0.05, 3.0)),
        "ReduceProd" => g.floats(&x, Dist::Signed(1.5)),
        "ReduceLogSumExp" if g.chance(30) => g.floats(&x, Dist::Signed(60.0)),
        _ => g.floats_any(&x),
    };
    if dtype == DType::F32 && matches!(op, "ReduceMax" | "ReduceMin") {
        // The max / min of values with a NaN among them is NaN (ArgMax / ArgMin point at it).
        g.maybe_nan(&mut v, 10);
    }
    c.input(v);
    if all {
        // no axes: reduce over every dim
    } else if axes_input {
        if !axes.is_empty() || noop || g.chance(50) {
            c.input(i64s(&written));
        }
    } else if !axes.is_empty() {
        c.ints("axes", written);
    }
    c
}
