//! The user's steps end to end, called by both faces: inspect, calibrate (on the model as the
//! quantizer sees it), load and save statistics in any format, quantize and save, compare
//! into one report, and the sensitivity scan with auto-exclude; with the float reference
//! cache they share. The CLI's subcommands parse their flags, call a step and print; the
//! studio's tasks call the same steps on job threads. New capabilities land here once.

pub mod calibrate;
pub mod compare;
pub mod error;
pub mod inspect;
pub mod model_folder;
pub mod outputs;
pub mod quantize;
pub mod reference;
pub mod runtime;
pub mod sensitivity;
pub mod statistics;
pub mod tensor_facts;
pub mod tune_latency;
pub mod weight_ranges;

pub use error::WorkflowError;
