//! Running calibration: augment the model so every calibrated tensor is an output, run the
//! data through ONNX Runtime batch by batch on the chosen execution providers, and fold each
//! batch into per-tensor statistics in parallel.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use ndarray::{ArrayViewD, CowArray, IxDyn};
use rayon::prelude::*;

use super::channels::ChannelStats;
use super::data::{
    BatchChoice, BatchSource, choose_batch, model_inputs, sample_shapes, validate_source,
};
use super::histogram::{AbsHistogram, Histogram};
use super::input_hessians::InputHessian;
use super::input_means::InputMean;
use super::memory;
use super::stats::{BatchSummary, CalibrationInfo, CalibrationStats, TensorStats};
use super::{CalibError, CalibrationConfig};
use crate::jobs::{JobContext, RateMeter};
use crate::model::builder::any_shape_info;
use crate::model::pinned::pin_sample_shapes;
use crate::model::proto::ValueInfoProto;
use crate::model::{DataType, Graph, Model, SessionModel, TensorKind};
use crate::runtime::value::{float_view, owned_inputs, session_inputs};
use crate::runtime::{Optimization, Runtime, RuntimeError, SessionOptions};

/// The tensors calibration observes: every float (or untyped) tensor read or written by a
/// node, that is not a weight. Ordered as the graph computes them.
pub fn calibration_tensors(graph: &Graph, only: Option<&[String]>) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut names = Vec::new();
    let only: Option<HashSet<&str>> = only.map(|list| list.iter().map(String::as_str).collect());
    let wanted = |name: &str| only.as_ref().is_none_or(|list| list.contains(name));
    for &id in graph.topological_order() {
        let node = graph.node(id);
        for name in node.inputs.iter().chain(&node.outputs) {
            if name.is_empty() || !wanted(name) || !seen.insert(name.clone()) {
                continue;
            }
            let Some(info) = graph.tensor(name) else {
                continue;
            };
            let is_weight = matches!(
                info.kind,
                TensorKind::Initializer | TensorKind::Constant | TensorKind::Missing
            );
            let float = info
                .elem_type
                .is_none_or(|t| DataType::from_onnx(t).is_ok_and(DataType::is_float));
            if !is_weight && float {
                names.push(name.clone());
            }
        }
    }
    names
}

/// The model with `tensors` added as graph outputs, graph inputs left out: the readers take
/// those from the values they fed (the CPU provider accepts a graph input that is also an
/// output; OpenVINO refuses it: "Duplicate definition of name"),
/// encoded for a session whose inputs declare `sample_shapes` ([`crate::model::pinned`]:
/// the data's, so that ONNX Runtime plans it without symbolic sizes).
pub fn augmented_model(
    model: &Model,
    graph: &Graph,
    tensors: &[String],
    sample_shapes: &BTreeMap<String, Vec<usize>>,
) -> Result<SessionModel, CalibError> {
    let (mut proto, external_folder) = model.to_session_proto();
    pin_sample_shapes(&mut proto, sample_shapes);
    let Some(g) = proto.graph.as_mut() else {
        return Ok(SessionModel::encode(proto, external_folder)?);
    };
    let existing: HashSet<String> = g.output.iter().map(|o| o.name().to_owned()).collect();
    let fed = |name: &str| {
        graph
            .tensor(name)
            .is_some_and(|t| t.kind == TensorKind::Input)
    };
    for name in tensors.iter().filter(|n| !existing.contains(*n) && !fed(n)) {
        let dtype = graph
            .tensor(name)
            .and_then(|t| t.elem_type)
            .and_then(|c| DataType::from_onnx(c).ok());
        // Untyped intermediate outputs are accepted by ONNX Runtime, which infers them.
        let output = match dtype {
            Some(dtype) => any_shape_info(name, dtype),
            None => ValueInfoProto {
                name: Some(name.clone()),
                ..Default::default()
            },
        };
        g.output.push(output);
    }
    Ok(SessionModel::encode(proto, external_folder)?)
}

/// What one pass collects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Extremes and streaming (growing) histograms in one go.
    Streaming,
    /// Parity pass 1: extremes only.
    Ranges,
    /// Parity pass 2: fixed-range histograms in onnxruntime's layouts.
    Histograms,
}

