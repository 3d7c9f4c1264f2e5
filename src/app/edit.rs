//! The studio's editing of a recipe against one model: the choices a user makes in the graph
//! view and panels (quantize or exclude an op type, exclude or include nodes, everything after
//! a node, subgraph start and end, a recipe loaded from a file), each one undoable step, and
//! the state every node is in under the current recipe.
//!
//! It holds no GUI types: the window calls these methods from clicks, shortcuts and menus, and
//! tests call them directly, so what a button does and what the recipe says are one thing.
//! What the edited recipe then does to each node is the quantizer's plan
//! ([`crate::quant::explain`], shown through [`crate::app::states`]).

use std::collections::{HashSet, VecDeque};

use crate::model::{Graph, NodeId};
use crate::recipe::{NamePattern, NodePrecision, Recipe};

/// How many steps undo remembers.
const UNDO_DEPTH: usize = 200;

/// The pattern `nodes_to_exclude` uses for exactly one node (recipes match like Python's
/// `re.match`: anchored at the start; `$` anchors the end).
pub fn exact_pattern(name: &str) -> String {
    format!("{}$", regex::escape(name))
}

/// A recipe being edited, with undo and redo.
#[derive(Debug, Clone, Default)]
pub struct RecipeEditor {
    recipe: Recipe,
    undo: VecDeque<Recipe>,
    redo: Vec<Recipe>,
    /// Why the last change was refused (it contradicted the recipe's target), until read.
    refused: Option<String>,
}

impl RecipeEditor {
    /// Starts editing `recipe`.
    pub fn new(recipe: Recipe) -> Self {
        RecipeEditor {
            recipe,
            undo: VecDeque::new(),
            redo: Vec::new(),
            refused: None,
        }
    }

    /// The current recipe.
    pub fn recipe(&self) -> &Recipe {
        &self.recipe
    }

    /// Applies `change` as one undoable step; a change that changes nothing is not recorded,
    /// and one that makes the recipe contradict its target is taken back, with the reason
    /// kept for [`RecipeEditor::take_refusal`].
    fn step(&mut self, change: impl FnOnce(&mut Recipe)) -> bool {
        let before = self.recipe.clone();
        change(&mut self.recipe);
        if self.recipe == before {
            return false;
        }
        let contradictions = self.recipe.target_contradictions();
        if let Some(first) = contradictions.first()
            && before.target_contradictions().is_empty()
        {
            self.refused = Some(first.message.clone());
            self.recipe = before;
            return false;
        }
        self.undo.push_back(before);
        if self.undo.len() > UNDO_DEPTH {
            self.undo.pop_front();
        }
        self.redo.clear();
        true
    }

