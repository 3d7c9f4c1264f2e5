//! Calibration as a step: the data opened against the model's inputs, then the model run as
//! the quantizer will see it (nodes named, pre-processed), so the statistics' tensor names are
//! the ones quantization looks up.

use std::collections::HashSet;
use std::path::Path;

use super::WorkflowError;
use crate::calib::channels::{ChannelSampling, DEFAULT_SAMPLE_ROWS};
use crate::calib::data::images::Preprocess;
use crate::calib::data::{DataSpec, InputSpec, model_inputs, parse_shapes};
use crate::calib::range::RangeMethod;
use crate::calib::{CalibrationConfig, CalibrationStats};
use crate::jobs::JobContext;
use crate::model::Model;
use crate::quant::Prepared;
use crate::quant::plan::{Plan, TensorRole};
use crate::recipe::{Int4Method, Preprocessing, QuantMode, Recipe};
use crate::runtime::Runtime;

/// Samples of random data when a face gives no number.
pub const RANDOM_SAMPLES: usize = 16;

/// The warning every face gives when it calibrates on random data.
pub const RANDOM_DATA_WARNING: &str =
    "no calibration data given: calibrating on random data (ranges will not be representative)";

/// The data at `path` (a .npz/.npy file, an image folder or ONNX Runtime test data), or
/// `samples` samples of random data shaped by `shapes` (`in:1x3x224x224,...`) when there is no
/// path; the second value is true for random data, which faces warn about.
pub fn data_or_random(
    path: Option<&Path>,
    images: Preprocess,
    shapes: Option<&str>,
    samples: usize,
) -> Result<(DataSpec, bool), WorkflowError> {
    Ok(match path {
        Some(path) => (DataSpec::from_path(path, images), false),
        None => (
            DataSpec::Random {
                samples,
                shapes: shapes.map(parse_shapes).transpose()?.unwrap_or_default(),
                seed: 0,
            },
            true,
        ),
    })
}

/// The int4 method for random data, when the user chose none: a token model keeps the AWQ search,
/// on random token data as ModelOpt-Windows does (valid ids reach the real activation
/// outliers: +3.9 dB over rounding on the outlier decoder of tests/int4.rs); any other model
/// rounds to nearest (rtn_dq), since random floats are not representative and AWQ fitted to
/// them can do worse than plain rounding. Returns the note a face shows, `None` when the
/// recipe's method needs no activations.
pub fn int4_method_without_data(recipe: &mut Recipe, inputs: &[InputSpec]) -> Option<String> {
    if recipe.mode != QuantMode::Int4 || !recipe.int4_method.needs_activations() {
        return None;
    }
    if crate::calib::data::roles::is_token_model(inputs) {
        return Some(format!(
            "int4 without calibration data: {} on random token data; give --calibration_data_path or --calibration_text for representative scales",
            recipe.int4_method.name()
        ));
    }
    recipe.int4_method = Int4Method::RtnDq;
    Some(
        "int4 without calibration data: rounding to nearest (rtn_dq); give --calibration_data_path or --calibration_text for awq_full, or ask for it with --calibration_method awq_full (on random data)".to_owned(),
    )
}

/// One line saying what random `data` gives a token model's inputs (ids inside the vocabulary,
/// masks of ones, an empty cache, see [`crate::calib::data::roles`]), each with its shape
/// after the batch axis; `None` for other data or models.
pub fn random_token_line(inputs: &[InputSpec], data: &DataSpec) -> Option<String> {
    let DataSpec::Random { shapes, .. } = data else {
        return None;
    };
    if !crate::calib::data::roles::is_token_model(inputs) {
        return None;
    }
    let defaults = crate::calib::data::random::default_shapes(inputs);
    let parts: Vec<String> = inputs
        .iter()
        .map(|input| {
            let shape = shapes
                .get(&input.name)
                .or_else(|| defaults.get(&input.name));
            let sizes = shape.map_or_else(String::new, |dims| {
                let rest: Vec<String> = dims.iter().skip(1).map(usize::to_string).collect();
                format!(" [n, {}]", rest.join(", "))
            });
            format!("{}{sizes}: {}", input.name, input.role.describe())
        })
        .collect();
    Some(format!("random token data: {}", parts.join("; ")))
}

/// The inputs calibration feeds (the same before and after pre-processing).
pub fn inputs(model: &Model) -> Vec<InputSpec> {
    model_inputs(&crate::model::Graph::build(model))
}

