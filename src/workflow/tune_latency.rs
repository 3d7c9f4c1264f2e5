//! Latency tuning as a step: the float reference captured on the data (or reused), then the
//! placement tuned for speed on the setup's providers ([`crate::eval::search::latency_tuning`]).

use super::WorkflowError;
use super::reference::EvalSetup;
use crate::calib::data::model_inputs;
use crate::eval::search::latency_tuning::{LatencyTuning, TuneOptions, tune_latency};
use crate::jobs::JobContext;
use crate::model::Graph;
use crate::runtime::Runtime;

/// Tunes `setup.recipe` for speed, judged and timed on `setup.data`, on the provider of the
/// recipe's target (the setup's providers for a recipe without one); refused for a target
/// whose provider this build cannot run.
pub fn tune_latency_setup(
    setup: &EvalSetup,
    options: &TuneOptions,
    runtime: &Runtime,
    ctx: &JobContext,
) -> Result<LatencyTuning, WorkflowError> {
    let eps = match setup.recipe.target {
        None => setup.eps.clone(),
        Some(target) => vec![target.tuning_ep().ok_or_else(|| {
            WorkflowError::Settings(format!(
                "tuning for speed times the model on its target's provider: target {} runs on an NPU provider this build cannot run (choose cpu, cpu-avx2, tensorrt, directml or openvino to tune)",
                target.name()
            ))
        })?],
    };
    let (reference, _) = setup.reference(runtime, ctx)?;
    let mut evaluator = setup.evaluator(&reference, runtime);
    evaluator.eps = &eps;
    let mut source = setup
        .data
        .open(&model_inputs(&Graph::build(&setup.model)))?;
    Ok(tune_latency(
        &evaluator,
        &setup.recipe,
        &mut *source,
        options,
        ctx,
    )?)
}
