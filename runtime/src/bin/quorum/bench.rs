//! `quorum bench`: repeated runs of one model; median, p10 and p90 latency.
use std::time::Instant;

use crate::common::{CliResult, ModelArgs, from_quorum, print_conversion, print_verification};
use quorum::CounterSnapshot;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// Untimed runs before timing (under `auto`, after the runs of its whole-model trial).
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Timed runs.
    #[arg(long, default_value_t = 20)]
    iters: usize,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Seed for generated inputs.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Threads running the one session at once, each doing `iters` timed runs; the JSON reports
    /// their throughput (runs per second of wall time) beside the latency of every run.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    concurrency: u16,
    /// Time every node and print the time per op type (milliseconds per run, share of the node
    /// time, calls), most first; with --json, a "profile" array. `--profile=nodes` prints the time
    /// per node instead, by node name, the way onnxruntime's profiler lists it (with --json, a
    /// "node_profile" array beside "profile"). Timing adds a little per node. Where the device
    /// times its kernels (wgpu with timestamp queries), also the kernel time per op type on the
    /// device's clock ("device_profile").
    #[arg(long, value_enum, num_args = 0..=1, require_equals = true, default_missing_value = "ops")]
    profile: Option<ProfileBy>,
    /// With `--profile=nodes`: how many nodes to print, most time first (0: all).
    #[arg(long, default_value_t = 30)]
    top: usize,
    /// How inputs and outputs cross (IO binding, as onnxruntime_perf_test's -I): host (host
    /// tensors through `Session::run`), pinned (host tensors page-locked once: no host copies),
    /// or device (inputs copied to the device once, outputs left there: no transfers). Runs with
    /// pinned or device values are eager (no graph replay).
    #[arg(long, value_enum, default_value = "host")]
    io: crate::bench_io::Io,
}

/// What `--profile` sums the node times by.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ProfileBy {
    /// Per op type.
    Ops,
    /// Per node.
    Nodes,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = p / 100.0 * (sorted.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
}

