//! `Session`: a loaded, planned model that can be run many times, from many threads at once.
//!
//! Building a session loads the model, compiles the plan (`crate::plan`), folds constant nodes
//! (`crate::fold`), opens the device side of each listed accelerator, rewrites the graph when
//! every node runs on the CPU (`crate::optimize`) and places every top-level node (`placement`). A run checks its inputs (`inputs`), starts each device's run context, and
//! executes the plan (`exec`), values living where they were produced (`residency`). Nothing here
//! knows a particular accelerator: they are reached through `crate::backend`.
mod binding;
mod capture;
mod carry;
mod choices;
pub mod dispatch;
mod exec;
mod inputs;
mod judges;
mod options;
mod placement;
mod report;
mod residency;
mod reuse;
pub mod sampling;
pub mod schedule;
mod shape_values;
mod spin;
pub mod thresholds;
pub mod trial;

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

pub use crate::backend::Provider;
use crate::counters::Counters;
use crate::error::{Error, Result};
use crate::ir::Model;
use crate::loader::{self, LoadOptions};
use crate::ops::Registry;
use crate::plan::Plan;
pub use crate::providers::parse_providers;
use crate::tensor::Value;
pub use crate::verify::VerifyMode;
pub use binding::{Bound, DeviceValue, PinnedTensor};
pub use capture::{CarryPair, GraphCapture, GraphRecord, WARMUP_RUNS};
pub use carry::CarryState;
pub(crate) use inputs::overridable_initializers;
pub use options::SessionOptions;
use placement::SessionDevice;
pub use placement::{AUTO_MIN_DEVICE_ELEMENTS, DeviceStep, NodePlacement};

/// A host-only run that took less than this on its last run stays on the caller's thread (see
/// `execute_with`).
const INLINE_RUN_NS: u64 = 100_000;

pub struct Session {
    model: Model,
    plan: Plan,
    options: SessionOptions,
    verify: VerifyMode,
    placement: Vec<NodePlacement>,
    /// Nodes computed once at build time (see `fold`), not part of the plan.
    folded: Vec<String>,
    /// The graph rewrites applied at build time (`crate::optimize`).
    rewrites: Vec<crate::optimize::Rewrite>,
    /// What the mixed-precision conversion did (`SessionOptions::precision` f16 or bf16).
    conversion: Option<crate::mixed::Conversion>,
    counters: Arc<Counters>,
    /// The host storage of dead activations, for the next outputs (the memory plan, `arena`).
    arena: crate::arena::Arena,
    /// How long the last host-only run took (ns; `u64::MAX` before the first): a run much shorter
    /// than the thread pool's hand-off stays on the caller's thread.
    last_host_run_ns: std::sync::atomic::AtomicU64,
    /// The accelerators this session uses, in priority order (a plan step's device index).
    devices: Vec<SessionDevice>,
    /// Streams and events of the top-level plan.
    schedule: schedule::Schedule,
    /// Why no run of this session can be captured into a device graph (`None`: runs may be).
    capture_blocker: Option<String>,
    /// `auto`'s per-node decisions and the threshold tables behind them.
    dispatch: dispatch::Dispatch,
    /// Which table each accelerator's decisions come from, or why none.
    dispatch_notes: Vec<String>,
    graphs: capture::Graphs,
    /// Command logs of runs and replays, when `SessionOptions::command_log` asks for them.
    log: Option<Arc<crate::cmdlog::LogSink>>,
    /// The key `auto`'s choice is kept under (`choices`), set by the run that starts the trial.
    choice_key: std::sync::Mutex<Option<String>>,
    /// Sampled verification (`SessionOptions::verify_sample`, with verification off otherwise).
    sampler: Option<sampling::Sampler>,
    /// Values computed from tensor shapes alone, kept per input-shape key (`shape_values`).
    shape_values: shape_values::ShapeValues,
}

