//! Sensitivity scan and auto-exclude: how much each quantized node (or op type) costs the
//! outputs, and a small set of nodes to keep in float to reach a target. Every figure comes
//! from a real run of a model re-quantized from the cached statistics (no re-calibration),
//! compared against the float outputs captured once in a [`Reference`].

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

pub use super::auto_exclude::{AutoExclude, Goal, auto_exclude};
use super::reference::Reference;
use super::switchable::{Gating, Switchable};
use super::switched_scan::{Fallback, GatedRuns, ScanMethod, measured_variants};
use super::{EvalError, OutputMetrics};
use crate::calib::stats::CalibrationStats;
use crate::jobs::{CancelToken, JobContext, RateMeter};
use crate::model::{Graph, Model};
use crate::quant::{self, QuantError};
use crate::recipe::Recipe;
use crate::runtime::{EpSpec, Runtime};

/// What a scan varies: one node at a time, or one op type at a time (a quick first look at a
/// large model: a few runs instead of two per node).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Granularity {
    /// Each quantized node.
    Node,
    /// Each op type among the quantized nodes.
    OpType,
}

impl Granularity {
    /// What one unit is called: `node` or `op type`.
    pub fn unit_name(self) -> &'static str {
        match self {
            Granularity::Node => "node",
            Granularity::OpType => "op type",
        }
    }
}

/// The goal of auto-exclude, and the score a scan ranks by.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Target {
    /// The worst output's SQNR reaches this many dB.
    SqnrDb(f64),
    /// The worst classifier-like output's top-1 agreement reaches this share (0..1).
    Top1(f64),
    /// The worst sequence output's ([N, T, classes]) share of samples read the same
    /// (greedy CTC, see [`super::ctc_greedy`]) reaches this share (0..1).
    Sequence(f64),
    /// The quantized model's accuracy against the data's ground truth (top-1 accuracy on
    /// `labels`, exact match on `texts`; the worst output's) reaches this share (0..1).
    Accuracy(f64),
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
}

impl TargetKind {
    /// Every kind, in the order faces list them.
    pub const ALL: [TargetKind; 4] = [
        TargetKind::SqnrDb,
        TargetKind::Top1,
        TargetKind::Sequence,
        TargetKind::Accuracy,
    ];

    /// The words before the value ("worst output SQNR ≥").
    pub fn label(self) -> &'static str {
        match self {
            TargetKind::SqnrDb => "worst output SQNR ≥",
            TargetKind::Top1 => "top-1 agreement ≥",
            TargetKind::Sequence => "sequence agreement ≥",
            TargetKind::Accuracy => "accuracy (ground truth) ≥",
        }
    }

    /// The unit values are typed in.
    pub fn unit(self) -> &'static str {
        match self {
            TargetKind::SqnrDb => " dB",
            TargetKind::Top1 | TargetKind::Sequence | TargetKind::Accuracy => " %",
        }
    }

    /// The largest value that makes sense (dB, or 100 %).
    pub fn max_value(self) -> f64 {
        match self {
            TargetKind::SqnrDb => 120.0,
            TargetKind::Top1 | TargetKind::Sequence | TargetKind::Accuracy => 100.0,
        }
    }

    /// The target of this kind at `value`, typed in dB or percent.
    pub fn target(self, value: f64) -> Target {
        match self {
            TargetKind::SqnrDb => Target::SqnrDb(value),
            TargetKind::Top1 => Target::Top1(value / 100.0),
            TargetKind::Sequence => Target::Sequence(value / 100.0),
            TargetKind::Accuracy => Target::Accuracy(value / 100.0),
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
        }
    }

    /// The value to reach.
    pub fn goal(&self) -> f64 {
        match *self {
            Target::SqnrDb(v) | Target::Top1(v) | Target::Sequence(v) | Target::Accuracy(v) => v,
        }
    }

    /// The target in words, e.g. "top-1 agreement 99.0%".
    pub fn describe(&self) -> String {
        match *self {
            Target::SqnrDb(db) => format!("output SQNR {db:.2} dB"),
            Target::Top1(share) => format!("top-1 agreement {:.1}%", share * 100.0),
            Target::Sequence(share) => format!("sequence agreement {:.1}%", share * 100.0),
            Target::Accuracy(share) => format!("accuracy {:.1}%", share * 100.0),
        }
    }

    /// A score under this target in its unit ("31.20 dB", "97.5%").
    pub fn format_score(&self, score: f64) -> String {
        match self {
            Target::SqnrDb(_) => format!("{score:.2} dB"),
            Target::Top1(_) | Target::Sequence(_) | Target::Accuracy(_) => {
                format!("{:.1}%", score * 100.0)
            }
        }
    }
}

