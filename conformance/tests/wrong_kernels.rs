//! The arbitration catches wrong kernels: deliberately wrong f32 kernels (a Pad shifted by one, a
//! reduction over the wrong axis, a Gemm and a Conv missing their bias, a MatMul with a transposed
//! operand, a stale output, a softmax without max subtraction, a Conv ignoring dilation) run on seeded
//! random inputs and judged by `arbitrate` against both oracles must be `EngineWrong`, while the
//! correct kernel in the same setup (the runtime's CPU kernel, and where written here the same f32 code
//! without the bug) must `Agree`: the verdict discriminates. And oracles that disagree are surfaced as
//! `OraclesDisagree`, never passed.
use std::cell::RefCell;
use std::collections::BTreeMap;

use quorum::error::OpResult;
use quorum::ir::{Attr as RtAttr, Graph, Node};
use quorum::ops::{OpCtx, Registry, SubgraphRunner};
use quorum::{OpError, Tensor, Value as RtValue};
use quorum_conformance::arbitrate::{Verdict, arbitrate, eps};
use quorum_oracle::independent::Independent;
use quorum_oracle::reference::Reference;
use quorum_oracle::{Attr, DType, NodeSpec, Oracle, Output, Value};

/// Seeds every test runs over.
const SEEDS: [u64; 6] = [1, 2, 3, 17, 4242, 0x5eed];

struct Rng(u64);

impl Rng {
    /// Uniform in (-scale, scale), rounded to f32.
    fn next(&mut self, scale: f64) -> f32 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        let u = ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64;
        ((u * 2.0 - 1.0) * scale) as f32
    }

    fn vec(&mut self, n: usize, scale: f64) -> Vec<f32> {
        (0..n).map(|_| self.next(scale)).collect()
    }
}

/// A node: op, opset, attributes (in the oracles' form; converted for the runtime).
struct Spec {
    op: &'static str,
    opset: i64,
    attrs: Vec<(&'static str, Attr)>,
}

impl Spec {
    fn new(op: &'static str, opset: i64, attrs: Vec<(&'static str, Attr)>) -> Spec {
        Spec { op, opset, attrs }
    }

    fn node_spec(&self) -> NodeSpec {
        NodeSpec {
            domain: String::new(),
            op_type: self.op.into(),
            opset: self.opset,
            attrs: self
                .attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect::<BTreeMap<_, _>>(),
            num_outputs: 1,
        }
    }
}

/// An input: f32 values (or int64 constants) with a shape.
#[derive(Clone)]
enum In {
    F(Vec<usize>, Vec<f32>),
    I(Vec<i64>),
}

impl In {
    fn oracle(&self) -> Value {
        match self {
            In::F(s, v) => Value::new(DType::F32, s.clone(), v.iter().map(|&x| x as f64).collect()),
            In::I(v) => Value::new(
                DType::I64,
                vec![v.len()],
                v.iter().map(|&x| x as f64).collect(),
            ),
        }
        .unwrap()
    }

    fn tensor(&self) -> Tensor {
        match self {
            In::F(s, v) => Tensor::from_f32(s, v.clone()).unwrap(),
            In::I(v) => Tensor::from_i64(&[v.len()], v.clone()).unwrap(),
        }
    }
}

/// Both oracles' first output.
fn oracles(spec: &Spec, inputs: &[Option<In>]) -> (Output, Output) {
    let node = spec.node_spec();
    let vals: Vec<Option<Value>> = inputs.iter().map(|i| i.as_ref().map(In::oracle)).collect();
    let r = Reference.evaluate(&node, &vals).expect("reference oracle");
    let i = Independent
        .evaluate(&node, &vals)
        .expect("independent oracle");
    (r[0].clone(), i[0].clone())
}

struct NoSubgraphs;

impl SubgraphRunner for NoSubgraphs {
    fn run_subgraph(&self, _: &Graph, _: Vec<RtValue>) -> OpResult<Vec<RtValue>> {
        Err(OpError::Unsupported("no subgraphs here".into()))
    }
}

