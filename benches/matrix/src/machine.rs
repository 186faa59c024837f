//! The machine a measurement ran on, the commit it measured and the date: every number in a report
//! carries them.
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Machine {
    /// The CPU model (`/proc/cpuinfo`'s "model name").
    pub cpu: String,
    /// Logical CPUs the OS shows, and the threads Quorum's CPU kernels use.
    pub cores: usize,
    pub threads: usize,
    pub memory_gib: f64,
    /// `PRETTY_NAME` of `/etc/os-release`, and the kernel release.
    pub os: String,
}

fn first_value(text: &str, key: &str) -> Option<String> {
    text.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_once([':', '=']))
        .map(|(_, v)| v.trim().trim_matches('"').to_string())
}

impl Machine {
    pub fn here() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let os = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mem_kib: f64 = first_value(&meminfo, "MemTotal")
            .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
            .unwrap_or(0.0);
        Machine {
            cpu: first_value(&cpuinfo, "model name").unwrap_or_else(|| "unknown CPU".into()),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            threads: rayon::current_num_threads(),
            memory_gib: (mem_kib / (1 << 20) as f64 * 10.0).round() / 10.0,
            os: format!(
                "{} (kernel {})",
                first_value(&os, "PRETTY_NAME").unwrap_or_else(|| "unknown OS".into()),
                kernel.trim()
            ),
        }
    }
}

/// The commit measured: `QUORUM_COMMIT` (the GPU bundle records it at build time, since the GPU
/// machine's copy of the tree has no git), else `git rev-parse HEAD` with `-dirty` when the tree
/// has changes, else `unknown`.
pub fn commit() -> String {
    if let Ok(c) = std::env::var("QUORUM_COMMIT")
        && !c.trim().is_empty()
    {
        return c.trim().to_string();
    }
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(c) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty { format!("{c}-dirty") } else { c }
        }
        None => "unknown".into(),
    }
}

/// Today's date (UTC) as `YYYY-MM-DD`.
pub fn today() -> String {
    let days = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400) as i64;
    civil(days)
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
pub fn civil(days: i64) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_from_day_counts() {
        assert_eq!(super::civil(0), "1970-01-01");
        assert_eq!(super::civil(19_782), "2024-02-29");
        assert_eq!(super::civil(20_788), "2026-12-01");
    }

    #[test]
    fn values_from_proc_style_text() {
        let t = "processor\t: 0\nmodel name\t: Some CPU @ 2.0GHz\n";
        assert_eq!(
            super::first_value(t, "model name").as_deref(),
            Some("Some CPU @ 2.0GHz")
        );
        assert_eq!(
            super::first_value("PRETTY_NAME=\"Debian 12\"", "PRETTY_NAME").as_deref(),
            Some("Debian 12")
        );
    }
}