impl Pass {
    /// The pass as its progress names it.
    fn stage(self) -> &'static str {
        match self {
            Pass::Streaming => "calibrating",
            Pass::Ranges => "pass 1/2: ranges",
            Pass::Histograms => "pass 2/2: histograms",
        }
    }
}

/// Calibrates `model` on `source`: validates the data against the model's inputs, then runs
/// it (one pass, or two in onnxruntime-parity mode) and returns every tensor's statistics.
///
/// Cancellation is checked between batches; a cancelled run returns [`CalibError::Cancelled`]
/// and writes nothing.
pub fn calibrate(
    model: &Model,
    source: &mut dyn BatchSource,
    runtime: &Runtime,
    config: &CalibrationConfig,
    ctx: &JobContext,
) -> Result<CalibrationStats, CalibError> {
    let started = Instant::now();
    if config.histogram_bins > super::MAX_HISTOGRAM_BINS {
        return Err(CalibError::TooManyBins {
            bins: config.histogram_bins,
            max: super::MAX_HISTOGRAM_BINS,
        });
    }
    let graph = Graph::build(model);
    graph.check()?;
    let (batch, samples, notes) = planned_batches(&graph, &*source, config)?;

    let tensors = calibration_tensors(&graph, config.tensors.as_deref());
    if tensors.is_empty() {
        return Err(CalibError::NoTensors);
    }
    let declared = memory::declared_bytes_per_sample(&graph, &tensors, &source.arrays());
    let mut fitter = BatchFitter::new(
        &batch,
        config.memory_budget.or_else(memory::batch_budget),
        declared,
        tensors.len(),
    )?;
    let mut session = observing_session(
        (model, &graph),
        &tensors,
        &*source,
        runtime,
        config,
        fitter.leaves_arena_room(declared),
    )?;

    let mut stats: Vec<TensorStats> = vec![TensorStats::default(); tensors.len()];
    let mut channels: Vec<Option<ChannelStats>> = vec![None; tensors.len()];
    let mut means: Vec<InputMean> = vec![InputMean::default(); config.input_means.len()];
    let mut hessians: Vec<InputHessian> = config
        .input_hessians
        .iter()
        .map(InputHessian::new)
        .collect();
    // Untyped tensors are kept only if the session returns them as floats.
    let mut float_seen: Vec<bool> = tensors
        .iter()
        .map(|n| graph.tensor(n).and_then(|t| t.elem_type).is_some())
        .collect();
    let passes: &[Pass] = if config.ort_parity.is_some() && config.histogram_bins > 0 {
        &[Pass::Ranges, Pass::Histograms]
    } else if config.ort_parity.is_some() {
        // No histograms wanted: onnxruntime's first pass alone gives its MinMax ranges.
        &[Pass::Ranges]
    } else {
        &[Pass::Streaming]
    };
    let mut batches = 0;
    let (mut run_seconds, mut stats_seconds) = (0.0, 0.0);
    for (pass_index, &pass) in passes.iter().enumerate() {
        if pass_index > 0 {
            source.rewind()?;
            prepare_fixed_histograms(&mut stats, config);
        }
        let meter = RateMeter::new(pass.stage(), samples as u64);
        let mut done = 0;
        batches = 0;
        while done < samples {
            ctx.checkpoint().map_err(|_| CalibError::Cancelled)?;
            let Some(batch) = source.next_batch(fitter.next_batch().min(samples - done))? else {
                break;
            };
            let (index, first_sample, count) = (batch.index, batch.first_sample, batch.samples);
            let run_error = |reason: String| CalibError::Run {
                batch: index,
                first_sample,
                reason,
            };
            // The inputs must outlive the outputs: ONNX Runtime hands a graph input that is also
            // an output back as the same buffer, which the input value owns.
            let input_bytes: u64 = batch
                .inputs
                .iter()
                .map(|(_, a)| a.dtype().storage_bytes(a.len() as u64))
                .sum();
            let owned = owned_inputs(batch.inputs)?;
            let values = session_inputs(&owned);
            let run_started = Instant::now();
            let outputs = session.run(values).map_err(|e| run_error(e.to_string()))?;
            let stats_started = Instant::now();
            run_seconds += (stats_started - run_started).as_secs_f64();
            let observed = fold_outputs(
                (&outputs, &owned),
                &tensors,
                Folded {
                    stats: &mut stats,
                    channels: &mut channels,
                    means: &mut means,
                    hessians: &mut hessians,
                    float_seen: &mut float_seen,
                },
                pass,
                config,
            );
            fitter.observed(observed + input_bytes, count)?;
            stats_seconds += stats_started.elapsed().as_secs_f64();
            drop(outputs);
            drop(owned);
            done += count;
            batches += 1;
            ctx.report(meter.progress(
                done as u64,
                format!("batch {batches} ({done}/{samples} samples)"),
            ));
        }
    }
    drop(session);
    crate::util::return_freed_memory();
    let info = CalibrationInfo {
        model: model.graph().name().to_owned(),
        model_nodes: graph.nodes().len(),
        execution_providers: config
            .execution_providers
            .iter()
            .map(ToString::to_string)
            .collect(),
        runtime_version: runtime.info().version.clone(),
        batch_size: fitter.batch_size,
        samples,
        batches,
        source: source.describe(),
        histogram_bins: config.histogram_bins,
        ort_parity: config.ort_parity.is_some(),
        seconds: started.elapsed().as_secs_f64(),
        run_seconds,
        stats_seconds,
        notes: notes.into_iter().chain(fitter.notes).collect(),
        equalized: false,
        layerwise_ranges: false,
        planned_only: false,
    };
    Ok(CalibrationStats {
        info,
        channels: tensors
            .iter()
            .zip(channels)
            .filter_map(|(name, c)| Some((name.clone(), c?)))
            .collect(),
        smoothing: BTreeMap::new(),
        input_means: keyed_means(config, means),
        input_hessians: keyed_hessians(config, hessians),
        range_choices: BTreeMap::new(),
        tensors: tensors
            .into_iter()
            .zip(stats)
            .zip(float_seen)
            .filter(|(_, float)| *float)
            .map(|(entry, _)| entry)
            .collect(),
    })
}

