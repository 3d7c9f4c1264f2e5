//! `qdq-studio`: with a subcommand, the headless CLI; otherwise the studio.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("QDQ_STUDIO_LOG"))
        .with_writer(std::io::stderr)
        .init();
    // Saves a killed run left half-done: delete their temporary files, roll them back or
    // forward (see `atomic`). Before anything else, so no face ever sees them.
    qdq_studio::atomic::recover_at_start();
    let cli = cli::Cli::parse();
    let result = match cli.command {
        Some(command) => cli::run(command),
        None => studio(cli.model),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // One readable line: the error and its causes.
            eprintln!("error: {}", format!("{error:#}").replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

/// The desktop studio, opening `model` (or the bundled sample).
#[cfg(feature = "studio")]
fn studio(model: Option<std::path::PathBuf>) -> anyhow::Result<()> {
    qdq_studio::app::run(model)
}

/// A build without the studio: say so and point at the CLI.
#[cfg(not(feature = "studio"))]
fn studio(_model: Option<std::path::PathBuf>) -> anyhow::Result<()> {
    anyhow::bail!(
        "this build of qdq-studio has no studio (built without the 'studio' feature); run `qdq-studio --help` for the CLI"
    )
}
