//! The CPU kernel registry. Each op family lives in its own file and registers its kernels in
//! `register`; adding an op is one function plus one line there.
//!
//! A kernel is a plain function of its context (the node, its attributes, its opset) and its inputs.
//! Shape rules, attribute parsing and broadcasting are shared helpers here, so every backend reads the
//! same semantics. [`OpCtx`] is all a kernel sees of the session: the node (attributes, opset), a
//! [`SubgraphRunner`] for control flow and session constants, and the size limit on data-driven
//! allocations; nothing here refers to `Session`.
//!
//! A family that outgrows one file keeps its children in a folder of its name, `<family>/<part>.rs`
//! (e.g. `data/index.rs`, `conv/packed.rs`), declared by the family file `<family>.rs` itself, so
//! the registry still sees one module per family. An op with an in-place form registers it beside
//! the kernel ([`InPlace`], read by the memory plan).
use std::collections::HashMap;

use crate::bail;
use crate::error::{OpError, OpResult};
use crate::ir::{Attr, Graph, Node};
use crate::tensor::{Tensor, Value};

pub mod attention;
pub mod broadcast;
pub mod cast;
pub mod channel_affine;
pub mod control;
pub mod conv;
pub mod data;
pub mod elementwise;
pub mod loss;
pub mod map_op;
pub mod matmul;
pub mod matmul_bias;
pub mod misc;
pub mod norm;
pub mod pool;
pub mod pool_roi;
pub mod quantize;
pub mod reduce;
pub mod resize;
pub mod rnn;
pub mod sequence;
pub mod shape;
pub mod softmax;
pub mod unary_op;
pub mod variadic;

/// A CPU kernel: inputs in node order (`None` for an omitted optional input), outputs in node order.
pub type Kernel = fn(&OpCtx, &[Option<&Value>]) -> OpResult<Vec<Value>>;

/// A kernel's in-place form: its one output written over `donor`, the node's input `at`, which dies
/// at the node and which nothing else holds (the executor decides that; the other inputs are in the
/// slice, `at`'s slot empty). `Ok(false)`, with `donor` untouched, where the form does not apply
/// (a dtype, a broadcast that grows the output, an attribute it does not take, an error the kernel
/// should report): the kernel then runs. Where it returns `true`, `donor` holds what the kernel
/// would have returned, bit for bit.
pub type InPlace = fn(&OpCtx, &mut Tensor, usize, &[Option<&Value>]) -> OpResult<bool>;

/// Runs a subgraph attribute of the node being executed (If branches, Loop and Scan bodies) with the
/// given inputs, the current scope visible to it.
pub trait SubgraphRunner {
    fn run_subgraph(&self, graph: &Graph, inputs: Vec<Value>) -> OpResult<Vec<Value>>;

    /// Most iterations one Loop node may run (`SessionOptions::max_loop_iterations`).
    fn max_loop_iterations(&self) -> u64 {
        u64::MAX
    }

    /// The shared value named `name` when it is a constant of the running session (an initializer,
    /// given or folded, that no run input overrides), so that a kernel can keep work derived from it
    /// across runs, keyed by its `Arc` (packed convolution weights, `core/src/ops/conv/weights.rs`).
    /// `None` for values computed or fed per run, and by default.
    fn constant(&self, _name: &str) -> Option<std::sync::Arc<Value>> {
        None
    }
}

/// The domain of Quorum's own ops (fused forms the graph optimiser produces), e.g. `FusedConv`.
pub const QUORUM_DOMAIN: &str = "com.quorum";

/// What a kernel sees of its node.
pub struct OpCtx<'a> {
    pub node: &'a Node,
    pub runner: &'a dyn SubgraphRunner,
    /// The session's limit on one tensor's size: kernels whose output size comes from data check it.
    pub max_tensor_bytes: u64,
}

/// Maps (domain, op_type) to a kernel. The kernel reads `ctx.opset()` where versions differ.
#[derive(Default)]
pub struct Registry {
    kernels: HashMap<(&'static str, &'static str), Kernel>,
    /// In-place forms, with how many of the leading inputs each may write over (1: the first
    /// only, as for a unary op whose other inputs are parameters; 2: either operand).
    in_place: HashMap<(&'static str, &'static str), (InPlace, usize)>,
    families: HashMap<(&'static str, &'static str), &'static str>,
    current_family: &'static str,
}

impl Registry {
    pub fn add(&mut self, domain: &'static str, op: &'static str, k: Kernel) {
        self.kernels.insert((domain, op), k);
        self.families.insert((domain, op), self.current_family);
    }

    /// Registers the in-place form of an op whose kernel is registered, writing over its first
    /// input only.
    pub fn in_place(&mut self, domain: &'static str, op: &'static str, f: InPlace) {
        self.in_place.insert((domain, op), (f, 1));
    }