/// The batch size, the samples calibrated (whole batches of the data, up to the configured
/// maximum) and the notes on both, once the data is checked against the model's inputs.
fn planned_batches(
    graph: &Graph,
    source: &dyn BatchSource,
    config: &CalibrationConfig,
) -> Result<(BatchChoice, usize, Vec<String>), CalibError> {
    let inputs = model_inputs(graph);
    let asked = config
        .max_samples
        .map_or(source.samples(), |m| m.min(source.samples()));
    let batch = choose_batch(&inputs, config.batch_size);
    let samples = batch.usable(asked, source.whole_feeds());
    validate_source(&inputs, source, samples, batch.size)?;
    let mut notes: Vec<String> = batch.note.iter().cloned().collect();
    notes.extend(source.notes());
    if samples < asked {
        notes.push(format!(
            "the last {} samples were left out: they do not fill a batch of {}",
            asked - samples,
            batch.size
        ));
    }
    Ok((batch, samples, notes))
}

/// The calibration session: `model` (its `graph`) with `tensors` exposed as outputs, graph
/// inputs left out (they are read from the values fed: OpenVINO refuses a model that lists
/// an input as an output), on the configured providers.
fn observing_session(
    (model, graph): (&Model, &Graph),
    tensors: &[String],
    source: &dyn BatchSource,
    runtime: &Runtime,
    config: &CalibrationConfig,
    arena: bool,
) -> Result<ort::session::Session, CalibError> {
    let augmented = augmented_model(model, graph, tensors, &sample_shapes(source))?;
    let options = SessionOptions {
        optimization: if config.optimize {
            Optimization::All
        } else {
            Optimization::Disable
        },
        arena,
        // Between runs the statistics are folded in on the same cores.
        spinning: false,
        ..SessionOptions::default()
    };
    runtime
        .session_from_model(&augmented, &config.execution_providers, options)
        .map_err(|e| match e {
            RuntimeError::Ort(text) => CalibError::FloatModel {
                reason: with_legacy_note(model, crate::runtime::explain_load_error(&text)),
            },
            other => CalibError::Runtime(other),
        })
}

