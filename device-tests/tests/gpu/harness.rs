//! The on-device test harness: one-node models run on each accelerator present ([`accelerators`]:
//! CUDA, wgpu) with poisoned device buffers, every output judged against both CPU oracles by the
//! runtime's own arbitration (`quorum::verify::check`). Each case runs twice per accelerator, once
//! per poison pattern ([`POISONS`]): NaN bytes show an element a kernel left unwritten wherever the
//! right answer is a number, finite bytes show it where the answer is NaN.
//!
//! CUDA must run every case it is given. wgpu may decline a node (at plan time, or its kernel at
//! run time: an i64 operand, an adapter without f64): the node then runs on the CPU and the result
//! is still judged, and the decline is printed (`wgpu declines ...`); `tests/gpu/wgpu.rs` pins the
//! forms wgpu must run on its device. wgpu on a software adapter (lavapipe) is tested whenever it is
//! the adapter wgpu picks (the only one here, as in CI) or named with `QUORUM_WGPU_ADAPTER`.
//!
//! Where no accelerator is usable (or with `QUORUM_GPU_TESTS_ON_CPU=1`) the same cases run on the
//! CPU provider instead: that checks the harness and the cases themselves on every `cargo test`.
#![allow(dead_code)]
use prost::Message;
use quorum::ir::Attr;
use quorum::proto;
use quorum::verify::{Check, check};
use quorum::{Availability, DType, Provider, Session, SessionOptions, Tensor, Value};

/// Poison bytes: every float type reads NaN (an integer -1, a bool true).
pub const POISON_NAN: u8 = 0xFF;
/// Poison bytes: finite values in every float type (0.0115 in f32, 1.06 in f16), 0x3C3C3C3C in an
/// i32, 60 in a bool byte.
pub const POISON_FINITE: u8 = 0x3C;
/// The patterns each checked case runs under.
pub const POISONS: [u8; 2] = [POISON_NAN, POISON_FINITE];

/// Seeded uniform values in [-1, 1) (never all zero).
pub fn rand_f32(seed: u64, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let mut rng = quorum::inputs::Rng::new(seed);
    let v: Vec<f32> = (0..n).map(|_| rng.uniform() as f32).collect();
    Tensor::from_f32(shape, v).unwrap()
}

/// Seeded values in [lo, hi).
pub fn rand_range(seed: u64, shape: &[usize], lo: f32, hi: f32) -> Tensor {
    let n: usize = shape.iter().product();
    let mut rng = quorum::inputs::Rng::new(seed);
    let v: Vec<f32> = (0..n)
        .map(|_| lo + (hi - lo) * ((rng.uniform() as f32 + 1.0) / 2.0))
        .collect();
    Tensor::from_f32(shape, v).unwrap()
}

pub fn i64s(shape: &[usize], v: Vec<i64>) -> Tensor {
    Tensor::from_i64(shape, v).unwrap()
}

/// The accelerators each case runs on: CUDA and wgpu where usable, none under
/// `QUORUM_GPU_TESTS_ON_CPU` (the cases then run on the CPU provider).
/// Whether a case of `dtype` is skipped here: bf16 on a CUDA machine whose bf16 kernels were
/// turned off (`QUORUM_CUDA_BF16=off`). Prints why. Without CUDA the case runs on the other
/// providers as ever.
pub fn bf16_off(dtype: quorum::DType) -> bool {
    let off = dtype == quorum::DType::BF16
        && accelerators().contains(&Provider::Cuda)
        && !quorum::cuda::ops::elem::bf16_enabled();
    if off {
        println!("bf16 kernels off (QUORUM_CUDA_BF16=off): case skipped");
    }
    off
}

