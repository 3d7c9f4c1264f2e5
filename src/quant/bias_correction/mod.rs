//! Bias correction (Nagel et al., ICCV 2019; AIMET's and Quark's "bias correction"): weight
//! quantization shifts each output channel's mean by `E[(Ŵ − W) x] = Σ (Ŵ − W) · E[x]`, a
//! systematic error that per-tensor weights in particular make large and that accumulates
//! layer after layer. With the mean input of every tap measured on the calibration data
//! (see [`crate::calib::input_means`]), the shift is known exactly and subtracted from the
//! bias before it is quantized; a Conv or Gemm without a bias gets one, a MatMul's goes into
//! the constant of the Add after it.
//!
//! The means are statistics of the float model, so they do not depend on the recipe:
//! changing exclusions or weight settings after calibrating corrects for the new weights.
//! Block-wise (int4) and FP8 weights, and MatMul weights SmoothQuant rescales, are left as
//! they are (reported). With GPTQ, the shift is that of GPTQ's integers.

use std::collections::HashMap;

use ndarray::ArrayD;
use serde::Serialize;

use super::QuantError;
use super::layers::{self, Kind, Layer};
use super::params::weight_quant;
use super::plan::Plan;
use super::prepare::Prepared;
use super::rewrite::rounding_error;
use crate::calib::input_means::MeanSpec;
use crate::calib::stats::CalibrationStats;
use crate::model::graph::put_initializer;
use crate::model::ops;
use crate::model::{DataType, Model, TensorArray};
use crate::recipe::Recipe;

/// One layer whose bias was corrected.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CorrectedLayer {
    /// The layer (node name).
    pub layer: String,
    /// Output channels.
    pub channels: usize,
    /// The mean output shift its weight quantization caused, RMS over channels (what was
    /// subtracted from the bias).
    pub shift_rms: f64,
    /// The largest |value| calibration saw in the layer's output, for scale.
    pub output_abs_max: Option<f32>,
    /// The layer had no bias: one was added.
    pub added_bias: bool,
}

/// What bias correction did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct BiasCorrectionReport {
    /// Layers corrected.
    pub corrected: Vec<CorrectedLayer>,
    /// Layers left as they were, and why.
    pub skipped: Vec<(String, String)>,
}

impl BiasCorrectionReport {
    /// One line for logs and the CLI.
    pub fn summary(&self) -> String {
        let added = self.corrected.iter().filter(|c| c.added_bias).count();
        let mut text = format!(
            "bias correction: {} layer(s) corrected ({} given a bias)",
            self.corrected.len(),
            added
        );
        if !self.skipped.is_empty() {
            text.push_str(&format!(", {} left as they were", self.skipped.len()));
        }
        text
    }

    /// The corrected layers, largest shift relative to the output range first.
    pub fn largest(&self) -> Vec<&CorrectedLayer> {
        let mut list: Vec<&CorrectedLayer> = self.corrected.iter().collect();
        let relative = |c: &CorrectedLayer| {
            c.output_abs_max
                .filter(|m| *m > 0.0)
                .map_or(0.0, |m| c.shift_rms / f64::from(m))
        };
        list.sort_by(|a, b| relative(b).total_cmp(&relative(a)));
        list
    }
}

/// The layers whose mean inputs calibration gathers for `recipe` (none unless it corrects
/// biases).
pub fn mean_specs(prepared: &Prepared, recipe: &Recipe) -> Vec<MeanSpec> {
    if !recipe.bias_correction {
        return Vec::new();
    }
    let plan = prepared.plan(recipe, None);
    layers::layers(&prepared.graph, &prepared.model, &plan)
        .iter()
        .filter_map(|layer| layers::mean_spec(&prepared.model, layer))
        .collect()
}