/// One unit's sensitivity.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeSensitivity {
    /// The node's name (or the op type, for an op-type scan).
    pub node: String,
    /// Output SQNR (dB, worst output) with every other node quantized and this one in float.
    pub sqnr_without_db: f64,
    /// Output SQNR (dB) with only this node quantized.
    pub sqnr_only_db: f64,
}

/// The scan's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sensitivity {
    /// What was varied.
    pub granularity: Granularity,
    /// Output SQNR of the recipe as it is.
    pub baseline_db: f64,
    /// Per unit, most harmful first (largest gain when left in float).
    pub nodes: Vec<NodeSensitivity>,
    /// Variants run in parallel (1 on GPU execution providers).
    pub workers: usize,
    /// How the variants were measured.
    pub method: ScanMethod,
    /// Why a switchable scan ran each variant on its own instead, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    /// When the scan was cancelled part way: how many units it was to measure (`nodes` holds
    /// the ones it had measured, usable as they are).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled_of: Option<usize>,
}

impl Sensitivity {
    /// "7 of 184 nodes measured before the scan was cancelled" for a partial scan.
    pub fn partial_note(&self) -> Option<String> {
        let total = self.cancelled_of?;
        Some(format!(
            "{} of {total} {}s measured before the scan was cancelled",
            self.nodes.len(),
            self.granularity.unit_name()
        ))
    }

