//! Per-tensor error with onnxruntime's `qdq_loss_debug` semantics: for every quantized
//! activation, SQNR of the tensor before quantization against after dequantization inside the
//! QDQ model (`qdq_err`), and of the float model's tensor against the dequantized one
//! (`xmodel_err`); for every quantized weight, the float weight against its dequantized value.
//!
//! Tensors are matched structurally (QuantizeLinear → DequantizeLinear pairs), so QDQ models
//! from onnxruntime, ModelOpt or qdq-studio all work; pairs that cannot be matched to a float
//! tensor are listed rather than dropped silently.

use std::collections::{HashMap, HashSet};

use ndarray::{ArrayD, Axis};
use rayon::prelude::*;
use serde::Serialize;

use super::EvalError;
use crate::calib::data::BatchSource;
use crate::calib::histogram::Histogram;
use crate::calib::runner::augmented_model;
use crate::jobs::{JobContext, RateMeter};
use crate::model::{Graph, Model};
use crate::quant::cpu_session_options;
use crate::recipe::Preprocessing;
use crate::runtime::value::{float_output, owned_inputs, session_inputs};
use crate::runtime::{EpSpec, Optimization, Runtime, SessionOptions};

/// Errors of one activation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ActivationError {
    /// The float model's tensor name.
    pub tensor: String,
    /// SQNR (dB) of the QDQ model's tensor before Q against after DQ.
    pub qdq_sqnr_db: f64,
    /// SQNR (dB) of the float model's tensor against the QDQ model's dequantized tensor.
    pub xmodel_sqnr_db: f64,
    /// The float range the QDQ model can represent for this tensor (from the QuantizeLinear's
    /// scale and zero point), when they are per-tensor constants.
    pub range: Option<(f32, f32)>,
    /// Share of the float model's values of this tensor beyond `range` (by more than half a
    /// quantization step): what quantization clips, counted value by value. Measured on the
    /// float model so that a Relu folded into the range is not counted as clipping.
    pub clipped: Option<f64>,
    /// Histogram of the float model's values of this tensor over the evaluation data: what
    /// the report and the studio draw the range on.
    #[serde(skip)]
    pub histogram: Option<Histogram>,
}

/// Bins of the per-tensor value histograms (enough to see clipping, small in memory).
pub const HISTOGRAM_BINS: usize = 256;

/// Error of one weight.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WeightError {
    /// The float weight's name.
    pub weight: String,
    /// SQNR (dB) of the float weight against its dequantized value.
    pub sqnr_db: f64,
}

/// Everything the per-tensor comparison found.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TensorErrors {
    /// Activations, in the float graph's order.
    pub activations: Vec<ActivationError>,
    /// Weights, by name.
    pub weights: Vec<WeightError>,
    /// Q/DQ pairs whose float tensor could not be found.
    pub unmatched: Vec<String>,
}

/// A Q→DQ pair on an activation: the Q input, the DQ output and the float tensor it stands for.
#[derive(Debug, Clone)]
struct Pair {
    pre: String,
    post: String,
    float: String,
    range: Option<(f32, f32)>,
    /// Steps between the range's ends (`qmax - qmin`).
    levels: i64,
}

/// The float range `[(qmin - zp)·s, (qmax - zp)·s]` a QuantizeLinear node represents, when its
/// scale (and zero point) are per-tensor constants of the model.
fn representable_range(model: &Model, q: &crate::model::Node) -> Option<(f32, f32, i64)> {
    let scale = model.weight(q.inputs.get(1)?).ok()??;
    let scale = scale.to_f32();
    if scale.len() != 1 {
        return None;
    }
    let s = *scale.iter().next()?;
    let (zp, dtype) = match q.inputs.get(2).filter(|z| !z.is_empty()) {
        Some(z) => {
            let z = model.weight(z).ok()??;
            let dtype = z.dtype();
            (*z.to_f32().iter().next()?, dtype)
        }
        // Without a zero point the output is uint8 (unless output_dtype says otherwise).
        None => (
            0.0,
            q.int_attribute("output_dtype")
                .and_then(|c| crate::model::DataType::from_onnx(c as i32).ok())
                .unwrap_or(crate::model::DataType::Uint8),
        ),
    };
    let (qmin, qmax) = dtype.quantized_range()?;
    Some(((qmin as f32 - zp) * s, (qmax as f32 - zp) * s, qmax - qmin))
}

