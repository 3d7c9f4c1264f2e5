//! Automatic precision: the tensors that 8-bit activation quantization is known to break stay
//! in float, whatever the op lists select, unless the recipe turns this off
//! (`auto_precision = false`) or overrides the tensor itself.
//!
//! Found on a trained sentence transformer, where onnxruntime's placement took the sentence
//! embedding's cosine to float down to 0.71 (and 16-bit activations to NaN); the per-tensor
//! float-vs-QDQ error shows two causes, both general to transformers:
//! - **Masks.** Attention masks are added as the float type's lowest value (or −Inf). A
//!   tensor holding such values gets a range of ±3.4e38, its scale swallows every real score,
//!   and dequantizing the mask constant itself can overflow to −Inf (0 × −Inf = NaN).
//! - **Normalized streams.** The residual stream that feeds a LayerNorm/RMSNorm carries a few
//!   channels tens of times larger than the rest (the "massive activations" of BERT and LLMs).
//!   One per-tensor scale rounds the ordinary channels to a few steps, and the norm, which
//!   divides by a spread those outliers set, magnifies that error in every layer. The sums
//!   feeding a norm (residual Adds, the projections added into them) stay float; the norm's
//!   output and the MatMul inputs keep their 8-bit quantization, so the integer kernels still
//!   run. Float here was measured both more accurate and faster on ONNX Runtime's CPU EP than
//!   16-bit Q/DQ (which has no integer kernels).

use std::collections::{BTreeMap, HashSet};

use super::norms::normalized_streams;
use super::prepare::Prepared;
use crate::calib::stats::CalibrationStats;
use crate::model::ops;
use crate::model::{DataType, Graph, TensorKind};
use crate::recipe::{QuantMode, Recipe};

/// Why a tensor stays in float.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KeptReason {
    /// It holds values at the float type's limit or ±Inf (an attention mask).
    Mask,
    /// It feeds a normalization (the residual stream and what is added into it).
    NormalizedStream,
    /// Calibration saw it only empty (past keys/values at the first step of generation), so
    /// there is no range to quantize it with.
    Empty,
    /// A producer's per-channel constant (a norm's scale and bias, a Mul's factor) that
    /// SmoothQuant divided by its scales: its values now span the scales' range. Kept with
    /// or without automatic precision.
    Smoothed,
    /// Computed from shapes and constants alone, never from the data: position ids, rotary
    /// angles and their Cos/Sin tables, causal masks. Only recipes that name a target.
    ShapeDerived,
    /// A Softmax's input (attention scores, with any additive mask). Only recipes that name
    /// a target.
    SoftmaxInput,
}

impl KeptReason {
    /// One line for people.
    pub fn describe(self) -> &'static str {
        match self {
            KeptReason::Mask => {
                "attention masks: values at the float type's limit or ±Inf, which no 8-bit scale \
                 holds along with the real values"
            }
            KeptReason::NormalizedStream => {
                "streams feeding a LayerNorm/RMSNorm: the residual stream's outlier channels \
                 make one 8-bit scale crush the other channels"
            }
            KeptReason::Empty => {
                "tensors calibration saw only empty (past keys/values at the first step): no \
                 values, so no range to quantize them with"
            }
            KeptReason::Smoothed => {
                "per-channel constants (norm scales and biases) that took SmoothQuant's \
                 division: their channels now span the smoothing scales' range, which one \
                 8-bit scale would crush"
            }
            KeptReason::ShapeDerived => {
                "tensors computed from shapes and constants alone (position encodings, rotary \
                 angles, causal masks): no data flows through them, and 8-bit steps of an angle \
                 or a mask move every position"
            }
            KeptReason::SoftmaxInput => {
                "softmax inputs (attention scores, class logits): exp turns each 8-bit step \
                 into a relative error of the probabilities, and an additive mask shares the \
                 scores' range; no target fuses them"
            }
        }
    }

    /// A short label for badges and tables.
    pub fn label(self) -> &'static str {
        match self {
            KeptReason::Mask => "mask",
            KeptReason::NormalizedStream => "normalized stream",
            KeptReason::Empty => "empty",
            KeptReason::Smoothed => "smoothed constant",
            KeptReason::ShapeDerived => "shape-derived",
            KeptReason::SoftmaxInput => "softmax input",
        }
    }
}

