//! Auto-exclude: from a node scan, the few nodes to promote to 16-bit activations or keep in
//! float so the model reaches a target, each step verified by a real run.
//!
//! The search is greedy and sequential in what it decides (each step is measured on the
//! recipe the steps before it left), but its runs are not: the next few tries are measured
//! at once against the current recipe, one per worker, and taken in order. Most tries are
//! turned down (PP-OCR rec: 9 of 300 kept), so the runs a kept step makes stale (those
//! after it, measured against the recipe before it) are few; they run again. The result is
//! the one a one-at-a-time search reaches.

use std::collections::{BTreeMap, VecDeque};

use rayon::prelude::*;
use serde::Serialize;

use super::EvalError;
use super::OutputMetrics;
use super::alternatives::{Alternative, measure_alternatives};
use super::sensitivity::{
    Evaluator, Granularity, NodeSensitivity, Sensitivity, Target, exact, quant_error,
};
use super::switchable::Switchable;
use super::switched_scan::{GatedRuns, worker_pool};
use crate::jobs::{JobContext, RateMeter};
use crate::model::Graph;
use crate::quant::{self, QuantError};
use crate::recipe::{NodePrecision, Recipe, node_precision};

/// What auto-exclude aims for and what it may change.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Goal {
    /// The score to reach.
    pub target: Target,
    /// At most this many nodes changed (kept in float or promoted).
    pub max_changed: usize,
    /// Try 16-bit activations (`w8a16`) on a node before keeping it in float. Off: float
    /// only (what a CPU deployment wants: ONNX Runtime's CPU kernels run 16-bit Q/DQ in
    /// float, slower than the float node).
    pub promote: bool,
}

impl Goal {
    /// `target` with at most `max_changed` nodes changed, promotions tried first.
    pub fn new(target: Target, max_changed: usize) -> Self {
        Goal {
            target,
            max_changed,
            promote: true,
        }
    }
}

/// The result of auto-exclude.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AutoExclude {
    /// The recipe with the chosen nodes excluded.
    #[serde(skip)]
    pub recipe: Recipe,
    /// The target asked for.
    pub target: Target,
    /// The nodes kept in float, in the order they were added.
    pub excluded: Vec<String>,
    /// The nodes given 16-bit activations (`w8a16`) instead, in the order they were promoted:
    /// each was tried before float and kept where the real run confirmed it helped.
    pub promoted: Vec<String>,
    /// The target's score reached (dB, or top-1 share), verified by a real run.
    pub score: f64,
    /// Worst output SQNR of the final recipe (dB).
    pub sqnr_db: f64,
    /// Whether the target was reached.
    pub reached: bool,
    /// Quantized nodes per op type in the final model (how many Conv/MatMul/Gemm stay
    /// quantized is what decides the speed-up).
    pub quantized_by_op_type: BTreeMap<String, usize>,
    /// When the target was not reached: recipe-wide changes on top of the final recipe, each
    /// measured by a real run, best first (empty when it was reached).
    pub alternatives: Vec<Alternative>,
    /// Tries measured at once (1 on accelerators).
    pub workers: usize,
}

impl AutoExclude {
    /// The recipe to keep: the best measured recipe-wide change when `take_alternative` and
    /// one does better, else the recipe with the nodes kept in float; with the change taken.
    pub fn chosen(&self, take_alternative: bool) -> (&Recipe, Option<&Alternative>) {
        match self.best_alternative().filter(|_| take_alternative) {
            Some(best) => (&best.recipe, Some(best)),
            None => (&self.recipe, None),
        }
    }

    /// The best measured recipe-wide change, if it does better than the excluded nodes alone
    /// (a higher score, or the same score at a higher SQNR).
    pub fn best_alternative(&self) -> Option<&Alternative> {
        self.alternatives
            .first()
            .filter(|a| improves((a.score, a.sqnr_db), (self.score, self.sqnr_db)))
    }
}