    /// Registers the in-place form of a binary op, which may write over either operand.
    pub fn in_place_either(&mut self, domain: &'static str, op: &'static str, f: InPlace) {
        self.in_place.insert((domain, op), (f, 2));
    }

    /// The ops that have an in-place form.
    pub fn in_place_ops(&self) -> impl Iterator<Item = (&'static str, &'static str)> + '_ {
        self.in_place.keys().copied()
    }

    /// The in-place form of an op, where it has one, and how many leading inputs it may write over.
    pub fn get_in_place(&self, domain: &str, op: &str) -> Option<(InPlace, usize)> {
        self.in_place.get(&(domain, op)).copied()
    }

    /// The op family (kernel file) an op belongs to, for reports.
    pub fn family(&self, domain: &str, op: &str) -> Option<&'static str> {
        self.families.get(&(domain, op)).copied()
    }

    pub fn get(&self, domain: &str, op: &str) -> Option<Kernel> {
        self.kernels.get(&(domain, op)).copied()
    }

    pub fn ops(&self) -> impl Iterator<Item = (&'static str, &'static str)> + '_ {
        self.kernels.keys().copied()
    }

    /// The registry with every CPU kernel.
    pub fn cpu() -> &'static Registry {
        static REG: std::sync::OnceLock<Registry> = std::sync::OnceLock::new();
        REG.get_or_init(|| {
            let mut r = Registry::default();
            register_all(&mut r);
            r
        })
    }
}

fn register_all(r: &mut Registry) {
    r.current_family = "attention";
    attention::register(r);
    r.current_family = "loss";
    loss::register(r);
    r.current_family = "cast";
    cast::register(r);
    r.current_family = "control";
    control::register(r);
    r.current_family = "conv";
    conv::register(r);
    r.current_family = "data";
    data::register(r);
    r.current_family = "elementwise";
    elementwise::register(r);
    r.current_family = "matmul";
    matmul::register(r);
    matmul_bias::register(r);
    channel_affine::register(r);
    r.current_family = "misc";
    misc::register(r);
    r.current_family = "norm";
    norm::register(r);
    r.current_family = "pool";
    pool::register(r);
    r.current_family = "quantize";
    quantize::register(r);
    r.current_family = "reduce";
    reduce::register(r);
    r.current_family = "resize";
    resize::register(r);
    r.current_family = "rnn";
    rnn::register(r);
    r.current_family = "sequence";
    sequence::register(r);
    r.current_family = "shape";
    shape::register(r);
    r.current_family = "softmax";
    softmax::register(r);
    r.current_family = "variadic";
    variadic::register(r);
}

impl<'a> OpCtx<'a> {
    pub fn opset(&self) -> i64 {
        self.node.opset
    }

