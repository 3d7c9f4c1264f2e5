//! The effect of a quantization choice per layer: the same float model quantized twice (a
//! baseline, say without a technique or by another tool, and the model compared), both measured
//! against the float model on the same data, joined tensor by tensor. This is how a technique
//! (equalization, bias correction, GPTQ, layer-wise ranges) shows what it did to each layer:
//! the local SQNR (the layer's own quantization, float inputs) before and after, and the
//! cumulative one (everything upstream quantized too).

use std::collections::HashMap;

use serde::Serialize;

use crate::eval::tensor_error::tensors::{ErrorKind, TensorErrors};

/// One tensor measured in both QDQ models.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayerEffect {
    /// The float model's tensor name.
    pub tensor: String,
    /// Cumulative SQNR (dB, float vs QDQ) in the baseline.
    pub cumulative_before_db: f64,
    /// Cumulative SQNR (dB) in the model compared.
    pub cumulative_after_db: f64,
    /// Local SQNR (dB) in the baseline, when both models' local errors were measured.
    pub local_before_db: Option<f64>,
    /// Local SQNR (dB) in the model compared, when both were measured.
    pub local_after_db: Option<f64>,
}

impl LayerEffect {
    /// How much the cumulative SQNR rose (dB; negative: fell).
    pub fn cumulative_gain_db(&self) -> f64 {
        sqnr_gain_db(self.cumulative_before_db, self.cumulative_after_db)
    }

    /// How much the local SQNR rose (dB), when measured in both.
    pub fn local_gain_db(&self) -> Option<f64> {
        Some(sqnr_gain_db(self.local_before_db?, self.local_after_db?))
    }

    /// The gain that says most of this layer's own change: the local one where measured,
    /// else the cumulative one.
    pub fn gain_db(&self) -> f64 {
        self.local_gain_db()
            .unwrap_or_else(|| self.cumulative_gain_db())
    }
}

/// `after - before` in dB, where an exact tensor (infinite SQNR) in both counts as no change.
pub fn sqnr_gain_db(before: f64, after: f64) -> f64 {
    if before == after { 0.0 } else { after - before }
}

/// The tensors measured in both `before` (the baseline) and `after`, in `after`'s graph order.
/// A tensor quantized in one model only (excluded in the other) has no figure to compare and
/// is left out.
pub fn layer_effects(before: &TensorErrors, after: &TensorErrors) -> Vec<LayerEffect> {
    let cumulative: HashMap<&str, f64> = before.sqnr_of(ErrorKind::Cumulative).collect();
    let local_before: HashMap<&str, f64> = before.sqnr_of(ErrorKind::Local).collect();
    let local_after: HashMap<&str, f64> = after.sqnr_of(ErrorKind::Local).collect();
    after
        .sqnr_of(ErrorKind::Cumulative)
        .filter_map(|(tensor, after_db)| {
            let before_db = *cumulative.get(tensor)?;
            let both = local_before.get(tensor).zip(local_after.get(tensor));
            Some(LayerEffect {
                tensor: tensor.to_owned(),
                cumulative_before_db: before_db,
                cumulative_after_db: after_db,
                local_before_db: both.map(|(b, _)| *b),
                local_after_db: both.map(|(_, a)| *a),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::tensor_error::local_error::LocalError;
    use crate::eval::tensor_error::tensors::ActivationError;

    fn errors(cumulative: &[(&str, f64)], local: &[(&str, f64)]) -> TensorErrors {
        TensorErrors {
            activations: cumulative
                .iter()
                .map(|&(tensor, db)| ActivationError {
                    tensor: tensor.into(),
                    qdq_sqnr_db: db,
                    xmodel_sqnr_db: db,
                    range: None,
                    clipped: None,
                    histogram: None,
                })
                .collect(),
            local: local
                .iter()
                .map(|&(tensor, sqnr_db)| LocalError {
                    tensor: tensor.into(),
                    sqnr_db,
                })
                .collect(),
            ..TensorErrors::default()
        }
    }

    #[test]
    fn joins_the_tensors_both_models_measured_in_the_compared_models_order() {
        let before = errors(&[("a", 30.0), ("b", 20.0), ("gone", 5.0)], &[("a", 35.0)]);
        let after = errors(
            &[("b", 26.0), ("a", 29.0), ("new", 40.0)],
            &[("a", 38.0), ("b", 30.0)],
        );
        let effects = layer_effects(&before, &after);
        let names: Vec<&str> = effects.iter().map(|e| e.tensor.as_str()).collect();
        assert_eq!(names, ["b", "a"]);
        assert_eq!(effects[0].cumulative_gain_db(), 6.0);
        assert_eq!(
            effects[0].local_gain_db(),
            None,
            "b has no local figure in the baseline"
        );
        assert_eq!(effects[0].gain_db(), 6.0, "the cumulative gain stands in");
        assert_eq!(effects[1].local_gain_db(), Some(3.0));
        assert_eq!(effects[1].cumulative_gain_db(), -1.0);
        assert_eq!(effects[1].gain_db(), 3.0);
    }

    #[test]
    fn an_exact_tensor_in_both_models_has_not_changed() {
        let exact = errors(&[("a", f64::INFINITY)], &[]);
        assert_eq!(layer_effects(&exact, &exact)[0].cumulative_gain_db(), 0.0);
    }
}
