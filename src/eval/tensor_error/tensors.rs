//! Per-tensor error with onnxruntime's `qdq_loss_debug` semantics: for every quantized
//! activation, SQNR of the tensor before quantization against after dequantization inside the
//! QDQ model (`qdq_err`), and of the float model's tensor against the dequantized one
//! (`xmodel_err`); for every quantized weight, the float weight against its dequantized value.
//!
//! Tensors are matched structurally (QuantizeLinear → DequantizeLinear pairs), so QDQ models
//! from onnxruntime, ModelOpt or qdq-studio all work; pairs that cannot be matched to a float
//! tensor are listed rather than dropped silently.

use std::collections::{BTreeSet, HashMap, HashSet};

use rayon::prelude::*;
use serde::Serialize;

use crate::calib::data::{BatchSource, sample_shapes};
use crate::calib::histogram::Histogram;
use crate::calib::stats::BatchSummary;
use crate::eval::compare::EvalError;
use crate::eval::compare::batch_workers::each_batch_on_workers;
use crate::eval::simd::squares::array_sums;
pub use crate::eval::tensor_error::local_error::LocalError;
use crate::eval::tensor_error::local_error::{LocalModel, LocalSums, Target, unranked_tensors};
use crate::eval::tensor_error::observed_batches::ObservedBatches;
use crate::eval::tensor_error::tensor_order::{in_graph_order, unquantized};
pub use crate::eval::tensor_error::tensor_pass::{FloatPass, FloatRun, FloatTensors};
use crate::eval::tensor_error::tensor_pass::{
    FloatSide, Outputs, Views, observing_session, views, views_bytes,
};
pub use crate::eval::tensor_error::weight_error::WeightError;
use crate::eval::tensor_error::weight_error::{input_channel_fit, weight_errors};
use crate::jobs::{JobContext, RateMeter};
use crate::model::ops;
use crate::model::{Graph, Model, Node, NodeId};
use crate::quant::rescaled::{ChannelFactors, factors_in, rescaled_in};
use crate::runtime::value::owned_inputs;
use crate::runtime::{EpSpec, Runtime};
use crate::util::sqnr_db;

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

/// Everything the per-tensor comparison found.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TensorErrors {
    /// Activations, in the float graph's order.
    pub activations: Vec<ActivationError>,
    /// Weights, by name.
    pub weights: Vec<WeightError>,
    /// Q/DQ pairs whose float tensor could not be found.
    pub unmatched: Vec<String>,
    /// Layers whose weight alone is quantized (int4 weight-only: no Q/DQ on their
    /// activations), in the float graph's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layers: Vec<LayerError>,
    /// The local error of every measured tensor (its producer's own quantization, with float
    /// inputs), in the float graph's order: where `activations` and `layers` give the
    /// cumulative error, this tells the node that causes an error from those that carry it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub local: Vec<LocalError>,
    /// Why the local errors could not be measured, when they could not (a QDQ model from
    /// another tool that cannot be cut; the cumulative errors stand).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_unavailable: Option<String>,
    /// Activations the quantizer rescaled on purpose (equalization, AWQ, SmoothQuant) without
    /// recording by how much (QDQ models of older versions): they differ from the float
    /// model's by design, so they are not measured. (Recorded ones are measured against the
    /// float tensor at the QDQ model's scale.)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rescaled: Vec<String>,
}

/// Error of a layer whose weight alone is quantized: its output in the QDQ model (everything
/// upstream quantized too) against the float model's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayerError {
    /// The node's name.
    pub node: String,
    /// Its output, named alike in both models.
    pub tensor: String,
    /// Its weight in the float model (the initializer the float node of the same name reads).
    pub weight: Option<String>,
    /// SQNR (dB) of the float model's output against the quantized model's.
    pub sqnr_db: f64,
}

/// Which error of a tensor: what a view of the per-tensor errors shows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// Float against QDQ: everything upstream quantized too (where the error shows).
    #[default]
    Cumulative,
    /// The producing node's own quantization, with float inputs (where the error is made).
    Local,
}

impl ErrorKind {
    /// A short label for a switch.
    pub fn label(self) -> &'static str {
        match self {
            ErrorKind::Cumulative => "Cumulative",
            ErrorKind::Local => "Local",
        }
    }

    /// What the figure means, for a tooltip or a legend.
    pub fn meaning(self) -> &'static str {
        match self {
            ErrorKind::Cumulative => {
                "Float vs QDQ: the error as it has built up by this tensor, everything upstream quantized too"
            }
            ErrorKind::Local => {
                "This node's own quantization alone, with float inputs: a low figure marks the node that makes an error"
            }
        }
    }
}

