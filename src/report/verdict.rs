//! A report's one-line verdict: what a reader needs before the tables: whether the quantized
//! model still does its task (ground truth first, then agreement with the float model, then
//! the outputs' SQNR, the strongest evidence the comparison has), how fast it is, and on what
//! data that was measured.

use super::{CompareReport, LatencyPair};
use crate::eval::compare::{OutputMetrics, TaskScore};

/// An SQNR at or above this is "close to the float model" when nothing better is measured.
const CLOSE_DB: f64 = 30.0;

/// Below this an output is "far from the float model".
const FAR_DB: f64 = 20.0;

/// A task score that drops by at most this many points is kept.
const KEPT_POINTS: f64 = 1.0;

/// Agreement with the float model at or above this share is agreement.
const AGREES: f64 = 0.99;

/// The report's verdict in one line, naming the evidence it rests on.
pub fn verdict_line(report: &CompareReport) -> String {
    verdict(
        &report.outputs,
        report.latency.as_ref(),
        &format!("{} sample(s) of {}", report.samples, report.data),
    )
}

/// The verdict on `outputs` (and `latency`, when timed) measured on `data` (what and how
/// many samples, in words).
pub fn verdict(outputs: &[OutputMetrics], latency: Option<&LatencyPair>, data: &str) -> String {
    let mut parts = vec![fidelity(outputs)];
    if let Some(latency) = latency {
        parts.push(latency.verdict().to_string());
    }
    parts.push(format!("measured on {data}"));
    parts.join("; ")
}

/// The strongest evidence of how the quantized model does: a task score against ground
/// truth, else agreement with the float model's decisions, else the worst output's SQNR.
fn fidelity(outputs: &[OutputMetrics]) -> String {
    let worst_task = outputs
        .iter()
        .flat_map(|m| m.task.iter().map(move |s| (m, s)))
        .min_by(|a, b| a.1.change_points().total_cmp(&b.1.change_points()));
    if let Some((_, score)) = worst_task {
        return task_verdict(score);
    }
    let agreement = outputs
        .iter()
        .filter_map(|m| agreement_of(m).map(|(what, share)| (m, what, share)))
        .min_by(|a, b| a.2.total_cmp(&b.2));
    if let Some((m, what, share)) = agreement {
        let verb = if share >= AGREES {
            "agrees with"
        } else {
            "departs from"
        };
        let worst = outputs
            .iter()
            .min_by(|a, b| a.sqnr_db.total_cmp(&b.sqnr_db))
            .map_or_else(String::new, |w| {
                format!(" (worst output SQNR {} dB)", super::db(w.sqnr_db))
            });
        return format!(
            "{verb} the float model: {what} {:.1} % on {}{worst}",
            share * 100.0,
            m.name
        );
    }
    let Some(worst) = outputs
        .iter()
        .min_by(|a, b| a.sqnr_db.total_cmp(&b.sqnr_db))
    else {
        return "no output was compared".to_owned();
    };
    let closeness = if worst.sqnr_db >= CLOSE_DB {
        "close to"
    } else if worst.sqnr_db >= FAR_DB {
        "near"
    } else {
        "far from"
    };
    format!(
        "{closeness} the float model: worst output {} at {} dB SQNR",
        worst.name,
        super::db(worst.sqnr_db)
    )
}

/// Whether a task score is kept: within [`KEPT_POINTS`] points of a share, or a perplexity
/// within that many percent of the float model's.
fn task_verdict(score: &TaskScore) -> String {
    let label = score.metric.label();
    let kept = score.change_points() >= -KEPT_POINTS;
    if !score.metric.is_share() {
        let (float, quant) = (score.float, score.quantized);
        let rise = -score.change_points();
        return if kept {
            format!("keeps the float model's {label} ({float:.3} to {quant:.3}, {rise:+.2} %)")
        } else {
            format!("raises {label} by {rise:.2} % ({float:.3} to {quant:.3})")
        };
    }
    let (float, quant) = (score.float * 100.0, score.quantized * 100.0);
    if kept {
        format!("keeps the float model's {label} ({float:.1} % to {quant:.1} %)")
    } else {
        format!(
            "loses {:.1} points of {label} ({float:.1} % to {quant:.1} %)",
            -score.change_points()
        )
    }
}

/// An output's agreement with the float model's decisions, the one that fits its kind.
fn agreement_of(m: &OutputMetrics) -> Option<(&'static str, f64)> {
    m.sequence_agreement
        .map(|s| ("sequence agreement", s))
        .or(m.top1_agreement.map(|s| ("top-1 agreement", s)))
        .or(m.neighbour_agreement.map(|s| ("neighbour agreement", s)))
        .or(m.mask_iou.map(|s| ("mask IoU", s)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::compare::OutputKind;

    fn output(name: &str, sqnr_db: f64, top1: Option<f64>) -> OutputMetrics {
        OutputMetrics::with_sqnr(name, OutputKind::Values, sqnr_db, top1)
    }

    fn report(outputs: Vec<OutputMetrics>) -> CompareReport {
        CompareReport {
            float_model: "f.onnx".into(),
            quant_model: "q.onnx".into(),
            data: "eval.npz".into(),
            samples: 16,
            execution_providers: vec!["cpu".into()],
            outputs,
            tensors: None,
            latency: None,
            baseline: None,
            settings: Vec::new(),
        }
    }

    #[test]
    fn the_verdict_rests_on_the_strongest_evidence_measured() {
        let plain = report(vec![output("a", 41.0, None), output("b", 24.5, None)]);
        assert_eq!(
            verdict_line(&plain),
            "near the float model: worst output b at 24.50 dB SQNR; measured on 16 sample(s) of eval.npz"
        );
        let classifier = report(vec![output("probs", 12.0, Some(0.9375))]);
        assert!(
            verdict_line(&classifier)
                .starts_with("departs from the float model: top-1 agreement 93.8 % on probs (worst output SQNR 12.00 dB)"),
            "{}",
            verdict_line(&classifier)
        );
    }

    #[test]
    fn a_language_models_verdict_reads_its_perplexity_in_percent() {
        use crate::eval::compare::TaskMetric;
        let scored = |quantized: f64| {
            let mut logits = output("logits", 25.0, Some(0.97));
            logits.task = vec![TaskScore {
                metric: TaskMetric::Perplexity,
                float: 10.0,
                quantized,
            }];
            report(vec![logits])
        };
        assert!(
            verdict_line(&scored(10.05))
                .starts_with("keeps the float model's perplexity (10.000 to 10.050, +0.50 %)"),
            "{}",
            verdict_line(&scored(10.05))
        );
        assert!(
            verdict_line(&scored(10.3))
                .starts_with("raises perplexity by 3.00 % (10.000 to 10.300)"),
            "{}",
            verdict_line(&scored(10.3))
        );
    }
}
