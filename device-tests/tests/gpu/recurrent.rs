//! LSTM on CUDA against both oracles: Sequencer2d's bidirectional shape, both layouts, initial
//! states, peepholes, clip, hidden states wider than a block's threads, other
//! activations, f16; `sequence_lens` declines to the CPU and is still judged. The judge is shown to
//! catch a kernel that ignored `clip`.
use crate::harness::*;
use quorum::ir::Attr;
use quorum::verify::{Check, check};
use quorum::{DType, Tensor, Value};

/// One LSTM's inputs: X, W, R, B, and optionally initial_h, initial_c, P (`None`: absent).
struct Lstm {
    seq: usize,
    batch: usize,
    isz: usize,
    hidden: usize,
    dirs: usize,
    layout1: bool,
    states: bool,
    peepholes: bool,
    seed: u64,
}

impl Lstm {
    fn inputs(&self, dtype: DType) -> Vec<Option<Tensor>> {
        let (h, d, s) = (self.hidden, self.dirs, self.seed);
        let x = if self.layout1 {
            [self.batch, self.seq, self.isz]
        } else {
            [self.seq, self.batch, self.isz]
        };
        let state = if self.layout1 {
            [self.batch, d, h]
        } else {
            [d, self.batch, h]
        };
        // Weights scaled by the fan-in, so that the gates do not all saturate.
        let wr = 1.5 / ((self.isz + h) as f32).sqrt();
        let conv =
            |t: Tensor| Tensor::from_f64s(dtype, t.shape(), t.to_f64_vec().unwrap()).unwrap();
        let mut v = vec![
            Some(rand_range(s, &x, -2.0, 2.0)),
            Some(rand_range(s + 1, &[d, 4 * h, self.isz], -wr, wr)),
            Some(rand_range(s + 2, &[d, 4 * h, h], -wr, wr)),
            Some(rand_range(s + 3, &[d, 8 * h], -0.5, 0.5)),
            None,
        ];
        if self.states || self.peepholes {
            v.push(self.states.then(|| rand_range(s + 4, &state, -1.0, 1.0)));
            v.push(self.states.then(|| rand_range(s + 5, &state, -1.0, 1.0)));
        }
        if self.peepholes {
            v.push(Some(rand_range(s + 6, &[d, 3 * h], -0.5, 0.5)));
        }
        v.into_iter().map(|t| t.map(conv)).collect()
    }

    fn case(&self, dtype: DType, attrs: &[(&str, Attr)]) -> Case {
        self.case_with_outputs(dtype, attrs, 3)
    }

    /// The case with the node naming its first `outputs` outputs (Y, Y_h, Y_c).
    fn case_with_outputs(&self, dtype: DType, attrs: &[(&str, Attr)], outputs: usize) -> Case {
        let dir = match (self.dirs, self.seed % 2) {
            (2, _) => "bidirectional",
            (_, 0) => "forward",
            _ => "reverse",
        };
        let mut c = Case::new("LSTM")
            .opset(if self.layout1 { 14 } else { 7 })
            .outputs(outputs)
            .attr_s("direction", dir)
            .attr_i("hidden_size", self.hidden as i64);
        if self.layout1 {
            c = c.attr_i("layout", 1);
        }
        for (n, a) in attrs {
            c = c.attr(n, a.clone());
        }
        for t in self.inputs(dtype) {
            c = match t {
                Some(t) => c.input(t),
                None => c.absent(),
            };
        }
        c
    }
}

fn shape(seq: usize, batch: usize, isz: usize, hidden: usize, dirs: usize) -> Lstm {
    Lstm {
        seq,
        batch,
        isz,
        hidden,
        dirs,
        layout1: false,
        states: false,
        peepholes: false,
        seed: 1,
    }
}

#[test]
fn lstm_forms_run_on_the_device_and_agree_with_the_oracles() {
    // Sequencer2d-S's bidirectional LSTM over a row of its 14×14 map (hidden 48, input 192).
    shape(14, 14, 192, 48, 2).case(DType::F32, &[]).check();
    // Layout 1, initial states, peepholes and a clip; a forward layer (even seed).
    let mut l = shape(5, 3, 7, 20, 1);
    (l.layout1, l.states, l.peepholes, l.seed) = (true, true, true, 10);
    l.case(DType::F32, &[("clip", Attr::Float(1.5))]).check();
    // Reverse, 130 units: 520 gate rows on a block of 512 threads; an input width that leaves a
    // remainder after the unrolled loop. (input_forget runs too, but one oracle does not cover
    // it, so nothing could judge it here.)
    let mut l = shape(9, 2, 33, 130, 1);
    l.seed = 21;
    l.case(DType::F32, &[]).check();
    // Other activations, the same for both directions (the independent oracle covers Sigmoid,
    // Tanh and Relu; the kernel the rest too, where nothing here can judge it).
    let set = [b"Relu".to_vec(), b"Sigmoid".to_vec(), b"Relu".to_vec()];
    let acts = Attr::Strings(set.iter().chain(&set).cloned().collect());
    shape(6, 2, 8, 16, 2)
        .case(DType::F32, &[("activations", acts)])
        .check();
    // A node naming only Y, or Y and Y_h (as the ONNX node tests' do): the kernel gives as many
    // outputs as the node names (three given to a node of two failed strict verification on an
    // H100, call 28: the values were right, the count was not).
    shape(1, 3, 2, 3, 1)
        .case_with_outputs(DType::F32, &[], 1)
        .check();
    shape(1, 3, 2, 3, 1)
        .case_with_outputs(DType::F32, &[], 2)
        .check();
    // f16 and bf16: f32 arithmetic, outputs rounded once.
    for dtype in [DType::F16, DType::BF16] {
        if bf16_off(dtype) {
            continue;
        }
        let mut l = shape(6, 4, 24, 32, 2);
        l.states = true;
        l.case(dtype, &[]).check();
    }
}

#[test]
fn lstm_with_sequence_lens_runs_on_the_cpu_and_is_judged() {
    let l = shape(5, 3, 6, 8, 2);
    let mut c = Case::new("LSTM")
        .opset(7)
        .outputs(3)
        .attr_s("direction", "bidirectional")
        .allow_fallback();
    for (i, t) in l.inputs(DType::F32).into_iter().enumerate() {
        c = match (i, t) {
            (4, _) => c.input(Tensor::from_f64s(DType::I32, &[3], vec![5.0, 2.0, 4.0]).unwrap()),
            (_, Some(t)) => c.input(t),
            (_, None) => c.absent(),
        };
    }
    c.check();
}

#[test]
fn a_kernel_that_ignored_the_clip_would_be_caught() {
    let mut l = shape(8, 2, 10, 12, 1);
    l.seed = 4;
    let clipped = l.case(DType::F32, &[("clip", Attr::Float(0.25))]);
    let (session, _) = clipped.session(quorum::SessionOptions::default());
    let node = session.model().graph.nodes[0].clone();
    let report = clipped.check();
    let mut unclipped = node;
    unclipped.attrs.remove("clip");
    let owned: Vec<Option<Value>> = l
        .inputs(DType::F32)
        .into_iter()
        .map(|t| t.map(Value::Tensor))
        .collect();
    let inputs: Vec<Option<&Value>> = owned.iter().map(Option::as_ref).collect();
    assert!(
        matches!(
            check(&unclipped, &inputs, &report.outputs),
            Check::Mismatch { .. }
        ),
        "the clipped layer's outputs passed as the unclipped layer's"
    );
}
