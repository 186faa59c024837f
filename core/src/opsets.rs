//! The operator-set versions Quorum implements, and what happens to a model stamped with a newer one.
//!
//! Kernels read a node's opset to pick between the forms an op has had; they know the forms up to
//! the versions below (the onnx release the conformance corpus pins, `conformance/src/corpus.rs`).
//! A node of a newer opset may mean something they have never seen, so a model that imports a newer
//! version of one of these domains is refused, as onnxruntime refuses it, naming the version Quorum
//! knows. `QUORUM_ALLOW_NEWER_OPSETS=1` runs such a model anyway: its nodes run as the newest version
//! Quorum knows, and the model carries a warning that says so ([`crate::ir::Model::warnings`]).
//! Custom domains are not versioned by ONNX and are left as declared.
use std::collections::HashMap;

use crate::error::{Error, Result};

/// The newest version of each ONNX domain Quorum implements (onnx 1.23.2's
/// `onnx.defs.get_all_schemas_with_history()`: the newest `since_version` per domain).
pub const LATEST: &[(&str, i64)] = &[
    ("", 28),
    ("ai.onnx.ml", 5),
    ("ai.onnx.preview", 1),
    ("ai.onnx.preview.training", 1),
];

/// The environment variable that lets a model of a newer opset run (as the newest one known).
pub const ALLOW_NEWER_ENV: &str = "QUORUM_ALLOW_NEWER_OPSETS";

/// The newest version of `domain` Quorum implements, if ONNX versions that domain.
pub fn latest(domain: &str) -> Option<i64> {
    LATEST.iter().find(|(d, _)| *d == domain).map(|&(_, v)| v)
}

/// How a newer opset than [`LATEST`] is met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Newer {
    /// An [`Error::UnsupportedOpset`].
    Refuse,
    /// Run as the newest known version, with a warning.
    RunAsLatest,
}

impl Newer {
    /// [`Newer::RunAsLatest`] when `QUORUM_ALLOW_NEWER_OPSETS` is `1` (or `true`), else refuse.
    pub fn from_env() -> Newer {
        match std::env::var(ALLOW_NEWER_ENV).as_deref() {
            Ok("1") | Ok("true") => Newer::RunAsLatest,
            _ => Newer::Refuse,
        }
    }
}

/// The versions nodes run at, from the versions `declared` (domain → version, domains normalised);
/// `warnings` receives one line per domain run at a version other than the one declared.
pub fn resolve(
    declared: &HashMap<String, i64>,
    newer: Newer,
    warnings: &mut Vec<String>,
) -> Result<HashMap<String, i64>> {
    let mut used = declared.clone();
    let mut domains: Vec<&String> = declared.keys().collect();
    domains.sort();
    for domain in domains {
        let version = declared[domain];
        let Some(latest) = latest(domain) else {
            continue;
        };
        if version <= latest {
            continue;
        }
        let shown = if domain.is_empty() { "ai.onnx" } else { domain };
        match newer {
            Newer::Refuse => {
                return Err(Error::UnsupportedOpset {
                    domain: shown.to_string(),
                    declared: version,
                    latest,
                });
            }
            Newer::RunAsLatest => {
                let line = format!(
                    "the model imports {shown} opset {version}, newer than the {latest} Quorum implements; \
                     its nodes run as opset {latest} ({ALLOW_NEWER_ENV}=1)"
                );
                if !warnings.contains(&line) {
                    warnings.push(line);
                }
                used.insert(domain.clone(), latest);
            }
        }
    }
    Ok(used)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, i64)]) -> HashMap<String, i64> {
        pairs.iter().map(|&(d, v)| (d.to_string(), v)).collect()
    }

    #[test]
    fn known_versions_and_custom_domains_pass_unchanged() {
        let declared = map(&[("", 28), ("ai.onnx.ml", 3), ("com.microsoft", 999)]);
        let mut w = Vec::new();
        assert_eq!(resolve(&declared, Newer::Refuse, &mut w).unwrap(), declared);
        assert!(w.is_empty());
    }

    #[test]
    fn a_newer_version_is_refused_naming_both_versions() {
        let e = resolve(&map(&[("", 29)]), Newer::Refuse, &mut Vec::new()).unwrap_err();
        assert!(
            matches!(&e, Error::UnsupportedOpset { domain, declared: 29, latest: 28 } if domain == "ai.onnx"),
            "{e}"
        );
        let e = resolve(&map(&[("ai.onnx.ml", 6)]), Newer::Refuse, &mut Vec::new()).unwrap_err();
        assert!(e.to_string().contains("ai.onnx.ml opset 6"), "{e}");
    }

    #[test]
    fn allowed_it_runs_as_the_latest_and_says_so() {
        let mut w = Vec::new();
        let used = resolve(
            &map(&[("", 999), ("ai.onnx.ml", 2)]),
            Newer::RunAsLatest,
            &mut w,
        )
        .unwrap();
        assert_eq!(used, map(&[("", 28), ("ai.onnx.ml", 2)]));
        assert_eq!(w.len(), 1);
        assert!(
            w[0].contains("opset 999") && w[0].contains("run as opset 28"),
            "{w:?}"
        );
    }
}
