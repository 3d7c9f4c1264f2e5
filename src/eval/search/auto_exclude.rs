//! Auto-exclude: from a node scan, the few nodes to promote to 16-bit activations or keep in
//! float so the model reaches a target, each step verified by a real run; the tries run
//! several at once and are decided in order ([`crate::eval::search::greedy`]).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::eval::compare::EvalError;
use crate::eval::search::alternatives::{Alternative, measure_alternatives};
use crate::eval::search::evaluator::{Evaluator, Target, exact, quant_error};
use crate::eval::search::greedy::{Greedy, Measured, Pass, Scorer, improves, take_in_order};
use crate::eval::search::sensitivity::{Granularity, NodeSensitivity, Sensitivity};
use crate::eval::search::switchable::Switchable;
use crate::jobs::JobContext;
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
    let scorer = Scorer::open(eval, recipe, goal.target, switchable, ctx.cancel_token())?;
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
            let promote = goal.promote.then(|| Try::new(&node.node, Change::Promote));
            promote
                .into_iter()
                .chain([Try::new(&node.node, Change::Float)])
        });
        let done = |steps: &Steps| reached(steps) || steps.changed() >= goal.max_changed;
        let pass = Pass {
            stage: "auto-exclude",
            scorer: &scorer,
            ctx,
        };
        take_in_order(&mut steps, tries.collect(), pass, done)?;
        // Not there with the harmful nodes tried: the promoted nodes in float instead.
        let demotions = steps.promoted.iter();
        let tries: Vec<Try> = demotions
            .map(|node| Try::new(node, Change::PromotedToFloat))
            .collect();
        let pass = Pass {
            stage: "auto-exclude: promoted nodes in float",
            scorer: &scorer,
            ctx,
        };
        take_in_order(&mut steps, tries, pass, reached)?;
    }
    let Steps {
        current,
        excluded,
        promoted,
        best: (mut score, mut sqnr_db),
    } = steps;
    if scorer.switched() {
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
    fn new(node: &str, change: Change) -> Self {
        Try {
            node: node.to_owned(),
            change,
        }
    }
}

/// The recipe auto-exclude has reached, what it changed, and its measured (score, SQNR).
struct Steps {
    current: Recipe,
    excluded: Vec<String>,
    promoted: Vec<String>,
    best: Measured,
}

impl Greedy for Steps {
    type Try = Try;

    fn best(&self) -> Measured {
        self.best
    }

    /// `None` for a promotion the recipe cannot express or already has, and for float on a
    /// node just promoted.
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

    /// Nodes changed so far (in float or promoted).
    fn changed(&self) -> usize {
        self.excluded.len() + self.promoted.len()
    }

    fn subject(attempt: &Try) -> String {
        attempt.node.clone()
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
