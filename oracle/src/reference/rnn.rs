//! LSTM and GRU, one time step at a time as the operator specification writes the equations
//! (opsets 1, 3, 7, 14, 22): every activation of the spec's list, forward / reverse / bidirectional,
//! sequence_lens, initial_h / initial_c, peepholes, input_forget, clip, linear_before_reset, layout.
//!
//! Readings the specification leaves open, settled here:
//! - `activation_alpha` / `activation_beta` are "consumed in the order of activation functions": each
//!   function that takes an alpha (beta) takes the next unused one, the others take none; a function
//!   left without one uses its ONNX operator's default (onnxruntime reads it the same way).
//! - `clip` bounds "the input of activations" of the gates: the pre-activations of f and g (LSTM's
//!   i, f, c~, o; GRU's z, r, h~) are clipped. LSTM's h(Ct) takes the cell state unclipped, and the
//!   cell state itself is never clipped. (ONNX's reference evaluator ignores `clip`; onnxruntime
//!   and the independent oracle clip the gate pre-activations only, and this follows them.)
//! - `input_forget=1` couples the gates as ft = 1 - it.
//! - A batch entry with sequence length L < seq_length runs L steps (reverse: from L-1 down to 0);
//!   Y is 0 at its steps t >= L and Y_h / Y_c hold its state after its last step (the initial state
//!   when L = 0).
use super::{input, opt_input, output};
use crate::{Attr, DType, NodeSpec, OracleError, Output, Value};

pub(super) fn covers(op: &str) -> bool {
    op == "LSTM" || op == "GRU"
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Relu,
    Tanh,
    Sigmoid,
    Affine,
    LeakyRelu,
    ThresholdedRelu,
    ScaledTanh,
    HardSigmoid,
    Elu,
    Softsign,
    Softplus,
}

/// An activation with its alpha and beta (unused ones are 0).
#[derive(Clone, Copy, Debug)]
struct Act {
    kind: Kind,
    alpha: f64,
    beta: f64,
}

/// Name -> kind, with (default alpha, default beta) for the functions that take them.
fn kind_of(name: &str) -> Option<(Kind, Option<f64>, Option<f64>)> {
    // Matched without regard to case, as exporters and runtimes write e.g. "sigmoid" and "Sigmoid".
    // The defaults are those of the activation ops' float (f32) attributes: 0.2f32, not 0.2.
    Some(match name.to_ascii_lowercase().as_str() {
        "relu" => (Kind::Relu, None, None),
        "tanh" => (Kind::Tanh, None, None),
        "sigmoid" => (Kind::Sigmoid, None, None),
        "affine" => (Kind::Affine, Some(1.0), Some(0.0)),
        "leakyrelu" => (Kind::LeakyRelu, Some(0.01f32 as f64), None),
        "thresholdedrelu" => (Kind::ThresholdedRelu, Some(1.0), None),
        "scaledtanh" => (Kind::ScaledTanh, Some(1.0), Some(1.0)),
        "hardsigmoid" => (Kind::HardSigmoid, Some(0.2f32 as f64), Some(0.5)),
        "elu" => (Kind::Elu, Some(1.0), None),
        "softsign" => (Kind::Softsign, None, None),
        "softplus" => (Kind::Softplus, None, None),
        _ => return None,
    })
}

impl Act {
    fn apply(&self, x: f64) -> f64 {
        let (a, b) = (self.alpha, self.beta);
        match self.kind {
            Kind::Relu => x.max(0.0),
            Kind::Tanh => x.tanh(),
            Kind::Sigmoid => {
                if x >= 0.0 {
                    1.0 / (1.0 + (-x).exp())
                } else {
                    let e = x.exp();
                    e / (1.0 + e)
                }
            }
            Kind::Affine => a * x + b,
            Kind::LeakyRelu => {
                if x >= 0.0 {
                    x
                } else {
                    a * x
                }
            }
            Kind::ThresholdedRelu => {
                if x >= a {
                    x
                } else {
                    0.0
                }
            }
            Kind::ScaledTanh => a * (b * x).tanh(),
            Kind::HardSigmoid => (a * x + b).clamp(0.0, 1.0),
            Kind::Elu => {
                if x >= 0.0 {
                    x
                } else {
                    a * (x.exp() - 1.0)
                }
            }
            Kind::Softsign => x / (1.0 + x.abs()),
            // log(1 + e^x), without overflow for large x.
            Kind::Softplus => x.max(0.0) + (-x.abs()).exp().ln_1p(),
        }
    }
}