    /// How the figures were measured, in words, for both faces.
    pub fn method_note(&self) -> String {
        match (self.method, &self.fallback) {
            (ScanMethod::Switchable, _) => {
                "one switchable model: each node's unit as the variant's own model runs it, its fused integer kernels included".to_owned()
            }
            (ScanMethod::Exact, None) => "each variant quantized and run on its own".to_owned(),
            (ScanMethod::Exact, Some(why)) => {
                format!("each variant quantized and run on its own ({why})")
            }
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

/// A variant that quantizes nothing is the float model: infinite SQNR, full agreement.
fn or_float(result: Result<f64, EvalError>) -> Result<f64, EvalError> {
    match result {
        Err(EvalError::NothingToQuantize) => Ok(f64::INFINITY),
        other => other,
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

/// Sessions to run side by side on `eps`: on the CPU one per core (up to 8, each then on
/// one thread) as far as the memory available holds `need()` bytes for each ([`workers_within`]);
/// one on accelerators, which run one model at a time anyway and whose memory is the limit.
/// `need` is only asked on the CPU.
pub(crate) fn cpu_workers(eps: &[EpSpec], need: impl FnOnce() -> u64) -> usize {
    if !eps.iter().all(|e| matches!(e, EpSpec::Cpu)) {
        return 1;
    }
    let cores = rayon::current_num_threads().clamp(1, 8);
    workers_within(cores, need(), crate::util::available_memory())
}

/// Up to `cores` workers, as many as `available` bytes hold at `need` each (at least one:
/// a single variant that cannot fit is refused by the quantizer with the numbers).
pub(crate) fn workers_within(cores: usize, need: u64, available: Option<u64>) -> usize {
    match available {
        Some(available) if need > 0 => cores.min((available / need) as usize).max(1),
        _ => cores,
    }
}

/// The recipe variants of one unit: (it left in float, only it quantized).
fn variants(recipe: &Recipe, unit: &str, granularity: Granularity) -> (Recipe, Recipe) {
    let mut without = recipe.clone();
    let mut only = recipe.clone();
    match granularity {
        Granularity::Node => {
            without.nodes_to_exclude.push(exact(unit));
            only.nodes_to_quantize = vec![exact(unit)];
        }
        Granularity::OpType => {
            without.op_types_to_exclude.push(unit.to_owned());
            only.op_types_to_quantize = vec![unit.to_owned()];
        }
    }
    (without, only)
}

/// For each node (or op type) the recipe quantizes: output SQNR with only it left in float,
/// and with only it quantized. Variants run in parallel on the CPU EP; progress per unit;
/// cancellable between runs.
pub fn scan(
    eval: &Evaluator<'_>,
    recipe: &Recipe,
    granularity: Granularity,
    method: ScanMethod,
    ctx: &JobContext,
) -> Result<Sensitivity, EvalError> {
    Ok(scan_keeping(eval, recipe, granularity, method, ctx)?.0)
}

/// [`scan`], also returning the switchable model it ran (auto-exclude's steps reuse it).
pub fn scan_keeping(
    eval: &Evaluator<'_>,
    recipe: &Recipe,
    granularity: Granularity,
    method: ScanMethod,
    ctx: &JobContext,
) -> Result<(Sensitivity, Option<Switchable>), EvalError> {
    let base = quant::quantize(eval.float, Some(eval.stats), recipe).map_err(quant_error)?;
    let units: Vec<String> = match granularity {
        Granularity::Node => base.quantized_nodes.clone(),
        Granularity::OpType => {
            let graph = Graph::build(eval.float);
            let mut types: Vec<String> = base
                .quantized_nodes
                .iter()
                .filter_map(|n| graph.node_by_name(n).map(|node| node.op_type.clone()))
                .collect();
            types.sort();
            types.dedup();
            types
        }
    };
    scan_units_keeping(eval, recipe, granularity, &units, method, ctx)
}

/// [`scan`] over chosen units only (node names, or op types): a quick look at the nodes a
/// user suspects, or the second pass over a first pass's worst.
pub fn scan_units(
    eval: &Evaluator<'_>,
    recipe: &Recipe,
    granularity: Granularity,
    units: &[String],
    method: ScanMethod,
    ctx: &JobContext,
) -> Result<Sensitivity, EvalError> {
    Ok(scan_units_keeping(eval, recipe, granularity, units, method, ctx)?.0)
}

/// [`scan_units`], also returning the switchable model it ran.
pub fn scan_units_keeping(
    eval: &Evaluator<'_>,
    recipe: &Recipe,
    granularity: Granularity,
    units: &[String],
    method: ScanMethod,
    ctx: &JobContext,
) -> Result<(Sensitivity, Option<Switchable>), EvalError> {
    let mut fallback = None;
    if method == ScanMethod::Switchable {
        match switched_scan(eval, recipe, granularity, units, ctx) {
            Ok(done) => return Ok(done),
            Err(Fallback::NotSwitchable(why)) => {
                tracing::info!("the scan runs each variant on its own: {why}");
                fallback = Some(why);
            }
            Err(Fallback::Failed(e)) => return Err(e),
        }
    }
    let mut sensitivity = exact_scan(eval, recipe, granularity, units, ctx)?;
    sensitivity.fallback = fallback;
    Ok((sensitivity, None))
}

/// The units sorted most harmful first (largest gain when left in float), ties by name.
fn rank(nodes: &mut [NodeSensitivity]) {
    nodes.sort_by(|a, b| {
        b.sqnr_without_db
            .total_cmp(&a.sqnr_without_db)
            .then_with(|| a.node.cmp(&b.node))
    });
}

/// The scan as gate settings of one switchable model: the recipe, then each unit's two
/// variants.
fn switched_scan(
    eval: &Evaluator<'_>,
    recipe: &Recipe,
    granularity: Granularity,
    units: &[String],
    ctx: &JobContext,
) -> Result<(Sensitivity, Option<Switchable>), Fallback> {
    let mut recipes = vec![recipe.clone()];
    for unit in units {
        let (without, only) = variants(recipe, unit, granularity);
        recipes.extend([without, only]);
    }
    let started = std::time::Instant::now();
    let gating = Gating::for_providers(eval.eps);
    let switchable = Switchable::build(eval.float, eval.stats, &recipes, gating, ctx)?;
    tracing::debug!(
        "switchable model of {} variants ({gating:?}) built in {:.1} s",
        recipes.len(),
        started.elapsed().as_secs_f64()
    );
    if switchable.is_float(0) {
        return Err(Fallback::Failed(EvalError::NothingToQuantize));
    }
    let (scores, workers) = {
        let opened = std::time::Instant::now();
        let runs = GatedRuns::open(eval, &switchable, true, ctx.cancel_token())?;
        tracing::debug!(
            "{} session(s) opened in {:.1} s",
            runs.workers(),
            opened.elapsed().as_secs_f64()
        );
        let ran = std::time::Instant::now();
        let measured = measured_variants(&runs, ctx)?;
        tracing::debug!("variants run in {:.1} s", ran.elapsed().as_secs_f64());
        (measured, runs.workers())
    };
    let score = |at: usize| scores.scores.get(at).copied().flatten();
    // A cancelled scan keeps each unit whose two variants were measured; without the
    // baseline there is nothing to compare them with.
    let Some(baseline_db) = score(0) else {
        return Err(Fallback::Failed(EvalError::Cancelled));
    };
    let mut nodes: Vec<NodeSensitivity> = units
        .iter()
        .enumerate()
        .filter_map(|(i, unit)| {
            Some(NodeSensitivity {
                node: unit.clone(),
                sqnr_without_db: score(1 + 2 * i)?,
                sqnr_only_db: score(2 + 2 * i)?,
            })
        })
        .collect();
    rank(&mut nodes);
    let sensitivity = Sensitivity {
        granularity,
        baseline_db,
        nodes,
        workers,
        method: ScanMethod::Switchable,
        fallback: None,
        cancelled_of: scores.cancelled.then_some(units.len()),
    };
    Ok((sensitivity, Some(switchable)))
}

/// The scan with each variant quantized and opened on its own, in parallel on the CPU EP.
fn exact_scan(
    eval: &Evaluator<'_>,
    recipe: &Recipe,
    granularity: Granularity,
    units: &[String],
    ctx: &JobContext,
) -> Result<Sensitivity, EvalError> {
    let baseline_db = eval.sqnr(recipe)?;
    let workers = eval.workers(recipe);
    let threads = if workers > 1 { 1 } else { 0 };
    let meter = RateMeter::new("sensitivity scan", units.len() as u64);
    let done = AtomicU64::new(0);
    let run_unit = |unit: &String| -> Result<NodeSensitivity, EvalError> {
        ctx.checkpoint().map_err(|_| EvalError::Cancelled)?;
        let (without, only) = variants(recipe, unit, granularity);
        let cancel = ctx.cancel_token();
        let score =
            |r: &Recipe| Target::SqnrDb(0.0).score(&eval.metrics_until(r, threads, cancel)?);
        // Excluding the last quantizable node leaves the float model; quantizing only a node
        // that shares its input's scale quantizes nothing.
        let sqnr_without_db = or_float(score(&without))?;
        ctx.checkpoint().map_err(|_| EvalError::Cancelled)?;
        let sqnr_only_db = or_float(score(&only))?;
        let finished = done.fetch_add(1, Ordering::Relaxed) + 1;
        ctx.report(meter.progress(finished, unit.clone()));
        Ok(NodeSensitivity {
            node: unit.clone(),
            sqnr_without_db,
            sqnr_only_db,
        })
    };
    // Each unit's own result: a cancelled scan keeps the units it had measured.
    let mut nodes = Vec::new();
    let mut cancelled = false;
    for result in super::switched_scan::on_workers_each(workers, units, run_unit)? {
        match result {
            Ok(node) => nodes.push(node),
            Err(EvalError::Cancelled) => cancelled = true,
            Err(e) => return Err(e),
        }
    }
    if cancelled && nodes.is_empty() {
        return Err(EvalError::Cancelled);
    }
    rank(&mut nodes);
    Ok(Sensitivity {
        granularity,
        baseline_db,
        nodes,
        workers,
        method: ScanMethod::Exact,
        fallback: None,
        cancelled_of: cancelled.then_some(units.len()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_variants_are_bounded_by_the_memory_available() {
        // A 1.1B decoder's int8 variant needs about 2.6 GB: 8 GB holds three at once.
        assert_eq!(workers_within(8, 2_600_000_000, Some(8_000_000_000)), 3);
        assert_eq!(workers_within(8, 2_600_000_000, Some(1_000_000_000)), 1);
        assert_eq!(workers_within(4, 1_000, Some(1 << 40)), 4);
        assert_eq!(workers_within(4, 1_000, None), 4);
    }

    use crate::eval::TaskMetric;

    fn metrics(sqnr_db: f64, top1: Option<f64>) -> OutputMetrics {
        OutputMetrics::with_sqnr("y", crate::eval::OutputKind::Classifier, sqnr_db, top1)
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
    fn an_accuracy_target_scores_the_quantized_headline_metric() {
        let score = |metric, quantized| crate::eval::TaskScore {
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
