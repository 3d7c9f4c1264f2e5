//! [`explain`]: the quantizer's plan told to people. Per node: quantized, or why not (the
//! recipe's lists, the policy, or pre-processing folding it away). Per tensor: its quantized
//! type, symmetry, where its range comes from (the method, an override, the Softmax rule, a
//! folded Relu/Clip's output) and, for weights, the channel axis.
//!
//! The studio's views and reports draw from this alone, never from a copy of the quantizer's
//! rules: the plan comes from [`super::plan::plan`] and the per-tensor decisions from
//! [`super::params`], exactly as [`super::quantize`] uses them.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::QuantError;
use super::params::{
    ActivationQuant, WeightQuant, activation_quant, softmax_outputs, weight_quant,
};
use super::plan::{Exclusion, Plan, TensorRole, default_op_types, listed_op_types};
use super::precision::KeptReason;
use super::prepare::Prepared;
use crate::calib::range::Range;
use crate::calib::stats::CalibrationStats;
use crate::model::ops;
use crate::model::{Graph, Model};
use crate::recipe::Recipe;

/// Why pre-processing removed a node of the model as opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Folded {
    /// A Constant node whose value became an initializer.
    Constant,
    /// An Identity or Dropout node, removed.
    Identity,
    /// A BatchNormalization folded into the Conv/ConvTranspose/Gemm before it.
    BatchNorm,
    /// Folded by simplification ([`crate::quant::simplify`]): a Reshape of constants, or a
    /// Conv's bias Add or channel Mul folded into it.
    Simplified,
}

/// What the quantizer does with one node.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "decision", content = "reason", rename_all = "snake_case")]
pub enum NodeDecision {
    /// Quantized.
    Quantized,
    /// Left in float.
    Excluded(Exclusion),
    /// Removed by pre-processing before planning.
    Folded(Folded),
}

/// How one tensor is quantized.
#[derive(Debug, Clone, PartialEq)]
pub enum TensorQuant {
    /// An activation with its own scale from its range.
    Activation(ActivationQuant),
    /// An activation that shares `with`'s scale and zero point.
    Shared {
        /// The tensor whose parameters it uses.
        with: String,
    },
    /// A weight (per channel along its axis, or block-wise), or a constant input quantized
    /// from its values.
    Weight {
        /// Type, symmetry, axis.
        quant: WeightQuant,
        /// True for a constant input of a non-weighted op (quantized like an activation).
        constant: bool,
    },
    /// An int32 bias, scaled by its input's and weight's scales.
    Bias {
        /// The node's activation input.
        input: String,
        /// The node's weight.
        weight: String,
    },
}

/// One tensor of the plan.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedTensor {
    /// How it is quantized.
    pub quant: TensorQuant,
    /// Set when a Relu/Clip after this tensor is folded away: that node's name and the
    /// tensor this one is quantized as (its producer writes that name, with that range).
    pub folded_into: Option<(String, String)>,
}