/// Calibrates `model` as the quantizer sees it after `preprocessing`.
pub fn calibrate(
    model: &Model,
    preprocessing: &Preprocessing,
    data: &DataSpec,
    config: &CalibrationConfig,
    runtime: &Runtime,
    ctx: &JobContext,
) -> Result<CalibrationStats, WorkflowError> {
    let prepared = Prepared::new(model, preprocessing)?;
    calibrate_prepared(&prepared, data, config, runtime, ctx)
}

/// `config` adapted to what `recipe` needs: the per-channel activations its int4 method
/// searches on (AWQ), and for weight-only int4 only those tensors (nothing else is
/// quantized, so nothing else needs a range).
pub fn config_for_recipe(
    config: &CalibrationConfig,
    prepared: &Prepared,
    recipe: &Recipe,
) -> CalibrationConfig {
    let mut config = config.clone();
    config.input_means = crate::quant::bias_correction::mean_specs(prepared, recipe);
    config.input_hessians = crate::quant::gptq::hessian_specs(prepared, recipe);
    let mut sampled = crate::quant::int4::activations_to_sample(prepared, recipe);
    sampled.extend(crate::quant::smooth::activations_to_smooth(
        prepared, recipe,
    ));
    // Every tensor a technique reads (the layers' inputs, the sampled activations).
    let mut needed: Vec<String> = sampled.clone();
    let read = config.input_means.iter().map(|s| &s.tensor);
    for tensor in read.chain(config.input_hessians.iter().map(|s| &s.tensor)) {
        if !needed.contains(tensor) {
            needed.push(tensor.clone());
        }
    }
    if recipe.mode == QuantMode::Int4 && !needed.is_empty() {
        // Nothing else is quantized, so nothing else needs a range.
        config.tensors = Some(needed);
        config.histogram_bins = 0;
        config.ort_parity = None;
    } else if let Some(list) = config.tensors.as_mut() {
        let missing: Vec<String> = needed.into_iter().filter(|t| !list.contains(t)).collect();
        list.extend(missing);
    }
    if sampled.is_empty() {
        return config;
    }
    config.channels = Some(ChannelSampling {
        tensors: sampled,
        rows: DEFAULT_SAMPLE_ROWS,
    });
    config
}

/// Whether `recipe`'s activation ranges read histograms: a range method other than MinMax,
/// its own or a tensor's, or the layer-wise range choice, which tries them all. Without them,
/// calibration keeps the extremes only, and building every tensor's histogram would cost
/// more than the model's run (see `benches/default_path`).
pub fn needs_histograms(recipe: &Recipe) -> bool {
    recipe.mode != QuantMode::Int4
        && (recipe.calibration_method.needs_histogram()
            || recipe.layerwise_range
            || recipe
                .tensor_overrides
                .values()
                .any(|o| o.method.as_ref().is_some_and(RangeMethod::needs_histogram)))
}

/// The `candidates` (calibration's tensors, in graph order) whose statistics quantizing the
/// prepared model with `plan` reads: those the
/// plan quantizes like an activation (its own range, or the tensor whose scale it shares),
/// when planned before calibration with every tensor of unknown type taken as float (see
/// [`Prepared::plan_before_calibration`]), the Convs' outputs a folded HardSigmoid left
/// (checked against the recipe's simplification), and the inputs of Softmax-like ops (their
/// rank decides whether the opset may be raised).
///
/// A one-shot quantize observes only these: a session with every tensor as an output costs
/// twice the float pass on a CNN and grows with the graph (ONNX Runtime's session over
/// 100,000 outputs took 70 s), and most of a transformer's tensors are never quantized.
pub fn planned_tensors(prepared: &Prepared, plan: &Plan, candidates: &[String]) -> Vec<String> {
    let mut wanted: HashSet<&str> = HashSet::new();
    for (name, role) in &plan.roles {
        match role {
            TensorRole::Activation => {
                wanted.insert(name);
            }
            TensorRole::Shared(source) => {
                wanted.insert(name);
                wanted.insert(source);
            }
            _ => {}
        }
    }
    wanted.extend(
        prepared
            .report
            .simplified
            .unclipped
            .iter()
            .map(String::as_str),
    );
    let graph = &prepared.graph;
    let softmax_inputs = graph
        .nodes()
        .iter()
        .filter(|n| crate::quant::opset::SOFTMAX_LIKE.contains(&n.op_type.as_str()))
        .filter_map(|n| n.inputs.first());
    wanted.extend(softmax_inputs.map(String::as_str));
    candidates
        .iter()
        .filter(|t| wanted.contains(t.as_str()))
        .cloned()
        .collect()
}