impl TensorErrors {
    /// The SQNR of every measured tensor of `kind`.
    pub fn sqnr_of(&self, kind: ErrorKind) -> Box<dyn Iterator<Item = (&str, f64)> + '_> {
        match kind {
            ErrorKind::Cumulative => Box::new(self.tensor_sqnr()),
            ErrorKind::Local => Box::new(self.tensor_local_sqnr()),
        }
    }

    /// The cumulative float-vs-quantized SQNR of every measured tensor: quantized activations
    /// and the outputs of weight-only quantized layers.
    pub fn tensor_sqnr(&self) -> impl Iterator<Item = (&str, f64)> {
        self.activations
            .iter()
            .map(|a| (a.tensor.as_str(), a.xmodel_sqnr_db))
            .chain(self.layers.iter().map(|l| (l.tensor.as_str(), l.sqnr_db)))
    }

    /// The local SQNR of every measured tensor (see [`LocalError`]).
    pub fn tensor_local_sqnr(&self) -> impl Iterator<Item = (&str, f64)> {
        self.local.iter().map(|l| (l.tensor.as_str(), l.sqnr_db))
    }

    /// The local SQNR of `tensor`, when measured.
    pub fn local_of(&self, tensor: &str) -> Option<f64> {
        self.local
            .iter()
            .find(|l| l.tensor == tensor)
            .map(|l| l.sqnr_db)
    }

    /// The error of the weight of the weight-only layer `node`, when both were measured.
    pub fn weight_of(&self, node: &str) -> Option<&WeightError> {
        let layer = self.layers.iter().find(|l| l.node == node)?;
        let weight = layer.weight.as_deref()?;
        self.weights.iter().find(|w| w.weight == weight)
    }
}

/// The nodes of `quant` whose weight alone is dequantized (MatMulNBits, or a MatMul/Gemm/Conv
/// reading a DequantizeLinear of a constant while its activation is not dequantized) and whose
/// output the float graph has under the same name: (node, output, the float node's weight).
fn weight_only_layers(
    quant: &Graph,
    float: &Graph,
    covered: &HashSet<&str>,
) -> Vec<(String, String, Option<String>)> {
    let dequantized = |t: &str, constant: bool| {
        quant
            .producer_of(t)
            .filter(|n| n.op_type == ops::DEQUANTIZE_LINEAR)
            .is_some_and(|dq| {
                let source = quant.tensor(&dq.inputs[0]);
                let from_constant = source.is_some_and(|s| {
                    s.producer
                        .is_none_or(|p| quant.node(p).op_type == ops::QUANTIZE_LINEAR)
                        && !matches!(s.kind, crate::model::TensorKind::Input)
                });
                from_constant == constant
            })
    };
    quant
        .nodes()
        .iter()
        .filter(|n| {
            n.op_type == ops::MAT_MUL_N_BITS
                || (matches!(n.op_type.as_str(), ops::MAT_MUL | ops::GEMM | ops::CONV)
                    && n.inputs.iter().skip(1).any(|t| dequantized(t, true))
                    && !n.inputs.first().is_some_and(|t| dequantized(t, false)))
        })
        .filter_map(|n| {
            let out = layer_output(quant, float, n)?;
            let weight = float.node_by_name(&n.name).and_then(|f| {
                f.inputs
                    .iter()
                    .skip(1)
                    .find(|t| {
                        use crate::model::TensorKind::{Constant, Initializer};
                        float
                            .tensor(t)
                            .is_some_and(|t| matches!(t.kind, Initializer | Constant))
                    })
                    .cloned()
            });
            (!covered.contains(out.as_str())).then(|| (n.name.clone(), out.clone(), weight))
        })
        .collect()
}

/// The tensor of both models that the QDQ model's layer `n` computes: its output, or where
/// int4 rewrote a Gemm as a MatMul of its name and an Add of its bias, the Add's output (the
/// float Gemm's).
fn layer_output<'g>(quant: &Graph, float: &'g Graph, n: &Node) -> Option<&'g String> {
    let out = n.outputs.first()?;
    if let Some(tensor) = float.tensor(out) {
        return Some(&tensor.name);
    }
    let gemm_output = float.node_by_name(&n.name)?.outputs.first()?;
    quant
        .producer_of(gemm_output)
        .is_some_and(|add| add.op_type == ops::ADD && add.inputs.contains(out))
        .then_some(gemm_output)
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
    /// The QuantizeLinear and the DequantizeLinear.
    q: NodeId,
    dq: NodeId,
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

