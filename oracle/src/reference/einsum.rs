//! Einsum by its definition: every output element is the sum, over every value of the labels the
//! output leaves out, of the product of one element of each operand (the element each operand's
//! labels pick), added in f64 in the order of those values. A label repeated within an operand
//! picks its diagonal; a dim of size 1 broadcasts against its label's size; an ellipsis stands for
//! the operand's leading unlabelled dims, right-aligned across operands as numpy broadcasts them.
use super::{input, output, unravel};
use crate::{NodeSpec, OracleError, Output, Value};

fn bad<T>(msg: String) -> Result<T, OracleError> {
    Err(OracleError::Invalid(format!("Einsum: {msg}")))
}

/// A term's labels: letters as themselves, the ellipsis's dims as `'0' + k` for the k-th of the
/// `ell` broadcast dims (only the last `dims` of them when the term's ellipsis is shorter).
fn term_labels(term: &str, dims: usize, ell: usize) -> Result<Vec<char>, OracleError> {
    let Some((head, tail)) = term.split_once("...") else {
        if let Some(c) = term.chars().find(|c| !c.is_ascii_alphabetic()) {
            return bad(format!("'{c}' in '{term}' is not a label"));
        }
        return Ok(term.chars().collect());
    };
    if !head
        .chars()
        .chain(tail.chars())
        .all(|c| c.is_ascii_alphabetic())
    {
        return bad(format!("'{term}' is not a term"));
    }
    let mut labels: Vec<char> = head.chars().collect();
    labels.extend((ell - dims..ell).map(|k| (b'0' + k as u8) as char));
    labels.extend(tail.chars());
    Ok(labels)
}

pub(super) fn evaluate(
    node: &NodeSpec,
    inputs: &[Option<Value>],
) -> Result<Vec<Output>, OracleError> {
    let eq: String = node
        .string("equation", "")?
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if inputs.len() != terms.len() {
        return bad(format!("{} terms for {} inputs", terms.len(), inputs.len()));
    }
    let ops: Vec<&Value> = (0..terms.len())
        .map(|i| input(node, inputs, i))
        .collect::<Result<_, _>>()?;
    // The ellipsis of each term covers the dims its letters leave; the broadcast ellipsis is the
    // longest of them.
    let mut ell_dims = Vec::with_capacity(terms.len());
    for (t, v) in terms.iter().zip(&ops) {
        let letters = t.chars().filter(|c| c.is_ascii_alphabetic()).count();
        let rank = v.shape.len();
        let dims = if t.contains("...") {
            match rank.checked_sub(letters) {
                Some(d) => d,
                None => return bad(format!("'{t}' has more letters than rank {rank}")),
            }
        } else {
            0
        };
        ell_dims.push(dims);
    }
    let ell = ell_dims.iter().copied().max().unwrap_or(0);
    if ell > 10 {
        return bad(format!("an ellipsis of {ell} dims"));
    }
    let mut labels = Vec::with_capacity(terms.len());
    for ((t, v), &dims) in terms.iter().zip(&ops).zip(&ell_dims) {
        let l = term_labels(t, dims, ell)?;
        if l.len() != v.shape.len() {
            return bad(format!(
                "'{t}' has {} labels for rank {}",
                l.len(),
                v.shape.len()
            ));
        }
        labels.push(l);
    }
    let out_labels: Vec<char> = match rhs {
        Some(r) => {
            let dims = if r.contains("...") { ell } else { 0 };
            let o = term_labels(r, dims, ell)?;
            for (i, c) in o.iter().enumerate() {
                if o[..i].contains(c) || !labels.iter().any(|l| l.contains(c)) {
                    return bad(format!("output '{r}' repeats or invents a label"));
                }
            }
            o
        }
        None => {
            // numpy's implicit output: the ellipsis, then the letters used exactly once, sorted.
            let mut o: Vec<char> = (0..ell).map(|k| (b'0' + k as u8) as char).collect();
            let mut once: Vec<char> = labels
                .iter()
                .flatten()
                .copied()
                .filter(|c| c.is_ascii_alphabetic())
                .filter(|c| labels.iter().flatten().filter(|x| *x == c).count() == 1)
                .collect();
            once.sort_unstable();
            o.extend(once);
            o
        }
    };
    // Every label's size: equal wherever it appears, except a 1, which broadcasts.
    let mut all: Vec<char> = out_labels.clone();
    for l in labels.iter().flatten() {
        if !all.contains(l) {
            all.push(*l);
        }
    }
    let mut size = vec![1usize; all.len()];
    for (l, v) in labels.iter().zip(&ops) {
        for (c, &d) in l.iter().zip(&v.shape) {
            let at = all.iter().position(|x| x == c).expect("listed");
            if d != 1 {
                if size[at] != 1 && size[at] != d {
                    return bad(format!("label '{c}' has sizes {} and {d}", size[at]));
                }
                size[at] = d;
            }
        }
    }
    let n_out = out_labels.len();
    let out_shape: Vec<usize> = size[..n_out].to_vec();
    let sum_shape: Vec<usize> = size[n_out..].to_vec();
    let n_sum: usize = sum_shape.iter().product();
    let positions: Vec<Vec<usize>> = labels
        .iter()
        .map(|l| {
            l.iter()
                .map(|c| all.iter().position(|x| x == c).expect("listed"))
                .collect()
        })
        .collect();
    let total: usize = out_shape.iter().product();
    let mut data = Vec::with_capacity(total);
    let mut mag = Vec::with_capacity(total);
    let mut value = vec![0usize; all.len()];
    for o in 0..total {
        value[..n_out].copy_from_slice(&unravel(o, &out_shape));
        let (mut s, mut m) = (0.0f64, 0.0f64);
        for r in 0..n_sum {
            value[n_out..].copy_from_slice(&unravel(r, &sum_shape));
            let mut prod = 1.0f64;
            for (v, pos) in ops.iter().zip(&positions) {
                let mut flat = 0;
                for (&p, &d) in pos.iter().zip(&v.shape) {
                    flat = flat * d + if d == 1 { 0 } else { value[p] };
                }
                prod *= v.data[flat];
            }
            s += prod;
            m += prod.abs();
        }
        data.push(s);
        mag.push(m);
    }
    Ok(vec![output(ops[0].dtype, out_shape, data, mag)?])
}
