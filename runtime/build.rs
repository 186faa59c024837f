//! Lists the measured dispatch tables under `reports/thresholds/` for `include!` by
//! `session::thresholds`, so that a binary carries the tables committed with its source.
use std::path::Path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    thresholds()
}

/// Writes `$OUT_DIR/thresholds.rs`: `&[(file name, include_str!(path))]` over the committed tables.
fn thresholds() -> Result<(), Box<dyn std::error::Error>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../reports/thresholds");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|f| f.extension().is_some_and(|e| e == "json"));
    files.sort();
    let mut out = String::from("&[\n");
    for f in files {
        let f = f.canonicalize()?;
        let name = f.file_name().unwrap_or_default().to_string_lossy();
        out.push_str(&format!(
            "    ({name:?}, include_str!({:?})),\n",
            f.display()
        ));
    }
    out.push(']');
    std::fs::write(
        Path::new(&std::env::var("OUT_DIR")?).join("thresholds.rs"),
        out,
    )?;
    Ok(())
}