/// Which tensors a calibration for a recipe observes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observed {
    /// Every float tensor: statistics to keep, for other recipes or the studio's views.
    Every,
    /// Only the tensors the recipe's plan reads (see [`planned_tensors`]) and what its
    /// techniques need: statistics used once, by the quantize that asked for them.
    Planned,
}

/// Calibrates `model` for `recipe` (see [`config_for_recipe`]), observing what `observed`
/// says. [`Observed::Planned`] refuses a plan that quantizes nothing before any run, adds a
/// note saying what was observed, and marks the statistics `planned_only`.
pub fn calibrate_for_recipe(
    model: &Model,
    recipe: &Recipe,
    data: &DataSpec,
    config: &CalibrationConfig,
    runtime: &Runtime,
    ctx: &JobContext,
    observed: Observed,
) -> Result<CalibrationStats, WorkflowError> {
    let prepared = Prepared::new(model, &recipe.prepared_options())?;
    if observed == Observed::Every || config.tensors.is_some() {
        return calibrate_prepared_for_recipe(&prepared, recipe, data, config, runtime, ctx);
    }
    let plan = prepared.plan_before_calibration(recipe);
    // A plan that quantizes nothing stays empty whatever calibration finds: no run.
    crate::quant::refuse_empty_plan(&prepared, recipe, &plan, None)?;
    let every = crate::calib::runner::calibration_tensors(&prepared.graph, None);
    let planned = planned_tensors(&prepared, &plan, &every);
    if planned.is_empty() {
        // Weights only (int4): what its techniques read is chosen by `config_for_recipe`.
        return calibrate_prepared_for_recipe(&prepared, recipe, data, config, runtime, ctx);
    }
    let note = format!(
        "observed the {} tensor(s) the plan quantizes, of the {} a full calibration observes (statistics for this quantize only; `calibrate` keeps every tensor's)",
        planned.len(),
        every.len()
    );
    let config = CalibrationConfig {
        tensors: Some(planned),
        ..config.clone()
    };
    let mut stats = calibrate_prepared_for_recipe(&prepared, recipe, data, &config, runtime, ctx)?;
    stats.info.notes.push(note);
    stats.info.planned_only = true;
    Ok(stats)
}

/// Calibrates a model already prepared with `recipe`'s pre-processing, for `recipe`: what
/// its techniques need gathered (see [`config_for_recipe`]), SmoothQuant's search and second
/// pass, the layer-wise range choice. The CLI and the studio both calibrate through it.
pub fn calibrate_prepared_for_recipe(
    prepared: &Prepared,
    recipe: &Recipe,
    data: &DataSpec,
    config: &CalibrationConfig,
    runtime: &Runtime,
    ctx: &JobContext,
) -> Result<CalibrationStats, WorkflowError> {
    // Both faces refuse a quantized model before a calibration that could not serve it.
    crate::quant::refuse_quantized(&prepared.graph)?;
    let first = config_for_recipe(config, prepared, recipe);
    let mut stats = calibrate_prepared(prepared, data, &first, runtime, ctx)?;
    let smoothing = crate::quant::smooth::search(prepared, recipe, &stats, ctx)?;
    if !smoothing.is_empty() {
        // The smoothed activations have new values: a second pass observes them.
        let float_type = |name: &str| {
            stats
                .tensors
                .get(name)
                .and_then(|t| t.dtype)
                .unwrap_or(crate::model::DataType::Float32)
        };
        let observing =
            crate::quant::smooth::observing_model(&prepared.model, &smoothing, float_type);
        let second = CalibrationConfig {
            tensors: Some(
                smoothing
                    .keys()
                    .map(|a| crate::quant::smooth::observed_name(a))
                    .collect(),
            ),
            channels: None,
            batch_size: config.batch_size.max(1),
            ..config.clone()
        };
        let mut source = data.open(&model_inputs(&prepared.graph))?;
        let observed = crate::calib::calibrate(&observing, source.as_mut(), runtime, &second, ctx)?;
        crate::quant::smooth::merge(&mut stats, observed, smoothing);
    }
    if recipe.layerwise_range {
        choose_ranges(prepared, recipe, &mut stats, data, config, runtime, ctx)?;
    }
    Ok(stats)
}

