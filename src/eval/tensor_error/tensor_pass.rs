//! Running the float and the quantized model for the per-tensor errors without holding both
//! models' sessions at once when that would cost more than it must.
//!
//! The float model's session holds the float weights; the tensors it exposes for a batch are
//! the activations. For a CNN the activations are large and the weights small; for an LLM the
//! opposite (4.4 GB of weights against under 1 GB of activations for a few short prompts).
//! So when the float model's activations over the per-tensor samples cost at most a quarter
//! of its weights, they are captured in one float pass ([`FloatTensors`]) and its session is
//! closed before the quantized model's opens (quantize & compare captures them before it
//! quantizes, and keeps them with the float reference for the next run). Otherwise both
//! sessions stay open and the batches stream one at a time.

use std::collections::HashMap;

use ndarray::{ArrayD, CowArray, IxDyn};
use ort::session::{Session, SessionOutputs};

use crate::calib::data::{BatchSource, sample_shapes};
use crate::calib::runner::{augmented_model, calibration_tensors};
use crate::eval::compare::EvalError;
use crate::eval::tensor_error::observed_batches::ObservedBatches;
use crate::jobs::{JobContext, RateMeter};
use crate::model::{Graph, Model};
use crate::quant::cpu_session_options;
use crate::runtime::value::{float_view, owned_inputs, session_inputs};
use crate::runtime::{EpSpec, Optimization, Runtime, SessionOptions};

/// One model's exposed float tensors for one batch, by name.
pub type Outputs = HashMap<String, ArrayD<f32>>;

/// One model's exposed float tensors for one batch, by name, read where they lie: views of a
/// run's float32 outputs or of captured tensors, copies only of outputs of another float type.
pub type Views<'a> = HashMap<String, CowArray<'a, f32, IxDyn>>;

/// The float tensors named in `names` among a run's `outputs` or, for graph inputs (which
/// the observing model does not list as outputs), among the `inputs` it was fed, as
/// [`Views`].
pub fn views<'a>(
    outputs: &'a SessionOutputs<'_>,
    inputs: &'a [(String, ort::value::DynValue)],
    names: &[String],
) -> Views<'a> {
    let outputs = crate::runtime::value::NamedOutputs::new(outputs);
    names
        .iter()
        .filter_map(|name| {
            let value = outputs.get(name).or_else(|| fed(inputs, name))?;
            Some((name.clone(), float_view(value)?.1))
        })
        .collect()
}

/// The value fed as the input `name`, if any.
pub(super) fn fed<'a>(
    inputs: &'a [(String, ort::value::DynValue)],
    name: &str,
) -> Option<&'a ort::value::DynValue> {
    inputs.iter().find(|(n, _)| n == name).map(|(_, v)| v)
}

/// Views of tensors held in memory.
fn borrowed(outputs: &Outputs) -> Views<'_> {
    outputs
        .iter()
        .map(|(name, array)| (name.clone(), array.view().into()))
        .collect()
}

/// Runs `session` on `inputs` and keeps the float tensors named in `names`, by name.
pub fn collect(
    session: &mut Session,
    inputs: &[(String, ort::value::DynValue)],
    names: &[String],
    batch: usize,
    model: &'static str,
) -> Result<Outputs, EvalError> {
    let values = crate::eval::compare::run_outputs(session, inputs, names, batch, model)?;
    Ok(names
        .iter()
        .zip(values)
        .filter_map(|(name, value)| {
            let value = value.or_else(|| Some(float_view(fed(inputs, name)?)?.1.into_owned()))?;
            Some((name.clone(), value))
        })
        .collect())
}

/// Bytes of f32 tensors of these lengths.
fn f32_bytes(lengths: impl Iterator<Item = usize>) -> u64 {
    lengths
        .map(|n| (n * std::mem::size_of::<f32>()) as u64)
        .sum()
}

/// Bytes the tensors of one batch hold.
pub fn outputs_bytes(outputs: &Outputs) -> u64 {
    f32_bytes(outputs.values().map(ArrayD::len))
}

