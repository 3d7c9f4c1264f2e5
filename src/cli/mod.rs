//! The headless face: one subcommand per file, each a thin layer over the engine.

pub mod calibrate;
mod common;
pub mod compare;
pub mod inspect;
pub mod quantize;
pub mod runtime;
pub mod sensitivity;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Post-training quantization of ONNX models to QDQ: a studio and a headless CLI.
///
/// Without a subcommand, opens the studio (on MODEL, or on the bundled sample model).
#[derive(Debug, Parser)]
#[command(name = "qdq-studio", about, long_about = None, args_conflicts_with_subcommands = true, disable_version_flag = true)]
pub struct Cli {
    /// Print the versions of qdq-studio, of the ONNX Runtime it would use (never downloaded
    /// for this) and of its execution providers.
    #[arg(short = 'V', long)]
    pub version: bool,
    /// A model to open in the studio.
    pub model: Option<PathBuf>,
    /// The subcommand to run headless.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Headless subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Describe a model: IR, opsets, inputs/outputs, op types, parameters, quantizable nodes.
    Inspect(inspect::InspectArgs),
    /// Show the loaded ONNX Runtime and its execution providers, or install one.
    Runtime(runtime::RuntimeArgs),
    /// Run calibration data through the model and save per-tensor statistics.
    Calibrate(Box<calibrate::CalibrateArgs>),
    /// Quantize a model to QDQ (calibrating first unless statistics are given).
    Quantize(Box<quantize::QuantizeArgs>),
    /// Apply the quantizer's pre-processing only (constants, BatchNormalization, Identity,
    /// simplification).
    Preprocess(quantize::PreprocessArgs),
    /// Compare a float and a QDQ model's outputs (SQNR, cosine, MSE, top-k) and latency.
    Compare(Box<compare::CompareArgs>),
    /// Rank quantized nodes by their cost to the outputs; auto-exclude to a target SQNR.
    Sensitivity(Box<sensitivity::SensitivityArgs>),
}

/// Runs a headless subcommand.
pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Inspect(args) => inspect::run(&args),
        Command::Runtime(args) => runtime::run(&args),
        Command::Calibrate(args) => calibrate::run(&args),
        Command::Quantize(args) => quantize::run(&args),
        Command::Preprocess(args) => quantize::run_preprocess(&args),
        Command::Compare(args) => compare::run(&args),
        Command::Sensitivity(args) => sensitivity::run(&args),
    }
}
