//! Raising the default-domain opset when the output needs newer Q/DQ features: 13 for
//! per-channel DequantizeLinear, 19 for FP8, 21 for 16-bit, 4-bit and block-wise Q/DQ.
//!
//! A raise is refused (naming the nodes) when any node's behaviour or signature changes
//! between the model's opset and the target: onnxruntime's quantizer writes invalid models
//! instead (per-channel on opset < 13).

use super::QuantError;
use crate::model::graph::is_default_domain;
use crate::model::ops;
use crate::model::{DataType, Dim, Graph, TensorKind};

/// Op types whose signature changed at a version: (op, version, attribute that moved to an
/// input or `None` when every node is affected, change). A node is affected only if it uses
/// the moved attribute: without it, old and new versions compute the same thing. Affected
/// nodes with a moved attribute are upgraded (the attribute becomes an int64 initializer
/// input, exactly what the newer version expects); the others block the raise.
const CHANGES: &[(&str, i64, Option<&str>, &str)] = &[
    (
        ops::SQUEEZE,
        13,
        Some("axes"),
        "axes moved from an attribute to an input",
    ),
    (
        ops::UNSQUEEZE,
        13,
        Some("axes"),
        "axes moved from an attribute to an input",
    ),
    (
        ops::REDUCE_SUM,
        13,
        Some("axes"),
        "axes moved from an attribute to an input",
    ),
    (
        ops::SPLIT,
        13,
        Some("split"),
        "split moved from an attribute to an input",
    ),
    (
        ops::REDUCE_MEAN,
        18,
        Some("axes"),
        "axes moved from an attribute to an input",
    ),
    (
        ops::REDUCE_MAX,
        18,
        Some("axes"),
        "axes moved from an attribute to an input",
    ),
    (
        ops::REDUCE_MIN,
        18,
        Some("axes"),
        "axes moved from an attribute to an input",
    ),
    (
        ops::REDUCE_PROD,
        18,
        Some("axes"),
        "axes moved from an attribute to an input",
    ),
    (
        ops::REDUCE_L1,
        18,
        Some("axes"),
        "axes moved from an attribute to an input",
    ),
    (
        ops::REDUCE_L2,
        18,
        Some("axes"),
        "axes moved from an attribute to an input",
    ),
    (
        ops::REDUCE_LOG_SUM,
        18,
        Some("axes"),
        "axes moved from an attribute to an input",
    ),
    (
        ops::REDUCE_LOG_SUM_EXP,
        18,
        Some("axes"),
        "axes moved from an attribute to an input",
    ),
    (
        ops::REDUCE_SUM_SQUARE,
        18,
        Some("axes"),
        "axes moved from an attribute to an input",
    ),
    (ops::UPSAMPLE, 10, None, "removed in favour of Resize"),
    (
        ops::SLICE,
        10,
        None,
        "starts, ends and axes moved from attributes to inputs",
    ),
    (
        ops::TOP_K,
        10,
        None,
        "k moved from an attribute to an input",
    ),
    (
        ops::PAD,
        11,
        None,
        "pads and value moved from attributes to inputs",
    ),
    (
        ops::RESIZE,
        11,
        None,
        "coordinate transformation modes were added and its default behaviour changed",
    ),
    (ops::SCAN, 9, None, "scan_input_axes semantics changed"),
    (
        "DFT",
        20,
        None,
        "axis moved from an attribute to an input with another default",
    ),
    (
        ops::GRID_SAMPLE,
        20,
        None,
        "its mode values were renamed (bilinear became linear, bicubic cubic)",
    ),
    (
        ops::GROUP_NORMALIZATION,
        21,
        None,
        "scale and bias went from one value per group to one per channel",
    ),
];

/// Attributes that became float inputs at a version (in this order after the data input):
/// a node that carries one is upgraded when the input's type is known (a Clip's bounds take
/// its data's type; Dropout's ratio may be float32), and blocks the raise otherwise.
const FLOAT_ATTRIBUTES_MOVED: &[(&str, i64, &[&str])] =
    &[("Clip", 11, &["min", "max"]), ("Dropout", 12, &["ratio"])];

/// The float type `node`'s moved attributes take as inputs: float32 for Dropout's ratio, the
/// data's type for a Clip's bounds (from the index, or the model's only float type).
fn moved_attribute_type(graph: &Graph, node: &crate::model::Node) -> Option<DataType> {
    if node.op_type == ops::DROPOUT {
        return Some(DataType::Float32);
    }
    if let Some(own) = node
        .inputs
        .first()
        .and_then(|i| graph.tensor(i)?.elem_type)
        .and_then(plain_float)
    {
        return Some(own);
    }
    // Old exports rarely describe intermediate tensors: a model with one float type uses it.
    only_float_type(graph)
}