    pub fn attr(&self, name: &str) -> Option<&'a Attr> {
        self.node.attrs.get(name)
    }

    pub fn has_attr(&self, name: &str) -> bool {
        self.node.attrs.contains_key(name)
    }

    fn wrong(&self, name: &str, want: &str, got: &Attr) -> OpError {
        OpError::Invalid(format!(
            "attribute '{name}' must be {want}, got {}",
            got.kind()
        ))
    }

    pub fn attr_opt_i(&self, name: &str) -> OpResult<Option<i64>> {
        match self.attr(name) {
            None => Ok(None),
            Some(Attr::Int(v)) => Ok(Some(*v)),
            Some(a) => Err(self.wrong(name, "int", a)),
        }
    }

    pub fn attr_i(&self, name: &str, default: i64) -> OpResult<i64> {
        Ok(self.attr_opt_i(name)?.unwrap_or(default))
    }

    pub fn req_i(&self, name: &str) -> OpResult<i64> {
        self.attr_opt_i(name)?
            .ok_or_else(|| OpError::Invalid(format!("required attribute '{name}' is missing")))
    }

    pub fn attr_opt_f(&self, name: &str) -> OpResult<Option<f32>> {
        match self.attr(name) {
            None => Ok(None),
            Some(Attr::Float(v)) => Ok(Some(*v)),
            Some(Attr::Int(v)) => Ok(Some(*v as f32)),
            Some(a) => Err(self.wrong(name, "float", a)),
        }
    }

    pub fn attr_f(&self, name: &str, default: f32) -> OpResult<f32> {
        Ok(self.attr_opt_f(name)?.unwrap_or(default))
    }

    pub fn attr_opt_s(&self, name: &str) -> OpResult<Option<String>> {
        match self.attr(name) {
            None => Ok(None),
            Some(Attr::String(v)) => Ok(Some(String::from_utf8_lossy(v).into_owned())),
            Some(a) => Err(self.wrong(name, "string", a)),
        }
    }

    pub fn attr_s(&self, name: &str, default: &str) -> OpResult<String> {
        Ok(self
            .attr_opt_s(name)?
            .unwrap_or_else(|| default.to_string()))
    }

    pub fn attr_opt_ints(&self, name: &str) -> OpResult<Option<Vec<i64>>> {
        match self.attr(name) {
            None => Ok(None),
            Some(Attr::Ints(v)) => Ok(Some(v.clone())),
            Some(Attr::Int(v)) => Ok(Some(vec![*v])),
            Some(a) => Err(self.wrong(name, "ints", a)),
        }
    }

    pub fn attr_opt_floats(&self, name: &str) -> OpResult<Option<Vec<f32>>> {
        match self.attr(name) {
            None => Ok(None),
            Some(Attr::Floats(v)) => Ok(Some(v.clone())),
            Some(Attr::Float(v)) => Ok(Some(vec![*v])),
            Some(a) => Err(self.wrong(name, "floats", a)),
        }
    }

    pub fn attr_opt_strings(&self, name: &str) -> OpResult<Option<Vec<String>>> {
        match self.attr(name) {
            None => Ok(None),
            Some(Attr::Strings(v)) => Ok(Some(
                v.iter()
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect(),
            )),
            Some(a) => Err(self.wrong(name, "strings", a)),
        }
    }

    pub fn attr_opt_tensor(&self, name: &str) -> OpResult<Option<&'a Tensor>> {
        match self.attr(name) {
            None => Ok(None),
            Some(Attr::Tensor(t)) => Ok(Some(t)),
            Some(a) => Err(self.wrong(name, "tensor", a)),
        }
    }

    pub fn attr_graph(&self, name: &str) -> OpResult<&'a Graph> {
        match self.attr(name) {
            Some(Attr::Graph(g)) => Ok(g),
            Some(a) => Err(self.wrong(name, "graph", a)),
            None => Err(OpError::Invalid(format!(
                "required graph attribute '{name}' is missing"
            ))),
        }
    }

    /// Refuses an output of `shape` and element size `elem_bytes` larger than the session allows, before
    /// anything is allocated.
    pub fn check_alloc(&self, shape: &[usize], elem_bytes: usize) -> OpResult<()> {
        let bytes = shape
            .iter()
            .fold(elem_bytes as u128, |a, &d| a.saturating_mul(d as u128));
        if bytes > self.max_tensor_bytes as u128 {
            bail!(
                "output of shape {shape:?} needs {bytes} bytes, over the limit of {} bytes",
                self.max_tensor_bytes
            );
        }
        // ndarray also refuses (by panicking) a shape whose non-zero dims multiply past isize::MAX,
        // even when a zero dim leaves it empty.
        let nonzero = shape
            .iter()
            .filter(|&&d| d != 0)
            .fold(elem_bytes.max(1) as u128, |a, &d| {
                a.saturating_mul(d as u128)
            });
        if nonzero > isize::MAX as u128 {
            bail!("output shape {shape:?} is too large to address, even though it is empty");
        }
        Ok(())
    }

    pub fn run_subgraph(&self, graph: &Graph, inputs: Vec<Value>) -> OpResult<Vec<Value>> {
        self.runner.run_subgraph(graph, inputs)
    }
}

/// The tensor at input `i`, which must be present.
pub fn input<'v>(inputs: &[Option<&'v Value>], i: usize) -> OpResult<&'v Tensor> {
    match inputs.get(i).copied().flatten() {
        Some(Value::Tensor(t)) => Ok(t),
        Some(v) => Err(OpError::Invalid(format!(
            "input {i} must be a tensor, got {}",
            v.describe()
        ))),
        None => Err(OpError::Invalid(format!("required input {i} is missing"))),
    }
}

/// The tensor at input `i` if given (omitted inputs and missing trailing inputs are `None`).
pub fn opt_input<'v>(inputs: &[Option<&'v Value>], i: usize) -> OpResult<Option<&'v Tensor>> {
    match inputs.get(i).copied().flatten() {
        Some(Value::Tensor(t)) => Ok(Some(t)),
        Some(v) => Err(OpError::Invalid(format!(
            "input {i} must be a tensor, got {}",
            v.describe()
        ))),
        None => Ok(None),
    }
}

/// Normalises a possibly negative axis against `rank`.
pub fn norm_axis(axis: i64, rank: usize) -> OpResult<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r.max(1) && !(r == 0 && a == 0) {
        return Err(OpError::Invalid(format!(
            "axis {axis} is out of range for rank {rank}"
        )));
    }
    Ok(a as usize)
}

/// Wraps one tensor as a kernel's single output.
pub fn single(t: Tensor) -> OpResult<Vec<Value>> {
    Ok(vec![Value::Tensor(t)])
}

