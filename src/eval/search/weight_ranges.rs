//! Measured weight ranges: per weight, the range choice (its extremes, or the clipped range of
//! least squared error) and, where ONNX Runtime's u8×s8 kernels read it, the bit width (8, or
//! 7 as the saturation guard gives per-channel weights) that do better at the model's outputs, found by a greedy search
//! of real runs ([`crate::eval::search::greedy`]) and written into the recipe as per-weight overrides, so
//! the recipe reproduces the model without the data.
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
//! The bit width likewise: on x86 CPUs without VNNI the kernels add neighbouring u8×s8
//! products in a saturating 16-bit lane ([`crate::quant::saturation`]), and whether a
//! per-tensor weight's saturation costs more than a 7-bit step depends on the activations
//! it meets. Measured on `benches/accuracy`'s held-out data: the bundled classifier per
//! tensor with equalization, bias correction and GPTQ reads 10.6 dB at its logits with
//! 8-bit weights and 16.6 dB with 7 bits, while PP-OCR rec reads 9.4 dB with 8 and 8.3 dB
//! with 7; with the search choosing ranges and bits, 17.0 and 9.9 dB. Per channel, PP-OCR det
//! with percentile ranges reads 10.5 dB with 8 bits and 8.7 with the guard's 7. The runs are
//! real ones on this machine's kernels, so on a CPU whose kernels do not saturate 7 bits only
//! lose: the search gives none, and gives the guard's weights their 8 bits back.
//!
//! The search starts from the recipe's choice and tries each bit width for every weight it
//! applies to at once (8 bits to the guard's weights, 7 to the other 8-bit weights the
//! kernels pair), then, one weight at a time in graph order, the other range and the other
//! bit width, keeping each change that raises the worst output SQNR.

use std::collections::HashSet;

use serde::Serialize;

