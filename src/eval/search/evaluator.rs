//! What a search needs to score a recipe (the float model, its statistics, the float
//! outputs held in a [`Reference`] and the runtime), and the targets it scores against.

use serde::Serialize;

use crate::calib::stats::CalibrationStats;
use crate::eval::compare::batch_workers::cpu_workers;
use crate::eval::compare::reference::Reference;
use crate::eval::compare::{EvalError, OutputMetrics, TaskMetric, TaskScore};
use crate::jobs::CancelToken;
use crate::model::Model;
use crate::quant::{self, QuantError};
use crate::recipe::Recipe;
use crate::runtime::{EpSpec, Runtime};

/// The goal of auto-exclude, and the score a scan ranks by.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Target {
    /// The worst output's SQNR reaches this many dB.
    SqnrDb(f64),
    /// The worst classifier-like output's top-1 agreement reaches this share (0..1).
    Top1(f64),
    /// The worst sequence output's ([N, T, classes]) share of samples read the same
    /// (greedy CTC, see [`crate::eval::compare::ctc_greedy`]) reaches this share (0..1).
    Sequence(f64),
    /// The quantized model's accuracy against the data's ground truth (top-1 accuracy on
    /// `labels`, exact match on `texts`; the worst output's) reaches this share (0..1).
    Accuracy(f64),
    /// A language model's perplexity on the evaluation text rises by at most this many
    /// percent over the float model's (the worst output's).
    Perplexity(f64),
}

/// The kinds of target, for faces where users pick one and type its value (dB, or a
/// percentage).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum TargetKind {
    /// Worst output SQNR in dB.
    SqnrDb,
    /// Top-1 agreement in percent.
    Top1,
    /// Sequence agreement (greedy CTC reading) in percent.
    Sequence,
    /// Accuracy against ground truth in percent.
    Accuracy,
    /// Perplexity rise over the float model's, in percent.
    Perplexity,
}

impl TargetKind {
    /// Every kind, in the order faces list them.
    pub const ALL: [TargetKind; 5] = [
        TargetKind::SqnrDb,
        TargetKind::Top1,
        TargetKind::Sequence,
        TargetKind::Accuracy,
        TargetKind::Perplexity,
    ];

    /// The words before the value ("worst output SQNR ≥").
    pub fn label(self) -> &'static str {
        match self {
            TargetKind::SqnrDb => "worst output SQNR ≥",
            TargetKind::Top1 => "top-1 agreement ≥",
            TargetKind::Sequence => "sequence agreement ≥",
            TargetKind::Accuracy => "accuracy (ground truth) ≥",
            TargetKind::Perplexity => "perplexity rise ≤",
        }
    }

    /// The unit values are typed in.
    pub fn unit(self) -> &'static str {
        match self {
            TargetKind::SqnrDb => " dB",
            TargetKind::Top1
            | TargetKind::Sequence
            | TargetKind::Accuracy
            | TargetKind::Perplexity => " %",
        }
    }

    /// The largest value that makes sense (dB, 100 %, or a perplexity ten times the float
    /// model's).
    pub fn max_value(self) -> f64 {
        match self {
            TargetKind::SqnrDb => 120.0,
            TargetKind::Top1 | TargetKind::Sequence | TargetKind::Accuracy => 100.0,
            TargetKind::Perplexity => 1000.0,
        }
    }

    /// The target of this kind at `value`, typed in dB or percent.
    pub fn target(self, value: f64) -> Target {
        match self {
            TargetKind::SqnrDb => Target::SqnrDb(value),
            TargetKind::Top1 => Target::Top1(value / 100.0),
            TargetKind::Sequence => Target::Sequence(value / 100.0),
            TargetKind::Accuracy => Target::Accuracy(value / 100.0),
            TargetKind::Perplexity => Target::Perplexity(value),
        }
    }
}

