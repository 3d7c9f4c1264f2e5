//! Which nodes are quantized and what happens to each of their tensors, for each placement
//! policy. The plan is pure data: [`super::rewrite`] turns it into a QDQ model, and
//! [`super::explain`] tells users what it will do.
//!
//! Planning runs node by node in topological order: the recipe's selection
//! ([`select`]) decides whether a node is a candidate, then its op family's rule
//! ([`families`]) assigns roles to its tensors.

mod families;
mod select;

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::model::ops;
use crate::model::{Graph, Node, NodeId};
use crate::recipe::{Placement, QuantMode, Recipe};

pub use families::{default_op_types, listed_op_types, weight_axis};

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

impl TensorRole {
    /// Whether the tensor is quantized like an activation (its own range, another tensor's
    /// scale, or a constant's values), rather than as a weight or a bias.
    pub fn is_activation_like(&self) -> bool {
        matches!(
            self,
            TensorRole::Activation | TensorRole::Shared(_) | TensorRole::ConstantActivation
        )
    }
}

/// Why a node is not quantized.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Exclusion {
    /// Its op type is not in the policy's (or recipe's) list, or the policy has nothing to
    /// quantize on it here (a shared-scale op whose input stays float, say).
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
    /// Selected, but none of its tensors is quantized because they are kept in float
    /// (automatic precision, the recipe's `keep_float` overrides), or, under a target, an op
    /// that fuses only with all its tensors quantized has one kept in float. A selected node whose
    /// tensors are not float at all (shape arithmetic on int64) is
    /// [`Exclusion::OpTypeNotQuantized`]: the policy has nothing to quantize on it.
    TensorsKeptFloat,
    /// Under a target, in a transformer (a graph that normalizes and computes mostly in
    /// MatMul/Gemm), an op that is not a compute op (MatMul, Gemm, Conv): elementwise maths,
    /// norms, softmax and activations run float, and only the compute ops' inputs are
    /// quantized, as ModelOpt and TensorRT place them. Only with the placement's default op
    /// types.
    FloatInTransformer,
    /// A node of the float path pre-processing gave a weight's outlier rows (see
    /// [`crate::quant::outlier_rows`]): it exists to stay in float.
    OutlierRowsPath,
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

/// What planning needs to know beyond the graph's structure and the recipe.
pub struct PlanFacts<'a> {
    /// True for tensors of a float type (declared by the file, else found by calibration or
    /// type inference): only those are quantized.
    pub is_float: &'a dyn Fn(&str) -> bool,
    /// A Clip node's lower bound when it is a constant.
    pub clip_min: &'a dyn Fn(NodeId) -> Option<f32>,
    /// What pre-processing added to compute in float.
    pub float_path: &'a FloatPath,
    /// The op type each node had in the user's model where pre-processing changed it (a
    /// division by a constant made a multiplication, see [`crate::quant::simplify`]): the
    /// recipe's op-type lists name either.
    pub original_op_types: &'a HashMap<String, String>,
}

/// What pre-processing added to compute in float (the outlier rows' paths, see
/// [`crate::quant::outlier_rows`]): nodes the plan leaves in float, and tensors it never
/// quantizes (a split MatMul's partial output, which the float path completes).
#[derive(Debug, Clone, Default)]
pub struct FloatPath {
    /// Node names.
    pub nodes: HashSet<String>,
    /// Tensor names.
    pub tensors: HashSet<String>,
}

/// The plan under construction, with what the op families' rules need to read.
pub(crate) struct Planner<'a> {
    graph: &'a Graph,
    recipe: &'a Recipe,
    is_float: &'a dyn Fn(&str) -> bool,
    clip_min: &'a dyn Fn(NodeId) -> Option<f32>,
    float_path: &'a FloatPath,
    keep_float: HashSet<&'a str>,
    compute_only: bool,
    plan: Plan,
}

