//! The outputs of two models over evaluation data: per-output error metrics (streaming,
//! memory bounded by one batch), task metrics against the data's ground truth, and latency.
//!
//! - this file: [`compare()`] and [`compare_outputs`] (one comparison, streamed), the
//!   metrics they give ([`OutputMetrics`], [`TaskScore`]) and the errors of every room
//!   ([`EvalError`]);
//! - `accumulator`: one output's metrics batch by batch;
//! - `task` and `output_kind`: what each output is and its ground truth;
//! - `reference`: the evaluation set and the float outputs held for many comparisons;
//! - `batch_workers`: batches over several sessions, and how many fit at once;
//! - `latency`: timing both models, with the kernels ONNX Runtime ran read from its
//!   profiles (`latency::kernels`, `latency::kernel_costs`).

mod accumulator;
pub mod batch_workers;
pub mod latency;
pub mod output_kind;
pub mod reference;
pub mod task;

use ndarray::ArrayD;
use serde::Serialize;

use crate::calib::data::{BatchSource, DataError, choose_batch, model_inputs, validate_source};
use crate::jobs::{CancelToken, JobContext, RateMeter};
use crate::model::ops;
use crate::model::{Graph, Model, ModelError};
use crate::quant::cpu_session_options;
use crate::runtime::value::{float_output, owned_inputs, session_inputs};
use crate::runtime::{EpSpec, Runtime, RuntimeError, SessionOptions};
use accumulator::Accumulator;
pub use accumulator::ctc_greedy;
pub use output_kind::OutputKind;
use task::{Task, TaskOptions};

/// Errors of a comparison.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// A model could not be read.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The data could not be read or does not fit.
    #[error(transparent)]
    Data(#[from] DataError),
    /// ONNX Runtime failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The two models do not have the same interface.
    #[error("{model} cannot be compared with the float model: {}", .problems.join("; "))]
    Mismatch {
        /// The model compared with the float one, as given.
        model: String,
        /// What differs.
        problems: Vec<String>,
    },
    /// The "quantized" model has no QuantizeLinear/DequantizeLinear (or MatMulNBits) node.
    #[error(
        "{0} has no QuantizeLinear, DequantizeLinear or MatMulNBits node: it is not a QDQ model"
    )]
    NotQuantized(String),
    /// A batch failed to run.
    #[error("batch {batch} failed on the {model} model: {reason}")]
    Run {
        /// The batch.
        batch: usize,
        /// "float" or "quantized".
        model: &'static str,
        /// ONNX Runtime's message.
        reason: String,
    },
    /// A variant of the recipe quantizes nothing (the sensitivity scan treats it as float).
    #[error("the recipe quantizes nothing in this model")]
    NothingToQuantize,
    /// A top-1 target was given but no output is classifier-like (`[N, classes]` or
    /// `[N, T, classes]`).
    #[error(
        "no output is classifier-like ([N, classes] or [N, T, classes]): use an SQNR target instead"
    )]
    NoClassifierOutput,
    /// A sequence target was given but no output is a sequence (`[N, T, classes]`).
    #[error("no output is a sequence ([N, T, classes]): use a top-1 or SQNR target instead")]
    NoSequenceOutput,
    /// A sample beyond the evaluation data was asked for.
    #[error("sample {sample} does not exist: the evaluation data holds {samples} sample(s)")]
    NoSample {
        /// The sample asked for (from 0).
        sample: usize,
        /// Samples held.
        samples: usize,
    },
    /// The task metrics cannot be had as asked (ground truth, characters, output kinds).
    #[error("{0}")]
    Truth(String),
    /// An accuracy target was given but the data holds no ground truth an output can use.
    #[error(
        "no output is scored against ground truth: an accuracy target needs 'labels' (class scores) or 'texts' (a CTC sequence) in the evaluation data"
    )]
    NoTruth,
    /// A perplexity target was given but no output was scored by perplexity.
    #[error(
        "no output is scored by perplexity: a perplexity target needs a language model's logits ([N, T, vocab]) and text as evaluation data (--eval_text)"
    )]
    NoPerplexity,
    /// The local errors cannot be measured on this pair of models (why, from
    /// [`crate::eval::tensor_error::local_error::LocalUnavailable`]).
    #[error("{0}")]
    LocalUnavailable(String),
    /// The layer-wise range choice cannot be measured on this model.
    #[error("layer-wise ranges cannot be measured on this model: {0}")]
    RangeChoice(String),
    /// Cancelled.
    #[error("the comparison was cancelled")]
    Cancelled,
}

