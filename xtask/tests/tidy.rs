//! Repository hygiene, run as ordinary tests: docs must not drift from the tree, and unsafe code
//! must say why it is sound.
#![forbid(unsafe_code)]
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives inside the workspace")
}

/// Every backticked path in ARCHITECTURE.md that starts with one of our top-level folders must exist
/// (except under "Not built yet", which names what is planned).
#[test]
fn architecture_paths_exist() {
    let full = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let text = full.split("## Not built yet").next().unwrap_or(&full);
    let mut checked = 0;
    let mut missing = Vec::new();
    for (i, chunk) in text.split('`').enumerate() {
        let looks_like_path = i % 2 == 1
            && chunk.contains('/')
            && !chunk.contains(' ')
            && [
                "runtime/",
                "core/",
                "cuda/",
                "wgpu/",
                "sim/",
                "optable/",
                "kernels/",
                "conformance/",
                "xtask/",
                "reports/",
                "oracle/",
                "fuzz/",
                "benches/",
            ]
            .iter()
            .any(|p| chunk.starts_with(p));
        if looks_like_path {
            checked += 1;
            let p = chunk.trim_end_matches('/');
            // `core/src/proto` is generated into OUT_DIR from core/proto/onnx.proto.
            if p != "core/src/proto" && !root().join(p).exists() {
                missing.push(chunk.to_string());
            }
        }
    }
    assert!(
        checked > 10,
        "expected ARCHITECTURE.md to name the tree's paths, found {checked}"
    );
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist: {missing:?}"
    );
}

/// The README's two commands are the ones CI and users run.
#[test]
fn readme_names_the_two_commands() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    assert!(readme.contains("cargo xtask conformance"));
    assert!(readme.contains("cargo test --workspace"));
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(
        ci.contains("cargo test --workspace"),
        ".ci/run must run the README's test command"
    );
}

// ---- Unsafe code ----------------------------------------------------------------------------------

/// The packages whose Rust sources the unsafe-code checks read, besides every workspace member
/// (read from the root `Cargo.toml`, so that a new crate is checked from its first commit). Each
/// must exist: a renamed or missing folder fails the checks rather than passing them unread.
/// `fuzz/cargo-fuzz` (its own workspace, built with libFuzzer) is a nested package, which
/// [`rust_files`] never enters, and is not read.
const UNSAFE_CHECKED: &[&str] = &[
    "runtime",
    "kernels",
    "device-tests",
    "oracle",
    "conformance",
    "fuzz",
    "benches",
    "benches/matrix",
    "xtask",
];

/// How many code lines of one statement may stand between an unsafe block and the `SAFETY:`
/// comment above that statement: rustfmt breaks `let x =` / `f(` before a long `unsafe { .. }`.
const CONTINUATION_LINES: usize = 2;

/// [`UNSAFE_CHECKED`] and the workspace members, each once, in that order.
fn unsafe_checked_packages() -> Vec<String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let members = manifest
        .split_once("members")
        .and_then(|(_, rest)| rest.split_once('['))
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(list, _)| list)
        .expect("the workspace Cargo.toml lists its members");
    let mut packages: Vec<String> = UNSAFE_CHECKED.iter().map(|p| p.to_string()).collect();
    for member in members.split('"').skip(1).step_by(2) {
        if !packages.iter().any(|p| p == member) {
            packages.push(member.to_string());
        }
    }
    packages
}

/// The `.rs` files under `dir`, skipping `target/`, hidden folders and nested packages (a folder
/// with its own `Cargo.toml` is another package: `benches/matrix` under `benches`,
/// `fuzz/cargo-fuzz` under `fuzz`).
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap().to_string_lossy();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') && !path.join("Cargo.toml").exists() {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// A package's folder and its Rust sources; panics (fails the test) where the folder or its
/// manifest is missing, or it holds no Rust file.
fn package_sources(package: &str) -> (PathBuf, Vec<(PathBuf, String)>) {
    let dir = root().join(package);
    assert!(
        dir.join("Cargo.toml").is_file(),
        "{package}/Cargo.toml is missing: the unsafe checks cannot read that package"
    );
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    assert!(!files.is_empty(), "{package} holds no Rust file");
    let sources = files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).unwrap();
            (f, text)
        })
        .collect();
    (dir, sources)
}

