//! What the quantizer's plan ([`crate::quant::Explanation`]) says about each node, as the graph
//! view colours it and the recipe panel counts it. Nothing here decides anything: the states
//! are read off the plan.

use crate::model::Graph;
use crate::model::ops;
use crate::model::qdq::QdqStructure;
use crate::quant::explain::{Explanation, NodeDecision};
use crate::quant::plan::Exclusion;
use crate::recipe::NodePrecision;

/// What the current recipe does to one node: the colour of its box in the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeState {
    /// Will be quantized.
    Quantized,
    /// Will be quantized with 16-bit activations (`w8a16`).
    Quantized16,
    /// Will be quantized with a 4-bit weight (`w4a8`).
    QuantizedW4,
    /// Its op type is unchecked (excluded by the recipe).
    ExcludedByOpType,
    /// Excluded by name (or not among the nodes the recipe selects).
    ExcludedByNode,
    /// Outside the subgraph start/end range.
    OutsideSubgraph,
    /// Not quantizable under the policy (op type not in the list, nothing to quantize on it,
    /// or a custom domain).
    NotQuantizable,
    /// Removed by the quantizer's pre-processing (a folded BatchNormalization, an Identity,
    /// a Constant that became an initializer).
    Folded,
    /// Selected, but every tensor it would quantize stays float (automatic precision or the
    /// recipe's `keep_float` overrides).
    KeptFloat,
    /// In a model that is quantized already: the node computes on quantized values (it reads
    /// a dequantized tensor, or is an integer op).
    QuantizedInModel,
    /// In a model that is quantized already: the node computes in float.
    FloatInModel,
}

impl NodeState {
    /// The state a plan decision shows as, for a node of `precision` (the recipe's
    /// `node_precision`, when it has one).
    pub fn of(decision: Option<&NodeDecision>, precision: Option<NodePrecision>) -> NodeState {
        match decision {
            Some(NodeDecision::Quantized) => match precision {
                None => NodeState::Quantized,
                Some(NodePrecision::W8a16) => NodeState::Quantized16,
                Some(NodePrecision::W4a8) => NodeState::QuantizedW4,
            },
            Some(NodeDecision::Excluded(Exclusion::OpTypeExcluded)) => NodeState::ExcludedByOpType,
            Some(NodeDecision::Excluded(Exclusion::NodeExcluded | Exclusion::NotSelected)) => {
                NodeState::ExcludedByNode
            }
            Some(NodeDecision::Excluded(Exclusion::OutsideSubgraph)) => NodeState::OutsideSubgraph,
            Some(NodeDecision::Folded(_)) => NodeState::Folded,
            Some(NodeDecision::Excluded(
                Exclusion::TensorsKeptFloat
                | Exclusion::OutlierRowsPath
                | Exclusion::FloatInTransformer,
            )) => NodeState::KeptFloat,
            Some(NodeDecision::Excluded(
                Exclusion::OpTypeNotQuantized | Exclusion::CustomDomain,
            ))
            | None => NodeState::NotQuantizable,
        }
    }

    /// A short label for legends and tooltips.
    pub fn label(self) -> &'static str {
        match self {
            NodeState::Quantized => "will be quantized",
            NodeState::Quantized16 => "16-bit activations (w8a16)",
            NodeState::QuantizedW4 => "4-bit weight (w4a8)",
            NodeState::ExcludedByOpType => "excluded by op type",
            NodeState::ExcludedByNode => "excluded by node",
            NodeState::OutsideSubgraph => "outside the subgraph",
            NodeState::NotQuantizable => "not quantizable",
            NodeState::Folded => "folded by pre-processing",
            NodeState::KeptFloat => "kept in float (its tensors stay float)",
            NodeState::QuantizedInModel => "quantized in this model",
            NodeState::FloatInModel => "float in this model",
        }
    }

    /// True for the states a user can change by excluding or including the node.
    pub fn excludable(self) -> bool {
        self.quantized()
            || matches!(
                self,
                NodeState::ExcludedByNode | NodeState::ExcludedByOpType
            )
    }

    /// True for the states of nodes the recipe quantizes (at any precision).
    pub fn quantized(self) -> bool {
        matches!(
            self,
            NodeState::Quantized | NodeState::Quantized16 | NodeState::QuantizedW4
        )
    }
}

/// The state of every node of `graph` (indexed by node id) under `plan`.
pub fn node_states(graph: &Graph, plan: &Explanation) -> Vec<NodeState> {
    graph
        .nodes()
        .iter()
        .map(|n| {
            NodeState::of(
                plan.node(&n.name),
                plan.node_precision.get(&n.name).copied(),
            )
        })
        .collect()
}

/// The state of every node of a model that is quantized already, read off its Q/DQ structure.
pub fn quantized_states(graph: &Graph, qdq: &QdqStructure) -> Vec<NodeState> {
    graph
        .nodes()
        .iter()
        .map(|n| {
            if qdq.runs_quantized(n) {
                NodeState::QuantizedInModel
            } else {
                NodeState::FloatInModel
            }
        })
        .collect()
}

/// Node counts under the current recipe, for the always-visible summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Nodes that will be quantized.
    pub quantized: usize,
    /// Nodes the recipe excludes (by op type, by node, or outside the subgraph).
    pub excluded: usize,
    /// Nodes the policy cannot quantize.
    pub not_quantizable: usize,
    /// Nodes pre-processing removes (Constant nodes left out, see [`Counts::of`]).
    pub folded: usize,
    /// Selected nodes whose tensors all stay float (automatic precision, `keep_float`).
    pub kept_float: usize,
}

impl Counts {
    /// Counts `states` (indexed by node id of `graph`). Constant nodes and the Q/DQ pairs of
    /// `qdq` are left out: the view folds them into edges and boxes and they are never
    /// quantized as nodes, so counting them would drown the numbers users act on.
    pub fn of(states: &[NodeState], graph: &Graph, qdq: &QdqStructure) -> Counts {
        let mut c = Counts::default();
        for (state, _) in states
            .iter()
            .zip(graph.nodes())
            .filter(|(_, n)| n.op_type != ops::CONSTANT && !qdq.is_folded(n.id))
        {
            match state {
                s if s.quantized() || *s == NodeState::QuantizedInModel => c.quantized += 1,
                NodeState::NotQuantizable | NodeState::FloatInModel => c.not_quantizable += 1,
                NodeState::Folded => c.folded += 1,
                NodeState::KeptFloat => c.kept_float += 1,
                _ => c.excluded += 1,
            }
        }
        c
    }
}
