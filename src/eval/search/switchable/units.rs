//! What each node of a QDQ variant computes, told in terms of the float model it was made
//! from. A unit is one node of the float model with the DequantizeLinear nodes in front of
//! its inputs and the QuantizeLinear nodes behind its outputs: the group ONNX Runtime fuses
//! into one integer kernel (QLinearConv, QLinearSoftmax, a Reshape on 8-bit values), so a
//! unit placed whole in a branch of the switchable model runs the kernel the variant's own
//! model runs. Units meet at values of the switchable model: a node's float output, or one
//! of its quantized outputs (one per distinct QuantizeLinear), read by the next unit's
//! DequantizeLinear.
//!
//! The variants are read back from the quantizer's own output rather than re-derived from its
//! rules: whatever the plan decides (shared scales, ranges that change when a neighbour stays
//! in float, Relu/Clip folded into a range), the switchable model reproduces it. Two variants
//! that compute the same thing at a unit give equal keys, so the model holds it once.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};

use prost::Message;

use crate::eval::search::switchable::NotSwitchable;
use crate::model::ops;
use crate::model::proto::{NodeProto, TensorProto};
use crate::model::{DataType, Graph, Model};

/// The prefix of every name the switchable model adds.
pub(super) const PREFIX: &str = "qdq_studio_switch";

/// A place whose computation may differ between variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Slot {
    /// The unit led by the node at this index of the float model's node list: that node and
    /// the nodes fused with it ([`fusion_groups`]), each with its input DQs and output Qs.
    Unit(usize),
    /// The graph output at this position (its float value or a dequantized one).
    Output(usize),
}

/// A value a form writes for other forms to read: its name in the switchable model and its
/// ONNX element type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Written {
    pub name: String,
    pub elem: i32,
}

/// What one slot computes in one variant: nodes in order that read the switchable model's
/// values by name and write [`Form::writes`]; every other tensor they use, the initializers
/// included, has an internal name (numbered in order, so equal computations are equal forms)
/// that placing the form renames.
#[derive(Debug, Clone, Default)]
pub(super) struct Form {
    pub nodes: Vec<NodeProto>,
    pub initializers: Vec<TensorProto>,
    /// The float model's initializers it reads (by their names): a branch holds copies of
    /// them, so that ONNX Runtime sees them as its constants (as it sees them in the variant's
    /// own model, and rewrites a float Conv for its blocked layout only then).
    pub shared: Vec<String>,
    pub writes: Vec<Written>,
    internal: usize,
    /// Constants computed in the form: the float model's name, the form's.
    folded: HashMap<String, String>,
}

/// The key equal forms share.
pub(super) type FormKey = Vec<u8>;

/// Every slot of one variant with the key and form it computes.
pub(super) type VariantForms = HashMap<Slot, (FormKey, Form)>;

/// Whether `name` is one a form gave a tensor of its own (renamed where the form is placed).
pub(super) fn is_internal(name: &str) -> bool {
    name.starts_with(PREFIX) && name[PREFIX.len()..].starts_with("_i")
}

/// The float model the variants are read against.
pub(super) struct Base {
    /// The float model's index.
    pub graph: Graph,
    /// Node index by name.
    by_name: HashMap<String, usize>,
    /// Element type of every tensor whose type is known.
    types: HashMap<String, i32>,
    /// The float model's initializers: a variant's initializer equal to one of them is read
    /// from the switchable model's copy.
    initializers: HashMap<String, TensorProto>,
    /// Graph outputs a node writes, by name: their position.
    outputs: HashMap<String, usize>,
    /// Per node, the index of the node that leads its unit.
    leader: Vec<usize>,
    /// The float model's nodes as written, by index: a variant's node is placed as its
    /// counterpart here is spelled (a variant of a lower opset may give an attribute where
    /// the switchable model's opset takes an input).
    protos: Vec<NodeProto>,
    /// Per node, whether it computes from constants alone (a Reshape of a bias): a unit
    /// reading it computes it in its own branch, where ONNX Runtime folds it to a constant
    /// and fuses with it as in the variant's own model (it does not see a value of the
    /// outer graph as constant).
    folded: Vec<bool>,
}

