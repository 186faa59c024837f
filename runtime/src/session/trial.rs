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
//! back to back a placement's own untimed run absorbs. Sessions that capture device graphs skip
//! the trial (a capture needs every node on the device; the per-node rule decides there, as
//! before).
//!
//! The placements' kernels differ in their last bits, so the choice changes the numbers a user
//! gets. Two rules keep that from going unnoticed:
//!
//! - **Checked before kept.** The untimed run of each placement that uses a device is verified in
//!   shadow mode (every device result judged by both oracles, a wrong one replaced by the CPU's), and
//!   a placement with a result outside its class bound is never chosen (the report says which and
//!   how many). Each kept placement is then within its bounds of the exact answer node by node, on
//!   the input the trial ran; that costs one verified run per device placement, once.
//! - **Kept across processes.** With a store (`SessionOptions::auto_choices`; the CLI keeps one
//!   in the user's cache folder), the choice is recorded per model, adapter and input shapes, and a
//!   later session of the same key uses it with no trial: repeated processes on one machine
//!   compute with the same kernels. `quorum info` says which placement and why.
use std::sync::Mutex;

/// How a run places the nodes an accelerator claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

/// What shadow verification found in a placement's checked run.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Checked {
    pub checks: u64,
    pub mismatched: u64,
    pub unsettled: u64,
}

#[derive(Debug, Default)]
struct State {
    /// Runs handed a placement so far.
    started: usize,
    /// Timed runs per placement (milliseconds), indexed like `Whole::ALL`.
    samples: [Vec<f64>; 3],
    /// The checked run's findings per placement, indexed like `Whole::ALL`.
    checked: [Option<Checked>; 3],
    chosen: Option<Whole>,
    /// Where the choice came from when an earlier process made it (the store's words).
    kept: Option<String>,
}

impl State {
    /// Placements whose checked run found a result outside its bound.
    fn disqualified(&self) -> [bool; 3] {
        self.checked.map(|c| c.is_some_and(|c| c.mismatched > 0))
    }

    fn choose(&mut self) -> Option<Whole> {
        best(&self.samples, self.disqualified())
    }
}

/// The trial of one session (off: every run uses the per-node rule).
#[derive(Debug)]
pub struct Trial {
    on: bool,
    state: Mutex<State>,
}

/// What a run was given: its placement, whether its time counts, and whether its device results
/// are checked (shadow verification) for the trial.
#[derive(Debug, Clone, Copy)]
pub struct Ticket {
    pub whole: Whole,
    timed: bool,
    pub check: bool,
}

