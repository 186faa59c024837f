//! LSTM and GRU, step by step; gate pre-activations are compensated dot products.
//!
//! Covered: directions forward/reverse/bidirectional, layout 0/1, biases, sequence_lens, initial states,
//! LSTM peepholes, clip, GRU linear_before_reset, activations among Sigmoid/Tanh/Relu.
//! Not covered: LSTM input_forget=1, parameterised activations.
use super::*;

pub(super) const OPS: &[&str] = &["LSTM", "GRU"];

const ACTS: &[&str] = &["Sigmoid", "Tanh", "Relu"];

fn activations(node: &NodeSpec) -> Result<Option<Vec<String>>, String> {
    match node.attrs.get("activations") {
        None => Ok(None),
        Some(crate::Attr::Strings(v)) => Ok(Some(v.clone())),
        Some(a) => Err(format!("activations must be strings, got {a:?}")),
    }
}

pub(super) fn check(node: &NodeSpec) -> Result<(), String> {
    if let Some(acts) = activations(node)? {
        if let Some(a) = acts.iter().find(|a| !ACTS.contains(&a.as_str())) {
            return Err(format!("{} activation '{a}' is not covered", node.op_type));
        }
    }
    let e = |r: Result<i64, OracleError>| r.map_err(|e| e.to_string());
    if node.op_type == "LSTM" && e(node.int("input_forget", 0))? != 0 {
        return Err("LSTM input_forget=1 is not covered".into());
    }
    let d = node
        .string("direction", "forward")
        .map_err(|e| e.to_string())?;
    if !matches!(d.as_str(), "forward" | "reverse" | "bidirectional") {
        return Err(format!("direction '{d}' is not covered"));
    }
    Ok(())
}

