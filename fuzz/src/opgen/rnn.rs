//! LSTM and GRU: directions, layouts, optional inputs (bias, sequence lengths, initial states,
//! peepholes), clip, activations, input_forget, linear_before_reset, and 1 to 3 outputs.
use quorum_oracle::{Attr, DType};

use super::{Case, Dist, Gen};

pub(super) fn rnn(op: &'static str, g: &mut Gen) -> Case {
    let lstm = op == "LSTM";
    let opset = g.pick(&[22, 14, 7]);
    let (seq, batch, input, hidden) = (g.size(1, 4), g.size(1, 3), g.size(1, 4), g.size(1, 4));
    let direction = g.pick(&["forward", "reverse", "bidirectional"]);
    let dirs = if direction == "bidirectional" { 2 } else { 1 };
    let gates = if lstm { 4 } else { 3 };
    let layout = if opset >= 14 && g.chance(30) { 1 } else { 0 };
    let mut c = Case::new(op, opset, g.seed);
    c.int("hidden_size", hidden as i64);
    if direction != "forward" || g.chance(20) {
        c.string("direction", direction);
    }
    if layout == 1 {
        c.int("layout", 1);
    }
    if g.chance(20) {
        let clip = g.int(2, 12) as f64 * 0.25;
        c.float("clip", clip);
    }
    if g.chance(25) {
        let sets: &[&[&str]] = if lstm {
            &[
                &["Sigmoid", "Tanh", "Tanh"],
                &["HardSigmoid", "Tanh", "Softsign"],
                &["Sigmoid", "Relu", "Tanh"],
            ]
        } else {
            &[
                &["Sigmoid", "Tanh"],
                &["HardSigmoid", "Softsign"],
                &["Sigmoid", "Relu"],
            ]
        };
        let mut acts = vec![];
        for _ in 0..dirs {
            acts.extend(g.pick(sets).iter().map(|s| s.to_string()));
        }
        c.attr("activations", Attr::Strings(acts));
    }
    if lstm && g.chance(20) {
        c.int("input_forget", 1);
    }
    if !lstm && g.chance(50) {
        let l = g.int(0, 1);
        c.int("linear_before_reset", l);
    }
    let xs = if layout == 1 {
        [batch, seq, input]
    } else {
        [seq, batch, input]
    };
    let hs = if layout == 1 {
        [batch, dirs, hidden]
    } else {
        [dirs, batch, hidden]
    };
    let w = Dist::Signed(1.0);
    c.input(g.floats(&xs, w));
    c.input(g.floats(&[dirs, gates * hidden, input], w));
    c.input(g.floats(&[dirs, gates * hidden, hidden], w));
    let n_opt = if lstm { 5 } else { 3 };
    let given: Vec<bool> = (0..n_opt).map(|_| g.chance(45)).collect();
    let last = given.iter().rposition(|&b| b);
    for (i, &on) in given.iter().enumerate() {
        if last.is_none_or(|l| i > l) {
            break;
        }
        if !on {
            c.omit();
            continue;
        }
        match i {
            0 => c.input(g.floats(&[dirs, 2 * gates * hidden], w)),
            1 => c.input(g.ints(DType::I32, &[batch], 1, seq as i64)),
            2 => c.input(g.floats(&hs, w)),
            3 => c.input(g.floats(&hs, w)),
            _ => c.input(g.floats(&[dirs, 3 * hidden], w)),
        };
    }
    let max_out = if lstm { 3 } else { 2 };
    let n = g.size(1, max_out);
    c.outputs(n);
    c
}
