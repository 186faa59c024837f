//! Einsum as one walk over the joint space of every label: an odometer steps through every
//! combination of label values, keeping each operand's flat offset (and the output's) up to date
//! by per-label strides, and adds the operands' product into its output element with a
//! compensated (Neumaier) sum. Repeated labels within an operand add their strides (a diagonal);
//! a dim of size 1 has stride 0 (broadcast). Ellipsis dims are labels `-1, -2, ..` counted from
//! the right, so that terms with shorter ellipses line up as numpy broadcasts them.
use super::*;

/// A parsed term: letters as their code points, ellipsis dims as negative numbers.
fn parse_term(term: &str, rank: Option<usize>, ell: usize) -> Result<Vec<i64>, OracleError> {
    let letters = term.bytes().filter(u8::is_ascii_alphabetic).count();
    let mut out = Vec::new();
    let mut bytes = term.bytes().peekable();
    let mut seen = false;
    while let Some(b) = bytes.next() {
        if b.is_ascii_alphabetic() {
            out.push(b as i64);
            continue;
        }
        if b != b'.' || bytes.next() != Some(b'.') || bytes.next() != Some(b'.') || seen {
            return invalid(format!("Einsum term '{term}' is malformed"));
        }
        seen = true;
        let n = match rank {
            Some(r) if r >= letters => r - letters,
            Some(r) => return invalid(format!("Einsum term '{term}' exceeds rank {r}")),
            None => ell,
        };
        // The ellipsis's dims, leftmost first: -n .. -1.
        out.extend((1..=n as i64).rev().map(|k| -k));
    }
    if let Some(r) = rank
        && out.len() != r
    {
        return invalid(format!("Einsum term '{term}' does not match rank {r}"));
    }
    Ok(out)
}

pub(super) fn einsum(
    node: &NodeSpec,
    inputs: &[Option<Value>],
) -> Result<Vec<Output>, OracleError> {
    let eq = node.string("equation", "")?.replace(' ', "");
    let mut sides = eq.splitn(2, "->");
    let lhs = sides.next().unwrap_or("");
    let rhs = sides.next();
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != inputs.len() {
        return invalid(format!(
            "Einsum '{eq}' names {} operands, the node has {} inputs",
            terms.len(),
            inputs.len()
        ));
    }
    let mut ops = Vec::with_capacity(terms.len());
    for i in 0..terms.len() {
        ops.push(input(node, inputs, i)?);
    }
    let mut parsed = Vec::with_capacity(terms.len());
    for (t, v) in terms.iter().zip(&ops) {
        parsed.push(parse_term(t, Some(v.shape.len()), 0)?);
    }
    let ell = parsed
        .iter()
        .flatten()
        .filter(|&&l| l < 0)
        .map(|&l| (-l) as usize)
        .max()
        .unwrap_or(0);
    let out: Vec<i64> = match rhs {
        Some(r) => {
            let o = parse_term(r, None, if r.contains("...") { ell } else { 0 })?;
            let mut seen = std::collections::BTreeSet::new();
            for l in &o {
                if !seen.insert(*l) || !parsed.iter().flatten().any(|x| x == l) {
                    return invalid(format!("Einsum output '{r}' repeats or invents a label"));
                }
            }
            o
        }
        None => {
            let mut counts = std::collections::BTreeMap::<i64, usize>::new();
            for &l in parsed.iter().flatten() {
                *counts.entry(l).or_default() += 1;
            }
            // Ellipsis dims (negative, leftmost first) then letters used once, in code order.
            let mut o: Vec<i64> = (1..=ell as i64).rev().map(|k| -k).collect();
            o.extend(
                counts
                    .iter()
                    .filter(|(l, c)| **l > 0 && **c == 1)
                    .map(|(l, _)| *l),
            );
            o
        }
    };
    // Label sizes.
    let mut size = std::collections::BTreeMap::<i64, usize>::new();
    for (p, v) in parsed.iter().zip(&ops) {
        for (&l, &d) in p.iter().zip(&v.shape) {
            let s = size.entry(l).or_insert(1);
            if d != 1 {
                if *s != 1 && *s != d {
                    return invalid(format!("Einsum label sizes {s} and {d} disagree"));
                }
                *s = d;
            }
        }
    }
    // The walk: output labels then the rest, each with its stride in every operand and the output.
    let mut walk: Vec<i64> = out.clone();
    walk.extend(size.keys().filter(|l| !out.contains(l)));
    let dims: Vec<usize> = walk.iter().map(|l| size[l]).collect();
    let out_shape: Vec<usize> = out.iter().map(|l| size[l]).collect();
    let out_strides = strides(&out_shape);
    let mut steps: Vec<Vec<usize>> = Vec::with_capacity(ops.len() + 1);
    for (p, v) in parsed.iter().zip(&ops) {
        let st = strides(&v.shape);
        steps.push(
            walk.iter()
                .map(|l| {
                    p.iter()
                        .zip(&v.shape)
                        .zip(&st)
                        .filter(|((x, d), _)| *x == l && **d != 1)
                        .map(|(_, s)| *s)
                        .sum()
                })
                .collect(),
        );
    }
    steps.push(
        walk.iter()
            .map(|l| {
                out.iter()
                    .position(|x| x == l)
                    .map_or(0, |i| out_strides[i])
            })
            .collect(),
    );
    let n_out: usize = out_shape.iter().product();
    let mut sum = vec![0.0f64; n_out];
    let mut comp = vec![0.0f64; n_out];
    let mut mag = vec![0.0f64; n_out];
    if dims.iter().all(|&d| d > 0) {
        let mut idx = vec![0usize; dims.len()];
        let mut off = vec![0usize; steps.len()];
        loop {
            let prod: f64 = ops.iter().zip(&off).map(|(v, &o)| v.data[o]).product();
            let o = off[ops.len()];
            let t = sum[o] + prod;
            comp[o] += if sum[o].abs() >= prod.abs() {
                (sum[o] - t) + prod
            } else {
                (prod - t) + sum[o]
            };
            sum[o] = t;
            mag[o] += prod.abs();
            // Odometer step, last label fastest.
            let mut d = dims.len();
            loop {
                if d == 0 {
                    break;
                }
                d -= 1;
                idx[d] += 1;
                for (k, s) in steps.iter().enumerate() {
                    off[k] += s[d];
                }
                if idx[d] < dims[d] {
                    break;
                }
                for (k, s) in steps.iter().enumerate() {
                    off[k] -= s[d] * dims[d];
                }
                idx[d] = 0;
                if d == 0 {
                    d = usize::MAX;
                    break;
                }
            }
            if d == usize::MAX || dims.is_empty() {
                break;
            }
        }
    }
    let data: Vec<f64> = sum.iter().zip(&comp).map(|(s, c)| s + c).collect();
    Ok(vec![make_output(ops[0].dtype, out_shape, data, mag)?])
}