/// Whether `(score, sqnr_db)` does better than `than`: a higher score, or the same score at a
/// higher SQNR (coarse scores such as agreement shares often tie).
fn improves(candidate: (f64, f64), than: (f64, f64)) -> bool {
    candidate.0 > than.0 || (candidate.0 == than.0 && candidate.1 > than.1)
}

/// Greedy auto-exclude: change the most harmful nodes (by a node scan) one at a time, first
/// to 16-bit activations (when `goal.promote`, so the node stays quantized), else to float,
/// verifying each step with a real run and keeping it only if it helps, until the target is
/// reached or `goal.max_changed` nodes are changed. When the harmful nodes are through and the
/// target is still missed, the promoted nodes are tried in float instead.
///
/// Nodes are tried in order of harm done alone (lowest SQNR with only that node quantized),
/// then by gain when left out: when error is spread over many nodes, leaving any single one in
/// float barely moves the output, but the nodes that hurt most on their own still add up.
/// On the CPU, as many tries run at once as there are cores (memory permitting; see the
/// module's doc); the steps taken are those of one try at a time.
///
/// When that does not reach the target, recipe-wide changes (other range methods, 16-bit
/// activations) are measured on top of the result and listed in
/// [`AutoExclude::alternatives`]; the caller chooses whether to take one.
pub fn auto_exclude(
    eval: &Evaluator<'_>,
    recipe: &Recipe,
    scan: &Sensitivity,
    goal: Goal,
    switchable: Option<&Switchable>,
    ctx: &JobContext,
) -> Result<AutoExclude, EvalError> {
    let scorer = Scorer::open(eval, recipe, goal.target, switchable)?;
    let best = scorer.score_one(recipe)?;
    let mut steps = Steps {
        current: recipe.clone(),
        excluded: Vec::new(),
        promoted: Vec::new(),
        best,
    };
    if scan.granularity == Granularity::Node {
        let reached = |steps: &Steps| steps.best.0 >= goal.target.goal();
        // A promotion keeps the node quantized: tried first, float only when it does not help.
        let tries = harm_order(scan).into_iter().flat_map(|node| {
            let promote = goal.promote.then(|| Try::new(node, Change::Promote));
            promote.into_iter().chain([Try::new(node, Change::Float)])
        });
        let done = |steps: &Steps| reached(steps) || steps.changed() >= goal.max_changed;
        let pass = Pass::new("auto-exclude", &scorer, ctx);
        steps.take_in_order(tries.collect(), pass, done)?;
        // Not there with the harmful nodes tried: the promoted nodes in float instead.
        let demotions = steps.promoted.iter();
        let tries = demotions.map(|node| Try::new_owned(node.clone(), Change::PromotedToFloat));
        let pass = Pass::new("auto-exclude: promoted nodes in float", &scorer, ctx);
        steps.take_in_order(tries.collect(), pass, reached)?;
    }
    let Steps {
        current,
        excluded,
        promoted,
        best: (mut score, mut sqnr_db),
    } = steps;
    if scorer.runs.is_some() {
        // Steps ran on the scan's switchable model; the result is measured on its own model.
        (score, sqnr_db) = scorer.exact_score(&current, 0)?;
    }
    let quantized_by_op_type = match quant::quantize(eval.float, Some(eval.stats), &current) {
        Ok(q) => q.quantized_by_op_type(&Graph::build(eval.float)),
        Err(QuantError::NothingToQuantize { .. }) => BTreeMap::new(),
        Err(e) => return Err(quant_error(e)),
    };
    let reached = score >= goal.target.goal();
    let alternatives = if reached {
        Vec::new()
    } else {
        measure_alternatives(eval, &current, goal.target, ctx)?
    };
    Ok(AutoExclude {
        recipe: current,
        target: goal.target,
        excluded,
        promoted,
        score,
        sqnr_db,
        reached,
        quantized_by_op_type,
        alternatives,
        workers: scorer.workers,
    })
}

