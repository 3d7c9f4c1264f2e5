//! Where variants of a switchable model compute the same thing, and the model cut there.
//!
//! Two gate settings run the same nodes, on the same values, up to the first node of the
//! model (in its topological order) whose `If` nest reads a gate on which they differ. A
//! scan's variants each differ from the recipe or from the float model at one node and its
//! neighbours, so every value written before that node can be taken from one run of the
//! recipe or float model and only the rest of the model run per variant: the part from a
//! cut on ([`suffix`]), reading the values that cross the cut ([`crossing`]) as inputs.
//! PP-OCR rec's nodes have on average 40 % of the float model's time at or after them
//! (ONNX Runtime's profile of the float model, one thread, optimizations off).

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::eval::search::switchable::assemble::{PLACEHOLDER, gate_name, reads};
use crate::eval::search::switchable::units::PREFIX;
use crate::model::builder::any_shape_info;
use crate::model::ops;
use crate::model::proto::tensor_shape_proto::{Dimension, dimension::Value as DimValue};
use crate::model::proto::{
    GraphProto, NodeProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto, type_proto,
};
use crate::model::{DataType, Model, TensorArray};

/// What gates each node of a switchable model reads, in the model's node order.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Per node: the switches its `If` nest reads (empty for a node every variant shares).
    switches: Vec<Vec<usize>>,
    /// The last place a cut may go: no node before it writes a graph output.
    last_cut: usize,
}

impl Layout {
    /// The layout of `model` (a switchable model, nodes in topological order).
    pub fn of(model: &Model) -> Layout {
        let graph = model.graph();
        let switches = graph.node.iter().map(switches_read).collect();
        let outputs: HashSet<&str> = graph.output.iter().map(|o| o.name()).collect();
        let last_cut = graph
            .node
            .iter()
            .position(|n| n.output.iter().any(|o| outputs.contains(o.as_str())))
            .unwrap_or(graph.node.len());
        Layout { switches, last_cut }
    }

    /// The share of the model's cost from place `at` on, taken as its share of the nodes.
    /// Measured on PP-OCR rec's scan (wall seconds a variant took from a cut, against from
    /// the start), it follows the node count over the first 40 % of the nodes (0.78 from a
    /// cut at 22 % of them, where the count gives 0.78; 0.57 at 41 %, against 0.59) and
    /// overstates the cheaper rest (0.24 at 55 %, against 0.45). Weighing each node by the
    /// values it writes instead (a network's first nodes write its largest activations)
    /// chose worse cuts there: 226 s of runs against 210 s.
    pub fn after(&self, at: usize) -> f64 {
        self.switches.len().saturating_sub(at) as f64 / self.switches.len().max(1) as f64
    }

    /// Nodes in the model.
    pub fn nodes(&self) -> usize {
        self.switches.len()
    }

    /// The furthest cut at which gate settings `a` and `b` have run the same nodes on the
    /// same values: their first node that reads a gate they differ on, no further than the
    /// last node before a graph output is written.
    pub fn shared_until(&self, a: &[bool], b: &[bool]) -> usize {
        let differs = |s: &usize| a.get(*s) != b.get(*s);
        self.switches
            .iter()
            .position(|read| read.iter().any(differs))
            .unwrap_or(self.switches.len())
            .min(self.last_cut)
    }
}

/// The switch a gate input's name stands for.
fn switch_of(name: &str) -> Option<usize> {
    name.strip_prefix(PREFIX)?
        .strip_prefix("_gate")?
        .parse()
        .ok()
        .filter(|&s| gate_name(s) == name)
}

/// The switches `node` and the nodes of its branches read.
fn switches_read(node: &NodeProto) -> Vec<usize> {
    let mut read = BTreeSet::new();
    let mut names = HashSet::new();
    reads(std::slice::from_ref(node), &mut names);
    read.extend(names.iter().filter_map(|n| switch_of(n)));
    read.into_iter().collect()
}

