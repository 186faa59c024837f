//! Engines: anything that runs a model on inputs. The runner knows only this trait, so new engines
//! (oracles, CUDA, wgpu) slot in without touching it.
use std::collections::HashSet;
use std::path::Path;

use quorum::ir::Model;
use quorum::{Availability, Session, SessionOptions, Value};

use crate::coverage::Coverage;

/// Why an engine did not produce outputs.
#[derive(Debug, Clone)]
pub enum EngineError {
    /// The engine does not implement something the model needs.
    Unsupported(String),
    /// The engine does not implement something the model needs, by a rule it states for itself, so
    /// that no expectation list needs a line for it: a node of an oracle engine whose op is not a row
    /// of the op table (the oracles owe the table's ops, nothing beyond them).
    Uncovered(String),
    /// The engine tried and failed.
    Failed(String),
}

pub trait Engine: Send + Sync {
    fn name(&self) -> &str;
    /// `Err(reason)` when the engine cannot run on this machine.
    fn available(&self) -> Result<(), String> {
        Ok(())
    }
    fn prepare(&self, model: &Path) -> Result<Box<dyn Prepared>, EngineError>;
    /// Whether a run that names no engine includes this one.
    fn runs_by_default(&self) -> bool {
        true
    }
}

pub trait Prepared: Send + Sync {
    fn run(&self, inputs: Vec<(String, Value)>) -> Result<Vec<Value>, EngineError>;
    /// Where the model's nodes ran over the runs so far: engines with a device report it, the others
    /// nothing.
    fn coverage(&self) -> Option<Coverage> {
        None
    }
}

fn classify(e: quorum::Error) -> EngineError {
    match e {
        quorum::Error::Unsupported { .. } => EngineError::Unsupported(e.to_string()),
        e => EngineError::Failed(e.to_string()),
    }
}

/// Quorum's CPU backend. Where the session's graph rewrites (`quorum::optimize`) change the
/// model, the case also runs unrewritten and the two must agree bit for bit, or, where a rewrite
/// changes the arithmetic (`Rewrite::exact`), within [`FOLD_RTOL`] of each output's scale: the
/// corpus judges the rewritten graph against its expected outputs and against the graph as
/// written.
pub struct Cpu;

/// A runtime session, whatever its providers (the cpu and cuda engines); `device` when it reports
/// coverage; `plain`, the same model without graph rewrites, where the session has some.
struct SessionModel {
    session: Session,
    device: bool,
    plain: Option<Session>,
}

/// Where two runs' outputs differ bit for bit, in words (`None`: they agree).
fn bitwise_difference(a: &[Value], b: &[Value]) -> Option<String> {
    if a.len() != b.len() {
        return Some(format!("{} outputs vs {}", a.len(), b.len()));
    }
    for (k, (p, q)) in a.iter().zip(b).enumerate() {
        match (p.as_tensor(), q.as_tensor()) {
            (Some(p), Some(q)) => {
                if p.dtype() != q.dtype() || p.shape() != q.shape() {
                    return Some(format!("output {k}: {} vs {}", p.describe(), q.describe()));
                }
                let (Ok(pv), Ok(qv)) = (p.to_f64_vec(), q.to_f64_vec()) else {
                    continue;
                };
                if let Some(i) = pv
                    .iter()
                    .zip(&qv)
                    // Any NaN equals any NaN: IEEE 754 leaves the sign and payload of a NaN
                    // result unspecified, and vector code may take them from the other operand.
                    .position(|(x, y)| x.to_bits() != y.to_bits() && !(x.is_nan() && y.is_nan()))
                {
                    return Some(format!("output {k} element {i}: {} vs {}", pv[i], qv[i]));
                }
            }
            (None, None) => {}
            _ => return Some(format!("output {k}: a tensor on one side only")),
        }
    }
    None
}

/// How far a rewrite that changes the arithmetic may move an output, relative to the largest
/// magnitude of the unrewritten output. `affine-fold` rounds each folded weight once more (2⁻²⁴
/// relative per weight); through the tens of layers of the corpus's models that compounds to
/// about 10⁻⁶ of the scale, so 10⁻⁵ leaves a tenfold margin, and a wrong fold (a scale on the
/// wrong axis, a lost shift) moves outputs by a sizeable fraction of the scale.
pub const FOLD_RTOL: f64 = 1e-5;