/// The nodes a node scan found harmful, most harmful alone first (lowest SQNR with only
/// that node quantized), then by gain when left out.
fn harm_order(scan: &Sensitivity) -> Vec<&NodeSensitivity> {
    let mut order: Vec<&NodeSensitivity> = scan
        .nodes
        .iter()
        .filter(|n| n.sqnr_only_db.is_finite() || n.sqnr_without_db > scan.baseline_db)
        .collect();
    order.sort_by(|a, b| {
        a.sqnr_only_db
            .total_cmp(&b.sqnr_only_db)
            .then_with(|| b.sqnr_without_db.total_cmp(&a.sqnr_without_db))
    });
    order
}

/// What a try does to a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// 16-bit activations (`w8a16`), the node stays quantized.
    Promote,
    /// The node in float.
    Float,
    /// A node promoted earlier in float instead.
    PromotedToFloat,
}

/// One step auto-exclude may take.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Try {
    node: String,
    change: Change,
}

impl Try {
    fn new(node: &NodeSensitivity, change: Change) -> Self {
        Try::new_owned(node.node.clone(), change)
    }

    fn new_owned(node: String, change: Change) -> Self {
        Try { node, change }
    }
}

/// A recipe's measured (target score, worst output SQNR).
type Measured = (f64, f64);

/// The recipe auto-exclude has reached, what it changed, and its measured (score, SQNR).
struct Steps {
    current: Recipe,
    excluded: Vec<String>,
    promoted: Vec<String>,
    best: Measured,
}

impl Steps {
    /// Nodes changed so far (in float or promoted).
    fn changed(&self) -> usize {
        self.excluded.len() + self.promoted.len()
    }

    /// The recipe `attempt` would make of the current one; `None` when it does not apply (a
    /// promotion the recipe cannot express or already has, float for a node just promoted).
    fn recipe_for(&self, attempt: &Try) -> Option<Recipe> {
        let node = attempt.node.as_str();
        match attempt.change {
            Change::Promote => with_sixteen_bits(&self.current, node),
            Change::Float => (!self.promoted.iter().any(|p| p == node))
                .then(|| excluded_too(&self.current, node)),
            Change::PromotedToFloat => {
                let mut next = excluded_too(&self.current, node);
                next.node_precision.remove(node);
                Some(next)
            }
        }
    }

    /// Takes `attempt`, measured as `measured`.
    fn take(&mut self, attempt: Try, next: Recipe, measured: Measured) {
        match attempt.change {
            Change::Promote => self.promoted.push(attempt.node),
            Change::Float => self.excluded.push(attempt.node),
            Change::PromotedToFloat => {
                self.promoted.retain(|n| *n != attempt.node);
                self.excluded.push(attempt.node);
            }
        }
        self.current = next;
        self.best = measured;
    }

    /// Goes through `tries` in order, taking each that does better than the current recipe,
    /// until `done`. Up to `scorer.workers` tries are measured at once against the current
    /// recipe; once one is taken, the tries measured after it go back to the queue's front
    /// (they were measured against the recipe before it), so what is taken is what trying
    /// them one at a time would take. Progress counts the tries decided.
    fn take_in_order(
        &mut self,
        tries: Vec<Try>,
        pass: Pass,
        done: impl Fn(&Steps) -> bool,
    ) -> Result<(), EvalError> {
        let meter = RateMeter::new(pass.stage, tries.len() as u64);
        let mut decided = 0;
        let mut queue = VecDeque::from(tries);
        while !done(self) {
            pass.ctx.checkpoint().map_err(|_| EvalError::Cancelled)?;
            let mut batch = Vec::new();
            while batch.len() < pass.scorer.workers {
                let Some(attempt) = queue.pop_front() else {
                    break;
                };
                match self.recipe_for(&attempt) {
                    Some(next) => batch.push((attempt, next)),
                    None => decided += 1,
                }
            }
            if batch.is_empty() {
                return Ok(());
            }
            let recipes: Vec<Recipe> = batch.iter().map(|(_, r)| r.clone()).collect();
            let mut measured = batch.into_iter().zip(pass.scorer.score(&recipes));
            while let Some(((attempt, next), result)) = measured.next() {
                let result = result?;
                decided += 1;
                let node = attempt.node.clone();
                let taken = improves(result, self.best);
                if taken {
                    self.take(attempt, next, result);
                }
                let detail = format!("{} changed; tried {node}", self.changed());
                pass.ctx.report(meter.progress(decided, detail));
                if taken {
                    let stale: Vec<Try> = measured.map(|((t, _), _)| t).collect();
                    stale.into_iter().rev().for_each(|t| queue.push_front(t));
                    break;
                }
            }
        }
        Ok(())
    }
}