/// The runtime's CPU kernel for `spec` (the correct kernel), first output as f64.
fn cpu_kernel(spec: &Spec, inputs: &[Option<In>]) -> Vec<f64> {
    let kernel = Registry::cpu().get("", spec.op).expect("a CPU kernel");
    let attrs = spec
        .attrs
        .iter()
        .map(|(k, a)| {
            let a = match a {
                Attr::Int(v) => RtAttr::Int(*v),
                Attr::Float(v) => RtAttr::Float(*v as f32),
                Attr::Ints(v) => RtAttr::Ints(v.clone()),
                Attr::Floats(v) => RtAttr::Floats(v.iter().map(|&x| x as f32).collect()),
                Attr::String(s) => RtAttr::String(s.as_bytes().to_vec()),
                Attr::Strings(s) => {
                    RtAttr::Strings(s.iter().map(|x| x.as_bytes().to_vec()).collect())
                }
                Attr::Tensor(_) => panic!("no tensor attributes in these cases"),
            };
            (k.to_string(), a)
        })
        .collect();
    let node = Node {
        name: "n".into(),
        op_type: spec.op.into(),
        domain: String::new(),
        opset: spec.opset,
        inputs: (0..inputs.len())
            .map(|i| {
                inputs[i]
                    .as_ref()
                    .map_or(String::new(), |_| format!("x{i}"))
            })
            .collect(),
        outputs: vec!["y".into()],
        attrs,
    };
    let vals: Vec<Option<RtValue>> = inputs
        .iter()
        .map(|i| i.as_ref().map(|i| RtValue::Tensor(i.tensor())))
        .collect();
    let refs: Vec<Option<&RtValue>> = vals.iter().map(|v| v.as_ref()).collect();
    let ctx = OpCtx {
        node: &node,
        runner: &NoSubgraphs,
        max_tensor_bytes: 1 << 30,
    };
    let out = kernel(&ctx, &refs).expect("the CPU kernel runs");
    out[0].as_tensor().unwrap().to_f64_vec().unwrap()
}

fn widen(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// Judges f32 engine output against both oracles.
fn judge(engine: &[f32], oracles: &(Output, Output)) -> Verdict {
    arbitrate(&widen(engine), eps("float32"), &oracles.0, &oracles.1)
}

fn assert_wrong(v: Verdict, what: &str) {
    eprintln!("{what}: {v:?}");
    assert!(
        matches!(v, Verdict::EngineWrong { .. }),
        "{what}: expected EngineWrong, got {v:?}"
    );
}

fn assert_agree(v: Verdict, what: &str) {
    assert_eq!(v, Verdict::Agree, "{what}");
}

/// Runs the correct CPU kernel and checks it agrees, then returns the oracles' outputs.
fn setup(spec: &Spec, inputs: &[Option<In>]) -> (Output, Output) {
    let o = oracles(spec, inputs);
    let cpu = cpu_kernel(spec, inputs);
    assert_agree(
        arbitrate(&cpu, eps("float32"), &o.0, &o.1),
        &format!("the runtime's {} kernel", spec.op),
    );
    o
}

// ---- Pad: constant padding, data written one position off ----

fn pad_constant(x: &[f32], (h, w): (usize, usize), pads: [usize; 4], shift: usize) -> Vec<f32> {
    let (oh, ow) = (h + pads[0] + pads[2], w + pads[1] + pads[3]);
    let mut y = vec![0.0f32; oh * ow];
    for i in 0..h {
        for j in 0..w {
            y[(i + pads[0]) * ow + j + pads[1] + shift] = x[i * w + j];
        }
    }
    y
}

#[test]
fn pad_off_by_one_is_engine_wrong() {
    for seed in SEEDS {
        let mut rng = Rng(seed);
        let (h, w) = (3, 4);
        let pads = [1, 1, 2, 2];
        let x = rng.vec(h * w, 3.0);
        let spec = Spec::new("Pad", 18, vec![]);
        let pads_in: Vec<i64> = pads.iter().map(|&p| p as i64).collect();
        let inputs = [Some(In::F(vec![h, w], x.clone())), Some(In::I(pads_in))];
        let o = setup(&spec, &inputs);
        assert_agree(judge(&pad_constant(&x, (h, w), pads, 0), &o), "Pad");
        assert_wrong(
            judge(&pad_constant(&x, (h, w), pads, 1), &o),
            "Pad shifted by one",
        );
    }
}

// ---- ReduceSum over the wrong axis (square input, same output shape) ----

fn reduce_sum_2d(x: &[f32], n: usize, axis: usize) -> Vec<f32> {
    (0..n)
        .map(|k| {
            (0..n)
                .map(|j| {
                    if axis == 1 {
                        x[k * n + j]
                    } else {
                        x[j * n + k]
                    }
                })
                .sum()
        })
        .collect()
}

#[test]
fn reduction_over_the_wrong_axis_is_engine_wrong() {
    for seed in SEEDS {
        let mut rng = Rng(seed);
        let n = 5;
        let x = rng.vec(n * n, 3.0);
        let spec = Spec::new("ReduceSum", 13, vec![("keepdims", Attr::Int(0))]);
        let inputs = [Some(In::F(vec![n, n], x.clone())), Some(In::I(vec![1]))];
        let o = setup(&spec, &inputs);
        assert_agree(judge(&reduce_sum_2d(&x, n, 1), &o), "ReduceSum axis 1");
        assert_wrong(judge(&reduce_sum_2d(&x, n, 0), &o), "ReduceSum over axis 0");
    }
}

// ---- Gemm and Conv without their bias ----

fn gemm(a: &[f32], b: &[f32], c: Option<&[f32]>, (m, k, n): (usize, usize, usize)) -> Vec<f32> {
    let mut y = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0f32;
            for p in 0..k {
                s += a[i * k + p] * b[p * n + j];
            }
            y[i * n + j] = s + c.map_or(0.0, |c| c[j]);
        }
    }
    y
}