/// The ONNX element type `code` when it is a plain float type (float32, float16, bfloat16,
/// float64).
fn plain_float(code: i32) -> Option<DataType> {
    DataType::from_onnx(code)
        .ok()
        .filter(|t| t.is_plain_float())
}

/// The float type of every graph input and float initializer of `graph`, when there is one.
fn only_float_type(graph: &Graph) -> Option<DataType> {
    let mut types = graph
        .tensors()
        .iter()
        .filter(|t| matches!(t.kind, TensorKind::Input | TensorKind::Initializer))
        .filter_map(|t| t.elem_type.and_then(plain_float));
    let first = types.next()?;
    types.all(|t| t == first).then_some(first)
}

/// Softmax-family axis semantics changed at 13: safe only when the axis is the last one.
pub const SOFTMAX_LIKE: &[&str] = &[ops::SOFTMAX, ops::LOG_SOFTMAX, ops::HARDMAX];

/// The default-domain opset of a model (`None` when it does not import it).
pub fn default_opset(proto: &crate::model::proto::ModelProto) -> Option<i64> {
    crate::model::legacy::default_opset(proto)
}

/// Nodes whose behaviour would change if the opset went from `from` to `to`. `observed_rank`
/// gives a tensor's rank seen during calibration when the model does not declare it.
pub fn blocking_nodes(
    graph: &Graph,
    from: i64,
    to: i64,
    observed_rank: &dyn Fn(&str) -> Option<usize>,
) -> Vec<String> {
    let mut blocking = Vec::new();
    for node in graph.nodes().iter().filter(|n| n.is_default_domain()) {
        for (op, version, attribute, change) in CHANGES {
            // Nodes using a moved attribute are upgraded by `raise`; only the rest block.
            if node.op_type == *op && from < *version && *version <= to && attribute.is_none() {
                blocking.push(format!(
                    "'{}' ({}: {change} at opset {version})",
                    node.name, node.op_type
                ));
            }
        }
        for (op, version, attributes) in FLOAT_ATTRIBUTES_MOVED {
            let carried = attributes
                .iter()
                .any(|a| node.attribute_names.iter().any(|n| n == a));
            let typed = || moved_attribute_type(graph, node).is_some();
            if node.op_type == *op && from < *version && *version <= to && carried && !typed() {
                blocking.push(format!(
                    "'{}' ({}: {} moved from attributes to inputs at opset {version})",
                    node.name,
                    node.op_type,
                    attributes.join(" and ")
                ));
            }
        }
        if SOFTMAX_LIKE.contains(&node.op_type.as_str()) && from < 13 && to >= 13 {
            let rank = node
                .inputs
                .first()
                .and_then(|i| rank_of(graph, i).or_else(|| observed_rank(i)));
            let axis = node_axis(node);
            let last = matches!((rank, axis), (Some(r), Some(a)) if a == -1 || a == r as i64 - 1);
            if !last {
                blocking.push(format!(
                    "'{}' ({}: its axis semantics changed at opset 13 and the input rank is unknown or the axis is not the last)",
                    node.name, node.op_type
                ));
            }
        }
    }
    blocking
}

/// The tensors whose rank [`blocking_nodes`] needs from a run when the opset goes from `from`
/// to `to`: the inputs of Softmax-like nodes, across opset 13, that `graph` gives no rank.
pub fn unranked_inputs(graph: &Graph, from: i64, to: i64) -> Vec<String> {
    if !(from < 13 && to >= 13) {
        return Vec::new();
    }
    let mut inputs: Vec<String> = graph
        .nodes()
        .iter()
        .filter(|n| n.is_default_domain())
        .filter(|n| SOFTMAX_LIKE.contains(&n.op_type.as_str()))
        .filter_map(|n| n.inputs.first())
        .filter(|i| rank_of(graph, i).is_none())
        .cloned()
        .collect();
    inputs.sort();
    inputs.dedup();
    inputs
}

/// Softmax's axis (default 1 before opset 13).
fn node_axis(node: &crate::model::Node) -> Option<i64> {
    node.int_attribute("axis").or(Some(1))
}

/// Raises the default-domain opset (and the IR version it requires) of `proto` to `to`, or
/// explains which nodes prevent it.
pub fn raise(
    proto: &mut crate::model::proto::ModelProto,
    graph: &Graph,
    to: i64,
    observed_rank: &dyn Fn(&str) -> Option<usize>,
) -> Result<Option<(i64, i64)>, QuantError> {
    let from = default_opset(proto).unwrap_or(1);
    if from >= to {
        return Ok(None);
    }
    let blocking = blocking_nodes(graph, from, to, observed_rank);
    if !blocking.is_empty() {
        return Err(QuantError::OpsetRaise { from, to, blocking });
    }
    move_attributes_to_inputs(proto, from, to);
    move_float_attributes_to_inputs(proto, graph, from, to);
    for opset in proto
        .opset_import
        .iter_mut()
        .filter(|o| is_default_domain(o.domain()))
    {
        opset.version = Some(to);
    }
    let ir = match to {
        21.. => 10,
        19..=20 => 9,
        15..=18 => 8,
        _ => 7,
    };
    if proto.ir_version() < ir {
        proto.ir_version = Some(ir);
    }
    Ok(Some((from, to)))
}

