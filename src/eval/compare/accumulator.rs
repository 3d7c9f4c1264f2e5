//! One output's metrics, accumulated batch by batch: fidelity (SQNR, cosine, MSE, largest
//! error) for every output, the agreements that fit its kind, and scores against ground truth
//! when the data has some.

use std::borrow::Cow;

use ndarray::{ArrayD, Axis};

use crate::eval::compare::task::{Charset, Scorer};
use crate::eval::compare::{EvalError, OutputKind, OutputMetrics, TaskMetric, TaskScore};
use crate::eval::simd::row_math::{fidelity, top_k};

/// Embedding rows kept for the nearest-neighbour agreement, at most (the check is quadratic).
const MAX_NEIGHBOUR_ROWS: usize = 2048;

/// Counts against ground truth, float and quantized.
#[derive(Debug, Clone, Default)]
struct TruthCounts {
    samples: u64,
    top1: (u64, u64),
    top5: (u64, u64),
    exact: (u64, u64),
    edits: (u64, u64),
    truth_chars: u64,
    /// Next tokens scored (positions with a next token), the negative log-likelihoods
    /// summed and the positions whose best token is the next one.
    next_tokens: u64,
    nll: (f64, f64),
    next_top1: (u64, u64),
}

/// What one output has seen so far.
#[derive(Debug, Clone)]
pub(super) struct Accumulator {
    name: String,
    kind: OutputKind,
    scorer: Option<Scorer>,
    iou_threshold: f32,
    reference2: f64,
    test2: f64,
    dot: f64,
    noise2: f64,
    max_abs: f64,
    elements: u64,
    classes: usize,
    rows: u64,
    top1: u64,
    top5: u64,
    classifier: bool,
    sequences: u64,
    sequences_equal: u64,
    /// Dense maps: elements over the threshold in both, in either.
    overlap: (u64, u64),
    truth: TruthCounts,
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

/// How many of a row's best classes the metrics read (top-1 and top-5).
const RANKED: usize = 5;

/// `values` as one slice in their logical order: borrowed when they lie so in memory (an
/// output in standard layout), else copied.
fn in_order<'a, D: ndarray::Dimension>(
    values: &'a ndarray::ArrayBase<impl ndarray::Data<Elem = f32>, D>,
) -> Cow<'a, [f32]> {
    match values.as_slice() {
        Some(slice) => Cow::Borrowed(slice),
        None => Cow::Owned(values.iter().copied().collect()),
    }
}

/// The negative log-likelihood of `class` under the softmax of `scores` (in f64, from the
/// log-sum-exp shifted by the largest score), and whether `class` is the best-scored one
/// (the first of equal best scores).
fn next_token_loss(scores: &[f32], class: usize) -> (f64, bool) {
    let (best, largest) =
        scores
            .iter()
            .enumerate()
            .fold((0, f32::NEG_INFINITY), |(bi, bv), (i, &v)| {
                if v > bv { (i, v) } else { (bi, bv) }
            });
    let largest = f64::from(largest);
    let sum: f64 = scores.iter().map(|&v| (f64::from(v) - largest).exp()).sum();
    let log_sum_exp = largest + sum.ln();
    (log_sum_exp - f64::from(scores[class]), best == class)
}

/// A share, `None` over nothing.
fn share(count: u64, of: u64) -> Option<f64> {
    (of > 0).then(|| count as f64 / of as f64)
}

impl Accumulator {
    /// An empty accumulator for output `name` of `kind`, scored against `scorer`'s truth.
    pub(super) fn new(
        name: &str,
        kind: OutputKind,
        scorer: Option<Scorer>,
        iou_threshold: f32,
    ) -> Self {
        Accumulator {
            name: name.to_owned(),
            kind,
            scorer,
            iou_threshold,
            reference2: 0.0,
            test2: 0.0,
            dot: 0.0,
            noise2: 0.0,
            max_abs: 0.0,
            elements: 0,
            classes: 0,
            rows: 0,
            top1: 0,
            top5: 0,
            classifier: false,
            sequences: 0,
            sequences_equal: 0,
            overlap: (0, 0),
            truth: TruthCounts::default(),
            rows_kept: (Vec::new(), Vec::new()),
        }
    }

