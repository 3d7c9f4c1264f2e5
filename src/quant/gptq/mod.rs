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
//! Each layer's effect is measured on the calibration data itself: the layer output's SQNR
//! `tr(W H Wᵀ) / tr(E H Eᵀ)` with rounding to nearest and with GPTQ.

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
    /// Output SQNR of the layer on the calibration data with the weight rounded to nearest
    /// (dB).
    pub rtn_sqnr_db: f64,
    /// The same with GPTQ's rounding (dB).
    pub gptq_sqnr_db: f64,
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
        let n = self.rounded.len().max(1) as f64;
        let mean = |f: fn(&RoundedLayer) -> f64| self.rounded.iter().map(f).sum::<f64>() / n;
        let mut text = format!(
            "gptq: {} layer(s) rounded; layer output SQNR on the calibration data {:.2} dB (nearest) → {:.2} dB (gptq), mean",
            self.rounded.len(),
            mean(|l| l.rtn_sqnr_db),
            mean(|l| l.gptq_sqnr_db),
        );
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
            Int4Method::AwqLite | Int4Method::AwqClip
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
    super::rewrite::check_finite(&layer.weight, &values)?;
    let flat = values.as_standard_layout();
    let flat = flat.as_slice().unwrap_or(&[]);
    let mut out = flat.to_vec();
    let (mut signal, mut rtn, mut gptq) = (0.0, 0.0, 0.0);
    for problem in &problems {
        let Some(solved) = solve_problem(problem, hessian, flat, &grid) else {
            return Ok(Err("its input Hessian is singular even after dampening"));
        };
        for (index, v) in problem.indices().zip(solved.targets.iter()) {
            out[index] = *v as f32;
        }
        signal += solved.signal;
        rtn += solved.rtn_error;
        gptq += solved.gptq_error;
    }
    let values = ArrayD::from_shape_vec(values.shape(), out)
        .map_err(|e| QuantError::Invalid(e.to_string()))?;
    Ok(Ok((
        values,
        RoundedLayer {
            layer: layer.name.clone(),
            weight: layer.weight.clone(),
            rtn_sqnr_db: sqnr_db(signal, rtn),
            gptq_sqnr_db: sqnr_db(signal, gptq),
        },
    )))
}

/// `10 log10(signal / noise)`, 300 dB for no noise.
fn sqnr_db(signal: f64, noise: f64) -> f64 {
    if noise <= 0.0 {
        300.0
    } else {
        (10.0 * (signal / noise).log10()).min(300.0)
    }
}

/// One problem's rounding and its output energies.
struct Solved {
    /// The values to round, in [`Problem::indices`] order.
    targets: Vec<f64>,
    signal: f64,
    rtn_error: f64,
    gptq_error: f64,
}

/// GPTQ over one group of output channels: columns in act order, the Hessian inverted, the
/// rows rounded; `None` when the Hessian cannot be factorized.
fn solve_problem(
    problem: &Problem,
    hessian: &InputHessian,
    flat: &[f32],
    grid: &Grid,
) -> Option<Solved> {
    let h = hessian.mean(problem.group)?;
    let (rows, cols) = (problem.rows, problem.cols);
    let w = Array2::from_shape_fn((rows, cols), |(r, c)| f64::from(flat[problem.index(r, c)]));
    let order = solve::act_order(&h);
    let permuted_h = Array2::from_shape_fn((cols, cols), |(i, j)| h[[order[i], order[j]]]);
    let permuted_w = Array2::from_shape_fn((rows, cols), |(r, i)| w[[r, order[i]]]);
    let u = solve::stable_inverse_factor(&permuted_h)?;
    let fake =
        |r: usize, i: usize, v: f64| f64::from(grid.fake(problem.index(r, order[i]), v as f32));
    let permuted_targets = solve::round(&permuted_w, &u, &fake);
    let mut targets = Array2::<f64>::zeros((rows, cols));
    for (i, &c) in order.iter().enumerate() {
        targets.column_mut(c).assign(&permuted_targets.column(i));
    }
    let error = |from: &Array2<f64>| {
        Array2::from_shape_fn((rows, cols), |(r, c)| {
            f64::from(grid.fake(problem.index(r, c), from[[r, c]] as f32)) - w[[r, c]]
        })
    };
    Some(Solved {
        signal: solve::output_error(&w, &h),
        rtn_error: solve::output_error(&error(&w), &h),
        gptq_error: solve::output_error(&error(&targets), &h),
        targets: targets.iter().copied().collect(),
    })
}
