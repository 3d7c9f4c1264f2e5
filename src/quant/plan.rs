//! Which nodes are quantized and what happens to each of their tensors, for each placement
//! policy. The plan is pure data; [`super::rewrite`] turns it into a QDQ model.

use std::collections::{BTreeMap, HashSet};

use crate::model::{DataType, Graph, NodeId, TensorKind};
use crate::recipe::{NamePattern, Placement, QuantMode, Recipe};

use super::ops::ORT_DEFAULT_OP_TYPES;

/// Ops whose output reuses the input's scale and zero point (onnxruntime's "direct 8-bit"
/// ops): they move or select values without changing them.
pub const SHARED_SCALE_OPS: &[&str] = &[
    "Reshape",
    "Transpose",
    "Squeeze",
    "Unsqueeze",
    "Flatten",
    "Slice",
    "MaxPool",
    "Resize",
    "Pad",
    "Split",
    "Gather",
    "GatherElements",
    "TopK",
    "AveragePool",
    "Where",
];

/// Ops with a weight (input 1) and bias (input 2).
const WEIGHTED_OPS: &[&str] = &["Conv", "ConvTranspose", "Gemm"];

/// Normalisations whose scale is quantized as a weight and bias as int32.
const NORM_OPS: &[&str] = &[
    "BatchNormalization",
    "LayerNormalization",
    "InstanceNormalization",
];

/// TensorRT explicit quantization: compute ops whose inputs get Q/DQ (ModelOpt's default
/// int8 set).
pub const TENSORRT_OP_TYPES: &[&str] = &[
    "Conv",
    "ConvTranspose",
    "Gemm",
    "MatMul",
    "Add",
    "AveragePool",
    "GlobalAveragePool",
    "MaxPool",
    "BatchNormalization",
    "Mul",
    "Clip",
];

/// The op types `recipe` quantizes by default under its placement and mode.
pub fn default_op_types(recipe: &Recipe) -> Vec<&'static str> {
    match (recipe.mode, recipe.placement) {
        (QuantMode::Int4, _) => vec!["MatMul", "Gemm"],
        (QuantMode::Fp8, _) => vec!["Conv", "Gemm", "MatMul"],
        (_, Placement::Ort) => ORT_DEFAULT_OP_TYPES.to_vec(),
        (_, Placement::Tensorrt) => TENSORRT_OP_TYPES.to_vec(),
    }
}

/// What happens to one tensor.
#[derive(Debug, Clone, PartialEq)]
pub enum TensorRole {
    /// Quantized with its own scale and zero point from its range.
    Activation,
    /// Quantized with the scale and zero point of another tensor.
    Shared(String),
    /// A weight initializer quantized from its values (per channel along `axis` when set).
    Weight {
        /// Channel axis for per-channel scales.
        axis: Option<usize>,
    },
    /// A constant input of a non-weighted op, quantized like an activation from its values.
    ConstantActivation,
    /// An int32 bias whose scale is `scale(input) × scale(weight)`.
    Bias {
        /// The activation input of the node.
        input: String,
        /// The weight of the node.
        weight: String,
    },
}

/// Why a node is not quantized.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Exclusion {
    /// Its op type is not in the policy's (or recipe's) list.
    OpTypeNotQuantized,
    /// Its op type is excluded by the recipe.
    OpTypeExcluded,
    /// Its name matches `nodes_to_exclude`.
    NodeExcluded,
    /// `nodes_to_quantize` is set and does not match it.
    NotSelected,
    /// Outside the subgraph range.
    OutsideSubgraph,
    /// Not in the default ONNX domain.
    CustomDomain,
}

/// The plan for a graph.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Nodes to quantize.
    pub quantized: Vec<NodeId>,
    /// Nodes left in float and why.
    pub excluded: BTreeMap<NodeId, Exclusion>,
    /// Tensor name → role.
    pub roles: BTreeMap<String, TensorRole>,
    /// Relu/Clip nodes removed because the previous range makes them exact: (node, its input,
    /// its output). The input's producer is renamed to write the output.
    pub removed: Vec<(NodeId, String, String)>,
}

/// Nodes between the recipe's subgraph start and end nodes (inclusive).
fn subgraph_nodes(graph: &Graph, recipe: &Recipe) -> Option<HashSet<NodeId>> {
    if recipe.subgraph_start.is_empty() && recipe.subgraph_end.is_empty() {
        return None;
    }
    let find = |patterns: &[String]| -> Vec<NodeId> {
        let p: Vec<NamePattern> = patterns.iter().map(|s| NamePattern::new(s)).collect();
        graph
            .nodes()
            .iter()
            .filter(|n| p.iter().any(|p| p.matches(&n.name)))
            .map(|n| n.id)
            .collect()
    };
    let walk = |starts: Vec<NodeId>, forward: bool| -> HashSet<NodeId> {
        let mut seen: HashSet<NodeId> = starts.iter().copied().collect();
        let mut stack = starts;
        while let Some(id) = stack.pop() {
            let node = graph.node(id);
            let next: Vec<NodeId> = if forward {
                node.outputs
                    .iter()
                    .filter_map(|o| graph.tensor(o))
                    .flat_map(|t| t.consumers.clone())
                    .collect()
            } else {
                node.inputs
                    .iter()
                    .filter_map(|i| graph.tensor(i))
                    .filter_map(|t| t.producer)
                    .collect()
            };
            for n in next {
                if seen.insert(n) {
                    stack.push(n);
                }
            }
        }
        seen
    };
    let all: HashSet<NodeId> = graph.nodes().iter().map(|n| n.id).collect();
    let from = if recipe.subgraph_start.is_empty() {
        all.clone()
    } else {
        walk(find(&recipe.subgraph_start), true)
    };
    let to = if recipe.subgraph_end.is_empty() {
        all
    } else {
        walk(find(&recipe.subgraph_end), false)
    };
    Some(from.intersection(&to).copied().collect())
}