    /// True once some batch reached it.
    pub(super) fn has_data(&self) -> bool {
        self.elements > 0
    }

    /// Adds one batch whose first sample is `first_sample` of the data.
    pub(super) fn add(
        &mut self,
        reference: &ArrayD<f32>,
        test: &ArrayD<f32>,
        first_sample: usize,
    ) -> Result<(), EvalError> {
        self.add_fidelity(reference, test);
        self.classes = reference.shape().last().copied().unwrap_or(0);
        if self.kind == OutputKind::Embedding && reference.ndim() == 2 {
            self.keep_rows(reference, test);
        }
        if self.kind == OutputKind::DenseMap {
            self.add_overlap(reference, test);
        }
        // `[N, classes]` (a classifier) or `[N, T, classes]` (a sequence model: OCR, speech,
        // token logits), where greedy decoding reads the argmax at each position.
        self.classifier =
            self.kind.has_classes() && matches!(reference.ndim(), 2 | 3) && self.classes >= 2;
        if self.classifier {
            self.add_classes(reference, test, first_sample)?;
        }
        if self.kind == OutputKind::TokenScores && reference.ndim() == 3 {
            self.score_next_tokens(reference, test, first_sample)?;
        }
        Ok(())
    }

    /// Each position's scores against the next token of the sequence fed (perplexity and
    /// next-token accuracy of both models), when the sequences are the truth.
    fn score_next_tokens(
        &mut self,
        reference: &ArrayD<f32>,
        test: &ArrayD<f32>,
        first_sample: usize,
    ) -> Result<(), EvalError> {
        let Some(Scorer::NextTokens(sequences)) = &self.scorer else {
            return Ok(());
        };
        let positions = reference.shape()[1];
        for (offset, (r, t)) in reference.outer_iter().zip(test.outer_iter()).enumerate() {
            let sample = first_sample + offset;
            let ids = sequences.get(sample).map_or(&[][..], Vec::as_slice);
            if ids.len() != positions {
                return Err(EvalError::Truth(format!(
                    "output '{}' scores {positions} positions of sample {sample}, whose sequence holds {} tokens: perplexity needs the scores of every position",
                    self.name,
                    ids.len()
                )));
            }
            for (position, &next) in ids.iter().enumerate().skip(1) {
                let Some(class) = usize::try_from(next).ok().filter(|c| *c < self.classes) else {
                    return Err(EvalError::Truth(format!(
                        "token id {next} of sample {sample} is not one of the {} classes of output '{}': is the tokenizer this model's?",
                        self.classes, self.name
                    )));
                };
                let row = |scores: &ndarray::ArrayViewD<f32>| {
                    next_token_loss(&in_order(&scores.index_axis(Axis(0), position - 1)), class)
                };
                let ((float_nll, float_best), (test_nll, test_best)) = (row(&r), row(&t));
                let truth = &mut self.truth;
                truth.next_tokens += 1;
                truth.nll.0 += float_nll;
                truth.nll.1 += test_nll;
                truth.next_top1.0 += u64::from(float_best);
                truth.next_top1.1 += u64::from(test_best);
            }
        }
        Ok(())
    }

    fn add_fidelity(&mut self, reference: &ArrayD<f32>, test: &ArrayD<f32>) {
        let sums = fidelity(&in_order(reference), &in_order(test));
        self.reference2 += sums.reference2;
        self.test2 += sums.test2;
        self.dot += sums.dot;
        self.noise2 += sums.noise2;
        self.max_abs = self.max_abs.max(sums.max_abs);
        self.elements += reference.len() as u64;
    }

    fn keep_rows(&mut self, reference: &ArrayD<f32>, test: &ArrayD<f32>) {
        let (float, quantized) = &mut self.rows_kept;
        for (r, t) in reference.outer_iter().zip(test.outer_iter()) {
            if float.len() < MAX_NEIGHBOUR_ROWS {
                float.push(r.iter().copied().collect());
                quantized.push(t.iter().copied().collect());
            }
        }
    }

