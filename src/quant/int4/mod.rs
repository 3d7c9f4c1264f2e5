//! Int4 weight-only methods beyond round-to-nearest: activation-aware scaling (AWQ-lite) and
//! clipping (AWQ-clip), searched per layer on the calibration activations gathered by
//! [`crate::calib::channels`], and ONNX Runtime's `MatMulNBits` output form ([`nbits`]).
//!
//! The searches decide, before the rewrite, a [`WeightTransform`] per weight (row scales,
//! column scales, clipping ratios) and an [`ActivationScale`] per scaled activation (where
//! its division goes); the rewrite applies them while it quantizes, so the float model is
//! never copied.

pub mod blocks;
pub mod choices;
pub mod fold;
pub mod held_out;
pub mod nbits;
pub mod search;

use std::collections::BTreeMap;

use ndarray::{Array2, ArrayView2, Ix2};

use super::QuantError;
use super::plan::{Plan, TensorRole};
use super::prepare::Prepared;
use crate::calib::channels::ChannelStats;
use crate::calib::stats::CalibrationStats;
use crate::jobs::{JobContext, RateMeter};
use crate::model::ops;
use crate::model::{Graph, NodeId};
use crate::recipe::{Int4Method, QuantMode, Recipe};
use blocks::BlockSpec;
pub use choices::{ActivationScale, Int4Choices, Int4Report, WeightTransform};
pub use fold::ScaleSite;

/// Weights that read one activation, searched together.
pub(crate) struct Group {
    /// The activation (input 0 of the readers).
    pub activation: String,
    /// The weights, one per reader.
    pub weights: Vec<String>,
    /// The MatMul/Gemm nodes.
    pub readers: Vec<NodeId>,
}

/// The activation a weight-only MatMul/Gemm multiplies `weight` by, when the search can
/// handle it: the weight is the right-hand side `[k, n]` of one node (MatMul, or Gemm
/// without transposes).
fn searchable(graph: &Graph, weight: &str) -> Option<(String, NodeId)> {
    let t = graph.tensor(weight)?;
    let [reader] = t.consumers.as_slice() else {
        return None;
    };
    let node = graph.node(*reader);
    let plain_gemm = node.op_type == ops::GEMM
        && node.int_attribute("transA").unwrap_or(0) == 0
        && node.int_attribute("transB").unwrap_or(0) == 0;
    let rhs = node.inputs.get(1).is_some_and(|w| w == weight);
    (node.domain.is_empty() && (node.op_type == ops::MAT_MUL || plain_gemm) && rhs)
        .then(|| (node.inputs[0].clone(), *reader))
}

/// The plan's weights that are a MatMul's (or plain Gemm's) `[k, n]` right-hand side, grouped
/// by the activation they multiply (the int4 searches' and SmoothQuant's groups); the second
/// value counts the weights no search can take.
pub(crate) fn groups(graph: &Graph, plan: &Plan) -> (Vec<Group>, usize) {
    let mut by_activation: BTreeMap<String, Group> = BTreeMap::new();
    let mut plain = 0;
    let mut weights: Vec<&String> = plan
        .roles
        .iter()
        .filter(|(_, r)| matches!(r, TensorRole::Weight { .. }))
        .map(|(n, _)| n)
        .collect();
    weights.sort();
    for w in weights {
        match searchable(graph, w) {
            Some((activation, reader)) => {
                let group = by_activation
                    .entry(activation.clone())
                    .or_insert_with(|| Group {
                        activation,
                        weights: Vec::new(),
                        readers: Vec::new(),
                    });
                group.weights.push(w.clone());
                group.readers.push(reader);
            }
            None => plain += 1,
        }
    }
    (by_activation.into_values().collect(), plain)
}

/// The activations whose per-channel statistics the recipe's int4 method needs (empty when
/// it needs none): calibration gathers them.
pub fn activations_to_sample(prepared: &Prepared, recipe: &Recipe) -> Vec<String> {
    if recipe.mode != QuantMode::Int4 || !recipe.int4_method.needs_activations() {
        return Vec::new();
    }
    let plan = prepared.plan(recipe, None);
    groups(&prepared.graph, &plan)
        .0
        .into_iter()
        .map(|g| g.activation)
        .collect()
}

