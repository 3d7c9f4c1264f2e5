//! Per-tensor error of a quantized model against its float model:
//!
//! - `tensors`: the cumulative error of every tensor (everything upstream quantized too, as
//!   onnxruntime's `qdq_loss_debug`), and the entry points that gather all kinds;
//! - `local_error` with `error_sums`: each node's own error in one pass, summed by
//!   qdq-studio's own operator;
//! - `weight_error`: each weight's rounding error;
//! - `tensor_pass`: running both models for their intermediate tensors, in
//!   `observed_batches` (the first run measures what a sample exposes; the rest fit a budget);
//! - `tensor_order`: the float tensor a QDQ tensor quantizes, and the float graph's order;
//! - `layer_effect`: what quantizing each layer alone does to the outputs (two quantizations
//!   per layer).

pub mod error_sums;
pub mod layer_effect;
pub mod local_error;
mod observed_batches;
mod tensor_order;
mod tensor_pass;
pub mod tensors;
pub mod weight_error;
