//! LSTM / GRU tests: hand-worked steps (zero weights, where the gates are exactly 1/2) and seeded
//! random non-zero weights checked against the equations written out longhand for one unit.
use super::super::Reference;
use super::super::testutil::*;
use crate::{Attr, DType, NodeSpec, Oracle, Value};

fn v(shape: Vec<usize>, data: Vec<f64>) -> Option<Value> {
    Some(Value::new(DType::F32, shape, data).unwrap())
}

fn rnn(op: &str, opset: i64, attrs: &[(&str, Attr)], outputs: usize) -> NodeSpec {
    let mut n = node(op, opset, attrs);
    n.num_outputs = outputs;
    n
}

fn sig(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

#[test]
fn lstm_zero_weights_by_hand() {
    // W = R = 0: i = f = o = sigmoid(0) = 1/2 and c~ = tanh(0) = 0, so C1 = C0 / 2 and
    // H1 = tanh(C1) / 2. With C0 = 2: C1 = 1, H1 = tanh(1) / 2; a second step: C2 = 1/2,
    // H2 = tanh(1/2) / 2.
    let n = rnn("LSTM", 14, &[("hidden_size", Attr::Int(1))], 3);
    let out = Reference
        .evaluate(
            &n,
            &[
                v(vec![2, 1, 1], vec![3.0, -7.0]),
                v(vec![1, 4, 1], vec![0.0; 4]),
                v(vec![1, 4, 1], vec![0.0; 4]),
                None,
                None,
                v(vec![1, 1, 1], vec![5.0]),
                v(vec![1, 1, 1], vec![2.0]),
            ],
        )
        .unwrap();
    assert_eq!(out.len(), 3);
    assert_eq!(out[0].value.shape, vec![2, 1, 1, 1]);
    assert_all_close(
        &out[0].value.data,
        &[1f64.tanh() / 2.0, 0.5f64.tanh() / 2.0],
    );
    assert_all_close(&out[1].value.data, &[0.5f64.tanh() / 2.0]);
    assert_all_close(&out[2].value.data, &[0.5]);
}

#[test]
fn gru_zero_weights_by_hand() {
    // W = R = 0: z = r = 1/2 and h~ = tanh(0) = 0, so H1 = H0 / 2: 0.8 -> 0.4 -> 0.2.
    let n = rnn("GRU", 14, &[("hidden_size", Attr::Int(1))], 2);
    let out = Reference
        .evaluate(
            &n,
            &[
                v(vec![2, 1, 1], vec![3.0, -7.0]),
                v(vec![1, 3, 1], vec![0.0; 3]),
                v(vec![1, 3, 1], vec![0.0; 3]),
                None,
                None,
                v(vec![1, 1, 1], vec![0.8]),
            ],
        )
        .unwrap();
    assert_eq!(out.len(), 2);
    assert_all_close(&out[0].value.data, &[0.4, 0.2]);
    assert_all_close(&out[1].value.data, &[0.2]);
}

/// Seeded random LSTM inputs for hidden size 1, input size 2, batch 1, two steps.
struct Lstm1 {
    x: Vec<f64>, // [2 steps][2]
    w: Vec<f64>, // [4 gates i,o,f,c][2]
    r: Vec<f64>, // [4]
    b: Vec<f64>, // [8]: Wb i,o,f,c then Rb i,o,f,c
    p: Vec<f64>, // [3]: i, o, f
    h0: f64,
    c0: f64,
}

impl Lstm1 {
    fn new(seed: u64) -> Lstm1 {
        let mut g = SplitMix64(seed);
        Lstm1 {
            x: g.vec(4),
            w: g.vec(8),
            r: g.vec(4),
            b: g.vec(8),
            p: g.vec(3),
            h0: g.unit(),
            c0: g.unit(),
        }
    }

    fn inputs(&self) -> Vec<Option<Value>> {
        vec![
            v(vec![2, 1, 2], self.x.clone()),
            v(vec![1, 4, 2], self.w.clone()),
            v(vec![1, 4, 1], self.r.clone()),
            v(vec![1, 8], self.b.clone()),
            None,
            v(vec![1, 1, 1], vec![self.h0]),
            v(vec![1, 1, 1], vec![self.c0]),
            v(vec![1, 3], self.p.clone()),
        ]
    }

    /// The spec's equations for one unit, longhand, with activations f, g, h and optional clip /
    /// input_forget. Returns (H per step, final C).
    fn longhand(
        &self,
        f: &dyn Fn(f64) -> f64,
        g: &dyn Fn(f64) -> f64,
        h: &dyn Fn(f64) -> f64,
        clip: Option<f64>,
        input_forget: bool,
    ) -> (Vec<f64>, f64) {
        let cl = |z: f64| clip.map_or(z, |c| z.clamp(-c, c));
        let (mut hp, mut cp) = (self.h0, self.c0);
        let mut hs = Vec::new();
        for t in 0..2 {
            let (x0, x1) = (self.x[2 * t], self.x[2 * t + 1]);
            let lin = |k: usize| {
                x0 * self.w[2 * k]
                    + x1 * self.w[2 * k + 1]
                    + hp * self.r[k]
                    + self.b[k]
                    + self.b[4 + k]
            };
            let i = f(cl(lin(0) + self.p[0] * cp));
            let fg = if input_forget {
                1.0 - i
            } else {
                f(cl(lin(2) + self.p[2] * cp))
            };
            let c_tilde = g(cl(lin(3)));
            let c = fg * cp + i * c_tilde;
            let o = f(cl(lin(1) + self.p[1] * c));
            let hh = o * h(c); // h's argument is the cell state, not clipped
            hs.push(hh);
            hp = hh;
            cp = c;
        }
        (hs, cp)
    }
}

#[test]
fn lstm_random_one_unit_against_longhand() {
    for seed in [1u64, 2, 3] {
        let s = Lstm1::new(seed);
        let out = Reference
            .evaluate(
                &rnn("LSTM", 14, &[("hidden_size", Attr::Int(1))], 3),
                &s.inputs(),
            )
            .unwrap();
        let (hs, c) = s.longhand(&sig, &|z: f64| z.tanh(), &|z: f64| z.tanh(), None, false);
        assert_all_close(&out[0].value.data, &hs);
        assert_all_close(&out[1].value.data, &hs[1..]);
        assert_all_close(&out[2].value.data, &[c]);
        assert!(out[0].magnitude.iter().all(|m| *m > 0.0));
    }
}

#[test]
fn lstm_activation_params_clip_and_input_forget() {
    let s = Lstm1::new(11);
    // HardSigmoid takes alpha 0.3 and beta 0.4; LeakyRelu the next alpha (0.05); Affine the next
    // alpha (2.0) and beta (0.1).
    let attrs = [
        ("hidden_size", Attr::Int(1)),
        (
            "activations",
            Attr::Strings(vec![
                "HardSigmoid".into(),
                "LeakyRelu".into(),
                "Affine".into(),
            ]),
        ),
        ("activation_alpha", Attr::Floats(vec![0.3, 0.05, 2.0])),
        ("activation_beta", Attr::Floats(vec![0.4, 0.1])),
        ("clip", Attr::Float(0.6)),
        ("input_forget", Attr::Int(1)),
    ];
    let out = Reference
        .evaluate(&rnn("LSTM", 14, &attrs, 3), &s.inputs())
        .unwrap();
    let (hs, c) = s.longhand(
        &|z| (0.3 * z + 0.4).clamp(0.0, 1.0),
        &|z| if z >= 0.0 { z } else { 0.05 * z },
        &|z| 2.0 * z + 0.1,
        Some(0.6),
        true,
    );
    assert_all_close(&out[0].value.data, &hs);
    assert_all_close(&out[2].value.data, &[c]);
    // Defaults when no alpha is given: LeakyRelu 0.01, Elu 1.0.
    let attrs = [
        ("hidden_size", Attr::Int(1)),
        (
            "activations",
            Attr::Strings(vec!["Sigmoid".into(), "LeakyRelu".into(), "Elu".into()]),
        ),
    ];
    let out = Reference
        .evaluate(&rnn("LSTM", 14, &attrs, 3), &s.inputs())
        .unwrap();
    let (hs, _) = s.longhand(
        &sig,
        &|z| if z >= 0.0 { z } else { 0.01 * z },
        &|z| if z >= 0.0 { z } else { z.exp() - 1.0 },
        None,
        false,
    );
    assert_all_close(&out[0].value.data, &hs);
}

/// Seeded GRU, hidden 1, input 2, batch 1, two steps, longhand.
fn gru_longhand(seed: u64, lbr: bool) -> (Vec<Option<Value>>, Vec<f64>) {
    let mut g = SplitMix64(seed);
    let (x, w, r, b, h0) = (g.vec(4), g.vec(6), g.vec(3), g.vec(6), g.unit());
    let mut hp = h0;
    let mut hs = Vec::new();
    for t in 0..2 {
        let xw = |k: usize| x[2 * t] * w[2 * k] + x[2 * t + 1] * w[2 * k + 1];
        let z = sig(xw(0) + hp * r[0] + b[0] + b[3]);
        let rr = sig(xw(1) + hp * r[1] + b[1] + b[4]);
        let ht = if lbr {
            (xw(2) + rr * (hp * r[2] + b[5]) + b[2]).tanh()
        } else {
            (xw(2) + (rr * hp) * r[2] + b[5] + b[2]).tanh()
        };
        hp = (1.0 - z) * ht + z * hp;
        hs.push(hp);
    }
    let inputs = vec![
        v(vec![2, 1, 2], x),
        v(vec![1, 3, 2], w),
        v(vec![1, 3, 1], r),
        v(vec![1, 6], b),
        None,
        v(vec![1, 1, 1], vec![h0]),
    ];
    (inputs, hs)
}

#[test]
fn gru_random_one_unit_both_reset_forms() {
    for lbr in [false, true] {
        let (inputs, hs) = gru_longhand(21, lbr);
        let n = rnn(
            "GRU",
            14,
            &[
                ("hidden_size", Attr::Int(1)),
                ("linear_before_reset", Attr::Int(lbr as i64)),
            ],
            2,
        );
        let out = Reference.evaluate(&n, &inputs).unwrap();
        assert_all_close(&out[0].value.data, &hs);
        assert_all_close(&out[1].value.data, &hs[1..]);
    }
    // The two forms differ once the recurrent bias and R are non-zero.
    assert!((gru_longhand(21, false).1[1] - gru_longhand(21, true).1[1]).abs() > 1e-6);
}

/// Random GRU / LSTM inputs of hidden 2, input 3, batch 2, seq 3, for the structural checks.
fn random_inputs(op: &str, num_dir: usize, seed: u64) -> Vec<Option<Value>> {
    let gates = if op == "LSTM" { 4 } else { 3 };
    let (seq, batch, isz, hs) = (3, 2, 3, 2);
    let mut g = SplitMix64(seed);
    let mut v = vec![
        v(vec![seq, batch, isz], g.vec(seq * batch * isz)),
        v(
            vec![num_dir, gates * hs, isz],
            g.vec(num_dir * gates * hs * isz),
        ),
        v(
            vec![num_dir, gates * hs, hs],
            g.vec(num_dir * gates * hs * hs),
        ),
        v(
            vec![num_dir, 2 * gates * hs],
            g.vec(num_dir * 2 * gates * hs),
        ),
        None,
        v(vec![num_dir, batch, hs], g.vec(num_dir * batch * hs)),
    ];
    if op == "LSTM" {
        v.push(self::v(
            vec![num_dir, batch, hs],
            g.vec(num_dir * batch * hs),
        ));
        v.push(self::v(vec![num_dir, 3 * hs], g.vec(num_dir * 3 * hs)));
    }
    v
}

/// Reverses a [seq, ...] value along time.
fn time_reversed(x: &Value) -> Value {
    let step: usize = x.shape[1..].iter().product();
    let mut data = Vec::with_capacity(x.len());
    for t in (0..x.shape[0]).rev() {
        data.extend_from_slice(&x.data[t * step..(t + 1) * step]);
    }
    Value::new(x.dtype, x.shape.clone(), data).unwrap()
}

#[test]
fn reverse_is_forward_on_reversed_time_and_bidirectional_stacks_both() {
    for op in ["LSTM", "GRU"] {
        let outs = if op == "LSTM" { 3 } else { 2 };
        let ins = random_inputs(op, 1, 5);
        let fwd = |ins: &[Option<Value>], dir: &str| {
            Reference
                .evaluate(
                    &rnn(op, 14, &[("direction", Attr::String(dir.into()))], outs),
                    ins,
                )
                .unwrap()
        };
        let rev = fwd(&ins, "reverse");
        let mut flipped = ins.clone();
        flipped[0] = Some(time_reversed(ins[0].as_ref().unwrap()));
        let f = fwd(&flipped, "forward");
        assert_all_close(&rev[0].value.data, &time_reversed(&f[0].value).data);
        assert_all_close(&rev[1].value.data, &f[1].value.data);
        // Bidirectional with weights [A; B] = forward with A beside reverse with B.
        let bi_in = random_inputs(op, 2, 6);
        let bi = fwd(&bi_in, "bidirectional");
        let half = |v: &Option<Value>, d: usize| -> Option<Value> {
            let v = v.as_ref().unwrap();
            let n = v.len() / 2;
            let mut shape = v.shape.clone();
            shape[0] = 1;
            Some(Value::new(v.dtype, shape, v.data[d * n..(d + 1) * n].to_vec()).unwrap())
        };
        for d in 0..2 {
            let one: Vec<Option<Value>> = bi_in
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    if i == 0 || v.is_none() {
                        v.clone()
                    } else {
                        half(v, d)
                    }
                })
                .collect();
            let single = fwd(&one, if d == 0 { "forward" } else { "reverse" });
            // Y [seq, 2, batch, hidden]: direction d of every step.
            let step = 2 * 2; // batch * hidden
            for t in 0..3 {
                let got = &bi[0].value.data[(t * 2 + d) * step..(t * 2 + d + 1) * step];
                let want = &single[0].value.data[t * step..(t + 1) * step];
                assert_all_close(got, want);
            }
            assert_all_close(
                &bi[1].value.data[d * step..(d + 1) * step],
                &single[1].value.data,
            );
        }
    }
}

