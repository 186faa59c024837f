//! `quorum run`: one run, every output written to a file (`.npy`, or ONNX protobuf `.pb` where numpy
//! has no dtype, for sequences and optionals, or for all with `--format pb`) with a one-line summary
//! each.
use std::path::PathBuf;

use quorum::output_files::{self, Format};
use quorum::{Tensor, Value};

use crate::common::{
    CliResult, ModelArgs, fail, from_quorum, print_conversion, print_verification,
};

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
    /// File format of the outputs: npy (a .pb TensorProto where numpy has no dtype: bfloat16,
    /// float8, int4, int2...; sequences and optionals as SequenceProto/OptionalProto .pb) or pb
    /// (every output as ONNX protobuf).
    #[arg(long, default_value = "npy", value_parser = parse_format)]
    format: Format,
}

fn parse_format(s: &str) -> Result<Format, String> {
    s.parse()
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
    print_conversion(&session);
    let (inputs, generated) = a.model.inputs(&session, a.seed)?;
    if !generated.is_empty() {
        eprintln!(
            "note: generated inputs (seed {}): {}",
            a.seed,
            generated.join(", ")
        );
    }
    // A converted model is compared with the f32 model on the CPU, on the same inputs.
    let reference_inputs = session.conversion().map(|_| inputs.clone());
    let result = session.run(inputs);
    print_verification(&session);
    let outputs = result.map_err(from_quorum)?;
    if let Some(inputs) = reference_inputs {
        let mut options = a.model.options()?;
        options.precision = quorum::Precision::F32;
        options.providers = vec![quorum::Provider::Cpu];
        options.verify = quorum::VerifyMode::Off;
        let f32_session = a.model.session_with(options)?;
        let want = f32_session.run(inputs).map_err(from_quorum)?;
        for (name, d) in quorum::mixed::deviation(&want, &outputs) {
            let why = if d.is_finite() {
                "largest difference over the largest magnitude"
            } else {
                "non-finite values where the f32 model has finite ones: past the half's range? \
                 --keep-f32 keeps ops in f32"
            };
            eprintln!("deviation from the f32 model (CPU) of '{name}': {d:.2e} ({why})");
        }
    }
    std::fs::create_dir_all(&a.output_dir)
        .map_err(|e| fail(5, format!("cannot create {}: {e}", a.output_dir.display())))?;
    let names: Vec<&str> = outputs.iter().map(|(n, _)| n.as_str()).collect();
    let stems = output_files::file_stems(&names);
    let graph = &session.model().graph;
    for ((name, value), stem) in outputs.iter().zip(stems) {
        let declared = graph
            .outputs
            .iter()
            .find(|o| &o.name == name)
            .map(|o| &o.ty);
        let file = output_files::encode(name, value, declared, a.format);
        let path = a.output_dir.join(format!("{stem}.{}", file.extension));
        std::fs::write(&path, &file.bytes).map_err(|e| {
            fail(
                5,
                format!("output '{name}': cannot write {}: {e}", path.display()),
            )
        })?;
        let stats = match value {
            Value::Tensor(t) => stats(t),
            _ => String::new(),
        };
        let why = file.fallback.map(|w| format!(" ({w})")).unwrap_or_default();
        println!(
            "{name}: {} {stats} -> {}{why}",
            value.describe(),
            path.display()
        );
    }
    Ok(())
}
