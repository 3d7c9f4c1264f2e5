//! The studio's editing of a recipe against one model: the choices a user makes in the graph
//! view and panels (quantize or exclude an op type, exclude or include nodes, everything after
//! a node, subgraph start and end, a recipe loaded from a file), each one undoable step, and
//! the state every node is in under the current recipe.
//!
//! It holds no GUI types: the window calls these methods from clicks, shortcuts and menus, and
//! tests call them directly, so what a button does and what the recipe says are one thing.

use std::collections::{HashSet, VecDeque};

use crate::model::{Graph, NodeId};
use crate::quant::plan::{Exclusion, plan};
use crate::recipe::{NamePattern, Recipe};

/// How many steps undo remembers.
const UNDO_DEPTH: usize = 200;

/// What the current recipe does to one node: the colour of its box in the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeState {
    /// Will be quantized.
    Quantized,
    /// Its op type is unchecked (excluded by the recipe).
    ExcludedByOpType,
    /// Excluded by name (or not among the nodes the recipe selects).
    ExcludedByNode,
    /// Outside the subgraph start/end range.
    OutsideSubgraph,
    /// Not quantizable under the policy (op type not in the list, or a custom domain).
    NotQuantizable,
}

impl NodeState {
    fn of(exclusion: Option<&Exclusion>) -> NodeState {
        match exclusion {
            None => NodeState::Quantized,
            Some(Exclusion::OpTypeExcluded) => NodeState::ExcludedByOpType,
            Some(Exclusion::NodeExcluded | Exclusion::NotSelected) => NodeState::ExcludedByNode,
            Some(Exclusion::OutsideSubgraph) => NodeState::OutsideSubgraph,
            Some(Exclusion::OpTypeNotQuantized | Exclusion::CustomDomain) => {
                NodeState::NotQuantizable
            }
        }
    }

    /// A short label for legends and tooltips.
    pub fn label(self) -> &'static str {
        match self {
            NodeState::Quantized => "will be quantized",
            NodeState::ExcludedByOpType => "excluded by op type",
            NodeState::ExcludedByNode => "excluded by node",
            NodeState::OutsideSubgraph => "outside the subgraph",
            NodeState::NotQuantizable => "not quantizable",
        }
    }
}

/// The pattern `nodes_to_exclude` uses for exactly one node (recipes match like Python's
/// `re.match`: anchored at the start; `$` anchors the end).
pub fn exact_pattern(name: &str) -> String {
    format!("{}$", regex::escape(name))
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
}

impl Counts {
    /// Counts `states` (indexed by node id of `graph`). Constant nodes are left out: the view
    /// folds them into their consumers and they are never quantized as nodes, so counting
    /// them would drown the numbers users act on.
    pub fn of(states: &[NodeState], graph: &Graph) -> Counts {
        let mut c = Counts::default();
        for (state, _) in states
            .iter()
            .zip(graph.nodes())
            .filter(|(_, n)| n.op_type != "Constant")
        {
            match state {
                NodeState::Quantized => c.quantized += 1,
                NodeState::NotQuantizable => c.not_quantizable += 1,
                _ => c.excluded += 1,
            }
        }
        c
    }
}

/// A recipe being edited, with undo and redo.
#[derive(Debug, Clone, Default)]
pub struct RecipeEditor {
    recipe: Recipe,
    undo: VecDeque<Recipe>,
    redo: Vec<Recipe>,
}

impl RecipeEditor {
    /// Starts editing `recipe`.
    pub fn new(recipe: Recipe) -> Self {
        RecipeEditor {
            recipe,
            undo: VecDeque::new(),
            redo: Vec::new(),
        }
    }

    /// The current recipe.
    pub fn recipe(&self) -> &Recipe {
        &self.recipe
    }

    /// Applies `change` as one undoable step; a change that changes nothing is not recorded.
    fn step(&mut self, change: impl FnOnce(&mut Recipe)) -> bool {
        let before = self.recipe.clone();
        change(&mut self.recipe);
        if self.recipe == before {
            return false;
        }
        self.undo.push_back(before);
        if self.undo.len() > UNDO_DEPTH {
            self.undo.pop_front();
        }
        self.redo.clear();
        true
    }

    /// Takes back the last step. False when there is nothing to undo.
    pub fn undo(&mut self) -> bool {
        match self.undo.pop_back() {
            Some(previous) => {
                self.redo
                    .push(std::mem::replace(&mut self.recipe, previous));
                true
            }
            None => false,
        }
    }

    /// Re-applies the last undone step. False when there is nothing to redo.
    pub fn redo(&mut self) -> bool {
        match self.redo.pop() {
            Some(next) => {
                self.undo
                    .push_back(std::mem::replace(&mut self.recipe, next));
                true
            }
            None => false,
        }
    }

    /// Whether [`RecipeEditor::undo`] would do something.
    pub fn can_undo(&self) -> bool {
        !self.undo.is_empty()
    }

    /// Whether [`RecipeEditor::redo`] would do something.
    pub fn can_redo(&self) -> bool {
        !self.redo.is_empty()
    }

