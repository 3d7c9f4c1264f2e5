//! The studio's long-running work, each a function run on a job thread: calibrate, quantize
//! and compare, one sample's outputs, the sensitivity scan, auto-exclude, save, and fetching
//! another ONNX Runtime build. They call the engine only; the window polls their results.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use crate::calib::data::{BatchSource, DataSpec, model_inputs};
use crate::calib::{CalibrationConfig, CalibrationStats, calibrate};
use crate::eval::reference::{OutputPair, Reference};
use crate::eval::sensitivity::{
    AutoExclude, Evaluator, Granularity, Sensitivity, Target, auto_exclude, scan,
};
use crate::eval::tensors::{TensorErrors, tensor_errors};
use crate::eval::{Latency, OutputMetrics, measure_latency};
use crate::jobs::{JobContext, Progress};
use crate::model::{Graph, Model, SaveOptions, SaveReport};
use crate::quant::{self, preprocess::preprocess};
use crate::recipe::Recipe;
use crate::report::{CompareReport, LatencyPair};
use crate::runtime::{EpSpec, FetchEvent, Flavor, LoadOptions, Runtime};

/// Timed runs per model when measuring latency in the studio (after two warm-up runs).
pub const LATENCY_RUNS: usize = 10;

/// Evaluation samples the per-tensor errors (the heat map) are measured on. Every activation
/// of both models is read back for each sample, which dominates quantize & compare (63 of 73 s
/// on PP-OCR det with 16 samples of 640×640); per-tensor SQNR is stable over a few samples.
/// The output metrics still use every sample.
pub const TENSOR_SAMPLES: usize = 4;

/// The first `limit` samples of another source.
struct FirstSamples {
    inner: Box<dyn BatchSource>,
    limit: usize,
    served: usize,
}

impl BatchSource for FirstSamples {
    fn describe(&self) -> String {
        format!(
            "the first {} samples of {}",
            self.samples(),
            self.inner.describe()
        )
    }

    fn arrays(&self) -> Vec<crate::calib::data::ArraySpec> {
        let samples = self.samples();
        self.inner
            .arrays()
            .into_iter()
            .map(|mut a| {
                if let Some(first) = a.shape.first_mut() {
                    *first = samples;
                }
                a
            })
            .collect()
    }

    fn samples(&self) -> usize {
        self.inner.samples().min(self.limit)
    }

    fn rewind(&mut self) -> Result<(), crate::calib::DataError> {
        self.served = 0;
        self.inner.rewind()
    }

    fn next_batch(
        &mut self,
        max_samples: usize,
    ) -> Result<Option<crate::calib::data::Batch>, crate::calib::DataError> {
        let left = self.samples().saturating_sub(self.served);
        if left == 0 {
            return Ok(None);
        }
        let batch = self.inner.next_batch(max_samples.min(left))?;
        if let Some(b) = &batch {
            self.served += b.samples;
        }
        Ok(batch)
    }
}

/// What a task may fail with: one readable message (the window shows it in a notice).
pub type TaskResult<T> = Result<T, String>;

fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The process's ONNX Runtime, fetched (CPU build) when none is found, with the download
/// shown as the task's progress.
pub fn runtime(ctx: &JobContext) -> TaskResult<Runtime> {
    if let Some(runtime) = crate::runtime::loaded() {
        return Ok(runtime);
    }
    let options = LoadOptions::new().map_err(text)?;
    Runtime::load(&options, &mut |event| {
        if let FetchEvent::Downloading { package, version } = event {
            ctx.report(Progress {
                stage: format!("Downloading {package} {version}"),
                ..Progress::default()
            });
        }
    })
    .map_err(|e| format!("{e:#}"))
}