/// The error for a group whose statistics are missing.
fn missing(activation: &str, method: Int4Method) -> QuantError {
    QuantError::MissingStats {
        tensor: activation.to_owned(),
        reason: format!(
            "{} needs its per-channel calibration activations; calibrate with this recipe (the statistics given hold none for it)",
            method.name()
        ),
    }
}

/// Runs the recipe's int4 search (nothing for other modes and methods).
pub fn choose(
    prepared: &Prepared,
    plan: &Plan,
    recipe: &Recipe,
    stats: Option<&CalibrationStats>,
    ctx: &JobContext,
) -> Result<Int4Choices, QuantError> {
    let method = recipe.int4_method;
    let mut choices = Int4Choices::default();
    if recipe.mode != QuantMode::Int4 || !method.needs_activations() {
        return Ok(choices);
    }
    let spec = BlockSpec {
        block: recipe.block_size,
        qtype: recipe.weight_type,
        symmetric: recipe.symmetric_weights,
    };
    let (groups, plain) = groups(&prepared.graph, plan);
    choices.report = Int4Report {
        method: Some(method),
        plain,
        ..Int4Report::default()
    };
    let meter = RateMeter::new(format!("{} search", method.name()), groups.len() as u64);
    for (done, group) in groups.into_iter().enumerate() {
        ctx.checkpoint().map_err(|_| QuantError::Cancelled)?;
        ctx.report(meter.progress(done as u64, group.activation.clone()));
        let channel = stats
            .and_then(|s| s.channels.get(&group.activation))
            .ok_or_else(|| missing(&group.activation, method))?;
        search_group(prepared, &group, channel, spec, method, &mut choices)?;
    }
    Ok(choices)
}

/// A weight's values as a `[k, n]` matrix.
pub(crate) fn weight_matrix(prepared: &Prepared, name: &str) -> Result<Array2<f32>, QuantError> {
    let values = prepared
        .model
        .weight(name)?
        .ok_or_else(|| QuantError::MissingStats {
            tensor: name.to_owned(),
            reason: "expected an initializer".to_owned(),
        })?
        .into_f32();
    super::params::check_finite(name, &values)?;
    values
        .into_dimensionality::<Ix2>()
        .map_err(|e| QuantError::MissingStats {
            tensor: name.to_owned(),
            reason: format!("expected a rank-2 weight: {e}"),
        })
}

/// Searches one group and records its transforms (and its activation scale).
fn search_group(
    prepared: &Prepared,
    group: &Group,
    channel: &ChannelStats,
    spec: BlockSpec,
    method: Int4Method,
    choices: &mut Int4Choices,
) -> Result<(), QuantError> {
    let k = channel.channels;
    let weights: Vec<Array2<f32>> = group
        .weights
        .iter()
        .map(|w| weight_matrix(prepared, w))
        .collect::<Result<_, _>>()?;
    if channel.sample_rows == 0 || weights.iter().any(|w| w.nrows() != k) {
        choices.report.plain += weights.len();
        return Ok(());
    }
    let x = ArrayView2::from_shape((channel.sample_rows, k), &channel.sample)
        .map_err(|e| missing(&format!("{} ({e})", group.activation), method))?;
    let rows = held_out::SplitRows::of(x);
    choices.report.count_rows(&rows, weights.len());
    let views: Vec<ArrayView2<'_, f32>> = weights.iter().map(|w| w.view()).collect();
    let scales = match method {
        Int4Method::AwqLite | Int4Method::AwqFull => {
            lite_scales(&rows, channel, &views, spec, &mut choices.report)
        }
        _ => None,
    };
    if let Some((alpha, scales)) = &scales {
        record_scales(prepared, group, k, (*alpha, scales.clone()), choices);
    }
    if matches!(method, Int4Method::AwqClip | Int4Method::AwqFull) {
        let scales = scales.as_ref().map(|(_, s)| s.as_slice());
        for (name, w) in group.weights.iter().zip(&views) {
            if let Some(clip) = clip_ratios(&rows, *w, spec, scales, &mut choices.report) {
                choices.transforms.entry(name.clone()).or_default().clip = Some(clip);
            }
        }
    }
    Ok(())
}

