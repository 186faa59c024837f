//! `Session`: a loaded, planned model that can be run many times, from many threads at once.
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use crate::counters::{CounterSnapshot, Counters};
use crate::error::{Error, OpError, OpResult, Result};
use crate::ir::{Dim, Graph, Model, Node, ValueType};
use crate::loader::{self, LoadOptions};
use crate::ops::{OpCtx, Registry, SubgraphRunner};
use crate::plan::{Plan, Step, graph_key};
use crate::tensor::Value;
pub use crate::verify::VerifyMode;

/// Where nodes may run. The CPU runs every node no other provider claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    Cpu,
    /// NVIDIA GPUs through the CUDA driver (feature `cuda`).
    Cuda,
}

impl Provider {
    pub fn name(self) -> &'static str {
        match self {
            Provider::Cpu => "cpu",
            Provider::Cuda => "cuda",
        }
    }

    /// Whether this build and machine can use the provider (`Err` says why not).
    pub fn available(self) -> std::result::Result<(), String> {
        match self {
            Provider::Cpu => Ok(()),
            #[cfg(feature = "cuda")]
            Provider::Cuda => crate::cuda::Device::get()
                .map(|_| ())
                .map_err(|e| e.to_string()),
            #[cfg(not(feature = "cuda"))]
            Provider::Cuda => Err("this build has no CUDA support (feature `cuda`)".into()),
        }
    }
}

/// Elements below which `auto` keeps a node whose inputs are all on the host on the CPU: the
/// transfers would cost more than the kernel saves. A simple floor until measured thresholds exist.
pub const AUTO_MIN_DEVICE_ELEMENTS: usize = 1 << 14;

/// Parses a provider list as `--provider` takes it: `cpu`, `cuda`, `auto` (every available provider
/// in priority order, with a size floor), or a comma-separated list in priority order. Returns the
/// list and the device size floor.
pub fn parse_providers(s: &str) -> std::result::Result<(Vec<Provider>, usize), String> {
    if s == "auto" {
        let mut v: Vec<Provider> = [Provider::Cuda]
            .into_iter()
            .filter(|p| p.available().is_ok())
            .collect();
        v.push(Provider::Cpu);
        return Ok((v, AUTO_MIN_DEVICE_ELEMENTS));
    }
    let mut v = Vec::new();
    for part in s.split(',') {
        v.push(match part.trim() {
            "cpu" => Provider::Cpu,
            "cuda" => Provider::Cuda,
            "wgpu" => {
                return Err("provider 'wgpu' is not built yet (use cpu, cuda or auto)".into());
            }
            other => {
                return Err(format!(
                    "unknown provider '{other}' (expected auto, cpu, cuda or a comma list)"
                ));
            }
        });
    }
    Ok((v, 0))
}

/// How a session is built.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// Largest tensor (bytes in memory) that loading or running may create; larger is an error.
    pub max_tensor_bytes: u64,
    /// Most iterations one `Loop` node may run; more is an error. A Loop whose trip count and condition
    /// come from data could otherwise run forever.
    pub max_loop_iterations: u64,
    /// Values for symbolic input dims, used by tools that generate inputs (`quorum bench`).
    pub dims: HashMap<String, i64>,
    /// Providers in priority order; each node goes to the first that claims it, the CPU otherwise.
    /// A listed provider that is not available makes session creation fail.
    pub providers: Vec<Provider>,
    /// A node whose inputs are all on the host and whose largest input has fewer elements than this
    /// stays on the CPU (see [`AUTO_MIN_DEVICE_ELEMENTS`]); 0 sends every claimed node to its provider.
    pub min_device_elements: usize,
    /// How accelerated results are checked; `QUORUM_VERIFY` overrides it.
    pub verify: VerifyMode,
    /// Op types whose accelerated results `Strict` verification lets through when the oracles cannot
    /// judge them (they disagree, reject the inputs, or do not cover the op); counted as unsettled.
    pub allow_unchecked: Vec<String>,
    /// Fill every new device buffer with this byte so that an element a kernel fails to write shows up
    /// in the result (tests): 0xFF makes every float NaN, a byte such as 0x3C makes finite values
    /// (0.0115 in f32), which shows an unwritten element even where the right answer is NaN.
    /// `None` leaves new buffers as the pool gives them.
    pub poison_device_buffers: Option<u8>,
    /// Run nodes whose inputs are all constants once, at session build, and keep their outputs as
    /// initializers (on by default).
    pub fold_constants: bool,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            max_tensor_bytes: crate::DEFAULT_MAX_TENSOR_BYTES,
            max_loop_iterations: crate::DEFAULT_MAX_LOOP_ITERATIONS,
            dims: HashMap::new(),
            providers: vec![Provider::Cpu],
            min_device_elements: 0,
            verify: VerifyMode::Off,
            allow_unchecked: Vec::new(),
            poison_device_buffers: None,
            fold_constants: true,
        }
    }
}

