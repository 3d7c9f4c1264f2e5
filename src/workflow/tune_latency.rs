//! Latency tuning as a step: the float reference captured on the data (or reused), then the
//! placement tuned for speed on the setup's providers ([`crate::eval::latency_tuning`]).

use super::WorkflowError;
use super::reference::EvalSetup;
use crate::calib::data::model_inputs;
use crate::eval::latency_tuning::{LatencyTuning, TuneOptions, tune_latency};
use crate::jobs::JobContext;
use crate::model::Graph;
use crate::runtime::Runtime;

/// Tunes `setup.recipe` for speed, judged and timed on `setup.data`.
pub fn tune_latency_setup(
    setup: &EvalSetup,
    options: &TuneOptions,
    runtime: &Runtime,
    ctx: &JobContext,
) -> Result<LatencyTuning, WorkflowError> {
    let (reference, _) = setup.reference(runtime, ctx)?;
    let evaluator = setup.evaluator(&reference, runtime);
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
