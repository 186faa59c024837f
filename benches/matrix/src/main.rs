//! `quorum-matrix`: the benchmark matrix, dispatch thresholds, graph-capture outcomes and the
//! `auto` validation, from a release binary (the GPU bundle ships it; the GPU machine has no
//! toolchain). See the README's "Benchmarks and nightly reports".
#![forbid(unsafe_code)]
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::{Parser, Subcommand};
use quorum::Provider;
use quorum_matrix::cases::{self, Case, Size};
use quorum_matrix::machine::{Machine, commit, today};
use quorum_matrix::matrix::{self, Matrix, ProviderInfo};
use quorum_matrix::measure::Budget;
use quorum_matrix::models::{self, GraphOutcome, Validation};
use quorum_matrix::outputs::{Outputs, write_json};
use quorum_matrix::{extract, light};

#[derive(Parser)]
#[command(
    name = "quorum-matrix",
    about = "Quorum's benchmark matrix and dispatch thresholds"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Clone)]
struct Common {
    /// A small matrix (a few sizes per family, short budgets): about a minute on two cores.
    #[arg(long)]
    quick: bool,
    /// The generated ONNX corpus whose light models give real node shapes and whole models.
    #[arg(long, default_value = "target/corpus/onnx-1.23.2")]
    corpus: PathBuf,
    /// Only these op families (comma list; default: all).
    #[arg(long, value_delimiter = ',')]
    families: Vec<String>,
    /// Only these accelerators (comma list: cuda, wgpu; default: every one present). The CPU is
    /// always measured: it is what each threshold is against. One device call can then measure
    /// one accelerator's column in full rather than two in part.
    #[arg(long, value_delimiter = ',')]
    accelerators: Vec<String>,
    /// Stop measuring new matrix points after this many seconds (the rest are kept with a note).
    #[arg(long)]
    deadline_s: Option<u64>,
}

