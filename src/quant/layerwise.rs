//! Layer-wise range choice (Quark's "layer-wise percentile", generalized): instead of one
//! range method for every activation, each activation gets the method whose quantization of
//! it disturbs the outputs of the nodes reading it least. The quantizer says what each
//! method would do to each activation ([`candidates`]: its range and scale); calibration
//! measures the disturbance in ONNX Runtime (the evaluation layer's range choice) and keeps the
//! winners in the statistics; the quantizer applies them as the activations' own methods
//! ([`with_chosen_ranges`]) unless the recipe sets one for a tensor.

use super::Prepared;
use super::params::{RangeSource, activation_quant, softmax_outputs};
use super::plan::TensorRole;
use super::scale::{ScaleZp, scale_zp_for, store_scales};
use crate::calib::range::{self, RangeMethod};
use crate::calib::stats::CalibrationStats;
use crate::model::DataType;
use crate::recipe::{QuantType, Recipe};

/// One activation and what each range method would quantize it with.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The activation.
    pub tensor: String,
    /// Its quantized type.
    pub qtype: QuantType,
    /// Each method and its scale and zero point (the recipe's method first; methods giving
    /// the same parameters as an earlier one left out).
    pub options: Vec<(RangeMethod, ScaleZp)>,
}

/// The methods tried besides the recipe's: the observed extremes and two percentiles.
/// Entropy and MSE ranges are not offered: they clip hardest, and measured one activation at
/// a time their lower local error did not carry to the model's outputs (the clipping errors
/// are biased and add up downstream; on the bundled sample with them offered, output SQNR
/// fell 3.5 dB against percentiles alone).
fn methods(recipe: &Recipe) -> Vec<RangeMethod> {
    let mut list = vec![recipe.calibration_method];
    for m in [
        RangeMethod::MinMax {
            moving_average: false,
        },
        RangeMethod::Percentile {
            percentile: 99.999,
            symmetric: true,
        },
        RangeMethod::Percentile {
            percentile: 99.99,
            symmetric: true,
        },
    ] {
        if !list.contains(&m) {
            list.push(m);
        }
    }
    list
}

/// The activations `recipe` quantizes with the recipe's range method (not a fixed range, a
/// Softmax output or a method of their own) in 8 or 16 bits, float32, with statistics, each
/// with the methods that give it different parameters; those with one choice only are left
/// out.
pub fn candidates(
    prepared: &Prepared,
    recipe: &Recipe,
    stats: &CalibrationStats,
) -> Vec<Candidate> {
    let plain = Recipe {
        layerwise_range: false,
        ..recipe.clone()
    };
    let super::Guarded {
        recipe: effective,
        plan,
        ..
    } = super::guarded(prepared, &plain, Some(stats));
    let softmax = softmax_outputs(&prepared.graph);
    let tried = methods(recipe);
    let mut list: Vec<Candidate> = plan
        .roles
        .iter()
        .filter(|(_, role)| **role == TensorRole::Activation)
        .filter_map(|(name, _)| {
            let how = activation_quant(&effective, name, &softmax);
            if !matches!(
                how.source,
                RangeSource::Method {
                    overridden: false,
                    ..
                }
            ) || how.qtype == QuantType::Float8e4m3fn
            {
                return None;
            }
            // Smoothed activations were observed on another model than the probe's.
            if stats.smoothing.contains_key(name) {
                return None;
            }
            let s = stats.tensors.get(name)?;
            if s.dtype.is_some_and(|t| t != DataType::Float32) {
                return None;
            }
            let mut options: Vec<(RangeMethod, ScaleZp)> = Vec::new();
            for method in &tried {
                let Ok(r) = range::compute(s, method, how.target(), stats.info.ort_parity) else {
                    continue;
                };
                let mut p = [scale_zp_for(r.lo, r.hi, how.qtype, how.symmetric, false)];
                store_scales(&mut p, DataType::Float32, false);
                if p[0].scale > 0.0 && !options.iter().any(|(_, q)| *q == p[0]) {
                    options.push((*method, p[0]));
                }
            }
            (options.len() > 1).then(|| Candidate {
                tensor: name.clone(),
                qtype: how.qtype,
                options,
            })
        })
        .collect();
    list.sort_by(|a, b| a.tensor.cmp(&b.tensor));
    list
}

/// `recipe` with each activation's layer-wise choice from `stats` as its own method, where
/// the recipe asks for layer-wise ranges and sets no method for it.
pub fn with_chosen_ranges(recipe: &Recipe, stats: Option<&CalibrationStats>) -> Recipe {
    let mut effective = recipe.clone();
    let Some(stats) = stats.filter(|_| recipe.layerwise_range) else {
        return effective;
    };
    for (tensor, choice) in &stats.range_choices {
        let entry = effective
            .tensor_overrides
            .entry(tensor.clone())
            .or_default();
        if entry.method.is_none() && entry.range.is_none() {
            entry.method = Some(choice.method);
        }
    }
    effective
}
