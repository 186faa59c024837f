//! `quorum compare`: the model on two placements, every intermediate value compared, and the first
//! node whose kernel is wrong on its own named with its element, both values and the bound
//! (`quorum::compare`).
use quorum::compare::{Comparison, NodeVerdict, Own, compare};

use crate::common::{CliResult, ModelArgs, fail, from_quorum};

#[derive(clap::Args)]
pub struct Args {
    /// The placement under suspicion is --provider; this is the one it is compared against.
    #[command(flatten)]
    model: ModelArgs,
    /// The trusted placement, in --provider's syntax.
    #[arg(long, default_value = "cpu")]
    against: String,
    /// Seed for inputs that are not given.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print every node's verdict, identical ones included.
    #[arg(long)]
    all: bool,
}

fn line(n: &quorum::compare::NodeComparison) -> String {
    let at = format!(
        "node '{}' ({}) on {} / {}",
        n.node,
        n.op,
        n.placed.0.name(),
        n.placed.1.name()
    );
    match &n.verdict {
        NodeVerdict::Identical => format!("{at}: identical"),
        NodeVerdict::Agrees => format!("{at}: within its bound"),
        NodeVerdict::Unjudged { why, max_diff } => {
            format!("{at}: unjudged ({why}); largest difference {max_diff:e}")
        }
        NodeVerdict::Diverges { why, own } => {
            let own = match own {
                Own::Right => "on its own inputs it agrees with both oracles: the difference came \
                               through its inputs"
                    .to_string(),
                Own::Wrong(why) => format!("on its own inputs it is wrong too: {why}"),
                Own::Unjudged(why) => format!("unjudged on its own inputs: {why}"),
            };
            format!("{at}: diverges from the trusted answer, {why}\n    {own}")
        }
    }
}

pub fn main(a: Args) -> CliResult<()> {
    let suspect = a.model.options()?;
    let mut trusted = suspect.clone();
    let (providers, min) =
        quorum::parse_providers(&a.against).map_err(|e| fail(2, format!("--against: {e}")))?;
    trusted.providers = providers;
    trusted.min_device_elements = min;
    let session = a.model.session_with(trusted.clone())?;
    let (inputs, generated) = a.model.inputs(&session, a.seed)?;
    if !generated.is_empty() {
        eprintln!(
            "note: generated inputs (seed {}): {}",
            a.seed,
            generated.join(", ")
        );
    }
    let model = session.model().clone();
    drop(session);
    let c: Comparison = compare(&model, suspect, trusted, &inputs).map_err(from_quorum)?;
    // The first divergence, every wrong or unjudged node; the rest (drift through inputs) with --all.
    let first = c.first_divergence().map(|n| n as *const _);
    for n in &c.nodes {
        let shown = match &n.verdict {
            NodeVerdict::Identical | NodeVerdict::Agrees => a.all,
            NodeVerdict::Diverges {
                own: Own::Right, ..
            } => a.all || first == Some(n as *const _),
            _ => true,
        };
        if shown {
            println!("{}", line(n));
        }
    }
    let [same, within, diverged, unjudged] = c.counts();
    println!(
        "compared {} of {} nodes ({} against {}): {same} identical, {within} within their bounds, \
         {diverged} diverging, {unjudged} unjudged",
        c.nodes.len(),
        model.graph.nodes.len(),
        a.model.provider,
        a.against
    );
    match c.first_wrong() {
        Some(n) => {
            println!("first wrong node: '{}' ({})", n.node, n.op);
            Err(fail(
                6,
                format!("node '{}' ({}) is wrong on its own", n.node, n.op),
            ))
        }
        None => {
            println!("no node is wrong on its own");
            Ok(())
        }
    }
}
