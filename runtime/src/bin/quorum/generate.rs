//! `quorum generate`: greedy token-by-token generation with a decoder that takes its key/value
//! cache as inputs (`quorum::generate`), with the time of the prompt's run and of each new token.
use quorum::generate::{CacheLayout, GenerateOptions, generate, generate_with};

use crate::common::{CliResult, ModelArgs, fail, from_quorum, print_verification};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// The prompt's token ids, comma-separated (default: --prompt-len ids drawn with --seed).
    #[arg(long, value_delimiter = ',')]
    prompt: Vec<i64>,
    /// Length of a generated prompt (without --prompt).
    #[arg(long, default_value_t = 8)]
    prompt_len: usize,
    /// Largest token id of a generated prompt, exclusive (default: the logits' width after a first
    /// run, capped at 1000).
    #[arg(long)]
    vocab: Option<i64>,
    /// Seed of a generated prompt.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Tokens to generate after the prompt.
    #[arg(long, default_value_t = 32)]
    new_tokens: usize,
    /// Generations to run (the first warms up; the times are the others', or the first's alone).
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Hold the cache padded in front to buckets of N, 2N, 4N, .. positions (the padding masked
    /// out), so that the steps of a bucket share their shapes and one captured graph: `off`, a
    /// bucket N, or `auto` (64 where graph capture is on and the model takes attention_mask and
    /// position_ids, else off).
    #[arg(long, default_value = "auto")]
    pad_cache: String,
    /// With a padded cache, bring it back to the host after every step instead of keeping it in
    /// the captured graph's buffers between replays (for comparison).
    #[arg(long)]
    no_carry: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let at = ((sorted.len() - 1) as f64 * p / 100.0).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

pub fn main(a: Args) -> CliResult<()> {
    if !a.model.inputs.is_empty() {
        return Err(fail(
            2,
            "--input does not apply to generate: the prompt is --prompt (or --prompt-len)",
        ));
    }
    if a.new_tokens == 0 || a.repeat == 0 {
        return Err(fail(2, "--new-tokens and --repeat must be at least 1"));
    }
    let session = a.model.session()?;
    let layout = CacheLayout::of(&session).map_err(from_quorum)?;
    let pad_cache = match a.pad_cache.as_str() {
        "off" => None,
        "auto" => (session.options().graph_capture != quorum::session::GraphCapture::Off
            && layout.mask.is_some()
            && layout.positions.is_some())
        .then_some(64),
        n => match n.parse::<usize>() {
            Ok(b) if b > 0 => Some(b),
            _ => {
                return Err(fail(
                    2,
                    format!("--pad-cache '{n}' is not off, auto or a positive bucket length"),
                ));
            }
        },
    };
    let options = GenerateOptions {
        pad_cache,
        carry: !a.no_carry,
        ..Default::default()
    };
    let prompt = if a.prompt.is_empty() {
        let vocab = match a.vocab {
            Some(v) if v > 0 => v,
            Some(v) => return Err(fail(2, format!("--vocab {v} must be positive"))),
            // The declared width, or one run of a single token where the model leaves it open.
            None => match layout.vocab {
                Some(v) => v.min(1000) as i64,
                None => {
                    let probe =
                        generate(&session, &layout, &[0], 1, |_, _| {}).map_err(from_quorum)?;
                    probe.logits[0].len().min(1000) as i64
                }
            },
        };
        let mut rng = quorum::inputs::Rng::new(a.seed);
        (0..a.prompt_len.max(1))
            .map(|_| (rng.next_u64() % vocab as u64) as i64)
            .collect()
    } else {
        a.prompt.clone()
    };
    let mut runs = Vec::with_capacity(a.repeat);
    for r in 0..a.repeat {
        let shown = r == 0 && !a.json;
        let g = generate_with(
            &session,
            &layout,
            &prompt,
            a.new_tokens,
            &options,
            |_, t| {
                if shown {
                    print!("{t} ");
                    use std::io::Write;
                    let _ = std::io::stdout().flush();
                }
            },
        );
        if shown {
            println!();
        }
        print_verification(&session);
        runs.push(g.map_err(from_quorum)?);
    }
    let timed = if runs.len() > 1 {
        &runs[1..]
    } else {
        &runs[..]
    };
    let mut steps: Vec<f64> = timed
        .iter()
        .flat_map(|g| g.steps.iter().map(|d| d.as_secs_f64() * 1e3))
        .collect();
    steps.sort_by(f64::total_cmp);
    let mut prefill: Vec<f64> = timed
        .iter()
        .map(|g| g.prefill.as_secs_f64() * 1e3)
        .collect();
    prefill.sort_by(f64::total_cmp);
    let tokens = &runs[0].tokens;
    if runs.iter().any(|g| &g.tokens != tokens) {
        return Err(fail(
            1,
            "the generations gave different tokens for the same prompt",
        ));
    }
    let median = percentile(&steps, 50.0);
    if a.json {
        let j = serde_json::json!({
            "model": a.model.model.display().to_string(),
            "provider": a.model.provider,
            "prompt": prompt,
            "tokens": tokens,
            "generations_timed": timed.len(),
            "prefill_ms": percentile(&prefill, 50.0),
            "token_ms_median": median,
            "token_ms_p10": percentile(&steps, 10.0),
            "token_ms_p90": percentile(&steps, 90.0),
            "tokens_per_s": 1e3 / median,
            "cache": layout.cache.len(),
            "pad_cache": pad_cache,
            "carry": options.carry && pad_cache.is_some(),
            "graphs": session.graph_report(),
            "counters": session.counters(),
            "capture_blocker": session.capture_blocker(),
        });
        println!("{j}");
    } else {
        println!(
            "{}: prompt of {} tokens, {} new{}; prefill {:.3} ms; per token median {:.3} ms (p10 {:.3}, p90 {:.3}), {:.1} tokens/s over {} generation(s)",
            a.model.model.display(),
            prompt.len(),
            tokens.len(),
            pad_cache.map_or(String::new(), |b| format!(
                ", cache padded to buckets from {b}"
            )),
            percentile(&prefill, 50.0),
            median,
            percentile(&steps, 10.0),
            percentile(&steps, 90.0),
            1e3 / median,
            timed.len()
        );
    }
    Ok(())
}
