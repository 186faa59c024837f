//! What the subcommands share: model and input options, error-to-exit-code mapping.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use quorum::{Error, Session, SessionOptions, Value};

/// A failure with the exit code it maps to (see `quorum --help`).
pub struct CliError {
    pub message: String,
    pub code: u8,
}

pub type CliResult<T> = Result<T, CliError>;

/// Values by input name, as a session takes them.
pub type NamedValues = Vec<(String, Value)>;

pub fn fail(code: u8, message: impl Into<String>) -> CliError {
    CliError {
        message: message.into(),
        code,
    }
}

/// Maps a runtime error to its exit code.
pub fn from_quorum(e: Error) -> CliError {
    let code = match &e {
        Error::Input { .. } => 4,
        Error::Node { .. } | Error::TooLarge { .. } => 1,
        Error::Provider(_) => 2,
        Error::VerifyMismatch { .. } | Error::VerifyUnsettled { .. } => 6,
        Error::Device(_) => 7,
        Error::Io { .. }
        | Error::Decode(_)
        | Error::InvalidModel(_)
        | Error::Unsupported { .. }
        | Error::UnsupportedOpset { .. } => 3,
    };
    CliError {
        message: e.to_string(),
        code,
    }
}

#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// The .onnx model file.
    pub model: PathBuf,
    /// An input value: NAME=FILE where FILE is .npy or a TensorProto .pb (repeatable).
    #[arg(long = "input", value_name = "NAME=FILE")]
    pub inputs: Vec<String>,
    /// The value of a symbolic dimension, SYMBOL=VALUE (repeatable; default 1 for generated inputs).
    #[arg(long = "dim", value_name = "SYMBOL=VALUE")]
    pub dims: Vec<String>,
    /// Where nodes run: auto (every available provider, small nodes kept on the CPU; a software
    /// wgpu adapter is left out), cpu, cuda (every node CUDA claims, the CPU for the rest), wgpu
    /// (every node wgpu claims, on the adapter it picks; QUORUM_WGPU_ADAPTER names one), sim (the
    /// simulated device of the stream checker: CPU kernels behind the device seam), or a comma list
    /// in priority order.
    #[arg(long, default_value = "auto")]
    pub provider: String,
    /// How accelerated results are checked: off, shadow (log, count, use the CPU result), strict
    /// (a mismatch ends the run, exit code 6), or sample[=R[:K]] / sample-strict[=R[:K]] (some runs
    /// judge a rotating window of K device nodes, 4 by default, on a worker thread while graph
    /// replay stays on: R is N for one run in N, or P% to sample while sampled runs take at most P%
    /// of the time, 2% by default; it detects, it does not prevent: sample-strict fails the run
    /// after a mismatch).
    /// QUORUM_VERIFY overrides off, shadow and strict.
    #[arg(long, default_value = "off")]
    pub verify: String,
    /// Op types that strict verification lets through when the oracles cannot judge them (they
    /// disagree, reject the inputs, or do not cover the op), comma-separated: e.g. Dropout,Resize.
    #[arg(long, value_name = "OPS", value_delimiter = ',')]
    pub allow_unchecked: Vec<String>,
    /// Keep nodes whose inputs are all constants in the plan instead of computing them once at load
    /// (constant folding is on by default).
    #[arg(long)]
    pub no_fold: bool,
    /// Leave the graph as the model gives it: no fusions, no Identity removal (the rewrites are on by
    /// default; most keep every output bit for bit, and the few that round differently, folded
    /// batch norms and one-pass GELU, stay within the bound their module states, `quorum info`
    /// marking them).
    #[arg(long)]
    pub no_optimize: bool,
    /// Compute a static QDQ model's quantized Conv and MatMul (DequantizeLinear → op →
    /// QuantizeLinear) on their integers as QLinearConv and QLinearMatMul, as onnxruntime does by
    /// default: 1.7–2.8× faster on dense convolutions and products here, at most one quantization
    /// step from the f32 chain where a value lies at a step's edge. Off by default (the chain is
    /// computed as written); depthwise convolutions stay in f32 either way.
    #[arg(long)]
    pub qdq_integer: bool,
    /// Allocate every output from the process heap instead of reusing the storage of dead
    /// activations through the memory arena (on by default): lower peak memory, and outputs
    /// allocated again in every run.
    #[arg(long)]
    pub no_arena: bool,
    /// Device streams a run may use: independent branches of the graph run concurrently (results
    /// are bit-identical to one stream).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub streams: u16,
    /// Device graph capture: off, on (capture each input-shape key after warm-up and replay it) or
    /// auto (keep a graph only where replay measured faster than eager runs).
    #[arg(long, default_value = "off")]
    pub graph: String,
    /// Arithmetic of the model's f32 values: f32 (exact f32 products), tf32 (CUDA rounds the
    /// operands of matrix products to TF32 on the tensor cores, as onnxruntime and PyTorch allow;
    /// sums stay f32), or f16 / bf16 (the model is converted to that type when the session is
    /// built, the interface staying f32 and the ops of the keep list in f32; `run` then prints how
    /// far the outputs are from the f32 model's). Verification judges each node as it runs.
    #[arg(long, default_value = "f32")]
    pub precision: String,
    /// Op types kept in f32 by --precision f16|bf16, beside the default list (Pow, the squaring
    /// reductions, Range, CumSum, Resize, detection, quantization and generator ops),
    /// comma-separated: e.g. Softmax,LayerNormalization.
    #[arg(long, value_name = "OPS", value_delimiter = ',')]
    pub keep_f32: Vec<String>,
    /// Where `auto` keeps its whole-model choice per model, adapter and input shapes, so that later
    /// runs place the model the same way without a trial: a JSON file ("off": keep nothing).
    /// Default: $QUORUM_AUTO_CHOICES, else quorum/auto-choices.json in $XDG_CACHE_HOME or ~/.cache.
    #[arg(long, value_name = "FILE")]
    pub auto_choices: Option<String>,
    /// Let `auto`'s trial keep a device placement without verifying its first run (by default each
    /// device placement's first run is judged by both oracles, once, before it can be kept).
    #[arg(long)]
    pub no_auto_check: bool,
}

