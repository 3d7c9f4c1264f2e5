//! Measured weight ranges: per weight, the range choice (its extremes, or the clipped range of
//! least squared error) that does better at the model's outputs, found by a greedy search of
//! real runs ([`super::greedy`]) and written into the recipe as per-weight overrides, so the
//! recipe reproduces the model without the data.
//!
//! Why per weight, and why at the outputs: which choice is better depends on what the model
//! does with the weight. A transformer's output projections hold a few weights hundreds of
//! times larger than the rest (MiniLM: one of 7.5 among values of 0.03); their extremes set
//! a per-tensor step larger than most weights, and the clipped range is far better. A
//! convolution network mostly loses by clipping (PP-OCR rec's logits: 10.6 dB with extremes,
//! 7.8 dB with every weight clipped). A layer-local measure does not tell them apart: the
//! transformer's outlier feeds the residual stream's massive activation on a few tokens, so
//! the layer's own output error keeps it, while the outputs, after the normalizations that
//! follow, are better without it.
//!
//! The search starts from the recipe's choice and flips one weight at a time, in graph order,
//! keeping each flip that raises the worst output SQNR.

use serde::Serialize;

use super::EvalError;
use super::greedy::{Greedy, Measured, Pass, Scorer, take_in_order};
use super::sensitivity::{Evaluator, Target, quant_error};
use crate::jobs::JobContext;
use crate::model::Graph;
use crate::quant;
use crate::recipe::{QuantType, Recipe, WeightRange};

/// Op types whose second input is the weight the search tries.
const WEIGHTED: [&str; 4] = ["Conv", "ConvTranspose", "MatMul", "Gemm"];

/// What the search found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WeightRanges {
    /// The recipe with the chosen ranges as per-weight overrides.
    #[serde(skip)]
    pub recipe: Recipe,
    /// The weights given the other range than the recipe's, in the order they were taken.
    pub flipped: Vec<String>,
    /// The range they were given.
    pub flipped_to: WeightRange,
    /// Weights tried.
    pub tried: usize,
    /// Worst output SQNR (dB) with the recipe's ranges.
    pub before_db: f64,
    /// Worst output SQNR (dB) with the chosen ones.
    pub after_db: f64,
    /// Tries measured at once.
    pub workers: usize,
    /// When the choice made without GPTQ did worse with it: its worst output SQNR (dB) with
    /// GPTQ; the recipe then keeps its ranges.
    pub dropped_db: Option<f64>,
}

impl WeightRanges {
    /// What the search did, in one line for both faces.
    pub fn summary(&self) -> String {
        let line = format!(
            "{} of {} weight(s) {}, worst output SQNR {:.2} -> {:.2} dB",
            self.flipped.len(),
            self.tried,
            match self.flipped_to {
                WeightRange::Mse => "clipped to their least-error range",
                WeightRange::Minmax => "back to their extremes",
            },
            self.before_db,
            self.after_db,
        );
        match self.dropped_db {
            Some(db) => format!(
                "{line}; the choice found without GPTQ read {db:.2} dB with it, so the ranges stay"
            ),
            None => line,
        }
    }
}