impl Base {
    /// The index over the prepared float model.
    pub fn new(model: &Model) -> Self {
        let graph = Graph::build(model);
        let types = crate::model::infer::elem_types(model, &graph);
        let by_name = graph
            .nodes()
            .iter()
            .map(|n| (n.name.clone(), n.id.0))
            .collect();
        let initializers = model
            .graph()
            .initializer
            .iter()
            .map(|t| (t.name().to_owned(), t.clone()))
            .collect();
        let outputs = graph
            .outputs()
            .iter()
            .enumerate()
            .filter(|(_, name)| graph.producer_of(name).is_some())
            .map(|(at, name)| (name.clone(), at))
            .collect();
        let leader = fusion_groups(&graph);
        let protos = model.graph().node.clone();
        let folded = constant_nodes(&graph);
        Base {
            folded,
            protos,
            graph,
            by_name,
            types,
            initializers,
            outputs,
            leader,
        }
    }

    /// The switchable model's name for the float value at `output` of the node at `node`:
    /// the float model's name, except that a graph output's producer writes a name of its own
    /// (the output slot writes the output itself).
    pub fn float_name(&self, node: usize, output: usize) -> Option<String> {
        let name = self
            .graph
            .node(crate::model::NodeId(node))
            .outputs
            .get(output)?;
        Some(if self.outputs.contains_key(name) {
            format!("{name}__{PREFIX}_float")
        } else {
            name.clone()
        })
    }

    /// The graph outputs a node writes (those with a slot), by position.
    pub fn output_slots(&self) -> impl Iterator<Item = usize> + '_ {
        self.outputs.values().copied()
    }

    fn elem(&self, name: &str) -> i32 {
        self.types
            .get(name)
            .copied()
            .unwrap_or(DataType::Float32.to_onnx())
    }
}

/// Activations ONNX Runtime fuses into the Conv or Gemm before them (its `FusedConv`, the
/// blocked-layout Conv's activation, `FusedGemm`).
const FUSED_ACTIVATIONS: [&str; 6] = [
    ops::RELU,
    ops::CLIP,
    ops::HARD_SIGMOID,
    ops::SIGMOID,
    ops::TANH,
    ops::LEAKY_RELU,
];

/// The node leading each node's unit: a Conv takes the Add that alone reads it (ONNX
/// Runtime's blocked-layout Conv adds it as its sum input, rounding differently from an Add
/// of its own) and then the activation that alone reads that; a MatMul takes the Add that
/// alone reads it (ONNX Runtime makes them a Gemm) and then an activation; a Gemm takes an
/// activation. Float regions of a variant are fused that way in its own model, so the
/// switchable model keeps each group in one branch to fuse alike.
fn fusion_groups(graph: &Graph) -> Vec<usize> {
    let mut leader: Vec<usize> = (0..graph.nodes().len()).collect();
    let follower = |node: &crate::model::Node, ops: &[&str], leader: &[usize]| {
        let output = node.outputs.first()?;
        let next = graph.node(graph.sole_consumer(output)?);
        // An Add both of whose inputs are Conv outputs joins the first Conv only.
        let free = leader[next.id.0] == next.id.0;
        (free && ops.contains(&next.op_type.as_str())).then_some(next.id.0)
    };
    for node in graph.nodes() {
        let adds: &[&str] = match node.op_type.as_str() {
            ops::CONV | ops::MAT_MUL => &[ops::ADD, ops::SUM],
            ops::GEMM => &[],
            _ => continue,
        };
        let mut last = node;
        if let Some(add) = follower(node, adds, &leader) {
            leader[add] = node.id.0;
            last = graph.node(crate::model::NodeId(add));
        }
        if let Some(activation) = follower(last, &FUSED_ACTIVATIONS, &leader) {
            leader[activation] = node.id.0;
        }
    }
    leader
}

/// Per node, whether it computes from constants alone.
fn constant_nodes(graph: &Graph) -> Vec<bool> {
    let mut folded = vec![false; graph.nodes().len()];
    for id in graph.topological_order() {
        let node = graph.node(*id);
        let random = node.op_type.starts_with("Random") || node.op_type == "Multinomial";
        folded[id.0] = !random
            && node.subgraphs.is_empty()
            && node.inputs.iter().filter(|i| !i.is_empty()).all(|input| {
                match graph.producer_of(input) {
                    Some(producer) => folded[producer.id.0],
                    None => graph.is_constant(input),
                }
            });
    }
    folded
}

/// Whether a node is a Q/DQ node the quantizer wrote.
fn is_qdq(node: &NodeProto) -> bool {
    ops::is_quantizer(node.op_type()) && matches!(node.domain(), "" | "ai.onnx" | "com.microsoft")
}

