//! Sensitivity scan and auto-exclude: how much each quantized node costs the outputs, and the
//! smallest set of nodes to keep in float to reach a target. Every figure comes from a real
//! run of a model re-quantized from the cached statistics (no re-calibration).

use serde::Serialize;

use super::{EvalError, compare_outputs};
use crate::calib::data::BatchSource;
use crate::calib::stats::CalibrationStats;
use crate::jobs::{JobContext, RateMeter};
use crate::model::Model;
use crate::quant::{self, QuantError};
use crate::recipe::Recipe;
use crate::runtime::{EpSpec, Runtime};

/// One node's sensitivity.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeSensitivity {
    /// The node's name.
    pub node: String,
    /// Output SQNR (dB, worst output) with every other node quantized and this one in float.
    pub sqnr_without_db: f64,
    /// Output SQNR (dB) with only this node quantized.
    pub sqnr_only_db: f64,
}

/// The scan's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sensitivity {
    /// Output SQNR of the recipe as it is.
    pub baseline_db: f64,
    /// Per node, most harmful first (largest gain when left in float).
    pub nodes: Vec<NodeSensitivity>,
}

/// An anchored, escaped pattern naming exactly one node.
fn exact(name: &str) -> String {
    format!("{}$", regex::escape(name))
}

fn quant_error(e: QuantError) -> EvalError {
    match e {
        QuantError::NothingToQuantize { .. } => EvalError::NothingToQuantize,
        e => EvalError::Run {
            batch: 0,
            model: "quantized",
            reason: e.to_string(),
        },
    }
}

/// A variant that quantizes nothing is the float model: infinite SQNR.
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
    /// Evaluation data.
    pub source: &'a mut dyn BatchSource,
    /// ONNX Runtime.
    pub runtime: &'a Runtime,
    /// Execution providers.
    pub eps: &'a [EpSpec],
    /// Samples per batch.
    pub batch_size: usize,
}

impl Evaluator<'_> {
    /// Worst output SQNR of `recipe`'s model.
    pub fn sqnr(&mut self, recipe: &Recipe) -> Result<f64, EvalError> {
        let q = quant::quantize(self.float, Some(self.stats), recipe).map_err(quant_error)?;
        self.source.rewind()?;
        let metrics = compare_outputs(
            self.float,
            &q.model,
            self.source,
            self.runtime,
            self.eps,
            self.batch_size,
            &JobContext::silent(),
        )?;
        Ok(metrics
            .iter()
            .map(|m| m.sqnr_db)
            .fold(f64::INFINITY, f64::min))
    }
}

/// For each node the recipe quantizes: output SQNR with only it left in float, and with only
/// it quantized. Reports progress per node; cancellable between runs.
pub fn scan(
    eval: &mut Evaluator<'_>,
    recipe: &Recipe,
    ctx: &JobContext,
) -> Result<Sensitivity, EvalError> {
    let base = quant::quantize(eval.float, Some(eval.stats), recipe).map_err(quant_error)?;
    let baseline_db = eval.sqnr(recipe)?;
    let meter = RateMeter::new("sensitivity scan", base.quantized_nodes.len() as u64);
    let mut nodes = Vec::with_capacity(base.quantized_nodes.len());
    for (i, node) in base.quantized_nodes.iter().enumerate() {
        ctx.checkpoint().map_err(|_| EvalError::Cancelled)?;
        let mut without = recipe.clone();
        without.nodes_to_exclude.push(exact(node));
        // Excluding the last quantizable node leaves the float model; quantizing only a node
        // that shares its input's scale quantizes nothing.
        let sqnr_without_db = or_float(eval.sqnr(&without))?;
        let mut only = recipe.clone();
        only.nodes_to_quantize = vec![exact(node)];
        let sqnr_only_db = or_float(eval.sqnr(&only))?;
        nodes.push(NodeSensitivity {
            node: node.clone(),
            sqnr_without_db,
            sqnr_only_db,
        });
        ctx.report(meter.progress(i as u64 + 1, node.clone()));
    }
    nodes.sort_by(|a, b| b.sqnr_without_db.total_cmp(&a.sqnr_without_db));
    Ok(Sensitivity { baseline_db, nodes })
}

/// The result of auto-exclude.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AutoExclude {
    /// The recipe with the chosen nodes excluded.
    #[serde(skip)]
    pub recipe: Recipe,
    /// The nodes kept in float, in the order they were added.
    pub excluded: Vec<String>,
    /// Output SQNR reached (verified by a real run).
    pub sqnr_db: f64,
    /// Whether the target was reached.
    pub reached: bool,
}

/// Greedy auto-exclude: keep the most harmful nodes (by the scan) in float, one at a time,
/// verifying each step with a real run, until the output SQNR reaches `target_db` or
/// `max_excluded` nodes are out.
pub fn auto_exclude(
    eval: &mut Evaluator<'_>,
    recipe: &Recipe,
    scan: &Sensitivity,
    target_db: f64,
    max_excluded: usize,
    ctx: &JobContext,
) -> Result<AutoExclude, EvalError> {
    let mut current = recipe.clone();
    let mut excluded = Vec::new();
    let mut sqnr_db = scan.baseline_db;
    for node in scan
        .nodes
        .iter()
        .filter(|n| n.sqnr_without_db > scan.baseline_db)
    {
        if sqnr_db >= target_db || excluded.len() >= max_excluded {
            break;
        }
        ctx.checkpoint().map_err(|_| EvalError::Cancelled)?;
        let mut next = current.clone();
        next.nodes_to_exclude.push(exact(&node.node));
        let reached = or_float(eval.sqnr(&next))?;
        // Keep a step only if the real run confirms it helps.
        if reached > sqnr_db {
            current = next;
            excluded.push(node.node.clone());
            sqnr_db = reached;
        }
    }
    Ok(AutoExclude {
        recipe: current,
        excluded,
        sqnr_db,
        reached: sqnr_db >= target_db,
    })
}
