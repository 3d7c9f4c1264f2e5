//! Cross-layer equalization (Nagel et al., "Data-Free Quantization Through Weight Equalization
//! and Bias Correction", ICCV 2019). For two layers in a row, `y = W₂ f(W₁ x + b₁)` with `f`
//! positively homogeneous, dividing output channel `i` of the first layer (weights and bias)
//! by `sᵢ > 0` and multiplying input channel `i` of the second by `sᵢ` changes no output.
//! With `sᵢ = √(r₁ᵢ / r₂ᵢ)` (`r` the channel's largest |weight|) both channels end with the
//! same range `√(r₁ᵢ r₂ᵢ)`: a weight whose channels spanned very different ranges (depthwise
//! convolutions after batch-norm folding are the classic case) then loses far less to one
//! per-tensor scale. Chains (A → B → C) are swept until the scales settle. A ReLU6 (`Clip(0,
//! 6)`) between the layers is not homogeneous: its bound follows each channel's scale as a
//! `Min` after the Clip (see [`pairs::Bound`]), so the float model stays the same.
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
use crate::model::{DataType, Graph, Model, ModelError, TensorArray};
use crate::quant::channel_factors::ChannelFactors;

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
    /// The two layers' weights (initializer names), first then second.
    pub weights: [String; 2],
    /// The nodes between them, if any (a bounded Clip says its bound went per channel).
    pub between: Option<String>,
    /// The tensors those nodes write: rescaled along with the pair.
    pub between_tensors: Vec<String>,
    /// Channels equalized.
    pub channels: usize,
    /// Per-tensor int8 SQNR (dB) of the first layer's weight, averaged over its output
    /// channels ([`int8_sqnr`]), before and after.
    pub first_sqnr_db: [f64; 2],
    /// The same for the second layer's weight.
    pub second_sqnr_db: [f64; 2],
    /// What the rescaled activations (the first layer's output, `between_tensors`, the
    /// second's input) hold against the float model's, per channel (`None` when no sweep
    /// reached the pair).
    #[serde(skip)]
    pub factors: Option<ChannelFactors>,
}