/// Finds the activation Q/DQ pairs of a QDQ model and the float tensors they stand for.
fn pairs(quant_model: &Model, quant: &Graph, float: &Graph) -> (Vec<Pair>, Vec<String>) {
    let mut found = Vec::new();
    let mut unmatched = Vec::new();
    for q in quant
        .nodes()
        .iter()
        .filter(|n| n.op_type == ops::QUANTIZE_LINEAR)
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
            .find(|n| n.op_type == ops::DEQUANTIZE_LINEAR)
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
                    q: q.id,
                    dq: dq.id,
                })
            }
            None => unmatched.push(pre),
        }
    }
    (found, unmatched)
}

/// The distinct names of `names`.
fn unique(names: impl Iterator<Item = String>) -> Vec<String> {
    names.collect::<HashSet<_>>().into_iter().collect()
}

/// Running sums over the batches seen: per Q/DQ pair (qdq signal², qdq noise², xmodel
/// signal², xmodel noise², values outside the range, values seen) with the float values'
/// histogram, and per weight-only layer (signal², noise²).
struct Sums<'a> {
    pairs: &'a [Pair],
    layers: &'a [(String, String, Option<String>)],
    pair_sums: Vec<[f64; 6]>,
    layer_sums: Vec<[f64; 2]>,
    histograms: Vec<Histogram>,
}

impl<'a> Sums<'a> {
    fn new(pairs: &'a [Pair], layers: &'a [(String, String, Option<String>)]) -> Self {
        Sums {
            pairs,
            layers,
            pair_sums: vec![[0f64; 6]; pairs.len()],
            layer_sums: vec![[0f64; 2]; layers.len()],
            histograms: vec![Histogram::new(HISTOGRAM_BINS); pairs.len()],
        }
    }

    /// Adds one batch: `f` the float model's tensors, `scaled` those of them the quantizer
    /// rescaled, at the QDQ model's scale ([`at_qdq_scale`]), `q` the QDQ model's.
    fn add(&mut self, f: &Views, scaled: &Outputs, q: &Views) {
        let float = |name: &str| {
            scaled
                .get(name)
                .map(|a| a.view())
                .or_else(|| f.get(name).map(|a| a.view()))
        };
        self.pair_sums
            .par_iter_mut()
            .zip(self.histograms.par_iter_mut())
            .zip(self.pairs.par_iter())
            .for_each(|((s, h), p)| add_pair(s, h, p, float(&p.float), q));
        self.layer_sums
            .par_iter_mut()
            .zip(self.layers.par_iter())
            .for_each(|(s, (_, tensor, _))| {
                let (Some(reference), Some(test)) = (float(tensor), q.get(tensor)) else {
                    return;
                };
                if reference.len() == test.len() {
                    let [signal, noise] = array_sums(&reference, &test.view());
                    s[0] += signal;
                    s[1] += noise;
                }
            });
    }
}

/// The float tensors of `f` that `factors` names, at the QDQ model's scale.
fn at_qdq_scale(f: &Views, factors: &HashMap<String, ChannelFactors>) -> Outputs {
    factors
        .iter()
        .filter_map(|(name, factors)| Some((name.clone(), factors.apply(&f.get(name)?.view())?)))
        .collect()
}

/// Adds one batch of one Q/DQ pair to its sums and histogram (see [`Sums`]): `float` is the
/// float model's tensor (at the QDQ model's scale), `q` the QDQ model's tensors.
fn add_pair(
    s: &mut [f64; 6],
    h: &mut Histogram,
    p: &Pair,
    float: Option<ndarray::ArrayViewD<f32>>,
    q: &Views,
) {
    let (Some(pre), Some(post)) = (q.get(&p.pre), q.get(&p.post)) else {
        return;
    };
    let post = post.view();
    if pre.len() == post.len() {
        let [signal, noise] = array_sums(&pre.view(), &post);
        s[0] += signal;
        s[1] += noise;
    }
    let Some(reference) = float.filter(|r| r.len() == post.len()) else {
        return;
    };
    // One vectorized scan gives the histogram its range and says whether any value can lie
    // outside the pair's.
    let values = reference.as_slice();
    let summary = values.map(BatchSummary::of);
    if let (Some(values), Some(summary)) = (values, summary) {
        let abs_max = match summary.count {
            0 => 0.0,
            _ => summary.min.abs().max(summary.max.abs()),
        };
        h.add_summarized(values, abs_max, summary.count == values.len() as u64);
    }
    if let Some((lo, hi, half_step)) = p
        .range
        .map(|(lo, hi)| (lo, hi, (hi - lo) / (2.0 * p.levels.max(1) as f32)))
    {
        // Within half a step of an end a value rounds to the end as any other value rounds:
        // only beyond it is it clipped.
        let (below, above) = (lo - half_step, hi + half_step);
        let clipped = |v: f32| usize::from(v < below || v > above);
        s[4] += match (values, summary) {
            (_, Some(summary))
                if summary.inf == 0 && summary.min >= below && summary.max <= above =>
            {
                0
            }
            (Some(values), _) => values.iter().map(|&v| clipped(v)).sum::<usize>(),
            (None, _) => reference.iter().map(|&v| clipped(v)).sum::<usize>(),
        } as f64;
        s[5] += reference.len() as f64;
    }
    let [signal, noise] = array_sums(&reference, &post);
    s[2] += signal;
    s[3] += noise;
}

