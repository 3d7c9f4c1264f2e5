//! The engine's and the CLI's integration tests, one module per file beside this one, in one
//! test binary: each binary links the whole crate (and ONNX Runtime's bindings), so one link
//! serves 23 files, `common` compiles once, and their tests share the cores instead of
//! running binary after binary. Tests that measure their own process (memory, time) or build
//! models past 2 GB keep binaries of their own (`calibration_memory`, `graph_index`,
//! `large_models`); the studio's tests are `app`.

// Test and measurement code: an unwrap, expect or panic that fires is the report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

mod accuracy_techniques;
mod architecture;
mod bad_input;
mod bad_input_corpus;
mod calibration;
mod compare;
mod crash_safety;
mod error_sums;
mod foreign_models;
mod fp16_models;
mod fuzz_regressions;
mod inspect_cli;
mod int4;
mod local_error;
mod mixed_precision;
mod model_io;
mod ocr_rec;
mod quantize;
mod runtime;
mod sensitivity;
mod side_outputs;
mod transformers;
mod weight_ranges;
