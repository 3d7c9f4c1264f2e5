//! Comparing float and quantized, as a step: `compare` on two model files (streaming, memory
//! bounded by one batch), and the studio's quantize & compare, which builds the QDQ model from
//! cached statistics and measures it against a float reference captured once. Both end in one
//! [`CompareReport`] value, which the CLI prints and the report and studio draw.

use std::sync::Arc;
use std::time::Instant;

use super::WorkflowError;
use super::reference::{CapturedReference, EvalSetup, FloatActivations};
use crate::calib::data::first::FirstSamples;
use crate::calib::data::{BatchSource, DataSpec, InputSpec, model_inputs};
use crate::eval::compare::latency::{Latency, measure_in_turn};
use crate::eval::compare::reference::OutputPair;
use crate::eval::compare::task::TaskOptions;
use crate::eval::compare::{EvalError, OutputMetrics, check_comparable, compare_outputs};
use crate::eval::tensor_error::layer_effect::layer_effects;
use crate::eval::tensor_error::tensors::{
    Float, FloatPass, FloatRun, FloatTensors, TensorErrors, tensor_errors, tensor_errors_against,
};
use crate::jobs::{JobContext, Progress};
use crate::model::{Graph, Model};
use crate::quant;
use crate::recipe::Recipe;
use crate::report::{Baseline, CompareReport, LatencyPair};
use crate::runtime::{EpSpec, Runtime};

pub use super::reference::{LatencyRuns, STUDIO_LATENCY};

/// Evaluation samples the studio's per-tensor errors (the heat map) are measured on. Every
/// activation of both models is read back for each sample, which dominates quantize & compare
/// (63 of 73 s on PP-OCR det with 16 samples of 640×640); per-tensor SQNR is stable over a
/// few samples. The output metrics still use every sample.
pub const TENSOR_SAMPLES: usize = 4;

/// The latencies of `models` on the first batch of `source`, timed in turn as `runs` says
/// (see [`measure_in_turn`]: every session is alive, as while a comparison's outputs are
/// compared).
fn time_in_turn<const N: usize>(
    models: [&Model; N],
    source: &mut dyn BatchSource,
    runtime: &Runtime,
    eps: &[EpSpec],
    batch_size: usize,
    runs: LatencyRuns,
) -> Result<[Latency; N], EvalError> {
    measure_in_turn(
        models,
        source,
        runtime,
        eps,
        batch_size,
        runs.warmup,
        runs.runs,
    )
}

