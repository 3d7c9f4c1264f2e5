//! The studio's long-running work as job bodies: each takes what it needs by value and calls
//! one step of [`crate::workflow`] on the job thread. No pipeline logic lives here; the window
//! polls the results through [`super::task::TaskSlot`].

use std::sync::Arc;

use super::task::{TaskOutput, TaskWork};
use crate::calib::{CalibrationConfig, DataSpec};
use crate::eval::search::auto_exclude::Goal;
use crate::eval::search::latency_tuning::TuneOptions;
use crate::eval::search::sensitivity::Granularity;
use crate::eval::search::switched_scan::ScanMethod;
use crate::model::Model;
use crate::quant::Prepared;
use crate::recipe::Recipe;
use crate::runtime::Flavor;
use crate::workflow::calibrate as calibration;
use crate::workflow::compare::{self, CompareRequest};
use crate::workflow::quantize::{self, SaveRequest};
use crate::workflow::reference::{CapturedReference, EvalSetup};
use crate::workflow::runtime::{install, runtime_for_job};
use crate::workflow::sensitivity::{self, Scanned};
use crate::workflow::tune_latency::tune_latency_setup;
use crate::workflow::weight_ranges::weight_ranges_setup;

/// Calibrates the model as the quantizer sees it (`prepared` with the recipe's
/// pre-processing), for `recipe`.
pub fn calibrate(
    prepared: Prepared,
    recipe: Recipe,
    data: DataSpec,
    config: CalibrationConfig,
) -> TaskWork {
    Box::new(move |ctx| {
        let runtime = runtime_for_job(&ctx)?;
        calibration::calibrate_prepared_for_recipe(
            &prepared, &recipe, &data, &config, &runtime, &ctx,
        )
        .map(|stats| TaskOutput::Calibrated(Box::new(stats)))
    })
}

/// Quantize & compare.
pub fn quantize_and_compare(request: CompareRequest) -> TaskWork {
    Box::new(move |ctx| {
        let runtime = runtime_for_job(&ctx)?;
        compare::quantize_and_compare(request, &runtime, &ctx)
            .map(|c| TaskOutput::Compared(Box::new(c)))
    })
}

/// One sample's outputs, float beside quantized.
pub fn sample_outputs(
    model: Model,
    quantized: Arc<Model>,
    reference: CapturedReference,
    sample: usize,
) -> TaskWork {
    Box::new(move |ctx| {
        let runtime = runtime_for_job(&ctx)?;
        compare::sample_outputs(&model, &quantized, &reference, sample, &runtime)
            .map(|pairs| TaskOutput::Sample(sample, pairs))
    })
}

/// Ranks every quantized node by its cost to the outputs.
pub fn scan(setup: EvalSetup) -> TaskWork {
    Box::new(move |ctx| {
        let runtime = runtime_for_job(&ctx)?;
        let method = ScanMethod::default();
        sensitivity::scan_setup(&setup, Granularity::Node, &[], method, &runtime, &ctx)
            .map(|s| TaskOutput::Scanned(Box::new(s)))
    })
}

/// Auto-exclude to `goal`, reusing `scanned` when it is a scan of this recipe.
pub fn auto_exclude(setup: EvalSetup, scanned: Option<Scanned>, goal: Goal) -> TaskWork {
    Box::new(move |ctx| {
        let runtime = runtime_for_job(&ctx)?;
        sensitivity::auto_exclude_setup(&setup, scanned, goal, &runtime, &ctx)
            .map(|r| TaskOutput::AutoExcluded(Box::new(r)))
    })
}

/// Each weight's range (extremes or least squared error), chosen by the outputs.
pub fn weight_ranges(setup: EvalSetup) -> TaskWork {
    Box::new(move |ctx| {
        let runtime = runtime_for_job(&ctx)?;
        weight_ranges_setup(&setup, &runtime, &ctx).map(|r| TaskOutput::WeightRanges(Box::new(r)))
    })
}

/// The placement tuned for speed on the setup's provider.
pub fn tune_latency(setup: EvalSetup) -> TaskWork {
    Box::new(move |ctx| {
        let runtime = runtime_for_job(&ctx)?;
        tune_latency_setup(&setup, &TuneOptions::default(), &runtime, &ctx)
            .map(|r| TaskOutput::LatencyTuning(Box::new(r)))
    })
}

/// Builds (or reuses) the QDQ model, checks it, and writes it with its companions.
pub fn save(request: SaveRequest) -> TaskWork {
    Box::new(move |ctx| {
        let runtime = runtime_for_job(&ctx)?;
        quantize::quantize_and_save(request, &runtime, &ctx).map(|s| TaskOutput::Saved(Box::new(s)))
    })
}

/// Installs the pinned `flavor` build of ONNX Runtime into the cache.
pub fn install_runtime(flavor: Flavor) -> TaskWork {
    Box::new(move |ctx| {
        install(flavor, &ctx).map(|(version, path)| TaskOutput::Installed(version, path))
    })
}
