//! The benchmark matrix: every case × dtype × provider × residency × graph mode, timed, with the
//! machine, driver and commit it ran on; written to `reports/bench/<adapter-id>/matrix.json`.
//!
//! The CPU is timed once per case (its inputs are on the host either way, and it captures no
//! graphs); each accelerator present is timed with inputs on the host and resident, eager and
//! replayed. A point that could not be timed (the accelerator declines the node, a capture is
//! refused) is kept with its reason instead of numbers.
use std::path::Path;

use quorum::session::dispatch::{measure, work_unit};
use quorum::session::thresholds::Adapter;
use quorum::{Availability, Provider};
use serde::{Deserialize, Serialize};

use crate::cases::Case;
use crate::machine::Machine;
use crate::measure::{Budget, GraphMode, Residency, Stats, time};

/// One measured (or refused) point.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Point {
    pub family: String,
    pub class: String,
    pub op: String,
    /// The case in words: op, input shapes, attributes.
    pub case: String,
    pub dtype: String,
    /// `sweep` or `light:<model>`.
    pub source: String,
    /// The node's size as `auto` measures it (`quorum::session::dispatch::measure`).
    pub work: u64,
    pub unit: String,
    pub provider: String,
    pub residency: Residency,
    pub graph: GraphMode,
    /// `None` when the point could not be timed (see `note`).
    pub stats: Option<Stats>,
    pub note: Option<String>,
}

/// A provider the matrix used, or could not.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProviderInfo {
    pub provider: String,
    /// The device in words, the driver, and the adapter's identity (accelerators only).
    pub device: Option<String>,
    pub driver: Option<String>,
    pub adapter_id: Option<String>,
    /// Why it was not measured, when it was not.
    pub unavailable: Option<String>,
}

/// The whole matrix.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Matrix {
    pub schema: u32,
    /// The folder name under `reports/bench/`: the first accelerator's adapter, or the CPU's.
    pub adapter_id: String,
    pub quick: bool,
    pub date: String,
    pub commit: String,
    pub machine: Machine,
    pub providers: Vec<ProviderInfo>,
    pub points: Vec<Point>,
}

/// The accelerators this build knows, with their device and driver where one is usable.
pub fn providers() -> Vec<ProviderInfo> {
    let mut out = vec![ProviderInfo {
        provider: "cpu".into(),
        device: None,
        driver: None,
        adapter_id: None,
        unavailable: None,
    }];
    for p in Provider::ACCELERATORS {
        let mut info = ProviderInfo {
            provider: p.name().into(),
            device: None,
            driver: None,
            adapter_id: None,
            unavailable: None,
        };
        match p.available().and_then(|_| {
            quorum::providers::backend(p)
                .ok_or_else(|| "not in this build".to_string())?
                .open(&Default::default())
        }) {
            Ok(session) => {
                let name = session.device_name();
                info.adapter_id = Some(Adapter::id_for(p.name(), &name));
                info.driver = session.driver_version();
                info.device = Some(name);
            }
            Err(why) => info.unavailable = Some(why),
        }
        out.push(info);
    }
    out
}

/// Runs every case on every usable provider; `progress` hears each point as it is done.
/// Past `deadline`, the remaining points are kept unmeasured with a note saying so (a device call
/// has a time limit; the sweep comes first, so a cut loses light-model nodes before sizes).
pub fn run(
    cases: &[Case],
    providers: &[ProviderInfo],
    budget: &Budget,
    deadline: Option<std::time::Instant>,
    mut progress: impl FnMut(&Point),
) -> Vec<Point> {
    let usable: Vec<Provider> = providers
        .iter()
        .filter(|p| p.unavailable.is_none())
        .filter_map(|p| provider_named(&p.provider))
        .collect();
    let mut points = Vec::new();
    for case in cases {
        let shapes: Vec<Option<&[usize]>> = case
            .inputs
            .iter()
            .map(|(s, _)| Some(s.as_slice()))
            .collect();
        let size = measure(&case.node(), &shapes, Some(case.dtype()), 0);
        for &p in &usable {
            let modes: &[(Residency, GraphMode)] = if p == Provider::Cpu {
                &[(Residency::Host, GraphMode::Eager)]
            } else {
                &[
                    (Residency::Host, GraphMode::Eager),
                    (Residency::Resident, GraphMode::Eager),
                    (Residency::Host, GraphMode::Replay),
                    (Residency::Resident, GraphMode::Replay),
                ]
            };
            for &(residency, graph) in modes {
                let late = deadline.is_some_and(|d| std::time::Instant::now() > d);
                let (stats, note) = match late {
                    true => (
                        None,
                        Some("not measured: the run's time limit was reached".into()),
                    ),
                    false => match time(case, p, residency, graph, budget) {
                        Ok(t) => (Some(t.stats), t.note),
                        Err(why) => (None, Some(why)),
                    },
                };
                let point = Point {
                    family: size.family.into(),
                    class: size.class.into(),
                    op: case.op.clone(),
                    case: case.describe(),
                    dtype: case.dtype().name().into(),
                    source: case.source.clone(),
                    work: size.work,
                    unit: work_unit(size.family).into(),
                    provider: p.name().into(),
                    residency,
                    graph,
                    stats,
                    note,
                };
                progress(&point);
                points.push(point);
            }
        }
    }
    points
}

/// The provider of a name the matrix wrote.
pub fn provider_named(name: &str) -> Option<Provider> {
    std::iter::once(Provider::Cpu)
        .chain(Provider::ACCELERATORS)
        .find(|p| p.name() == name)
}

/// The folder name of a matrix: the first usable accelerator's adapter, else the CPU's.
pub fn adapter_id(providers: &[ProviderInfo], machine: &Machine) -> String {
    providers
        .iter()
        .find_map(|p| p.adapter_id.clone().filter(|_| p.unavailable.is_none()))
        .unwrap_or_else(|| Adapter::id_for("cpu", &machine.cpu))
}

impl Matrix {
    pub fn read(path: &Path) -> anyhow::Result<Matrix> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }

    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, serde_json::to_string_pretty(self)? + "\n")?;
        Ok(())
    }
}