    fn add_overlap(&mut self, reference: &ArrayD<f32>, test: &ArrayD<f32>) {
        let threshold = self.iou_threshold;
        for (&a, &b) in reference.iter().zip(test.iter()) {
            let (f, q) = (a >= threshold, b >= threshold);
            self.overlap.0 += u64::from(f && q);
            self.overlap.1 += u64::from(f || q);
        }
    }

    /// Per-row agreement and, for CTC outputs, whole sequences; scored against the truth.
    fn add_classes(
        &mut self,
        reference: &ArrayD<f32>,
        test: &ArrayD<f32>,
        first_sample: usize,
    ) -> Result<(), EvalError> {
        let last = Axis(reference.ndim() - 1);
        // Lanes come sample by sample: a `[N, T, classes]` sample is `T` of them; only a
        // CTC output is read as a whole sequence.
        let positions = if reference.ndim() == 3 && self.kind == OutputKind::CtcSequence {
            reference.shape()[1]
        } else {
            0
        };
        let per_sample_rows = reference.ndim() == 2;
        let (mut float_path, mut test_path) = (Vec::new(), Vec::new());
        let mut sample = first_sample;
        for (r, t) in reference.lanes(last).into_iter().zip(test.lanes(last)) {
            let float_ranked = top_k(&in_order(&r), RANKED);
            let ranked = top_k(&in_order(&t), RANKED);
            let best = float_ranked[0];
            self.rows += 1;
            self.top1 += u64::from(ranked[0] == best);
            self.top5 += u64::from(ranked.iter().take(5).any(|&i| i == best));
            if per_sample_rows {
                self.score_label(sample, &float_ranked, &ranked)?;
                sample += 1;
            }
            if positions > 0 {
                float_path.push(best);
                test_path.push(ranked[0]);
                if float_path.len() == positions {
                    let (float_read, test_read) = (ctc_greedy(&float_path), ctc_greedy(&test_path));
                    self.sequences += 1;
                    self.sequences_equal += u64::from(float_read == test_read);
                    self.score_text(sample, &float_read, &test_read)?;
                    sample += 1;
                    float_path.clear();
                    test_path.clear();
                }
            }
        }
        Ok(())
    }

    /// Top-1/top-5 of both models against `sample`'s label, when labels are the truth.
    fn score_label(
        &mut self,
        sample: usize,
        float_ranked: &[usize],
        ranked: &[usize],
    ) -> Result<(), EvalError> {
        let Some(Scorer::Labels(labels)) = &self.scorer else {
            return Ok(());
        };
        let label = labels.get(sample).copied().unwrap_or(-1);
        let Some(label) = usize::try_from(label).ok().filter(|l| *l < self.classes) else {
            return Err(EvalError::Truth(format!(
                "label {label} of sample {sample} is not one of the {} classes of output '{}'",
                self.classes, self.name
            )));
        };
        let t = &mut self.truth;
        t.samples += 1;
        t.top1.0 += u64::from(float_ranked[0] == label);
        t.top1.1 += u64::from(ranked[0] == label);
        t.top5.0 += u64::from(float_ranked.iter().take(5).any(|&i| i == label));
        t.top5.1 += u64::from(ranked.iter().take(5).any(|&i| i == label));
        Ok(())
    }

    /// Exact match and edit distance of both readings against `sample`'s text, both trimmed.
    fn score_text(
        &mut self,
        sample: usize,
        float_read: &[usize],
        test_read: &[usize],
    ) -> Result<(), EvalError> {
        let Some(Scorer::Texts(texts, charset)) = &self.scorer else {
            return Ok(());
        };
        check_charset(charset, self.classes, &self.name)?;
        // Surrounding spaces are trimmed, as readers trim them (a recogniser emits stray ones
        // over the padding right of the text).
        let truth = texts.get(sample).map_or("", |t| t.trim());
        let read = |path: &[usize]| charset.decode(path).unwrap_or_default().trim().to_owned();
        let (float_text, test_text) = (read(float_read), read(test_read));
        let t = &mut self.truth;
        t.samples += 1;
        t.exact.0 += u64::from(float_text == truth);
        t.exact.1 += u64::from(test_text == truth);
        t.edits.0 += strsim::levenshtein(&float_text, truth) as u64;
        t.edits.1 += strsim::levenshtein(&test_text, truth) as u64;
        t.truth_chars += truth.chars().count() as u64;
        Ok(())
    }

