//! Writes the switchable model: every slot's form placed in the main graph when all variants
//! agree on it, else the slot's forms selected by gates, as [`Gating`] says:
//! - [`Gating::Branches`]: a nest of `If(gate)` nodes whose branches hold one form each. A
//!   branch holds a whole unit (input DQs, node, output Qs) with its own initializers, so
//!   ONNX Runtime fuses it into the integer kernel the variant's own model runs (QDQ fusion
//!   works inside subgraphs); only the chosen branch runs, so a run costs about what the
//!   chosen variant's own model costs. A branch that does not write one of the nest's
//!   outputs (no consumer of that variant reads it) fills it with a scalar constant.
//! - [`Gating::Select`]: every form in the main graph, each value picked from the forms that
//!   write it by a chain of `Where(gate)` nodes ([`select`]).

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::eval::search::switchable::units::{Form, FormKey, PREFIX, Slot, Written, is_internal};
use crate::eval::search::switchable::{Choices, Gating};
use crate::model::builder::value_info;
use crate::model::ops;
use crate::model::proto::attribute_proto::AttributeType;
use crate::model::proto::{
    AttributeProto, GraphProto, NodeProto, TensorProto, TypeProto, ValueInfoProto, type_proto,
};
use crate::model::{DataType, Graph, Model};

/// What the names of the scalars a branch fills an output with start with (after
/// [`PREFIX`]).
pub(super) const PLACEHOLDER: &str = "placeholder";

