//! Quantization: which ops are quantizable, scale/zero-point maths, placement and rewriting.

pub mod ops;