#[test]
fn gemm_missing_bias_is_engine_wrong() {
    for seed in SEEDS {
        let mut rng = Rng(seed);
        let (m, k, n) = (4, 6, 5);
        let (a, b, c) = (rng.vec(m * k, 2.0), rng.vec(k * n, 2.0), rng.vec(n, 2.0));
        let spec = Spec::new("Gemm", 13, vec![]);
        let inputs = [
            Some(In::F(vec![m, k], a.clone())),
            Some(In::F(vec![k, n], b.clone())),
            Some(In::F(vec![n], c.clone())),
        ];
        let o = setup(&spec, &inputs);
        assert_agree(judge(&gemm(&a, &b, Some(&c), (m, k, n)), &o), "Gemm");
        assert_wrong(judge(&gemm(&a, &b, None, (m, k, n)), &o), "Gemm without C");
    }
}

#[test]
fn conv_missing_bias_is_engine_wrong() {
    for seed in SEEDS {
        let mut rng = Rng(seed);
        let spec = Spec::new("Conv", 11, vec![("pads", Attr::Ints(vec![1, 1, 1, 1]))]);
        let x = In::F(vec![1, 2, 5, 5], rng.vec(50, 2.0));
        let w = In::F(vec![3, 2, 3, 3], rng.vec(54, 1.0));
        let b = In::F(vec![3], rng.vec(3, 2.0));
        let inputs = [Some(x.clone()), Some(w.clone()), Some(b)];
        let o = setup(&spec, &inputs);
        // The wrong kernel: the correct CPU kernel with its bias input dropped.
        let y = cpu_kernel(&spec, &[Some(x), Some(w), None]);
        assert_wrong(
            arbitrate(&y, eps("float32"), &o.0, &o.1),
            "Conv without bias",
        );
    }
}

// ---- MatMul with B transposed (square, so shapes match) ----

