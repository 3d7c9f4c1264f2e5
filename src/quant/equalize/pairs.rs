//! Finding the layer pairs cross-layer equalization may rescale: a Conv, Gemm or MatMul whose
//! output reaches the next such layer alone, through nothing or one positively homogeneous
//! activation (`f(x / s) = f(x) / s` for `s > 0`: Relu, LeakyRelu, PRelu, a Clip that is a
//! Relu) or a Clip bounded at 0 and above (ReLU6: its bound then moves per channel, see
//! [`Bound`]), both weights (and the first one's bias) initializers nobody else reads.

use super::channels::ChannelMap;
use crate::model::attributes;
use crate::model::ops;
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
    /// Spatial dims of its output after the channel (a Conv's kernel rank; 0 for Dense).
    pub spatial_dims: usize,
}

/// Two layers to equalize, as indices into the layer list, and the activation between them.
#[derive(Debug, Clone)]
pub struct Pair {
    /// The first layer (its output channels are divided).
    pub first: usize,
    /// The second layer (its input channels are multiplied).
    pub second: usize,
    /// The op types of the nodes between them (an activation, pooling), if any; a bounded
    /// Clip says its bound goes per channel.
    pub between: Option<String>,
    /// The tensors those nodes write, rescaled along with the pair (the last one is what the
    /// second layer reads).
    pub between_tensors: Vec<String>,
    /// The upper bound of a Clip between them (ReLU6), which the rescaling moves.
    pub bound: Option<Bound>,
}