/// Bytes the views of one run hold.
pub fn views_bytes(views: &Views<'_>) -> u64 {
    f32_bytes(views.values().map(CowArray::len))
}

/// Whether to keep the float tensors of every batch (and close the float session) rather
/// than keep the session open beside the quantized one: true when the tensors of `samples`
/// samples, at `per_sample` bytes each, cost at most a quarter of the model's `weights`.
pub fn capture_all(per_sample: u64, samples: usize, weights: u64) -> bool {
    per_sample.saturating_mul(samples as u64) <= weights / 4
}

/// The session options of the per-tensor passes: no graph optimizations, so every tensor
/// stays observable (as onnxruntime's `qdq_loss_debug`).
pub fn observing(model: &Model) -> SessionOptions {
    SessionOptions {
        optimization: Optimization::Disable,
        ..cpu_session_options(model)
    }
}

/// A session over `model` with `names` exposed as outputs, for the batches of `source` (its
/// inputs declare their sample shape).
pub fn observing_session(
    model: &Model,
    names: &[String],
    source: &dyn BatchSource,
    runtime: &Runtime,
    eps: &[EpSpec],
    label: &'static str,
) -> Result<Session, EvalError> {
    let graph = Graph::build(model);
    let shapes = sample_shapes(source);
    // Graph inputs are read from the values fed ([`views`]): OpenVINO refuses a graph input
    // that is also an output.
    let encoded = augmented_model(model, &graph, names, &shapes).map_err(|e| EvalError::Run {
        batch: 0,
        model: label,
        reason: e.to_string(),
    })?;
    Ok(runtime.session_from_model(&encoded, eps, observing(model))?)
}

/// Every float activation of the float model over the per-tensor samples, captured in one
/// pass (see the module docs for when).
#[derive(Debug, Clone)]
pub struct FloatTensors {
    /// The batch size the comparison asked for.
    batch_size: usize,
    /// The samples of each captured batch ([`ObservedBatches`]): the quantized pass runs the
    /// same ones.
    sizes: Vec<usize>,
    batches: Vec<Outputs>,
}

impl FloatTensors {
    /// Runs `float` over `source` in batches of `batch_size`, exposing every float
    /// activation: the tensors of every batch when they cost at most a quarter of the
    /// model's weights (decided on the first batch), else the session, declined.
    pub fn capture(
        float: &Model,
        source: &mut dyn BatchSource,
        runtime: &Runtime,
        eps: &[EpSpec],
        batch_size: usize,
        ctx: &JobContext,
    ) -> Result<FloatPass, EvalError> {
        let batch_size = batch_size.max(1);
        let names = calibration_tensors(&Graph::build(float), None);
        let mut session = observing_session(float, &names, &*source, runtime, eps, "float")?;
        let mut sizes = ObservedBatches::new(float, batch_size);
        let meter = RateMeter::new("float tensors", source.samples() as u64);
        let mut captured = Vec::new();
        let mut done = 0;
        source.rewind()?;
        while let Some(batch) = source.next_batch(sizes.next_size())? {
            ctx.checkpoint().map_err(|_| EvalError::Cancelled)?;
            let owned = owned_inputs(batch.inputs)?;
            let outputs = collect(&mut session, &owned, &names, batch.index, "float")?;
            let bytes = outputs_bytes(&outputs);
            if captured.is_empty() {
                let per_sample = bytes.div_ceil(batch.samples.max(1) as u64);
                if !capture_all(per_sample, source.samples(), float.initializer_bytes()) {
                    return Ok(FloatPass::Declined(session));
                }
            }
            sizes.ran(batch.samples, bytes);
            captured.push(outputs);
            done += batch.samples;
            ctx.report(meter.progress(done as u64, format!("batch {}", batch.index + 1)));
        }
        Ok(FloatPass::Captured(FloatTensors {
            batch_size,
            sizes: sizes.taken().to_vec(),
            batches: captured,
        }))
    }

