//! Mixed precision per node, in the form the quantizer honours: the recipe's `node_precision`
//! written out as per-tensor element types.
//!
//! A `w8a16` node's float activations (what it reads and writes, graph inputs included) get
//! the 16-bit activation type; a `w4a8` node's weight gets the 4-bit weight type. A tensor
//! between an 8-bit and a 16-bit node takes 16 bits (the promotion is asked for accuracy), so
//! its 8-bit neighbour reads a 16-bit Q/DQ pair. Tensors with their own override (a type,
//! float) and tensors automatic precision keeps in float (given as float overrides) are left
//! alone.

use super::prepare::Prepared;
use crate::model::TensorKind;
use crate::recipe::Recipe;
use crate::recipe::node_precision::{self, NodePrecision};

/// `recipe` with its node precisions as tensor types (the recipe itself when it has none).
pub fn with_node_precision(prepared: &Prepared, recipe: &Recipe) -> Recipe {
    let mut effective = recipe.clone();
    let graph = &prepared.graph;
    for node in graph.nodes() {
        let Some(&precision) = recipe.node_precision.get(&node.name) else {
            continue;
        };
        let (tensors, dtype): (Vec<&str>, _) = match precision {
            NodePrecision::W8a16 => (
                node.inputs
                    .iter()
                    .chain(&node.outputs)
                    .filter(|t| is_activation(prepared, t))
                    .map(String::as_str)
                    .collect(),
                node_precision::wide_activation(recipe.activation_type),
            ),
            NodePrecision::W4a8 => (
                node_precision::weight_of(graph, node).into_iter().collect(),
                node_precision::narrow_weight(recipe.weight_type),
            ),
        };
        for tensor in tensors {
            let own = recipe.tensor_overrides.get(tensor);
            if own.is_some_and(|o| o.keep_float || o.dtype.is_some()) {
                continue;
            }
            let o = effective
                .tensor_overrides
                .entry(tensor.to_owned())
                .or_default();
            o.dtype = Some(dtype);
        }
    }
    effective
}

/// Whether `name` is a float activation (not a constant) of the prepared model.
fn is_activation(prepared: &Prepared, name: &str) -> bool {
    prepared.graph.tensor(name).is_some_and(|t| {
        matches!(t.kind, TensorKind::Activation | TensorKind::Input)
            && prepared.is_float(name, None)
    })
}
