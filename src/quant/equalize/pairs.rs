//! Finding the layer pairs cross-layer equalization may rescale: a Conv, Gemm or MatMul whose
//! output reaches the next such layer alone, through nothing or one positively homogeneous
//! activation (`f(x / s) = f(x) / s` for `s > 0`: Relu, LeakyRelu, PRelu, a Clip that is a
//! Relu), both weights (and the first one's bias) initializers nobody else reads.

use super::channels::ChannelMap;
use crate::model::attributes;
use crate::model::{DataType, Graph, Model, Node, NodeId};

/// Where a layer's channels sit in the activations it reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Conv: channels on axis 1 of `[N, C, …]`.
    Conv,
    /// Gemm and MatMul: channels on the last axis.
    Dense,
}

/// A weighted layer and how its weight's channels map.
#[derive(Debug, Clone)]
pub struct Layer {
    /// The node.
    pub node: NodeId,
    /// Its weight initializer.
    pub weight: String,
    /// The weight's element count.
    pub elements: usize,
    /// Its bias initializer (Conv/Gemm input 2, or the constant of the Add after a MatMul).
    pub bias: Option<String>,
    /// The tensor the layer's result is written to (the Add's output after a MatMul).
    pub output: String,
    /// Output channels of the weight.
    pub outputs: ChannelMap,
    /// Input channels of the weight (`None` when the layer reads its input transposed).
    pub inputs: Option<ChannelMap>,
    /// Where its channels sit.
    pub family: Family,
}

/// Two layers to equalize, as indices into the layer list, and the activation between them.
#[derive(Debug, Clone)]
pub struct Pair {
    /// The first layer (its output channels are divided).
    pub first: usize,
    /// The second layer (its input channels are multiplied).
    pub second: usize,
    /// The op type of the activation between them, if any.
    pub between: Option<String>,
}

/// Every layer of `graph` that takes part in at least one pair, and the pairs.
pub fn find(model: &Model, graph: &Graph) -> (Vec<Layer>, Vec<Pair>) {
    let mut layers: Vec<Layer> = Vec::new();
    let mut index_of = std::collections::HashMap::new();
    let mut pairs = Vec::new();
    for node in graph.nodes() {
        let Some(first) = layer(model, graph, node) else {
            continue;
        };
        let Some((second_id, between)) = follower(model, graph, &first.output) else {
            continue;
        };
        let Some(second) = layer(model, graph, graph.node(second_id)) else {
            continue;
        };
        let fits = first.family == second.family
            && second.inputs.is_some_and(|map| {
                map.channels(second.elements) == first.outputs.channels(first.elements)
            });
        if !fits {
            continue;
        }
        let mut slot = |layer: Layer| {
            *index_of.entry(layer.node).or_insert_with(|| {
                layers.push(layer);
                layers.len() - 1
            })
        };
        let (first, second) = (slot(first), slot(second));
        pairs.push(Pair {
            first,
            second,
            between,
        });
    }
    (layers, pairs)
}

/// The dims of the initializer `name`.
fn weight_shape(model: &Model, name: &str) -> Option<Vec<usize>> {
    let tensor = model
        .graph()
        .initializer
        .iter()
        .find(|t| t.name() == name)?;
    tensor
        .dims
        .iter()
        .map(|&d| usize::try_from(d).ok())
        .collect()
}

/// True when `name` is a float32 initializer (not overridable) that only one node reads (a
/// bias of any broadcastable shape is expanded by the caller).
fn private_weight(graph: &Graph, model: &Model, name: &str) -> bool {
    graph.is_private_initializer(name)
        && model
            .graph()
            .initializer
            .iter()
            .any(|t| t.name() == name && t.data_type() == DataType::Float32.to_onnx())
}