fn sqnr(signal2: f64, noise2: f64) -> f64 {
    let eps = f64::EPSILON;
    20.0 * (signal2.sqrt().max(eps) / noise2.sqrt().max(eps)).log10()
}

/// Finds the activation Q/DQ pairs of a QDQ model and the float tensors they stand for.
fn pairs(quant_model: &Model, quant: &Graph, float: &Graph) -> (Vec<Pair>, Vec<String>) {
    let mut found = Vec::new();
    let mut unmatched = Vec::new();
    for q in quant
        .nodes()
        .iter()
        .filter(|n| n.op_type == "QuantizeLinear")
    {
        let pre = q.inputs[0].clone();
        if quant.tensor(&pre).is_some_and(|t| {
            use crate::model::TensorKind::{Input, Overridable};
            t.producer.is_none() && !matches!(t.kind, Input | Overridable)
        }) {
            continue; // a weight quantized in the graph
        }
        let Some(q_out) = q.outputs.first().and_then(|o| quant.tensor(o)) else {
            continue;
        };
        let Some(dq) = q_out
            .consumers
            .iter()
            .map(|&id| quant.node(id))
            .find(|n| n.op_type == "DequantizeLinear")
        else {
            continue;
        };
        let post = dq.outputs[0].clone();
        let candidates = [
            pre.trim_end_matches("_QuantizeLinear_Input").to_owned(),
            pre.clone(),
            post.clone(),
        ];
        match candidates.iter().find(|c| float.tensor(c).is_some()) {
            Some(name) => {
                let range = representable_range(quant_model, q);
                found.push(Pair {
                    pre,
                    post,
                    float: name.clone(),
                    range: range.map(|(lo, hi, _)| (lo, hi)),
                    levels: range.map_or(1, |(_, _, n)| n),
                })
            }
            None => unmatched.push(pre),
        }
    }
    (found, unmatched)
}

/// Applies `f(value, scale, zero_point)` to every element, per channel along `axis` when there
/// is more than one scale.
fn per_axis(
    values: &ArrayD<f32>,
    scales: &ArrayD<f32>,
    zero_points: &ArrayD<f32>,
    axis: usize,
    f: impl Fn(f32, f32, f32) -> f32,
) -> ArrayD<f32> {
    let mut out = values.clone();
    if scales.len() > 1 && axis < values.ndim() {
        for (c, mut lane) in out.axis_iter_mut(Axis(axis)).enumerate() {
            let (s, z) = (
                scales.as_slice().map_or(1.0, |v| v[c]),
                zero_points.as_slice().map_or(0.0, |v| v[c]),
            );
            lane.mapv_inplace(|v| f(v, s, z));
        }
    } else {
        let (s, z) = (
            scales.iter().next().copied().unwrap_or(1.0),
            zero_points.iter().next().copied().unwrap_or(0.0),
        );
        out.mapv_inplace(|v| f(v, s, z));
    }
    out
}

/// The integer values a DequantizeLinear reads and the float weight they stand for: either an
/// initializer of integers (onnxruntime and qdq-studio store weights quantized, named
/// `<weight>_quantized`), or a QuantizeLinear applied to the float weight inside the graph
/// (ModelOpt's and PyTorch exporters' form), which is evaluated here as ONNX defines it.
fn weight_codes(
    quant: &Model,
    graph: &Graph,
    dq: &crate::model::Node,
    scales: &ArrayD<f32>,
    zero_points: &ArrayD<f32>,
    axis: usize,
) -> Result<Option<(String, ArrayD<f32>)>, EvalError> {
    let input = dq.inputs[0].as_str();
    if let Some(codes) = quant.graph().initializer.iter().find(|t| t.name() == input) {
        let base = input.trim_end_matches("_quantized").to_owned();
        return Ok(Some((base, quant.tensor_array(codes)?.to_f32())));
    }
    let Some(q) = graph
        .tensor(input)
        .and_then(|t| t.producer)
        .map(|id| graph.node(id))
        .filter(|n| n.op_type == "QuantizeLinear")
    else {
        return Ok(None);
    };
    let Some(weight) = quant.weight(&q.inputs[0])? else {
        return Ok(None);
    };
    let dtype = match q.inputs.get(2).filter(|z| !z.is_empty()) {
        Some(z) => quant.weight(z)?.map(|z| z.dtype()),
        None => Some(crate::model::DataType::Uint8),
    };
    let Some((qmin, qmax)) = dtype.and_then(|d| d.quantized_range()) else {
        return Ok(None);
    };
    let codes = per_axis(&weight.to_f32(), scales, zero_points, axis, |v, s, z| {
        let q = crate::quant::scale::round_half_even(f64::from(v / s)) as f32 + z;
        q.clamp(qmin as f32, qmax as f32)
    });
    Ok(Some((q.inputs[0].clone(), codes)))
}