/// `text` with every comment, and the contents of every string and character literal, replaced
/// by spaces (line breaks kept, so line `i` of the result is line `i` of `text`): what is left is
/// code, in which a word in a comment or a string is never taken for a keyword.
fn code_only(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = c.clone();
    let blank = |out: &mut [char], from: usize, to: usize| {
        for ch in &mut out[from.min(c.len())..to.min(c.len())] {
            if *ch != '\n' {
                *ch = ' ';
            }
        }
    };
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    // Where the string literal whose contents start at `from` ends (its closing quote).
    let string_end = |from: usize| {
        let mut j = from;
        while j < c.len() && c[j] != '"' {
            j += if c[j] == '\\' { 2 } else { 1 };
        }
        j
    };
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            let end = c[i..]
                .iter()
                .position(|&ch| ch == '\n')
                .map_or(c.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if c[i] == '/' && next == Some('*') {
            let (mut depth, mut j) = (0usize, i);
            while j < c.len() {
                if c[j] == '/' && c.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if c[j] == '*' && c.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if c[i] == '"' {
            let end = string_end(i + 1);
            blank(&mut out, i + 1, end);
            i = end + 1;
        } else if c[i] == '\'' {
            if next == Some('\\') {
                // An escaped character: its closing quote is past the escape's first character.
                let end = c[i + 3..]
                    .iter()
                    .position(|&ch| ch == '\'')
                    .map_or(c.len(), |p| i + 3 + p);
                blank(&mut out, i + 1, end);
                i = end + 1;
            } else if c.get(i + 2) == Some(&'\'') {
                blank(&mut out, i + 1, i + 2);
                i += 3;
            } else {
                i += 1; // a lifetime or a label
            }
        } else if matches!(c[i], 'r' | 'b' | 'c') && (i == 0 || !ident(c[i - 1])) {
            // A raw string (`r"…"`, `r#"…"#`, `br…`, `cr…`): where the `#`s after its `r` start.
            let raw_at = match (c[i], next) {
                ('r', _) => Some(i + 1),
                (_, Some('r')) => Some(i + 2),
                _ => None,
            };
            let hashes = raw_at.map_or(0, |j| c[j..].iter().take_while(|&&ch| ch == '#').count());
            match raw_at.map(|j| j + hashes) {
                Some(open) if c.get(open) == Some(&'"') => {
                    let close: Vec<char> = std::iter::once('"')
                        .chain(std::iter::repeat_n('#', hashes))
                        .collect();
                    let end = (open + 1..c.len())
                        .find(|&k| c[k..].starts_with(&close))
                        .unwrap_or(c.len());
                    blank(&mut out, open + 1, end);
                    i = end + close.len();
                }
                // `b"…"` or `c"…"`: the quote is handled as a plain string's next time round.
                _ => i += 1,
            }
        } else {
            i += 1;
        }
    }
    out.into_iter().collect()
}

/// Whether `code` (a line of [`code_only`]) has the keyword `unsafe` at `at`: not part of a longer
/// identifier such as `unsafe_code`.
fn keyword_at(code: &str, at: usize) -> bool {
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    !code[..at].chars().next_back().is_some_and(ident)
        && !code[at + "unsafe".len()..]
            .chars()
            .next()
            .is_some_and(ident)
}

/// Whether a line of code opens an unsafe block (`unsafe {`) or implements an unsafe trait
/// (`unsafe impl`).
fn opens_unsafe(code: &str) -> bool {
    code.match_indices("unsafe").any(|(at, _)| {
        let after = code[at + "unsafe".len()..].trim_start();
        keyword_at(code, at)
            && (after.starts_with('{')
                || after.strip_prefix("impl").is_some_and(|rest| {
                    !rest.starts_with(|ch: char| ch.is_alphanumeric() || ch == '_')
                }))
    })
}

/// The lines (1-based) of `text` that open an unsafe block or an `unsafe impl` without a
/// `SAFETY:` comment in their window. The window is the line itself (a trailing comment) and the
/// lines directly above it, read upwards through comment lines (`//`, doc comments included) and
/// attributes (`#[…]`), and through at most [`CONTINUATION_LINES`] code lines that end in `=` or
/// `(` (the start of the statement the block is part of). Anything else ends the window: a blank
/// line, or any other code, such as the previous `unsafe impl` of a `Send`/`Sync` pair, which needs
/// its own comment. Comments and strings are not code: `unsafe {` in them is not counted.
fn unsafe_without_safety(text: &str) -> Vec<usize> {
    let code = code_only(text);
    let code: Vec<&str> = code.lines().collect();
    let raw: Vec<&str> = text.lines().collect();
    let mut missing = Vec::new();
    for (i, line) in code.iter().enumerate() {
        if !opens_unsafe(line) || raw[i].contains("// SAFETY:") {
            continue;
        }
        let mut crossed = 0;
        let mut found = false;
        for j in (0..i).rev() {
            let (c, r) = (code[j].trim(), raw[j].trim());
            if c.is_empty() && r.starts_with("//") {
                if r.contains("SAFETY:") {
                    found = true;
                    break;
                }
            } else if c.starts_with("#[") {
                // An attribute of the item or statement.
            } else if (c.ends_with('=') || c.ends_with('(')) && crossed < CONTINUATION_LINES {
                crossed += 1;
            } else {
                break;
            }
        }
        if !found {
            missing.push(i + 1);
        }
    }
    missing
}

/// Whether `text` has the keyword `unsafe` anywhere in its code (blocks, functions, impls,
/// traits, extern blocks, unsafe attributes); comments and strings do not count.
fn has_unsafe_code(text: &str) -> bool {
    code_only(text).lines().any(|line| {
        line.match_indices("unsafe")
            .any(|(at, _)| keyword_at(line, at))
    })
}

/// Whether `text` (a crate root) carries `#![forbid(unsafe_code)]` (alone or among other lints).
fn forbids_unsafe_code(text: &str) -> bool {
    let code: String = code_only(text).split_whitespace().collect();
    code.match_indices("#![forbid(").any(|(at, m)| {
        let lints = &code[at + m.len()..];
        let lints = &lints[..lints.find(')').unwrap_or(lints.len())];
        lints.split(',').any(|l| l == "unsafe_code")
    })
}

/// A package's crate roots: `src/lib.rs`, `src/main.rs`, `build.rs`, `src/bin/*.rs`,
/// `src/bin/*/main.rs`, `tests/*.rs`, `benches/*.rs`, `examples/*.rs`, and any `.rs` named by a
/// `path = "…"` line of its manifest (a `[lib]`, `[[bin]]` or `[[test]]` moved elsewhere).
fn crate_roots(dir: &Path) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = ["src/lib.rs", "src/main.rs", "build.rs"]
        .iter()
        .map(|f| dir.join(f))
        .filter(|f| f.is_file())
        .collect();
    for sub in ["src/bin", "tests", "benches", "examples"] {
        let Ok(entries) = std::fs::read_dir(dir.join(sub)) else {
            continue;
        };
        let mut found: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
        found.sort();
        for path in found {
            if path.is_file() && path.extension().is_some_and(|e| e == "rs") {
                roots.push(path);
            } else if path.join("main.rs").is_file() {
                // A folder target (`src/bin/x/main.rs`, `tests/x/main.rs`, ...) is a crate root too.
                roots.push(path.join("main.rs"));
            }
        }
    }
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    for line in manifest.lines() {
        if let Some(value) = line.trim().strip_prefix("path") {
            let value = value
                .trim_start()
                .trim_start_matches('=')
                .trim()
                .trim_matches('"');
            let path = dir.join(value);
            if value.ends_with(".rs") && path.is_file() && !roots.contains(&path) {
                roots.push(path);
            }
        }
    }
    roots
}

/// Every `unsafe { … }` block and `unsafe impl` in the checked packages has a `SAFETY:` comment
/// that says why it is sound, directly above it (the window of [`unsafe_without_safety`]: the
/// comment and attribute lines right above the line, or above the statement it is part of when
/// rustfmt split that statement before the block).
#[test]
fn every_unsafe_block_has_a_safety_comment() {
    let mut sites = 0;
    let mut missing = Vec::new();
    for package in unsafe_checked_packages() {
        let (_, sources) = package_sources(&package);
        for (path, text) in sources {
            let code = code_only(&text);
            sites += code.lines().filter(|l| opens_unsafe(l)).count();
            let rel = path
                .strip_prefix(root())
                .unwrap_or(&path)
                .display()
                .to_string();
            missing.extend(
                unsafe_without_safety(&text)
                    .into_iter()
                    .map(|n| format!("{rel}:{n}")),
            );
        }
    }
    // The runtime's CUDA driver and the kernels' SIMD paths alone hold well over a hundred: a
    // count this low means the scanner went blind, not that the code became safe.
    assert!(
        sites > 100,
        "found only {sites} unsafe blocks and impls: the scan is broken"
    );
    assert!(
        missing.is_empty(),
        "{} unsafe blocks or impls without a `// SAFETY:` comment directly above:\n{}",
        missing.len(),
        missing.join("\n")
    );
}

/// A package with no unsafe code anywhere in its sources declares `#![forbid(unsafe_code)]` in
/// every crate root ([`crate_roots`]), so that none creeps in unreviewed. A package with some
/// (the core's SIMD, the CUDA driver, the kernels, the CLI's and the device suite's environment
/// switches) is left to the comment check.
#[test]
fn crates_without_unsafe_forbid_it() {
    let mut forbidding = 0;
    let mut with_unsafe = Vec::new();
    let mut missing = Vec::new();
    for package in unsafe_checked_packages() {
        let (dir, sources) = package_sources(&package);
        if sources.iter().any(|(_, text)| has_unsafe_code(text)) {
            with_unsafe.push(package);
            continue;
        }
        let roots = crate_roots(&dir);
        assert!(!roots.is_empty(), "{package} has no crate root");
        forbidding += 1;
        for r in roots {
            if !forbids_unsafe_code(&std::fs::read_to_string(&r).unwrap()) {
                missing.push(r.strip_prefix(root()).unwrap_or(&r).display().to_string());
            }
        }
    }
    // The detector must see the unsafe code that is there, and leave most packages to forbid it.
    assert!(
        ["core", "cuda", "kernels"]
            .iter()
            .all(|c| with_unsafe.iter().any(|p| p == c)),
        "the core (SIMD), CUDA (the driver) and the kernels hold unsafe code, but the scan saw it \
         only in {with_unsafe:?}"
    );
    assert!(
        forbidding >= 5,
        "only {forbidding} packages without unsafe code: the scan is broken"
    );
    assert!(
        missing.is_empty(),
        "crate roots of packages without unsafe code that lack #![forbid(unsafe_code)]:\n{}",
        missing.join("\n")
    );
}

/// The checks above on small sources: a broken one must be reported, a good one must not, so that
/// a scanner that reports nothing cannot pass for a clean tree.
#[test]
fn unsafe_checks_report_what_they_should() {
    let bad = "fn f(p: *const u8) -> u8 {\n    unsafe { *p }\n}\n";
    assert_eq!(unsafe_without_safety(bad), [2], "a block without a comment");
    let good = "fn f(p: *const u8) -> u8 {\n    // SAFETY: `p` is valid for one read.\n    unsafe { *p }\n}\n";
    assert!(
        unsafe_without_safety(good).is_empty(),
        "a block with its comment"
    );

    // One comment does not cover the second impl of a pair; an attribute or a doc line between
    // the comment and the line does not break the window, a blank line does.
    let pair = "// SAFETY: the handle is not tied to a thread.\nunsafe impl Send for H {}\nunsafe impl Sync for H {}\n";
    assert_eq!(unsafe_without_safety(pair), [3]);
    let attr = "// SAFETY: checked above.\n#[allow(unused)]\nlet x = unsafe { f() };\n";
    assert!(unsafe_without_safety(attr).is_empty());
    let gap = "// SAFETY: too far away.\n\nunsafe { f() };\n";
    assert_eq!(unsafe_without_safety(gap), [3]);

    // A statement split before its block: the comment above the statement counts, within reach.
    let split = "// SAFETY: in bounds.\nlet dst =\n    unsafe { slice(p, n) };\n";
    assert!(unsafe_without_safety(split).is_empty());
    let far =
        "// SAFETY: in bounds.\nlet a = f(\n    g(\n        h(\n            unsafe { x() })));\n";
    assert_eq!(
        unsafe_without_safety(far),
        [5],
        "only {CONTINUATION_LINES} lines are crossed"
    );

    // A trailing comment on the line itself counts; `unsafe {` in a comment or a string is not
    // code, and an identifier that starts with `unsafe` is not the keyword.
    assert!(
        unsafe_without_safety("unsafe { f() }; // SAFETY: f has no precondition.\n").is_empty()
    );
    let quoted = "// an `unsafe { }` in prose\nlet s = \"unsafe { }\";\nlet r = r#\"unsafe impl\"#;\nlet unsafe_count = 1;\n";
    assert!(unsafe_without_safety(quoted).is_empty());
    assert!(!has_unsafe_code(quoted));
    // A comment inside a string is not a comment either.
    let fake = "let s = \"// SAFETY: not a comment\";\nunsafe { f() };\n";
    assert_eq!(unsafe_without_safety(fake), [2]);
    // A character literal holding a quote does not open a string that hides the code after it.
    let quote_char = "let q = '\"';\nunsafe { f() };\n";
    assert_eq!(unsafe_without_safety(quote_char), [2]);

    // Unsafe code of any kind makes a package exempt from `forbid`; roots are read for the lint.
    assert!(has_unsafe_code("unsafe fn f() {}\n"));
    assert!(has_unsafe_code("fn f() { unsafe { g() } }\n"));
    assert!(!has_unsafe_code("#![forbid(unsafe_code)]\nfn f() {}\n"));
    assert!(forbids_unsafe_code(
        "//! Docs.\n#![forbid(unsafe_code)]\nfn f() {}\n"
    ));
    assert!(forbids_unsafe_code(
        "#![forbid(missing_docs, unsafe_code)]\n"
    ));
    assert!(!forbids_unsafe_code("//! Docs.\nfn f() {}\n"));
    assert!(!forbids_unsafe_code(
        "// #![forbid(unsafe_code)]\nfn f() {}\n"
    ));
    assert!(!forbids_unsafe_code("#![deny(unsafe_code)]\n"));
}
