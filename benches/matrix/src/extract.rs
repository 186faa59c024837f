//! Thresholds from a matrix: for each accelerator, op family, shape class and dtype, where the
//! accelerator starts beating the CPU, with the inputs on the host and resident
//! (`quorum::session::thresholds`, which `auto` reads).
//!
//! At each measured size the accelerator's eager point is compared with the CPU's point of the
//! same case. The comparison is *decided* only when the two p10–p90 ranges do not overlap; a
//! difference inside the spread decides nothing and never becomes a threshold. The threshold is
//! the smallest decided accelerator win with no decided CPU win at a larger size, so a noisy or
//! non-monotone region keeps the CPU until the accelerator wins for good.
use std::collections::BTreeMap;

use quorum::session::thresholds::{Adapter, Crossover, Entry, Status, ThresholdTable};

use crate::matrix::{Matrix, Point};
use crate::measure::{GraphMode, Residency};

/// One size's comparison.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Comparison {
    pub work: u64,
    /// CPU median over accelerator median (above 1: the accelerator is faster).
    pub speedup: f64,
    /// `Some(true)`: the accelerator won, decided; `Some(false)`: the CPU won, decided;
    /// `None`: inside the noise.
    pub device_wins: Option<bool>,
}

/// The comparisons of one accelerator against the CPU for one family, class, dtype and residency,
/// by size (points of the same size are all kept).
pub fn comparisons(m: &Matrix, accel: &str, key: &Key, residency: Residency) -> Vec<Comparison> {
    let mut out = Vec::new();
    for a in m.points.iter().filter(|p| {
        p.provider == accel
            && p.residency == residency
            && p.graph == GraphMode::Eager
            && key.matches(p)
    }) {
        let Some(cpu) = m.points.iter().find(|p| {
            p.provider == "cpu" && p.case == a.case && p.dtype == a.dtype && p.source == a.source
        }) else {
            continue;
        };
        let (Some(sa), Some(sc)) = (&a.stats, &cpu.stats) else {
            continue;
        };
        out.push(Comparison {
            work: a.work,
            speedup: sc.median_ms / sa.median_ms.max(1e-9),
            device_wins: sa.separated_from(sc).then_some(sa.median_ms < sc.median_ms),
        });
    }
    out.sort_by(|a, b| a.work.cmp(&b.work).then(a.speedup.total_cmp(&b.speedup)));
    out
}

/// The crossover in a list of comparisons sorted by size.
pub fn crossover(c: &[Comparison]) -> Crossover {
    let decided: Vec<&Comparison> = c.iter().filter(|c| c.device_wins.is_some()).collect();
    let last_cpu = decided.iter().rposition(|c| c.device_wins == Some(false));
    let largest_measured = c.last().map(|c| c.work);
    let (status, threshold, cpu_wins_up_to) = match (decided.is_empty(), last_cpu) {
        (true, _) => (Status::Undecided, None, None),
        (false, None) => (Status::DeviceAlways, Some(decided[0].work), None),
        (false, Some(i)) if i + 1 == decided.len() => {
            (Status::CpuAlways, None, Some(decided[i].work))
        }
        (false, Some(i)) => (
            Status::Crossover,
            Some(decided[i + 1].work),
            Some(decided[i].work),
        ),
    };
    Crossover {
        status,
        threshold,
        cpu_wins_up_to,
        largest_measured,
        points: c.len(),
        decided: decided.len(),
    }
}

/// A family, shape class and dtype.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    pub family: String,
    pub class: String,
    pub dtype: String,
}

impl Key {
    fn matches(&self, p: &Point) -> bool {
        p.family == self.family && p.class == self.class && p.dtype == self.dtype
    }
}