#[test]
fn sequence_lens_stop_each_batch_entry_and_zero_the_tail() {
    for op in ["LSTM", "GRU"] {
        let outs = if op == "LSTM" { 3 } else { 2 };
        for dir in ["forward", "reverse"] {
            let n = rnn(op, 14, &[("direction", Attr::String(dir.into()))], outs);
            let mut ins = random_inputs(op, 1, 9);
            ins[4] = Some(Value::new(DType::I32, vec![2], vec![3.0, 1.0]).unwrap());
            let out = Reference.evaluate(&n, &ins).unwrap();
            // Batch entry 1 alone, with its one step: the same as seq_length 1 on X[0..1].
            let x = ins[0].as_ref().unwrap();
            let mut one = ins.clone();
            one[0] = Some(Value::new(x.dtype, vec![1, 2, 3], x.data[..6].to_vec()).unwrap());
            one[4] = None;
            let short = Reference.evaluate(&n, &one).unwrap();
            let y = &out[0].value.data; // [3, 1, 2, 2]
            assert_all_close(&y[2..4], &short[0].value.data[2..4]);
            assert_eq!(&y[6..8], &[0.0, 0.0]);
            assert_eq!(&y[10..12], &[0.0, 0.0]);
            assert_all_close(&out[1].value.data[2..4], &short[1].value.data[2..4]);
        }
    }
}