/// The mean inputs collected, by the layer they were asked for.
fn keyed_means(config: &CalibrationConfig, means: Vec<InputMean>) -> BTreeMap<String, InputMean> {
    config
        .input_means
        .iter()
        .zip(means)
        .filter(|(_, m)| m.count > 0)
        .map(|(spec, m)| (spec.layer.clone(), m))
        .collect()
}

/// The input Hessians collected, by the first layer they were asked for.
fn keyed_hessians(
    config: &CalibrationConfig,
    hessians: Vec<InputHessian>,
) -> BTreeMap<String, InputHessian> {
    config
        .input_hessians
        .iter()
        .zip(hessians)
        .filter(|(_, h)| h.count > 0)
        .filter_map(|(spec, h)| Some((spec.layers.first()?.clone(), h)))
        .collect()
}

/// After the ranges pass: fixed-range histograms over each tensor's final range.
fn prepare_fixed_histograms(stats: &mut [TensorStats], config: &CalibrationConfig) {
    let parity = config.ort_parity.unwrap_or_default();
    for s in stats.iter_mut().filter(|s| s.has_data()) {
        let t = s.abs_max();
        s.histogram = Some(Histogram::with_range(config.histogram_bins, t));
        s.parity_histogram = Some(Histogram::with_range(parity.entropy_bins, t));
        s.abs_histogram = Some(AbsHistogram::new(parity.percentile_bins, s.min_abs, t));
    }
}

/// What a batch is folded into, one entry per observed tensor.
struct Folded<'a> {
    stats: &'a mut [TensorStats],
    /// Per-channel statistics, for the tensors [`CalibrationConfig::channels`] names.
    channels: &'a mut [Option<ChannelStats>],
    /// Mean inputs, for the layers [`CalibrationConfig::input_means`] names.
    means: &'a mut [InputMean],
    /// Input Hessians, for the inputs [`CalibrationConfig::input_hessians`] names.
    hessians: &'a mut [InputHessian],
    float_seen: &'a mut [bool],
}