/// Corrects the biases of `prepared` for the weights `recipe` quantizes (nothing unless it
/// asks for bias correction), and re-indexes its graph. `rounding` holds GPTQ's values of
/// the weights it rounded.
pub fn apply(
    prepared: &mut Prepared,
    recipe: &Recipe,
    stats: Option<&CalibrationStats>,
    rounding: &HashMap<String, ArrayD<f32>>,
) -> Result<Option<BiasCorrectionReport>, QuantError> {
    let Some(stats) = stats.filter(|_| recipe.bias_correction) else {
        return Ok(None);
    };
    let super::Guarded {
        recipe: effective,
        plan,
        ..
    } = super::guarded(prepared, recipe, Some(stats));
    let targets = layers::layers(&prepared.graph, &prepared.model, &plan);
    if !targets.is_empty() && stats.input_means.is_empty() {
        return Err(QuantError::StatsMismatch(
            "bias correction needs statistics calibrated with it on (the layers' mean inputs): calibrate again with bias_correction".to_owned(),
        ));
    }
    let mut report = BiasCorrectionReport::default();
    for layer in &targets {
        let rounded = rounding.get(&layer.weight);
        match correct(prepared, &effective, &plan, stats, layer, rounded)? {
            Ok(corrected) => report.corrected.push(corrected),
            Err(reason) => report.skipped.push((layer.name.clone(), reason.to_owned())),
        }
    }
    prepared.reindex();
    Ok(Some(report))
}

/// Corrects one layer's bias; `Ok(Err(reason))` when it cannot be.
fn correct(
    prepared: &mut Prepared,
    recipe: &Recipe,
    plan: &Plan,
    stats: &CalibrationStats,
    layer: &Layer,
    rounded: Option<&ArrayD<f32>>,
) -> Result<Result<CorrectedLayer, &'static str>, QuantError> {
    let Some(mean) = stats.input_means.get(&layer.name) else {
        return Ok(Err("its mean input was not gathered"));
    };
    if recipe.smoothquant && layer.kind == Kind::MatMul {
        return Ok(Err("SmoothQuant rescales MatMul weights"));
    }
    let Some(role) = plan.roles.get(&layer.weight) else {
        return Ok(Err("its weight is not quantized"));
    };
    let Some(weight) = prepared.model.weight(&layer.weight)? else {
        return Ok(Err("its weight is not a constant"));
    };
    let weight_type = weight.dtype();
    if !weight_type.is_plain_float() {
        return Ok(Err("its weight is not a float"));
    }
    let weight = weight.into_f32();
    let how = weight_quant(recipe, &layer.weight, role, weight.ndim());
    // The rounding error only: values a clipped range (MSE weight ranges) clips keep the
    // clipping it chose (corrected on average, it moved every token to fix a few: MiniLM
    // per-tensor 15.4 -> 5.5 dB).
    let Some(error) = how.and_then(|how| rounding_error(&weight, rounded, &how)) else {
        return Ok(Err("block-wise and FP8 weights are not corrected"));
    };
    let Some(shift) = output_shift(&error, &mean.shape, &mean.mean(), layer.kind) else {
        return Ok(Err("its mean input does not fit its weight"));
    };
    let Some(added_bias) = subtract_from_bias(prepared, layer, &shift, weight_type)? else {
        return Ok(Err(
            "it has no bias to correct (a MatMul without an Add after it)",
        ));
    };
    let output = prepared.graph.node(layer.node).outputs.first().cloned();
    Ok(Ok(CorrectedLayer {
        layer: layer.name.clone(),
        channels: shift.len(),
        shift_rms: (shift.iter().map(|s| s * s).sum::<f64>() / shift.len().max(1) as f64).sqrt(),
        output_abs_max: output
            .and_then(|o| stats.tensors.get(&o))
            .map(|s| s.abs_max()),
        added_bias,
    }))
}