/// The values a cut before node `at` of `model` carries: written by the nodes before it and
/// read by a node at or after it (in a branch included), in the order they are written.
pub fn crossing(model: &Model, at: usize) -> Vec<String> {
    let nodes = &model.graph().node;
    let mut read = HashSet::new();
    reads(nodes.get(at..).unwrap_or_default(), &mut read);
    nodes
        .iter()
        .take(at)
        .flat_map(|n| &n.output)
        .filter(|o| read.contains(o.as_str()))
        .cloned()
        .collect()
}

/// A value fed to a suffix: its name, element type and shape (`None` for a dimension that
/// differs between batches).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fed {
    /// The value's name in the model.
    pub name: String,
    /// Its element type.
    pub dtype: DataType,
    /// Its size along each axis, `None` where batches differ; `None` for all when even its
    /// rank differs (a value one base writes and another fills with a scalar).
    pub shape: Option<Vec<Option<usize>>>,
}

/// The nodes of `model` from `at` on, as a model that reads the values crossing the cut
/// (`fed`) as graph inputs beside the data inputs, with every `If` whose gates `fixed` gives
/// replaced by the branch they select ([`Fixed`]), and only the gates and initializers the
/// remaining nodes read.
pub fn suffix(model: &Model, at: usize, fed: &[Fed], fixed: &Fixed<'_>) -> Model {
    let mut proto = model.proto().clone();
    if let Some(graph) = proto.graph.as_mut() {
        let kept = graph.node.split_off(at.min(graph.node.len()));
        graph.node = Vec::with_capacity(kept.len());
        for node in kept {
            let (nodes, initializers) = resolved(node, fixed);
            graph.node.extend(nodes);
            graph.initializer.extend(initializers);
        }
        cut(graph, fed);
    }
    Model::from_proto(proto)
}

/// The nodes of `model` before `at`, every `If` resolved by `fixed` (which fixes all the
/// gates: a base's), writing `names` (values crossing the cut) as its outputs: what a
/// base's values at a cut are read from. It runs only the nodes before the cut, as the
/// base's own model does, and holds no `If` (the values are the same: a fixed branch
/// computes what the `If` running it does).
pub fn head(model: &Model, at: usize, names: &[String], fixed: &Fixed<'_>) -> Model {
    let mut proto = model.proto().clone();
    if let Some(graph) = proto.graph.as_mut() {
        graph.node.truncate(at);
        for node in std::mem::take(&mut graph.node) {
            let (nodes, initializers) = resolved(node, fixed);
            graph.node.extend(nodes);
            graph.initializer.extend(initializers);
        }
        graph.output = names
            .iter()
            .map(|name| ValueInfoProto {
                name: Some(name.clone()),
                ..Default::default()
            })
            .collect();
        cut(graph, &[]);
    }
    Model::from_proto(proto)
}

/// The value each switch has in every variant a suffix runs (`None` where they differ): an
/// `If` on a fixed gate runs its branch's nodes in the main graph, where ONNX Runtime fuses
/// them with their neighbours as in the variant's own model, and costs no `If`. Measured on
/// PP-OCR rec's scan (same cuts, one run each): the variants ran in 188 s specialized, in
/// 207 s with every `If` kept.
pub type Fixed<'a> = dyn Fn(usize) -> Option<bool> + 'a;

/// `node`, or the nodes of the branch its gates select when they are all fixed.
fn resolved(node: NodeProto, fixed: &Fixed<'_>) -> (Vec<NodeProto>, Vec<TensorProto>) {
    match resolve(&node, fixed) {
        Some(chosen) => chosen,
        None => (vec![node], Vec::new()),
    }
}