/// AWQ-lite's exponent and scales for a group, fitted on the fit rows and kept where they
/// beat plain rounding on the held-out rows too; `None` (counted) where plain rounding wins.
fn lite_scales(
    rows: &held_out::SplitRows,
    channel: &ChannelStats,
    views: &[ArrayView2<'_, f32>],
    spec: BlockSpec,
    report: &mut Int4Report,
) -> Option<(f32, Vec<f32>)> {
    let choice = search::search_scales(rows.fit.view(), &channel.mean_abs(), views, spec);
    let (Some(alpha), Some(scales)) = (choice.alpha, choice.scales) else {
        report.unscaled += 1;
        return None;
    };
    let errors = |held: ArrayView2<'_, f32>| {
        let group = search::GroupError::new(held, views, spec);
        (group.of(Some(&scales)), group.of(None))
    };
    if !rows.keeps(errors) {
        report.unscaled += 1;
        report.held_out_rounding += 1;
        return None;
    }
    Some((alpha, scales))
}

/// AWQ-clip's ratios for one weight (on its AWQ-lite `scales` when it has them: the rows
/// multiplied, the activation divided), fitted on the fit rows and kept where they beat the
/// unclipped weight on the held-out rows too; `None` (counted) where they do not.
fn clip_ratios(
    rows: &held_out::SplitRows,
    w: ArrayView2<'_, f32>,
    spec: BlockSpec,
    scales: Option<&[f32]>,
    report: &mut Int4Report,
) -> Option<Vec<f32>> {
    let scale = |x: ArrayView2<'_, f32>, axis: usize, divide: bool| -> Array2<f32> {
        let mut out = x.to_owned();
        if let Some(scales) = scales {
            for (mut lane, f) in out.axis_iter_mut(ndarray::Axis(axis)).zip(scales) {
                lane *= if divide { 1.0 / f } else { *f };
            }
        }
        out
    };
    let weight = scale(w, 0, false);
    let clip = search::search_clip(scale(rows.fit.view(), 1, true).view(), weight.view(), spec);
    let errors = |held: ArrayView2<'_, f32>| {
        let x = scale(held, 1, true);
        let error = |clip| search::clipped_error(x.view(), weight.view(), spec, clip);
        (error(Some(clip.as_slice())), error(None))
    };
    if rows.keeps(errors) {
        Some(clip)
    } else {
        report.unclipped += 1;
        None
    }
}

/// Records AWQ-lite's scales for a group: its weights' row scales and where the activation's
/// division goes.
fn record_scales(
    prepared: &Prepared,
    group: &Group,
    k: usize,
    (alpha, scales): (f32, Vec<f32>),
    choices: &mut Int4Choices,
) {
    for w in &group.weights {
        choices.transforms.entry(w.clone()).or_default().row_scale = Some(scales.clone());
    }
    let site = fold::site(&prepared.graph, &group.activation, k, &group.readers);
    *choices
        .report
        .sites
        .entry(site.describe().to_owned())
        .or_insert(0) += 1;
    choices.scales.push(ActivationScale {
        activation: group.activation.clone(),
        readers: group.readers.clone(),
        scales,
        alpha,
        site,
    });
}

impl Int4Choices {
    /// Column divisors for the producer weights AWQ-lite folds into: called once the
    /// scales are known, so a weight both scaled and folded into gets both.
    /// Constants folded into get them too, used when the plan quantizes them (SmoothQuant:
    /// a norm's γ read by a quantized Mul).
    pub fn fold_into_producers(&mut self) {
        for scale in &self.scales {
            let targets = match &scale.site {
                ScaleSite::ProducerWeight(w) => vec![w.clone()],
                ScaleSite::Constants(names) => names.clone(),
                ScaleSite::Mul => Vec::new(),
            };
            for target in targets {
                self.transforms.entry(target).or_default().column_divisor =
                    Some(scale.scales.clone());
            }
        }
    }
}
