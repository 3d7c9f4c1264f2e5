//! Cross-layer equalization (Nagel et al., "Data-Free Quantization Through Weight Equalization
//! and Bias Correction", ICCV 2019). For two layers in a row, `y = W₂ f(W₁ x + b₁)` with `f`
//! positively homogeneous, dividing output channel `i` of the first layer (weights and bias)
//! by `sᵢ > 0` and multiplying input channel `i` of the second by `sᵢ` changes no output.
//! With `sᵢ = √(r₁ᵢ / r₂ᵢ)` (`r` the channel's largest |weight|) both channels end with the
//! same range `√(r₁ᵢ r₂ᵢ)`: a weight whose channels spanned very different ranges (depthwise
//! convolutions after batch-norm folding are the classic case) then loses far less to one
//! per-tensor scale. Chains (A → B → C) are swept until the scales settle.
//!
//! Data-free and exact in float, so it runs as a pre-processing step: calibration and
//! quantization both see the equalized model (the statistics record it, see
//! [`crate::calib::CalibrationInfo::equalized`]).
//!
//! Written by hand: this is the quantizer's own graph rewriting (no ONNX crate offers it).

mod channels;
mod pairs;

use std::collections::HashMap;

use ndarray::ArrayD;
use serde::Serialize;

pub use channels::ChannelMap;

use crate::model::graph::put_initializer;
use crate::model::{Graph, Model, ModelError, TensorArray};

/// Scales are kept in this range (a dead channel must not make them 0 or ∞).
const SCALE_LIMITS: (f32, f32) = (1e-3, 1e3);
/// Sweeps stop when no scale moved by more than this factor (as |ln s|) …
const SETTLED: f32 = 1e-4;
/// … or after this many.
const MAX_SWEEPS: usize = 50;

/// One pair of layers equalized, with the effect on their weights.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EqualizedPair {
    /// The first layer (node name).
    pub first: String,
    /// The second layer.
    pub second: String,
    /// The activation between them, if any.
    pub between: Option<String>,
    /// Channels equalized.
    pub channels: usize,
    /// Per-tensor int8 SQNR (dB) of the first layer's weight, averaged over its output
    /// channels ([`int8_sqnr`]), before and after.
    pub first_sqnr_db: [f64; 2],
    /// The same for the second layer's weight.
    pub second_sqnr_db: [f64; 2],
}

/// Equalizes every pair of `model` in place; returns what it did.
pub fn equalize(model: &mut Model) -> Result<Vec<EqualizedPair>, ModelError> {
    let graph = Graph::build(model);
    let (layers, pairs) = pairs::find(model, &graph);
    if pairs.is_empty() {
        return Ok(Vec::new());
    }
    let mut values: HashMap<String, ArrayD<f32>> = HashMap::new();
    for layer in &layers {
        for name in std::iter::once(&layer.weight).chain(&layer.bias) {
            if let Some(value) = model.weight(name)? {
                values.insert(name.clone(), value.to_f32());
            }
        }
    }
    let before: HashMap<String, f64> = weight_sqnrs(&layers, &values);
    for _ in 0..MAX_SWEEPS {
        let mut moved = 0f32;
        for pair in &pairs {
            moved = moved.max(equalize_pair(
                &layers[pair.first],
                &layers[pair.second],
                &mut values,
            ));
        }
        if moved < SETTLED {
            break;
        }
    }
    let after = weight_sqnrs(&layers, &values);
    let name = |i: usize| graph.node(layers[i].node).name.clone();
    let both = |weight: &String| {
        let of = |m: &HashMap<String, f64>| m.get(weight).copied().unwrap_or(f64::NAN);
        [of(&before), of(&after)]
    };
    let report = pairs
        .iter()
        .map(|pair| {
            let (first, second) = (&layers[pair.first], &layers[pair.second]);
            EqualizedPair {
                first: name(pair.first),
                second: name(pair.second),
                between: pair.between.clone(),
                channels: first.outputs.channels(first.elements),
                first_sqnr_db: both(&first.weight),
                second_sqnr_db: both(&second.weight),
            }
        })
        .collect();
    write_back(model, values);
    Ok(report)
}