/// Folds one batch's outputs (and the inputs fed, for the graph inputs observed) into the
/// statistics, tensors in parallel.
fn fold_outputs(
    (outputs, fed): (
        &ort::session::SessionOutputs<'_>,
        &[(String, ort::value::DynValue)],
    ),
    tensors: &[String],
    into: Folded<'_>,
    pass: Pass,
    config: &CalibrationConfig,
) -> u64 {
    let Folded {
        stats,
        channels,
        means,
        hessians,
        float_seen,
    } = into;
    // f32 outputs are read in place; other float types are converted once.
    let outputs = crate::runtime::value::NamedOutputs::new(outputs);
    let fed: HashMap<&str, &ort::value::DynValue> =
        fed.iter().map(|(n, v)| (n.as_str(), v)).collect();
    let read: Vec<Option<(DataType, CowArray<'_, f32, IxDyn>)>> = tensors
        .iter()
        .map(|name| {
            let fed = || fed.get(name.as_str()).copied();
            float_view(outputs.get(name).or_else(fed)?)
        })
        .collect();
    let views: Vec<Option<ArrayViewD<'_, f32>>> = read
        .iter()
        .map(|r| r.as_ref().map(|(_, array)| array.view()))
        .collect();
    for (s, read) in stats.iter_mut().zip(&read) {
        if let Some((dtype, _)) = read
            && s.dtype.is_none()
        {
            s.dtype = Some(*dtype);
        }
    }
    for (seen, view) in float_seen.iter_mut().zip(&views) {
        *seen |= view.is_some();
    }
    // What the batch's observed tensors hold (as f32, plus the converted copies).
    let held: u64 = read
        .iter()
        .flatten()
        .map(|(_, a)| a.len() as u64 * if a.is_owned() { 8 } else { 4 })
        .sum();
    if pass != Pass::Histograms {
        let at: HashMap<&str, usize> = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.as_str(), i))
            .collect();
        config
            .input_means
            .par_iter()
            .zip(means.par_iter_mut())
            .for_each(|(spec, mean)| {
                let view = at
                    .get(spec.tensor.as_str())
                    .and_then(|&i| views[i].as_ref());
                if let Some(view) = view {
                    mean.add(&spec.geometry, view);
                }
            });
        config
            .input_hessians
            .par_iter()
            .zip(hessians.par_iter_mut())
            .for_each(|(spec, hessian)| {
                let view = at
                    .get(spec.tensor.as_str())
                    .and_then(|&i| views[i].as_ref());
                if let Some(view) = view {
                    hessian.add(&spec.geometry, view);
                }
            });
    }
    let sampled = |name: &String| {
        let sampling = config.channels.as_ref()?;
        sampling.tensors.contains(name).then_some(sampling.rows)
    };
    stats
        .par_iter_mut()
        .zip(channels.par_iter_mut())
        .zip(views.par_iter().zip(tensors.par_iter()))
        .for_each(|((s, channel), (view, name))| {
            let Some(view) = view else { return };
            let contiguous;
            let values: &[f32] = match view.as_slice() {
                Some(v) => v,
                None => {
                    contiguous = view.iter().copied().collect::<Vec<f32>>();
                    &contiguous
                }
            };
            if pass != Pass::Histograms
                && let Some(rows) = sampled(name)
                && let Some(&last) = view.shape().last()
            {
                channel
                    .get_or_insert_with(|| ChannelStats::new(last, rows))
                    .add(values, last);
            }
            match pass {
                Pass::Streaming => s.add_batch(
                    values,
                    view.shape(),
                    (config.histogram_bins > 0).then_some(config.histogram_bins),
                ),
                Pass::Ranges => s.add_summary(&BatchSummary::of(values), view.shape()),
                Pass::Histograms => {
                    let abs_max = s.abs_max();
                    if let Some(h) = s.histogram.as_mut() {
                        h.add(values, abs_max);
                    }
                    if let Some(h) = s.parity_histogram.as_mut() {
                        h.add(values, abs_max);
                    }
                    if let Some(h) = s.abs_histogram.as_mut() {
                        h.add(values);
                    }
                }
            }
        });
    held
}

/// When shapes are not all declared, the batch is assumed to hold up to this many times the
/// bytes that are known before a first, one-sample batch is measured instead.
const UNKNOWN_SHAPES_FACTOR: u64 = 64;

/// How many times a batch's worst-case bytes the budget must hold for the calibration
/// session to keep ONNX Runtime's arena ([`BatchFitter::leaves_arena_room`]).
const ARENA_HEADROOM: u64 = 4;

/// Keeps calibration batches within the memory budget: fitted from declared shapes before the
/// first batch, then from what each batch really held (see [`memory`]).
struct BatchFitter {
    /// The batch size asked for.
    requested: usize,
    /// The batch size in force.
    batch_size: usize,
    budget: Option<u64>,
    /// The first batch is one sample when the shapes did not say what a sample costs.
    probe: bool,
    /// The model fixes the batch size: it is never lowered (a batch that does not fit is an
    /// error) and there is no one-sample probe.
    fixed: bool,
    tensors: usize,
    notes: Vec<String>,
}

impl BatchFitter {
    fn new(
        batch: &BatchChoice,
        budget: Option<u64>,
        declared: memory::SampleEstimate,
        tensors: usize,
    ) -> Result<Self, CalibError> {
        let mut fitter = BatchFitter {
            requested: batch.size,
            batch_size: batch.size,
            budget,
            probe: false,
            fixed: batch.fixed,
            tensors,
            notes: Vec::new(),
        };
        // Even a lower bound refuses a sample that cannot fit before any data is read.
        fitter.fit(declared.bytes, "declared shapes")?;
        // Shapes not all declared: measure one sample first, unless a full batch is far from
        // the budget even if the unknown activations are many times the known bytes (the
        // common case; a probe would also change the batch partition the statistics see).
        let worst = fitter.worst_batch_bytes(declared);
        fitter.probe = budget.is_some_and(|b| worst > b)
            && !declared.complete
            && fitter.batch_size > 1
            && !fitter.fixed;
        Ok(fitter)
    }