/// The report of a comparison: labels of the two models and the data, what was measured, and
/// how the QDQ model was made (the recipe it carries, when this tool made it).
#[allow(clippy::too_many_arguments)] // the report's parts, each from its own stage
fn report(
    labels: (&str, &str),
    quant: &Model,
    data: &DataSpec,
    samples: usize,
    eps: &[EpSpec],
    outputs: Vec<OutputMetrics>,
    tensors: Option<TensorErrors>,
    latency: Option<LatencyPair>,
) -> CompareReport {
    CompareReport {
        float_model: labels.0.to_owned(),
        quant_model: labels.1.to_owned(),
        data: data.describe(),
        samples,
        execution_providers: eps.iter().map(ToString::to_string).collect(),
        outputs,
        tensors,
        latency,
        baseline: None,
        settings: quant::stamped_recipe(quant)
            .map(|recipe| {
                recipe
                    .summary()
                    .into_iter()
                    .map(|(label, value)| (label.to_owned(), value))
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// What `compare` measures on two models.
#[derive(Debug, Clone)]
pub struct CompareFiles {
    /// Labels of the float and quantized models (their paths as given).
    pub labels: (String, String),
    /// The evaluation data.
    pub data: DataSpec,
    /// Execution providers.
    pub eps: Vec<EpSpec>,
    /// Samples per batch.
    pub batch_size: usize,
    /// Output kinds and ground truth.
    pub task: TaskOptions,
    /// Also every quantized tensor's error.
    pub per_tensor: bool,
    /// Also latency, with these runs.
    pub latency: Option<LatencyRuns>,
}

/// Compares a float and a QDQ model on the evaluation data (streaming: memory bounded by one
/// batch); with a `baseline` (its label and model: another QDQ model of the same float model),
/// measures it on the same data too, output by output and, per tensor, layer by layer.
pub fn compare_files(
    float: &Model,
    quant: &Model,
    baseline: Option<(&str, &Model)>,
    request: &CompareFiles,
    runtime: &Runtime,
    ctx: &JobContext,
) -> Result<CompareReport, WorkflowError> {
    check_comparable(float, quant, &request.labels.1)?;
    if let Some((label, model)) = baseline {
        check_comparable(float, model, label)?;
    }
    let mut source = request.data.open(&model_inputs(&Graph::build(float)))?;
    let (eps, batch) = (&request.eps, request.batch_size);
    let models = (float, quant);
    let outputs = outputs_of(models, request, source.as_mut(), runtime, ctx)?;
    let tensors = match request.per_tensor {
        true => Some(tensors_of(models, request, source.as_mut(), runtime, ctx)?),
        false => None,
    };
    let latency = match request.latency {
        Some(runs) => {
            let [float, quantized] =
                time_in_turn([float, quant], source.as_mut(), runtime, eps, batch, runs)?;
            Some(LatencyPair { float, quantized })
        }
        None => None,
    };
    let baseline = match baseline {
        Some((label, model)) => Some(measure_baseline(
            float,
            (label, model),
            tensors.as_ref(),
            request,
            source.as_mut(),
            runtime,
            ctx,
        )?),
        None => None,
    };
    let mut report = report(
        (&request.labels.0, &request.labels.1),
        quant,
        &request.data,
        source.samples(),
        eps,
        outputs,
        tensors,
        latency,
    );
    report.baseline = baseline;
    Ok(report)
}

/// The output metrics of a (float, QDQ) pair of models as `request` asks for them.
fn outputs_of(
    (float, quant): (&Model, &Model),
    request: &CompareFiles,
    source: &mut dyn BatchSource,
    runtime: &Runtime,
    ctx: &JobContext,
) -> Result<Vec<OutputMetrics>, EvalError> {
    let (eps, batch) = (&request.eps, request.batch_size);
    compare_outputs(
        float,
        quant,
        source,
        runtime,
        eps,
        batch,
        &request.task,
        ctx,
    )
}

/// The per-tensor errors of a (float, QDQ) pair of models.
fn tensors_of(
    (float, quant): (&Model, &Model),
    request: &CompareFiles,
    source: &mut dyn BatchSource,
    runtime: &Runtime,
    ctx: &JobContext,
) -> Result<TensorErrors, EvalError> {
    let (eps, batch) = (&request.eps, request.batch_size);
    tensor_errors(float, quant, source, runtime, eps, batch, ctx)
}

/// The baseline's outputs against the float model's and, when the compared model's tensors
/// were measured, each layer's SQNR in the baseline beside the compared model's.
fn measure_baseline(
    float: &Model,
    (label, model): (&str, &Model),
    compared: Option<&TensorErrors>,
    request: &CompareFiles,
    source: &mut dyn BatchSource,
    runtime: &Runtime,
    ctx: &JobContext,
) -> Result<Baseline, WorkflowError> {
    let outputs = outputs_of((float, model), request, source, runtime, ctx)?;
    let layers = match compared {
        Some(after) => {
            let before = tensors_of((float, model), request, source, runtime, ctx)?;
            layer_effects(&before, after)
        }
        None => Vec::new(),
    };
    Ok(Baseline {
        model: label.to_owned(),
        outputs,
        layers,
    })
}

/// What quantize & compare needs: the evaluation set-up, latency or not, and the sample
/// shown side by side.
#[derive(Debug, Clone)]
pub struct CompareRequest {
    /// The model, statistics, recipe, data and providers.
    pub setup: EvalSetup,
    /// Also time both models.
    pub latency: Option<LatencyRuns>,
    /// The sample shown side by side.
    pub sample: usize,
    /// A QDQ model made already (by any tool) to measure instead of quantizing the setup's
    /// model with its recipe: the setup's model is then its float model.
    pub given: Option<Arc<Model>>,
}

/// What is measured: the QDQ model and the nodes it quantizes.
struct Candidate {
    model: Arc<Model>,
    quantized_nodes: Vec<String>,
    built: Option<super::quantize::Built>,
    target: Option<crate::recipe::Target>,
}

/// The QDQ model a comparison measures: `given` (checked against the float model, its
/// quantized nodes read off its Q/DQ structure), else the setup's model quantized with its
/// recipe from the cached statistics.
fn candidate(
    setup: &EvalSetup,
    given: Option<Arc<Model>>,
    ctx: &JobContext,
) -> Result<Candidate, WorkflowError> {
    if let Some(model) = given {
        check_comparable(&setup.model, &model, "the quantized model")?;
        let graph = Graph::build(&model);
        let quantized_nodes = quant::ops::qdq_structure(&model, &graph)
            .quantized_nodes(&graph)
            .map(|n| n.name.clone())
            .collect();
        let target = quant::stamped_recipe(&model).and_then(|r| r.target);
        return Ok(Candidate {
            model,
            quantized_nodes,
            built: None,
            target,
        });
    }
    let q = quant::quantize_with(&setup.model, Some(&setup.stats), &setup.recipe, ctx)?;
    let built = super::quantize::Built::of(&q, &setup.model);
    Ok(Candidate {
        model: Arc::new(q.model),
        quantized_nodes: q.quantized_nodes,
        built: Some(built),
        target: setup.recipe.target,
    })
}

/// Milliseconds each stage of quantize & compare took.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CompareTimings {
    /// Building the QDQ model.
    pub quantize_ms: f64,
    /// Running the float model over the evaluation data (0 when a cached reference served).
    pub reference_ms: f64,
    /// Output metrics.
    pub outputs_ms: f64,
    /// Per-tensor errors.
    pub tensors_ms: f64,
    /// Latency of both models.
    pub latency_ms: f64,
    /// The whole step.
    pub total_ms: f64,
}

/// The result of quantize & compare: the QDQ model and how it differs from the float one.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// The recipe it was built with (results are stale once the recipe changes).
    pub recipe: Recipe,
    /// The QDQ model.
    pub quantized: Arc<Model>,
    /// Nodes quantized.
    pub quantized_nodes: Vec<String>,
    /// What building the QDQ model did (none for a model quantized elsewhere).
    pub built: Option<super::quantize::Built>,
    /// The target the QDQ model was made for: the recipe's when this comparison built it,
    /// else the recipe the model carries; `None` for a model made elsewhere or without one.
    pub target: Option<crate::recipe::Target>,
    /// Per-output metrics.
    pub outputs: Vec<OutputMetrics>,
    /// Per-tensor errors (on the first [`TENSOR_SAMPLES`] samples).
    pub tensors: TensorErrors,
    /// Float and QDQ latency.
    pub latency: Option<LatencyPair>,
    /// The reference used (kept for the next run and for side-by-side samples).
    pub reference: CapturedReference,
    /// The side-by-side sample and its outputs.
    pub sample: (usize, Vec<OutputPair>),
    /// Stage timings.
    pub timings: CompareTimings,
}

impl Comparison {
    /// What this comparison was measured on, in words: how many samples of which data, on
    /// which providers.
    pub fn measured_on(&self) -> String {
        format!(
            "{} sample(s) of {} on {}",
            self.reference.reference.samples(),
            self.reference.data.describe(),
            self.reference
                .eps
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" > ")
        )
    }

    /// True when the evaluation data were random (the figures then say little about the
    /// model's accuracy).
    pub fn on_random_data(&self) -> bool {
        matches!(self.reference.data, DataSpec::Random { .. })
    }

    /// The verdict line (see [`crate::report::verdict`]).
    pub fn verdict(&self) -> String {
        crate::report::verdict(&self.outputs, self.latency.as_ref(), &self.measured_on())
    }

    /// The report of this comparison, as `qdq-studio compare --report` writes it.
    pub fn report(&self, float_model: &str, quant_model: &str) -> CompareReport {
        report(
            (float_model, quant_model),
            &self.quantized,
            &self.reference.data,
            self.reference.reference.samples(),
            &self.reference.eps,
            self.outputs.clone(),
            Some(self.tensors.clone()),
            self.latency.clone(),
        )
    }
}

fn elapsed_ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

fn stage(ctx: &JobContext, name: &str, done: u64, total: u64) {
    ctx.report(Progress {
        stage: name.to_owned(),
        done,
        total,
        ..Progress::default()
    });
}

/// The first samples of the evaluation data, on which the per-tensor errors are measured.
fn first_samples(setup: &EvalSetup, inputs: &[InputSpec]) -> Result<FirstSamples, WorkflowError> {
    Ok(FirstSamples::new(
        setup.data.open(inputs)?,
        TENSOR_SAMPLES.max(setup.batch_size),
    ))
}

/// Has from the float model, before anything is quantized, what `reference` lacks of it: its
/// activations on the per-tensor samples (kept when small enough, see [`FloatActivations`])
/// and its latency when `latency` asks for it. The float weights and the quantized ones are
/// then never held together. True when the float model ran.
fn float_side(
    setup: &EvalSetup,
    inputs: &[InputSpec],
    reference: &mut CapturedReference,
    latency: Option<LatencyRuns>,
    runtime: &Runtime,
    ctx: &JobContext,
) -> Result<bool, WorkflowError> {
    let mut ran = false;
    if matches!(reference.tensors, FloatActivations::Pending) {
        let pass = FloatTensors::capture(
            &setup.model,
            &mut first_samples(setup, inputs)?,
            runtime,
            &setup.eps,
            setup.batch_size,
            &ctx.quiet(),
        )?;
        reference.tensors = match pass {
            FloatPass::Captured(tensors) => FloatActivations::Kept(Arc::new(tensors)),
            FloatPass::Declined(_) => FloatActivations::TooLarge,
        };
        ran = true;
    }
    if let Some(runs) = latency
        && reference
            .float_latency
            .as_ref()
            .is_none_or(|(timed, _)| *timed != runs)
    {
        let mut source = setup.data.open(inputs)?;
        let [timed] = time_in_turn(
            [&setup.model],
            source.as_mut(),
            runtime,
            &setup.eps,
            setup.batch_size,
            runs,
        )?;
        reference.float_latency = Some((runs, timed));
        ran = true;
    }
    crate::util::return_freed_memory();
    Ok(ran)
}

/// Quantizes from the cached statistics (no calibration) and compares against the float
/// model on the evaluation data: outputs, every quantized tensor, optionally latency, and the
/// chosen sample side by side.
///
/// Everything the float model gives (its outputs, its activations on the per-tensor samples
/// when small enough, its latency) is had before quantizing and kept with the reference: a
/// large model's float weights and its quantized ones are never held together, and the next
/// run of another recipe does not run the float model again.
pub fn quantize_and_compare(
    request: CompareRequest,
    runtime: &Runtime,
    ctx: &JobContext,
) -> Result<Comparison, WorkflowError> {
    let CompareRequest {
        setup,
        latency,
        sample,
        given,
    } = request;
    let started = Instant::now();
    let mut timings = CompareTimings::default();
    let steps = if latency.is_some() { 5 } else { 4 };
    stage(ctx, "Running the float model", 0, steps);
    let t = Instant::now();
    let (mut reference, captured) = setup.reference(runtime, ctx)?;
    let inputs = model_inputs(&Graph::build(&setup.model));
    let ran = float_side(&setup, &inputs, &mut reference, latency, runtime, ctx)?;
    if captured || ran {
        timings.reference_ms = elapsed_ms(t);
    }
    ctx.checkpoint()?;
    let step = match given {
        Some(_) => "Checking the quantized model",
        None => "Quantizing",
    };
    stage(ctx, step, 1, steps);
    let t = Instant::now();
    let quantized = candidate(&setup, given, ctx)?;
    timings.quantize_ms = elapsed_ms(t);
    ctx.checkpoint()?;
    stage(ctx, "Comparing outputs", 2, steps);
    let t = Instant::now();
    let sample = sample.min(reference.reference.samples().saturating_sub(1));
    let (outputs, pairs) = reference.reference.compare_with_sample(
        &setup.model,
        &quantized.model,
        runtime,
        &setup.eps,
        sample,
    )?;
    crate::util::return_freed_memory();
    timings.outputs_ms = elapsed_ms(t);
    ctx.checkpoint()?;
    stage(ctx, "Measuring every tensor", 3, steps);
    let t = Instant::now();
    let run = match &reference.tensors {
        FloatActivations::Kept(tensors) => FloatRun::Captured(tensors),
        _ => FloatRun::Open,
    };
    let float = Float {
        model: &setup.model,
        run,
    };
    let tensors = tensor_errors_against(
        float,
        &quantized.model,
        &mut first_samples(&setup, &inputs)?,
        runtime,
        &setup.eps,
        setup.batch_size,
        &ctx.quiet(),
    )?;
    crate::util::return_freed_memory();
    timings.tensors_ms = elapsed_ms(t);
    let latency = match (latency, reference.float_latency.clone()) {
        (Some(runs), Some((_, float))) => {
            ctx.checkpoint()?;
            stage(ctx, "Timing the quantized model", 4, steps);
            let t = Instant::now();
            let mut source = setup.data.open(&inputs)?;
            let [quantized] = time_in_turn(
                [&quantized.model],
                source.as_mut(),
                runtime,
                &setup.eps,
                setup.batch_size,
                runs,
            )?;
            crate::util::return_freed_memory();
            timings.latency_ms = elapsed_ms(t);
            Some(LatencyPair { float, quantized })
        }
        _ => None,
    };
    timings.total_ms = elapsed_ms(started);
    Ok(Comparison {
        recipe: setup.recipe,
        quantized: quantized.model,
        quantized_nodes: quantized.quantized_nodes,
        built: quantized.built,
        target: quantized.target,
        outputs,
        tensors,
        latency,
        reference,
        sample: (sample, pairs),
        timings,
    })
}

/// One sample's outputs, float beside quantized (when the user picks another sample).
pub fn sample_outputs(
    model: &Model,
    quantized: &Model,
    reference: &CapturedReference,
    sample: usize,
    runtime: &Runtime,
) -> Result<Vec<OutputPair>, WorkflowError> {
    Ok(reference
        .reference
        .sample_outputs(model, quantized, runtime, &reference.eps, sample)?)
}
