//! `quorum info`: what a model takes and gives, what it uses, and where each node would run.
use std::collections::BTreeMap;

use quorum::Availability;
use quorum::loader::{self, LoadOptions};
use quorum::ops::Registry;

use crate::common::{CliResult, ModelArgs, from_quorum, print_warnings};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
}

pub fn main(a: Args) -> CliResult<()> {
    let model =
        loader::model_from_file(&a.model.model, &LoadOptions::default()).map_err(from_quorum)?;
    print_warnings(&model);
    let g = &model.graph;
    println!(
        "model: {} (ir {}, producer '{}')",
        a.model.model.display(),
        model.ir_version,
        model.producer
    );
    let mut opsets: Vec<_> = model.opsets.iter().collect();
    opsets.sort();
    let opsets: Vec<String> = opsets
        .iter()
        .map(|(d, v)| format!("{}={v}", if d.is_empty() { "ai.onnx" } else { d.as_str() }))
        .collect();
    println!("opsets: {}", opsets.join(", "));
    println!("inputs:");
    for i in g.runtime_inputs() {
        println!("  {}: {}", i.name, i.ty);
    }
    println!("outputs:");
    for o in &g.outputs {
        println!("  {}: {}", o.name, o.ty);
    }
    println!(
        "initializers: {} ({} values)",
        g.initializers.len(),
        g.initializers
            .values()
            .filter_map(|v| v.as_tensor())
            .map(|t| t.len())
            .sum::<usize>()
    );
    let nodes = model.all_nodes();
    let mut hist: BTreeMap<String, usize> = BTreeMap::new();
    for n in &nodes {
        *hist.entry(n.qualified_op()).or_default() += 1;
    }
    let mut hist: Vec<_> = hist.into_iter().collect();
    hist.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    println!("ops ({} nodes):", nodes.len());
    for (op, n) in &hist {
        println!("  {op:<28} {n}");
    }
    println!("placement:");
    let reg = Registry::cpu();
    let mut cpu_claims = 0;
    let mut declined: BTreeMap<String, usize> = BTreeMap::new();
    for n in &nodes {
        match quorum::plan::resolve(n, reg) {
            Ok(_) => cpu_claims += 1,
            Err(e) => *declined.entry(e.to_string()).or_default() += 1,
        }
    }
    println!("  cpu: takes {cpu_claims} of {} nodes", nodes.len());
    for (why, n) in &declined {
        println!("    declines {n} node(s): {why}");
    }
    accelerator_placement(&g.nodes);
    wgpu_adapters();
    // Folding runs the constant nodes' CPU kernels, so it is reported from a CPU session.
    let cpu_options = quorum::SessionOptions {
        optimize: !a.model.no_optimize,
        qdq_integer: a.model.qdq_integer,
        ..Default::default()
    };
    match quorum::Session::from_model(model.clone(), cpu_options) {
        Ok(s) => {
            println!(
                "constant folding: {} of {} top-level nodes run once at load (inputs all constants)",
                s.folded_nodes().len(),
                g.nodes.len()
            );
            // The rewrites of a CPU session (a session with an accelerator has its own, below).
            if a.model.no_optimize {
                println!("graph rewrites (CPU sessions): off (--no-optimize)");
            } else {
                println!(
                    "graph rewrites (CPU sessions): {} applied{}",
                    s.rewrites().len(),
                    if s.rewrites().is_empty() { "" } else { ":" }
                );
                for r in s.rewrites() {
                    println!("  {r}{}", inexact_mark(r));
                }
            }
        }
        Err(e) => println!("constant folding: no session ({e})"),
    }
    // Streams and graph capture depend on placement, so they come from a session with the
    // providers asked for.
    match a.model.session() {
        Ok(s) => {
            if let Some(c) = s.conversion() {
                let kept: Vec<String> = c.kept.iter().map(|(op, n)| format!("{op} ×{n}")).collect();
                println!(
                    "mixed precision (--precision {}): {} nodes converted, kept in f32: {}; {} casts",
                    a.model.precision,
                    c.converted,
                    if kept.is_empty() {
                        "none".to_string()
                    } else {
                        kept.join(", ")
                    },
                    c.casts
                );
            }
            let on_device = s.schedule().steps.iter().filter(|st| st.stream.is_some());
            println!(
                "streams ({} asked, --provider {}): {} used by {} device nodes",
                a.model.streams,
                a.model.provider,
                s.schedule().streams,
                on_device.count()
            );
            let shapes: Vec<&str> = s
                .placement()
                .iter()
                .filter(|p| {
                    p.declined
                        .as_deref()
                        .is_some_and(|w| w.starts_with("shape arithmetic"))
                })
                .map(|p| p.op.as_str())
                .collect();
            if s.device_name().is_some() && !a.model.no_optimize {
                println!(
                    "graph rewrites (--provider {}): {} applied{}",
                    a.model.provider,
                    s.rewrites().len(),
                    if s.rewrites().is_empty() { "" } else { ":" }
                );
                for r in s.rewrites() {
                    println!("  {r}{}", inexact_mark(r));
                }
            }
            if !shapes.is_empty() {
                let mut ops: Vec<&str> = shapes.clone();
                ops.sort();
                ops.dedup();
                println!(
                    "shape arithmetic on the host: {} nodes ({}), computed from tensor shapes \
                     (no device data read; allowed inside graph capture)",
                    shapes.len(),
                    ops.join(", ")
                );
            }
            match s.capture_blocker() {
                None => println!(
                    "graph capture: possible, per input-shape key after {} warm-up runs, unless a run refuses it",
                    quorum::session::WARMUP_RUNS
                ),
                Some(why) => println!("graph capture: not possible: {why}"),
            }
            auto_dispatch(&a, &s);
        }
        Err(e) => println!("streams and graph capture: no session ({})", e.message),
    }
    Ok(())
}

