//! Strings and text features: StringNormalizer, StringConcat, StringSplit, RegexFullMatch,
//! TfIdfVectorizer.
use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use ndarray::{ArrayD, IxDyn};

use crate::bail;
use crate::error::{OpError, OpResult};
use crate::ops::broadcast::binary;
use crate::ops::{OpCtx, Registry, input, single};
use crate::tensor::{Tensor, Value};

pub fn register(r: &mut Registry) {
    r.add("", "StringNormalizer", string_normalizer);
    r.add("", "StringConcat", string_concat);
    r.add("", "StringSplit", string_split);
    r.add("", "RegexFullMatch", regex_full_match);
    r.add("", "TfIdfVectorizer", tfidf_vectorizer);
}

fn strings<'a>(t: &'a Tensor, what: &str) -> OpResult<&'a ArrayD<String>> {
    match t {
        Tensor::Str(a) => Ok(a),
        t => bail!("{what} must be a string tensor, got {}", t.describe()),
    }
}

fn string_normalizer(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let a = strings(x, "StringNormalizer input")?;
    let s = a.shape();
    let two_d = match s.len() {
        1 => false,
        2 if s[0] == 1 => true,
        _ => bail!("StringNormalizer needs [C] or [1, C], got {}", x.describe()),
    };
    let action = ctx.attr_s("case_change_action", "NONE")?;
    let sensitive = ctx.attr_i("is_case_sensitive", 0)? != 0;
    let stop: HashSet<String> = ctx
        .attr_opt_strings("stopwords")?
        .unwrap_or_default()
        .into_iter()
        .map(|w| if sensitive { w } else { w.to_lowercase() })
        .collect();
    let mut out: Vec<String> = Vec::with_capacity(a.len());
    for w in a.iter() {
        let hit = if sensitive {
            stop.contains(w)
        } else {
            stop.contains(&w.to_lowercase())
        };
        if hit {
            continue;
        }
        out.push(match action.as_str() {
            "NONE" => w.clone(),
            "LOWER" => w.to_lowercase(),
            "UPPER" => w.to_uppercase(),
            other => bail!("unknown case_change_action '{other}'"),
        });
    }
    if out.is_empty() {
        out.push(String::new());
    }
    let shape = if two_d {
        vec![1, out.len()]
    } else {
        vec![out.len()]
    };
    single(Tensor::Str(ArrayD::from_shape_vec(IxDyn(&shape), out)?))
}

fn string_concat(_ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let a = strings(input(inputs, 0)?, "StringConcat input 0")?;
    let b = strings(input(inputs, 1)?, "StringConcat input 1")?;
    single(Tensor::Str(binary(a, b, |x: String, y: String| x + &y)?))
}

/// Python's `str.split(sep, maxsplit)`: `None` splits on whitespace runs (ignoring leading and
/// trailing whitespace); `maxsplit` bounds the number of splits.
fn py_split(s: &str, sep: Option<&str>, maxsplit: Option<usize>) -> Vec<String> {
    let max = maxsplit.unwrap_or(usize::MAX);
    match sep {
        Some(d) => {
            let mut out = Vec::new();
            let mut rest = s;
            while out.len() < max {
                match rest.find(d) {
                    Some(p) => {
                        out.push(rest[..p].to_string());
                        rest = &rest[p + d.len()..];
                    }
                    None => break,
                }
            }
            out.push(rest.to_string());
            out
        }
        None => {
            let mut out = Vec::new();
            let mut rest = s.trim_start();
            while !rest.is_empty() {
                if out.len() == max {
                    out.push(rest.to_string());
                    break;
                }
                let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
                out.push(rest[..end].to_string());
                rest = rest[end..].trim_start();
            }
            out
        }
    }
}

