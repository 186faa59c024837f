//! Expectation lists: `expected/<engine>.txt` names every case that does not pass on that engine, with
//! its status and a one-line reason. An unlisted non-pass, or a listed case that now passes, is an
//! unexpected result and fails the check.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    Pass,
    Fail,
    Unsupported,
    /// Output is random by definition (e.g. RandomNormal, training-mode Dropout): the case must run,
    /// its values are not compared.
    Nondeterministic,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "fail",
            Status::Unsupported => "unsupported",
            Status::Nondeterministic => "nondeterministic",
        }
    }

    pub fn parse(s: &str) -> Option<Status> {
        Some(match s {
            "pass" => Status::Pass,
            "fail" => Status::Fail,
            "unsupported" => Status::Unsupported,
            "nondeterministic" => Status::Nondeterministic,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone)]
pub struct Expectation {
    pub status: Status,
    pub reason: String,
    /// The line of the list it was read from (0 for an entry made by this run).
    pub line: usize,
}

#[derive(Debug, Clone, Default)]
pub struct Expectations {
    pub entries: BTreeMap<String, Expectation>,
}

pub fn path_for(engine: &str) -> PathBuf {
    crate::workspace_root()
        .join("conformance/expected")
        .join(format!("{engine}.txt"))
}

impl Expectations {
    /// Reads a list; a missing file is an empty list (every case expected to pass).
    pub fn load(path: &Path) -> Result<Expectations> {
        match std::fs::read_to_string(path) {
            Ok(text) => Expectations::parse(&text, path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Expectations::default()),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    /// Parses a list's text; errors name `path` and the line.
    pub fn parse(text: &str, path: &Path) -> Result<Expectations> {
        let mut entries = BTreeMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut parts = line.splitn(3, char::is_whitespace);
            let (Some(id), Some(status)) = (parts.next(), parts.next()) else {
                bail!(
                    "{}:{}: expected `<case> <status> <reason>`",
                    path.display(),
                    i + 1
                );
            };
            let status = Status::parse(status.trim())
                .filter(|s| *s != Status::Pass)
                .with_context(|| {
                    format!("{}:{}: unknown status '{status}'", path.display(), i + 1)
                })?;
            let reason = parts.next().unwrap_or("").trim().to_string();
            if reason.is_empty() {
                bail!("{}:{}: case {id} has no reason", path.display(), i + 1);
            }
            let entry = Expectation {
                status,
                reason,
                line: i + 1,
            };
            if entries.insert(id.to_string(), entry).is_some() {
                bail!("{}:{}: case {id} is listed twice", path.display(), i + 1);
            }
        }
        Ok(Expectations { entries })
    }

    pub fn expected(&self, id: &str) -> Status {
        self.entries.get(id).map_or(Status::Pass, |e| e.status)
    }

    pub fn save(&self, path: &Path, engine: &str) -> Result<()> {
        let mut out = format!(
            "# Cases that do not pass on engine `{engine}`: <case> <status> <reason>.\n\
             # status: fail | unsupported | nondeterministic. Every line is a claim: keep the reason true.\n\
             # A case the engine leaves unsupported by its own rule (an oracle engine's op outside the\n\
             # op table, optable/src/table.rs) needs no line.\n"
        );
        for (id, e) in &self.entries {
            out.push_str(&format!("{id} {} {}\n", e.status.as_str(), e.reason));
        }
        std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))
    }
}