impl PlannedTensor {
    /// The plan for this tensor in a few words ("uint8 asymmetric, minmax range",
    /// "int8 symmetric per channel (axis 1)", "shares x's scale").
    pub fn describe(&self) -> String {
        let symmetry = |s: bool| if s { "symmetric" } else { "asymmetric" };
        let text = match &self.quant {
            TensorQuant::Activation(a) => {
                let range = match &a.source {
                    super::params::RangeSource::Fixed { range } => {
                        format!("fixed range [{:.4}, {:.4}]", range.lo, range.hi)
                    }
                    super::params::RangeSource::Softmax => "Softmax range [0, 1]".to_owned(),
                    super::params::RangeSource::Method {
                        method, overridden, ..
                    } => format!(
                        "{} range{}",
                        method.name(),
                        if *overridden { " (override)" } else { "" }
                    ),
                };
                format!(
                    "{} {}, {range}",
                    a.qtype.data_type().name(),
                    symmetry(a.symmetric)
                )
            }
            TensorQuant::Shared { with } => format!("shares {with}'s scale"),
            TensorQuant::Weight { quant, constant } => {
                let layout = match (quant.axis, quant.block_size) {
                    (Some(axis), Some(block)) => format!("blocks of {block} along axis {axis}"),
                    (Some(axis), None) => format!("per channel (axis {axis})"),
                    (None, _) => "per tensor".to_owned(),
                };
                format!(
                    "{}{} {} {layout}{}{}",
                    quant.qtype.data_type().name(),
                    if quant.reduce_range { " (7-bit)" } else { "" },
                    symmetry(quant.symmetric),
                    if *constant { ", from its values" } else { "" },
                    match quant.range {
                        crate::recipe::WeightRange::Mse =>
                            ", range clipped for least squared error",
                        crate::recipe::WeightRange::Minmax => "",
                        crate::recipe::WeightRange::Pow2 => ", power-of-two scale",
                    }
                )
            }
            TensorQuant::Bias { .. } => "int32 bias (input scale × weight scale)".to_owned(),
        };
        match &self.folded_into {
            Some((node, into)) => format!("{text}; {node} is folded: written as {into}"),
            None => text,
        }
    }
}

/// An op type of the model as opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct OpTypePlan {
    /// Nodes of this type.
    pub count: usize,
    /// Of them, quantized.
    pub quantized: usize,
    /// The recipe's policy can quantize this type (it is in the placement's list, or the
    /// recipe lists it).
    pub quantizable: bool,
    /// The recipe selects this type: listed and not excluded.
    pub selected: bool,
}

/// The plan, explained.
#[derive(Debug, Clone, Default)]
pub struct Explanation {
    /// Every node of the model as opened, by name.
    pub nodes: BTreeMap<String, NodeDecision>,
    /// Every tensor the plan quantizes (and the inputs of folded Relu/Clip nodes), by name.
    pub tensors: BTreeMap<String, PlannedTensor>,
    /// Every op type of the model as opened.
    pub op_types: BTreeMap<String, OpTypePlan>,
    /// True when float-ness came from calibration statistics; false when it was inferred
    /// from the graph (before calibration).
    pub from_statistics: bool,
    /// Tensors the recipe's lists select that automatic precision keeps in float, and why.
    pub kept_float: BTreeMap<String, KeptReason>,
    /// Weights automatic precision gives 7 bits against kernel saturation.
    pub seven_bit_weights: std::collections::BTreeSet<String>,
    /// MatMuls and Gemms whose weight's outlier rows pre-processing computes in float.
    pub outlier_rows: Vec<super::outlier_rows::SplitLayer>,
    /// The quantized nodes the recipe gives another precision (`node_precision`), by name.
    pub node_precision: BTreeMap<String, crate::recipe::NodePrecision>,
    /// Nodes simplification rewrote in place, by name, with what they run as (a Div by a
    /// constant as a Mul by its reciprocal): the node keeps its name and its op type in the
    /// recipe's lists, but the saved model holds the new op.
    pub rewritten: BTreeMap<String, String>,
}

impl Explanation {
    /// The decision for node `name`.
    pub fn node(&self, name: &str) -> Option<&NodeDecision> {
        self.nodes.get(name)
    }

    /// The plan for tensor `name`, `None` when it stays float.
    pub fn tensor(&self, name: &str) -> Option<&PlannedTensor> {
        self.tensors.get(name)
    }

    /// Number of quantized nodes.
    pub fn quantized_count(&self) -> usize {
        self.nodes
            .values()
            .filter(|d| **d == NodeDecision::Quantized)
            .count()
    }