    /// Whether ONNX Runtime may keep its memory arena (calibration runs up to twice as fast
    /// with it: PP-OCR det on 64 samples, 4.7 s against 8.9 s, measured): when a batch,
    /// however large its undeclared tensors could be, takes at most 1/[`ARENA_HEADROOM`] of
    /// the budget, so that the arena's growth (it extends in doubling regions) stays inside.
    /// Batches fitted close to the memory available run without it.
    fn leaves_arena_room(&self, declared: memory::SampleEstimate) -> bool {
        let worst = self.worst_batch_bytes(declared);
        self.budget
            .is_none_or(|budget| worst.saturating_mul(ARENA_HEADROOM) <= budget)
    }

    /// The most a batch of the size in force could hold: the declared bytes, times
    /// [`UNKNOWN_SHAPES_FACTOR`] when some tensors' shapes are not declared.
    fn worst_batch_bytes(&self, declared: memory::SampleEstimate) -> u64 {
        let factor = match declared.complete {
            true => 1,
            false => UNKNOWN_SHAPES_FACTOR,
        };
        declared
            .bytes
            .saturating_mul(self.batch_size as u64)
            .saturating_mul(factor)
    }

    /// Samples to ask for next.
    fn next_batch(&self) -> usize {
        if self.probe { 1 } else { self.batch_size }
    }

    /// A batch of `samples` held `bytes`: lower the batch size if it would not fit.
    fn observed(&mut self, bytes: u64, samples: usize) -> Result<(), CalibError> {
        self.probe = false;
        if samples == 0 {
            return Ok(());
        }
        self.fit(bytes.div_ceil(samples as u64), "the first batches")
    }

    fn fit(&mut self, per_sample: u64, basis: &str) -> Result<(), CalibError> {
        let Some(budget) = self.budget else {
            return Ok(());
        };
        let fitted = memory::fit_batch(self.batch_size, per_sample, budget).map_err(|e| {
            CalibError::OutOfMemory {
                needed: e.needed,
                budget: e.budget,
                tensors: self.tensors,
            }
        })?;
        if fitted < self.batch_size && self.fixed {
            return Err(CalibError::OutOfMemory {
                needed: per_sample,
                budget,
                tensors: self.tensors,
            });
        }
        if fitted < self.batch_size {
            let note = format!(
                "batch size lowered from {} to {fitted}: a sample needs about {} ({basis}) and a batch may take {}",
                self.requested,
                crate::util::format_bytes(per_sample),
                crate::util::format_bytes(budget)
            );
            tracing::warn!("{note}");
            // One note says where the batch size ended up, whatever the steps.
            self.notes = vec![note];
            self.batch_size = fitted;
        }
        Ok(())
    }
}

/// ONNX Runtime's reason, with why the model was not upgraded from its old opset if it was not
/// (the runtime then names the old op version, and the user should know the tool tried).
fn with_legacy_note(model: &Model, reason: String) -> String {
    match model.legacy_opset() {
        Some(kept @ crate::model::legacy::LegacyOpset::Kept { .. }) => {
            format!("{reason} ({})", kept.describe())
        }
        _ => reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arena_is_kept_only_where_a_batch_leaves_the_budget_room_for_it() {
        let batch = BatchChoice {
            size: 4,
            fixed: false,
            note: None,
        };
        let estimate = |bytes, complete| memory::SampleEstimate { bytes, complete };
        let fitter = |budget| BatchFitter::new(&batch, budget, estimate(1 << 20, true), 10);
        // 4 MB a batch: a 16 MB budget holds four of them, a 15 MB one does not.
        let known = estimate(1 << 20, true);
        assert!(fitter(Some(16 << 20)).unwrap().leaves_arena_room(known));
        assert!(!fitter(Some(15 << 20)).unwrap().leaves_arena_room(known));
        // Undeclared tensors could be many times the declared bytes.
        let partial = estimate(1 << 20, false);
        assert!(!fitter(Some(16 << 20)).unwrap().leaves_arena_room(partial));
        assert!(fitter(Some(1 << 30)).unwrap().leaves_arena_room(partial));
        // A platform that says nothing of its memory: ONNX Runtime's default.
        assert!(fitter(None).unwrap().leaves_arena_room(partial));
    }
}
