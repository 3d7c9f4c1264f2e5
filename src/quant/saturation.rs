//! The saturation guard: 7-bit weights where ONNX Runtime's x86 integer kernels would
//! saturate.
//!
//! On x86 CPUs without VNNI (AVX2 — every AMD Zen before Zen 4 —, AVX-512 before Cascade
//! Lake), ONNX Runtime's u8×s8 GEMM multiplies with `vpmaddubsw`, which adds each pair of
//! neighbouring u8×s8 products into a signed 16-bit lane and saturates: 2 × 255 × 127 does
//! not fit in 32767. A pair overflows when two neighbouring activation codes near the top of
//! the range meet two large weights of the same sign, which per-channel weights (each
//! channel's largest weight is ±127) meet in every layer. Measured on an AMD EPYC without
//! VNNI: the bundled PP-OCR classifier quantized per channel reads 9.4 dB SQNR at its logits
//! through the kernels against 23.7 dB by its own Q/DQ arithmetic (25.0 dB with 7-bit
//! weights); a trained sentence transformer's embedding cosine to float fell from 0.991 to
//! 0.966 (0.990 with 7-bit weights). With 7-bit weights (onnxruntime's `reduce_range`) a pair
//! stays within 2 × 255 × 64 = 32640, so no machine saturates, at the cost of one bit of
//! weight precision.
//!
//! The guard is part of automatic precision and applies where the recipe targets ONNX
//! Runtime's integer kernels with uint8 activations and int8 weights (int8 mode,
//! onnxruntime's placement), to the per-channel weights those kernels read (and some
//! per-tensor ones, below): a quantized Conv, MatMul or Gemm whose activation input is
//! quantized to 8 bits. A per-tensor weight mostly reaches ±127 in its largest channel only,
//! so it saturates far less, and one bit fewer halves the step of every channel: with every
//! per-tensor weight at 7 bits, measured worse than the saturation on both PP-OCR models (the
//! classifier's logits 11.4 dB against 13.1 dB saturating; rec's −1.4 against 7.2 dB, on
//! `benches/accuracy`'s held-out data) and on the sentence transformer (cosine 0.898 against
//! 0.963). So a per-tensor weight keeps 8 bits unless it saturates as a per-channel one does:
//! - cross-layer equalization rescaled its layer: equalization gives each channel of a pair's
//!   two weights the range `√(r₁ r₂)`, so every channel spans about the weight's extremes
//!   (per tensor with equalization, bias correction and GPTQ: the sample's logits 10.55 →
//!   14.08 dB, PP-OCR rec's 9.36 → 10.71 dB, exact match 78.1 → 89.1 %; det 8.60 → 8.59 dB);
//! - or at least 1 % of the pairs its kernel adds can overflow at 8 bits (one sign, stored
//!   magnitudes adding up past 128, [`super::kernel_pairs`]), as most per-channel weights'
//!   can: the classifier's first Conv, squeeze-excitation Convs and final MatMul (1.5 to
//!   50 %), PP-OCR rec's first Conv; no other weight of rec, det or MiniLM (at most 0.8 %).
//!   The classifier's logits per tensor 13.05 → 15.62 dB, with equalization, bias correction
//!   and GPTQ 14.08 → 18.53 dB (per channel: 16.36), with GPTQ alone 13.38 → 18.75 dB; rec's
//!   with GPTQ 9.27 → 10.44 dB, with bias correction 9.23 → 10.64 dB, plain per tensor
//!   7.22 → 6.99 dB (the one loss); det and MiniLM unchanged. The same test on per-channel
//!   weights (8 bits back below 1 %) was measured and not adopted: rec's default gained
//!   0.47 dB (exact match 75.0 → 93.8 %), but det with Percentile ranges, bias correction
//!   and GPTQ lost 0.90 dB, rec's 0.65 dB and the sample's equalization pipeline 0.50 dB: a
//!   rare overflow still lands on a channel's largest weights.
//!
//! Recipes written before name the scope `integer_kernels_and_equalized` (no pair rule) or
//! `integer_kernels` (per-channel weights only) and keep it. Whether a weight saturates
//! more than its bit is worth depends on the activations it meets: the measured weight
//! search (`--weight_range measured`, in the evaluation layer) tries 7 bits, and 8 back for
//! the guard's weights (the `full_range` override), on the kernels of the machine it runs
//! on. A node promoted to 16-bit activations, or reading a float input, runs in float after
//! DequantizeLinear and keeps 8 bits, as does a weight with its own override. The guard's
//! output does not depend on the machine that made it; the recipe's `saturation_guard =
//! false` (`--no_saturation_guard`) keeps onnxruntime's exact 8-bit weights for VNNI CPUs,
//! GPUs and NPUs (and the measured search then tries no other widths either).
//!
//! **Limiting pairs instead of a bit was measured and not adopted.** The kernels pair
//! neighbouring values of the reduction ([`super::kernel_pairs`] says which; a depthwise
//! Conv runs a kernel that does not pair), and a pair of one sign whose magnitudes add up to
//! 128 or less cannot saturate (255 × 128 < 32767). 8-bit weights with each larger pair stepped down to 128 are so
//! safe, and layer by layer the fused kernels then equal the Q/DQ arithmetic exactly
//! (measured on the sample). But the steps cost more than the bit: a per-channel weight's
//! ±127 meets a neighbour of its sign in most rows, and the sample's logits fell to 2.3 dB
//! (7 bits: 25.0 dB); per-tensor weights, with 0.6 % of their values moved, fell from
//! 19.4 dB saturating to 13.5 dB. Choosing per output channel between 7 bits and limited
//! 8 bits by the squared weight error gained 0.45 dB on the sample (25.6 dB); choosing the
//! grid of least squared error among 64 to 127 steps lost 3.8 dB (21.2 dB): the values
//! moved are a channel's largest, which weigh more in the outputs than in the squared
//! error.