/// A task metric measured against ground truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskMetric {
    /// Share of samples whose best class is the label.
    Top1Accuracy,
    /// Share of samples whose label is among the five best classes.
    Top5Accuracy,
    /// Share of samples whose greedy CTC reading is the text exactly.
    ExactMatch,
    /// Character edits (Levenshtein) from the reading to the text, per character of text.
    CharErrorRate,
    /// A language model's perplexity on text: the exponential of the mean negative
    /// log-likelihood of each next token (not a share: lower is better, 1 is perfect).
    Perplexity,
    /// Share of a text's positions whose best-scored token is the next token.
    NextTokenAccuracy,
}

impl TaskMetric {
    /// A label for people.
    pub fn label(self) -> &'static str {
        match self {
            TaskMetric::Top1Accuracy => "top-1 accuracy",
            TaskMetric::Top5Accuracy => "top-5 accuracy",
            TaskMetric::ExactMatch => "exact match",
            TaskMetric::CharErrorRate => "character error rate",
            TaskMetric::Perplexity => "perplexity",
            TaskMetric::NextTokenAccuracy => "next-token accuracy",
        }
    }

    /// True for accuracies, false for error rates and perplexity.
    pub fn higher_is_better(self) -> bool {
        !matches!(self, TaskMetric::CharErrorRate | TaskMetric::Perplexity)
    }

    /// True for the metric an accuracy target reaches (top-1 accuracy, exact match, a
    /// language model's next-token accuracy).
    pub fn is_headline(self) -> bool {
        matches!(
            self,
            TaskMetric::Top1Accuracy | TaskMetric::ExactMatch | TaskMetric::NextTokenAccuracy
        )
    }

    /// True for shares (0..1, shown as percentages); false for perplexity, a plain number.
    pub fn is_share(self) -> bool {
        self != TaskMetric::Perplexity
    }

    /// A value of this metric for people: "96.88 %" for a share, "12.345" for perplexity.
    pub fn format(self, value: f64) -> String {
        if self.is_share() {
            format!("{:.2}%", value * 100.0)
        } else {
            format!("{value:.3}")
        }
    }
}

/// One task metric of one output, float beside quantized (shares 0..1, or a perplexity).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskScore {
    /// What was measured.
    pub metric: TaskMetric,
    /// The float model's score.
    pub float: f64,
    /// The quantized model's score.
    pub quantized: f64,
}

impl TaskScore {
    /// The change from float to quantized in percentage points (for perplexity, its change
    /// in percent of the float model's), signed so that a loss is negative whichever way the
    /// metric runs.
    pub fn change_points(&self) -> f64 {
        let change = if self.metric.is_share() {
            (self.quantized - self.float) * 100.0
        } else {
            (self.quantized / self.float.max(f64::MIN_POSITIVE) - 1.0) * 100.0
        };
        if self.metric.higher_is_better() {
            change
        } else {
            -change
        }
    }

    /// The change for people: "-3.12 pts" for a share, "+0.051 (+0.42 %)" for perplexity.
    pub fn change_text(&self) -> String {
        if self.metric.is_share() {
            format!("{:+.2} pts", self.change_points())
        } else {
            format!(
                "{:+.3} ({:+.2} %)",
                self.quantized - self.float,
                -self.change_points()
            )
        }
    }
}

