//! MatMul, Gemm, Einsum, Conv, ConvTranspose and pooling.
use super::{Case, Dist, Gen};

pub(super) fn generate(op: &'static str, g: &mut Gen) -> Option<Case> {
    Some(match op {
        "MatMul" => matmul(g),
        "Gemm" => gemm(g),
        "Einsum" => einsum(g),
        "Conv" => conv(g),
        "ConvTranspose" => conv_transpose(g),
        "MaxPool" | "AveragePool" | "LpPool" => pool(op, g),
        "GlobalAveragePool" | "GlobalMaxPool" => {
            let opset = g.pick(&[22, 1]);
            let mut s = vec![g.size(1, 2), g.size(1, 3)];
            let sp = g.size(1, 3);
            s.extend((0..sp).map(|_| g.size(1, 5)));
            let mut c = Case::new(op, opset, g.seed);
            let mut x = g.floats_any(&s);
            g.maybe_nan(&mut x, 10);
            c.input(x);
            c
        }
        _ => return super::norm::generate(op, g),
    })
}

fn matmul(g: &mut Gen) -> Case {
    let opset = g.pick(&[13, 9, 1]);
    let (m, n) = (g.dim(), g.dim());
    let k = if g.chance(4) { 0 } else { g.dim() };
    let (ra, rb) = (g.size(1, 4), g.size(1, 4));
    let batch = g.shape(
        ra.max(rb).saturating_sub(2),
        ra.max(rb).saturating_sub(2),
        false,
    );
    let side = |g: &mut Gen, rank: usize, last: [usize; 2]| -> Vec<usize> {
        if rank == 1 {
            return vec![k];
        }
        let mut s: Vec<usize> = batch[batch.len() - (rank - 2)..]
            .iter()
            .map(|&d| if g.chance(25) { 1 } else { d })
            .collect();
        s.extend(last);
        s
    };
    let a = side(g, ra, [m, k]);
    let b = side(g, rb, [k, n]);
    let mut c = Case::new("MatMul", opset, g.seed);
    c.input(g.floats_any(&a)).input(g.floats_any(&b));
    c
}

/// Einsum: one to three operands over up to five letters of sizes 1-4, each operand a random
/// ordering of some of them; sometimes a letter twice in one operand (a diagonal), an ellipsis over
/// leading dims (size 1 in some operands: broadcast), an explicit output (a permutation of some
/// of the letters, the ellipsis kept or dropped) or the implicit one.
fn einsum(g: &mut Gen) -> Case {
    let opset = g.pick(&[12, 28]);
    let letters: Vec<char> = "abcde".chars().take(g.size(1, 5)).collect();
    let sizes: Vec<usize> = letters.iter().map(|_| g.size(1, 4)).collect();
    let n_ops = g.size(1, 3);
    let ellipsis = g.chance(20);
    let ell: Vec<usize> = if ellipsis {
        (0..g.size(0, 2)).map(|_| g.size(1, 3)).collect()
    } else {
        vec![]
    };
    let mut terms = Vec::new();
    let mut shapes = Vec::new();
    let mut used = Vec::new();
    for _ in 0..n_ops {
        let picked = g.subset(letters.len(), true);
        let mut term: Vec<usize> = g.perm(picked.len()).iter().map(|&i| picked[i]).collect();
        if !term.is_empty() && g.chance(10) {
            let at = g.size(0, term.len() - 1);
            let l = term[g.size(0, term.len() - 1)];
            term.insert(at, l);
        }
        let mut text: String = term.iter().map(|&i| letters[i]).collect();
        let mut shape: Vec<usize> = term.iter().map(|&i| sizes[i]).collect();
        if ellipsis && g.chance(75) {
            // The ellipsis's trailing dims of `ell`, each 1 sometimes (broadcast).
            let k = g.size(0, ell.len());
            let dims: Vec<usize> = ell[ell.len() - k..]
                .iter()
                .map(|&d| if g.chance(25) { 1 } else { d })
                .collect();
            let at = g.size(0, term.len());
            text.insert_str(at, "...");
            shape.splice(at..at, dims);
        }
        used.extend(term);
        terms.push(text);
        shapes.push(shape);
    }
    let mut eq = terms.join(",");
    if g.chance(70) {
        used.sort_unstable();
        used.dedup();
        let kept: Vec<usize> = used.iter().copied().filter(|_| g.chance(60)).collect();
        let out: Vec<usize> = g.perm(kept.len()).iter().map(|&i| kept[i]).collect();
        let mut rhs: String = out.iter().map(|&i| letters[i]).collect();
        if eq.contains("...") && g.chance(80) {
            let at = g.size(0, rhs.len());
            rhs.insert_str(at, "...");
        }
        eq = format!("{eq}->{rhs}");
    }
    let mut c = Case::new("Einsum", opset, g.seed);
    c.string("equation", &eq);
    for s in &shapes {
        c.input(g.floats_any(s));
    }
    c
}

