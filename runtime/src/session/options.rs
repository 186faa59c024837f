//! How a session is built: `SessionOptions` and its defaults.
use std::collections::HashMap;

use super::capture::GraphCapture;
use crate::backend::Provider;
use crate::verify::VerifyMode;

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
    /// stays on the CPU (see [`AUTO_MIN_DEVICE_ELEMENTS`](super::AUTO_MIN_DEVICE_ELEMENTS)); 0 sends
    /// every claimed node to its provider.
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
    /// Apply the graph rewrites of `crate::optimize` (fusions, Identity removal) when every node of
    /// the session runs on the CPU (on by default); each keeps the outputs bit for bit.
    pub optimize: bool,
    /// With `optimize`: compute a static QDQ model's quantized Conv and MatMul on its integers
    /// (the `qdq-integer` rewrite, `optimize/qlinear.rs`), as onnxruntime does by default. Off by
    /// default: the results move by one quantization step where a value lies at a step's edge,
    /// and the integer form is the faster only where the products are large (see the module).
    /// `QUORUM_QDQ_INTEGER=on|off` overrides it.
    pub qdq_integer: bool,
    /// Keep the storage of dead f32 activations for the next outputs that fit, within a run and
    /// across runs (`crate::arena`; on by default): a steady-state run then takes no new memory
    /// for the outputs of the kernels that allocate through it, at the cost of holding what the
    /// last run asked for (peak memory a few MB to tens of MB higher, measured in
    /// `reports/cpu/README.md`). Off: every output allocates from the process heap.
    pub arena: bool,
    /// Device streams a run may use (at least 1): independent branches of the graph go on different
    /// streams (see `session::schedule`); results are bit-identical to one stream.
    pub streams: usize,
    /// Whether runs are captured into device graphs and replayed (see `session::capture`).
    pub graph_capture: GraphCapture,
    /// The arithmetic accelerators may use for f32 matrix products (`Precision::F32`, the default:
    /// exact f32; `Tf32`: CUDA rounds the operands to TF32 on the tensor cores, where the device
    /// has them). Verification judges each node under what its kernel declares it did.
    pub precision: crate::backend::Precision,
    /// Op types kept in f32 when `precision` converts the model to a half, beside the default list
    /// (`quorum::mixed::DEFAULT_KEEP`).
    pub keep_f32: Vec<String>,
    /// Time every top-level node and add it to its op type's total (`Session::op_profile`); off by
    /// default (then nothing is timed).
    pub profile: bool,
    /// Record every device run's commands (`crate::cmdlog`), kept for
    /// `Session::take_command_logs`; off by default (then nothing is recorded).
    pub command_log: bool,
    /// Check every kernel launch against the byte ranges it declares (see
    /// `DeviceRun::audit_launches`); off by default, and `QUORUM_AUDIT_LAUNCHES=1` turns it on. It
    /// synchronises and copies the run's memory around each launch: for tests, not for speed.
    pub audit_launches: bool,
    /// Where `auto` keeps its whole-model choice per model, adapter and input shapes, so that later
    /// sessions of the same key skip the trial and place the model the same way (see
    /// `session::trial`); `None` (the default) keeps nothing. The CLI uses the user's cache folder.
    pub auto_choices: Option<std::path::PathBuf>,
    /// Whether `auto`'s trial verifies the first run of each device placement (shadow mode) and
    /// never keeps one with a result outside its bound (on by default). It costs one verified run
    /// per device placement, once per session (or once per model, adapter and shapes with
    /// `auto_choices`): seconds for a transformer (bert-base b8 strict took 50.8 s on the H200's
    /// host node by node).
    pub auto_check: bool,
    /// Sampled verification (`session::sampling`): one run in `every` judges a rotating window of
    /// device nodes on a worker thread, and graph replay stays on for the others. Only where
    /// `verify` is off (strict and shadow judge every node anyway). `None` by default.
    pub verify_sample: Option<super::sampling::Sampling>,
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
            optimize: true,
            qdq_integer: false,
            arena: true,
            streams: 1,
            graph_capture: GraphCapture::Off,
            precision: crate::backend::Precision::F32,
            keep_f32: Vec::new(),
            command_log: false,
            audit_launches: false,
            profile: false,
            auto_choices: None,
            auto_check: true,
            verify_sample: None,
        }
    }
}