/// The threshold table of each accelerator measured in `m` (accelerators with no timed point are
/// left out). `matrix_path`: where the matrix is kept, recorded in the table.
pub fn tables(m: &Matrix, matrix_path: &str) -> Vec<ThresholdTable> {
    let mut out = Vec::new();
    for info in m.providers.iter().filter(|p| p.provider != "cpu") {
        let (Some(name), None) = (&info.device, &info.unavailable) else {
            continue;
        };
        let mut keys: BTreeMap<Key, String> = BTreeMap::new();
        for p in m.points.iter().filter(|p| p.provider == info.provider) {
            keys.insert(
                Key {
                    family: p.family.clone(),
                    class: p.class.clone(),
                    dtype: p.dtype.clone(),
                },
                p.unit.clone(),
            );
        }
        if keys.is_empty() {
            continue;
        }
        let entries = keys
            .into_iter()
            .map(|(k, unit)| Entry {
                host: crossover(&comparisons(m, &info.provider, &k, Residency::Host)),
                resident: crossover(&comparisons(m, &info.provider, &k, Residency::Resident)),
                family: k.family,
                class: k.class,
                dtype: k.dtype,
                unit,
            })
            .collect();
        out.push(ThresholdTable {
            adapter: Adapter {
                id: info
                    .adapter_id
                    .clone()
                    .unwrap_or_else(|| Adapter::id_for(&info.provider, name)),
                provider: info.provider.clone(),
                name: name.clone(),
                driver: info.driver.clone(),
            },
            cpu: m.machine.cpu.clone(),
            threads: m.machine.threads,
            matrix: matrix_path.to_string(),
            commit: m.commit.clone(),
            date: m.date.clone(),
            entries,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(work: u64, device_wins: Option<bool>) -> Comparison {
        Comparison {
            work,
            speedup: 1.0,
            device_wins,
        }
    }

    #[test]
    fn the_threshold_is_the_first_win_with_no_cpu_win_above_it() {
        let x = crossover(&[
            c(10, Some(false)),
            c(100, Some(true)),
            c(1000, Some(false)),
            c(10_000, None),
            c(100_000, Some(true)),
            c(1_000_000, Some(true)),
        ]);
        assert_eq!(x.status, Status::Crossover);
        assert_eq!((x.threshold, x.cpu_wins_up_to), (Some(100_000), Some(1000)));
        assert_eq!((x.points, x.decided), (6, 5));
        assert_eq!(x.largest_measured, Some(1_000_000));
    }

    /// A matrix of one CPU and one accelerator point per size, each with the given samples.
    fn matrix(rows: &[(u64, &[f64], &[f64])]) -> Matrix {
        use crate::matrix::ProviderInfo;
        use crate::measure::Stats;
        let point = |provider: &str, work: u64, samples: &[f64]| Point {
            family: "elementwise".into(),
            class: "same".into(),
            op: "Add".into(),
            case: format!("Add [{work}]"),
            dtype: "float32".into(),
            source: "sweep".into(),
            work,
            unit: "elements".into(),
            provider: provider.into(),
            residency: Residency::Host,
            graph: GraphMode::Eager,
            stats: Some(Stats::from_samples(samples.to_vec())),
            note: None,
        };
        let info = |provider: &str, device: Option<&str>| ProviderInfo {
            provider: provider.into(),
            device: device.map(str::to_string),
            driver: Some("1".into()),
            adapter_id: device.map(|d| Adapter::id_for(provider, d)),
            unavailable: None,
        };
        Matrix {
            schema: 1,
            adapter_id: "cuda-test".into(),
            quick: true,
            date: "2026-12-01".into(),
            commit: "c".into(),
            machine: crate::machine::Machine {
                cpu: "cpu".into(),
                cores: 2,
                threads: 2,
                memory_gib: 1.0,
                os: "os".into(),
            },
            providers: vec![info("cpu", None), info("cuda", Some("Test GPU"))],
            points: rows
                .iter()
                .flat_map(|(w, cpu, acc)| [point("cpu", *w, cpu), point("cuda", *w, acc)])
                .collect(),
        }
    }

    #[test]
    fn a_difference_inside_the_spread_is_undecided_in_a_matrix() {
        // At 100 the accelerator's median is faster (1.0 vs 1.2 ms) but its spread reaches
        // above the CPU's: undecided. At 1000 it wins outside the noise.
        let m = matrix(&[
            (10, &[0.10, 0.10, 0.11], &[1.0, 1.0, 1.01]),
            (100, &[1.15, 1.2, 1.25], &[0.5, 1.0, 1.3]),
            (1000, &[10.0, 10.1, 10.2], &[1.0, 1.01, 1.02]),
        ]);
        let tables = tables(&m, "matrix.json");
        assert_eq!(tables.len(), 1);
        let t = &tables[0];
        assert_eq!(t.adapter.id, "cuda-test-gpu");
        let e = &t.entries[0];
        assert_eq!(
            (e.host.status, e.host.threshold),
            (Status::Crossover, Some(1000))
        );
        assert_eq!((e.host.points, e.host.decided), (3, 2));
        // The broken variant, medians alone, would have sent size 100 to the device.
        let by_median = comparisons(
            &m,
            "cuda",
            &Key {
                family: "elementwise".into(),
                class: "same".into(),
                dtype: "float32".into(),
            },
            Residency::Host,
        );
        assert!(by_median[1].speedup > 1.0 && by_median[1].device_wins.is_none());
        // Nothing was measured resident: undecided, no threshold.
        assert_eq!(e.resident.status, Status::Undecided);
    }

    #[test]
    fn noise_never_becomes_a_threshold() {
        // Every point inside the spread: undecided, whatever the medians said.
        let x = crossover(&[c(10, None), c(100, None)]);
        assert_eq!((x.status, x.threshold), (Status::Undecided, None));
        // An undecided point between two decided ones moves nothing.
        let x = crossover(&[c(10, Some(false)), c(100, None), c(1000, Some(true))]);
        assert_eq!(x.threshold, Some(1000));
        // The CPU winning at the top: no crossover in range.
        let x = crossover(&[c(10, Some(true)), c(100, Some(false))]);
        assert_eq!((x.status, x.threshold), (Status::CpuAlways, None));
        let x = crossover(&[c(10, None), c(100, Some(true))]);
        assert_eq!((x.status, x.threshold), (Status::DeviceAlways, Some(100)));
    }
}
