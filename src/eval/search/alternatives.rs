//! When keeping nodes in float cannot reach a target: recipe-wide changes, each measured by a
//! real run of a model re-quantized from the cached statistics (other range methods, 16-bit
//! activations).
//!
//! Some models amplify the noise of every quantized layer of a whole region: PP-OCR's
//! recogniser turns 40 dB of input noise into 13 dB at its output in float, and quantizing any
//! third of its backbone costs about as much as quantizing all of it. No small set of float
//! nodes moves such a model, while ranges that clip rare outliers, or a finer activation grid,
//! do. Auto-exclude then says so with numbers instead of stopping at "not reached".

use serde::Serialize;

use crate::calib::RangeMethod;
use crate::eval::compare::EvalError;
use crate::eval::search::evaluator::{Evaluator, Target};
use crate::eval::search::greedy::Scorer;
use crate::jobs::{JobContext, RateMeter};
use crate::recipe::{QuantMode, QuantType, Recipe};

/// One recipe-wide change and what it measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alternative {
    /// The change, in words ("percentile 99.99 ranges").
    pub change: String,
    /// The recipe with the change applied.
    #[serde(skip)]
    pub recipe: Recipe,
    /// The target's score (dB, or a share), from a real run.
    pub score: f64,
    /// Worst output SQNR (dB).
    pub sqnr_db: f64,
    /// Whether the change reaches the target.
    pub reached: bool,
}

/// The recipe-wide changes worth trying on top of `recipe`, in words: other range methods for
/// every activation (all computed from the cached histograms) and, for 8-bit activations, the
/// 16-bit type of the same signedness. Nothing for FP8 or weight-only int4 recipes, whose
/// activations have no range to tune.
pub fn candidate_changes(recipe: &Recipe) -> Vec<(String, Recipe)> {
    if recipe.mode != QuantMode::Int8 {
        return Vec::new();
    }
    let methods = [
        (
            "percentile 99.999 ranges",
            RangeMethod::Percentile {
                percentile: 99.999,
                symmetric: true,
            },
        ),
        (
            "percentile 99.99 ranges",
            RangeMethod::Percentile {
                percentile: 99.99,
                symmetric: true,
            },
        ),
        ("MSE ranges", RangeMethod::Mse),
        (
            "entropy ranges",
            RangeMethod::Entropy {
                num_quantized_bins: 128,
            },
        ),
    ];
    let mut changes: Vec<(String, Recipe)> = methods
        .into_iter()
        .filter(|(_, method)| *method != recipe.calibration_method)
        .map(|(label, method)| {
            let mut changed = recipe.clone();
            changed.calibration_method = method;
            (label.to_owned(), changed)
        })
        .collect();
    let wider = match recipe.activation_type {
        QuantType::Uint8 => Some(QuantType::Uint16),
        QuantType::Int8 => Some(QuantType::Int16),
        _ => None,
    };
    if let Some(wider) = wider {
        let mut changed = recipe.clone();
        changed.activation_type = wider;
        changes.push((
            format!("16-bit activations ({wider:?})").to_lowercase(),
            changed,
        ));
    }
    changes
}

/// Runs every [`candidate_changes`] of `recipe` and returns them best first (by the target's
/// score, then by SQNR). A change the statistics cannot serve (no histograms cached for a
/// histogram-based method) is left out with a warning in the log. On the CPU the changes run
/// in parallel ([`Scorer`]: one thread each, as many as the memory holds); cancellable
/// between runs.
pub fn measure_alternatives(
    eval: &Evaluator<'_>,
    recipe: &Recipe,
    target: Target,
    ctx: &JobContext,
) -> Result<Vec<Alternative>, EvalError> {
    let changes = candidate_changes(recipe);
    let meter = RateMeter::new("trying recipe changes", changes.len() as u64);
    let scorer = Scorer::open(eval, recipe, target, None, ctx.cancel_token())?;
    let mut measured = Vec::with_capacity(changes.len());
    let mut done = 0;
    for batch in changes.chunks(scorer.workers.max(1)) {
        ctx.checkpoint().map_err(|_| EvalError::Cancelled)?;
        let recipes: Vec<Recipe> = batch.iter().map(|(_, r)| r.clone()).collect();
        for ((change, changed), result) in batch.iter().zip(scorer.score(&recipes)) {
            done += 1;
            let (score, sqnr_db) = match result {
                Ok(scored) => scored,
                Err(EvalError::Run { reason, .. }) => {
                    tracing::warn!("{change}: not measured: {reason}");
                    continue;
                }
                Err(e) => return Err(e),
            };
            measured.push(Alternative {
                change: change.clone(),
                recipe: changed.clone(),
                score,
                sqnr_db,
                reached: score >= target.goal(),
            });
            ctx.report(meter.progress(done, change.clone()));
        }
    }
    measured.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| b.sqnr_db.total_cmp(&a.sqnr_db))
    });
    Ok(measured)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_leave_out_the_current_method_and_widen_8_bit_activations() {
        let recipe = Recipe {
            calibration_method: RangeMethod::Mse,
            activation_type: QuantType::Int8,
            ..Recipe::default()
        };
        let changes = candidate_changes(&recipe);
        let labels: Vec<&str> = changes.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(
            labels,
            [
                "percentile 99.999 ranges",
                "percentile 99.99 ranges",
                "entropy ranges",
                "16-bit activations (int16)"
            ]
        );
        assert_eq!(changes[3].1.activation_type, QuantType::Int16);
        assert_eq!(changes[3].1.calibration_method, RangeMethod::Mse);
        // Everything else is the recipe as it was.
        assert_eq!(
            Recipe {
                calibration_method: RangeMethod::Mse,
                ..changes[0].1.clone()
            },
            recipe
        );
        let already_wide = Recipe {
            activation_type: QuantType::Uint16,
            ..Recipe::default()
        };
        assert!(
            candidate_changes(&already_wide)
                .iter()
                .all(|(l, _)| !l.contains("16-bit"))
        );
        let fp8 = Recipe {
            mode: QuantMode::Fp8,
            ..Recipe::default()
        };
        assert!(candidate_changes(&fp8).is_empty());
    }
}