fn string_split(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let a = strings(x, "StringSplit input")?;
    let delim = ctx.attr_opt_s("delimiter")?.filter(|d| !d.is_empty());
    let maxsplit = match ctx.attr_opt_i("maxsplit")? {
        Some(m) if m < 0 => bail!("maxsplit must be non-negative, got {m}"),
        m => m.map(|m| m as usize),
    };
    let parts: Vec<Vec<String>> = a
        .iter()
        .map(|s| py_split(s, delim.as_deref(), maxsplit))
        .collect();
    let width = parts.iter().map(|p| p.len()).max().unwrap_or(0);
    let mut shape = x.shape().to_vec();
    shape.push(width);
    ctx.check_alloc(&shape, 24)?;
    let counts: Vec<i64> = parts.iter().map(|p| p.len() as i64).collect();
    let mut flat = Vec::with_capacity(parts.len() * width);
    for mut p in parts {
        p.resize(width, String::new());
        flat.extend(p);
    }
    Ok(vec![
        Value::Tensor(Tensor::Str(ArrayD::from_shape_vec(IxDyn(&shape), flat)?)),
        Value::Tensor(Tensor::from_i64(x.shape(), counts)?),
    ])
}

/// RegexFullMatch: whether each string matches the RE2 `pattern` as a whole. The `regex` crate's syntax
/// is RE2's (no backreferences or lookaround), so patterns either mean the same or fail to compile.
fn regex_full_match(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = strings(input(inputs, 0)?, "X")?;
    let pattern = ctx
        .attr_opt_s("pattern")?
        .ok_or_else(|| OpError::Invalid("attribute 'pattern' is required".into()))?;
    let re = regex::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| {
        OpError::Invalid(format!(
            "pattern '{pattern}' is not a valid RE2 expression: {e}"
        ))
    })?;
    single(Tensor::Bool(x.map(|s| re.is_match(s))))
}

/// N-gram table: every pool n-gram of an allowed length mapped to its output coordinate.
struct Ngrams<K> {
    map: HashMap<Vec<K>, usize>,
}

impl<K: Hash + Eq + Clone> Ngrams<K> {
    fn new(
        pool: &[K],
        counts: &[i64],
        indexes: &[i64],
        min: usize,
        max: usize,
    ) -> OpResult<Ngrams<K>> {
        let mut map = HashMap::new();
        let mut gram_no = 0usize;
        for (i, &start) in counts.iter().enumerate() {
            let n = i + 1;
            let end = counts.get(i + 1).copied().unwrap_or(pool.len() as i64);
            if start < 0 || end < start || end as usize > pool.len() {
                bail!(
                    "ngram_counts {counts:?} do not fit a pool of {} items",
                    pool.len()
                );
            }
            let items = &pool[start as usize..end as usize];
            for g in items.chunks_exact(n) {
                let Some(&idx) = indexes.get(gram_no) else {
                    bail!(
                        "ngram_indexes has {} entries, the pool holds more n-grams",
                        indexes.len()
                    );
                };
                if idx < 0 {
                    bail!("ngram_indexes has a negative entry {idx}");
                }
                if (min..=max).contains(&n) {
                    map.insert(g.to_vec(), idx as usize);
                }
                gram_no += 1;
            }
        }
        Ok(Ngrams { map })
    }

    /// Counts the n-grams of `row` into `freq` (unigrams once, longer grams for every skip).
    fn count(&self, row: &[K], min: usize, max: usize, max_skip: usize, freq: &mut [u64]) {
        let c = row.len();
        // Grams longer than the row, or skips past its end, never match: capping them changes nothing
        // and keeps attribute values such as i64::MAX from sizing buffers and loops.
        let (max, max_skip) = (max.min(c), max_skip.min(c));
        let mut key: Vec<K> = Vec::with_capacity(max);
        for skip in 0..=max_skip {
            let d = skip + 1;
            for start in 0..c {
                key.clear();
                for n in 1..=max {
                    let pos = start + (n - 1) * d;
                    if pos >= c {
                        break;
                    }
                    key.push(row[pos].clone());
                    if n < min || (n == 1 && skip > 0) {
                        continue;
                    }
                    if let Some(f) = self.map.get(&key).and_then(|&i| freq.get_mut(i)) {
                        *f += 1;
                    }
                }
            }
        }
    }
}