/// Upgrades nodes whose attribute became an input between `from` and `to` (Squeeze's and
/// Unsqueeze's `axes` at 13, Split's `split` at 13, the reductions' `axes` at 13/18): the
/// values move into an int64 initializer appended as the node's second input.
fn move_attributes_to_inputs(proto: &mut crate::model::proto::ModelProto, from: i64, to: i64) {
    use crate::model::TensorArray;
    let Some(graph) = proto.graph.as_mut() else {
        return;
    };
    let mut new_initializers = Vec::new();
    for node in graph
        .node
        .iter_mut()
        .filter(|n| is_default_domain(n.domain()))
    {
        for (op, version, attribute, _) in CHANGES {
            let Some(attribute) = attribute else { continue };
            if node.op_type() != *op || !(from < *version && *version <= to) {
                continue;
            }
            let Some(at) = node.attribute.iter().position(|a| a.name() == *attribute) else {
                continue;
            };
            let values = node.attribute.remove(at).ints;
            let name = format!("{}_{attribute}", node.name());
            let tensor =
                TensorArray::Int64(crate::model::tensor::array(vec![values.len()], values));
            new_initializers.push(tensor.to_proto(&name));
            // The moved input is the second one in every new signature.
            if node.input.len() < 2 {
                node.input.push(name);
            } else {
                node.input.insert(1, name);
            }
        }
    }
    graph.initializer.extend(new_initializers);
}

/// Upgrades nodes whose float attributes became inputs between `from` and `to` (Clip's `min`
/// and `max` at 11, Dropout's `ratio` at 12): each value moves into a scalar initializer of
/// the type [`moved_attribute_type`] gives, at its place in the new signature (an absent
/// one stays an empty input before a present one). `graph` indexes the model `proto` was
/// made from (a rewrite adds nodes, so its nodes are found by their names, which the
/// quantizer gives every node).
fn move_float_attributes_to_inputs(
    proto: &mut crate::model::proto::ModelProto,
    graph: &Graph,
    from: i64,
    to: i64,
) {
    use crate::model::TensorArray;
    let types: std::collections::HashMap<&str, DataType> = graph
        .nodes()
        .iter()
        .filter_map(|n| Some((n.name.as_str(), moved_attribute_type(graph, n)?)))
        .collect();
    let Some(g) = proto.graph.as_mut() else {
        return;
    };
    let mut new_initializers = Vec::new();
    // A node the index names otherwise (an unnamed one) takes the model's only float type.
    let fallback = only_float_type(graph);
    for node in &mut g.node {
        let float_type = match types.get(node.name()) {
            Some(&t) => t,
            None if node.op_type() == ops::DROPOUT => DataType::Float32,
            None => match fallback {
                Some(t) => t,
                None => continue,
            },
        };
        for (op, version, attributes) in FLOAT_ATTRIBUTES_MOVED {
            if node.op_type() != *op
                || !is_default_domain(node.domain())
                || !(from < *version && *version <= to)
            {
                continue;
            }
            let values: Vec<Option<f32>> = attributes
                .iter()
                .map(|a| crate::model::attributes::float(node, a))
                .collect();
            if values.iter().all(Option::is_none) {
                continue;
            }
            node.attribute.retain(|a| !attributes.contains(&a.name()));
            let output = node.output.first().cloned().unwrap_or_default();
            let mut inputs: Vec<String> = node.input.iter().take(1).cloned().collect();
            for (attribute, value) in attributes.iter().zip(&values) {
                let Some(value) = value else {
                    inputs.push(String::new());
                    continue;
                };
                let name = format!("{output}_{attribute}");
                let scalar =
                    TensorArray::Float32(crate::model::tensor::array(vec![], vec![*value]))
                        .cast_float(float_type);
                new_initializers.push(scalar.to_proto(&name));
                inputs.push(name);
            }
            while inputs.last().is_some_and(String::is_empty) {
                inputs.pop();
            }
            node.input = inputs;
        }
    }
    g.initializer.extend(new_initializers);
}

/// The rank of a tensor if the index knows it.
pub fn rank_of(graph: &Graph, tensor: &str) -> Option<usize> {
    graph
        .tensor(tensor)
        .and_then(|t| t.shape.as_ref())
        .map(|s: &Vec<Dim>| s.len())
}