fn is_q(node: &NodeProto) -> bool {
    is_qdq(node) && node.op_type() == ops::QUANTIZE_LINEAR
}

fn is_dq(node: &NodeProto) -> bool {
    is_qdq(node) && node.op_type() == ops::DEQUANTIZE_LINEAR
}

/// A variant's producers, consumers, initializers and outputs by name.
struct Variant<'a> {
    producers: HashMap<&'a str, (&'a NodeProto, usize)>,
    consumers: HashMap<&'a str, Vec<&'a NodeProto>>,
    initializers: HashMap<&'a str, &'a TensorProto>,
    outputs: HashSet<&'a str>,
}

impl<'a> Variant<'a> {
    fn new(model: &'a Model) -> Self {
        let graph = model.graph();
        let mut producers = HashMap::new();
        let mut consumers: HashMap<&str, Vec<&NodeProto>> = HashMap::new();
        for node in &graph.node {
            for (at, output) in node.output.iter().enumerate() {
                producers.insert(output.as_str(), (node, at));
            }
            for input in &node.input {
                consumers.entry(input.as_str()).or_default().push(node);
            }
        }
        Variant {
            producers,
            consumers,
            initializers: graph.initializer.iter().map(|t| (t.name(), t)).collect(),
            outputs: graph.output.iter().map(|o| o.name()).collect(),
        }
    }

    /// Whether something reads `name` as it is (a node other than a QuantizeLinear, or the
    /// graph's outputs).
    fn read_as_float(&self, name: &str) -> bool {
        self.outputs.contains(name)
            || self
                .consumers
                .get(name)
                .is_some_and(|c| c.iter().any(|n| !is_q(n)))
    }

    /// The QuantizeLinear nodes reading `name`.
    fn quantizers(&self, name: &str) -> impl Iterator<Item = &'a NodeProto> + '_ {
        self.consumers
            .get(name)
            .into_iter()
            .flatten()
            .copied()
            .filter(|n| is_q(n))
    }
}

/// Reads `variant` (a QDQ model quantized from `base`'s model, or that model itself) unit by
/// unit. Units the variant lacks (a Relu folded into its producer's range) compute nothing.
pub(super) fn read(base: &Base, variant: &Model) -> Result<VariantForms, NotSwitchable> {
    let v = Variant::new(variant);
    let reader = Reader { base, v: &v };
    let mut forms: HashMap<Slot, Form> = HashMap::new();
    for node in &variant.graph().node {
        if is_qdq(node) {
            continue;
        }
        let index = base_index(base, node)?;
        let form = forms.entry(Slot::Unit(base.leader[index])).or_default();
        reader.unit(form, index, node)?;
    }
    for (index, &leader) in base.leader.iter().enumerate() {
        if index == leader {
            forms.entry(Slot::Unit(index)).or_default();
        }
    }
    for output in &variant.graph().output {
        let Some(&at) = base.outputs.get(output.name()) else {
            if base.graph.outputs().iter().any(|o| o == output.name()) {
                continue;
            }
            return Err(NotSwitchable(format!("output '{}' is new", output.name())));
        };
        forms.insert(Slot::Output(at), reader.output(output.name())?);
    }
    if let Some(at) = base
        .output_slots()
        .find(|at| !forms.contains_key(&Slot::Output(*at)))
    {
        return Err(NotSwitchable(format!(
            "output '{}' is missing",
            base.graph.outputs()[at]
        )));
    }
    keep_inside(&mut forms);
    forms
        .into_iter()
        .map(|(slot, form)| Ok((slot, keyed(form)?)))
        .collect()
}

/// Makes the values a unit writes and only the unit itself reads internal to it: a value
/// the branch gave out would be a second reader that keeps ONNX Runtime from fusing its
/// producer with the node that reads it.
fn keep_inside(forms: &mut HashMap<Slot, Form>) {
    let mut readers: HashMap<String, HashSet<Slot>> = HashMap::new();
    for (slot, form) in forms.iter() {
        for node in &form.nodes {
            for input in &node.input {
                readers.entry(input.clone()).or_default().insert(*slot);
            }
        }
    }
    for (slot, form) in forms.iter_mut() {
        let inside: Vec<String> = form
            .writes
            .iter()
            .filter(|w| {
                readers
                    .get(&w.name)
                    .is_some_and(|r| r.len() == 1 && r.contains(slot))
            })
            .map(|w| w.name.clone())
            .collect();
        for name in inside {
            let internal = form.internal();
            form.writes.retain(|w| w.name != name);
            for node in &mut form.nodes {
                for value in node.input.iter_mut().chain(node.output.iter_mut()) {
                    if *value == name {
                        value.clone_from(&internal);
                    }
                }
            }
        }
    }
}