/// How calibration should run.
#[derive(Debug, Clone)]
pub struct CalibrateRequest {
    /// The float model as opened.
    pub model: Model,
    /// The recipe (its pre-processing decides which tensors exist to calibrate).
    pub recipe: Recipe,
    /// The data.
    pub data: DataSpec,
    /// Execution providers, in priority order.
    pub eps: Vec<EpSpec>,
    /// Samples per batch.
    pub batch_size: usize,
    /// Use at most this many samples.
    pub max_samples: Option<usize>,
    /// Histogram bins.
    pub histogram_bins: usize,
}

/// Calibrates the model as the quantizer will see it (pre-processed, nodes named), so the
/// statistics' tensor names are the ones quantization looks up.
pub fn calibrate_model(
    request: CalibrateRequest,
    ctx: &JobContext,
) -> TaskResult<CalibrationStats> {
    let runtime = runtime(ctx)?;
    let (mut prepared, _) =
        preprocess(&request.model, &request.recipe.preprocessing).map_err(text)?;
    quant::name_nodes(&mut prepared);
    let inputs = model_inputs(&Graph::build(&prepared));
    let mut source = request.data.open(&inputs).map_err(text)?;
    let config = CalibrationConfig {
        execution_providers: request.eps,
        batch_size: request.batch_size.max(1),
        max_samples: request.max_samples,
        histogram_bins: request.histogram_bins,
        ..CalibrationConfig::default()
    };
    calibrate(&prepared, source.as_mut(), &runtime, &config, ctx).map_err(text)
}

/// The evaluation set captured on one EP with one batch size: reusable while these stay.
#[derive(Debug, Clone)]
pub struct CapturedReference {
    /// The data it was captured from.
    pub data: DataSpec,
    /// The providers.
    pub eps: Vec<EpSpec>,
    /// The batch size.
    pub batch_size: usize,
    /// The data and the float outputs.
    pub reference: Arc<Reference>,
}

impl CapturedReference {
    /// True when it was captured with these settings.
    pub fn matches(&self, data: &DataSpec, eps: &[EpSpec], batch_size: usize) -> bool {
        &self.data == data && self.eps == eps && self.batch_size == batch_size
    }
}

/// What quantize-and-compare needs: the evaluation set-up, latency or not, and the sample
/// shown side by side.
#[derive(Debug, Clone)]
pub struct CompareRequest {
    /// The model, statistics, recipe, data and providers.
    pub setup: EvalSetup,
    /// Also time both models.
    pub latency: bool,
    /// The sample shown side by side.
    pub sample: usize,
}

/// Milliseconds each stage of quantize-and-compare took.
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
    /// The whole task.
    pub total_ms: f64,
}

/// The result of quantize-and-compare: the QDQ model and how it differs from the float one.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// The recipe it was built with (results are stale once the recipe changes).
    pub recipe: Recipe,
    /// The QDQ model.
    pub quantized: Arc<Model>,
    /// Nodes quantized.
    pub quantized_nodes: Vec<String>,
    /// Per-output metrics.
    pub outputs: Vec<OutputMetrics>,
    /// Per-tensor errors.
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
    /// The report of this comparison, as `qdq-studio compare --report` writes it.
    pub fn report(&self, float_model: &str, quant_model: &str) -> CompareReport {
        CompareReport {
            float_model: float_model.to_owned(),
            quant_model: quant_model.to_owned(),
            data: describe_spec(&self.reference.data),
            samples: self.reference.reference.samples(),
            execution_providers: self.reference.eps.iter().map(ToString::to_string).collect(),
            outputs: self.outputs.clone(),
            tensors: Some(self.tensors.clone()),
            latency: self.latency.clone(),
        }
    }
}

fn describe_spec(spec: &DataSpec) -> String {
    match spec {
        DataSpec::Npz { path } | DataSpec::Images { path, .. } | DataSpec::PbFolder { path } => {
            path.display().to_string()
        }
        DataSpec::Random { samples, .. } => format!("{samples} random samples"),
    }
}

fn elapsed_ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