impl Target {
    /// The score of a run's metrics under this target (higher is better).
    pub fn score(&self, metrics: &[OutputMetrics]) -> Result<f64, EvalError> {
        match self {
            Target::SqnrDb(_) => Ok(metrics
                .iter()
                .map(|m| m.sqnr_db)
                .fold(f64::INFINITY, f64::min)),
            Target::Top1(_) => metrics
                .iter()
                .filter_map(|m| m.top1_agreement)
                .reduce(f64::min)
                .ok_or(EvalError::NoClassifierOutput),
            Target::Sequence(_) => metrics
                .iter()
                .filter_map(|m| m.sequence_agreement)
                .reduce(f64::min)
                .ok_or(EvalError::NoSequenceOutput),
            Target::Accuracy(_) => metrics
                .iter()
                .flat_map(|m| &m.task)
                .filter(|s| s.metric.is_headline())
                .map(|s| s.quantized)
                .reduce(f64::min)
                .ok_or(EvalError::NoTruth),
            // The rise in percent, negated so that higher is better.
            Target::Perplexity(_) => metrics
                .iter()
                .flat_map(|m| &m.task)
                .filter(|s| s.metric == TaskMetric::Perplexity)
                .map(TaskScore::change_points)
                .reduce(f64::min)
                .ok_or(EvalError::NoPerplexity),
        }
    }

    /// The value to reach (a score, see [`Target::score`]).
    pub fn goal(&self) -> f64 {
        match *self {
            Target::SqnrDb(v) | Target::Top1(v) | Target::Sequence(v) | Target::Accuracy(v) => v,
            Target::Perplexity(rise) => -rise,
        }
    }

    /// The target in words, e.g. "top-1 agreement 99.0%".
    pub fn describe(&self) -> String {
        match *self {
            Target::SqnrDb(db) => format!("output SQNR {db:.2} dB"),
            Target::Top1(share) => format!("top-1 agreement {:.1}%", share * 100.0),
            Target::Sequence(share) => format!("sequence agreement {:.1}%", share * 100.0),
            Target::Accuracy(share) => format!("accuracy {:.1}%", share * 100.0),
            Target::Perplexity(rise) => format!("perplexity rise {rise:.2}%"),
        }
    }

    /// A score under this target in its unit ("31.20 dB", "97.5%").
    pub fn format_score(&self, score: f64) -> String {
        match self {
            Target::SqnrDb(_) => format!("{score:.2} dB"),
            Target::Top1(_) | Target::Sequence(_) | Target::Accuracy(_) => {
                format!("{:.1}%", score * 100.0)
            }
            Target::Perplexity(_) => format!("perplexity {:+.2}%", -score),
        }
    }
}

/// An anchored, escaped pattern naming exactly one node.
pub(crate) fn exact(name: &str) -> String {
    format!("{}$", regex::escape(name))
}

/// A quantization error as the scan reports it.
pub(crate) fn quant_error(e: QuantError) -> EvalError {
    match e {
        QuantError::NothingToQuantize { .. } => EvalError::NothingToQuantize,
        e => EvalError::Run {
            batch: 0,
            model: "quantized",
            reason: e.to_string(),
        },
    }
}

/// What the scan needs to evaluate a recipe.
pub struct Evaluator<'a> {
    /// The float model.
    pub float: &'a Model,
    /// Cached calibration statistics.
    pub stats: &'a CalibrationStats,
    /// The evaluation data with the float outputs on it.
    pub reference: &'a Reference,
    /// ONNX Runtime.
    pub runtime: &'a Runtime,
    /// Execution providers.
    pub eps: &'a [EpSpec],
}

