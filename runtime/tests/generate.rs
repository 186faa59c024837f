//! Token-by-token generation (`quorum::generate`) against PyTorch: a two-layer GPT-2 with random
//! weights, exported by `benches/zoo/decoder.py` with its cache as inputs and outputs, beside the
//! tokens and logits the same loop gave in PyTorch (`generate.json`, where transformers' own
//! `generate` gave the same tokens). The loop here must pick the same tokens with logits within
//! f32 rounding of PyTorch's; a loop that feeds the cache back wrongly must not.
use std::path::PathBuf;

use quorum::generate::{CacheLayout, GenerateOptions, argmax, generate, generate_with};
use quorum::{Error, Session, SessionOptions};

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../benches/zoo/decoder-tiny")
}

struct Record {
    prompt: Vec<i64>,
    tokens: Vec<i64>,
    first: Vec<f64>,
    last: Vec<f64>,
}

fn record() -> Record {
    let text = std::fs::read_to_string(fixture().join("generate.json")).unwrap();
    let j: serde_json::Value = serde_json::from_str(&text).unwrap();
    let ints = |k: &str| -> Vec<i64> {
        j[k].as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect()
    };
    let floats = |k: &str| -> Vec<f64> {
        j[k].as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect()
    };
    assert_eq!(
        ints("tokens"),
        ints("transformers_generate_tokens"),
        "the fixture's own loop and transformers' generate disagree"
    );
    Record {
        prompt: ints("prompt"),
        tokens: ints("tokens"),
        first: floats("first_logits"),
        last: floats("last_logits"),
    }
}

fn session() -> Session {
    Session::from_file(fixture().join("model.onnx"), SessionOptions::default()).unwrap()
}

/// The largest difference between two logit rows, relative to the larger row's largest magnitude.
fn rel_diff(a: &[f32], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0f64, |m, v| m.max(v.abs())).max(1e-30);
    a.iter()
        .zip(b)
        .map(|(x, y)| (*x as f64 - y).abs())
        .fold(0.0, f64::max)
        / scale
}

#[test]
fn the_layout_is_read_from_the_model() {
    let s = session();
    let l = CacheLayout::of(&s).unwrap();
    assert_eq!(l.ids, "input_ids");
    assert_eq!(
        l.mask.as_ref().map(|m| m.0.as_str()),
        Some("attention_mask")
    );
    assert_eq!(
        l.positions.as_ref().map(|p| p.0.as_str()),
        Some("position_ids")
    );
    assert_eq!(l.logits, "logits");
    assert_eq!(
        l.vocab,
        Some(97),
        "the exporter declares the vocabulary's width"
    );
    assert_eq!(l.cache.len(), 4, "two layers, a key and a value each");
    assert_eq!(l.cache[0].input, "past_key_values.0.key");
    assert_eq!(l.cache[0].output, "present.0.key");
    assert_eq!(l.cache[3].output, "present.1.value");
    assert_eq!(l.cache[0].empty, vec![1, 2, 0, 16]);
    assert_eq!(l.cache[0].axis, 2);
}

#[test]
fn greedy_tokens_and_logits_match_pytorch() {
    let r = record();
    let s = session();
    let l = CacheLayout::of(&s).unwrap();
    let mut seen = Vec::new();
    let g = generate(&s, &l, &r.prompt, r.tokens.len(), |i, t| seen.push((i, t))).unwrap();
    assert_eq!(g.tokens, r.tokens);
    assert_eq!(
        seen,
        r.tokens.iter().copied().enumerate().collect::<Vec<_>>()
    );
    assert_eq!(g.steps.len(), r.tokens.len() - 1);
    // f32 sums in another order than PyTorch's: a few units of f32 rounding of the row's scale.
    let (first, last) = (
        rel_diff(&g.logits[0], &r.first),
        rel_diff(&g.logits[g.logits.len() - 1], &r.last),
    );
    assert!(
        first < 1e-5,
        "first step's logits off by {first:e} of scale"
    );
    assert!(last < 1e-5, "last step's logits off by {last:e} of scale");
}

