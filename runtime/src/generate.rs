//! Token-by-token generation with a decoder that takes its key/value cache as inputs and returns
//! the grown cache as outputs (the layout of onnxruntime's and Optimum's decoder exports, and of
//! `benches/zoo/decoder.py`): the first run reads the whole prompt with an empty cache, each later
//! run one new token with the cache the run before returned; the next token is the last position's
//! largest logit (greedy decoding, the first index on a tie).
//!
//! [`CacheLayout::of`] reads the layout from the model's declared inputs and outputs:
//! - `input_ids` `[batch, seq]` (int64 or int32), and optionally `attention_mask`
//!   `[batch, past + seq]` (all ones: one sequence, nothing padded) and `position_ids`
//!   `[batch, seq]` (`past, past + 1, ..`);
//! - each cache input's name contains `past` (`past_key_values.0.key`, `past.0.value`, ...), and
//!   its output is the same name with that prefix read as `present` (`present.0.key`); its declared
//!   shape has exactly one symbolic dim after the batch, the cache's length, and fixed dims
//!   elsewhere, so an empty cache can be made for the first run;
//! - the logits are the output named `logits`, or else the first output that is not a cache.
//!
//! Batch 1 only. Each run is an ordinary [`Session::run`]: whatever the session's providers and
//! graph capture do applies per step. Unpadded, a step's shapes change with the cache's length, so
//! no two steps share a capture key; with [`GenerateOptions::pad_cache`] the cache is held padded
//! in front to a bucket length (`b, 2b, 4b, ..`), its padding masked out and the positions given
//! explicitly, so every step of a bucket has the same shapes and one captured graph serves them
//! all. Padding needs both `attention_mask` and `position_ids` (a model that derives positions
//! from the cache's length would read the padding as earlier tokens).
use std::time::{Duration, Instant};

use ndarray::{Axis, Slice};

use crate::ir::{Dim, ValueType};
use crate::session::{CarryPair, CarryState};
use crate::tensor::{DType, Tensor, Value};
use crate::{Error, Result, Session};

/// One cache tensor: the input a run reads and the output the run returns.
#[derive(Debug, Clone, PartialEq)]
pub struct CachePair {
    pub input: String,
    pub output: String,
    pub dtype: DType,
    /// The declared shape with the batch as 1 and the length axis as 0: the empty cache.
    pub empty: Vec<usize>,
    /// The length axis (the one symbolic dim after the batch).
    pub axis: usize,
}

/// Where a decoder's tokens, mask, positions, cache and logits are.
///
/// `vocab`: the logits' last dim where the model declares it.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheLayout {
    pub ids: String,
    pub ids_dtype: DType,
    pub mask: Option<(String, DType)>,
    pub positions: Option<(String, DType)>,
    pub cache: Vec<CachePair>,
    pub logits: String,
    pub vocab: Option<usize>,
}

fn layout_error(msg: String) -> Error {
    Error::InvalidModel(format!("not a decoder with a key/value cache: {msg}"))
}

fn tensor_type(ty: &ValueType) -> Option<(Option<DType>, Option<&Vec<Dim>>)> {
    match ty {
        ValueType::Tensor { dtype, shape } => Some((*dtype, shape.as_ref())),
        _ => None,
    }
}

fn int_type(name: &str, ty: &ValueType) -> Result<DType> {
    match tensor_type(ty) {
        Some((Some(d @ (DType::I64 | DType::I32)), _)) => Ok(d),
        _ => Err(layout_error(format!(
            "input '{name}' is {ty}, not an int64 or int32 tensor"
        ))),
    }
}