    /// The activation whose own range `name` is quantized with: itself, the end of its chain
    /// of shared scales, or a folded Relu/Clip's output. Overrides of the range or method go
    /// on that tensor. `None` for tensors that are not activations of the plan.
    pub fn range_tensor(&self, name: &str) -> Option<String> {
        let mut current = name.to_owned();
        for _ in 0..=self.tensors.len() {
            let planned = self.tensors.get(&current)?;
            match (&planned.quant, &planned.folded_into) {
                (_, Some((_, into))) if *into != current => current = into.clone(),
                (TensorQuant::Shared { with }, _) => current = with.clone(),
                (TensorQuant::Activation(_), _) => return Some(current),
                _ => return None,
            }
        }
        None
    }

    /// How the range `name` is quantized with is chosen, with the tensor it is chosen for.
    pub fn activation(&self, name: &str) -> Option<(String, &ActivationQuant)> {
        let tensor = self.range_tensor(name)?;
        match &self.tensors.get(&tensor)?.quant {
            TensorQuant::Activation(a) => Some((tensor, a)),
            _ => None,
        }
    }

    /// The range `name` is quantized with, from `stats` where it comes from statistics.
    pub fn range(
        &self,
        name: &str,
        stats: Option<&CalibrationStats>,
    ) -> Option<Result<Range, QuantError>> {
        self.activation(name).map(|(_, a)| a.range(stats))
    }
}

/// Explains what quantizing `model` with `recipe` does; `stats` (when calibrated) decide which
/// untyped tensors are float, exactly as [`super::quantize`] does.
pub fn explain(
    model: &Model,
    recipe: &Recipe,
    stats: Option<&CalibrationStats>,
) -> Result<Explanation, QuantError> {
    let prepared = Prepared::new(model, &recipe.prepared_options())?;
    Ok(explain_prepared(
        &Graph::build(model),
        &prepared,
        recipe,
        stats,
    ))
}

/// [`explain`] for a model already prepared with the recipe's pre-processing; `original` is
/// the graph of the model as opened (its nodes are the ones decided on).
pub fn explain_prepared(
    original: &Graph,
    prepared: &Prepared,
    recipe: &Recipe,
    stats: Option<&CalibrationStats>,
) -> Explanation {
    let super::Guarded {
        recipe: effective,
        plan,
        kept_float,
        seven_bit_weights,
    } = super::guarded(prepared, recipe, stats);
    let recipe = &effective;
    let nodes = node_decisions(original, prepared, &plan);
    let node_precision = recipe
        .node_precision
        .iter()
        .filter(|(name, _)| matches!(nodes.get(*name), Some(NodeDecision::Quantized)))
        .map(|(name, p)| (name.clone(), *p))
        .collect();
    Explanation {
        op_types: op_types(original, recipe, &nodes),
        tensors: planned_tensors(prepared, recipe, &plan),
        nodes,
        from_statistics: stats.is_some(),
        kept_float,
        seven_bit_weights,
        outlier_rows: prepared.report.outlier_rows.clone(),
        node_precision,
        rewritten: rewritten(prepared),
    }
}

/// What a Div simplification made a multiplication runs as, for the inspector.
const REWRITTEN_DIV: &str = "Simplified: runs as a Mul by the reciprocal of its constant divisor, \
     which quantizes where ONNX Runtime has no integer Div (Simplify in the recipe)";

/// What simplification made of the nodes it rewrote in place (see [`Explanation::rewritten`]).
fn rewritten(prepared: &Prepared) -> BTreeMap<String, String> {
    prepared
        .report
        .simplified
        .divisions
        .iter()
        .map(|name| (name.clone(), REWRITTEN_DIV.to_owned()))
        .collect()
}