use std::collections::BTreeSet;

use super::kernel_pairs::Reduction;
use super::params::weight_quant;
use super::plan::{Plan, TensorRole};
use super::prepare::Prepared;
use crate::model::ops;
use crate::model::{Dim, Graph, Node};
use crate::recipe::{GuardScope, Placement, QuantMode, QuantType, Recipe};

/// The weights the guard quantizes with 7 bits under `plan`; empty when it does not apply.
pub fn seven_bit_weights(prepared: &Prepared, recipe: &Recipe, plan: &Plan) -> BTreeSet<String> {
    if !applies(recipe) {
        return BTreeSet::new();
    }
    let graph = &prepared.graph;
    let covered: &dyn Fn(&str, &TensorRole) -> bool = match recipe.saturation_guard_scope {
        scope @ (GuardScope::IntegerKernelsAndSaturatingPairs
        | GuardScope::IntegerKernelsAndEqualized
        | GuardScope::IntegerKernels) => {
            let with_equalized = scope != GuardScope::IntegerKernels;
            let with_pairs = scope == GuardScope::IntegerKernelsAndSaturatingPairs;
            &move |name, role| {
                read_by_integer_kernel(graph, recipe, plan, name)
                    && (per_channel(graph, recipe, name, role)
                        || (with_equalized && equalized(prepared, name))
                        || (with_pairs && pairs_saturate(prepared, recipe, plan, name, role)))
            }
        }
        GuardScope::TransformerLinear => {
            if !crate::quant::norms::has_normalization(graph) {
                return BTreeSet::new();
            }
            &|name, _| feeds_linear(graph, name)
        }
    };
    weights_of(plan, recipe)
        .filter(|(name, role)| covered(name, role))
        .map(|(name, _)| name.clone())
        .collect()
}

/// The 8-bit weights a CPU without VNNI may saturate on besides the guard's: each weight
/// `plan` quantizes that a u8×s8 kernel pairing its products reads (every Conv, MatMul or Gemm
/// [`integer_kernel_readers`] names but a depthwise Conv, [`pairs_nothing`]) and whose bits no
/// override sets (the guard's 7 bits are overrides in the recipe it hands on). What the
/// measured weight search tries 7 bits on; empty where the guard does not apply.
pub fn saturation_prone_weights(
    prepared: &Prepared,
    recipe: &Recipe,
    plan: &Plan,
) -> BTreeSet<String> {
    if !applies(recipe) {
        return BTreeSet::new();
    }
    let graph = &prepared.graph;
    weights_of(plan, recipe)
        .filter(|(name, _)| pairing_readers(graph, recipe, plan, name).next().is_some())
        .map(|(name, _)| name.clone())
        .collect()
}

