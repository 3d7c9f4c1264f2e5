//! GPTQ rounding (Frantar et al., ICLR 2023; ModelOpt's and Quark's "gptq"): instead of
//! rounding every weight to its nearest grid point, each quantized Conv, Gemm and MatMul
//! weight is rounded column by column, input after input, and the error of each column is
//! compensated by the columns not rounded yet through the inverse of the layer's input
//! Hessian, which calibration measures (see [`crate::calib::input_hessians`]).
//!
//! The scales and zero points stay those the rewrite computes from the float weight (per
//! tensor, per channel or block-wise; INT8, INT4 or any integer type): GPTQ only chooses
//! other integers. It hands the rewrite, per weight, the values each element had when its
//! column was rounded ([`Rounded::rounding`]); rounding those to nearest with the same
//! parameters gives GPTQ's integers. Hessians are statistics of the float model, so recipe
//! changes after calibrating (exclusions, bits, per-channel) are rounded for. FP8 weights,
//! weights another search rescales (AWQ, SmoothQuant) and weights shared by several layers
//! round to nearest (reported).
//!
//! **Dampening is chosen on held-out samples.** A Hessian measured on fewer vectors than its
//! width (a transformer's feed-forward output reads 1,536 inputs; 32 calibration sentences
//! give a few hundred tokens) has directions the data never visits: GPTQ then fits the
//! calibration set and moves the output on new inputs more than rounding to nearest does
//! (MiniLM: +8 dB on the calibration sentences, −6 dB on others). Calibration sums every
//! second sample apart ([`InputHessian::split`]); each layer is rounded on the other samples
//! under each of [`solve::DAMPENINGS`] and measured on these, the dampening with the least
//! held-out output error is used for the rounding on all samples, and a layer whose held-out
//! error is least with rounding to nearest is left to it. Statistics without held-out sums
//! (written before them) use the reference dampening.
//!
//! Each layer's effect is reported as the layer output's SQNR `tr(W H Wᵀ) / tr(E H Eᵀ)` with
//! rounding to nearest and with GPTQ, on the held-out samples (GPTQ fitted on the others),
//! or on the calibration data itself when there are none.

mod grid;
pub mod solve;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use ndarray::{Array2, ArrayD};
use rayon::prelude::*;
use serde::Serialize;

use super::QuantError;
use super::layers::{self, Kind, Layer};
use super::params::weight_quant;
use super::plan::Plan;
use super::prepare::Prepared;
use crate::calib::input_hessians::{HessianSpec, InputHessian};
use crate::calib::stats::CalibrationStats;
use crate::jobs::{JobContext, RateMeter};
use crate::model::DataType;
use crate::recipe::{Int4Method, QuantMode, QuantType, Recipe};
use grid::{Grid, Problem};

/// One layer whose weight GPTQ rounded.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoundedLayer {
    /// The layer (node name).
    pub layer: String,
    /// Its weight.
    pub weight: String,
    /// Output SQNR of the layer with the weight rounded to nearest (dB), on the held-out
    /// samples when there are some, else on the calibration data.
    pub rtn_sqnr_db: f64,
    /// The same with the rounding the layer gets (dB): GPTQ's, fitted on the other samples,
    /// or nearest's where the held-out samples preferred it.
    pub gptq_sqnr_db: f64,
    /// Whether the figures are of held-out samples.
    pub held_out: bool,
    /// The dampening used (a share of the Hessian's mean diagonal); `None` when the held-out
    /// samples were best served by rounding to nearest, which the layer then keeps.
    pub dampening: Option<f64>,
}

/// What GPTQ did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GptqReport {
    /// Layers rounded.
    pub rounded: Vec<RoundedLayer>,
    /// Layers rounded to nearest instead, and why.
    pub skipped: Vec<(String, String)>,
}

impl GptqReport {
    /// One line for logs and the CLI.
    pub fn summary(&self) -> String {
        if self.rounded.is_empty() {
            return format!(
                "gptq: no layer rounded (it rounds the constant weights of quantized Conv, Gemm and MatMul{})",
                if self.skipped.is_empty() {
                    String::new()
                } else {
                    format!("; {} rounded to nearest instead", self.skipped.len())
                }
            );
        }
        let n = self.rounded.len().max(1) as f64;
        let mean = |f: fn(&RoundedLayer) -> f64| self.rounded.iter().map(f).sum::<f64>() / n;
        let measured = if self.rounded.iter().all(|l| l.held_out) {
            "held-out calibration samples"
        } else {
            "the calibration data"
        };
        let nearest = self
            .rounded
            .iter()
            .filter(|l| l.dampening.is_none())
            .count();
        let mut text = format!(
            "gptq: {} layer(s) rounded; mean layer output SQNR on {measured}: {:.2} dB rounded to nearest, {:.2} dB with gptq",
            self.rounded.len() - nearest,
            mean(|l| l.rtn_sqnr_db),
            mean(|l| l.gptq_sqnr_db),
        );
        if nearest > 0 {
            text.push_str(&format!(
                "; {nearest} kept rounding to nearest, which the held-out samples preferred"
            ));
        }
        if !self.skipped.is_empty() {
            text.push_str(&format!(
                ", {} rounded to nearest instead",
                self.skipped.len()
            ));
        }
        text
    }

