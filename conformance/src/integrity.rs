//! Checks that the corpus and the expectation lists still describe each other, so that neither can
//! shrink unnoticed: the number of cases per corpus part is pinned (`corpus/counts.txt`), and every
//! expectation-list entry must name a case of the corpus.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::case::{Case, PARTS};
use crate::expect::Expectations;

/// `conformance/corpus/counts.txt`.
pub fn counts_path() -> PathBuf {
    crate::workspace_root().join("conformance/corpus/counts.txt")
}

/// Reads `<part> <count>` lines (`#` comments skipped); every part of [`PARTS`] must be pinned once.
pub fn parse_counts(text: &str, origin: &Path) -> Result<BTreeMap<String, usize>> {
    let mut pins = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(part), Some(n), None) = (words.next(), words.next(), words.next()) else {
            bail!(
                "{}:{}: expected `<part> <count>`, got `{line}`",
                origin.display(),
                i + 1
            );
        };
        if !PARTS.contains(&part) {
            bail!(
                "{}:{}: unknown corpus part '{part}' (parts: {})",
                origin.display(),
                i + 1,
                PARTS.join(", ")
            );
        }
        let n: usize = n
            .parse()
            .with_context(|| format!("{}:{}: '{n}' is not a count", origin.display(), i + 1))?;
        if pins.insert(part.to_string(), n).is_some() {
            bail!("{}:{}: part {part} pinned twice", origin.display(), i + 1);
        }
    }
    for part in PARTS {
        if !pins.contains_key(*part) {
            bail!("{}: part {part} is not pinned", origin.display());
        }
    }
    Ok(pins)
}

/// Compares the cases found per part with the pins; the error lists every part that differs.
pub fn check_counts(cases: &[Case], pins: &BTreeMap<String, usize>, origin: &Path) -> Result<()> {
    let mut found: BTreeMap<&str, usize> = BTreeMap::new();
    for c in cases {
        *found.entry(c.part.as_str()).or_default() += 1;
    }
    let wrong: Vec<String> = PARTS
        .iter()
        .filter_map(|part| {
            let (have, want) = (
                found.get(part).copied().unwrap_or(0),
                pins.get(*part).copied().unwrap_or(0),
            );
            (have != want).then(|| format!("{part}: {have} cases, pinned {want}"))
        })
        .collect();
    if !wrong.is_empty() {
        bail!(
            "the corpus does not hold the pinned number of cases ({}): {}. A generator case was lost \
             or added: find out why (corpus/generate.py, the lock), then change the pin with the reason",
            origin.display(),
            wrong.join("; ")
        );
    }
    Ok(())
}

/// Reads the pinned counts and checks `cases` (the whole corpus, before any filter) against them.
pub fn check_pinned_counts(cases: &[Case]) -> Result<()> {
    let path = counts_path();
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    check_counts(cases, &parse_counts(&text, &path)?, &path)
}

/// Entries of an expectation list (read from `list`) that name no case of the corpus, one line each
/// with the file and line.
pub fn stale_entries(expected: &Expectations, list: &Path, cases: &[Case]) -> Vec<String> {
    let ids: BTreeSet<&str> = cases.iter().map(|c| c.id.as_str()).collect();
    expected
        .entries
        .iter()
        .filter(|(id, _)| !ids.contains(id.as_str()))
        .map(|(id, e)| {
            format!(
                "{}:{}: {id} names no case of the corpus",
                list.display(),
                e.line
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus(per_part: &[(&str, usize)]) -> Vec<Case> {
        per_part
            .iter()
            .flat_map(|&(part, n)| {
                (0..n).map(move |i| Case {
                    id: format!("{part}/test_{i}"),
                    part: part.to_string(),
                    dir: PathBuf::from(format!("/nowhere/{part}/test_{i}")),
                })
            })
            .collect()
    }

    const PINS: &str =
        "# pins\nnode 3\nsimple 1\npytorch-converted 1\npytorch-operator 1\nlight 2\ncases 1\n";
    const FULL: &[(&str, usize)] = &[
        ("node", 3),
        ("simple", 1),
        ("pytorch-converted", 1),
        ("pytorch-operator", 1),
        ("light", 2),
        ("cases", 1),
    ];

    #[test]
    fn the_pinned_counts_pass() {
        let pins = parse_counts(PINS, Path::new("counts.txt")).unwrap();
        check_counts(&corpus(FULL), &pins, Path::new("counts.txt")).unwrap();
    }

    #[test]
    fn a_shrunken_part_fails_naming_it() {
        let pins = parse_counts(PINS, Path::new("counts.txt")).unwrap();
        let mut shrunk = corpus(FULL);
        shrunk.retain(|c| c.id != "node/test_1");
        let e = check_counts(&shrunk, &pins, Path::new("counts.txt"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("node: 2 cases, pinned 3"), "{e}");
        assert!(e.contains("counts.txt"), "{e}");
        // A part that vanished entirely, and one that grew, fail too.
        let mut other: Vec<(&str, usize)> = FULL.to_vec();
        other[4].1 = 0;
        other[0].1 = 4;
        let e = check_counts(&corpus(&other), &pins, Path::new("counts.txt"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("light: 0 cases, pinned 2"), "{e}");
        assert!(e.contains("node: 4 cases, pinned 3"), "{e}");
    }

    #[test]
    fn a_pin_file_missing_a_part_or_naming_an_unknown_one_is_an_error() {
        assert!(parse_counts("node 3\n", Path::new("c.txt")).is_err());
        let e = parse_counts(&format!("{PINS}nodes 4\n"), Path::new("c.txt")).unwrap_err();
        assert!(e.to_string().starts_with("c.txt:8:"), "{e}");
    }

    #[test]
    fn the_repository_pins_every_part() {
        let path = counts_path();
        parse_counts(&std::fs::read_to_string(&path).unwrap(), &path).unwrap();
    }

    #[test]
    fn an_entry_naming_a_missing_case_is_stale() {
        let list = Path::new("expected/x.txt");
        let text =
            "node/test_0 fail a reason\nnode/test_missing unsupported gone from the corpus\n";
        let expected = Expectations::parse(text, list).unwrap();
        let stale = stale_entries(&expected, list, &corpus(FULL));
        assert_eq!(
            stale,
            ["expected/x.txt:2: node/test_missing names no case of the corpus"]
        );
    }
}