/// Whether CUDA's ConvInteger, QLinearMatMul and QLinearConv kernels are off (by default until
/// judged, or by `QUORUM_CUDA_INT8=off`): their device cases then skip.
pub fn conv_requant_off() -> bool {
    let off = accelerators().contains(&Provider::Cuda)
        && !quorum::cuda::ops::integer::conv_requant_enabled();
    if off {
        println!("ConvInteger and QLinear* kernels off (QUORUM_CUDA_INT8 unset or off): skipped");
    }
    off
}

/// Whether the integer kernels' cases are skipped here: a CUDA machine with them turned off
/// (`QUORUM_CUDA_INT8=off`). Prints why.
pub fn int8_off() -> bool {
    let off =
        accelerators().contains(&Provider::Cuda) && !quorum::cuda::ops::integer::int8_enabled();
    if off {
        println!("integer kernels off (QUORUM_CUDA_INT8=off): case skipped");
    }
    off
}

pub fn accelerators() -> &'static [Provider] {
    static ACC: std::sync::OnceLock<Vec<Provider>> = std::sync::OnceLock::new();
    ACC.get_or_init(|| {
        if std::env::var_os("QUORUM_GPU_TESTS_ON_CPU").is_some() {
            return Vec::new();
        }
        [Provider::Cuda, Provider::Wgpu]
            .into_iter()
            .filter(|p| p.available().is_ok())
            .collect()
    })
}

/// The providers a case runs on: every accelerator present, or the CPU where there is none (unless
/// the `gpu-tests` feature requires one, as on GPU runners).
fn targets() -> Vec<Provider> {
    let acc = accelerators();
    if acc.is_empty() {
        if cfg!(feature = "gpu-tests") {
            panic!("the gpu-tests feature requires an accelerator and none is usable here");
        }
        return vec![Provider::Cpu];
    }
    acc.to_vec()
}

/// Whether the CUDA-only tests (streams, graphs, system) run on the CPU provider instead: asked
/// for with `QUORUM_GPU_TESTS_ON_CPU`, or because CUDA is not usable here (unless the `gpu-tests`
/// feature requires it, as on CUDA runners).
pub fn on_cpu() -> bool {
    static ON_CPU: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON_CPU.get_or_init(|| {
        std::env::var_os("QUORUM_GPU_TESTS_ON_CPU").is_some()
            || (!cfg!(feature = "gpu-tests") && Provider::Cuda.available().is_err())
    })
}

fn tensor_proto(name: &str, t: &Tensor) -> proto::TensorProto {
    proto::TensorProto {
        name: Some(name.into()),
        dims: t.shape().iter().map(|&d| d as i64).collect(),
        data_type: Some(t.dtype().onnx()),
        raw_data: Some(raw_bytes(t)),
        ..Default::default()
    }
}

/// A tensor's elements as ONNX raw data (little-endian, bool as one byte).
pub fn raw_bytes(t: &Tensor) -> Vec<u8> {
    quorum::pb::tensor_proto("t", t)
        .raw_data
        .unwrap_or_default()
}

fn typed(name: &str, t: &Tensor) -> proto::ValueInfoProto {
    use proto::tensor_shape_proto::{Dimension, dimension::Value as DimV};
    proto::ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(proto::TypeProto {
            value: Some(proto::type_proto::Value::TensorType(
                proto::type_proto::Tensor {
                    elem_type: Some(t.dtype().onnx()),
                    shape: Some(proto::TensorShapeProto {
                        dim: t
                            .shape()
                            .iter()
                            .map(|&d| Dimension {
                                value: Some(DimV::DimValue(d as i64)),
                                denotation: None,
                            })
                            .collect(),
                    }),
                },
            )),
            denotation: None,
        }),
        ..Default::default()
    }
}

