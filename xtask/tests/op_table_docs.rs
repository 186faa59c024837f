//! The README's table of verification classes says what the op table (`quorum_optable`) says: every
//! row of the op table is listed under its class, and nothing else is.
#![forbid(unsafe_code)]
use std::collections::BTreeSet;
use std::path::Path;

use quorum_optable::{Accumulation, Class, ROWS};

/// The README's class of `name` (its first column), as a table class.
fn class_named(name: &str) -> Option<Class> {
    Some(match name {
        "exact" => Class::Exact,
        "correctly rounded" => Class::Rounded,
        "elementwise arithmetic" => Class::Sum(Accumulation::Elementwise),
        "sums and products" => Class::Sum(Accumulation::Reduction),
        _ => return None,
    })
}

/// One listed op: its name, the attribute values its parenthesis names (`Resize (linear, cubic)`;
/// empty for none), and the class it is listed under.
type Listed = (String, Vec<String>, Class);

/// The ops listed in the class table of `readme` (the table whose header is `| class | bound | ops |`).
fn listed(readme: &str) -> Result<Vec<Listed>, String> {
    let mut lines = readme
        .lines()
        .map(str::trim)
        .skip_while(|l| !l.starts_with("| class | bound | ops |"));
    if lines.next().is_none() {
        return Err("README.md has no `| class | bound | ops |` table".into());
    }
    let mut out = Vec::new();
    for line in lines.skip(1).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (class, ops) = (cells[1], cells[3]);
        if class == "unary math" {
            // "1 ulp: Reciprocal, Sqrt; 4: Exp, ...; 8: ..."
            for part in ops.split(';') {
                let (n, names) = part
                    .split_once(':')
                    .ok_or_else(|| format!("unary math without ulps: {part}"))?;
                let ulps: u32 = n
                    .trim()
                    .trim_end_matches("ulp")
                    .trim()
                    .parse()
                    .map_err(|_| format!("unary math ulps '{n}'"))?;
                out.extend(names_of(names, Class::Math { ulps }));
            }
        } else {
            let c = class_named(class).ok_or_else(|| format!("unknown class '{class}'"))?;
            out.extend(names_of(ops, c));
        }
    }
    Ok(out)
}

/// `Abs, ScatterElements (none, max, min), Size; every integer or bool output` → the op names (words
/// that start with a capital and are all letters and digits) with their parenthesised values; what
/// follows a `;` is prose.
fn names_of(list: &str, class: Class) -> Vec<Listed> {
    let mut out = Vec::new();
    let mut rest = list.split(';').next().unwrap_or("");
    while !rest.is_empty() {
        let (item, tail) = match (rest.find(','), rest.find('(')) {
            (Some(c), Some(p)) if p < c => {
                let close = rest[p..].find(')').map_or(rest.len(), |i| p + i + 1);
                let next = rest[close..]
                    .find(',')
                    .map_or(rest.len(), |i| close + i + 1);
                (&rest[..close], &rest[next..])
            }
            (Some(c), _) => (&rest[..c], &rest[c + 1..]),
            (None, _) => (rest, ""),
        };
        rest = tail;
        let (name, values) = match item.split_once('(') {
            Some((n, v)) => (
                n.trim(),
                v.trim_end_matches(')')
                    .split(',')
                    .map(|s| s.trim().to_string())
                    .collect(),
            ),
            None => (item.trim(), vec![]),
        };
        let is_op = name.chars().next().is_some_and(|c| c.is_ascii_uppercase())
            && name.chars().all(|c| c.is_ascii_alphanumeric());
        if is_op {
            out.push((name.to_string(), values, class));
        }
    }
    out
}

/// Where the README's listing and the op table differ, one line per fault.
fn differences(readme: &str) -> Result<Vec<String>, String> {
    let listed = listed(readme)?;
    let mut faults = Vec::new();
    let mut seen = BTreeSet::new();
    for (name, values, class) in &listed {
        seen.insert(name.clone());
        let Some(row) = quorum_optable::find(name) else {
            faults.push(format!("{name} is listed but has no row"));
            continue;
        };
        let want: Vec<Class> = match row.class {
            Class::ByAttribute(a) if !values.is_empty() => values
                .iter()
                .map(|v| row.class.resolve(|n| (n == a.attr).then(|| v.clone())))
                .collect(),
            c => vec![c.resolve(|_| None)],
        };
        // The README lists sequential updates (Scatter's add and mul) as elementwise arithmetic: the
        // same constant, in the element type (its prose says so).
        let same = |w: &Class| {
            w == class
                || (*w == Class::Sum(Accumulation::Sequential)
                    && *class == Class::Sum(Accumulation::Elementwise))
        };
        if !want.iter().all(same) {
            faults.push(format!(
                "{name} {values:?} is listed as {class:?}, the table says {want:?}"
            ));
        }
    }
    for row in ROWS {
        if !seen.contains(row.name) {
            faults.push(format!("{} has a row but is not listed", row.name));
        }
    }
    Ok(faults)
}

fn readme() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    std::fs::read_to_string(root.join("README.md")).expect("README.md")
}

#[test]
fn the_readme_class_table_is_the_op_table() {
    assert_eq!(differences(&readme()), Ok(vec![]));
}

/// The check catches a moved op, an op dropped from the listing, a wrong attribute form and a
/// missing table.
#[test]
fn a_drifted_readme_is_caught() {
    let text = readme();
    let moved = text
        .replacen("4: Exp, Log, Erf,", "4: Exp, Log,", 1)
        .replacen("8: Elu,", "8: Erf, Elu,", 1);
    let faults = differences(&moved).unwrap();
    assert!(faults.iter().any(|f| f.starts_with("Erf")), "{faults:?}");
    let dropped = text.replacen("Softsign, ", "", 1);
    let faults = differences(&dropped).unwrap();
    assert!(
        faults.iter().any(|f| f.starts_with("Softsign")),
        "{faults:?}"
    );
    let wrong_form = text.replacen("Resize (nearest)", "Resize (linear)", 1);
    let faults = differences(&wrong_form).unwrap();
    assert!(faults.iter().any(|f| f.starts_with("Resize")), "{faults:?}");
    assert!(differences("no table here").is_err());
}
