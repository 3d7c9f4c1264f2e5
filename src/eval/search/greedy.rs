//! Greedy searches over recipe changes, each kept only when a real run says it does better
//! (auto-exclude, the measured weight-range choice).
//!
//! A search decides one try at a time (each is measured on the recipe the tries before it
//! left), but its runs need not wait on each other: the next few tries are measured at once
//! against the current recipe, one per worker, and decided in order. Most tries are turned
//! down (PP-OCR rec's auto-exclude: 9 of 300 kept), so the runs a kept try makes stale (those
//! after it, measured against the recipe before it) are few; they run again. The result is
//! the one a search trying one at a time reaches.

use std::collections::VecDeque;

use rayon::prelude::*;

use crate::eval::compare::{EvalError, OutputMetrics};
use crate::eval::search::evaluator::{Evaluator, Target};
use crate::eval::search::switchable::Switchable;
use crate::eval::search::switched_scan::{GatedRuns, worker_pool};
use crate::jobs::{CancelToken, JobContext, RateMeter};
use crate::recipe::Recipe;

/// A recipe's measured (target score, worst output SQNR).
pub(crate) type Measured = (f64, f64);

/// Whether `(score, sqnr_db)` does better than `than`: a higher score, or the same score at a
/// higher SQNR (coarse scores such as agreement shares often tie).
pub(crate) fn improves(candidate: Measured, than: Measured) -> bool {
    candidate.0 > than.0 || (candidate.0 == than.0 && candidate.1 > than.1)
}

/// A search's state: the recipe reached, its measure, and what a try makes of it.
pub(crate) trait Greedy {
    /// One change the search may make.
    type Try;

    /// The measure of the recipe reached so far.
    fn best(&self) -> Measured;

    /// The recipe `attempt` would make of the one reached; `None` when it does not apply.
    fn recipe_for(&self, attempt: &Self::Try) -> Option<Recipe>;

    /// Takes `attempt`, which makes `next`, measured as `measured`.
    fn take(&mut self, attempt: Self::Try, next: Recipe, measured: Measured);

    /// How many changes were taken so far (for progress).
    fn changed(&self) -> usize;

    /// What `attempt` changes, in words (a node's or a weight's name, for progress).
    fn subject(attempt: &Self::Try) -> String;
}

/// Goes through `tries` in order, taking each that does better than the recipe reached,
/// until `done`. Up to `pass.scorer`'s workers tries are measured at once against that
/// recipe; once one is taken, the tries measured after it go back to the queue's front, so
/// what is taken is what trying them one at a time would take. Progress counts the tries
/// decided; cancellable between runs.
pub(crate) fn take_in_order<G: Greedy>(
    state: &mut G,
    tries: Vec<G::Try>,
    pass: Pass,
    done: impl Fn(&G) -> bool,
) -> Result<(), EvalError> {
    let meter = RateMeter::new(pass.stage, tries.len() as u64);
    let mut decided = 0;
    let mut queue = VecDeque::from(tries);
    while !done(state) {
        pass.ctx.checkpoint().map_err(|_| EvalError::Cancelled)?;
        let mut batch = Vec::new();
        while batch.len() < pass.scorer.workers {
            let Some(attempt) = queue.pop_front() else {
                break;
            };
            match state.recipe_for(&attempt) {
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
            let subject = G::subject(&attempt);
            let taken = improves(result, state.best());
            if taken {
                state.take(attempt, next, result);
            }
            let detail = format!("{} changed; tried {subject}", state.changed());
            pass.ctx.report(meter.progress(decided, detail));
            if taken {
                let stale: Vec<G::Try> = measured.map(|((t, _), _)| t).collect();
                stale.into_iter().rev().for_each(|t| queue.push_front(t));
                break;
            }
        }
    }
    Ok(())
}

/// One pass of a search over a list of tries: what it is called (progress), what measures
/// them, and the job it runs in.
pub(crate) struct Pass<'s, 'a> {
    pub stage: &'static str,
    pub scorer: &'s Scorer<'a>,
    pub ctx: &'s JobContext,
}

/// Measures recipes for a search: each quantized and run on its own, or as gate settings of
/// a scan's switchable model when that holds their chains; up to `workers` at once.
pub(crate) struct Scorer<'a> {
    eval: &'a Evaluator<'a>,
    target: Target,
    runs: Option<GatedRuns<'a>>,
    /// Recipes measured at once: one per core on the CPU as far as memory holds them (each
    /// session on one thread), one on accelerators.
    pub workers: usize,
    pool: Option<rayon::ThreadPool>,
    /// The job's cancel token: a cancel stops the runs in flight.
    cancel: CancelToken,
}

impl<'a> Scorer<'a> {
    /// A scorer for recipes like `recipe`, scoring by `target`; on `switchable`'s sessions
    /// when given; its runs stop at once when `cancel` is cancelled.
    pub fn open(
        eval: &'a Evaluator<'a>,
        recipe: &Recipe,
        target: Target,
        switchable: Option<&'a Switchable>,
        cancel: &CancelToken,
    ) -> Result<Self, EvalError> {
        let runs = switchable
            .map(|s| GatedRuns::open(eval, s, true, cancel))
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
            cancel: cancel.clone(),
        })
    }

    /// Whether recipes run on a switchable model (figures of the Q/DQ arithmetic, not of
    /// each recipe's own model).
    pub fn switched(&self) -> bool {
        self.runs.is_some()
    }

    /// The measured (score, SQNR) of each recipe, in order, up to `workers` at once.
    pub fn score(&self, recipes: &[Recipe]) -> Vec<Result<Measured, EvalError>> {
        match &self.pool {
            Some(pool) => pool.install(|| recipes.par_iter().map(|r| self.score_one(r)).collect()),
            None => recipes.iter().map(|r| self.score_one(r)).collect(),
        }
    }

    /// The measured (score, SQNR) of `recipe`; one that quantizes nothing is the float model
    /// (infinite).
    pub fn score_one(&self, recipe: &Recipe) -> Result<Measured, EvalError> {
        match &self.runs {
            Some(runs) => self.scored(runs.recipe_metrics(recipe)),
            None => self.exact_score(recipe, if self.workers > 1 { 1 } else { 0 }),
        }
    }

    /// The measured (score, SQNR) of `recipe` quantized and run on its own.
    pub fn exact_score(&self, recipe: &Recipe, threads: usize) -> Result<Measured, EvalError> {
        self.scored(self.eval.metrics_until(recipe, threads, &self.cancel))
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