    /// The metrics of everything added.
    pub(super) fn finish(&self) -> OutputMetrics {
        let eps = f64::EPSILON;
        let sqnr = crate::util::sqnr_db(self.reference2, self.noise2);
        let cosine = self.dot / (self.reference2.sqrt() * self.test2.sqrt()).max(eps);
        let rows = if self.classifier { self.rows } else { 0 };
        OutputMetrics {
            name: self.name.clone(),
            kind: self.kind,
            sqnr_db: sqnr,
            cosine,
            mse: self.noise2 / self.elements.max(1) as f64,
            max_abs_error: self.max_abs,
            top1_agreement: share(self.top1, rows),
            top5_agreement: share(self.top5, rows).filter(|_| self.classes >= 5),
            sequence_agreement: share(self.sequences_equal, self.sequences),
            neighbour_agreement: neighbour_agreement(&self.rows_kept.0, &self.rows_kept.1),
            mask_iou: share(self.overlap.0, self.overlap.1),
            task: self.task_scores(),
            elements: self.elements,
        }
    }

    /// Scores against the truth, float beside quantized.
    fn task_scores(&self) -> Vec<TaskScore> {
        let t = &self.truth;
        let n = t.samples as f64;
        let pair = |metric, (f, q): (u64, u64), of: f64| TaskScore {
            metric,
            float: f as f64 / of,
            quantized: q as f64 / of,
        };
        match self.scorer {
            Some(Scorer::NextTokens(_)) => self.next_token_scores(),
            _ if t.samples == 0 => Vec::new(),
            Some(Scorer::Labels(_)) => {
                let mut scores = vec![pair(TaskMetric::Top1Accuracy, t.top1, n)];
                if self.classes >= 5 {
                    scores.push(pair(TaskMetric::Top5Accuracy, t.top5, n));
                }
                scores
            }
            Some(Scorer::Texts(..)) => vec![
                pair(TaskMetric::ExactMatch, t.exact, n),
                pair(
                    TaskMetric::CharErrorRate,
                    t.edits,
                    t.truth_chars.max(1) as f64,
                ),
            ],
            None => Vec::new(),
        }
    }

    /// Perplexity and next-token accuracy of both models (none before a scored token).
    fn next_token_scores(&self) -> Vec<TaskScore> {
        let t = &self.truth;
        if t.next_tokens == 0 {
            return Vec::new();
        }
        let n = t.next_tokens as f64;
        vec![
            TaskScore {
                metric: TaskMetric::Perplexity,
                float: (t.nll.0 / n).exp(),
                quantized: (t.nll.1 / n).exp(),
            },
            TaskScore {
                metric: TaskMetric::NextTokenAccuracy,
                float: t.next_top1.0 as f64 / n,
                quantized: t.next_top1.1 as f64 / n,
            },
        ]
    }
}