fn is_float(graph: &Graph, tensor: &str, calibrated: &HashSet<&str>) -> bool {
    match graph.tensor(tensor).and_then(|t| t.elem_type) {
        Some(code) => DataType::from_onnx(code).is_ok_and(DataType::is_float),
        None => calibrated.contains(tensor),
    }
}

/// Decides, node by node in topological order, what gets quantized. `clip_min` gives a Clip
/// node's lower bound when it is a constant.
pub fn plan(
    graph: &Graph,
    recipe: &Recipe,
    calibrated: &HashSet<&str>,
    clip_min: &dyn Fn(NodeId) -> Option<f32>,
) -> Plan {
    let defaults = default_op_types(recipe);
    let op_types: Vec<&str> = if recipe.op_types_to_quantize.is_empty() {
        defaults
    } else {
        recipe
            .op_types_to_quantize
            .iter()
            .map(String::as_str)
            .collect()
    };
    let include: Vec<NamePattern> = recipe
        .nodes_to_quantize
        .iter()
        .map(|s| NamePattern::new(s))
        .collect();
    let exclude: Vec<NamePattern> = recipe
        .nodes_to_exclude
        .iter()
        .map(|s| NamePattern::new(s))
        .collect();
    let range = subgraph_nodes(graph, recipe);
    let keep_float: HashSet<&str> = recipe
        .tensor_overrides
        .iter()
        .filter(|(_, o)| o.keep_float)
        .map(|(n, _)| n.as_str())
        .collect();
    let mut p = Plan::default();
    let is_weight = |name: &str| {
        graph
            .tensor(name)
            .is_some_and(|t| matches!(t.kind, TensorKind::Initializer | TensorKind::Constant))
    };
    let consumers = |name: &str| graph.tensor(name).map_or(0, |t| t.consumers.len());

    for &id in graph.topological_order() {
        let node = graph.node(id);
        let exclusion = if !(node.domain.is_empty() || node.domain == "ai.onnx") {
            Some(Exclusion::CustomDomain)
        } else if recipe.op_types_to_exclude.contains(&node.op_type) {
            Some(Exclusion::OpTypeExcluded)
        } else if !op_types.contains(&node.op_type.as_str()) {
            Some(Exclusion::OpTypeNotQuantized)
        } else if exclude.iter().any(|e| e.matches(&node.name)) {
            Some(Exclusion::NodeExcluded)
        } else if !include.is_empty() && !include.iter().any(|i| i.matches(&node.name)) {
            Some(Exclusion::NotSelected)
        } else if range.as_ref().is_some_and(|r| !r.contains(&id)) {
            Some(Exclusion::OutsideSubgraph)
        } else {
            None
        };
        if let Some(reason) = exclusion {
            p.excluded.insert(id, reason);
            continue;
        }
        let set = |p: &mut Plan, name: &str, role: TensorRole| {
            if name.is_empty() || keep_float.contains(name) || !is_float(graph, name, calibrated) {
                return false;
            }
            p.roles.entry(name.to_owned()).or_insert(role);
            true
        };
        let input = |i: usize| node.inputs.get(i).cloned().unwrap_or_default();
        let op = node.op_type.as_str();
        let quantize_outputs = recipe.placement == Placement::Ort && recipe.mode == QuantMode::Int8;
        let activation_inputs = recipe.mode != QuantMode::Int4;
        if recipe.mode == QuantMode::Int4 {
            // Weight-only: rank-2 MatMul/Gemm weights, block-wise.
            let w = input(1);
            if is_weight(&w)
                && graph
                    .tensor(&w)
                    .and_then(|t| t.shape.as_ref())
                    .is_some_and(|s| s.len() == 2)
            {
                set(&mut p, &w, TensorRole::Weight { axis: Some(0) });
                p.quantized.push(id);
            } else {
                p.excluded.insert(id, Exclusion::OpTypeNotQuantized);
            }
            continue;
        }
        if WEIGHTED_OPS.contains(&op) || op == "MatMul" {
            let x = input(0);
            let w = input(1);
            set(&mut p, &x, TensorRole::Activation);
            if is_weight(&w) {
                let axis = match op {
                    "Conv" => 0,
                    "ConvTranspose" => 1,
                    "Gemm" => usize::from(node.int_attribute("transB").unwrap_or(0) == 0),
                    _ => 1,
                };
                set(&mut p, &w, TensorRole::Weight { axis: Some(axis) });
                let b = input(2);
                if WEIGHTED_OPS.contains(&op) && is_weight(&b) && recipe.mode == QuantMode::Int8 {
                    set(
                        &mut p,
                        &b,
                        TensorRole::Bias {
                            input: x,
                            weight: w,
                        },
                    );
                }
            } else if activation_inputs {
                set(&mut p, &w, TensorRole::Activation);
            }
            if quantize_outputs {
                set(&mut p, &node.outputs[0], TensorRole::Activation);
            }
        } else if recipe.placement == Placement::Ort && SHARED_SCALE_OPS.contains(&op) {
            let data = if op == "Where" { input(1) } else { input(0) };
            if p.roles.contains_key(&data) {
                for out in node.outputs.iter().filter(|o| !o.is_empty()) {
                    set(&mut p, out, TensorRole::Shared(data.clone()));
                }
            } else {
                p.excluded.insert(id, Exclusion::OpTypeNotQuantized);
                continue;
            }
        } else if matches!(op, "Relu" | "Clip") && recipe.placement == Placement::Ort {
            let x = input(0);
            let y = node.outputs[0].clone();
            // Dropping the node is exact when the quantized range of its input starts at zero
            // with the zero point at qmin: asymmetric activations of a Relu, or a Clip whose
            // minimum is 0 (never the symmetric-range trap that deletes a Relu).
            let floor_is_zero = op == "Relu" || clip_min(id) == Some(0.0);
            let removable = floor_is_zero
                && !recipe.symmetric_activations
                && p.roles.get(&x) == Some(&TensorRole::Activation)
                && consumers(&x) == 1
                && !graph.tensor(&x).is_some_and(|t| t.is_output)
                && !graph.tensor(&y).is_some_and(|t| t.is_output);
            if removable && graph.tensor(&x).is_some_and(|t| t.producer.is_some()) {
                // As onnxruntime does, the producer then writes the Relu's output name, which
                // carries the Relu's (calibrated) range.
                if let Some(role) = p.roles.remove(&x) {
                    p.roles.insert(y.clone(), role);
                }
                p.removed.push((id, x.clone(), y.clone()));
            } else {
                set(&mut p, &x, TensorRole::Activation);
                set(&mut p, &y, TensorRole::Activation);
            }
        } else if recipe.placement == Placement::Tensorrt {
            // Inputs only. An Add of two activations is a residual join: only the
            // non-residual input gets Q/DQ. An Add with a constant is a bias TensorRT fuses
            // into the preceding layer: left alone.
            let inputs: Vec<String> = (0..node.inputs.len()).map(input).collect();
            if op == "Add" {
                let activations = inputs.len() == 2 && !inputs.iter().any(|i| is_weight(i));
                match residual_input(graph, &inputs).filter(|_| activations) {
                    Some(residual) => {
                        set(&mut p, &inputs[1 - residual], TensorRole::Activation);
                    }
                    None => {
                        p.excluded.insert(id, Exclusion::OpTypeNotQuantized);
                        continue;
                    }
                }
            } else {
                for x in &inputs {
                    let role = if is_weight(x) {
                        TensorRole::ConstantActivation
                    } else {
                        TensorRole::Activation
                    };
                    set(&mut p, x, role);
                }
            }
        } else {
            let norm = NORM_OPS.contains(&op);
            for (i, x) in (0..node.inputs.len()).map(|i| (i, input(i))) {
                let role = if norm && i == 1 && is_weight(&x) {
                    TensorRole::Weight { axis: None }
                } else if norm && i == 2 && is_weight(&x) {
                    TensorRole::Bias {
                        input: input(0),
                        weight: input(1),
                    }
                } else if norm && i > 2 {
                    continue;
                } else if is_weight(&x) {
                    TensorRole::ConstantActivation
                } else {
                    TensorRole::Activation
                };
                set(&mut p, &x, role);
            }
            if quantize_outputs {
                for out in node.outputs.iter().filter(|o| !o.is_empty()).take(1) {
                    set(&mut p, out, TensorRole::Activation);
                }
            }
        }
        p.quantized.push(id);
    }
    p
}

/// For a residual `Add(a, b)`, the index of the input that comes from further back (the
/// skip connection, produced earlier or a graph input), which TensorRT fuses without Q/DQ.
fn residual_input(graph: &Graph, inputs: &[String]) -> Option<usize> {
    let order = graph.topological_order();
    let depth = |name: &str| -> Option<i64> {
        let tensor = graph.tensor(name)?;
        match tensor.producer {
            Some(p) => order.iter().position(|&id| id == p).map(|d| d as i64),
            None => Some(-1),
        }
    };
    match (depth(&inputs[0]), depth(&inputs[1])) {
        (Some(a), Some(b)) if a != b => Some(if a < b { 0 } else { 1 }),
        _ => None,
    }
}