/// Where one node runs, and why not elsewhere (`quorum info`).
#[derive(Debug, Clone)]
pub struct NodePlacement {
    pub node: String,
    pub op: String,
    pub provider: Provider,
    /// Why a listed accelerator declined the node.
    pub declined: Option<String>,
}

pub struct Session {
    model: Model,
    plan: Plan,
    options: SessionOptions,
    verify: VerifyMode,
    placement: Vec<NodePlacement>,
    /// Nodes computed once at build time (see `fold`), not part of the plan.
    folded: Vec<String>,
    counters: Arc<Counters>,
    #[cfg(feature = "cuda")]
    cuda: Option<CudaState>,
}

#[cfg(feature = "cuda")]
struct CudaState {
    device: Arc<crate::cuda::Device>,
    weights: crate::cuda::WeightCache,
}

impl Session {
    pub fn from_file(path: impl AsRef<Path>, options: SessionOptions) -> Result<Session> {
        let lo = LoadOptions {
            base_dir: None,
            max_tensor_bytes: options.max_tensor_bytes,
        };
        let path = path.as_ref();
        let model = loader::model_from_file(path, &lo)?;
        Session::from_model(model, options).map_err(|e| match e {
            Error::Unsupported {
                node,
                op,
                domain,
                opset,
                reason,
            } => Error::Unsupported {
                node,
                op,
                domain,
                opset,
                reason: format!("{reason} (in {})", path.display()),
            },
            Error::InvalidModel(m) => Error::InvalidModel(format!("{}: {m}", path.display())),
            e => e,
        })
    }

    pub fn from_bytes(bytes: &[u8], options: SessionOptions) -> Result<Session> {
        let lo = LoadOptions {
            base_dir: None,
            max_tensor_bytes: options.max_tensor_bytes,
        };
        let model = loader::model_from_bytes(bytes, &lo)?;
        Session::from_model(model, options)
    }