/// Equalizes every pair of `model` in place; returns what it did.
pub fn equalize(model: &mut Model) -> Result<Vec<EqualizedPair>, ModelError> {
    let graph = Graph::build(model);
    let (layers, pairs) = pairs::find(model, &graph);
    if pairs.is_empty() {
        return Ok(Vec::new());
    }
    let mut values: HashMap<String, ArrayD<f32>> = HashMap::new();
    // Each initializer's own type: float16 models are equalized in f32 and stored back.
    let mut types: HashMap<String, DataType> = HashMap::new();
    for layer in &layers {
        for name in std::iter::once(&layer.weight).chain(&layer.bias) {
            if let Some(value) = model.weight(name)? {
                types.insert(name.clone(), value.dtype());
                values.insert(name.clone(), value.into_f32());
            }
        }
    }
    let before: HashMap<String, f64> = weight_sqnrs(&layers, &values);
    // What each pair's first layer's output channels were divided by, over all sweeps.
    let mut divided: Vec<Vec<f32>> = vec![Vec::new(); pairs.len()];
    for _ in 0..MAX_SWEEPS {
        let mut moved = 0f32;
        for (pair, total) in pairs.iter().zip(&mut divided) {
            let scales = equalize_pair(&layers[pair.first], &layers[pair.second], &mut values);
            moved = scales.iter().map(|s| s.ln().abs()).fold(moved, f32::max);
            if total.is_empty() {
                *total = scales;
            } else {
                total.iter_mut().zip(&scales).for_each(|(t, s)| *t *= s);
            }
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
    let mut report: Vec<EqualizedPair> = pairs
        .iter()
        .zip(&divided)
        .map(|(pair, divided)| {
            let (first, second) = (&layers[pair.first], &layers[pair.second]);
            EqualizedPair {
                first: name(pair.first),
                second: name(pair.second),
                weights: [first.weight.clone(), second.weight.clone()],
                between: pair.between.clone(),
                between_tensors: pair.between_tensors.clone(),
                channels: first.outputs.channels(first.elements),
                first_sqnr_db: both(&first.weight),
                second_sqnr_db: both(&second.weight),
                factors: (!divided.is_empty()).then(|| {
                    let values = divided.iter().map(|d| d.recip()).collect();
                    ChannelFactors::new(values, first.spatial_dims)
                }),
            }
        })
        .collect();
    write_back(model, values, &types);
    let float_type = |name: &str| types.get(name).copied().unwrap_or(DataType::Float32);
    let mut bounded: Vec<(usize, pairs::Bound, BoundShape, &[f32])> = pairs
        .iter()
        .zip(&divided)
        .enumerate()
        .filter(|(_, (_, total))| !total.is_empty())
        .filter_map(|(index, (pair, total))| {
            let first = &layers[pair.first];
            let shape = BoundShape {
                spatial_dims: first.spatial_dims,
                float_type: float_type(&first.weight),
            };
            Some((index, pair.bound?, shape, &total[..]))
        })
        .collect();
    // Last first: each Min is inserted after its Clip, which moves the nodes behind it.
    bounded.sort_by_key(|(_, bound, ..)| std::cmp::Reverse(bound.clip.0));
    for (index, bound, shape, total) in bounded {
        if let Some(unbounded) = bound_per_channel(model, &graph, bound, shape, total) {
            // The Clip's new output is rescaled too (and new to the model).
            report[index].between_tensors.push(unbounded);
        }
    }
    Ok(report)
}

/// The model's default-domain opset (1 when it does not say).
fn opset_of(model: &Model) -> i64 {
    crate::quant::opset::default_opset(model.proto()).unwrap_or(1)
}

/// How a per-channel bound is laid out: `[C, 1…]` with `spatial_dims` trailing 1s (to
/// broadcast over a Conv's spatial dims), in the activation's float type.
#[derive(Debug, Clone, Copy)]
struct BoundShape {
    spatial_dims: usize,
    float_type: DataType,
}

/// Turns a `Clip(0, m)` whose input channels were divided by `divided` into `Clip(0)`
/// followed by `Min(·, m / divided)` (one bound per channel, laid out as `layout` says); the
/// Min writes the Clip's old output, so readers are unchanged. Returns the Clip's new
/// output (`None` when nothing was changed).
fn bound_per_channel(
    model: &mut Model,
    graph: &Graph,
    bound: pairs::Bound,
    layout: BoundShape,
    divided: &[f32],
) -> Option<String> {
    let clip = graph.node(bound.clip);
    let (output, position) = (clip.outputs.first().cloned()?, bound.clip.0);
    let unbounded = unique_name(graph, &format!("{output}_unbounded"));
    let limit = unique_name(graph, &format!("{output}_channel_bound"));
    let mut shape = vec![divided.len()];
    shape.extend(std::iter::repeat_n(1, layout.spatial_dims));
    let values: Vec<f32> = divided.iter().map(|d| bound.max / d).collect();
    let limits = ArrayD::from_shape_vec(ndarray::IxDyn(&shape), values).ok()?;
    let g = model.proto_mut().graph.as_mut()?;
    let node = g.node.get_mut(position)?;
    let detached = node.input.get(2).cloned();
    node.input.truncate(2);
    node.attribute.retain(|a| a.name() != "max");
    if let Some(out) = node.output.first_mut() {
        out.clone_from(&unbounded);
    }
    let min = crate::model::proto::NodeProto {
        name: Some(format!("{}_channel_bound", clip.name)),
        op_type: Some("Min".to_owned()),
        input: vec![unbounded.clone(), limit.clone()],
        output: vec![output],
        ..Default::default()
    };
    g.node.insert(position + 1, min);
    let limits = TensorArray::Float32(limits).cast_float(layout.float_type);
    put_initializer(g, limits.to_proto(&limit));
    // The old bound's initializer goes when nothing else reads it (ReLU6s often share one).
    if let Some(old) = detached.filter(|d| !d.is_empty()) {
        let read = g.node.iter().any(|n| n.input.contains(&old))
            || g.output.iter().any(|o| o.name() == old)
            || g.input.iter().any(|i| i.name() == old);
        if !read {
            g.initializer.retain(|t| t.name() != old);
        }
    }
    Some(unbounded)
}

/// `base`, or `base_2`, `base_3`… when the graph already has a tensor so named.
fn unique_name(graph: &Graph, base: &str) -> String {
    crate::model::graph::free_name(base, |n| graph.tensor(n).is_some())
}

/// Rescales one pair toward equal channel ranges; returns the scales applied (what the
/// first layer's output channels were divided by; none when the pair cannot be rescaled).
fn equalize_pair(
    first: &pairs::Layer,
    second: &pairs::Layer,
    values: &mut HashMap<String, ArrayD<f32>>,
) -> Vec<f32> {
    let Some(inputs) = second.inputs else {
        return Vec::new();
    };
    let (Some(w1), Some(w2)) = (values.get(&first.weight), values.get(&second.weight)) else {
        return Vec::new();
    };
    let r1 = first.outputs.ranges(w1);
    let r2 = inputs.ranges(w2);
    if r1.len() != r2.len() {
        return Vec::new();
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
    scales
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
    // A channel quantized exactly counts as 60 dB (its SQNR is unbounded); a channel of
    // zeros has no noise either.
    let db = |(signal, noise): (f64, f64)| crate::util::capped_sqnr_db(signal, noise, 60.0);
    sums.into_iter().map(db).sum::<f64>() / channels as f64
}

/// Replaces the rescaled initializers (inline, each in its own float type).
fn write_back(
    model: &mut Model,
    values: HashMap<String, ArrayD<f32>>,
    types: &HashMap<String, DataType>,
) {
    let Some(graph) = model.proto_mut().graph.as_mut() else {
        return;
    };
    for (name, value) in values {
        let float_type = types.get(&name).copied().unwrap_or(DataType::Float32);
        let value = TensorArray::Float32(value).cast_float(float_type);
        put_initializer(graph, value.to_proto(&name));
    }
}
