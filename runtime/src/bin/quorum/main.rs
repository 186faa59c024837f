//! The `quorum` command line: run, benchmark and inspect ONNX models.
mod bench;
mod bench_io;
mod common;
mod compare;
mod generate;
mod info;
mod run;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

const EXIT_CODES: &str = "Exit codes:
  0  success
  1  the model failed while running (a node's error is printed)
  2  bad command line, or a --provider that is not available here
  3  the model could not be loaded (malformed, invalid, or uses an unsupported operator)
  4  bad inputs (missing, unknown, wrong dtype or shape, unreadable file)
  5  an I/O error writing outputs
  6  verification failed (--verify strict): a device result differs from both oracles, or the
     oracles could not judge a node whose op is not in --allow-unchecked
  7  the device failed (driver error, PTX JIT error, out of device memory)";

#[derive(Parser)]
#[command(name = "quorum", version, about = "Quorum: an ONNX runtime whose accelerated answers are checked", after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a model once and write each output to a file: <name>.npy, or <name>.pb (ONNX protobuf) where
    /// numpy has no dtype, for sequences and optionals, or for all with --format pb.
    Run(run::Args),
    /// Time a model: median, p10 and p90 over repeated runs.
    Bench(bench::Args),
    /// Show a model's inputs, outputs, opsets, op histogram and provider placement.
    Info(info::Args),
    /// Run a model on two placements (--provider against --against, the CPU by default), compare
    /// every intermediate value, and name the first node whose kernel is wrong on its own: its
    /// element, both values and the bound (exit code 6 when one is found).
    Compare(compare::Args),
    /// Generate tokens greedily with a decoder that takes its key/value cache as inputs
    /// (input_ids, attention_mask, past_key_values.*  ->  logits, present.*), timing the prompt's
    /// run and each new token.
    Generate(generate::Args),
}

/// Mesa's implicit `VK_LAYER_MESA_device_select` layer, which only orders GPUs for presentation,
/// connects to a Wayland display while the wgpu provider enumerates adapters and, where there is
/// none (a server, CI), prints "XDG_RUNTIME_DIR is invalid" twice to stderr. Quorum picks its
/// adapter itself, so the CLI turns the layer off (`NODEVICE_SELECT=1`, the layer's own switch)
/// unless the user set that variable.
fn quiet_vulkan_device_select() {
    if std::env::var_os("NODEVICE_SELECT").is_none() {
        // SAFETY: the first statement of `main`, before any other thread exists, so nothing can be
        // reading the environment at the same time.
        unsafe { std::env::set_var("NODEVICE_SELECT", "1") };
    }
}

fn main() -> ExitCode {
    quiet_vulkan_device_select();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(a) => run::main(a),
        Command::Bench(a) => bench::main(a),
        Command::Info(a) => info::main(a),
        Command::Compare(a) => compare::main(a),
        Command::Generate(a) => generate::main(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The message names what failed (node, op, shapes, input); a backtrace of `main`
            // would only show where it was printed.
            eprintln!("error: {}", e.message);
            ExitCode::from(e.code)
        }
    }
}