/// Error metrics of one output, float as the reference.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutputMetrics {
    /// Output name.
    pub name: String,
    /// What the output carries (decides which of the task metrics below are given).
    pub kind: OutputKind,
    /// Signal-to-quantization-noise ratio in dB (onnxruntime's `qdq_loss_debug` formula).
    pub sqnr_db: f64,
    /// Cosine similarity of the flattened outputs.
    pub cosine: f64,
    /// Mean squared error.
    pub mse: f64,
    /// Largest absolute difference.
    pub max_abs_error: f64,
    /// For classifier-like outputs (`[N, classes]`, or `[N, T, classes]` per position): share
    /// of rows (positions) whose argmax agrees.
    pub top1_agreement: Option<f64>,
    /// ... share of rows whose float argmax is in the quantized top 5 (≥ 5 classes).
    pub top5_agreement: Option<f64>,
    /// For sequence outputs (`[N, T, classes]`): share of samples whose greedy CTC reading
    /// ([`ctc_greedy`]) is the same. Per-position agreement counts every flip at a character
    /// boundary; this counts what an OCR or speech model's user reads off.
    pub sequence_agreement: Option<f64>,
    /// For embeddings: share of samples whose nearest other sample (by cosine) is the same
    /// for the quantized model as for the float one (at least 3 samples).
    pub neighbour_agreement: Option<f64>,
    /// For dense maps: intersection over union of the float and quantized masks (values at or
    /// above the task's threshold).
    pub mask_iou: Option<f64>,
    /// Scores against the data's ground truth, float beside quantized (empty without it).
    pub task: Vec<TaskScore>,
    /// Elements compared.
    pub elements: u64,
}

#[cfg(test)]
impl OutputMetrics {
    /// An output measured with `sqnr_db` (and `top1` agreement), its other figures perfect:
    /// what unit tests of verdicts and targets score.
    pub(crate) fn with_sqnr(name: &str, kind: OutputKind, sqnr_db: f64, top1: Option<f64>) -> Self {
        OutputMetrics {
            name: name.into(),
            kind,
            sqnr_db,
            cosine: 1.0,
            mse: 0.0,
            max_abs_error: 0.0,
            top1_agreement: top1,
            top5_agreement: None,
            sequence_agreement: None,
            neighbour_agreement: None,
            mask_iou: None,
            task: Vec::new(),
            elements: 1,
        }
    }
}

/// Checks that `float` and `quant` can be compared: same inputs and outputs, and `quant`
/// really is a QDQ model.
pub fn check_comparable(float: &Model, quant: &Model, quant_label: &str) -> Result<(), EvalError> {
    let (fg, qg) = (Graph::build(float), Graph::build(quant));
    let mut problems = Vec::new();
    let inputs = |g: &Graph| -> Vec<(String, Option<i32>)> {
        g.inputs()
            .iter()
            .map(|n| (n.clone(), g.tensor(n).and_then(|t| t.elem_type)))
            .collect()
    };
    if inputs(&fg) != inputs(&qg) {
        problems.push(format!(
            "inputs differ (float: {}; this one: {})",
            fg.inputs().join(", "),
            qg.inputs().join(", ")
        ));
    }
    if fg.outputs() != qg.outputs() {
        problems.push(format!(
            "outputs differ (float: {}; this one: {})",
            fg.outputs().join(", "),
            qg.outputs().join(", ")
        ));
    }
    if !problems.is_empty() {
        return Err(EvalError::Mismatch {
            model: quant_label.to_owned(),
            problems,
        });
    }
    // Q/DQ nodes (any domain), or ONNX Runtime's int4 MatMulNBits.
    let has_qdq = qg.nodes().iter().any(|n| {
        matches!(
            n.op_type.as_str(),
            ops::QUANTIZE_LINEAR | ops::DEQUANTIZE_LINEAR | ops::MAT_MUL_N_BITS
        )
    });
    if !has_qdq {
        return Err(EvalError::NotQuantized(quant_label.to_owned()));
    }
    Ok(())
}