/// The setup's cached reference when it was captured with the same data, providers and batch
/// size, else a new capture; `true` when it had to be captured.
fn reference_for(
    setup: &EvalSetup,
    runtime: &Runtime,
    ctx: &JobContext,
) -> TaskResult<(CapturedReference, bool)> {
    if let Some(cached) = setup
        .reference
        .as_ref()
        .filter(|c| c.matches(&setup.data, &setup.eps, setup.batch_size))
    {
        return Ok((cached.clone(), false));
    }
    let inputs = model_inputs(&Graph::build(&setup.model));
    let mut source = setup.data.open(&inputs).map_err(text)?;
    let reference = Reference::capture(
        &setup.model,
        source.as_mut(),
        runtime,
        &setup.eps,
        setup.batch_size,
        ctx,
    )
    .map_err(text)?;
    let captured = CapturedReference {
        data: setup.data.clone(),
        eps: setup.eps.clone(),
        batch_size: setup.batch_size,
        reference: Arc::new(reference),
    };
    Ok((captured, true))
}

fn stage(ctx: &JobContext, name: &str, done: u64, total: u64) {
    ctx.report(Progress {
        stage: name.to_owned(),
        done,
        total,
        ..Progress::default()
    });
}

/// Quantizes from the cached statistics (no calibration) and compares against the float
/// model on the evaluation data: outputs, every quantized tensor, optionally latency, and the
/// chosen sample side by side.
pub fn quantize_and_compare(request: CompareRequest, ctx: &JobContext) -> TaskResult<Comparison> {
    let CompareRequest {
        setup: request,
        latency: measure,
        sample,
    } = request;
    let started = Instant::now();
    let mut timings = CompareTimings::default();
    let steps = if measure { 5 } else { 4 };
    stage(ctx, "Quantizing", 0, steps);
    let runtime = runtime(ctx)?;
    let quantized =
        quant::quantize(&request.model, Some(&request.stats), &request.recipe).map_err(text)?;
    timings.quantize_ms = elapsed_ms(started);
    ctx.checkpoint().map_err(|_| "cancelled".to_owned())?;
    stage(ctx, "Running the float model", 1, steps);
    let t = Instant::now();
    let (reference, captured) = reference_for(&request, &runtime, ctx)?;
    if captured {
        timings.reference_ms = elapsed_ms(t);
    }
    stage(ctx, "Comparing outputs", 2, steps);
    let t = Instant::now();
    let outputs = reference
        .reference
        .compare(&request.model, &quantized.model, &runtime, &request.eps, 0)
        .map_err(text)?;
    timings.outputs_ms = elapsed_ms(t);
    ctx.checkpoint().map_err(|_| "cancelled".to_owned())?;
    stage(ctx, "Measuring every tensor", 3, steps);
    let t = Instant::now();
    let inputs = model_inputs(&Graph::build(&request.model));
    let mut source = request.data.open(&inputs).map_err(text)?;
    let mut first = FirstSamples {
        inner: request.data.open(&inputs).map_err(text)?,
        limit: TENSOR_SAMPLES.max(request.batch_size),
        served: 0,
    };
    let tensors = tensor_errors(
        &request.model,
        &quantized.model,
        &mut first,
        &runtime,
        &request.eps,
        request.batch_size,
        &JobContext::new(ctx.cancel_token().clone(), |_| {}),
    )
    .map_err(text)?;
    timings.tensors_ms = elapsed_ms(t);
    let latency = if measure {
        ctx.checkpoint().map_err(|_| "cancelled".to_owned())?;
        stage(ctx, "Timing float and quantized", 4, steps);
        let t = Instant::now();
        let time = |model: &Model, source: &mut dyn crate::calib::data::BatchSource| {
            measure_latency(
                model,
                source,
                &runtime,
                &request.eps,
                request.batch_size,
                2,
                LATENCY_RUNS,
            )
            .map_err(text)
        };
        let float: Latency = time(&request.model, source.as_mut())?;
        let quantized_latency = time(&quantized.model, source.as_mut())?;
        timings.latency_ms = elapsed_ms(t);
        Some(LatencyPair {
            float,
            quantized: quantized_latency,
        })
    } else {
        None
    };
    let sample = sample.min(reference.reference.samples().saturating_sub(1));
    let pairs = reference
        .reference
        .sample_outputs(
            &request.model,
            &quantized.model,
            &runtime,
            &request.eps,
            sample,
        )
        .map_err(text)?;
    timings.total_ms = elapsed_ms(started);
    Ok(Comparison {
        recipe: request.recipe,
        quantized: Arc::new(quantized.model),
        quantized_nodes: quantized.quantized_nodes,
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
    ctx: &JobContext,
) -> TaskResult<Vec<OutputPair>> {
    let runtime = runtime(ctx)?;
    reference
        .reference
        .sample_outputs(model, quantized, &runtime, &reference.eps, sample)
        .map_err(text)
}

/// What evaluating a recipe needs (quantize & compare, the sensitivity scan, auto-exclude).
#[derive(Debug, Clone)]
pub struct EvalSetup {
    /// The float model.
    pub model: Model,
    /// Cached statistics.
    pub stats: Arc<CalibrationStats>,
    /// The recipe scanned.
    pub recipe: Recipe,
    /// Evaluation data.
    pub data: DataSpec,
    /// Execution providers.
    pub eps: Vec<EpSpec>,
    /// Samples per batch.
    pub batch_size: usize,
    /// A reference captured before.
    pub reference: Option<CapturedReference>,
}

/// A finished scan, with the reference it used.
#[derive(Debug, Clone)]
pub struct Scanned {
    /// The ranking.
    pub sensitivity: Sensitivity,
    /// The recipe scanned.
    pub recipe: Recipe,
    /// The reference (kept for later runs).
    pub reference: CapturedReference,
}

/// Ranks every quantized node by its cost to the outputs.
pub fn scan_nodes(request: EvalSetup, ctx: &JobContext) -> TaskResult<Scanned> {
    let runtime = runtime(ctx)?;
    let (reference, _) = reference_for(&request, &runtime, ctx)?;
    let evaluator = Evaluator {
        float: &request.model,
        stats: &request.stats,
        reference: &reference.reference,
        runtime: &runtime,
        eps: &request.eps,
    };
    let sensitivity = scan(&evaluator, &request.recipe, Granularity::Node, ctx).map_err(text)?;
    Ok(Scanned {
        sensitivity,
        recipe: request.recipe,
        reference,
    })
}

/// Auto-exclude to `target`, scanning first when `scanned` is not for this recipe.
pub fn auto_exclude_nodes(
    request: EvalSetup,
    scanned: Option<Scanned>,
    target: Target,
    max_excluded: usize,
    ctx: &JobContext,
) -> TaskResult<(AutoExclude, Scanned)> {
    let scanned = match scanned.filter(|s| s.recipe == request.recipe) {
        Some(scanned) => scanned,
        None => scan_nodes(request.clone(), ctx)?,
    };
    let runtime = runtime(ctx)?;
    let evaluator = Evaluator {
        float: &request.model,
        stats: &request.stats,
        reference: &scanned.reference.reference,
        runtime: &runtime,
        eps: &request.eps,
    };
    let result = auto_exclude(
        &evaluator,
        &request.recipe,
        &scanned.sensitivity,
        target,
        max_excluded,
        ctx,
    )
    .map_err(text)?;
    Ok((result, scanned))
}

/// What File ▸ Save quantized model writes.
#[derive(Debug, Clone)]
pub struct SaveRequest {
    /// The float model.
    pub model: Model,
    /// Cached statistics (`None` for weight-only modes).
    pub stats: Option<Arc<CalibrationStats>>,
    /// The recipe.
    pub recipe: Recipe,
    /// The QDQ model already built with this recipe, when there is one.
    pub quantized: Option<Arc<Model>>,
    /// Where to write it.
    pub path: PathBuf,
    /// Weights in `<file>.data`.
    pub external_data: bool,
    /// Also write the recipe (`<stem>.recipe.toml`) and, when given, this report
    /// (`<stem>.report.html`).
    pub companions: Option<Option<CompareReport>>,
}

/// Where a save went.
#[derive(Debug, Clone)]
pub struct Saved {
    /// The model (and external data) written.
    pub report: SaveReport,
    /// Other files written (recipe, report and its charts).
    pub companions: Vec<PathBuf>,
    /// The recipe saved with it.
    pub recipe: Recipe,
}

/// The companion file `<stem>.<suffix>` beside `model`.
pub fn companion(model: &std::path::Path, suffix: &str) -> PathBuf {
    let name = model
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name
        .strip_suffix(".onnx")
        .unwrap_or(&name)
        .trim_end_matches(".qdq");
    model.with_file_name(format!("{stem}.{suffix}"))
}

/// Builds (or reuses) the QDQ model, checks that ONNX Runtime loads it, and writes it
/// atomically, never over the input's files.
pub fn save_quantized(request: SaveRequest, ctx: &JobContext) -> TaskResult<Saved> {
    stage(ctx, "Building the QDQ model", 0, 3);
    let runtime = runtime(ctx)?;
    let quantized = match request.quantized {
        Some(model) => model,
        None => Arc::new(
            quant::quantize(&request.model, request.stats.as_deref(), &request.recipe)
                .map_err(text)?
                .model,
        ),
    };
    stage(ctx, "Checking it loads in ONNX Runtime", 1, 3);
    quant::verify_loads(&quantized, &runtime).map_err(text)?;
    stage(ctx, "Writing", 2, 3);
    let report = quantized
        .save(
            &request.path,
            &SaveOptions {
                external_data: request.external_data,
                ..SaveOptions::default()
            },
        )
        .map_err(text)?;
    let mut companions = Vec::new();
    if let Some(report_data) = request.companions {
        let recipe_path = companion(&report.model_path, "recipe.toml");
        request.recipe.save(&recipe_path).map_err(text)?;
        companions.push(recipe_path);
        if let Some(compare) = report_data {
            let html = companion(&report.model_path, "report.html");
            companions.extend(compare.write(&html).map_err(text)?);
        }
    }
    Ok(Saved {
        report,
        companions,
        recipe: request.recipe,
    })
}

/// Installs the pinned `flavor` build into the cache; the version it reports.
pub fn install_runtime(flavor: Flavor, ctx: &JobContext) -> TaskResult<(String, PathBuf)> {
    let options = LoadOptions::new().map_err(text)?;
    let path = crate::runtime::install(&options.cache_dir, flavor, &options.fetch, &mut |event| {
        let stage = match event {
            FetchEvent::Downloading { package, version } => {
                format!("Downloading {package} {version}")
            }
            FetchEvent::Verifying => "Verifying the checksum".to_owned(),
            FetchEvent::Extracting { .. } => "Unpacking".to_owned(),
            FetchEvent::Log(_) | FetchEvent::Done => return,
        };
        ctx.report(Progress {
            stage,
            ..Progress::default()
        });
    })
    .map_err(|e| format!("{e:#}"))?;
    let version = crate::runtime::check_library(&path).map_err(text)?;
    Ok((version, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn companions_sit_beside_the_model_under_its_stem() {
        let model = std::path::Path::new("/m/net.qdq.onnx");
        assert_eq!(
            companion(model, "recipe.toml"),
            PathBuf::from("/m/net.recipe.toml")
        );
        assert_eq!(
            companion(std::path::Path::new("/m/x.onnx"), "report.html"),
            PathBuf::from("/m/x.report.html")
        );
    }
}
