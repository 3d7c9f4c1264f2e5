//! `qdq-studio`: with a subcommand, the headless CLI; otherwise the studio.

// On Windows the program is a window, not a console program, so the studio started from the
// Start menu or Explorer opens no console beside it; the CLI attaches to the console of the
// terminal it was started from (`attach_console`).
#![cfg_attr(windows, windows_subsystem = "windows")]

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    attach_console();
    restore_sigpipe();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("QDQ_STUDIO_LOG"))
        .with_writer(std::io::stderr)
        .init();
    // Saves a killed run left half-done: delete their temporary files, roll them back or
    // forward (see `atomic`). Before anything else, so no face ever sees them.
    qdq_studio::atomic::recover_at_start();
    let cli = cli::Cli::parse();
    if cli.version {
        cli::runtime::print_versions();
        return ExitCode::SUCCESS;
    }
    let result = match cli.command {
        Some(command) => cli::run(command),
        None => studio(cli.model),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // One readable line: the error and its causes.
            let error: &(dyn std::error::Error + 'static) = error.as_ref();
            eprintln!("error: {}", qdq_studio::util::error_line(error));
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

/// A windows-subsystem program has no console: when started from a terminal without its
/// output redirected, print to that terminal's console. Redirected output (`> out.txt`, a
/// pipe) already has its handles and is left alone.
#[cfg(windows)]
fn attach_console() {
    use windows_sys::Win32::Foundation::INVALID_HANDLE_VALUE;
    use windows_sys::Win32::System::Console::{
        ATTACH_PARENT_PROCESS, AttachConsole, GetStdHandle, STD_OUTPUT_HANDLE,
    };
    // SAFETY: Win32 calls with constant arguments; a failure leaves the process as it was.
    unsafe {
        let handle = GetStdHandle(STD_OUTPUT_HANDLE);
        if handle.is_null() || handle == INVALID_HANDLE_VALUE {
            AttachConsole(ATTACH_PARENT_PROCESS);
        }
    }
}

#[cfg(not(windows))]
fn attach_console() {}

/// Rust ignores SIGPIPE, so printing to a closed pipe (`qdq-studio inspect m.onnx | head`)
/// would panic; a command-line tool should end quietly instead, as the Unix tools do.
#[cfg(unix)]
fn restore_sigpipe() {
    // SAFETY: called first thing in main, before any thread exists; SIG_DFL is always valid.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Windows has no SIGPIPE.
#[cfg(not(unix))]
fn restore_sigpipe() {}
