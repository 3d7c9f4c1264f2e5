//! SmoothQuant for INT8 W8A8 MatMuls (Xiao et al., 2023): an activation with a few large
//! channels is divided by `s` per channel and the weights reading it multiplied by `s` per row,
//! `(X / s)(diag(s) W) = X W`, so part of the activation's range moves into the weights,
//! which are quantized per output channel and take it far better than one per-tensor
//! activation scale does. `s_j = max|X_j|^α / max|W_j|^(1−α)`.
//!
//! The division is folded, exactly, into the op that made the activation (a norm's scale and
//! bias, a per-channel Mul, a preceding MatMul's columns; see [`super::int4::fold`]); an
//! activation whose producer takes no fold is left alone (an extra Mul would cost what the
//! smoothing saves). α is searched per activation on the calibration rows (0, 0.1, …, 1 and
//! no smoothing at all, the layer output error of the simulated W8A8 product decides), or
//! fixed by the recipe.
//!
//! The smoothed activation has new values, so its range is calibrated again (a second pass
//! with `X · (1/s)` computed beside the model, see [`observing_model`]); the statistics carry
//! the scales, so quantizing from a saved calibration reproduces the same model.

use std::collections::BTreeMap;

use ndarray::{Array2, ArrayView2, Axis};
use rayon::prelude::*;

use super::QuantError;
use super::int4::fold::{self, ScaleSite};
use super::int4::{ActivationScale, Int4Choices, groups, weight_matrix};
use super::plan::{Plan, TensorRole};
use super::prepare::Prepared;
use super::scale::{ScaleZp, dequantize, quantize_value, scale_zp_for};
use crate::calib::channels::ChannelStats;
use crate::calib::stats::CalibrationStats;
pub use crate::calib::stats::Smoothing;
use crate::model::proto::ValueInfoProto;
use crate::model::{DataType, Dim, Model};
use crate::recipe::{QuantMode, Recipe};

/// The exponents searched per activation.
const ALPHAS: usize = 11;
/// Scales are kept in this range (a dead channel or weight row must not make them 0 or ∞).
const SCALE_LIMITS: (f32, f32) = (1e-4, 1e4);

/// An activation SmoothQuant may smooth: read by MatMuls whose weights are quantized per
/// row-able `[k, n]`, itself quantized by the plan, its producer able to take the division.
struct Candidate {
    activation: String,
    weights: Vec<String>,
    readers: Vec<crate::model::NodeId>,
    site: ScaleSite,
}

fn candidates(prepared: &Prepared, plan: &Plan) -> Vec<Candidate> {
    let graph = &prepared.graph;
    groups(graph, plan)
        .0
        .into_iter()
        .filter(|g| matches!(plan.roles.get(&g.activation), Some(TensorRole::Activation)))
        .filter_map(|g| {
            let channels = match graph
                .tensor(g.weights.first()?)?
                .shape
                .as_deref()?
                .first()?
            {
                Dim::Fixed(k) if *k > 0 => *k as usize,
                _ => return None,
            };
            let site = fold::site(graph, &g.activation, channels, &g.readers);
            (site != ScaleSite::Mul).then_some(Candidate {
                activation: g.activation,
                weights: g.weights,
                readers: g.readers,
                site,
            })
        })
        .collect()
}

/// The activations the recipe smooths (empty unless `smoothquant` is on in int8 mode):
/// calibration gathers their per-channel statistics.
pub fn activations_to_smooth(prepared: &Prepared, recipe: &Recipe) -> Vec<String> {
    if !recipe.smoothquant || recipe.mode != QuantMode::Int8 {
        return Vec::new();
    }
    let plan = prepared.plan(recipe, None);
    candidates(prepared, &plan)
        .into_iter()
        .map(|c| c.activation)
        .collect()
}

