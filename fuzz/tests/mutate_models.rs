//! Mutated corpus models never panic and never hang: each case decodes a real model, applies a few
//! structure-aware mutations and maybe a byte mutation, then loads and runs it. Seeded, so a failure
//! replays; `QUORUM_MUTATION_CASES` changes how many cases run (default 3000), and
//! `QUORUM_MUTATION_SEED=N` draws another sequence of cases, and `QUORUM_MUTATION_VERBOSE=1` prints every
//! case with its outcome.
#![forbid(unsafe_code)]
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use prost::Message;
use quorum::proto::ModelProto;
use quorum_fuzz::mutate::{self, Bytes, Mutation};
use quorum_fuzz::{Outcome, load_and_run, seed_models, small_options};

const TIMEOUT: Duration = Duration::from_secs(30);

#[test]
fn mutated_corpus_models_never_panic_or_hang() {
    let seeds = seed_models().expect("corpus models");
    assert!(
        seeds.len() >= 150,
        "only {} corpus models found",
        seeds.len()
    );
    let decoded: Vec<ModelProto> = seeds
        .iter()
        .map(|s| ModelProto::decode(&s.bytes[..]).expect("corpus models decode"))
        .collect();
    let cases = std::env::var("QUORUM_MUTATION_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 64,
        ..Config::default()
    };
    let seed: u64 = std::env::var("QUORUM_MUTATION_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut seed_bytes = [0x51u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes);
    let mut runner = TestRunner::new_with_rng(config, rng);
    let strategy = (
        0..seeds.len(),
        prop::collection::vec(mutate::mutation(), 1..4),
        mutate::bytes_mutation(),
    );
    let verbose = std::env::var_os("QUORUM_MUTATION_VERBOSE").is_some();
    let (ran, refused) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let start = Instant::now();
    let result = runner.run(
        &strategy,
        |(seed, mutations, bytes): (usize, Vec<Mutation>, Bytes)| {
            let mut model = decoded[seed].clone();
            for m in &mutations {
                mutate::apply(&mut model, m);
            }
            let mut encoded = model.encode_to_vec();
            mutate::apply_bytes(&mut encoded, &bytes);
            let case = || format!("{} with {mutations:?} and {bytes:?}", seeds[seed].id);
            if verbose {
                eprintln!("{}", case());
            }
            let outcome = load_and_run(encoded, small_options(), TIMEOUT);
            if verbose {
                eprintln!("  {outcome:?}");
            }
            match outcome {
                Outcome::Ran => ran.fetch_add(1, Ordering::Relaxed),
                Outcome::Refused(_) => refused.fetch_add(1, Ordering::Relaxed),
                Outcome::Panicked(msg) => {
                    return Err(TestCaseError::fail(format!("{}: panicked: {msg}", case())));
                }
                Outcome::Hung => {
                    return Err(TestCaseError::fail(format!(
                        "{}: still running after {TIMEOUT:?}",
                        case()
                    )));
                }
            };
            Ok(())
        },
    );
    let (ran, refused) = (ran.into_inner(), refused.into_inner());
    eprintln!(
        "{} executions in {:.1?} over {} corpus models: {ran} ran, {refused} refused with an error",
        ran + refused,
        start.elapsed(),
        seeds.len()
    );
    if let Err(e) = result {
        panic!("{e}");
    }
    assert_eq!(ran + refused, cases as usize);
    // Mutations that leave a model runnable must be part of the mix, or the run paths go untested.
    assert!(
        ran * 20 >= cases as usize,
        "only {ran} of {cases} mutated models ran"
    );
}