fn gemm(g: &mut Gen) -> Case {
    let opset = g.pick(&[13, 11, 9, 7]);
    let (m, k, n) = (g.dim(), g.dim(), g.dim());
    let (ta, tb) = (g.chance(40), g.chance(40));
    let mut c = Case::new("Gemm", opset, g.seed);
    if ta || g.chance(20) {
        c.int("transA", ta as i64);
    }
    if tb || g.chance(20) {
        c.int("transB", tb as i64);
    }
    if g.chance(50) {
        let a = g.int(-8, 16) as f64 * 0.25;
        c.float("alpha", a);
    }
    if g.chance(50) {
        let b = g.int(-8, 16) as f64 * 0.25;
        c.float("beta", b);
    }
    let a = if ta { vec![k, m] } else { vec![m, k] };
    let b = if tb { vec![n, k] } else { vec![k, n] };
    c.input(g.floats_any(&a)).input(g.floats_any(&b));
    let shapes = [
        vec![m, n],
        vec![n],
        vec![1, n],
        vec![m, 1],
        vec![],
        vec![1, 1],
        vec![1],
    ];
    if opset < 11 || !g.chance(25) {
        let s = g.pick(&shapes);
        c.input(g.floats_any(&s));
    }
    c
}

/// Explicit pads, or an auto_pad mode; `max_pad[i]` bounds each explicit pad.
fn pads_or_auto(c: &mut Case, g: &mut Gen, max_pad: &[usize]) -> (String, Vec<usize>) {
    let sp = max_pad.len();
    let mode = match g.int(0, 9) {
        7 => "SAME_UPPER",
        8 => "SAME_LOWER",
        9 => "VALID",
        _ => "NOTSET",
    };
    let mut pads = vec![0; 2 * sp];
    if mode == "NOTSET" {
        if g.chance(70) {
            for (i, p) in pads.iter_mut().enumerate() {
                *p = g.size(0, max_pad[i % sp]);
            }
            c.ints("pads", pads.iter().map(|&p| p as i64).collect());
        }
        if g.chance(15) {
            c.string("auto_pad", "NOTSET");
        }
    } else {
        c.string("auto_pad", mode);
    }
    (mode.to_string(), pads)
}

/// Smallest input extent that leaves at least one output position for a window of extent `eff`.
fn min_input(mode: &str, eff: usize, pb: usize, pe: usize) -> usize {
    match mode {
        "SAME_UPPER" | "SAME_LOWER" => 1,
        "VALID" => eff,
        _ => eff.saturating_sub(pb + pe).max(1),
    }
}

fn conv(g: &mut Gen) -> Case {
    let opset = g.pick(&[22, 11, 1]);
    let (mut c, x, w) = conv_layout(g, "Conv", opset);
    c.input(g.floats_any(&x))
        .input(g.floats(&w, Dist::Signed(1.0)));
    if g.chance(60) {
        c.input(g.floats_any(&[w[0]]));
    }
    c
}