/// Where two runs' outputs differ by more than [`FOLD_RTOL`] of each output's scale (`None`: they
/// agree). Dtypes, shapes, NaNs and infinities must still match exactly.
fn close_difference(a: &[Value], b: &[Value]) -> Option<String> {
    if a.len() != b.len() {
        return Some(format!("{} outputs vs {}", a.len(), b.len()));
    }
    for (k, (p, q)) in a.iter().zip(b).enumerate() {
        match (p.as_tensor(), q.as_tensor()) {
            (Some(p), Some(q)) => {
                if p.dtype() != q.dtype() || p.shape() != q.shape() {
                    return Some(format!("output {k}: {} vs {}", p.describe(), q.describe()));
                }
                let (Ok(pv), Ok(qv)) = (p.to_f64_vec(), q.to_f64_vec()) else {
                    continue;
                };
                let scale = qv
                    .iter()
                    .filter(|v| v.is_finite())
                    .fold(0.0f64, |m, v| m.max(v.abs()));
                let tol = FOLD_RTOL * scale;
                if let Some(i) = pv.iter().zip(&qv).position(|(x, y)| {
                    if x.is_nan() || y.is_nan() || x.is_infinite() || y.is_infinite() {
                        !(x.is_nan() && y.is_nan()) && x != y
                    } else {
                        (x - y).abs() > tol
                    }
                }) {
                    return Some(format!(
                        "output {k} element {i}: {} vs {} (allowed {tol:e})",
                        pv[i], qv[i]
                    ));
                }
            }
            (None, None) => {}
            _ => return Some(format!("output {k}: a tensor on one side only")),
        }
    }
    None
}

impl Engine for Cpu {
    fn name(&self) -> &str {
        "cpu"
    }

    fn prepare(&self, model: &Path) -> Result<Box<dyn Prepared>, EngineError> {
        let session = Session::from_file(model, SessionOptions::default()).map_err(classify)?;
        let plain = if session.rewrites().is_empty() {
            None
        } else {
            let options = SessionOptions {
                optimize: false,
                ..Default::default()
            };
            Some(Session::from_file(model, options).map_err(classify)?)
        };
        Ok(Box::new(SessionModel {
            session,
            device: false,
            plain,
        }))
    }
}

impl Prepared for SessionModel {
    fn run(&self, inputs: Vec<(String, Value)>) -> Result<Vec<Value>, EngineError> {
        let run = |s: &Session, inputs| -> Result<Vec<Value>, EngineError> {
            Ok(s.run(inputs)
                .map_err(classify)?
                .into_iter()
                .map(|(_, v)| v)
                .collect())
        };
        let Some(plain) = &self.plain else {
            return run(&self.session, inputs);
        };
        let outs = run(&self.session, inputs.clone())?;
        let want = run(plain, inputs)?;
        let exact = self.session.rewrites().iter().all(|r| r.exact());
        let differ = if exact {
            bitwise_difference(&outs, &want)
        } else {
            close_difference(&outs, &want)
        };
        if let Some(d) = differ {
            let rewrites: Vec<String> = self
                .session
                .rewrites()
                .iter()
                .map(|r| r.to_string())
                .collect();
            return Err(EngineError::Failed(format!(
                "the graph rewrites changed the result ({d}); rewrites: {}",
                rewrites.join("; ")
            )));
        }
        Ok(outs)
    }

    fn coverage(&self) -> Option<Coverage> {
        self.device.then(|| session_coverage(&self.session))
    }
}

/// Where a session's top-level nodes ran so far: its plan-time placement, less the nodes whose
/// device kernel declined at run time.
pub fn session_coverage(session: &Session) -> Coverage {
    let mut c = Coverage::from_placement(session.placement(), &session.fallback_nodes());
    c.checks = session.counters().verify_checks;
    c
}

/// An accelerator's engine (`cuda`, `wgpu`): every node the backend claims runs there (no size
/// floor), the CPU runs the rest. Constant folding is off, so that the device kernels, not the CPU
/// at session build, compute the nodes whose inputs are constants. Reports per case how many nodes
/// ran on the device.
pub struct Device {
    pub provider: quorum::Provider,
}

