//! Float against quantized: per-output error metrics over evaluation data (streaming, memory
//! bounded by one batch) and latency of both models on the chosen execution providers.

pub mod alternatives;
pub mod output_kind;
pub mod reference;
pub mod sensitivity;
mod tensor_pass;
pub mod tensors;
pub mod weight_error;

use std::time::Instant;

use ndarray::{ArrayD, Axis};
use serde::Serialize;

use crate::calib::data::{BatchSource, DataError, choose_batch, model_inputs, validate_source};
use crate::jobs::{JobContext, RateMeter};
use crate::model::{Graph, Model, ModelError};
use crate::quant::cpu_session_options;
use crate::runtime::value::{float_output, owned_inputs, session_inputs};
use crate::runtime::{EpSpec, Runtime, RuntimeError, SessionOptions};
pub use output_kind::OutputKind;

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
    #[error("the models cannot be compared: {}", .0.join("; "))]
    Mismatch(Vec<String>),
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
    /// Cancelled.
    #[error("the comparison was cancelled")]
    Cancelled,
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
    /// Elements compared.
    pub elements: u64,
}

/// Embedding rows kept for the nearest-neighbour agreement, at most (the check is quadratic).
const MAX_NEIGHBOUR_ROWS: usize = 2048;

#[derive(Debug, Clone)]
struct Accumulator {
    kind: OutputKind,
    reference2: f64,
    test2: f64,
    dot: f64,
    noise2: f64,
    max_abs: f64,
    elements: u64,
    rows: u64,
    top1: u64,
    top5: u64,
    classifier: bool,
    sequences: u64,
    sequences_equal: u64,
    /// Embedding rows, float and quantized, for the nearest-neighbour agreement.
    rows_kept: (Vec<Vec<f32>>, Vec<Vec<f32>>),
}

/// Greedy CTC decoding of a best-class path: repeats merged, then the blank (class 0, as in
/// PaddleOCR, wav2vec2 and most CTC exports) dropped.
pub fn ctc_greedy(path: &[usize]) -> Vec<usize> {
    let mut read = Vec::new();
    let mut previous = None;
    for &class in path {
        if previous != Some(class) && class != 0 {
            read.push(class);
        }
        previous = Some(class);
    }
    read
}

/// Share of rows whose nearest other row by cosine is the same among `quantized` as among
/// `float` (`None` under 3 rows, where every row's nearest is forced).
fn neighbour_agreement(float: &[Vec<f32>], quantized: &[Vec<f32>]) -> Option<f64> {
    if float.len() < 3 {
        return None;
    }
    let unit = |rows: &[Vec<f32>]| -> Vec<Vec<f32>> {
        rows.iter()
            .map(|r| {
                let norm = r
                    .iter()
                    .map(|v| v * v)
                    .sum::<f32>()
                    .sqrt()
                    .max(f32::EPSILON);
                r.iter().map(|v| v / norm).collect()
            })
            .collect()
    };
    let nearest = |rows: &[Vec<f32>], i: usize| -> usize {
        let dot = |j: usize| -> f32 { rows[i].iter().zip(&rows[j]).map(|(a, b)| a * b).sum() };
        (0..rows.len())
            .filter(|&j| j != i)
            .max_by(|&a, &b| dot(a).total_cmp(&dot(b)))
            .unwrap_or(i)
    };
    let (f, q) = (unit(float), unit(quantized));
    let same = (0..f.len())
        .filter(|&i| nearest(&f, i) == nearest(&q, i))
        .count();
    Some(same as f64 / f.len() as f64)
}

fn argsort_desc(row: &[f32]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..row.len()).collect();
    idx.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
    idx
}

impl Accumulator {
    fn new(kind: OutputKind) -> Self {
        Accumulator {
            kind,
            reference2: 0.0,
            test2: 0.0,
            dot: 0.0,
            noise2: 0.0,
            max_abs: 0.0,
            elements: 0,
            rows: 0,
            top1: 0,
            top5: 0,
            classifier: false,
            sequences: 0,
            sequences_equal: 0,
            rows_kept: (Vec::new(), Vec::new()),
        }
    }