    /// Bytes the captured tensors hold.
    pub fn bytes(&self) -> u64 {
        self.batches.iter().map(outputs_bytes).sum()
    }

    /// True when the tensors were captured for a comparison in batches of `batch_size`.
    pub fn fits(&self, batch_size: usize) -> bool {
        self.batch_size == batch_size.max(1)
    }

    /// The batches of a pass that runs beside these tensors: the captured ones.
    pub fn batches(&self) -> ObservedBatches {
        ObservedBatches::replaying(&self.sizes)
    }
}

/// What [`FloatTensors::capture`] ended with.
pub enum FloatPass {
    /// The activations of every batch.
    Captured(FloatTensors),
    /// Too large to keep: the session, which exposes every float activation, to run beside
    /// the quantized one instead.
    Declined(Session),
}

/// How a per-tensor comparison has the float model's activations.
pub enum FloatRun<'a> {
    /// Captured before on the same data ([`FloatTensors::capture`]).
    Captured(&'a FloatTensors),
    /// From this session (exposing at least the tensors compared), run batch by batch.
    Session(Session),
    /// From a session opened for the comparison.
    Open,
}

/// The float model's side of the quantized pass.
pub enum FloatSide<'a> {
    /// Every batch's tensors, captured before: the next batch's index.
    Captured(&'a FloatTensors, usize),
    /// The float session, run batch by batch beside the quantized one.
    Live(Session),
}

impl FloatSide<'_> {
    /// Calls `read` with the float tensors of the next batch (`inputs`, numbered `batch`):
    /// the captured ones, or views of the float session's outputs for it, which live only as
    /// long as the call.
    pub fn with_next<T>(
        &mut self,
        inputs: &[(String, ort::value::DynValue)],
        names: &[String],
        batch: usize,
        read: impl FnOnce(&Views<'_>) -> T,
    ) -> Result<T, EvalError> {
        match self {
            FloatSide::Captured(tensors, next) => {
                let outputs = tensors.batches.get(*next).ok_or_else(|| EvalError::Run {
                    batch,
                    model: "float",
                    reason: "the data gave more batches than when the float tensors were captured"
                        .to_owned(),
                })?;
                *next += 1;
                Ok(read(&borrowed(outputs)))
            }
            FloatSide::Live(session) => {
                let outputs = run(session, inputs, batch, "float")?;
                Ok(read(&views(&outputs, inputs, names)))
            }
        }
    }
}

/// Runs `session` on `inputs` (batch number `batch` of `model`, for the error).
pub fn run<'s>(
    session: &'s mut Session,
    inputs: &[(String, ort::value::DynValue)],
    batch: usize,
    model: &'static str,
) -> Result<SessionOutputs<'s>, EvalError> {
    session
        .run(session_inputs(inputs))
        .map_err(|e| EvalError::Run {
            batch,
            model,
            reason: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensors_are_kept_only_when_they_cost_at_most_a_quarter_of_the_weights() {
        assert!(capture_all(100, 4, 1600));
        assert!(!capture_all(100, 5, 1600));
        assert!(!capture_all(u64::MAX, 2, 1600));
    }

    #[test]
    fn outputs_bytes_counts_every_value() {
        let mut outputs = Outputs::new();
        outputs.insert("a".into(), ArrayD::zeros(ndarray::IxDyn(&[2, 3])));
        outputs.insert("b".into(), ArrayD::zeros(ndarray::IxDyn(&[4])));
        assert_eq!(outputs_bytes(&outputs), 40);
    }

    #[test]
    fn captured_tensors_run_out_with_an_error_not_a_panic() {
        let tensors = FloatTensors {
            batch_size: 1,
            sizes: vec![1],
            batches: vec![Outputs::new()],
        };
        let mut side = FloatSide::Captured(&tensors, 0);
        assert!(side.with_next(&[], &[], 0, |_| ()).is_ok());
        assert!(side.with_next(&[], &[], 1, |_| ()).is_err());
    }
}
