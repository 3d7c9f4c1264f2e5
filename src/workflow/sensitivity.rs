//! The sensitivity scan and auto-exclude as steps: the float reference captured (or reused),
//! every quantized node (or op type, or the chosen candidates) ranked by its cost to the
//! outputs, and the most harmful kept in float until a target is met.

use super::WorkflowError;
use super::reference::{CapturedReference, EvalSetup};
use std::sync::Arc;

use crate::eval::search::auto_exclude::{AutoExclude, Goal, auto_exclude};

use crate::eval::search::sensitivity::{
    Granularity, Sensitivity, scan_keeping, scan_units_keeping,
};
use crate::eval::search::switchable::Switchable;
use crate::eval::search::switched_scan::ScanMethod;
use crate::jobs::JobContext;
use crate::model::Graph;
use crate::recipe::Recipe;
use crate::runtime::Runtime;

/// A finished scan, with the recipe and reference it used.
#[derive(Debug, Clone)]
pub struct Scanned {
    /// The ranking.
    pub sensitivity: Sensitivity,
    /// The recipe scanned.
    pub recipe: Recipe,
    /// The reference (kept for later runs).
    pub reference: CapturedReference,
    /// The switchable model the scan ran, when it ran one (auto-exclude's steps reuse it).
    pub switchable: Option<Arc<Switchable>>,
}

/// An error naming the first of `candidates` the model does not have (a node name, or an op
/// type for an op-type scan).
fn check_candidates(
    graph: &Graph,
    granularity: Granularity,
    candidates: &[String],
) -> Result<(), WorkflowError> {
    let by_type = granularity == Granularity::OpType;
    for candidate in candidates {
        let known = if by_type {
            graph.nodes().iter().any(|n| &n.op_type == candidate)
        } else {
            graph.node_by_name(candidate).is_some()
        };
        if !known {
            return Err(WorkflowError::Settings(format!(
                "--candidates: the model has no {} named {candidate}",
                if by_type { "op type" } else { "node" }
            )));
        }
    }
    Ok(())
}

/// Ranks the recipe's quantized nodes (or op types) by their cost to the outputs; only
/// `candidates` when some are given.
pub fn scan_setup(
    setup: &EvalSetup,
    granularity: Granularity,
    candidates: &[String],
    method: ScanMethod,
    runtime: &Runtime,
    ctx: &JobContext,
) -> Result<Scanned, WorkflowError> {
    check_candidates(&Graph::build(&setup.model), granularity, candidates)?;
    let (reference, _) = setup.reference(runtime, ctx)?;
    let evaluator = setup.evaluator(&reference, runtime);
    let recipe = &setup.recipe;
    let (sensitivity, switchable) = if candidates.is_empty() {
        scan_keeping(&evaluator, recipe, granularity, method, ctx)?
    } else {
        scan_units_keeping(&evaluator, recipe, granularity, candidates, method, ctx)?
    };
    Ok(Scanned {
        sensitivity,
        recipe: setup.recipe.clone(),
        reference,
        switchable: switchable.map(Arc::new),
    })
}

/// Auto-exclude to `goal`, scanning first when `scanned` is not a node scan of this recipe.
pub fn auto_exclude_setup(
    setup: &EvalSetup,
    scanned: Option<Scanned>,
    goal: Goal,
    runtime: &Runtime,
    ctx: &JobContext,
) -> Result<(AutoExclude, Scanned), WorkflowError> {
    let fits =
        |s: &Scanned| s.recipe == setup.recipe && s.sensitivity.granularity == Granularity::Node;
    let scanned = match scanned.filter(fits) {
        Some(scanned) => scanned,
        None => scan_setup(
            setup,
            Granularity::Node,
            &[],
            ScanMethod::default(),
            runtime,
            ctx,
        )?,
    };
    let evaluator = setup.evaluator(&scanned.reference, runtime);
    let result = auto_exclude(
        &evaluator,
        &setup.recipe,
        &scanned.sensitivity,
        goal,
        scanned.switchable.as_deref(),
        ctx,
    )?;
    Ok((result, scanned))
}