/// A `Clip(0, max)` between two layers. `min(max(x, 0), m) / s = min(max(x / s, 0), m / s)`:
/// once output channel `i` of the first layer is divided by `sᵢ`, the Clip keeps only its
/// floor and a `Min` against `m / sᵢ` per channel follows it, so the float model is unchanged
/// (replacing ReLU6 by Relu, as other tools do, changes it wherever an activation passes 6).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    /// The Clip node.
    pub clip: NodeId,
    /// Its upper bound.
    pub max: f32,
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
        let Some(Follower {
            layer: second_id,
            between,
            between_tensors,
            bound,
        }) = follower(model, graph, &first.output)
        else {
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
            between_tensors,
            bound,
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

/// True when `name` is a float initializer (float32, float16, bfloat16; not overridable) that
/// only one node reads (a bias of any broadcastable shape is expanded by the caller).
fn private_weight(graph: &Graph, model: &Model, name: &str) -> bool {
    let float = [DataType::Float32, DataType::Float16, DataType::BFloat16].map(DataType::to_onnx);
    graph.is_private_initializer(name)
        && model
            .graph()
            .initializer
            .iter()
            .any(|t| t.name() == name && float.contains(&t.data_type()))
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
        ops::CONV if shape.len() >= 3 => {
            let group = node.int_attribute("group").unwrap_or(1).max(1) as usize;
            (
                ChannelMap::axis(&shape, 0)?,
                ChannelMap::conv_input(&shape, group),
                Family::Conv,
                own_bias(),
            )
        }
        ops::GEMM if shape.len() == 2 => {
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
        ops::MAT_MUL if shape.len() == 2 => (
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
        spatial_dims: match family {
            Family::Conv => shape.len() - 2,
            Family::Dense => 0,
        },
    };
    if node.op_type == ops::MAT_MUL
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
    if add.op_type != ops::ADD || !add.domain.is_empty() || add.inputs.len() != 2 {
        return None;
    }
    let other = add.inputs.iter().find(|i| *i != tensor)?;
    private_weight(graph, model, other).then(|| (add.outputs[0].clone(), other.clone()))
}

/// The layer that reads a layer's output, and what lies between.
struct Follower {
    /// The second layer.
    layer: NodeId,
    /// The op types between, joined (`None` when the second reads the output directly).
    between: Option<String>,
    /// The tensors the nodes between write.
    between_tensors: Vec<String>,
    /// A bounded Clip's bound, when one is between.
    bound: Option<Bound>,
}

/// Nodes a path between two layers may pass through besides one activation: per-channel
/// pooling, for which `pool(x / s) = pool(x) / s` with `s > 0` per channel (a Conv → Relu →
/// MaxPool → Conv chain, as in VGG and ResNet stems).
const POOLS: &[&str] = &[ops::MAX_POOL, ops::AVERAGE_POOL];

/// Most nodes between two layers (one activation and pooling).
const MOST_BETWEEN: usize = 3;

/// The layer node that reads `tensor` as its data input, directly or through at most one
/// activation that lets them be rescaled and any per-channel pooling (Conv layers only).
fn follower(model: &Model, graph: &Graph, tensor: &str) -> Option<Follower> {
    let mut at = tensor.to_owned();
    let (mut ops, mut tensors, mut bound, mut activations) = (Vec::new(), Vec::new(), None, 0);
    for _ in 0..=MOST_BETWEEN {
        let next = graph.node(graph.sole_consumer(&at)?);
        if next.inputs.first() != Some(&at) {
            return None;
        }
        if matches!(next.op_type.as_str(), ops::CONV | ops::GEMM | ops::MAT_MUL) {
            let pooled = ops.iter().any(|op: &String| POOLS.contains(&op.as_str()));
            if pooled && next.op_type != ops::CONV {
                return None;
            }
            return Some(Follower {
                layer: next.id,
                between: (!ops.is_empty()).then(|| ops.join(", ")),
                between_tensors: tensors,
                bound,
            });
        }
        let out = next.outputs.first().filter(|o| !o.is_empty())?.clone();
        if POOLS.contains(&next.op_type.as_str()) && next.domain.is_empty() {
            if next.outputs.iter().skip(1).any(|o| !o.is_empty()) {
                return None;
            }
        } else {
            activations += 1;
            if activations > 1 {
                return None;
            }
            if let Passage::Bounded(max) = passage(model, next)? {
                bound = Some(Bound { clip: next.id, max });
                ops.push(format!("{}(0, {max}), bound per channel", next.op_type));
                tensors.push(out.clone());
                at = out;
                continue;
            }
        }
        ops.push(next.op_type.clone());
        tensors.push(out.clone());
        at = out;
    }
    None
}

/// How an activation between two layers lets them be rescaled.
enum Passage {
    /// `f(x / s) = f(x) / s` for every `s > 0`.
    Homogeneous,
    /// A Clip from 0 to a finite bound.
    Bounded(f32),
}

/// How `node` lets the layers around it be rescaled, if it does.
fn passage(model: &Model, node: &Node) -> Option<Passage> {
    if !node.domain.is_empty() || node.outputs.len() != 1 {
        return None;
    }
    match node.op_type.as_str() {
        ops::RELU | ops::LEAKY_RELU => Some(Passage::Homogeneous),
        // The slope is per channel (or one), not per value: it does not scale.
        ops::P_RELU => node
            .inputs
            .get(1)
            .is_some_and(|s| {
                model
                    .graph()
                    .initializer
                    .iter()
                    .any(|t| t.name() == s.as_str())
            })
            .then_some(Passage::Homogeneous),
        ops::CLIP => match clip_bounds(model, node)? {
            (Some(0.0), None) => Some(Passage::Homogeneous),
            (Some(min), Some(max)) if min == 0.0 && max == f32::INFINITY => {
                Some(Passage::Homogeneous)
            }
            (Some(min), Some(max)) if min == 0.0 && max.is_finite() && max > 0.0 => {
                // Its bound becomes a per-channel Min, which broadcasts from opset 8.
                (super::opset_of(model) >= 8).then_some(Passage::Bounded(max))
            }
            _ => None,
        },
        _ => None,
    }
}

/// A Clip's constant bounds (`None` for an absent one); `None` when one is computed.
fn clip_bounds(model: &Model, node: &Node) -> Option<(Option<f32>, Option<f32>)> {
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
    if proto.input.len() > 1 {
        Some((constant(1)?, constant(2)?))
    } else {
        Some((
            attributes::float(proto, "min"),
            attributes::float(proto, "max"),
        ))
    }
}
