//! Writes the switchable model: the float graph and, at every place with a choice, a nest of
//! `If(gate)` nodes whose branches compute one choice each (its Q/DQ chain, or the float
//! tensor as it is). Only the chosen branch runs, so a run costs about what the chosen
//! variant's own model costs; a `Where` over every choice would compute them all and copy
//! element by element (measured: most of a run's time on the bundled sample; PP-OCR rec, 48
//! nodes: 2.2 times slower on 2 cores, and no faster on CUDA, 68 s against 55 s on an H200).

use std::collections::{BTreeMap, HashMap, HashSet};

use super::Choices;
use super::sources::{Slot, Source, SourceKey};
use crate::model::builder::value_info;
use crate::model::proto::attribute_proto::AttributeType;
use crate::model::proto::{AttributeProto, GraphProto, NodeProto, TensorProto, ValueInfoProto};
use crate::model::{DataType, Graph, Model};

/// The prefix of every name the switchable model adds.
const PREFIX: &str = "qdq_studio_switch";

/// A node of the default domain with one output.
fn node(op: &str, name: String, inputs: Vec<String>, output: String) -> NodeProto {
    NodeProto {
        op_type: Some(op.to_owned()),
        name: Some(name),
        input: inputs,
        output: vec![output],
        ..Default::default()
    }
}

/// A graph-valued attribute.
fn graph_attribute(name: &str, graph: GraphProto) -> AttributeProto {
    AttributeProto {
        name: Some(name.to_owned()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(graph),
        ..Default::default()
    }
}

/// The scalar gate of one switch.
pub(super) fn gate_name(switch: usize) -> String {
    format!("{PREFIX}_gate{switch}")
}

/// What the assembly adds, and the counters that keep its names unique.
struct Additions<'a> {
    sources: &'a HashMap<SourceKey, (usize, Source)>,
    /// Graph outputs whose float producer now writes another name.
    renamed: HashMap<String, String>,
    /// Sources whose initializers are already in the graph.
    stored: HashSet<usize>,
    initializers: Vec<TensorProto>,
    /// Names made so far (each branch and node gets a fresh one).
    made: usize,
}

impl Additions<'_> {
    /// A float tensor's name in the switchable model.
    fn float_name(&self, name: &str) -> String {
        self.renamed
            .get(name)
            .cloned()
            .unwrap_or_else(|| name.to_owned())
    }

    fn fresh(&mut self, what: &str) -> String {
        self.made += 1;
        format!("{PREFIX}_{what}{}", self.made)
    }

    /// The nodes computing `key`'s source into a fresh tensor, and that tensor. Its
    /// initializers go to the main graph once (branches read them from the outer scope).
    fn compute(&mut self, key: &SourceKey) -> (Vec<NodeProto>, String) {
        let output = self.fresh("v");
        let Some((id, source)) = self.sources.get(key) else {
            return (Vec::new(), output);
        };
        let chain = match source {
            Source::Float(name) => {
                let copy = node(
                    "Identity",
                    output.clone(),
                    vec![self.float_name(name)],
                    output.clone(),
                );
                return (vec![copy], output);
            }
            Source::Dequantized(chain) => chain,
        };
        let suffix = format!("__{PREFIX}_s{id}");
        if self.stored.insert(*id) {
            for tensor in &chain.initializers {
                let mut copy = tensor.clone();
                copy.name = Some(format!("{}{suffix}", tensor.name()));
                self.initializers.push(copy);
            }
        }
        let local: HashSet<&str> = chain.initializers.iter().map(|t| t.name()).collect();
        let mut previous = chain.input.as_deref().map(|n| self.float_name(n));
        let last = chain.nodes.len().saturating_sub(1);
        let mut nodes = Vec::with_capacity(chain.nodes.len());
        for (at, original) in chain.nodes.iter().enumerate() {
            let mut copy = original.clone();
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
                self.fresh("q")
            };
            copy.name = Some(written.clone());
            copy.output = vec![written.clone()];
            previous = Some(written);
            nodes.push(copy);
        }
        (nodes, output)
    }

    /// A branch graph computing `key`'s source as its one output of type `elem`.
    fn branch(&mut self, key: &SourceKey, elem: DataType) -> GraphProto {
        let (nodes, output) = self.compute(key);
        self.branch_of(nodes, output, elem)
    }

    fn branch_of(&mut self, nodes: Vec<NodeProto>, output: String, elem: DataType) -> GraphProto {
        GraphProto {
            name: Some(self.fresh("branch")),
            node: nodes,
            output: vec![untyped_shape(&output, elem)],
            ..Default::default()
        }
    }

    /// The nodes that give a slot with `choice` its tensor, and that tensor: the default's
    /// computation when nothing can switch, else a nest of `If(gate)` nodes, the first
    /// alternative outermost and the default innermost.
    fn chosen(&mut self, choice: &Choices, elem: DataType) -> (Vec<NodeProto>, String) {
        if choice.alternatives.is_empty() {
            return self.compute(&choice.default);
        }
        let mut inner = self.branch(&choice.default, elem);
        let mut outermost = None;
        for (at, (key, switch)) in choice.alternatives.iter().enumerate().rev() {
            let then = self.branch(key, elem);
            let output = self.fresh("if");
            let mut choose = node(
                "If",
                output.clone(),
                vec![gate_name(*switch)],
                output.clone(),
            );
            choose.attribute = vec![
                graph_attribute("then_branch", then),
                graph_attribute("else_branch", inner),
            ];
            if at == 0 {
                outermost = Some((vec![choose], output));
                break;
            }
            inner = self.branch_of(vec![choose], output, elem);
        }
        outermost.unwrap_or_default()
    }
}

