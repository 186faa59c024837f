//! One zoo entry's result on one engine, how it is judged, and the report over all of them
//! (Markdown and JSON).
use std::collections::BTreeMap;
use std::fmt::Write;

use super::CatalogueEntry;
use crate::bench_cpu::ModelResult;
use crate::bench_cpu::report::geomean;

/// What became of an entry, worst first.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Status {
    /// Quorum could not load it (exit code 3: malformed, invalid, or an unsupported op).
    LoadFailed,
    /// Quorum loaded it and failed while running it.
    RunFailed,
    /// Quorum's outputs differ from onnxruntime's beyond the tolerance.
    Mismatch,
    /// Quorum ran it; onnxruntime could not, and the oracles could not settle every node.
    OrtFailed,
    /// Quorum's outputs differ from onnxruntime's beyond the tolerance (or onnxruntime could not
    /// run it), and both oracles agree with every node Quorum computed: Quorum's answer is the
    /// model's to the oracles' bounds, and onnxruntime's arithmetic went elsewhere.
    OraclesAgree,
    /// The exporter failed: the entry never became an ONNX model (not Quorum's failure).
    ExportFailed,
    /// Over this run's size limit.
    LeftOut,
    /// Quorum's outputs match onnxruntime's.
    Match,
}

impl Status {
    /// Quorum's answer stands: it matches onnxruntime, or the oracles judged it.
    pub fn matches(self) -> bool {
        matches!(self, Status::Match | Status::OraclesAgree)
    }

    pub fn runs(self) -> bool {
        matches!(
            self,
            Status::Mismatch | Status::OrtFailed | Status::OraclesAgree | Status::Match
        )
    }

    pub fn loads(self) -> bool {
        self.runs() || self == Status::RunFailed
    }

    /// Whether the entry counts in the coverage score (it became a model and was run).
    pub fn counted(self) -> bool {
        !matches!(self, Status::ExportFailed | Status::LeftOut)
    }

    /// Not a failure of Quorum's.
    pub fn is_pass_or_not_ours(self) -> bool {
        matches!(
            self,
            Status::Match
                | Status::OraclesAgree
                | Status::ExportFailed
                | Status::LeftOut
                | Status::OrtFailed
        )
    }

    fn word(self) -> &'static str {
        match self {
            Status::LoadFailed => "load failed",
            Status::RunFailed => "run failed",
            Status::Mismatch => "mismatch",
            Status::OrtFailed => "onnxruntime failed",
            Status::OraclesAgree => "oracles agree",
            Status::ExportFailed => "export failed",
            Status::LeftOut => "left out",
            Status::Match => "match",
        }
    }
}

/// One output of Quorum against onnxruntime's.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct OutputCheck {
    pub name: String,
    /// `dtype[shape]` as Quorum returned it.
    pub quorum: String,
    pub max_abs: Option<f64>,
    /// max |onnxruntime's output|.
    pub scale: Option<f64>,
    pub within: bool,
    pub note: Option<String>,
    pub remark: Option<String>,
}

