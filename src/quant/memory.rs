//! The memory a quantization needs, checked before any weight is read: a request that cannot
//! fit is refused with the estimate and what is available, never killed half-way by the
//! system.
//!
//! The estimate is a floor, so a model that fits is never refused: every quantized weight
//! held in memory until it is written, ONNX Runtime's copy of them while the load check runs,
//! and the largest float weight being read with its quantized copy in the making (one per
//! worker thread). Float weights themselves stay memory-mapped and are handed back once read.

use super::QuantError;
use super::params::weight_quant;
use super::plan::{Plan, TensorRole};
use crate::model::external::element_count;
use crate::model::{DataType, Model};
use crate::recipe::Recipe;

/// Bytes the quantization of `model` by `plan` needs at least.
pub fn estimate(model: &Model, plan: &Plan, recipe: &Recipe) -> u64 {
    let mut quantized = 0u64;
    let mut largest_float = 0u64;
    for tensor in &model.graph().initializer {
        let Some(role) = plan.roles.get(tensor.name()) else {
            continue;
        };
        if !matches!(
            role,
            TensorRole::Weight { .. } | TensorRole::ConstantActivation
        ) {
            continue;
        }
        let Some(how) = weight_quant(recipe, tensor.name(), role, tensor.dims.len()) else {
            continue;
        };
        let elements = element_count(tensor.name(), &tensor.dims).unwrap_or(0);
        let float_bits = DataType::from_onnx(tensor.data_type()).map_or(32, DataType::bits);
        quantized += (elements * how.qtype.data_type().bits() as u64).div_ceil(8);
        // Decoded as float32 whatever the stored type.
        largest_float = largest_float.max(elements * float_bits.max(32) as u64 / 8);
    }
    let workers = rayon::current_num_threads().max(1) as u64;
    2 * quantized + workers.min(2) * largest_float
}

/// An error when `needed` bytes exceed `available` (`None`: the platform does not say, and
/// the work goes ahead).
pub fn check(needed: u64, available: Option<u64>) -> Result<(), QuantError> {
    match available {
        Some(available) if needed > available => Err(QuantError::Memory { needed, available }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_need_over_what_is_available_is_refused() {
        assert!(check(10, Some(11)).is_ok());
        assert!(check(10, None).is_ok());
        let err = check(3_000_000_000, Some(1_000_000_000)).unwrap_err();
        assert!(err.to_string().contains("3.0 GB") && err.to_string().contains("1.0 GB"));
    }
}