/// The adapters wgpu finds here and the one it uses (name, backend, driver, what its shaders offer).
fn wgpu_adapters() {
    #[cfg(feature = "wgpu")]
    {
        for a in quorum::wgpu::device::adapter_report() {
            println!("  wgpu adapter found: {a}");
        }
        match quorum::wgpu::Device::get() {
            Ok(d) => {
                println!("  wgpu uses: {}", d.describe());
                println!(
                    "  wgpu 16-bit floats: one per 32-bit word, computed in f32 and converted exactly{}",
                    if d.caps.f16_offered {
                        " (the adapter offers shader-f16; not used: WGSL's f32-to-f16 conversion does not promise ties to even)"
                    } else {
                        ""
                    }
                );
                if let Err(why) = d.auto_usable() {
                    println!("  wgpu under --provider auto: left out: {why}");
                }
            }
            Err(why) => println!("  wgpu uses no adapter: {why}"),
        }
    }
}

/// What each accelerator this build knows would claim of the top-level nodes, and why it declines
/// the rest (decided from the nodes alone, so it needs no device).
fn accelerator_placement(nodes: &[quorum::ir::Node]) {
    for p in quorum::Provider::ACCELERATORS {
        let Some(backend) = quorum::providers::backend(p) else {
            println!("  {}: not in this build", p.name());
            continue;
        };
        let mut claims = 0;
        let mut declined: BTreeMap<String, usize> = BTreeMap::new();
        for n in nodes {
            match backend.claim(n) {
                Ok(_) => claims += 1,
                Err(why) => {
                    *declined
                        .entry(format!("{}: {why}", n.qualified_op()))
                        .or_default() += 1
                }
            }
        }
        let avail = match p.available() {
            Ok(()) => "available".to_string(),
            Err(e) => format!("not available here: {e}"),
        };
        println!(
            "  {} ({avail}): claims {claims} of {} top-level nodes",
            p.name(),
            nodes.len()
        );
        for (why, n) in &declined {
            println!("    declines {n} node(s): {why}");
        }
    }
}

/// Under `auto`: which measured threshold table each accelerator uses (or that the conservative
/// floor stands in), then, from one run with generated inputs, the threshold that decided each
/// node (decisions depend on the shapes a run brings).
fn auto_dispatch(a: &Args, s: &quorum::Session) {
    if s.options().min_device_elements == 0 {
        return;
    }
    println!("auto dispatch:");
    if s.device_name().is_none() {
        println!("  no accelerator available here: every node runs on the CPU");
        return;
    }
    for note in s.dispatch_notes() {
        println!("  {note}");
    }
    if s.auto_trial().is_some() {
        println!(
            "  whole-model trial: the first {} runs time each node by the thresholds, every claimed \
             node on its device and the CPU alone, each placement's runs back to back, the first run of \
             each device placement checked by both oracles; later runs use the fastest placement \
             whose results were within their bounds, and keep it for later processes (--auto-choices)",
            quorum::session::trial::TRIAL_RUNS
        );
    }
    let ran = a
        .model
        .inputs(s, 0)
        .and_then(|(inputs, _)| s.run(inputs).map_err(from_quorum));
    if let Err(e) = ran {
        println!("  decisions: no run with generated inputs ({})", e.message);
        return;
    }
    if let Some(r) = s.auto_trial() {
        println!("  whole-model placement after that run: {r}");
    }
    println!("  decisions (one run with generated inputs):");
    for (p, d) in s.placement().iter().zip(s.dispatch_decisions()) {
        match d {
            Some(d) => println!(
                "    {} ({}): {}: {}",
                p.node,
                p.op,
                if d.device { p.provider.name() } else { "cpu" },
                d.rule
            ),
            None if p.provider == quorum::Provider::Cpu => {
                println!("    {} ({}): cpu: no accelerator claims it", p.node, p.op)
            }
            None => println!(
                "    {} ({}): {}: not decided in this run",
                p.node,
                p.op,
                p.provider.name()
            ),
        }
    }
}

/// How `quorum info` marks a rewrite that does not keep every output bit for bit.
fn inexact_mark(r: &quorum::optimize::Rewrite) -> &'static str {
    if r.exact() {
        ""
    } else {
        " (rounds differently, within the bound its module states)"
    }
}