/// Chooses each weight's range by the model's outputs on `eval`'s data: starting from the
/// recipe's `weight_range`, every quantized integer weight of a Conv, ConvTranspose, MatMul
/// or Gemm (per tensor or per channel; block-wise and FP8 weights always take their
/// extremes) is given the other choice in turn, kept when the worst output SQNR rises.
///
/// GPTQ re-solves every layer in each quantization (seconds to minutes on a convolution
/// network), so the tries leave it out; the figures before and after are measured with the
/// recipe as it is, GPTQ included, and a choice that does worse there is dropped.
pub fn choose_weight_ranges(
    eval: &Evaluator<'_>,
    recipe: &Recipe,
    ctx: &JobContext,
) -> Result<WeightRanges, EvalError> {
    let target = Target::SqnrDb(f64::INFINITY);
    let searched = Recipe {
        gptq: false,
        ..recipe.clone()
    };
    let scorer = Scorer::open(eval, &searched, target, None)?;
    let flipped_to = match recipe.weight_range {
        WeightRange::Minmax => WeightRange::Mse,
        WeightRange::Mse => WeightRange::Minmax,
    };
    let tries = candidates(eval, &searched)?;
    let tried = tries.len();
    let start = scorer.score_one(&searched)?;
    let mut steps = RangeSteps {
        current: searched,
        best: start,
        flipped: Vec::new(),
        flipped_to,
    };
    let pass = Pass {
        stage: "choosing weight ranges",
        scorer: &scorer,
        ctx,
    };
    take_in_order(&mut steps, tries, pass, |_| false)?;
    let chosen = Recipe {
        tensor_overrides: steps.current.tensor_overrides,
        ..recipe.clone()
    };
    let (before_db, after_db) = match recipe.gptq && !steps.flipped.is_empty() {
        true => with_gptq(&scorer, recipe, &chosen)?,
        false => (start.1, steps.best.1),
    };
    let kept = after_db >= before_db || after_db.is_nan();
    Ok(WeightRanges {
        recipe: if kept { chosen } else { recipe.clone() },
        flipped: if kept { steps.flipped } else { Vec::new() },
        flipped_to,
        tried,
        before_db,
        after_db: if kept { after_db } else { before_db },
        workers: scorer.workers,
        dropped_db: (!kept).then_some(after_db),
    })
}

/// The worst output SQNR of `recipe` and of `chosen` (its ranges chosen without GPTQ), both
/// with GPTQ, measured at once.
fn with_gptq(scorer: &Scorer, recipe: &Recipe, chosen: &Recipe) -> Result<(f64, f64), EvalError> {
    let measured = scorer.score(&[recipe.clone(), chosen.clone()]);
    let mut sqnr = measured.into_iter().map(|m| m.map(|(_, db)| db));
    match (sqnr.next(), sqnr.next()) {
        (Some(before), Some(after)) => Ok((before?, after?)),
        // `score` gives one result per recipe: not reached.
        _ => Err(EvalError::NothingToQuantize),
    }
}

/// The weights the search tries, in graph order: the integer per-tensor or per-channel
/// weights `recipe` quantizes, by the names the quantizer gives their parameters.
fn candidates(eval: &Evaluator<'_>, recipe: &Recipe) -> Result<Vec<String>, EvalError> {
    let quantized = quant::quantize(eval.float, Some(eval.stats), recipe).map_err(quant_error)?;
    let graph = Graph::build(eval.float);
    let mut names = Vec::new();
    for node in graph.nodes() {
        if !WEIGHTED.contains(&node.op_type.as_str()) {
            continue;
        }
        let Some(weight) = node.inputs.get(1) else {
            continue;
        };
        let integer = quantized.params.get(weight).is_some_and(|p| {
            p.range.is_none() && p.block_size.is_none() && p.qtype != QuantType::Float8e4m3fn
        });
        if integer && !names.contains(weight) {
            names.push(weight.clone());
        }
    }
    Ok(names)
}

/// The search's state.
struct RangeSteps {
    current: Recipe,
    best: Measured,
    flipped: Vec<String>,
    flipped_to: WeightRange,
}

impl Greedy for RangeSteps {
    type Try = String;

    fn best(&self) -> Measured {
        self.best
    }

    fn recipe_for(&self, weight: &String) -> Option<Recipe> {
        let mut next = self.current.clone();
        let entry = next.tensor_overrides.entry(weight.clone()).or_default();
        if entry.weight_range.is_some() {
            return None;
        }
        entry.weight_range = Some(self.flipped_to);
        Some(next)
    }

    fn take(&mut self, weight: String, next: Recipe, measured: Measured) {
        self.flipped.push(weight);
        self.current = next;
        self.best = measured;
    }

    fn changed(&self) -> usize {
        self.flipped.len()
    }

    fn subject(weight: &String) -> String {
        weight.clone()
    }
}