/// One pass of auto-exclude over a list of tries: what it is called, and what measures
/// them.
struct Pass<'s, 'a> {
    stage: &'static str,
    scorer: &'s Scorer<'a>,
    ctx: &'s JobContext,
}

impl<'s, 'a> Pass<'s, 'a> {
    fn new(stage: &'static str, scorer: &'s Scorer<'a>, ctx: &'s JobContext) -> Self {
        Pass { stage, scorer, ctx }
    }
}

/// `recipe` with `node` kept in float too.
fn excluded_too(recipe: &Recipe, node: &str) -> Recipe {
    let mut next = recipe.clone();
    next.nodes_to_exclude.push(exact(node));
    next
}

/// `recipe` with `node`'s activations in 16 bits, when the recipe can say so (int8 with
/// 8-bit types) and does not already.
fn with_sixteen_bits(recipe: &Recipe, node: &str) -> Option<Recipe> {
    if node_precision::cannot_mix(recipe).is_some() || recipe.node_precision.contains_key(node) {
        return None;
    }
    let mut next = recipe.clone();
    next.node_precision
        .insert(node.to_owned(), NodePrecision::W8a16);
    Some(next)
}

/// Measures recipes for auto-exclude: each quantized and run on its own, or as gate settings
/// of the scan's switchable model when that holds their chains; up to `workers` at once.
struct Scorer<'a> {
    eval: &'a Evaluator<'a>,
    target: Target,
    runs: Option<GatedRuns<'a>>,
    workers: usize,
    pool: Option<rayon::ThreadPool>,
}

impl<'a> Scorer<'a> {
    fn open(
        eval: &'a Evaluator<'a>,
        recipe: &Recipe,
        target: Target,
        switchable: Option<&'a Switchable>,
    ) -> Result<Self, EvalError> {
        let runs = switchable
            .map(|s| GatedRuns::open(eval, s, true))
            .transpose()?;
        let workers = match &runs {
            Some(runs) => runs.workers(),
            None => eval.workers(recipe),
        };
        let pool = (workers > 1).then(|| worker_pool(workers)).transpose()?;
        Ok(Scorer {
            eval,
            target,
            runs,
            workers,
            pool,
        })
    }

    /// The measured (score, SQNR) of each recipe, in order, up to `workers` at once.
    fn score(&self, recipes: &[Recipe]) -> Vec<Result<Measured, EvalError>> {
        match &self.pool {
            Some(pool) => pool.install(|| recipes.par_iter().map(|r| self.score_one(r)).collect()),
            None => recipes.iter().map(|r| self.score_one(r)).collect(),
        }
    }

    /// The measured (score, SQNR) of `recipe`; one that quantizes nothing is the float model
    /// (infinite).
    fn score_one(&self, recipe: &Recipe) -> Result<Measured, EvalError> {
        match &self.runs {
            Some(runs) => self.scored(runs.recipe_metrics(recipe)),
            None => self.exact_score(recipe, if self.workers > 1 { 1 } else { 0 }),
        }
    }

    /// The measured (score, SQNR) of `recipe` quantized and run on its own.
    fn exact_score(&self, recipe: &Recipe, threads: usize) -> Result<Measured, EvalError> {
        self.scored(self.eval.metrics(recipe, threads))
    }

    fn scored(
        &self,
        metrics: Result<Vec<OutputMetrics>, EvalError>,
    ) -> Result<Measured, EvalError> {
        match metrics {
            Ok(m) => Ok((self.target.score(&m)?, Target::SqnrDb(0.0).score(&m)?)),
            Err(EvalError::NothingToQuantize) => Ok((f64::INFINITY, f64::INFINITY)),
            Err(e) => Err(e),
        }
    }
}
