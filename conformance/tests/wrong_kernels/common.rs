//! What every wrong-kernel case shares: seeded values, a node description in the oracles' terms, the
//! runtime's CPU kernel as the correct kernel, and the judgement by the one arbitration function under
//! the error bound of the op's class (`quorum_oracle::arbitrate`).
use std::collections::BTreeMap;

use quorum::ir::{Attr as RtAttr, Node};
use quorum::ops::{NoSubgraphs, OpCtx, Registry};
use quorum::verify::{from_oracle_dtype, oracle_dtype};
use quorum::{Tensor, Value as RtValue};
use quorum_conformance::arbitrate::{Bound, EngineOutput, Verdict, arbitrate};
use quorum_oracle::independent::Independent;
use quorum_oracle::reference::Reference;
use quorum_oracle::{Attr, DType, NodeSpec, Oracle, Output, Value};

/// Seeds every case runs over.
pub const SEEDS: [u64; 6] = [1, 2, 3, 17, 4242, 0x5eed];

pub struct Rng(pub u64);

impl Rng {
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in (-scale, scale), rounded to f32.
    pub fn next(&mut self, scale: f64) -> f32 {
        ((self.unit() * 2.0 - 1.0) * scale) as f32
    }

    pub fn vec(&mut self, n: usize, scale: f64) -> Vec<f32> {
        (0..n).map(|_| self.next(scale)).collect()
    }

    /// Multiples of 0.5 in [-scale, scale]: ties are common (comparisons).
    pub fn halves(&mut self, n: usize, scale: f64) -> Vec<f32> {
        let steps = (2.0 * scale) as u64;
        (0..n)
            .map(|_| {
                let k = (self.unit() * (2 * steps + 1) as f64) as i64 - steps as i64;
                k as f32 / 2.0
            })
            .collect()
    }
}

/// A node: op, opset, attributes (in the oracles' form; converted for the runtime).
pub struct Spec {
    pub op: &'static str,
    pub opset: i64,
    pub attrs: Vec<(&'static str, Attr)>,
}

impl Spec {
    pub fn new(op: &'static str, opset: i64, attrs: Vec<(&'static str, Attr)>) -> Spec {
        Spec { op, opset, attrs }
    }

    pub fn node_spec(&self) -> NodeSpec {
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

/// A tensor as both sides see it: every element exactly representable in `dtype`.
#[derive(Clone, Debug)]
pub struct T {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

impl T {
    pub fn new(dtype: DType, shape: &[usize], data: Vec<f64>) -> T {
        assert_eq!(shape.iter().product::<usize>(), data.len(), "{shape:?}");
        // Through the runtime's own conversion, so that both sides see identical values.
        let t = Tensor::from_f64s(from_oracle_dtype(dtype), shape, data).unwrap();
        T {
            dtype,
            shape: shape.to_vec(),
            data: t.to_f64_vec().unwrap(),
        }
    }

    pub fn f32(shape: &[usize], v: &[f32]) -> T {
        T::new(DType::F32, shape, v.iter().map(|&x| x as f64).collect())
    }

    /// f32 values rounded to f16.
    pub fn f16(shape: &[usize], v: &[f32]) -> T {
        T::new(DType::F16, shape, v.iter().map(|&x| x as f64).collect())
    }

    pub fn i64(v: &[i64]) -> T {
        T::new(
            DType::I64,
            &[v.len()],
            v.iter().map(|&x| x as f64).collect(),
        )
    }

    /// The values as f32 (exact for f32 and f16 tensors).
    pub fn f32s(&self) -> Vec<f32> {
        self.data.iter().map(|&x| x as f32).collect()
    }

    pub fn oracle(&self) -> Value {
        Value::new(self.dtype, self.shape.clone(), self.data.clone()).unwrap()
    }

    fn tensor(&self) -> Tensor {
        Tensor::from_f64s(
            from_oracle_dtype(self.dtype),
            &self.shape,
            self.data.clone(),
        )
        .unwrap()
    }
}

/// Both oracles' first output, and the length of the node's sums on these inputs (what verification
/// passes to the bound: `quorum_oracle::arbitrate::terms`).
pub struct Oracles(pub Output, pub Output, pub Option<usize>);

pub fn oracles(spec: &Spec, inputs: &[Option<T>]) -> Oracles {
    let node = spec.node_spec();
    let vals: Vec<Option<Value>> = inputs.iter().map(|i| i.as_ref().map(T::oracle)).collect();
    let r = Reference.evaluate(&node, &vals).expect("reference oracle");
    let i = Independent
        .evaluate(&node, &vals)
        .expect("independent oracle");
    let refs: Vec<Option<&Value>> = vals.iter().map(Option::as_ref).collect();
    let terms = quorum_oracle::arbitrate::terms(&node, &refs);
    Oracles(r[0].clone(), i[0].clone(), terms)
}

/// The runtime's CPU kernel for `spec` (the correct kernel): its first output.
pub fn cpu_kernel(spec: &Spec, inputs: &[Option<T>]) -> T {
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
    let t = out[0].as_tensor().unwrap();
    T {
        dtype: oracle_dtype(t.dtype()).expect("an oracle dtype"),
        shape: t.shape().to_vec(),
        data: t.to_f64_vec().unwrap(),
    }
}

/// Judges an engine's output against both oracles, under the bound of the op's class for an engine
/// that promises f32 computation (f16 and bf16 widened, rounded once).
pub fn judge(spec: &Spec, engine: &T, o: &Oracles) -> Verdict {
    let view = EngineOutput {
        dtype: engine.dtype,
        shape: &engine.shape,
        data: &engine.data,
    };
    let bound = Bound {
        terms: o.2,
        ..Bound::for_node(&spec.node_spec(), engine.dtype)
    };
    arbitrate(view, bound, &o.0, &o.1)
}

/// An f32 engine output of the oracles' shape.
pub fn f32_out(o: &Oracles, v: &[f32]) -> T {
    T {
        dtype: DType::F32,
        shape: o.0.value.shape.clone(),
        data: v.iter().map(|&x| x as f64).collect(),
    }
}

/// An engine output of the oracles' shape in `dtype`, from values already in that type.
pub fn out(o: &Oracles, dtype: DType, data: Vec<f64>) -> T {
    T {
        dtype,
        shape: o.0.value.shape.clone(),
        data,
    }
}

pub fn assert_wrong(v: Verdict, what: &str) {
    eprintln!("{what}: {v:?}");
    assert!(
        matches!(v, Verdict::EngineWrong(_)),
        "{what}: expected EngineWrong, got {v:?}"
    );
}

pub fn assert_agree(v: Verdict, what: &str) {
    assert_eq!(v, Verdict::Agree, "{what}");
}

/// Asserts `v` is what a kernel `right` or wrong must get.
pub fn expect(v: Verdict, right: bool, what: &str) {
    if right {
        assert_agree(v, what);
    } else {
        assert_wrong(v, what);
    }
}

/// The oracles' outputs, after checking that the runtime's CPU kernel agrees with them.
pub fn setup(spec: &Spec, inputs: &[Option<T>]) -> Oracles {
    let o = oracles(spec, inputs);
    let cpu = cpu_kernel(spec, inputs);
    assert_agree(
        judge(spec, &cpu, &o),
        &format!("the runtime's {} kernel", spec.op),
    );
    o
}
