//! `quorum run`: one run, outputs written as .npy with a one-line summary each.
use std::path::PathBuf;

use quorum::{Tensor, Value};

use crate::common::{CliResult, ModelArgs, fail, from_quorum, print_verification};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// Folder for the outputs (created if missing).
    #[arg(long, default_value = ".")]
    output_dir: PathBuf,
    /// Seed for inputs that are not given.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// A file-system-safe version of a value name.
fn safe_name(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with('.') {
        format!("output{s}")
    } else {
        s
    }
}

fn stats(t: &Tensor) -> String {
    match t.to_f64_vec() {
        Ok(v) if !v.is_empty() => {
            let min = v.iter().copied().fold(f64::INFINITY, f64::min);
            let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let mean = v.iter().sum::<f64>() / v.len() as f64;
            format!("min {min:.6} max {max:.6} mean {mean:.6}")
        }
        _ => String::new(),
    }
}

pub fn main(a: Args) -> CliResult<()> {
    let session = a.model.session()?;
    let (inputs, generated) = a.model.inputs(&session, a.seed)?;
    if !generated.is_empty() {
        eprintln!(
            "note: generated inputs (seed {}): {}",
            a.seed,
            generated.join(", ")
        );
    }
    let result = session.run(inputs);
    print_verification(&session);
    let outputs = result.map_err(from_quorum)?;
    std::fs::create_dir_all(&a.output_dir)
        .map_err(|e| fail(5, format!("cannot create {}: {e}", a.output_dir.display())))?;
    for (name, value) in outputs {
        let Value::Tensor(t) = &value else {
            println!(
                "{name}: {} (not written: only tensors are saved as .npy)",
                value.describe()
            );
            continue;
        };
        let path = a.output_dir.join(format!("{}.npy", safe_name(&name)));
        match quorum::npy::write(t) {
            Ok(bytes) => std::fs::write(&path, bytes)
                .map_err(|e| fail(5, format!("cannot write {}: {e}", path.display())))?,
            Err(e) => {
                println!("{name}: {} (not written: {e})", t.describe());
                continue;
            }
        }
        println!(
            "{name}: {} {} -> {}",
            t.describe(),
            stats(t),
            path.display()
        );
    }
    Ok(())
}