/// The branch an `If` nest on fixed gates selects, nested `If`s included: the branch's
/// nodes writing the `If`'s outputs, and its initializers (branch names are unique in the
/// switchable model, so they move to the main graph as they are). `None` for any other node
/// and for a nest with a gate that is not fixed.
///
/// A branch fills an output its form does not compute with a scalar. Placed in the main
/// graph as a constant, that scalar would meet ONNX's shape inference in the branches of the
/// `If`s left (the variants that differ there) that read the real value, and fail it; so it
/// is reshaped by [`OPAQUE`], whose length inference cannot know. No variant of the suffix
/// reads it (the forms a variant selects write what its other forms read).
fn resolve(node: &NodeProto, fixed: &Fixed<'_>) -> Option<(Vec<NodeProto>, Vec<TensorProto>)> {
    if node.op_type() == ops::WHERE {
        return Some((vec![picked(node, fixed)?], Vec::new()));
    }
    if node.op_type() != ops::IF {
        return None;
    }
    let on = fixed(switch_of(node.input.first()?)?)?;
    let branch_name = if on { "then_branch" } else { "else_branch" };
    let branch = node
        .attribute
        .iter()
        .find(|a| a.name() == branch_name)?
        .g
        .as_ref()?;
    let filler = format!("{PREFIX}_{PLACEHOLDER}");
    let mut nodes = Vec::new();
    let mut initializers = branch.initializer.clone();
    for inner in &branch.node {
        if inner.op_type() == ops::CONSTANT && inner.name().starts_with(&filler) {
            nodes.extend(opaque_scalar(inner));
            continue;
        }
        match inner.op_type() {
            ops::IF => {
                let (more, inits) = resolve(inner, fixed)?;
                nodes.extend(more);
                initializers.extend(inits);
            }
            _ => nodes.push(inner.clone()),
        }
    }
    let renames: HashMap<&str, &str> = branch
        .output
        .iter()
        .map(|o| o.name())
        .zip(node.output.iter().map(String::as_str))
        .collect();
    let written: HashSet<String> = nodes.iter().flat_map(|n| n.output.clone()).collect();
    for n in &mut nodes {
        for name in n.input.iter_mut().chain(n.output.iter_mut()) {
            if let Some(new) = renames.get(name.as_str()) {
                *name = (*new).to_owned();
            }
        }
    }
    // A branch output read from outside the branch (not written in it) is copied.
    for (from, to) in &renames {
        if !written.contains(*from) {
            nodes.push(NodeProto {
                op_type: Some("Identity".into()),
                name: Some(format!("{to}__{PREFIX}_pass")),
                input: vec![(*from).to_owned()],
                output: vec![(*to).to_owned()],
                ..Default::default()
            });
        }
    }
    Some((nodes, initializers))
}

/// A `Where` on a fixed gate ([`crate::eval::search::switchable::Gating::Select`]) as an `Identity` of the value it
/// picks; `None` for a `Where` on anything else. The forms writing the values it no longer
/// picks are left unread, and [`cut`] drops them.
fn picked(node: &NodeProto, fixed: &Fixed<'_>) -> Option<NodeProto> {
    let on = fixed(switch_of(node.input.first()?)?)?;
    let value = node.input.get(if on { 1 } else { 2 })?;
    Some(NodeProto {
        op_type: Some("Identity".into()),
        name: Some(format!("{}_fixed", node.name())),
        input: vec![value.clone()],
        output: node.output.clone(),
        ..Default::default()
    })
}

/// The graph input, fed an empty int64 vector, that reshapes a branch's scalar placeholders
/// placed in the main graph into values of a shape inference cannot know.
pub const OPAQUE: &str = "qdq_studio_switch_opaque_shape";

/// What a model cut from a switchable one ([`suffix`], [`head`]) is fed for [`OPAQUE`]
/// (an empty int64 vector), when it reads it.
pub fn opaque_input(model: &Model) -> Option<(String, TensorArray)> {
    let reads = model.graph().input.iter().any(|i| i.name() == OPAQUE);
    let empty = ndarray::Array1::<i64>::zeros(0).into_dyn();
    reads.then(|| (OPAQUE.to_owned(), TensorArray::Int64(empty)))
}