fn attr_proto(name: &str, a: &Attr) -> proto::AttributeProto {
    use proto::attribute_proto::AttributeType as T;
    let mut p = proto::AttributeProto {
        name: Some(name.into()),
        ..Default::default()
    };
    match a {
        Attr::Int(v) => {
            p.i = Some(*v);
            p.r#type = Some(T::Int as i32);
        }
        Attr::Float(v) => {
            p.f = Some(*v);
            p.r#type = Some(T::Float as i32);
        }
        Attr::Ints(v) => {
            p.ints = v.clone();
            p.r#type = Some(T::Ints as i32);
        }
        Attr::Floats(v) => {
            p.floats = v.clone();
            p.r#type = Some(T::Floats as i32);
        }
        Attr::String(s) => {
            p.s = Some(s.clone());
            p.r#type = Some(T::String as i32);
        }
        Attr::Strings(v) => {
            p.strings = v.clone();
            p.r#type = Some(T::Strings as i32);
        }
        Attr::Tensor(t) => {
            p.t = Some(tensor_proto(name, t));
            p.r#type = Some(T::Tensor as i32);
        }
        other => panic!(
            "the harness does not pass attributes of kind {}",
            other.kind()
        ),
    }
    p
}

/// One node, its inputs, and what to expect of its run.
pub struct Case {
    op: String,
    opset: i64,
    attrs: Vec<(String, Attr)>,
    inputs: Vec<Option<(Tensor, bool)>>,
    outputs: usize,
    allow_fallback: bool,
}

/// What a checked case reports.
pub struct Report {
    pub outputs: Vec<Value>,
    pub counters: quorum::CounterSnapshot,
    /// The node ran on the provider asked for: claimed at plan time, no run-time decline.
    pub on_device: bool,
}

impl Case {
    pub fn new(op: &str) -> Case {
        Case {
            op: op.into(),
            opset: 17,
            attrs: Vec::new(),
            inputs: Vec::new(),
            outputs: 1,
            allow_fallback: false,
        }
    }
    pub fn opset(mut self, v: i64) -> Case {
        self.opset = v;
        self
    }
    pub fn attr(mut self, name: &str, a: Attr) -> Case {
        self.attrs.push((name.into(), a));
        self
    }
    pub fn attr_i(self, name: &str, v: i64) -> Case {
        self.attr(name, Attr::Int(v))
    }
    pub fn attr_f(self, name: &str, v: f32) -> Case {
        self.attr(name, Attr::Float(v))
    }
    pub fn attr_ints(self, name: &str, v: &[i64]) -> Case {
        self.attr(name, Attr::Ints(v.to_vec()))
    }
    pub fn attr_s(self, name: &str, v: &str) -> Case {
        self.attr(name, Attr::String(v.as_bytes().to_vec()))
    }
    /// A runtime input (uploaded per run).
    pub fn input(mut self, t: Tensor) -> Case {
        self.inputs.push(Some((t, false)));
        self
    }
    /// An initializer (goes through the weight cache).
    pub fn constant(mut self, t: Tensor) -> Case {
        self.inputs.push(Some((t, true)));
        self
    }
    /// An omitted optional input.
    pub fn absent(mut self) -> Case {
        self.inputs.push(None);
        self
    }
    pub fn outputs(mut self, k: usize) -> Case {
        self.outputs = k;
        self
    }
    /// The kernel may decline these inputs (the node then runs on the CPU).
    pub fn allow_fallback(mut self) -> Case {
        self.allow_fallback = true;
        self
    }