    /// Why the last change was refused, once: the faces show it.
    pub fn take_refusal(&mut self) -> Option<String> {
        self.refused.take()
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

    /// Turns automatic precision (masks and normalized streams kept in float) on or off.
    pub fn set_auto_precision(&mut self, on: bool) -> bool {
        self.step(|r| r.auto_precision = on)
    }

    /// Checks or unchecks an op type. Checking removes it from the excluded types and, when
    /// the recipe lists the types to quantize explicitly, adds it there; when it must start
    /// listing them, it lists the placement's defaults that the model has (`model_types`, its
    /// op types: `quantize` refuses a listed type the model lacks).
    pub fn set_op_type(&mut self, op_type: &str, quantize: bool, model_types: &[&str]) -> bool {
        self.step(|r| {
            if quantize {
                let was_excluded = r.op_types_to_exclude.iter().any(|t| t == op_type);
                r.op_types_to_exclude.retain(|t| t != op_type);
                let defaults = crate::quant::plan::default_op_types(r);
                // A type outside the policy's defaults, or a listed one the placement leaves
                // float (a transformer's elementwise ops under a target, shown unselected):
                // the recipe now lists its types, which quantizes them.
                let unlisted = !defaults.contains(&op_type) || !was_excluded;
                if r.op_types_to_quantize.is_empty() && unlisted {
                    r.op_types_to_quantize = defaults
                        .iter()
                        .filter(|t| model_types.contains(t))
                        .map(|t| (*t).to_owned())
                        .collect();
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

    /// Gives the named nodes `precision` (`None`: the recipe's own 8 bits again), as one step.
    pub fn set_nodes_precision(
        &mut self,
        names: &[&str],
        precision: Option<NodePrecision>,
    ) -> bool {
        self.step(|r| {
            for name in names {
                match precision {
                    Some(p) => {
                        r.node_precision.insert((*name).to_owned(), p);
                    }
                    None => {
                        r.node_precision.remove(*name);
                    }
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
    use crate::app::states::{Counts, NodeState, node_states};
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

    fn states(editor: &RecipeEditor, model: &Model) -> Vec<NodeState> {
        let plan = crate::quant::explain(model, editor.recipe(), None).unwrap();
        node_states(&Graph::build(model), &plan)
    }

    fn state_of(editor: &RecipeEditor, model: &Model, name: &str) -> NodeState {
        let graph = Graph::build(model);
        let id = graph.node_by_name(name).unwrap().id;
        states(editor, model)[id.0]
    }

    fn counts(editor: &RecipeEditor, model: &Model) -> Counts {
        Counts::of(
            &states(editor, model),
            &Graph::build(model),
            &Default::default(),
        )
    }

    #[test]
    fn op_types_nodes_undo_and_redo_edit_the_recipe() {
        let model = model();
        let mut e = RecipeEditor::new(Recipe::default());
        assert_eq!(state_of(&e, &model, "conv_a"), NodeState::Quantized);
        let plan = crate::quant::explain(&model, e.recipe(), None).unwrap();
        let conv = plan.op_types["Conv"];
        assert_eq!((conv.count, conv.quantized, conv.selected), (2, 2, true));

        assert!(e.set_op_type("Conv", false, &["Conv"]));
        assert_eq!(e.recipe().op_types_to_exclude, ["Conv"]);
        assert_eq!(state_of(&e, &model, "conv_b"), NodeState::ExcludedByOpType);
        assert!(
            !e.set_op_type("Conv", false, &["Conv"]),
            "no change, no step"
        );

        assert!(e.undo());
        assert!(e.recipe().op_types_to_exclude.is_empty());
        assert!(e.redo());
        assert_eq!(e.recipe().op_types_to_exclude, ["Conv"]);
        assert!(e.set_op_type("Conv", true, &["Conv"]));

        assert!(e.toggle_nodes(&["conv_b"]));
        assert_eq!(e.recipe().nodes_to_exclude, ["conv_b$"]);
        assert_eq!(state_of(&e, &model, "conv_b"), NodeState::ExcludedByNode);
        assert!(e.toggle_nodes(&["conv_b"]), "X again includes it");
        assert!(e.recipe().nodes_to_exclude.is_empty());
        assert!(e.undo());
        assert_eq!(e.recipe().nodes_to_exclude, ["conv_b$"]);
        assert!(!e.can_redo() || e.redo());
    }

    #[test]
    fn exclude_after_takes_the_head_and_counts_follow() {
        let model = model();
        let graph = Graph::build(&model);
        let mut e = RecipeEditor::new(Recipe::default());
        let before = counts(&e, &model);
        let relu = graph.node_by_name("relu").unwrap().id;
        assert!(e.exclude_after(&graph, relu));
        assert_eq!(
            e.recipe().nodes_to_exclude,
            ["relu$", "conv_b$", "softmax$"]
        );
        assert_eq!(state_of(&e, &model, "conv_a"), NodeState::Quantized);
        let after = counts(&e, &model);
        assert!(after.quantized < before.quantized, "{before:?} {after:?}");
        assert_eq!(
            after.quantized + after.excluded + after.not_quantizable + after.folded,
            graph.nodes().len()
        );
        // One step undoes the whole head.
        assert!(e.undo());
        assert_eq!(counts(&e, &model), before);
    }

    #[test]
    fn subgraph_ends_and_loaded_recipes_are_steps_too() {
        let model = model();
        let mut e = RecipeEditor::new(Recipe::default());
        assert!(e.set_subgraph_start(Some("conv_b")));
        assert_eq!(state_of(&e, &model, "conv_a"), NodeState::OutsideSubgraph);
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