/// The weights `plan` quantizes whose bits no override of `recipe` sets (kept in float,
/// 7 or 8 bits, another type).
fn weights_of<'a>(
    plan: &'a Plan,
    recipe: &'a Recipe,
) -> impl Iterator<Item = (&'a String, &'a TensorRole)> {
    plan.roles.iter().filter(|(name, role)| {
        matches!(role, TensorRole::Weight { .. })
            && !recipe.tensor_overrides.get(*name).is_some_and(|o| {
                o.keep_float || o.reduce_range || o.full_range || o.dtype.is_some()
            })
    })
}

/// Whether the weight `name` is quantized per channel (see [`weight_quant`]).
fn per_channel(graph: &Graph, recipe: &Recipe, name: &str, role: &TensorRole) -> bool {
    weight_quant(recipe, name, role, graph.rank(name)).is_some_and(|how| how.axis.is_some())
}

/// Whether `name` is the weight of a layer cross-layer equalization rescaled.
fn equalized(prepared: &Prepared, name: &str) -> bool {
    prepared
        .report
        .equalized
        .iter()
        .any(|pair| pair.weights.iter().any(|w| w == name))
}

/// The share of a weight's kernel pairs able to overflow from which the guard counts it as
/// saturating. Measured at 8 bits on `benches/accuracy`'s four models: the per-channel
/// weights the guard covers have a median share of 1.8 to 12.5 % per model (the least 0.1 %);
/// per tensor, the sample's first Conv, squeeze-excitation Convs and classifier have 1.5 to
/// 50 %, every weight of PP-OCR rec and det and of MiniLM after equalization at most 0.8 %.
const SATURATING_SHARE: f64 = 0.01;

/// Whether the weight `name` at 8 bits has at least [`SATURATING_SHARE`] of the pairs the
/// integer kernel reading it adds able to overflow ([`kernel_pairs`](super::kernel_pairs)).
fn pairs_saturate(
    prepared: &Prepared,
    recipe: &Recipe,
    plan: &Plan,
    name: &str,
    role: &TensorRole,
) -> bool {
    let Some(along) = pairing_readers(&prepared.graph, recipe, plan, name).find_map(reduction_of)
    else {
        return false;
    };
    let how = |rank| weight_quant(recipe, name, role, rank);
    prepared
        .overflowing_share(name, along, &how)
        .is_some_and(|share| share >= SATURATING_SHARE)
}

/// How `node`'s integer kernel lays out its weight's reduction.
fn reduction_of(node: &Node) -> Option<Reduction> {
    match node.op_type.as_str() {
        ops::CONV => Some(Reduction::ConvTaps),
        ops::MAT_MUL => Some(Reduction::Rows),
        ops::GEMM if node.int_attribute("transB").unwrap_or(0) != 0 => Some(Reduction::Columns),
        ops::GEMM => Some(Reduction::Rows),
        _ => None,
    }
}

/// Whether `name` is read by a MatMul or Gemm (the legacy scope's test).
fn feeds_linear(graph: &Graph, name: &str) -> bool {
    graph.tensor(name).is_some_and(|t| {
        t.consumers
            .iter()
            .any(|&c| matches!(graph.node(c).op_type.as_str(), ops::MAT_MUL | ops::GEMM))
    })
}

/// Whether a Conv, MatMul or Gemm reads `weight` as its second input with an 8-bit
/// activation as its first: the node ONNX Runtime fuses into a u8×s8 integer kernel.
fn read_by_integer_kernel(graph: &Graph, recipe: &Recipe, plan: &Plan, weight: &str) -> bool {
    integer_kernel_readers(graph, recipe, plan, weight)
        .next()
        .is_some()
}

/// The nodes of [`read_by_integer_kernel`].
fn integer_kernel_readers<'a>(
    graph: &'a Graph,
    recipe: &'a Recipe,
    plan: &'a Plan,
    weight: &'a str,
) -> impl Iterator<Item = &'a Node> {
    let consumers = graph.tensor(weight).map(|t| t.consumers.as_slice());
    consumers
        .unwrap_or_default()
        .iter()
        .map(|&c| graph.node(c))
        .filter(move |node| {
            matches!(node.op_type.as_str(), ops::CONV | ops::MAT_MUL | ops::GEMM)
                && node.inputs.get(1).is_some_and(|w| w == weight)
                && node
                    .inputs
                    .first()
                    .is_some_and(|input| eight_bit_activation(recipe, plan, input))
        })
}