/// Where one run's nodes ran (engines other than the CPU).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Placement {
    pub nodes: f64,
    pub device_nodes: f64,
    /// Ops of the nodes that ran on the CPU.
    pub cpu_ops: Vec<String>,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct EntryResult {
    pub entry: CatalogueEntry,
    pub engine: String,
    pub export_stamp: String,
    /// FNV-1a of the `quorum` binary that ran it.
    pub binary: String,
    pub status: Status,
    pub reason: Option<String>,
    pub exporter_detail: Option<String>,
    pub nodes: Option<u64>,
    pub params: Option<u64>,
    /// The exported model's size on disk.
    pub bytes: Option<u64>,
    pub note: Option<String>,
    pub tolerance: String,
    pub outputs: Vec<OutputCheck>,
    pub quorum_ms: Option<f64>,
    pub ort_ms: Option<f64>,
    pub quorum_runs: usize,
    pub ort_runs: usize,
    pub placement: Option<Placement>,
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

impl EntryResult {
    pub fn new(entry: CatalogueEntry, engine: &str, stamp: &str, binary: &str) -> EntryResult {
        EntryResult {
            entry,
            engine: engine.to_string(),
            export_stamp: stamp.to_string(),
            binary: binary.to_string(),
            status: Status::ExportFailed,
            reason: None,
            exporter_detail: None,
            nodes: None,
            params: None,
            bytes: None,
            note: None,
            tolerance: String::new(),
            outputs: Vec::new(),
            quorum_ms: None,
            ort_ms: None,
            quorum_runs: 0,
            ort_runs: 0,
            placement: None,
        }
    }

    pub fn set_export(&mut self, meta: &serde_json::Value) {
        self.exporter_detail = meta["exporter_detail"].as_str().map(String::from);
        self.nodes = meta["nodes"].as_u64();
        self.params = meta["params"].as_u64();
        self.bytes = meta["bytes"].as_u64();
        if let Some(o) = meta["opset"].as_u64() {
            self.entry.opset = Some(o as u32);
        }
    }

    /// Judges one bench of the entry: Quorum's error (load or run), onnxruntime's, each output
    /// within `tol` of its scale, and the medians.
    pub fn judge(&mut self, m: &ModelResult, tol: f64) {
        self.quorum_ms = m.quorum.stats().map(|s| s.0);
        self.ort_ms = m.ort.stats().map(|s| s.0);
        self.quorum_runs = m.quorum.times_ms.len();
        self.ort_runs = m.ort.times_ms.len();
        if let Some(e) = &m.quorum.error {
            self.status = if super::exit_code(e) == Some(3) {
                Status::LoadFailed
            } else {
                Status::RunFailed
            };
            self.reason = Some(e.clone());
            return;
        }
        if let Some(e) = &m.ort.error {
            self.status = Status::OrtFailed;
            self.reason = Some(format!("onnxruntime: {e}"));
            return;
        }
        self.outputs = m
            .comparison
            .iter()
            .map(|d| OutputCheck {
                name: d.name.clone(),
                quorum: d.quorum.clone(),
                max_abs: finite(d.max_abs),
                scale: finite(d.scale),
                // `!(x > bound)` would pass a NaN difference; written so that it fails.
                within: d.note.as_deref().is_none_or(|n| n == "equal (not numeric)")
                    && d.max_abs <= tol * d.scale.max(1e-6),
                note: d.note.clone(),
                remark: d.remark.clone(),
            })
            .collect();
        let bad: Vec<String> = self
            .outputs
            .iter()
            .filter(|o| !o.within)
            .map(|o| match (&o.note, o.max_abs, o.scale) {
                (Some(n), ..) => format!("{}: {n}", o.name),
                (None, Some(d), Some(s)) => {
                    format!("{}: max difference {d:.3e} on a scale of {s:.3e}", o.name)
                }
                _ => format!(
                    "{}: differs (NaN or infinite where onnxruntime is not)",
                    o.name
                ),
            })
            .collect();
        if bad.is_empty() && !self.outputs.is_empty() {
            self.status = Status::Match;
        } else {
            self.status = Status::Mismatch;
            self.reason = Some(if bad.is_empty() {
                "no output was compared".into()
            } else {
                bad.join("; ")
            });
        }
    }

    /// The largest difference of any output as a fraction of its scale.
    pub fn worst(&self) -> Option<f64> {
        self.outputs
            .iter()
            .filter_map(|o| Some(o.max_abs? / o.scale?.max(1e-6)))
            .reduce(f64::max)
    }

    pub fn ratio(&self) -> Option<f64> {
        Some(self.quorum_ms? / self.ort_ms?)
    }

    /// Records the oracles' verdict on an entry that differs from onnxruntime or that onnxruntime
    /// could not run: `Ok` when both agreed with every node, else why not.
    pub fn oracles(&mut self, verdict: Result<(), String>) {
        match verdict {
            Ok(()) => {
                let was = self.reason.take().unwrap_or_default();
                self.reason = Some(format!(
                    "both oracles agree with every node; onnxruntime: {was}"
                ));
                self.status = Status::OraclesAgree;
            }
            Err(e) => {
                let was = self.reason.take().unwrap_or_default();
                self.reason = Some(format!("{was}; the oracles: {e}"));
            }
        }
    }

    pub fn line(&self) -> String {
        let mut s = self.status.word().to_string();
        if let Some(r) = self.ratio() {
            let _ = write!(
                s,
                ", {:.2} ms vs {:.2} ms ({r:.2}x)",
                self.quorum_ms.unwrap_or(0.0),
                self.ort_ms.unwrap_or(0.0)
            );
        }
        if let Some(reason) = &self.reason {
            let short: String = reason.chars().take(140).collect();
            let _ = write!(s, ": {short}");
        }
        s
    }
}

pub struct Meta {
    pub commit: String,
    pub binary: String,
    pub machine: String,
    pub threads: usize,
    pub rounds: usize,
    pub round_ms: u64,
    pub python: String,
    pub packages: BTreeMap<String, String>,
    pub catalogue: usize,
}

#[derive(Default)]
struct Tally {
    entries: usize,
    exported: usize,
    counted: usize,
    loads: usize,
    runs: usize,
    matches: usize,
    ratios: Vec<f64>,
}

impl Tally {
    fn add(&mut self, r: &EntryResult) {
        self.entries += 1;
        self.exported += usize::from(r.status != Status::ExportFailed);
        self.counted += usize::from(r.status.counted());
        self.loads += usize::from(r.status.loads());
        self.runs += usize::from(r.status.runs());
        self.matches += usize::from(r.status.matches());
        if r.status.matches()
            && let Some(x) = r.ratio()
        {
            self.ratios.push(x);
        }
    }

    fn share(&self) -> f64 {
        100.0 * self.matches as f64 / self.counted.max(1) as f64
    }
}

fn fmt_opt(x: Option<f64>, digits: usize) -> String {
    x.map(|v| format!("{v:.digits$}")).unwrap_or_default()
}

pub fn render(
    meta: &Meta,
    engine: &str,
    catalogue: &[CatalogueEntry],
    results: &[EntryResult],
) -> (String, serde_json::Value) {
    let mut all = Tally::default();
    let mut by: BTreeMap<(String, String), Tally> = BTreeMap::new();
    for r in results {
        all.add(r);
        by.entry((r.entry.source.clone(), r.entry.family.clone()))
            .or_default()
            .add(r);
    }
    let gm = geomean(&all.ratios);
    let pkg = |p: &str| meta.packages.get(p).cloned().unwrap_or_else(|| "?".into());
    let mut md = String::new();
    let _ = writeln!(md, "# The zoo on `{engine}`\n");
    let _ = writeln!(
        md,
        "Written by `cargo xtask zoo --engine {engine}` (`xtask/src/zoo.rs`) from every result stored \
         for these exports, the latest of each entry; the catalogue is `benches/zoo/entries.py`, \
         exported by `benches/zoo/export.py` with random seeded weights and inputs (nothing \
         downloaded).\n"
    );
    let _ = writeln!(
        md,
        "- commit: `{}`; `quorum` binary FNV-1a `{}`{}",
        meta.commit,
        meta.binary,
        other_binaries(&meta.binary, results)
    );
    let _ = writeln!(
        md,
        "- machine: {}; {} threads for each runtime",
        meta.machine, meta.threads
    );
    let _ = writeln!(
        md,
        "- exporters: torch {}, torchvision {}, timm {}, transformers {}, onnxscript {}; compared with \
         onnxruntime {} (CPU execution provider, default graph optimisation); Python {}",
        pkg("torch"),
        pkg("torchvision"),
        pkg("timm"),
        pkg("transformers"),
        pkg("onnxscript"),
        pkg("onnxruntime"),
        meta.python
    );
    let _ = writeln!(
        md,
        "- timing: {} rounds of about {} ms per runtime and entry, alternating; medians",
        meta.rounds, meta.round_ms
    );
    let _ = writeln!(
        md,
        "- tolerance: each output's largest difference from onnxruntime's within 1e-3 of the output's \
         largest magnitude (f32), 1e-2 (f16 conversions), 5e-2 (QDQ quantized); the reason for each \
         is in the JSON\n"
    );
    let _ = writeln!(md, "## Score\n");
    let _ = writeln!(
        md,
        "{} of the catalogue's {} entries have a stored result; {} became ONNX models ({} export \
         failures, the exporter's, listed below); {} were left out by a size limit.\n",
        results.len(),
        meta.catalogue,
        all.exported,
        all.entries - all.exported,
        results
            .iter()
            .filter(|r| r.status == Status::LeftOut)
            .count()
    );
    let _ = writeln!(md, "| | entries | share of those run |\n|---|---:|---:|");
    let pct = |n: usize| format!("{:.1}%", 100.0 * n as f64 / all.counted.max(1) as f64);
    let _ = writeln!(md, "| run through Quorum | {} | |", all.counted);
    let _ = writeln!(md, "| load | {} | {} |", all.loads, pct(all.loads));
    let _ = writeln!(md, "| run | {} | {} |", all.runs, pct(all.runs));
    let _ = writeln!(
        md,
        "| match onnxruntime, or the oracles | {} | **{}** |",
        all.matches,
        pct(all.matches)
    );
    let _ = writeln!(
        md,
        "\nSpeed, Quorum / onnxruntime, geometric mean over the {} matching entries timed both sides: **{}**\n",
        all.ratios.len(),
        fmt_opt(gm, 2)
    );
    let _ = writeln!(md, "## By source and family\n");
    let _ = writeln!(
        md,
        "| source | family | entries | exported | load | run | match | Quorum / onnxruntime |\n|---|---|---:|---:|---:|---:|---:|---:|"
    );
    for ((src, fam), t) in &by {
        let _ = writeln!(
            md,
            "| {src} | {fam} | {} | {} | {} | {} | {} ({:.0}%) | {} |",
            t.entries,
            t.exported,
            t.loads,
            t.runs,
            t.matches,
            t.share(),
            fmt_opt(geomean(&t.ratios), 2)
        );
    }
    let failures: Vec<&EntryResult> = results
        .iter()
        .filter(|r| r.status != Status::Match)
        .collect();
    let _ = writeln!(
        md,
        "\n\"Oracles agree\" counts as a match: Quorum's outputs differ from onnxruntime's beyond the \
         tolerance (or onnxruntime could not run the model), and a strict run on the simulated device \
         (Quorum's CPU kernels behind the device seam) had both oracles agree with every node it \
         computed, so the difference is onnxruntime's arithmetic (its fusions and approximations) \
         carried through the model; the difference from onnxruntime is still given."
    );
    let _ = writeln!(
        md,
        "\n## Every entry that is not a match, with its reason\n"
    );
    if failures.is_empty() {
        let _ = writeln!(md, "None.");
    }
    let mut sorted = failures.clone();
    sorted.sort_by(|a, b| (a.status, &a.entry.name).cmp(&(b.status, &b.entry.name)));
    for r in sorted {
        let reason: String = r
            .reason
            .as_deref()
            .unwrap_or("")
            .replace('|', "\\|")
            .chars()
            .take(400)
            .collect();
        let _ = writeln!(
            md,
            "- `{}` ({}): **{}**: {reason}",
            r.entry.name,
            r.entry.source,
            r.status.word()
        );
    }
    let _ = writeln!(md, "\n## Every entry\n");
    let _ = writeln!(
        md,
        "| entry | source | family | exporter | opset | nodes | params (M) | status | worst diff / scale | Quorum ms | onnxruntime ms | ratio |{}\n|---|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|{}",
        if engine == "cpu" { "" } else { " on device |" },
        if engine == "cpu" { "" } else { "---:|" }
    );
    for r in results {
        let dev = r
            .placement
            .as_ref()
            .map(|p| format!(" {:.0}% |", 100.0 * p.device_nodes / p.nodes.max(1.0)))
            .unwrap_or_else(|| {
                if engine == "cpu" {
                    String::new()
                } else {
                    " |".into()
                }
            });
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |{dev}",
            r.entry.name,
            r.entry.source,
            r.entry.family,
            r.entry.exporter,
            r.entry.opset.map(|o| o.to_string()).unwrap_or_default(),
            r.nodes.map(|n| n.to_string()).unwrap_or_default(),
            fmt_opt(r.params.map(|p| p as f64 / 1e6), 1),
            r.status.word(),
            r.worst().map(|w| format!("{w:.1e}")).unwrap_or_default(),
            fmt_opt(r.quorum_ms, 2),
            fmt_opt(r.ort_ms, 2),
            fmt_opt(r.ratio(), 2),
        );
    }
    let missing: Vec<&str> = catalogue
        .iter()
        .filter(|c| !results.iter().any(|r| r.entry.name == c.name))
        .map(|c| c.name.as_str())
        .collect();
    if !missing.is_empty() {
        let _ = writeln!(
            md,
            "\n## Not run yet ({})\n\n{}",
            missing.len(),
            missing.join(", ")
        );
    }
    let json = serde_json::json!({
        "engine": engine,
        "commit": meta.commit,
        "binary": meta.binary,
        "machine": meta.machine,
        "threads": meta.threads,
        "packages": meta.packages,
        "catalogue": meta.catalogue,
        "score": {
            "stored": results.len(),
            "exported": all.exported,
            "run": all.counted,
            "loads": all.loads,
            "runs": all.runs,
            "matches": all.matches,
            "match_share": all.share() / 100.0,
            "geomean_ratio": gm,
        },
        "entries": results,
        "not_run": missing,
    });
    (md, json)
}