/// The node as an equalizable layer, when it is one.
fn layer(model: &Model, graph: &Graph, node: &Node) -> Option<Layer> {
    if !node.domain.is_empty() {
        return None;
    }
    let weight = node
        .inputs
        .get(1)
        .filter(|w| private_weight(graph, model, w))?;
    let shape = weight_shape(model, weight)?;
    let own_bias = || {
        node.inputs
            .get(2)
            .filter(|b| !b.is_empty())
            .map(|b| private_weight(graph, model, b).then(|| b.clone()))
    };
    let (outputs, inputs, family, bias) = match node.op_type.as_str() {
        "Conv" if shape.len() >= 3 => {
            let group = node.int_attribute("group").unwrap_or(1).max(1) as usize;
            (
                ChannelMap::axis(&shape, 0)?,
                ChannelMap::conv_input(&shape, group),
                Family::Conv,
                own_bias(),
            )
        }
        "Gemm" if shape.len() == 2 => {
            let trans_b = node.int_attribute("transB").unwrap_or(0) == 1;
            let trans_a = node.int_attribute("transA").unwrap_or(0) == 1;
            let (out_axis, in_axis) = if trans_b { (0, 1) } else { (1, 0) };
            (
                ChannelMap::axis(&shape, out_axis)?,
                (!trans_a)
                    .then(|| ChannelMap::axis(&shape, in_axis))
                    .flatten(),
                Family::Dense,
                own_bias(),
            )
        }
        "MatMul" if shape.len() == 2 => (
            ChannelMap::axis(&shape, 1)?,
            ChannelMap::axis(&shape, 0),
            Family::Dense,
            None,
        ),
        _ => return None,
    };
    // A bias that exists but cannot be rescaled (read elsewhere, computed) rules the layer out.
    let bias = match bias {
        Some(Some(b)) => Some(b),
        Some(None) => return None,
        None => None,
    };
    let mut layer = Layer {
        node: node.id,
        weight: weight.clone(),
        elements: shape.iter().product(),
        bias,
        output: node.outputs.first()?.clone(),
        outputs,
        inputs,
        family,
    };
    if node.op_type == "MatMul"
        && let Some((add_output, bias)) = bias_add(graph, model, &layer.output)
    {
        layer.output = add_output;
        layer.bias = Some(bias);
    }
    Some(layer)
}

/// The Add right after a MatMul whose other input is a private initializer: its output and
/// that initializer.
fn bias_add(graph: &Graph, model: &Model, tensor: &str) -> Option<(String, String)> {
    let add = graph.node(graph.sole_consumer(tensor)?);
    if add.op_type != "Add" || !add.domain.is_empty() || add.inputs.len() != 2 {
        return None;
    }
    let other = add.inputs.iter().find(|i| *i != tensor)?;
    private_weight(graph, model, other).then(|| (add.outputs[0].clone(), other.clone()))
}

/// The layer node that reads `tensor` (directly or through one homogeneous activation) as
/// its data input, and that activation's op type.
fn follower(model: &Model, graph: &Graph, tensor: &str) -> Option<(NodeId, Option<String>)> {
    let next = graph.node(graph.sole_consumer(tensor)?);
    if next.inputs.first().map(String::as_str) != Some(tensor) {
        return None;
    }
    if matches!(next.op_type.as_str(), "Conv" | "Gemm" | "MatMul") {
        return Some((next.id, None));
    }
    if !homogeneous(model, next) {
        return None;
    }
    let after = graph.node(graph.sole_consumer(next.outputs.first()?)?);
    (after.inputs.first() == next.outputs.first()
        && matches!(after.op_type.as_str(), "Conv" | "Gemm" | "MatMul"))
    .then(|| (after.id, Some(next.op_type.clone())))
}

/// True for an activation with `f(x / s) = f(x) / s` for every `s > 0`.
fn homogeneous(model: &Model, node: &Node) -> bool {
    if !node.domain.is_empty() || node.outputs.len() != 1 {
        return false;
    }
    match node.op_type.as_str() {
        "Relu" | "LeakyRelu" => true,
        // The slope is per channel (or one), not per value: it does not scale.
        "PRelu" => node.inputs.get(1).is_some_and(|s| {
            model
                .graph()
                .initializer
                .iter()
                .any(|t| t.name() == s.as_str())
        }),
        "Clip" => clip_is_relu(model, node),
        _ => false,
    }
}

/// A Clip with lower bound 0 and no upper bound. A bounded one (ReLU6) is not homogeneous:
/// rescaling would move its bound, so it is left alone rather than replaced by a Relu (which
/// would change the float model).
fn clip_is_relu(model: &Model, node: &Node) -> bool {
    let proto = &model.graph().node[node.id.0];
    let constant = |i: usize| -> Option<Option<f32>> {
        match proto.input.get(i).filter(|n| !n.is_empty()) {
            None => Some(None),
            Some(name) => {
                let value = model.weight(name).ok()??.to_f32();
                Some(Some(*value.iter().next()?))
            }
        }
    };
    let (min, max) = if proto.input.len() > 1 {
        match (constant(1), constant(2)) {
            (Some(min), Some(max)) => (min, max),
            _ => return false,
        }
    } else {
        (
            attributes::float(proto, "min"),
            attributes::float(proto, "max"),
        )
    };
    min == Some(0.0) && max.is_none_or(|m| m == f32::INFINITY)
}