/// The op's shape facts: (gates per direction, activations per direction, max outputs).
fn op_facts(op: &str) -> (usize, usize, usize) {
    if op == "LSTM" { (4, 3, 3) } else { (3, 2, 2) }
}

fn strings_attr(node: &NodeSpec, name: &str) -> Result<Option<Vec<String>>, OracleError> {
    match node.attrs.get(name) {
        None => Ok(None),
        Some(Attr::Strings(v)) => Ok(Some(v.clone())),
        Some(Attr::String(s)) => Ok(Some(vec![s.clone()])),
        Some(a) => Err(OracleError::Invalid(format!(
            "attribute '{name}' must be strings, got {a:?}"
        ))),
    }
}

/// The activations for all directions, in order (forward set first), alphas and betas bound.
fn activations(node: &NodeSpec, num_dir: usize) -> Result<Vec<Act>, OracleError> {
    let (_, per_dir, _) = op_facts(&node.op_type);
    let names: Vec<String> = match strings_attr(node, "activations")? {
        Some(v) => v,
        None => {
            let one: &[&str] = if per_dir == 3 {
                &["Sigmoid", "Tanh", "Tanh"]
            } else {
                &["Sigmoid", "Tanh"]
            };
            (0..num_dir)
                .flat_map(|_| one.iter().map(|s| s.to_string()))
                .collect()
        }
    };
    if names.len() != per_dir * num_dir {
        return Err(OracleError::Invalid(format!(
            "{} needs {} activations for {num_dir} direction(s), got {names:?}",
            node.op_type,
            per_dir * num_dir
        )));
    }
    let alphas = node.floats("activation_alpha")?.unwrap_or_default();
    let betas = node.floats("activation_beta")?.unwrap_or_default();
    let (mut ai, mut bi) = (0usize, 0usize);
    let mut acts = Vec::with_capacity(names.len());
    for n in &names {
        let (kind, da, db) = kind_of(n).ok_or_else(|| {
            OracleError::Unsupported(format!("{} activation '{n}' is not covered", node.op_type))
        })?;
        let mut alpha = 0.0;
        if let Some(d) = da {
            alpha = alphas.get(ai).copied().unwrap_or(d);
            ai += 1;
        }
        let mut beta = 0.0;
        if let Some(d) = db {
            beta = betas.get(bi).copied().unwrap_or(d);
            bi += 1;
        }
        acts.push(Act { kind, alpha, beta });
    }
    Ok(acts)
}

pub(super) fn supports(node: &NodeSpec) -> Result<(), String> {
    let e = |x: OracleError| x.to_string();
    let (_, _, max_out) = op_facts(&node.op_type);
    if node.num_outputs > max_out {
        return Err(format!(
            "{} has at most {max_out} outputs, {} requested",
            node.op_type, node.num_outputs
        ));
    }
    let dir = node.string("direction", "forward").map_err(e)?;
    let num_dir = match dir.as_str() {
        "forward" | "reverse" => 1,
        "bidirectional" => 2,
        _ => return Err(format!("{} direction '{dir}' is not covered", node.op_type)),
    };
    let layout = node.int("layout", 0).map_err(e)?;
    if layout != 0 && layout != 1 {
        return Err(format!("{} layout {layout} is not covered", node.op_type));
    }
    if let Err(OracleError::Unsupported(m)) = activations(node, num_dir) {
        return Err(m);
    }
    Ok(())
}

/// Reads element [i0][i1][i2] of a rank-3 value.
fn at3(v: &Value, i0: usize, i1: usize, i2: usize) -> f64 {
    v.data[(i0 * v.shape[1] + i1) * v.shape[2] + i2]
}

fn check_shape(what: &str, v: &Value, want: &[usize]) -> Result<(), OracleError> {
    if v.shape != want {
        return Err(OracleError::Invalid(format!(
            "{what} has shape {:?}, expected {want:?}",
            v.shape
        )));
    }
    Ok(())
}

