//! Layer-wise range choice, measured: for each candidate activation (see
//! [`crate::quant::layerwise`]) and each range method, the float model gets a branch that
//! quantizes the activation with that method's scale and zero point and feeds a copy of every
//! node reading it; the squared difference between each copy's outputs and the float
//! outputs is summed inside the graph (`ReduceSumSquare`, one scalar per branch and output).
//! One session over the calibration data then gives every activation's error under every
//! method at once, the error each would cause where it is used: a range that clips a few
//! values a Conv amplifies loses to one that keeps them, a range wasted on outliers a Relu
//! throws away loses to one that clips them.
//!
//! Nodes holding subgraphs are not copied; an activation read only by such nodes, or a graph
//! output, is measured on itself.

use std::collections::HashMap;

use crate::calib::data::BatchSource;
use crate::calib::range::RangeMethod;
use crate::calib::stats::RangeChoice;
use crate::jobs::{JobContext, RateMeter};
use crate::model::builder::value_info;
use crate::model::infer::elem_types;
use crate::model::proto::{ModelProto, NodeProto};
use crate::model::{DataType, Graph, Model, SessionModel};
use crate::quant::layerwise::Candidate;
use crate::quant::rewrite::{node, scale_tensor, zero_point_tensor};
use crate::recipe::QuantType;
use crate::runtime::value::owned_inputs;
use crate::runtime::{EpSpec, Runtime, SessionOptions};

use crate::eval::compare::EvalError;

/// The suffix of every name the probe model adds.
const SUFFIX: &str = "__qdq_studio_range";

/// The error outputs of one (activation, method) branch.
struct Branch {
    candidate: usize,
    option: usize,
    outputs: Vec<String>,
}

/// The float model with one branch per activation and method.
struct ProbeModel {
    encoded: SessionModel,
    branches: Vec<Branch>,
    outputs: Vec<String>,
}

/// True when `node` holds a subgraph (If, Loop, Scan): it is not copied.
fn has_subgraph(node: &NodeProto) -> bool {
    node.attribute
        .iter()
        .any(|a| a.g.is_some() || !a.graphs.is_empty())
}

/// The Q/DQ pair, the copies of `readers` and the error sums of one branch; returns the
/// branch's scalar outputs.
fn branch(
    proto: &mut ModelProto,
    graph: &Graph,
    float32: &dyn Fn(&str) -> bool,
    candidate: &Candidate,
    option: usize,
    prefix: &str,
) -> Vec<String> {
    let tensor = &candidate.tensor;
    let (_, params) = candidate.options[option];
    let info = graph.tensor(tensor);
    let is_output = info.is_some_and(|t| t.is_output);
    let readers: Vec<NodeProto> = info
        .map(|t| t.consumers.as_slice())
        .unwrap_or_default()
        .iter()
        .filter_map(|id| proto.graph.as_ref()?.node.get(id.0).cloned())
        .filter(|n| !has_subgraph(n))
        .collect();
    let Some(g) = proto.graph.as_mut() else {
        return Vec::new();
    };
    let (scale, zero_point) = (format!("{prefix}_scale"), format!("{prefix}_zero_point"));
    g.initializer
        .push(scale_tensor(&scale, &[params], None, DataType::Float32));
    g.initializer.push(zero_point_tensor(
        &zero_point,
        &[params],
        candidate.qtype,
        None,
    ));
    let (quantized, dequantized) = (format!("{prefix}_q"), format!("{prefix}_dq"));
    g.node.push(node(
        "QuantizeLinear",
        &quantized,
        vec![tensor.clone(), scale.clone(), zero_point.clone()],
        vec![quantized.clone()],
        vec![],
    ));
    g.node.push(node(
        "DequantizeLinear",
        &dequantized,
        vec![quantized, scale, zero_point],
        vec![dequantized.clone()],
        vec![],
    ));
    let mut compared: Vec<(String, String)> = Vec::new();
    for (i, reader) in readers.into_iter().enumerate() {
        let mut copy = reader;
        copy.name = Some(format!("{}{prefix}_{i}", copy.name()));
        for input in &mut copy.input {
            if input == tensor {
                input.clone_from(&dequantized);
            }
        }
        for output in &mut copy.output {
            if output.is_empty() {
                continue;
            }
            let original = output.clone();
            *output = format!("{original}{prefix}_{i}");
            if float32(&original) {
                compared.push((original, output.clone()));
            }
        }
        g.node.push(copy);
    }
    // A graph output is seen as it is, besides through its readers.
    if compared.is_empty() || is_output {
        compared.push((tensor.clone(), dequantized));
    }
    compared
        .into_iter()
        .enumerate()
        .map(|(k, (float, probe))| {
            let diff = format!("{prefix}_diff_{k}");
            let sum = format!("{prefix}_error_{k}");
            g.node.push(node(
                "Sub",
                &diff,
                vec![probe, float],
                vec![diff.clone()],
                vec![],
            ));
            let mut reduce = node(
                "ReduceSumSquare",
                &sum,
                vec![diff],
                vec![sum.clone()],
                vec![],
            );
            reduce
                .attribute
                .push(crate::quant::rewrite::int_attr("keepdims", 0));
            g.node.push(reduce);
            sum
        })
        .collect()
}