/// Chooses each activation's range method layer-wise (see
/// [`crate::eval::search::range_choice`]) and records the choices in `stats`.
fn choose_ranges(
    prepared: &Prepared,
    recipe: &Recipe,
    stats: &mut CalibrationStats,
    data: &DataSpec,
    config: &CalibrationConfig,
    runtime: &Runtime,
    ctx: &JobContext,
) -> Result<(), WorkflowError> {
    let candidates = crate::quant::layerwise::candidates(prepared, recipe, stats);
    let ranks =
        |tensor: &str| -> Option<usize> { stats.tensors.get(tensor)?.shapes.first().map(Vec::len) };
    let how = crate::eval::search::range_choice::Measurement {
        runtime,
        eps: &config.execution_providers,
        batch_size: config.batch_size.max(1),
        ranks: &ranks,
    };
    let mut source = data.open(&model_inputs(&prepared.graph))?;
    let choices = crate::eval::search::range_choice::choose(
        &prepared.model,
        &prepared.graph,
        &candidates,
        source.as_mut(),
        &how,
        ctx,
    )?;
    stats.range_choices = choices.into_iter().collect();
    stats.info.layerwise_ranges = true;
    Ok(())
}

/// Calibrates a model already prepared.
pub fn calibrate_prepared(
    prepared: &Prepared,
    data: &DataSpec,
    config: &CalibrationConfig,
    runtime: &Runtime,
    ctx: &JobContext,
) -> Result<CalibrationStats, WorkflowError> {
    let mut source = data.open(&model_inputs(&prepared.graph))?;
    let config = CalibrationConfig {
        batch_size: config.batch_size.max(1),
        ..config.clone()
    };
    let mut stats =
        crate::calib::calibrate(&prepared.model, source.as_mut(), runtime, &config, ctx)?;
    stats.info.equalized = prepared.options.equalize;
    Ok(stats)
}

/// Opens `data` for a model with `inputs` and checks that it feeds them in batches of
/// `batch_size`: a summary line (`32 samples · x: float32 [32, 3, 48, 192]`), or every
/// mismatch.
pub fn check_data(
    data: &DataSpec,
    inputs: &[InputSpec],
    batch_size: usize,
) -> Result<String, WorkflowError> {
    let source = data.open(inputs)?;
    let arrays = source.arrays();
    let samples = source.samples();
    let batch = crate::calib::data::choose_batch(inputs, batch_size);
    let usable = batch.usable(samples, source.whole_feeds());
    crate::calib::data::validate_source(inputs, source.as_ref(), usable, batch.size)?;
    let arrays: Vec<String> = arrays
        .iter()
        .map(|a| {
            let dims: Vec<String> = a.shape.iter().map(usize::to_string).collect();
            format!("{}: {} [{}]", a.name, a.dtype, dims.join(", "))
        })
        .collect();
    let notes = source.notes();
    let notes = notes.iter().map(|n| format!(" · {n}")).collect::<String>();
    Ok(format!("{samples} samples · {}{notes}", arrays.join(" · ")))
}

/// An error for a histogram bin count calibration cannot use (not a multiple of 4, or
/// under 8).
pub fn check_bins(bins: usize) -> Result<(), WorkflowError> {
    if bins >= 8 && bins.is_multiple_of(4) {
        Ok(())
    } else {
        Err(WorkflowError::Settings(format!(
            "--num_bins must be a multiple of 4 and at least 8, got {bins}"
        )))
    }
}

/// One line on a finished calibration: tensors, samples, batches, times and providers, and
/// whether the statistics hold histograms (without them only MinMax ranges can be drawn).
pub fn summary(stats: &CalibrationStats) -> String {
    let info = &stats.info;
    let held = if info.histogram_bins == 0 {
        "; extremes only, no histograms (MinMax ranges only)"
    } else {
        ""
    };
    format!(
        "calibrated {} tensors on {} samples in {} batches ({:.2} s: model {:.2} s, statistics {:.2} s; {} via ONNX Runtime {}){held}",
        stats.tensors.len(),
        info.samples,
        info.batches,
        info.seconds,
        info.run_seconds,
        info.stats_seconds,
        info.execution_providers.join(" > "),
        info.runtime_version
    )
}
