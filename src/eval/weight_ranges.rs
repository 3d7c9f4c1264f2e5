//! Measured weight ranges: per weight, the range choice (its extremes, or the clipped range of
//! least squared error) and, where ONNX Runtime's u8×s8 kernels read it, the bit width (8, or
//! the saturation guard's 7) that do better at the model's outputs, found by a greedy search
//! of real runs ([`super::greedy`]) and written into the recipe as per-weight overrides, so
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
//! with 7; with the search choosing ranges and bits, 17.0 and 9.9 dB. The runs are real ones
//! on this machine's kernels, so on a CPU whose kernels do not saturate the 7 bits only lose
//! and are not taken.
//!
//! The search starts from the recipe's choice and tries 7 bits for every such weight at once,
//! then, one weight at a time in graph order, the other range and 7 bits, keeping each change
//! that raises the worst output SQNR.

use std::collections::HashSet;

use serde::Serialize;

use super::EvalError;
use super::greedy::{Greedy, Measured, Pass, Scorer, take_in_order};
use super::sensitivity::{Evaluator, Target, quant_error};
use crate::jobs::JobContext;
use crate::model::Graph;
use crate::quant;
use crate::quant::saturation;
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
    /// The weights given 7 bits, in the order they were taken.
    pub seven_bit: Vec<String>,
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
        !self.flipped.is_empty() || !self.seven_bit.is_empty()
    }

    /// What the search did, in one line for both faces.
    pub fn summary(&self) -> String {
        let seven = match self.seven_bit.len() {
            0 => String::new(),
            n => format!(", {n} given 7 bits (the integer kernels saturate on their 8)"),
        };
        let line = format!(
            "{} of {} weight(s) {}{seven}, worst output SQNR {:.2} -> {:.2} dB",
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
/// extremes) is given the other choice in turn, then, where the u8×s8 kernels read it with
/// 8 bits and the saturation guard is on, 7 bits; each kept when the worst output SQNR
/// rises.
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
    /// 7 bits instead of 8 for one weight.
    SevenBits(String),
    /// 7 bits for every weight the search would try them on, at once: tried first, since
    /// one weight's saturation is often small beside the outputs' noise while all of them
    /// together are not.
    AllSevenBits(Vec<String>),
}

/// The changes the search tries, in graph order: each integer per-tensor or per-channel weight
/// `recipe` quantizes (by the names the quantizer gives their parameters) to the range
/// `flipped_to`, then to 7 bits where [`saturation_prone`]; before them all, 7 bits for every
/// such weight at once.
fn candidates(
    eval: &Evaluator<'_>,
    recipe: &Recipe,
    flipped_to: WeightRange,
) -> Result<Vec<Change>, EvalError> {
    let quantized = quant::quantize(eval.float, Some(eval.stats), recipe).map_err(quant_error)?;
    let graph = Graph::build(eval.float);
    let (mut tries, mut prone, mut seen) = (Vec::new(), Vec::new(), HashSet::new());
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
        if !integer || !seen.insert(weight.as_str()) {
            continue;
        }
        tries.push(Change::Range(weight.clone(), flipped_to));
        if !pairs_nothing(&graph, node, weight)
            && saturation_prone(&quantized, recipe, weight, node.inputs.first())
        {
            tries.push(Change::SevenBits(weight.clone()));
            prone.push(weight.clone());
        }
    }
    if prone.len() > 1 {
        tries.insert(0, Change::AllSevenBits(prone));
    }
    Ok(tries)
}

/// Whether `node` is a depthwise Conv (one input channel per group): ONNX Runtime runs it
/// in a kernel that adds no pairs of products, so it cannot saturate.
fn pairs_nothing(graph: &Graph, node: &crate::model::Node, weight: &str) -> bool {
    let channels_per_group = graph
        .tensor(weight)
        .and_then(|t| t.shape.as_ref())
        .and_then(|s| s.get(1).cloned());
    node.op_type == "Conv"
        && node.int_attribute("group").unwrap_or(1) > 1
        && channels_per_group == Some(crate::model::Dim::Fixed(1))
}

