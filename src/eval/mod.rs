//! Float against quantized, measured by running both: four rooms, each importing only the
//! rooms above it in this list.
//!
//! - [`simd`]: kernels written for speed, each beside its portable twin: the squared sums
//!   every SQNR is made of (the formula itself is [`crate::util::sqnr_db`]) and MLAS's
//!   QuantizeLinear for the error-summing operator.
//! - [`compare`]: the outputs of two models over evaluation data (streaming, memory bounded
//!   by one batch), task metrics against ground truth, the float outputs held for many
//!   comparisons, and latency with the kernels ONNX Runtime ran.
//! - [`tensor_error`]: per-tensor error: cumulative (onnxruntime's `qdq_loss_debug`), each
//!   node's own error in one pass, weight error, and each layer's effect.
//! - [`search`]: searches over recipes, each step a real run: sensitivity scans over one
//!   switchable model, auto-exclude, greedy choices of alternatives, ranges and weight
//!   ranges, and tuning the placement for speed.

pub mod compare;
pub mod search;
mod simd;
pub mod tensor_error;