fn act(name: &str, x: f64) -> f64 {
    match name {
        "Sigmoid" => 1.0 / (1.0 + (-x).exp()),
        "Tanh" => x.tanh(),
        _ => x.max(0.0),
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    let mut acc = Neumaier::default();
    for (x, y) in a.iter().zip(b) {
        acc.add(x * y);
    }
    acc.value()
}

pub(super) fn eval(node: &NodeSpec, inputs: &[Option<Value>]) -> Result<Vec<Output>, OracleError> {
    let lstm = node.op_type == "LSTM";
    let x = input(node, inputs, 0)?;
    let w = input(node, inputs, 1)?;
    let r = input(node, inputs, 2)?;
    let b = opt_input(inputs, 3);
    let seq_lens = opt_input(inputs, 4);
    let h0 = opt_input(inputs, 5);
    let c0 = if lstm { opt_input(inputs, 6) } else { None };
    let peep = if lstm { opt_input(inputs, 7) } else { None };
    let layout = node.int("layout", 0)?;
    let dir = node.string("direction", "forward")?;
    let nd = if dir == "bidirectional" { 2 } else { 1 };
    let gates = if lstm { 4 } else { 3 };
    if x.shape.len() != 3 || w.shape.len() != 3 || r.shape.len() != 3 {
        return invalid("RNN inputs X, W, R must be 3-D");
    }
    let (seq, batch) = if layout == 0 {
        (x.shape[0], x.shape[1])
    } else {
        (x.shape[1], x.shape[0])
    };
    let isz = x.shape[2];
    let h = r.shape[2];
    if w.shape != [nd, gates * h, isz] || r.shape != [nd, gates * h, h] {
        return invalid(format!(
            "W {:?} / R {:?} do not match directions {nd}, hidden {h}, input {isz}",
            w.shape, r.shape
        ));
    }
    let default_acts: Vec<&str> = if lstm {
        vec!["Sigmoid", "Tanh", "Tanh"]
    } else {
        vec!["Sigmoid", "Tanh"]
    };
    let per = default_acts.len();
    let acts: Vec<String> = match activations(node).map_err(OracleError::Invalid)? {
        Some(a) if a.len() == per * nd => a,
        Some(a) if a.len() == per && nd == 2 => a.iter().chain(a.iter()).cloned().collect(),
        Some(a) => return invalid(format!("{} activations for {nd} directions", a.len())),
        None => (0..nd)
            .flat_map(|_| default_acts.iter().map(|s| s.to_string()))
            .collect(),
    };
    let clip = node.float("clip", f64::INFINITY)?;
    let lbr = node.int("linear_before_reset", 0)? != 0;
    // X element (t, n, i).
    let xat = |t: usize, n: usize| -> &[f64] {
        let off = if layout == 0 {
            (t * batch + n) * isz
        } else {
            (n * seq + t) * isz
        };
        &x.data[off..off + isz]
    };
    let state_at = |v: &Value, d: usize, n: usize| -> Vec<f64> {
        let off = if layout == 0 {
            (d * batch + n) * h
        } else {
            (n * nd + d) * h
        };
        v.data[off..off + h].to_vec()
    };
    let mut y = vec![0.0; seq * nd * batch * h];
    let mut yh = vec![0.0; nd * batch * h];
    let mut yc = vec![0.0; nd * batch * h];
    let y_index = |t: usize, d: usize, n: usize, j: usize| {
        if layout == 0 {
            ((t * nd + d) * batch + n) * h + j
        } else {
            ((n * seq + t) * nd + d) * h + j
        }
    };
    let s_index = |d: usize, n: usize, j: usize| {
        if layout == 0 {
            (d * batch + n) * h + j
        } else {
            (n * nd + d) * h + j
        }
    };
    for d in 0..nd {
        let reverse = dir == "reverse" || d == 1;
        let wd = &w.data[d * gates * h * isz..(d + 1) * gates * h * isz];
        let rd = &r.data[d * gates * h * h..(d + 1) * gates * h * h];
        let bias = |k: usize| -> f64 { b.map(|b| b.data[d * 2 * gates * h + k]).unwrap_or(0.0) };
        let rbias = |k: usize| -> f64 {
            b.map(|b| b.data[d * 2 * gates * h + gates * h + k])
                .unwrap_or(0.0)
        };
        let f = &acts[d * per];
        let g = &acts[d * per + 1];
        let hh = if lstm {
            acts[d * per + 2].clone()
        } else {
            String::new()
        };
        for n in 0..batch {
            let len = seq_lens.map(|s| s.data[n] as usize).unwrap_or(seq).min(seq);
            let mut hs = h0
                .map(|v| state_at(v, d, n))
                .unwrap_or_else(|| vec![0.0; h]);
            let mut cs = c0
                .map(|v| state_at(v, d, n))
                .unwrap_or_else(|| vec![0.0; h]);
            for step in 0..len {
                let t = if reverse { len - 1 - step } else { step };
                let xt = xat(t, n);
                // pre[k] = W_k . x + R_k . h + Wb_k + Rb_k (GRU's h gate assembled below).
                let xw: Vec<f64> = (0..gates * h)
                    .map(|k| dot(&wd[k * isz..(k + 1) * isz], xt) + bias(k))
                    .collect();
                let hr: Vec<f64> = (0..gates * h)
                    .map(|k| dot(&rd[k * h..(k + 1) * h], &hs) + rbias(k))
                    .collect();
                let cl = |v: f64| v.clamp(-clip, clip);
                let mut nh = vec![0.0; h];
                if lstm {
                    let mut nc = vec![0.0; h];
                    let p = |k: usize| peep.map(|p| p.data[d * 3 * h + k]).unwrap_or(0.0);
                    for j in 0..h {
                        // gate order i, o, f, c; peepholes i, o, f.
                        let i = act(f, cl(xw[j] + hr[j] + p(j) * cs[j]));
                        let fg = act(f, cl(xw[2 * h + j] + hr[2 * h + j] + p(2 * h + j) * cs[j]));
                        let cc = act(g, cl(xw[3 * h + j] + hr[3 * h + j]));
                        nc[j] = fg * cs[j] + i * cc;
                        let o = act(f, cl(xw[h + j] + hr[h + j] + p(h + j) * nc[j]));
                        nh[j] = o * act(&hh, nc[j]);
                    }
                    cs = nc;
                } else {
                    // gate order z, r, h.
                    let rg: Vec<f64> = (0..h).map(|j| act(f, cl(xw[h + j] + hr[h + j]))).collect();
                    let rh: Vec<f64> = (0..h).map(|j| rg[j] * hs[j]).collect();
                    for j in 0..h {
                        let z = act(f, cl(xw[j] + hr[j]));
                        let pre = if lbr {
                            xw[2 * h + j] + rg[j] * hr[2 * h + j]
                        } else {
                            xw[2 * h + j]
                                + dot(&rd[(2 * h + j) * h..(2 * h + j + 1) * h], &rh)
                                + rbias(2 * h + j)
                        };
                        let ht = act(g, cl(pre));
                        nh[j] = (1.0 - z) * ht + z * hs[j];
                    }
                }
                hs = nh;
                for j in 0..h {
                    y[y_index(t, d, n, j)] = hs[j];
                }
            }
            for j in 0..h {
                yh[s_index(d, n, j)] = hs[j];
                yc[s_index(d, n, j)] = cs[j];
            }
        }
    }
    let y_shape = if layout == 0 {
        vec![seq, nd, batch, h]
    } else {
        vec![batch, seq, nd, h]
    };
    let s_shape = if layout == 0 {
        vec![nd, batch, h]
    } else {
        vec![batch, nd, h]
    };
    let ones = |v: &Vec<f64>| v.iter().map(|x| 1.0 + x.abs()).collect::<Vec<f64>>();
    let mut outs = vec![make_output(x.dtype, y_shape, y.clone(), ones(&y))?];
    if node.num_outputs > 1 {
        outs.push(make_output(
            x.dtype,
            s_shape.clone(),
            yh.clone(),
            ones(&yh),
        )?);
    }
    if lstm && node.num_outputs > 2 {
        outs.push(make_output(x.dtype, s_shape, yc.clone(), ones(&yc))?);
    }
    Ok(outs)
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;
    use crate::Attr;

    fn sig(x: f64) -> f64 {
        1.0 / (1.0 + (-x).exp())
    }

    #[test]
    fn lstm_one_unit_by_hand() {
        // hidden 1, input 1, two steps; W = [i, o, f, c] weights, R = 0.
        let w = vec![0.5, -0.3, 0.8, 0.2];
        let xs = vec![1.0, -2.0];
        let mut nd = node("LSTM", 14, vec![("hidden_size", Attr::Int(1))]);
        nd.num_outputs = 3;
        let out = eval(
            &nd,
            &[
                f32v(&[2, 1, 1], xs.clone()),
                f32v(&[1, 4, 1], w.clone()),
                f32v(&[1, 4, 1], vec![0.0; 4]),
            ],
        )
        .unwrap();
        let (mut h, mut c) = (0.0, 0.0);
        let mut ys = vec![];
        for &x in &xs {
            let i = sig(w[0] * x);
            let o = sig(w[1] * x);
            let f = sig(w[2] * x);
            let g = (w[3] * x).tanh();
            c = f * c + i * g;
            h = o * c.tanh();
            ys.push(h);
        }
        assert!(close(&out[0].value.data, &ys, 1e-14));
        assert!((out[1].value.data[0] - h).abs() < 1e-14);
        assert!((out[2].value.data[0] - c).abs() < 1e-14);
    }

    #[test]
    fn gru_random_against_formula_and_reverse() {
        let mut r = SplitMix64(61);
        let (hsz, isz) = (2, 3);
        let w = r.values(3 * hsz * isz);
        let rr = r.values(3 * hsz * hsz);
        let xs = r.values(2 * isz);
        let bias = r.values(6 * hsz);
        let run = |dir: &str, lbr: i64| {
            let mut nd = node(
                "GRU",
                14,
                vec![
                    ("hidden_size", Attr::Int(hsz as i64)),
                    ("direction", Attr::String(dir.into())),
                    ("linear_before_reset", Attr::Int(lbr)),
                ],
            );
            nd.num_outputs = 2;
            eval(
                &nd,
                &[
                    f32v(&[2, 1, isz], xs.clone()),
                    f32v(&[1, 3 * hsz, isz], w.clone()),
                    f32v(&[1, 3 * hsz, hsz], rr.clone()),
                    f32v(&[1, 6 * hsz], bias.clone()),
                ],
            )
            .unwrap()
        };
        let direct = |order: &[usize], lbr: bool| {
            let mut hs = vec![0.0; hsz];
            let mut ys = vec![vec![0.0; hsz]; 2];
            for &t in order {
                let x = &xs[t * isz..(t + 1) * isz];
                let row = |m: &[f64], k: usize, v: &[f64], n: usize| {
                    (0..n).map(|q| m[k * n + q] * v[q]).sum::<f64>()
                };
                let mut nh = vec![0.0; hsz];
                let rg: Vec<f64> = (0..hsz)
                    .map(|j| {
                        sig(row(&w, hsz + j, x, isz)
                            + row(&rr, hsz + j, &hs, hsz)
                            + bias[hsz + j]
                            + bias[4 * hsz + j])
                    })
                    .collect();
                for j in 0..hsz {
                    let z = sig(row(&w, j, x, isz)
                        + row(&rr, j, &hs, hsz)
                        + bias[j]
                        + bias[3 * hsz + j]);
                    let pre = if lbr {
                        row(&w, 2 * hsz + j, x, isz)
                            + bias[2 * hsz + j]
                            + rg[j] * (row(&rr, 2 * hsz + j, &hs, hsz) + bias[5 * hsz + j])
                    } else {
                        let rh: Vec<f64> = (0..hsz).map(|q| rg[q] * hs[q]).collect();
                        row(&w, 2 * hsz + j, x, isz)
                            + bias[2 * hsz + j]
                            + row(&rr, 2 * hsz + j, &rh, hsz)
                            + bias[5 * hsz + j]
                    };
                    nh[j] = (1.0 - z) * pre.tanh() + z * hs[j];
                }
                hs = nh;
                ys[t] = hs.clone();
            }
            (ys.concat(), hs)
        };
        for lbr in [0, 1] {
            let f = run("forward", lbr);
            let (ys, hl) = direct(&[0, 1], lbr == 1);
            assert!(close(&f[0].value.data, &ys, 1e-13));
            assert!(close(&f[1].value.data, &hl, 1e-13));
            let rv = run("reverse", lbr);
            let (ys, hl) = direct(&[1, 0], lbr == 1);
            assert!(close(&rv[0].value.data, &ys, 1e-13));
            assert!(close(&rv[1].value.data, &hl, 1e-13));
        }
    }
}
