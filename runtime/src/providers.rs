//! The registry of accelerators this build knows: which backend serves each [`Provider`], whether it
//! can be used here, and the `--provider` list. Kept apart from the seam (`crate::backend`), which
//! every backend imports, so that no import cycle runs through the seam.
use crate::backend::{Backend, Provider};

/// `auto`'s conservative default: elements (or multiply-adds for matmul and conv) below which a
/// node whose inputs are all on the host stays on the CPU, wherever no measured threshold table
/// covers the node (no table for the adapter, no entry for the node's family, or every measured
/// point inside the noise). The floor the runtime used before thresholds were measured.
pub const AUTO_MIN_DEVICE_ELEMENTS: usize = 1 << 14;

/// Whether a provider can be used here: a question for the registry, so asked through this trait
/// (in scope as `quorum::Availability`), not the [`Provider`] enum that the seam defines.
pub trait Availability {
    /// Whether this build and machine can use the provider (`Err` says why not).
    fn available(self) -> Result<(), String>;

    /// Whether `auto` uses the provider here: available, and not a device `auto` passes over (a
    /// software adapter that was not asked for by name).
    fn auto_available(self) -> Result<(), String>;
}

impl Availability for Provider {
    fn available(self) -> Result<(), String> {
        match self {
            Provider::Cpu => Ok(()),
            p => backend(p)
                .ok_or_else(|| format!("this build has no {} support", p.name()))?
                .available(),
        }
    }

    fn auto_available(self) -> Result<(), String> {
        match backend(self) {
            Some(b) => b.auto_available(),
            None => self.available(),
        }
    }
}

/// The backend of an accelerator, if this build has it.
pub fn backend(p: Provider) -> Option<&'static dyn Backend> {
    match p {
        Provider::Cpu => None,
        #[cfg(feature = "cuda")]
        Provider::Cuda => Some(&crate::cuda::provider::CudaBackend),
        #[cfg(not(feature = "cuda"))]
        Provider::Cuda => None,
        #[cfg(feature = "wgpu")]
        Provider::Wgpu => Some(&crate::wgpu::provider::WgpuBackend),
        #[cfg(not(feature = "wgpu"))]
        Provider::Wgpu => None,
        Provider::Sim => Some(&crate::sim::SimBackend),
    }
}

/// Parses a provider list as `--provider` takes it: `cpu`, `cuda`, `auto` (every available
/// accelerator in priority order, then the CPU, with a size floor), or a comma-separated list in
/// priority order. Returns the list and the device size floor.
pub fn parse_providers(s: &str) -> Result<(Vec<Provider>, usize), String> {
    if s == "auto" {
        let mut v: Vec<Provider> = Provider::ACCELERATORS
            .into_iter()
            .filter(|p| p.auto_available().is_ok())
            .collect();
        v.push(Provider::Cpu);
        return Ok((v, AUTO_MIN_DEVICE_ELEMENTS));
    }
    let mut v = Vec::new();
    for part in s.split(',') {
        v.push(match part.trim() {
            "cpu" => Provider::Cpu,
            "cuda" => Provider::Cuda,
            "sim" => Provider::Sim,
            "wgpu" => Provider::Wgpu,
            other => {
                return Err(format!(
                    "unknown provider '{other}' (expected auto, cpu, cuda, wgpu, sim or a comma list)"
                ));
            }
        });
    }
    Ok((v, 0))
}