/// The columns of an outputs table, as the CLI and the studio print them.
pub const OUTPUT_TABLE_HEADER: [&str; 11] = [
    "output",
    "kind",
    "SQNR dB",
    "cosine",
    "MSE",
    "max |err|",
    "top-1",
    "top-5",
    "sequences",
    "neighbours",
    "mask IoU",
];

impl OutputMetrics {
    /// This output's row under [`OUTPUT_TABLE_HEADER`] (agreements as percentages, `-` for an
    /// output that is not classifier-like).
    pub fn table_row(&self) -> [String; 11] {
        let percent =
            |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{:.1}%", v * 100.0));
        [
            self.name.clone(),
            self.kind.label().to_owned(),
            format!("{:.2}", self.sqnr_db),
            format!("{:.5}", self.cosine),
            format!("{:.3e}", self.mse),
            format!("{:.3e}", self.max_abs_error),
            percent(self.top1_agreement),
            percent(self.top5_agreement),
            percent(self.sequence_agreement),
            percent(self.neighbour_agreement),
            percent(self.mask_iou),
        ]
    }
}

/// The columns of a task-metrics table (scores against ground truth).
pub const TASK_TABLE_HEADER: [&str; 5] = [
    "output",
    "against ground truth",
    "float",
    "quantized",
    "change",
];

impl OutputMetrics {
    /// This output's rows under [`TASK_TABLE_HEADER`], one per task metric (shares as
    /// percentages, the change in points, a loss negative).
    pub fn task_rows(&self) -> Vec<[String; 5]> {
        self.task
            .iter()
            .map(|s| {
                [
                    self.name.clone(),
                    s.metric.label().to_owned(),
                    s.metric.format(s.float),
                    s.metric.format(s.quantized),
                    s.change_text(),
                ]
            })
            .collect()
    }
}

/// Runs both models on `source` (from its first sample) batch by batch and accumulates each
/// output's metrics.
#[allow(clippy::too_many_arguments)] // the two models, where and how they run, the task
pub fn compare_outputs(
    float: &Model,
    quant: &Model,
    source: &mut dyn BatchSource,
    runtime: &Runtime,
    eps: &[EpSpec],
    batch_size: usize,
    task: &TaskOptions,
    ctx: &JobContext,
) -> Result<Vec<OutputMetrics>, EvalError> {
    check_comparable(float, quant, "the quantized model")?;
    source.rewind()?;
    let EvalData {
        outputs,
        batch_size,
        samples,
        task,
    } = EvalData::check(float, &*source, batch_size, task)?;
    let mut float_session =
        runtime.session_from_model(&float.to_session_model()?, eps, SessionOptions::default())?;
    let mut quant_session =
        runtime.session_from_model(&quant.to_session_model()?, eps, cpu_session_options(quant))?;
    let mut accumulators = accumulators(&outputs, &task);
    let meter = RateMeter::new("comparing", samples as u64);
    let mut done = 0;
    while let Some(batch) = source.next_batch(batch_size.max(1))? {
        ctx.checkpoint().map_err(|_| EvalError::Cancelled)?;
        let index = batch.index;
        let owned = owned_inputs(batch.inputs)?;
        let reference = run_outputs(&mut float_session, &owned, &outputs, index, "float")?;
        let test = run_outputs(&mut quant_session, &owned, &outputs, index, "quantized")?;
        accumulate(&mut accumulators, &reference, &test, batch.first_sample)?;
        done += batch.samples;
        ctx.report(meter.progress(done as u64, format!("batch {}", index + 1)));
    }
    Ok(finish(&accumulators))
}

/// How evaluation data is read for a float model, found before any run: its outputs, the
/// batch size (the data checked against the inputs first), the samples and the task.
struct EvalData {
    outputs: Vec<String>,
    batch_size: usize,
    samples: usize,
    task: Task,
}