/// The mean output shift per output channel: `Σ error · mean` over the taps each channel
/// reads (`mean` shaped `[C]` or `[C, kh, kw]`), times Gemm's `alpha`.
fn output_shift(
    error: &ArrayD<f32>,
    shape: &[usize],
    mean: &[f64],
    kind: Kind,
) -> Option<Vec<f64>> {
    let dims = error.shape();
    match kind {
        Kind::Conv { group } => {
            let (outputs, per_group) = (*dims.first()?, *dims.get(1)?);
            if group == 0 || !outputs.is_multiple_of(group) {
                return None;
            }
            let taps: usize = dims[2..].iter().product();
            if shape.first() != Some(&(per_group * group))
                || shape.iter().product::<usize>() != per_group * group * taps
            {
                return None;
            }
            let flat = error.as_standard_layout();
            let flat = flat.as_slice()?;
            let outputs_per_group = outputs / group;
            Some(
                flat.chunks_exact(per_group * taps)
                    .enumerate()
                    .map(|(o, row)| {
                        let first = o / outputs_per_group.max(1) * per_group * taps;
                        row.iter()
                            .zip(&mean[first..first + per_group * taps])
                            .map(|(e, m)| f64::from(*e) * m)
                            .sum()
                    })
                    .collect(),
            )
        }
        Kind::Gemm { trans_b, alpha, .. } => {
            let matrix = if trans_b {
                error.t().to_owned()
            } else {
                error.clone()
            };
            dense_shift(&matrix, shape, mean)
                .map(|s| s.into_iter().map(|v| v * f64::from(alpha)).collect())
        }
        Kind::MatMul => dense_shift(error, shape, mean),
    }
}

/// `Σ_k error[k, n] · mean[k]` for a `[K, N]` error.
fn dense_shift(error: &ArrayD<f32>, shape: &[usize], mean: &[f64]) -> Option<Vec<f64>> {
    let [k, n] = *error.shape() else { return None };
    if shape != [k] {
        return None;
    }
    let mut shift = vec![0f64; n];
    for (row, m) in error.outer_iter().zip(mean) {
        for (s, e) in shift.iter_mut().zip(row.iter()) {
            *s += f64::from(*e) * m;
        }
    }
    Some(shift)
}

/// Subtracts `shift` from the layer's bias (adding one, of the weight's type `float_type`, to
/// a Conv or Gemm that has none); `Some(added)` when done, `None` when there is no bias it can
/// change.
fn subtract_from_bias(
    prepared: &mut Prepared,
    layer: &Layer,
    shift: &[f64],
    float_type: DataType,
) -> Result<Option<bool>, QuantError> {
    let graph = &prepared.graph;
    let node = graph.node(layer.node);
    let (bias, divisor) = match layer.kind {
        Kind::Conv { .. } => (node.inputs.get(2).filter(|b| !b.is_empty()).cloned(), 1.0),
        Kind::Gemm { beta, .. } if beta != 0.0 => {
            (node.inputs.get(2).filter(|b| !b.is_empty()).cloned(), beta)
        }
        Kind::Gemm { .. } => return Ok(None),
        Kind::MatMul => match following_add_constant(prepared, layer) {
            Some(bias) => (Some(bias), 1.0),
            None => return Ok(None),
        },
    };
    let Some(bias) = bias else {
        let name = format!("{}_corrected_bias", layer.name);
        let values: Vec<f32> = shift
            .iter()
            .map(|s| (-s / f64::from(divisor)) as f32)
            .collect();
        set_initializer(
            &mut prepared.model,
            &name,
            vec![values.len()],
            values,
            float_type,
        );
        if let Some(n) = prepared
            .model
            .proto_mut()
            .graph
            .as_mut()
            .and_then(|g| g.node.get_mut(layer.node.0))
        {
            n.input.resize(2, String::new());
            n.input.push(name);
        }
        return Ok(Some(true));
    };
    if !prepared.graph.is_private_initializer(&bias) {
        return Ok(None);
    }
    let Some(values) = prepared.model.weight(&bias)? else {
        return Ok(None);
    };
    let bias_type = values.dtype();
    if !bias_type.is_plain_float() {
        return Ok(None);
    }
    let values = values.into_f32();
    let current: Vec<f32> = match values.len() {
        n if n == shift.len() => values.iter().copied().collect(),
        1 => vec![values.iter().copied().next().unwrap_or(0.0); shift.len()],
        _ => return Ok(None),
    };
    let corrected: Vec<f32> = current
        .iter()
        .zip(shift)
        .map(|(b, s)| (f64::from(*b) - s / f64::from(divisor)) as f32)
        .collect();
    // A bias broadcast from one value becomes one value per channel.
    let shape = if values.len() == shift.len() {
        values.shape().to_vec()
    } else {
        vec![shift.len()]
    };
    set_initializer(&mut prepared.model, &bias, shape, corrected, bias_type);
    Ok(Some(false))
}