/// Searches α for every activation to smooth, on the per-channel statistics of `stats`.
/// Activations where no smoothing was best are left out.
pub fn search(
    prepared: &Prepared,
    recipe: &Recipe,
    stats: &CalibrationStats,
    ctx: &crate::jobs::JobContext,
) -> Result<BTreeMap<String, Smoothing>, QuantError> {
    let mut found = BTreeMap::new();
    if !recipe.smoothquant || recipe.mode != QuantMode::Int8 {
        return Ok(found);
    }
    // The plan quantize will follow: automatic precision's kept tensors and 7-bit weights.
    let super::Guarded {
        recipe: effective,
        plan,
        ..
    } = super::guarded(prepared, recipe, Some(stats));
    let candidates = candidates(prepared, &plan);
    let meter = crate::jobs::RateMeter::new("SmoothQuant search", candidates.len() as u64);
    for (done, candidate) in candidates.into_iter().enumerate() {
        ctx.checkpoint().map_err(|_| QuantError::Cancelled)?;
        ctx.report(meter.progress(done as u64, candidate.activation.clone()));
        let Some(channel) = stats.channels.get(&candidate.activation) else {
            continue;
        };
        let weights: Vec<Array2<f32>> = candidate
            .weights
            .iter()
            .map(|w| weight_matrix(prepared, w))
            .collect::<Result<_, _>>()?;
        let seven_bit = candidate.weights.iter().any(|w| {
            effective
                .tensor_overrides
                .get(w)
                .is_some_and(|o| o.reduce_range)
        });
        let simulated = Recipe {
            reduce_range: effective.reduce_range || seven_bit,
            ..effective.clone()
        };
        if let Some(smoothing) = search_one(channel, &weights, &simulated) {
            found.insert(candidate.activation, smoothing);
        }
    }
    Ok(found)
}

/// The best smoothing of one activation read by `weights`, `None` when not smoothing is best.
fn search_one(
    channel: &ChannelStats,
    weights: &[Array2<f32>],
    recipe: &Recipe,
) -> Option<Smoothing> {
    let k = channel.channels;
    if channel.sample_rows == 0 || channel.min.len() != k || weights.iter().any(|w| w.nrows() != k)
    {
        return None;
    }
    let x = ArrayView2::from_shape((channel.sample_rows, k), &channel.sample).ok()?;
    let x_max: Vec<f32> = channel
        .min
        .iter()
        .zip(&channel.max)
        .map(|(lo, hi)| lo.abs().max(hi.abs()))
        .collect();
    let w_max: Vec<f32> = (0..k)
        .map(|j| {
            weights
                .iter()
                .flat_map(|w| w.row(j).into_iter())
                .fold(0f32, |m, v| m.max(v.abs()))
        })
        .collect();
    let exact: Vec<Array2<f32>> = weights.iter().map(|w| x.dot(w)).collect();
    let alphas: Vec<f32> = match recipe.smoothquant_alpha {
        Some(alpha) => vec![alpha],
        None => (0..ALPHAS)
            .map(|i| i as f32 / (ALPHAS - 1) as f32)
            .collect(),
    };
    let loss = |scales: &[f32]| error_of(x, channel, scales, weights, &exact, recipe);
    let plain = loss(&vec![1.0; k]);
    let (alpha, scales, best) = alphas
        .par_iter()
        .map(|&alpha| {
            let scales = scales_for(&x_max, &w_max, alpha);
            let e = loss(&scales);
            (alpha, scales, e)
        })
        .min_by(|a, b| a.2.total_cmp(&b.2))?;
    // A fixed α is the user's choice; a searched one must beat leaving the layer alone.
    (recipe.smoothquant_alpha.is_some() || best < plain).then_some(Smoothing { scales, alpha })
}

/// `s_j = max|X_j|^α / max|W_j|^(1−α)`, 1 where either side is zero.
fn scales_for(x_max: &[f32], w_max: &[f32], alpha: f32) -> Vec<f32> {
    x_max
        .iter()
        .zip(w_max)
        .map(|(&x, &w)| {
            if x > 0.0 && w > 0.0 {
                (x.powf(alpha) / w.powf(1.0 - alpha)).clamp(SCALE_LIMITS.0, SCALE_LIMITS.1)
            } else {
                1.0
            }
        })
        .collect()
}

