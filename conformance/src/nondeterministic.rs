//! Checks for cases whose values are random by definition (listed `nondeterministic`: Bernoulli,
//! training-mode Dropout). Their values cannot be compared with the expected data, but they are still
//! judged: the number of outputs, each output's shape and dtype against the expected data, and a
//! value rule for every output, chosen by the node that produces it:
//!
//! - `Bernoulli(p)`: every element is 0 or 1; where p <= 0 it is 0, where p >= 1 it is 1; the number
//!   of ones lies within [`SIGMAS`] standard deviations of the sum of p.
//! - `Cast` of a boolean (the expanded Bernoulli: `Cast(Greater(RandomUniformLike(p), p))`): every
//!   element is 0 or 1.
//! - `Dropout(x, ratio, training_mode)` (opset 12 on; ratio from the test data or an initializer,
//!   default 0.5): in training mode each output element is 0 or `x / (1 - ratio)` (up to float
//!   rounding), and with a mask output, mask true ⇔ the element is `x / (1 - ratio)`, mask false ⇒ it
//!   is 0; the number dropped lies within [`SIGMAS`] standard deviations of `ratio * n`. Outside
//!   training mode the output is `x` and the mask all true.
//!
//! An output that no rule covers fails the case: a nondeterministic case is never passed unjudged.
use quorum::ir::{Model, Node};
use quorum::{DType, Tensor, Value};

/// How far (in standard deviations of the binomial count) a random count may stray from its mean:
/// wide enough that a correct engine fails about once in two million runs, narrow enough that an
/// engine that never (or always) drops or draws is caught on the corpus's 60-element tensors.
pub const SIGMAS: f64 = 5.0;

/// Checks one data set of a nondeterministic case; `Ok` says what was checked.
pub fn check(
    model: &Model,
    inputs: &[(String, Value)],
    actual: &[Value],
    expected: &[Value],
) -> Result<String, String> {
    if actual.len() != expected.len() {
        return Err(format!(
            "{} outputs, expected {}",
            actual.len(),
            expected.len()
        ));
    }
    let mut notes = vec![format!(
        "{} output{}: shape and dtype",
        actual.len(),
        if actual.len() == 1 { "" } else { "s" }
    )];
    let mut covered = vec![false; actual.len()];
    for (k, (a, e)) in actual.iter().zip(expected).enumerate() {
        let (a, e) = (tensor(a, k)?, tensor(e, k)?);
        if a.dtype() != e.dtype() || a.shape() != e.shape() {
            return Err(format!(
                "output {k}: {} but expected {}",
                a.describe(),
                e.describe()
            ));
        }
    }
    let g = &model.graph;
    for k in 0..actual.len() {
        if covered[k] {
            continue;
        }
        let name = &g
            .outputs
            .get(k)
            .ok_or(format!("output {k}: not declared"))?
            .name;
        let Some(node) = g.nodes.iter().find(|n| n.outputs.contains(name)) else {
            return Err(format!("output {k} ('{name}'): no node produces it"));
        };
        let note = match (node.domain.as_str(), node.op_type.as_str()) {
            ("", "Bernoulli") => bernoulli(node, model, inputs, tensor(&actual[k], k)?)?,
            ("", "Cast") if node.inputs.first().is_some_and(|i| is_bool(model, i)) => {
                zeros_and_ones(tensor(&actual[k], k)?)?;
                format!("output {k} (Cast of a boolean) in {{0, 1}}")
            }
            ("", "Dropout") => {
                let out = |slot: usize| {
                    let name = node.outputs.get(slot).filter(|n| !n.is_empty())?;
                    let j = g.outputs.iter().position(|o| &o.name == name)?;
                    Some(j)
                };
                let (y, mask) = (out(0), out(1));
                for j in [y, mask].into_iter().flatten() {
                    covered[j] = true;
                }
                let y = y.map(|j| tensor(&actual[j], j)).transpose()?;
                let mask = mask.map(|j| tensor(&actual[j], j)).transpose()?;
                dropout(node, model, inputs, y, mask)?
            }
            (d, op) => {
                return Err(format!(
                    "output {k} ('{name}', produced by {}{op}): no value rule for a random output; \
                     add one in conformance/src/nondeterministic.rs",
                    if d.is_empty() {
                        String::new()
                    } else {
                        format!("{d}::")
                    }
                ));
            }
        };
        covered[k] = true;
        notes.push(note);
    }
    Ok(notes.join("; "))
}

