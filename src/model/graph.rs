//! [`Graph`]: an index over a model's main graph.
//!
//! Nodes get stable ids (their position in the file) and effective names: unnamed nodes are
//! called `OpType_N` (N = the node's index, ModelOpt's convention) so users can target them,
//! and every renaming is reported. The index knows each tensor's producer and consumers, type
//! and shape, a topological order, op-type counts and parameter totals. Structural problems
//! (a tensor nobody produces, a cycle) are recorded rather than fatal so the studio can show a
//! broken model; engine passes call [`Graph::check`] to refuse one.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};

use serde::Serialize;

use super::Model;
use super::dtype::onnx_type_name;
use super::error::ModelError;
use super::external::element_count;
use super::proto::{
    GraphProto, NodeProto, TensorProto, TypeProto, ValueInfoProto, attribute_proto::AttributeType,
    type_proto,
};
use crate::model::ops;

/// A node's stable id: its index in `graph.node`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct NodeId(pub usize);

/// One dimension of a tensor shape.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(untagged)]
pub enum Dim {
    /// A known size.
    Fixed(i64),
    /// A named symbolic size (`batch`, `seq_len`, ...).
    Symbolic(String),
    /// A dimension with neither value nor name.
    Unknown,
}

impl std::fmt::Display for Dim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dim::Fixed(v) => write!(f, "{v}"),
            Dim::Symbolic(s) => f.write_str(s),
            Dim::Unknown => f.write_str("?"),
        }
    }
}

/// Formats a shape as `[1, 3, H, W]`, or `?` when the rank is unknown.
pub fn format_shape(shape: Option<&[Dim]>) -> String {
    match shape {
        Some(dims) => format!(
            "[{}]",
            dims.iter()
                .map(Dim::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => "?".to_owned(),
    }
}

/// A node of the main graph as the index sees it.
#[derive(Debug, Clone, Serialize)]
pub struct Node {
    /// Stable id (index in the file).
    pub id: NodeId,
    /// The effective name: the node's own, or `OpType_N` when it had none.
    pub name: String,
    /// True when `name` was made up because the node had no (or a duplicate) name.
    pub auto_named: bool,
    /// The operator type.
    pub op_type: String,
    /// The operator domain (`""` for the default ONNX domain).
    pub domain: String,
    /// Input tensor names (`""` marks an omitted optional input).
    pub inputs: Vec<String>,
    /// Output tensor names.
    pub outputs: Vec<String>,
    /// Names of the graph-valued attributes (If/Loop/Scan bodies) and their node counts.
    pub subgraphs: Vec<(String, usize)>,
    /// The node's integer attributes (`axis`, `group`, `transB`, ...).
    pub attributes: Vec<(String, i64)>,
    /// The names of all its attributes.
    pub attribute_names: Vec<String>,
}

/// Where a tensor comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TensorKind {
    /// A graph input that is not an initializer: data the user feeds.
    Input,
    /// An initializer (a weight or constant).
    Initializer,
    /// An initializer that is also a graph input in a model of IR version 4 or later: a
    /// default value callers may override (ONNX Runtime does not fold it), so it is neither a
    /// weight to quantize in place nor data the tool must feed. Quantized, if at all, as an
    /// activation, and kept as an input.
    Overridable,
    /// The output of a Constant node: treated like an initializer where a weight is needed.
    Constant,
    /// Produced by a node.
    Activation,
    /// Read by a node but produced by nothing (a structural problem).
    Missing,
}

impl TensorKind {
    /// True for a constant: an initializer or a Constant node's output.
    pub fn is_constant(self) -> bool {
        matches!(self, TensorKind::Initializer | TensorKind::Constant)
    }
}

/// A tensor of the main graph.
#[derive(Debug, Clone, Serialize)]
pub struct TensorInfo {
    /// The tensor name.
    pub name: String,
    /// Where it comes from.
    pub kind: TensorKind,
    /// The ONNX element type code, when known.
    pub elem_type: Option<i32>,
    /// The shape, when known.
    pub shape: Option<Vec<Dim>>,
    /// The producing node.
    pub producer: Option<NodeId>,
    /// The consuming nodes, in file order.
    pub consumers: Vec<NodeId>,
    /// True for graph outputs.
    pub is_output: bool,
}

impl Node {
    /// True when the node is of the default ONNX domain.
    pub fn is_default_domain(&self) -> bool {
        is_default_domain(&self.domain)
    }

    /// An integer attribute's value.
    pub fn int_attribute(&self, name: &str) -> Option<i64> {
        self.attributes
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| *v)
    }
}