/// A convolution's attributes (1-D to 3-D; groups, depthwise too; strides, dilations, pads or
/// auto_pad) on a case of `op`, with X's and W's shapes to fill.
pub(super) fn conv_layout(
    g: &mut Gen,
    op: &'static str,
    opset: i64,
) -> (Case, Vec<usize>, Vec<usize>) {
    let sp = g.pick(&[2, 1, 3]);
    let kmax = if sp == 3 { 2 } else { 3 };
    let nb = g.size(1, 2);
    let (group, cin_g, m_g) = match g.int(0, 5) {
        0..=2 => (1, g.size(1, 3), g.size(1, 3)),
        3 | 4 => (g.size(2, 3), g.size(1, 2), g.size(1, 2)),
        // depthwise (channel multiplier 1 or 2)
        _ => (g.size(2, 4), 1, g.size(1, 2)),
    };
    let kernel: Vec<usize> = (0..sp).map(|_| g.size(1, kmax)).collect();
    let mut c = Case::new(op, opset, g.seed);
    let strides: Vec<usize> = if g.chance(40) {
        (0..sp).map(|_| g.size(1, 3)).collect()
    } else {
        vec![1; sp]
    };
    let dil: Vec<usize> = if g.chance(35) {
        (0..sp).map(|_| g.size(1, 2)).collect()
    } else {
        vec![1; sp]
    };
    if strides.iter().any(|&s| s != 1) || g.chance(20) {
        c.ints("strides", strides.iter().map(|&s| s as i64).collect());
    }
    if dil.iter().any(|&d| d != 1) || g.chance(20) {
        c.ints("dilations", dil.iter().map(|&d| d as i64).collect());
    }
    if group > 1 || g.chance(20) {
        c.int("group", group as i64);
    }
    if g.chance(50) {
        c.ints("kernel_shape", kernel.iter().map(|&k| k as i64).collect());
    }
    let eff: Vec<usize> = (0..sp).map(|i| (kernel[i] - 1) * dil[i] + 1).collect();
    let (mode, pads) = pads_or_auto(&mut c, g, &eff);
    let mut x = vec![nb, group * cin_g];
    for i in 0..sp {
        let need = min_input(&mode, eff[i], pads[i], pads[i + sp]);
        let d = if sp == 3 { g.size(1, 4) } else { g.dim() };
        x.push(d.max(need));
    }
    let mut w = vec![group * m_g, cin_g];
    w.extend(&kernel);
    (c, x, w)
}

fn conv_transpose(g: &mut Gen) -> Case {
    let opset = g.pick(&[22, 11, 1]);
    let sp = g.pick(&[2, 1, 3]);
    let kmax = if sp == 3 { 2 } else { 3 };
    let nb = g.size(1, 2);
    let group = if g.chance(30) { g.size(2, 3) } else { 1 };
    let (cin_g, m_g) = (g.size(1, 2), g.size(1, 3));
    let kernel: Vec<usize> = (0..sp).map(|_| g.size(1, kmax)).collect();
    let strides: Vec<usize> = (0..sp)
        .map(|_| if g.chance(45) { g.size(2, 3) } else { 1 })
        .collect();
    let dil: Vec<usize> = (0..sp).map(|_| if g.chance(25) { 2 } else { 1 }).collect();
    let input: Vec<usize> = (0..sp)
        .map(|_| if sp == 3 { g.size(1, 3) } else { g.size(1, 5) })
        .collect();
    let mut c = Case::new("ConvTranspose", opset, g.seed);
    if strides.iter().any(|&s| s != 1) || g.chance(20) {
        c.ints("strides", strides.iter().map(|&s| s as i64).collect());
    }
    if dil.iter().any(|&d| d != 1) || g.chance(20) {
        c.ints("dilations", dil.iter().map(|&d| d as i64).collect());
    }
    if group > 1 || g.chance(20) {
        c.int("group", group as i64);
    }
    if g.chance(50) {
        c.ints("kernel_shape", kernel.iter().map(|&k| k as i64).collect());
    }
    // output_padding < max(stride, dilation)
    let opad: Vec<usize> = if g.chance(30) {
        (0..sp)
            .map(|i| g.size(0, strides[i].max(dil[i]) - 1))
            .collect()
    } else {
        vec![0; sp]
    };
    if opad.iter().any(|&p| p != 0) {
        c.ints("output_padding", opad.iter().map(|&p| p as i64).collect());
    }
    let eff: Vec<usize> = (0..sp).map(|i| (kernel[i] - 1) * dil[i] + 1).collect();
    let full: Vec<usize> = (0..sp)
        .map(|i| strides[i] * (input[i] - 1) + opad[i] + eff[i])
        .collect();
    match g.int(0, 9) {
        // output_shape (pads then derived; SAME_LOWER puts the odd pad first)
        0 | 1 => {
            let out: Vec<i64> = (0..sp).map(|i| g.size(1, full[i]) as i64).collect();
            c.ints("output_shape", out);
            if g.chance(50) {
                c.string("auto_pad", g.pick(&["SAME_UPPER", "SAME_LOWER"]));
            }
        }
        // SAME_*: output = input * stride, where that is no larger than the full output
        2 if (0..sp).all(|i| input[i] * strides[i] <= full[i]) => {
            c.string("auto_pad", g.pick(&["SAME_UPPER", "SAME_LOWER"]));
        }
        3 => {
            c.string("auto_pad", "VALID");
        }
        _ => {
            if g.chance(70) {
                let mut pads = vec![0i64; 2 * sp];
                for i in 0..sp {
                    // leave at least one output position
                    let total = g.size(0, full[i] - 1);
                    let b = g.size(0, total);
                    pads[i] = b as i64;
                    pads[i + sp] = (total - b) as i64;
                }
                c.ints("pads", pads);
            }
        }
    }
    let mut x = vec![nb, group * cin_g];
    x.extend(&input);
    let mut w = vec![group * cin_g, m_g];
    w.extend(&kernel);
    c.input(g.floats_any(&x))
        .input(g.floats(&w, Dist::Signed(1.0)));
    if g.chance(50) {
        c.input(g.floats_any(&[group * m_g]));
    }
    c
}