/// The float model's index of a variant's (non-Q/DQ) node.
fn base_index(base: &Base, node: &NodeProto) -> Result<usize, NotSwitchable> {
    let &index = base.by_name.get(node.name()).ok_or_else(|| {
        NotSwitchable(format!(
            "the quantized model has a {} node ('{}') the float model lacks",
            node.op_type(),
            node.name()
        ))
    })?;
    let original = base.graph.node(crate::model::NodeId(index));
    if original.op_type != node.op_type()
        || node.input.len() > original.inputs.len()
        || node.output.len() > original.outputs.len()
    {
        return Err(NotSwitchable(format!(
            "node '{}' changed its op or its inputs and outputs in the quantized model",
            node.name()
        )));
    }
    Ok(index)
}

/// The key of a form: its nodes (names aside), its initializers' contents and what it writes.
fn keyed(form: Form) -> Result<(FormKey, Form), NotSwitchable> {
    let mut key = FormKey::new();
    for node in &form.nodes {
        let mut anonymous = node.clone();
        anonymous.name = None;
        anonymous
            .encode(&mut key)
            .map_err(|e| NotSwitchable(e.to_string()))?;
        key.push(b'\n');
    }
    for tensor in &form.initializers {
        key.extend_from_slice(tensor.name().as_bytes());
        key.extend_from_slice(&content_hash(tensor).to_le_bytes());
    }
    for name in &form.shared {
        key.extend_from_slice(name.as_bytes());
        key.push(b'|');
    }
    for written in &form.writes {
        key.extend_from_slice(written.name.as_bytes());
        key.push(b'|');
    }
    Ok((key, form))
}

impl Form {
    /// A fresh internal name.
    fn internal(&mut self) -> String {
        self.internal += 1;
        format!("{PREFIX}_i{}", self.internal)
    }

    /// Keeps a copy of `tensor` under an internal name, and returns that name.
    fn constant(&mut self, tensor: &TensorProto) -> String {
        let name = self.internal();
        let mut copy = tensor.clone();
        copy.name = Some(name.clone());
        self.initializers.push(copy);
        name
    }
}

/// Reads one form of a variant.
struct Reader<'a, 'v> {
    base: &'a Base,
    v: &'v Variant<'v>,
}

impl Reader<'_, '_> {
    /// Adds the node at `index` to `form`: its input DQs, the node, its output Qs.
    fn unit(&self, form: &mut Form, index: usize, node: &NodeProto) -> Result<(), NotSwitchable> {
        let mut copy = self
            .base
            .protos
            .get(index)
            .cloned()
            .unwrap_or_else(|| node.clone());
        copy.name = None;
        for (at, name) in node.input.iter().enumerate() {
            copy.input[at] = self.input(form, name)?;
        }
        // Inputs the variant's opset gave as attributes: the float model's own.
        for name in copy.input.iter_mut().skip(node.input.len()) {
            if !name.is_empty() {
                self.base_constant(form, name)?;
            }
        }
        for name in copy.output.iter_mut().skip(node.output.len()) {
            if !name.is_empty() {
                *name = form.internal();
            }
        }
        let mut quantizers = Vec::new();
        for (at, name) in node.output.iter().enumerate() {
            if name.is_empty() {
                continue;
            }
            let float = self.float_name(index, at, name)?;
            copy.output[at] = if self.v.read_as_float(name) {
                let elem = self
                    .base
                    .elem(&self.base.graph.node(crate::model::NodeId(index)).outputs[at]);
                form.writes.push(Written {
                    name: float.clone(),
                    elem,
                });
                float.clone()
            } else {
                form.internal()
            };
            let mut seen = HashSet::new();
            for q in self.v.quantizers(name) {
                let id = quantizer_id(q, self.v)?;
                if seen.insert(id) {
                    quantizers.push((q, copy.output[at].clone(), quantized_name(&float, id)));
                }
            }
        }
        form.nodes.push(copy);
        for (q, input, output) in quantizers {
            let elem = quantized_elem(q, self.v);
            self.copy(form, q, input, Some(output.clone()))?;
            form.writes.push(Written { name: output, elem });
        }
        Ok(())
    }