impl CacheLayout {
    /// The layout of `session`'s model, or an error that says what does not fit.
    pub fn of(session: &Session) -> Result<CacheLayout> {
        let graph = &session.model().graph;
        let inits: std::collections::HashSet<&str> =
            graph.initializers.keys().map(String::as_str).collect();
        let inputs: Vec<_> = graph
            .inputs
            .iter()
            .filter(|i| !inits.contains(i.name.as_str()))
            .collect();
        let find = |n: &str| inputs.iter().find(|i| i.name == n);
        let ids = find("input_ids").ok_or_else(|| layout_error("no input 'input_ids'".into()))?;
        let ids_dtype = int_type(&ids.name, &ids.ty)?;
        let mask = match find("attention_mask") {
            Some(m) => Some((m.name.clone(), int_type(&m.name, &m.ty)?)),
            None => None,
        };
        let positions = match find("position_ids") {
            Some(p) => Some((p.name.clone(), int_type(&p.name, &p.ty)?)),
            None => None,
        };
        let mut cache = Vec::new();
        for i in inputs.iter().filter(|i| i.name.contains("past")) {
            let output = present_name(&i.name)
                .into_iter()
                .find(|o| graph.outputs.iter().any(|x| &x.name == o))
                .ok_or_else(|| {
                    layout_error(format!(
                        "cache input '{}' has no output named {}",
                        i.name,
                        present_name(&i.name).join(" or ")
                    ))
                })?;
            let (dtype, shape) = match tensor_type(&i.ty) {
                Some((Some(d), Some(s))) if d.is_float() => (d, s),
                _ => {
                    return Err(layout_error(format!(
                        "cache input '{}' is {}, not a float tensor of known rank",
                        i.name, i.ty
                    )));
                }
            };
            let (empty, axis) = empty_shape(&i.name, shape)?;
            cache.push(CachePair {
                input: i.name.clone(),
                output,
                dtype,
                empty,
                axis,
            });
        }
        if cache.is_empty() {
            return Err(layout_error(
                "no cache input (an input whose name contains 'past')".into(),
            ));
        }
        let is_cache = |n: &str| cache.iter().any(|c| c.output == n);
        let logits_info = graph
            .outputs
            .iter()
            .find(|o| o.name == "logits")
            .or_else(|| graph.outputs.iter().find(|o| !is_cache(&o.name)))
            .ok_or_else(|| layout_error("no logits output".into()))?;
        let vocab = match tensor_type(&logits_info.ty) {
            Some((_, Some(dims))) => match dims.last() {
                Some(Dim::Fixed(v)) if *v > 0 => Some(*v as usize),
                _ => None,
            },
            _ => None,
        };
        let logits = logits_info.name.clone();
        if let Some(extra) = inputs.iter().find(|i| {
            i.name != ids.name
                && mask.as_ref().is_none_or(|m| m.0 != i.name)
                && positions.as_ref().is_none_or(|p| p.0 != i.name)
                && !cache.iter().any(|c| c.input == i.name)
        }) {
            return Err(layout_error(format!(
                "input '{}' is none of input_ids, attention_mask, position_ids or a cache",
                extra.name
            )));
        }
        Ok(CacheLayout {
            ids: ids.name.clone(),
            ids_dtype,
            mask,
            positions,
            cache,
            logits,
            vocab,
        })
    }
}

/// The output names a cache input's grown cache may have: `past_key_values.0.key` →
/// `present.0.key`, `past.0.key` → `present.0.key`, `past_key_0` → `present_key_0`.
fn present_name(input: &str) -> Vec<String> {
    let mut names = Vec::new();
    if let Some(rest) = input.strip_prefix("past_key_values") {
        names.push(format!("present{rest}"));
        names.push(format!("present_key_values{rest}"));
    }
    names.push(input.replacen("past", "present", 1));
    names
}

/// The empty cache's shape (batch 1, the one symbolic dim after it 0, the fixed dims as declared)
/// and its length axis.
fn empty_shape(name: &str, dims: &[Dim]) -> Result<(Vec<usize>, usize)> {
    let mut shape = Vec::with_capacity(dims.len());
    let mut length = None;
    for (axis, d) in dims.iter().enumerate() {
        match (axis, d) {
            (0, _) => shape.push(1),
            (_, Dim::Fixed(v)) if *v >= 0 => shape.push(*v as usize),
            (_, Dim::Symbol(_) | Dim::Unknown) if length.is_none() => {
                length = Some(axis);
                shape.push(0);
            }
            _ => {
                return Err(layout_error(format!(
                    "cache input '{name}' has shape [{}]: one symbolic dim after the batch \
                     (the cache's length) and fixed dims elsewhere are needed",
                    dims.iter()
                        .map(|d| d.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                )));
            }
        }
    }
    match length {
        Some(axis) => Ok((shape, axis)),
        None => Err(layout_error(format!(
            "cache input '{name}' has no symbolic length dim"
        ))),
    }
}

/// What a generation produced, and how long each run took.
#[derive(Debug, Clone)]
pub struct Generation {
    /// The new tokens, in order.
    pub tokens: Vec<i64>,
    /// The first run's time (the whole prompt).
    pub prefill: Duration,
    /// Each later run's time (one token each).
    pub steps: Vec<Duration>,
    /// The logits each run's last position gave (the distribution each token was picked from).
    pub logits: Vec<Vec<f32>>,
}

fn ints(dtype: DType, shape: &[usize], v: Vec<i64>) -> Result<Value> {
    let t = Tensor::from_f64s(dtype, shape, v.into_iter().map(|x| x as f64).collect())
        .map_err(|e| Error::InvalidModel(e.to_string()))?;
    Ok(Value::Tensor(t))
}

/// The index of the largest of `row` (the first on a tie); NaN logits are an error.
pub fn argmax(row: &[f32]) -> Option<usize> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &v) in row.iter().enumerate() {
        if v.is_nan() {
            return None;
        }
        if best.is_none_or(|(_, b)| v > b) {
            best = Some((i, v));
        }
    }
    best.map(|(i, _)| i)
}