/// Whether `weight` is quantized with 8 bits for ONNX Runtime's u8×s8 kernels reading it
/// beside the 8-bit activation `input`, under a recipe whose saturation guard is on: the
/// weights a CPU without VNNI may saturate on.
fn saturation_prone(
    quantized: &quant::Quantized,
    recipe: &Recipe,
    weight: &str,
    input: Option<&String>,
) -> bool {
    let qtype = |name: &str| quantized.params.get(name).map(|p| p.qtype);
    saturation::applies(recipe)
        && qtype(weight) == Some(QuantType::Int8)
        && !quantized.seven_bit_weights.contains(weight)
        && !recipe
            .tensor_overrides
            .get(weight)
            .is_some_and(|o| o.reduce_range)
        && input.is_some_and(|i| qtype(i) == Some(QuantType::Uint8))
}

/// The search's state.
struct RangeSteps {
    current: Recipe,
    best: Measured,
    flipped: Vec<String>,
    seven_bit: Vec<String>,
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
            Change::SevenBits(weight) => {
                let entry = overrides.entry(weight.clone()).or_default();
                if entry.reduce_range {
                    return None;
                }
                entry.reduce_range = true;
            }
            Change::AllSevenBits(weights) => {
                for weight in weights {
                    overrides.entry(weight.clone()).or_default().reduce_range = true;
                }
            }
        }
        Some(next)
    }

    fn take(&mut self, change: Change, next: Recipe, measured: Measured) {
        match change {
            Change::Range(weight, _) => self.flipped.push(weight),
            Change::SevenBits(weight) => self.seven_bit.push(weight),
            Change::AllSevenBits(weights) => self.seven_bit.extend(weights),
        }
        self.current = next;
        self.best = measured;
    }

    fn changed(&self) -> usize {
        self.flipped.len() + self.seven_bit.len()
    }

    fn subject(change: &Change) -> String {
        match change {
            Change::Range(weight, _) => weight.clone(),
            Change::SevenBits(weight) => format!("{weight} (7 bits)"),
            Change::AllSevenBits(weights) => format!("7 bits for {} weights", weights.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use ndarray::{ArrayD, IxDyn};

    use super::*;
    use crate::model::{DataType, ModelBuilder, TensorArray};

    /// Only a Conv with one input channel per group pairs nothing: a grouped Conv with more
    /// channels per group and a plain one pair their products, and so do dense layers.
    #[test]
    fn only_depthwise_convolutions_pair_nothing() {
        let mut b = ModelBuilder::new(17);
        b.input("x", DataType::Float32, &[1, 4, 4, 4]);
        let zeros = |shape: &[usize]| TensorArray::Float32(ArrayD::zeros(IxDyn(shape)));
        b.initializer("depthwise", zeros(&[4, 1, 3, 3]));
        b.initializer("grouped", zeros(&[4, 2, 3, 3]));
        b.initializer("plain", zeros(&[4, 4, 1, 1]));
        b.node("Conv", &["x", "depthwise"], &["a"])
            .name("dw")
            .attr_int("group", 4);
        b.node("Conv", &["a", "grouped"], &["c"])
            .name("gc")
            .attr_int("group", 2);
        b.node("Conv", &["c", "plain"], &["y"]).name("pc");
        b.output("y", DataType::Float32, &[1, 4, 2, 2]);
        let model = b.build();
        let graph = Graph::build(&model);
        let pairs_nothing = |node: &str, weight: &str| {
            let node = graph.node_by_name(node).unwrap();
            pairs_nothing(&graph, node, weight)
        };
        assert!(pairs_nothing("dw", "depthwise"));
        assert!(!pairs_nothing("gc", "grouped"));
        assert!(!pairs_nothing("pc", "plain"));
    }
}