#[test]
fn matmul_with_a_transposed_operand_is_engine_wrong() {
    for seed in SEEDS {
        let mut rng = Rng(seed);
        let n = 5;
        let (a, b) = (rng.vec(n * n, 2.0), rng.vec(n * n, 2.0));
        let spec = Spec::new("MatMul", 13, vec![]);
        let inputs = [
            Some(In::F(vec![n, n], a.clone())),
            Some(In::F(vec![n, n], b.clone())),
        ];
        let o = setup(&spec, &inputs);
        let bt: Vec<f32> = (0..n * n).map(|i| b[(i % n) * n + i / n]).collect();
        assert_agree(judge(&gemm(&a, &b, None, (n, n, n)), &o), "MatMul");
        assert_wrong(judge(&gemm(&a, &bt, None, (n, n, n)), &o), "MatMul A·Bᵀ");
    }
}

// ---- A stale value: the previous call's output ----

/// A Sigmoid kernel with a cache bug: after its first call it returns the first call's output.
#[derive(Default)]
struct StaleSigmoid {
    cached: RefCell<Option<Vec<f32>>>,
}

impl StaleSigmoid {
    fn run(&self, x: &[f32]) -> Vec<f32> {
        let mut c = self.cached.borrow_mut();
        c.get_or_insert_with(|| x.iter().map(|&v| 1.0 / (1.0 + (-v).exp())).collect())
            .clone()
    }
}

#[test]
fn stale_output_is_engine_wrong() {
    for seed in SEEDS {
        let mut rng = Rng(seed);
        let spec = Spec::new("Sigmoid", 13, vec![]);
        let kernel = StaleSigmoid::default();
        let x1 = rng.vec(24, 4.0);
        let x2 = rng.vec(24, 4.0);
        let first = [Some(In::F(vec![4, 6], x1.clone()))];
        let second = [Some(In::F(vec![4, 6], x2.clone()))];
        let o1 = setup(&spec, &first);
        let o2 = setup(&spec, &second);
        assert_agree(judge(&kernel.run(&x1), &o1), "first call");
        assert_wrong(judge(&kernel.run(&x2), &o2), "second call (stale)");
    }
}

// ---- Softmax without max subtraction on large inputs ----

fn softmax_rows(x: &[f32], cols: usize, subtract_max: bool) -> Vec<f32> {
    x.chunks(cols)
        .flat_map(|row| {
            let m = if subtract_max {
                row.iter().copied().fold(f32::NEG_INFINITY, f32::max)
            } else {
                0.0
            };
            let e: Vec<f32> = row.iter().map(|&v| (v - m).exp()).collect();
            let s: f32 = e.iter().sum();
            e.into_iter().map(move |v| v / s)
        })
        .collect()
}

#[test]
fn softmax_without_max_subtraction_is_engine_wrong() {
    for seed in SEEDS {
        let mut rng = Rng(seed);
        let (rows, cols) = (3, 7);
        // Values 100..1000: exp overflows f32 (beyond ~88.7) to inf, and inf / inf is NaN.
        let x: Vec<f32> = rng
            .vec(rows * cols, 1.0)
            .into_iter()
            .map(|u| 550.0 + 450.0 * u)
            .collect();
        let spec = Spec::new("Softmax", 13, vec![("axis", Attr::Int(-1))]);
        let inputs = [Some(In::F(vec![rows, cols], x.clone()))];
        let o = setup(&spec, &inputs);
        assert_agree(judge(&softmax_rows(&x, cols, true), &o), "Softmax");
        let naive = softmax_rows(&x, cols, false);
        assert!(
            naive.iter().any(|v| !v.is_finite()),
            "the naive softmax overflows"
        );
        assert_wrong(judge(&naive, &o), "Softmax without max subtraction");
    }
}

// ---- Conv ignoring dilation (output size right, taps not dilated) ----