impl Ticket {
    /// A run outside the trial (a graph capture): the per-node rule, untimed.
    pub fn per_node() -> Ticket {
        Ticket {
            whole: Whole::Nodes,
            timed: false,
            check: false,
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

    /// The placement of the next run. Before the trial's first run, `kept` may give the choice an
    /// earlier process recorded (the placement, and where it was recorded): then there is no trial.
    pub fn begin(&self, kept: impl FnOnce() -> Option<(Whole, String)>) -> Ticket {
        let untimed = |whole| Ticket {
            whole,
            timed: false,
            check: false,
        };
        if !self.on {
            return Ticket::per_node();
        }
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = st.chosen {
            return untimed(w);
        }
        if st.started == 0
            && let Some((w, from)) = kept()
        {
            st.chosen = Some(w);
            st.kept = Some(from);
            return untimed(w);
        }
        let i = st.started;
        st.started += 1;
        if i >= TRIAL_RUNS {
            // Runs of the trial failed or are still running on other threads: decide with what
            // was measured (the per-node rule where nothing was).
            let w = st.choose().unwrap_or(Whole::Nodes);
            st.chosen = Some(w);
            return untimed(w);
        }
        let whole = Whole::ALL[i / TRIAL_ROUNDS];
        let first = i.is_multiple_of(TRIAL_ROUNDS);
        Ticket {
            whole,
            timed: !first,
            check: first && whole != Whole::Cpu,
        }
    }

    /// Records what the checked run of `ticket`'s placement found.
    pub fn checked(&self, ticket: Ticket, found: Checked) {
        if !ticket.check {
            return;
        }
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.checked[index(ticket.whole)] = Some(found);
    }

    /// Records a finished run's wall time; the choice is made once every placement has its timed
    /// runs. Returns the choice when this run made it (for the caller to record).
    pub fn end(&self, ticket: Ticket, ms: f64) -> Option<Whole> {
        if !ticket.timed {
            return None;
        }
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.samples[index(ticket.whole)].push(ms);
        if st.chosen.is_none() && st.samples.iter().all(|s| s.len() >= TRIAL_ROUNDS - 1) {
            st.chosen = st.choose();
            return st.chosen;
        }
        None
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
        if let (Some(w), Some(from)) = (st.chosen, &st.kept) {
            return Some(format!(
                "chosen: {} (kept from {from}; no trial)",
                w.describe()
            ));
        }
        let times: Vec<String> = Whole::ALL
            .iter()
            .zip(&st.samples)
            .zip(&st.checked)
            .map(|((w, s), c)| {
                let time = match fastest(s) {
                    Some(ms) => format!("{} {ms:.3} ms", w.describe()),
                    None => format!("{} not timed yet", w.describe()),
                };
                match c {
                    Some(c) if c.mismatched > 0 => format!(
                        "{time} (not kept: {} of {} device results outside their bounds)",
                        c.mismatched, c.checks
                    ),
                    Some(c) => format!(
                        "{time} ({} device results checked, {} unsettled)",
                        c.checks, c.unsettled
                    ),
                    None => time,
                }
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

fn index(w: Whole) -> usize {
    Whole::ALL.iter().position(|x| *x == w).unwrap_or(0)
}

/// The placement with the smallest fastest sample, among those timed and not disqualified.
fn best(samples: &[Vec<f64>; 3], disqualified: [bool; 3]) -> Option<Whole> {
    Whole::ALL
        .iter()
        .zip(samples)
        .zip(disqualified)
        .filter(|(_, out)| !out)
        .filter_map(|((w, s), _)| fastest(s).map(|ms| (*w, ms)))
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
                let k = t.begin(|| None);
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
        let k = t.begin(|| None); // Nodes, untimed
        t.end(k, 1.0);
        for _ in 1..TRIAL_RUNS {
            t.begin(|| None);
        }
        assert_eq!(
            t.begin(|| None).whole,
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
        assert_eq!(best(&samples, [false; 3]), Some(Whole::Device));
        assert_ne!(best(&samples, [false; 3]), Some(Whole::ALL[0]));
    }

    /// The untimed first run of each device placement is checked, the CPU's is not; a placement
    /// whose checked run had a result outside its bound is never kept, however fast, and the
    /// report says why. Its twin, a clean check, keeps the fastest.
    #[test]
    fn a_placement_with_a_wrong_result_is_never_kept() {
        for wrong in [0, 2] {
            let t = Trial::new(true);
            let mut given = Vec::new();
            for _ in 0..TRIAL_RUNS {
                let k = t.begin(|| None);
                given.push((k.whole, k.check));
                if k.check && k.whole == Whole::Device {
                    t.checked(
                        k,
                        Checked {
                            checks: 40,
                            mismatched: wrong,
                            unsettled: 1,
                        },
                    );
                } else if k.check {
                    t.checked(
                        k,
                        Checked {
                            checks: 12,
                            mismatched: 0,
                            unsettled: 0,
                        },
                    );
                }
                t.end(
                    k,
                    match k.whole {
                        Whole::Device => 1.0,
                        Whole::Nodes => 3.0,
                        Whole::Cpu => 2.0,
                    },
                );
            }
            let checked: Vec<Whole> = given.iter().filter(|g| g.1).map(|g| g.0).collect();
            assert_eq!(checked, vec![Whole::Nodes, Whole::Device]);
            let next = t.begin(|| None).whole;
            let report = t.report().unwrap();
            if wrong > 0 {
                assert_eq!(next, Whole::Cpu, "{report}");
                assert!(report.contains("not kept: 2 of 40"), "{report}");
            } else {
                assert_eq!(next, Whole::Device, "{report}");
                assert!(report.contains("40 device results checked"), "{report}");
            }
        }
    }

    /// A choice recorded by an earlier process is used from the first run, with no trial, and the
    /// report says where it came from; without one the trial runs.
    #[test]
    fn a_kept_choice_skips_the_trial() {
        let t = Trial::new(true);
        let first = t.begin(|| Some((Whole::Cpu, "the store".into())));
        assert_eq!((first.whole, first.check), (Whole::Cpu, false));
        assert!(t.end(first, 1.0).is_none());
        assert!((0..5).all(|_| t.begin(|| panic!("asked again")).whole == Whole::Cpu));
        assert!(t.report().unwrap().contains("kept from the store"));
        let fresh = Trial::new(true);
        assert_eq!(fresh.begin(|| None).whole, Whole::Nodes);
    }
}
