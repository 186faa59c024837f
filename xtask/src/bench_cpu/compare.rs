//! Quorum's outputs against onnxruntime's for one run on the same inputs: per output, the largest
//! absolute difference and the largest relative one.
use std::path::Path;

use quorum::Tensor;

/// How one output compares.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OutputDiff {
    pub name: String,
    /// `dtype[shape]` as Quorum returned it.
    pub quorum: String,
    pub elements: usize,
    /// max |q − o| (0 when both are NaN, infinite when only one is).
    pub max_abs: f64,
    /// max |q − o| / max(|o|, 1e-6).
    pub max_rel: f64,
    /// max |o|: the output's scale, against which `max_abs` is judged.
    pub scale: f64,
    /// Why the output could not be compared element by element (dtype or shape differ, not a
    /// tensor, unreadable), if so.
    pub note: Option<String>,
    /// A remark that is no failure: onnxruntime's output holds one value throughout (the light
    /// models of the corpus, whose weights make every class equally likely), so agreeing says little.
    pub remark: Option<String>,
}

/// Compares each output named `names` (graph order): Quorum's file (`quorum run`'s naming) in
/// `q_dir`, onnxruntime's `<k>.npy` in `o_dir`.
pub fn outputs(q_dir: &Path, o_dir: &Path, names: &[String]) -> Vec<OutputDiff> {
    let stems = quorum::output_files::file_stems(names);
    names
        .iter()
        .zip(stems)
        .enumerate()
        .map(|(k, (name, stem))| {
            let ours = read_quorum(q_dir, &stem);
            let theirs = std::fs::read(o_dir.join(format!("{k}.npy")))
                .map_err(|e| e.to_string())
                .and_then(|b| quorum::npy::read(&b).map_err(|e| e.to_string()));
            match (ours, theirs) {
                (Ok(q), Ok(o)) => diff(name, &q, &o),
                (q, o) => OutputDiff {
                    name: name.clone(),
                    quorum: q.as_ref().map(Tensor::describe).unwrap_or_default(),
                    elements: 0,
                    max_abs: f64::NAN,
                    max_rel: f64::NAN,
                    scale: f64::NAN,
                    remark: None,
                    note: Some(format!(
                        "not compared: {}",
                        [
                            q.err().map(|e| format!("quorum: {e}")),
                            o.err().map(|e| format!("onnxruntime: {e}"))
                        ]
                        .into_iter()
                        .flatten()
                        .collect::<Vec<_>>()
                        .join("; ")
                    )),
                },
            }
        })
        .collect()
}

fn read_quorum(dir: &Path, stem: &str) -> Result<Tensor, String> {
    let npy = dir.join(format!("{stem}.npy"));
    if let Ok(b) = std::fs::read(&npy) {
        return quorum::npy::read(&b).map_err(|e| e.to_string());
    }
    let pb = dir.join(format!("{stem}.pb"));
    let b = std::fs::read(&pb).map_err(|e| format!("no {stem}.npy or {stem}.pb: {e}"))?;
    quorum::loader::tensor_from_pb(&b, &Default::default()).map_err(|e| {
        format!(
            "{}: {e} (a sequence or optional is not compared)",
            pb.display()
        )
    })
}

/// The differences of `q` from `o`.
pub fn diff(name: &str, q: &Tensor, o: &Tensor) -> OutputDiff {
    let mut d = OutputDiff {
        name: name.to_string(),
        quorum: q.describe(),
        elements: q.len(),
        max_abs: f64::NAN,
        max_rel: f64::NAN,
        scale: f64::NAN,
        note: None,
        remark: None,
    };
    if q.dtype() != o.dtype() {
        d.note = Some(format!("dtype differs: onnxruntime gives {}", o.describe()));
        return d;
    }
    if q.shape() != o.shape() {
        d.note = Some(format!("shape differs: onnxruntime gives {}", o.describe()));
        return d;
    }
    let (qv, ov) = match (q.to_f64_vec(), o.to_f64_vec()) {
        (Ok(a), Ok(b)) => (a, b),
        _ => {
            d.note = Some(if q == o {
                "equal (not numeric)".into()
            } else {
                "differs (not numeric)".into()
            });
            return d;
        }
    };
    let (mut max_abs, mut max_rel) = (0.0f64, 0.0f64);
    for (&a, &b) in qv.iter().zip(&ov) {
        let e = if a.is_nan() && b.is_nan() || a == b {
            0.0
        } else if a.is_nan() || b.is_nan() {
            f64::INFINITY
        } else {
            (a - b).abs()
        };
        max_abs = max_abs.max(e);
        max_rel = max_rel.max(e / b.abs().max(1e-6));
    }
    d.max_abs = max_abs;
    d.max_rel = max_rel;
    d.scale = ov.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let (lo, hi) = ov
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        });
    if ov.len() > 1 && hi - lo <= 1e-6 * d.scale {
        d.remark = Some(format!(
            "every element is {lo:.6} (to 1e-6): agreement says little"
        ));
    }
    d
}

impl OutputDiff {
    /// Whether the output differs beyond 1e-3 of its scale, or could not be compared.
    // `!(d <= bound)` on purpose: a NaN difference is suspect.
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    pub fn suspect(&self) -> bool {
        self.note
            .as_deref()
            .is_some_and(|n| n != "equal (not numeric)")
            || !(self.max_abs <= 1e-3 * self.scale.max(1e-6))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: &[f32]) -> Tensor {
        Tensor::from_f32(&[v.len()], v.to_vec()).unwrap()
    }

    #[test]
    fn differences_are_the_largest_absolute_and_relative_ones() {
        let d = diff("y", &t(&[1.0, 2.0, 100.5]), &t(&[1.0, 2.5, 100.0]));
        assert_eq!(d.max_abs, 0.5);
        assert_eq!(d.max_rel, 0.2);
        assert!(d.note.is_none());
        assert_eq!(d.scale, 100.0);
        assert!(d.suspect(), "0.5 off on a scale of 100 is beyond 1e-3");
        assert!(!diff("y", &t(&[1.0, 2.0, 100.05]), &t(&[1.0, 2.0, 100.0])).suspect());
        // Equal outputs compare as zero; a deliberately changed element does not.
        assert_eq!(
            diff("y", &t(&[3.0, f32::NAN]), &t(&[3.0, f32::NAN])).max_abs,
            0.0
        );
        assert_eq!(
            diff("y", &t(&[3.0, 1.0]), &t(&[3.0, f32::NAN])).max_abs,
            f64::INFINITY
        );
    }

    #[test]
    fn a_constant_output_is_remarked_but_not_suspect() {
        let d = diff("p", &t(&[0.001; 4]), &t(&[0.001; 4]));
        assert!(d.remark.is_some() && !d.suspect());
        assert!(
            diff("p", &t(&[0.001, 0.002]), &t(&[0.001, 0.002]))
                .remark
                .is_none()
        );
    }

    #[test]
    fn other_shapes_or_dtypes_are_noted_not_compared() {
        let d = diff("y", &t(&[1.0, 2.0]), &t(&[1.0, 2.0, 3.0]));
        assert!(d.note.unwrap().contains("shape differs"));
        let i = Tensor::from_i64(&[2], vec![1, 2]).unwrap();
        assert!(
            diff("y", &t(&[1.0, 2.0]), &i)
                .note
                .unwrap()
                .contains("dtype differs")
        );
    }
}