/// Squared error of the simulated W8A8 layer outputs against the float ones when the
/// activation is divided by `scales`: the activation quantized per tensor over the range the
/// smoothed channels' extremes span (what calibration by min/max would give), each weight per
/// output column (or per tensor) after its rows are multiplied by `scales`.
fn error_of(
    x: ArrayView2<'_, f32>,
    channel: &ChannelStats,
    scales: &[f32],
    weights: &[Array2<f32>],
    exact: &[Array2<f32>],
    recipe: &Recipe,
) -> f64 {
    let (mut lo, mut hi) = (0f32, 0f32);
    for ((min, max), s) in channel.min.iter().zip(&channel.max).zip(scales) {
        lo = lo.min(min / s);
        hi = hi.max(max / s);
    }
    let act = scale_zp_for(
        lo,
        hi,
        recipe.activation_type,
        recipe.symmetric_activations,
        false,
    );
    let mut xq = x.to_owned();
    for mut row in xq.rows_mut() {
        for (v, s) in row.iter_mut().zip(scales) {
            *v = fake(*v / s, act, recipe);
        }
    }
    weights
        .iter()
        .zip(exact)
        .map(|(w, y)| {
            let mut wq = w.to_owned();
            for (mut row, s) in wq.rows_mut().into_iter().zip(scales) {
                row.mapv_inplace(|v| v * s);
            }
            fake_weight(&mut wq, recipe);
            let diff = y - &xq.dot(&wq);
            diff.iter().map(|d| f64::from(*d).powi(2)).sum::<f64>()
        })
        .sum()
}

fn fake(v: f32, p: ScaleZp, recipe: &Recipe) -> f32 {
    dequantize(quantize_value(v, p, recipe.activation_type), p)
}

/// `w` (`[k, n]`) quantized and dequantized as the rewrite stores a MatMul weight: per output
/// column when the recipe is per channel, else per tensor.
fn fake_weight(w: &mut Array2<f32>, recipe: &Recipe) {
    let params = |values: &mut dyn Iterator<Item = f32>| {
        let (lo, hi) = values.fold((0f32, 0f32), |(lo, hi), v| (lo.min(v), hi.max(v)));
        scale_zp_for(
            lo,
            hi,
            recipe.weight_type,
            recipe.symmetric_weights,
            recipe.reduce_range,
        )
    };
    let apply = |v: f32, p: ScaleZp| dequantize(quantize_value(v, p, recipe.weight_type), p);
    if recipe.per_channel {
        for mut column in w.axis_iter_mut(Axis(1)) {
            let p = params(&mut column.iter().copied());
            column.mapv_inplace(|v| apply(v, p));
        }
    } else {
        let p = params(&mut w.iter().copied());
        w.mapv_inplace(|v| apply(v, p));
    }
}

/// The name of the tensor the second calibration pass observes for `activation`.
pub fn observed_name(activation: &str) -> String {
    format!("{activation}_smoothquant_observed")
}

/// `model` with `X · (1/s)` computed beside every smoothed activation `X` as an extra output
/// (the model's own nodes untouched, so everything downstream runs as before): the second
/// calibration pass observes these for the smoothed ranges.
pub fn observing_model(
    model: &Model,
    smoothing: &BTreeMap<String, Smoothing>,
    float_type: impl Fn(&str) -> DataType,
) -> Model {
    let mut side = model.clone();
    let graph = &mut side.proto_mut().graph;
    let Some(graph) = graph.as_mut() else {
        return side;
    };
    for (activation, s) in smoothing {
        let observed = observed_name(activation);
        let (factor, mul) = fold::division_by_scales(
            activation,
            &s.scales,
            float_type(activation),
            "smoothquant",
            &observed,
        );
        graph.initializer.push(factor);
        graph.node.push(mul);
        graph.output.push(ValueInfoProto {
            name: Some(observed),
            ..ValueInfoProto::default()
        });
    }
    side
}

/// `stats` of the unsmoothed model with each smoothed activation's statistics replaced by
/// those `second` observed of its smoothed values, and the scales recorded.
pub fn merge(
    stats: &mut CalibrationStats,
    mut second: CalibrationStats,
    smoothing: BTreeMap<String, Smoothing>,
) {
    for activation in smoothing.keys() {
        if let Some(observed) = second.tensors.remove(&observed_name(activation)) {
            stats.tensors.insert(activation.clone(), observed);
        }
    }
    stats.smoothing = smoothing;
}