    /// The rounded layers, largest gain first.
    pub fn largest_gains(&self) -> Vec<&RoundedLayer> {
        let mut list: Vec<&RoundedLayer> = self.rounded.iter().collect();
        let gain = |l: &RoundedLayer| l.gptq_sqnr_db - l.rtn_sqnr_db;
        list.sort_by(|a, b| gain(b).total_cmp(&gain(a)));
        list
    }
}

/// GPTQ's decisions: weight name → the values to round to nearest, and the report.
#[derive(Debug, Clone, Default)]
pub struct Rounded {
    /// Weight name → its values as GPTQ left them (same shape as the weight), quantized with
    /// the parameters of the original weight.
    pub rounding: HashMap<String, ArrayD<f32>>,
    /// What was done.
    pub report: GptqReport,
}

/// Why `layer`'s weight is rounded to nearest whatever the data says, if it is.
fn excluded_by_recipe(recipe: &Recipe, layer: &Layer) -> Option<&'static str> {
    if recipe.smoothquant && matches!(layer.kind, Kind::MatMul | Kind::Gemm { .. }) {
        return Some("SmoothQuant rescales it");
    }
    if recipe.mode == QuantMode::Int4
        && matches!(
            recipe.int4_method,
            Int4Method::AwqLite | Int4Method::AwqClip | Int4Method::AwqFull
        )
    {
        return Some("the AWQ search rescales it");
    }
    None
}

/// The inputs whose Hessians calibration gathers for `recipe` (none unless it asks for
/// GPTQ); layers reading one tensor the same way share one.
pub fn hessian_specs(prepared: &Prepared, recipe: &Recipe) -> Vec<HessianSpec> {
    if !recipe.gptq {
        return Vec::new();
    }
    let plan = prepared.plan(recipe, None);
    let mut specs: Vec<HessianSpec> = Vec::new();
    for layer in layers::layers(&prepared.graph, &prepared.model, &plan) {
        if excluded_by_recipe(recipe, &layer).is_some() {
            continue;
        }
        let Some(geometry) = layers::geometry(&prepared.model, &layer) else {
            continue;
        };
        let groups = match layer.kind {
            Kind::Conv { group } => group,
            _ => 1,
        };
        let same = |s: &&mut HessianSpec| {
            s.tensor == layer.input && s.geometry == geometry && s.groups == groups
        };
        match specs.iter_mut().find(same) {
            Some(spec) => spec.layers.push(layer.name.clone()),
            None => specs.push(HessianSpec {
                layers: vec![layer.name.clone()],
                tensor: layer.input.clone(),
                geometry,
                groups,
            }),
        }
    }
    specs
}

/// GPTQ's rounding of every weight `recipe` quantizes in `prepared` (nothing unless it asks
/// for GPTQ), reporting progress to `ctx`.
pub fn round(
    prepared: &Prepared,
    recipe: &Recipe,
    stats: Option<&CalibrationStats>,
    ctx: &JobContext,
) -> Result<Option<Rounded>, QuantError> {
    let Some(stats) = stats.filter(|_| recipe.gptq) else {
        return Ok(None);
    };
    let super::Guarded {
        recipe: effective,
        plan,
        ..
    } = super::guarded(prepared, recipe, Some(stats));
    let targets = layers::layers(&prepared.graph, &prepared.model, &plan);
    if !targets.is_empty() && stats.input_hessians.is_empty() {
        return Err(QuantError::StatsMismatch(
            "gptq needs statistics calibrated with it on (the layers' input Hessians): calibrate again with gptq".to_owned(),
        ));
    }
    let meter = RateMeter::new("GPTQ rounding", targets.len() as u64);
    let done = AtomicU64::new(0);
    let outcomes: Vec<_> = targets
        .par_iter()
        .map(|layer| {
            ctx.checkpoint().map_err(|_| QuantError::Cancelled)?;
            let outcome = round_layer(prepared, &effective, &plan, stats, layer);
            let finished = done.fetch_add(1, Ordering::Relaxed) + 1;
            ctx.report(meter.progress(finished, layer.name.clone()));
            outcome.map(|o| (layer, o))
        })
        .collect::<Result<_, QuantError>>()?;
    let mut rounded = Rounded::default();
    for (layer, outcome) in outcomes {
        match outcome {
            Ok((values, report)) => {
                rounded.rounding.insert(layer.weight.clone(), values);
                rounded.report.rounded.push(report);
            }
            Err(reason) => rounded
                .report
                .skipped
                .push((layer.name.clone(), reason.to_owned())),
        }
    }
    Ok(Some(rounded))
}

