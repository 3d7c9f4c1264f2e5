//! The saturation guard: 7-bit weights where ONNX Runtime's x86 integer kernels would
//! saturate.
//!
//! On x86 CPUs without VNNI (AVX2, AVX-512 before Cascade Lake), ONNX Runtime's u8×s8 GEMM
//! multiplies with `vpmaddubsw`, which adds each pair of neighbouring u8×s8 products into a
//! signed 16-bit lane and saturates: 2 × 255 × 127 does not fit in 32767. A pair overflows
//! when two neighbouring codes near the top of the range meet two large weights of the same
//! sign, which a transformer's long MatMul rows do often; on a trained sentence transformer
//! this alone took the embedding's
//! cosine to float from 0.991 (the Q/DQ model's own arithmetic) to 0.966. With 7-bit weights
//! (onnxruntime's `reduce_range`) a pair stays within 2 × 255 × 64 = 32640, so no machine
//! saturates, at the cost of one bit of weight precision (0.990 on the same model).
//!
//! The guard is part of automatic precision and applies where both conditions hold: the
//! model is a transformer (it has a LayerNorm/RMSNorm, written as one op or in primitives),
//! and the recipe targets ONNX Runtime's integer kernels with uint8 activations and int8
//! weights (int8 mode, onnxruntime's placement). Only MatMul/Gemm weights change:
//! convolutional networks, and the convolutions of hybrid models, keep onnxruntime's exact
//! 8-bit weights. The output model does not depend on the machine that made it; the
//! recipe's `saturation_guard = false` keeps 8 bits for VNNI CPUs, GPUs and NPUs.

use std::collections::BTreeSet;

use super::plan::{Plan, TensorRole};
use super::precision;
use super::prepare::Prepared;
use crate::recipe::{Placement, QuantMode, QuantType, Recipe};

/// The MatMul/Gemm weights the guard quantizes with 7 bits under `plan`; empty when it does
/// not apply. A norm's scale is left alone (its Q/DQ runs in float), and so are convolutions
/// (a hybrid model's CNN part keeps onnxruntime's weights; the saturation was measured on
/// transformer layers).
pub fn seven_bit_weights(prepared: &Prepared, recipe: &Recipe, plan: &Plan) -> BTreeSet<String> {
    if !applies(recipe) || !precision::has_normalization(&prepared.graph) {
        return BTreeSet::new();
    }
    plan.roles
        .iter()
        .filter(|(name, role)| {
            matches!(role, TensorRole::Weight { .. })
                && feeds_linear(&prepared.graph, name)
                && !recipe
                    .tensor_overrides
                    .get(*name)
                    .is_some_and(|o| o.keep_float || o.reduce_range || o.dtype.is_some())
        })
        .map(|(name, _)| name.clone())
        .collect()
}

/// Whether `name` is read by a MatMul or Gemm.
fn feeds_linear(graph: &crate::model::Graph, name: &str) -> bool {
    graph.tensor(name).is_some_and(|t| {
        t.consumers
            .iter()
            .any(|&c| matches!(graph.node(c).op_type.as_str(), "MatMul" | "Gemm"))
    })
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
            "7-bit weights: {} weight(s) of this transformer, so that ONNX Runtime's u8×s8 \
             kernels cannot saturate on x86 CPUs without VNNI (--no_saturation_guard keeps 8 \
             bits for VNNI CPUs, GPUs and NPUs)",
            weights
        )
    })
}

#[cfg(test)]
mod tests {
    use ndarray::{ArrayD, IxDyn};

    use super::*;
    use crate::model::{DataType, ModelBuilder, TensorArray};
    use crate::recipe::TensorOverride;

    /// x → LayerNormalization → MatMul(w1) → Relu → MatMul(w2) → y, or the same without the
    /// norm (`norm = false`).
    fn model(norm: bool) -> crate::model::Model {
        let mut b = ModelBuilder::new(17);
        b.input("x", DataType::Float32, &[2, 8]);
        let weight = |seed: f32| {
            TensorArray::Float32(ArrayD::from_shape_fn(IxDyn(&[8, 8]), |ix| {
                ((ix[0] * 8 + ix[1]) as f32 * seed).sin()
            }))
        };
        let first = if norm {
            b.initializer("gamma", TensorArray::Float32(ArrayD::ones(IxDyn(&[8]))));
            b.node("LayerNormalization", &["x", "gamma"], &["n"])
                .name("ln");
            "n"
        } else {
            "x"
        };
        b.initializer("w1", weight(0.37));
        b.initializer("w2", weight(0.71));
        b.node("MatMul", &[first, "w1"], &["h"]).name("mm1");
        b.node("Relu", &["h"], &["r"]).name("relu");
        b.node("MatMul", &["r", "w2"], &["y"]).name("mm2");
        b.output("y", DataType::Float32, &[2, 8]);
        b.build()
    }

    fn guarded(model: &crate::model::Model, recipe: &Recipe) -> BTreeSet<String> {
        let prepared = Prepared::new(model, &recipe.preprocessing).unwrap();
        let plan = prepared.plan(recipe, None);
        seven_bit_weights(&prepared, recipe, &plan)
    }

    #[test]
    fn a_transformers_weights_get_seven_bits_by_default() {
        let weights = guarded(&model(true), &Recipe::default());
        assert_eq!(weights, BTreeSet::from(["w1".to_owned(), "w2".to_owned()]));
        let line = summary(weights.len()).unwrap();
        assert!(line.starts_with("7-bit weights: 2 weight(s)"), "{line}");
    }

    #[test]
    fn a_network_without_norms_keeps_eight_bits() {
        assert!(guarded(&model(false), &Recipe::default()).is_empty());
        assert_eq!(summary(0), None);
    }

    #[test]
    fn the_guard_stays_off_where_the_kernels_do_not_saturate_or_the_user_says_so() {
        let transformer = model(true);
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
        ];
        for recipe in off {
            assert!(guarded(&transformer, &recipe).is_empty(), "{recipe:?}");
        }
        let mut recipe = Recipe::default();
        recipe.tensor_overrides.insert(
            "w2".to_owned(),
            TensorOverride {
                keep_float: true,
                ..TensorOverride::default()
            },
        );
        assert_eq!(
            guarded(&transformer, &recipe),
            BTreeSet::from(["w1".to_owned()])
        );
    }
}