/// How [`generate_with`] holds the cache between runs.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateOptions {
    /// Pad the cache in front to the smallest of `b, 2b, 4b, ..` that holds it (`Some(b)`, b ≥ 1),
    /// so that the steps of a bucket share their shapes (and a captured graph); `None` passes the
    /// cache at its length.
    pub pad_cache: Option<usize>,
    /// What padded positions hold (0 by default). The mask hides them, so any finite value gives
    /// the same tokens; a test poisons them to show it.
    pub pad_value: f32,
    /// With a padded cache, keep it in the captured graph's buffers from step to step where the
    /// session replays one (`Session::run_carrying`) instead of returning it to the host.
    pub carry: bool,
    /// Test only: the mask marks padded positions as tokens (the bug padding must not have).
    #[cfg(test)]
    unmasked_padding: bool,
}

impl Default for GenerateOptions {
    /// No padding; where padding is asked for, the cache carried between replays.
    fn default() -> GenerateOptions {
        GenerateOptions {
            pad_cache: None,
            pad_value: 0.0,
            carry: true,
            #[cfg(test)]
            unmasked_padding: false,
        }
    }
}

impl GenerateOptions {
    /// The bucket a cache of `len` positions is held in: itself unpadded, else the smallest
    /// `b · 2^k ≥ len`.
    pub fn bucket(&self, len: usize) -> usize {
        match self.pad_cache {
            Some(b) => {
                let mut at = b.max(1);
                while at < len {
                    at *= 2;
                }
                at
            }
            None => len,
        }
    }

    fn masks_padding(&self) -> bool {
        #[cfg(test)]
        if self.unmasked_padding {
            return false;
        }
        true
    }
}

/// `t` with its length on `axis` made `to`: positions dropped from the front, or `fill` put in
/// front (the real positions stay last, in order).
fn refit(t: &Tensor, axis: usize, to: usize, fill: f32) -> Result<Tensor> {
    let shape = t.shape();
    let Some(&from) = shape.get(axis) else {
        return Err(Error::InvalidModel(format!(
            "a cache of shape {shape:?} has no axis {axis}"
        )));
    };
    if from == to {
        return Ok(t.clone());
    }
    if to < from {
        return Ok(quorum_core::map_array!(t, a => a
            .slice_axis(Axis(axis), Slice::from(from - to..))
            .as_standard_layout()
            .into_owned()));
    }
    let mut grown = shape.to_vec();
    grown[axis] = to;
    let n: usize = grown.iter().product();
    let pad = Tensor::from_f64s(t.dtype(), &grown, vec![fill as f64; n])
        .map_err(|e| Error::InvalidModel(e.to_string()))?;
    quorum_core::map_array2!(&pad, t, p, a => {
        let mut p = p.clone();
        p.slice_axis_mut(Axis(axis), Slice::from(to - from..)).assign(a);
        p
    })
    .map_err(|e| Error::InvalidModel(e.to_string()))
}

/// Greedy generation of `new_tokens` tokens after `prompt` (at least one token) on `session`,
/// whose model has the layout `layout`, the cache passed at its length. `on_token` sees each token
/// as it is picked.
pub fn generate(
    session: &Session,
    layout: &CacheLayout,
    prompt: &[i64],
    new_tokens: usize,
    on_token: impl FnMut(usize, i64),
) -> Result<Generation> {
    generate_with(
        session,
        layout,
        prompt,
        new_tokens,
        &GenerateOptions::default(),
        on_token,
    )
}