    /// The form of a graph output: its float value, or the dequantized value the variant gives.
    fn output(&self, name: &str) -> Result<Form, NotSwitchable> {
        let mut form = Form::default();
        let value = self.input(&mut form, name)?;
        let elem = self.base.elem(name);
        match form.nodes.last_mut() {
            Some(last) if last.output.first() == Some(&value) => {
                last.output = vec![name.to_owned()]
            }
            _ => form.nodes.push(NodeProto {
                op_type: Some("Identity".into()),
                input: vec![value],
                output: vec![name.to_owned()],
                ..Default::default()
            }),
        }
        form.writes.push(Written {
            name: name.to_owned(),
            elem,
        });
        Ok(form)
    }

    /// The switchable model's float name for output `at` (`name` in the variant) of the node
    /// at `index`.
    fn float_name(&self, index: usize, at: usize, name: &str) -> Result<String, NotSwitchable> {
        self.base
            .float_name(index, at)
            .ok_or_else(|| NotSwitchable(format!("tensor '{name}' has no float counterpart")))
    }

    /// The name a node reads for the variant's tensor `name`, adding the DequantizeLinear (and
    /// a QuantizeLinear of a graph input or constant) it reads through to `form`.
    fn input(&self, form: &mut Form, name: &str) -> Result<String, NotSwitchable> {
        if name.is_empty() {
            return Ok(String::new());
        }
        match self.v.producers.get(name) {
            Some((dq, _)) if is_dq(dq) => self.dequantized(form, dq),
            Some((q, _)) if is_q(q) => Err(NotSwitchable(format!(
                "'{name}' is read while still quantized"
            ))),
            Some((producer, at)) => {
                let index = base_index(self.base, producer)?;
                if self.base.folded[index] {
                    return self.fold(form, index, *at);
                }
                self.float_name(index, *at, name)
            }
            None => self.free(form, name),
        }
    }

    /// Output `at` of the constant-computing node at `index`, computed in `form` with the
    /// constant nodes it reads.
    fn fold(&self, form: &mut Form, index: usize, at: usize) -> Result<String, NotSwitchable> {
        let node = self.base.graph.node(crate::model::NodeId(index));
        let unknown = || NotSwitchable(format!("node '{}' has no output {at}", node.name));
        let name = node.outputs.get(at).ok_or_else(unknown)?;
        if let Some(done) = form.folded.get(name) {
            return Ok(done.clone());
        }
        let mut copy = self.base.protos.get(index).cloned().ok_or_else(unknown)?;
        copy.name = None;
        for input in copy.input.iter_mut().filter(|i| !i.is_empty()) {
            match self.base.graph.producer_of(input) {
                Some(producer) => {
                    *input = self.fold(form, producer.id.0, output_at(producer, input))?
                }
                None => self.base_constant(form, input)?,
            }
        }
        for output in copy.output.iter_mut().filter(|o| !o.is_empty()) {
            let internal = form.internal();
            form.folded.insert(output.clone(), internal.clone());
            *output = internal;
        }
        form.nodes.push(copy);
        form.folded.get(name).cloned().ok_or_else(unknown)
    }

    /// A tensor no node writes: a graph input, the float model's initializer, or a constant
    /// of the variant's own (kept in the form).
    fn free(&self, form: &mut Form, name: &str) -> Result<String, NotSwitchable> {
        if let Some(tensor) = self.v.initializers.get(name) {
            if self.base.initializers.get(name) == Some(*tensor) {
                self.base_constant(form, name)?;
                return Ok(name.to_owned());
            }
            return Ok(form.constant(tensor));
        }
        if self.base.graph.inputs().iter().any(|i| i == name) {
            return Ok(name.to_owned());
        }
        Err(NotSwitchable(format!(
            "tensor '{name}' has no float counterpart"
        )))
    }

    /// A constant of the float model a node reads there and not in the variant.
    fn base_constant(&self, form: &mut Form, name: &str) -> Result<(), NotSwitchable> {
        if !self.base.initializers.contains_key(name) {
            return Err(NotSwitchable(format!(
                "'{name}' is no constant of the float model"
            )));
        }
        if !form.shared.iter().any(|n| n == name) {
            form.shared.push(name.to_owned());
        }
        Ok(())
    }