/// The constant input of the Add right after a MatMul, when it is one value per column. The
/// float Add that completes a MatMul whose outlier rows were split off
/// ([`crate::quant::outlier_rows`]) is looked through: the bias is the one after it.
fn following_add_constant(prepared: &Prepared, layer: &Layer) -> Option<String> {
    let graph = &prepared.graph;
    let mut output = graph.node(layer.node).outputs.first()?;
    let mut add = graph.node(graph.sole_consumer(output)?);
    let completes = |name: &str| {
        prepared
            .report
            .outlier_rows
            .iter()
            .any(|s| s.completing_add() == name)
    };
    if completes(&add.name) {
        output = add.outputs.first()?;
        add = graph.node(graph.sole_consumer(output)?);
    }
    if add.op_type != ops::ADD || !add.domain.is_empty() {
        return None;
    }
    let other = add.inputs.iter().find(|i| *i != output)?;
    let shape = graph.tensor(other)?.shape.as_ref()?;
    // [N] or [1, …, 1, N]: one value per output column, nothing else.
    let ones = shape
        .iter()
        .rev()
        .skip(1)
        .all(|d| *d == crate::model::Dim::Fixed(1));
    (ones && graph.is_private_initializer(other)).then(|| other.clone())
}

/// Writes `values` as the initializer `name` of `shape` in `float_type` (the model's own
/// float type: float16 models keep float16 biases), replacing or adding it.
fn set_initializer(
    model: &mut Model,
    name: &str,
    shape: Vec<usize>,
    values: Vec<f32>,
    float_type: DataType,
) {
    let proto = TensorArray::Float32(crate::model::tensor::array(shape, values))
        .cast_float(float_type)
        .to_proto(name);
    if let Some(graph) = model.proto_mut().graph.as_mut() {
        put_initializer(graph, proto);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::IxDyn;

    #[test]
    fn grouped_conv_shift_reads_its_groups_taps() {
        // 2 outputs, 2 groups of 1 input, 1×1 kernel: output o reads input o only.
        let error = ArrayD::from_shape_vec(IxDyn(&[2, 1, 1, 1]), vec![0.5, -1.0]).unwrap();
        let shift = output_shift(&error, &[2, 1, 1], &[2.0, 3.0], Kind::Conv { group: 2 });
        assert_eq!(shift, Some(vec![1.0, -3.0]));
        // Outputs that do not split into the groups: no shift rather than a wrong one.
        let odd = ArrayD::from_elem(IxDyn(&[3, 1, 1, 1]), 1.0);
        assert_eq!(
            output_shift(&odd, &[2, 1, 1], &[1.0, 1.0], Kind::Conv { group: 2 }),
            None
        );
        assert_eq!(
            output_shift(
                &ArrayD::from_elem(IxDyn(&[]), 1.0),
                &[1],
                &[1.0],
                Kind::Conv { group: 1 }
            ),
            None
        );
    }

    #[test]
    fn gemm_shift_follows_trans_b_and_alpha() {
        // [N=2, K=3] stored transposed.
        let error =
            ArrayD::from_shape_vec(IxDyn(&[2, 3]), vec![1.0, 0.0, 0.0, 0.0, 1.0, 1.0]).unwrap();
        let kind = Kind::Gemm {
            trans_b: true,
            alpha: 2.0,
            beta: 1.0,
        };
        assert_eq!(
            output_shift(&error, &[3], &[1.0, 2.0, 3.0], kind),
            Some(vec![2.0, 10.0])
        );
    }
}