/// One layer's GPTQ values and effect; `Ok(Err(reason))` when it is rounded to nearest.
type LayerOutcome = Result<(ArrayD<f32>, RoundedLayer), &'static str>;

fn round_layer(
    prepared: &Prepared,
    recipe: &Recipe,
    plan: &Plan,
    stats: &CalibrationStats,
    layer: &Layer,
) -> Result<LayerOutcome, QuantError> {
    if let Some(reason) = excluded_by_recipe(recipe, layer) {
        return Ok(Err(reason));
    }
    let Some(hessian) = stats.hessian_of(&layer.name) else {
        return Ok(Err("its input Hessian was not gathered"));
    };
    let Some(role) = plan.roles.get(&layer.weight) else {
        return Ok(Err("its weight is not quantized"));
    };
    if !prepared.graph.is_private_initializer(&layer.weight) {
        return Ok(Err("its weight is shared with other layers"));
    }
    let Some(weight) = prepared.model.weight(&layer.weight)? else {
        return Ok(Err("its weight is not a constant"));
    };
    let scale_type = match weight.dtype() {
        DataType::Float32 => DataType::Float32,
        t @ (DataType::Float16 | DataType::BFloat16) => t,
        _ => return Ok(Err("its weight is not a float tensor")),
    };
    let values = weight.into_f32();
    let Some(how) = weight_quant(recipe, &layer.weight, role, values.ndim()) else {
        return Ok(Err("its weight is not quantized"));
    };
    if how.qtype == QuantType::Float8e4m3fn {
        return Ok(Err("FP8 weights round to nearest"));
    }
    let Some(grid) = Grid::new(&values, &how, scale_type) else {
        return Ok(Err("its weight's layout is not supported"));
    };
    let Some(problems) = grid::problems(layer.kind, values.shape(), hessian) else {
        return Ok(Err("its input Hessian does not fit its weight"));
    };
    super::params::check_finite(&layer.weight, &values)?;
    let flat = values.as_standard_layout();
    let flat = flat.as_slice().unwrap_or(&[]);
    let weights: Vec<Array2<f64>> = problems.iter().map(|p| problem_weight(p, flat)).collect();
    let choice = choose_dampening(&problems, &weights, hessian, &grid);
    let mut out = flat.to_vec();
    // Measured on all the data only when there are no held-out figures.
    let mut whole = choice.held_out.is_none().then(Energies::default);
    for (problem, w) in problems.iter().zip(&weights) {
        let Some(h) = hessian.mean(problem.group) else {
            return Ok(Err("its input Hessian has no data"));
        };
        let targets = match choice.dampening {
            Some(d) => match gptq_targets(problem, &h, w, &grid, d) {
                Some(t) => t,
                None => return Ok(Err("its input Hessian is singular even after dampening")),
            },
            None => w.clone(),
        };
        for (index, v) in problem.indices().zip(targets.iter()) {
            out[index] = *v as f32;
        }
        if let Some(energies) = whole.as_mut() {
            energies.add(problem, &grid, w, &targets, &h);
        }
    }
    let mut figures = choice.held_out.or(whole).unwrap_or_default();
    if choice.dampening.is_none() {
        // The layer keeps rounding to nearest: that is what it gets.
        figures.gptq = figures.rtn;
    }
    let values = ArrayD::from_shape_vec(values.shape(), out)
        .map_err(|e| QuantError::Invalid(e.to_string()))?;
    Ok(Ok((
        values,
        RoundedLayer {
            layer: layer.name.clone(),
            weight: layer.weight.clone(),
            rtn_sqnr_db: sqnr_db(figures.signal, figures.rtn),
            gptq_sqnr_db: sqnr_db(figures.signal, figures.gptq),
            held_out: choice.held_out.is_some(),
            dampening: choice.dampening,
        },
    )))
}

/// A layer's dampening, and the held-out energies it was chosen by.
struct Choice {
    /// `None`: rounding to nearest.
    dampening: Option<f64>,
    held_out: Option<Energies>,
}

