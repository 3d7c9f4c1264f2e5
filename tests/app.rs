//! The studio's tests (egui_kittest driving the real app), one module per file beside this
//! one, in one test binary: see `engine.rs` for why.

// Test and measurement code: an unwrap, expect or panic that fires is the report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

mod studio;
mod studio_flow;
mod studio_layout;