/// An error when `classes` exceeds what `charset` can name (a wrong character list).
fn check_charset(charset: &Charset, classes: usize, output: &str) -> Result<(), EvalError> {
    if classes > charset.classes() {
        return Err(EvalError::Truth(format!(
            "output '{output}' has {classes} classes but the character list names {} (blank, {} characters, space): is it this model's?",
            charset.classes(),
            charset.classes() - 2
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn acc(kind: OutputKind) -> Accumulator {
        Accumulator::new("y", kind, None, 0.5)
    }

    #[test]
    fn an_embedding_gets_neighbour_agreement_and_no_class_metrics() {
        // Three embeddings: 0 and 1 are close in float; quantized, 0's nearest becomes 2.
        let float =
            ArrayD::from_shape_vec(vec![3, 2], vec![1.0f32, 0.0, 0.9, 0.1, 0.0, 1.0]).unwrap();
        let quant =
            ArrayD::from_shape_vec(vec![3, 2], vec![0.5f32, 0.5, 0.9, 0.1, 0.4, 0.6]).unwrap();
        let mut a = acc(OutputKind::Embedding);
        a.add(&float, &quant, 0).unwrap();
        let m = a.finish();
        assert_eq!(m.kind, OutputKind::Embedding);
        assert_eq!(m.top1_agreement, None);
        assert_eq!(m.top5_agreement, None);
        let expected = neighbour_agreement(
            &[vec![1.0, 0.0], vec![0.9, 0.1], vec![0.0, 1.0]],
            &[vec![0.5, 0.5], vec![0.9, 0.1], vec![0.4, 0.6]],
        );
        assert_eq!(m.neighbour_agreement, expected);
        assert!(m.neighbour_agreement.is_some_and(|a| a < 1.0));
        // Hidden states get fidelity metrics only.
        let mut a = acc(OutputKind::HiddenStates);
        let h =
            ArrayD::from_shape_vec(vec![1, 2, 3], vec![1.0f32, 0.0, 0.0, 0.0, 1.0, 0.0]).unwrap();
        a.add(&h, &h, 0).unwrap();
        let m = a.finish();
        assert_eq!((m.top1_agreement, m.neighbour_agreement), (None, None));
        assert_eq!((m.mask_iou, m.task.len()), (None, 0));
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
        let mut a = acc(OutputKind::CtcSequence);
        a.add(&float, &quant, 0).unwrap();
        let m = a.finish();
        assert_eq!(m.sequence_agreement, Some(0.5));
        assert_eq!(m.top1_agreement, Some(3.0 / 8.0));
        // A classifier's output has no sequence.
        let mut a = acc(OutputKind::CtcSequence);
        let two_d =
            ArrayD::from_shape_vec(vec![2, 3], vec![1.0f32, 0.0, 0.0, 0.0, 1.0, 0.0]).unwrap();
        a.add(&two_d, &two_d, 0).unwrap();
        assert_eq!(a.finish().sequence_agreement, None);
    }

    #[test]
    fn texts_are_scored_by_exact_match_and_character_error_rate() {
        // Classes: blank, 'a', 'b'. Float reads "ab" and "b"; quantized "ab" and "a".
        let float = one_hot(&[[1, 0, 2, 0], [0, 2, 2, 0]]);
        let quant = one_hot(&[[1, 1, 2, 2], [0, 1, 0, 0]]);
        let texts = Arc::new(vec!["ab".to_owned(), "bb".to_owned()]);
        let charset = Arc::new(Charset::from_lines("a\nb"));
        let scorer = Scorer::Texts(texts, charset);
        let mut a = Accumulator::new("y", OutputKind::CtcSequence, Some(scorer), 0.5);
        // The batch is the data's second and third samples: truth is read from there.
        let mut shifted = Accumulator::new("y", OutputKind::CtcSequence, a.scorer.clone(), 0.5);
        a.add(&float, &quant, 0).unwrap();
        let m = a.finish();
        let [exact, cer] = m.task.as_slice() else {
            panic!("{:?}", m.task)
        };
        assert_eq!(
            (exact.metric, exact.float, exact.quantized),
            (TaskMetric::ExactMatch, 0.5, 0.5)
        );
        // Edits: float "ab"→0, "b"→1; quantized 0, "a"→2; over 4 characters.
        assert_eq!((cer.float, cer.quantized), (0.25, 0.5));
        let one = one_hot(&[[0, 2, 0, 2]]);
        shifted.add(&one, &one, 1).unwrap();
        assert_eq!(shifted.finish().task[0].float, 1.0);
    }

    #[test]
    fn labels_give_accuracy_of_both_models_and_refuse_unknown_classes() {
        let float = ArrayD::from_shape_vec(vec![2, 2], vec![0.9f32, 0.1, 0.2, 0.8]).unwrap();
        let quant = ArrayD::from_shape_vec(vec![2, 2], vec![0.4f32, 0.6, 0.2, 0.8]).unwrap();
        let scorer = Scorer::Labels(Arc::new(vec![0, 1, 7]));
        let mut a = Accumulator::new("p", OutputKind::Classifier, Some(scorer.clone()), 0.5);
        a.add(&float, &quant, 0).unwrap();
        let m = a.finish();
        assert_eq!(m.task.len(), 1, "two classes: no top-5");
        assert_eq!((m.task[0].float, m.task[0].quantized), (1.0, 0.5));
        let mut a = Accumulator::new("p", OutputKind::Classifier, Some(scorer), 0.5);
        let err = a.add(&float, &quant, 1).unwrap_err();
        assert!(err.to_string().contains("label 7 of sample 2"), "{err}");
    }

    #[test]
    fn next_tokens_give_perplexity_from_the_log_softmax_of_each_position() {
        // One sample of 3 tokens over 3 classes: positions 0 and 1 score tokens 1 and 2.
        let float = ArrayD::from_shape_vec(
            vec![1, 3, 3],
            vec![0.0f32, 2.0, 0.0, 1.0, 0.0, 0.0, 9.0, 9.0, 9.0],
        )
        .unwrap();
        let quant = ArrayD::from_shape_vec(vec![1, 3, 3], vec![0.0f32; 9]).unwrap();
        let scorer = Scorer::NextTokens(Arc::new(vec![vec![0, 1, 2]]));
        let mut a = Accumulator::new("logits", OutputKind::TokenScores, Some(scorer.clone()), 0.5);
        a.add(&float, &quant, 0).unwrap();
        let m = a.finish();
        let [perplexity, accuracy] = m.task.as_slice() else {
            panic!("{:?}", m.task)
        };
        let nll = |scores: [f64; 3], class: usize| {
            scores.iter().map(|v| v.exp()).sum::<f64>().ln() - scores[class]
        };
        let expected = ((nll([0.0, 2.0, 0.0], 1) + nll([1.0, 0.0, 0.0], 2)) / 2.0).exp();
        assert_eq!(perplexity.metric, TaskMetric::Perplexity);
        assert!((perplexity.float - expected).abs() < 1e-9, "{perplexity:?}");
        // Uniform scores: perplexity is the class count.
        assert!((perplexity.quantized - 3.0).abs() < 1e-9);
        // Ties go to the first class: the uniform scores pick token 0, never the next one.
        assert_eq!((accuracy.float, accuracy.quantized), (0.5, 0.0));
        // A loss of perplexity reads as negative points, in percent of the float model's.
        assert!((perplexity.change_points() + (3.0 / expected - 1.0) * 100.0).abs() < 1e-9);
        // Scores of fewer positions than the sequence, or an id past the classes, are refused.
        let mut a = Accumulator::new("logits", OutputKind::TokenScores, Some(scorer), 0.5);
        let two = ArrayD::from_shape_vec(vec![1, 2, 3], vec![0.0f32; 6]).unwrap();
        let err = a.add(&two, &two, 0).unwrap_err();
        assert!(err.to_string().contains("2 positions"), "{err}");
        let past = Scorer::NextTokens(Arc::new(vec![vec![0, 1, 7]]));
        let mut a = Accumulator::new("logits", OutputKind::TokenScores, Some(past), 0.5);
        let err = a.add(&float, &quant, 0).unwrap_err();
        assert!(err.to_string().contains("token id 7"), "{err}");
    }

    #[test]
    fn dense_maps_get_the_iou_of_their_thresholded_masks() {
        let float = ArrayD::from_shape_vec(vec![1, 1, 2, 2], vec![0.9f32, 0.8, 0.1, 0.0]).unwrap();
        let quant = ArrayD::from_shape_vec(vec![1, 1, 2, 2], vec![0.9f32, 0.2, 0.6, 0.0]).unwrap();
        let mut a = acc(OutputKind::DenseMap);
        a.add(&float, &quant, 0).unwrap();
        // Both: one element; either: three.
        assert_eq!(a.finish().mask_iou, Some(1.0 / 3.0));
    }
}
