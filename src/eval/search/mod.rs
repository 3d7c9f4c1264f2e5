//! Searches over recipes, each step a real run of a re-quantized model against the float
//! outputs held in a [`crate::eval::compare::reference::Reference`]:
//!
//! - `evaluator`: what a search needs to score a recipe, and the targets it scores against;
//! - `switchable` and `switched_scan`: one model whose nodes switch between float and
//!   quantized, so a whole scan needs one session;
//! - `sensitivity`: what each node or op type costs the outputs;
//! - `greedy`: the shared loop of the searches that take changes while they help;
//!   `auto_exclude`, `alternatives`, `range_choice` and `weight_ranges` over it;
//! - `latency_tuning`: the placement tuned for speed from ONNX Runtime's profiles.

pub mod alternatives;
pub mod auto_exclude;
pub mod evaluator;
mod greedy;
pub mod latency_tuning;
pub mod range_choice;
pub mod sensitivity;
pub mod switchable;
pub mod switched_scan;
pub mod weight_ranges;
