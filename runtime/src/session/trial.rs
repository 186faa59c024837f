//! `auto`'s whole-model trial: its first runs time three placements of the same model and every
//! later run uses the fastest.
//!
//! The measured thresholds (`dispatch`) judge one node alone, from one-node models whose inputs
//! start on the host and whose output is downloaded: on a machine whose CPU is strong, every large
//! node "wins" on the CPU that way, because its measurement pays the transfers a chain of device
//! nodes does not. The first node of a model then stays on the CPU, its output is on the host, the
//! next node sees host inputs again, and the whole model follows; on the H200 that made `auto`
//! 3–60× slower than CUDA alone on every light model. A node's rule cannot see the chain; a
//! measurement of the whole model can. So `auto` times, over its first [`TRIAL_RUNS`] runs, the
//! per-node rule ([`Whole::Nodes`]), every claimed node on its device ([`Whole::Device`]) and the
//! CPU alone ([`Whole::Cpu`]), each placement's [`TRIAL_ROUNDS`] runs back to back with the first
//! untimed (it pays what a switch costs: weights uploaded or packed, kernels built, a device whose
//! clocks dropped while the CPU ran), and keeps the one with the smallest time (the fastest sample
//! of each, the least disturbed by other work). The first version interleaved the placements:
//! every timed per-node run then came right after a 50 ms CPU run, and on the H200 the per-node
//! placement of light alexnet timed 1.09 ms against 0.81 for "every node on the device" although
//! both put all 24 nodes on CUDA — most likely the cost of a device left idle for 50 ms, which
//! back to back a placement's own untimed run absorbs. Every placement computes
//! the same model with kernels judged by the same oracles, so which one ran is a matter of speed
//! only. Sessions that capture device graphs skip the trial (a capture needs every node on the
//! device; the per-node rule decides there, as before).
use std::sync::Mutex;

/// How a run places the nodes an accelerator claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Whole {
    /// Each node by the measured thresholds (`dispatch`).
    Nodes,
    /// Every claimed node on its device.
    Device,
    /// Every node on the CPU.
    Cpu,
}

impl Whole {
    const ALL: [Whole; 3] = [Whole::Nodes, Whole::Device, Whole::Cpu];

    pub fn describe(self) -> &'static str {
        match self {
            Whole::Nodes => "each node by the measured thresholds",
            Whole::Device => "every claimed node on its device",
            Whole::Cpu => "the CPU alone",
        }
    }

    /// The rule a node's decision names when this placement decided it (not the per-node rule).
    pub fn rule(self) -> &'static str {
        match self {
            Whole::Nodes => "auto's whole-model trial: each node by the measured thresholds",
            Whole::Device => "auto's whole-model trial: every claimed node on its device",
            Whole::Cpu => "auto's whole-model trial: the CPU alone",
        }
    }
}

/// Runs of each placement in the trial: the first untimed, the rest timed.
pub const TRIAL_ROUNDS: usize = 3;
/// Runs the trial takes before every run uses its choice.
pub const TRIAL_RUNS: usize = TRIAL_ROUNDS * Whole::ALL.len();

#[derive(Debug, Default)]
struct State {
    /// Runs handed a placement so far.
    started: usize,
    /// Timed runs per placement (milliseconds), indexed like `Whole::ALL`.
    samples: [Vec<f64>; 3],
    chosen: Option<Whole>,
}

/// The trial of one session (off: every run uses the per-node rule).
#[derive(Debug)]
pub struct Trial {
    on: bool,
    state: Mutex<State>,
}

/// What a run was given: its placement, and whether its time counts.
#[derive(Debug, Clone, Copy)]
pub struct Ticket {
    pub whole: Whole,
    timed: bool,
}

impl Ticket {
    /// A run outside the trial (a graph capture): the per-node rule, untimed.
    pub fn per_node() -> Ticket {
        Ticket {
            whole: Whole::Nodes,
            timed: false,
        }
    }
}

impl Trial {
    pub fn new(on: bool) -> Trial {
        Trial {
            on,
            state: Mutex::new(State::default()),
        }
    }

    /// The placement of the next run.
    pub fn begin(&self) -> Ticket {
        let untimed = |whole| Ticket {
            whole,
            timed: false,
        };
        if !self.on {
            return Ticket::per_node();
        }
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = st.chosen {
            return untimed(w);
        }
        let i = st.started;
        st.started += 1;
        if i >= TRIAL_RUNS {
            // Runs of the trial failed or are still running on other threads: decide with what
            // was measured (the per-node rule where nothing was).
            let w = best(&st.samples).unwrap_or(Whole::Nodes);
            st.chosen = Some(w);
            return untimed(w);
        }
        Ticket {
            whole: Whole::ALL[i / TRIAL_ROUNDS],
            timed: !i.is_multiple_of(TRIAL_ROUNDS),
        }
    }