/// Tensors the recipe's automatic precision keeps in float, with the reason, for a prepared
/// model; empty when the recipe turns it off or quantizes weights only. Tensors the recipe
/// overrides itself are left to the override.
pub fn kept_in_float(
    prepared: &Prepared,
    recipe: &Recipe,
    stats: Option<&CalibrationStats>,
) -> BTreeMap<String, KeptReason> {
    let mut kept = BTreeMap::new();
    if !recipe.auto_precision || recipe.mode == QuantMode::Int4 {
        return kept;
    }
    let graph = &prepared.graph;
    for name in normalized_streams(graph) {
        // A stream that is also a compute op's input keeps its quantization: that is where
        // the integer kernels run.
        if !feeds_compute(graph, &name) {
            kept.insert(name, KeptReason::NormalizedStream);
        }
    }
    for name in masks(prepared, stats) {
        kept.insert(name, KeptReason::Mask);
    }
    for name in stats.map(always_empty).unwrap_or_default() {
        kept.insert(name, KeptReason::Empty);
    }
    // Recipes written before targets existed keep exactly the model they made.
    if recipe.target.is_some() {
        for name in shape_derived(graph) {
            kept.entry(name).or_insert(KeptReason::ShapeDerived);
        }
        for name in softmax_inputs(graph) {
            kept.entry(name).or_insert(KeptReason::SoftmaxInput);
        }
    }
    kept.retain(|name, _| !recipe.tensor_overrides.contains_key(name));
    // The outlier rows' float path is float by design: not a choice to report (the
    // completing Add writes the layer's old output, which keeps whatever it had).
    kept.retain(|name, _| !prepared.float_path().tensors.contains(name));
    kept
}

/// `recipe` with a `keep_float` override for each kept tensor: the form every later step
/// (plan, parameters, rewrite) already honours.
pub fn with_kept(recipe: &Recipe, kept: &BTreeMap<String, KeptReason>) -> Recipe {
    let mut effective = recipe.clone();
    for name in kept.keys() {
        effective
            .tensor_overrides
            .entry(name.clone())
            .or_default()
            .keep_float = true;
    }
    effective
}

fn feeds_compute(graph: &Graph, name: &str) -> bool {
    graph.tensor(name).is_some_and(|t| {
        t.consumers
            .iter()
            .any(|&c| crate::model::ops::is_compute(&graph.node(c).op_type))
    })
}

/// Ops whose output depends on their input's shape only, never on its values.
const SHAPE_OPS: &[&str] = &[ops::SHAPE, ops::SIZE];

/// Tensors that nodes compute from a tensor's shape (through `Shape`/`Size`) and constants,
/// never from a graph input's values. In a transformer these are the position ids, the rotary
/// angles and their Cos/Sin tables, and causal masks (`Trilu` of a constant of the sequence's
/// shape); the angles span hundreds of radians, where one 8-bit step moves a position by half
/// a radian, and a mask's sentinel takes a score's whole range. Quantizing them saves nothing:
/// no integer kernel reads them for the data's sake. Tensors computed from constants alone (a
/// reshaped weight) are constants in disguise and keep their placement.
fn shape_derived(graph: &Graph) -> Vec<String> {
    let mut data: HashSet<&str> = graph
        .tensors()
        .iter()
        .filter(|t| t.kind == TensorKind::Input)
        .map(|t| t.name.as_str())
        .collect();
    let mut shaped: HashSet<&str> = HashSet::new();
    for &id in graph.topological_order() {
        let node = graph.node(id);
        let reads = |set: &HashSet<&str>| node.inputs.iter().any(|i| set.contains(i.as_str()));
        let (reads_data, reads_shape) = if SHAPE_OPS.contains(&node.op_type.as_str()) {
            (false, true)
        } else {
            (reads(&data), reads(&shaped))
        };
        for out in node.outputs.iter().filter(|o| !o.is_empty()) {
            if reads_data {
                data.insert(out);
            } else if reads_shape {
                shaped.insert(out);
            }
        }
    }
    let mut found: Vec<String> = shaped.into_iter().map(str::to_owned).collect();
    found.sort();
    found
}