/// The store of `auto`'s choices the flags and environment name (`None`: off, or no home).
fn auto_choices(flag: Option<&str>) -> Option<PathBuf> {
    let given = flag
        .map(str::to_string)
        .or_else(|| std::env::var("QUORUM_AUTO_CHOICES").ok());
    match given.as_deref() {
        Some("off") | Some("") => None,
        Some(p) => Some(PathBuf::from(p)),
        None => std::env::var_os("XDG_CACHE_HOME")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .map(|d| d.join("quorum").join("auto-choices.json")),
    }
}

fn split_pair<'a>(s: &'a str, what: &str) -> CliResult<(&'a str, &'a str)> {
    s.split_once('=')
        .ok_or_else(|| fail(2, format!("{what} '{s}' must look like NAME=VALUE")))
}

impl ModelArgs {
    pub fn dims(&self) -> CliResult<HashMap<String, i64>> {
        self.dims
            .iter()
            .map(|d| {
                let (k, v) = split_pair(d, "--dim")?;
                let v: i64 = v
                    .parse()
                    .map_err(|_| fail(2, format!("--dim {k}: '{v}' is not an integer")))?;
                if v < 0 {
                    return Err(fail(2, format!("--dim {k}: {v} is negative")));
                }
                Ok((k.to_string(), v))
            })
            .collect()
    }

    /// The session options the flags ask for.
    pub fn options(&self) -> CliResult<SessionOptions> {
        let (providers, min_device_elements) =
            quorum::parse_providers(&self.provider).map_err(|e| fail(2, e))?;
        let (verify, verify_sample) = match quorum::session::sampling::Sampling::parse(&self.verify)
        {
            Some(Ok(s)) => (quorum::VerifyMode::Off, Some(s)),
            Some(Err(e)) => return Err(fail(2, format!("--verify: {e}"))),
            None => (
                self.verify
                    .parse()
                    .map_err(|e: String| fail(2, format!("--verify: {e}")))?,
                None,
            ),
        };
        Ok(SessionOptions {
            dims: self.dims()?,
            providers,
            min_device_elements,
            verify,
            allow_unchecked: self
                .allow_unchecked
                .iter()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            fold_constants: !self.no_fold,
            optimize: !self.no_optimize,
            qdq_integer: self.qdq_integer,
            arena: !self.no_arena,
            streams: self.streams as usize,
            graph_capture: self
                .graph
                .parse()
                .map_err(|e: String| fail(2, format!("--graph: {e}")))?,
            precision: self
                .precision
                .parse()
                .map_err(|e: String| fail(2, format!("--precision: {e}")))?,
            keep_f32: self
                .keep_f32
                .iter()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            auto_choices: auto_choices(self.auto_choices.as_deref()),
            auto_check: !self.no_auto_check,
            verify_sample,
            ..Default::default()
        })
    }

    /// The session, after printing the model's load warnings (one `warning:` line each, to stderr).
    pub fn session(&self) -> CliResult<Session> {
        self.session_with(self.options()?)
    }