    /// Records a finished run's wall time; the choice is made once every placement has its timed
    /// runs.
    pub fn end(&self, ticket: Ticket, ms: f64) {
        if !ticket.timed {
            return;
        }
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let k = Whole::ALL
            .iter()
            .position(|w| *w == ticket.whole)
            .unwrap_or(0);
        st.samples[k].push(ms);
        if st.chosen.is_none() && st.samples.iter().all(|s| s.len() >= TRIAL_ROUNDS - 1) {
            st.chosen = best(&st.samples);
        }
    }

    /// Runs a caller should let pass before timing the steady state (0 without a trial).
    pub fn runs(&self) -> usize {
        if self.on { TRIAL_RUNS } else { 0 }
    }

    /// The trial in words: each placement's fastest timed run and the choice, or how far it got.
    pub fn report(&self) -> Option<String> {
        if !self.on {
            return None;
        }
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let times: Vec<String> = Whole::ALL
            .iter()
            .zip(&st.samples)
            .map(|(w, s)| match fastest(s) {
                Some(ms) => format!("{} {ms:.3} ms", w.describe()),
                None => format!("{} not timed yet", w.describe()),
            })
            .collect();
        Some(match st.chosen {
            Some(w) => format!("{}; chosen: {}", times.join(", "), w.describe()),
            None => format!(
                "trial running ({} of {TRIAL_RUNS} runs started): {}",
                st.started.min(TRIAL_RUNS),
                times.join(", ")
            ),
        })
    }
}

fn fastest(s: &[f64]) -> Option<f64> {
    s.iter().copied().min_by(f64::total_cmp)
}

/// The placement with the smallest fastest sample, among those timed.
fn best(samples: &[Vec<f64>; 3]) -> Option<Whole> {
    Whole::ALL
        .iter()
        .zip(samples)
        .filter_map(|(w, s)| fastest(s).map(|ms| (*w, ms)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(w, _)| w)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drives a trial with a time per placement; returns the placements the runs were given.
    fn drive(t: &Trial, mut ms: impl FnMut(Whole) -> f64, runs: usize) -> Vec<Whole> {
        (0..runs)
            .map(|_| {
                let k = t.begin();
                t.end(k, ms(k.whole));
                k.whole
            })
            .collect()
    }

    #[test]
    fn the_fastest_placement_is_kept_after_the_trial() {
        for (fast, times) in [
            (Whole::Device, [11.0, 0.7, 38.0]),
            (Whole::Cpu, [0.09, 0.08, 0.04]),
            (Whole::Nodes, [1.0, 2.0, 3.0]),
        ] {
            let t = Trial::new(true);
            let ms = |w: Whole| times[Whole::ALL.iter().position(|x| *x == w).unwrap()];
            let given = drive(&t, ms, TRIAL_RUNS + 5);
            // Each placement gets its runs back to back; then only the fastest.
            for (k, w) in Whole::ALL.iter().enumerate() {
                let runs = &given[k * TRIAL_ROUNDS..(k + 1) * TRIAL_ROUNDS];
                assert!(runs.iter().all(|g| g == w), "{given:?}");
            }
            assert!(given[TRIAL_RUNS..].iter().all(|g| *g == fast), "{given:?}");
            assert!(t.report().unwrap().ends_with(fast.describe()));
        }
    }

    #[test]
    fn the_untimed_round_does_not_decide() {
        // The first round is 100× slower on the device (uploads, kernel builds): not counted.
        let t = Trial::new(true);
        let mut first = true;
        let given = drive(
            &t,
            |w| match w {
                Whole::Device if std::mem::take(&mut first) => 100.0,
                Whole::Device => 1.0,
                _ => 5.0,
            },
            TRIAL_RUNS + 1,
        );
        assert_eq!(given[TRIAL_RUNS], Whole::Device);
    }

    #[test]
    fn off_means_the_per_node_rule_every_time() {
        let t = Trial::new(false);
        assert!(drive(&t, |_| 1.0, 20).iter().all(|w| *w == Whole::Nodes));
        assert!(t.report().is_none());
    }

    #[test]
    fn runs_that_never_end_do_not_stall_the_choice() {
        // Runs begun but never ended (errors, other threads): after the trial's runs, decide.
        let t = Trial::new(true);
        let k = t.begin(); // Nodes, untimed
        t.end(k, 1.0);
        for _ in 1..TRIAL_RUNS {
            t.begin();
        }
        assert_eq!(
            t.begin().whole,
            Whole::Nodes,
            "nothing timed: the per-node rule"
        );
        assert!(t.report().unwrap().contains("chosen"));
    }

    /// A broken trial that kept the first placement it tried must fail the first test's checks:
    /// the choice is the minimum over placements, not the first.
    #[test]
    fn choosing_the_first_would_be_caught() {
        let samples = [vec![11.0, 12.0], vec![0.7, 0.8], vec![38.0, 39.0]];
        assert_eq!(best(&samples), Some(Whole::Device));
        assert_ne!(best(&samples), Some(Whole::ALL[0]));
    }
}