impl TensorInfo {
    /// The element type's name (`float32`, ...) or `?`.
    pub fn type_name(&self) -> String {
        self.elem_type
            .map_or_else(|| "?".to_owned(), onnx_type_name)
    }
}

/// A node that had no usable name and was given one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Renamed {
    /// The node.
    pub id: NodeId,
    /// Its name in the file (empty when it had none).
    pub original: String,
    /// The name the index gave it.
    pub name: String,
}

/// A structural problem found while indexing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GraphProblem {
    /// A node reads a tensor nothing produces.
    DanglingInput {
        /// The reading node.
        node: NodeId,
        /// The missing tensor.
        tensor: String,
    },
    /// These nodes are on a cycle (or depend on one) and have no topological order.
    Cycle {
        /// The nodes that could not be ordered.
        nodes: Vec<NodeId>,
    },
    /// A node writes a tensor that another node, a graph input or an initializer already
    /// defines (ONNX graphs are single-assignment).
    Redefined {
        /// The node writing it again.
        node: NodeId,
        /// The tensor.
        tensor: String,
    },
    /// Two initializers, or two graph inputs, share a name.
    Duplicate {
        /// "initializer" or "graph input".
        what: &'static str,
        /// The name.
        tensor: String,
    },
    /// The graph declares no outputs: running it computes nothing.
    NoOutputs,
}

impl GraphProblem {
    /// One line for people: what is wrong, naming the nodes and tensor.
    pub fn describe(&self, graph: &Graph) -> String {
        match self {
            GraphProblem::DanglingInput { node, tensor } => format!(
                "node '{}' reads '{tensor}', which nothing produces",
                graph.node(*node).name
            ),
            GraphProblem::Cycle { nodes } => format!("{} node(s) are on a cycle", nodes.len()),
            GraphProblem::Redefined { node, tensor } => format!(
                "node '{}' writes '{tensor}', which is already defined",
                graph.node(*node).name
            ),
            GraphProblem::Duplicate { what, tensor } => format!("two {what}s are named '{tensor}'"),
            GraphProblem::NoOutputs => "the graph declares no outputs".to_owned(),
        }
    }

    /// The nodes to point at.
    pub fn nodes(&self) -> Vec<NodeId> {
        match self {
            GraphProblem::DanglingInput { node, .. } | GraphProblem::Redefined { node, .. } => {
                vec![*node]
            }
            GraphProblem::Cycle { nodes } => nodes.clone(),
            GraphProblem::NoOutputs | GraphProblem::Duplicate { .. } => Vec::new(),
        }
    }
}

/// The index over a model's main graph.
#[derive(Debug, Clone)]
pub struct Graph {
    nodes: Vec<Node>,
    tensors: Vec<TensorInfo>,
    by_tensor: HashMap<String, usize>,
    by_node_name: HashMap<String, NodeId>,
    order: Vec<NodeId>,
    renamed: Vec<Renamed>,
    problems: Vec<GraphProblem>,
    inputs: Vec<String>,
    outputs: Vec<String>,
    parameters: u64,
    parameter_bytes: u64,
    /// Per node, the indices of the tensors it reads (explicit and implicit).
    reads: Vec<Vec<usize>>,
}

fn shape_of(value: &ValueInfoProto) -> (Option<i32>, Option<Vec<Dim>>) {
    let Some(TypeProto {
        value: Some(type_proto::Value::TensorType(tensor)),
        ..
    }) = &value.r#type
    else {
        return (None, None);
    };
    let shape = tensor.shape.as_ref().map(|s| {
        s.dim
            .iter()
            .map(|d| match &d.value {
                Some(super::proto::tensor_shape_proto::dimension::Value::DimValue(v)) => {
                    Dim::Fixed(*v)
                }
                Some(super::proto::tensor_shape_proto::dimension::Value::DimParam(p)) => {
                    Dim::Symbolic(p.clone())
                }
                None => Dim::Unknown,
            })
            .collect()
    });
    (tensor.elem_type, shape)
}