    /// A DequantizeLinear over a quantized constant, over the quantized output of a unit, or
    /// over a QuantizeLinear of a graph input or constant (computed here).
    fn dequantized(&self, form: &mut Form, dq: &NodeProto) -> Result<String, NotSwitchable> {
        let quantized = dq.input.first().map(String::as_str).unwrap_or_default();
        let value = if let Some(tensor) = self.v.initializers.get(quantized) {
            form.constant(tensor)
        } else {
            match self.v.producers.get(quantized) {
                Some((q, _)) if is_q(q) => self.quantized(form, q)?,
                _ => {
                    return Err(NotSwitchable(format!(
                        "DequantizeLinear '{}' reads neither a constant nor a QuantizeLinear",
                        dq.name()
                    )));
                }
            }
        };
        self.copy(form, dq, value, None)
    }

    /// The value a QuantizeLinear `q` writes: a unit's quantized output, or computed here over
    /// a graph input or constant.
    fn quantized(&self, form: &mut Form, q: &NodeProto) -> Result<String, NotSwitchable> {
        let float = q.input.first().map(String::as_str).unwrap_or_default();
        match self.v.producers.get(float) {
            Some((producer, _)) if is_qdq(producer) => Err(NotSwitchable(format!(
                "'{float}' is quantized again after being dequantized"
            ))),
            Some((producer, at)) => {
                let index = base_index(self.base, producer)?;
                let name = self.float_name(index, *at, float)?;
                Ok(quantized_name(&name, quantizer_id(q, self.v)?))
            }
            None => {
                let input = self.free(form, float)?;
                self.copy(form, q, input, None)
            }
        }
    }

    /// Adds a copy of the Q or DQ `node` reading `input` (its other inputs: the variant's
    /// constants) and writing `output` (an internal name when `None`); returns what it writes.
    fn copy(
        &self,
        form: &mut Form,
        node: &NodeProto,
        input: String,
        output: Option<String>,
    ) -> Result<String, NotSwitchable> {
        let mut copy = node.clone();
        copy.name = None;
        for (at, name) in copy.input.iter_mut().enumerate() {
            if at == 0 {
                name.clone_from(&input);
            } else if !name.is_empty() {
                let tensor = self.v.initializers.get(name.as_str()).ok_or_else(|| {
                    NotSwitchable(format!("'{}' reads '{name}', not a constant", node.name()))
                })?;
                *name = form.constant(tensor);
            }
        }
        let output = output.unwrap_or_else(|| form.internal());
        copy.output = vec![output.clone()];
        form.nodes.push(copy);
        Ok(output)
    }
}

/// The position of `name` among `node`'s outputs.
fn output_at(node: &crate::model::Node, name: &str) -> usize {
    node.outputs
        .iter()
        .position(|o| o == name)
        .unwrap_or_default()
}

/// The switchable model's name for the quantized value a QuantizeLinear numbered `id` makes
/// of the float value `float`.
fn quantized_name(float: &str, id: u64) -> String {
    format!("{float}__{PREFIX}_q{id:016x}")
}

/// A number telling QuantizeLinear nodes apart by what they compute: their attributes and the
/// values of their scale and zero point.
fn quantizer_id(q: &NodeProto, v: &Variant) -> Result<u64, NotSwitchable> {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    q.op_type().hash(&mut hasher);
    q.domain().hash(&mut hasher);
    for attribute in &q.attribute {
        attribute.encode_to_vec().hash(&mut hasher);
    }
    for name in q.input.iter().skip(1) {
        let tensor = v.initializers.get(name.as_str()).ok_or_else(|| {
            NotSwitchable(format!("'{}' reads '{name}', not a constant", q.name()))
        })?;
        content_hash(tensor).hash(&mut hasher);
    }
    Ok(hasher.finish())
}

/// The element type a QuantizeLinear writes: its zero point's, else its `output_dtype`, else
/// uint8.
fn quantized_elem(q: &NodeProto, v: &Variant) -> i32 {
    if let Some(zero) = q.input.get(2).and_then(|n| v.initializers.get(n.as_str())) {
        return zero.data_type();
    }
    q.attribute
        .iter()
        .find(|a| a.name() == "output_dtype")
        .and_then(|a| a.i)
        .map(|i| i as i32)
        .filter(|&i| i != 0)
        .unwrap_or(DataType::Uint8.to_onnx())
}