    fn add(&mut self, reference: &ArrayD<f32>, test: &ArrayD<f32>) {
        for (&a, &b) in reference.iter().zip(test.iter()) {
            let (a, b) = (f64::from(a), f64::from(b));
            self.reference2 += a * a;
            self.test2 += b * b;
            self.dot += a * b;
            self.noise2 += (a - b) * (a - b);
            self.max_abs = self.max_abs.max((a - b).abs());
        }
        self.elements += reference.len() as u64;
        if self.kind == OutputKind::Embedding && reference.ndim() == 2 {
            let (float, quantized) = &mut self.rows_kept;
            for (r, t) in reference.outer_iter().zip(test.outer_iter()) {
                if float.len() < MAX_NEIGHBOUR_ROWS {
                    float.push(r.iter().copied().collect());
                    quantized.push(t.iter().copied().collect());
                }
            }
        }
        // `[N, classes]` (a classifier) or `[N, T, classes]` (a sequence model: OCR, speech,
        // token logits), where greedy decoding reads the argmax at each position.
        self.classifier = self.kind.has_classes()
            && matches!(reference.ndim(), 2 | 3)
            && reference.shape().last().is_some_and(|&c| c >= 2);
        if self.classifier {
            let last = Axis(reference.ndim() - 1);
            // Lanes come sample by sample: a `[N, T, classes]` sample is `T` of them; only a
            // CTC output is read as a whole sequence.
            let positions = if reference.ndim() == 3 && self.kind == OutputKind::CtcSequence {
                reference.shape()[1]
            } else {
                0
            };
            let (mut float_path, mut test_path) = (Vec::new(), Vec::new());
            for (r, t) in reference.lanes(last).into_iter().zip(test.lanes(last)) {
                let (r, t): (Vec<f32>, Vec<f32>) =
                    (r.iter().copied().collect(), t.iter().copied().collect());
                let best = argsort_desc(&r)[0];
                let ranked = argsort_desc(&t);
                self.rows += 1;
                self.top1 += u64::from(ranked[0] == best);
                self.top5 += u64::from(ranked.iter().take(5).any(|&i| i == best));
                if positions > 0 {
                    float_path.push(best);
                    test_path.push(ranked[0]);
                    if float_path.len() == positions {
                        self.sequences += 1;
                        self.sequences_equal +=
                            u64::from(ctc_greedy(&float_path) == ctc_greedy(&test_path));
                        float_path.clear();
                        test_path.clear();
                    }
                }
            }
        }
    }

    fn finish(&self, name: &str, classes: usize) -> OutputMetrics {
        let eps = f64::EPSILON;
        let sqnr = 20.0 * (self.reference2.sqrt().max(eps) / self.noise2.sqrt().max(eps)).log10();
        let cosine = self.dot / (self.reference2.sqrt() * self.test2.sqrt()).max(eps);
        OutputMetrics {
            name: name.to_owned(),
            kind: self.kind,
            sqnr_db: sqnr,
            cosine,
            mse: self.noise2 / self.elements.max(1) as f64,
            max_abs_error: self.max_abs,
            top1_agreement: (self.classifier && self.rows > 0)
                .then(|| self.top1 as f64 / self.rows as f64),
            top5_agreement: (self.classifier && self.rows > 0 && classes >= 5)
                .then(|| self.top5 as f64 / self.rows as f64),
            sequence_agreement: (self.sequences > 0)
                .then(|| self.sequences_equal as f64 / self.sequences as f64),
            neighbour_agreement: neighbour_agreement(&self.rows_kept.0, &self.rows_kept.1),
            elements: self.elements,
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
            "inputs differ (float: {}; quantized: {})",
            fg.inputs().join(", "),
            qg.inputs().join(", ")
        ));
    }
    if fg.outputs() != qg.outputs() {
        problems.push(format!(
            "outputs differ (float: {}; quantized: {})",
            fg.outputs().join(", "),
            qg.outputs().join(", ")
        ));
    }
    if !problems.is_empty() {
        return Err(EvalError::Mismatch(problems));
    }
    // Q/DQ nodes (any domain), or ONNX Runtime's int4 MatMulNBits.
    let has_qdq = qg.nodes().iter().any(|n| {
        matches!(
            n.op_type.as_str(),
            "QuantizeLinear" | "DequantizeLinear" | "MatMulNBits"
        )
    });
    if !has_qdq {
        return Err(EvalError::NotQuantized(quant_label.to_owned()));
    }
    Ok(())
}

/// The columns of an outputs table, as the CLI and the studio print them.
pub const OUTPUT_TABLE_HEADER: [&str; 10] = [
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
];

impl OutputMetrics {
    /// This output's row under [`OUTPUT_TABLE_HEADER`] (agreements as percentages, `-` for an
    /// output that is not classifier-like).
    pub fn table_row(&self) -> [String; 10] {
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
        ]
    }
}