/// The dampening of least output error on the held-out samples, GPTQ fitted on the others
/// (rounding to nearest when it beats every one); the reference dampening without held-out
/// samples. `weights` are the problems' float weights.
fn choose_dampening(
    problems: &[Problem],
    weights: &[Array2<f64>],
    hessian: &InputHessian,
    grid: &Grid,
) -> Choice {
    let fallback = Choice {
        dampening: Some(solve::DAMPENING),
        held_out: None,
    };
    let Some(splits) = problems
        .iter()
        .map(|p| hessian.split(p.group))
        .collect::<Option<Vec<_>>>()
    else {
        return fallback;
    };
    let measured: Vec<(f64, Energies)> = solve::DAMPENINGS
        .par_iter()
        .filter_map(|&d| {
            let mut energies = Energies::default();
            for ((problem, (fit, held)), w) in problems.iter().zip(&splits).zip(weights) {
                let targets = gptq_targets(problem, fit, w, grid, d)?;
                energies.add(problem, grid, w, &targets, held);
            }
            Some((d, energies))
        })
        .collect();
    let Some((d, best)) = measured
        .into_iter()
        .min_by(|a, b| a.1.gptq.total_cmp(&b.1.gptq))
    else {
        return fallback;
    };
    Choice {
        dampening: (best.gptq < best.rtn).then_some(d),
        held_out: Some(best),
    }
}

/// Output energies of one layer: the signal, the error of rounding to nearest and GPTQ's.
#[derive(Debug, Clone, Copy, Default)]
struct Energies {
    signal: f64,
    rtn: f64,
    gptq: f64,
}

impl Energies {
    /// Adds one problem's energies on inputs with Hessian `h`: `w` the float weight,
    /// `targets` the values GPTQ rounds.
    fn add(
        &mut self,
        problem: &Problem,
        grid: &Grid,
        w: &Array2<f64>,
        targets: &Array2<f64>,
        h: &Array2<f64>,
    ) {
        let error = |from: &Array2<f64>| {
            Array2::from_shape_fn(w.dim(), |(r, c)| {
                f64::from(grid.fake(problem.index(r, c), from[[r, c]] as f32)) - w[[r, c]]
            })
        };
        self.signal += solve::output_error(w, h);
        self.rtn += solve::output_error(&error(w), h);
        self.gptq += solve::output_error(&error(targets), h);
    }
}

/// One problem's float weight, `[rows, cols]`.
fn problem_weight(problem: &Problem, flat: &[f32]) -> Array2<f64> {
    Array2::from_shape_fn((problem.rows, problem.cols), |(r, c)| {
        f64::from(flat[problem.index(r, c)])
    })
}

/// The SQNR in dB, 300 dB for no noise.
fn sqnr_db(signal: f64, noise: f64) -> f64 {
    crate::util::capped_sqnr_db(signal, noise, 300.0)
}

/// GPTQ over one group of output channels with Hessian `h` dampened by `dampening`
/// (raised while it cannot be factorized): columns in act order, the Hessian inverted, the
/// rows rounded; the values to round, in `w`'s column order. `None` when no dampening makes
/// the Hessian factorizable.
fn gptq_targets(
    problem: &Problem,
    h: &Array2<f64>,
    w: &Array2<f64>,
    grid: &Grid,
    dampening: f64,
) -> Option<Array2<f64>> {
    let (rows, cols) = (problem.rows, problem.cols);
    let order = solve::act_order(h);
    let permuted_h = Array2::from_shape_fn((cols, cols), |(i, j)| h[[order[i], order[j]]]);
    let permuted_w = Array2::from_shape_fn((rows, cols), |(r, i)| w[[r, order[i]]]);
    let u = solve::stable_inverse_factor(&permuted_h, dampening)?;
    // Rounding error is compensated; clipping chosen by the range is not.
    let fake = |r: usize, i: usize, v: f64| {
        f64::from(grid.rounded_within_span(problem.index(r, order[i]), v as f32))
    };
    let permuted_targets = solve::round(&permuted_w, &u, &fake);
    let mut targets = Array2::<f64>::zeros((rows, cols));
    for (i, &c) in order.iter().enumerate() {
        targets.column_mut(c).assign(&permuted_targets.column(i));
    }
    Some(targets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_without_constant_weights_reports_no_layer_rather_than_figures() {
        // ONNX's "light" zoo models compute their weights (ConstantOfShape): nothing to round.
        let none = GptqReport::default().summary();
        assert!(none.contains("no layer rounded"), "{none}");
        assert!(!none.contains("dB"), "{none}");
        let skipped = GptqReport {
            skipped: vec![("conv".into(), "why".into())],
            ..GptqReport::default()
        };
        assert!(skipped.summary().contains("1 rounded to nearest instead"));
    }
}