fn node_decisions(
    original: &Graph,
    prepared: &Prepared,
    plan: &Plan,
) -> BTreeMap<String, NodeDecision> {
    let graph = &prepared.graph;
    let mut decisions: BTreeMap<String, NodeDecision> = BTreeMap::new();
    for id in &plan.quantized {
        decisions.insert(graph.node(*id).name.clone(), NodeDecision::Quantized);
    }
    for (id, reason) in &plan.excluded {
        decisions.insert(
            graph.node(*id).name.clone(),
            NodeDecision::Excluded(reason.clone()),
        );
    }
    let batchnorms: HashSet<&str> = prepared
        .report
        .folded_batchnorms
        .iter()
        .map(String::as_str)
        .collect();
    for node in original.nodes() {
        if decisions.contains_key(&node.name) {
            continue;
        }
        let folded = if batchnorms.contains(node.name.as_str()) {
            Folded::BatchNorm
        } else if node.op_type == ops::CONSTANT {
            Folded::Constant
        } else if matches!(node.op_type.as_str(), ops::IDENTITY | ops::DROPOUT) {
            Folded::Identity
        } else {
            Folded::Simplified
        };
        decisions.insert(node.name.clone(), NodeDecision::Folded(folded));
    }
    decisions
}

fn op_types(
    original: &Graph,
    recipe: &Recipe,
    nodes: &BTreeMap<String, NodeDecision>,
) -> BTreeMap<String, OpTypePlan> {
    let defaults = default_op_types(recipe);
    let listed_types = listed_op_types(recipe);
    let listed = |t: &str| listed_types.contains(&t);
    let mut out: BTreeMap<String, OpTypePlan> = BTreeMap::new();
    for node in original.nodes() {
        let t = node.op_type.as_str();
        let entry = out
            .entry(node.op_type.clone())
            .or_insert_with(|| OpTypePlan {
                quantizable: defaults.contains(&t)
                    || recipe.op_types_to_quantize.iter().any(|l| l == t),
                selected: listed(t) && !recipe.op_types_to_exclude.iter().any(|e| e == t),
                ..OpTypePlan::default()
            });
        entry.count += 1;
        match nodes.get(&node.name) {
            Some(NodeDecision::Quantized) => entry.quantized += 1,
            // A transformer's placement leaves the type float although the recipe lists it:
            // shown unselected, so that selecting it lists the types and quantizes it.
            Some(NodeDecision::Excluded(Exclusion::FloatInTransformer)) => entry.selected = false,
            _ => {}
        }
    }
    out
}

fn planned_tensors(
    prepared: &Prepared,
    recipe: &Recipe,
    plan: &Plan,
) -> BTreeMap<String, PlannedTensor> {
    let graph = &prepared.graph;
    let softmax = softmax_outputs(graph);
    let mut tensors: BTreeMap<String, PlannedTensor> = plan
        .roles
        .iter()
        .filter_map(|(name, role)| {
            let quant = match role {
                TensorRole::Activation => {
                    TensorQuant::Activation(activation_quant(recipe, name, &softmax))
                }
                TensorRole::Shared(with) => TensorQuant::Shared { with: with.clone() },
                TensorRole::Bias { input, weight } => TensorQuant::Bias {
                    input: input.clone(),
                    weight: weight.clone(),
                },
                TensorRole::Weight { .. } | TensorRole::ConstantActivation => TensorQuant::Weight {
                    quant: weight_quant(recipe, name, role, graph.rank(name))?,
                    constant: *role == TensorRole::ConstantActivation,
                },
            };
            Some((
                name.clone(),
                PlannedTensor {
                    quant,
                    folded_into: None,
                },
            ))
        })
        .collect();
    // A folded Relu/Clip's input is written under the last folded output's name, with its
    // range: chains (Relu → Clip) end at the last.
    let step: HashMap<&str, (&str, &str)> = plan
        .removed
        .iter()
        .map(|(id, x, y)| (x.as_str(), (graph.node(*id).name.as_str(), y.as_str())))
        .collect();
    for (x, (node, _)) in &step {
        let mut end = *x;
        while let Some((_, next)) = step.get(end) {
            end = next;
        }
        if let Some(into) = tensors.get(end).cloned() {
            tensors.insert(
                (*x).to_owned(),
                PlannedTensor {
                    quant: into.quant,
                    folded_into: Some(((*node).to_owned(), end.to_owned())),
                },
            );
        }
    }
    tensors
}