/// Runs both models on `source` with every matched tensor exposed and accumulates the errors.
/// The float model's activations are captured first when that costs less memory than its
/// session beside the quantized one (see [`crate::eval::tensor_error::tensor_pass`]).
pub fn tensor_errors(
    float: &Model,
    quant: &Model,
    source: &mut dyn BatchSource,
    runtime: &Runtime,
    eps: &[EpSpec],
    batch_size: usize,
    ctx: &JobContext,
) -> Result<TensorErrors, EvalError> {
    crate::eval::compare::check_comparable(float, quant, "the quantized model")?;
    let run = |run: FloatRun<'_>, source: &mut dyn BatchSource| {
        let float = Float { model: float, run };
        tensor_errors_against(float, quant, source, runtime, eps, batch_size, ctx)
    };
    match FloatTensors::capture(float, source, runtime, eps, batch_size, ctx)? {
        FloatPass::Captured(tensors) => run(FloatRun::Captured(&tensors), source),
        FloatPass::Declined(session) => run(FloatRun::Session(session), source),
    }
}

/// The float model of a per-tensor comparison, and how its activations are had.
pub struct Float<'a> {
    /// The float model.
    pub model: &'a Model,
    /// Its activations, captured before or to be run.
    pub run: FloatRun<'a>,
}

/// [`tensor_errors`] against float activations captured before (the float model then does
/// not run at all), or running the float model beside the quantized one. Then the local
/// errors, in a pass of their own (see [`crate::eval::tensor_error::local_error`]) once the sessions of the
/// first are closed.
pub fn tensor_errors_against(
    float: Float<'_>,
    quant: &Model,
    source: &mut dyn BatchSource,
    runtime: &Runtime,
    eps: &[EpSpec],
    batch_size: usize,
    ctx: &JobContext,
) -> Result<TensorErrors, EvalError> {
    let Float { model: float, run } = float;
    crate::eval::compare::check_comparable(float, quant, "the quantized model")?;
    let (fg, qg) = (Graph::build(float), Graph::build(quant));
    let measured = measured(quant, &qg, &fg);
    let Measured {
        pairs,
        layers,
        factors,
        ..
    } = &measured;
    let float_names = unique(
        pairs
            .iter()
            .map(|p| p.float.clone())
            .chain(layers.iter().map(|(_, t, _)| t.clone())),
    );
    let quant_names = unique(
        pairs
            .iter()
            .flat_map(|p| [p.pre.clone(), p.post.clone()])
            .chain(layers.iter().map(|(_, t, _)| t.clone())),
    );
    let batch_size = batch_size.max(1);
    let (mut float_side, mut batches) = match run {
        FloatRun::Captured(tensors) if tensors.fits(batch_size) => {
            (FloatSide::Captured(tensors, 0), tensors.batches())
        }
        FloatRun::Session(session) => (
            FloatSide::Live(session),
            ObservedBatches::new(float, batch_size),
        ),
        _ => (
            FloatSide::Live(observing_session(
                float,
                &float_names,
                &*source,
                runtime,
                eps,
                "float",
            )?),
            ObservedBatches::new(float, batch_size),
        ),
    };
    let mut quant_session =
        observing_session(quant, &quant_names, &*source, runtime, eps, "quantized")?;
    let mut sums = Sums::new(pairs, layers);
    each_batch(
        source,
        &mut batches,
        ctx,
        "per-tensor error",
        |owned, index| {
            let ran = crate::eval::tensor_error::tensor_pass::run(
                &mut quant_session,
                owned,
                index,
                "quantized",
            )?;
            let q = views(&ran, owned, &quant_names);
            float_side.with_next(owned, &float_names, index, |f| {
                sums.add(f, &at_qdq_scale(f, factors), &q);
                views_bytes(f) + views_bytes(&q)
            })
        },
    )?;
    drop((quant_session, float_side));
    let order = float_order(&fg);
    let mut errors = sums.finish(&order);
    let plan = local_targets(&measured, (float, &fg, quant, &qg))?;
    let local = match local_model(float, &fg, quant, &qg, &plan, source, runtime, eps) {
        Ok(local) => match local_pass(&local, source, runtime, eps, batch_size, ctx) {
            Ok(sums) => Ok(sums.finish(&order)),
            Err(EvalError::Cancelled) => return Err(EvalError::Cancelled),
            Err(e) => Err(e.to_string()),
        },
        Err(e) => Err(e.to_string()),
    };
    // The cumulative errors stand without the local ones: a model pair that cannot be
    // measured locally says why.
    match local {
        Ok(local) => errors.local = local,
        Err(reason) => errors.local_unavailable = Some(reason),
    }
    errors.weights = weight_errors(quant, &qg, float, &fg, &measured.factors)?;
    let Measured {
        unmatched,
        rescaled,
        factors,
        ..
    } = measured;
    errors.unmatched = unmatched;
    errors.rescaled = rescaled
        .into_iter()
        .filter(|t| !factors.contains_key(t))
        .filter(|t| fg.tensor(t).is_some_and(|t| t.producer.is_some()))
        .collect();
    Ok(errors)
}