/// A placeholder `Constant` writing its scalar through a `Reshape` by [`OPAQUE`].
fn opaque_scalar(constant: &NodeProto) -> Vec<NodeProto> {
    let Some(name) = constant.output.first().cloned() else {
        return vec![constant.clone()];
    };
    let value = format!("{name}_value");
    let mut constant = constant.clone();
    constant.output = vec![value.clone()];
    let reshape = NodeProto {
        op_type: Some("Reshape".into()),
        name: Some(format!("{name}_opaque")),
        input: vec![value, OPAQUE.to_owned()],
        output: vec![name],
        ..Default::default()
    };
    vec![constant, reshape]
}

/// The graph of [`suffix`] given its nodes: fed values declared as inputs, what the nodes
/// no longer read dropped.
fn cut(graph: &mut GraphProto, fed: &[Fed]) {
    drop_unread(graph);
    let mut read = HashSet::new();
    reads(&graph.node, &mut read);
    graph.initializer.retain(|t| read.contains(t.name()));
    // Shapes are left to inference (a shape recorded for a value an `If` writes may not
    // merge with what inference now sees through the branches placed around it).
    graph.value_info.clear();
    graph
        .input
        .retain(|i| switch_of(i.name()).is_none() || read.contains(i.name()));
    graph.input.extend(fed.iter().map(fed_info));
    if read.contains(OPAQUE) {
        graph.input.push(any_shape_info(OPAQUE, DataType::Int64));
    }
}

/// Drops the nodes (in topological order) whose values neither a graph output nor a later
/// node reads: the forms a suffix's fixed gates no longer select.
fn drop_unread(graph: &mut GraphProto) {
    let mut needed: HashSet<String> = graph.output.iter().map(|o| o.name().to_owned()).collect();
    let mut kept = Vec::with_capacity(graph.node.len());
    for node in std::mem::take(&mut graph.node).into_iter().rev() {
        if node.output.iter().any(|o| needed.contains(o)) {
            reads(std::slice::from_ref(&node), &mut needed);
            kept.push(node);
        }
    }
    kept.reverse();
    graph.node = kept;
}