impl<'a> Planner<'a> {
    fn graph(&self) -> &'a Graph {
        self.graph
    }

    fn recipe(&self) -> &'a Recipe {
        self.recipe
    }

    fn mode(&self) -> QuantMode {
        self.recipe.mode
    }

    /// onnxruntime's placement quantizes outputs too (in integer mode); a transformer's
    /// compute-only placement quantizes the compute ops' inputs alone, as ModelOpt does (ONNX
    /// Runtime's CPU provider runs `DQ → MatMul` as MatMulIntegerToFloat).
    fn quantize_outputs(&self) -> bool {
        self.recipe.placement == Placement::Ort
            && self.recipe.mode == QuantMode::Int8
            && !self.compute_only
    }

    fn is_weight(&self, name: &str) -> bool {
        self.graph.is_constant(name)
    }

    fn consumers(&self, name: &str) -> usize {
        self.graph.tensor(name).map_or(0, |t| t.consumers.len())
    }

    /// True for a tensor the recipe keeps in float (its `keep_float` overrides, automatic
    /// precision's) or that pre-processing's float path computes.
    fn stays_float(&self, name: &str) -> bool {
        self.keep_float.contains(name) || self.float_path.tensors.contains(name)
    }

    /// Gives `name` its role unless it already has one (the first node to claim a tensor
    /// decides); false for an empty name, a tensor kept in float, or a non-float tensor.
    fn set(&mut self, name: &str, role: TensorRole) -> bool {
        if name.is_empty() || self.stays_float(name) || !(self.is_float)(name) {
            return false;
        }
        self.plan.roles.entry(name.to_owned()).or_insert(role);
        true
    }

    fn visit(&mut self, selection: &select::Selection, node: &Node) {
        let tensors = || node.inputs.iter().chain(&node.outputs);
        let had_role: HashSet<String> = tensors()
            .filter(|t| self.plan.roles.contains_key(*t))
            .cloned()
            .collect();
        let exclusion = if self.float_path.nodes.contains(&node.name) {
            Some(Exclusion::OutlierRowsPath)
        } else {
            selection.exclusion(node)
        };
        let decided = match exclusion {
            Some(reason) => Err(reason),
            None => self.apply(families::rule(self.recipe, &node.op_type), node),
        };
        // A node with nothing quantized but constants (its activations stay float, or are
        // not float) is not quantized, and its constants are left alone too. A weight-only
        // node (int4) keeps its weight.
        let decided = decided.and_then(|()| {
            // This node's rule pushed its removal last, if it removed it (a search of the
            // whole list would make planning quadratic in a chain of Relus).
            let removed = self
                .plan
                .removed
                .last()
                .is_some_and(|(id, _, _)| *id == node.id);
            let quantized = |t: &String| {
                self.plan
                    .roles
                    .get(t)
                    .is_some_and(|r| *r != TensorRole::ConstantActivation)
            };
            if removed || tensors().any(quantized) {
                return Ok(());
            }
            for t in tensors() {
                if !had_role.contains(t) {
                    self.plan.roles.remove(t);
                }
            }
            if tensors().any(|t| self.keep_float.contains(t.as_str())) {
                Err(Exclusion::TensorsKeptFloat)
            } else {
                Err(Exclusion::OpTypeNotQuantized)
            }
        });
        match decided {
            Ok(()) => self.plan.quantized.push(node.id),
            Err(reason) => {
                self.plan.excluded.insert(node.id, reason);
            }
        }
    }
}

/// Whether `recipe` quantizes only the inputs of `graph`'s compute ops
/// ([`Exclusion::FloatInTransformer`]): a recipe naming a target, in integer mode, with
/// its placement's default op types, on a transformer ([`is_transformer`]). Measured on a trained decoder LM
/// (`benches/llm`): perplexity change +0.0115 so, +0.0141 with ONNX Runtime's elementwise
/// placement kept (each rotary, SwiGLU and norm op's Q/DQ adds its rounding to the MatMul
/// inputs), against ModelOpt's +0.0128. Recipes without a target keep their placement.
fn compute_only(graph: &Graph, recipe: &Recipe) -> bool {
    recipe.target.is_some()
        && recipe.mode == QuantMode::Int8
        && recipe.op_types_to_quantize.is_empty()
        && is_transformer(graph)
}

/// A transformer: it normalizes (LayerNorm/RMSNorm) and computes mostly in MatMul/Gemm. A
/// convolutional network with a few attention blocks (PP-OCR's SVTR recognizer: 38 Conv, 13
/// MatMul) keeps ONNX Runtime's placement, whose integer chains between its convolutions are
/// what makes it fast (0.80x float speed with the MatMul-only placement, 1.16x with ONNX
/// Runtime's).
fn is_transformer(graph: &Graph) -> bool {
    // Dense compute ops (MatMul, Gemm) against convolutions.
    let (mut dense, mut convolutions) = (0, 0);
    for node in graph.nodes() {
        match ops::info(&node.op_type) {
            Some(o) if o.family == ops::Family::Compute && o.convolution => convolutions += 1,
            Some(o) if o.family == ops::Family::Compute => dense += 1,
            _ => {}
        }
    }
    dense > convolutions && crate::quant::norms::has_normalization(graph)
}

/// Decides, node by node in topological order, what gets quantized.
pub fn plan(graph: &Graph, recipe: &Recipe, facts: &PlanFacts) -> Plan {
    let mut planner = Planner {
        graph,
        recipe,
        is_float: facts.is_float,
        clip_min: facts.clip_min,
        float_path: facts.float_path,
        keep_float: recipe
            .tensor_overrides
            .iter()
            .filter(|(_, o)| o.keep_float)
            .map(|(n, _)| n.as_str())
            .collect(),
        compute_only: compute_only(graph, recipe),
        plan: Plan::default(),
    };
    let selection = select::Selection::new(graph, recipe, facts.original_op_types);
    for &id in graph.topological_order() {
        planner.visit(&selection, graph.node(id));
    }
    planner.plan
}