/// Runs both models on `source` batch by batch and accumulates each output's metrics.
pub fn compare_outputs(
    float: &Model,
    quant: &Model,
    source: &mut dyn BatchSource,
    runtime: &Runtime,
    eps: &[EpSpec],
    batch_size: usize,
    ctx: &JobContext,
) -> Result<Vec<OutputMetrics>, EvalError> {
    check_comparable(float, quant, "the quantized model")?;
    let graph = Graph::build(float);
    let inputs = model_inputs(&graph);
    let samples = source.samples();
    let batch_size = choose_batch(&inputs, batch_size).size;
    validate_source(&inputs, source, samples, batch_size)?;
    let mut float_session =
        runtime.session_from_model(&float.to_session_model()?, eps, SessionOptions::default())?;
    let mut quant_session =
        runtime.session_from_model(&quant.to_session_model()?, eps, cpu_session_options(quant))?;
    let outputs: Vec<String> = graph.outputs().to_vec();
    let mut accumulators = accumulators(&kinds(&graph, &outputs));
    let mut classes = vec![0usize; outputs.len()];
    let meter = RateMeter::new("comparing", samples as u64);
    let mut done = 0;
    while let Some(batch) = source.next_batch(batch_size.max(1))? {
        ctx.checkpoint().map_err(|_| EvalError::Cancelled)?;
        let index = batch.index;
        let owned = owned_inputs(batch.inputs)?;
        let reference = run_outputs(&mut float_session, &owned, &outputs, index, "float")?;
        let test = run_outputs(&mut quant_session, &owned, &outputs, index, "quantized")?;
        accumulate(&mut accumulators, &mut classes, &reference, &test);
        done += batch.samples;
        ctx.report(meter.progress(done as u64, format!("batch {}", index + 1)));
    }
    Ok(finish(&outputs, &accumulators, &classes))
}

/// Runs `session` on one batch and takes the named outputs as f32 arrays.
fn run_outputs(
    session: &mut ort::session::Session,
    owned: &[(String, ort::value::DynValue)],
    names: &[String],
    batch: usize,
    model: &'static str,
) -> Result<Vec<Option<ArrayD<f32>>>, EvalError> {
    let out = session
        .run(session_inputs(owned))
        .map_err(|e| EvalError::Run {
            batch,
            model,
            reason: e.to_string(),
        })?;
    Ok(names
        .iter()
        .map(|name| {
            out.get(name.as_str())
                .and_then(float_output)
                .map(|(_, a)| a)
        })
        .collect())
}

/// Adds one batch's outputs to the per-output accumulators.
fn accumulate(
    accumulators: &mut [Accumulator],
    classes: &mut [usize],
    reference: &[Option<ArrayD<f32>>],
    test: &[Option<ArrayD<f32>>],
) {
    for (i, (reference, test)) in reference.iter().zip(test).enumerate() {
        if let (Some(reference), Some(test)) = (reference, test) {
            classes[i] = reference.shape().last().copied().unwrap_or(0);
            accumulators[i].add(reference, test);
        }
    }
}

/// The kind of each of `outputs` of `graph`.
fn kinds(graph: &Graph, outputs: &[String]) -> Vec<OutputKind> {
    outputs
        .iter()
        .map(|o| output_kind::detect(graph, o, None))
        .collect()
}

/// One empty accumulator per kind.
fn accumulators(kinds: &[OutputKind]) -> Vec<Accumulator> {
    kinds.iter().map(|&k| Accumulator::new(k)).collect()
}

/// The metrics of every output that received data.
fn finish(
    outputs: &[String],
    accumulators: &[Accumulator],
    classes: &[usize],
) -> Vec<OutputMetrics> {
    outputs
        .iter()
        .zip(accumulators)
        .zip(classes)
        .filter(|((_, a), _)| a.elements > 0)
        .map(|((name, a), &c)| a.finish(name, c))
        .collect()
}

/// Latency of one model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Latency {
    /// Median milliseconds per run.
    pub median_ms: f64,
    /// 90th percentile milliseconds.
    pub p90_ms: f64,
    /// Timed runs.
    pub runs: usize,
    /// The execution providers used.
    pub execution_providers: Vec<String>,
    /// Intra-op threads of the session (0: ONNX Runtime's default, one per physical core).
    pub intra_op_threads: usize,
    /// Samples per timed run.
    pub batch_size: usize,
}