/// Why a plan's runs can never be captured into a device graph, if they cannot.
fn capture_blocker(plan: &Plan, devices: &[SessionDevice], verify: VerifyMode) -> Option<String> {
    if devices.len() != 1 {
        return Some(match devices.len() {
            0 => "no accelerator in the session".into(),
            n => format!("{n} accelerators in the session (graphs take one)"),
        });
    }
    if verify != VerifyMode::Off {
        return Some("verification reads every device result back mid-run".into());
    }
    let g = &*plan.graph;
    // Shape arithmetic runs on the host in a capture too: its results are fixed by the shape key.
    if let Some(step) = plan
        .steps
        .iter()
        .find(|s| s.device.is_none() && !s.shapes_only)
    {
        let n = &g.nodes[step.node];
        return Some(format!(
            "node '{}' ({}) runs on the CPU",
            n.name,
            n.qualified_op()
        ));
    }
    let made_on_device: HashSet<&str> = plan
        .steps
        .iter()
        .filter(|s| s.device.is_some())
        .flat_map(|s| g.nodes[s.node].outputs.iter().map(String::as_str))
        .collect();
    if let Some(o) = g
        .outputs
        .iter()
        .find(|o| !made_on_device.contains(o.name.as_str()))
    {
        return Some(format!(
            "graph output '{}' is not made on the device",
            o.name
        ));
    }
    None
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

    pub fn from_model(mut model: Model, mut options: SessionOptions) -> Result<Session> {
        crate::heap::retain_freed_buffers();
        if std::env::var("QUORUM_AUDIT_LAUNCHES").is_ok_and(|v| v == "1") {
            options.audit_launches = true;
        }
        // Mixed precision: the converted model is the one that runs (and is verified).
        let mut conversion = None;
        if let Some(half) = options.precision.half()
            && let Some((graph, done)) =
                crate::mixed::convert(&model.graph, half, &options.keep_f32)?
        {
            model.graph = graph;
            conversion = Some(done);
        }
        let devices = placement::open_devices(
            &options.providers,
            &crate::backend::DeviceOptions {
                precision: options.precision,
            },
        )?;
        let mut rewrites = Vec::new();
        // Rewrites that need the model's constants as written (the quantized weights), before
        // folding computes their f32 values.
        let qdq_integer = match std::env::var("QUORUM_QDQ_INTEGER").as_deref() {
            Ok("on") => true,
            Ok("off") => false,
            _ => options.qdq_integer,
        };
        if options.optimize && qdq_integer {
            let constants =
                crate::optimize::constants(&model.graph, overridable_initializers(&model));
            let runs = |op: &str| placement::every_device_runs(&devices, "", op);
            if let Some((graph, done)) =
                crate::optimize::before_folding(&model.graph, &constants, &runs)
            {
                model.graph = graph;
                rewrites = done;
            }
        }
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
        if options.optimize {
            let constants =
                crate::optimize::constants(&plan.graph, overridable_initializers(&model));
            let rewritten = if devices.is_empty() {
                crate::optimize::optimize(&plan.graph, &constants)
            } else {
                let runs =
                    |domain: &str, op: &str| placement::every_device_runs(&devices, domain, op);
                crate::optimize::optimize_for_devices(&plan.graph, &constants, &runs)
            };
            if let Some((graph, done)) = rewritten {
                plan = Plan::compile(Arc::new(graph), Registry::cpu(), &HashSet::new())?;
                rewrites.extend(done);
            }
        }
        let placement = placement::place(&mut plan, &options.providers, &devices);
        let on_device: Vec<bool> = plan.steps.iter().map(|s| s.device.is_some()).collect();
        let schedule = schedule::build(&plan, &on_device, options.streams);
        let capture_blocker = capture_blocker(&plan, &devices, verify);
        let (dispatch, dispatch_notes) = placement::dispatch_for(
            options.min_device_elements,
            &devices,
            plan.steps.len(),
            options.graph_capture == GraphCapture::Off,
        );
        let arena = if options.arena {
            crate::arena::Arena::default()
        } else {
            crate::arena::Arena::with_ceiling(0)
        };
        let counters = Arc::new(Counters::default());
        let sampler = match (options.verify_sample, verify) {
            (Some(cfg), VerifyMode::Off) => Some(sampling::Sampler::new(
                cfg,
                plan.steps
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.device.is_some() && !s.shapes_only)
                    .map(|(i, _)| i)
                    .collect(),
                counters.clone(),
            )),
            _ => None,
        };
        let log = options
            .command_log
            .then(|| Arc::new(crate::cmdlog::LogSink::default()));
        Ok(Session {
            model,
            plan,
            options,
            verify,
            placement,
            folded,
            rewrites,
            conversion,
            counters,
            arena,
            last_host_run_ns: std::sync::atomic::AtomicU64::new(u64::MAX),
            devices,
            schedule,
            capture_blocker,
            dispatch,
            dispatch_notes,
            graphs: capture::Graphs::new(log.clone()),
            log,
            choice_key: Default::default(),
            sampler,
            shape_values: Default::default(),
        })
    }

    /// Runs the model. `inputs` are (name, value) pairs for the graph's runtime inputs; the result holds
    /// every graph output in declaration order.
    pub fn run(&self, inputs: Vec<(String, Value)>) -> Result<Vec<(String, Value)>> {
        inputs::check_inputs(&self.model, &self.plan.graph, &inputs)?;
        let Some(s) = &self.sampler else {
            return self.run_unsampled(inputs);
        };
        if let Some(e) = s.take_failure() {
            return Err(e);
        }
        let start = std::time::Instant::now();
        let window = s.next_run(&self.plan);
        let out = match &window {
            Some(w) => self
                .execute_sampled(inputs, w)
                .map(|r| r.0)
                .map_err(Error::from),
            None => self.run_unsampled(inputs),
        };
        s.ran(start.elapsed().as_secs_f64(), window.is_some());
        out
    }

    /// A run outside sampling: replayed where a graph is captured, else eager.
    fn run_unsampled(&self, inputs: Vec<(String, Value)>) -> Result<Vec<(String, Value)>> {
        if self.options.graph_capture != GraphCapture::Off && self.capture_blocker.is_none() {
            let key = capture::shape_key(&inputs);
            match self.graphs.plan(&key) {
                capture::Plan::Replay(c) => {
                    if let Some(r) = c.replay(&self.plan.graph, &inputs, &self.counters) {
                        return r;
                    }
                }
                capture::Plan::Capture => return self.capture(&key, inputs),
                capture::Plan::Eager => {}
            }
        }
        Ok(self.execute(inputs, None)?.0)
    }

    /// Captures a run into a device graph (falling back to an eager run when something refuses).
    fn capture(
        &self,
        key: &capture::ShapeKey,
        inputs: Vec<(String, Value)>,
    ) -> Result<Vec<(String, Value)>> {
        let names: Vec<String> = self
            .plan
            .graph
            .runtime_inputs()
            .map(|i| i.name.clone())
            .filter(|n| inputs.iter().any(|(m, _)| m == n))
            .collect();
        match self.execute(inputs.clone(), Some(names.clone())) {
            Ok((outs, Some(replay))) => {
                Counters::bump(&self.counters.graph_captures, 1);
                let (measured, keep) = if self.options.graph_capture == GraphCapture::Auto {
                    let n = capture::auto_samples();
                    let eager = capture::median_ms(n, || {
                        self.execute(inputs.clone(), None)?;
                        Ok(())
                    })?;
                    let replayed = capture::median_ms(n, || {
                        let names: Vec<&str> = names.iter().map(String::as_str).collect();
                        let refs: Vec<&crate::tensor::Tensor> = names
                            .iter()
                            .filter_map(|n| {
                                inputs
                                    .iter()
                                    .find(|(m, _)| m == n)
                                    .and_then(|(_, v)| v.as_tensor())
                            })
                            .collect();
                        replay
                            .replay(&refs, &self.counters)
                            .map(|_| ())
                            .map_err(|e| Error::Device(format!("replaying a captured graph: {e}")))
                    })?;
                    (Some((eager, replayed)), replayed < eager)
                } else {
                    (None, true)
                };
                let shapes = self
                    .plan
                    .graph
                    .outputs
                    .iter()
                    .zip(&outs)
                    .filter_map(|(o, (_, v))| {
                        v.as_tensor()
                            .map(|t| (o.name.clone(), t.dtype(), t.shape().to_vec()))
                    })
                    .collect();
                self.graphs.keep(key, replay, names, shapes, measured, keep);
                Ok(outs)
            }
            Ok((_, None)) => Err(Error::Device("a capture ended without a graph".into())),
            Err(Refused::Capture(reason)) => {
                self.graphs.refuse(key, reason, &self.counters);
                Ok(self.execute(inputs, None)?.0)
            }
            // A node's error is the inputs' doing (an index out of range): the next run of these
            // shapes may capture.
            Err(Refused::Error(e @ Error::Node { .. })) => Err(e),
            Err(Refused::Error(e)) => {
                self.graphs.refuse(key, e.to_string(), &self.counters);
                Err(e)
            }
        }
    }

    /// One run through the executor; with `capture` (the run inputs in the replay's order), the
    /// device work is captured and the graph returned beside the outputs.
    fn execute(
        &self,
        inputs: Vec<(String, Value)>,
        capture: Option<Vec<String>>,
    ) -> std::result::Result<Executed, Refused> {
        self.execute_with(inputs, capture, None, None)
    }

    /// A sampled run: eager, its window's nodes copied out for the sampler.
    fn execute_sampled(
        &self,
        inputs: Vec<(String, Value)>,
        window: &sampling::Window,
    ) -> std::result::Result<Executed, Refused> {
        self.execute_with(inputs, None, Some(window), None)
    }

    fn execute_with(
        &self,
        inputs: Vec<(String, Value)>,
        capture: Option<Vec<String>>,
        sample: Option<&sampling::Window>,
        binding: Option<&binding::Binding>,
    ) -> std::result::Result<Executed, Refused> {
        // The run's input shapes, bound ones included (what shape arithmetic and `auto`'s kept
        // choices are keyed by).
        let key = {
            let mut k = capture::shape_key(&inputs);
            if let Some(b) = binding {
                k.extend(b.shapes());
                k.sort();
            }
            k
        };
        // A capture needs every node on the device: such runs use the per-node rule, untimed.
        let ticket = match &capture {
            None => self.dispatch.trial.begin(|| self.kept_choice(&key)),
            Some(_) => trial::Ticket::per_node(),
        };
        // The trial's checked run: every device result judged by both oracles, a wrong one replaced
        // by the CPU's (shadow), unless the session verifies anyway.
        let check = ticket.check && self.options.auto_check;
        let mode = match (check, self.verify) {
            (true, VerifyMode::Off) => VerifyMode::Shadow,
            (_, m) => m,
        };
        let before = check.then(|| self.counters.snapshot());
        let started = quorum_core::clock::Stamp::now();
        let graph = &self.plan.graph;
        let mut devices = Vec::with_capacity(self.devices.len());
        for (index, d) in self.devices.iter().enumerate() {
            let run = d
                .session
                .begin(
                    index,
                    self.schedule.streams.max(1),
                    &self.counters,
                    self.options.poison_device_buffers,
                )
                .map_err(|e| {
                    Refused::Error(Error::Device(format!(
                        "starting a {} run: {e}",
                        d.provider.name()
                    )))
                })?;
            devices.push(run);
        }
        let log = self.log.as_ref().map(|l| l.begin().0);
        if let Some(log) = &log {
            for d in &devices {
                d.attach_log(log.clone());
            }
        }
        let bound = match binding {
            Some(b) => b.adopt(&devices).map_err(Refused::Error)?,
            None => Vec::new(),
        };
        let keep: &[String] = binding.map_or(&[], |b| &b.keep[..]);
        let pinned: &[(String, Arc<Value>)] = binding.map_or(&[], |b| &b.pinned[..]);
        let into: Vec<&dyn binding::Dest> = binding.map_or(Vec::new(), |b| {
            b.into.iter().map(|i| i as &dyn binding::Dest).collect()
        });
        let into = &into[..];
        if self.options.profile {
            for d in &devices {
                d.time_kernels();
            }
        }
        if self.options.audit_launches {
            for d in &devices {
                d.audit_launches();
            }
        }
        let whole = ticket.whole;
        let shape_values = self
            .plan
            .steps
            .iter()
            .any(|s| s.shapes_only)
            .then(|| self.shape_values.for_key(&key));
        // Strict runs judge their device nodes on a pool beside the run (`judges`).
        let judges =
            (mode == VerifyMode::Strict && !devices.is_empty() && capture.is_none()).then(|| {
                judges::Judges::start(
                    std::thread::available_parallelism().map_or(1, |n| n.get().clamp(1, 8)),
                )
            });
        let make = |devices, capture| exec::Exec {
            profile: self.options.profile,
            max_tensor_bytes: self.options.max_tensor_bytes,
            max_loop_iterations: self.options.max_loop_iterations,
            dispatch: &self.dispatch,
            whole,
            policy: crate::verify::Policy {
                mode,
                allow_unchecked: &self.options.allow_unchecked,
            },
            counters: &self.counters,
            arena: &self.arena,
            devices,
            recorded: Default::default(),
            next_event: Default::default(),
            capture,
            refusal: Default::default(),
            replay: Default::default(),
            sample,
            judges: judges.as_ref(),
            shape_values: shape_values.clone(),
            bound: std::cell::RefCell::new(bound.clone()),
            keep,
            pinned,
            into,
            kept: Default::default(),
        };
        let (result, refusal, replay) = if devices.is_empty() && capture.is_none() {
            // A run with no device goes onto one of rayon's workers as a whole, so that each
            // parallel kernel splits its work from inside the pool (the other worker steals its
            // half). Called from outside, every such kernel injected its job and put this thread
            // to sleep until the pool had finished it: two context switches per kernel, and the
            // scheduler was a fifth of bert_encoder's samples on two threads. Within a worker
            // already (a caller's own parallel runs), `scope` runs it in place.
            //
            // A model whose last run took under `INLINE_RUN_NS` runs on the caller's thread
            // instead: its kernels are too small to split, and the hand-off to the pool and back
            // (two wake-ups, about 8 µs on two cores) was most of such a run (a 1-node model:
            // 11 µs a run, onnxruntime's 3).
            // (WebAssembly has one thread and no clock: there every run is inline.)
            use std::sync::atomic::Ordering::Relaxed;
            #[cfg(not(target_arch = "wasm32"))]
            let started = std::time::Instant::now();
            let inline =
                cfg!(target_arch = "wasm32") || self.last_host_run_ns.load(Relaxed) < INLINE_RUN_NS;
            let result = if inline {
                make(Vec::new(), None).run_top(&self.plan, &self.schedule, inputs)
            } else {
                rayon::scope(|_| {
                    let _spin = spin::Spinners::start();
                    make(Vec::new(), None).run_top(&self.plan, &self.schedule, inputs)
                })
            };
            #[cfg(not(target_arch = "wasm32"))]
            self.last_host_run_ns.store(
                u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX),
                Relaxed,
            );
            (result, None, None)
        } else {
            let exec = make(devices, capture);
            let result = exec.run_top(&self.plan, &self.schedule, inputs);
            if let Some(b) = binding {
                *b.kept.borrow_mut() = exec.kept.take();
            }
            if result.is_err() && exec.capture.is_some() {
                for d in &exec.devices {
                    d.abort_capture();
                }
            }
            let refusal = exec.refusal.borrow_mut().take();
            let replay = exec.replay.borrow_mut().take();
            (result, refusal, replay)
        };
        // Every judgement in before the outputs go back; the first failing one, in the run's
        // order, is the run's error (a device error that ended the run first stays the error).
        let result = match &judges {
            None => result,
            Some(j) => {
                let policy = crate::verify::Policy {
                    mode,
                    allow_unchecked: &self.options.allow_unchecked,
                };
                let mut failed = None;
                for (node, check) in j.finish() {
                    if let Err(e) = policy.apply(&node, &check, &self.counters) {
                        failed.get_or_insert(e);
                    }
                }
                match (result, failed) {
                    (Ok(_), Some(e)) => Err(e),
                    (r, _) => r,
                }
            }
        };
        self.arena.end_run();
        if result.is_ok() {
            if let Some(b) = before {
                let a = self.counters.snapshot();
                self.dispatch.trial.checked(
                    ticket,
                    trial::Checked {
                        checks: a.verify_checks - b.verify_checks,
                        mismatched: a.verify_mismatches - b.verify_mismatches,
                        unsettled: a.verify_unsettled - b.verify_unsettled,
                    },
                );
            }
            let ms = started.elapsed().as_secs_f64() * 1e3;
            if let Some(chosen) = self.dispatch.trial.end(ticket, ms) {
                self.keep_choice(chosen);
            }
        }
        if let (Some(sink), Some(log)) = (&self.log, &log) {
            sink.end(log);
        }
        let outs = match result {
            Ok(outs) => outs,
            Err(e) => {
                return Err(match refusal {
                    Some(reason) => Refused::Capture(reason),
                    None => Refused::Error(e),
                });
            }
        };
        Ok((
            graph
                .outputs
                .iter()
                .map(|o| o.name.clone())
                .zip(outs)
                .collect(),
            replay,
        ))
    }
}