fn pool(op: &'static str, g: &mut Gen) -> Case {
    let opsets: &[i64] = match op {
        "MaxPool" => &[22, 12, 11, 10, 8],
        "AveragePool" => &[22, 19, 11, 10, 7],
        _ => &[22, 18, 11, 2],
    };
    let opset = g.pick(opsets);
    let sp = g.pick(&[2, 1, 3]);
    let kmax = if sp == 3 { 2 } else { 3 };
    let kernel: Vec<usize> = (0..sp).map(|_| g.size(1, kmax)).collect();
    let mut c = Case::new(op, opset, g.seed);
    c.ints("kernel_shape", kernel.iter().map(|&k| k as i64).collect());
    let strides: Vec<usize> = if g.chance(50) {
        (0..sp).map(|_| g.size(1, 3)).collect()
    } else {
        vec![1; sp]
    };
    if strides.iter().any(|&s| s != 1) || g.chance(20) {
        c.ints("strides", strides.iter().map(|&s| s as i64).collect());
    }
    let dilations_ok = match op {
        "MaxPool" => opset >= 10,
        "AveragePool" => opset >= 19,
        _ => opset >= 18,
    };
    let dil: Vec<usize> = if dilations_ok && g.chance(30) {
        (0..sp).map(|_| g.size(1, 2)).collect()
    } else {
        vec![1; sp]
    };
    if dil.iter().any(|&d| d != 1) {
        c.ints("dilations", dil.iter().map(|&d| d as i64).collect());
    }
    // Pads stay below the kernel extent; with dilations or auto_pad a window can still lie wholly in
    // the padding (a valid node: its max is -inf and its index -1, see the oracles).
    let max_pad: Vec<usize> = kernel.iter().map(|&k| k - 1).collect();
    let (mode, pads) = pads_or_auto(&mut c, g, &max_pad);
    let ceil_ok = match op {
        "LpPool" => opset >= 18,
        _ => opset >= 10,
    };
    if ceil_ok && mode != "SAME_UPPER" && mode != "SAME_LOWER" && g.chance(35) {
        c.int("ceil_mode", 1);
    }
    let mut two_outputs = false;
    match op {
        "MaxPool" => {
            if opset >= 8 && g.chance(35) {
                two_outputs = true;
                c.outputs(2);
            }
            if opset >= 8 && g.chance(30) {
                let so = g.int(0, 1);
                c.int("storage_order", so);
            }
        }
        "AveragePool" => {
            if g.chance(40) {
                let v = g.int(0, 1);
                c.int("count_include_pad", v);
            }
        }
        _ => {
            if g.chance(60) {
                let p = g.int(1, 3);
                c.int("p", p);
            }
        }
    }
    let eff: Vec<usize> = (0..sp).map(|i| (kernel[i] - 1) * dil[i] + 1).collect();
    let mut x = vec![g.size(1, 2), g.size(1, 3)];
    for i in 0..sp {
        let need = min_input(&mode, eff[i], pads[i], pads[i + sp]);
        let d = if sp == 3 { g.size(1, 4) } else { g.dim() };
        x.push(d.max(need));
    }
    let mut v = if two_outputs {
        g.floats(&x, Dist::Distinct)
    } else {
        g.floats_any(&x)
    };
    if op == "MaxPool" {
        // NaN makes a window's max NaN and its index the first NaN's (see the oracles).
        g.maybe_nan(&mut v, 10);
    }
    c.input(v);
    c
}