/// The graph input declaring a fed value.
fn fed_info(fed: &Fed) -> ValueInfoProto {
    let dim = |(axis, size): (usize, &Option<usize>)| Dimension {
        value: Some(match size {
            Some(size) => DimValue::DimValue(*size as i64),
            None => DimValue::DimParam(format!("{}_{}_d{axis}", PREFIX, fed.name)),
        }),
        ..Default::default()
    };
    ValueInfoProto {
        name: Some(fed.name.clone()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(fed.dtype.to_onnx()),
                shape: fed.shape.as_ref().map(|shape| TensorShapeProto {
                    dim: shape.iter().enumerate().map(dim).collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The shape every one of `shapes` (a value's shape in each batch) agrees with: a size
/// where all give it, `None` where they differ; `None` when even their ranks differ.
pub fn agreed_shape<'a>(
    mut shapes: impl Iterator<Item = &'a [usize]>,
) -> Option<Vec<Option<usize>>> {
    let first: Vec<Option<usize>> = shapes.next()?.iter().map(|&d| Some(d)).collect();
    shapes.try_fold(first, |mut agreed, shape| {
        if shape.len() != agreed.len() {
            return None;
        }
        for (a, &d) in agreed.iter_mut().zip(shape) {
            if *a != Some(d) {
                *a = None;
            }
        }
        Some(agreed)
    })
}

/// Cuts for a scan: up to `most` distinct places among `shared` (each variant's furthest
/// usable cut), taken at even steps through them in order, so that each cut serves about
/// as many variants; 0 (the whole model) is left out.
pub fn chosen_cuts(shared: &[usize], most: usize) -> Vec<usize> {
    let mut sorted: Vec<usize> = shared.iter().copied().filter(|&s| s > 0).collect();
    sorted.sort_unstable();
    let steps = most.min(sorted.len());
    let mut cuts: Vec<usize> = (0..steps)
        .map(|i| sorted[i * sorted.len() / steps])
        .collect();
    cuts.dedup();
    cuts
}

/// The cut each variant runs from: the furthest of `cuts` (ascending) at or before its
/// `shared` place, 0 (the whole model) when none is.
pub fn cut_of(cuts: &[usize], shared: usize) -> usize {
    match cuts.partition_point(|&c| c <= shared) {
        0 => 0,
        n => cuts[n - 1],
    }
}

/// The switches whose gates are graph inputs of `model` (those a suffix still reads).
pub fn gated_switches(model: &Model) -> Vec<usize> {
    model
        .graph()
        .input
        .iter()
        .filter_map(|i| switch_of(i.name()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::builder::ModelBuilder;

    #[test]
    fn cuts_are_spread_over_the_variants_and_each_variant_takes_the_nearest_before_it() {
        let shared = [0, 3, 3, 5, 9, 9, 9, 12];
        let cuts = chosen_cuts(&shared, 3);
        assert_eq!(cuts, vec![3, 5, 9]);
        assert_eq!(cut_of(&cuts, 2), 0);
        assert_eq!(cut_of(&cuts, 3), 3);
        assert_eq!(cut_of(&cuts, 8), 5);
        assert_eq!(cut_of(&cuts, 12), 9);
        assert!(chosen_cuts(&[0, 0], 4).is_empty());
    }

    #[test]
    fn shapes_agree_where_every_batch_gives_the_same_size() {
        let a = [2_usize, 8, 4];
        let b = [1_usize, 8, 4];
        let shapes = [&a[..], &b[..]];
        assert_eq!(
            agreed_shape(shapes.into_iter()),
            Some(vec![None, Some(8), Some(4)])
        );
        let c = [2_usize, 8];
        assert_eq!(agreed_shape([&a[..], &c[..]].into_iter()), None);
    }

    /// x → A → a → B(gate 0) → b → C(gate 1) → y, with a skip from a into C.
    fn chain() -> Model {
        let mut builder = ModelBuilder::new(17);
        builder
            .input("x", DataType::Float32, &[-1, 4])
            .input(&gate_name(0), DataType::Bool, &[])
            .input(&gate_name(1), DataType::Bool, &[])
            .output("y", DataType::Float32, &[-1, 4]);
        builder.node("Relu", &["x"], &["a"]);
        builder.node("Add", &["a", &gate_name(0)], &["b"]);
        builder.node("Sum", &["b", "a", &gate_name(1)], &["y"]);
        builder.build()
    }

    #[test]
    fn variants_share_the_nodes_before_the_first_gate_they_differ_on() {
        let layout = Layout::of(&chain());
        assert_eq!(layout.nodes(), 3);
        assert!((layout.after(1) - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(layout.after(3), 0.0);
        assert_eq!(layout.shared_until(&[false, false], &[true, false]), 1);
        assert_eq!(layout.shared_until(&[false, false], &[false, true]), 2);
        // Equal gates share every node before the graph output is written.
        assert_eq!(layout.shared_until(&[true, true], &[true, true]), 2);
    }

    #[test]
    fn a_suffix_reads_the_crossing_values_and_only_its_own_gates() {
        let model = chain();
        assert_eq!(crossing(&model, 2), vec!["a", "b"]);
        assert_eq!(crossing(&model, 1), vec!["a"]);
        let fed: Vec<Fed> = crossing(&model, 2)
            .into_iter()
            .map(|name| Fed {
                name,
                dtype: DataType::Float32,
                shape: Some(vec![None, Some(4)]),
            })
            .collect();
        let suffix = suffix(&model, 2, &fed, &|_| None);
        let graph = suffix.graph();
        assert_eq!(graph.node.len(), 1);
        let inputs: Vec<&str> = graph.input.iter().map(|i| i.name()).collect();
        assert_eq!(inputs, vec!["x", gate_name(1).as_str(), "a", "b"]);
        assert_eq!(gated_switches(&suffix), vec![1]);
    }

    #[test]
    fn a_head_runs_a_bases_nodes_before_the_cut_and_writes_what_crosses_it() {
        let model = gated();
        let names = vec!["y".to_owned(), "z".to_owned()];
        let on = head(&model, 1, &names, &|_| Some(true));
        let graph = on.graph();
        let ops: Vec<&str> = graph.node.iter().map(|n| n.op_type()).collect();
        assert_eq!(ops, vec!["Mul", "Constant", "Reshape"]);
        let outputs: Vec<&str> = graph.output.iter().map(|o| o.name()).collect();
        assert_eq!(outputs, vec!["y", "z"]);
        // No gate is read any more; the placeholder reaches `z` through the shape input.
        let inputs: Vec<&str> = graph.input.iter().map(|i| i.name()).collect();
        assert_eq!(inputs, vec!["x", OPAQUE]);
        let off = head(&model, 1, &names[..1], &|_| Some(false));
        let ops: Vec<&str> = off.graph().node.iter().map(|n| n.op_type()).collect();
        assert_eq!(ops, vec!["Identity"]);
        let inputs: Vec<&str> = off.graph().input.iter().map(|i| i.name()).collect();
        assert_eq!(inputs, vec!["x"]);
    }

    /// An `If` on gate 0: then writes `y` with a Mul by its own weight and fills `z` with a
    /// placeholder, else writes both with Identities; `y` is read by the next node.
    fn gated() -> Model {
        let node = |op: &str, name: &str, input: &[&str], output: &[&str]| NodeProto {
            op_type: Some(op.into()),
            name: Some(name.into()),
            input: input.iter().map(|s| s.to_string()).collect(),
            output: output.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        let filler = format!("{PREFIX}_{PLACEHOLDER}1");
        let branch = |nodes: Vec<NodeProto>, outputs: [&str; 2]| GraphProto {
            node: nodes,
            output: outputs
                .iter()
                .map(|o| ValueInfoProto {
                    name: Some((*o).to_owned()),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let mut then = branch(
            vec![
                node("Mul", "n1", &["x", "w1"], &["t1"]),
                node("Constant", &filler, &[], &[&filler]),
            ],
            ["t1", &filler],
        );
        // The Mul's weight, the branch's own (four floats).
        then.initializer.push(TensorProto {
            name: Some("w1".into()),
            data_type: Some(DataType::Float32.to_onnx()),
            dims: vec![4],
            raw_data: Some(vec![0u8; 16].into()),
            ..Default::default()
        });
        let otherwise = branch(
            vec![
                node("Identity", "n2", &["x"], &["t2"]),
                node("Identity", "n3", &["x"], &["t3"]),
            ],
            ["t2", "t3"],
        );
        let mut choose = node("If", "choose", &[&gate_name(0)], &["y", "z"]);
        choose.attribute = vec![
            crate::model::proto::AttributeProto {
                name: Some("then_branch".into()),
                g: Some(then),
                ..Default::default()
            },
            crate::model::proto::AttributeProto {
                name: Some("else_branch".into()),
                g: Some(otherwise),
                ..Default::default()
            },
        ];
        let mut builder = ModelBuilder::new(17);
        builder
            .input("x", DataType::Float32, &[-1, 4])
            .input(&gate_name(0), DataType::Bool, &[])
            .output("w", DataType::Float32, &[-1, 4])
            .output("v", DataType::Float32, &[-1, 4]);
        let mut model = builder.build();
        if let Some(graph) = model.proto_mut().graph.as_mut() {
            graph.node = vec![
                choose,
                node("Relu", "after", &["y"], &["w"]),
                node("Identity", "reads_z", &["z"], &["v"]),
            ];
        }
        model
    }

    #[test]
    fn a_fixed_gate_places_its_branch_in_the_graph_and_hides_its_placeholders_shape() {
        let model = gated();
        let open = suffix(&model, 0, &[], &|_| None);
        assert_eq!(open.graph().node[0].op_type(), "If");
        assert!(open.graph().input.iter().any(|i| i.name() == gate_name(0)));
        let on = suffix(&model, 0, &[], &|_| Some(true));
        let graph = on.graph();
        let ops: Vec<&str> = graph.node.iter().map(|n| n.op_type()).collect();
        assert_eq!(ops, vec!["Mul", "Constant", "Reshape", "Relu", "Identity"]);
        // The branch's values take the If's names; the placeholder reaches `z` reshaped.
        assert_eq!(graph.node[0].output, vec!["y"]);
        assert_eq!(graph.node[2].input[1], OPAQUE);
        assert_eq!(graph.node[2].output, vec!["z"]);
        let inputs: Vec<&str> = graph.input.iter().map(|i| i.name()).collect();
        assert_eq!(inputs, vec!["x", OPAQUE]);
        let off = suffix(&model, 0, &[], &|_| Some(false));
        let ops: Vec<&str> = off.graph().node.iter().map(|n| n.op_type()).collect();
        assert_eq!(ops, vec!["Identity", "Identity", "Relu", "Identity"]);
        assert_eq!(off.graph().node[1].output, vec!["z"]);
        // A value nothing reads any more is not computed: without `v`, the branch's `z`
        // (placeholder or not) goes, and with it the shape input.
        let mut unread = model.proto().clone();
        if let Some(graph) = unread.graph.as_mut() {
            graph.node.pop();
            graph.output.pop();
        }
        let unread = Model::from_proto(unread);
        let on = suffix(&unread, 0, &[], &|_| Some(true));
        let ops: Vec<&str> = on.graph().node.iter().map(|n| n.op_type()).collect();
        assert_eq!(ops, vec!["Mul", "Relu"]);
        let inputs: Vec<&str> = on.graph().input.iter().map(|i| i.name()).collect();
        assert_eq!(inputs, vec!["x"]);
        let off = suffix(&unread, 0, &[], &|_| Some(false));
        let ops: Vec<&str> = off.graph().node.iter().map(|n| n.op_type()).collect();
        assert_eq!(ops, vec!["Identity", "Relu"]);
    }

    /// A `Where` on a fixed gate (the accelerators' gating) becomes an `Identity` of the
    /// value it picks, and the form it no longer picks is dropped.
    #[test]
    fn a_fixed_gate_picks_its_where_value_and_drops_the_other_form() {
        let mut builder = ModelBuilder::new(17);
        builder
            .input("x", DataType::Float32, &[-1, 4])
            .input(&gate_name(0), DataType::Bool, &[])
            .output("y", DataType::Float32, &[-1, 4]);
        builder.node("Relu", &["x"], &["a"]);
        builder.node("Neg", &["x"], &["b"]);
        builder.node("Where", &[&gate_name(0), "a", "b"], &["y"]);
        let model = builder.build();
        let open = suffix(&model, 0, &[], &|_| None);
        assert_eq!(open.graph().node.len(), 3);
        for (on, kept) in [(true, "Relu"), (false, "Neg")] {
            let fixed = suffix(&model, 0, &[], &|_| Some(on));
            let graph = fixed.graph();
            let ops: Vec<&str> = graph.node.iter().map(|n| n.op_type()).collect();
            assert_eq!(ops, vec![kept, "Identity"], "gate {on}");
            assert_eq!(graph.node[1].output, vec!["y"]);
            assert!(graph.input.iter().all(|i| i.name() != gate_name(0)));
        }
    }

    #[test]
    fn nested_initializer_bytes_count_a_branchs_weights_wherever_it_sits() {
        let model = gated();
        assert_eq!(model.initializer_bytes(), 0);
        assert_eq!(model.nested_initializer_bytes(), 16);
        let on = suffix(&model, 0, &[], &|_| Some(true));
        assert_eq!(on.nested_initializer_bytes(), 16);
        let off = suffix(&model, 0, &[], &|_| Some(false));
        assert_eq!(off.nested_initializer_bytes(), 0);
    }
}
