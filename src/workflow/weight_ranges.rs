//! The measured weight-range choice as a step: the float reference captured on the data (or
//! reused), then each weight's range chosen by the model's outputs
//! ([`crate::eval::search::weight_ranges`]).

use super::WorkflowError;
use super::reference::EvalSetup;
use crate::eval::search::weight_ranges::{WeightRanges, choose_weight_ranges};
use crate::jobs::JobContext;
use crate::runtime::Runtime;

/// Chooses the weight ranges of `setup.recipe` on `setup.data`.
pub fn weight_ranges_setup(
    setup: &EvalSetup,
    runtime: &Runtime,
    ctx: &JobContext,
) -> Result<WeightRanges, WorkflowError> {
    let (reference, _) = setup.reference(runtime, ctx)?;
    let evaluator = setup.evaluator(&reference, runtime);
    Ok(choose_weight_ranges(&evaluator, &setup.recipe, ctx)?)
}