fn tensor(v: &Value, k: usize) -> Result<&Tensor, String> {
    match v {
        Value::Tensor(t) => Ok(t),
        Value::Optional(Some(b)) => tensor(b, k),
        other => Err(format!(
            "output {k}: {} where a tensor was expected",
            other.describe()
        )),
    }
}

/// A value the test data feeds, or an initializer.
fn known<'a>(model: &'a Model, inputs: &'a [(String, Value)], name: &str) -> Option<&'a Tensor> {
    if name.is_empty() {
        return None;
    }
    if let Some((_, v)) = inputs.iter().find(|(n, _)| n == name) {
        return v.as_tensor();
    }
    model
        .graph
        .initializers
        .get(name)
        .and_then(|v| v.as_tensor())
}

fn is_bool(model: &Model, name: &str) -> bool {
    const BOOL_OPS: &[&str] = &[
        "Greater",
        "Less",
        "GreaterOrEqual",
        "LessOrEqual",
        "Equal",
        "Not",
        "And",
        "Or",
        "Xor",
        "IsNaN",
        "IsInf",
    ];
    let g = &model.graph;
    let declared = g
        .inputs
        .iter()
        .find(|i| i.name == name)
        .map(|i| &i.ty)
        .or_else(|| g.value_info.get(name));
    if let Some(quorum::ir::ValueType::Tensor {
        dtype: Some(dtype), ..
    }) = declared
    {
        return *dtype == DType::Bool;
    }
    g.nodes.iter().any(|n| {
        n.domain.is_empty()
            && BOOL_OPS.contains(&n.op_type.as_str())
            && n.outputs.first().is_some_and(|o| o == name)
    })
}

fn values(t: &Tensor, what: &str) -> Result<Vec<f64>, String> {
    t.to_f64_vec()
        .map_err(|e| format!("{what}: {} cannot be read as numbers: {e}", t.describe()))
}

fn zeros_and_ones(t: &Tensor) -> Result<Vec<f64>, String> {
    let v = values(t, "output")?;
    if let Some(i) = v.iter().position(|&x| x != 0.0 && x != 1.0) {
        return Err(format!(
            "element {i} is {}, but a random 0/1 output holds only 0 and 1",
            v[i]
        ));
    }
    Ok(v)
}

/// `Err` when `count` lies more than [`SIGMAS`] standard deviations from `mean`.
fn plausible(what: &str, count: usize, mean: f64, variance: f64) -> Result<String, String> {
    let sd = variance.sqrt();
    if (count as f64 - mean).abs() > SIGMAS * sd + 1e-9 {
        return Err(format!(
            "{what}: {count}, expected {mean:.1} ± {sd:.1} (more than {SIGMAS} standard deviations away)"
        ));
    }
    Ok(format!("{what}: {count} (expected {mean:.1} ± {sd:.1})"))
}

fn bernoulli(
    node: &Node,
    model: &Model,
    inputs: &[(String, Value)],
    y: &Tensor,
) -> Result<String, String> {
    let v = zeros_and_ones(y)?;
    let Some(p) = node
        .inputs
        .first()
        .and_then(|name| known(model, inputs, name))
    else {
        return Ok(format!("Bernoulli: {} values in {{0, 1}}", v.len()));
    };
    let p = values(p, "Bernoulli's input")?;
    if p.len() != v.len() {
        return Err(format!(
            "Bernoulli: {} outputs for {} probabilities",
            v.len(),
            p.len()
        ));
    }
    for (i, (&y, &p)) in v.iter().zip(&p).enumerate() {
        if (p <= 0.0 && y != 0.0) || (p >= 1.0 && y != 1.0) {
            return Err(format!(
                "Bernoulli: element {i} is {y} with probability {p}"
            ));
        }
    }
    let ones = v.iter().filter(|&&y| y == 1.0).count();
    let mean: f64 = p.iter().map(|p| p.clamp(0.0, 1.0)).sum();
    let var: f64 = p
        .iter()
        .map(|p| p.clamp(0.0, 1.0) * (1.0 - p.clamp(0.0, 1.0)))
        .sum();
    let count = plausible("ones", ones, mean, var)?;
    Ok(format!(
        "Bernoulli: {} values in {{0, 1}}, {count}",
        v.len()
    ))
}

/// Relative rounding allowed between `x / (1 - ratio)` computed in f64 and an engine's result.
fn rounding(d: DType) -> f64 {
    4.0 * match d {
        DType::F64 => f64::EPSILON,
        DType::F16 => 2f64.powi(-10),
        DType::BF16 => 2f64.powi(-7),
        _ => f32::EPSILON as f64,
    }
}