/// The data input of every Softmax.
fn softmax_inputs(graph: &Graph) -> Vec<String> {
    graph
        .nodes()
        .iter()
        .filter(|n| n.op_type == ops::SOFTMAX)
        .filter_map(|n| n.inputs.first().filter(|i| !i.is_empty()).cloned())
        .collect()
}

/// Tensors whose every observed shape had no elements (and so no value at all).
fn always_empty(stats: &CalibrationStats) -> Vec<String> {
    stats
        .tensors
        .iter()
        .filter(|(_, s)| s.count + s.nan + s.inf == 0 && !s.shapes.is_empty())
        .filter(|(_, s)| s.shapes.iter().all(|shape| shape.contains(&0)))
        .map(|(name, _)| name.clone())
        .collect()
}

/// Constants with more elements than this are weights, checked for NaN/Inf by the quantizer;
/// masks are scalars or small tables.
const SMALL_CONSTANT: usize = 4096;

/// Tensors holding mask values: activations whose statistics saw ±Inf or values at the float
/// limit, small constants holding such values, and the paths of finite sentinels to a
/// Softmax.
fn masks(prepared: &Prepared, stats: Option<&CalibrationStats>) -> Vec<String> {
    let mut found = Vec::new();
    if let Some(stats) = stats {
        for (name, s) in &stats.tensors {
            let limit = mask_limit(s.dtype);
            let extreme = s.min.abs().max(s.max.abs());
            let observed = s.count > 0 || s.inf > 0;
            if observed && (s.inf > 0 || (extreme.is_finite() && extreme >= limit)) {
                found.push(name.clone());
            }
        }
    }
    let constants = small_float_constants(prepared);
    found.extend(sentinel_paths(&prepared.graph, &constants));
    for (name, dtype, values) in &constants {
        let limit = mask_limit(Some(*dtype));
        if values.iter().any(|v| v.is_infinite() || v.abs() >= limit) {
            found.push(name.clone());
        }
    }
    found
}

/// The model's float initializers of at most [`SMALL_CONSTANT`] values, read once: where
/// mask constants are looked for.
fn small_float_constants(prepared: &Prepared) -> Vec<(String, DataType, ndarray::ArrayD<f32>)> {
    prepared
        .model
        .graph()
        .initializer
        .iter()
        .filter(|t| {
            let count: i64 = t.dims.iter().product();
            usize::try_from(count).is_ok_and(|c| c <= SMALL_CONSTANT)
        })
        .filter_map(|t| {
            // The initializer itself (looking it up by name again would be quadratic: a
            // graph with a constant per node has as many as it has nodes).
            let value = prepared.model.tensor_array(t).ok()?;
            let dtype = value.dtype();
            dtype
                .is_plain_float()
                .then(|| (t.name().to_owned(), dtype, value.to_f32()))
        })
        .collect()
}

/// Constants at least this large in magnitude that reach a Softmax are mask sentinels (BERT's
/// −10000, −1e9, float16's −65504), however far they are from the type's limit.
const SENTINEL_MAGNITUDE: f32 = 1e4;

/// Ops a mask passes through on its way to the scores: elementwise arithmetic and layout.
const MASK_PATH_OPS: &[&str] = &[
    ops::MUL,
    ops::ADD,
    ops::SUB,
    ops::NEG,
    ops::WHERE,
    ops::MIN,
    ops::MAX,
    ops::CAST,
    ops::EXPAND,
    ops::UNSQUEEZE,
    ops::SQUEEZE,
    ops::RESHAPE,
    ops::CONCAT,
    ops::SLICE,
    ops::TILE,
];