impl EvalData {
    /// Checks `source` against `float`'s inputs and resolves the task on it.
    fn check(
        float: &Model,
        source: &dyn BatchSource,
        batch_size: usize,
        task: &TaskOptions,
    ) -> Result<EvalData, EvalError> {
        let graph = Graph::build(float);
        let inputs = model_inputs(&graph);
        let samples = source.samples();
        let batch_size = choose_batch(&inputs, batch_size).size;
        validate_source(&inputs, source, samples, batch_size)?;
        Ok(EvalData {
            task: Task::resolve(float, &graph, task, source)?,
            outputs: graph.outputs().to_vec(),
            batch_size,
            samples,
        })
    }
}

/// Runs `session` on one batch and takes the named outputs as f32 arrays.
pub(crate) fn run_outputs(
    session: &mut ort::session::Session,
    owned: &[(String, ort::value::DynValue)],
    names: &[String],
    batch: usize,
    model: &'static str,
) -> Result<Vec<Option<ArrayD<f32>>>, EvalError> {
    run_outputs_of(session, &[owned], names, batch, model, None)
}

/// [`run_outputs`] on inputs in several parts (a batch's data and inputs a pass adds).
/// With `cancel`, a cancel stops the run in flight (ONNX Runtime's terminate flag, checked
/// between its kernels) rather than after it: a scan's variant runs for seconds.
pub(crate) fn run_outputs_of(
    session: &mut ort::session::Session,
    parts: &[&[(String, ort::value::DynValue)]],
    names: &[String],
    batch: usize,
    model: &'static str,
    cancel: Option<&CancelToken>,
) -> Result<Vec<Option<ArrayD<f32>>>, EvalError> {
    let failed = |e: ort::Error| EvalError::Run {
        batch,
        model,
        reason: e.to_string(),
    };
    let inputs: Vec<_> = parts.iter().flat_map(|p| session_inputs(p)).collect();
    let options = std::sync::Arc::new(ort::session::RunOptions::new().map_err(failed)?);
    let _hook = cancel.map(|token| {
        let options = options.clone();
        token.on_cancel(move || {
            // A failed terminate leaves the run to finish: the checkpoint after it stops.
            let _ = options.terminate();
        })
    });
    let out = session.run_with_options(inputs, &*options);
    if cancel.is_some_and(CancelToken::is_cancelled) {
        return Err(EvalError::Cancelled);
    }
    let out = out.map_err(failed)?;
    let out = crate::runtime::value::NamedOutputs::new(&out);
    Ok(names
        .iter()
        .map(|name| out.get(name).and_then(float_output).map(|(_, a)| a))
        .collect())
}

/// Adds one batch (its first sample `first_sample`) to the per-output accumulators.
fn accumulate(
    accumulators: &mut [Accumulator],
    reference: &[Option<ArrayD<f32>>],
    test: &[Option<ArrayD<f32>>],
    first_sample: usize,
) -> Result<(), EvalError> {
    for (acc, (reference, test)) in accumulators.iter_mut().zip(reference.iter().zip(test)) {
        if let (Some(reference), Some(test)) = (reference, test) {
            acc.add(reference, test, first_sample)?;
        }
    }
    Ok(())
}

/// One empty accumulator per output of `task`.
fn accumulators(outputs: &[String], task: &Task) -> Vec<Accumulator> {
    outputs
        .iter()
        .zip(&task.kinds)
        .zip(&task.scorers)
        .map(|((name, &kind), scorer)| {
            Accumulator::new(name, kind, scorer.clone(), task.iou_threshold)
        })
        .collect()
}

/// The metrics of every output that received data.
fn finish(accumulators: &[Accumulator]) -> Vec<OutputMetrics> {
    accumulators
        .iter()
        .filter(|a| a.has_data())
        .map(Accumulator::finish)
        .collect()
}