/// A value-info with an element type and no shape (branch outputs vary with the data).
fn untyped_shape(name: &str, elem: DataType) -> ValueInfoProto {
    let mut info = value_info(name, elem, &[]);
    if let Some(crate::model::proto::type_proto::Value::TensorType(t)) =
        info.r#type.as_mut().and_then(|t| t.value.as_mut())
    {
        t.shape = None;
    }
    info
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
    let types = crate::model::infer::elem_types(&base, graph);
    let elem = |name: &str| {
        types
            .get(name)
            .and_then(|code| DataType::from_onnx(*code).ok())
            .unwrap_or(DataType::Float32)
    };
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
        stored: HashSet::new(),
        initializers: Vec::new(),
        made: 0,
    };
    let mut nodes = Vec::new();
    let mut inputs: BTreeMap<(usize, usize), String> = BTreeMap::new();
    for (slot, choice) in choices {
        match *slot {
            Slot::Input { node: at, input } => {
                let Some(name) = graph.node(crate::model::NodeId(at)).inputs.get(input) else {
                    continue;
                };
                if switched(choice, sources, name) {
                    let (added, chosen) = additions.chosen(choice, elem(name));
                    nodes.extend(added);
                    inputs.insert((at, input), chosen);
                }
            }
            Slot::Output(at) => {
                if let Some(name) = outputs.get(at)
                    && additions.renamed.contains_key(name)
                {
                    let (added, chosen) = additions.chosen(choice, elem(name));
                    nodes.extend(added);
                    let label = format!("{name}__{PREFIX}");
                    nodes.push(node("Identity", label, vec![chosen], name.clone()));
                }
            }
        }
    }
    let Additions {
        renamed,
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
    g.initializer.extend(initializers);
    // One scalar input per switch, read by the `If`s as their condition straight from host
    // memory: a gate vector sliced by `Gather` put the slice on the accelerator and copied
    // it back to the host before every `If` (a synchronisation each).
    g.input
        .extend((0..switches).map(|switch| value_info(&gate_name(switch), DataType::Bool, &[])));
    sort_topologically(&mut base);
    base
}

/// Puts the nodes in an order where each comes after the producers of its inputs (the
/// graph index sees through the branches to the outer tensors they read).
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