/// What the rewrite does for the smoothing recorded in `stats`: weight rows multiplied, the
/// division folded where the search found it could go.
pub fn choices(
    prepared: &Prepared,
    plan: &Plan,
    recipe: &Recipe,
    stats: Option<&CalibrationStats>,
) -> Result<Int4Choices, QuantError> {
    let mut choices = Int4Choices::default();
    let recorded = stats.map(|s| &s.smoothing).filter(|s| !s.is_empty());
    let wanted = recipe.smoothquant && recipe.mode == QuantMode::Int8;
    let Some(recorded) = recorded else {
        // Statistics from a run without SmoothQuant have no per-channel extremes for the
        // activations it would smooth (a run with it that found nothing has them).
        let uncalibrated = || {
            candidates(prepared, plan)
                .iter()
                .any(|c| stats.is_some_and(|s| !s.channels.contains_key(&c.activation)))
        };
        if wanted && uncalibrated() {
            return Err(QuantError::StatsMismatch(
                "smoothquant needs statistics calibrated with it on (the smoothed activations' ranges): calibrate again with this recipe".to_owned(),
            ));
        }
        return Ok(choices);
    };
    if !wanted {
        return Err(QuantError::StatsMismatch(
            "the statistics hold smoothed ranges (they were gathered with smoothquant on): quantize with smoothquant, or calibrate again without it".to_owned(),
        ));
    }
    for (candidate, s) in recorded_candidates(prepared, plan, recorded) {
        for w in &candidate.weights {
            choices.transforms.entry(w.clone()).or_default().row_scale = Some(s.scales.clone());
        }
        choices.scales.push(ActivationScale {
            activation: candidate.activation,
            readers: candidate.readers,
            scales: s.scales.clone(),
            alpha: s.alpha,
            site: candidate.site,
        });
    }
    choices.fold_into_producers();
    Ok(choices)
}

/// The producer constants the recorded smoothing is folded into (a norm's scale and bias, a
/// Mul's factor). They stay float: divided per channel by scales spanning orders of
/// magnitude, one 8-bit scale for the whole constant (how a norm's scale is quantized) would
/// round its small channels away (a synthetic pre-LN transformer fell from 27 to 8 dB).
pub fn folded_constants(
    prepared: &Prepared,
    plan: &Plan,
    recipe: &Recipe,
    stats: Option<&CalibrationStats>,
) -> Vec<String> {
    let Some(recorded) = stats.map(|s| &s.smoothing).filter(|s| !s.is_empty()) else {
        return Vec::new();
    };
    if !recipe.smoothquant || recipe.mode != QuantMode::Int8 {
        return Vec::new();
    }
    recorded_candidates(prepared, plan, recorded)
        .into_iter()
        .flat_map(|(c, _)| match c.site {
            ScaleSite::Constants(names) => names,
            _ => Vec::new(),
        })
        .collect()
}

/// The candidates of `plan` that `recorded` smoothed, each with its smoothing.
fn recorded_candidates<'a>(
    prepared: &Prepared,
    plan: &Plan,
    recorded: &'a BTreeMap<String, Smoothing>,
) -> Vec<(Candidate, &'a Smoothing)> {
    candidates(prepared, plan)
        .into_iter()
        .filter_map(|c| {
            let s = recorded.get(&c.activation)?;
            Some((c, s))
        })
        .collect()
}

/// One line on what SmoothQuant did for `recipe`, `None` when it was not asked for.
pub fn summary(choices: &Int4Choices, recipe: &Recipe) -> Option<String> {
    if !recipe.smoothquant || recipe.mode != QuantMode::Int8 {
        return None;
    }
    if choices.scales.is_empty() {
        return Some(
            "smoothquant: nothing smoothed (no quantized MatMul input is made by a norm, a per-channel Mul or a MatMul and read by those MatMuls alone, or leaving it was best)"
                .to_owned(),
        );
    }
    let alphas: Vec<f32> = choices.scales.iter().map(|s| s.alpha).collect();
    let lo = alphas.iter().copied().fold(f32::INFINITY, f32::min);
    let hi = alphas.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let folded =
        |site: fn(&ScaleSite) -> bool| choices.scales.iter().filter(|s| site(&s.site)).count();
    Some(format!(
        "smoothquant: {} activation(s) smoothed (alpha {lo:.1}–{hi:.1}); {} folded into the producer's constants, {} into the preceding MatMul",
        choices.scales.len(),
        folded(|s| matches!(s, ScaleSite::Constants(_))),
        folded(|s| matches!(s, ScaleSite::ProducerWeight(_))),
    ))
}