/// Names used inside a subgraph that it does not define itself: its implicit outer-scope inputs.
fn outer_references(graph: &GraphProto, found: &mut HashSet<String>) {
    let mut defined: HashSet<&str> = graph.input.iter().map(|v| v.name()).collect();
    defined.extend(graph.initializer.iter().map(|t| t.name()));
    for node in &graph.node {
        defined.extend(node.output.iter().map(String::as_str));
    }
    for node in &graph.node {
        for input in &node.input {
            if !input.is_empty() && !defined.contains(input.as_str()) {
                found.insert(input.clone());
            }
        }
        for attribute in &node.attribute {
            for sub in attribute.g.iter().chain(&attribute.graphs) {
                let mut inner = HashSet::new();
                outer_references(sub, &mut inner);
                found.extend(inner.into_iter().filter(|n| !defined.contains(n.as_str())));
            }
        }
    }
}

fn subgraphs_of(node: &NodeProto) -> Vec<(String, usize)> {
    node.attribute
        .iter()
        .filter(|a| {
            matches!(a.r#type(), AttributeType::Graph | AttributeType::Graphs) || a.g.is_some()
        })
        .flat_map(|a| {
            a.g.iter()
                .chain(&a.graphs)
                .map(|g| (a.name().to_owned(), g.node.len()))
                .collect::<Vec<_>>()
        })
        .collect()
}

impl Graph {
    /// Indexes the main graph of `model`. Never fails: problems are listed in
    /// [`Graph::problems`].
    pub fn build(model: &Model) -> Graph {
        let graph = model.graph();
        let mut index = Graph {
            nodes: Vec::with_capacity(graph.node.len()),
            tensors: Vec::new(),
            by_tensor: HashMap::new(),
            by_node_name: HashMap::new(),
            order: Vec::new(),
            renamed: Vec::new(),
            problems: Vec::new(),
            inputs: Vec::new(),
            outputs: graph.output.iter().map(|v| v.name().to_owned()).collect(),
            parameters: 0,
            parameter_bytes: 0,
            reads: Vec::new(),
        };
        index.add_nodes(graph);
        index.add_tensors(graph, model.proto().ir_version());
        if graph.output.is_empty() {
            index.problems.push(GraphProblem::NoOutputs);
        }
        index.order_nodes();
        index
    }

    fn tensor_mut(&mut self, name: &str, kind: TensorKind) -> &mut TensorInfo {
        let at = *self.by_tensor.entry(name.to_owned()).or_insert_with(|| {
            self.tensors.push(TensorInfo {
                name: name.to_owned(),
                kind,
                elem_type: None,
                shape: None,
                producer: None,
                consumers: Vec::new(),
                is_output: false,
            });
            self.tensors.len() - 1
        });
        &mut self.tensors[at]
    }

    fn add_nodes(&mut self, graph: &GraphProto) {
        let existing: HashSet<&str> = graph
            .node
            .iter()
            .map(|n| n.name())
            .filter(|n| !n.is_empty())
            .collect();
        for (i, proto) in graph.node.iter().enumerate() {
            let id = NodeId(i);
            let original = proto.name().to_owned();
            let mut name = original.clone();
            let needs_name = name.is_empty() || self.by_node_name.contains_key(&name);
            if needs_name {
                let base = format!("{}_{}", proto.op_type(), i);
                name = base.clone();
                let mut suffix = 1;
                while existing.contains(name.as_str()) || self.by_node_name.contains_key(&name) {
                    name = format!("{base}_{suffix}");
                    suffix += 1;
                }
                self.renamed.push(Renamed {
                    id,
                    original: original.clone(),
                    name: name.clone(),
                });
            }
            self.by_node_name.insert(name.clone(), id);
            self.nodes.push(Node {
                id,
                name,
                auto_named: needs_name,
                op_type: proto.op_type().to_owned(),
                domain: proto.domain().to_owned(),
                inputs: proto.input.clone(),
                outputs: proto.output.clone(),
                subgraphs: subgraphs_of(proto),
                attributes: proto
                    .attribute
                    .iter()
                    .filter(|a| a.r#type() == AttributeType::Int)
                    .map(|a| (a.name().to_owned(), a.i()))
                    .collect(),
                attribute_names: proto
                    .attribute
                    .iter()
                    .map(|a| a.name().to_owned())
                    .collect(),
            });
        }
    }

    fn add_tensors(&mut self, graph: &GraphProto, ir_version: i64) {
        for init in &graph.initializer {
            if self.by_tensor.contains_key(init.name()) {
                self.problems.push(GraphProblem::Duplicate {
                    what: "initializer",
                    tensor: init.name().to_owned(),
                });
            }
            let info = self.tensor_mut(init.name(), TensorKind::Initializer);
            info.kind = TensorKind::Initializer;
            info.elem_type = init.data_type;
            info.shape = Some(init.dims.iter().map(|&d| Dim::Fixed(d)).collect());
            if let Ok(count) = element_count(init.name(), &init.dims) {
                self.parameters += count;
                self.parameter_bytes += super::dtype::DataType::from_onnx(init.data_type())
                    .map_or(0, |d| d.storage_bytes(count));
            }
        }
        let overridable = overridable_initializers(graph, ir_version);
        let mut inputs_seen = HashSet::new();
        for value in &graph.input {
            if !inputs_seen.insert(value.name()) {
                self.problems.push(GraphProblem::Duplicate {
                    what: "graph input",
                    tensor: value.name().to_owned(),
                });
            }
            let is_init = self.by_tensor.contains_key(value.name());
            let info = self.tensor_mut(value.name(), TensorKind::Input);
            if overridable.contains(value.name()) {
                info.kind = TensorKind::Overridable;
            }
            let (elem, shape) = shape_of(value);
            info.elem_type = info.elem_type.or(elem);
            info.shape = info.shape.take().or(shape);
            if !is_init {
                self.inputs.push(value.name().to_owned());
            }
        }
        for (i, proto) in graph.node.iter().enumerate() {
            let kind = if proto.op_type() == ops::CONSTANT && proto.domain().is_empty() {
                // A Constant node's tensor is a weight like any initializer.
                if let Some(value) = proto
                    .attribute
                    .iter()
                    .find(|a| a.name() == "value")
                    .and_then(|a| a.t.as_ref())
                    && let Ok(count) = element_count(value.name(), &value.dims)
                {
                    self.parameters += count;
                    self.parameter_bytes += super::dtype::DataType::from_onnx(value.data_type())
                        .map_or(0, |d| d.storage_bytes(count));
                }
                TensorKind::Constant
            } else {
                TensorKind::Activation
            };
            for output in proto.output.iter().filter(|o| !o.is_empty()) {
                let defined = self.by_tensor.get(output).map(|&at| &self.tensors[at]);
                if defined.is_some_and(|t| {
                    t.producer.is_some()
                        || matches!(
                            t.kind,
                            TensorKind::Input | TensorKind::Initializer | TensorKind::Overridable
                        )
                }) {
                    self.problems.push(GraphProblem::Redefined {
                        node: NodeId(i),
                        tensor: output.clone(),
                    });
                }
                let info = self.tensor_mut(output, kind);
                info.producer = Some(NodeId(i));
                // A Constant's type and dims are as declared as an initializer's.
                if let Some((elem, dims)) = super::constant::constant_type_and_dims(proto) {
                    info.elem_type = info.elem_type.or(Some(elem));
                    info.shape = info
                        .shape
                        .take()
                        .or_else(|| Some(dims.into_iter().map(Dim::Fixed).collect()));
                }
            }
        }
        for (i, proto) in graph.node.iter().enumerate() {
            let mut reads: Vec<String> = proto
                .input
                .iter()
                .filter(|n| !n.is_empty())
                .cloned()
                .collect();
            let mut implicit = HashSet::new();
            for attribute in &proto.attribute {
                for sub in attribute.g.iter().chain(&attribute.graphs) {
                    outer_references(sub, &mut implicit);
                }
            }
            let mut implicit: Vec<String> = implicit
                .into_iter()
                .filter(|n| self.by_tensor.contains_key(n))
                .collect();
            implicit.sort();
            reads.extend(implicit);
            let mut read_ids = Vec::with_capacity(reads.len());
            for input in reads {
                let info = self.tensor_mut(&input, TensorKind::Missing);
                if info.consumers.last() != Some(&NodeId(i)) {
                    info.consumers.push(NodeId(i));
                }
                if info.kind == TensorKind::Missing {
                    self.problems.push(GraphProblem::DanglingInput {
                        node: NodeId(i),
                        tensor: input.clone(),
                    });
                }
                read_ids.push(self.by_tensor[&input]);
            }
            self.reads.push(read_ids);
        }
        for value in graph.value_info.iter().chain(&graph.output) {
            let (elem, shape) = shape_of(value);
            if let Some(&at) = self.by_tensor.get(value.name()) {
                let info = &mut self.tensors[at];
                info.elem_type = info.elem_type.or(elem);
                if info.shape.is_none() {
                    info.shape = shape;
                }
            }
        }
        for output in &graph.output {
            let info = self.tensor_mut(output.name(), TensorKind::Missing);
            info.is_output = true;
        }
    }

    /// Kahn's algorithm, taking ready nodes in file order so that already sorted models keep
    /// their order.
    fn order_nodes(&mut self) {
        let n = self.nodes.len();
        let mut pending = vec![0usize; n];
        let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, reads) in self.reads.iter().enumerate() {
            let mut producers: Vec<usize> = reads
                .iter()
                .filter_map(|&t| self.tensors[t].producer)
                .map(|p| p.0)
                .filter(|&p| p != i)
                .collect();
            producers.sort_unstable();
            producers.dedup();
            pending[i] = producers.len();
            for p in producers {
                dependents[p].push(i);
            }
        }
        let mut ready: BinaryHeap<Reverse<usize>> =
            (0..n).filter(|&i| pending[i] == 0).map(Reverse).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(Reverse(i)) = ready.pop() {
            order.push(NodeId(i));
            for &d in &dependents[i] {
                pending[d] -= 1;
                if pending[d] == 0 {
                    ready.push(Reverse(d));
                }
            }
        }
        if order.len() < n {
            let placed: HashSet<NodeId> = order.iter().copied().collect();
            let stuck: Vec<NodeId> = (0..n)
                .map(NodeId)
                .filter(|id| !placed.contains(id))
                .collect();
            order.extend(stuck.iter().copied());
            self.problems.push(GraphProblem::Cycle { nodes: stuck });
        }
        self.order = order;
    }

    /// Every node, by id.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The node with this id.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.0]
    }

    /// The node with this effective name.
    pub fn node_by_name(&self, name: &str) -> Option<&Node> {
        self.by_node_name.get(name).map(|&id| self.node(id))
    }

    /// Every tensor the graph mentions.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor with this name.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.by_tensor.get(name).map(|&i| &self.tensors[i])
    }

    /// The number of dimensions `name` is declared with; 0 when its shape is not known.
    pub fn rank(&self, name: &str) -> usize {
        self.tensor(name)
            .and_then(|t| t.shape.as_ref())
            .map_or(0, Vec::len)
    }

    /// The node writing `tensor`, if a node does.
    pub fn producer_of(&self, tensor: &str) -> Option<&Node> {
        self.tensor(tensor)?.producer.map(|id| self.node(id))
    }

    /// True when `name` is a constant of this graph (see [`TensorKind::is_constant`]).
    pub fn is_constant(&self, name: &str) -> bool {
        self.tensor(name).is_some_and(|t| t.kind.is_constant())
    }

    /// Nodes in topological order (nodes on a cycle come last, in file order).
    pub fn topological_order(&self) -> &[NodeId] {
        &self.order
    }

    /// Graph inputs the user feeds (initializers listed as inputs are excluded).
    pub fn inputs(&self) -> &[String] {
        &self.inputs
    }

    /// Graph outputs.
    pub fn outputs(&self) -> &[String] {
        &self.outputs
    }

    /// Nodes that were given a name by the index.
    pub fn renamed(&self) -> &[Renamed] {
        &self.renamed
    }

    /// Structural problems found.
    pub fn problems(&self) -> &[GraphProblem] {
        &self.problems
    }

    /// The only node reading `tensor`, when exactly one does and it is not a graph output
    /// (so what flows through it reaches that node alone).
    pub fn sole_consumer(&self, tensor: &str) -> Option<NodeId> {
        let info = self.tensor(tensor)?;
        match info.consumers.as_slice() {
            [only] if !info.is_output => Some(*only),
            _ => None,
        }
    }

    /// True for an initializer (not an overridable one) that exactly one node reads and that
    /// is no graph output: changing its value changes that node alone.
    pub fn is_private_initializer(&self, name: &str) -> bool {
        self.tensor(name)
            .is_some_and(|t| t.kind == TensorKind::Initializer)
            && self.sole_consumer(name).is_some()
    }

    /// Total number of weight elements (initializers and Constant-node tensors).
    pub fn parameter_count(&self) -> u64 {
        self.parameters
    }

    /// Total bytes of weight data (initializers and Constant-node tensors).
    pub fn parameter_bytes(&self) -> u64 {
        self.parameter_bytes
    }

    /// Node counts per op type, keyed `op_type` for the default domain and `domain::op_type`
    /// otherwise, sorted by key.
    pub fn op_type_counts(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for node in &self.nodes {
            *counts
                .entry(qualified_op_type(&node.domain, &node.op_type))
                .or_insert(0) += 1;
        }
        counts
    }

    /// Turns the first structural problem into an error; engine passes that rewrite or run the
    /// graph call this first.
    pub fn check(&self) -> Result<(), ModelError> {
        match self.problems.first() {
            None => Ok(()),
            Some(GraphProblem::DanglingInput { node, tensor }) => {
                let node = self.node(*node);
                Err(ModelError::DanglingInput {
                    node: node.name.clone(),
                    op_type: node.op_type.clone(),
                    tensor: tensor.clone(),
                })
            }
            Some(GraphProblem::Redefined { node, tensor }) => {
                let node = self.node(*node);
                Err(ModelError::Redefined {
                    node: node.name.clone(),
                    op_type: node.op_type.clone(),
                    tensor: tensor.clone(),
                })
            }
            Some(GraphProblem::Duplicate { what, tensor }) => Err(ModelError::Duplicate {
                what,
                tensor: tensor.clone(),
            }),
            Some(GraphProblem::NoOutputs) => Err(ModelError::NoOutputs),
            Some(GraphProblem::Cycle { nodes }) => Err(ModelError::Cycle {
                count: nodes.len(),
                sample: nodes
                    .iter()
                    .take(3)
                    .map(|id| format!("'{}'", self.node(*id).name))
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }
}

/// `base`, or `base_2`, `base_3`, ...: the first name `taken` says is free, for a tensor or
/// node a rewrite adds.
pub fn free_name(base: &str, taken: impl Fn(&str) -> bool) -> String {
    std::iter::once(base.to_owned())
        .chain((2..).map(|k| format!("{base}_{k}")))
        .find(|n| !taken(n))
        .unwrap_or_default()
}

impl Graph {
    /// A name neither a tensor nor a node of this graph has, nor one `made` already (which it
    /// joins): `base`, else `base_2`, `base_3`, ...; for the tensors and nodes a rewrite adds.
    pub fn fresh_name(&self, made: &mut HashSet<String>, base: &str) -> String {
        let name = free_name(base, |n| {
            self.tensor(n).is_some() || self.node_by_name(n).is_some() || made.contains(n)
        });
        made.insert(name.clone());
        name
    }
}

/// Drops the initializers among `candidates` that no node reads and no graph output names.
pub fn drop_orphans(graph: &mut GraphProto, candidates: &HashSet<String>) {
    if candidates.is_empty() {
        return;
    }
    let read: HashSet<&str> = graph
        .node
        .iter()
        .flat_map(|n| n.input.iter().map(String::as_str))
        .chain(graph.output.iter().map(|o| o.name()))
        .collect();
    let orphans: HashSet<String> = candidates
        .iter()
        .filter(|c| !read.contains(c.as_str()))
        .cloned()
        .collect();
    graph.initializer.retain(|t| !orphans.contains(t.name()));
}

/// Removes the nodes at `indices`.
pub fn remove_nodes(graph: &mut GraphProto, indices: &HashSet<usize>) {
    let mut index = 0;
    graph.node.retain(|_| {
        let keep = !indices.contains(&index);
        index += 1;
        keep
    });
}

/// Puts `tensor` among `graph`'s initializers: it replaces the one of the same name, or is
/// added.
pub fn put_initializer(graph: &mut GraphProto, tensor: TensorProto) {
    match graph
        .initializer
        .iter_mut()
        .find(|t| t.name() == tensor.name())
    {
        Some(existing) => *existing = tensor,
        None => graph.initializer.push(tensor),
    }
}

/// The initializers a caller may override: those also listed as graph inputs, from IR 4 on
/// (before it every initializer had to be listed as an input too, and was a constant).
pub fn overridable_initializers(graph: &GraphProto, ir_version: i64) -> HashSet<&str> {
    if ir_version < 4 {
        return HashSet::new();
    }
    let inputs: HashSet<&str> = graph.input.iter().map(|i| i.name()).collect();
    graph
        .initializer
        .iter()
        .map(|t| t.name())
        .filter(|n| inputs.contains(n))
        .collect()
}

/// True for the default ONNX domain (`""` or `ai.onnx`).
pub fn is_default_domain(domain: &str) -> bool {
    domain.is_empty() || domain == "ai.onnx"
}

/// `op_type` for the default ONNX domain, `domain::op_type` otherwise.
pub fn qualified_op_type(domain: &str, op_type: &str) -> String {
    if is_default_domain(domain) {
        op_type.to_owned()
    } else {
        format!("{domain}::{op_type}")
    }
}
