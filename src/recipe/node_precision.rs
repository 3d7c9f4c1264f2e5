//! Mixed precision per node: a node given more bits than the recipe's (16-bit activations) or
//! fewer (4-bit weights), by name. Keeping a node in float stays `nodes_to_exclude`.
//!
//! The names follow the field's (ModelOpt, Quark, QNN): `w8a16` keeps 8-bit weights and
//! quantizes the node's activations with 16 bits, the usual promotion for a node whose
//! activations lose too much at 8 bits; `w4a8` halves a Conv/Gemm/MatMul weight (4-bit, one
//! scale per output channel) and keeps 8-bit activations.

use serde::{Deserialize, Serialize};

use super::{QuantMode, QuantType, Recipe};
use crate::model::Graph;
use crate::model::ops::{self, Family};

/// A node's precision other than the recipe's 8-bit weights and activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodePrecision {
    /// 8-bit weights, 16-bit activations: every float activation the node reads or writes
    /// gets the 16-bit type of the recipe's activation type (uint16 for uint8).
    W8a16,
    /// 4-bit weights (per output channel), 8-bit activations: the node's weight only.
    W4a8,
}

impl NodePrecision {
    /// Every precision, in the order menus list them.
    pub const ALL: [NodePrecision; 2] = [NodePrecision::W8a16, NodePrecision::W4a8];

    /// The name recipes and the CLI use.
    pub fn name(self) -> &'static str {
        match self {
            NodePrecision::W8a16 => "w8a16",
            NodePrecision::W4a8 => "w4a8",
        }
    }

    /// Parses a name (`w8a16`, `w4a8`; `a16` and `w4` for short).
    pub fn parse(name: &str) -> Option<NodePrecision> {
        match name.to_ascii_lowercase().as_str() {
            "w8a16" | "a16" => Some(NodePrecision::W8a16),
            "w4a8" | "w4" => Some(NodePrecision::W4a8),
            _ => None,
        }
    }

    /// Whether it applies to a node of `op_type` (4-bit weights need a weighted op).
    pub fn applies_to(self, op_type: &str) -> bool {
        match self {
            NodePrecision::W8a16 => true,
            NodePrecision::W4a8 => ops::is_compute(op_type),
        }
    }

    /// Whether `node` of `graph` can take it (4-bit weights need a weighted op with a
    /// constant weight).
    pub fn takes(self, graph: &Graph, node: &crate::model::Node) -> bool {
        self.applies_to(&node.op_type)
            && (self != NodePrecision::W4a8 || weight_of(graph, node).is_some())
    }
}

/// The 16-bit activation type of the same signedness as `activation`.
pub fn wide_activation(activation: QuantType) -> QuantType {
    if activation.is_signed() {
        QuantType::Int16
    } else {
        QuantType::Uint16
    }
}

/// The 4-bit weight type of the same signedness as `weight`.
pub fn narrow_weight(weight: QuantType) -> QuantType {
    if weight.is_signed() {
        QuantType::Int4
    } else {
        QuantType::Uint4
    }
}

/// Why `recipe`'s settings cannot mix precisions per node (`None` when they can): only int8
/// recipes with 8-bit activations and weights.
pub fn cannot_mix(recipe: &Recipe) -> Option<String> {
    let eight_bit = |t: QuantType| matches!(t, QuantType::Uint8 | QuantType::Int8);
    if recipe.mode != QuantMode::Int8 {
        Some("node_precision applies to int8 recipes (mode = \"int8\")".to_owned())
    } else if !eight_bit(recipe.activation_type) || !eight_bit(recipe.weight_type) {
        Some("node_precision changes 8-bit weights and activations: activation_type and weight_type must be uint8 or int8".to_owned())
    } else {
        None
    }
}

/// The recipe settings `node_precision` contradicts, as (key, message).
pub(super) fn setting_problems(recipe: &Recipe) -> Vec<(&'static str, String)> {
    if recipe.node_precision.is_empty() {
        return Vec::new();
    }
    cannot_mix(recipe)
        .map(|why| ("node_precision", why))
        .into_iter()
        .collect()
}

/// The nodes `node_precision` names that `graph` lacks, or that cannot take their precision.
pub(super) fn graph_problems(recipe: &Recipe, graph: &Graph) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, precision) in &recipe.node_precision {
        let Some(node) = graph.node_by_name(name) else {
            problems.push(format!("node_precision: the model has no node '{name}'"));
            continue;
        };
        if precision.takes(graph, node) {
            continue;
        }
        problems.push(if precision.applies_to(&node.op_type) {
            format!("node_precision: '{name}' has no constant weight to give 4 bits")
        } else {
            format!(
                "node_precision: '{name}' is a {} node; {} is for {} nodes",
                node.op_type,
                precision.name(),
                ops::of_family(Family::Compute)
                    .collect::<Vec<_>>()
                    .join("/")
            )
        });
    }
    problems
}

/// The constant weight (input 1) of a weighted node, if it has one.
pub fn weight_of<'g>(graph: &Graph, node: &'g crate::model::Node) -> Option<&'g str> {
    let name = node.inputs.get(1)?;
    graph.is_constant(name).then_some(name.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_short_forms_parse() {
        for p in NodePrecision::ALL {
            assert_eq!(NodePrecision::parse(p.name()), Some(p));
        }
        assert_eq!(NodePrecision::parse("A16"), Some(NodePrecision::W8a16));
        assert_eq!(NodePrecision::parse("w4"), Some(NodePrecision::W4a8));
        assert_eq!(NodePrecision::parse("int16"), None);
    }

    #[test]
    fn node_precision_needs_an_eight_bit_int8_recipe() {
        let mut recipe = Recipe::default();
        recipe
            .node_precision
            .insert("n".into(), NodePrecision::W8a16);
        assert!(setting_problems(&recipe).is_empty());
        recipe.set_mode(QuantMode::Int4);
        assert_eq!(setting_problems(&recipe).len(), 1);
        assert!(cannot_mix(&recipe).is_some());
        recipe.set_mode(QuantMode::Int8);
        recipe.activation_type = QuantType::Uint16;
        assert_eq!(setting_problems(&recipe).len(), 1);
        // A recipe without node precisions has nothing to contradict.
        recipe.node_precision.clear();
        assert!(setting_problems(&recipe).is_empty());
        assert!(cannot_mix(&recipe).is_some());
    }
}