/// The tensors carrying a sentinel constant to a Softmax: from each small float constant
/// holding a value of at least [`SENTINEL_MAGNITUDE`], forward through [`MASK_PATH_OPS`];
/// kept only when the path reaches a Softmax (a large constant used otherwise is data).
fn sentinel_paths(
    graph: &Graph,
    constants: &[(String, DataType, ndarray::ArrayD<f32>)],
) -> Vec<String> {
    let mut found = Vec::new();
    for (name, _, values) in constants {
        let sentinel = |v: &f32| v.is_finite() && v.abs() >= SENTINEL_MAGNITUDE;
        if !values.iter().any(sentinel) {
            continue;
        }
        let mut path = vec![name.clone()];
        let mut reaches_softmax = false;
        let mut at = 0;
        while at < path.len() {
            let Some(info) = graph.tensor(&path[at]) else {
                at += 1;
                continue;
            };
            for &c in &info.consumers {
                let node = graph.node(c);
                reaches_softmax |= node.op_type == ops::SOFTMAX;
                if MASK_PATH_OPS.contains(&node.op_type.as_str()) {
                    for out in &node.outputs {
                        if !path.contains(out) {
                            path.push(out.clone());
                        }
                    }
                }
            }
            at += 1;
        }
        if reaches_softmax {
            found.extend(path);
        }
    }
    found
}

/// Half the largest finite value of the float type: values this large are sentinels, not
/// data (float32's lowest is −3.4e38, float16's −65504).
fn mask_limit(dtype: Option<DataType>) -> f32 {
    match dtype {
        Some(DataType::Float16) => half::f16::MAX.to_f32() / 2.0,
        _ => f32::MAX / 2.0,
    }
}

/// Most tensor names one summary line lists before "and N more".
const NAMES_SHOWN: usize = 3;

