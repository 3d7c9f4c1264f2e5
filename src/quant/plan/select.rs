//! Which nodes the recipe selects for quantization, before any op family's rule runs: custom
//! domains, op-type lists, node patterns and the subgraph range.

use std::collections::{HashMap, HashSet};

use super::Exclusion;
use crate::model::{Graph, Node, NodeId};
use crate::recipe::{NamePattern, Recipe};

/// The recipe's node selection, compiled once per plan.
pub(super) struct Selection<'a> {
    recipe: &'a Recipe,
    op_types: Vec<&'a str>,
    /// The op type a node had in the user's model where pre-processing changed it.
    original_op_types: &'a HashMap<String, String>,
    include: Vec<NamePattern>,
    exclude: Vec<NamePattern>,
    range: Option<HashSet<NodeId>>,
}

fn patterns(texts: &[String]) -> Vec<NamePattern> {
    texts.iter().map(|s| NamePattern::new(s)).collect()
}

impl<'a> Selection<'a> {
    /// Compiles `recipe`'s lists against `graph`, whose nodes pre-processing changed had the
    /// op types `original_op_types` in the user's model.
    pub(super) fn new(
        graph: &Graph,
        recipe: &'a Recipe,
        original_op_types: &'a HashMap<String, String>,
    ) -> Self {
        Selection {
            recipe,
            op_types: super::listed_op_types(recipe),
            original_op_types,
            include: patterns(&recipe.nodes_to_quantize),
            exclude: patterns(&recipe.nodes_to_exclude),
            range: subgraph_nodes(graph, recipe),
        }
    }

    /// Why `node` is left in float by the recipe's lists, or `None` when it is selected. A node
    /// pre-processing changed (a division made a multiplication) is of both op types: listed
    /// when either is, excluded when either is.
    pub(super) fn exclusion(&self, node: &Node) -> Option<Exclusion> {
        let original = self.original_op_types.get(&node.name).map(String::as_str);
        let op_types = || std::iter::once(node.op_type.as_str()).chain(original);
        if !node.is_default_domain() {
            Some(Exclusion::CustomDomain)
        } else if op_types().any(|t| self.recipe.op_types_to_exclude.iter().any(|e| e == t)) {
            Some(Exclusion::OpTypeExcluded)
        } else if !op_types().any(|t| self.op_types.contains(&t)) {
            Some(Exclusion::OpTypeNotQuantized)
        } else if self.exclude.iter().any(|e| e.matches(&node.name)) {
            Some(Exclusion::NodeExcluded)
        } else if !self.include.is_empty() && !self.include.iter().any(|i| i.matches(&node.name)) {
            Some(Exclusion::NotSelected)
        } else if self.range.as_ref().is_some_and(|r| !r.contains(&node.id)) {
            Some(Exclusion::OutsideSubgraph)
        } else {
            None
        }
    }
}

/// Nodes between the recipe's subgraph start and end nodes (inclusive); `None` when the
/// recipe sets neither.
fn subgraph_nodes(graph: &Graph, recipe: &Recipe) -> Option<HashSet<NodeId>> {
    if recipe.subgraph_start.is_empty() && recipe.subgraph_end.is_empty() {
        return None;
    }
    let find = |texts: &[String]| -> Vec<NodeId> {
        let p = patterns(texts);
        graph
            .nodes()
            .iter()
            .filter(|n| p.iter().any(|p| p.matches(&n.name)))
            .map(|n| n.id)
            .collect()
    };
    let all: HashSet<NodeId> = graph.nodes().iter().map(|n| n.id).collect();
    let from = if recipe.subgraph_start.is_empty() {
        all.clone()
    } else {
        reachable(graph, find(&recipe.subgraph_start), true)
    };
    let to = if recipe.subgraph_end.is_empty() {
        all
    } else {
        reachable(graph, find(&recipe.subgraph_end), false)
    };
    Some(from.intersection(&to).copied().collect())
}

/// `starts` and every node reachable from them, downstream (`forward`) or upstream.
fn reachable(graph: &Graph, starts: Vec<NodeId>, forward: bool) -> HashSet<NodeId> {
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
}