impl Evaluator<'_> {
    /// The metrics of `recipe`'s model; `intra_threads` as in [`Reference::compare`].
    pub fn metrics(
        &self,
        recipe: &Recipe,
        intra_threads: usize,
    ) -> Result<Vec<OutputMetrics>, EvalError> {
        self.metrics_until(recipe, intra_threads, &CancelToken::new())
    }

    /// [`Evaluator::metrics`], its run stopped at once when `cancel` is cancelled.
    pub fn metrics_until(
        &self,
        recipe: &Recipe,
        intra_threads: usize,
        cancel: &CancelToken,
    ) -> Result<Vec<OutputMetrics>, EvalError> {
        let q = quant::quantize(self.float, Some(self.stats), recipe).map_err(quant_error)?;
        self.reference.compare(
            self.float,
            &q.model,
            self.runtime,
            self.eps,
            intra_threads,
            cancel,
        )
    }

    /// Worst output SQNR of `recipe`'s model.
    pub fn sqnr(&self, recipe: &Recipe) -> Result<f64, EvalError> {
        Target::SqnrDb(0.0).score(&self.metrics(recipe, 0)?)
    }

    /// Worst output SQNR of a model quantized already (from a recipe of this float model).
    pub fn model_sqnr(&self, quantized: &Model) -> Result<f64, EvalError> {
        let metrics = self.reference.compare(
            self.float,
            quantized,
            self.runtime,
            self.eps,
            0,
            &CancelToken::new(),
        )?;
        Target::SqnrDb(0.0).score(&metrics)
    }

    /// How many variants of `recipe` to run at once: every core on the CPU EP (each session
    /// on one thread) as far as the memory available holds that many quantized models and
    /// sessions, one at a time on accelerators (they run one model at a time anyway, and GPU
    /// memory is the limit).
    pub fn workers(&self, recipe: &Recipe) -> usize {
        cpu_workers(self.eps, || {
            quant::memory_needed(self.float, Some(self.stats), recipe).unwrap_or(0)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics(sqnr_db: f64, top1: Option<f64>) -> OutputMetrics {
        OutputMetrics::with_sqnr(
            "y",
            crate::eval::compare::OutputKind::Classifier,
            sqnr_db,
            top1,
        )
    }

    #[test]
    fn targets_score_the_worst_output() {
        let m = [metrics(30.0, Some(0.9)), metrics(20.0, Some(0.95))];
        assert_eq!(Target::SqnrDb(25.0).score(&m).unwrap(), 20.0);
        assert_eq!(Target::Top1(0.99).score(&m).unwrap(), 0.9);
        let err = Target::Top1(0.99)
            .score(&[metrics(30.0, None)])
            .unwrap_err();
        assert!(matches!(err, EvalError::NoClassifierOutput), "{err}");
    }

    #[test]
    fn a_perplexity_target_scores_the_worst_rise_and_is_reached_below_its_bound() {
        let mut lm = metrics(30.0, None);
        lm.task = vec![TaskScore {
            metric: TaskMetric::Perplexity,
            float: 20.0,
            quantized: 20.5,
        }];
        let target = TargetKind::Perplexity.target(3.0);
        let score = target.score(std::slice::from_ref(&lm)).unwrap();
        assert!((score + 2.5).abs() < 1e-9, "a 2.5 % rise: {score}");
        assert!(score >= target.goal(), "2.5 % is within 3 %");
        assert!(score < TargetKind::Perplexity.target(2.0).goal());
        assert_eq!(target.format_score(score), "perplexity +2.50%");
        let err = target.score(&[metrics(30.0, Some(1.0))]).unwrap_err();
        assert!(matches!(err, EvalError::NoPerplexity), "{err}");
    }

    #[test]
    fn an_accuracy_target_scores_the_quantized_headline_metric() {
        let score = |metric, quantized| TaskScore {
            metric,
            float: 0.9,
            quantized,
        };
        let mut a = metrics(30.0, None);
        a.task = vec![
            score(TaskMetric::Top1Accuracy, 0.8),
            score(TaskMetric::Top5Accuracy, 0.95),
        ];
        let mut b = metrics(30.0, None);
        b.task = vec![
            score(TaskMetric::ExactMatch, 0.7),
            score(TaskMetric::CharErrorRate, 0.01),
        ];
        assert_eq!(Target::Accuracy(0.5).score(&[a, b]).unwrap(), 0.7);
        let err = Target::Accuracy(0.5)
            .score(&[metrics(30.0, Some(1.0))])
            .unwrap_err();
        assert!(matches!(err, EvalError::NoTruth), "{err}");
    }
}
