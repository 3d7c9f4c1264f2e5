//! Writes the switchable model: the float graph, each distinct Q/DQ chain once, and at every
//! place with a choice a chain of `Where(gate, alternative, …default)` nodes.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::sources::{Slot, Source, SourceKey};
use super::{Choices, GATES_INPUT};
use crate::model::builder::value_info;
use crate::model::proto::{NodeProto, TensorProto};
use crate::model::{DataType, Graph, Model, TensorArray};

/// The prefix of every name the switchable model adds.
const PREFIX: &str = "qdq_studio_switch";

/// A node of the default domain.
fn node(op: &str, name: String, inputs: Vec<String>, output: String) -> NodeProto {
    NodeProto {
        op_type: Some(op.to_owned()),
        name: Some(name),
        input: inputs,
        output: vec![output],
        ..Default::default()
    }
}

/// The nodes and initializers added, and the names already written.
struct Additions<'a> {
    sources: &'a HashMap<SourceKey, (usize, Source)>,
    /// Graph outputs whose float producer now writes another name.
    renamed: HashMap<String, String>,
    emitted: HashSet<usize>,
    nodes: Vec<NodeProto>,
    initializers: Vec<TensorProto>,
    wheres: usize,
}

impl Additions<'_> {
    /// A float tensor's name in the switchable model.
    fn float_name(&self, name: &str) -> String {
        self.renamed
            .get(name)
            .cloned()
            .unwrap_or_else(|| name.to_owned())
    }

    /// The tensor holding `key`'s source, its chain written on first use.
    fn source(&mut self, key: &SourceKey) -> String {
        let Some((id, source)) = self.sources.get(key) else {
            return String::new();
        };
        let chain = match source {
            Source::Float(name) => return self.float_name(name),
            Source::Dequantized(chain) => chain,
        };
        let output = format!("{PREFIX}_s{id}");
        if !self.emitted.insert(*id) {
            return output;
        }
        let suffix = format!("__{PREFIX}_s{id}");
        let local: HashSet<&str> = chain.initializers.iter().map(|t| t.name()).collect();
        for tensor in &chain.initializers {
            let mut copy = tensor.clone();
            copy.name = Some(format!("{}{suffix}", tensor.name()));
            self.initializers.push(copy);
        }
        let input = chain.input.as_deref().map(|n| self.float_name(n));
        let mut previous = input;
        let last = chain.nodes.len().saturating_sub(1);
        for (at, original) in chain.nodes.iter().enumerate() {
            let mut copy = original.clone();
            copy.name = Some(format!("{}{suffix}", original.name()));
            for (i, name) in copy.input.iter_mut().enumerate() {
                if local.contains(name.as_str()) {
                    *name = format!("{name}{suffix}");
                } else if i == 0
                    && let Some(previous) = &previous
                {
                    name.clone_from(previous);
                }
            }
            let written = if at == last {
                output.clone()
            } else {
                format!("{PREFIX}_s{id}_{at}")
            };
            copy.output = vec![written.clone()];
            previous = Some(written);
            self.nodes.push(copy);
        }
        output
    }

    /// The tensor a slot with `choice` reads: its default, or an alternative when that
    /// alternative's gate is on.
    fn chosen(&mut self, choice: &Choices) -> String {
        let mut current = self.source(&choice.default);
        for (key, switch) in &choice.alternatives {
            let alternative = self.source(key);
            let output = format!("{PREFIX}_where{}", self.wheres);
            self.nodes.push(node(
                "Where",
                output.clone(),
                vec![gate_name(*switch), alternative, current],
                output.clone(),
            ));
            self.wheres += 1;
            current = output;
        }
        current
    }
}

/// The scalar gate of one switch.
fn gate_name(switch: usize) -> String {
    format!("{PREFIX}_gate{switch}")
}

/// Whether a slot reads anything but its own float tensor `name`.
fn switched(choice: &Choices, sources: &HashMap<SourceKey, (usize, Source)>, name: &str) -> bool {
    !choice.alternatives.is_empty()
        || !matches!(sources.get(&choice.default), Some((_, Source::Float(n))) if n == name)
}

/// The switchable model over `base` (the prepared float model, `graph` its index).
pub(super) fn assemble(
    mut base: Model,
    graph: &Graph,
    choices: &BTreeMap<Slot, Choices>,
    sources: &HashMap<SourceKey, (usize, Source)>,
    switches: usize,
) -> Model {
    let outputs = graph.outputs();
    let renamed: HashMap<String, String> = choices
        .iter()
        .filter_map(|(slot, choice)| match slot {
            Slot::Output(at) => outputs.get(*at).filter(|n| switched(choice, sources, n)),
            Slot::Input { .. } => None,
        })
        .map(|name| (name.clone(), format!("{name}__{PREFIX}_float")))
        .collect();
    let mut additions = Additions {
        sources,
        renamed,
        emitted: HashSet::new(),
        nodes: Vec::new(),
        initializers: Vec::new(),
        wheres: 0,
    };
    for switch in 0..switches {
        let index = format!("{PREFIX}_index{switch}");
        let scalar = ndarray::arr0(switch as i64).into_dyn();
        additions
            .initializers
            .push(TensorArray::Int64(scalar).to_proto(&index));
        additions.nodes.push(node(
            "Gather",
            gate_name(switch),
            vec![GATES_INPUT.to_owned(), index],
            gate_name(switch),
        ));
    }
    let mut inputs: BTreeMap<(usize, usize), String> = BTreeMap::new();
    let mut identities = Vec::new();
    for (slot, choice) in choices {
        match *slot {
            Slot::Input { node, input } => {
                let name = &graph.node(crate::model::NodeId(node)).inputs;
                if name
                    .get(input)
                    .is_some_and(|n| switched(choice, sources, n))
                {
                    inputs.insert((node, input), additions.chosen(choice));
                }
            }
            Slot::Output(at) => {
                if let Some(name) = outputs.get(at)
                    && additions.renamed.contains_key(name)
                {
                    let chosen = additions.chosen(choice);
                    identities.push(node(
                        "Identity",
                        format!("{name}__{PREFIX}"),
                        vec![chosen],
                        name.clone(),
                    ));
                }
            }
        }
    }
    let Additions {
        renamed,
        nodes,
        initializers,
        ..
    } = additions;
    let Some(g) = base.proto_mut().graph.as_mut() else {
        return base;
    };
    for (index, n) in g.node.iter_mut().enumerate() {
        for (at, input) in n.input.iter_mut().enumerate() {
            if let Some(chosen) = inputs.get(&(index, at)) {
                input.clone_from(chosen);
            } else if let Some(new) = renamed.get(input.as_str()) {
                input.clone_from(new);
            }
        }
        for output in &mut n.output {
            if let Some(new) = renamed.get(output.as_str()) {
                output.clone_from(new);
            }
        }
    }
    g.node.extend(nodes);
    g.node.extend(identities);
    g.initializer.extend(initializers);
    g.input
        .push(value_info(GATES_INPUT, DataType::Bool, &[switches as i64]));
    sort_topologically(&mut base);
    base
}

/// Puts the nodes in an order where each comes after the producers of its inputs.
fn sort_topologically(model: &mut Model) {
    let graph = Graph::build(model);
    let order: Vec<usize> = graph.topological_order().iter().map(|id| id.0).collect();
    if let Some(g) = model.proto_mut().graph.as_mut()
        && order.len() == g.node.len()
    {
        let mut nodes: Vec<Option<NodeProto>> = g.node.drain(..).map(Some).collect();
        g.node = order.iter().filter_map(|&i| nodes[i].take()).collect();
    }
}
