#![forbid(unsafe_code)]

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = quorum_conformance::cli::Args::parse();
    match quorum_conformance::cli::run(args) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
