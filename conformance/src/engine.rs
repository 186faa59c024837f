//! Engines: anything that runs a model on inputs. The runner knows only this trait, so new engines
//! (oracles, CUDA, wgpu) slot in without touching it.
use std::path::Path;

use quorum::{Session, SessionOptions, Value};

/// Why an engine did not produce outputs.
#[derive(Debug, Clone)]
pub enum EngineError {
    /// The engine does not implement something the model needs.
    Unsupported(String),
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
}

fn classify(e: quorum::Error) -> EngineError {
    match e {
        quorum::Error::Unsupported { .. } => EngineError::Unsupported(e.to_string()),
        e => EngineError::Failed(e.to_string()),
    }
}

/// Quorum's CPU backend.
pub struct Cpu;

/// A runtime session, whatever its providers (the cpu and cuda engines).
struct SessionModel(Session);

impl Engine for Cpu {
    fn name(&self) -> &str {
        "cpu"
    }

    fn prepare(&self, model: &Path) -> Result<Box<dyn Prepared>, EngineError> {
        Ok(Box::new(SessionModel(
            Session::from_file(model, SessionOptions::default()).map_err(classify)?,
        )))
    }
}

impl Prepared for SessionModel {
    fn run(&self, inputs: Vec<(String, Value)>) -> Result<Vec<Value>, EngineError> {
        Ok(self
            .0
            .run(inputs)
            .map_err(classify)?
            .into_iter()
            .map(|(_, v)| v)
            .collect())
    }
}

/// Quorum's CUDA backend: every node CUDA claims runs there (no size floor), the CPU runs the rest.
pub struct Cuda;

impl Engine for Cuda {
    fn name(&self) -> &str {
        "cuda"
    }

    fn available(&self) -> Result<(), String> {
        quorum::Provider::Cuda.available()
    }

    fn prepare(&self, model: &Path) -> Result<Box<dyn Prepared>, EngineError> {
        let options = SessionOptions {
            providers: vec![quorum::Provider::Cuda, quorum::Provider::Cpu],
            ..Default::default()
        };
        Ok(Box::new(SessionModel(
            Session::from_file(model, options).map_err(classify)?,
        )))
    }
}

/// The CUDA device's name, for reports.
pub fn cuda_device() -> Option<String> {
    #[cfg(feature = "cuda")]
    if let Ok(d) = quorum::cuda::Device::get() {
        let (ma, mi) = d.ctx.info.compute_capability;
        return Some(format!(
            "{} (compute capability {ma}.{mi})",
            d.ctx.info.name
        ));
    }
    None
}

/// Every engine this build knows, available or not.
pub fn all() -> Vec<Box<dyn Engine>> {
    vec![
        Box::new(Cpu),
        Box::new(Cuda),
        Box::new(crate::oracle_engine::reference()),
        Box::new(crate::oracle_engine::independent()),
    ]
}

pub fn by_name(name: &str) -> Option<Box<dyn Engine>> {
    all().into_iter().find(|e| e.name() == name)
}