    pub fn from_model(model: Model, options: SessionOptions) -> Result<Session> {
        #[allow(unused_mut)]
        let mut plan = Plan::compile(
            Arc::new(model.graph.clone()),
            Registry::cpu(),
            &HashSet::new(),
        )?;
        let mut folded = Vec::new();
        if options.fold_constants
            && let Some((graph, names)) = crate::fold::fold_constants(
                &plan,
                overridable_initializers(&model),
                options.max_tensor_bytes,
            )
        {
            plan = Plan::compile(Arc::new(graph), Registry::cpu(), &HashSet::new())?;
            folded = names;
        }
        let verify = options
            .verify
            .with_env_override()
            .map_err(Error::Provider)?;
        for p in &options.providers {
            p.available()
                .map_err(|why| Error::Provider(format!("provider '{}': {why}", p.name())))?;
        }
        #[cfg(feature = "cuda")]
        let cuda = if options.providers.contains(&Provider::Cuda) {
            let device = crate::cuda::Device::get()
                .map_err(|e| Error::Provider(format!("provider 'cuda': {e}")))?;
            Some(CudaState {
                device,
                weights: Default::default(),
            })
        } else {
            None
        };
        let mut placement = Vec::with_capacity(plan.steps.len());
        for step in &mut plan.steps {
            let node = &plan.graph.nodes[step.node];
            let mut place = NodePlacement {
                node: node.name.clone(),
                op: node.qualified_op(),
                provider: Provider::Cpu,
                declined: None,
            };
            for p in &options.providers {
                match p {
                    Provider::Cpu => break,
                    #[cfg(feature = "cuda")]
                    Provider::Cuda => match crate::cuda::claim(node) {
                        Ok(k) => {
                            step.cuda = Some(k);
                            place.provider = Provider::Cuda;
                            break;
                        }
                        Err(why) => place.declined = Some(format!("cuda: {why}")),
                    },
                    #[cfg(not(feature = "cuda"))]
                    Provider::Cuda => {}
                }
            }
            placement.push(place);
        }
        Ok(Session {
            model,
            plan,
            options,
            verify,
            placement,
            folded,
            counters: Arc::new(Counters::default()),
            #[cfg(feature = "cuda")]
            cuda,
        })
    }

    /// Where each top-level node runs, in execution order.
    pub fn placement(&self) -> &[NodePlacement] {
        &self.placement
    }

    /// The nodes whose inputs were all constants: run once when the session was built, their
    /// outputs kept as initializers (`SessionOptions::fold_constants`).
    pub fn folded_nodes(&self) -> &[String] {
        &self.folded
    }

    /// The verification mode in force (after the `QUORUM_VERIFY` override).
    pub fn verify_mode(&self) -> VerifyMode {
        self.verify
    }

    /// The session's counters so far (every run, every thread).
    pub fn counters(&self) -> CounterSnapshot {
        self.counters.snapshot()
    }

