//! Results of `cargo xtask bench-cpu`: per-model latency statistics, the ratio Quorum / onnxruntime
//! and its geometric mean, output differences, and the report (Markdown and JSON).
use std::collections::BTreeMap;
use std::fmt::Write;

use super::BenchModel;
use super::compare::OutputDiff;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub enum Side {
    Quorum,
    Ort,
}

/// One runtime's timed runs on one model, or why it could not run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SideResult {
    pub times_ms: Vec<f64>,
    pub error: Option<String>,
}

impl SideResult {
    /// (median, p10, p90) of the timed runs, if any and no error.
    pub fn stats(&self) -> Option<(f64, f64, f64)> {
        if self.error.is_some() || self.times_ms.is_empty() {
            return None;
        }
        let mut t = self.times_ms.clone();
        t.sort_by(f64::total_cmp);
        Some((
            percentile(&t, 50.0),
            percentile(&t, 10.0),
            percentile(&t, 90.0),
        ))
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ModelResult {
    pub name: String,
    pub group: String,
    pub about: String,
    /// What a reader of the output comparison should know (real models: their meta.json's note).
    pub note: Option<String>,
    pub path: String,
    pub quorum: SideResult,
    pub ort: SideResult,
    pub output_names: Vec<String>,
    pub comparison: Vec<OutputDiff>,
}

impl ModelResult {
    pub fn new(m: &BenchModel) -> ModelResult {
        ModelResult {
            name: m.name.clone(),
            group: m.group.to_string(),
            about: m.about.clone(),
            note: m.note.clone(),
            path: m.path.display().to_string(),
            quorum: SideResult::default(),
            ort: SideResult::default(),
            output_names: Vec::new(),
            comparison: Vec::new(),
        }
    }

    pub fn side(&self, s: Side) -> &SideResult {
        match s {
            Side::Quorum => &self.quorum,
            Side::Ort => &self.ort,
        }
    }

    pub fn side_mut(&mut self, s: Side) -> &mut SideResult {
        match s {
            Side::Quorum => &mut self.quorum,
            Side::Ort => &mut self.ort,
        }
    }

    /// Quorum's median over onnxruntime's.
    pub fn ratio(&self) -> Option<f64> {
        Some(self.quorum.stats()?.0 / self.ort.stats()?.0)
    }

    /// Quorum's p10 over onnxruntime's: less moved than the medians' ratio by load from outside
    /// that falls on some rounds of one runtime and not the other's (on a shared machine, a burst
    /// lasting a round).
    pub fn p10_ratio(&self) -> Option<f64> {
        Some(self.quorum.stats()?.1 / self.ort.stats()?.1)
    }

    /// What went wrong: a runtime that failed, an output that differs or could not be compared.
    pub fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(e) = &self.quorum.error {
            out.push(format!("{}: Quorum: {e}", self.name));
        }
        if let Some(e) = &self.ort.error {
            out.push(format!("{}: onnxruntime: {e}", self.name));
        }
        for d in self.comparison.iter().filter(|d| d.suspect()) {
            out.push(format!(
                "{}: output {}: {}",
                self.name,
                d.name,
                d.note.clone().unwrap_or_else(|| format!(
                    "max abs difference {:.3e} on a scale of {:.3e}",
                    d.max_abs, d.scale
                ))
            ));
        }
        if let (Some(note), false) = (&self.note, out.is_empty()) {
            out.push(format!("{}: note: {note}", self.name));
        }
        out
    }

    pub fn summary(&self) -> String {
        let side = |s: &SideResult| match (s.stats(), &s.error) {
            (Some((m, ..)), _) => format!("{m:.2} ms ({} runs)", s.times_ms.len()),
            (None, Some(e)) => format!("failed: {e}"),
            (None, None) => "no runs".into(),
        };
        format!(
            "quorum {}, onnxruntime {}{}",
            side(&self.quorum),
            side(&self.ort),
            self.ratio()
                .map(|r| format!(", ratio {r:.2}"))
                .unwrap_or_default()
        )
    }
}

/// Linear interpolation between the closest ranks of `sorted`.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let mut s = sorted.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = p / 100.0 * (s.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    s[lo] + (s[hi] - s[lo]) * (rank - lo as f64)
}

/// The geometric mean of the ratios that exist, with how many there were.
pub fn geomean(ratios: &[f64]) -> Option<f64> {
    if ratios.is_empty() {
        return None;
    }
    Some((ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp())
}

/// Where and how the run was made.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Meta {
    pub commit: String,
    pub quorum_binary: String,
    pub machine: String,
    pub threads: usize,
    pub rounds: usize,
    pub round_ms: u64,
    pub python: String,
    pub packages: BTreeMap<String, String>,
    pub load: String,
}