pub fn main(a: Args) -> CliResult<()> {
    let mut options = a.model.options()?;
    options.profile = a.profile.is_some();
    let session = a.model.session_with(options)?;
    print_conversion(&session);
    let provider = match session.device_name() {
        Some(d) => format!("{} ({d})", a.model.provider),
        None => a.model.provider.clone(),
    };
    let (inputs, _) = a.model.inputs(&session, a.seed)?;
    let mut times = Vec::with_capacity(a.iters);
    let mut wall_s = 0.0;
    let mut profile = Vec::new();
    let mut device_profile = Vec::new();
    let mut node_profile = Vec::new();
    let mut transfers = Transfers::default();
    let timed = (|| {
        // `auto` times whole-model placements over its first runs: not its steady state.
        // One runner a thread, made before the clock starts (pinned tensors are page-locked and
        // device values copied once, there); the first also warms up.
        let mut runners = (0..a.concurrency)
            .map(|_| crate::bench_io::Runner::new(a.io, &session, &inputs))
            .collect::<quorum::Result<Vec<_>>>()?;
        for _ in 0..a.warmup + session.auto_trial_runs() {
            runners[0].run()?;
        }
        // The warm-up's node times are not part of the profile.
        let warm = session.op_profile();
        let warm_device = session.device_profile();
        let warm_nodes = session.node_profile();
        let warm_counters = session.counters();
        let start = Instant::now();
        let per_thread: Vec<quorum::Result<Vec<f64>>> = std::thread::scope(|scope| {
            let workers: Vec<_> = runners
                .into_iter()
                .map(|mut runner| {
                    scope.spawn(move || -> quorum::Result<Vec<f64>> {
                        let mut t_ms = Vec::with_capacity(a.iters);
                        for _ in 0..a.iters.max(1) {
                            t_ms.push(runner.run()?);
                        }
                        Ok(t_ms)
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().unwrap_or_else(|_| Ok(Vec::new())))
                .collect()
        });
        wall_s = start.elapsed().as_secs_f64();
        for t in per_thread {
            times.extend(t?);
        }
        profile = timed_profile(session.op_profile(), &warm, times.len());
        node_profile = timed_node_profile(session.node_profile(), &warm_nodes, times.len());
        device_profile = timed_device_profile(session.device_profile(), &warm_device, times.len());
        transfers = Transfers::per_run(&warm_counters, &session.counters(), times.len());
        Ok(())
    })();
    print_verification(&session);
    timed.map_err(from_quorum)?;
    let in_order = times.clone();
    times.sort_by(f64::total_cmp);
    let (p10, median, p90) = (
        percentile(&times, 10.0),
        percentile(&times, 50.0),
        percentile(&times, 90.0),
    );
    if a.json {
        let j = serde_json::json!({
            "model": a.model.model.display().to_string(),
            "provider": provider,
            "threads": rayon::current_num_threads(),
            "iters": times.len(),
            "concurrency": a.concurrency,
            "io": a.io.name(),
            "throughput_per_s": times.len() as f64 / wall_s.max(1e-9),
            "warmup": a.warmup,
            "median_ms": median,
            "p10_ms": p10,
            "p90_ms": p90,
            "times_ms": in_order,
            "counters": session.counters(),
            "folded_nodes": session.folded_nodes().len(),
            "verification": session.verification(),
            "sampling": session.sample_report(true),
            "streams": session.schedule().streams,
            "graph_capture": session.options().graph_capture != quorum::session::GraphCapture::Off,
            "precision": session.options().precision.name(),
            "conversion": session.conversion().map(|c| serde_json::json!({
                "dtype": c.dtype.map(|d| d.name()),
                "converted": c.converted,
                "kept": c.kept,
                "casts": c.casts,
                "initializers": c.initializers,
                "clamped": c.clamped,
            })),
            "capture_blocker": session.capture_blocker(),
            "graphs": session.graph_report(),
            "auto_trial": session.auto_trial(),
            "profile": profile.iter().map(|(op, provider, calls, ms)| serde_json::json!({
                "op": op, "provider": provider, "nodes_per_run": calls, "ms_per_run": ms,
            })).collect::<Vec<_>>(),
            "node_profile": node_profile.iter().map(|(node, op, provider, calls, ms)| serde_json::json!({
                "node": node, "op": op, "provider": provider, "calls_per_run": calls, "ms_per_run": ms,
            })).collect::<Vec<_>>(),
            "transfers": transfers,
            "device_profile": device_profile.iter().map(|(op, calls, ms)| serde_json::json!({
                "op": op, "launches_per_run": calls, "device_ms_per_run": ms,
            })).collect::<Vec<_>>(),
            "fallbacks": session.fallback_reasons().iter().map(|(op, reason, nodes, times)| serde_json::json!({
                "op": op, "reason": reason, "nodes": nodes, "times": times,
            })).collect::<Vec<_>>(),
        });
        println!("{j}");
    } else {
        println!(
            "{}: provider {provider}, {} iters: median {median:.3} ms, p10 {p10:.3} ms, p90 {p90:.3} ms",
            a.model.model.display(),
            times.len()
        );
        if let Some(t) = session.auto_trial() {
            println!("auto's whole-model trial: {t}");
        }
        if a.profile == Some(ProfileBy::Nodes) {
            print_node_profile(&node_profile, median, a.top);
        } else {
            print_profile(&profile, median);
        }
        print_device_profile(&device_profile);
        transfers.print();
        print_fallbacks(&session.fallback_reasons());
    }
    Ok(())
}

/// A timed run's copies between host and device and the host's time around them, per run (from
/// the session's counters after the warm-up and at the end).
#[derive(Default, serde::Serialize)]
struct Transfers {
    h2d_mb: f64,
    d2h_mb: f64,
    /// Host time writing inputs into pinned staging.
    stage_ms: f64,
    /// Host time waiting for the device (read-backs, the end of a run or a replay).
    wait_ms: f64,
    /// Host time rebuilding outputs from staging.
    readback_ms: f64,
}

impl Transfers {
    fn per_run(before: &CounterSnapshot, after: &CounterSnapshot, runs: usize) -> Transfers {
        let per =
            |a: u64, b: u64, scale: f64| a.saturating_sub(b) as f64 / scale / runs.max(1) as f64;
        Transfers {
            h2d_mb: per(after.h2d_bytes, before.h2d_bytes, 1e6),
            d2h_mb: per(after.d2h_bytes, before.d2h_bytes, 1e6),
            stage_ms: per(after.stage_nanos, before.stage_nanos, 1e6),
            wait_ms: per(after.wait_nanos, before.wait_nanos, 1e6),
            readback_ms: per(after.readback_nanos, before.readback_nanos, 1e6),
        }
    }

    fn print(&self) {
        if self.h2d_mb + self.d2h_mb == 0.0 {
            return;
        }
        println!(
            "transfers per run: {:.2} MB in, {:.2} MB out; host staging {:.3} ms, waiting for the device {:.3} ms, rebuilding outputs {:.3} ms",
            self.h2d_mb, self.d2h_mb, self.stage_ms, self.wait_ms, self.readback_ms
        );
    }
}

/// The kernels that declined their inputs at run time (those nodes ran on the CPU, and a run
/// with one is not captured into a graph), grouped by op and reason.
fn print_fallbacks(rows: &[(String, String, usize, u64)]) {
    if rows.is_empty() {
        return;
    }
    println!("declined at run time (ran on the CPU instead; no graph capture while any does):");
    for (op, reason, nodes, times) in rows {
        println!("  {op}: {nodes} node(s), {times} time(s): {reason}");
    }
}

/// Kernel time per op type on the device's clock over the timed runs: (op, launches per run,
/// milliseconds per run), most first.
fn timed_device_profile(
    all: Vec<(String, quorum::counters::OpTime)>,
    warm: &[(String, quorum::counters::OpTime)],
    runs: usize,
) -> Vec<(String, f64, f64)> {
    let runs = runs.max(1) as f64;
    let mut rows: Vec<(String, f64, f64)> = all
        .into_iter()
        .map(|(op, t)| {
            let w = warm
                .iter()
                .find(|(o, _)| *o == op)
                .map(|(_, t)| *t)
                .unwrap_or_default();
            let calls = t.calls.saturating_sub(w.calls) as f64 / runs;
            let ms = t.nanos.saturating_sub(w.nanos) as f64 / 1e6 / runs;
            (op, calls, ms)
        })
        .filter(|r| r.1 > 0.0)
        .collect();
    rows.sort_by(|a, b| b.2.total_cmp(&a.2));
    rows
}

fn print_device_profile(rows: &[(String, f64, f64)]) {
    if rows.is_empty() {
        return;
    }
    let total: f64 = rows.iter().map(|r| r.2).sum();
    println!(
        "device kernel time per run: {total:.3} ms (timestamp queries; each kernel in a pass of its own)"
    );
    println!(
        "  {:<32} {:>8} {:>10} {:>7}",
        "op", "launches", "ms", "share"
    );
    for (op, calls, ms) in rows {
        println!(
            "  {op:<32} {calls:>8.1} {ms:>10.3} {:>6.1}%",
            100.0 * ms / total.max(1e-12)
        );
    }
}

/// One op type's share of the timed runs: (op, provider, node executions per run, milliseconds
/// per run), from the session's totals less the warm-up's, most time first.
fn timed_profile(
    all: Vec<(String, String, quorum::counters::OpTime)>,
    warm: &[(String, String, quorum::counters::OpTime)],
    runs: usize,
) -> Vec<(String, String, f64, f64)> {
    let runs = runs.max(1) as f64;
    let mut rows: Vec<(String, String, f64, f64)> = all
        .into_iter()
        .map(|(op, provider, t)| {
            let w = warm
                .iter()
                .find(|(o, p, _)| *o == op && *p == provider)
                .map(|(_, _, t)| *t)
                .unwrap_or_default();
            let calls = t.calls.saturating_sub(w.calls) as f64 / runs;
            let ms = t.nanos.saturating_sub(w.nanos) as f64 / 1e6 / runs;
            (op, provider, calls, ms)
        })
        .filter(|r| r.2 > 0.0)
        .collect();
    rows.sort_by(|a, b| b.3.total_cmp(&a.3));
    rows
}

fn print_profile(rows: &[(String, String, f64, f64)], median_ms: f64) {
    if rows.is_empty() {
        return;
    }
    let total: f64 = rows.iter().map(|r| r.3).sum();
    println!(
        "profile per run: {total:.3} ms in nodes (the run's median: {median_ms:.3} ms; device nodes: time to enqueue)"
    );
    println!(
        "  {:<32} {:>6} {:>7} {:>10} {:>7}",
        "op", "where", "nodes", "ms", "share"
    );
    for (op, provider, calls, ms) in rows {
        println!(
            "  {op:<32} {provider:>6} {calls:>7.1} {ms:>10.3} {:>6.1}%",
            100.0 * ms / total.max(1e-12)
        );
    }
}

/// One node's share of the timed runs: (node, op, provider, executions per run, milliseconds per
/// run), from the session's totals less the warm-up's, most time first.
fn timed_node_profile(
    all: Vec<(String, quorum::counters::NodeTime)>,
    warm: &[(String, quorum::counters::NodeTime)],
    runs: usize,
) -> Vec<(String, String, String, f64, f64)> {
    let runs = runs.max(1) as f64;
    let mut rows: Vec<_> = all
        .into_iter()
        .map(|(node, t)| {
            let w = warm
                .iter()
                .find(|(n, _)| *n == node)
                .map(|(_, t)| t.time)
                .unwrap_or_default();
            let calls = t.time.calls.saturating_sub(w.calls) as f64 / runs;
            let ms = t.time.nanos.saturating_sub(w.nanos) as f64 / 1e6 / runs;
            (node, t.op, t.provider, calls, ms)
        })
        .filter(|r| r.3 > 0.0)
        .collect();
    rows.sort_by(|a, b| b.4.total_cmp(&a.4));
    rows
}

fn print_node_profile(rows: &[(String, String, String, f64, f64)], median_ms: f64, top: usize) {
    if rows.is_empty() {
        return;
    }
    let total: f64 = rows.iter().map(|r| r.4).sum();
    let shown = if top == 0 {
        rows.len()
    } else {
        top.min(rows.len())
    };
    println!(
        "profile per run: {total:.3} ms in {} nodes (the run's median: {median_ms:.3} ms; device nodes: time to enqueue); the {shown} slowest:",
        rows.len()
    );
    println!(
        "  {:<40} {:<20} {:>6} {:>10} {:>7}",
        "node", "op", "where", "ms", "share"
    );
    for (node, op, provider, _, ms) in &rows[..shown] {
        println!(
            "  {node:<40} {op:<20} {provider:>6} {ms:>10.3} {:>6.1}%",
            100.0 * ms / total.max(1e-12)
        );
    }
}