impl Session {
    /// The choice an earlier process recorded for this model, adapters and `inputs`' shapes, with
    /// where it was recorded; remembers the key for [`Session::keep_choice`].
    fn kept_choice(&self, shapes: &capture::ShapeKey) -> Option<(trial::Whole, String)> {
        let path = self.options.auto_choices.as_ref()?;
        let adapters: Vec<String> = self
            .devices
            .iter()
            .map(|d| d.session.device_name())
            .collect();
        let key = choices::key(
            choices::fingerprint(&self.model.graph),
            &adapters.join(", "),
            shapes,
        );
        let found = choices::lookup(path, &key);
        *self.choice_key.lock().unwrap_or_else(|e| e.into_inner()) = Some(key);
        found.map(|c| {
            (
                c.placement,
                format!("{} (recorded {})", path.display(), c.recorded),
            )
        })
    }

    /// Records the trial's choice under the key of the run that started it.
    fn keep_choice(&self, chosen: trial::Whole) {
        let (Some(path), Some(key)) = (
            self.options.auto_choices.as_ref(),
            self.choice_key
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        ) else {
            return;
        };
        let choice = choices::Choice {
            placement: chosen,
            why: self.dispatch.trial.report().unwrap_or_default(),
            recorded: choices::now(),
        };
        if let Err(e) = choices::record(path, &key, choice) {
            eprintln!("warning: auto's choice not kept: {e}");
        }
    }
}

/// What an executor run gives: the outputs by name, and the captured graph when one was asked for.
type Executed = (
    Vec<(String, Value)>,
    Option<Box<dyn crate::backend::Replay>>,
);

/// Why an executor run did not give outputs: a capture refused (the run can go again eagerly), or
/// an error.
enum Refused {
    Capture(String),
    Error(Error),
}

impl From<Refused> for Error {
    fn from(r: Refused) -> Error {
        match r {
            Refused::Capture(reason) => Error::Provider(format!("graph capture refused: {reason}")),
            Refused::Error(e) => e,
        }
    }
}

#[cfg(test)]
mod binding_tests;
#[cfg(test)]
mod conv_cache_tests;
#[cfg(test)]
mod profile_tests;
#[cfg(test)]
mod reuse_tests;
#[cfg(test)]
mod shapes_tests;