#[test]
fn layout_1_is_layout_0_transposed() {
    for op in ["LSTM", "GRU"] {
        let outs = if op == "LSTM" { 3 } else { 2 };
        let ins = random_inputs(op, 2, 13);
        let n0 = rnn(
            op,
            14,
            &[("direction", Attr::String("bidirectional".into()))],
            outs,
        );
        let mut n1 = n0.clone();
        n1.attrs.insert("layout".into(), Attr::Int(1));
        let swap01 = |v: &Value| {
            let (a, b, c) = (v.shape[0], v.shape[1], v.shape[2]);
            let mut d = vec![0.0; v.len()];
            for i in 0..a {
                for j in 0..b {
                    for k in 0..c {
                        d[(j * a + i) * c + k] = v.data[(i * b + j) * c + k];
                    }
                }
            }
            Value::new(v.dtype, vec![b, a, c], d).unwrap()
        };
        let mut ins1 = ins.clone();
        for i in [0usize, 5, 6] {
            if let Some(Some(v)) = ins.get(i) {
                ins1[i] = Some(swap01(v));
            }
        }
        let o0 = Reference.evaluate(&n0, &ins).unwrap();
        let o1 = Reference.evaluate(&n1, &ins1).unwrap();
        assert_eq!(o1[0].value.shape, vec![2, 3, 2, 2]);
        // Y: [seq, dir, batch, h] vs [batch, seq, dir, h].
        for t in 0..3 {
            for d in 0..2 {
                for b in 0..2 {
                    for j in 0..2 {
                        let a = o0[0].value.data[((t * 2 + d) * 2 + b) * 2 + j];
                        let c = o1[0].value.data[((b * 3 + t) * 2 + d) * 2 + j];
                        assert!(close(a, c));
                    }
                }
            }
        }
        for k in 1..outs {
            assert_all_close(&o1[k].value.data, &swap01(&o0[k].value).data);
        }
    }
}

#[test]
fn bad_shapes_and_names_are_errors_not_panics() {
    let ins = random_inputs("GRU", 1, 3);
    let mut bad = ins.clone();
    bad[2] = v(vec![1, 6, 3], vec![0.1; 18]);
    assert!(Reference.evaluate(&rnn("GRU", 14, &[], 2), &bad).is_err());
    let n = rnn(
        "GRU",
        14,
        &[(
            "activations",
            Attr::Strings(vec!["Sigmoid".into(), "Cosh".into()]),
        )],
        2,
    );
    assert!(Reference.supports(&n).is_err());
    assert!(Reference.evaluate(&n, &ins).is_err());
    let mut lens = ins.clone();
    lens[4] = Some(Value::new(DType::I32, vec![2], vec![4.0, 1.0]).unwrap());
    assert!(Reference.evaluate(&rnn("GRU", 14, &[], 2), &lens).is_err());
}