fn dropout(
    node: &Node,
    model: &Model,
    inputs: &[(String, Value)],
    y: Option<&Tensor>,
    mask: Option<&Tensor>,
) -> Result<String, String> {
    let who = format!("Dropout '{}'", node.name);
    let x = node
        .inputs
        .first()
        .and_then(|name| known(model, inputs, name))
        .ok_or(format!("{who}: its input is not fed by the test data"))?;
    let scalar = |slot: usize, what: &str| -> Result<Option<f64>, String> {
        let Some(name) = node.inputs.get(slot).filter(|n| !n.is_empty()) else {
            return Ok(None);
        };
        let t = known(model, inputs, name).ok_or(format!(
            "{who}: {what} '{name}' is neither fed by the test data nor an initializer"
        ))?;
        match values(t, what)?.as_slice() {
            [v] => Ok(Some(*v)),
            v => Err(format!(
                "{who}: {what} has {} elements, expected 1",
                v.len()
            )),
        }
    };
    let (ratio, training) = if node.opset >= 12 {
        (
            scalar(1, "ratio")?.unwrap_or(0.5),
            scalar(2, "training_mode")?.unwrap_or(0.0) != 0.0,
        )
    } else {
        let ratio = match node.attrs.get("ratio") {
            Some(quorum::ir::Attr::Float(r)) => *r as f64,
            _ => 0.5,
        };
        (ratio, false)
    };
    let xs = values(x, "Dropout's input")?;
    let scale = if training { 1.0 / (1.0 - ratio) } else { 1.0 };
    let tol = rounding(y.map_or(x.dtype(), Tensor::dtype));
    let ys = y.map(|y| values(y, "output")).transpose()?;
    let ms = mask.map(|m| values(m, "mask")).transpose()?;
    for (what, len) in [("output", ys.as_ref()), ("mask", ms.as_ref())]
        .iter()
        .filter_map(|(w, v)| v.map(|v| (*w, v.len())))
    {
        if len != xs.len() {
            return Err(format!(
                "{who}: {what} has {len} elements, input {}",
                xs.len()
            ));
        }
    }
    let mut dropped = 0usize;
    for (i, &x) in xs.iter().enumerate() {
        let kept_value = x * scale;
        let y = ys.as_ref().map(|v| v[i]);
        let kept_by_value = y.map(|y| (y - kept_value).abs() <= tol * kept_value.abs());
        let kept = match ms.as_ref().map(|m| m[i] != 0.0) {
            Some(true) => {
                if kept_by_value == Some(false) {
                    return Err(format!(
                        "{who}: element {i}: mask true but output {} != x / (1 - ratio) = {kept_value} (x {x}, ratio {ratio})",
                        y.unwrap_or(f64::NAN)
                    ));
                }
                true
            }
            Some(false) => {
                if y.is_some_and(|y| y != 0.0) {
                    return Err(format!(
                        "{who}: element {i}: mask false but output {} != 0",
                        y.unwrap_or(f64::NAN)
                    ));
                }
                false
            }
            None => match (y, kept_by_value) {
                (Some(y), Some(false)) if y != 0.0 => {
                    return Err(format!(
                        "{who}: element {i} is {y}: neither 0 nor x / (1 - ratio) = {kept_value} (x {x}, ratio {ratio})"
                    ));
                }
                // A zero output of a non-zero x was dropped; of a zero x it cannot be told apart.
                (Some(y), _) => !(y == 0.0 && x != 0.0),
                (None, _) => true,
            },
        };
        if !kept {
            dropped += 1;
        }
    }
    if !training {
        if dropped > 0 {
            return Err(format!(
                "{who}: not in training mode, yet {dropped} elements were dropped"
            ));
        }
        return Ok(format!("{who}: inference mode, output = input"));
    }
    // Elements whose x is 0 count as kept when there is no mask to tell; leave them out of the count.
    let n = if ms.is_some() {
        xs.len()
    } else {
        xs.iter().filter(|&&x| x != 0.0).count()
    };
    let count = plausible(
        "dropped",
        dropped.min(n),
        ratio * n as f64,
        ratio * (1.0 - ratio) * n as f64,
    )?;
    Ok(format!(
        "{who}: ratio {ratio}, every element 0 or x / (1 - ratio){}, {count}",
        if ms.is_some() {
            ", consistent with the mask"
        } else {
            ""
        }
    ))
}
