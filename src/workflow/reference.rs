//! The float reference cache and what evaluating a recipe needs: the float model's outputs on
//! the evaluation data are captured once and reused by quantize & compare, the sensitivity
//! scan and auto-exclude, for as long as the data, providers and batch size stay the same.

use std::sync::Arc;

use super::WorkflowError;
use crate::calib::CalibrationStats;
use crate::calib::data::{DataSpec, model_inputs};
use crate::eval::compare::latency::Latency;
use crate::eval::compare::reference::Reference;
use crate::eval::compare::task::TaskOptions;
use crate::eval::search::evaluator::Evaluator;
use crate::eval::tensor_error::tensors::FloatTensors;
use crate::jobs::JobContext;
use crate::model::{Graph, Model};
use crate::recipe::Recipe;
use crate::runtime::{EpSpec, Runtime};

/// How many runs time each model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatencyRuns {
    /// Untimed runs first.
    pub warmup: usize,
    /// Timed runs.
    pub runs: usize,
}

/// The studio's latency measurement: quick, after two warm-up runs.
pub const STUDIO_LATENCY: LatencyRuns = LatencyRuns {
    warmup: 2,
    runs: 10,
};

/// The evaluation set captured on some providers with one batch size: reusable while these
/// stay.
#[derive(Debug, Clone)]
pub struct CapturedReference {
    /// The data it was captured from.
    pub data: DataSpec,
    /// The providers.
    pub eps: Vec<EpSpec>,
    /// The batch size.
    pub batch_size: usize,
    /// The output kinds and ground truth asked for.
    pub task: TaskOptions,
    /// The data and the float outputs.
    pub reference: Arc<Reference>,
    /// The float model's activations on the per-tensor samples, once captured.
    pub tensors: FloatActivations,
    /// The float model's latency, once timed, and the runs that timed it.
    pub float_latency: Option<(LatencyRuns, Latency)>,
}

/// The float model's activations on the first samples of the evaluation data, for the
/// per-tensor errors: kept with the reference when they cost at most a quarter of the
/// model's weights (an LLM's, not a CNN's), so that quantize & compare neither holds the
/// float weights beside the quantized model nor runs the float model again on the next run.
#[derive(Debug, Clone, Default)]
pub enum FloatActivations {
    /// Not captured yet.
    #[default]
    Pending,
    /// Too large to keep: the float model runs beside the quantized one.
    TooLarge,
    /// Captured.
    Kept(Arc<FloatTensors>),
}

impl CapturedReference {
    /// True when it was captured with `setup`'s data, providers, batch size and task.
    pub fn matches(&self, setup: &EvalSetup) -> bool {
        self.data == setup.data
            && self.eps == setup.eps
            && self.batch_size == setup.batch_size
            && self.task == setup.task
    }
}

/// What evaluating a recipe needs (quantize & compare, the sensitivity scan, auto-exclude).
#[derive(Debug, Clone)]
pub struct EvalSetup {
    /// The float model.
    pub model: Model,
    /// Cached statistics.
    pub stats: Arc<CalibrationStats>,
    /// The recipe evaluated.
    pub recipe: Recipe,
    /// Evaluation data.
    pub data: DataSpec,
    /// Execution providers.
    pub eps: Vec<EpSpec>,
    /// Samples per batch.
    pub batch_size: usize,
    /// Output kinds and ground truth.
    pub task: TaskOptions,
    /// A reference captured before, reused when it matches.
    pub reference: Option<CapturedReference>,
}

impl EvalSetup {
    /// The cached reference when it was captured with this setup's data, providers and
    /// batch size, else a new capture; `true` when it had to be captured.
    pub fn reference(
        &self,
        runtime: &Runtime,
        ctx: &JobContext,
    ) -> Result<(CapturedReference, bool), WorkflowError> {
        if let Some(cached) = self.reference.as_ref().filter(|c| c.matches(self)) {
            return Ok((cached.clone(), false));
        }
        let inputs = model_inputs(&Graph::build(&self.model));
        let mut source = self.data.open(&inputs)?;
        let reference = Reference::capture(
            &self.model,
            source.as_mut(),
            runtime,
            &self.eps,
            self.batch_size,
            &self.task,
            ctx,
        )?;
        let captured = CapturedReference {
            data: self.data.clone(),
            eps: self.eps.clone(),
            batch_size: self.batch_size,
            task: self.task.clone(),
            reference: Arc::new(reference),
            tensors: FloatActivations::Pending,
            float_latency: None,
        };
        Ok((captured, true))
    }

    /// The evaluator of recipes against `reference`.
    pub fn evaluator<'a>(
        &'a self,
        reference: &'a CapturedReference,
        runtime: &'a Runtime,
    ) -> Evaluator<'a> {
        Evaluator {
            float: &self.model,
            stats: &self.stats,
            reference: &reference.reference,
            runtime,
            eps: &self.eps,
        }
    }
}