fn tfidf_vectorizer(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let min = ctx.req_i("min_gram_length")?;
    let max = ctx.req_i("max_gram_length")?;
    let max_skip = ctx.req_i("max_skip_count")?;
    if min < 1 || max < min || max_skip < 0 {
        bail!(
            "need 1 <= min_gram_length <= max_gram_length and max_skip_count >= 0, got {min}, {max}, {max_skip}"
        );
    }
    let (min, max, max_skip) = (min as usize, max as usize, max_skip as usize);
    let mode = ctx.attr_s("mode", "TF")?;
    let counts = ctx.attr_opt_ints("ngram_counts")?.unwrap_or_default();
    let indexes = ctx.attr_opt_ints("ngram_indexes")?.unwrap_or_default();
    let weights = ctx.attr_opt_floats("weights")?;
    let out_size = indexes
        .iter()
        .copied()
        .max()
        .map_or(0, |m| m.max(-1).saturating_add(1)) as usize;
    let (rows, cols, out_shape) = match x.shape() {
        [] => (1, 1, vec![out_size]),
        [c] => (1, *c, vec![out_size]),
        [b, c] => (*b, *c, vec![*b, out_size]),
        s => bail!("TfIdfVectorizer needs [C] or [B, C], got {s:?}"),
    };
    ctx.check_alloc(&out_shape, 4)?;
    let mut freq = vec![0u64; rows * out_size];
    if out_size > 0 && cols > 0 {
        if let Some(pool) = ctx.attr_opt_strings("pool_strings")? {
            let Tensor::Str(a) = x else {
                bail!("pool_strings needs a string input, got {}", x.describe())
            };
            let table = Ngrams::new(&pool, &counts, &indexes, min, max)?;
            let v: Vec<String> = a.iter().cloned().collect();
            for (row, f) in v.chunks_exact(cols).zip(freq.chunks_exact_mut(out_size)) {
                table.count(row, min, max, max_skip, f);
            }
        } else if let Some(pool) = ctx.attr_opt_ints("pool_int64s")? {
            let table = Ngrams::new(&pool, &counts, &indexes, min, max)?;
            let v = x.to_i64_vec()?;
            for (row, f) in v.chunks_exact(cols).zip(freq.chunks_exact_mut(out_size)) {
                table.count(row, min, max, max_skip, f);
            }
        } else {
            bail!("TfIdfVectorizer needs pool_strings or pool_int64s");
        }
    }
    let w = |i: usize| {
        weights
            .as_ref()
            .and_then(|w| w.get(i).copied())
            .unwrap_or(1.0)
    };
    let out: Vec<f32> = freq
        .iter()
        .enumerate()
        .map(|(p, &f)| {
            let i = p % out_size.max(1);
            match mode.as_str() {
                "TF" => Ok(f as f32),
                "IDF" => Ok(if f > 0 { w(i) } else { 0.0 }),
                "TFIDF" => Ok(f as f32 * w(i)),
                m => bail!("unknown mode '{m}'"),
            }
        })
        .collect::<OpResult<_>>()?;
    single(Tensor::from_f32(&out_shape, out)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_split_semantics() {
        assert_eq!(py_split("  a b  c ", None, None), vec!["a", "b", "c"]);
        assert_eq!(py_split("  a b  c ", None, Some(1)), vec!["a", "b  c "]);
        assert_eq!(py_split("", None, None), Vec::<String>::new());
        assert_eq!(py_split("a,,b,", Some(","), None), vec!["a", "", "b", ""]);
        assert_eq!(py_split("a,,b,", Some(","), Some(2)), vec!["a", "", "b,"]);
        assert_eq!(py_split("", Some(","), None), vec![""]);
        assert_eq!(py_split("a<>b", Some("<>"), None), vec!["a", "b"]);
    }

    #[test]
    fn skip_grams_count_once_per_skip() {
        // Pool: unigram 7, bigram (7, 9). Row 7 8 9 7 9: bigram (7,9) at skip 1 (0,2) and skip 0 (3,4).
        let t = Ngrams::new(&[7i64, 7, 9], &[0, 1], &[0, 1], 1, 2).unwrap();
        let mut f = vec![0u64; 2];
        t.count(&[7, 8, 9, 7, 9], 1, 2, 1, &mut f);
        assert_eq!(f, vec![2, 2]);
    }
}
