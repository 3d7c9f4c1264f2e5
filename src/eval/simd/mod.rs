//! Kernels written for speed, each beside its portable twin (the one tests compare it
//! with): `row_math` and `squares`, the squared sums every SQNR is made of, and
//! `quantize_linear`, MLAS's QuantizeLinear for the error-summing operator.

pub mod quantize_linear;
pub mod row_math;
pub mod squares;
