//! Sensitivity scan: how much each quantized node (or op type) costs the outputs (auto-exclude,
//! [`super::auto_exclude`], starts from it). Every figure comes from a real run of a model
//! re-quantized from the cached statistics (no re-calibration), compared against the float
//! outputs captured once in a [`crate::eval::compare::reference::Reference`].

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use crate::eval::compare::EvalError;
use crate::eval::search::evaluator::{Evaluator, Target, exact, quant_error};
use crate::eval::search::switchable::{Gating, Switchable};
use crate::eval::search::switched_scan::{Fallback, GatedRuns, ScanMethod, measured_variants};
use crate::jobs::{JobContext, RateMeter};
use crate::model::Graph;
use crate::quant::{self};
use crate::recipe::Recipe;

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

/// A variant that quantizes nothing is the float model: infinite SQNR, full agreement.
fn or_float(result: Result<f64, EvalError>) -> Result<f64, EvalError> {
    match result {
        Err(EvalError::NothingToQuantize) => Ok(f64::INFINITY),
        other => other,
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
    for result in crate::eval::search::switched_scan::on_workers_each(workers, units, run_unit)? {
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