/// The [`integer_kernel_readers`] of `weight` whose kernels pair its products (all but a
/// depthwise Conv, [`pairs_nothing`]).
fn pairing_readers<'a>(
    graph: &'a Graph,
    recipe: &'a Recipe,
    plan: &'a Plan,
    weight: &'a str,
) -> impl Iterator<Item = &'a Node> {
    integer_kernel_readers(graph, recipe, plan, weight)
        .filter(move |node| !pairs_nothing(graph, node, weight))
}

/// Whether `node` is a depthwise Conv (one input channel per group) reading `weight`: ONNX
/// Runtime runs it in a kernel that adds no pairs of products, so it cannot saturate.
fn pairs_nothing(graph: &Graph, node: &Node, weight: &str) -> bool {
    let channels_per_group = graph
        .tensor(weight)
        .and_then(|t| t.shape.as_ref())
        .and_then(|s| s.get(1).cloned());
    node.op_type == ops::CONV
        && node.int_attribute("group").unwrap_or(1) > 1
        && channels_per_group == Some(Dim::Fixed(1))
}

/// Whether `input` is quantized with the recipe's 8-bit activation type.
fn eight_bit_activation(recipe: &Recipe, plan: &Plan, input: &str) -> bool {
    let quantized = plan
        .roles
        .get(input)
        .is_some_and(TensorRole::is_activation_like);
    let own = recipe.tensor_overrides.get(input);
    quantized
        && !own
            .is_some_and(|o| o.keep_float || o.dtype.is_some_and(|d| d != recipe.activation_type))
}

/// Whether the recipe asks for ONNX Runtime's u8×s8 kernels with full 8-bit weights.
fn applies(recipe: &Recipe) -> bool {
    recipe.auto_precision
        && recipe.saturation_guard
        && !recipe.reduce_range
        && recipe.mode == QuantMode::Int8
        && recipe.placement == Placement::Ort
        && recipe.activation_type == QuantType::Uint8
        && recipe.weight_type == QuantType::Int8
}

/// `recipe` with a 7-bit override on each of `weights`: the form the parameters honour.
pub fn with_seven_bits(recipe: &Recipe, weights: &BTreeSet<String>) -> Recipe {
    let mut effective = recipe.clone();
    for name in weights {
        effective
            .tensor_overrides
            .entry(name.clone())
            .or_default()
            .reduce_range = true;
    }
    effective
}

/// One line for people on what the guard did; `None` when it did nothing.
pub fn summary(weights: usize) -> Option<String> {
    (weights > 0).then(|| {
        format!(
            "7-bit weights: {} weight(s) read by ONNX Runtime's u8×s8 kernels, so that they \
             cannot saturate on x86 CPUs without VNNI (--no_saturation_guard keeps 8 bits for \
             VNNI CPUs, GPUs and NPUs)",
            weights
        )
    })
}

#[cfg(test)]
mod tests {
    use ndarray::{ArrayD, Dimension, IxDyn};

    use super::*;
    use crate::model::{DataType, ModelBuilder, TensorArray};
    use crate::recipe::TensorOverride;
    use crate::recipe::node_precision::NodePrecision;

    /// x → Conv(wc) → Relu → MatMul(w1) → Relu → MatMul(w2) → y: a network without norms,
    /// whose three weights all feed ONNX Runtime's integer kernels by default; with `norm`, a
    /// LayerNormalization before the first MatMul.
    fn model(norm: bool) -> crate::model::Model {
        let mut b = ModelBuilder::new(17);
        b.input("x", DataType::Float32, &[1, 2, 4, 4]);
        // Signs alternate along each kernel's reduction (a MatMul weight's rows, a Conv
        // weight's input channels), so per tensor no pair the kernels add can overflow.
        let weight = |shape: &[usize], seed: f32| {
            TensorArray::Float32(ArrayD::from_shape_fn(IxDyn(shape), |ix| {
                let along = ix[shape.len().min(4) / 2 - 1];
                let sign = if along % 2 == 0 { 1.0 } else { -1.0 };
                sign * (ix.slice().iter().sum::<usize>() as f32 * seed + seed)
                    .sin()
                    .abs()
            }))
        };
        b.initializer("wc", weight(&[4, 2, 1, 1], 0.53));
        b.initializer("w1", weight(&[4, 4], 0.37));
        b.initializer("w2", weight(&[4, 4], 0.71));
        b.node("Conv", &["x", "wc"], &["c"]).name("conv");
        b.node("Relu", &["c"], &["cr"]).name("conv_relu");
        let first = if norm {
            b.initializer("gamma", TensorArray::Float32(ArrayD::ones(IxDyn(&[4]))));
            b.node("LayerNormalization", &["cr", "gamma"], &["n"])
                .name("ln");
            "n"
        } else {
            "cr"
        };
        b.node("MatMul", &[first, "w1"], &["h"]).name("mm1");
        b.node("Relu", &["h"], &["r"]).name("relu");
        b.node("MatMul", &["r", "w2"], &["y"]).name("mm2");
        b.output("y", DataType::Float32, &[1, 4, 4, 4]);
        b.build()
    }