    /// [`ModelArgs::session`] with options the caller adjusted.
    pub fn session_with(&self, options: SessionOptions) -> CliResult<Session> {
        let session = Session::from_file(&self.model, options).map_err(from_quorum)?;
        print_warnings(session.model());
        Ok(session)
    }

    /// Inputs read from files, then every remaining runtime input generated with `seed`.
    pub fn inputs(&self, session: &Session, seed: u64) -> CliResult<(NamedValues, Vec<String>)> {
        let graph = &session.model().graph;
        let mut given = Vec::new();
        for spec in &self.inputs {
            let (name, file) = split_pair(spec, "--input")?;
            let ty = graph
                .inputs
                .iter()
                .find(|i| i.name == name)
                .map(|i| i.ty.clone())
                .ok_or_else(|| {
                    let names: Vec<&str> =
                        graph.runtime_inputs().map(|i| i.name.as_str()).collect();
                    fail(
                        4,
                        format!(
                            "--input {name}: the model has no input '{name}' (it takes {names:?})"
                        ),
                    )
                })?;
            given.push((name.to_string(), read_value(Path::new(file), &ty)?));
        }
        let generated =
            quorum::inputs::generate(graph, &given, &self.dims()?, seed).map_err(from_quorum)?;
        let names = generated.iter().map(|(n, _)| n.clone()).collect();
        given.extend(generated);
        Ok((given, names))
    }
}

fn read_value(path: &Path, ty: &quorum::ir::ValueType) -> CliResult<Value> {
    let bytes =
        std::fs::read(path).map_err(|e| fail(4, format!("cannot read {}: {e}", path.display())))?;
    let r = if path.extension().is_some_and(|e| e == "npy") {
        quorum::npy::read(&bytes).map(Value::Tensor)
    } else {
        quorum::loader::value_from_pb(&bytes, ty, &Default::default())
    };
    r.map_err(|e| fail(4, format!("{}: {e}", path.display())))
}

/// Prints each of the model's load warnings (a newer opset run as an older one...) to stderr.
pub fn print_warnings(model: &quorum::ir::Model) {
    for w in &model.warnings {
        eprintln!("warning: {w}");
    }
}

/// Prints what a mixed-precision conversion did (to stderr): nodes converted, kept (by op), casts
/// and initializers.
pub fn print_conversion(session: &Session) {
    if let Some(c) = session.conversion() {
        let kept: Vec<String> = c.kept.iter().map(|(op, n)| format!("{op} ×{n}")).collect();
        eprintln!(
            "mixed precision ({}): {} nodes converted, {} kept in f32{}, {} casts, {} initializers \
             converted{}",
            c.dtype.map_or("?", |d| d.name()),
            c.converted,
            c.kept.iter().map(|(_, n)| n).sum::<usize>(),
            if kept.is_empty() {
                String::new()
            } else {
                format!(" ({})", kept.join(", "))
            },
            c.casts,
            c.initializers,
            if c.clamped > 0 {
                format!(" ({} values clamped to f16's range)", c.clamped)
            } else {
                String::new()
            }
        );
    }
}

/// Prints what verification found, per op (to stderr, so `--json` output stays one object):
/// checked, mismatched and unsettled counts, and each reason with its count.
pub fn print_verification(session: &Session) {
    if let Some(r) = session.sample_report(true) {
        eprintln!(
            "sampled verification ({}, {} device nodes per sampled run): {} of {} runs \
             sampled, {} node results judged, {} mismatched, {} unsettled; {} of {} device nodes \
             judged at least once",
            match r.budget_percent {
                Some(p) => format!("sampled runs within {p}% of the time"),
                None => format!("one run in {}", r.every),
            },
            r.nodes_per_run,
            r.sampled_runs,
            r.runs,
            r.judged,
            r.mismatched,
            r.unsettled,
            r.covered,
            r.device_nodes
        );
        if let Some(w) = &r.first_wrong {
            eprintln!("  first wrong: {w}");
        }
    }
    if session.verify_mode() == quorum::VerifyMode::Off {
        return;
    }
    let by_op = session.verification();
    let (checked, mismatched, unsettled) = by_op.values().fold((0, 0, 0), |(c, m, u), v| {
        (c + v.checked, m + v.mismatched, u + v.unsettled)
    });
    eprintln!(
        "verification ({:?}): {checked} checks, {mismatched} mismatched, {unsettled} unsettled",
        session.verify_mode()
    );
    if by_op.is_empty() {
        eprintln!("  no node ran on an accelerator: nothing to check");
    }
    for (op, v) in &by_op {
        eprintln!(
            "  {op}: {} checked, {} mismatched, {} unsettled",
            v.checked, v.mismatched, v.unsettled
        );
        for (why, n) in &v.reasons {
            eprintln!("    {n} x {why}");
        }
    }
}
