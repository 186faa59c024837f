//! Runs cases on an engine and classifies each result.
use std::panic::AssertUnwindSafe;
use std::time::Instant;

use rayon::prelude::*;

use crate::case::{self, Case};
use crate::engine::{Engine, EngineError};
use crate::expect::Status;
use crate::tolerance;

#[derive(Debug, Clone, serde::Serialize)]
pub struct Outcome {
    pub id: String,
    pub status: &'static str,
    pub detail: String,
    pub ops: Vec<String>,
    pub millis: f64,
}

impl Outcome {
    pub fn status(&self) -> Status {
        Status::parse(self.status).unwrap_or(Status::Fail)
    }
}

/// Runs one case. With `nondeterministic`, the case must run but its values are not compared.
pub fn run_case(engine: &dyn Engine, case: &Case, nondeterministic: bool) -> Outcome {
    let start = Instant::now();
    let mut ops = Vec::new();
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
        run_inner(engine, case, nondeterministic, &mut ops)
    }));
    let (status, detail) = match result {
        Ok(Ok(())) if nondeterministic => (Status::Nondeterministic, String::new()),
        Ok(Ok(())) => (Status::Pass, String::new()),
        Ok(Err(EngineError::Unsupported(m))) => (Status::Unsupported, m),
        Ok(Err(EngineError::Failed(m))) => (Status::Fail, m),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
            (Status::Fail, format!("PANIC: {}", msg.unwrap_or_default()))
        }
    };
    Outcome {
        id: case.id.clone(),
        status: status.as_str(),
        detail: detail.replace('\n', " "),
        ops,
        millis: start.elapsed().as_secs_f64() * 1e3,
    }
}

fn run_inner(
    engine: &dyn Engine,
    case: &Case,
    nondeterministic: bool,
    ops: &mut Vec<String>,
) -> Result<(), EngineError> {
    let failed = |e: anyhow::Error| EngineError::Failed(format!("{e:#}"));
    let model = quorum::loader::model_from_file(&case.model_path(), &Default::default())
        .map_err(|e| EngineError::Failed(e.to_string()))?;
    for op in model.all_nodes().iter().map(|n| n.qualified_op()) {
        if !ops.contains(&op) {
            ops.push(op);
        }
    }
    let sets = case::data_sets(case, &model).map_err(failed)?;
    let prepared = engine.prepare(&case.model_path())?;
    let tol = tolerance::for_case(&case.id);
    for set in sets {
        let outputs = prepared.run(set.inputs)?;
        if nondeterministic {
            continue;
        }
        if outputs.len() < set.outputs.len() {
            return Err(EngineError::Failed(format!(
                "{}: {} outputs, expected {}",
                set.name,
                outputs.len(),
                set.outputs.len()
            )));
        }
        for (k, (a, e)) in outputs.iter().zip(&set.outputs).enumerate() {
            tolerance::compare(a, e, tol).map_err(|m| {
                EngineError::Failed(format!("{} output {k}: {}", set.name, m.message))
            })?;
        }
    }
    Ok(())
}

/// Runs `cases` on `engine` with `jobs` threads, calling `progress` after each case.
pub fn run_all(
    engine: &dyn Engine,
    cases: &[Case],
    nondeterministic: &(dyn Fn(&str) -> bool + Sync),
    jobs: usize,
    progress: &(dyn Fn(&Outcome) + Sync),
) -> Vec<Outcome> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs.max(1))
        .build();
    let work = || {
        cases
            .par_iter()
            .map(|c| {
                let o = run_case(engine, c, nondeterministic(&c.id));
                progress(&o);
                o
            })
            .collect::<Vec<_>>()
    };
    match pool {
        Ok(p) => p.install(work),
        Err(_) => work(),
    }
}

/// Silences the default panic message while cases run (a panic becomes a failed case with its message).
pub fn quiet_panics() {
    std::panic::set_hook(Box::new(|_| {}));
}
