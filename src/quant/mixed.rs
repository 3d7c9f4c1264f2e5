//! Mixed precision per node, in the form the quantizer honours: the recipe's `node_precision`
//! written out as per-tensor element types.
//!
//! A `w8a16` node's float activations (what it reads and writes, graph inputs and constant
//! operands included; a Conv/Gemm/MatMul's weight and bias aside) get the 16-bit activation
//! type; a `w4a8` node's weight gets the 4-bit weight type. A tensor
//! between an 8-bit and a 16-bit node takes 16 bits (the promotion is asked for accuracy), so
//! its 8-bit neighbour reads a 16-bit Q/DQ pair. Tensors with their own override (a type,
//! float) and tensors automatic precision keeps in float (given as float overrides) are left
//! alone.

use super::prepare::Prepared;
use crate::model::Node;
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
                sixteen_bit_tensors(prepared, node),
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

/// The float tensors a `w8a16` node quantizes with 16 bits: what it reads and writes, its
/// constant operands too (a Mul's scale, an Add's offset: quantized like activations), but
/// not a Conv/Gemm/MatMul's constant weight and bias (a MatMul of two activations takes 16
/// bits on both).
fn sixteen_bit_tensors<'g>(prepared: &'g Prepared, node: &'g Node) -> Vec<&'g str> {
    let weighted = crate::model::ops::is_compute(&node.op_type);
    let inputs = node
        .inputs
        .iter()
        .enumerate()
        .filter(|(at, t)| !(weighted && *at > 0 && prepared.graph.is_constant(t)))
        .map(|(_, t)| t);
    inputs
        .chain(&node.outputs)
        .filter(|t| !t.is_empty() && prepared.is_float(t, None))
        .map(String::as_str)
        .collect()
}