    /// The weights automatic precision gives 7 bits under `recipe` (the model without norms).
    fn guarded(recipe: &Recipe) -> BTreeSet<String> {
        guarded_in(&model(false), recipe)
    }

    fn guarded_in(model: &crate::model::Model, recipe: &Recipe) -> BTreeSet<String> {
        let prepared = Prepared::new(model, &recipe.preprocessing).unwrap();
        crate::quant::guarded(&prepared, recipe, None).seven_bit_weights
    }

    fn names(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn every_per_channel_weight_an_integer_kernel_reads_gets_seven_bits_by_default() {
        let weights = guarded(&Recipe::default());
        assert_eq!(weights, names(&["w1", "w2", "wc"]));
        let line = summary(weights.len()).unwrap();
        assert!(line.starts_with("7-bit weights: 3 weight(s)"), "{line}");
        assert_eq!(summary(0), None);
    }

    #[test]
    fn per_tensor_weights_get_seven_bits_where_equalization_rescaled_their_layer() {
        let per_tensor = Recipe {
            per_channel: false,
            ..Recipe::default()
        };
        assert!(guarded(&per_tensor).is_empty());
        let mut equalized = per_tensor.clone();
        equalized.preprocessing.equalize = true;
        // mm1 → Relu → mm2 is a pair; the Conv before them pairs with nothing.
        let prepared = Prepared::new(&model(false), &equalized.preprocessing).unwrap();
        assert_eq!(prepared.report.equalized.len(), 1);
        assert_eq!(guarded(&equalized), names(&["w1", "w2"]));
        // Recipes of the scope before it keep 8 bits there, as they were made.
        let before = Recipe {
            saturation_guard_scope: GuardScope::IntegerKernels,
            ..equalized
        };
        assert!(guarded(&before).is_empty());
    }

    /// x → MatMul(w1) → Relu → MatMul(w2) → y with per-tensor weights at 8 bits: w1 holds
    /// two large neighbours of one sign in a column (codes 127 and 114, a pair that can
    /// overflow: 1 of its 8 pairs), w2's neighbours alternate their signs.
    fn pairs_model() -> crate::model::Model {
        let mut b = ModelBuilder::new(17);
        b.input("x", DataType::Float32, &[1, 4]);
        let w1 = [
            1.0, 0.1, 0.2, 0.1, 0.9, 0.2, 0.1, 0.3, 0.1, 0.2, 0.2, 0.1, 0.1, 0.1, 0.3, 0.2,
        ];
        let w2 = [
            1.0, -0.9, 0.8, -0.7, -0.9, 0.8, -0.7, 0.9, 0.5, -0.6, 0.4, -0.8, -0.5, 0.9, -0.3, 0.6,
        ];
        for (name, values) in [("w1", w1), ("w2", w2)] {
            let values = ArrayD::from_shape_vec(IxDyn(&[4, 4]), values.to_vec()).unwrap();
            b.initializer(name, TensorArray::Float32(values));
        }
        b.node("MatMul", &["x", "w1"], &["h"]).name("mm1");
        b.node("Relu", &["h"], &["r"]).name("relu");
        b.node("MatMul", &["r", "w2"], &["y"]).name("mm2");
        b.output("y", DataType::Float32, &[1, 4]);
        b.build()
    }

    #[test]
    fn per_tensor_weights_whose_kernel_pairs_can_overflow_get_seven_bits() {
        let per_tensor = Recipe {
            per_channel: false,
            ..Recipe::default()
        };
        assert_eq!(guarded_in(&pairs_model(), &per_tensor), names(&["w1"]));
        // Recipes of the scopes before it keep 8 bits there, as they were made.
        for scope in [
            GuardScope::IntegerKernelsAndEqualized,
            GuardScope::IntegerKernels,
        ] {
            let before = Recipe {
                saturation_guard_scope: scope,
                ..per_tensor.clone()
            };
            assert!(guarded_in(&pairs_model(), &before).is_empty(), "{scope:?}");
        }
    }

    #[test]
    fn nodes_that_run_in_float_after_dequantizing_keep_eight_bits() {
        // Promoted to 16-bit activations: no integer kernel reads mm2's weight.
        let mut sixteen = Recipe::default();
        sixteen
            .node_precision
            .insert("mm2".to_owned(), NodePrecision::W8a16);
        assert_eq!(guarded(&sixteen), names(&["w1", "wc"]));
        // A float activation input: mm1 multiplies in float.
        let mut float_input = Recipe::default();
        float_input.tensor_overrides.insert(
            "cr".to_owned(),
            TensorOverride {
                keep_float: true,
                ..TensorOverride::default()
            },
        );
        assert_eq!(guarded(&float_input), names(&["w2", "wc"]));
    }

    #[test]
    fn recipes_of_the_transformer_only_scope_guard_a_transformers_matmuls_only() {
        let legacy = Recipe {
            saturation_guard_scope: GuardScope::TransformerLinear,
            ..Recipe::default()
        };
        assert!(guarded(&legacy).is_empty());
        assert_eq!(guarded_in(&model(true), &legacy), names(&["w1", "w2"]));
        let current = guarded_in(&model(true), &Recipe::default());
        assert_eq!(current, names(&["w1", "w2", "wc"]));
    }

    #[test]
    fn the_guard_stays_off_where_the_kernels_do_not_saturate_or_the_user_says_so() {
        let off = [
            Recipe {
                saturation_guard: false,
                ..Recipe::default()
            },
            Recipe {
                auto_precision: false,
                ..Recipe::default()
            },
            Recipe {
                placement: Placement::Tensorrt,
                ..Recipe::default()
            },
            Recipe {
                activation_type: QuantType::Int8,
                ..Recipe::default()
            },
            // Every weight already has 7 bits.
            Recipe {
                reduce_range: true,
                ..Recipe::default()
            },
            // Per-tensor weights none of whose pairs can overflow.
            Recipe {
                per_channel: false,
                ..Recipe::default()
            },
        ];
        for recipe in off {
            assert!(guarded(&recipe).is_empty(), "{recipe:?}");
        }
        let mut recipe = Recipe::default();
        recipe.tensor_overrides.insert(
            "w2".to_owned(),
            TensorOverride {
                keep_float: true,
                ..TensorOverride::default()
            },
        );
        assert_eq!(guarded(&recipe), names(&["w1", "wc"]));
        // A weight given its 8 bits back (what the measured search writes) keeps them.
        let mut recipe = Recipe::default();
        recipe.tensor_overrides.insert(
            "wc".to_owned(),
            TensorOverride {
                full_range: true,
                ..TensorOverride::default()
            },
        );
        assert_eq!(guarded(&recipe), names(&["w1", "w2"]));
    }

    /// Per-tensor weights, which the guard leaves at 8 bits, are the ones the kernels may
    /// still saturate on; the guard's own weights and a recipe without the guard have none.
    #[test]
    fn weights_left_at_eight_bits_beside_the_kernels_are_saturation_prone() {
        let prone = |recipe: &Recipe| {
            let prepared = Prepared::new(&model(false), &recipe.preprocessing).unwrap();
            let guarded = crate::quant::guarded(&prepared, recipe, None);
            saturation_prone_weights(&prepared, &guarded.recipe, &guarded.plan)
        };
        let per_tensor = Recipe {
            per_channel: false,
            ..Recipe::default()
        };
        assert_eq!(prone(&per_tensor), names(&["w1", "w2", "wc"]));
        assert!(prone(&Recipe::default()).is_empty());
        let unguarded = Recipe {
            saturation_guard: false,
            ..per_tensor
        };
        assert!(prone(&unguarded).is_empty());
    }

    /// Only a Conv with one input channel per group pairs nothing: a grouped Conv with more
    /// channels per group and a plain one pair their products.
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
        let graph = Graph::build(&b.build());
        let pairs_nothing = |node: &str, weight: &str| {
            let node = graph.node_by_name(node).unwrap();
            pairs_nothing(&graph, node, weight)
        };
        assert!(pairs_nothing("dw", "depthwise"));
        assert!(!pairs_nothing("gc", "grouped"));
        assert!(!pairs_nothing("pc", "plain"));
    }
}