/// The local error of every tensor `compare --per_tensor` measures, alone: one pass of the
/// local model (see [`crate::eval::tensor_error::local_error`]).
pub fn local_errors(
    float: &Model,
    quant: &Model,
    source: &mut dyn BatchSource,
    runtime: &Runtime,
    eps: &[EpSpec],
    batch_size: usize,
    ctx: &JobContext,
) -> Result<Vec<LocalError>, EvalError> {
    crate::eval::compare::check_comparable(float, quant, "the quantized model")?;
    let (fg, qg) = (Graph::build(float), Graph::build(quant));
    let started = std::time::Instant::now();
    let plan = local_targets(&measured(quant, &qg, &fg), (float, &fg, quant, &qg))?;
    let local = local_model(float, &fg, quant, &qg, &plan, source, runtime, eps)?;
    tracing::debug!(
        "local model built in {:.2} s",
        started.elapsed().as_secs_f64()
    );
    let started = std::time::Instant::now();
    let sums = local_pass(&local, source, runtime, eps, batch_size.max(1), ctx)?;
    tracing::debug!("local pass in {:.2} s", started.elapsed().as_secs_f64());
    Ok(sums.finish(&float_order(&fg)))
}

/// What a per-tensor comparison measures in a QDQ model: its activation Q/DQ pairs (and those
/// it could not match to a float tensor, other than those made on purpose) and its
/// weight-only layers.
struct Measured {
    pairs: Vec<Pair>,
    unmatched: Vec<String>,
    layers: Vec<(String, String, Option<String>)>,
    /// The activations the quantizer rescaled on purpose ([`rescaled_in`]).
    rescaled: BTreeSet<String>,
    /// The factors it recorded for them ([`factors_in`]).
    factors: HashMap<String, ChannelFactors>,
}

/// Finds what [`Measured`] holds. The tensors the quantizer rescaled on purpose
/// ([`rescaled_in`]: equalization, AWQ, SmoothQuant) differ from the float model's by design,
/// not by error: those whose factors it recorded are measured against the float tensor at
/// the QDQ model's scale, the others (older QDQ models) are not measured.
fn measured(quant: &Model, qg: &Graph, fg: &Graph) -> Measured {
    let rescaled = rescaled_in(quant);
    let factors = factors_in(quant);
    let unknown = |t: &String| rescaled.contains(t) && !factors.contains_key(t);
    let (mut pairs, mut unmatched) = pairs(quant, qg, fg);
    pairs.retain(|p| !unknown(&p.float));
    // A tensor the quantizer made on purpose (a ReLU6's Clip output once equalization moved
    // its bound into a Min) has no float twin to be matched with.
    unmatched.retain(|t| !rescaled.contains(t.trim_end_matches("_QuantizeLinear_Input")));
    let covered: HashSet<&str> = pairs.iter().map(|p| p.float.as_str()).collect();
    let mut layers = weight_only_layers(qg, fg, &covered);
    layers.retain(|(_, tensor, _)| !unknown(tensor));
    Measured {
        pairs,
        unmatched,
        layers,
        rescaled,
        factors,
    }
}