/// The probe model over `model` (indexed by `graph`) for `candidates`.
fn probe_model(
    model: &Model,
    graph: &Graph,
    candidates: &[Candidate],
    ranks: &dyn Fn(&str) -> Option<usize>,
) -> Result<ProbeModel, EvalError> {
    let (mut proto, folder) = model.to_session_proto();
    let wide = candidates
        .iter()
        .any(|c| !matches!(c.qtype, QuantType::Uint8 | QuantType::Int8));
    // Q/DQ needs 10; 16-bit Q/DQ 21. No more: a higher opset can be refused (an old
    // Softmax of unknown rank), and the probe's other nodes exist since opset 1.
    let needed = if wide { 21 } else { 10 };
    crate::quant::opset::raise(&mut proto, graph, needed, ranks)
        .map_err(|e| EvalError::RangeChoice(e.to_string()))?;
    let types = elem_types(model, graph);
    let float32 = |t: &str| types.get(t) == Some(&DataType::Float32.to_onnx());
    let mut branches = Vec::new();
    for (c, candidate) in candidates.iter().enumerate() {
        for option in 0..candidate.options.len() {
            let prefix = format!("{SUFFIX}_{c}_{option}");
            let outputs = branch(&mut proto, graph, &float32, candidate, option, &prefix);
            branches.push(Branch {
                candidate: c,
                option,
                outputs,
            });
        }
    }
    let outputs: Vec<String> = branches.iter().flat_map(|b| b.outputs.clone()).collect();
    if let Some(g) = proto.graph.as_mut() {
        g.output = outputs
            .iter()
            .map(|name| value_info(name, DataType::Float32, &[]))
            .collect();
    }
    Ok(ProbeModel {
        encoded: SessionModel::encode(proto, folder)?,
        branches,
        outputs,
    })
}

/// Where the measurement runs and on what.
pub struct Measurement<'a> {
    /// The runtime.
    pub runtime: &'a Runtime,
    /// Execution providers.
    pub eps: &'a [EpSpec],
    /// Samples per run.
    pub batch_size: usize,
    /// The rank of a tensor seen in calibration (for raising the opset where the graph does
    /// not say it).
    pub ranks: &'a dyn Fn(&str) -> Option<usize>,
}

/// Measures every candidate's error under each of its methods over `source` and chooses,
/// for each, the method with the smallest (the first, the recipe's, on a tie).
pub fn choose(
    model: &Model,
    graph: &Graph,
    candidates: &[Candidate],
    source: &mut dyn BatchSource,
    how: &Measurement<'_>,
    ctx: &JobContext,
) -> Result<HashMap<String, RangeChoice>, EvalError> {
    if candidates.is_empty() {
        return Ok(HashMap::new());
    }
    let probe = probe_model(model, graph, candidates, how.ranks)?;
    let mut session =
        how.runtime
            .session_from_model(&probe.encoded, how.eps, SessionOptions::default())?;
    let mut errors = vec![0f64; probe.outputs.len()];
    let meter = RateMeter::new("layer-wise ranges", source.samples() as u64);
    let mut done = 0;
    source.rewind()?;
    while let Some(batch) = source.next_batch(how.batch_size)? {
        ctx.checkpoint().map_err(|_| EvalError::Cancelled)?;
        let owned = owned_inputs(batch.inputs)?;
        let values = crate::eval::compare::run_outputs(
            &mut session,
            &owned,
            &probe.outputs,
            batch.index,
            "probe",
        )?;
        for (sum, value) in errors.iter_mut().zip(&values) {
            if let Some(v) = value.as_ref().and_then(|a| a.iter().next()) {
                *sum += f64::from(*v);
            }
        }
        done += batch.samples;
        ctx.report(meter.progress(done as u64, format!("batch {}", batch.index + 1)));
    }
    Ok(choices(
        candidates,
        &probe.branches,
        &probe.outputs,
        &errors,
    ))
}

/// Each candidate's methods with their summed errors, and the best.
fn choices(
    candidates: &[Candidate],
    branches: &[Branch],
    outputs: &[String],
    errors: &[f64],
) -> HashMap<String, RangeChoice> {
    let error_of: HashMap<&str, f64> = outputs
        .iter()
        .map(String::as_str)
        .zip(errors.iter().copied())
        .collect();
    let mut tried: Vec<Vec<(RangeMethod, f64)>> = vec![Vec::new(); candidates.len()];
    for b in branches {
        let total: f64 = b
            .outputs
            .iter()
            .filter_map(|o| error_of.get(o.as_str()))
            .sum();
        let method = candidates[b.candidate].options[b.option].0;
        // A branch whose error is not a number (a NaN met in the data) cannot win.
        tried[b.candidate].push((
            method,
            if total.is_finite() {
                total
            } else {
                f64::INFINITY
            },
        ));
    }
    candidates
        .iter()
        .zip(tried)
        .filter_map(|(c, errors)| {
            let best = errors
                .iter()
                .fold(None::<&(RangeMethod, f64)>, |best, e| match best {
                    Some(b) if b.1 <= e.1 => Some(b),
                    _ => Some(e),
                })?
                .0;
            Some((
                c.tensor.clone(),
                RangeChoice {
                    method: best,
                    errors,
                },
            ))
        })
        .collect()
}