#[derive(Subcommand)]
enum Command {
    /// Time the matrix and write matrix.json (default: reports/bench/<adapter-id>/matrix.json).
    Run {
        #[command(flatten)]
        common: Common,
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Derive the threshold table of each accelerator in a matrix into DIR/<adapter-id>.json.
    Thresholds {
        matrix: PathBuf,
        #[arg(long, default_value = "reports/thresholds")]
        out_dir: PathBuf,
    },
    /// Whole models: graph replay against eager runs per light model, and every light model and
    /// random chain under each provider alone and auto (auto reads QUORUM_THRESHOLDS or the
    /// tables built in). Reads the providers from the matrix it belongs to.
    Models {
        #[command(flatten)]
        common: Common,
        /// The matrix these models go with (for its providers).
        #[arg(long)]
        matrix: PathBuf,
        /// Where graphs.json and models.json go.
        #[arg(long)]
        out: PathBuf,
        #[arg(long, default_value_t = 8)]
        chains: u64,
    },
    /// Everything the nightly report needs, into one folder: matrix, thresholds, graph-capture
    /// outcomes per light model, and every light model and random chain under each provider and
    /// auto (the validation).
    Nightly {
        #[command(flatten)]
        common: Common,
        #[arg(long)]
        out: PathBuf,
        /// Random-size chains in the validation.
        #[arg(long, default_value_t = 8)]
        chains: u64,
    },
}

/// Per point: quick runs take at least 7 samples within ~0.15 s; full ones at least 11 within
/// ~0.25 s, so that the full matrix (about 1,700 points with an accelerator) fits a 10-minute
/// device call with `--deadline-s` as the guard.
fn budget(quick: bool) -> Budget {
    if quick {
        Budget {
            min_samples: 7,
            max_samples: 40,
            time: Duration::from_millis(150),
        }
    } else {
        Budget {
            min_samples: 11,
            max_samples: 100,
            time: Duration::from_millis(250),
        }
    }
}

/// The sweep and the light models' nodes.
fn all_cases(c: &Common) -> Vec<Case> {
    let size = if c.quick { Size::Quick } else { Size::Full };
    let mut out = cases::sweep(size, &c.families);
    let models = light::models(&c.corpus);
    let (limit, take) = if c.quick { (4, 2) } else { (10, usize::MAX) };
    for m in models.iter().take(take) {
        match light::cases(m, limit) {
            Ok(cs) => out.extend(cs),
            Err(e) => eprintln!("skipping {}: {e}", m.display()),
        }
    }
    if models.is_empty() {
        eprintln!(
            "no light models under {} (generate the corpus for real node shapes)",
            c.corpus.display()
        );
    }
    out.retain(|case| {
        c.families.is_empty()
            || c.families
                .iter()
                .any(|f| f == quorum::session::dispatch::family(&case.op))
    });
    out
}

fn measure_matrix(c: &Common) -> Matrix {
    let machine = Machine::here();
    let mut providers: Vec<ProviderInfo> = matrix::providers();
    for p in &mut providers {
        if p.provider != "cpu"
            && !c.accelerators.is_empty()
            && !c.accelerators.contains(&p.provider)
        {
            p.unavailable = Some("left out by --accelerators".into());
        }
    }
    for p in &providers {
        match (&p.device, &p.unavailable) {
            (_, Some(why)) => eprintln!("{}: not measured ({why})", p.provider),
            (Some(d), None) => eprintln!(
                "{}: {d}, driver {}",
                p.provider,
                p.driver.as_deref().unwrap_or("unknown")
            ),
            (None, None) => eprintln!(
                "{}: {} ({} threads)",
                p.provider, machine.cpu, machine.threads
            ),
        }
    }
    let cases = all_cases(c);
    let total = cases.len();
    let mut done = 0;
    let deadline = c
        .deadline_s
        .map(|s| std::time::Instant::now() + Duration::from_secs(s));
    let points = matrix::run(&cases, &providers, &budget(c.quick), deadline, |p| {
        done += 1;
        let t = p.stats.as_ref().map_or_else(
            || p.note.clone().unwrap_or_default(),
            |s| format!("{:.4} ms [{:.4}, {:.4}]", s.median_ms, s.p10_ms, s.p90_ms),
        );
        eprintln!(
            "[{done}] {} {} {:?}/{:?}: {t}",
            p.provider, p.case, p.residency, p.graph
        );
    });
    eprintln!("{total} cases, {} points", points.len());
    Matrix {
        schema: 1,
        adapter_id: matrix::adapter_id(&providers, &machine),
        quick: c.quick,
        date: today(),
        commit: commit(),
        machine,
        providers,
        points,
    }
}

fn usable_accelerators(m: &Matrix) -> Vec<Provider> {
    m.providers
        .iter()
        .filter(|p| p.provider != "cpu" && p.unavailable.is_none())
        .filter_map(|p| matrix::provider_named(&p.provider))
        .collect()
}

fn whole_models(c: &Common, m: &Matrix, chains: u64) -> (Vec<GraphOutcome>, Vec<Validation>) {
    let b = budget(c.quick);
    let accels = usable_accelerators(m);
    let mut graphs = Vec::new();
    let mut validations = Vec::new();
    let light = light::models(&c.corpus);
    let light: Vec<&PathBuf> = if c.quick {
        light
            .iter()
            .filter(|p| light::model_name(p) == "squeezenet")
            .collect()
    } else {
        light.iter().collect()
    };
    for path in light {
        let name = light::model_name(path);
        for &a in &accels {
            let g = models::graph_outcome(path, &name, a, &b);
            eprintln!("graph {name} on {}: {}", a.name(), g.verdict);
            graphs.push(g);
        }
        match quorum::loader::model_from_file(path, &Default::default()) {
            Ok(model) => {
                let v = models::validate(&name, &model, &accels, &b);
                eprintln!("{name}: auto {} (best {:?})", v.verdict, v.best);
                validations.push(v);
            }
            Err(e) => eprintln!("skipping {name}: {e}"),
        }
    }
    for seed in 0..chains {
        let (name, model) = models::random_chain(seed);
        let v = models::validate(&name, &model, &accels, &b);
        eprintln!("{name}: auto {} (best {:?})", v.verdict, v.best);
        validations.push(v);
    }
    (graphs, validations)
}

fn run(cli: Cli) -> Result<bool> {
    match cli.command {
        Command::Run { common, out } => {
            let m = measure_matrix(&common);
            let out = out.unwrap_or_else(|| {
                Path::new("reports/bench")
                    .join(&m.adapter_id)
                    .join("matrix.json")
            });
            m.write(&out)?;
            println!("matrix: {}", out.display());
        }
        Command::Thresholds { matrix, out_dir } => {
            let m = Matrix::read(&matrix)?;
            let tables = extract::tables(&m, &matrix.display().to_string());
            if tables.is_empty() {
                println!(
                    "no accelerator was measured in {}: no table",
                    matrix.display()
                );
            }
            for t in tables {
                let path = out_dir.join(format!("{}.json", t.adapter.id));
                write_json(&path, &t)?;
                println!("thresholds: {}", path.display());
            }
        }
        Command::Models {
            common,
            matrix,
            out,
            chains,
        } => {
            let m = Matrix::read(&matrix)?;
            let (graphs, models) = whole_models(&common, &m, chains);
            write_json(&out.join("graphs.json"), &graphs)?;
            write_json(&out.join("models.json"), &models)?;
            let slower: Vec<&str> = models
                .iter()
                .filter(|v| v.verdict == "slower")
                .map(|v| v.case.as_str())
                .collect();
            if !slower.is_empty() {
                println!(
                    "auto slower than the best provider alone: {}",
                    slower.join(", ")
                );
            }
        }
        Command::Nightly {
            common,
            out,
            chains,
        } => {
            let matrix = measure_matrix(&common);
            let rel = format!("reports/bench/{}/matrix.json", matrix.adapter_id);
            let tables = extract::tables(&matrix, &rel);
            Outputs {
                matrix,
                tables,
                graphs: Vec::new(),
                models: Vec::new(),
            }
            .write(&out)?;
            // The models run in a child process that reads tonight's tables, so that the
            // validation judges the thresholds just measured (the environment is read when a
            // session is built; setting it in this process would race its threads).
            let mut child = std::process::Command::new(std::env::current_exe()?);
            child
                .arg("models")
                .arg("--matrix")
                .arg(out.join("matrix.json"))
                .arg("--out")
                .arg(&out)
                .arg("--corpus")
                .arg(&common.corpus)
                .arg("--chains")
                .arg(chains.to_string());
            if out.join("thresholds").is_dir() {
                child.env("QUORUM_THRESHOLDS", out.join("thresholds"));
            }
            if common.quick {
                child.arg("--quick");
            }
            if !child.status()?.success() {
                anyhow::bail!("the models step failed");
            }
            println!("nightly measurements: {}", out.display());
        }
    }
    Ok(true)
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