/// The local model of `plan` (see [`LocalModel::build`]); when raising the float model's
/// opset needs tensor ranks the graph does not give, they are read from one run of the float
/// model on the first batch of `source`.
#[allow(clippy::too_many_arguments)]
fn local_model(
    float: &Model,
    fg: &Graph,
    quant: &Model,
    qg: &Graph,
    plan: &LocalPlan,
    source: &mut dyn BatchSource,
    runtime: &Runtime,
    eps: &[EpSpec],
) -> Result<LocalModel, EvalError> {
    let unranked = unranked_tensors(float, fg, quant);
    let ranks = match unranked.is_empty() {
        true => HashMap::new(),
        false => observed_ranks(float, &unranked, source, runtime, eps)?,
    };
    let ranks = |t: &str| ranks.get(t).copied();
    let models = (float, fg, quant, qg);
    let rescaled = (&plan.input_scales, &plan.recomputed);
    let shapes = sample_shapes(source);
    Ok(LocalModel::build(
        models,
        &plan.targets,
        rescaled,
        &ranks,
        &shapes,
    )?)
}

/// The rank of each of `names` (float activations of `float`) on the first sample of `source`.
fn observed_ranks(
    float: &Model,
    names: &[String],
    source: &mut dyn BatchSource,
    runtime: &Runtime,
    eps: &[EpSpec],
) -> Result<HashMap<String, usize>, EvalError> {
    let mut session = observing_session(float, names, &*source, runtime, eps, "float")?;
    source.rewind()?;
    let Some(batch) = source.next_batch(1)? else {
        return Ok(HashMap::new());
    };
    let owned = owned_inputs(batch.inputs)?;
    let outputs =
        crate::eval::tensor_error::tensor_pass::run(&mut session, &owned, batch.index, "float")?;
    // The rank from each value's type: no tensor is read, let alone converted to f32.
    let outputs = crate::runtime::value::NamedOutputs::new(&outputs);
    Ok(names
        .iter()
        .filter_map(|name| {
            let value = outputs
                .get(name)
                .or_else(|| crate::eval::tensor_error::tensor_pass::fed(&owned, name))?;
            let shape = value.dtype().tensor_shape()?;
            Some((name.clone(), shape.len()))
        })
        .collect())
}

/// What the local model measures, and how its copies read the activations the quantizer
/// rescaled on purpose.
struct LocalPlan {
    targets: Vec<Target>,
    /// Per rescaled activation a copy reads or a target is: the factor per channel taking
    /// the float tensor to the QDQ model's scale (recorded by the quantizer, else fitted).
    input_scales: HashMap<String, ChannelFactors>,
    /// Rescaled activations the copies recompute with their producer's QDQ-model constants.
    recomputed: HashSet<String>,
}

/// The tensors whose local error is measured: every Q/DQ pair and weight-only layer, except
/// those whose node reads a `rescaled` activation it cannot be given at the QDQ model's scale.
/// The quantizer records the factors of what it rescaled (`measured.factors`): the float tensor
/// times those is the QDQ model's, exactly. For a QDQ model without the record, such an
/// activation is recomputed by a copy of its producer when only the producer's constants
/// differ ([`recomputable`]: a norm AWQ or SmoothQuant divided); else, when the layers
/// reading it multiply it by 8-bit weights whose rows the quantizer multiplied (equalization
/// of dense layers, SmoothQuant), the float tensor is divided by the factors fitted from
/// those weights ([`input_channel_fit`]).
fn local_targets(
    measured: &Measured,
    models: (&Model, &Graph, &Model, &Graph),
) -> Result<LocalPlan, EvalError> {
    let Measured {
        pairs,
        layers,
        rescaled,
        factors: recorded,
        ..
    } = measured;
    let (_, _, _, qg) = models;
    let candidates: Vec<Target> = pairs
        .iter()
        .map(|p| Target::Pair {
            float: p.float.clone(),
            q: p.q,
            dq: p.dq,
        })
        .chain(layers.iter().map(|(_, t, _)| Target::Output(t.clone())))
        .collect();
    // Each candidate's node and the rescaled activations it reads.
    let readers: Vec<(Option<&Node>, Vec<&str>)> = candidates
        .iter()
        .map(|target| {
            // For a pair, the node computing what its QuantizeLinear reads (a graph output's
            // pair is written by its DequantizeLinear).
            let computed = match target {
                Target::Pair { q, .. } => qg.node(*q).inputs.first().map(String::as_str),
                Target::Output(name) => Some(name.as_str()),
            };
            let reader = computed.and_then(|t| qg.producer_of(t));
            let read = reader
                .map(|n| n.inputs.iter().map(|i| unquantized(qg, i)))
                .into_iter()
                .flatten()
                .filter(|i| rescaled.contains(*i) && !recorded.contains_key(*i))
                .collect();
            (reader, read)
        })
        .collect();
    // Rescaled activations a copy of their producer recomputes exactly.
    let mut recomputed = HashSet::new();
    for tensor in readers.iter().flat_map(|(_, read)| read) {
        if !recomputed.contains(*tensor) && recomputable(tensor, models, rescaled)? {
            recomputed.insert((*tensor).to_owned());
        }
    }
    let mut input_scales = fitted_scales(&readers, &recomputed, models)?;
    input_scales.extend(recorded.iter().map(|(t, f)| (t.clone(), f.clone())));
    let targets = candidates
        .into_iter()
        .zip(&readers)
        .filter(|(_, (_, read))| {
            read.iter()
                .all(|i| recomputed.contains(*i) || input_scales.contains_key(*i))
        })
        .map(|(target, _)| target)
        .collect();
    Ok(LocalPlan {
        targets,
        input_scales,
        recomputed,
    })
}

