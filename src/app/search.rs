//! Find in graph (Ctrl+F): nodes by name, op type or the tensors they read and write, with
//! next and previous.

use crate::app::layout::GraphLayout;
use crate::model::{Graph, NodeId};

/// The search bar's state.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Search {
    /// Whether the bar is shown.
    pub open: bool,
    /// What the user typed.
    pub query: String,
    /// The nodes that match, in graph order.
    pub matches: Vec<NodeId>,
    /// Index of the match the view is on.
    pub position: usize,
}

impl Search {
    /// Runs `query` against the nodes of `graph` drawn in `layout`; the first match becomes
    /// current.
    pub fn set_query(&mut self, graph: &Graph, layout: &GraphLayout, query: &str) {
        query.clone_into(&mut self.query);
        let drawn = |id: NodeId| layout.positions.get(id.0).is_some_and(Option::is_some);
        self.matches = find(graph, query, &drawn);
        self.position = 0;
    }

    /// The match the view is on.
    pub fn current(&self) -> Option<NodeId> {
        self.matches.get(self.position).copied()
    }

    /// Moves to the next match (wrapping) and returns it.
    pub fn next_match(&mut self) -> Option<NodeId> {
        if self.matches.is_empty() {
            return None;
        }
        self.position = (self.position + 1) % self.matches.len();
        self.current()
    }

    /// Moves to the previous match (wrapping) and returns it.
    pub fn previous_match(&mut self) -> Option<NodeId> {
        if self.matches.is_empty() {
            return None;
        }
        self.position = (self.position + self.matches.len() - 1) % self.matches.len();
        self.current()
    }

    /// Closes the bar and forgets the matches.
    pub fn close(&mut self) {
        *self = Search::default();
    }
}

/// The `drawn` nodes matching `query` (case-insensitive), in topological order: the op type
/// equal to it, or the name or one of its input/output tensor names containing it. Exact name
/// matches come first, so typing a full node name lands on that node. Nodes the view folds
/// away (Constants, Q/DQ pairs) cannot be shown, so they are not matches.
pub fn find(graph: &Graph, query: &str, drawn: &dyn Fn(NodeId) -> bool) -> Vec<NodeId> {
    let q = query.trim().to_lowercase();
    if q.is_empty() {
        return Vec::new();
    }
    let order: Vec<NodeId> = if graph.topological_order().len() == graph.nodes().len() {
        graph.topological_order().to_vec()
    } else {
        graph.nodes().iter().map(|n| n.id).collect()
    };
    let mut exact = Vec::new();
    let mut others = Vec::new();
    for id in order {
        if !drawn(id) {
            continue;
        }
        let node = graph.node(id);
        let name = node.name.to_lowercase();
        if name == q {
            exact.push(id);
        } else if node.op_type.to_lowercase() == q
            || name.contains(&q)
            || node
                .inputs
                .iter()
                .chain(&node.outputs)
                .any(|t| !t.is_empty() && t.to_lowercase().contains(&q))
        {
            others.push(id);
        }
    }
    exact.extend(others);
    exact
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DataType, ModelBuilder};

    #[test]
    fn finds_by_name_op_type_and_tensor_and_cycles_through_matches() {
        let mut b = ModelBuilder::new(17);
        b.input("x", DataType::Float32, &[1, 4]);
        b.node("Relu", &["x"], &["features"]).name("stem_relu");
        b.node("Sigmoid", &["features"], &["gate"]).name("gate_act");
        b.node("Relu", &["gate"], &["y"]).name("head_relu");
        b.output("y", DataType::Float32, &[1, 4]);
        let graph = Graph::build(&b.build());
        let drawn = |_: NodeId| true;
        let names = |ids: Vec<NodeId>| -> Vec<String> {
            ids.into_iter()
                .map(|i| graph.node(i).name.clone())
                .collect()
        };
        assert_eq!(
            names(find(&graph, "relu", &drawn)),
            ["stem_relu", "head_relu"]
        );
        assert_eq!(names(find(&graph, "SIGMOID", &drawn)), ["gate_act"]);
        assert_eq!(
            names(find(&graph, "features", &drawn)),
            ["stem_relu", "gate_act"],
            "producer and consumer of the tensor"
        );
        assert_eq!(names(find(&graph, "head_relu", &drawn)), ["head_relu"]);
        assert!(find(&graph, "  ", &drawn).is_empty());
        assert!(
            find(&graph, "SIGMOID", &|_| false).is_empty(),
            "a node the view does not draw is no match"
        );
        let layout = crate::app::layout::layout(&graph, &Default::default(), &[]).unwrap();
        let mut s = Search::default();
        s.set_query(&graph, &layout, "relu");
        assert_eq!(s.current(), Some(NodeId(0)));
        assert_eq!(s.next_match(), Some(NodeId(2)));
        assert_eq!(s.next_match(), Some(NodeId(0)), "wraps");
        assert_eq!(s.previous_match(), Some(NodeId(2)));
    }
}