    /// The top-level nodes placed on an accelerator whose kernel declined their inputs at run time
    /// (so they ran on the CPU) in some run so far.
    pub fn fallback_nodes(&self) -> Vec<String> {
        self.counters
            .fallback_nodes
            .lock()
            .map(|n| n.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// What verification found so far, per op type (empty while verification is off).
    pub fn verification(&self) -> BTreeMap<String, crate::counters::OpVerification> {
        self.counters
            .verify_by_op
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default()
    }

    /// The CUDA device's name, when this session uses one.
    pub fn device_name(&self) -> Option<String> {
        #[cfg(feature = "cuda")]
        if let Some(c) = &self.cuda {
            return Some(c.device.ctx.info.name.clone());
        }
        None
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    pub fn options(&self) -> &SessionOptions {
        &self.options
    }

    /// Runs the model. `inputs` are (name, value) pairs for the graph's runtime inputs; the result holds
    /// every graph output in declaration order.
    pub fn run(&self, inputs: Vec<(String, Value)>) -> Result<Vec<(String, Value)>> {
        let graph = &self.plan.graph;
        self.check_inputs(graph, &inputs)?;
        #[cfg(feature = "cuda")]
        let run = match &self.cuda {
            Some(c) => Some(
                crate::cuda::Run::new(
                    &c.device,
                    &self.counters,
                    self.options.poison_device_buffers,
                )
                .map_err(|e| Error::Device(format!("starting a CUDA run: {e}")))?,
            ),
            None => None,
        };
        let exec = Exec {
            max_tensor_bytes: self.options.max_tensor_bytes,
            max_loop_iterations: self.options.max_loop_iterations,
            min_device_elements: self.options.min_device_elements,
            verify: self.verify,
            allow_unchecked: &self.options.allow_unchecked,
            counters: &self.counters,
            #[cfg(feature = "cuda")]
            cuda: match (&self.cuda, &run) {
                (Some(c), Some(r)) => Some((r, &c.weights)),
                _ => None,
            },
        };
        let outs = exec.run_plan(&self.plan, inputs, None)?;
        Ok(graph
            .outputs
            .iter()
            .map(|o| o.name.clone())
            .zip(outs)
            .collect())
    }

    fn check_inputs(&self, graph: &Graph, inputs: &[(String, Value)]) -> Result<()> {
        let declared: HashMap<&str, &ValueType> = graph
            .inputs
            .iter()
            .map(|i| (i.name.as_str(), &i.ty))
            .collect();
        let given: HashSet<&str> = inputs.iter().map(|(n, _)| n.as_str()).collect();
        let mut bound: HashMap<&str, (usize, &str)> = HashMap::new();
        for (name, value) in inputs {
            if !overridable_initializers(&self.model) && graph.initializers.contains_key(name) {
                return Err(Error::Input {
                    name: name.clone(),
                    msg: format!(
                        "an initializer of an IR version {} model is a constant, not an input",
                        self.model.ir_version
                    ),
                });
            }
            let Some(ty) = declared.get(name.as_str()) else {
                let expected: Vec<&str> = graph.runtime_inputs().map(|i| i.name.as_str()).collect();
                return Err(Error::Input {
                    name: name.clone(),
                    msg: format!("the model has no such input (it takes {expected:?})"),
                });
            };
            if let (ValueType::Tensor { dtype, shape }, Value::Tensor(t)) = (ty, value) {
                if let Some(d) = dtype {
                    if *d != t.dtype() {
                        return Err(Error::Input {
                            name: name.clone(),
                            msg: format!("expected {d}, got {}", t.dtype()),
                        });
                    }
                }
                if let Some(shape) = shape {
                    let err = || Error::Input {
                        name: name.clone(),
                        msg: format!("expected shape {ty}, got {:?}", t.shape()),
                    };
                    if shape.len() != t.rank() {
                        return Err(err());
                    }
                    for (d, &actual) in shape.iter().zip(t.shape()) {
                        match d {
                            Dim::Fixed(v) if *v >= 0 && *v as usize != actual => return Err(err()),
                            Dim::Symbol(s) => {
                                if let Some((prev, other)) = bound.insert(s, (actual, name)) {
                                    if prev != actual {
                                        return Err(Error::Input {
                                            name: name.clone(),
                                            msg: format!(
                                                "dim '{s}' is {actual} here but {prev} in input '{other}'"
                                            ),
                                        });
                                    }
                                }
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
        for i in graph.runtime_inputs() {
            if !given.contains(i.name.as_str()) {
                return Err(Error::Input {
                    name: i.name.clone(),
                    msg: format!("required input of type {} was not given", i.ty),
                });
            }
        }
        Ok(())
    }
}

/// A value in a running graph: on the host, or produced on the device (and downloaded only when a
/// host consumer asks, then kept). A host value copied to the device for a consumer there keeps that
/// copy too, so each value crosses the bus at most once per direction.
enum Slot {
    Host {
        value: Arc<Value>,
        /// An initializer: uploaded through the session's weight cache, not per run.
        weight: bool,
        #[cfg(feature = "cuda")]
        dev: std::cell::OnceCell<crate::cuda::DevTensor>,
    },
    #[cfg(feature = "cuda")]
    Device {
        dev: crate::cuda::DevTensor,
        host: std::cell::OnceCell<Arc<Value>>,
    },
}

impl Slot {
    fn host(value: Arc<Value>, weight: bool) -> Slot {
        Slot::Host {
            value,
            weight,
            #[cfg(feature = "cuda")]
            dev: std::cell::OnceCell::new(),
        }
    }

    fn on_device(&self) -> bool {
        match self {
            Slot::Host { .. } => false,
            #[cfg(feature = "cuda")]
            Slot::Device { .. } => true,
        }
    }
}

/// Values visible while a graph runs, chained to the scope of the enclosing graph.
struct Scope<'p> {
    values: HashMap<String, Slot>,
    parent: Option<&'p Scope<'p>>,
}

impl Scope<'_> {
    fn get(&self, name: &str) -> Option<&Slot> {
        self.values
            .get(name)
            .or_else(|| self.parent.and_then(|p| p.get(name)))
    }
}

struct Exec<'s> {
    max_tensor_bytes: u64,
    max_loop_iterations: u64,
    min_device_elements: usize,
    verify: VerifyMode,
    allow_unchecked: &'s [String],
    counters: &'s Counters,
    #[cfg(feature = "cuda")]
    cuda: Option<(&'s crate::cuda::Run<'s>, &'s crate::cuda::WeightCache)>,
}

struct Runner<'a, 's> {
    exec: &'a Exec<'s>,
    plan: &'a Plan,
    scope: &'a Scope<'a>,
}

impl SubgraphRunner for Runner<'_, '_> {
    fn run_subgraph(&self, graph: &Graph, inputs: Vec<Value>) -> OpResult<Vec<Value>> {
        let plan =
            self.plan.subplans.get(&graph_key(graph)).ok_or_else(|| {
                OpError::Invalid("subgraph was not compiled with its parent".into())
            })?;
        let named = plan
            .graph
            .inputs
            .iter()
            .map(|i| i.name.clone())
            .zip(inputs)
            .collect();
        self.exec
            .run_plan(plan, named, Some(self.scope))
            .map_err(|e| OpError::Invalid(format!("in subgraph '{}': {e}", graph.name)))
    }

    fn max_loop_iterations(&self) -> u64 {
        self.exec.max_loop_iterations
    }
}

fn node_error(node: &Node, refs: &[Option<&Value>], e: OpError) -> Error {
    let shapes = format!(
        "[{}]",
        refs.iter()
            .map(|r| r.map_or("-".into(), |v| v.describe()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    match e {
        OpError::Unsupported(reason) => Error::Unsupported {
            node: node.name.clone(),
            op: node.op_type.clone(),
            domain: if node.domain.is_empty() {
                String::new()
            } else {
                format!("{}::", node.domain)
            },
            opset: node.opset,
            reason: format!("{reason} (inputs {shapes})"),
        },
        OpError::Invalid(msg) => Error::Node {
            node: node.name.clone(),
            op: node.op_type.clone(),
            shapes,
            msg,
        },
    }
}

impl Exec<'_> {
    /// The host value of a slot, downloading a device value on first use.
    fn host_value(&self, slot: &Slot, node: &Node) -> Result<Arc<Value>> {
        match slot {
            Slot::Host { value, .. } => Ok(value.clone()),
            #[cfg(feature = "cuda")]
            Slot::Device { dev, host } => {
                if let Some(v) = host.get() {
                    return Ok(v.clone());
                }
                let Some((run, _)) = self.cuda else {
                    return Err(Error::Device("a device value outside a CUDA run".into()));
                };
                let t = run.download(dev).map_err(|e| self.kernel_error(node, e))?;
                let v = Arc::new(Value::Tensor(t));
                let _ = host.set(v.clone());
                Ok(v)
            }
        }
    }

    #[cfg(feature = "cuda")]
    fn kernel_error(&self, node: &Node, e: crate::cuda::KError) -> Error {
        use crate::cuda::KError;
        match e {
            KError::Op(e) => node_error(node, &[], e),
            KError::Decline(why) => Error::Device(format!(
                "node '{}' ({}): the CUDA kernel declined after starting: {why}",
                node.name, node.op_type
            )),
            KError::Cuda(e) => {
                Error::Device(format!("node '{}' ({}): {e}", node.name, node.op_type))
            }
        }
    }

    fn run_plan(
        &self,
        plan: &Plan,
        inputs: Vec<(String, Value)>,
        parent: Option<&Scope>,
    ) -> Result<Vec<Value>> {
        let g = &*plan.graph;
        let mut scope = Scope {
            values: plan
                .initializers
                .iter()
                .map(|(k, v)| (k.clone(), Slot::host(v.clone(), true)))
                .collect(),
            parent,
        };
        for (name, v) in inputs {
            scope.values.insert(name, Slot::host(Arc::new(v), false));
        }
        for step in &plan.steps {
            let node = &g.nodes[step.node];
            for name in node.inputs.iter().filter(|n| !n.is_empty()) {
                if scope.get(name).is_none() {
                    return Err(Error::Node {
                        node: node.name.clone(),
                        op: node.op_type.clone(),
                        shapes: String::new(),
                        msg: format!(
                            "input '{name}' has no value (an optional input that was not given?)"
                        ),
                    });
                }
            }
            #[cfg(feature = "cuda")]
            let device_outs = match (step.cuda, self.cuda) {
                (Some(kernel), Some((run, weights))) => {
                    self.run_cuda(plan, &scope, node, step, kernel, run, weights)?
                }
                _ => None,
            };
            #[cfg(not(feature = "cuda"))]
            let device_outs: Option<Vec<Slot>> = None;
            let outs = match device_outs {
                Some(outs) => outs,
                None => self
                    .run_cpu(plan, &scope, node, step)?
                    .into_iter()
                    .map(|v| Slot::host(Arc::new(v), false))
                    .collect(),
            };
            for (name, v) in node.outputs.iter().zip(outs) {
                if !name.is_empty() {
                    scope.values.insert(name.clone(), v);
                }
            }
            for f in &step.frees {
                let freed = scope.values.remove(f);
                #[cfg(feature = "cuda")]
                if let (Some(slot), Some((run, _))) = (freed, self.cuda) {
                    match slot {
                        Slot::Device { dev, .. } => run.release(dev),
                        Slot::Host { dev, weight, .. } => {
                            if let (Some(d), false) = (dev.into_inner(), weight) {
                                run.release(d);
                            }
                        }
                    }
                }
                #[cfg(not(feature = "cuda"))]
                drop(freed);
            }
        }
        let mut outs = Vec::with_capacity(g.outputs.len());
        for o in &g.outputs {
            let v = match scope.values.remove(&o.name) {
                Some(slot) => self.host_value(&slot, &dummy_node(&o.name))?,
                None => match scope.get(&o.name) {
                    Some(slot) => self.host_value(slot, &dummy_node(&o.name))?,
                    None => {
                        return Err(Error::InvalidModel(format!(
                            "graph output '{}' was not produced",
                            o.name
                        )));
                    }
                },
            };
            outs.push(Arc::try_unwrap(v).unwrap_or_else(|a| (*a).clone()));
        }
        Ok(outs)
    }

    fn run_cpu(&self, plan: &Plan, scope: &Scope, node: &Node, step: &Step) -> Result<Vec<Value>> {
        let args: Vec<Option<Arc<Value>>> = node
            .inputs
            .iter()
            .map(|name| match name.as_str() {
                "" => Ok(None),
                n => match scope.get(n) {
                    Some(slot) => self.host_value(slot, node).map(Some),
                    None => Ok(None),
                },
            })
            .collect::<Result<_>>()?;
        let refs: Vec<Option<&Value>> = args.iter().map(|a| a.as_deref()).collect();
        let runner = Runner {
            exec: self,
            plan,
            scope,
        };
        let ctx = OpCtx {
            node,
            runner: &runner,
            max_tensor_bytes: self.max_tensor_bytes,
        };
        let outs = (step.kernel)(&ctx, &refs).map_err(|e| node_error(node, &refs, e))?;
        let wanted = node
            .outputs
            .iter()
            .rposition(|o| !o.is_empty())
            .map_or(0, |p| p + 1);
        if outs.len() < wanted {
            return Err(Error::Node {
                node: node.name.clone(),
                op: node.op_type.clone(),
                shapes: String::new(),
                msg: format!(
                    "kernel produced {} outputs, the node names {wanted}",
                    outs.len()
                ),
            });
        }
        Ok(outs)
    }

    /// Runs a node on CUDA. `Ok(None)`: the node stays on the CPU (under the size floor, or the kernel
    /// declined these inputs).
    #[cfg(feature = "cuda")]
    #[allow(clippy::too_many_arguments)]
    fn run_cuda(
        &self,
        plan: &Plan,
        scope: &Scope,
        node: &Node,
        step: &Step,
        kernel: crate::cuda::CudaKernel,
        run: &crate::cuda::Run,
        weights: &crate::cuda::WeightCache,
    ) -> Result<Option<Vec<Slot>>> {
        use crate::cuda::KError;
        let slots: Vec<Option<&Slot>> = node
            .inputs
            .iter()
            .map(|n| if n.is_empty() { None } else { scope.get(n) })
            .collect();
        if self.min_device_elements > 0 && !slots.iter().flatten().any(|s| s.on_device()) {
            let largest = slots
                .iter()
                .flatten()
                .filter_map(|s| match s {
                    Slot::Host { value, .. } => value.as_tensor().map(|t| t.len()),
                    Slot::Device { dev, .. } => Some(dev.len()),
                })
                .max()
                .unwrap_or(0)
                .max(generated_elements(node, &slots));
            if largest < self.min_device_elements {
                return Ok(None);
            }
        }
        let inputs = NodeInputs {
            exec: self,
            node,
            slots: &slots,
            run,
            weights,
        };
        let runner = Runner {
            exec: self,
            plan,
            scope,
        };
        let ctx = OpCtx {
            node,
            runner: &runner,
            max_tensor_bytes: self.max_tensor_bytes,
        };
        let outs = match kernel(&ctx, run, &inputs) {
            Ok(o) => o,
            Err(KError::Decline(_)) => {
                self.counters.fell_back(&node.name);
                return Ok(None);
            }
            Err(e) => return Err(self.kernel_error(node, e)),
        };
        if self.verify == VerifyMode::Off {
            return Ok(Some(
                outs.into_iter()
                    .map(|dev| Slot::Device {
                        dev,
                        host: std::cell::OnceCell::new(),
                    })
                    .collect(),
            ));
        }
        // Verification: the device's outputs against both oracles on the same inputs.
        let host_in: Vec<Option<Arc<Value>>> = slots
            .iter()
            .map(|s| s.map(|s| self.host_value(s, node)).transpose())
            .collect::<Result<_>>()?;
        let host_out: Vec<Arc<Value>> = outs
            .iter()
            .map(|d| {
                run.download(d)
                    .map(|t| Arc::new(Value::Tensor(t)))
                    .map_err(|e| self.kernel_error(node, e))
            })
            .collect::<Result<_>>()?;
        let refs: Vec<Option<&Value>> = host_in.iter().map(|a| a.as_deref()).collect();
        let out_vals: Vec<Value> = host_out.iter().map(|v| (**v).clone()).collect();
        let check = crate::verify::check(node, &refs, &out_vals);
        let policy = crate::verify::Policy {
            mode: self.verify,
            allow_unchecked: self.allow_unchecked,
        };
        if policy.apply(node, &check, self.counters)? == crate::verify::Use::Cpu {
            let cpu = self.run_cpu(plan, scope, node, step)?;
            return Ok(Some(
                cpu.into_iter()
                    .map(|v| Slot::host(Arc::new(v), false))
                    .collect(),
            ));
        }
        Ok(Some(
            outs.into_iter()
                .zip(host_out)
                .map(|(dev, h)| {
                    let host = std::cell::OnceCell::new();
                    let _ = host.set(h);
                    Slot::Device { dev, host }
                })
                .collect(),
        ))
    }
}

/// A stand-in node for errors that belong to no node (a graph output's download).
fn dummy_node(name: &str) -> Node {
    Node {
        name: format!("output '{name}'"),
        op_type: String::new(),
        domain: String::new(),
        opset: 0,
        inputs: vec![],
        outputs: vec![],
        attrs: Default::default(),
    }
}

/// A node's inputs as a CUDA kernel sees them.
#[cfg(feature = "cuda")]
struct NodeInputs<'a, 's> {
    exec: &'a Exec<'s>,
    node: &'a Node,
    slots: &'a [Option<&'a Slot>],
    run: &'a crate::cuda::Run<'a>,
    weights: &'a crate::cuda::WeightCache,
}

#[cfg(feature = "cuda")]
impl crate::cuda::Inputs for NodeInputs<'_, '_> {
    fn len(&self) -> usize {
        self.slots.len()
    }

    fn present(&self, i: usize) -> bool {
        self.slots.get(i).is_some_and(|s| s.is_some())
    }

    fn dtype(&self, i: usize) -> Option<crate::tensor::DType> {
        match self.slots.get(i).copied().flatten()? {
            Slot::Host { value, .. } => value.as_tensor().map(|t| t.dtype()),
            Slot::Device { dev, .. } => Some(dev.dtype),
        }
    }

    fn shape(&self, i: usize) -> Option<Vec<usize>> {
        match self.slots.get(i).copied().flatten()? {
            Slot::Host { value, .. } => value.as_tensor().map(|t| t.shape().to_vec()),
            Slot::Device { dev, .. } => Some(dev.shape.clone()),
        }
    }

    fn dev(&self, i: usize) -> crate::cuda::KResult<Option<crate::cuda::DevTensor>> {
        use crate::cuda::KError;
        let Some(slot) = self.slots.get(i).copied().flatten() else {
            return Ok(None);
        };
        match slot {
            Slot::Device { dev, .. } => Ok(Some(dev.clone())),
            Slot::Host { value, weight, dev } => {
                if let Some(d) = dev.get() {
                    return Ok(Some(d.clone()));
                }
                let Value::Tensor(t) = &**value else {
                    return Err(KError::Decline("a non-tensor input".into()));
                };
                let d = if *weight {
                    match self.weights.get(value) {
                        Some(d) => d,
                        None => {
                            let d = self.run.upload_weight(t)?;
                            self.weights.insert(value, d.clone());
                            d
                        }
                    }
                } else {
                    self.run.upload(t)?
                };
                let _ = dev.set(d.clone());
                Ok(Some(d))
            }
        }
    }

    fn host(&self, i: usize) -> crate::cuda::KResult<Option<Arc<Value>>> {
        let Some(slot) = self.slots.get(i).copied().flatten() else {
            return Ok(None);
        };
        self.exec
            .host_value(slot, self.node)
            .map(Some)
            .map_err(|e| crate::cuda::KError::Decline(e.to_string()))
    }
}

/// Whether a caller may feed a value for an initializer listed among the graph inputs: from IR
/// version 4, where listing it there makes it a default; before, every initializer had to be listed
/// and all of them are constants.
fn overridable_initializers(model: &Model) -> bool {
    model.ir_version >= 4
}

/// The number of elements a generator node makes from small host inputs (ConstantOfShape's shape),
/// so that the `auto` size floor judges it by its output: light models build 100 MB of weights with
/// ConstantOfShape on every run, which on the CPU would then go up the bus to their consumers.
#[cfg(feature = "cuda")]
fn generated_elements(node: &Node, slots: &[Option<&Slot>]) -> usize {
    if node.op_type != "ConstantOfShape" {
        return 0;
    }
    match slots.first() {
        Some(Some(Slot::Host { value, .. })) => value
            .as_tensor()
            .and_then(|t| crate::ops::cast::to_i64_vec(t).ok())
            .map(|dims| {
                dims.iter()
                    .fold(1usize, |n, &d| n.saturating_mul(d.max(0) as usize))
            })
            .unwrap_or(0),
        _ => 0,
    }
}
