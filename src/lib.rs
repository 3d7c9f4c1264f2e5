//! qdq-studio's engine: post-training quantization of ONNX models to QDQ form.
//!
//! The engine knows nothing of the GUI. Its layers, each importing only the ones before it:
//! `util` and `jobs` (leaves), `atomic` (crash-safe writes), `model` (ONNX I/O, the graph
//! index), `runtime` (ONNX Runtime and its execution providers), `calib` (data and
//! statistics), `recipe`, `quant` (the plan, its explanation and the QDQ rewrite), `eval`,
//! `report`, and `workflow`, the user's steps end to end. The `qdq-studio` binary's CLI and
//! the studio (`app`) are thin faces over `workflow`.
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
pub mod util;
pub mod workflow;