    /// Any other change to the recipe (method, tensor overrides) as one undoable step; false
    /// when it changed nothing.
    pub fn change(&mut self, change: impl FnOnce(&mut Recipe)) -> bool {
        self.step(change)
    }

    /// True when the recipe was changed since editing started (undo history present).
    pub fn edited(&self) -> bool {
        !self.undo.is_empty() || !self.redo.is_empty()
    }

    /// Replaces the whole recipe (File ▸ Load recipe) as one undoable step.
    pub fn replace(&mut self, recipe: Recipe) -> bool {
        self.step(|r| *r = recipe)
    }

    /// Checks or unchecks an op type. Checking removes it from the excluded types and, when
    /// the recipe lists the types to quantize explicitly, adds it there.
    pub fn set_op_type(&mut self, op_type: &str, quantize: bool) -> bool {
        self.step(|r| {
            if quantize {
                r.op_types_to_exclude.retain(|t| t != op_type);
                let defaults = crate::quant::plan::default_op_types(r);
                if r.op_types_to_quantize.is_empty() && !defaults.contains(&op_type) {
                    // A type outside the policy's defaults: the recipe now lists its types.
                    r.op_types_to_quantize = defaults.iter().map(|t| (*t).to_owned()).collect();
                }
                if !r.op_types_to_quantize.is_empty()
                    && !r.op_types_to_quantize.iter().any(|t| t == op_type)
                {
                    r.op_types_to_quantize.push(op_type.to_owned());
                }
            } else if !r.op_types_to_exclude.iter().any(|t| t == op_type) {
                r.op_types_to_exclude.push(op_type.to_owned());
            }
        })
    }

    /// Excludes (`true`) or includes again (`false`) the named nodes, as one step. Including
    /// removes the exact patterns the studio wrote; a user's own regex is left alone (the node
    /// then stays excluded, and its state says so).
    pub fn set_nodes_excluded(&mut self, names: &[&str], excluded: bool) -> bool {
        self.step(|r| {
            for name in names {
                let pattern = exact_pattern(name);
                if excluded {
                    if !r.nodes_to_exclude.contains(&pattern) {
                        r.nodes_to_exclude.push(pattern);
                    }
                } else {
                    r.nodes_to_exclude.retain(|p| p != &pattern);
                }
            }
        })
    }

    /// The X key: excludes the nodes unless all of them are excluded by name already, in
    /// which case it includes them again.
    pub fn toggle_nodes(&mut self, names: &[&str]) -> bool {
        let all_excluded = !names.is_empty()
            && names.iter().all(|n| {
                self.recipe
                    .nodes_to_exclude
                    .iter()
                    .any(|p| NamePattern::new(p).matches(n))
            });
        self.set_nodes_excluded(names, !all_excluded)
    }

    /// Excludes `node` and everything downstream of it (an output head), as one step.
    pub fn exclude_after(&mut self, graph: &Graph, node: NodeId) -> bool {
        let names: Vec<String> = descendants(graph, node)
            .into_iter()
            .map(|id| graph.node(id).name.clone())
            .collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        self.set_nodes_excluded(&refs, true)
    }

    /// Sets the subgraph's first node (`None` clears it).
    pub fn set_subgraph_start(&mut self, name: Option<&str>) -> bool {
        self.step(|r| r.subgraph_start = name.map(exact_pattern).into_iter().collect())
    }

    /// Sets the subgraph's last node (`None` clears it).
    pub fn set_subgraph_end(&mut self, name: Option<&str>) -> bool {
        self.step(|r| r.subgraph_end = name.map(exact_pattern).into_iter().collect())
    }

    /// The state of every node of `graph` (indexed by node id) under the current recipe.
    pub fn states(&self, graph: &Graph) -> Vec<NodeState> {
        // Float-ness of tensors without a declared type is only known after calibration;
        // before it the node-level decision is what the studio shows.
        let plan = plan(graph, &self.recipe, &HashSet::new(), &|_| None);
        (0..graph.nodes().len())
            .map(|i| NodeState::of(plan.excluded.get(&NodeId(i))))
            .collect()
    }

    /// Counts of [`RecipeEditor::states`] (see [`Counts::of`]).
    pub fn counts(&self, graph: &Graph) -> Counts {
        Counts::of(&self.states(graph), graph)
    }

    /// The op types of `graph` with their node counts and whether each is checked (not
    /// excluded and, when the recipe lists types, listed), sorted by name.
    pub fn op_types(&self, graph: &Graph) -> Vec<(String, usize, bool)> {
        let defaults = crate::quant::plan::default_op_types(&self.recipe);
        graph
            .op_type_counts()
            .into_iter()
            .map(|(t, count)| {
                let listed = if self.recipe.op_types_to_quantize.is_empty() {
                    defaults.contains(&t.as_str())
                } else {
                    self.recipe.op_types_to_quantize.contains(&t)
                };
                let checked = listed && !self.recipe.op_types_to_exclude.contains(&t);
                (t, count, checked)
            })
            .collect()
    }
}