/// Dequantizes every DequantizeLinear on a weight and compares it to the float weight.
fn weight_errors(
    quant: &Model,
    qg: &Graph,
    float: &Model,
    fg: &Graph,
) -> Result<Vec<WeightError>, EvalError> {
    // Quantizers fold BatchNormalization into the preceding Conv before quantizing (ours and
    // onnxruntime's pre-processing both do): the weight they quantized is the folded one, so
    // compare against the float model folded the same way, not against the raw weight.
    let has_bn = |g: &Graph| g.nodes().iter().any(|n| n.op_type == "BatchNormalization");
    let folded;
    let float = if has_bn(fg) && !has_bn(qg) {
        folded = crate::quant::preprocess::preprocess(float, &Preprocessing::default())?.0;
        &folded
    } else {
        float
    };
    let mut out = Vec::new();
    // In graph order, so charts of weight error read along the model.
    for dq in qg
        .topological_order()
        .iter()
        .map(|&id| qg.node(id))
        .filter(|n| n.op_type == "DequantizeLinear")
    {
        let Some(scales) = dq
            .inputs
            .get(1)
            .map(|s| quant.weight(s))
            .transpose()?
            .flatten()
        else {
            continue;
        };
        let scales = scales.to_f32();
        let zero_points = match dq.inputs.get(2).filter(|z| !z.is_empty()) {
            Some(z) => match quant.weight(z)? {
                Some(z) => z.to_f32(),
                None => continue,
            },
            None => ArrayD::zeros(scales.raw_dim()),
        };
        if dq.int_attribute("block_size").is_some() {
            continue;
        }
        let axis = if scales.len() > 1 {
            dq.int_attribute("axis").unwrap_or(1) as usize
        } else {
            0
        };
        let Some((base, values)) = weight_codes(quant, qg, dq, &scales, &zero_points, axis)? else {
            continue;
        };
        let Some(reference) = float.weight(&base)? else {
            continue;
        };
        let reference = reference.to_f32();
        if values.shape() != reference.shape() {
            continue;
        }
        let dequantized = per_axis(&values, &scales, &zero_points, axis, |v, s, z| (v - z) * s);
        let (signal, noise) = reference
            .iter()
            .zip(dequantized.iter())
            .fold((0.0, 0.0), |(s, n), (&a, &b)| {
                (s + f64::from(a).powi(2), n + f64::from(a - b).powi(2))
            });
        out.push(WeightError {
            weight: base,
            sqnr_db: sqnr(signal, noise),
        });
    }
    Ok(out)
}