/// [`generate`] with the cache held as `options` say.
pub fn generate_with(
    session: &Session,
    layout: &CacheLayout,
    prompt: &[i64],
    new_tokens: usize,
    options: &GenerateOptions,
    mut on_token: impl FnMut(usize, i64),
) -> Result<Generation> {
    if prompt.is_empty() {
        return Err(Error::Input {
            name: layout.ids.clone(),
            msg: "the prompt needs at least one token".into(),
        });
    }
    if options.pad_cache.is_some() && (layout.mask.is_none() || layout.positions.is_none()) {
        return Err(Error::InvalidModel(format!(
            "a padded cache needs the model to take attention_mask and position_ids (it takes {}): \
             without them padding reads as earlier tokens",
            [
                layout.mask.as_ref().map(|m| m.0.as_str()),
                layout.positions.as_ref().map(|p| p.0.as_str())
            ]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(", ")
        )));
    }
    let mut cache: Vec<Value> = layout
        .cache
        .iter()
        .map(|c| Value::Tensor(Tensor::zeros(c.dtype, &c.empty)))
        .collect();
    let mut out = Generation {
        tokens: Vec::with_capacity(new_tokens),
        prefill: Duration::ZERO,
        steps: Vec::with_capacity(new_tokens.saturating_sub(1)),
        logits: Vec::with_capacity(new_tokens),
    };
    // `real` positions of the cache are tokens; `held` is its length as passed, the padding in
    // front of the tokens.
    let mut real = 0usize;
    let mut held = 0usize;
    let mut next: Vec<i64> = prompt.to_vec();
    // With padding, a step whose grown cache stays in its bucket leaves the cache staged in the
    // captured graph for the next step (`Session::run_carrying`): no host tensor is built, padded
    // or staged for it (the graph still copies it across the bus). Elsewhere (eager runs, the
    // capture, a bucket's last step) the cache comes back to the host.
    let pairs: Vec<CarryPair> = match options.pad_cache {
        Some(_) if options.carry => layout
            .cache
            .iter()
            .map(|c| CarryPair {
                output: c.output.clone(),
                input: c.input.clone(),
                axis: c.axis,
            })
            .collect(),
        _ => Vec::new(),
    };
    let mut state = CarryState::default();
    for step in 0..new_tokens {
        let seq = next.len();
        let t0 = Instant::now();
        if step > 0 && !state.holds() {
            let to = options.bucket(real);
            if to != held {
                for (c, v) in layout.cache.iter().zip(cache.iter_mut()) {
                    if let Value::Tensor(t) = v {
                        *t = refit(t, c.axis, to, options.pad_value)?;
                    }
                }
                held = to;
            }
        }
        let mut feeds = vec![(
            layout.ids.clone(),
            ints(layout.ids_dtype, &[1, seq], next.clone())?,
        )];
        if let Some((name, d)) = &layout.mask {
            let pad = if options.masks_padding() { 0 } else { 1 };
            let mut mask = vec![pad; held - real];
            mask.resize(held + seq, 1);
            feeds.push((name.clone(), ints(*d, &[1, held + seq], mask)?));
        }
        if let Some((name, d)) = &layout.positions {
            let pos = (real as i64..(real + seq) as i64).collect();
            feeds.push((name.clone(), ints(*d, &[1, seq], pos)?));
        }
        for (c, v) in layout.cache.iter().zip(cache.drain(..)) {
            feeds.push((c.input.clone(), v));
        }
        // Carry only what drops padding: the grown cache must still fit the bucket.
        let carry: &[CarryPair] = if step > 0 && real + seq <= held {
            &pairs
        } else {
            &[]
        };
        let mut outputs = session.run_carrying(feeds, carry, &mut state)?;
        let mut take = |name: &str| -> Result<Value> {
            let at = outputs.iter().position(|(n, _)| n == name).ok_or_else(|| {
                Error::InvalidModel(format!("the run returned no output '{name}'"))
            })?;
            Ok(outputs.swap_remove(at).1)
        };
        let logits = match take(&layout.logits)? {
            Value::Tensor(t) => t,
            v => {
                return Err(Error::InvalidModel(format!(
                    "logits '{}' are {}, not a tensor",
                    layout.logits,
                    v.describe()
                )));
            }
        };
        let shape = logits.shape().to_vec();
        let (vocab, rows) = match shape.as_slice() {
            [1, s, v] if *s == seq && *v > 0 => (*v, *s),
            _ => {
                return Err(Error::InvalidModel(format!(
                    "logits '{}' have shape {shape:?}; [1, {seq}, vocab] was expected",
                    layout.logits
                )));
            }
        };
        // The last position's row alone (the prompt's run returns one row per prompt token).
        let at = (rows - 1) * vocab;
        let last: Vec<f32> = match &logits {
            Tensor::F32(a) if a.as_slice().is_some() => {
                a.as_slice().unwrap_or_default()[at..].to_vec()
            }
            t => t
                .to_f64_vec()
                .map_err(|e| Error::InvalidModel(e.to_string()))?[at..]
                .iter()
                .map(|&v| v as f32)
                .collect(),
        };
        let token = argmax(&last)
            .ok_or_else(|| Error::InvalidModel(format!("step {step}: the logits hold NaN")))?
            as i64;
        if !state.holds() {
            for c in &layout.cache {
                cache.push(take(&c.output)?);
            }
            held += seq;
        }
        let took = t0.elapsed();
        if step == 0 {
            out.prefill = took;
        } else {
            out.steps.push(took);
        }
        real += seq;
        out.tokens.push(token);
        out.logits.push(last);
        on_token(step, token);
        next = vec![token];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SessionOptions;

    #[test]
    fn buckets_double_from_the_smallest() {
        let o = GenerateOptions {
            pad_cache: Some(4),
            ..Default::default()
        };
        let got: Vec<usize> = [1, 4, 5, 8, 9, 33].iter().map(|&n| o.bucket(n)).collect();
        assert_eq!(got, vec![4, 4, 8, 8, 16, 64]);
        assert_eq!(GenerateOptions::default().bucket(7), 7);
    }

    #[test]
    fn refit_drops_from_the_front_and_pads_in_front() {
        // [1, 2, 3, 2]: two heads, three positions, two values each, every value distinct.
        let v: Vec<f32> = (0..12).map(|i| i as f32 * 0.5 + 1.0).collect();
        let t = Tensor::from_f32(&[1, 2, 3, 2], v.clone()).unwrap();
        let shorter = refit(&t, 2, 2, 0.0).unwrap();
        assert_eq!(shorter.shape(), &[1, 2, 2, 2]);
        assert_eq!(
            shorter.to_f64_vec().unwrap(),
            [2, 3, 4, 5, 8, 9, 10, 11]
                .iter()
                .map(|&i| v[i] as f64)
                .collect::<Vec<_>>()
        );
        let longer = refit(&t, 2, 4, -7.0).unwrap();
        assert_eq!(longer.shape(), &[1, 2, 4, 2]);
        let l = longer.to_f64_vec().unwrap();
        assert_eq!(&l[..2], &[-7.0, -7.0]);
        assert_eq!(&l[8..10], &[-7.0, -7.0]);
        assert_eq!(
            l[2..8],
            v[..6].iter().map(|&x| x as f64).collect::<Vec<_>>()[..]
        );
        assert_eq!(refit(&longer, 2, 3, 0.0).unwrap(), t);
        assert!(refit(&t, 4, 1, 0.0).is_err());
    }

    /// Padding that the mask does not hide (the bug a padded cache must not have) changes the
    /// logits: the padded generation's agreement with the unpadded one is a check that can fail.
    #[test]
    fn padding_the_mask_does_not_hide_changes_the_answer() {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../benches/zoo/decoder-tiny/model.onnx");
        let s = Session::from_file(dir, SessionOptions::default()).unwrap();
        let l = CacheLayout::of(&s).unwrap();
        let prompt = [4, 7, 12, 54, 26];
        let plain = generate(&s, &l, &prompt, 6, |_, _| {}).unwrap();
        let mut o = GenerateOptions {
            pad_cache: Some(4),
            pad_value: 3.5,
            ..Default::default()
        };
        let padded = generate_with(&s, &l, &prompt, 6, &o, |_, _| {}).unwrap();
        let off = |a: &[Vec<f32>], b: &[Vec<f32>]| {
            a.iter()
                .flatten()
                .zip(b.iter().flatten())
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max)
        };
        assert_eq!(padded.tokens, plain.tokens);
        assert!(off(&padded.logits, &plain.logits) < 1e-5);
        o.unmasked_padding = true;
        let wrong = generate_with(&s, &l, &prompt, 6, &o, |_, _| {}).unwrap();
        let d = off(&wrong.logits, &plain.logits);
        assert!(d > 1e-3, "unmasked padding went unnoticed ({d:e})");
    }
}