/// Where some results came from binaries other than `current` (entries not run again since): how
/// many results each binary gave, for the report's header ("" when every result is `current`'s).
fn other_binaries(current: &str, results: &[EntryResult]) -> String {
    let mut counts: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for r in results {
        *counts.entry(r.binary.as_str()).or_default() += 1;
    }
    if counts.keys().all(|b| *b == current) {
        return String::new();
    }
    let list: Vec<String> = counts.iter().map(|(b, n)| format!("`{b}` {n}")).collect();
    format!(
        " (the results come from several binaries, entries not run again keeping theirs: {})",
        list.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_cpu::compare::diff;
    use crate::bench_cpu::report::SideResult;
    use quorum::Tensor;

    fn entry() -> CatalogueEntry {
        CatalogueEntry {
            name: "tv_x".into(),
            source: "torchvision".into(),
            family: "classification".into(),
            exporter: "torchscript".into(),
            opset: Some(17),
            of: None,
        }
    }

    fn bench(q: &[f32], o: &[f32], quorum_error: Option<&str>) -> ModelResult {
        let t = |v: &[f32]| Tensor::from_f32(&[v.len()], v.to_vec()).unwrap();
        ModelResult {
            name: "tv_x".into(),
            group: "zoo".into(),
            about: String::new(),
            note: None,
            path: String::new(),
            quorum: SideResult {
                times_ms: vec![2.0, 2.0, 2.0],
                error: quorum_error.map(String::from),
            },
            ort: SideResult {
                times_ms: vec![1.0, 1.0, 1.0],
                error: None,
            },
            output_names: vec!["y".into()],
            comparison: vec![diff("y", &t(q), &t(o))],
        }
    }

    fn judged(m: &ModelResult, tol: f64) -> EntryResult {
        let mut r = EntryResult::new(entry(), "cpu", "s", "b");
        r.judge(m, tol);
        r
    }

    #[test]
    fn outputs_within_the_tolerance_match_and_others_do_not() {
        let ok = judged(&bench(&[1.0, 100.05], &[1.0, 100.0], None), 1e-3);
        assert_eq!(ok.status, Status::Match);
        assert_eq!(ok.ratio(), Some(2.0));
        // 0.5 on a scale of 100 is beyond 1e-3 of it: the broken twin must be caught.
        let bad = judged(&bench(&[1.0, 100.5], &[1.0, 100.0], None), 1e-3);
        assert_eq!(bad.status, Status::Mismatch);
        assert!(bad.reason.unwrap().contains("y: max difference 5.000e-1"));
        // A NaN where onnxruntime has a number is a mismatch, whatever the tolerance.
        let nan = judged(&bench(&[f32::NAN, 100.0], &[1.0, 100.0], None), 1.0);
        assert_eq!(nan.status, Status::Mismatch);
    }

    #[test]
    fn the_oracles_settle_a_difference_from_onnxruntime_only_when_they_agree() {
        let mut r = judged(&bench(&[1.0, 100.5], &[1.0, 100.0], None), 1e-3);
        r.oracles(Ok(()));
        assert_eq!(r.status, Status::OraclesAgree);
        assert!(r.status.matches());
        assert!(r.reason.unwrap().contains("y: max difference"));
        let mut w = judged(&bench(&[1.0, 100.5], &[1.0, 100.0], None), 1e-3);
        w.oracles(Err(
            "node n (Conv): element 3 differs (exit status: 6)".into()
        ));
        assert_eq!(w.status, Status::Mismatch);
        assert!(!w.status.matches());
    }

    #[test]
    fn quorums_exit_code_says_whether_it_failed_to_load_or_to_run() {
        let load = judged(
            &bench(&[1.0], &[1.0], Some("unsupported op (exit status: 3)")),
            1e-3,
        );
        assert_eq!(load.status, Status::LoadFailed);
        let run = judged(
            &bench(&[1.0], &[1.0], Some("node n: bad (exit status: 1)")),
            1e-3,
        );
        assert_eq!(run.status, Status::RunFailed);
        assert!(run.status.loads() && !run.status.runs());
    }

    #[test]
    fn the_score_counts_what_was_run_and_lists_every_failure() {
        let mut results = vec![
            judged(&bench(&[1.0], &[1.0], None), 1e-3),
            judged(&bench(&[1.0, 9.0], &[1.0, 1.0], None), 1e-3),
        ];
        results[1].entry.name = "tv_y".into();
        let mut exp = EntryResult::new(entry(), "cpu", "s", "b");
        exp.entry.name = "tv_z".into();
        exp.reason = Some("SerdeError".into());
        results.push(exp);
        let meta = Meta {
            commit: "c".into(),
            binary: "b".into(),
            machine: "m".into(),
            threads: 2,
            rounds: 3,
            round_ms: 300,
            python: "p".into(),
            packages: BTreeMap::new(),
            catalogue: 4,
        };
        let (md, json) = render(&meta, "cpu", &[entry()], &results);
        assert_eq!(json["score"]["run"], 2, "the export failure is not counted");
        assert_eq!(json["score"]["matches"], 1);
        assert!(
            md.contains("| match onnxruntime, or the oracles | 1 | **50.0%** |"),
            "{md}"
        );
        assert!(md.contains("`tv_y` (torchvision): **mismatch**"));
        assert!(md.contains("`tv_z` (torchvision): **export failed**: SerdeError"));
        assert!(
            !md.contains("several binaries"),
            "every result is this binary's: {md}"
        );
        // An entry kept from an earlier binary: the header counts the results of each.
        results[0].binary = "old".into();
        let (md, _) = render(&meta, "cpu", &[entry()], &results);
        assert!(
            md.contains("several binaries") && md.contains("`b` 2, `old` 1"),
            "{md}"
        );
    }
}