use crate::eval::compare::EvalError;
use crate::eval::search::evaluator::{Evaluator, Target, quant_error};
use crate::eval::search::greedy::{Greedy, Measured, Pass, Scorer, take_in_order};
use crate::jobs::JobContext;
use crate::model::Graph;
use crate::model::ops;
use crate::quant;
use crate::recipe::{QuantType, Recipe, TensorOverride, WeightRange};

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
    /// The weights given 7 bits, in the order they were taken.
    pub seven_bit: Vec<String>,
    /// The weights the saturation guard gave 7 bits given 8 back, in the order they were
    /// taken.
    pub eight_bit: Vec<String>,
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
    /// Whether the search changed the recipe.
    pub fn changed(&self) -> bool {
        !self.flipped.is_empty() || !self.seven_bit.is_empty() || !self.eight_bit.is_empty()
    }

    /// What the search did, in one line for both faces.
    pub fn summary(&self) -> String {
        let mut seven = match self.seven_bit.len() {
            0 => String::new(),
            n => format!(", {n} given 7 bits (the integer kernels saturate on their 8)"),
        };
        if !self.eight_bit.is_empty() {
            seven += &format!(
                ", {} given back 8 bits (their saturation costs less than the guard's bit)",
                self.eight_bit.len()
            );
        }
        let line = format!(
            "{} of {} weight(s) {}{seven}, worst output SQNR {:.2} -> {:.2} dB",
            self.flipped.len(),
            self.tried,
            match self.flipped_to {
                WeightRange::Mse => "clipped to their least-error range",
                WeightRange::Minmax => "back to their extremes",
                WeightRange::Pow2 => "kept at power-of-two scales",
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
/// extremes) is given the other choice in turn and, where the saturation guard is on and the
/// u8×s8 kernels read it, the other bit width (8 bits back to a weight the guard gave 7, 7 to
/// another 8-bit one); each kept when the worst output SQNR rises.
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
    let scorer = Scorer::open(eval, &searched, target, None, ctx.cancel_token())?;
    let flipped_to = match recipe.weight_range {
        WeightRange::Minmax => WeightRange::Mse,
        WeightRange::Mse => WeightRange::Minmax,
        // Power-of-two scales are the target's rule: only the bit widths are tried.
        WeightRange::Pow2 => WeightRange::Pow2,
    };
    let tries = candidates(eval, &searched, flipped_to)?;
    let tried = tries
        .iter()
        .filter(|change| matches!(change, Change::Range(..)))
        .count();
    let start = scorer.score_one(&searched)?;
    let mut steps = RangeSteps {
        current: searched,
        best: start,
        flipped: Vec::new(),
        seven_bit: Vec::new(),
        eight_bit: Vec::new(),
    };
    let pass = Pass {
        stage: "choosing weight ranges",
        scorer: &scorer,
        ctx,
    };
    take_in_order(&mut steps, tries, pass, |_| false)?;
    let changed = steps.changed() > 0;
    let chosen = Recipe {
        tensor_overrides: steps.current.tensor_overrides,
        ..recipe.clone()
    };
    let (before_db, after_db) = match recipe.gptq && changed {
        true => with_gptq(&scorer, recipe, &chosen)?,
        false => (start.1, steps.best.1),
    };
    let kept = after_db >= before_db || after_db.is_nan();
    Ok(WeightRanges {
        recipe: if kept { chosen } else { recipe.clone() },
        flipped: if kept { steps.flipped } else { Vec::new() },
        flipped_to,
        seven_bit: if kept { steps.seven_bit } else { Vec::new() },
        eight_bit: if kept { steps.eight_bit } else { Vec::new() },
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

/// One change the search tries.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Change {
    /// The other range choice than the recipe's, for one weight.
    Range(String, WeightRange),
    /// Another bit width for some weights: one at a time, or every weight the search tries
    /// it on at once, which is tried first, since one weight's saturation (or step) is often
    /// small beside the outputs' noise while all of them together are not.
    Bits(Vec<String>, Bits),
}

/// The bit widths the search gives a weight the u8×s8 kernels read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bits {
    /// 7 bits to an 8-bit weight the kernels may saturate on.
    Seven,
    /// 8 bits back to a weight the saturation guard gave 7.
    Eight,
}

impl Bits {
    /// The override that gives a weight these bits.
    fn flag(self, to: &mut TensorOverride) -> &mut bool {
        match self {
            Bits::Seven => &mut to.reduce_range,
            Bits::Eight => &mut to.full_range,
        }
    }

    /// How many bits.
    fn count(self) -> u8 {
        match self {
            Bits::Seven => 7,
            Bits::Eight => 8,
        }
    }
}

/// The changes the search tries: first each bit width for every weight it applies to at
/// once, then, in graph order, each integer per-tensor or per-channel weight `recipe`
/// quantizes (by the names the quantizer gives their parameters) to the range `flipped_to`
/// and to its other bit width: 7 bits where the kernels may saturate on its 8
/// ([`crate::quant::saturation::saturation_prone_weights`]), 8 where the saturation guard gave it 7.
fn candidates(
    eval: &Evaluator<'_>,
    recipe: &Recipe,
    flipped_to: WeightRange,
) -> Result<Vec<Change>, EvalError> {
    let quantized = quant::quantize(eval.float, Some(eval.stats), recipe).map_err(quant_error)?;
    let graph = Graph::build(eval.float);
    let (mut tries, mut seen) = (Vec::new(), HashSet::new());
    let (mut seven, mut eight) = (Vec::new(), Vec::new());
    for node in graph.nodes() {
        if !ops::is_compute(&node.op_type) {
            continue;
        }
        let Some(weight) = node.inputs.get(1) else {
            continue;
        };
        let integer = quantized.params.get(weight).is_some_and(|p| {
            p.range.is_none() && p.block_size.is_none() && p.qtype != QuantType::Float8e4m3fn
        });
        if !integer || !seen.insert(weight.as_str()) {
            continue;
        }
        tries.push(Change::Range(weight.clone(), flipped_to));
        let bits = if quantized.seven_bit_weights.contains(weight) {
            Some(Bits::Eight)
        } else {
            let prone = quantized.saturation_prone_weights.contains(weight);
            prone.then_some(Bits::Seven)
        };
        if let Some(bits) = bits {
            tries.push(Change::Bits(vec![weight.clone()], bits));
            match bits {
                Bits::Seven => seven.push(weight.clone()),
                Bits::Eight => eight.push(weight.clone()),
            }
        }
    }
    for (weights, bits) in [(eight, Bits::Eight), (seven, Bits::Seven)] {
        if weights.len() > 1 {
            tries.insert(0, Change::Bits(weights, bits));
        }
    }
    Ok(tries)
}

/// The search's state.
struct RangeSteps {
    current: Recipe,
    best: Measured,
    flipped: Vec<String>,
    seven_bit: Vec<String>,
    eight_bit: Vec<String>,
}

impl Greedy for RangeSteps {
    type Try = Change;

    fn best(&self) -> Measured {
        self.best
    }

    fn recipe_for(&self, change: &Change) -> Option<Recipe> {
        let mut next = self.current.clone();
        let overrides = &mut next.tensor_overrides;
        match change {
            Change::Range(weight, range) => {
                let entry = overrides.entry(weight.clone()).or_default();
                if entry.weight_range.is_some() {
                    return None;
                }
                entry.weight_range = Some(*range);
            }
            Change::Bits(weights, bits) => {
                let mut changed = false;
                for weight in weights {
                    let set = bits.flag(overrides.entry(weight.clone()).or_default());
                    changed |= !*set;
                    *set = true;
                }
                if !changed {
                    return None;
                }
            }
        }
        Some(next)
    }

    fn take(&mut self, change: Change, next: Recipe, measured: Measured) {
        match change {
            Change::Range(weight, _) => self.flipped.push(weight),
            Change::Bits(weights, Bits::Seven) => self.seven_bit.extend(weights),
            Change::Bits(weights, Bits::Eight) => self.eight_bit.extend(weights),
        }
        self.current = next;
        self.best = measured;
    }

    fn changed(&self) -> usize {
        self.flipped.len() + self.seven_bit.len() + self.eight_bit.len()
    }

    fn subject(change: &Change) -> String {
        match change {
            Change::Range(weight, _) => weight.clone(),
            Change::Bits(weights, bits) if weights.len() == 1 => {
                format!("{} ({} bits)", weights[0], bits.count())
            }
            Change::Bits(weights, bits) => {
                format!("{} bits for {} weights", bits.count(), weights.len())
            }
        }
    }
}
