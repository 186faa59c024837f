//! `cargo xtask conformance` / the `conformance` binary: runs engines over the corpus, prints a summary,
//! writes reports, and fails on results that differ from the expectation lists.
use std::path::PathBuf;
use std::sync::Mutex;

use anyhow::{Result, bail};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};

use crate::case;
use crate::engine;
use crate::expect::{self, Expectation, Expectations, Status};
use crate::report::{self, EngineReport};
use crate::runner;

#[derive(Parser, Debug)]
#[command(
    name = "conformance",
    about = "Run the ONNX backend corpus on Quorum's engines"
)]
pub struct Args {
    /// Engine to run (repeatable): cpu, cuda, oracle-reference, oracle-independent. Default: every
    /// engine available on this machine (cuda only where a GPU is present).
    #[arg(long = "engine")]
    pub engines: Vec<String>,
    /// Only cases whose id (`part/name`) matches this regular expression.
    #[arg(long)]
    pub filter: Option<String>,
    /// An existing backend-test data tree to use instead of the generated corpus.
    #[arg(long)]
    pub corpus: Option<PathBuf>,
    /// Cases run at once (default: available cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Rewrite the expectation lists from this run's results (existing reasons are kept).
    #[arg(long)]
    pub update_expected: bool,
    /// Do not write reports/conformance (reports are written only for full runs of the default corpus).
    #[arg(long)]
    pub no_report: bool,
    /// Print every case, passes included.
    #[arg(long, short)]
    pub verbose: bool,
}

/// Runs the command; `Ok(false)` means unexpected results were found.
pub fn run(args: Args) -> Result<bool> {
    let corpus = match &args.corpus {
        Some(c) => c.clone(),
        None => {
            let d = crate::corpus::default_dir();
            crate::corpus::ensure(&d)?;
            d
        }
    };
    let filter = args.filter.as_deref().map(regex::Regex::new).transpose()?;
    let cases: Vec<_> = case::discover(&corpus)?
        .into_iter()
        .filter(|c| filter.as_ref().is_none_or(|f| f.is_match(&c.id)))
        .collect();
    if cases.is_empty() {
        bail!(
            "no cases found under {} (filter {:?})",
            corpus.display(),
            args.filter
        );
    }
    let engines: Vec<Box<dyn engine::Engine>> = if args.engines.is_empty() {
        engine::all()
            .into_iter()
            .filter(|e| e.runs_by_default() && e.available().is_ok())
            .collect()
    } else {
        args.engines
            .iter()
            .map(|n| {
                let e =
                    engine::by_name(n).ok_or_else(|| anyhow::anyhow!("unknown engine '{n}'"))?;
                e.available()
                    .map_err(|why| anyhow::anyhow!("engine '{n}' is not available here: {why}"))?;
                Ok(e)
            })
            .collect::<Result<_>>()?
    };
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    runner::quiet_panics();
    let mut all_ok = true;
    let mut results = Vec::new();
    for e in &engines {
        let list_path = expect::path_for(e.name());
        let expected = Expectations::load(&list_path)?;
        let bar = ProgressBar::new(cases.len() as u64);
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix:>6} [{bar:40}] {pos}/{len} {elapsed_precise} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.set_prefix(e.name().to_string());
        let printed = Mutex::new(());
        let verbose = args.verbose || args.filter.is_some();
        let outcomes = runner::run_all(
            e.as_ref(),
            &cases,
            &|id| expected.expected(id) == Status::Nondeterministic,
            jobs,
            &|o| {
                bar.inc(1);
                bar.set_message(o.id.clone());
                let surprise = o.status() != expected.expected(&o.id);
                if verbose || surprise {
                    let _g = printed.lock();
                    let tag = if surprise { " (UNEXPECTED)" } else { "" };
                    let line =
                        format!("{:<16} {}{tag} {}", o.status.to_uppercase(), o.id, o.detail);
                    if bar.is_hidden() {
                        println!("{line}")
                    } else {
                        bar.println(line)
                    }
                }
            },
        );
        bar.finish_and_clear();
        let mut unexpected = Vec::new();
        for o in &outcomes {
            let want = expected.expected(&o.id);
            if o.status() != want {
                unexpected.push(format!(
                    "{}: {} but expected {}",
                    o.id,
                    o.status,
                    want.as_str()
                ));
            }
        }
        let report = EngineReport {
            engine: e.name(),
            device: device_name(e.name()),
            outcomes: &outcomes,
        };
        println!("{}", report.markdown());
        if args.filter.is_none() && args.corpus.is_none() && !args.no_report {
            let dir = crate::workspace_root().join("reports/conformance");
            report.write_json(&dir)?;
        }
        if args.update_expected {
            let mut updated = expected.clone();
            for o in &outcomes {
                if o.status() == Status::Pass {
                    updated.entries.remove(&o.id);
                } else if expected
                    .entries
                    .get(&o.id)
                    .is_none_or(|x| x.status != o.status())
                {
                    let reason: String = o.detail.chars().take(240).collect();
                    let reason = if reason.is_empty() {
                        "see report".to_string()
                    } else {
                        reason
                    };
                    updated.entries.insert(
                        o.id.clone(),
                        Expectation {
                            status: o.status(),
                            reason,
                        },
                    );
                }
            }
            updated.save(&list_path, e.name())?;
            println!("updated {}", list_path.display());
        } else if !unexpected.is_empty() {
            all_ok = false;
            println!(
                "{} unexpected results on engine `{}`:",
                unexpected.len(),
                e.name()
            );
            for u in &unexpected {
                println!("  {u}");
            }
        }
        results.push((e.name().to_string(), device_name(e.name()), outcomes));
    }
    if args.filter.is_none() && args.corpus.is_none() && !args.no_report {
        let reports: Vec<EngineReport> = results
            .iter()
            .map(|(n, d, o)| EngineReport {
                engine: n,
                device: d.clone(),
                outcomes: o,
            })
            .collect();
        report::write_summary(
            &crate::workspace_root().join("reports/conformance"),
            &reports,
        )?;
    }
    Ok(all_ok)
}

fn device_name(engine: &str) -> String {
    match engine {
        "cpu" => format!(
            "{} threads, {}",
            std::thread::available_parallelism().map_or(1, |n| n.get()),
            std::env::consts::ARCH
        ),
        "cuda" => crate::engine::cuda_device().unwrap_or_else(|| "no CUDA device".into()),
        other => other.to_string(),
    }
}