/// For the rescaled activations of `readers` (each candidate's node and what it reads) not
/// `recomputed`: the factor per channel taking the float tensor to the QDQ model's scale, one
/// least-squares fit over the weights of every layer reading it ([`input_channel_fit`]).
fn fitted_scales(
    readers: &[(Option<&Node>, Vec<&str>)],
    recomputed: &HashSet<String>,
    models: (&Model, &Graph, &Model, &Graph),
) -> Result<HashMap<String, ChannelFactors>, EvalError> {
    let (float, fg, quant, qg) = models;
    let mut fits: HashMap<&str, Vec<(f64, f64)>> = HashMap::new();
    for (reader, read) in readers {
        let read: Vec<&str> = read
            .iter()
            .copied()
            .filter(|t| !recomputed.contains(*t))
            .collect();
        let Some(reader) = reader.filter(|_| !read.is_empty()) else {
            continue;
        };
        let Some(fit) = input_channel_fit(quant, qg, float, fg, reader)? else {
            continue;
        };
        for input in read {
            let sums = fits
                .entry(input)
                .or_insert_with(|| vec![(0.0, 0.0); fit.len()]);
            if sums.len() == fit.len() {
                for (sum, (n, d)) in sums.iter_mut().zip(&fit) {
                    *sum = (sum.0 + n, sum.1 + d);
                }
            }
        }
    }
    Ok(fits
        .into_iter()
        .filter_map(|(tensor, sums)| {
            let inverse: Vec<f32> = sums.iter().map(|(n, d)| (d / n) as f32).collect();
            inverse
                .iter()
                .all(|v| v.is_finite() && *v > 0.0)
                .then(|| (tensor.to_owned(), ChannelFactors::new(inverse, 0)))
        })
        .collect())
}

/// Whether the QDQ model computes the rescaled activation `tensor` from the float model's own
/// activations by a node that differs from the float model's only in constants (a norm whose
/// scale and bias AWQ or SmoothQuant divided): a copy of that node reading the float
/// activations gives it at the QDQ model's scale, exactly. Each activation it reads must be
/// written by a node the two models share unchanged, so that it is not itself rescaled (the
/// product inside a norm built of Mul and Add, whose scale was divided too).
fn recomputable(
    tensor: &str,
    models: (&Model, &Graph, &Model, &Graph),
    rescaled: &BTreeSet<String>,
) -> Result<bool, EvalError> {
    let (_, fg, _, qg) = models;
    let (Some(q), Some(f)) = (qg.producer_of(tensor), fg.producer_of(tensor)) else {
        return Ok(false);
    };
    let Some(divided) = differing_constants(q, f, models)? else {
        return Ok(false);
    };
    for input in q.inputs.iter().filter(|i| !qg.is_constant(i)) {
        if rescaled.contains(input) {
            return Ok(false);
        }
        let (Some(qp), Some(fp)) = (qg.producer_of(input), fg.producer_of(input)) else {
            // A graph input: the same in both models.
            continue;
        };
        if differing_constants(qp, fp, models)? != Some(false) {
            return Ok(false);
        }
    }
    Ok(divided)
}

/// For a QDQ-model node `q` and the float model's node `f` of the same output: `None` when
/// they differ in op, attributes or activation inputs (names, or read through a Q/DQ pair),
/// else whether some constant input differs in value.
fn differing_constants(
    q: &Node,
    f: &Node,
    models: (&Model, &Graph, &Model, &Graph),
) -> Result<Option<bool>, EvalError> {
    let (float, fg, quant, qg) = models;
    if q.op_type != f.op_type || q.inputs.len() != f.inputs.len() || q.attributes != f.attributes {
        return Ok(None);
    }
    let mut differ = false;
    for (qi, fi) in q.inputs.iter().zip(&f.inputs) {
        match (qg.is_constant(qi), fg.is_constant(fi)) {
            (true, true) => {
                let (a, b) = (quant.weight(qi)?, float.weight(fi)?);
                differ |= a.map(|a| a.to_f32()) != b.map(|b| b.to_f32());
            }
            (false, false) if qi == fi && unquantized(qg, qi) == qi => {}
            _ => return Ok(None),
        }
    }
    Ok(Some(differ))
}

