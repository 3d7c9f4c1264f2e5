//! How each planned tensor is quantized: its type, symmetry, channel axis and where its range
//! comes from. [`super::rewrite`] applies these decisions and [`super::explain`] shows them,
//! so what users are told is what the quantizer does.

use std::collections::HashSet;

use ndarray::ArrayD;
use rayon::prelude::*;

use super::QuantError;
use super::plan::TensorRole;
use crate::calib::range::{self, Range, RangeMethod, RangeTarget};
use crate::calib::stats::CalibrationStats;
use crate::model::Graph;
use crate::model::ops;
use crate::recipe::{QuantMode, QuantType, Recipe, WeightRange};

/// The integer grid an activation of `qtype` is quantized to (what its range is chosen for).
pub fn qtype_range_target(qtype: QuantType, symmetric: bool) -> RangeTarget {
    let (lo, hi) = super::scale::qrange(qtype, false, symmetric);
    RangeTarget {
        steps: (hi - lo) as u32,
        symmetric,
    }
}

/// Where an activation's range comes from.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RangeSource {
    /// A range the recipe fixes for this tensor (`tensor_overrides`).
    Fixed {
        /// The range.
        range: Range,
    },
    /// A Softmax output: its values lie in [0, 1] whatever was observed.
    Softmax,
    /// The calibration statistics of `tensor` through `method` (the recipe's, or the
    /// tensor's override).
    Method {
        /// The tensor whose statistics are read.
        tensor: String,
        /// The range method.
        method: RangeMethod,
        /// True when the method is this tensor's override rather than the recipe's.
        overridden: bool,
    },
}

/// How one activation is quantized.
#[derive(Debug, Clone, PartialEq)]
pub struct ActivationQuant {
    /// The quantized type.
    pub qtype: QuantType,
    /// Symmetric range.
    pub symmetric: bool,
    /// Where the range comes from.
    pub source: RangeSource,
    /// The recipe's range method (or the tensor's) gives power-of-two scales: a fixed or
    /// Softmax range is widened to the power-of-two grid that holds it too.
    pub power_of_two: bool,
}

/// The outputs of Softmax nodes, whose range is always [0, 1].
pub fn softmax_outputs(graph: &Graph) -> HashSet<String> {
    graph
        .nodes()
        .iter()
        .filter(|n| n.op_type == ops::SOFTMAX)
        .flat_map(|n| n.outputs.first().cloned())
        .collect()
}

/// The activation type of `name`: its override's, else the recipe's.
pub fn activation_qtype(recipe: &Recipe, name: &str) -> QuantType {
    recipe
        .tensor_overrides
        .get(name)
        .and_then(|o| o.dtype)
        .unwrap_or(recipe.activation_type)
}

/// Whether activations of `qtype` get a symmetric range.
fn activation_symmetric(recipe: &Recipe, qtype: QuantType) -> bool {
    recipe.symmetric_activations || qtype == QuantType::Float8e4m3fn
}

/// How the activation `name` is quantized under `recipe`.
pub fn activation_quant(recipe: &Recipe, name: &str, softmax: &HashSet<String>) -> ActivationQuant {
    let qtype = activation_qtype(recipe, name);
    let own = recipe.tensor_overrides.get(name).and_then(|o| o.method);
    let method = own.unwrap_or(recipe.calibration_method);
    let power_of_two = matches!(
        method,
        RangeMethod::PowerOfTwoNonOverflow | RangeMethod::PowerOfTwoMse
    );
    let source = if let Some(range) = recipe.fixed_range(name) {
        RangeSource::Fixed { range }
    } else if softmax.contains(name) {
        RangeSource::Softmax
    } else {
        RangeSource::Method {
            tensor: name.to_owned(),
            method,
            overridden: own.is_some(),
        }
    };
    ActivationQuant {
        qtype,
        symmetric: activation_symmetric(recipe, qtype),
        source,
        power_of_two,
    }
}

impl ActivationQuant {
    /// The integer grid the range is chosen for.
    pub fn target(&self) -> RangeTarget {
        qtype_range_target(self.qtype, self.symmetric)
    }

    /// The range, from the statistics where it comes from them.
    pub fn range(&self, stats: Option<&CalibrationStats>) -> Result<Range, QuantError> {
        let given = |range: Range| match self.power_of_two {
            true => range::power_of_two_cover(range, self.target()),
            false => range,
        };
        let (tensor, method) = match &self.source {
            RangeSource::Fixed { range } => return Ok(given(*range)),
            RangeSource::Softmax => return Ok(given(Range { lo: 0.0, hi: 1.0 })),
            RangeSource::Method { tensor, method, .. } => (tensor, method),
        };
        let missing = |reason: &str| QuantError::MissingStats {
            tensor: tensor.clone(),
            reason: reason.to_owned(),
        };
        let stats = stats.ok_or_else(|| missing("no calibration statistics were given"))?;
        let s = stats.tensors.get(tensor).ok_or_else(|| {
            missing(
                "it was not calibrated (calibrate again with this model, or keep its node in float)",
            )
        })?;
        range::compute(s, method, self.target(), stats.info.ort_parity)
            .map_err(|e| missing(&e.to_string()))
    }
}