/// The cache padded in front to buckets of 2, 4, 8, .. (every step after the prompt's pads, drops
/// or grows it), its padding poisoned with a large value: the mask hides the padding and the
/// positions are the tokens', so the tokens and logits are PyTorch's unpadded ones. (The broken
/// variant, padding the mask does not hide, is `generate`'s unit test.)
#[test]
fn a_padded_cache_gives_pytorchs_answer() {
    let r = record();
    let s = session();
    let l = CacheLayout::of(&s).unwrap();
    let o = GenerateOptions {
        pad_cache: Some(2),
        pad_value: 1e4,
        ..Default::default()
    };
    let g = generate_with(&s, &l, &r.prompt, r.tokens.len(), &o, |_, _| {}).unwrap();
    assert_eq!(g.tokens, r.tokens);
    let last = rel_diff(&g.logits[g.logits.len() - 1], &r.last);
    assert!(last < 1e-5, "last step's logits off by {last:e} of scale");
    // A model without position ids cannot be padded: an error, not a wrong answer.
    let mut no_pos = l.clone();
    no_pos.positions = None;
    match generate_with(&s, &no_pos, &r.prompt, 2, &o, |_, _| {}) {
        Err(Error::InvalidModel(m)) => assert!(m.contains("position_ids"), "{m}"),
        other => panic!("{other:?}"),
    }
}

/// The same loop with the cache fed back wrongly (each layer's keys returned as its values and
/// the other way round) must be caught by the comparison above: the logits after the first step
/// move far outside the tolerance.
#[test]
fn a_cache_fed_back_wrongly_is_caught() {
    let r = record();
    let s = session();
    let mut l = CacheLayout::of(&s).unwrap();
    for pair in l.cache.chunks_mut(2) {
        let key = pair[0].output.clone();
        pair[0].output = pair[1].output.clone();
        pair[1].output = key;
    }
    let g = generate(&s, &l, &r.prompt, r.tokens.len(), |_, _| {}).unwrap();
    // The first step reads an empty cache: still right.
    assert!(rel_diff(&g.logits[0], &r.first) < 1e-5);
    let last = rel_diff(&g.logits[g.logits.len() - 1], &r.last);
    assert!(last > 1e-3, "a swapped cache went unnoticed ({last:e})");
}

#[test]
fn models_and_prompts_that_do_not_fit_are_errors() {
    // A model with no cache: the slice's BERT.
    let bert = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../benches/zoo/slice/slice_hf_bert/model.onnx");
    let s = Session::from_file(bert, SessionOptions::default()).unwrap();
    match CacheLayout::of(&s) {
        Err(Error::InvalidModel(m)) => assert!(m.contains("key/value cache"), "{m}"),
        other => panic!("{other:?}"),
    }
    let s = session();
    let l = CacheLayout::of(&s).unwrap();
    match generate(&s, &l, &[], 3, |_, _| {}) {
        Err(Error::Input { name, msg }) => {
            assert_eq!(name, "input_ids");
            assert!(msg.contains("at least one token"), "{msg}");
        }
        other => panic!("{other:?}"),
    }
    // A token past the embedding table is the Gather's error, naming the node.
    let err = generate(&s, &l, &[5, 100_000], 2, |_, _| {}).unwrap_err();
    assert!(err.to_string().contains("Gather"), "{err}");
}

#[test]
fn argmax_takes_the_first_largest_and_refuses_nan() {
    assert_eq!(argmax(&[1.0, 3.0, 3.0, -2.0]), Some(1));
    assert_eq!(argmax(&[-1.0]), Some(0));
    assert_eq!(argmax(&[]), None);
    assert_eq!(argmax(&[0.0, f32::NAN]), None);
    assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY]), Some(0));
}