/// Runs both models on `source` with every matched tensor exposed and accumulates the errors.
pub fn tensor_errors(
    float: &Model,
    quant: &Model,
    source: &mut dyn BatchSource,
    runtime: &Runtime,
    eps: &[EpSpec],
    batch_size: usize,
    ctx: &JobContext,
) -> Result<TensorErrors, EvalError> {
    super::check_comparable(float, quant, "the quantized model")?;
    let (fg, qg) = (Graph::build(float), Graph::build(quant));
    let (pairs, unmatched) = pairs(quant, &qg, &fg);
    let float_names: Vec<String> = pairs
        .iter()
        .map(|p| p.float.clone())
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    let quant_names: Vec<String> = pairs
        .iter()
        .flat_map(|p| [p.pre.clone(), p.post.clone()])
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    let float_bytes = augmented_model(float, &fg, &float_names).map_err(|e| EvalError::Run {
        batch: 0,
        model: "float",
        reason: e.to_string(),
    })?;
    let quant_bytes = augmented_model(quant, &qg, &quant_names).map_err(|e| EvalError::Run {
        batch: 0,
        model: "quantized",
        reason: e.to_string(),
    })?;
    // As qdq_loss_debug: no graph optimizations, so every tensor stays observable.
    let plain = SessionOptions {
        optimization: Optimization::Disable,
        ..cpu_session_options(quant)
    };
    let mut float_session = runtime.session_from_model(&float_bytes, eps, plain)?;
    let mut quant_session = runtime.session_from_model(&quant_bytes, eps, plain)?;
    // (qdq signal², qdq noise², xmodel signal², xmodel noise², values outside the range,
    // values seen) per pair.
    let mut sums = vec![[0f64; 6]; pairs.len()];
    let mut histograms = vec![Histogram::new(HISTOGRAM_BINS); pairs.len()];
    let meter = RateMeter::new("per-tensor error", source.samples() as u64);
    let mut done = 0;
    source.rewind()?;
    while let Some(batch) = source.next_batch(batch_size.max(1))? {
        ctx.checkpoint().map_err(|_| EvalError::Cancelled)?;
        let index = batch.index;
        let owned = owned_inputs(batch.inputs)?;
        let collect = |session: &mut ort::session::Session,
                       names: &[String],
                       label: &'static str|
         -> Result<HashMap<String, ArrayD<f32>>, EvalError> {
            let values = session_inputs(&owned);
            let out = session.run(values).map_err(|e| EvalError::Run {
                batch: index,
                model: label,
                reason: e.to_string(),
            })?;
            Ok(names
                .iter()
                .filter_map(|n| {
                    out.get(n.as_str())
                        .and_then(float_output)
                        .map(|(_, a)| (n.clone(), a))
                })
                .collect())
        };
        let f = collect(&mut float_session, &float_names, "float")?;
        let q = collect(&mut quant_session, &quant_names, "quantized")?;
        sums.par_iter_mut()
            .zip(histograms.par_iter_mut())
            .zip(pairs.par_iter())
            .for_each(|((s, h), p)| {
                let (Some(pre), Some(post)) = (q.get(&p.pre), q.get(&p.post)) else {
                    return;
                };
                for (&a, &b) in pre.iter().zip(post.iter()) {
                    s[0] += f64::from(a).powi(2);
                    s[1] += f64::from(a - b).powi(2);
                }
                if let Some(reference) = f.get(&p.float).filter(|r| r.len() == post.len()) {
                    if let Some(values) = reference.as_slice() {
                        let abs_max = values
                            .iter()
                            .filter(|v| v.is_finite())
                            .fold(0f32, |m, v| m.max(v.abs()));
                        h.add(values, abs_max);
                    }
                    if let Some((lo, hi, half_step)) = p
                        .range
                        .map(|(lo, hi)| (lo, hi, (hi - lo) / (2.0 * p.levels.max(1) as f32)))
                    {
                        // Within half a step of an end a value rounds to the end as any
                        // other value rounds: only beyond it is it clipped.
                        s[4] += reference
                            .iter()
                            .filter(|&&v| v < lo - half_step || v > hi + half_step)
                            .count() as f64;
                        s[5] += reference.len() as f64;
                    }
                    for (&a, &b) in reference.iter().zip(post.iter()) {
                        s[2] += f64::from(a).powi(2);
                        s[3] += f64::from(a - b).powi(2);
                    }
                }
            });
        done += batch.samples;
        ctx.report(meter.progress(done as u64, format!("batch {}", index + 1)));
    }
    let order: HashMap<&str, usize> = fg
        .topological_order()
        .iter()
        .enumerate()
        .flat_map(|(i, &id)| fg.node(id).outputs.iter().map(move |o| (o.as_str(), i)))
        .collect();
    let mut activations: Vec<ActivationError> = pairs
        .iter()
        .zip(&sums)
        .zip(histograms)
        .map(|((p, s), h)| ActivationError {
            tensor: p.float.clone(),
            qdq_sqnr_db: sqnr(s[0], s[1]),
            xmodel_sqnr_db: sqnr(s[2], s[3]),
            range: p.range,
            clipped: (s[5] > 0.0).then(|| s[4] / s[5]),
            histogram: (h.total() > 0).then_some(h),
        })
        .collect();
    activations.sort_by_key(|a| {
        (
            order.get(a.tensor.as_str()).copied().unwrap_or(0),
            a.tensor.clone(),
        )
    });
    activations.dedup_by(|a, b| a.tensor == b.tensor);
    Ok(TensorErrors {
        activations,
        weights: weight_errors(quant, &qg, float, &fg)?,
        unmatched,
    })
}