/// Rescales one pair toward equal channel ranges; returns the largest |ln s| applied.
fn equalize_pair(
    first: &pairs::Layer,
    second: &pairs::Layer,
    values: &mut HashMap<String, ArrayD<f32>>,
) -> f32 {
    let Some(inputs) = second.inputs else {
        return 0.0;
    };
    let (Some(w1), Some(w2)) = (values.get(&first.weight), values.get(&second.weight)) else {
        return 0.0;
    };
    let r1 = first.outputs.ranges(w1);
    let r2 = inputs.ranges(w2);
    if r1.len() != r2.len() {
        return 0.0;
    }
    let scales: Vec<f32> = r1
        .iter()
        .zip(&r2)
        .map(|(&a, &b)| {
            if a > 0.0 && b > 0.0 {
                (a / b).sqrt().clamp(SCALE_LIMITS.0, SCALE_LIMITS.1)
            } else {
                1.0
            }
        })
        .collect();
    let inverse: Vec<f32> = scales.iter().map(|s| 1.0 / s).collect();
    if let Some(w1) = values.get_mut(&first.weight) {
        first.outputs.scale(w1, &inverse);
    }
    if let Some(bias) = first.bias.as_ref().and_then(|b| values.get_mut(b)) {
        scale_bias(bias, &inverse);
    }
    if let Some(w2) = values.get_mut(&second.weight) {
        inputs.scale(w2, &scales);
    }
    scales.iter().map(|s| s.ln().abs()).fold(0.0, f32::max)
}

/// Divides a bias per channel; one broadcast value is expanded to a value per channel first.
fn scale_bias(bias: &mut ArrayD<f32>, factors: &[f32]) {
    if bias.len() != factors.len() {
        let value = bias.iter().next().copied().unwrap_or(0.0);
        *bias = ArrayD::from_elem(ndarray::IxDyn(&[factors.len()]), value);
    }
    for (v, f) in bias.iter_mut().zip(factors) {
        *v *= f;
    }
}

/// [`int8_sqnr`] of every layer's weight.
fn weight_sqnrs(
    layers: &[pairs::Layer],
    values: &HashMap<String, ArrayD<f32>>,
) -> HashMap<String, f64> {
    layers
        .iter()
        .filter_map(|l| {
            Some((
                l.weight.clone(),
                int8_sqnr(values.get(&l.weight)?, &l.outputs),
            ))
        })
        .collect()
}

/// The SQNR (dB) of `w` quantized to int8 with one symmetric per-tensor scale, averaged over
/// its output channels (`outputs`): each output channel's own signal against its own noise,
/// which is what a small channel sharing a scale with large ones loses (the SQNR of the
/// whole tensor would only weigh the large channels).
pub fn int8_sqnr(w: &ArrayD<f32>, outputs: &ChannelMap) -> f64 {
    let max = w.iter().fold(0f32, |m, v| m.max(v.abs()));
    let channels = outputs.channels(w.len());
    if max == 0.0 || channels == 0 {
        return f64::INFINITY;
    }
    let scale = f64::from(max) / 127.0;
    let mut sums = vec![(0f64, 0f64); channels];
    for (i, &v) in w.iter().enumerate() {
        let v = f64::from(v);
        let q = (v / scale).round_ties_even().clamp(-127.0, 127.0) * scale;
        let (signal, noise) = &mut sums[outputs.channel(i)];
        *signal += v * v;
        *noise += (v - q) * (v - q);
    }
    // A channel quantized exactly counts as 60 dB (its SQNR is unbounded).
    let db = |(signal, noise): (f64, f64)| {
        if noise == 0.0 || signal == 0.0 {
            60.0
        } else {
            (10.0 * (signal / noise).log10()).min(60.0)
        }
    };
    sums.into_iter().map(db).sum::<f64>() / channels as f64
}

/// Replaces the rescaled initializers (inline, float32).
fn write_back(model: &mut Model, values: HashMap<String, ArrayD<f32>>) {
    let Some(graph) = model.proto_mut().graph.as_mut() else {
        return;
    };
    for (name, value) in values {
        put_initializer(graph, TensorArray::Float32(value).to_proto(&name));
    }
}