/// A runner for kernels run outside a session (constant folding, unit tests, the oracles' test
/// suites): a node with a subgraph is an error, not a value.
pub struct NoSubgraphs;

impl SubgraphRunner for NoSubgraphs {
    fn run_subgraph(&self, _: &Graph, _: Vec<Value>) -> OpResult<Vec<Value>> {
        Err(OpError::Unsupported(
            "subgraphs run only inside a session".into(),
        ))
    }
}

/// Unit-test support shared by the kernel families and the backends' kernel tests.
#[doc(hidden)]
pub mod testing {
    use std::collections::HashMap;

    use super::{NoSubgraphs, OpCtx};
    use crate::error::{OpError, OpResult};
    use crate::ir::{Attr, Node};
    use crate::tensor::{Tensor, Value};

    /// A runner whose only service is naming constants: inputs a kernel may cache per `Arc`.
    pub struct Constants(pub Vec<(String, std::sync::Arc<Value>)>);

    impl super::SubgraphRunner for Constants {
        fn run_subgraph(&self, _: &crate::ir::Graph, _: Vec<Value>) -> OpResult<Vec<Value>> {
            unreachable!()
        }

        fn constant(&self, name: &str) -> Option<std::sync::Arc<Value>> {
            self.0
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        }
    }

    /// `n` seeded values uniform in `[lo, hi)` (xorshift64): test inputs that are never all zero.
    pub fn seeded_f32(seed: u64, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                lo + ((s >> 40) as f32 / (1u64 << 24) as f32) * (hi - lo)
            })
            .collect()
    }

    /// Runs `kernel` as a node `op` at `opset` with `attrs`, `n_out` named outputs and tensor inputs
    /// (`None` for an omitted optional input); returns the tensor outputs.
    pub fn run_kernel(
        kernel: impl Fn(&OpCtx, &[Option<&Value>]) -> OpResult<Vec<Value>>,
        op: &str,
        opset: i64,
        attrs: Vec<(&str, Attr)>,
        ins: Vec<Option<Tensor>>,
        n_out: usize,
    ) -> OpResult<Vec<Tensor>> {
        let attrs: HashMap<String, Attr> =
            attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        let node = Node {
            name: "n".into(),
            op_type: op.into(),
            domain: String::new(),
            opset,
            inputs: vec![],
            outputs: (0..n_out).map(|i| format!("y{i}")).collect(),
            attrs,
        };
        let vals: Vec<Option<Value>> = ins.into_iter().map(|t| t.map(Value::Tensor)).collect();
        let refs: Vec<Option<&Value>> = vals.iter().map(|v| v.as_ref()).collect();
        let ctx = OpCtx {
            node: &node,
            runner: &NoSubgraphs,
            max_tensor_bytes: 1 << 30,
        };
        kernel(&ctx, &refs)?
            .into_iter()
            .map(|v| {
                v.into_tensor()
                    .ok_or_else(|| OpError::Invalid("output is not a tensor".into()))
            })
            .collect()
    }
}

/// Splits `row` into its `s` stride phases: column `i·s + p` goes to `out[p·stride + i]`. Strided
/// kernels (pooling, depthwise convolution) then read each tap as a contiguous run. Stride 2, the
/// common one, is a pairwise split that vectorises; other strides walk each phase in turn.
pub(crate) fn split_phases<T: Copy>(row: &[T], s: usize, out: &mut [T], stride: usize) {
    if s == 2 {
        let (evens, odds) = out.split_at_mut(stride);
        for ((e, o), pair) in evens
            .iter_mut()
            .zip(odds.iter_mut())
            .zip(row.chunks_exact(2))
        {
            *e = pair[0];
            *o = pair[1];
        }
        if row.len() % 2 == 1 {
            evens[row.len() / 2] = row[row.len() - 1];
        }
        return;
    }
    for p in 0..s.min(row.len()) {
        for (d, &v) in out[p * stride..].iter_mut().zip(row[p..].iter().step_by(s)) {
            *d = v;
        }
    }
}

#[cfg(test)]
mod split_phases_tests {
    /// Every column lands at its phase and index, for odd and even lengths and strides 1 to 4.
    #[test]
    fn columns_land_in_their_phase() {
        for s in 1..=4 {
            for len in 0..=11usize {
                let row: Vec<i32> = (0..len as i32).collect();
                let stride = len.div_ceil(s) + 1;
                let mut out = vec![-1; s * stride];
                super::split_phases(&row, s, &mut out, stride);
                for (i, &v) in row.iter().enumerate() {
                    assert_eq!(out[(i % s) * stride + i / s], v, "s={s} len={len} col {i}");
                }
                let written = out.iter().filter(|&&v| v >= 0).count();
                assert_eq!(written, len, "s={s} len={len}: a write outside the phases");
            }
        }
    }
}