/// `node` and every node that reads, directly or not, one of its outputs.
pub fn descendants(graph: &Graph, node: NodeId) -> Vec<NodeId> {
    let mut seen = HashSet::from([node]);
    let mut queue = VecDeque::from([node]);
    let mut out = Vec::new();
    while let Some(id) = queue.pop_front() {
        out.push(id);
        for output in &graph.node(id).outputs {
            for &consumer in graph.tensor(output).map_or(&[][..], |t| &t.consumers[..]) {
                if seen.insert(consumer) {
                    queue.push_back(consumer);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DataType, Model, ModelBuilder};

    /// x → Conv(a) → Relu(r) → Conv(b) → Softmax(s)
    fn model() -> Model {
        let w = crate::model::TensorArray::Float32(ndarray::ArrayD::zeros(ndarray::IxDyn(&[
            2, 2, 1, 1,
        ])));
        let mut b = ModelBuilder::new(17);
        b.input("x", DataType::Float32, &[1, 2, 4, 4]);
        b.initializer("wa", w.clone());
        b.initializer("wb", w);
        b.node("Conv", &["x", "wa"], &["a"]).name("conv_a");
        b.node("Relu", &["a"], &["r"]).name("relu");
        b.node("Conv", &["r", "wb"], &["b"]).name("conv_b");
        b.node("Softmax", &["b"], &["y"]).name("softmax");
        b.output("y", DataType::Float32, &[1, 2, 4, 4]);
        b.build()
    }

    fn state_of(editor: &RecipeEditor, graph: &Graph, name: &str) -> NodeState {
        let id = (0..graph.nodes().len())
            .map(NodeId)
            .find(|&id| graph.node(id).name == name)
            .unwrap();
        editor.states(graph)[id.0]
    }

    #[test]
    fn op_types_nodes_undo_and_redo_edit_the_recipe() {
        let graph = Graph::build(&model());
        let mut e = RecipeEditor::new(Recipe::default());
        assert_eq!(state_of(&e, &graph, "conv_a"), NodeState::Quantized);
        let conv = e
            .op_types(&graph)
            .into_iter()
            .find(|t| t.0 == "Conv")
            .unwrap();
        assert_eq!(conv, ("Conv".to_owned(), 2, true));

        assert!(e.set_op_type("Conv", false));
        assert_eq!(e.recipe().op_types_to_exclude, ["Conv"]);
        assert_eq!(state_of(&e, &graph, "conv_b"), NodeState::ExcludedByOpType);
        assert!(!e.set_op_type("Conv", false), "no change, no step");

        assert!(e.undo());
        assert!(e.recipe().op_types_to_exclude.is_empty());
        assert!(e.redo());
        assert_eq!(e.recipe().op_types_to_exclude, ["Conv"]);
        assert!(e.set_op_type("Conv", true));

        assert!(e.toggle_nodes(&["conv_b"]));
        assert_eq!(e.recipe().nodes_to_exclude, ["conv_b$"]);
        assert_eq!(state_of(&e, &graph, "conv_b"), NodeState::ExcludedByNode);
        assert!(e.toggle_nodes(&["conv_b"]), "X again includes it");
        assert!(e.recipe().nodes_to_exclude.is_empty());
        assert!(e.undo());
        assert_eq!(e.recipe().nodes_to_exclude, ["conv_b$"]);
        assert!(!e.can_redo() || e.redo());
    }

    #[test]
    fn exclude_after_takes_the_head_and_counts_follow() {
        let graph = Graph::build(&model());
        let mut e = RecipeEditor::new(Recipe::default());
        let before = e.counts(&graph);
        let relu = (0..graph.nodes().len())
            .map(NodeId)
            .find(|&id| graph.node(id).name == "relu")
            .unwrap();
        assert!(e.exclude_after(&graph, relu));
        assert_eq!(
            e.recipe().nodes_to_exclude,
            ["relu$", "conv_b$", "softmax$"]
        );
        assert_eq!(state_of(&e, &graph, "conv_a"), NodeState::Quantized);
        let after = e.counts(&graph);
        assert!(after.quantized < before.quantized, "{before:?} {after:?}");
        assert_eq!(
            after.quantized + after.excluded + after.not_quantizable,
            graph.nodes().len()
        );
        // One step undoes the whole head.
        assert!(e.undo());
        assert_eq!(e.counts(&graph), before);
    }

    #[test]
    fn subgraph_ends_and_loaded_recipes_are_steps_too() {
        let graph = Graph::build(&model());
        let mut e = RecipeEditor::new(Recipe::default());
        assert!(e.set_subgraph_start(Some("conv_b")));
        assert_eq!(state_of(&e, &graph, "conv_a"), NodeState::OutsideSubgraph);
        let loaded = Recipe {
            per_channel: false,
            ..Recipe::default()
        };
        assert!(e.replace(loaded.clone()));
        assert_eq!(e.recipe(), &loaded);
        assert!(e.undo());
        assert_eq!(e.recipe().subgraph_start, ["conv_b$"]);
        // Names with regex characters are escaped.
        assert_eq!(exact_pattern("a.b(1)"), "a\\.b\\(1\\)$");
    }
}
