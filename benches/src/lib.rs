//! What the criterion benches share: the providers present, and a ready session per case.
//!
//! Bench names are `{provider}_{op}_{dtype}` with the size as the parameter, so that criterion's
//! baselines (`cargo bench -p quorum-benches -- --save-baseline before`, then `--baseline before`)
//! compare like with like. An accelerator that is not present here is skipped, not failed.
#![forbid(unsafe_code)]
use quorum::{Availability, Provider, Session, SessionOptions, Value};
use quorum_matrix::cases::Case;
use quorum_matrix::measure::{Residency, model};

/// The CPU and every accelerator usable on this machine.
pub fn providers() -> Vec<Provider> {
    std::iter::once(Provider::Cpu)
        .chain(
            Provider::ACCELERATORS
                .into_iter()
                .filter(|p| p.available().is_ok()),
        )
        .collect()
}

/// The bench name of a case on a provider: `{provider}_{op}_{dtype}`.
pub fn name(provider: Provider, case: &Case) -> String {
    format!("{}_{}_{}", provider.name(), case.op, case.dtype().name())
}

/// A case's size label: its input shapes.
pub fn label(case: &Case) -> String {
    case.inputs
        .iter()
        .map(|(s, _)| format!("{s:?}"))
        .collect::<Vec<_>>()
        .join("x")
        .replace(' ', "")
}

/// A one-node session of `case` on `provider` alone (its claimed node there), with the inputs on
/// the host, warmed up; `None` when the provider declines the node.
pub fn session(case: &Case, provider: Provider) -> Option<(Session, Vec<(String, Value)>)> {
    let (m, feeds) = model(case, Residency::Host, 7).ok()?;
    let options = SessionOptions {
        providers: vec![provider, Provider::Cpu],
        fold_constants: false,
        ..Default::default()
    };
    let s = Session::from_model(m, options).ok()?;
    if provider != Provider::Cpu && s.placement().iter().all(|p| p.provider == Provider::Cpu) {
        return None;
    }
    for _ in 0..3 {
        s.run(feeds.clone()).ok()?;
    }
    Some((s, feeds))
}

/// Runs `iters` times with the inputs cloned before the clock starts; each run returns its outputs
/// on the host, so a device's work is done when it returns (the sync `iter_custom` needs).
pub fn timed_runs(s: &Session, feeds: &[(String, Value)], iters: u64) -> std::time::Duration {
    let batches: Vec<Vec<(String, Value)>> = (0..iters).map(|_| feeds.to_vec()).collect();
    let start = std::time::Instant::now();
    for b in batches {
        s.run(b).expect("a warmed-up session runs");
    }
    start.elapsed()
}
