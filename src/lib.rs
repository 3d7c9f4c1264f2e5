//! qdq-studio's engine: post-training quantization of ONNX models to QDQ form.
//!
//! The engine knows nothing of the GUI. `model` reads and writes ONNX and indexes graphs,
//! `runtime` finds and loads ONNX Runtime and its execution providers, `quant` holds the
//! quantization rules. The `qdq-studio` binary's CLI and studio are thin faces over it.
#![warn(missing_docs)]

#[cfg(feature = "studio")]
pub mod app;
pub mod atomic;
pub mod calib;
pub mod eval;
pub mod jobs;
pub mod model;
pub mod quant;
pub mod recipe;
pub mod report;
pub mod runtime;
pub mod sample;