/// The local model's pass over `source`: its sessions ([`LocalModel::workers`], no more
/// than there are batches) run on every batch, the batches' sums added in batch order.
fn local_pass(
    local: &LocalModel,
    source: &mut dyn BatchSource,
    runtime: &Runtime,
    eps: &[EpSpec],
    batch_size: usize,
    ctx: &JobContext,
) -> Result<LocalSums, EvalError> {
    let mut sums = local.sums();
    // Nothing to measure (no quantized node's copy could be made): no run either, as a
    // session asked for no output refuses to run.
    if local.is_empty() {
        return Ok(sums);
    }
    let workers = local
        .workers(eps)
        .min(source.samples().div_ceil(batch_size).max(1));
    let threads = if workers > 1 { 1 } else { 0 };
    if workers > 1 {
        crate::eval::tensor_error::error_sums::register(runtime)?;
    }
    each_batch_on_workers(
        source,
        batch_size,
        workers,
        ctx,
        "local error",
        || {
            let started = std::time::Instant::now();
            let session = local.session(runtime, eps, threads);
            tracing::debug!(
                "local session opened in {:.2} s",
                started.elapsed().as_secs_f64()
            );
            session
        },
        |session, batch| local.run(session, &owned_inputs(batch.inputs)?, batch.index),
        |batch| sums.add(&batch),
    )?;
    Ok(sums)
}

/// Each output of the float graph's nodes and the node's place in its topological order.
fn float_order(fg: &Graph) -> HashMap<&str, usize> {
    fg.topological_order()
        .iter()
        .enumerate()
        .flat_map(|(i, &id)| fg.node(id).outputs.iter().map(move |o| (o.as_str(), i)))
        .collect()
}

/// Calls `step` with every batch of `source` (its inputs and index) from the first, each of
/// the samples `batches` gives it (`step` returns the bytes the batch exposed, which fit the
/// next), reporting progress as `label`; cancellable between batches.
fn each_batch(
    source: &mut dyn BatchSource,
    batches: &mut ObservedBatches,
    ctx: &JobContext,
    label: &str,
    mut step: impl FnMut(&[(String, ort::value::DynValue)], usize) -> Result<u64, EvalError>,
) -> Result<(), EvalError> {
    let meter = RateMeter::new(label, source.samples() as u64);
    let mut done = 0;
    source.rewind()?;
    while let Some(batch) = source.next_batch(batches.next_size())? {
        ctx.checkpoint().map_err(|_| EvalError::Cancelled)?;
        let (index, samples) = (batch.index, batch.samples);
        let owned = owned_inputs(batch.inputs)?;
        let exposed = step(&owned, index)?;
        batches.ran(samples, exposed);
        done += samples;
        ctx.report(meter.progress(done as u64, format!("batch {}", index + 1)));
    }
    Ok(())
}

impl Sums<'_> {
    /// The errors the sums give, in the float graph's order (`order`); weights, unmatched
    /// pairs and local errors are left for the caller.
    fn finish(self, order: &HashMap<&str, usize>) -> TensorErrors {
        let Sums {
            pairs,
            layers,
            pair_sums,
            layer_sums,
            histograms,
        } = self;
        let mut activations: Vec<ActivationError> = pairs
            .iter()
            .zip(&pair_sums)
            .zip(histograms)
            .map(|((p, s), h)| ActivationError {
                tensor: p.float.clone(),
                qdq_sqnr_db: sqnr_db(s[0], s[1]),
                xmodel_sqnr_db: sqnr_db(s[2], s[3]),
                range: p.range,
                clipped: (s[5] > 0.0).then(|| s[4] / s[5]),
                histogram: (h.total() > 0).then_some(h),
            })
            .collect();
        in_graph_order(&mut activations, order, |a| &a.tensor);
        let mut layers: Vec<LayerError> = layers
            .iter()
            .zip(layer_sums)
            .filter(|(_, s)| s[0] > 0.0 || s[1] > 0.0)
            .map(|((node, tensor, weight), s)| LayerError {
                node: node.clone(),
                tensor: tensor.clone(),
                weight: weight.clone(),
                sqnr_db: sqnr_db(s[0], s[1]),
            })
            .collect();
        layers.sort_by_key(|l| order.get(l.tensor.as_str()).copied().unwrap_or(0));
        TensorErrors {
            activations,
            layers,
            ..TensorErrors::default()
        }
    }
}