pub(super) fn evaluate(
    node: &NodeSpec,
    inputs: &[Option<Value>],
) -> Result<Vec<Output>, OracleError> {
    supports(node).map_err(OracleError::Unsupported)?;
    let op = node.op_type.as_str();
    let lstm = op == "LSTM";
    let (gates, per_dir, _) = op_facts(op);
    let x = input(node, inputs, 0)?;
    let w = input(node, inputs, 1)?;
    let r = input(node, inputs, 2)?;
    let b = opt_input(inputs, 3);
    let seq_lens = opt_input(inputs, 4);
    let init_h = opt_input(inputs, 5);
    let init_c = if lstm { opt_input(inputs, 6) } else { None };
    let p = if lstm { opt_input(inputs, 7) } else { None };
    let dir = node.string("direction", "forward")?;
    let num_dir = if dir == "bidirectional" { 2 } else { 1 };
    let layout = node.int("layout", 0)?;
    let acts = activations(node, num_dir)?;
    let clip = match node.attrs.get("clip") {
        None => None,
        Some(_) => Some(node.float("clip", 0.0)?),
    };
    if x.shape.len() != 3 || w.shape.len() != 3 || r.shape.len() != 3 {
        return Err(OracleError::Invalid(format!(
            "{op}: X {:?}, W {:?}, R {:?} must be rank 3",
            x.shape, w.shape, r.shape
        )));
    }
    let (seq, batch) = if layout == 0 {
        (x.shape[0], x.shape[1])
    } else {
        (x.shape[1], x.shape[0])
    };
    let isz = x.shape[2];
    let hidden = match node.attrs.get("hidden_size") {
        Some(_) => node.int("hidden_size", 0)?,
        None => r.shape[2] as i64,
    };
    if hidden <= 0 {
        return Err(OracleError::Invalid(format!("{op}: hidden_size {hidden}")));
    }
    let hs = hidden as usize;
    check_shape("W", w, &[num_dir, gates * hs, isz])?;
    check_shape("R", r, &[num_dir, gates * hs, hs])?;
    if let Some(b) = b {
        check_shape("B", b, &[num_dir, 2 * gates * hs])?;
    }
    if let Some(p) = p {
        check_shape("P", p, &[num_dir, 3 * hs])?;
    }
    let state_shape = if layout == 0 {
        vec![num_dir, batch, hs]
    } else {
        vec![batch, num_dir, hs]
    };
    if let Some(h) = init_h {
        check_shape("initial_h", h, &state_shape)?;
    }
    if let Some(c) = init_c {
        check_shape("initial_c", c, &state_shape)?;
    }
    let lens: Vec<usize> = match seq_lens {
        None => vec![seq; batch],
        Some(s) => {
            if s.shape != [batch] {
                return Err(OracleError::Invalid(format!(
                    "sequence_lens has shape {:?}, expected [{batch}]",
                    s.shape
                )));
            }
            let mut v = Vec::with_capacity(batch);
            for &l in &s.data {
                if !(0.0..=seq as f64).contains(&l) {
                    return Err(OracleError::Invalid(format!(
                        "sequence length {l} outside [0, {seq}]"
                    )));
                }
                v.push(l as usize);
            }
            v
        }
    };
    let input_forget = node.int("input_forget", 0)? != 0;
    let lbr = node.int("linear_before_reset", 0)? != 0;
    // Index helpers for the layouts.
    let xat = |t: usize, bb: usize, k: usize| {
        if layout == 0 {
            at3(x, t, bb, k)
        } else {
            at3(x, bb, t, k)
        }
    };
    let state_at = |v: &Value, d: usize, bb: usize, j: usize| {
        if layout == 0 {
            at3(v, d, bb, j)
        } else {
            at3(v, bb, d, j)
        }
    };
    // Y[t][d][b][j] (layout 0) and final states [d][b][j], with magnitudes, filled per direction.
    let mut y = vec![0.0; seq * num_dir * batch * hs];
    let mut ym = vec![0.0; y.len()];
    let mut yh = vec![0.0; num_dir * batch * hs];
    let mut yhm = vec![0.0; yh.len()];
    let mut yc = vec![0.0; yh.len()];
    let mut ycm = vec![0.0; yh.len()];
    for d in 0..num_dir {
        let reverse = dir == "reverse" || d == 1;
        let act = &acts[d * per_dir..(d + 1) * per_dir];
        let f = |z: f64, a: &Act| a.apply(clip.map_or(z, |c| z.max(-c).min(c)));
        // Weight / bias readers for direction d, gate g, unit j.
        let wv = |g: usize, j: usize, k: usize| at3(w, d, g * hs + j, k);
        let rv = |g: usize, j: usize, k: usize| at3(r, d, g * hs + j, k);
        let wb = |g: usize, j: usize| b.map_or(0.0, |b| b.data[d * 2 * gates * hs + g * hs + j]);
        let rb = |g: usize, j: usize| {
            b.map_or(0.0, |b| b.data[d * 2 * gates * hs + (gates + g) * hs + j])
        };
        let pv = |g: usize, j: usize| p.map_or(0.0, |p| p.data[d * 3 * hs + g * hs + j]);
        for (bb, &len) in lens.iter().enumerate() {
            let mut h: Vec<f64> = (0..hs)
                .map(|j| init_h.map_or(0.0, |v| state_at(v, d, bb, j)))
                .collect();
            let mut c: Vec<f64> = (0..hs)
                .map(|j| init_c.map_or(0.0, |v| state_at(v, d, bb, j)))
                .collect();
            let mut hm: Vec<f64> = h.iter().map(|v| v.abs()).collect();
            let mut cm: Vec<f64> = c.iter().map(|v| v.abs()).collect();
            let steps: Vec<usize> = if reverse {
                (0..len).rev().collect()
            } else {
                (0..len).collect()
            };
            for t in steps {
                // Xt*(Wg^T) + Ht-1*(Rg^T) per gate and unit, with Σ|terms| beside each.
                let lin = |g: usize, j: usize, hin: &[f64]| {
                    let (mut s, mut m) = (0.0, 0.0);
                    for k in 0..isz {
                        let term = xat(t, bb, k) * wv(g, j, k);
                        s += term;
                        m += term.abs();
                    }
                    for (k, &hk) in hin.iter().enumerate() {
                        let term = hk * rv(g, j, k);
                        s += term;
                        m += term.abs();
                    }
                    (s, m)
                };
                let prev_m = hm.iter().cloned().fold(0.0, f64::max);
                let mut nh = vec![0.0; hs];
                let mut nhm = vec![0.0; hs];
                if lstm {
                    // Gate order in W, R, B: i, o, f, c; in P: i, o, f.
                    let (gi, go, gf, gc) = (0, 1, 2, 3);
                    let mut nc = vec![0.0; hs];
                    for j in 0..hs {
                        let (zi, mi) = lin(gi, j, &h);
                        let (zo, mo) = lin(go, j, &h);
                        let (zf, mf) = lin(gf, j, &h);
                        let (zc, mc) = lin(gc, j, &h);
                        let it = f(zi + pv(0, j) * c[j] + wb(gi, j) + rb(gi, j), &act[0]);
                        let ft = if input_forget {
                            1.0 - it
                        } else {
                            f(zf + pv(2, j) * c[j] + wb(gf, j) + rb(gf, j), &act[0])
                        };
                        let ct = f(zc + wb(gc, j) + rb(gc, j), &act[1]);
                        nc[j] = ft * c[j] + it * ct;
                        let ot = f(zo + pv(1, j) * nc[j] + wb(go, j) + rb(go, j), &act[0]);
                        nh[j] = ot * act[2].apply(nc[j]);
                        let s = mi.max(mo).max(mf).max(mc)
                            + (pv(0, j) * c[j]).abs().max((pv(2, j) * c[j]).abs())
                            + (pv(1, j) * nc[j]).abs()
                            + wb(gi, j).abs().max(wb(go, j).abs()).max(wb(gf, j).abs())
                            + rb(gi, j).abs().max(rb(go, j).abs()).max(rb(gf, j).abs())
                            + wb(gc, j).abs()
                            + rb(gc, j).abs();
                        nhm[j] = s + prev_m + cm[j] + nh[j].abs();
                        cm[j] = s + prev_m + cm[j] + nc[j].abs();
                    }
                    c = nc;
                } else {
                    // Gate order in W, R, B: z, r, h.
                    let (gz, gr, gh) = (0, 1, 2);
                    let mut rt = vec![0.0; hs];
                    let mut zt = vec![0.0; hs];
                    let mut s_zr = vec![0.0; hs];
                    for j in 0..hs {
                        let (zz, mz) = lin(gz, j, &h);
                        let (zr, mr) = lin(gr, j, &h);
                        zt[j] = f(zz + wb(gz, j) + rb(gz, j), &act[0]);
                        rt[j] = f(zr + wb(gr, j) + rb(gr, j), &act[0]);
                        s_zr[j] = mz.max(mr);
                    }
                    for j in 0..hs {
                        let (mut xs, mut m) = (0.0, 0.0);
                        for k in 0..isz {
                            let term = xat(t, bb, k) * wv(gh, j, k);
                            xs += term;
                            m += term.abs();
                        }
                        let pre = if lbr {
                            // g(Xt*(Wh^T) + (rt (.) (Ht-1*(Rh^T) + Rbh)) + Wbh)
                            let (mut hr, mut hrm) = (0.0, 0.0);
                            for (k, &hk) in h.iter().enumerate() {
                                let term = hk * rv(gh, j, k);
                                hr += term;
                                hrm += term.abs();
                            }
                            m += hrm + rb(gh, j).abs();
                            xs + rt[j] * (hr + rb(gh, j)) + wb(gh, j)
                        } else {
                            // g(Xt*(Wh^T) + (rt (.) Ht-1)*(Rh^T) + Rbh + Wbh)
                            let mut hr = 0.0;
                            for (k, &hk) in h.iter().enumerate() {
                                let term = rt[k] * hk * rv(gh, j, k);
                                hr += term;
                                m += term.abs();
                            }
                            xs + hr + rb(gh, j) + wb(gh, j)
                        };
                        let ht = f(pre, &act[1]);
                        nh[j] = (1.0 - zt[j]) * ht + zt[j] * h[j];
                        let s = m.max(s_zr[j]) + wb(gh, j).abs() + rb(gh, j).abs();
                        nhm[j] = s + prev_m + nh[j].abs();
                    }
                }
                h = nh;
                hm = nhm;
                for j in 0..hs {
                    let o = ((t * num_dir + d) * batch + bb) * hs + j;
                    y[o] = h[j];
                    ym[o] = hm[j];
                }
            }
            for j in 0..hs {
                let o = (d * batch + bb) * hs + j;
                yh[o] = h[j];
                yhm[o] = hm[j];
                yc[o] = c[j];
                ycm[o] = cm[j];
            }
        }
    }
    let dt: DType = x.dtype;
    let mut outs = Vec::with_capacity(3);
    if layout == 0 {
        outs.push(output(dt, vec![seq, num_dir, batch, hs], y, ym)?);
        outs.push(output(dt, vec![num_dir, batch, hs], yh, yhm)?);
        outs.push(output(dt, vec![num_dir, batch, hs], yc, ycm)?);
    } else {
        // [t][d][b][j] -> [b][t][d][j]; [d][b][j] -> [b][d][j].
        let mut y1 = vec![0.0; y.len()];
        let mut y1m = vec![0.0; y.len()];
        for t in 0..seq {
            for d in 0..num_dir {
                for bb in 0..batch {
                    for j in 0..hs {
                        let from = ((t * num_dir + d) * batch + bb) * hs + j;
                        let to = ((bb * seq + t) * num_dir + d) * hs + j;
                        y1[to] = y[from];
                        y1m[to] = ym[from];
                    }
                }
            }
        }
        let swap = |v: &[f64]| {
            let mut o = vec![0.0; v.len()];
            for d in 0..num_dir {
                for bb in 0..batch {
                    for j in 0..hs {
                        o[(bb * num_dir + d) * hs + j] = v[(d * batch + bb) * hs + j];
                    }
                }
            }
            o
        };
        outs.push(output(dt, vec![batch, seq, num_dir, hs], y1, y1m)?);
        outs.push(output(dt, vec![batch, num_dir, hs], swap(&yh), swap(&yhm))?);
        outs.push(output(dt, vec![batch, num_dir, hs], swap(&yc), swap(&ycm))?);
    }
    if !lstm {
        outs.pop();
    }
    outs.truncate(node.num_outputs.max(1));
    Ok(outs)
}

#[cfg(test)]
mod tests;