fn ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The Markdown report and the JSON beside it.
pub fn render(meta: &Meta, results: &[ModelResult]) -> (String, serde_json::Value) {
    let ratios: Vec<f64> = results.iter().filter_map(ModelResult::ratio).collect();
    let gm = geomean(&ratios);
    let gm_p10 = geomean(
        &results
            .iter()
            .filter_map(ModelResult::p10_ratio)
            .collect::<Vec<_>>(),
    );
    let over: Vec<String> = results
        .iter()
        .filter(|r| r.ratio().is_some_and(|x| x > 1.5))
        .map(|r| format!("{} ({:.2}×)", r.name, r.ratio().unwrap_or(0.0)))
        .collect();
    let pkg = |n: &str| meta.packages.get(n).cloned().unwrap_or("?".into());
    let mut md = String::new();
    let w = &mut md;
    let _ = writeln!(w, "# Quorum vs onnxruntime on the CPU\n");
    let _ = writeln!(
        w,
        "Written by `cargo xtask bench-cpu` (`xtask/src/bench_cpu.rs`); every number below is from one run of it.\n"
    );
    let _ = writeln!(w, "- commit: `{}`", meta.commit);
    let _ = writeln!(
        w,
        "- Quorum: `{}`, `quorum bench --json --provider cpu`, `RAYON_NUM_THREADS={}` (its rayon pool, which the GEMMs use too; the `threads` its JSON reports is checked)",
        meta.quorum_binary, meta.threads
    );
    let _ = writeln!(
        w,
        "- onnxruntime {} (Python wheel, CPUExecutionProvider): `intra_op_num_threads={}`, `inter_op_num_threads=1`, sequential execution, default graph optimisation (ORT_ENABLE_ALL); `benches/models/ort_run.py`",
        pkg("onnxruntime"),
        meta.threads
    );
    let _ = writeln!(w, "- machine: {}; load average {}", meta.machine, meta.load);
    let _ = writeln!(
        w,
        "- method: both runtimes get the same inputs (`.npy`); per model one untimed calibration batch each, then {} rounds, each running Quorum and onnxruntime in turn (the order swapping every round), each for about {} ms after one warm-up run in its own process; median, p10 and p90 over all timed runs of all rounds (`n`)",
        meta.rounds, meta.round_ms
    );
    let _ = writeln!(
        w,
        "- real models exported with torch {} / torchvision {} (`benches/models/export.py`, random weights), Python {}",
        pkg("torch"),
        pkg("torchvision"),
        meta.python
    );
    let _ = writeln!(w, "\n## Latency (ms, {} threads each)\n", meta.threads);
    let _ = writeln!(
        w,
        "| model | group | Quorum median | p10 | p90 | n | onnxruntime median | p10 | p90 | n | Quorum / onnxruntime | p10 / p10 |"
    );
    let _ = writeln!(
        w,
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in results {
        let cells = |s: &SideResult| match s.stats() {
            Some((m, p10, p90)) => format!(
                "{} | {} | {} | {}",
                ms(m),
                ms(p10),
                ms(p90),
                s.times_ms.len()
            ),
            None => "failed | | | ".into(),
        };
        let ratio = |x: Option<f64>| x.map(|x| format!("{x:.2}")).unwrap_or("—".into());
        let _ = writeln!(
            w,
            "| {} | {} | {} | {} | {} | {} |",
            r.name,
            r.group,
            cells(&r.quorum),
            cells(&r.ort),
            ratio(r.ratio()),
            ratio(r.p10_ratio())
        );
    }
    let _ = writeln!(
        w,
        "\nGeometric mean of Quorum / onnxruntime over the {} models both ran: **{}** (goal ≤ 1.0). Models over 1.5×: {}.",
        ratios.len(),
        gm.map(|g| format!("{g:.2}")).unwrap_or("—".into()),
        if over.is_empty() {
            "none".into()
        } else {
            over.join(", ")
        }
    );
    let _ = writeln!(
        w,
        "\nThe same over each model's p10 instead of its median: {}. Load from outside this process that falls on some rounds of one runtime (this machine is shared) moves the medians more than the p10s.",
        gm_p10.map(|g| format!("{g:.2}")).unwrap_or("—".into())
    );
    let _ = writeln!(
        w,
        "\n## Outputs: Quorum against onnxruntime (same inputs, one run)\n"
    );
    let _ = writeln!(
        w,
        "Relative difference: max |q − o| / max(|o|, 1e-6) over elements; scale: max |o|. ⚠ marks an output off by more than 1e-3 of its scale, or not compared.\n"
    );
    let _ = writeln!(
        w,
        "| model | output | Quorum | max abs | max rel | scale | |"
    );
    let _ = writeln!(w, "|---|---|---|---:|---:|---:|---|");
    for r in results {
        for d in &r.comparison {
            let _ = writeln!(
                w,
                "| {} | {} | {} | {:.2e} | {:.2e} | {:.3} | {}{} |",
                r.name,
                d.name,
                d.quorum,
                d.max_abs,
                d.max_rel,
                d.scale,
                if d.suspect() { "⚠ " } else { "" },
                [d.note.clone(), d.remark.clone()]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
                    .join("; ")
            );
        }
        if r.comparison.is_empty() {
            let _ = writeln!(
                w,
                "| {} | | not compared: a runtime failed | | | | ⚠ |",
                r.name
            );
        }
    }
    let failures: Vec<String> = results.iter().flat_map(ModelResult::failures).collect();
    let _ = writeln!(w, "\n## Failures\n");
    if failures.is_empty() {
        let _ = writeln!(
            w,
            "None: every model ran on both runtimes and every output agreed."
        );
    }
    for f in &failures {
        let _ = writeln!(w, "- {f}");
    }
    let _ = writeln!(w, "\n## Models\n");
    let _ = writeln!(w, "| model | group | what |");
    let _ = writeln!(w, "|---|---|---|");
    for r in results {
        let note = r
            .note
            .as_deref()
            .map(|n| format!(" Note: {n}."))
            .unwrap_or_default();
        let _ = writeln!(w, "| {} | {} | {}{note} |", r.name, r.group, r.about);
    }
    let json = serde_json::json!({
        "meta": meta,
        "geomean_ratio": gm,
        "geomean_p10_ratio": gm_p10,
        "models_over_1_5x": over,
        "failures": failures,
        "models": results.iter().map(|r| {
            let stats = |s: &SideResult| s.stats().map(|(m, p10, p90)| serde_json::json!({
                "median_ms": m, "p10_ms": p10, "p90_ms": p90, "n": s.times_ms.len()
            }));
            serde_json::json!({
                "name": r.name,
                "group": r.group,
                "about": r.about,
                "note": r.note,
                "path": r.path,
                "quorum": stats(&r.quorum),
                "onnxruntime": stats(&r.ort),
                "ratio": r.ratio(),
                "p10_ratio": r.p10_ratio(),
                "quorum_error": r.quorum.error,
                "onnxruntime_error": r.ort.error,
                "quorum_times_ms": r.quorum.times_ms,
                "onnxruntime_times_ms": r.ort.times_ms,
                "outputs": r.comparison,
            })
        }).collect::<Vec<_>>(),
    });
    (md, json)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model with no inputs, for results built by hand.
    fn model() -> BenchModel {
        BenchModel {
            name: "m".into(),
            group: "real",
            path: "m.onnx".into(),
            inputs: vec![],
            about: String::new(),
            note: None,
        }
    }

    #[test]
    fn percentiles_interpolate_and_geomean_is_of_ratios() {
        let t = [4.0, 1.0, 3.0, 2.0, 5.0];
        assert_eq!(percentile(&t, 50.0), 3.0);
        assert_eq!(percentile(&t, 10.0), 1.4);
        assert_eq!(percentile(&t, 90.0), 4.6);
        assert!((geomean(&[2.0, 0.5]).unwrap() - 1.0).abs() < 1e-12);
        assert!((geomean(&[4.0, 1.0]).unwrap() - 2.0).abs() < 1e-12);
        assert_eq!(geomean(&[]), None);
    }

    #[test]
    fn a_failed_side_has_no_ratio_and_is_a_failure() {
        let mut r = ModelResult::new(&model());
        r.quorum.times_ms = vec![2.0, 4.0, 6.0];
        r.ort.times_ms = vec![1.0, 2.0, 3.0];
        assert_eq!(r.ratio(), Some(2.0));
        assert!(r.failures().is_empty());
        r.quorum.error = Some("unsupported: node 'x'".into());
        assert_eq!(r.ratio(), None);
        assert_eq!(r.failures(), ["m: Quorum: unsupported: node 'x'"]);
    }

    /// Load that falls on more than half of one runtime's runs moves the medians' ratio (3.0
    /// here) but not the p10s' (1.0).
    #[test]
    fn a_burst_on_one_side_moves_the_median_ratio_not_the_p10_one() {
        let mut r = ModelResult::new(&model());
        r.quorum.times_ms = [vec![1.0; 5], vec![3.0; 6]].concat();
        r.ort.times_ms = vec![1.0; 11];
        assert_eq!(r.ratio(), Some(3.0));
        assert_eq!(r.p10_ratio(), Some(1.0));
    }
}