/// One line per reason: how many tensors stay float, a few of their names, and how to turn
/// it off where automatic precision decided it (SmoothQuant's divided constants stay float
/// whatever the recipe says).
pub fn summary(kept: &BTreeMap<String, KeptReason>) -> Vec<String> {
    let mut by_reason: BTreeMap<KeptReason, Vec<&str>> = BTreeMap::new();
    for (name, reason) in kept {
        by_reason.entry(*reason).or_default().push(name);
    }
    by_reason
        .into_iter()
        .map(|(reason, names)| {
            let shown: Vec<&str> = names.iter().take(NAMES_SHOWN).copied().collect();
            let more = names.len().saturating_sub(NAMES_SHOWN);
            let tail = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            // Smoothed constants stay float whatever the recipe says: SmoothQuant made them so.
            let off = match reason {
                KeptReason::Smoothed => "",
                _ => "; --no_auto_precision quantizes them",
            };
            format!(
                "kept in float: {} tensor(s), {} ({}{tail}{off})",
                names.len(),
                reason.describe(),
                shown.join(", "),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use ndarray::{ArrayD, IxDyn};

    use super::*;
    use crate::model::{ModelBuilder, TensorArray};

    fn floats(shape: &[usize], value: f32) -> TensorArray {
        TensorArray::Float32(ArrayD::from_elem(IxDyn(shape), value))
    }

    /// A post-norm block (MatMul → bias Add → residual Add → LayerNormalization), an
    /// RMSNorm written out in primitives (x × 1/√mean(x²)), and an attention score plus a
    /// mask at float32's lowest value.
    fn block() -> Prepared {
        let mut b = ModelBuilder::new(17);
        b.input("x", DataType::Float32, &[1, 4, 8]);
        b.initializer("w", floats(&[8, 8], 0.1));
        b.initializer("bias", floats(&[8], 0.0));
        b.initializer("gamma", floats(&[8], 1.0));
        b.initializer("two", floats(&[], 2.0));
        b.initializer("mask", floats(&[1, 4, 8], f32::MIN));
        b.node("MatMul", &["x", "w"], &["proj"]).name("dense");
        b.node("Add", &["proj", "bias"], &["biased"])
            .name("bias_add");
        b.node("Add", &["biased", "x"], &["residual"])
            .name("residual_add");
        b.node("LayerNormalization", &["residual", "gamma"], &["normed"])
            .name("ln");
        b.node("MatMul", &["normed", "w"], &["h"]).name("next");
        b.node("Pow", &["h", "two"], &["sq"]).name("pow");
        b.node("ReduceMean", &["sq"], &["ms"])
            .name("mean")
            .attr_ints("axes", &[-1]);
        b.node("Sqrt", &["ms"], &["rms"]).name("sqrt");
        b.node("Div", &["h", "rms"], &["rmsnormed"]).name("div");
        b.node("Add", &["rmsnormed", "mask"], &["masked"])
            .name("mask_add");
        b.node("Softmax", &["masked"], &["y"]).name("softmax");
        b.output("y", DataType::Float32, &[1, 4, 8]);
        Prepared::new(&b.build(), &Recipe::default().preprocessing).unwrap()
    }

    #[test]
    fn keeps_the_streams_feeding_norms_and_stops_at_products() {
        let prepared = block();
        let kept = kept_in_float(&prepared, &Recipe::default(), None);
        let streams: Vec<&str> = kept
            .iter()
            .filter(|(_, r)| **r == KeptReason::NormalizedStream)
            .map(|(n, _)| n.as_str())
            .collect();
        // The residual sum, the bias sum and the projection behind them, the RMSNorm's input;
        // not the block input (it feeds a MatMul), the LayerNorm's output or weights.
        assert_eq!(streams, ["biased", "h", "proj", "residual"]);
    }

    #[test]
    fn keeps_mask_constants_and_masked_activations() {
        let prepared = block();
        let mut stats = CalibrationStats::default();
        let observed = |min: f32, max: f32| crate::calib::stats::TensorStats {
            count: 32,
            min,
            max,
            ..Default::default()
        };
        stats
            .tensors
            .insert("masked".into(), observed(f32::MIN, 3.0));
        let plain = observed(-1e30, 1e30);
        stats.tensors.insert("rmsnormed".into(), plain);
        let kept = kept_in_float(&prepared, &Recipe::default(), Some(&stats));
        assert_eq!(kept.get("mask"), Some(&KeptReason::Mask));
        assert_eq!(kept.get("masked"), Some(&KeptReason::Mask));
        assert_eq!(kept.get("rmsnormed"), None, "large but not at the limit");
    }

    #[test]
    fn off_overridden_and_weight_only_recipes_keep_nothing() {
        let prepared = block();
        let off = Recipe {
            auto_precision: false,
            ..Recipe::default()
        };
        assert!(kept_in_float(&prepared, &off, None).is_empty());
        let int4 = Recipe {
            mode: QuantMode::Int4,
            ..Recipe::default()
        };
        assert!(kept_in_float(&prepared, &int4, None).is_empty());
        let mut overridden = Recipe::default();
        overridden
            .tensor_overrides
            .insert("residual".into(), Default::default());
        let kept = kept_in_float(&prepared, &overridden, None);
        assert!(!kept.contains_key("residual") && kept.contains_key("biased"));
    }

    /// Scores plus BERT's additive mask `(1 − m) × −10000` into a Softmax, and a large
    /// constant that only scales data.
    fn finite_mask() -> Prepared {
        let mut b = ModelBuilder::new(17);
        b.input("scores", DataType::Float32, &[1, 4, 8]);
        b.input("m", DataType::Float32, &[1, 1, 8]);
        b.initializer("one", floats(&[], 1.0));
        b.initializer("big", floats(&[], -10000.0));
        b.initializer("gain", floats(&[], 20000.0));
        b.node("Sub", &["one", "m"], &["inverted"]).name("invert");
        b.node("Mul", &["inverted", "big"], &["additive"])
            .name("scale_mask");
        b.node("Add", &["scores", "additive"], &["masked"])
            .name("mask_add");
        b.node("Softmax", &["masked"], &["probs"]).name("softmax");
        b.node("Mul", &["probs", "gain"], &["y"]).name("gain_mul");
        b.output("y", DataType::Float32, &[1, 4, 8]);
        Prepared::new(&b.build(), &Recipe::default().preprocessing).unwrap()
    }

    #[test]
    fn finite_mask_sentinels_are_found_from_the_graph() {
        let kept = kept_in_float(&finite_mask(), &Recipe::default(), None);
        let masks: Vec<&str> = kept
            .iter()
            .filter(|(_, r)| **r == KeptReason::Mask)
            .map(|(n, _)| n.as_str())
            .collect();
        // The sentinel, the additive mask and the masked scores; not the mask input, the
        // probabilities, or a large constant that never reaches a Softmax.
        assert_eq!(masks, ["additive", "big", "masked"]);
    }

    #[test]
    fn summary_has_one_line_per_reason_with_a_few_names() {
        let kept: BTreeMap<String, KeptReason> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|n| ((*n).to_owned(), KeptReason::NormalizedStream))
            .chain([("m".to_owned(), KeptReason::Mask)])
            .collect();
        let lines = summary(&kept);
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("kept in float: 1 tensor(s), attention masks"));
        assert!(
            lines[1].contains("5 tensor(s), streams feeding") && lines[1].contains("and 2 more")
        );
    }

    /// Scores (the input plus a float tensor made from its shape alone), scaled, into a
    /// Softmax.
    fn scores_from_shape() -> Prepared {
        let mut b = ModelBuilder::new(17);
        b.input("x", DataType::Float32, &[1, 4, 8]);
        b.initializer("half", floats(&[], 0.5));
        b.node("Shape", &["x"], &["shape"]).name("shape");
        b.node("ConstantOfShape", &["shape"], &["zeros"])
            .name("zeros")
            .attr_tensor("value", &floats(&[1], 1.0));
        b.node("Add", &["x", "zeros"], &["biased"]).name("add");
        b.node("Mul", &["biased", "half"], &["scores"]).name("mul");
        b.node("Softmax", &["scores"], &["y"]).name("softmax");
        b.output("y", DataType::Float32, &[1, 4, 8]);
        Prepared::new(&b.build(), &Recipe::default().preprocessing).unwrap()
    }

    #[test]
    fn under_a_target_shape_derived_tensors_and_softmax_inputs_stay_float() {
        let prepared = scores_from_shape();
        let legacy = kept_in_float(&prepared, &Recipe::default(), None);
        assert!(legacy.is_empty(), "{legacy:?}");
        let recipe = Recipe::for_target(crate::recipe::Target::Cpu);
        let kept = kept_in_float(&prepared, &recipe, None);
        assert_eq!(kept.get("zeros"), Some(&KeptReason::ShapeDerived));
        assert_eq!(kept.get("scores"), Some(&KeptReason::SoftmaxInput));
        assert_eq!(kept.get("biased"), None);
        // The Add reads a kept tensor: no runtime fuses it, so it stays float whole; without
        // a target it keeps onnxruntime's placement.
        let add = prepared.graph.node_by_name("add").unwrap().id;
        let plan = crate::quant::guarded(&prepared, &recipe, None).plan;
        assert_eq!(
            plan.excluded.get(&add),
            Some(&crate::quant::plan::Exclusion::TensorsKeptFloat)
        );
        assert!(!plan.roles.contains_key("biased"), "{:?}", plan.roles);
        let plan = crate::quant::guarded(&prepared, &Recipe::default(), None).plan;
        assert!(plan.quantized.contains(&add));
    }
}