/// How one weight (or constant input) is quantized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct WeightQuant {
    /// The quantized type.
    pub qtype: QuantType,
    /// Symmetric range.
    pub symmetric: bool,
    /// 7-bit weights (onnxruntime's `reduce_range`).
    pub reduce_range: bool,
    /// The axis of per-channel (or block-wise) scales; `None` for one scale.
    pub axis: Option<usize>,
    /// Block size of block-wise (int4) scales along `axis`.
    pub block_size: Option<usize>,
    /// How the range of each channel (or of the whole weight) is chosen.
    pub range: WeightRange,
}

impl WeightQuant {
    /// `v` quantized with `p`: clamped to the type's storage range like onnxruntime's
    /// extremes-based weights (which never reach it), and to the grid the scale was chosen
    /// for (7-bit, symmetric) when the range was clipped ([`WeightRange::Mse`]), so a clipped
    /// value never takes the eighth bit that 7-bit weights exist to keep free.
    pub fn quantize(&self, v: f32, p: super::scale::ScaleZp) -> i64 {
        let q = super::scale::quantize_value(v, p, self.qtype);
        match self.range {
            WeightRange::Minmax | WeightRange::Pow2 => q,
            WeightRange::Mse => {
                let (lo, hi) = super::scale::qrange(self.qtype, self.reduce_range, self.symmetric);
                q.clamp(lo, hi)
            }
        }
    }

    /// True for the weights [`super::rewrite::weight_params`] gives parameters to: integer
    /// weights per channel or per tensor (not block-wise, not FP8).
    pub fn channel_grid(&self) -> bool {
        self.block_size.is_none() && self.qtype != QuantType::Float8e4m3fn
    }

    /// `v` moved into the span `p`'s grid covers when the range clips (MSE ranges); `v`
    /// itself for ranges from the extremes, which clip nothing (the last ulp of the largest
    /// value aside). GPTQ and bias correction compensate the rounding of this value, not the
    /// clipping the range chose.
    pub fn within_span(&self, v: f32, p: super::scale::ScaleZp) -> f32 {
        match self.range {
            WeightRange::Minmax | WeightRange::Pow2 => v,
            WeightRange::Mse => {
                let (lo, hi) = self.grid_span(p);
                v.clamp(lo.min(hi), hi.max(lo))
            }
        }
    }

    /// The float span `p`'s grid covers (values outside it are clipped): what the studio
    /// draws against a channel's values.
    pub fn grid_span(&self, p: super::scale::ScaleZp) -> (f32, f32) {
        let (lo, hi) = super::scale::qrange(self.qtype, self.reduce_range, self.symmetric);
        let at = |q: i64| super::scale::dequantize(q, p);
        (at(lo), at(hi))
    }
}

/// How the weight or constant `name` in `role` is quantized, for a tensor of `rank`
/// dimensions; `None` when it is not (an int4 weight that is not rank 2, or another role).
pub fn weight_quant(
    recipe: &Recipe,
    name: &str,
    role: &TensorRole,
    rank: usize,
) -> Option<WeightQuant> {
    let fp8 = recipe.weight_type == QuantType::Float8e4m3fn;
    match role {
        TensorRole::Weight { .. } if recipe.mode == QuantMode::Int4 => {
            (rank == 2).then_some(WeightQuant {
                qtype: recipe.weight_type,
                symmetric: recipe.symmetric_weights,
                reduce_range: false,
                axis: Some(0),
                block_size: Some(recipe.block_size),
                range: WeightRange::Minmax,
            })
        }
        TensorRole::Weight { axis } => {
            let axis = axis
                .filter(|_| recipe.per_channel)
                .filter(|&a| a < rank && rank > 1);
            let own = recipe.tensor_overrides.get(name).and_then(|o| o.dtype);
            let qtype = own.unwrap_or(recipe.weight_type);
            Some(WeightQuant {
                qtype,
                symmetric: recipe.symmetric_weights || axis.is_some() || fp8,
                // 7-bit weights are an 8-bit setting; a weight given its own type keeps it.
                reduce_range: own.is_none()
                    && (recipe.reduce_range
                        || recipe
                            .tensor_overrides
                            .get(name)
                            .is_some_and(|o| o.reduce_range)),
                axis,
                block_size: None,
                // FP8 maps the magnitude to 448, not to an integer grid.
                range: if qtype == QuantType::Float8e4m3fn {
                    WeightRange::Minmax
                } else {
                    recipe
                        .tensor_overrides
                        .get(name)
                        .and_then(|o| o.weight_range)
                        .unwrap_or(recipe.weight_range)
                },
            })
        }
        TensorRole::ConstantActivation => {
            let qtype = activation_qtype(recipe, name);
            Some(WeightQuant {
                qtype,
                symmetric: activation_symmetric(recipe, qtype),
                reduce_range: false,
                axis: None,
                block_size: None,
                // From its values; on a power-of-two grid where the recipe's weights are.
                range: match recipe.weight_range {
                    WeightRange::Pow2 => WeightRange::Pow2,
                    WeightRange::Minmax | WeightRange::Mse => WeightRange::Minmax,
                },
            })
        }
        _ => None,
    }
}

/// An error naming `name` when `values` holds NaN or Inf.
pub fn check_finite(name: &str, values: &ArrayD<f32>) -> Result<(), QuantError> {
    let bad = match values.as_slice_memory_order() {
        Some(flat) => flat.par_iter().filter(|v| !v.is_finite()).count(),
        None => values.iter().filter(|v| !v.is_finite()).count(),
    };
    match bad {
        0 => Ok(()),
        bad => Err(QuantError::NonFiniteWeight {
            tensor: name.to_owned(),
            count: bad,
        }),
    }
}