/// A hash of a tensor's type, shape and values (its name aside).
fn content_hash(tensor: &TensorProto) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    tensor.dims.hash(&mut hasher);
    tensor.data_type.hash(&mut hasher);
    tensor.raw_data.hash(&mut hasher);
    tensor.int32_data.hash(&mut hasher);
    tensor.int64_data.hash(&mut hasher);
    tensor.uint64_data.hash(&mut hasher);
    tensor.string_data.hash(&mut hasher);
    for f in &tensor.float_data {
        f.to_bits().hash(&mut hasher);
    }
    for d in &tensor.double_data {
        d.to_bits().hash(&mut hasher);
    }
    for entry in &tensor.external_data {
        entry.key.hash(&mut hasher);
        entry.value.hash(&mut hasher);
    }
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ModelBuilder, TensorArray};

    fn weight(values: usize) -> TensorArray {
        TensorArray::Float32(ndarray::ArrayD::zeros(vec![values]))
    }

    /// Conv → Add → Relu and MatMul → Add fuse; a Conv read twice and a Reshape of a
    /// constant do not lead units; the Reshape of a constant computes from constants alone.
    fn model() -> Model {
        let mut b = ModelBuilder::new(17);
        b.input("x", DataType::Float32, &[1, 4, 8, 8]);
        b.initializer("w", weight(16));
        b.initializer("bias", weight(4));
        b.initializer(
            "shape",
            TensorArray::Int64(ndarray::arr1(&[1i64, 4, 1, 1]).into_dyn()),
        );
        b.node("Conv", &["x", "w"], &["c0"]).name("conv0");
        b.node("Reshape", &["bias", "shape"], &["b"])
            .name("reshape");
        b.node("Add", &["c0", "b"], &["a0"]).name("add0");
        b.node("Relu", &["a0"], &["r0"]).name("relu0");
        b.node("Conv", &["r0", "w"], &["c1"]).name("conv1");
        b.node("Relu", &["c1"], &["r1"]).name("relu1");
        b.node("Sigmoid", &["c1"], &["s1"]).name("sigmoid1");
        b.node("MatMul", &["s1", "w"], &["m"]).name("matmul");
        b.node("Add", &["m", "r1"], &["y"]).name("add1");
        b.output("y", DataType::Float32, &[]);
        b.build()
    }

    #[test]
    fn units_hold_what_onnx_runtime_fuses_and_constant_chains_are_known() {
        let model = model();
        let graph = Graph::build(&model);
        let index = |name: &str| graph.node_by_name(name).unwrap().id.0;
        let leader = fusion_groups(&graph);
        let leads = |name: &str| leader[index(name)];
        assert_eq!(leads("add0"), index("conv0"));
        assert_eq!(leads("relu0"), index("conv0"));
        // conv1's output has two readers: nothing fuses with it.
        assert_eq!(leads("relu1"), index("relu1"));
        assert_eq!(leads("sigmoid1"), index("sigmoid1"));
        assert_eq!(leads("add1"), index("matmul"));
        let folded = constant_nodes(&graph);
        assert!(folded[index("reshape")]);
        assert!(!folded[index("conv0")] && !folded[index("add0")]);
    }

    #[test]
    fn the_float_model_reads_as_one_form_per_unit_with_fused_values_kept_inside() {
        let model = model();
        let base = Base::new(&model);
        let forms = read(&base, &model).unwrap();
        let graph = &base.graph;
        let index = |name: &str| graph.node_by_name(name).unwrap().id.0;
        let (_, first) = &forms[&Slot::Unit(index("conv0"))];
        let ops: Vec<&str> = first.nodes.iter().map(|n| n.op_type()).collect();
        // The bias Reshape is computed in the unit; the Conv's and the Add's outputs stay
        // inside it; only the Relu's is given out.
        assert_eq!(ops, ["Conv", "Reshape", "Add", "Relu"]);
        let written: Vec<&str> = first.writes.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(written, ["r0"]);
        assert_eq!(first.shared, ["w", "bias", "shape"]);
        // Nodes that lead no unit have no slot of their own; the graph output has one, read
        // from its producer's renamed float value.
        assert!(!forms.contains_key(&Slot::Unit(index("add0"))));
        let (_, output) = &forms[&Slot::Output(0)];
        assert_eq!(output.nodes[0].input, [format!("y__{PREFIX}_float")]);
        // Equal computations give equal keys.
        let again = read(&base, &model).unwrap();
        for (slot, (key, _)) in &forms {
            assert_eq!(&again[slot].0, key);
        }
    }
}