/// Times `model` on one batch of `source`: `warmup` untimed runs, then `runs` timed ones.
pub fn measure_latency(
    model: &Model,
    source: &mut dyn BatchSource,
    runtime: &Runtime,
    eps: &[EpSpec],
    batch_size: usize,
    warmup: usize,
    runs: usize,
) -> Result<Latency, EvalError> {
    source.rewind()?;
    let inputs = model_inputs(&Graph::build(model));
    let batch = source
        .next_batch(choose_batch(&inputs, batch_size).size)?
        .ok_or(DataError::Empty)?;
    let owned = owned_inputs(batch.inputs)?;
    let options = if Graph::build(model)
        .nodes()
        .iter()
        .any(|n| n.op_type == "DequantizeLinear")
    {
        cpu_session_options(model)
    } else {
        SessionOptions::default()
    };
    let mut session = runtime.session_from_model(&model.to_session_model()?, eps, options)?;
    let mut times = Vec::with_capacity(runs);
    for i in 0..warmup + runs.max(1) {
        let values = session_inputs(&owned);
        let started = Instant::now();
        session.run(values).map_err(|e| EvalError::Run {
            batch: 0,
            model: "timed",
            reason: e.to_string(),
        })?;
        if i >= warmup {
            times.push(started.elapsed().as_secs_f64() * 1e3);
        }
    }
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    Ok(Latency {
        median_ms: at(0.5),
        p90_ms: at(0.9),
        runs: times.len(),
        execution_providers: eps.iter().map(ToString::to_string).collect(),
        intra_op_threads: options.intra_threads,
        batch_size: batch.samples,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_embedding_gets_neighbour_agreement_and_no_class_metrics() {
        // Three embeddings: 0 and 1 are close in float; quantized, 0's nearest becomes 2.
        let float =
            ArrayD::from_shape_vec(vec![3, 2], vec![1.0f32, 0.0, 0.9, 0.1, 0.0, 1.0]).unwrap();
        let quant =
            ArrayD::from_shape_vec(vec![3, 2], vec![0.5f32, 0.5, 0.9, 0.1, 0.4, 0.6]).unwrap();
        let mut acc = Accumulator::new(OutputKind::Embedding);
        acc.add(&float, &quant);
        let m = acc.finish("e", 2);
        assert_eq!(m.kind, OutputKind::Embedding);
        assert_eq!(m.top1_agreement, None);
        assert_eq!(m.top5_agreement, None);
        // Row 0: nearest 1 in float, 2 quantized; rows 1 and 2 keep theirs (0 and 1... ).
        let expected = neighbour_agreement(
            &[vec![1.0, 0.0], vec![0.9, 0.1], vec![0.0, 1.0]],
            &[vec![0.5, 0.5], vec![0.9, 0.1], vec![0.4, 0.6]],
        );
        assert_eq!(m.neighbour_agreement, expected);
        assert!(m.neighbour_agreement.is_some_and(|a| a < 1.0));
        // Hidden states get fidelity metrics only.
        let mut acc = Accumulator::new(OutputKind::HiddenStates);
        let h =
            ArrayD::from_shape_vec(vec![1, 2, 3], vec![1.0f32, 0.0, 0.0, 0.0, 1.0, 0.0]).unwrap();
        acc.add(&h, &h);
        let m = acc.finish("h", 3);
        assert_eq!((m.top1_agreement, m.neighbour_agreement), (None, None));
    }

    #[test]
    fn ctc_greedy_merges_repeats_then_drops_blanks() {
        assert_eq!(ctc_greedy(&[0, 5, 5, 0, 5, 7, 7, 0]), [5, 5, 7]);
        assert_eq!(ctc_greedy(&[0, 0]), Vec::<usize>::new());
    }

    /// One-hot scores of a `[N, T, 3]` output from best-class paths.
    fn one_hot(paths: &[[usize; 4]]) -> ArrayD<f32> {
        let mut a = ArrayD::zeros(vec![paths.len(), 4, 3]);
        for (n, path) in paths.iter().enumerate() {
            for (t, &c) in path.iter().enumerate() {
                a[[n, t, c]] = 1.0;
            }
        }
        a
    }

    #[test]
    fn sequence_agreement_counts_samples_read_the_same_not_positions() {
        // Sample 0 shifts a character boundary by one position (still reads "1 2"); sample 1
        // reads "1 2" in float and "1" quantized.
        let float = one_hot(&[[0, 1, 1, 2], [1, 0, 2, 2]]);
        let quant = one_hot(&[[1, 1, 0, 2], [1, 1, 1, 1]]);
        let mut acc = Accumulator::new(OutputKind::CtcSequence);
        acc.add(&float, &quant);
        let m = acc.finish("y", 3);
        assert_eq!(m.sequence_agreement, Some(0.5));
        assert_eq!(m.top1_agreement, Some(3.0 / 8.0));
        // A classifier's output has no sequence.
        let mut acc = Accumulator::new(OutputKind::CtcSequence);
        let two_d =
            ArrayD::from_shape_vec(vec![2, 3], vec![1.0f32, 0.0, 0.0, 0.0, 1.0, 0.0]).unwrap();
        acc.add(&two_d, &two_d);
        assert_eq!(acc.finish("y", 3).sequence_agreement, None);
    }
}