/// 2-D Conv, one image, no padding, stride 1; `tap_dilation` is the step between kernel taps used
/// when reading the input (the bug: 1 where the node says `dilation`).
fn conv2d(
    x: &[f32],
    w: &[f32],
    (c, h, wd): (usize, usize, usize),
    (m, k): (usize, usize),
    dilation: usize,
    tap_dilation: usize,
) -> Vec<f32> {
    let eff = (k - 1) * dilation + 1;
    let (oh, ow) = (h - eff + 1, wd - eff + 1);
    let mut y = vec![0.0f32; m * oh * ow];
    for mo in 0..m {
        for i in 0..oh {
            for j in 0..ow {
                let mut s = 0.0f32;
                for ci in 0..c {
                    for ki in 0..k {
                        for kj in 0..k {
                            let xv =
                                x[(ci * h + i + ki * tap_dilation) * wd + j + kj * tap_dilation];
                            s += xv * w[((mo * c + ci) * k + ki) * k + kj];
                        }
                    }
                }
                y[(mo * oh + i) * ow + j] = s;
            }
        }
    }
    y
}

#[test]
fn conv_ignoring_dilation_is_engine_wrong() {
    for seed in SEEDS {
        let mut rng = Rng(seed);
        let (c, h, wd, m, k) = (2, 7, 8, 3, 3);
        let x = rng.vec(c * h * wd, 2.0);
        let w = rng.vec(m * c * k * k, 1.0);
        let spec = Spec::new("Conv", 11, vec![("dilations", Attr::Ints(vec![2, 2]))]);
        let inputs = [
            Some(In::F(vec![1, c, h, wd], x.clone())),
            Some(In::F(vec![m, c, k, k], w.clone())),
        ];
        let o = setup(&spec, &inputs);
        assert_agree(
            judge(&conv2d(&x, &w, (c, h, wd), (m, k), 2, 2), &o),
            "Conv with dilation",
        );
        assert_wrong(
            judge(&conv2d(&x, &w, (c, h, wd), (m, k), 2, 1), &o),
            "Conv ignoring dilation",
        );
    }
}

// ---- Oracles that disagree are surfaced, never passed ----

#[test]
fn a_perturbed_oracle_is_surfaced_as_disagreement() {
    for seed in SEEDS {
        let mut rng = Rng(seed);
        let n = 4;
        let (a, b) = (rng.vec(n * n, 2.0), rng.vec(n * n, 2.0));
        let spec = Spec::new("MatMul", 13, vec![]);
        let inputs = [
            Some(In::F(vec![n, n], a.clone())),
            Some(In::F(vec![n, n], b.clone())),
        ];
        let (r, i) = setup(&spec, &inputs);
        let engine = gemm(&a, &b, None, (n, n, n));
        assert_agree(judge(&engine, &(r.clone(), i.clone())), "MatMul");
        // One oracle's output perturbed (one element, by 1e-7 of its magnitude: within what an f32
        // engine may be off, far beyond the oracles' f64 agreement bound), on either side: the
        // engine is close enough to both, yet the case is not passed.
        let k = (seed as usize) % (n * n);
        let mut bad = i.clone();
        bad.value.data[k] += 1e-7 * i.magnitude[k].max(i.value.data[k].abs());
        let v = judge(&engine, &(r.clone(), bad.clone()));
        assert!(
            matches!(v, Verdict::OraclesDisagree { index, .. } if index == k),
            "perturbed independent: {v:?}"
        );
        let v = judge(&engine, &(bad, r.clone()));
        assert!(
            matches!(v, Verdict::OraclesDisagree { .. }),
            "perturbed reference: {v:?}"
        );
        // A missing element is a disagreement too.
        let mut short = i.clone();
        short.value.data.pop();
        assert!(matches!(
            judge(&engine, &(r.clone(), short)),
            Verdict::OraclesDisagree { .. }
        ));
        // One oracle fed a perturbed input: its output differs; surfaced the same way.
        let mut a2 = a.clone();
        a2[0] = f32::from_bits(a2[0].to_bits() + 1);
        let node = spec.node_spec();
        let i2 = Independent
            .evaluate(
                &node,
                &[
                    Some(In::F(vec![n, n], a2).oracle()),
                    Some(In::F(vec![n, n], b.clone()).oracle()),
                ],
            )
            .unwrap()
            .remove(0);
        let v = judge(&engine, &(r.clone(), i2));
        assert!(
            matches!(v, Verdict::OraclesDisagree { .. }),
            "independent fed a perturbed input: {v:?}"
        );
    }
}
