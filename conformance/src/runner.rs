//! Runs cases on an engine and classifies each result.
use std::panic::AssertUnwindSafe;
use std::time::Instant;

use quorum::Value;
use rayon::prelude::*;

use crate::case::{self, Case};
use crate::coverage::Coverage;
use crate::engine::{Engine, EngineError};
use crate::expect::{Expectations, Status};
use crate::{nondeterministic, tolerance, undefined};

#[derive(Debug, Clone, serde::Serialize)]
pub struct Outcome {
    pub id: String,
    pub status: &'static str,
    /// Why the case did not pass; for a case that did, what was left out of the comparison or how a
    /// nondeterministic case was judged (empty when there is nothing to say).
    pub detail: String,
    pub ops: Vec<String>,
    pub millis: f64,
    /// Output elements not compared because the specification leaves their value undefined
    /// ([`undefined`]), over all data sets.
    pub not_compared: usize,
    /// Where the nodes ran, from engines with a device.
    pub coverage: Option<Coverage>,
    /// Unsupported by a rule the engine states (`EngineError::Uncovered`): expected without a line
    /// in the engine's list.
    pub by_rule: bool,
}

impl Outcome {
    pub fn status(&self) -> Status {
        Status::parse(self.status).unwrap_or(Status::Fail)
    }

    /// The status `expected` holds for this case: its line's, else `unsupported` for a case the
    /// engine's own rule leaves unsupported, else pass.
    pub fn expected(&self, expected: &Expectations) -> Status {
        match expected.entries.get(&self.id) {
            Some(e) => e.status,
            None if self.by_rule => Status::Unsupported,
            None => Status::Pass,
        }
    }
}

/// What a case's run leaves beside its verdict.
#[derive(Default)]
struct Notes {
    ops: Vec<String>,
    not_compared: usize,
    why_not_compared: Option<String>,
    judged: Vec<String>,
    /// With a step-bound override: the most steps any compared element was from the expected one.
    steps: Option<u128>,
    coverage: Option<Coverage>,
}

/// Runs one case. With `nondeterministic`, the values are judged by rules instead of compared
/// ([`nondeterministic::check`]).
pub fn run_case(engine: &dyn Engine, case: &Case, nondeterministic: bool) -> Outcome {
    let start = Instant::now();
    let mut notes = Notes::default();
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
        run_inner(engine, case, nondeterministic, &mut notes)
    }));
    let by_rule = matches!(result, Ok(Err(EngineError::Uncovered(_))));
    let (status, mut detail) = match result {
        Ok(Ok(())) if nondeterministic => (Status::Nondeterministic, notes.judged.join(" | ")),
        Ok(Ok(())) => match notes.steps {
            Some(n) => (
                Status::Pass,
                format!(
                    "at most {n} step{} from the expected values (override: {})",
                    if n == 1 { "" } else { "s" },
                    tolerance::for_case(engine.name(), &case.id).steps
                ),
            ),
            None => (Status::Pass, String::new()),
        },
        Ok(Err(EngineError::Unsupported(m) | EngineError::Uncovered(m))) => {
            (Status::Unsupported, m)
        }
        Ok(Err(EngineError::Failed(m))) => (Status::Fail, m),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
            (Status::Fail, format!("PANIC: {}", msg.unwrap_or_default()))
        }
    };
    if let Some(why) = &notes.why_not_compared {
        let note = format!(
            "{} elements not compared (undefined by the specification: {why})",
            notes.not_compared
        );
        detail = if detail.is_empty() {
            note
        } else {
            format!("{detail}; {note}")
        };
    }
    Outcome {
        id: case.id.clone(),
        status: status.as_str(),
        detail: detail.replace('\n', " "),
        ops: notes.ops,
        millis: start.elapsed().as_secs_f64() * 1e3,
        not_compared: notes.not_compared,
        coverage: notes.coverage,
        by_rule,
    }
}

fn run_inner(
    engine: &dyn Engine,
    case: &Case,
    nondeterministic: bool,
    notes: &mut Notes,
) -> Result<(), EngineError> {
    let failed = |e: anyhow::Error| EngineError::Failed(format!("{e:#}"));
    let model = quorum::loader::model_from_file(&case.model_path(), &Default::default())
        .map_err(|e| EngineError::Failed(e.to_string()))?;
    for op in model.all_nodes().iter().map(|n| n.qualified_op()) {
        if !notes.ops.contains(&op) {
            notes.ops.push(op);
        }
    }
    let sets = case::data_sets(case, &model).map_err(failed)?;
    let prepared = engine.prepare(&case.model_path())?;
    let tol = tolerance::for_case(engine.name(), &case.id);
    let judge = || -> Result<(), EngineError> {
        for set in sets {
            let inputs = set.inputs.clone();
            let outputs = prepared.run(set.inputs)?;
            if nondeterministic {
                let judged = nondeterministic::check(&model, &inputs, &outputs, &set.outputs)
                    .map_err(|m| {
                        EngineError::Failed(format!("{} (nondeterministic rules): {m}", set.name))
                    })?;
                notes.judged.push(format!("{}: {judged}", set.name));
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
                let undefined = undefined::for_output(&model, &inputs, k, e);
                let skip = undefined.as_ref().map_or(&[][..], |u| &u.mask[..]);
                if let Some(u) = &undefined {
                    notes.not_compared += u.count;
                    notes.why_not_compared = Some(u.why.clone());
                }
                tolerance::compare_except(a, e, tol, skip).map_err(|m| {
                    EngineError::Failed(format!("{} output {k}: {}", set.name, m.message))
                })?;
                if tol.steps > 0
                    && let (Value::Tensor(a), Value::Tensor(e)) = (a, e)
                    && let Some(n) = tolerance::max_steps(a, e)
                {
                    notes.steps = Some(notes.steps.map_or(n, |m| m.max(n)));
                }
            }
        }
        Ok(())
    };
    let result = judge();
    notes.coverage = prepared.coverage();
    result
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expect::Expectation;

    fn outcome(id: &str, status: Status, by_rule: bool) -> Outcome {
        Outcome {
            id: id.into(),
            status: status.as_str(),
            detail: String::new(),
            ops: vec![],
            millis: 0.0,
            not_compared: 0,
            coverage: None,
            by_rule,
        }
    }

    /// A line wins over the rule, the rule makes an unlisted case unsupported, and nothing else
    /// does: an unlisted case not covered by the rule must pass.
    #[test]
    fn the_expected_status_is_the_line_then_the_rule_then_pass() {
        let mut list = Expectations::default();
        list.entries.insert(
            "listed".into(),
            Expectation {
                status: Status::Fail,
                reason: "a known wrong result".into(),
                line: 3,
            },
        );
        let by_rule = outcome("unlisted", Status::Unsupported, true);
        assert_eq!(by_rule.expected(&list), Status::Unsupported);
        assert_eq!(
            outcome("listed", Status::Unsupported, true).expected(&list),
            Status::Fail
        );
        // The broken variant: an unsupported case the rule does not cover is a surprise.
        let gap = outcome("unlisted", Status::Unsupported, false);
        assert_eq!(gap.expected(&list), Status::Pass);
        assert_ne!(gap.status(), gap.expected(&list));
    }
}
