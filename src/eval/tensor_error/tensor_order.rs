//! Where a tensor stands: the float tensor a QDQ model's tensor quantizes, and the float
//! graph's order every list of tensor errors is sorted by.

use std::collections::HashMap;

use crate::model::Graph;
use crate::model::ops;

/// The tensor `tensor` quantizes: traced back through its DequantizeLinear and QuantizeLinear.
pub(crate) fn unquantized<'a>(qg: &'a Graph, mut tensor: &'a str) -> &'a str {
    while let Some(node) = qg.producer_of(tensor) {
        match node.inputs.first() {
            Some(input) if ops::is_quantizer(&node.op_type) => tensor = input,
            _ => break,
        }
    }
    tensor
}

/// Sorts `items` by their tensor's place in the float graph (`order`, then by name) and keeps
/// one per tensor.
pub(crate) fn in_graph_order<T>(
    items: &mut Vec<T>,
    order: &HashMap<&str, usize>,
    tensor: impl Fn(&T) -> &String,
) {
    items.sort_by_key(|item| {
        let name = tensor(item);
        (order.get(name.as_str()).copied().unwrap_or(0), name.clone())
    });
    items.dedup_by(|a, b| tensor(a) == tensor(b));
}