/// The scalar gate of one switch.
pub(super) fn gate_name(switch: usize) -> String {
    format!("{PREFIX}_gate{switch}")
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

/// A value-info with an element type and no shape (branch outputs vary with the data, and a
/// branch that does not compute an output gives a scalar).
fn untyped_shape(name: &str, elem: i32) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.to_owned()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem),
                shape: None,
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A `Constant` writing a scalar zero of element type `elem` to `name`.
fn placeholder(name: &str, elem: i32) -> NodeProto {
    let bytes = DataType::from_onnx(elem).map_or(8, |d| d.bits().div_ceil(8));
    let value = TensorProto {
        data_type: Some(elem),
        raw_data: Some(vec![0u8; bytes].into()),
        ..Default::default()
    };
    NodeProto {
        op_type: Some("Constant".into()),
        name: Some(name.to_owned()),
        output: vec![name.to_owned()],
        attribute: vec![AttributeProto {
            name: Some("value".into()),
            r#type: Some(AttributeType::Tensor as i32),
            t: Some(value),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// Where a form is placed, which decides what of it is renamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// In the main graph, the slot's only form: it writes the model's names.
    Inline,
    /// In an `If` branch, with copies of the float model's initializers it reads.
    Branch,
    /// In the main graph beside the slot's other forms: the values it writes renamed.
    Beside,
}

/// Places forms, keeping every name it makes unique.
struct Placer<'a> {
    forms: &'a HashMap<FormKey, (usize, Form)>,
    /// The float model's initializers, copied into the branches that read them.
    shared: HashMap<&'a str, &'a TensorProto>,
    /// Initializers of forms placed in the main graph.
    initializers: Vec<TensorProto>,
    made: usize,
    gating: Gating,
}

impl Placer<'_> {
    fn fresh(&mut self, what: &str) -> String {
        self.made += 1;
        format!("{PREFIX}_{what}{}", self.made)
    }

    fn form(&self, key: &FormKey) -> Form {
        self.forms
            .get(key)
            .map(|(_, form)| form.clone())
            .unwrap_or_default()
    }

    /// `form`'s nodes and initializers with its internal names made unique; for a branch, the
    /// names it writes too, and the float model's initializers it reads copied in. Also the
    /// map from its names to the new ones.
    fn renamed(
        &mut self,
        mut form: Form,
        placement: Placement,
    ) -> (Vec<NodeProto>, Vec<TensorProto>, HashMap<String, String>) {
        let branch = placement == Placement::Branch;
        let beside = placement == Placement::Beside;
        if branch {
            let copies = form
                .shared
                .iter()
                .filter_map(|n| self.shared.get(n.as_str()));
            form.initializers.extend(copies.map(|t| (*t).clone()));
        }
        let written: HashSet<&str> = form.writes.iter().map(|w| w.name.as_str()).collect();
        let shared: HashSet<&str> = form.shared.iter().map(String::as_str).collect();
        let mut names: HashMap<String, String> = HashMap::new();
        let mut rename = |name: &mut String, placer: &mut Self| {
            let local = written.contains(name.as_str()) || shared.contains(name.as_str());
            let own = written.contains(name.as_str());
            if is_internal(name) || (branch && local) || (beside && own) {
                let new = names
                    .entry(name.clone())
                    .or_insert_with(|| placer.fresh("t"))
                    .clone();
                *name = new;
            }
        };
        for tensor in &mut form.initializers {
            let mut name = tensor.name().to_owned();
            rename(&mut name, self);
            tensor.name = Some(name);
        }
        for node in &mut form.nodes {
            for name in node.input.iter_mut().chain(node.output.iter_mut()) {
                rename(name, self);
            }
            node.name = Some(self.fresh("n"));
        }
        (form.nodes, form.initializers, names)
    }

    /// `form` placed in the main graph.
    fn inline(&mut self, form: Form) -> Vec<NodeProto> {
        let (nodes, initializers, _) = self.renamed(form, Placement::Inline);
        self.initializers.extend(initializers);
        nodes
    }

    /// A branch computing `form` and giving `outputs` in order (a placeholder for those the
    /// form does not write).
    fn branch(&mut self, form: Form, outputs: &[Written]) -> GraphProto {
        let (mut nodes, initializers, names) = self.renamed(form, Placement::Branch);
        let mut declared = Vec::with_capacity(outputs.len());
        for output in outputs {
            let name = match names.get(&output.name) {
                Some(name) => name.clone(),
                None => {
                    let name = self.fresh(PLACEHOLDER);
                    nodes.push(placeholder(&name, output.elem));
                    name
                }
            };
            declared.push(untyped_shape(&name, output.elem));
        }
        GraphProto {
            name: Some(self.fresh("branch")),
            node: nodes,
            initializer: initializers,
            output: declared,
            ..Default::default()
        }
    }

    /// The nodes computing a slot with `choice`: its one form in the main graph when nothing
    /// can switch, else a nest of `If(gate)` nodes, the first alternative outermost and the
    /// default innermost, writing the values any of its forms writes.
    fn chosen(&mut self, choice: &Choices) -> Vec<NodeProto> {
        let default = self.form(&choice.default);
        if choice.alternatives.is_empty() {
            return self.inline(default);
        }
        match self.gating {
            Gating::Branches => self.nested(choice, default),
            Gating::Select => self.selected(choice),
        }
    }

    /// The values any of `choice`'s forms writes, read where they are stored (placing a form
    /// copies it, its constants included, once).
    fn outputs(&self, choice: &Choices) -> Vec<Written> {
        let forms = self.forms;
        let keys =
            std::iter::once(&choice.default).chain(choice.alternatives.iter().map(|(k, _)| k));
        let mut outputs: Vec<Written> = Vec::new();
        for written in keys
            .filter_map(|key| forms.get(key))
            .flat_map(|(_, f)| &f.writes)
        {
            if !outputs.iter().any(|o| o.name == written.name) {
                outputs.push(written.clone());
            }
        }
        outputs
    }

    /// A slot's forms as a nest of `If`s ([`Gating::Branches`]). With an [`Choices::any`]
    /// switch, the outermost `If` tests it: off, its else branch is the default; on, its
    /// then branch tests the alternatives in order, the last taken when no earlier gate is
    /// on. Without one, the alternatives are tested in order, the default innermost.
    fn nested(&mut self, choice: &Choices, default: Form) -> Vec<NodeProto> {
        let outputs = self.outputs(choice);
        if outputs.is_empty() {
            // No variant reads anything the slot computes.
            return Vec::new();
        }
        let names: Vec<String> = outputs.iter().map(|o| o.name.clone()).collect();
        let default = self.branch(default, &outputs);
        let top = match (choice.any, choice.alternatives.split_last()) {
            (Some(any), Some(((last, _), earlier))) => {
                let innermost = self.branch(self.form(last), &outputs);
                let then = self.tests(earlier, innermost, &outputs);
                self.choose(any, then, default, names)
            }
            _ => {
                let mut nest = self.tests(&choice.alternatives, default, &outputs);
                match nest.node.pop() {
                    Some(mut top) if top.op_type() == ops::IF => {
                        top.output = names;
                        top
                    }
                    _ => return Vec::new(),
                }
            }
        };
        vec![top]
    }

    /// A branch giving `outputs` from the first of `tests` whose gate is on, else from
    /// `innermost`: a nest of `If`s, the first test outermost (`innermost` itself when there
    /// is none).
    fn tests(
        &mut self,
        tests: &[(FormKey, usize)],
        innermost: GraphProto,
        outputs: &[Written],
    ) -> GraphProto {
        let mut inner = innermost;
        for (key, switch) in tests.iter().rev() {
            let then = self.branch(self.form(key), outputs);
            let written: Vec<String> = outputs.iter().map(|_| self.fresh("if")).collect();
            let choose = self.choose(*switch, then, inner, written.clone());
            inner = GraphProto {
                name: Some(self.fresh("branch")),
                node: vec![choose],
                output: written
                    .iter()
                    .zip(outputs)
                    .map(|(name, o)| untyped_shape(name, o.elem))
                    .collect(),
                ..Default::default()
            };
        }
        inner
    }

    /// `If(gate of switch)`, writing `written` from `then` or `otherwise`.
    fn choose(
        &mut self,
        switch: usize,
        then: GraphProto,
        otherwise: GraphProto,
        written: Vec<String>,
    ) -> NodeProto {
        NodeProto {
            op_type: Some("If".into()),
            name: Some(self.fresh("choose")),
            input: vec![gate_name(switch)],
            output: written,
            attribute: vec![
                graph_attribute("then_branch", then),
                graph_attribute("else_branch", otherwise),
            ],
            ..Default::default()
        }
    }

    /// A slot's forms all placed in the main graph, each value they write picked by
    /// [`select`] ([`Gating::Select`]). The forms are taken in the order the `If` nest
    /// tests them: the alternatives in order, each under its gate, then the default.
    fn selected(&mut self, choice: &Choices) -> Vec<NodeProto> {
        let outputs = self.outputs(choice);
        if outputs.is_empty() {
            return Vec::new();
        }
        let order = choice
            .alternatives
            .iter()
            .map(|(key, switch)| (key, Some(*switch)))
            .chain(std::iter::once((&choice.default, None)));
        let mut nodes = Vec::new();
        let mut writers: Vec<(Option<usize>, HashMap<String, String>)> = Vec::new();
        for (key, switch) in order {
            let (placed, initializers, names) = self.renamed(self.form(key), Placement::Beside);
            nodes.extend(placed);
            self.initializers.extend(initializers);
            writers.push((switch, names));
        }
        for output in &outputs {
            let written: Vec<(Option<usize>, String)> = writers
                .iter()
                .filter_map(|(switch, names)| Some((*switch, names.get(&output.name)?.clone())))
                .collect();
            nodes.extend(select(output, &written, &mut || self.fresh("t")));
        }
        nodes
    }
}

/// The element type a `Where` picks a value of element type `elem` in (CPU and CUDA kernels
/// both hold uint8, int32, int64 and float, not the narrower integers or bool), cast there
/// and back without loss; `None` when it picks `elem` itself.
fn selection_type(elem: i32) -> Option<i32> {
    match DataType::from_onnx(elem) {
        Ok(DataType::Int8 | DataType::Int16 | DataType::Uint16) => Some(DataType::Int32.to_onnx()),
        Ok(DataType::Bool) => Some(DataType::Uint8.to_onnx()),
        _ => None,
    }
}

/// A `Cast` of `input` to element type `to`.
fn cast(input: &str, output: &str, to: i32) -> NodeProto {
    NodeProto {
        op_type: Some("Cast".into()),
        name: Some(format!("{output}_cast")),
        input: vec![input.to_owned()],
        output: vec![output.to_owned()],
        attribute: vec![AttributeProto {
            name: Some("to".into()),
            r#type: Some(AttributeType::Int as i32),
            i: Some(i64::from(to)),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// The nodes writing `output` from the forms that write it (`written`: each form's switch,
/// `None` for the default, and its name for the value, in the order the `If` nest tests
/// them): `Where(gate, value, rest)` for each but the last, whose value is taken when no
/// earlier gate is on. A form that does not write `output` is skipped: the variants that
/// select it read no value it would give, and every form runs, so each value is written
/// by a real computation (a placeholder could meet a form that reads it and fail there).
fn select(
    output: &Written,
    written: &[(Option<usize>, String)],
    fresh: &mut dyn FnMut() -> String,
) -> Vec<NodeProto> {
    let Some(((_, last), earlier)) = written.split_last() else {
        return Vec::new();
    };
    let identity = |from: &str| NodeProto {
        op_type: Some("Identity".into()),
        name: Some(format!("{}_selected", output.name)),
        input: vec![from.to_owned()],
        output: vec![output.name.clone()],
        ..Default::default()
    };
    if earlier.is_empty() {
        return vec![identity(last)];
    }
    let wide = selection_type(output.elem);
    let mut nodes = Vec::new();
    let widened =
        |name: &str, nodes: &mut Vec<NodeProto>, fresh: &mut dyn FnMut() -> String| match wide {
            Some(to) => {
                let cast_to = fresh();
                nodes.push(cast(name, &cast_to, to));
                cast_to
            }
            None => name.to_owned(),
        };
    let mut rest = widened(last, &mut nodes, fresh);
    for (at, (switch, value)) in earlier.iter().enumerate().rev() {
        let Some(switch) = switch else { continue };
        let value = widened(value, &mut nodes, fresh);
        let picked = if at == 0 && wide.is_none() {
            output.name.clone()
        } else {
            fresh()
        };
        nodes.push(NodeProto {
            op_type: Some("Where".into()),
            name: Some(format!("{picked}_where")),
            input: vec![gate_name(*switch), value, rest],
            output: vec![picked.clone()],
            ..Default::default()
        });
        rest = picked;
    }
    match wide {
        Some(_) => nodes.push(cast(&rest, &output.name, output.elem)),
        None if rest != output.name => nodes.push(identity(&rest)),
        None => {}
    }
    nodes
}

/// The switchable model over `base` (the prepared float model).
pub(super) fn assemble(
    mut base: Model,
    choices: &BTreeMap<Slot, Choices>,
    forms: &HashMap<FormKey, (usize, Form)>,
    switches: usize,
    gating: Gating,
) -> Model {
    let Some(g) = base.proto_mut().graph.as_mut() else {
        return base;
    };
    let originals = std::mem::take(&mut g.initializer);
    let mut placer = Placer {
        forms,
        shared: originals.iter().map(|t| (t.name(), t)).collect(),
        initializers: Vec::new(),
        made: 0,
        gating,
    };
    let nodes: Vec<NodeProto> = choices
        .values()
        .flat_map(|choice| placer.chosen(choice))
        .collect();
    let Placer { initializers, .. } = placer;
    g.node = nodes;
    g.initializer = originals;
    g.initializer.extend(initializers);
    if gating == Gating::Select {
        crate::eval::search::switchable::biases::fold_int32_dequantization(g);
    }
    // The initializers no node reads go: the float model's that only branches read (as
    // copies of their own), and the int32 biases written dequantized.
    let mut read = HashSet::new();
    reads(&g.node, &mut read);
    read.extend(g.input.iter().chain(&g.output).map(|i| i.name().to_owned()));
    g.initializer.retain(|t| read.contains(t.name()));
    let written: HashSet<&str> = g
        .node
        .iter()
        .flat_map(|n| n.output.iter().map(String::as_str))
        .collect();
    // Shapes recorded for tensors that now live in branches (or were renamed) go.
    g.value_info
        .retain(|info| written.contains(info.name.as_deref().unwrap_or_default()));
    // One scalar input per switch, read by the `If`s as their condition straight from host
    // memory: a gate vector sliced by `Gather` put the slice on the accelerator and copied
    // it back to the host before every `If` (a synchronisation each).
    g.input
        .extend((0..switches).map(|switch| value_info(&gate_name(switch), DataType::Bool, &[])));
    sort_topologically(&mut base);
    base
}

/// Every name `nodes` and the nodes of their branches read (an absent optional input, an
/// empty name, is not read).
pub(super) fn reads(nodes: &[NodeProto], read: &mut HashSet<String>) {
    for node in nodes {
        read.extend(node.input.iter().filter(|i| !i.is_empty()).cloned());
        for attribute in &node.attribute {
            if let Some(graph) = &attribute.g {
                reads(&graph.node, read);
            }
        }
    }
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