/// Quorum's CUDA backend as an engine.
#[allow(non_upper_case_globals)]
pub const Cuda: Device = Device {
    provider: quorum::Provider::Cuda,
};

/// Quorum's wgpu backend as an engine, on the adapter wgpu picks (lavapipe where it is the only
/// one, as in CI; `QUORUM_WGPU_ADAPTER` names another).
#[allow(non_upper_case_globals)]
pub const Wgpu: Device = Device {
    provider: quorum::Provider::Wgpu,
};

impl Device {
    /// The device first, the CPU for what it declines, constant folding off (so that every node
    /// runs its kernel), and strict verification: every device node's outputs are judged by both
    /// oracles beside the corpus data, and a mismatch fails the case.
    pub fn options(&self) -> SessionOptions {
        SessionOptions {
            providers: vec![self.provider, quorum::Provider::Cpu],
            fold_constants: false,
            verify: quorum::VerifyMode::Strict,
            ..Default::default()
        }
    }
}

impl Engine for Device {
    fn name(&self) -> &str {
        self.provider.name()
    }

    fn available(&self) -> Result<(), String> {
        self.provider.available()
    }

    fn prepare(&self, path: &Path) -> Result<Box<dyn Prepared>, EngineError> {
        let options = self.options();
        let lo = quorum::loader::LoadOptions {
            base_dir: None,
            max_tensor_bytes: options.max_tensor_bytes,
        };
        let mut model = quorum::loader::model_from_file(path, &lo).map_err(classify)?;
        name_nodes(&mut model);
        Ok(Box::new(SessionModel {
            session: Session::from_model(model, options).map_err(|e| {
                let e = classify(e);
                match e {
                    EngineError::Unsupported(m) => {
                        EngineError::Unsupported(format!("{m} (in {})", path.display()))
                    }
                    EngineError::Uncovered(m) => {
                        EngineError::Uncovered(format!("{m} (in {})", path.display()))
                    }
                    EngineError::Failed(m) => {
                        EngineError::Failed(format!("{}: {m}", path.display()))
                    }
                }
            })?,
            device: true,
            plain: None,
        }))
    }
}

/// Gives every top-level node a name no other node has (`<op>#<position>` for an unnamed or repeated
/// one), so that the nodes a session reports by name (run-time fallbacks) are told apart.
pub fn name_nodes(model: &mut Model) {
    let mut seen: HashSet<String> = HashSet::new();
    let named: HashSet<String> = model
        .graph
        .nodes
        .iter()
        .map(|n| n.name.clone())
        .filter(|n| !n.is_empty())
        .collect();
    for (i, node) in model.graph.nodes.iter_mut().enumerate() {
        if node.name.is_empty() || !seen.insert(node.name.clone()) {
            let mut name = format!("{}#{i}", node.op_type);
            while named.contains(&name) || seen.contains(&name) {
                name.push('_');
            }
            seen.insert(name.clone());
            node.name = name;
        }
    }
}

/// The CUDA device's name, for reports.
pub fn cuda_device() -> Option<String> {
    device_name(quorum::Provider::Cuda)
}

/// An accelerator's device in words, for reports (`None` where it is not usable).
pub fn device_name(p: quorum::Provider) -> Option<String> {
    let backend = quorum::providers::backend(p)?;
    backend.available().ok()?;
    Some(backend.open(&Default::default()).ok()?.device_name())
}

/// Every engine this build knows, available or not.
pub fn all() -> Vec<Box<dyn Engine>> {
    vec![
        Box::new(Cpu),
        Box::new(Cuda),
        Box::new(Wgpu),
        Box::new(crate::oracle_engine::reference()),
        Box::new(crate::oracle_engine::independent()),
    ]
}