    fn model(&self) -> Vec<u8> {
        let mut node = proto::NodeProto {
            op_type: Some(self.op.clone()),
            name: Some(format!("{}_node", self.op)),
            ..Default::default()
        };
        let mut graph_inputs = Vec::new();
        let mut inits = Vec::new();
        for (i, inp) in self.inputs.iter().enumerate() {
            match inp {
                None => node.input.push(String::new()),
                Some((t, is_const)) => {
                    let name = format!("in{i}");
                    node.input.push(name.clone());
                    if *is_const {
                        inits.push(tensor_proto(&name, t));
                    } else {
                        graph_inputs.push(typed(&name, t));
                    }
                }
            }
        }
        let outs: Vec<String> = (0..self.outputs).map(|i| format!("out{i}")).collect();
        node.output = outs.clone();
        node.attribute = self.attrs.iter().map(|(n, a)| attr_proto(n, a)).collect();
        let m = proto::ModelProto {
            ir_version: Some(8),
            opset_import: vec![proto::OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(self.opset),
            }],
            graph: Some(proto::GraphProto {
                name: Some("case".into()),
                node: vec![node],
                input: graph_inputs,
                output: outs
                    .iter()
                    .map(|n| proto::ValueInfoProto {
                        name: Some(n.clone()),
                        ..Default::default()
                    })
                    .collect(),
                initializer: inits,
                ..Default::default()
            }),
            ..Default::default()
        };
        m.encode_to_vec()
    }

    pub fn describe(&self) -> String {
        let shapes: Vec<String> = self
            .inputs
            .iter()
            .map(|i| match i {
                None => "-".into(),
                Some((t, c)) => format!("{}{}", t.describe(), if *c { " (const)" } else { "" }),
            })
            .collect();
        format!(
            "{} opset {} attrs {:?} inputs [{}]",
            self.op,
            self.opset,
            self.attrs,
            shapes.join(", ")
        )
    }

    /// The case's session under `options`, and its runtime inputs (for benchmarks).
    pub fn session(&self, options: SessionOptions) -> (Session, Vec<(String, Value)>) {
        let session = Session::from_bytes(&self.model(), options).expect("the case loads");
        (session, self.feeds())
    }

    /// The case's runtime inputs by name (constants are initializers instead).
    fn feeds(&self) -> Vec<(String, Value)> {
        self.inputs
            .iter()
            .enumerate()
            .filter_map(|(i, inp)| match inp {
                Some((t, false)) => Some((format!("in{i}"), Value::Tensor(t.clone()))),
                _ => None,
            })
            .collect()
    }

    /// For integers beyond 2^53, which the oracles hold as f64: runs the case on each accelerator
    /// with poisoned buffers (each pattern of [`POISONS`]) and on the CPU engine, and asserts the
    /// outputs are identical (bits, shapes, dtypes) and that the accelerator ran the node without
    /// falling back (CUDA always, unless `allow_fallback`; wgpu where it runs the node, see the
    /// module doc).
    pub fn check_against_cpu(self) -> Vec<Value> {
        let cpu_options = SessionOptions {
            fold_constants: false,
            ..Default::default()
        };
        let cpu = Session::from_bytes(&self.model(), cpu_options).unwrap();
        let want: Vec<Value> = cpu
            .run(self.feeds())
            .unwrap()
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        for p in targets() {
            for poison in POISONS {
                let what = format!("{} on {} (poison {poison:#04X})", self.describe(), p.name());
                let session = Session::from_bytes(&self.model(), device_options(p, poison))
                    .unwrap_or_else(|e| panic!("{what}: load: {e}"));
                let got: Vec<Value> = session
                    .run(self.feeds())
                    .unwrap_or_else(|e| panic!("{what}: run: {e}"))
                    .into_iter()
                    .map(|(_, v)| v)
                    .collect();
                self.placed(&session, p, &what);
                assert_eq!(got, want, "{what}: {} and CPU differ", p.name());
            }
        }
        want
    }

    /// Runs the case where `check` would and returns the run's error: for inputs that break the op's
    /// contract, which must be a typed error on every provider, never a value or a panic.
    pub fn fails(self) -> String {
        let what = self.describe();
        let mut last = String::new();
        for p in targets() {
            let session = match Session::from_bytes(&self.model(), device_options(p, POISON_NAN)) {
                Ok(s) => s,
                Err(e) => {
                    last = e.to_string();
                    continue;
                }
            };
            match session.run(self.feeds()) {
                Ok(_) => panic!(
                    "{what} on {}: ran, but the inputs break the op's contract",
                    p.name()
                ),
                Err(e) => last = e.to_string(),
            }
        }
        last
    }

    /// Runs the case on each accelerator (poisoned buffers, no size floor) and judges every output
    /// against both oracles, once per poison pattern of [`POISONS`]. Panics with the case's
    /// description on any failure; the report is the last run's.
    pub fn check(self) -> Report {
        let mut report = None;
        for p in targets() {
            for poison in POISONS {
                report = Some(self.check_with(p, poison));
            }
        }
        report.expect("at least one provider and poison pattern")
    }

    /// Whether `session` ran the node where the case demands: CUDA always (unless
    /// `allow_fallback`); wgpu where it claims the node, and a decline is printed.
    fn placed(&self, session: &Session, p: Provider, what: &str) {
        let place = &session.placement()[0];
        let c = session.counters();
        match p {
            Provider::Cpu => {}
            Provider::Wgpu => {
                if place.provider != p {
                    eprintln!("wgpu declines {what}: {:?}", place.declined);
                } else if c.cuda_fallbacks != 0 {
                    eprintln!("wgpu declines {what} at run time: the CPU ran it");
                }
            }
            _ => {
                assert_eq!(
                    place.provider,
                    p,
                    "{what}: {} declined the node: {:?}",
                    p.name(),
                    place.declined
                );
                if !self.allow_fallback {
                    assert_eq!(
                        c.cuda_fallbacks, 0,
                        "{what}: the kernel declined these inputs"
                    );
                }
            }
        }
    }

    /// Runs the case on `p` alone and reports whether its kernel ran the node (no plan-time or
    /// run-time decline), with the outputs judged against both oracles.
    pub fn ran_on(&self, p: Provider) -> bool {
        self.check_with(p, POISON_NAN).on_device && self.check_with(p, POISON_FINITE).on_device
    }

    fn check_with(&self, p: Provider, poison: u8) -> Report {
        let what = format!("{} on {} (poison {poison:#04X})", self.describe(), p.name());
        let session = match Session::from_bytes(&self.model(), device_options(p, poison)) {
            Ok(s) => s,
            Err(e) => panic!("{what}: load: {e}"),
        };
        let outputs: Vec<Value> = match session.run(self.feeds()) {
            Ok(o) => o.into_iter().map(|(_, v)| v).collect(),
            Err(e) => panic!("{what}: run: {e}"),
        };
        self.placed(&session, p, &what);
        let counters = session.counters();
        let node = &session.model().graph.nodes[0];
        let owned: Vec<Option<Value>> = self
            .inputs
            .iter()
            .map(|i| i.as_ref().map(|(t, _)| Value::Tensor(t.clone())))
            .collect();
        let all: Vec<Option<&Value>> = owned.iter().map(Option::as_ref).collect();
        match check(node, &all, &outputs) {
            Check::Agree => {}
            Check::Mismatch { output, wrong } => panic!("{what}: output {output}: {wrong:?}"),
            Check::Unsettled(why) => panic!("{what}: unsettled: {why}"),
        }
        let on_device = session.placement()[0].provider == p && counters.cuda_fallbacks == 0;
        Report {
            outputs,
            counters,
            on_device,
        }
    }
}

/// `p` first (the CPU provider alone for `Provider::Cpu`), with device buffers poisoned with
/// `poison`, no size floor and no constant folding.
fn device_options(p: Provider, poison: u8) -> SessionOptions {
    let providers = if p == Provider::Cpu {
        vec![Provider::Cpu]
    } else {
        vec![p, Provider::Cpu]
    };
    SessionOptions {
        providers,
        poison_device_buffers: Some(poison),
        // The suite tests kernels: a node with constant inputs must run on the device, not once at
        // load on the CPU.
        fold_constants: false,
        ..Default::default()
    }
}

/// The dtype of a tensor, for assertions.
pub fn dtype(v: &Value) -> DType {
    v.as_tensor().map(|t| t.dtype()).expect("a tensor")
}