pub fn by_name(name: &str) -> Option<Box<dyn Engine>> {
    all().into_iter().find(|e| e.name() == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unnamed_and_repeated_nodes_get_distinct_names() {
        let mut model = Model {
            ir_version: 8,
            opsets: Default::default(),
            producer: String::new(),
            graph: Default::default(),
            metadata: Vec::new(),
            warnings: Vec::new(),
        };
        for (name, op) in [
            ("", "Add"),
            ("x", "Relu"),
            ("x", "Relu"),
            ("", "Add"),
            ("Add#0", "Mul"),
        ] {
            model.graph.nodes.push(quorum::ir::Node {
                name: name.into(),
                op_type: op.into(),
                domain: String::new(),
                opset: 17,
                inputs: vec![],
                outputs: vec![],
                attrs: Default::default(),
            });
        }
        name_nodes(&mut model);
        let names: Vec<&str> = model.graph.nodes.iter().map(|n| n.name.as_str()).collect();
        let distinct: HashSet<&&str> = names.iter().collect();
        assert_eq!(distinct.len(), names.len(), "{names:?}");
        assert_eq!(names[1], "x");
        assert_eq!(names[4], "Add#0");
    }

    #[test]
    fn the_cuda_engine_does_not_fold_constants() {
        let o = Cuda.options();
        assert!(!o.fold_constants);
        assert_eq!(o.min_device_elements, 0);
        let o = Wgpu.options();
        assert_eq!(o.providers[0], quorum::Provider::Wgpu);
        assert!(!o.fold_constants);
        assert_eq!(o.min_device_elements, 0);
    }
}

#[cfg(test)]
mod rewrite_check_tests {
    use super::*;
    use quorum::tensor::Tensor;

    fn v(x: Vec<f32>) -> Value {
        Value::Tensor(Tensor::from_f32(&[x.len()], x).unwrap())
    }

    /// The rewritten-vs-plain comparison passes equal outputs (NaNs of any sign equal) and catches
    /// a one-ulp change, a zero's sign, a NaN for a number and a shape change (the slips a wrong
    /// rewrite makes).
    #[test]
    fn bitwise_difference_catches_the_smallest_changes() {
        let base = vec![1.5f32, -0.0, 3.25];
        assert_eq!(
            bitwise_difference(&[v(base.clone())], &[v(base.clone())]),
            None
        );
        let mut ulp = base.clone();
        ulp[2] = f32::from_bits(ulp[2].to_bits() + 1);
        assert!(bitwise_difference(&[v(base.clone())], &[v(ulp)]).is_some());
        let mut zero = base.clone();
        zero[1] = 0.0;
        assert!(bitwise_difference(&[v(base.clone())], &[v(zero)]).is_some());
        assert!(bitwise_difference(&[v(base.clone())], &[v(base[..2].to_vec())]).is_some());
        let (mut n1, mut n2) = (base.clone(), base.clone());
        n1[0] = f32::NAN;
        n2[0] = -f32::NAN;
        assert_eq!(bitwise_difference(&[v(n1.clone())], &[v(n2)]), None);
        assert!(bitwise_difference(&[v(n1)], &[v(base)]).is_some());
    }

    /// The comparison for rewrites that change the arithmetic passes last-bit changes and catches a
    /// change of a thousandth of the scale (what a fold on the wrong channel gives at the least), a
    /// NaN for a number, an infinity's sign and a shape change.
    #[test]
    fn close_difference_allows_rounding_and_catches_a_wrong_fold() {
        let base = vec![1.5f32, -0.25, 3.25, 0.0];
        let ulps: Vec<f32> = base
            .iter()
            .map(|v| f32::from_bits(v.to_bits() + 3))
            .collect();
        assert_eq!(close_difference(&[v(base.clone())], &[v(ulps)]), None);
        let mut off = base.clone();
        off[1] += 3.25e-3;
        assert!(close_difference(&[v(off)], &[v(base.clone())]).is_some());
        let mut nan = base.clone();
        nan[0] = f32::NAN;
        assert!(close_difference(&[v(nan)], &[v(base.clone())]).is_some());
        let (mut pinf, mut ninf) = (base.clone(), base.clone());
        pinf[3] = f32::INFINITY;
        ninf[3] = f32::NEG_INFINITY;
        assert!(close_difference(&[v(pinf)], &[v(ninf)]).is_some());
        assert!(close_difference(&[v(base.clone())], &[v(base[..2].to_vec())]).is_some());
    }
}
